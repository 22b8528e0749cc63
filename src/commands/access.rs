//! Locked access to the keys of one command.
//!
//! [`Ctx::open`] / [`Ctx::open_many`] lock the shards of the keys a command
//! names (in ascending shard order), apply lazy expiry to those keys
//! (propagating the deletion of any that were due), refresh their access
//! time, and return a [`Locked`] view through which the command reads and
//! writes them. The locks are released when the view is dropped, after the
//! command has propagated its effect.
//!
//! Inside EXEC the shards are already locked by the transaction
//! (`Keyspace::hold`, see `keyspace/held.rs` and `multi.rs`): the lock
//! requests made here then borrow those held locks (a `ShardGuard::Borrowed`
//! that unlocks nothing when dropped) instead of locking again, which would
//! deadlock since parking_lot mutexes are not reentrant. Handlers need not
//! know whether they run inside a transaction.

use std::sync::atomic::Ordering::Relaxed;

use super::events::{class, notify_keyspace};
use super::{CmdError, Ctx};
use crate::core::client::MASTER_LINK_ID;
use crate::core::Core;
use crate::keyspace::member_ttl::MemberTtls;
use crate::keyspace::merge::MergeType;
use crate::keyspace::{merge, Entry, Keyspace, Shard, ShardGuard, Slot, StrValue, Value};
use merge::lists::{Edit, EndOp};

