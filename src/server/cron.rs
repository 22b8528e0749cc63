//! Per-worker periodic work (Redis's serverCron, split across threads):
//! the active expiry cycle over the worker's shards, ending CLIENT PAUSE,
//! and the subsystems' own (`hooks.rs`).

use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::conn::Worker;
use super::Server;
use crate::commands::events::class::EXPIRED;
use crate::keyspace::expire::active_expire_cycle;
use crate::keyspace::hlc::unix_ms;

pub async fn worker_cron(srv: Arc<Server>, worker: Rc<Worker>, index: usize, nworkers: usize) {
    let mut more_due = false;
    loop {
        let hz = srv.hot.hz.load(Relaxed).max(1);
        let period = Duration::from_micros(1_000_000 / hz);
        // While keys remain due, come back sooner (Redis's fast cycle).
        let wait = if more_due { period / 10 } else { period };
        tokio::time::sleep(wait).await;
        worker.sync_wall_clock();
        if index == 0 {
            end_pause_if_due(&srv);
            crate::commands::tracking::cron(&srv);
            super::info::sample_rates(&srv);
        }
        super::hooks::cron(&srv, index);
        if !srv.hot.active_expire.load(Relaxed) || !super::hooks::expires_keys(&srv) {
            continue;
        }
        let budget = period / 4;
        let mut clock = worker.clock.borrow_mut();
        let stats = &worker.stats;
        let st = active_expire_cycle(
            &srv.keyspace,
            index,
            nworkers,
            unix_ms(),
            budget,
            |db, e| {
                crate::commands::events::notify_keyspace(&srv, db, EXPIRED, "expired", &e.key, 0);
                stats.add_expired(1);
                stats.add_dirty(1);
                srv.watch.touch_expired(db, &e.key);
                crate::commands::tracking::touch_expired(&srv, 0, &e.key);
                if srv.effects.enabled() {
                    let v = clock.now();
                    srv.effects.emit(&crate::effects::EffectRef {
                        db,
                        version: v,
                        // UNLINK when freed lazily, as Redis propagates it.
                        argv: &[del_name(&srv), &e.key],
                    });
                }
                if srv.hot.lazyfree_expire.load(Relaxed) {
                    srv.lazyfree.free_entry(e);
                }
            },
        );
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

/// The command an expired key's deletion is propagated as.
fn del_name(srv: &Server) -> &'static [u8] {
    if srv.hot.lazyfree_expire.load(Relaxed) {
        b"UNLINK"
    } else {
        b"DEL"
    }
}
