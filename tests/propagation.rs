//! What a master propagates, read as a raw replica does: SYNC on a plain
//! TCP connection, skip the RDB payload, then parse the command stream and
//! compare it record by record with what Redis 7.0 sends for the same
//! commands (checked against the real redis-server): transactions wrapped
//! in MULTI/EXEC only when they wrote more than once, relative TTLs as
//! absolute PEXPIREAT / PXAT, lazily expired keys as one DEL each (wrapped
//! with the rest of one command's records, not for SCAN), PUBLISH passed
//! on, the client's spelling kept unless the command was rewritten.

mod common;
use common::*;
use std::time::Duration;

/// A raw replica attached with SYNC, positioned after the RDB payload.
fn attach(s: &Server) -> Raw {
    let mut c = s.conn();
    // As Redis's test helper: no PING in the stream while we read it.
    let _: () = cmd(
        &mut c,
        &["CONFIG", "SET", "repl-ping-replica-period", "3600"],
    );
    let mut r = s.raw();
    r.send(b"SYNC\r\n");
    let header = loop {
        let l = r.line();
        assert!(!l.is_empty(), "connection closed during SYNC");
        if !l.trim().is_empty() {
            break l; // newlines are keepalives while the RDB is produced
        }
    };
    let len: usize = header
        .trim_end()
        .strip_prefix('$')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected SYNC header {header:?}"));
    let rdb = r.bytes(len);
    assert!(rdb.starts_with(b"REDIS"), "payload is not an RDB");
    r
}

/// The next command of the stream, its name lowercased.
fn next(r: &mut Raw) -> Vec<String> {
    let mut argv = next_as_is(r);
    argv[0] = argv[0].to_lowercase();
    argv
}

/// The next command of the stream, byte for byte.
fn next_as_is(r: &mut Raw) -> Vec<String> {
    let head = r.line();
    let n: usize = head
        .trim_end()
        .strip_prefix('*')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected stream line {head:?}"));
    (0..n)
        .map(|_| {
            let len: usize = r.line().trim_end()[1..].parse().unwrap();
            let b = r.bytes(len + 2);
            String::from_utf8_lossy(&b[..len]).into_owned()
        })
        .collect()
}

/// Reads one record per pattern; a `*` argument matches anything.
fn expect(r: &mut Raw, patterns: &[&[&str]]) {
    for p in patterns {
        let got = next(r);
        let ok = got.len() == p.len() && got.iter().zip(p.iter()).all(|(g, w)| *w == "*" || g == w);
        assert!(ok, "expected {p:?}, got {got:?}");
    }
}

/// Nothing more arrives for a short while.
fn expect_quiet(r: &mut Raw) {
    r.w.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut l = String::new();
    let got = std::io::BufRead::read_line(&mut r.r, &mut l);
    assert!(got.is_err() || l.is_empty(), "unexpected stream data {l:?}");
    r.w.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn transactions_wrap_only_several_writes() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut r = attach(&s);
    // One write: not wrapped.
    let _: () = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("a")
        .arg("1")
        .cmd("GET")
        .arg("a")
        .query(&mut c)
        .unwrap();
    // Several writes, across databases: wrapped, SELECT ahead of MULTI.
    let _: () = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("b")
        .arg("2")
        .cmd("SELECT")
        .arg("1")
        .cmd("INCR")
        .arg("n")
        .cmd("GET")
        .arg("n")
        .query(&mut c)
        .unwrap();
    // Read-only and empty transactions: nothing.
    let _: () = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg("a")
        .query(&mut c)
        .unwrap();
    let _: () = redis::pipe().atomic().query(&mut c).unwrap();
    // SPOP with a count: one SREM per member, wrapped (Redis 7.0).
    let _: i64 = cmd(&mut c, &["SADD", "s", "a", "b", "c"]);
    let popped: Vec<String> = cmd(&mut c, &["SPOP", "s", "2"]);
    let _: () = cmd(&mut c, &["SET", "c", "3"]);
    expect(
        &mut r,
        &[
            &["select", "0"],
            &["set", "a", "1"],
            &["multi"],
            &["set", "b", "2"],
            &["select", "1"],
            &["incr", "n"],
            &["exec"],
            &["sadd", "s", "a", "b", "c"],
            &["multi"],
            &["srem", "s", &popped[0]],
            &["srem", "s", &popped[1]],
            &["exec"],
            &["set", "c", "3"],
        ],
    );
    expect_quiet(&mut r);
}

