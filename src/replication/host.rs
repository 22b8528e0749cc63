//! What replication needs from the node it runs in, as one trait: the core
//! (the host derefs to it, as the server does), replication's own state,
//! the node's identity, and the few persistence facts and actions of a
//! sync (snapshots for replicas, loading a master's payload, the AOF).
//! The server implements it in `server/replication_host.rs`, so nothing
//! in `replication/` names the server or persistence (as `active/` lives
//! behind its own `Host`). Functions take `&H` or `&Arc<H>` with
//! `H: Host`: one instantiation, the server's, so calls cost what they
//! did when they named it.
//!
//! The types below are replication's own words for what it asks of
//! persistence; the host translates them.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::core::admin::Admin;
use crate::core::Core;

/// The node replication runs in (see the module comment).
pub trait Host: std::ops::Deref<Target = Core> + Send + Sync + Sized + 'static {
    /// A diskless load in progress (its staging dataset, if any).
    type SocketLoad: Send;

    /// The core (what `Deref` gives, by name).
    fn core(&self) -> &Core {
        self
    }
    /// Replication's own state.
    fn repl(&self) -> &super::Replication;
    /// The upper layers, through which the master's stream is replayed.
    fn admin(self: &Arc<Self>) -> &dyn Admin;
    /// The port clients reach this node on (REPLCONF listening-port).
    fn port(&self) -> u16;
    /// A handle on the node for active replication's threads.
    fn peer_host(self: &Arc<Self>) -> super::active::HostRef;
    /// Pauses writes (FAILOVER) or lifts the pause.
    fn pause_writes(&self, on: bool);

    /// A snapshot (BGSAVE or a sync's) is running.
    fn snapshot_running(&self) -> bool;
    /// Starts a snapshot for replicas (one at a time, as BGSAVE's).
    fn start_snapshot(self: &Arc<Self>, job: ReplicaSnapshot) -> Result<(), SnapshotStart>;
    /// Stops the running snapshot (its last replica went).
    fn abort_snapshot(&self);
    /// The running snapshot is a full sync's payload: RDBs written now
    /// carry no link positions of an active node (`rdb_aux`).
    fn set_snapshot_for_replicas(&self, on: bool);

    /// Loads a received RDB file as at start-up (`repl-diskless-load
    /// disabled`).
    fn load_file(self: &Arc<Self>, path: &std::path::Path) -> Result<(), String>;
    /// Starts a diskless load of a payload of `total` bytes (0: unknown).
    fn begin_socket_load(&self, mode: SocketLoadMode, total: u64) -> Self::SocketLoad;
    /// Decodes the payload from `r` into the load's target.
    fn load_socket<R: io::Read>(
        self: &Arc<Self>,
        job: &Self::SocketLoad,
        r: R,
    ) -> Result<(), String>;
    /// The whole payload loaded: swaps a staging dataset in.
    fn commit_socket_load(&self, job: Self::SocketLoad);
    /// The payload failed: drops the staging dataset (or empties the live one).
    fn abort_socket_load(&self, job: Self::SocketLoad);
    /// Bytes read plus keys decoded by the load in progress.
    fn load_progress(&self) -> u64;
    /// Counts `n` payload bytes read.
    fn add_loaded(&self, n: u64);
    /// Stops the load in progress at its next read or key.
    fn abort_load(&self);
    /// An error once the load in progress was aborted.
    fn check_load_aborted(&self) -> io::Result<()>;

    /// The AOF is on.
    fn aof_on(&self) -> bool;
    /// The AOF's offset of what this node wrote so far.
    fn aof_end(&self) -> u64;
    /// The AOF is fsynced up to `end`.
    fn aof_synced_to(&self, end: u64) -> bool;
    /// Fsyncs the AOF now.
    fn aof_fsync(&self);
    /// What a batch's writes owe the AOF before its replies
    /// (`appendfsync always`).
    fn aof_before_reply(&self);
    /// Bases the AOF on the dataset just loaded: a rewrite now, or after
    /// the one running (Redis's restartAOFAfterSYNC).
    fn rebase_aof(self: &Arc<Self>) -> Result<(), String>;
}

/// A snapshot a full sync asks for, to a file (`path`) or a stream.
pub struct ReplicaSnapshot {
    pub path: PathBuf,
    pub stream: Option<Box<dyn io::Write + Send>>,
    /// Runs while every shard is locked: the instant the snapshot captures.
    pub at_cut: Box<dyn FnOnce() + Send>,
    /// Called with the bytes written or the error.
    pub done: Box<dyn FnOnce(io::Result<u64>) + Send>,
    /// Serializer threads.
    pub threads: usize,
}

/// Why a snapshot did not start.
pub enum SnapshotStart {
    /// Another snapshot is running.
    Busy,
    /// No thread could be started for it.
    Spawn(io::Error),
}

/// `repl-diskless-load`'s targets (`replica/load.rs`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SocketLoadMode {
    /// `on-empty-db`: into the (empty) live databases, serving -LOADING.
    Live,
    /// `swapdb`: into a staging dataset swapped in on success; the old one
    /// serves reads meanwhile when `async_load`.
    Swap { async_load: bool },
}

/// The host behind a replication command's `Ctx` (the command table's
/// entries are instantiated for the host type, `commands.rs`).
pub(crate) fn of<'a, H: Host>(ctx: &crate::commands::Ctx<'a>) -> &'a Arc<H> {
    let admin: &'a dyn Admin = ctx.admin;
    admin
        .as_any()
        .downcast_ref::<Arc<H>>()
        .expect("the admin of every Ctx is the replication host")
}
