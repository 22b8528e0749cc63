//! `rdb-del-sync-files`: an instance without persistence (no save points,
//! appendonly off) keeps no RDB file that a replication sync left behind,
//! as Redis 7.0's replicas and masters.
//!
//! A master's disk-based sync writes its own `temp-repl-<pid>-<client>.rdb`
//! and removes it once sent, whatever this says, so the file left behind is
//! a replica's: the payload its link received (`repl-diskless-load
//! disabled`) is loaded, then renamed to `dbfilename`. The load notes the
//! file's identity (device and inode, which the rename keeps); worker 0's
//! cron removes `dbfilename` when it is still that very file, with Redis's
//! log line, at most one tick after the rename. The note is dropped once
//! used, when `dbfilename` becomes another file (a SAVE replaces it with a
//! new inode), or after [`NOTE_TTL`], so a file written later is never the
//! one removed. The replication link's code is not involved (DECISIONS 339).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Server;

/// How long a noted sync file may take to become `dbfilename`.
const NOTE_TTL: Duration = Duration::from_secs(10);

/// The payload file a replica loaded last: (device, inode, when).
#[derive(Default)]
pub(crate) struct SyncFileNote(Mutex<Option<(u64, u64, Instant)>>);

/// Whether `rdb-del-sync-files` is on and persistence off (Redis's
/// allPersistenceDisabled: no save points, appendonly off).
fn wanted(c: &crate::config::Config) -> bool {
    c.get_bool("rdb-del-sync-files") && c.get_str("save").is_empty() && !c.get_bool("appendonly")
}

/// After a replica loaded the sync payload at `path`: remembers which file
/// it is, when the file is not to be kept.
pub(crate) fn loaded(srv: &Server, path: &Path) {
    if !wanted(&srv.config.read()) {
        return;
    }
    if let Ok(m) = std::fs::metadata(path) {
        *srv.sync_file.0.lock() = Some((m.dev(), m.ino(), Instant::now()));
    }
}

/// Worker 0's cron: removes the noted file once it is `dbfilename`, if it
/// is still not to be kept.
pub(crate) fn cron(srv: &Server) {
    let mut note = srv.sync_file.0.lock();
    let Some((dev, ino, when)) = *note else {
        return;
    };
    let (on, dbfile) = {
        let c = srv.config.read();
        (wanted(&c), c.get_str("dbfilename"))
    };
    match std::fs::metadata(&dbfile) {
        Ok(m) if m.dev() == dev && m.ino() == ino => {
            *note = None;
            if on {
                crate::log_notice!("Removing the RDB file obtained from the master. This replica has persistence disabled");
                let _ = std::fs::remove_file(&dbfile);
            }
        }
        // Not renamed yet (or the rename failed): wait, within the TTL.
        Err(_) if when.elapsed() < NOTE_TTL => {}
        Ok(_) if when.elapsed() < NOTE_TTL => {}
        _ => *note = None,
    }
}
