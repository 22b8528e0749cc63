//! RDB saving as Redis users drive it: SAVE, BGSAVE, the `save` schedule,
//! saving at shutdown, `stop-writes-on-bgsave-error`, and the rdb_* fields of
//! INFO persistence. The snapshot itself is `snapshot.rs`.
//!
//! Redis's SAVE blocks the whole server; ours blocks only the client that
//! sent it (and the connections of its worker thread) while the snapshot
//! uses every core. BGSAVE returns at once and serializes with half of the
//! cores beside the traffic.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::*};
use std::sync::Arc;

use super::snapshot::{self, SnapshotError, SnapshotJob};
use crate::commands::CmdError;
use crate::core::info::Fields;
use crate::keyspace::hlc::unix_ms;
use crate::persistence::Host;
use crate::{log_notice, log_warning};

/// How long after a failed BGSAVE the schedule tries again (Redis's
/// CONFIG_BGSAVE_RETRY_DELAY).
const RETRY_DELAY_SECS: u64 = 5;

/// State of RDB saving.
pub struct RdbState {
    last_ok: AtomicBool,
    bgsave_running: AtomicBool,
    pub bgsave_scheduled: AtomicBool,
    saves: AtomicU64,
    /// Start of the running BGSAVE (unix ms), for rdb_current_bgsave_time_sec.
    bgsave_start_ms: AtomicU64,
    last_bgsave_secs: AtomicI64,
    /// The server's write counter at the last successful save's cut, and
    /// at the running save's cut.
    dirty_at_save: AtomicU64,
    dirty_at_cut: AtomicU64,
    last_try_unix: AtomicU64,
    /// Keys loaded and skipped as expired by the last load.
    pub last_load_keys: AtomicU64,
    pub last_load_expired: AtomicU64,
}

impl Default for RdbState {
    fn default() -> Self {
        RdbState {
            last_ok: AtomicBool::new(true),
            bgsave_running: AtomicBool::new(false),
            bgsave_scheduled: AtomicBool::new(false),
            saves: AtomicU64::new(0),
            bgsave_start_ms: AtomicU64::new(0),
            last_bgsave_secs: AtomicI64::new(-1),
            dirty_at_save: AtomicU64::new(0),
            dirty_at_cut: AtomicU64::new(0),
            last_try_unix: AtomicU64::new(0),
            last_load_keys: AtomicU64::new(0),
            last_load_expired: AtomicU64::new(0),
        }
    }
}

impl RdbState {
    pub fn bgsave_running(&self) -> bool {
        self.bgsave_running.load(Acquire)
    }
}

/// The server's count of writes since start (all workers).
pub(crate) fn dirty_total(srv: &impl Host) -> u64 {
    srv.core()
        .workers
        .lock()
        .iter()
        .map(|w| w.dirty.load(Relaxed))
        .sum()
}

/// Writes since the last successful save.
pub(crate) fn dirty_since_save(srv: &impl Host) -> u64 {
    dirty_total(srv).saturating_sub(srv.persist().rdb.dirty_at_save.load(Relaxed))
}

