//! String commands (Redis's t_string.c).

use super::util::{arg_i64, eq_ic};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::{StrValue, Value};
use crate::protocol::Args;

pub static COMMANDS: &[Command] = &[
    Command::new("get", 2, READONLY | FAST, get).keys(1, 1, 1).acl("read string fast").doc("string", "1.0.0", "Returns the string value of a key."),
    Command::new("set", -3, WRITE | DENYOOM, set)
        .keys(1, 1, 1)
        .acl("write string slow")
        .doc("string", "1.0.0", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist."),
];

fn get(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    match l.get_str(key)? {
        Some(e) => {
            let Value::Str(s) = &e.value;
            s.with_bytes(|b| ctx.out.bulk(b));
            ctx.stats.hit(true);
        }
        None => {
            ctx.out.null();
            ctx.stats.hit(false);
        }
    }
    Ok(())
}

/// When a write's key must (not) exist.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cond {
    Always,
    Nx,
    Xx,
}

/// A parsed expiry option.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExpireOpt {
    None,
    KeepTtl,
    /// Absolute unix ms.
    At(u64),
}

/// Parsed SET options.
struct SetOpts {
    cond: Cond,
    get: bool,
    expire: ExpireOpt,
}

/// Turns EX/PX/EXAT/PXAT `n` into an absolute unix ms, with Redis's checks.
pub fn expire_at_from(unit: &[u8], n: &[u8], now_ms: u64, cmd: &str) -> Result<u64, CmdError> {
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

fn parse_set(args: Args, now_ms: u64) -> Result<SetOpts, CmdError> {
    let mut o = SetOpts {
        cond: Cond::Always,
        get: false,
        expire: ExpireOpt::None,
    };
    let mut i = 3;
    while i < args.len() {
        let a = args.get(i);
        let has_next = i + 1 < args.len();
        if eq_ic(a, "NX") && o.cond == Cond::Always {
            o.cond = Cond::Nx;
        } else if eq_ic(a, "XX") && o.cond == Cond::Always {
            o.cond = Cond::Xx;
        } else if eq_ic(a, "GET") {
            o.get = true;
        } else if eq_ic(a, "KEEPTTL") && o.expire == ExpireOpt::None {
            o.expire = ExpireOpt::KeepTtl;
        } else if (eq_ic(a, "EX") || eq_ic(a, "PX") || eq_ic(a, "EXAT") || eq_ic(a, "PXAT"))
            && o.expire == ExpireOpt::None
            && has_next
        {
            o.expire = ExpireOpt::At(expire_at_from(a, args.get(i + 1), now_ms, "set")?);
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok(o)
}

fn set(ctx: &mut Ctx, args: Args) -> CmdResult {
    let opts = parse_set(args, ctx.now_ms)?;
    let (key, val) = (args.get(1), args.get(2));
    let mut l = ctx.open(key);
    let old = l.entry(key);
    let exists = old.is_some();
    let mut old_ttl = 0;
    let mut prev_version = 0;
    if let Some(e) = old {
        old_ttl = e.expire_at;
        prev_version = e.version;
        if opts.get {
            match &e.value {
                Value::Str(s) => s.with_bytes(|b| ctx.out.bulk(b)),
                #[allow(unreachable_patterns)]
                _ => return Err(CmdError::WrongType),
            }
        }
    } else if opts.get {
        ctx.out.null();
    }
    let blocked = match opts.cond {
        Cond::Nx => exists,
        Cond::Xx => !exists,
        Cond::Always => false,
    };
    if blocked {
        if !opts.get {
            ctx.out.null();
        }
        return Ok(());
    }
    let expire_at = match opts.expire {
        ExpireOpt::None => 0,
        ExpireOpt::KeepTtl => old_ttl,
        ExpireOpt::At(at) => at,
    };
    let version = ctx.version_after(prev_version);
    if expire_at != 0 && expire_at <= ctx.now_ms && ctx.replay_version.is_none() {
        // Already expired (EXAT/PXAT in the past): the key is deleted.
        if l.remove(key).is_some() || exists {
            ctx.propagate(version, &[b"DEL", key]);
        }
    } else {
        l.put(
            key,
            Value::Str(StrValue::from_bytes(val)),
            expire_at,
            version,
        );
        propagate_set(ctx, version, key, val, opts.expire);
    }
    if !opts.get {
        ctx.out.ok();
    }
    Ok(())
}

/// Propagates a SET with its expiry made absolute.
pub fn propagate_set(ctx: &mut Ctx, version: u64, key: &[u8], val: &[u8], expire: ExpireOpt) {
    match expire {
        ExpireOpt::None => ctx.propagate(version, &[b"SET", key, val]),
        ExpireOpt::KeepTtl => ctx.propagate(version, &[b"SET", key, val, b"KEEPTTL"]),
        ExpireOpt::At(at) => {
            let at = at.to_string();
            ctx.propagate(version, &[b"SET", key, val, b"PXAT", at.as_bytes()])
        }
    }
}
