//! How a link applies a stream write's fact (keyspace/merge/stream.rs,
//! `Told`; DECISIONS 165-168): an XADD's entry, the entries an XDEL
//! removed, a trim's threshold. Where the fact's base is here (the key's
//! stamp context has seen the origin's previous write of the key, and
//! every entry the write removed), it applies in O(what it names) even
//! where the key moved here through this node's own writes: IDs never
//! collide (they end in their node's slot), so a peer's entry lands in ID
//! order beside ours. Else (a gap, a key absent here (but for the XADD
//! that made it, DECISIONS 297), or with a TTL its state's register does
//! not give, 298) the caller asks for the key's state, as every stream
//! write whose base moved did before.
//!
//! Consumer groups (DECISIONS 239, 240, 254, 255): an XACK's fact (the
//! pending dots it removed), a `>` read's unit (its XCLAIMs and SETID, the
//! fact on the first), a claim's records and XGROUP's subcommands
//! (`group_writes.rs`) apply the same way where the group here is as the
//! origin saw it, in O(what they name) plus the replay's note (O(the
//! group's pending entries and consumers), not O(entries)).
//!
//! What the fact changes is written through ordinary commands replayed
//! with the write's stamp (XADD of the entry with its ID, XDEL of the
//! entries still here, XTRIM MINID just above the threshold), so the AOF
//! and plain replicas see ordinary writes; the key and its merge state
//! then stand at the newer of their version here and the stamp, as every
//! node that applied the same writes does.

use crate::effects::Fact;
use crate::keyspace::merge::fact::NotApplied;
use crate::keyspace::merge::groups::writes::ClaimTold;
use crate::keyspace::merge::groups::{self, AckTold, GroupMeta, Part, ReadTold};
use crate::keyspace::merge::state::typed;
use crate::keyspace::merge::stream::{stream_of, SetidTold, Stream, Told};
use crate::keyspace::merge::{MergeType, Meta};
use crate::keyspace::stream::{StreamId, StreamValue};
use crate::keyspace::stream_groups::Group;
use crate::keyspace::Value;
use crate::protocol::Args;

use super::link::Link;

mod group_writes;

