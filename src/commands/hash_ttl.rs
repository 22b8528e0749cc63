//! Hash field expiry, Redis 7.4's spelling: HEXPIRE, HPEXPIRE, HEXPIREAT,
//! HPEXPIREAT `key time [NX|XX|GT|LT] FIELDS numfields field...`, HTTL,
//! HPTTL, HEXPIRETIME, HPEXPIRETIME and HPERSIST `key FIELDS numfields
//! field...`. The TTLs are the ones KeyDB's EXPIREMEMBER sets
//! (`member_expire.rs`, `keyspace/member_ttl.rs`): one mechanism, two
//! spellings.
//!
//! Replies (redis.io's command pages and redis-py's tests for 7.4; our
//! oracle, 7.0, has none of these): one code per field, in order. Setting:
//! -2 no such field (or key), 0 the condition was not met, 1 set, 2 the
//! field was deleted at once (a deadline now or past). Reading: -2, -1 no
//! TTL, else the time (seconds rounded up). HPERSIST: -2, -1, 1 removed.
//! A field without TTL counts as infinite for GT/LT.
//!
//! Propagation: the fields set go as one `HPEXPIREAT key ms FIELDS n f...`
//! (absolute, as EXPIRE becomes PEXPIREAT), the ones deleted at once as
//! `HDEL`; HPERSIST as itself, naming the fields it changed. A replayed
//! deadline in the past is stored, not applied (the stream's own HDEL
//! follows, as for keys).

use super::member_expire::note_member_ttls;
use super::util::{arg_i64, eq_ic};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::Value;
use crate::protocol::{parse_i64, Args};

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "hash", acl = "hash"),
    cmd("hexpire", -6, WRITE | FAST, hexpire)
        .doc("7.4.0", "Set expiry for hash field using relative time to expire (seconds)")
        .complexity("O(N) where N is the number of specified fields")
        .keys(1, 1, 1),
    cmd("hpexpire", -6, WRITE | FAST, hpexpire)
        .doc("7.4.0", "Set expiry for hash field using relative time to expire (milliseconds)")
        .complexity("O(N) where N is the number of specified fields")
        .keys(1, 1, 1),
    cmd("hexpireat", -6, WRITE | FAST, hexpireat)
        .doc("7.4.0", "Set expiry for hash field using an absolute Unix timestamp (seconds)")
        .complexity("O(N) where N is the number of specified fields")
        .keys(1, 1, 1),
    cmd("hpexpireat", -6, WRITE | FAST, hpexpireat)
        .doc("7.4.0", "Set expiry for hash field using an absolute Unix timestamp (milliseconds)")
        .complexity("O(N) where N is the number of specified fields")
        .keys(1, 1, 1),
    cmd("httl", -5, READONLY | FAST, httl)
        .doc("7.4.0", "Returns the TTL in seconds of a hash field.")
        .complexity("O(N) where N is the number of specified fields")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output"]),
    cmd("hpttl", -5, READONLY | FAST, hpttl)
        .doc("7.4.0", "Returns the TTL in milliseconds of a hash field.")
        .complexity("O(N) where N is the number of specified fields")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output"]),
    cmd("hexpiretime", -5, READONLY | FAST, hexpiretime)
        .doc("7.4.0", "Returns the expiration time of a hash field as a Unix timestamp, in seconds.")
        .complexity("O(N) where N is the number of specified fields")
        .keys(1, 1, 1),
    cmd("hpexpiretime", -5, READONLY | FAST, hpexpiretime)
        .doc("7.4.0", "Returns the expiration time of a hash field as a Unix timestamp, in msec.")
        .complexity("O(N) where N is the number of specified fields")
        .keys(1, 1, 1),
    cmd("hpersist", -5, WRITE | FAST, hpersist)
        .doc("7.4.0", "Removes the expiration time for each specified field")
        .complexity("O(N) where N is the number of specified fields")
        .keys(1, 1, 1),
};

/// Redis 7.4's largest field deadline (EB_EXPIRE_TIME_MAX: 2^48 - 1 ms).
const MAX_DEADLINE_MS: i64 = (1 << 48) - 1;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cond {
    Always,
    Nx,
    Xx,
    Gt,
    Lt,
}

impl Cond {
    /// Whether deadline `when` may replace `current` (None: no TTL, an
    /// infinite one for GT/LT).
    fn allows(self, current: Option<u64>, when: u64) -> bool {
        match (self, current) {
            (Cond::Always, _) => true,
            (Cond::Nx, c) => c.is_none(),
            (Cond::Xx, c) => c.is_some(),
            (Cond::Gt, c) => c.is_some_and(|c| when > c),
            (Cond::Lt, c) => c.is_none_or(|c| when < c),
        }
    }
}

