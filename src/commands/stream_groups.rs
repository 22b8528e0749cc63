//! Consumer-group commands (Redis 7.0's t_stream.c): XGROUP (CREATE, SETID,
//! DESTROY, CREATECONSUMER, DELCONSUMER, HELP), XREADGROUP (with BLOCK),
//! XACK, XPENDING, XCLAIM, XAUTOCLAIM, and the group parts of XINFO. The
//! groups themselves are `keyspace/stream_groups.rs`; the table entries
//! are in `streams.rs`.
//!
//! Each command parses its arguments first; where Redis reports a parse
//! error only after looking the key up (XACK's IDs, XCLAIM's options,
//! XREADGROUP's IDs), the parse result waits and is reported in that order.
//! Propagation is Redis's: XREADGROUP and the claims send, per entry they
//! make pending or drop, `XCLAIM key group consumer 0 id TIME t RETRYCOUNT n
//! FORCE JUSTID LASTID last` (several wrapped in MULTI/EXEC), XREADGROUP
//! NOACK sends XGROUP CREATECONSUMER and XGROUP SETID ... ENTRIESREAD; XACK
//! and XGROUP propagate themselves. A blocked XREADGROUP re-runs when woken:
//! its stream gone it fails with Redis's UNBLOCKED error, its group gone
//! with NOGROUP.

use super::blocking::may_block;
use super::streams::{
    get_stream, interval, parse_id, parse_read, reply_entry, reply_read, stream_mut, stream_of,
    strict_id, syntax_sub_of,
};
use super::util::{arg_i64, eq_ic};
use super::{CmdError, CmdResult, Ctx};
use crate::core::notify::class;
use crate::keyspace::merge;
use crate::keyspace::merge::groups::writes::{self, XgroupTold};
use crate::keyspace::merge::groups::GroupMeta;
use crate::keyspace::merge::stream::Stream;
use crate::keyspace::stream::{Fields, StreamId, StreamValue};
use crate::keyspace::stream_groups::{Group, Nack, INVALID_ENTRIES_READ};
use crate::keyspace::Value;
use crate::protocol::{parse_i64, Args, ReplyBuf};

fn text(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// XPENDING's, XCLAIM's and XAUTOCLAIM's missing key or group.
fn no_key_or_group(key: &[u8], group: &[u8]) -> CmdError {
    CmdError::Msg(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        text(key),
        text(group)
    ))
}

/// XGROUP's missing group.
fn no_group(key: &[u8], group: &[u8]) -> CmdError {
    CmdError::Msg(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        text(group),
        text(key)
    ))
}

/// The record Redis propagates for a pending entry (streamPropagateXCLAIM).
fn xclaim_record(key: &[u8], group: &[u8], id: &[u8], n: &Nack, last: StreamId) -> Vec<Vec<u8>> {
    [
        &b"XCLAIM"[..],
        key,
        group,
        n.consumer(),
        b"0",
        id,
        b"TIME",
        n.delivery_time.to_string().as_bytes(),
        b"RETRYCOUNT",
        n.delivery_count.to_string().as_bytes(),
        b"FORCE",
        b"JUSTID",
        b"LASTID",
        last.text().as_bytes(),
    ]
    .iter()
    .map(|a| a.to_vec())
    .collect()
}

/// `XGROUP SETID key group id ENTRIESREAD n` (streamPropagateGroupID).
fn setid_record(key: &[u8], group: &[u8], g: &Group) -> Vec<Vec<u8>> {
    let (id, read) = (g.last_id.text(), g.entries_read.to_string());
    [
        &b"XGROUP"[..],
        b"SETID",
        key,
        group,
        id.as_bytes(),
        b"ENTRIESREAD",
        read.as_bytes(),
    ]
    .iter()
    .map(|a| a.to_vec())
    .collect()
}

/// Under active replication, before a group write of the stream at `key`
/// (present, or absent for MKSTREAM): its merge state brought up to the
/// key's version, so that the note after the write dots exactly what the
/// write changed (`keyspace/merge/groups.rs`).
/// The state it brought up to date, which the write's fact builds on:
/// None (no fact) where the key has a TTL its state's register did not
/// give (`Locked::stream_ttl_noted`; DECISIONS 298).
fn prepare_groups(ctx: &mut Ctx, l: &mut super::access::Locked, key: &[u8]) -> Option<Stream> {
    if ctx.core.active && get_stream(l, key).is_ok() {
        ctx.mark_merged(key);
        let noted = l.stream_ttl_noted(key) && merge::stream::TTL_WRITE_FACTS;
        let state = l.prepare_stream(key);
        let ttl = l.entry(key).is_some_and(|e| e.expire_at() != 0);
        return (!ttl || noted).then_some(state);
    }
    None
}

/// Whether a NOACK read (its `XGROUP SETID`, after an `XGROUP
/// CREATECONSUMER` where it made the consumer) travels as a fact
/// (DECISIONS 285); off, its peers ask for the stream's state.
const READ_FACTS_NOACK: bool = true;

/// Active replication: a group write's fact (XACK's, a read's: DECISIONS
/// 239, 240), `push(prev, facts)` given its `PREV`, goes in the write's
/// (first) record where group facts are on, the write is the first of its
/// stamp on the key and `before` is given (none where the key's TTL does
/// not fit: [`prepare_groups`]), as a stream write's (`streams.rs`);
/// without one its peers ask for the key's state.
fn note_group_fact(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    key: &[u8],
    (before, stamp): (Option<&Stream>, u64),
    push: impl FnOnce(u64, &mut Vec<crate::effects::Fact>),
) {
    if !(merge::stream::STREAM_FACTS && merge::groups::GROUP_FACTS && merge::fact::noting()) {
        return;
    }
    if l.entry(key).is_none() {
        return;
    }
    let prev = before.and_then(|b| b.fact_prev(stamp));
    if let (Some(prev), Some(a)) = (prev, ctx.active.as_mut()) {
        push(prev, &mut a.facts);
    }
}

