//! KeyDB's small commands (issue 28 item 3): KEYDB.MEXISTS, KEYDB.HRENAME,
//! OBJECT LASTMODIFIED, with KeyDB's replies (its db.cpp, t_hash.cpp,
//! object.cpp), and HRENAME's propagation (KeyDB does not propagate it; we
//! do, as HDEL + HSET).

mod common;

use common::*;
use redis::Value;

#[test]
fn mexists_answers_each_key_as_a_boolean() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let () = cmd(&mut c, &["SET", "a", "1"]);
    let () = cmd(&mut c, &["SET", "gone", "1", "PX", "1"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let v: Vec<i64> = cmd(&mut c, &["KEYDB.MEXISTS", "a", "b", "gone", "a"]);
    assert_eq!(v, [1, 0, 0, 1]);
    // RESP3: booleans.
    let mut r = s.raw();
    raw_cmd(&mut r, &["HELLO", "3"]);
    let reply = raw_cmd(&mut r, &["KEYDB.MEXISTS", "a", "b"]);
    assert_eq!(reply, "*2[#t,#f]");
    let e = cmd_err(&mut c, &["KEYDB.MEXISTS"]);
    assert!(e.contains("wrong number of arguments"), "{e}");
}

#[test]
fn hrename_moves_a_field_and_replicates_as_hdel_and_hset() {
    let m = Server::start(&[]);
    let r = Server::start(&[]);
    let (mut mc, mut rc) = (m.conn(), r.conn());
    let () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &m.port.to_string()]);
    eventually("the replica to sync", || in_sync(&mut mc, &mut rc));
    let _: i64 = cmd(&mut mc, &["HSET", "h", "a", "1", "b", "2"]);
    assert_eq!(cmd::<i64>(&mut mc, &["KEYDB.HRENAME", "h", "a", "c"]), 1);
    let all: Vec<String> = cmd(&mut mc, &["HGETALL", "h"]);
    let mut pairs: Vec<_> = all
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    pairs.sort();
    assert_eq!(pairs, [("b".into(), "2".into()), ("c".into(), "1".into())]);
    // Onto a field that exists: it is replaced.
    assert_eq!(cmd::<i64>(&mut mc, &["KEYDB.HRENAME", "h", "c", "b"]), 1);
    assert_eq!(cmd::<Vec<String>>(&mut mc, &["HGETALL", "h"]), ["b", "1"]);
    let e = cmd_err(&mut mc, &["KEYDB.HRENAME", "h", "nosuch", "x"]);
    assert!(e.contains("hash key doesn't exist"), "{e}");
    assert_eq!(
        cmd::<Value>(&mut mc, &["KEYDB.HRENAME", "missing", "a", "b"]),
        Value::Nil
    );
    let () = cmd(&mut mc, &["SET", "s", "x"]);
    let e = cmd_err(&mut mc, &["KEYDB.HRENAME", "s", "a", "b"]);
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    eventually("the replica to follow", || in_sync(&mut mc, &mut rc));
    assert_eq!(cmd::<Vec<String>>(&mut rc, &["HGETALL", "h"]), ["b", "1"]);
}

#[test]
fn object_lastmodified_counts_seconds_since_the_last_write() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let () = cmd(&mut c, &["SET", "k", "v"]);
    assert_eq!(cmd::<i64>(&mut c, &["OBJECT", "LASTMODIFIED", "k"]), 0);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let _: Option<String> = cmd(&mut c, &["GET", "k"]);
    let n: i64 = cmd(&mut c, &["OBJECT", "LASTMODIFIED", "k"]);
    assert!((2..=3).contains(&n), "{n}");
    let () = cmd(&mut c, &["SET", "k", "w"]);
    assert_eq!(cmd::<i64>(&mut c, &["OBJECT", "LASTMODIFIED", "k"]), 0);
    assert_eq!(
        cmd::<Value>(&mut c, &["OBJECT", "LASTMODIFIED", "nosuch"]),
        Value::Nil
    );
}
