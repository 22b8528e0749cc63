//! String commands (Redis's t_string.c): GET/SET and their variants, the
//! counters (INCR.., INCRBYFLOAT), ranges (GETRANGE/SETRANGE/APPEND) and LCS.
//!
//! Every handler parses its arguments first (no data touched), then locks the
//! key(s), executes, replies and propagates once, rewritten as Redis does so
//! replicas and the AOF replay the same result: relative expiries become
//! absolute (`SET .. PXAT`, `PEXPIREAT`), INCRBYFLOAT becomes `SET .. KEEPTTL`,
//! GETDEL becomes `DEL`. INCRBYFLOAT computes in x87 80-bit precision through
//! the software `longdouble` module, so its results match Redis byte for byte.
//! Encodings follow Redis: SET/MSET/APPEND-on-new pick int/embstr/raw, INCR
//! keeps `int`, INCRBYFLOAT stores an embstr, APPEND/SETRANGE make `raw`.

use crate::keyspace::longdouble;

use super::keyspec::KeySpec;
use std::sync::atomic::Ordering::Relaxed;

use super::util::{arg_i64, eq_ic};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::merge::{Base, Incr};
use crate::keyspace::{Entry, StrValue, Value};
use crate::protocol::Args;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "string", acl = "string"),
    cmd("get", 2, READONLY | FAST, get)
        .doc("1.0.0", "Returns the string value of a key.")
        .keys(1, 1, 1),
    cmd("set", -3, WRITE | DENYOOM, set)
        .doc("1.0.0", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "update", "variable_flags"])
                .notes("RW and ACCESS due to the optional `GET` argument"),
        ])
        .key_flags_fn(set_key_flags),
    cmd("setnx", 3, WRITE | DENYOOM | FAST, setnx)
        .doc("1.0.0", "Set the string value of a key only when the key doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["OW", "insert"])]),
    cmd("setex", 4, WRITE | DENYOOM, setex)
        .doc("2.0.0", "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["OW", "update"])]),
    cmd("psetex", 4, WRITE | DENYOOM, psetex)
        .doc("2.6.0", "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["OW", "update"])]),
    cmd("mget", -2, READONLY | FAST, mget)
        .doc("1.0.0", "Atomically returns the string values of one or more keys.")
        .complexity("O(N) where N is the number of keys to retrieve.")
        .keys(1, -1, 1)
        .tips(&["request_policy:multi_shard"]),
    cmd("mset", -3, WRITE | DENYOOM, mset)
        .doc("1.0.1", "Atomically creates or modifies the string values of one or more keys.")
        .complexity("O(N) where N is the number of keys to set.")
        .keys(1, -1, 2)
        .key_specs(&[KeySpec::at(1, &["OW", "update"]).range(-1, 2, 0)])
        .tips(&["request_policy:multi_shard", "response_policy:all_succeeded"]),
    cmd("msetnx", -3, WRITE | DENYOOM, msetnx)
        .doc("1.0.1", "Atomically modifies the string values of one or more keys only when all keys don't exist.")
        .complexity("O(N) where N is the number of keys to set.")
        .keys(1, -1, 2)
        .key_specs(&[KeySpec::at(1, &["OW", "insert"]).range(-1, 2, 0)])
        .tips(&["request_policy:multi_shard", "response_policy:agg_min"]),
    cmd("getset", 3, WRITE | DENYOOM | FAST, getset)
        .doc("1.0.0", "Returns the previous string value of a key after setting it to a new value.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("getdel", 2, WRITE | FAST, getdel)
        .doc("6.2.0", "Returns the string value of a key after deleting the key.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"])]),
    cmd("getex", -2, WRITE | FAST, getex)
        .doc("6.2.0", "Returns the string value of a key after setting its expiration time.")
        .keys(1, 1, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "update"])
                .notes("RW and UPDATE because it changes the TTL"),
        ]),
    cmd("append", 3, WRITE | DENYOOM | FAST, append)
        .doc("2.0.0", "Appends a string to the value of a key. Creates the key if it doesn't exist.")
        .complexity("O(1). The amortized time complexity is O(1) assuming the appended value is small and the already present value is of any size, since the dynamic string library used by Redis will double the free space available on every reallocation.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "insert"])]),
    cmd("strlen", 2, READONLY | FAST, strlen)
        .doc("2.2.0", "Returns the length of a string value.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"])]),
    cmd("incr", 2, WRITE | DENYOOM | FAST, incr)
        .doc("1.0.0", "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("decr", 2, WRITE | DENYOOM | FAST, decr)
        .doc("1.0.0", "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("incrby", 3, WRITE | DENYOOM | FAST, incrby)
        .doc("1.0.0", "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("decrby", 3, WRITE | DENYOOM | FAST, decrby)
        .doc("1.0.0", "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("incrbyfloat", 3, WRITE | DENYOOM | FAST, incrbyfloat)
        .doc("2.6.0", "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("getrange", 4, READONLY, getrange)
        .doc("2.4.0", "Returns a substring of the string stored at a key.")
        .complexity("O(N) where N is the length of the returned string. The complexity is ultimately determined by the returned length, but because creating a substring from an existing string is very cheap, it can be considered O(1) for small strings.")
        .keys(1, 1, 1),
    cmd("setrange", 4, WRITE | DENYOOM, setrange)
        .doc("2.2.0", "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.")
        .complexity("O(1), not counting the time taken to copy the new string in place. Usually, this string is very small so the amortized complexity is O(1). Otherwise, complexity is O(M) with M being the length of the value argument.")
        .keys(1, 1, 1),
    cmd("substr", 4, READONLY, getrange)
        .doc("1.0.0", "Returns a substring from a string value.")
        .complexity("O(N) where N is the length of the returned string. The complexity is ultimately determined by the returned length, but because creating a substring from an existing string is very cheap, it can be considered O(1) for small strings.")
        .keys(1, 1, 1),
    cmd("lcs", -3, READONLY, lcs)
        .doc("7.0.0", "Finds the longest common substring.")
        .complexity("O(N*M) where N and M are the lengths of s1 and s2, respectively")
        .keys(1, 2, 1),
};

/// The string inside a value already checked to be a string.
pub(crate) fn str_of(v: &Value) -> &StrValue {
    match v {
        Value::Str(s) => s,
        _ => unreachable!("type checked by get_str"),
    }
}

pub(crate) fn str_of_mut(v: &mut Value) -> &mut StrValue {
    match v {
        Value::Str(s) => s,
        _ => unreachable!("type checked by get_str"),
    }
}

/// Redis's checkStringLength: `size + append` must fit proto-max-bulk-len
/// (not checked when replaying, as Redis trusts its master).
fn check_len(ctx: &Ctx, size: u64, append: u64) -> CmdResult {
    if ctx.replay_version.is_some() {
        return Ok(());
    }
    let max = ctx.core.hot.proto_max_bulk_len.load(Relaxed) as u64;
    match size.checked_add(append) {
        Some(t) if t <= max => Ok(()),
        _ => Err(CmdError::err(
            "string exceeds maximum allowed size (proto-max-bulk-len)",
        )),
    }
}

fn get(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    reply_value(ctx, key, l.get_str(key)?.map(|e| &*e));
    Ok(())
}

/// Replies with a string entry's value or null, counting the keyspace hit.
fn reply_value(ctx: &mut Ctx, key: &[u8], e: Option<&Entry>) {
    match e {
        Some(e) => {
            str_of(&e.value).with_bytes(|b| ctx.out.bulk(b));
            ctx.read_hit(key, true);
        }
        None => {
            ctx.out.null();
            ctx.read_hit(key, false);
        }
    }
}

/// When a write's key must (not) exist.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Cond {
    Always,
    Nx,
    Xx,
}

/// A parsed expiry option.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ExpireOpt {
    None,
    KeepTtl,
    /// Absolute unix ms.
    At(u64),
}

/// The unit of an EX/PX/EXAT/PXAT option.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ExpUnit {
    Ex,
    Px,
    ExAt,
    PxAt,
}

/// The options of SET and GETEX as Redis's parseExtendedStringArguments
/// reads them (repeating an option is allowed; the last expiry wins).
#[derive(Default)]
struct ExtOpts {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    /// The unit and the index of its argument.
    expire: Option<(ExpUnit, usize)>,
}

fn parse_ext(args: Args, start: usize, is_set: bool) -> Result<ExtOpts, CmdError> {
    let mut o = ExtOpts::default();
    let mut i = start;
    while i < args.len() {
        let a = args.get(i);
        let has_next = i + 1 < args.len();
        let unit = expire_unit(a);
        let other_unit = |u: ExpUnit| o.expire.is_some_and(|(x, _)| x != u);
        if is_set && eq_ic(a, "NX") && !o.xx {
            o.nx = true;
        } else if is_set && eq_ic(a, "XX") && !o.nx {
            o.xx = true;
        } else if is_set && eq_ic(a, "GET") {
            o.get = true;
        } else if is_set && eq_ic(a, "KEEPTTL") && !o.persist && o.expire.is_none() {
            o.keepttl = true;
        } else if !is_set && eq_ic(a, "PERSIST") && o.expire.is_none() && !o.keepttl {
            o.persist = true;
        } else if let Some(u) = unit.filter(|&u| !o.keepttl && !o.persist && !other_unit(u)) {
            if !has_next {
                return Err(CmdError::Syntax);
            }
            o.expire = Some((u, i + 1));
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok(o)
}

fn expire_unit(a: &[u8]) -> Option<ExpUnit> {
    [
        ("EX", ExpUnit::Ex),
        ("PX", ExpUnit::Px),
        ("EXAT", ExpUnit::ExAt),
        ("PXAT", ExpUnit::PxAt),
    ]
    .into_iter()
    .find(|(n, _)| eq_ic(a, n))
    .map(|(_, u)| u)
}

fn unit_name(u: ExpUnit) -> &'static [u8] {
    match u {
        ExpUnit::Ex => b"EX",
        ExpUnit::Px => b"PX",
        ExpUnit::ExAt => b"EXAT",
        ExpUnit::PxAt => b"PXAT",
    }
}

/// Turns EX/PX/EXAT/PXAT `n` into an absolute unix ms, with Redis's checks.
pub(crate) fn expire_at_from(
    unit: &[u8],
    n: &[u8],
    now_ms: u64,
    cmd: &str,
) -> Result<u64, CmdError> {
    let invalid = || CmdError::err(format!("invalid expire time in '{cmd}' command"));
    let v = arg_i64(n)?;
    if v <= 0 {
        return Err(invalid());
    }
    let ms = if eq_ic(unit, "EX") || eq_ic(unit, "EXAT") {
        v.checked_mul(1000).ok_or_else(invalid)?
    } else {
        v
    };
    let at = if eq_ic(unit, "EX") || eq_ic(unit, "PX") {
        ms.checked_add(now_ms as i64).ok_or_else(invalid)?
    } else {
        ms
    };
    Ok(at as u64)
}

/// The absolute expiry an [`ExtOpts`] asks for, validated.
fn ext_expire_at(o: &ExtOpts, args: Args, now_ms: u64, cmd: &str) -> Result<Option<u64>, CmdError> {
    match o.expire {
        None => Ok(None),
        Some((u, i)) => expire_at_from(unit_name(u), args.get(i), now_ms, cmd).map(Some),
    }
}

fn set(ctx: &mut Ctx, args: Args) -> CmdResult {
    let o = parse_ext(args, 3, true)?;
    let expire = match ext_expire_at(&o, args, ctx.now_ms, "set")? {
        Some(at) => ExpireOpt::At(at),
        None if o.keepttl => ExpireOpt::KeepTtl,
        None => ExpireOpt::None,
    };
    let cond = if o.nx {
        Cond::Nx
    } else if o.xx {
        Cond::Xx
    } else {
        Cond::Always
    };
    let done = set_generic(ctx, args.get(1), args.get(2), cond, expire, o.get)?;
    if !o.get {
        if done {
            ctx.out.ok()
        } else {
            ctx.out.null()
        }
    }
    Ok(())
}

/// SET's core: optionally replies the old value (GET), writes unless `cond`
/// blocks it, and propagates. Returns whether the key was written.
fn set_generic(
    ctx: &mut Ctx,
    key: &[u8],
    val: &[u8],
    cond: Cond,
    expire: ExpireOpt,
    get: bool,
) -> Result<bool, CmdError> {
    let mut l = ctx.open(key);
    if get {
        match l.get_str(key)? {
            Some(e) => str_of(&e.value).with_bytes(|b| ctx.out.bulk(b)),
            None => ctx.out.null(),
        }
    }
    let old = l.entry(key).map(|e| (e.expire_at(), e.version));
    let blocked = match cond {
        Cond::Nx => old.is_some(),
        Cond::Xx => old.is_none(),
        Cond::Always => false,
    };
    if blocked {
        return Ok(false);
    }
    let (old_ttl, prev_version) = old.unwrap_or((0, 0));
    let expire_at = match expire {
        ExpireOpt::None => 0,
        ExpireOpt::KeepTtl => old_ttl,
        ExpireOpt::At(at) => at,
    };
    let version = ctx.version_after(prev_version);
    if expire_at != 0 && expire_at <= ctx.now_ms && ctx.replay_version.is_none() {
        // Already expired (EXAT/PXAT in the past): the key is deleted.
        if l.remove(key).is_some() {
            let del = ctx.expired_del_name();
            ctx.propagate(version, &[del, key]);
            ctx.notify(super::events::class::GENERIC, "del", key);
        }
    } else {
        l.put(key, Value::string(val), expire_at, version);
        ctx.note_reset(&mut l, key, version);
        match ctx
            .sent
            .filter(|s| !matches!(expire, ExpireOpt::At(_)) && is_set(s))
        {
            // No expiry to make absolute: as sent, less GET (as Redis).
            Some(s) => {
                let argv: Vec<&[u8]> = (0..s.len())
                    .map(|i| s.get(i))
                    .enumerate()
                    .filter(|(i, a)| *i < 3 || !a.eq_ignore_ascii_case(b"get"))
                    .map(|(_, a)| a)
                    .collect();
                ctx.propagate(version, &argv);
            }
            None => propagate_set(ctx, version, key, val, expire),
        }
        ctx.notify(super::events::class::STRING, "set", key);
        if matches!(expire, ExpireOpt::At(_)) {
            ctx.notify(super::events::class::GENERIC, "expire", key);
        }
    }
    Ok(true)
}

/// Whether the client's command is SET itself (not SETEX, GETSET ...).
fn is_set(sent: &Args) -> bool {
    sent.get(0).eq_ignore_ascii_case(b"set")
}

/// Propagates a SET with its expiry made absolute.
pub(crate) fn propagate_set(
    ctx: &mut Ctx,
    version: u64,
    key: &[u8],
    val: &[u8],
    expire: ExpireOpt,
) {
    match expire {
        ExpireOpt::None => ctx.propagate(version, &[b"SET", key, val]),
        ExpireOpt::KeepTtl => ctx.propagate(version, &[b"SET", key, val, b"KEEPTTL"]),
        ExpireOpt::At(at) => {
            let at = at.to_string();
            ctx.propagate(version, &[b"SET", key, val, b"PXAT", at.as_bytes()])
        }
    }
}

fn setnx(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, val) = (args.get(1), args.get(2));
    let mut l = ctx.open(key);
    if l.exists(key) {
        ctx.out.int(0);
        return Ok(());
    }
    let version = ctx.new_version();
    l.put(key, Value::string(val), 0, version);
    ctx.propagate(version, &[b"SETNX", key, val]);
    ctx.notify(super::events::class::STRING, "set", key);
    ctx.out.int(1);
    Ok(())
}

fn setex(ctx: &mut Ctx, args: Args) -> CmdResult {
    setex_generic(ctx, args, "EX", "setex")
}

fn psetex(ctx: &mut Ctx, args: Args) -> CmdResult {
    setex_generic(ctx, args, "PX", "psetex")
}

fn setex_generic(ctx: &mut Ctx, args: Args, unit: &str, name: &str) -> CmdResult {
    let at = expire_at_from(unit.as_bytes(), args.get(2), ctx.now_ms, name)?;
    let (key, val) = (args.get(1), args.get(3));
    set_generic(ctx, key, val, Cond::Always, ExpireOpt::At(at), false)?;
    ctx.out.ok();
    Ok(())
}

fn getset(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, val) = (args.get(1), args.get(2));
    let mut l = ctx.open(key);
    let prev = match l.get_str(key)? {
        Some(e) => {
            str_of(&e.value).with_bytes(|b| ctx.out.bulk(b));
            e.version
        }
        None => {
            ctx.out.null();
            0
        }
    };
    let version = ctx.version_after(prev);
    l.put(key, Value::string(val), 0, version);
    ctx.note_reset(&mut l, key, version);
    ctx.propagate(version, &[b"SET", key, val]);
    ctx.notify(super::events::class::STRING, "set", key);
    Ok(())
}

