//! SLOWLOG and LATENCY.
//!
//! The slow log itself is filled by the dispatcher (`conn.rs`, after each
//! command, against `slowlog-log-slower-than`); this file only reads and
//! resets it; LATENCY reads the latency monitor (`core/latency.rs`) and the
//! per-command histograms (`core/stats.rs`). Both the slow log and MONITOR
//! show passwords and ACL rules as "(redacted)", where Redis's commands
//! redact them ([`redacted`]).

use std::sync::atomic::Ordering::Relaxed;

use super::super::{flags::*, CmdError, CmdResult, Command, Ctx};
use super::reply_help;

use crate::core::client::ClientState;
use crate::core::stats::{histogram, step_bound_ns, HIST_STEPS};
use crate::core::Core;
use crate::keyspace::hlc::unix_ms;
use crate::protocol::Args;

const ADM: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

pub(crate) static SLOWLOG_SUBCOMMANDS: &[Command] = crate::commands::command_table! {
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

pub(crate) static LATENCY_SUBCOMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    cmd("latest", 2, ADM, latency_latest)
        .doc("2.8.13", "Returns the latest latency samples for all events.")
        .tips(&["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"]),
    cmd("history", 3, ADM, latency_history)
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

/// LATENCY LATEST: each event class's last sample and maximum.
fn latency_latest(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let all = ctx.core.latency.all();
    ctx.out.array(all.len());
    for (name, s) in all {
        let (time, ms) = s.samples.back().copied().unwrap_or_default();
        ctx.out.array(4);
        ctx.out.bulk(name.as_bytes());
        ctx.out.int(time as i64);
        ctx.out.int(ms as i64);
        ctx.out.int(s.max as i64);
    }
    Ok(())
}

/// LATENCY HISTORY <event>: its samples, oldest first.
fn latency_history(ctx: &mut Ctx, args: Args) -> CmdResult {
    let s = ctx
        .core
        .latency
        .get(&lossy(args.get(2)))
        .unwrap_or_default();
    ctx.out.array(s.samples.len());
    for (time, ms) in s.samples {
        ctx.out.array(2);
        ctx.out.int(time as i64);
        ctx.out.int(ms as i64);
    }
    Ok(())
}

fn latency_reset(ctx: &mut Ctx, args: Args) -> CmdResult {
    let names: Vec<String> = args.iter().skip(2).map(lossy).collect();
    let n = ctx.core.latency.reset(&names);
    ctx.out.int(n as i64);
    Ok(())
}

fn lossy(a: &[u8]) -> String {
    String::from_utf8_lossy(a).into_owned()
}

/// LATENCY GRAPH <event>: Redis's header, then a graph of the samples
/// (one column each, 4 rows high, from the lowest to the highest) with
/// each sample's age below it.
fn latency_graph(ctx: &mut Ctx, args: Args) -> CmdResult {
    let event = lossy(args.get(2));
    let Some(s) = ctx.core.latency.get(&event) else {
        return Err(CmdError::err(format!(
            "No samples available for event '{event}'"
        )));
    };
    let (lo, hi) = s
        .samples
        .iter()
        .fold((u64::MAX, 0), |(l, h), &(_, ms)| (l.min(ms), h.max(ms)));
    let mut text = format!(
        "{event} - high {hi} ms, low {lo} ms (all time high {} ms)\n{}\n",
        s.max,
        "-".repeat(80)
    );
    let level = |ms: u64| {
        if hi == lo {
            3
        } else {
            ((ms - lo) * 3 / (hi - lo)) as usize
        }
    };
    for row in (0..4).rev() {
        for &(_, ms) in &s.samples {
            text.push(match level(ms) {
                l if l == row => '#',
                l if l > row => '|',
                _ if row == 0 => '_',
                _ => ' ',
            });
        }
        text.push('\n');
    }
    let now = unix_ms() / 1000;
    let ages: Vec<String> = s
        .samples
        .iter()
        .map(|&(t, _)| age(now.saturating_sub(t)))
        .collect();
    let rows = ages.iter().map(|a| a.len()).max().unwrap_or(0);
    for i in 0..rows {
        for a in &ages {
            text.push(a.as_bytes().get(i).map_or(' ', |&b| b as char));
        }
        text.push('\n');
    }
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

/// A sample's age as the graph labels it: "12s", "3m", "2h", "1d".
fn age(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn latency_doctor(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let threshold = ctx.core.config.read().get_i64("latency-monitor-threshold");
    let events = ctx.core.latency.all();
    let text = if threshold == 0 && events.is_empty() {
        "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".to_string()
    } else if events.is_empty() {
        "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n".to_string()
    } else {
        doctor_report(&events)
    };
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

/// DOCTOR's report of the events seen: Redis's per-event line (spikes,
/// average, mean deviation, period, worst) and a general advice.
fn doctor_report(events: &[(String, crate::core::latency::Series)]) -> String {
    let mut t = "Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n".to_string();
    for (i, (name, s)) in events.iter().enumerate() {
        let n = s.samples.len().max(1) as u64;
        let avg = s.samples.iter().map(|x| x.1).sum::<u64>() / n;
        let mad = s.samples.iter().map(|x| x.1.abs_diff(avg)).sum::<u64>() / n;
        let span = match (s.samples.front(), s.samples.back()) {
            (Some(a), Some(b)) if n > 1 => (b.0 - a.0) as f64 / (n - 1) as f64,
            _ => 0.0,
        };
        t.push_str(&format!(
            "{}. {name}: {} latency spikes (average {avg}ms, mean deviation {mad}ms, period {span:.2} sec). Worst all time event {}ms.\n",
            i + 1,
            s.samples.len(),
            s.max
        ));
    }
    t.push_str("\nI have a few advices for you:\n\n- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n");
    t
}

/// LATENCY HISTOGRAM [cmd ...]: each command's (or, for a container, each
/// of its subcommands') calls and cumulative latency distribution, for
/// those with a histogram (called since the last reset with
/// `latency-tracking yes`), as Redis's latencyCommand.
fn latency_histogram(ctx: &mut Ctx, args: Args) -> CmdResult {
    let t = &ctx.core.commands;
    let workers = ctx.core.workers.lock().clone();
    let mut ids: Vec<usize> = vec![];
    if args.len() == 2 {
        ids.extend(0..t.full_names.len());
    }
    for a in args.iter().skip(2) {
        if let Some(id) = t.lookup_full(a) {
            ids.push(id);
            if t.has_subcommands(id) {
                ids.extend(t.sub_ids(id));
            }
        }
    }
    let rows: Vec<(usize, [u64; HIST_STEPS])> = ids
        .into_iter()
        .map(|id| (id, histogram(&workers, id)))
        .filter(|(_, h)| h.iter().any(|&n| n > 0))
        .collect();
    let out = &mut *ctx.out;
    out.map(rows.len());
    for (id, h) in rows {
        out.bulk(t.full_names[id].as_bytes());
        out.map(2);
        out.bulk(b"calls");
        out.int(h.iter().sum::<u64>() as i64);
        out.bulk(b"histogram_usec");
        out.map(h.iter().filter(|&&n| n > 0).count());
        let mut cumulative = 0;
        for (k, &n) in h.iter().enumerate() {
            cumulative += n;
            if n > 0 {
                out.int((step_bound_ns(k) / 1000) as i64);
                out.int(cumulative as i64);
            }
        }
    }
    Ok(())
}

/// What a redacted argument shows.
const REDACTED: &[u8] = b"(redacted)";

/// The positions of the arguments of command `id` that SLOWLOG and
/// MONITOR show as "(redacted)": where Redis's handlers call
/// redactClientCommandArgument.
pub(crate) fn redacted(srv: &Core, id: usize, args: Args) -> Vec<usize> {
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
pub(crate) fn feed_monitors(srv: &Core, client: &ClientState, id: Option<usize>, args: Args) {
    let addr = client.shown_addr();
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
pub(crate) fn feed_monitors_from(srv: &Core, db: usize, who: &str, args: Args) {
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
    srv.clients.feed_monitors(
        crate::core::client::PushBuf::shared(line.into_bytes()),
        &limit,
    );
}

pub(crate) fn maybe_slowlog(srv: &Core, client: &ClientState, id: usize, args: Args, usec: u64) {
    if !slow_enough(srv, usec) {
        return;
    }
    let name = client.name.clone().unwrap_or_default();
    slowlog_push(srv, id, args, usec, client.shown_addr(), name);
}

/// Whether a call of `usec` microseconds reaches `slowlog-log-slower-than`.
pub(crate) fn slow_enough(srv: &Core, usec: u64) -> bool {
    let threshold = srv.hot.slowlog_slower_than.load(Relaxed) as i64;
    threshold >= 0 && (usec as i64) >= threshold
}

/// Logs the call, by a client at `addr` named `name`, into the slowlog
/// (it was slow enough).
pub(crate) fn slowlog_push(
    srv: &Core,
    id: usize,
    args: Args,
    usec: u64,
    addr: String,
    name: String,
) {
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
        addr,
        name,
    };
    let mut log = srv.slowlog.lock();
    log.push_front(entry);
    while log.len() > max {
        log.pop_back();
    }
}
