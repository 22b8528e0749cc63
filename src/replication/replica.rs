//! The replica side: REPLICAOF, the link to our master, acknowledgements.
//!
//! The link is one plain thread with a blocking socket (`link_thread`):
//! connect, Redis's handshake (PING, AUTH, REPLCONF listening-port / capa
//! eof psync2, PSYNC with the cached replication id and offset), then a full
//! sync or a partial one (+CONTINUE), then the command stream. A full sync
//! goes through a temp file (loaded as at start-up, renamed to
//! `dbfilename`), or with `repl-diskless-load` straight from the socket
//! (`SocketPayload`): `on-empty-db` into the empty databases, `swapdb` into
//! a staging dataset swapped in on success (DECISIONS 30). Each
//! command runs through `commands::run_args` as the master client (exempt
//! from read-only, no replies), and its exact bytes are appended to the
//! backlog, which makes our offset the master's and is what our own
//! replicas read. A thread, not a task: the link's work is sequential and
//! mostly waiting, and loading a big RDB must not hold a worker.
//!
//! Every stage of a sync (`stage.rs`: connecting, each handshake reply,
//! the PSYNC reply, the payload's header, the payload, loading it) ends
//! within `repl-timeout` of its last progress; INFO replication shows the
//! stage and how long the link has been in it. Any failure (connect,
//! handshake, a truncated or corrupt payload, a timeout, garbage from the
//! peer) ends the link: the thread logs why, waits a second and starts
//! over with a PSYNC for what it has. A failed load empties the databases
//! (swapdb: drops the staging data, the old dataset stays), so a
//! half-loaded dataset is never served as complete. REPLICAOF bumps
//! `generation`, which every loop of the old link checks. DEBUG SLEEP
//! holds the link too, as Redis's single thread would be held.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::conn::{Conn, Filled};
use super::repl_timeout;
use crate::commands::{CmdError, CmdResult, Ctx};
use crate::core::client::ClientState;
use crate::keyspace::hlc::{unix_ms, Hlc};
use crate::persistence::load::{ReplicaLoad, SocketLoad};
use crate::protocol::{Args, ParseLimits, Parsed, RequestParser};
use crate::server::Server;
use crate::{log_notice, log_warning};

use super::stage::{Stage, StageClock};

#[derive(Default)]
pub struct ReplicaSide {
    /// (host, port) of our master.
    master: Mutex<Option<(String, u16)>>,
    /// Where the link is (INFO's master_sync_stage, ROLE's state).
    stage: StageClock,
    generation: AtomicU64,
    up: AtomicBool,
    last_io_ms: AtomicU64,
    down_since_ms: AtomicU64,
    /// The link's socket, so REPLICAOF can close it at once.
    socket: Mutex<Option<TcpStream>>,
    /// Full sync progress (bytes).
    sync_total: AtomicU64,
    sync_read: AtomicU64,
    /// Database the master client has selected (kept across links).
    master_db: AtomicUsize,
    /// The next PSYNC is a FAILOVER hand-over (see `failover.rs`).
    failover_psync: AtomicBool,
    /// The target answered that PSYNC with an error (an ACL without
    /// +psync, say): FAILOVER aborts at once, as Redis's.
    pub(crate) failover_refused: AtomicBool,
    /// Unix ms until which a DEBUG SLEEP holds the link (see `debug_sleep`).
    paused_until_ms: AtomicU64,
    /// Held while a command from the master is applied and its bytes
    /// counted, and by a snapshot's cut: the offset saved in an RDB
    /// (repl-offset) matches its data.
    pub apply_lock: Mutex<()>,
}

impl ReplicaSide {
    /// The link to our master is up (our own replicas may sync then).
    pub fn link_up(&self) -> bool {
        self.up.load(Acquire)
    }

    /// The link's stage (see `stage.rs`).
    pub fn stage(&self) -> Stage {
        self.stage.get()
    }

    /// INFO's replica-only fields, from master_host to replica_announced.
    pub fn info_fields(&self, srv: &Server, o: &mut String) {
        let (host, port) = self.master.lock().clone().unwrap_or_default();
        let up = self.link_up();
        let now = unix_ms();
        let last_io = (now.saturating_sub(self.last_io_ms.load(Relaxed)) / 1000) as i64;
        let stage = self.stage.get();
        let syncing = stage.syncing();
        let offset = srv.repl.backlog.end();
        let _ = write!(
            o,
            "master_host:{host}\r\nmaster_port:{port}\r\nmaster_link_status:{}\r\n\
             master_last_io_seconds_ago:{}\r\nmaster_sync_in_progress:{}\r\n\
             slave_read_repl_offset:{offset}\r\nslave_repl_offset:{offset}\r\n",
            if up { "up" } else { "down" },
            if up { last_io } else { -1 },
            syncing as u8,
        );
        if syncing {
            let (total, read) = (self.sync_total.load(Relaxed), self.sync_read.load(Relaxed));
            let perc = if total > 0 {
                read as f64 * 100.0 / total as f64
            } else {
                0.0
            };
            let _ = write!(
                o,
                "master_sync_total_bytes:{total}\r\nmaster_sync_read_bytes:{read}\r\n\
                 master_sync_left_bytes:{}\r\nmaster_sync_perc:{perc:.2}\r\n\
                 master_sync_last_io_seconds_ago:{last_io}\r\n",
                // Negative with an EOF mark (size unknown), as Redis prints it.
                total as i64 - read as i64,
            );
        }
        if !up {
            let since = self.down_since_ms.load(Relaxed);
            let secs = if since == 0 {
                -1
            } else {
                (now.saturating_sub(since) / 1000) as i64
            };
            let _ = write!(o, "master_link_down_since_seconds:{secs}\r\n");
        }
        let c = srv.config.read();
        let _ = write!(
            o,
            "slave_priority:{}\r\nslave_read_only:{}\r\nreplica_announced:{}\r\n\
             master_sync_stage:{}\r\nmaster_sync_stage_seconds:{}\r\n",
            c.get_i64("replica-priority"),
            c.get_bool("replica-read-only") as u8,
            c.get_bool("replica-announced") as u8,
            stage.name(),
            self.stage.seconds(),
        );
    }

