//! Keyspace commands through the real binary: DEL UNLINK EXISTS TYPE TOUCH
//! RENAME RENAMENX MOVE COPY SWAPDB FLUSHDB FLUSHALL DBSIZE KEYS SCAN
//! RANDOMKEY OBJECT, with Redis 7's replies and error strings.
mod common;
use common::*;

use std::collections::HashSet;

fn set(c: &mut redis::Connection, k: &str, v: &str) {
    assert_eq!(cmd::<String>(c, &["SET", k, v]), "OK");
}

#[test]
fn del_unlink_exists_type_touch() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    for k in ["a", "b", "c"] {
        set(&mut c, k, "1");
    }
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "a", "a", "b", "nokey"]), 3);
    assert_eq!(cmd::<i64>(&mut c, &["TOUCH", "a", "a", "nokey"]), 2);
    assert_eq!(cmd::<String>(&mut c, &["TYPE", "a"]), "string");
    assert_eq!(cmd::<String>(&mut c, &["TYPE", "nokey"]), "none");
    assert_eq!(cmd::<i64>(&mut c, &["DEL", "a", "a", "nokey"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["UNLINK", "b", "c", "nokey"]), 2);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "a", "b", "c"]), 0);
    assert_eq!(
        cmd_err(&mut c, &["DEL"]),
        "ERR wrong number of arguments for 'del' command"
    );
    assert_eq!(
        cmd_err(&mut c, &["TYPE", "a", "b"]),
        "ERR wrong number of arguments for 'type' command"
    );
}

#[test]
fn rename_and_renamenx() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(
        cmd_err(&mut c, &["RENAME", "nokey", "x"]),
        "ERR no such key"
    );
    assert_eq!(
        cmd_err(&mut c, &["RENAMENX", "nokey", "x"]),
        "ERR no such key"
    );
    assert_eq!(
        cmd_err(&mut c, &["RENAME", "nokey", "nokey"]),
        "ERR no such key"
    );
    assert_eq!(
        cmd::<String>(&mut c, &["SET", "src", "v", "EX", "100"]),
        "OK"
    );
    assert_eq!(cmd::<String>(&mut c, &["RENAME", "src", "src"]), "OK");
    assert_eq!(cmd::<i64>(&mut c, &["RENAMENX", "src", "src"]), 0);
    set(&mut c, "dst", "old");
    assert_eq!(cmd::<String>(&mut c, &["RENAME", "src", "dst"]), "OK");
    assert_eq!(cmd::<Option<String>>(&mut c, &["GET", "src"]), None);
    assert_eq!(cmd::<String>(&mut c, &["GET", "dst"]), "v");
    let ttl = cmd::<i64>(&mut c, &["TTL", "dst"]);
    assert!((95..=100).contains(&ttl), "RENAME keeps the TTL, got {ttl}");
    set(&mut c, "other", "o");
    assert_eq!(cmd::<i64>(&mut c, &["RENAMENX", "dst", "other"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["RENAMENX", "dst", "fresh"]), 1);
    assert_eq!(cmd::<String>(&mut c, &["GET", "fresh"]), "v");
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "dst"]), 0);
}

