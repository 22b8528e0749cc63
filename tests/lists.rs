//! List commands through the real binary: replies, Redis's exact errors,
//! key deletion when a list empties, big (chunked) lists, RESP2/RESP3 null
//! shapes, and the blocking pops (wake-up, timeout, FIFO, disconnects).
mod common;
use common::*;

use std::thread::sleep;
use std::time::{Duration, Instant};

type C = redis::Connection;

fn range(c: &mut C, k: &str) -> Vec<String> {
    cmd(c, &["LRANGE", k, "0", "-1"])
}

fn exists(c: &mut C, k: &str) -> bool {
    cmd::<i64>(c, &["EXISTS", k]) == 1
}

/// Sends a command on a raw connection and returns its whole reply, lines
/// joined (CRLF kept), so RESP2/RESP3 shapes can be compared exactly.
fn req(r: &mut Raw, args: &[&str]) -> String {
    let mut b = format!("*{}\r\n", args.len());
    for a in args {
        b.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    r.send(b.as_bytes());
    reply(r)
}

fn reply(r: &mut Raw) -> String {
    let line = r.line();
    assert!(!line.is_empty(), "connection closed");
    let n: i64 = line[1..].trim_end().parse().unwrap_or(0);
    let mut s = line.clone();
    match line.as_bytes()[0] {
        b'$' if n >= 0 => s.push_str(&String::from_utf8_lossy(&r.bytes(n as usize + 2))),
        b'*' | b'~' | b'>' => (0..n.max(0)).for_each(|_| s.push_str(&reply(r))),
        b'%' => (0..2 * n).for_each(|_| s.push_str(&reply(r))),
        _ => {}
    }
    s
}

fn info_blocked(c: &mut C) -> i64 {
    info_field(c, "blocked_clients")
}

/// Waits (generously) until `n` clients are blocked.
fn wait_blocked(c: &mut C, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_blocked(c) != n {
        assert!(
            Instant::now() < deadline,
            "blocked_clients never reached {n}"
        );
        sleep(Duration::from_millis(20));
    }
}

#[test]
fn push_pop_and_deletion() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(cmd::<i64>(c, &["RPUSH", "l", "a", "b", "c"]), 3);
    assert_eq!(cmd::<i64>(c, &["LPUSH", "l", "x", "y"]), 5);
    assert_eq!(range(c, "l"), ["y", "x", "a", "b", "c"]);
    assert_eq!(cmd::<i64>(c, &["LPUSHX", "nokey", "a"]), 0);
    assert_eq!(cmd::<i64>(c, &["RPUSHX", "nokey", "a"]), 0);
    assert!(!exists(c, "nokey"));
    assert_eq!(cmd::<i64>(c, &["RPUSHX", "l", "z"]), 6);
    assert_eq!(cmd::<i64>(c, &["LPUSHX", "l", "w"]), 7);
    assert_eq!(cmd::<i64>(c, &["LLEN", "l"]), 7);
    assert_eq!(cmd::<i64>(c, &["LLEN", "nokey"]), 0);
    assert_eq!(cmd::<String>(c, &["LPOP", "l"]), "w");
    assert_eq!(cmd::<String>(c, &["RPOP", "l"]), "z");
    assert_eq!(cmd::<Vec<String>>(c, &["LPOP", "l", "2"]), ["y", "x"]);
    assert_eq!(cmd::<Vec<String>>(c, &["RPOP", "l", "2"]), ["c", "b"]);
    assert_eq!(
        cmd::<Vec<String>>(c, &["LPOP", "l", "0"]),
        Vec::<String>::new()
    );
    assert_eq!(cmd::<Vec<String>>(c, &["RPOP", "l", "10"]), ["a"]);
    assert!(!exists(c, "l"), "an emptied list is deleted");
    assert_eq!(cmd::<Option<String>>(c, &["LPOP", "l"]), None);
    assert_eq!(
        cmd_err(c, &["LPOP", "l", "-1"]),
        "ERR value is out of range, must be positive"
    );
    assert_eq!(
        cmd_err(c, &["LPOP", "l", "x"]),
        "ERR value is out of range, must be positive"
    );
    assert_eq!(
        cmd_err(c, &["LPOP", "l", "1", "2"]),
        "ERR wrong number of arguments for 'lpop' command"
    );
    cmd::<()>(c, &["SET", "s", "v"]);
    for args in [
        &["LPUSH", "s", "a"][..],
        &["RPUSHX", "s", "a"],
        &["LPOP", "s"],
        &["LLEN", "s"],
        &["LRANGE", "s", "0", "1"],
        &["LINDEX", "s", "0"],
        &["LMOVE", "s", "d", "LEFT", "LEFT"],
        &["LPOS", "s", "a"],
    ] {
        assert!(cmd_err(c, args).starts_with("WRONGTYPE"), "{args:?}");
    }
    assert_eq!(cmd::<String>(c, &["TYPE", "s"]), "string");
    cmd::<()>(c, &["RPUSH", "l", "a"]);
    assert_eq!(cmd::<String>(c, &["TYPE", "l"]), "list");
    assert_eq!(cmd::<String>(c, &["OBJECT", "ENCODING", "l"]), "quicklist");
}

