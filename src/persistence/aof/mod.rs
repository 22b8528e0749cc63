//! The append-only file, in Redis 7's multi-part layout: `appenddirname/`
//! holds a manifest, one base file (RDB or AOF format) and the incr files
//! written since the base (see `manifest.rs`).
//!
//! - `writer.rs`: the effect-stream sink and the flushes (appendfsync).
//! - `load.rs`: start-up loading of base and incr files.
//! - `rewrite.rs`: BGREWRITEAOF, auto-rewrite, turning the AOF on at runtime.
//! - `manifest.rs`, `rdb_base.rs`, `snap.rs`: formats and helpers (RESP
//!   encoding is `protocol::request`).
//!
//! This file is the interface the rest of the server calls: the start-up
//! hook, the hook before replies are written, the write refusal after a
//! write error, CONFIG SET, the cron check, BGREWRITEAOF, DEBUG LOADAOF and
//! INFO.
//!
//! Durability, as Redis: every write's record is in the file before the
//! reply that acknowledges it leaves (the connection calls [`before_reply`]
//! once per batch of replies: group commit, like Redis's beforeSleep); with
//! `appendfsync always` it is also fsynced by then, with `everysec` a
//! background thread fsyncs once a second, with `no` the kernel decides.
//! Start-up loading happens while clients get `-LOADING` (see
//! `persistence/load.rs`); the AOF, when on, replaces the RDB file as the
//! source (as Redis).

pub(crate) mod load;
pub(crate) mod manifest;
mod rdb_base;
pub(crate) mod rewrite;
mod snap;
pub(crate) mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::commands::CmdError;
use crate::core::info::Fields;
use crate::persistence::Host;
use crate::{log_notice, log_warning};
use manifest::Manifest;
use rewrite::{RewriteStats, StartError};
use writer::Core;

/// The AOF's state on the server (`srv.persist.aof`).
#[derive(Default)]
pub struct AofState {
    pub core: Arc<Core>,
    /// The sink is subscribed to the effect stream (done once).
    subscribed: AtomicBool,
    pub manifest: Mutex<Manifest>,
    pub rw: Mutex<RewriteStats>,
    /// Turning on: recording starts at the next rewrite's cut, and its incr
    /// file enters the manifest only with its base (AOF_WAIT_REWRITE).
    pub wait_rewrite: AtomicBool,
}

/// Called before a batch's replies are written to a client: with the AOF
/// on, the batch's writes are in the file (and fsynced with `always`)
/// before anyone hears of them. One relaxed load when the AOF is off.
#[inline]
pub(crate) fn before_reply(srv: &impl Host) {
    let core = &srv.persist().aof.core;
    if core.active.load(Relaxed) {
        core.before_reply();
    }
}

/// The MISCONF error write commands get while the AOF cannot be written
/// (`persistence::admit_write` applies it as Redis's processCommand does).
pub(crate) fn disk_error(srv: &impl Host) -> Option<CmdError> {
    let core = &srv.persist().aof.core;
    if !core.write_err.load(Relaxed) {
        return None;
    }
    Some(CmdError::Msg(format!(
        "MISCONF Errors writing to the AOF file: {}",
        core.last_error.lock()
    )))
}

/// Opens `path` for appending (creating it; emptying it if `truncate`).
pub(crate) fn open_append(path: &Path, truncate: bool) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    if truncate {
        f.set_len(0)?;
    }
    Ok(f)
}

fn names(srv: &impl Host) -> (PathBuf, String) {
    let cfg = srv.core().config.read();
    (
        PathBuf::from(cfg.get_str("appenddirname")),
        cfg.get_str("appendfilename"),
    )
}

/// Mirrors the AOF settings read on the write path.
fn load_settings(srv: &impl Host) {
    let cfg = srv.core().config.read();
    let core = &srv.persist().aof.core;
    let policy = match cfg.get_str("appendfsync").as_str() {
        "always" => writer::FSYNC_ALWAYS,
        "no" => writer::FSYNC_NO,
        _ => writer::FSYNC_EVERYSEC,
    };
    core.policy.store(policy, Relaxed);
    core.timestamps
        .store(cfg.get_bool("aof-timestamp-enabled"), Relaxed);
    core.stamps.store(srv.core().active, Relaxed);
}

