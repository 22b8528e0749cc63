//! Hash commands as a client sees them: replies, errors, WRONGTYPE,
//! encodings and their conversion, RESP3 shapes, HSCAN cursors.

mod common;
use common::*;

use std::collections::{HashMap, HashSet};

fn resp3(s: &Server) -> Raw {
    let mut r = s.raw();
    let _ = raw_cmd(&mut r, &["HELLO", "3"]);
    r
}

#[test]
fn basic_commands() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(cmd::<i64>(&mut c, &["HSET", "h", "a", "1", "b", "2"]), 2);
    assert_eq!(cmd::<i64>(&mut c, &["HSET", "h", "a", "10", "c", "3"]), 1);
    assert_eq!(cmd::<String>(&mut c, &["HMSET", "h", "d", "4"]), "OK");
    assert_eq!(cmd::<String>(&mut c, &["HGET", "h", "a"]), "10");
    assert_eq!(cmd::<Option<String>>(&mut c, &["HGET", "h", "zz"]), None);
    assert_eq!(cmd::<Option<String>>(&mut c, &["HGET", "nokey", "a"]), None);
    assert_eq!(
        cmd::<Vec<Option<String>>>(&mut c, &["HMGET", "h", "a", "zz", "d"]),
        vec![Some("10".into()), None, Some("4".into())]
    );
    assert_eq!(cmd::<i64>(&mut c, &["HLEN", "h"]), 4);
    assert_eq!(cmd::<i64>(&mut c, &["HEXISTS", "h", "b"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["HEXISTS", "h", "x"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["HSTRLEN", "h", "a"]), 2);
    assert_eq!(cmd::<i64>(&mut c, &["HSTRLEN", "h", "x"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["HSETNX", "h", "a", "x"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["HSETNX", "h", "e", "5"]), 1);
    let all: HashMap<String, String> = cmd(&mut c, &["HGETALL", "h"]);
    assert_eq!(all.len(), 5);
    assert_eq!(all["e"], "5");
    // Listpack keeps insertion order.
    assert_eq!(
        cmd::<Vec<String>>(&mut c, &["HKEYS", "h"]),
        vec!["a", "b", "c", "d", "e"]
    );
    assert_eq!(
        cmd::<Vec<String>>(&mut c, &["HVALS", "h"]),
        vec!["10", "2", "3", "4", "5"]
    );
    assert_eq!(cmd::<i64>(&mut c, &["HDEL", "h", "a", "zz", "b"]), 2);
    assert_eq!(cmd::<i64>(&mut c, &["HDEL", "h", "c", "d", "e"]), 3);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "h"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["HDEL", "h", "a"]), 0);
    assert_eq!(cmd::<Vec<String>>(&mut c, &["HKEYS", "nokey"]).len(), 0);
}

#[test]
fn errors_and_wrongtype() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let wrong = "WRONGTYPE Operation against a key holding the wrong kind of value";
    cmd::<()>(&mut c, &["SET", "str", "x"]);
    for args in [
        &["HSET", "str", "a", "1"][..],
        &["HGET", "str", "a"],
        &["HGETALL", "str"],
        &["HDEL", "str", "a"],
        &["HINCRBY", "str", "a", "1"],
        &["HRANDFIELD", "str"],
        &["HSCAN", "str", "0"],
        &["HLEN", "str"],
    ] {
        assert_eq!(cmd_err(&mut c, args), wrong, "{args:?}");
    }
    assert_eq!(
        cmd_err(&mut c, &["HSET", "h", "a"]),
        "ERR wrong number of arguments for 'hset' command"
    );
    assert_eq!(
        cmd_err(&mut c, &["HMSET", "h", "a", "1", "b"]),
        "ERR wrong number of arguments for 'hmset' command"
    );
    cmd::<()>(
        &mut c,
        &[
            "HSET",
            "h",
            "s",
            "abc",
            "n",
            "1",
            "big",
            "9223372036854775807",
        ],
    );
    assert_eq!(
        cmd_err(&mut c, &["HINCRBY", "h", "s", "1"]),
        "ERR hash value is not an integer"
    );
    assert_eq!(
        cmd_err(&mut c, &["HINCRBY", "h", "n", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        cmd_err(&mut c, &["HINCRBY", "h", "big", "1"]),
        "ERR increment or decrement would overflow"
    );
    assert_eq!(
        cmd_err(&mut c, &["HINCRBYFLOAT", "h", "s", "1"]),
        "ERR hash value is not a float"
    );
    assert_eq!(
        cmd_err(&mut c, &["HINCRBYFLOAT", "h", "n", "x"]),
        "ERR value is not a valid float"
    );
    assert_eq!(
        cmd_err(&mut c, &["HINCRBYFLOAT", "h", "n", "inf"]),
        "ERR value is NaN or Infinity"
    );
    assert_eq!(cmd_err(&mut c, &["HSCAN", "h", "x"]), "ERR invalid cursor");
    assert_eq!(
        cmd_err(&mut c, &["HSCAN", "h", "0", "COUNT", "0"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(&mut c, &["HRANDFIELD", "h", "1", "foo"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(&mut c, &["HRANDFIELD", "h", "-9223372036854775808"]),
        "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"
    );
    assert_eq!(
        cmd_err(
            &mut c,
            &["HRANDFIELD", "h", "-4611686018427387904", "WITHVALUES"]
        ),
        "ERR value is out of range"
    );
}

#[test]
fn counters() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(cmd::<i64>(&mut c, &["HINCRBY", "h", "n", "5"]), 5);
    assert_eq!(cmd::<i64>(&mut c, &["HINCRBY", "h", "n", "-7"]), -2);
    assert_eq!(
        cmd::<String>(&mut c, &["HINCRBYFLOAT", "h", "f", "10.5"]),
        "10.5"
    );
    assert_eq!(
        cmd::<String>(&mut c, &["HINCRBYFLOAT", "h", "f", "0.1"]),
        "10.6"
    );
    assert_eq!(
        cmd::<String>(&mut c, &["HINCRBYFLOAT", "h", "n", "1.5e3"]),
        "1498"
    );
    assert_eq!(cmd::<String>(&mut c, &["HGET", "h", "n"]), "1498");
}

#[test]
fn encodings_convert_once() {
    let s = Server::start(&[
        "--hash-max-listpack-entries",
        "4",
        "--hash-max-listpack-value",
        "8",
    ]);
    let mut c = s.conn();
    let enc = |c: &mut redis::Connection, k: &str| cmd::<String>(c, &["OBJECT", "ENCODING", k]);
    for i in 0..4 {
        cmd::<()>(&mut c, &["HSET", "h", &format!("f{i}"), "v"]);
    }
    assert_eq!(enc(&mut c, "h"), "listpack");
    cmd::<()>(&mut c, &["HSET", "h", "f4", "v"]);
    assert_eq!(enc(&mut c, "h"), "hashtable");
    cmd::<()>(&mut c, &["HDEL", "h", "f0", "f1", "f2"]);
    assert_eq!(enc(&mut c, "h"), "hashtable");
    cmd::<()>(&mut c, &["HSET", "long", "a", "123456789"]);
    assert_eq!(enc(&mut c, "long"), "hashtable");
    cmd::<()>(&mut c, &["HSET", "longf", "123456789", "a"]);
    assert_eq!(enc(&mut c, "longf"), "hashtable");
    cmd::<()>(&mut c, &["HSET", "short", "a", "12345678"]);
    assert_eq!(enc(&mut c, "short"), "listpack");
    cmd::<()>(
        &mut c,
        &["CONFIG", "SET", "hash-max-listpack-entries", "100"],
    );
    cmd::<()>(
        &mut c,
        &[
            "HSET", "h2", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5",
        ],
    );
    assert_eq!(enc(&mut c, "h2"), "listpack");
    // The big encoding answers the same values.
    let all: HashMap<String, String> = cmd(&mut c, &["HGETALL", "h"]);
    assert_eq!(all.len(), 2);
    assert_eq!(all["f4"], "v");
}

#[test]
fn resp3_shapes_and_randfield() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["HSET", "h", "a", "1", "b", "2"]);
    let mut r = resp3(&s);
    assert_eq!(raw_cmd(&mut r, &["HGETALL", "h"]), "%2[a,1,b,2]");
    assert_eq!(raw_cmd(&mut r, &["HGETALL", "nokey"]), "%0[]");
    assert_eq!(raw_cmd(&mut r, &["HGET", "h", "x"]), "_");
    let one = raw_cmd(&mut r, &["HRANDFIELD", "h", "1", "WITHVALUES"]);
    assert!(one == "*1[*2[a,1]]" || one == "*1[*2[b,2]]", "{one}");
    let rep = raw_cmd(&mut r, &["HRANDFIELD", "h", "-5", "WITHVALUES"]);
    assert!(rep.starts_with("*5[*2["), "{rep}");
    assert_eq!(raw_cmd(&mut r, &["HRANDFIELD", "nokey", "3"]), "*0[]");
    assert_eq!(raw_cmd(&mut r, &["HRANDFIELD", "nokey"]), "_");
    // RESP2: flat pairs.
    let flat: Vec<String> = cmd(&mut c, &["HRANDFIELD", "h", "5", "WITHVALUES"]);
    assert_eq!(flat.len(), 4);
    let all: Vec<String> = cmd(&mut c, &["HRANDFIELD", "h", "10"]);
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), 2);
    let rep: Vec<String> = cmd(&mut c, &["HRANDFIELD", "h", "-10"]);
    assert_eq!(rep.len(), 10);
    assert!(cmd::<Vec<String>>(&mut c, &["HRANDFIELD", "h", "0"]).is_empty());
    // Distinct picks from a big hash.
    let mut q = redis::cmd("HSET");
    q.arg("big");
    for i in 0..1000 {
        q.arg(format!("f{i}")).arg(i);
    }
    q.query::<()>(&mut c).unwrap();
    for n in ["5", "500", "999"] {
        let v: Vec<String> = cmd(&mut c, &["HRANDFIELD", "big", n]);
        assert_eq!(v.len(), n.parse::<usize>().unwrap());
        assert_eq!(v.iter().collect::<HashSet<_>>().len(), v.len());
    }
}

#[test]
fn hscan_small_and_big() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["HSET", "h", "a", "1", "b", "2", "ab", "3"]);
    let (cur, items): (String, Vec<String>) = cmd(&mut c, &["HSCAN", "h", "0", "COUNT", "1"]);
    assert_eq!(cur, "0");
    assert_eq!(items, vec!["a", "1", "b", "2", "ab", "3"]);
    let (_, items): (String, Vec<String>) = cmd(&mut c, &["HSCAN", "h", "0", "MATCH", "a*"]);
    assert_eq!(items, vec!["a", "1", "ab", "3"]);
    let (cur, items): (String, Vec<String>) = cmd(&mut c, &["HSCAN", "nokey", "0"]);
    assert_eq!((cur.as_str(), items.len()), ("0", 0));
    let mut q = redis::cmd("HSET");
    q.arg("big");
    for i in 0..2000 {
        q.arg(format!("f{i}")).arg(format!("v{i}"));
    }
    q.query::<()>(&mut c).unwrap();
    let mut seen = HashMap::new();
    let mut cur = "0".to_string();
    loop {
        let (next, items): (String, Vec<String>) =
            cmd(&mut c, &["HSCAN", "big", &cur, "COUNT", "20"]);
        for p in items.chunks(2) {
            assert_eq!(p[1], format!("v{}", &p[0][1..]));
            *seen.entry(p[0].clone()).or_insert(0) += 1;
        }
        if next == "0" {
            break;
        }
        cur = next;
    }
    assert_eq!(seen.len(), 2000);
}
