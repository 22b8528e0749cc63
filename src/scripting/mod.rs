/*
 * Scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, with Redis 7's
 * Lua 5.1 environment (Redis's eval.c and script_lua.c).
 *
 * What it owns: the per-thread Lua states (`vm.rs`; Lua states are not
 * shared between threads, so each worker compiles the scripts it runs from
 * the shared body cache, `core::scripts`), Redis's Lua library and sandbox
 * (`prelude.lua`: redis.*, readonly globals, Redis's math.random; `bit.rs`),
 * a script's result as RESP (`convert.rs`), and `redis.call`: a C function
 * on the Lua stack (`stack.rs`: arguments in, the reply pushed as Lua
 * values) that runs a command through its table entry as the dispatcher
 * would (`call.rs`).
 *
 * Why a layer of its own, beside the commands: a script runs commands, so
 * it names the command layer (the table, EXEC's planning and effect unit)
 * while no command names it; keeping Lua out of `commands/` keeps the
 * families free of the Lua types, and the server adds this family to the
 * table (`server::command_families`) as it does replication's.
 *
 * Atomicity (DECISIONS 54): a script holds the shards of its declared KEYS
 * for its whole run through `Keyspace::hold`, as EXEC does, or every shard
 * when it declares none; with declared keys it may touch only those. Its
 * writes are buffered as EXEC's and emitted as one unit (MULTI/EXEC around
 * several) by their effects, stamped as any write.
 */

mod bit;
mod call;
mod cjson;
mod cmsgpack;
mod convert;
mod flags;
mod functions;
mod stack;
mod vm;

pub(crate) use functions::{
    clear as clear_functions, load_saved as load_functions, saved_code as function_code,
    write_stats as function_stats, COMMANDS as FUNCTION_COMMANDS,
};
pub(crate) use vm::lua_memory;

use crate::commands::flags::*;
use crate::commands::keyspec::KeySpec;
use crate::commands::util::arg_i64;
use crate::commands::{CmdError, CmdResult, Command, Ctx};
use crate::core::Core;
use crate::protocol::Args;
use call::Script;

const EVAL: u32 = NOSCRIPT | STALE | SKIP_MONITOR | NO_MANDATORY_KEYS | MAY_REPLICATE;
const EVAL_RO: u32 = NOSCRIPT | STALE | SKIP_MONITOR | NO_MANDATORY_KEYS | READONLY;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "scripting", acl = "scripting"),
    cmd("eval", -3, EVAL, eval)
        .doc("2.6.0", "Execute a Lua script server side")
        .complexity("Depends on the script that is executed.")
        .keys_fn(eval_keys)
        .flags_fn(eval_flags)
        .key_specs(&[KeySpec::at(2, &["RW", "access", "update"]).keynum(0, 1, 1).notes("We cannot tell how the keys will be used so we assume the worst, RW and UPDATE")]),
    cmd("evalsha", -3, EVAL, evalsha)
        .doc("2.6.0", "Execute a Lua script server side")
        .complexity("Depends on the script that is executed.")
        .keys_fn(eval_keys)
        .flags_fn(evalsha_flags)
        .key_specs(&[KeySpec::at(2, &["RW", "access", "update"]).keynum(0, 1, 1)]),
    cmd("eval_ro", -3, EVAL_RO, eval_ro)
        .doc("7.0.0", "Execute a read-only Lua script server side")
        .complexity("Depends on the script that is executed.")
        .keys_fn(eval_keys)
        .flags_fn(eval_flags)
        .key_specs(&[KeySpec::at(2, &["RO", "access"]).keynum(0, 1, 1).notes("We cannot tell how the keys will be used so we assume the worst, RO and ACCESS")]),
    cmd("evalsha_ro", -3, EVAL_RO, evalsha_ro)
        .doc("7.0.0", "Execute a read-only Lua script server side")
        .complexity("Depends on the script that is executed.")
        .keys_fn(eval_keys)
        .flags_fn(evalsha_flags)
        .key_specs(&[KeySpec::at(2, &["RO", "access"]).keynum(0, 1, 1)]),
    container("script", -2, script_parent)
        .doc("2.6.0", "A container for Lua scripts management commands")
        .complexity("Depends on subcommand.")
        .subs(SCRIPT_SUBS),
};

