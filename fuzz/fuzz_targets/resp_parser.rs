//! Fuzz target for the RESP request parser: arbitrary bytes, split at
//! arbitrary points, must parse the same as in one piece and never panic.
//! Run with `cargo +nightly fuzz run resp_parser` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../check.rs"]
mod check;

fuzz_target!(|data: &[u8]| {
    let (input, cuts) = check::split_from_bytes(data);
    check::check(input, &cuts);
});
