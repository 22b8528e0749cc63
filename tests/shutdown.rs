//! SHUTDOWN with a lagging replica (Redis 7.0's shutdown-timeout): the
//! master waits for it, SHUTDOWN ABORT cancels the wait with Redis's error
//! to the waiting client, and the timeout ends it. The replica lags behind
//! a frozen proxy (connection open, nothing carried), as a stopped one does.

mod common;

use common::proxy::Proxy;
use common::{cmd, cmd_err, eventually, Server};

/// A master (with `extra`), a proxy in front of it, and a replica of it
/// through the proxy, in sync with `k` = 1.
fn master_and_replica(extra: &[&str]) -> (Server, Proxy, Server) {
    let m = Server::start(extra);
    let p = Proxy::start(m.port);
    let port = p.port.to_string();
    let r = Server::start(&["--replicaof", "127.0.0.1", &port]);
    let (mut mc, mut rc) = (m.conn(), r.conn());
    let _: () = cmd(&mut mc, &["SET", "k", "1"]);
    eventually("the replica in sync", || {
        common::in_sync(&mut mc, &mut rc) && !lagging(&mut mc)
    });
    (m, p, r)
}

/// Whether the master's replica has not acknowledged its whole stream.
fn lagging(c: &mut redis::Connection) -> bool {
    let info: String = cmd(c, &["INFO", "replication"]);
    let ours = info
        .lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"));
    let acked = info
        .lines()
        .find_map(|l| l.strip_prefix("slave0:"))
        .and_then(|l| l.split(',').find_map(|kv| kv.strip_prefix("offset=")));
    ours.map(str::trim) != acked
}

/// Sends SHUTDOWN on a connection of its own; the thread returns its reply.
fn shutdown_in_background(m: &Server) -> std::thread::JoinHandle<Result<(), String>> {
    let mut c = m.conn();
    std::thread::spawn(move || {
        redis::cmd("SHUTDOWN")
            .query::<()>(&mut c)
            .map_err(|e| e.to_string())
    })
}

fn shutdown_left_ms(c: &mut redis::Connection) -> Option<u64> {
    let info: String = cmd(c, &["INFO", "server"]);
    info.lines()
        .find_map(|l| l.strip_prefix("shutdown_in_milliseconds:"))
        .and_then(|v| v.trim().parse().ok())
}

fn exited(s: &mut Server) -> bool {
    s.child.try_wait().ok().flatten().is_some()
}

#[test]
fn shutdown_waits_for_a_lagging_replica_and_abort_cancels_it() {
    let (mut m, p, r) = master_and_replica(&["--shutdown-timeout", "300"]);
    let mut mc = m.conn();
    p.freeze();
    let _: i64 = cmd(&mut mc, &["INCR", "k"]);
    let waiting = shutdown_in_background(&m);
    eventually("the shutdown waiting", || {
        shutdown_left_ms(&mut mc).is_some()
    });
    assert!(shutdown_left_ms(&mut mc).unwrap() > 200_000);
    assert_eq!(cmd::<String>(&mut mc, &["PING"]), "PONG");

    let _: () = cmd(&mut mc, &["SHUTDOWN", "ABORT"]);
    let reply = waiting.join().unwrap();
    let err = reply.expect_err("an aborted SHUTDOWN answers an error");
    assert!(
        err.contains("Errors trying to SHUTDOWN. Check logs."),
        "{err}"
    );
    assert_eq!(shutdown_left_ms(&mut mc), None);
    assert_eq!(
        cmd_err(&mut mc, &["SHUTDOWN", "ABORT"]),
        "ERR No shutdown in progress."
    );
    // Writes were paused during the wait only.
    let _: i64 = cmd(&mut mc, &["INCR", "k"]);
    assert!(m.log().contains("Shutdown manually aborted."));

    // Once the replica has everything, SHUTDOWN exits at once.
    p.thaw();
    let mut rc = r.conn();
    eventually("the replica caught up", || {
        cmd::<String>(&mut rc, &["GET", "k"]) == "3" && !lagging(&mut mc)
    });
    let _ = shutdown_in_background(&m);
    eventually("the master exited", || exited(&mut m));
    assert!(m
        .log()
        .contains("1 of 1 replicas are in sync when shutting down."));
    assert!(!m.log().contains("Lagging replica"));
}

#[test]
fn shutdown_stops_waiting_at_the_timeout() {
    let (mut m, p, r) = master_and_replica(&["--shutdown-timeout", "1"]);
    let mut mc = m.conn();
    p.freeze();
    let _: i64 = cmd(&mut mc, &["INCR", "k"]);
    let _ = shutdown_in_background(&m);
    eventually("the master exited", || exited(&mut m));
    let log = m.log();
    assert!(
        log.contains("Waiting for replicas before shutting down."),
        "{log}"
    );
    assert!(log.contains("Lagging replica"), "{log}");
    assert!(
        log.contains("0 of 1 replicas are in sync when shutting down."),
        "{log}"
    );
    // The replica never saw the INCR.
    drop(p);
    let mut rc = r.conn();
    assert_eq!(cmd::<String>(&mut rc, &["GET", "k"]), "1");
}

#[test]
fn shutdown_now_does_not_wait() {
    let (mut m, p, _r) = master_and_replica(&["--shutdown-timeout", "300"]);
    let mut mc = m.conn();
    p.freeze();
    let _: i64 = cmd(&mut mc, &["INCR", "k"]);
    let _ = redis::cmd("SHUTDOWN").arg("NOW").query::<()>(&mut mc);
    eventually("the master exited", || exited(&mut m));
    assert!(!m.log().contains("Waiting for replicas"));
}
