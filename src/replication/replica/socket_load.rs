//! Diskless load (`repl-diskless-load on-empty-db | swapdb`): the RDB is
//! decoded as it arrives, through [`SocketPayload`], which finds the end
//! of the payload (its length, or the EOF mark) in the link's buffer.

use std::io::Read;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use super::link::Peer;
use super::load::PayloadSpec;
use crate::replication::host::{Host, SocketLoadMode};
use crate::{log_notice, log_warning};

/// Diskless load: the RDB decoded as it arrives. `Live` empties the
/// databases first; `Swap` fills a staging dataset, to be swapped in (by
/// the caller's `commit`) only once the payload and its EOF mark are
/// complete. A short read, a corrupt payload or a broken mark aborts: the
/// staging data is dropped (the old dataset stays), live databases are
/// emptied.
pub(super) fn load_from_socket<H: Host>(
    srv: &Arc<H>,
    gen: u64,
    peer: &mut Peer,
    spec: &PayloadSpec,
    mode: SocketLoadMode,
) -> Result<H::SocketLoad, String> {
    if mode == SocketLoadMode::Live {
        log_notice!("MASTER <-> REPLICA sync: Flushing old data");
    }
    let job = srv.begin_socket_load(mode, spec.len.unwrap_or(0));
    log_notice!("MASTER <-> REPLICA sync: Loading DB in memory");
    let mut sock = SocketPayload {
        srv: &**srv,
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
            srv.abort_socket_load(job);
            Err(e)
        }
    }
}

fn load_socket_payload<H: Host>(
    srv: &Arc<H>,
    job: &H::SocketLoad,
    sock: &mut SocketPayload<H>,
) -> Result<(), String> {
    let mut br = std::io::BufReader::with_capacity(64 * 1024, &mut *sock);
    let r = srv.load_socket(job, &mut br);
    let leftover = br.buffer().len();
    drop(br);
    if let Err(e) = r {
        log_warning!("Internal error in RDB reading offset {} -> {e}. Failure loading rdb format from socket, assuming connection error, resuming operation.", srv.repl().replica.sync_read.load(Relaxed));
        return Err(e);
    }
    sock.finish(leftover)
}

/// The payload read straight from the socket: `$<len>` bytes, or all up to
/// the 40-byte EOF mark, whose candidates are held back until more bytes
/// tell them apart from data. Bytes after the mark (the command stream)
/// go back to the peer's buffer. Timeouts (`repl-timeout` without a byte
/// from the master, or an aborted load), a closed link and a REPLICAOF
/// elsewhere are read errors.
struct SocketPayload<'a, 'p, H> {
    srv: &'a H,
    gen: u64,
    peer: &'a mut Peer<'p>,
    left: Option<u64>,
    mark: Option<Vec<u8>>,
    /// Bytes taken from the socket not yet handed out (EOF mark mode).
    held: Vec<u8>,
    pos: usize,
    marked: bool,
}

impl<H: Host> SocketPayload<'_, '_, H> {
    /// Waits for unread bytes in the peer's buffer.
    fn more(&mut self) -> std::io::Result<()> {
        use std::io::{Error, ErrorKind};
        let side = &self.srv.repl().replica;
        self.srv.check_load_aborted()?;
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
        self.srv
            .repl()
            .replica
            .sync_read
            .fetch_add(n as u64, Relaxed);
        self.srv.add_loaded(n as u64);
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

impl<H: Host> Read for SocketPayload<'_, '_, H> {
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