/// Whether a record's command is a stream write that carries a fact.
pub(super) fn is_stream_write(argv: &Args) -> bool {
    let name = argv.get(0);
    [
        &b"xadd"[..],
        b"xdel",
        b"xtrim",
        b"xack",
        b"xclaim",
        b"xgroup",
        b"xsetid",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// A full entry ID as a record carries it (`ms-seq`).
fn id_of(a: &[u8]) -> Option<StreamId> {
    let text = std::str::from_utf8(a).ok()?;
    let (ms, seq) = text.split_once('-')?;
    Some(StreamId::new(ms.parse().ok()?, seq.parse().ok()?))
}

impl Link {
    /// Applies a stream write's fact to `key`; false where it does not
    /// apply here: the caller asks for the key's state.
    pub(super) fn apply_stream_fact(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        argv: &Args,
    ) -> bool {
        let name = argv.get(0);
        if name.eq_ignore_ascii_case(b"xack") {
            return self.apply_ack_fact(db, key, stamp, facts, argv);
        }
        if name.eq_ignore_ascii_case(b"xclaim") {
            let told = ClaimTold::decode(facts);
            return told.is_some_and(|t| self.apply_claims(db, key, stamp, &t, &[*argv]));
        }
        if name.eq_ignore_ascii_case(b"xgroup") {
            if ReadTold::decode(facts).is_some_and(|t| t.noack.is_some()) {
                return self.apply_group_read(db, key, stamp, facts, &[*argv]);
            }
            return self.apply_xgroup_fact(db, key, stamp, facts, argv);
        }
        if name.eq_ignore_ascii_case(b"xsetid") {
            return self.apply_setid_fact(db, key, stamp, facts, argv);
        }
        let Some(told) = Told::decode(facts) else {
            return false;
        };
        if told.made.is_some() {
            return self.apply_made_fact(db, key, stamp, &told, argv);
        }
        let id_at = |i: u32| (i >= 2 && (i as usize) < argv.len()).then(|| argv.get(i as usize));
        let id_at = |i: u32| id_at(i).and_then(id_of);
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let version = g.version_of(slot.hash, key);
        let (state, checked) = {
            let Some(e) = g.get_raw(slot.hash, key) else {
                return false; // made again here or there: states join
            };
            let Value::Stream(s) = &e.value else {
                return false;
            };
            let Ok(meta) = typed::<Stream>(g.merge_meta(key)) else {
                return false;
            };
            let state = Stream::current(meta, version, Some(&e.value));
            if ttl_unfit(&state, e.expire_at()) {
                return false; // a key with a TTL merges by its state
            }
            let checked = state.check_fact(stamp, &told, s, id_at);
            (state, checked)
        };
        match checked {
            Ok(()) => {}
            Err(NotApplied::Duplicate) => return true,
            Err(NotApplied::Gap) => return false,
        }
        g.set_merge_meta(key, state.wrap());
        drop(g);
        self.replay_stream_fact(db, key, stamp, &told, argv);
        self.settle_stream(db, key, stamp, version.max(stamp));
        true
    }

    /// Applies the fact of an XADD that made the stream (DECISIONS 297):
    /// replayed as it came where the key is absent here too and its state
    /// prints as the one the origin made the key on (`missing_here`), so
    /// the replay makes the origin's stream and state; false where it does
    /// not apply here: the caller asks for the key's state.
    fn apply_made_fact(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        told: &Told,
        argv: &Args,
    ) -> bool {
        let checked = self.checked_here(db, key, |g, at| missing_here(g, at, (stamp, told.made)));
        let version = match checked {
            Ok((version, _)) => version,
            Err(applied) => return applied,
        };
        self.replay_args(db, stamp, *argv);
        self.settle_stream(db, key, stamp, version.max(stamp));
        true
    }

    /// The fact's changes as commands stamped `stamp`: the entry added,
    /// the entries removed that are still here, the trim.
    fn replay_stream_fact(&mut self, db: usize, key: &[u8], stamp: u64, told: &Told, argv: &Args) {
        if let Some(i) = told.add {
            let mut xadd: Vec<&[u8]> = vec![b"XADD", key];
            xadd.extend((i as usize..argv.len()).map(|j| argv.get(j)));
            self.replay(db, stamp, &xadd);
        }
        let here = |ks: &crate::keyspace::Keyspace, id: StreamId| {
            let slot = ks.slot(key);
            let g = ks.db(db).lock(slot.shard);
            let v = g.get_raw(slot.hash, key).map(|e| &e.value);
            stream_of(v).is_some_and(|s| s.entry(id).is_some())
        };
        let node = self.node.clone();
        let ks = &node.core().keyspace;
        let drops: Vec<&[u8]> = (told.drops.iter())
            .map(|&i| argv.get(i as usize))
            .filter(|a| id_of(a).is_some_and(|id| here(ks, id)))
            .collect();
        if !drops.is_empty() {
            let mut xdel: Vec<&[u8]> = vec![b"XDEL", key];
            xdel.extend(drops);
            self.replay(db, stamp, &xdel);
        }
        if let Some((t, _)) = &told.trim {
            let above = t.next().map(|n| n.text());
            let xtrim: Vec<&[u8]> = match &above {
                Some(min) => vec![b"XTRIM", key, b"MINID", min.as_bytes()],
                None => vec![b"XTRIM", key, b"MAXLEN", b"0"],
            };
            self.replay(db, stamp, &xtrim);
        }
    }

    /// After a stream fact's commands: the key and its merge state at
    /// `version` (the newer of the key's before and the write's `stamp`).
    /// The state is what the origin's next write reads: brought to the
    /// write's stamp as `Stream::current` does (an XADD's own note left it
    /// there already; an XDEL or trim notes nothing), then at `version`.
    fn settle_stream(&mut self, db: usize, key: &[u8], stamp: u64, version: u64) {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        {
            let mut g = ks.db(db).lock(slot.shard);
            let meta = g.merge_meta(key).and_then(Meta::get);
            let value = g.get_raw(slot.hash, key).map(|e| &e.value);
            let mut s = Stream::current(meta, stamp, value);
            s.version = version;
            g.set_merge_meta(key, s.wrap());
            g.raise_version(slot.hash, key, version);
        }
        self.note_merge_state(db, key);
    }
}

/// Whether a stream fact cannot apply to a key expiring at `at` (0: no
/// TTL) whose state is `state` for its TTL: it has one and its state's
/// register does not give it (or such facts are off). Applying there would
/// refresh the register from the key, a dot no other node has (DECISIONS
/// 228, 298): the key's state decides instead.
fn ttl_unfit(state: &Stream, at: u64) -> bool {
    at != 0 && (!crate::keyspace::merge::stream::TTL_WRITE_FACTS || state.ttl.at() != at)
}

/// A stream fact checked here: the key a stream with no TTL (or one its
/// state's TTL register gives: [`ttl_unfit`]) and a
/// stream's state, brought to its version `version` here (the state
/// returned), not a duplicate and its `PREV` seen, then `check` given the
/// state and the stream (Gap where it says None).
fn stream_fact_here<R>(
    g: &crate::keyspace::Shard,
    (hash, key, version): (u64, &[u8], u64),
    (stamp, prev): (u64, u64),
    check: impl FnOnce(&Stream, &StreamValue) -> Option<R>,
) -> Result<(Stream, R), NotApplied> {
    let e = g.get_raw(hash, key).ok_or(NotApplied::Gap)?;
    let Value::Stream(v) = &e.value else {
        return Err(NotApplied::Gap);
    };
    let meta = typed::<Stream>(g.merge_meta(key)).map_err(|_| NotApplied::Gap)?;
    let state = Stream::current(meta, version, Some(&e.value));
    if ttl_unfit(&state, e.expire_at()) {
        return Err(NotApplied::Gap);
    }
    if state.cc.covers(stamp) {
        return Err(NotApplied::Duplicate);
    }
    if prev != 0 && !state.cc.covers(prev) {
        return Err(NotApplied::Gap);
    }
    let r = check(&state, v).ok_or(NotApplied::Gap)?;
    Ok((state, r))
}

/// A write that makes a stream (XGROUP CREATE ... MKSTREAM, DECISIONS
/// 286; XADD, 297) checked here: the key absent here too, and its stream state here (a deleted
/// stream's, brought to its version as the origin's command brought its
/// own) the one the origin made the key on (the same `print`), so the
/// replay makes the origin's stream and state.
fn missing_here(
    g: &crate::keyspace::Shard,
    (hash, key, version): (u64, &[u8], u64),
    (stamp, print): (u64, Option<u64>),
) -> Result<(Stream, Option<Part>), NotApplied> {
    if g.get_raw(hash, key).is_some() {
        return Err(NotApplied::Gap);
    }
    let meta = typed::<Stream>(g.merge_meta(key)).map_err(|_| NotApplied::Gap)?;
    let mut state = Stream::current(meta, version, None);
    state.ttl.refresh(version, false, 0);
    if state.cc.covers(stamp) {
        return Err(NotApplied::Duplicate);
    }
    match Some(state.print()) == print {
        true => Ok((state, None)),
        false => Err(NotApplied::Gap),
    }
}

/// A group fact checked here (DECISIONS 239, 240, 254, 255): as
/// [`stream_fact_here`], then `check` given the state, the stream and the
/// group's value and state (Gap where the group is not here).
fn group_fact_here<R>(
    g: &crate::keyspace::Shard,
    at: (u64, &[u8], u64),
    (stamp, prev, group): (u64, u64, &[u8]),
    check: impl FnOnce(&Stream, &StreamValue, &Group, &GroupMeta) -> Option<R>,
) -> Result<(Stream, R), NotApplied> {
    stream_fact_here(g, at, (stamp, prev), |state, v| {
        let (gv, gm) = (v.groups.get(group)?, state.groups.get(group)?);
        check(state, v, gv, gm)
    })
}

/// A consumer group read's unit as its records say it: `XCLAIM key group
/// consumer 0 id TIME t RETRYCOUNT n FORCE JUSTID LASTID last` per entry
/// delivered, then `XGROUP SETID key group last ENTRIESREAD n`.
struct ReadUnit<'a> {
    group: &'a [u8],
    read: groups::Read<'a>,
    times: Vec<i64>,
}

/// A read's `XGROUP SETID key group last ENTRIESREAD n` record: its group
/// and the register it sets.
fn setid_of<'a>(key: &[u8], setid: &Args<'a>) -> Option<(&'a [u8], (StreamId, i64))> {
    let num = |a: &[u8]| std::str::from_utf8(a).ok()?.parse::<i64>().ok();
    let is = |a: &[u8], n: &[u8]| a.eq_ignore_ascii_case(n);
    if setid.len() != 7 || !is(setid.get(0), b"xgroup") || !is(setid.get(1), b"setid") {
        return None;
    }
    if setid.get(2) != key || !is(setid.get(5), b"entriesread") {
        return None;
    }
    Some((setid.get(3), (id_of(setid.get(4))?, num(setid.get(6))?)))
}

