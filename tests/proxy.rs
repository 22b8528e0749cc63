//! The fault-injecting proxy (tests/common/proxy.rs) itself, with real
//! servers: a master and a replica whose `replicaof` points at the proxy,
//! and raw clients talking to a server through it.

mod common;
use common::proxy::Proxy;
use common::*;
use std::io::BufReader;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A master, a proxy in front of it and a replica of the proxy, in sync.
fn pair() -> (Server, Proxy, Server) {
    let m = Server::start(&[]);
    let p = Proxy::start(m.port);
    let r = Server::start(&["--replicaof", "127.0.0.1", &p.port.to_string()]);
    let (mut mc, mut rc) = (m.conn(), r.conn());
    eventually("the replica in sync through the proxy", || {
        in_sync(&mut mc, &mut rc)
    });
    (m, p, r)
}

fn fill(c: &mut redis::Connection, prefix: &str, n: usize) {
    let mut p = redis::pipe();
    for i in 0..n {
        p.cmd("SET").arg(format!("{prefix}{i}")).arg(i).ignore();
    }
    let _: () = p.query(c).unwrap();
}

/// A raw RESP connection to `port` (the proxy's).
fn raw_to(port: u16) -> Raw {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    Raw {
        r: BufReader::new(s.try_clone().unwrap()),
        w: s,
    }
}

fn link(c: &mut redis::Connection) -> String {
    info_field(c, "master_link_status")
}

#[test]
fn writes_flow_through_and_the_bytes_are_counted() {
    let (m, p, r) = pair();
    let (mut mc, mut rc) = (m.conn(), r.conn());
    assert_eq!(p.accepted(), 1);
    assert_eq!(p.connections(), 1);
    // The replica's handshake (PING, REPLCONF, PSYNC) went up.
    assert!(p.bytes_up() > 0);
    let (up, down) = (p.bytes_up(), p.bytes_down());
    let big = "x".repeat(1 << 20);
    let _: () = cmd(&mut mc, &["SET", "big", &big]);
    fill(&mut mc, "k", 1000);
    eventually("the writes on the replica", || in_sync(&mut mc, &mut rc));
    let got: String = cmd(&mut rc, &["GET", "big"]);
    assert_eq!(got.len(), big.len());
    assert!(
        p.bytes_down() - down >= (1 << 20) + 1000 * 20,
        "bytes down grew by {} only",
        p.bytes_down() - down
    );
    // The replica acknowledges what it applied (REPLCONF ACK).
    eventually("an ACK going up", || p.bytes_up() > up);
}

#[test]
fn cut_then_heal_and_the_replica_catches_up() {
    let (m, p, r) = pair();
    let (mut mc, mut rc) = (m.conn(), r.conn());
    fill(&mut mc, "before", 100);
    eventually("the first writes", || in_sync(&mut mc, &mut rc));

    p.cut();
    eventually("the replica's link down", || link(&mut rc) == "down");
    // New connections are closed at once while cut.
    assert!(raw_to(p.port).closed());
    assert_eq!(p.connections(), 0);
    fill(&mut mc, "during", 500);
    let _: () = cmd(&mut mc, &["SET", "during-cut", "1"]);
    // Nothing can reach the replica: its link is down and stays down.
    let none: Option<String> = cmd(&mut rc, &["GET", "during-cut"]);
    assert_eq!(none, None);
    assert_ne!(digest(&mut mc), digest(&mut rc));
    let accepted = p.accepted();
    eventually("the replica retrying through the cut", || {
        p.accepted() > accepted
    });
    assert_eq!(link(&mut rc), "down");

    p.heal();
    eventually("the replica caught up after heal", || {
        in_sync(&mut mc, &mut rc)
    });
    let v: String = cmd(&mut rc, &["GET", "during-cut"]);
    assert_eq!(v, "1");
    assert_eq!(p.connections(), 1);
}

#[test]
fn freeze_holds_the_data_back_and_thaw_releases_it() {
    let (m, p, r) = pair();
    let (mut mc, mut rc) = (m.conn(), r.conn());
    let accepted = p.accepted();

    p.freeze();
    let (up, down) = (p.bytes_up(), p.bytes_down());
    let _: () = cmd(&mut mc, &["SET", "frozen", "v"]);
    fill(&mut mc, "f", 200);
    // A while for the bytes to arrive if the freeze leaked them (only a
    // broken proxy fails here, however slow the machine).
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!((p.bytes_up(), p.bytes_down()), (up, down), "bytes moved");
    let none: Option<String> = cmd(&mut rc, &["GET", "frozen"]);
    assert_eq!(none, None);
    // The link is still open: no reconnect, the replica thinks it is up.
    assert_eq!(p.connections(), 1);
    assert_eq!(p.accepted(), accepted);
    assert_eq!(link(&mut rc), "up");

    p.thaw();
    eventually("the held writes on the replica", || {
        in_sync(&mut mc, &mut rc)
    });
    let v: String = cmd(&mut rc, &["GET", "frozen"]);
    assert_eq!(v, "v");
    assert!(p.bytes_down() > down);
    assert_eq!(p.accepted(), accepted, "thaw needed no reconnect");
}

#[test]
fn killed_connections_are_reopened_by_the_replica() {
    let (m, p, r) = pair();
    let (mut mc, mut rc) = (m.conn(), r.conn());
    p.kill_connections();
    eventually("the replica reconnected", || {
        p.accepted() >= 2 && p.connections() == 1
    });
    fill(&mut mc, "after", 100);
    eventually("writes after the reconnect", || in_sync(&mut mc, &mut rc));
}

#[test]
fn delay_holds_each_chunk_back() {
    let s = Server::start(&[]);
    let p = Proxy::start(s.port);
    let mut c = raw_to(p.port);
    assert_eq!(raw_cmd(&mut c, &["PING"]), "+PONG");
    p.set_delay(Duration::from_millis(200));
    let t = Instant::now();
    assert_eq!(raw_cmd(&mut c, &["PING"]), "+PONG");
    // Delayed going up and again coming down.
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    p.set_delay(Duration::ZERO);
    assert_eq!(raw_cmd(&mut c, &["SET", "k", "v"]), "+OK");
}

#[test]
fn truncate_closes_after_n_bytes_and_garble_inverts_one_chunk() {
    let s = Server::start(&[]);
    let p = Proxy::start(s.port);

    let mut c = raw_to(p.port);
    p.truncate_next_down(3);
    c.send(b"PING\r\n");
    assert_eq!(c.bytes(3), b"+PO");
    assert!(c.closed(), "the connection stays open after the truncation");

    let mut c = raw_to(p.port);
    p.garble_next_down();
    c.send(b"PING\r\n");
    let want: Vec<u8> = b"+PONG\r\n".iter().map(|b| !b).collect();
    assert_eq!(c.bytes(7), want);
    // Only that chunk: the next reply is intact.
    assert_eq!(raw_cmd(&mut c, &["PING"]), "+PONG");
    assert!(p.bytes_down() >= 3 + 7 + 7);
}

#[test]
fn a_target_that_is_down_closes_the_client() {
    let p = Proxy::start(free_port());
    assert!(raw_to(p.port).closed());
    assert_eq!(p.accepted(), 1);
    assert_eq!(p.connections(), 0);
}
