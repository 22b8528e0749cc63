//! Shard locks held across several commands (EXEC), and the guard type
//! every shard lock goes through.
//!
//! A transaction must run its queued commands atomically, yet each handler
//! locks its own shards through [`Db::lock`](super::Db::lock) (directly or via
//! `Ctx::open`). parking_lot mutexes are not reentrant, so EXEC first locks
//! every shard the transaction may touch, in the global (db, shard) order,
//! with [`Keyspace::hold`](super::Keyspace::hold), which also records the held
//! shards in a thread-local set. While that set is installed, a lock request
//! on this thread for a held shard returns a [`ShardGuard::Borrowed`] view of
//! the data instead of locking again; dropping it unlocks nothing. Other
//! threads still block on the real mutex, which EXEC keeps until it is done.
//! The set is exact: it holds the address spans of the shards locked (one
//! span per database when EXEC locks every shard), so a shard of any other
//! keyspace (a replica's staging keyspace, say) is still really locked.
//!
//! The set is per thread and only installed during EXEC, which runs
//! synchronously on its worker thread (no `.await` in between), so no other
//! task on the thread can observe it. With no set installed, a lock costs
//! one thread-local `Cell<bool>` read more than a bare mutex lock.
//!
//! Every shard lock also counts, per thread, the acquisitions that found the
//! mutex held and how long they waited ([`lock_wait`]): a try first, the
//! clock read only on that contended path, so an uncontended lock costs what
//! it did (bench/inproc.sh reports it per thread).

use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::AtomicU64;

use parking_lot::{Mutex, MutexGuard};

use super::{PaddedShard, Shard};

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// The address spans `[start, end)` of the runs of shards held, sorted.
    static HELD: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
    /// Shard locks this thread found held, and the nanoseconds it waited.
    static WAITED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// This thread's contended shard locks so far: how many, and the
/// nanoseconds spent waiting for them.
pub fn lock_wait() -> (u64, u64) {
    WAITED.with(Cell::get)
}

/// A thread's tally of contended locks: how many, and nanoseconds waited.
pub(crate) type Tally = std::thread::LocalKey<Cell<(u64, u64)>>;

/// Locks `m`, counting the wait in `tally` where another thread holds it
/// (shard locks here; the active stream's lock uses it too).
#[inline]
pub(crate) fn lock_tallied<'a, T>(m: &'a Mutex<T>, tally: &'static Tally) -> MutexGuard<'a, T> {
    match m.try_lock() {
        Some(g) => g,
        None => lock_contended(m, tally),
    }
}

#[cold]
fn lock_contended<'a, T>(m: &'a Mutex<T>, tally: &'static Tally) -> MutexGuard<'a, T> {
    let start = std::time::Instant::now();
    let g = m.lock();
    let ns = start.elapsed().as_nanos() as u64;
    tally.with(|w| {
        let (n, t) = w.get();
        w.set((n + 1, t + ns));
    });
    g
}

#[inline]
fn lock_counted(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    lock_tallied(m, &WAITED)
}

/// A locked shard: owned (a real lock, with the shard's prefetch hint) or
/// borrowed from the locks EXEC holds.
pub enum ShardGuard<'a> {
    Owned(MutexGuard<'a, Shard>, &'a AtomicU64),
    Borrowed(&'a mut Shard),
}

impl Drop for ShardGuard<'_> {
    /// An owned lock publishes where the shard's index is before it
    /// unlocks (`prefetch.rs`); a borrowed one leaves it to a later lock.
    #[inline]
    fn drop(&mut self) {
        if let ShardGuard::Owned(g, hint) = self {
            g.publish_hint(hint);
        }
    }
}

impl Deref for ShardGuard<'_> {
    type Target = Shard;
    #[inline]
    fn deref(&self) -> &Shard {
        match self {
            ShardGuard::Owned(g, _) => g,
            ShardGuard::Borrowed(s) => s,
        }
    }
}

impl DerefMut for ShardGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Shard {
        match self {
            ShardGuard::Owned(g, _) => g,
            ShardGuard::Borrowed(s) => s,
        }
    }
}

/// Whether this thread holds shards (EXEC's or a script's [`Hold`]).
pub(crate) fn holding() -> bool {
    ACTIVE.with(|a| a.get())
}

