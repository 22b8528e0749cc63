//! `redis.call` and `redis.pcall`: one command run from a script through
//! `commands::call` (as a `Script` caller), its reply converted to Lua
//! (Redis's script.c `scriptCall` and its checks, in its order).

use std::cell::Cell;

use mlua::{Lua, Value};

use crate::commands::call::{count_rejected, Caller};
use crate::commands::flags::{DENYOOM, MAY_REPLICATE, NOSCRIPT, STALE, WRITE};
use crate::commands::{CmdError, CommandId, Ctx};
use crate::protocol::{Args, ReplyBuf};

/// What a running script may do, fixed when it starts, and what it did.
pub(super) struct Script<'k> {
    /// The database the script started in (EVAL's client's).
    pub db: usize,
    /// The declared keys; `None` when the script declared none and holds
    /// every shard.
    pub keys: Option<&'k [&'k [u8]]>,
    /// The declared keys, also when it runs again holding every shard: a
    /// read-only call tracks them for the client (`call()`'s Script).
    pub declared: &'k [&'k [u8]],
    /// EVAL_RO / FCALL_RO, or a script flagged `no-writes`.
    pub read_only: bool,
    /// Flagged `allow-oom`: commands may grow memory past maxmemory.
    pub allow_oom: bool,
    /// Memory was over maxmemory when the script started (Redis's
    /// pre_command_oom_state): until it writes, denyoom commands fail.
    pub oom: bool,
    /// A write command ran (Redis's SCRIPT_WRITE_DIRTY): later writes are
    /// no longer refused for the server's state, which could leave half
    /// a script applied.
    pub dirty: Cell<bool>,
    /// The script may be run again with every shard held: it took its
    /// own locks (not inside EXEC).
    pub may_widen: bool,
    /// It touched a key it did not declare before writing anything: the
    /// run is abandoned (every later call fails too, even under pcall)
    /// and the script runs again holding every shard (DECISIONS 54).
    pub widen: Cell<bool>,
    /// What other threads see of this run once it is past the threshold
    /// (made then, by `vm::count_hook`).
    pub run: std::cell::OnceCell<std::sync::Arc<crate::core::scripts::Running>>,
}

const WIDEN: &str = "ERR Script attempted to access a key not declared in KEYS";

/// A failed call: the error reply's text, e.g. "ERR Unknown ...".
type Refusal = String;

/// The run's modes as redis.call passes them: the protocol
/// (redis.setresp, 2 or 3) and the replication (redis.set_repl, 0 to 3).
#[derive(Clone, Copy)]
pub(super) struct Modes {
    pub resp: u8,
    pub repl: u8,
}

/// Runs the command `args`, its reply (an error reply too) written into
/// `reply`; Err: the refusal's text (the command did not run).
pub(super) fn run_into(
    ctx: &mut Ctx,
    s: &Script,
    args: Args,
    Modes { resp, repl }: Modes,
    reply: &mut ReplyBuf,
) -> Result<(), Refusal> {
    // redis.set_repl(REPL_NONE): the command's effects are not propagated.
    // (REPL_AOF and REPL_REPLICA propagate to both: one effect stream.)
    let mark = ctx.client.exec_effects.as_ref().map(|e| e.len());
    let r = run(ctx, s, args, resp, reply);
    if let (0, Some(mark), Some(e)) = (repl, mark, ctx.client.exec_effects.as_mut()) {
        e.truncate(mark);
    }
    r
}

/// The `n` arguments packed in `t` by the prelude (nils kept).
pub(super) fn table_args(n: usize, t: &mlua::Table) -> mlua::Result<Vec<Value>> {
    (1..=n).map(|i| t.raw_get::<Value>(i)).collect()
}

/// `{err = msg}`, marked when the error was counted in the error
/// statistics already (so the script's reply does not count it again).
pub(super) fn error_table(lua: &Lua, msg: &str, counted: bool) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.set("err", msg)?;
    if counted {
        t.set("ignore_error_stats_update", true)?;
    }
    Ok(Value::Table(t))
}

/// The call's arguments as strings; numbers as "%.17g" (Redis does not
/// use Lua's own conversion, which loses precision).
pub(super) fn argv(lua: &Lua, args: &[Value]) -> Result<Vec<Vec<u8>>, Refusal> {
    if args.is_empty() {
        return Err("ERR Please specify at least one argument for this redis lib call".into());
    }
    let _ = lua;
    args.iter()
        .map(|a| match a {
            Value::String(s) => Ok(s.as_bytes().to_vec()),
            Value::Integer(n) => Ok(n.to_string().into_bytes()),
            Value::Number(n) => Ok(crate::protocol::format_double(*n).into_bytes()),
            _ => Err("ERR Lua redis lib command arguments must be strings or integers".into()),
        })
        .collect()
}

