//! LatticeDB as a master, with a real redis-server 7 as its replica: the
//! full sync (diskless and disk-based) gives the replica our exact dataset
//! (DEBUG DIGEST), live writes follow, a dropped link resumes with a
//! partial resync, and WAIT counts the replica's acknowledgements.

mod common;
use common::*;
use std::time::Duration;

/// Every type, both encodings, TTLs, three databases.
fn fill(c: &mut redis::Connection) {
    let big = "x".repeat(5000);
    let _: () = cmd(c, &["SET", "s", "v"]);
    let _: () = cmd(c, &["SET", "n", "12345"]);
    let _: () = cmd(c, &["SET", "big", &big]);
    let _: () = cmd(c, &["SET", "ttl", "v", "EX", "1000"]);
    let _: i64 = cmd(c, &["RPUSH", "l", "a", "b", "1"]);
    let _: i64 = cmd(c, &["HSET", "h", "f", "v", "g", "1"]);
    let _: i64 = cmd(c, &["SADD", "si", "1", "2", "3"]);
    let _: i64 = cmd(c, &["SADD", "ss", "a", "b"]);
    let _: i64 = cmd(c, &["ZADD", "z", "1", "a", "2.5", "b"]);
    for i in 0..300 {
        let (k, v) = (format!("m{i}"), format!("{i}{big}"));
        let _: i64 = cmd(c, &["RPUSH", "biglist", &v]);
        let _: i64 = cmd(c, &["HSET", "bighash", &k, &v]);
        let _: i64 = cmd(c, &["ZADD", "bigzset", &i.to_string(), &k]);
    }
    for db in ["1", "2"] {
        let _: () = cmd(c, &["SELECT", db]);
        let _: () = cmd(c, &["SET", "in", db]);
    }
    let _: () = cmd(c, &["SELECT", "0"]);
}

/// Writes of every kind the stream must carry, across databases.
fn live_writes(c: &mut redis::Connection) {
    let _: i64 = cmd(c, &["INCR", "n"]);
    let _: () = cmd(c, &["SET", "later", "v", "PX", "100000"]);
    let _: i64 = cmd(c, &["EXPIRE", "s", "500"]);
    let _: i64 = cmd(c, &["DEL", "ss"]);
    let _: i64 = cmd(c, &["LPUSH", "l", "front"]);
    let _: String = cmd(c, &["INCRBYFLOAT", "f", "1.5"]);
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("tx1")
        .arg("1")
        .cmd("SET")
        .arg("tx2")
        .arg("2")
        .query(c)
        .unwrap();
    let _: () = cmd(c, &["SELECT", "2"]);
    let _: () = cmd(c, &["FLUSHDB"]);
    let _: () = cmd(c, &["SET", "fresh", "2"]);
    let _: () = cmd(c, &["SELECT", "0"]);
}

fn full_sync_then_live(diskless: &str) {
    let s = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--repl-diskless-sync",
        diskless,
    ]);
    let mut m = s.conn();
    fill(&mut m);
    let r = RedisOracle::start(&["--replicaof", "127.0.0.1", &s.port.to_string()]);
    let mut rc = r.conn();
    eventually("the initial sync", || in_sync(&mut m, &mut rc));
    live_writes(&mut m);
    eventually("the live writes", || in_sync(&mut m, &mut rc));
    let v: String = cmd(&mut rc, &["GET", "tx2"]);
    assert_eq!(v, "2");
    let ttl: i64 = cmd(&mut rc, &["PTTL", "later"]);
    assert!(ttl > 90_000, "{ttl}");
    // What the master reports.
    assert_eq!(info_field::<u64>(&mut m, "connected_slaves"), 1);
    let slave0: String = info_field(&mut m, "slave0");
    assert!(
        slave0.starts_with(&format!("ip=127.0.0.1,port={},state=online,", r.port)),
        "{slave0}"
    );
    assert_eq!(info_field::<u64>(&mut m, "sync_full"), 1);
    let role: Vec<redis::Value> = cmd(&mut m, &["ROLE"]);
    assert_eq!(role[0], redis::Value::BulkString(b"master".to_vec()));
    // CONFIG RESETSTAT zeroes the sync counters, as Redis's resetServerStats.
    let _: () = cmd(&mut m, &["CONFIG", "RESETSTAT"]);
    assert_eq!(info_field::<u64>(&mut m, "sync_full"), 0);
}

