//! Per-worker periodic work (Redis's serverCron, split across threads):
//! the active expiry cycle over the worker's shards, ending CLIENT PAUSE,
//! and the subsystems' own (`hooks.rs`).

use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::conn::Worker;
use super::Server;
use crate::commands::gone::{actively_expired, members_actively_expired, Gone};
use crate::keyspace::expire::active_expire_cycle;
use crate::keyspace::hlc::unix_ms;

pub(crate) async fn worker_cron(
    srv: Arc<Server>,
    worker: Rc<Worker>,
    index: usize,
    nworkers: usize,
) {
    let mut more_due = false;
    loop {
        let hz = srv.hot.hz.load(Relaxed).max(1);
        let period = Duration::from_micros(1_000_000 / hz);
        // While keys remain due, come back sooner (Redis's fast cycle).
        let wait = if more_due { period / 10 } else { period };
        tokio::time::sleep(wait).await;
        worker.sync_wall_clock();
        if srv.hot.cron_paused.load(Relaxed) {
            continue; // DEBUG PAUSE-CRON (Redis's serverCron returns at once)
        }
        if index == 0 {
            // Client eviction: figures pushes left unpublished, and limits.
            srv.clients.book.republish_all();
            end_pause_if_due(&srv);
            super::cron_jobs::run_due(&srv, &worker);
            crate::commands::tracking::cron(&srv);
            super::info::sample_rates(&srv);
            expire_replica_keys(&srv, &worker);
            super::sync_files::cron(&srv);
        }
        super::hooks::cron(&srv, index);
        if !srv.hot.active_expire.load(Relaxed) || !super::hooks::expires_keys(&srv) {
            continue;
        }
        // No key expires while CLIENT PAUSE holds writes (Redis skips the
        // cycle then; reads see such keys as missing, `commands/access.rs`).
        let paused_until = srv.pause_until_ms.load(Relaxed);
        if paused_until != 0 && unix_ms() < paused_until {
            continue;
        }
        let budget = period / 4;
        // Expired by no client's command; each event reads the clock.
        let gone = Gone {
            core: &srv,
            stats: &worker.stats,
            client: 0,
            now_ms: 0,
        };
        let started = std::time::Instant::now();
        let st = active_expire_cycle(
            &srv.keyspace,
            index,
            nworkers,
            unix_ms(),
            budget,
            |db, e| actively_expired(&gone, &mut worker.clock.borrow_mut(), db, e),
            |db, m| members_actively_expired(&gone, &mut worker.clock.borrow_mut(), db, m),
        );
        srv.latency_event("expire-cycle", started.elapsed().as_millis() as u64);
        more_due = st.more_due;
        crate::commands::tracking::flush_bcast(&srv);
    }
}

fn end_pause_if_due(srv: &Server) {
    let until = srv.pause_until_ms.load(Relaxed);
    if until != 0 && unix_ms() >= until {
        srv.pause_until_ms.store(0, Relaxed);
        srv.unpaused.notify_waiters();
    }
}

/// A replica's own cycle: the keys its own clients gave a TTL (a writable
/// replica), which its master knows nothing of (Redis's expireSlaveKeys);
/// a master forgets them, its cycle covers every key.
fn expire_replica_keys(srv: &Server, worker: &Worker) {
    let keys = &srv.replica_keys;
    if keys.is_empty() || !srv.hot.active_expire.load(Relaxed) {
        return;
    }
    if super::hooks::expires_keys(srv) {
        return keys.clear();
    }
    let gone = Gone {
        core: srv,
        stats: &worker.stats,
        client: 0,
        now_ms: 0,
    };
    let clock = &mut worker.clock.borrow_mut();
    keys.expire_due(&srv.keyspace, unix_ms(), 1000, |db, e| {
        actively_expired(&gone, clock, db, e);
    });
}
