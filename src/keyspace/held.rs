//! Shard locks held across several commands (EXEC), and the guard type
//! every shard lock goes through.
//!
//! A transaction must run its queued commands atomically, yet each handler
//! locks its own shards through [`Db::lock`](super::Db::lock) (directly or via
//! `Ctx::open`). parking_lot mutexes are not reentrant, so EXEC first locks
//! every shard the transaction may touch, in the global (db, shard) order,
//! with [`Keyspace::hold`](super::Keyspace::hold), which also records the held
//! mutexes in a thread-local set. While that set is installed, a lock request
//! on this thread for a held shard returns a [`ShardGuard::Borrowed`] view of
//! the data instead of locking again; dropping it unlocks nothing. Other
//! threads still block on the real mutex, which EXEC keeps until it is done.
//!
//! The set is per thread and only installed during EXEC, which runs
//! synchronously on its worker thread (no `.await` in between), so no other
//! task on the thread can observe it. With no set installed, a lock costs
//! one thread-local `Cell<bool>` read more than a bare mutex lock.

use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};

use parking_lot::{Mutex, MutexGuard};

use super::Shard;

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// Addresses of the held mutexes, sorted; `everything` covers all.
    static HELD: RefCell<(bool, Vec<usize>)> = const { RefCell::new((false, Vec::new())) };
}

/// A locked shard: owned (a real lock) or borrowed from the locks EXEC holds.
pub enum ShardGuard<'a> {
    Owned(MutexGuard<'a, Shard>),
    Borrowed(&'a mut Shard),
}

impl Deref for ShardGuard<'_> {
    type Target = Shard;
    #[inline]
    fn deref(&self) -> &Shard {
        match self {
            ShardGuard::Owned(g) => g,
            ShardGuard::Borrowed(s) => s,
        }
    }
}

impl DerefMut for ShardGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Shard {
        match self {
            ShardGuard::Owned(g) => g,
            ShardGuard::Borrowed(s) => s,
        }
    }
}

/// Locks `m`, or borrows it if this thread's EXEC already holds it.
#[inline]
pub fn lock(m: &Mutex<Shard>) -> ShardGuard<'_> {
    if ACTIVE.with(|a| a.get()) {
        return lock_in_exec(m);
    }
    ShardGuard::Owned(m.lock())
}

#[cold]
fn lock_in_exec(m: &Mutex<Shard>) -> ShardGuard<'_> {
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
    ShardGuard::Owned(m.lock())
}

fn is_held(m: &Mutex<Shard>) -> bool {
    let addr = m as *const _ as usize;
    HELD.with(|h| {
        let h = h.borrow();
        h.0 || h.1.binary_search(&addr).is_ok()
    })
}

/// Locks held by EXEC; while alive, lock requests on this thread for these
/// shards borrow them. Dropping it uninstalls the set, then unlocks.
pub struct Hold<'a> {
    guards: Vec<MutexGuard<'a, Shard>>,
}

impl<'a> Hold<'a> {
    /// Locks `mutexes` (already in the global lock order, no duplicates)
    /// and installs them as this thread's held set. `everything` says they
    /// are every shard of every database.
    pub(super) fn new(mutexes: Vec<&'a Mutex<Shard>>, everything: bool) -> Hold<'a> {
        assert!(!ACTIVE.with(|a| a.get()), "nested shard hold");
        let mut addrs: Vec<usize> = if everything {
            Vec::new()
        } else {
            mutexes.iter().map(|m| *m as *const _ as usize).collect()
        };
        let guards = mutexes.into_iter().map(|m| m.lock()).collect();
        addrs.sort_unstable();
        HELD.with(|h| *h.borrow_mut() = (everything, addrs));
        ACTIVE.with(|a| a.set(true));
        Hold { guards }
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(false));
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            h.0 = false;
            h.1.clear();
        });
        self.guards.clear();
    }
}
