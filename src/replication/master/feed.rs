//! A replica's connection once it asked to sync: `serve_replica` answers
//! the PSYNC (a partial resync from the backlog, or a full sync,
//! `fullsync.rs`), then becomes the replica's feeder: it copies the
//! backlog past the replica's offset into the socket whenever there is
//! some (woken once per writer batch and by the cron), and serves what the
//! replica sends (`link.rs`): its `REPLCONF ACK`s move the backlog's pin
//! (`pin.rs`).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;

use super::fullsync::full_sync;
use super::link::{Closed, Link, Runner};
use super::{ReplConf, ReplicaHandle, SyncRequest};
use crate::core::client::{ClientShared, ClientState};
use crate::core::sockio::{write_all, QueryBuf};
use crate::keyspace::hlc::unix_ms;
use crate::replication::host::Host;
use crate::replication::repl_timeout;
use crate::{log_notice, log_warning};

/// Serves a replica on its connection until it goes away: the PSYNC reply,
/// the full sync if needed, then the stream. What the replica sends meanwhile
/// runs through `runner` (`link.rs`).
pub(crate) async fn serve_replica<'a, T, H: Host>(
    srv: &Arc<H>,
    io: &'a AsyncFd<T>,
    qb: QueryBuf,
    client: &'a mut ClientState,
    req: SyncRequest,
    shared: &'a Arc<ClientShared>,
    runner: Runner<'a>,
) where
    T: AsRawFd,
    for<'b> &'b T: Read + Write,
{
    let conf = client.replconf.as_deref().cloned().unwrap_or_default();
    let handle = new_handle(client.id, &conf, shared);
    log_notice!(
        "Replica {}:{} asks for synchronization",
        handle.ip,
        conf.listening_port
    );
    srv.repl().activate_backlog(&**srv);
    shared.flags.lock().push('S');
    srv.repl().master.replicas.lock().push(handle.clone());
    let mut link = Link::new((io, qb), client, shared, runner, handle.clone());
    let start = match partial_from(&**srv, &req, &handle) {
        Some(from) => continue_partial(srv, &link, &conf, from)
            .await
            .map(|from| (from, false)),
        None => full_sync(srv, &mut link, (&conf, &req)).await,
    };
    let mut timed_out = false;
    if let Some((from, streamed)) = start {
        srv.repl().master.returned(&handle);
        *handle.state.lock() = "online";
        handle.ack_ms.store(unix_ms(), Relaxed);
        if streamed {
            log_notice!(
                "Streamed RDB transfer with replica {}:{} succeeded (socket). Waiting for REPLCONF ACK from slave to enable streaming",
                handle.ip,
                handle.port.load(Relaxed)
            );
        } else {
            log_synced(&handle);
        }
        timed_out = feed(srv, &mut link, from, streamed).await;
    }
    detach(&**srv, &handle, timed_out);
}

fn new_handle(client_id: u64, conf: &ReplConf, shared: &ClientShared) -> Arc<ReplicaHandle> {
    let ip = conf.ip.clone().unwrap_or_else(|| host_of(&shared.addr));
    Arc::new(ReplicaHandle {
        client_id,
        ip,
        port: AtomicU64::new(conf.listening_port as u64),
        ack_offset: AtomicU64::new(0),
        fack_offset: AtomicU64::new(0),
        ack_ms: AtomicU64::new(unix_ms()),
        sent: AtomicU64::new(0),
        state: Mutex::new("wait_bgsave"),
    })
}

/// The replica's connection ended: it leaves the replicas, the snapshot it
/// waited for (`disk.rs`) and the backlog's pin.
fn detach<H: Host>(srv: &H, handle: &Arc<ReplicaHandle>, timed_out: bool) {
    let master = &srv.repl().master;
    master.replicas.lock().retain(|r| !Arc::ptr_eq(r, handle));
    super::disk::leave(srv, handle);
    master.depart(&srv.repl().backlog, handle, timed_out);
    // What only this replica needed goes now (the pin moves or goes).
    master.update_keep_from(&srv.repl().backlog);
    log_notice!(
        "Connection with replica {}:{} lost.",
        handle.ip,
        handle.port.load(Relaxed)
    );
}

