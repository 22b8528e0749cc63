//! What persistence and replication do at fixed points of serving a
//! connection and of the cron. A subsystem implements [`Hooks`] (each
//! method defaults to nothing) and is listed in [`HOOKS`]; `conn.rs` and
//! `cron.rs` call the points below, which loop over the list, so neither
//! names a subsystem (nor does persistence name replication: the RDB's
//! aux fields go through here too). The list's order is the order of the calls:
//! persistence admits first (-LOADING and -MISCONF before -NOREPLICAS and
//! -READONLY, as Redis's processCommand checks them).

use std::sync::Arc;
use std::time::Duration;

use super::Server;
use crate::commands::{CmdError, CommandId};
use crate::core::client::ClientState;

/// A subsystem's part in serving connections (see the module comment).
pub(crate) trait Hooks: Sync {
    /// Before a command runs (after lookup and arity): an error refuses it.
    /// `flags`: the command's flags for this call (`Command::flags_for`).
    fn admit(
        &self,
        _srv: &Server,
        _client: &mut ClientState,
        _id: CommandId,
        _flags: u32,
    ) -> Result<(), CmdError> {
        Ok(())
    }

    /// After a connection ran a batch of commands, before it writes their
    /// replies: follow-up work of the batch's writes, and how long the
    /// replies must wait (back-pressure), if at all.
    fn after_batch(&self, _srv: &Server) -> Option<Duration> {
        None
    }

    /// Just before a batch's replies are written to the socket.
    fn before_reply(&self, _srv: &Server) {}

    /// Each worker's cron tick (`hz` a second); `worker` 0 does the
    /// server-wide work.
    fn cron(&self, _srv: &Arc<Server>, _worker: usize) {}

    /// Aux fields this subsystem adds to every RDB file we write.
    fn rdb_aux(&self, _srv: &Server) -> Vec<(String, String)> {
        Vec::new()
    }

    /// After loading an RDB file at start-up: its aux fields, and the keys
    /// (db, name) the load skipped as expired.
    fn rdb_aux_loaded(
        &self,
        _srv: &Server,
        _aux: &[(Vec<u8>, Vec<u8>)],
        _expired: &[(usize, Vec<u8>)],
    ) {
    }

    /// Aux fields the AOF carries as annotations (`#AUX:<name> <value>`):
    /// all of them for a new base (`all`), else those that changed since
    /// the last call (the AOF asks once a second).
    fn aof_notes(&self, _srv: &Server, _all: bool) -> Vec<(String, String)> {
        Vec::new()
    }

    /// After loading the AOF at start-up: the aux fields of its RDB parts
    /// and its annotations, in file order.
    fn aof_aux_loaded(&self, _srv: &Server, _aux: &[(Vec<u8>, Vec<u8>)]) {}

    /// Whether this node expires keys itself (a replica waits for its
    /// master's DELs, Redis's rule).
    fn expires_keys(&self, _srv: &Server) -> bool {
        true
    }
}

/// The subsystems, in call order.
pub(crate) static HOOKS: [&dyn Hooks; 3] = [
    &super::persistence_host::HOOKS,
    &crate::replication::HOOKS,
    &super::identity::HOOKS,
];

pub(crate) fn admit(
    srv: &Server,
    client: &mut ClientState,
    id: CommandId,
    flags: u32,
) -> Result<(), CmdError> {
    HOOKS
        .iter()
        .try_for_each(|h| h.admit(srv, client, id, flags))
}

/// The longest wait any subsystem asks for.
pub(crate) fn after_batch(srv: &Server) -> Option<Duration> {
    HOOKS.iter().filter_map(|h| h.after_batch(srv)).max()
}

pub(crate) fn before_reply(srv: &Server) {
    HOOKS.iter().for_each(|h| h.before_reply(srv))
}

pub(crate) fn cron(srv: &Arc<Server>, worker: usize) {
    HOOKS.iter().for_each(|h| h.cron(srv, worker))
}

pub(crate) fn rdb_aux(srv: &Server) -> Vec<(String, String)> {
    HOOKS.iter().flat_map(|h| h.rdb_aux(srv)).collect()
}

pub fn rdb_aux_loaded(srv: &Server, aux: &[(Vec<u8>, Vec<u8>)], expired: &[(usize, Vec<u8>)]) {
    HOOKS
        .iter()
        .for_each(|h| h.rdb_aux_loaded(srv, aux, expired))
}

pub(crate) fn aof_notes(srv: &Server, all: bool) -> Vec<(String, String)> {
    HOOKS.iter().flat_map(|h| h.aof_notes(srv, all)).collect()
}

pub(crate) fn aof_aux_loaded(srv: &Server, aux: &[(Vec<u8>, Vec<u8>)]) {
    HOOKS.iter().for_each(|h| h.aof_aux_loaded(srv, aux))
}

pub(crate) fn expires_keys(srv: &Server) -> bool {
    HOOKS.iter().all(|h| h.expires_keys(srv))
}
