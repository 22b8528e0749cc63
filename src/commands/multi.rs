//! Transactions: MULTI EXEC DISCARD WATCH UNWATCH (Redis's multi.c).
//!
//! Queueing. While a client is in MULTI, `conn.rs` hands every command that
//! passed lookup/arity/auth to [`intercept`]: EXEC, DISCARD, MULTI, WATCH,
//! QUIT and RESET run at once, `no_multi` commands are refused, anything else
//! is copied into [`MultiState`] and answered `+QUEUED`. A rejected command
//! flags the transaction, so EXEC answers EXECABORT.
//!
//! Atomicity and isolation. EXEC works out every shard the transaction may
//! touch: the shards of the watched keys, and of each queued command's key
//! arguments (command table key positions) in the database selected at that
//! point of the queue (SELECT is followed). A queued command that may touch
//! data beyond its key arguments (FLUSHALL, SWAPDB, MOVE, COPY, KEYS, SCAN,
//! DBSIZE, INFO, unknown keyless commands...) makes EXEC take every shard of
//! every database instead. The shards are locked in the global (db, shard)
//! order through `Keyspace::hold`, and held until the last queued command
//! returned; meanwhile the handlers' own `ctx.open`/`Db::lock` calls borrow
//! the held locks (`keyspace/held.rs`). So no other thread sees a
//! transaction half applied, and none can write in between.
//!
//! WATCH. At WATCH a client records, per key, its database, whether it was
//! logically present (existing and not expired) and its version, and
//! registers the key in the server's [`WatchRegistry`] (under the key's
//! shard lock, so a writer either sees the registration or wrote before the
//! recorded state). Every write passes through `Ctx::propagate_db`, which,
//! when anyone watches (one relaxed load otherwise), calls [`touch_write`]:
//! it marks the watchers of the written keys dirty (FLUSHDB, FLUSHALL and
//! SWAPDB mark the watchers of keys present at WATCH time in their
//! databases). Expiry deletions mark dirty only watchers that saw the key
//! present, as Redis 7 does for keys already expired at WATCH. At EXEC,
//! under the held locks, the transaction aborts if the client is dirty or
//! if any watched key's present/absent state or version differs from the
//! recorded one (which catches keys that expired without being deleted).
//!
//! Effects. During EXEC the client's effects are buffered; at the end, still
//! under the locks, a single effect is emitted alone and several are
//! wrapped in `MULTI` ... `EXEC` records, as Redis propagates transactions.
//! Blocking commands see `ClientState::in_exec` and must not block. Keys
//! the transaction made ready for blocked clients (`Ctx::signal_ready`) are
//! signalled once it is over, as Redis serves blocked clients after EXEC:
//! the woken client sees what the whole transaction left (a key that
//! expired meanwhile is deleted, propagated as DEL after the EXEC record).
//! CONFIG SET maxmemory inside EXEC evicts nothing until the next command.

use super::keyspec::KeySpec;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use super::flags::*;
use super::util::arg_i64;
use super::{CmdError, CmdResult, Command, CommandId, Ctx};
use crate::core::client::ClientState;
use crate::core::multi::{MultiState, Queued, WatchEntry, Watched, Watches};
use crate::core::Core;
use crate::effects::Effect;
use crate::protocol::{Args, ReplyBuf};

const TX: u32 = NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "transactions", acl = "transaction"),
    cmd("multi", 1, TX, multi)
        .doc("1.2.0", "Starts a transaction."),
    cmd("exec", 1, NOSCRIPT | LOADING | STALE | SKIP_SLOWLOG, exec)
        .doc("1.2.0", "Executes all commands in a transaction.")
        .complexity("Depends on commands in the transaction"),
    cmd("discard", 1, TX, discard)
        .doc("2.0.0", "Discards a transaction.")
        .complexity("O(N), when N is the number of queued commands"),
    cmd("watch", -2, TX, watch)
        .doc("2.2.0", "Monitors changes to keys to determine the execution of a transaction.")
        .complexity("O(1) for every key.")
        .keys(1, -1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"]).range(-1, 1, 0)]),
    cmd("unwatch", 1, TX, unwatch)
        .doc("2.2.0", "Forgets about watched keys of a transaction."),
};

// ---------------------------------------------------------------- queueing

/// The result of looking a command up, as `conn.rs` computes it.
pub(crate) type Checked = Result<CommandId, (Option<CommandId>, CmdError)>;

