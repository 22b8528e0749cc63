//! Merge semantics beyond last-writer-wins (issue 13, docs/MERGE.md), on
//! real processes linked through proxies that partition them.

mod common;

use common::proxy::Proxy;
use common::*;

/// A node's counter parts as DEBUG MERGEINFO shows them.
fn merge_info(c: &mut redis::Connection, key: &str) -> Vec<String> {
    cmd(c, &["DEBUG", "MERGEINFO", key])
}

/// The seed's case (KeyDB's field report): a counter at 1, a partition,
/// one INCR on one node and three on the other; after the heal both read
/// 5, not 2 or 4.
#[test]
fn the_seed_counter_case_gives_five_on_both_nodes() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: () = cmd(&mut a, &["SET", "counter", "1"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["INCR", "counter"]);
    for _ in 0..3 {
        let _: i64 = cmd(&mut b, &["INCR", "counter"]);
    }
    assert_eq!(cmd::<i64>(&mut a, &["GET", "counter"]), 2);
    assert_eq!(cmd::<i64>(&mut b, &["GET", "counter"]), 4);
    p.heal();
    eventually("both nodes to read 5", || {
        cmd::<i64>(&mut a, &["GET", "counter"]) == 5 && cmd::<i64>(&mut b, &["GET", "counter"]) == 5
    });
    converged(&[&p.a, &p.b]);
    // Each node's part is visible, and the same on both.
    let info = merge_info(&mut a, "counter");
    assert!(info.contains(&"type:counter".to_string()), "{info:?}");
    let parts = info.iter().find(|l| l.starts_with("parts:")).unwrap();
    assert_eq!(parts.split(',').count(), 2, "{info:?}");
    assert_eq!(info, merge_info(&mut b, "counter"));
}

/// Decrements and INCRBY/DECRBY merge too, and a key no node had before
/// the partition counts from 0 on both.
#[test]
fn increments_and_decrements_of_a_new_key_add_up() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    p.partition();
    for _ in 0..4 {
        let _: i64 = cmd(&mut a, &["INCRBY", "fresh", "7"]);
        let _: i64 = cmd(&mut b, &["DECR", "fresh"]);
    }
    let _: i64 = cmd(&mut b, &["DECRBY", "fresh", "100"]);
    p.heal();
    eventually("both nodes to read 28 - 4 - 100", || {
        cmd::<i64>(&mut a, &["GET", "fresh"]) == -76 && cmd::<i64>(&mut b, &["GET", "fresh"]) == -76
    });
    converged(&[&p.a, &p.b]);
}

/// A SET concurrent with increments elsewhere resets what it saw: the
/// increments it had not seen survive it (k=10; A: SET k 0, B: INCR -> 1).
#[test]
fn a_set_resets_only_the_increments_it_saw() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: () = cmd(&mut a, &["SET", "k", "10"]);
    let _: i64 = cmd(&mut b, &["INCRBY", "k", "5"]);
    converged(&[&p.a, &p.b]);
    assert_eq!(cmd::<i64>(&mut a, &["GET", "k"]), 15);
    p.partition();
    let _: () = cmd(&mut a, &["SET", "k", "0"]);
    let _: i64 = cmd(&mut b, &["INCR", "k"]);
    p.heal();
    eventually("both nodes to read 1", || {
        cmd::<i64>(&mut a, &["GET", "k"]) == 1 && cmd::<i64>(&mut b, &["GET", "k"]) == 1
    });
    converged(&[&p.a, &p.b]);
}

/// A DEL removes the increments it saw; a concurrent increment elsewhere
/// brings the key back with its own growth only. Without one, it stays
/// deleted on both.
#[test]
fn a_delete_removes_what_it_saw_and_keeps_a_concurrent_increment() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["INCRBY", "gone", "40"]);
    let _: i64 = cmd(&mut a, &["INCRBY", "back", "40"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["DEL", "gone", "back"]);
    let _: i64 = cmd(&mut b, &["INCRBY", "back", "2"]);
    p.heal();
    eventually("back to read 2 on both", || {
        cmd::<Option<i64>>(&mut a, &["GET", "back"]) == Some(2)
            && cmd::<Option<i64>>(&mut b, &["GET", "back"]) == Some(2)
    });
    converged(&[&p.a, &p.b]);
    assert_eq!(cmd::<Option<i64>>(&mut b, &["GET", "gone"]), None);
}

