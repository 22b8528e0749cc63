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
//! `master/throttle.rs`, back-pressure).
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
//!
//! Two tiers (`repl-lag-policy spill`, DECISIONS 31): bytes a replica still
//! needs (the pin, `keep_from`) stay in memory while memory holds less than
//! the spill threshold (half the replica hard limit while the replica is
//! attached; `repl-backlog-size` once it has gone); past it the spiller
//! thread copies the oldest pinned bytes to disk segments (`spill.rs`),
//! outside the lock, and only then may trimming drop them from memory.
//! Writers never touch the disk and never wait for it: their cost is the
//! memcpy above, plus waking the spiller once when memory crosses the
//! threshold. Should the disk fall behind by the whole hard limit, the
//! oldest pinned bytes are dropped instead (that replica full-syncs). A read or a
//! PSYNC below memory's first byte is served from disk when the disk tier
//! reaches up to memory without a gap. `repl-backlog-disk-size` bounds the
//! disk tier; the oldest segments go past it, and a replica that needed
//! them full-syncs.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::spill::{self, DiskTier, Segment};

thread_local! {
    /// This thread's appends that found a backlog's lock held, and the
    /// nanoseconds they waited.
    static APPEND_WAITED: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// This thread's contended appends to a backlog (the replication feed's or
/// the active stream's) so far: how many, and the nanoseconds waited
/// (benches/inproc.rs).
pub fn append_lock_wait() -> (u64, u64) {
    APPEND_WAITED.with(std::cell::Cell::get)
}

/// Over `size` by this much before trimming (so trimming, which looks at the
/// replicas' positions, runs once per this many bytes, not per write).
const TRIM_SLACK: usize = 64 * 1024;

/// The spiller copies at most this much per lock round trip (a 1 MB
/// memcpy holds writers back for tens of microseconds).
const SPILL_CHUNK: usize = 1 << 20;

/// Memory held for pinned bytes before they spill when the replica hard
/// limit is 0 (unlimited).
const UNCAPPED_SPILL_AT: usize = 128 << 20;

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
    /// Older bytes on disk (empty unless a pinned replica fell behind).
    disk: DiskTier,
    /// Bumped whenever the history restarts, so a spill job copied from
    /// the old one is not recorded in the new.
    gen: u64,
    /// History before this offset was dropped while pinned (past
    /// `repl-backlog-disk-size`, or past the hard limit before the spiller
    /// wrote it): a pin below it is lost and no longer holds bytes back.
    lost_before: u64,
}

impl Inner {
    /// The offset of memory's first byte.
    fn mem_first(&self) -> u64 {
        self.end - self.buf.len() as u64 + 1
    }

    /// Whether the disk tier reaches memory's first byte: only then can
    /// reads go below memory.
    fn disk_joins(&self) -> bool {
        !self.disk.is_empty() && self.disk.next() >= self.mem_first()
    }

    /// The oldest offset a replica can be served from.
    fn first_available(&self) -> u64 {
        if self.disk_joins() {
            self.disk.first()
        } else {
            self.mem_first()
        }
    }

