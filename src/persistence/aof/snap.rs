//! The point-in-time snapshot a rewrite writes its base from: the fork-free
//! snapshot shared with BGSAVE (`persistence::snapshot`; one at a time, so
//! Busy while a BGSAVE runs), as an RDB file (`aof-use-rdb-preamble yes`)
//! or as commands.

use std::sync::Arc;

use super::rewrite::{Job, StartError};
use crate::persistence::snapshot::{self, SnapFormat, SnapshotError, SnapshotJob};
use crate::persistence::Host;

/// Takes the snapshot `job` describes, in the background.
pub(super) fn start<H: Host>(srv: &Arc<H>, job: Job) -> Result<(), StartError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .div_ceil(2);
    let (format, aux) = if job.rdb {
        let aux = vec![("aof-base".to_string(), "1".to_string())];
        (SnapFormat::Rdb, aux)
    } else {
        (SnapFormat::Aof, Vec::new())
    };
    let sj = SnapshotJob {
        format,
        path: job.path,
        stream: None,
        at_cut: Some(job.at_cut),
        done: job.done,
        threads,
        aux,
    };
    snapshot::start(srv, sj).map_err(|e| match e {
        SnapshotError::Busy => StartError::Busy,
        SnapshotError::Spawn(e) => StartError::Failed(e.to_string()),
    })
}