fn read_unit<'a>(key: &[u8], writes: &[Args<'a>]) -> Option<ReadUnit<'a>> {
    let (setid, claims) = writes.split_last()?;
    let num = |a: &[u8]| std::str::from_utf8(a).ok()?.parse::<i64>().ok();
    let is = |a: &[u8], n: &[u8]| a.eq_ignore_ascii_case(n);
    let (group, last) = setid_of(key, setid)?;
    let consumer = claims.first()?.get(3);
    let (mut ids, mut times) = (Vec::new(), Vec::new());
    for c in claims {
        let shape = c.len() == 14 && is(c.get(0), b"xclaim") && is(c.get(6), b"time");
        if !shape || c.get(1) != key || c.get(2) != group || c.get(3) != consumer {
            return None;
        }
        if c.get(4) != b"0" || !is(c.get(11), b"justid") || id_of(c.get(13))? != last.0 {
            return None;
        }
        ids.push(id_of(c.get(5))?);
        times.push(num(c.get(7))?);
    }
    let read = groups::Read {
        consumer,
        ids,
        last,
    };
    Some(ReadUnit { group, read, times })
}

/// A NOACK read's unit as its records say it (DECISIONS 285): `XGROUP
/// CREATECONSUMER key group consumer` where it made the consumer, then
/// `XGROUP SETID key group last ENTRIESREAD n`; its consumer `name` (found
/// by [`Link::noack_consumer`]); nothing delivered is pending.
fn noack_unit<'a>(key: &[u8], writes: &[Args<'a>], name: &'a [u8]) -> Option<ReadUnit<'a>> {
    let (setid, made) = writes.split_last()?;
    let (group, last) = setid_of(key, setid)?;
    let is = |a: &[u8], n: &[u8]| a.eq_ignore_ascii_case(n);
    if let [c] = made {
        let shape = c.len() == 5 && is(c.get(0), b"xgroup") && is(c.get(1), b"createconsumer");
        if !shape || c.get(2) != key || c.get(3) != group || c.get(4) != name {
            return None;
        }
    } else if !made.is_empty() {
        return None;
    }
    let read = groups::Read {
        consumer: name,
        ids: Vec::new(),
        last,
    };
    Some(ReadUnit {
        group,
        read,
        times: Vec::new(),
    })
}

