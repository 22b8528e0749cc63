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

use super::fullsync::{snapshot_threads, DisklessPipe, SnapDone};
use super::link::{Closed, Link};
use super::{ReplicaHandle, Stop};
use crate::core::sockio::write_all;
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
/// start, serving the link meanwhile (`link.rs`). Every replica of one
/// snapshot gets the same cut offset.
pub(super) async fn wait_shared_snapshot<T, H: Host>(
    srv: &Arc<H>,
    link: &mut Link<'_, T>,
) -> Option<(u64, DisklessPipe, SnapDone)>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    let (writer, reader) = std::os::unix::net::UnixStream::pair().ok()?;
    reader.set_nonblocking(true).ok()?;
    let reader = tokio::net::UnixStream::from_std(reader).ok()?;
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (done_tx, done) = tokio::sync::oneshot::channel();
    let member = SyncMember {
        handle: link.handle.clone(),
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
    let (offset, readers) = link.wait_serving(&**srv, started).await?.ok()?;
    Some((offset, (reader, readers), done))
}

/// The replicas still reading one shared diskless snapshot: when the last
/// one goes, the snapshot stops (Redis kills its child then).
pub(super) struct SyncReaders {
    left: std::sync::atomic::AtomicUsize,
    finished: std::sync::atomic::AtomicBool,
    /// Why the snapshot was stopped, if it was.
    stopped: Mutex<Option<Stop>>,
}

impl SyncReaders {
    pub(super) fn leave<H: Host>(&self, srv: &H) {
        if self.left.fetch_sub(1, Relaxed) == 1 && !self.finished.load(Acquire) {
            log_warning!("Diskless rdb transfer, last replica dropped, killing fork child.");
            self.stop(srv, Stop::Unwanted);
        }
    }

    /// Stops the snapshot (once, and only while it runs).
    pub(super) fn stop<H: Host>(&self, srv: &H, why: Stop) {
        let mut stopped = self.stopped.lock();
        if self.finished.load(Acquire) || stopped.is_some() {
            return;
        }
        *stopped = Some(why);
        srv.abort_snapshot();
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
    let readers = Arc::new(SyncReaders {
        left: Default::default(),
        finished: Default::default(),
        stopped: Mutex::new(None),
    });
    let (srv_cut, cut_sinks, cut_dones) = (srv.clone(), sinks.clone(), dones.clone());
    let cut_readers = readers.clone();
    let at_cut = move || {
        // Known before any replica hears of it: a FLUSHALL it answers by
        // then finds it (`stop_for_flushall`).
        *srv_cut.repl().master.diskless_sync.lock() = Some(cut_readers.clone());
        let group = srv_cut.repl().master.pending_sync.lock().take();
        let members = group.map(|g| g.members).unwrap_or_default();
        let b = &srv_cut.repl().backlog;
        let end = b.end();
        srv_cut.set_snapshot_for_replicas(true);
        log_notice!("Starting BGSAVE for SYNC with target: replicas sockets");
        // The snapshot is a thread of this process: its pid is ours.
        log_notice!(
            "Background RDB transfer started by pid {} (a snapshot thread, {} replicas)",
            std::process::id(),
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
    let srv_done = srv.clone();
    ReplicaSnapshot {
        path: std::path::PathBuf::new(),
        stream: Some(Box::new(Fanout(sinks.clone()))),
        at_cut: Box::new(at_cut),
        done: Box::new(move |r| {
            shared_done(&*srv_done, &readers, sinks.lock().len(), &r);
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

/// A shared diskless snapshot ended (`up`: replicas still reading): its
/// lines as Redis's parent logs them once the child's pipe is drained, and
/// for a failure, one "SYNC failed" per replica.
fn shared_done<H: Host>(srv: &H, readers: &Arc<SyncReaders>, up: usize, r: &std::io::Result<u64>) {
    readers.finished.store(true, Release);
    {
        let mut running = srv.repl().master.diskless_sync.lock();
        if running.as_ref().is_some_and(|s| Arc::ptr_eq(s, readers)) {
            *running = None;
        }
    }
    log_warning!("Diskless rdb transfer, done reading from pipe, {up} replicas still up.");
    match r {
        Ok(n) => log_notice!("Background RDB transfer terminated with success ({n} bytes)"),
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
            let why = *readers.stopped.lock();
            log_warning!("Background transfer terminated {}", Stop::says(why));
        }
        Err(e) => log_warning!("Background transfer error: {e}"),
    }
    if r.is_err() {
        for _ in 0..up {
            log_warning!("SYNC failed. BGSAVE child returned an error");
        }
    }
    srv.set_snapshot_for_replicas(false);
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
/// looks complete to the replica. The link is served meanwhile (`link.rs`).
pub(super) async fn send_diskless<T, H: Host>(
    srv: &Arc<H>,
    link: &mut Link<'_, T>,
    mut pipe: tokio::net::UnixStream,
    done: SnapDone,
) -> std::io::Result<()>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    use tokio::io::AsyncReadExt;
    let mark = crate::core::random::random_hex(40);
    let (io, shared) = (link.io, link.shared);
    let kill = &shared.kill;
    write_all(io, format!("$EOF:{mark}\r\n").as_bytes(), kill).await?;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        // A slow snapshot (rdb-key-save-delay) may send nothing for long:
        // serve the replica's side meanwhile, so one that hung up is let go.
        let n = tokio::select! {
            r = pipe.read(&mut buf) => r?,
            // CLIENT KILL: the link ends now, not when the payload is sent.
            _ = kill.notified() => return Err(std::io::ErrorKind::ConnectionAborted.into()),
            r = Link::read(io, &mut link.qb) => match r.and_then(|()| link.take_input(&**srv)) {
                Ok(_) => continue,
                Err(Closed) => return Err(std::io::ErrorKind::ConnectionReset.into()),
            },
        };
        if n == 0 {
            break;
        }
        write_all(io, &buf[..n], kill).await?;
    }
    let n = done.await.map_err(|_| std::io::ErrorKind::BrokenPipe)??;
    write_all(io, mark.as_bytes(), kill).await?;
    log_notice!("Diskless sync of {n} bytes to replica done");
    Ok(())
}
