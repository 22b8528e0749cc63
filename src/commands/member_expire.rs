//! Member expiry commands, KeyDB's spelling (its expire.cpp, read for
//! behaviour): EXPIREMEMBER key member seconds [s|ms], EXPIREMEMBERAT key
//! member unix-seconds, PEXPIREMEMBERAT key member unix-ms, and TTL / PTTL
//! with a member (`expire.rs` hands those here). The TTLs themselves live
//! in the shard (`keyspace/member_ttl.rs`, docs/MEMBER-EXPIRY.md).
//!
//! Replies as KeyDB's: 0 when the key or the member is missing, 1 when the
//! TTL was set, `ERR object type is unsupported` on a list or string,
//! `ERR Invalid number of arguments` past 5 arguments, `ERR Invalid unit
//! arg` for a unit other than s/ms (case-insensitive). A deadline in the
//! past is stored as given: the member goes at the next access or cycle.
//! Every form propagates as `PEXPIREMEMBERAT key member <unix ms>`, so a
//! replica and the AOF store the same deadline (a Redis replica rejects
//! that command and keeps the member until the HDEL / SREM / ZREM of its
//! expiry arrives: docs/DECISIONS.md 119).
//!
//! `PERSIST key member` (KeyDB's; `expire.rs` hands it here) clears one.
//! Under active replication a member's TTL is part of the key's merge
//! state (`keyspace/merge/member_ttls.rs`, docs/DECISIONS.md 305-309), and
//! each of these writes (HEXPIRE's and HPERSIST's too) carries its fact
//! ([`note_member_ttls`], DECISIONS 326).

use super::access::Locked;
use super::util::arg_i64;
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::member_ttl::{has_member, member_type};
use crate::protocol::Args;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "generic", acl = "keyspace"),
    cmd("expiremember", -4, WRITE | FAST, expiremember)
        .doc("6.0.0", "Sets the expiration time of a member of a set, hash or sorted set (KeyDB).")
        .keys(1, 1, 1),
    cmd("expirememberat", 4, WRITE | FAST, expirememberat)
        .doc("6.0.0", "Sets the expiration time of a member to a Unix timestamp (KeyDB).")
        .keys(1, 1, 1),
    cmd("pexpirememberat", 4, WRITE | FAST, pexpirememberat)
        .doc("6.0.0", "Sets the expiration time of a member to a Unix milliseconds timestamp (KeyDB).")
        .keys(1, 1, 1),
};

fn expiremember(ctx: &mut Ctx, args: Args) -> CmdResult {
    let n = arg_i64(args.get(3))?;
    if args.len() > 5 {
        return Err(CmdError::err("Invalid number of arguments"));
    }
    let ms = match args.len() {
        5 => parse_unit(args.get(4))?,
        _ => false,
    };
    set_member_deadline(ctx, args, n, ms, ctx.now_ms as i64)
}

fn expirememberat(ctx: &mut Ctx, args: Args) -> CmdResult {
    let n = arg_i64(args.get(3))?;
    set_member_deadline(ctx, args, n, false, 0)
}

fn pexpirememberat(ctx: &mut Ctx, args: Args) -> CmdResult {
    let n = arg_i64(args.get(3))?;
    set_member_deadline(ctx, args, n, true, 0)
}

/// KeyDB's unit argument: true for milliseconds.
fn parse_unit(a: &[u8]) -> Result<bool, CmdError> {
    if a.eq_ignore_ascii_case(b"s") {
        Ok(false)
    } else if a.eq_ignore_ascii_case(b"ms") {
        Ok(true)
    } else {
        Err(CmdError::err("Invalid unit arg"))
    }
}

