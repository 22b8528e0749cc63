//! `repl-diskless-load` on a LatticeDB replica: each mode syncs from a
//! LatticeDB master and from a real redis-server 7 master (payloads with an
//! EOF mark and with a length) to DEBUG DIGEST equality and follows live
//! writes; `swapdb` keeps the old dataset through a master killed
//! mid-transfer (behind -LOADING for a new history, serving reads as an
//! async load when the master continues ours) and retries; a truncated or
//! corrupt payload never leaves a half-loaded dataset; an AOF replica
//! rewrites its AOF after a full sync.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

fn fill(c: &mut redis::Connection) {
    let _: () = cmd(c, &["DEBUG", "POPULATE", "2000", "key", "20"]);
    let _: () = cmd(c, &["SET", "ttl", "v", "EX", "1000"]);
    let _: i64 = cmd(c, &["RPUSH", "l", "a", "b", "1"]);
    let _: i64 = cmd(c, &["HSET", "h", "f", "v"]);
    let _: i64 = cmd(c, &["SADD", "set", "1", "2"]);
    let _: i64 = cmd(c, &["ZADD", "z", "1", "a"]);
    let _: () = cmd(c, &["SELECT", "3"]);
    let _: () = cmd(c, &["SET", "in3", "x"]);
    let _: () = cmd(c, &["SELECT", "0"]);
}

fn log_of(s: &Server) -> String {
    std::fs::read_to_string(s.dir.join("server.log")).unwrap_or_default()
}

/// A replica in `mode` (holding `old` keys first) syncs from a LatticeDB
/// master and a Redis master, follows writes, and says in its log whether
/// the payload went to the parser or to disk.
fn syncs_in_mode(mode: &str, old: bool, expect: &str) {
    let lm = Server::start(&["--repl-diskless-sync-delay", "0"]);
    let lm_len = Server::start(&["--repl-diskless-sync", "no"]);
    let rm = RedisOracle::start(&[
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]);
    let rm_len = RedisOracle::start(&["--repl-diskless-sync", "no"]);
    let masters = [
        (lm.port, lm.conn()),
        (lm_len.port, lm_len.conn()),
        (rm.port, rm.conn()),
        (rm_len.port, rm_len.conn()),
    ];
    for (port, mut m) in masters {
        fill(&mut m);
        let r = Server::start(&["--repl-diskless-load", mode]);
        let mut rc = r.conn();
        if old {
            let _: () = cmd(&mut rc, &["SET", "mykey", "myvalue"]);
        }
        let _: () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &port.to_string()]);
        eventually("initial sync", || in_sync(&mut m, &mut rc));
        assert_eq!(cmd::<Option<String>>(&mut rc, &["GET", "mykey"]), None);
        let _: () = cmd(&mut m, &["SET", "live", "1"]);
        let _: i64 = cmd(&mut m, &["INCR", "live"]);
        let _: i64 = cmd(&mut m, &["LPUSH", "l", "more"]);
        eventually("live writes", || in_sync(&mut m, &mut rc));
        assert_eq!(cmd::<String>(&mut rc, &["GET", "live"]), "2");
        let log = log_of(&r);
        let other = if expect == "to disk" {
            "to parser"
        } else {
            "to disk"
        };
        assert!(
            log.contains(expect) && !log.contains(other),
            "expected '{expect}' in the log:\n{log}"
        );
        assert!(log.contains("Finished with success"));
    }
}

#[test]
fn disabled_goes_through_a_temp_file() {
    syncs_in_mode("disabled", true, "to disk");
}

#[test]
fn on_empty_db_parses_the_socket_when_empty() {
    syncs_in_mode("on-empty-db", false, "to parser");
}

#[test]
fn on_empty_db_uses_the_disk_when_not_empty() {
    syncs_in_mode("on-empty-db", true, "to disk");
}

#[test]
fn swapdb_parses_the_socket_and_swaps() {
    syncs_in_mode("swapdb", true, "to parser");
}

