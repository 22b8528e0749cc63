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

pub mod expire;
pub mod hlc;
pub mod value;

use std::collections::BTreeSet;
use std::hash::BuildHasher;

use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

pub use value::{StrValue, Value};

/// Shards per database (a power of two).
pub const SHARDS: usize = 256;

/// One key and its metadata.
#[derive(Clone, Debug)]
pub struct Entry {
    pub key: Box<[u8]>,
    pub value: Value,
    /// Absolute expiry in unix ms; 0 = persistent.
    pub expire_at: u64,
    /// HLC stamp of the last write (see `hlc.rs`).
    pub version: u64,
    /// LRU clock (seconds, wrapping) of the last access, for OBJECT IDLETIME.
    pub lru: u32,
    /// Logarithmic access counter, for OBJECT FREQ.
    pub lfu: u8,
}

impl Entry {
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expire_at != 0 && self.expire_at <= now_ms
    }
}

/// One shard: a hash table and the expiry index of its volatile keys.
#[derive(Default)]
pub struct Shard {
    table: HashTable<Entry>,
    expires: BTreeSet<(u64, u64)>,
}

/// Pads a shard to its own cache lines so neighbouring locks don't false-share.
#[repr(align(128))]
pub struct PaddedShard(pub Mutex<Shard>);

/// The hasher shared by every shard (random seed per process).
#[derive(Clone, Default)]
pub struct KeyHasher(hashbrown::DefaultHashBuilder);

impl KeyHasher {
    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.0.hash_one(key)
    }
}

/// Where a key lives: its hash and shard index.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    pub hash: u64,
    pub shard: usize,
}

impl Shard {
    pub fn len(&self) -> usize {
        self.table.len()
    }
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
    pub fn volatile_len(&self) -> usize {
        self.expires.len()
    }

    /// Finds a live key. An expired key is removed and returned in `Err` so
    /// the caller can propagate its deletion (lazy expiry).
    #[inline]
    pub fn lookup(&mut self, hasher: &KeyHasher, hash: u64, key: &[u8], now_ms: u64) -> Lookup<'_> {
        let expired = match self.table.find(hash, |e| &*e.key == key) {
            None => return Lookup::Missing,
            Some(e) => e.is_expired(now_ms),
        };
        if expired {
            let e = self.remove(hasher, hash, key).expect("found above");
            return Lookup::Expired(e);
        }
        Lookup::Found(
            self.table
                .find_mut(hash, |e| &*e.key == key)
                .expect("found above"),
        )
    }

    /// The entry for `key`, mutable, without expiry checks.
    #[inline]
    pub fn find_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut Entry> {
        self.table.find_mut(hash, |e| &*e.key == key)
    }

    /// The entry for `key` without expiry checks.
    pub fn get_raw(&self, hash: u64, key: &[u8]) -> Option<&Entry> {
        self.table.find(hash, |e| &*e.key == key)
    }

    /// Inserts or replaces an entry; returns the previous one.
    pub fn insert(&mut self, hasher: &KeyHasher, hash: u64, entry: Entry) -> Option<Entry> {
        if entry.expire_at != 0 {
            self.expires.insert((entry.expire_at, hash));
        }
        let old = match self.table.find_mut(hash, |e| e.key == entry.key) {
            Some(slot) => Some(std::mem::replace(slot, entry)),
            None => {
                self.table
                    .insert_unique(hash, entry, |e| hasher.hash(&e.key));
                None
            }
        };
        if let Some(o) = &old {
            if o.expire_at != 0 {
                self.unindex_expire(hasher, hash, o.expire_at);
            }
        }
        old
    }

    /// Removes `key`, returning its entry.
    pub fn remove(&mut self, hasher: &KeyHasher, hash: u64, key: &[u8]) -> Option<Entry> {
        let e = match self.table.find_entry(hash, |e| &*e.key == key) {
            Ok(occ) => occ.remove().0,
            Err(_) => return None,
        };
        if e.expire_at != 0 {
            self.unindex_expire(hasher, hash, e.expire_at);
        }
        Some(e)
    }

    /// Sets or clears (`at == 0`) the expiry of an existing key.
    pub fn set_expire(&mut self, hasher: &KeyHasher, hash: u64, key: &[u8], at: u64) -> bool {
        let Some(e) = self.table.find_mut(hash, |e| &*e.key == key) else {
            return false;
        };
        let old = std::mem::replace(&mut e.expire_at, at);
        if old != 0 {
            self.unindex_expire(hasher, hash, old);
        }
        if at != 0 {
            self.expires.insert((at, hash));
        }
        true
    }

    /// Drops the index entry `(at, hash)` unless another key with the same
    /// hash and expiry still needs it.
    fn unindex_expire(&mut self, _hasher: &KeyHasher, hash: u64, at: u64) {
        let still_needed = self.table.iter_hash(hash).any(|e| e.expire_at == at);
        if !still_needed {
            self.expires.remove(&(at, hash));
        }
    }

    /// Removes up to `max` keys whose expiry is due, calling `on_expired` for
    /// each. Returns how many were removed and whether more are due.
    pub fn expire_due(
        &mut self,
        _hasher: &KeyHasher,
        now_ms: u64,
        max: usize,
        mut on_expired: impl FnMut(Entry),
    ) -> (usize, bool) {
        let mut n = 0;
        while n < max {
            let Some(&(at, hash)) = self.expires.first() else {
                return (n, false);
            };
            if at > now_ms {
                return (n, false);
            }
            self.expires.pop_first();
            while let Ok(occ) = self.table.find_entry(hash, |e| e.expire_at == at) {
                on_expired(occ.remove().0);
                n += 1;
            }
        }
        let more = self.expires.first().is_some_and(|&(at, _)| at <= now_ms);
        (n, more)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.table.iter()
    }

    /// The `n`-th entry in table order (for RANDOMKEY).
    pub fn nth(&self, n: usize) -> Option<&Entry> {
        self.table.iter().nth(n)
    }

    /// Removes every key; returns the old contents (to drop elsewhere for ASYNC).
    pub fn take_all(&mut self) -> Shard {
        std::mem::take(self)
    }

    /// Keeps only entries for which `keep` is true (used by lazy sweeps).
    pub fn retain(&mut self, hasher: &KeyHasher, mut keep: impl FnMut(&Entry) -> bool) {
        let mut dropped = vec![];
        self.table.retain(|e| {
            let k = keep(e);
            if !k && e.expire_at != 0 {
                dropped.push((e.expire_at, hasher.hash(&e.key)));
            }
            k
        });
        for d in dropped {
            self.expires.remove(&d);
        }
    }
}

