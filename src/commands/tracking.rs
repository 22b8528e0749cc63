//! Client-side caching (Redis 6+ `CLIENT TRACKING`): the registry of which
//! clients track which keys, invalidation delivery, and the CLIENT TRACKING /
//! CACHING / GETREDIR / TRACKINGINFO handlers.
//!
//! The registry (`Tracking`) keeps atomic counters, so every hook costs one
//! relaxed load while nobody tracks; a read by a client that does not track
//! costs no lock (`ClientState::tracking`), a write to an untracked key one
//! table-shard lock (plus the settings lock while BCAST prefixes exist).
//! Its parts mirror Redis:
//! - the tracking table: key name → ids of the clients that read it (the db
//!   is ignored, as in Redis), sharded by key hash. An id stays in it after its client stops
//!   tracking (Redis does no id cleanup either); a stale id is skipped when
//!   sending. When the last tracking client stops, the table is emptied
//!   (Redis keeps stale ids; here writes stop consulting the table then).
//!   `tracking-table-max-keys` is enforced before every command and by the
//!   cron (`limit_table`), which invalidate keys until the table fits.
//! - the prefix table of BCAST clients: prefix → its clients and the keys
//!   written since the last broadcast, each with the client that wrote it
//!   (0 for expiry) so NOLOOP clients can leave out their own writes.
//!
//! Redis is single-threaded and sends BCAST invalidations once per event-loop
//! pass (beforeSleep). Here the equivalent pass is one connection's batch of
//! pipelined commands: `flush_bcast` runs after each batch (and after each
//! cron pass, for keys the active expiry cycle deleted) and sends each client
//! one message per prefix with all the keys collected so far, from any thread.
//!
//! Keys a command reads are registered *before* the handler runs (Redis does
//! it after): with threads, a write between the read and a later
//! registration would be lost; registered first, such a write always sends
//! an invalidation.
//!
//! An invalidation meant for the client whose command caused it (its own
//! write, or a key its read found expired) waits until that command's reply
//! has been written (`after_command`), as Redis's `tracking_pending_keys`:
//! a push never lands inside a reply, and a transaction's come after EXEC's.
//! Pushes to other clients go through their push channel
//! (`ClientShared::push`), the mechanism PUBLISH uses: RESP3 `>2 invalidate
//! [keys]`, or for a RESP2 redirect target in Pub/Sub mode a
//! `__redis__:invalidate` message. A redirect whose client is gone marks the
//! tracking client `broken_redirect` and, in RESP3, sends it
//! `tracking-redir-broken <id>` instead.
use super::CmdError;
use super::{Args, CmdResult, Ctx};
use crate::core::client::ClientState;
use crate::core::tracking::{Inner, Payload, Prefix, Settings, Tracking};
use crate::core::Core;
use crate::protocol::ReplyBuf;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// `call()`'s hook, before a command's handler runs: registers the keys a
/// read-only command reads when its client tracks them (see module doc).
/// EVAL_RO, EVALSHA_RO and FCALL_RO register nothing themselves: their
/// reads do (as Redis, [`before_script_command`]).
#[inline]
pub(crate) fn before_command(srv: &Core, client: &ClientState, cmd_id: usize, args: Args) {
    if !srv.tracking.active() || !client.tracking {
        return;
    }
    let cmd = srv.commands.get(cmd_id);
    if cmd.flags & super::flags::READONLY == 0
        || matches!(cmd.name, "eval_ro" | "evalsha_ro" | "fcall_ro")
    {
        return;
    }
    let keys = cmd.key_positions(args);
    remember(srv, client, keys.into_iter().map(|p| args.get(p)));
}

/// [`before_command`] for a command a script runs: a read-only one
/// registers the keys the script declared, for the client running the
/// script (Redis's trackingRememberKeys of the script's caller).
pub(crate) fn before_script_command(
    srv: &Core,
    client: &ClientState,
    cmd_id: usize,
    declared: &[&[u8]],
) {
    if !srv.tracking.active() || !client.tracking || declared.is_empty() {
        return;
    }
    if srv.commands.get(cmd_id).flags & super::flags::READONLY == 0 {
        return;
    }
    remember(srv, client, declared.iter().copied());
}

