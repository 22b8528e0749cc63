//! INFO replication's replica fields, from master_host to
//! master_sync_stage_seconds. Reads the link's state, changes nothing.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::*;

use super::ReplicaSide;
use crate::keyspace::hlc::unix_ms;
use crate::replication::host::Host;

impl ReplicaSide {
    /// INFO's replica-only fields, from master_host to replica_announced.
    pub fn info_fields<H: Host>(&self, srv: &H, o: &mut String) {
        let (host, port) = self.master.lock().clone().unwrap_or_default();
        let up = self.link_up();
        let now = unix_ms();
        let last_io = (now.saturating_sub(self.last_io_ms.load(Relaxed)) / 1000) as i64;
        let stage = self.stage.get();
        let syncing = stage.syncing();
        let offset = srv.repl().backlog.end();
        let _ = write!(
            o,
            "master_host:{host}\r\nmaster_port:{port}\r\nmaster_link_status:{}\r\n\
             master_last_io_seconds_ago:{}\r\nmaster_sync_in_progress:{}\r\n\
             slave_read_repl_offset:{offset}\r\nslave_repl_offset:{offset}\r\n",
            if up { "up" } else { "down" },
            if up { last_io } else { -1 },
            syncing as u8,
        );
        if syncing {
            let (total, read) = (self.sync_total.load(Relaxed), self.sync_read.load(Relaxed));
            let perc = if total > 0 {
                read as f64 * 100.0 / total as f64
            } else {
                0.0
            };
            let _ = write!(
                o,
                "master_sync_total_bytes:{total}\r\nmaster_sync_read_bytes:{read}\r\n\
                 master_sync_left_bytes:{}\r\nmaster_sync_perc:{perc:.2}\r\n\
                 master_sync_last_io_seconds_ago:{last_io}\r\n",
                // Negative with an EOF mark (size unknown), as Redis prints it.
                total as i64 - read as i64,
            );
        }
        if !up {
            let since = self.down_since_ms.load(Relaxed);
            let secs = if since == 0 {
                -1
            } else {
                (now.saturating_sub(since) / 1000) as i64
            };
            let _ = write!(o, "master_link_down_since_seconds:{secs}\r\n");
        }
        let c = srv.config.read();
        let _ = write!(
            o,
            "slave_priority:{}\r\nslave_read_only:{}\r\nreplica_announced:{}\r\n\
             master_sync_stage:{}\r\nmaster_sync_stage_seconds:{}\r\n",
            c.get_i64("replica-priority"),
            c.get_bool("replica-read-only") as u8,
            c.get_bool("replica-announced") as u8,
            stage.name(),
            self.stage.seconds(),
        );
    }
}
