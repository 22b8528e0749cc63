//! One path for "a key is gone": a key removed because its expiry passed
//! (lazily, by the command that found it due, or actively, by the cron) or
//! because it was evicted under `maxmemory`.
//!
//! Each of the three removes the entry and frees it (lazily or not) itself,
//! and calls [`key_gone`] for the rest, in Redis's order: the keyspace
//! event (`expired` / `evicted`), INFO's counters (`expired_keys` /
//! `evicted_keys`, and the dirty count), WATCH (the watchers' EXEC fails),
//! client-side caching (the readers are told), and last the DEL, or UNLINK
//! when the value is freed lazily, for the AOF and replicas (Redis's
//! propagateDeletion). Keep that order: Redis's suite depends on the event
//! coming before the record. Where the record goes differs (a command's
//! transaction buffer or held-back records, or straight to the effect
//! stream), so the caller says.

use std::sync::atomic::Ordering::Relaxed;

use super::events::{class, notify_keyspace};
use crate::core::stats::WorkerStats;
use crate::core::Core;
use crate::effects::EffectRef;
use crate::keyspace::hlc::Hlc;

/// Why a key went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// Its expiry passed (lazy or active expiry).
    Expired,
    /// Evicted under `maxmemory`.
    Evicted,
}

impl Why {
    /// DEL, or UNLINK when such a key's value is freed lazily
    /// (`lazyfree-lazy-expire`, `lazyfree-lazy-eviction`), as Redis
    /// propagates it.
    pub(crate) fn del_name(self, srv: &Core) -> &'static [u8] {
        let lazy = match self {
            Why::Expired => srv.hot.lazyfree_expire.load(Relaxed),
            Why::Evicted => srv.hot.eviction.lazy(),
        };
        if lazy {
            b"UNLINK"
        } else {
            b"DEL"
        }
    }
}

/// Where and on whose behalf a key went.
pub struct Gone<'a> {
    pub core: &'a Core,
    /// The counters of the worker that removed it.
    pub stats: &'a WorkerStats,
    /// The client whose command removed it (its own invalidation waits for
    /// its reply), or 0 (the cron).
    pub client: u64,
    /// The command's cached clock for the event, or 0 to read the clock if
    /// an event is published.
    pub now_ms: u64,
}

impl<'a> super::Ctx<'a> {
    /// This command, as the one during which a key went.
    pub(crate) fn gone(&self) -> Gone<'a> {
        Gone {
            core: self.core,
            stats: self.stats,
            client: self.client.id,
            now_ms: self.now_ms,
        }
    }
}

/// Everything that follows the removal of `key` of `db` (the entry already
/// gone from its shard, whose lock the caller still holds): see the module
/// doc. `emit` gets the DEL/UNLINK record last and sends it where the caller
/// sends records ([`to_stream`] for the cron and eviction).
pub(crate) fn key_gone(g: &Gone, why: Why, db: usize, key: &[u8], emit: impl FnOnce(&[&[u8]])) {
    let srv = g.core;
    match why {
        Why::Expired => {
            notify_keyspace(srv, db, class::EXPIRED, "expired", key, g.now_ms);
            g.stats.add_expired(1);
        }
        Why::Evicted => {
            notify_keyspace(srv, db, class::EVICTED, "evicted", key, g.now_ms);
            g.stats.add_evicted(1);
        }
    }
    g.stats.add_dirty(1);
    srv.watch.touch_expired(db, key);
    super::tracking::touch_expired(srv, g.client, key);
    emit(&[why.del_name(srv), key]);
}

/// Wakes the clients blocked on the key of `e`, gone from `db` by itself
/// (expiry, eviction) or by MOVE, when it was a stream: Redis's
/// dbGenericDelete signals a deleted stream, so a blocked XREADGROUP fails
/// with UNBLOCKED at once rather than at its timeout. A blocked XREAD re-runs
/// and keeps waiting, as with Redis.
pub(crate) fn wake_stream_waiters(core: &Core, db: usize, e: &crate::keyspace::Entry) {
    if matches!(e.value, crate::keyspace::Value::Stream(_)) && !core.blocking.is_empty() {
        core.blocking.signal(db, &e.key);
    }
}

/// The stamp of the deletion of a key whose version was `prev`: after it
/// (and, under active replication, after the node's stamp floor), so that
/// the deletion wins over the write it undoes on every node.
pub(crate) fn stamp_after(core: &Core, clock: &mut Hlc, prev: u64) -> u64 {
    let now = crate::keyspace::hlc::unix_ms();
    if !core.active {
        return clock.after_at(prev, now);
    }
    let s = clock.after_at(prev.max(core.stamp_floor.load(Relaxed)), now);
    if crate::keyspace::hlc::stamp_ms(s) > now {
        core.stamp_floor.fetch_max(s, Relaxed);
    }
    s
}

