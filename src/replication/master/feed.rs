//! A replica's connection once it asked to sync: `serve_replica` answers
//! the PSYNC (a partial resync from the backlog, or a full sync,
//! `fullsync.rs`), then becomes the replica's feeder: it copies the
//! backlog past the replica's offset into the socket whenever there is
//! some (woken once per writer batch and by the cron), and reads the
//! replica's `REPLCONF ACK`s, which move the backlog's pin (`pin.rs`).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;

use super::fullsync::full_sync;
use super::{ReplConf, ReplicaHandle, SyncRequest};
use crate::core::client::{ClientShared, ClientState};
use crate::core::sockio::{read_some, write_all, QueryBuf};
use crate::keyspace::hlc::unix_ms;
use crate::protocol::{ParseLimits, Parsed, RequestParser};
use crate::replication::host::Host;
use crate::replication::repl_timeout;
use crate::{log_notice, log_warning};

/// Serves a replica on its connection until it goes away: the PSYNC reply,
/// the full sync if needed, then the stream.
pub(crate) async fn serve_replica<T, H: Host>(
    srv: &Arc<H>,
    io: &AsyncFd<T>,
    mut qb: QueryBuf,
    client: &ClientState,
    req: SyncRequest,
    shared: &Arc<ClientShared>,
) where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    let conf = client.replconf.as_deref().cloned().unwrap_or_default();
    let ip = conf.ip.clone().unwrap_or_else(|| host_of(&shared.addr));
    let handle = Arc::new(ReplicaHandle {
        client_id: client.id,
        ip,
        port: AtomicU64::new(conf.listening_port as u64),
        ack_offset: AtomicU64::new(0),
        fack_offset: AtomicU64::new(0),
        ack_ms: AtomicU64::new(unix_ms()),
        sent: AtomicU64::new(0),
        state: Mutex::new("wait_bgsave"),
    });
    log_notice!(
        "Replica {}:{} asks for synchronization",
        handle.ip,
        conf.listening_port
    );
    srv.repl().activate_backlog(&**srv);
    shared.flags.lock().push('S');
    srv.repl().master.replicas.lock().push(handle.clone());
    let start = match partial_from(&**srv, &req, &handle) {
        Some(from) => continue_partial(srv, io, &conf, &handle, from, shared)
            .await
            .map(|from| (from, false)),
        None => full_sync(srv, io, &mut qb, (&conf, &req), &handle, shared).await,
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
        timed_out = feed(srv, io, qb, &handle, from, streamed, shared).await;
    }
    srv.repl()
        .master
        .replicas
        .lock()
        .retain(|r| !Arc::ptr_eq(r, &handle));
    srv.repl()
        .master
        .depart(&srv.repl().backlog, &handle, timed_out);
    // What only this replica needed goes now (the pin moves or goes).
    srv.repl().master.update_keep_from(&srv.repl().backlog);
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
    io: &AsyncFd<T>,
    conf: &ReplConf,
    handle: &ReplicaHandle,
    from: u64,
    shared: &ClientShared,
) -> Option<u64>
where
    T: AsRawFd,
    for<'a> &'a T: Write,
{
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
    write_all(io, line.as_bytes(), &shared.kill).await.ok()?;
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
/// there is some, and reads its REPLCONF ACKs; ends when the replica goes,
/// true when it was dropped for `repl-timeout`.
///
/// After a diskless transfer (`await_ack`) nothing is sent until the
/// replica's first ACK, as Redis does: a replica spots the end of an
/// `$EOF:` payload by the mark being the last bytes it read, so stream
/// bytes arriving right behind the mark would hide it.
async fn feed<T, H: Host>(
    srv: &Arc<H>,
    io: &AsyncFd<T>,
    mut qb: QueryBuf,
    handle: &ReplicaHandle,
    mut from: u64,
    mut await_ack: bool,
    shared: &ClientShared,
) -> bool
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    let backlog = &srv.repl().backlog;
    let mut parser = RequestParser::new();
    let mut buf = Vec::with_capacity(256 * 1024);
    loop {
        let notified = backlog.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        buf.clear();
        let n = match backlog.read(from, if await_ack { 0 } else { 1 << 20 }, &mut buf) {
            Ok(n) => n,
            Err(_) => {
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
                return false;
            }
        };
        if n > 0 {
            // A replica that takes nothing for repl-timeout (stopped, or a
            // link that stays open but carries nothing) is dropped, as
            // Redis drops one that stops acknowledging: writers must not
            // wait on it, and under the spill policy its bytes stay pinned.
            let wrote =
                tokio::time::timeout(repl_timeout(&**srv), write_all(io, &buf, &shared.kill));
            match wrote.await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return false,
                Err(_) => {
                    log_warning!(
                        "Disconnecting timedout replica (streaming sync): {}:{} took no bytes for repl-timeout",
                        handle.ip,
                        handle.port.load(Relaxed)
                    );
                    return true;
                }
            }
            from += n as u64;
            if handle.sent.swap(from, Relaxed) == 0 {
                // From its first byte on, this replica pins the backlog.
                srv.repl().master.update_keep_from(backlog);
            }
        }
        // After that the pin moves with its ACKs, not with what was sent:
        // see keep_from.
        if n == 0 && replica_timed_out(&**srv, handle) {
            log_warning!(
                "Disconnecting timedout replica (streaming sync): {}",
                handle.ip
            );
            return true;
        }
        // Acks: read what is there without waiting when there is more to send.
        let input = tokio::select! {
            biased;
            _ = shared.kill.notified() => return false,
            r = read_some(io, &mut qb) => Some(r),
            _ = std::future::ready(()), if n > 0 => None,
            _ = &mut notified => None,
            _ = tokio::time::sleep(Duration::from_millis(100)) => None,
        };
        match input {
            Some(Ok(0)) | Some(Err(_)) => return false,
            Some(Ok(_)) => {
                // Any input shows the replica alive: it sends newlines
                // while it loads a big payload, as Redis's replicas do.
                handle.ack_ms.store(unix_ms(), Relaxed);
                match read_acks(&mut parser, &mut qb, handle) {
                    None => return false,
                    Some(true) => {
                        srv.repl().master.update_keep_from(backlog);
                        if await_ack {
                            await_ack = false;
                            log_synced(handle);
                        }
                        srv.repl().master.acked_notify.notify_waiters()
                    }
                    Some(false) => {}
                }
            }
            None => {}
        }
    }
}

