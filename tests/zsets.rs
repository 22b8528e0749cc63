//! Sorted-set commands through the real binary: ZADD options and their
//! errors, ranges (rank/score/lex, REV, LIMIT), removals, pops, random
//! members, the set algebra with weights and aggregates, encodings and their
//! conversion, RESP3 reply shapes and the ZSCAN guarantee.
mod common;
use common::*;

use std::collections::HashSet;

type C = redis::Connection;

fn strs(c: &mut C, args: &[&str]) -> Vec<String> {
    cmd(c, args)
}

fn enc(c: &mut C, k: &str) -> String {
    cmd(c, &["OBJECT", "ENCODING", k])
}

/// Sends one command on a raw connection and reads `n` reply lines.
fn raw_lines(r: &mut Raw, args: &[&str], n: usize) -> String {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{}\r\n", a.len(), a));
    }
    r.send(req.as_bytes());
    (0..n).map(|_| r.line()).collect()
}

#[test]
fn zadd_options_and_errors() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(cmd::<i64>(c, &["ZADD", "z", "1", "a", "2", "b"]), 2);
    assert_eq!(cmd::<i64>(c, &["ZADD", "z", "NX", "5", "a", "3", "c"]), 1);
    assert_eq!(
        cmd::<i64>(c, &["ZADD", "z", "XX", "CH", "5", "a", "9", "new"]),
        1
    );
    assert_eq!(
        cmd::<i64>(c, &["ZADD", "z", "GT", "CH", "1", "a", "7", "b"]),
        1
    );
    assert_eq!(
        cmd::<i64>(c, &["ZADD", "z", "LT", "CH", "9", "a", "6", "b"]),
        1
    );
    assert_eq!(
        strs(c, &["ZRANGE", "z", "0", "-1", "WITHSCORES"]),
        ["c", "3", "a", "5", "b", "6"]
    );
    assert_eq!(
        cmd::<Option<String>>(c, &["ZADD", "z", "INCR", "2.5", "a"]),
        Some("7.5".into())
    );
    assert_eq!(
        cmd::<Option<String>>(c, &["ZADD", "z", "NX", "INCR", "1", "a"]),
        None
    );
    assert_eq!(cmd::<String>(c, &["ZINCRBY", "z", "-0.5", "a"]), "7");
    for (args, e) in [
        (
            &["ZADD", "z", "NX", "XX", "1", "a"][..],
            "ERR XX and NX options at the same time are not compatible",
        ),
        (
            &["ZADD", "z", "GT", "LT", "1", "a"],
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            &["ZADD", "z", "NX", "GT", "1", "a"],
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            &["ZADD", "z", "INCR", "1", "a", "2", "b"],
            "ERR INCR option supports a single increment-element pair",
        ),
        (&["ZADD", "z", "1", "a", "2"], "ERR syntax error"),
        (&["ZADD", "z", "x", "a"], "ERR value is not a valid float"),
        (&["ZADD", "z", "nan", "a"], "ERR value is not a valid float"),
        (
            &["ZINCRBY", "z", "abc", "a"],
            "ERR value is not a valid float",
        ),
    ] {
        assert_eq!(cmd_err(c, args), e, "{args:?}");
    }
    cmd::<i64>(c, &["ZADD", "inf", "+inf", "a"]);
    assert_eq!(
        cmd_err(c, &["ZINCRBY", "inf", "-inf", "a"]),
        "ERR resulting score is not a number (NaN)"
    );
    // XX on a missing key creates nothing.
    assert_eq!(cmd::<i64>(c, &["ZADD", "none", "XX", "1", "a"]), 0);
    assert_eq!(cmd::<i64>(c, &["EXISTS", "none"]), 0);
    cmd::<String>(c, &["SET", "str", "x"]);
    for args in [
        &["ZADD", "str", "1", "a"][..],
        &["ZRANGE", "str", "0", "-1"],
        &["ZSCORE", "str", "a"],
        &["ZCARD", "str"],
        &["ZPOPMIN", "str"],
        &["ZUNION", "1", "str"],
    ] {
        assert!(cmd_err(c, args).starts_with("WRONGTYPE"), "{args:?}");
    }
}

