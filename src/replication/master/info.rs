//! INFO replication's master fields: the attached replicas (Redis's
//! connected_slaves and slaveN fields, with KeyDB's view of active peers),
//! LatticeDB's lag and back-pressure lines, and the replication buffers'
//! size as Redis counts it. Reads the state, changes nothing.

use std::sync::atomic::Ordering::*;

use super::MasterSide;
use crate::core::info::Fields;
use crate::keyspace::hlc::unix_ms;
use crate::replication::host::Host;

impl MasterSide {
    /// connected_slaves and the slaveN fields.
    /// `keydb`: the peers pulling from us are listed too, as KeyDB lists
    /// them (`keydb_view.rs`).
    pub fn info_fields<H: Host>(&self, srv: &H, keydb: bool) -> Fields {
        let list = self.replicas.lock().clone();
        let feeds = match keydb {
            true => crate::replication::keydb_view::info_feeds(&srv.repl().active, list.len()),
            false => Fields::new(),
        };
        let mut f = Fields::new();
        f.add("connected_slaves", list.len() + feeds.len());
        let lag = srv.hot.min_replicas_max_lag.load(Relaxed);
        if srv.hot.min_replicas_to_write.load(Relaxed) > 0 && lag > 0 {
            f.add("min_slaves_good_slaves", self.good_replicas(lag * 1000));
        }
        let now = unix_ms();
        for (i, r) in list.iter().enumerate() {
            let mut line = Fields::new();
            line.add("ip", r.ip.clone())
                .add("port", r.port.load(Relaxed))
                .add("state", r.state.lock().to_string())
                .add("offset", r.ack_offset.load(Relaxed))
                .add("lag", now.saturating_sub(r.ack_ms.load(Relaxed)) / 1000);
            f.add(format!("slave{i}"), line);
        }
        f.append(feeds);
        f
    }

    /// LatticeDB's own fields (after Redis's): how far the slowest replica
    /// is, what the backlog holds for it, and the back-pressure applied.
    pub fn lag_fields<H: Host>(&self, srv: &H) -> Fields {
        let b = &srv.repl().backlog;
        let lag = self.max_unsent(b.end()).unwrap_or(0);
        let (disk_first, disk_bytes) = b.disk_range();
        let mut f = Fields::new();
        f.add(
            "repl_lag_policy",
            srv.config.read().get_str("repl-lag-policy").to_string(),
        )
        .add("repl_max_replica_lag_bytes", lag)
        .add("repl_backlog_held_bytes", b.held())
        .add("repl_throttled_batches", self.throttled.load(Relaxed))
        .add(
            "repl_throttle_wait_ms",
            self.throttle_us.load(Relaxed) / 1000,
        )
        .add("repl_lag_disconnects", self.lag_disconnects.load(Relaxed))
        .add("repl_backlog_disk_bytes", disk_bytes)
        .add("repl_backlog_disk_first_byte_offset", disk_first)
        .add(
            "repl_backlog_disk_dropped_bytes",
            b.disk_dropped.load(Relaxed),
        )
        .add(
            "repl_backlog_disk_write_errors",
            b.spill_errors.load(Relaxed),
        )
        .add("repl_departed_replicas", self.departed.lock().len());
        f
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