/// Called by the dispatcher for a client in MULTI. Returns `Ok(None)` when
/// the command was queued (`+QUEUED` written), `Ok(Some(id))` to run it now,
/// or the error to reply (which flags the transaction).
pub(crate) fn intercept(
    srv: &Core,
    client: &mut ClientState,
    out: &mut ReplyBuf,
    args: Args,
    checked: Checked,
) -> Result<Option<CommandId>, (Option<CommandId>, CmdError)> {
    let Some(m) = client.multi.as_mut() else {
        return checked.map(Some);
    };
    let id = match checked {
        Ok(id) => id,
        Err(e) => {
            m.aborted = true;
            return Err(e);
        }
    };
    let cmd = srv.commands.get(id);
    if matches!(
        cmd.name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
    ) {
        return Ok(Some(id));
    }
    if cmd.flags & NO_MULTI != 0 {
        m.aborted = true;
        return Err((
            Some(id),
            CmdError::err("Command not allowed inside a transaction"),
        ));
    }
    let q = Queued::new(id, args);
    m.bytes += std::mem::size_of::<Queued>()
        + q.flat.capacity()
        + q.spans.capacity() * std::mem::size_of::<std::ops::Range<usize>>();
    m.queue.push(q);
    if let Some(sh) = &client.shared {
        sh.multi_queued.store(m.queue.len() as i64, Relaxed);
    }
    out.simple("QUEUED");
    Ok(None)
}

/// RESET: leaves MULTI and forgets the watched keys.
pub(crate) fn reset(client: &mut ClientState) {
    take_multi(client);
    client.watches = None;
}

/// EXEC refused before it ran, because `err` refuses one of its queued
/// commands (Redis's EXECABORT "because of" reply): the transaction ends.
pub(crate) fn abort_exec(client: &mut ClientState, err: CmdError) -> CmdError {
    reset(client);
    CmdError::Msg(format!(
        "EXECABORT Transaction discarded because of: {}",
        err.render()
    ))
}

/// Leaves MULTI, returning the transaction (CLIENT LIST loses flag 'x').
fn take_multi(client: &mut ClientState) -> Option<MultiState> {
    let m = client.multi.take()?;
    clear_multi_flag(client);
    Some(m)
}

fn clear_multi_flag(client: &ClientState) {
    if let Some(sh) = &client.shared {
        sh.flags.lock().retain(|c| c != 'x');
        sh.multi_queued.store(-1, Relaxed);
    }
}

fn multi(ctx: &mut Ctx, _args: Args) -> CmdResult {
    if ctx.client.multi.is_some() {
        return Err(CmdError::err("MULTI calls can not be nested"));
    }
    ctx.client.multi = Some(MultiState::default());
    if let Some(sh) = &ctx.client.shared {
        sh.flags.lock().push('x');
        sh.multi_queued.store(0, Relaxed);
    }
    ctx.out.ok();
    Ok(())
}

fn discard(ctx: &mut Ctx, _args: Args) -> CmdResult {
    if ctx.client.multi.is_none() {
        return Err(CmdError::err("DISCARD without MULTI"));
    }
    reset(ctx.client);
    ctx.out.ok();
    Ok(())
}

fn unwatch(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.client.watches = None;
    ctx.out.ok();
    Ok(())
}

// ---------------------------------------------------------------- EXEC

fn exec(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let Some(m) = ctx.client.multi.take() else {
        return Err(CmdError::err("EXEC without MULTI"));
    };
    // As in Redis, the client shows flag 'x' until its EXEC is done.
    let r = exec_multi(ctx, m);
    clear_multi_flag(ctx.client);
    r
}

fn exec_multi(ctx: &mut Ctx, m: MultiState) -> CmdResult {
    let watches = ctx.client.watches.take();
    if m.aborted {
        return Err(CmdError::Msg(
            "EXECABORT Transaction discarded because of previous errors.".into(),
        ));
    }
    let srv: &Core = ctx.core;
    let plan = plan_locks(srv, ctx.client.db, &m, watches.as_ref());
    let _hold = srv.keyspace.hold(plan.as_deref());
    if watches.is_some_and(|w| w.broken(srv, ctx.now_ms)) {
        ctx.out.null_array();
        return Ok(());
    }
    run_queue(ctx, &m);
    Ok(())
}

