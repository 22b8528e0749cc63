//! The keyspace: databases split into shards, each shard a hash table behind
//! its own lock.
//!
//! Every database has the same fixed number of shards ([`SHARDS`]); a key's
//! shard is chosen by bits of its hash, so commands on keys of different
//! shards never wait for each other, and any worker thread can execute any
//! command directly on the shard it needs (no hop to an owner thread). A
//! command on several keys locks their shards in ascending index order, which
//! makes it atomic and deadlock-free; database-wide commands (FLUSHDB, SWAPDB)
//! lock every shard in that same order. See docs/ARCHITECTURE.md for why this
//! beats one global lock (KeyDB) and message passing between shard owners
//! (Dragonfly) on the commands Redis users run.
//!
//! A shard keeps, beside its table, an ordered index of volatile keys
//! `(expire_at, hash)`, so the active expiry cycle (`expire.rs`) finds due keys
//! in order instead of sampling, and the memory held by expired keys is bounded
//! by the cycle's budget.

pub(crate) mod cron;
mod deadlines;
pub(crate) mod encoding;
pub(crate) mod expire;
pub(crate) mod hash;
pub(crate) mod held;
pub(crate) mod hlc;
pub(crate) mod hll;
mod index;
pub(crate) mod lazyfree;
pub(crate) mod list;
pub(crate) mod longdouble;
pub(crate) mod member_ttl;
pub(crate) mod merge;
pub(crate) mod ordtable;
pub(crate) mod packed;
pub(crate) mod prefetch;
pub(crate) mod set;
pub(crate) mod snap;
pub(crate) mod stream;
pub(crate) mod stream_groups;
pub(crate) mod stream_node;
pub(crate) mod stream_pel;
pub(crate) mod table;
pub(crate) mod value;
pub(crate) mod zset;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use merge::MergeType;
use parking_lot::Mutex;

pub(crate) use held::{Hold, ShardGuard};

pub(crate) use table::Key;
pub(crate) use value::{StrValue, Value};

/// Shards per database (a power of two).
pub const SHARDS: usize = 256;

/// One key and its metadata: 56 bytes (see docs/PERFORMANCE.md). The key
/// also carries the rest, in its spare bytes or its heap block: the expiry
/// time of keys that have one ([`Entry::expire_at`]; change it through
/// [`Shard::set_expire`] so the shard's expiry index follows), the LRU
/// clock ([`Entry::lru`]) and the LFU counter ([`Entry::lfu`]).
#[derive(Clone, Debug)]
pub struct Entry {
    /// Inline up to 18 bytes (see `table.rs`); derefs to `[u8]`.
    pub key: Key,
    pub value: Value,
    /// HLC stamp of the last write (see `hlc.rs`).
    pub version: u64,
}

impl Entry {
    /// An entry with `lru` and `lfu` at 0.
    pub fn new(key: Key, value: Value, expire_at: u64, version: u64) -> Entry {
        let mut key = key;
        key.set_expire_at(expire_at);
        Entry {
            key,
            value,
            version,
        }
    }

    /// Gives the entry another key, keeping its expiry and access metadata
    /// (RENAME). Assigning `key` directly would drop both.
    pub fn rename(&mut self, key: &[u8]) {
        let (at, meta) = (self.expire_at(), self.key.meta());
        self.key = Key::from(key);
        self.key.set_expire_at(at);
        *self.key.meta_mut() = meta;
    }

    /// LRU clock (seconds, 24 bits, wrapping) of the last access, for
    /// OBJECT IDLETIME.
    #[inline]
    pub fn lru(&self) -> u32 {
        self.key.meta().lru()
    }

    #[inline]
    pub fn set_lru(&mut self, lru: u32) {
        self.key.meta_mut().set_lru(lru);
    }

    /// Logarithmic access counter, for OBJECT FREQ.
    #[inline]
    pub fn lfu(&self) -> u8 {
        self.key.meta().lfu()
    }

    /// Seconds since the key was last touched (the LRU clock wraps at 24 bits).
    pub fn idle_secs(&self, now_lru: u32) -> u32 {
        now_lru.wrapping_sub(self.lru()) & 0xFF_FFFF
    }

    /// The LFU counter after decay: one step down per `lfu-decay-time` minutes
    /// since the last access (Redis's LFUDecrAndReturn).
    pub fn lfu_decayed(&self, now_lru: u32, decay_minutes: u32) -> u8 {
        let c = self.lfu();
        if decay_minutes == 0 {
            return c;
        }
        let periods = self.idle_secs(now_lru) / 60 / decay_minutes;
        c.saturating_sub(periods.min(255) as u8)
    }

    #[inline]
    pub fn set_lfu(&mut self, lfu: u8) {
        self.key.meta_mut().set_lfu(lfu);
    }

    /// Absolute expiry in unix ms; 0 = persistent.
    #[inline]
    pub fn expire_at(&self) -> u64 {
        self.key.expire_at()
    }

    #[inline]
    pub fn is_expired(&self, now_ms: u64) -> bool {
        let at = self.expire_at();
        at != 0 && at <= now_ms
    }
}

/// Pads a shard to its own cache lines so neighbouring locks don't false-share.
#[repr(align(128))]
pub(crate) struct PaddedShard(pub Mutex<Shard>);

/// The hasher shared by every shard, and of their side maps (tombstones,
/// merge state): hashbrown's own (foldhash), with a random seed, or a fixed
/// one on a thread that asked for it ([`set_thread_fixed_hash`]).
#[derive(Clone, Copy)]
pub struct KeyHasher(foldhash::fast::SeedableRandomState);

impl KeyHasher {
    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.0.hash_one(key)
    }
}

impl Default for KeyHasher {
    fn default() -> Self {
        KeyHasher(if FIXED_HASH.with(std::cell::Cell::get) {
            foldhash::fast::SeedableRandomState::fixed()
        } else {
            foldhash::fast::SeedableRandomState::random()
        })
    }
}

impl std::hash::BuildHasher for KeyHasher {
    type Hasher = foldhash::fast::FoldHasher;

    #[inline]
    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

thread_local! {
    static FIXED_HASH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Seam for the deterministic simulator (tests/simulator.rs): the
/// keyspaces (and shard maps) made on this thread from now on hash with a
/// fixed seed, so that where a key lands, and the order a snapshot sends
/// keys in, is the same in every run. Off on every thread of a server.
pub fn set_thread_fixed_hash(on: bool) {
    FIXED_HASH.with(|f| f.set(on));
}

/// Where a key lives: its hash and shard index.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    pub hash: u64,
    pub shard: usize,
}

/// One shard: a dense slab of entries, a hash index into it, and the expiry
/// index of its volatile keys.
///
/// The entries live contiguously in `entries` (no empty slots), and the hash
/// table `index` (`index.rs`) holds only their positions with 8 bits of
/// hash, 4 bytes a slot, so the table's slack (it stays between 58 % and
/// 7/8 full) costs 4 bytes per empty slot instead of a whole `Entry`.
/// Removal swaps the last entry into the hole (`swap_remove`) and
/// re-points its index slot. Each shard grows on its own, so a resize copies
/// 1/256 of a database at a time: there is no database-wide 2x spike. See
/// docs/PERFORMANCE.md for the measurements.
#[derive(Default)]
pub struct Shard {
    entries: table::Slab,
    index: index::Index,
    expires: deadlines::Deadlines,
    /// The running snapshot's pending entries here (see `snap.rs`).
    snap: Option<Box<snap::ShardSnap>>,
    /// Active replication only: deleted keys and the stamp of their
    /// deletion, so that an older write arriving later stays deleted
    /// (docs/ACTIVE-ACTIVE-DESIGN.md, "Tombstones"). Invisible to commands; a key
    /// written again leaves this map. Empty (and unallocated) otherwise.
    tombstones: hashbrown::HashMap<Box<[u8]>, u64, KeyHasher>,
    /// Active replication: the merge state of the keys that merge instead
    /// of the last writer winning (counters, `merge.rs`). A deleted key's
    /// stays with its tombstone. Empty (and unallocated) otherwise.
    merge: hashbrown::HashMap<Box<[u8]>, Box<merge::Meta>, KeyHasher>,
    /// Active replication's flush stamp and answer notes (`ActiveSide`):
    /// None until a flush or an answer (a pointer: the shard keeps to two
    /// cache lines).
    side: Option<Box<ActiveSide>>,
    /// The member TTLs of the keys that have some, and those keys by
    /// their earliest member deadline (`member_ttl.rs`). None while no key
    /// here has one: a shard pays one pointer (its padded size does not
    /// change).
    member_ttls: Option<Box<member_ttl::ShardTtls>>,
    /// The position `find_mut` found last: a hint an active write's note
    /// tries before the index (`pos_hinted`), as it names the key the
    /// command just wrote.
    found: usize,
}

/// What a shard keeps for active replication beside its keys' tombstones
/// and merge states, boxed: a plain node never has it.
#[derive(Default)]
struct ActiveSide {
    /// The stamp of the last FLUSHDB/FLUSHALL; a key absent here is at
    /// least this old (a per-database tombstone).
    flushed_at: u64,
    /// The merging keys whose state this node sent its peers at another
    /// node's version (a join committed at the newer side's version, as
    /// counters' and streams' are, DECISIONS 183; an answer to a peer's
    /// state that lacked ours), each with our stamp of the last such
    /// answer. A peer that cannot continue our stream (we restarted, or
    /// trimmed it) resumes by stamp and gets these keys too: their version
    /// does not carry our slot (DECISIONS 334). Kept in the files with the
    /// key's merge state.
    answered: hashbrown::HashMap<Box<[u8]>, u64, KeyHasher>,
}

impl Shard {
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn volatile_len(&self) -> usize {
        self.expires.len()
    }
    /// The sum of the volatile keys' deadlines (unix ms), for their
    /// average TTL ([`Db::volatile_stats`]).
    pub fn deadline_sum(&self) -> u128 {
        self.expires.sum()
    }