/// No ACK from the replica for `repl-timeout` (checked when the feed is
/// idle, so the configuration lock stays off the streaming path).
fn replica_timed_out<H: Host>(srv: &H, handle: &ReplicaHandle) -> bool {
    let timeout_ms = repl_timeout(srv).as_millis() as u64;
    unix_ms().saturating_sub(handle.ack_ms.load(Relaxed)) > timeout_ms
}

/// Handles the commands a replica sends on its link (REPLCONF ACK <offset>
/// [FACK <aof offset>], PING): whether one was an ACK; None on a protocol
/// error.
fn read_acks(
    parser: &mut RequestParser,
    qb: &mut QueryBuf,
    handle: &ReplicaHandle,
) -> Option<bool> {
    let mut acked = false;
    loop {
        match parser.parse(qb.pending(), &ParseLimits::default()) {
            Ok(Parsed::Command { consumed }) => {
                let args = parser.args(qb.pending());
                if args.len() >= 3
                    && args.get(0).eq_ignore_ascii_case(b"replconf")
                    && args.get(1).eq_ignore_ascii_case(b"ack")
                {
                    if let Some(off) = std::str::from_utf8(args.get(2))
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                    {
                        handle.ack_offset.fetch_max(off, Relaxed);
                        handle.ack_ms.store(unix_ms(), Relaxed);
                        acked = true;
                    }
                    let fack = (args.len() >= 5 && args.get(3).eq_ignore_ascii_case(b"fack"))
                        .then(|| std::str::from_utf8(args.get(4)).ok()?.parse::<u64>().ok())
                        .flatten();
                    if let Some(f) = fack {
                        handle.fack_offset.fetch_max(f, Relaxed);
                    }
                }
                qb.consume(consumed);
            }
            Ok(Parsed::Incomplete) => return Some(acked),
            Err(_) => return None,
        }
    }
}