/// KeyDB's expireMemberCore: `n` seconds (or ms) after `base_ms`.
fn set_member_deadline(ctx: &mut Ctx, args: Args, n: i64, ms: bool, base_ms: i64) -> CmdResult {
    // KeyDB's arithmetic wraps; ours saturates (a deadline past i64 is
    // "never" either way), and a deadline at or before the epoch is due.
    let when = (if ms { n } else { n.saturating_mul(1000) }).saturating_add(base_ms);
    let at = when.max(1) as u64;
    let (key, member) = (args.get(1), args.get(2));
    let mut l = ctx.open(key);
    let Some(e) = l.entry(key) else {
        drop(l);
        ctx.out.int(0);
        return Ok(());
    };
    if !member_type(&e.value) {
        return Err(CmdError::err("object type is unsupported"));
    }
    if !has_member(&e.value, member) {
        drop(l);
        ctx.out.int(0);
        return Ok(());
    }
    let v = ctx.version_after(e.version);
    e.version = v;
    let before = l.member_ttl(key, member).unwrap_or(0);
    l.set_member_ttl(key, member, at);
    note_member_ttls(ctx, &mut l, key, v, &[(2, member, before, at)]);
    let at = at.to_string();
    ctx.propagate(v, &[b"PEXPIREMEMBERAT", key, member, at.as_bytes()]);
    drop(l);
    ctx.out.int(1);
    Ok(())
}

/// PERSIST key member (KeyDB's persistCommand with a subkey): 1 when the
/// member's TTL was removed, else 0 (no key, no member, no TTL);
/// `ERR Invalid arguments` past 3 arguments. Propagates as itself.
pub(crate) fn persist_member(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() > 3 {
        return Err(CmdError::err("Invalid arguments"));
    }
    let (key, member) = (args.get(1), args.get(2));
    let mut l = ctx.open(key);
    let Some(version) = l.entry(key).map(|e| e.version) else {
        drop(l);
        ctx.out.int(0);
        return Ok(());
    };
    let before = l.member_ttl(key, member).unwrap_or(0);
    let cleared = l.clear_member_ttl(key, member);
    if cleared {
        let v = ctx.version_after(version);
        l.set_version(key, v);
        note_member_ttls(ctx, &mut l, key, v, &[(2, member, before, 0)]);
        ctx.propagate(v, &[b"PERSIST", key, member]);
        ctx.notify(super::events::class::GENERIC, "persist", key);
    }
    drop(l);
    ctx.out.int(i64::from(cleared));
    Ok(())
}

/// Active replication, after a member TTL write stamped `stamp` moved each
/// member of `writes` (argument index in its record, member, deadline
/// before, deadline now; 0: none) in the side map: the members' TTL
/// registers take the write's dot, and its record carries the fact a peer
/// applies with no round trip (`Shard::note_member_ttls`). Not while a link
/// applies a peer's write (it keeps the state itself); where no record
/// wants the fact, the state follows all the same.
pub(crate) fn note_member_ttls(
    ctx: &mut Ctx,
    l: &mut Locked,
    key: &[u8],
    stamp: u64,
    writes: &[(u32, &[u8], u64, u64)],
) {
    ctx.note_fact(key, |prev, facts| {
        l.note_member_ttls(key, (prev, stamp), writes, facts);
    });
}

/// TTL / PTTL key member (KeyDB's ttlGenericCommand with a subkey): -2 no
/// key, -1 the member has no TTL (or is not there), else the time left,
/// at least 0 (seconds rounded to nearest).
pub(crate) fn member_ttl(ctx: &mut Ctx, args: Args, ms: bool) -> CmdResult {
    let (key, member) = (args.get(1), args.get(2));
    let prev = ctx.client.no_touch;
    ctx.client.no_touch = true;
    let mut l = ctx.open(key);
    ctx.client.no_touch = prev;
    let found = l.entry(key).is_some();
    let at = found.then(|| l.member_ttl(key, member)).flatten();
    drop(l);
    ctx.read_hit(key, found);
    // KeyDB looks the key up first: -2 for a missing key whatever follows.
    if found && args.len() > 3 {
        return Err(CmdError::err("Invalid arguments"));
    }
    let reply = match (found, at) {
        (false, _) => -2,
        (true, None) => -1,
        (true, Some(at)) => {
            let t = (at as i64 - ctx.now_ms as i64).max(0);
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
