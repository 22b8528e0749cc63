//! The merge rules issue 24 names, each on a partitioned pair of real
//! processes (concurrent writes on both sides, then heal), checked against
//! what Redis Enterprise's Active-Active databases document per data type
//! (docs/MERGE.md section 2 is our table of them).

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
