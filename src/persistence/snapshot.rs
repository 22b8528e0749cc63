//! Point-in-time snapshots of the whole keyspace, written while writes go on,
//! without fork (BGSAVE, SAVE, AOF rewrite, DEBUG RELOAD).
//!
//! The mechanism is described in `keyspace/snap.rs`: at the cut every shard
//! is locked at once and marked; then serializer threads walk the shards a
//! batch at a time (each batch under its shard's lock, a few hundred
//! microseconds at most) while commands that touch a key the snapshot has
//! not taken yet hand it over first ([`Preserved`]). The coordinator thread
//! writes what the serializers produce, in any order within a database
//! (RDB does not order keys), computes the checksum, syncs the file and
//! renames it over the target, so a crash mid-save never damages the
//! previous file.
//!
//! Serializing uses `threads` threads (all cores for SAVE, which a client
//! waits for; half of them for BGSAVE, which runs beside the traffic).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::{mpsc, Arc};

use parking_lot::Mutex;

use super::rdb::encode::{self, FileWriter, KeyMeta, SaveOpts};
use super::rdb::{AUX_FLUSHED, AUX_MERGE, AUX_TOMBSTONES, AUX_VERSIONS, TOMBSTONES_PER_AUX};
use super::rdb::{AUX_SUBEXPIRE_KEY, AUX_SUBEXPIRE_WHEN};
use crate::keyspace::member_ttl::{has_member, MemberTtls};
use crate::keyspace::snap::SnapSink;
use crate::keyspace::{Entry, SHARDS};
use crate::persistence::Host;

/// Stop a batch once its serialized bytes pass this (bounds lock hold time
/// and the memory in flight).
const BATCH_BYTES: usize = 256 * 1024;
/// Most keys per batch.
const BATCH_KEYS: usize = 512;

/// The file a snapshot writes: an RDB file, or an AOF base of commands
/// (a rewrite with `aof-use-rdb-preamble no`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapFormat {
    Rdb,
    Aof,
}

/// How a snapshot writes entries: its format, the RDB options, and
/// whether it keeps active replication's stamps in the AOF form (each
/// command after a stamp annotation, see `aof/writer.rs`).
/// An entry's member TTLs, if it has any.
type Ttls<'a> = Option<&'a MemberTtls>;

#[derive(Clone, Copy)]
struct Form {
    format: SnapFormat,
    opts: SaveOpts,
    active: bool,
}

impl Form {
    /// One entry: an RDB record (its version goes in the batch's aux
    /// field, see `versions`), or the commands that rebuild it; then its
    /// member TTLs, if any (KeyDB's aux pairs, or PEXPIREMEMBERAT).
    fn entry(&self, out: &mut Vec<u8>, versions: &mut Vec<u8>, e: &Entry, ttls: Ttls) {
        match self.format {
            SnapFormat::Rdb => {
                versions.extend_from_slice(&e.version.to_le_bytes());
                encode::encode_entry(out, e, &self.opts);
            }
            SnapFormat::Aof => {
                let stamp = self.active.then_some(e.version);
                crate::persistence::aof::rewrite::encode_entry_commands(out, e, stamp)
            }
        }
        if let Some(t) = ttls {
            self.member_ttls(out, e, t);
        }
    }

    /// The member TTLs of `e` whose members it holds.
    fn member_ttls(&self, out: &mut Vec<u8>, e: &Entry, t: &MemberTtls) {
        for (m, at) in t.iter().filter(|(m, _)| has_member(&e.value, m)) {
            let at = at.to_string();
            match self.format {
                SnapFormat::Rdb => {
                    encode::write_aux(out, AUX_SUBEXPIRE_KEY, m);
                    encode::write_aux(out, AUX_SUBEXPIRE_WHEN, at.as_bytes());
                }
                SnapFormat::Aof => {
                    let argv: [&[u8]; 4] = [b"PEXPIREMEMBERAT", &e.key, m, at.as_bytes()];
                    crate::protocol::request::command(out, &argv);
                }
            }
        }
    }

    /// Active replication: a database's flush stamp (after its SELECT,
    /// before its keys: in the AOF form a stamped FLUSHDB, which must not
    /// come after them).
    fn flushed(&self, out: &mut Vec<u8>, stamp: u64) {
        match self.format {
            SnapFormat::Rdb => encode::write_aux(out, AUX_FLUSHED, stamp.to_string().as_bytes()),
            SnapFormat::Aof => {
                crate::persistence::aof::writer::write_stamp(out, stamp);
                crate::protocol::request::command(out, &[&b"FLUSHDB"[..]]);
            }
        }
    }

