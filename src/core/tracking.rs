//! The client-side caching registry (`CLIENT TRACKING`): which clients
//! track which keys, BCAST prefixes, and invalidations held back until a
//! command's reply is out. The design, the hooks that feed it and the
//! CLIENT TRACKING commands are in `commands/tracking.rs`; the registry
//! lives here because the core holds it.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

/// One client's tracking settings.
#[derive(Default, Clone)]
pub(crate) struct Settings {
    pub(crate) redirect: u64,
    pub(crate) bcast: bool,
    pub(crate) optin: bool,
    pub(crate) optout: bool,
    pub(crate) noloop: bool,
    pub(crate) prefixes: BTreeSet<Vec<u8>>,
    /// CLIENT CACHING yes (OPTIN) / no (OPTOUT) for the next command.
    pub(crate) caching: bool,
    /// A message could not be sent because the redirect client is gone.
    pub(crate) broken: bool,
}

/// A BCAST prefix: its clients and the keys written since the last flush,
/// each with the id of the client that wrote it last (0: none, as expiry).
#[derive(Default)]
pub(crate) struct Prefix {
    pub(crate) clients: BTreeSet<u64>,
    pub(crate) pending: BTreeMap<Vec<u8>, u64>,
}

/// Everything but the tracking table, under one lock.
#[derive(Default)]
pub(crate) struct Inner {
    pub(crate) clients: HashMap<u64, Settings>,
    pub(crate) prefixes: BTreeMap<Vec<u8>, Prefix>,
    /// Invalidations held until the end of client id's command (None: flush).
    pub(crate) deferred: HashMap<u64, Vec<Option<Vec<u8>>>>,
}

/// Shards of the tracking table (key name → ids of clients that read it).
pub(crate) const TABLE_SHARDS: usize = 16;
pub(crate) type TableShard = HashMap<Vec<u8>, HashSet<u64>>;

/// The server-wide tracking registry.
pub struct Tracking {
    pub(crate) active: AtomicUsize,
    /// Clients with a CLIENT CACHING flag set.
    pub(crate) caching: AtomicUsize,
    /// Clients with deferred invalidations.
    pub(crate) deferred: AtomicUsize,
    /// BCAST prefixes registered: writes skip the prefix table at 0.
    pub(crate) nprefixes: AtomicUsize,
    pub(crate) bcast_pending: AtomicBool,
    /// (key, client) pairs in the table (INFO tracking_total_items).
    pub(crate) items: AtomicUsize,
    /// Keys in the table: what `tracking-table-max-keys` limits, read
    /// before every command while some client tracks.
    pub(crate) keys: AtomicUsize,
    pub(crate) inner: Mutex<Inner>,
    /// Sharded by key hash, so writes to untracked keys while some client
    /// tracks only take one shard's lock. Never held with `inner`.
    pub(crate) table: [Mutex<TableShard>; TABLE_SHARDS],
}

impl Default for Tracking {
    fn default() -> Self {
        Tracking {
            active: AtomicUsize::new(0),
            caching: AtomicUsize::new(0),
            deferred: AtomicUsize::new(0),
            nprefixes: AtomicUsize::new(0),
            bcast_pending: AtomicBool::new(false),
            items: AtomicUsize::new(0),
            keys: AtomicUsize::new(0),
            inner: Mutex::default(),
            table: std::array::from_fn(|_| Mutex::default()),
        }
    }
}

/// What an invalidation message carries.
#[derive(Clone, Copy)]
pub(crate) enum Payload<'a> {
    Keys(&'a [&'a [u8]]),
    /// FLUSHALL / FLUSHDB: null, in the tracking client's protocol.
    Flush,
}

impl Tracking {
    pub fn active(&self) -> bool {
        self.active.load(Relaxed) > 0
    }

    pub(crate) fn shard(&self, key: &[u8]) -> &Mutex<TableShard> {
        use std::hash::{BuildHasher, BuildHasherDefault};
        type H = BuildHasherDefault<std::collections::hash_map::DefaultHasher>;
        let h = H::default().hash_one(key);
        &self.table[(h as usize) % TABLE_SHARDS]
    }

    /// Removes `key` from the table: the ids that tracked it, sorted.
    pub(crate) fn take_key(&self, key: &[u8]) -> Option<Vec<u64>> {
        let ids = self.shard(key).lock().remove(key)?;
        self.items.fetch_sub(ids.len(), Relaxed);
        self.keys.fetch_sub(1, Relaxed);
        let mut ids: Vec<u64> = ids.into_iter().collect();
        ids.sort_unstable();
        Some(ids)
    }

    pub(crate) fn clear_table(&self) {
        for s in &self.table {
            let mut s = s.lock();
            self.items
                .fetch_sub(s.values().map(|x| x.len()).sum(), Relaxed);
            self.keys.fetch_sub(s.len(), Relaxed);
            *s = HashMap::new();
        }
    }

    /// Turns tracking off for a client (CLIENT TRACKING off, RESET,
    /// disconnect). Its ids stay in the tracking table, as in Redis.
    pub fn remove_client(&self, id: u64) {
        if !self.active() {
            return;
        }
        let mut g = self.inner.lock();
        let Some(s) = g.clients.remove(&id) else {
            return;
        };
        let last = self.active.fetch_sub(1, Relaxed) == 1;
        if s.caching {
            self.caching.fetch_sub(1, Relaxed);
        }
        if g.deferred.remove(&id).is_some() {
            self.deferred.fetch_sub(1, Relaxed);
        }
        for p in &s.prefixes {
            let empty = g.prefixes.get_mut(p).is_some_and(|x| {
                x.clients.remove(&id);
                x.clients.is_empty()
            });
            if empty {
                g.prefixes.remove(p);
                self.nprefixes.fetch_sub(1, Relaxed);
            }
        }
        drop(g);
        if last {
            // Nobody tracks: writes stop reaching the table (the hooks cost
            // nothing then), so its ids, all stale now, are dropped.
            self.clear_table();
        }
    }

    /// The redirect of a tracking client (0 = none); None when not tracking.
    pub fn redirect_of(&self, id: u64) -> Option<u64> {
        if !self.active() {
            return None;
        }
        self.inner.lock().clients.get(&id).map(|s| s.redirect)
    }

    /// (tracking clients, tracked keys, BCAST prefixes) for INFO.
    pub fn stats(&self) -> (usize, usize, usize) {
        let keys = self.table.iter().map(|s| s.lock().len()).sum();
        let g = self.inner.lock();
        (g.clients.len(), keys, g.prefixes.len())
    }

    /// INFO tracking_total_items: (key, client) pairs in the tracking table.
    pub fn total_items(&self) -> usize {
        self.items.load(Relaxed)
    }
}
