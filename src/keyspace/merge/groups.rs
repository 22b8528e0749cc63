//! A stream's consumer groups under active replication (issue 25 item 5,
//! docs/MERGE-DESIGN.md section 10, DECISIONS 107 and 130-133): the merge state
//! kept per group beside a stream's ([`super::stream::Stream`]), so that
//! group writes made on two nodes at once converge per entry instead of one
//! side's groups winning whole.
//!
//! Every part carries a *dot*, the stamp of the write that last set it; a
//! side lacking a part whose dot its causal context covers removed it:
//! - a **group** is an observed-remove member: its dots are those of the
//!   XGROUP CREATEs that made it; DESTROY removes the dots it saw, so a
//!   group made again elsewhere at once survives, and reads or acks in a
//!   destroyed group do not bring it back;
//! - its **last-delivered ID** is a register `(reset, last ID, entries
//!   read)`: the later reset (CREATE, or a SETID that moved the ID back)
//!   wins, equal resets take the larger ID (reads only move it forward);
//! - a **pending entry** (PEL) is a multi-value register by dot: it keeps
//!   the dots of the deliveries and claims that set it and no write has
//!   seen replaced; a dot survives a join where the other side holds it or
//!   has not seen it (XACK, a consumer deleted, a claim of an entry gone are
//!   observed removes of every dot they saw), so an XACK never drops a claim
//!   or a delivery it did not see; the NACK shown is the latest surviving
//!   dot's, the delivery count the larger;
//! - a **consumer** is an observed-remove member whose dot is refreshed by
//!   every write that touches it, seen time by maximum; a consumer that owns
//!   a surviving pending entry survives with it;
//! - pending entries and consumers belong to the group's *incarnation*
//!   where they were made (its newest CREATE dot) and die with it: a group
//!   destroyed and made again does not take in what was read in the old
//!   one, whichever order joins and the new CREATE come in.
//!
//! Dots are given by diffing ([`GroupMeta::note`]): before a group write
//! the state is brought up to the key's version (`Stream::current`), after
//! it every part that is new or changed gets the write's stamp. A replayed
//! write (a peer's record, the AOF) runs the same commands at the same
//! stamp, so it gives the same dots; a pending entry is compared by a print
//! of (consumer, delivery time, delivery count), which XREADGROUP and the
//! XCLAIM records it propagates set alike.

pub(crate) mod writes;

use std::collections::BTreeMap;

use super::codec::{put_bytes, put_varint, Cursor};
use super::context::{fingerprint, Context};
use crate::keyspace::stream::{StreamId, StreamValue};
use crate::keyspace::stream_groups::{Consumer, Group, Nack, Pel, INVALID_ENTRIES_READ};

/// One group's merge state (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GroupMeta {
    /// The dots of the XGROUP CREATEs that made it, none seen removed
    /// (sorted; one but where two nodes made it at once).
    pub dots: Vec<u64>,
    /// The stamp of the write that last set its last-delivered ID back
    /// (CREATE, SETID to a smaller ID).
    pub reset: u64,
    /// Its last-delivered ID at the last note (a smaller one is a reset).
    pub last_id: StreamId,
    /// Its entries-read at the last note (None: a state written before it
    /// was kept, DECISIONS 238); one changed with the ID left is a reset.
    pub read: Option<i64>,
    /// The stamp of the write that last moved its register `(last ID,
    /// entries-read)` (0: unknown, a state written before it was kept): a
    /// side that has not seen the other's moved its own at once, and the
    /// join counts entries-read again from the joined stream (DECISIONS
    /// 257).
    pub moved: u64,
    /// Per pending entry: its dots and the print of its NACK then.
    pub pel: BTreeMap<StreamId, Pending>,
    /// Per consumer: its dot, its seen time then, the CREATE dot it was
    /// made under.
    pub consumers: BTreeMap<Vec<u8>, Part>,
}

/// A pending entry's merge state: the dots of the deliveries and claims
/// that set it, with the CREATE dot each was made under (more than one
/// where nodes set it at once and no write has seen both since: the NACK
/// is the latest's; a write that changes or removes it removes them all),
/// and the print of its NACK.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Pending {
    /// (dot, incarnation), sorted.
    pub dots: Vec<(u64, u64)>,
    pub print: u64,
}

/// A consumer's merge state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Part {
    /// The stamp of the write that last set it.
    pub dot: u64,
    /// What tells it changed: a pending entry's print, a consumer's seen
    /// time.
    pub print: u64,
    /// The incarnation of the group it belongs to: the newest CREATE dot
    /// of the group where it was made. It dies with that CREATE (a DESTROY
    /// or DEL that saw it), even where the group is made again.
    pub inc: u64,
}

/// The groups' merge states of a stream, by group name.
pub(crate) type Groups = BTreeMap<Vec<u8>, GroupMeta>;

/// What tells a NACK changed.
fn print(n: &Nack) -> u64 {
    let mut b = n.consumer().to_vec();
    b.extend_from_slice(&n.delivery_time.to_le_bytes());
    b.extend_from_slice(&n.delivery_count.to_le_bytes());
    fingerprint(&b)
}

impl GroupMeta {
    /// A group `stamp` made.
    fn made(stamp: u64, g: &Group) -> GroupMeta {
        GroupMeta {
            dots: vec![stamp],
            reset: stamp,
            last_id: g.last_id,
            read: Some(g.entries_read),
            moved: stamp,
            ..Default::default()
        }
    }

    /// The incarnation parts made now belong to: its newest CREATE dot.
    pub fn incarnation(&self) -> u64 {
        self.dots.iter().copied().max().unwrap_or_default()
    }

