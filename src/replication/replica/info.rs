//! INFO replication's replica fields, from master_host to
//! master_sync_stage_seconds. Reads the link's state, changes nothing.

use std::sync::atomic::Ordering::*;

use super::ReplicaSide;
use crate::core::info::{Fields, Value};
use crate::keyspace::hlc::unix_ms;
use crate::replication::host::Host;

impl ReplicaSide {
    /// INFO's replica-only fields, from master_host to replica_announced.
    pub fn info_fields<H: Host>(&self, srv: &H) -> Fields {
        let (host, port) = self.master.lock().clone().unwrap_or_default();
        let up = self.link_up();
        let now = unix_ms();
        let last_io = (now.saturating_sub(self.last_io_ms.load(Relaxed)) / 1000) as i64;
        let stage = self.stage.get();
        let syncing = stage.syncing();
        let offset = srv.repl().backlog.end();
        let mut f = Fields::new();
        f.add("master_host", host)
            .add("master_port", port)
            .add("master_link_status", if up { "up" } else { "down" })
            .add("master_last_io_seconds_ago", if up { last_io } else { -1 })
            .add("master_sync_in_progress", syncing)
            .add("slave_read_repl_offset", offset)
            .add("slave_repl_offset", offset);
        if syncing {
            let (total, read) = (self.sync_total.load(Relaxed), self.sync_read.load(Relaxed));
            let perc = if total > 0 {
                read as f64 * 100.0 / total as f64
            } else {
                0.0
            };
            f.add("master_sync_total_bytes", total)
                .add("master_sync_read_bytes", read)
                // Negative with an EOF mark (size unknown), as Redis prints it.
                .add("master_sync_left_bytes", total as i64 - read as i64)
                .add("master_sync_perc", Value::float(perc, 2))
                .add("master_sync_last_io_seconds_ago", last_io);
        }
        if !up {
            let since = self.down_since_ms.load(Relaxed);
            let secs = if since == 0 {
                -1
            } else {
                (now.saturating_sub(since) / 1000) as i64
            };
            f.add("master_link_down_since_seconds", secs);
        }
        let c = srv.config.read();
        f.add("slave_priority", c.get_i64("replica-priority"))
            .add("slave_read_only", c.get_bool("replica-read-only"))
            .add("replica_announced", c.get_bool("replica-announced"))
            .add("master_sync_stage", stage.name())
            .add("master_sync_stage_seconds", self.stage.seconds());
        f
    }
}
