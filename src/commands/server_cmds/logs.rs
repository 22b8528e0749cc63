//! SLOWLOG and LATENCY.
//!
//! The slow log itself is filled by the dispatcher (`conn.rs`, after each
//! command, against `slowlog-log-slower-than`); this file only reads and
//! resets it. Both the slow log and MONITOR show passwords and ACL rules
//! as "(redacted)", where Redis's commands redact them ([`redacted`]). We keep no latency-event samples, so LATENCY answers with
//! Redis's well-formed empty replies, and HISTOGRAM reports call counts.

use std::sync::atomic::Ordering::Relaxed;

use super::super::{flags::*, CmdError, CmdResult, Command, Ctx};
use super::reply_help;
use std::sync::Arc;

use crate::core::client::ClientState;
use crate::core::Core;
use crate::keyspace::hlc::unix_ms;
use crate::protocol::Args;

const ADM: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

pub static SLOWLOG_SUBCOMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    cmd("get", -2, ADM, slowlog_get)
        .doc("2.2.12", "Returns the slow log's entries.")
        .complexity("O(N) where N is the number of entries returned")
        .tips(&["request_policy:all_nodes", "nondeterministic_output"]),
    cmd("len", 2, ADM, slowlog_len)
        .doc("2.2.12", "Returns the number of entries in the slow log.")
        .tips(&["request_policy:all_nodes", "response_policy:agg_sum", "nondeterministic_output"]),
    cmd("reset", 2, ADM, slowlog_reset)
        .doc("2.2.12", "Clears all entries from the slow log.")
        .complexity("O(N) where N is the number of entries in the slowlog")
        .tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
    cmd("help", 2, LOADING | STALE, slowlog_help)
        .doc("6.2.0", "Show helpful text about the different subcommands"),
};

pub static LATENCY_SUBCOMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    cmd("latest", 2, ADM, latency_empty)
        .doc("2.8.13", "Returns the latest latency samples for all events.")
        .tips(&["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"]),
    cmd("history", 3, ADM, latency_empty)
        .doc("2.8.13", "Returns timestamp-latency samples for an event.")
        .tips(&["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"]),
    cmd("reset", -2, ADM, latency_reset)
        .doc("2.8.13", "Resets the latency data for one or more events.")
        .tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
    cmd("doctor", 2, ADM, latency_doctor)
        .doc("2.8.13", "Returns a human-readable latency analysis report.")
        .tips(&["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"]),
    cmd("graph", 3, ADM, latency_graph)
        .doc("2.8.13", "Returns a latency graph for an event.")
        .tips(&["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"]),
    cmd("histogram", -2, ADM, latency_histogram)
        .doc("7.0.0", "Returns the cumulative distribution of latencies of a subset or all commands.")
        .complexity("O(N) where N is the number of commands with latency information being retrieved.")
        .tips(&["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"]),
    cmd("help", 2, LOADING | STALE, latency_help)
        .doc("2.8.13", "Returns helpful text about the different subcommands."),
};

const SLOWLOG_HELP: &[&str] = &[
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
];

fn slowlog_help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    reply_help(ctx, "slowlog", SLOWLOG_HELP);
    Ok(())
}

fn slowlog_get(ctx: &mut Ctx, args: Args) -> CmdResult {
    let count = match args.len() {
        2 => 10,
        3 => match crate::protocol::parse_i64(args.get(2)) {
            Some(-1) => usize::MAX,
            Some(n) if n >= 0 => n as usize,
            _ => return Err(CmdError::err("count should be greater than or equal to -1")),
        },
        _ => return Err(CmdError::Syntax),
    };
    let entries: Vec<_> = ctx
        .core
        .slowlog
        .lock()
        .iter()
        .take(count)
        .cloned()
        .collect();
    let out = &mut *ctx.out;
    out.array(entries.len());
    for e in entries {
        out.array(6);
        out.int(e.id as i64);
        out.int(e.time as i64);
        out.int(e.usec as i64);
        out.array(e.args.len());
        for a in &e.args {
            out.bulk(a);
        }
        out.bulk(e.addr.as_bytes());
        out.bulk(e.name.as_bytes());
    }
    Ok(())
}

fn slowlog_len(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let n = ctx.core.slowlog.lock().len();
    ctx.out.int(n as i64);
    Ok(())
}

fn slowlog_reset(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.core.slowlog.lock().clear();
    ctx.out.ok();
    Ok(())
}

const LATENCY_HELP: &[&str] = &[
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
];

fn latency_help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    reply_help(ctx, "latency", LATENCY_HELP);
    Ok(())
}

fn latency_empty(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.array(0);
    Ok(())
}

fn latency_reset(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.int(0);
    Ok(())
}

fn latency_graph(_ctx: &mut Ctx, args: Args) -> CmdResult {
    Err(CmdError::err(format!(
        "No samples available for event '{}'",
        String::from_utf8_lossy(args.get(2))
    )))
}