#[test]
fn reads_and_ranges() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    cmd::<i64>(
        c,
        &[
            "ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e",
        ],
    );
    assert_eq!(cmd::<i64>(c, &["ZCARD", "z"]), 5);
    assert_eq!(cmd::<i64>(c, &["ZCARD", "nokey"]), 0);
    assert_eq!(cmd::<i64>(c, &["ZCOUNT", "z", "(1", "3"]), 2);
    assert_eq!(cmd::<i64>(c, &["ZCOUNT", "z", "-inf", "+inf"]), 5);
    assert_eq!(cmd::<i64>(c, &["ZLEXCOUNT", "z", "[b", "(d"]), 2);
    assert_eq!(
        cmd::<Option<String>>(c, &["ZSCORE", "z", "c"]),
        Some("3".into())
    );
    assert_eq!(
        cmd::<Vec<Option<String>>>(c, &["ZMSCORE", "z", "a", "x", "e"]),
        [Some("1".into()), None, Some("5".into())]
    );
    assert_eq!(cmd::<Option<i64>>(c, &["ZRANK", "z", "c"]), Some(2));
    assert_eq!(cmd::<Option<i64>>(c, &["ZREVRANK", "z", "c"]), Some(2));
    assert_eq!(cmd::<Option<i64>>(c, &["ZRANK", "z", "x"]), None);
    assert_eq!(
        cmd::<(i64, String)>(c, &["ZREVRANK", "z", "a", "WITHSCORE"]),
        (4, "1".into())
    );
    assert_eq!(strs(c, &["ZRANGE", "z", "1", "2"]), ["b", "c"]);
    assert_eq!(strs(c, &["ZRANGE", "z", "-2", "-1"]), ["d", "e"]);
    assert_eq!(strs(c, &["ZRANGE", "z", "0", "1", "REV"]), ["e", "d"]);
    assert_eq!(strs(c, &["ZREVRANGE", "z", "0", "1"]), ["e", "d"]);
    assert!(strs(c, &["ZRANGE", "z", "3", "1"]).is_empty());
    assert_eq!(
        strs(
            c,
            &["ZRANGE", "z", "(1", "+inf", "BYSCORE", "LIMIT", "1", "2"]
        ),
        ["c", "d"]
    );
    assert_eq!(
        strs(
            c,
            &["ZRANGE", "z", "+inf", "(1", "BYSCORE", "REV", "LIMIT", "0", "2"]
        ),
        ["e", "d"]
    );
    assert_eq!(
        strs(c, &["ZRANGEBYSCORE", "z", "2", "3", "WITHSCORES"]),
        ["b", "2", "c", "3"]
    );
    assert_eq!(strs(c, &["ZREVRANGEBYSCORE", "z", "3", "(1"]), ["c", "b"]);
    assert!(strs(c, &["ZRANGEBYSCORE", "z", "1", "5", "LIMIT", "-1", "2"]).is_empty());
    assert_eq!(strs(c, &["ZRANGE", "z", "[b", "(d", "BYLEX"]), ["b", "c"]);
    assert_eq!(strs(c, &["ZRANGEBYLEX", "z", "-", "[b"]), ["a", "b"]);
    assert_eq!(strs(c, &["ZREVRANGEBYLEX", "z", "+", "(c"]), ["e", "d"]);
    for (args, e) in [
        (
            &["ZRANGE", "z", "0", "1", "LIMIT", "0", "1"][..],
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ),
        (
            &["ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES"],
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ),
        (&["ZRANGE", "z", "0", "1", "REV", "REV"], "ERR syntax error"),
        (
            &["ZRANGEBYSCORE", "z", "0", "1", "BYSCORE"],
            "ERR syntax error",
        ),
        (
            &["ZRANGE", "z", "a", "1", "BYSCORE"],
            "ERR min or max is not a float",
        ),
        (
            &["ZRANGE", "z", "a", "b", "BYLEX"],
            "ERR min or max not valid string range item",
        ),
        (
            &["ZRANGE", "z", "a", "1"],
            "ERR value is not an integer or out of range",
        ),
        (&["ZCOUNT", "z", "x", "1"], "ERR min or max is not a float"),
        (&["ZRANK", "z", "a", "foo"], "ERR syntax error"),
    ] {
        assert_eq!(cmd_err(c, args), e, "{args:?}");
    }
    // ZRANGESTORE: the range is stored; an empty range deletes the destination.
    assert_eq!(
        cmd::<i64>(c, &["ZRANGESTORE", "d", "z", "0", "1", "REV"]),
        2
    );
    assert_eq!(strs(c, &["ZRANGE", "d", "0", "-1"]), ["d", "e"]);
    assert_eq!(cmd::<i64>(c, &["ZRANGESTORE", "d", "z", "9", "10"]), 0);
    assert_eq!(cmd::<i64>(c, &["EXISTS", "d"]), 0);
    assert_eq!(
        cmd_err(c, &["ZRANGESTORE", "d", "z", "0", "1", "WITHSCORES"]),
        "ERR syntax error"
    );
}

