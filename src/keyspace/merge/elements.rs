//! Sets, hashes and sorted sets that merge per element (docs/MERGE-DESIGN.md):
//! an observed-remove set (add-wins) over the members, with each member's
//! value (a hash field's, a sorted-set member's score) last-writer-wins.
//!
//! Each add carries a *dot*: the stamp of the write that added or changed
//! the member (a stamp names its node and is unique, so it serves as the
//! dot directly). The key carries a *causal context* `cc`: per node slot,
//! the newest stamp of that node's whose effect on the key this node has
//! seen. A dot absent here that `cc` covers was removed here; one that `cc`
//! does not cover was added where we have not looked yet. Joining two
//! states keeps a dot both have, drops one that only one side has when the
//! other side's `cc` covers it (the other side saw it and removed it), and
//! keeps it otherwise: an add concurrent with a remove wins, a DEL of the
//! whole key removes only what the deleting node had seen (Bieniusa et
//! al.'s optimized OR-set). A member may so hold several dots (adds of it
//! on two nodes that neither saw before adding); it is present while one
//! survives, and its value is the newest surviving one's. A write here
//! that adds or changes a member replaces all its dots by one (it saw
//! them). The value of the newest dot is the key's own; the older dots of
//! a hash field or sorted-set member keep theirs here, as they may become
//! the newest when a remove takes the newest (the join is then still a
//! join: commutative, associative, idempotent).
//!
//! As counters do (`merge.rs`), elements are brought up to date lazily: a
//! write moves the key's version, and whoever reads the state next diffs
//! the value against the dots it holds ([`Elements::current`]): members new
//! or changed get the write's stamp as their dot, members gone leave their
//! dot to `cc`. Every state that leaves the node is read so and stored, so
//! a member's dot never changes once a peer has seen it.
//!
//! A hash field that HINCRBY wrote is a **counter** besides (Redis
//! Enterprise's rule: concurrent HINCRBYs add up; an HSET or HDEL resets
//! what it saw, and increments it did not see survive it): `counters`
//! keeps a [`Counter`] per such field, its parts the nodes' increments and
//! its reset the field's last other write, as a string counter's
//! (`merge/mod.rs`). The field's presence is still the observed-remove
//! set's; its value, where the counter gives an integer, the counter's.
//! A counter is current while its version is not older than the field's
//! newest dot (an increment gives both its stamp); a write that set the
//! field otherwise (a newer dot) reads as a reset at that dot. A counted
//! field's dots all carry the value their write wrote (not only the older
//! ones): the key holds the counter's value, which differs between nodes
//! until they have seen the same increments, so a dot's value read from
//! the key would differ too. Where the winning reset wrote no number, the
//! field reads what that reset's dot wrote (or the newest dot's).

use hashbrown::HashMap;

use super::context::{fingerprint, Context};
use super::member_ttls::MemberTtlDots;
use super::ttl::Ttl;
use super::{Base, Counter, Incr, Merged};
use crate::keyspace::longdouble::F80;
use crate::keyspace::Value;

/// One add of a member: its stamp, a fingerprint of the value it set (a
/// hash field's value, a score's bits; 0 for a set member) to notice a
/// changed value, and that value when this is not the member's newest dot
/// (the newest's is in the key itself; a set member's is implied). The
/// value is boxed: few dots carry one, and unboxed its `Vec` would make
/// every dot 48 bytes instead of 24 (DECISIONS 151).
#[derive(Clone, Debug, PartialEq)]
pub struct Dot {
    pub stamp: u64,
    pub fp: u64,
    pub value: Option<Box<Item>>,
}

/// A member's dots, oldest first: almost always one, held inline (a `Vec`
/// would cost a heap allocation per member; DECISIONS 152). Reads as a
/// slice; equal dots compare equal whichever way they are held.
#[derive(Clone, Debug)]
pub enum Dots {
    One(Dot),
    Many(Vec<Dot>),
}

impl Default for Dots {
    fn default() -> Dots {
        Dots::Many(Vec::new())
    }
}

impl From<Vec<Dot>> for Dots {
    fn from(mut v: Vec<Dot>) -> Dots {
        match v.len() {
            1 => Dots::One(v.pop().expect("one dot")),
            _ => Dots::Many(v),
        }
    }
}

impl std::ops::Deref for Dots {
    type Target = [Dot];
    fn deref(&self) -> &[Dot] {
        match self {
            Dots::One(d) => std::slice::from_ref(d),
            Dots::Many(v) => v,
        }
    }
}

impl std::ops::DerefMut for Dots {
    fn deref_mut(&mut self) -> &mut [Dot] {
        match self {
            Dots::One(d) => std::slice::from_mut(d),
            Dots::Many(v) => v,
        }
    }
}

impl<'a> IntoIterator for &'a Dots {
    type Item = &'a Dot;
    type IntoIter = std::slice::Iter<'a, Dot>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for Dots {
    fn eq(&self, other: &Dots) -> bool {
        self[..] == other[..]
    }
}

impl Dots {
    pub fn as_slice(&self) -> &[Dot] {
        self
    }

    /// Inserts `dot` at `at` (a slice index).
    pub fn insert(&mut self, at: usize, dot: Dot) {
        match std::mem::take(self) {
            Dots::Many(v) if v.is_empty() => *self = Dots::One(dot),
            Dots::One(d) => {
                let mut v = Vec::with_capacity(2);
                v.push(d);
                v.insert(at, dot);
                *self = Dots::Many(v);
            }
            Dots::Many(mut v) => {
                v.insert(at, dot);
                *self = Dots::Many(v);
            }
        }
    }

