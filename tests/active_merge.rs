//! Merge semantics beyond last-writer-wins (issue 13, docs/MERGE-DESIGN.md), on
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
    // proxies[i][j]: what node j pulls from node i.
    let (nodes, proxies) = mesh(3);
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
            .all(|c| cmd::<Option<i64>>(c, &["GET", "total"]) == Some(want))
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

/// As above, from the AOF (every write fsynced, no RDB): the per-node
/// parts A merged from B travel in the AOF as merge-state annotations
/// after the writes that made the joins, so A neither loses B's
/// increments nor counts them twice when B's state comes again.
#[test]
fn a_restart_from_the_aof_in_the_middle_of_a_counter_workload_loses_nothing() {
    let dir = tempdir("merge-aof");
    let dir_arg = dir.to_str().unwrap().to_string();
    let aof = [
        "--dir",
        &dir_arg,
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
    ];
    let a = active_node(&aof);
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
    drop(ca);
    drop(a); // SIGKILL: only the AOF is left
    for _ in 0..7 {
        let _: i64 = cmd(&mut cb, &["DECR", "c"]); // while A is down
        want -= 1;
    }
    let port = b.port.to_string();
    let mut args = aof.to_vec();
    args.extend(["--replicaof", "127.0.0.1", &port]);
    let a = active_node(&args);
    let mut ca = a.conn();
    pull(&b, a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    let _: i64 = cmd(&mut ca, &["INCRBY", "c", "1000"]);
    want += 1000;
    both_read(&mut ca, &mut cb, want);
    converged(&[&a, &b]);
}

/// Waits until both nodes read `want` at `c`.
fn both_read(ca: &mut redis::Connection, cb: &mut redis::Connection, want: i64) {
    eventually(&format!("both nodes to read {want}"), || {
        let read = |c: &mut redis::Connection| cmd::<Option<i64>>(c, &["GET", "c"]);
        read(ca) == Some(want) && read(cb) == Some(want)
    });
}

/// Sorted members of a set.
fn members(c: &mut redis::Connection, key: &str) -> Vec<String> {
    let mut m: Vec<String> = cmd(c, &["SMEMBERS", key]);
    m.sort();
    m
}

/// Adds and removes of different members on both sides of a partition
/// all survive; a member one side removed and the other re-added stays
/// (add-wins); a DEL removes only what its node had seen.
#[test]
fn sets_keep_concurrent_adds_and_removes() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["SADD", "s", "a", "b", "c", "m"]);
    let _: i64 = cmd(&mut a, &["SADD", "d", "old1", "old2"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["SADD", "s", "x"]);
    let _: i64 = cmd(&mut a, &["SREM", "s", "b", "m"]);
    let _: i64 = cmd(&mut b, &["SADD", "s", "y", "m"]);
    let _: i64 = cmd(&mut b, &["SREM", "s", "c"]);
    let _: i64 = cmd(&mut a, &["DEL", "d"]);
    let _: i64 = cmd(&mut b, &["SADD", "d", "new"]);
    p.heal();
    let want = ["a", "m", "x", "y"];
    eventually("both nodes to hold the merged set", || {
        members(&mut a, "s") == want && members(&mut b, "s") == want
    });
    eventually("the DEL to keep the concurrent add", || {
        members(&mut a, "d") == ["new"] && members(&mut b, "d") == ["new"]
    });
    converged(&[&p.a, &p.b]);
}

