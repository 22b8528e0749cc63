//! Runs the KEYDB.CRON jobs that are due (`commands/cron.rs` creates them,
//! `keyspace/cron.rs` holds them), from worker 0's cron, each tick (`hz`).
//!
//! Who runs a job: never a replica (its master runs the job and the
//! script's writes come in its stream, as expiries do); on an active node,
//! the job's owner (the node where KEYDB.CRON ran; DECISIONS 110), whose
//! writes then replicate to its peers as any script's; otherwise (a plain
//! master, a promoted replica) every job in its keyspace. KeyDB runs a job
//! on every active replica and keeps the runs local: our peers replicate
//! every write, so a job run on each would run N times over.
//!
//! A run is the job's script as `EVAL script numkeys keys... args...` in
//! the job's database, through the ordinary command path (`run_local`: its
//! writes propagate as any EVAL's). Then a single-shot job's key is
//! deleted (DEL), and a repeating job is written back with its next run
//! (RESTORE ... REPLACE, as KEYDB.CRON propagates a job), either only if
//! the key still holds the job that ran (the script or a client may have
//! replaced or deleted it meanwhile). Each run publishes KeyDB's keyspace
//! event `CRON Executed` (keyevent class: `notify-keyspace-events E`).

use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use super::conn::Worker;
use super::Server;
use crate::core::client::ClientState;
use crate::keyspace::cron::CronJob;
use crate::keyspace::hlc::unix_ms;
use crate::keyspace::{Value, SHARDS};

/// Worker 0's part: runs what is due.
pub(crate) fn run_due(srv: &Arc<Server>, worker: &Worker) {
    let sched = &srv.core.cron;
    if srv.repl.is_replica() {
        if sched.scanned.load(Acquire) || !sched.is_empty() {
            sched.reset();
        }
        return;
    }
    // Start-up's load is still filling the keyspace: a scan now would
    // mark it scanned and miss the jobs an RDB brings after (an AOF's
    // KEYDB.CRON records schedule themselves; an RDB's keys do not).
    if srv.persist.loading.active() {
        return;
    }
    let paused = srv.pause_until_ms.load(Relaxed);
    if paused != 0 && unix_ms() < paused {
        return;
    }
    // A script past its threshold holds shards: worker 0 must go on
    // answering its clients (BUSY), not wait behind it; due jobs run later.
    if srv.scripts.busy.any() {
        return;
    }
    if !sched.scanned.swap(true, AcqRel) && !scan(srv) {
        sched.scanned.store(false, Release);
    }
    let now = unix_ms();
    for (db, key) in sched.take_due(now) {
        let job = match try_job_at(srv, db, &key) {
            Ok(Some(job)) => job,
            Ok(None) => continue,
            Err(Held) => {
                sched.add(db, &key, now); // next tick
                continue;
            }
        };
        if job.next_ms > now {
            sched.add(db, &key, job.next_ms);
            continue;
        }
        if srv.core.active && job.owner != 0 && job.owner != srv.core.node_id {
            // Another node's: its rewrite of the job brings the next run.
            continue;
        }
        run(srv, worker, db, &key, &job, now);
    }
}

/// Every job in the keyspace, into the schedule; false where a shard was
/// held (a script, an EXEC), to scan again at the next tick. Shards are
/// only tried: worker 0's cron runs on a thread that serves clients, which
/// would wait behind a long script holding them and answer nobody, not
/// even BUSY (found by `busy_scripts_get_busy_replies_and_can_be_killed`,
/// whose script started before the first tick on a loaded machine).
fn scan(srv: &Server) -> bool {
    let ks = &srv.core.keyspace;
    let mut all = true;
    for db in 0..ks.num_dbs() {
        for shard in 0..SHARDS {
            let Some(g) = ks.db(db).try_lock(shard) else {
                all = false;
                continue;
            };
            for e in g.iter() {
                if let Value::Cron(j) = &e.value {
                    srv.core.cron.add(db, &e.key, j.next_ms);
                }
            }
        }
    }
    all
}

/// A shard held by someone else (see [`scan`]).
struct Held;

/// The job `key` holds in `db`, if it holds one; Held where its shard is.
fn try_job_at(srv: &Server, db: usize, key: &[u8]) -> Result<Option<CronJob>, Held> {
    let ks = &srv.core.keyspace;
    let slot = ks.slot(key);
    let g = ks.db(db).try_lock(slot.shard).ok_or(Held)?;
    Ok(job_in(&g, slot.hash, key))
}

/// The job `key` holds in `db`, if it holds one.
fn job_at(srv: &Server, db: usize, key: &[u8]) -> Option<CronJob> {
    let ks = &srv.core.keyspace;
    let slot = ks.slot(key);
    job_in(&ks.db(db).lock(slot.shard), slot.hash, key)
}

fn job_in(g: &crate::keyspace::Shard, hash: u64, key: &[u8]) -> Option<CronJob> {
    match g.get_raw(hash, key).map(|e| &e.value) {
        Some(Value::Cron(j)) => Some((**j).clone()),
        _ => None,
    }
}

fn run(srv: &Arc<Server>, worker: &Worker, db: usize, key: &[u8], job: &CronJob, now: u64) {
    let mut client = ClientState::new(0);
    client.db = db;
    let numkeys = job.keys.len().to_string();
    let mut argv: Vec<&[u8]> = vec![b"EVAL", &job.script, numkeys.as_bytes()];
    argv.extend(job.keys.iter().map(|k| &k[..]));
    argv.extend(job.args.iter().map(|a| &a[..]));
    let mut exec = |argv: &[&[u8]]| {
        let mut clock = worker.clock.borrow_mut();
        crate::commands::run_local(srv, &mut clock, &worker.stats, &mut client, argv)
    };
    if let Err(e) = exec(&argv) {
        crate::log_warning!(
            "KEYDB.CRON job '{}' (db {db}): its script failed: {e}",
            String::from_utf8_lossy(key)
        );
    }
    // KeyDB's event (a keyevent-class one: `E` enables it).
    use crate::commands::events::{class, notify_keyspace};
    notify_keyspace(&srv.core, db, class::KEYEVENT, "CRON Executed", key, 0);
    // Only the job that ran is deleted or moved on.
    if job_at(srv, db, key).as_ref() != Some(job) {
        return;
    }
    let r = if job.single {
        exec(&[b"DEL", key])
    } else {
        let mut next = job.clone();
        next.advance(now);
        let payload =
            crate::persistence::rdb::encode::dump_payload(&Value::Cron(Box::new(next)), false);
        exec(&[b"RESTORE", key, b"0", &payload, b"REPLACE"])
    };
    if let Err(e) = r {
        crate::log_warning!(
            "KEYDB.CRON job '{}' (db {db}): can't reschedule it: {e}",
            String::from_utf8_lossy(key)
        );
    }
}