/// Three nodes in a mesh, all incrementing one counter, half of the time
/// with every link cut: the sum of every acknowledged increment.
#[test]
fn a_mesh_of_three_counts_every_increment_across_a_partition() {
    let nodes: Vec<Server> = (0..3)
        .map(|_| active_node(&["--multi-master", "yes"]))
        .collect();
    // proxies[i][j]: what node j pulls from node i.
    let proxies: Vec<Vec<Proxy>> = nodes
        .iter()
        .map(|n| (0..3).map(|_| Proxy::start(n.port)).collect())
        .collect();
    for (j, n) in nodes.iter().enumerate() {
        for (i, row) in proxies.iter().enumerate() {
            if i != j {
                pull(n, row[j].port);
            }
        }
    }
    for n in &nodes {
        wait_linked(n, 2);
    }
    let mut conns: Vec<_> = nodes.iter().map(|n| n.conn()).collect();
    let mut want = 0i64;
    for round in 0..20i64 {
        if round == 10 {
            proxies.iter().flatten().for_each(Proxy::cut);
        }
        for (i, c) in conns.iter_mut().enumerate() {
            let by = round * 3 + i as i64 - 7;
            let _: i64 = cmd(c, &["INCRBY", "total", &by.to_string()]);
            want += by;
        }
    }
    proxies.iter().flatten().for_each(Proxy::heal);
    eventually("every node to read the sum", || {
        conns
            .iter_mut()
            .all(|c| cmd::<i64>(c, &["GET", "total"]) == want)
    });
    let refs: Vec<&Server> = nodes.iter().collect();
    converged(&refs);
}

/// A node restarted from its RDB in the middle of a counter workload loses
/// no increment: its file holds each node's part (the `lattice-merge` aux
/// field), and what it counted after its save comes back from its peer.
#[test]
fn a_restart_from_the_rdb_in_the_middle_of_a_counter_workload_loses_nothing() {
    let dir = tempdir("merge-rdb");
    let dir_arg = dir.to_str().unwrap().to_string();
    let a = active_node(&["--dir", &dir_arg]);
    let b = active_node(&[]);
    pull(&a, b.port);
    pull(&b, a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    let (mut ca, mut cb) = (a.conn(), b.conn());
    let mut want = 0;
    for i in 0..30 {
        let _: i64 = cmd(&mut ca, &["INCRBY", "c", &i.to_string()]);
        let _: i64 = cmd(&mut cb, &["INCRBY", "c", "100"]);
        want += i + 100;
    }
    both_read(&mut ca, &mut cb, want);
    let () = cmd(&mut ca, &["SAVE"]);
    for _ in 0..5 {
        let _: i64 = cmd(&mut ca, &["INCR", "c"]); // not in A's file
        let _: i64 = cmd(&mut cb, &["INCR", "c"]);
        want += 2;
    }
    // Both hold every part (equal digests could be a coincidence of sums).
    both_read(&mut ca, &mut cb, want);
    drop(ca);
    drop(a);
    for _ in 0..7 {
        let _: i64 = cmd(&mut cb, &["DECR", "c"]); // while A is down
        want -= 1;
    }
    let port = b.port.to_string();
    let a = active_node(&["--dir", &dir_arg, "--replicaof", "127.0.0.1", &port]);
    pull(&b, a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    let mut ca = a.conn();
    let _: i64 = cmd(&mut ca, &["INCRBY", "c", "1000"]);
    want += 1000;
    both_read(&mut ca, &mut cb, want);
    converged(&[&a, &b]);
}

/// Waits until both nodes read `want` at `c`.
fn both_read(ca: &mut redis::Connection, cb: &mut redis::Connection, want: i64) {
    eventually(&format!("both nodes to read {want}"), || {
        cmd::<i64>(ca, &["GET", "c"]) == want && cmd::<i64>(cb, &["GET", "c"]) == want
    });
}