    /// Keeps the dots `keep` holds true for (one left goes inline).
    pub fn retain(&mut self, keep: impl FnMut(&Dot) -> bool) {
        let mut v = match std::mem::take(self) {
            Dots::One(d) => vec![d],
            Dots::Many(v) => v,
        };
        v.retain(keep);
        *self = v.into();
    }
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Elements {
    /// The key's version this describes.
    pub version: u64,
    pub dots: HashMap<Box<[u8]>, Dots>,
    /// The causal context: the newest stamp seen per node slot.
    pub cc: Context,
    /// Members the writes since `version` named as added or set (SADD of
    /// a member present, HSET of an unchanged value): they take the next
    /// stamp as their dot, as a new add would (add-wins over a concurrent
    /// remove). Local only; never encoded.
    pub touched: Vec<Box<[u8]>>,
    /// The fields HINCRBY wrote, as counters (module comment); a removed
    /// field's stays, reset to absent, as a deleted counter's does. Or,
    /// where `scores`, the sorted-set members ZINCRBY wrote.
    pub counters: HashMap<Box<[u8]>, Counter>,
    /// The counters count sorted-set scores (ZINCRBY), not hash fields.
    pub scores: bool,
    /// The key's TTL dots (`ttl.rs`).
    pub ttl: Ttl,
    /// Each member's TTL dots (`member_ttls.rs`).
    pub member_ttls: MemberTtlDots,
}

/// A member's value in a collection.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Member,
    Field(Vec<u8>),
    Score(f64),
}

impl Item {
    /// The base a counter reset to this value counts from.
    pub fn base(item: Option<&Item>) -> Base {
        match item {
            None => Base::Absent,
            Some(Item::Field(v)) => Base::of_bytes(v),
            Some(Item::Score(s)) => Base::Score(F80::from_f64(*s)),
            Some(Item::Member) => Base::Other,
        }
    }

    pub fn fingerprint(&self) -> u64 {
        match self {
            Item::Member => 0,
            Item::Field(v) => fingerprint(v),
            Item::Score(s) => s.to_bits(),
        }
    }
}

/// Whether counters of hash fields (`scores` false) or of sorted-set
/// scores (true) count in `value`: one of that type, or a deleted key (it
/// keeps them, as a deleted counter does).
fn counts_in(value: Option<&Value>, scores: bool) -> bool {
    match value {
        None => true,
        Some(Value::Hash(_)) => !scores,
        Some(Value::ZSet(_)) => scores,
        Some(_) => false,
    }
}

/// Whether `value` merges per element.
pub(crate) fn is_collection(value: &Value) -> bool {
    matches!(value, Value::Set(_) | Value::Hash(_) | Value::ZSet(_))
}

/// Every member of a collection with its value.
pub fn items(value: Option<&Value>) -> Vec<(Vec<u8>, Item)> {
    match value {
        Some(Value::Set(s)) => s.iter().map(|m| (m.to_vec(), Item::Member)).collect(),
        Some(Value::Hash(h)) => h
            .iter()
            .map(|(f, v)| (f.to_vec(), Item::Field(v.to_vec())))
            .collect(),
        Some(Value::ZSet(z)) => z
            .iter()
            .map(|(m, s)| (m.to_vec(), Item::Score(s)))
            .collect(),
        _ => Vec::new(),
    }
}

/// One member's value in `value`.
pub fn item_of(value: Option<&Value>, m: &[u8]) -> Option<Item> {
    match value? {
        Value::Set(s) => s.contains(m).then_some(Item::Member),
        Value::Hash(h) => h.get(m).map(|v| Item::Field(v.to_vec())),
        Value::ZSet(z) => z.score(m).map(Item::Score),
        _ => None,
    }
}

/// The fingerprint of member `m`'s value in `value` (`item_of(value,
/// m)`'s, without copying a hash field's value out).
pub(crate) fn fingerprint_of(value: Option<&Value>, m: &[u8]) -> Option<u64> {
    match value? {
        Value::Set(s) => s.contains(m).then_some(0),
        Value::Hash(h) => h.get(m).map(fingerprint),
        Value::ZSet(z) => z.score(m).map(f64::to_bits),
        _ => None,
    }
}

/// Origin: an increment stamped `stamp` of field `m` counted into its
/// counter in `counters` (made if it has none), which counts from the
/// field's last other write (`newest`: its newest dot's stamp before the
/// write) where it had no counter or one older than that. The counter.
pub(super) fn count_into<'c>(
    counters: &'c mut HashMap<Box<[u8]>, Counter>,
    m: &[u8],
    newest: Option<u64>,
    (stamp, by, before): (u64, Incr, Base),
) -> &'c mut Counter {
    let slot = super::super::hlc::stamp_node(stamp);
    // A counter the field has grows in place; one key hash and probe
    // either way.
    let c = match counters.entry_ref(m) {
        hashbrown::hash_map::EntryRef::Occupied(o) => {
            let c = o.into_mut();
            if let Some(d) = newest.filter(|&d| c.version < d) {
                *c = Counter::current(Some(c), d, before);
            }
            c
        }
        hashbrown::hash_map::EntryRef::Vacant(v) => v.insert(match newest {
            Some(d) => Counter::current(None, d, before),
            None => Counter::current(None, 0, Base::Absent),
        }),
    };
    c.add(slot, by, stamp);
    c
}

/// Counter `c` after a write stamped `stamp` left its field at `now`
/// ([`Elements::settle_counter`]).
pub(super) fn settle(c: &mut Counter, stamp: u64, now: Option<&Item>) -> Option<Merged> {
    let base = Item::base(now);
    if c.version > stamp || (now.is_none() && c.value() == Merged::Absent) {
        return None;
    }
    // Where it describes the write already (an increment's own), as
    // it is (`Counter::current` would clone it).
    let value = c.value_at(stamp, base);
    if value.is_none() {
        *c = Counter::current(Some(c), stamp, base);
    }
    value
}