enum Guards<'a> {
    One(usize, ShardGuard<'a>),
    Many(Vec<(usize, ShardGuard<'a>)>),
}

/// The locked shards of a command's keys in one database.
pub struct Locked<'a, 'k> {
    ks: &'a Keyspace,
    guards: Guards<'a>,
    /// LRU clock of the command, for entries it creates.
    lru: u32,
    /// The key given to [`Ctx::open`] and its slot, so that a command
    /// working on one key hashes it once.
    opened: Option<(&'k [u8], Slot)>,
    /// Set when `notify-keyspace-events` has the `n` class: a key created
    /// through this view publishes a "new" event (Redis's dbAdd does).
    new_key_event: Option<(&'a Core, usize)>,
    /// Set when locking expired a key whose DEL is held back: the records
    /// held are emitted when the view is dropped (`flush_deferred`).
    flush: Option<&'a Core>,
    /// Under active replication, the stamp a key removed through this view
    /// leaves as its tombstone (the command's stamp); 0 otherwise.
    tomb: u64,
    /// Set while clients are blocked on keys: a stream removed or replaced
    /// through this view wakes its waiters (Redis's dbGenericDelete and
    /// dbOverwrite signal a stream key), so XREADGROUP can report the key
    /// or group gone.
    ready: Option<(&'a Core, usize)>,
    /// While CLIENT PAUSE holds writes, expired keys are not deleted but
    /// read as missing (Redis's expireIfNeeded under a pause): the
    /// command's clock then, 0 otherwise.
    hide_expired: u64,
}

/// What lazy expiry does with a key it finds (`Ctx::expired_key_fate`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Not expired, or expired but live for the master's stream.
    Live,
    /// Expired and read as missing, but left in place.
    Hidden,
    /// Expired and deleted (the deletion propagated).
    Deleted,
}

/// Seconds-resolution LRU clock, as Redis's LRU_CLOCK (24 bits).
pub(crate) fn lru_clock(now_ms: u64) -> u32 {
    ((now_ms / 1000) & 0xFF_FFFF) as u32
}

impl<'a> Ctx<'a> {
    /// Locks the shard of `key` in the current database.
    pub fn open<'k>(&mut self, key: &'k [u8]) -> Locked<'a, 'k> {
        self.open_db(self.client.db, key)
    }

    pub fn open_db<'k>(&mut self, db: usize, key: &'k [u8]) -> Locked<'a, 'k> {
        let ks = &self.core.keyspace;
        let slot = ks.slot(key);
        let g = ks.db(db).lock(slot.shard);
        let lru = lru_clock(self.now_ms);
        let mut l = Locked {
            ks,
            guards: Guards::One(slot.shard, g),
            lru,
            opened: Some((key, slot)),
            new_key_event: self.new_key_event(db),
            flush: None,
            tomb: 0,
            ready: (!self.core.blocking.is_empty()).then_some((self.core, db)),
            hide_expired: 0,
        };
        let found = self.expire_if_due(&mut l, db, key, slot);
        if self.active.is_some() {
            let v = found.map_or_else(|| l.shard_mut(slot.shard).absent_version(key), |f| f.0);
            l.tomb = self.note_base(key, v);
            // The live entry's version, which `prepare_merge` need not
            // look up again (DECISIONS 199).
            if l.prepare_merge(key, found.filter(|f| f.1).map(|f| f.0)) {
                self.mark_merged(key);
            }
        }
        l
    }

    /// Locks the shards of all `keys` in the current database.
    pub fn open_many<'k>(
        &mut self,
        keys: impl IntoIterator<Item = &'k [u8]> + Clone,
    ) -> Locked<'a, 'k> {
        self.open_many_db(self.client.db, keys)
    }

    pub fn open_many_db<'k>(
        &mut self,
        db: usize,
        keys: impl IntoIterator<Item = &'k [u8]> + Clone,
    ) -> Locked<'a, 'k> {
        let ks = &self.core.keyspace;
        let mut idx: Vec<usize> = keys.clone().into_iter().map(|k| ks.slot(k).shard).collect();
        idx.sort_unstable();
        idx.dedup();
        let d = ks.db(db);
        let guards = idx.into_iter().map(|i| (i, d.lock(i))).collect();
        let lru = lru_clock(self.now_ms);
        let mut l = Locked {
            ks,
            guards: Guards::Many(guards),
            lru,
            opened: None,
            new_key_event: self.new_key_event(db),
            flush: None,
            tomb: 0,
            ready: (!self.core.blocking.is_empty()).then_some((self.core, db)),
            hide_expired: 0,
        };
        for k in keys.clone() {
            let slot = ks.slot(k);
            self.expire_if_due(&mut l, db, k, slot);
        }
        if self.active.is_some() {
            for k in keys {
                let slot = ks.slot(k);
                let v = l.shard_mut(slot.shard).version_of(slot.hash, k);
                l.tomb = self.note_base(k, v);
                if l.prepare_merge(k, None) {
                    self.mark_merged(k);
                }
            }
        }
        l
    }

    /// After a write removed elements from the collection at `key`: deletes
    /// the key if nothing is left, notifying "del" (Redis deletes empty
    /// collections).
    pub fn remove_if_empty(&mut self, l: &mut Locked, key: &[u8]) {
        if l.entry(key).is_some_and(|e| e.value.is_empty_collection()) {
            l.remove(key);
            self.notify(super::events::class::GENERIC, "del", key);
        }
    }

    /// Whether a CLIENT PAUSE is in force: no key is deleted by expiry then
    /// (a failover's replicas must see no write), as in Redis.
    pub fn expiry_paused(&self) -> bool {
        let until = self.core.pause_until_ms.load(Relaxed);
        until != 0 && self.now_ms < until
    }

    /// What lazy expiry does with a key found logically expired (Redis's
    /// expireIfNeeded). A plain replica leaves expiry to its master: the
    /// master's stream sees the key as it is, its own clients' reads do
    /// not see it, and only a write on a writable replica deletes it. A
    /// CLIENT PAUSE hides it; otherwise it is deleted.
    #[cold]
    fn expired_key_fate(&self) -> Fate {
        if !self.core.active && self.admin.is_replica() {
            if self.client.id == MASTER_LINK_ID {
                return Fate::Live;
            }
            if self.core.hot.replica_read_only.load(Relaxed) || !self.runs_write() {
                return Fate::Hidden;
            }
        }
        if self.expiry_paused() {
            return Fate::Hidden;
        }
        Fate::Deleted
    }

    /// Whether the command running is a write (Redis's LOOKUP_WRITE).
    fn runs_write(&self) -> bool {
        let Some(sent) = self.sent.filter(|a| !a.is_empty()) else {
            return false;
        };
        let table = &self.core.commands;
        let Some(mut id) = table.lookup(sent.get(0)) else {
            return false;
        };
        if table.has_subcommands(id) && sent.len() > 1 {
            id = table.lookup_sub(id, sent.get(1)).unwrap_or(id);
        }
        table.get(id).is_write()
    }

    fn new_key_event(&self, db: usize) -> Option<(&'a Core, usize)> {
        let on = self.core.hot.notify_keyspace_events.load(Relaxed) & class::NEW != 0;
        on.then_some((self.core, db))
    }

    /// Lazy expiry of `key`, or else an access-time refresh; returns the
    /// version of the entry left there, if any, and whether it is the
    /// entry's as found (true), not a deletion's or a member expiry's.
    fn expire_if_due(
        &mut self,
        l: &mut Locked<'a, '_>,
        db: usize,
        key: &[u8],
        slot: Slot,
    ) -> Option<(u64, bool)> {
        let now = self.now_ms;
        let lru = l.lru;
        let ks = l.ks;
        let shard = l.shard_mut(slot.shard);
        let member_ttls = shard.has_member_ttls();
        let mut e = shard.find_mut(slot.hash, key)?;
        // A replayed effect stream carries the deletions of expired keys
        // itself (as Redis replicas and AOF loading do not expire keys).
        let due = e.is_expired(now) && self.replay_version.is_none();
        let fate = if due {
            self.expired_key_fate()
        } else {
            Fate::Live
        };
        if fate == Fate::Hidden {
            l.hide_expired = now;
            return None;
        }
        if fate == Fate::Deleted {
            let prev = e.version;
            let stamp = self.deletion_stamp(prev);
            let old = shard.remove(&ks.hasher, slot.hash, key);
            if self.core.active {
                shard.set_tombstone(key, stamp);
            }
            if let Some(e) = &old {
                super::gone::wake_stream_waiters(self.core, db, e);
            }
            if let Some(old) = old.filter(|_| self.core.hot.lazyfree_expire.load(Relaxed)) {
                self.core.lazyfree.free_entry(old);
            }
            if self.propagate_expired_deferred(db, key, stamp, prev) {
                l.flush = Some(self.core);
            }
            return Some((stamp, false)).filter(|_| self.core.active);
        }
        if member_ttls {
            // A replica keeps due members until its master's removals
            // arrive (replicas never expire members themselves).
            let paused =
                self.replay_version.is_some() || self.expiry_paused() || self.admin.is_replica();
            if !paused && shard.members_due(key, now) {
                return self
                    .expire_members_now(l, db, key, slot)
                    .map(|v| (v, false));
            }
            // Found again only here: a second lookup on every open cost
            // ~100 instructions a command (bench/instructions.sh).
            e = shard.find_mut(slot.hash, key)?;
        }
        if !self.client.no_touch {
            // An LFU policy counts accesses, with or without a maxmemory.
            if self.core.hot.eviction.policy().is_lfu() {
                super::evict::lfu_touch(self.core, e, lru);
            } else {
                e.set_lru(lru);
            }
        }
        Some((e.version, true))
    }
}