    /// ROLE on a replica: ["slave", host, port, state, offset].
    pub fn role_reply(&self, ctx: &mut Ctx) -> CmdResult {
        let (host, port) = self.master.lock().clone().unwrap_or_default();
        ctx.out.array(5);
        ctx.out.bulk(b"slave");
        ctx.out.bulk(host.as_bytes());
        ctx.out.int(port as i64);
        ctx.out.bulk(self.stage.get().role_state().as_bytes());
        ctx.out
            .int(crate::server::of(ctx).repl.backlog.end() as i64);
        Ok(())
    }

    /// Ends the current link (its thread sees the new generation).
    /// CLIENT KILL aimed at our master's link (Redis lists the master as a
    /// client): closes the socket when `hit(peer addr, local addr)` says
    /// so; the link thread reconnects and asks for a partial resync.
    pub fn kill_link_if(&self, hit: impl Fn(&str, &str) -> bool) -> bool {
        let guard = self.socket.lock();
        let Some(s) = guard.as_ref() else {
            return false;
        };
        let (Ok(peer), Ok(local)) = (s.peer_addr(), s.local_addr()) else {
            return false;
        };
        if !hit(&peer.to_string(), &local.to_string()) {
            return false;
        }
        let _ = s.shutdown(Shutdown::Both);
        true
    }

    /// DEBUG SLEEP: Redis sleeps in its one thread, link included (no
    /// reads from the master, no ACKs, no reconnection); ours stops the
    /// link thread for as long, at its next read or connection attempt.
    pub fn debug_sleep(&self, d: Duration) {
        let until = unix_ms().saturating_add(d.as_millis() as u64);
        self.paused_until_ms.fetch_max(until, Relaxed);
    }

    /// Whether a DEBUG SLEEP is running now (on a master too: its
    /// keepalives to waiting replicas stop meanwhile, as Redis's do).
    pub fn debug_sleeping(&self) -> bool {
        self.paused_until_ms.load(Relaxed) > unix_ms()
    }

    /// Waits out a DEBUG SLEEP (while this link is current).
    fn wait_out_pause(&self, gen: u64) {
        loop {
            let until = self.paused_until_ms.load(Relaxed);
            if until == 0 {
                return;
            }
            let left = until.saturating_sub(unix_ms());
            if left == 0 {
                let _ = self
                    .paused_until_ms
                    .compare_exchange(until, 0, Relaxed, Relaxed);
                return;
            }
            if self.generation.load(Acquire) != gen {
                return;
            }
            std::thread::sleep(Duration::from_millis(left.min(100)));
        }
    }

    fn stop_link(&self) {
        self.generation.fetch_add(1, AcqRel);
        if let Some(s) = self.socket.lock().take() {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.up.store(false, Release);
    }
}

/// REPLCONF GETACK from a client other than our master link: nothing to do
/// (the link answers its master's GETACK itself).
pub fn getack(_ctx: &mut Ctx) -> CmdResult {
    Ok(())
}

/// REPLICAOF host port | NO ONE (and SLAVEOF).
pub fn replicaof(ctx: &mut Ctx, args: Args) -> CmdResult {
    if ctx.core.active {
        let host = crate::server::of(ctx).peer_host();
        return super::active::link::replicaof(ctx, args, &host);
    }
    let (host, port) = (args.get(1), args.get(2));
    if host.eq_ignore_ascii_case(b"no") && port.eq_ignore_ascii_case(b"one") {
        promote(crate::server::of(ctx));
        ctx.out.ok();
        return Ok(());
    }
    let port = crate::commands::util::arg_i64(port)?;
    if !(0..=65535).contains(&port) {
        return Err(CmdError::Msg("ERR Invalid master port".into()));
    }
    let host = String::from_utf8_lossy(host).into_owned();
    let repl = &crate::server::of(ctx).repl;
    if repl.is_replica() && *repl.replica.master.lock() == Some((host.clone(), port as u16)) {
        log_notice!("REPLICAOF would result into synchronization with the master we are already connected with. No operation performed.");
        ctx.out.simple("OK Already connected to specified master");
        return Ok(());
    }
    follow(crate::server::of(ctx), host.clone(), port as u16);
    log_notice!(
        "REPLICAOF {host}:{port} enabled (user request from 'id={}')",
        ctx.client.id
    );
    ctx.out.ok();
    Ok(())
}

/// The `replicaof` directive at start-up ("host port").
pub fn start_from_config(srv: &Arc<Server>) {
    let v = srv.config.read().get_str("replicaof");
    // Several lines: the last one wins, as in Redis.
    if let Some((h, p)) = crate::config::directives::replicaof_pairs(&v).pop() {
        follow(srv, h, p);
    }
}

/// Becomes a replica of host:port: the current history is the cached
/// master (so a demoted master can continue partially from its new master,
/// PSYNC2), then the link thread starts.
fn follow(srv: &Arc<Server>, host: String, port: u16) {
    let side = &srv.repl.replica;
    side.stop_link();
    *side.master.lock() = Some((host.clone(), port));
    remember_master(srv, vec![host.clone(), port.to_string()]);
    side.stage.set(Stage::Connect);
    side.down_since_ms.store(0, Relaxed);
    srv.repl.is_replica.store(true, Release);
    crate::log::set_role(b'S');
    // Clients blocked on keys would wait for writes that now come from the
    // master only: Redis unblocks them with an error; we let them time out.
    let gen = side.generation.load(Acquire);
    let srv2 = srv.clone();
    let spawned = std::thread::Builder::new()
        .name("lattice-repl-link".into())
        .spawn(move || link_thread(srv2, gen, host, port));
    if let Err(e) = spawned {
        log_warning!("Can't start the replication link thread: {e}");
    }
}

/// Keeps the `replicaof` directive equal to the master we follow, as
/// Redis's `server.masterhost` is: CONFIG GET replicaof reads it and CONFIG
/// REWRITE writes it, so a replica restarted from a rewritten file comes
/// back as a replica and continues from its RDB's replication id.
fn remember_master(srv: &Server, args: Vec<String>) {
    if let Err(e) = srv.config.write().set("replicaof", &args) {
        log_warning!("Can't record the master in the config: {e}");
    }
}

/// FAILOVER's step 2: become the replica of `host:port`, whose PSYNC
/// carries FAILOVER so that the target promotes itself first.
pub(crate) fn follow_for_failover(srv: &Arc<Server>, host: String, port: u16) {
    srv.repl.replica.failover_refused.store(false, Release);
    srv.repl.replica.failover_psync.store(true, Release);
    follow(srv, host, port);
}

/// REPLICAOF NO ONE: a master again, with a new replication id; the old
/// one stays as replid2 so our replicas can continue partially.
pub(crate) fn promote(srv: &Server) {
    let repl = &srv.repl;
    if !repl.is_replica() {
        return;
    }
    repl.replica.stop_link();
    *repl.replica.master.lock() = None;
    remember_master(srv, vec!["no".into(), "one".into()]);
    repl.shift_replid();
    repl.is_replica.store(false, Release);
    // As Redis's replicationUnsetMaster: our replicas reconnect to learn
    // the new id, and continue partially from our replid2.
    disconnect_replicas(srv);
    crate::log::set_role(b'M');
    log_notice!("MASTER MODE enabled (user request)");
}

/// Closes our replicas' links (Redis's disconnectSlaves): each reconnects
/// and PSYNCs, which tells it our current replication id.
fn disconnect_replicas(srv: &Server) {
    for r in srv.repl.master.replicas.lock().iter() {
        if let Some(c) = srv.clients.get(r.client_id) {
            c.kill_now();
        }
    }
}

fn link_thread(srv: Arc<Server>, gen: u64, host: String, port: u16) {
    let side = &srv.repl.replica;
    let current = || side.generation.load(Acquire) == gen;
    while current() {
        side.wait_out_pause(gen);
        log_notice!("Connecting to MASTER {host}:{port}");
        if let Err(e) = run_link(&srv, gen, &host, port) {
            if current() {
                log_warning!("Replication link with MASTER {host}:{port}: {e}");
            }
        }
        // A link replaced by REPLICAOF may end after its successor came
        // up: only the current link's state is ours to clear.
        if !current() {
            break;
        }
        if side.up.swap(false, AcqRel) || side.down_since_ms.load(Relaxed) == 0 {
            side.down_since_ms.store(unix_ms(), Relaxed);
        }
        *side.socket.lock() = None;
        side.stage.set(Stage::Connect);
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Our master's socket with a read buffer, and the stage the link is in:
/// a stage ends with an error once `timeout` passes without a byte from
/// the master (the newlines a master sends while it prepares a sync count).
struct Peer<'a> {
    conn: Conn,
    side: &'a ReplicaSide,
    gen: u64,
    stage: Stage,
}

/// The socket and its buffer (`peer.buf`, `peer.start`...).
impl std::ops::Deref for Peer<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        &self.conn
    }
}