/// A redis-server on a given port (a master coming back where it was).
fn redis_on(port: u16) -> RedisOracle {
    let dir = std::env::temp_dir().join(format!("redis-oracle-{port}-{}-b", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new("/usr/bin/redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(&dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ])
        .args([
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let o = RedisOracle { child, port, dir };
    eventually("redis-server back", || {
        o.try_conn()
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    });
    o
}

/// Stretches a Redis master's RDB generation: a sleep every few keys
/// (redis's `rdb-key-save-delay` below 0), about 6 s for 200k keys (the
/// tests look at the replica while it loads: a window a loaded machine
/// must not miss).
const SAVE_DELAY: &str = "-2";

/// swapdb, new history (different replid): -LOADING while the payload
/// loads; the master dies mid-transfer: the old data is back, nothing of
/// the half-loaded payload; the replica retries and syncs when a master
/// is back on that port.
#[test]
fn swapdb_killed_master_keeps_old_data_and_retries() {
    let mut m = RedisOracle::start(&[
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]);
    let mut mc = m.conn();
    let _: () = cmd(&mut mc, &["DEBUG", "POPULATE", "200000", "big", "10"]);
    let _: () = cmd(
        &mut mc,
        &["CONFIG", "SET", "rdb-key-save-delay", SAVE_DELAY],
    );
    let port = m.port;
    let r = Server::start(&["--repl-diskless-load", "swapdb"]);
    let mut rc = r.conn();
    let _: () = cmd(&mut rc, &["DEBUG", "POPULATE", "100", "old"]);
    let _: () = cmd(&mut rc, &["SET", "mykey", "myvalue"]);
    let _: () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &port.to_string()]);
    eventually("loading", || info_field::<u8>(&mut rc, "loading") == 1);
    assert_eq!(info_field::<u8>(&mut rc, "async_loading"), 0);
    assert_eq!(info_field::<u8>(&mut rc, "master_sync_in_progress"), 1);
    assert!(cmd_err(&mut rc, &["GET", "mykey"]).starts_with("LOADING"));
    eventually("bytes read", || {
        info_field::<u64>(&mut rc, "master_sync_read_bytes") > 100_000
    });
    let _ = m.child.kill();
    let _ = m.child.wait();
    eventually("load aborted", || info_field::<u8>(&mut rc, "loading") == 0);
    assert_eq!(cmd::<String>(&mut rc, &["GET", "mykey"]), "myvalue");
    assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 101);
    assert_eq!(cmd::<i64>(&mut rc, &["EXISTS", "big:0", "big:199999"]), 0);
    assert_eq!(info_field::<String>(&mut rc, "master_link_status"), "down");
    assert!(log_of(&r).contains("Discarding temporary DB"));
    drop(m);
    let back = redis_on(port);
    let mut bc = back.conn();
    fill(&mut bc);
    eventually("sync with the master back", || in_sync(&mut bc, &mut rc));
    assert_eq!(cmd::<Option<String>>(&mut rc, &["GET", "mykey"]), None);
}

/// swapdb when the master continues our history (its backlog no longer
/// has what we miss): an async load, the old data serving reads and
/// `no_async_loading` commands refused; then the new data swapped in (a
/// WATCHing transaction fails), or, the master killed mid-transfer, the
/// old data kept.
fn swapdb_async_loading(abort: bool) {
    let mut m = RedisOracle::start(&[
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]);
    let mut mc = m.conn();
    let _: () = cmd(&mut mc, &["DEBUG", "POPULATE", "1000", "first", "10"]);
    let r = Server::start(&[
        "--repl-diskless-load",
        "swapdb",
        "--replica-read-only",
        "no",
    ]);
    let mut rc = r.conn();
    let _: () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &m.port.to_string()]);
    eventually("initial sync", || in_sync(&mut mc, &mut rc));
    let _: () = cmd(&mut rc, &["SET", "mykey", "myvalue"]);
    let mut watcher = r.conn();
    let _: () = cmd(&mut watcher, &["WATCH", "mykey"]);
    let _: () = cmd(&mut mc, &["DEBUG", "POPULATE", "200000", "big", "10"]);
    let _: () = cmd(
        &mut mc,
        &["CONFIG", "SET", "rdb-key-save-delay", SAVE_DELAY],
    );
    // Drop the link and push the backlog past our offset: a full sync of
    // the same history follows.
    let _: () = cmd(&mut mc, &["MULTI"]);
    let _: () = cmd(&mut mc, &["CLIENT", "KILL", "TYPE", "replica"]);
    let _: () = cmd(&mut mc, &["CONFIG", "SET", "repl-backlog-size", "16384"]);
    let big = "A".repeat(16384);
    for i in 0..10 {
        let _: () = cmd(&mut mc, &["SET", &format!("fill{i}"), &big]);
    }
    let _: redis::Value = cmd(&mut mc, &["EXEC"]);
    eventually("async loading", || {
        info_field::<u8>(&mut rc, "async_loading") == 1
    });
    assert_eq!(info_field::<u8>(&mut rc, "loading"), 0);
    assert_eq!(cmd::<String>(&mut rc, &["GET", "mykey"]), "myvalue");
    assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 1001);
    assert!(cmd_err(&mut rc, &["CONFIG", "SET", "appendonly", "no"]).starts_with("LOADING"));
    assert!(cmd_err(&mut rc, &["REPLICAOF", "NO", "ONE"]).starts_with("LOADING"));
    assert_eq!(info_field::<u8>(&mut rc, "async_loading"), 1);
    if abort {
        eventually("bytes read", || {
            info_field::<u64>(&mut rc, "master_sync_read_bytes") > 100_000
        });
        let _ = m.child.kill();
        let _ = m.child.wait();
        eventually("load aborted", || {
            info_field::<u8>(&mut rc, "async_loading") == 0
        });
        assert_eq!(cmd::<String>(&mut rc, &["GET", "mykey"]), "myvalue");
        assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 1001);
        assert_eq!(cmd::<i64>(&mut rc, &["EXISTS", "big:0", "big:199999"]), 0);
        return;
    }
    // 200,000 keys sent slowly (rdb-key-save-delay): 20-29 s on 2 quiet
    // cores, so the 30 s of `eventually` timed out on a loaded one.
    eventually_within("swapped in", Duration::from_secs(180), || {
        in_sync(&mut mc, &mut rc)
    });
    assert_eq!(cmd::<Option<String>>(&mut rc, &["GET", "mykey"]), None);
    assert_eq!(info_field::<u8>(&mut rc, "async_loading"), 0);
    let _: () = cmd(&mut watcher, &["MULTI"]);
    let _: () = cmd(&mut watcher, &["SET", "w", "1"]);
    assert_eq!(
        cmd::<redis::Value>(&mut watcher, &["EXEC"]),
        redis::Value::Nil
    );
    let _: () = cmd(&mut mc, &["SET", "after", "1"]);
    eventually("live writes", || in_sync(&mut mc, &mut rc));
}