/// Runs the queued commands, replying with the array of their replies, and
/// emits their effects as one unit. The caller holds the locks.
fn run_queue(ctx: &mut Ctx, m: &MultiState) {
    ctx.client.in_exec = true;
    if ctx.core.effects.enabled() {
        ctx.client.exec_effects = Some(Vec::new());
    }
    ctx.out.array(m.queue.len());
    for q in &m.queue {
        run_one(ctx, q);
    }
    ctx.client.in_exec = false;
    if let Some(effects) = ctx.client.exec_effects.take() {
        emit_unit(ctx.core, effects);
    }
    for (db, key) in std::mem::take(&mut ctx.client.exec_ready) {
        ctx.core.blocking.signal(db, &key);
    }
}

/// Runs one queued command through `call()`, its error inline; the rules
/// may have changed since it was queued (ACL, Redis's execCommand).
fn run_one(ctx: &mut Ctx, q: &Queued) {
    ctx.out.resp = ctx.client.resp;
    let flags = ctx.core.commands.get(q.id).flags;
    if let Err(e) = super::acl::admit_queued(ctx.core, ctx.client, q.id, q.args()) {
        // Counted as a failed call, as Redis's execCommand counts it.
        ctx.stats.record_call(q.id, 0, true);
        ctx.stats.record_error(&e.code());
        ctx.out.error(&e.render());
        return;
    }
    let mut sub = ctx.nested(None, q.args(), flags);
    // A failure is in the reply already, inline.
    let _ = super::call::call(&mut sub, q.id, q.args(), super::call::Caller::Exec, None);
}

/// Emits a transaction's effects: one alone, several between MULTI and EXEC
/// as one unit (no other writer's record lands inside).
pub(crate) fn emit_unit(srv: &Core, effects: Vec<Effect>) {
    if effects.len() > 1 {
        let (first, last) = (&effects[0], &effects[effects.len() - 1]);
        let open = Effect {
            db: first.db,
            version: first.version,
            argv: vec![b"MULTI".to_vec()],
            bases: vec![],
            facts: vec![],
        };
        let close = Effect {
            db: last.db,
            version: last.version,
            argv: vec![b"EXEC".to_vec()],
            bases: vec![],
            facts: vec![],
        };
        let mut all = Vec::with_capacity(effects.len() + 2);
        all.push(open);
        all.extend(effects);
        all.push(close);
        srv.effects.emit_all(&all);
    } else {
        for e in &effects {
            srv.effects.emit_owned(e);
        }
    }
}

/// Commands with no key arguments that touch no shard.
fn keyless_safe(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "client|", "command|", "config|", "slowlog|", "latency|", "pubsub|", "acl|",
    ];
    matches!(
        name,
        "ping"
            | "echo"
            | "select"
            | "time"
            | "lastsave"
            | "publish"
            | "spublish"
            | "unwatch"
            | "hello"
            | "command"
            | "auth"
            | "readonly"
            | "readwrite"
    ) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Commands that may touch more than their key arguments' shards.
fn needs_everything(name: &str) -> bool {
    matches!(
        name,
        "move"
            | "copy"
            | "swapdb"
            | "flushall"
            | "flushdb"
            | "sort"
            | "sort_ro"
            | "georadius"
            | "georadiusbymember"
            | "migrate"
            | "debug"
    ) || name.starts_with("debug|")
}

/// The key arguments of one command (`id`, full name resolved), or `None`
/// when it may touch data beyond them (a script checks its calls with it).
pub(crate) fn command_keys(srv: &Core, id: CommandId, args: Args) -> Option<Vec<usize>> {
    let name = srv.commands.full_names[id].as_str();
    if needs_everything(name) {
        return None;
    }
    let pos = srv.commands.get(id).key_positions(args);
    if pos.is_empty() && !keyless_safe(name) {
        return None;
    }
    Some(pos)
}

/// The `(db, shard)`s a transaction may touch; `None` means all of them.
fn plan_locks(
    srv: &Core,
    start_db: usize,
    m: &MultiState,
    watches: Option<&Watches>,
) -> Option<Vec<(usize, usize)>> {
    let ks = &srv.keyspace;
    let mut t: Vec<(usize, usize)> = watches
        .map(|w| {
            w.keys
                .iter()
                .map(|k| (k.db, ks.slot(&k.key).shard))
                .collect()
        })
        .unwrap_or_default();
    let mut db = start_db;
    for q in &m.queue {
        let name = srv.commands.full_names[q.id].as_str();
        let args = q.args();
        if name == "select" {
            match arg_i64(args.get(1)) {
                Ok(n) if n >= 0 && (n as usize) < ks.num_dbs() => db = n as usize,
                _ => {}
            }
            continue;
        }
        if needs_everything(name) {
            return None;
        }
        let pos = srv.commands.get(q.id).key_positions(args);
        if pos.is_empty() && !keyless_safe(name) {
            return None;
        }
        t.extend(pos.into_iter().map(|p| (db, ks.slot(args.get(p)).shard)));
    }
    Some(t)
}