impl std::ops::DerefMut for Peer<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.conn
    }
}

impl Peer<'_> {
    /// Enters `stage` (INFO shows it, unless REPLICAOF replaced this
    /// link); its timeout counts from now.
    fn begin(&mut self, stage: Stage) {
        self.stage = stage;
        self.progress = Instant::now();
        if self.side.generation.load(Acquire) == self.gen {
            self.side.stage.set(stage);
        }
    }

    /// Sends a command (a master that reads nothing for `timeout` ends
    /// the stage too: the socket's write timeout).
    fn send(&mut self, argv: &[&[u8]]) -> Result<(), String> {
        self.conn.send(argv).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                format!("the master read nothing for {} s", self.timeout.as_secs())
            }
            _ => format!("write error: {e}"),
        })
    }

    /// Reads more bytes into the buffer: Ok(0) after a second without any
    /// (the socket's read timeout), the stage's timeout error after
    /// `timeout`.
    fn fill(&mut self) -> Result<usize, String> {
        match self.conn.fill()? {
            Filled::Bytes(n) => {
                self.side.last_io_ms.store(unix_ms(), Relaxed);
                Ok(n)
            }
            Filled::Quiet => Ok(0),
            Filled::TimedOut => Err(self.stage.timeout_message(self.timeout.as_secs())),
        }
    }

    /// One reply line (without CRLF), skipping the bare newlines a master
    /// sends as keepalives while it prepares a sync.
    fn line(&mut self) -> Result<String, String> {
        loop {
            if let Some(line) = self.conn.take_line()? {
                return Ok(line);
            }
            self.fill()?;
        }
    }

    fn take(&mut self, max: usize) -> &[u8] {
        let n = (self.buf.len() - self.start).min(max);
        let s = self.start;
        self.start += n;
        &self.buf[s..s + n]
    }
}