#[test]
fn swapdb_async_loading_serves_old_data_then_swaps() {
    swapdb_async_loading(false);
}

#[test]
fn swapdb_async_loading_aborted_keeps_old_data() {
    swapdb_async_loading(true);
}

// ------------------------------------------------------ a scripted master

/// Reads RESP commands from the replica and answers the handshake; returns
/// once PSYNC came.
fn handshake(s: &mut std::net::TcpStream) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 1024];
    loop {
        let n = s.read(&mut tmp).unwrap();
        assert!(n > 0, "replica closed during the handshake");
        buf.extend_from_slice(&tmp[..n]);
        while let Some((name, used)) = next_command(&buf) {
            buf.drain(..used);
            match name.to_ascii_uppercase().as_str() {
                "PING" => s.write_all(b"+PONG\r\n").unwrap(),
                "PSYNC" => return,
                _ => s.write_all(b"+OK\r\n").unwrap(),
            }
        }
    }
}

/// The name of the first complete RESP command in `buf`, and its length.
fn next_command(buf: &[u8]) -> Option<(String, usize)> {
    let text = std::str::from_utf8(buf).ok()?;
    let mut lines = text.split_inclusive("\r\n");
    let head = lines.next()?;
    let argc: usize = head.strip_prefix('*')?.trim_end().parse().ok()?;
    let mut used = head.len();
    let mut name = None;
    for _ in 0..argc {
        let len_line = lines.next()?;
        let arg = lines.next()?;
        if !arg.ends_with("\r\n") {
            return None;
        }
        used += len_line.len() + arg.len();
        name.get_or_insert_with(|| arg.trim_end().to_string());
    }
    Some((name?, used))
}

/// An RDB with 1000 keys, as redis-server saves it.
fn real_rdb() -> Vec<u8> {
    let o = RedisOracle::start(&[]);
    let mut c = o.conn();
    let _: () = cmd(&mut c, &["DEBUG", "POPULATE", "1000", "new", "10"]);
    let _: () = cmd(&mut c, &["SAVE"]);
    std::fs::read(o.dir.join("dump.rdb")).unwrap()
}