#[test]
fn move_between_databases() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(
        cmd_err(&mut c, &["MOVE", "k", "0"]),
        "ERR source and destination objects are the same"
    );
    assert_eq!(
        cmd_err(&mut c, &["MOVE", "k", "99"]),
        "ERR DB index is out of range"
    );
    assert_eq!(
        cmd_err(&mut c, &["MOVE", "k", "-1"]),
        "ERR DB index is out of range"
    );
    assert_eq!(
        cmd_err(&mut c, &["MOVE", "k", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(cmd::<i64>(&mut c, &["MOVE", "k", "1"]), 0);
    assert_eq!(cmd::<String>(&mut c, &["SET", "k", "v", "EX", "100"]), "OK");
    assert_eq!(cmd::<i64>(&mut c, &["MOVE", "k", "1"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "k"]), 0);
    set(&mut c, "k", "here");
    assert_eq!(cmd::<i64>(&mut c, &["MOVE", "k", "1"]), 0, "target exists");
    assert_eq!(cmd::<String>(&mut c, &["SELECT", "1"]), "OK");
    assert_eq!(cmd::<String>(&mut c, &["GET", "k"]), "v");
    assert!(cmd::<i64>(&mut c, &["TTL", "k"]) > 90, "MOVE keeps the TTL");
}

#[test]
fn copy_with_db_and_replace() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(
        cmd_err(&mut c, &["COPY", "a", "a"]),
        "ERR source and destination objects are the same"
    );
    assert_eq!(
        cmd_err(&mut c, &["COPY", "a", "b", "DB", "99"]),
        "ERR DB index is out of range"
    );
    assert_eq!(
        cmd_err(&mut c, &["COPY", "a", "b", "DB", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        cmd_err(&mut c, &["COPY", "a", "b", "foo"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(&mut c, &["COPY", "a", "b", "DB"]),
        "ERR syntax error"
    );
    assert_eq!(cmd::<i64>(&mut c, &["COPY", "a", "b"]), 0, "missing source");
    assert_eq!(
        cmd::<String>(&mut c, &["SET", "a", "va", "PX", "100000"]),
        "OK"
    );
    assert_eq!(cmd::<i64>(&mut c, &["COPY", "a", "b"]), 1);
    assert_eq!(cmd::<String>(&mut c, &["GET", "b"]), "va");
    assert!(
        cmd::<i64>(&mut c, &["PTTL", "b"]) > 90_000,
        "COPY copies the TTL"
    );
    set(&mut c, "c", "vc");
    assert_eq!(cmd::<i64>(&mut c, &["COPY", "a", "c"]), 0);
    assert_eq!(cmd::<String>(&mut c, &["GET", "c"]), "vc");
    assert_eq!(cmd::<i64>(&mut c, &["COPY", "a", "c", "REPLACE"]), 1);
    assert_eq!(cmd::<String>(&mut c, &["GET", "c"]), "va");
    // Same key name into another database is allowed.
    assert_eq!(cmd::<i64>(&mut c, &["COPY", "a", "a", "DB", "2"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["COPY", "a", "a", "DB", "2"]), 0);
    assert_eq!(
        cmd::<i64>(&mut c, &["COPY", "c", "a", "DB", "3", "DB", "2", "REPLACE"]),
        1
    );
    assert_eq!(cmd::<String>(&mut c, &["SELECT", "2"]), "OK");
    assert_eq!(cmd::<String>(&mut c, &["GET", "a"]), "va");
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 1);
}

#[test]
fn swapdb_flushdb_flushall_dbsize() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut d = s.conn();
    assert_eq!(
        cmd_err(&mut c, &["SWAPDB", "x", "1"]),
        "ERR invalid first DB index"
    );
    assert_eq!(
        cmd_err(&mut c, &["SWAPDB", "0", "x"]),
        "ERR invalid second DB index"
    );
    assert_eq!(
        cmd_err(&mut c, &["SWAPDB", "0", "16"]),
        "ERR DB index is out of range"
    );
    assert_eq!(
        cmd_err(&mut c, &["SWAPDB", "0"]),
        "ERR wrong number of arguments for 'swapdb' command"
    );
    for i in 0..5 {
        set(&mut c, &format!("k{i}"), "v");
    }
    assert_eq!(cmd::<String>(&mut d, &["SELECT", "1"]), "OK");
    set(&mut d, "only1", "v");
    assert_eq!(cmd::<String>(&mut c, &["SWAPDB", "0", "1"]), "OK");
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 1);
    assert_eq!(cmd::<i64>(&mut d, &["DBSIZE"]), 5, "clients see the swap");
    assert_eq!(cmd::<String>(&mut c, &["SWAPDB", "1", "1"]), "OK");
    assert_eq!(cmd_err(&mut c, &["FLUSHDB", "foo"]), "ERR syntax error");
    assert_eq!(
        cmd_err(&mut c, &["FLUSHDB", "SYNC", "ASYNC"]),
        "ERR syntax error"
    );
    assert_eq!(cmd_err(&mut c, &["FLUSHALL", "now"]), "ERR syntax error");
    assert_eq!(cmd::<String>(&mut c, &["FLUSHDB", "ASYNC"]), "OK");
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 0);
    assert_eq!(cmd::<i64>(&mut d, &["DBSIZE"]), 5);
    assert_eq!(cmd::<String>(&mut c, &["SET", "x", "1"]), "OK");
    assert_eq!(cmd::<String>(&mut c, &["FLUSHALL", "sync"]), "OK");
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 0);
    assert_eq!(cmd::<i64>(&mut d, &["DBSIZE"]), 0);
    for i in 0..3000 {
        set(&mut c, &format!("big{i}"), "v");
    }
    assert_eq!(cmd::<String>(&mut c, &["FLUSHALL", "ASYNC"]), "OK");
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 0);
    assert_eq!(cmd::<String>(&mut c, &["FLUSHDB"]), "OK");
}