/// Hash fields: different fields written on both sides all survive, the
/// same field takes the later write, HDEL removes what it saw.
#[test]
fn hashes_merge_per_field() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(
        &mut a,
        &["HSET", "h", "keep", "1", "gone", "2", "both", "0"],
    );
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["HSET", "h", "fa", "A", "both", "from-a"]);
    let _: i64 = cmd(&mut b, &["HDEL", "h", "gone"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let _: i64 = cmd(&mut b, &["HSET", "h", "fb", "B", "both", "from-b"]);
    p.heal();
    let want: Vec<(String, String)> = [("both", "from-b"), ("fa", "A"), ("fb", "B"), ("keep", "1")]
        .iter()
        .map(|(f, v)| (f.to_string(), v.to_string()))
        .collect();
    let fields = |c: &mut redis::Connection| {
        let mut h: Vec<(String, String)> = cmd(c, &["HGETALL", "h"]);
        h.sort();
        h
    };
    eventually("both nodes to hold the merged hash", || {
        fields(&mut a) == want && fields(&mut b) == want
    });
    converged(&[&p.a, &p.b]);
}

/// Sorted sets: members added and removed on both sides, a score set on
/// both sides takes the later one.
#[test]
fn sorted_sets_merge_per_member() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["ZADD", "z", "1", "one", "2", "two", "3", "three"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["ZADD", "z", "10", "ten", "20", "two"]);
    let _: i64 = cmd(&mut b, &["ZREM", "z", "three"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let _: i64 = cmd(&mut b, &["ZADD", "z", "22", "two", "5", "five"]);
    p.heal();
    let want = ["one", "1", "five", "5", "ten", "10", "two", "22"];
    eventually("both nodes to hold the merged sorted set", || {
        let ra: Vec<String> = cmd(&mut a, &["ZRANGE", "z", "0", "-1", "WITHSCORES"]);
        let rb: Vec<String> = cmd(&mut b, &["ZRANGE", "z", "0", "-1", "WITHSCORES"]);
        ra == want && rb == want
    });
    converged(&[&p.a, &p.b]);
}

/// A 3-node mesh, every node adding and removing members of one set and
/// fields of one hash while every link is cut: each node's adds survive,
/// each node's removes of what it had seen hold.
#[test]
fn a_mesh_of_three_merges_sets_and_hashes_across_a_partition() {
    // proxies[i][j]: what node j pulls from node i.
    let (nodes, proxies) = mesh(3);
    let mut conns: Vec<_> = nodes.iter().map(|n| n.conn()).collect();
    let _: i64 = cmd(&mut conns[0], &["SADD", "s", "n0", "n1", "n2"]);
    let _: i64 = cmd(
        &mut conns[0],
        &["HSET", "h", "n0", "x", "n1", "x", "n2", "x"],
    );
    let refs: Vec<&Server> = nodes.iter().collect();
    converged(&refs);
    proxies.iter().flatten().for_each(Proxy::cut);
    for (i, c) in conns.iter_mut().enumerate() {
        // Node i removes its own member and field, adds two new ones.
        let (own, a, b) = (format!("n{i}"), format!("add{i}a"), format!("add{i}b"));
        let _: i64 = cmd(c, &["SREM", "s", &own]);
        let _: i64 = cmd(c, &["SADD", "s", &a, &b]);
        let _: i64 = cmd(c, &["HDEL", "h", &own]);
        let _: i64 = cmd(c, &["HSET", "h", &a, &i.to_string()]);
    }
    proxies.iter().flatten().for_each(Proxy::heal);
    let want: Vec<String> = (0..3)
        .flat_map(|i| [format!("add{i}a"), format!("add{i}b")])
        .collect();
    eventually("every node to hold every add and no removed member", || {
        conns.iter_mut().all(|c| members(c, "s") == want)
    });
    let fields = |c: &mut redis::Connection| {
        let mut f: Vec<String> = cmd(c, &["HKEYS", "h"]);
        f.sort();
        f
    };
    let want_fields: Vec<String> = (0..3).map(|i| format!("add{i}a")).collect();
    eventually("every node to hold every field added", || {
        conns.iter_mut().all(|c| fields(c) == want_fields)
    });
    converged(&refs);
}

/// Lists: pushes at both ends on both sides of a partition all survive, in
/// one order on both nodes (heads newest first, tails oldest first); a pop
/// removes only the element its node saw; an LINSERT lands after the
/// element it was put after.
#[test]
fn lists_keep_concurrent_pushes_in_one_order() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["RPUSH", "l", "x", "y", "z"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["LPUSH", "l", "a-head"]);
    let _: i64 = cmd(&mut a, &["RPUSH", "l", "a-tail"]);
    let _: String = cmd(&mut a, &["LPOP", "l"]); // a-head, its own push
    let _: i64 = cmd(&mut a, &["LINSERT", "l", "AFTER", "x", "a-mid"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let _: i64 = cmd(&mut b, &["LPUSH", "l", "b-head"]);
    let _: i64 = cmd(&mut b, &["RPUSH", "l", "b-tail"]);
    let _: String = cmd(&mut b, &["RPOP", "l"]); // b-tail, its own push
    let _: String = cmd(&mut b, &["LPOP", "l"]); // b-head
    let _: String = cmd(&mut b, &["LPOP", "l"]); // x, which A also kept
    p.heal();
    let want = ["a-mid", "y", "z", "a-tail"];
    let range = |c: &mut redis::Connection| -> Vec<String> { cmd(c, &["LRANGE", "l", "0", "-1"]) };
    eventually("both nodes to hold the merged list", || {
        range(&mut a) == want && range(&mut b) == want
    });
    converged(&[&p.a, &p.b]);
}

/// A 3-node mesh, each node pushing to both ends of one list while every
/// link is cut: every push survives, and every node lists them in the
/// same order.
#[test]
fn a_mesh_of_three_keeps_every_push() {
    let (nodes, proxies) = mesh(3);
    let mut conns: Vec<_> = nodes.iter().map(|n| n.conn()).collect();
    let _: i64 = cmd(&mut conns[0], &["RPUSH", "l", "base"]);
    let refs: Vec<&Server> = nodes.iter().collect();
    converged(&refs);
    proxies.iter().flatten().for_each(Proxy::cut);
    for (i, c) in conns.iter_mut().enumerate() {
        let _: i64 = cmd(c, &["LPUSH", "l", &format!("h{i}")]);
        let _: i64 = cmd(c, &["RPUSH", "l", &format!("t{i}a"), &format!("t{i}b")]);
    }
    proxies.iter().flatten().for_each(Proxy::heal);
    let range = |c: &mut redis::Connection| -> Vec<String> { cmd(c, &["LRANGE", "l", "0", "-1"]) };
    eventually("every node to hold every push, in one order", || {
        let first = range(&mut conns[0]);
        let mut sorted = first.clone();
        sorted.sort();
        let all = [
            "base", "h0", "h1", "h2", "t0a", "t0b", "t1a", "t1b", "t2a", "t2b",
        ];
        sorted == all && conns.iter_mut().all(|c| range(c) == first)
    });
    let l = range(&mut conns[0]);
    let at = |v: &str| l.iter().position(|x| x == v).unwrap();
    for i in 0..3 {
        assert!(at(&format!("h{i}")) < at("base"), "{l:?}");
        assert!(at("base") < at(&format!("t{i}a")), "{l:?}");
        assert!(at(&format!("t{i}a")) + 1 == at(&format!("t{i}b")), "{l:?}");
    }
    converged(&refs);
}

/// The `conflicts=` count of a node's link (key states it asked for).
fn conflicts(c: &mut redis::Connection) -> u64 {
    let info: String = cmd(c, &["INFO", "replication"]);
    let line = info
        .lines()
        .find(|l| l.starts_with("peer0:"))
        .expect("a peer line");
    let field = line
        .split(',')
        .find(|f| f.starts_with("conflicts="))
        .unwrap();
    field["conflicts=".len()..].parse().unwrap()
}

/// Increments travel as facts (keyspace/merge/fact.rs, issue 24): both
/// nodes of a pair increment and decrement the same counters at once; each
/// applies the other's increments as they come, asking for no key's state,
/// and both end equal with every increment counted. (Sets, hashes and
/// sorted sets emit no facts yet: `fact::ELEMENT_FACTS`.)
#[test]
fn increments_travel_as_facts_without_asking_for_state() {
    let p = Pair::start(&[]);
    let writes = |c: &mut redis::Connection, side: i64| {
        for i in 0..300i64 {
            let mut pipe = redis::pipe();
            pipe.cmd("INCRBY").arg(format!("c{}", i % 5)).arg(side + 1);
            pipe.cmd("DECR").arg(format!("c{}", (i + 2) % 5));
            pipe.cmd("INCR").arg(format!("c{}", (i + 1) % 5));
            let _: () = pipe.query(c).unwrap();
        }
    };
    std::thread::scope(|s| {
        let (a, b) = (&p.a, &p.b);
        s.spawn(move || writes(&mut a.conn(), 0));
        s.spawn(move || writes(&mut b.conn(), 1));
    });
    converged(&[&p.a, &p.b]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let total = |c: &mut redis::Connection| -> i64 {
        (0..5)
            .map(|k| cmd::<i64>(c, &["GET", &format!("c{k}")]))
            .sum()
    };
    assert_eq!(
        total(&mut a),
        300 + 600,
        "every increment of both nodes counted"
    );
    assert_eq!(total(&mut b), 300 + 600);
    assert_eq!(
        (conflicts(&mut a), conflicts(&mut b)),
        (0, 0),
        "no key state asked for"
    );
}

/// Field, score and float increments travel as facts too (HINCRBY,
/// HINCRBYFLOAT, ZINCRBY, ZADD INCR, INCRBYFLOAT): each node counts into
/// its own keys, then into the other's once it has them, and neither asks
/// for a key's state; every increment is in the sums on both nodes.
#[test]
fn field_and_float_increments_travel_as_facts_without_asking_for_state() {
    let p = Pair::start(&[]);
    let writes = |c: &mut redis::Connection, side: &str| {
        for i in 0..100u64 {
            let (h, z, f) = (format!("h{side}"), format!("z{side}"), format!("f{side}"));
            let mut pipe = redis::pipe();
            pipe.cmd("HINCRBY")
                .arg(&h)
                .arg(format!("n{}", i % 7))
                .arg(2);
            pipe.cmd("HINCRBYFLOAT")
                .arg(&h)
                .arg(format!("x{}", i % 5))
                .arg("0.25");
            pipe.cmd("ZINCRBY")
                .arg(&z)
                .arg(1.5)
                .arg(format!("m{}", i % 11));
            pipe.cmd("ZADD")
                .arg(&z)
                .arg("INCR")
                .arg(0.5)
                .arg(format!("m{}", i % 3));
            pipe.cmd("INCRBYFLOAT").arg(&f).arg("0.75");
            let _: () = pipe.query(c).unwrap();
        }
    };
    std::thread::scope(|s| {
        let (a, b) = (&p.a, &p.b);
        s.spawn(move || writes(&mut a.conn(), "a"));
        s.spawn(move || writes(&mut b.conn(), "b"));
    });
    converged(&[&p.a, &p.b]);
    // Now each counts into the other's keys.
    writes(&mut p.a.conn(), "b");
    converged(&[&p.a, &p.b]);
    writes(&mut p.b.conn(), "a");
    converged(&[&p.a, &p.b]);
    for c in [&mut p.a.conn(), &mut p.b.conn()] {
        for side in ["a", "b"] {
            let h: Vec<(String, f64)> = cmd(c, &["HGETALL", &format!("h{side}")]);
            let sum = |prefix: &str| -> f64 {
                (h.iter().filter(|(k, _)| k.starts_with(prefix)))
                    .map(|(_, v)| v)
                    .sum()
            };
            assert_eq!(sum("n"), 2.0 * 200.0, "HINCRBY on h{side}");
            assert_eq!(sum("x"), 0.25 * 200.0, "HINCRBYFLOAT on h{side}");
            let z: Vec<(String, f64)> =
                cmd(c, &["ZRANGE", &format!("z{side}"), "0", "-1", "WITHSCORES"]);
            let total: f64 = z.iter().map(|(_, s)| s).sum();
            assert_eq!(total, 2.0 * 200.0, "ZINCRBY and ZADD INCR on z{side}");
            let f: f64 = cmd(c, &["GET", &format!("f{side}")]);
            assert_eq!(f, 0.75 * 200.0, "INCRBYFLOAT on f{side}");
        }
    }
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    assert_eq!(
        (conflicts(&mut a), conflicts(&mut b)),
        (0, 0),
        "no key state asked for"
    );
}

/// A queue fed on one node and drained on the other (LPUSH there, RPOP
/// here, and the reverse): every element is taken once and both nodes end
/// with the same lists, and no node asks for the list's state (pushes and
/// pops travel as facts).
#[test]
fn a_queue_fed_on_one_node_and_drained_on_the_other_takes_each_element_once() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    for i in 0..150 {
        let _: () = cmd(&mut a, &["LPUSH", "qa", &format!("job{i}"), "x"]);
        let _: () = cmd(&mut b, &["RPUSH", "qb", &format!("job{i}")]);
    }
    converged(&[&p.a, &p.b]);
    let mut taken = Vec::new();
    for _ in 0..100 {
        let v: Option<String> = cmd(&mut b, &["RPOP", "qa"]);
        taken.extend(v);
        let v: Vec<String> = cmd(&mut a, &["LPOP", "qb", "1"]);
        taken.extend(v);
    }
    // After the pops have arrived (a push made before them here would be
    // newer than they: they would then come as states).
    converged(&[&p.a, &p.b]);
    let _: () = cmd(&mut a, &["LPUSH", "qa", "last"]);
    converged(&[&p.a, &p.b]);
    assert_eq!(taken.len(), 200);
    for c in [&mut a, &mut b] {
        let la: i64 = cmd(c, &["LLEN", "qa"]);
        let lb: i64 = cmd(c, &["LLEN", "qb"]);
        assert_eq!((la, lb), (300 - 100 + 1, 150 - 100));
        let head: String = cmd(c, &["LINDEX", "qa", "0"]);
        assert_eq!(head, "last");
    }
    assert_eq!(
        (conflicts(&mut a), conflicts(&mut b)),
        (0, 0),
        "no key state asked for"
    );
}

/// Set, hash and sorted-set writes travel as facts too: each node writes
/// its own keys, then the other's once it has them (every write newer than
/// the key it finds), and neither asks for a key's state.
#[test]
fn collection_writes_travel_as_facts_without_asking_for_state() {
    let p = Pair::start(&[]);
    let writes = |c: &mut redis::Connection, side: &str| {
        for i in 0..200u64 {
            let (s, h, z) = (format!("s{side}"), format!("h{side}"), format!("z{side}"));
            let mut pipe = redis::pipe();
            pipe.cmd("SADD")
                .arg(&s)
                .arg(format!("m{}", i % 17))
                .arg("again");
            pipe.cmd("SREM").arg(&s).arg(format!("m{}", (i + 5) % 17));
            pipe.cmd("HSET").arg(&h).arg(format!("f{}", i % 7)).arg(i);
            pipe.cmd("HDEL").arg(&h).arg(format!("f{}", (i + 3) % 7));
            pipe.cmd("ZADD").arg(&z).arg(i).arg(format!("m{}", i % 11));
            pipe.cmd("ZREM").arg(&z).arg(format!("m{}", (i + 4) % 11));
            let _: () = pipe.query(c).unwrap();
        }
    };
    std::thread::scope(|s| {
        let (a, b) = (&p.a, &p.b);
        s.spawn(move || writes(&mut a.conn(), "a"));
        s.spawn(move || writes(&mut b.conn(), "b"));
    });
    converged(&[&p.a, &p.b]);
    // Now each writes the other's keys.
    writes(&mut p.a.conn(), "b");
    converged(&[&p.a, &p.b]);
    writes(&mut p.b.conn(), "a");
    converged(&[&p.a, &p.b]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    assert_eq!(members(&mut a, "sa"), members(&mut b, "sa"));
    assert!(members(&mut a, "sa").contains(&"again".to_string()));
    assert_eq!(
        (conflicts(&mut a), conflicts(&mut b)),
        (0, 0),
        "no key state asked for"
    );
}
