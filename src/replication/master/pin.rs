//! What the backlog keeps for replicas: the first byte an attached replica
//! has not acknowledged, and under `repl-lag-policy spill` where a replica
//! that left (`Departed`) would continue, until it returns or its history
//! is gone. `update_keep_from` recomputes the pin and pushes it to the
//! backlog, which trims up to it (DECISIONS 31).

use std::sync::atomic::Ordering::*;

use super::{MasterSide, ReplicaHandle};
use crate::log_warning;
use crate::replication::backlog::Backlog;

/// A replica that left behind the stream's end: where it would continue.
pub(super) struct Departed {
    /// ip:listening-port, how it is recognised when it comes back.
    addr: String,
    from: u64,
}

impl MasterSide {
    /// The lowest offset an attached replica still needs: the first byte
    /// it has not acknowledged. Not the first one unsent: bytes in the
    /// kernel's socket buffers (megabytes) are lost with the connection, and
    /// the partial resync after it needs them.
    fn keep_from(&self) -> Option<u64> {
        self.replicas
            .lock()
            .iter()
            .filter(|r| r.sent.load(Relaxed) != 0)
            .map(|r| r.ack_offset.load(Relaxed) + 1)
            .min()
    }

    /// The lowest offset a departed replica would continue from.
    fn departed_keep_from(&self) -> Option<u64> {
        self.departed.lock().iter().map(|d| d.from).min()
    }

    /// A streaming replica's connection ended: under the spill policy, a
    /// replica that lagged (dropped for `repl-timeout`, or behind what
    /// memory holds) keeps what it has not acknowledged pinned until it
    /// returns (unless it already has, on a new connection). One that was
    /// keeping up gets what Redis gives it: `repl-backlog-size`.
    pub(super) fn depart(&self, b: &Backlog, handle: &ReplicaHandle, timed_out: bool) {
        if b.disk_max.load(Relaxed) == 0 || handle.sent.load(Relaxed) == 0 {
            return;
        }
        let from = handle.ack_offset.load(Relaxed) + 1;
        if !timed_out && from >= b.range().0 {
            return;
        }
        let addr = handle.addr();
        if self.replicas.lock().iter().any(|r| r.addr() == addr) {
            return;
        }
        let mut d = self.departed.lock();
        d.retain(|d| d.addr != addr);
        d.push(Departed { addr, from });
    }

    /// A replica is back (its sync started): it no longer needs its old
    /// position kept.
    pub(super) fn returned(&self, handle: &ReplicaHandle) {
        let addr = handle.addr();
        self.departed.lock().retain(|d| d.addr != addr);
    }

    /// Forgets every departed replica (the history was freed).
    pub fn forget_departed(&self, backlog: &Backlog) {
        self.departed.lock().clear();
        self.update_keep_from(backlog);
    }
    /// Recomputes the backlog's pin: the lowest offset an attached replica
    /// has not acknowledged, or a departed one would continue from.
    /// Departed replicas whose history is gone (past the disk bound, or a
    /// new history) are forgotten with a log line: they will full-sync.
    pub fn update_keep_from(&self, backlog: &Backlog) {
        let mut departed = self.departed.lock();
        departed.retain(|d| {
            let kept = backlog.disk_max.load(Relaxed) != 0 && backlog.can_continue_from(d.from);
            if !kept {
                log_warning!(
                    "Replica {} left at offset {} and its history is no longer kept (repl-backlog-disk-size, or a new history): it will need a full sync",
                    d.addr,
                    d.from
                );
            }
            kept
        });
        drop(departed);
        if backlog.set_pin(self.keep_from(), self.departed_keep_from()) {
            backlog.trim();
        }
    }
}
