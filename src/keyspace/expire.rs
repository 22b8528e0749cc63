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
//!
//! A cycle cut short by its budget remembers where it stopped (per worker
//! thread) and the next cycle resumes there, so under sustained load every
//! shard of every database gets its turn instead of the first ones only. The
//! clock is read after every shard that had due keys and every 32 shards
//! visited, so a cycle overruns its budget by at most one batch.
//!
//! A replica runs no such cycle: its master's DELs expire its keys. Only
//! the keys its own clients gave a TTL (a writable replica,
//! `replica-read-only no`) it expires itself, from [`ReplicaKeys`]
//! (Redis's slaveKeysWithExpire and expireSlaveKeys).

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::member_ttl::MembersGone;
use super::{Entry, Keyspace, SHARDS};

/// Keys removed per shard between two clock checks.
const BATCH: usize = 64;
/// Shards visited between two clock checks when none had due keys.
const CHECK_EVERY: usize = 32;

thread_local! {
    /// Where this thread's last cycle stopped: (worker, nworkers, position).
    static RESUME: Cell<(usize, usize, usize)> = const { Cell::new((usize::MAX, 0, 0)) };
}

/// Outcome of one cycle.
#[derive(Debug, Default, Clone, Copy)]
pub struct CycleStats {
    pub expired: usize,
    /// Whether due keys remain (the budget ran out).
    pub more_due: bool,
}

/// Runs one cycle over shards `worker, worker + nworkers, ...` of every db.
/// `on_expired(db, entry)` is called for each removed key, under its shard
/// lock, so the caller can propagate the deletion in order;
/// `on_members(db, gone)` likewise for each key that lost members to their
/// TTLs (`member_ttl.rs`; it returns the removal's stamp and whether an
/// emptied key leaves a tombstone). Keys and keys with due members share
/// the cycle's budget; a key losing members counts as one.
pub fn active_expire_cycle(
    ks: &Keyspace,
    worker: usize,
    nworkers: usize,
    now_ms: u64,
    budget: Duration,
    mut on_expired: impl FnMut(usize, Entry) -> Option<super::Tombstone>,
    mut on_members: impl FnMut(usize, &MembersGone) -> (u64, bool),
) -> CycleStats {
    let start = Instant::now();
    let mut st = CycleStats::default();
    let step = nworkers.max(1);
    let first = worker % step;
    // This worker's shards per database, and positions over all databases.
    let mine = (SHARDS - first).div_ceil(step);
    let total = mine * ks.num_dbs();
    let (w, n, resume) = RESUME.with(|r| r.get());
    let from = if (w, n) == (worker, nworkers) && resume < total {
        resume
    } else {
        0
    };
    for i in 0..total {
        let pos = (from + i) % total;
        let (db, shard) = (pos / mine, first + (pos % mine) * step);
        let d = ks.db(db);
        let mut removed_here = 0;
        loop {
            // A shard someone holds (a long script, EXEC) waits for the
            // next cycle rather than stall this worker.
            let Some(mut g) = d.try_lock(shard) else {
                break;
            };
            if g.volatile_len() == 0 && !g.has_member_due() {
                break;
            }
            let (k, more_keys) = g.expire_due(&ks.hasher, now_ms, BATCH, |e| on_expired(db, e));
            let (m, more_members) = match g.has_member_due() {
                true => g.expire_members_due(&ks.hasher, now_ms, BATCH, |m| on_members(db, m)),
                false => (0, false),
            };
            let more = more_keys || more_members;
            drop(g);
            removed_here += k + m;
            if !more {
                break;
            }
            if start.elapsed() >= budget {
                st.expired += removed_here;
                st.more_due = true;
                RESUME.with(|r| r.set((worker, nworkers, pos)));
                return st;
            }
        }
        st.expired += removed_here;
        let check = removed_here > 0 || i % CHECK_EVERY == CHECK_EVERY - 1;
        if check && i + 1 < total && start.elapsed() >= budget {
            // Not known to be due: the next cycle comes at the normal pace.
            RESUME.with(|r| r.set((worker, nworkers, (pos + 1) % total)));
            return st;
        }
    }
    RESUME.with(|r| r.set((worker, nworkers, 0)));
    st
}

/// A remembered key: (deadline, db, key).
type Remembered = (u64, usize, Box<[u8]>);

/// The keys a writable replica's own clients gave a TTL, which the
/// replica expires itself (its master knows nothing of them), by the
/// deadline they had when remembered: `(deadline, db, key)`. A key whose
/// TTL changed since is checked at its old deadline and remembered again
/// at its new one; one without a TTL or gone is forgotten.
#[derive(Default)]
pub struct ReplicaKeys {
    due: Mutex<BTreeSet<Remembered>>,
    /// The set's size, read without the lock by the cron.
    len: AtomicUsize,
}

impl ReplicaKeys {
    /// Remembers `key` of `db`, which expires at `at` (unix ms).
    pub fn remember(&self, db: usize, key: &[u8], at: u64) {
        let mut due = self.due.lock();
        due.insert((at, db, key.into()));
        self.len.store(due.len(), Relaxed);
    }

    pub fn is_empty(&self) -> bool {
        self.len.load(Relaxed) == 0
    }