    /// Where the index's table is, for prefetches without the lock
    /// (`prefetch.rs`); stored in `hint` if it changed. The lock holder
    /// calls it when it unlocks.
    #[inline]
    pub(crate) fn publish_hint(&self, hint: &AtomicU64) {
        let h = self.index.hint();
        if hint.load(Relaxed) != h {
            hint.store(h, Relaxed);
        }
    }

    /// Prefetches the slab entry the index holds for `hash` (its first
    /// candidate: the key is not compared, so no entry is read).
    #[inline]
    fn prefetch_entry(&self, hash: u64) {
        if let Some(i) = self.index.first_candidate(hash) {
            if (i as usize) < self.entries.len() {
                let at = std::ptr::from_ref(self.entries.get(i as usize)) as usize;
                prefetch::prefetch_line(at);
                prefetch::prefetch_line(at + std::mem::size_of::<Entry>() - 1);
            }
        }
    }

    /// Position of `key` in the slab.
    #[inline]
    fn pos(&self, hash: u64, key: &[u8]) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash, |i| &*entries.get(i as usize).key == key)
            .map(|i| i as usize)
    }

    /// [`Self::pos`], trying the position `find_mut` found last first:
    /// positions are `0..len` and keys unique, so an entry there with
    /// `key` is the key's (a validated hint; DECISIONS 217).
    #[inline]
    fn pos_hinted(&self, hash: u64, key: &[u8]) -> Option<usize> {
        let hint = self.found;
        if hint < self.entries.len() && &*self.entries.get(hint).key == key {
            return Some(hint);
        }
        self.pos(hash, key)
    }

    /// The version `key` has here: its entry's, else its tombstone's, else
    /// 0 (never written, or deleted without active replication).
    pub fn version_of(&self, hash: u64, key: &[u8]) -> u64 {
        match self.get_raw(hash, key) {
            Some(e) => e.version,
            None => self.absent_version(key),
        }
    }

    /// The version of `key` where it has no entry: its tombstone's, or the
    /// last flush's, or 0.
    pub fn absent_version(&self, key: &[u8]) -> u64 {
        self.tombstone(key).unwrap_or(0).max(self.flushed_at())
    }

    /// The stamp of the last flush (active replication), 0 if none.
    pub fn flushed_at(&self) -> u64 {
        self.side.as_ref().map_or(0, |a| a.flushed_at)
    }

    /// Sets the stamp of the last flush (loading a file that recorded it).
    pub fn set_flushed_at(&mut self, stamp: u64) {
        let side = self.side.get_or_insert_with(Box::default);
        side.flushed_at = side.flushed_at.max(stamp);
    }

    /// FLUSHDB under active replication, stamped `stamp`: drops every key
    /// and tombstone older than it (a peer's newer write survives it, as it
    /// would have had it arrived after the flush) and remembers the stamp.
    pub fn flush_older_than(&mut self, hasher: &KeyHasher, stamp: u64) {
        self.snap_drain();
        self.retain(hasher, |e| e.version >= stamp);
        self.tombstones.retain(|_, s| *s >= stamp);
        // A merging key the flush deleted keeps what the flush observed of
        // it (parts, dots), with a tombstone at the flush's stamp, as a DEL's does: a
        // peer's older state of it then joins without bringing back the
        // increments the flush saw (found by the simulator, seed 261).
        // (A key the flush left, newer than it, is not one of them even
        // where its merge state was not brought up to its version yet.)
        let older: Vec<Box<[u8]>> = (self.merge.iter())
            .filter(|(k, m)| m.version() < stamp && self.get_raw(hasher.hash(k), k).is_none())
            .map(|(k, _)| k.clone())
            .collect();
        for key in older {
            if self.get_raw(hasher.hash(&key), &key).is_none() {
                self.set_tombstone(&key, stamp);
            }
            if let Some(m) = self.merge.get_mut(&key) {
                **m = merge::Meta::current(Some(m), stamp, None);
            }
        }
        self.flush_older_elements(hasher, stamp);
        self.set_flushed_at(stamp);
    }

    /// A flush's part in the sets, hashes and sorted sets it leaves (newer
    /// than it): their elements added before it go, as the whole of an
    /// older key does. A merge fact older than a flush is dropped where it
    /// arrives after the flush (replication/active/facts.rs); this drops
    /// what it added where it arrived first, so both orders end the same.
    fn flush_older_elements(&mut self, hasher: &KeyHasher, stamp: u64) {
        let newer: Vec<Box<[u8]>> = (self.merge.iter())
            .filter(|(k, m)| {
                m.get::<merge::Elements>().is_some() && self.get_raw(hasher.hash(k), k).is_some()
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in newer {
            let hash = hasher.hash(&key);
            self.merge_meta_now(hash, &key);
            let Some(e) = self
                .merge
                .get_mut(&key)
                .and_then(|m| m.get_mut::<merge::Elements>())
            else {
                continue;
            };
            let mut gone: Vec<Box<[u8]>> = Vec::new();
            e.dots.retain(|m, ds| {
                ds.retain(|d| d.stamp >= stamp);
                if ds.is_empty() {
                    gone.push(m.clone());
                }
                !ds.is_empty()
            });
            let Some(p) = self.pos(hash, &key).filter(|_| !gone.is_empty()) else {
                continue;
            };
            let entry = self.entries.get_mut(p);
            for m in &gone {
                match &mut entry.value {
                    Value::Set(s) => {
                        s.remove(m);
                    }
                    Value::Hash(h) => {
                        h.remove(m);
                    }
                    Value::ZSet(z) => {
                        z.remove(m);
                    }
                    _ => {}
                }
            }
            if entry.value.is_empty_collection() {
                let version = entry.version;
                self.remove(hasher, hash, &key);
                self.set_tombstone(&key, version);
            }
        }
    }

    /// `key`'s merge state, if it has one (`merge/`: it may describe an
    /// older version of the key; read it through `merge::Meta::current`).
    pub fn merge_meta(&self, key: &[u8]) -> Option<&merge::Meta> {
        if self.merge.is_empty() {
            return None;
        }
        self.merge.get(key).map(|m| &**m)
    }

    /// `key`'s merge state to change in place (a link applying a fact).
    pub fn merge_meta_mut(&mut self, key: &[u8]) -> Option<&mut merge::Meta> {
        self.merge.get_mut(key).map(|m| &mut **m)
    }

    /// `key`'s counter at `version`, whose value gives `base`
    /// ([`merge::Counter::current`]), stored, to change in place: the
    /// stored one as it is where it describes that version already (every
    /// increment but the first of a key only this node writes), so an
    /// increment copies and allocates nothing.
    pub fn counter_at(
        &mut self,
        key: &[u8],
        version: u64,
        base: merge::Base,
    ) -> &mut merge::Counter {
        let fresh = || Box::new(merge::Counter::current(None, version, base).wrap());
        let meta = &mut **self.merge.entry_ref(key).or_insert_with(fresh);
        if !(meta.get::<merge::Counter>()).is_some_and(|c| c.is_at(version, base)) {
            *meta = merge::Counter::current(meta.get(), version, base).wrap();
        }
        match meta.get_mut() {
            Some(c) => c,
            None => unreachable!("a counter was stored above"),
        }
    }

    /// Whether `key` has merge state.
    pub fn merges(&self, key: &[u8]) -> bool {
        !self.merge.is_empty() && self.merge.contains_key(key)
    }

    /// Our stamp of the last answer that sent `key`'s state at another
    /// node's version (`answered`), if any.
    pub fn answered(&self, key: &[u8]) -> Option<u64> {
        self.side.as_ref()?.answered.get(key).copied()
    }

    /// Notes that `key`'s state went to the peers at another node's
    /// version, by an answer stamped `stamp` (ours).
    pub fn note_answered(&mut self, key: &[u8], stamp: u64) {
        let notes = &mut self.side.get_or_insert_with(Box::default).answered;
        match notes.get_mut(key) {
            Some(s) => *s = (*s).max(stamp),
            None => {
                notes.insert(key.into(), stamp);
            }
        }
    }

    /// Forgets the answer notes of keys that no longer merge.
    fn prune_answered(&mut self) {
        if let Some(side) = &mut self.side {
            let merge = &self.merge;
            side.answered.retain(|k, _| merge.contains_key(k));
        }
    }

    pub fn set_merge_meta(&mut self, key: &[u8], m: merge::Meta) {
        match self.merge.get_mut(key) {
            Some(old) => **old = m,
            None => {
                self.merge.insert(key.into(), Box::new(m));
            }
        }
    }

    /// Notes that a write named `members` of the collection at `key` as
    /// added or set (`merge::Elements::touched`).
    pub fn touch_members<'m>(&mut self, key: &[u8], members: impl Iterator<Item = &'m [u8]>) {
        if let Some(e) = self
            .merge
            .get_mut(key)
            .and_then(|m| m.get_mut::<merge::Elements>())
        {
            e.touched.extend(members.map(Box::from));
        }
    }

    /// Active replication: after a write stamped `stamp` set counted
    /// member `m` of the collection at `key` to its counter's sum, the
    /// member's newest dot (that write's) prints and carries that value.
    pub fn reprint_member(&mut self, hash: u64, key: &[u8], m: &[u8], stamp: u64) {
        let now =
            (self.get_raw(hash, key)).and_then(|e| merge::elements::item_of(Some(&e.value), m));
        if let Some(e) = self
            .merge
            .get_mut(key)
            .and_then(|m| m.get_mut::<merge::Elements>())
        {
            if let (Some(d), Some(now)) = (e.dots.get_mut(m).and_then(|ds| ds.last_mut()), now) {
                if d.stamp == stamp {
                    d.fp = now.fingerprint();
                    d.value = Some(Box::new(now));
                }
            }
        }
    }

    /// `key`'s merge state brought up to its version and value now, and
    /// stored so (a state about to leave the node: a member's dot must not
    /// change once a peer saw it; `merge/elements.rs`). None if the key
    /// does not merge.
    pub fn merge_meta_now(&mut self, hash: u64, key: &[u8]) -> Option<&merge::Meta> {
        let old = self.merge_meta(key);
        let value = self.get_raw(hash, key).map(|e| &e.value);
        let collection = value.is_some_and(merge::merges_by_parts);
        if old.is_none() && !collection {
            return None;
        }
        let version = self.version_of(hash, key);
        let (present, at) = match self.get_raw(hash, key) {
            Some(e) => (true, e.expire_at()),
            None => (false, 0),
        };
        let stale_ttl = old.is_some_and(|m| m.ttl_differs(present, at))
            || self.member_ttls_stale(key, value, old);
        if old.is_none_or(|m| m.version() != version) || stale_ttl {
            let mut now = merge::Meta::current(old, version, value);
            now.refresh_ttl(version, present, at);
            self.refresh_member_ttls(key, value, version, &mut now);
            self.set_merge_meta(key, now);
        }
        self.merge_meta(key)
    }

    /// Active replication, at the origin of a write stamped `stamp` that
    /// changed the collection at `key`, whose version was `prev` before:
    /// the members it named (argument index, member) get their dots now
    /// (keyspace/merge/fact.rs, [`merge::Elements::note_write`]), and its
    /// fact goes to `facts` (none pushed where this stamp wrote the key
    /// already). False, nothing changed, where the key's merge state does
    /// not describe `prev` (the caller falls back to the lazy path).
    /// `present`: Some(fingerprint) where the caller knows every named
    /// member is in the key now with that fingerprint (SADD's members:
    /// 0), so that none is looked up in the value again.
    pub fn note_elements(
        &mut self,
        hash: u64,
        key: &[u8],
        (prev, stamp): (u64, u64),
        (key_index, named): (u32, &[(u32, &[u8])]),
        facts: &mut Vec<merge::fact::Fact>,
        present: Option<u64>,
    ) -> bool {
        let pos = self.pos_hinted(hash, key);
        let entry = pos.map(|p| self.entries.get(p));
        let member_ttls = self.member_ttls(key).is_some();
        // One lookup of the merge state, made here if the key has none.
        let fresh = || Box::new(merge::Elements::current(None, prev, None).wrap());
        // A variant pattern on this write path (as in `count_field`).
        let merge::Meta::Elements(e) = &mut **self.merge.entry_ref(key).or_insert_with(fresh)
        else {
            return false;
        };
        if e.version != prev {
            return false;
        }
        let start = facts.len();
        note_named(e, entry, (stamp, present), (key_index, named), facts);
        // On a key with member TTLs the write travels as a fact where it
        // changed no member's TTL dots; a member TTL it cleared (HSET's)
        // is its dot, and the write travels by the key's state, as one
        // that removed a member with TTL dots (DECISIONS 327).
        if member_ttls || !e.member_ttls.is_empty() {
            let side = member_ttl::of(&self.member_ttls, key);
            let present = |m: &[u8]| entry.is_some_and(|en| member_ttl::has_member(&en.value, m));
            let names: Vec<&[u8]> = named.iter().map(|n| n.1).collect();
            let side_at = |m: &[u8]| side.and_then(|s| s.get(m)).unwrap_or(0);
            let cleared = (names.iter()).any(|m| present(m) && e.member_ttls.at(m) != side_at(m));
            // A member removed with TTL dots: a peer that holds it by a
            // concurrent add must drop the dots this node saw, which the
            // fact does not name.
            let removed_ttl = (names.iter()).any(|m| !present(m) && e.member_ttls.has(m));
            if cleared || removed_ttl || e.member_ttls.differ_but(side, present, &names) {
                facts.truncate(start);
            }
            e.member_ttls.refresh(stamp, side, present);
        }
        true
    }

    /// Active replication, at the origin of a TTL write stamped `stamp`
    /// (EXPIRE and its family, PERSIST) that left the key (version `prev`,
    /// expiring at `before`, until then) expiring at `at` (0: none): a
    /// set's, hash's, sorted set's, list's or stream's TTL register takes
    /// the write's dot in place of those it saw, and its fact goes to `facts`
    /// (`merge::ttl::Ttl::note_write`); a counter's reset is the write's
    /// ([`Self::note_counter_reset`]). False, nothing changed, where TTL
    /// facts are off or the key's merge state does not describe it as it
    /// was (the next read finds the write's dot lazily, `Ttl::refresh`).
    pub fn note_ttl(
        &mut self,
        (hash, key): (u64, &[u8]),
        (prev, stamp): (u64, u64),
        (before, at): (u64, u64),
        facts: &mut Vec<merge::fact::Fact>,
    ) -> bool {
        use merge::fact::{ELEMENT_FACTS, LIST_FACTS, LIST_TTL_FACTS, TTL_FACTS};
        if !TTL_FACTS {
            return false;
        }
        // Member TTLs whose registers are not the side map's: by the key's
        // state (DECISIONS 327).
        if self.member_ttls_stale_but((hash, key), self.merge_meta(key), &[]) {
            return false;
        }
        // The fact names the type it found (a peer of another type asks).
        let found = self
            .get_raw(hash, key)
            .map(|e| merge::ttl::type_code(&e.value));
        let typed = merge::ttl::type_fact(found.unwrap_or(0));
        match self.merge.get_mut(key).map(|m| &mut **m) {
            Some(merge::Meta::Elements(e)) if ELEMENT_FACTS => {
                if e.version != prev || e.ttl.at() != before {
                    return false;
                }
                if e.ttl.note_write(&mut e.cc, (stamp, at), 1, facts) {
                    facts.push(typed);
                }
                e.version = stamp;
                true
            }
            Some(merge::Meta::List(l)) if LIST_TTL_FACTS && LIST_FACTS => {
                if l.ttl.at() != before || !l.describes(prev) {
                    return false;
                }
                if l.ttl.note_write(&mut l.cc, (stamp, at), 1, facts) {
                    facts.push(typed);
                }
                l.note_ttl_move(prev, stamp)
            }
            Some(merge::Meta::Stream(s)) if merge::stream::STREAM_TTL_FACTS => {
                if s.version != prev || s.ttl.at() != before {
                    return false;
                }
                if s.ttl.note_write(&mut s.cc, (stamp, at), 1, facts) {
                    facts.push(typed);
                }
                s.version = stamp;
                true
            }
            Some(merge::Meta::Counter(_)) => self.note_counter_reset(hash, key, stamp, facts),
            _ => false,
        }
    }

    /// Active replication, at the origin of a write stamped `stamp` on the
    /// counter at `key` that is not an increment (SET and the other string
    /// writes, a TTL write): its reset is noted at once and its fact goes
    /// to `facts` (`merge::reset`). False where the key has no counter
    /// state, holds a sketch, or no fact went.
    pub fn note_counter_reset(
        &mut self,
        hash: u64,
        key: &[u8],
        stamp: u64,
        facts: &mut Vec<merge::fact::Fact>,
    ) -> bool {
        // Most keys a string write touches have no merge state: one lookup.
        if !matches!(
            self.merge.get(key).map(|m| &**m),
            Some(merge::Meta::Counter(_))
        ) {
            return false;
        }
        let Some(entry) = self.get_raw(hash, key) else {
            return false;
        };
        let (base, at) = (merge::Base::of(Some(&entry.value)), entry.expire_at());
        if !matches!(entry.value, Value::Str(_)) || merge::hll::is_sketch(&entry.value) {
            return false;
        }
        match self.merge.get_mut(key).map(|m| &mut **m) {
            Some(merge::Meta::Counter(c)) => c.note_reset(stamp, (base, at), facts),
            _ => false,
        }
    }

    /// Active replication, at the origin of a write stamped `stamp` that
    /// only pushed and popped at the ends of the list at `key` (version
    /// `prev` before): its merge state follows the ops in O(what they
    /// moved) ([`merge::lists::Lists::note_ends`]), and a write of one op,
    /// the first of its stamp on the key, pushes its fact to `facts`
    /// (keyspace/merge/fact.rs: PREV; a push's zone in a WORD; a pop's
    /// element ids as DROP entries, each `DROP | k, stamp` for id
    /// `(stamp, k)`).
    pub fn note_list_ends(
        &mut self,
        hash: u64,
        key: &[u8],
        (prev, stamp): (u64, u64),
        ops: &[merge::lists::EndOp],
        facts: &mut Vec<merge::fact::Fact>,
    ) {
        use merge::fact::{DROP, PREV, SHIFT, WORD};
        let value = self
            .pos_hinted(hash, key)
            .map(|p| &self.entries.get(p).value);
        // A list the write made: nothing before it.
        let made = matches!((ops, value), ([merge::lists::EndOp::Push { n, .. }], Some(Value::List(l))) if l.len() == *n);
        if made && !self.merge.contains_key(key) {
            let fresh = merge::Lists::current(None, prev, None);
            self.merge.insert(key.into(), Box::new(fresh.wrap()));
        }
        let Some(ls) = self
            .merge
            .get_mut(key)
            .and_then(|m| m.get_mut::<merge::Lists>())
        else {
            return;
        };
        let newest = ls.cc.newest(hlc::stamp_node(stamp));
        let Some(told) = ls.note_ends((prev, stamp), ops, value) else {
            return;
        };
        // A list made anew has no TTL: the dots of one deleted go (as the
        // next refresh would find; the peer's push onto nothing too).
        if made && merge::fact::LIST_TTL_FACTS {
            ls.ttl = Default::default();
        }
        // One op, or LTRIM's pops at both ends (its WORD: how many of its
        // DROPs the head's pop took; DECISIONS 234), or a rotation's pop
        // and push (its WORD: the push's zone; DECISIONS 237).
        use merge::lists::EndOp::{Pop, Push};
        let trim = matches!(ops, [Pop { left: true, .. }, Pop { left: false, .. }]);
        let rotate = matches!(ops, [Pop { n: 1, .. }, Push { n: 1, .. }]) && told.popped.len() == 1;
        let two = (trim || rotate) && merge::fact::LIST_MOVE_FACTS;
        if (ops.len() != 1 && !two) || newest >= stamp || !merge::fact::LIST_FACTS {
            return;
        }
        facts.push((PREV | (1 << SHIFT), newest));
        match (trim, rotate) {
            (true, _) => facts.push((WORD, told.head_popped as u64)),
            (_, true) => {
                facts.push((WORD, u64::from(told.was_empty)));
                // The value moved, which the record does not hold: the
                // peer reads it at its end, so it must hold the same there
                // (DECISIONS 261).
                if let Some(fp) = pushed_fingerprint(value, ops[1]) {
                    facts.push((WORD | (1 << SHIFT), fp));
                }
            }
            _ => {}
        }
        match ops[0] {
            merge::lists::EndOp::Push { .. } => facts.push((WORD, u64::from(told.was_empty))),
            merge::lists::EndOp::Pop { .. } => {
                let drops = told.popped.iter().map(|&(s, k)| (DROP | (k << SHIFT), s));
                facts.extend(drops);
            }
        }
    }

    /// Active replication, at the origin of HINCRBY stamped `stamp` that
    /// added `by` to `field` of the hash at `key` (version `prev` before;
    /// the field read `before` then): the field's counter counts it
    /// ([`merge::Elements::count_field`]), and the field's dot follows as
    /// for any write ([`Self::note_elements`]); the write travels by the
    /// key's state. Some(the counter's value where `by` is a float and the
    /// counter is at `stamp`), or None, nothing changed, where the key's
    /// merge state does not describe `prev`. `field_index` None: no record
    /// carries the write's fact (none is made, nor the field's print).
    pub fn count_field(
        &mut self,
        hash: u64,
        key: &[u8],
        (prev, stamp): (u64, u64),
        (field_index, field): (Option<u32>, &[u8]),
        (by, before): (merge::Incr, merge::Base),
        facts: &mut Vec<merge::fact::Fact>,
    ) -> Option<Option<merge::Merged>> {
        let pos = self.pos_hinted(hash, key);
        let entry = pos.map(|p| self.entries.get(p));
        let scores = entry.is_some_and(|en| matches!(en.value, Value::ZSet(_)));
        let member_ttls = self.member_ttls(key).is_some();
        // One lookup of the merge state; a hash HINCRBY made has nothing
        // before it.
        let fresh = || Box::new(merge::Elements::current(None, prev, None).wrap());
        // A variant pattern, not `Meta::get_mut`: it tests the tag before
        // loading the box (`get_mut` builds an Option the compiler tests
        // twice: 4 instructions a write more; DECISIONS 176).
        let merge::Meta::Elements(e) = &mut **self.merge.entry_ref(key).or_insert_with(fresh)
        else {
            return None;
        };
        if e.version != prev {
            return None;
        }
        if e.scores != scores {
            // The key changed between a hash and a sorted set.
            e.counters.clear();
            e.scores = scores;
        }
        let counting = field_index.map(|i| (i, e.field_print(field)));
        // The field's counter and dots in one pass, each looked up once,
        // and the field read once in the value (DECISIONS 215). With no
        // `counting`, no fact is left.
        let start = facts.len();
        let now = merge::elements::item_of(entry.map(|en| &en.value), field);
        let float = matches!(by, merge::Incr::Float(_));
        // A key with member TTLs travels as a fact where its registers
        // are the side map's (DECISIONS 327): an increment keeps the TTL.
        let stale_members = (member_ttls || !e.member_ttls.is_empty()) && {
            let side = member_ttl::of(&self.member_ttls, key);
            let present = |m: &[u8]| entry.is_some_and(|en| member_ttl::has_member(&en.value, m));
            e.member_ttls.differ(side, present)
        };
        let ttl = no_ttl_fact(e, entry) || stale_members;
        let write = merge::elements::CountedWrite {
            stamp,
            field: (field_index.unwrap_or(0), field),
            by: (by, before),
            now,
        };
        let value = e.note_counted(write, counting.filter(|_| !ttl), float, facts);
        if let (merge::Incr::Float(f), false, true) = (by, scores, facts.len() > start) {
            merge::fact::float_words(f, facts);
        }
        // A float counter's value, which the caller writes (none is asked
        // of an integer one).
        Some(value)
    }

    /// Active replication: `f` on `key`'s elements state (a set's, hash's
    /// or sorted set's; brought up to the key's version first, or a new
    /// one for a key without merge state) and the key's value, in place:
    /// O(what `f` touches) where the state was current already. None where
    /// the key has merge state of another kind (a counter's, a list's) or
    /// a value that does not merge by elements.
    pub fn with_elements<R>(
        &mut self,
        hash: u64,
        key: &[u8],
        f: impl FnOnce(&mut merge::Elements, Option<&Value>) -> R,
    ) -> Option<R> {
        let pos = self.pos(hash, key);
        let value = pos.map(|p| &self.entries.get(p).value);
        if value.is_some_and(|v| !merge::elements::is_collection(v)) {
            return None;
        }
        let version = match pos {
            Some(p) => self.entries.get(p).version,
            None => self.absent_version(key),
        };
        let at = pos.map_or(0, |p| self.entries.get(p).expire_at());
        match merge::state::typed::<merge::Elements>(self.merge.get(key).map(|m| &**m)) {
            Ok(None) => {
                let mut fresh = merge::Elements::made(version, value, at).wrap();
                self.refresh_member_ttls(key, value, version, &mut fresh);
                self.merge.insert(key.into(), Box::new(fresh));
            }
            Ok(Some(e))
                if e.version != version
                    || e.ttl.at() != at
                    || (pos.is_none() && !e.ttl.is_empty())
                    || self.member_ttls_stale(key, value, self.merge_meta(key)) =>
            {
                let mut now = merge::Elements::current(Some(e), version, value);
                now.ttl.refresh(version, pos.is_some(), at);
                let mut now = now.wrap();
                self.refresh_member_ttls(key, value, version, &mut now);
                self.set_merge_meta(key, now);
            }
            Ok(Some(_)) => {}
            Err(()) => return None,
        }
        let value = pos.map(|p| &self.entries.get(p).value);
        let e = self.merge.get_mut(key).and_then(|m| m.get_mut())?;
        Some(f(e, value))
    }

    /// The keys with merge state.
    pub fn merge_keys(&self) -> Vec<Box<[u8]>> {
        self.merge.keys().cloned().collect()
    }

    /// The stamp of `key`'s deletion, if it left a tombstone.
    pub fn tombstone(&self, key: &[u8]) -> Option<u64> {
        if self.tombstones.is_empty() {
            return None;
        }
        self.tombstones.get(key).copied()
    }

    /// Records that `key` was deleted by a write stamped `stamp`.
    pub fn set_tombstone(&mut self, key: &[u8], stamp: u64) {
        match self.tombstones.get_mut(key) {
            Some(s) => *s = (*s).max(stamp),
            None => {
                self.tombstones.insert(key.into(), stamp);
            }
        }
    }

    /// Raises `key`'s version to `version` where it is lower, its value
    /// unchanged (the entry's, else its tombstone's): a merge whose join
    /// moved only the version, which must still end the same on every node
    /// (a later whole-key write compares against it).
    pub fn raise_version(&mut self, hash: u64, key: &[u8], version: u64) {
        match self.pos(hash, key) {
            Some(p) => {
                let e = self.entries.get_mut(p);
                e.version = e.version.max(version);
            }
            None => self.set_tombstone(key, version),
        }
    }

    /// The tombstones, for a snapshot sent to a peer.
    pub fn tombstones(&self) -> impl Iterator<Item = (&[u8], u64)> {
        self.tombstones.iter().map(|(k, &s)| (&**k, s))
    }

    pub fn tombstone_count(&self) -> usize {
        self.tombstones.len()
    }

    /// Forgets the tombstones stamped before `cutoff`, but those `held`
    /// names; returns how many.
    pub fn collect_tombstones(&mut self, cutoff: u64, held: impl Fn(&[u8]) -> bool) -> usize {
        let before = self.tombstones.len();
        if before > 0 {
            let gone = |k: &[u8], s: u64| s < cutoff && !held(k);
            if !self.merge.is_empty() {
                // A collected deletion takes its key's merge state along:
                // every node has seen the delete, nothing older can come.
                let gone = |k: &[u8], s: u64| gone(k, s) && self.merge.contains_key(k);
                let drop: Vec<Box<[u8]>> = (self.tombstones.iter())
                    .filter(|(k, &s)| gone(k, s))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in drop {
                    self.merge.remove(&k);
                }
                self.prune_answered();
            }
            self.tombstones.retain(|k, s| !gone(k, *s));
            if self.tombstones.is_empty() {
                self.tombstones = Default::default(); // give the table back
            }
        }
        before - self.tombstones.len()
    }

    /// Appends a new entry (the key must be absent).
    fn push(&mut self, hasher: &KeyHasher, hash: u64, entry: Entry) {
        if !self.tombstones.is_empty() {
            self.tombstones.remove(&*entry.key);
        }
        let i = u32::try_from(self.entries.push(entry)).expect("shard holds < 2^32 keys");
        let entries = &self.entries;
        self.index
            .insert_unique(hash, i, |j| hasher.hash(&entries.get(j as usize).key));
    }

    /// Removes the entry at `pos` (whose key hashes to `hash`) from the slab
    /// and the index; the expiry index is the caller's business.
    fn remove_at(&mut self, hasher: &KeyHasher, hash: u64, pos: usize) -> Entry {
        self.before_write(pos);
        let p = pos as u32;
        self.index.remove(hash, p);
        let e = self.entries.swap_remove(pos);
        self.forget_member_ttls(&e.key);
        if pos < self.entries.len() {
            // The former last entry moved into `pos`: re-point its slot.
            let last = self.entries.len() as u32;
            if let Some(s) = &mut self.snap {
                s.moved(last as usize, pos);
            }
            let h = hasher.hash(&self.entries.get(pos).key);
            self.index.replace(h, last, p);
        }
        e
    }

    /// Finds a live key. An expired key is removed and returned in `Err` so
    /// the caller can propagate its deletion (lazy expiry).
    #[inline]
    #[cfg(test)]
    pub fn lookup(&mut self, hasher: &KeyHasher, hash: u64, key: &[u8], now_ms: u64) -> Lookup<'_> {
        let Some(pos) = self.pos(hash, key) else {
            return Lookup::Missing;
        };
        if self.entries.get(pos).is_expired(now_ms) {
            let e = self.remove_at(hasher, hash, pos);
            self.unindex_expire(hasher, hash, e.expire_at());
            return Lookup::Expired(e);
        }
        self.before_write(pos);
        Lookup::Found(self.entries.get_mut(pos))
    }

    /// The entry for `key`, mutable, without expiry checks.
    #[inline]
    pub fn find_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut Entry> {
        let pos = self.pos(hash, key)?;
        self.before_write(pos);
        self.found = pos;
        Some(self.entries.get_mut(pos))
    }

    /// The entry for `key` without expiry checks.
    pub fn get_raw(&self, hash: u64, key: &[u8]) -> Option<&Entry> {
        self.pos(hash, key).map(|p| self.entries.get(p))
    }

    /// Inserts or replaces an entry; returns the previous one.
    pub fn insert(&mut self, hasher: &KeyHasher, hash: u64, entry: Entry) -> Option<Entry> {
        if entry.expire_at() != 0 {
            self.expires.insert(entry.expire_at(), hash);
        }
        let old = match self.pos(hash, &entry.key) {
            Some(p) => {
                self.before_write(p);
                self.forget_member_ttls(&entry.key);
                Some(std::mem::replace(self.entries.get_mut(p), entry))
            }
            None => {
                self.push(hasher, hash, entry);
                None
            }
        };
        if let Some(o) = &old {
            if o.expire_at() != 0 {
                self.unindex_expire(hasher, hash, o.expire_at());
            }
        }
        old
    }

    /// Makes room in the index for `more` keys (loading a file that says
    /// how many keys follow), so it does not grow by doubling meanwhile.
    pub fn reserve(&mut self, hasher: &KeyHasher, more: usize) {
        let entries = &self.entries;
        self.index
            .reserve(more, |j| hasher.hash(&entries.get(j as usize).key));
    }

    /// Inserts an entry whose key must be new (loading); gives the entry
    /// back if the key is already there.
    pub fn insert_new(&mut self, hasher: &KeyHasher, hash: u64, entry: Entry) -> Result<(), Entry> {
        if self.pos(hash, &entry.key).is_some() {
            return Err(entry);
        }
        let at = entry.expire_at();
        self.push(hasher, hash, entry);
        if at != 0 {
            self.expires.insert(at, hash);
        }
        Ok(())
    }

    /// Removes `key`, returning its entry.
    pub fn remove(&mut self, hasher: &KeyHasher, hash: u64, key: &[u8]) -> Option<Entry> {
        let pos = self.pos(hash, key)?;
        let e = self.remove_at(hasher, hash, pos);
        if e.expire_at() != 0 {
            self.unindex_expire(hasher, hash, e.expire_at());
        }
        Some(e)
    }

    /// Sets or clears (`at == 0`) the expiry of an existing key.
    pub fn set_expire(&mut self, hasher: &KeyHasher, hash: u64, key: &[u8], at: u64) -> bool {
        let Some(pos) = self.pos(hash, key) else {
            return false;
        };
        self.before_write(pos);
        let key = &mut self.entries.get_mut(pos).key;
        let old = key.expire_at();
        key.set_expire_at(at);
        if old != 0 {
            self.unindex_expire(hasher, hash, old);
        }
        if at != 0 {
            self.expires.insert(at, hash);
        }
        true
    }

    /// Drops the index entry `(at, hash)` unless another key with the same
    /// hash and expiry still needs it.
    fn unindex_expire(&mut self, hasher: &KeyHasher, hash: u64, at: u64) {
        if self.expiring_at(hasher, hash, at).is_none() {
            self.expires.remove(at, hash);
        }
    }

    /// The position of a key whose hash is `hash` and whose expiry is `at`:
    /// the key an `expires` entry stands for. The index's probe for `hash`
    /// also yields keys of other hashes (it matches 8 bits of it), and
    /// keys given one expiry in one millisecond share `at`, so the full
    /// hash is checked: without it, an entry outlived its key (INFO's
    /// `expires=` counted it) or stood for another key's expiry.
    fn expiring_at(&self, hasher: &KeyHasher, hash: u64, at: u64) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash, |i| {
                let e = entries.get(i as usize);
                e.expire_at() == at && hasher.hash(&e.key) == hash
            })
            .map(|i| i as usize)
    }

    /// Removes up to `max` keys whose expiry is due, calling `on_expired` for
    /// each. Returns how many were removed and whether more are due.
    pub fn expire_due(
        &mut self,
        hasher: &KeyHasher,
        now_ms: u64,
        max: usize,
        mut on_expired: impl FnMut(Entry) -> Option<Tombstone>,
    ) -> (usize, bool) {
        let mut n = 0;
        while n < max {
            let Some((at, hash)) = self.expires.first() else {
                return (n, false);
            };
            if at > now_ms {
                return (n, false);
            }
            self.expires.pop_first();
            while let Some(pos) = self.expiring_at(hasher, hash, at) {
                let e = self.remove_at(hasher, hash, pos);
                if let Some((key, stamp)) = on_expired(e) {
                    self.set_tombstone(&key, stamp);
                }
                n += 1;
            }
        }
        let more = self.expires.first().is_some_and(|(at, _)| at <= now_ms);
        (n, more)
    }

    /// Every entry, in slab order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// The entry at slab position `n` (`0..len`), O(1), for RANDOMKEY and
    /// SCAN. Positions only change when a removal moves the last entry into
    /// the hole, so a cursor walking positions downward (len-1 .. 0) never
    /// misses an entry that exists for the whole scan (SCAN's guarantee);
    /// it may return a moved entry twice, which SCAN allows.
    pub fn nth(&self, n: usize) -> Option<&Entry> {
        (n < self.entries.len()).then(|| self.entries.get(n))
    }

    /// The key that expires first, for eviction's volatile-ttl.
    pub fn soonest_expiring(&self, hasher: &KeyHasher) -> Option<&Entry> {
        let (at, hash) = self.expires.first()?;
        let pos = self.expiring_at(hasher, hash, at)?;
        Some(self.entries.get(pos))
    }

    /// Removes every key; returns the old contents (to drop elsewhere for ASYNC).
    pub fn take_all(&mut self) -> Shard {
        self.snap_drain();
        std::mem::take(self)
    }

    /// A running snapshot still needs the entry at `pos`: hand it over
    /// before it changes.
    #[inline]
    fn before_write(&mut self, pos: usize) {
        if let Some(s) = &mut self.snap {
            let e = self.entries.get(pos);
            s.before_write(pos, e, member_ttl::of(&self.member_ttls, &e.key));
        }
    }

    /// Starts a snapshot of this shard's current entries (at the cut).
    pub fn snap_begin(&mut self, db: usize, sink: std::sync::Arc<dyn snap::SnapSink>) {
        if !self.entries.is_empty() {
            self.snap = Some(Box::new(snap::ShardSnap::new(self.entries.len(), db, sink)));
        }
    }

    /// The saver's step: calls `f` for up to `max` entries the snapshot
    /// still needs, highest positions first, and forgets them; `f` returns
    /// false to end the step early. Returns true once the shard has nothing
    /// left for the snapshot.
    pub fn snap_step(
        &mut self,
        max: usize,
        mut f: impl FnMut(&Entry, Option<&member_ttl::MemberTtls>) -> bool,
    ) -> bool {
        let Some(s) = &mut self.snap else {
            return true;
        };
        for _ in 0..max {
            let Some(pos) = s.next_pending(s.cursor) else {
                break;
            };
            s.take(pos);
            s.cursor = pos;
            let e = self.entries.get(pos);
            if !f(e, member_ttl::of(&self.member_ttls, &e.key)) {
                break;
            }
        }
        if s.remaining() == 0 {
            self.snap = None;
        }
        self.snap.is_none()
    }

    /// Forgets a snapshot that stopped (its file failed).
    pub fn snap_abort(&mut self) {
        self.snap = None;
    }

    /// Hands every entry the snapshot still needs to its sink (before a
    /// change that moves or drops the whole shard: FLUSHALL, SWAPDB).
    pub fn snap_drain(&mut self) {
        if let Some(mut s) = self.snap.take() {
            while let Some(pos) = s.next_pending(usize::MAX) {
                let e = self.entries.get(pos);
                s.before_write(pos, e, member_ttl::of(&self.member_ttls, &e.key));
            }
        }
    }

    /// Keeps only entries for which `keep` is true (used by lazy sweeps).
    pub fn retain(&mut self, hasher: &KeyHasher, mut keep: impl FnMut(&Entry) -> bool) {
        let mut i = self.entries.len();
        while i > 0 {
            i -= 1;
            if keep(self.entries.get(i)) {
                continue;
            }
            let hash = hasher.hash(&self.entries.get(i).key);
            let e = self.remove_at(hasher, hash, i);
            if e.expire_at() != 0 {
                self.unindex_expire(hasher, hash, e.expire_at());
            }
        }
    }
}