/// Start-up (before listeners serve): reads the manifest and, with
/// `appendonly yes`, loads the AOF and opens the incr file for appending.
/// Returns whether data came from the AOF; Err stops the server: its
/// reasons were logged as Redis logs them and the error is empty, so the
/// log's last line stays Redis's (tools and tests read it).
pub(crate) fn load_at_startup<H: Host>(srv: &Arc<H>) -> Result<bool, String> {
    load_settings(srv);
    startup(srv).map_err(|e| {
        if !e.is_empty() {
            log_warning!("{e}");
        }
        String::new()
    })
}

/// Err: the reason, or "" if it was logged already.
fn startup<H: Host>(srv: &Arc<H>) -> Result<bool, String> {
    let (dir, fname) = names(srv);
    let on = srv.core().config.read().get_bool("appendonly");
    let mut m = match manifest::load(&dir, &fname) {
        Ok(m) => m.unwrap_or_default(),
        Err(e) if on => return Err(e),
        Err(e) => {
            log_warning!("{e}");
            Manifest::default()
        }
    };
    if !on {
        *srv.persist().aof.manifest.lock() = m;
        return Ok(false);
    }
    upgrade_if_needed(&dir, &fname, &mut m)?;
    let loaded = load_files(srv, &dir, &fname, &m)?;
    open_on_start(srv, &dir, &fname, m)?;
    // History a crash left behind (killed between a rewrite and its
    // clean-up), as Redis's start-up does (aofDelHistoryFiles).
    rewrite::delete_history(srv);
    Ok(loaded)
}

/// Adopts a pre-7.0 `appendonly.aof` in `dir` as the base (aofUpgradePrepare).
fn upgrade_if_needed(dir: &Path, fname: &str, m: &mut Manifest) -> Result<(), String> {
    let old = Path::new(fname);
    if !old.is_file() {
        return Ok(());
    }
    let adopt = !dir.is_dir()
        || (m.base.is_none() && m.incrs.is_empty())
        || (m.incrs.is_empty()
            && m.base.as_ref().is_some_and(|b| b.name == fname)
            && !dir.join(fname).exists());
    if !adopt {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "Can't open or create append-only dir {}: {e}",
            dir.display()
        )
    })?;
    *m = Manifest::default();
    m.base = Some(manifest::AofFile {
        name: fname.to_string(),
        seq: 1,
        kind: manifest::FileType::Base,
    });
    m.base_seq = 1;
    manifest::persist(dir, fname, m)?;
    std::fs::rename(old, dir.join(fname)).map_err(|e| {
        format!(
            "Error trying to move the old AOF file {fname} into dir {}: {e}",
            dir.display()
        )
    })?;
    log_notice!(
        "Successfully migrated an old-style AOF file ({fname}) into the AOF directory ({}).",
        dir.display()
    );
    Ok(())
}

/// Loads base then incr files (loadAppendOnlyFiles).
fn load_files<H: Host>(
    srv: &Arc<H>,
    dir: &Path,
    fname: &str,
    m: &Manifest,
) -> Result<bool, String> {
    let files = m.load_order();
    if files.is_empty() {
        return Ok(false);
    }
    let mut total = 0;
    for f in &files {
        match std::fs::metadata(dir.join(&f.name)) {
            Ok(md) => total += md.len(),
            Err(e) => {
                return Err(format!("The append log file {} doesn't exist: {e}", f.name));
            }
        }
    }
    if total == 0 {
        return Ok(false);
    }
    srv.persist().loading.admit_clients();
    let start = std::time::Instant::now();
    let n = files.len();
    let mut aux = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let t = std::time::Instant::now();
        let old_style = f.name == fname;
        let last = i + 1 == n;
        let r = load::load_file(srv, (dir, &f.name), last, old_style, &mut aux)
            .map_err(|_| String::new())?;
        let kind = if f.kind == manifest::FileType::Base {
            "base"
        } else {
            "incr"
        };
        if r != load::Loaded::Empty {
            log_notice!(
                "DB loaded from {kind} file {}: {:.3} seconds",
                f.name,
                t.elapsed().as_secs_f64()
            );
        }
    }
    log_notice!(
        "DB loaded from append only file: {:.3} seconds",
        start.elapsed().as_secs_f64()
    );
    srv.aof_aux_loaded(&aux);
    Ok(true)
}