    /// Forgets the history's bytes (memory and disk).
    fn restart(&mut self) {
        self.buf.clear();
        self.db = None;
        self.disk.clear();
        self.gen += 1;
        self.lost_before = 0;
    }
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
    /// The lowest offset a reader still needs (0: none), set by
    /// [`Backlog::set_pin`] only; trimming never drops it unless over
    /// `hard_cap`.
    keep_from: AtomicU64,
    /// Most bytes kept for lagging replicas (`client-output-buffer-limit
    /// replica` hard limit; 0: no limit).
    pub hard_cap: AtomicUsize,
    /// Whether the pin is an attached reader's (else only readers that
    /// left pin it: their bytes go to disk at once).
    pin_attached: AtomicBool,
    /// repl-backlog-disk-size when the policy is `spill`, else 0 (no disk
    /// tier).
    pub disk_max: AtomicU64,
    /// Bytes of history dropped from disk past `disk_max`, and failed
    /// spill writes (INFO).
    pub disk_dropped: AtomicU64,
    pub spill_errors: AtomicU64,
    /// The spiller was asked to run and has not started yet.
    spill_wanted: AtomicBool,
    spiller: OnceLock<std::thread::Thread>,
    /// Where segment files go (the server's `dir` when the first replica
    /// attached).
    spill_dir: Mutex<std::path::PathBuf>,
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
            g.restart();
        }
        g.size = size.max(16 * 1024);
    }

    /// Frees the history (repl-backlog-ttl passed without replicas).
    pub fn deactivate(&self) {
        let mut g = self.inner.lock();
        g.active = false;
        g.restart();
        g.buf = VecDeque::new();
    }

    /// Drops the history and restarts at `offset` (a replica that loaded
    /// its master's snapshot, or a new replication id).
    pub fn reset_to(&self, offset: u64) {
        let mut g = self.inner.lock();
        g.restart();
        g.end = offset;
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
        (g.mem_first(), g.buf.len() as u64)
    }

    /// The disk tier's (first offset, bytes); (0, 0) when empty.
    pub fn disk_range(&self) -> (u64, u64) {
        let g = self.inner.lock();
        match g.disk.is_empty() {
            true => (0, 0),
            false => (g.disk.first(), g.disk.bytes()),
        }
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
            let mut g = self.lock_appending();
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
        let mut g = self.lock_appending();
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
        let mut g = self.lock_appending();
        if g.active {
            self.push_locked(&mut g, bytes);
        } else {
            // Nobody reads it, but the offset still counts (a replica's
            // master_repl_offset follows its master's).
            g.end += bytes.len() as u64;
            self.end.store(g.end, Release);
        }
    }

    /// The buffer's lock for a writer's append, its contended takes
    /// counted per thread ([`append_lock_wait`]).
    #[inline]
    fn lock_appending(&self) -> parking_lot::MutexGuard<'_, Inner> {
        crate::keyspace::held::lock_tallied(&self.inner, &APPEND_WAITED)
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
            if g.buf.len() > self.spill_at(g) && !self.spill_wanted.load(Relaxed) {
                self.wake_spiller();
            }
        }
    }

    /// The lowest offset still to keep (0: none): `keep_from`, unless the
    /// disk bound already dropped history past it.
    fn pin(&self, g: &Inner) -> u64 {
        match self.keep_from.load(Relaxed) {
            0 => 0,
            keep => keep.max(g.lost_before),
        }
    }

    /// Trims the front down to `size`, but never past `keep_from` (the
    /// lowest offset a replica still needs) unless those bytes are on disk
    /// or memory would hold more than `hard_cap` bytes. Disk segments
    /// nobody needs go too.
    fn trim_locked(&self, g: &mut Inner) {
        let len = g.buf.len();
        let first = g.mem_first();
        let mut drop = len.saturating_sub(g.size);
        let keep = self.pin(g);
        if keep != 0 {
            let cap = match self.hard_cap.load(Relaxed) {
                0 => usize::MAX,
                c => c.max(g.size),
            };
            let kept_from = match g.disk_joins() && keep >= g.disk.first() {
                true => keep.max(g.disk.next()),
                false => keep,
            };
            let needed = kept_from.saturating_sub(first) as usize;
            drop = drop.min(needed).max(len.saturating_sub(cap));
            if drop > needed && self.disk_max.load(Relaxed) != 0 {
                // Pinned bytes not yet on disk went (the disk fell behind
                // the writers by the whole hard limit): writers come first,
                // the replica that needed them will full-sync.
                g.lost_before = first + drop as u64;
                crate::log_warning!(
                    "Replication backlog over the replica hard limit with bytes not yet on disk: dropped history before offset {}; a replica that still needed it will full-sync",
                    g.lost_before
                );
            }
        }
        g.buf.drain(..drop.min(len));
        if keep == 0 || (!g.disk.is_empty() && !g.disk_joins()) {
            g.disk.clear();
        } else {
            g.disk.drop_before(keep);
        }
    }

    /// Pins the history for its readers, the one place the policy lives
    /// (the master's replicas, `master/pin.rs`; active peers,
    /// `Active::pin`): trimming keeps every byte from the lowest offset a
    /// reader still needs, of those attached (`attached`, the lowest of
    /// theirs; None: no reader is attached) and of those that left and may
    /// come back (`departed`). While an attached reader pins, its bytes
    /// stay in memory up to a quarter of the hard limit; departed readers'
    /// go to disk at once (`spill_at`). Returns whether the pin moved (the
    /// caller trims).
    pub fn set_pin(&self, attached: Option<u64>, departed: Option<u64>) -> bool {
        let keep = match (attached, departed) {
            (Some(a), Some(d)) => a.min(d),
            (a, d) => a.or(d).unwrap_or(0),
        };
        self.pin_attached.store(attached.is_some(), Relaxed);
        self.keep_from.swap(keep, Release) != keep
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
        let first = g.mem_first();
        if from < first && g.active && g.disk_joins() {
            // Below memory: from disk, outside the lock.
            let at = g.disk.locate(from).ok_or(OutOfRange)?;
            drop(g);
            return at.read_into(max, out).map_err(|e| {
                crate::log_warning!("Could not read the replication backlog from disk: {e}");
                OutOfRange
            });
        }
        if from < first || from > g.end + 1 || (!g.active && from != g.end + 1) {
            return Err(OutOfRange);
        }
        let skip = (from - first) as usize;
        let n = (g.buf.len() - skip).min(max);
        copy_out(&g.buf, skip, n, out);
        Ok(n)
    }

    /// Whether a replica may continue from offset `from` (PSYNC).
    /// The offsets a reader can be served from now: the oldest kept (in
    /// memory or on disk) and the end (for the log line that says why a
    /// position could not be continued).
    pub fn served_range(&self) -> (u64, u64) {
        let g = self.inner.lock();
        (g.first_available(), g.end)
    }

    pub fn can_continue_from(&self, from: u64) -> bool {
        let g = self.inner.lock();
        g.active && from >= g.first_available() && from <= g.end + 1
    }

    /// Wakes feeders if anything was appended since the last call.
    pub fn wake_if_dirty(&self) {
        if self.dirty.load(Relaxed) && self.dirty.swap(false, Relaxed) {
            self.wake.notify_waiters();
        }
    }
}