/// Under active replication, after a group write moved the version of the
/// stream at `key`: what it made or changed in the groups gets that version
/// as its dot.
fn note_groups(ctx: &Ctx, l: &mut super::access::Locked, key: &[u8]) {
    if ctx.core.active {
        l.note_stream_groups(key);
    }
}

/// An XGROUP subcommand's change of the group `name` of the stream at `key`
/// (both checked to exist): the merge state brought up to date, `change`
/// made (given the group's state before and the write's stamp, under
/// active replication; it returns its fact where it has one), the command
/// propagated as it came with that fact, its dot noted, `event` notified.
fn change_group<R>(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    (key, name): (&[u8], &[u8]),
    (args, event): (Args, &str),
    change: impl FnOnce(&mut Group, Option<(&GroupMeta, u64)>) -> (R, Option<XgroupTold>),
) -> R {
    let before = prepare_groups(ctx, l, key);
    let e = l.entry(key).expect("present");
    let stamp = ctx.version_after(e.version);
    let g = stream_mut(&mut e.value)
        .groups
        .get_mut(name)
        .expect("checked");
    let m = before.as_ref().and_then(|b| b.groups.get(name));
    let (r, told) = change(g, m.map(|m| (m, stamp)));
    e.version = stamp;
    note_groups(ctx, l, key);
    note_xgroup_fact(ctx, l, key, (before.as_ref(), stamp), told);
    ctx.propagate_args(stamp, &args);
    ctx.notify(class::STREAM, event, key);
    r
}

/// An XGROUP write's fact (DECISIONS 255), where it has one and XGROUP
/// facts are on: given its `PREV` as [`note_group_fact`]'s.
fn note_xgroup_fact(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    key: &[u8],
    (before, stamp): (Option<&Stream>, u64),
    told: Option<XgroupTold>,
) {
    if let Some(told) = told.filter(|_| writes::XGROUP_FACTS) {
        note_group_fact(ctx, l, key, (before, stamp), |prev, f| {
            XgroupTold { prev, ..told }.encode(f)
        });
    }
}

/// Propagates a claim's records (XCLAIM's, XAUTOCLAIM's: one per entry
/// claimed or dropped, `gone` the IDs of those whose entries were gone) as
/// one unit at a new version, its groups noted, with its fact on the
/// first record where claim facts are on (DECISIONS 254) and `before`, the
/// state before, is given (None: the claim moved the last ID).
fn propagate_claims(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    (key, group, consumer): (&[u8], &[u8], &[u8]),
    before: Option<Stream>,
    (records, gone): (&[Vec<Vec<u8>>], &[StreamId]),
) {
    if records.is_empty() {
        return;
    }
    let e = l.entry(key).expect("present");
    e.version = ctx.version_after(e.version);
    let version = e.version;
    let g = stream_of(&e.value).groups.get(group);
    let seen = g
        .and_then(|g| g.consumers.get(consumer))
        .map(|c| c.seen_time);
    note_groups(ctx, l, key);
    let ids: Option<Vec<(StreamId, bool)>> = (records.iter())
        .map(|r| {
            let id = strict_id(&r[5], 0).ok()?;
            Some((id, gone.contains(&id)))
        })
        .collect();
    let m = before.as_ref().and_then(|b| b.groups.get(group));
    let claims = records[0][0].eq_ignore_ascii_case(b"XCLAIM");
    if let (Some(ids), Some(m), true, true) = (ids, m, claims, writes::CLAIM_FACTS) {
        let touched = ids.iter().any(|r| !r.1);
        let seen = if touched { seen.unwrap_or_default() } else { 0 };
        if let Some(told) = writes::claim_told(m, (consumer, seen), &ids, 0) {
            note_group_fact(ctx, l, key, (before.as_ref(), version), |prev, f| {
                writes::ClaimTold { prev, ..told }.encode(f)
            });
        }
    }
    let refs: Vec<Vec<&[u8]>> = (records.iter())
        .map(|r| r.iter().map(|a| &a[..]).collect())
        .collect();
    ctx.propagate_unit(version, &refs);
}

// ---------------------------------------------------------------- XGROUP

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

pub(crate) fn xgroup_help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.array(XGROUP_HELP.len());
    for l in XGROUP_HELP {
        ctx.out.simple(l);
    }
    Ok(())
}

/// XGROUP itself: the dispatcher resolves the subcommand of a client's
/// call, but a replayed record (a replica, the AOF) comes here.
pub(crate) fn xgroup_parent(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    let handler = [
        ("create", xgroup_create as super::Handler, 5),
        ("setid", xgroup_setid, 5),
        ("destroy", xgroup_destroy, 4),
        ("createconsumer", xgroup_createconsumer, 5),
        ("delconsumer", xgroup_delconsumer, 5),
    ]
    .into_iter()
    .find(|(name, _, min)| eq_ic(sub, name) && args.len() >= *min);
    match handler {
        Some((_, h, _)) => h(ctx, args),
        None => Err(syntax_sub_of(args, "XGROUP")),
    }
}

/// CREATE's and SETID's options from index 5: MKSTREAM (CREATE only) and
/// ENTRIESREAD.
fn group_options(args: Args, create: bool) -> Result<(bool, i64), CmdError> {
    let (mut mkstream, mut read) = (false, INVALID_ENTRIES_READ);
    let mut i = 5;
    while i < args.len() {
        let a = args.get(i);
        if create && eq_ic(a, "mkstream") {
            mkstream = true;
            i += 1;
        } else if eq_ic(a, "entriesread") && i + 1 < args.len() {
            read = arg_i64(args.get(i + 1))?;
            if read < 0 && read != INVALID_ENTRIES_READ {
                return Err(CmdError::err(
                    "value for ENTRIESREAD must be positive or -1",
                ));
            }
            i += 2;
        } else {
            return Err(syntax_sub_of(args, "XGROUP"));
        }
    }
    Ok((mkstream, read))
}