/// Creates the base of an empty AOF, opens the last incr file (creating one
/// if none) and persists the manifest (aofOpenIfNeededOnServerStart).
fn open_on_start<H: Host>(
    srv: &Arc<H>,
    dir: &Path,
    fname: &str,
    mut m: Manifest,
) -> Result<(), String> {
    let dir_err = |e: std::io::Error| {
        format!(
            "Can't open or create append-only dir {}: {e}",
            dir.display()
        )
    };
    std::fs::create_dir_all(dir).map_err(dir_err)?;
    if m.base.is_none() && m.incrs.is_empty() {
        let rdb =
            srv.core().config.read().get_bool("aof-use-rdb-preamble") && rdb_base::rdb_supported();
        let name = m.new_base(fname, rdb);
        let data = if rdb { rdb_base::empty_rdb() } else { vec![] };
        write_synced(&dir.join(&name), &data)
            .map_err(|e| format!("Can't create the AOF base file {name}: {e}"))?;
        log_notice!("Creating AOF base file {name} on server start");
    }
    let existing = !m.incrs.is_empty();
    let name = match m.incrs.last() {
        Some(f) => f.name.clone(),
        None => m.new_incr(fname),
    };
    let file = open_append(&dir.join(&name), false)
        .map_err(|e| format!("Can't open the append-only file {name}: {e}"))?;
    let size = file.metadata().map(|md| md.len()).unwrap_or(0);
    manifest::persist(dir, fname, &m)?;
    if existing {
        log_notice!("Opening AOF incr file {name} on server start");
    } else {
        log_notice!("Creating AOF incr file {name} on server start");
    }
    let st = &srv.persist().aof;
    let size_of =
        |f: &manifest::AofFile| std::fs::metadata(dir.join(&f.name)).map_or(0, |md| md.len());
    let total: u64 = m.load_order().into_iter().map(size_of).sum();
    st.core
        .base_size
        .store(m.base.as_ref().map_or(0, size_of), Relaxed);
    st.core.current_size.store(total, Relaxed);
    *st.manifest.lock() = m;
    let _ = st.core.switch_to(file, size);
    start_recording(srv);
    Ok(())
}

fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    f.sync_all()?;
    if let Some(d) = path.parent() {
        manifest::fsync_dir(d)?;
    }
    Ok(())
}

/// Subscribes the sink (once), starts the once-a-second thread, and turns
/// recording on.
fn start_recording<H: Host>(srv: &Arc<H>) {
    subscribe(srv);
    srv.persist().aof.core.active.store(true, Relaxed);
}

fn subscribe<H: Host>(srv: &Arc<H>) {
    let st = &srv.persist().aof;
    if st.subscribed.swap(true, AcqRel) {
        return;
    }
    srv.core().effects.subscribe(st.core.clone());
    let weak = Arc::downgrade(srv);
    let _ = std::thread::Builder::new()
        .name("lattice-aof-fsync".into())
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
            let Some(srv) = weak.upgrade() else { return };
            if srv.persist().aof.core.is_open() {
                srv.persist().aof.core.tick();
            }
        });
}

