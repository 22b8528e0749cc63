//! Loading an RDB file into the keyspace: at start-up, for DEBUG RELOAD and
//! for a replica's full sync (from a file, or from the socket into the live
//! keyspace or a staging one swapped in on success: [`ReplicaLoad`]).
//!
//! The decoder (`rdb/decode.rs`) streams keys; each is inserted into its
//! shard with its expiry, eviction metadata and version (the version the file
//! carries in our aux field, or a fresh stamp for files written by Redis).
//! Keys already expired are skipped and counted, as a Redis master does.
//!
//! Under active replication the file's tombstones and flush stamps are
//! restored too (`rdb/mod.rs` has their aux fields), and the node's stamp
//! floor rises past every loaded stamp, so that no write made after the
//! load is stamped below data it replaces (docs/DECISIONS.md 41). A plain
//! node ignores them.

use std::fs::File;
use std::io::{self, BufReader};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use super::rdb::decode::{self, LoadOpts, LoadedKey};
use super::rdb::RdbError;
use crate::commands::access::lru_clock;
use crate::core::info::{Fields, Value};
use crate::keyspace::hlc::{unix_ms, Hlc};
use crate::keyspace::{Entry, Keyspace, Slot};
use crate::log_notice;
use crate::persistence::Host;

/// The start-up load in progress, for `-LOADING` replies and INFO's
/// loading_* fields. Clients are served meanwhile; commands without the
/// `loading` flag are refused (see `persistence::admit_write`).
///
/// Start-up accepts no connection until it reads a file or is done
/// ([`Loading::admit_clients`]): as Redis, which serves clients only from
/// inside a file's load (processEventsWhileBlocked), a client that connects
/// to a server with nothing to load waits in the listen backlog, and its
/// first command runs once the AOF is open. Before, it got -LOADING while
/// the empty AOF base file was created and synced (the Tcl test "Multi Part
/// AOF can start when no aof and no manifest" failed on a slow disk). A
/// replica's
/// `swapdb` load of the same history is an *async* load instead: the old
/// dataset serves every command but the `no_async_loading` ones.
#[derive(Default)]
pub struct Loading {
    active: AtomicBool,
    async_active: AtomicBool,
    start_unix: AtomicU64,
    total_bytes: AtomicU64,
    loaded_bytes: AtomicU64,
    /// Keys decoded (progress while the bytes read stay put).
    keys: AtomicU64,
    /// Set by [`Loading::abort`]: the load fails at its next read or key.
    aborted: AtomicBool,
    /// A shutdown stopped the start-up load ([`Loading::abort_for_shutdown`]):
    /// what was loaded must not be saved. Never cleared.
    shutdown: AtomicBool,
    /// Active replication: the stamps of the tombstones of keys that expired
    /// while we were stopped, until replication takes them
    /// ([`Loading::take_deletions`]).
    deletions: parking_lot::Mutex<Vec<u64>>,
    /// Start-up: whether the listeners accept yet (false until then).
    clients_admitted: tokio::sync::watch::Sender<bool>,
}

impl Loading {
    /// Lets the listeners accept: a start-up load begins reading a file
    /// (its clients get -LOADING), or start-up is done. Idempotent.
    pub fn admit_clients(&self) {
        self.clients_admitted.send_replace(true);
    }

