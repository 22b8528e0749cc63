//! What an operator meets (issue 15): the directives that change how a
//! replica treats its master's failed commands, the log lines at the
//! moments operators watch, and redis-cli's operator modes.
mod common;
use common::*;

use std::time::Duration;

/// A command from the master that fails here (a SETBIT past this
/// replica's smaller `proto-max-bulk-len`: until RESTORE-ASKING was built
/// it was a command this build lacked) is logged as Redis logs it; `propagation-error-behavior panic` (what Redis's own
/// test suite runs with) stops the replica, `ignore` goes on.
#[test]
fn propagation_error_behavior() {
    let master = RedisOracle::start(&[]);
    let port = master.port.to_string();
    let ignore = Server::start(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--proto-max-bulk-len",
        "1mb",
    ]);
    let mut panic = Server::start(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--proto-max-bulk-len",
        "1mb",
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
    let _: i64 = cmd(&mut m, &["SETBIT", "k", "20000000", "1"]);
    let _: () = cmd(&mut m, &["SET", "after", "1"]);
    let mut c = ignore.conn();
    eventually("the ignoring replica goes on", || {
        cmd::<Option<String>>(&mut c, &["GET", "after"]).is_some()
    });
    let critical = "== CRITICAL == This replica is sending an error to its master: 'ERR bit offset is not an integer or out of range' after processing the command 'setbit'";
    assert!(ignore.log().contains(critical), "{}", ignore.log());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
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
        log.contains("Guru Meditation: This replica panicked sending an error to its master after processing the command 'setbit'"),
        "{log}"
    );
}

/// The messages (without pid, role, time and level) of a log, in order.
fn messages(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.splitn(7, ' ').nth(6).map(str::to_string))
        .collect()
}

/// Asserts that `log` has a line starting with each of `wanted`, in that
/// order.
fn assert_in_order(log: &str, wanted: &[String]) {
    let msgs = messages(log);
    let mut at = 0;
    for w in wanted {
        match msgs[at..].iter().position(|m| m.starts_with(w.as_str())) {
            Some(i) => at += i + 1,
            None => panic!("no {w:?} (in order) in:\n{log}"),
        }
    }
}

/// The master side of a diskless full sync says what Redis 7.0 says, in
/// the same order: the request, full or partial, the delay, the snapshot's
/// start and end, the transfer, the replica online. The same lines are
/// checked in redis-server's own log for the same event, and the replica
/// tags its lines `S` (the master `M`), as Redis's.
#[test]
fn master_side_sync_logs_match_redis() {
    let delay = ["--repl-diskless-sync-delay", "1"];
    let ours = Server::start(&delay);
    let redis = RedisOracle::start(&delay);
    let our_replica = Server::start(&["--replicaof", "127.0.0.1", &ours.port.to_string()]);
    let redis_replica = RedisOracle::start(&["--replicaof", "127.0.0.1", &redis.port.to_string()]);
    for (log, replica_port) in [
        (
            Box::new(|| ours.log()) as Box<dyn Fn() -> String>,
            our_replica.port,
        ),
        (
            Box::new(|| std::fs::read_to_string(redis.dir.join("redis.log")).unwrap_or_default()),
            redis_replica.port,
        ),
    ] {
        let name = format!("127.0.0.1:{replica_port}");
        eventually("the replica is online", || {
            log().contains(&format!("Synchronization with replica {name} succeeded"))
        });
        assert_in_order(
            &log(),
            &[
                format!("Replica {name} asks for synchronization"),
                format!("Full resync requested by replica {name}"),
                "Delay next BGSAVE for diskless SYNC".into(),
                "Starting BGSAVE for SYNC with target: replicas sockets".into(),
                "Diskless rdb transfer, done reading from pipe, 1 replicas still up.".into(),
                "Background RDB transfer terminated with success".into(),
                format!("Streamed RDB transfer with replica {name} succeeded (socket). Waiting for REPLCONF ACK from slave to enable streaming"),
                format!("Synchronization with replica {name} succeeded"),
            ],
        );
    }
    // The replica side names the PSYNC it tries, as Redis's replica.
    let redis_replica_log =
        std::fs::read_to_string(redis_replica.dir.join("redis.log")).unwrap_or_default();
    for log in [our_replica.log(), redis_replica_log] {
        assert_in_order(
            &log,
            &[
                "Connecting to MASTER 127.0.0.1:".into(),
                "MASTER <-> REPLICA sync started".into(),
                "Partial resynchronization not possible (no cached master)".into(),
                "Full resync from master: ".into(),
                "MASTER <-> REPLICA sync: Finished with success".into(),
            ],
        );
    }
    let pid = |s: &Server| s.child.id();
    assert!(ours.log().contains(&format!("{}:M ", pid(&ours))));
    let replica_log = our_replica.log();
    assert!(
        replica_log.contains(&format!("{}:S ", pid(&our_replica))),
        "{replica_log}"
    );
    assert!(
        !replica_log.contains(&format!("{}:M ", pid(&our_replica))),
        "{replica_log}"
    );
}

