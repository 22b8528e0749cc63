//! The append-only file, seen from outside: what was acknowledged survives a
//! restart (and a SIGKILL), damaged files are handled as Redis handles them,
//! the directory layout is Redis 7's, and Redis and LatticeDB load each
//! other's AOF directories.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server on a directory that outlives it (restarts reuse it).
struct Node {
    child: Child,
    port: u16,
}

fn spawn(bin: &str, dir: &Path, port: u16, extra: &[&str]) -> Child {
    let mut c = Command::new(bin);
    c.arg("--port")
        .arg(port.to_string())
        .arg("--dir")
        .arg(dir)
        .args(["--logfile", "log.txt"])
        .args(extra);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c.spawn().expect("spawn server")
}

impl Node {
    fn start(dir: &Path, extra: &[&str]) -> Node {
        Self::start_bin(env!("CARGO_BIN_EXE_lattice-server"), dir, extra)
    }

    fn start_bin(bin: &str, dir: &Path, extra: &[&str]) -> Node {
        let port = free_port();
        let mut child = spawn(bin, dir, port, extra);
        let _ = child.try_wait();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("server exited: {st}; log:\n{}", log(dir));
            }
            if let Ok(c) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) {
                if let Ok(mut conn) = c.get_connection() {
                    if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                        return Node { child, port };
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("server did not start");
    }

    fn conn(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log.txt")).unwrap_or_default()
}

/// Starts the server expecting it to exit at start-up; returns its log.
fn refuses_to_start(dir: &Path, extra: &[&str]) -> String {
    let mut child = spawn(
        env!("CARGO_BIN_EXE_lattice-server"),
        dir,
        free_port(),
        extra,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(st)) = child.try_wait() {
            assert!(!st.success());
            return log(dir);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("server started on a damaged AOF");
}

fn incr_file(dir: &Path) -> PathBuf {
    let m = std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest")).unwrap();
    let name = m
        .lines()
        .rfind(|l| l.ends_with("type i"))
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .to_string();
    dir.join("appendonlydir").join(name)
}

fn snapshot_dir(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.join("appendonlydir"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn write_sample(c: &mut redis::Connection) {
    let _: () = cmd(c, &["SET", "s", "hello"]);
    let _: i64 = cmd(c, &["INCR", "n"]);
    let _: i64 = cmd(c, &["INCRBY", "n", "41"]);
    let _: i64 = cmd(c, &["RPUSH", "l", "a", "b", "c"]);
    let _: i64 = cmd(c, &["HSET", "h", "f", "v"]);
    let _: i64 = cmd(c, &["ZADD", "z", "1.5", "m"]);
    let _: i64 = cmd(c, &["SADD", "set", "x", "y"]);
    let _: i64 = cmd(c, &["EXPIRE", "s", "1000"]);
    let _: () = cmd(c, &["SELECT", "3"]);
    let _: () = cmd(c, &["SET", "in3", "yes"]);
    let _: () = cmd(c, &["SELECT", "0"]);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("SET")
        .arg("t1")
        .arg("1")
        .cmd("SET")
        .arg("t2")
        .arg("2");
    let _: () = p.query(c).unwrap();
}

fn check_sample(c: &mut redis::Connection) {
    assert_eq!(cmd::<String>(c, &["GET", "s"]), "hello");
    assert_eq!(cmd::<i64>(c, &["GET", "n"]), 42);
    assert_eq!(
        cmd::<Vec<String>>(c, &["LRANGE", "l", "0", "-1"]),
        ["a", "b", "c"]
    );
    assert_eq!(cmd::<String>(c, &["HGET", "h", "f"]), "v");
    assert_eq!(cmd::<String>(c, &["ZSCORE", "z", "m"]), "1.5");
    assert_eq!(cmd::<i64>(c, &["SCARD", "set"]), 2);
    let ttl: i64 = cmd(c, &["TTL", "s"]);
    assert!(ttl > 900 && ttl <= 1000, "ttl {ttl}");
    assert_eq!(cmd::<String>(c, &["GET", "t2"]), "2");
    let _: () = cmd(c, &["SELECT", "3"]);
    assert_eq!(cmd::<String>(c, &["GET", "in3"]), "yes");
    let _: () = cmd(c, &["SELECT", "0"]);
}

#[test]
fn writes_survive_restart_for_each_fsync_policy() {
    for policy in ["always", "everysec", "no"] {
        let dir = tempdir(&format!("policy-{policy}"));
        let args = ["--appendonly", "yes", "--appendfsync", policy];
        let n = Node::start(&dir, &args);
        write_sample(&mut n.conn());
        // Written before the reply: a SIGKILL loses nothing (page cache).
        n.kill9();
        let n = Node::start(&dir, &args);
        check_sample(&mut n.conn());
        assert!(log(&dir).contains("DB loaded from append only file"));
        drop(n);
    }
}

#[test]
fn sigkill_with_appendfsync_always_loses_no_acknowledged_write() {
    let dir = tempdir("kill9");
    let args = ["--appendonly", "yes", "--appendfsync", "always"];
    let n = Node::start(&dir, &args);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let mut c = n.conn();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut acked, mut last_set) = (0i64, None);
                for j in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let r: redis::RedisResult<i64> =
                        redis::cmd("INCR").arg(format!("ctr{i}")).query(&mut c);
                    match r {
                        Ok(v) => acked = v,
                        Err(_) => break,
                    }
                    let r: redis::RedisResult<()> = redis::cmd("SET")
                        .arg(format!("k{i}:{j}"))
                        .arg(j)
                        .query(&mut c);
                    match r {
                        Ok(()) => last_set = Some(j),
                        Err(_) => break,
                    }
                }
                (i, acked, last_set)
            })
        })
        .collect();
    // Killed while every client is writing (each has written some).
    let mut probe = n.conn();
    eventually("every client to have written", || {
        (0..6).all(|i| {
            let v: Option<i64> = cmd(&mut probe, &["GET", &format!("ctr{i}")]);
            v.unwrap_or(0) >= 20
        })
    });
    drop(probe);
    n.kill9();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let n = Node::start(&dir, &args);
    let mut c = n.conn();
    for (i, acked, last_set) in results {
        assert!(acked > 0, "client {i} wrote nothing");
        let got: i64 = cmd(&mut c, &["GET", &format!("ctr{i}")]);
        assert!(got >= acked, "ctr{i}: {got} < acknowledged {acked}");
        if let Some(j) = last_set {
            let v: Option<String> = cmd(&mut c, &["GET", &format!("k{i}:{j}")]);
            assert_eq!(v, Some(j.to_string()));
        }
    }
    drop(n);
}