#[test]
fn keys_and_randomkey_skip_expired() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(cmd::<Option<String>>(&mut c, &["RANDOMKEY"]), None);
    for k in ["foo", "fob", "bar", "f[x]"] {
        set(&mut c, k, "v");
    }
    assert_eq!(
        cmd::<String>(&mut c, &["SET", "fog", "v", "PX", "30"]),
        "OK"
    );
    std::thread::sleep(std::time::Duration::from_millis(80));
    let mut all: Vec<String> = cmd(&mut c, &["KEYS", "*"]);
    all.sort();
    assert_eq!(all, vec!["bar", "f[x]", "fob", "foo"]);
    let mut f: Vec<String> = cmd(&mut c, &["KEYS", "fo?"]);
    f.sort();
    assert_eq!(f, vec!["fob", "foo"]);
    assert_eq!(cmd::<Vec<String>>(&mut c, &["KEYS", "f\\[*"]), vec!["f[x]"]);
    assert_eq!(
        cmd::<Vec<String>>(&mut c, &["KEYS", "b[a-c]r"]),
        vec!["bar"]
    );
    assert!(cmd::<Vec<String>>(&mut c, &["KEYS", "zz*"]).is_empty());
    for _ in 0..20 {
        let k: String = cmd(&mut c, &["RANDOMKEY"]);
        assert!(all.contains(&k), "RANDOMKEY returned {k}");
    }
    assert_eq!(
        cmd_err(&mut c, &["KEYS"]),
        "ERR wrong number of arguments for 'keys' command"
    );
    // Nested stars against a long key must not go exponential.
    set(&mut c, &"a".repeat(100), "v");
    let nested = format!("{}b", "a*".repeat(30));
    assert!(cmd::<Vec<String>>(&mut c, &["KEYS", &nested]).is_empty());
}

fn full_scan(c: &mut redis::Connection, extra: &[&str]) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut out = vec![];
    let mut calls = 0;
    loop {
        let mut args = vec!["SCAN", cursor.as_str()];
        args.extend_from_slice(extra);
        let (next, keys): (String, Vec<String>) = cmd(c, &args);
        out.extend(keys);
        calls += 1;
        assert!(calls < 100_000, "SCAN does not terminate");
        if next == "0" {
            return out;
        }
        cursor = next;
    }
}

