//! Point-in-time snapshots without fork: the shard's side.
//!
//! Redis snapshots by forking: the child sees the memory as it was, and the
//! kernel copies every page the parent writes meanwhile, so under a write
//! load a BGSAVE can cost up to a second copy of the dataset. We copy per
//! key instead, and only the keys written while the snapshot runs:
//!
//! - At the cut (every shard of every database locked at once, so no command
//!   is half done), each non-empty shard gets a [`ShardSnap`]: one bit per
//!   slab position, set for every entry that exists at the cut.
//! - The saver walks each shard's set bits under the shard lock, a batch at
//!   a time, serializes those entries and clears their bits.
//! - A command that is about to change or remove an entry whose bit is still
//!   set first hands the entry, as it is, to the snapshot's [`SnapSink`]
//!   (which serializes it into the snapshot) and clears the bit: the
//!   snapshot gets the value of the cut, the command goes on.
//! - Entries created after the cut have no bit. Removal moves the last entry
//!   into the hole (`swap_remove`), so the bit moves with it.
//!
//! So the snapshot holds exactly the keyspace of the cut, and its extra
//! memory is the serialized form of the keys written during the save, not
//! of the dataset. With no snapshot running the hooks cost one branch on a
//! field of the already-locked shard.

use std::sync::Arc;

use super::member_ttl::MemberTtls;
use super::Entry;

/// Receives entries as they were at the cut, just before a command changes
/// or removes them (with the key's member TTLs, `member_ttl.rs`). Called
/// under the entry's shard lock: keep it short.
pub trait SnapSink: Send + Sync {
    fn preserve(&self, db: usize, entry: &Entry, ttls: Option<&MemberTtls>);
}

/// A running snapshot's state in one shard.
pub(crate) struct ShardSnap {
    /// Bit `i` set: slab position `i` holds an entry of the cut that the
    /// snapshot has not taken yet.
    pending: Vec<u64>,
    remaining: usize,
    /// The saver's walk has taken every position at or above this one.
    /// No pending bit can appear above it again: a removal moves the last
    /// entry, which is at or above the cursor and so no longer pending.
    pub cursor: usize,
    /// The database this shard belonged to at the cut.
    pub db: usize,
    sink: Arc<dyn SnapSink>,
}

impl ShardSnap {
    /// Every position below `len` pending.
    pub(crate) fn new(len: usize, db: usize, sink: Arc<dyn SnapSink>) -> ShardSnap {
        let mut pending = vec![u64::MAX; len.div_ceil(64)];
        if !len.is_multiple_of(64) {
            if let Some(last) = pending.last_mut() {
                *last = (1u64 << (len % 64)) - 1;
            }
        }
        ShardSnap {
            pending,
            remaining: len,
            cursor: usize::MAX,
            db,
            sink,
        }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.remaining
    }

    #[cfg(test)]
    pub(crate) fn is_pending(&self, pos: usize) -> bool {
        self.pending
            .get(pos / 64)
            .is_some_and(|w| w & (1 << (pos % 64)) != 0)
    }

    /// Clears `pos`'s bit; returns whether it was set.
    pub(crate) fn take(&mut self, pos: usize) -> bool {
        let Some(w) = self.pending.get_mut(pos / 64) else {
            return false;
        };
        let bit = 1u64 << (pos % 64);
        if *w & bit == 0 {
            return false;
        }
        *w &= !bit;
        self.remaining -= 1;
        true
    }

    /// The entry at `pos` is about to change: preserve it if still pending.
    pub(crate) fn before_write(&mut self, pos: usize, e: &Entry, ttls: Option<&MemberTtls>) {
        if self.take(pos) {
            self.sink.preserve(self.db, e, ttls);
        }
    }

    /// The entry at `from` (the slab's last) moved to `to`.
    pub(crate) fn moved(&mut self, from: usize, to: usize) {
        if self.take(from) {
            self.remaining += 1;
            let w = &mut self.pending[to / 64];
            *w |= 1 << (to % 64);
        }
    }

    /// The highest pending position below `below`, for the saver's walk
    /// (downward, so entries moved by removals are never skipped: a removal
    /// moves the last entry, which the walk has already passed or is at).
    pub(crate) fn next_pending(&self, below: usize) -> Option<usize> {
        let mut i = below.min(self.pending.len() * 64);
        while i > 0 {
            let wi = (i - 1) / 64;
            let mask = if i.is_multiple_of(64) {
                u64::MAX
            } else {
                (1u64 << (i % 64)) - 1
            };
            let w = self.pending[wi] & mask;
            if w != 0 {
                return Some(wi * 64 + 63 - w.leading_zeros() as usize);
            }
            i = wi * 64;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nop;
    impl SnapSink for Nop {
        fn preserve(&self, _: usize, _: &Entry, _: Option<&MemberTtls>) {}
    }

    #[test]
    fn walks_pending_positions_downward() {
        let mut s = ShardSnap::new(130, 0, Arc::new(Nop));
        assert_eq!(s.remaining(), 130);
        assert_eq!(s.next_pending(usize::MAX), Some(129));
        assert!(s.take(129));
        assert!(!s.take(129));
        assert_eq!(s.next_pending(130), Some(128));
        for p in [128, 64, 63, 5] {
            s.take(p);
        }
        assert_eq!(s.next_pending(65), Some(62));
        s.moved(127, 5);
        assert!(s.is_pending(5) && !s.is_pending(127));
        assert_eq!(s.remaining(), 130 - 5);
        s.moved(129, 6); // not pending: nothing moves
        assert!(s.is_pending(6));
    }
}