fn key_must_exist() -> CmdError {
    CmdError::err("The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.")
}

pub(crate) fn xgroup_create(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (mkstream, read) = group_options(args, true)?;
    let id_arg = args.get(4);
    let id = (id_arg != b"$").then(|| strict_id(id_arg, 0));
    let (key, name) = (args.get(2), args.get(3));
    let mut l = ctx.open(key);
    let exists = get_stream(&mut l, key)?.is_some();
    if !exists && !mkstream {
        return Err(key_must_exist());
    }
    if args.len() > 8 {
        return Err(syntax_sub_of(args, "XGROUP"));
    }
    let id = id.transpose()?;
    let mut before = None;
    if !exists
        || !stream_of(&l.entry(key).expect("present").value)
            .groups
            .contains_key(name)
    {
        before = prepare_groups(ctx, &mut l, key).filter(|_| exists || writes::MKSTREAM_FACTS);
    }
    if !exists {
        let v = ctx.new_version();
        l.put(key, Value::Stream(Box::default()), 0, v);
    }
    let e = l.entry(key).expect("present");
    let s = stream_mut(&mut e.value);
    if s.groups.contains_key(name) {
        return Err(CmdError::Msg(
            "BUSYGROUP Consumer Group name already exists".into(),
        ));
    }
    let last = id.unwrap_or(s.last_id);
    s.groups.insert(name.to_vec(), Group::new(last, read));
    let stamp = ctx.version_after(e.version);
    e.version = stamp;
    note_groups(ctx, &mut l, key);
    // Its ID resolved; MKSTREAM's of a missing key with the print of the
    // deleted stream's state it made the key on (DECISIONS 286).
    let told = before.as_ref().map(|b| {
        let mut told = XgroupTold::default().with_register((last, read));
        told.words[4] = (!exists).then(|| b.print());
        told
    });
    note_xgroup_fact(ctx, &mut l, key, (before.as_ref(), stamp), told);
    ctx.propagate_args(stamp, &args);
    ctx.notify(class::STREAM, "xgroup-create", key);
    ctx.out.ok();
    Ok(())
}

pub(crate) fn xgroup_setid(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (_, read) = group_options(args, false)?;
    let id_arg = args.get(4);
    let id = (id_arg != b"$").then(|| parse_id(id_arg, 0, false, false).map(|r| r.0));
    let (key, name) = (args.get(2), args.get(3));
    let mut l = ctx.open(key);
    let Some(e) = get_stream(&mut l, key)? else {
        return Err(key_must_exist());
    };
    let s = stream_mut(&mut e.value);
    if !s.groups.contains_key(name) {
        return Err(no_group(key, name));
    }
    if args.len() != 5 && args.len() != 7 {
        return Err(syntax_sub_of(args, "XGROUP"));
    }
    let last = id.transpose()?.unwrap_or(s.last_id);
    change_group(ctx, &mut l, (key, name), (args, "xgroup-setid"), |g, m| {
        g.last_id = last;
        g.entries_read = read;
        ((), m.map(|(m, stamp)| writes::setid_told(m, g, (0, stamp))))
    });
    ctx.out.ok();
    Ok(())
}

pub(crate) fn xgroup_destroy(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, name) = (args.get(2), args.get(3));
    let mut l = ctx.open(key);
    let Some(e) = get_stream(&mut l, key)? else {
        return Err(key_must_exist());
    };
    if !stream_of(&e.value).groups.contains_key(name) {
        ctx.out.int(0);
        return Ok(());
    }
    let before = prepare_groups(ctx, &mut l, key);
    let e = l.entry(key).expect("present");
    stream_mut(&mut e.value).groups.remove(name);
    let stamp = ctx.version_after(e.version);
    e.version = stamp;
    note_groups(ctx, &mut l, key);
    let m = before.as_ref().and_then(|b| b.groups.get(name));
    let told = m.map(|m| XgroupTold {
        drops: m.dots.clone(),
        ..Default::default()
    });
    note_xgroup_fact(ctx, &mut l, key, (before.as_ref(), stamp), told);
    ctx.propagate_args(stamp, &args);
    ctx.notify(class::STREAM, "xgroup-destroy", key);
    // Clients blocked on the group fail with NOGROUP.
    ctx.signal_ready(ctx.db(), key);
    ctx.out.int(1);
    Ok(())
}

pub(crate) fn xgroup_createconsumer(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, name, consumer) = (args.get(2), args.get(3), args.get(4));
    let now = ctx.now_ms as i64;
    let mut l = ctx.open(key);
    let Some(e) = get_stream(&mut l, key)? else {
        return Err(key_must_exist());
    };
    let Some(g) = stream_of(&e.value).groups.get(name) else {
        return Err(no_group(key, name));
    };
    if g.consumers.contains_key(consumer) {
        ctx.out.int(0);
        return Ok(());
    }
    let event = (args, "xgroup-createconsumer");
    change_group(ctx, &mut l, (key, name), event, |g, m| {
        g.touch_consumer(consumer, now, false);
        let told = m.map(|(m, _)| {
            let mut t = XgroupTold::default();
            (t.resets[1], t.words[3]) = (Some(m.incarnation()), Some(now as u64));
            t
        });
        ((), told)
    });
    ctx.out.int(1);
    Ok(())
}

