//! The check shared by the cargo-fuzz target (`fuzz_targets/rdb_loader.rs`)
//! and the deterministic mutation test (`tests/rdb_load.rs`): any bytes fed
//! to the RDB loader, as a whole file or as a RESTORE payload, give a value
//! or an error, never a panic, and whatever loads is a well-formed value
//! (no empty collection, which Redis would never hold).

use lattice::keyspace::encoding::EncodingLimits;
use lattice::persistence::rdb::decode::{self, LoadOpts};

/// Redis 7.0's default encoding limits.
pub fn default_limits() -> EncodingLimits {
    EncodingLimits::defaults()
}

/// Feeds `data` to both entry points; panics only on a broken invariant.
pub fn check(data: &[u8], limits: &EncodingLimits) {
    for verify_checksum in [true, false] {
        let opts = LoadOpts {
            on_resize: None,
            on_aux: None,
            limits,
            verify_checksum,
        };
        let mut n = 0u64;
        let res = decode::load(data, &opts, &mut |k| {
            assert!(!k.value.is_empty_collection(), "empty collection loaded");
            n += 1;
            Ok(())
        });
        if let Ok(summary) = res {
            assert_eq!(summary.keys, n);
        }
    }
    if let Ok(v) = decode::decode_dump_payload(data, limits) {
        assert!(!v.is_empty_collection(), "empty collection restored");
    }
}