/// Registers `keys` as read by `client`, unless its mode leaves this
/// command out (BCAST; OPTIN without CACHING yes; OPTOUT with CACHING no).
fn remember<'k>(srv: &Core, client: &ClientState, keys: impl Iterator<Item = &'k [u8]>) {
    let t = &srv.tracking;
    let g = t.inner.lock();
    let Some(s) = g.clients.get(&client.id) else {
        return;
    };
    if s.bcast || (s.optin && !s.caching) || (s.optout && s.caching) {
        return;
    }
    drop(g);
    for key in keys {
        let mut shard = t.shard(key).lock();
        let ids = match shard.get_mut(key) {
            Some(ids) => ids,
            None => {
                t.keys.fetch_add(1, Relaxed);
                shard.entry(key.to_vec()).or_default()
            }
        };
        if ids.insert(client.id) {
            t.items.fetch_add(1, Relaxed);
        }
    }
}

/// Dispatch hook, after a top-level command's reply is in `out`: ends the
/// CLIENT CACHING flag's scope (as Redis, it survives CLIENT subcommands and
/// a transaction until EXEC) and appends the invalidations it deferred.
pub(crate) fn after_command(srv: &Core, client: &ClientState, cmd_id: usize, out: &mut ReplyBuf) {
    let t = &srv.tracking;
    if !t.active() {
        return;
    }
    if t.caching.load(Relaxed) > 0
        && client.multi.is_none()
        && !srv.commands.full_names[cmd_id].starts_with("client|")
    {
        let mut g = t.inner.lock();
        if let Some(s) = g.clients.get_mut(&client.id).filter(|s| s.caching) {
            s.caching = false;
            t.caching.fetch_sub(1, Relaxed);
        }
    }
    append_deferred(srv, client.id, out);
}

/// Appends the invalidations deferred for client `id` to its output: after
/// its reply for its own writes, before it for keys evicted to admit its
/// command (dispatch calls this both before and after the handler).
pub(crate) fn append_deferred(srv: &Core, id: u64, out: &mut ReplyBuf) {
    let t = &srv.tracking;
    if t.deferred.load(Relaxed) == 0 {
        return;
    }
    let mut g = t.inner.lock();
    let Some(list) = g.deferred.remove(&id) else {
        return;
    };
    t.deferred.fetch_sub(1, Relaxed);
    for item in list {
        let key: Vec<&[u8]> = item.iter().map(|k| &k[..]).collect();
        let payload = match item {
            Some(_) => Payload::Keys(&key),
            None => Payload::Flush,
        };
        send(srv, &mut g, id, payload, Some((id, &mut *out)));
    }
}

/// Write hook (from `Ctx::propagate_db`): invalidates the keys `argv` wrote.
pub(crate) fn touch_write(ctx: &Ctx, argv: &[&[u8]]) {
    let Some(&name) = argv.first() else { return };
    let srv = ctx.core;
    if name.eq_ignore_ascii_case(b"flushall") || name.eq_ignore_ascii_case(b"flushdb") {
        return invalidate_all(srv, ctx.client.id);
    }
    let owned = crate::protocol::OwnedArgs::new(argv);
    let args = owned.args();
    let Some(mut id) = srv.commands.lookup(name) else {
        return;
    };
    if srv.commands.has_subcommands(id) && args.len() > 1 {
        match srv.commands.lookup_sub(id, args.get(1)) {
            Some(s) => id = s,
            None => return,
        }
    }
    let me = ctx.client.id;
    for p in srv.commands.get(id).key_positions(args) {
        invalidate_key(srv, me, me, args.get(p));
    }
}

