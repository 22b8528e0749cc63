//! One way to run a command: [`call`], for every caller (Redis's server.c
//! `call()`), and the admission a client's command passes first ([`admit`],
//! Redis's processCommand checks after ACL).
//!
//! Six callers run handlers: a client's connection (`server/conn.rs`
//! `dispatch`), EXEC's queued commands (`multi.rs`), a script's
//! `redis.call` (`scripting/call.rs`), the replay of an effect record (an
//! AOF, an active peer's stream: [`super::Replayer`]), a replica's master
//! stream ([`super::run_master`], Redis's master client) and an in-process
//! command ([`super::run_local`]: KEYDB.CRON, tests). They differ only in
//! the bookkeeping around the handler, which the [`Caller`] names, as
//! Redis's CMD_CALL_* flags do:
//!
//! | step                         | Client | Exec | Script        | Replay | Master | Internal |
//! |------------------------------|--------|------|---------------|--------|--------|----------|
//! | MONITOR feed                 | yes    | yes  | yes, as "lua" |        | yes    |          |
//! | tracking: remember keys read | yes    | yes  | declared keys |        |        |          |
//! | commandstats (calls, usec)   | yes    | yes  | yes           |        | yes    | yes      |
//! | error reply and error stats  | yes    | yes  | yes           |        | stats* |          |
//! | slowlog                      | yes    | yes  | yes, as "?:0" |        | yes    |          |
//! | latency event                | yes    | yes  | yes           |        | yes    |          |
//!
//! The master's commands show as Redis's master client's: at the master's
//! address, without a name (the link's client, `replication/replica/
//! stream.rs`); so do the commands its transactions run (Exec). EXEC's
//! queued commands are slowlog entries and latency events of their own,
//! as Redis's execCommand calls them with CMD_CALL_FULL; EXEC itself is
//! a latency event ("command") but no slowlog entry (`skip_slowlog`).
//! (*) A master command's failure is no reply; the link counts it in
//! errorstats (`replication/replica/stream.rs`), as Redis's afterErrorReply.
//!
//! A script's calls are logged as Redis's Lua client's (address "?:0", no
//! name), after them the script's own command; not while a file loads.
//! A script's read-only command remembers the script's declared keys for
//! the client that runs the script (Redis's `trackingRememberKeys` of the
//! script caller); EVAL_RO, EVALSHA_RO and FCALL_RO remember nothing
//! themselves. What a command reports while it runs (its records through
//! `Ctx::propagate`, keyspace events, WATCH and tracking invalidations) goes
//! through the write choke point (`commands/mod.rs`), whoever called it; the
//! callers that gather records (EXEC, a script) emit them as one unit.
//!
//! Admission ([`admit`]): the flags of the call are worked out once
//! ([`effective_flags`]: for EXEC, with what its queued commands need), then
//! a busy script, memory (eviction, OOM) and the subsystems' hooks
//! (-LOADING, -MISCONF, -NOREPLICAS, -READONLY, -MASTERDOWN) decide in that
//! order; an EXEC refused ends its transaction (Redis's rejectCommand). A
//! script's calls are admitted by the script's own rules
//! (`scripting/call.rs`, Redis's script.c), replays and in-process
//! commands are obeyed.

use std::sync::atomic::Ordering::Relaxed;

use quanta::Instant;

use super::flags::*;
use super::server_cmds::logs;
use super::{multi, tracking, CmdError, CmdResult, CommandId, Ctx};
use crate::core::admin::Admin;
use crate::core::client::{ClientState, MASTER_LINK_ID};
use crate::core::stats::WorkerStats;
use crate::core::Core;
use crate::keyspace::hlc::Hlc;
use crate::protocol::Args;

