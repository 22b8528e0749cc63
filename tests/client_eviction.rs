//! Client eviction (`maxmemory-clients`): a client whose buffers take the
//! clients' memory over the limit is disconnected, the largest first, and
//! counted in INFO's `evicted_clients`; CLIENT NO-EVICT exempts a client.
//! What a user sees: which connections close, CLIENT LIST's `tot-mem` and
//! `qbuf`, INFO's fields, and that the server goes on answering.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A raw connection named `name` (CLIENT SETNAME answered).
fn named(s: &Server, name: &str) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(format!("CLIENT SETNAME {name}\r\n").as_bytes())
        .unwrap();
    let mut b = [0u8; 5];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"+OK\r\n");
    c
}

/// Sends the first `n` bytes of a command with one argument of `n` bytes
/// (its end never comes): the client's query buffer holds them.
fn hold_query(c: &mut TcpStream, n: usize) {
    let mut data = format!("*2\r\n${n}\r\n").into_bytes();
    data.extend(std::iter::repeat_n(b'v', n));
    let _ = c.write_all(&data);
}

/// CLIENT LIST's field `f` of the client named `name`, if listed.
fn field(c: &mut redis::Connection, name: &str, f: &str) -> Option<u64> {
    let list: String = cmd(c, &["CLIENT", "LIST"]);
    let line = list
        .lines()
        .find(|l| l.contains(&format!(" name={name} ")))?;
    let v = line
        .split(' ')
        .find_map(|kv| kv.strip_prefix(&format!("{f}=")))?;
    v.parse().ok()
}

/// Whether the server closed `c` (reads until EOF or a reset).
fn closed(c: &mut TcpStream) -> bool {
    let mut b = [0u8; 4096];
    loop {
        match c.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn a_client_over_the_limit_is_evicted_and_counted() {
    let s = Server::start(&["--maxmemory-clients", "1mb"]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["CLIENT", "NO-EVICT", "on"]);
    let mut small = named(&s, "small");
    hold_query(&mut small, 100_000);
    eventually("the small client's query to arrive", || {
        field(&mut c, "small", "qbuf") == Some(100_000)
    });
    let tot = field(&mut c, "small", "tot-mem").unwrap();
    assert!((100_000..200_000).contains(&tot), "tot-mem={tot}");
    assert_eq!(info_field::<u64>(&mut c, "evicted_clients"), 0);

    let mut big = named(&s, "big");
    hold_query(&mut big, 1_500_000);
    assert!(closed(&mut big), "the big client stays connected");
    assert_eq!(field(&mut c, "big", "tot-mem"), None);
    assert_eq!(info_field::<u64>(&mut c, "evicted_clients"), 1);
    // The rest is under the limit: the small client stays.
    assert_eq!(field(&mut c, "small", "qbuf"), Some(100_000));
    assert!(s.log().contains("Evicting client: "), "{}", s.log());
    let pong: String = cmd(&mut c, &["PING"]);
    assert_eq!(pong, "PONG");
}

#[test]
fn no_evict_exempts_a_client_even_over_the_limit() {
    let s = Server::start(&["--maxmemory-clients", "1mb"]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["CLIENT", "NO-EVICT", "on"]);
    let mut keep = named(&s, "keep");
    keep.write_all(b"CLIENT NO-EVICT on\r\n").unwrap();
    let mut b = [0u8; 5];
    keep.read_exact(&mut b).unwrap();
    let list: String = cmd(&mut c, &["CLIENT", "LIST"]);
    assert!(list.contains("name=keep age="), "{list}");
    assert!(
        list.lines()
            .any(|l| l.contains("name=keep ") && l.contains(" flags=e ")),
        "{list}"
    );
    // Over the limit on its own: it stays, counted in mem_clients_normal.
    hold_query(&mut keep, 1_500_000);
    eventually("the whole query to arrive", || {
        field(&mut c, "keep", "qbuf") == Some(1_500_000)
    });
    assert!(field(&mut c, "keep", "tot-mem").unwrap() > 1 << 20);
    assert!(info_field::<u64>(&mut c, "mem_clients_normal") > 1 << 20);
    assert_eq!(info_field::<u64>(&mut c, "evicted_clients"), 0);
    // Lowering the limit evicts evictable clients only (none here).
    let _: () = cmd(&mut c, &["CONFIG", "SET", "maxmemory-clients", "200kb"]);
    assert!(field(&mut c, "keep", "qbuf").is_some());
    assert!(s
        .log()
        .contains("Over client maxmemory after evicting all evictable clients"));
    let e = cmd_err(&mut c, &["CLIENT", "NO-EVICT", "maybe"]);
    let o = RedisOracle::start(&[]);
    assert_eq!(e, cmd_err(&mut o.conn(), &["CLIENT", "NO-EVICT", "maybe"]));
}

#[test]
fn the_largest_clients_go_first_and_only_until_under_the_limit() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["CLIENT", "NO-EVICT", "on"]);
    let sizes = [100_000, 300_000, 900_000];
    let mut held = vec![];
    for (i, n) in sizes.iter().enumerate() {
        for j in 0..2 {
            let name = format!("c{i}{j}");
            let mut r = named(&s, &name);
            hold_query(&mut r, *n);
            eventually("the query to arrive", || {
                field(&mut c, &name, "qbuf") == Some(*n as u64)
            });
            held.push((name, r));
        }
    }
    let mem = |c: &mut redis::Connection, name: &str| field(c, name, "tot-mem").unwrap();
    let _: () = cmd(&mut c, &["CLIENT", "SETNAME", "control"]);
    let control = mem(&mut c, "control");
    let sum_small: u64 = ["c00", "c01", "c10", "c11"]
        .iter()
        .map(|n| mem(&mut c, n))
        .sum();
    // Room for all but the two largest.
    let limit = (sum_small + control).to_string();
    let _: () = cmd(&mut c, &["CONFIG", "SET", "maxmemory-clients", &limit]);
    let listed = |c: &mut redis::Connection| -> Vec<String> {
        let names = ["c00", "c01", "c10", "c11", "c20", "c21"];
        names
            .iter()
            .filter(|n| field(c, n, "qbuf").is_some())
            .map(|n| n.to_string())
            .collect()
    };
    assert_eq!(listed(&mut c), ["c00", "c01", "c10", "c11"]);
    assert_eq!(info_field::<u64>(&mut c, "evicted_clients"), 2);
    for (name, r) in held.iter_mut() {
        if name.starts_with("c2") {
            assert!(closed(r), "{name} still open");
        }
    }
}

