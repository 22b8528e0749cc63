//! The server as replication's host (`replication/host.rs`): the core,
//! replication's state, and the persistence it asks for during a sync
//! (snapshots for replicas, loading a master's payload, the AOF's facts),
//! forwarded to their owners; and replication's hooks
//! (`server/hooks.rs`), which read the server's identity and persistence.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use super::Server;
use crate::core::admin::Admin;
use crate::persistence::{aof, load, snapshot};
use crate::replication::host::{Host, ReplicaSnapshot, SnapshotStart, SocketLoadMode};
use crate::replication::{self, ReplicationHooks};

impl Host for Server {
    type SocketLoad = load::ReplicaLoad;

    fn repl(&self) -> &replication::Replication {
        &self.repl
    }
    fn admin(self: &Arc<Self>) -> &dyn Admin {
        self
    }
    fn port(&self) -> u16 {
        self.tcp_port.load(Relaxed) as u16
    }
    fn peer_host(self: &Arc<Self>) -> replication::active::HostRef {
        Server::peer_host(self)
    }
    fn pause_writes(&self, on: bool) {
        Server::pause_writes(self, on)
    }

    fn snapshot_running(&self) -> bool {
        self.persist.snapshot.running()
    }
    fn start_snapshot(self: &Arc<Self>, job: ReplicaSnapshot) -> Result<(), SnapshotStart> {
        let job = snapshot::SnapshotJob {
            format: snapshot::SnapFormat::Rdb,
            path: job.path,
            stream: job.stream,
            at_cut: Some(job.at_cut),
            done: job.done,
            threads: job.threads,
            aux: Vec::new(),
        };
        snapshot::start(self, job).map_err(|e| match e {
            snapshot::SnapshotError::Busy => SnapshotStart::Busy,
            snapshot::SnapshotError::Spawn(e) => SnapshotStart::Spawn(e),
        })
    }
    fn abort_snapshot(&self) {
        snapshot::abort(self)
    }
    fn set_snapshot_for_replicas(&self, on: bool) {
        self.persist.snapshot.for_replicas.store(on, Relaxed);
    }

    fn load_file(self: &Arc<Self>, path: &Path) -> Result<(), String> {
        load::load_for_replica(self, path)?;
        super::sync_files::loaded(self, path);
        Ok(())
    }
    fn begin_socket_load(&self, mode: SocketLoadMode, total: u64) -> load::ReplicaLoad {
        let mode = match mode {
            SocketLoadMode::Live => load::SocketLoad::Live,
            SocketLoadMode::Swap { async_load } => load::SocketLoad::Swap { async_load },
        };
        load::ReplicaLoad::begin(self, mode, total)
    }
    fn load_socket<R: io::Read>(
        self: &Arc<Self>,
        job: &load::ReplicaLoad,
        r: R,
    ) -> Result<(), String> {
        load::load_reader_into(self, job.target(self), r, load::OnDuplicate::Fail)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    fn commit_socket_load(&self, job: load::ReplicaLoad) {
        job.commit(self)
    }
    fn abort_socket_load(&self, job: load::ReplicaLoad) {
        job.abort(self)
    }
    fn load_progress(&self) -> u64 {
        self.persist.loading.progress()
    }
    fn add_loaded(&self, n: u64) {
        self.persist.loading.add_loaded(n)
    }
    fn abort_load(&self) {
        self.persist.loading.abort()
    }
    fn check_load_aborted(&self) -> io::Result<()> {
        self.persist.loading.check_aborted()
    }

    fn aof_on(&self) -> bool {
        self.persist.aof.core.active.load(Relaxed)
    }
    fn aof_end(&self) -> u64 {
        self.persist.aof.core.my_end()
    }
    fn aof_synced_to(&self, end: u64) -> bool {
        self.persist.aof.core.synced_to(end)
    }
    fn aof_fsync(&self) {
        self.persist.aof.core.flush(true)
    }
    #[inline]
    fn aof_before_reply(&self) {
        aof::before_reply(self)
    }
    fn rebase_aof(self: &Arc<Self>) -> Result<(), String> {
        use aof::rewrite::StartError;
        match aof::rewrite::start(self) {
            Ok(()) => Ok(()),
            Err(StartError::InProgress | StartError::Busy) => {
                self.persist.aof.rw.lock().scheduled = true;
                Ok(())
            }
            Err(StartError::Failed(e)) => Err(e),
        }
    }
}

impl super::hooks::Hooks for ReplicationHooks {
    fn admit(
        &self,
        srv: &Server,
        client: &mut crate::core::client::ClientState,
        id: crate::commands::CommandId,
        flags: u32,
    ) -> Result<(), crate::commands::CmdError> {
        replication::admit_write(srv, client, id, flags)
    }

    /// Wakes the feeders of what the batch wrote; the throttle's wait.
    fn after_batch(&self, srv: &Server) -> Option<std::time::Duration> {
        srv.repl.backlog.wake_if_dirty();
        srv.repl.active.ring_if_dirty();
        replication::master::throttle(&srv.repl.master, &srv.repl.backlog)
    }

    fn cron(&self, srv: &Arc<Server>, worker: usize) {
        if worker == 0 {
            replication::cron(&**srv);
            if srv.core.active {
                replication::active::cron(&srv.repl.active, &srv.core);
            }
        }
        srv.repl.backlog.wake_if_dirty();
        srv.repl.active.ring_if_dirty();
    }

    /// repl-id, repl-offset and repl-stream-db, as Redis saves them; on an
    /// active node, each link's position (`active/resume.rs`), but not in
    /// a full sync's payload (a replica would take our positions).
    fn rdb_aux(&self, srv: &Server) -> Vec<(String, String)> {
        let mut aux = replication::save_info(srv);
        if srv.core.active && !srv.persist.snapshot.for_replicas.load(Relaxed) {
            let slot = srv.identity.slot;
            aux.extend(replication::active::resume::aux_fields(
                &srv.repl.active,
                slot,
            ));
        }
        aux
    }

    fn rdb_aux_loaded(
        &self,
        srv: &Server,
        aux: &[(Vec<u8>, Vec<u8>)],
        expired: &[(usize, Vec<u8>)],
    ) {
        replication::restore_save_info(srv, aux, expired);
        restore_active_links(srv, aux);
    }

    fn aof_notes(&self, srv: &Server, all: bool) -> Vec<(String, String)> {
        if !srv.core.active {
            return Vec::new();
        }
        replication::active::resume::aof_notes(&srv.repl.active, srv.identity.slot, all)
    }

    fn aof_aux_loaded(&self, srv: &Server, aux: &[(Vec<u8>, Vec<u8>)]) {
        restore_active_links(srv, aux);
    }

    /// A replica's keys expire by its master's DELs (Redis's rule).
    fn expires_keys(&self, srv: &Server) -> bool {
        !srv.repl.is_replica()
    }
}

/// After loading an RDB file or the AOF on an active node: the links'
/// saved positions, and the deletions the load made (active/resume.rs).
fn restore_active_links(srv: &Server, aux: &[(Vec<u8>, Vec<u8>)]) {
    if srv.core.active {
        let floor = srv.stamp_floor.load(Acquire);
        replication::active::resume::restore(&srv.repl.active, aux, floor);
        let deleted = srv.persist.loading.take_deletions();
        replication::active::resume::note_load_deletions(&srv.repl.active, deleted);
    }
}
