//! Counters for INFO: kept per worker thread and summed when read.
//!
//! Each worker owns a [`WorkerStats`] and is its only writer, so counting a
//! command is a relaxed load and store on a cache line no other core writes:
//! no contention however many threads run. INFO sums all workers.
//!
//! Each command's latency histogram (LATENCY HISTOGRAM, INFO latencystats,
//! with `latency-tracking yes`) is kept at the resolution LATENCY HISTOGRAM
//! reports: Redis's HdrHistogram iterated in power-of-two steps from
//! 1024 ns, so a call's latency lands in the first step whose upper bound
//! (HdrHistogram's highest equivalent value, 1032 * 2^k - 1 ns) holds it:
//! one counter bump a call, no allocation (DECISIONS 101).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

/// Per-command counters (INFO commandstats, LATENCY HISTOGRAM).
#[derive(Default)]
pub struct CmdStats {
    pub calls: AtomicU64,
    pub usec: AtomicU64,
    pub rejected: AtomicU64,
    pub failed: AtomicU64,
    /// Calls by latency step (see the module comment and [`step_of`]).
    pub hist: [AtomicU64; HIST_STEPS],
}

/// Latency steps: 1024 ns * 2^k for k in 0..21, past Redis's 1 s ceiling.
pub(crate) const HIST_STEPS: usize = 21;

/// The step of a latency of `usec` microseconds: the first k whose upper
/// bound, 1032 * 2^k - 1 ns, is at least the latency.
#[inline]
pub(crate) fn step_of(usec: u64) -> usize {
    let q = usec.saturating_mul(1000).min(1_000_000_000) / 1032;
    ((64 - q.leading_zeros()) as usize).min(HIST_STEPS - 1)
}

/// The upper bound of step `k` in nanoseconds (what LATENCY HISTOGRAM
/// shows divided by 1000, and INFO's percentiles divided by 1000.0).
pub(crate) fn step_bound_ns(k: usize) -> u64 {
    1032u64 * (1 << k) - 1
}