    /// Active replication: tombstones (after the database's keys): aux
    /// fields of [`TOMBSTONES_PER_AUX`] bytes, or a stamped `DEL` each (the
    /// AOF loader turns a stamped DEL of an absent key into a tombstone;
    /// Redis does nothing with it).
    fn tombstones<'a>(&self, out: &mut Vec<u8>, ts: impl Iterator<Item = (&'a [u8], u64)>) {
        let mut value = Vec::new();
        for (key, stamp) in ts {
            match self.format {
                SnapFormat::Rdb => {
                    encode::push_tombstone(&mut value, key, stamp);
                    if value.len() >= TOMBSTONES_PER_AUX {
                        encode::write_aux(out, AUX_TOMBSTONES, &value);
                        value.clear();
                    }
                }
                SnapFormat::Aof => {
                    crate::persistence::aof::writer::write_stamp(out, stamp);
                    crate::protocol::request::command(out, &[&b"DEL"[..], key]);
                }
            }
        }
        if !value.is_empty() {
            encode::write_aux(out, AUX_TOMBSTONES, &value);
        }
    }
}

impl Form {
    /// Active replication: the merge states of a shard's keys that merge
    /// (`keyspace/merge/`), each as of the key's version now, in
    /// [`AUX_MERGE`] fields (RDB) or `#LM:` annotations (AOF form).
    fn merge_states(
        &self,
        out: &mut Vec<u8>,
        (ks, db): (&crate::keyspace::Keyspace, usize),
        g: &mut crate::keyspace::Shard,
    ) {
        let (mut value, mut state) = (Vec::new(), Vec::new());
        for key in g.merge_keys() {
            let answered = g.answered(&key);
            let Some(m) = g.merge_meta_now(ks.slot(&key).hash, &key) else {
                continue;
            };
            state.clear();
            m.encode_stored(answered, &mut state);
            if self.format == SnapFormat::Aof {
                crate::persistence::aof::writer::write_merge_note(out, db, &key, &state);
                continue;
            }
            encode::push_merge_state(&mut value, &key, &state);
            if value.len() >= TOMBSTONES_PER_AUX {
                encode::write_aux(out, AUX_MERGE, &value);
                value.clear();
            }
        }
        if !value.is_empty() {
            encode::write_aux(out, AUX_MERGE, &value);
        }
    }
}

impl SnapFormat {
    /// A batch: the versions aux field (RDB), then the entries' bytes.
    fn batch(out: &mut Vec<u8>, versions: &[u8], body: &[u8]) {
        if !versions.is_empty() {
            encode::write_aux(out, AUX_VERSIONS, versions);
        }
        out.extend_from_slice(body);
    }

    fn select_db(self, out: &mut Vec<u8>, db: usize, keys: usize, volatile: usize) {
        match self {
            SnapFormat::Rdb => encode::write_select_db(out, db, keys as u64, volatile as u64),
            SnapFormat::Aof => crate::persistence::aof::rewrite::encode_select(out, db),
        }
    }
}

/// What a snapshot is for.
pub struct SnapshotJob {
    pub format: SnapFormat,
    /// Final file name (relative to `dir`); written under a temporary name
    /// first, then renamed. Unused when `stream` is given.
    pub path: PathBuf,
    /// Write the snapshot into this instead of a file (a diskless full
    /// sync's socket pipe): no temp file, no fsync, no rename.
    pub stream: Option<Box<dyn Write + Send>>,
    /// Runs while every shard is locked: the instant the snapshot captures
    /// (the AOF switches to a new incremental file there).
    pub at_cut: Option<Box<dyn FnOnce() + Send>>,
    /// Called on the coordinator thread with the bytes written or the error.
    pub done: Box<dyn FnOnce(io::Result<u64>) + Send>,
    /// Serializer threads.
    pub threads: usize,
    /// Extra aux fields (e.g. `aof-base`).
    pub aux: Vec<(String, String)>,
}

#[derive(Debug)]
pub enum SnapshotError {
    /// Another snapshot is running (one at a time, as Redis's one child).
    Busy,
    /// No thread could be started for it (Redis's fork failure).
    Spawn(io::Error),
}

