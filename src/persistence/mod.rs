//! Persistence: Redis-format RDB files and DUMP payloads (`rdb/`), point-in-time
//! snapshots taken without fork (`snapshot.rs`), and the multi-part AOF (`aof/`).
//!
//! Everything here speaks Redis's on-disk formats byte for byte, so a Redis
//! user's `dump.rdb` and `appendonlydir/` load into LatticeDB and ours load into
//! Redis. Our own per-key version stamps travel in an RDB aux field that Redis
//! ignores (see `rdb/mod.rs`).

pub(crate) mod aof;
pub(crate) mod load;
pub(crate) mod rdb;
pub(crate) mod save;
pub(crate) mod snapshot;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::MutexGuard;

use crate::core::admin::Admin;
use crate::core::Core;

/// Persistence state kept on the server: one field per mechanism (RDB
/// snapshots, AOF), each owned by its module.
#[derive(Default)]
pub struct Persistence {
    pub aof: aof::AofState,
    pub snapshot: snapshot::SnapshotState,
    pub rdb: save::RdbState,
    pub loading: load::Loading,
}

/// What persistence needs from the node that runs it. The server
/// implements it (`server/persistence_host.rs`), so nothing here names the
/// server or replication: the core (data, configuration, command table,
/// effect stream), persistence's own state, and the few facts and hooks of
/// the subsystems beside it. An `Arc` of a host is one too, so a caller
/// holding `&Arc<Server>` passes it as it is.
pub trait Host: Send + Sync + 'static {
    /// The data and what data commands are written against.
    fn core(&self) -> &Core;

    /// Persistence's own state (`srv.persist` on the server).
    fn persist(&self) -> &Persistence;

    /// The node's data and upper layers: AOF commands replay through it.
    fn admin(self: &Arc<Self>) -> &dyn Admin
    where
        Self: Sized;

    /// When the last save succeeded (unix seconds; LASTSAVE reads it too).
    fn last_save(&self) -> &AtomicU64;

    /// A shutdown is under way: the `save` schedule starts nothing.
    fn shutting_down(&self) -> bool;

    /// Replication: this node replicates a master (a load keeps no names
    /// of the keys it skips as expired: its master sends their DELs).
    fn is_replica(&self) -> bool;

    /// Replication: held while a snapshot cuts, so a replica's offset
    /// saved matches the data saved (it applies a command and counts its
    /// bytes under this lock).
    fn replica_apply_lock(&self) -> MutexGuard<'_, ()>;

    /// The other subsystems' aux fields for an RDB file we write.
    fn rdb_aux(&self) -> Vec<(String, String)>;

    /// The other subsystems' aux fields as AOF annotations: all of them
    /// for a new base (`all`), else those that changed since the last call.
    fn aof_notes(&self, all: bool) -> Vec<(String, String)>;

    /// After the start-up RDB load: its aux fields, and the keys (db,
    /// name) it skipped as expired.
    fn rdb_aux_loaded(&self, aux: &[(Vec<u8>, Vec<u8>)], expired: &[(usize, Vec<u8>)]);

    /// After the start-up AOF load: its aux fields and annotations.
    fn aof_aux_loaded(&self, aux: &[(Vec<u8>, Vec<u8>)]);
}

impl<H: Host> Host for Arc<H> {
    fn core(&self) -> &Core {
        (**self).core()
    }
    fn persist(&self) -> &Persistence {
        (**self).persist()
    }
    fn admin(self: &Arc<Self>) -> &dyn Admin
    where
        Self: Sized,
    {
        H::admin(self)
    }
    fn last_save(&self) -> &AtomicU64 {
        (**self).last_save()
    }
    fn shutting_down(&self) -> bool {
        (**self).shutting_down()
    }
    fn is_replica(&self) -> bool {
        (**self).is_replica()
    }
    fn replica_apply_lock(&self) -> MutexGuard<'_, ()> {
        (**self).replica_apply_lock()
    }
    fn rdb_aux(&self) -> Vec<(String, String)> {
        (**self).rdb_aux()
    }
    fn aof_notes(&self, all: bool) -> Vec<(String, String)> {
        (**self).aof_notes(all)
    }
    fn rdb_aux_loaded(&self, aux: &[(Vec<u8>, Vec<u8>)], expired: &[(usize, Vec<u8>)]) {
        (**self).rdb_aux_loaded(aux, expired)
    }
    fn aof_aux_loaded(&self, aux: &[(Vec<u8>, Vec<u8>)]) {
        (**self).aof_aux_loaded(aux)
    }
}

/// Before a command runs: while the start-up load runs, only commands
/// flagged `loading` are served (Redis's `-LOADING`; during a replica's
/// async load, all but the `no_async_loading` ones); then, while the disk
/// cannot take writes (a failed
/// BGSAVE under `stop-writes-on-bgsave-error`), write commands, PING and an
/// EXEC holding a write get MISCONF, as Redis's processCommand does (an
/// EXEC's `flags` hold its queued commands', `commands::call::admit`, which
/// also ends the refused transaction). One relaxed load when all is well.
pub(crate) fn admit_write(
    srv: &impl Host,
    id: crate::commands::CommandId,
    flags: u32,
) -> Result<(), crate::commands::CmdError> {
    use crate::commands::{flags::LOADING, flags::NO_ASYNC_LOADING, flags::WRITE, CmdError};
    if srv.persist().loading.active() && flags & LOADING == 0 {
        return Err(CmdError::Msg(
            "LOADING Redis is loading the dataset in memory".into(),
        ));
    }
    if srv.persist().loading.async_active() && flags & NO_ASYNC_LOADING != 0 {
        return Err(CmdError::Msg(
            "LOADING Redis is loading the dataset in memory".into(),
        ));
    }
    let Some(err) = save::disk_error(srv).or_else(|| aof::disk_error(srv)) else {
        return Ok(());
    };
    if flags & WRITE != 0 || srv.core().commands.get(id).name == "ping" {
        return Err(err);
    }
    Ok(())
}
