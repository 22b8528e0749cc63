//! The link thread: connects to our master (the node-link client,
//! `node_link.rs`), runs Redis's handshake, PSYNC (`psync.rs`), then the
//! command stream (`stream.rs`); on any failure it logs why, waits a second
//! and starts over. [`Peer`] is its socket and the stage it is in.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::psync::psync;
use super::stream::stream;
use super::ReplicaSide;
use crate::keyspace::hlc::unix_ms;
use crate::replication::conn::{Conn, Filled};
use crate::replication::repl_timeout;
use crate::replication::stage::Stage;
use crate::server::Server;
use crate::{log_notice, log_warning};

pub(super) fn link_thread(srv: Arc<Server>, gen: u64, host: String, port: u16) {
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
pub(super) struct Peer<'a> {
    pub(super) conn: Conn,
    side: &'a ReplicaSide,
    gen: u64,
    pub(super) stage: Stage,
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
    pub(super) fn begin(&mut self, stage: Stage) {
        self.stage = stage;
        self.progress = Instant::now();
        if self.side.generation.load(Acquire) == self.gen {
            self.side.stage.set(stage);
        }
    }

    /// Sends a command (a master that reads nothing for `timeout` ends
    /// the stage too: the socket's write timeout).
    pub(super) fn send(&mut self, argv: &[&[u8]]) -> Result<(), String> {
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
    pub(super) fn fill(&mut self) -> Result<usize, String> {
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
    pub(super) fn line(&mut self) -> Result<String, String> {
        loop {
            if let Some(line) = self.conn.take_line()? {
                return Ok(line);
            }
            self.fill()?;
        }
    }

    pub(super) fn take(&mut self, max: usize) -> &[u8] {
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
    let s = crate::replication::conn::secure(s, host, tls, "master")?;
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