impl<'a> Ctx<'a> {
    /// Lazy member expiry (`keyspace/member_ttl.rs`): removes `key`'s due
    /// members, as a key found due is removed, and propagates their
    /// removal at once; returns the version of the entry left, if
    /// any, as [`Self::expire_if_due`] does.
    fn expire_members_now(
        &mut self,
        l: &mut Locked<'a, '_>,
        db: usize,
        key: &[u8],
        slot: Slot,
    ) -> Option<u64> {
        let (now, ks) = (self.now_ms, l.ks);
        let shard = l.shard_mut(slot.shard);
        let Some(gone) = shard.expire_members(&ks.hasher, slot.hash, key, now) else {
            return shard.get_raw(slot.hash, key).map(|e| e.version);
        };
        let stamp = self.deletion_stamp(gone.prev);
        let shard = l.shard_mut(slot.shard);
        let left = match &gone.emptied {
            Some(_) => {
                if self.core.active {
                    shard.set_tombstone(key, stamp);
                }
                self.core.active.then_some(stamp)
            }
            None => shard.find_mut(slot.hash, key).map(|e| {
                e.version = stamp;
                stamp
            }),
        };
        self.propagate_members_expired(db, &gone, stamp);
        left
    }
}

impl Drop for Locked<'_, '_> {
    /// Emits the records held back since locking expired a key, before the
    /// shard locks go (they are released after this, with the fields).
    fn drop(&mut self) {
        if let Some(srv) = self.flush {
            super::flush_deferred(srv);
        }
    }
}

impl Locked<'_, '_> {
    /// The key's slot, reusing the opened key's when it is the same slice.
    #[inline]
    fn slot(&self, key: &[u8]) -> Slot {
        if let Some((k, slot)) = self.opened {
            // `k` is still borrowed, so the same address and length mean the same bytes.
            if std::ptr::eq(k, key) {
                return slot;
            }
        }
        self.ks.slot(key)
    }

    /// The locked shard `shard`. A key outside the locked shards is a bug in
    /// the handler (it named a key it did not open): checked in every build,
    /// it panics rather than touch a shard this view does not hold (see
    /// docs/DECISIONS.md, "The wrong-shard check").
    fn shard_mut(&mut self, shard: usize) -> &mut Shard {
        match &mut self.guards {
            Guards::One(i, g) => {
                if *i != shard {
                    outside_locked_shards(shard);
                }
                g
            }
            Guards::Many(v) => match v.binary_search_by_key(&shard, |g| g.0) {
                Ok(i) => &mut v[i].1,
                Err(_) => outside_locked_shards(shard),
            },
        }
    }

    /// The live entry of `key` (expired keys were removed when locking, or
    /// are hidden during a CLIENT PAUSE).
    pub fn entry(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let slot = self.slot(key);
        let hide = self.hide_expired;
        let shard = self.shard_mut(slot.shard);
        shard_find(shard, slot.hash, key).filter(|e| hide == 0 || !e.is_expired(hide))
    }

    /// `member`'s deadline in the collection at `key` (`member_ttl.rs`).
    pub fn member_ttl(&mut self, key: &[u8], member: &[u8]) -> Option<u64> {
        let slot = self.slot(key);
        self.shard_mut(slot.shard).member_ttl(key, member)
    }

    /// Sets `member`'s deadline in the collection at `key` (both present).
    pub fn set_member_ttl(&mut self, key: &[u8], member: &[u8], at: u64) {
        let slot = self.slot(key);
        self.shard_mut(slot.shard)
            .set_member_ttl(slot.hash, key, member, at);
    }

    /// Takes `key`'s member TTLs out (RENAME puts them back under the
    /// new name with [`Self::put_member_ttls`]).
    pub fn take_member_ttls(&mut self, key: &[u8]) -> Option<Box<MemberTtls>> {
        let slot = self.slot(key);
        self.shard_mut(slot.shard).take_member_ttls(slot.hash, key)
    }

    pub fn put_member_ttls(&mut self, key: &[u8], t: Box<MemberTtls>) {
        let slot = self.slot(key);
        self.shard_mut(slot.shard)
            .put_member_ttls(slot.hash, key, t);
    }