/// Start-up and SHUTDOWN log in Redis's order: the first lines tagged `C`
/// (before the server knows its role), "User requested shutdown..." before
/// the final save, then the save, then the goodbye.
#[test]
fn shutdown_logs_in_redis_order() {
    let s = Server::start(&["--save", "3600 1", "--pidfile", "lattice-test.pid"]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["SET", "k", "v"]);
    let _ = redis::cmd("SHUTDOWN").query::<()>(&mut c);
    eventually("exited", || s.log().contains("ready to exit, bye bye"));
    let log = s.log();
    let pid = s.child.id();
    assert!(log.starts_with(&format!("{pid}:C ")), "{log}");
    assert_in_order(
        &log,
        &[
            "oO0OoO0OoO0Oo LatticeDB is starting".into(),
            "Running mode=standalone".into(),
            "Ready to accept connections".into(),
            "User requested shutdown...".into(),
            "Saving the final RDB snapshot before exiting.".into(),
            "DB saved on disk".into(),
            "Removing the pid file.".into(),
            "LatticeDB is now ready to exit, bye bye...".into(),
        ],
    );
}

/// Loading says what it loads before it starts (file, size, Redis's
/// version/age/memory lines), its progress every few seconds (keys of the
/// announced total, bytes, rate), and totals and time at the end. A
/// SHUTDOWN while loading does not save (that would write half the data).
#[test]
fn loading_logs_and_shutdown_while_loading() {
    let data = tempdir("loading-logs");
    {
        let s = Server::start(&[]);
        let mut c = s.conn();
        let _: () = cmd(&mut c, &["DEBUG", "POPULATE", "15000", "key", "10"]);
        let _: () = cmd(&mut c, &["SAVE"]);
        std::fs::copy(s.dir.join("dump.rdb"), data.join("dump.rdb")).unwrap();
    }
    let dir = data.to_str().unwrap();
    // 3 s or more of loading at 200 us a key (more: the sleep's granularity).
    let slow = Server::start(&["--dir", dir, "--key-load-delay", "200"]);
    let log = slow.log();
    assert_in_order(
        &log,
        &[
            "Loading RDB from dump.rdb (".into(),
            "Loading RDB produced by version 7.0.15".into(),
            "RDB age ".into(),
            "RDB memory usage when created ".into(),
            "Loading RDB: DB 0 announces 15000 keys".into(),
            "Loading RDB: ".into(),
            "Done loading RDB, keys loaded: 15000, keys expired: 0.".into(),
            "DB loaded from disk: ".into(),
        ],
    );
    let progress = messages(&log)
        .into_iter()
        .find(|m| m.starts_with("Loading RDB: ") && m.contains(" keys/s"))
        .unwrap();
    assert!(progress.contains(" keys of 15000 ("), "{progress}");
    assert!(progress.contains(" keys/s"), "{progress}");
    drop(slow);

    // SHUTDOWN SAVE, then SIGTERM, while loading: the load stops, nothing
    // is saved (the file keeps every key), the process exits 0 at once.
    for how in ["SHUTDOWN SAVE", "SIGTERM"] {
        let port = free_port();
        let log_path = data.join("loading.log");
        let _ = std::fs::remove_file(&log_path);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lattice-server"))
            .args([
                "--port",
                &port.to_string(),
                "--dir",
                dir,
                "--save",
                "3600 1",
            ])
            // 45 s or more of loading: stopping it "at once" is told
            // from finishing it even on a slow, loaded machine.
            .args(["--key-load-delay", "3000", "--logfile"])
            .arg(&log_path)
            .spawn()
            .unwrap();
        let mut raw = None;
        eventually("the loading server to accept", || {
            raw = std::net::TcpStream::connect(("127.0.0.1", port)).ok();
            raw.is_some()
        });
        let mut raw = raw.unwrap();
        // (Signal once loading shows, as an operator would.)
        eventually("the load to start", || {
            std::fs::read_to_string(&log_path)
                .unwrap_or_default()
                .contains("Loading RDB from")
        });
        let asked = std::time::Instant::now();
        if how == "SIGTERM" {
            // SAFETY: kill(2) on our own child's pid; no memory involved.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        } else {
            std::io::Write::write_all(&mut raw, b"SHUTDOWN SAVE\r\n").unwrap();
        }
        let status = child.wait().unwrap();
        assert!(status.success(), "{how}");
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "{how}: took {:?}",
            asked.elapsed()
        );
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert!(log.contains("User requested shutdown..."), "{how}: {log}");
        if how == "SIGTERM" {
            assert!(
                log.contains("Received shutdown signal during loading, scheduling shutdown."),
                "{log}"
            );
        }
        assert!(
            !log.contains("Saving the final RDB snapshot"),
            "{how}: {log}"
        );
        assert!(!log.contains("Done loading RDB"), "{how}: {log}");
        assert!(
            log.contains("is now ready to exit, bye bye..."),
            "{how}: {log}"
        );
    }
    let again = Server::start(&["--dir", dir]);
    assert_eq!(cmd::<u64>(&mut again.conn(), &["DBSIZE"]), 15000);
}

