//! Clients blocked on keys (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP; and
//! BZPOPMIN & co. through the same API), Redis's blocked.c.
//!
//! Design: command handlers stay synchronous. A blocking handler that finds
//! nothing to serve calls `commands::blocking::block_on` **while still holding the locks of
//! its keys**: that registers a waiter in the server's [`Registry`] (one FIFO
//! per (db, key), ordered by a ticket taken when the client first blocked)
//! and stores a [`BlockRequest`] in the client's [`BlockSlot`]; the handler
//! writes no reply. The connection task (`conn.rs`, `block_wait`) then
//! awaits the waiter's wake-up, the deadline, a kill, or the peer closing,
//! and on a wake-up re-runs the command with [`BlockSlot::retry`] set, so
//! that if it must block again (another client took the element first) it
//! keeps its ticket (its place in line) and its original deadline. On the
//! deadline it replies a null array (`*-1` / `_`), as Redis does.
//!
//! A write makes a key ready with `ctx.signal_ready(db, key)` (call it while
//! holding the key's lock, after the write): that wakes the first waiter on
//! the key and takes it off that key's queue. A served client passes the
//! wake-up on ([`Registry::signal_keys`]) so a push of several elements
//! serves several waiters in order; a waiter woken but timed out does too.
//! Registering under the key lock and signalling after the write means no
//! wake-up is lost between "found nothing" and "waiting".
//!
//! Ordering as in Redis, where blocked clients are served before the next
//! command runs: a wake-up stays "in flight" until the woken client re-ran
//! (a [`WakeToken`]), and the connection that made the write waits for
//! in-flight wake-ups to settle (bounded, [`Registry::settle`]) before its
//! reply goes out, so a client that pushes and then reads sees the blocked
//! clients already served (chains of BLMOVEs included).
//!
//! CLIENT UNBLOCK finds the waiter by client id ([`Registry::unblock`]) and
//! ends the wait as a timeout or with Redis's UNBLOCKED error.
//!
//! Lock order: a shard lock may be held while taking the registry's locks,
//! never the reverse.
//! Cleanup: the registration is a [`WaitGuard`] whose `Drop` removes the
//! waiter from every queue, so a client that disconnects, is killed, or
//! whose task is dropped leaves nothing behind. Clients that may not block
//! (inside MULTI/EXEC or a script: set [`BlockSlot::deny`]; replays and
//! in-process runs, which have no connection) get the timeout reply at once;
//! `commands::blocking::may_block` tells a handler which case it is in.
//!
//! Use from another family (e.g. BZPOPMIN): parse the timeout with
//! `commands::blocking::parse_timeout`, try to serve under `ctx.open_many(keys)`; if nothing,
//! call `block_on(ctx, args, keys, deadline)` before dropping the locks, and
//! if [`may_block`] is false reply what Redis replies for a timeout.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Per-client blocking state (a field of `ClientState`).
#[derive(Default)]
pub struct BlockSlot {
    /// Set by a handler that must block; taken by the connection task.
    pub request: Option<BlockRequest>,
    /// While re-running a woken command: its ticket and deadline.
    pub retry: Option<(u64, u64)>,
    /// The client may not block (MULTI/EXEC, scripts): block_on is refused.
    pub deny: bool,
}

/// What a blocked client waits for.
pub struct BlockRequest {
    pub db: usize,
    pub keys: Vec<Vec<u8>>,
    /// Unix ms; 0 = forever.
    pub deadline_ms: u64,
    /// The command to re-run when woken.
    pub argv: Vec<Vec<u8>>,
    pub guard: WaitGuard,
}

/// One blocked client's wake-up.
pub struct Waiter {
    ticket: u64,
    notify: Notify,
    woken: AtomicBool,
    /// The wake-up's in-flight count was given back.
    released: AtomicBool,
    /// Set by CLIENT UNBLOCK: 1 = as a timeout, 2 = with an error.
    unblocked: AtomicU8,
}