#[test]
fn index_set_insert_rem_trim() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    cmd::<i64>(c, &["RPUSH", "l", "a", "b", "c", "b", "a"]);
    assert_eq!(
        cmd::<Option<String>>(c, &["LINDEX", "l", "1"]).as_deref(),
        Some("b")
    );
    assert_eq!(
        cmd::<Option<String>>(c, &["LINDEX", "l", "-1"]).as_deref(),
        Some("a")
    );
    assert_eq!(cmd::<Option<String>>(c, &["LINDEX", "l", "5"]), None);
    assert_eq!(cmd::<Option<String>>(c, &["LINDEX", "l", "-6"]), None);
    assert_eq!(cmd::<Option<String>>(c, &["LINDEX", "nokey", "0"]), None);
    assert_eq!(
        cmd_err(c, &["LINDEX", "l", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(cmd::<String>(c, &["LSET", "l", "-1", "Z"]), "OK");
    assert_eq!(
        cmd_err(c, &["LSET", "l", "9", "Z"]),
        "ERR index out of range"
    );
    assert_eq!(cmd_err(c, &["LSET", "nokey", "0", "Z"]), "ERR no such key");
    assert_eq!(cmd_err(c, &["LSET", "nokey", "x", "Z"]), "ERR no such key");
    assert_eq!(
        cmd_err(c, &["LSET", "l", "x", "Z"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(cmd::<i64>(c, &["LINSERT", "l", "BEFORE", "c", "X"]), 6);
    assert_eq!(cmd::<i64>(c, &["LINSERT", "l", "after", "c", "Y"]), 7);
    assert_eq!(cmd::<i64>(c, &["LINSERT", "l", "after", "nope", "Y"]), -1);
    assert_eq!(cmd::<i64>(c, &["LINSERT", "nokey", "after", "c", "Y"]), 0);
    assert_eq!(
        cmd_err(c, &["LINSERT", "l", "middle", "c", "Y"]),
        "ERR syntax error"
    );
    assert_eq!(range(c, "l"), ["a", "b", "X", "c", "Y", "b", "Z"]);
    assert_eq!(cmd::<i64>(c, &["RPUSH", "l", "b"]), 8);
    assert_eq!(cmd::<i64>(c, &["LREM", "l", "-1", "b"]), 1);
    assert_eq!(cmd::<i64>(c, &["LREM", "l", "1", "b"]), 1);
    assert_eq!(range(c, "l"), ["a", "X", "c", "Y", "b", "Z"]);
    assert_eq!(cmd::<i64>(c, &["LREM", "l", "0", "nope"]), 0);
    assert_eq!(cmd::<i64>(c, &["LREM", "nokey", "0", "a"]), 0);
    assert_eq!(
        cmd_err(c, &["LREM", "l", "x", "a"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        cmd::<Vec<String>>(c, &["LRANGE", "l", "-2", "100"]),
        ["b", "Z"]
    );
    assert_eq!(
        cmd::<Vec<String>>(c, &["LRANGE", "l", "3", "1"]),
        Vec::<String>::new()
    );
    assert_eq!(
        cmd::<Vec<String>>(c, &["LRANGE", "nokey", "0", "-1"]),
        Vec::<String>::new()
    );
    assert_eq!(cmd::<String>(c, &["LTRIM", "l", "1", "-2"]), "OK");
    assert_eq!(range(c, "l"), ["X", "c", "Y", "b"]);
    assert_eq!(cmd::<String>(c, &["LTRIM", "nokey", "0", "1"]), "OK");
    assert_eq!(cmd::<String>(c, &["LTRIM", "l", "5", "10"]), "OK");
    assert!(!exists(c, "l"));
    cmd::<i64>(c, &["RPUSH", "l", "a", "a"]);
    assert_eq!(cmd::<i64>(c, &["LREM", "l", "0", "a"]), 2);
    assert!(!exists(c, "l"));
}

#[test]
fn lpos_options_and_errors() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    cmd::<i64>(c, &["RPUSH", "l", "a", "b", "c", "1", "2", "3", "c", "c"]);
    assert_eq!(cmd::<Option<i64>>(c, &["LPOS", "l", "c"]), Some(2));
    assert_eq!(
        cmd::<Option<i64>>(c, &["LPOS", "l", "c", "RANK", "2"]),
        Some(6)
    );
    assert_eq!(
        cmd::<Option<i64>>(c, &["LPOS", "l", "c", "RANK", "-1"]),
        Some(7)
    );
    assert_eq!(
        cmd::<Option<i64>>(c, &["LPOS", "l", "c", "RANK", "9"]),
        None
    );
    assert_eq!(
        cmd::<Vec<i64>>(c, &["LPOS", "l", "c", "COUNT", "0"]),
        [2, 6, 7]
    );
    assert_eq!(
        cmd::<Vec<i64>>(c, &["LPOS", "l", "c", "COUNT", "2", "RANK", "-1"]),
        [7, 6]
    );
    assert_eq!(
        cmd::<Vec<i64>>(c, &["LPOS", "l", "c", "COUNT", "0", "MAXLEN", "7"]),
        [2, 6]
    );
    assert_eq!(
        cmd::<Option<i64>>(c, &["LPOS", "l", "c", "MAXLEN", "2"]),
        None
    );
    assert_eq!(cmd::<Option<i64>>(c, &["LPOS", "nokey", "c"]), None);
    assert_eq!(
        cmd::<Vec<i64>>(c, &["LPOS", "nokey", "c", "COUNT", "1"]),
        Vec::<i64>::new()
    );
    assert!(cmd_err(c, &["LPOS", "l", "c", "RANK", "0"]).starts_with("ERR RANK can't be zero"));
    assert_eq!(
        cmd_err(c, &["LPOS", "l", "c", "COUNT", "-1"]),
        "ERR COUNT can't be negative"
    );
    assert_eq!(
        cmd_err(c, &["LPOS", "l", "c", "COUNT", "x"]),
        "ERR COUNT can't be negative"
    );
    assert_eq!(
        cmd_err(c, &["LPOS", "l", "c", "MAXLEN", "-1"]),
        "ERR MAXLEN can't be negative"
    );
    assert_eq!(
        cmd_err(c, &["LPOS", "l", "c", "RANK", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        cmd_err(c, &["LPOS", "l", "c", "FOO", "1"]),
        "ERR syntax error"
    );
    assert_eq!(cmd_err(c, &["LPOS", "l", "c", "RANK"]), "ERR syntax error");
}

#[test]
fn moves_and_lmpop() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    cmd::<i64>(c, &["RPUSH", "src", "a", "b", "c"]);
    assert_eq!(cmd::<String>(c, &["RPOPLPUSH", "src", "dst"]), "c");
    assert_eq!(
        cmd::<String>(c, &["LMOVE", "src", "dst", "LEFT", "RIGHT"]),
        "a"
    );
    assert_eq!(range(c, "dst"), ["c", "a"]);
    assert_eq!(
        cmd::<String>(c, &["LMOVE", "dst", "dst", "LEFT", "RIGHT"]),
        "c"
    );
    assert_eq!(range(c, "dst"), ["a", "c"]);
    assert_eq!(
        cmd::<String>(c, &["LMOVE", "src", "dst", "right", "left"]),
        "b"
    );
    assert!(!exists(c, "src"));
    assert_eq!(cmd::<Option<String>>(c, &["RPOPLPUSH", "src", "dst"]), None);
    assert_eq!(
        cmd_err(c, &["LMOVE", "src", "dst", "UP", "LEFT"]),
        "ERR syntax error"
    );
    cmd::<()>(c, &["SET", "str", "v"]);
    assert!(cmd_err(c, &["RPOPLPUSH", "dst", "str"]).starts_with("WRONGTYPE"));
    assert_eq!(range(c, "dst"), ["b", "a", "c"], "nothing popped on error");
    // A single-element rotation keeps the key.
    cmd::<i64>(c, &["RPUSH", "one", "x"]);
    assert_eq!(cmd::<String>(c, &["RPOPLPUSH", "one", "one"]), "x");
    assert_eq!(range(c, "one"), ["x"]);

    let v: redis::Value = cmd(c, &["LMPOP", "2", "nokey", "dst", "RIGHT", "COUNT", "2"]);
    let got: (String, Vec<String>) = redis::from_redis_value(&v).unwrap();
    assert_eq!(got, ("dst".into(), vec!["c".into(), "a".into()]));
    let got: (String, Vec<String>) = cmd(c, &["LMPOP", "1", "dst", "LEFT"]);
    assert_eq!(got, ("dst".into(), vec!["b".into()]));
    assert!(!exists(c, "dst"));
    assert_eq!(
        cmd::<redis::Value>(c, &["LMPOP", "1", "dst", "LEFT"]),
        redis::Value::Nil
    );
    for (args, err) in [
        (
            &["LMPOP", "0", "k", "LEFT"][..],
            "ERR numkeys should be greater than 0",
        ),
        (
            &["LMPOP", "x", "k", "LEFT"],
            "ERR numkeys should be greater than 0",
        ),
        (&["LMPOP", "2", "k", "LEFT"], "ERR syntax error"),
        (&["LMPOP", "1", "k", "UP"], "ERR syntax error"),
        (
            &["LMPOP", "1", "k", "LEFT", "COUNT", "0"],
            "ERR count should be greater than 0",
        ),
        (
            &["LMPOP", "1", "k", "LEFT", "COUNT", "1", "COUNT", "1"],
            "ERR syntax error",
        ),
        (&["LMPOP", "1", "k", "LEFT", "COUNT"], "ERR syntax error"),
    ] {
        assert_eq!(cmd_err(c, args), err, "{args:?}");
    }
    assert!(cmd_err(c, &["LMPOP", "1", "str", "LEFT"]).starts_with("WRONGTYPE"));
    let keys: Vec<String> = cmd(c, &["COMMAND", "GETKEYS", "LMPOP", "2", "a", "b", "LEFT"]);
    assert_eq!(keys, ["a", "b"]);
}

#[test]
fn resp2_and_resp3_null_shapes() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    assert_eq!(req(&mut r, &["LPOP", "nokey"]), "$-1\r\n");
    assert_eq!(req(&mut r, &["LPOP", "nokey", "1"]), "*-1\r\n");
    assert_eq!(req(&mut r, &["LPOP", "nokey", "0"]), "*-1\r\n");
    assert_eq!(req(&mut r, &["LMPOP", "1", "nokey", "LEFT"]), "*-1\r\n");
    assert_eq!(req(&mut r, &["LINDEX", "nokey", "0"]), "$-1\r\n");
    assert_eq!(req(&mut r, &["LPOS", "nokey", "a"]), "$-1\r\n");
    assert_eq!(req(&mut r, &["BLPOP", "nokey", "0.01"]), "*-1\r\n");
    assert_eq!(req(&mut r, &["RPUSH", "l", "a"]), ":1\r\n");
    assert_eq!(req(&mut r, &["LPOP", "l", "0"]), "*0\r\n");
    assert_eq!(
        req(&mut r, &["LMPOP", "1", "l", "LEFT"]),
        "*2\r\n$1\r\nl\r\n*1\r\n$1\r\na\r\n"
    );
    req(&mut r, &["HELLO", "3"]);
    assert_eq!(req(&mut r, &["LPOP", "nokey"]), "_\r\n");
    assert_eq!(req(&mut r, &["LPOP", "nokey", "1"]), "_\r\n");
    assert_eq!(req(&mut r, &["LMPOP", "1", "nokey", "LEFT"]), "_\r\n");
    assert_eq!(req(&mut r, &["LPOS", "nokey", "a"]), "_\r\n");
    assert_eq!(req(&mut r, &["RPOPLPUSH", "nokey", "d"]), "_\r\n");
    assert_eq!(req(&mut r, &["BRPOP", "nokey", "0.01"]), "_\r\n");
    assert_eq!(
        req(&mut r, &["BLMOVE", "nokey", "d", "LEFT", "LEFT", "0.01"]),
        "_\r\n"
    );
}

#[test]
fn big_lists_are_chunked_and_consistent() {
    let s = Server::start(&["--list-max-listpack-size", "4"]);
    let c = &mut s.conn();
    let mut model: std::collections::VecDeque<String> = Default::default();
    for i in 0..300 {
        let v = format!("v{i}");
        if i % 3 == 0 {
            cmd::<i64>(c, &["LPUSH", "l", &v]);
            model.push_front(v);
        } else {
            cmd::<i64>(c, &["RPUSH", "l", &v]);
            model.push_back(v);
        }
    }
    assert_eq!(cmd::<String>(c, &["OBJECT", "ENCODING", "l"]), "quicklist");
    assert_eq!(
        cmd::<i64>(c, &["LINSERT", "l", "BEFORE", "v150", "mid"]),
        301
    );
    let at = model.iter().position(|v| v == "v150").unwrap();
    model.insert(at, "mid".into());
    assert_eq!(cmd::<String>(c, &["LSET", "l", "200", "set"]), "OK");
    model[200] = "set".into();
    for i in [0usize, 1, 77, 150, 200, 299, 300] {
        let got: Option<String> = cmd(c, &["LINDEX", "l", &i.to_string()]);
        assert_eq!(got.as_deref(), Some(model[i].as_str()), "index {i}");
    }
    let got: Vec<String> = cmd(c, &["LRANGE", "l", "97", "143"]);
    assert_eq!(
        got,
        model.iter().skip(97).take(47).cloned().collect::<Vec<_>>()
    );
    assert_eq!(cmd::<String>(c, &["LTRIM", "l", "10", "-11"]), "OK");
    let model: Vec<String> = model.iter().skip(10).take(281).cloned().collect();
    assert_eq!(range(c, "l"), model);
    // Byte-class fill and a CONFIG SET in the middle: content unaffected.
    cmd::<()>(c, &["CONFIG", "SET", "list-max-listpack-size", "-1"]);
    let big = "x".repeat(3000);
    for _ in 0..5 {
        cmd::<i64>(c, &["RPUSH", "l", &big]);
    }
    assert_eq!(cmd::<i64>(c, &["LLEN", "l"]), 286);
    assert_eq!(cmd::<i64>(c, &["LREM", "l", "-2", &big]), 2);
    assert_eq!(cmd::<String>(c, &["RPOP", "l"]), big);
}

#[test]
fn blocking_errors_and_immediate_service() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    for (args, err) in [
        (
            &["BLPOP", "k", "x"][..],
            "ERR timeout is not a float or out of range",
        ),
        (&["BLPOP", "k", "-1"], "ERR timeout is negative"),
        (&["BRPOP", "k", "-0.5"], "ERR timeout is negative"),
        (
            &["BRPOPLPUSH", "k", "d", "x"],
            "ERR timeout is not a float or out of range",
        ),
        (&["BLMOVE", "k", "d", "UP", "LEFT", "1"], "ERR syntax error"),
        (
            &["BLMPOP", "-1", "1", "k", "LEFT"],
            "ERR timeout is negative",
        ),
        (
            &["BLMPOP", "1", "0", "k", "LEFT"],
            "ERR numkeys should be greater than 0",
        ),
    ] {
        assert_eq!(cmd_err(c, args), err, "{args:?}");
    }
    cmd::<()>(c, &["SET", "s", "v"]);
    assert!(cmd_err(c, &["BLPOP", "s", "0"]).starts_with("WRONGTYPE"));
    cmd::<i64>(c, &["RPUSH", "l", "a", "b", "c"]);
    let got: (String, String) = cmd(c, &["BLPOP", "nokey", "l", "0"]);
    assert_eq!(got, ("l".into(), "a".into()));
    let got: (String, String) = cmd(c, &["BRPOP", "l", "0"]);
    assert_eq!(got, ("l".into(), "c".into()));
    assert_eq!(cmd::<String>(c, &["BRPOPLPUSH", "l", "d", "0"]), "b");
    assert!(!exists(c, "l"));
    let got: (String, Vec<String>) = cmd(c, &["BLMPOP", "0", "1", "d", "RIGHT", "COUNT", "5"]);
    assert_eq!(got, ("d".into(), vec!["b".into()]));
    let t = Instant::now();
    assert_eq!(
        cmd::<redis::Value>(c, &["BLPOP", "nokey", "0.2"]),
        redis::Value::Nil
    );
    assert!(t.elapsed() >= Duration::from_millis(150));
    assert_eq!(info_blocked(c), 0);
}

#[test]
fn blpop_woken_by_push_from_another_client_fifo() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let mut r1 = s.raw();
    let mut r2 = s.raw();
    r1.send(b"*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n");
    wait_blocked(c, 1);
    r2.send(b"*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n");
    wait_blocked(c, 2);
    let list: String = cmd(c, &["CLIENT", "LIST"]);
    assert_eq!(list.lines().filter(|l| l.contains("flags=b ")).count(), 2);
    assert_eq!(cmd::<i64>(c, &["RPUSH", "q", "first", "second"]), 2);
    assert_eq!(reply(&mut r1), "*2\r\n$1\r\nq\r\n$5\r\nfirst\r\n");
    assert_eq!(reply(&mut r2), "*2\r\n$1\r\nq\r\n$6\r\nsecond\r\n");
    wait_blocked(c, 0);
    assert!(!exists(c, "q"));
    // One push, two waiters: the first in line gets it, the other stays.
    r1.send(b"*3\r\n$5\r\nBRPOP\r\n$1\r\nq\r\n$1\r\n0\r\n");
    wait_blocked(c, 1);
    r2.send(b"*3\r\n$5\r\nBRPOP\r\n$1\r\nq\r\n$1\r\n0\r\n");
    wait_blocked(c, 2);
    cmd::<i64>(c, &["LPUSH", "q", "x"]);
    assert_eq!(reply(&mut r1), "*2\r\n$1\r\nq\r\n$1\r\nx\r\n");
    wait_blocked(c, 1);
    cmd::<i64>(c, &["LPUSH", "q", "y"]);
    assert_eq!(reply(&mut r2), "*2\r\n$1\r\nq\r\n$1\r\ny\r\n");
    // BLMOVE woken by a push, and the client's pipeline continues after.
    r1.send(b"*6\r\n$6\r\nBLMOVE\r\n$1\r\ns\r\n$1\r\nd\r\n$5\r\nRIGHT\r\n$4\r\nLEFT\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n");
    wait_blocked(c, 1);
    cmd::<i64>(c, &["RPUSH", "s", "m"]);
    assert_eq!(reply(&mut r1), "$1\r\nm\r\n");
    assert_eq!(reply(&mut r1), "+PONG\r\n");
    assert_eq!(range(c, "d"), ["m"]);
    // BLMPOP woken by LPUSH via another key's move.
    r2.send(b"*5\r\n$6\r\nBLMPOP\r\n$1\r\n0\r\n$1\r\n1\r\n$1\r\nz\r\n$4\r\nLEFT\r\n*1\r\n$4\r\nPING\r\n");
    wait_blocked(c, 1);
    cmd::<String>(c, &["LMOVE", "d", "z", "LEFT", "LEFT"]);
    assert_eq!(reply(&mut r2), "*2\r\n$1\r\nz\r\n*1\r\n$1\r\nm\r\n");
    assert_eq!(reply(&mut r2), "+PONG\r\n");
}

#[test]
fn blocked_timeout_and_disconnect_cleanup() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let mut r = s.raw();
    // Not waited for as blocked: on a loaded machine the 0.3 s may pass
    // between two looks at blocked_clients.
    let t = Instant::now();
    r.send(b"*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$3\r\n0.3\r\n");
    assert_eq!(reply(&mut r), "*-1\r\n");
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    wait_blocked(c, 0);
    {
        let mut gone = s.raw();
        gone.send(b"*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n");
        wait_blocked(c, 1);
    }
    // The disconnected client leaves nothing: a push stays in the list.
    wait_blocked(c, 0);
    cmd::<i64>(c, &["RPUSH", "q", "kept"]);
    sleep(Duration::from_millis(100));
    assert_eq!(range(c, "q"), ["kept"]);
    // A killed blocked client is cleaned up too.
    let mut k = s.raw();
    let id = req(&mut k, &["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').trim().to_string();
    k.send(b"*3\r\n$5\r\nBLPOP\r\n$5\r\nnokey\r\n$1\r\n0\r\n");
    wait_blocked(c, 1);
    assert_eq!(cmd::<i64>(c, &["CLIENT", "KILL", "ID", &id]), 1);
    wait_blocked(c, 0);
}

/// Every list write propagates an effect that replays to the same lists
/// with the same versions (LMPOP as LPOP/RPOP n, BLPOP as LPOP, ...).
#[test]
fn list_effects_replay_identically() {
    use lattice::facade::commands::{replay, run_local};
    use lattice::facade::config::Config;
    use lattice::facade::core::client::ClientState;
    use lattice::facade::effects::Recorder;
    use lattice::facade::keyspace::hlc::Hlc;
    use lattice::facade::keyspace::{Value, SHARDS};
    use std::sync::Arc;

    let srv = lattice::facade::server::Server::new(Config::default());
    let rec = Arc::new(Recorder::default());
    srv.effects.subscribe(rec.clone());
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let mut client = ClientState::new(1);
    let mut x: u64 = 99;
    for _ in 0..4000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = format!("k{}", (x >> 20) % 5);
        let k2 = format!("k{}", (x >> 30) % 5);
        let v = format!("v{}", (x >> 40) % 7);
        let n = ((x >> 50) % 4).to_string();
        let m = ((x >> 54) % 9) as i64 - 4;
        let line: Vec<String> = match (x >> 33) % 16 {
            0 | 1 => vec!["RPUSH".into(), k, v.clone(), v],
            2 | 3 => vec!["LPUSH".into(), k, v],
            4 => vec!["LPOP".into(), k, n],
            5 => vec!["RPOP".into(), k],
            6 => vec!["LMOVE".into(), k, k2, "LEFT".into(), "RIGHT".into()],
            7 => vec!["RPOPLPUSH".into(), k, k2],
            8 => vec![
                "LMPOP".into(),
                "2".into(),
                k,
                k2,
                "RIGHT".into(),
                "COUNT".into(),
                n,
            ],
            9 => vec!["LINSERT".into(), k, "BEFORE".into(), v, "ins".into()],
            10 => vec!["LSET".into(), k, m.to_string(), v],
            11 => vec!["LREM".into(), k, m.to_string(), v],
            12 => vec!["LTRIM".into(), k, m.to_string(), n],
            13 => vec!["BLPOP".into(), k, k2, "0".into()],
            14 => vec![
                "BLMOVE".into(),
                k,
                k2,
                "RIGHT".into(),
                "LEFT".into(),
                "0".into(),
            ],
            _ => vec!["RPUSHX".into(), k, v],
        };
        let argv: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
        let _ = run_local(&srv, &mut clock, &stats, &mut client, &argv);
    }
    let copy = lattice::facade::server::Server::new(Config::default());
    let mut clock2 = Hlc::new(copy.node_id);
    let stats2 = copy.new_worker_stats();
    let effects = rec.0.lock().clone();
    assert!(effects.len() > 1000);
    for e in &effects {
        replay(&copy, &mut clock2, &stats2, e).unwrap_or_else(|err| panic!("{e:?}: {err}"));
    }
    let dump = |s: &lattice::facade::server::Server| {
        let mut m = std::collections::BTreeMap::new();
        for sh in 0..SHARDS {
            for e in s.keyspace.db(0).lock(sh).iter() {
                let Value::List(l) = &e.value else {
                    panic!("only lists")
                };
                let items: Vec<Vec<u8>> = l.iter().map(|b| b.to_vec()).collect();
                m.insert(e.key.to_vec(), (items, e.version));
            }
        }
        m
    };
    let (a, b) = (dump(&srv), dump(&copy));
    assert!(!a.is_empty());
    assert_eq!(a, b);
}

/// As in Redis, clients woken by a write are served before that write's
/// reply: chained BLMOVEs have all run when RPUSH returns.
#[test]
fn woken_clients_are_served_before_the_push_replies() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let mut r1 = s.raw();
    let mut r2 = s.raw();
    r1.send(
        b"*6\r\n$6\r\nBLMOVE\r\n$2\r\nl1\r\n$2\r\nl2\r\n$5\r\nRIGHT\r\n$4\r\nLEFT\r\n$1\r\n0\r\n",
    );
    wait_blocked(c, 1);
    r2.send(
        b"*6\r\n$6\r\nBLMOVE\r\n$2\r\nl2\r\n$2\r\nl3\r\n$4\r\nLEFT\r\n$5\r\nRIGHT\r\n$1\r\n0\r\n",
    );
    wait_blocked(c, 2);
    cmd::<i64>(c, &["RPUSH", "l1", "foo"]);
    assert!(range(c, "l1").is_empty());
    assert!(range(c, "l2").is_empty());
    assert_eq!(range(c, "l3"), ["foo"]);
    assert_eq!(reply(&mut r1), "$3\r\nfoo\r\n");
    assert_eq!(reply(&mut r2), "$3\r\nfoo\r\n");
    // A self-referential BRPOPLPUSH leaves the element in place.
    r1.send(b"*4\r\n$10\r\nBRPOPLPUSH\r\n$1\r\nb\r\n$1\r\nb\r\n$1\r\n0\r\n");
    wait_blocked(c, 1);
    cmd::<i64>(c, &["RPUSH", "b", "x"]);
    assert_eq!(range(c, "b"), ["x"]);
    assert_eq!(reply(&mut r1), "$1\r\nx\r\n");
}

/// CLIENT UNBLOCK ends a wait as a timeout or with an error; RENAME of a
/// list onto the awaited key wakes the waiter.
#[test]
fn client_unblock_and_rename_wake() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let mut r = s.raw();
    let id = req(&mut r, &["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').trim().to_string();
    let blpop = b"*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n";
    r.send(blpop);
    wait_blocked(c, 1);
    assert_eq!(cmd::<i64>(c, &["CLIENT", "UNBLOCK", &id]), 1);
    assert_eq!(reply(&mut r), "*-1\r\n");
    r.send(blpop);
    wait_blocked(c, 1);
    assert_eq!(cmd::<i64>(c, &["CLIENT", "UNBLOCK", &id, "ERROR"]), 1);
    assert_eq!(
        reply(&mut r),
        "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
    );
    wait_blocked(c, 0);
    assert_eq!(cmd::<i64>(c, &["CLIENT", "UNBLOCK", &id]), 0);
    assert_eq!(
        cmd_err(c, &["CLIENT", "UNBLOCK", &id, "FOO"]),
        "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"
    );
    assert_eq!(
        cmd_err(c, &["CLIENT", "UNBLOCK", "x"]),
        "ERR value is not an integer or out of range"
    );
    r.send(blpop);
    wait_blocked(c, 1);
    cmd::<i64>(c, &["RPUSH", "other", "a", "b"]);
    cmd::<()>(c, &["RENAME", "other", "q"]);
    assert_eq!(reply(&mut r), "*2\r\n$1\r\nq\r\n$1\r\na\r\n");
    assert_eq!(range(c, "q"), ["b"]);
}

/// A blocked client woken for a key that, by the time it runs, holds
/// another type (a transaction pushed, deleted and SET it) keeps waiting,
/// as in Redis, and is served by a later push.
#[test]
fn blocked_client_ignores_key_turned_into_another_type() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let mut r1 = s.raw();
    r1.send(b"*3\r\n$5\r\nBLPOP\r\n$4\r\nlist\r\n$1\r\n0\r\n");
    wait_blocked(c, 1);
    let mut t = s.raw();
    t.send(b"MULTI\r\nLPUSH list a\r\nDEL list\r\nSET list foo\r\nEXEC\r\n");
    for _ in 0..5 {
        reply(&mut t);
    }
    wait_blocked(c, 1);
    cmd::<i64>(c, &["DEL", "list"]);
    cmd::<i64>(c, &["LPUSH", "list", "b"]);
    assert_eq!(reply(&mut r1), "*2\r\n$4\r\nlist\r\n$1\r\nb\r\n");
}

/// Pushes and pops at both ends interleaved with LINSERT, LSET, LREM,
/// LTRIM and LPOS, short and long (300 and 5,000-byte) elements, under a
/// count fill and a byte-class fill: every reply and the whole list equal
/// redis-server's, and a DUMP of ours restores in Redis to the same list.
#[test]
fn head_and_tail_edits_match_redis() {
    use rand::{rngs::StdRng, Rng, SeedableRng};
    for fill in ["5", "-1"] {
        let srv = Server::start(&["--list-max-listpack-size", fill]);
        let o = RedisOracle::start(&["--list-max-listpack-size", fill]);
        let (a, b) = (&mut srv.conn(), &mut o.conn());
        let mut rng = StdRng::seed_from_u64(29);
        let val = |rng: &mut StdRng| match rng.gen_range(0..20) {
            0 => "L".repeat(5000),
            1..=3 => format!("{}", rng.gen_range(0..4)).repeat(300),
            _ => format!("v{}", rng.gen_range(0..8)),
        };
        for step in 0..1500 {
            let (v, w) = (val(&mut rng), val(&mut rng));
            let i = rng.gen_range(-12..12).to_string();
            let (t0, t1) = (
                rng.gen_range(0..3).to_string(),
                rng.gen_range(-3..0).to_string(),
            );
            let rank = if step % 2 == 0 { "1" } else { "-1" };
            let args: Vec<String> = match rng.gen_range(0..16) {
                0..=3 => s(&["LPUSH", "l", &v, &w]),
                4 | 5 => s(&["RPUSH", "l", &v]),
                6 => s(&["LPOP", "l"]),
                7 => s(&["RPOP", "l", "2"]),
                8 => s(&["LPOP", "l", "3"]),
                9 => s(&["LINSERT", "l", "BEFORE", &w, &v]),
                10 => s(&["LSET", "l", &i, &v]),
                11 => s(&["LREM", "l", &i, &v]),
                12 if step % 10 == 0 => s(&["LTRIM", "l", &t0, &t1]),
                13 => s(&["LPOS", "l", &v, "RANK", rank]),
                _ => s(&["LINDEX", "l", &i]),
            };
            assert_eq!(
                run(a, &args),
                run(b, &args),
                "fill {fill} step {step}: {args:?}"
            );
            if step % 25 == 0 {
                assert_eq!(range(a, "l"), range(b, "l"), "fill {fill} step {step}");
            }
        }
        assert_eq!(range(a, "l"), range(b, "l"));
        if exists(a, "l") {
            let dump: Vec<u8> = redis::cmd("DUMP").arg("l").query(a).unwrap();
            let _: () = redis::cmd("RESTORE")
                .arg("r")
                .arg(0)
                .arg(dump)
                .query(b)
                .unwrap();
            assert_eq!(range(b, "r"), range(a, "l"));
        }
    }
}