/// Whether a snapshot runs, and how far it is (INFO's
/// current_save_keys_processed / _total).
#[derive(Default)]
pub struct SnapshotState {
    running: AtomicBool,
    /// Set by [`abort`]: the writer gives up instead of renaming.
    aborted: AtomicBool,
    /// `rdb-key-save-delay` (microseconds per key, for tests).
    key_delay_us: AtomicUsize,
    pub keys_total: AtomicUsize,
    pub keys_done: AtomicUsize,
    /// The running snapshot feeds replicas (a BGSAVE for INFO's
    /// rdb_bgsave_in_progress, as Redis's replication child is one).
    pub for_replicas: AtomicBool,
}

impl SnapshotState {
    pub fn running(&self) -> bool {
        self.running.load(Acquire)
    }
}

/// Entries handed over by commands about to change them, serialized per
/// database of the cut, until the coordinator writes them out.
struct Preserved {
    bufs: Vec<Mutex<Vec<u8>>>,
    /// Entries in `bufs` (rdb-key-save-delay paces them too).
    keys: AtomicUsize,
    form: Form,
    /// Active replication: each database's flush stamp and tombstones at
    /// the cut, in the snapshot's format (empty otherwise).
    deletions: Mutex<Vec<Deletions>>,
}

/// What a database's deletions add to a snapshot (active replication):
/// `head` right after its SELECT, `tail` after its keys.
#[derive(Default)]
struct Deletions {
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Deletions {
    fn is_empty(&self) -> bool {
        self.head.is_empty() && self.tail.is_empty()
    }
}

impl SnapSink for Preserved {
    fn preserve(&self, db: usize, e: &Entry, ttls: Ttls) {
        let (mut versions, mut body) = (Vec::new(), Vec::new());
        self.form.entry(&mut body, &mut versions, e, ttls);
        SnapFormat::batch(&mut self.bufs[db].lock(), &versions, &body);
        self.keys.fetch_add(1, Relaxed);
    }
}

/// The save options the configuration asks for.
pub(crate) fn save_opts(srv: &impl Host) -> SaveOpts {
    let compress = srv.core().config.read().get_bool("rdbcompression");
    let now_lru = crate::commands::access::lru_clock(crate::keyspace::hlc::unix_ms());
    let ev = &srv.core().hot.eviction;
    let policy = ev.policy();
    let meta = if policy.is_lfu() {
        KeyMeta::Freq {
            now_lru,
            decay_minutes: ev.lfu_decay_time(),
        }
    } else if policy.is_lru() {
        KeyMeta::Idle { now_lru }
    } else {
        KeyMeta::None
    };
    SaveOpts { compress, meta }
}

/// Takes the cut and starts the background writer.
pub fn start<H: Host>(srv: &Arc<H>, job: SnapshotJob) -> Result<(), SnapshotError> {
    let state = &srv.persist().snapshot;
    if state.running.swap(true, AcqRel) {
        return Err(SnapshotError::Busy);
    }
    state.aborted.store(false, Relaxed);
    let delay = srv
        .core()
        .config
        .read()
        .get_i64("rdb-key-save-delay")
        .max(0) as usize;
    state.key_delay_us.store(delay, Relaxed);
    let opts = save_opts(srv);
    let ndb = srv.core().keyspace.num_dbs();
    let preserved = Arc::new(Preserved {
        bufs: (0..ndb).map(|_| Mutex::new(Vec::new())).collect(),
        keys: AtomicUsize::new(0),
        form: Form {
            format: job.format,
            opts,
            active: srv.core().active,
        },
        deletions: Mutex::new(Vec::new()),
    });
    let (sizes, repl_aux) = cut(srv, &preserved, job.at_cut);
    let total: usize = sizes.iter().map(|s| s.0).sum();
    state.keys_total.store(total, Relaxed);
    state.keys_done.store(0, Relaxed);
    let checksum = srv.core().config.read().get_bool("rdbchecksum");
    let writer_srv = srv.clone();
    let spawned = std::thread::Builder::new()
        .name("lattice-save".into())
        .spawn(move || {
            let srv = writer_srv;
            let mut aux = job.aux;
            aux.extend(repl_aux);
            let header = header_bytes(&srv, job.format, &aux);
            // A panic (a bug) fails this snapshot, not every later one: the
            // state below must be cleared whatever happens.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match job.stream {
                Some(out) => {
                    let what = (out, &header[..], &sizes[..]);
                    write_stream(&srv, what, &preserved, checksum, job.threads)
                }
                None => {
                    let files = (job.path.as_path(), &header[..], &sizes[..]);
                    write_file(&srv, files, &preserved, checksum, job.threads)
                }
            }))
            .unwrap_or_else(|_| {
                crate::log_warning!("The snapshot writer panicked: snapshot failed");
                Err(io::Error::other("the snapshot writer panicked"))
            });
            // Should the write have failed midway, drop what shards still hold.
            finish_cut(&srv);
            srv.persist().snapshot.running.store(false, Release);
            (job.done)(r);
        });
    if let Err(e) = spawned {
        finish_cut(srv);
        state.running.store(false, Release);
        return Err(SnapshotError::Spawn(e));
    }
    Ok(())
}