fn rdb_path(srv: &impl Host) -> PathBuf {
    PathBuf::from(srv.core().config.read().get_str("dbfilename"))
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Told the outcome of a save.
type OnSaved = Box<dyn FnOnce(&io::Result<u64>) + Send>;

/// Starts a snapshot to the RDB file; `done` also gets the outcome.
fn start_rdb<H: Host>(
    srv: &Arc<H>,
    threads: usize,
    background: bool,
    done: OnSaved,
) -> Result<(), SnapshotError> {
    let st = &srv.persist().rdb;
    let path = rdb_path(srv);
    let srv_cut = srv.clone();
    let srv_done = srv.clone();
    let started = unix_ms();
    st.last_try_unix.store(started / 1000, Relaxed);
    st.saves.fetch_add(1, Relaxed);
    let job = SnapshotJob {
        format: snapshot::SnapFormat::Rdb,
        path,
        stream: None,
        threads,
        aux: Vec::new(),
        at_cut: Some(Box::new(move || {
            let d = dirty_total(&srv_cut);
            srv_cut.persist().rdb.dirty_at_cut.store(d, Relaxed);
        })),
        done: Box::new(move |r: io::Result<u64>| {
            let st = &srv_done.persist().rdb;
            finish(&srv_done, &r, background, started);
            if background {
                st.bgsave_running.store(false, Release);
            }
            done(&r);
        }),
    };
    if background {
        st.bgsave_running.store(true, Release);
        st.bgsave_start_ms.store(started, Relaxed);
    }
    snapshot::start(srv, job).inspect_err(|_| {
        if background {
            st.bgsave_running.store(false, Release);
        }
    })
}

/// Bookkeeping after a save, as Redis's backgroundSaveDoneHandler.
fn finish(srv: &impl Host, r: &io::Result<u64>, background: bool, started_ms: u64) {
    let st = &srv.persist().rdb;
    match r {
        Ok(_) => {
            st.dirty_at_save
                .store(st.dirty_at_cut.load(Relaxed), Relaxed);
            srv.last_save().store(started_ms / 1000, Relaxed);
            st.last_ok.store(true, Relaxed);
            // Redis's child says "DB saved on disk" (tagged C), then its
            // parent that the background save ended.
            if background {
                crate::log::as_child(|| log_notice!("DB saved on disk"));
                log_notice!("Background saving terminated with success");
            } else {
                log_notice!("DB saved on disk");
            }
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {
            log_warning!("Background saving terminated by FLUSHALL");
        }
        Err(e) => {
            log_warning!("Write error saving DB on disk: {e}");
            if background {
                // Only a failed background save stops writes (Redis).
                st.last_ok.store(false, Relaxed);
                log_warning!("Background saving error");
            }
        }
    }
    if background {
        let secs = (unix_ms().saturating_sub(started_ms) / 1000) as i64;
        st.last_bgsave_secs.store(secs, Relaxed);
    }
}

/// SAVE: a snapshot with every core; returns once the file is on disk.
pub(crate) fn save<H: Host>(srv: &Arc<H>) -> Result<(), CmdError> {
    if srv.persist().snapshot.running() {
        return Err(CmdError::err("Background save already in progress"));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let done = Box::new(move |r: &io::Result<u64>| {
        let _ = tx.send(r.as_ref().map(|_| ()).map_err(|e| e.to_string()));
    });
    match start_rdb(srv, cores(), false, done) {
        Ok(()) => {}
        Err(SnapshotError::Busy) => {
            return Err(CmdError::err("Background save already in progress"))
        }
        Err(SnapshotError::Spawn(_)) => return Err(CmdError::Msg("ERR".into())),
    }
    match rx.recv() {
        Ok(Ok(())) => Ok(()),
        _ => Err(CmdError::Msg("ERR".into())),
    }
}

/// BGSAVE [SCHEDULE]: the status line to reply.
/// `in_exec`: inside a transaction the save is scheduled for the cron, as
/// Redis does (the cut must not take locks while EXEC holds some).
pub(crate) fn bgsave<H: Host>(
    srv: &Arc<H>,
    schedule: bool,
    in_exec: bool,
) -> Result<&'static str, CmdError> {
    let st = &srv.persist().rdb;
    if st.bgsave_running() {
        return Err(CmdError::err("Background save already in progress"));
    }
    if srv.persist().snapshot.running() || in_exec {
        if schedule || in_exec {
            st.bgsave_scheduled.store(true, Relaxed);
            return Ok("Background saving scheduled");
        }
        return Err(CmdError::err(
            "Another child process is active (AOF?): can't BGSAVE right now. \
             Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.",
        ));
    }
    match start_rdb(srv, background_threads(), true, Box::new(|_| {})) {
        Ok(()) => {
            log_notice!("Background saving started");
            Ok("Background saving started")
        }
        Err(SnapshotError::Busy) => Err(CmdError::err("Background save already in progress")),
        Err(SnapshotError::Spawn(e)) => {
            Err(CmdError::Msg(format!("ERR Background save failed: {e}")))
        }
    }
}

fn background_threads() -> usize {
    cores().div_ceil(2)
}

/// FLUSHALL stops a running BGSAVE (Redis kills the child): the dataset it
/// was saving is gone, and the change counter stays as it was.
pub(crate) fn abort_bgsave(srv: &impl Host) {
    if srv.persist().rdb.bgsave_running() {
        snapshot::abort(srv);
    }
}

/// The first `save` point (seconds, changes) for which `due` holds (the
/// cron asks every tick; the points are parsed by `HotConfig::load`).
fn find_save_point(srv: &impl Host, due: impl Fn(u64, u64) -> bool) -> Option<(u64, u64)> {
    let points = srv.core().hot.persistence.save_points.read();
    points
        .iter()
        .copied()
        .find(|&(secs, changes)| due(secs, changes))
}

fn has_save_points(srv: &impl Host) -> bool {
    find_save_point(srv, |_, _| true).is_some()
}

/// Each cron tick (worker 0): a scheduled BGSAVE, or one the `save`
/// points ask for (Redis's serverCron).
pub(crate) fn cron<H: Host>(srv: &Arc<H>) {
    let st = &srv.persist().rdb;
    if srv.persist().snapshot.running() || srv.shutting_down() || srv.persist().loading.active() {
        return;
    }
    if st.bgsave_scheduled.swap(false, Relaxed) {
        let _ = bgsave(srv, false, false);
        return;
    }
    let now = unix_ms() / 1000;
    let last = srv.last_save().load(Relaxed);
    let retry_ok = st.last_ok.load(Relaxed)
        || now.saturating_sub(st.last_try_unix.load(Relaxed)) >= RETRY_DELAY_SECS;
    if !retry_ok {
        return;
    }
    let dirty = dirty_since_save(srv);
    let due = |secs, changes| dirty >= changes && now.saturating_sub(last) >= secs;
    if let Some((secs, changes)) = find_save_point(srv, due) {
        log_notice!("{changes} changes in {secs} seconds. Saving...");
        let _ = bgsave(srv, false, false);
    }
}

/// Saving at shutdown: `SHUTDOWN SAVE`, or the default when save points
/// exist. Returns false if the save failed (then Redis refuses to exit
/// unless FORCE).
pub(crate) fn save_on_shutdown<H: Host>(srv: &Arc<H>, force_save: bool) -> bool {
    // Redis's order: the AOF is fsynced first, then the final RDB.
    if srv.persist().aof.core.is_open() {
        log_notice!("Calling fsync() on the AOF file.");
        super::aof::on_shutdown(srv);
    }
    // Never while loading (even SHUTDOWN SAVE): the file would be
    // overwritten with half of the data (Redis's prepareForShutdown).
    let loading = &srv.persist().loading;
    if loading.active() || loading.stopped_for_shutdown() || (!force_save && !has_save_points(srv))
    {
        return true;
    }
    log_notice!("Saving the final RDB snapshot before exiting.");
    wait_for_snapshot(srv);
    match save(srv) {
        Ok(()) => true,
        Err(_) => {
            log_warning!("Error trying to save the DB, can't exit.");
            false
        }
    }
}

/// Waits for a running snapshot (at shutdown, before the final save).
pub(crate) fn wait_for_snapshot(srv: &impl Host) {
    while srv.persist().snapshot.running() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `stop-writes-on-bgsave-error`: while the last background save failed
/// and save points exist, write commands (and PING) get MISCONF. One
/// relaxed load when the last save succeeded.
pub(crate) fn disk_error(srv: &impl Host) -> Option<CmdError> {
    if srv.persist().rdb.last_ok.load(Relaxed) {
        return None;
    }
    let stop = srv
        .core()
        .hot
        .persistence
        .stop_writes_on_bgsave_error
        .load(Relaxed);
    if !stop || !has_save_points(srv) {
        return None;
    }
    Some(CmdError::Msg(
        "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to \
         persist to disk. Commands that may modify the data set are disabled, because this \
         instance is configured to report errors during writes if RDB snapshotting fails \
         (stop-writes-on-bgsave-error option). Please check the Redis logs for details about \
         the RDB error."
            .into(),
    ))
}

/// The rdb_* fields of INFO persistence (after `loading` and the cow lines).
pub(crate) fn info_fields(srv: &impl Host) -> Fields {
    let st = &srv.persist().rdb;
    let running = st.bgsave_running() || srv.persist().snapshot.for_replicas.load(Relaxed);
    let current = if running {
        (unix_ms().saturating_sub(st.bgsave_start_ms.load(Relaxed)) / 1000) as i64
    } else {
        -1
    };
    let status = if st.last_ok.load(Relaxed) {
        "ok"
    } else {
        "err"
    };
    let mut f = Fields::new();
    f.add("rdb_changes_since_last_save", dirty_since_save(srv))
        .add("rdb_bgsave_in_progress", running)
        .add("rdb_last_save_time", srv.last_save().load(Relaxed))
        .add("rdb_last_bgsave_status", status)
        .add(
            "rdb_last_bgsave_time_sec",
            st.last_bgsave_secs.load(Relaxed),
        )
        .add("rdb_current_bgsave_time_sec", current)
        .add("rdb_saves", st.saves.load(Relaxed))
        .add("rdb_last_cow_size", 0)
        .add(
            "rdb_last_load_keys_expired",
            st.last_load_expired.load(Relaxed),
        )
        .add("rdb_last_load_keys_loaded", st.last_load_keys.load(Relaxed));
    f
}