static SCRIPT_SUBS: &[Command] = crate::commands::command_table! {
    family(group = "scripting", acl = "scripting"),
    cmd("exists", -3, NOSCRIPT, script_exists)
        .doc("2.6.0", "Check existence of scripts in the script cache.")
        .complexity("O(N) with N being the number of scripts to check (so checking a single script is an O(1) operation).")
        .tips(&["request_policy:all_shards", "response_policy:agg_logical_and"]),
    cmd("flush", -2, NOSCRIPT, script_flush)
        .doc("2.6.0", "Remove all the scripts from the script cache.")
        .complexity("O(N) with N being the number of scripts in cache")
        .tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
    cmd("kill", 2, NOSCRIPT | ALLOW_BUSY, script_kill)
        .doc("2.6.0", "Kill the script currently in execution.")
        .tips(&["request_policy:all_shards", "response_policy:one_succeeded"]),
    cmd("help", 2, LOADING | STALE, script_help)
        .doc("5.0.0", "Show helpful text about the different subcommands"),
    cmd("debug", 3, NOSCRIPT, script_debug)
        .doc("3.2.0", "Set the debug mode for executed scripts.")
        .complexity("O(1)"),
    cmd("load", 3, NOSCRIPT | STALE, script_load)
        .doc("2.6.0", "Load the specified Lua script into the script cache.")
        .complexity("O(N) with N being the length in bytes of the script body.")
        .tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
};

/// Keys of `EVAL script numkeys key... arg...`.
fn eval_keys(args: Args) -> Vec<usize> {
    match arg_i64(args.get(2)) {
        Ok(n) if n > 0 && (n as usize) <= args.len() - 3 => (3..3 + n as usize).collect(),
        _ => vec![],
    }
}

/// EVAL's flags for this call: its shebang's (Redis's evalGetCommandFlags).
fn eval_flags(_: &Core, args: Args, f: u32) -> u32 {
    match flags::shebang(args.get(1)) {
        Ok((sf, _)) => flags::command_flags(f, sf),
        Err(_) => f,
    }
}

/// EVALSHA's flags for this call: those of the cached script, if any.
fn evalsha_flags(core: &Core, args: Args, f: u32) -> u32 {
    let Some(key) = sha_key(args.get(1)) else {
        return f;
    };
    let Ok(sha) = std::str::from_utf8(&key) else {
        return f;
    };
    match vm::cached_flags(core, sha).or_else(|| core.scripts.get(sha).map(|e| e.1)) {
        Some(sf) => flags::command_flags(f, sf),
        None => f,
    }
}

const SCRIPT_HELP: &[&str] = &[
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
];

fn script_help(ctx: &mut Ctx, _: Args) -> CmdResult {
    crate::commands::server_cmds::reply_help(ctx, "script", SCRIPT_HELP);
    Ok(())
}

/// SCRIPT DEBUG: NO is what runs anyway; the Lua debugger (YES, SYNC) is
/// not built (docs/COMMANDS.md).
fn script_debug(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mode = String::from_utf8_lossy(args.get(2)).to_ascii_uppercase();
    match mode.as_str() {
        "NO" => {
            ctx.out.ok();
            Ok(())
        }
        "YES" | "SYNC" => Err(CmdError::err(format!(
            "SCRIPT DEBUG {mode} is not supported by LatticeDB yet ({}): the Lua debugger is not built",
            crate::commands::unbuilt::DOCS_PAGE
        ))),
        _ => Err(CmdError::err("Use SCRIPT DEBUG YES/SYNC/NO")),
    }
}

fn script_parent(_: &mut Ctx, _: Args) -> CmdResult {
    Err(CmdError::err("unknown subcommand"))
}

/// A SHA1 argument as the script cache keys it: 40 bytes, lower-cased
/// (on the stack: no string per call). None: it cannot be one.
fn sha_key(arg: &[u8]) -> Option<[u8; 40]> {
    let mut key: [u8; 40] = arg.try_into().ok()?;
    key.make_ascii_lowercase();
    Some(key)
}

/// Where EVAL finds its script: the body, or a SHA1 to look up (None: an
/// argument that cannot be one).
enum Source<'a> {
    Body(&'a [u8]),
    Sha(Option<[u8; 40]>),
}