#[inline]
fn bump(c: &AtomicU64, n: u64) {
    // Single writer: a plain load+store is enough and avoids a locked RMW.
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

pub struct WorkerStats {
    pub cmds: Box<[CmdStats]>,
    pub commands_processed: AtomicU64,
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
    pub expired_keys: AtomicU64,
    pub evicted_keys: AtomicU64,
    pub dirty: AtomicU64,
    /// `latency-tracking`, mirrored here for the call path.
    pub latency_tracking: std::sync::atomic::AtomicBool,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    /// Errors by code ("ERR", "WRONGTYPE"): rare, so a mutex is fine.
    pub errors: Mutex<HashMap<String, u64>>,
    /// Errors a replica's master stream met (INFO `unexpected_error_replies`,
    /// Redis's errors "sent" to a master, which reads none of them).
    pub unexpected_errors: AtomicU64,
}

impl WorkerStats {
    pub fn new(num_commands: usize) -> Self {
        WorkerStats {
            cmds: (0..num_commands).map(|_| CmdStats::default()).collect(),
            commands_processed: AtomicU64::new(0),
            keyspace_hits: AtomicU64::new(0),
            keyspace_misses: AtomicU64::new(0),
            expired_keys: AtomicU64::new(0),
            evicted_keys: AtomicU64::new(0),
            dirty: AtomicU64::new(0),
            latency_tracking: std::sync::atomic::AtomicBool::new(true),
            net_input_bytes: AtomicU64::new(0),
            net_output_bytes: AtomicU64::new(0),
            errors: Mutex::new(HashMap::new()),
            unexpected_errors: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn record_call(&self, id: usize, usec: u64, failed: bool) {
        let c = &self.cmds[id];
        bump(&c.calls, 1);
        bump(&c.usec, usec);
        if self.latency_tracking.load(Relaxed) {
            bump(&c.hist[step_of(usec)], 1);
        }
        if failed {
            bump(&c.failed, 1);
        }
        bump(&self.commands_processed, 1);
    }
    pub fn record_rejected(&self, id: Option<usize>) {
        if let Some(id) = id {
            bump(&self.cmds[id].rejected, 1);
        }
    }
    pub fn record_error(&self, code: &str) {
        *self.errors.lock().entry(code.to_string()).or_default() += 1;
    }
    #[inline]
    pub fn hit(&self, found: bool) {
        bump(
            if found {
                &self.keyspace_hits
            } else {
                &self.keyspace_misses
            },
            1,
        );
    }
    #[inline]
    pub fn add_expired(&self, n: u64) {
        bump(&self.expired_keys, n);
    }
    #[inline]
    pub fn add_evicted(&self, n: u64) {
        bump(&self.evicted_keys, n);
    }
    #[inline]
    pub fn add_dirty(&self, n: u64) {
        bump(&self.dirty, n);
    }
    #[inline]
    pub fn add_net(&self, input: u64, output: u64) {
        bump(&self.net_input_bytes, input);
        bump(&self.net_output_bytes, output);
    }

    /// CONFIG RESETSTAT. (Racy with the owner's updates by design: a count
    /// may survive a reset by one increment.)
    pub fn reset(&self) {
        for c in self.cmds.iter() {
            for a in [&c.calls, &c.usec, &c.rejected, &c.failed]
                .into_iter()
                .chain(&c.hist)
            {
                a.store(0, Relaxed);
            }
        }
        for a in [
            &self.commands_processed,
            &self.keyspace_hits,
            &self.keyspace_misses,
            &self.expired_keys,
            &self.evicted_keys,
            &self.net_input_bytes,
            &self.net_output_bytes,
            &self.unexpected_errors,
        ] {
            a.store(0, Relaxed);
        }
        self.errors.lock().clear();
    }
}

/// Command `id`'s latency histogram summed over the workers (calls by
/// step); all zero when it was not called since the last reset with
/// `latency-tracking yes`.
pub(crate) fn histogram(workers: &[std::sync::Arc<WorkerStats>], id: usize) -> [u64; HIST_STEPS] {
    let mut h = [0u64; HIST_STEPS];
    for w in workers {
        for (k, c) in w.cmds[id].hist.iter().enumerate() {
            h[k] += c.load(Relaxed);
        }
    }
    h
}

/// The latency (ns) at percentile `p` of a histogram, as HdrHistogram's
/// hdr_value_at_percentile picks it: the upper bound of the step holding
/// the call ranked round(p% of the calls), at least the first.
pub(crate) fn percentile_ns(h: &[u64; HIST_STEPS], p: f64) -> u64 {
    let total: u64 = h.iter().sum();
    let rank = ((p / 100.0 * total as f64 + 0.5) as u64).max(1);
    let mut seen = 0;
    for (k, n) in h.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return step_bound_ns(k);
        }
    }
    step_bound_ns(HIST_STEPS - 1)
}

/// Sums of every worker's counters.
pub(crate) fn sum(
    workers: &[std::sync::Arc<WorkerStats>],
    f: impl Fn(&WorkerStats) -> &AtomicU64,
) -> u64 {
    workers.iter().map(|w| f(w).load(Relaxed)).sum()
}

/// The counters INFO shows an instantaneous rate of.
#[derive(Clone, Copy)]
pub enum Metric {
    Commands = 0,
    NetInput,
    NetOutput,
}
const METRICS: usize = 3;
/// Samples averaged (Redis's STATS_METRIC_SAMPLES).
const SAMPLES: usize = 16;

/// Instantaneous rates, as Redis's trackInstantaneousMetric keeps them: the
/// cron records each counter's per-second rate over the last interval (at
/// least ~100 ms) into a ring of [`SAMPLES`], and INFO shows the ring's
/// average. Fixed size, so a client calling INFO in a loop allocates nothing
/// (a sample per INFO call once grew a Vec by 160 KB jumps).
pub struct InstantMetrics {
    inner: Mutex<Rings>,
}

struct Rings {
    last_at: std::time::Instant,
    last: [u64; METRICS],
    rates: [[f64; SAMPLES]; METRICS],
    next: usize,
}

impl Default for InstantMetrics {
    /// Counting from zero now (at start-up).
    fn default() -> Self {
        InstantMetrics {
            inner: Mutex::new(Rings {
                last_at: std::time::Instant::now(),
                last: [0; METRICS],
                rates: [[0.0; SAMPLES]; METRICS],
                next: 0,
            }),
        }
    }
}

impl InstantMetrics {
    /// Records one sample of each counter (`now` in [`Metric`] order);
    /// ignored if the last one is under 90 ms old (a 100 ms cron jitters).
    pub fn sample(&self, now: [u64; METRICS]) {
        let at = std::time::Instant::now();
        let mut r = self.inner.lock();
        let secs = at.duration_since(r.last_at).as_secs_f64();
        if secs < 0.09 {
            return;
        }
        let slot = r.next;
        let last = r.last;
        for (m, ring) in r.rates.iter_mut().enumerate() {
            ring[slot] = now[m].saturating_sub(last[m]) as f64 / secs;
        }
        r.next = (slot + 1) % SAMPLES;
        (r.last_at, r.last) = (at, now);
    }

    /// The average rate of `m` per second over the ring.
    pub fn rate(&self, m: Metric) -> f64 {
        self.inner.lock().rates[m as usize].iter().sum::<f64>() / SAMPLES as f64
    }
}
