//! A replica that stops reading (SIGSTOP: a GC pause, a full disk, a link
//! that stays open but carries nothing) under `repl-lag-policy spill`, the
//! default: the master keeps its write rate, the bytes the replica has not
//! acknowledged go to disk once the in-memory backlog is full, and when the
//! replica runs again it continues with a partial resync, even though the
//! master dropped its connection after `repl-timeout` meanwhile. A master
//! killed while its replica is frozen leaves the replica's data intact.

mod common;
use common::*;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tests in this file measure write rates: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// In-memory backlog for lagging replicas: 64 MB (a quarter of the replica
/// hard limit, Redis's default 256 MB, where spilling starts). The hard
/// limit is how far the spiller may fall behind the writers before they
/// win and the replica must full-sync (`Backlog::trim_locked`): at 64 MB,
/// four writers on a loaded 2-core machine outran it once ("nothing was
/// spilled to disk", the history dropped before it was written).
const MASTER_ARGS: &[&str] = &[
    "--client-output-buffer-limit",
    "replica 256mb 128mb 60",
    "--repl-timeout",
    "3",
];

/// Writer threads SETting 8 KB values as fast as the master answers.
struct Writers {
    done: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    fn start(m: &Server, n: usize, prefix: &str) -> Writers {
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|t| {
                let (done, stop, mut c) = (done.clone(), stop.clone(), m.conn());
                let prefix = format!("{prefix}{t}:");
                std::thread::spawn(move || {
                    let value = vec![b'v'; 8192];
                    let mut i = 0u64;
                    while !stop.load(Relaxed) {
                        let key = format!("{prefix}{}", i % 500);
                        if redis::cmd("SET")
                            .arg(key)
                            .arg(&value)
                            .query::<()>(&mut c)
                            .is_err()
                        {
                            return; // the master was killed
                        }
                        done.fetch_add(1, Relaxed);
                        i += 1;
                    }
                })
            })
            .collect();
        Writers {
            done,
            stop,
            threads,
        }
    }

    /// Writes per second in each of `secs` one-second windows.
    fn rates(&self, secs: usize) -> Vec<u64> {
        (0..secs)
            .map(|_| {
                let (t0, n0) = (Instant::now(), self.done.load(Relaxed));
                std::thread::sleep(Duration::from_secs(1));
                let n = self.done.load(Relaxed) - n0;
                (n as f64 / t0.elapsed().as_secs_f64()) as u64
            })
            .collect()
    }

    fn stop(self) {
        self.stop.store(true, Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn signal(s: &Server, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child this test started and has not
    // reaped; no memory is shared.
    assert_eq!(unsafe { libc::kill(s.child.id() as libc::pid_t, sig) }, 0);
}

fn synced_replica(m: &Server) -> (Server, redis::Connection) {
    let r = Server::start(&["--replicaof", "127.0.0.1", &m.port.to_string()]);
    let mut rc = r.conn();
    let mut mc = m.conn();
    eventually("the replica in sync", || in_sync(&mut mc, &mut rc));
    (r, rc)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

#[test]
fn a_frozen_replica_costs_neither_the_write_rate_nor_a_full_sync() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let m = Server::start(MASTER_ARGS);
    let mut mc = m.conn();
    let (r, mut rc) = synced_replica(&m);
    let writers = Writers::start(&m, 4, "w");
    let before = median(writers.rates(3));
    let offset_at_freeze: u64 = info_field(&mut mc, "master_repl_offset");
    signal(&r, libc::SIGSTOP);
    // Frozen for 6 s at least, and until the master dropped the connection
    // (past repl-timeout) and the replica is behind by twice the 64 MB
    // in-memory backlog: on a loaded machine the writes may take longer.
    let mut during = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let on_disk = loop {
        during.extend(writers.rates(1));
        let behind = info_field::<u64>(&mut mc, "master_repl_offset") - offset_at_freeze;
        let on_disk: u64 = info_field(&mut mc, "repl_backlog_disk_bytes");
        if during.len() >= 6
            && behind > 128 << 20
            && m.log().contains("Disconnecting timedout replica")
        {
            break on_disk;
        }
        assert!(
            Instant::now() < deadline,
            "not 128 MB behind or not dropped after {during:?} writes/s ({behind} bytes behind)"
        );
    };
    signal(&r, libc::SIGCONT);
    writers.stop();
    assert!(on_disk > 0, "nothing was spilled to disk");
    // The writes kept their rate: half of it in the median second, and no
    // second below a fifth (a machine busy with other work varies from
    // second to second; a master waiting on its replica drops to nothing).
    let (median_during, slowest) = (median(during.clone()), *during.iter().min().unwrap());
    assert!(
        median_during >= before / 2 && slowest >= before / 5,
        "writes/s during the freeze {during:?} against {before} before"
    );
    eventually_within(
        "the replica in sync again",
        Duration::from_secs(120),
        || in_sync(&mut mc, &mut rc),
    );
    assert!(
        m.log().contains("Disconnecting timedout replica"),
        "the master kept waiting on the frozen replica"
    );
    assert_eq!(info_field::<u64>(&mut mc, "sync_full"), 1, "a full sync");
    assert!(info_field::<u64>(&mut mc, "sync_partial_ok") >= 1);
    // Once it has caught up, nothing stays on disk.
    eventually("the disk tier emptied", || {
        info_field::<u64>(&mut mc, "repl_backlog_disk_bytes") == 0
    });
}

#[test]
fn a_master_killed_while_its_replica_is_frozen_leaves_the_replica_intact() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = Server::start(MASTER_ARGS);
    let mut mc = m.conn();
    let (r, mut rc) = synced_replica(&m);
    let mut p = redis::pipe();
    for i in 0..1000 {
        p.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
    }
    let _: () = p.query(&mut mc).unwrap();
    eventually("the keys on the replica", || in_sync(&mut mc, &mut rc));
    signal(&r, libc::SIGSTOP);
    let writers = Writers::start(&m, 2, "late");
    eventually("bytes spilled to disk", || {
        info_field::<u64>(&mut mc, "repl_backlog_disk_bytes") > 0
    });
    m.child.kill().unwrap();
    let _ = m.child.wait();
    writers.stop();
    signal(&r, libc::SIGCONT);
    eventually("the replica sees its master gone", || {
        info_field::<String>(&mut rc, "master_link_status") == "down"
    });
    for i in 0..1000 {
        let v: Option<i64> = cmd(&mut rc, &["GET", &format!("k{i}")]);
        assert_eq!(v, Some(i), "k{i} on the replica");
    }
    // What arrived before the kill applied on top; nothing was flushed.
    assert!(cmd::<u64>(&mut rc, &["DBSIZE"]) >= 1000);
    assert_eq!(info_field::<u64>(&mut rc, "loading"), 0);
}
