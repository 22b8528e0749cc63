//! `io-uring yes`: plain TCP connections served through each worker's ring
//! (server/uring.rs), seen from real clients: deep pipelines and big values
//! (more than one provided buffer and more than one send), a client that
//! does not read, pushes, blocking, CLIENT KILL, QUIT, a replica over PSYNC
//! and many connections. Each test checks the server's log line first: on
//! a machine without io_uring the server says so and serves on epoll, and
//! the test says it ran on the fallback (it still checks the behaviour).

mod common;
use common::*;

use std::io::{Read, Write};
use std::time::Duration;

/// A server with `io-uring yes`, and whether it serves through the ring.
fn ring_server(extra: &[&str]) -> Server {
    let mut args = vec!["--io-uring", "yes"];
    args.extend_from_slice(extra);
    let s = Server::start(&args);
    let log = s.log();
    if log.contains("io_uring: plain TCP connections use a ring per worker") {
        return s;
    }
    let why = log
        .lines()
        .find(|l| l.contains("io_uring is unavailable"))
        .unwrap_or_else(|| panic!("no io_uring line in the log:\n{log}"));
    eprintln!("THIS TEST RAN ON THE EPOLL FALLBACK: {why}");
    s
}

fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

#[test]
fn the_ring_is_reported_in_the_log_and_no_is_epoll() {
    let s = ring_server(&[]);
    let mut c = s.conn();
    let got: Vec<String> = cmd(&mut c, &["CONFIG", "GET", "io-uring"]);
    assert_eq!(got, ["io-uring", "yes"]);
    let off = Server::start(&["--io-uring", "no"]);
    assert!(!off.log().contains("io_uring"), "{}", off.log());
    let e = cmd_err(&mut c, &["CONFIG", "SET", "io-uring", "no"]);
    assert!(e.contains("can't set immutable config"), "{e}");
}

#[test]
fn a_deep_pipeline_gets_every_reply_in_order() {
    let s = ring_server(&[]);
    let mut r = s.raw();
    // 60,000 commands (~2 MB in, ~2.5 MB out): many provided buffers and
    // more than one send of SEND_MAX.
    let n = 30_000;
    let mut req = Vec::new();
    for i in 0..n {
        let k = format!("key:{i}");
        let v = format!("value-{i:020}");
        req.extend(resp(&[b"SET", k.as_bytes(), v.as_bytes()]));
        req.extend(resp(&[b"GET", k.as_bytes()]));
    }
    let mut w = r.w.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&req).unwrap());
    for i in 0..n {
        assert_eq!(r.line(), "+OK\r\n", "SET {i}");
        assert_eq!(read_reply(&mut r), format!("value-{i:020}"), "GET {i}");
    }
    writer.join().unwrap();
}

