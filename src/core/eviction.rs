//! The eviction directives (`maxmemory-policy`, `maxmemory-samples`,
//! `maxmemory-eviction-tenacity`, `lazyfree-lazy-eviction`, `lfu-*`),
//! mirrored from the configuration into atomics for the hot path. The
//! eviction itself is `commands/evict.rs`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize};
use std::time::Duration;

use crate::config::Config;

/// `maxmemory-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    NoEviction,
    AllKeysLru,
    AllKeysLfu,
    AllKeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
}

impl Policy {
    const ALL: [(&'static str, Policy); 8] = [
        ("noeviction", Policy::NoEviction),
        ("allkeys-lru", Policy::AllKeysLru),
        ("allkeys-lfu", Policy::AllKeysLfu),
        ("allkeys-random", Policy::AllKeysRandom),
        ("volatile-lru", Policy::VolatileLru),
        ("volatile-lfu", Policy::VolatileLfu),
        ("volatile-random", Policy::VolatileRandom),
        ("volatile-ttl", Policy::VolatileTtl),
    ];

    pub fn volatile_only(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }

    pub fn is_lfu(self) -> bool {
        matches!(self, Policy::AllKeysLfu | Policy::VolatileLfu)
    }

    pub fn is_lru(self) -> bool {
        matches!(self, Policy::AllKeysLru | Policy::VolatileLru)
    }
}

/// The eviction directives, mirrored from the config for the hot path.
#[derive(Default)]
pub struct EvictionConfig {
    policy: AtomicU8,
    pub(crate) samples: AtomicUsize,
    tenacity: AtomicU32,
    lazy: AtomicBool,
    pub(crate) lfu_log_factor: AtomicU32,
    pub(crate) lfu_decay_time: AtomicU32,
}

impl EvictionConfig {
    pub fn load(&self, c: &Config) {
        let name = c.get_str("maxmemory-policy");
        let i = Policy::ALL
            .iter()
            .position(|(n, _)| *n == name)
            .unwrap_or(0);
        self.policy.store(i as u8, Relaxed);
        let int = |k: &str| c.get_i64(k).max(0) as u32;
        self.samples
            .store(int("maxmemory-samples").max(1) as usize, Relaxed);
        self.tenacity
            .store(int("maxmemory-eviction-tenacity"), Relaxed);
        self.lazy
            .store(c.get_bool("lazyfree-lazy-eviction"), Relaxed);
        self.lfu_log_factor.store(int("lfu-log-factor"), Relaxed);
        self.lfu_decay_time.store(int("lfu-decay-time"), Relaxed);
    }

    pub fn lfu_decay_time(&self) -> u32 {
        self.lfu_decay_time.load(Relaxed)
    }

    /// `lazyfree-lazy-eviction`: evicted values are freed in the background.
    pub fn lazy(&self) -> bool {
        self.lazy.load(Relaxed)
    }

    pub fn policy(&self) -> Policy {
        Policy::ALL[self.policy.load(Relaxed) as usize % Policy::ALL.len()].1
    }

    /// Time one command may spend evicting (Redis's evictionTimeLimitUs:
    /// 50 us per tenacity step up to 10, then growing 15% a step; 100 means
    /// no limit).
    pub fn budget(&self) -> Duration {
        let t = self.tenacity.load(Relaxed);
        if t >= 100 {
            return Duration::MAX;
        }
        let us = if t <= 10 {
            50 * t as u64
        } else {
            (500.0 * 1.15f64.powi(t as i32 - 10)) as u64
        };
        Duration::from_micros(us.max(1))
    }
}