/// The fingerprint of the value a push of one element put at its end of
/// `value` (a list), as a peer reads it there: a rotation's fact carries
/// it (DECISIONS 261).
fn pushed_fingerprint(value: Option<&Value>, push: merge::lists::EndOp) -> Option<u64> {
    let (Some(Value::List(l)), merge::lists::EndOp::Push { left, .. }) = (value, push) else {
        return None;
    };
    let end = if left {
        Some(0)
    } else {
        l.len().checked_sub(1)
    };
    end.and_then(|i| l.get(i)).map(merge::context::fingerprint)
}

/// A deleted key and the stamp of its deletion, to leave as a tombstone.
pub(crate) type Tombstone = (Vec<u8>, u64);

/// Result of [`Shard::lookup`].
#[cfg(test)]
pub enum Lookup<'a> {
    Found(&'a mut Entry),
    Expired(Entry),
    Missing,
}

/// One database: [`SHARDS`] locked shards.
pub struct Db {
    shards: Box<[PaddedShard]>,
    /// Where each shard's index table is (`prefetch.rs`): published by the
    /// lock holder at unlock, read by prefetches without the lock. Apart
    /// from the shards: 2 KiB a database, read densely.
    hints: Box<[AtomicU64]>,
}

impl Default for Db {
    fn default() -> Self {
        Db {
            shards: (0..SHARDS)
                .map(|_| PaddedShard(Mutex::new(Shard::default())))
                .collect(),
            hints: (0..SHARDS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Db {
    /// Locks one shard (or borrows it from a transaction's held locks, see
    /// `held.rs`).
    #[inline]
    pub fn lock(&self, shard: usize) -> ShardGuard<'_> {
        held::lock(&self.shards[shard].0, &self.hints[shard])
    }

    /// Prefetches what a lookup of `slot` reads first, its index group and
    /// slots, without locking (`prefetch.rs`, step 1).
    #[inline]
    pub fn prefetch(&self, slot: Slot) {
        let hint = self.hints[slot.shard].load(Relaxed);
        if let Some(group) = index::hinted_group(hint, slot.hash) {
            prefetch::prefetch_line(group);
        }
    }

    /// Prefetches the slab entry of `slot`'s key if the shard is free
    /// (`prefetch.rs`, step 2: best after [`Db::prefetch`] had time).
    #[inline]
    pub fn prefetch_entry(&self, slot: Slot) {
        if let Some(g) = self.try_lock(slot.shard) {
            g.prefetch_entry(slot.hash);
        }
    }

    /// Locks a shard if no one holds it (background work that can come
    /// back later: the expiry cycle must not wait behind a long script
    /// holding the shard, DECISIONS 57). Not for use inside EXEC.
    pub fn try_lock(&self, shard: usize) -> Option<ShardGuard<'_>> {
        let hint = &self.hints[shard];
        self.shards[shard]
            .0
            .try_lock()
            .map(|g| ShardGuard::Owned(g, hint))
    }

    /// Locks every shard in index order.
    pub fn lock_all(&self) -> Vec<ShardGuard<'_>> {
        self.lock_each().collect()
    }

    /// Each shard locked in turn, in index order (one at a time unless
    /// collected).
    fn lock_each(&self) -> impl Iterator<Item = ShardGuard<'_>> {
        self.shards
            .iter()
            .zip(&self.hints)
            .map(|(s, h)| held::lock(&s.0, h))
    }

