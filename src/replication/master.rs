//! The master side: replicas attach with PSYNC (or SYNC), get a partial
//! resync from the backlog or a full one (a fork-free snapshot sent as
//! `$<len>` from a file, or diskless as `$EOF:<mark>` straight from the
//! serializer), then follow the backlog from their offset.
//!
//! Diskless full syncs are batched as Redis does: replicas that ask within
//! `repl-diskless-sync-delay` seconds (or until
//! `repl-diskless-sync-max-replicas` wait) share one snapshot, written to
//! all of them at once ([`Fanout`]) and cut at one offset for all; the
//! snapshot stops when its last replica goes.
//!
//! A replica's connection task becomes its feeder ([`serve_replica`]): it
//! copies the backlog's bytes past the replica's position into the socket
//! as fast as the socket takes them, and reads the replica's REPLCONF ACKs.
//! Nothing is queued per replica, so a slow replica is never disconnected
//! for its output buffer; the backlog keeps what it still needs (see
//! `backlog.rs`) and writers are slowed when it lags too far
//! ([`throttle_writers`]).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;

use super::repl_timeout;
use crate::commands::{CmdError, CmdResult, Ctx};
use crate::core::client::{ClientShared, ClientState};
pub use crate::core::client::{ReplConf, ReplWait, SyncRequest, WaitAof, WaitRequest};
use crate::keyspace::hlc::unix_ms;
use crate::protocol::{Args, ParseLimits, Parsed, RequestParser};
use crate::server::conn::{read_some, write_all, QueryBuf};
use crate::server::Server;
use crate::{log_notice, log_warning};

/// One attached replica, as INFO's slaveN line shows it.
pub struct ReplicaHandle {
    pub client_id: u64,
    pub ip: String,
    /// REPLCONF listening-port (0 until told).
    pub port: AtomicU64,
    /// Offset the replica last acknowledged (REPLCONF ACK).
    pub ack_offset: AtomicU64,
    /// Offset the replica's AOF is fsynced to (REPLCONF ACK ... FACK).
    pub fack_offset: AtomicU64,
    /// Unix ms of the last ACK.
    pub ack_ms: AtomicU64,
    /// Next offset the feeder sends: the backlog keeps it.
    pub sent: AtomicU64,
    /// wait_bgsave, send_bulk or online.
    pub state: Mutex<&'static str>,
}

#[derive(Default)]
pub struct MasterSide {
    pub replicas: Mutex<Vec<Arc<ReplicaHandle>>>,
    pub sync_full: AtomicU64,
    pub sync_partial_ok: AtomicU64,
    pub sync_partial_err: AtomicU64,
    /// Woken when a replica acknowledges (WAIT).
    pub acked_notify: tokio::sync::Notify,
    /// Back-pressure: write batches delayed, and the total delay (µs).
    pub throttled: AtomicU64,
    pub throttle_us: AtomicU64,
    /// Replicas closed for lagging past the hard limit.
    pub lag_disconnects: AtomicU64,
    /// repl-throttle-lag, and whether repl-lag-policy is "throttle".
    throttle_lag: AtomicU64,
    throttle_on: std::sync::atomic::AtomicBool,
    /// Replicas waiting for the next shared diskless snapshot.
    pending_sync: Mutex<Option<SyncGroup>>,
    /// Replicas that left with bytes unacknowledged, under `repl-lag-policy
    /// spill`: their history is kept (on disk) for their partial resync.
    departed: Mutex<Vec<Departed>>,
}

/// A replica that left behind the stream's end: where it would continue.
struct Departed {
    /// ip:listening-port, how it is recognised when it comes back.
    addr: String,
    from: u64,
}

impl ReplicaHandle {
    /// ip:listening-port, the replica's name across its connections.
    fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port.load(Relaxed))
    }
}

impl MasterSide {
    /// connected_slaves and the slaveN lines.
    /// `keydb`: the peers pulling from us are listed too, as KeyDB lists
    /// them (`keydb_view.rs`).
    pub fn info_fields(&self, srv: &Server, o: &mut String, keydb: bool) {
        let list = self.replicas.lock().clone();
        let mut feeds = String::new();
        let n_feeds = match keydb {
            true => super::keydb_view::info_feeds(&srv.repl.active, list.len(), &mut feeds),
            false => 0,
        };
        let _ = write!(o, "connected_slaves:{}\r\n", list.len() + n_feeds);
        let lag = srv.hot.min_replicas_max_lag.load(Relaxed);
        if srv.hot.min_replicas_to_write.load(Relaxed) > 0 && lag > 0 {
            let good = self.good_replicas(lag * 1000);
            let _ = write!(o, "min_slaves_good_slaves:{good}\r\n");
        }
        let now = unix_ms();
        for (i, r) in list.iter().enumerate() {
            let _ = write!(
                o,
                "slave{i}:ip={},port={},state={},offset={},lag={}\r\n",
                r.ip,
                r.port.load(Relaxed),
                r.state.lock(),
                r.ack_offset.load(Relaxed),
                now.saturating_sub(r.ack_ms.load(Relaxed)) / 1000,
            );
        }
        o.push_str(&feeds);
    }