#[test]
fn redis_replica_diskless_full_sync_then_live_writes() {
    full_sync_then_live("yes");
}

#[test]
fn redis_replica_disk_full_sync_then_live_writes() {
    full_sync_then_live("no");
}

#[test]
fn dropped_link_resumes_with_a_partial_resync_and_wait_counts_acks() {
    let s = Server::start(&["--repl-diskless-sync-delay", "0"]);
    let mut m = s.conn();
    fill(&mut m);
    let r = RedisOracle::start(&["--replicaof", "127.0.0.1", &s.port.to_string()]);
    let mut rc = r.conn();
    eventually("the initial sync", || in_sync(&mut m, &mut rc));
    // WAIT: the replica acknowledges a write at once.
    let _: () = cmd(&mut m, &["SET", "acked", "1"]);
    let n: i64 = cmd(&mut m, &["WAIT", "1", "30000"]);
    assert_eq!(n, 1);
    // Asking for two replicas waits the timeout, then counts the one.
    let n: i64 = cmd(&mut m, &["WAIT", "2", "200"]);
    assert_eq!(n, 1);
    for round in 0..3 {
        let killed: i64 = cmd(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
        assert_eq!(killed, 1);
        let _: () = cmd(&mut m, &["SET", &format!("while-down-{round}"), "1"]);
        eventually("the resync", || in_sync(&mut m, &mut rc));
    }
    assert_eq!(info_field::<u64>(&mut m, "sync_full"), 1);
    assert_eq!(info_field::<u64>(&mut m, "sync_partial_ok"), 3);
}

#[test]
fn min_replicas_to_write_refuses_writes_without_a_good_replica() {
    let s = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--min-replicas-to-write",
        "1",
        "--min-replicas-max-lag",
        "10",
    ]);
    let mut m = s.conn();
    let err = cmd_err(&mut m, &["SET", "k", "v"]);
    assert!(err.contains("Not enough good replicas to write."), "{err}");
    let r: redis::RedisResult<redis::Value> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut m);
    // Refused while queued, as Redis does (EXEC then aborts).
    let err = r.unwrap_err().to_string();
    assert!(err.contains("NOREPLICAS"), "{err}");
    // Reads still run.
    let v: Option<String> = cmd(&mut m, &["GET", "k"]);
    assert_eq!(v, None);
    let r = RedisOracle::start(&["--replicaof", "127.0.0.1", &s.port.to_string()]);
    let mut rc = r.conn();
    eventually("a good replica", || {
        info_field::<u64>(&mut m, "min_slaves_good_slaves") == 1
    });
    let _: () = cmd(&mut m, &["SET", "k", "v"]);
    eventually("the write on the replica", || {
        cmd::<Option<String>>(&mut rc, &["GET", "k"]).as_deref() == Some("v")
    });
}