// ---------------------------------------------------------------- WATCH

/// Marks the watchers of the keys an effect `argv` wrote on `db` dirty.
/// Called by `Ctx::propagate_db` when the registry is active.
pub(crate) fn touch_write(srv: &Core, db: usize, argv: &[&[u8]]) {
    let reg = &srv.watch;
    let Some(&name) = argv.first() else { return };
    let lname = name.to_ascii_lowercase();
    let db_arg = |i: usize| {
        argv.get(i)
            .and_then(|a| arg_i64(a).ok())
            .map(|n| n as usize)
    };
    match lname.as_slice() {
        b"flushall" => return reg.touch_db(None),
        b"flushdb" => return reg.touch_db(Some(db)),
        b"swapdb" => {
            for d in [db_arg(1), db_arg(2)].into_iter().flatten() {
                reg.touch_db(Some(d));
            }
            return;
        }
        b"multi" | b"exec" => return,
        b"move" => {
            reg.touch_key(db, argv[1], false);
            if let Some(d) = db_arg(2) {
                reg.touch_key(d, argv[1], false);
            }
            return;
        }
        b"copy" if argv.len() > 2 => {
            let pos = argv.iter().position(|a| a.eq_ignore_ascii_case(b"db"));
            let d = pos.and_then(|i| db_arg(i + 1)).unwrap_or(db);
            return reg.touch_key(d, argv[2], false);
        }
        _ => {}
    }
    if let Some(dst) = store_destination(&lname, argv) {
        return reg.touch_key(db, dst, false);
    }
    touch_key_args(srv, db, argv);
}

/// The only key written by commands whose other keys are only read.
fn store_destination<'a>(name: &[u8], argv: &[&'a [u8]]) -> Option<&'a [u8]> {
    match name {
        b"sunionstore" | b"sinterstore" | b"sdiffstore" | b"zunionstore" | b"zinterstore"
        | b"zdiffstore" | b"zrangestore" | b"geosearchstore" | b"pfmerge" => argv.get(1).copied(),
        b"bitop" => argv.get(2).copied(),
        b"sort" | b"georadius" | b"georadiusbymember" => {
            let i = argv.iter().rposition(|a| {
                a.eq_ignore_ascii_case(b"store") || a.eq_ignore_ascii_case(b"storedist")
            })?;
            argv.get(i + 1).copied()
        }
        _ => None,
    }
}

/// Touches every key argument of `argv` per the command table.
fn touch_key_args(srv: &Core, db: usize, argv: &[&[u8]]) {
    let owned = crate::protocol::OwnedArgs::new(argv);
    let args = owned.args();
    let Some(mut id) = srv.commands.lookup(argv[0]) else {
        return;
    };
    if srv.commands.has_subcommands(id) && args.len() > 1 {
        match srv.commands.lookup_sub(id, args.get(1)) {
            Some(s) => id = s,
            None => return,
        }
    }
    for p in srv.commands.get(id).key_positions(args) {
        srv.watch.touch_key(db, args.get(p), false);
    }
}

fn watch(ctx: &mut Ctx, args: Args) -> CmdResult {
    if ctx.client.multi.is_some() {
        return Err(CmdError::err("WATCH inside MULTI is not allowed"));
    }
    let srv: &Core = ctx.core;
    let (db, now_ms) = (ctx.client.db, ctx.now_ms);
    let w = ctx.client.watches.get_or_insert_with(|| Watches {
        reg: srv.watch.clone(),
        dirty: Arc::new(AtomicBool::new(false)),
        keys: Vec::new(),
    });
    for key in args.iter().skip(1) {
        if w.keys.iter().any(|k| k.db == db && k.key == key) {
            continue;
        }
        let slot = srv.keyspace.slot(key);
        // Registered under the key's lock: a writer either sees the watch
        // or finished before the state recorded here.
        let g = srv.keyspace.db(db).lock(slot.shard);
        let version = match g.get_raw(slot.hash, key) {
            Some(e) if !e.is_expired(now_ms) => Some(e.version),
            _ => None,
        };
        let entry = Arc::new(WatchEntry {
            dirty: w.dirty.clone(),
            present: version.is_some(),
        });
        srv.watch.add(db, key, entry.clone());
        drop(g);
        w.keys.push(Watched {
            db,
            key: key.to_vec(),
            version,
            entry,
        });
    }
    ctx.out.ok();
    Ok(())
}