#[test]
fn truncated_tail_loads_with_warning_or_refuses() {
    let dir = tempdir("trunc");
    let n = Node::start(&dir, &["--appendonly", "yes"]);
    let mut c = n.conn();
    let _: () = cmd(&mut c, &["SET", "a", "1"]);
    let _: () = cmd(&mut c, &["SET", "b", "2"]);
    n.kill9();
    let incr = incr_file(&dir);
    let whole = std::fs::read(&incr).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&incr)
        .unwrap();
    std::io::Write::write_all(&mut f, b"*3\r\n$3\r\nSET\r\n$1\r\nc\r\n$5\r\nhel").unwrap();
    drop(f);
    let damaged = snapshot_dir(&dir);

    let msg = refuses_to_start(&dir, &["--appendonly", "yes", "--aof-load-truncated", "no"]);
    assert!(msg.contains("Unexpected end of file reading the append only file"));
    assert_eq!(
        snapshot_dir(&dir),
        damaged,
        "refusing must not touch the files"
    );

    let n = Node::start(&dir, &["--appendonly", "yes"]);
    let mut c = n.conn();
    assert_eq!(cmd::<String>(&mut c, &["GET", "b"]), "2");
    assert_eq!(cmd::<Option<String>>(&mut c, &["GET", "c"]), None);
    assert!(log(&dir).contains("!!! Warning: short read while loading the AOF file"));
    assert!(log(&dir).contains("loaded anyway because aof-load-truncated is enabled"));
    // Cut at the last whole command, so appends continue cleanly.
    assert_eq!(std::fs::read(&incr).unwrap(), whole);
    let _: () = cmd(&mut c, &["SET", "c", "3"]);
    n.kill9();
    let n = Node::start(&dir, &["--appendonly", "yes"]);
    assert_eq!(cmd::<String>(&mut n.conn(), &["GET", "c"]), "3");
    drop(n);
}