    /// After a write stamped `stamp` left the group as `g`: every pending
    /// entry or consumer new or changed since the last note gets `stamp`
    /// (a new one, the group's incarnation); a last-delivered ID moved back,
    /// or its entries-read lowered where the ID stayed (`XGROUP SETID` of
    /// the same ID with a smaller ENTRIESREAD), is a reset: the register
    /// `(ID, entries-read)` went back (DECISIONS 238).
    pub fn note(&mut self, g: &Group, stamp: u64) {
        let recounted = g.last_id == self.last_id && self.read.is_some_and(|r| g.entries_read < r);
        if g.last_id < self.last_id || recounted {
            self.reset = stamp;
        }
        if g.last_id != self.last_id || self.read.is_some_and(|r| r != g.entries_read) {
            self.moved = stamp;
        }
        self.last_id = g.last_id;
        self.read = Some(g.entries_read);
        let inc = self.incarnation();
        note_pel(&mut self.pel, g, (stamp, inc));
        let seen = (g.consumers.iter()).map(|(name, c)| (name.clone(), c.seen_time as u64));
        note_parts(&mut self.consumers, seen, (stamp, inc));
    }

    /// The state that describes `g` exactly (after a join chose its parts'
    /// dots).
    fn describing(mut self, g: &Group) -> GroupMeta {
        self.last_id = g.last_id;
        self.read = Some(g.entries_read);
        for (id, e) in self.pel.iter_mut() {
            e.print = print(&g.pel[id]);
        }
        for (name, e) in self.consumers.iter_mut() {
            e.print = g.consumers[name].seen_time as u64;
        }
        self
    }
}

/// The pending entries after a write stamped `stamp` left them as `g`'s:
/// those gone dropped, those new (of incarnation `inc`) or changed dotted
/// (a changed one keeps the incarnation of its latest dot).
fn note_pel(pel: &mut BTreeMap<StreamId, Pending>, g: &Group, (stamp, inc): (u64, u64)) {
    pel.retain(|id, _| g.pel.contains_key(id));
    for (id, n) in g.pel.iter() {
        let p = print(n);
        let e = pel.entry(*id).or_default();
        if e.dots.is_empty() || e.print != p {
            let inc = e.dots.last().map_or(inc, |d| d.1);
            *e = Pending {
                dots: vec![(stamp, inc)],
                print: p,
            };
        }
    }
}

/// `parts` after a write stamped `stamp` left them with `now`'s prints:
/// those gone dropped, those new (of incarnation `inc`) or changed dotted.
fn note_parts<K: Ord + Clone>(
    parts: &mut BTreeMap<K, Part>,
    now: impl Iterator<Item = (K, u64)>,
    (stamp, inc): (u64, u64),
) {
    let now: BTreeMap<K, u64> = now.collect();
    parts.retain(|k, _| now.contains_key(k));
    for (k, print) in now {
        let fresh = Part {
            dot: stamp,
            print,
            inc,
        };
        let e = parts.entry(k).or_insert(fresh);
        if e.print != print {
            (e.dot, e.print) = (stamp, print);
        }
    }
}

/// After a write stamped `stamp` left the stream's groups as `value`'s
/// (None: the key is gone): groups made get `stamp` as their dot, groups
/// gone are dropped, the others noted ([`GroupMeta::note`]).
pub(crate) fn note(groups: &mut Groups, value: Option<&StreamValue>, stamp: u64) {
    let Some(v) = value else {
        groups.clear();
        return;
    };
    groups.retain(|name, _| v.groups.contains_key(name));
    for (name, g) in &v.groups {
        groups
            .entry(name.clone())
            .or_insert_with(|| GroupMeta::made(stamp, g))
            .note(g, stamp);
    }
}

/// One side of a join: its groups' states, its stream, its causal context
/// and version (the dot of a part its state does not name: a write that
/// changed it without a note, such as a history read).
pub(crate) struct Side<'a> {
    pub groups: &'a Groups,
    pub value: Option<&'a StreamValue>,
    pub cc: &'a Context,
    pub version: u64,
}

/// A group as one side holds it, with its state.
struct Held<'a> {
    group: &'a Group,
    meta: std::borrow::Cow<'a, GroupMeta>,
}

impl<'a> Side<'a> {
    fn group(&self, name: &[u8]) -> Option<Held<'a>> {
        let group = self.value?.groups.get(name)?;
        let meta = match self.groups.get(name) {
            Some(m) => std::borrow::Cow::Borrowed(m),
            None => std::borrow::Cow::Owned(GroupMeta::made(self.version, group)),
        };
        Some(Held { group, meta })
    }
}

/// The group a side holds.
fn held_group<'h>(h: &Held<'h>) -> &'h Group {
    h.group
}

impl Held<'_> {
    /// The state of a part the side's state does not name (a write that
    /// changed it without a note): dotted with the side's version.
    fn unnamed(&self, version: u64) -> Part {
        Part {
            dot: version,
            print: 0,
            inc: self.meta.incarnation(),
        }
    }

    fn pel_dots(&self, id: &StreamId, version: u64) -> Vec<(u64, u64)> {
        match self.meta.pel.get(id) {
            Some(p) => p.dots.clone(),
            None => vec![(version, self.meta.incarnation())],
        }
    }

    fn consumer_part(&self, name: &[u8], version: u64) -> Part {
        (self.meta.consumers.get(name).copied()).unwrap_or_else(|| self.unnamed(version))
    }
}

/// Whether a part one side holds survives the join: its incarnation
/// survives, and the other side holds the same dot or has not seen it.
fn survives(p: Part, other: Option<Part>, other_cc: &Context, alive: &[u64]) -> bool {
    alive.contains(&p.inc) && (other.is_some_and(|o| o.dot == p.dot) || !other_cc.covers(p.dot))
}