#[test]
fn scan_options_and_errors() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(cmd_err(&mut c, &["SCAN", "x"]), "ERR invalid cursor");
    assert_eq!(
        cmd_err(&mut c, &["SCAN", "18446744073709551616"]),
        "ERR invalid cursor"
    );
    assert_eq!(
        cmd_err(&mut c, &["SCAN", "0", "COUNT", "0"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(&mut c, &["SCAN", "0", "COUNT", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(cmd_err(&mut c, &["SCAN", "0", "MATCH"]), "ERR syntax error");
    assert_eq!(
        cmd_err(&mut c, &["SCAN", "0", "foo", "bar"]),
        "ERR syntax error"
    );
    let (next, keys): (String, Vec<String>) = cmd(&mut c, &["SCAN", "0"]);
    assert_eq!((next.as_str(), keys.len()), ("0", 0), "empty db");
    for i in 0..500 {
        set(&mut c, &format!("user:{i}"), "v");
        set(&mut c, &format!("item:{i}"), "v");
    }
    let all = full_scan(&mut c, &[]);
    let uniq: HashSet<&String> = all.iter().collect();
    assert_eq!(uniq.len(), 1000);
    assert_eq!(all.len(), 1000, "no key returned twice without resizes");
    let users = full_scan(&mut c, &["MATCH", "user:*", "COUNT", "50"]);
    assert_eq!(users.len(), 500);
    assert!(users.iter().all(|k| k.starts_with("user:")));
    assert_eq!(full_scan(&mut c, &["TYPE", "STRING"]).len(), 1000);
    assert!(full_scan(&mut c, &["TYPE", "list"]).is_empty());
    assert_eq!(full_scan(&mut c, &["COUNT", "100000"]).len(), 1000);
    // A cursor we never returned still ends.
    let (next, _): (String, Vec<String>) = cmd(&mut c, &["SCAN", "-1"]);
    assert_eq!(next, "0");
}

fn set_many(c: &mut redis::Connection, prefix: &str, range: std::ops::Range<usize>) {
    let mut p = redis::pipe();
    for i in range {
        p.cmd("SET").arg(format!("{prefix}:{i}")).arg("v").ignore();
    }
    p.query::<()>(c).unwrap();
}

#[test]
fn scan_returns_stable_keys_across_resizes() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut w = s.conn();
    // About 31 keys per shard: SCAN COUNT 5 splits each shard into parts.
    set_many(&mut c, "stable", 0..8000);
    let mut cursor = "0".to_string();
    let mut seen = HashSet::new();
    let mut calls = 0;
    loop {
        let (next, keys): (String, Vec<String>) = cmd(&mut c, &["SCAN", &cursor, "COUNT", "5"]);
        seen.extend(keys);
        calls += 1;
        // Meanwhile more than double every shard, so every table resizes,
        // many of them between two parts of the same shard.
        if calls <= 20 {
            set_many(&mut w, "grow", (calls - 1) * 500..calls * 500);
        }
        if next == "0" {
            break;
        }
        cursor = next;
        assert!(calls < 100_000, "SCAN does not terminate");
    }
    for i in 0..8000 {
        assert!(seen.contains(&format!("stable:{i}")), "stable:{i} missed");
    }
}

#[test]
fn scan_skips_expired_keys() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    for i in 0..50 {
        set(&mut c, &format!("live{i}"), "v");
        let k = format!("gone{i}");
        assert_eq!(cmd::<String>(&mut c, &["SET", &k, "v", "PX", "20"]), "OK");
    }
    std::thread::sleep(std::time::Duration::from_millis(60));
    let keys = full_scan(&mut c, &[]);
    assert_eq!(keys.len(), 50);
    assert!(keys.iter().all(|k| k.starts_with("live")));
}

#[test]
fn object_subcommands() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    set(&mut c, "int", "12345");
    set(&mut c, "small", "5");
    set(&mut c, "str", "hello");
    set(&mut c, "long", &"x".repeat(45));
    let enc = |c: &mut redis::Connection, k: &str| -> Option<String> {
        cmd(c, &["OBJECT", "ENCODING", k])
    };
    assert_eq!(enc(&mut c, "int").as_deref(), Some("int"));
    assert_eq!(enc(&mut c, "str").as_deref(), Some("embstr"));
    assert_eq!(enc(&mut c, "long").as_deref(), Some("raw"));
    assert_eq!(enc(&mut c, "nokey"), None);
    assert_eq!(
        cmd::<i64>(&mut c, &["OBJECT", "REFCOUNT", "small"]),
        2147483647
    );
    assert_eq!(cmd::<i64>(&mut c, &["OBJECT", "REFCOUNT", "int"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["OBJECT", "REFCOUNT", "str"]), 1);
    assert_eq!(
        cmd::<Option<i64>>(&mut c, &["OBJECT", "REFCOUNT", "nokey"]),
        None
    );
    let idle: i64 = cmd(&mut c, &["OBJECT", "IDLETIME", "str"]);
    assert!((0..=2).contains(&idle));
    assert_eq!(
        cmd_err(&mut c, &["OBJECT", "FREQ", "str"]),
        "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."
    );
    assert_eq!(
        cmd::<Option<i64>>(&mut c, &["OBJECT", "FREQ", "nokey"]),
        None
    );
    let help: Vec<String> = cmd(&mut c, &["OBJECT", "HELP"]);
    assert!(help[0].starts_with("OBJECT <subcommand>"));
    assert_eq!(help.last().unwrap(), "    Prints this help.");
    assert_eq!(
        cmd_err(&mut c, &["OBJECT", "foo"]),
        "ERR unknown subcommand 'foo'. Try OBJECT HELP."
    );
    assert_eq!(
        cmd_err(&mut c, &["OBJECT"]),
        "ERR wrong number of arguments for 'object' command"
    );
    assert_eq!(
        cmd_err(&mut c, &["OBJECT", "ENCODING"]),
        "ERR wrong number of arguments for 'object|encoding' command"
    );
}

/// RANDOMKEY is uniform over keys, not over shards: each of a few keys
/// (which land in arbitrary shards, some right after others) comes up.
/// With 5 keys and 500 draws, a fair pick misses one with p < 1e-47.
#[test]
fn randomkey_reaches_every_key() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let keys = ["a", "b", "c", "foo", "bar"];
    for k in keys {
        cmd::<()>(&mut c, &["SET", k, "v"]);
    }
    let mut seen = std::collections::HashSet::new();
    for _ in 0..500 {
        seen.insert(cmd::<String>(&mut c, &["RANDOMKEY"]));
    }
    assert_eq!(seen.len(), keys.len(), "{seen:?}");
}
