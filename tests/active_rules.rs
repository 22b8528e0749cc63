//! The merge rules issue 24 names, each on a partitioned pair of real
//! processes (concurrent writes on both sides, then heal), checked against
//! what Redis Enterprise's Active-Active databases document per data type
//! (docs/MERGE.md is our table of them).

mod common;

use common::*;

/// Sorted members of a set.
fn members(c: &mut redis::Connection, key: &str) -> Vec<String> {
    let mut m: Vec<String> = cmd(c, &["SMEMBERS", key]);
    m.sort();
    m
}

/// Re-assert on add: an SADD of a member already present is an add that a
/// concurrent SREM on the other side did not see, so the member stays
/// (add wins), though the SADD itself answered 0.
#[test]
fn an_sadd_of_a_present_member_wins_over_a_concurrent_srem() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["SADD", "s", "m", "other"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["SREM", "s", "m"]);
    let added: i64 = cmd(&mut b, &["SADD", "s", "m"]);
    assert_eq!(added, 0, "m was present on b");
    p.heal();
    eventually("both nodes to keep m", || {
        members(&mut a, "s") == ["m", "other"] && members(&mut b, "s") == ["m", "other"]
    });
    converged(&[&p.a, &p.b]);
}

/// The same for a hash field written with its present value, and a sorted
/// set member added with its present score.
#[test]
fn an_hset_or_zadd_of_a_present_value_wins_over_a_concurrent_remove() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["HSET", "h", "f", "v", "g", "w"]);
    let _: i64 = cmd(&mut a, &["ZADD", "z", "1", "m", "2", "n"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["HDEL", "h", "f"]);
    let _: i64 = cmd(&mut a, &["ZREM", "z", "m"]);
    let _: i64 = cmd(&mut b, &["HSET", "h", "f", "v"]);
    let _: i64 = cmd(&mut b, &["ZADD", "z", "1", "m"]);
    p.heal();
    eventually("both nodes to keep h.f and z.m", || {
        [&mut a, &mut b].into_iter().all(|c| {
            cmd::<Option<String>>(c, &["HGET", "h", "f"]).as_deref() == Some("v")
                && cmd::<Option<f64>>(c, &["ZSCORE", "z", "m"]) == Some(1.0)
        })
    });
    converged(&[&p.a, &p.b]);
}

/// A sorted set whose member scored -0 reads the same on every node,
/// whichever encoding each copy took (simulator seed 4444: a skiplist kept
/// -0, a listpack made from a snapshot read 0).
#[test]
fn a_negative_zero_score_reads_zero_in_every_encoding() {
    let s = Server::start(&["--zset-max-listpack-entries", "0"]);
    let mut c = s.conn();
    let _: i64 = cmd(&mut c, &["ZADD", "big", "-0", "m"]);
    let enc: String = cmd(&mut c, &["OBJECT", "ENCODING", "big"]);
    assert_eq!(enc, "skiplist");
    let score: String = cmd(&mut c, &["ZSCORE", "big", "m"]);
    assert_eq!(score, "0");
    let _: () = cmd(
        &mut c,
        &["CONFIG", "SET", "zset-max-listpack-entries", "128"],
    );
    let _: i64 = cmd(&mut c, &["ZADD", "small", "-0", "m"]);
    let score: String = cmd(&mut c, &["ZSCORE", "small", "m"]);
    assert_eq!(score, "0");
}