    /// Clears the TTLs of `members` of `key` (a write that removed or
    /// replaced them: HSET, HDEL, SREM, ZREM). Cheap where no key of the
    /// shard has member TTLs.
    pub fn clear_member_ttls<'m>(&mut self, key: &[u8], members: impl Iterator<Item = &'m [u8]>) {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        if shard.member_ttls(key).is_none() {
            return;
        }
        for m in members {
            shard.clear_member_ttl(slot.hash, key, m);
        }
    }

    /// Clears `member`'s TTL in `key`; returns whether it had one.
    pub fn clear_member_ttl(&mut self, key: &[u8], member: &[u8]) -> bool {
        let slot = self.slot(key);
        self.shard_mut(slot.shard)
            .clear_member_ttl(slot.hash, key, member)
    }

    /// Active replication: counts an increment of `by` to the counter at
    /// `key` (`keyspace/merge.rs`), made by the node of `version`'s slot.
    /// `prev` is the key's version before the write and `before` what its
    /// value was then: a counter older than `prev` reads as reset there.
    pub fn count_increment(
        &mut self,
        key: &[u8],
        (prev, before): (u64, merge::Base),
        by: merge::Incr,
        version: u64,
        facts: Option<&mut Vec<crate::effects::Fact>>,
    ) {
        use merge::fact::{PREV, RESET, SHIFT};
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        // The increment's fact (keyspace/merge/fact.rs): the key is
        // argument 1 of INCR, INCRBY, DECR and DECRBY, and of INCRBYFLOAT's
        // record (the SET of its result), whose increment goes in the
        // fact's words. A key with a TTL has facts too where TTL facts are
        // on: a counter's TTL is its reset's (EXPIRE is a reset; an
        // increment keeps the TTL), and a peer applies the increment only
        // where its reset is the fact's or newer (DECISIONS 230). (Read
        // only where a fact is wanted.)
        let ttl_facts = merge::fact::TTL_FACTS;
        let facts = facts.filter(|_| {
            ttl_facts || (shard.get_raw(slot.hash, key)).is_none_or(|e| e.expire_at() == 0)
        });
        let c = shard.counter_at(key, prev, before);
        if let (Some(facts), Some((p, r))) = (facts, c.fact_base(version)) {
            facts.extend([(PREV | (1 << SHIFT), p), (RESET | (1 << SHIFT), r)]);
            if let merge::Incr::Float(f) = by {
                merge::fact::float_words(f, facts);
            }
        }
        c.add(crate::keyspace::hlc::stamp_node(version), by, version);
    }

    /// Active replication, before PFADD or PFMERGE writes the sketch at
    /// `key`: its merge state brought up to the key's version (a write since
    /// it was read that changed the registers is found a reset now, before
    /// this write changes them: `keyspace/merge/hll.rs`).
    pub fn prepare_sketch(&mut self, key: &[u8]) {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        if (shard.merge_meta(key)).is_some_and(|m| m.get::<merge::hll::Hll>().is_some()) {
            shard.merge_meta_now(slot.hash, key);
        }
    }

    /// Active replication: PFADD or PFMERGE stamped `version` grew the
    /// sketch at `key` ([`Self::prepare_sketch`] ran first): its merge state counts the write as growth, not a reset
    /// (`keyspace/merge/hll.rs`), so that concurrent PFADDs join by register
    /// maximum. A sketch with no state yet (written by SET, or before
    /// active replication), or a key with none, counts from its last write,
    /// `prev` (0 for a key never written: concurrent first PFADDs join).
    pub fn note_sketch_growth(&mut self, key: &[u8], prev: u64, version: u64) {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        let mut h = match shard.merge_meta(key).and_then(merge::Meta::get) {
            Some(h) => merge::hll::Hll::clone(h),
            None => merge::hll::Hll {
                version: prev,
                reset: prev,
                digest: 0,
                cc: Default::default(),
                ttl: Default::default(),
            },
        };
        let e = shard.get_raw(slot.hash, key);
        let (present, at) = e.map_or((false, 0), |e| (true, e.expire_at()));
        h.grew(version, e.map(|e| &e.value));
        h.ttl.refresh(version, present, at);
        shard.set_merge_meta(key, h.wrap());
    }

    /// Active replication, before a stream write at `key`: its merge state
    /// brought up to the key's version, made where it has none (what the
    /// key holds now is what this node has seen: `keyspace/merge/stream.rs`).
    pub fn prepare_stream(&mut self, key: &[u8]) -> merge::stream::Stream {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        let version = shard.version_of(slot.hash, key);
        let old = shard.merge_meta(key).and_then(merge::Meta::get);
        let e = shard.get_raw(slot.hash, key);
        let (present, at) = e.map_or((false, 0), |e| (true, e.expire_at()));
        let mut s = merge::stream::Stream::current(old, version, e.map(|e| &e.value));
        s.ttl.refresh(version, present, at);
        shard.set_merge_meta(key, s.clone().wrap());
        s
    }

    /// Active replication, before [`Self::prepare_stream`]: whether the
    /// stream state's TTL register at `key` gives the key's expiry (none
    /// where it has no TTL), so that a write's fact builds on a register
    /// its peers can hold too (DECISIONS 298; as a set's, 228).
    pub fn stream_ttl_noted(&mut self, key: &[u8]) -> bool {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        let at = shard.get_raw(slot.hash, key).map_or(0, |e| e.expire_at());
        let meta = shard.merge_meta(key).and_then(merge::Meta::get);
        meta.map_or(at == 0, |s: &merge::stream::Stream| s.ttl.at() == at)
    }

    /// Active replication: XADD stamped `stamp` added the entry `id` to the
    /// stream at `key` ([`Self::prepare_stream`] ran first; `made`: the
    /// XADD made the stream, whose count starts over): its merge state has
    /// seen it and counts it. The stream's `entries-added`,
    /// max-deleted-entry-id and last ID it gives (DECISIONS 195, 196).
    pub fn note_stream_add(
        &mut self,
        key: &[u8],
        id: crate::keyspace::stream::StreamId,
        (stamp, made): (u64, bool),
    ) -> (u64, [crate::keyspace::stream::StreamId; 2]) {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        let mut s: merge::stream::Stream = match shard.merge_meta(key).and_then(merge::Meta::get) {
            Some(s) => merge::stream::Stream::clone(s),
            None => Default::default(),
        };
        let e = shard.get_raw(slot.hash, key);
        let (present, at) = e.map_or((false, 0), |e| (true, e.expire_at()));
        s.added(crate::keyspace::hlc::stamp_node(stamp), id, (stamp, made));
        s.ttl.refresh(stamp, present, at);
        let given = (s.entries_added(), [s.deleted, s.last_id()]);
        shard.set_merge_meta(key, s.wrap());
        given
    }

    /// Active replication: after a consumer-group write left the stream at
    /// `key` at its version now ([`Self::prepare_stream`] ran before it):
    /// its groups' merge state dots what the write made or changed with
    /// that version (`keyspace/merge/groups.rs`).
    pub fn note_stream_groups(&mut self, key: &[u8]) {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        let version = shard.version_of(slot.hash, key);
        let Some(s) = shard.merge_meta(key).and_then(merge::Meta::get) else {
            return;
        };
        let mut s = merge::stream::Stream::clone(s);
        let e = shard.get_raw(slot.hash, key);
        let (present, at) = e.map_or((false, 0), |e| (true, e.expire_at()));
        s.noted_groups(e.map(|e| &e.value), version);
        s.ttl.refresh(version, present, at);
        let ids = (s.deleted, s.last_id());
        shard.set_merge_meta(key, s.wrap());
        // The value's max-deleted-entry-id and last ID are the state's (a
        // stream made anew keeps the old one's: DECISIONS 195, 196).
        if let Some(Value::Stream(v)) = self.entry(key).map(|e| &mut e.value) {
            (v.max_deleted, v.last_id) = ids;
        }
    }

    /// Active replication, before a write: a set, hash or sorted set gets
    /// its merge state if it has none yet (every member dotted with the
    /// key's version, the same on every node that holds that version:
    /// `keyspace/merge/elements.rs`), so that the write's changes are told
    /// apart from what was there. Whether the key merges.
    ///
    /// A collection's elements state is brought up to the key's version
    /// here too (usually a no-op: the writes that note their facts keep it
    /// so), so that the write's own changes can be noted against it
    /// ([`Ctx::note_members`]).
    ///
    /// `live`: the version of the key's entry, where the caller just read
    /// it (None: looked up here).
    pub fn prepare_merge(&mut self, key: &[u8], live: Option<u64>) -> bool {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        match shard.merge_meta(key) {
            None => {
                let e = shard.get_raw(slot.hash, key);
                if !e.is_some_and(|e| merge::merges_by_parts(&e.value)) {
                    return false;
                }
                shard.merge_meta_now(slot.hash, key);
            }
            // Not while a link applies a peer's write: it keeps the state
            // itself, ahead of the key's version until its writes are in.
            // (A variant pattern, not `Meta::get`: it tests the tag before
            // loading the box, 4 instructions a write fewer; DECISIONS 176.)
            Some(merge::Meta::Elements(e))
                if merge::fact::noting()
                    && e.version != live.unwrap_or_else(|| shard.version_of(slot.hash, key)) =>
            {
                shard.merge_meta_now(slot.hash, key);
            }
            Some(_) => {}
        }
        true
    }

    /// See [`Ctx::note_members`].
    pub fn note_elements(
        &mut self,
        key: &[u8],
        versions: (u64, u64),
        (named, present): (&[(u32, &[u8])], Option<u64>),
        facts: &mut Vec<crate::effects::Fact>,
    ) -> bool {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        shard.note_elements(slot.hash, key, versions, (1, named), facts, present)
    }

    /// Active replication: what the counter at `key` (`field` of the hash,
    /// or member of the sorted set, at `key`) reads, where a write stamped
    /// `stamp` counted it. A float counter's sum may differ from the
    /// command's `cur + incr` in the last digits (merge/mod.rs, "Float
    /// counters"): the origin writes the sum, so that its value never
    /// reads as a reset.
    pub fn counted(
        &mut self,
        key: &[u8],
        field: Option<&[u8]>,
        stamp: u64,
    ) -> Option<merge::Merged> {
        let slot = self.slot(key);
        let meta = self.shard_mut(slot.shard).merge_meta(key)?;
        let c = match field {
            None => meta.get::<merge::Counter>()?,
            Some(f) => meta.get::<merge::Elements>()?.counters.get(f)?,
        };
        (c.version == stamp).then(|| c.value())
    }

    /// See [`Ctx::count_field`].
    pub fn count_field(
        &mut self,
        key: &[u8],
        versions: (u64, u64),
        field: (Option<u32>, &[u8]),
        by: (merge::Incr, merge::Base),
        facts: &mut Vec<crate::effects::Fact>,
    ) -> Option<Option<merge::Merged>> {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        shard.count_field(slot.hash, key, versions, field, by, facts)
    }

    /// See [`Ctx::note_list_ends`].
    pub fn note_list_ends(
        &mut self,
        key: &[u8],
        versions: (u64, u64),
        ops: &[EndOp],
        facts: &mut Vec<crate::effects::Fact>,
    ) {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        shard.note_list_ends(slot.hash, key, versions, ops, facts);
    }

    /// See [`Ctx::note_list_edit`].
    pub fn note_list_edit(
        &mut self,
        key: &[u8],
        versions: (u64, u64),
        edit: &merge::lists::Edit,
        facts: &mut Vec<crate::effects::Fact>,
    ) {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        shard.note_list_edit(slot.hash, key, versions, edit, facts);
    }

    /// Active replication: a write named `members` of the collection at
    /// `key` as added or set (keyspace/merge/elements.rs, `touched`).
    pub fn touch_members<'m>(&mut self, key: &[u8], members: impl Iterator<Item = &'m [u8]>) {
        let slot = self.slot(key);
        self.shard_mut(slot.shard).touch_members(key, members);
    }

    /// See [`Shard::reprint_member`](crate::keyspace::Shard::reprint_member).
    pub fn reprint_member(&mut self, key: &[u8], m: &[u8], stamp: u64) {
        let slot = self.slot(key);
        self.shard_mut(slot.shard)
            .reprint_member(slot.hash, key, m, stamp);
    }

    /// See [`Shard::note_ttl`](crate::keyspace::Shard::note_ttl).
    pub fn note_ttl(
        &mut self,
        key: &[u8],
        versions: (u64, u64),
        expiries: (u64, u64),
        facts: &mut Vec<crate::effects::Fact>,
    ) -> bool {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        shard.note_ttl((slot.hash, key), versions, expiries, facts)
    }

    /// See [`Shard::note_member_ttls`](crate::keyspace::Shard::note_member_ttls).
    pub fn note_member_ttls(
        &mut self,
        key: &[u8],
        versions: (u64, u64),
        writes: &[(u32, &[u8], u64, u64)],
        facts: &mut Vec<crate::effects::Fact>,
    ) -> bool {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        shard.note_member_ttls((slot.hash, key), versions, writes, facts)
    }

    /// See [`Shard::note_counter_reset`](crate::keyspace::Shard::note_counter_reset).
    pub fn note_counter_reset(
        &mut self,
        key: &[u8],
        stamp: u64,
        facts: &mut Vec<crate::effects::Fact>,
    ) -> bool {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        shard.note_counter_reset(slot.hash, key, stamp, facts)
    }

    /// See [`Ctx::note_states`].
    pub fn note_state(
        &mut self,
        key: &[u8],
        arg: u32,
        facts: &mut Vec<crate::effects::Fact>,
    ) -> bool {
        let slot = self.slot(key);
        let shard = self.shard_mut(slot.shard);
        merge::deletes::note_state(shard, (slot.hash, key), (arg, dump_payload), facts)
    }

    /// The version of `key`, which has no entry (its tombstone's, or 0).
    pub fn absent_version(&mut self, key: &[u8]) -> u64 {
        let slot = self.slot(key);
        self.shard_mut(slot.shard).absent_version(key)
    }

    /// Whether `key` exists.
    pub fn exists(&mut self, key: &[u8]) -> bool {
        self.entry(key).is_some()
    }

    /// The string at `key`; WRONGTYPE if it holds another type.
    pub fn get_str(&mut self, key: &[u8]) -> Result<Option<&mut Entry>, CmdError> {
        match self.entry(key) {
            None => Ok(None),
            Some(e) => match e.value {
                Value::Str(_) => Ok(Some(e)),
                _ => Err(CmdError::WrongType),
            },
        }
    }

    /// The list at `key`; WRONGTYPE if it holds another type.
    pub fn get_list(&mut self, key: &[u8]) -> Result<Option<&mut Entry>, CmdError> {
        self.get_typed(key, |v| matches!(v, Value::List(_)))
    }

    /// The hash at `key`; WRONGTYPE if it holds another type.
    pub fn get_hash(&mut self, key: &[u8]) -> Result<Option<&mut Entry>, CmdError> {
        self.get_typed(key, |v| matches!(v, Value::Hash(_)))
    }

    /// The set at `key`; WRONGTYPE if it holds another type.
    pub fn get_set(&mut self, key: &[u8]) -> Result<Option<&mut Entry>, CmdError> {
        self.get_typed(key, |v| matches!(v, Value::Set(_)))
    }

    /// The sorted set at `key`; WRONGTYPE if it holds another type.
    pub fn get_zset(&mut self, key: &[u8]) -> Result<Option<&mut Entry>, CmdError> {
        self.get_typed(key, |v| matches!(v, Value::ZSet(_)))
    }

    fn get_typed(
        &mut self,
        key: &[u8],
        is: impl Fn(&Value) -> bool,
    ) -> Result<Option<&mut Entry>, CmdError> {
        match self.entry(key) {
            None => Ok(None),
            Some(e) if is(&e.value) => Ok(Some(e)),
            Some(_) => Err(CmdError::WrongType),
        }
    }

    /// Inserts or replaces `key`, returning the old entry.
    pub fn put(&mut self, key: &[u8], value: Value, expire_at: u64, version: u64) -> Option<Entry> {
        let slot = self.slot(key);
        let mut entry = Entry::new(key.into(), value, expire_at, version);
        entry.set_lru(self.lru);
        entry.set_lfu(5);
        self.insert(slot, entry)
    }

    /// Inserts or replaces a whole entry.
    pub fn put_entry(&mut self, entry: Entry) -> Option<Entry> {
        let slot = self.ks.slot(&entry.key);
        self.insert(slot, entry)
    }

    fn insert(&mut self, slot: Slot, entry: Entry) -> Option<Entry> {
        let ks = self.ks;
        let event = self.new_key_event.map(|ev| (ev, entry.key.clone()));
        let old = self
            .shard_mut(slot.shard)
            .insert(&ks.hasher, slot.hash, entry);
        if let (None, Some(((srv, db), key))) = (&old, event) {
            notify_keyspace(srv, db, class::NEW, "new", &key, 0);
        }
        self.stream_gone(old.as_ref());
        old
    }

    /// Wakes the clients blocked on a stream that was just removed or
    /// replaced (see `ready`).
    fn stream_gone(&self, old: Option<&Entry>) {
        if let (Some((core, db)), Some(e)) = (self.ready, old) {
            if matches!(e.value, Value::Stream(_)) {
                core.blocking.signal(db, &e.key);
            }
        }
    }

    /// Removes `key` (leaving a tombstone under active replication).
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let slot = self.slot(key);
        let ks = self.ks;
        let tomb = self.tomb;
        let shard = self.shard_mut(slot.shard);
        let old = shard.remove(&ks.hasher, slot.hash, key);
        if tomb != 0 && old.is_some() {
            shard.set_tombstone(key, tomb);
        }
        self.stream_gone(old.as_ref());
        old
    }

    /// Sets (`at > 0`) or clears (`at == 0`) the expiry of an existing key.
    pub fn set_expire(&mut self, key: &[u8], at: u64) -> bool {
        let slot = self.slot(key);
        let ks = self.ks;
        self.shard_mut(slot.shard)
            .set_expire(&ks.hasher, slot.hash, key, at)
    }

    /// Sets the version of an existing key.
    pub fn set_version(&mut self, key: &[u8], version: u64) {
        if let Some(e) = self.entry(key) {
            e.version = version;
        }
    }
}