#[test]
fn corruption_in_the_middle_refuses_and_touches_nothing() {
    let dir = tempdir("corrupt");
    let n = Node::start(&dir, &["--appendonly", "yes"]);
    let mut c = n.conn();
    let _: () = cmd(&mut c, &["SET", "a", "1"]);
    let _: () = cmd(&mut c, &["SET", "b", "2"]);
    n.kill9();
    let incr = incr_file(&dir);
    let mut data = std::fs::read(&incr).unwrap();
    // Between two whole commands, so the damage is not at the tail.
    let at = data.windows(4).rposition(|w| w == b"*3\r\n").unwrap();
    data.splice(at..at, b"garbage!\r\n".iter().copied());
    std::fs::write(&incr, &data).unwrap();
    let before = snapshot_dir(&dir);
    let msg = refuses_to_start(&dir, &["--appendonly", "yes"]);
    assert!(
        msg.contains("Bad file format reading the append only file"),
        "{msg}"
    );
    assert_eq!(snapshot_dir(&dir), before);
}

#[test]
fn manifest_layout_and_rewrite() {
    let dir = tempdir("manifest");
    let args = ["--appendonly", "yes", "--aof-use-rdb-preamble", "no"];
    let n = Node::start(&dir, &args);
    let manifest = dir.join("appendonlydir/appendonly.aof.manifest");
    assert_eq!(
        std::fs::read_to_string(&manifest).unwrap(),
        "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
    let mut c = n.conn();
    write_sample(&mut c);
    let r: String = cmd(&mut c, &["BGREWRITEAOF"]);
    assert_eq!(r, "Background append only file rewriting started");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&manifest).unwrap()
        != "file appendonly.aof.2.base.aof seq 2 type b\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
    {
        assert!(Instant::now() < deadline, "rewrite did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    // History files are gone; writes after the rewrite go to the new incr.
    let names: Vec<String> = snapshot_dir(&dir).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "appendonly.aof.2.base.aof",
            "appendonly.aof.2.incr.aof",
            "appendonly.aof.manifest"
        ]
    );
    let _: i64 = cmd(&mut c, &["RPUSH", "l", "d"]);
    n.kill9();
    let n = Node::start(&dir, &args);
    let mut c = n.conn();
    assert_eq!(cmd::<i64>(&mut c, &["LLEN", "l"]), 4);
    let _: String = cmd(&mut c, &["RPOP", "l"]);
    check_sample(&mut c);
    drop(n);
}

