//! A link's thread and socket: connects to the peer (the node-link
//! client, `replication/node_link.rs`), authenticates, sends the
//! LATTICE.PEER that `hello` made, then feeds what it reads to the sans-IO
//! [`Link`] and sends its replies, reconnecting a second after any failure.

use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{closed, hello, Hello, Link, LinkState};
use crate::core::stats::WorkerStats;
use crate::keyspace::hlc::{unix_ms, Hlc};
use crate::replication::active::{Host, HostRef};
use crate::replication::node_link;
use crate::{log_notice, log_warning};
pub(super) fn link_thread(node: &HostRef, st: &Arc<LinkState>) {
    let mut clock = Hlc::new(node.identity().1);
    let stats = node.core().new_worker_stats();
    while !st.stop.load(Acquire) {
        log_notice!("Connecting to active peer {}:{}", st.host, st.port);
        node.active().stability.forget_link(&st.key());
        // A panic applying a record (a bug) ends this connection, logged,
        // and the link reconnects from its last applied batch, instead of
        // the thread dying and the peer never being heard again.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(node, st, &mut clock, &stats)
        }));
        let ran = ran.unwrap_or_else(|p| {
            let what = (p.downcast_ref::<&str>().map(|s| s.to_string()))
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(format!(
                "a panic applying the peer's stream ({what}); reconnecting"
            ))
        });
        if let Err(e) = ran {
            if !st.stop.load(Acquire) {
                log_warning!("Active replication link with {}:{}: {e}", st.host, st.port);
                *st.last_error.lock() = e;
            }
        }
        closed(&**node, st);
        *st.socket.lock() = None;
        if st.stop.load(Acquire) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The socket with its read buffer, talking to an active peer.
struct Conn(crate::replication::conn::Conn);

impl std::ops::Deref for Conn {
    type Target = crate::replication::conn::Conn;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}
impl Conn {
    fn send(&mut self, argv: &[&[u8]]) -> Result<(), String> {
        self.0.send(argv).map_err(|e| format!("write error: {e}"))
    }

    /// Reads more; Ok(0) after a second without bytes, an error once
    /// `timeout` passed without any.
    fn fill(&mut self) -> Result<usize, String> {
        use crate::replication::conn::Filled;
        match self.0.fill()? {
            Filled::Bytes(n) => Ok(n),
            Filled::Quiet => Ok(0),
            Filled::TimedOut => Err(format!(
                "the peer sent nothing for {} s",
                self.timeout.as_secs()
            )),
        }
    }

    fn line(&mut self) -> Result<String, String> {
        loop {
            if let Some(line) = self.0.take_line()? {
                return Ok(line);
            }
            self.fill()?;
        }
    }
}

impl node_link::Handshake for Conn {
    fn send(&mut self, argv: &[&[u8]]) -> Result<(), String> {
        Conn::send(self, argv)
    }

    fn line(&mut self) -> Result<String, String> {
        Conn::line(self)
    }
}

/// AUTH (masterauth / masteruser) and REPLCONF listening-port, as a
/// replica's handshake does (the node-link client's steps,
/// `replication/node_link.rs`). A refused AUTH still sends the
/// LATTICE.PEER that follows, so that the peer logs the refused link too
/// (`server/conn.rs`, `log_refused_link`), then ends the connection.
fn handshake(node: &dyn Host, c: &mut Conn, hello: &Hello) -> Result<(), String> {
    let (credentials, port) = {
        let cfg = node.core().config.read();
        let port = node_link::own_port(&cfg, node.port() as i64);
        (node_link::Credentials::from_config(&cfg), port.to_string())
    };
    if let Some(r) = node_link::auth(c, &credentials)? {
        if r.starts_with('-') {
            let _ = c.send(&hello.argv.iter().map(Vec::as_slice).collect::<Vec<_>>());
            let _ = c.line();
            return Err(format!(
                "Unable to AUTH to the peer as '{}': {r}",
                credentials.user_name()
            ));
        }
    }
    let r = node_link::listening_port(c, &port)?;
    if r.starts_with('-') {
        return Err(format!("the peer refused REPLCONF: {r}"));
    }
    Ok(())
}

fn run(
    node: &HostRef,
    st: &Arc<LinkState>,
    clock: &mut Hlc,
    stats: &Arc<WorkerStats>,
) -> Result<(), String> {
    let timeout = node.timeout();
    let s = node_link::connect(node.core(), (&st.host, st.port), timeout, |e| {
        format!("can't connect: {e}")
    })?;
    *st.socket.lock() = s.try_clone().ok();
    let s = node_link::secure(node.core(), s, &st.host, "peer")?;
    let mut c = Conn(crate::replication::conn::Conn::new(s, "peer", timeout));
    let hello = hello(&**node, st);
    handshake(&**node, &mut c, &hello)?;
    c.send(&hello.argv.iter().map(Vec::as_slice).collect::<Vec<_>>())?;
    let reply = c.line()?;
    let mut link = Link::open(node, st, (clock.clone(), stats.clone()), &hello, &reply)?;
    let r = pump(&mut link, &mut c);
    // The clock lives on across connections.
    clock.clone_from(&link.clock);
    r
}
/// The socket loop of a connection: applies what arrives, answers.
fn pump(link: &mut Link, c: &mut Conn) -> Result<(), String> {
    let (mut last_ack, mut last_report) = (Instant::now(), None::<Instant>);
    loop {
        let mut ask = Vec::new();
        c.start += link.apply_bytes(&c.buf[c.start..], &mut ask)?;
        // A feed sends whole batches; bytes that stay short of one (a
        // damaged length that waits for bytes never coming) end the link.
        if c.start < c.buf.len() && link.sealed_at.elapsed() > c.timeout {
            return Err(format!(
                "no whole batch from the peer for {} s (damaged stream?)",
                c.timeout.as_secs()
            ));
        }
        // Acknowledge what we applied at once (WAIT on the peer counts
        // it), and once a second anyway; our stable stamp once a second.
        let second = Duration::from_secs(1);
        let ack_due = last_ack.elapsed() >= second;
        let stable_due = last_report.is_none_or(|t| t.elapsed() >= second);
        for argv in link.replies(ask, ack_due, stable_due) {
            c.send(&argv.iter().map(Vec::as_slice).collect::<Vec<_>>())?;
            match argv[0].as_slice() {
                b"LATTICE.ACK" => last_ack = Instant::now(),
                b"LATTICE.STABLE" => last_report = Some(Instant::now()),
                _ => {}
            }
        }
        if link.st.stop.load(Acquire) {
            return Ok(());
        }
        if c.fill()? > 0 {
            link.st.last_io_ms.store(unix_ms(), Relaxed);
        }
    }
}
