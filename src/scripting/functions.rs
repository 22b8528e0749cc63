//! FUNCTION and FCALL (Redis 7's functions.c and function_lua.c).
//!
//! The libraries live in `core::scripts::Functions`, shared by every
//! thread: their code, and the functions each registered with their flags.
//! FUNCTION LOAD runs the code in the loading thread's Lua state to learn
//! what it registers (`redis.register_function`, the only API there while
//! it loads); another thread compiles and runs it again in its own state
//! the first time it calls one of its functions (`Vm::library_function`),
//! as it compiles EVAL scripts from the shared cache. A library's code
//! can reach nothing but `redis.register_function` and `redis.log` while
//! it loads, so every state registers the same functions.
//!
//! FUNCTION LOAD, DELETE, FLUSH and RESTORE propagate as themselves (to
//! replicas and the AOF, as Redis does); the libraries are saved in the RDB
//! file (RDB_OPCODE_FUNCTION2, `persistence`) and loaded back from it.

use std::sync::Arc;

use super::flags::NAMES;
use super::vm;
use crate::commands::flags::*;
use crate::commands::keyspec::KeySpec;
use crate::commands::{CmdError, CmdResult, Command, Ctx};
use crate::core::scripts::{FunctionState, Library};
use crate::core::Core;
use crate::protocol::Args;

const FCALL: u32 = NOSCRIPT | SKIP_MONITOR | MAY_REPLICATE | NO_MANDATORY_KEYS | STALE;
const FCALL_RO: u32 = NOSCRIPT | SKIP_MONITOR | NO_MANDATORY_KEYS | STALE | READONLY;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "scripting", acl = "scripting"),
    cmd("fcall", -3, FCALL, fcall)
        .doc("7.0.0", "Invoke a function")
        .complexity("Depends on the function that is executed.")
        .keys_fn(super::eval_keys)
        .flags_fn(fcall_flags)
        .key_specs(&[KeySpec::at(2, &["RW", "access", "update"]).keynum(0, 1, 1).notes("We cannot tell how the keys will be used so we assume the worst, RW and UPDATE")]),
    cmd("fcall_ro", -3, FCALL_RO, fcall_ro)
        .doc("7.0.0", "Invoke a read-only function")
        .complexity("Depends on the function that is executed.")
        .keys_fn(super::eval_keys)
        .flags_fn(fcall_flags)
        .key_specs(&[KeySpec::at(2, &["RO", "access"]).keynum(0, 1, 1).notes("We cannot tell how the keys will be used so we assume the worst, RO and ACCESS")]),
    container("function", -2, parent)
        .doc("7.0.0", "A container for function commands")
        .complexity("Depends on subcommand.")
        .subs(FUNCTION_SUBS),
};

static FUNCTION_SUBS: &[Command] = crate::commands::command_table! {
    family(group = "scripting", acl = "scripting"),
    cmd("delete", 3, NOSCRIPT | WRITE, delete)
        .doc("7.0.0", "Delete a function by name")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    cmd("dump", 2, NOSCRIPT, dump)
        .doc("7.0.0", "Dump all functions into a serialized binary payload")
        .complexity("O(N) where N is the number of functions"),
    cmd("flush", -2, NOSCRIPT | WRITE, flush)
        .doc("7.0.0", "Deleting all functions")
        .complexity("O(N) where N is the number of functions deleted")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    cmd("kill", 2, NOSCRIPT | ALLOW_BUSY, kill)
        .doc("7.0.0", "Kill the function currently in execution.")
        .tips(&["request_policy:all_shards", "response_policy:one_succeeded"]),
    cmd("list", -2, NOSCRIPT, list)
        .doc("7.0.0", "List information about all the functions")
        .complexity("O(N) where N is the number of functions")
        .tips(&["nondeterministic_output_order"]),
    cmd("load", -3, NOSCRIPT | WRITE | DENYOOM, load)
        .doc("7.0.0", "Create a function with the given arguments (name, code, description)")
        .complexity("O(1) (considering compilation time is redundant)")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    cmd("restore", -3, NOSCRIPT | WRITE | DENYOOM, restore)
        .doc("7.0.0", "Restore all the functions on the given payload")
        .complexity("O(N) where N is the number of functions on the payload")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    cmd("help", 2, LOADING | STALE, help)
        .doc("7.0.0", "Show helpful text about the different subcommands"),
    cmd("stats", 2, NOSCRIPT | ALLOW_BUSY, stats)
        .doc("7.0.0", "Return information about the function currently running (name, description, duration)")
        .tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"]),
};

