//! maxmemory: eviction and OOM replies (Redis's evict.c and the OOM check
//! of processCommand).
//!
//! Before each command, when `maxmemory` is set and the allocator's count
//! (`alloc::allocated_bytes`, INFO's used_memory) is over it, [`admit`]
//! evicts keys by `maxmemory-policy` until memory is under the limit or the
//! time budget (`maxmemory-eviction-tenacity`) runs out. If nothing can be
//! evicted (noeviction, or no key qualifies) memory stays over the limit and
//! commands flagged `denyoom` get Redis's OOM error, as does an EXEC whose
//! transaction holds one (answered with EXECABORT, the transaction dropped).
//! Commands that do not grow memory (reads, DEL) always run.
//!
//! Victims are chosen as Redis approximates LRU/LFU: sample
//! `maxmemory-samples` keys from random shards of databases that have keys
//! and evict the best of them (idlest, least frequently used, soonest to
//! expire, or any). Redis also keeps a pool of good candidates between
//! rounds; we sample afresh each time, which is a little less precise.
//! An evicted key is propagated as DEL, notified as `evicted`, breaks
//! WATCH, invalidates client-side caches and counts in INFO's evicted_keys
//! (`gone.rs`, shared with expiry).

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::collscan::rand_u64;
use super::flags::DENYOOM;
use super::gone::{key_gone, to_stream, Gone, Why};
use super::CmdError;
use crate::core::stats::WorkerStats;
use crate::core::Core;
use crate::keyspace::hlc::Hlc;
use crate::keyspace::{Entry, Key, SHARDS};

pub(crate) use crate::core::eviction::Policy;

/// Redis's OOM error.
pub(crate) fn oom_error() -> CmdError {
    CmdError::Msg("OOM command not allowed when used memory > 'maxmemory'.".into())
}

/// Whether used memory is over `maxmemory` (Redis's
/// pre_command_oom_state after the command's eviction): a script that
/// starts then may not grow memory until it has written.
pub(crate) fn over_maxmemory(srv: &Core) -> bool {
    let limit = srv.hot.maxmemory.load(Relaxed);
    limit != 0 && used_memory() > limit
}

/// Bytes used, as eviction counts them: the allocator's count (0, so no
/// eviction, in a build without the counting allocator) less the pushes
/// on their way to other connections (`client::PushBuf`: an evicted key's
/// invalidations must not evict more keys).
fn used_memory() -> u64 {
    let pushes = crate::core::client::pushes_in_flight() as u64;
    crate::alloc::allocated_bytes().map_or(0, |b| b.saturating_sub(pushes))
}

/// The maxmemory check before client `current`'s command: evicts if over
/// the limit, and refuses a call with `flags` that would grow memory when
/// that is not enough (an EXEC's flags hold its queued commands').
pub(crate) fn admit(
    srv: &Core,
    clock: &mut Hlc,
    stats: &WorkerStats,
    current: u64,
    flags: u32,
) -> Result<(), CmdError> {
    let limit = srv.hot.maxmemory.load(Relaxed);
    if limit == 0 || used_memory() <= limit || evict(srv, clock, stats, current, limit) {
        return Ok(());
    }
    if flags & DENYOOM != 0 {
        return Err(oom_error());
    }
    Ok(())
}

/// Evicts now if memory is over `maxmemory` (after CONFIG SET). Not inside
/// EXEC: as Redis, a transaction runs whole and eviction waits for the next
/// command (and its DELs follow the transaction in the effect stream).
pub(crate) fn evict_if_over(ctx: &mut super::Ctx) {
    if ctx.client.in_exec {
        return;
    }
    let limit = ctx.core.hot.maxmemory.load(Relaxed);
    if limit != 0 && used_memory() > limit {
        evict(ctx.core, ctx.clock, ctx.stats, ctx.client.id, limit);
    }
}

/// Evicts keys until memory is under `limit`, for client `current`; false
/// if it runs out of keys to evict first. Running out of time counts as
/// success (Redis's EVICT_RUNNING: the next command continues).
fn evict(srv: &Core, clock: &mut Hlc, stats: &WorkerStats, current: u64, limit: u64) -> bool {
    let cfg = &srv.hot.eviction;
    let policy = cfg.policy();
    if policy == Policy::NoEviction {
        return false;
    }
    let start = Instant::now();
    let budget = cfg.budget();
    let dbs = dbs_with_keys(srv, policy);
    loop {
        let Some((db, key)) = pick_victim(srv, policy, &dbs) else {
            return false; // nothing (more) to evict, still over the limit
        };
        evict_key(srv, clock, stats, current, db, &key);
        if used_memory() <= limit || start.elapsed() >= budget {
            return true;
        }
    }
}

/// Databases holding keys the policy may evict. Finding out locks every
/// shard of the empty ones, so each thread keeps the answer for 100 ms
/// (a database that fills meanwhile waits that long to be sampled).
fn dbs_with_keys(srv: &Core, policy: Policy) -> Vec<usize> {
    thread_local! {
        static CACHE: std::cell::RefCell<Option<(Instant, Policy, Vec<usize>)>> =
            const { std::cell::RefCell::new(None) };
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((at, p, dbs)) = c.as_ref() {
            if *p == policy && at.elapsed() < Duration::from_millis(100) && !dbs.is_empty() {
                return dbs.clone();
            }
        }
        let dbs = scan_dbs(srv, policy);
        *c = Some((Instant::now(), policy, dbs.clone()));
        dbs
    })
}