/// Expiry hook: `key` expired and was deleted, lazily during client
/// `current`'s command or (current 0) by the active expiry cycle.
pub(crate) fn touch_expired(srv: &Core, current: u64, key: &[u8]) {
    if !srv.tracking.active() {
        return;
    }
    invalidate_key(srv, current, 0, key);
}

/// Invalidates one key: queues it for the matching BCAST prefixes (written
/// by `writer`) and notifies the clients that read it, except `current`
/// itself with NOLOOP; `current`'s own message waits for its reply.
fn invalidate_key(srv: &Core, current: u64, writer: u64, key: &[u8]) {
    let t = &srv.tracking;
    if t.nprefixes.load(Relaxed) > 0 {
        let mut g = t.inner.lock();
        let mut queued = false;
        for (p, state) in g.prefixes.iter_mut() {
            if key.starts_with(p) {
                state.pending.insert(key.to_vec(), writer);
                queued = true;
            }
        }
        if queued {
            t.bcast_pending.store(true, Relaxed);
        }
    }
    notify_readers(srv, current, key);
}

/// Tells the clients that read `key` that it changed, except `current`
/// itself with NOLOOP; `current`'s own message waits for its reply.
fn notify_readers(srv: &Core, current: u64, key: &[u8]) {
    let t = &srv.tracking;
    let Some(ids) = t.take_key(key) else {
        return;
    };
    let g = &mut *t.inner.lock();
    for id in ids {
        let Some(s) = g.clients.get(&id) else {
            continue;
        };
        if s.bcast || (s.noloop && id == current) {
            continue;
        }
        if id == current {
            defer(t, g, id, Some(key.to_vec()));
        } else {
            send(srv, g, id, Payload::Keys(&[key]), None);
        }
    }
}

fn defer(t: &Tracking, g: &mut Inner, id: u64, item: Option<Vec<u8>>) {
    let list = g.deferred.entry(id).or_insert_with(|| {
        t.deferred.fetch_add(1, Relaxed);
        Vec::new()
    });
    list.push(item);
}

/// FLUSHALL / FLUSHDB (and a replica's full sync): every tracking client
/// gets a null invalidation (the flushing client after its reply) and the
/// tracking table is emptied.
pub(crate) fn invalidate_all(srv: &Core, current: u64) {
    let t = &srv.tracking;
    t.clear_table();
    let mut g = t.inner.lock();
    let mut ids: Vec<u64> = g.clients.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        if id == current {
            defer(t, &mut g, id, None);
        } else {
            send(srv, &mut g, id, Payload::Flush, None);
        }
    }
}

/// Sends the BCAST invalidations collected since the last call: per prefix,
/// one message per client with the keys written (a NOLOOP client's own
/// writes left out). Called after each connection batch and cron pass.
pub(crate) fn flush_bcast(srv: &Core) {
    let t = &srv.tracking;
    if !t.bcast_pending.load(Relaxed) || !t.bcast_pending.swap(false, Relaxed) {
        return;
    }
    let mut g = t.inner.lock();
    let g2 = &mut *g;
    let mut batches: Vec<(u64, Vec<Vec<u8>>)> = Vec::new();
    for state in g2.prefixes.values_mut() {
        if state.pending.is_empty() {
            continue;
        }
        let pending = std::mem::take(&mut state.pending);
        for &id in &state.clients {
            let noloop = g2.clients.get(&id).is_some_and(|s| s.noloop);
            let keys = pending
                .iter()
                .filter(|(_, &w)| !(noloop && w == id))
                .map(|(k, _)| k.clone())
                .collect();
            batches.push((id, keys));
        }
    }
    for (id, keys) in batches {
        if keys.is_empty() {
            continue;
        }
        let ks: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        send(srv, &mut g, id, Payload::Keys(&ks), None);
    }
}

/// Cron hook (worker 0): enforces `tracking-table-max-keys` and sends
/// pending BCAST messages.
pub(crate) fn cron(srv: &Core) {
    if !srv.tracking.active() {
        return;
    }
    limit_table(srv, 0);
    flush_bcast(srv);
}