/// Appends `buf[skip .. skip + n]` to `out`, as at most two memcpys.
fn copy_out(buf: &VecDeque<u8>, skip: usize, n: usize, out: &mut Vec<u8>) {
    let (a, b) = buf.as_slices();
    let stop = skip + n;
    if skip < a.len() {
        out.extend_from_slice(&a[skip..stop.min(a.len())]);
    }
    if stop > a.len() {
        out.extend_from_slice(&b[skip.saturating_sub(a.len())..stop - a.len()]);
    }
}

// ------------------------------------------------------------ the spiller

/// What one spill round writes: `bytes` (in the caller's buffer) go to
/// offset `from`, appended to `tail` (file, position) or, when None, into a
/// new segment.
struct SpillJob {
    gen: u64,
    from: u64,
    tail: Option<(Arc<std::fs::File>, u64)>,
}

impl Backlog {
    /// Starts the spiller thread, once (the first replica attached), with
    /// its segments in `dir` (the server's working directory: `dir`).
    pub fn start_spiller(self: &Arc<Self>, dir: &std::path::Path) {
        *self.spill_dir.lock() = std::path::absolute(dir).unwrap_or_else(|_| dir.into());
        self.spiller.get_or_init(|| {
            spill::remove_stale_files(dir);
            let b = self.clone();
            std::thread::Builder::new()
                .name("repl-spill".into())
                .spawn(move || b.spill_loop())
                .expect("spawn the backlog's spill thread")
                .thread()
                .clone()
        });
    }

    fn wake_spiller(&self) {
        if !self.spill_wanted.swap(true, Relaxed) {
            if let Some(t) = self.spiller.get() {
                t.unpark();
            }
        }
    }

    /// Memory held past which pinned bytes go to disk (usize::MAX: no
    /// disk tier). While the pinning replica is attached, a quarter of the
    /// hard limit: a healthy replica's unacknowledged bytes stay in memory,
    /// and the spiller has the other three quarters of headroom before
    /// the hard limit would drop what it has not written yet.
    fn spill_at(&self, g: &Inner) -> usize {
        if self.disk_max.load(Relaxed) == 0 || self.keep_from.load(Relaxed) == 0 {
            return usize::MAX;
        }
        if !self.pin_attached.load(Relaxed) {
            return g.size + TRIM_SLACK;
        }
        match self.hard_cap.load(Relaxed) {
            0 => UNCAPPED_SPILL_AT,
            cap => cap / 4,
        }
        .max(g.size + TRIM_SLACK)
    }

    fn spill_loop(&self) {
        let mut buf = Vec::new();
        loop {
            std::thread::park_timeout(Duration::from_millis(500));
            self.spill_wanted.store(false, Relaxed);
            while self.spill_once(&mut buf) {}
        }
    }

