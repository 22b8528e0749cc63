//! Lazy freeing (Redis's lazyfree.c): big values and flushed databases are
//! dropped on a background thread, so a worker never stalls for the
//! milliseconds it takes to free millions of allocations.
//!
//! Who asks: UNLINK always, DEL with `lazyfree-lazy-user-del`, keys the
//! expiry removes with `lazyfree-lazy-expire`, FLUSHALL/FLUSHDB ASYNC (or
//! with `lazyfree-lazy-user-flush`). A value goes to the thread only when
//! freeing it is real work: more than [`LAZYFREE_THRESHOLD`] allocations
//! ([`Value::free_effort`], Redis's lazyfreeGetFreeEffort); small ones are
//! cheaper to drop in place than to hand over.
//!
//! The thread starts on first use and lives for the process. The counters
//! are INFO's `lazyfree_pending_objects` and `lazyfreed_objects` (a flushed
//! database counts its keys, as Redis does).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, OnceLock};

use super::{Entry, Shard};

/// Values needing more allocations than this to free go to the thread.
pub(crate) const LAZYFREE_THRESHOLD: usize = 64;

/// What the thread drops: (the data, how many objects it counts as).
struct Garbage {
    objects: u64,
    _data: Data,
}

/// Held only to be dropped on the thread, never read.
#[allow(dead_code)]
enum Data {
    Entry(Entry),
    Shards(Vec<Shard>),
}

#[derive(Default)]
struct Counters {
    pending: AtomicU64,
    freed: AtomicU64,
}

#[derive(Default)]
pub struct LazyFree {
    tx: OnceLock<Option<Sender<Garbage>>>,
    counters: Arc<Counters>,
}

impl LazyFree {
    /// Frees `entry`, on the background thread if that is worth it.
    pub fn free_entry(&self, entry: Entry) {
        if entry.value.free_effort() > LAZYFREE_THRESHOLD {
            self.send(Data::Entry(entry), 1);
        }
    }

    /// Frees the shards a flush took, on the background thread.
    pub fn free_shards(&self, shards: Vec<Shard>) {
        let keys: u64 = shards.iter().map(|s| s.len() as u64).sum();
        if keys > 0 {
            self.send(Data::Shards(shards), keys);
        }
    }

    /// Objects handed over and not freed yet.
    pub fn pending(&self) -> u64 {
        self.counters.pending.load(Relaxed)
    }

    /// Objects freed by the thread since start (or CONFIG RESETSTAT).
    pub fn freed(&self) -> u64 {
        self.counters.freed.load(Relaxed)
    }

    /// CONFIG RESETSTAT (Redis's lazyfreeResetStats).
    pub fn reset_freed(&self) {
        self.counters.freed.store(0, Relaxed);
    }

    fn send(&self, data: Data, objects: u64) {
        let Some(tx) = self.tx.get_or_init(|| self.start()) else {
            return; // no thread: dropped here
        };
        self.counters.pending.fetch_add(objects, Relaxed);
        let garbage = Garbage {
            objects,
            _data: data,
        };
        if let Err(e) = tx.send(garbage) {
            self.counters.pending.fetch_sub(objects, Relaxed);
            drop(e);
        }
    }

    fn start(&self) -> Option<Sender<Garbage>> {
        let (tx, rx) = channel::<Garbage>();
        let counters = self.counters.clone();
        std::thread::Builder::new()
            .name("lattice-lazyfree".into())
            .spawn(move || {
                for garbage in rx {
                    let n = garbage.objects;
                    drop(garbage);
                    counters.pending.fetch_sub(n, Relaxed);
                    counters.freed.fetch_add(n, Relaxed);
                }
            })
            .ok()?;
        Some(tx)
    }
}
