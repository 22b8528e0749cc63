//! AOF rewrite: a new base file written from a point-in-time snapshot, and
//! the manifest bookkeeping around it (Redis 7's multi-part rewrite).
//!
//! The snapshot captures the keyspace at one instant (the cut, taken with
//! every shard locked). At the cut the writer switches to a new INCR file,
//! already listed in a persisted manifest, so each write lands either in the
//! snapshot or in the new incr, never both and never neither. When the base
//! is complete a new manifest names it, and the old base and incr files
//! become history and are deleted (unless `aof-disable-auto-gc`). A crash at
//! any point leaves a manifest that loads exactly what was acknowledged.
//!
//! Turning the AOF on at runtime is a rewrite too: recording starts at the
//! cut, into an incr file that enters the manifest only with its base.
//!
//! [`encode_entry_commands`] is the AOF form of one key, used by the snapshot
//! for `SnapFormat::Aof` bases.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use std::time::Instant;

use super::{manifest, AofState};
use crate::keyspace::{Entry, Value};
use crate::persistence::Host;
use crate::protocol::request as resp;
use crate::{log_notice, log_warning};

/// Elements per command in a rewritten collection (AOF_REWRITE_ITEMS_PER_CMD).
const ITEMS_PER_CMD: usize = 64;

/// A stream as Redis's rewriteStreamObject writes it: an XADD per entry
/// (an empty stream: one XADD 0-1 trimmed away by MAXLEN 0), then XSETID
/// with its last ID, entries added and largest deleted ID, then per group
/// XGROUP CREATE ... ENTRIESREAD, an XCLAIM ... FORCE per pending entry and
/// XGROUP CREATECONSUMER for consumers holding none.
fn stream_commands(
    out: &mut Vec<u8>,
    key: &[u8],
    x: &crate::keyspace::stream::StreamValue,
    stamp: Option<u64>,
) {
    use crate::keyspace::stream::StreamId;
    let cmd = |out: &mut Vec<u8>, argv: &[&[u8]]| {
        if let Some(s) = stamp {
            super::writer::write_stamp(out, s);
        }
        resp::command(out, argv);
    };
    for (id, f) in x.range(StreamId::MIN, StreamId::MAX, false) {
        let id = id.text();
        let mut argv: Vec<&[u8]> = vec![b"XADD", key, id.as_bytes()];
        argv.extend(f.items());
        cmd(out, &argv);
    }
    if x.is_empty() {
        cmd(out, &[b"XADD", key, b"MAXLEN", b"0", b"0-1", b"x", b"y"]);
    }
    let last = x.last_id.text();
    let added = x.entries_added.to_string();
    let del = x.max_deleted.text();
    cmd(
        out,
        &[
            b"XSETID",
            key,
            last.as_bytes(),
            b"ENTRIESADDED",
            added.as_bytes(),
            b"MAXDELETEDID",
            del.as_bytes(),
        ],
    );
    for (name, g) in &x.groups {
        let (id, read) = (g.last_id.text(), g.entries_read.to_string());
        let create: [&[u8]; 7] = [
            b"XGROUP",
            b"CREATE",
            key,
            name,
            id.as_bytes(),
            b"ENTRIESREAD",
            read.as_bytes(),
        ];
        cmd(out, &create);
        for cname in g.consumers.keys() {
            if g.pel.count_of(cname) == 0 {
                cmd(out, &[b"XGROUP", b"CREATECONSUMER", key, name, cname]);
            }
            for (id, n) in g.pel.of(cname) {
                let (id, time, count) = (
                    id.text(),
                    n.delivery_time.to_string(),
                    n.delivery_count.to_string(),
                );
                let argv: [&[u8]; 12] = [
                    b"XCLAIM",
                    key,
                    name,
                    cname,
                    b"0",
                    id.as_bytes(),
                    b"TIME",
                    time.as_bytes(),
                    b"RETRYCOUNT",
                    count.as_bytes(),
                    b"JUSTID",
                    b"FORCE",
                ];
                cmd(out, &argv);
            }
        }
    }
}

