//! The shutdown sequence: Redis 7.0's prepareForShutdown / finishShutdown
//! (server.c). SHUTDOWN and SIGTERM/SIGINT both end here, on the main
//! thread (`server::run`'s loop), which has nothing else to do.
//!
//! 1. Unless NOW (or `shutdown-timeout 0`), a master whose replicas have not
//!    all acknowledged its whole stream waits for them first: writes paused
//!    (as CLIENT PAUSE WRITE), a GETACK sent, for at most `shutdown-timeout`
//!    seconds. INFO's `shutdown_in_milliseconds` counts it down and
//!    SHUTDOWN ABORT ends it.
//! 2. Each replica still behind is logged, then "N of M replicas are in
//!    sync when shutting down.".
//! 3. An AOF being turned on (its first rewrite still running) refuses to
//!    exit unless FORCE: the data would be in no file at all.
//! 4. The AOF is fsynced and the final RDB saved (save points or SAVE, not
//!    NOSAVE); a failed save refuses to exit unless FORCE.
//!
//! A refusal or an abort cancels: writes unpaused, and every SHUTDOWN client
//! waiting on that attempt answers "Errors trying to SHUTDOWN. Check logs.".
//! A SHUTDOWN client waits on its own connection (`conn.rs`), as WAIT does:
//! on success the process exits under it. Requests are tagged with the
//! number of attempts refused so far; one that arrived while an attempt ran
//! and was refused had its answer, and is dropped (Redis forgets a signal
//! received during a cancelled shutdown the same way).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use crate::core::admin::{ShutdownFlags, ShutdownKind};
use crate::keyspace::hlc::unix_ms;
use crate::{log_notice, log_warning};

use super::Server;

/// The shutdown under way, if any (`srv.shutdown`).
#[derive(Default)]
pub struct State {
    /// Unix ms the wait for replicas ends; 0 while none is under way.
    deadline_ms: AtomicU64,
    /// SHUTDOWN ABORT during the wait.
    aborted: AtomicBool,
    /// Attempts that ended without exiting.
    refused: AtomicU64,
    refused_notify: tokio::sync::Notify,
}

impl State {
    /// The tag of a request made now (see the module comment).
    pub fn attempt(&self) -> u64 {
        self.refused.load(Acquire)
    }

    /// INFO's `shutdown_in_milliseconds`: the wait's time left, if one is on.
    pub fn wait_left_ms(&self) -> Option<u64> {
        match self.deadline_ms.load(Relaxed) {
            0 => None,
            d => Some(d.saturating_sub(unix_ms())),
        }
    }

    /// SHUTDOWN ABORT: false when no shutdown is waiting.
    pub fn abort(&self) -> bool {
        if self.deadline_ms.load(Relaxed) == 0 {
            return false;
        }
        self.aborted.store(true, Release);
        log_notice!("Shutdown manually aborted.");
        true
    }

    /// A SHUTDOWN client's wait: returns once the attempt its request
    /// (tagged `attempt`) took part in was refused, or the client is killed.
    pub async fn refused_after(&self, attempt: u64, kill: &tokio::sync::Notify) {
        loop {
            let refused = self.refused_notify.notified();
            tokio::pin!(refused);
            refused.as_mut().enable();
            if self.refused.load(Acquire) > attempt {
                return;
            }
            tokio::select! {
                _ = refused => {}
                _ = kill.notified() => return,
            }
        }
    }

    fn cancel(&self, srv: &Server) {
        self.deadline_ms.store(0, Relaxed);
        self.aborted.store(false, Relaxed);
        srv.pause_writes(false);
        self.refused.fetch_add(1, AcqRel);
        self.refused_notify.notify_waiters();
    }
}

