//! Diskless full syncs, batched as Redis does: replicas that ask within
//! `repl-diskless-sync-delay` seconds (or until
//! `repl-diskless-sync-max-replicas` wait) share one snapshot, written to
//! all of them at once ([`Fanout`]) and cut at one offset for all; the
//! snapshot stops when its last replica goes ([`SyncReaders`]).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;

use super::fullsync::{snapshot_threads, DisklessPipe, SnapDone};
use super::ReplicaHandle;
use crate::core::client::ClientShared;
use crate::core::sockio::{read_some, write_all, QueryBuf};
use crate::keyspace::hlc::unix_ms;
use crate::replication::host::{Host, ReplicaSnapshot};
use crate::{log_notice, log_warning};

/// A replica waiting for the next diskless snapshot.
struct SyncMember {
    handle: Arc<ReplicaHandle>,
    /// The snapshot writes here; the replica's task reads the other end.
    writer: std::os::unix::net::UnixStream,
    /// The cut's offset, once the snapshot starts.
    started: tokio::sync::oneshot::Sender<(u64, Arc<SyncReaders>)>,
    done: tokio::sync::oneshot::Sender<std::io::Result<u64>>,
}

/// The replicas that will share the next diskless snapshot
/// (`repl-diskless-sync-delay`, `repl-diskless-sync-max-replicas`).
pub(super) struct SyncGroup {
    members: Vec<SyncMember>,
    /// Unix ms the first one arrived.
    since_ms: u64,
}

/// Joins the diskless snapshot about to start (or opens one, started by a
/// coordinator thread once `repl-diskless-sync-delay` seconds pass or
/// `repl-diskless-sync-max-replicas` replicas wait), then waits for it to
/// start, sending newlines meanwhile as Redis does. Every replica of one
/// snapshot gets the same cut offset.
pub(super) async fn wait_shared_snapshot<T, H: Host>(
    srv: &Arc<H>,
    io: &AsyncFd<T>,
    qb: &mut QueryBuf,
    handle: &Arc<ReplicaHandle>,
    shared: &ClientShared,
) -> Option<(u64, Option<DisklessPipe>, SnapDone)>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    let (writer, reader) = std::os::unix::net::UnixStream::pair().ok()?;
    reader.set_nonblocking(true).ok()?;
    let reader = tokio::net::UnixStream::from_std(reader).ok()?;
    let (started_tx, mut started) = tokio::sync::oneshot::channel();
    let (done_tx, done) = tokio::sync::oneshot::channel();
    let member = SyncMember {
        handle: handle.clone(),
        writer,
        started: started_tx,
        done: done_tx,
    };
    if srv.config.read().get_i64("repl-diskless-sync-delay") > 0 {
        log_notice!("Delay next BGSAVE for diskless SYNC");
    }
    let opened = {
        let mut pending = srv.repl().master.pending_sync.lock();
        let group = pending.get_or_insert_with(|| SyncGroup {
            members: Vec::new(),
            since_ms: unix_ms(),
        });
        group.members.push(member);
        group.members.len() == 1
    };
    if opened {
        let srv = srv.clone();
        let spawned = std::thread::Builder::new()
            .name("lattice-replsync".into())
            .spawn(move || coordinate_shared_sync(&srv));
        if let Err(e) = spawned {
            log_warning!("Can't start the replication sync thread: {e}");
            return None;
        }
    }
    let (offset, readers) = loop {
        tokio::select! {
            r = &mut started => break r.ok()?,
            _ = shared.kill.notified() => return None,
            // The replica hung up (what it sends is kept for the feed).
            r = read_some(io, qb) => if !matches!(r, Ok(n) if n > 0) { return None },
            // No keepalive while a DEBUG SLEEP runs: Redis's blocks the
            // whole server, and tests rely on the replica timing out then.
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                if !srv.repl().replica.debug_sleeping() {
                    write_all(io, b"\n", &shared.kill).await.ok()?;
                }
            }
        }
    };
    Some((offset, Some((reader, readers)), done))
}

/// The replicas still reading one shared diskless snapshot: when the last
/// one goes, the snapshot stops (Redis kills its child then).
pub(super) struct SyncReaders {
    left: std::sync::atomic::AtomicUsize,
    finished: std::sync::atomic::AtomicBool,
}

impl SyncReaders {
    pub(super) fn leave<H: Host>(&self, srv: &H) {
        if self.left.fetch_sub(1, Relaxed) == 1 && !self.finished.load(Relaxed) {
            log_warning!("Diskless rdb transfer, last replica dropped, killing fork child");
            srv.abort_snapshot();
        }
    }
}

