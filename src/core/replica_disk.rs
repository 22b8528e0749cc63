//! `replica-ignore-disk-write-errors`: what a replica does with a command
//! from its master while its own disk cannot take writes (a failed BGSAVE
//! under `stop-writes-on-bgsave-error`, or an AOF write error: the state in
//! which clients' writes get MISCONF), as Redis 7.0's processCommand does
//! for its master client. With `no` (the default) a write command stops
//! the process ("Guru Meditation: Replica was unable to write command to
//! disk."), so the replica cannot silently hold data its disk lacks; with
//! `yes`, or for PING, the command runs and a warning is logged at most
//! every 10 seconds.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::admin::Admin;

/// When the warning was last logged (unix ms).
static LAST_WARNING_MS: AtomicU64 = AtomicU64::new(0);

/// Before a command from the master runs: `write` if it writes, `ping` if
/// it is PING. Aborts the process under the rule above.
pub(crate) fn check(admin: &dyn Admin, write: bool, ping: bool) {
    if !(write || ping) || !admin.disk_write_error() {
        return;
    }
    // An error path: read in place.
    let ignore = admin
        .core()
        .config
        .read()
        .get_bool("replica-ignore-disk-write-errors");
    if !ignore && !ping {
        crate::log_warning!("------------------------------------------------");
        crate::log_warning!("Guru Meditation: Replica was unable to write command to disk.");
        std::process::abort();
    }
    let now = crate::keyspace::hlc::unix_ms();
    let last = LAST_WARNING_MS.load(Relaxed);
    if now > last + 10_000
        && LAST_WARNING_MS
            .compare_exchange(last, now, Relaxed, Relaxed)
            .is_ok()
    {
        crate::log_warning!(
            "Replica is applying a command even though it is unable to write to disk."
        );
    }
}