/// The main thread's handling of one request; true: exit now.
pub(crate) fn handle(srv: &Arc<Server>, kind: ShutdownKind, attempt: u64) -> bool {
    if attempt < srv.shutdown.attempt() {
        return false; // its attempt was refused while it waited in line
    }
    let flags = match kind {
        ShutdownKind::Command(f) => f,
        ShutdownKind::Signal(sig) => signal_flags(srv, sig),
    };
    log_warning!("User requested shutdown...");
    if !flags.now && !wait_for_replicas(srv) {
        srv.shutdown.cancel(srv);
        return false;
    }
    if finish(srv, flags) {
        return true;
    }
    log_warning!("Errors trying to shut down the server. Check the logs for more information.");
    srv.shutdown.cancel(srv);
    false
}

/// `shutdown-on-sigint` / `-sigterm`: SHUTDOWN's flags for a signal.
fn signal_flags(srv: &Server, sig: i32) -> ShutdownFlags {
    let name = match sig == libc::SIGINT {
        true => "shutdown-on-sigint",
        false => "shutdown-on-sigterm",
    };
    let words = srv.config.read().get_str(name);
    let has = |f: &str| words.split_whitespace().any(|w| w == f);
    ShutdownFlags {
        save: has("save"),
        nosave: has("nosave"),
        now: has("now"),
        force: has("force"),
    }
}

/// Whether every replica acknowledged the whole stream (none: yes).
fn replicas_in_sync(srv: &Server) -> bool {
    let end = srv.repl.backlog.end();
    let replicas = srv.repl.master.replicas.lock();
    replicas.iter().all(|r| r.ack_offset.load(Relaxed) == end)
}

/// Step 1; false if SHUTDOWN ABORT ended it.
fn wait_for_replicas(srv: &Server) -> bool {
    let timeout_s = srv.config.read().get_i64("shutdown-timeout").max(0) as u64;
    if timeout_s == 0 || replicas_in_sync(srv) {
        return true;
    }
    let st = &srv.shutdown;
    st.deadline_ms.store(unix_ms() + timeout_s * 1000, Relaxed);
    if srv.pause_until_ms.load(Relaxed) == 0 {
        crate::replication::master::request_acks(srv);
    }
    srv.pause_writes(true);
    log_notice!("Waiting for replicas before shutting down.");
    loop {
        std::thread::sleep(Duration::from_millis(10));
        if st.aborted.load(Acquire) {
            return false;
        }
        if replicas_in_sync(srv) || unix_ms() >= st.deadline_ms.load(Relaxed) {
            return true;
        }
    }
}

/// Steps 2-4; false: the server must not exit.
fn finish(srv: &Arc<Server>, flags: ShutdownFlags) -> bool {
    log_replicas(srv);
    let aof = &srv.persist.aof;
    if aof.wait_rewrite.load(Relaxed) {
        if !flags.force {
            log_warning!("Writing initial AOF, can't exit.");
            return false;
        }
        log_warning!("Writing initial AOF. Exit anyway.");
    }
    flags.nosave || crate::persistence::save::save_on_shutdown(srv, flags.save) || flags.force
}

/// Step 2: each replica behind the stream's end, then the count in sync.
fn log_replicas(srv: &Server) {
    let end = srv.repl.backlog.end();
    let replicas = srv.repl.master.replicas.lock();
    let mut lagging = 0;
    for r in replicas.iter() {
        let acked = r.ack_offset.load(Relaxed);
        if acked == end {
            continue;
        }
        lagging += 1;
        let state = *r.state.lock();
        let lag_s = match state {
            "online" => unix_ms().saturating_sub(r.ack_ms.load(Relaxed)) / 1000,
            _ => 0,
        };
        let name = match r.port.load(Relaxed) {
            0 => format!("client id #{}", r.client_id),
            port => format!("{}:{port}", r.ip),
        };
        log_warning!(
            "Lagging replica {name} reported offset {} behind master, lag={lag_s}, state={state}.",
            end.saturating_sub(acked)
        );
    }
    if !replicas.is_empty() {
        log_notice!(
            "{} of {} replicas are in sync when shutting down.",
            replicas.len() - lagging,
            replicas.len()
        );
    }
}