const HELP: &[&str] = &[
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
];

fn help(ctx: &mut Ctx, _: Args) -> CmdResult {
    crate::commands::server_cmds::reply_help(ctx, "function", HELP);
    Ok(())
}

fn parent(_: &mut Ctx, _: Args) -> CmdResult {
    Err(CmdError::err("unknown subcommand"))
}

/// FCALL's flags for this call: its function's (fcallGetCommandFlags).
fn fcall_flags(core: &Core, args: Args, f: u32) -> u32 {
    let arg = args.get(1);
    let found = vm::found_flags(core, arg);
    match found.or_else(|| core.functions.flags_of(&String::from_utf8_lossy(arg))) {
        Some(flags) => super::flags::command_flags(f, flags),
        None => f,
    }
}

fn fcall(ctx: &mut Ctx, args: Args) -> CmdResult {
    call(ctx, args, false)
}

fn fcall_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    call(ctx, args, true)
}

/// FCALL: the function from this thread's lookups while the directory is
/// unchanged (`Vm::found`: one hash lookup), else from the directory,
/// compiled here and kept.
fn call(ctx: &mut Ctx, args: Args, ro: bool) -> CmdResult {
    let core = ctx.core;
    let arg = args.get(1);
    vm::with(core, |vm| {
        let gen = core.functions.generation();
        if let Some(found) = vm.found(gen, arg) {
            let (list, n) = super::split_keys(args)?;
            return run_found(ctx, vm, found, &list, n, ro);
        }
        let (name, flags, lib) = core
            .functions
            .find(&String::from_utf8_lossy(arg))
            .ok_or_else(|| CmdError::err("Function not found"))?;
        let (list, n) = super::split_keys(args)?;
        let f = vm.library_function(&lib, &name).map_err(CmdError::Msg)?;
        vm.keep_found(gen, arg, (name, flags, f))
            .map_err(|e| CmdError::err(e.to_string()))?;
        let found = vm.found(gen, arg).expect("kept above");
        run_found(ctx, vm, found, &list, n, ro)
    })
}

/// Runs `found` with the first `n` of `list` as its keys, the rest as its
/// arguments.
fn run_found(
    ctx: &mut Ctx,
    vm: &vm::Vm,
    found: &vm::Found,
    list: &[&[u8]],
    n: usize,
    ro: bool,
) -> CmdResult {
    let run = super::Run {
        f: found.f.id(),
        name: &found.name,
        keys: &list[..n],
        argv: &list[n..],
        function: true,
    };
    super::invoke(ctx, vm, run, found.flags, ro)
}

/// A library's code as its engine compiles it: from the line feed that
/// ends its metadata line (kept, so line numbers stay right).
pub(super) fn code_of(code: &[u8]) -> &[u8] {
    let end = code.iter().position(|&b| b == b'\n').unwrap_or(code.len());
    &code[end..]
}

/// The `#!<engine> name=<name>` line of a library (functionExtractLibMetaData):
/// (engine, name). Err: Redis's message.
fn metadata(code: &[u8]) -> Result<(String, String), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else {
        return Err("Invalid library metadata".into());
    };
    let line = String::from_utf8_lossy(&code[..end]);
    let words = crate::config::parse::split_line(&line).unwrap_or_default();
    let mut parts = words.iter().map(|w| w.as_str());
    let engine = parts
        .next()
        .ok_or("Invalid library metadata")?
        .trim_start_matches("#!")
        .to_string();
    let mut name = None;
    for p in parts {
        if p.len() >= 5 && p[..5].eq_ignore_ascii_case("name=") {
            if name.is_some() {
                return Err(
                    "Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(p[5..].to_string());
            continue;
        }
        return Err(format!("Invalid metadata value given: {p}"));
    }
    let name = name.ok_or("Library name was not given")?;
    Ok((engine, name))
}

/// Compiles and registers `code` in this thread's state, returning the
/// library to install (not yet installed). Err: the reply's error.
pub(super) fn build(core: &Core, code: &[u8]) -> Result<Library, CmdError> {
    let (engine, name) = metadata(code).map_err(CmdError::err)?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(CmdError::err(
            "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long",
        ));
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(CmdError::err(format!("Engine '{engine}' not found")));
    }
    let id = core.functions.next_id();
    vm::with(core, |vm| {
        let fs = vm.load_library(code_of(code)).map_err(CmdError::Msg)?;
        let lib = Library {
            name: name.clone(),
            engine: "LUA".into(),
            code: code.to_vec(),
            functions: fs.iter().map(|r| r.info.clone()).collect(),
            id,
        };
        vm.keep_library(&name, id, fs);
        Ok(lib)
    })
}