    /// Returns once [`Loading::admit_clients`] was called.
    pub async fn clients_admitted(&self) {
        let mut admitted = self.clients_admitted.subscribe();
        let _ = admitted.wait_for(|&yes| yes).await;
    }

    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Relaxed)
    }

    /// An async load (INFO's async_loading) is in progress.
    #[inline]
    pub fn async_active(&self) -> bool {
        self.async_active.load(Relaxed)
    }

    fn begin(&self, total: u64) {
        self.start_progress(total);
        self.active.store(true, Relaxed);
    }

    fn begin_async(&self, total: u64) {
        self.start_progress(total);
        self.async_active.store(true, Relaxed);
    }

    fn start_progress(&self, total: u64) {
        self.start_unix.store(unix_ms() / 1000, Relaxed);
        self.total_bytes.store(total, Relaxed);
        self.loaded_bytes.store(0, Relaxed);
        self.keys.store(0, Relaxed);
        self.aborted.store(false, Relaxed);
    }

    fn end(&self) {
        self.active.store(false, Relaxed);
        self.async_active.store(false, Relaxed);
        self.aborted.store(false, Relaxed);
    }

    /// Bytes of the payload read so far (a socket load counts its own).
    pub fn add_loaded(&self, n: u64) {
        self.loaded_bytes.fetch_add(n, Relaxed);
    }

    /// Grows while a load makes progress: bytes read plus keys decoded.
    pub fn progress(&self) -> u64 {
        self.loaded_bytes.load(Relaxed) + self.keys.load(Relaxed)
    }

    /// Stops the load in progress (a replica's that made no progress for
    /// repl-timeout): it fails at its next read or key.
    pub fn abort(&self) {
        self.aborted.store(true, Relaxed);
    }

    /// SHUTDOWN or a signal while loading at start-up: the load stops at its
    /// next key, and the server exits without saving (Redis exits from
    /// inside its load, with NOSAVE).
    pub fn abort_for_shutdown(&self) {
        if self.active() {
            self.shutdown.store(true, Relaxed);
            self.aborted.store(true, Relaxed);
        }
    }

    /// The stamps of the deletions the loads made (keys that expired while
    /// we were stopped), taken: they are stamped right after each key's
    /// version, so below the stamps of our other writes since the start,
    /// and a peer resuming our stream must still get them
    /// (replication/active/resume.rs, simulator seed 21491).
    pub fn take_deletions(&self) -> Vec<u64> {
        std::mem::take(&mut *self.deletions.lock())
    }

    /// Whether a shutdown stopped the start-up load.
    pub fn stopped_for_shutdown(&self) -> bool {
        self.shutdown.load(Relaxed)
    }

    /// The error of a load stopped by [`Loading::abort`], if it was.
    pub fn check_aborted(&self) -> io::Result<()> {
        if self.aborted.load(Relaxed) {
            return Err(io::Error::new(io::ErrorKind::TimedOut, LOAD_ABORTED));
        }
        Ok(())
    }

    /// While loading, the progress fields of INFO persistence.
    pub fn info_fields(&self) -> Fields {
        let mut f = Fields::new();
        if !self.active() && !self.async_active() {
            return f;
        }
        let total = self.total_bytes.load(Relaxed);
        let done = self.loaded_bytes.load(Relaxed);
        let start = self.start_unix.load(Relaxed);
        let elapsed = (unix_ms() / 1000).saturating_sub(start);
        let perc = if total > 0 {
            done as f64 * 100.0 / total as f64
        } else {
            0.0
        };
        let eta = if done > 0 && elapsed > 0 {
            (total.saturating_sub(done) as f64 / (done as f64 / elapsed as f64)) as u64
        } else {
            1
        };
        f.add("loading_start_time", start)
            .add("loading_total_bytes", total)
            .add("loading_rdb_used_mem", 0)
            .add("loading_loaded_bytes", done)
            .add("loading_loaded_perc", Value::percent(perc))
            .add("loading_eta_seconds", eta);
        f
    }
}

/// Why a load stopped by [`Loading::abort`] failed.
pub(crate) const LOAD_ABORTED: &str = "the load made no progress for repl-timeout";

/// Counts the bytes read, for INFO's loading_loaded_bytes; fails once the
/// load is aborted.
struct Counting<'a, R> {
    inner: R,
    loading: &'a Loading,
}

impl<R: io::Read> io::Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.loading.check_aborted()?;
        let n = self.inner.read(buf)?;
        self.loading.loaded_bytes.fetch_add(n as u64, Relaxed);
        Ok(n)
    }
}