#[test]
fn relative_ttls_become_absolute() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut r = attach(&s);
    let before = now_ms();
    let _: () = cmd(&mut c, &["SET", "k", "v"]);
    let _: i64 = cmd(&mut c, &["EXPIRE", "k", "100"]);
    let _: () = cmd(&mut c, &["SET", "k2", "v", "EX", "100"]);
    let _: Option<String> = cmd(&mut c, &["GETDEL", "k2"]);
    let _: Option<String> = cmd(&mut c, &["GETEX", "k", "PERSIST"]);
    let _: Option<String> = cmd(&mut c, &["GETEX", "k"]); // no effect
    let _: () = cmd(&mut c, &["SET", "end", "1"]);
    let after = now_ms();
    expect(&mut r, &[&["select", "0"], &["set", "k", "v"]]);
    for (name, key, at) in [("pexpireat", "k", 2), ("set", "k2", 4)] {
        let got = next(&mut r);
        assert_eq!((got[0].as_str(), got[1].as_str()), (name, key), "{got:?}");
        if name == "set" {
            assert_eq!(&got[2..4], ["v", "PXAT"], "{got:?}");
        }
        let ts: i64 = got[at].parse().unwrap();
        assert!(ts >= before + 100_000 && ts <= after + 100_000, "{got:?}");
    }
    expect(
        &mut r,
        &[&["del", "k2"], &["persist", "k"], &["set", "end", "1"]],
    );
    expect_quiet(&mut r);
}

#[test]
fn lazy_expiry_dels_wrapped_only_within_one_command() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    for k in ["g", "s1", "s2"] {
        let _: () = cmd(&mut c, &["SET", k, "v", "PX", "1"]);
    }
    std::thread::sleep(Duration::from_millis(20));
    let mut r = attach(&s);
    let _: Option<String> = cmd(&mut c, &["GET", "g"]);
    expect(&mut r, &[&["select", "0"], &["del", "g"]]);
    let _: (String, Vec<String>) = cmd(&mut c, &["SCAN", "0"]);
    let mut dels = vec![next(&mut r), next(&mut r)];
    dels.sort();
    assert_eq!(dels, [["del", "s1"], ["del", "s2"]]);
    // One command expiring two keys, or expiring then writing one: wrapped.
    for k in ["m1", "m2", "w"] {
        let _: () = cmd(&mut c, &["SET", k, "v", "PX", "1"]);
    }
    std::thread::sleep(Duration::from_millis(20));
    let _: Vec<Option<String>> = cmd(&mut c, &["MGET", "m1", "m2"]);
    let _: () = cmd(&mut c, &["SET", "w", "new"]);
    for _ in 0..3 {
        let _ = next(&mut r); // the SET ... PXAT records
    }
    expect(
        &mut r,
        &[
            &["multi"],
            &["del", "m1"],
            &["del", "m2"],
            &["exec"],
            &["multi"],
            &["del", "w"],
            &["set", "w", "new"],
            &["exec"],
        ],
    );
    let _: i64 = cmd(&mut c, &["PUBLISH", "ch", "hello"]);
    expect(&mut r, &[&["publish", "ch", "hello"]]);
    expect_quiet(&mut r);
}

#[test]
fn commands_keep_the_clients_spelling_unless_rewritten() {
    let s = Server::start(&[]);
    let mut c = s.raw();
    let mut r = attach(&s);
    for line in [
        "set a 1\r\n",
        "set a 2 XX get\r\n",
        "Incr n\r\n",
        "set b 1 ex 100\r\n",
        "getdel a\r\n",
    ] {
        c.send(line.as_bytes());
        let _ = read_reply(&mut c);
    }
    let got: Vec<Vec<String>> = (0..6).map(|_| next_as_is(&mut r)).collect();
    let want: [&[&str]; 5] = [
        &["SELECT", "0"],
        &["set", "a", "1"],
        &["set", "a", "2", "XX"],
        &["Incr", "n"],
        &["SET", "b", "1", "PXAT"],
    ];
    for (g, w) in got.iter().zip(want) {
        assert_eq!(&g[..w.len()], w, "{got:?}");
    }
    assert_eq!(got[5], ["DEL", "a"]);
    expect_quiet(&mut r);
}

