//! CLIENT subcommands (Redis's networking.c clientCommand).
//!
//! Other connections are seen through the registry's [`ClientShared`]
//! records: CLIENT LIST renders them, CLIENT KILL sends their task a
//! `Push::Kill`. This connection's own state is `ctx.client`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::super::util::{arg_i64, eq_ic, lossy};
use super::super::{flags::*, CmdError, CmdResult, Command, Ctx};
use super::{reply_help, set_client_name, validate_client_name};
use crate::core::client::{ClientShared, ReplyMode};
use crate::core::Core;
use crate::keyspace::hlc::unix_ms;
use crate::protocol::Args;

const CONN: u32 = NOSCRIPT | LOADING | STALE;
const ADM: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

pub(crate) static SUBCOMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "connection", acl = "connection"),
    cmd("id", 2, CONN, id)
        .doc("5.0.0", "Returns the unique client ID of the connection."),
    cmd("setname", 3, CONN, setname)
        .doc("2.6.9", "Sets the connection name."),
    cmd("getname", 2, CONN, getname)
        .doc("2.6.9", "Returns the name of the connection."),
    cmd("list", -2, ADM, list)
        .doc("2.4.0", "Lists open connections.")
        .complexity("O(N) where N is the number of client connections")
        .tips(&["nondeterministic_output"]),
    cmd("info", 2, CONN, info)
        .doc("6.2.0", "Returns information about the connection.")
        .tips(&["nondeterministic_output"]),
    cmd("kill", -3, ADM, kill)
        .doc("2.4.0", "Terminates open connections.")
        .complexity("O(N) where N is the number of client connections"),
    cmd("pause", -3, ADM, pause)
        .doc("3.0.0", "Suspends commands processing."),
    cmd("unpause", 2, ADM, unpause)
        .doc("6.2.0", "Resumes processing commands from paused clients.")
        .complexity("O(N) Where N is the number of paused clients"),
    cmd("reply", 3, CONN, reply)
        .doc("3.2.0", "Instructs the server whether to reply to commands."),
    cmd("no-evict", 3, ADM, no_evict)
        .doc("7.0.0", "Sets the client eviction mode of the connection."),
    cmd("no-touch", 3, CONN, no_touch)
        .doc("7.2.0", "Controls whether commands sent by the client affect the LRU/LFU of accessed keys."),
    cmd("setinfo", 4, CONN, setinfo)
        .doc("7.2.0", "Sets information specific to the client or connection."),
    cmd("getredir", 2, CONN, getredir)
        .doc("6.0.0", "Returns the client ID to which the connection's tracking notifications are redirected."),
    cmd("trackinginfo", 2, CONN, trackinginfo)
        .doc("6.2.0", "Returns information about server-assisted client-side caching for the connection."),
    cmd("unblock", -3, ADM, unblock)
        .doc("5.0.0", "Unblocks a client blocked by a blocking command from a different connection.")
        .complexity("O(log N) where N is the number of client connections"),
    cmd("tracking", -3, CONN, crate::commands::tracking::tracking)
        .doc("6.0.0", "Controls server-assisted client-side caching for the connection."),
    cmd("caching", 3, CONN, crate::commands::tracking::caching)
        .doc("6.0.0", "Instructs the server whether to track the keys in the next request."),
    cmd("help", 2, LOADING | STALE, help)
        .doc("5.0.0", "Returns helpful text about the different subcommands."),
};

const HELP: &[&str] = &[
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "    * ID <client-id>",
    "      Kill connections by client id.",
    "    * MAXAGE <maxage>",
    "      Kill connections older than the specified age.",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <option> <value>",
    "    Set client meta attr. Options are:",
    "    * LIB-NAME: the client lib name.",
    "    * LIB-VER: the client lib version.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "NO-TOUCH (ON|OFF)",
    "    Will not touch LRU/LFU stats when this mode is on.",
];

fn help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    reply_help(ctx, "client", HELP);
    Ok(())
}

fn id(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.int(ctx.client.id as i64);
    Ok(())
}

fn setname(ctx: &mut Ctx, args: Args) -> CmdResult {
    validate_client_name(args.get(2))?;
    set_client_name(ctx, args.get(2));
    ctx.out.ok();
    Ok(())
}

fn getname(ctx: &mut Ctx, _args: Args) -> CmdResult {
    match &ctx.client.name {
        Some(n) => ctx.out.bulk(n.as_bytes()),
        None => ctx.out.null(),
    }
    Ok(())
}

/// Redis's client types, as CLIENT LIST TYPE / CLIENT KILL TYPE name them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Normal,
    Replica,
    Master,
    Pubsub,
}

