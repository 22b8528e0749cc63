//! Hybrid logical clock: the version stamp every key carries.
//!
//! A stamp is one u64 ordered as a number:
//!
//! ```text
//!   63            22 21        10 9        0
//!   | unix ms (42)  | logical(12) | node(10) |
//! ```
//!
//! 42 bits of milliseconds last until the year 2109. The logical counter orders
//! writes within one millisecond (and keeps the clock moving forward when the
//! wall clock steps back); when it overflows the millisecond part is advanced,
//! as HLC prescribes. The node id breaks ties between stamps made on different
//! nodes at the same (ms, logical), so any two nodes order any two writes the
//! same way.
//!
//! Each worker thread owns its own clock (no shared cache line on the write
//! path). Writes to one key are serialised by its shard lock, and every write
//! takes `max(clock.now(), previous_version + 1)` through [`Hlc::after`], so a
//! key's version strictly increases even when consecutive writes come from
//! different threads.
//!
//! Tests can run a node's stamps ahead of (or behind) the wall clock with
//! `DEBUG CLOCK-OFFSET <ms>` ([`set_clock_offset`]): the offset moves the
//! physical part of every stamp this process issues, and the "our clock"
//! that a peer's stamp is checked against, but not expiry, timeouts or
//! anything else that reads [`unix_ms`] (DECISIONS 53).
//!
//! The deterministic simulator (tests/simulator.rs, DECISIONS 56) runs
//! several nodes on one thread in virtual time: [`set_thread_clock`] makes
//! [`unix_ms`] answer a time it sets, on this thread only, and it sets each
//! node's own (skewed) time before running anything of that node. Every
//! other thread, and every thread of a real server, reads the wall clock.

use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

pub const NODE_BITS: u32 = 10;
pub(crate) const LOGICAL_BITS: u32 = 12;
const LOW_BITS: u32 = NODE_BITS + LOGICAL_BITS;
const NODE_MASK: u64 = (1 << NODE_BITS) - 1;

/// Build a stamp from its parts.
pub(crate) fn make_stamp(ms: u64, logical: u64, node: u64) -> u64 {
    (ms << LOW_BITS) | ((logical & ((1 << LOGICAL_BITS) - 1)) << NODE_BITS) | (node & NODE_MASK)
}

/// The wall-clock millisecond part of a stamp.
pub(crate) fn stamp_ms(stamp: u64) -> u64 {
    stamp >> LOW_BITS
}

/// The node id part of a stamp.
pub(crate) fn stamp_node(stamp: u64) -> u64 {
    stamp & NODE_MASK
}

thread_local! {
    /// This thread's simulated clock, when set ([`set_thread_clock`]).
    static THREAD_CLOCK_MS: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The clock every time in the server comes from: the wall clock, or the
/// thread's simulated one when [`set_thread_clock`] set it.
pub fn unix_ms() -> u64 {
    if let Some(ms) = THREAD_CLOCK_MS.with(Cell::get) {
        return ms;
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Seam for the deterministic simulator (tests/simulator.rs): this thread's
/// [`unix_ms`] answers `ms` from now on (None: the wall clock again). The
/// simulator runs every node on one thread and sets each node's own time
/// (virtual time plus the node's skew) before it runs anything of that
/// node, so each node has a clock of its own without any process-wide
/// state (tests run on parallel threads). A server never calls it.
#[doc(hidden)]
pub fn set_thread_clock(ms: Option<u64>) {
    THREAD_CLOCK_MS.with(|c| c.set(ms));
}

/// `DEBUG CLOCK-OFFSET`: ms added to the wall clock for stamps (0 but in
/// tests). Read once per stamp, relaxed.
static CLOCK_OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Runs this process's stamps `ms` ahead of the wall clock (negative:
/// behind), to test nodes whose clocks disagree.
pub(crate) fn set_clock_offset(ms: i64) {
    CLOCK_OFFSET_MS.store(ms, Relaxed);
}

/// The offset [`set_clock_offset`] set.
pub(crate) fn clock_offset() -> i64 {
    CLOCK_OFFSET_MS.load(Relaxed)
}

/// The physical time stamps are made of: `wall_ms` plus the debug offset.
#[inline]
fn stamp_time(wall_ms: u64) -> u64 {
    wall_ms.saturating_add_signed(CLOCK_OFFSET_MS.load(Relaxed))
}

/// This node's clock as its stamps see it (the wall clock plus the debug
/// offset): what a peer's stamp is compared with.
pub(crate) fn stamp_clock_ms() -> u64 {
    stamp_time(unix_ms())
}

/// One thread's clock. `last` never decreases.
#[derive(Debug, Clone)]
pub struct Hlc {
    node: u64,
    /// Last stamp issued, without the node bits.
    last: u64,
}

impl Hlc {
    pub fn new(node: u64) -> Self {
        Hlc {
            node: node & NODE_MASK,
            last: 0,
        }
    }

    /// A fresh stamp greater than every stamp this clock issued before.
    pub fn now(&mut self) -> u64 {
        self.now_at(unix_ms())
    }

    /// A fresh stamp, with `wall_ms` as the physical time (plus the debug
    /// offset, see [`set_clock_offset`]).
    pub fn now_at(&mut self, wall_ms: u64) -> u64 {
        let physical = stamp_time(wall_ms) << LOGICAL_BITS;
        self.last = if physical > self.last {
            physical
        } else {
            self.last + 1
        };
        (self.last << NODE_BITS) | self.node
    }

    /// A fresh stamp that is also greater than `prev` (the key's old version,
    /// possibly made by another thread or node): the HLC receive rule.
    pub fn after(&mut self, prev: u64) -> u64 {
        self.after_at(prev, unix_ms())
    }

    /// [`after`](Self::after) with `wall_ms` as the physical time.
    pub fn after_at(&mut self, prev: u64, wall_ms: u64) -> u64 {
        let prev_time = prev >> NODE_BITS;
        if prev_time >= self.last {
            self.last = prev_time;
        }
        self.now_at(wall_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_even_when_wall_clock_steps_back() {
        let mut c = Hlc::new(7);
        let a = c.now_at(1_000_000);
        let b = c.now_at(999_000);
        let d = c.now_at(999_000);
        assert!(a < b && b < d);
        assert_eq!(stamp_node(d), 7);
        assert_eq!(stamp_ms(a), 1_000_000);
    }

    #[test]
    fn after_exceeds_foreign_stamp() {
        let mut other = Hlc::new(3);
        let far = other.now_at(unix_ms() + 60_000);
        let mut c = Hlc::new(1);
        let v = c.after(far);
        assert!(v > far);
        assert!(c.now() > v);
    }

    #[test]
    fn ties_broken_by_node() {
        let a = make_stamp(5, 1, 1);
        let b = make_stamp(5, 1, 2);
        assert!(a < b);
        assert_eq!(stamp_ms(b), 5);
    }
}