/// The joined groups of two sides (the stream is present after the join):
/// each group as [`join_group`] gives it; the names of those whose
/// entries-read the joined stream must count again ([`recount`]).
pub(crate) fn join(a: &Side, b: &Side) -> (BTreeMap<Vec<u8>, Group>, Groups, Vec<Vec<u8>>) {
    let mut names: Vec<&Vec<u8>> = Vec::new();
    for s in [a, b] {
        if let Some(v) = s.value {
            names.extend(v.groups.keys());
        }
    }
    names.sort();
    names.dedup();
    let (mut groups, mut metas, mut recount) = (BTreeMap::new(), Groups::new(), Vec::new());
    for name in names {
        if let Some((g, m, concurrent)) = join_group(a, b, name) {
            groups.insert(name.clone(), g);
            metas.insert(name.clone(), m);
            if concurrent {
                recount.push(name.clone());
            }
        }
    }
    (groups, metas, recount)
}

/// Dots one side holds that survive: held by both, or unseen by the other.
fn surviving(mine: &[u64], theirs: &[u64], their_cc: &Context) -> Vec<u64> {
    (mine.iter())
        .filter(|d| theirs.contains(d) || !their_cc.covers(**d))
        .copied()
        .collect()
}

/// The group `name` after the join of `a` and `b`, and whether its
/// register moved on both sides at once; None where it was destroyed
/// (every dot of it one side holds, the other saw and lacks).
fn join_group(a: &Side, b: &Side, name: &[u8]) -> Option<(Group, GroupMeta, bool)> {
    let (ha, hb) = (a.group(name), b.group(name));
    let no_dots = Vec::new();
    let dots_of = |h: &Option<Held>| h.as_ref().map_or(no_dots.clone(), |h| h.meta.dots.clone());
    let (da, db) = (dots_of(&ha), dots_of(&hb));
    let mut dots = surviving(&da, &db, b.cc);
    dots.extend(surviving(&db, &da, a.cc));
    dots.sort_unstable();
    dots.dedup();
    if dots.is_empty() {
        return None;
    }
    // The last-delivered ID: the later reset, then the larger ID.
    let register = |h: &Option<Held>| {
        h.as_ref()
            .map(|h| (h.meta.reset, h.group.last_id, h.group.entries_read))
    };
    let (ra, rb) = (register(&ha), register(&hb));
    let (reset, last_id, entries_read) = ra.max(rb).expect("held");
    let moved = |h: &Option<Held>| h.as_ref().map_or(0, |h| h.meta.moved);
    let mut group = Group::new(last_id, entries_read);
    let mut meta = GroupMeta {
        dots,
        reset,
        moved: moved(&ha).max(moved(&hb)),
        ..Default::default()
    };
    join_pel((a, ha.as_ref()), (b, hb.as_ref()), &mut group, &mut meta);
    join_consumers((a, ha.as_ref()), (b, hb.as_ref()), &mut group, &mut meta);
    let meta = meta.describing(&group);
    let concurrent = match (ra, rb) {
        (Some(x), Some(y)) if x.0 == y.0 && x != y => {
            let (larger, smaller_moved) = if x > y {
                (a, moved(&hb))
            } else {
                (b, moved(&ha))
            };
            RECOUNT_CONCURRENT_READS && smaller_moved != 0 && !larger.cc.covers(smaller_moved)
        }
        _ => false,
    };
    Some((group, meta, concurrent))
}

/// After a join where group `name`'s register moved on both sides at once
/// (neither had seen the other's last move, so the larger side's count
/// misses the other's reads: DECISIONS 241, 257): its entries-read as
/// Redis 7.0 counts it on one node, every entry added up to its last ID,
/// where the joined stream `v` tells it: the entries added less those
/// after the last ID, where none after it was deleted; else Redis's
/// estimate (`estimate_distance`); else the larger side's count stays.
/// O(entries after the last ID).
pub(crate) fn recount(v: &mut StreamValue, name: &[u8], metas: &mut Groups) {
    let Some(last) = v.groups.get(name).map(|g| g.last_id) else {
        return;
    };
    let counted = if !v.has_tombstones(Some(last), None) {
        let after = last
            .next()
            .map_or(0, |n| v.range(n, StreamId::MAX, false).count());
        Some((v.entries_added as i64).wrapping_sub(after as i64))
    } else {
        Some(v.estimate_distance(last)).filter(|&r| r != INVALID_ENTRIES_READ)
    };
    let (Some(read), Some(g)) = (counted, v.groups.get_mut(name)) else {
        return;
    };
    g.entries_read = read;
    if let Some(m) = metas.get_mut(name) {
        m.read = Some(read);
    }
}

