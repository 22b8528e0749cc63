//! The simulator's seams in active replication (tests/simulator.rs,
//! tests/sim/): what a test may change on its own thread, and nothing a
//! command reaches. Beside `hlc::set_thread_clock` and
//! `keyspace::set_thread_fixed_hash`, which give the simulator its time and
//! its hashes, this lets it replace the order the link's apply rule uses
//! (`link::newer`), so that it can show it catches an ordering bug: the
//! planted bug itself is the simulator's (tests/sim/planted.rs).

use std::cell::Cell;

/// An order between a record's stamp and a key's local version: whether
/// the record is newer.
pub type StampOrder = fn(stamp: u64, local: u64) -> bool;

thread_local! {
    /// The order a test put in place of the stamp's (None: the real one).
    static STAMP_ORDER: Cell<Option<StampOrder>> = const { Cell::new(None) };
}

/// Puts `order` in place of the apply rule's on this thread (None: back to
/// the real one). Tests only.
#[doc(hidden)]
pub fn set_stamp_order(order: Option<StampOrder>) {
    STAMP_ORDER.with(|o| o.set(order));
}

/// The order a test put in place on this thread, if any.
pub(super) fn stamp_order() -> Option<StampOrder> {
    STAMP_ORDER.with(Cell::get)
}
