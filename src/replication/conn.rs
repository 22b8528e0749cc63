//! A blocking connection to another node with a read buffer: what a
//! replica's link to its master (replica.rs) and an active link to its
//! peer (active/link.rs) share. Both run on threads of their own with
//! blocking sockets whose read timeout is one second, so a quiet second
//! returns to the caller (to check a stop flag, send an ACK) and the
//! caller's own timeout counts from the last byte read (`progress`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

pub struct Conn {
    pub s: TcpStream,
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
pub enum Filled {
    Bytes(usize),
    /// A second without bytes, `timeout` not passed yet.
    Quiet,
    /// `timeout` passed without bytes.
    TimedOut,
}

impl Conn {
    pub fn new(s: TcpStream, who: &'static str, timeout: Duration) -> Self {
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
    pub fn send(&mut self, argv: &[&[u8]]) -> std::io::Result<()> {
        let mut out = Vec::new();
        crate::protocol::request::command(&mut out, argv);
        self.s.write_all(&out)
    }

    /// Reads more bytes into the buffer. Errors: the connection closed or
    /// failed.
    pub fn fill(&mut self) -> Result<Filled, String> {
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
    pub fn take_line(&mut self) -> Result<Option<String>, String> {
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