    /// Number of keys (locks shards one at a time: a snapshot per shard).
    pub fn len(&self) -> usize {
        self.lock_each().map(|g| g.len()).sum()
    }

    pub fn volatile_len(&self) -> usize {
        self.lock_each().map(|g| g.volatile_len()).sum()
    }

    /// How many keys have a TTL, and their average TTL in ms from `now_ms`
    /// (0 with none, and never below 0: keys past their deadline that the
    /// expiry cycle has not removed yet count as 0), for INFO keyspace.
    pub fn volatile_stats(&self, now_ms: u64) -> (usize, u64) {
        let (mut n, mut sum) = (0usize, 0u128);
        for g in self.lock_each() {
            n += g.volatile_len();
            sum += g.deadline_sum();
        }
        let avg = if n == 0 { 0 } else { sum / n as u128 };
        let ttl = avg.saturating_sub(u128::from(now_ms));
        (n, u64::try_from(ttl).unwrap_or(u64::MAX))
    }
}

/// All databases plus the shared hasher.
pub struct Keyspace {
    pub hasher: KeyHasher,
    dbs: Box<[Db]>,
}

impl Keyspace {
    pub fn new(databases: usize) -> Self {
        Keyspace {
            hasher: KeyHasher::default(),
            dbs: (0..databases.max(1)).map(|_| Db::default()).collect(),
        }
    }