/// MOVE and COPY onto a key that expires as they lock it: the DEL goes
/// with the command's record, wrapped, as Redis 7.0 sends them (checked
/// with `redis-cli --replica` against redis-server 7.0.15).
#[test]
fn move_and_copy_wrap_the_lazy_expiry_of_their_keys() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let _: () = cmd(&mut c, &["SELECT", "1"]);
    let _: () = cmd(&mut c, &["SET", "mk", "old", "PX", "1"]);
    let _: () = cmd(&mut c, &["SELECT", "0"]);
    let _: () = cmd(&mut c, &["SET", "mk", "new"]);
    let _: () = cmd(&mut c, &["SET", "ck", "old", "PX", "1"]);
    let _: () = cmd(&mut c, &["SET", "cs", "v"]);
    std::thread::sleep(Duration::from_millis(20));
    let mut r = attach(&s);
    assert_eq!(cmd::<i64>(&mut c, &["MOVE", "mk", "1"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["COPY", "cs", "ck"]), 1);
    expect(
        &mut r,
        &[
            &["select", "1"],
            &["multi"],
            &["del", "mk"],
            &["select", "0"],
            &["move", "mk", "1"],
            &["exec"],
            &["multi"],
            &["del", "ck"],
            &["copy", "cs", "ck"],
            &["exec"],
        ],
    );
    expect_quiet(&mut r);
}

/// SORT ... STORE is sent as the list it stored (Redis sends the SORT,
/// which a replica could only re-run on the same source and BY/GET keys;
/// here they are read under other locks than the destination's): RPUSH,
/// after a DEL when it replaced a key, the two as one unit.
#[test]
fn sort_store_propagates_the_stored_list_as_one_unit() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: i64 = cmd(&mut c, &["RPUSH", "src", "c", "a", "b"]);
    let _: () = cmd(&mut c, &["SET", "dst", "x"]);
    let mut r = attach(&s);
    let sort = |c: &mut redis::Connection, dst: &str| {
        let n: i64 = cmd(c, &["SORT", "src", "ALPHA", "STORE", dst]);
        assert_eq!(n, 3);
    };
    sort(&mut c, "dst");
    sort(&mut c, "new");
    expect(
        &mut r,
        &[
            &["select", "0"],
            &["multi"],
            &["del", "dst"],
            &["rpush", "dst", "a", "b", "c"],
            &["exec"],
            &["rpush", "new", "a", "b", "c"],
        ],
    );
    expect_quiet(&mut r);
}

/// MIGRATE (without COPY) is sent as one DEL of the keys the target took,
/// as Redis rewrites it.
#[test]
fn migrate_propagates_one_del() {
    let s = Server::start(&[]);
    let target = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["MSET", "sa", "1", "sb", "2"]);
    let mut r = attach(&s);
    let port = target.port.to_string();
    let argv = [
        "MIGRATE",
        "127.0.0.1",
        &port,
        "",
        "0",
        "30000",
        "KEYS",
        "sa",
        "sb",
    ];
    assert_eq!(cmd::<String>(&mut c, &argv), "OK");
    expect(&mut r, &[&["select", "0"], &["del", "sa", "sb"]]);
    expect_quiet(&mut r);
}

/// DEBUG REPLICATE sends its command to replicas without running it here,
/// as Redis's (its tests make a replica diverge with it): the master's
/// keyspace and its AOF never see the command, the replica's stream does.
#[test]
fn debug_replicate_reaches_replicas_alone() {
    let s = Server::start(&["--appendonly", "yes"]);
    let mut c = s.conn();
    let mut r = attach(&s);
    let ok: String = cmd(&mut c, &["DEBUG", "REPLICATE", "SET", "diverged", "1"]);
    assert_eq!(ok, "OK");
    expect(&mut r, &[&["select", "0"], &["set", "diverged", "1"]]);
    let _: () = cmd(&mut c, &["SET", "kept", "2"]);
    expect(&mut r, &[&["set", "kept", "2"]]);
    expect_quiet(&mut r);
    assert_eq!(cmd::<Option<String>>(&mut c, &["GET", "diverged"]), None);
    // Both writes have reached the AOF's file once the second is in it
    // (appendfsync everysec writes each event loop's batch).
    let aof = || -> String {
        let dir = s.dir.join("appendonlydir");
        let mut text = String::new();
        for f in std::fs::read_dir(dir).unwrap().flatten() {
            text += &String::from_utf8_lossy(&std::fs::read(f.path()).unwrap());
        }
        text
    };
    eventually("SET kept in the AOF", || aof().contains("kept"));
    assert!(!aof().contains("diverged"), "the AOF holds {:?}", aof());
    let err = cmd_err(&mut c, &["DEBUG", "REPLICATE"]);
    assert!(err.contains("unknown subcommand"), "{err}");
}