fn getdel(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_str(key)? else {
        reply_value(ctx, key, None);
        return Ok(());
    };
    reply_value(ctx, key, Some(&*e));
    let version = ctx.version_after(e.version);
    l.remove(key);
    let del = ctx.user_del_name();
    ctx.note_states(&mut l, &[del, key], &[key]);
    ctx.propagate(version, &[del, key]);
    ctx.notify(super::events::class::GENERIC, "del", key);
    Ok(())
}

fn getex(ctx: &mut Ctx, args: Args) -> CmdResult {
    let o = parse_ext(args, 2, false)?;
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_str(key)? else {
        reply_value(ctx, key, None);
        return Ok(());
    };
    // As Redis, the expiry is validated only once the key is known to exist.
    let at = ext_expire_at(&o, args, ctx.now_ms, "getex")?;
    reply_value(ctx, key, Some(&*e));
    let (prev, had_ttl) = (e.version, e.expire_at() != 0);
    if let Some(at) = at {
        let absolute = matches!(o.expire, Some((ExpUnit::ExAt | ExpUnit::PxAt, _)));
        let version = ctx.version_after(prev);
        if absolute && at <= ctx.now_ms && ctx.replay_version.is_none() {
            l.remove(key);
            let del = ctx.expired_del_name();
            ctx.propagate(version, &[del, key]);
            ctx.notify(super::events::class::GENERIC, "del", key);
        } else {
            l.set_expire(key, at);
            l.set_version(key, version);
            let at = at.to_string();
            ctx.propagate(version, &[b"PEXPIREAT", key, at.as_bytes()]);
            ctx.notify(super::events::class::GENERIC, "expire", key);
        }
    } else if o.persist && had_ttl {
        let version = ctx.version_after(prev);
        l.set_expire(key, 0);
        l.set_version(key, version);
        ctx.propagate(version, &[b"PERSIST", key]);
        ctx.notify(super::events::class::GENERIC, "persist", key);
    }
    Ok(())
}