    pub fn num_dbs(&self) -> usize {
        self.dbs.len()
    }

    #[inline]
    pub fn db(&self, i: usize) -> &Db {
        &self.dbs[i]
    }

    /// Hash and shard of a key.
    #[inline]
    pub fn slot(&self, key: &[u8]) -> Slot {
        let hash = self.hasher.hash(key);
        // High-middle bits pick the shard; the shard's index uses the low
        // 32 bits for the group and the top 8 for its tag (`index.rs`), so
        // the three stay independent.
        Slot {
            hash,
            shard: ((hash >> 32) as usize) & (SHARDS - 1),
        }
    }

    /// Total keys across databases.
    pub fn total_keys(&self) -> usize {
        self.dbs.iter().map(|d| d.len()).sum()
    }

    /// An empty keyspace with the same databases and hasher: a replica's
    /// `repl-diskless-load swapdb` loads into it, then swaps it in whole
    /// ([`Keyspace::swap_with`]). Same hasher, so entries keep their slots.
    pub fn staging(&self) -> Keyspace {
        Keyspace {
            hasher: self.hasher,
            dbs: (0..self.dbs.len()).map(|_| Db::default()).collect(),
        }
    }

    /// Swaps every database's contents with `other`'s (made by
    /// [`Keyspace::staging`]) at once: all of our shards are locked
    /// meanwhile, so no command sees a mix of the two.
    pub fn swap_with(&self, other: &Keyspace) {
        let mut ours = self.lock_everything();
        let mut theirs = other.lock_everything();
        for (a, b) in ours.iter_mut().zip(theirs.iter_mut()) {
            for (x, y) in a.iter_mut().zip(b.iter_mut()) {
                // A running snapshot knows shards by their place at the cut.
                x.snap_drain();
                std::mem::swap(&mut **x, &mut **y);
            }
        }
    }
}