/// The pending entries: per entry, the dots of either side that survive
/// (their incarnation survives, and the other side holds the same dot or
/// has not seen it); kept where any does, with the NACK of the side whose
/// surviving dot is the latest and the larger delivery count.
fn join_pel(
    a: (&Side, Option<&Held>),
    b: (&Side, Option<&Held>),
    group: &mut Group,
    meta: &mut GroupMeta,
) {
    let empty = Pel::default();
    let pa = a.1.map_or(&empty, |h| &held_group(h).pel);
    let pb = b.1.map_or(&empty, |h| &held_group(h).pel);
    let dots = |s: (&Side, Option<&Held>), id: &StreamId| {
        (s.1.map(|h| h.pel_dots(id, s.0.version))).unwrap_or_default()
    };
    let ids: std::collections::BTreeSet<&StreamId> = pa.keys().chain(pb.keys()).collect();
    for id in ids {
        let da = pa.get(id).map_or(vec![], |_| dots(a, id));
        let db = pb.get(id).map_or(vec![], |_| dots(b, id));
        let keep = |mine: &[(u64, u64)], theirs: &[(u64, u64)], their_cc: &Context| {
            let seen = |d: &(u64, u64)| !theirs.iter().any(|t| t.0 == d.0) && their_cc.covers(d.0);
            let kept: Vec<(u64, u64)> = (mine.iter())
                .filter(|d| meta.dots.contains(&d.1) && !seen(d))
                .copied()
                .collect();
            kept
        };
        let (ka, kb) = (keep(&da, &db, b.0.cc), keep(&db, &da, a.0.cc));
        let mut cands: Vec<(u64, &Nack)> = Vec::new();
        if let Some(top) = ka.iter().map(|d| d.0).max() {
            cands.push((top, &pa[id]));
        }
        if let Some(top) = kb.iter().map(|d| d.0).max() {
            cands.push((top, &pb[id]));
        }
        let key = |c: &&(u64, &Nack)| {
            let n = c.1;
            (
                c.0,
                n.delivery_time,
                n.delivery_count,
                n.consumer().to_vec(),
            )
        };
        let Some(&(_, n)) = cands.iter().max_by_key(key) else {
            continue;
        };
        let count = cands
            .iter()
            .map(|c| c.1.delivery_count)
            .max()
            .unwrap_or_default();
        let mut all: Vec<(u64, u64)> = ka.into_iter().chain(kb).collect();
        all.sort_unstable();
        all.dedup();
        meta.pel.insert(
            *id,
            Pending {
                dots: all,
                print: 0,
            },
        );
        group.pel.insert(*id, n.consumer(), n.delivery_time, count);
    }
}

/// The consumers: per name, the candidates of either side that survive
/// ([`survives`]), seen time by maximum; with none, kept where it owns a
/// surviving pending entry. Each consumer's own PEL is then the group's
/// entries naming it.
fn join_consumers(
    a: (&Side, Option<&Held>),
    b: (&Side, Option<&Held>),
    group: &mut Group,
    meta: &mut GroupMeta,
) {
    let empty = BTreeMap::new();
    let ca = a.1.map_or(&empty, |h| &held_group(h).consumers);
    let cb = b.1.map_or(&empty, |h| &held_group(h).consumers);
    let part =
        |s: (&Side, Option<&Held>), name: &[u8]| s.1.map(|h| h.consumer_part(name, s.0.version));
    let owners: std::collections::BTreeSet<Vec<u8>> =
        group.pel.values().map(|n| n.consumer().to_vec()).collect();
    let names: std::collections::BTreeSet<&Vec<u8>> = ca.keys().chain(cb.keys()).collect();
    for name in names {
        let xa = (ca.get(name)).and_then(|c| Some((part(a, name)?, c.seen_time)));
        let xb = (cb.get(name)).and_then(|c| Some((part(b, name)?, c.seen_time)));
        let (pa, pb) = (xa.map(|x| x.0), xb.map(|x| x.0));
        let mut cands = Vec::new();
        cands.extend(xa.filter(|x| survives(x.0, pb, b.0.cc, &meta.dots)));
        cands.extend(xb.filter(|x| survives(x.0, pa, a.0.cc, &meta.dots)));
        if cands.is_empty() && owners.contains(name) {
            let inc = meta.incarnation();
            cands.extend(
                xa.into_iter()
                    .chain(xb)
                    .map(|(p, seen)| (Part { inc, ..p }, seen)),
            );
        }
        let Some(&(p, _)) = cands.iter().max_by_key(|c| c.0.dot) else {
            continue;
        };
        let seen = cands.iter().map(|c| c.1).max().unwrap_or_default();
        meta.consumers.insert(name.clone(), p);
        let c = Consumer { seen_time: seen };
        group.consumers.insert(name.clone(), c);
    }
    // An owner neither side lists (a damaged state): made, seen when it got
    // the entry.
    let nacks: Vec<(StreamId, Nack)> = group.pel.iter().map(|(i, n)| (*i, n.clone())).collect();
    for (id, n) in nacks {
        group
            .consumers
            .entry(n.consumer().to_vec())
            .or_insert_with(|| {
                let &(dot, inc) = meta.pel[&id].dots.last().expect("kept");
                let part = Part { dot, print: 0, inc };
                meta.consumers.insert(n.consumer().to_vec(), part);
                Consumer {
                    seen_time: n.delivery_time,
                }
            });
    }
}

/// Whether XACK and XREADGROUP's `>` reads travel as facts (DECISIONS
/// 239, 240): applied at a peer in O(what they name) where their causal
/// base holds there, else the peer asks for the key's state as for every
/// other group write (DECISIONS 182). Only with stream facts on.
pub const GROUP_FACTS: bool = true;

/// Whether a join counts a group's entries-read again from the joined
/// stream where its register moved on both sides at once, and a read's
/// fact applies only where the register is the origin's before (DECISIONS
/// 257; a switch for bisecting: off, the larger side's count stays, and
/// lag may overstate after concurrent reads, DECISIONS 241).
pub(crate) const RECOUNT_CONCURRENT_READS: bool = true;

/// An XACK's fact: `PREV 1, s` (the origin's newest stamp on the key) and
/// per ID it acknowledged (argument i) per dot its pending entry held,
/// `DROP i, dot`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct AckTold {
    pub prev: u64,
    pub drops: Vec<(u32, u64)>,
}

/// An XREADGROUP `>` read's fact, on the first XCLAIM record of its unit
/// (the IDs it delivered, their times and counts, the group's new last ID
/// and entries-read are the unit's records): `PREV 1, s`; `RESET 0, r` the
/// group's reset; `RESET 1, inc` its incarnation; `RESET 2, d` the
/// consumer's dot before the read (0: it had none); `RESET 3, m` the
/// group's moved dot before it (DECISIONS 257); `WORD 0, t` the
/// consumer's seen time after it (a replay would take its own clock's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadTold {
    pub prev: u64,
    pub reset: u64,
    /// The group's moved dot before the read (DECISIONS 257).
    pub moved: u64,
    pub inc: u64,
    pub consumer: u64,
    pub seen: u64,
    /// A NOACK read's (`WORD 7, p`, DECISIONS 285; an index no other
    /// group fact uses): the print of its
    /// consumer's name, which its records (`XGROUP SETID`, after an
    /// `XGROUP CREATECONSUMER` where the read made the consumer) do not
    /// name otherwise.
    pub noack: Option<u64>,
}

