//! The consumer-group writes beside XACK and XREADGROUP's `>` read that
//! travel as facts (DECISIONS 254-256; docs/MERGE-DESIGN.md section 9): the
//! claims of XCLAIM and XAUTOCLAIM, and XGROUP's CREATE, CREATECONSUMER,
//! DELCONSUMER, SETID and DESTROY. What the origin tells and what a peer
//! checks before it replays the write at its stamp; the link's side is
//! `replication/active/stream_facts/group_writes.rs`.
//!
//! Each fact names what the write saw of the parts it changes (the
//! pending entries' dots it replaced, the consumer's dot, the group's
//! CREATE dots or reset), so a peer replays it only where those parts are
//! as the origin had them, or gone by a remove the join would keep too.
//! Then the replay's note (`GroupMeta::note`, a diff at the write's
//! stamp) gives the dots the origin's gave, and the key's state is what a
//! join would have made. Where a part moved here by a write the origin
//! had not seen (a claim or delivery here, a consumer touched, a group
//! made again), the peer asks for the key's state, as before.

use super::{kind_at, GroupMeta};
use crate::keyspace::merge::context::Context;
use crate::keyspace::merge::fact::{Fact, ADD, DROP, KIND, PREV, RESET, SHIFT, WORD};
use crate::keyspace::stream::{StreamId, StreamValue};
use crate::keyspace::stream_groups::Group;

/// Whether XCLAIM's and XAUTOCLAIM's claims travel as facts (DECISIONS
/// 254; a switch for bisecting: off, their peers ask for the key's state).
pub(crate) const CLAIM_FACTS: bool = true;

/// Whether XGROUP CREATE (of a present stream), CREATECONSUMER,
/// DELCONSUMER, SETID and DESTROY travel as facts (DECISIONS 255; a switch
/// as [`CLAIM_FACTS`]).
pub(crate) const XGROUP_FACTS: bool = true;

/// A claim's fact, on the first of its records (`XCLAIM key group
/// consumer 0 id TIME t RETRYCOUNT n FORCE JUSTID LASTID last`, one per
/// entry claimed, or dropped where its entry is gone): `PREV 1, s`;
/// `RESET 1, inc` the group's incarnation; `RESET 2, d` the claimant's dot
/// before (0: none); `WORD 1, t` its seen time after (0: no entry was
/// claimed, so it was not touched); per record i the dots its pending
/// entry held, `DROP i, dot` (none: a FORCE claim of an entry not
/// pending); `ADD i, s` for a record whose entry was gone at the origin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClaimTold {
    pub prev: u64,
    pub inc: u64,
    pub consumer: u64,
    pub seen: u64,
    pub drops: Vec<(u32, u64)>,
    pub gone: Vec<u32>,
}

impl ClaimTold {
    pub(crate) fn encode(&self, facts: &mut Vec<Fact>) {
        facts.extend([
            (kind_at(PREV, 1), self.prev),
            (kind_at(RESET, 1), self.inc),
            (kind_at(RESET, 2), self.consumer),
            (kind_at(WORD, 1), self.seen),
        ]);
        facts.extend(self.drops.iter().map(|&(i, d)| (kind_at(DROP, i), d)));
        facts.extend(self.gone.iter().map(|&i| (kind_at(ADD, i), self.prev)));
    }

    /// None where `facts` are not a claim's (a read's carry `RESET 0`).
    pub(crate) fn decode(facts: &[Fact]) -> Option<ClaimTold> {
        let mut told = ClaimTold::default();
        let mut have = 0;
        for &(e, v) in facts {
            let i = e >> SHIFT;
            match (e & KIND, i) {
                (PREV, 1) => told.prev = v,
                (RESET, 1) => told.inc = v,
                (RESET, 2) => told.consumer = v,
                (WORD, 1) => told.seen = v,
                (DROP, _) => {
                    told.drops.push((i, v));
                    continue;
                }
                (ADD, _) => {
                    told.gone.push(i);
                    continue;
                }
                _ => return None,
            }
            have += 1;
        }
        (have == 4).then_some(told)
    }
}

/// A claim as its records say it: per record the entry's ID, and the
/// claimant (the consumer of the records whose entries were here) and the
/// records' LASTID.
pub(crate) struct Claim<'a> {
    pub consumer: Option<&'a [u8]>,
    pub ids: Vec<StreamId>,
    pub last: StreamId,
}

/// Whether the consumer `name` is here as the origin had it before its
/// write: with the dot `dot` (0: absent there, and it must be here too)
/// and seen no later than `seen`, the origin's time after the write.
fn consumer_as_told(
    (g, m): (&Group, &GroupMeta),
    cc: &Context,
    name: &[u8],
    (dot, seen): (u64, u64),
) -> bool {
    match (g.consumers.get(name), m.consumers.get(name)) {
        (None, None) => dot == 0,
        (Some(c), Some(p)) => p.dot == dot && cc.covers(dot) && c.seen_time as u64 <= seen,
        _ => false,
    }
}