fn mget(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let mut l = ctx.open_many(keys.iter().copied());
    ctx.out.array(keys.len());
    for &k in &keys {
        match l.entry(k) {
            Some(e) => match &e.value {
                Value::Str(s) => {
                    s.with_bytes(|b| ctx.out.bulk(b));
                    ctx.read_hit(k, true);
                }
                _ => ctx.out.null(),
            },
            None => {
                ctx.out.null();
                ctx.read_hit(k, false);
            }
        }
    }
    Ok(())
}

fn mset(ctx: &mut Ctx, args: Args) -> CmdResult {
    mset_generic(ctx, args, false)
}

fn msetnx(ctx: &mut Ctx, args: Args) -> CmdResult {
    mset_generic(ctx, args, true)
}

fn mset_generic(ctx: &mut Ctx, args: Args, nx: bool) -> CmdResult {
    if args.len().is_multiple_of(2) {
        let name = if nx { "msetnx" } else { "mset" };
        return Err(CmdError::WrongArity(name.into()));
    }
    let keys: Vec<&[u8]> = args.iter().skip(1).step_by(2).collect();
    let mut l = ctx.open_many(keys.iter().copied());
    let mut prev = 0;
    for &k in &keys {
        if let Some(e) = l.entry(k) {
            if nx {
                ctx.out.int(0);
                return Ok(());
            }
            prev = prev.max(e.version);
        }
    }
    // One version for the whole command, so its single effect replays as-is.
    let version = ctx.version_after(prev);
    for i in (1..args.len()).step_by(2) {
        l.put(args.get(i), Value::string(args.get(i + 1)), 0, version);
        ctx.notify(super::events::class::STRING, "set", args.get(i));
    }
    if keys.len() == 1 {
        ctx.note_reset(&mut l, keys[0], version);
    }
    ctx.propagate_args(version, &args);
    if nx {
        ctx.out.int(1);
    } else {
        ctx.out.ok();
    }
    Ok(())
}

