//! Expiry commands (Redis's expire.c): EXPIRE PEXPIRE EXPIREAT PEXPIREAT
//! (with NX XX GT LT), TTL PTTL EXPIRETIME PEXPIRETIME PERSIST.
//!
//! Every form is turned into an absolute unix-ms deadline with Redis's
//! overflow rules before any data is touched, and propagated as
//! `PEXPIREAT key ms` (without the condition flags: it is only propagated when
//! it applied), so a replica or AOF replay sets the very same deadline. A
//! deadline already in the past deletes the key and propagates DEL, except
//! while replaying an effect stream: then the deadline is stored as is and the
//! stream's own DEL removes the key, as on a Redis replica. Setting or
//! clearing a TTL is a write: the key gets a new version.

use super::access::Locked;
use super::util::{arg_i64, eq_ic, lossy};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::protocol::Args;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "generic", acl = "keyspace"),
    cmd("expire", -3, WRITE | FAST, expire)
        .doc("1.0.0", "Sets the expiration time of a key in seconds.")
        .keys(1, 1, 1),
    cmd("pexpire", -3, WRITE | FAST, pexpire)
        .doc("2.6.0", "Sets the expiration time of a key in milliseconds.")
        .keys(1, 1, 1),
    cmd("expireat", -3, WRITE | FAST, expireat)
        .doc("1.2.0", "Sets the expiration time of a key to a Unix timestamp.")
        .keys(1, 1, 1),
    cmd("pexpireat", -3, WRITE | FAST, pexpireat)
        .doc("2.6.0", "Sets the expiration time of a key to a Unix milliseconds timestamp.")
        .keys(1, 1, 1),
    cmd("ttl", -2, READONLY | FAST, ttl)
        .doc("1.0.0", "Returns the expiration time in seconds of a key.")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output"]),
    cmd("pttl", -2, READONLY | FAST, pttl)
        .doc("2.6.0", "Returns the expiration time in milliseconds of a key.")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output"]),
    cmd("expiretime", 2, READONLY | FAST, expiretime)
        .doc("7.0.0", "Returns the expiration time of a key as a Unix timestamp.")
        .keys(1, 1, 1),
    cmd("pexpiretime", 2, READONLY | FAST, pexpiretime)
        .doc("7.0.0", "Returns the expiration time of a key as a Unix milliseconds timestamp.")
        .keys(1, 1, 1),
    cmd("persist", -2, WRITE | FAST, persist)
        .doc("2.2.0", "Removes the expiration time of a key.")
        .keys(1, 1, 1),
};

/// EXPIRE's condition flags.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Cond {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

impl Cond {
    /// Whether the new deadline `when` may replace `current` (0 = none).
    fn allows(self, current: u64, when: i64) -> bool {
        let has = current != 0;
        !(self.nx && has
            || self.xx && !has
            || self.gt && (!has || when <= current as i64)
            || self.lt && has && when >= current as i64)
    }
}