/// Resolves `host` and connects within `timeout`.
fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, String> {
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("can't resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("can't resolve {host}"))?;
    let s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            Stage::Connecting.timeout_message(timeout.as_secs())
        }
        _ => format!("Error condition on socket for SYNC: {e}"),
    })?;
    let _ = s.set_nodelay(true);
    s.set_read_timeout(Some(Duration::from_secs(1)))
        .and_then(|()| s.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

fn run_link(srv: &Arc<Server>, gen: u64, host: &str, port: u16) -> Result<(), String> {
    let side = &srv.repl.replica;
    let timeout = repl_timeout(srv);
    if side.generation.load(Acquire) == gen {
        side.stage.set(Stage::Connecting);
    }
    let s = connect(host, port, timeout)?;
    *side.socket.lock() = s.try_clone().ok();
    if side.generation.load(Acquire) != gen {
        return Ok(());
    }
    let tls = match srv.config.read().get_bool("tls-replication") {
        true => Some(
            srv.core
                .tls
                .client()
                .ok_or("tls-replication is on but TLS is not configured")?,
        ),
        false => None,
    };
    let s = super::conn::secure(s, host, tls, "master")?;
    let mut peer = Peer {
        conn: Conn::new(s, "master", timeout),
        side,
        gen,
        stage: Stage::Connecting,
    };
    log_notice!("MASTER <-> REPLICA sync started");
    handshake(srv, &mut peer)?;
    psync(srv, gen, &mut peer)?;
    side.up.store(true, Release);
    peer.begin(Stage::Connected);
    side.last_io_ms.store(unix_ms(), Relaxed);
    stream(srv, gen, &mut peer)
}

/// PSYNC for what we hold: the stream continues, or a full sync first.
fn psync(srv: &Arc<Server>, gen: u64, peer: &mut Peer) -> Result<(), String> {
    let (replid, offset) = cached_master(srv);
    // Redis's replica says which PSYNC it tries.
    let off_arg = if replid == "?" {
        log_notice!("Partial resynchronization not possible (no cached master)");
        "-1".to_string()
    } else {
        log_notice!(
            "Trying a partial resynchronization (request {replid}:{}).",
            offset + 1
        );
        (offset + 1).to_string()
    };
    peer.begin(Stage::ReceivePsyncReply);
    let failover = srv.repl.replica.failover_psync.swap(false, AcqRel);
    if failover {
        peer.send(&[b"PSYNC", replid.as_bytes(), off_arg.as_bytes(), b"FAILOVER"])?;
    } else {
        peer.send(&[b"PSYNC", replid.as_bytes(), off_arg.as_bytes()])?;
    }
    let reply = peer.line()?;
    if failover && reply.starts_with('-') {
        srv.repl.replica.failover_refused.store(true, Release);
    }
    if let Some(rest) = reply.strip_prefix("+FULLRESYNC ") {
        let mut w = rest.split_whitespace();
        let id = w.next().unwrap_or_default().to_string();
        let off: u64 = w
            .next()
            .and_then(|o| o.parse().ok())
            .ok_or("bad FULLRESYNC reply")?;
        log_notice!("Full resync from master: {id}:{off}");
        full_sync(srv, gen, peer, &id, off)
    } else if let Some(rest) = reply.strip_prefix("+CONTINUE") {
        continue_from(srv, rest.trim(), &replid);
        log_notice!("MASTER <-> REPLICA sync: Master accepted a Partial Resynchronization.");
        Ok(())
    } else {
        Err(format!("unexpected reply to PSYNC from master: {reply}"))
    }
}

/// PING, AUTH, REPLCONF: Redis's handshake, with its error texts.
fn handshake(srv: &Server, peer: &mut Peer) -> Result<(), String> {
    peer.begin(Stage::ReceivePingReply);
    peer.send(&[b"PING"])?;
    let r = peer.line()?;
    if r.starts_with('-')
        && !r.starts_with("-NOAUTH")
        && !r.starts_with("-NOPERM")
        && !r.starts_with("-ERR operation not permitted")
    {
        return Err(format!("Error reply to PING from master: '{r}'"));
    }
    log_notice!("Master replied to PING, replication can continue...");
    let (user, pass, announce_ip, announce_port, port) = {
        let c = srv.config.read();
        // Over TLS the port we announce is our TLS port, as Redis's.
        let port = match (c.get_bool("tls-replication"), c.get_i64("tls-port")) {
            (true, p) if p != 0 => p,
            _ => srv.tcp_port.load(Relaxed) as i64,
        };
        (
            c.get_str("masteruser"),
            c.get_str("masterauth"),
            c.get_str("replica-announce-ip"),
            c.get_i64("replica-announce-port"),
            port,
        )
    };
    if !pass.is_empty() {
        peer.begin(Stage::ReceiveAuthReply);
        if user.is_empty() {
            peer.send(&[b"AUTH", pass.as_bytes()])?;
        } else {
            peer.send(&[b"AUTH", user.as_bytes(), pass.as_bytes()])?;
        }
        let r = peer.line()?;
        if r.starts_with('-') {
            return Err(format!("Unable to AUTH to MASTER: {r}"));
        }
    }
    let lport = if announce_port > 0 {
        announce_port
    } else {
        port
    }
    .to_string();
    peer.begin(Stage::ReceivePortReply);
    peer.send(&[b"REPLCONF", b"listening-port", lport.as_bytes()])?;
    let r = peer.line()?;
    if r.starts_with('-') {
        log_notice!("(Non critical) Master does not understand REPLCONF listening-port: {r}");
    }
    if !announce_ip.is_empty() {
        peer.begin(Stage::ReceiveIpReply);
        peer.send(&[b"REPLCONF", b"ip-address", announce_ip.as_bytes()])?;
        let _ = peer.line()?;
    }
    peer.begin(Stage::ReceiveCapaReply);
    peer.send(&[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"])?;
    let r = peer.line()?;
    if r.starts_with('-') {
        log_notice!("(Non critical) Master does not understand REPLCONF capa: {r}");
    }
    Ok(())
}

/// (replid, offset) for PSYNC: our own history ("?" when we have none
/// worth continuing, e.g. before our first sync).
fn cached_master(srv: &Server) -> (String, u64) {
    let repl = &srv.repl;
    if !repl.has_history.load(Acquire) {
        return ("?".into(), 0);
    }
    (repl.ids.lock().replid.clone(), repl.backlog.end())
}

/// +CONTINUE [<new replid>]: a new id means our master changed history
/// (a failover); ours becomes replid2, valid up to our offset.
fn continue_from(srv: &Server, new_id: &str, old_id: &str) {
    let repl = &srv.repl;
    log_notice!("Successful partial resynchronization with master.");
    if !new_id.is_empty() && new_id != old_id {
        let mut ids = repl.ids.lock();
        ids.replid2 = old_id.to_string();
        ids.second_offset = repl.backlog.end() as i64 + 1;
        ids.replid = new_id.to_string();
        drop(ids);
        log_notice!("Master replication ID changed to {new_id}");
        // As Redis: our own replicas reconnect to learn the new id (they
        // continue partially, the old one being our replid2 now).
        disconnect_replicas(srv);
    }
    repl.activate_backlog(srv);
    repl.has_history.store(true, Release);
}

/// The full-sync payload's header: `$<len>` or `$EOF:<40 byte mark>`.
struct PayloadSpec {
    len: Option<u64>,
    mark: Option<Vec<u8>>,
}

fn parse_payload_header(header: &str) -> Result<PayloadSpec, String> {
    if let Some(e) = header.strip_prefix('-') {
        return Err(format!("MASTER aborted replication with an error: {e}"));
    }
    let spec = header
        .strip_prefix('$')
        .ok_or_else(|| format!("Bad protocol from MASTER, the first byte is not '$' (we received '{header}'), are you sure the host and port are right?"))?;
    match spec.strip_prefix("EOF:") {
        Some(m) if m.len() == 40 => Ok(PayloadSpec {
            len: None,
            mark: Some(m.as_bytes().to_vec()),
        }),
        Some(_) => Err("bad EOF mark from master".into()),
        None => Ok(PayloadSpec {
            len: Some(
                spec.parse()
                    .map_err(|_| format!("bad RDB length from master: {spec}"))?,
            ),
            mark: None,
        }),
    }
}

/// `repl-diskless-load`: whether this payload is parsed straight from the
/// socket, and into what. `swapdb` loads asynchronously (old data served)
/// when the master continues the history we hold (same replid, as Redis).
fn socket_load_mode(srv: &Server, replid: &str) -> Option<SocketLoad> {
    let mode = srv.config.read().get_str("repl-diskless-load");
    match mode.as_str() {
        "swapdb" => Some(SocketLoad::Swap {
            async_load: srv.repl.ids.lock().replid == replid,
        }),
        "on-empty-db" if srv.keyspace.total_keys() == 0 => Some(SocketLoad::Live),
        _ => None,
    }
}

/// Loads the payload (into a temp file first, or straight from the
/// socket, per `repl-diskless-load`); on any failure no half-loaded
/// dataset is left (see `persistence::load`) and the error is returned.
fn full_sync(
    srv: &Arc<Server>,
    gen: u64,
    peer: &mut Peer,
    replid: &str,
    offset: u64,
) -> Result<(), String> {
    let loaded = receive_payload(srv, gen, peer, replid)?;
    let repl = &srv.repl;
    let side = &repl.replica;
    // A snapshot's cut sees the new data with the new history, or neither.
    let cut = side.apply_lock.lock();
    if let Some(job) = loaded {
        job.commit(srv);
    }
    repl.backlog.reset_to(offset);
    *repl.ids.lock() = crate::replication::ReplIds {
        replid: replid.to_string(),
        replid2: crate::replication::NO_REPLID.into(),
        second_offset: -1,
    };
    side.master_db.store(0, Relaxed);
    repl.activate_backlog(srv);
    repl.has_history.store(true, Release);
    drop(cut);
    dataset_replaced(srv);
    restart_aof(srv);
    // Our own replicas follow a history that just ended: they resync.
    disconnect_replicas(srv);
    log_notice!("MASTER <-> REPLICA sync: Finished with success");
    Ok(())
}

/// The payload's header, then the payload, loaded; a socket load's
/// staging data is returned to be committed with the new history.
fn receive_payload(
    srv: &Arc<Server>,
    gen: u64,
    peer: &mut Peer,
    replid: &str,
) -> Result<Option<ReplicaLoad>, String> {
    let side = &srv.repl.replica;
    peer.begin(Stage::ReceivePayloadHeader);
    let header = peer.line()?;
    let spec = parse_payload_header(&header)?;
    side.sync_total.store(spec.len.unwrap_or(0), Relaxed);
    side.sync_read.store(0, Relaxed);
    let socket = socket_load_mode(srv, replid);
    let to = if socket.is_some() {
        "to parser"
    } else {
        "to disk"
    };
    match spec.len {
        Some(n) => log_notice!("MASTER <-> REPLICA sync: receiving {n} bytes from master {to}"),
        None => {
            log_notice!("MASTER <-> REPLICA sync: receiving streamed RDB from master with EOF {to}")
        }
    }
    peer.begin(Stage::ReceivePayload);
    match socket {
        Some(mode) => {
            let taken = || srv.persist.loading.progress();
            let job = watched(srv, peer, taken, |peer| {
                load_from_socket(srv, gen, peer, &spec, mode)
            });
            job.map(Some)
                .map_err(|e| format!("MASTER <-> REPLICA sync failed: {e}"))
        }
        None => load_via_file(srv, peer, &spec).map(|()| None),
    }
}

/// Runs `work` (a load) while a helper thread sends the master a newline
/// every second, as Redis's replicas do while they load (so a long load
/// does not look like a dead replica), and watches `taken` (bytes the
/// loader read plus keys it decoded): if it stays still for longer than
/// `repl-timeout`, the helper logs the stage's timeout and aborts the
/// load, which fails at its next read or key.
fn watched<T>(
    srv: &Server,
    peer: &mut Peer,
    taken: impl Fn() -> u64 + Sync,
    work: impl FnOnce(&mut Peer) -> T,
) -> T {
    let watch = Watch {
        // Over TLS the newlines go through the session the load reads
        // from (`tls_link.rs`).
        sock: peer.s.try_clone().ok(),
        done: AtomicBool::new(false),
        stage: peer.stage,
        timeout: peer.timeout,
    };
    std::thread::scope(|scope| {
        let helper = scope.spawn(|| watch.run(&taken, &srv.persist.loading));
        let r = work(peer);
        watch.done.store(true, Release);
        helper.thread().unpark();
        r
    })
}

/// The helper of [`watched`].
struct Watch {
    sock: Option<super::conn::Stream>,
    done: AtomicBool,
    stage: Stage,
    timeout: Duration,
}

impl Watch {
    fn run(&self, taken: &dyn Fn() -> u64, loading: &crate::persistence::load::Loading) {
        let second = Duration::from_secs(1);
        let (mut seen, mut moved, mut newline) = (taken(), Instant::now(), Instant::now());
        while !self.done.load(Acquire) {
            std::thread::park_timeout(second);
            if newline.elapsed() >= second {
                newline = Instant::now();
                if let Some(s) = &self.sock {
                    let _ = s.send_shared(b"\n");
                }
            }
            let now = taken();
            if now != seen {
                (seen, moved) = (now, Instant::now());
            } else if moved.elapsed() > self.timeout + second && !self.done.load(Acquire) {
                // (A second more than the socket's own timeout, which
                // reports a master gone quiet first.)
                log_warning!("{}", self.stage.timeout_message(self.timeout.as_secs()));
                loading.abort();
                return;
            }
        }
    }
}

/// A full sync replaced the dataset: as Redis (signalFlushedDb, or
/// swapMainDbWithTempDb), WATCHed keys are touched, tracking clients get a
/// flush invalidation and clients blocked on keys look again.
fn dataset_replaced(srv: &Server) {
    srv.watch.touch_db(None);
    crate::commands::tracking::invalidate_all(srv, u64::MAX);
    for db in 0..srv.keyspace.num_dbs() {
        srv.blocking.signal_db(db);
    }
}

/// With the AOF on, its files still hold the old dataset: a rewrite (or
/// one scheduled after the running one) bases it on the new one, as
/// Redis's restartAOFAfterSYNC.
fn restart_aof(srv: &Arc<Server>) {
    use crate::persistence::aof::rewrite::{start, StartError};
    if !srv.config.read().get_bool("appendonly") {
        return;
    }
    match start(srv) {
        Ok(()) => {}
        Err(StartError::InProgress | StartError::Busy) => {
            srv.persist.aof.rw.lock().scheduled = true;
        }
        Err(StartError::Failed(e)) => {
            log_warning!("Can't rewrite the AOF after the sync with the master: {e}");
        }
    }
}

/// `repl-diskless-load disabled`: the payload into a temp file, loaded as
/// at start-up, then renamed to `dbfilename`.
fn load_via_file(srv: &Arc<Server>, peer: &mut Peer, spec: &PayloadSpec) -> Result<(), String> {
    let tmp = format!("temp-{}.{}.rdb", unix_ms() / 1000, std::process::id());
    let r = receive_rdb(srv, peer, spec, &tmp).and_then(|()| {
        log_notice!("MASTER <-> REPLICA sync: Flushing old data");
        log_notice!("MASTER <-> REPLICA sync: Loading DB in memory");
        peer.begin(Stage::Loading);
        let path = std::path::Path::new(&tmp);
        let taken = || srv.persist.loading.progress();
        watched(srv, peer, taken, |_| {
            crate::persistence::load::load_for_replica(srv, path)
        })
    });
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("MASTER <-> REPLICA sync failed: {e}"));
    }
    let dbfile = srv.config.read().get_str("dbfilename");
    if let Err(e) = std::fs::rename(&tmp, &dbfile) {
        log_warning!("Failed trying to rename the temp DB into {dbfile} in MASTER <-> REPLICA synchronization: {e}");
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(())
}

/// Diskless load: the RDB decoded as it arrives. `Live` empties the
/// databases first; `Swap` fills a staging dataset, to be swapped in (by
/// the caller's `commit`) only once the payload and its EOF mark are
/// complete. A short read, a corrupt payload or a broken mark aborts: the
/// staging data is dropped (the old dataset stays), live databases are
/// emptied.
fn load_from_socket(
    srv: &Arc<Server>,
    gen: u64,
    peer: &mut Peer,
    spec: &PayloadSpec,
    mode: SocketLoad,
) -> Result<ReplicaLoad, String> {
    if mode == SocketLoad::Live {
        log_notice!("MASTER <-> REPLICA sync: Flushing old data");
    }
    let job = ReplicaLoad::begin(srv, mode, spec.len.unwrap_or(0));
    log_notice!("MASTER <-> REPLICA sync: Loading DB in memory");
    let mut sock = SocketPayload {
        srv,
        gen,
        peer,
        left: spec.len,
        mark: spec.mark.clone(),
        held: Vec::new(),
        pos: 0,
        marked: false,
    };
    let r = load_socket_payload(srv, &job, &mut sock);
    match r {
        Ok(()) => Ok(job),
        Err(e) => {
            log_warning!("Failed trying to load the MASTER synchronization DB from socket: {e}");
            job.abort(srv);
            Err(e)
        }
    }
}

fn load_socket_payload(
    srv: &Arc<Server>,
    job: &ReplicaLoad,
    sock: &mut SocketPayload,
) -> Result<(), String> {
    use crate::persistence::load::{load_reader_into, OnDuplicate};
    let mut br = std::io::BufReader::with_capacity(64 * 1024, &mut *sock);
    let r = load_reader_into(srv, job.target(srv), &mut br, OnDuplicate::Fail);
    let leftover = br.buffer().len();
    drop(br);
    if let Err(e) = r {
        log_warning!("Internal error in RDB reading offset {} -> {e}. Failure loading rdb format from socket, assuming connection error, resuming operation.", srv.repl.replica.sync_read.load(Relaxed));
        return Err(e.to_string());
    }
    sock.finish(leftover)
}

/// The payload read straight from the socket: `$<len>` bytes, or all up to
/// the 40-byte EOF mark, whose candidates are held back until more bytes
/// tell them apart from data. Bytes after the mark (the command stream)
/// go back to the peer's buffer. Timeouts (`repl-timeout` without a byte
/// from the master, or an aborted load), a closed link and a REPLICAOF
/// elsewhere are read errors.
struct SocketPayload<'a, 'p> {
    srv: &'a Server,
    gen: u64,
    peer: &'a mut Peer<'p>,
    left: Option<u64>,
    mark: Option<Vec<u8>>,
    /// Bytes taken from the socket not yet handed out (EOF mark mode).
    held: Vec<u8>,
    pos: usize,
    marked: bool,
}

impl SocketPayload<'_, '_> {
    /// Waits for unread bytes in the peer's buffer.
    fn more(&mut self) -> std::io::Result<()> {
        use std::io::{Error, ErrorKind};
        let side = &self.srv.repl.replica;
        self.srv.persist.loading.check_aborted()?;
        while self.peer.start == self.peer.buf.len() {
            if side.generation.load(Acquire) != self.gen {
                return Err(Error::other("the replication link was replaced"));
            }
            // Not UnexpectedEof, which the decoder reports without the
            // reason (a timeout, a closed link).
            if let Err(e) = self.peer.fill() {
                return Err(Error::new(ErrorKind::ConnectionAborted, e));
            }
        }
        Ok(())
    }

    fn count(&self, n: usize) {
        self.srv.repl.replica.sync_read.fetch_add(n as u64, Relaxed);
        self.srv.persist.loading.add_loaded(n as u64);
    }

    /// After the RDB decoded: the rest of the payload must be empty (with
    /// an EOF mark: nothing but the mark; `leftover`: bytes read ahead).
    fn finish(&mut self, leftover: usize) -> Result<(), String> {
        let mut extra = leftover;
        let mut buf = [0u8; 4096];
        loop {
            match std::io::Read::read(self, &mut buf) {
                Ok(0) => break,
                Ok(n) => extra += n,
                Err(e) => return Err(e.to_string()),
            }
        }
        if extra > 0 && self.mark.is_some() {
            return Err("Replication stream EOF marker is broken".into());
        }
        Ok(())
    }

    fn read_marked(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let avail = self.held.len() - self.pos;
            let free = if self.marked {
                avail
            } else {
                avail.saturating_sub(40)
            };
            if free > 0 {
                let n = free.min(buf.len());
                buf[..n].copy_from_slice(&self.held[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if self.marked {
                return Ok(0);
            }
            self.more()?;
            self.held.drain(..self.pos);
            self.pos = 0;
            // The mark may start in the bytes held back.
            let from = self.held.len().saturating_sub(39);
            let chunk = self.peer.take(usize::MAX);
            let n = chunk.len();
            self.held.extend_from_slice(chunk);
            self.count(n);
            let mark = self.mark.as_deref().unwrap_or_default();
            if let Some(p) = self.held[from..].windows(40).position(|w| w == mark) {
                let p = from + p;
                let after = self.held.len() - (p + 40);
                self.peer.start -= after;
                self.held.truncate(p);
                self.marked = true;
            }
        }
    }
}

impl Read for SocketPayload<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(left) = self.left else {
            return self.read_marked(buf);
        };
        if left == 0 || buf.is_empty() {
            return Ok(0);
        }
        self.more()?;
        let want = (left as usize).min(buf.len());
        let chunk = self.peer.take(want);
        let n = chunk.len();
        buf[..n].copy_from_slice(chunk);
        self.left = Some(left - n as u64);
        self.count(n);
        Ok(n)
    }
}

/// `$<len>\r\n<bytes>` or `$EOF:<40 byte mark>\r\n<bytes><mark>` into `path`.
fn receive_rdb(
    srv: &Server,
    peer: &mut Peer,
    spec: &PayloadSpec,
    path: &str,
) -> Result<(), String> {
    let side = &srv.repl.replica;
    let (len, eof_mark) = (spec.len, &spec.mark);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| {
        format!("Opening the temp file needed for MASTER <-> REPLICA synchronization: {e}")
    })?);
    let mut got: u64 = 0;
    // With an EOF mark, the last 40 bytes seen are held back until more
    // arrive: they may be the mark.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let want = len.map_or(usize::MAX, |l| (l - got) as usize);
        if want == 0 {
            break;
        }
        if peer.start == peer.buf.len() {
            peer.fill()?;
            continue;
        }
        let chunk = peer.take(want).to_vec();
        got += chunk.len() as u64;
        side.sync_read.store(got, Relaxed);
        match &eof_mark {
            None => f.write_all(&chunk).map_err(|e| e.to_string())?,
            Some(mark) => {
                tail.extend_from_slice(&chunk);
                // The command stream may follow the mark in the same read:
                // what comes after it goes back to the peer's buffer.
                if let Some(p) = tail.windows(40).position(|w| w == &mark[..]) {
                    let after = tail.len() - (p + 40);
                    peer.start -= after;
                    tail.truncate(p);
                    f.write_all(&tail).map_err(|e| e.to_string())?;
                    break;
                }
                if tail.len() > 40 {
                    let keep = tail.split_off(tail.len() - 40);
                    f.write_all(&tail).map_err(|e| e.to_string())?;
                    tail = keep;
                }
            }
        }
    }
    f.flush().map_err(|e| e.to_string())?;
    // Redis fsyncs the temp file too; on a disk busy with other writers
    // that can take long, which the log says (the stage has no timeout here).
    let began = Instant::now();
    f.get_ref().sync_all().map_err(|e| e.to_string())?;
    if began.elapsed() >= Duration::from_secs(1) {
        log_warning!(
            "MASTER <-> REPLICA sync: fsync of the received RDB took {:.1} s",
            began.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The command stream, until the link fails or REPLICAOF changes it.
fn stream(srv: &Arc<Server>, gen: u64, peer: &mut Peer) -> Result<(), String> {
    let side = &srv.repl.replica;
    let mut client = ClientState::new(u64::MAX);
    client.db = side.master_db.load(Relaxed);
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let mut parser = RequestParser::new();
    let mut last_ack = Instant::now() - Duration::from_secs(2);
    // Stream bytes that came with the end of the payload are parsed first.
    let mut link = Link {
        clock: &mut clock,
        stats: &stats,
        client: &mut client,
        parser: &mut parser,
    };
    let mut buffered = peer.start < peer.buf.len();
    // Redis's replicas ACK once a second, from their cron; ten times keeps
    // the master's backlog (which holds what we have not acknowledged) ten
    // times smaller under a heavy write load, for a few bytes a second.
    // The ACKs keep that cadence whether or not writes come (the read
    // wakes us at least once an interval): a write is acknowledged at the
    // next tick, or at once when the master asks (GETACK), never because it
    // arrived. An ACK sent as soon as a write landed after a quiet spell
    // told a failing-over master that a replica SIGSTOPped just before the
    // write had it: a multi-threaded process stops only once the thread
    // the kernel picked for the signal has run, and until then this thread
    // can still read and apply (Redis's failover.tcl, "failover command to
    // any replica works", on a loaded machine; DECISIONS 178).
    const ACK_EVERY: Duration = Duration::from_millis(100);
    const QUIET: Duration = Duration::from_millis(5);
    let _ = peer.conn.s.tcp().set_read_timeout(Some(ACK_EVERY));
    let mut last_bytes = Instant::now();
    loop {
        if side.generation.load(Acquire) != gen {
            return Ok(());
        }
        if last_ack.elapsed() >= ACK_EVERY {
            send_ack(srv, peer)?;
            last_ack = Instant::now();
        }
        side.wait_out_pause(gen);
        // (Without a byte for repl-timeout, fill ends the link.)
        if !std::mem::take(&mut buffered) && peer.fill()? == 0 {
            continue;
        }
        // Bytes after a quiet spell: if the process was just told to stop,
        // stop before applying them, as Redis's one thread would.
        if last_bytes.elapsed() >= QUIET {
            wait_out_stop_signal();
        }
        last_bytes = Instant::now();
        if link.apply_buffered(srv, peer)? {
            last_ack = Instant::now();
        }
        // The batch's writes go to the AOF now, as a client's would.
        crate::persistence::aof::before_reply(srv);
        srv.repl.backlog.wake_if_dirty();
    }
}

/// What applies the master's commands: the master client and its clock.
struct Link<'a> {
    clock: &'a mut Hlc,
    stats: &'a crate::core::stats::WorkerStats,
    client: &'a mut ClientState,
    parser: &'a mut RequestParser,
}

impl Link<'_> {
    /// Applies the whole commands in the peer's buffer and relays their
    /// bytes to our backlog, answering GETACKs; whether it ACKed. All under
    /// `apply_lock`, so a snapshot's cut sees the data, the offset and the
    /// stream's database of one instant (an RDB saved here, or a
    /// sub-replica's full sync, continues at exactly the right byte).
    fn apply_buffered(&mut self, srv: &Arc<Server>, peer: &mut Peer) -> Result<bool, String> {
        let side = &srv.repl.replica;
        let _applying = side.apply_lock.lock();
        let mut acked = false;
        let mut relayed = peer.start;
        loop {
            let pending = &peer.buf[peer.start..];
            let consumed = match self.parser.parse(pending, &ParseLimits::default()) {
                Ok(Parsed::Command { consumed }) => consumed,
                Ok(Parsed::Incomplete) => break,
                Err(e) => return Err(format!("protocol error from master: {}", e.0)),
            };
            let args = self.parser.args(pending);
            let getack = args.len() >= 2
                && args.get(0).eq_ignore_ascii_case(b"replconf")
                && args.get(1).eq_ignore_ascii_case(b"getack");
            if !getack && !args.is_empty() {
                let r = crate::commands::run_args(srv, self.clock, self.stats, self.client, args);
                if let Err(e) = r {
                    let name = String::from_utf8_lossy(args.get(0)).to_ascii_lowercase();
                    crate::core::propagation::failed(
                        srv,
                        crate::core::propagation::Source::Master,
                        &e,
                        &name,
                    );
                }
            }
            peer.start += consumed;
            if getack {
                // The offset it reports counts the GETACK itself.
                srv.repl.backlog.append_raw(&peer.buf[relayed..peer.start]);
                relayed = peer.start;
                send_ack(srv, peer)?;
                acked = true;
            }
        }
        // One relay per read, not per command.
        if relayed < peer.start {
            srv.repl.backlog.append_raw(&peer.buf[relayed..peer.start]);
        }
        side.master_db.store(self.client.db, Relaxed);
        Ok(acked)
    }
}