pub(crate) fn xgroup_delconsumer(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, name, consumer) = (args.get(2), args.get(3), args.get(4));
    let mut l = ctx.open(key);
    let Some(e) = get_stream(&mut l, key)? else {
        return Err(key_must_exist());
    };
    let Some(g) = stream_of(&e.value).groups.get(name) else {
        return Err(no_group(key, name));
    };
    if !g.consumers.contains_key(consumer) {
        ctx.out.int(0);
        return Ok(());
    }
    let event = (args, "xgroup-delconsumer");
    let pending = change_group(ctx, &mut l, (key, name), event, |g, m| {
        let told = m.and_then(|(m, _)| delconsumer_told(m, g, consumer));
        (g.delete_consumer(consumer).expect("checked"), told)
    });
    ctx.out.int(pending as i64);
    Ok(())
}

/// DELCONSUMER's fact (DECISIONS 255): the consumer's dot and the dots of
/// the pending entries it owns in `g` (the group before); None where one
/// holds none.
fn delconsumer_told(m: &GroupMeta, g: &Group, consumer: &[u8]) -> Option<XgroupTold> {
    let mut told = XgroupTold::default();
    told.resets[2] = Some(m.consumers.get(consumer)?.dot);
    g.consumers.get(consumer)?;
    for (id, _) in g.pel.of(consumer) {
        let dots = &m.pel.get(&id)?.dots;
        if dots.is_empty() {
            return None;
        }
        told.drops.extend(dots.iter().map(|d| d.0));
    }
    Some(told)
}

// ---------------------------------------------------------------- XREADGROUP

/// One stream's ID argument: None for `>` (new entries), else the ID after
/// which to read the consumer's history.
fn readgroup_id(a: &[u8]) -> Result<Option<StreamId>, CmdError> {
    match a {
        b"$" => Err(CmdError::err("The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.")),
        b">" => Ok(None),
        // The largest ID is how Redis spells ">" internally.
        _ => strict_id(a, 0).map(|id| (id != StreamId::MAX).then_some(id)),
    }
}

/// What one stream of an XREADGROUP served.
type Served = super::streams::StreamRead<Fields>;

/// XREADGROUP's key and group checks, in Redis's order with the IDs' parse
/// errors; the start of each stream's read. On a re-run after a wake-up, a
/// stream or group gone is the blocked client's error.
fn readgroup_starts(
    l: &mut super::access::Locked,
    keys: &[&[u8]],
    ids: Vec<Result<Option<StreamId>, CmdError>>,
    group: &[u8],
    retry: bool,
) -> Result<Vec<Option<StreamId>>, CmdError> {
    let mut starts = Vec::with_capacity(keys.len());
    for (key, id) in keys.iter().zip(ids) {
        let found = match get_stream(l, key) {
            Err(_) | Ok(None) if retry => {
                return Err(CmdError::Msg(
                    "UNBLOCKED the stream key no longer exists".into(),
                ))
            }
            found => found?,
        };
        let has_group = found.is_some_and(|e| stream_of(&e.value).groups.contains_key(group));
        if !has_group && retry {
            return Err(CmdError::Msg(
                "NOGROUP the consumer group this client was blocked on no longer exists".into(),
            ));
        }
        if !has_group {
            return Err(CmdError::Msg(format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                text(key),
                text(group)
            )));
        }
        starts.push(id?);
    }
    Ok(starts)
}

/// One stream's part of an XREADGROUP: None when there is nothing new for
/// the group, else the entries, the records to propagate and whether the
/// consumer was created.
struct GroupServe<'a> {
    key: &'a [u8],
    group: &'a [u8],
    consumer: &'a [u8],
    count: usize,
    noack: bool,
    /// Under active replication a read that moved the group's last ID
    /// propagates it with its entries-read (`XGROUP SETID ... ENTRIESREAD`),
    /// NOACK or not, as later Redis versions do: the XCLAIM records carry
    /// the ID but not the count, and nodes must agree on it.
    active: bool,
    now: i64,
}

type ServeResult = (Vec<(StreamId, Option<Fields>)>, Vec<Vec<Vec<u8>>>, bool);

fn serve_stream(
    s: &mut StreamValue,
    history: Option<StreamId>,
    q: &GroupServe,
) -> Option<ServeResult> {
    let (key, group, consumer) = (q.key, q.group, q.consumer);
    let new_from = match history {
        Some(_) => None,
        None => {
            let last = s.groups[group].last_id;
            match s.last_live_id() {
                Some(top) if top > last => Some(last.next()?),
                _ => return None,
            }
        }
    };
    let mut records: Vec<Vec<Vec<u8>>> = Vec::new();
    let g = s.groups.get_mut(group).expect("checked");
    let created = g.touch_consumer(consumer, q.now, true);
    if created && q.noack {
        let argv = [&b"XGROUP"[..], b"CREATECONSUMER", key, group, consumer];
        records.push(argv.iter().map(|a| a.to_vec()).collect());
    }
    let entries = match (history, new_from) {
        (Some(id), _) => {
            let start = id.next().unwrap_or(StreamId::MIN);
            s.read_history(group, consumer, start, q.count, q.now)
        }
        (None, Some(start)) => {
            let read = s.read_group(group, consumer, start, q.count, q.noack, q.now);
            let last = s.groups[group].last_id;
            for (id, n) in &read.nacks {
                records.push(xclaim_record(key, group, id.text().as_bytes(), n, last));
            }
            if (q.noack || q.active) && read.moved {
                records.push(setid_record(key, group, &s.groups[group]));
            }
            read.entries
                .into_iter()
                .map(|(id, f)| (id, Some(f)))
                .collect()
        }
        (None, None) => return None,
    };
    Some((entries, records, created))
}

