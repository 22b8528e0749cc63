/*
 * Scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, with Redis 7's
 * Lua 5.1 environment (Redis's eval.c and script_lua.c).
 *
 * What it owns: the per-thread Lua states (`vm.rs`; Lua states are not
 * shared between threads, so each worker compiles the scripts it runs from
 * the shared body cache, `core::scripts`), Redis's Lua library and sandbox
 * (`prelude.lua`: redis.*, readonly globals, Redis's math.random; `bit.rs`),
 * the RESP <-> Lua conversions (`convert.rs`) and `redis.call` (`call.rs`),
 * which runs a command through its table entry as the dispatcher would.
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
mod convert;
mod vm;

use crate::commands::flags::*;
use crate::commands::keyspec::KeySpec;
use crate::commands::util::arg_i64;
use crate::commands::{CmdError, CmdResult, Command, Ctx};
use crate::protocol::Args;
use call::Script;

const EVAL: u32 = NOSCRIPT | STALE | SKIP_MONITOR | NO_MANDATORY_KEYS;

pub static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "scripting", acl = "scripting"),
    cmd("eval", -3, EVAL, eval)
        .doc("2.6.0", "Execute a Lua script server side")
        .complexity("Depends on the script that is executed.")
        .keys_fn(eval_keys)
        .key_specs(&[KeySpec::at(2, &["RW", "access", "update"]).keynum(0, 1, 1).notes("We cannot tell how the keys will be used so we assume the worst, RW and UPDATE")]),
    cmd("evalsha", -3, EVAL, evalsha)
        .doc("2.6.0", "Execute a Lua script server side")
        .complexity("Depends on the script that is executed.")
        .keys_fn(eval_keys)
        .key_specs(&[KeySpec::at(2, &["RW", "access", "update"]).keynum(0, 1, 1)]),
    cmd("eval_ro", -3, EVAL | READONLY, eval_ro)
        .doc("7.0.0", "Execute a read-only Lua script server side")
        .complexity("Depends on the script that is executed.")
        .keys_fn(eval_keys)
        .key_specs(&[KeySpec::at(2, &["RO", "access"]).keynum(0, 1, 1).notes("We cannot tell how the keys will be used so we assume the worst, RO and ACCESS")]),
    cmd("evalsha_ro", -3, EVAL | READONLY, evalsha_ro)
        .doc("7.0.0", "Execute a read-only Lua script server side")
        .complexity("Depends on the script that is executed.")
        .keys_fn(eval_keys)
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

fn script_parent(_: &mut Ctx, _: Args) -> CmdResult {
    Err(CmdError::err("unknown subcommand"))
}

/// Where EVAL finds its script: the body, or a SHA1 to look up.
enum Source<'a> {
    Body(&'a [u8]),
    Sha(String),
}

/// EVAL's parsed arguments.
struct Request<'a> {
    source: Source<'a>,
    keys: Vec<&'a [u8]>,
    argv: Vec<&'a [u8]>,
}

fn parse(args: Args, by_sha: bool) -> Result<Request, CmdError> {
    let n = arg_i64(args.get(2))?;
    if n < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    if n as usize > args.len() - 3 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    let split = 3 + n as usize;
    let source = if by_sha {
        Source::Sha(String::from_utf8_lossy(args.get(1)).to_ascii_lowercase())
    } else {
        Source::Body(args.get(1))
    };
    Ok(Request {
        source,
        keys: (3..split).map(|i| args.get(i)).collect(),
        argv: (split..args.len()).map(|i| args.get(i)).collect(),
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
fn run(ctx: &mut Ctx, req: Request, read_only: bool) -> CmdResult {
    let core = ctx.core;
    let (sha, body) = match req.source {
        Source::Body(b) => {
            let sha = vm::sha1_hex(b);
            core.scripts.insert(&sha, b);
            (sha, Some(b.into()))
        }
        Source::Sha(sha) if sha.len() == 40 => {
            let body = core.scripts.get(&sha);
            (sha, body)
        }
        Source::Sha(_) => return Err(noscript()),
    };
    let script = Script {
        db: ctx.client.db,
        keys: (!req.keys.is_empty()).then(|| req.keys.iter().map(|k| k.to_vec()).collect()),
        read_only,
    };
    vm::with(core, |vm| {
        let f = vm
            .function(&sha, body.as_deref())
            .map_err(|m| CmdError::err(format!("Error compiling script (new function): {m}")))?
            .ok_or_else(noscript)?;
        vm.set_args(&req.keys, &req.argv).map_err(lua_err)?;
        let plan = script.keys.as_ref().map(|ks| {
            ks.iter()
                .map(|k| (script.db, core.keyspace.slot(k).shard))
                .collect::<Vec<_>>()
        });
        let _hold =
            (!crate::keyspace::held::holding()).then(|| core.keyspace.hold(plan.as_deref()));
        execute(ctx, vm, &script, f, &sha)
    })
}

fn lua_err(e: mlua::Error) -> CmdError {
    CmdError::err(e.to_string())
}

/// Runs `f` with `redis.call` bound to this client, its writes buffered
/// and emitted as one unit; writes the reply.
fn execute(ctx: &mut Ctx, vm: &mut vm::Vm, s: &Script, f: mlua::Function, sha: &str) -> CmdResult {
    let outer = ctx.client.exec_effects.is_some();
    let was_in_exec = ctx.client.in_exec;
    if !outer && ctx.core.effects.enabled() {
        ctx.client.exec_effects = Some(Vec::new());
    }
    ctx.client.in_exec = true;
    let result = call_with(ctx, vm, s, f);
    ctx.client.in_exec = was_in_exec;
    ctx.client.db = s.db;
    if !outer {
        if let Some(effects) = ctx.client.exec_effects.take() {
            crate::commands::multi::emit_unit(ctx.core, effects);
        }
    }
    let (ok, value) = result.map_err(lua_err)?;
    if ok {
        convert::lua_to_reply(ctx.out, &value, 0);
    } else {
        ctx.out.error(&failure(&value, sha));
    }
    Ok(())
}

/// Calls the script through the prelude's `run` (xpcall with Redis's error
/// handler) with `redis.call` bound to `ctx` for the call's duration.
fn call_with(
    ctx: &mut Ctx,
    vm: &vm::Vm,
    s: &Script,
    f: mlua::Function,
) -> mlua::Result<(bool, mlua::Value)> {
    let cell = std::cell::RefCell::new(ctx);
    let lua = &vm.lua;
    lua.scope(|scope| {
        let rcall = scope.create_function(|lua, args: mlua::Variadic<mlua::Value>| {
            let mut c = cell.borrow_mut();
            call::rcall(&mut c, s, lua, args)
        })?;
        vm.private.set("rcall", rcall)?;
        let run: mlua::Function = vm.private.raw_get("run")?;
        let r = run.call::<(bool, mlua::Value)>(f);
        vm.private.set("rcall", mlua::Value::Nil)?;
        r
    })
}

/// A failed script's error line: Redis's "<err> script: <sha>, on
/// @user_script:<line>." when the error handler found the line.
fn failure(v: &mlua::Value, sha: &str) -> String {
    let mlua::Value::Table(t) = v else {
        return "ERR unknown error".into();
    };
    let err: String = t
        .raw_get("err")
        .unwrap_or_else(|_| "ERR unknown error".into());
    let src: Option<String> = t.raw_get("source").ok();
    let line: Option<i64> = t.raw_get("line").ok();
    match (src, line) {
        (Some(src), Some(line)) => format!("{err} script: {sha}, on {src}:{line}."),
        _ => convert::error_line(&err),
    }
}

// ---------------------------------------------------------------- SCRIPT

fn script_load(ctx: &mut Ctx, args: Args) -> CmdResult {
    let body = args.get(2);
    let sha = vm::sha1_hex(body);
    vm::with(ctx.core, |vm| vm.function(&sha, Some(body)))
        .map_err(|m| CmdError::err(format!("Error compiling script (new function): {m}")))?;
    ctx.core.scripts.insert(&sha, body);
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

fn script_kill(_: &mut Ctx, _: Args) -> CmdResult {
    Err(CmdError::Msg(
        "NOTBUSY No scripts in execution right now.".into(),
    ))
}
