//! LatticeDB: a Redis-compatible, multi-threaded in-memory database.
//!
//! Layout (follow a GET from socket to shard and back):
//! - `server/conn.rs`   reads the socket, parses, dispatches, writes replies
//! - `protocol/`        RESP parsing and reply encoding, no I/O
//! - `commands/mod.rs`  the command table and `Ctx`; `commands/strings.rs` has GET
//! - `commands/access.rs` locks the key's shard, applies lazy expiry
//! - `keyspace/`        shards, entries, values, expiry index, HLC versions
//! - `effects.rs`       the write-effect stream consumed by AOF/replication
//! - `config/`          redis.conf directives, CONFIG GET/SET/REWRITE

pub mod alloc;
pub mod commands;
pub mod config;
pub mod effects;
pub mod glob;
pub mod keyspace;
pub mod log;
pub mod persistence;
pub mod protocol;
pub mod replication;
pub mod server;

/// The Redis version we report for feature detection (`redis_version`).
pub const REDIS_VERSION: &str = "7.2.4";
/// Our own version (`lattice_version` in INFO).
pub const LATTICE_VERSION: &str = env!("CARGO_PKG_VERSION");