fn append(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, val) = (args.get(1), args.get(2));
    let mut l = ctx.open(key);
    let total = match l.get_str(key)? {
        None => {
            let version = ctx.new_version();
            l.put(key, Value::string(val), 0, version);
            ctx.note_reset(&mut l, key, version);
            ctx.propagate(version, &[b"APPEND", key, val]);
            ctx.notify(super::events::class::STRING, "append", key);
            val.len()
        }
        Some(e) => {
            let s = str_of_mut(&mut e.value);
            check_len(ctx, s.len() as u64, val.len() as u64)?;
            let data = s.make_raw();
            data.extend_from_slice(val);
            let total = data.len();
            e.version = ctx.version_after(e.version);
            let version = e.version;
            ctx.note_reset(&mut l, key, version);
            ctx.propagate(version, &[b"APPEND", key, val]);
            ctx.notify(super::events::class::STRING, "append", key);
            total
        }
    };
    ctx.out.int(total as i64);
    Ok(())
}

fn strlen(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let n = l.get_str(key)?.map(|e| str_of(&e.value).len());
    ctx.read_hit(key, n.is_some());
    ctx.out.int(n.unwrap_or(0) as i64);
    Ok(())
}

fn incr(ctx: &mut Ctx, args: Args) -> CmdResult {
    incr_decr(ctx, args, 1)
}

