//! The check shared by the cargo-fuzz target (`fuzz_targets/rdb_loader.rs`)
//! and the deterministic mutation test (`tests/rdb_load.rs`): any bytes fed
//! to the RDB loader, as a whole file or as a RESTORE payload, give a value
//! or an error, never a panic, and whatever loads is a well-formed value
//! (no empty collection, which Redis would never hold; a stream's entries
//! read the same forwards, backwards and one by one by ID).

use lattice::facade::keyspace::encoding::EncodingLimits;
use lattice::facade::persistence::rdb::decode::{self, LoadOpts};

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
            check_stream(&k.value);
            n += 1;
            Ok(())
        });
        if let Ok(summary) = res {
            assert_eq!(summary.keys, n);
        }
    }
    if let Ok(v) = decode::decode_dump_payload(data, limits) {
        assert!(!v.is_empty_collection(), "empty collection restored");
        check_stream(&v);
    }
}

/// A loaded stream's entries: strictly rising, as many as its length, the
/// same backwards, each found by its ID, the first and last where they are.
fn check_stream(v: &lattice::facade::keyspace::Value) {
    use lattice::facade::keyspace::stream::StreamId;
    let lattice::facade::keyspace::Value::Stream(x) = v else {
        return;
    };
    let all: Vec<_> = x.range(StreamId::MIN, StreamId::MAX, false).collect();
    assert_eq!(all.len(), x.len(), "stream length");
    assert!(
        all.windows(2).all(|w| w[0].0 < w[1].0),
        "stream IDs not rising"
    );
    let mut back: Vec<_> = x.range(StreamId::MIN, StreamId::MAX, true).collect();
    back.reverse();
    assert!(back == all, "stream read backwards differs");
    for (id, f) in &all {
        assert!(
            x.entry(*id).as_ref() == Some(f),
            "entry {id:?} not found by ID"
        );
    }
    assert_eq!(x.first().map(|e| e.0), all.first().map(|e| e.0));
    assert_eq!(x.first_id(), all.first().map_or(StreamId::MIN, |e| e.0));
    assert!(
        all.last().is_none_or(|e| e.0 <= x.last_id),
        "entry past the last ID"
    );
}