fn log_synced(handle: &ReplicaHandle) {
    log_notice!(
        "Synchronization with replica {}:{} succeeded",
        handle.ip,
        handle.port.load(Relaxed)
    );
}

pub(super) fn host_of(addr: &str) -> String {
    match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
        None => addr.to_string(),
    }
}

/// The offset a PSYNC may continue from, if this history has it; logs
/// why not as Redis's masterTryPartialResynchronization does.
fn partial_from<H: Host>(srv: &H, req: &SyncRequest, handle: &ReplicaHandle) -> Option<u64> {
    let master = &srv.repl().master;
    let name = format!("{}:{}", handle.ip, handle.port.load(Relaxed));
    if !req.psync {
        return None; // SYNC: a full sync, nothing more to say
    }
    let ids = srv.repl().ids.lock().clone();
    let same = req.replid == ids.replid;
    let previous = req.replid == ids.replid2 && req.offset <= ids.second_offset;
    if !same && !previous {
        if req.replid == "?" {
            log_notice!("Full resync requested by replica {name}");
        } else if req.replid != ids.replid && req.replid != ids.replid2 {
            log_notice!(
                "Partial resynchronization not accepted: Replication ID mismatch (Replica asked for '{}', my replication IDs are '{}' and '{}')",
                req.replid,
                ids.replid,
                ids.replid2
            );
        } else {
            log_notice!(
                "Partial resynchronization not accepted: Requested offset for second ID was {}, but I can reply up to {}",
                req.offset,
                ids.second_offset
            );
        }
        if req.replid != "?" {
            master.sync_partial_err.fetch_add(1, Relaxed);
        }
        return None;
    }
    if req.offset < 0 || !srv.repl().backlog.can_continue_from(req.offset as u64) {
        master.sync_partial_err.fetch_add(1, Relaxed);
        log_notice!(
            "Unable to partial resync with replica {name} for lack of backlog (Replica request was: {}).",
            req.offset
        );
        if req.offset > 0 && req.offset as u64 > srv.repl().backlog.end() + 1 {
            log_warning!(
                "Warning: replica {name} tried to PSYNC with an offset that is greater than the master replication offset."
            );
        }
        return None;
    }
    Some(req.offset as u64)
}

async fn continue_partial<T, H: Host>(
    srv: &Arc<H>,
    link: &Link<'_, T>,
    conf: &ReplConf,
    from: u64,
) -> Option<u64>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    let handle = &link.handle;
    handle.ack_offset.store(from - 1, Relaxed);
    handle.sent.store(from, Relaxed);
    srv.repl().master.update_keep_from(&srv.repl().backlog);
    let replid = srv.repl().ids.lock().replid.clone();
    let line = if conf.capa_psync2 {
        format!("+CONTINUE {replid}\r\n")
    } else {
        "+CONTINUE\r\n".to_string()
    };
    // Counted before the reply leaves, as Redis's (whose reply is sent
    // later from its buffer): a replica that sees +CONTINUE sees it counted.
    srv.repl().master.sync_partial_ok.fetch_add(1, Relaxed);
    write_all(link.io, line.as_bytes(), &link.shared.kill)
        .await
        .ok()?;
    log_notice!(
        "Partial resynchronization request from {}:{} accepted. Sending {} bytes of backlog starting from offset {}.",
        handle.ip,
        handle.port.load(Relaxed),
        srv.repl().backlog.end() + 1 - from,
        from
    );
    Some(from)
}
/// The stream: copies the backlog past `from` to the replica whenever
/// there is some, and serves what it sends (its REPLCONF ACKs); ends when
/// the replica goes, true when it was dropped for `repl-timeout`.
///
/// After a diskless transfer (`await_ack`) nothing is sent until the
/// replica's first ACK, as Redis does: a replica spots the end of an
/// `$EOF:` payload by the mark being the last bytes it read, so stream
/// bytes arriving right behind the mark would hide it.
async fn feed<T, H: Host>(
    srv: &Arc<H>,
    link: &mut Link<'_, T>,
    mut from: u64,
    mut await_ack: bool,
) -> bool
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    let backlog = &srv.repl().backlog;
    let mut buf = Vec::with_capacity(256 * 1024);
    // What came before (with a partial resync's PSYNC, or during the
    // transfer) is served first.
    let mut input = Some(Ok(()));
    loop {
        if let Some(r) = input {
            if r.and_then(|()| serve_input(srv, link, &mut await_ack))
                .is_err()
            {
                return false;
            }
        }
        let notified = backlog.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        buf.clear();
        let max = if await_ack { 0 } else { 1 << 20 };
        let Ok(n) = backlog.read(from, max, &mut buf) else {
            fell_out(&**srv, &link.handle, from);
            return false;
        };
        if n > 0 {
            if let Some(timed_out) = send_stream(srv, link, &buf).await {
                return timed_out;
            }
            from += n as u64;
            if link.handle.sent.swap(from, Relaxed) == 0 {
                // From its first byte on, this replica pins the backlog.
                srv.repl().master.update_keep_from(backlog);
            }
        }
        // After that the pin moves with its ACKs, not with what was sent:
        // see keep_from.
        if n == 0 && replica_timed_out(&**srv, &link.handle) {
            log_warning!(
                "Disconnecting timedout replica (streaming sync): {}",
                link.handle.ip
            );
            return true;
        }
        // Input: read what is there without waiting when there is more to send.
        let shared = link.shared;
        input = tokio::select! {
            biased;
            _ = shared.kill.notified() => return false,
            r = Link::read(link.io, &mut link.qb) => Some(r),
            _ = std::future::ready(()), if n > 0 => None,
            _ = &mut notified => None,
            _ = tokio::time::sleep(Duration::from_millis(100)) => None,
        };
    }
}