/// After CONFIG SET: applies the AOF settings, turning the AOF on (with a
/// rewrite, as Redis) or off. Err: it could not be turned on.
pub(crate) fn config_changed<H: Host>(srv: &Arc<H>) -> Result<(), String> {
    load_settings(srv);
    let want = srv.core().config.read().get_bool("appendonly");
    let st = &srv.persist().aof;
    let on = st.core.active.load(Relaxed) || st.core.is_open();
    if want && !on && !st.wait_rewrite.load(Relaxed) {
        subscribe(srv);
        st.wait_rewrite.store(true, Relaxed);
        match rewrite::start(srv) {
            Ok(()) => {}
            Err(StartError::Busy) | Err(StartError::InProgress) => {
                log_warning!("AOF was enabled but there is already another background operation. An AOF background was scheduled to start when possible.");
                st.rw.lock().scheduled = true;
            }
            Err(StartError::Failed(e)) => {
                st.wait_rewrite.store(false, Relaxed);
                log_warning!("Redis needs to enable the AOF but can't trigger a background AOF rewrite operation. Check the above logs for more info about the error: {e}");
                return Err("Unable to turn on AOF. Check server logs.".into());
            }
        }
    } else if !want && (on || st.wait_rewrite.load(Relaxed)) {
        // Under the manifest lock: a rewrite's cut checks these under it.
        let _m = st.manifest.lock();
        st.wait_rewrite.store(false, Relaxed);
        st.core.close();
        st.rw.lock().scheduled = false;
        log_notice!("AOF stopped");
    }
    // `aof-disable-auto-gc no` deletes the history kept meanwhile.
    rewrite::delete_history(srv);
    Ok(())
}

/// Once per cron pass (worker 0): scheduled rewrites and the automatic
/// rewrite on growth (auto-aof-rewrite-percentage / -min-size).
pub(crate) fn cron<H: Host>(srv: &Arc<H>) {
    let st = &srv.persist().aof;
    if st.core.active.load(Relaxed) {
        note_aux(srv);
    }
    let (scheduled, busy) = {
        let rw = st.rw.lock();
        (rw.scheduled, rw.in_progress)
    };
    if busy {
        return;
    }
    if scheduled {
        if !srv.persist().snapshot.running() {
            let _ = rewrite::start(srv);
        }
        return;
    }
    if !st.core.active.load(Relaxed) {
        return;
    }
    let hot = &srv.core().hot.persistence;
    let perc = hot.auto_aof_rewrite_percentage.load(Relaxed);
    let min = hot.auto_aof_rewrite_min_size.load(Relaxed);
    let size = st.core.current_size.load(Relaxed);
    if perc <= 0 || size <= min {
        return;
    }
    let base = st.core.base_size.load(Relaxed).max(1);
    let growth = (size * 100 / base) as i64 - 100;
    if growth >= perc {
        log_notice!("Starting automatic rewriting of AOF on {growth}% growth");
        let _ = rewrite::start(srv);
    }
}

/// Once a second: the aux fields that changed (an active node's link
/// positions), as annotations after the records written so far.
fn note_aux(srv: &impl Host) {
    static LAST_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = crate::keyspace::hlc::unix_ms();
    if now.saturating_sub(LAST_MS.load(Relaxed)) < 1000 {
        return;
    }
    LAST_MS.store(now, Relaxed);
    let notes = srv.aof_notes(false);
    srv.persist().aof.core.note_aux(&notes);
}

/// BGREWRITEAOF: the status line to reply.
pub(crate) fn bgrewriteaof<H: Host>(srv: &Arc<H>) -> Result<&'static str, CmdError> {
    match rewrite::start(srv) {
        Ok(()) => Ok("Background append only file rewriting started"),
        Err(StartError::InProgress) => Err(CmdError::err(
            "Background append only file rewriting already in progress",
        )),
        Err(StartError::Busy) => {
            srv.persist().aof.rw.lock().scheduled = true;
            Ok("Background append only file rewriting scheduled")
        }
        Err(StartError::Failed(_)) => Err(CmdError::err(
            "Can't execute an AOF background rewriting. Please check the server logs for more information.",
        )),
    }
}

