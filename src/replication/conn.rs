//! A blocking connection to another node with a read buffer: what a
//! replica's link to its master (replica/link.rs) and an active link to
//! its peer (active/link/socket.rs) share, as they share `node_link.rs`.
//! Both run on threads of their own with blocking sockets whose read
//! timeout is one second, so a quiet second returns to the caller (to
//! check a stop flag, send an ACK) and the caller's own timeout counts
//! from the last byte read (`progress`).
//!
//! With `tls-replication yes` the socket carries a TLS session ([`Stream`],
//! [`secure`]): the handshake completes before the caller's first command,
//! with the client side of `core/tls.rs` (the peer's chain checked against
//! our CAs, our certificate presented), so a refused certificate is the
//! link's error, logged, on our side as on the peer's.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use super::tls_link::SharedTls;

/// A link's socket: plain, or carrying a TLS session.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<SharedTls>),
}

impl Stream {
    /// The TCP socket beneath (to clone for a shutdown from elsewhere).
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &t.sock,
        }
    }

    /// Another handle another thread may write with.
    pub(crate) fn try_clone(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Stream::Plain(s) => Stream::Plain(s.try_clone()?),
            Stream::Tls(t) => Stream::Tls(Box::new(t.try_clone()?)),
        })
    }

    /// Writes all of `buf` through a shared handle.
    pub(crate) fn send_shared(&self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => (&*s).write_all(buf),
            Stream::Tls(t) => t.send(buf),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(t) => t.flush(),
        }
    }
}

/// `s` as the link's stream: plain without `tls`, else after a completed
/// TLS handshake with `host` (whose name is not checked: `core/tls.rs`).
/// The error names what failed ("TLS handshake with the master failed:
/// invalid peer certificate: UnknownIssuer").
pub(crate) fn secure(
    s: TcpStream,
    host: &str,
    tls: Option<Arc<ClientConfig>>,
    who: &str,
) -> Result<Stream, String> {
    let Some(config) = tls else {
        return Ok(Stream::Plain(s));
    };
    let name = match ServerName::try_from(host.to_string()) {
        Ok(n) => n,
        Err(_) => s.peer_addr().map_err(|e| e.to_string())?.ip().into(),
    };
    let fail = |e: String| format!("TLS handshake with the {who} failed: {e}");
    let mut c = ClientConnection::new(config, name).map_err(|e| fail(e.to_string()))?;
    let mut sock = s;
    let started = Instant::now();
    while c.is_handshaking() {
        match c.complete_io(&mut sock) {
            Ok(_) => {}
            // The socket's one-second read timeout: wait on, up to its
            // write timeout (`repl-timeout`).
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) && started.elapsed()
                    < sock.write_timeout().ok().flatten().unwrap_or_default() => {}
            Err(e) => return Err(fail(e.to_string())),
        }
    }
    Ok(Stream::Tls(Box::new(SharedTls::new(sock, c))))
}

pub(crate) struct Conn {
    pub s: Stream,
    /// The other side, in messages: "master", "peer".
    who: &'static str,
    /// Bytes read; those before `start` are consumed.
    pub buf: Vec<u8>,
    pub start: usize,
    /// How long the other side may send nothing (`repl-timeout`).
    pub timeout: Duration,
    /// The last byte read, or the start of what the caller waits for.
    pub progress: Instant,
}

/// What one read gave.
pub(crate) enum Filled {
    Bytes(usize),
    /// A second without bytes, `timeout` not passed yet.
    Quiet,
    /// `timeout` passed without bytes.
    TimedOut,
}

impl Conn {
    pub(crate) fn new(s: Stream, who: &'static str, timeout: Duration) -> Self {
        Conn {
            s,
            who,
            buf: Vec::new(),
            start: 0,
            timeout,
            progress: Instant::now(),
        }
    }

    /// Sends a command; an error is the socket's (a write timeout means
    /// the other side read nothing for that long).
    pub(crate) fn send(&mut self, argv: &[&[u8]]) -> std::io::Result<()> {
        let mut out = Vec::new();
        crate::protocol::request::command(&mut out, argv);
        self.s.write_all(&out)
    }

    /// Reads more bytes into the buffer. Errors: the connection closed or
    /// failed.
    pub(crate) fn fill(&mut self) -> Result<Filled, String> {
        // Drop what was consumed: at once when all was, else once it is
        // 64 KB (a stream rarely ends a read on a record's end, and the
        // buffer must not grow with it).
        if self.start > 0 && (self.start == self.buf.len() || self.start >= 64 * 1024) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let mut tmp = [0u8; 64 * 1024];
        match self.s.read(&mut tmp) {
            Ok(0) => Err(format!("connection closed by the {}", self.who)),
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                self.progress = Instant::now();
                Ok(Filled::Bytes(n))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                if self.progress.elapsed() >= self.timeout {
                    return Ok(Filled::TimedOut);
                }
                Ok(Filled::Quiet)
            }
            Err(e) => Err(format!("read error: {e}")),
        }
    }

    /// The next reply line in the buffer (without CRLF), if a whole one is
    /// there; bare newlines before it (a master's keepalives while it
    /// prepares a sync) are skipped.
    pub(crate) fn take_line(&mut self) -> Result<Option<String>, String> {
        while self.start < self.buf.len() && self.buf[self.start] == b'\n' {
            self.start += 1;
        }
        let pending = &self.buf[self.start..];
        if let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&pending[..i])
                .trim_end_matches('\r')
                .to_string();
            self.start += i + 1;
            return Ok(Some(line));
        }
        if pending.len() > 64 * 1024 {
            return Err("protocol error: reply line too long".into());
        }
        Ok(None)
    }
}
