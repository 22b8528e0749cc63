//! The AOF writer: an [`EffectSink`] that appends each write-effect record as
//! a RESP command to an in-memory buffer, and the flushes that move the
//! buffer into the current INCR file.
//!
//! Records arrive while their writer still holds its shard locks, so
//! appending is a short critical section (the `pending` mutex) and never does
//! I/O. The I/O happens in [`Core::flush`], called before a batch's replies
//! reach the socket (group commit, as Redis's beforeSleep) and once a second
//! from the background thread. Flushes serialise on the `file` mutex and take
//! the whole buffer each time, so the file receives records in stream order.
//! Three byte counters make "is my write durable yet?" a load: `appended`
//! (pushed into the buffer), `written` (in the file) and `synced` (fsynced).
//!
//! Active replication (`Core::stamps`, docs/DECISIONS.md 41): each record
//! but SELECT, MULTI and EXEC follows a stamp annotation, `#LV:<stamp>`,
//! the version the write gave its keys, so that loading replays it with
//! that stamp instead of a fresh one. Redis's loaders skip `#` lines (they
//! are how `aof-timestamp-enabled` writes `#TS:`), so Redis still loads
//! such a file; a plain node never writes them. Aux fields an RDB file
//! would carry and that change while the AOF grows (an active node's link
//! positions) are `#AUX:<name> <value>` annotations, written when the
//! server's hooks report a change (`note_aux`, once a second).
//!
//! Lock order: shard locks, then `file`, then `pending`. Flushers never take
//! a shard lock; effect emitters never wait for `file`.
//!
//! A failed write keeps the unwritten bytes at the front of the buffer (a
//! partial write is cut back off the file first), sets `write_err` so new
//! writes are refused with MISCONF, and is retried every second; with
//! `appendfsync always` the process exits instead, as Redis does, since a
//! reply could otherwise acknowledge a write that is not on disk.

use std::cell::Cell;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::effects::{Effect, EffectRef, EffectSink};
use crate::log_warning;
use crate::protocol::request as resp;

pub(crate) const FSYNC_NO: u8 = 0;
pub(crate) const FSYNC_EVERYSEC: u8 = 1;
pub(crate) const FSYNC_ALWAYS: u8 = 2;

/// The annotation that gives the next command of an AOF its stamp.
pub(crate) const STAMP_NOTE: &[u8] = b"#LV:";