/// The `WORD` of a NOACK read's fact that names its consumer.
const NOACK_WORD: u32 = 7;

fn kind_at(kind: u32, i: u32) -> u32 {
    kind | (i << super::fact::SHIFT)
}

impl AckTold {
    pub(crate) fn encode(&self, facts: &mut Vec<super::fact::Fact>) {
        facts.push((kind_at(super::fact::PREV, 1), self.prev));
        let drops = self.drops.iter();
        facts.extend(drops.map(|&(i, d)| (kind_at(super::fact::DROP, i), d)));
    }

    pub(crate) fn decode(facts: &[super::fact::Fact]) -> Option<AckTold> {
        let mut told = AckTold::default();
        for &(e, v) in facts {
            match e & super::fact::KIND {
                super::fact::PREV => told.prev = v,
                super::fact::DROP => told.drops.push((e >> super::fact::SHIFT, v)),
                _ => return None,
            }
        }
        Some(told)
    }
}

impl ReadTold {
    pub(crate) fn encode(&self, facts: &mut Vec<super::fact::Fact>) {
        use super::fact::{PREV, RESET, WORD};
        facts.extend([
            (kind_at(PREV, 1), self.prev),
            (kind_at(RESET, 0), self.reset),
            (kind_at(RESET, 1), self.inc),
            (kind_at(RESET, 2), self.consumer),
            (kind_at(RESET, 3), self.moved),
            (kind_at(WORD, 0), self.seen),
        ]);
        if let Some(print) = self.noack {
            facts.push((kind_at(WORD, NOACK_WORD), print));
        }
    }

    pub(crate) fn decode(facts: &[super::fact::Fact]) -> Option<ReadTold> {
        use super::fact::{PREV, RESET, WORD};
        let at = |e: u32| facts.iter().find(|f| f.0 == e).map(|f| f.1);
        let noack = at(kind_at(WORD, NOACK_WORD));
        if facts.len() != 6 + usize::from(noack.is_some()) {
            return None;
        }
        Some(ReadTold {
            noack,
            prev: at(kind_at(PREV, 1))?,
            reset: at(kind_at(RESET, 0))?,
            moved: at(kind_at(RESET, 3))?,
            inc: at(kind_at(RESET, 1))?,
            consumer: at(kind_at(RESET, 2))?,
            seen: at(kind_at(WORD, 0))?,
        })
    }
}

/// Peer: whether an XACK's fact applies to the group `(g, m)` here (with
/// the key's stamp context `cc`): every dot it names was seen here, and
/// each acknowledged entry is gone here or holds only dots it names (a
/// delivery or claim here it had not seen must survive it: DECISIONS 131).
/// The IDs still pending here, which the replayed XACK removes.
pub(crate) fn check_ack(
    (g, m): (&Group, &GroupMeta),
    cc: &Context,
    told: &AckTold,
    id_at: impl Fn(u32) -> Option<StreamId>,
) -> Option<Vec<StreamId>> {
    let mut here = Vec::new();
    for &(i, dot) in &told.drops {
        if !cc.covers(dot) {
            return None;
        }
        let id = id_at(i)?;
        if !g.pel.contains_key(&id) || here.contains(&id) {
            continue;
        }
        let named = |d: &(u64, u64)| told.drops.iter().any(|t| t.0 == i && t.1 == d.0);
        if !m.pel.get(&id).is_some_and(|p| p.dots.iter().all(named)) {
            return None;
        }
        here.push(id);
    }
    Some(here)
}

/// What a peer checks an XREADGROUP read's fact against: its consumer,
/// the IDs it delivered and the group's last ID and entries-read after it.
pub(crate) struct Read<'a> {
    pub consumer: &'a [u8],
    pub ids: Vec<StreamId>,
    pub last: (StreamId, i64),
}

/// Peer: whether a read's fact applies to the group `(g, m)` here: the
/// same incarnation and reset, a last ID and entries-read not past the
/// read's, the consumer as the origin saw it (or absent on both), and no
/// pending entry here for the IDs it delivered, each of them here (a
/// delivery here at once of the same entry, a SETID, a consumer touched
/// here: the state joins).
pub(crate) fn check_read(
    (g, m): (&Group, &GroupMeta),
    cc: &Context,
    told: &ReadTold,
    read: &Read,
    value: &StreamValue,
) -> bool {
    let same_group = m.incarnation() == told.inc && m.reset == told.reset;
    // The register as the origin's before the read (no read here at once,
    // which a join counts again: DECISIONS 257), and not past the read's.
    let as_before = m.moved == told.moved || !RECOUNT_CONCURRENT_READS;
    let not_past = as_before && (g.last_id, g.entries_read) <= read.last;
    let consumer = match (
        g.consumers.get(read.consumer),
        m.consumers.get(read.consumer),
    ) {
        (None, None) => told.consumer == 0,
        (Some(c), Some(p)) => {
            p.dot == told.consumer && cc.covers(p.dot) && c.seen_time as u64 <= told.seen
        }
        _ => false,
    };
    let fresh = |id: &StreamId| {
        !g.pel.contains_key(id) && !m.pel.contains_key(id) && value.entry(*id).is_some()
    };
    same_group && not_past && consumer && read.ids.iter().all(fresh)
}