/// The aof_* fields of INFO persistence, in Redis's order; Redis puts the
/// module_fork_* pair between the always-present block and the block shown
/// while the AOF is on, so those two fields are here too.
pub(crate) fn info_fields(srv: &impl Host) -> Fields {
    let st = &srv.persist().aof;
    let on = srv.core().config.read().get_bool("appendonly");
    let rw = st.rw.lock();
    let current = rw.started.map_or(-1, |t| t.elapsed().as_secs() as i64);
    let core = &st.core;
    let ok = |b: bool| if b { "ok" } else { "err" };
    let mut f = Fields::new();
    f.add("aof_enabled", on)
        .add("aof_rewrite_in_progress", rw.in_progress)
        .add("aof_rewrite_scheduled", rw.scheduled)
        .add("aof_last_rewrite_time_sec", rw.last_time_sec)
        .add("aof_current_rewrite_time_sec", current)
        .add("aof_last_bgrewrite_status", ok(rw.last_ok))
        .add("aof_rewrites", rw.rewrites)
        .add("aof_rewrites_consecutive_failures", rw.consecutive_failures)
        .add("aof_last_write_status", ok(!core.write_err.load(Relaxed)))
        .add("aof_last_cow_size", 0)
        .add("module_fork_in_progress", 0)
        .add("module_fork_last_cow_size", 0);
    if on {
        f.add("aof_current_size", core.current_size.load(Relaxed))
            .add("aof_base_size", core.base_size.load(Relaxed))
            .add("aof_pending_rewrite", rw.scheduled)
            .add("aof_buffer_length", core.buffered())
            .add("aof_pending_bio_fsync", 0)
            .add("aof_delayed_fsync", core.delayed_fsync.load(Relaxed));
    }
    f
}

/// DEBUG LOADAOF: flushes the AOF, empties the keyspace and loads the AOF
/// again from the manifest on disk (deleting history files first). Exits if
/// it cannot be loaded, as Redis does. Recording pauses meanwhile so the
/// replayed commands are not appended again, and other clients get
/// -LOADING, as Redis's (its integration/aof "EVAL timeout with slow
/// verbatim Lua script from AOF").
pub(crate) fn debug_loadaof<H: Host>(srv: &Arc<H>) {
    let st = &srv.persist().aof;
    let was_on = st.core.active.load(Relaxed);
    if was_on {
        st.core.flush(true);
    }
    st.core.active.store(false, Relaxed);
    crate::persistence::load::while_loading(&**srv, || reload_files(srv));
    st.core.active.store(was_on, Relaxed);
    log_warning!("Append Only File loaded by DEBUG LOADAOF");
}

/// DEBUG LOADAOF's load: the keyspace emptied, the manifest read again, the
/// files replayed; exits if they cannot be loaded, as Redis does.
fn reload_files<H: Host>(srv: &Arc<H>) {
    let st = &srv.persist().aof;
    crate::persistence::load::empty_all(srv);
    let (dir, fname) = names(srv);
    match manifest::load(&dir, &fname) {
        Ok(m) => *st.manifest.lock() = m.unwrap_or_default(),
        Err(e) => {
            log_warning!("{e}");
            std::process::exit(1);
        }
    }
    rewrite::delete_history(srv);
    let m = st.manifest.lock().clone();
    if let Err(e) = load_files(srv, &dir, &fname, &m) {
        if !e.is_empty() {
            log_warning!("{e}");
        }
        std::process::exit(1);
    }
}

/// DEBUG AOF-FLUSH-SLEEP: sleep before each AOF write (tests use it to
/// check that replies wait for the write).
pub(crate) fn set_flush_sleep(srv: &impl Host, us: u64) {
    srv.persist().aof.core.flush_sleep_us.store(us, Relaxed);
}

/// At shutdown: everything buffered is written and fsynced.
pub(crate) fn on_shutdown(srv: &impl Host) {
    let core = &srv.persist().aof.core;
    if core.is_open() {
        core.flush(true);
    }
}