/// `FIELDS numfields field...` from argument `at`: the fields' indices.
fn parse_fields(args: Args, at: usize) -> Result<std::ops::Range<usize>, CmdError> {
    if at >= args.len() || !eq_ic(args.get(at), "FIELDS") {
        return Err(CmdError::err(
            "Mandatory argument FIELDS is missing or not at the right position",
        ));
    }
    let n = (args.len() > at + 1)
        .then(|| parse_i64(args.get(at + 1)))
        .flatten()
        .filter(|&n| n >= 1)
        .ok_or_else(|| CmdError::err("Parameter `numFields` should be greater than 0"))?;
    let first = at + 2;
    if n as u64 != (args.len() - first) as u64 {
        return Err(CmdError::err(
            "The `numfields` parameter must match the number of arguments",
        ));
    }
    Ok(first..args.len())
}

fn hexpire(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_generic(ctx, args, false, true, "hexpire")
}

fn hpexpire(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_generic(ctx, args, true, true, "hpexpire")
}

fn hexpireat(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_generic(ctx, args, false, false, "hexpireat")
}

fn hpexpireat(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_generic(ctx, args, true, false, "hpexpireat")
}

/// The absolute deadline in unix ms, with Redis 7.4's bounds.
fn deadline(ctx: &Ctx, args: Args, ms: bool, relative: bool, name: &str) -> Result<u64, CmdError> {
    let n = arg_i64(args.get(2))?;
    if n < 0 {
        return Err(CmdError::err("invalid expire time, must be >= 0"));
    }
    let invalid = || CmdError::err(format!("invalid expire time in '{name}' command"));
    if !ms && n > MAX_DEADLINE_MS / 1000 {
        return Err(invalid());
    }
    let n = if ms { n } else { n * 1000 };
    let base = if relative { ctx.now_ms as i64 } else { 0 };
    if n > MAX_DEADLINE_MS - base {
        return Err(invalid());
    }
    Ok((n + base) as u64)
}

fn parse_cond(args: Args) -> (Cond, usize) {
    let a = args.get(3);
    let c = [
        ("NX", Cond::Nx),
        ("XX", Cond::Xx),
        ("GT", Cond::Gt),
        ("LT", Cond::Lt),
    ]
    .into_iter()
    .find(|(w, _)| eq_ic(a, w));
    match c {
        Some((_, c)) => (c, 4),
        None => (Cond::Always, 3),
    }
}

/// What a setting command did to each field.
struct Outcome<'a> {
    codes: Vec<i64>,
    /// The fields set, each with its deadline before (0: none).
    set: Vec<(&'a [u8], u64)>,
    deleted: Vec<&'a [u8]>,
}

fn set_generic(ctx: &mut Ctx, args: Args, ms: bool, relative: bool, name: &str) -> CmdResult {
    let when = deadline(ctx, args, ms, relative, name)?;
    let (cond, at) = parse_cond(args);
    let fields = parse_fields(args, at)?;
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_hash(key)? else {
        drop(l);
        return reply_codes(ctx, &vec![-2; fields.len()]);
    };
    let prev = e.version;
    // A deadline now or past deletes at once, but for a replayed one.
    let now_due = when <= ctx.now_ms && ctx.replay_version.is_none();
    let mut o = Outcome {
        codes: Vec::with_capacity(fields.len()),
        set: Vec::new(),
        deleted: Vec::new(),
    };
    for i in fields {
        let f = args.get(i);
        let present =
            matches!(l.entry(key).map(|e| &e.value), Some(Value::Hash(h)) if h.contains(f));
        let before = l.member_ttl(key, f);
        if !present {
            o.codes.push(-2);
        } else if !cond.allows(before, when) {
            o.codes.push(0);
        } else if now_due {
            if let Some(Value::Hash(h)) = l.entry(key).map(|e| &mut e.value) {
                h.remove(f);
            }
            l.clear_member_ttl(key, f);
            o.deleted.push(f);
            o.codes.push(2);
        } else {
            l.set_member_ttl(key, f, when.max(1));
            o.set.push((f, before.unwrap_or(0)));
            o.codes.push(1);
        }
    }
    if !o.set.is_empty() || !o.deleted.is_empty() {
        let v = ctx.version_after(prev);
        if let Some(e) = l.entry(key) {
            e.version = v;
        }
        if o.deleted.is_empty() {
            // The record names the fields set from its argument 5.
            let at = when.max(1);
            let writes: Vec<(u32, &[u8], u64, u64)> = (o.set.iter().enumerate())
                .map(|(i, &(f, before))| (5 + i as u32, f, before, at))
                .collect();
            note_member_ttls(ctx, &mut l, key, v, &writes);
        }
        propagate_set(ctx, key, when, &o, v);
        ctx.remove_if_empty(&mut l, key);
    }
    drop(l);
    reply_codes(ctx, &o.codes)
}

