//! `Ctx`: what a command handler may use while it executes one command —
//! the core, the way up (`Admin`), its client's state, the reply buffer,
//! the worker's clock and counters. How a handler reports its writes
//! (`propagate`), opens keys (`open`) and notifies lives with the commands
//! (`commands/mod.rs`, `commands/access.rs`), in further `impl Ctx` blocks.

use super::admin::Admin;
use super::client::ClientState;
use super::stats::WorkerStats;
use super::Core;
use crate::keyspace::hlc::Hlc;
use crate::protocol::{Args, ReplyBuf};

/// What a handler may use while executing one command.
pub struct Ctx<'a> {
    /// What data commands share (keyspace, config, registries).
    pub core: &'a Core,
    /// Persistence, replication and the server, for the commands that
    /// reach them (see `core/admin.rs`).
    pub admin: &'a dyn Admin,
    pub client: &'a mut ClientState,
    pub out: &'a mut ReplyBuf,
    pub clock: &'a mut Hlc,
    pub stats: &'a WorkerStats,
    /// Cached unix ms for the whole command (as Redis's `mstime` cache).
    pub now_ms: u64,
    /// When replaying an effect, the version it carries.
    pub replay_version: Option<u64>,
    /// The command as the client sent it (None when replaying): a record
    /// equal to it keeps the client's spelling of the name, as Redis
    /// propagates an unrewritten command's argv verbatim.
    pub sent: Option<Args<'a>>,
}

impl Ctx<'_> {
    /// The selected database's index.
    pub fn db(&self) -> usize {
        self.client.db
    }

    /// The version stamp for a write to a key whose previous version is `prev`.
    pub fn version_after(&mut self, prev: u64) -> u64 {
        match self.replay_version {
            Some(v) => v,
            None => self.clock.after_at(prev, self.now_ms),
        }
    }

    /// A version stamp for a write that does not replace an existing key.
    pub fn new_version(&mut self) -> u64 {
        match self.replay_version {
            Some(v) => v,
            None => self.clock.now_at(self.now_ms),
        }
    }
}
