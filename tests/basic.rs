//! Smoke tests of the connection loop through real clients.
mod common;
use common::*;

#[test]
fn ping_set_get_and_errors() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(cmd::<String>(&mut c, &["PING"]), "PONG");
    assert_eq!(cmd::<String>(&mut c, &["SET", "k", "v"]), "OK");
    assert_eq!(cmd::<String>(&mut c, &["GET", "k"]), "v");
    assert_eq!(cmd::<Option<String>>(&mut c, &["GET", "missing"]), None);
    assert_eq!(
        cmd_err(&mut c, &["GET"]),
        "ERR wrong number of arguments for 'get' command"
    );
    assert!(cmd_err(&mut c, &["NOSUCH", "a"]).starts_with("ERR unknown command 'NOSUCH'"));
}

#[test]
fn pipelines_and_inline_commands() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    let mut batch = Vec::new();
    for i in 0..1000 {
        batch.extend_from_slice(
            format!("*3\r\n$3\r\nSET\r\n$4\r\nk{i:03}\r\n$1\r\nv\r\n").as_bytes(),
        );
    }
    r.send(&batch);
    for _ in 0..1000 {
        assert_eq!(r.line(), "+OK\r\n");
    }
    r.send(b"PING\r\nGET k001\r\n");
    assert_eq!(r.line(), "+PONG\r\n");
    assert_eq!(r.line(), "$1\r\n");
    assert_eq!(r.line(), "v\r\n");
}

#[test]
fn protocol_error_closes_only_that_connection() {
    let s = Server::start(&["--proto-max-bulk-len", "1000"]);
    let mut bad = s.raw();
    bad.send(b"*1\r\n$2000\r\n");
    assert_eq!(bad.line(), "-ERR Protocol error: invalid bulk length\r\n");
    assert!(bad.closed());
    let mut bad2 = s.raw();
    bad2.send(b"*1\r\nfoo\r\n");
    assert_eq!(
        bad2.line(),
        "-ERR Protocol error: expected '$', got 'f'\r\n"
    );
    let mut c = s.conn();
    assert_eq!(cmd::<String>(&mut c, &["PING"]), "PONG");
}

#[test]
fn resp3_via_hello() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    r.send(b"HELLO 3\r\n");
    assert_eq!(r.line(), "%7\r\n");
    // Skip the map's 7 pairs: the last value is the empty "modules" array.
    while r.line() != "*0\r\n" {}
    r.send(b"GET nokey\r\n");
    assert_eq!(r.line(), "_\r\n");
}