/// Enforces `tracking-table-max-keys` (Redis's trackingLimitUsedSlots): run
/// before every command of client `current` (`call::admit`) and by the
/// cron (`current` 0). Over the limit, tracked keys are invalidated as if
/// evicted: `current`'s own message goes ahead of its reply (dispatch
/// appends deferred messages before the handler runs), a NOLOOP `current`
/// gets none, as in Redis. Each call does at most 100 x (calls in a row
/// that ended still over the limit + 1) keys, Redis's bounded effort, so
/// lowering the limit far does not stall one command.
pub(crate) fn limit_table(srv: &Core, current: u64) {
    static ROUNDS_OVER: AtomicUsize = AtomicUsize::new(0);
    let t = &srv.tracking;
    let max = srv.hot.tracking_table_max_keys.load(Relaxed);
    let total = t.keys.load(Relaxed);
    if max == 0 || total <= max || !t.active() {
        return;
    }
    let effort = 100 * (ROUNDS_OVER.load(Relaxed) + 1);
    let mut n = (total - max).min(effort);
    let over = total - max > effort;
    let mut victims: Vec<Vec<u8>> = Vec::with_capacity(n);
    for s in &t.table {
        let s = s.lock();
        let k = n.min(s.len());
        victims.extend(s.keys().take(k).cloned());
        n -= k;
    }
    for key in victims {
        // Evicted, not written: its readers are told, BCAST clients are
        // not (Redis's trackingInvalidateKey with bcast 0).
        notify_readers(srv, current, &key);
    }
    ROUNDS_OVER.store(
        if over {
            ROUNDS_OVER.load(Relaxed) + 1
        } else {
            0
        },
        Relaxed,
    );
}

