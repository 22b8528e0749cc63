//! The point-in-time snapshot a rewrite writes its base from.
//!
//! `persistence::snapshot` (the fork-free snapshot shared with BGSAVE) is the
//! real provider; until it is part of this build, this module takes the
//! snapshot itself on a background thread by holding every shard lock while
//! it encodes the keyspace into memory (in AOF format), then writes the file
//! with the locks released. That stalls writers for the encoding time, as
//! Redis's synchronous rewriteAppendOnlyFile does, but keeps the cut exact.

use std::io::Write;
use std::sync::Arc;

use super::rewrite::{encode_entry_commands, encode_select, Job, StartError};
use crate::server::Server;

/// Takes the snapshot `job` describes, in the background.
pub fn start(srv: &Arc<Server>, job: Job) -> Result<(), StartError> {
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
