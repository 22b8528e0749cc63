//! Active replication (issue 12 items 4 and 10): tombstones go once every
//! node is past them (DECISIONS 52), a node away longer than the grace is
//! refused, and a node whose clock runs ahead neither wins later writes nor
//! confuses expiry (DECISIONS 53). Real processes; faults from the proxy
//! in tests/common/proxy.rs, clock skew from DEBUG CLOCK-OFFSET.

mod common;

use std::time::Duration;

use common::*;

fn tombstones(c: &mut redis::Connection) -> i64 {
    info_field(c, "active_tombstones")
}

fn get(c: &mut redis::Connection, key: &str) -> Option<String> {
    cmd(c, &["GET", key])
}

/// The key's stamp (DEBUG OBJECT's `lattice_version`).
fn version(c: &mut redis::Connection, key: &str) -> u64 {
    let line: String = cmd(c, &["DEBUG", "OBJECT", key]);
    let v = line.split("lattice_version:").nth(1).expect("a version");
    v.split_whitespace().next().unwrap().parse().unwrap()
}

fn link_down(c: &mut redis::Connection) {
    eventually("the link to go down", || {
        let info: String = cmd(c, &["INFO", "replication"]);
        info.contains("state=connecting")
    });
}

#[test]
fn tombstones_go_once_both_nodes_are_past_them_and_an_older_write_held_back_stays_deleted() {
    // The default grace (300 s): whatever goes here goes by stability.
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    // b writes k while its stream to a is held; a then writes and deletes
    // k, which b hears of (its own link is free).
    p.pb.freeze();
    let _: () = cmd(&mut b, &["SET", "k", "old"]);
    std::thread::sleep(Duration::from_millis(5));
    let _: () = cmd(&mut a, &["SET", "k", "new"]);
    let _: i64 = cmd(&mut a, &["DEL", "k"]);
    eventually("b to hear of the delete", || get(&mut b, "k").is_none());
    // b's older write may still arrive at a: a keeps the tombstone.
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(tombstones(&mut a), 1);
    p.pb.thaw();
    converged(&[&p.a, &p.b]);
    assert_eq!(get(&mut a, "k"), None);
    assert_eq!(get(&mut b, "k"), None);
    // Both have seen everything: the tombstones go, long before the grace.
    eventually("the tombstones to be collected", || {
        tombstones(&mut a) == 0 && tombstones(&mut b) == 0
    });
    for c in [&mut a, &mut b] {
        assert_eq!(info_field::<i64>(c, "active_tombstones_forced"), 0);
    }
    assert!(info_field::<i64>(&mut a, "active_tombstones_collected") >= 1);
    assert!(info_field::<u64>(&mut a, "active_stable_stamp") > 0);
    // The stamp read as a time: today's (an hour's slack for a slow box).
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let stable_ms = info_field::<u64>(&mut a, "active_stable_unix_ms");
    assert!(
        now_ms.abs_diff(stable_ms) < 3_600_000,
        "{stable_ms} vs {now_ms}"
    );
    let lag: i64 = info_field(&mut a, "active_stable_lag_ms");
    assert!(lag >= 0, "{lag}");
    converged(&[&p.a, &p.b]);
}

#[test]
fn a_partitioned_peer_blocks_collection_until_it_returns() {
    let p = Pair::start(&[]);
    let mut a = p.a.conn();
    for i in 0..20 {
        let _: () = cmd(&mut a, &["SET", &format!("t{i}"), "v"]);
    }
    converged(&[&p.a, &p.b]);
    p.partition();
    link_down(&mut a);
    for i in 0..20 {
        let _: i64 = cmd(&mut a, &["DEL", &format!("t{i}")]);
    }
    // b has not heard of the deletes: a keeps them.
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(tombstones(&mut a), 20);
    p.heal();
    converged(&[&p.a, &p.b]);
    let mut b = p.b.conn();
    eventually("the tombstones to be collected on both", || {
        tombstones(&mut a) == 0 && tombstones(&mut b) == 0
    });
    let n: i64 = cmd(&mut b, &["DBSIZE"]);
    assert_eq!(n, 0);
    assert_eq!(info_field::<i64>(&mut a, "active_tombstones_forced"), 0);
}