/// Who runs a command, which decides the bookkeeping around its handler
/// (see the module's table).
#[derive(Clone, Copy)]
pub(crate) enum Caller<'k> {
    /// A client's command from its connection.
    Client,
    /// A command EXEC runs from its queue.
    Exec,
    /// A script's `redis.call`; `declared`: the keys the script declared.
    Script { declared: &'k [&'k [u8]] },
    /// An effect record replayed (AOF loading, an active peer's stream).
    Replay,
    /// A command of a replica's master stream (Redis's master client runs
    /// them with CMD_CALL_FULL; its failures are not replies).
    Master,
    /// A command run in-process (KEYDB.CRON, tests).
    Internal,
}

impl Caller<'_> {
    /// Whether the call is fed to MONITOR.
    #[inline]
    fn monitored(self) -> bool {
        self.answers() || matches!(self, Caller::Master)
    }
    /// Whether INFO commandstats counts the call.
    #[inline]
    fn counted(self) -> bool {
        !matches!(self, Caller::Replay)
    }
    /// Whether a failure becomes the reply (and counts in errorstats).
    #[inline]
    fn answers(self) -> bool {
        matches!(self, Caller::Client | Caller::Exec | Caller::Script { .. })
    }
    /// Whether the latency monitor sees the call ("command", "fast-command").
    #[inline]
    fn latency_sampled(self) -> bool {
        self.monitored()
    }
    /// Whether the call may go to the slowlog and the latency monitor now:
    /// a script's calls not while a file loads (an AOF's EVAL), as Redis.
    #[inline]
    fn logs_now(self, ctx: &Ctx) -> bool {
        !matches!(self, Caller::Script { .. }) || !ctx.admin.loading()
    }
}

/// Runs command `id` on `ctx` (whose `sent`, `active` and `replay_version`
/// the caller set for it) with the caller's bookkeeping; `start` is when
/// the command started (None: now). Returns the handler's result (a
/// failure already in `ctx.out` when the caller answers) and when the
/// command ended (None for a replay, which is not timed). Inlined, so each
/// caller's steps are decided when it is compiled.
#[inline(always)]
pub(crate) fn call(
    ctx: &mut Ctx,
    id: CommandId,
    args: Args,
    caller: Caller,
    start: Option<Instant>,
) -> (CmdResult, Option<Instant>) {
    let core: &Core = ctx.core;
    let cmd = core.commands.get(id);
    if !caller.counted() {
        return ((cmd.handler)(ctx, args), None);
    }
    let start = start.unwrap_or_else(Instant::now);
    match caller {
        Caller::Script { declared } => {
            tracking::before_script_command(core, ctx.client, id, declared)
        }
        Caller::Client | Caller::Exec => tracking::before_command(core, ctx.client, id, args),
        Caller::Replay | Caller::Master | Caller::Internal => {}
    }
    let mark = ctx.out.len();
    let r = (cmd.handler)(ctx, args);
    let end = Instant::now();
    let usec = end.saturating_duration_since(start).as_micros() as u64;
    // A call that blocked counts once, when it is served or ends (Redis's
    // updateStatsOnUnblock; conn.rs `block_wait`).
    let blocked = ctx.client.block.request.is_some();
    if r.is_err() || !blocked {
        ctx.stats.record_call(id, usec, r.is_err());
    }
    if caller.latency_sampled() && !blocked && caller.logs_now(ctx) {
        let event = match cmd.flags & FAST {
            0 => "command",
            _ => "fast-command",
        };
        core.latency_event(event, usec / 1000);
    }
    if let (true, Err(e)) = (caller.answers(), &r) {
        ctx.out.buf.truncate(mark);
        if !matches!(e, CmdError::Counted(_)) {
            ctx.stats.record_error(&e.code());
        }
        ctx.out.error(&e.render());
    }
    match caller {
        // Redis's Lua client: no address ("?:0"), no name.
        Caller::Script { .. } if logs::slow_enough(core, usec) && caller.logs_now(ctx) => {
            logs::slowlog_push(core, id, args, usec, "?:0".into(), String::new())
        }
        Caller::Client | Caller::Exec | Caller::Master => {
            logs::maybe_slowlog(core, ctx.client, id, args, usec)
        }
        _ => {}
    }
    // Shown once it ran, as Redis's call() does: EXEC after the commands
    // it ran, SELECT in the database it chose, after its slowlog entry.
    if caller.monitored()
        && core.clients.monitors.load(Relaxed) > 0
        && cmd.flags & (ADMIN | SKIP_MONITOR) == 0
    {
        feed_monitors(ctx, id, args, caller);
    }
    // As Redis's setExpire on a writable replica (read-only by default).
    if caller.answers() && cmd.flags & WRITE != 0 && !core.hot.replica_read_only.load(Relaxed) {
        remember_replica_ttls(ctx, id, args);
    }
    (r, Some(end))
}