impl Link {
    /// The consumer a NOACK read's unit (`writes`) names: the one its
    /// `XGROUP CREATECONSUMER` makes, else the one consumer of its group
    /// here whose name has the fact's `print` (None: none, or two).
    fn noack_consumer(
        &self,
        db: usize,
        key: &[u8],
        writes: &[Args],
        print: u64,
    ) -> Option<Vec<u8>> {
        if let [made, _] = writes {
            return Some(made.get(4).to_vec()).filter(|_| made.len() == 5);
        }
        let group = writes.first()?.get(3);
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let g = ks.db(db).lock(slot.shard);
        let v = stream_of(g.get_raw(slot.hash, key).map(|e| &e.value))?;
        let fingerprint = crate::keyspace::merge::context::fingerprint;
        let mut named = (v.groups.get(group)?.consumers.keys()).filter(|n| fingerprint(n) == print);
        match (named.next(), named.next()) {
            (Some(name), None) => Some(name.to_vec()),
            _ => None,
        }
    }

    /// Applies XSETID's fact to `key` (DECISIONS 284): replayed where the
    /// stream's state here prints as the one the origin's write built on;
    /// false where it does not apply here: the caller asks for the key's
    /// state.
    fn apply_setid_fact(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        argv: &Args,
    ) -> bool {
        let Some(told) = SetidTold::decode(facts) else {
            return false;
        };
        let checked = self.checked_here(db, key, |g, at| {
            stream_fact_here(g, at, (stamp, told.prev), |state, _| {
                (state.setid_print() == told.print).then_some(())
            })
        });
        let version = match checked {
            Ok((version, ())) => version,
            Err(applied) => return applied,
        };
        self.replay_args(db, stamp, *argv);
        self.settle_stream(db, key, stamp, version.max(stamp));
        true
    }