/// Appends the commands that rebuild `e`: SET, or RPUSH / HMSET / SADD /
/// ZADD in batches of 64 elements, then PEXPIREAT for a TTL; with a
/// `stamp` (active replication), each after its stamp annotation.
pub(crate) fn encode_entry_commands(out: &mut Vec<u8>, e: &Entry, stamp: Option<u64>) {
    let key: &[u8] = &e.key;
    let note = |out: &mut Vec<u8>| {
        if let Some(s) = stamp {
            super::writer::write_stamp(out, s);
        }
    };
    match &e.value {
        Value::Str(s) => {
            note(out);
            s.with_bytes(|v| resp::command(out, &[&b"SET"[..], key, v]))
        }
        Value::List(l) => batched(out, (b"RPUSH", stamp), key, l.len(), 1, |f| {
            for item in l.iter() {
                f(&[item]);
            }
        }),
        Value::Set(s) => batched(out, (b"SADD", stamp), key, s.len(), 1, |f| {
            for m in s.iter() {
                f(&[&m]);
            }
        }),
        Value::Hash(h) => batched(out, (b"HMSET", stamp), key, h.len(), 2, |f| {
            for (field, v) in h.iter() {
                f(&[field, v]);
            }
        }),
        Value::Stream(x) => stream_commands(out, key, x, stamp),
        // A job as its whole value (owner and next run included): what
        // KEYDB.CRON propagates too.
        Value::Cron(_) => {
            note(out);
            let payload = crate::persistence::rdb::encode::dump_payload(&e.value, false);
            resp::command(out, &[&b"RESTORE"[..], key, b"0", &payload, b"REPLACE"]);
        }
        Value::ZSet(z) => batched(out, (b"ZADD", stamp), key, z.len(), 2, |f| {
            for (m, score) in z.iter() {
                let s = crate::protocol::format_double(score);
                f(&[s.as_bytes(), m]);
            }
        }),
    }
    let at = e.expire_at();
    if at != 0 {
        note(out);
        resp::command(out, &[&b"PEXPIREAT"[..], key, at.to_string().as_bytes()]);
    }
}

/// Writes `total` elements of `width` arguments each as `cmd key ...`
/// commands of at most 64 elements (each after `stamp`'s annotation if
/// given); `each` feeds the elements in order.
fn batched(
    out: &mut Vec<u8>,
    (cmd, stamp): (&[u8], Option<u64>),
    key: &[u8],
    total: usize,
    width: usize,
    each: impl FnOnce(&mut dyn FnMut(&[&[u8]])),
) {
    let (mut left, mut in_cmd) = (total, 0);
    each(&mut |args: &[&[u8]]| {
        if in_cmd == 0 {
            if let Some(s) = stamp {
                super::writer::write_stamp(out, s);
            }
            let n = left.min(ITEMS_PER_CMD);
            resp::array(out, 2 + n * width);
            resp::bulk(out, cmd);
            resp::bulk(out, key);
            in_cmd = n;
            left -= n;
        }
        for a in args {
            resp::bulk(out, a);
        }
        in_cmd -= 1;
    });
}

/// Appends `SELECT db` (a rewritten base selects each non-empty database).
pub(crate) fn encode_select(out: &mut Vec<u8>, db: usize) {
    resp::select(out, db);
}

/// Rewrite bookkeeping shown by INFO.
pub struct RewriteStats {
    pub in_progress: bool,
    pub scheduled: bool,
    pub started: Option<Instant>,
    pub last_time_sec: i64,
    pub last_ok: bool,
    pub rewrites: u64,
    pub consecutive_failures: u64,
}

impl Default for RewriteStats {
    fn default() -> Self {
        RewriteStats {
            in_progress: false,
            scheduled: false,
            started: None,
            last_time_sec: -1,
            last_ok: true,
            rewrites: 0,
            consecutive_failures: 0,
        }
    }
}

/// Why a rewrite did not start.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StartError {
    InProgress,
    /// Another snapshot (BGSAVE) runs: try again when it ends.
    Busy,
    Failed(String),
}

/// The snapshot request (the shape of `persistence::snapshot`'s job).
pub(crate) struct Job {
    pub path: PathBuf,
    pub rdb: bool,
    pub at_cut: Box<dyn FnOnce() + Send>,
    pub done: Box<dyn FnOnce(std::io::Result<u64>) + Send>,
}