/// On a writable replica, after its own client's write: remembers the
/// command's keys that now have a TTL, which the replica expires itself
/// (`keyspace/expire.rs` `ReplicaKeys`; its master's keys expire by the
/// master's DELs).
#[cold]
fn remember_replica_ttls(ctx: &Ctx, id: CommandId, args: Args) {
    let core = ctx.core;
    if core.active || ctx.client.id == MASTER_LINK_ID || !ctx.admin.is_replica() {
        return;
    }
    let db = ctx.client.db;
    for pos in core.commands.get(id).key_positions(args) {
        let key = args.get(pos);
        let slot = core.keyspace.slot(key);
        let shard = core.keyspace.db(db).lock(slot.shard);
        let at = shard.get_raw(slot.hash, key).map_or(0, |e| e.expire_at());
        drop(shard);
        if at != 0 {
            core.replica_keys.remember(db, key, at);
        }
    }
}

/// MONITOR's line for the call: a client's with its address (secrets
/// redacted), a script's as "lua".
#[cold]
fn feed_monitors(ctx: &Ctx, id: CommandId, args: Args, caller: Caller) {
    match caller {
        Caller::Script { .. } => logs::feed_monitors_from(ctx.core, ctx.client.db, "lua", args),
        _ => logs::feed_monitors(ctx.core, ctx.client, Some(id), args),
    }
}

/// A command refused before it ran (admission, a script's checks): counted
/// as its rejected call (an unknown command as none) and in errorstats.
pub(crate) fn count_rejected(stats: &WorkerStats, id: Option<CommandId>, e: &CmdError) {
    stats.record_rejected(id);
    if !matches!(e, CmdError::Counted(_)) {
        stats.record_error(&e.code());
    }
}

/// The flags of this call, worked out once (Redis's getCommandFlags): the
/// command's for its arguments, and for EXEC what its queued commands need
/// (Redis's `mstate.cmd_flags`, `cmd_inv_flags`): a write, denyoom,
/// may-replicate or no-async-loading one makes EXEC so, and one without
/// `stale` takes it from EXEC.
#[inline(always)]
pub(crate) fn effective_flags(core: &Core, client: &ClientState, id: CommandId, args: Args) -> u32 {
    let cmd = core.commands.get(id);
    let flags = cmd.flags_for(core, args);
    match &client.multi {
        Some(m) if cmd.name == "exec" => exec_flags(core, m, flags),
        _ => flags,
    }
}

/// EXEC's flags with its queue's (see [`effective_flags`]).
#[cold]
fn exec_flags(core: &Core, m: &crate::core::multi::MultiState, flags: u32) -> u32 {
    m.queue.iter().fold(flags, |f, q| {
        let qf = core.commands.get(q.id).flags_for(core, q.args());
        let stale = match qf & STALE {
            0 => !STALE,
            _ => u32::MAX,
        };
        (f | qf & (WRITE | DENYOOM | MAY_REPLICATE | NO_ASYNC_LOADING)) & stale
    })
}

