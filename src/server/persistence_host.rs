//! The server as persistence's host (`persistence::Host`): persistence
//! gets the core, its own state and the few facts and hooks of replication
//! and the other subsystems through these methods, so it never names the
//! server or replication. Also persistence's part in serving connections
//! (`hooks.rs`): the hooks forward to persistence's functions.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::MutexGuard;

use super::{hooks, Server};
use crate::commands::{CmdError, CommandId};
use crate::core::admin::Admin;
use crate::core::client::ClientState;
use crate::core::Core;
use crate::persistence::{self, aof, save, Persistence};

impl persistence::Host for Server {
    fn core(&self) -> &Core {
        &self.core
    }

    fn persist(&self) -> &Persistence {
        &self.persist
    }

    fn admin(self: &Arc<Self>) -> &dyn Admin {
        self
    }

    fn last_save(&self) -> &AtomicU64 {
        &self.lastsave_unix
    }

    fn shutting_down(&self) -> bool {
        self.shutting_down.load(Relaxed)
    }

    fn is_replica(&self) -> bool {
        self.repl.is_replica()
    }

    fn replica_apply_lock(&self) -> MutexGuard<'_, ()> {
        self.repl.replica.hold_apply()
    }

    fn rdb_aux(&self) -> Vec<(String, String)> {
        hooks::rdb_aux(self)
    }

    fn aof_notes(&self, all: bool) -> Vec<(String, String)> {
        hooks::aof_notes(self, all)
    }

    fn rdb_aux_loaded(&self, aux: &[(Vec<u8>, Vec<u8>)], expired: &[(usize, Vec<u8>)]) {
        hooks::rdb_aux_loaded(self, aux, expired)
    }

    fn aof_aux_loaded(&self, aux: &[(Vec<u8>, Vec<u8>)]) {
        hooks::aof_aux_loaded(self, aux)
    }
}

/// Persistence's part in serving connections.
pub(crate) struct PersistenceHooks;
pub(crate) static HOOKS: PersistenceHooks = PersistenceHooks;

impl hooks::Hooks for PersistenceHooks {
    fn admit(
        &self,
        srv: &Server,
        _client: &mut ClientState,
        id: CommandId,
        flags: u32,
    ) -> Result<(), CmdError> {
        persistence::admit_write(srv, id, flags)
    }

    /// `appendfsync always`: the batch's writes reach the disk first.
    fn before_reply(&self, srv: &Server) {
        aof::before_reply(srv)
    }

    fn cron(&self, srv: &Arc<Server>, worker: usize) {
        if worker == 0 {
            save::cron(srv);
            aof::cron(srv);
        }
    }
}