/// A value's DUMP payload (a delete's or an overwrite's state,
/// keyspace/merge/deletes.rs).
fn dump_payload(v: &Value) -> Vec<u8> {
    crate::persistence::rdb::encode::dump_payload(v, false)
}

/// A handler reached for a key whose shard it did not lock.
#[cold]
#[inline(never)]
fn outside_locked_shards(shard: usize) -> ! {
    panic!(
        "key outside the locked shards (shard {shard}): the command must open every key it touches"
    );
}

#[inline]
fn shard_find<'s>(shard: &'s mut Shard, hash: u64, key: &[u8]) -> Option<&'s mut Entry> {
    shard.find_mut(hash, key)
}

/// Replaces a string entry's value in place, keeping its TTL.
pub(crate) fn set_str_keep_ttl(e: &mut Entry, v: StrValue, version: u64) {
    e.value = Value::Str(v);
    e.version = version;
}

/// The arguments from `from` on, every `step`th, with their indexes: the
/// members a write named, for [`Ctx::note_members`].
pub(crate) fn named_args<'a>(
    args: &'a crate::protocol::Args,
    from: usize,
    step: usize,
) -> NamedArgs<'a> {
    let mut named = NamedArgs {
        few: [(0, &[]); 4],
        n: 0,
        many: Vec::new(),
    };
    let all = (from..args.len())
        .step_by(step)
        .map(|i| (i as u32, args.get(i)));
    if all.len() <= named.few.len() {
        for (slot, a) in named.few.iter_mut().zip(all) {
            *slot = a;
            named.n += 1;
        }
    } else {
        named.many = all.collect();
    }
    named
}