#[test]
fn removals_pops_and_random() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    cmd::<i64>(
        c,
        &[
            "ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e", "6", "f",
        ],
    );
    assert_eq!(cmd::<i64>(c, &["ZREM", "z", "a", "nope"]), 1);
    assert_eq!(cmd::<i64>(c, &["ZREMRANGEBYRANK", "z", "0", "0"]), 1);
    assert_eq!(cmd::<i64>(c, &["ZREMRANGEBYSCORE", "z", "(5", "+inf"]), 1);
    assert_eq!(cmd::<i64>(c, &["ZREMRANGEBYLEX", "z", "[c", "[c"]), 1);
    assert_eq!(strs(c, &["ZPOPMIN", "z"]), ["d", "4"]);
    assert_eq!(strs(c, &["ZPOPMAX", "z", "5"]), ["e", "5"]);
    // Empty zsets are deleted.
    assert_eq!(cmd::<i64>(c, &["EXISTS", "z"]), 0);
    assert!(strs(c, &["ZPOPMIN", "z"]).is_empty());
    assert_eq!(
        cmd_err(c, &["ZPOPMIN", "z", "-1"]),
        "ERR value is out of range, must be positive"
    );
    cmd::<i64>(c, &["ZADD", "z2", "1", "a", "2", "b", "3", "c"]);
    let v: redis::Value = cmd(c, &["ZMPOP", "2", "nokey", "z2", "MAX", "COUNT", "2"]);
    assert_eq!(
        format!("{v:?}"),
        format!(
            "{:?}",
            redis::Value::Array(vec![
                redis::Value::BulkString(b"z2".to_vec()),
                redis::Value::Array(vec![
                    redis::Value::Array(vec![
                        redis::Value::BulkString(b"c".to_vec()),
                        redis::Value::BulkString(b"3".to_vec())
                    ]),
                    redis::Value::Array(vec![
                        redis::Value::BulkString(b"b".to_vec()),
                        redis::Value::BulkString(b"2".to_vec())
                    ]),
                ])
            ])
        )
    );
    assert_eq!(
        cmd::<redis::Value>(c, &["ZMPOP", "1", "nokey", "MIN"]),
        redis::Value::Nil
    );
    assert_eq!(
        cmd_err(c, &["ZMPOP", "0", "z2", "MIN"]),
        "ERR numkeys should be greater than 0"
    );
    assert_eq!(
        cmd_err(c, &["ZMPOP", "1", "z2", "MIN", "COUNT", "0"]),
        "ERR count should be greater than 0"
    );
    cmd::<i64>(c, &["ZADD", "r", "1", "a", "2", "b", "3", "c"]);
    let all: HashSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let one: String = cmd(c, &["ZRANDMEMBER", "r"]);
    assert!(all.contains(&one));
    let distinct = strs(c, &["ZRANDMEMBER", "r", "2"]);
    assert_eq!(distinct.iter().collect::<HashSet<_>>().len(), 2);
    assert_eq!(strs(c, &["ZRANDMEMBER", "r", "10"]).len(), 3);
    let many = strs(c, &["ZRANDMEMBER", "r", "-20", "WITHSCORES"]);
    assert_eq!(many.len(), 40);
    assert!(many.chunks(2).all(|p| all.contains(&p[0])));
    assert!(strs(c, &["ZRANDMEMBER", "nokey", "3"]).is_empty());
    assert_eq!(
        cmd_err(
            c,
            &["ZRANDMEMBER", "r", "-9223372036854775807", "WITHSCORES"]
        ),
        "ERR value is out of range"
    );
}

