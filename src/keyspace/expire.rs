//! The active expiry cycle.
//!
//! Lazy expiry (on access, in `Shard::lookup`) frees keys that are touched;
//! this cycle frees the rest. Each worker thread runs it `hz` times a second
//! over its own subset of shards (shard index modulo the worker count), so
//! expiry work is spread over every core and never contends with itself.
//!
//! Because each shard indexes its volatile keys by expiry time, the cycle
//! removes due keys in order and never scans keys that are not due. A cycle
//! stops when its time budget (25% of the cycle period, as Redis's slow cycle)
//! is spent; whatever is left is taken by the next cycle, which is scheduled
//! sooner (Redis's fast cycle) while keys remain due. Memory held by expired
//! keys is thus bounded by what arrives between cycles.

use std::time::{Duration, Instant};

use super::{Entry, Keyspace, SHARDS};

/// Keys removed per shard between two clock checks.
const BATCH: usize = 64;

/// Outcome of one cycle.
#[derive(Debug, Default, Clone, Copy)]
pub struct CycleStats {
    pub expired: usize,
    /// Whether due keys remain (the budget ran out).
    pub more_due: bool,
}

/// Runs one cycle over shards `worker, worker + nworkers, ...` of every db.
/// `on_expired(db, entry)` is called for each removed key, under its shard
/// lock, so the caller can propagate the deletion in order.
pub fn active_expire_cycle(
    ks: &Keyspace,
    worker: usize,
    nworkers: usize,
    now_ms: u64,
    budget: Duration,
    mut on_expired: impl FnMut(usize, Entry),
) -> CycleStats {
    let start = Instant::now();
    let mut st = CycleStats::default();
    for db in 0..ks.num_dbs() {
        let d = ks.db(db);
        let mut shard = worker % nworkers.max(1);
        while shard < SHARDS {
            loop {
                let mut g = d.lock(shard);
                if g.volatile_len() == 0 {
                    break;
                }
                let (n, more) = g.expire_due(&ks.hasher, now_ms, BATCH, |e| on_expired(db, e));
                drop(g);
                st.expired += n;
                if !more {
                    break;
                }
                if start.elapsed() >= budget {
                    st.more_due = true;
                    return st;
                }
            }
            shard += nworkers.max(1);
        }
    }
    st
}