fn decr(ctx: &mut Ctx, args: Args) -> CmdResult {
    incr_decr(ctx, args, -1)
}

fn incrby(ctx: &mut Ctx, args: Args) -> CmdResult {
    let by = arg_i64(args.get(2))?;
    incr_decr(ctx, args, by)
}

fn decrby(ctx: &mut Ctx, args: Args) -> CmdResult {
    let by = arg_i64(args.get(2))?;
    if by == i64::MIN {
        return Err(CmdError::err("decrement would overflow"));
    }
    incr_decr(ctx, args, -by)
}

/// The i64 a string holds, as Redis's getLongLongFromObject.
fn str_i64(s: &StrValue) -> Result<i64, CmdError> {
    match s.as_int() {
        Some(n) => Ok(n),
        None => s.with_bytes(arg_i64),
    }
}

fn incr_decr(ctx: &mut Ctx, args: Args, by: i64) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let (n, before, version) = match l.get_str(key)? {
        Some(e) => {
            let old = str_i64(str_of(&e.value))?;
            let n = old.checked_add(by).ok_or(CmdError::Overflow)?;
            let before = (e.version, Base::Int(old.into()));
            let version = ctx.version_after(e.version);
            super::access::set_str_keep_ttl(e, StrValue::Int(n), version);
            (n, before, version)
        }
        None => {
            let before = (l.absent_version(key), Base::Absent);
            let version = ctx.new_version();
            l.put(key, Value::Str(StrValue::Int(by)), 0, version);
            (by, before, version)
        }
    };
    if ctx.core.active {
        // Under active replication the key is a counter: concurrent
        // increments on other nodes add up (keyspace/merge.rs).
        let facts = ctx.merge_facts();
        l.count_increment(key, before, Incr::Int(by.into()), version, facts);
        ctx.mark_merged(key);
    }
    ctx.propagate_args(version, &args);
    ctx.notify(super::events::class::STRING, "incrby", key);
    ctx.out.int(n);
    Ok(())
}