fn propagate_set(ctx: &mut Ctx, key: &[u8], when: u64, o: &Outcome, v: u64) {
    if !o.set.is_empty() {
        let (at, n) = (when.max(1).to_string(), o.set.len().to_string());
        let mut argv: Vec<&[u8]> = vec![b"HPEXPIREAT", key, at.as_bytes(), b"FIELDS", n.as_bytes()];
        argv.extend(o.set.iter().map(|s| s.0));
        ctx.propagate(v, &argv);
        ctx.notify(super::events::class::HASH, "hexpire", key);
    }
    if !o.deleted.is_empty() {
        let mut argv: Vec<&[u8]> = vec![b"HDEL", key];
        argv.extend(o.deleted.iter().copied());
        ctx.propagate(v, &argv);
        ctx.notify(super::events::class::HASH, "hexpired", key);
    }
}

fn reply_codes(ctx: &mut Ctx, codes: &[i64]) -> CmdResult {
    ctx.out.array(codes.len());
    for &c in codes {
        ctx.out.int(c);
    }
    Ok(())
}

fn httl(ctx: &mut Ctx, args: Args) -> CmdResult {
    ttl_generic(ctx, args, false, true)
}

fn hpttl(ctx: &mut Ctx, args: Args) -> CmdResult {
    ttl_generic(ctx, args, true, true)
}

fn hexpiretime(ctx: &mut Ctx, args: Args) -> CmdResult {
    ttl_generic(ctx, args, false, false)
}

fn hpexpiretime(ctx: &mut Ctx, args: Args) -> CmdResult {
    ttl_generic(ctx, args, true, false)
}

/// HTTL family: each field's TTL, relative or absolute, in s (rounded up)
/// or ms.
fn ttl_generic(ctx: &mut Ctx, args: Args, ms: bool, relative: bool) -> CmdResult {
    let fields = parse_fields(args, 2)?;
    let key = args.get(1);
    let prev = ctx.client.no_touch;
    ctx.client.no_touch = true;
    let mut l = ctx.open(key);
    ctx.client.no_touch = prev;
    let now = ctx.now_ms as i64;
    let mut codes = Vec::with_capacity(fields.len());
    if l.get_hash(key)?.is_some() {
        for i in fields {
            let f = args.get(i);
            let present =
                matches!(l.entry(key).map(|e| &e.value), Some(Value::Hash(h)) if h.contains(f));
            codes.push(match (present, l.member_ttl(key, f)) {
                (false, _) => -2,
                (true, None) => -1,
                (true, Some(at)) => {
                    let t = at as i64 - if relative { now } else { 0 };
                    if ms {
                        t.max(0)
                    } else {
                        (t.max(0) + 999) / 1000
                    }
                }
            });
        }
    } else {
        codes.resize(fields.len(), -2);
    }
    drop(l);
    reply_codes(ctx, &codes)
}

/// HPERSIST key FIELDS numfields field...
fn hpersist(ctx: &mut Ctx, args: Args) -> CmdResult {
    let fields = parse_fields(args, 2)?;
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_hash(key)? else {
        drop(l);
        return reply_codes(ctx, &vec![-2; fields.len()]);
    };
    let prev = e.version;
    let (mut codes, mut cleared) = (Vec::new(), Vec::new());
    for i in fields {
        let f = args.get(i);
        let present =
            matches!(l.entry(key).map(|e| &e.value), Some(Value::Hash(h)) if h.contains(f));
        let before = l.member_ttl(key, f).unwrap_or(0);
        codes.push(if !present {
            -2
        } else if l.clear_member_ttl(key, f) {
            cleared.push((f, before));
            1
        } else {
            -1
        });
    }
    if !cleared.is_empty() {
        let v = ctx.version_after(prev);
        if let Some(e) = l.entry(key) {
            e.version = v;
        }
        // The record names the fields cleared from its argument 4.
        let writes: Vec<(u32, &[u8], u64, u64)> = (cleared.iter().enumerate())
            .map(|(i, &(f, before))| (4 + i as u32, f, before, 0))
            .collect();
        note_member_ttls(ctx, &mut l, key, v, &writes);
        let n = cleared.len().to_string();
        let mut argv: Vec<&[u8]> = vec![b"HPERSIST", key, b"FIELDS", n.as_bytes()];
        argv.extend(cleared.iter().map(|c| c.0));
        ctx.propagate(v, &argv);
        ctx.notify(super::events::class::HASH, "hpersist", key);
    }
    drop(l);
    reply_codes(ctx, &codes)
}