fn parse_cond(args: Args) -> Result<Cond, CmdError> {
    let mut c = Cond::default();
    for a in args.iter().skip(3) {
        if eq_ic(a, "NX") {
            c.nx = true;
        } else if eq_ic(a, "XX") {
            c.xx = true;
        } else if eq_ic(a, "GT") {
            c.gt = true;
        } else if eq_ic(a, "LT") {
            c.lt = true;
        } else {
            return Err(CmdError::err(format!("Unsupported option {}", lossy(a))));
        }
    }
    if c.nx && (c.xx || c.gt || c.lt) {
        return Err(CmdError::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if c.gt && c.lt {
        return Err(CmdError::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    Ok(c)
}

/// The absolute deadline in unix ms, with Redis's overflow checks.
fn deadline(n: i64, seconds: bool, base_ms: i64, name: &str) -> Result<i64, CmdError> {
    let invalid = || CmdError::err(format!("invalid expire time in '{name}' command"));
    let ms = if seconds {
        n.checked_mul(1000).ok_or_else(invalid)?
    } else {
        n
    };
    ms.checked_add(base_ms).ok_or_else(invalid)
}

fn expire(ctx: &mut Ctx, args: Args) -> CmdResult {
    expire_generic(ctx, args, true, true, "expire")
}

fn pexpire(ctx: &mut Ctx, args: Args) -> CmdResult {
    expire_generic(ctx, args, false, true, "pexpire")
}

fn expireat(ctx: &mut Ctx, args: Args) -> CmdResult {
    expire_generic(ctx, args, true, false, "expireat")
}

fn pexpireat(ctx: &mut Ctx, args: Args) -> CmdResult {
    expire_generic(ctx, args, false, false, "pexpireat")
}

fn expire_generic(
    ctx: &mut Ctx,
    args: Args,
    seconds: bool,
    relative: bool,
    name: &str,
) -> CmdResult {
    let cond = parse_cond(args)?;
    let n = arg_i64(args.get(2))?;
    let base = if relative { ctx.now_ms as i64 } else { 0 };
    let when = deadline(n, seconds, base, name)?;
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.entry(key) else {
        drop(l);
        ctx.out.int(0);
        return Ok(());
    };
    let (current, prev_version) = (e.expire_at(), e.version);
    if !cond.allows(current, when) {
        drop(l);
        ctx.out.int(0);
        return Ok(());
    }
    let v = ctx.version_after(prev_version);
    if when <= ctx.now_ms as i64 && ctx.replay_version.is_none() {
        l.remove(key);
        let del = ctx.expired_del_name();
        ctx.propagate(v, &[del, key]);
        ctx.notify(super::events::class::GENERIC, "del", key);
    } else {
        // A replayed deadline may lie in the past; 0 would mean "persistent".
        let at = when.max(1) as u64;
        l.set_expire(key, at);
        l.set_version(key, v);
        note_ttl(ctx, &mut l, key, v, (current, at));
        let at = at.to_string();
        ctx.propagate(v, &[b"PEXPIREAT", key, at.as_bytes()]);
        ctx.notify(super::events::class::GENERIC, "expire", key);
    }
    drop(l);
    ctx.out.int(1);
    Ok(())
}

/// Active replication, after a TTL write stamped `stamp` moved `key`'s
/// expiry from `before` to `at` (0: none): a set's, hash's or sorted set's
/// TTL register takes the write's dot, and the write's record carries its
/// fact (`Shard::note_ttl`; keyspace/merge/ttl.rs). Not while a link
/// applies a peer's write (it keeps the state itself); where no record
/// wants the fact, the state follows all the same.
fn note_ttl(ctx: &mut Ctx, l: &mut Locked, key: &[u8], stamp: u64, expiries: (u64, u64)) {
    ctx.note_fact(key, |prev, facts| {
        l.note_ttl(key, (prev, stamp), expiries, facts);
    });
}

/// TTL family: the key's deadline, relative or absolute, in s or ms.
fn ttl_generic(ctx: &mut Ctx, args: Args, ms: bool, absolute: bool) -> CmdResult {
    let key = args.get(1);
    let prev = ctx.client.no_touch;
    ctx.client.no_touch = true;
    let mut l = ctx.open(key);
    ctx.client.no_touch = prev;
    let at = l.entry(key).map(|e| e.expire_at());
    drop(l);
    ctx.read_hit(key, at.is_some());
    let reply = match at {
        None => -2,
        Some(0) => -1,
        Some(at) => {
            let t = if absolute {
                at as i64
            } else {
                (at as i64 - ctx.now_ms as i64).max(0)
            };
            if ms {
                t
            } else {
                (t + 500) / 1000
            }
        }
    };
    ctx.out.int(reply);
    Ok(())
}

/// TTL key [member]: a member's TTL is KeyDB's (`member_expire.rs`).
fn ttl(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() > 2 {
        return super::member_expire::member_ttl(ctx, args, false);
    }
    ttl_generic(ctx, args, false, false)
}

fn pttl(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() > 2 {
        return super::member_expire::member_ttl(ctx, args, true);
    }
    ttl_generic(ctx, args, true, false)
}

fn expiretime(ctx: &mut Ctx, args: Args) -> CmdResult {
    ttl_generic(ctx, args, false, true)
}

fn pexpiretime(ctx: &mut Ctx, args: Args) -> CmdResult {
    ttl_generic(ctx, args, true, true)
}

fn persist(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() > 2 {
        return super::member_expire::persist_member(ctx, args);
    }
    let key = args.get(1);
    let mut l = ctx.open(key);
    let state = l.entry(key).map(|e| (e.expire_at(), e.version));
    let cleared = match state {
        Some((at, version)) if at != 0 => {
            let v = ctx.version_after(version);
            l.set_expire(key, 0);
            l.set_version(key, v);
            note_ttl(ctx, &mut l, key, v, (at, 0));
            ctx.propagate(v, &[b"PERSIST", key]);
            ctx.notify(super::events::class::GENERIC, "persist", key);
            true
        }
        _ => false,
    };
    drop(l);
    ctx.out.int(i64::from(cleared));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions() {
        let gt = Cond {
            gt: true,
            ..Cond::default()
        };
        let lt = Cond {
            lt: true,
            ..Cond::default()
        };
        let nx = Cond {
            nx: true,
            ..Cond::default()
        };
        assert!(!gt.allows(0, 100), "GT never applies to a persistent key");
        assert!(gt.allows(50, 100) && !gt.allows(100, 100));
        assert!(lt.allows(0, 100), "LT always applies to a persistent key");
        assert!(lt.allows(150, 100) && !lt.allows(100, 100));
        assert!(nx.allows(0, 1) && !nx.allows(5, 1));
        assert!(Cond::default().allows(5, 1));
    }

    #[test]
    fn deadlines_overflow_like_redis() {
        assert_eq!(deadline(10, true, 1000, "expire"), Ok(11_000));
        assert!(deadline(9_223_372_036_854_775, true, 1_000, "expire").is_err());
        assert!(deadline(i64::MIN, true, 0, "expireat").is_err());
        assert_eq!(deadline(i64::MIN, false, 5, "pexpire"), Ok(i64::MIN + 5));
        assert!(deadline(i64::MAX, false, 1, "pexpire").is_err());
    }
}