/// Locks everything, marks every shard, runs `at_cut`; returns each
/// database's (keys, volatile keys) at the cut, and the aux fields of that
/// instant (`replication::save_info`, an active node's link positions),
/// those an AOF base carries as annotations for the AOF form.
fn cut(
    srv: &impl Host,
    sink: &Arc<Preserved>,
    at_cut: Option<Box<dyn FnOnce() + Send>>,
) -> (Vec<(usize, usize)>, AuxFields) {
    // A replica applies a command and counts its bytes under this lock:
    // the offset saved matches the data saved.
    let _applying = srv.replica_apply_lock();
    let mut all = srv.core().keyspace.lock_everything();
    let (sink_form, sink_deletions) = (sink.form, &sink.deletions);
    let sink: Arc<dyn SnapSink> = sink.clone();
    let mut sizes = Vec::with_capacity(all.len());
    let mut deletions = Vec::new();
    for (db, shards) in all.iter_mut().enumerate() {
        let (mut keys, mut volatile) = (0, 0);
        for g in shards.iter_mut() {
            keys += g.len();
            volatile += g.volatile_len();
            g.snap_begin(db, sink.clone());
        }
        sizes.push((keys, volatile));
        if srv.core().active {
            // Copied here, at the instant the keys are cut: a tombstone
            // comes and goes with its key, so a later copy could hold a
            // key and its tombstone both, or neither.
            let mut d = Deletions::default();
            let flushed = shards.iter().map(|g| g.flushed_at()).max().unwrap_or(0);
            if flushed > 0 {
                sink_form.flushed(&mut d.head, flushed);
            }
            for g in shards.iter() {
                sink_form.tombstones(&mut d.tail, g.tombstones());
            }
            for g in shards.iter_mut() {
                sink_form.merge_states(&mut d.tail, (&srv.core().keyspace, db), g);
            }
            deletions.push(d);
        }
    }
    *sink_deletions.lock() = deletions;
    if let Some(f) = at_cut {
        f();
    }
    let aux = match sink_form.format {
        SnapFormat::Rdb => srv.rdb_aux(),
        SnapFormat::Aof => srv.aof_notes(true),
    };
    (sizes, aux)
}

/// Stops the running snapshot (FLUSHALL stops a BGSAVE, as Redis kills its
/// child): the marks go at once, so the flush does not hand every key over,
/// and the writer fails with `Interrupted` instead of renaming.
pub(crate) fn abort(srv: &impl Host) {
    srv.persist().snapshot.aborted.store(true, Relaxed);
    finish_cut(srv);
}

/// Clears any snapshot marks left (after a failed write).
fn finish_cut(srv: &impl Host) {
    for db in 0..srv.core().keyspace.num_dbs() {
        for s in 0..SHARDS {
            srv.core().keyspace.db(db).lock(s).snap_abort();
        }
    }
}