    /// LatticeDB's own lines (after Redis's): how far the slowest replica
    /// is, what the backlog holds for it, and the back-pressure applied.
    pub fn lag_fields(&self, srv: &Server, o: &mut String) {
        let b = &srv.repl.backlog;
        let lag = self.max_unsent(b.end()).unwrap_or(0);
        let _ = write!(
            o,
            "repl_lag_policy:{}\r\nrepl_max_replica_lag_bytes:{lag}\r\nrepl_backlog_held_bytes:{}\r\n\
             repl_throttled_batches:{}\r\nrepl_throttle_wait_ms:{}\r\nrepl_lag_disconnects:{}\r\n",
            srv.config.read().get_str("repl-lag-policy"),
            b.held(),
            self.throttled.load(Relaxed),
            self.throttle_us.load(Relaxed) / 1000,
            self.lag_disconnects.load(Relaxed),
        );
        let (disk_first, disk_bytes) = b.disk_range();
        let _ = write!(
            o,
            "repl_backlog_disk_bytes:{disk_bytes}\r\nrepl_backlog_disk_first_byte_offset:{disk_first}\r\n\
             repl_backlog_disk_dropped_bytes:{}\r\nrepl_backlog_disk_write_errors:{}\r\n\
             repl_departed_replicas:{}\r\n",
            b.disk_dropped.load(Relaxed),
            b.spill_errors.load(Relaxed),
            self.departed.lock().len(),
        );
    }

    /// The lowest offset an attached replica still needs: the first byte
    /// it has not acknowledged. Not the first one unsent: bytes in the
    /// kernel's socket buffers (megabytes) are lost with the connection, and
    /// the partial resync after it needs them.
    fn keep_from(&self) -> Option<u64> {
        self.replicas
            .lock()
            .iter()
            .filter(|r| r.sent.load(Relaxed) != 0)
            .map(|r| r.ack_offset.load(Relaxed) + 1)
            .min()
    }

    /// The lowest offset a departed replica would continue from.
    fn departed_keep_from(&self) -> Option<u64> {
        self.departed.lock().iter().map(|d| d.from).min()
    }

    /// A streaming replica's connection ended: under the spill policy, a
    /// replica that lagged (dropped for `repl-timeout`, or behind what
    /// memory holds) keeps what it has not acknowledged pinned until it
    /// returns (unless it already has, on a new connection). One that was
    /// keeping up gets what Redis gives it: `repl-backlog-size`.
    fn depart(&self, srv: &Server, handle: &ReplicaHandle, timed_out: bool) {
        let b = &srv.repl.backlog;
        if b.disk_max.load(Relaxed) == 0 || handle.sent.load(Relaxed) == 0 {
            return;
        }
        let from = handle.ack_offset.load(Relaxed) + 1;
        if !timed_out && from >= b.range().0 {
            return;
        }
        let addr = handle.addr();
        if self.replicas.lock().iter().any(|r| r.addr() == addr) {
            return;
        }
        let mut d = self.departed.lock();
        d.retain(|d| d.addr != addr);
        d.push(Departed { addr, from });
    }

    /// A replica is back (its sync started): it no longer needs its old
    /// position kept.
    fn returned(&self, handle: &ReplicaHandle) {
        let addr = handle.addr();
        self.departed.lock().retain(|d| d.addr != addr);
    }

    /// Forgets every departed replica (the history was freed).
    pub fn forget_departed(&self, backlog: &crate::replication::backlog::Backlog) {
        self.departed.lock().clear();
        self.update_keep_from(backlog);
    }

    /// INFO's mem_total_replication_buffers, as Redis counts it: the
    /// backlog (up to repl-backlog-size) plus what some replica has not
    /// been sent yet. Redis frees a byte once every replica's socket took
    /// it; we keep it until acknowledged (see `keep_from`), which
    /// `repl_backlog_held_bytes` shows.
    pub fn buffer_bytes(&self, srv: &Server) -> usize {
        let b = &srv.repl.backlog;
        let held = b.held();
        let size = srv.config.read().get_i64("repl-backlog-size").max(0) as usize;
        let end = b.end() + 1;
        let unsent = self
            .replicas
            .lock()
            .iter()
            .map(|r| r.sent.load(Relaxed))
            .filter(|&s| s != 0)
            .map(|s| end.saturating_sub(s) as usize)
            .max()
            .unwrap_or(0);
        held.min(size.max(unsent))
    }