/// An increment of one field (sorted-set member) at its origin, as
/// [`Elements::note_counted`] notes it: its stamp, the field (argument
/// index, name), the increment and what the field read before it (as a
/// counter base), and the field's value now (None: absent).
#[derive(Clone)]
pub struct CountedWrite<'a> {
    pub stamp: u64,
    pub field: (u32, &'a [u8]),
    pub by: (Incr, Base),
    pub now: Option<Item>,
}

/// What a join changes in the local value.
#[derive(Debug, PartialEq)]
pub enum Change {
    /// Add the member, or set its value.
    Put(Vec<u8>, Item),
    Remove(Vec<u8>),
}

impl Elements {
    /// The elements of a key at `version` whose value is `value`: `meta`
    /// if it describes that version, else `meta` brought up to it (new or
    /// changed members dotted `version`; see the module comment).
    pub fn current(meta: Option<&Elements>, version: u64, value: Option<&Value>) -> Elements {
        if let Some(m) = meta.filter(|m| m.version == version) {
            return m.clone();
        }
        let mut e = Elements {
            version,
            dots: HashMap::new(),
            cc: meta.map(|m| m.cc.clone()).unwrap_or_default(),
            touched: Vec::new(),
            // Only a hash's fields or a sorted set's scores count (another
            // type that took the key's place drops them; a deleted key
            // keeps them).
            counters: (meta.filter(|m| counts_in(value, m.scores)))
                .map(|m| m.counters.clone())
                .unwrap_or_default(),
            scores: meta.is_some_and(|m| m.scores && counts_in(value, true)),
            ttl: meta.map(|m| m.ttl.clone()).unwrap_or_default(),
            member_ttls: (meta.map(|m| m.member_ttls.clone())).unwrap_or_default(),
        };
        let touched = |m: &[u8]| meta.is_some_and(|old| old.touched.iter().any(|t| &**t == m));
        e.cc.see(version);
        for (m, item) in items(value) {
            let fp = item.fingerprint();
            let old = meta.and_then(|old| old.dots.get(&m[..]));
            let dots = match old {
                Some(ds) if ds.last().is_some_and(|d| d.fp == fp) && !touched(&m) => ds.clone(),
                _ => {
                    e.settle_counter(&m, version, Some(&item));
                    let written = e
                        .counters
                        .contains_key(&m[..])
                        .then(|| Box::new(item.clone()));
                    Dots::One(Dot {
                        stamp: version,
                        fp,
                        value: written,
                    })
                }
            };
            e.dots.insert(m.into(), dots);
        }
        // Counted fields gone since: removed at this version.
        let gone: Vec<Box<[u8]>> = (e.counters.keys())
            .filter(|m| !e.dots.contains_key(&m[..]))
            .cloned()
            .collect();
        for m in gone {
            e.settle_counter(&m, version, None);
        }
        e
    }

    /// The counter of field `m` after a write stamped `stamp` left it at
    /// `now` without counting: a reset there, unless the counter already
    /// holds that (an increment of the same stamp, or a removal noted).
    /// The counter's value where it held that already (read to tell; the
    /// caller that wants it reads no second sum), else None.
    pub fn settle_counter(&mut self, m: &[u8], stamp: u64, now: Option<&Item>) -> Option<Merged> {
        settle(self.counters.get_mut(m)?, stamp, now)
    }

    /// Origin, before HINCRBY stamped `stamp` adds `by` to field `m`,
    /// which read `before` then (as a counter base): the field's counter
    /// grows by the increment, counting from the field's last other write
    /// (its newest dot) where it had no counter or one older than that.
    /// The member's dot follows from `note_write`, as for any write.
    pub fn count_field(&mut self, m: &[u8], stamp: u64, by: Incr, before: Base) {
        let newest = self.newest(m).map(|d| d.stamp);
        count_into(&mut self.counters, m, newest, (stamp, by, before));
    }

    /// Origin: the newest dot of counted field `m`, just written, keeps
    /// the value written (`now`; see the module comment: a counted field's
    /// dots carry what their writes wrote, as the key holds the counter's
    /// value instead).
    pub fn keep_written(&mut self, m: &[u8], now: Option<Item>) {
        if let Some(d) = self.dots.get_mut(m).and_then(|ds| ds.last_mut()) {
            // The value's box reused where the dot has one.
            match (&mut d.value, now) {
                (Some(b), Some(now)) => **b = now,
                (v, now) => *v = now.map(Box::new),
            }
        }
    }

    /// The counter of field `m` as one side of a join holds it (`dots`:
    /// the side's dots of `m`; `value`: its key's value): its own brought
    /// up to the field's newest dot, or one that resets at that dot where
    /// it has none. None where it has neither dots nor counter.
    fn counter_of(&self, m: &[u8], dots: &[Dot], value: Option<&Value>) -> Option<Counter> {
        let base = || Item::base(item_of(value, m).as_ref());
        match (self.counters.get(m), dots.last()) {
            (None, None) => None,
            (None, Some(d)) => Some(Counter::current(None, d.stamp, base())),
            (Some(c), Some(d)) if c.version < d.stamp => {
                Some(Counter::current(Some(c), d.stamp, base()))
            }
            (Some(c), _) => Some(c.clone()),
        }
    }

    /// The newest dot of `member`, if present.
    pub fn newest(&self, member: &[u8]) -> Option<&Dot> {
        self.dots.get(member).and_then(|ds| ds.last())
    }

    /// Whether `self` and `other` are one state but for the version they
    /// describe (the same dots and causal context).
    pub fn same_content(&self, other: &Elements) -> bool {
        (self.dots == other.dots && self.cc == other.cc)
            && (self.counters == other.counters && self.ttl == other.ttl)
            && (self.scores == other.scores && self.member_ttls == other.member_ttls)
    }

