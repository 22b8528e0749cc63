//! Client-side caching (Redis 6+ `CLIENT TRACKING`): the registry of which
//! clients track which keys, and the CLIENT TRACKING / CACHING / GETREDIR /
//! TRACKINGINFO handlers.
//!
//! Built as one mutex-guarded registry (`Tracking`) plus an atomic count of
//! tracking clients, so the write path (`Ctx::propagate_db`) and the read
//! path (dispatch) pay one relaxed load when nobody tracks. Invalidations
//! are delivered through each client's push channel (`ClientShared::push`),
//! the mechanism PUBLISH uses: RESP3 `>2 invalidate [keys]` or, for RESP2
//! redirect targets, a `__redis__:invalidate` pub/sub message.
use super::error::CmdError;
use super::{Args, CmdResult, Ctx};
use crate::protocol::ReplyBuf;
use crate::server::Server;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// One client's tracking settings.
#[derive(Default, Clone)]
struct Settings {
    redirect: u64,
    bcast: bool,
    optin: bool,
    optout: bool,
    noloop: bool,
    prefixes: Vec<Vec<u8>>,
    /// CLIENT CACHING yes/no for the next command.
    caching: Option<bool>,
}

#[derive(Default)]
struct Inner {
    clients: HashMap<u64, Settings>,
    keys: HashMap<Vec<u8>, HashSet<u64>>,
}

/// The server-wide tracking registry.
#[derive(Default)]
pub struct Tracking {
    active: AtomicUsize,
    inner: Mutex<Inner>,
}

impl Tracking {
    pub fn active(&self) -> bool {
        self.active.load(Relaxed) > 0
    }

    /// Forgets a client (tracking off, disconnect).
    pub fn remove_client(&self, id: u64) {
        if !self.active() {
            return;
        }
        let mut g = self.inner.lock();
        if g.clients.remove(&id).is_some() {
            self.active.fetch_sub(1, Relaxed);
            g.keys.retain(|_, s| {
                s.remove(&id);
                !s.is_empty()
            });
        }
    }

    /// The redirect of a tracking client (0 = none); None when not tracking.
    pub fn redirect_of(&self, id: u64) -> Option<u64> {
        if !self.active() {
            return None;
        }
        self.inner.lock().clients.get(&id).map(|s| s.redirect)
    }

    /// (tracking clients, tracked keys, BCAST prefixes) for INFO.
    pub fn stats(&self) -> (usize, usize, usize) {
        let g = self.inner.lock();
        let p = g.clients.values().map(|s| s.prefixes.len()).sum();
        (g.clients.len(), g.keys.len(), p)
    }
}

/// Dispatch hook: after command `cmd_id` ran for client `id`, remembers
/// the keys it read if the client tracks them.
pub fn after_command(srv: &Server, id: u64, cmd_id: usize, args: Args) {
    let t = &srv.tracking;
    if !t.active() {
        return;
    }
    let cmd = srv.commands.get(cmd_id);
    let mut g = t.inner.lock();
    let Some(s) = g.clients.get_mut(&id) else {
        return;
    };
    if srv.commands.full_names[cmd_id] == "client|caching" {
        return;
    }
    let caching = s.caching.take();
    let track = !s.bcast
        && cmd.flags & super::flags::READONLY != 0
        && if s.optin {
            caching == Some(true)
        } else if s.optout {
            caching != Some(false)
        } else {
            true
        };
    if !track {
        return;
    }
    for p in cmd.key_positions(args) {
        g.keys.entry(args.get(p).to_vec()).or_default().insert(id);
    }
}