    /// How many deadlines are remembered (INFO's
    /// `slave_expires_tracked_keys`; a key whose TTL a client changed is
    /// counted once per deadline until its old one has passed).
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// Forgets every key (the node is no longer a writable replica).
    pub fn clear(&self) {
        let mut due = self.due.lock();
        due.clear();
        self.len.store(0, Relaxed);
    }

    /// Removes the remembered keys due at `now_ms`, at most `limit`
    /// checked; `on_expired(db, entry)` is called for each, under its
    /// shard lock, as in [`active_expire_cycle`]. Returns how many.
    pub fn expire_due(
        &self,
        ks: &Keyspace,
        now_ms: u64,
        limit: usize,
        mut on_expired: impl FnMut(usize, Entry),
    ) -> usize {
        let mut expired = 0;
        for _ in 0..limit {
            let Some((_, db, key)) = self.pop_due(now_ms) else {
                break;
            };
            if db >= ks.num_dbs() {
                continue;
            }
            let slot = ks.slot(&key);
            let mut g = ks.db(db).lock(slot.shard);
            let at = g.get_raw(slot.hash, &key).map_or(0, |e| e.expire_at());
            if at == 0 {
                continue;
            }
            if at > now_ms {
                self.remember(db, &key, at);
                continue;
            }
            if let Some(e) = g.remove(&ks.hasher, slot.hash, &key) {
                on_expired(db, e);
                expired += 1;
            }
        }
        expired
    }

    /// Takes the earliest remembered key if it is due at `now_ms`.
    fn pop_due(&self, now_ms: u64) -> Option<Remembered> {
        let mut due = self.due.lock();
        if due.first().is_none_or(|f| f.0 > now_ms) {
            return None;
        }
        let first = due.pop_first();
        self.len.store(due.len(), Relaxed);
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::Value;

    fn fill(ks: &Keyspace, db: usize, n: usize, at: u64) {
        for i in 0..n {
            let key = format!("k{i}");
            let s = ks.slot(key.as_bytes());
            let e = Entry::new(key.as_bytes().into(), Value::string(b"v"), at, 1);
            ks.db(db).lock(s.shard).insert(&ks.hasher, s.hash, e);
        }
    }

    #[test]
    fn removes_due_keys_only_and_reports_them() {
        let ks = Keyspace::new(3);
        fill(&ks, 0, 500, 100);
        fill(&ks, 2, 300, 100);
        fill(&ks, 1, 200, 10_000);
        let mut seen = vec![0; 3];
        let st = active_expire_cycle(
            &ks,
            0,
            1,
            5_000,
            Duration::from_secs(5),
            |db, _| {
                seen[db] += 1;
                None
            },
            |_, _| (0, false),
        );
        assert_eq!(st.expired, 800);
        assert!(!st.more_due);
        assert_eq!(seen, vec![500, 0, 300]);
        assert_eq!(ks.db(0).len() + ks.db(2).len(), 0);
        assert_eq!(ks.db(1).len(), 200);
    }

    #[test]
    fn workers_split_the_shards_and_resume_after_budget() {
        let ks = Keyspace::new(2);
        fill(&ks, 0, 4000, 100);
        fill(&ks, 1, 4000, 100);
        // Two workers cover everything between them.
        let a = active_expire_cycle(
            &ks,
            0,
            2,
            5_000,
            Duration::from_secs(5),
            |_, _| None,
            |_, _| (0, false),
        );
        let b = active_expire_cycle(
            &ks,
            1,
            2,
            5_000,
            Duration::from_secs(5),
            |_, _| None,
            |_, _| (0, false),
        );
        assert_eq!(a.expired + b.expired, 8000);
        assert_eq!(ks.total_keys(), 0);
        // A zero budget still makes progress, and repeated cycles finish.
        fill(&ks, 1, 4000, 100);
        let mut total = 0;
        for _ in 0..10_000 {
            let st = active_expire_cycle(
                &ks,
                0,
                1,
                5_000,
                Duration::ZERO,
                |_, _| None,
                |_, _| (0, false),
            );
            assert!(st.expired <= BATCH, "a spent budget stops the cycle");
            total += st.expired;
            if ks.total_keys() == 0 {
                break;
            }
        }
        assert_eq!(total, 4000);
    }

    #[test]
    fn replica_keys_expire_when_due_and_follow_a_changed_ttl() {
        let ks = Keyspace::new(2);
        let keys = ReplicaKeys::default();
        let put = |key: &str, at: u64| {
            let s = ks.slot(key.as_bytes());
            let e = Entry::new(key.as_bytes().into(), Value::string(b"v"), at, 1);
            ks.db(1).lock(s.shard).insert(&ks.hasher, s.hash, e);
        };
        put("due", 100);
        put("later", 900);
        put("persisted", 0);
        put("moved", 900);
        keys.remember(1, b"due", 100);
        keys.remember(1, b"later", 900);
        keys.remember(1, b"persisted", 100);
        keys.remember(1, b"moved", 100);
        keys.remember(1, b"missing", 100);
        let mut seen = vec![];
        let n = keys.expire_due(&ks, 500, 100, |db, e| seen.push((db, e.key.to_vec())));
        assert_eq!((n, seen), (1, vec![(1, b"due".to_vec())]));
        assert_eq!(ks.db(1).len(), 3);
        // "moved" is remembered again at its new deadline, with "later".
        assert_eq!(keys.expire_due(&ks, 1000, 100, |_, _| {}), 2);
        assert_eq!(ks.db(1).len(), 1);
        assert!(keys.is_empty());
    }
}