    /// Applies an XACK's fact to `key` (DECISIONS 239); false where it does
    /// not apply here: the caller asks for the key's state.
    fn apply_ack_fact(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        argv: &Args,
    ) -> bool {
        let Some(told) = AckTold::decode(facts) else {
            return false;
        };
        let group = argv.get(2);
        let id_at = |i: u32| (i >= 3 && (i as usize) < argv.len()).then(|| argv.get(i as usize));
        let id_at = |i: u32| id_at(i).and_then(id_of);
        let checked = self.checked_here(db, key, |g, at| {
            group_fact_here(g, at, (stamp, told.prev, group), |state, _, gv, gm| {
                groups::check_ack((gv, gm), &state.cc, &told, id_at)
            })
        });
        let (version, here) = match checked {
            Ok(c) => c,
            Err(applied) => return applied,
        };
        if !here.is_empty() {
            let texts: Vec<String> = here.iter().map(|id| id.text()).collect();
            let mut xack: Vec<&[u8]> = vec![b"XACK", key, group];
            xack.extend(texts.iter().map(|t| t.as_bytes()));
            self.replay(db, stamp, &xack);
        }
        self.settle_stream(db, key, stamp, version.max(stamp));
        true
    }

    /// Applies a consumer group read's unit (`writes`, all of `key`, the
    /// first carrying `facts`) at `stamp` (DECISIONS 240); false where it
    /// does not apply here: the caller asks for the key's state.
    pub(super) fn apply_group_read(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        writes: &[Args],
    ) -> bool {
        let ks = &self.node.core().keyspace;
        if stamp < ks.db(db).lock(ks.slot(key).shard).flushed_at() {
            return true; // gone, as for any fact (facts.rs)
        }
        if let Some(told) = ClaimTold::decode(facts) {
            return self.apply_claims(db, key, stamp, &told, writes);
        }
        let Some(told) = ReadTold::decode(facts) else {
            return false;
        };
        let name = match told.noack {
            Some(print) => match self.noack_consumer(db, key, writes, print) {
                Some(name) => name,
                None => return false,
            },
            None => Vec::new(),
        };
        let unit = match told.noack {
            Some(_) => noack_unit(key, writes, &name),
            None => read_unit(key, writes),
        };
        let Some(unit) = unit else {
            return false;
        };
        let checked = self.checked_here(db, key, |g, at| {
            group_fact_here(g, at, (stamp, told.prev, unit.group), |state, v, gv, gm| {
                let ok = groups::check_read((gv, gm), &state.cc, &told, &unit.read, v);
                ok.then(|| gm.consumers.get(unit.read.consumer).copied())
            })
        });
        let (version, part) = match checked {
            Ok(c) => c,
            Err(applied) => return applied,
        };
        for w in writes {
            self.replay_args(db, stamp, *w);
        }
        let times = unit.read.ids.iter().copied().zip(unit.times).collect();
        let origin = AsOrigin {
            group: unit.group,
            times,
            consumer: Some((unit.read.consumer, told.seen, part)),
            reset: Some(told.reset),
        };
        self.as_the_origin(db, key, stamp, &origin);
        self.settle_stream(db, key, stamp, version.max(stamp));
        true
    }