impl Waiter {
    pub async fn wait(&self) {
        self.notify.notified().await
    }
    /// The place in line taken when the client first blocked.
    pub fn ticket(&self) -> u64 {
        self.ticket
    }
    /// Whether CLIENT UNBLOCK ended the wait: Some(true) with an error.
    pub fn unblocked(&self) -> Option<bool> {
        match self.unblocked.load(Relaxed) {
            0 => None,
            u => Some(u == 2),
        }
    }
    pub fn was_woken(&self) -> bool {
        self.woken.load(Relaxed)
    }
}

/// Waiters on each (db, key), in ticket order.
type Queues = HashMap<(usize, Vec<u8>), VecDeque<Arc<Waiter>>>;

#[derive(Default)]
struct Inner {
    queues: Mutex<Queues>,
    /// Registered waiters: signal_ready skips the lock when zero.
    count: AtomicUsize,
    /// Blocked clients by id, for CLIENT UNBLOCK.
    by_client: Mutex<HashMap<u64, Arc<Waiter>>>,
    /// Woken clients that have not re-run their command yet.
    inflight: AtomicUsize,
    /// Notified when `inflight` drops to zero.
    settled: Notify,
}

impl Inner {
    /// Gives back `w`'s in-flight wake-up, once.
    fn release(&self, w: &Waiter) {
        if !w.woken.load(Relaxed) || w.released.swap(true, Relaxed) {
            return;
        }
        if self.inflight.fetch_sub(1, Release) == 1 {
            self.settled.notify_waiters();
        }
    }
}

/// The server's waiters, by key.
#[derive(Default)]
pub struct Registry {
    inner: Arc<Inner>,
    tickets: AtomicU64,
}

/// A registration; dropping it removes the waiter from all its queues.
pub struct WaitGuard {
    client: u64,
    inner: Arc<Inner>,
    pub waiter: Arc<Waiter>,
    db: usize,
    keys: Vec<Vec<u8>>,
    /// The in-flight wake-up was handed to a [`WakeToken`].
    handed_over: bool,
}

/// Holds a woken client's in-flight wake-up until it has re-run.
pub struct WakeToken {
    inner: Arc<Inner>,
    waiter: Arc<Waiter>,
}

impl Drop for WakeToken {
    fn drop(&mut self) {
        self.inner.release(&self.waiter);
    }
}

impl WaitGuard {
    /// Unregisters the waiter, keeping its wake-up (if any) in flight until
    /// the returned token is dropped, after the re-run.
    pub fn finish(mut self) -> WakeToken {
        self.handed_over = true;
        WakeToken {
            inner: self.inner.clone(),
            waiter: self.waiter.clone(),
        }
    }
}

impl Registry {
    /// Registers a waiter on `keys` of `db`, in ticket order (a new ticket
    /// unless `ticket` is given, i.e. a retry keeping its place).
    pub fn register(
        &self,
        client: u64,
        db: usize,
        keys: &[Vec<u8>],
        ticket: Option<u64>,
    ) -> WaitGuard {
        let ticket = ticket.unwrap_or_else(|| self.tickets.fetch_add(1, Relaxed));
        let waiter = Arc::new(Waiter {
            ticket,
            notify: Notify::new(),
            woken: AtomicBool::new(false),
            released: AtomicBool::new(false),
            unblocked: AtomicU8::new(0),
        });
        let mut keys: Vec<Vec<u8>> = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        let mut q = self.inner.queues.lock();
        for k in &keys {
            let queue = q.entry((db, k.clone())).or_default();
            let at = queue.partition_point(|w| w.ticket < ticket);
            queue.insert(at, waiter.clone());
        }
        self.inner.count.fetch_add(1, Relaxed);
        drop(q);
        self.inner.by_client.lock().insert(client, waiter.clone());
        WaitGuard {
            client,
            inner: self.inner.clone(),
            waiter,
            db,
            keys,
            handed_over: false,
        }
    }

