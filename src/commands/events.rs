//! What a write tells the rest of the server besides the effect stream:
//! keyspace notifications (`notify-keyspace-events`, Redis's notify.c) and
//! "key ready" signals that wake clients blocked on a list or sorted set
//! (Redis's signalKeyAsReady).
//!
//! Command families call these at the points Redis calls
//! notifyKeyspaceEvent / signalKeyAsReady, with Redis's event names
//! ("lpush", "hset", "zadd", "del", "expired", ...).
//! Notifications publish on `__keyspace@<db>__:<key>` (message: the event)
//! and `__keyevent@<db>__:<event>` (message: the key) through the pub/sub
//! registry, so they reach subscribers on any thread. The enabled classes
//! are an atomic mirrored from the config: with none enabled (the default)
//! a notification costs one load. Key-ready signals are filled in by the
//! blocking work; until then a no-op, so calling it is always correct.

use std::sync::atomic::Ordering::Relaxed;

use super::Ctx;
use crate::core::Core;

pub(crate) use crate::core::notify::class;

/// Publishes a keyspace notification (Redis's notifyKeyspaceEvent); usable
/// without a command context (the active expiry cycle). `now_ms` 0: read
/// the clock, only if something is published.
pub(crate) fn notify_keyspace(
    srv: &Core,
    db: usize,
    class: u32,
    event: &str,
    key: &[u8],
    now_ms: u64,
) {
    let flags = srv.hot.notify_keyspace_events.load(Relaxed);
    if flags & class == 0 || flags & (class::KEYSPACE | class::KEYEVENT) == 0 {
        return;
    }
    let limit = srv.hot.obuf_limits.read().pubsub;
    let now_ms = match now_ms {
        0 => crate::keyspace::hlc::unix_ms(),
        t => t,
    };
    if flags & class::KEYSPACE != 0 {
        let mut chan = format!("__keyspace@{db}__:").into_bytes();
        chan.extend_from_slice(key);
        srv.pubsub
            .publish(false, &chan, event.as_bytes(), &limit, now_ms);
    }
    if flags & class::KEYEVENT != 0 {
        let chan = format!("__keyevent@{db}__:{event}");
        srv.pubsub
            .publish(false, chan.as_bytes(), key, &limit, now_ms);
    }
}

impl Ctx<'_> {
    /// Publishes a keyspace/keyevent notification for `key` in the current
    /// database, if `notify-keyspace-events` enables `class`.
    pub fn notify(&mut self, class: u32, event: &str, key: &[u8]) {
        let db = self.client.db;
        self.notify_db(db, class, event, key);
    }

    /// A read lookup of `key` (Redis's lookupKeyRead): counts a keyspace
    /// hit or miss, and a miss publishes "keymiss" (class `m`).
    pub fn read_hit(&self, key: &[u8], found: bool) {
        self.stats.hit(found);
        if !found {
            notify_keyspace(
                self.core,
                self.client.db,
                class::KEY_MISS,
                "keymiss",
                key,
                self.now_ms,
            );
        }
    }

    pub fn notify_db(&mut self, db: usize, class: u32, event: &str, key: &[u8]) {
        notify_keyspace(self.core, db, class, event, key, self.now_ms);
    }

    /// Tells clients blocked on `key` (BLPOP, BZPOPMIN, ...) that it may now
    /// serve them. Call after the write, while still holding the key's lock.
    pub fn signal_ready(&mut self, db: usize, key: &[u8]) {
        if self.client.in_exec {
            // Served once the transaction is over (see multi.rs).
            self.client.exec_ready.push((db, key.to_vec()));
            return;
        }
        self.core.blocking.signal(db, key);
    }
}