    /// Replicas online whose last ACK is at most `max_lag_ms` old.
    pub fn good_replicas(&self, max_lag_ms: u64) -> usize {
        let now = unix_ms();
        self.replicas
            .lock()
            .iter()
            .filter(|r| {
                *r.state.lock() == "online"
                    && now.saturating_sub(r.ack_ms.load(Relaxed)) <= max_lag_ms
            })
            .count()
    }

    /// Replicas online whose AOF is fsynced up to `offset` (WAITAOF).
    pub fn fsynced(&self, offset: u64) -> usize {
        self.replicas
            .lock()
            .iter()
            .filter(|r| *r.state.lock() == "online" && r.fack_offset.load(Relaxed) >= offset)
            .count()
    }

    /// Replicas online that acknowledged `offset` (WAIT).
    pub fn acked(&self, offset: u64) -> usize {
        self.replicas
            .lock()
            .iter()
            .filter(|r| *r.state.lock() == "online" && r.ack_offset.load(Relaxed) >= offset)
            .count()
    }
}

// ------------------------------------------------------------ commands

pub fn psync(ctx: &mut Ctx, args: Args) -> CmdResult {
    let offset = crate::commands::util::arg_i64(args.get(2)).inspect_err(|_| {
        let conf = ctx.client.replconf.as_deref().cloned().unwrap_or_default();
        let ip = conf.ip.clone().or_else(|| {
            let shared = ctx.client.shared.as_ref()?;
            Some(host_of(&shared.addr))
        });
        let name = match ip {
            Some(ip) => format!("{ip}:{}", conf.listening_port),
            None => format!("client id #{}", ctx.client.id),
        };
        log_warning!("Replica {name} asks for synchronization but with a wrong offset");
    })?;
    let replid = String::from_utf8_lossy(args.get(1)).into_owned();
    if args.len() > 3 && args.get(3).eq_ignore_ascii_case(b"failover") {
        // Our master hands over to us (FAILOVER): promote, then serve it.
        if replid != crate::server::of(ctx).repl.ids.lock().replid {
            return Err(CmdError::Msg(
                "ERR PSYNC FAILOVER replid must match my replid.".into(),
            ));
        }
        log_notice!("Failover request received for replid {replid}.");
        catch_up_before_promotion(crate::server::of(ctx), offset);
        crate::replication::replica::promote(crate::server::of(ctx));
    }
    request_sync(ctx, true, replid, offset)
}