fn parse_kind(a: &[u8]) -> Result<Kind, CmdError> {
    let k = lossy(a).to_ascii_lowercase();
    Ok(match k.as_str() {
        "normal" => Kind::Normal,
        "slave" | "replica" => Kind::Replica,
        "master" => Kind::Master,
        "pubsub" => Kind::Pubsub,
        _ => return Err(CmdError::err(format!("Unknown client type '{}'", lossy(a)))),
    })
}

fn kind_of(c: &ClientShared) -> Kind {
    let flags = c.flags.lock();
    if flags.contains('S') {
        Kind::Replica
    } else if flags.contains('M') {
        Kind::Master
    } else if flags.contains('P') {
        Kind::Pubsub
    } else {
        Kind::Normal
    }
}

/// The CLIENT LIST `flags=` field.
fn flags_of(c: &ClientShared) -> String {
    let mut f = String::new();
    if c.monitor.load(Relaxed) {
        f.push('O');
    }
    f.push_str(&c.flags.lock());
    if f.is_empty() {
        f.push('N');
    }
    f
}

/// CLIENT LIST's `obl` and `oll` for `held` bytes of replies and pushes
/// and `queued` pushes not yet taken, in the shape of Redis's output: a
/// 16 KB buffer, then a list of 16 KB blocks.
fn output_shape(held: usize, queued: usize) -> (usize, usize) {
    const BLOCK: usize = 16 * 1024;
    (
        held.min(BLOCK),
        queued + held.saturating_sub(BLOCK).div_ceil(BLOCK),
    )
}

/// One CLIENT LIST line (without the newline). `current` is the full name of
/// the command being run when `c` is the calling client.
pub(crate) fn client_line(core: &Core, c: &ClientShared, current: Option<&str>) -> String {
    let now = unix_ms();
    let (addr, laddr) = (&c.addr, &c.laddr);
    let cmd = match current {
        Some(n) => n.to_string(),
        None => match c.last_cmd.load(Relaxed) {
            usize::MAX => "NULL".to_string(),
            id => core.commands.full_names[id].clone(),
        },
    };
    let qbuf = c.qbuf.load(Relaxed);
    let (obuf, oll) = output_shape(c.obuf.load(Relaxed), c.pushed_items.load(Relaxed));
    let (lib_name, lib_ver) = c.lib.lock().clone();
    let (tflags, redir) = crate::commands::tracking::list_fields(core, c.id);
    let mut flags = flags_of(c);
    if !tflags.is_empty() {
        flags = flags.replace('N', "") + &tflags;
    }
    format!(
        "id={} addr={addr} laddr={laddr} fd={} name={} age={} idle={} flags={} db={} \
         sub={} psub={} ssub={} multi={} qbuf={qbuf} qbuf-free={} argv-mem=0 multi-mem=0 \
         rbs=16384 rbp=0 obl={obuf} oll={} omem={} tot-mem={} events=r cmd={cmd} \
         user={} redir={redir} resp={} lib-name={lib_name} lib-ver={lib_ver}",
        c.id,
        c.fd,
        c.name.lock(),
        now.saturating_sub(c.created_ms) / 1000,
        now.saturating_sub(c.last_interaction_ms.load(Relaxed)) / 1000,
        flags,
        c.db.load(Relaxed),
        c.subs[0].load(Relaxed),
        c.subs[1].load(Relaxed),
        c.subs[2].load(Relaxed),
        c.multi_queued.load(Relaxed),
        16384usize.saturating_sub(qbuf),
        oll,
        c.output_memory(),
        crate::core::client_mem::client_memory(c),
        c.user.lock(),
        c.resp.load(Relaxed),
    )
}

fn is_self(ctx: &Ctx, c: &ClientShared) -> bool {
    c.id == ctx.client.id
}