/// Installs the libraries of an RDB file (`replace`: over libraries of
/// the same names, as DEBUG RELOAD MERGE; else such a library fails the
/// load, as in Redis). Err: why, logged by the caller.
pub(crate) fn load_saved(core: &Core, codes: Vec<Vec<u8>>, replace: bool) -> Result<(), String> {
    for code in codes {
        let lib = build(core, &code).map_err(|e| e.render())?;
        core.functions.update(|s| s.add(Arc::new(lib), replace))?;
    }
    Ok(())
}

/// Drops every library (the databases were emptied for a load: DEBUG
/// RELOAD, a replica's full sync; Redis's emptyData without
/// EMPTYDB_NOFUNCTIONS).
pub(crate) fn clear(core: &Core) {
    core.functions.update(|s| *s = FunctionState::default());
}

/// The libraries' code, in name order (what the RDB file keeps).
pub(crate) fn saved_code(core: &Core) -> Vec<Vec<u8>> {
    core.functions
        .snapshot()
        .libs
        .values()
        .map(|l| l.code.clone())
        .collect()
}

fn propagate(ctx: &mut Ctx, args: Args) {
    let argv: Vec<&[u8]> = args.iter().collect();
    let v = ctx.new_version();
    ctx.propagate(v, &argv);
}

fn load(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut replace = false;
    let mut i = 2;
    while i < args.len() - 1 {
        if args.get(i).eq_ignore_ascii_case(b"replace") {
            replace = true;
            i += 1;
            continue;
        }
        return Err(CmdError::err(format!(
            "Unknown option given: {}",
            String::from_utf8_lossy(args.get(i))
        )));
    }
    if i >= args.len() {
        return Err(CmdError::err("Function code is missing"));
    }
    let lib = build(ctx.core, args.get(i))?;
    let name = lib.name.clone();
    ctx.core
        .functions
        .update(|s| s.add(Arc::new(lib), replace))
        .map_err(CmdError::err)?;
    propagate(ctx, args);
    ctx.out.bulk(name.as_bytes());
    Ok(())
}

fn delete(ctx: &mut Ctx, args: Args) -> CmdResult {
    let name = String::from_utf8_lossy(args.get(2)).into_owned();
    if !ctx.core.functions.update(|s| s.remove(&name)) {
        return Err(CmdError::err("Library not found"));
    }
    propagate(ctx, args);
    ctx.out.ok();
    Ok(())
}

fn flush(ctx: &mut Ctx, args: Args) -> CmdResult {
    match args.len() {
        2 => {}
        3 if args.get(2).eq_ignore_ascii_case(b"async")
            || args.get(2).eq_ignore_ascii_case(b"sync") => {}
        3 => {
            return Err(CmdError::err(
                "FUNCTION FLUSH only supports SYNC|ASYNC option",
            ))
        }
        _ => {
            return Err(CmdError::err(
                "unknown subcommand or wrong number of arguments for 'flush'. Try FUNCTION HELP.",
            ))
        }
    }
    ctx.core.functions.update(|s| *s = FunctionState::default());
    propagate(ctx, args);
    ctx.out.ok();
    Ok(())
}

fn kill(ctx: &mut Ctx, _: Args) -> CmdResult {
    super::kill(ctx.core, false)?;
    ctx.out.ok();
    Ok(())
}

fn stats(ctx: &mut Ctx, _: Args) -> CmdResult {
    write_stats(ctx.core, ctx.out)
}

/// FUNCTION STATS's reply (also answered while a script is busy on the
/// client's own thread).
pub(crate) fn write_stats(core: &Core, out: &mut crate::protocol::ReplyBuf) -> CmdResult {
    let (libs, funcs) = core.functions.counts();
    let runs = core.scripts.busy.runs();
    if runs.first().is_some_and(|r| r.eval) {
        return Err(super::busy_error(true));
    }
    out.map(2);
    out.bulk(b"running_script");
    match runs.first() {
        None => out.null(),
        Some(r) => {
            out.map(3);
            out.bulk(b"name");
            out.bulk(r.name.as_bytes());
            out.bulk(b"command");
            out.array(r.argv.len());
            for a in &r.argv {
                out.bulk(a);
            }
            out.bulk(b"duration_ms");
            out.int(r.start.elapsed().as_millis() as i64);
        }
    }
    write_engines(out, libs, funcs);
    Ok(())
}

