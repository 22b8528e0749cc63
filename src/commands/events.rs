//! What a write tells the rest of the server besides the effect stream:
//! keyspace notifications (`notify-keyspace-events`, Redis's notify.c) and
//! "key ready" signals that wake clients blocked on a list or sorted set
//! (Redis's signalKeyAsReady).
//!
//! Command families call these at the points Redis calls
//! notifyKeyspaceEvent / signalKeyAsReady, with Redis's event names
//! ("lpush", "hset", "zadd", "del", "expired", ...).
//! Issue 3: the pub/sub and blocking work fills in the delivery; until then
//! both are no-ops, so calling them is always correct.

use super::Ctx;

/// Event classes, as Redis's NOTIFY_* bits.
pub mod class {
    pub const KEYSPACE: u32 = 1 << 0; // K
    pub const KEYEVENT: u32 = 1 << 1; // E
    pub const GENERIC: u32 = 1 << 2; // g
    pub const STRING: u32 = 1 << 3; // $
    pub const LIST: u32 = 1 << 4; // l
    pub const SET: u32 = 1 << 5; // s
    pub const HASH: u32 = 1 << 6; // h
    pub const ZSET: u32 = 1 << 7; // z
    pub const EXPIRED: u32 = 1 << 8; // x
    pub const EVICTED: u32 = 1 << 9; // e
    pub const STREAM: u32 = 1 << 10; // t
    pub const KEY_MISS: u32 = 1 << 11; // m
    pub const MODULE: u32 = 1 << 12; // d
    pub const NEW: u32 = 1 << 13; // n
}

impl Ctx<'_> {
    /// Publishes a keyspace/keyevent notification for `key` in the current
    /// database, if `notify-keyspace-events` enables `class`.
    pub fn notify(&mut self, class: u32, event: &str, key: &[u8]) {
        let db = self.client.db;
        self.notify_db(db, class, event, key);
    }

    pub fn notify_db(&mut self, _db: usize, _class: u32, _event: &str, _key: &[u8]) {}

    /// Tells clients blocked on `key` (BLPOP, BZPOPMIN, ...) that it may now
    /// serve them. Call after the write, while still holding the key's lock.
    pub fn signal_ready(&mut self, db: usize, key: &[u8]) {
        self.srv.blocking.signal(db, key);
    }
}