/// Result of [`Shard::lookup`].
pub enum Lookup<'a> {
    Found(&'a mut Entry),
    Expired(Entry),
    Missing,
}

/// One database: [`SHARDS`] locked shards.
pub struct Db {
    shards: Box<[PaddedShard]>,
}

impl Default for Db {
    fn default() -> Self {
        Db {
            shards: (0..SHARDS)
                .map(|_| PaddedShard(Mutex::new(Shard::default())))
                .collect(),
        }
    }
}

impl Db {
    #[inline]
    pub fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        self.shards[shard].0.lock()
    }

    /// Locks every shard in index order.
    pub fn lock_all(&self) -> Vec<MutexGuard<'_, Shard>> {
        self.shards.iter().map(|s| s.0.lock()).collect()
    }

    /// Number of keys (locks shards one at a time: a snapshot per shard).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn volatile_len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().volatile_len()).sum()
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
        // High-middle bits pick the shard; hashbrown uses the low bits for the
        // bucket and the top 7 for its tag, so the three stay independent.
        Slot {
            hash,
            shard: ((hash >> 32) as usize) & (SHARDS - 1),
        }
    }

    /// Locks the shards of `keys` in one database, in ascending order.
    pub fn lock_keys<'a, I>(&'a self, db: usize, keys: I) -> MultiLock<'a>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let mut idx: Vec<usize> = keys.into_iter().map(|k| self.slot(k).shard).collect();
        idx.sort_unstable();
        idx.dedup();
        let d = self.db(db);
        MultiLock {
            guards: idx.into_iter().map(|i| (i, d.lock(i))).collect(),
        }
    }

    /// Swaps the contents of two databases atomically (SWAPDB).
    pub fn swap_dbs(&self, a: usize, b: usize) {
        if a == b {
            return;
        }
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let mut ga = self.db(lo).lock_all();
        let mut gb = self.db(hi).lock_all();
        for (x, y) in ga.iter_mut().zip(gb.iter_mut()) {
            std::mem::swap(&mut **x, &mut **y);
        }
    }

    /// Total keys across databases.
    pub fn total_keys(&self) -> usize {
        self.dbs.iter().map(|d| d.len()).sum()
    }
}

/// Guards for a set of shards of one database, held together.
pub struct MultiLock<'a> {
    guards: Vec<(usize, MutexGuard<'a, Shard>)>,
}

impl<'a> MultiLock<'a> {
    /// The locked shard with index `shard` (must be one that was locked).
    pub fn shard(&mut self, shard: usize) -> &mut Shard {
        let i = self
            .guards
            .binary_search_by_key(&shard, |g| g.0)
            .expect("shard was locked");
        &mut self.guards[i].1
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
    ) -> (MutexGuard<'_, Shard>, Option<MutexGuard<'_, Shard>>) {
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
    pub fn lock_everything(&self) -> Vec<Vec<MutexGuard<'_, Shard>>> {
        self.dbs.iter().map(|d| d.lock_all()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(k: &str, exp: u64) -> Entry {
        Entry {
            key: k.as_bytes().into(),
            value: Value::string(b"v"),
            expire_at: exp,
            version: 1,
            lru: 0,
            lfu: 0,
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
        let (n, more) = shard.expire_due(&ks.hasher, 400, 10, |e| gone.push(e.key));
        assert_eq!((n, more), (1, false));
        assert_eq!(gone, vec![Box::from(&b"c"[..])]);
        assert_eq!(shard.len(), 2);
        assert_eq!(shard.volatile_len(), 1);
        let sd = ks.slot(b"d");
        shard.set_expire(&ks.hasher, sd.hash, b"d", 0);
        assert_eq!(shard.volatile_len(), 0);
    }
}
