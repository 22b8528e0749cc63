//! A connection's socket I/O, shared by the server's connections
//! (`server/conn.rs`) and replication's feeder, which serves a replica on
//! the connection it arrived on (`replication/master/feed.rs`): the query
//! buffer, edge-triggered reads into it, and writes that a kill aborts.
//!
//! [`ConnIo`] is what the connection loop needs of its socket, so that loop
//! is written once for two kinds of I/O: an `AsyncFd` (epoll, every kind of
//! connection) and, with `io-uring yes`, a plain TCP connection's place in
//! its worker's ring (`server/uring.rs`). A hand-off (PSYNC, LATTICE.PEER)
//! always continues on an `AsyncFd` ([`ConnIo::into_epoll`]).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;

use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

/// The query buffer: `data[start..end]` holds unparsed bytes. `data` is
/// zero-filled once when it grows, so reads go straight into it without
/// `unsafe` and without re-zeroing per read.
pub(crate) struct QueryBuf {
    data: Vec<u8>,
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// Set by [`QueryBuf::reserve`]: reads fill `data` up to here without
    /// growing it (0: none).
    want: usize,
}

impl QueryBuf {
    const INITIAL: usize = 16 * 1024;

    pub(crate) fn new() -> Self {
        QueryBuf {
            data: vec![0; Self::INITIAL],
            start: 0,
            end: 0,
            want: 0,
        }
    }
    /// The buffer's share of the client's memory: its size, or the length
    /// of the big argument it is reading if more (the memory the client
    /// asked the server to hold: Redis allocates it as the length arrives,
    /// and its client eviction counts it from then).
    pub(crate) fn memory(&self) -> usize {
        self.data.len().max(self.want)
    }
    /// Announces `need` bytes of pending input (an argument of 32 KiB or
    /// more, Redis's PROTO_MBULK_BIG_ARG): the buffer keeps doubling as
    /// the bytes arrive, never past `need` (so a client's memory shows what
    /// it sent, not twice that), and reads stop at the argument's end. A
    /// claimed length is never allocated up front.
    pub(crate) fn reserve(&mut self, need: usize) {
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        self.want = need;
    }
    pub(crate) fn pending(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }
    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n;
        self.want = 0;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
    /// Free space to read into, compacting or growing when low (a read
    /// then adds what it put there to `end`).
    pub(crate) fn spare(&mut self) -> &mut [u8] {
        if self.end < self.want {
            if self.data.len() == self.end {
                let n = (self.data.len() * 2).min(self.want);
                self.data.resize(n, 0);
            }
            let stop = self.data.len().min(self.want);
            return &mut self.data[self.end..stop];
        }
        if self.data.len() - self.end < 4096 {
            if self.start > 0 {
                self.data.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.data.len() - self.end < 4096 {
                let n = self.data.len() * 2;
                self.data.resize(n, 0);
            }
        }
        &mut self.data[self.end..]
    }
    /// Gives back memory after a big request has been consumed.
    pub(crate) fn shrink_if_idle(&mut self) {
        if self.start == self.end && self.data.len() > 1 << 20 {
            *self = QueryBuf::new();
        }
    }
}

/// Reads into `qb`. Returns 0 on EOF. A short read clears the readiness
/// flag itself (edge-triggered epoll re-arms on new data), which saves the
/// extra `read` returning EAGAIN that a plain async read costs per request.
pub(crate) async fn read_some<T>(io: &AsyncFd<T>, qb: &mut QueryBuf) -> std::io::Result<usize>
where
    T: AsRawFd,
    for<'a> &'a T: Read,
{
    loop {
        let mut guard = io.readable().await?;
        let spare = qb.spare();
        let room = spare.len();
        match guard.try_io(|inner| inner.get_ref().read(spare)) {
            Ok(Ok(n)) => {
                if n > 0 && n < room {
                    guard.clear_ready();
                }
                qb.end += n;
                return Ok(n);
            }
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
}

/// Writes all of `buf`, waiting for writability only when the socket is full.
/// A `kill` notification (output buffer limit, see `core/client.rs`) aborts the
/// wait, so a peer that never reads cannot pin the connection here.
pub(crate) async fn write_all<T>(
    io: &AsyncFd<T>,
    mut buf: &[u8],
    kill: &Notify,
) -> std::io::Result<()>
where
    T: AsRawFd,
    for<'a> &'a T: Write,
{
    while !buf.is_empty() {
        match io.get_ref().write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::select! {
                    g = io.writable() => g?.clear_ready(),
                    _ = kill.notified() => return Err(std::io::ErrorKind::ConnectionAborted.into()),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    // A TLS stream may hold records the socket did not take (a no-op for
    // plain sockets).
    loop {
        match io.get_ref().flush() {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::select! {
                    g = io.writable() => g?.clear_ready(),
                    _ = kill.notified() => return Err(std::io::ErrorKind::ConnectionAborted.into()),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes what the socket takes of `buf[*sent..]` without waiting.
pub(crate) fn write_held<T>(io: &AsyncFd<T>, buf: &[u8], sent: &mut usize) -> std::io::Result<()>
where
    T: AsRawFd,
    for<'a> &'a T: Write,
{
    while *sent < buf.len() {
        match io.get_ref().write(&buf[*sent..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => *sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` if the socket takes it without waiting.
pub(crate) fn write_now<T>(io: &AsyncFd<T>, buf: &[u8]) -> bool
where
    T: AsRawFd,
    for<'a> &'a T: Write,
{
    write_now_std(io.get_ref(), buf)
}

/// Writes all of `buf` to a non-blocking `w` if it takes it without waiting.
pub(crate) fn write_now_std<W: Write>(mut w: W, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        match w.write(buf) {
            Ok(0) => return false,
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    w.flush().is_ok()
}

/// A connection's socket as the connection loop uses it. Output is
/// `buf[*sent..]` of the caller's reply buffer: bytes count as written
/// (`sent` moves) only once the kernel took them, so replies held for a
/// client that does not read are the caller's, counted and limited there.
#[allow(async_fn_in_trait)]
pub(crate) trait ConnIo {
    /// The stream a hand-off continues with.
    type Stream: AsRawFd;
    fn raw_fd(&self) -> std::os::fd::RawFd;
    /// Input received but not yet in a query buffer (none on epoll).
    fn buffered(&self) -> bool;
    /// Reads into `qb`; 0 on EOF.
    async fn read_some(&self, qb: &mut QueryBuf) -> std::io::Result<usize>;
    /// Starts writing `buf[*sent..]` without waiting; `sent` moves by what
    /// the kernel has taken so far.
    fn write_held(&self, buf: &[u8], sent: &mut usize) -> std::io::Result<()>;
    /// Waits until held output can make progress, then as `write_held`.
    async fn write_more(&self, buf: &[u8], sent: &mut usize) -> std::io::Result<()>;
    /// Writes all of `buf` now or reports false (nothing may wait).
    fn write_now(&self, buf: &[u8]) -> bool;
    /// Writes all of `buf` (which starts with the held output, if any),
    /// waiting as needed; `kill` aborts.
    async fn write_all(&self, buf: &[u8], kill: &Notify) -> std::io::Result<()>;
    /// The socket on epoll, with every byte already received moved to `qb`.
    async fn into_epoll(self, qb: &mut QueryBuf) -> std::io::Result<AsyncFd<Self::Stream>>;
}

impl<T> ConnIo for AsyncFd<T>
where
    T: AsRawFd,
    for<'a> &'a T: Read + Write,
{
    type Stream = T;
    fn raw_fd(&self) -> std::os::fd::RawFd {
        self.get_ref().as_raw_fd()
    }
    fn buffered(&self) -> bool {
        false
    }
    async fn read_some(&self, qb: &mut QueryBuf) -> std::io::Result<usize> {
        read_some(self, qb).await
    }
    fn write_held(&self, buf: &[u8], sent: &mut usize) -> std::io::Result<()> {
        write_held(self, buf, sent)
    }
    async fn write_more(&self, buf: &[u8], sent: &mut usize) -> std::io::Result<()> {
        let mut g = self.writable().await?;
        write_held(self, buf, sent)?;
        if *sent < buf.len() {
            g.clear_ready();
        }
        Ok(())
    }
    fn write_now(&self, buf: &[u8]) -> bool {
        write_now(self, buf)
    }
    async fn write_all(&self, buf: &[u8], kill: &Notify) -> std::io::Result<()> {
        write_all(self, buf, kill).await
    }
    async fn into_epoll(self, _qb: &mut QueryBuf) -> std::io::Result<AsyncFd<T>> {
        Ok(self)
    }
}