#[test]
fn replies_a_client_does_not_read_are_held_counted_and_evicted() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["CLIENT", "NO-EVICT", "on"]);
    let _: () = cmd(&mut c, &["SETRANGE", "k", "1000000", "v"]);
    let mut lazy = named(&s, "lazy");
    // GETs of 1 MB whose replies nobody reads: the server keeps reading
    // and holds the replies (as Redis), so the client's memory grows.
    eventually("the held replies to pass 10 MB", || {
        lazy.write_all(b"GET k\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(10));
        field(&mut c, "lazy", "tot-mem").unwrap() > 10 << 20
    });
    assert!(field(&mut c, "lazy", "omem").unwrap() > 1 << 20);
    assert_eq!(info_field::<u64>(&mut c, "evicted_clients"), 0);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "maxmemory-clients", "5mb"]);
    assert_eq!(field(&mut c, "lazy", "tot-mem"), None);
    assert!(closed(&mut lazy));
    assert_eq!(info_field::<u64>(&mut c, "evicted_clients"), 1);
}

#[test]
fn messages_a_subscriber_does_not_read_evict_it() {
    let s = Server::start(&["--maxmemory-clients", "2mb"]);
    let mut c = s.conn();
    let mut sub = named(&s, "sub");
    sub.write_all(b"SUBSCRIBE ch\r\n").unwrap();
    eventually("the subscription", || {
        field(&mut c, "sub", "sub") == Some(1)
    });
    let msg = "x".repeat(100_000);
    eventually("the subscriber to be evicted", || {
        let _: i64 = cmd(&mut c, &["PUBLISH", "ch", &msg]);
        field(&mut c, "sub", "sub").is_none()
    });
    assert!(info_field::<u64>(&mut c, "evicted_clients") >= 1);
    let pong: String = cmd(&mut c, &["PING"]);
    assert_eq!(pong, "PONG");
}

#[test]
fn the_limit_may_be_a_percentage_of_maxmemory() {
    let s = Server::start(&["--maxmemory", "4mb", "--maxmemory-clients", "50%"]);
    let mut c = s.conn();
    let got: Vec<String> = cmd(&mut c, &["CONFIG", "GET", "maxmemory-clients"]);
    assert_eq!(got, ["maxmemory-clients", "50%"]);
    let _: () = cmd(&mut c, &["CLIENT", "NO-EVICT", "on"]);
    // 1.5 MB is under 50% of 4 MB...
    let mut r = named(&s, "r");
    hold_query(&mut r, 1_500_000);
    eventually("the query to arrive", || {
        field(&mut c, "r", "qbuf") == Some(1_500_000)
    });
    // ...and over 25%.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "maxmemory-clients", "25%"]);
    assert!(closed(&mut r));
    // Without maxmemory, a percentage sets no limit.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    let mut r = named(&s, "r2");
    hold_query(&mut r, 1_500_000);
    eventually("the query to arrive", || {
        field(&mut c, "r2", "qbuf") == Some(1_500_000)
    });
}