fn scan_dbs(srv: &Core, policy: Policy) -> Vec<usize> {
    let ks = &srv.keyspace;
    (0..ks.num_dbs())
        .filter(|&db| {
            let d = ks.db(db);
            (0..SHARDS).any(|s| {
                let g = d.lock(s);
                if policy.volatile_only() {
                    g.volatile_len() > 0
                } else {
                    !g.is_empty()
                }
            })
        })
        .collect()
}

/// The best of `maxmemory-samples` sampled keys, by the policy.
fn pick_victim(srv: &Core, policy: Policy, dbs: &[usize]) -> Option<(usize, Key)> {
    if dbs.is_empty() {
        return None;
    }
    let samples = srv.hot.eviction.samples.load(Relaxed);
    let now_lru = crate::commands::access::lru_clock(crate::keyspace::hlc::unix_ms());
    let decay = srv.hot.eviction.lfu_decay_time.load(Relaxed);
    let mut best: Option<(u64, usize, Key)> = None;
    for _ in 0..samples {
        // From a random shard of a random database, walk on to the next
        // shard holding a candidate: a sparse keyspace is still found (pure
        // random probes miss a lone key in 256 shards too often).
        let (db, start) = (dbs[rand_u64() as usize % dbs.len()], rand_u64() as usize);
        for i in 0..SHARDS {
            let g = srv.keyspace.db(db).lock((start + i) % SHARDS);
            let Some(e) = sample(&g, &srv.keyspace.hasher, policy) else {
                continue;
            };
            let score = match policy {
                Policy::AllKeysLru | Policy::VolatileLru => e.idle_secs(now_lru) as u64,
                Policy::AllKeysLfu | Policy::VolatileLfu => {
                    255 - e.lfu_decayed(now_lru, decay) as u64
                }
                Policy::VolatileTtl => u64::MAX - e.expire_at(),
                _ => rand_u64(),
            };
            if best.as_ref().is_none_or(|b| score > b.0) {
                best = Some((score, db, e.key.clone()));
            }
            break;
        }
    }
    best.map(|(_, db, key)| (db, key))
}

/// A candidate from one shard: a random key, or for volatile policies a key
/// with a TTL (the soonest to expire when random picks miss).
fn sample<'a>(
    g: &'a crate::keyspace::Shard,
    hasher: &crate::keyspace::KeyHasher,
    policy: Policy,
) -> Option<&'a Entry> {
    if g.is_empty() {
        return None;
    }
    if !policy.volatile_only() {
        return g.nth(rand_u64() as usize % g.len());
    }
    if g.volatile_len() == 0 {
        return None;
    }
    if policy != Policy::VolatileTtl {
        for _ in 0..4 {
            let e = g.nth(rand_u64() as usize % g.len())?;
            if e.expire_at() != 0 {
                return Some(e);
            }
        }
    }
    g.soonest_expiring(hasher)
}

/// Evicts `key` of `db` (if still there) while client `current` waits to
/// run its command.
fn evict_key(
    srv: &Core,
    clock: &mut Hlc,
    stats: &WorkerStats,
    current: u64,
    db: usize,
    key: &[u8],
) {
    let ks = &srv.keyspace;
    let slot = ks.slot(key);
    let mut g = ks.db(db).lock(slot.shard);
    let Some(old) = g.remove(&ks.hasher, slot.hash, key) else {
        return; // gone meanwhile
    };
    let (prev, stamp) = (
        old.version,
        super::gone::stamp_after(srv, clock, old.version),
    );
    if srv.active {
        g.set_tombstone(key, stamp);
    }
    super::gone::wake_stream_waiters(srv, db, &old);
    if srv.hot.eviction.lazy() {
        srv.lazyfree.free_entry(old);
    } else {
        drop(old);
    }
    // The rest under the shard lock, so the DEL is ordered with other
    // writes to the key in the effect stream. Other clients' caches are
    // invalidated at once, `current`'s ahead of its reply.
    let gone = Gone {
        core: srv,
        stats,
        client: current,
        now_ms: 0,
    };
    key_gone(
        &gone,
        Why::Evicted,
        db,
        key,
        to_stream(srv, db, stamp, prev),
    );
}

/// An access under an LFU policy: decay, then a logarithmic increment
/// (Redis's updateLFU / LFULogIncr), and the access time for the next decay.
pub(crate) fn lfu_touch(srv: &Core, e: &mut Entry, now_lru: u32) {
    let cfg = &srv.hot.eviction;
    let mut c = e.lfu_decayed(now_lru, cfg.lfu_decay_time.load(Relaxed));
    if c < 255 {
        let base = c.saturating_sub(5) as f64;
        let p = 1.0 / (base * cfg.lfu_log_factor.load(Relaxed) as f64 + 1.0);
        let r = (rand_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if r < p {
            c += 1;
        }
    }
    e.set_lfu(c);
    e.set_lru(now_lru);
}