fn latency_doctor(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let threshold = ctx.core.config.read().get_i64("latency-monitor-threshold");
    let text = if threshold == 0 {
        "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n"
    } else {
        "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sleep a little more.\n"
    };
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

/// LATENCY HISTOGRAM [cmd ...]: per command its call count; the bucket map
/// is empty (no per-call latency histogram is kept).
fn latency_histogram(ctx: &mut Ctx, args: Args) -> CmdResult {
    let srv = ctx.core;
    let workers = srv.workers.lock().clone();
    let wanted: Vec<String> = args
        .iter()
        .skip(2)
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let rows: Vec<(&str, u64)> = srv
        .commands
        .full_names
        .iter()
        .enumerate()
        .map(|(id, n)| {
            let calls = workers.iter().map(|w| w.cmds[id].calls.load(Relaxed)).sum();
            (n.as_str(), calls)
        })
        .filter(|(n, calls)| *calls > 0 && (wanted.is_empty() || wanted.iter().any(|w| w == n)))
        .collect();
    let out = &mut *ctx.out;
    out.map(rows.len());
    for (n, calls) in rows {
        out.bulk(n.as_bytes());
        out.map(2);
        out.bulk(b"calls");
        out.int(calls as i64);
        out.bulk(b"histogram_usec");
        out.map(0);
    }
    Ok(())
}

/// What a redacted argument shows.
const REDACTED: &[u8] = b"(redacted)";

/// The positions of the arguments of command `id` that SLOWLOG and
/// MONITOR show as "(redacted)": where Redis's handlers call
/// redactClientCommandArgument.
pub fn redacted(srv: &Core, id: usize, args: Args) -> Vec<usize> {
    let n = args.len();
    let is = |i: usize, w: &str| args.get(i).eq_ignore_ascii_case(w.as_bytes());
    match srv.commands.full_names[id].as_str() {
        "acl|setuser" => (2..n).collect(),
        "auth" if n == 2 => vec![1],
        "auth" if n == 3 => vec![1, 2],
        "hello" => options_redacted(args, 2, &[("setname", 1, false), ("auth", 2, true)]),
        "migrate" => options_redacted(
            args,
            6,
            &[
                ("copy", 0, false),
                ("replace", 0, false),
                ("auth", 1, true),
                ("auth2", 2, true),
            ],
        ),
        "config|set" if n >= 4 && n.is_multiple_of(2) => (2..n)
            .step_by(2)
            .filter(|&i| {
                ["masteruser", "masterauth", "requirepass"]
                    .iter()
                    .any(|w| is(i, w))
            })
            .map(|i| i + 1)
            .collect(),
        _ => vec![],
    }
}

/// The values to redact among options from `from` on: `(name, values,
/// secret)`, read as the command's handler reads them (stopping at the
/// first word that is not one of them, or lacks its values).
fn options_redacted(args: Args, from: usize, opts: &[(&str, usize, bool)]) -> Vec<usize> {
    let (mut v, mut j) = (vec![], from);
    while j < args.len() {
        let word = args.get(j);
        let Some(&(_, k, secret)) = opts
            .iter()
            .find(|(o, k, _)| word.eq_ignore_ascii_case(o.as_bytes()) && j + k < args.len())
        else {
            break;
        };
        if secret {
            v.extend(j + 1..=j + k);
        }
        j += k + 1;
    }
    v
}

/// A MONITOR line for the client's command `id` (None: one with nothing
/// to redact, EVAL's and FCALL's own line).
pub fn feed_monitors(srv: &Core, client: &ClientState, id: Option<usize>, args: Args) {
    let addr = client
        .shared
        .as_ref()
        .map(|s| s.addr.clone())
        .unwrap_or_default();
    let hidden = id.map_or(vec![], |id| redacted(srv, id, args));
    if hidden.is_empty() {
        return feed_monitors_from(srv, client.db, &addr, args);
    }
    let shown: Vec<&[u8]> = (0..args.len())
        .map(|i| {
            if hidden.contains(&i) {
                REDACTED
            } else {
                args.get(i)
            }
        })
        .collect();
    let owned = crate::protocol::OwnedArgs::new(&shown);
    feed_monitors_from(srv, client.db, &addr, owned.args())
}

/// A MONITOR line for a command of `who` ("lua" for a script's command,
/// as Redis shows it) in database `db`.
pub fn feed_monitors_from(srv: &Core, db: usize, who: &str, args: Args) {
    let (client_db, addr) = (db, who);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut line = format!(
        "+{}.{:06} [{} {}]",
        now.as_secs(),
        now.subsec_micros(),
        client_db,
        addr
    );
    for a in args.iter() {
        line.push(' ');
        crate::config::parse::push_quoted_bytes(&mut line, a);
    }
    line.push_str("\r\n");
    let limit = srv.hot.obuf_limits.read().monitor();
    srv.clients
        .feed_monitors(Arc::new(line.into_bytes()), &limit);
}

pub fn maybe_slowlog(srv: &Core, client: &ClientState, id: usize, args: Args, usec: u64) {
    let threshold = srv.hot.slowlog_slower_than.load(Relaxed) as i64;
    if threshold < 0 || (usec as i64) < threshold {
        return;
    }
    let cmd = srv.commands.get(id);
    if cmd.flags & SKIP_SLOWLOG != 0 {
        return;
    }
    let max = srv.hot.slowlog_max_len.load(Relaxed);
    let mut shown: Vec<Vec<u8>> = vec![];
    let argc = args.len();
    let hidden = redacted(srv, id, args);
    for (i, a) in args.iter().enumerate() {
        let a = if hidden.contains(&i) { REDACTED } else { a };
        if i == 31 && argc > 32 {
            shown.push(format!("... ({} more arguments)", argc - 31).into_bytes());
            break;
        }
        if a.len() > 128 {
            let mut v = a[..128].to_vec();
            v.extend_from_slice(format!("... ({} more bytes)", a.len() - 128).as_bytes());
            shown.push(v);
        } else {
            shown.push(a.to_vec());
        }
    }
    let entry = crate::core::SlowEntry {
        id: srv.slowlog_next_id.fetch_add(1, Relaxed),
        time: unix_ms() / 1000,
        usec,
        args: shown,
        addr: client
            .shared
            .as_ref()
            .map(|s| s.addr.clone())
            .unwrap_or_default(),
        name: client.name.clone().unwrap_or_default(),
    };
    let mut log = srv.slowlog.lock();
    log.push_front(entry);
    while log.len() > max {
        log.pop_back();
    }
}