/// Sends one invalidation for tracking client `id` to where it goes: its
/// redirect target or itself. `own` is the client whose reply buffer is at
/// hand (a message for it is appended there instead of pushed).
fn send(srv: &Core, g: &mut Inner, id: u64, p: Payload, own: Option<(u64, &mut ReplyBuf)>) {
    let Some(s) = g.clients.get_mut(&id) else {
        return;
    };
    let Some(me) = srv.clients.get(id) else {
        return;
    };
    let my_resp = me.resp.load(Relaxed);
    let mut msg = Vec::with_capacity(64);
    let target = if s.redirect == 0 {
        me
    } else if let Some(r) = srv.clients.get(s.redirect) {
        r
    } else {
        s.broken = true;
        if my_resp < 3 {
            return;
        }
        msg.extend_from_slice(b">2\r\n$21\r\ntracking-redir-broken\r\n");
        msg.extend_from_slice(format!(":{}\r\n", s.redirect).as_bytes());
        return deliver(srv, me, msg, own);
    };
    if target.resp.load(Relaxed) >= 3 {
        msg.extend_from_slice(b">2\r\n$10\r\ninvalidate\r\n");
    } else if s.redirect != 0 && target.subs.iter().any(|n| n.load(Relaxed) > 0) {
        msg.extend_from_slice(b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n");
    } else {
        return; // RESP2 without a Pub/Sub redirect: nowhere to send it.
    }
    match p {
        Payload::Keys(ks) => {
            msg.extend_from_slice(format!("*{}\r\n", ks.len()).as_bytes());
            for k in ks {
                msg.extend_from_slice(format!("${}\r\n", k.len()).as_bytes());
                msg.extend_from_slice(k);
                msg.extend_from_slice(b"\r\n");
            }
        }
        Payload::Flush if my_resp >= 3 => msg.extend_from_slice(b"_\r\n"),
        Payload::Flush => msg.extend_from_slice(b"$-1\r\n"),
    }
    deliver(srv, target, msg, own)
}

fn deliver(
    srv: &Core,
    to: Arc<crate::core::client::ClientShared>,
    msg: Vec<u8>,
    own: Option<(u64, &mut ReplyBuf)>,
) {
    match own {
        Some((id, out)) if id == to.id => out.buf.extend_from_slice(&msg),
        _ => {
            let limit = srv.hot.obuf_limits.read().pubsub;
            to.push(
                crate::core::client::PushBuf::shared(msg),
                &limit,
                crate::keyspace::hlc::unix_ms(),
            );
        }
    }
}

fn err(s: &str) -> CmdError {
    CmdError::err(s)
}

/// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP]
pub(crate) fn tracking(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut n = Settings::default();
    let mut prefixes: Vec<Vec<u8>> = Vec::new();
    let mut i = 3;
    while i < args.len() {
        let a = args.get(i).to_ascii_lowercase();
        let has_next = i + 1 < args.len();
        match a.as_slice() {
            b"redirect" if has_next => {
                if n.redirect != 0 {
                    return Err(err("A client can only redirect to a single other client"));
                }
                let id = super::util::arg_i64(args.get(i + 1))?;
                if id <= 0 || ctx.core.clients.get(id as u64).is_none() {
                    return Err(err("The client ID you want redirect to does not exist"));
                }
                n.redirect = id as u64;
                i += 1;
            }
            b"bcast" => n.bcast = true,
            b"optin" => n.optin = true,
            b"optout" => n.optout = true,
            b"noloop" => n.noloop = true,
            b"prefix" if has_next => {
                prefixes.push(args.get(i + 1).to_vec());
                i += 1;
            }
            _ => return Err(CmdError::Syntax),
        }
        i += 1;
    }
    let on = match args.get(2).to_ascii_lowercase().as_slice() {
        b"on" => true,
        b"off" => false,
        _ => return Err(CmdError::Syntax),
    };
    let me = ctx.client.id;
    let t = &ctx.core.tracking;
    if !on {
        t.remove_client(me);
        ctx.client.tracking = false;
        ctx.client.tracking_prefixes = 0;
        ctx.out.ok();
        return Ok(());
    }
    let mut g = t.inner.lock();
    let old = g.clients.get(&me).cloned();
    check_on(&n, &prefixes, old.as_ref())?;
    enable(t, &mut g, me, n, old, prefixes);
    ctx.client.tracking_prefixes = g.clients.get(&me).map_or(0, |s| s.prefixes.len());
    drop(g);
    ctx.client.tracking = true;
    ctx.out.ok();
    Ok(())
}

/// Sets client `me`'s mode (flags and redirect replaced, BCAST prefixes
/// added to those it had), as Redis's enableTracking.
fn enable(
    t: &Tracking,
    g: &mut Inner,
    me: u64,
    mut n: Settings,
    old: Option<Settings>,
    mut prefixes: Vec<Vec<u8>>,
) {
    match old {
        Some(o) => {
            n.prefixes = o.prefixes;
            if o.caching {
                t.caching.fetch_sub(1, Relaxed);
            }
        }
        None => {
            t.active.fetch_add(1, Relaxed);
        }
    }
    if n.bcast {
        if prefixes.is_empty() {
            prefixes.push(Vec::new());
        }
        for p in prefixes {
            let state = g.prefixes.entry(p.clone()).or_insert_with(|| {
                t.nprefixes.fetch_add(1, Relaxed);
                Prefix::default()
            });
            state.clients.insert(me);
            n.prefixes.insert(p);
        }
    }
    g.clients.insert(me, n);
}

fn check_on(n: &Settings, prefixes: &[Vec<u8>], old: Option<&Settings>) -> CmdResult {
    if !n.bcast && !prefixes.is_empty() {
        return Err(err("PREFIX option requires BCAST mode to be enabled"));
    }
    if old.is_some_and(|o| o.bcast != n.bcast) {
        return Err(err("You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."));
    }
    if n.bcast && (n.optin || n.optout) {
        return Err(err("OPTIN and OPTOUT are not compatible with BCAST"));
    }
    if n.optin && n.optout {
        return Err(err("You can't specify both OPTIN mode and OPTOUT mode"));
    }
    if old.is_some_and(|o| (n.optin && o.optout) || (n.optout && o.optin)) {
        return Err(err("You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode."));
    }
    if n.bcast {
        let existing = old.map(|o| &o.prefixes);
        for (j, p) in prefixes.iter().enumerate() {
            if let Some(q) = existing.into_iter().flatten().find(|q| overlaps(p, q)) {
                return Err(overlap(p, q, "an existing"));
            }
            if let Some(q) = prefixes[j + 1..].iter().find(|q| overlaps(p, q)) {
                return Err(overlap(p, q, "another provided"));
            }
        }
    }
    Ok(())
}

fn overlaps(p: &[u8], q: &[u8]) -> bool {
    p.starts_with(q) || q.starts_with(p)
}

fn overlap(p: &[u8], q: &[u8], what: &str) -> CmdError {
    err(&format!(
        "Prefix '{}' overlaps with {what} prefix '{}'. Prefixes for a single client must not overlap.",
        String::from_utf8_lossy(p),
        String::from_utf8_lossy(q)
    ))
}

/// CLIENT CACHING YES|NO
pub(crate) fn caching(ctx: &mut Ctx, args: Args) -> CmdResult {
    let me = ctx.client.id;
    let t = &ctx.core.tracking;
    let mut g = t.inner.lock();
    let Some(s) = g.clients.get_mut(&me) else {
        return Err(err("CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"));
    };
    match args.get(2).to_ascii_lowercase().as_slice() {
        b"yes" if !s.optin => Err(err(
            "CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
        )),
        b"no" if !s.optout => Err(err(
            "CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
        )),
        b"yes" | b"no" => {
            if !s.caching {
                s.caching = true;
                t.caching.fetch_add(1, Relaxed);
            }
            drop(g);
            ctx.out.ok();
            Ok(())
        }
        _ => Err(CmdError::Syntax),
    }
}

/// CLIENT GETREDIR
pub(crate) fn getredir(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let r = ctx.core.tracking.redirect_of(ctx.client.id);
    ctx.out.int(r.map_or(-1, |r| r as i64));
    Ok(())
}

/// CLIENT LIST / INFO: the tracking flags ("t", then "R" for a broken
/// redirect and "B" for BCAST) and `redir=` (-1 when not tracking).
pub(crate) fn list_fields(srv: &Core, id: u64) -> (String, i64) {
    if !srv.tracking.active() {
        return (String::new(), -1);
    }
    let g = srv.tracking.inner.lock();
    let Some(s) = g.clients.get(&id) else {
        return (String::new(), -1);
    };
    let mut f = String::from("t");
    if s.broken {
        f.push('R');
    }
    if s.bcast {
        f.push('B');
    }
    (f, s.redirect as i64)
}

/// CLIENT TRACKINGINFO
pub(crate) fn trackinginfo(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let s = ctx
        .core
        .tracking
        .inner
        .lock()
        .clients
        .get(&ctx.client.id)
        .cloned();
    let mut flags: Vec<&str> = Vec::new();
    match &s {
        None => flags.push("off"),
        Some(s) => {
            flags.push("on");
            let all = [
                (s.bcast, "bcast"),
                (s.optin, "optin"),
                (s.optin && s.caching, "caching-yes"),
                (s.optout, "optout"),
                (s.optout && s.caching, "caching-no"),
                (s.noloop, "noloop"),
                (s.broken, "broken_redirect"),
            ];
            flags.extend(all.iter().filter(|(on, _)| *on).map(|(_, f)| *f));
        }
    }
    let out = &mut *ctx.out;
    out.map(3);
    out.bulk(b"flags");
    out.set(flags.len());
    for f in flags {
        out.bulk(f.as_bytes());
    }
    out.bulk(b"redirect");
    out.int(s.as_ref().map_or(-1, |s| s.redirect as i64));
    out.bulk(b"prefixes");
    let p = s.map(|s| s.prefixes).unwrap_or_default();
    out.array(p.len());
    for x in p {
        out.bulk(&x);
    }
    Ok(())
}
