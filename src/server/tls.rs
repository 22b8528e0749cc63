/*
 * TLS for client connections (`tls-port`), with rustls: [`TlsStream`], a
 * socket whose reads and writes go through a rustls session, so that the
 * connection loop (`conn.rs`) serves it exactly as a plain socket. The
 * configuration it starts with is `core/tls.rs`'s current one.
 *
 * The stream keeps the connection loop's rule for edge-triggered
 * readiness: a read that returns less than asked has drained the socket
 * (it returns a short read only once the socket would block or gave less
 * ciphertext than asked for), so the loop may clear readiness as it does
 * for TCP. Writes
 * hand plaintext to the session and push its records out; what the socket
 * does not take stays in the session and `flush` finishes it (the loop
 * flushes after each batch, waiting for writability).
 *
 * A replica's PSYNC is served on the stream as it is; an active peer's
 * LATTICE.PEER takes the session with it to the feed's threads
 * ([`HandOff::take_tls`]). A failed handshake (no or a bad client
 * certificate, plaintext sent to the TLS port) is logged, at most ten a
 * second, and closes that connection.
 */

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use rustls::{ServerConfig, ServerConnection};

use crate::log_warning;

/// What a connection hands over when it becomes an active peer's feed:
/// its TLS session, if it has one.
pub(crate) trait HandOff {
    fn take_tls(&self) -> Option<ServerConnection> {
        None
    }
}

impl HandOff for std::net::TcpStream {}
impl HandOff for std::os::unix::net::UnixStream {}

impl HandOff for TlsStream {
    fn take_tls(&self) -> Option<ServerConnection> {
        self.tls.borrow_mut().take()
    }
}

/// Logs a failed TLS handshake, at most [`LOG_PER_SECOND`] a second (a
/// client that keeps failing must not flood the log).
fn log_failure(addr: &str, e: &rustls::Error) {
    static SECOND: AtomicU64 = AtomicU64::new(0);
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let now = crate::keyspace::hlc::unix_ms() / 1000;
    if SECOND.swap(now, Relaxed) != now {
        COUNT.store(0, Relaxed);
    }
    if COUNT.fetch_add(1, Relaxed) < LOG_PER_SECOND {
        log_warning!("Error accepting a client connection: TLS handshake with {addr} failed: {e}");
    }
}

const LOG_PER_SECOND: u64 = 10;

/// Makes closing `sock` send a reset (SO_LINGER with a zero timeout).
fn reset_on_close(sock: &std::net::TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the fd is `sock`'s, open for the call; the value points to a
    // live `linger` of the size given.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// A TCP socket carrying a TLS session (see the module comment).
pub struct TlsStream {
    sock: std::net::TcpStream,
    /// None once handed off ([`HandOff`]); the connection ends then.
    tls: RefCell<Option<ServerConnection>>,
    addr: String,
}

impl TlsStream {
    pub fn new(
        sock: std::net::TcpStream,
        config: Arc<ServerConfig>,
        addr: String,
    ) -> io::Result<TlsStream> {
        let conn = ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(TlsStream {
            sock,
            tls: RefCell::new(Some(conn)),
            addr,
        })
    }
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "TLS session handed off")
}

impl AsRawFd for TlsStream {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// Pushes the session's pending records to the socket; WouldBlock if the
/// socket does not take them all.
fn push(tls: &mut ServerConnection, mut sock: &std::net::TcpStream) -> io::Result<()> {
    while tls.wants_write() {
        tls.write_tls(&mut sock)?;
    }
    Ok(())
}

/// The socket as rustls reads it, noting whether the last read was short
/// (the socket had less than asked for: drained at that moment).
struct SockReader<'a> {
    sock: &'a std::net::TcpStream,
    short: bool,
}

impl Read for SockReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let k = (&mut &*self.sock).read(buf)?;
        self.short = k < buf.len();
        Ok(k)
    }
}

impl Read for &TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut guard = self.tls.borrow_mut();
        let tls = guard.as_mut().ok_or_else(gone)?;
        let mut sock = SockReader {
            sock: &self.sock,
            short: false,
        };
        let mut n = 0;
        loop {
            while n < buf.len() {
                match tls.reader().read(&mut buf[n..]) {
                    Ok(0) => return Ok(n),
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
                }
            }
            // Plaintext after a short socket read: the socket is drained,
            // so return without the read that would only say EAGAIN (one
            // syscall a request at pipeline 1); the loop's short-read rule
            // holds, as new data re-arms edge-triggered readiness.
            if n == buf.len() || (n > 0 && sock.short) {
                return Ok(n);
            }
            match tls.read_tls(&mut sock) {
                Ok(0) => return Ok(n),
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        if tls.is_handshaking() {
                            log_failure(&self.addr, &e);
                        }
                        if matches!(e, rustls::Error::InvalidMessage(_)) {
                            // Not TLS at all (plaintext to the TLS port):
                            // no alert, and a reset, as Redis's close
                            // gives, so the client sees an I/O error.
                            reset_on_close(&self.sock);
                        } else {
                            // The alert for the peer, then the error.
                            let _ = push(tls, &self.sock);
                        }
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                    match push(tls, &self.sock) {
                        Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                        _ => {}
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && n > 0 => return Ok(n),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Write for &TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut guard = self.tls.borrow_mut();
        let tls = guard.as_mut().ok_or_else(gone)?;
        push(tls, &self.sock)?;
        let n = tls.writer().write(buf)?;
        match push(tls, &self.sock) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.tls.borrow_mut().as_mut() {
            Some(tls) => push(tls, &self.sock),
            None => Ok(()),
        }
    }
}