/// EVAL's parsed arguments.
struct Request<'a> {
    source: Source<'a>,
    /// The keys, then the arguments.
    list: Vec<&'a [u8]>,
    nkeys: usize,
}

/// `numkeys key... arg...` from argument 2 on: the keys and arguments
/// in one list, and how many of them are keys. Err: Redis's messages.
pub(crate) fn split_keys(args: Args<'_>) -> Result<(Vec<&[u8]>, usize), CmdError> {
    let n = arg_i64(args.get(2)).map_err(|_| CmdError::err("Bad number of keys provided"))?;
    if n as i128 > args.len() as i128 - 3 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    if n < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    Ok(((3..args.len()).map(|i| args.get(i)).collect(), n as usize))
}

fn parse(args: Args, by_sha: bool) -> Result<Request, CmdError> {
    let n = arg_i64(args.get(2))?;
    if n as i128 > args.len() as i128 - 3 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    if n < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    let source = if by_sha {
        Source::Sha(sha_key(args.get(1)))
    } else {
        Source::Body(args.get(1))
    };
    Ok(Request {
        source,
        list: (3..args.len()).map(|i| args.get(i)).collect(),
        nkeys: n as usize,
    })
}

fn eval(ctx: &mut Ctx, args: Args) -> CmdResult {
    run(ctx, parse(args, false)?, false)
}

fn evalsha(ctx: &mut Ctx, args: Args) -> CmdResult {
    run(ctx, parse(args, true)?, false)
}

fn eval_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    run(ctx, parse(args, false)?, true)
}

fn evalsha_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    run(ctx, parse(args, true)?, true)
}

fn noscript() -> CmdError {
    CmdError::Msg("NOSCRIPT No matching script. Please use EVAL.".into())
}

/// Finds (or compiles) the script, then runs it holding its shards.
fn run(ctx: &mut Ctx, req: Request, ro: bool) -> CmdResult {
    let core = ctx.core;
    vm::with(core, |vm| {
        let key = match req.source {
            Source::Body(b) => {
                let key = vm::sha1_key(b);
                let sha = std::str::from_utf8(&key).expect("hex digits");
                let flags = vm.compile(sha, b).map_err(CmdError::Msg)?;
                core.scripts.insert(sha, b, flags);
                key
            }
            Source::Sha(Some(key)) => key,
            Source::Sha(None) => return Err(noscript()),
        };
        let sha = std::str::from_utf8(&key).map_err(|_| noscript())?;
        if vm.compiled(sha).is_none() {
            let (body, _) = core.scripts.get(sha).ok_or_else(noscript)?;
            vm.compile(sha, &body).map_err(CmdError::Msg)?;
        }
        let (f, sflags) = vm.compiled(sha).ok_or_else(noscript)?;
        let run = Run {
            f: f.id(),
            name: sha,
            keys: &req.list[..req.nkeys],
            argv: &req.list[req.nkeys..],
            function: false,
        };
        invoke(ctx, vm, run, sflags, ro)
    })
}

/// A script or function to run, with its keys and arguments.
pub(crate) struct Run<'a> {
    /// The compiled script or function's registry reference.
    pub f: std::ffi::c_int,
    /// The SHA1 (EVAL) or function name (FCALL), for error replies.
    pub name: &'a str,
    pub keys: &'a [&'a [u8]],
    pub argv: &'a [&'a [u8]],
    /// FCALL: keys and arguments are the function's parameters, not the
    /// KEYS and ARGV globals.
    pub function: bool,
}