impl Keyspace {
    /// Locks shard `a.1` of database `a.0` and shard `b.1` of database `b.0`
    /// in the global lock order (database, then shard), so commands that span
    /// two databases (MOVE, COPY ... DB) cannot deadlock with each other or
    /// with SWAPDB/FLUSHALL. Returns the guards as `(a, b)`; `b` is `None`
    /// when both name the same shard of the same database.
    pub fn lock_pair(
        &self,
        a: (usize, usize),
        b: (usize, usize),
    ) -> (ShardGuard<'_>, Option<ShardGuard<'_>>) {
        if a == b {
            return (self.db(a.0).lock(a.1), None);
        }
        if a < b {
            let ga = self.db(a.0).lock(a.1);
            let gb = self.db(b.0).lock(b.1);
            (ga, Some(gb))
        } else {
            let gb = self.db(b.0).lock(b.1);
            let ga = self.db(a.0).lock(a.1);
            (ga, Some(gb))
        }
    }

    /// Locks every shard of every database, in the global lock order
    /// (FLUSHALL). Indexed `[db][shard]`.
    pub fn lock_everything(&self) -> Vec<Vec<ShardGuard<'_>>> {
        self.dbs.iter().map(|d| d.lock_all()).collect()
    }

    /// Locks the shards `(db, shard)` of `targets` (every shard of every
    /// database if `None`) in the global lock order and holds them for a
    /// transaction: until the [`Hold`] drops, this thread's lock requests
    /// for them borrow the held locks (see `held.rs`).
    pub fn hold(&self, targets: Option<&[(usize, usize)]>) -> Hold<'_> {
        match targets {
            None => Hold::new(self.dbs.iter().map(|d| &d.shards[..]).collect()),
            Some(t) => {
                let mut t = t.to_vec();
                t.sort_unstable();
                t.dedup();
                let runs = t
                    .iter()
                    .map(|&(db, i)| std::slice::from_ref(&self.dbs[db].shards[i]));
                Hold::new(runs.collect())
            }
        }
    }
}