/// RDB: magic, version and aux fields, as Redis's rdbSaveInfoAuxFields.
/// AOF: the timestamp annotation when `aof-timestamp-enabled`, then the
/// aux annotations (`extra`).
fn header_bytes(srv: &impl Host, format: SnapFormat, extra: &[(String, String)]) -> Vec<u8> {
    let mut h = Vec::new();
    if format == SnapFormat::Aof {
        if srv.core().config.read().get_bool("aof-timestamp-enabled") {
            let now = crate::keyspace::hlc::unix_ms() / 1000;
            h.extend_from_slice(format!("#TS:{now}\r\n").as_bytes());
        }
        for (k, v) in extra {
            crate::persistence::aof::writer::write_aux_note(&mut h, k, v);
        }
        // The FUNCTION libraries, as Redis's rewriteFunctions writes them.
        for code in crate::scripting::function_code(srv.core()) {
            h.extend_from_slice(
                format!("*3\r\n$8\r\nFUNCTION\r\n$4\r\nLOAD\r\n${}\r\n", code.len()).as_bytes(),
            );
            h.extend_from_slice(&code);
            h.extend_from_slice(b"\r\n");
        }
        return h;
    }
    encode::write_header(&mut h);
    let now = crate::keyspace::hlc::unix_ms() / 1000;
    let used = crate::alloc::allocated_bytes().unwrap_or(0);
    let aux: [(&str, String); 5] = [
        ("redis-ver", crate::REDIS_VERSION.to_string()),
        ("redis-bits", (usize::BITS).to_string()),
        ("ctime", now.to_string()),
        ("used-mem", used.to_string()),
        ("lattice-ver", crate::LATTICE_VERSION.to_string()),
    ];
    for (k, v) in aux.iter() {
        encode::write_aux(&mut h, k.as_bytes(), v.as_bytes());
    }
    for (k, v) in extra {
        encode::write_aux(&mut h, k.as_bytes(), v.as_bytes());
    }
    if !extra.iter().any(|(k, _)| k == "aof-base") {
        encode::write_aux(&mut h, b"aof-base", b"0");
    }
    // The FUNCTION libraries, after the aux fields (Redis's rdbSaveFunctions).
    for code in crate::scripting::function_code(srv.core()) {
        encode::write_function(&mut h, &code, true);
    }
    h
}

/// Each database's (keys, volatile keys) at the cut.
type DbSizes = [(usize, usize)];
/// RDB aux fields (name, value).
type AuxFields = Vec<(String, String)>;

/// Writes the snapshot into `out` (diskless replication); returns the bytes.
fn write_stream<H: Host>(
    srv: &Arc<H>,
    (out, header, sizes): (Box<dyn Write + Send>, &[u8], &DbSizes),
    preserved: &Preserved,
    checksum: bool,
    threads: usize,
) -> io::Result<u64> {
    let rdb = preserved.form.format == SnapFormat::Rdb;
    let mut w = FileWriter::new(BufWriter::with_capacity(1 << 16, out), checksum && rdb);
    write_body(srv, &mut w, (header, sizes), preserved, threads)?;
    let n = w.written + if rdb { 9 } else { 0 }; // EOF opcode and CRC
    let mut w = if rdb { w.finish()? } else { w.into_inner() };
    w.flush()?;
    Ok(n)
}

/// The header, then each database's keys; fails if the snapshot was aborted.
fn write_body<W: Write, H: Host>(
    srv: &Arc<H>,
    w: &mut FileWriter<W>,
    (header, sizes): (&[u8], &[(usize, usize)]),
    preserved: &Preserved,
    threads: usize,
) -> io::Result<()> {
    w.write(header)?;
    let deletions = std::mem::take(&mut *preserved.deletions.lock());
    for (db, &(keys, volatile)) in sizes.iter().enumerate() {
        let del = deletions.get(db).filter(|d| !d.is_empty());
        if keys == 0 && del.is_none() {
            continue;
        }
        let mut sel = Vec::new();
        preserved
            .form
            .format
            .select_db(&mut sel, db, keys, volatile);
        w.write(&sel)?;
        if let Some(d) = del {
            w.write(&d.head)?;
        }
        if keys > 0 {
            write_db(srv, db, w, preserved, threads)?;
        }
        if let Some(d) = del {
            w.write(&d.tail)?;
        }
    }
    if srv.persist().snapshot.aborted.load(Relaxed) {
        return Err(io::Error::new(
            io::ErrorKind::Interrupted,
            "snapshot aborted",
        ));
    }
    Ok(())
}

/// Writes the temporary file, syncs it and renames it to `path`.
/// `what`: the target path, the header bytes, each database's (keys,
/// volatile keys) at the cut.
fn write_file<H: Host>(
    srv: &Arc<H>,
    what: (&Path, &[u8], &[(usize, usize)]),
    preserved: &Preserved,
    checksum: bool,
    threads: usize,
) -> io::Result<u64> {
    let (path, header, sizes) = what;
    let tmp = temp_name(path);
    let r = (|| {
        let f = File::create(&tmp)?;
        let rdb = preserved.form.format == SnapFormat::Rdb;
        let mut w = FileWriter::new(BufWriter::with_capacity(1 << 20, f), checksum && rdb);
        write_body(srv, &mut w, (header, sizes), preserved, threads)?;
        let w = if rdb { w.finish()? } else { w.into_inner() };
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        Ok(f.metadata()?.len())
    })();
    match r {
        Ok(n) => {
            std::fs::rename(&tmp, path)?;
            sync_dir(path);
            Ok(n)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// `temp-<pid>-<n>.rdb` beside the target.
fn temp_name(path: &Path) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, Relaxed);
    let name = format!("temp-{}-{n}.rdb", std::process::id());
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.join(name),
        _ => PathBuf::from(name),
    }
}

