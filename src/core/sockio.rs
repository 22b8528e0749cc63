//! A connection's socket I/O, shared by the server's connections
//! (`server/conn.rs`) and replication's feeder, which serves a replica on
//! the connection it arrived on (`replication/master/feed.rs`): the query
//! buffer, edge-triggered reads into it, and writes that a kill aborts.

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
    /// Free space to read into, compacting or growing when low.
    fn spare(&mut self) -> &mut [u8] {
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