/// What a load did.
#[derive(Debug, Default, Clone)]
pub struct LoadStats {
    /// The file's aux fields (repl-id and repl-offset among them).
    pub aux: Vec<(Vec<u8>, Vec<u8>)>,
    pub keys: u64,
    pub expired: u64,
    /// The keys skipped as expired, (db, name), kept only by a plain
    /// node's start-up load: a master that resumes its replication history
    /// sends their deletions to its replicas (Redis's RDBFLAGS_FEED_REPL).
    pub expired_keys: Vec<(usize, Vec<u8>)>,
    pub empty_skipped: u64,
}

/// How to treat a key already present (DEBUG RELOAD MERGE replaces it;
/// otherwise a file with a key twice is corrupt, as in Redis).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OnDuplicate {
    Fail,
    Replace,
}

/// Loads `path` into the keyspace. `Ok(None)` when the file does not exist.
pub(crate) fn load_file<H: Host>(
    srv: &Arc<H>,
    path: &Path,
    dup: OnDuplicate,
) -> Result<Option<LoadStats>, String> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("Error opening {}: {e}", path.display())),
    };
    srv.persist().loading.admit_clients();
    let started = Instant::now();
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    log_notice!(
        "Loading RDB from {} ({size} bytes, {:.2} Mb)",
        path.display(),
        size as f64 / (1024.0 * 1024.0)
    );
    let r = Counting {
        inner: f,
        loading: &srv.persist().loading,
    };
    let stats =
        load_reader(srv, BufReader::with_capacity(1 << 20, r), dup).map_err(|e| match e {
            RdbError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                "Short read or OOM loading DB. Unrecoverable error, aborting now.".to_string()
            }
            e => e.to_string(),
        })?;
    if stats.empty_skipped > 0 {
        log_notice!(
            "Done loading RDB, keys loaded: {}, keys expired: {}, empty keys skipped: {}.",
            stats.keys,
            stats.expired,
            stats.empty_skipped
        );
    } else {
        log_notice!(
            "Done loading RDB, keys loaded: {}, keys expired: {}.",
            stats.keys,
            stats.expired
        );
    }
    log_notice!(
        "DB loaded from disk: {:.3} seconds",
        started.elapsed().as_secs_f64()
    );
    let st = &srv.persist().rdb;
    st.last_load_keys.store(stats.keys, Relaxed);
    st.last_load_expired.store(stats.expired, Relaxed);
    Ok(Some(stats))
}

/// Keys per batch handed from the decoder to an inserter.
const BATCH: usize = 1024;

/// Loads an RDB stream (a file, or an AOF's RDB preamble).
///
/// This thread decodes; inserter threads (one per core: decoding waits on
/// them when they fall behind) build the entries and insert them, each owning a disjoint set of
/// shards, so their shard locks are never contended and decoding overlaps
/// insertion.
pub fn load_reader<H: Host>(
    srv: &Arc<H>,
    r: impl io::Read,
    dup: OnDuplicate,
) -> Result<LoadStats, RdbError> {
    load_reader_into(srv, &srv.core().keyspace, r, dup)
}