/// Active replication, at the origin of a write stamped `stamp` on the
/// collection whose elements state is `e` (describing the key before it)
/// and whose entry is now `entry`: the named members (argument index,
/// member) get their dots, and the write's fact goes to `facts` where it
/// can travel as one. `present`: every named member's fingerprint now,
/// where the caller knows it (see `Shard::note_elements`).
fn note_named(
    e: &mut merge::Elements,
    entry: Option<&Entry>,
    (stamp, present): (u64, Option<u64>),
    (key_index, named): (u32, &[(u32, &[u8])]),
    facts: &mut Vec<merge::fact::Fact>,
) {
    let value = entry.map(|en| &en.value);
    let fp = |m: &[u8]| present.or_else(|| merge::elements::fingerprint_of(value, m));
    // The members named, on the stack when a few (most writes name one).
    let mut few = [(0, &[][..], None); 4];
    let many: Vec<merge::fact::Named<'_>>;
    let items = if named.len() <= few.len() {
        for (slot, &(i, m)) in few.iter_mut().zip(named) {
            *slot = (i, m, fp(m));
        }
        &few[..named.len()]
    } else {
        many = named.iter().map(|&(i, m)| (i, m, fp(m))).collect();
        &many[..]
    };
    let start = facts.len();
    e.note_write(key_index, stamp, items, facts);
    // A counted field's write resets its counter (an increment of
    // this stamp stays), and travels by the key's state: a fact would
    // not say what the reset saw. (An increment travels as one:
    // `Shard::count_field`.)
    let mut counted = false;
    for &(_, m) in named {
        if e.counters.contains_key(m) {
            counted = true;
            let now = merge::elements::item_of(value, m);
            e.settle_counter(m, stamp, now.as_ref());
            e.keep_written(m, now);
        }
    }
    // A key with a TTL has facts too: the write did not touch its TTL
    // register (merge/ttl.rs), which a peer's must describe as ours does
    // (`no_ttl_fact`). None while collections' facts are off
    // (`merge::fact::ELEMENT_FACTS`).
    if no_ttl_fact(e, entry) || counted || !merge::fact::ELEMENT_FACTS {
        facts.truncate(start);
    }
    // A key the write deleted loses its TTL dots (as `Ttl::refresh` would
    // find later): a peer's apply of the fact does the same.
    if entry.is_none() && merge::fact::TTL_FACTS {
        e.ttl = Default::default();
    }
}