impl super::Ctx<'_> {
    /// [`stamp_after`] within a command (its cached clock).
    pub(crate) fn deletion_stamp(&mut self, prev: u64) -> u64 {
        if self.core.active {
            self.active_stamp_after(prev)
        } else {
            self.clock.after_at(prev, self.now_ms)
        }
    }
}

/// The bases of a DEL record for a key gone by itself (its name is the
/// record's argument 1): under active replication a peer deletes it only
/// where it still has the version that expired or was evicted here.
pub(crate) fn bases(core: &Core, prev: u64) -> Vec<crate::effects::Base> {
    if core.active {
        vec![(1, prev)]
    } else {
        vec![]
    }
}

/// What follows the active expiry cycle's removal of `e` from `db` (the
/// server's cron, and tests that run the cycle): everything [`key_gone`]
/// does, the DEL stamped after the key's version, the value freed lazily
/// if so configured; returns the tombstone to leave under active
/// replication.
pub fn actively_expired(
    g: &Gone,
    clock: &mut Hlc,
    db: usize,
    e: crate::keyspace::Entry,
) -> Option<crate::keyspace::Tombstone> {
    let core = g.core;
    let stamp = stamp_after(core, clock, e.version);
    wake_stream_waiters(core, db, &e);
    key_gone(
        g,
        Why::Expired,
        db,
        &e.key,
        to_stream(core, db, stamp, e.version),
    );
    let tomb = core.active.then(|| (e.key.to_vec(), stamp));
    if core.hot.lazyfree_expire.load(Relaxed) {
        core.lazyfree.free_entry(e);
    }
    tomb
}

/// An `emit` for [`key_gone`] outside a command (the cron, eviction): the
/// record goes straight to the effect stream, stamped `stamp`, if any
/// stream is on; `prev` is the version the key had.
pub(crate) fn to_stream(
    srv: &Core,
    db: usize,
    stamp: u64,
    prev: u64,
) -> impl FnOnce(&[&[u8]]) + '_ {
    move |argv| {
        if srv.effects.enabled() {
            let bases = bases(srv, prev);
            srv.effects.emit(&EffectRef {
                db,
                version: stamp,
                argv,
                bases: &bases,
                facts: &[],
            });
        }
    }
}

/// Everything that follows the removal of members whose TTLs passed
/// (`keyspace/member_ttl.rs`; the members already gone from the value,
/// the shard still locked): where the last member went, the key is gone
/// as an expired key is ([`key_gone`]: "expired", DEL); otherwise the
/// collection's own event ("hexpired" for a hash, as Redis 7.4; "srem" /
/// "zrem" for sets and sorted sets), the dirty count, WATCH and tracking,
/// and last the HDEL / SREM / ZREM of those members for the AOF and
/// replicas, which never expire members themselves.
pub(crate) fn members_gone(
    g: &Gone,
    db: usize,
    m: &crate::keyspace::member_ttl::MembersGone,
    emit: impl FnOnce(&[&[u8]]),
) {
    if m.emptied.is_some() {
        return key_gone(g, Why::Expired, db, &m.key, emit);
    }
    let srv = g.core;
    let (name, cls, event): (&[u8], u32, &str) = match m.kind {
        "hash" => (b"HDEL", class::HASH, "hexpired"),
        "set" => (b"SREM", class::SET, "srem"),
        _ => (b"ZREM", class::ZSET, "zrem"),
    };
    notify_keyspace(srv, db, cls, event, &m.key, g.now_ms);
    g.stats.add_dirty(1);
    srv.watch.touch_expired(db, &m.key);
    super::tracking::touch_expired(srv, g.client, &m.key);
    let mut argv: Vec<&[u8]> = vec![name, &m.key];
    argv.extend(m.members.iter().map(|x| &**x));
    emit(&argv);
}

/// The active cycle's [`members_gone`] (the server's cron): the records
/// stamped after the key's version; returns that stamp (the key's new
/// version) and whether an emptied key leaves a tombstone (active
/// replication).
pub(crate) fn members_actively_expired(
    g: &Gone,
    clock: &mut Hlc,
    db: usize,
    m: &crate::keyspace::member_ttl::MembersGone,
) -> (u64, bool) {
    let core = g.core;
    let stamp = stamp_after(core, clock, m.prev);
    if let Some(e) = &m.emptied {
        wake_stream_waiters(core, db, e);
    }
    members_gone(g, db, m, to_stream(core, db, stamp, m.prev));
    (stamp, core.active)
}