/// Origin: a read's fact, from the group's state before it (`m`).
pub(crate) fn read_told(m: &GroupMeta, consumer: &[u8], prev: u64, seen: i64) -> ReadTold {
    ReadTold {
        prev,
        reset: m.reset,
        moved: m.moved,
        inc: m.incarnation(),
        consumer: m.consumers.get(consumer).map_or(0, |p| p.dot),
        seen: seen as u64,
        noack: None,
    }
}

/// `count (name count dot* reset ms seq count (ms seq count (dot inc)*
/// print)* count (name part)*)*`, a part `dot print inc`.
pub(crate) fn encode(groups: &Groups, out: &mut Vec<u8>) {
    put_varint(out, groups.len() as u64);
    for (name, m) in groups {
        put_bytes(out, name);
        put_varint(out, m.dots.len() as u64);
        for &d in &m.dots {
            put_varint(out, d);
        }
        put_varint(out, m.reset);
        put_varint(out, m.last_id.ms);
        put_varint(out, m.last_id.seq);
        put_varint(out, m.pel.len() as u64);
        for (id, p) in &m.pel {
            put_varint(out, id.ms);
            put_varint(out, id.seq);
            put_varint(out, p.dots.len() as u64);
            for &(d, inc) in &p.dots {
                put_varint(out, d);
                put_varint(out, inc);
            }
            put_varint(out, p.print);
        }
        put_varint(out, m.consumers.len() as u64);
        for (name, p) in &m.consumers {
            put_bytes(out, name);
            put_part(out, p);
        }
    }
}

/// The groups' entries-read, in name order (`count read+1*`, -1 as 0):
/// a trailer after the stream state's, so that a state written before it
/// decodes (DECISIONS 238).
pub(crate) fn encode_reads(groups: &Groups, out: &mut Vec<u8>) {
    put_varint(out, groups.len() as u64);
    for m in groups.values() {
        put_varint(out, m.read.map_or(0, |r| (r as u64).wrapping_add(1)));
    }
}

/// Reads [`encode_reads`]'s trailer into `groups`.
/// The groups' moved dots (DECISIONS 257), after their entries-read:
/// `count moved*`, in group order.
pub(crate) fn encode_moved(groups: &Groups, out: &mut Vec<u8>) {
    put_varint(out, groups.len() as u64);
    for m in groups.values() {
        put_varint(out, m.moved);
    }
}

pub(crate) fn decode_moved(groups: &mut Groups, c: &mut Cursor) -> Result<(), String> {
    if c.count()? != groups.len() {
        return Err("merge metadata group count differs".into());
    }
    for m in groups.values_mut() {
        m.moved = c.varint()?;
    }
    Ok(())
}

pub(crate) fn decode_reads(groups: &mut Groups, c: &mut Cursor) -> Result<(), String> {
    if c.count()? != groups.len() {
        return Err("merge metadata group count differs".into());
    }
    for m in groups.values_mut() {
        m.read = Some(c.varint()?.wrapping_sub(1) as i64);
    }
    Ok(())
}

fn put_part(out: &mut Vec<u8>, p: &Part) {
    put_varint(out, p.dot);
    put_varint(out, p.print);
    put_varint(out, p.inc);
}

fn get_part(c: &mut Cursor) -> Result<Part, String> {
    Ok(Part {
        dot: c.varint()?,
        print: c.varint()?,
        inc: c.varint()?,
    })
}

pub(crate) fn decode(c: &mut Cursor) -> Result<Groups, String> {
    let mut groups = Groups::new();
    for _ in 0..c.count()? {
        let name = c.bytes()?.to_vec();
        let mut m = GroupMeta::default();
        for _ in 0..c.count()? {
            m.dots.push(c.varint()?);
        }
        m.reset = c.varint()?;
        m.last_id = StreamId::new(c.varint()?, c.varint()?);
        for _ in 0..c.count()? {
            let id = StreamId::new(c.varint()?, c.varint()?);
            let mut p = Pending::default();
            for _ in 0..c.count()? {
                p.dots.push((c.varint()?, c.varint()?));
            }
            p.print = c.varint()?;
            m.pel.insert(id, p);
        }
        for _ in 0..c.count()? {
            let name = c.bytes()?.to_vec();
            m.consumers.insert(name, get_part(c)?);
        }
        groups.insert(name, m);
    }
    Ok(groups)
}

