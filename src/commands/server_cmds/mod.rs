//! Server and introspection commands (Redis's server.c, networking.c,
//! debug.c, slowlog.c, latency.c, object.c's MEMORY).
//!
//! The family is split by topic: `info.rs` (INFO's sections; the text is `server/info.rs`), `client.rs` (CLIENT),
//! `command.rs` (COMMAND, generated only from the command table), `debug.rs`
//! (DEBUG and MEMORY), `logs.rs` (SLOWLOG, LATENCY), `lolwut.rs` (LOLWUT). This file holds the table
//! and the small commands: TIME, LASTSAVE, SHUTDOWN, MONITOR.
//!
//! Container commands (CLIENT, COMMAND, SLOWLOG, ...) list their subcommands
//! in the table, so the dispatcher resolves `client|list` itself (arity, stats,
//! COMMAND INFO); the parent's handler only runs for the bare name.

pub(crate) mod client;
mod command;
mod debug;
mod info;
pub(crate) mod logs;
mod lolwut;
mod persist;
mod sha1;

use std::sync::atomic::Ordering::Relaxed;

use super::util::eq_ic;
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::core::admin::{ShutdownFlags, ShutdownKind};
use crate::protocol::Args;

const ADM: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    cmd("info", -1, LOADING | STALE, info::info, acl = "dangerous")
        .doc("1.0.0", "Returns information and statistics about the server.")
        .tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"]),
    cmd("lolwut", -1, READONLY | FAST, lolwut::lolwut)
        .doc("5.0.0", "Display some computer art and the Redis version"),
    cmd("time", 1, LOADING | STALE | FAST, time)
        .doc("2.6.0", "Returns the server time.")
        .tips(&["nondeterministic_output"]),
    cmd("bgrewriteaof", 1, ADMIN | NOSCRIPT | NO_ASYNC_LOADING, persist::bgrewriteaof)
        .doc("1.0.0", "Asynchronously rewrites the append-only file to disk."),
    cmd("save", 1, ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI, persist::save)
        .doc("1.0.0", "Synchronously saves the database(s) to disk.")
        .complexity("O(N) where N is the total number of keys in all databases"),
    cmd("bgsave", -1, ADMIN | NOSCRIPT | NO_ASYNC_LOADING, persist::bgsave)
        .doc("1.0.0", "Asynchronously saves the database(s) to disk."),
    cmd("lastsave", 1, LOADING | STALE | FAST, lastsave, acl = "admin dangerous")
        .doc("1.0.0", "Returns the Unix timestamp of the last successful save to disk.")
        .tips(&["nondeterministic_output"]),
    cmd("shutdown", -1, ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | SKIP_SLOWLOG | ALLOW_BUSY, shutdown)
        .doc("1.0.0", "Synchronously saves the database(s) to disk and shuts down the Redis server."),
    cmd("monitor", 1, ADM, monitor)
        .doc("1.0.0", "Listens for all requests received by the server in real-time."),
    cmd("debug", -2, ADM | PROTECTED, debug::debug)
        .doc("1.0.0", "A container for debugging commands."),
    container("client", -2, container)
        .group("connection")
        .doc("2.4.0", "A container for client connection commands.")
        .complexity("Depends on subcommand.")
        .subs(client::SUBCOMMANDS),
    cmd("command", -1, LOADING | STALE, command::command_all, acl = "connection")
        .doc("2.8.13", "Returns detailed information about all commands.")
        .complexity("O(N) where N is the total number of Redis commands")
        .tips(&["nondeterministic_output_order"])
        .subs(command::SUBCOMMANDS),
    container("slowlog", -2, container)
        .doc("2.2.12", "A container for slow log commands.")
        .complexity("Depends on subcommand.")
        .subs(logs::SLOWLOG_SUBCOMMANDS),
    container("latency", -2, container)
        .doc("2.8.13", "A container for latency diagnostics commands.")
        .complexity("Depends on subcommand.")
        .subs(logs::LATENCY_SUBCOMMANDS),
    container("memory", -2, container)
        .doc("4.0.0", "A container for memory diagnostics commands.")
        .complexity("Depends on subcommand.")
        .subs(debug::MEMORY_SUBCOMMANDS),
};

/// The bare name of a container whose arity allows it (never reached for
/// arity -2 containers: the dispatcher rejects them first).
fn container(_ctx: &mut Ctx, args: Args) -> CmdResult {
    Err(CmdError::WrongArity(
        String::from_utf8_lossy(args.get(0)).to_ascii_lowercase(),
    ))
}

/// Redis's addReplyHelp: a header, the given lines, then HELP's own entry.
pub(crate) fn reply_help(ctx: &mut Ctx, cmd: &str, lines: &[&str]) {
    let out = &mut *ctx.out;
    out.array(lines.len() + 3);
    out.simple(&format!(
        "{} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        cmd.to_uppercase()
    ));
    for l in lines {
        out.simple(l);
    }
    out.simple("HELP");
    out.simple("    Prints this help.");
}

/// CLIENT SETNAME's rule: no spaces, newlines or other special characters.
pub(crate) fn validate_client_name(name: &[u8]) -> Result<(), CmdError> {
    if name.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(CmdError::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

pub(crate) fn set_client_name(ctx: &mut Ctx, name: &[u8]) {
    let s = String::from_utf8_lossy(name).into_owned();
    if let Some(sh) = &ctx.client.shared {
        *sh.name.lock() = s.clone();
    }
    ctx.client.name = if s.is_empty() { None } else { Some(s) };
}

fn time(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    ctx.out.array(2);
    ctx.out.bulk_int(now.as_secs() as i64);
    ctx.out.bulk_int(now.subsec_micros() as i64);
    Ok(())
}

fn lastsave(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.int(ctx.admin.lastsave() as i64);
    Ok(())
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]. Nothing is replied here:
/// the connection hands the request to the main thread (server/shutdown.rs)
/// and waits, as a blocked client; the process exits under it, or the
/// attempt is refused and it answers Redis's error.
fn shutdown(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut flags = ShutdownFlags::default();
    let mut abort = false;
    for a in args.iter().skip(1) {
        if eq_ic(a, "NOSAVE") {
            flags.nosave = true;
        } else if eq_ic(a, "SAVE") {
            flags.save = true;
        } else if eq_ic(a, "FORCE") {
            flags.force = true;
        } else if eq_ic(a, "NOW") {
            flags.now = true;
        } else if eq_ic(a, "ABORT") {
            abort = true;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    if (flags.save && flags.nosave) || (abort && args.len() != 2) {
        return Err(CmdError::Syntax);
    }
    if abort {
        if !ctx.admin.abort_shutdown() {
            return Err(CmdError::err("No shutdown in progress."));
        }
        ctx.out.ok();
        return Ok(());
    }
    ctx.client.shutdown_requested = Some(ShutdownKind::Command(flags));
    Ok(())
}

/// MONITOR: from now on this connection receives every command executed.
fn monitor(ctx: &mut Ctx, _args: Args) -> CmdResult {
    if ctx.client.monitor {
        return Ok(());
    }
    ctx.client.monitor = true;
    if let Some(sh) = &ctx.client.shared {
        sh.monitor.store(true, Relaxed);
        ctx.core.clients.monitors.fetch_add(1, Relaxed);
    }
    ctx.out.ok();
    Ok(())
}