/// Write hook (from `Ctx::propagate_db`): invalidates the keys `argv` wrote.
pub fn touch_write(ctx: &Ctx, argv: &[&[u8]]) {
    let Some(&name) = argv.first() else { return };
    let srv = ctx.srv;
    if name.eq_ignore_ascii_case(b"flushall") || name.eq_ignore_ascii_case(b"flushdb") {
        return invalidate_all(ctx);
    }
    let mut spans = Vec::with_capacity(argv.len());
    let mut off = 0;
    for a in argv {
        spans.push(off..off + a.len());
        off += a.len();
    }
    let flat = argv.concat();
    let args = Args::new(&flat, &spans);
    let Some(mut id) = srv.commands.lookup(name) else {
        return;
    };
    if srv.commands.has_subcommands(id) && args.len() > 1 {
        match srv.commands.lookup_sub(id, args.get(1)) {
            Some(s) => id = s,
            None => return,
        }
    }
    let keys: Vec<&[u8]> = srv
        .commands
        .get(id)
        .key_positions(args)
        .into_iter()
        .map(|p| args.get(p))
        .collect();
    invalidate_keys(ctx, &keys);
}

/// Sends each client one message listing the keys of this write it tracks.
fn invalidate_keys(ctx: &Ctx, keys: &[&[u8]]) {
    let me = ctx.client.id;
    let mut per: HashMap<u64, Vec<&[u8]>> = HashMap::new();
    let mut g = ctx.srv.tracking.inner.lock();
    for &key in keys {
        let mut targets: Vec<u64> = g.keys.remove(key).into_iter().flatten().collect();
        for (&id, s) in &g.clients {
            if s.bcast && (s.prefixes.is_empty() || s.prefixes.iter().any(|p| key.starts_with(p))) {
                targets.push(id);
            }
        }
        targets.retain(|id| !(g.clients.get(id).is_some_and(|s| s.noloop) && *id == me));
        targets.sort_unstable();
        targets.dedup();
        for id in targets {
            let v = per.entry(id).or_default();
            if !v.contains(&key) {
                v.push(key);
            }
        }
    }
    for (id, ks) in per {
        let r = g.clients.get(&id).map_or(0, |s| s.redirect);
        send(ctx, id, r, Some(&ks));
    }
}

fn invalidate_all(ctx: &Ctx) {
    let g = &mut *ctx.srv.tracking.inner.lock();
    g.keys.clear();
    for (&id, s) in &g.clients {
        send(ctx, id, s.redirect, None);
    }
}

/// Sends one invalidation to client `id` (or its redirect target).
fn send(ctx: &Ctx, id: u64, redirect: u64, keys: Option<&[&[u8]]>) {
    let target = if redirect != 0 { redirect } else { id };
    let Some(c) = ctx.srv.clients.get(target) else {
        return;
    };
    let resp = c.resp.load(Relaxed);
    let mut b = ReplyBuf::new(if resp >= 3 { 3 } else { 2 });
    if resp >= 3 {
        b.push(2);
        b.bulk(b"invalidate");
    } else {
        if c.subs[0].load(Relaxed) == 0 {
            return;
        }
        b.push(3);
        b.bulk(b"message");
        b.bulk(b"__redis__:invalidate");
    }
    match keys {
        Some(ks) => {
            b.array(ks.len());
            for k in ks {
                b.bulk(k);
            }
        }
        None => b.null(),
    }
    let limit = ctx.srv.hot.obuf_limits.read().pubsub;
    c.push(std::sync::Arc::new(b.buf), &limit, ctx.now_ms);
}

fn err(s: &str) -> CmdError {
    CmdError::err(s)
}

/// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP]
pub fn tracking(ctx: &mut Ctx, args: Args) -> CmdResult {
    let on = match args.get(2).to_ascii_lowercase().as_slice() {
        b"on" => true,
        b"off" => false,
        _ => return Err(CmdError::Syntax),
    };
    let mut n = Settings::default();
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
                if id <= 0 || ctx.srv.clients.get(id as u64).is_none() {
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
                n.prefixes.push(args.get(i + 1).to_vec());
                i += 1;
            }
            _ => return Err(CmdError::Syntax),
        }
        i += 1;
    }
    let me = ctx.client.id;
    let t = &ctx.srv.tracking;
    if !on {
        t.remove_client(me);
        ctx.out.ok();
        return Ok(());
    }
    let mut g = t.inner.lock();
    let old = g.clients.get(&me).cloned();
    check_on(&n, old.as_ref())?;
    let mut merged = n;
    if let Some(o) = old {
        let mut p = o.prefixes;
        p.extend(merged.prefixes);
        merged.prefixes = p;
        merged.optin |= o.optin;
        merged.optout |= o.optout;
    } else {
        t.active.fetch_add(1, Relaxed);
    }
    g.clients.insert(me, merged);
    drop(g);
    ctx.out.ok();
    Ok(())
}

fn check_on(n: &Settings, old: Option<&Settings>) -> CmdResult {
    if let Some(o) = old {
        if o.bcast != n.bcast {
            return Err(err("You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."));
        }
    }
    if !n.bcast && !n.prefixes.is_empty() {
        return Err(err("PREFIX option requires BCAST mode to be enabled"));
    }
    if n.bcast {
        let existing = old.map_or(&[][..], |o| &o.prefixes[..]);
        for (j, p) in n.prefixes.iter().enumerate() {
            let others = existing.iter().map(|q| (q, "an existing"));
            let news = n.prefixes[j + 1..].iter().map(|q| (q, "another provided"));
            for (q, what) in others.chain(news) {
                if p.starts_with(q) || q.starts_with(p) {
                    return Err(overlap(p, q, what));
                }
            }
        }
    }
    if n.optin && n.optout {
        return Err(err("You can't use OPTIN and OPTOUT at the same time"));
    }
    if let Some(o) = old {
        if (n.optin && o.optout) || (n.optout && o.optin) {
            return Err(err("You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode."));
        }
    }
    if n.bcast && (n.optin || n.optout) {
        return Err(err("OPTIN and OPTOUT are not compatible with BCAST"));
    }
    Ok(())
}

fn overlap(p: &[u8], q: &[u8], what: &str) -> CmdError {
    err(&format!(
        "Prefix '{}' overlaps with {what} prefix '{}'. Prefixes for a single client must not overlap.",
        String::from_utf8_lossy(p),
        String::from_utf8_lossy(q)
    ))
}

/// CLIENT CACHING YES|NO
pub fn caching(ctx: &mut Ctx, args: Args) -> CmdResult {
    let me = ctx.client.id;
    let mut g = ctx.srv.tracking.inner.lock();
    let Some(s) = g.clients.get_mut(&me).filter(|s| s.optin || s.optout) else {
        return Err(err("CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"));
    };
    let yes = match args.get(2).to_ascii_lowercase().as_slice() {
        b"yes" => true,
        b"no" => false,
        _ => return Err(CmdError::Syntax),
    };
    if yes && !s.optin {
        return Err(err(
            "CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
        ));
    }
    if !yes && !s.optout {
        return Err(err(
            "CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
        ));
    }
    s.caching = Some(yes);
    drop(g);
    ctx.out.ok();
    Ok(())
}

/// CLIENT GETREDIR
pub fn getredir(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let g = ctx.srv.tracking.inner.lock();
    let r = g
        .clients
        .get(&ctx.client.id)
        .map_or(-1, |s| s.redirect as i64);
    drop(g);
    ctx.out.int(r);
    Ok(())
}

/// CLIENT TRACKINGINFO
pub fn trackinginfo(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let s = ctx
        .srv
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
            for (on, f) in [(s.bcast, "bcast"), (s.optin, "optin"), (s.optout, "optout")] {
                if on {
                    flags.push(f);
                }
            }
            match s.caching {
                Some(true) => flags.push("caching-yes"),
                Some(false) => flags.push("caching-no"),
                None => {}
            }
            if s.noloop {
                flags.push("noloop");
            }
            if s.redirect != 0 && ctx.srv.clients.get(s.redirect).is_none() {
                flags.push("broken_redirect");
            }
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
