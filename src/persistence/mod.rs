//! Persistence: Redis-format RDB files and DUMP payloads (`rdb/`), point-in-time
//! snapshots taken without fork (`snapshot.rs`), and the multi-part AOF (`aof/`).
//!
//! Everything here speaks Redis's on-disk formats byte for byte, so a Redis
//! user's `dump.rdb` and `appendonlydir/` load into LatticeDB and ours load into
//! Redis. Our own per-key version stamps travel in an RDB aux field that Redis
//! ignores (see `rdb/mod.rs`).

pub mod aof;
pub mod load;
pub mod rdb;
pub mod save;
pub mod snapshot;

/// Persistence state kept on the server: one field per mechanism (RDB
/// snapshots, AOF), each owned by its module.
#[derive(Default)]
pub struct Persistence {
    pub aof: aof::AofState,
    pub snapshot: snapshot::SnapshotState,
    pub rdb: save::RdbState,
    pub loading: load::Loading,
}

/// Persistence's part in serving connections (`server/hooks.rs`).
pub struct PersistenceHooks;
pub static HOOKS: PersistenceHooks = PersistenceHooks;

impl crate::server::hooks::Hooks for PersistenceHooks {
    fn admit(
        &self,
        srv: &crate::server::Server,
        client: &mut crate::core::client::ClientState,
        id: crate::commands::CommandId,
        flags: u32,
    ) -> Result<(), crate::commands::CmdError> {
        admit_write(srv, client, id, flags)
    }

    /// `appendfsync always`: the batch's writes reach the disk first.
    fn before_reply(&self, srv: &crate::server::Server) {
        aof::before_reply(srv)
    }

    fn cron(&self, srv: &std::sync::Arc<crate::server::Server>, worker: usize) {
        if worker == 0 {
            save::cron(srv);
            aof::cron(srv);
        }
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
pub fn admit_write(
    srv: &crate::server::Server,
    _client: &mut crate::core::client::ClientState,
    id: crate::commands::CommandId,
    flags: u32,
) -> Result<(), crate::commands::CmdError> {
    use crate::commands::{flags::LOADING, flags::NO_ASYNC_LOADING, flags::WRITE, CmdError};
    if srv.persist.loading.active() && flags & LOADING == 0 {
        return Err(CmdError::Msg(
            "LOADING Redis is loading the dataset in memory".into(),
        ));
    }
    if srv.persist.loading.async_active() && flags & NO_ASYNC_LOADING != 0 {
        return Err(CmdError::Msg(
            "LOADING Redis is loading the dataset in memory".into(),
        ));
    }
    let Some(err) = save::disk_error(srv).or_else(|| aof::disk_error(srv)) else {
        return Ok(());
    };
    if flags & WRITE != 0 || srv.commands.get(id).name == "ping" {
        return Err(err);
    }
    Ok(())
}