    /// Joins `remote` (whose value is `remote_value`) into `self` (the
    /// local state, whose value is `local_value`): the joined state, and
    /// what must change in the local value to match it.
    pub fn join(
        &self,
        local_value: Option<&Value>,
        remote: &Elements,
        remote_value: Option<&Value>,
    ) -> (Elements, Vec<Change>) {
        let mut out = Elements {
            version: self.version.max(remote.version),
            dots: HashMap::with_capacity(self.dots.len().max(remote.dots.len())),
            cc: self.cc.clone(),
            touched: Vec::new(),
            counters: HashMap::new(),
            scores: scores_of(self, local_value, remote, remote_value),
            ttl: self.ttl.join(&self.cc, &remote.ttl, &remote.cc),
            member_ttls: MemberTtlDots::default(),
        };
        out.cc.join(&remote.cc);
        let mut members: Vec<&Box<[u8]>> = (self.dots.keys())
            .chain(remote.dots.keys())
            .chain(self.counters.keys())
            .chain(remote.counters.keys())
            .collect();
        members.sort_unstable();
        members.dedup();
        let mut changes = Vec::new();
        for m in members {
            let ours = self.dots.get(m).map_or(&[][..], Dots::as_slice);
            let theirs = remote.dots.get(m).map_or(&[][..], Dots::as_slice);
            let kept = join_dots(
                (ours, local_value, &remote.cc),
                (theirs, remote_value, &self.cc),
                m,
            );
            let counted =
                self.join_counters(m, (ours, local_value), remote, (theirs, remote_value));
            let counted_item = (counted.as_ref()).and_then(|c| counted_item(c, &kept, out.scores));
            let has_counter = counted.is_some();
            if let Some(c) = counted {
                out.counters.insert(m.clone(), c);
            }
            match (ours.last(), kept.last()) {
                (Some(_), None) => changes.push(Change::Remove(m.to_vec())),
                (None, None) => {}
                (was, Some(now)) => {
                    let fp = counted_item.as_ref().map_or(now.fp, Item::fingerprint);
                    if was.is_none_or(|w| w.fp != fp) {
                        let item = (counted_item.or_else(|| now.value.as_deref().cloned()))
                            .or_else(|| item_of(remote_value, m));
                        changes.push(Change::Put(m.to_vec(), item.unwrap_or(Item::Member)));
                    }
                    let mut kept = match has_counter {
                        // A counted field's dots keep what their writes
                        // wrote (the key holds the counter's value, which
                        // differs between nodes until they converge); only
                        // the newest's print is the key's.
                        true => kept,
                        false => settle_values(kept),
                    };
                    if has_counter {
                        for d in kept.iter_mut() {
                            d.fp = 0;
                        }
                    }
                    kept.last_mut().expect("kept a dot").fp = fp;
                    out.dots.insert(m.clone(), kept.into());
                }
            }
        }
        if out.dots.is_empty() {
            out.ttl = Ttl::default(); // a deleted key's TTL goes with it
        }
        let kept = out.dots.keys().map(|m| &m[..]);
        let (ours, theirs) = (&self.member_ttls, &remote.member_ttls);
        out.member_ttls = ours.join(&self.cc, theirs, &remote.cc, kept);
        out.scores &= !out.counters.is_empty(); // one state, one coding
        (out, changes)
    }

    /// The join of field `m`'s counters on both sides (each side: its
    /// dots of `m` and its key's value), where either side counts it.
    fn join_counters(
        &self,
        m: &[u8],
        (ours, local_value): (&[Dot], Option<&Value>),
        remote: &Elements,
        (theirs, remote_value): (&[Dot], Option<&Value>),
    ) -> Option<Counter> {
        if !self.counters.contains_key(m) && !remote.counters.contains_key(m) {
            return None;
        }
        let scores = scores_of(self, local_value, remote, remote_value);
        if !counts_in(local_value, scores) || !counts_in(remote_value, scores) {
            return None; // another type: nothing counts
        }
        // A side whose counters count the other kind (a hash's fields on
        // one side, a sorted set's scores on the other, both deleted) adds
        // none. A side with no counters has no kind (its `scores` says
        // false): its newest dot of `m` is a reset there, as a hash's
        // field's is (a ZADD concurrent with a ZINCRBY of a new member
        // was lost: the score read the increment alone).
        let counts = |e: &Elements| e.counters.is_empty() || e.scores == scores;
        let ours = counts(self).then(|| self.counter_of(m, ours, local_value));
        let theirs = counts(remote).then(|| remote.counter_of(m, theirs, remote_value));
        match (ours.flatten(), theirs.flatten()) {
            (Some(a), Some(b)) => Some(a.join(&b)),
            (a, b) => a.or(b),
        }
    }
}

/// Whether the joined counters count scores: the type of the key present
/// on either side, else (both deleted) that of a side with counters.
fn scores_of(a: &Elements, av: Option<&Value>, b: &Elements, bv: Option<&Value>) -> bool {
    match (av.or(bv), a.counters.is_empty()) {
        (Some(v), _) => matches!(v, Value::ZSet(_)),
        (None, false) => a.scores,
        (None, true) => b.scores,
    }
}