/// kill -9 of the master under the seed's load (redis-benchmark, 50
/// clients of 8 KB SETs) while four writers each SET an 8 KB value and
/// WAIT 1: every write WAIT acknowledged is on the replica, intact.
fn acked_writes_survive_a_master_kill(
    replica_conn: impl FnOnce(u16) -> (Box<dyn std::any::Any>, redis::Connection),
) {
    let mut s = Server::start(&[]);
    let (_replica, mut rc) = replica_conn(s.port);
    let mut m = s.conn();
    eventually("the initial sync", || in_sync(&mut m, &mut rc));
    let port = s.port.to_string();
    let load = std::process::Command::new("redis-benchmark")
        .args(["-p", &port, "-t", "set", "-d", "8192", "-c", "50"])
        .args(["-n", "100000000", "-r", "100000", "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("redis-benchmark (apt-get install redis-tools)");
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let (port, count) = (s.port, count.clone());
            std::thread::spawn(move || {
                let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let mut acked = vec![];
                for i in 0.. {
                    let (key, value) = (format!("w{t}-{i}"), acked_value(i));
                    let set = redis::cmd("SET").arg(&key).arg(&value).query::<()>(&mut c);
                    let wait = redis::cmd("WAIT").arg(1).arg(0).query::<i64>(&mut c);
                    match (set, wait) {
                        (Ok(()), Ok(1)) => {
                            acked.push((key, value));
                            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        _ => break,
                    }
                }
                acked
            })
        })
        .collect();
    // The load runs a while, and the writers have had writes acknowledged
    // (however slowly a loaded machine lets them).
    std::thread::sleep(Duration::from_millis(1500));
    eventually("writes acknowledged by WAIT", || {
        count.load(std::sync::atomic::Ordering::SeqCst) > 10
    });
    let _ = s.child.kill(); // SIGKILL
    let acked: Vec<_> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let mut load = load;
    let _ = load.kill();
    let _ = load.wait();
    assert!(
        acked.len() > 10,
        "only {} writes before the kill",
        acked.len()
    );
    for (key, value) in &acked {
        let v: Option<String> = cmd(&mut rc, &["GET", key]);
        assert!(
            v.as_ref() == Some(value),
            "{key} was acknowledged by WAIT but is not on the replica as written"
        );
    }
}

fn acked_value(i: usize) -> String {
    format!("{i}-{}", "x".repeat(8192))
}

#[test]
fn writes_acknowledged_by_wait_survive_a_master_kill() {
    acked_writes_survive_a_master_kill(|port| {
        let r = RedisOracle::start(&["--replicaof", "127.0.0.1", &port.to_string()]);
        let c = r.conn();
        (Box::new(r), c)
    });
}

#[test]
fn writes_acknowledged_by_wait_survive_a_master_kill_with_a_lattice_replica() {
    acked_writes_survive_a_master_kill(|port| {
        let r = Server::start(&["--replicaof", "127.0.0.1", &port.to_string()]);
        let c = r.conn();
        (Box::new(r), c)
    });
}

#[test]
fn waitaof_waits_for_the_local_fsync() {
    let s = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
    ]);
    let mut m = s.conn();
    let _: () = cmd(&mut m, &["SET", "k", "v"]);
    let r: Vec<i64> = cmd(&mut m, &["WAITAOF", "1", "0", "0"]);
    assert_eq!(r, vec![1, 0]);
    // No replica fsyncs: the timeout answers with what there is.
    let r: Vec<i64> = cmd(&mut m, &["WAITAOF", "0", "1", "100"]);
    assert_eq!(r, vec![0, 0]);
    let _: () = cmd(&mut m, &["CONFIG", "SET", "appendonly", "no"]);
    let err = cmd_err(&mut m, &["WAITAOF", "1", "0", "0"]);
    assert!(err.contains("appendonly is disabled"), "{err}");
}

/// A replica of `master`, synced, and a way to signal its process
/// (`-STOP` freezes it, `-CONT` thaws it).
fn synced_replica(master: &Server) -> (Server, impl Fn(&str) + Send + 'static) {
    let r = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--replicaof",
        "127.0.0.1",
        &master.port.to_string(),
    ]);
    let (mut m, mut rc) = (master.conn(), r.conn());
    eventually("the initial sync", || in_sync(&mut m, &mut rc));
    let pid = r.child.id().to_string();
    let signal = move |sig: &str| {
        std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
    };
    (r, signal)
}

/// SET 8 KB values as fast as one client goes while the replica is frozen
/// (SIGSTOP) for a while: returns the master's (sync_full,
/// repl_throttled_batches, repl_lag_disconnects) once the replica caught
/// up again, after checking both hold the same data.
fn frozen_replica_under_load(policy: &str) -> (u64, u64, u64) {
    let s = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--repl-lag-policy",
        policy,
        "--repl-throttle-lag",
        "1mb",
        "--repl-backlog-size",
        "1mb",
        "--client-output-buffer-limit",
        "replica 8mb 4mb 60",
    ]);
    let (r, signal) = synced_replica(&s);
    let (mut m, mut rc) = (s.conn(), r.conn());
    signal("-STOP");
    // Thawed after 2 s and once the policy acted (writes slowed, or the
    // replica dropped) or the writes are done, whichever is first: the
    // writes may wait, and a loaded machine may take longer than 2 s to
    // send what goes past the limit.
    let written = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let thaw = {
        let (written, mut probe) = (written.clone(), s.conn());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            eventually("the policy to act or the writes to end", || {
                written.load(std::sync::atomic::Ordering::SeqCst)
                    || info_field::<u64>(&mut probe, "repl_throttled_batches") > 0
                    || info_field::<u64>(&mut probe, "repl_lag_disconnects") > 0
            });
            signal("-CONT");
        })
    };
    // 16 MB of writes against an 8 MB hard limit.
    let value = "v".repeat(8192);
    for i in 0..2000 {
        let _: () = cmd(&mut m, &["SET", &format!("k{}", i % 500), &value]);
    }
    written.store(true, std::sync::atomic::Ordering::SeqCst);
    thaw.join().unwrap();
    eventually("the catch-up", || in_sync(&mut m, &mut rc));
    // Shown if an assertion on the counters fails.
    eprintln!(
        "---- master log:\n{}---- replica log:\n{}",
        s.log(),
        r.log()
    );
    (
        info_field(&mut m, "sync_full"),
        info_field(&mut m, "repl_throttled_batches"),
        info_field(&mut m, "repl_lag_disconnects"),
    )
}

