//! INFO replication's master fields: the attached replicas (Redis's
//! connected_slaves and slaveN lines, with KeyDB's view of active peers),
//! LatticeDB's lag and back-pressure lines, and the replication buffers'
//! size as Redis counts it. Reads the state, changes nothing.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::*;

use super::MasterSide;
use crate::keyspace::hlc::unix_ms;
use crate::replication::host::Host;

impl MasterSide {
    /// connected_slaves and the slaveN lines.
    /// `keydb`: the peers pulling from us are listed too, as KeyDB lists
    /// them (`keydb_view.rs`).
    pub fn info_fields<H: Host>(&self, srv: &H, o: &mut String, keydb: bool) {
        let list = self.replicas.lock().clone();
        let mut feeds = String::new();
        let n_feeds = match keydb {
            true => crate::replication::keydb_view::info_feeds(
                &srv.repl().active,
                list.len(),
                &mut feeds,
            ),
            false => 0,
        };
        let _ = write!(o, "connected_slaves:{}\r\n", list.len() + n_feeds);
        let lag = srv.hot.min_replicas_max_lag.load(Relaxed);
        if srv.hot.min_replicas_to_write.load(Relaxed) > 0 && lag > 0 {
            let good = self.good_replicas(lag * 1000);
            let _ = write!(o, "min_slaves_good_slaves:{good}\r\n");
        }
        let now = unix_ms();
        for (i, r) in list.iter().enumerate() {
            let _ = write!(
                o,
                "slave{i}:ip={},port={},state={},offset={},lag={}\r\n",
                r.ip,
                r.port.load(Relaxed),
                r.state.lock(),
                r.ack_offset.load(Relaxed),
                now.saturating_sub(r.ack_ms.load(Relaxed)) / 1000,
            );
        }
        o.push_str(&feeds);
    }

    /// LatticeDB's own lines (after Redis's): how far the slowest replica
    /// is, what the backlog holds for it, and the back-pressure applied.
    pub fn lag_fields<H: Host>(&self, srv: &H, o: &mut String) {
        let b = &srv.repl().backlog;
        let lag = self.max_unsent(b.end()).unwrap_or(0);
        let _ = write!(
            o,
            "repl_lag_policy:{}\r\nrepl_max_replica_lag_bytes:{lag}\r\nrepl_backlog_held_bytes:{}\r\n\
             repl_throttled_batches:{}\r\nrepl_throttle_wait_ms:{}\r\nrepl_lag_disconnects:{}\r\n",
            srv.config.read().get_str("repl-lag-policy"),
            b.held(),
            self.throttled.load(Relaxed),
            self.throttle_us.load(Relaxed) / 1000,
            self.lag_disconnects.load(Relaxed),
        );
        let (disk_first, disk_bytes) = b.disk_range();
        let _ = write!(
            o,
            "repl_backlog_disk_bytes:{disk_bytes}\r\nrepl_backlog_disk_first_byte_offset:{disk_first}\r\n\
             repl_backlog_disk_dropped_bytes:{}\r\nrepl_backlog_disk_write_errors:{}\r\n\
             repl_departed_replicas:{}\r\n",
            b.disk_dropped.load(Relaxed),
            b.spill_errors.load(Relaxed),
            self.departed.lock().len(),
        );
    }

    /// INFO's mem_total_replication_buffers, as Redis counts it: the
    /// backlog (up to repl-backlog-size) plus what some replica has not
    /// been sent yet. Redis frees a byte once every replica's socket took
    /// it; we keep it until acknowledged (see `keep_from`), which
    /// `repl_backlog_held_bytes` shows.
    pub fn buffer_bytes<H: Host>(&self, srv: &H) -> usize {
        let b = &srv.repl().backlog;
        let held = b.held();
        let size = srv.config.read().get_i64("repl-backlog-size").max(0) as usize;
        let end = b.end() + 1;
        let unsent = self
            .replicas
            .lock()
            .iter()
            .map(|r| r.sent.load(Relaxed))
            .filter(|&s| s != 0)
            .map(|s| end.saturating_sub(s) as usize)
            .max()
            .unwrap_or(0);
        held.min(size.max(unsent))
    }
}
