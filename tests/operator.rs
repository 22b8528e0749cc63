//! What an operator meets (issue 15): the directives that change how a
//! replica treats its master's failed commands, the log lines at the
//! moments operators watch, and redis-cli's operator modes.
mod common;
use common::*;

use std::time::Duration;

/// A command from the master that fails here (XADD: streams are not built)
/// is logged as Redis logs it; `propagation-error-behavior panic` (what
/// Redis's own test suite runs with) stops the replica, `ignore` goes on.
#[test]
fn propagation_error_behavior() {
    let master = RedisOracle::start(&[]);
    let port = master.port.to_string();
    let ignore = Server::start(&["--replicaof", "127.0.0.1", &port]);
    let mut panic = Server::start(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--propagation-error-behavior",
        "panic",
    ]);
    let mut m = master.conn();
    for s in [&ignore, &panic] {
        let mut c = s.conn();
        eventually("linked", || {
            info_field::<String>(&mut c, "master_link_status") == "up"
        });
    }
    let _: () = cmd(&mut m, &["SET", "before", "1"]);
    let _: String = cmd(&mut m, &["XADD", "stream", "*", "f", "v"]);
    let _: () = cmd(&mut m, &["SET", "after", "1"]);
    let mut c = ignore.conn();
    eventually("the ignoring replica goes on", || {
        cmd::<Option<String>>(&mut c, &["GET", "after"]).is_some()
    });
    let critical = "== CRITICAL == This replica is sending an error to its master: 'ERR unknown command 'XADD'";
    assert!(ignore.log().contains(critical), "{}", ignore.log());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = panic.child.try_wait().unwrap() {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "still running");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let log = panic.log();
    assert!(log.contains(critical), "{log}");
    assert!(
        log.contains("Guru Meditation: This replica panicked sending an error to its master after processing the command 'xadd'"),
        "{log}"
    );
}