/// Runs a script or function holding its shards (DECISIONS 54), after the
/// checks its flags decide.
pub(crate) fn invoke(ctx: &mut Ctx, vm: &vm::Vm, run: Run, sflags: u32, ro: bool) -> CmdResult {
    let core = ctx.core;
    // EVAL and FCALL skip the dispatcher's MONITOR feed: shown here, before
    // the commands they run (as Redis's evalCommand does).
    if let Some(sent) = ctx.sent {
        if core
            .clients
            .monitors
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
        {
            crate::commands::server_cmds::logs::feed_monitors(core, ctx.client, None, sent);
        }
    }
    let mut script = prepare(ctx, sflags, ro, run.keys)?;
    let nested = crate::keyspace::held::holding();
    script.may_widen = !nested && script.keys.is_some();
    loop {
        let plan = script.keys.as_ref().map(|ks| {
            ks.iter()
                .map(|k| (script.db, core.keyspace.slot(k).shard))
                .collect::<Vec<_>>()
        });
        let hold = (!nested).then(|| core.keyspace.hold(plan.as_deref()));
        // What other threads see of the run (`Running`) is made only if it
        // passes the busy threshold (`vm::count_hook`), from this.
        let pending = vm::Pending {
            eval: !run.function,
            name: run.name,
            sent: ctx.sent,
            shards: if nested { None } else { plan.as_deref() },
            script: &script,
        };
        let outer = vm::set_current(Some(vm::Current {
            start: std::time::Instant::now(),
            busy: core.scripts.busy.clone(),
            threshold_ms: core
                .hot
                .busy_reply_threshold
                .load(std::sync::atomic::Ordering::Relaxed),
            run: None,
            pending: &pending as *const vm::Pending as *const (),
        }));
        let r = execute(ctx, vm, &script, &run);
        if let Some(running) = vm::set_current(outer).and_then(|cur| cur.run) {
            core.scripts.busy.remove(&running);
        }
        if !script.widen.get() {
            return r;
        }
        // It touched an undeclared key before writing: again, holding
        // every shard (nothing it did is kept).
        drop(hold);
        ctx.client.db = script.db;
        script.keys = None;
        script.may_widen = false;
        script.widen.set(false);
        script.run = Default::default();
    }
}

/// The checks before a script runs that its flags decide (Redis's
/// scriptPrepareForRun; those the dispatcher makes with the call's flags,
/// `eval_flags`, come first), and what the run may do.
fn prepare<'k>(
    ctx: &mut Ctx,
    sflags: u32,
    ro: bool,
    keys: &'k [&'k [u8]],
) -> Result<Script<'k>, CmdError> {
    let compat = sflags & flags::EVAL_COMPAT != 0;
    let stale = ctx.admin.serving_stale();
    if compat && stale {
        return Err(CmdError::Msg(
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
                .into(),
        ));
    }
    let over = crate::commands::evict::over_maxmemory(ctx.core);
    if !compat {
        if stale && sflags & flags::ALLOW_STALE == 0 {
            return Err(CmdError::Msg(
                "MASTERDOWN Link with MASTER is down, replica-serve-stale-data is set to 'no' \
                 and 'allow-stale' flag is not set on the script."
                    .into(),
            ));
        }
        if sflags & flags::NO_WRITES == 0 && ro {
            return Err(CmdError::err(
                "Can not execute a script with write flag using *_ro command.",
            ));
        }
        if over && sflags & (flags::ALLOW_OOM | flags::NO_WRITES) == 0 {
            return Err(CmdError::Msg(
                "OOM allow-oom flag is not set on the script, can not run it when used memory > \
                 'maxmemory'"
                    .into(),
            ));
        }
    }
    Ok(Script {
        db: ctx.client.db,
        keys: (!keys.is_empty()).then_some(keys),
        declared: keys,
        read_only: ro || (!compat && sflags & flags::NO_WRITES != 0),
        allow_oom: !compat && sflags & flags::ALLOW_OOM != 0,
        oom: over,
        dirty: std::cell::Cell::new(false),
        may_widen: false,
        widen: std::cell::Cell::new(false),
        run: Default::default(),
    })
}

/// Runs `f` with `redis.call` bound to this client, its writes buffered
/// and emitted as one unit; writes the reply (an error as the command's).
fn execute(ctx: &mut Ctx, vm: &vm::Vm, s: &Script, run: &Run) -> CmdResult {
    let outer = ctx.client.exec_effects.is_some();
    let was_in_exec = ctx.client.in_exec;
    let was_in_script = ctx.client.in_script;
    if !outer && ctx.core.effects.enabled() {
        ctx.client.exec_effects = Some(Vec::new());
    }
    ctx.client.in_exec = true;
    ctx.client.in_script = true;
    let result = call_with(ctx, vm, s, run);
    ctx.client.in_exec = was_in_exec;
    ctx.client.in_script = was_in_script;
    ctx.client.db = s.db;
    if !outer {
        if let Some(effects) = ctx.client.exec_effects.take() {
            crate::commands::multi::emit_unit(ctx.core, effects);
        }
    }
    if !was_in_exec {
        // Keys the script made ready (an LPUSH for a BLPOP waiter) are
        // served once it is over, as after EXEC; inside EXEC, EXEC does it.
        for (db, key) in std::mem::take(&mut ctx.client.exec_ready) {
            ctx.core.blocking.signal(db, &key);
        }
    }
    if s.widen.get() {
        return Ok(());
    }
    result.reply(ctx.out, run.name)
}