fn incrbyfloat(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let incr = longdouble::F80::parse(args.get(2)).ok_or(CmdError::NotFloat)?;
    let active = ctx.core.active;
    let mut l = ctx.open(key);
    let (cur, prev, base) = match l.get_str(key)? {
        Some(e) => {
            let s = str_of(&e.value);
            let v = match s.as_int() {
                Some(n) => Some(longdouble::F80::from_i64(n)),
                None => s.with_bytes(longdouble::F80::parse),
            };
            // The counter's base, read only where counters are kept.
            let base = active.then(|| Base::of(Some(&e.value)));
            (v.ok_or(CmdError::NotFloat)?, Some(e.version), base)
        }
        None => (longdouble::F80::ZERO, None, Some(Base::Absent)),
    };
    let sum = cur.add(&incr);
    if !sum.is_finite() {
        return Err(CmdError::err("increment would produce NaN or Infinity"));
    }
    let mut text = sum.format_human();
    let val = StrValue::embedded(text.as_bytes());
    let before = base
        .filter(|_| active)
        .map(|b| (prev.unwrap_or_else(|| l.absent_version(key)), b));
    let version = match prev {
        Some(p) => {
            let version = ctx.version_after(p);
            let e = l.entry(key).expect("checked above");
            super::access::set_str_keep_ttl(e, val, version);
            version
        }
        None => {
            let version = ctx.new_version();
            l.put(key, Value::Str(val), 0, version);
            version
        }
    };
    // A float counter (keyspace/merge/mod.rs): the key holds its sum. A
    // float not printed as INCRBYFLOAT prints it ("1.50") is no base: the
    // write is then a plain reset, as a SET.
    if let Some(before) = before.filter(|b| b.1 != Base::Other) {
        let facts = ctx.merge_facts();
        l.count_increment(key, before, Incr::Float(incr), version, facts);
        ctx.mark_merged(key);
        if let Some(t) =
            (l.counted(key, None, version).and_then(|m| m.text())).filter(|t| *t != text)
        {
            let e = l.entry(key).expect("written above");
            super::access::set_str_keep_ttl(e, StrValue::embedded(t.as_bytes()), version);
            text = t;
        }
    }
    ctx.propagate(version, &[b"SET", key, text.as_bytes(), b"KEEPTTL"]);
    ctx.notify(super::events::class::STRING, "incrbyfloat", key);
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

fn getrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut start = arg_i64(args.get(2))?;
    let mut end = arg_i64(args.get(3))?;
    let mut l = ctx.open(key);
    let Some(e) = l.get_str(key)? else {
        ctx.read_hit(key, false);
        ctx.out.bulk(b"");
        return Ok(());
    };
    ctx.read_hit(key, true);
    str_of(&e.value).with_bytes(|s| {
        let len = s.len() as i64;
        if start < 0 && end < 0 && start > end {
            return ctx.out.bulk(b"");
        }
        if start < 0 {
            start = (len + start).max(0);
        }
        if end < 0 {
            end = (len + end).max(0);
        }
        end = end.min(len - 1);
        if start > end || len == 0 {
            ctx.out.bulk(b"");
        } else {
            ctx.out.bulk(&s[start as usize..=end as usize]);
        }
    });
    Ok(())
}

fn setrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, val) = (args.get(1), args.get(3));
    let offset = arg_i64(args.get(2))?;
    if offset < 0 {
        return Err(CmdError::err("offset is out of range"));
    }
    let offset = offset as u64;
    let mut l = ctx.open(key);
    let argv: Vec<&[u8]> = args.iter().collect();
    let total = match l.get_str(key)? {
        None if val.is_empty() => 0,
        None => {
            check_len(ctx, offset, val.len() as u64)?;
            // Sized once, as Redis's createObject of offset+len: growing a
            // zeroed prefix by the value doubled its allocation.
            let mut data = Vec::with_capacity(offset as usize + val.len());
            data.resize(offset as usize, 0);
            data.extend_from_slice(val);
            let total = data.len();
            let version = ctx.new_version();
            l.put(key, Value::Str(StrValue::raw(data)), 0, version);
            ctx.note_reset(&mut l, key, version);
            ctx.propagate(version, &argv);
            ctx.notify(super::events::class::STRING, "setrange", key);
            total
        }
        Some(e) => {
            let s = str_of_mut(&mut e.value);
            if val.is_empty() {
                s.len()
            } else {
                check_len(ctx, offset, val.len() as u64)?;
                let data = s.make_raw();
                let (off, end) = (offset as usize, offset as usize + val.len());
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[off..end].copy_from_slice(val);
                let total = data.len();
                e.version = ctx.version_after(e.version);
                let version = e.version;
                ctx.note_reset(&mut l, key, version);
                ctx.propagate(version, &argv);
                ctx.notify(super::events::class::STRING, "setrange", key);
                total
            }
        }
    };
    ctx.out.int(total as i64);
    Ok(())
}

/// Parsed LCS options.
struct LcsOpts {
    idx: bool,
    len: bool,
    with_len: bool,
    min_len: u64,
}

