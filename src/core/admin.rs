//! What a command may ask of the layers above the core: persistence,
//! replication and the server itself. The server implements [`Admin`]
//! (`server/admin.rs`) and hands it to every handler in `Ctx::admin`, so the
//! commands layer names no subsystem: SAVE asks `admin.save()`, not
//! `persistence::save`. Each method is one thing a Redis command does to a
//! subsystem; adding one is the way for a new command to reach further.
//!
//! Commands that belong to a subsystem (PSYNC, WAIT, BGREWRITEAOF ...) are
//! written in that subsystem and get the whole server back with
//! [`Admin::as_any`]: they sit above the core, where that is allowed.

use std::any::Any;
use std::time::Duration;

use super::Core;
use crate::core::error::CmdError;

/// SHUTDOWN's modifiers (a signal's come from `shutdown-on-sigterm` /
/// `-sigint`, in the same words).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownFlags {
    pub save: bool,
    pub nosave: bool,
    /// Skip the wait for lagging replicas.
    pub now: bool,
    /// Exit even if the final save (or the first AOF rewrite) failed.
    pub force: bool,
}

/// How the server was asked to stop (`server/shutdown.rs` runs it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownKind {
    /// SHUTDOWN: its client waits for the outcome.
    Command(ShutdownFlags),
    /// A signal (SIGTERM/SIGINT).
    Signal(i32),
}

/// DEBUG RELOAD's steps (each can be skipped).
#[derive(Clone, Copy, Debug)]
pub struct Reload {
    pub save: bool,
    pub flush: bool,
    /// Keys already present are replaced instead of failing the load.
    pub merge: bool,
}

/// The server's side of the commands layer (see the module comment).
pub trait Admin: Sync {
    /// The core this server runs on.
    fn core(&self) -> &Core;
    /// The implementing server, for commands written in the layers above
    /// (they downcast it to `Arc<Server>`).
    fn as_any(&self) -> &dyn Any;

    /// INFO's text for these sections (empty: the default ones).
    fn info(&self, sections: &[&str]) -> String;
    /// SAVE: a snapshot to the RDB file, now.
    fn save(&self) -> Result<(), CmdError>;
    /// BGSAVE [SCHEDULE]: the status line to reply.
    fn bgsave(&self, schedule: bool, in_exec: bool) -> Result<&'static str, CmdError>;
    /// BGREWRITEAOF: the status line to reply.
    fn bgrewriteaof(&self) -> Result<&'static str, CmdError>;
    /// A running BGSAVE is no longer wanted (FLUSHALL).
    fn abort_bgsave(&self);
    /// SHUTDOWN ABORT: false when no shutdown is under way.
    fn abort_shutdown(&self) -> bool;
    /// CONFIG RESETSTAT: the subsystems' counters (replication's syncs).
    fn reset_stats(&self);
    /// LASTSAVE: unix seconds of the last successful save.
    fn lastsave(&self) -> u64;
    /// Whether a dataset is being loaded (CONFIG SET refuses some directives).
    fn loading(&self) -> bool;
    /// After CONFIG SET: persistence applies what changed (appendonly ...).
    fn config_changed(&self) -> Result<(), String>;
    /// CONFIG SET port / tls-port: listen on `port` instead (0: nowhere),
    /// at `cfg`'s `bind` addresses; an error changes nothing.
    fn listen_on(&self, tls: bool, port: u16, cfg: &crate::config::Config) -> Result<(), String>;
    /// DEBUG RELOAD.
    fn debug_reload(&self, steps: Reload) -> Result<(), CmdError>;
    /// DEBUG AOF-FLUSH-SLEEP: microseconds each AOF flush sleeps.
    fn debug_aof_flush_sleep(&self, us: u64);
    /// DEBUG LOADAOF: flush the AOF, empty the keyspace and load it back.
    fn debug_loadaof(&self);

    /// Whether this server replicates from a master.
    fn is_replica(&self) -> bool;
    /// DEBUG SLEEP: the link to our master sleeps too, as Redis's one thread would.
    fn hold_master_link(&self, d: Duration);
    /// CLIENT KILL: drops the link to our master if `hit(peer, local)`; true if it did.
    fn kill_master_link_if(&self, hit: &dyn Fn(&str, &str) -> bool) -> bool;

    /// A command a script calls passes the subsystems' admission as a
    /// client's command would (READONLY, MISCONF, NOREPLICAS, LOADING).
    fn admit(
        &self,
        client: &mut crate::core::client::ClientState,
        id: usize,
        flags: u32,
    ) -> Result<(), CmdError>;
    /// Whether the disk cannot take writes now (the MISCONF state: a failed
    /// BGSAVE under stop-writes-on-bgsave-error, or an AOF write error).
    fn disk_write_error(&self) -> bool;
    /// A replica whose link to its master is down, with
    /// `replica-serve-stale-data no`: only `stale` commands may run.
    fn serving_stale(&self) -> bool;
}