/// Whether a client's command may run now (after lookup, arity, auth and
/// ACL): a busy script, memory, then the subsystems (see the module's
/// comment). Returns the call's flags. An EXEC refused ends its transaction.
/// Generic over the admin so that the server's hooks are called directly
/// on a client's path, not through the `dyn Admin` a handler sees.
#[inline(always)]
pub(crate) fn admit<A: Admin + ?Sized>(
    core: &Core,
    admin: &A,
    clock: &mut Hlc,
    stats: &WorkerStats,
    client: &mut ClientState,
    id: CommandId,
    args: Args,
) -> Result<u32, CmdError> {
    let flags = effective_flags(core, client, id, args);
    let admitted = busy_check(core, client.db, id, args)
        .and_then(|()| admit_memory(core, admin, clock, stats, client.id, flags))
        .map(|()| tracking::limit_table(core, client.id))
        .and_then(|()| admin.admit(client, id, flags));
    match admitted {
        Ok(()) => Ok(flags),
        // (A hook that ended the transaction itself left MULTI already.)
        Err(e) if client.multi.is_some() && core.commands.get(id).name == "exec" => {
            Err(multi::abort_exec(client, e))
        }
        Err(e) => Err(e),
    }
}

/// Evicts before client `current`'s command when memory is over
/// `maxmemory`, and refuses a denyoom call when nothing could be evicted.
/// `replica-ignore-maxmemory yes` (the default): a replica evicts nothing
/// itself; its master's evictions reach it as DELs.
#[inline(always)]
fn admit_memory<A: Admin + ?Sized>(
    core: &Core,
    admin: &A,
    clock: &mut Hlc,
    stats: &WorkerStats,
    current: u64,
    flags: u32,
) -> Result<(), CmdError> {
    if core.hot.maxmemory.load(Relaxed) == 0 {
        return Ok(());
    }
    if admin.is_replica() && core.hot.replica_ignore_maxmemory.load(Relaxed) {
        return Ok(());
    }
    super::evict::admit(core, clock, stats, current, flags)
}

/// The BUSY reply while a script (`eval`) or function runs past the
/// threshold (Redis's slowevalerr / slowscripterr).
pub(crate) fn busy_error(eval: bool) -> CmdError {
    CmdError::Msg(format!(
        "BUSY Redis is busy running a script. You can only call {} KILL or SHUTDOWN NOSAVE.",
        if eval { "SCRIPT" } else { "FUNCTION" }
    ))
}

/// BUSY for a command that needs what a script past the threshold holds:
/// every command but the `allow_busy` ones while the script holds every
/// shard, else the commands whose keys are in its shards (DECISIONS 57).
/// SHUTDOWN needs NOSAVE while any script is busy.
pub(crate) fn busy_check(
    core: &Core,
    db: usize,
    id: CommandId,
    args: Args,
) -> Result<(), CmdError> {
    if !core.scripts.busy.any() {
        return Ok(());
    }
    busy_check_slow(core, db, id, args)
}

#[cold]
fn busy_check_slow(core: &Core, db: usize, id: CommandId, args: Args) -> Result<(), CmdError> {
    let cmd = core.commands.get(id);
    let runs = core.scripts.busy.runs();
    let Some(first) = runs.first() else {
        return Ok(());
    };
    if cmd.name == "shutdown" {
        let nosave = args
            .iter()
            .skip(1)
            .any(|a| a.eq_ignore_ascii_case(b"nosave"));
        return if nosave {
            Ok(())
        } else {
            Err(busy_error(first.eval))
        };
    }
    if cmd.flags & ALLOW_BUSY != 0 {
        return Ok(());
    }
    let keys = if cmd.name == "exec" {
        None
    } else {
        multi::command_keys(core, id, args)
    };
    for r in &runs {
        let hit = match (&r.shards, &keys) {
            (None, _) | (_, None) => true,
            (Some(held), Some(pos)) => pos.iter().any(|&p| {
                let shard = core.keyspace.slot(args.get(p)).shard;
                held.contains(&(db, shard))
            }),
        };
        if hit {
            return Err(busy_error(r.eval));
        }
    }
    Ok(())
}