#[test]
fn config_set_appendonly_at_runtime() {
    let dir = tempdir("runtime");
    let n = Node::start(&dir, &["--aof-use-rdb-preamble", "no"]);
    let mut c = n.conn();
    write_sample(&mut c);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    let manifest = dir.join("appendonlydir/appendonly.aof.manifest");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !manifest.exists() {
        assert!(Instant::now() < deadline, "no manifest after enabling");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _: () = cmd(&mut c, &["SET", "later", "1"]);
    n.kill9();
    let n = Node::start(&dir, &["--appendonly", "yes"]);
    let mut c = n.conn();
    check_sample(&mut c);
    assert_eq!(cmd::<String>(&mut c, &["GET", "later"]), "1");
    drop(n);
}

#[test]
fn redis_and_lattice_load_each_others_aof() {
    // Fails rather than passes without it, as the other interop tests do.
    assert!(
        Path::new("/usr/bin/redis-server").exists(),
        "redis-server must be installed (apt-get install redis-server)"
    );
    for preamble in ["no", "yes"] {
        interop(preamble);
    }
}

/// Each server writes (a rewrite makes a base, more writes follow in the
/// incr file), the other loads the directory.
fn interop(preamble: &str) {
    // `always`: with everysec Redis may postpone a write while a background
    // fsync runs, so a SIGKILL can lose an acknowledged write there.
    let args = [
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        preamble,
        "--appendfsync",
        "always",
    ];
    let redis = "/usr/bin/redis-server";
    let ours = env!("CARGO_BIN_EXE_lattice-server");
    for (writer, reader) in [(redis, ours), (ours, redis)] {
        let dir = tempdir(&format!("interop-{preamble}-{}", writer.len()));
        let w = Node::start_bin(writer, &dir, &args);
        let mut c = w.conn();
        write_sample(&mut c);
        let _: String = cmd(&mut c, &["BGREWRITEAOF"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while info_field::<i64>(&mut c, "aof_rewrite_in_progress") == 1
            || info_field::<i64>(&mut c, "aof_rewrite_scheduled") == 1
        {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(10));
        }
        let _: i64 = cmd(&mut c, &["RPUSH", "l", "d"]);
        let _: String = cmd(&mut c, &["RPOP", "l"]);
        let _: () = cmd(&mut c, &["SET", "after", "rewrite"]);
        w.kill9();
        let base_ext = if preamble == "yes" { "rdb" } else { "aof" };
        let m = std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest")).unwrap();
        assert!(
            m.starts_with(&format!(
                "file appendonly.aof.2.base.{base_ext} seq 2 type b\n"
            )),
            "{m}"
        );
        let r = Node::start_bin(reader, &dir, &args);
        let mut c = r.conn();
        check_sample(&mut c);
        assert_eq!(cmd::<String>(&mut c, &["GET", "after"]), "rewrite");
        drop(r);
    }
}

/// What a server's INFO counts of the commands that failed while it loaded
/// its AOF (an INCR of a list, alone and in a transaction): the errorstats,
/// error totals and commandstats lines, without their times.
fn aof_error_counts(bin: &str) -> Vec<String> {
    let dir = tempdir(&format!("aof-errors-{}", bin.len()));
    let resp = |argv: &[&str]| {
        let mut b = format!("*{}\r\n", argv.len());
        for a in argv {
            b += &format!("${}\r\n{a}\r\n", a.len());
        }
        b
    };
    let file: String = [
        resp(&["RPUSH", "k", "a"]),
        resp(&["INCR", "k"]),
        resp(&["SET", "x", "1"]),
        resp(&["MULTI"]),
        resp(&["INCR", "k"]),
        resp(&["SET", "y", "1"]),
        resp(&["EXEC"]),
    ]
    .concat();
    std::fs::write(dir.join("appendonly.aof"), file).unwrap();
    let n = Node::start_bin(bin, &dir, &["--appendonly", "yes", "--save", ""]);
    let mut c = n.conn();
    // The commands around the failures ran.
    assert_eq!(cmd::<Vec<String>>(&mut c, &["MGET", "x", "y"]), ["1", "1"]);
    // The start-up probes' own errors (-LOADING here, a client library's
    // CLIENT SETINFO there) are left out of the total.
    let errorstats: String = cmd(&mut c, &["INFO", "errorstats"]);
    let probes: i64 = (errorstats.lines())
        .filter(|l| l.starts_with("errorstat_") && !l.starts_with("errorstat_WRONGTYPE"))
        .filter_map(|l| l.rsplit_once("count=")?.1.trim().parse::<i64>().ok())
        .sum();
    let mut lines: Vec<String> = (errorstats.lines())
        .filter(|l| l.starts_with("errorstat_WRONGTYPE"))
        .map(String::from)
        .collect();
    let total: i64 = info_field(&mut c, "total_error_replies");
    lines.push(format!("total_error_replies:{}", total - probes));
    let unexpected: i64 = info_field(&mut c, "unexpected_error_replies");
    lines.push(format!("unexpected_error_replies:{unexpected}"));
    let commandstats: String = cmd(&mut c, &["INFO", "commandstats"]);
    for l in commandstats
        .lines()
        .filter(|l| l.starts_with("cmdstat_incr:"))
    {
        let counts = l.split(',').filter(|f| !f.contains("usec"));
        lines.push(counts.collect::<Vec<_>>().join(","));
    }
    assert!(
        log(&dir).contains("This server is sending an error to its AOF-loading-client"),
        "{}",
        log(&dir)
    );
    lines
}

#[test]
fn errors_met_loading_the_aof_count_as_redis_counts_them() {
    let ours = aof_error_counts(env!("CARGO_BIN_EXE_lattice-server"));
    assert_eq!(ours, aof_error_counts("/usr/bin/redis-server"));
    assert_eq!(
        ours,
        [
            "errorstat_WRONGTYPE:count=2",
            "total_error_replies:2",
            "unexpected_error_replies:2",
            "cmdstat_incr:calls=0,rejected_calls=0,failed_calls=1",
        ]
    );
}

/// While DEBUG LOADAOF replays a slow script, another client's PING gets
/// -LOADING, and once it is done the script's write is there.
fn other_clients_see_loading_during_debug_loadaof(bin: &str) {
    let dir = tempdir(&format!("loadaof-loading-{}", bin.len()));
    let script =
        "redis.call('set',KEYS[1],'y'); for i=1,300000 do redis.call('ping') end return 'ok'";
    let argv = ["EVAL", script, "1", "x"];
    let mut file = format!("*2\r\n$6\r\nSELECT\r\n$1\r\n9\r\n*{}\r\n", argv.len());
    for a in argv {
        file += &format!("${}\r\n{a}\r\n", a.len());
    }
    std::fs::write(dir.join("appendonly.aof"), file).unwrap();
    let extra = [
        "--appendonly",
        "yes",
        "--save",
        "",
        "--lua-time-limit",
        "1",
        "--enable-debug-command",
        "yes",
    ];
    let n = Node::start_bin(bin, &dir, &extra);
    let mut loader = n.conn();
    let mut other = n.conn();
    let reload = std::thread::spawn(move || {
        cmd::<String>(&mut loader, &["DEBUG", "LOADAOF"]);
    });
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen.starts_with("LOADING") && Instant::now() < deadline {
        seen = match redis::cmd("PING").query::<String>(&mut other) {
            Ok(_) => String::new(),
            Err(e) if e.kind() == redis::ErrorKind::BusyLoadingError => "LOADING".into(),
            Err(e) => e.to_string(),
        };
    }
    reload.join().unwrap();
    assert!(seen.starts_with("LOADING"), "{bin}: {seen:?}");
    let _: () = cmd(&mut other, &["SELECT", "9"]);
    assert_eq!(cmd::<String>(&mut other, &["GET", "x"]), "y");
    assert_eq!(info_field::<i64>(&mut other, "loading"), 0);
}

#[test]
fn debug_loadaof_answers_loading_to_other_clients() {
    other_clients_see_loading_during_debug_loadaof(env!("CARGO_BIN_EXE_lattice-server"));
    other_clients_see_loading_during_debug_loadaof("/usr/bin/redis-server");
}

#[test]
fn old_single_file_aof_is_adopted() {
    let dir = tempdir("upgrade");
    std::fs::write(
        dir.join("appendonly.aof"),
        b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n$3\r\nold\r\n$5\r\nvalue\r\n",
    )
    .unwrap();
    let n = Node::start(&dir, &["--appendonly", "yes"]);
    assert_eq!(cmd::<String>(&mut n.conn(), &["GET", "old"]), "value");
    assert!(!dir.join("appendonly.aof").exists());
    assert!(dir.join("appendonlydir/appendonly.aof").exists());
    assert!(log(&dir).contains("Successfully migrated an old-style AOF file"));
    let m = std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest")).unwrap();
    assert_eq!(
        m,
        "file appendonly.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
    drop(n);
}

#[test]
fn auto_rewrite_timestamps_info_and_debug_loadaof() {
    let dir = tempdir("auto");
    let n = Node::start(
        &dir,
        &[
            "--appendonly",
            "yes",
            "--aof-use-rdb-preamble",
            "no",
            "--aof-timestamp-enabled",
            "yes",
            "--auto-aof-rewrite-min-size",
            "1kb",
            "--auto-aof-rewrite-percentage",
            "100",
            "--enable-debug-command",
            "yes",
        ],
    );
    let mut c = n.conn();
    let _: () = cmd(&mut c, &["SET", "first", "1"]);
    let incr = incr_file(&dir);
    let head = std::fs::read_to_string(&incr).unwrap();
    assert!(head.starts_with("#TS:"), "{head:?}");
    assert_eq!(info_field::<i64>(&mut c, "aof_enabled"), 1);
    assert_eq!(info_field::<String>(&mut c, "aof_last_write_status"), "ok");
    for i in 0..200 {
        let _: () = cmd(&mut c, &["SET", &format!("key:{i}"), &"x".repeat(20)]);
    }
    // The AOF outgrew min-size and doubled since the (empty) base.
    // (On a loaded machine the cron may see it grow twice while the SETs
    // run: the base is the one the manifest names once rewrites are done.)
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field::<i64>(&mut c, "aof_rewrites") < 1
        || info_field::<i64>(&mut c, "aof_rewrite_in_progress") == 1
        || info_field::<i64>(&mut c, "aof_rewrite_scheduled") == 1
    {
        assert!(Instant::now() < deadline, "no automatic rewrite");
        std::thread::sleep(Duration::from_millis(50));
    }
    let manifest =
        std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest")).unwrap();
    let name = manifest
        .lines()
        .find(|l| l.ends_with(" type b"))
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or_else(|| panic!("no base in {manifest:?}"));
    assert_ne!(name, "appendonly.aof.1.base.aof", "{manifest:?}");
    let base = std::fs::read_to_string(dir.join("appendonlydir").join(name)).unwrap();
    assert!(base.starts_with("#TS:"));
    let before: String = cmd(&mut c, &["DEBUG", "DIGEST"]);
    let _: () = cmd(&mut c, &["DEBUG", "LOADAOF"]);
    let after: String = cmd(&mut c, &["DEBUG", "DIGEST"]);
    assert_eq!(before, after);
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 201);
    drop(n);
}

#[test]
fn bgrewriteaof_while_rewriting_and_with_aof_off() {
    let dir = tempdir("bgrw-off");
    let n = Node::start(&dir, &["--aof-use-rdb-preamble", "no"]);
    let mut c = n.conn();
    write_sample(&mut c);
    // With the AOF off a rewrite still writes a base (Redis 7).
    let r: String = cmd(&mut c, &["BGREWRITEAOF"]);
    assert_eq!(r, "Background append only file rewriting started");
    let manifest = dir.join("appendonlydir/appendonly.aof.manifest");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&manifest).ok().as_deref()
        != Some("file appendonly.aof.1.base.aof seq 1 type b\n")
    {
        assert!(Instant::now() < deadline, "rewrite did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The manifest is in place a moment before the rewrite is counted as
    // done (the test asserted at once and failed now and then).
    while info_field::<i64>(&mut c, "aof_rewrites") != 1 {
        assert!(Instant::now() < deadline, "the rewrite was not counted");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(n);
    // That base loads when the AOF is turned on.
    let n = Node::start(&dir, &["--appendonly", "yes"]);
    check_sample(&mut n.conn());
    drop(n);
}

#[test]
fn rewrites_under_write_load_neither_lose_nor_repeat_writes() {
    rewrites_under_load("no");
    rewrites_under_load("yes");
}

fn rewrites_under_load(preamble: &str) {
    let dir = tempdir(&format!("rw-load-{preamble}"));
    let args = ["--appendonly", "yes", "--aof-use-rdb-preamble", preamble];
    let n = Node::start(&dir, &args);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let mut c = n.conn();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut last = 0i64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    last = cmd(&mut c, &["INCR", &format!("ctr{i}")]);
                    let _: i64 = cmd(&mut c, &["RPUSH", &format!("list{i}"), &last.to_string()]);
                }
                last
            })
        })
        .collect();
    let mut c = n.conn();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(100));
        let _: String = cmd(&mut c, &["BGREWRITEAOF"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while info_field::<i64>(&mut c, "aof_rewrite_in_progress") == 1 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let finals: Vec<i64> = writers.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(info_field::<i64>(&mut c, "aof_rewrites"), 3);
    n.kill9();
    let n = Node::start(&dir, &args);
    let mut c = n.conn();
    for (i, last) in finals.into_iter().enumerate() {
        assert_eq!(cmd::<i64>(&mut c, &["GET", &format!("ctr{i}")]), last);
        assert_eq!(cmd::<i64>(&mut c, &["LLEN", &format!("list{i}")]), last);
    }
    drop(n);
}

#[test]
fn write_errors_refuse_writes_until_the_aof_can_be_written() {
    let dir = tempdir("misconf");
    let args = [
        "--appendonly",
        "yes",
        "--appendfsync",
        "no",
        "--aof-use-rdb-preamble",
        "no",
    ];
    Node::start(&dir, &args).kill9();
    // The incr file becomes /dev/full: every write fails with ENOSPC.
    let incr = incr_file(&dir);
    std::fs::remove_file(&incr).unwrap();
    std::os::unix::fs::symlink("/dev/full", &incr).unwrap();
    let n = Node::start(&dir, &args);
    let mut c = n.conn();
    // Accepted into the AOF buffer; writing it fails.
    let _: () = cmd(&mut c, &["SET", "a", "1"]);
    let err = cmd_err(&mut c, &["SET", "b", "2"]);
    assert_eq!(
        err,
        "MISCONF Errors writing to the AOF file: No space left on device"
    );
    assert!(cmd_err(&mut c, &["PING"]).starts_with("MISCONF"));
    assert_eq!(cmd::<String>(&mut c, &["GET", "a"]), "1");
    assert_eq!(info_field::<String>(&mut c, "aof_last_write_status"), "err");
    // A rewrite opens a new incr file: the buffered write lands there.
    let _: String = cmd(&mut c, &["BGREWRITEAOF"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field::<String>(&mut c, "aof_last_write_status") != "ok" {
        assert!(Instant::now() < deadline, "AOF writes did not recover");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _: () = cmd(&mut c, &["SET", "c", "3"]);
    assert!(log(&dir).contains("AOF write error looks solved"));
    n.kill9();
    let n = Node::start(&dir, &args);
    let mut c = n.conn();
    assert_eq!(cmd::<String>(&mut c, &["GET", "a"]), "1");
    assert_eq!(cmd::<String>(&mut c, &["GET", "c"]), "3");
    assert_eq!(cmd::<Option<String>>(&mut c, &["GET", "b"]), None);
    drop(n);
}

#[test]
fn old_style_aof_with_rdb_preamble_is_adopted() {
    let dir = tempdir("upgrade-rdb");
    // An RDB (our SAVE) followed by an AOF tail: a Redis 4-6 appendonly.aof.
    let n = Node::start(&dir, &[]);
    let mut c = n.conn();
    write_sample(&mut c);
    let _: () = cmd(&mut c, &["SAVE"]);
    drop(n);
    let mut data = std::fs::read(dir.join("dump.rdb")).unwrap();
    std::fs::remove_file(dir.join("dump.rdb")).unwrap();
    data.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$4\r\ntail\r\n$3\r\nyes\r\n");
    std::fs::write(dir.join("appendonly.aof"), &data).unwrap();
    let n = Node::start(&dir, &["--appendonly", "yes"]);
    let mut c = n.conn();
    check_sample(&mut c);
    assert_eq!(cmd::<String>(&mut c, &["GET", "tail"]), "yes");
    let l = log(&dir);
    assert!(l.contains("Reading RDB preamble from AOF file..."), "{l}");
    assert!(l.contains("Reading the remaining AOF tail..."));
    drop(n);
}

#[test]
fn turning_the_aof_off_and_on_at_runtime() {
    let dir = tempdir("toggle");
    let n = Node::start(&dir, &["--appendonly", "yes"]);
    let mut c = n.conn();
    let _: () = cmd(&mut c, &["SET", "a", "1"]);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "appendonly", "no"]);
    assert_eq!(info_field::<i64>(&mut c, "aof_enabled"), 0);
    let _: () = cmd(&mut c, &["SET", "b", "2"]);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field::<i64>(&mut c, "aof_rewrites") < 1 {
        assert!(Instant::now() < deadline, "no rewrite after turning on");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _: () = cmd(&mut c, &["SET", "c", "3"]);
    n.kill9();
    let n = Node::start(&dir, &["--appendonly", "yes"]);
    let mut c = n.conn();
    for (k, v) in [("a", "1"), ("b", "2"), ("c", "3")] {
        assert_eq!(cmd::<String>(&mut c, &["GET", k]), v);
    }
    // Only the new base and the incr opened at its cut remain.
    let m = std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest")).unwrap();
    assert_eq!(m.lines().count(), 2, "{m}");
    drop(n);
}

#[test]
fn bgrewriteaof_is_scheduled_while_a_bgsave_runs() {
    let dir = tempdir("scheduled");
    let n = Node::start(&dir, &["--appendonly", "yes"]);
    let mut c = n.conn();
    for i in 0..40 {
        let _: () = cmd(&mut c, &["SET", &format!("k{i}"), "v"]);
    }
    // 40 keys at 75 ms: a 3 s save, which a loaded machine cannot finish
    // between the next two commands.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "75000"]);
    let _: String = cmd(&mut c, &["BGSAVE"]);
    let r: String = cmd(&mut c, &["BGREWRITEAOF"]);
    assert_eq!(r, "Background append only file rewriting scheduled");
    assert_eq!(info_field::<i64>(&mut c, "aof_rewrite_scheduled"), 1);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field::<i64>(&mut c, "aof_rewrites") < 1 {
        assert!(Instant::now() < deadline, "the scheduled rewrite never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(info_field::<i64>(&mut c, "aof_rewrite_scheduled"), 0);
    // A rewrite already running is refused (one of 40 s, never waited
    // for: the server is killed).
    let _: () = cmd(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "1000000"]);
    let _: String = cmd(&mut c, &["BGREWRITEAOF"]);
    assert_eq!(
        cmd_err(&mut c, &["BGREWRITEAOF"]),
        "ERR Background append only file rewriting already in progress"
    );
    drop(n);
}

/// An AOF holding EVALs (as older servers wrote scripts) loads into a
/// read-only replica: the scripts' writes are replayed, not refused with
/// LOADING or READONLY (which made the load fail, and abort under
/// propagation-error-behavior panic). Redis's integration/aof test of the
/// same name.
#[test]
fn an_aofs_eval_writes_load_into_a_read_only_replica() {
    fn resp(argv: &[&str]) -> String {
        let mut s = format!("*{}\r\n", argv.len());
        for a in argv {
            s += &format!("${}\r\n{a}\r\n", a.len());
        }
        s
    }
    let dir = tempdir("aof-eval");
    let aofdir = dir.join("appendonlydir");
    std::fs::create_dir_all(&aofdir).unwrap();
    std::fs::write(
        aofdir.join("appendonly.aof.manifest"),
        "file appendonly.aof.1.incr.aof seq 1 type i\n",
    )
    .unwrap();
    let mut aof = resp(&["select", "9"]);
    aof += &resp(&["eval", "redis.call('set',KEYS[1],'100')", "1", "foo"]);
    aof += &resp(&["eval", "redis.call('incr',KEYS[1])", "1", "foo"]);
    aof += &resp(&["eval", "redis.call('incr',KEYS[1])", "1", "foo"]);
    std::fs::write(aofdir.join("appendonly.aof.1.incr.aof"), aof).unwrap();
    let port = free_port().to_string();
    let n = Node::start(
        &dir,
        &[
            "--appendonly",
            "yes",
            "--replica-read-only",
            "yes",
            "--propagation-error-behavior",
            "panic",
            "--replicaof",
            "127.0.0.1",
            &port,
        ],
    );
    let mut c = n.conn();
    let _: () = cmd(&mut c, &["SELECT", "9"]);
    assert_eq!(cmd::<String>(&mut c, &["GET", "foo"]), "102");
    drop(n);
}

/// A client that connects the moment the port is bound, to a server with no
/// AOF yet, gets its first write served, not -LOADING: Redis serves clients
/// at start-up only from inside a file's load, and the empty base file's
/// creation and sync is not one (the Tcl test "Multi Part AOF can start when
/// no aof and no manifest" failed on a slow disk). The client here races
/// start-up, so without the fix it lost only often, not always.
#[test]
fn first_write_on_a_fresh_aof_server_is_served_not_refused_loading() {
    use std::io::{BufRead, BufReader, Write};
    for round in 0..5 {
        let dir = tempdir(&format!("aof-first-write-{round}"));
        let port = free_port();
        let mut child = spawn(
            env!("CARGO_BIN_EXE_lattice-server"),
            &dir,
            port,
            &["--appendonly", "yes", "--appendfsync", "always"],
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        let stream = loop {
            if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                break s;
            }
            assert!(Instant::now() < deadline, "the server did not bind");
            std::thread::sleep(Duration::from_micros(200));
        };
        (&stream)
            .write_all(b"*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$2\r\nv1\r\n")
            .unwrap();
        let mut reply = String::new();
        BufReader::new(&stream).read_line(&mut reply).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(reply, "+OK\r\n", "round {round}");
    }
}