/// A `>` read's fact for one stream's records (DECISIONS 240; a NOACK
/// read's names its consumer by print, DECISIONS 285): None where the read
/// tells none (a history read, the group unknown before, facts off).
fn read_fact(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    (key, start): (&[u8], Option<StreamId>),
    (before, version): (Option<&Stream>, u64),
    (records, q): (&[Vec<Vec<u8>>], &GroupServe),
) -> Option<Vec<crate::effects::Fact>> {
    let m = before?.groups.get(q.group)?.clone();
    let is = |r: &[Vec<u8>], name: &[u8], at: usize| {
        r.get(at).is_some_and(|a| a.eq_ignore_ascii_case(name))
    };
    let shape = match q.noack {
        false => is(records.first()?, b"XCLAIM", 0),
        true => READ_FACTS_NOACK && is(records.last()?, b"SETID", 1),
    };
    if start.is_some() || !shape {
        return None;
    }
    let (consumer, now, noack) = (q.consumer, q.now, q.noack);
    note_group_fact(ctx, l, key, (before, version), |prev, f| {
        let mut told = merge::groups::read_told(&m, consumer, prev, now);
        told.noack = noack.then(|| merge::context::fingerprint(consumer));
        told.encode(f)
    });
    let facts = std::mem::take(&mut ctx.active.as_mut()?.facts);
    (!facts.is_empty()).then_some(facts)
}

pub(crate) fn xreadgroup(ctx: &mut Ctx, args: Args) -> CmdResult {
    let r = parse_read(ctx, args, true)?;
    let (gi, ci) = r.group.expect("checked by parse_read");
    let keys: Vec<&[u8]> = (0..r.n).map(|k| args.get(r.streams + k)).collect();
    let ids = (0..r.n)
        .map(|k| readgroup_id(args.get(r.streams + r.n + k)))
        .collect();
    let retry = ctx.client.block.retry.is_some();
    let mut q = GroupServe {
        key: b"",
        group: args.get(gi),
        consumer: args.get(ci),
        // A blocked client is served at most XREAD_BLOCKED_DEFAULT_COUNT.
        count: if r.count == 0 && retry { 1000 } else { r.count },
        noack: r.noack,
        active: ctx.core.active,
        now: ctx.now_ms as i64,
    };
    let mut l = ctx.open_many(keys.iter().copied());
    let starts = readgroup_starts(&mut l, &keys, ids, q.group, retry)?;
    let befores: Vec<Option<Stream>> = (keys.iter())
        .map(|key| prepare_groups(ctx, &mut l, key))
        .collect();
    let mut served: Vec<Served> = Vec::new();
    let (mut version, mut written, mut all) = (0, Vec::new(), Vec::new());
    // Per key written: its index in `keys` and its first record's in `all`.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (k, &key) in keys.iter().enumerate() {
        q.key = key;
        let e = l.entry(key).expect("checked above");
        let Some((entries, records, created)) =
            serve_stream(stream_mut(&mut e.value), starts[k], &q)
        else {
            continue;
        };
        if !records.is_empty() {
            version = version.max(ctx.version_after(e.version));
            written.push(key);
            runs.push((k, all.len()));
            all.extend(records);
        }
        if created {
            ctx.notify(class::STREAM, "xgroup-createconsumer", key);
        }
        served.push((k, entries));
    }
    // One unit for the whole command, as Redis wraps a command's records.
    for key in &written {
        l.set_version(key, version);
        note_groups(ctx, &mut l, key);
    }
    if !all.is_empty() {
        let mut facts = Vec::new();
        let distinct = keys.iter().enumerate().all(|(i, k)| !keys[..i].contains(k));
        for (j, &(k, at)) in runs.iter().enumerate().filter(|_| distinct) {
            let end = runs.get(j + 1).map_or(all.len(), |r| r.1);
            let before = befores[k].as_ref();
            let told = read_fact(
                ctx,
                &mut l,
                (keys[k], starts[k]),
                (before, version),
                (&all[at..end], &q),
            );
            facts.extend(told.map(|f| (at, f)));
        }
        let refs: Vec<Vec<&[u8]>> = all
            .iter()
            .map(|r| r.iter().map(|a| &a[..]).collect())
            .collect();
        ctx.propagate_unit_facts(version, &refs, facts);
    }
    if !served.is_empty() {
        reply_read(ctx.out, &keys, &served);
        return Ok(());
    }
    match r.block {
        Some(deadline) if may_block(ctx) => {
            let argv = args.iter().map(|a| a.to_vec()).collect();
            let owned = keys.iter().map(|k| k.to_vec()).collect();
            super::blocking::block_on_argv(ctx, argv, owned, deadline);
        }
        _ => ctx.out.null_array(),
    }
    Ok(())
}

// ---------------------------------------------------------------- XACK

pub(crate) fn xack(ctx: &mut Ctx, args: Args) -> CmdResult {
    let ids: Result<Vec<StreamId>, CmdError> =
        args.iter().skip(3).map(|a| strict_id(a, 0)).collect();
    let (key, group) = (args.get(1), args.get(2));
    let mut l = ctx.open(key);
    let Some(e) = get_stream(&mut l, key)? else {
        ctx.out.int(0);
        return Ok(());
    };
    if !stream_of(&e.value).groups.contains_key(group) {
        ctx.out.int(0);
        return Ok(());
    }
    let ids = ids?;
    let before = prepare_groups(ctx, &mut l, key);
    let dots = before.as_ref().and_then(|b| b.groups.get(group));
    let e = l.entry(key).expect("present");
    let g = stream_mut(&mut e.value)
        .groups
        .get_mut(group)
        .expect("checked");
    // Per ID acknowledged (argument 3 + k), the dots its entry held.
    let (mut drops, mut acked, mut told) = (Vec::new(), 0, true);
    for (k, id) in ids.iter().enumerate() {
        if !g.ack(*id) {
            continue;
        }
        acked += 1;
        let held = dots
            .and_then(|m| m.pel.get(id))
            .map_or(&[][..], |p| &p.dots[..]);
        told &= !held.is_empty(); // an entry with no dot: its peers ask
        drops.extend(held.iter().map(|d| (3 + k as u32, d.0)));
    }
    let before = before.filter(|_| told);
    if acked > 0 {
        e.version = ctx.version_after(e.version);
        let version = e.version;
        note_groups(ctx, &mut l, key);
        note_group_fact(ctx, &mut l, key, (before.as_ref(), version), |prev, f| {
            merge::groups::AckTold { prev, drops }.encode(f)
        });
        ctx.propagate_args(version, &args);
    }
    ctx.out.int(acked as i64);
    Ok(())
}

