//! A TLS session over a blocking socket that two threads of a link use at
//! once: the replica's link thread reads a full sync while its watcher
//! (`replica.rs`, `watched`) sends the master a newline a second, as
//! Redis's replicas do while they load. The reader decrypts under the
//! session's lock and reads the socket outside it; a writer holds the write
//! lock from encrypting to the last byte written, so records reach the
//! socket in the session's order. Records the reader's side makes (a key
//! update's answer) leave with the next write.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use parking_lot::Mutex;
use rustls::{ClientConnection, ConnectionCommon, SideData};

pub(crate) struct SharedTls {
    pub sock: TcpStream,
    tls: Arc<Mutex<ClientConnection>>,
    write: Arc<Mutex<()>>,
    /// Ciphertext read from the socket, not yet taken by the session.
    raw: Vec<u8>,
}

impl SharedTls {
    /// `conn` (its handshake done) over `sock`.
    pub(crate) fn new(sock: TcpStream, mut conn: ClientConnection) -> SharedTls {
        // A write is encrypted whole (the writer holds it anyway).
        conn.set_buffer_limit(None);
        SharedTls {
            sock,
            tls: Arc::new(Mutex::new(conn)),
            write: Arc::new(Mutex::new(())),
            raw: Vec::new(),
        }
    }

    /// Another handle on the same session and socket (for writing).
    pub(crate) fn try_clone(&self) -> io::Result<SharedTls> {
        Ok(SharedTls {
            sock: self.sock.try_clone()?,
            tls: self.tls.clone(),
            write: self.write.clone(),
            raw: Vec::new(),
        })
    }

    /// Encrypts `buf` and writes it, with what the session had pending.
    pub(crate) fn send(&self, buf: &[u8]) -> io::Result<()> {
        let _order = self.write.lock();
        let out = seal(&mut **self.tls.lock(), buf)?;
        (&self.sock).write_all(&out)
    }
}

impl Read for SharedTls {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_shared(&self.tls, &mut self.raw, &mut self.sock, buf)
    }
}

/// `plain` encrypted by the session, with the records it had pending: what
/// goes on the socket next (the caller holds the session's lock, so
/// records leave in its order).
pub(crate) fn seal<D: SideData>(t: &mut ConnectionCommon<D>, plain: &[u8]) -> io::Result<Vec<u8>> {
    t.writer().write_all(plain)?;
    let mut out = Vec::with_capacity(plain.len() + 64);
    while t.wants_write() {
        t.write_tls(&mut out)?;
    }
    Ok(out)
}

/// Reads plaintext from a session shared with a writer: decrypts under the
/// session's lock, reads the socket outside it (`raw`: ciphertext read and
/// not yet taken by the session). A socket read timeout surfaces as
/// WouldBlock.
pub(crate) fn read_shared<C, D>(
    tls: &Mutex<C>,
    raw: &mut Vec<u8>,
    sock: &mut TcpStream,
    buf: &mut [u8],
) -> io::Result<usize>
where
    C: std::ops::DerefMut<Target = ConnectionCommon<D>>,
    D: SideData,
{
    loop {
        {
            let mut guard = tls.lock();
            let t = &mut **guard;
            match t.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if !raw.is_empty() {
                let n = t.read_tls(&mut &raw[..])?;
                raw.drain(..n);
                t.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                continue;
            }
        }
        let mut tmp = [0u8; 16 * 1024];
        let n = sock.read(&mut tmp)?;
        if n == 0 {
            return Ok(0);
        }
        raw.extend_from_slice(&tmp[..n]);
    }
}

impl Write for SharedTls {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send(b"")
    }
}