    /// A group fact's `check` (given the key's shard and `(hash, key,
    /// version)`: [`group_fact_here`], [`stream_fact_here`]) run under the
    /// key's lock; where it holds, the state it brought up to date kept.
    /// The key's version before and what `check` gave, or whether the
    /// fact counts as applied (a duplicate) where it does not hold.
    pub(super) fn checked_here<R>(
        &mut self,
        db: usize,
        key: &[u8],
        check: impl FnOnce(
            &crate::keyspace::Shard,
            (u64, &[u8], u64),
        ) -> Result<(Stream, R), NotApplied>,
    ) -> Result<(u64, R), bool> {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let version = g.version_of(slot.hash, key);
        match check(&g, (slot.hash, key, version)) {
            Ok((state, r)) => {
                g.set_merge_meta(key, state.wrap());
                Ok((version, r))
            }
            Err(NotApplied::Duplicate) => Err(true),
            Err(NotApplied::Gap) => Err(false),
        }
    }

    /// After a group write's replay: what the replay took from its own
    /// clock set to the origin's (`origin`: delivery times, a consumer's
    /// seen time, where a record gives none or one ahead of our clock),
    /// the group noted again at `stamp`, its reset the origin's where
    /// given (a read's SETID after its XCLAIMs' LASTID may read as one),
    /// the consumer's dot kept where the origin's seen time did not move.
    pub(super) fn as_the_origin(&mut self, db: usize, key: &[u8], stamp: u64, origin: &AsOrigin) {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let Some(Value::Stream(v)) = g.find_mut(slot.hash, key).map(|e| &mut e.value) else {
            return;
        };
        let Some(gv) = v.groups.get_mut(origin.group) else {
            return;
        };
        for (id, t) in &origin.times {
            if let Some(n) = gv.pel.get_mut(id) {
                n.delivery_time = *t;
            }
        }
        if let Some((name, seen, _)) = origin.consumer {
            if let Some(c) = gv.consumers.get_mut(name) {
                c.seen_time = seen as i64;
            }
        }
        let gv = gv.clone();
        let Ok(Some(meta)) = typed::<Stream>(g.merge_meta(key)) else {
            return;
        };
        let mut s = Stream::clone(meta);
        if let Some(m) = s.groups.get_mut(origin.group) {
            m.note(&gv, stamp);
            m.reset = origin.reset.unwrap_or(m.reset);
            if let Some((name, seen, Some(p))) = origin.consumer {
                if p.print == seen {
                    m.consumers.insert(name.to_vec(), p);
                }
            }
        }
        g.set_merge_meta(key, s.wrap());
    }
}

/// What a group write's replay sets back to the origin's
/// ([`Link::as_the_origin`]): per entry its delivery time; the consumer
/// the write touched, its seen time after and its state before; the
/// group's reset after.
pub(super) struct AsOrigin<'a> {
    pub group: &'a [u8],
    pub times: Vec<(StreamId, i64)>,
    pub consumer: Option<(&'a [u8], u64, Option<Part>)>,
    pub reset: Option<u64>,
}