/// Starts a rewrite. While the AOF is being turned on (`wait_rewrite`),
/// recording starts at the cut.
pub(crate) fn start<H: Host>(srv: &Arc<H>) -> Result<(), StartError> {
    let st = &srv.persist().aof;
    {
        let mut rw = st.rw.lock();
        if rw.in_progress {
            return Err(StartError::InProgress);
        }
        rw.in_progress = true;
        rw.scheduled = false;
        rw.started = Some(Instant::now());
    }
    let waiting = st.wait_rewrite.load(Relaxed);
    let (dir, fname, rdb) = paths(srv);
    let next = std::fs::create_dir_all(&dir)
        .map_err(|e| {
            format!(
                "Can't open or create append-only dir {}: {e}",
                dir.display()
            )
        })
        .and_then(|()| prepare_incr(srv, waiting));
    let next = match next {
        Ok(n) => n,
        Err(e) => {
            log_warning!("{e}");
            finished(st, false);
            return Err(StartError::Failed(e));
        }
    };
    let listed = next.as_ref().filter(|_| !waiting).map(|n| n.1.clone());
    let base_name = st.manifest.lock().clone().new_base(&fname, rdb);
    match super::snap::start(srv, job(srv, dir.join(&base_name), rdb, next, waiting)) {
        Ok(()) => {
            log_notice!("Background append only file rewriting started");
            Ok(())
        }
        Err(e) => {
            // An incr already in the manifest takes the appends from now
            // on (harmless at any instant: it follows the current one).
            if let Some(name) = listed {
                let _m = st.manifest.lock();
                if st.core.active.load(Relaxed) {
                    if let Ok(f) = super::open_append(&dir.join(name), false) {
                        let _ = st.core.switch_to(f, 0);
                    }
                }
            }
            let mut rw = st.rw.lock();
            rw.in_progress = false;
            rw.started = None;
            // Another snapshot runs: the cron starts this one after it.
            rw.scheduled = e == StartError::Busy;
            Err(e)
        }
    }
}

/// The snapshot request: switch files at the cut, install the base when done.
fn job<H: Host>(
    srv: &Arc<H>,
    path: PathBuf,
    rdb: bool,
    next: Option<(std::fs::File, String)>,
    waiting: bool,
) -> Job {
    let cut_ok = Arc::new(AtomicBool::new(false));
    let base_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Job {
        path,
        rdb,
        at_cut: {
            let (srv, cut_ok) = (srv.clone(), cut_ok.clone());
            Box::new(move || cut_ok.store(at_cut(&srv, next, waiting), Relaxed))
        },
        done: {
            let srv = srv.clone();
            Box::new(move |res| done(&srv, res, cut_ok.load(Relaxed), &base_name, rdb, waiting))
        },
    }
}

fn paths(srv: &impl Host) -> (PathBuf, String, bool) {
    let cfg = srv.core().config.read();
    let rdb = cfg.get_bool("aof-use-rdb-preamble") && super::rdb_base::rdb_supported();
    (
        PathBuf::from(cfg.get_str("appenddirname")),
        cfg.get_str("appendfilename"),
        rdb,
    )
}

/// Creates the incr file the rewrite switches to at its cut (None with the
/// AOF off). With the AOF on it enters the persisted manifest now, so the
/// cut only swaps file handles; while turning on, it enters the manifest
/// with its base (Redis's temp incr file).
fn prepare_incr(srv: &impl Host, waiting: bool) -> Result<Option<(std::fs::File, String)>, String> {
    let st = &srv.persist().aof;
    if !waiting && !st.core.active.load(Relaxed) {
        return Ok(None);
    }
    let (dir, fname, _) = paths(srv);
    let mut m = st.manifest.lock();
    let name = m.clone().new_incr(&fname);
    let file = super::open_append(&dir.join(&name), true)
        .map_err(|e| format!("Can't open the append-only file {name}: {e}"))?;
    if !waiting {
        m.new_incr(&fname);
        if let Err(e) = manifest::persist(&dir, &fname, &m) {
            m.incrs.pop();
            m.incr_seq -= 1;
            let _ = std::fs::remove_file(dir.join(&name));
            return Err(e);
        }
        log_notice!("Creating AOF incr file {name} on background rewrite");
    }
    Ok(Some((file, name)))
}

/// At the cut (every shard locked): appends go to the new incr file from
/// here. False if the buffer could not be written to the old one first
/// (the base would then repeat writes the new incr also holds).
fn at_cut<H: Host>(srv: &Arc<H>, next: Option<(std::fs::File, String)>, waiting: bool) -> bool {
    let st = &srv.persist().aof;
    let Some((file, name)) = next else {
        return true;
    };
    let (dir, fname, _) = paths(srv);
    // Held while switching: turning the AOF off takes it too.
    let mut m = st.manifest.lock();
    let still_on = if waiting {
        st.wait_rewrite.load(Relaxed)
    } else {
        st.core.active.load(Relaxed)
    };
    if !still_on {
        // Turned off since the rewrite started: nothing to record.
        if waiting {
            let _ = std::fs::remove_file(dir.join(&name));
        }
        return true;
    }
    if waiting {
        m.new_incr(&fname);
    }
    let ok = st.core.switch_to(file, 0).is_ok();
    if waiting {
        st.core.active.store(true, Relaxed);
        log_notice!("Creating AOF incr file {name} on background rewrite");
    }
    ok
}

