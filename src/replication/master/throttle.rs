//! Back-pressure under `repl-lag-policy throttle`: a writing
//! connection's replies wait in proportion to how far the slowest replica
//! lags past `repl-throttle-lag` (DECISIONS 31).

use std::sync::atomic::Ordering::*;
use std::time::Duration;

use super::MasterSide;
use crate::replication::backlog::Backlog;

thread_local! {
    /// This thread appended to the backlog since the last [`throttle`].
    pub static WROTE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Back-pressure (`repl-lag-policy throttle`): how long a connection's
/// replies wait after a batch of commands that wrote (the connection
/// sleeps it, see `server/hooks.rs`). With the slowest replica `lag` bytes behind, `repl-throttle-lag`
/// = `start` and 90% of the replica class's hard limit = `wall`, the
/// replies wait in proportion to how far `lag` is between the two, up to
/// 100 ms a batch at and past the wall: writers slow to the rate the
/// replica takes, but never stop. A replica that stops reading altogether
/// is dropped after `repl-timeout` (see `feed`), or once it falls out of
/// the hard limit, and full-syncs. `repl-lag-policy spill` (the default)
/// keeps its bytes on disk instead and never makes writers wait.
pub(crate) fn throttle(m: &MasterSide, b: &Backlog) -> Option<Duration> {
    if !WROTE.with(|w| w.replace(false)) {
        return None;
    }
    let (lag, start, wall) = m.lag_over_start(b)?;
    let ms = (100 * (lag - start) / (wall - start).max(1)).clamp(1, 100);
    m.throttled.fetch_add(1, Relaxed);
    m.throttle_us.fetch_add(ms * 1000, Relaxed);
    Some(Duration::from_millis(ms))
}

impl MasterSide {
    /// (lag, repl-throttle-lag, wall) when throttling applies and the
    /// slowest replica lags past repl-throttle-lag.
    fn lag_over_start(&self, b: &Backlog) -> Option<(u64, u64, u64)> {
        if !self.throttle_on.load(Relaxed) {
            return None;
        }
        let lag = self.max_unsent(b.end())?;
        let start = self.throttle_lag.load(Relaxed);
        let wall = match b.hard_cap.load(Relaxed) as u64 {
            0 => u64::MAX,
            cap => (cap / 10 * 9).max(start + 1),
        };
        (lag > start).then_some((lag, start, wall))
    }

    /// The most bytes appended but not yet written to a replica's socket,
    /// over the replicas being streamed to (None: none is). This is the
    /// lag that matters for back-pressure: it is what Redis holds in a
    /// replica's output buffer and caps with the hard limit, and the
    /// backlog may only trim up to it. Acknowledged offsets trail it by up
    /// to a second (a replica ACKs once a second, hundreds of MB at 8 KB
    /// SETs), so they decide only what is kept for partial resyncs.
    pub(super) fn max_unsent(&self, end: u64) -> Option<u64> {
        self.replicas
            .lock()
            .iter()
            .map(|r| r.sent.load(Relaxed))
            .filter(|&next| next != 0)
            .map(|next| (end + 1).saturating_sub(next))
            .max()
    }

    /// Re-reads the back-pressure settings (a replica attaches, CONFIG SET).
    pub fn load_throttle_conf(&self, c: &crate::config::Config) {
        let lag = c.get_i64("repl-throttle-lag").max(0) as u64;
        self.throttle_lag.store(lag, Relaxed);
        let on = c.get_str("repl-lag-policy") == "throttle";
        self.throttle_on.store(on, Relaxed);
    }
}