impl ReplicaSide {
    /// The database the master's stream has selected (repl-stream-db).
    pub fn stream_db(&self) -> usize {
        self.master_db.load(Relaxed)
    }

    pub fn set_stream_db(&self, db: usize) {
        self.master_db.store(db, Relaxed);
    }
}

/// REPLCONF ACK <offset> [FACK <aof offset>] (FACK when our AOF is on and
/// fsynced: WAITAOF on our master counts us then).
fn send_ack(srv: &Server, peer: &mut Peer) -> Result<(), String> {
    wait_out_stop_signal();
    crate::persistence::aof::before_reply(srv);
    let off = srv.repl.backlog.end().to_string();
    let aof = &srv.persist.aof.core;
    if aof.active.load(Relaxed) && aof.synced_to(aof.my_end()) {
        peer.send(&[b"REPLCONF", b"ACK", off.as_bytes(), b"FACK", off.as_bytes()])
    } else {
        peer.send(&[b"REPLCONF", b"ACK", off.as_bytes()])
    }
}

/// A SIGSTOP (or another stopping signal) sent to this process and not yet
/// taken: we do not ACK until the stop has happened. Redis's one thread
/// takes the signal before it reads another byte, so a replica stopped
/// before a write never acknowledges it. Ours is several threads, and the
/// kernel stops them all only once the thread it picked for the signal
/// (the main thread) has run: on a loaded machine this link thread could
/// read, apply and ACK a write sent after the stop in that window (Redis's
/// unit/wait and integration/failover, about one run in five under load;
/// DECISIONS 180). The signal sits in the process's shared pending set
/// until taken, and once taken every thread stops at its next system call,
/// so sleeping until the set is clear makes this thread stop right there.
/// Read from /proc before an ACK (ten a second, and one per GETACK) and
/// before applying bytes that end a quiet spell of 5 ms (a busy stream
/// never pays it): Redis's integration/replication-4 stops the replica,
/// writes, and expects the write applied only after it continues.
fn wait_out_stop_signal() {
    // SIGSTOP, SIGTSTP, SIGTTIN and SIGTTOU are signals 19-22 (bits 18-21).
    const STOP_SIGNALS: u64 = 0xf << 18;
    let pending = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("ShdPnd:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .is_some_and(|set| set & STOP_SIGNALS != 0)
    };
    // Bounded: a stop that never happens (a blocked main thread) costs at
    // most a second of ACKs, never the link.
    for _ in 0..1000 {
        if !pending() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