/// The dots of one member that survive a join: those both sides have, and
/// those one side has that the other has not seen (its `cc` does not cover
/// them). Each side: its dots, its value (for its newest dot's), and the
/// other side's context. Kept dots carry their values (set after).
fn join_dots(
    (ours, our_value, their_cc): (&[Dot], Option<&Value>, &Context),
    (theirs, their_value, our_cc): (&[Dot], Option<&Value>, &Context),
    m: &[u8],
) -> Vec<Dot> {
    let with_value = |d: &Dot, side: &[Dot], value: Option<&Value>| {
        let newest = side.last().is_some_and(|n| n.stamp == d.stamp);
        let v = match (&d.value, newest) {
            (Some(v), _) => Some(v.clone()),
            (None, true) => item_of(value, m).map(Box::new),
            (None, false) => None,
        };
        Dot {
            value: v,
            ..d.clone()
        }
    };
    let mut kept = Vec::with_capacity(ours.len().max(theirs.len()));
    for d in ours {
        let both = theirs.iter().find(|t| t.stamp == d.stamp);
        if both.is_some() || !their_cc.covers(d.stamp) {
            let k = with_value(d, ours, our_value);
            let k = match both {
                // The side that kept the dot's value (a counted field's
                // non-integer reset) gives it: it was written once.
                Some(t) if k.value.is_none() => with_value(t, theirs, their_value),
                _ => k,
            };
            kept.push(k);
        }
    }
    for d in theirs {
        let both = ours.iter().any(|o| o.stamp == d.stamp);
        if !both && !our_cc.covers(d.stamp) {
            kept.push(with_value(d, theirs, their_value));
        }
    }
    kept.sort_unstable_by_key(|d| d.stamp);
    kept
}

/// A member's kept dots as stored: the newest without its value (it is the
/// key's), the older with theirs (none for a set's members).
fn settle_values(mut dots: Vec<Dot>) -> Vec<Dot> {
    let n = dots.len();
    for (i, d) in dots.iter_mut().enumerate() {
        if i + 1 == n || matches!(d.value.as_deref(), Some(Item::Member)) {
            d.value = None;
        }
    }
    dots
}

/// The value of a counted field whose counter is `c` and kept dots
/// `kept` (values set): the counter's number; 0 where the counter reads
/// removed but an add its removal did not see keeps the field; where the
/// last reset wrote no number, what that reset's dot wrote, or the newest
/// dot's where it is gone. The same on every node, as the counter and the
/// dots (which carry what their writes wrote) are.
fn counted_item(c: &Counter, kept: &[Dot], scores: bool) -> Option<Item> {
    if scores {
        // A score is a double: the sum rounds to one (DECISIONS 79).
        return match c.value() {
            Merged::Int(n) => Some(Item::Score(n as f64)),
            Merged::Float(f) => Some(f.to_f64()).filter(|s| !s.is_nan()).map(Item::Score),
            Merged::Absent => Some(Item::Score(0.0)),
            Merged::Other => None,
        };
    }
    match c.value() {
        Merged::Int(n) => Some(Item::Field(n.to_string().into_bytes())),
        Merged::Float(f) => Some(Item::Field(f.format_human().into_bytes())),
        Merged::Absent => Some(Item::Field(b"0".to_vec())),
        Merged::Other => (kept.iter().find(|d| d.stamp == c.reset))
            .or(kept.last())
            .and_then(|d| d.value.as_deref().cloned()),
    }
}

// ---- Encoding --------------------------------------------------------------

use super::codec::{put_bytes, put_varint, Cursor};

