//! A full sync: the fork-free snapshot's cut (all shards locked) records
//! the offset, pins the backlog there and forces a SELECT; the RDB then
//! goes out as `$<len>` from a temp file (`disk.rs`), or diskless as
//! `$EOF:<mark>` through a socket pair (`diskless.rs`), each from a
//! snapshot shared with the other replicas that ask while it is taken.
//! The link is served all along (`link.rs`).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use super::disk::{self, DiskDone};
use super::diskless::{send_diskless, wait_shared_snapshot, SyncReaders};
use super::link::Link;
use super::{ReplConf, SyncRequest};
use crate::core::sockio::write_all;
use crate::log_warning;
use crate::replication::host::Host;

/// Takes a snapshot for this replica (or joins one) and sends it; returns
/// the offset the stream continues from and whether it went diskless, or
/// None if the sync failed (the connection closes and the replica
/// retries).
pub(super) async fn full_sync<T, H: Host>(
    srv: &Arc<H>,
    link: &mut Link<'_, T>,
    (conf, req): (&ReplConf, &SyncRequest),
) -> Option<(u64, bool)>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    let diskless = conf.capa_eof && srv.config.read().get_bool("repl-diskless-sync");
    srv.repl().master.sync_full.fetch_add(1, Relaxed);
    let (offset, payload) = if diskless {
        let (offset, pipe, done) = wait_shared_snapshot(srv, link).await?;
        (offset, Payload::Pipe(pipe, done))
    } else {
        let handle = link.handle.clone();
        let (offset, done) = link
            .wait_serving(&**srv, disk::join(srv, &handle))
            .await??;
        (offset, Payload::File(done))
    };
    if req.psync {
        let replid = srv.repl().ids.lock().replid.clone();
        let line = format!("+FULLRESYNC {replid} {offset}\r\n");
        write_all(link.io, line.as_bytes(), &link.shared.kill)
            .await
            .ok()?;
    }
    let sent = match payload {
        // Redis shows wait_bgsave while its child streams to the socket.
        Payload::Pipe((pipe, readers), done) => {
            let sent = send_diskless(srv, link, pipe, done).await;
            if sent.is_err() {
                readers.leave(&**srv);
            }
            sent
        }
        Payload::File(done) => send_file(srv, link, done).await,
    };
    match sent {
        Ok(()) => Some((offset + 1, diskless)),
        Err(e) => {
            log_warning!("Full sync to replica {} failed: {e}", link.handle.ip);
            None
        }
    }
}

pub(super) type SnapDone = tokio::sync::oneshot::Receiver<std::io::Result<u64>>;
/// A diskless snapshot's read end, and who else reads the same snapshot.
pub(super) type DisklessPipe = (tokio::net::UnixStream, Arc<SyncReaders>);

/// What a full sync sends: a diskless snapshot's stream, or a disk one's file.
enum Payload {
    Pipe(DisklessPipe, SnapDone),
    File(DiskDone),
}

/// Serializer threads for a replication snapshot: half the cores, one
/// when `rdb-key-save-delay` stretches it (the delay is per key).
pub(super) fn snapshot_threads<H: Host>(srv: &H) -> usize {
    if srv.config.read().get_i64("rdb-key-save-delay") != 0 {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}
/// Waits for the file (serving the link meanwhile, `link.rs`), then
/// sends it as `$<len>\r\n<rdb>`.
async fn send_file<T, H: Host>(
    srv: &Arc<H>,
    link: &mut Link<'_, T>,
    done: DiskDone,
) -> std::io::Result<()>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    let Some(r) = link.wait_serving(&**srv, done).await else {
        return Err(std::io::ErrorKind::ConnectionAborted.into());
    };
    let (len, mut f) = r.map_err(|_| std::io::ErrorKind::BrokenPipe)??;
    *link.handle.state.lock() = "send_bulk";
    let (io, shared) = (link.io, link.shared);
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