/// A master failing over to us asks to continue from `offset`: what it
/// sent us before it paused. Redis's replica has applied all of it that
/// reached its socket by then (one event loop: the link's bytes are read
/// before the new connection's handshake is done). Our link has a thread
/// of its own, which may not have run yet (a loaded machine, or a replica
/// that was SIGSTOPped and has just been continued: failover.tcl's "with
/// force" case): wait for it, a bounded time, so that the master gets its
/// partial sync instead of a full one. This blocks one worker for at most
/// `MAX_WAIT`, once per failover.
fn catch_up_before_promotion(srv: &Server, offset: i64) {
    const MAX_WAIT: Duration = Duration::from_millis(500);
    let want = (offset - 1).max(0) as u64;
    let start = std::time::Instant::now();
    while srv.repl.backlog.end() < want && srv.repl.replica.link_up() && start.elapsed() < MAX_WAIT
    {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// LATTICE.PEER: an active peer asks for our stream (`active/serve.rs`).
pub fn lattice_peer(ctx: &mut Ctx, args: Args) -> CmdResult {
    let host = crate::server::of(ctx).peer_host();
    super::active::serve::peer_cmd(ctx, args, &*host)
}

pub fn sync(ctx: &mut Ctx, _args: Args) -> CmdResult {
    request_sync(ctx, false, "?".into(), -1)
}

fn request_sync(ctx: &mut Ctx, psync: bool, replid: String, offset: i64) -> CmdResult {
    if ctx.client.sync_request.is_some() || ctx.client.shared.is_none() {
        return Ok(()); // already a replica (Redis ignores it)
    }
    if crate::server::of(ctx).repl.is_replica() && !crate::server::of(ctx).repl.replica.link_up() {
        return Err(CmdError::Msg(
            "NOMASTERLINK Can't SYNC while not connected with my master".into(),
        ));
    }
    ctx.client.sync_request = Some(SyncRequest {
        psync,
        replid,
        offset,
    });
    Ok(())
}

/// REPLCONF <option> <value> ...: listening-port, ip-address, capa, ack,
/// getack (on a replica, from its master), rdb-only and the like.
pub fn replconf(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    let conf = ctx.client.replconf.get_or_insert_with(Default::default);
    let mut i = 1;
    while i < args.len() {
        let opt = String::from_utf8_lossy(args.get(i)).to_ascii_lowercase();
        let val = args.get(i + 1);
        match opt.as_str() {
            "listening-port" => {
                let p = crate::commands::util::arg_i64(val)?;
                conf.listening_port = p.clamp(0, 65535) as u16;
            }
            "ip-address" => conf.ip = Some(String::from_utf8_lossy(val).into_owned()),
            "capa" => {
                conf.capa_eof |= val.eq_ignore_ascii_case(b"eof");
                conf.capa_psync2 |= val.eq_ignore_ascii_case(b"psync2");
            }
            "getack" => return crate::replication::replica::getack(ctx),
            "ack" | "fack" => return Ok(()), // acks arrive on the feed, not here
            "rdb-only" | "rdb-filter-only" => {}
            _ => {
                return Err(CmdError::Msg(format!(
                    "ERR Unrecognized REPLCONF option: {opt}"
                )))
            }
        }
        i += 2;
    }
    ctx.out.ok();
    Ok(())
}

/// A WAIT/WAITAOF timeout argument (ms, 0: forever) as a unix-ms deadline
/// (0: none).
fn wait_deadline(ctx: &Ctx, arg: &[u8]) -> Result<u64, CmdError> {
    let timeout = crate::commands::util::arg_i64(arg)?;
    if timeout < 0 {
        return Err(CmdError::Msg("ERR timeout is negative".into()));
    }
    Ok(if timeout == 0 {
        0
    } else {
        ctx.now_ms + timeout as u64
    })
}

/// WAIT numreplicas timeout: how many replicas acknowledged every write
/// this server made so far (this client's included), waiting up to
/// `timeout` ms (0: forever) for `numreplicas` of them.
pub fn wait(ctx: &mut Ctx, args: Args) -> CmdResult {
    let replicas = crate::commands::util::arg_i64(args.get(1))?;
    let deadline_ms = wait_deadline(ctx, args.get(2))?;
    if crate::server::of(ctx).repl.is_replica() {
        return Err(CmdError::Msg(
            "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.".into(),
        ));
    }
    let repl = &crate::server::of(ctx).repl;
    let offset = repl.backlog.end();
    let active_offset = repl.active.stream.end();
    let acked = repl.master.acked(offset) + repl.active.acked(active_offset);
    if acked as i64 >= replicas || ctx.client.in_exec {
        ctx.out.int(acked as i64);
        return Ok(());
    }
    request_acks(crate::server::of(ctx));
    ctx.client.repl_wait = Some(ReplWait::Wait(WaitRequest {
        offset,
        active_offset,
        replicas: replicas.max(0) as usize,
        deadline_ms,
    }));
    Ok(())
}

/// Waits for `w` and writes its reply into `out`.
pub async fn answer_wait(
    srv: &Server,
    w: ReplWait,
    kill: &tokio::sync::Notify,
    out: &mut crate::protocol::ReplyBuf,
) {
    match w {
        ReplWait::Wait(w) => {
            let n = wait_acks(srv, w, kill).await;
            out.int(n as i64);
        }
        ReplWait::WaitAof(w) => {
            let (local, n) = waitaof_acks(srv, w, kill).await;
            out.array(2);
            out.int(local as i64);
            out.int(n as i64);
        }
    }
}

/// Asks every replica for an immediate ACK (REPLCONF GETACK * in the
/// stream, as Redis does for WAIT).
pub(crate) fn request_acks(srv: &Server) {
    let b = &srv.repl.backlog;
    if b.is_active() {
        b.append_raw(b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n");
        b.wake_if_dirty();
    }
}

/// Waits until `w.replicas` replicas acknowledged `w.offset`, the deadline
/// passes or the client is killed; returns how many did.
pub async fn wait_acks(srv: &Server, w: WaitRequest, kill: &tokio::sync::Notify) -> usize {
    let master = &srv.repl.master;
    // Active peers acknowledge on their own (no notify): poll them often.
    let step = if srv.core.active { 5 } else { 100 };
    loop {
        let n = master.acked(w.offset) + srv.repl.active.acked(w.active_offset);
        let now = unix_ms();
        if n >= w.replicas || (w.deadline_ms != 0 && now >= w.deadline_ms) {
            return n;
        }
        let left = if w.deadline_ms == 0 {
            step
        } else {
            (w.deadline_ms - now).min(step)
        };
        let acked = master.acked_notify.notified();
        tokio::select! {
            _ = acked => {}
            _ = kill.notified() => return n,
            _ = tokio::time::sleep(Duration::from_millis(left)) => {}
        }
    }
}

/// WAITAOF numlocal numreplicas timeout (Redis 7.2): waits until this
/// client's writes are fsynced to our AOF (numlocal 1) and to the AOF of
/// `numreplicas` replicas (their REPLCONF ACK ... FACK offsets); replies
/// [local fsynced 0|1, replicas that fsynced].
pub fn waitaof(ctx: &mut Ctx, args: Args) -> CmdResult {
    let numlocal = crate::commands::util::arg_i64(args.get(1))?;
    let numreplicas = crate::commands::util::arg_i64(args.get(2))?;
    let deadline_ms = wait_deadline(ctx, args.get(3))?;
    if crate::server::of(ctx).repl.is_replica() {
        return Err(CmdError::Msg(
            "ERR WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just local and are not propagated.".into(),
        ));
    }
    let aof = &crate::server::of(ctx).persist.aof.core;
    if numlocal > 0 && !aof.active.load(Relaxed) {
        return Err(CmdError::Msg(
            "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.".into(),
        ));
    }
    let w = WaitAof {
        local_end: (numlocal > 0).then(|| aof.my_end()),
        offset: crate::server::of(ctx).repl.backlog.end(),
        replicas: numreplicas.max(0) as usize,
        deadline_ms,
    };
    if ctx.client.in_exec {
        // Inside EXEC nothing can wait: the state as it is now.
        let local = w.local_end.is_some_and(|end| aof.synced_to(end));
        ctx.out.array(2);
        ctx.out.int(local as i64);
        ctx.out
            .int(crate::server::of(ctx).repl.master.fsynced(w.offset) as i64);
        return Ok(());
    }
    if numreplicas > 0 {
        request_acks(crate::server::of(ctx));
    }
    ctx.client.repl_wait = Some(ReplWait::WaitAof(w));
    Ok(())
}

/// Waits for a WAITAOF's fsyncs; returns (local fsynced, replicas fsynced).
pub async fn waitaof_acks(srv: &Server, w: WaitAof, kill: &tokio::sync::Notify) -> (bool, usize) {
    let aof = &srv.persist.aof.core;
    let master = &srv.repl.master;
    if let Some(end) = w.local_end {
        if !aof.synced_to(end) {
            aof.flush(true); // fsync now rather than at the next second
        }
    }
    loop {
        let local = w.local_end.is_none_or(|end| aof.synced_to(end));
        let n = master.fsynced(w.offset);
        let now = unix_ms();
        let done = local && n >= w.replicas;
        if done || (w.deadline_ms != 0 && now >= w.deadline_ms) {
            return (w.local_end.is_some() && local, n);
        }
        let left = if w.deadline_ms == 0 {
            20
        } else {
            (w.deadline_ms - now).min(20)
        };
        tokio::select! {
            _ = master.acked_notify.notified() => {}
            _ = kill.notified() => return (false, n),
            _ = tokio::time::sleep(Duration::from_millis(left)) => {}
        }
    }
}

// ------------------------------------------------------------ the feed

/// Serves a replica on its connection until it goes away: the PSYNC reply,
/// the full sync if needed, then the stream.
pub(crate) async fn serve_replica<T>(
    srv: &Arc<Server>,
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
    srv.repl.activate_backlog(srv);
    shared.flags.lock().push('S');
    srv.repl.master.replicas.lock().push(handle.clone());
    let start = match partial_from(srv, &req, &handle) {
        Some(from) => continue_partial(srv, io, &conf, &handle, from, shared)
            .await
            .map(|from| (from, false)),
        None => full_sync(srv, io, &mut qb, (&conf, &req), &handle, shared).await,
    };
    let mut timed_out = false;
    if let Some((from, streamed)) = start {
        srv.repl.master.returned(&handle);
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
    srv.repl
        .master
        .replicas
        .lock()
        .retain(|r| !Arc::ptr_eq(r, &handle));
    srv.repl.master.depart(srv, &handle, timed_out);
    // What only this replica needed goes now (the pin moves or goes).
    srv.repl.master.update_keep_from(&srv.repl.backlog);
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

fn host_of(addr: &str) -> String {
    match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
        None => addr.to_string(),
    }
}

/// The offset a PSYNC may continue from, if this history has it; logs
/// why not as Redis's masterTryPartialResynchronization does.
fn partial_from(srv: &Server, req: &SyncRequest, handle: &ReplicaHandle) -> Option<u64> {
    let master = &srv.repl.master;
    let name = format!("{}:{}", handle.ip, handle.port.load(Relaxed));
    if !req.psync {
        return None; // SYNC: a full sync, nothing more to say
    }
    let ids = srv.repl.ids.lock().clone();
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
    if req.offset < 0 || !srv.repl.backlog.can_continue_from(req.offset as u64) {
        master.sync_partial_err.fetch_add(1, Relaxed);
        log_notice!(
            "Unable to partial resync with replica {name} for lack of backlog (Replica request was: {}).",
            req.offset
        );
        if req.offset > 0 && req.offset as u64 > srv.repl.backlog.end() + 1 {
            log_warning!(
                "Warning: replica {name} tried to PSYNC with an offset that is greater than the master replication offset."
            );
        }
        return None;
    }
    Some(req.offset as u64)
}

async fn continue_partial<T>(
    srv: &Arc<Server>,
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
    srv.repl.master.update_keep_from(&srv.repl.backlog);
    let replid = srv.repl.ids.lock().replid.clone();
    let line = if conf.capa_psync2 {
        format!("+CONTINUE {replid}\r\n")
    } else {
        "+CONTINUE\r\n".to_string()
    };
    // Counted before the reply leaves, as Redis's (whose reply is sent
    // later from its buffer): a replica that sees +CONTINUE sees it counted.
    srv.repl.master.sync_partial_ok.fetch_add(1, Relaxed);
    write_all(io, line.as_bytes(), &shared.kill).await.ok()?;
    log_notice!(
        "Partial resynchronization request from {}:{} accepted. Sending {} bytes of backlog starting from offset {}.",
        handle.ip,
        handle.port.load(Relaxed),
        srv.repl.backlog.end() + 1 - from,
        from
    );
    Some(from)
}

/// `temp-repl-<pid>-<client>.rdb`: a disk-based sync's file.
fn sync_file_name(client_id: u64) -> std::path::PathBuf {
    format!("temp-repl-{}-{client_id}.rdb", std::process::id()).into()
}

/// Takes a snapshot for this replica and sends it; returns the offset the
/// stream continues from, or None if the sync failed (the connection
/// closes and the replica retries).
async fn full_sync<T>(
    srv: &Arc<Server>,
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
    srv.repl.master.sync_full.fetch_add(1, Relaxed);
    let (offset, pipe, done) = if diskless {
        wait_shared_snapshot(srv, io, qb, handle, shared).await?
    } else {
        let started = start_snapshot(srv, io, handle, shared).await?;
        log_notice!("Starting BGSAVE for SYNC with target: disk");
        log_notice!("Background saving started");
        started
    };
    if req.psync {
        let replid = srv.repl.ids.lock().replid.clone();
        let line = format!("+FULLRESYNC {replid} {offset}\r\n");
        write_all(io, line.as_bytes(), &shared.kill).await.ok()?;
    }
    let pipe_used = pipe.is_some();
    let sent = match pipe {
        // Redis shows wait_bgsave while its child streams to the socket.
        Some((pipe, readers)) => {
            let sent = send_diskless(io, qb, pipe, done, shared).await;
            if sent.is_err() {
                readers.leave(srv);
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

type SnapDone = tokio::sync::oneshot::Receiver<std::io::Result<u64>>;
/// A diskless snapshot's read end, and who else reads the same snapshot.
type DisklessPipe = (tokio::net::UnixStream, Arc<SyncReaders>);

/// Starts a disk-based snapshot for this replica alone (waiting for a
/// running one to end, with newline keepalives as Redis sends); returns
/// the cut's offset and the completion.
async fn start_snapshot<T>(
    srv: &Arc<Server>,
    io: &AsyncFd<T>,
    handle: &Arc<ReplicaHandle>,
    shared: &ClientShared,
) -> Option<(u64, Option<DisklessPipe>, SnapDone)>
where
    T: AsRawFd,
    for<'a> &'a T: Write,
{
    use crate::persistence::snapshot::{self, SnapFormat, SnapshotError, SnapshotJob};
    let mut waited = 0u32;
    loop {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let cut_offset = Arc::new(AtomicU64::new(0));
        let (srv_cut, h, off) = (srv.clone(), handle.clone(), cut_offset.clone());
        let srv_done = srv.clone();
        let job = SnapshotJob {
            format: SnapFormat::Rdb,
            path: sync_file_name(handle.client_id),
            stream: None,
            at_cut: Some(Box::new(move || {
                // Every shard is locked: no write is half in the stream.
                let b = &srv_cut.repl.backlog;
                let end = b.end();
                off.store(end, Relaxed);
                srv_cut.persist.snapshot.for_replicas.store(true, Relaxed);
                h.ack_offset.store(end, Relaxed);
                h.sent.store(end + 1, Relaxed);
                srv_cut.repl.master.update_keep_from(b);
                b.forget_db();
            })),
            done: Box::new(move |r| {
                srv_done.persist.snapshot.for_replicas.store(false, Relaxed);
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
            threads: snapshot_threads(srv),
            aux: Vec::new(),
        };
        match snapshot::start(srv, job) {
            Ok(()) => return Some((cut_offset.load(Relaxed), None, rx)),
            Err(SnapshotError::Busy) => {
                // Another save runs: wait for it, keeping the link alive.
                tokio::time::sleep(Duration::from_millis(100)).await;
                waited += 1;
                if waited.is_multiple_of(10) && !srv.repl.replica.debug_sleeping() {
                    write_all(io, b"\n", &shared.kill).await.ok()?;
                }
            }
            Err(SnapshotError::Spawn(e)) => {
                log_warning!("Can't start the snapshot for a replica: {e}");
                return None;
            }
        }
    }
}

/// Serializer threads for a replication snapshot: half the cores, one
/// when `rdb-key-save-delay` stretches it (the delay is per key).
fn snapshot_threads(srv: &Server) -> usize {
    if srv.config.read().get_i64("rdb-key-save-delay") != 0 {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

// ------------------------------------------------- shared diskless syncs

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
pub struct SyncGroup {
    members: Vec<SyncMember>,
    /// Unix ms the first one arrived.
    since_ms: u64,
}

/// Joins the diskless snapshot about to start (or opens one, started by a
/// coordinator thread once `repl-diskless-sync-delay` seconds pass or
/// `repl-diskless-sync-max-replicas` replicas wait), then waits for it to
/// start, sending newlines meanwhile as Redis does. Every replica of one
/// snapshot gets the same cut offset.
async fn wait_shared_snapshot<T>(
    srv: &Arc<Server>,
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
        let mut pending = srv.repl.master.pending_sync.lock();
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
                if !srv.repl.replica.debug_sleeping() {
                    write_all(io, b"\n", &shared.kill).await.ok()?;
                }
            }
        }
    };
    Some((offset, Some((reader, readers)), done))
}

/// The replicas still reading one shared diskless snapshot: when the last
/// one goes, the snapshot stops (Redis kills its child then).
pub struct SyncReaders {
    left: std::sync::atomic::AtomicUsize,
    finished: std::sync::atomic::AtomicBool,
}

impl SyncReaders {
    fn leave(&self, srv: &Server) {
        if self.left.fetch_sub(1, Relaxed) == 1 && !self.finished.load(Relaxed) {
            log_warning!("Diskless rdb transfer, last replica dropped, killing fork child");
            crate::persistence::snapshot::abort(srv);
        }
    }
}

/// The thread behind a [`SyncGroup`]: waits until the group is due, then
/// starts its snapshot (retrying while another save runs).
fn coordinate_shared_sync(srv: &Arc<Server>) {
    use crate::persistence::snapshot::{self, SnapshotError};
    let master = &srv.repl.master;
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
            if due && !srv.persist.snapshot.running() {
                drop(pending);
                match snapshot::start(srv, shared_job(srv)) {
                    Ok(()) => return,
                    Err(SnapshotError::Busy) => {}
                    Err(SnapshotError::Spawn(e)) => {
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
fn shared_job(srv: &Arc<Server>) -> crate::persistence::snapshot::SnapshotJob {
    use crate::persistence::snapshot::{SnapFormat, SnapshotJob};
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
        let group = srv_cut.repl.master.pending_sync.lock().take();
        let members = group.map(|g| g.members).unwrap_or_default();
        let b = &srv_cut.repl.backlog;
        let end = b.end();
        srv_cut.persist.snapshot.for_replicas.store(true, Relaxed);
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
        srv_cut.repl.master.update_keep_from(b);
        b.forget_db();
    };
    SnapshotJob {
        format: SnapFormat::Rdb,
        path: std::path::PathBuf::new(),
        stream: Some(Box::new(Fanout(sinks))),
        at_cut: Some(Box::new(at_cut)),
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
            srv_done.persist.snapshot.for_replicas.store(false, Relaxed);
            for d in dones.lock().drain(..) {
                let each = match &r {
                    Ok(n) => Ok(*n),
                    Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                };
                let _ = d.send(each);
            }
        }),
        threads: snapshot_threads(srv),
        aux: Vec::new(),
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
async fn send_diskless<T>(
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
    let mark = crate::server::random_hex(40);
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

/// The stream: copies the backlog past `from` to the replica whenever
/// there is some, and reads its REPLCONF ACKs; ends when the replica goes,
/// true when it was dropped for `repl-timeout`.
///
/// After a diskless transfer (`await_ack`) nothing is sent until the
/// replica's first ACK, as Redis does: a replica spots the end of an
/// `$EOF:` payload by the mark being the last bytes it read, so stream
/// bytes arriving right behind the mark would hide it.
async fn feed<T>(
    srv: &Arc<Server>,
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
    let backlog = &srv.repl.backlog;
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
                srv.repl.master.lag_disconnects.fetch_add(1, Relaxed);
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
            let wrote = tokio::time::timeout(repl_timeout(srv), write_all(io, &buf, &shared.kill));
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
                srv.repl.master.update_keep_from(backlog);
            }
        }
        // After that the pin moves with its ACKs, not with what was sent:
        // see keep_from.
        if n == 0 && replica_timed_out(srv, handle) {
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
                        srv.repl.master.update_keep_from(backlog);
                        if await_ack {
                            await_ack = false;
                            log_synced(handle);
                        }
                        srv.repl.master.acked_notify.notify_waiters()
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
fn replica_timed_out(srv: &Server, handle: &ReplicaHandle) -> bool {
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

impl MasterSide {
    /// Recomputes the backlog's pin: the lowest offset an attached replica
    /// has not acknowledged, or a departed one would continue from.
    /// Departed replicas whose history is gone (past the disk bound, or a
    /// new history) are forgotten with a log line: they will full-sync.
    pub fn update_keep_from(&self, backlog: &crate::replication::backlog::Backlog) {
        let mut departed = self.departed.lock();
        departed.retain(|d| {
            let kept = backlog.disk_max.load(Relaxed) != 0 && backlog.can_continue_from(d.from);
            if !kept {
                log_warning!(
                    "Replica {} left at offset {} and its history is no longer kept (repl-backlog-disk-size, or a new history): it will need a full sync",
                    d.addr,
                    d.from
                );
            }
            kept
        });
        drop(departed);
        let attached = self.keep_from();
        let keep = match (attached, self.departed_keep_from()) {
            (Some(a), Some(d)) => a.min(d),
            (a, d) => a.or(d).unwrap_or(0),
        };
        backlog.pin_attached.store(attached.is_some(), Relaxed);
        if backlog.keep_from.swap(keep, Relaxed) != keep {
            backlog.trim();
        }
    }
}

thread_local! {
    /// This thread appended to the backlog since the last [`throttle`].
    pub static WROTE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Back-pressure (`repl-lag-policy throttle`): how long a connection's
/// replies wait after a batch of commands that wrote (the connection
/// sleeps it, see `server/hooks.rs`). With the slowest replica `lag` bytes behind, `repl-throttle-lag`
/// = `start` and 90% of the replica class's hard limit = `wall`, the
/// replies wait in proportion to how far `lag` is between the two, up to
/// 100 ms a batch at and past the wall: writers slow to the rate the
/// replica takes, but never stop. A replica that stops reading altogether
/// is dropped after `repl-timeout` (see `feed`), or once it falls out of
/// the hard limit, and full-syncs. `repl-lag-policy spill` (the default)
/// keeps its bytes on disk instead and never makes writers wait.
pub fn throttle(srv: &Server) -> Option<Duration> {
    if !WROTE.with(|w| w.replace(false)) {
        return None;
    }
    let m = &srv.repl.master;
    let (lag, start, wall) = m.lag_over_start(srv)?;
    let ms = (100 * (lag - start) / (wall - start).max(1)).clamp(1, 100);
    m.throttled.fetch_add(1, Relaxed);
    m.throttle_us.fetch_add(ms * 1000, Relaxed);
    Some(Duration::from_millis(ms))
}

impl MasterSide {
    /// (lag, repl-throttle-lag, wall) when throttling applies and the
    /// slowest replica lags past repl-throttle-lag.
    fn lag_over_start(&self, srv: &Server) -> Option<(u64, u64, u64)> {
        if !self.throttle_on.load(Relaxed) {
            return None;
        }
        let b = &srv.repl.backlog;
        let lag = self.max_unsent(b.end())?;
        let start = self.throttle_lag.load(Relaxed);
        let wall = match b.hard_cap.load(Relaxed) as u64 {
            0 => u64::MAX,
            cap => (cap / 10 * 9).max(start + 1),
        };
        (lag > start).then_some((lag, start, wall))
    }

    /// The most bytes appended but not yet written to a replica's socket,
    /// over the replicas being streamed to (None: none is). This is the
    /// lag that matters for back-pressure: it is what Redis holds in a
    /// replica's output buffer and caps with the hard limit, and the
    /// backlog may only trim up to it. Acknowledged offsets trail it by up
    /// to a second (a replica ACKs once a second, hundreds of MB at 8 KB
    /// SETs), so they decide only what is kept for partial resyncs.
    fn max_unsent(&self, end: u64) -> Option<u64> {
        self.replicas
            .lock()
            .iter()
            .map(|r| r.sent.load(Relaxed))
            .filter(|&next| next != 0)
            .map(|next| (end + 1).saturating_sub(next))
            .max()
    }

    /// Re-reads the back-pressure settings (cron).
    pub fn load_throttle_conf(&self, c: &crate::config::Config) {
        let lag = c.get_i64("repl-throttle-lag").max(0) as u64;
        self.throttle_lag.store(lag, Relaxed);
        let on = c.get_str("repl-lag-policy") == "throttle";
        self.throttle_on.store(on, Relaxed);
    }
}
