//! The point-in-time snapshot a rewrite writes its base from.
//!
//! An RDB base (`aof-use-rdb-preamble yes`) comes from
//! `persistence::snapshot`, the fork-free snapshot shared with BGSAVE (one
//! at a time: Busy while a BGSAVE runs). That snapshot writes RDB only, so an
//! AOF-format base is taken here: on a background thread holding every
//! shard lock while the keyspace is encoded into memory, then written with
//! the locks released. That stalls writers for the encoding time, as Redis's
//! synchronous rewriteAppendOnlyFile does, but keeps the cut exact.

use std::io::Write;
use std::sync::Arc;

use super::rewrite::{encode_entry_commands, encode_select, Job, StartError};
use crate::server::Server;

/// Takes the snapshot `job` describes, in the background.
pub fn start(srv: &Arc<Server>, job: Job) -> Result<(), StartError> {
    if job.rdb {
        return start_rdb(srv, job);
    }
    if srv.persist.snapshot.running() {
        return Err(StartError::Busy);
    }
    let srv = srv.clone();
    std::thread::Builder::new()
        .name("lattice-aof-rewrite".into())
        .spawn(move || {
            let Job {
                path, at_cut, done, ..
            } = job;
            let data = {
                let all = srv.keyspace.lock_everything();
                at_cut();
                let mut out = Vec::new();
                if srv.config.read().get_bool("aof-timestamp-enabled") {
                    let now = crate::keyspace::hlc::unix_ms() / 1000;
                    out.extend_from_slice(format!("#TS:{now}\r\n").as_bytes());
                }
                for (db, shards) in all.iter().enumerate() {
                    let mut selected = false;
                    for e in shards.iter().flat_map(|s| s.iter()) {
                        if !selected {
                            encode_select(&mut out, db);
                            selected = true;
                        }
                        encode_entry_commands(&mut out, e);
                    }
                }
                out
            };
            done(write_file(&path, &data).map(|()| data.len() as u64));
        })
        .map(|_| ())
        .map_err(|e| StartError::Failed(e.to_string()))
}

/// Writes `data` to a temp name, fsyncs, renames it to `path`.
fn write_file(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!("temp-rewriteaof-{name}"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// An RDB base through the shared snapshot.
fn start_rdb(srv: &Arc<Server>, job: Job) -> Result<(), StartError> {
    use crate::persistence::snapshot::{self, SnapshotError, SnapshotJob};
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .div_ceil(2);
    let sj = SnapshotJob {
        path: job.path,
        at_cut: Some(job.at_cut),
        done: job.done,
        threads,
        aux: vec![("aof-base".to_string(), "1".to_string())],
    };
    snapshot::start(srv, sj).map_err(|e| match e {
        SnapshotError::Busy => StartError::Busy,
        SnapshotError::Spawn(e) => StartError::Failed(e.to_string()),
    })
}