/// The snapshot finished (its own thread): install the base or give up.
fn done<H: Host>(
    srv: &Arc<H>,
    res: std::io::Result<u64>,
    cut_ok: bool,
    base_name: &str,
    rdb: bool,
    waiting: bool,
) {
    let st = &srv.persist().aof;
    let (dir, _, _) = paths(srv);
    let outcome = match res {
        Ok(_) if !cut_ok => Err("could not switch to a new incr file".to_string()),
        Ok(bytes) => install(srv, base_name, rdb, bytes),
        Err(e) => Err(e.to_string()),
    };
    match outcome {
        Ok(()) => {
            log_notice!("Background AOF rewrite terminated with success");
            log_notice!("Background AOF rewrite finished successfully");
            if waiting {
                st.wait_rewrite.store(false, Relaxed);
            }
            // History goes before the rewrite shows as finished, as in
            // Redis's done handler: a client that saw it end reads a
            // manifest without history.
            delete_history(srv);
            finished(st, true);
        }
        Err(e) => {
            let _ = std::fs::remove_file(dir.join(base_name));
            log_warning!("Background AOF rewrite failed: {e}");
            finished(st, false);
            // Still turning on: try again from the cron (Redis retries too).
            if waiting && st.wait_rewrite.load(Relaxed) {
                st.rw.lock().scheduled = true;
            }
        }
    }
}

/// Writes the manifest naming the new base; the old base and the incr
/// files it covers become history.
fn install(srv: &impl Host, base_name: &str, rdb: bool, bytes: u64) -> Result<(), String> {
    let st = &srv.persist().aof;
    let (dir, fname, _) = paths(srv);
    let _ = manifest::fsync_dir(&dir);
    let mut m = st.manifest.lock();
    let mut next = m.clone();
    let name = next.new_base(&fname, rdb);
    if name != base_name {
        return Err(format!("unexpected base name {name}"));
    }
    let keep = st.core.active.load(Relaxed) as usize;
    next.incrs_to_history(keep);
    manifest::persist(&dir, &fname, &next)?;
    *m = next;
    st.core.base_size.store(bytes, Relaxed);
    let incr = if keep == 1 { st.core.incr_size() } else { 0 };
    st.core.current_size.store(bytes + incr, Relaxed);
    Ok(())
}

fn finished(st: &AofState, ok: bool) {
    let mut rw = st.rw.lock();
    rw.in_progress = false;
    if let Some(t) = rw.started.take() {
        rw.last_time_sec = t.elapsed().as_secs() as i64;
    }
    rw.last_ok = ok;
    if ok {
        rw.rewrites += 1;
        rw.consecutive_failures = 0;
    } else {
        rw.consecutive_failures += 1;
    }
}

/// Deletes history files (aofDelHistoryFiles), unless `aof-disable-auto-gc`.
pub(crate) fn delete_history(srv: &impl Host) {
    let st = &srv.persist().aof;
    if srv.core().config.read().get_bool("aof-disable-auto-gc") {
        return;
    }
    let (dir, fname, _) = paths(srv);
    let mut m = st.manifest.lock();
    if m.history.is_empty() {
        return;
    }
    for h in std::mem::take(&mut m.history) {
        log_notice!("Removing the history file {} in the background", h.name);
        let _ = std::fs::remove_file(dir.join(&h.name));
    }
    if let Err(e) = manifest::persist(&dir, &fname, &m) {
        log_warning!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::{Key, StrValue};

    #[test]
    fn string_with_ttl() {
        let e = Entry::new(
            Key::from(&b"k"[..]),
            Value::Str(StrValue::from_bytes(b"v")),
            1234,
            1,
        );
        let mut out = vec![];
        encode_entry_commands(&mut out, &e, None);
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*3\r\n$9\r\nPEXPIREAT\r\n$1\r\nk\r\n$4\r\n1234\r\n"
        );
        let mut out = vec![];
        encode_entry_commands(&mut out, &e, Some(77));
        assert_eq!(
            out,
            b"#LV:77\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n#LV:77\r\n*3\r\n$9\r\nPEXPIREAT\r\n$1\r\nk\r\n$4\r\n1234\r\n"
        );
    }

    #[test]
    fn batches_of_64() {
        let mut out = vec![];
        let items: Vec<Vec<u8>> = (0..130).map(|i| i.to_string().into_bytes()).collect();
        batched(&mut out, (b"RPUSH", None), b"l", items.len(), 1, |f| {
            for i in &items {
                f(&[i]);
            }
        });
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("RPUSH").count(), 3);
        assert!(text.starts_with("*66\r\n$5\r\nRPUSH"));
        assert!(text.contains("*4\r\n$5\r\nRPUSH\r\n$1\r\nl\r\n$3\r\n128\r\n"));
    }
}
