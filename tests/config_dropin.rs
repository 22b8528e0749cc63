//! Redis 7.0 directives that a real redis.conf sets, now built: each test
//! starts the binary with the directive in a config file and shows its
//! effect (syslog lines, the OOM score, the replication socket's source
//! address, the sync file removed, a replica's disk errors), and checks
//! CONFIG GET/SET against redis-server 7.0 side by side.

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use common::*;

/// A config file `name` in `dir` with `body`.
fn conf(dir: &std::path::Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

fn get(c: &mut redis::Connection, name: &str) -> String {
    let v: Vec<String> = cmd(c, &["CONFIG", "GET", name]);
    assert_eq!(v.len(), 2, "{name}: {v:?}");
    v[1].clone()
}

/// The same CONFIG SET fails alike on ours and on redis-server.
fn same_error(ours: &mut redis::Connection, redis: &mut redis::Connection, args: &[&str]) {
    let (a, b) = (cmd_err(ours, args), cmd_err(redis, args));
    assert_eq!(a, b, "{args:?}");
}

/// The datagrams `sock` receives until one ends with `end`.
fn datagram_ending(sock: &UnixDatagram, end: &str) -> String {
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = vec![0u8; 8192];
    loop {
        let n = sock.recv(&mut buf).expect("a syslog datagram");
        let d = String::from_utf8_lossy(&buf[..n]).to_string();
        if d.ends_with(end) {
            return d;
        }
    }
}

#[test]
fn syslog_gets_every_line_in_syslogs_format() {
    let dir = tempdir("syslog");
    let path = dir.join("log.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    let body = format!(
        "syslog-enabled yes\nsyslog-ident lattice-t\nsyslog-facility local4\nsyslog-socket {}\n",
        path.display()
    );
    let s = Server::start_with(Some(&conf(&dir, "syslog.conf", &body)), &[]);
    let pid = s.child.id();
    // local4 is facility 20: warning 20*8+4, notice 20*8+5.
    let warning = datagram_ending(&sock, "Configuration loaded");
    assert!(warning.starts_with("<164>"), "{warning}");
    assert!(warning.ends_with(&format!(" lattice-t[{pid}]: Configuration loaded")));
    let notice = datagram_ending(&sock, "Ready to accept connections");
    assert!(notice.starts_with("<165>"), "{notice}");
    // `<PRI>Mmm dd hh:mm:ss ident[pid]: `: a 15-character stamp.
    let stamp = &notice[5..notice.find(" lattice-t[").unwrap()];
    assert_eq!(stamp.len(), 15, "{notice}");
    assert_eq!(&stamp[9..10], ":", "{notice}");
    // The log file still gets its lines.
    assert!(s.log().contains("Ready to accept connections"));
    let mut c = s.conn();
    assert_eq!(get(&mut c, "syslog-enabled"), "yes");
    assert_eq!(get(&mut c, "syslog-ident"), "lattice-t");
    assert_eq!(get(&mut c, "syslog-facility"), "local4");
    // A line logged later goes there too (CONFIG REWRITE's notice).
    let _: String = cmd(&mut c, &["CONFIG", "REWRITE"]);
    let d = datagram_ending(&sock, "CONFIG REWRITE executed with success.");
    assert!(d.starts_with("<165>"), "{d}");
    // Immutable, and a bad facility refused, as redis-server 7.0 answers.
    let o = RedisOracle::start(&[]);
    let mut r = o.conn();
    for (name, v) in [
        ("syslog-enabled", "no"),
        ("syslog-ident", "x"),
        ("syslog-facility", "local1"),
    ] {
        same_error(&mut c, &mut r, &["CONFIG", "SET", name, v]);
    }
}

#[test]
fn syslog_without_a_listener_keeps_serving() {
    let dir = tempdir("syslog-none");
    let body = format!(
        "syslog-enabled yes\nsyslog-socket {}\n",
        dir.join("nobody.sock").display()
    );
    let s = Server::start_with(Some(&conf(&dir, "s.conf", &body)), &[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["SET", "k", "v"]);
    assert_eq!(cmd::<String>(&mut c, &["GET", "k"]), "v");
    // A bad facility stops start-up with Redis's error.
    let bad = conf(&dir, "bad.conf", "syslog-facility local9\n");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lattice-server"))
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("argument(s) must be one of the following: user, local0"),
        "{err}"
    );
}

fn oom_score(pid: u32) -> i64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
    s.trim().parse().unwrap()
}

