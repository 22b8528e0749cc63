//! Persistence: Redis-format RDB files and DUMP payloads (`rdb/`), point-in-time
//! snapshots taken without fork (`snapshot.rs`), and the multi-part AOF (`aof/`).
//!
//! Everything here speaks Redis's on-disk formats byte for byte, so a Redis
//! user's `dump.rdb` and `appendonlydir/` load into LatticeDB and ours load into
//! Redis. Our own per-key version stamps travel in an RDB aux field that Redis
//! ignores (see `rdb/mod.rs`).

pub mod aof;
pub mod rdb;

/// Persistence state kept on the server: one field per mechanism (RDB
/// snapshots, AOF), each owned by its module.
#[derive(Default)]
pub struct Persistence {
    pub aof: aof::AofState,
}