impl Elements {
    /// `kind 'E' | version cc members`, each member `name count dots`, each
    /// dot `stamp fp value?` (members sorted, so that equal states encode
    /// equal; a value is `0` for none, `1 bytes` a field's, `2 f64` a
    /// score).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(b'E');
        put_varint(out, self.version);
        self.cc.encode(out);
        let mut members: Vec<_> = self.dots.iter().collect();
        members.sort_unstable_by(|a, b| a.0.cmp(b.0));
        put_varint(out, members.len() as u64);
        for (m, dots) in members {
            put_bytes(out, m);
            put_varint(out, dots.len() as u64);
            for d in dots {
                put_varint(out, d.stamp);
                out.extend_from_slice(&d.fp.to_le_bytes());
                match d.value.as_deref() {
                    None | Some(Item::Member) => out.push(0),
                    Some(Item::Field(v)) => {
                        out.push(1);
                        put_bytes(out, v);
                    }
                    Some(Item::Score(f)) => {
                        out.push(2);
                        out.extend_from_slice(&f.to_bits().to_le_bytes());
                    }
                }
            }
        }
        // After the members, tagged sections, each only where it holds
        // something: `c` counted fields, `t` TTL dots.
        if !self.counters.is_empty() {
            let mut counted: Vec<_> = self.counters.iter().collect();
            counted.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(if self.scores { b'z' } else { b'c' });
            put_varint(out, counted.len() as u64);
            for (m, c) in counted {
                put_bytes(out, m);
                let mut one = Vec::new();
                c.encode(&mut one);
                put_bytes(out, &one);
            }
        }
        if !self.ttl.is_empty() {
            out.push(b't');
            self.ttl.encode(out);
        }
        if !self.member_ttls.is_empty() {
            out.push(b'm');
            self.member_ttls.encode(out);
        }
    }

    pub fn decode(b: &[u8]) -> Result<Elements, String> {
        let mut c = Cursor(b);
        if c.byte()? != b'E' {
            return Err("unknown merge metadata".into());
        }
        let version = c.varint()?;
        let cc = Context::decode(&mut c)?;
        let n = c.count()?;
        let mut dots = HashMap::with_capacity(n);
        for _ in 0..n {
            let m = c.bytes()?;
            let k = c.count()?;
            if k == 0 {
                return Err("a member without dots in merge metadata".into());
            }
            let mut ds = Vec::with_capacity(k);
            for _ in 0..k {
                let stamp = c.varint()?;
                let fp = c.u64_le()?;
                let value = match c.byte()? {
                    0 => None,
                    1 => Some(Item::Field(c.bytes()?.to_vec())),
                    2 => Some(Item::Score(f64::from_bits(c.u64_le()?))),
                    _ => return Err("bad value in merge metadata".into()),
                };
                let value = value.map(Box::new);
                ds.push(Dot { stamp, fp, value });
            }
            if ds.windows(2).any(|w| w[0].stamp >= w[1].stamp) {
                return Err("merge metadata dots out of order".into());
            }
            dots.insert(m.into(), ds.into());
        }
        let mut counters = HashMap::new();
        let mut ttl = Ttl::default();
        let mut member_ttls = MemberTtlDots::default();
        let mut scores = false;
        while !c.0.is_empty() {
            match c.byte()? {
                tag @ (b'c' | b'z') if counters.is_empty() => {
                    scores = tag == b'z';
                    for _ in 0..c.count()? {
                        let m = c.bytes()?;
                        counters.insert(m.into(), Counter::decode(c.bytes()?)?);
                    }
                }
                b't' if ttl.is_empty() => ttl = Ttl::decode(&mut c)?,
                b'm' if member_ttls.is_empty() => member_ttls = MemberTtlDots::decode(&mut c)?,
                _ => return Err("bad section in merge metadata".into()),
            }
        }
        c.end()?;
        Ok(Elements {
            version,
            dots,
            cc,
            touched: Vec::new(),
            counters,
            scores,
            ttl,
            member_ttls,
        })
    }

    /// DEBUG MERGEINFO's lines (at most 16 members shown, each with its
    /// dots: `member@stamp[+stamp...]`).
    pub fn describe(&self) -> Vec<String> {
        let mut members: Vec<_> = self.dots.iter().collect();
        members.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let shown: Vec<String> = members
            .iter()
            .take(16)
            .map(|(m, ds)| {
                let stamps: Vec<String> = ds.iter().map(|d| d.stamp.to_string()).collect();
                format!("{}@{}", String::from_utf8_lossy(m), stamps.join("+"))
            })
            .collect();
        let mut counted: Vec<String> = (self.counters.iter())
            .take(16)
            .map(|(m, c)| {
                let parts = |ps: &[super::Part]| -> String {
                    let ps: Vec<String> = ps
                        .iter()
                        .map(|p| format!("{}:{}", p.slot, p.total()))
                        .collect();
                    ps.join("+")
                };
                format!(
                    "{}=[{}]{}@{} reset:{} base:{:?} observed:[{}]",
                    String::from_utf8_lossy(m),
                    parts(&c.parts),
                    c.value().describe(),
                    c.version,
                    c.reset,
                    c.base(),
                    parts(&c.observed)
                )
            })
            .collect();
        counted.sort_unstable();
        let mut lines = vec![
            "type:elements".to_string(),
            format!("version:{}", self.version),
            self.cc.describe(),
            format!("dots:{} {}", self.dots.len(), shown.join(",")),
        ];
        if !self.counters.is_empty() {
            lines.push(format!(
                "counters:{} {}",
                self.counters.len(),
                counted.join(",")
            ));
        }
        if !self.ttl.is_empty() {
            lines.push(self.ttl.describe());
        }
        if !self.member_ttls.is_empty() {
            lines.push(self.member_ttls.describe());
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::set::SetValue;

    fn set(members: &[&str]) -> Value {
        let mut s = SetValue::default();
        for m in members {
            s.add(m.as_bytes(), 512);
        }
        Value::Set(Box::new(s))
    }

    fn st(ms: u64, node: u64) -> u64 {
        make_stamp(ms, 0, node)
    }

    /// From one common state, A adds x and removes b, B adds y and removes
    /// c: everything survives but the removed ones, on both sides.
    #[test]
    fn adds_and_removes_of_different_members_all_survive() {
        let v0 = st(10, 1);
        let base = set(&["a", "b", "c"]);
        let common = Elements::current(None, v0, Some(&base));
        let (va, vb) = (set(&["a", "c", "x"]), set(&["a", "b", "y"]));
        let a = Elements::current(Some(&common), st(20, 1), Some(&va));
        let b = Elements::current(Some(&common), st(21, 2), Some(&vb));
        let (ab, ch) = a.join(Some(&va), &b, Some(&vb));
        let (ba, _) = b.join(Some(&vb), &a, Some(&va));
        assert_eq!(ab, ba);
        assert_eq!(
            ch,
            vec![
                Change::Remove(b"c".to_vec()),
                Change::Put(b"y".to_vec(), Item::Member)
            ]
        );
        let mut members: Vec<_> = ab.dots.keys().map(|m| m.to_vec()).collect();
        members.sort();
        assert_eq!(members, vec![b"a".to_vec(), b"x".to_vec(), b"y".to_vec()]);
    }

    /// An add concurrent with a remove of the same member keeps it.
    #[test]
    fn add_wins_over_a_concurrent_remove() {
        let v0 = st(10, 1);
        let base = set(&["m"]);
        let common = Elements::current(None, v0, Some(&base));
        let removed = Elements::current(Some(&common), st(20, 1), None);
        // B re-adds m: a new dot (its SADD of a member it had is a no-op in
        // the value, but a DEL+SADD or SREM+SADD gives it a fresh dot).
        let mut readded = Elements::current(Some(&common), st(21, 2), None);
        readded = Elements::current(Some(&readded), st(22, 2), Some(&base));
        let (j, ch) = removed.join(None, &readded, Some(&base));
        assert_eq!(ch, vec![Change::Put(b"m".to_vec(), Item::Member)]);
        assert!(j.dots.contains_key(&b"m"[..]));
        // The remove alone (B never touched m again) removes it.
        let (j, ch) = common.join(Some(&base), &removed, None);
        assert_eq!(ch, vec![Change::Remove(b"m".to_vec())]);
        assert!(j.dots.is_empty());
    }

    /// A and B add m concurrently; C, which saw only B's add, removes it.
    /// A's add was seen by no remove, so m stays, whatever order the three
    /// states join in (one dot per member kept only the newer add, and the
    /// order decided: the join was not associative; simulator merge seed 0).
    #[test]
    fn concurrent_adds_survive_a_remove_that_saw_one_in_any_order() {
        let m = set(&["m"]);
        let a = Elements::current(None, st(10, 1), Some(&m));
        let b = Elements::current(None, st(11, 2), Some(&m));
        let c = Elements::current(Some(&b), st(12, 3), None);
        let j = |x: &Elements, y: &Elements| {
            let xv = (!x.dots.is_empty()).then_some(&m);
            let yv = (!y.dots.is_empty()).then_some(&m);
            x.join(xv, y, yv).0
        };
        let ab_c = j(&j(&a, &b), &c);
        let a_bc = j(&a, &j(&b, &c));
        let ac_b = j(&j(&a, &c), &b);
        assert_eq!(ab_c.dots, a_bc.dots);
        assert_eq!(ab_c.dots, ac_b.dots);
        let stamps: Vec<u64> = ab_c.dots[&b"m"[..]].iter().map(|d| d.stamp).collect();
        assert_eq!(stamps, vec![st(10, 1)], "A's add survives, B's was removed");
    }

    fn hash(fields: &[(&str, &str)]) -> Value {
        let mut h = crate::keyspace::hash::HashValue::default();
        let lim = crate::keyspace::hash::HashLimits {
            entries: 128,
            value: 64,
        };
        for (f, v) in fields {
            h.set(f.as_bytes(), v.as_bytes(), lim);
        }
        Value::Hash(Box::new(h))
    }

    /// What HINCRBY does at its origin: the field counts, then its dot
    /// follows as the write's (what `Shard::count_field` runs).
    fn hincrby(e: &Elements, f: &str, stamp: u64, by: i128, before: i128, now: &Value) -> Elements {
        let mut e = e.clone();
        e.count_field(f.as_bytes(), stamp, Incr::Int(by), Base::Int(before));
        e.touched.push(f.as_bytes().into());
        Elements::current(Some(&e), stamp, Some(now))
    }

    fn field(j: &(Elements, Vec<Change>)) -> Vec<Change> {
        j.1.iter()
            .filter(|c| matches!(c, Change::Put(..)))
            .map(|c| match c {
                Change::Put(m, i) => Change::Put(m.clone(), i.clone()),
                Change::Remove(m) => Change::Remove(m.clone()),
            })
            .collect()
    }

    fn put(f: &str, v: &str) -> Vec<Change> {
        vec![Change::Put(
            f.as_bytes().to_vec(),
            Item::Field(v.as_bytes().to_vec()),
        )]
    }

    /// h.f=1; A: HINCRBY 2, B: HINCRBY 5 -> 8, both ways.
    #[test]
    fn concurrent_field_increments_add_up() {
        let v0 = hash(&[("f", "1")]);
        let common = Elements::current(None, st(10, 1), Some(&v0));
        let (va, vb) = (hash(&[("f", "3")]), hash(&[("f", "6")]));
        let a = hincrby(&common, "f", st(20, 1), 2, 1, &va);
        let b = hincrby(&common, "f", st(21, 2), 5, 1, &vb);
        assert_eq!(field(&a.join(Some(&va), &b, Some(&vb))), put("f", "8"));
        assert_eq!(field(&b.join(Some(&vb), &a, Some(&va))), put("f", "8"));
        let (ab, _) = a.join(Some(&va), &b, Some(&vb));
        let (ba, _) = b.join(Some(&vb), &a, Some(&va));
        assert!(ab.same_content(&ba));
    }

    /// A counted field: A's HSET resets what A saw, B's concurrent
    /// HINCRBY survives it; A's HDEL leaves only B's unseen increment.
    #[test]
    fn a_field_reset_keeps_the_increments_it_did_not_see() {
        let v0 = hash(&[("f", "1"), ("g", "0")]);
        let base = Elements::current(None, st(10, 1), Some(&v0));
        let v1 = hash(&[("f", "2"), ("g", "0")]);
        let common = hincrby(&base, "f", st(12, 3), 1, 1, &v1);
        let va = hash(&[("f", "10"), ("g", "0")]);
        let a = Elements::current(Some(&common), st(20, 1), Some(&va));
        let vb = hash(&[("f", "7"), ("g", "0")]);
        let b = hincrby(&common, "f", st(21, 2), 5, 2, &vb);
        assert_eq!(field(&a.join(Some(&va), &b, Some(&vb))), put("f", "15"));
        assert_eq!(field(&b.join(Some(&vb), &a, Some(&va))), put("f", "15"));
        let vd = hash(&[("g", "0")]);
        let d = Elements::current(Some(&common), st(20, 1), Some(&vd));
        assert_eq!(field(&d.join(Some(&vd), &b, Some(&vb))), put("f", "5"));
        assert_eq!(field(&b.join(Some(&vb), &d, Some(&vd))), put("f", "5"));
    }

    /// A counted field: A's HSET of a non-integer is a reset that no
    /// concurrent HINCRBY adds to (B's), so both read what A wrote, and a
    /// later HDEL that saw only B's dot leaves the same state on each.
    #[test]
    fn a_non_integer_reset_of_a_counted_field_reads_the_same_everywhere() {
        let v0 = hash(&[("f", "1")]);
        let base = Elements::current(None, st(10, 1), Some(&v0));
        let v1 = hash(&[("f", "2")]);
        let common = hincrby(&base, "f", st(12, 3), 1, 1, &v1);
        let va = hash(&[("f", "abc")]);
        let a = Elements::current(Some(&common), st(20, 1), Some(&va));
        let vb = hash(&[("f", "7")]);
        let b = hincrby(&common, "f", st(21, 2), 5, 2, &vb);
        let ab = a.join(Some(&va), &b, Some(&vb));
        let ba = b.join(Some(&vb), &a, Some(&va));
        assert_eq!(field(&ab), vec![]); // A holds it already
        assert_eq!(field(&ba), put("f", "abc"));
        assert!(ab.0.same_content(&ba.0));
        // D saw B's increment only, then deleted the field.
        let vd = hash(&[]);
        let d = Elements::current(Some(&b), st(22, 4), Some(&vd));
        let vab = hash(&[("f", "abc")]);
        let (x, _) = ab.0.join(Some(&vab), &d, Some(&vd));
        let (y, dy) = d.join(Some(&vd), &ab.0, Some(&vab));
        assert!(x.same_content(&y), "{x:?}\n{y:?}");
        assert_eq!(x.dots[&b"f"[..]].len(), 1); // A's add survives D's HDEL
        assert_eq!(field(&(y, dy)), put("f", "0")); // DECISIONS 78's known wart
    }

    /// Counters and TTL dots survive the encoding.
    #[test]
    fn counted_fields_and_ttl_dots_round_trip() {
        let v0 = hash(&[("f", "1")]);
        let common = Elements::current(None, st(10, 1), Some(&v0));
        let mut a = hincrby(&common, "f", st(20, 1), 2, 1, &hash(&[("f", "3")]));
        a.ttl.refresh(st(20, 1), true, 99_000);
        let mut out = Vec::new();
        a.encode(&mut out);
        let mut back = Elements::decode(&out).unwrap();
        back.touched.clear();
        a.touched.clear();
        assert_eq!(back, a);
        assert!(Elements::decode(&out[..out.len() - 1]).is_err());
        // A sorted set's score counters keep saying so.
        a.scores = true;
        let mut out = Vec::new();
        a.encode(&mut out);
        assert!(Elements::decode(&out).unwrap().scores);
    }

    fn dot(stamp: u64, fp: u64, value: Option<Item>) -> Dot {
        let value = value.map(Box::new);
        Dot { stamp, fp, value }
    }

    /// Two states as the build before compact dots (74ebb75) encoded them
    /// (hex from a test run on that tree): members with one dot and with
    /// several, older dots carrying a field's value or a score, a counted
    /// field, TTL dots. They decode to what was encoded and encode back
    /// to the same bytes: the wire, RDB and AOF did not change.
    fn old_states() -> [Elements; 2] {
        let mut e = Elements::current(None, st(6, 2), Some(&set(&["a", "b", "z"])));
        let a = vec![
            dot(st(4, 2), 7, Some(Item::Field(b"old".to_vec()))),
            dot(st(5, 3), 9, None),
        ];
        let z = vec![
            dot(st(3, 1), 1.5f64.to_bits(), Some(Item::Score(1.5))),
            dot(st(6, 2), 11, None),
        ];
        e.dots.insert(b"a"[..].into(), a.into());
        e.dots.insert(b"z"[..].into(), z.into());
        let v0 = hash(&[("f", "1"), ("g", "x")]);
        let common = Elements::current(None, st(10, 1), Some(&v0));
        let v1 = hash(&[("f", "3"), ("g", "x")]);
        let mut c = hincrby(&common, "f", st(20, 1), 2, 1, &v1);
        c.ttl.refresh(st(20, 1), true, 99_000);
        c.touched.clear();
        [e, c]
    }

    const OLD_HEX: [&str; 2] = ["458280800c01028280800c0301610282808008070000000000000001036f6c648380800a0900000000000000000162018280800c000000000000000000017a0281808006000000000000f83f02000000000000f83f8280800c0b0000000000000000", "45818080280101818080280201660181808028629e01864cae63af01013301670181808014071702864cf563af00630101663143818080288180801401010000000000000000000000000000000001010200000000000000000000000000000081808028740181808028b88506"];

    #[test]
    fn states_the_previous_version_encoded_decode() {
        for (e, hex) in old_states().iter().zip(OLD_HEX) {
            let mut out = Vec::new();
            e.encode(&mut out);
            let got: String = out.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, hex);
            let back = Elements::decode(&out).unwrap();
            assert_eq!(&back, e);
            let mut again = Vec::new();
            back.encode(&mut again);
            assert_eq!(again, out);
        }
    }

    /// What a member's merge state costs (DECISIONS 151).
    #[test]
    fn a_dot_is_three_words() {
        assert_eq!(std::mem::size_of::<Dot>(), 24);
        assert_eq!(std::mem::size_of::<Dots>(), 32);
    }

    /// One dot is held inline, more in a vector, back inline when one is
    /// left; either way they read and compare as the same slice.
    #[test]
    fn dots_go_inline_when_one() {
        let (a, b) = (dot(1, 0, None), dot(2, 0, Some(Item::Score(1.0))));
        let mut ds = Dots::default();
        ds.insert(0, b.clone());
        assert!(matches!(ds, Dots::One(_)));
        ds.insert(0, a.clone());
        assert!(matches!(&ds, Dots::Many(v) if v.len() == 2));
        assert_eq!(&ds[..], &[a.clone(), b.clone()]);
        assert_eq!(ds, Dots::Many(vec![a.clone(), b.clone()]));
        ds.retain(|d| d.stamp == 2);
        assert!(matches!(&ds, Dots::One(d) if *d == b));
        assert_eq!(ds, Dots::Many(vec![b]));
        ds.retain(|_| false);
        assert!(ds.is_empty());
        assert_eq!(Dots::from(vec![a.clone()]), Dots::One(a));
    }

    #[test]
    fn encoding_round_trips() {
        let mut e = Elements::current(None, st(5, 3), Some(&set(&["a", "bb", "1"])));
        e.dots.get_mut(&b"a"[..]).unwrap().insert(
            0,
            Dot {
                stamp: st(4, 2),
                fp: 7,
                value: Some(Box::new(Item::Field(b"old".to_vec()))),
            },
        );
        let mut out = Vec::new();
        e.encode(&mut out);
        assert_eq!(Elements::decode(&out).unwrap(), e);
        assert!(Elements::decode(&out[..out.len() - 2]).is_err());
    }
}