#[test]
fn a_frozen_replica_slows_writers_instead_of_being_dropped() {
    let (full, throttled, dropped) = frozen_replica_under_load("throttle");
    assert_eq!((full, dropped), (1, 0), "no resync, no drop");
    assert!(throttled > 0, "writers were slowed");
    // Redis's policy, for contrast: the replica is dropped and resyncs.
    let (full, throttled, dropped) = frozen_replica_under_load("disconnect");
    assert_eq!(throttled, 0);
    assert!(dropped >= 1 && full >= 2, "full {full} dropped {dropped}");
}

/// A CONFIG SET of `repl-lag-policy` holds from the next command on: with
/// a frozen replica far behind, the SET right after `throttle` is slowed,
/// and the SET right after `spill` is not. (The back-pressure settings
/// used to be re-read by worker 0's cron, here once a second with `hz 1`,
/// so the first SET ran unthrottled.)
#[test]
fn config_set_repl_lag_policy_applies_from_the_next_command() {
    let s = Server::start(&[
        "--hz",
        "1",
        "--repl-diskless-sync-delay",
        "0",
        "--repl-throttle-lag",
        "1mb",
    ]);
    let (r, signal) = synced_replica(&s);
    let (mut m, mut rc) = (s.conn(), r.conn());
    signal("-STOP");
    // 32 MB the frozen replica cannot take: its socket buffers fill, the
    // rest stays unsent (`spill`, the default, never slows the writers).
    let value = "v".repeat(1 << 20);
    for i in 0..32 {
        let _: () = cmd(&mut m, &["SET", &format!("big{i}"), &value]);
    }
    eventually("the replica to lag past repl-throttle-lag", || {
        info_field::<u64>(&mut m, "repl_max_replica_lag_bytes") > 4 << 20
    });
    let throttled = |m: &mut redis::Connection| info_field::<u64>(m, "repl_throttled_batches");
    assert_eq!(throttled(&mut m), 0, "spill never slows writers");
    let _: () = cmd(&mut m, &["CONFIG", "SET", "repl-lag-policy", "throttle"]);
    let _: () = cmd(&mut m, &["SET", "k", "1"]);
    let after_throttle = throttled(&mut m);
    assert_eq!(
        after_throttle, 1,
        "the SET right after the CONFIG SET waited"
    );
    let _: () = cmd(&mut m, &["CONFIG", "SET", "repl-lag-policy", "spill"]);
    let _: () = cmd(&mut m, &["SET", "k", "2"]);
    assert_eq!(throttled(&mut m), after_throttle, "spill again: no wait");
    signal("-CONT");
    eventually("the catch-up", || in_sync(&mut m, &mut rc));
}

#[test]
fn the_backlog_is_freed_after_repl_backlog_ttl_without_replicas() {
    let s = Server::start(&["--repl-diskless-sync-delay", "0", "--repl-backlog-ttl", "1"]);
    let mut m = s.conn();
    let old: String = info_field(&mut m, "master_replid");
    {
        let r = Server::start(&[
            "--repl-diskless-sync-delay",
            "0",
            "--replicaof",
            "127.0.0.1",
            &s.port.to_string(),
        ]);
        let mut rc = r.conn();
        eventually("the initial sync", || in_sync(&mut m, &mut rc));
        assert_eq!(info_field::<u64>(&mut m, "repl_backlog_active"), 1);
    }
    eventually("the backlog freed", || {
        info_field::<u64>(&mut m, "repl_backlog_active") == 0
    });
    assert_ne!(info_field::<String>(&mut m, "master_replid"), old);
}
