//! Disk-based full syncs, shared as Redis shares them: a replica that asks
//! while a disk snapshot for replicas runs, and another replica waits for
//! it, waits for that one too (the same cut offset, the same file: Redis's
//! "Waiting for end of BGSAVE for SYNC"); else it starts one, once any
//! other save has ended.
//!
//! The snapshot stops when the last replica waiting for it leaves and no
//! `save` points are set, as Redis kills its child then (with save points
//! Redis's dump is worth finishing: ours is the sync's own file, finished
//! anyway so that the rule, which the Tcl suite checks, stays Redis's);
//! FLUSHALL stops it too (`stop_for_flushall`). Each replica gets the file
//! opened before it is removed, so no one removes it under another.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::fullsync::snapshot_threads;
use super::{ReplicaHandle, Stop};
use crate::replication::host::{Host, ReplicaSnapshot, SnapshotStart};
use crate::{log_notice, log_warning};

/// What a replica of a disk snapshot gets: the payload's length and the
/// file, opened.
type FileResult = io::Result<(u64, std::fs::File)>;
pub(super) type DiskDone = tokio::sync::oneshot::Receiver<FileResult>;

/// A disk snapshot running for replicas.
pub(super) struct DiskSync {
    /// The cut's offset: the stream of every replica of it continues there.
    offset: AtomicU64,
    /// The replicas waiting for it, by client id.
    waiting: Mutex<Vec<(u64, tokio::sync::oneshot::Sender<FileResult>)>>,
    /// It ended (successfully or not).
    over: AtomicBool,
    /// Why it was stopped, if it was.
    stopped: Mutex<Option<Stop>>,
}

impl DiskSync {
    /// Stops it (once, and only while it runs).
    pub(super) fn stop<H: Host>(&self, srv: &H, why: Stop) {
        let mut stopped = self.stopped.lock();
        if self.over.load(Acquire) || stopped.is_some() {
            return;
        }
        *stopped = Some(why);
        srv.abort_snapshot();
    }
}

/// `temp-repl-<pid>-<client>.rdb`: a disk-based sync's file, named after
/// the replica that started it.
fn sync_file_name(client_id: u64) -> PathBuf {
    format!("temp-repl-{}-{client_id}.rdb", std::process::id()).into()
}

/// Joins the disk snapshot for replicas that runs, or starts one (waiting
/// while another save runs); the cut's offset and the completion. None:
/// no snapshot could be started.
pub(super) async fn join<H: Host>(
    srv: &Arc<H>,
    handle: &Arc<ReplicaHandle>,
) -> Option<(u64, DiskDone)> {
    loop {
        if let Some(joined) = attach(&**srv, handle) {
            return Some(joined);
        }
        match start(srv, handle) {
            Ok(started) => return Some(started),
            Err(SnapshotStart::Busy) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(SnapshotStart::Spawn(e)) => {
                log_warning!("Can't start the snapshot for a replica: {e}");
                return None;
            }
        }
    }
}