/// Looks a command (and subcommand) up as a script sees it: None when
/// unknown.
pub(super) fn lookup(ctx: &Ctx, args: Args) -> Option<CommandId> {
    let t = &ctx.core.commands;
    let mut id = t.lookup(args.get(0))?;
    if t.has_subcommands(id) && args.len() > 1 {
        id = t.lookup_sub(id, args.get(1))?;
    }
    Some(id)
}

/// Looks the command up and checks it may run here (scriptCall's checks).
/// Err: the refusal and the command it refused, for its statistics.
fn resolve(
    ctx: &mut Ctx,
    s: &Script,
    args: Args,
) -> Result<CommandId, (Option<CommandId>, Refusal)> {
    let Some(id) = lookup(ctx, args) else {
        return Err((None, "ERR Unknown Redis command called from script".into()));
    };
    let refuse = |m: &str| Err((Some(id), m.to_string()));
    let cmd = ctx.core.commands.get(id);
    if !cmd.arity_ok(args.len()) {
        return refuse("ERR Wrong number of args calling Redis command from script");
    }
    use std::sync::atomic::Ordering::Relaxed;
    if cmd.flags & NOSCRIPT != 0 && !ctx.core.scripts.disable_deny.load(Relaxed) {
        return refuse("ERR This Redis command is not allowed from script");
    }
    use crate::core::acl::LogContext;
    crate::commands::acl::admit(ctx.core, ctx.client, id, args, LogContext::Lua)
        .map_err(|e| (Some(id), e.render()))?;
    let flags = cmd.flags_for(ctx.core, args);
    if flags & STALE == 0 && ctx.admin.serving_stale() {
        return refuse("ERR Can not execute the command on a stale replica");
    }
    if s.read_only && flags & (WRITE | MAY_REPLICATE) != 0 {
        return refuse("ERR Write commands are not allowed from read-only scripts.");
    }
    // A script replayed from the AOF (or an effect stream) is obeyed, as
    // Redis's mustObeyClient: no LOADING or READONLY for its writes (an
    // AOF's EVAL loading into a read-only replica).
    if flags & WRITE != 0 && !s.dirty.get() && ctx.replay_version.is_none() {
        // READONLY, MISCONF, NOREPLICAS as for a client's write; once the
        // script wrote, the rest must run.
        ctx.admin
            .admit(ctx.client, id, flags)
            .map_err(|e| (Some(id), e.render()))?;
    }
    if !s.allow_oom && !s.dirty.get() && s.oom && flags & DENYOOM != 0 {
        return refuse(&crate::commands::evict::oom_error().render());
    }
    check_keys(ctx, s, id, args).map_err(|m| (Some(id), m))?;
    if flags & WRITE != 0 {
        s.dirty.set(true);
        if let Some(r) = s.run.get() {
            r.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    Ok(id)
}

/// With declared keys only their shards are held: a command may name only
/// declared keys of the script's database (DECISIONS 54).
fn check_keys(ctx: &Ctx, s: &Script, id: CommandId, args: Args) -> Result<(), Refusal> {
    let Some(keys) = &s.keys else { return Ok(()) };
    let pos = crate::commands::multi::command_keys(ctx.core, id, args);
    let ok = pos.is_some_and(|pos| {
        pos.is_empty()
            || (ctx.client.db == s.db
                && pos.iter().all(|&p| keys.iter().any(|k| *k == args.get(p))))
    });
    if ok {
        return Ok(());
    }
    if s.may_widen && !s.dirty.get() {
        s.widen.set(true);
        return Err(WIDEN.into());
    }
    Err(
        "ERR Script attempted to access a key not declared in KEYS (a script that declares keys \
         holds only their shards; pass numkeys 0 to hold the whole keyspace)"
            .into(),
    )
}

/// Runs one command through `call()`, writing its RESP reply into `out`
/// (or returning the refusal). A refusal counts as the command's rejected
/// call, a failure as its failed call, as a client's would.
fn run(ctx: &mut Ctx, s: &Script, args: Args, resp: u8, out: &mut ReplyBuf) -> Result<(), Refusal> {
    out.buf.clear();
    out.resp = resp;
    if s.widen.get() {
        return Err(WIDEN.into());
    }
    let id = match resolve(ctx, s, args) {
        Ok(id) => id,
        Err(_) if s.widen.get() => return Err(WIDEN.into()),
        Err((id, msg)) => {
            let code = crate::core::error::error_code(&msg);
            count_rejected(ctx.stats, id, &CmdError::Msg(code.into()));
            return Err(msg);
        }
    };
    let flags = ctx.core.commands.get(id).flags;
    let caller = Caller::Script {
        declared: s.declared,
    };
    let mut sub = ctx.nested(Some(out), args, flags);
    // A failure is the call's reply, converted for the script.
    let _ = crate::commands::call::call(&mut sub, id, args, caller, None);
    Ok(())
}
