//! The replication backlog: the one buffer every replica reads from.
//!
//! Redis gives each replica its own output buffer and keeps a separate
//! backlog for partial resyncs; a replica that falls behind overflows its
//! buffer (`client-output-buffer-limit replica`) and is dropped, which under
//! a heavy write load turns into an endless full-resync loop (seeds 000 and
//! 004). Here there is a single byte stream with Redis's offsets, and a
//! replica is only a position in it: its feeder task copies the bytes past
//! that position into its socket whenever the socket can take them. A slow
//! replica therefore costs no memory of its own; the backlog keeps the bytes
//! every connected replica still needs (beyond `repl-backlog-size`, up to the
//! hard cap), and writers are slowed before the cap is reached (see
//! `master.rs`, back-pressure).
//!
//! Offsets are Redis's: `end` is master_repl_offset, the count of bytes ever
//! appended under the current history; the buffer holds the bytes with
//! offsets `end - len + 1 ..= end` (repl_backlog_first_byte_offset is
//! `end - len + 1`). A replica asking for offset `o` wants byte `o` onward.
//!
//! Writers append while holding their shard locks (the effect stream's
//! order), so the critical section is a memcpy; feeders are woken once per
//! batch of writes (`wake_if_dirty`, called where the AOF's before-reply
//! hook runs) rather than once per write.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Over `size` by this much before trimming (so trimming, which looks at the
/// replicas' positions, runs once per this many bytes, not per write).
const TRIM_SLACK: usize = 64 * 1024;

#[derive(Default)]
struct Inner {
    buf: VecDeque<u8>,
    /// master_repl_offset.
    end: u64,
    /// repl-backlog-size: bytes kept for partial resyncs.
    size: usize,
    /// Allocated yet (Redis creates it when the first replica attaches).
    active: bool,
    /// Database the stream's last SELECT chose (None: the next record
    /// starts with a SELECT).
    db: Option<usize>,
}

#[derive(Default)]
pub struct Backlog {
    inner: Mutex<Inner>,
    /// Mirror of `end` for lock-free readers (WAIT, INFO, lag).
    end: AtomicU64,
    /// Something was appended since feeders were last woken.
    dirty: AtomicBool,
    /// Feeders wait here for new bytes.
    pub wake: Notify,
    /// The lowest offset an attached replica still needs (0: none), kept
    /// by the feeders; trimming never drops it unless over `hard_cap`.
    pub keep_from: AtomicU64,
    /// Most bytes kept for lagging replicas (`client-output-buffer-limit
    /// replica` hard limit; 0: no limit).
    pub hard_cap: AtomicUsize,
}

/// A read past what the backlog still holds (or beyond its end).
#[derive(Debug, PartialEq, Eq)]
pub struct OutOfRange;

impl Backlog {
    /// master_repl_offset.
    #[inline]
    pub fn end(&self) -> u64 {
        self.end.load(Acquire)
    }

    pub fn is_active(&self) -> bool {
        self.inner.lock().active
    }

    /// Starts keeping bytes (the first replica attached), from the current
    /// offset on.
    pub fn activate(&self, size: usize) {
        let mut g = self.inner.lock();
        if !g.active {
            g.active = true;
            g.buf.clear();
            g.db = None;
        }
        g.size = size.max(16 * 1024);
    }

    /// Frees the history (repl-backlog-ttl passed without replicas).
    pub fn deactivate(&self) {
        let mut g = self.inner.lock();
        g.active = false;
        g.buf = VecDeque::new();
        g.db = None;
    }

    /// repl-backlog-size changed.
    pub fn resize(&self, size: usize) {
        let mut g = self.inner.lock();
        g.size = size.max(16 * 1024);
        if g.buf.len() > g.size {
            self.trim_locked(&mut g);
        }
    }

    /// Drops the history and restarts at `offset` (a replica that loaded
    /// its master's snapshot, or a new replication id).
    pub fn reset_to(&self, offset: u64) {
        let mut g = self.inner.lock();
        g.buf.clear();
        g.end = offset;
        g.db = None;
        self.end.store(offset, Release);
    }

