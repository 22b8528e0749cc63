//! A bug planted on purpose, for the simulator to show that it finds it
//! (`the_planted_tie_break_bug_is_found` in tests/simulator.rs): the
//! apply rule's order with the stamp's tie-break by node slot dropped, put
//! in place of the real one on the test's thread through the library's
//! seam (`replication::active::sim_hooks`).

use lattice::facade::keyspace::hlc::NODE_BITS;
use lattice::facade::replication::active::sim_hooks;

/// Stamps equal but for the slot count as equal, so two nodes' concurrent
/// writes each keep their own.
fn newer_without_tie_break(stamp: u64, local: u64) -> bool {
    stamp >> NODE_BITS > local >> NODE_BITS
}

/// Turns the planted bug on or off on this thread.
pub fn no_tie_break(on: bool) {
    sim_hooks::set_stamp_order(on.then_some(newer_without_tie_break as sim_hooks::StampOrder));
}
