//! Client-side caching (CLIENT TRACKING): invalidation delivery over real
//! connections, in RESP3 push form and via RESP2 redirect, plus errors.
mod common;
use common::*;

/// Sends a command inline and returns the next `n` reply lines joined.
fn run(r: &mut Raw, c: &str, n: usize) -> String {
    r.send(format!("{c}\r\n").as_bytes());
    lines(r, n)
}

fn lines(r: &mut Raw, n: usize) -> String {
    (0..n).map(|_| r.line()).collect::<String>()
}

fn resp3(s: &Server) -> Raw {
    let mut r = s.raw();
    r.send(b"HELLO 3\r\n");
    // The HELLO map ends with "modules" and its empty array.
    while r.line() != "modules\r\n" {}
    assert_eq!(r.line(), "*0\r\n");
    r
}

const INV_FOO: &str = ">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nfoo\r\n";

#[test]
fn default_mode_invalidates_after_other_write() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    assert_eq!(run(&mut a, "CLIENT TRACKING on", 1), "+OK\r\n");
    assert_eq!(run(&mut a, "GET foo", 1), "_\r\n");
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SET", "foo", "1"]);
    assert_eq!(lines(&mut a, 6), INV_FOO);
    // The key is forgotten: a second write sends nothing; a PING comes next.
    cmd::<()>(&mut c, &["SET", "foo", "2"]);
    assert_eq!(run(&mut a, "PING", 1), "+PONG\r\n");
}

#[test]
fn resp2_redirect_to_subscriber_and_flushall() {
    let s = Server::start(&[]);
    let mut sub = s.raw();
    let id = run(&mut sub, "CLIENT ID", 1)[1..].trim().to_string();
    run(&mut sub, "SUBSCRIBE __redis__:invalidate", 6);
    let mut t = s.raw();
    let on = format!("CLIENT TRACKING on REDIRECT {id}");
    assert_eq!(run(&mut t, &on, 1), "+OK\r\n");
    assert_eq!(run(&mut t, "CLIENT GETREDIR", 1), format!(":{id}\r\n"));
    run(&mut t, "GET foo", 1);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SET", "foo", "1"]);
    let msg = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n";
    assert_eq!(lines(&mut sub, 8), format!("{msg}*1\r\n$3\r\nfoo\r\n"));
    cmd::<()>(&mut c, &["FLUSHALL"]);
    assert_eq!(lines(&mut sub, 6), format!("{msg}$-1\r\n"));
}

#[test]
fn bcast_prefix_and_noloop() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    run(&mut a, "CLIENT TRACKING on BCAST PREFIX fo NOLOOP", 1);
    assert_eq!(run(&mut a, "SET foo 1", 1), "+OK\r\n"); // own write: no push
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SET", "bar", "1"]); // no match
    cmd::<()>(&mut c, &["SET", "foo", "1"]);
    assert_eq!(lines(&mut a, 6), INV_FOO);
    assert_eq!(run(&mut a, "PING", 1), "+PONG\r\n");
}

#[test]
fn optin_tracks_only_after_caching_yes() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    run(&mut a, "CLIENT TRACKING on OPTIN", 1);
    run(&mut a, "GET bar", 1);
    run(&mut a, "CLIENT CACHING yes", 1);
    run(&mut a, "GET foo", 1);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SET", "bar", "1"]);
    cmd::<()>(&mut c, &["SET", "foo", "1"]);
    assert_eq!(lines(&mut a, 6), INV_FOO);
}

#[test]
fn errors_match_redis() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let e = |c: &mut redis::Connection, a: &str| cmd_err(c, &a.split(' ').collect::<Vec<_>>());
    assert!(e(&mut c, "CLIENT TRACKING on PREFIX a")
        .contains("PREFIX option requires BCAST mode to be enabled"));
    assert!(e(&mut c, "CLIENT TRACKING on OPTIN OPTOUT")
        .contains("You can't use OPTIN and OPTOUT at the same time"));
    assert!(e(&mut c, "CLIENT TRACKING on REDIRECT 9999")
        .contains("The client ID you want redirect to does not exist"));
    assert!(e(&mut c, "CLIENT CACHING yes").contains("CLIENT CACHING can be called only"));
    assert!(e(&mut c, "CLIENT TRACKING on BCAST PREFIX a PREFIX ab")
        .contains("Prefix 'a' overlaps with another provided prefix 'ab'"));
    assert_eq!(cmd::<i64>(&mut c, &["CLIENT", "GETREDIR"]), -1);
}