#[test]
fn oom_score_adj_follows_the_role_and_config_set() {
    let base = oom_score(std::process::id());
    let dir = tempdir("oom");
    let body = "oom-score-adj absolute\noom-score-adj-values 11 22 33\n";
    let s = Server::start_with(Some(&conf(&dir, "oom.conf", body)), &[]);
    let pid = s.child.id();
    assert_eq!(oom_score(pid), 11);
    let mut c = s.conn();
    let _: () = cmd(
        &mut c,
        &["CONFIG", "SET", "oom-score-adj-values", "12 23 34"],
    );
    assert_eq!(oom_score(pid), 12);
    // A replica takes the second value, a master again the first.
    let nobody = free_port().to_string();
    let _: String = cmd(&mut c, &["REPLICAOF", "127.0.0.1", &nobody]);
    assert_eq!(oom_score(pid), 23);
    let _: String = cmd(&mut c, &["REPLICAOF", "NO", "ONE"]);
    assert_eq!(oom_score(pid), 12);
    // `no` gives back the score the process had; `relative` adds to it.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "oom-score-adj", "no"]);
    assert_eq!(oom_score(pid), base);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "oom-score-adj", "relative"]);
    assert_eq!(oom_score(pid), (base + 12).clamp(-1000, 1000));
    assert_eq!(get(&mut c, "oom-score-adj"), "relative");
    assert_eq!(get(&mut c, "oom-score-adj-values"), "12 23 34");
    let _: String = cmd(&mut c, &["CONFIG", "REWRITE"]);
    let text = std::fs::read_to_string(dir.join("oom.conf")).unwrap();
    assert!(text.contains("oom-score-adj relative"), "{text}");
    assert!(text.contains("oom-score-adj-values 12 23 34"), "{text}");
    // Bad values fail as on redis-server 7.0, changing nothing.
    let o = RedisOracle::start(&[]);
    let mut r = o.conn();
    for args in [
        &["CONFIG", "SET", "oom-score-adj-values", "2001 0 0"][..],
        &["CONFIG", "SET", "oom-score-adj-values", "1 2"],
        &["CONFIG", "SET", "oom-score-adj-values", "a b c"],
        &["CONFIG", "SET", "oom-score-adj", "maybe"],
    ] {
        same_error(&mut c, &mut r, args);
    }
    assert_eq!(oom_score(pid), (base + 12).clamp(-1000, 1000));
}

#[test]
fn a_replica_from_its_config_file_takes_the_replica_score() {
    let dir = tempdir("oom-replica");
    let master = Server::start(&[]);
    let body = format!(
        "oom-score-adj yes\noom-score-adj-values 5 44 66\nreplicaof 127.0.0.1 {}\n",
        master.port
    );
    let base = oom_score(std::process::id());
    let s = Server::start_with(Some(&conf(&dir, "r.conf", &body)), &[]);
    assert_eq!(oom_score(s.child.id()), (base + 44).clamp(-1000, 1000));
}

/// INFO replication's `slave0:` line of `c`, once a replica is online.
fn replica_line(c: &mut redis::Connection) -> String {
    let mut line = String::new();
    eventually("a replica to come online", || {
        let info: String = cmd(c, &["INFO", "replication"]);
        line = info
            .lines()
            .find(|l| l.starts_with("slave0:"))
            .unwrap_or("")
            .to_string();
        line.contains("state=online")
    });
    line
}

#[test]
fn bind_source_addr_is_the_replica_links_source() {
    let master = Server::start(&["--protected-mode", "no"]);
    let dir = tempdir("bindsrc");
    let body = format!(
        "bind-source-addr 127.0.0.2\nreplicaof 127.0.0.1 {}\n",
        master.port
    );
    let replica = Server::start_with(Some(&conf(&dir, "r.conf", &body)), &[]);
    let mut m = master.conn();
    let line = replica_line(&mut m);
    assert!(line.contains("ip=127.0.0.2,"), "{line}");
    let mut c = replica.conn();
    assert_eq!(get(&mut c, "bind-source-addr"), "127.0.0.2");
    // CONFIG SET: the next connection uses it.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "bind-source-addr", "127.0.0.3"]);
    let _: String = cmd(&mut c, &["REPLICAOF", "NO", "ONE"]);
    let _: String = cmd(
        &mut c,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    );
    let mut line = String::new();
    eventually("the replica to reconnect from 127.0.0.3", || {
        let info: String = cmd(&mut m, &["INFO", "replication"]);
        line = info
            .lines()
            .find(|l| l.starts_with("slave0:"))
            .unwrap_or("")
            .into();
        line.contains("ip=127.0.0.3,") && line.contains("state=online")
    });
    eventually("the replica's link to be up", || link_up(&mut c));
    // An address it cannot bind (IPv6 for an IPv4 master) fails the link.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "bind-source-addr", "::1"]);
    let _: String = cmd(&mut c, &["REPLICAOF", "NO", "ONE"]);
    let _: String = cmd(
        &mut c,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    );
    eventually("the bind to fail", || replica.log().contains("bind: "));
    assert_eq!(info_field::<String>(&mut c, "master_link_status"), "down");
}