fn write_engines(out: &mut crate::protocol::ReplyBuf, libs: usize, funcs: usize) {
    out.bulk(b"engines");
    out.map(1);
    out.bulk(b"LUA");
    out.map(2);
    out.bulk(b"libraries_count");
    out.int(libs as i64);
    out.bulk(b"functions_count");
    out.int(funcs as i64);
}

fn list(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut with_code = false;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        if !with_code && a.eq_ignore_ascii_case(b"withcode") {
            with_code = true;
        } else if pattern.is_none() && a.eq_ignore_ascii_case(b"libraryname") {
            if i >= args.len() - 1 {
                return Err(CmdError::err("library name argument was not given"));
            }
            i += 1;
            pattern = Some(args.get(i));
        } else {
            return Err(CmdError::err(format!(
                "Unknown argument {}",
                String::from_utf8_lossy(a)
            )));
        }
        i += 1;
    }
    let state = ctx.core.functions.snapshot();
    let libs: Vec<&Arc<Library>> = state
        .libs
        .values()
        .filter(|l| pattern.is_none_or(|p| crate::glob::glob_match(p, l.name.as_bytes(), true)))
        .collect();
    ctx.out.array(libs.len());
    for l in libs {
        ctx.out.map(if with_code { 4 } else { 3 });
        ctx.out.bulk(b"library_name");
        ctx.out.bulk(l.name.as_bytes());
        ctx.out.bulk(b"engine");
        ctx.out.bulk(l.engine.as_bytes());
        ctx.out.bulk(b"functions");
        ctx.out.array(l.functions.len());
        for f in &l.functions {
            ctx.out.map(3);
            ctx.out.bulk(b"name");
            ctx.out.bulk(f.name.as_bytes());
            ctx.out.bulk(b"description");
            match &f.desc {
                Some(d) => ctx.out.bulk(d.as_bytes()),
                None => ctx.out.null(),
            }
            ctx.out.bulk(b"flags");
            let names: Vec<&str> = NAMES
                .iter()
                .filter(|(b, _)| f.flags & b != 0)
                .map(|(_, n)| *n)
                .collect();
            ctx.out.set(names.len());
            for n in names {
                ctx.out.simple(n);
            }
        }
        if with_code {
            ctx.out.bulk(b"library_code");
            ctx.out.bulk(&l.code);
        }
    }
    Ok(())
}

fn dump(ctx: &mut Ctx, _: Args) -> CmdResult {
    let codes = saved_code(ctx.core);
    let payload =
        crate::persistence::rdb::encode::function_payload(codes.iter().map(|c| c.as_slice()), true);
    ctx.out.bulk(&payload);
    Ok(())
}

fn restore(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() > 4 {
        return Err(CmdError::err(
            "unknown subcommand or wrong number of arguments for 'restore'. Try FUNCTION HELP.",
        ));
    }
    #[derive(PartialEq)]
    enum Policy {
        Append,
        Replace,
        Flush,
    }
    let policy = match args.len() {
        4 => {
            let p = args.get(3);
            if p.eq_ignore_ascii_case(b"append") {
                Policy::Append
            } else if p.eq_ignore_ascii_case(b"replace") {
                Policy::Replace
            } else if p.eq_ignore_ascii_case(b"flush") {
                Policy::Flush
            } else {
                return Err(CmdError::err(
                    "Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                ));
            }
        }
        _ => Policy::Append,
    };
    let payload = args.get(2);
    crate::persistence::rdb::decode::verify_dump_payload(payload)
        .map_err(|_| CmdError::err("DUMP payload version or checksum are wrong"))?;
    let codes =
        crate::persistence::rdb::decode::decode_function_payload(payload).map_err(CmdError::err)?;
    let mut fresh = FunctionState::default();
    for code in codes {
        let lib = build(ctx.core, &code)?;
        fresh.add(Arc::new(lib), false).map_err(CmdError::err)?;
    }
    ctx.core
        .functions
        .update(|s| {
            if policy == Policy::Flush {
                *s = fresh;
                return Ok(());
            }
            let mut joined = s.clone();
            for lib in fresh.libs.into_values() {
                if policy == Policy::Append && joined.libs.contains_key(&lib.name) {
                    return Err(format!("Library {} already exists", lib.name));
                }
                joined.add(lib, policy == Policy::Replace)?;
            }
            *s = joined;
            Ok(())
        })
        .map_err(CmdError::err)?;
    propagate(ctx, args);
    ctx.out.ok();
    Ok(())
}
