//! A full sync: the fork-free snapshot's cut (all shards locked) records
//! the offset, pins the backlog there and forces a SELECT; the RDB then
//! goes out as `$<len>` from a temp file, or diskless as `$EOF:<mark>`
//! through a socket pair from a snapshot shared with other replicas
//! (`diskless.rs`).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use super::diskless::{send_diskless, wait_shared_snapshot, SyncReaders};
use super::{ReplConf, ReplicaHandle, SyncRequest};
use crate::core::client::ClientShared;
use crate::core::sockio::{write_all, QueryBuf};
use crate::replication::host::Host;
use crate::{log_notice, log_warning};

/// `temp-repl-<pid>-<client>.rdb`: a disk-based sync's file.
fn sync_file_name(client_id: u64) -> std::path::PathBuf {
    format!("temp-repl-{}-{client_id}.rdb", std::process::id()).into()
}

/// Takes a snapshot for this replica and sends it; returns the offset the
/// stream continues from, or None if the sync failed (the connection
/// closes and the replica retries).
pub(super) async fn full_sync<T, H: Host>(
    srv: &Arc<H>,
    io: &AsyncFd<T>,
    qb: &mut QueryBuf,
    (conf, req): (&ReplConf, &SyncRequest),
    handle: &Arc<ReplicaHandle>,
    shared: &ClientShared,
) -> Option<(u64, bool)>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    let diskless = conf.capa_eof && srv.config.read().get_bool("repl-diskless-sync");
    srv.repl().master.sync_full.fetch_add(1, Relaxed);
    let (offset, pipe, done) = if diskless {
        wait_shared_snapshot(srv, io, qb, handle, shared).await?
    } else {
        let started = start_snapshot(srv, io, handle, shared).await?;
        log_notice!("Starting BGSAVE for SYNC with target: disk");
        log_notice!("Background saving started");
        started
    };
    if req.psync {
        let replid = srv.repl().ids.lock().replid.clone();
        let line = format!("+FULLRESYNC {replid} {offset}\r\n");
        write_all(io, line.as_bytes(), &shared.kill).await.ok()?;
    }
    let pipe_used = pipe.is_some();
    let sent = match pipe {
        // Redis shows wait_bgsave while its child streams to the socket.
        Some((pipe, readers)) => {
            let sent = send_diskless(io, qb, pipe, done, shared).await;
            if sent.is_err() {
                readers.leave(&**srv);
            }
            sent
        }
        None => send_file(io, handle, done, shared).await,
    };
    let _ = std::fs::remove_file(sync_file_name(handle.client_id));
    match sent {
        Ok(()) => Some((offset + 1, pipe_used)),
        Err(e) => {
            log_warning!("Full sync to replica {} failed: {e}", handle.ip);
            None
        }
    }
}

pub(super) type SnapDone = tokio::sync::oneshot::Receiver<std::io::Result<u64>>;
/// A diskless snapshot's read end, and who else reads the same snapshot.
pub(super) type DisklessPipe = (tokio::net::UnixStream, Arc<SyncReaders>);

/// Starts a disk-based snapshot for this replica alone (waiting for a
/// running one to end, with newline keepalives as Redis sends); returns
/// the cut's offset and the completion.
async fn start_snapshot<T, H: Host>(
    srv: &Arc<H>,
    io: &AsyncFd<T>,
    handle: &Arc<ReplicaHandle>,
    shared: &ClientShared,
) -> Option<(u64, Option<DisklessPipe>, SnapDone)>
where
    T: AsRawFd,
    for<'a> &'a T: Write,
{
    use crate::replication::host::{ReplicaSnapshot, SnapshotStart};
    let mut waited = 0u32;
    loop {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let cut_offset = Arc::new(AtomicU64::new(0));
        let (srv_cut, h, off) = (srv.clone(), handle.clone(), cut_offset.clone());
        let srv_done = srv.clone();
        let job = ReplicaSnapshot {
            path: sync_file_name(handle.client_id),
            stream: None,
            at_cut: Box::new(move || {
                // Every shard is locked: no write is half in the stream.
                let b = &srv_cut.repl().backlog;
                let end = b.end();
                off.store(end, Relaxed);
                srv_cut.set_snapshot_for_replicas(true);
                h.ack_offset.store(end, Relaxed);
                h.sent.store(end + 1, Relaxed);
                srv_cut.repl().master.update_keep_from(b);
                b.forget_db();
            }),
            done: Box::new(move |r| {
                srv_done.set_snapshot_for_replicas(false);
                // Redis's child, then its parent (as a BGSAVE's).
                match &r {
                    Ok(n) => {
                        crate::log::as_child(|| log_notice!("DB saved on disk ({n} bytes)"));
                        log_notice!("Background saving terminated with success");
                    }
                    Err(e) => log_warning!("Background saving error: {e}"),
                }
                let _ = tx.send(r);
            }),
            threads: snapshot_threads(&**srv),
        };
        match srv.start_snapshot(job) {
            Ok(()) => return Some((cut_offset.load(Relaxed), None, rx)),
            Err(SnapshotStart::Busy) => {
                // Another save runs: wait for it, keeping the link alive.
                tokio::time::sleep(Duration::from_millis(100)).await;
                waited += 1;
                if waited.is_multiple_of(10) && !srv.repl().replica.debug_sleeping() {
                    write_all(io, b"\n", &shared.kill).await.ok()?;
                }
            }
            Err(SnapshotStart::Spawn(e)) => {
                log_warning!("Can't start the snapshot for a replica: {e}");
                return None;
            }
        }
    }
}

/// Serializer threads for a replication snapshot: half the cores, one
/// when `rdb-key-save-delay` stretches it (the delay is per key).
pub(super) fn snapshot_threads<H: Host>(srv: &H) -> usize {
    if srv.config.read().get_i64("rdb-key-save-delay") != 0 {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}
/// Waits for the file (newline keepalives every second), then sends it as
/// `$<len>\r\n<rdb>`.
async fn send_file<T>(
    io: &AsyncFd<T>,
    handle: &ReplicaHandle,
    mut done: SnapDone,
    shared: &ClientShared,
) -> std::io::Result<()>
where
    T: AsRawFd,
    for<'a> &'a T: Write,
{
    let len = loop {
        tokio::select! {
            r = &mut done => break r.map_err(|_| std::io::ErrorKind::BrokenPipe)??,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                write_all(io, b"\n", &shared.kill).await?;
            }
        }
    };
    *handle.state.lock() = "send_bulk";
    let mut f = std::fs::File::open(sync_file_name(handle.client_id))?;
    write_all(io, format!("${len}\r\n").as_bytes(), &shared.kill).await?;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        write_all(io, &buf[..n], &shared.kill).await?;
    }
}