/// Locks `m`, or borrows it if this thread's EXEC already holds it.
#[inline]
pub(crate) fn lock<'a>(m: &'a Mutex<Shard>, hint: &'a AtomicU64) -> ShardGuard<'a> {
    if ACTIVE.with(|a| a.get()) {
        return lock_in_exec(m, hint);
    }
    ShardGuard::Owned(lock_counted(m), hint)
}

#[cold]
fn lock_in_exec<'a>(m: &'a Mutex<Shard>, hint: &'a AtomicU64) -> ShardGuard<'a> {
    if is_held(m) {
        // SAFETY: this thread holds `m`'s lock (EXEC's `Hold`, which keeps it
        // until after every command of the transaction returned, and never
        // touches the data itself meanwhile). A handler never has two guards
        // of one shard at a time (outside EXEC that would deadlock), so this
        // is the only live reference to the data; it cannot outlive the
        // handler, which returns before `Hold` is dropped.
        return ShardGuard::Borrowed(unsafe { &mut *m.data_ptr() });
    }
    // A command locked a shard EXEC did not plan for (`multi::plan_locks`
    // must then list it as needing every shard): locking out of order
    // risks a deadlock, so make it visible.
    crate::log_warning!("EXEC: a queued command locked a shard outside the transaction's plan");
    ShardGuard::Owned(lock_counted(m), hint)
}

/// Whether `m` is the mutex of a held shard: its address lies in a held
/// run. Exact, since the only `Mutex<Shard>` inside a run's memory are its
/// shards' own (a `Shard` cannot contain one).
fn is_held(m: &Mutex<Shard>) -> bool {
    let addr = m as *const _ as usize;
    HELD.with(|h| {
        let h = h.borrow();
        // The last span starting at or before `addr`.
        let i = h.partition_point(|s| s.0 <= addr);
        i > 0 && addr < h[i - 1].1
    })
}

/// Locks held by EXEC; while alive, lock requests on this thread for these
/// shards borrow them. Dropping it uninstalls the set, then unlocks.
pub struct Hold<'a> {
    guards: Vec<MutexGuard<'a, Shard>>,
}

impl<'a> Hold<'a> {
    /// Locks the shards of `runs` (each a run of adjacent shards: a whole
    /// database, or one shard; already in the global lock order, no shard
    /// twice) and installs them as this thread's held set.
    pub(super) fn new(runs: Vec<&'a [PaddedShard]>) -> Hold<'a> {
        assert!(!ACTIVE.with(|a| a.get()), "nested shard hold");
        let mut spans: Vec<(usize, usize)> = runs
            .iter()
            .map(|r| {
                let p = r.as_ptr_range();
                (p.start as usize, p.end as usize)
            })
            .collect();
        spans.sort_unstable();
        debug_assert!(
            spans.windows(2).all(|w| w[0].1 <= w[1].0),
            "overlapping runs"
        );
        let guards = runs
            .iter()
            .flat_map(|r| r.iter())
            .map(|s| lock_counted(&s.0))
            .collect();
        HELD.with(|h| *h.borrow_mut() = spans);
        ACTIVE.with(|a| a.set(true));
        Hold { guards }
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(false));
        HELD.with(|h| h.borrow_mut().clear());
        self.guards.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::super::Keyspace;
    use super::ShardGuard;

    fn borrowed(g: ShardGuard) -> bool {
        matches!(g, ShardGuard::Borrowed(_))
    }

    #[test]
    fn a_planned_hold_borrows_exactly_its_shards() {
        let ks = Keyspace::new(2);
        let hold = ks.hold(Some(&[(1, 7), (0, 3), (0, 3)]));
        assert!(borrowed(ks.db(0).lock(3)));
        assert!(borrowed(ks.db(1).lock(7)));
        assert!(!borrowed(ks.db(0).lock(7)));
        assert!(!borrowed(ks.db(1).lock(3)));
        assert!(!borrowed(ks.db(0).lock(4)));
        drop(hold);
        assert!(!borrowed(ks.db(0).lock(3)));
    }

    #[test]
    fn holding_everything_borrows_only_this_keyspaces_shards() {
        let ks = Keyspace::new(2);
        let other = Keyspace::new(1);
        let hold = ks.hold(None);
        assert!(borrowed(ks.db(0).lock(0)));
        assert!(borrowed(ks.db(1).lock(255)));
        // Another keyspace's shards are not held: they are really locked.
        assert!(!borrowed(other.db(0).lock(0)));
        assert!(!borrowed(other.db(0).lock(255)));
        drop(hold);
        assert!(!borrowed(ks.db(1).lock(255)));
    }
}