// ---------------------------------------------------------------- XPENDING

/// XPENDING's extended form.
struct PendingRange {
    idle: i64,
    start: StreamId,
    end: StreamId,
    count: usize,
    consumer: Option<usize>,
}

fn parse_pending(args: Args) -> Result<Option<PendingRange>, CmdError> {
    let n = args.len();
    if n != 3 && !(6..=9).contains(&n) {
        return Err(CmdError::Syntax);
    }
    if n == 3 {
        return Ok(None);
    }
    let mut at = 3;
    let mut idle = 0;
    if eq_ic(args.get(3), "idle") {
        idle = arg_i64(args.get(4))?;
        if n < 8 {
            return Err(CmdError::Syntax);
        }
        at += 2;
    }
    let count = arg_i64(args.get(at + 2))?.max(0) as usize;
    let (mut start, ex) = interval(args.get(at), 0)?;
    if ex {
        start = start
            .next()
            .ok_or_else(|| CmdError::err("invalid start ID for the interval"))?;
    }
    let (mut end, ex) = interval(args.get(at + 1), u64::MAX)?;
    if ex {
        end = end
            .prev()
            .ok_or_else(|| CmdError::err("invalid end ID for the interval"))?;
    }
    let consumer = (at + 3 < n).then_some(at + 3);
    Ok(Some(PendingRange {
        idle,
        start,
        end,
        count,
        consumer,
    }))
}

pub(crate) fn xpending(ctx: &mut Ctx, args: Args) -> CmdResult {
    let range = parse_pending(args)?;
    let (key, group) = (args.get(1), args.get(2));
    let now = ctx.now_ms as i64;
    let mut l = ctx.open(key);
    let found: Option<&crate::keyspace::Entry> = get_stream(&mut l, key)?.map(|e| &*e);
    let Some(g) = found.and_then(|e| stream_of(&e.value).groups.get(group)) else {
        return Err(no_key_or_group(key, group));
    };
    let out = &mut *ctx.out;
    let Some(r) = range else {
        pending_summary(out, g);
        return Ok(());
    };
    let ids: Box<dyn Iterator<Item = (StreamId, &Nack)>> = match r.consumer {
        Some(c) if !g.consumers.contains_key(args.get(c)) => {
            out.array(0);
            return Ok(());
        }
        Some(c) => Box::new(g.pel.of_from(args.get(c), r.start)),
        None if r.start <= r.end => Box::new(g.pel.range(r.start..).map(|(id, n)| (*id, n))),
        None => Box::new(std::iter::empty()),
    };
    let rows: Vec<(StreamId, &Nack)> = ids
        .take_while(|(id, _)| *id <= r.end)
        .filter(|(_, n)| r.idle == 0 || now.saturating_sub(n.delivery_time) >= r.idle)
        .take(r.count)
        .collect();
    out.array(rows.len());
    for (id, n) in rows {
        out.array(4);
        out.bulk(id.text().as_bytes());
        out.bulk(n.consumer());
        out.int(now.saturating_sub(n.delivery_time).max(0));
        out.int(n.delivery_count as i64);
    }
    Ok(())
}

fn pending_summary(out: &mut ReplyBuf, g: &Group) {
    out.array(4);
    out.int(g.pel.len() as i64);
    let (Some(first), Some(last)) = (g.pel.keys().next(), g.pel.keys().next_back()) else {
        out.null();
        out.null();
        out.null_array();
        return;
    };
    out.bulk(first.text().as_bytes());
    out.bulk(last.text().as_bytes());
    let holders: Vec<(&Vec<u8>, usize)> = (g.consumers.keys())
        .map(|name| (name, g.pel.count_of(name)))
        .filter(|(_, n)| *n > 0)
        .collect();
    out.array(holders.len());
    for (name, n) in holders {
        out.array(2);
        out.bulk(name);
        out.bulk(n.to_string().as_bytes());
    }
}

// ---------------------------------------------------------------- XCLAIM

struct ClaimArgs {
    ids: Vec<StreamId>,
    /// Delivery time asked for with IDLE or TIME.
    time: Option<i64>,
    retry: Option<u64>,
    force: bool,
    justid: bool,
    last_id: StreamId,
}

