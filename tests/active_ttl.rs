//! Writes on sets, hashes and sorted sets with a TTL, and the TTL writes
//! themselves (EXPIRE and its family, PERSIST), as facts (issue 24 item 1;
//! keyspace/merge/ttl.rs, `fact::TTL_FACTS`): on an active pair of real
//! processes, the peer applies them with no round trip for the key's state
//! (INFO's `conflicts=` stays 0), and the TTL rules of docs/MERGE-DESIGN.md hold
//! on a partitioned pair (a write that did not touch the TTL leaves it,
//! the longest TTL wins, PERSIST wins, a TTL write that saw another
//! replaces it, SET resets the whole key).

mod common;

use common::*;

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
        .expect("a conflicts field");
    field["conflicts=".len()..].parse().expect("a count")
}

/// Each key's absolute expiry (PEXPIRETIME: -1 none, -2 absent).
fn expiries(c: &mut redis::Connection, keys: &[String]) -> Vec<i64> {
    keys.iter()
        .map(|k| cmd::<i64>(c, &["PEXPIRETIME", k]))
        .collect()
}

/// The cache pattern on both nodes of a pair at once: a hash, a set and a
/// sorted set per key written, given a TTL, written again, their TTL
/// renewed, some persisted; then each node writes the other's keys. No
/// node asks for a key's state, and both end with the same values and
/// expiries.
#[test]
fn writes_on_keys_with_a_ttl_travel_as_facts_without_asking_for_state() {
    let p = Pair::start(&[]);
    let writes = |c: &mut redis::Connection, side: &str, of: &str| {
        for i in 0..100 {
            let (h, s, z) = (
                format!("h:{of}{i}"),
                format!("s:{of}{i}"),
                format!("z:{of}{i}"),
            );
            let mut pipe = redis::pipe();
            pipe.cmd("HSET").arg(&h).arg("f").arg(side);
            pipe.cmd("EXPIRE").arg(&h).arg(100 + i);
            pipe.cmd("HSET").arg(&h).arg(side).arg(i);
            pipe.cmd("HINCRBY").arg(&h).arg("n").arg(1);
            pipe.cmd("SADD").arg(&s).arg(side).arg("x");
            pipe.cmd("PEXPIRE").arg(&s).arg(200_000 + i);
            pipe.cmd("SREM").arg(&s).arg("x");
            pipe.cmd("ZADD").arg(&z).arg(1).arg(side);
            pipe.cmd("EXPIREAT")
                .arg(&z)
                .arg(4_000_000_000u64 + i as u64);
            pipe.cmd("ZADD").arg(&z).arg(2).arg("m");
            if i % 3 == 0 {
                pipe.cmd("PERSIST").arg(&h);
                pipe.cmd("HDEL").arg(&h).arg("f");
            }
            if i % 4 == 0 {
                pipe.cmd("EXPIRE").arg(&s).arg(50);
            }
            let _: () = pipe.query(c).unwrap();
        }
    };
    std::thread::scope(|sc| {
        let (a, b) = (&p.a, &p.b);
        sc.spawn(move || writes(&mut a.conn(), "a", "a"));
        sc.spawn(move || writes(&mut b.conn(), "b", "b"));
    });
    converged(&[&p.a, &p.b]);
    // Now each node writes the keys the other made (it has them).
    std::thread::scope(|sc| {
        let (a, b) = (&p.a, &p.b);
        sc.spawn(move || writes(&mut a.conn(), "a", "b"));
        sc.spawn(move || writes(&mut b.conn(), "b", "a"));
    });
    converged(&[&p.a, &p.b]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let keys: Vec<String> = (0..100)
        .flat_map(|i| ["h:a", "s:a", "z:a", "h:b", "s:b", "z:b"].map(|k| format!("{k}{i}")))
        .collect();
    let (at_a, at_b) = (expiries(&mut a, &keys), expiries(&mut b, &keys));
    assert_eq!(at_a, at_b, "the same expiry on both nodes");
    assert!(at_a.iter().all(|&t| t != -2), "every key present");
    assert_eq!(at_a[0], -1, "h:a0 persisted");
    assert!(at_a[6] > 0, "h:a1 keeps a TTL");
    assert_eq!(
        (conflicts(&mut a), conflicts(&mut b)),
        (0, 0),
        "no key state asked for"
    );
}

/// The TTL rules on a partitioned pair, for a hash, a set and a sorted set
/// whose writes travel as facts on both sides before and after the heal.
#[test]
fn a_ttl_register_merges_by_its_rules_on_a_partitioned_pair() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let keys: Vec<String> = ["kept", "longest", "persisted", "shortened", "reset"]
        .map(String::from)
        .to_vec();
    for k in &keys {
        let _: i64 = cmd(&mut a, &["HSET", k, "f", "v"]);
    }
    let _: i64 = cmd(&mut a, &["EXPIRE", "shortened", "5000"]);
    let _: i64 = cmd(&mut a, &["EXPIRE", "reset", "5000"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    // Absolute expiries, so that both nodes' answers compare exactly.
    let t0 = 4_000_000_000i64;
    let at = |secs: i64| (t0 + secs).to_string();
    let _: i64 = cmd(&mut a, &["EXPIREAT", "kept", &at(1000)]);
    let _: i64 = cmd(&mut b, &["HSET", "kept", "g", "w"]);
    let _: i64 = cmd(&mut a, &["EXPIREAT", "longest", &at(1000)]);
    let _: i64 = cmd(&mut b, &["EXPIREAT", "longest", &at(5000)]);
    let _: i64 = cmd(&mut a, &["EXPIREAT", "persisted", &at(9000)]);
    let _: i64 = cmd(&mut b, &["EXPIREAT", "persisted", &at(3000)]);
    let _: i64 = cmd(&mut b, &["PERSIST", "persisted"]);
    let _: i64 = cmd(&mut b, &["HSET", "persisted", "g", "w"]);
    p.heal();
    converged(&[&p.a, &p.b]);
    let ms = |secs: i64| (t0 + secs) * 1000;
    // A TTL write that saw the longer one replaces it; SET resets the key
    // (no TTL, a string), on both nodes.
    let _: i64 = cmd(&mut b, &["EXPIREAT", "shortened", &at(100)]);
    let _: () = cmd(&mut b, &["SET", "reset", "s"]);
    let _: i64 = cmd(&mut a, &["HSET", "kept", "h", "x"]);
    converged(&[&p.a, &p.b]);
    let want = vec![ms(1000), ms(5000), -1, ms(100), -1];
    assert_eq!(expiries(&mut a, &keys), want);
    assert_eq!(expiries(&mut b, &keys), want);
    for c in [&mut a, &mut b] {
        let n: i64 = cmd(c, &["HLEN", "kept"]);
        assert_eq!(n, 3, "kept has f, g and h");
        let n: i64 = cmd(c, &["HLEN", "persisted"]);
        assert_eq!(n, 2);
        let t: String = cmd(c, &["TYPE", "reset"]);
        assert_eq!(t, "string");
    }
    // After the heal the writes travelled as facts again: a TTL write and
    // a write under a TTL, each on a key the other node wrote last.
    let asked = (conflicts(&mut a), conflicts(&mut b));
    // (Each node's write after the other's has arrived: not concurrent.)
    let _: i64 = cmd(&mut a, &["EXPIREAT", "longest", &at(7000)]);
    converged(&[&p.a, &p.b]);
    let _: i64 = cmd(&mut b, &["HSET", "longest", "g", "w"]);
    let _: i64 = cmd(&mut a, &["SADD", "set", "m"]);
    let _: i64 = cmd(&mut a, &["EXPIREAT", "set", &at(10)]);
    let _: i64 = cmd(&mut a, &["ZADD", "zset", "1", "m"]);
    let _: i64 = cmd(&mut a, &["EXPIREAT", "zset", &at(20)]);
    converged(&[&p.a, &p.b]);
    let _: i64 = cmd(&mut b, &["SADD", "set", "n"]);
    let _: i64 = cmd(&mut b, &["PERSIST", "zset"]);
    converged(&[&p.a, &p.b]);
    let more: Vec<String> = ["longest", "set", "zset"].map(String::from).to_vec();
    let want = vec![ms(7000), ms(10), -1];
    assert_eq!(expiries(&mut a, &more), want);
    assert_eq!(expiries(&mut b, &more), want);
    assert_eq!(
        (conflicts(&mut a), conflicts(&mut b)),
        asked,
        "no key state asked for after the heal"
    );
}

/// Counters with a TTL (made by SET EX: the TTL is the reset's) take
/// increments as facts on both nodes at once; the TTL stays, every
/// increment counts, and no key state is asked for.
#[test]
fn increments_of_a_counter_with_a_ttl_travel_as_facts() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let keys: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    for k in &keys {
        let _: () = cmd(&mut a, &["SET", k, "10", "PXAT", "4000000000000"]);
    }
    converged(&[&p.a, &p.b]);
    let writes = |c: &mut redis::Connection| {
        for i in 0..200 {
            let mut pipe = redis::pipe();
            pipe.cmd("INCR").arg(format!("c{}", i % 20));
            pipe.cmd("INCRBY").arg(format!("c{}", (i + 7) % 20)).arg(2);
            let _: () = pipe.query(c).unwrap();
        }
    };
    std::thread::scope(|sc| {
        let (a, b) = (&p.a, &p.b);
        sc.spawn(move || writes(&mut a.conn()));
        sc.spawn(move || writes(&mut b.conn()));
    });
    converged(&[&p.a, &p.b]);
    for c in [&mut a, &mut b] {
        let sum: i64 = keys.iter().map(|k| cmd::<i64>(c, &["GET", k])).sum();
        assert_eq!(sum, 20 * 10 + 2 * (200 + 400));
        assert_eq!(expiries(c, &keys), vec![4_000_000_000_000; 20]);
    }
    assert_eq!(
        (conflicts(&mut a), conflicts(&mut b)),
        (0, 0),
        "no key state asked for"
    );
}

/// Both nodes of `p` answer `read` of each key with `want`, then converge.
fn both_answer(p: &Pair, read: &str, keys: &[&str], want: &[i64]) {
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let of = |c: &mut redis::Connection| -> Vec<i64> {
        keys.iter().map(|k| cmd::<i64>(c, &[read, k])).collect()
    };
    eventually(&format!("{read} {keys:?} = {want:?} on both"), || {
        of(&mut a) == want && of(&mut b) == want
    });
    converged(&[&p.a, &p.b]);
}

/// Writes on a counter that are not increments reset it (docs/MERGE-DESIGN.md
/// section 2), and travel as facts of that reset (keyspace/merge/reset.rs,
/// `fact::RESET_FACTS`): on a partitioned pair, an increment on one side
/// and a reset on the other, either first, end with the increment counted
/// on top of the reset's value (k=10; A: SET k 0, B: INCR -> 1), the key
/// taking the reset's TTL, and no key state asked for: each side applies
/// the other's write as it comes (a reset older than the key where it
/// arrives joins all the same; an increment applies at any age).
#[test]
fn a_counter_reset_keeps_the_increments_it_had_not_seen_with_no_state_asked() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let keys = ["set", "append", "setex", "expire", "getset", "persist"];
    for k in keys {
        let _: i64 = cmd(&mut a, &["INCRBY", k, "10"]);
    }
    let _: i64 = cmd(&mut a, &["EXPIRE", "persist", "1000"]);
    converged(&[&p.a, &p.b]);
    let t = "4000000000000";
    p.partition();
    // The first three keys' resets come first, the others' after B's INCR.
    let incr = |b: &mut redis::Connection, keys: &[&str]| {
        std::thread::sleep(std::time::Duration::from_millis(5));
        for k in keys {
            let _: i64 = cmd(b, &["INCR", k]);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    incr(&mut b, &keys[3..]);
    let _: () = cmd(&mut a, &["SET", "set", "0"]);
    let _: i64 = cmd(&mut a, &["APPEND", "append", "1"]);
    let _: () = cmd(&mut a, &["SET", "setex", "0", "PXAT", t]);
    incr(&mut b, &keys[..3]);
    let _: i64 = cmd(&mut a, &["PEXPIREAT", "expire", t]);
    let _: String = cmd(&mut a, &["GETSET", "getset", "3"]);
    let _: i64 = cmd(&mut a, &["PERSIST", "persist"]);
    p.heal();
    both_answer(&p, "GET", &keys, &[1, 102, 1, 11, 4, 11]);
    let t: i64 = t.parse().unwrap();
    both_answer(&p, "PEXPIRETIME", &keys, &[-1, -1, t, t, -1, -1]);
    // And each node's reset after the other's increment has arrived.
    let _: i64 = cmd(&mut b, &["PEXPIREAT", "set", &t.to_string()]);
    converged(&[&p.a, &p.b]);
    let _: i64 = cmd(&mut a, &["INCR", "set"]);
    both_answer(&p, "GET", &["set"], &[2]);
    both_answer(&p, "PEXPIRETIME", &["set"], &[t]);
    assert_eq!(
        (conflicts(&mut a), conflicts(&mut b)),
        (0, 0),
        "no key state asked for"
    );
}

/// The TTL rules for a list (docs/MERGE.md), whose TTL writes
/// travel as facts of its TTL register (`fact::LIST_TTL_FACTS`): on a
/// partitioned pair, an EXPIRE on one side and a later RPUSH on the other
/// keep the TTL and both elements; of two EXPIREs the longest wins; a
/// PERSIST wins over a concurrent EXPIRE. (A write older than the key
/// where it arrives is for the key's state to decide, as on a hash: one
/// ask per key there.) Then, each write after the other's has arrived,
/// TTL writes and writes under a TTL ask for no state.
#[test]
fn a_list_ttl_merges_by_its_rules_with_no_state_asked_after_the_heal() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let keys = ["kept", "longest", "persisted"];
    for k in keys {
        let _: i64 = cmd(&mut a, &["RPUSH", k, "a", "b"]);
    }
    converged(&[&p.a, &p.b]);
    let t0 = 4_000_000_000i64;
    let at = |secs: i64| (t0 + secs).to_string();
    p.partition();
    let _: i64 = cmd(&mut a, &["EXPIREAT", "kept", &at(1000)]);
    let _: i64 = cmd(&mut a, &["EXPIREAT", "longest", &at(1000)]);
    let _: i64 = cmd(&mut a, &["EXPIREAT", "persisted", &at(9000)]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let _: i64 = cmd(&mut b, &["RPUSH", "kept", "c"]);
    let _: i64 = cmd(&mut b, &["EXPIREAT", "longest", &at(5000)]);
    let _: i64 = cmd(&mut b, &["EXPIREAT", "persisted", &at(3000)]);
    let _: i64 = cmd(&mut b, &["PERSIST", "persisted"]);
    p.heal();
    let ms = |secs: i64| (t0 + secs) * 1000;
    both_answer(&p, "PEXPIRETIME", &keys, &[ms(1000), ms(5000), -1]);
    both_answer(&p, "LLEN", &keys, &[3, 2, 2]);
    let asked = (conflicts(&mut a), conflicts(&mut b));
    // An RPUSH under the TTL, a TTL write that saw the longer one (it
    // shortens the TTL), a pop, a PERSIST and an EXPIRE, each on the node
    // that did not write the key last.
    let steps: [(bool, &[&str]); 6] = [
        (false, &["RPUSH", "kept", "d"]),
        (true, &["EXPIREAT", "kept", &at(10)]),
        (false, &["LPOP", "kept"]),
        (true, &["PERSIST", "longest"]),
        (false, &["EXPIRE", "persisted", "100000"]),
        (true, &["RPUSH", "persisted", "c"]),
    ];
    for (on_a, w) in steps {
        let c = if on_a { &mut a } else { &mut b };
        let _: redis::Value = cmd(c, w);
        converged(&[&p.a, &p.b]);
    }
    let at_a = expiries(&mut a, &keys.map(String::from));
    assert_eq!(at_a, expiries(&mut b, &keys.map(String::from)));
    assert_eq!(&at_a[..2], &[ms(10), -1]);
    assert!(at_a[2] > 0, "persisted has a TTL again");
    both_answer(&p, "LLEN", &keys, &[3, 2, 3]);
    assert_eq!(
        (conflicts(&mut a), conflicts(&mut b)),
        asked,
        "no key state asked for after the heal"
    );
}

/// On a 3-mesh, a counter's resets and a list's TTL writes from each node
/// in turn ask no node for a state: each node applies each record once,
/// however many links bring it, and all end with one value and expiry.
#[test]
fn resets_and_list_ttls_ask_for_no_state_on_a_mesh() {
    let (nodes, _proxies) = mesh(3);
    let all: Vec<&Server> = nodes.iter().collect();
    let mut c: Vec<redis::Connection> = nodes.iter().map(Server::conn).collect();
    let _: i64 = cmd(&mut c[0], &["INCRBY", "n", "10"]);
    let _: i64 = cmd(&mut c[0], &["RPUSH", "l", "a", "b"]);
    converged(&all);
    let before: u64 = c.iter_mut().map(asks_all).sum();
    let writes: [(usize, &[&str]); 9] = [
        (1, &["INCR", "n"]),
        (2, &["SET", "n", "5"]),
        (0, &["INCR", "n"]),
        (1, &["PEXPIREAT", "n", "4000000000000"]),
        (2, &["APPEND", "n", "0"]),
        (0, &["PEXPIREAT", "l", "4000000000000"]),
        (1, &["RPUSH", "l", "c"]),
        (2, &["PEXPIREAT", "l", "4000000001000"]),
        (0, &["PERSIST", "l"]),
    ];
    for (n, w) in writes {
        let _: redis::Value = cmd(&mut c[n], w);
        converged(&all);
    }
    let after: u64 = c.iter_mut().map(asks_all).sum();
    assert_eq!(after - before, 0, "states asked for on the mesh");
    for conn in c.iter_mut() {
        assert_eq!(cmd::<String>(conn, &["GET", "n"]), "60");
        assert_eq!(cmd::<i64>(conn, &["PEXPIRETIME", "n"]), 4_000_000_000_000);
        assert_eq!(cmd::<i64>(conn, &["PEXPIRETIME", "l"]), -1);
        assert_eq!(cmd::<i64>(conn, &["LLEN", "l"]), 3);
    }
}

/// A TTL write made on one type meets the other type of a concurrent
/// write (DECISIONS 322; simulator seed 35412). On a chain a - b - c, with
/// a cut off: b makes `t` a set (c gets it), a makes it a sorted set, then
/// c gives the set a TTL. The TTL write is the key's last writer, so its
/// set, with its TTL, is the key on every node after the heal: a's sorted
/// set must not take the TTL write's version for itself (which left a and
/// the others each with their own type at one version, for good).
#[test]
fn a_ttl_write_on_one_type_does_not_stamp_a_concurrent_other_type() {
    let mm = ["--multi-master", "yes"];
    let (a, b, c) = (active_node(&mm), active_node(&mm), active_node(&mm));
    let (b_to_a, a_to_b) = (proxy::Proxy::start(b.port), proxy::Proxy::start(a.port));
    let (b_to_c, c_to_b) = (proxy::Proxy::start(b.port), proxy::Proxy::start(c.port));
    pull(&a, b_to_a.port);
    pull(&b, a_to_b.port);
    pull(&b, c_to_b.port);
    pull(&c, b_to_c.port);
    for (n, links) in [(&a, 1), (&b, 2), (&c, 1)] {
        wait_linked(n, links);
    }
    b_to_a.cut();
    a_to_b.cut();
    let (mut ca, mut cb, mut cc) = (a.conn(), b.conn(), c.conn());
    let _: i64 = cmd(&mut cb, &["SADD", "t", "m"]);
    eventually("c to hold b's set", || {
        cmd::<String>(&mut cc, &["TYPE", "t"]) == "set"
    });
    let _: i64 = cmd(&mut ca, &["ZADD", "t", "1", "m"]);
    std::thread::sleep(std::time::Duration::from_millis(5)); // a later stamp
    let _: i64 = cmd(&mut cc, &["PEXPIREAT", "t", "4000000000000"]);
    eventually("b to take c's TTL write", || {
        cmd::<i64>(&mut cb, &["PEXPIRETIME", "t"]) == 4_000_000_000_000
    });
    b_to_a.heal();
    a_to_b.heal();
    converged(&[&a, &b, &c]);
    for conn in [&mut ca, &mut cb, &mut cc] {
        assert_eq!(cmd::<String>(conn, &["TYPE", "t"]), "set");
        assert_eq!(cmd::<i64>(conn, &["PEXPIRETIME", "t"]), 4_000_000_000_000);
    }
}