#[test]
fn union_inter_diff() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    cmd::<i64>(c, &["ZADD", "a", "1", "x", "2", "y", "3", "z"]);
    cmd::<i64>(c, &["ZADD", "b", "10", "y", "20", "z", "30", "w"]);
    assert_eq!(
        strs(c, &["ZUNION", "2", "a", "b", "WITHSCORES"]),
        ["x", "1", "y", "12", "z", "23", "w", "30"]
    );
    assert_eq!(
        strs(
            c,
            &["ZUNION", "2", "a", "b", "WEIGHTS", "2", "0.5", "WITHSCORES"]
        ),
        ["x", "2", "y", "9", "w", "15", "z", "16"]
    );
    assert_eq!(
        strs(
            c,
            &["ZINTER", "2", "a", "b", "AGGREGATE", "MAX", "WITHSCORES"]
        ),
        ["y", "10", "z", "20"]
    );
    assert_eq!(
        strs(
            c,
            &["ZINTER", "2", "a", "b", "AGGREGATE", "MIN", "WITHSCORES"]
        ),
        ["y", "2", "z", "3"]
    );
    assert_eq!(strs(c, &["ZDIFF", "2", "a", "b", "WITHSCORES"]), ["x", "1"]);
    assert_eq!(cmd::<i64>(c, &["ZUNIONSTORE", "d", "2", "a", "b"]), 4);
    assert_eq!(strs(c, &["ZRANGE", "d", "0", "0"]), ["x"]);
    assert_eq!(cmd::<i64>(c, &["ZINTERSTORE", "d", "2", "a", "nokey"]), 0);
    assert_eq!(cmd::<i64>(c, &["EXISTS", "d"]), 0);
    assert_eq!(cmd::<i64>(c, &["ZDIFFSTORE", "d", "2", "b", "a"]), 1);
    assert_eq!(cmd::<i64>(c, &["ZINTERCARD", "2", "a", "b"]), 2);
    assert_eq!(
        cmd::<i64>(c, &["ZINTERCARD", "2", "a", "b", "LIMIT", "1"]),
        1
    );
    // inf * 0 is NaN, which Redis turns into 0.
    assert_eq!(
        strs(c, &["ZUNION", "1", "a", "WEIGHTS", "inf", "WITHSCORES"]),
        ["x", "inf", "y", "inf", "z", "inf"]
    );
    cmd::<i64>(c, &["ZADD", "zero", "0", "q"]);
    assert_eq!(
        strs(c, &["ZUNION", "1", "zero", "WEIGHTS", "inf", "WITHSCORES"]),
        ["q", "0"]
    );
    for (args, e) in [
        (
            &["ZUNION", "0", "a"][..],
            "ERR at least 1 input key is needed for 'zunion' command",
        ),
        (
            &["ZINTERSTORE", "d", "0", "a"],
            "ERR at least 1 input key is needed for 'zinterstore' command",
        ),
        (&["ZUNION", "3", "a", "b"], "ERR syntax error"),
        (
            &["ZUNION", "2", "a", "b", "WEIGHTS", "1", "x"],
            "ERR weight value is not a float",
        ),
        (
            &["ZUNION", "2", "a", "b", "AGGREGATE", "avg"],
            "ERR syntax error",
        ),
        (
            &["ZDIFF", "2", "a", "b", "WEIGHTS", "1", "1"],
            "ERR syntax error",
        ),
        (
            &["ZUNIONSTORE", "d", "1", "a", "WITHSCORES"],
            "ERR syntax error",
        ),
        (
            &["ZINTERCARD", "1", "a", "LIMIT", "-1"],
            "ERR LIMIT can't be negative",
        ),
    ] {
        assert_eq!(cmd_err(c, args), e, "{args:?}");
    }
}