/// What `redis.call` and `redis.acl_check_cmd` act on while a script runs:
/// the client's context and the script. `call_with` points the thread's
/// `BOUND` at it for the duration of the Lua call; the Rust functions Lua
/// calls are made once per state (`stack`, `bound_acl_check`), not per run (making
/// them per run, with `Lua::scope`, was a third of a short script's cost).
struct Bound<'c, 'a> {
    ctx: &'c std::cell::RefCell<&'c mut Ctx<'a>>,
    script: &'c Script<'c>,
    /// KEYS and ARGV (a function's keys and arguments), for `stack::push_args`.
    keys: &'c [&'c [u8]],
    argv: &'c [&'c [u8]],
}

thread_local! {
    static BOUND: std::cell::Cell<*const ()> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// Puts back the binding `call_with` replaced, also when unwinding.
struct BoundGuard(*const ());

impl Drop for BoundGuard {
    fn drop(&mut self) {
        BOUND.with(|b| b.set(self.0));
    }
}

/// Runs `f` on the run bound to this thread. Err: why there is none.
fn with_bound<R>(
    f: impl for<'x, 'y> FnOnce(&'x mut Ctx<'y>, &'x Script) -> R,
) -> Result<R, &'static str> {
    let p = BOUND.with(|b| b.get());
    if p.is_null() {
        return Err("no script is running");
    }
    // SAFETY: a non-null `BOUND` points to the `Bound` on `call_with`'s
    // stack, set just before its Lua call and put back (BoundGuard, also
    // on unwinding) before that frame ends; Lua runs these functions on
    // this thread, within that call. The lifetimes are those of that frame.
    let b = unsafe { &*(p as *const Bound<'_, '_>) };
    let mut c = b
        .ctx
        .try_borrow_mut()
        .map_err(|_| "redis.call re-entered")?;
    Ok(f(&mut c, b.script))
}

/// A run's KEYS and ARGV (a function's keys and arguments).
type Lists<'x> = (&'x [&'x [u8]], &'x [&'x [u8]]);

/// The bound run's KEYS and ARGV (see `Bound`), for as long as it runs.
fn bound_lists<'x>() -> Option<Lists<'x>> {
    let p = BOUND.with(|b| b.get());
    // SAFETY: as in `with_bound`; the caller (`stack::script_args`) uses
    // the lists within the Lua call that bound them.
    let b = unsafe { (p as *const Bound<'x, 'x>).as_ref()? };
    Some((b.keys, b.argv))
}

/// `priv.acl_check` of a Lua state: it acts on the run bound by
/// `call_with` (see `Bound`). (`redis.call` is `stack::redis_call`.)
pub(crate) fn bound_acl_check(lua: &mlua::Lua) -> mlua::Result<mlua::Function> {
    lua.create_function(|lua, (n, t): (usize, mlua::Table)| {
        let args = call::table_args(n, &t)?;
        with_bound(|ctx, _| acl_check(ctx, lua, args)).map_err(mlua::Error::runtime)?
    })
}

/// Calls the script through its run closure (`stack::run_script` or
/// `run_function`: one lua_pcall under Redis's error handler) with
/// `redis.call` bound to `ctx` for the call's duration; the run's results
/// stay on the stack for the reply (`convert::Results`).
fn call_with(ctx: &mut Ctx, vm: &vm::Vm, s: &Script, run: &Run) -> convert::Results {
    let cell = std::cell::RefCell::new(ctx);
    let bound = Bound {
        ctx: &cell,
        script: s,
        keys: run.keys,
        argv: run.argv,
    };
    let _guard = BoundGuard(BOUND.with(|b| b.replace(&bound as *const Bound as *const ())));
    let go = if run.function { &vm.run.1 } else { &vm.run.0 };
    let l = vm.state;
    // SAFETY: `l` is the state's main thread, not running anything (no
    // script nests: EVAL and FCALL are refused inside one), so its stack
    // is mlua's between calls, with LUA_MINSTACK free slots: the two
    // registry reads push without growing it. The run closure calls the
    // script under its own lua_pcall; outside it, it only makes tables
    // and strings and sets table fields, whose one error (out of memory)
    // is not caught here, as in Redis (unprotected, Lua ends the process,
    // as Rust does on an allocation failure). It leaves its three results
    // above `top`; `Results` pops them, also on unwinding (`resume_panic`).
    unsafe {
        let top = mlua::ffi::lua_gettop(l);
        let results = convert::Results { l, top };
        mlua::ffi::lua_rawgeti(l, mlua::ffi::LUA_REGISTRYINDEX, go.id().into());
        mlua::ffi::lua_rawgeti(l, mlua::ffi::LUA_REGISTRYINDEX, run.f.into());
        mlua::ffi::lua_call(l, 1, 3);
        stack::resume_panic();
        results
    }
}

/// `redis.acl_check_cmd(cmd, ...)`: whether the script's caller's user may
/// run the command with these arguments (its key and channel rules too),
/// without an ACL LOG entry, as Redis's luaRedisAclCheckCmdPermissionsCommand.
fn acl_check(
    ctx: &mut Ctx,
    lua: &mlua::Lua,
    args: Vec<mlua::Value>,
) -> mlua::Result<(bool, mlua::Value)> {
    let fail = |m: &str| Ok((false, call::error_table(lua, m, false)?));
    let argv = match call::argv(lua, &args) {
        Ok(a) => a,
        Err(m) => return fail(&m),
    };
    let owned = crate::protocol::OwnedArgs::new(&argv);
    let Some(id) = call::lookup(ctx, owned.args()) else {
        return fail("ERR Invalid command passed to redis.acl_check_cmd()");
    };
    let allowed = match &ctx.client.user {
        Some(u) if !u.free => u.check(&ctx.core.commands, id, owned.args()).is_ok(),
        _ => true,
    };
    Ok((true, mlua::Value::Boolean(allowed)))
}

// ---------------------------------------------------------------- SCRIPT

fn script_load(ctx: &mut Ctx, args: Args) -> CmdResult {
    let body = args.get(2);
    let sha = vm::sha1_hex(body);
    let flags = vm::with(ctx.core, |vm| vm.compile(&sha, body)).map_err(CmdError::Msg)?;
    ctx.core.scripts.insert(&sha, body, flags);
    ctx.out.bulk(sha.as_bytes());
    Ok(())
}

fn script_exists(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.out.array(args.len() - 2);
    for sha in args.iter().skip(2) {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        ctx.out.int(ctx.core.scripts.contains(&sha) as i64);
    }
    Ok(())
}

fn script_flush(ctx: &mut Ctx, args: Args) -> CmdResult {
    match args.len() {
        2 => {}
        3 if args.get(2).eq_ignore_ascii_case(b"async")
            || args.get(2).eq_ignore_ascii_case(b"sync") => {}
        _ => return Err(CmdError::err("SCRIPT FLUSH only support SYNC|ASYNC option")),
    }
    ctx.core.scripts.flush();
    ctx.out.ok();
    Ok(())
}

fn script_kill(ctx: &mut Ctx, _: Args) -> CmdResult {
    kill(ctx.core, true)?;
    ctx.out.ok();
    Ok(())
}

/// SCRIPT KILL (`eval`) or FUNCTION KILL: stops the oldest script past
/// the threshold, unless it wrote (Redis's scriptKill).
pub(crate) fn kill(core: &Core, eval: bool) -> Result<(), CmdError> {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(r) = core.scripts.busy.runs().into_iter().next() else {
        return Err(CmdError::Msg(
            "NOTBUSY No scripts in execution right now.".into(),
        ));
    };
    if r.dirty.load(Relaxed) {
        return Err(CmdError::Msg(
            "UNKILLABLE Sorry the script already executed write commands against the dataset. \
             You can either wait the script termination or kill the server in a hard way using \
             the SHUTDOWN NOSAVE command."
                .into(),
        ));
    }
    if r.eval != eval {
        return Err(busy_error(r.eval));
    }
    r.killed.store(true, Relaxed);
    Ok(())
}

pub(crate) use crate::commands::call::busy_error;