    /// Wakes the first client blocked on `key` of `db`, if any.
    pub fn signal(&self, db: usize, key: &[u8]) {
        if self.inner.count.load(Relaxed) == 0 {
            return;
        }
        let mut q = self.inner.queues.lock();
        let Some(queue) = q.get_mut(&(db, key.to_vec())) else {
            return;
        };
        if let Some(w) = queue.pop_front() {
            if !w.woken.swap(true, Relaxed) {
                self.inner.inflight.fetch_add(1, Release);
            }
            w.notify.notify_one();
        }
        if queue.is_empty() {
            q.remove(&(db, key.to_vec()));
        }
    }

    /// Wakes, on each of `keys`, the first waiter in line after `ticket`: a
    /// woken client that found nothing for it and blocked again passes the
    /// wake-up on, since what made the key ready may serve those behind it
    /// (a stream entry a consumer group took is still there for XREAD and
    /// for other groups). Tickets only grow along such a chain, so it ends.
    pub fn signal_after(&self, db: usize, keys: &[Vec<u8>], ticket: u64) {
        if self.inner.count.load(Relaxed) == 0 {
            return;
        }
        let mut q = self.inner.queues.lock();
        for k in keys {
            let id = (db, k.clone());
            let Some(queue) = q.get_mut(&id) else {
                continue;
            };
            let at = queue.partition_point(|w| w.ticket <= ticket);
            if let Some(w) = queue.remove(at) {
                if !w.woken.swap(true, Relaxed) {
                    self.inner.inflight.fetch_add(1, Release);
                }
                w.notify.notify_one();
            }
            if queue.is_empty() {
                q.remove(&id);
            }
        }
    }

    /// Passes a wake-up on to the next waiter of each key.
    pub fn signal_keys(&self, db: usize, keys: &[Vec<u8>]) {
        for k in keys {
            self.signal(db, k);
        }
    }

    /// Wakes the first waiter of every key of `db` (SWAPDB: any key may
    /// have changed; a woken client that finds nothing blocks again).
    pub fn signal_db(&self, db: usize) {
        if self.inner.count.load(Relaxed) == 0 {
            return;
        }
        let keys: Vec<Vec<u8>> = {
            let q = self.inner.queues.lock();
            q.keys()
                .filter(|(d, _)| *d == db)
                .map(|(_, k)| k.clone())
                .collect()
        };
        for k in keys {
            self.signal(db, &k);
        }
    }

    /// CLIENT UNBLOCK: ends client `id`'s wait as a timeout or (`error`)
    /// with an UNBLOCKED error. False if it is not blocked on keys.
    pub fn unblock(&self, id: u64, error: bool) -> bool {
        let by = self.inner.by_client.lock();
        let Some(w) = by.get(&id) else {
            return false;
        };
        w.unblocked.store(if error { 2 } else { 1 }, Relaxed);
        w.notify.notify_one();
        true
    }

    /// Whether woken clients have yet to re-run their command.
    pub fn busy(&self) -> bool {
        self.inner.inflight.load(Acquire) > 0
    }

    /// Waits (at most `max`) until every woken client has re-run its
    /// command: a write that wakes blocked clients replies after they were
    /// served, as in Redis, where they are served before the next command.
    pub async fn settle(&self, max: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + max;
        loop {
            let n = self.inner.settled.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if !self.busy() {
                return;
            }
            if tokio::time::timeout_at(deadline, n).await.is_err() {
                return;
            }
        }
    }

    /// Number of registered waiters.
    pub fn len(&self) -> usize {
        self.inner.count.load(Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        let mut q = self.inner.queues.lock();
        for k in &self.keys {
            let id = (self.db, k.clone());
            if let Some(queue) = q.get_mut(&id) {
                queue.retain(|w| !Arc::ptr_eq(w, &self.waiter));
                if queue.is_empty() {
                    q.remove(&id);
                }
            }
        }
        self.inner.count.fetch_sub(1, Relaxed);
        drop(q);
        let mut by = self.inner.by_client.lock();
        if by
            .get(&self.client)
            .is_some_and(|w| Arc::ptr_eq(w, &self.waiter))
        {
            by.remove(&self.client);
        }
        drop(by);
        if !self.handed_over {
            self.inner.release(&self.waiter);
        }
    }
}