#[test]
fn encodings_and_conversion() {
    let s = Server::start(&[
        "--zset-max-listpack-entries",
        "4",
        "--zset-max-listpack-value",
        "8",
    ]);
    let c = &mut s.conn();
    cmd::<i64>(c, &["ZADD", "z", "1", "a", "2", "b", "3", "c"]);
    assert_eq!(enc(c, "z"), "listpack");
    cmd::<i64>(c, &["ZADD", "z", "4", "d", "5", "e"]);
    assert_eq!(enc(c, "z"), "skiplist");
    // No conversion back on removal.
    cmd::<i64>(c, &["ZREM", "z", "a", "b", "c"]);
    assert_eq!(enc(c, "z"), "skiplist");
    // Store destinations get the encoding of their final size.
    cmd::<i64>(c, &["ZUNIONSTORE", "d", "1", "z"]);
    assert_eq!(enc(c, "d"), "listpack");
    cmd::<i64>(c, &["ZADD", "long", "1", "abcdefghij"]);
    assert_eq!(enc(c, "long"), "skiplist");
    // Both encodings answer the same.
    cmd::<i64>(
        c,
        &[
            "ZADD", "s", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e",
        ],
    );
    cmd::<i64>(c, &["ZADD", "l", "1", "a", "2", "b", "3", "c"]);
    assert_eq!(strs(c, &["ZRANGE", "s", "1", "2"]), ["b", "c"]);
    assert_eq!(strs(c, &["ZRANGE", "l", "1", "2"]), ["b", "c"]);
    assert_eq!(
        strs(c, &["ZRANGE", "s", "3", "(1", "BYSCORE", "REV"]),
        ["c", "b"]
    );
    assert_eq!(cmd::<i64>(c, &["ZRANK", "s", "d"]), 3);
    cmd::<String>(c, &["CONFIG", "SET", "zset-max-listpack-entries", "128"]);
    cmd::<i64>(
        c,
        &[
            "ZADD", "n", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e",
        ],
    );
    assert_eq!(enc(c, "n"), "listpack");
}

#[test]
fn large_set_ranks() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let mut args = vec!["ZADD".to_string(), "big".into()];
    for i in 0..1000 {
        args.push(((i * 7919) % 1000).to_string());
        args.push(format!("m{i:04}"));
    }
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    assert_eq!(cmd::<i64>(c, &refs), 1000);
    assert_eq!(enc(c, "big"), "skiplist");
    // Scores are a permutation of 0..1000: rank == score.
    for m in ["m0000", "m0001", "m0500", "m0999"] {
        let score: f64 = cmd::<String>(c, &["ZSCORE", "big", m]).parse().unwrap();
        assert_eq!(cmd::<i64>(c, &["ZRANK", "big", m]), score as i64);
        assert_eq!(cmd::<i64>(c, &["ZREVRANK", "big", m]), 999 - score as i64);
    }
    assert_eq!(cmd::<i64>(c, &["ZCOUNT", "big", "100", "(200"]), 100);
    let r = strs(c, &["ZRANGE", "big", "500", "502", "WITHSCORES"]);
    assert_eq!(
        (r[1].as_str(), r[3].as_str(), r[5].as_str()),
        ("500", "501", "502")
    );
    assert_eq!(cmd::<i64>(c, &["ZREMRANGEBYRANK", "big", "0", "99"]), 100);
    assert_eq!(
        strs(c, &["ZRANGE", "big", "0", "0", "WITHSCORES"])[1],
        "100"
    );
}