#[test]
fn a_peer_away_longer_than_the_grace_is_refused_and_rejoins_empty() {
    let grace = ["--active-tombstone-grace", "3"];
    let p = Pair::start(&grace);
    let mut a = p.a.conn();
    let _: () = cmd(&mut a, &["SET", "k", "v"]);
    let _: () = cmd(&mut a, &["SET", "kept", "v"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    link_down(&mut a);
    // b changes k, then a deletes it: a's delete is the newer.
    let _: i64 = cmd(&mut p.b.conn(), &["APPEND", "k", "-b"]);
    std::thread::sleep(Duration::from_millis(5));
    let _: i64 = cmd(&mut a, &["DEL", "k"]);
    // Past the grace the tombstone goes although b never heard of it.
    eventually("the tombstone to be collected anyway", || {
        info_field::<i64>(&mut a, "active_tombstones_forced") == 1
    });
    p.heal();
    let why = "longer than active-tombstone-grace";
    eventually("b to be refused", || p.b.log().contains(why));
    eventually("a to refuse b's stream", || p.a.log().contains(why));
    // b still holds its older k; it does not come back to a.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(get(&mut p.b.conn(), "k").as_deref(), Some("v-b"));
    assert_eq!(get(&mut a, "k"), None);
    // b started again empty (a new node id) is welcome.
    let Pair {
        a: na,
        b: nb,
        pa,
        pb,
    } = p;
    drop((nb, pa, pb));
    let b = active_node(&grace);
    pull(&na, b.port);
    pull(&b, na.port);
    wait_linked(&b, 1);
    converged(&[&na, &b]);
    let mut c = b.conn();
    assert_eq!(get(&mut c, "k"), None);
    assert_eq!(get(&mut c, "kept").as_deref(), Some("v"));
}

#[test]
fn writes_after_a_node_whose_clock_runs_5_s_ahead_win_and_its_ttls_hold() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: () = cmd(&mut a, &["DEBUG", "CLOCK-OFFSET", "5000"]);
    let _: () = cmd(&mut a, &["SET", "k", "from-a"]);
    let va = version(&mut a, "k");
    eventually("a's write at b", || get(&mut b, "k").is_some());
    // b's stamps follow a's from now on: on the same key and any other.
    let _: () = cmd(&mut b, &["SET", "other", "x"]);
    assert!(version(&mut b, "other") > va);
    let _: () = cmd(&mut b, &["SET", "k", "from-b"]);
    converged(&[&p.a, &p.b]);
    assert_eq!(get(&mut a, "k").as_deref(), Some("from-b"));
    // A conflict across a partition: b writes once a's stamp is in b's
    // past, and wins (a's clock wins only within its skew, not forever).
    p.partition();
    link_down(&mut a);
    let _: () = cmd(&mut a, &["SET", "c", "from-a"]);
    let ms = version(&mut a, "c") >> 22;
    eventually("b's clock to pass a's stamp", || {
        let t: Vec<u64> = cmd(&mut b, &["TIME"]);
        t[0] * 1000 + t[1] / 1000 > ms
    });
    let _: () = cmd(&mut b, &["SET", "c", "from-b"]);
    p.heal();
    converged(&[&p.a, &p.b]);
    assert_eq!(get(&mut a, "c").as_deref(), Some("from-b"));
    // The offset moves stamps only: a TTL set on a is the same on both,
    // and a short one runs out on both.
    let _: () = cmd(&mut a, &["SET", "e", "v", "EX", "100"]);
    let _: () = cmd(&mut a, &["SET", "short", "v", "PX", "1500"]);
    let ttl: i64 = cmd(&mut a, &["TTL", "e"]);
    assert!((90..=100).contains(&ttl), "{ttl}");
    eventually("the keys at b", || get(&mut b, "e").is_some());
    // The same deadline on both (compared as such: the replication may
    // take seconds on a loaded machine, and a TTL counts them).
    let at: Vec<i64> = [&mut a, &mut b]
        .into_iter()
        .map(|c| cmd(c, &["PEXPIRETIME", "e"]))
        .collect();
    assert_eq!(at[0], at[1]);
    eventually("the short key to expire on both", || {
        get(&mut a, "short").is_none() && get(&mut b, "short").is_none()
    });
    converged(&[&p.a, &p.b]);
}

#[test]
fn a_skew_beyond_the_limit_is_refused_and_nothing_diverges() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: () = cmd(&mut b, &["CONFIG", "SET", "active-max-clock-skew", "2000"]);
    let _: () = cmd(&mut a, &["DEBUG", "CLOCK-OFFSET", "5000"]);
    let _: () = cmd(&mut a, &["SET", "ahead", "v"]);
    eventually("b to refuse a's stamp", || {
        p.b.log().contains("ahead of this node's clock")
    });
    assert_eq!(get(&mut b, "ahead"), None);
    // b's writes still reach a (its stamps are behind a's clock).
    let _: () = cmd(&mut b, &["SET", "behind", "w"]);
    eventually("b's write at a", || get(&mut a, "behind").is_some());
    // Allowed again, b goes on from the record it refused: nothing lost.
    let _: () = cmd(&mut b, &["CONFIG", "SET", "active-max-clock-skew", "60000"]);
    converged(&[&p.a, &p.b]);
    assert_eq!(get(&mut b, "ahead").as_deref(), Some("v"));
}

/// Nodes linked both ways along `edges`, each deleting keys the others
/// wrote: every tombstone goes on every node without the grace (records
/// reach the far nodes only forwarded, and so do the frontiers).
fn tombstones_go_along(n: usize, edges: &[(usize, usize)]) {
    let nodes: Vec<Server> = (0..n)
        .map(|_| active_node(&["--multi-master", "yes"]))
        .collect();
    for &(i, j) in edges {
        pull(&nodes[i], nodes[j].port);
        pull(&nodes[j], nodes[i].port);
    }
    let refs: Vec<&Server> = nodes.iter().collect();
    for (i, node) in nodes.iter().enumerate() {
        let _: () = cmd(&mut node.conn(), &["SET", &format!("k{i}"), "v"]);
    }
    converged(&refs);
    for (i, node) in nodes.iter().enumerate() {
        let _: i64 = cmd(&mut node.conn(), &["DEL", &format!("k{}", (i + 1) % n)]);
    }
    converged(&refs);
    let mut conns: Vec<_> = nodes.iter().map(|s| s.conn()).collect();
    eventually("every tombstone to be collected on every node", || {
        conns.iter_mut().all(|c| tombstones(c) == 0)
    });
    for c in &mut conns {
        assert_eq!(info_field::<i64>(c, "active_tombstones_forced"), 0);
        assert_eq!(cmd::<i64>(c, &["DBSIZE"]), 0);
    }
}

#[test]
fn tombstones_go_along_a_chain_of_three() {
    tombstones_go_along(3, &[(0, 1), (1, 2)]);
}

#[test]
fn tombstones_go_around_a_ring_of_five() {
    tombstones_go_along(5, &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)]);
}