/// Lists of equal values (a token list): a pop at the head on one node
/// and at the tail on the other take two different tokens, so the list
/// ends two shorter everywhere; the same end popped on both nodes takes
/// the same token, removed once.
#[test]
fn pops_of_equal_values_on_both_sides_remove_what_each_took() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["RPUSH", "tokens", "t", "t", "t"]);
    let _: i64 = cmd(&mut a, &["RPUSH", "same", "t", "t", "t"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: String = cmd(&mut a, &["LPOP", "tokens"]);
    let _: String = cmd(&mut b, &["RPOP", "tokens"]);
    let _: String = cmd(&mut a, &["LPOP", "same"]);
    let _: String = cmd(&mut b, &["LPOP", "same"]);
    p.heal();
    eventually("one token left of three, two of the other list", || {
        [&mut a, &mut b].into_iter().all(|c| {
            cmd::<i64>(c, &["LLEN", "tokens"]) == 1 && cmd::<i64>(c, &["LLEN", "same"]) == 2
        })
    });
    converged(&[&p.a, &p.b]);
}

/// Field counters: HINCRBY on both sides adds up; an HSET on one side
/// concurrent with an HINCRBY on the other keeps the increment the HSET
/// did not see; an HDEL keeps only the increments it did not see.
#[test]
fn hincrby_on_both_sides_adds_up_as_a_counter() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["HSET", "h", "sum", "1", "set", "1", "del", "1"]);
    converged(&[&p.a, &p.b]);
    let _: i64 = cmd(&mut b, &["HINCRBY", "h", "del", "10"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["HINCRBY", "h", "sum", "2"]);
    let _: i64 = cmd(&mut b, &["HINCRBY", "h", "sum", "5"]);
    let _: i64 = cmd(&mut a, &["HSET", "h", "set", "100"]);
    let _: i64 = cmd(&mut b, &["HINCRBY", "h", "set", "7"]);
    let _: i64 = cmd(&mut a, &["HDEL", "h", "del"]);
    let _: i64 = cmd(&mut b, &["HINCRBY", "h", "del", "3"]);
    p.heal();
    let want = |c: &mut redis::Connection| {
        let v: Vec<Option<String>> = cmd(c, &["HMGET", "h", "sum", "set", "del"]);
        v == [Some("8".into()), Some("107".into()), Some("3".into())]
    };
    eventually("sum 1+2+5, set 100+7, del 3", || {
        want(&mut a) && want(&mut b)
    });
    converged(&[&p.a, &p.b]);
    // Both keep counting from there.
    let _: i64 = cmd(&mut a, &["HINCRBY", "h", "sum", "1"]);
    let _: i64 = cmd(&mut b, &["HINCRBY", "h", "sum", "1"]);
    eventually("sum 10 on both", || {
        [&mut a, &mut b]
            .into_iter()
            .all(|c| cmd::<String>(c, &["HGET", "h", "sum"]) == "10")
    });
}