/// DEBUG MERGEINFO's line: per group its dots, reset, and how many
/// pending entries and consumers carry dots.
pub(crate) fn describe(groups: &Groups) -> String {
    let parts: Vec<String> = (groups.iter())
        .map(|(name, m)| {
            let dots: Vec<String> = m.dots.iter().map(u64::to_string).collect();
            let pel: Vec<String> = (m.pel.iter())
                .map(|(id, e)| format!("{}@{}", id.text(), e.dots.last().map_or(0, |d| d.0)))
                .collect();
            let cons: Vec<String> = (m.consumers.iter())
                .map(|(n, e)| format!("{}@{}", String::from_utf8_lossy(n), e.dot))
                .collect();
            format!(
                "{}[dots={} reset={} pel={} consumers={}]",
                String::from_utf8_lossy(name),
                dots.join("/"),
                m.reset,
                pel.join("/"),
                cons.join("/")
            )
        })
        .collect();
    format!("groups:{}", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::super::stream::Stream;
    use crate::keyspace::stream::{StreamId, StreamValue};
    use crate::keyspace::stream_groups::Group;
    use crate::keyspace::Value;

    const A: u64 = 3;
    const B: u64 = 7;

    fn stamp(ms: u64, slot: u64) -> u64 {
        (ms << 22) | slot
    }

    fn id(n: u64) -> StreamId {
        StreamId::new(n, A)
    }

    /// A node: its stream (groups only) and merge state.
    #[derive(Clone)]
    struct Node(Stream, StreamValue);

    impl Node {
        /// A group write stamped `at`, noted as the commands note it.
        fn write(&mut self, at: u64, f: impl FnOnce(&mut StreamValue)) {
            f(&mut self.1);
            let v = Value::Stream(Box::new(self.1.clone()));
            self.0.noted_groups(Some(&v), at);
        }

        fn join(&self, other: &Node) -> Node {
            let (s, v) = self.0.join(Some(&self.1), &other.0, Some(&other.1), (0, 0));
            Node(s, v.expect("present"))
        }
    }

    /// Group `g` made at `stamp(1, A)` with entries 1..=3 delivered to bob
    /// at `stamp(2, A)`, seen by both nodes.
    fn base() -> Node {
        let mut n = Node(Stream::default(), StreamValue::default());
        n.write(stamp(1, A), |v| {
            v.groups.insert(b"g".to_vec(), Group::new(StreamId::MIN, 0));
        });
        n.write(stamp(2, A), |v| {
            let g = v.groups.get_mut(&b"g"[..]).unwrap();
            g.touch_consumer(b"bob", 10, true);
            for i in 1..=3 {
                g.deliver(id(i), b"bob", 10);
            }
            g.last_id = id(3);
        });
        n
    }

    fn group(n: &Node) -> &Group {
        &n.1.groups[&b"g"[..]]
    }

    /// Both joins give one result, and joining it again changes nothing.
    fn joined(a: &Node, b: &Node) -> Node {
        let (ab, ba) = (a.join(b), b.join(a));
        assert_eq!(ab.1.groups, ba.1.groups);
        assert!(ab.0.same_content(&ba.0));
        let again = ab.join(a).join(b);
        assert_eq!(again.1.groups, ab.1.groups);
        ab
    }

    #[test]
    fn acks_of_different_entries_both_hold_and_an_xack_keeps_a_concurrent_claim() {
        let (mut a, mut b) = (base(), base());
        a.write(stamp(5, A), |v| {
            let g = v.groups.get_mut(&b"g"[..]).unwrap();
            assert!(g.ack(id(1)) && g.ack(id(3)));
        });
        b.write(stamp(6, B), |v| {
            let g = v.groups.get_mut(&b"g"[..]).unwrap();
            assert!(g.ack(id(2)));
            g.touch_consumer(b"carol", 20, true);
            g.reassign(id(3), b"carol");
            g.pel.get_mut(&id(3)).unwrap().delivery_count = 2;
        });
        let j = joined(&a, &b);
        let g = group(&j);
        assert_eq!(g.pel.keys().copied().collect::<Vec<_>>(), vec![id(3)]);
        assert_eq!(g.pel[&id(3)].consumer(), b"carol");
        assert_eq!(g.pel[&id(3)].delivery_count, 2);
        assert!(g.pel.of(b"carol").any(|(i, _)| i == id(3)));
        assert_eq!(g.pel.count_of(b"bob"), 0);
    }

    #[test]
    fn one_entry_claimed_on_both_sides_goes_to_the_later_claim() {
        let (mut a, mut b) = (base(), base());
        for (n, at, who, count) in [(&mut a, stamp(5, A), "x", 4), (&mut b, stamp(6, B), "y", 2)] {
            n.write(at, |v| {
                let g = v.groups.get_mut(&b"g"[..]).unwrap();
                g.touch_consumer(who.as_bytes(), 20, true);
                g.reassign(id(1), who.as_bytes());
                g.pel.get_mut(&id(1)).unwrap().delivery_count = count;
            });
        }
        let g = joined(&a, &b);
        let n = &group(&g).pel[&id(1)];
        assert_eq!((n.consumer(), n.delivery_count), (&b"y"[..], 4));
    }

    #[test]
    fn a_destroy_removes_the_group_and_what_was_read_in_it_even_where_made_again() {
        let (mut a, mut b) = (base(), base());
        a.write(stamp(5, A), |v| {
            v.groups.remove(&b"g"[..]);
        });
        b.write(stamp(6, B), |v| {
            let g = v.groups.get_mut(&b"g"[..]).unwrap();
            g.touch_consumer(b"dave", 30, true);
            g.deliver(id(4), b"dave", 30);
            g.last_id = id(4);
        });
        assert!(joined(&a, &b).1.groups.is_empty());
        // Made again on a after the destroy: a's new group, empty. b's
        // delivery and consumer belonged to the destroyed one (its
        // incarnation): they go with it, whichever order the joins and the
        // CREATE come in.
        a.write(stamp(7, A), |v| {
            v.groups.insert(b"g".to_vec(), Group::new(id(1), 1));
        });
        let j = joined(&a, &b);
        let g = group(&j);
        assert_eq!(g.last_id, id(1));
        assert!(g.pel.is_empty() && g.consumers.is_empty());
        let b_joined = b.join(&base().join(&a));
        assert_eq!(b_joined.1.groups, j.1.groups);
        // A delivery in the new group survives as any other.
        let mut a2 = a.clone();
        a2.write(stamp(8, A), |v| {
            let g = v.groups.get_mut(&b"g"[..]).unwrap();
            g.touch_consumer(b"erin", 50, true);
            g.deliver(id(2), b"erin", 50);
        });
        let g = joined(&a2, &b).1.groups[&b"g"[..]].clone();
        assert_eq!(g.pel.keys().copied().collect::<Vec<_>>(), vec![id(2)]);
    }

    #[test]
    fn a_setid_back_wins_over_concurrent_reads_and_reads_join_by_maximum() {
        let (mut a, mut b) = (base(), base());
        a.write(stamp(5, A), |v| {
            v.groups.get_mut(&b"g"[..]).unwrap().last_id = id(9)
        });
        b.write(stamp(6, B), |v| {
            v.groups.get_mut(&b"g"[..]).unwrap().last_id = id(5)
        });
        assert_eq!(group(&joined(&a, &b)).last_id, id(9));
        b.write(stamp(7, B), |v| {
            v.groups.get_mut(&b"g"[..]).unwrap().last_id = id(0)
        });
        assert_eq!(group(&joined(&a, &b)).last_id, id(0));
    }

    #[test]
    fn an_entries_read_set_alone_wins_over_the_larger_and_the_state_holds_it() {
        let (mut a, mut b) = (base(), base());
        for n in [&mut a, &mut b] {
            n.write(stamp(3, A), |v| {
                v.groups.get_mut(&b"g"[..]).unwrap().entries_read = 3
            });
        }
        // a: XGROUP SETID g <same ID> ENTRIESREAD 1; b: reads on.
        a.write(stamp(5, A), |v| {
            v.groups.get_mut(&b"g"[..]).unwrap().entries_read = 1
        });
        assert_eq!(a.0.groups[&b"g"[..]].reset, stamp(5, A));
        let j = joined(&a, &b);
        assert_eq!(group(&j).entries_read, 1);
        assert_eq!(j.0.groups[&b"g"[..]].read, Some(1));
        // A read on b concurrent with it moves the ID on: the SETID (a
        // reset) still wins, as a SETID back does.
        b.write(stamp(6, B), |v| {
            let g = v.groups.get_mut(&b"g"[..]).unwrap();
            (g.last_id, g.entries_read) = (id(4), 4);
        });
        let g = joined(&a, &b).1.groups[&b"g"[..]].clone();
        assert_eq!((g.last_id, g.entries_read), (id(3), 1));
        // Two states alike but for entries-read are not one state.
        let mut c = a.clone();
        c.0.groups.get_mut(&b"g"[..]).unwrap().read = Some(9);
        assert!(!c.0.same_content(&a.0));
        let mut out = Vec::new();
        a.0.encode(&mut out);
        assert_eq!(Stream::decode(&out).unwrap(), a.0);
    }

    #[test]
    fn a_consumer_deleted_on_one_side_survives_a_concurrent_delivery_to_it() {
        let (mut a, mut b) = (base(), base());
        a.write(stamp(5, A), |v| {
            v.groups.get_mut(&b"g"[..]).unwrap().delete_consumer(b"bob");
        });
        b.write(stamp(6, B), |v| {
            let g = v.groups.get_mut(&b"g"[..]).unwrap();
            g.touch_consumer(b"bob", 40, true);
            g.deliver(id(4), b"bob", 40);
        });
        let j = joined(&a, &b);
        let g = group(&j);
        // bob's entries a saw are gone with him; the new one kept him.
        assert_eq!(g.pel.keys().copied().collect::<Vec<_>>(), vec![id(4)]);
        assert_eq!(g.pel.count_of(b"bob"), 1);
        // Without the delivery, the delete holds.
        let (mut a2, b2) = (base(), base());
        a2.write(stamp(5, A), |v| {
            v.groups.get_mut(&b"g"[..]).unwrap().delete_consumer(b"bob");
        });
        assert!(group(&joined(&a2, &b2)).consumers.is_empty());
    }

    #[test]
    fn a_group_made_concurrently_with_a_del_keeps_the_stream() {
        let (a, mut b) = (base(), base());
        // a deletes the key, later than b makes a group it has not seen.
        let gone = Stream::current(Some(&a.0), stamp(9, A), None);
        b.write(stamp(6, B), |v| {
            v.groups
                .insert(b"new".to_vec(), Group::new(StreamId::MIN, 0));
        });
        for (s, v) in [
            gone.join(None, &b.0, Some(&b.1), (0, 0)),
            b.0.join(Some(&b.1), &gone, None, (0, 0)),
        ] {
            let v = v.expect("the new group keeps it");
            assert_eq!(
                v.groups.keys().cloned().collect::<Vec<_>>(),
                vec![b"new".to_vec()]
            );
            assert_eq!(s.groups.len(), 1);
        }
        // Without it, the (newer) deletion wins.
        let (_, v) = gone.join(None, &a.0, Some(&a.1), (0, 0));
        assert!(v.is_none());
    }

    #[test]
    fn the_groups_state_encodes_and_decodes() {
        let n = base();
        let mut out = Vec::new();
        n.0.encode(&mut out);
        let back = Stream::decode(&out).unwrap();
        assert_eq!(back, n.0);
        assert!(!back.groups.is_empty());
    }

    /// DECISIONS 257: a recount takes the entries added up to the group's
    /// last ID (entries-added less those after it) where no entry after it
    /// was deleted; with one deleted after it, Redis's estimate, which
    /// cannot tell here, so the count stays.
    #[test]
    fn a_recount_counts_the_entries_up_to_the_last_id() {
        use crate::keyspace::stream::Fields;
        let mut v = StreamValue::default();
        for n in 1..=5 {
            v.append(id(n), Fields::pack([&b"f"[..], b"v"].into_iter()), 0, 0);
        }
        // Two more added before them and deleted.
        (v.entries_added, v.last_id, v.max_deleted) = (7, id(5), StreamId::new(0, A));
        v.groups.insert(b"g".to_vec(), Group::new(id(3), 1));
        let mut metas = super::Groups::new();
        metas.insert(b"g".to_vec(), super::GroupMeta::default());
        super::recount(&mut v, b"g", &mut metas);
        assert_eq!(group_of(&v).entries_read, 5);
        assert_eq!(metas[&b"g"[..]].read, Some(5));
        v.max_deleted = id(4);
        v.groups.get_mut(&b"g"[..]).unwrap().entries_read = 1;
        super::recount(&mut v, b"g", &mut metas);
        assert_eq!(group_of(&v).entries_read, 1);
    }

    fn group_of(v: &StreamValue) -> &Group {
        &v.groups[&b"g"[..]]
    }
}