    /// Writes one chunk of pinned bytes to disk; false when there is
    /// nothing to write (or the write failed).
    fn spill_once(&self, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        let Some(job) = self.plan_spill(&mut self.inner.lock(), buf) else {
            return false;
        };
        let written = match &job.tail {
            Some((file, pos)) => spill::write_at(file, buf, *pos).map(|()| None),
            None => Segment::create(&self.spill_dir.lock().clone(), job.from)
                .and_then(|seg| spill::write_at(seg.file(), buf, 0).map(|()| Some(seg))),
        };
        match written {
            Ok(seg) => {
                let mut g = self.inner.lock();
                self.record_spill(&mut g, job, seg, buf.len() as u64);
                true
            }
            Err(e) => {
                self.spill_errors.fetch_add(1, Relaxed);
                crate::log_warning!(
                    "Could not write the replication backlog to disk ({e}): lagging replicas are kept in memory up to the replica hard limit"
                );
                std::thread::sleep(Duration::from_secs(1));
                false
            }
        }
    }

    /// The next chunk to spill, copied into `out`: pinned bytes at the
    /// front of memory not yet on disk, while memory is over the spill
    /// threshold, never the newest `size` bytes.
    fn plan_spill(&self, g: &mut Inner, out: &mut Vec<u8>) -> Option<SpillJob> {
        let keep = self.pin(g);
        if !g.active || g.buf.len() <= self.spill_at(g) {
            return None;
        }
        g.disk.drop_before(keep);
        if !g.disk.is_empty() && !g.disk_joins() {
            g.disk.clear();
        }
        let first = g.mem_first();
        let from = match g.disk.is_empty() {
            true => keep.max(first),
            false => g.disk.next(),
        };
        let stop = g.end + 1 - g.size.min(g.buf.len()) as u64;
        let n = stop.saturating_sub(from).min(SPILL_CHUNK as u64) as usize;
        if n == 0 {
            return None;
        }
        copy_out(&g.buf, (from - first) as usize, n, out);
        let tail = if g.disk.is_empty() {
            None
        } else {
            g.disk.open_tail()
        };
        Some(SpillJob {
            gen: g.gen,
            from,
            tail,
        })
    }

    /// Records a written chunk (unless the history moved on meanwhile),
    /// bounds the disk tier and trims what is now on disk from memory.
    fn record_spill(&self, g: &mut Inner, job: SpillJob, seg: Option<Segment>, n: u64) {
        let fits = match g.disk.is_empty() {
            true => seg.is_some(),
            false => g.disk.next() == job.from,
        };
        if g.gen != job.gen || !fits {
            return;
        }
        g.disk.extend(seg, n);
        let next = g.disk.next();
        let lost = g.disk.bound(self.disk_max.load(Relaxed));
        if lost > 0 {
            g.lost_before = if g.disk.is_empty() {
                next
            } else {
                g.disk.first()
            };
            self.disk_dropped.fetch_add(lost, Relaxed);
            crate::log_warning!(
                "Replication backlog on disk reached repl-backlog-disk-size: dropped {lost} bytes of history before offset {}; a replica that still needed them will full-sync",
                g.disk.first()
            );
        }
        self.trim_locked(g);
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

    #[test]
    fn pinned_bytes_move_to_disk_and_are_read_back_across_the_tiers() {
        let dir = std::env::temp_dir().join(format!("backlog-spill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let b = Backlog::default();
        *b.spill_dir.lock() = dir.clone();
        b.activate(16 * 1024);
        b.hard_cap.store(1 << 20, Relaxed);
        b.disk_max.store(64 << 20, Relaxed);
        // A replica that left at offset 1 pins everything from there.
        b.keep_from.store(1, Relaxed);
        let stream: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut buf = Vec::new();
        for chunk in stream.chunks(10_000) {
            b.append_raw(chunk);
            while b.spill_once(&mut buf) {}
        }
        // Memory holds about repl-backlog-size; the rest is on disk, and
        // the two tiers read back as the one stream.
        assert!(b.held() <= 16 * 1024 + TRIM_SLACK + 10_000, "{}", b.held());
        assert_eq!(b.disk_range().0, 1);
        assert!(b.can_continue_from(1));
        let mut out = Vec::new();
        while (out.len() as u64) < b.end() {
            let from = out.len() as u64 + 1;
            assert!(b.read(from, 1 << 20, &mut out).unwrap() > 0);
        }
        assert!(out == stream, "the stream read back differs");
        // Past repl-backlog-disk-size the oldest segments go.
        b.disk_max.store(1, Relaxed);
        b.append_raw(&stream[..100_000]);
        while b.spill_once(&mut buf) {}
        assert!(!b.can_continue_from(1));
        assert!(b.disk_dropped.load(Relaxed) > 0);
        // Nobody pins: the disk tier is emptied and its files removed.
        b.keep_from.store(0, Relaxed);
        b.trim();
        assert_eq!(b.disk_range(), (0, 0));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