/// Whether a claim's fact applies to the group here (DECISIONS 254): the
/// same incarnation, a last ID here not below the records' LASTID (their
/// replay moves nothing), the claimant as the origin had it, and per
/// record: its entry here exactly where it was there, and its pending
/// entry here holding only dots the fact names (all seen here), or not
/// pending here (acknowledged here: the claim, unseen by that XACK, makes
/// it pending again as a join keeps its dot); an entry the origin made
/// pending (FORCE, no dot named) pending nowhere here.
pub(crate) fn check_claim(
    (g, m): (&Group, &GroupMeta),
    cc: &Context,
    told: &ClaimTold,
    claim: &Claim,
    value: &StreamValue,
) -> bool {
    if m.incarnation() != told.inc || g.last_id < claim.last {
        return false;
    }
    if let Some(name) = claim.consumer.filter(|_| told.seen != 0) {
        if !consumer_as_told((g, m), cc, name, (told.consumer, told.seen)) {
            return false;
        }
    }
    claim.ids.iter().enumerate().all(|(i, id)| {
        let i = i as u32;
        let gone = told.gone.contains(&i);
        if value.entry(*id).is_some() == gone {
            return false;
        }
        let named: Vec<u64> = (told.drops.iter().filter(|d| d.0 == i))
            .map(|d| d.1)
            .collect();
        if named.is_empty() {
            return !g.pel.contains_key(id) && !m.pel.contains_key(id);
        }
        if !named.iter().all(|&d| cc.covers(d)) {
            return false;
        }
        match (g.pel.contains_key(id), m.pel.get(id)) {
            (false, None) => true,
            (true, Some(p)) => p.dots.iter().all(|d| named.contains(&d.0)),
            _ => false,
        }
    })
}

/// Whether XGROUP CREATE ... MKSTREAM of a missing key travels as a fact
/// (DECISIONS 286); off, its peers ask for the stream's state.
pub(crate) const MKSTREAM_FACTS: bool = true;

/// An XGROUP subcommand's fact (DECISIONS 255), on its record: `PREV 1,
/// s` and per subcommand
/// - CREATE: `WORD 0..3` the group's last ID (ms, seq) and entries-read
///   as the origin resolved them (`$`), replayed with them; with MKSTREAM
///   of a missing key, `WORD 4, p` the print of the key's stream state
///   before ([`crate::keyspace::merge::stream::Stream::print`]: the
///   deleted stream's, DECISIONS 286);
/// - CREATECONSUMER: `RESET 1, inc`, `WORD 3, t` the consumer's seen time;
/// - DELCONSUMER: `RESET 2, d` the consumer's dot, `DROP 0, dot` per dot
///   of the pending entries it owned;
/// - SETID: `RESET 0, r` the group's reset before, `RESET 1, inc`, `RESET
///   2, m` its moved dot before, `RESET 3, r'` its reset after, `WORD 0..3`
///   the last ID and entries-read set;
/// - DESTROY: `DROP 0, dot` per CREATE dot of the group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct XgroupTold {
    pub prev: u64,
    pub resets: [Option<u64>; 4],
    pub words: [Option<u64>; 5],
    pub drops: Vec<u64>,
}

impl XgroupTold {
    pub(crate) fn encode(&self, facts: &mut Vec<Fact>) {
        facts.push((kind_at(PREV, 1), self.prev));
        for (i, r) in self.resets.iter().enumerate() {
            facts.extend(r.map(|r| (kind_at(RESET, i as u32), r)));
        }
        for (i, w) in self.words.iter().enumerate() {
            facts.extend(w.map(|w| (kind_at(WORD, i as u32), w)));
        }
        facts.extend(self.drops.iter().map(|&d| (kind_at(DROP, 0), d)));
    }

    pub(crate) fn decode(facts: &[Fact]) -> Option<XgroupTold> {
        let mut told = XgroupTold::default();
        for &(e, v) in facts {
            let i = (e >> SHIFT) as usize;
            match e & KIND {
                PREV => told.prev = v,
                RESET => *told.resets.get_mut(i)? = Some(v),
                WORD => *told.words.get_mut(i)? = Some(v),
                DROP => told.drops.push(v),
                _ => return None,
            }
        }
        Some(told)
    }

    /// The last ID and entries-read it carries (CREATE, SETID).
    pub(crate) fn register(&self) -> Option<(StreamId, i64)> {
        let [Some(ms), Some(seq), Some(read), ..] = self.words else {
            return None;
        };
        Some((StreamId::new(ms, seq), read as i64))
    }

