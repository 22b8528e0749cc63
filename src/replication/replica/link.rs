//! The link thread: connects to our master (the node-link client,
//! `node_link.rs`), runs Redis's handshake, PSYNC (`psync.rs`), then the
//! command stream (`stream.rs`); on any failure it logs why, waits a second
//! and starts over. [`Peer`] is its socket and the stage it is in.

use std::net::TcpStream;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::psync::psync;
use super::stream::stream;
use super::ReplicaSide;
use crate::keyspace::hlc::unix_ms;
use crate::replication::conn::{Conn, Filled};
use crate::replication::host::Host;
use crate::replication::node_link;
use crate::replication::repl_timeout;
use crate::replication::stage::Stage;
use crate::{log_notice, log_warning};

pub(super) fn link_thread<H: Host>(srv: Arc<H>, gen: u64, host: String, port: u16) {
    let side = &srv.repl().replica;
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

/// Resolves `host` and connects within `timeout`, with Redis's texts for
/// a failure.
fn connect(
    core: &crate::core::Core,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, String> {
    node_link::connect(core, (host, port), timeout, |e| match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            Stage::Connecting.timeout_message(timeout.as_secs())
        }
        _ => format!("Error condition on socket for SYNC: {e}"),
    })
}

fn run_link<H: Host>(srv: &Arc<H>, gen: u64, host: &str, port: u16) -> Result<(), String> {
    let side = &srv.repl().replica;
    let timeout = repl_timeout(&**srv);
    if side.generation.load(Acquire) == gen {
        side.stage.set(Stage::Connecting);
    }
    let s = connect(srv.core(), host, port, timeout)?;
    *side.socket.lock() = s.try_clone().ok();
    if side.generation.load(Acquire) != gen {
        return Ok(());
    }
    let s = node_link::secure(srv.core(), s, host, "master")?;
    let mut peer = Peer {
        conn: Conn::new(s, "master", timeout),
        side,
        gen,
        stage: Stage::Connecting,
    };
    log_notice!("MASTER <-> REPLICA sync started");
    handshake(&**srv, &mut peer)?;
    psync(srv, gen, &mut peer)?;
    side.up.store(true, Release);
    peer.begin(Stage::Connected);
    side.last_io_ms.store(unix_ms(), Relaxed);
    stream(srv, gen, &mut peer)
}

/// PING, AUTH, REPLCONF: Redis's handshake, with its error texts.
fn handshake<H: Host>(srv: &H, peer: &mut Peer) -> Result<(), String> {
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
    let (credentials, announce_ip, lport) = {
        let c = srv.config.read();
        let lport = match c.get_i64("replica-announce-port") {
            p if p > 0 => p,
            _ => node_link::own_port(&c, srv.port() as i64),
        };
        let ip = c.get_str("replica-announce-ip");
        (
            node_link::Credentials::from_config(&c),
            ip,
            lport.to_string(),
        )
    };
    if let Some(r) = node_link::auth(peer, &credentials)? {
        if r.starts_with('-') {
            return Err(format!("Unable to AUTH to MASTER: {r}"));
        }
    }
    let r = node_link::listening_port(peer, &lport)?;
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

/// The handshake steps shared with the active links (`node_link.rs`),
/// each shown as the link's stage.
impl node_link::Handshake for Peer<'_> {
    fn send(&mut self, argv: &[&[u8]]) -> Result<(), String> {
        Peer::send(self, argv)
    }

    fn line(&mut self) -> Result<String, String> {
        Peer::line(self)
    }

    fn step(&mut self, step: node_link::Step) {
        self.begin(match step {
            node_link::Step::Auth => Stage::ReceiveAuthReply,
            node_link::Step::ListeningPort => Stage::ReceivePortReply,
        });
    }
}