#[test]
fn zscan_returns_every_member() {
    let s = Server::start(&["--zset-max-listpack-entries", "16"]);
    let c = &mut s.conn();
    // Compact encoding: everything at once, cursor 0.
    cmd::<i64>(c, &["ZADD", "small", "1", "a", "2", "b"]);
    let (cur, items): (String, Vec<String>) = cmd(c, &["ZSCAN", "small", "0"]);
    assert_eq!(
        (cur.as_str(), items),
        ("0", vec!["a".into(), "1".into(), "b".into(), "2".into()])
    );
    for i in 0..300 {
        cmd::<i64>(c, &["ZADD", "big", &i.to_string(), &format!("m{i}")]);
    }
    // Members present for the whole scan are all returned, despite writes.
    let mut seen = HashSet::new();
    let mut cursor = "0".to_string();
    let mut step = 0;
    loop {
        let (next, items): (String, Vec<String>) = cmd(c, &["ZSCAN", "big", &cursor, "COUNT", "7"]);
        for p in items.chunks(2) {
            seen.insert(p[0].clone());
        }
        // Churn: update scores of stable members, add and remove others.
        step += 1;
        cmd::<i64>(c, &["ZADD", "big", "-1", &format!("m{}", step * 3 % 250)]);
        cmd::<i64>(c, &["ZADD", "big", "1", &format!("tmp{step}")]);
        cmd::<i64>(c, &["ZREM", "big", &format!("m{}", 250 + step % 50)]);
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    for i in 0..250 {
        assert!(seen.contains(&format!("m{i}")), "m{i} missing");
    }
    let (_, items): (String, Vec<String>) = cmd(c, &["ZSCAN", "small", "0", "MATCH", "a*"]);
    assert_eq!(items, ["a", "1"]);
    assert_eq!(cmd_err(c, &["ZSCAN", "big", "x"]), "ERR invalid cursor");
    assert_eq!(
        cmd_err(c, &["ZSCAN", "big", "0", "COUNT", "0"]),
        "ERR syntax error"
    );
}

#[test]
fn resp3_shapes() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    let hello = raw_lines(&mut r, &["HELLO", "3"], 1);
    assert!(hello.starts_with('%'));
    // Skip the rest of HELLO's map, which ends with "modules" => [].
    while r.line() != "modules\r\n" {}
    assert_eq!(r.line(), "*0\r\n");
    assert_eq!(
        raw_lines(&mut r, &["ZADD", "z", "1", "a", "2.5", "b"], 1),
        ":2\r\n"
    );
    assert_eq!(raw_lines(&mut r, &["ZSCORE", "z", "b"], 1), ",2.5\r\n");
    assert_eq!(raw_lines(&mut r, &["ZSCORE", "z", "x"], 1), "_\r\n");
    assert_eq!(
        raw_lines(&mut r, &["ZRANGE", "z", "0", "-1", "WITHSCORES"], 9),
        "*2\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,2.5\r\n"
    );
    assert_eq!(
        raw_lines(&mut r, &["ZPOPMIN", "z"], 4),
        "*2\r\n$1\r\na\r\n,1\r\n"
    );
    assert_eq!(
        raw_lines(&mut r, &["ZPOPMAX", "z", "1"], 5),
        "*1\r\n*2\r\n$1\r\nb\r\n,2.5\r\n"
    );
    assert_eq!(raw_lines(&mut r, &["ZMPOP", "1", "z", "MIN"], 1), "_\r\n");
    assert_eq!(
        raw_lines(&mut r, &["ZINCRBY", "z", "1.5", "c"], 1),
        ",1.5\r\n"
    );
    assert_eq!(
        raw_lines(&mut r, &["ZSCAN", "z", "0"], 8),
        "*2\r\n$1\r\n0\r\n*2\r\n$1\r\nc\r\n$3\r\n1.5\r\n"
    );
}