#[test]
fn a_value_of_several_megabytes_goes_both_ways() {
    let s = ring_server(&[]);
    let mut r = s.raw();
    let big: Vec<u8> = (0..6_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut w = r.w.try_clone().unwrap();
    let req = resp(&[b"SET", b"big", &big]);
    let writer = std::thread::spawn(move || w.write_all(&req).unwrap());
    assert_eq!(r.line(), "+OK\r\n");
    writer.join().unwrap();
    for _ in 0..3 {
        r.send(&resp(&[b"GET", b"big"]));
        assert_eq!(r.line(), format!("${}\r\n", big.len()));
        let got = r.bytes(big.len() + 2);
        assert!(got[..big.len()] == big[..], "the value came back changed");
    }
    let mut c = s.conn();
    assert_eq!(cmd::<usize>(&mut c, &["STRLEN", "big"]), big.len());
}

/// Held replies: the server keeps reading and serving others while a
/// client does not read; everything arrives once it reads.
#[test]
fn a_client_that_does_not_read_holds_its_replies_and_gets_them_all() {
    let s = ring_server(&[]);
    let mut c = s.conn();
    let value = "v".repeat(100_000);
    cmd::<()>(&mut c, &["SET", "k", &value]);
    let mut r = s.raw();
    let mut req = Vec::new();
    for _ in 0..300 {
        req.extend(resp(&[b"GET", b"k"]));
    }
    r.send(&req); // 30 MB of replies, not read yet
    eventually("the held replies to show in CLIENT LIST", || {
        let list: String = cmd(&mut c, &["CLIENT", "LIST"]);
        list.lines()
            .filter(|l| l.contains("cmd=get"))
            .any(|l| l.contains("omem=") && !l.contains(" omem=0 "))
    });
    assert_eq!(cmd::<String>(&mut c, &["PING"]), "PONG");
    for i in 0..300 {
        assert_eq!(r.line(), "$100000\r\n", "reply {i}");
        assert_eq!(r.bytes(100_002).len(), 100_002);
    }
    r.send(b"PING\r\n");
    assert_eq!(r.line(), "+PONG\r\n");
}

/// The output buffer limit closes a client that does not read.
#[test]
fn the_output_limit_closes_a_client_that_does_not_read() {
    let s = ring_server(&["--client-output-buffer-limit", "normal 1mb 0 0"]);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SET", "k", &"v".repeat(100_000)]);
    let mut r = s.raw();
    let mut req = Vec::new();
    for _ in 0..400 {
        req.extend(resp(&[b"GET", b"k"]));
    }
    r.send(&req);
    eventually("the client to be closed", || {
        let list: String = cmd(&mut c, &["CLIENT", "LIST"]);
        list.lines().count() == 1
    });
    let mut sink = Vec::new();
    r.r.get_mut()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _ = r.r.read_to_end(&mut sink);
    assert!(
        sink.len() < 40_000_000,
        "it was not cut short: {}",
        sink.len()
    );
}

#[test]
fn pubsub_messages_from_another_connection_arrive() {
    let s = ring_server(&[]);
    let mut sub = s.raw();
    assert_eq!(
        raw_cmd(&mut sub, &["SUBSCRIBE", "ch"]),
        "*3[subscribe,ch,:1]"
    );
    let mut c = s.conn();
    for i in 0..200 {
        let n: i64 = cmd(&mut c, &["PUBLISH", "ch", &format!("m{i}")]);
        assert_eq!(n, 1);
    }
    for i in 0..200 {
        assert_eq!(read_reply(&mut sub), format!("*3[message,ch,m{i}]"));
    }
    assert_eq!(raw_cmd(&mut sub, &["PING"]), "*2[pong,]");
}

#[test]
fn a_blocked_blpop_is_woken_by_another_client() {
    let s = ring_server(&[]);
    let mut b = s.raw();
    b.send(&resp(&[b"BLPOP", b"list", b"0"]));
    let mut c = s.conn();
    eventually("the client to block", || {
        info_field::<u64>(&mut c, "blocked_clients") == 1
    });
    cmd::<()>(&mut c, &["RPUSH", "list", "x"]);
    assert_eq!(read_reply(&mut b), "*2[list,x]");
    assert_eq!(raw_cmd(&mut b, &["PING"]), "+PONG");
    // A timeout answers too.
    assert_eq!(raw_cmd(&mut b, &["BLPOP", "list", "0.05"]), "nil");
}

#[test]
fn client_kill_closes_the_connection() {
    let s = ring_server(&[]);
    let mut victim = s.raw();
    let id = raw_cmd(&mut victim, &["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').to_string();
    let mut c = s.conn();
    assert_eq!(cmd::<i64>(&mut c, &["CLIENT", "KILL", "ID", &id]), 1);
    assert!(
        victim.closed(),
        "the killed client's connection stayed open"
    );
    // A client killed with held replies (it does not read) goes too.
    cmd::<()>(&mut c, &["SET", "k", &"v".repeat(100_000)]);
    let mut r = s.raw();
    let id = raw_cmd(&mut r, &["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').to_string();
    let mut req = Vec::new();
    for _ in 0..300 {
        req.extend(resp(&[b"GET", b"k"]));
    }
    r.send(&req);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(cmd::<i64>(&mut c, &["CLIENT", "KILL", "ID", &id]), 1);
    eventually("the killed client to leave CLIENT LIST", || {
        let list: String = cmd(&mut c, &["CLIENT", "LIST"]);
        !list.contains(&format!("id={id} "))
    });
}

#[test]
fn quit_answers_then_closes_and_runs_nothing_after() {
    let s = ring_server(&[]);
    let mut r = s.raw();
    r.send(b"SET a 1\r\nQUIT\r\nSET b 1\r\n");
    assert_eq!(r.line(), "+OK\r\n");
    assert_eq!(r.line(), "+OK\r\n");
    assert!(r.closed());
    let mut c = s.conn();
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "a", "b"]), 1);
}

#[test]
fn a_replica_syncs_over_psync_from_a_ring_master() {
    let m = ring_server(&[]);
    let mut mc = m.conn();
    for i in 0..2000 {
        cmd::<()>(&mut mc, &["SET", &format!("k{i}"), &format!("v{i}")]);
    }
    let port = m.port.to_string();
    let r = Server::start(&["--replicaof", "127.0.0.1", &port, "--io-uring", "yes"]);
    let mut rc = r.conn();
    eventually("the replica to sync", || in_sync(&mut mc, &mut rc));
    // Live writes, and a pipeline right behind them on the same link.
    for i in 0..2000 {
        cmd::<()>(&mut mc, &["INCR", &format!("n{}", i % 10)]);
    }
    eventually("the replica to follow", || in_sync(&mut mc, &mut rc));
    assert_eq!(cmd::<i64>(&mut rc, &["GET", "n3"]), 200);
    let offset: u64 = info_field(&mut mc, "master_repl_offset");
    let waited: i64 = cmd(&mut mc, &["WAIT", "1", "5000"]);
    assert_eq!(waited, 1, "WAIT at offset {offset}");
}

#[test]
fn many_concurrent_connections_each_see_their_own_replies() {
    let s = ring_server(&[]);
    let port = s.port;
    let threads: Vec<_> = (0..64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut conns: Vec<redis::Connection> = (0..4)
                    .map(|_| {
                        redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                            .unwrap()
                            .get_connection()
                            .unwrap()
                    })
                    .collect();
                for i in 0..200 {
                    let c = &mut conns[i % 4];
                    let k = format!("t{t}:{i}");
                    cmd::<()>(c, &["SET", &k, &k]);
                    assert_eq!(cmd::<String>(c, &["GET", &k]), k);
                    cmd::<i64>(c, &["INCR", "total"]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = s.conn();
    assert_eq!(cmd::<i64>(&mut c, &["GET", "total"]), 64 * 200);
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 64 * 200 + 1);
}