/// Runs redis-cli with `args`, killed after `secs` if still running;
/// returns its stdout. `pty`: under `script`, for modes that print only to
/// a terminal as it goes (`--stat`).
fn redis_cli(args: &[&str], secs: u64, pty: bool) -> String {
    let mut cmd = if pty {
        let mut c = std::process::Command::new("timeout");
        c.args([&secs.to_string(), "script", "-qec"])
            .arg(format!("redis-cli {}", args.join(" ")))
            .arg("/dev/null");
        c
    } else {
        let mut c = std::process::Command::new("timeout");
        c.arg(secs.to_string()).arg("redis-cli").args(args);
        c
    };
    let out = cmd.output().expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The same small dataset on a server.
fn fill(c: &mut redis::Connection) {
    let _: () = cmd(c, &["DEBUG", "POPULATE", "1000", "k", "10"]);
    let _: i64 = cmd(c, &["RPUSH", "biglist", "a", "b", "c", "d", "e", "f"]);
    let _: i64 = cmd(c, &["HSET", "h", "f1", "v1", "f2", "v2"]);
    let _: i64 = cmd(c, &["SADD", "s", "a", "b", "c"]);
    let _: i64 = cmd(c, &["ZADD", "z", "1", "a", "2", "b"]);
}

/// The lines of redis-cli --bigkeys/--memkeys that do not depend on which
/// of several equal keys a scan met first.
fn summary(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| !l.starts_with('[') && (l.contains(" with ") || l.starts_with("Sampled ")))
        .map(str::to_string)
        .collect()
}