/// [`load_reader`] into `ks`: the server's keyspace or a replica's staging
/// one (made by [`Keyspace::staging`], same hasher, so `srv.keyspace.slot`
/// holds for it).
pub(crate) fn load_reader_into<H: Host>(
    srv: &Arc<H>,
    ks: &Keyspace,
    r: impl io::Read,
    dup: OnDuplicate,
) -> Result<LoadStats, RdbError> {
    let verify_checksum = srv.core().config.read().get_bool("rdbchecksum");
    // RESIZEDB: size every shard of the database once (keys spread evenly).
    // The hint is the file's word: bounded, so a lying file costs at most
    // ~90 MB of index up front (16M keys per database).
    // The keys the file announces (its RESIZEDB records), for progress.
    let expected = std::cell::Cell::new(0u64);
    let reserve = |db: usize, keys: u64| {
        expected.set(expected.get() + keys);
        log_notice!("Loading RDB: DB {db} announces {keys} keys");
        if db < ks.num_dbs() {
            let keys = keys.min(1 << 24) as usize;
            let per_shard = keys / crate::keyspace::SHARDS * 21 / 20;
            for i in 0..crate::keyspace::SHARDS {
                ks.db(db).lock(i).reserve(&ks.hasher, per_shard);
            }
        }
    };
    let opts = LoadOpts {
        limits: &srv.core().hot.encoding,
        verify_checksum,
        on_resize: Some(&reserve),
        on_aux: Some(&log_aux),
    };
    let now = unix_ms();
    let now_lru = lru_clock(now);
    let key_delay = srv.core().config.read().get_i64("key-load-delay").max(0) as u64;
    let inserters = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    std::thread::scope(|scope| {
        let mut txs = Vec::with_capacity(inserters);
        let mut handles = Vec::with_capacity(inserters);
        for _ in 0..inserters {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<(Slot, LoadedKey)>>(8);
            txs.push(tx);
            handles.push(scope.spawn(move || insert_batches(srv, ks, rx, now_lru, dup)));
        }
        let mut batches: Vec<Vec<(Slot, LoadedKey)>> = (0..inserters).map(|_| Vec::new()).collect();
        let mut expired = 0u64;
        // Active replication: a key that expired while stopped leaves a
        // tombstone, as its expiry would have, so an older write of it
        // cannot come back from a peer, and the peers learn the delete when
        // we resume (found by the simulator, seed 89). Stamped right after
        // the key's version, with our slot: at the key's own version, a
        // peer whose slower clock still held the key live wrote on it (its
        // base that version) and the write applied here on the absent key,
        // one version naming two values (seed 936); any write made on the
        // key after it is newer than the tombstone and wins, as it would
        // have over the key.
        let after = |v: u64| {
            use crate::keyspace::hlc::NODE_BITS;
            (((v >> NODE_BITS) + 1) << NODE_BITS) | srv.core().node_id
        };
        let mut expired_keys: Vec<(usize, Vec<u8>, u64)> = Vec::new();
        let mut expired_names: Vec<(usize, Vec<u8>)> = Vec::new();
        // (A master's; only its start-up load uses them, see LoadStats.)
        let keep_names = !srv.core().active && !srv.is_replica();
        let mut seen = 0u64;
        let started = Instant::now();
        let mut last_log = started;
        let mut on_key = |k: LoadedKey| -> Result<(), RdbError> {
            seen += 1;
            let loading = &srv.persist().loading;
            loading.keys.fetch_add(1, Relaxed);
            loading.check_aborted().map_err(RdbError::Io)?;
            if seen.is_multiple_of(256) && last_log.elapsed() >= PROGRESS_EVERY {
                last_log = Instant::now();
                log_progress(loading, seen, expected.get(), started);
            }
            if k.expire_at_ms != 0 && k.expire_at_ms <= now {
                expired += 1;
                if let (true, Some(v)) = (srv.core().active, k.version) {
                    expired_keys.push((k.db, k.key, after(v)));
                } else if keep_names {
                    expired_names.push((k.db, k.key));
                }
                return Ok(());
            }
            if key_delay > 0 {
                std::thread::sleep(std::time::Duration::from_micros(key_delay));
            }
            let slot = srv.core().keyspace.slot(&k.key);
            let i = slot.shard % inserters;
            batches[i].push((slot, k));
            if batches[i].len() >= BATCH {
                let full = std::mem::take(&mut batches[i]);
                txs[i].send(full).map_err(|_| inserter_failed())?;
            }
            Ok(())
        };
        let decoded = decode::load(r, &opts, &mut on_key);
        for (tx, rest) in txs.iter().zip(batches) {
            if !rest.is_empty() {
                let _ = tx.send(rest);
            }
        }
        drop(txs);
        let mut keys = 0;
        let mut max_version = 0;
        let mut first_err = None;
        for h in handles {
            match h.join().unwrap_or_else(|_| Err(inserter_failed())) {
                Ok((n, max)) => {
                    keys += n;
                    max_version = max_version.max(max);
                }
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        let mut summary = decoded?;
        if let Some(e) = first_err {
            return Err(e);
        }
        // FUNCTION libraries (RDB_OPCODE_FUNCTION2), replacing those of
        // their names, as Redis loads them.
        let replace = matches!(dup, OnDuplicate::Replace);
        crate::scripting::load_functions(
            srv.core(),
            std::mem::take(&mut summary.functions),
            replace,
        )
        .map_err(|e| {
            crate::log_warning!("Failed loading library from the RDB file: {e}");
            RdbError::Corrupt(e)
        })?;
        restore_member_ttls(ks, &summary.member_ttls);
        if srv.core().active {
            let stamps = expired_keys.iter().map(|k| k.2);
            srv.persist().loading.deletions.lock().extend(stamps);
            summary.tombstones.extend(expired_keys);
            let max = restore_deletions(ks, &summary)?;
            srv.core()
                .stamp_floor
                .fetch_max(max_version.max(max), Relaxed);
        }
        Ok(LoadStats {
            keys,
            expired,
            expired_keys: expired_names,
            empty_skipped: summary.empty_skipped,
            aux: summary.aux,
        })
    })
}

/// How often a long load logs its progress.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Redis's lines for the aux fields it reports while loading.
fn log_aux(k: &[u8], v: &[u8]) {
    let text = String::from_utf8_lossy(v);
    match k {
        b"redis-ver" => log_notice!("Loading RDB produced by version {text}"),
        b"ctime" => {
            if let Ok(t) = text.parse::<i64>() {
                let age = (unix_ms() / 1000) as i64 - t;
                log_notice!("RDB age {age} seconds");
            }
        }
        b"used-mem" => {
            if let Ok(m) = text.parse::<u64>() {
                log_notice!(
                    "RDB memory usage when created {:.2} Mb",
                    m as f64 / (1024.0 * 1024.0)
                );
            }
        }
        _ => {}
    }
}

/// A progress line of a long load: keys so far (of those the file
/// announced), bytes read, the rate.
fn log_progress(loading: &Loading, seen: u64, expected: u64, started: Instant) {
    let secs = started.elapsed().as_secs_f64().max(0.001);
    let rate = (seen as f64 / secs) as u64;
    let mut line = format!("Loading RDB: {seen} keys");
    if expected >= seen {
        let _ = std::fmt::Write::write_fmt(
            &mut line,
            format_args!(
                " of {expected} ({:.1}%)",
                seen as f64 * 100.0 / expected as f64
            ),
        );
    }
    let total = loading.total_bytes.load(Relaxed);
    let done = loading.loaded_bytes.load(Relaxed);
    if total > 0 {
        let _ = std::fmt::Write::write_fmt(
            &mut line,
            format_args!(
                ", {done} of {total} bytes ({:.1}%)",
                done as f64 * 100.0 / total as f64
            ),
        );
    }
    log_notice!("{line}, {rate} keys/s, {:.1} seconds so far", secs);
}

fn inserter_failed() -> RdbError {
    RdbError::Corrupt("a loader thread stopped".into())
}

/// The file's member TTLs (`keyspace/member_ttl.rs`) onto its keys, for
/// the members they still hold. Under active replication too: a key's
/// merge state takes them from the side map when next read, as dots of
/// the key's version (docs/DECISIONS.md 309).
fn restore_member_ttls(ks: &Keyspace, ttls: &[decode::MemberTtl]) {
    for (db, key, member, at) in ttls.iter().filter(|t| t.0 < ks.num_dbs()) {
        let slot = ks.slot(key);
        let mut g = ks.db(*db).lock(slot.shard);
        let holds = (g.get_raw(slot.hash, key))
            .is_some_and(|e| crate::keyspace::member_ttl::has_member(&e.value, member));
        if holds {
            g.set_member_ttl(slot.hash, key, member, *at);
        }
    }
}

/// Active replication: the file's flush stamps, tombstones and merge states into `ks`
/// (after its keys: a consistent file never holds a key and its
/// tombstone, and a key present wins over one). Returns the highest stamp.
fn restore_deletions(ks: &Keyspace, summary: &decode::LoadSummary) -> Result<u64, RdbError> {
    let mut max = 0;
    let bad_db = |db: usize| {
        RdbError::Corrupt(format!(
            "FATAL: Data file was created with a Redis server configured to handle \
             more than {} databases. Exiting",
            db
        ))
    };
    for &(db, stamp) in &summary.flushed {
        if db >= ks.num_dbs() {
            return Err(bad_db(ks.num_dbs()));
        }
        for mut g in ks.db(db).lock_all() {
            g.set_flushed_at(stamp);
        }
        max = max.max(stamp);
    }
    for (db, key, stamp) in &summary.tombstones {
        if *db >= ks.num_dbs() {
            return Err(bad_db(ks.num_dbs()));
        }
        let slot = ks.slot(key);
        let mut g = ks.db(*db).lock(slot.shard);
        if g.get_raw(slot.hash, key).is_none() {
            g.set_tombstone(key, *stamp);
        }
        max = max.max(*stamp);
    }
    for (db, key, state) in &summary.merge {
        if *db >= ks.num_dbs() {
            return Err(bad_db(ks.num_dbs()));
        }
        let (m, answered) = crate::keyspace::merge::Meta::decode_stored(state)
            .map_err(|e| RdbError::Corrupt(format!("bad lattice-merge aux field: {e}")))?;
        max = max.max(m.version()).max(answered.unwrap_or(0));
        let slot = ks.slot(key);
        let mut g = ks.db(*db).lock(slot.shard);
        g.set_merge_meta(key, m);
        if let Some(stamp) = answered {
            g.note_answered(key, stamp);
        }
    }
    Ok(max)
}

/// An inserter thread: its batches' keys into their shards. After an error
/// it keeps draining (so the decoder never blocks) and reports the first.
/// Returns the keys inserted and their highest version.
fn insert_batches(
    srv: &impl Host,
    ks: &Keyspace,
    rx: std::sync::mpsc::Receiver<Vec<(Slot, LoadedKey)>>,
    now_lru: u32,
    dup: OnDuplicate,
) -> Result<(u64, u64), RdbError> {
    let mut clock = Hlc::new(srv.core().node_id);
    let (mut n, mut max) = (0, 0);
    let mut err = None;
    for batch in rx {
        if err.is_some() {
            continue;
        }
        for (slot, k) in batch {
            match insert(ks, slot, k, &mut clock, now_lru, dup) {
                Ok(v) => max = max.max(v),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
            n += 1;
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok((n, max)),
    }
}

fn insert(
    ks: &Keyspace,
    slot: Slot,
    k: LoadedKey,
    clock: &mut Hlc,
    now_lru: u32,
    dup: OnDuplicate,
) -> Result<u64, RdbError> {
    if k.db >= ks.num_dbs() {
        return Err(RdbError::Corrupt(format!(
            "FATAL: Data file was created with a Redis server configured to handle \
             more than {} databases. Exiting",
            ks.num_dbs()
        )));
    }
    let version = k.version.unwrap_or_else(|| clock.now());
    let mut e = Entry::new(k.key.as_slice().into(), k.value, k.expire_at_ms, version);
    let lru = match k.idle_secs {
        Some(idle) => now_lru.wrapping_sub(idle.min(0xFF_FFFF) as u32) & 0xFF_FFFF,
        None => now_lru,
    };
    e.set_lru(lru);
    e.set_lfu(k.freq.unwrap_or(5));
    let mut shard = ks.db(k.db).lock(slot.shard);
    let fresh = match dup {
        OnDuplicate::Fail => shard.insert_new(&ks.hasher, slot.hash, e).is_ok(),
        OnDuplicate::Replace => shard.insert(&ks.hasher, slot.hash, e).is_none(),
    };
    if !fresh && dup == OnDuplicate::Fail {
        return Err(RdbError::Corrupt(format!(
            "RDB has duplicated key '{}' in DB {}",
            String::from_utf8_lossy(&k.key),
            k.db
        )));
    }
    Ok(version)
}

/// A replica's full sync: empties every database and loads `path`,
/// serving -LOADING meanwhile; on failure (or abort) the databases are
/// left empty.
pub(crate) fn load_for_replica<H: Host>(srv: &Arc<H>, path: &Path) -> Result<(), String> {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    srv.persist().loading.begin(size);
    empty_all(srv);
    let r = load_file(srv, path, OnDuplicate::Fail);
    if r.is_err() {
        empty_all(srv);
    }
    srv.persist().loading.end();
    r.map(|_| ())
}

/// How a replica loads a payload straight from its master's socket
/// (`repl-diskless-load`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SocketLoad {
    /// `on-empty-db`: into the (empty) live databases, serving -LOADING.
    Live,
    /// `swapdb`: into a staging dataset swapped in on success; the old one
    /// stays meanwhile, behind -LOADING (`async_load: false`) or serving
    /// reads (`true`: the payload continues the history we hold).
    Swap { async_load: bool },
}

/// A replica's socket load in progress: where keys go, and what success
/// or failure does with the datasets.
pub struct ReplicaLoad {
    staging: Option<Keyspace>,
}

impl ReplicaLoad {
    /// Sets INFO's loading/async_loading (`total`: the payload's size, 0
    /// when unknown) and, for [`SocketLoad::Live`], empties the databases.
    pub fn begin(srv: &impl Host, mode: SocketLoad, total: u64) -> ReplicaLoad {
        let staging = match mode {
            SocketLoad::Live => {
                srv.persist().loading.begin(total);
                empty_all(srv);
                None
            }
            SocketLoad::Swap { async_load } => {
                if async_load {
                    srv.persist().loading.begin_async(total);
                } else {
                    srv.persist().loading.begin(total);
                }
                Some(srv.core().keyspace.staging())
            }
        };
        ReplicaLoad { staging }
    }

    /// The keyspace the payload's keys go into.
    pub fn target<'a, H: Host>(&'a self, srv: &'a H) -> &'a Keyspace {
        self.staging.as_ref().unwrap_or(&srv.core().keyspace)
    }

    /// The whole payload loaded: a staging dataset replaces the live one
    /// at once, the old data is freed on the lazyfree thread.
    pub fn commit(self, srv: &impl Host) {
        if let Some(staging) = self.staging {
            log_notice!("MASTER <-> REPLICA sync: Swapping active DB with loaded DB");
            srv.core().keyspace.swap_with(&staging);
            srv.core().replica_keys.clear(); // as swapMainDbWithTempDb
            discard(srv, staging);
            log_notice!("MASTER <-> REPLICA sync: Discarding old DB in background");
        }
        srv.persist().loading.end();
    }

    /// The payload failed: a staging dataset is dropped (the old data was
    /// never touched); live databases loaded in part are emptied.
    pub fn abort(self, srv: &impl Host) {
        match self.staging {
            Some(staging) => {
                discard(srv, staging);
                log_notice!("MASTER <-> REPLICA sync: Discarding temporary DB in background");
            }
            None => empty_all(srv),
        }
        srv.persist().loading.end();
    }
}

/// Frees a staging keyspace's contents on the lazyfree thread.
fn discard(srv: &impl Host, ks: Keyspace) {
    let mut taken = Vec::new();
    for mut shards in ks.lock_everything() {
        for g in shards.iter_mut() {
            if !g.is_empty() {
                taken.push(g.take_all());
            }
        }
    }
    srv.core().lazyfree.free_shards(taken);
}

/// DEBUG LOADAOF: the server is loading while `load` runs, as Redis's
/// startLoadingFile marks it: other clients get -LOADING and INFO says
/// `loading:1` (Redis's one thread answers them so between its load's
/// steps and a slow script's; ours answer at once).
pub(crate) fn while_loading<T>(srv: &impl Host, load: impl FnOnce() -> T) -> T {
    srv.persist().loading.begin(0);
    let r = load();
    srv.persist().loading.end();
    r
}

/// Empties every database without propagating (DEBUG RELOAD, replicas
/// before a full sync), freeing the data on the lazyfree thread.
pub(crate) fn empty_all(srv: &impl Host) {
    crate::scripting::clear_functions(srv.core());
    // A writable replica's own TTL keys are gone (Redis's emptyData(-1)
    // flushes slaveKeysWithExpire).
    srv.core().replica_keys.clear();
    let mut taken = Vec::new();
    for mut shards in srv.core().keyspace.lock_everything() {
        for g in shards.iter_mut() {
            if !g.is_empty() {
                taken.push(g.take_all());
            }
        }
    }
    srv.core().lazyfree.free_shards(taken);
}

/// DEBUG RELOAD: save the RDB file, empty the keyspace and load the file
/// back (each step skippable), as Redis does to check that what is saved
/// is what is loaded. From the emptying to the end of the load the server
/// is loading: other clients get -LOADING (Redis's rdbLoad sets `loading`
/// and answers the events it serves meanwhile so), never a half-loaded
/// keyspace.
pub(crate) fn debug_reload<H: Host>(
    srv: &Arc<H>,
    steps: crate::core::admin::Reload,
) -> Result<(), crate::commands::CmdError> {
    use crate::commands::CmdError;
    if steps.save {
        super::save::wait_for_snapshot(srv);
        super::save::save(srv).map_err(|_| CmdError::err("Error trying to save the DB"))?;
    }
    let path = std::path::PathBuf::from(srv.core().config.read().get_str("dbfilename"));
    let dup = if steps.merge {
        OnDuplicate::Replace
    } else {
        OnDuplicate::Fail
    };
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    srv.persist().loading.begin(size);
    if steps.flush {
        empty_all(srv);
    }
    let loaded = load_file(srv, &path, dup);
    srv.persist().loading.end();
    match loaded {
        Ok(Some(_)) => {
            crate::log_warning!("DB reloaded by DEBUG RELOAD");
            Ok(())
        }
        Ok(None) | Err(_) => Err(CmdError::err(
            "Error trying to load the RDB dump, check server logs.",
        )),
    }
}

/// Marks the server as loading, before it accepts clients: from then on
/// commands without the `loading` flag get `-LOADING` until [`at_startup`]
/// is done.
pub(crate) fn begin_startup(srv: &impl Host) {
    let path = srv.core().config.read().get_str("dbfilename");
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    srv.persist().loading.begin(size);
}

/// At start-up, while clients are already served: the AOF when `appendonly
/// yes` (it is the more complete record: the RDB is not loaded then, even
/// if the AOF is empty, as in Redis), else the RDB file. Errors stop the
/// server with Redis's words (the AOF's are logged already: empty text).
pub(crate) fn at_startup<H: Host>(srv: &Arc<H>) -> Result<(), String> {
    let r = load_startup_data(srv);
    srv.persist().loading.end();
    srv.persist().loading.admit_clients();
    r
}

fn load_startup_data<H: Host>(srv: &Arc<H>) -> Result<(), String> {
    // Reads the AOF manifest even when off (CONFIG SET appendonly yes
    // later continues from it).
    super::aof::load_at_startup(srv)?;
    if srv.core().config.read().get_bool("appendonly") {
        return Ok(());
    }
    let path = std::path::PathBuf::from(srv.core().config.read().get_str("dbfilename"));
    match load_file(srv, &path, OnDuplicate::Fail) {
        Ok(Some(stats)) => {
            srv.rdb_aux_loaded(&stats.aux, &stats.expired_keys);
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(_) if srv.persist().loading.stopped_for_shutdown() => {
            Err("the load was stopped by a shutdown".into())
        }
        Err(e) => {
            crate::log_warning!("Internal error in RDB reading -> {e}");
            crate::log_warning!("Terminating server after rdb file reading failure.");
            Err(format!("Fatal error loading the DB: {e}. Exiting."))
        }
    }
}