/// Every zset write propagates an effect that replays to the same keyspace
/// (contents, encodings and versions), including the rewritten ZMPOP.
/// Lex ranges over mixed scores answer from the members' order alone, not
/// from the tree's shape: the same set built by ZADDs in another order, or
/// by RESTORE (as a replica's full sync builds it), counts, lists and
/// removes the same members, so a replicated ZREMRANGEBYLEX or ZRANGESTORE
/// BYLEX does the same on both sides.
#[test]
fn lex_ranges_over_mixed_scores_ignore_the_tree_shape() {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let ranges = [
        ["(m1", "(m5"],
        ["[m1", "(m3"],
        ["-", "(m2"],
        ["(m10", "+"],
        ["[m2", "[m4"],
    ];
    for _ in 0..6 {
        // Members m0..m5 at scores 0..5, then m100.., m200.. above them:
        // in score order, lex order restarts every six members.
        let mut order: Vec<usize> = (0..300).collect();
        order.shuffle(&mut rng);
        let mut zadd = vec!["ZADD".to_string(), "a".into()];
        for j in order {
            zadd.push(j.to_string());
            zadd.push(format!("m{}", j % 6 + j / 6 * 100));
        }
        for r in ranges {
            let _: () = cmd(c, &["DEL", "a", "b", "c"]);
            let args: Vec<&str> = zadd.iter().map(String::as_str).collect();
            let _: i64 = cmd(c, &args);
            let payload: Vec<u8> = redis::cmd("DUMP").arg("a").query(c).unwrap();
            let _: () = redis::cmd("RESTORE")
                .arg("b")
                .arg(0)
                .arg(payload)
                .query(c)
                .unwrap();
            assert_eq!(enc(c, "a"), "skiplist");
            let count = |c: &mut C, k: &str| cmd::<i64>(c, &["ZLEXCOUNT", k, r[0], r[1]]);
            assert_eq!(count(c, "a"), count(c, "b"), "{r:?}");
            let range = |c: &mut C, k: &str| strs(c, &["ZRANGEBYLEX", k, r[0], r[1]]);
            assert_eq!(range(c, "a"), range(c, "b"), "{r:?}");
            let rem = |c: &mut C, k: &str| cmd::<i64>(c, &["ZREMRANGEBYLEX", k, r[0], r[1]]);
            assert_eq!(rem(c, "a"), rem(c, "b"), "{r:?}");
            let all = |c: &mut C, k: &str| strs(c, &["ZRANGE", k, "0", "-1"]);
            assert_eq!(all(c, "a"), all(c, "b"), "{r:?}");
        }
    }
}

