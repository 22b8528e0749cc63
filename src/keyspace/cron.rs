//! A KEYDB.CRON job, the value of the key that names it (KeyDB stores a job
//! as a key of its own type, so DEL, EXISTS, RENAME, persistence and
//! replication treat it as any key; `commands/cron.rs` builds it,
//! `server/cron_jobs.rs` runs it).
//!
//! The job runs its Lua script (with its keys and arguments, as EVAL does)
//! at `next_ms`; a repeating job then moves `next_ms` on by its interval,
//! aligned to its start time (`advance`), a single-shot job is deleted.
//! `owner` is the node id of the node that runs it under active
//! replication, where every node holds the job but one runs it and its
//! writes replicate (DECISIONS 110); 0 (a job loaded from KeyDB's RDB):
//! every node that is not a replica runs it, as KeyDB does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::*};

use parking_lot::Mutex;

/// The jobs this node may have to run: (database, key) to the time it is
/// due. An entry is only a hint, checked against the key when due (the job
/// may have been deleted, replaced or rescheduled since): KEYDB.CRON and
/// RESTORE add one, and the whole keyspace is scanned for jobs when this
/// node starts running them (first cron tick after start, a replica
/// promoted), so jobs loaded from RDB/AOF or a master are found.
#[derive(Default)]
pub struct Schedule {
    jobs: Mutex<HashMap<(usize, Vec<u8>), u64>>,
    /// The keyspace was scanned since this node last started running jobs.
    pub scanned: AtomicBool,
}

impl Schedule {
    pub fn add(&self, db: usize, key: &[u8], due_ms: u64) {
        self.jobs.lock().insert((db, key.to_vec()), due_ms);
    }

    /// Takes the entries due at `now`.
    pub fn take_due(&self, now: u64) -> Vec<(usize, Vec<u8>)> {
        let mut jobs = self.jobs.lock();
        if jobs.values().all(|&t| t > now) {
            return Vec::new();
        }
        let due: Vec<_> = jobs
            .iter()
            .filter(|(_, &t)| t <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &due {
            jobs.remove(k);
        }
        due
    }

    pub fn len(&self) -> usize {
        self.jobs.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every entry and asks for a new scan (a replica: its
    /// master runs the jobs, and a promotion scans again).
    pub fn reset(&self) {
        self.jobs.lock().clear();
        self.scanned.store(false, Release);
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronJob {
    pub script: Vec<u8>,
    /// The start time given (unix ms; 0 when none was, i.e. "now" at
    /// creation for KeyDB is `start + interval`'s base).
    pub start_ms: u64,
    pub interval_ms: u64,
    /// When it runs next (unix ms).
    pub next_ms: u64,
    pub single: bool,
    pub keys: Vec<Vec<u8>>,
    pub args: Vec<Vec<u8>>,
    pub owner: u64,
}

impl CronJob {
    /// After a run at `now` (a repeating job): the next run one interval
    /// on; a job that fell behind skips the runs it missed, to the first
    /// time still ahead, aligned to its start (to now when it has none),
    /// as KeyDB's executeCronJobExpireHook reschedules.
    pub fn advance(&mut self, now: u64) {
        let i = self.interval_ms.max(1);
        self.next_ms = self.next_ms.saturating_add(i);
        if self.next_ms > now {
            return;
        }
        if self.start_ms == 0 {
            self.next_ms = now.saturating_add(i);
        } else {
            let behind = now - self.next_ms;
            self.next_ms = self.next_ms.saturating_add(i * (behind / i + 1));
        }
    }

    /// Approximate heap bytes (MEMORY USAGE).
    pub fn mem_usage(&self) -> usize {
        let parts = self.keys.iter().chain(&self.args).map(|p| p.len() + 24);
        64 + self.script.len() + parts.sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(start: u64, interval: u64) -> CronJob {
        CronJob {
            script: b"return 1".to_vec(),
            start_ms: start,
            interval_ms: interval,
            next_ms: start + interval,
            single: false,
            keys: vec![],
            args: vec![],
            owner: 0,
        }
    }

    #[test]
    fn a_job_without_start_that_fell_behind_runs_next_one_interval_from_now() {
        let mut j = job(0, 900);
        j.advance(10_000);
        assert_eq!(j.next_ms, 10_900);
    }

    #[test]
    fn a_job_with_a_start_stays_aligned_to_it() {
        let mut j = job(1_000, 100);
        j.advance(1_100);
        assert_eq!(j.next_ms, 1_200);
        j.next_ms = 1_200;
        j.advance(1_555);
        assert_eq!(j.next_ms, 1_600);
    }
}
