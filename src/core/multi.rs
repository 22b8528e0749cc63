//! The state of MULTI and WATCH: a client's open transaction (its queued
//! commands) and the registry of watched keys that writers consult. The
//! commands (MULTI, EXEC, WATCH ...) and how writes touch the registry are
//! in `commands/multi.rs`; the state lives here because the client state
//! and the core hold it.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::Mutex;

use super::table::CommandId;
use super::Core;
use crate::keyspace::KeyHasher;
use crate::protocol::Args;

/// A client's open transaction.
#[derive(Default)]
pub struct MultiState {
    pub(crate) queue: Vec<Queued>,
    /// A command was rejected while queueing: EXEC answers EXECABORT.
    pub(crate) aborted: bool,
    /// The queued commands' memory (client eviction, `core/client_mem.rs`).
    pub(crate) bytes: usize,
}

/// One queued command, its arguments copied out of the query buffer.
pub(crate) struct Queued {
    pub(crate) id: CommandId,
    pub(crate) flat: Vec<u8>,
    pub(crate) spans: Vec<Range<usize>>,
}

impl Queued {
    pub(crate) fn new(id: CommandId, args: Args) -> Queued {
        let mut flat = Vec::new();
        let mut spans = Vec::with_capacity(args.len());
        for a in args.iter() {
            spans.push(flat.len()..flat.len() + a.len());
            flat.extend_from_slice(a);
        }
        Queued { id, flat, spans }
    }
    pub(crate) fn args(&self) -> Args<'_> {
        Args::new(&self.flat, &self.spans)
    }
}

/// One client's watch of one key, as the registry sees it.
pub(crate) struct WatchEntry {
    /// The watching client's dirty flag (shared by all its watched keys).
    pub(crate) dirty: Arc<AtomicBool>,
    /// The key was logically present (existing, not expired) at WATCH.
    pub(crate) present: bool,
}

/// The watchers of each watched key of one database.
pub(crate) type DbWatches = HashMap<Vec<u8>, Vec<Arc<WatchEntry>>>;

/// Every watched key, for writers to mark their watchers dirty. Split in
/// stripes by key hash so writers on different threads rarely meet on one
/// mutex while someone watches.
pub struct WatchRegistry {
    /// Keys registered: 0 means nobody watches and writers skip the hook.
    pub(crate) count: AtomicUsize,
    pub(crate) hasher: KeyHasher,
    pub(crate) stripes: Box<[Mutex<HashMap<usize, DbWatches>>]>,
}

pub(crate) const STRIPES: usize = 64;

impl Default for WatchRegistry {
    fn default() -> Self {
        WatchRegistry {
            count: AtomicUsize::new(0),
            hasher: KeyHasher::default(),
            stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
        }
    }
}

impl WatchRegistry {
    /// Whether anyone watches a key (one relaxed load).
    #[inline]
    pub fn active(&self) -> bool {
        self.count.load(Relaxed) != 0
    }

    pub(crate) fn stripe(&self, key: &[u8]) -> &Mutex<HashMap<usize, DbWatches>> {
        &self.stripes[self.hasher.hash(key) as usize % STRIPES]
    }

    pub(crate) fn add(&self, db: usize, key: &[u8], e: Arc<WatchEntry>) {
        let mut map = self.stripe(key).lock();
        let keys = map.entry(db).or_default();
        match keys.get_mut(key) {
            Some(v) => v.push(e),
            None => {
                keys.insert(key.to_vec(), vec![e]);
                self.count.fetch_add(1, Relaxed);
            }
        }
    }

    pub(crate) fn remove(&self, db: usize, key: &[u8], e: &Arc<WatchEntry>) {
        let mut map = self.stripe(key).lock();
        let Some(keys) = map.get_mut(&db) else { return };
        let Some(v) = keys.get_mut(key) else { return };
        v.retain(|x| !Arc::ptr_eq(x, e));
        if v.is_empty() {
            keys.remove(key);
            self.count.fetch_sub(1, Relaxed);
        }
    }

    /// A write to `key`: its watchers become dirty. For the deletion of an
    /// expired key (`expiry`), only those that saw it present.
    pub fn touch_key(&self, db: usize, key: &[u8], expiry: bool) {
        let map = self.stripe(key).lock();
        let Some(v) = map.get(&db).and_then(|keys| keys.get(key)) else {
            return;
        };
        for e in v {
            if !expiry || e.present {
                e.dirty.store(true, Relaxed);
            }
        }
    }

    /// A whole database was emptied or swapped: the watchers of keys that
    /// were present at WATCH become dirty (keys absent then that were
    /// created since are dirty already; a stale key's removal changes
    /// nothing, as in Redis 7).
    pub fn touch_db(&self, db: Option<usize>) {
        for stripe in self.stripes.iter() {
            let map = stripe.lock();
            for (_, keys) in map.iter().filter(|(d, _)| db.is_none_or(|x| **d == x)) {
                for e in keys.values().flatten().filter(|e| e.present) {
                    e.dirty.store(true, Relaxed);
                }
            }
        }
    }

    /// The deletion of an expired key (lazy or active expiry).
    pub fn touch_expired(&self, db: usize, key: &[u8]) {
        if self.active() {
            self.touch_key(db, key, true);
        }
    }
}

/// One watched key, as its client recorded it.
pub(crate) struct Watched {
    pub(crate) db: usize,
    pub(crate) key: Vec<u8>,
    /// Version if the key was present at WATCH.
    pub(crate) version: Option<u64>,
    pub(crate) entry: Arc<WatchEntry>,
}

/// A client's watched keys; dropping it (UNWATCH, EXEC, DISCARD, RESET,
/// disconnection) unregisters them.
pub struct Watches {
    pub(crate) reg: Arc<WatchRegistry>,
    pub(crate) dirty: Arc<AtomicBool>,
    pub(crate) keys: Vec<Watched>,
}

impl Watches {
    /// Whether the transaction must abort. Called with the watched keys'
    /// shards held.
    pub(crate) fn broken(&self, srv: &Core, now_ms: u64) -> bool {
        if self.dirty.load(Relaxed) {
            return true;
        }
        let ks = &srv.keyspace;
        self.keys.iter().any(|k| {
            let slot = ks.slot(&k.key);
            let g = ks.db(k.db).lock(slot.shard);
            let now = match g.get_raw(slot.hash, &k.key) {
                Some(e) if !e.is_expired(now_ms) => Some(e.version),
                _ => None,
            };
            now != k.version
        })
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        for k in &self.keys {
            self.reg.remove(k.db, &k.key, &k.entry);
        }
    }
}
