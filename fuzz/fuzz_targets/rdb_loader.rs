//! cargo-fuzz target: arbitrary bytes as an RDB file and as a RESTORE
//! payload (see `fuzz/rdb_check.rs`). Run with
//! `cargo +nightly fuzz run rdb_loader` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../rdb_check.rs"]
mod rdb_check;

fuzz_target!(|data: &[u8]| {
    thread_local! {
        static LIMITS: lattice::facade::keyspace::encoding::EncodingLimits = rdb_check::default_limits();
    }
    LIMITS.with(|l| rdb_check::check(data, l));
});