/// redis-cli's operator modes work against lattice-server as against
/// redis-server (issue 15 item 6): --bigkeys and --scan give redis-server's
/// answers for the same data, --memkeys completes (sizes are ours),
/// --latency measures, --stat prints its table, --rdb takes a snapshot
/// that loads back whole.
#[test]
fn redis_cli_operator_modes() {
    if std::process::Command::new("redis-cli")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("redis-cli not installed (.ci/setup.sh installs redis-tools): skipped");
        return;
    }
    let s = Server::start(&[]);
    let redis = RedisOracle::start(&[]);
    fill(&mut s.conn());
    fill(&mut redis.conn());
    let (ours, theirs) = (s.port.to_string(), redis.port.to_string());
    let on = |port: &str, mode: &[&str]| {
        let mut a = vec!["-p", port];
        a.extend_from_slice(mode);
        // Each mode ends by itself; the limit only bounds a hang.
        redis_cli(&a, 60, false)
    };

    let big = on(&ours, &["--bigkeys"]);
    assert!(
        big.contains("Biggest   list found '\"biglist\"' has 6 items"),
        "{big}"
    );
    assert_eq!(
        summary(&big),
        summary(&on(&theirs, &["--bigkeys"])),
        "{big}"
    );
    assert!(summary(&big).len() >= 7, "{big}");

    let mem = on(&ours, &["--memkeys"]);
    assert!(mem.contains("1000 strings with "), "{mem}");
    assert!(mem.contains("Biggest   list found '\"biglist\"'"), "{mem}");

    let scan = |port: &str| {
        let mut keys: Vec<String> = on(port, &["--scan", "--pattern", "k:1*"])
            .lines()
            .map(str::to_string)
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(scan(&ours).len(), 111);
    assert_eq!(scan(&ours), scan(&theirs));

    // Outside a terminal, --latency samples for a while and prints
    // "min max avg samples" once.
    let lat = on(&ours, &["--latency"]);
    let words: Vec<&str> = lat.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{lat}");
    assert!(words[3].parse::<u64>().unwrap() > 0, "{lat}");

    // Runs until killed: long enough for a loaded machine to start it and
    // print a line.
    let stat = redis_cli(&["-p", &ours, "--stat", "-i", "1"], 8, true);
    assert!(stat.contains("keys       mem      clients"), "{stat}");
    assert!(stat.lines().any(|l| l.starts_with("1004 ")), "{stat}");

    let dir = tempdir("cli-rdb");
    let file = dir.join("dump.rdb");
    on(&ours, &["--rdb", file.to_str().unwrap()]);
    let copy = Server::start(&["--dir", dir.to_str().unwrap()]);
    assert_eq!(cmd::<u64>(&mut copy.conn(), &["DBSIZE"]), 1004);
}

/// `shutdown-on-sigterm` is honoured: Redis's multi-word flags (CONFIG GET
/// shows them in Redis's order), `nosave` skips the final save that the
/// default makes when save points exist.
#[test]
fn shutdown_on_sigterm_flags() {
    for (flags, saves) in [("default", true), ("now nosave", false)] {
        let s = Server::start(&["--save", "3600 1", "--shutdown-on-sigterm", flags]);
        let mut c = s.conn();
        let shown: Vec<String> = cmd(&mut c, &["CONFIG", "GET", "shutdown-on-sigterm"]);
        let want = if saves { "default" } else { "nosave now" };
        assert_eq!(shown[1], want);
        let _: () = cmd(&mut c, &["SET", "k", "v"]);
        // SAFETY: kill(2) on our own child's pid; no memory involved.
        unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
        eventually("exited", || s.log().contains("ready to exit, bye bye"));
        let log = s.log();
        assert!(
            log.contains("Received SIGTERM scheduling shutdown..."),
            "{log}"
        );
        assert_eq!(
            log.contains("Saving the final RDB snapshot"),
            saves,
            "{flags}: {log}"
        );
    }
    let s = Server::start(&[]);
    let e = cmd_err(
        &mut s.conn(),
        &["CONFIG", "SET", "shutdown-on-sigint", "save nosave"],
    );
    assert!(
        e.contains("SAVE and NOSAVE can't be used simultaneously"),
        "{e}"
    );
}

/// `supervised systemd` (what Debian's redis-server.service passes): the
/// server tells $NOTIFY_SOCKET it is loading, ready, and stopping, in
/// sd_notify's datagrams, and INFO says it is supervised.
#[test]
fn supervised_by_systemd() {
    let dir = tempdir("notify");
    let path = dir.join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let port = free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lattice-server"))
        .args([
            "--port",
            &port.to_string(),
            "--supervised",
            "systemd",
            "--daemonize",
            "yes",
        ])
        .arg("--dir")
        .arg(&*dir)
        .arg("--logfile")
        .arg(dir.join("log"))
        .env("NOTIFY_SOCKET", &path)
        .spawn()
        .unwrap();
    let next = || {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(next(), "STATUS=LatticeDB is loading...\n");
    assert_eq!(next(), "STATUS=Ready to accept connections\n");
    assert_eq!(next(), "READY=1\n");
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = c.get_connection().unwrap();
    // Supervised: not daemonized (the child we started is the server).
    assert_eq!(info_field::<u32>(&mut c, "process_id"), child.id());
    assert_eq!(
        info_field::<String>(&mut c, "process_supervised"),
        "systemd"
    );
    let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut c);
    assert_eq!(next(), "STOPPING=1\n");
    assert!(child.wait().unwrap().success());
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    assert!(log.contains("Supervised by systemd."), "{log}");
}