/// [`named_args`]'s members: on the stack when a few (most writes name
/// one), so that noting them allocates nothing (an HSET's one allocation
/// a write, issue 24).
pub(crate) struct NamedArgs<'a> {
    few: [(u32, &'a [u8]); 4],
    n: usize,
    many: Vec<(u32, &'a [u8])>,
}

impl<'a> std::ops::Deref for NamedArgs<'a> {
    type Target = [(u32, &'a [u8])];

    fn deref(&self) -> &Self::Target {
        if self.many.is_empty() {
            &self.few[..self.n]
        } else {
            &self.many
        }
    }
}

impl Ctx<'_> {
    /// Active replication: where this write's merge fact goes (the
    /// write's buffer, keyspace/merge/fact.rs), or None where no fact is
    /// wanted: a link applying a peer's write, or a node whose writes no
    /// one records (a new node before its first peer, DECISIONS 177), so
    /// that a write there computes no fact only to drop it. The merge
    /// state follows the write all the same (DECISIONS 197).
    pub fn merge_facts(&mut self) -> Option<&mut Vec<crate::effects::Fact>> {
        let wanted = merge::fact::noting() && self.core.effects.enabled();
        self.active
            .as_mut()
            .filter(|_| wanted)
            .map(|a| &mut a.facts)
    }

    /// Active replication, after a write on `key`: `note` with the key's
    /// version before the write and the facts its record carries (a scratch
    /// list where no record wants them: the merge state follows all the
    /// same). Not while a link applies a peer's write (it keeps the state
    /// itself).
    pub fn note_fact(
        &mut self,
        key: &[u8],
        note: impl FnOnce(u64, &mut Vec<crate::effects::Fact>),
    ) {
        if !self.core.active || !merge::fact::noting() {
            return;
        }
        let Some(prev) = self.base_of(key) else {
            return;
        };
        let mut unwanted = Vec::new();
        note(prev, self.merge_facts().unwrap_or(&mut unwanted));
    }

    /// Active replication, after a write stamped `stamp` changed the set,
    /// hash or sorted set at `key` (argument 1): `named` are the members it
    /// added, set or removed (argument index, member). The key's merge
    /// state follows at once, in O(members named), and the write's record
    /// carries the fact a peer applies with no round trip
    /// (keyspace/merge/fact.rs). Where that cannot be (the link is
    /// applying a peer's write, or the state is not the key's), the members
    /// are noted as touched for the lazy path instead.
    pub fn note_members(&mut self, l: &mut Locked, key: &[u8], stamp: u64, named: &[(u32, &[u8])]) {
        self.note_members_present(l, key, stamp, (named, None));
    }

    /// [`Self::note_members`] of the set at `key` after SADD: every member
    /// named is in the set now (what SADD does, whether it added it or
    /// not), so none is looked up in the set again (DECISIONS 216).
    pub fn note_added(&mut self, l: &mut Locked, key: &[u8], stamp: u64, named: &[(u32, &[u8])]) {
        self.note_members_present(l, key, stamp, (named, Some(0)));
    }

    /// [`Self::note_members`]; `present`: every named member's fingerprint
    /// now, where the caller knows it (`Shard::note_elements`).
    fn note_members_present(
        &mut self,
        l: &mut Locked,
        key: &[u8],
        stamp: u64,
        (named, present): (&[(u32, &[u8])], Option<u64>),
    ) {
        // A link applying a peer's write stores the state it computed.
        if !self.core.active || !merge::fact::noting() {
            return;
        }
        let prev = self.base_of(key);
        let noted = prev.is_some_and(|prev| {
            let a = self.active.as_mut().expect("active write");
            l.note_elements(key, (prev, stamp), (named, present), &mut a.facts)
        });
        if !noted {
            l.touch_members(key, named.iter().map(|n| n.1));
        }
    }
}

impl Ctx<'_> {
    /// Active replication, after HINCRBY (HINCRBYFLOAT, ZINCRBY) stamped
    /// `stamp` added `by` to the field (member) at argument `index` of the
    /// hash (sorted set) at `key`, which read `before`: the field counts as
    /// a counter (keyspace/merge/elements.rs), so that increments on
    /// several nodes add up. Where the key's merge state is not the key's,
    /// the field is noted as touched (the lazy path, as a set).
    ///
    /// Returns, for a float increment, what [`Locked::counted`] reads
    /// after it (the counter's sum, to write), read here with no second
    /// lookup where the field was counted.
    pub fn count_field(
        &mut self,
        l: &mut Locked,
        key: &[u8],
        stamp: u64,
        (index, field): (u32, &[u8]),
        by: (merge::Incr, merge::Base),
    ) -> Option<merge::Merged> {
        let float = matches!(by.0, merge::Incr::Float(_));
        let counted = |l: &mut Locked| float.then(|| l.counted(key, Some(field), stamp))?;
        if !self.core.active || !merge::fact::noting() {
            return counted(l);
        }
        let prev = self.base_of(key);
        // The field's argument index only where a record carries the
        // write's fact: else no print of the field is made (DECISIONS 197).
        let index = self.core.effects.enabled().then_some(index);
        let noted = prev.and_then(|prev| {
            let a = self.active.as_mut().expect("active write");
            l.count_field(key, (prev, stamp), (index, field), by, &mut a.facts)
        });
        match noted {
            Some(value) => value,
            None => {
                l.touch_members(key, std::iter::once(field));
                counted(l)
            }
        }
    }

    /// Active replication, after a write stamped `stamp` that only pushed
    /// and popped at the ends of the list at `key`: its merge state is told
    /// which elements went and came (keyspace/merge/lists.rs, `Ends`), as
    /// no diff of equal values can tell.
    pub fn note_list_ends(&mut self, l: &mut Locked, key: &[u8], stamp: u64, ops: &[EndOp]) {
        if !self.core.active || !merge::fact::noting() {
            return;
        }
        if let Some(prev) = self.base_of(key) {
            let a = self.active.as_mut().expect("active write");
            l.note_list_ends(key, (prev, stamp), ops, &mut a.facts);
        }
    }

    /// Active replication, after a whole-key delete or overwrite (DEL,
    /// UNLINK, GETDEL, SPOP of the whole set, the *STOREs, RENAME) of the
    /// keys `written`, before the record `argv` that names them: the record
    /// carries each key's state now, which its peers join with no round
    /// trip (keyspace/merge/deletes.rs). False, no state carried, where one
    /// of them does not travel so (a stream, a sketch, a key with no merge
    /// state, states too big).
    pub fn note_states(&mut self, l: &mut Locked, argv: &[&[u8]], written: &[&[u8]]) -> bool {
        if !merge::fact::DELETE_FACTS {
            return false;
        }
        let Some(facts) = self.merge_facts() else {
            return false;
        };
        let arg = |key| merge::deletes::arg_of(argv, key);
        written.iter().all(|&k| l.note_state(k, arg(k), facts))
    }

    /// [`Self::note_states`] of one key, in `shard` (COPY's destination).
    pub fn note_state_in(&mut self, shard: &mut Shard, argv: &[&[u8]], key: &[u8]) -> bool {
        if !merge::fact::DELETE_FACTS {
            return false;
        }
        let hash = self.core.keyspace.hasher.hash(key);
        let Some(facts) = self.merge_facts() else {
            return false;
        };
        let arg = merge::deletes::arg_of(argv, key);
        merge::deletes::note_state(shard, (hash, key), (arg, dump_payload), facts)
    }

    /// Active replication, after a write stamped `stamp` on `key` that is
    /// not an increment (SET, GETSET, SETEX, APPEND, SETRANGE, MSET of one
    /// key): where the key is a counter, the write is its reset, noted at
    /// once, and its record carries the reset's fact
    /// (keyspace/merge/reset.rs; DECISIONS 248).
    pub fn note_reset(&mut self, l: &mut Locked, key: &[u8], stamp: u64) {
        if !self.core.active || !merge::fact::noting() {
            return;
        }
        let mut unwanted = Vec::new();
        let facts = self.merge_facts().unwrap_or(&mut unwanted);
        l.note_counter_reset(key, stamp, facts);
    }

    /// Active replication, after an edit stamped `stamp` of the list at
    /// `key` away from its ends (LSET, LINSERT, LREM): its merge state
    /// follows it by index and its fact names the element ids it touched
    /// (keyspace/merge/lists/edits.rs).
    pub fn note_list_edit(&mut self, l: &mut Locked, key: &[u8], stamp: u64, edit: &Edit) {
        if !self.core.active || !merge::fact::noting() {
            return;
        }
        if let Some(prev) = self.base_of(key) {
            let a = self.active.as_mut().expect("active write");
            l.note_list_edit(key, (prev, stamp), edit, &mut a.facts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of shard 0 of a fresh keyspace, and a key of another shard.
    fn view_and_stray_key(ks: &Keyspace) -> (Locked<'_, 'static>, Vec<u8>) {
        let l = Locked {
            ks,
            guards: Guards::One(0, ks.db(0).lock(0)),
            lru: 0,
            opened: None,
            new_key_event: None,
            flush: None,
            tomb: 0,
            ready: None,
            hide_expired: 0,
        };
        let key = (0u32..)
            .map(|i| format!("k{i}").into_bytes())
            .find(|k| ks.slot(k).shard != 0)
            .unwrap();
        (l, key)
    }

    #[test]
    #[should_panic(expected = "key outside the locked shards")]
    fn reading_a_key_of_an_unlocked_shard_panics() {
        let ks = Keyspace::new(1);
        let (mut l, key) = view_and_stray_key(&ks);
        l.entry(&key);
    }

    #[test]
    #[should_panic(expected = "key outside the locked shards")]
    fn writing_a_key_of_an_unlocked_shard_panics() {
        let ks = Keyspace::new(1);
        let (mut l, key) = view_and_stray_key(&ks);
        l.put(&key, Value::string(b"v"), 0, 1);
    }
}