/// Whether a write on the collection whose elements state is `e` and whose
/// entry is now `entry` travels by its state for its TTL: the key has one
/// and TTL facts are off (`merge::fact::TTL_FACTS`), or its TTL register
/// does not give its expiry (a write not noted changed it: the state read
/// next finds that write's dot, `Ttl::refresh`). (Facts on keys with a
/// TTL were first tried in the fifteenth session and taken back: full
/// seeds 4575 and 6838; DECISIONS 228.)
fn no_ttl_fact(e: &merge::Elements, entry: Option<&Entry>) -> bool {
    let at = entry.map_or(0, Entry::expire_at);
    (at != 0 && !merge::fact::TTL_FACTS) || (entry.is_some() && e.ttl.at() != at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(k: &str, exp: u64) -> Entry {
        Entry::new(k.as_bytes().into(), Value::string(b"v"), exp, 1)
    }

    /// Collects what a snapshot sees: pre-images from writers and the
    /// saver's steps.
    #[derive(Default)]
    struct Seen(Mutex<Vec<(String, String)>>);
    impl snap::SnapSink for Seen {
        fn preserve(&self, _db: usize, e: &Entry, _: Option<&member_ttl::MemberTtls>) {
            self.0.lock().push(seen(e));
        }
    }
    fn seen(e: &Entry) -> (String, String) {
        let k = String::from_utf8_lossy(&e.key).into_owned();
        let v = match &e.value {
            Value::Str(s) => s.with_bytes(|b| String::from_utf8_lossy(b).into_owned()),
            _ => unreachable!(),
        };
        (k, v)
    }

    /// The position hint of an active write's note: right where it names
    /// the key found last, and never a wrong entry once removals moved the
    /// entries under it (the index answers then).
    #[test]
    fn a_stale_position_hint_still_finds_the_key() {
        let ks = Keyspace::new(1);
        let mut shard = Shard::default();
        let names: Vec<String> = (0..5).map(|i| format!("k{i}")).collect();
        for k in &names {
            let s = ks.slot(k.as_bytes());
            shard.insert(&ks.hasher, s.hash, entry(k, 0));
        }
        let at = |shard: &Shard, k: &str| {
            let h = ks.slot(k.as_bytes()).hash;
            (
                shard.pos_hinted(h, k.as_bytes()),
                shard.pos(h, k.as_bytes()),
            )
        };
        let last = ks.slot(b"k4").hash;
        assert!(shard.find_mut(last, b"k4").is_some());
        let (hinted, indexed) = at(&shard, "k4");
        assert_eq!(hinted, indexed);
        // k4 (the hint's entry) moves into k1's hole; the hint is past the end.
        shard.remove(&ks.hasher, ks.slot(b"k1").hash, b"k1");
        for k in &names {
            let (hinted, indexed) = at(&shard, k);
            assert_eq!(hinted, indexed, "{k}");
        }
        // The hint on k0, which is then removed: another key takes its place.
        assert!(shard.find_mut(ks.slot(b"k0").hash, b"k0").is_some());
        shard.remove(&ks.hasher, ks.slot(b"k0").hash, b"k0");
        assert_eq!(at(&shard, "k0"), (None, None));
        for k in ["k2", "k3", "k4"] {
            let (hinted, indexed) = at(&shard, k);
            assert!(hinted.is_some(), "{k}");
            assert_eq!(hinted, indexed, "{k}");
        }
    }

    #[test]
    fn snapshot_sees_the_cut_whatever_writers_do_meanwhile() {
        let ks = Keyspace::new(1);
        let mut shard = Shard::default();
        let put = |shard: &mut Shard, k: &str, v: &str| {
            let s = ks.slot(k.as_bytes());
            let e = Entry::new(k.as_bytes().into(), Value::string(v.as_bytes()), 0, 1);
            shard.insert(&ks.hasher, s.hash, e);
        };
        let n = 300;
        for i in 0..n {
            put(&mut shard, &format!("k{i}"), "old");
        }
        let sink = std::sync::Arc::new(Seen::default());
        shard.snap_begin(0, sink.clone());
        let mut rng = 12345u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // Interleave saver steps with overwrites, removals (which move the
        // last entry into the hole), new keys and expiry changes.
        let mut done = false;
        while !done {
            for _ in 0..7 {
                let k = format!("k{}", next() % n);
                let s = ks.slot(k.as_bytes());
                match next() % 4 {
                    0 => put(&mut shard, &k, "new"),
                    1 => drop(shard.remove(&ks.hasher, s.hash, k.as_bytes())),
                    2 => put(&mut shard, &format!("fresh{}", next()), "new"),
                    _ => drop(shard.set_expire(&ks.hasher, s.hash, k.as_bytes(), 99)),
                }
            }
            done = shard.snap_step(5, |e, _| {
                sink.0.lock().push(seen(e));
                true
            });
        }
        let mut got = sink.0.lock().clone();
        got.sort();
        let mut want: Vec<_> = (0..n)
            .map(|i| (format!("k{i}"), "old".to_string()))
            .collect();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn entry_is_56_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 56);
        // A shard fits two cache lines (member TTLs and active
        // replication's flush stamp and answer notes cost it a pointer each).
        assert_eq!(std::mem::size_of::<PaddedShard>(), 256);
    }

    #[test]
    fn the_prefetch_hint_names_each_keys_home_group() {
        // A wrong hint would make prefetches miss (never wrong results):
        // check it against where the index's probe for each key starts.
        let ks = Keyspace::new(1);
        let mut shard = Shard::default();
        for n in 0..5000 {
            let key = format!("key:{n}");
            let hash = ks.hasher.hash(key.as_bytes());
            shard.insert(&ks.hasher, hash, entry(&key, 0));
            if n % 3 == 0 {
                let gone = format!("key:{}", n / 3);
                let h = ks.hasher.hash(gone.as_bytes());
                shard.remove(&ks.hasher, h, gone.as_bytes());
            }
        }
        let hint = AtomicU64::new(0);
        shard.publish_hint(&hint);
        let h = hint.load(Relaxed);
        assert_ne!(h, 0);
        for e in shard.iter() {
            let hash = ks.hasher.hash(&e.key);
            assert_eq!(
                index::hinted_group(h, hash),
                Some(shard.index.home_addr(hash))
            );
        }
    }

    #[test]
    fn insert_lookup_expire() {
        let ks = Keyspace::new(1);
        let mut shard = Shard::default();
        for (k, exp) in [("a", 0), ("b", 100), ("c", 50), ("d", 500)] {
            let s = ks.slot(k.as_bytes());
            shard.insert(&ks.hasher, s.hash, entry(k, exp));
        }
        let sb = ks.slot(b"b");
        assert!(matches!(
            shard.lookup(&ks.hasher, sb.hash, b"b", 10),
            Lookup::Found(_)
        ));
        assert!(matches!(
            shard.lookup(&ks.hasher, sb.hash, b"b", 100),
            Lookup::Expired(_)
        ));
        let mut gone = vec![];
        let (n, more) = shard.expire_due(&ks.hasher, 400, 10, |e| {
            gone.push(e.key.to_vec());
            None
        });
        assert_eq!((n, more), (1, false));
        assert_eq!(gone, vec![b"c".to_vec()]);
        assert_eq!(shard.len(), 2);
        assert_eq!(shard.volatile_len(), 1);
        let sd = ks.slot(b"d");
        shard.set_expire(&ks.hasher, sd.hash, b"d", 0);
        assert_eq!(shard.volatile_len(), 0);
    }

    #[test]
    fn slab_matches_a_model_under_churn() {
        use std::collections::HashMap;
        let ks = Keyspace::new(1);
        let mut shard = Shard::default();
        let mut model: HashMap<String, u64> = HashMap::new();
        let mut x: u64 = 12345;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = format!("k{}", x % 500);
            let s = ks.slot(k.as_bytes());
            match x % 7 {
                0..=3 => {
                    let exp = if x.is_multiple_of(5) { 1000 + step } else { 0 };
                    shard.insert(&ks.hasher, s.hash, entry(&k, exp));
                    model.insert(k, exp);
                }
                4 | 5 => {
                    let got = shard.remove(&ks.hasher, s.hash, k.as_bytes()).is_some();
                    assert_eq!(got, model.remove(&k).is_some());
                }
                _ => shard.retain(&ks.hasher, |e| {
                    e.key.len().is_multiple_of(2) || !x.is_multiple_of(3)
                }),
            }
            if x % 7 == 6 && x.is_multiple_of(3) {
                model.retain(|k, _| k.len().is_multiple_of(2));
            }
            assert_eq!(shard.len(), model.len());
        }
        for (k, exp) in &model {
            let s = ks.slot(k.as_bytes());
            assert_eq!(
                shard.get_raw(s.hash, k.as_bytes()).unwrap().expire_at(),
                *exp
            );
        }
        let volatile = model.values().filter(|&&e| e != 0).count();
        assert_eq!(shard.volatile_len(), volatile);
        let (n, _) = shard.expire_due(&ks.hasher, u64::MAX, usize::MAX, |_| None);
        assert_eq!(n, volatile);
        assert_eq!(shard.len(), model.len() - volatile);
    }
}