#[test]
fn bind_source_addr_is_an_active_peer_links_source() {
    let b = active_node(&["--protected-mode", "no"]);
    let a = active_node(&["--bind-source-addr", "127.0.0.4"]);
    pull(&a, b.port);
    wait_linked(&a, 1);
    let list: String = cmd(&mut b.conn(), &["INFO", "replication"]);
    assert!(list.contains("addr=127.0.0.4:"), "{list}");
}

fn link_up(c: &mut redis::Connection) -> bool {
    let info: String = cmd(c, &["INFO", "replication"]);
    info.contains("master_link_status:up")
}

/// A replica of `master` from a config file with `extra` lines, synced by
/// a disk-based load; its server and its directory.
fn disk_replica(master: &Server, tag: &str, extra: &str) -> (Server, TestDir) {
    let dir = tempdir(tag);
    let body = format!(
        "repl-diskless-load disabled\nreplicaof 127.0.0.1 {}\n{extra}",
        master.port
    );
    let s = Server::start_with(Some(&conf(&dir, "r.conf", &body)), &[]);
    let mut c = s.conn();
    eventually("the replica to sync", || link_up(&mut c));
    (s, dir)
}

#[test]
fn rdb_del_sync_files_removes_a_persistenceless_replicas_sync_file() {
    let master = Server::start(&[]);
    let _: () = cmd(&mut master.conn(), &["SET", "k", "v"]);
    // Persistence off and the directive on: the file goes, with Redis's line.
    let off = "save \"\"\nappendonly no\nrdb-del-sync-files yes\n";
    let (r, _d1) = disk_replica(&master, "del-sync", off);
    let dump = r.dir.join("dump.rdb");
    eventually("the sync file to be removed", || {
        r.log().contains(
            "Removing the RDB file obtained from the master. This replica has persistence disabled",
        )
    });
    assert!(!dump.exists());
    assert_eq!(cmd::<String>(&mut r.conn(), &["GET", "k"]), "v");
    assert_eq!(get(&mut r.conn(), "rdb-del-sync-files"), "yes");
    // The directive off, or save points set: the file stays.
    let (keep, _d2) = disk_replica(&master, "keep-sync", "save \"\"\nappendonly no\n");
    let (saving, _d3) = disk_replica(
        &master,
        "save-sync",
        "save 3600 1\nrdb-del-sync-files yes\n",
    );
    // Several cron ticks (hz 10) after the sync.
    std::thread::sleep(Duration::from_millis(500));
    for s in [&keep, &saving] {
        assert!(s.dir.join("dump.rdb").exists(), "{}", s.log());
        assert!(!s.log().contains("Removing the RDB file"));
    }
}

/// Makes `s`'s disk refuse writes: its `dir` moves to a directory that
/// is then removed, and a BGSAVE fails there (with save points, writes
/// then get MISCONF). The log stays in the server's own directory.
fn break_disk(s: &Server) {
    let gone = s.dir.join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["CONFIG", "SET", "dir", gone.to_str().unwrap()]);
    std::fs::remove_dir_all(&gone).unwrap();
    let _: redis::Value = cmd(&mut c, &["BGSAVE"]);
    eventually("the BGSAVE to fail", || {
        info_field::<String>(&mut c, "rdb_last_bgsave_status") == "err"
    });
    let e = cmd_err(&mut c, &["SET", "x", "1"]);
    assert!(e.starts_with("MISCONF"), "{e}");
}

#[test]
fn a_replica_that_cannot_write_to_disk_stops_unless_told_to_ignore() {
    let master = Server::start(&[]);
    let mut m = master.conn();
    let (ignoring, _d1) = disk_replica(
        &master,
        "ignore-disk",
        "save 3600 1\nenable-protected-configs yes\nreplica-ignore-disk-write-errors yes\n",
    );
    let (mut strict, _d2) = disk_replica(
        &master,
        "strict-disk",
        "save 3600 1\nenable-protected-configs yes\n",
    );
    break_disk(&ignoring);
    break_disk(&strict);
    let _: () = cmd(&mut m, &["SET", "k", "v"]);
    // `yes`: applied, with Redis's warning.
    let mut c = ignoring.conn();
    eventually("the write to reach the replica", || {
        cmd::<Option<String>>(&mut c, &["GET", "k"]).as_deref() == Some("v")
    });
    let warned = "Replica is applying a command even though it is unable to write to disk.";
    eventually("the warning", || ignoring.log().contains(warned));
    assert_eq!(get(&mut c, "replica-ignore-disk-write-errors"), "yes");
    // `no` (the default): the process stops, as Redis's panics.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = strict.child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "the replica kept running");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let log = strict.log();
    assert!(
        log.contains("Guru Meditation: Replica was unable to write command to disk."),
        "{log}"
    );
}