fn parse_lcs(args: Args) -> Result<LcsOpts, CmdError> {
    let mut o = LcsOpts {
        idx: false,
        len: false,
        with_len: false,
        min_len: 0,
    };
    let mut i = 3;
    while i < args.len() {
        let a = args.get(i);
        if eq_ic(a, "IDX") {
            o.idx = true;
        } else if eq_ic(a, "LEN") {
            o.len = true;
        } else if eq_ic(a, "WITHMATCHLEN") {
            o.with_len = true;
        } else if eq_ic(a, "MINMATCHLEN") && i + 1 < args.len() {
            o.min_len = arg_i64(args.get(i + 1))?.max(0) as u64;
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if o.idx && o.len {
        return Err(CmdError::err(
            "If you want both the length and indexes, please just use IDX.",
        ));
    }
    Ok(o)
}

fn lcs(ctx: &mut Ctx, args: Args) -> CmdResult {
    let o = parse_lcs(args)?;
    let (ka, kb) = (args.get(1), args.get(2));
    let (a, b) = {
        let mut l = ctx.open_many([ka, kb]);
        let mut read = |k: &[u8]| match l.entry(k) {
            None => Ok(vec![]),
            Some(e) => match &e.value {
                Value::Str(s) => Ok(s.to_vec()),
                _ => Err(CmdError::err(
                    "The specified keys must contain string values",
                )),
            },
        };
        (read(ka)?, read(kb)?)
    };
    if a.len() as u64 >= u32::MAX as u64 - 1 || b.len() as u64 >= u32::MAX as u64 - 1 {
        return Err(CmdError::err("String too long for LCS"));
    }
    let cells = (a.len() as u64 + 1) * (b.len() as u64 + 1);
    if cells * 4 > ctx.core.hot.proto_max_bulk_len.load(Relaxed) as u64 {
        return Err(CmdError::err(
            "Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let table = lcs_table(&a, &b);
    lcs_reply(ctx, &o, &a, &b, &table);
    Ok(())
}

/// The dynamic-programming table: `t[i*(blen+1)+j]` = LCS length of a[..i], b[..j].
fn lcs_table(a: &[u8], b: &[u8]) -> Vec<u32> {
    let w = b.len() + 1;
    let mut t = vec![0u32; (a.len() + 1) * w];
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            t[i * w + j] = if a[i - 1] == b[j - 1] {
                t[(i - 1) * w + j - 1] + 1
            } else {
                t[(i - 1) * w + j].max(t[i * w + j - 1])
            };
        }
    }
    t
}

/// Walks the table back from the end as Redis does, collecting the LCS and
/// the matching ranges ((a_start, a_end), (b_start, b_end), len).
fn lcs_walk(a: &[u8], b: &[u8], t: &[u32]) -> (Vec<u8>, Vec<[u64; 5]>) {
    let w = b.len() + 1;
    let total = t[a.len() * w + b.len()] as usize;
    let mut out = vec![0u8; total];
    let mut ranges = vec![];
    let (mut i, mut j, mut idx) = (a.len(), b.len(), total);
    let unset = a.len();
    let (mut as_, mut ae, mut bs, mut be) = (unset, 0, 0, 0);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            out[idx - 1] = a[i - 1];
            if as_ == unset {
                (as_, ae, bs, be) = (i - 1, i - 1, j - 1, j - 1);
            } else if as_ == i && bs == j {
                as_ -= 1;
                bs -= 1;
            } else {
                emit = true;
            }
            if as_ == 0 || bs == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if t[(i - 1) * w + j] > t[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            if as_ != unset {
                emit = true;
            }
        }
        if emit {
            let mlen = (ae - as_ + 1) as u64;
            ranges.push([as_ as u64, ae as u64, bs as u64, be as u64, mlen]);
            as_ = unset;
        }
    }
    (out, ranges)
}

fn lcs_reply(ctx: &mut Ctx, o: &LcsOpts, a: &[u8], b: &[u8], t: &[u32]) {
    let total = t[a.len() * (b.len() + 1) + b.len()];
    if o.len && !o.idx {
        ctx.out.int(total as i64);
        return;
    }
    let (s, ranges) = lcs_walk(a, b, t);
    if !o.idx {
        ctx.out.bulk(&s);
        return;
    }
    let shown: Vec<_> = ranges
        .iter()
        .filter(|r| o.min_len == 0 || r[4] >= o.min_len)
        .collect();
    ctx.out.map(2);
    ctx.out.bulk(b"matches");
    ctx.out.array(shown.len());
    for r in shown {
        ctx.out.array(2 + o.with_len as usize);
        ctx.out.array(2);
        ctx.out.int(r[0] as i64);
        ctx.out.int(r[1] as i64);
        ctx.out.array(2);
        ctx.out.int(r[2] as i64);
        ctx.out.int(r[3] as i64);
        if o.with_len {
            ctx.out.int(r[4] as i64);
        }
    }
    ctx.out.bulk(b"len");
    ctx.out.int(total as i64);
}

/// SET overwrites its key unless GET also reads it (COMMAND GETKEYSANDFLAGS).
fn set_key_flags(args: Args, _pos: usize) -> Option<&'static [&'static str]> {
    let get = args.iter().skip(3).any(|a| eq_ic(a, "get"));
    Some(if get {
        &["RW", "access", "update"]
    } else {
        &["OW", "update"]
    })
}

#[cfg(test)]
mod tests {
    //! The effect records of string and bitmap writes replay to an identical
    //! keyspace (values, encodings, expiries and versions).
    use std::sync::Arc;

    use crate::commands::{replay, Ctx};
    use crate::config::Config;
    use crate::core::client::ClientState;
    use crate::core::Core;
    use crate::effects::Recorder;
    use crate::keyspace::hlc::{unix_ms, Hlc};
    use crate::keyspace::SHARDS;
    use crate::protocol::{Args, ReplyBuf};
    use crate::server::Server;

    fn run(srv: &Arc<Server>, clock: &mut Hlc, argv: &[&str]) -> Vec<u8> {
        let stats = srv.new_worker_stats();
        let flat: Vec<u8> = argv.concat().into_bytes();
        let mut off = 0;
        let spans: Vec<_> = argv
            .iter()
            .map(|a| {
                off += a.len();
                off - a.len()..off
            })
            .collect();
        let args = Args::new(&flat, &spans);
        let cmd = srv.commands.get(srv.commands.lookup(args.get(0)).unwrap());
        let (mut client, mut out) = (ClientState::new(1), ReplyBuf::new(2));
        let mut ctx = Ctx {
            core: srv,
            admin: srv,
            client: &mut client,
            out: &mut out,
            clock,
            stats: &stats,
            now_ms: unix_ms(),
            replay_version: None,
            sent: None,
            active: None,
        };
        (cmd.handler)(&mut ctx, args).unwrap();
        out.buf
    }

    fn dump(srv: &Core) -> Vec<String> {
        let mut v: Vec<String> = (0..SHARDS)
            .flat_map(|i| {
                let shard = srv.keyspace.db(0).lock(i);
                shard
                    .iter()
                    .map(|e| {
                        let enc = e.value.encoding();
                        format!(
                            "{:?}={:?}/{enc}/{}/{}",
                            e.key,
                            e.value,
                            e.expire_at(),
                            e.version
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn effects_replay_to_the_same_keyspace() {
        let master = Server::new(Config::default());
        let rec = Arc::new(Recorder::default());
        master.effects.subscribe(rec.clone());
        let mut clock = Hlc::new(1);
        let script: &[&[&str]] = &[
            &["SET", "a", "1", "EX", "100"],
            &["INCR", "a"],
            &["INCRBYFLOAT", "a", "1.1"],
            &["SETEX", "b", "50", "x"],
            &["APPEND", "b", "yz"],
            &["SETRANGE", "c", "3", "q"],
            &["MSET", "d", "1", "e", "2"],
            &["MSETNX", "h", "1", "i", "2"],
            &["SETNX", "h", "9"],
            &["GETSET", "e", "3"],
            &["SETBIT", "f", "10", "1"],
            &["BITFIELD", "f", "INCRBY", "i8", "0", "5"],
            &["BITOP", "OR", "g", "f", "b"],
            &["DECRBY", "e", "7"],
        ];
        for argv in script {
            run(&master, &mut clock, argv);
        }
        let replica = Server::new(Config::default());
        let stats = replica.new_worker_stats();
        let mut rclock = Hlc::new(2);
        for e in rec.0.lock().iter() {
            replay(&replica, &mut rclock, &stats, e).unwrap();
        }
        assert_eq!(dump(&master), dump(&replica));
        let argvs = records(&rec);
        assert!(argvs.iter().any(|a| a == "SETa3.1KEEPTTL"), "{argvs:?}");
        assert!(
            argvs.iter().any(|a| a.starts_with("SETbxPXAT")),
            "{argvs:?}"
        );
    }

    fn records(rec: &Recorder) -> Vec<String> {
        let recs = rec.0.lock();
        recs.iter()
            .map(|e| String::from_utf8_lossy(&e.argv.concat()).into_owned())
            .collect()
    }

    /// Commands whose effects belong to other families (PEXPIREAT, PERSIST,
    /// DEL) are checked by their records only.
    #[test]
    fn getex_and_getdel_propagate_as_redis() {
        let srv = Server::new(Config::default());
        let rec = Arc::new(Recorder::default());
        srv.effects.subscribe(rec.clone());
        let mut clock = Hlc::new(1);
        run(&srv, &mut clock, &["SET", "k", "v"]);
        run(&srv, &mut clock, &["GETEX", "k", "EX", "100"]);
        run(&srv, &mut clock, &["GETEX", "k", "PERSIST"]);
        run(&srv, &mut clock, &["GETEX", "k", "PERSIST"]);
        run(&srv, &mut clock, &["GETEX", "k"]);
        run(&srv, &mut clock, &["GETDEL", "k"]);
        run(&srv, &mut clock, &["GETDEL", "k"]);
        let argvs = records(&rec);
        assert_eq!(argvs.len(), 4, "{argvs:?}");
        assert!(argvs[1].starts_with("PEXPIREATk"), "{argvs:?}");
        assert_eq!(argvs[2..], ["PERSISTk", "DELk"]);
    }

    fn encoding(srv: &Core, key: &str) -> &'static str {
        let slot = srv.keyspace.slot(key.as_bytes());
        let shard = srv.keyspace.db(0).lock(slot.shard);
        shard
            .get_raw(slot.hash, key.as_bytes())
            .unwrap()
            .value
            .encoding()
    }

    /// OBJECT ENCODING answers as Redis after each kind of write.
    #[test]
    fn encodings_follow_redis() {
        let srv = Server::new(Config::default());
        let mut clock = Hlc::new(1);
        let long = "x".repeat(45);
        let cases: &[(&[&str], &str, &str)] = &[
            (&["SET", "k", "123"], "k", "int"),
            (&["INCR", "k"], "k", "int"),
            (&["SET", "k", "abc"], "k", "embstr"),
            (&["SET", "k", &long], "k", "raw"),
            (&["APPEND", "a", "12"], "a", "int"),
            (&["APPEND", "a", "3"], "a", "raw"),
            (&["INCR", "a"], "a", "int"),
            (&["SETRANGE", "r", "0", "1"], "r", "raw"),
            (&["INCRBYFLOAT", "f", "3"], "f", "embstr"),
            (&["MSET", "m", "-5", "n", "05"], "m", "int"),
            (&["GETSET", "n", "x"], "n", "embstr"),
            (&["SETBIT", "b", "1", "1"], "b", "raw"),
            (&["SET", "s", "ab"], "s", "embstr"),
            (&["SETBIT", "s", "0", "0"], "s", "raw"),
            (&["BITOP", "NOT", "o", "s"], "o", "raw"),
        ];
        for (argv, key, enc) in cases {
            run(&srv, &mut clock, argv);
            assert_eq!(encoding(&srv, key), *enc, "{argv:?}");
        }
    }
}
