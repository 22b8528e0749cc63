//! LatticeDB: a Redis-compatible, multi-threaded in-memory database.
//!
//! The modules are layered; each may use only itself and the layers below
//! (docs/ARCHITECTURE.md "Layers", checked by `ci/layers.py`), top first:
//! - `facade.rs`      the library's public face: what the binary, tests,
//!   simulator, benchmark and fuzz targets use; every other module is
//!   private to the crate (but `log`, for its macros)
//! - `server/`        listeners, workers, connections (`conn.rs`), cron, INFO
//! - `replication/`   PSYNC2 in both roles, the backlog and its disk tier
//! - `persistence/`   snapshots, RDB files, the AOF (its RDB codec,
//!   `persistence/rdb/`, sits with the keyspace)
//! - `commands/`      one module per family, each with its table entries
//! - `core/`          what data commands share (`Core`), `Ctx`, the table's
//!   types, client state, registries, and `Admin`, their way up
//! - `effects.rs`     the write-effect stream consumed by AOF/replication
//! - `keyspace/`      shards, entries, values, expiry index, HLC versions
//! - `config/`        redis.conf directives and parsing
//! - `protocol/`, `log.rs`, `alloc.rs`, `glob.rs`: RESP (no I/O), logging,
//!   memory accounting, glob patterns
//!
//! A GET goes `server/conn.rs` -> `core/ctx.rs` -> `commands/strings.rs`
//! -> `commands/access.rs` -> `keyspace/mod.rs` and back.

// `pub(crate)` by default: this lint flags a `pub` item the facade does not
// reach (CI's clippy `-D warnings` makes it an error), so an item is `pub`
// only where a user of the library (main.rs, tests, benches, fuzz) needs it
// through `facade` (DECISIONS 304).
#![warn(unreachable_pub)]

mod alloc;
mod commands;
mod config;
mod core;
mod effects;
mod glob;
mod keyspace;
// Public for the logging macros, which expand to `$crate::log::log`.
pub mod log;
mod persistence;
mod protocol;
mod replication;
mod scripting;
mod server;

// What the binary, tests, benchmark and fuzz targets use (see its header).
pub mod facade;

/// The Redis version whose behaviour we match and report everywhere
/// (INFO `redis_version`, HELLO, `--version`, RDB `redis-ver`, the fatal
/// config error's header): 7.0's encodings, replies and command table, and
/// Redis 7.0's own test suite (DECISIONS 60). The few 7.2 commands we also
/// answer (WAITAOF, CLIENT SETINFO/NO-TOUCH, ZRANK WITHSCORE) are extras a
/// client finds by trying or by COMMAND, not by this number.
pub const REDIS_VERSION: &str = "7.0.15";
/// Our own version (`lattice_version` in INFO).
pub const LATTICE_VERSION: &str = env!("CARGO_PKG_VERSION");