    /// Told with a last ID and entries-read.
    pub(crate) fn with_register(mut self, (id, read): (StreamId, i64)) -> XgroupTold {
        self.words[..3].copy_from_slice(&[Some(id.ms), Some(id.seq), Some(read as u64)]);
        self
    }
}

/// The SETID fact of a group whose state was `m` before and whose value is
/// `g` after a SETID stamped `stamp` (its reset after as the note gives it).
pub(crate) fn setid_told(m: &GroupMeta, g: &Group, (prev, stamp): (u64, u64)) -> XgroupTold {
    let mut after = m.clone();
    after.note(g, stamp);
    let mut told = XgroupTold {
        prev,
        ..Default::default()
    };
    told.resets = [
        Some(m.reset),
        Some(m.incarnation()),
        Some(m.moved),
        Some(after.reset),
    ];
    told.with_register((g.last_id, g.entries_read))
}

/// Whether a SETID's fact applies here: the same incarnation and reset
/// before, and either the origin's SETID was a reset (it wins over what
/// moved here, as in a join) or the register here is the origin's before
/// (its moved dot: a read here at once is a join's, DECISIONS 257).
pub(crate) fn check_setid(m: &GroupMeta, told: &XgroupTold) -> bool {
    let ([Some(before), Some(inc), Some(moved), Some(after)], Some(_)) =
        (told.resets, told.register())
    else {
        return false;
    };
    let reset = after != before;
    m.incarnation() == inc && m.reset == before && (reset || m.moved == moved)
}

/// Whether a CREATECONSUMER's fact applies here: the same incarnation and
/// the consumer made nowhere here (one made here at once: the join keeps
/// both dots' latest, which the replay, a no-op here, would not).
pub(crate) fn check_createconsumer(
    (g, m): (&Group, &GroupMeta),
    told: &XgroupTold,
    name: &[u8],
) -> bool {
    told.resets[1] == Some(m.incarnation())
        && !g.consumers.contains_key(name)
        && !m.consumers.contains_key(name)
}

/// Whether a DELCONSUMER's fact applies here: the consumer gone here (a
/// DELCONSUMER here too), or here with the dot the origin removed and
/// owning only pending entries whose dots the fact names (a delivery or
/// claim here it had not seen survives, and its consumer with it).
pub(crate) fn check_delconsumer(
    (g, m): (&Group, &GroupMeta),
    cc: &Context,
    told: &XgroupTold,
    name: &[u8],
) -> bool {
    if !g.consumers.contains_key(name) {
        return !m.consumers.contains_key(name);
    }
    let dot = told.resets[2].unwrap_or_default();
    if m.consumers.get(name).is_none_or(|p| p.dot != dot) || !cc.covers(dot) {
        return false;
    }
    let named = |d: &(u64, u64)| told.drops.contains(&d.0) && cc.covers(d.0);
    (g.pel.of(name)).all(|(id, _)| m.pel.get(&id).is_some_and(|p| p.dots.iter().all(named)))
}

/// Whether a DESTROY's fact applies here: every CREATE dot of the group
/// here is one the origin removed (a CREATE here it had not seen keeps
/// the group), or the group is gone here too.
pub(crate) fn check_destroy(m: Option<&GroupMeta>, cc: &Context, told: &XgroupTold) -> bool {
    m.is_none_or(|m| {
        m.dots
            .iter()
            .all(|d| told.drops.contains(d) && cc.covers(*d))
    })
}

/// The claim's fact of the group state `m` before it (the origin's): the
/// claimant `consumer` (seen at `seen` after, 0: not touched), and per
/// record its entry's ID and whether that entry was gone. None where a
/// pending entry it replaced holds no dot (its peers then ask).
pub(crate) fn claim_told(
    m: &GroupMeta,
    (consumer, seen): (&[u8], i64),
    records: &[(StreamId, bool)],
    prev: u64,
) -> Option<ClaimTold> {
    let mut told = ClaimTold {
        prev,
        inc: m.incarnation(),
        consumer: m.consumers.get(consumer).map_or(0, |p| p.dot),
        seen: seen as u64,
        ..Default::default()
    };
    for (i, &(id, gone)) in records.iter().enumerate() {
        let i = i as u32;
        if gone {
            told.gone.push(i);
        }
        match m.pel.get(&id) {
            Some(p) if !p.dots.is_empty() => {
                told.drops.extend(p.dots.iter().map(|d| (i, d.0)));
            }
            Some(_) => return None,
            None if gone => return None, // nothing to drop: not a claim
            None => {}
        }
    }
    Some(told)
}