/// Waits for the disk snapshot that runs, if another replica waits for it
/// and the backlog still holds the stream from its cut.
fn attach<H: Host>(srv: &H, handle: &Arc<ReplicaHandle>) -> Option<(u64, DiskDone)> {
    let running = srv.repl().master.disk_sync.lock();
    let sync = running.as_ref()?;
    let mut waiting = sync.waiting.lock();
    if waiting.is_empty() || sync.over.load(Acquire) {
        return None;
    }
    let offset = sync.offset.load(Relaxed);
    pin_at(srv, handle, offset);
    if !srv.repl().backlog.can_continue_from(offset + 1) {
        handle.sent.store(0, Relaxed);
        srv.repl().master.update_keep_from(&srv.repl().backlog);
        return None;
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    waiting.push((handle.client_id, tx));
    log_notice!("Waiting for end of BGSAVE for SYNC");
    Some((offset, rx))
}

/// The replica's stream starts after `offset`: the backlog keeps it.
fn pin_at<H: Host>(srv: &H, handle: &ReplicaHandle, offset: u64) {
    handle.ack_offset.store(offset, Relaxed);
    handle.sent.store(offset + 1, Relaxed);
    srv.repl().master.update_keep_from(&srv.repl().backlog);
}

/// Starts a disk snapshot for this replica (and those that join it).
fn start<H: Host>(
    srv: &Arc<H>,
    handle: &Arc<ReplicaHandle>,
) -> Result<(u64, DiskDone), SnapshotStart> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sync = Arc::new(DiskSync {
        offset: AtomicU64::new(0),
        waiting: Mutex::new(vec![(handle.client_id, tx)]),
        over: AtomicBool::new(false),
        stopped: Mutex::new(None),
    });
    let path = sync_file_name(handle.client_id);
    let (srv_cut, h, cut_sync) = (srv.clone(), handle.clone(), sync.clone());
    let at_cut = move || {
        // Every shard is locked: no write is half in the stream.
        let b = &srv_cut.repl().backlog;
        let end = b.end();
        cut_sync.offset.store(end, Relaxed);
        srv_cut.set_snapshot_for_replicas(true);
        pin_at(&*srv_cut, &h, end);
        b.forget_db();
        *srv_cut.repl().master.disk_sync.lock() = Some(cut_sync);
    };
    let (srv_done, done_path, done_sync) = (srv.clone(), path.clone(), sync.clone());
    srv.start_snapshot(ReplicaSnapshot {
        path,
        stream: None,
        at_cut: Box::new(at_cut),
        done: Box::new(move |r| finish(&*srv_done, &done_sync, &done_path, r)),
        threads: snapshot_threads(&**srv),
    })?;
    log_notice!("Starting BGSAVE for SYNC with target: disk");
    log_notice!("Background saving started");
    Ok((sync.offset.load(Relaxed), rx))
}

/// The snapshot ended: each replica waiting gets the file, opened, or the
/// failure (Redis's "SYNC failed"); then the file goes.
fn finish<H: Host>(srv: &H, sync: &Arc<DiskSync>, path: &PathBuf, r: io::Result<u64>) {
    sync.over.store(true, Release);
    {
        let mut running = srv.repl().master.disk_sync.lock();
        if running.as_ref().is_some_and(|s| Arc::ptr_eq(s, sync)) {
            *running = None;
        }
    }
    srv.set_snapshot_for_replicas(false);
    // Redis's child, then its parent (as a BGSAVE's).
    match &r {
        Ok(n) => {
            crate::log::as_child(|| log_notice!("DB saved on disk ({n} bytes)"));
            log_notice!("Background saving terminated with success");
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {
            let why = *sync.stopped.lock();
            log_warning!("Background saving terminated {}", Stop::says(why));
        }
        Err(e) => log_warning!("Background saving error: {e}"),
    }
    let waiting = std::mem::take(&mut *sync.waiting.lock());
    for (_, tx) in waiting {
        let each = match &r {
            Ok(n) => std::fs::File::open(path).map(|f| (*n, f)),
            Err(e) => {
                log_warning!("SYNC failed. BGSAVE child returned an error");
                Err(io::Error::new(e.kind(), e.to_string()))
            }
        };
        let _ = tx.send(each);
    }
    let _ = std::fs::remove_file(path);
}

/// A replica's link ended: if it waited for the disk snapshot and was the
/// last one, the snapshot stops unless `save` points are set (Redis's
/// unlinkClient).
pub(super) fn leave<H: Host>(srv: &H, handle: &ReplicaHandle) {
    let Some(sync) = srv.repl().master.disk_sync.lock().clone() else {
        return;
    };
    let mut waiting = sync.waiting.lock();
    let before = waiting.len();
    waiting.retain(|(id, _)| *id != handle.client_id);
    let last = before > 0 && waiting.is_empty();
    drop(waiting);
    let save_points = !srv.hot.persistence.save_points.read().is_empty();
    if last && !save_points {
        sync.stop(srv, Stop::Unwanted);
    }
}
