/*
 * The latency monitor (Redis's latency.c, issue 28): events that took at
 * least `latency-monitor-threshold` milliseconds, by event class
 * ("command", "fast-command", "expire-cycle"), as LATENCY LATEST,
 * HISTORY, RESET, GRAPH and DOCTOR show them.
 *
 * Each class keeps its last 160 samples (one a second: a second sample in
 * the same second keeps the larger latency, as Redis's latencyAddSample)
 * and its all-time maximum. Samples are rare by construction (only what
 * passes the threshold), so one mutex for all classes costs nothing on
 * the command path, which only compares the latency with the threshold
 * (`HotConfig::latency_threshold_ms`, 0: monitoring off).
 */

use std::collections::{BTreeMap, VecDeque};

use parking_lot::Mutex;

/// Samples kept per event class (Redis's LATENCY_TS_LEN).
const SAMPLES: usize = 160;

/// One event class's samples: (unix seconds, milliseconds), oldest first.
#[derive(Default, Clone)]
pub struct Series {
    pub samples: VecDeque<(u64, u64)>,
    pub max: u64,
}

#[derive(Default)]
pub struct LatencyMonitor {
    events: Mutex<BTreeMap<String, Series>>,
}

impl LatencyMonitor {
    /// Records `ms` for `event` at unix second `now` (the caller checked
    /// the threshold).
    pub fn add(&self, event: &str, ms: u64, now: u64) {
        let mut events = self.events.lock();
        let s = events.entry(event.to_string()).or_default();
        s.max = s.max.max(ms);
        match s.samples.back_mut() {
            Some(last) if last.0 == now => last.1 = last.1.max(ms),
            _ => {
                if s.samples.len() == SAMPLES {
                    s.samples.pop_front();
                }
                s.samples.push_back((now, ms));
            }
        }
    }

    /// Every class, by name.
    pub fn all(&self) -> Vec<(String, Series)> {
        let events = self.events.lock();
        events.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    pub fn get(&self, event: &str) -> Option<Series> {
        self.events.lock().get(event).cloned()
    }

    /// Forgets the named classes (all when `names` is empty); how many
    /// existed.
    pub fn reset(&self, names: &[String]) -> usize {
        let mut events = self.events.lock();
        if names.is_empty() {
            let n = events.len();
            events.clear();
            return n;
        }
        names.iter().filter(|n| events.remove(*n).is_some()).count()
    }
}