    /// The next record goes after a SELECT whatever the database (a full
    /// sync's cut: the new replica's stream starts with one).
    pub fn forget_db(&self) {
        self.inner.lock().db = None;
    }

    /// (repl_backlog_first_byte_offset, repl_backlog_histlen).
    pub fn range(&self) -> (u64, u64) {
        let g = self.inner.lock();
        (g.end - g.buf.len() as u64 + 1, g.buf.len() as u64)
    }

    /// Appends one command for database `db`, preceded by a SELECT when the
    /// stream is in another database. It is encoded straight into the
    /// buffer: a big argument (an 8 KB value) is copied once, from the
    /// writer's argv, small ones go through a scratch buffer.
    pub fn append_command(&self, db: usize, argv: &[&[u8]]) {
        use crate::protocol::request;
        const BIG: usize = 512;
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            s.clear();
            let mut g = self.inner.lock();
            if !g.active {
                return;
            }
            if g.db != Some(db) {
                request::select(&mut s, db);
                g.db = Some(db);
            }
            request::array(&mut s, argv.len());
            let mut n = 0;
            for a in argv {
                if a.len() < BIG {
                    request::bulk(&mut s, a);
                    continue;
                }
                request::bulk_header(&mut s, a.len());
                g.buf.extend(s.iter());
                g.buf.extend(a.iter());
                n += s.len() + a.len();
                s.clear();
                s.extend_from_slice(b"\r\n");
            }
            g.buf.extend(s.iter());
            n += s.len();
            self.appended_locked(&mut g, n);
        });
    }

    /// Appends several commands (database, argv) under one lock: a
    /// transaction's MULTI ... EXEC with no other writer's record inside.
    pub fn append_commands<'e>(&self, records: impl IntoIterator<Item = (usize, &'e [Vec<u8>])>) {
        let mut g = self.inner.lock();
        if !g.active {
            return;
        }
        let mut s = Vec::new();
        for (db, argv) in records {
            if g.db != Some(db) {
                crate::protocol::request::select(&mut s, db);
                g.db = Some(db);
            }
            crate::protocol::request::command(&mut s, argv);
        }
        self.push_locked(&mut g, &s);
    }

    /// Appends bytes as they are (a replica relaying its master's stream,
    /// or a PING). `db` is the database the bytes leave selected, if known.
    pub fn append_raw(&self, bytes: &[u8]) {
        let mut g = self.inner.lock();
        if g.active {
            self.push_locked(&mut g, bytes);
        } else {
            // Nobody reads it, but the offset still counts (a replica's
            // master_repl_offset follows its master's).
            g.end += bytes.len() as u64;
            self.end.store(g.end, Release);
        }
    }

    fn push_locked(&self, g: &mut Inner, bytes: &[u8]) {
        g.buf.extend(bytes);
        self.appended_locked(g, bytes.len());
    }

    /// `n` bytes were just added to the buffer's back.
    fn appended_locked(&self, g: &mut Inner, n: usize) {
        g.end += n as u64;
        self.end.store(g.end, Release);
        self.dirty.store(true, Relaxed);
        if g.buf.len() > g.size + TRIM_SLACK {
            self.trim_locked(g);
        }
    }

    /// Trims the front down to `size`, but never past `keep_from` (the
    /// lowest offset a connected replica still needs) unless that would
    /// hold more than `hard_cap` bytes.
    fn trim_locked(&self, g: &mut Inner) {
        let len = g.buf.len();
        let first = g.end - len as u64 + 1;
        let mut drop = len.saturating_sub(g.size);
        let keep = self.keep_from.load(Relaxed);
        if keep != 0 {
            let cap = match self.hard_cap.load(Relaxed) {
                0 => usize::MAX,
                c => c.max(g.size),
            };
            let needed = keep.saturating_sub(first) as usize;
            drop = drop.min(needed).max(len.saturating_sub(cap));
        }
        g.buf.drain(..drop.min(len));
    }

    /// Trims now what no replica needs any more beyond `size` (a replica's
    /// pin moved or went): a master whose replica left holds
    /// `repl-backlog-size`, not what the replica had not acknowledged, and
    /// gives the memory back.
    pub fn trim(&self) {
        let mut g = self.inner.lock();
        if g.buf.len() > g.size {
            self.trim_locked(&mut g);
        }
        // Memory back once the pinned bytes are gone (not while a replica
        // still pins most of it: that would reallocate at every ACK).
        if g.buf.capacity() > 2 * (g.buf.len() + g.size + TRIM_SLACK) {
            let keep = g.size + TRIM_SLACK;
            g.buf.shrink_to(keep);
        }
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        self.inner.lock().buf.len()
    }

    /// Copies up to `max` bytes starting at offset `from` into `out`
    /// (appended). Ok(0) when `from` is the end.
    pub fn read(&self, from: u64, max: usize, out: &mut Vec<u8>) -> Result<usize, OutOfRange> {
        let g = self.inner.lock();
        let first = g.end - g.buf.len() as u64 + 1;
        if from < first || from > g.end + 1 || (!g.active && from != g.end + 1) {
            return Err(OutOfRange);
        }
        let skip = (from - first) as usize;
        let n = (g.buf.len() - skip).min(max);
        let (a, b) = g.buf.as_slices();
        let start = skip;
        let stop = skip + n;
        if start < a.len() {
            out.extend_from_slice(&a[start..stop.min(a.len())]);
        }
        if stop > a.len() {
            out.extend_from_slice(&b[start.saturating_sub(a.len())..stop - a.len()]);
        }
        Ok(n)
    }

    /// Whether a replica may continue from offset `from` (PSYNC).
    pub fn can_continue_from(&self, from: u64) -> bool {
        let g = self.inner.lock();
        let first = g.end - g.buf.len() as u64 + 1;
        g.active && from >= first && from <= g.end + 1
    }

    /// Wakes feeders if anything was appended since the last call.
    pub fn wake_if_dirty(&self) {
        if self.dirty.load(Relaxed) && self.dirty.swap(false, Relaxed) {
            self.wake.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_reads_and_trimming_follow_redis() {
        let b = Backlog::default();
        b.append_raw(b"lost");
        assert_eq!(b.end(), 4);
        b.activate(16 * 1024);
        assert!(b.can_continue_from(5));
        assert!(!b.can_continue_from(4));
        b.append_command(0, &[b"PING"]);
        let mut out = vec![];
        assert_eq!(b.read(5, 1000, &mut out), Ok(37));
        assert!(out.starts_with(b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*1\r\n$4\r\nPING"));
        // Same database: no second SELECT; a big argument is copied whole.
        let big = vec![b'v'; 600];
        b.append_command(0, &[b"SET", b"k", &big]);
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$600\r\n".len() + 600 + 2;
        assert_eq!(b.end(), 41 + set as u64);
        out.clear();
        assert_eq!(b.read(42, 10_000, &mut out), Ok(set));
        let mut want = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$600\r\n".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"\r\n");
        assert_eq!(out, want);
        let end = b.end();
        assert_eq!(b.read(end + 1, 10, &mut out), Ok(0));
        assert_eq!(b.read(end + 2, 10, &mut out), Err(OutOfRange));
        // Past size + slack, the front goes, but not what a replica needs.
        b.keep_from.store(10, Relaxed);
        let chunk = vec![b'a'; 1024];
        for _ in 0..200 {
            b.append_raw(&chunk);
        }
        assert_eq!(b.held() as u64, b.end() - 10 + 1);
        // The replica left: trimmed back to size at once.
        b.keep_from.store(0, Relaxed);
        b.trim();
        assert_eq!(b.held(), 16 * 1024);
        assert_eq!(b.range(), (b.end() - 16 * 1024 + 1, 16 * 1024));
        // The hard cap wins over a replica stuck far behind.
        b.keep_from.store(b.range().0, Relaxed);
        b.hard_cap.store(100 * 1024, Relaxed);
        for _ in 0..200 {
            b.append_raw(&chunk);
        }
        assert!(b.held() <= 100 * 1024 + TRIM_SLACK, "{}", b.held());
        assert!(b.read(b.range().0 - 1, 1, &mut out).is_err());
    }
}