/// The thread behind a [`SyncGroup`]: waits until the group is due, then
/// starts its snapshot (retrying while another save runs).
fn coordinate_shared_sync<H: Host>(srv: &Arc<H>) {
    use crate::replication::host::SnapshotStart;
    let master = &srv.repl().master;
    loop {
        let (delay_ms, max) = {
            let c = srv.config.read();
            let delay = c.get_i64("repl-diskless-sync-delay").max(0) as u64;
            (
                delay * 1000,
                c.get_i64("repl-diskless-sync-max-replicas").max(0),
            )
        };
        {
            let mut pending = master.pending_sync.lock();
            let Some(group) = pending.as_mut() else {
                return;
            };
            // Replicas that left meanwhile no longer count.
            let attached = master.replicas.lock().clone();
            group
                .members
                .retain(|m| attached.iter().any(|r| Arc::ptr_eq(r, &m.handle)));
            if group.members.is_empty() {
                *pending = None;
                return;
            }
            let due = unix_ms().saturating_sub(group.since_ms) >= delay_ms
                || (max > 0 && group.members.len() as i64 >= max);
            if due && !srv.snapshot_running() {
                drop(pending);
                match srv.start_snapshot(shared_job(srv)) {
                    Ok(()) => return,
                    Err(SnapshotStart::Busy) => {}
                    Err(SnapshotStart::Spawn(e)) => {
                        log_warning!("Can't start the snapshot for replicas: {e}");
                        master.pending_sync.lock().take(); // their syncs fail
                        return;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The job of a shared diskless snapshot: at the cut it takes the waiting
/// group (whoever joined until that instant), gives them all the cut's
/// offset, and streams to all of them.
fn shared_job<H: Host>(srv: &Arc<H>) -> ReplicaSnapshot {
    let sinks = Arc::new(Mutex::new(Vec::new()));
    let dones = Arc::new(Mutex::new(Vec::new()));
    let (srv_cut, cut_sinks, cut_dones) = (srv.clone(), sinks.clone(), dones.clone());
    let srv_done = srv.clone();
    let readers = Arc::new(SyncReaders {
        left: Default::default(),
        finished: Default::default(),
    });
    let (cut_readers, done_readers) = (readers.clone(), readers);
    let done_sinks = sinks.clone();
    let at_cut = move || {
        let group = srv_cut.repl().master.pending_sync.lock().take();
        let members = group.map(|g| g.members).unwrap_or_default();
        let b = &srv_cut.repl().backlog;
        let end = b.end();
        srv_cut.set_snapshot_for_replicas(true);
        log_notice!("Starting BGSAVE for SYNC with target: replicas sockets");
        log_notice!(
            "Background RDB transfer started (a snapshot thread, {} replicas)",
            members.len()
        );
        for m in members {
            m.handle.ack_offset.store(end, Relaxed);
            m.handle.sent.store(end + 1, Relaxed);
            cut_readers.left.fetch_add(1, Relaxed);
            if m.started.send((end, cut_readers.clone())).is_err() {
                cut_readers.left.fetch_sub(1, Relaxed);
            }
            cut_sinks.lock().push(m.writer);
            cut_dones.lock().push(m.done);
        }
        srv_cut.repl().master.update_keep_from(b);
        b.forget_db();
    };
    ReplicaSnapshot {
        path: std::path::PathBuf::new(),
        stream: Some(Box::new(Fanout(sinks))),
        at_cut: Box::new(at_cut),
        done: Box::new(move |r| {
            done_readers.finished.store(true, Relaxed);
            match &r {
                Ok(n) => {
                    log_warning!(
                        "Diskless rdb transfer, done reading from pipe, {} replicas still up.",
                        done_sinks.lock().len()
                    );
                    log_notice!("Background RDB transfer terminated with success ({n} bytes)");
                }
                Err(e) => log_warning!("Background transfer error: {e}"),
            }
            srv_done.set_snapshot_for_replicas(false);
            for d in dones.lock().drain(..) {
                let each = match &r {
                    Ok(n) => Ok(*n),
                    Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                };
                let _ = d.send(each);
            }
        }),
        threads: snapshot_threads(&**srv),
    }
}

/// Writes a diskless snapshot to every replica of its group; a replica
/// gone is dropped, the snapshot fails only when none is left.
struct Fanout(Arc<Mutex<Vec<std::os::unix::net::UnixStream>>>);

impl Write for Fanout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut sinks = self.0.lock();
        sinks.retain_mut(|s| s.write_all(buf).is_ok());
        if sinks.is_empty() {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends the diskless snapshot as `$EOF:<mark>\r\n<rdb><mark>`; the mark
/// goes only once the snapshot reported success, so a failed one never
/// looks complete to the replica.
pub(super) async fn send_diskless<T>(
    io: &AsyncFd<T>,
    qb: &mut QueryBuf,
    mut pipe: tokio::net::UnixStream,
    done: SnapDone,
    shared: &ClientShared,
) -> std::io::Result<()>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    use tokio::io::AsyncReadExt;
    let mark = crate::core::random::random_hex(40);
    write_all(io, format!("$EOF:{mark}\r\n").as_bytes(), &shared.kill).await?;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        // A slow snapshot (rdb-key-save-delay) may send nothing for long:
        // watch the replica's side meanwhile, so one that hung up is let go.
        let n = tokio::select! {
            r = pipe.read(&mut buf) => r?,
            // CLIENT KILL: the link ends now, not when the payload is sent.
            _ = shared.kill.notified() => return Err(std::io::ErrorKind::ConnectionAborted.into()),
            r = read_some(io, qb) => match r {
                Ok(n) if n > 0 => continue,
                _ => return Err(std::io::ErrorKind::ConnectionReset.into()),
            },
        };
        if n == 0 {
            break;
        }
        write_all(io, &buf[..n], &shared.kill).await?;
    }
    let n = done.await.map_err(|_| std::io::ErrorKind::BrokenPipe)??;
    write_all(io, mark.as_bytes(), &shared.kill).await?;
    log_notice!("Diskless sync of {n} bytes to replica done");
    Ok(())
}