#[test]
fn effects_replay_to_the_same_state() {
    use lattice::facade::commands::{replay, run_local};
    use lattice::facade::config::Config;
    use lattice::facade::core::client::ClientState;
    use lattice::facade::effects::Recorder;
    use lattice::facade::keyspace::hlc::Hlc;
    use lattice::facade::keyspace::{Value, SHARDS};
    use lattice::facade::server::Server as Srv;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::sync::Arc;

    let srv = Srv::new(Config::default());
    let rec = Arc::new(Recorder::default());
    srv.effects.subscribe(rec.clone());
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let mut client = ClientState::new(1);
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..6000 {
        let k = format!("z{}", rng.gen_range(0..6));
        let k2 = format!("z{}", rng.gen_range(0..6));
        let m = format!("m{}", rng.gen_range(0..200));
        let sc = rng.gen_range(-50..50).to_string();
        let line: Vec<String> = match rng.gen_range(0..14) {
            0..=4 => vec!["ZADD".into(), k, sc, m.clone(), "1".into(), format!("{m}x")],
            5 => vec!["ZINCRBY".into(), k, "2.5".into(), m],
            6 => vec!["ZREM".into(), k, m],
            7 => vec!["ZPOPMIN".into(), k, "2".into()],
            8 => vec![
                "ZMPOP".into(),
                "2".into(),
                k,
                k2,
                "MAX".into(),
                "COUNT".into(),
                "3".into(),
            ],
            9 => vec!["ZREMRANGEBYSCORE".into(), k, "(0".into(), "5".into()],
            10 => vec![
                "ZUNIONSTORE".into(),
                k,
                "2".into(),
                k2,
                "z1".into(),
                "WEIGHTS".into(),
                "2".into(),
                "1".into(),
            ],
            11 => vec!["ZINTERSTORE".into(), k, "2".into(), k2, "z2".into()],
            12 => vec!["ZRANGESTORE".into(), k, k2, "0".into(), "150".into()],
            _ => vec!["ZADD".into(), k, "GT".into(), "CH".into(), sc, m],
        };
        let argv: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
        let _ = run_local(&srv, &mut clock, &stats, &mut client, &argv);
    }
    let effects = rec.0.lock().clone();
    assert!(effects.len() > 1000);
    assert!(
        effects.iter().any(|e| e.argv[0] == b"ZPOPMAX"),
        "ZMPOP rewritten"
    );
    let copy = Srv::new(Config::default());
    let mut clock2 = Hlc::new(copy.node_id);
    let stats2 = copy.new_worker_stats();
    for e in &effects {
        replay(&copy, &mut clock2, &stats2, e).unwrap_or_else(|err| panic!("{e:?}: {err}"));
    }
    let dump = |s: &Srv| {
        let mut out = Vec::new();
        for sh in 0..SHARDS {
            let g = s.keyspace.db(0).lock(sh);
            for e in g.iter() {
                let Value::ZSet(z) = &e.value else {
                    panic!("not a zset")
                };
                let items: Vec<(Vec<u8>, u64)> =
                    z.iter().map(|(m, s)| (m.to_vec(), s.to_bits())).collect();
                out.push((e.key.to_vec(), z.encoding(), items, e.version));
            }
        }
        out.sort();
        out
    };
    let (a, b) = (dump(&srv), dump(&copy));
    assert!(!a.is_empty());
    assert_eq!(a, b);
}

/// BZPOPMIN/BZPOPMAX/BZMPOP: served at once when a set has members, woken
/// by a ZADD from another connection when not, and a null array after the
/// timeout; inside MULTI they do not block.
#[test]
fn blocking_pops() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    cmd::<i64>(c, &["ZADD", "z", "1", "a", "2", "b"]);
    let got: (String, String, String) = cmd(c, &["BZPOPMAX", "none", "z", "0"]);
    assert_eq!(got, ("z".into(), "b".into(), "2".into()));
    let mut r = s.raw();
    r.send(b"BZPOPMIN q 0\r\n");
    // Wait until the client is blocked, then wake it from this connection.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let info: String = cmd(c, &["INFO", "clients"]);
        if info.contains("blocked_clients:1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never blocked");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    cmd::<i64>(c, &["ZADD", "q", "5", "m"]);
    for want in ["*3", "$1", "q", "$1", "m", "$1", "5"] {
        assert_eq!(r.line().trim_end(), want);
    }
    assert_eq!(cmd::<i64>(c, &["EXISTS", "q"]), 0);
    r.send(b"BZMPOP 0.05 2 x y MIN COUNT 2\r\n");
    assert_eq!(r.line().trim_end(), "*-1");
    assert_eq!(
        cmd_err(c, &["BZPOPMIN", "z", "-1"]),
        "ERR timeout is negative"
    );
    r.send(b"MULTI\r\nBZPOPMIN empty 0\r\nEXEC\r\n");
    for want in ["+OK", "+QUEUED", "*1", "*-1"] {
        assert_eq!(r.line().trim_end(), want);
    }
}
