//! The thresholds at which a small collection leaves its compact encoding
//! (listpack, intset) for the big one, as Redis's `*-max-listpack-*` and
//! `set-max-intset-entries` directives set them, and where a sparse
//! HyperLogLog turns dense (`hll-sparse-max-bytes`). The values and the RDB
//! loader read them; the server mirrors them from the configuration.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering::Relaxed};

use crate::config::Config;

/// The `*-max-listpack-*` / `set-max-intset-entries` thresholds: a
/// collection converts from its compact encoding (listpack, intset) to the
/// big one when it grows past them, as in Redis; CONFIG SET applies to
/// conversions made afterwards.
#[derive(Default)]
pub struct EncodingLimits {
    /// `list-max-listpack-size`: > 0 entries per node, < 0 a size class
    /// (-1 4 KiB ... -5 64 KiB).
    pub list_max_listpack_size: AtomicI64,
    pub hash_max_listpack_entries: AtomicUsize,
    pub hash_max_listpack_value: AtomicUsize,
    pub set_max_intset_entries: AtomicUsize,
    pub set_max_listpack_entries: AtomicUsize,
    pub set_max_listpack_value: AtomicUsize,
    pub zset_max_listpack_entries: AtomicUsize,
    pub zset_max_listpack_value: AtomicUsize,
    /// `hll-sparse-max-bytes`: a sparse HyperLogLog growing past it turns
    /// dense (`keyspace/hll.rs`).
    pub hll_sparse_max_bytes: AtomicUsize,
    /// `stream-node-max-bytes` / `-entries`: where a stream opens a new
    /// node (`keyspace/stream.rs`).
    pub stream_node_max_bytes: AtomicUsize,
    pub stream_node_max_entries: AtomicUsize,
}

impl EncodingLimits {
    /// Redis 7's defaults (the directives' defaults), for code without a
    /// server: tests and fuzzing of the loader.
    pub fn defaults() -> EncodingLimits {
        let l = EncodingLimits::default();
        l.load(&Config::default());
        l
    }

    pub fn load(&self, c: &Config) {
        let u = |name: &str| c.get_i64(name).max(0) as usize;
        self.list_max_listpack_size
            .store(c.get_i64("list-max-listpack-size"), Relaxed);
        self.hash_max_listpack_entries
            .store(u("hash-max-listpack-entries"), Relaxed);
        self.hash_max_listpack_value
            .store(u("hash-max-listpack-value"), Relaxed);
        self.set_max_intset_entries
            .store(u("set-max-intset-entries"), Relaxed);
        self.set_max_listpack_entries
            .store(u("set-max-listpack-entries"), Relaxed);
        self.set_max_listpack_value
            .store(u("set-max-listpack-value"), Relaxed);
        self.zset_max_listpack_entries
            .store(u("zset-max-listpack-entries"), Relaxed);
        self.zset_max_listpack_value
            .store(u("zset-max-listpack-value"), Relaxed);
        self.hll_sparse_max_bytes
            .store(u("hll-sparse-max-bytes"), Relaxed);
        self.stream_node_max_bytes
            .store(u("stream-node-max-bytes"), Relaxed);
        self.stream_node_max_entries
            .store(u("stream-node-max-entries"), Relaxed);
    }
}