/// Float counters: INCRBYFLOAT on a string and HINCRBYFLOAT on a field,
/// on both sides of a partition, add up (each node's sum of its floats is
/// its part, docs/MERGE-DESIGN.md), as do an INCRBY and an INCRBYFLOAT of one key;
/// a SET of a float on one side keeps the other side's concurrent float
/// increment (a reset to a float is a base, as an integer's is).
#[test]
fn float_increments_on_both_sides_add_up_as_counters() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: () = cmd(&mut a, &["MSET", "f", "10.5", "mixed", "1", "reset", "1"]);
    let _: i64 = cmd(&mut a, &["HSET", "h", "f", "1.25"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: String = cmd(&mut a, &["INCRBYFLOAT", "f", "0.1"]);
    let _: String = cmd(&mut b, &["INCRBYFLOAT", "f", "0.2"]);
    let _: String = cmd(&mut a, &["HINCRBYFLOAT", "h", "f", "1.5"]);
    let _: String = cmd(&mut b, &["HINCRBYFLOAT", "h", "f", "-0.25"]);
    let _: i64 = cmd(&mut a, &["INCRBY", "mixed", "2"]);
    let _: String = cmd(&mut b, &["INCRBYFLOAT", "mixed", "0.5"]);
    let _: () = cmd(&mut a, &["SET", "reset", "2.5"]);
    let _: String = cmd(&mut b, &["INCRBYFLOAT", "reset", "1.5"]);
    p.heal();
    let want = |c: &mut redis::Connection| {
        let v: Vec<String> = cmd(c, &["MGET", "f", "mixed", "reset"]);
        let h: String = cmd(c, &["HGET", "h", "f"]);
        (v, h) == (vec!["10.8".into(), "3.5".into(), "4".into()], "2.5".into())
    };
    eventually("f 10.8, mixed 3.5, reset 4, h.f 2.5", || {
        want(&mut a) && want(&mut b)
    });
    converged(&[&p.a, &p.b]);
    // Both keep counting from there, as integers too once a sum is one.
    let _: String = cmd(&mut a, &["INCRBYFLOAT", "reset", "1"]);
    let _: i64 = cmd(&mut b, &["INCRBY", "reset", "1"]);
    eventually("reset 6 on both", || {
        [&mut a, &mut b]
            .into_iter()
            .all(|c| cmd::<String>(c, &["GET", "reset"]) == "6")
    });
    // A float not printed as INCRBYFLOAT prints it is no counter's base:
    // the increment is a plain write there, the same on both nodes.
    let _: () = cmd(&mut a, &["SET", "odd", "1.50"]);
    let _: i64 = cmd(&mut a, &["HSET", "h", "odd", "1.50"]);
    let _: String = cmd(&mut a, &["INCRBYFLOAT", "odd", "1"]);
    let _: String = cmd(&mut a, &["HINCRBYFLOAT", "h", "odd", "1"]);
    eventually("odd 2.5 on both", || {
        // Not there yet on b: nil, not an error.
        let two_and_a_half = Some("2.5".to_string());
        [&mut a, &mut b].into_iter().all(|c| {
            cmd::<Option<String>>(c, &["GET", "odd"]) == two_and_a_half
                && cmd::<Option<String>>(c, &["HGET", "h", "odd"]) == two_and_a_half
        })
    });
    converged(&[&p.a, &p.b]);
}

/// Score counters: ZINCRBY on both sides adds up (the score is a float
/// counter, rounded to a double); a ZADD of a counted member on one side
/// resets what it saw and keeps the other side's concurrent ZINCRBY.
#[test]
fn zincrby_on_both_sides_adds_up_as_a_counter() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["ZADD", "z", "1", "m", "1", "r"]);
    let _: String = cmd(&mut b, &["ZINCRBY", "z", "1", "r"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: String = cmd(&mut a, &["ZINCRBY", "z", "2", "m"]);
    let _: String = cmd(&mut b, &["ZINCRBY", "z", "0.5", "m"]);
    let _: i64 = cmd(&mut a, &["ZADD", "z", "10", "r"]);
    let _: String = cmd(&mut b, &["ZINCRBY", "z", "1", "r"]);
    p.heal();
    let zs = |c: &mut redis::Connection| -> Vec<String> {
        cmd(c, &["ZRANGE", "z", "0", "-1", "WITHSCORES"])
    };
    eventually_seen("m 1+2+0.5, r 10+1", || {
        let (on_a, on_b) = (zs(&mut a), zs(&mut b));
        let ok = on_a == ["m", "3.5", "r", "11"] && on_b == on_a;
        (ok, format!("a {on_a:?}, b {on_b:?}"))
    });
    converged(&[&p.a, &p.b]);
}

/// The TTL of a collection is a register of its own: a write that did not
/// touch it keeps it, concurrent TTLs resolve to the longest, PERSIST wins
/// over a concurrent EXPIRE (the TTLs are read to the second, as PTTL
/// moves on between the nodes' answers).
#[test]
fn a_collections_ttl_merges_as_a_register_of_its_own() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    for k in ["kept", "longest", "persisted", "list"] {
        let _: i64 = cmd(&mut a, &["SADD", k, "x"]);
    }
    let _: i64 = cmd(&mut a, &["DEL", "list"]);
    let _: i64 = cmd(&mut a, &["RPUSH", "list", "x"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    // The expiries are compared as times (PEXPIRETIME), between the clock
    // before the EXPIREs and after them: a PTTL read later, on a loaded
    // machine, had run down past the second it was rounded to.
    let now_ms = || {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        t.expect("clock after 1970").as_millis() as i64
    };
    let before = now_ms();
    let _: i64 = cmd(&mut a, &["EXPIRE", "kept", "1000"]);
    let _: i64 = cmd(&mut b, &["SADD", "kept", "y"]);
    let _: i64 = cmd(&mut a, &["EXPIRE", "longest", "1000"]);
    let _: i64 = cmd(&mut b, &["EXPIRE", "longest", "5000"]);
    let _: i64 = cmd(&mut a, &["EXPIRE", "persisted", "1000"]);
    let _: i64 = cmd(&mut b, &["EXPIRE", "persisted", "3000"]);
    let _: i64 = cmd(&mut a, &["PERSIST", "persisted"]);
    let _: i64 = cmd(&mut a, &["EXPIRE", "list", "1000"]);
    let _: i64 = cmd(&mut b, &["RPUSH", "list", "y"]);
    let after = now_ms();
    p.heal();
    let at = |c: &mut redis::Connection| -> Vec<i64> {
        (["kept", "longest", "persisted", "list"].iter())
            .map(|k| cmd::<i64>(c, &["PEXPIRETIME", k]))
            .collect()
    };
    let set_within = |t: i64, secs: i64| (before..=after).contains(&(t - secs * 1000));
    eventually(
        "kept 1000 s, longest 5000 s, persisted none, list 1000 s",
        || {
            let want = |t: Vec<i64>| {
                set_within(t[0], 1000)
                    && set_within(t[1], 5000)
                    && t[2] == -1
                    && set_within(t[3], 1000)
            };
            want(at(&mut a)) && want(at(&mut b))
        },
    );
    let n: i64 = cmd(&mut b, &["SCARD", "kept"]);
    assert_eq!(n, 2);
    converged(&[&p.a, &p.b]);
}

/// A score counter made on both sides at once (a ZADD of the member on one
/// node, a ZINCRBY on the other, partitioned), then reset by a ZADD on one
/// side that saw both: the reset covers both parts, so only the other
/// side's concurrent ZINCRBY adds to it.
#[test]
fn a_zadd_resets_a_score_counter_made_on_both_sides() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    p.partition();
    let _: i64 = cmd(&mut a, &["ZADD", "z", "1", "r"]);
    let _: String = cmd(&mut b, &["ZINCRBY", "z", "1", "r"]);
    p.heal();
    let zs = |c: &mut redis::Connection| -> Vec<String> {
        cmd(c, &["ZRANGE", "z", "0", "-1", "WITHSCORES"])
    };
    // (Both sides hold r 1 until they exchanged: wait for the sum.)
    eventually_seen("r 1+1", || {
        let (on_a, on_b) = (zs(&mut a), zs(&mut b));
        let ok = on_a == ["r", "2"] && on_b == on_a;
        (ok, format!("a {on_a:?}, b {on_b:?}"))
    });
    p.partition();
    let _: i64 = cmd(&mut a, &["ZADD", "z", "10", "r"]);
    let _: String = cmd(&mut b, &["ZINCRBY", "z", "1", "r"]);
    p.heal();
    eventually_seen("r 10+1", || {
        let (on_a, on_b) = (zs(&mut a), zs(&mut b));
        let ok = on_a == ["r", "11"] && on_b == on_a;
        (ok, format!("a {on_a:?}, b {on_b:?}"))
    });
}

/// The same for a hash field: an HSET of a new field on one side and an
/// HINCRBY of it on the other add up.
#[test]
fn an_hset_and_an_hincrby_of_a_new_field_add_up() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    p.partition();
    let _: i64 = cmd(&mut a, &["HSET", "h", "f", "1"]);
    let _: i64 = cmd(&mut b, &["HINCRBY", "h", "f", "1"]);
    p.heal();
    eventually_seen("f 1+1", || {
        let x: Option<String> = cmd(&mut a, &["HGET", "h", "f"]);
        let y: Option<String> = cmd(&mut b, &["HGET", "h", "f"]);
        (
            x.as_deref() == Some("2") && y == x,
            format!("a {x:?}, b {y:?}"),
        )
    });
}