/// Appends a stamp annotation: `#LV:<stamp>\r\n`.
pub(crate) fn write_stamp(out: &mut Vec<u8>, stamp: u64) {
    out.extend_from_slice(STAMP_NOTE);
    out.extend_from_slice(stamp.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The annotation carrying an aux field: `#AUX:<name> <value>`.
pub(crate) const AUX_NOTE: &[u8] = b"#AUX:";

/// Appends an aux annotation (`name` and `value` hold no line break).
pub(crate) fn write_aux_note(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(AUX_NOTE);
    out.extend_from_slice(name.as_bytes());
    out.push(b' ');
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The annotation carrying a key's merge state (`effects::MERGE_STATE`).
pub(crate) const MERGE_NOTE: &[u8] = b"#LM:";

/// The annotation continued by the next line (a long merge state).
pub(crate) const MERGE_NOTE_PART: &[u8] = b"#LM+";

/// The longest annotation line we write: Redis reads annotations into a
/// 1024-byte buffer (`AOF_ANNOTATION_LINE_MAX_LEN`), and the rest of a
/// longer line would read as a malformed command.
const NOTE_LINE_MAX: usize = 1000;

/// Appends a merge-state annotation: `#LM:<db> <key hex> <state hex>`,
/// its text cut into `#LM+` lines first where it is long.
pub(crate) fn write_merge_note(out: &mut Vec<u8>, db: usize, key: &[u8], state: &[u8]) {
    let mut text = db.to_string().into_bytes();
    text.push(b' ');
    hex_into(&mut text, key);
    text.push(b' ');
    hex_into(&mut text, state);
    let room = NOTE_LINE_MAX - MERGE_NOTE.len() - 2;
    let mut rest = &text[..];
    while rest.len() > room {
        out.extend_from_slice(MERGE_NOTE_PART);
        out.extend_from_slice(&rest[..room]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[room..];
    }
    out.extend_from_slice(MERGE_NOTE);
    out.extend_from_slice(rest);
    out.extend_from_slice(b"\r\n");
}

fn hex_into(out: &mut Vec<u8>, b: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &c in b {
        out.push(HEX[usize::from(c >> 4)]);
        out.push(HEX[usize::from(c & 15)]);
    }
}

/// The bytes of a lowercase or uppercase hex string (None if it is not).
pub(crate) fn unhex(h: &[u8]) -> Option<Vec<u8>> {
    if !h.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    h.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

thread_local! {
    /// `appended` after the last record this thread emitted.
    static LAST_END: Cell<u64> = const { Cell::new(0) };
}

#[derive(Default)]
struct Pending {
    buf: Vec<u8>,
    /// Database the file's last SELECT chose (None: none yet in this file).
    db: Option<usize>,
    /// Second of the last `#TS:` annotation.
    ts: u64,
}

#[derive(Default)]
struct Output {
    file: Option<Arc<File>>,
    /// Files switched away from whose tail is not fsynced yet.
    retired: Vec<Arc<File>>,
    /// Bytes in `file`.
    size: u64,
}

/// Shared by the sink, the flushers and the rewrite.
#[derive(Default)]
pub struct Core {
    /// Records are appended (AOF on, past its start).
    pub active: AtomicBool,
    /// aof_last_write_status is err: writes are refused.
    pub write_err: AtomicBool,
    pub last_error: Mutex<String>,
    pub timestamps: AtomicBool,
    /// Active replication: each record follows its stamp (`write_stamp`).
    pub stamps: AtomicBool,
    pub policy: AtomicU8,
    pending: Mutex<Pending>,
    out: Mutex<Output>,
    appended: AtomicU64,
    written: AtomicU64,
    synced: AtomicU64,
    /// aof_current_size: base plus incr files.
    pub current_size: AtomicU64,
    /// aof_base_size: at the last rewrite (or start-up).
    pub base_size: AtomicU64,
    /// aof_delayed_fsync: always 0 (writes never wait for a running fsync).
    pub delayed_fsync: AtomicU64,
    /// DEBUG AOF-FLUSH-SLEEP: microseconds to sleep before each write.
    pub flush_sleep_us: AtomicU64,
}

/// Writes all of `data`; returns how much was written, and the error that
/// stopped it.
fn write_counted(file: &File, data: &[u8]) -> (usize, std::io::Result<()>) {
    let mut done = 0;
    while done < data.len() {
        match (&*file).write(&data[done..]) {
            Ok(0) => return (done, Err(std::io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (done, Err(e)),
        }
    }
    (done, Ok(()))
}

impl Output {
    /// Retired files (taken) and the current one.
    fn files_to_sync(&mut self) -> Vec<Arc<File>> {
        let mut v = std::mem::take(&mut self.retired);
        v.extend(self.file.clone());
        v
    }
}

impl EffectSink for Core {
    fn records_merge_state(&self) -> bool {
        self.active.load(Relaxed)
    }

    fn on_effect(&self, e: &EffectRef<'_>) {
        if !self.active.load(Relaxed) || e.repl_only() {
            return;
        }
        self.append_locked(&mut self.pending.lock(), e.db, e.version, e.argv);
    }

    /// Under one lock of the pending buffer: a transaction stays together.
    fn on_effects(&self, effects: &[Effect]) {
        if !self.active.load(Relaxed) {
            return;
        }
        let mut p = self.pending.lock();
        for e in effects.iter().filter(|e| !e.repl_only()) {
            self.append_locked(&mut p, e.db, e.version, &e.argv);
        }
    }
}

impl Core {
    /// Appends one record to the pending buffer (locked by the caller).
    fn append_locked<A: AsRef<[u8]>>(&self, p: &mut Pending, db: usize, version: u64, argv: &[A]) {
        let before = p.buf.len();
        if let [name, key, state] = argv {
            if name.as_ref() == crate::effects::MERGE_STATE {
                write_merge_note(&mut p.buf, db, key.as_ref(), state.as_ref());
                let end = self.appended.load(Relaxed) + (p.buf.len() - before) as u64;
                self.appended.store(end, Release);
                return;
            }
        }
        if self.timestamps.load(Relaxed) {
            let now = crate::keyspace::hlc::unix_ms() / 1000;
            if now != p.ts {
                p.ts = now;
                p.buf.extend_from_slice(format!("#TS:{now}\r\n").as_bytes());
            }
        }
        if p.db != Some(db) {
            p.db = Some(db);
            resp::select(&mut p.buf, db);
        }
        if version != 0 && self.stamps.load(Relaxed) && !is_unit_bound(argv) {
            write_stamp(&mut p.buf, version);
        }
        resp::command(&mut p.buf, argv);
        let end = self.appended.load(Relaxed) + (p.buf.len() - before) as u64;
        self.appended.store(end, Release);
        LAST_END.with(|c| c.set(end));
    }
}

impl Core {
    /// Appends aux annotations after the records buffered so far.
    pub fn note_aux(&self, notes: &[(String, String)]) {
        if notes.is_empty() || !self.active.load(Relaxed) {
            return;
        }
        let mut p = self.pending.lock();
        let before = p.buf.len();
        for (name, value) in notes {
            write_aux_note(&mut p.buf, name, value);
        }
        let end = self.appended.load(Relaxed) + (p.buf.len() - before) as u64;
        self.appended.store(end, Release);
    }
}

/// MULTI and EXEC, which carry no stamp of their own.
fn is_unit_bound<A: AsRef<[u8]>>(argv: &[A]) -> bool {
    matches!(argv, [n] if n.as_ref().eq_ignore_ascii_case(b"multi") || n.as_ref().eq_ignore_ascii_case(b"exec"))
}

impl Core {
    /// Whether this thread's records (and, with `always`, everyone's) are
    /// written, and fsynced with `always`; flushes if not.
    pub fn before_reply(&self) {
        if self.policy.load(Relaxed) == FSYNC_ALWAYS {
            if self.synced.load(Acquire) < self.appended.load(Acquire) {
                self.flush(true);
            }
        } else if self.written.load(Acquire) < LAST_END.with(|c| c.get()) {
            self.flush(false);
        }
    }

    /// Where this thread's last record ends (WAITAOF's local target).
    pub fn my_end(&self) -> u64 {
        LAST_END.with(|c| c.get())
    }

    /// Whether the file is fsynced up to `end`.
    pub fn synced_to(&self, end: u64) -> bool {
        self.synced.load(Acquire) >= end
    }

    /// Bytes buffered, not yet written (aof_buffer_length).
    pub fn buffered(&self) -> usize {
        self.pending.lock().buf.len()
    }

    /// Writes the buffer to the file, and fsyncs it if `sync`.
    pub fn flush(&self, sync: bool) {
        let mut out = self.out.lock();
        let always = self.policy.load(Relaxed) == FSYNC_ALWAYS;
        if let Err(e) = self.write_pending(&mut out) {
            if always {
                log_warning!("Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting...");
                let _ = e;
                std::process::exit(1);
            }
            return;
        }
        if sync {
            let end = self.written.load(Acquire);
            let files = out.files_to_sync();
            if let Err(e) = files.iter().try_for_each(|f| f.sync_data()) {
                self.fsync_failed(&e, always);
                return;
            }
            self.synced.fetch_max(end, Release);
        }
    }

    /// The background thread's once-a-second pass: write what is buffered
    /// (retrying after errors), then fsync outside the file lock with
    /// `everysec`.
    pub fn tick(&self) {
        let policy = self.policy.load(Relaxed);
        if policy == FSYNC_ALWAYS {
            self.flush(true);
            return;
        }
        let (files, end) = {
            let mut out = self.out.lock();
            if self.write_pending(&mut out).is_err() {
                return;
            }
            if policy != FSYNC_EVERYSEC {
                return;
            }
            let files = out.files_to_sync();
            (files, self.written.load(Acquire))
        };
        if self.synced.load(Acquire) >= end && files.len() <= 1 {
            return;
        }
        match files.iter().try_for_each(|f| f.sync_data()) {
            Ok(()) => {
                self.synced.fetch_max(end, Release);
            }
            Err(e) => self.fsync_failed(&e, false),
        }
    }

    fn fsync_failed(&self, e: &std::io::Error, always: bool) {
        if always {
            log_warning!("Can't persist AOF for fsync error when the AOF fsync policy is 'always': {e}. Exiting...");
            std::process::exit(1);
        }
        let text = crate::config::parse::io_error_text(e);
        log_warning!("Fail to fsync the AOF file: {text}");
        *self.last_error.lock() = text;
        self.write_err.store(true, Relaxed);
    }

    /// Moves the buffer into the file. On error the unwritten bytes stay
    /// buffered (ahead of newer ones) and the file is cut back to its last
    /// whole write.
    fn write_pending(&self, out: &mut Output) -> std::io::Result<()> {
        let (mut data, end) = {
            let mut p = self.pending.lock();
            (std::mem::take(&mut p.buf), self.appended.load(Acquire))
        };
        let Some(file) = out.file.clone() else {
            // AOF is off: nothing to write to (a stop flushed first).
            self.written.fetch_max(end, Release);
            self.synced.fetch_max(end, Release);
            return Ok(());
        };
        if data.is_empty() {
            return Ok(());
        }
        let sleep = self.flush_sleep_us.load(Relaxed);
        if sleep > 0 {
            std::thread::sleep(std::time::Duration::from_micros(sleep));
        }
        let (done, res) = write_counted(&file, &data);
        match res {
            Ok(()) => {
                out.size += data.len() as u64;
                self.current_size.fetch_add(data.len() as u64, Relaxed);
                self.written.store(end, Release);
                if self.write_err.swap(false, Relaxed) {
                    log_warning!("AOF write error looks solved, Redis can write again.");
                }
                Ok(())
            }
            Err(e) => {
                if done > 0 && file.set_len(out.size).is_err() {
                    // The partial write stays: count it as written.
                    out.size += done as u64;
                    self.current_size.fetch_add(done as u64, Relaxed);
                    data.drain(..done);
                }
                let mut p = self.pending.lock();
                data.extend_from_slice(&p.buf);
                p.buf = data;
                drop(p);
                let text = crate::config::parse::io_error_text(&e);
                if !self.write_err.swap(true, Relaxed) {
                    log_warning!("Error writing to the AOF file: {text}");
                }
                *self.last_error.lock() = text;
                Err(e)
            }
        }
    }

    /// Starts appending to `file` (holding `size` bytes) from now on; the
    /// buffer goes to the previous file first. Err if that write failed
    /// (the buffer then stays, to go to the new file).
    pub fn switch_to(&self, file: File, size: u64) -> std::io::Result<()> {
        let mut out = self.out.lock();
        let r = self.write_pending(&mut out);
        if let Some(old) = out.file.take() {
            out.retired.push(old);
        }
        out.file = Some(Arc::new(file));
        out.size = size;
        self.pending.lock().db = None;
        r
    }

    /// Stops appending: flushes and fsyncs, then closes the file.
    pub fn close(&self) {
        self.flush(true);
        self.active.store(false, Relaxed);
        self.flush(true);
        let mut out = self.out.lock();
        out.file = None;
        out.retired.clear();
        self.pending.lock().db = None;
    }

    /// Size of the file being appended to.
    pub fn incr_size(&self) -> u64 {
        self.out.lock().size
    }

    /// Whether an incr file is open for appending (the AOF is on).
    pub fn is_open(&self) -> bool {
        self.out.lock().file.is_some()
    }
}