/// XCLAIM's IDs (from index 5, up to the first that does not parse) and
/// options; `now` resolves IDLE.
fn parse_claim(args: Args, now: i64) -> Result<ClaimArgs, CmdError> {
    let mut c = ClaimArgs {
        ids: Vec::new(),
        time: None,
        retry: None,
        force: false,
        justid: false,
        last_id: StreamId::MIN,
    };
    let mut j = 5;
    while j < args.len() {
        match strict_id(args.get(j), 0) {
            Ok(id) => c.ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let num = |a: &[u8], what: &str| {
        parse_i64(a)
            .ok_or_else(|| CmdError::err(format!("Invalid {what} option argument for XCLAIM")))
    };
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        if eq_ic(opt, "force") {
            c.force = true;
        } else if eq_ic(opt, "justid") {
            c.justid = true;
        } else if eq_ic(opt, "idle") && more > 0 {
            j += 1;
            c.time = Some(now.wrapping_sub(num(args.get(j), "IDLE")?));
        } else if eq_ic(opt, "time") && more > 0 {
            j += 1;
            c.time = Some(num(args.get(j), "TIME")?);
        } else if eq_ic(opt, "retrycount") && more > 0 {
            j += 1;
            let n = num(args.get(j), "RETRYCOUNT")?;
            c.retry = (n >= 0).then_some(n as u64);
        } else if eq_ic(opt, "lastid") && more > 0 {
            j += 1;
            c.last_id = strict_id(args.get(j), 0)?;
        } else {
            return Err(CmdError::err(format!(
                "Unrecognized XCLAIM option '{}'",
                text(opt)
            )));
        }
        j += 1;
    }
    Ok(c)
}

fn min_idle(a: &[u8], cmd: &str) -> Result<i64, CmdError> {
    parse_i64(a)
        .map(|n| n.max(0))
        .ok_or_else(|| CmdError::err(format!("Invalid min-idle-time argument for {cmd}")))
}

pub(crate) fn xclaim(ctx: &mut Ctx, args: Args) -> CmdResult {
    let now = ctx.now_ms as i64;
    let minidle = min_idle(args.get(4), "XCLAIM");
    let parsed = parse_claim(args, now);
    let (key, group, consumer) = (args.get(1), args.get(2), args.get(3));
    let mut l = ctx.open(key);
    let found = get_stream(&mut l, key)?;
    if !found.is_some_and(|e| stream_of(&e.value).groups.contains_key(group)) {
        return Err(no_key_or_group(key, group));
    }
    let minidle = minidle?;
    let c = parsed?;
    let before = prepare_groups(ctx, &mut l, key);
    let e = l.entry(key).expect("present");
    let s = stream_mut(&mut e.value);
    let time = c.time.filter(|t| (0..=now).contains(t)).unwrap_or(now);
    let mut records = Vec::new();
    let mut reply: Vec<(StreamId, Option<Fields>)> = Vec::new();
    let mut created = false;
    let mut have_consumer = false;
    let mut setid = false;
    let mut gone = Vec::new();
    let before_last;
    {
        let entries_of = |id: StreamId| s.entry(id);
        let fields: Vec<Option<Fields>> = c.ids.iter().map(|id| entries_of(*id)).collect();
        let g = s.groups.get_mut(group).expect("checked");
        before_last = g.last_id;
        if c.last_id > g.last_id {
            g.last_id = c.last_id;
            setid = true;
        }
        for (k, id) in c.ids.iter().enumerate() {
            let id_arg = args.get(5 + k);
            let Some(f) = &fields[k] else {
                if let Some(n) = g.pel.get(id).cloned() {
                    records.push(xclaim_record(key, group, id_arg, &n, g.last_id));
                    setid = false;
                    g.ack(*id);
                    gone.push(*id);
                }
                continue;
            };
            let fresh = c.force && !g.pel.contains_key(id);
            if fresh {
                g.pel.insert(*id, consumer, now, 1);
            }
            let Some(n) = g.pel.get(id) else {
                continue;
            };
            if !fresh && minidle > 0 && now.saturating_sub(n.delivery_time) < minidle {
                continue;
            }
            if !have_consumer {
                created = g.touch_consumer(consumer, now, true);
                have_consumer = true;
            }
            g.reassign(*id, consumer);
            let n = g.pel.get_mut(id).expect("present");
            n.delivery_time = time;
            match c.retry {
                Some(r) => n.delivery_count = r,
                None if !c.justid => n.delivery_count = n.delivery_count.wrapping_add(1),
                None => {}
            }
            let n = n.clone();
            records.push(xclaim_record(key, group, id_arg, &n, g.last_id));
            setid = false;
            reply.push((*id, (!c.justid).then(|| f.clone())));
        }
        if setid {
            records.push(setid_record(key, group, g));
        }
    }
    // A claim that moved the last ID (LASTID) tells no fact.
    let before = before.filter(|_| c.last_id <= before_last);
    propagate_claims(
        ctx,
        &mut l,
        (key, group, consumer),
        before,
        (&records, &gone),
    );
    if created {
        ctx.notify(class::STREAM, "xgroup-createconsumer", key);
    }
    reply_claimed(ctx.out, &reply);
    Ok(())
}

/// Claimed entries: each its ID alone (JUSTID) or the entry.
fn reply_claimed(out: &mut ReplyBuf, claimed: &[(StreamId, Option<Fields>)]) {
    out.array(claimed.len());
    for (id, f) in claimed {
        match f {
            Some(f) => reply_entry(out, *id, f),
            None => out.bulk(id.text().as_bytes()),
        }
    }
}

// ---------------------------------------------------------------- XAUTOCLAIM

struct AutoClaimArgs {
    minidle: i64,
    start: StreamId,
    count: usize,
    justid: bool,
}

fn parse_autoclaim(args: Args) -> Result<AutoClaimArgs, CmdError> {
    let minidle = min_idle(args.get(4), "XAUTOCLAIM")?;
    let (mut start, ex) = interval(args.get(5), 0)?;
    if ex {
        start = start
            .next()
            .ok_or_else(|| CmdError::err("invalid start ID for the interval"))?;
    }
    let mut a = AutoClaimArgs {
        minidle,
        start,
        count: 100,
        justid: false,
    };
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        if eq_ic(opt, "count") && more > 0 {
            let max = i64::MAX / 16;
            a.count = parse_i64(args.get(j + 1))
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| CmdError::err("COUNT must be > 0"))? as usize;
            j += 1;
        } else if eq_ic(opt, "justid") {
            a.justid = true;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(a)
}

/// What an XAUTOCLAIM scan did: the claimed entries, the IDs dropped from
/// the PEL because their entries are gone, the cursor, the records.
struct AutoClaimed {
    claimed: Vec<(StreamId, Option<Fields>)>,
    deleted: Vec<StreamId>,
    cursor: StreamId,
    records: Vec<Vec<Vec<u8>>>,
    created: bool,
}

pub(crate) fn xautoclaim(ctx: &mut Ctx, args: Args) -> CmdResult {
    let a = parse_autoclaim(args)?;
    let (key, group, consumer) = (args.get(1), args.get(2), args.get(3));
    let now = ctx.now_ms as i64;
    let mut l = ctx.open(key);
    let found = get_stream(&mut l, key)?;
    if !found.is_some_and(|e| stream_of(&e.value).groups.contains_key(group)) {
        return Err(no_key_or_group(key, group));
    }
    let before = prepare_groups(ctx, &mut l, key);
    let e = l.entry(key).expect("present");
    let done = autoclaim_scan(stream_mut(&mut e.value), &a, (key, group, consumer), now);
    let records = (&done.records[..], &done.deleted[..]);
    propagate_claims(ctx, &mut l, (key, group, consumer), before, records);
    if done.created {
        ctx.notify(class::STREAM, "xgroup-createconsumer", key);
    }
    let out = &mut *ctx.out;
    out.array(3);
    out.bulk(done.cursor.text().as_bytes());
    reply_claimed(out, &done.claimed);
    out.array(done.deleted.len());
    for id in done.deleted {
        out.bulk(id.text().as_bytes());
    }
    Ok(())
}

/// xautoclaimCommand's loop: at most `count` entries claimed or dropped,
/// at most ten times as many PEL entries looked at.
fn autoclaim_scan(
    s: &mut StreamValue,
    a: &AutoClaimArgs,
    (key, group, consumer): (&[u8], &[u8], &[u8]),
    now: i64,
) -> AutoClaimed {
    let mut done = AutoClaimed {
        claimed: Vec::new(),
        deleted: Vec::new(),
        cursor: StreamId::MIN,
        records: Vec::new(),
        created: false,
    };
    let (mut count, mut attempts) = (a.count, a.count.saturating_mul(10));
    let mut at = Some(a.start);
    let mut have_consumer = false;
    while attempts > 0 && count > 0 {
        attempts -= 1;
        let Some(from) = at else {
            break;
        };
        let Some(id) = s.groups[group].pel.range(from..).next().map(|(id, _)| *id) else {
            at = None;
            break;
        };
        at = id.next();
        let fields = s.entry(id);
        let g = s.groups.get_mut(group).expect("checked");
        let idtext = id.text();
        let Some(f) = fields else {
            let n = g.pel[&id].clone();
            done.records
                .push(xclaim_record(key, group, idtext.as_bytes(), &n, g.last_id));
            g.ack(id);
            done.deleted.push(id);
            count -= 1;
            continue;
        };
        if a.minidle > 0 && now.saturating_sub(g.pel[&id].delivery_time) < a.minidle {
            continue;
        }
        if !have_consumer {
            done.created = g.touch_consumer(consumer, now, true);
            have_consumer = true;
        }
        g.reassign(id, consumer);
        let n = g.pel.get_mut(&id).expect("present");
        n.delivery_time = now;
        if !a.justid {
            n.delivery_count = n.delivery_count.wrapping_add(1);
        }
        let n = n.clone();
        done.records
            .push(xclaim_record(key, group, idtext.as_bytes(), &n, g.last_id));
        done.claimed.push((id, (!a.justid).then_some(f)));
        count -= 1;
    }
    done.cursor = at
        .and_then(|from| s.groups[group].pel.range(from..).next().map(|(id, _)| *id))
        .unwrap_or(StreamId::MIN);
    done
}

// ---------------------------------------------------------------- XINFO

/// A group's `entries-read` and `lag` fields (XINFO GROUPS, STREAM FULL).
pub(crate) fn reply_read_counters(out: &mut ReplyBuf, s: &StreamValue, g: &Group) {
    out.bulk(b"entries-read");
    if g.entries_read == INVALID_ENTRIES_READ {
        out.null();
    } else {
        out.int(g.entries_read);
    }
    out.bulk(b"lag");
    match s.lag(g) {
        Some(lag) => out.int(lag),
        None => out.null(),
    }
}

/// One group of XINFO STREAM FULL (PELs cut at `count`, 0: all).
pub(crate) fn reply_group_full(
    out: &mut ReplyBuf,
    s: &StreamValue,
    name: &[u8],
    g: &Group,
    count: usize,
) {
    let take = if count == 0 { usize::MAX } else { count };
    out.map(7);
    out.bulk(b"name");
    out.bulk(name);
    out.bulk(b"last-delivered-id");
    out.bulk(g.last_id.text().as_bytes());
    reply_read_counters(out, s, g);
    out.bulk(b"pel-count");
    out.int(g.pel.len() as i64);
    out.bulk(b"pending");
    let pel: Vec<_> = g.pel.iter().take(take).collect();
    out.array(pel.len());
    for (id, n) in pel {
        out.array(4);
        out.bulk(id.text().as_bytes());
        out.bulk(n.consumer());
        out.int(n.delivery_time);
        out.int(n.delivery_count as i64);
    }
    out.bulk(b"consumers");
    out.array(g.consumers.len());
    for (cname, c) in &g.consumers {
        out.map(4);
        out.bulk(b"name");
        out.bulk(cname);
        out.bulk(b"seen-time");
        out.int(c.seen_time);
        out.bulk(b"pel-count");
        out.int(g.pel.count_of(cname) as i64);
        out.bulk(b"pending");
        let ids: Vec<_> = g.pel.of(cname).take(take).collect();
        out.array(ids.len());
        for (id, n) in ids {
            out.array(3);
            out.bulk(id.text().as_bytes());
            out.int(n.delivery_time);
            out.int(n.delivery_count as i64);
        }
    }
}