/// Serves what the replica sent (`link.rs`); an ACK moves the backlog's
/// pin, wakes WAIT, and after a diskless transfer lets the stream start.
fn serve_input<T, H: Host>(
    srv: &Arc<H>,
    link: &mut Link<'_, T>,
    await_ack: &mut bool,
) -> Result<(), Closed>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    if !link.take_input(&**srv)? {
        return Ok(());
    }
    let master = &srv.repl().master;
    master.update_keep_from(&srv.repl().backlog);
    if std::mem::take(await_ack) {
        log_synced(&link.handle);
    }
    master.acked_notify.notify_waiters();
    Ok(())
}

/// Writes stream bytes to the replica. A replica that takes nothing for
/// repl-timeout (stopped, or a link that stays open but carries nothing)
/// is dropped, as Redis drops one that stops acknowledging: writers must
/// not wait on it, and under the spill policy its bytes stay pinned.
/// None: written; else the link ends (true: timed out).
async fn send_stream<T, H: Host>(srv: &Arc<H>, link: &Link<'_, T>, buf: &[u8]) -> Option<bool>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    let wrote = tokio::time::timeout(
        repl_timeout(&**srv),
        write_all(link.io, buf, &link.shared.kill),
    );
    match wrote.await {
        Ok(Ok(())) => None,
        Ok(Err(_)) => Some(false),
        Err(_) => {
            log_warning!(
                "Disconnecting timedout replica (streaming sync): {}:{} took no bytes for repl-timeout",
                link.handle.ip,
                link.handle.port.load(Relaxed)
            );
            Some(true)
        }
    }
}

/// The replica's next offset is no longer in the backlog: it is closed.
fn fell_out<H: Host>(srv: &H, handle: &ReplicaHandle, from: u64) {
    let backlog = &srv.repl().backlog;
    srv.repl().master.lag_disconnects.fetch_add(1, Relaxed);
    let (first, held) = backlog.range();
    log_warning!(
        "Replica {}:{} fell out of the backlog (behind the replica hard limit in memory, or repl-backlog-disk-size on disk): closing it, it will resync (next offset {from}, memory {first}..={}, {held} bytes, hard cap {}; disk {} bytes)",
        handle.ip,
        handle.port.load(Relaxed),
        backlog.end(),
        backlog.hard_cap.load(Relaxed),
        backlog.disk_range().1,
    );
}

/// No ACK from the replica for `repl-timeout` (checked when the feed is
/// idle, so the configuration lock stays off the streaming path).
fn replica_timed_out<H: Host>(srv: &H, handle: &ReplicaHandle) -> bool {
    let timeout_ms = repl_timeout(srv).as_millis() as u64;
    unix_ms().saturating_sub(handle.ack_ms.load(Relaxed)) > timeout_ms
}