/// Payloads cut short, corrupted, or with a broken EOF mark: each fails,
/// the swapdb replica keeps its old data (the on-empty-db one stays
/// empty), and retries; the whole payload then loads.
fn bad_payloads_leave_no_half_loaded_data(mode: &str) {
    let rdb = real_rdb();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = Server::start(&["--repl-diskless-load", mode]);
    let mut rc = r.conn();
    let old = if mode == "swapdb" { 10 } else { 0 };
    if old > 0 {
        let _: () = cmd(&mut rc, &["DEBUG", "POPULATE", "10", "old"]);
    }
    let _: () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &port.to_string()]);
    let mark = "0123456789abcdef0123456789abcdef01234567";
    let mut corrupt = rdb.clone();
    let mid = corrupt.len() / 2;
    for b in &mut corrupt[mid..mid + 64] {
        *b ^= 0x5a;
    }
    let half = &rdb[..rdb.len() / 2];
    let mut payloads: Vec<Vec<u8>> = vec![
        [format!("$EOF:{mark}\r\n").as_bytes(), half, mark.as_bytes()].concat(),
        [format!("${}\r\n", rdb.len()).as_bytes(), half].concat(),
        [format!("${}\r\n", corrupt.len()).as_bytes(), &corrupt].concat(),
        [
            format!("$EOF:{mark}\r\n").as_bytes(),
            &rdb,
            b"junk",
            mark.as_bytes(),
        ]
        .concat(),
    ];
    let mut next = listener.accept().unwrap().0;
    for (i, p) in payloads.drain(..).enumerate() {
        let mut s = next;
        handshake(&mut s);
        let id = "a".repeat(40);
        s.write_all(format!("+FULLRESYNC {id} 0\r\n").as_bytes())
            .unwrap();
        s.write_all(&p).unwrap();
        s.flush().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(s);
        // The replica connects again only once this load failed, and its
        // new link waits for our handshake: no load runs while we look.
        // (Waiting for "loading:0" alone passed before the load began.)
        next = listener.accept().unwrap().0;
        eventually("the load to fail", || {
            info_field::<u8>(&mut rc, "loading") == 0
                && info_field::<String>(&mut rc, "master_link_status") == "down"
        });
        assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), old, "payload {i}");
        assert_eq!(cmd::<i64>(&mut rc, &["EXISTS", "new:0"]), 0, "payload {i}");
    }
    let mut s = next;
    handshake(&mut s);
    let id = "b".repeat(40);
    s.write_all(format!("+FULLRESYNC {id} 0\r\n").as_bytes())
        .unwrap();
    s.write_all(format!("$EOF:{mark}\r\n").as_bytes()).unwrap();
    s.write_all(&rdb).unwrap();
    s.write_all(mark.as_bytes()).unwrap();
    s.write_all(b"*3\r\n$3\r\nSET\r\n$5\r\nafter\r\n$1\r\n1\r\n")
        .unwrap();
    eventually("the good payload", || {
        info_field::<String>(&mut rc, "master_link_status") == "up"
            && cmd::<Option<String>>(&mut rc, &["GET", "after"]).is_some()
    });
    assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 1001);
    assert_eq!(cmd::<i64>(&mut rc, &["EXISTS", "old:0"]), 0);
    assert_eq!(info_field::<u64>(&mut rc, "master_repl_offset"), 31);
}

#[test]
fn swapdb_bad_payloads_keep_the_old_data() {
    bad_payloads_leave_no_half_loaded_data("swapdb");
}

#[test]
fn on_empty_db_bad_payloads_leave_it_empty() {
    bad_payloads_leave_no_half_loaded_data("on-empty-db");
}

/// A replica with the AOF on rewrites it after a full sync (Redis's
/// restartAOFAfterSYNC): restarted on its own, it has the master's data,
/// not the data it held before the sync.
#[test]
fn an_aof_replica_restarts_with_the_synced_data() {
    for mode in ["disabled", "swapdb"] {
        let m = Server::start(&["--repl-diskless-sync-delay", "0"]);
        let mut mc = m.conn();
        fill(&mut mc);
        let dir = std::env::temp_dir().join(format!("lattice-dl-aof-{}-{mode}", m.port));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_str().unwrap();
        let args = [
            "--dir",
            d,
            "--appendonly",
            "yes",
            "--repl-diskless-load",
            mode,
        ];
        let mut r = Server::start(&args);
        let mut rc = r.conn();
        let _: () = cmd(&mut rc, &["SET", "mykey", "myvalue"]);
        let _: () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &m.port.to_string()]);
        eventually("sync", || in_sync(&mut mc, &mut rc));
        eventually("AOF rewritten", || {
            info_field::<u64>(&mut rc, "aof_rewrites") >= 1
                && info_field::<u8>(&mut rc, "aof_rewrite_in_progress") == 0
        });
        let _: () = cmd(&mut mc, &["SET", "after", "1"]);
        eventually("live write", || in_sync(&mut mc, &mut rc));
        let want = digest(&mut mc);
        let _ = r.child.kill();
        let _ = r.child.wait();
        drop(r);
        let r = Server::start(&args);
        let mut rc = r.conn();
        assert_eq!(
            cmd::<Option<String>>(&mut rc, &["GET", "after"]),
            Some("1".into())
        );
        assert_eq!(digest(&mut rc), want, "{mode}");
        assert_eq!(cmd::<Option<String>>(&mut rc, &["GET", "mykey"]), None);
        drop(r);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
