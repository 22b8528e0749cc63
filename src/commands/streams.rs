//! Stream commands (Redis's t_stream.c): XADD XLEN XRANGE XREVRANGE XDEL
//! XTRIM XSETID XREAD (with BLOCK) XINFO, and the command table of the
//! consumer-group commands, whose handlers are in `stream_groups.rs`. The
//! value is `keyspace/stream.rs`.
//!
//! Parsing follows Redis's order and errors (XADD's options, then its ID
//! and fields, then the key; XDEL's IDs before its key). XADD propagates
//! with the ID it gave the entry, and an approximate trim (`~`) as the
//! exact one it came to (`=` and the length or first ID left), as Redis
//! rewrites them, so replicas and the AOF hold the same entries; a
//! replayed trim ignores LIMIT, as Redis obeys its master. A blocked XREAD
//! re-runs with `$` replaced by the IDs it stood for when it blocked.

use std::sync::atomic::Ordering::Relaxed;

use super::blocking::may_block;
use super::keyspec::KeySpec;
use super::stream_groups as g;
use super::util::{arg_i64, eq_ic};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::core::notify::class;
use crate::keyspace::merge;
use crate::keyspace::merge::stream::Told;
use crate::keyspace::stream::{Fields, StreamId, StreamValue, Trim};
use crate::keyspace::{Entry, Value};
use crate::protocol::{parse_i64, Args, ReplyBuf};

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "stream", acl = "stream"),
    cmd("xadd", -5, WRITE | DENYOOM | FAST, xadd)
        .doc("5.0.0", "Appends a new entry to a stream")
        .complexity("O(1) when adding a new entry, O(N) when trimming where N being the number of entries evicted.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "update"])
            .notes("UPDATE instead of INSERT because of the optional trimming feature")])
        .tips(&["nondeterministic_output"]),
    cmd("xlen", 2, READONLY | FAST, xlen)
        .doc("5.0.0", "Return the number of entries in a stream")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"])]),
    cmd("xrange", -4, READONLY, xrange)
        .doc("5.0.0", "Return a range of elements in a stream, with IDs matching the specified IDs interval")
        .complexity("O(N) with N being the number of elements being returned. If N is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1).")
        .keys(1, 1, 1),
    cmd("xrevrange", -4, READONLY, xrevrange)
        .doc("5.0.0", "Return a range of elements in a stream, with IDs matching the specified IDs interval, in reverse order (from greater to smaller IDs) compared to XRANGE")
        .complexity("O(N) with N being the number of elements returned. If N is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1).")
        .keys(1, 1, 1),
    cmd("xdel", -3, WRITE | FAST, xdel)
        .doc("5.0.0", "Removes the specified entries from the stream. Returns the number of items actually deleted, that may be different from the number of IDs passed in case certain IDs do not exist.")
        .complexity("O(1) for each single item to delete in the stream, regardless of the stream size.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])]),
    cmd("xtrim", -4, WRITE, xtrim)
        .doc("5.0.0", "Trims the stream to (approximately if '~' is passed) a certain size")
        .complexity("O(N), with N being the number of evicted entries. Constant times are very small however, since entries are organized in macro nodes containing multiple entries that can be released with a single deallocation.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])])
        .tips(&["nondeterministic_output"]),
    cmd("xsetid", -3, WRITE | DENYOOM | FAST, xsetid)
        .doc("5.0.0", "An internal command for replicating stream values")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "update"])]),
    cmd("xread", -4, READONLY | BLOCKING, xread)
        .doc("5.0.0", "Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller for each stream. Can block.")
        .complexity("For each stream mentioned: O(N) with N being the number of elements being returned, it means that XREAD-ing with a fixed COUNT is O(1). Note that when the BLOCK option is used, XADD will pay O(M) time in order to serve the M clients blocked on the stream getting new data.")
        .keys(0, 0, 0)
        .keys_fn(xread_keys)
        .key_specs(&[KeySpec::keyword("STREAMS", 1, &["RO", "access"]).range(-1, 1, 2)]),
    cmd("xreadgroup", -7, WRITE | BLOCKING, g::xreadgroup)
        .doc("5.0.0", "Return new entries from a stream using a consumer group, or access the history of the pending entries for a given consumer. Can block.")
        .complexity("For each stream mentioned: O(M) with M being the number of elements returned. If M is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1). On the other side when XREADGROUP blocks, XADD will pay the O(N) time in order to serve the N clients blocked on the stream getting new data.")
        .keys(0, 0, 0)
        .keys_fn(xread_keys)
        .key_specs(&[KeySpec::keyword("STREAMS", 4, &["RO", "access"]).range(-1, 1, 2)]),
    cmd("xack", -4, WRITE | FAST, g::xack)
        .doc("5.0.0", "Marks a pending message as correctly processed, effectively removing it from the pending entries list of the consumer group. Return value of the command is the number of messages successfully acknowledged, that is, the IDs we were actually able to resolve in the PEL.")
        .complexity("O(1) for each message ID processed.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "update"])]),
    cmd("xpending", -3, READONLY, g::xpending)
        .doc("5.0.0", "Return information and entries from a stream consumer group pending entries list, that are messages fetched but never acknowledged.")
        .complexity("O(N) with N being the number of elements returned, so asking for a small fixed number of entries per call is O(1). O(M), where M is the total number of entries scanned when used with the IDLE filter. When the command returns just the summary and the list of consumers is small, it runs in O(1) time; otherwise, an additional O(N) time for iterating every consumer.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO", "access"])])
        .tips(&["nondeterministic_output"]),
    cmd("xclaim", -6, WRITE | FAST, g::xclaim)
        .doc("5.0.0", "Changes (or acquires) ownership of a message in a consumer group, as if the message was delivered to the specified consumer.")
        .complexity("O(log N) with N being the number of messages in the PEL of the consumer group.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "update"])])
        .tips(&["nondeterministic_output"]),
    cmd("xautoclaim", -6, WRITE | FAST, g::xautoclaim)
        .doc("6.2.0", "Changes (or acquires) ownership of messages in a consumer group, as if the messages were delivered to the specified consumer.")
        .complexity("O(1) if COUNT is small.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])])
        .tips(&["nondeterministic_output"]),
    container("xgroup", -2, g::xgroup_parent)
        .doc("5.0.0", "A container for consumer groups commands")
        .complexity("Depends on subcommand.")
        .subs(XGROUP_SUBS),
    container("xinfo", -2, xinfo_parent)
        .doc("5.0.0", "A container for stream introspection commands")
        .complexity("Depends on subcommand.")
        .subs(XINFO_SUBS),
};

static XGROUP_SUBS: &[Command] = crate::commands::command_table! {
    family(group = "stream", acl = "stream"),
    cmd("create", -5, WRITE | DENYOOM, g::xgroup_create)
        .doc("5.0.0", "Create a consumer group.")
        .complexity("O(1)")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RW", "insert"])]),
    cmd("setid", -5, WRITE, g::xgroup_setid)
        .doc("5.0.0", "Set a consumer group to an arbitrary last delivered ID value.")
        .complexity("O(1)")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RW", "update"])]),
    cmd("destroy", 4, WRITE, g::xgroup_destroy)
        .doc("5.0.0", "Destroy a consumer group.")
        .complexity("O(N) where N is the number of entries in the group's pending entries list (PEL).")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RW", "delete"])]),
    cmd("createconsumer", 5, WRITE | DENYOOM, g::xgroup_createconsumer)
        .doc("6.2.0", "Create a consumer in a consumer group.")
        .complexity("O(1)")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RW", "insert"])]),
    cmd("delconsumer", 5, WRITE, g::xgroup_delconsumer)
        .doc("5.0.0", "Delete a consumer from a consumer group.")
        .complexity("O(1)")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RW", "delete"])]),
    cmd("help", 2, LOADING | STALE, g::xgroup_help)
        .doc("5.0.0", "Show helpful text about the different subcommands")
        .complexity("O(1)"),
};

static XINFO_SUBS: &[Command] = crate::commands::command_table! {
    family(group = "stream", acl = "stream"),
    cmd("stream", -3, READONLY, xinfo_stream)
        .doc("5.0.0", "Get information about a stream")
        .keys(2, 2, 1),
    cmd("groups", 3, READONLY, xinfo_groups)
        .doc("5.0.0", "List the consumer groups of a stream")
        .keys(2, 2, 1),
    cmd("consumers", 4, READONLY, xinfo_consumers)
        .doc("5.0.0", "List the consumers in a consumer group")
        .keys(2, 2, 1)
        .tips(&["nondeterministic_output"]),
    cmd("help", 2, LOADING | STALE, xinfo_help)
        .doc("5.0.0", "Show helpful text about the different subcommands"),
};

pub(super) fn invalid_id() -> CmdError {
    CmdError::err("Invalid stream ID specified as stream command argument")
}

/// Redis's string2ull: a canonical non-negative integer, or what strtoull
/// takes whole (leading blanks, a '+').
fn parse_u64(a: &[u8]) -> Option<u64> {
    if let Some(n) = parse_i64(a) {
        return u64::try_from(n).ok();
    }
    let s = std::str::from_utf8(a).ok()?.trim_start();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A stream ID argument (streamGenericParseIDOrReply): `-`, `+` (unless
/// `strict`), `ms` (seq `missing`) or `ms-seq`; with `star`, `ms-*` gives
/// seq None.
pub(super) fn parse_id(
    a: &[u8],
    missing: u64,
    strict: bool,
    star: bool,
) -> Result<(StreamId, bool), CmdError> {
    if a.len() > 127 {
        return Err(invalid_id());
    }
    match a {
        b"-" | b"+" if strict => return Err(invalid_id()),
        b"-" => return Ok((StreamId::MIN, true)),
        b"+" => return Ok((StreamId::MAX, true)),
        _ => {}
    }
    let (ms, seq) = match a.iter().position(|&c| c == b'-') {
        Some(d) => (&a[..d], Some(&a[d + 1..])),
        None => (a, None),
    };
    let ms = parse_u64(ms).ok_or_else(invalid_id)?;
    match seq {
        None => Ok((StreamId::new(ms, missing), true)),
        Some(b"*") if star => Ok((StreamId::new(ms, 0), false)),
        Some(s) => Ok((
            StreamId::new(ms, parse_u64(s).ok_or_else(invalid_id)?),
            true,
        )),
    }
}

pub(super) fn strict_id(a: &[u8], missing: u64) -> Result<StreamId, CmdError> {
    parse_id(a, missing, true, false).map(|r| r.0)
}

pub(super) fn stream_of(v: &Value) -> &StreamValue {
    match v {
        Value::Stream(s) => s,
        _ => unreachable!("type checked"),
    }
}

pub(super) fn stream_mut(v: &mut Value) -> &mut StreamValue {
    match v {
        Value::Stream(s) => s,
        _ => unreachable!("type checked"),
    }
}

/// The stream at `key`; WRONGTYPE if it holds another type.
pub(super) fn get_stream<'e>(
    l: &'e mut super::access::Locked,
    key: &[u8],
) -> Result<Option<&'e mut Entry>, CmdError> {
    match l.entry(key) {
        Some(e) if !matches!(e.value, Value::Stream(_)) => Err(CmdError::WrongType),
        found => Ok(found),
    }
}

/// XADD's and XTRIM's trimming options (streamParseAddOrTrimArgsOrReply).
#[derive(Default)]
struct TrimArgs {
    how: Option<Trim>,
    approx: bool,
    limit: usize,
    /// The index of the threshold argument.
    arg: usize,
    nomkstream: bool,
    /// XADD's ID: the ID and whether its seq was given.
    id: Option<(StreamId, bool)>,
}

/// Parses from index 2; returns where XADD's ID is (or the end).
fn parse_trim(ctx: &Ctx, args: Args, xadd: bool) -> Result<(TrimArgs, usize), CmdError> {
    let mut t = TrimArgs::default();
    let mut limit: Option<i64> = None;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let a = args.get(i);
        if xadd && a == b"*" {
            break;
        } else if (eq_ic(a, "maxlen") || eq_ic(a, "minid")) && more > 0 {
            if t.how.is_some() {
                return Err(CmdError::err(
                    "syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            let next = args.get(i + 1);
            t.approx = false;
            if more >= 2 && (next == b"~" || next == b"=") {
                t.approx = next == b"~";
                i += 1;
            }
            let v = args.get(i + 1);
            t.how = Some(if eq_ic(a, "maxlen") {
                let n = arg_i64(v)?;
                if n < 0 {
                    return Err(CmdError::err("The MAXLEN argument must be >= 0."));
                }
                Trim::MaxLen(n as u64)
            } else {
                Trim::MinId(strict_id(v, 0)?)
            });
            i += 1;
            t.arg = i;
        } else if eq_ic(a, "limit") && more > 0 {
            let n = arg_i64(args.get(i + 1))?;
            if n < 0 {
                return Err(CmdError::err("The LIMIT argument must be >= 0."));
            }
            limit = Some(n);
            i += 1;
        } else if xadd && eq_ic(a, "nomkstream") {
            t.nomkstream = true;
        } else if xadd {
            t.id = Some(parse_id(a, 0, true, true)?);
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if limit.is_some_and(|l| l > 0) && t.how.is_none() {
        return Err(CmdError::err(
            "syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && t.how.is_none() {
        return Err(CmdError::err(
            "syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if ctx.replay_version.is_some() {
        t.limit = 0;
    } else if let Some(l) = limit {
        if !t.approx {
            return Err(CmdError::err(
                "syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
        t.limit = l as usize;
    } else if t.approx {
        let per_node = node_limits(ctx).1;
        t.limit = (100 * per_node).clamp(1, 10_000);
        if per_node == 0 {
            t.limit = 10_000;
        }
    }
    Ok((t, i))
}

/// After an approximate trim, the exact threshold reached, which the
/// propagated argv carries after `=` (streamRewriteApproxSpecifier /
/// TrimArgument); None for an exact trim.
fn trim_threshold(t: &TrimArgs, s: &StreamValue) -> Option<Vec<u8>> {
    if !t.approx {
        return None;
    }
    Some(match t.how {
        Some(Trim::MaxLen(_)) => s.len().to_string().into_bytes(),
        // streamGetEdgeID: an empty stream's first edge is the largest ID.
        _ => s.first().map_or(StreamId::MAX, |e| e.0).text().into_bytes(),
    })
}

/// The argv to propagate: the command's own, with `threshold` (see
/// [`trim_threshold`]) after `=` where given, borrowed, not copied.
fn trim_argv<'a>(args: Args<'a>, t: &TrimArgs, threshold: &'a Option<Vec<u8>>) -> Vec<&'a [u8]> {
    let mut argv: Vec<&[u8]> = args.iter().collect();
    if let Some(th) = threshold {
        argv[t.arg - 1] = b"=";
        argv[t.arg] = th;
    }
    argv
}

/// Under active replication, before a write of the stream at `key`: its
/// merge state brought up to date (`keyspace/merge/stream.rs`); None
/// otherwise, or WRONGTYPE where the key holds another type.
fn prepare(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    key: &[u8],
) -> Result<Option<Before>, CmdError> {
    if !ctx.core.active {
        return Ok(None);
    }
    get_stream(l, key)?;
    ctx.mark_merged(key);
    let ttl_noted = l.stream_ttl_noted(key);
    let state = l.prepare_stream(key);
    Ok(Some(Before { state, ttl_noted }))
}

/// A stream's merge state before a write ([`prepare`]), and whether its
/// TTL register gave the key's expiry before it was brought up to date
/// (`Locked::stream_ttl_noted`: a fact on a key with a TTL needs it).
struct Before {
    state: merge::stream::Stream,
    ttl_noted: bool,
}

impl std::ops::Deref for Before {
    type Target = merge::stream::Stream;
    fn deref(&self) -> &merge::stream::Stream {
        &self.state
    }
}

/// Whether a write on the stream whose entry is `e` (after the write) and
/// whose state before it was `before` may carry its fact for its TTL: none,
/// or one the state's register gave (DECISIONS 165, 298).
fn ttl_fits(e: Option<&crate::keyspace::Entry>, before: &Before) -> bool {
    e.is_some_and(|e| e.expire_at() == 0 || (merge::stream::TTL_WRITE_FACTS && before.ttl_noted))
}

/// After a trim: its threshold, every entry at or below it gone (the
/// stream's last ID where it is empty).
fn trimmed_to(s: &StreamValue) -> StreamId {
    if s.is_empty() {
        return s.last_id;
    }
    s.first_id().prev().unwrap_or(StreamId::MIN)
}

/// Active replication: the fact of a stream write stamped `stamp` at
/// `key` (`before`: the key's merge state before it), `told(prev)` given
/// its `PREV`, goes in the write's record where the write is the first of
/// its stamp on the key and the key has no TTL or one its state's register
/// gave ([`ttl_fits`]; else it merges by its state: DECISIONS 165, 298).
fn note_fact(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    key: &[u8],
    (before, stamp): (&Before, u64),
    told: impl FnOnce(u64) -> Told,
) {
    if !merge::stream::STREAM_FACTS || !merge::fact::noting() {
        return;
    }
    if !ttl_fits(l.entry(key).map(|e| &*e), before) {
        return;
    }
    let (Some(prev), Some(a)) = (before.fact_prev(stamp), ctx.active.as_mut()) else {
        return;
    };
    told(prev).encode(&mut a.facts);
}

/// Active replication: XSETID's fact (DECISIONS 284), its `PREV` and the
/// print of the state it built on (`before`), where it is the first write
/// of its stamp on the key and its TTL fits ([`ttl_fits`]).
fn note_setid_fact(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    key: &[u8],
    (before, stamp): (&Before, u64),
) {
    if !merge::stream::SETID_FACTS || !merge::stream::STREAM_FACTS || !merge::fact::noting() {
        return;
    }
    if !ttl_fits(l.entry(key).map(|e| &*e), before) {
        return;
    }
    let (Some(prev), Some(a)) = (before.fact_prev(stamp), ctx.active.as_mut()) else {
        return;
    };
    let print = before.setid_print();
    merge::stream::SetidTold { prev, print }.encode(&mut a.facts);
}

/// What an active node's IDs are made from: the milliseconds of the
/// write's stamp (or the clock's) and the node's slot; whether the ID
/// came from a client (explicit IDs of another slot are refused) or a
/// record (taken as it is).
struct IdClock {
    ms: u64,
    slot: u64,
    replayed: bool,
}

fn id_clock(ctx: &Ctx) -> IdClock {
    let stamp = ctx.active.as_ref().map_or(0, |a| a.stamp);
    IdClock {
        ms: crate::keyspace::hlc::stamp_ms(stamp).max(ctx.now_ms),
        slot: ctx.core.node_id & ((1 << crate::keyspace::hlc::NODE_BITS) - 1),
        replayed: ctx.replay_version.is_some(),
    }
}

/// The ID XADD gives the new entry under active replication (DECISIONS
/// 112): `*` makes `ms-seq` with `ms` the write's milliseconds (not below
/// the last ID's) and the node's slot in `seq`'s low bits; `ms-*` the
/// same in the given millisecond; an explicit ID must carry the node's
/// slot. Every ID is above the stream's last one and above every ID the
/// merge state has seen (a stream deleted and made again).
fn active_id(
    s: &StreamValue,
    state: &merge::stream::Stream,
    given: Option<(StreamId, bool)>,
    clock: IdClock,
) -> Result<StreamId, CmdError> {
    if clock.replayed {
        // A peer's entry below the last ID here, new here: its fact
        // applies late (DECISIONS 168); the entry goes in in ID order.
        if let Some((id, true)) = given {
            if id <= s.last_id && !state.covers(id) && s.entry(id).is_none() {
                return Ok(id);
            }
        }
        return next_id(s, given, clock.ms);
    }
    let smaller = || {
        CmdError::err(
            "The ID specified in XADD is equal or smaller than the target stream top item",
        )
    };
    let last = s.last_id.max(state.top());
    let slot = clock.slot;
    let id = match given {
        Some((id, true)) if merge::stream::slot_of(id) != slot => {
            return Err(CmdError::err(format!(
                "Under active replication an explicit stream ID must end in this node's slot: its sequence modulo 1024 must be {slot}"
            )));
        }
        Some((id, true)) => id,
        Some((id, false)) if id.ms < last.ms => return Err(smaller()),
        Some((id, false)) => seq_after(last, id.ms, slot).ok_or_else(smaller)?,
        None => {
            let ms = clock.ms.max(last.ms);
            match seq_after(last, ms, slot) {
                Some(id) => id,
                None if ms < u64::MAX => StreamId::new(ms + 1, slot),
                None => return Err(smaller()),
            }
        }
    };
    if id <= last {
        return Err(smaller());
    }
    Ok(id)
}

/// The first ID in millisecond `ms` (not below `last`'s) whose sequence
/// ends in `slot` and is above `last`; None where the sequence runs out.
fn seq_after(last: StreamId, ms: u64, slot: u64) -> Option<StreamId> {
    if ms > last.ms {
        return Some(StreamId::new(ms, slot));
    }
    let mask = (1u64 << crate::keyspace::hlc::NODE_BITS) - 1;
    let mut seq = (last.seq & !mask) | slot;
    if seq <= last.seq {
        seq = seq.checked_add(mask + 1)?;
    }
    Some(StreamId::new(ms, seq))
}

/// The ID XADD gives the new entry (streamAppendItem's rules).
fn next_id(
    s: &StreamValue,
    given: Option<(StreamId, bool)>,
    now_ms: u64,
) -> Result<StreamId, CmdError> {
    let smaller = || {
        CmdError::err(
            "The ID specified in XADD is equal or smaller than the target stream top item",
        )
    };
    let last = s.last_id;
    let id = match given {
        Some((id, true)) => id,
        Some((id, false)) if id.ms == last.ms => {
            if last.seq == u64::MAX {
                return Err(smaller());
            }
            StreamId::new(id.ms, last.seq + 1)
        }
        Some((id, false)) => id,
        None if now_ms > last.ms => StreamId::new(now_ms, 0),
        None => last.next().ok_or_else(smaller)?,
    };
    if id <= last {
        return Err(smaller());
    }
    Ok(id)
}

fn xadd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (t, idpos) = parse_trim(ctx, args, true)?;
    let fields = idpos + 1;
    if args.len() < fields + 2 || !(args.len() - fields).is_multiple_of(2) {
        return Err(CmdError::WrongArity("xadd".into()));
    }
    if t.id.is_some_and(|(id, seq)| seq && id == StreamId::MIN) {
        return Err(CmdError::err(
            "The ID specified in XADD must be greater than 0-0",
        ));
    }
    let key = args.get(1);
    let (max_bytes, max_entries) = node_limits(ctx);
    let mut l = ctx.open(key);
    let merge_state = if t.nomkstream && l.entry(key).is_none() {
        None
    } else {
        prepare(ctx, &mut l, key)?
    };
    // A stream to make is put only once its ID is found: an XADD refused
    // (an ID at or below a deleted stream's last, DECISIONS 196) leaves the
    // key, and its tombstone's version, as they were (DECISIONS 329).
    let mut made: Option<Box<StreamValue>> = None;
    let s = match get_stream(&mut l, key)? {
        Some(e) => stream_of(&e.value),
        None if t.nomkstream => {
            ctx.out.null();
            return Ok(());
        }
        None => made.insert(Box::default()),
    };
    if s.last_id == StreamId::MAX {
        return Err(CmdError::err(
            "The stream has exhausted the last possible ID, unable to add more items",
        ));
    }
    let id = match merge_state.as_ref() {
        Some(m) => active_id(s, m, t.id, id_clock(ctx)),
        None => next_id(s, t.id, ctx.now_ms),
    }?;
    let created = made.is_some();
    if let Some(s) = made {
        l.put(key, Value::Stream(s), 0, 0);
    }
    let e = l.entry(key).expect("present");
    let s = stream_mut(&mut e.value);
    let packed = Fields::pack(args.iter().skip(fields));
    if id <= s.last_id {
        s.insert(id, packed, max_bytes, max_entries); // a late entry (above)
    } else {
        s.append(id, packed, max_bytes, max_entries);
    }
    let text = id.text();
    ctx.out.bulk(text.as_bytes());
    let trimmed = t.how.is_some_and(|how| s.trim(how, t.approx, t.limit) > 0);
    let threshold = trim_threshold(&t, s);
    let trimmed_to = trimmed.then(|| trimmed_to(s));
    e.version = if created {
        ctx.new_version()
    } else {
        ctx.version_after(e.version)
    };
    let version = e.version;
    if let Some(before) = merge_state.as_ref() {
        let (added, [deleted, last]) = l.note_stream_add(key, id, (version, created));
        if let Some(e) = l.entry(key) {
            let s = stream_mut(&mut e.value);
            (s.entries_added, s.max_deleted, s.last_id) = (added, deleted, last);
        }
        ctx.mark_merged(key);
        // A stream it made: the print of the state it made it on, the
        // record replayed as it came (DECISIONS 297).
        if !created || merge::stream::MADE_FACTS {
            let told = |prev| Told {
                prev,
                add: Some(idpos as u32),
                drops: vec![],
                trim: (trimmed_to.filter(|_| !created)).map(|t| before.trim_told(t, Some(id))),
                made: created.then(|| before.print()),
            };
            note_fact(ctx, &mut l, key, (before, version), told);
        }
    }
    let mut argv = trim_argv(args, &t, &threshold);
    argv[idpos] = text.as_bytes();
    ctx.propagate(version, &argv);
    ctx.notify(class::STREAM, "xadd", key);
    if trimmed {
        ctx.notify(class::STREAM, "xtrim", key);
    }
    ctx.signal_ready(ctx.db(), key);
    Ok(())
}

fn xlen(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let n = get_stream(&mut l, key)?.map_or(0, |e| stream_of(&e.value).len());
    ctx.out.int(n as i64);
    Ok(())
}

/// One entry: [id, [field, value, ...]].
pub(super) fn reply_entry(out: &mut ReplyBuf, id: StreamId, f: &Fields) {
    out.array(2);
    out.bulk(id.text().as_bytes());
    out.array(f.count());
    for it in f.items() {
        out.bulk(it);
    }
}

/// An XRANGE bound: `(` makes it exclusive (streamParseIntervalIdOrReply).
pub(super) fn interval(a: &[u8], missing: u64) -> Result<(StreamId, bool), CmdError> {
    if a.len() > 1 && a[0] == b'(' {
        Ok((strict_id(&a[1..], missing)?, true))
    } else {
        Ok((parse_id(a, missing, false, false)?.0, false))
    }
}

fn range_generic(ctx: &mut Ctx, args: Args, rev: bool) -> CmdResult {
    let (lo, hi) = if rev { (3, 2) } else { (2, 3) };
    let (mut start, ex) = interval(args.get(lo), 0)?;
    if ex {
        start = start
            .next()
            .ok_or_else(|| CmdError::err("invalid start ID for the interval"))?;
    }
    let (mut end, ex) = interval(args.get(hi), u64::MAX)?;
    if ex {
        end = end
            .prev()
            .ok_or_else(|| CmdError::err("invalid end ID for the interval"))?;
    }
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if eq_ic(args.get(j), "count") && j + 1 < args.len() {
            count = arg_i64(args.get(j + 1))?.max(0);
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = get_stream(&mut l, key)? else {
        ctx.out.array(0);
        return Ok(());
    };
    if count == 0 {
        ctx.out.null_array();
        return Ok(());
    }
    let s = stream_of(&e.value);
    let take = if count < 0 {
        usize::MAX
    } else {
        count as usize
    };
    let items: Vec<_> = s.range(start, end, rev).take(take).collect();
    ctx.out.array(items.len());
    for (id, f) in items {
        reply_entry(ctx.out, id, &f);
    }
    Ok(())
}

fn xrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    range_generic(ctx, args, false)
}

fn xrevrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    range_generic(ctx, args, true)
}

fn xdel(ctx: &mut Ctx, args: Args) -> CmdResult {
    let ids = args
        .iter()
        .skip(2)
        .map(|a| strict_id(a, 0))
        .collect::<Result<Vec<_>, _>>()?;
    let key = args.get(1);
    let mut l = ctx.open(key);
    let before = match l.entry(key) {
        Some(_) => prepare(ctx, &mut l, key)?,
        None => None,
    };
    let Some(e) = get_stream(&mut l, key)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let s = stream_mut(&mut e.value);
    let mut drops = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        if s.delete(id) {
            drops.push(i as u32 + 2);
            s.max_deleted = s.max_deleted.max(id);
        }
    }
    let deleted = drops.len() as i64;
    if deleted > 0 {
        e.version = ctx.version_after(e.version);
        let version = e.version;
        if let Some(before) = before.as_ref() {
            l.note_stream_groups(key); // the state at the write's version (DECISIONS 166)
            let told = |prev| Told {
                prev,
                drops,
                ..Told::default()
            };
            note_fact(ctx, &mut l, key, (before, version), told);
        }
        ctx.propagate_args(version, &args);
        ctx.notify(class::STREAM, "xdel", key);
    }
    ctx.out.int(deleted);
    Ok(())
}

fn xtrim(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (t, _) = parse_trim(ctx, args, false)?;
    let key = args.get(1);
    let mut l = ctx.open(key);
    let before = match l.entry(key) {
        Some(_) => prepare(ctx, &mut l, key)?,
        None => None,
    };
    let Some(e) = get_stream(&mut l, key)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let s = stream_mut(&mut e.value);
    let n = s.trim(t.how.expect("checked"), t.approx, t.limit);
    if n > 0 {
        let threshold = trim_threshold(&t, s);
        let to = trimmed_to(s);
        e.version = ctx.version_after(e.version);
        let version = e.version;
        if let Some(before) = before.as_ref() {
            l.note_stream_groups(key); // the state at the write's version (DECISIONS 166)
            let told = |prev| Told {
                prev,
                trim: Some(before.trim_told(to, None)),
                ..Told::default()
            };
            note_fact(ctx, &mut l, key, (before, version), told);
        }
        ctx.propagate(version, &trim_argv(args, &t, &threshold));
        ctx.notify(class::STREAM, "xtrim", key);
    }
    ctx.out.int(n as i64);
    Ok(())
}

fn xsetid(ctx: &mut Ctx, args: Args) -> CmdResult {
    let id = strict_id(args.get(2), 0)?;
    let (mut added, mut max_del) = (None, StreamId::MIN);
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if eq_ic(args.get(i), "entriesadded") && more > 0 {
            let n = arg_i64(args.get(i + 1))?;
            if n < 0 {
                return Err(CmdError::err("entries_added must be positive"));
            }
            added = Some(n as u64);
        } else if eq_ic(args.get(i), "maxdeletedid") && more > 0 {
            max_del = strict_id(args.get(i + 1), 0)?;
            if id < max_del {
                return Err(CmdError::err(
                    "The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                ));
            }
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let key = args.get(1);
    let mut l = ctx.open(key);
    let state = match l.entry(key) {
        Some(_) => prepare(ctx, &mut l, key)?,
        None => None,
    };
    let Some(e) = get_stream(&mut l, key)? else {
        return Err(CmdError::NoSuchKey);
    };
    // Under active replication max-deleted-entry-id and the last ID never
    // go down (the merge state's, by maximum: DECISIONS 195, 196).
    let (max_del, id) = match &state {
        Some(m) => (max_del.max(m.deleted), id.max(m.last_id())),
        None => (max_del, id),
    };
    let s = stream_mut(&mut e.value);
    if id < s.max_deleted {
        return Err(CmdError::err(
            "The ID specified in XSETID is smaller than current max_deleted_entry_id",
        ));
    }
    if let Some((top, _)) = s.last() {
        if id < top {
            return Err(CmdError::err(
                "The ID specified in XSETID is smaller than the target stream top item",
            ));
        }
        if added.is_some_and(|a| (s.len() as u64) > a) {
            return Err(CmdError::err(
                "The entries_added specified in XSETID is smaller than the target stream length",
            ));
        }
    }
    s.last_id = id;
    if let Some(a) = added {
        s.entries_added = a;
    }
    if max_del != StreamId::MIN {
        s.max_deleted = max_del;
    }
    e.version = ctx.version_after(e.version);
    let version = e.version;
    if let Some(before) = &state {
        note_setid_fact(ctx, &mut l, key, (before, version));
        // The state at the write's version now, as a peer's replay leaves
        // it (a TTL write next finds it describing the key: DECISIONS 283).
        l.prepare_stream(key);
    }
    let argv: Vec<&[u8]> = args.iter().collect();
    ctx.propagate(version, &argv);
    ctx.notify(class::STREAM, "xsetid", key);
    ctx.out.ok();
    Ok(())
}

// ---------------------------------------------------------------- XREAD

/// Where XREAD's or XREADGROUP's STREAMS keyword is, skipping the values
/// of BLOCK, COUNT and GROUP (a group may be named "streams").
fn streams_at(args: Args) -> Option<usize> {
    let mut i = 1;
    while i < args.len() {
        let a = args.get(i);
        if eq_ic(a, "streams") {
            return Some(i);
        } else if eq_ic(a, "group") {
            i += 2;
        } else if eq_ic(a, "block") || eq_ic(a, "count") {
            i += 1;
        }
        i += 1;
    }
    None
}

/// XREAD's and XREADGROUP's keys: the first half of what follows STREAMS.
fn xread_keys(args: Args) -> Vec<usize> {
    let Some(at) = streams_at(args) else {
        return vec![];
    };
    let n = (args.len() - at - 1) / 2;
    (at + 1..at + 1 + n).collect()
}

pub(super) struct ReadArgs {
    pub count: usize,
    /// Unix ms deadline (0: forever) if BLOCK was given.
    pub block: Option<u64>,
    /// Index of the first key.
    pub streams: usize,
    pub n: usize,
    /// XREADGROUP's GROUP: the indexes of the group and consumer names.
    pub group: Option<(usize, usize)>,
    pub noack: bool,
}

/// XREAD's and XREADGROUP's options (xreadCommand's parsing).
pub(super) fn parse_read(ctx: &Ctx, args: Args, readgroup: bool) -> Result<ReadArgs, CmdError> {
    let mut r = ReadArgs {
        count: 0,
        block: None,
        streams: 0,
        n: 0,
        group: None,
        noack: false,
    };
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let a = args.get(i);
        if eq_ic(a, "block") && more > 0 {
            if ctx.client.in_script {
                let name = String::from_utf8_lossy(args.get(0)).into_owned();
                return Err(CmdError::err(format!(
                    "{name} command is not allowed with BLOCK option from scripts"
                )));
            }
            let ms = parse_i64(args.get(i + 1))
                .ok_or_else(|| CmdError::err("timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(CmdError::err("timeout is negative"));
            }
            r.block = Some(if ms == 0 { 0 } else { ctx.now_ms + ms as u64 });
            i += 1;
        } else if eq_ic(a, "count") && more > 0 {
            r.count = arg_i64(args.get(i + 1))?.max(0) as usize;
            i += 1;
        } else if eq_ic(a, "streams") && more > 0 {
            r.streams = i + 1;
            let rest = args.len() - r.streams;
            if !rest.is_multiple_of(2) {
                return Err(CmdError::err("Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."));
            }
            r.n = rest / 2;
            break;
        } else if eq_ic(a, "group") && more >= 2 {
            if !readgroup {
                return Err(CmdError::err(
                    "The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.group = Some((i + 1, i + 2));
            i += 2;
        } else if eq_ic(a, "noack") {
            if !readgroup {
                return Err(CmdError::err(
                    "The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.noack = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if r.streams == 0 {
        return Err(CmdError::Syntax);
    }
    if readgroup && r.group.is_none() {
        return Err(CmdError::err("Missing GROUP option for XREADGROUP"));
    }
    Ok(r)
}

fn xread(ctx: &mut Ctx, args: Args) -> CmdResult {
    let r = parse_read(ctx, args, false)?;
    let keys: Vec<&[u8]> = (0..r.n).map(|k| args.get(r.streams + k)).collect();
    // Woken by a write that left another type there: not data for us
    // (Redis serves stream readers from streams only).
    let retry = ctx.client.block.retry.is_some();
    let mut l = ctx.open_many(keys.iter().copied());
    let mut after = Vec::with_capacity(r.n);
    for (k, key) in keys.iter().enumerate() {
        let s = match get_stream(&mut l, key) {
            Err(_) if retry => None,
            found => found?.map(|e| stream_of(&e.value)),
        };
        let a = args.get(r.streams + r.n + k);
        after.push(match a {
            b"$" => s.map_or(StreamId::MIN, |s| s.last_id),
            b">" => {
                return Err(CmdError::err("The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."))
            }
            _ => strict_id(a, 0)?,
        });
    }
    let take = if r.count == 0 { usize::MAX } else { r.count };
    let mut found: Vec<StreamRead<Fields>> = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        let Some(Value::Stream(s)) = l.entry(key).map(|e| &e.value) else {
            continue;
        };
        let Some(from) = after[k].next() else {
            continue;
        };
        if s.last_id <= after[k] {
            continue;
        }
        let es: Vec<_> = s
            .range(from, StreamId::MAX, false)
            .take(take)
            .map(|(id, f)| (id, Some(f)))
            .collect();
        if !es.is_empty() {
            found.push((k, es));
        }
    }
    if !found.is_empty() {
        reply_read(ctx.out, &keys, &found);
        return Ok(());
    }
    match r.block {
        Some(deadline) if may_block(ctx) => {
            // Re-run with "$" as the IDs it stood for now.
            let mut argv: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
            for (k, id) in after.iter().enumerate() {
                argv[r.streams + r.n + k] = id.text().into_bytes();
            }
            let owned = keys.iter().map(|k| k.to_vec()).collect();
            super::blocking::block_on_argv(ctx, argv, owned, deadline);
        }
        _ => ctx.out.null_array(),
    }
    Ok(())
}

/// One stream served by XREAD or XREADGROUP: its index among the keys and
/// its entries (None: deleted, in a consumer's history).
pub(super) type StreamRead<F> = (usize, Vec<(StreamId, Option<F>)>);

/// XREAD's and XREADGROUP's reply: per stream served, its key and entries
/// (an entry gone from a consumer's history is its ID and a null).
pub(super) fn reply_read<F: std::borrow::Borrow<Fields>>(
    out: &mut ReplyBuf,
    keys: &[&[u8]],
    found: &[StreamRead<F>],
) {
    if out.resp >= 3 {
        out.map(found.len());
    } else {
        out.array(found.len());
    }
    for (k, es) in found {
        if out.resp < 3 {
            out.array(2);
        }
        out.bulk(keys[*k]);
        out.array(es.len());
        for (id, f) in es {
            match f {
                Some(f) => reply_entry(out, *id, f.borrow()),
                None => {
                    out.array(2);
                    out.bulk(id.text().as_bytes());
                    out.null_array();
                }
            }
        }
    }
}

/// `stream-node-max-bytes` and `stream-node-max-entries`.
pub(super) fn node_limits(ctx: &Ctx) -> (usize, usize) {
    let e = &ctx.core.hot.encoding;
    (
        e.stream_node_max_bytes.load(Relaxed),
        e.stream_node_max_entries.load(Relaxed),
    )
}

// ---------------------------------------------------------------- XINFO

fn xinfo_parent(_ctx: &mut Ctx, _args: Args) -> CmdResult {
    // The dispatcher always resolves a subcommand; this is never reached.
    Err(CmdError::WrongArity("xinfo".into()))
}

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

fn xinfo_help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.array(XINFO_HELP.len());
    for l in XINFO_HELP {
        ctx.out.simple(l);
    }
    Ok(())
}

fn syntax_sub(args: Args) -> CmdError {
    syntax_sub_of(args, "XINFO")
}

/// addReplySubcommandSyntaxError for `cmd`'s subcommand in `args`.
pub(super) fn syntax_sub_of(args: Args, cmd: &str) -> CmdError {
    let sub = String::from_utf8_lossy(args.get(1)).into_owned();
    CmdError::err(format!(
        "unknown subcommand or wrong number of arguments for '{sub}'. Try {cmd} HELP."
    ))
}

/// The stream XINFO names; "no such key" if missing.
fn info_stream<'e>(
    l: &'e mut super::access::Locked,
    key: &[u8],
) -> Result<&'e StreamValue, CmdError> {
    match get_stream(l, key)? {
        Some(e) => Ok(stream_of(&e.value)),
        None => Err(CmdError::NoSuchKey),
    }
}

fn xinfo_stream(ctx: &mut Ctx, args: Args) -> CmdResult {
    let full = args.len() > 3;
    let mut count: i64 = 10;
    if full {
        if !eq_ic(args.get(3), "full") || args.len() == 5 || args.len() > 6 {
            return Err(syntax_sub(args));
        }
        if args.len() == 6 {
            if !eq_ic(args.get(4), "count") {
                return Err(syntax_sub(args));
            }
            count = arg_i64(args.get(5))?;
            if count < 0 {
                count = 10;
            }
        }
    }
    let key = args.get(2);
    let mut l = ctx.open(key);
    let s = info_stream(&mut l, key)?;
    let out = &mut *ctx.out;
    out.map(if full { 9 } else { 10 });
    let id = |out: &mut ReplyBuf, id: StreamId| out.bulk(id.text().as_bytes());
    out.bulk(b"length");
    out.int(s.len() as i64);
    out.bulk(b"radix-tree-keys");
    out.int(s.node_count() as i64);
    out.bulk(b"radix-tree-nodes");
    out.int(s.node_count() as i64 + 1);
    out.bulk(b"last-generated-id");
    id(out, s.last_id);
    out.bulk(b"max-deleted-entry-id");
    id(out, s.max_deleted);
    out.bulk(b"entries-added");
    out.int(s.entries_added as i64);
    out.bulk(b"recorded-first-entry-id");
    id(out, s.first_id());
    if full {
        out.bulk(b"entries");
        let take = if count == 0 {
            usize::MAX
        } else {
            count as usize
        };
        let es: Vec<_> = s
            .range(StreamId::MIN, StreamId::MAX, false)
            .take(take)
            .collect();
        out.array(es.len());
        for (i, f) in es {
            reply_entry(out, i, &f);
        }
        out.bulk(b"groups");
        out.array(s.groups.len());
        for (name, gr) in &s.groups {
            g::reply_group_full(out, s, name, gr, count as usize);
        }
        return Ok(());
    }
    out.bulk(b"groups");
    out.int(s.groups.len() as i64);
    for (name, e) in [(&b"first-entry"[..], s.first()), (b"last-entry", s.last())] {
        out.bulk(name);
        match e {
            Some((i, f)) => reply_entry(out, i, &f),
            None => out.null(),
        }
    }
    Ok(())
}

fn xinfo_groups(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(2);
    let mut l = ctx.open(key);
    let s = info_stream(&mut l, key)?;
    let out = &mut *ctx.out;
    out.array(s.groups.len());
    for (name, gr) in &s.groups {
        out.map(6);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"consumers");
        out.int(gr.consumers.len() as i64);
        out.bulk(b"pending");
        out.int(gr.pel.len() as i64);
        out.bulk(b"last-delivered-id");
        out.bulk(gr.last_id.text().as_bytes());
        g::reply_read_counters(out, s, gr);
    }
    Ok(())
}

fn xinfo_consumers(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(2);
    let now = ctx.now_ms as i64;
    let mut l = ctx.open(key);
    let s = info_stream(&mut l, key)?;
    let Some(gr) = s.groups.get(args.get(3)) else {
        return Err(CmdError::Msg(format!(
            "NOGROUP No such consumer group '{}' for key name '{}'",
            String::from_utf8_lossy(args.get(3)),
            String::from_utf8_lossy(key)
        )));
    };
    let out = &mut *ctx.out;
    out.array(gr.consumers.len());
    for (name, c) in &gr.consumers {
        out.map(3);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"pending");
        out.int(gr.pel.count_of(name) as i64);
        out.bulk(b"idle");
        out.int(now.saturating_sub(c.seen_time).max(0));
    }
    Ok(())
}