fn list(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut kind = None;
    let mut ids: Option<Vec<u64>> = None;
    if args.len() == 4 && eq_ic(args.get(2), "TYPE") {
        kind = Some(parse_kind(args.get(3))?);
    } else if args.len() >= 4 && eq_ic(args.get(2), "ID") {
        let mut v = vec![];
        for a in args.iter().skip(3) {
            match arg_i64(a) {
                Ok(n) if n > 0 => v.push(n as u64),
                _ => return Err(CmdError::err("Invalid client ID")),
            }
        }
        ids = Some(v);
    } else if args.len() != 2 {
        return Err(CmdError::Syntax);
    }
    let mut text = String::new();
    for c in ctx.core.clients.snapshot() {
        if kind.is_some_and(|k| k != kind_of(&c)) {
            continue;
        }
        if ids.as_ref().is_some_and(|v| !v.contains(&c.id)) {
            continue;
        }
        let cur = is_self(ctx, &c).then_some("client|list");
        text.push_str(&client_line(ctx.core, &c, cur));
        text.push('\n');
    }
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

fn info(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let Some(sh) = ctx.client.shared.clone() else {
        ctx.out.verbatim(b"");
        return Ok(());
    };
    let mut line = client_line(ctx.core, &sh, Some("client|info"));
    line.push('\n');
    ctx.out.verbatim(line.as_bytes());
    Ok(())
}

/// CLIENT KILL's filters, parsed before anything is killed.
#[derive(Default)]
struct KillFilter {
    id: Option<u64>,
    addr: Option<String>,
    laddr: Option<String>,
    kind: Option<Kind>,
    user: Option<String>,
    skipme: bool,
    maxage: Option<u64>,
}

fn parse_kill(args: Args) -> Result<KillFilter, CmdError> {
    let mut f = KillFilter {
        skipme: true,
        ..Default::default()
    };
    let mut i = 2;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Err(CmdError::Syntax);
        }
        let (opt, val) = (args.get(i), args.get(i + 1));
        if eq_ic(opt, "ID") {
            match arg_i64(val) {
                Ok(n) if n > 0 => f.id = Some(n as u64),
                _ => return Err(CmdError::err("client-id should be greater than 0")),
            }
        } else if eq_ic(opt, "TYPE") {
            f.kind = Some(parse_kind(val)?);
        } else if eq_ic(opt, "ADDR") {
            f.addr = Some(lossy(val));
        } else if eq_ic(opt, "LADDR") {
            f.laddr = Some(lossy(val));
        } else if eq_ic(opt, "USER") {
            f.user = Some(lossy(val));
        } else if eq_ic(opt, "SKIPME") {
            f.skipme = if eq_ic(val, "yes") {
                true
            } else if eq_ic(val, "no") {
                false
            } else {
                return Err(CmdError::Syntax);
            };
        } else if eq_ic(opt, "MAXAGE") {
            let n = arg_i64(val)?;
            f.maxage = Some(n.max(0) as u64);
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    Ok(f)
}

fn matches(ctx: &Ctx, f: &KillFilter, c: &ClientShared) -> bool {
    // Redis's master client has no user: USER never names it.
    if f.user.is_some() && c.is_master_link() {
        return false;
    }
    if f.user.as_ref().is_some_and(|u| *u != *c.user.lock()) {
        return false;
    }
    let (addr, laddr) = (&c.addr, &c.laddr);
    let age = unix_ms().saturating_sub(c.created_ms) / 1000;
    f.id.is_none_or(|id| id == c.id)
        && f.addr.as_ref().is_none_or(|a| a == addr)
        && f.laddr.as_ref().is_none_or(|a| a == laddr)
        && f.kind.is_none_or(|k| k == kind_of(c))
        && f.maxage.is_none_or(|m| age >= m)
        && !(f.skipme && is_self(ctx, c))
}

/// Closes `c`: our own connection after this reply, others at once; the
/// master client's record by closing our master link's socket (the link
/// reconnects and resyncs partially, as Redis's replica does).
fn kill_one(ctx: &mut Ctx, c: &Arc<ClientShared>) {
    if is_self(ctx, c) {
        ctx.client.close_after_reply = true;
    } else {
        if kind_of(c) == Kind::Master {
            (ctx.admin).kill_master_link_if(&|peer, local| peer == c.addr && local == c.laddr);
        } else {
            c.kill_now();
        }
        // Gone from CLIENT LIST and INFO at once, as Redis frees it in the
        // call; its connection task finishes closing on its own thread.
        ctx.core.clients.unregister(c.id);
    }
}

fn kill(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() == 3 {
        // Old form: CLIENT KILL addr:port, self included.
        let f = KillFilter {
            addr: Some(lossy(args.get(2))),
            ..Default::default()
        };
        let victims: Vec<_> = ctx
            .core
            .clients
            .snapshot()
            .into_iter()
            .filter(|c| matches(ctx, &f, c))
            .collect();
        if victims.is_empty() {
            return Err(CmdError::err("No such client"));
        }
        for c in &victims {
            kill_one(ctx, c);
        }
        ctx.out.ok();
        return Ok(());
    }
    let f = parse_kill(args)?;
    if let Some(u) = &f.user {
        if ctx.core.acl.user(u).is_none() {
            return Err(CmdError::err(format!("No such user '{u}'")));
        }
    }
    let victims: Vec<_> = ctx
        .core
        .clients
        .snapshot()
        .into_iter()
        .filter(|c| matches(ctx, &f, c))
        .collect();
    for c in &victims {
        kill_one(ctx, c);
    }
    ctx.out.int(victims.len() as i64);
    Ok(())
}

fn pause(ctx: &mut Ctx, args: Args) -> CmdResult {
    let ms = crate::protocol::parse_i64(args.get(2))
        .ok_or_else(|| CmdError::err("timeout is not an integer or out of range"))?;
    if ms < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    let all = match args.len() {
        3 => true,
        4 if eq_ic(args.get(3), "WRITE") => false,
        4 if eq_ic(args.get(3), "ALL") => true,
        4 => return Err(CmdError::err("CLIENT PAUSE mode must be WRITE or ALL")),
        _ => return Err(CmdError::Syntax),
    };
    let srv = ctx.core;
    let end = ctx.now_ms.saturating_add(ms as u64);
    let old = srv.pause_until_ms.load(Relaxed);
    let active = old != 0 && old > ctx.now_ms;
    // As Redis: a pause never shortens or narrows the one in force.
    let all = all || (active && srv.pause_all.load(Relaxed));
    srv.pause_all.store(all, Relaxed);
    srv.pause_until_ms
        .store(if active { end.max(old) } else { end }, Relaxed);
    ctx.out.ok();
    Ok(())
}

fn unpause(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.core.pause_until_ms.store(0, Relaxed);
    ctx.core.pause_all.store(false, Relaxed);
    ctx.core.unpaused.notify_waiters();
    ctx.out.ok();
    Ok(())
}

fn reply(ctx: &mut Ctx, args: Args) -> CmdResult {
    let a = args.get(2);
    if eq_ic(a, "ON") {
        ctx.client.reply_mode = ReplyMode::On;
        ctx.out.ok();
    } else if eq_ic(a, "OFF") {
        ctx.client.reply_mode = ReplyMode::Off;
    } else if eq_ic(a, "SKIP") {
        if ctx.client.reply_mode != ReplyMode::Off {
            ctx.client.reply_mode = ReplyMode::SkipNext;
        }
    } else {
        return Err(CmdError::Syntax);
    }
    Ok(())
}

/// Parses ON|OFF (anything else: syntax error).
fn on_off(a: &[u8]) -> Result<bool, CmdError> {
    if eq_ic(a, "ON") {
        Ok(true)
    } else if eq_ic(a, "OFF") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

/// Adds or removes a CLIENT LIST flag letter.
fn set_flag(ctx: &Ctx, letter: char, on: bool) {
    if let Some(sh) = &ctx.client.shared {
        let mut f = sh.flags.lock();
        f.retain(|c| c != letter);
        if on {
            f.push(letter);
        }
    }
}

fn no_evict(ctx: &mut Ctx, args: Args) -> CmdResult {
    let on = on_off(args.get(2))?;
    ctx.client.no_evict = on;
    set_flag(ctx, 'e', on);
    if !on {
        // Now evictable: it may be what is over the limit.
        ctx.core.clients.book.republish_all();
    }
    ctx.out.ok();
    Ok(())
}

fn no_touch(ctx: &mut Ctx, args: Args) -> CmdResult {
    let on = on_off(args.get(2))?;
    ctx.client.no_touch = on;
    set_flag(ctx, 'T', on);
    ctx.out.ok();
    Ok(())
}

fn setinfo(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (attr, val) = (args.get(2), args.get(3));
    let is_name = eq_ic(attr, "LIB-NAME");
    if !is_name && !eq_ic(attr, "LIB-VER") {
        return Err(CmdError::err(format!(
            "Unrecognized option '{}'",
            lossy(attr)
        )));
    }
    if val.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(CmdError::err(format!(
            "{} cannot contain spaces, newlines or special characters.",
            lossy(attr)
        )));
    }
    let v = lossy(val);
    if is_name {
        ctx.client.lib_name = Some(v.clone());
    } else {
        ctx.client.lib_ver = Some(v.clone());
    }
    if let Some(sh) = &ctx.client.shared {
        let mut lib = sh.lib.lock();
        if is_name {
            lib.0 = v;
        } else {
            lib.1 = v;
        }
    }
    ctx.out.ok();
    Ok(())
}

fn getredir(ctx: &mut Ctx, args: Args) -> CmdResult {
    crate::commands::tracking::getredir(ctx, args)
}

fn trackinginfo(ctx: &mut Ctx, args: Args) -> CmdResult {
    crate::commands::tracking::trackinginfo(ctx, args)
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: ends a wait of BLPOP & co.
fn unblock(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() > 4 {
        return Err(CmdError::err(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            lossy(args.get(1))
        )));
    }
    let error = match args.len() {
        4 if eq_ic(args.get(3), "timeout") => false,
        4 if eq_ic(args.get(3), "error") => true,
        4 => {
            return Err(CmdError::err(
                "CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
            ))
        }
        _ => false,
    };
    let id = arg_i64(args.get(2))?;
    let done = id >= 0 && ctx.core.blocking.unblock(id as u64, error);
    ctx.out.int(i64::from(done));
    Ok(())
}