/// Makes the rename durable.
fn sync_dir(path: &Path) {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// One database's keys: serializer threads take shards from a shared
/// counter and send batches; this thread writes them, and the entries
/// commands handed over meanwhile.
fn write_db<W: Write, H: Host>(
    srv: &Arc<H>,
    db: usize,
    w: &mut FileWriter<W>,
    preserved: &Preserved,
    threads: usize,
) -> io::Result<()> {
    let next = AtomicUsize::new(0);
    let threads = threads.max(1);
    let (tx, rx) = mpsc::sync_channel::<(usize, Vec<u8>)>(threads * 4);
    let form = preserved.form;
    std::thread::scope(|scope| -> io::Result<()> {
        for _ in 0..threads {
            let tx = tx.clone();
            let next = &next;
            let srv = &**srv;
            let form = &form;
            scope.spawn(move || serialize_shards(srv, db, next, form, &tx));
        }
        drop(tx);
        let mut result = Ok(());
        for (keys, chunk) in rx {
            if result.is_ok() {
                pace(srv, keys);
                result = w
                    .write(&chunk)
                    .and_then(|_| flush_preserved(srv, w, preserved, db));
            }
            if result.is_err() {
                // Stop the serializers: they finish their shard marks below.
                next.store(SHARDS, Relaxed);
            }
        }
        result?;
        flush_preserved(srv, w, preserved, db)
    })
}

fn flush_preserved<W: Write, H: Host>(
    srv: &H,
    w: &mut FileWriter<W>,
    p: &Preserved,
    db: usize,
) -> io::Result<()> {
    let taken = std::mem::take(&mut *p.bufs[db].lock());
    if taken.is_empty() {
        return Ok(());
    }
    pace(srv, p.keys.swap(0, Relaxed));
    w.write(&taken)
}

/// `rdb-key-save-delay`: the writer spends that many microseconds per key
/// it writes, whether a serializer or a command handed the key over (so a
/// test can stretch a save as Redis's child does, writes or not).
fn pace(srv: &impl Host, keys: usize) {
    let state = &srv.persist().snapshot;
    let delay = state.key_delay_us.load(Relaxed) as u64;
    if delay == 0 || keys == 0 {
        return;
    }
    let until = std::time::Instant::now() + std::time::Duration::from_micros(delay * keys as u64);
    // In steps, so an aborted snapshot ends soon.
    while !state.aborted.load(Relaxed) {
        let now = std::time::Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(std::time::Duration::from_millis(100)));
    }
}

/// A serializer thread: whole shards, batch by batch.
fn serialize_shards(
    srv: &impl Host,
    db: usize,
    next: &AtomicUsize,
    form: &Form,
    tx: &mpsc::SyncSender<(usize, Vec<u8>)>,
) {
    let progress = &srv.persist().snapshot.keys_done;
    // With rdb-key-save-delay the writer paces keys one by one (see pace).
    let delay = srv.persist().snapshot.key_delay_us.load(Relaxed) > 0;
    let batch = if delay { 1 } else { BATCH_KEYS };
    loop {
        let shard = next.fetch_add(1, Relaxed);
        if shard >= SHARDS {
            return;
        }
        loop {
            let (mut versions, mut body, mut n) = (Vec::new(), Vec::new(), 0);
            let done = srv
                .core()
                .keyspace
                .db(db)
                .lock(shard)
                .snap_step(batch, |e, ttls| {
                    n += 1;
                    form.entry(&mut body, &mut versions, e, ttls);
                    body.len() < BATCH_BYTES
                });
            if n > 0 {
                progress.fetch_add(n, Relaxed);
                let mut chunk = Vec::with_capacity(body.len() + versions.len() + 32);
                SnapFormat::batch(&mut chunk, &versions, &body);
                if tx.send((n, chunk)).is_err() {
                    return;
                }
            }
            if done {
                break;
            }
        }
    }
}
