//! Lists that merge per element (docs/MERGE-DESIGN.md): concurrent pushes on two
//! nodes both survive, in one order on every node, and pops, LREM, LTRIM,
//! LSET and LINSERT converge.
//!
//! Each element has an *id* (the stamp of the write that put it there and
//! its index among that write's new elements) and a *position* that never
//! changes. Elements are an observed-remove set of ids, as a collection's
//! members are (`elements.rs`): the join keeps an id both sides have, and
//! one that only one side has unless the other side's causal context `cc`
//! covers its stamp (that side saw it and removed it). The list is the
//! surviving elements in position order.
//!
//! A position is a path, compared component by component (a prefix comes
//! first): an element put at the head (no element of the old list before
//! it) gets a root component of the left zone, newest first; one put at
//! the tail (none after it), a root component of the right zone, newest
//! last; one put between two old elements is a child of its left
//! neighbour, and siblings order newest first, so it lands right after
//! that neighbour and before whatever followed it when it was written
//! (Roh et al.'s RGA, with paths instead of a tree). Pushes, the common
//! case, keep paths one component long.
//!
//! As `elements.rs` does, the state is brought up to date lazily: a write
//! moves the key's version, and whoever reads the state next diffs the
//! list against the stored elements by a fingerprint of each value (a
//! longest common subsequence: the elements it keeps stay, the others
//! were removed, and the values it does not match were put there by the
//! write, at its stamp). A rewrite too big to compare whole (more than 4M
//! cells between the common prefix and suffix) gives the elements between
//! new ids: the list is the same, only a concurrent remove of one of them
//! on another node misses.
//!
//! No diff of values can tell which of several equal values a write took
//! (`[t t t]` after an LPOP and after an RPOP are both `[t t]`), so the
//! writes that only push and pop at the ends (LPUSH, RPOP, LMOVE, LTRIM,
//! the blocking pops: the common case, and every token list's) tell the
//! state what they did ([`Lists::note_ends`]): each pushed element gets its
//! id and position there and then, and a pop names the ids it took, kept in
//! [`Ends`] in O(what moved) (a queue's writes never copy the list); the
//! next read takes the list they give instead of the diff. The same ids
//! travel in the write's fact (keyspace/merge/fact.rs), and a peer applies
//! a push or a pop at that end of its own list where it lands there
//! ([`Lists::apply_end_fact`]), with no round trip. LSET, LINSERT and LREM
//! tell the state which elements they set, put after and removed, and
//! travel as facts naming those ids (`lists/edits.rs`); an element's value
//! is a register of its LSETs ([`Elem::set`]).

use std::collections::VecDeque;

use super::context::{fingerprint, Context};
use super::ttl::Ttl;
use crate::keyspace::Value;

use super::codec::{put_varint, Cursor};
use super::fact::NotApplied;

mod edits;
pub(crate) use edits::{Change, Edit, EditFact, Place};

/// An element's id: the stamp of the write that put it and its index
/// among that write's new elements.
pub(crate) type Id = (u64, u32);

/// A position's component: zone (-1 head, 0 child, 1 tail), then the
/// order within it (see [`Lists::current`]).
pub(crate) type Component = (i8, u64, u32);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Elem {
    /// The stamp of the write that put the element, and its index among
    /// that write's new elements.
    pub id: (u64, u32),
    pub pos: Vec<Component>,
    /// A fingerprint of the value, to diff a list against its elements.
    pub fp: u64,
    /// The stamp of the element's last LSET (0: none). Its value is a
    /// register: of two LSETs of one element, the newer's value is kept
    /// ([`Lists::join`], [`Lists::apply_edit_fact`]).
    pub set: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Lists {
    /// The key's version this describes.
    pub version: u64,
    /// The elements, in list order (parallel to the list's values).
    pub elems: Vec<Elem>,
    /// The causal context: the newest stamp seen per node slot.
    pub cc: Context,
    /// What the writes since `version` did at the list's ends, where that
    /// is all they did. Local only; never encoded.
    pub ends: Option<Ends>,
    /// The key's TTL dots (`ttl.rs`).
    pub ttl: Ttl,
}

impl Elem {
    /// Whether a node of causal context `cc` saw the element as it is:
    /// its put, and its last LSET (an update wins over a concurrent
    /// remove, as a re-add does; DECISIONS 220).
    pub fn seen_by(&self, cc: &Context) -> bool {
        cc.covers(self.id.0) && (self.set == 0 || cc.covers(self.set))
    }
}

/// The list after writes that only pushed and popped at its ends, told by
/// the writes ([`Lists::note_ends`]): the elements they pushed at the head
/// (`head`, in list order), then the elements `from..to` of the state, then
/// those pushed at the tail (`tail`). `at`: the key's version after the
/// last write told (a write that did not tell moves the version on, and the
/// alignment is no longer used). Each push and pop is O(1), so a queue's
/// writes keep the state current without copying it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ends {
    head: VecDeque<Elem>,
    from: usize,
    to: usize,
    tail: VecDeque<Elem>,
    at: u64,
    /// The number of `at`'s next pushed element (a transaction's writes
    /// share a stamp).
    next_k: u32,
}

/// What a write did at one end of a list (`left`: the head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndOp {
    Push { left: bool, n: usize },
    Pop { left: bool, n: usize },
}

/// The position of the `k`-th element a push stamped `stamp` put at the
/// head (`left`) or tail of a list that was empty or not before it. At the
/// head of a list that held elements: the left zone, newest first, and the
/// push's last value first (LPUSH a b gives `b a`); otherwise the right
/// zone, newest last, an LPUSH's values again in reverse (module comment).
pub(crate) fn push_position(left: bool, was_empty: bool, stamp: u64, k: u32) -> Component {
    match (left, was_empty) {
        (true, false) => (-1, u64::MAX - stamp, u32::MAX - k),
        (true, true) => (1, stamp, u32::MAX - k),
        (false, _) => (1, stamp, k),
    }
}

impl Ends {
    fn fresh(len: usize, at: u64) -> Ends {
        Ends {
            head: VecDeque::new(),
            from: 0,
            to: len,
            tail: VecDeque::new(),
            at,
            next_k: 0,
        }
    }

    /// Whether values pushed by `stamp` at one end, numbered from `k`,
    /// sort at that end of this list by position, as a join orders them
    /// (`was_empty`: the zone the pushing write found). The pushed element
    /// next to the end is the one pushed first, `k`.
    fn fits(&self, old: &[Elem], left: bool, (stamp, was_empty): (u64, bool), k: u32) -> bool {
        self.fits_past(old, (left, 0), (stamp, was_empty), k)
    }

    /// [`Self::fits`] against the end element past the first `skip` ones
    /// at that end (an element a rotation pops before it pushes).
    fn fits_past(
        &self,
        old: &[Elem],
        (left, skip): (bool, usize),
        (stamp, was_empty): (u64, bool),
        k: u32,
    ) -> bool {
        let Some(end) = self.nth_from(old, left, skip) else {
            return true;
        };
        // On the stack: a slice orders as the Vec an element stores.
        let pos = [push_position(left, was_empty, stamp, k)];
        let ours = (&pos[..], (stamp, k));
        match left {
            true => ours < (&end.pos[..], end.id),
            false => ours > (&end.pos[..], end.id),
        }
    }

    fn len(&self) -> usize {
        self.head.len() + (self.to - self.from) + self.tail.len()
    }

    /// The `i`-th element of the list they give (`old`: the state's).
    fn nth<'a>(&'a self, old: &'a [Elem], i: usize) -> Option<&'a Elem> {
        let mid = self.to - self.from;
        if i < self.head.len() {
            self.head.get(i)
        } else if i < self.head.len() + mid {
            old.get(self.from + i - self.head.len())
        } else {
            self.tail.get(i - self.head.len() - mid)
        }
    }

    /// The `i`-th element from one end.
    fn nth_from<'a>(&'a self, old: &'a [Elem], left: bool, i: usize) -> Option<&'a Elem> {
        let len = self.len();
        match left {
            true => self.nth(old, i),
            false => len.checked_sub(i + 1).and_then(|j| self.nth(old, j)),
        }
    }

    /// Pushes `fps` (the values' fingerprints, in the order the write
    /// pushed them) at one end, as elements of `stamp` numbered on from
    /// the stamp's last push (`next_k`), with the zone the pushing write
    /// found (`was_empty`).
    fn push_at(&mut self, left: bool, stamp: u64, fps: &[u64], was_empty: bool) {
        for (i, &fp) in fps.iter().enumerate() {
            let k = self.next_k + i as u32;
            let pos = vec![push_position(left, was_empty, stamp, k)];
            let e = Elem {
                id: (stamp, k),
                pos,
                fp,
                set: 0,
            };
            if left {
                self.head.push_front(e);
            } else {
                self.tail.push_back(e);
            }
        }
        self.next_k += fps.len() as u32;
    }

    /// Pops `n` elements at one end (the new elements at that end go
    /// first, then the state's, then, the list emptied of those, the new
    /// ones at the other end); their ids, in the order popped.
    fn pop(&mut self, left: bool, n: usize, old: &[Elem]) -> Vec<(u64, u32)> {
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n.min(self.len()) {
            let (near, far) = match left {
                true => (&mut self.head, &mut self.tail),
                false => (&mut self.tail, &mut self.head),
            };
            let id = if let Some(e) = if left {
                near.pop_front()
            } else {
                near.pop_back()
            } {
                e.id
            } else if self.from < self.to {
                if left {
                    self.from += 1;
                    old[self.from - 1].id
                } else {
                    self.to -= 1;
                    old[self.to].id
                }
            } else {
                let e = if left {
                    far.pop_front()
                } else {
                    far.pop_back()
                };
                e.expect("n <= len").id
            };
            ids.push(id);
        }
        ids
    }
}

/// Whether the origin of a remove stamped `stamp` saw the element's last
/// LSET: none, or its own (a node's writes reach a peer in order); an LSET
/// of another node's may be concurrent with the remove, and only the
/// key's state tells.
pub(crate) fn set_seen_by_origin(el: &Elem, stamp: u64) -> bool {
    use crate::keyspace::hlc::stamp_node;
    el.set == 0 || (stamp_node(el.set) == stamp_node(stamp) && el.set < stamp)
}

/// What a write's end ops did ([`Lists::note_ends`]): the ids of the
/// elements its pops took, in the order taken, and whether its push found
/// the list empty (its elements' zone, [`push_position`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Told {
    pub popped: Vec<(u64, u32)>,
    /// How many of `popped` the pops at the head took (LTRIM's first op).
    pub head_popped: usize,
    pub was_empty: bool,
}

/// A list write's fact, as a peer applies it ([`Lists::apply_end_fact`]):
/// values pushed at one end (their fingerprints, in the order pushed, and
/// whether the origin's list was empty), or the elements a pop took there.
pub enum EndFact<'a> {
    Push {
        left: bool,
        fps: Vec<u64>,
        was_empty: bool,
    },
    Pop {
        left: bool,
        ids: &'a [(u64, u32)],
    },
}

/// `f` on the fingerprints of the `n` values a push put at one end of
/// `after` (the list after it), in the order it pushed them: on the stack
/// where they are a few (most pushes push one), with no allocation.
fn with_pushed<R>(after: Option<&Value>, left: bool, n: usize, f: impl FnOnce(&[u64]) -> R) -> R {
    let mut few = [0u64; 4];
    if n > few.len() {
        return f(&pushed_many(after, left, n));
    }
    let Some(Value::List(l)) = after else {
        return f(&[]);
    };
    let mut k = 0;
    let mut put = |v: &[u8]| {
        few[k] = fingerprint(v);
        k += 1;
    };
    match left {
        true => l.iter().take(n).for_each(&mut put),
        false => l.iter().rev().take(n).for_each(&mut put),
    }
    few[..k].reverse();
    f(&few[..k])
}

/// [`with_pushed`]'s fingerprints in a Vec (a push of more than a few).
fn pushed_many(after: Option<&Value>, left: bool, n: usize) -> Vec<u64> {
    let Some(Value::List(l)) = after else {
        return Vec::new();
    };
    let mut fps: Vec<u64> = match left {
        true => l.iter().take(n).map(fingerprint).collect(),
        false => l.iter().rev().take(n).map(fingerprint).collect(),
    };
    fps.reverse();
    fps
}

/// The values of a list (empty for an absent key or another type).
pub fn values(value: Option<&Value>) -> Vec<Vec<u8>> {
    match value {
        Some(Value::List(l)) => l.iter().map(<[u8]>::to_vec).collect(),
        _ => Vec::new(),
    }
}

/// For each value of the new list, the old element it still is, if any:
/// a longest common subsequence of the fingerprints (the common prefix and
/// suffix first, then the middle, when it is small enough to compare
/// whole; a bigger rewrite keeps only the prefix and suffix).
fn matching(old: &[Elem], new: &[u64]) -> Vec<Option<usize>> {
    let mut kept = vec![None; new.len()];
    let prefix = old.iter().zip(new).take_while(|(e, f)| e.fp == **f).count();
    let room = old.len().min(new.len()) - prefix;
    let suffix = (old.iter().rev().zip(new.iter().rev()))
        .take(room)
        .take_while(|(e, f)| e.fp == **f)
        .count();
    for (i, k) in kept.iter_mut().enumerate().take(prefix) {
        *k = Some(i);
    }
    for i in 0..suffix {
        kept[new.len() - 1 - i] = Some(old.len() - 1 - i);
    }
    let (om, nm) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );
    const MAX_CELLS: usize = 1 << 22;
    if om.is_empty() || nm.is_empty() || om.len() * nm.len() > MAX_CELLS {
        return kept;
    }
    // lcs[i][j]: the LCS length of om[i..] and nm[j..].
    let w = nm.len() + 1;
    let mut lcs = vec![0u32; (om.len() + 1) * w];
    for i in (0..om.len()).rev() {
        for j in (0..nm.len()).rev() {
            lcs[i * w + j] = if om[i].fp == nm[j] {
                lcs[(i + 1) * w + j + 1] + 1
            } else {
                lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < om.len() && j < nm.len() {
        if om[i].fp == nm[j] {
            kept[prefix + j] = Some(prefix + i);
            i += 1;
            j += 1;
        } else if lcs[(i + 1) * w + j] >= lcs[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    kept
}

impl Lists {
    /// The list of a key at `version` whose value is `value`: `meta` if
    /// it describes that version, else `meta` brought up to it (module
    /// comment).
    pub fn current(meta: Option<&Lists>, version: u64, value: Option<&Value>) -> Lists {
        if let Some(m) = meta.filter(|m| m.version == version) {
            return m.clone();
        }
        let new: Vec<u64> = values(value).iter().map(|v| fingerprint(v)).collect();
        Lists::current_fps(meta, version, &new)
    }

    /// [`Lists::current`] of a list whose values' fingerprints are `new`.
    pub fn current_fps(meta: Option<&Lists>, version: u64, new: &[u64]) -> Lists {
        if let Some(m) = meta.filter(|m| m.version == version) {
            return m.clone();
        }
        if let Some(told) = meta.and_then(|m| m.told(version, new)) {
            return told;
        }
        // Writes after the told ones did not tell: the list is diffed
        // against the one the told writes left.
        let told_list = meta.and_then(Lists::told_elems);
        let old: &[Elem] = match (&told_list, meta) {
            (Some(l), _) => l,
            (None, Some(m)) => &m.elems,
            (None, None) => &[],
        };
        let kept = matching(old, new);
        let mut elems: Vec<Elem> = Vec::with_capacity(new.len());
        let mut k = 0u32;
        for (i, &f) in new.iter().enumerate() {
            if let Some(o) = kept[i] {
                elems.push(old[o].clone());
                continue;
            }
            let old_before = kept[..i].iter().any(Option::is_some);
            let old_after = kept[i + 1..].iter().any(Option::is_some);
            let pos = if !old_after {
                vec![(1, version, k)]
            } else if !old_before {
                vec![(-1, u64::MAX - version, k)]
            } else {
                let mut p = elems[i - 1].pos.clone();
                p.push((0, u64::MAX - version, u32::MAX - k));
                p
            };
            elems.push(Elem {
                id: (version, k),
                pos,
                fp: f,
                set: 0,
            });
            k += 1;
        }
        let mut l = Lists {
            version,
            elems,
            cc: meta.map(|m| m.cc.clone()).unwrap_or_default(),
            ends: None,
            ttl: meta.map(|m| m.ttl.clone()).unwrap_or_default(),
        };
        l.cc.see(version);
        l
    }

    /// After a write that moved the key from version `prev` to `stamp` by
    /// `ops` at the list's ends (`after`: the list then, where a push's
    /// values are read; a push is a write's last op): the state follows
    /// them in O(what they moved) ([`Ends`]), and the next
    /// [`Lists::current`] takes the list they give. What the ops took and
    /// put is returned (for the write's fact), or None where they do not
    /// tell: a write before them that did not tell (the key's version is
    /// not `prev`), or a transaction's second push that would not sort at
    /// its end (an LPUSH to an empty list, then an RPUSH); the diff aligns
    /// the list then. A transaction's writes share a stamp: their pushed
    /// elements are numbered on.
    pub fn note_ends(
        &mut self,
        (prev, stamp): (u64, u64),
        ops: &[EndOp],
        after: Option<&Value>,
    ) -> Option<Told> {
        let mut e = match self.ends.take() {
            Some(e) if e.at == prev => e,
            None if self.version == prev && prev != stamp => Ends::fresh(self.elems.len(), prev),
            _ => return None,
        };
        if prev != stamp {
            e.next_k = 0;
        }
        let mut told = Told::default();
        for &op in ops {
            match op {
                EndOp::Push { left, n } => {
                    told.was_empty = e.len() == 0;
                    // A transaction's second push could sort elsewhere
                    // (an LPUSH to an empty list, then an RPUSH): the
                    // diff aligns the list then.
                    if !e.fits(&self.elems, left, (stamp, told.was_empty), e.next_k) {
                        return None;
                    }
                    with_pushed(after, left, n, |fps| {
                        e.push_at(left, stamp, fps, told.was_empty);
                    });
                }
                EndOp::Pop { left, n } => {
                    let ids = e.pop(left, n, &self.elems);
                    told.head_popped += if left { ids.len() } else { 0 };
                    told.popped.extend(ids);
                }
            }
        }
        e.at = stamp;
        self.cc.see(stamp);
        self.ends = Some(e);
        Some(told)
    }

    /// Whether this state describes the key at `version`: its told ends
    /// are at it, or with none told, its elements are.
    pub fn describes(&self, version: u64) -> bool {
        match &self.ends {
            Some(e) => e.at == version,
            None => self.version == version,
        }
    }

    /// Both sides of a TTL write (merge/ttl.rs) that moved the key from
    /// version `prev` to `stamp` and left its elements as they were: the
    /// state follows where it described `prev` (its told ends, or its
    /// elements, now at `stamp`). False, nothing changed, where it did not.
    pub fn note_ttl_move(&mut self, prev: u64, stamp: u64) -> bool {
        if !self.describes(prev) {
            return false;
        }
        match &mut self.ends {
            Some(e) => e.at = stamp,
            None => self.version = stamp,
        }
        self.cc.see(stamp);
        true
    }

    /// Peer: a list write's fact stamped `stamp` (keyspace/merge/fact.rs;
    /// `prev`: its PREV), on this state of the key at `version`. Returns
    /// how many values to push or pop at that end here (what to replay),
    /// the state following; a gap, nothing changed, where the write builds
    /// on what has not arrived, or its elements do not sit at that end
    /// here (a concurrent push here came between): the key's state decides
    /// then.
    pub fn apply_end_fact(
        &mut self,
        (version, stamp, prev): (u64, u64, u64),
        fact: EndFact<'_>,
    ) -> Result<usize, NotApplied> {
        let mut e = self.ends_for_fact((version, stamp, prev))?;
        let r = match fact {
            EndFact::Push {
                left,
                fps,
                was_empty,
            } => {
                let fits = self.push_fits(&e, left, (stamp, was_empty), fps.len());
                if fits {
                    e.next_k = 0;
                    e.push_at(left, stamp, &fps, was_empty);
                }
                fits.then_some(fps.len())
            }
            EndFact::Pop { left, ids } => self.popped_here(&e, left, ids, stamp).inspect(|&n| {
                e.pop(left, n, &self.elems);
            }),
        };
        if r.is_some() {
            e.at = stamp.max(version);
            self.cc.see(stamp);
        }
        self.ends = Some(e);
        r.ok_or(NotApplied::Gap)
    }

    /// The told ends a fact stamped `stamp` (its PREV `prev`) applies to,
    /// taken out of the state (the caller puts them back), on this state of
    /// the key at `version`; a duplicate where the stamp is seen, a gap
    /// where PREV is not or the state does not describe `version`.
    fn ends_for_fact(
        &mut self,
        (version, stamp, prev): (u64, u64, u64),
    ) -> Result<Ends, NotApplied> {
        if self.cc.covers(stamp) {
            return Err(NotApplied::Duplicate);
        }
        if prev != 0 && !self.cc.covers(prev) {
            return Err(NotApplied::Gap);
        }
        match self.ends.take() {
            Some(e) if e.at == version => Ok(e),
            None if self.version == version => Ok(Ends::fresh(self.elems.len(), version)),
            other => {
                self.ends = other;
                Err(NotApplied::Gap)
            }
        }
    }

    /// Peer: LTRIM's fact (DECISIONS 234): the ids it took at the head
    /// (`head`, in the order taken) and at the tail (`tail`). Each is at
    /// its end here, or gone here already (a pop here took it); returns how
    /// many to drop at the head and at the tail here (what to replay, as
    /// LTRIM), the state following; a gap, nothing changed, where an id is
    /// elsewhere, unseen, or the two ends' elements overlap here.
    pub fn apply_trim_fact(
        &mut self,
        (version, stamp, prev): (u64, u64, u64),
        (head, tail): (&[Id], &[Id]),
    ) -> Result<(usize, usize), NotApplied> {
        let mut e = self.ends_for_fact((version, stamp, prev))?;
        let front = self.popped_here(&e, true, head, stamp);
        let back = self.popped_here(&e, false, tail, stamp);
        let r = match (front, back) {
            (Some(f), Some(b)) if f + b <= e.len() => Some((f, b)),
            _ => None,
        };
        if let Some((f, b)) = r {
            e.pop(true, f, &self.elems);
            e.pop(false, b, &self.elems);
            e.at = stamp.max(version);
            self.cc.see(stamp);
        }
        self.ends = Some(e);
        r.ok_or(NotApplied::Gap)
    }

    /// Peer: the fact of an LMOVE of a list onto itself (a rotation,
    /// DECISIONS 237): the element `id` it popped at one end (`from`: the
    /// head) is at that end here, and its value (fingerprint `fp`, read
    /// here) pushed anew at the other end (`to`) by `stamp` lands at that
    /// end here; the state follows. A gap, nothing changed, where the
    /// element is not at its end here (gone, or elsewhere: the value is
    /// only known by it) or the push would not sort at its end.
    pub fn apply_rotate_fact(
        &mut self,
        (version, stamp, prev): (u64, u64, u64),
        (from, id, to): (bool, Id, bool),
        (fp, was_empty): (u64, bool),
    ) -> Result<(), NotApplied> {
        let mut e = self.ends_for_fact((version, stamp, prev))?;
        let at_end = self.popped_here(&e, from, &[id], stamp) == Some(1);
        // After the pop: the list empty, or its end at `to` past the element
        // popped where both ends are one.
        let fits = e.len() <= 1
            || e.fits_past(
                &self.elems,
                (to, usize::from(from == to)),
                (stamp, was_empty),
                0,
            );
        let ok = at_end && fits;
        if ok {
            e.pop(from, 1, &self.elems);
            e.next_k = 0;
            e.push_at(to, stamp, &[fp], was_empty);
            e.at = stamp.max(version);
            self.cc.see(stamp);
        }
        self.ends = Some(e);
        ok.then_some(()).ok_or(NotApplied::Gap)
    }

    /// Whether `n` values pushed by `stamp` at one end land at that end
    /// here: they sort before the first element (after the last) by
    /// position, as a join orders them.
    fn push_fits(&self, e: &Ends, left: bool, (stamp, was_empty): (u64, bool), n: usize) -> bool {
        n == 0 || e.fits(&self.elems, left, (stamp, was_empty), 0)
    }

    /// How many elements a pop that took `ids` (in the order taken) takes
    /// at that end here: each id is there, next, or gone here already (a
    /// pop here took it too); None where one is elsewhere in the list, or
    /// was put by a write this state has not seen.
    fn popped_here(&self, e: &Ends, left: bool, ids: &[(u64, u32)], stamp: u64) -> Option<usize> {
        let mut n = 0;
        for &id in ids {
            if let Some(el) = e.nth_from(&self.elems, left, n).filter(|el| el.id == id) {
                // An LSET here the pop may not have seen wins over it.
                if !set_seen_by_origin(el, stamp) {
                    return None;
                }
                n += 1;
                continue;
            }
            let elsewhere =
                (0..e.len()).any(|i| e.nth(&self.elems, i).is_some_and(|el| el.id == id));
            if elsewhere || !self.cc.covers(id.0) {
                return None;
            }
        }
        Some(n)
    }

    /// The elements of the list the told ends give, if any.
    fn told_elems(&self) -> Option<Vec<Elem>> {
        let e = self.ends.as_ref().filter(|e| e.to <= self.elems.len())?;
        let mid = &self.elems[e.from..e.to];
        Some(e.head.iter().chain(mid).chain(&e.tail).cloned().collect())
    }

    /// The state at `version` as the ends told give it, where they tell
    /// that version and the list is what they told (its values'
    /// fingerprints `new`; a write of the same stamp that did not tell,
    /// a transaction's LSET, leaves it otherwise).
    fn told(&self, version: u64, new: &[u64]) -> Option<Lists> {
        let e = self.ends.as_ref().filter(|e| e.at == version)?;
        if e.len() != new.len() {
            return None;
        }
        let elems = self.told_elems()?;
        if elems.iter().zip(new).any(|(o, f)| o.fp != *f) {
            return None;
        }
        let mut cc = self.cc.clone();
        cc.see(version);
        Some(Lists {
            version,
            elems,
            cc,
            ends: None,
            ttl: self.ttl.clone(),
        })
    }

    /// Whether `self` and `other` are one state but for their versions.
    pub fn same_content(&self, other: &Lists) -> bool {
        self.elems == other.elems && self.cc == other.cc && self.ttl == other.ttl
    }

    /// Joins `remote` (whose values are `remote_values`) into `self` (whose
    /// values are `local_values`): the joined state and its values.
    pub fn join(
        &self,
        local_values: &[Vec<u8>],
        remote: &Lists,
        remote_values: &[Vec<u8>],
    ) -> (Lists, Vec<Vec<u8>>) {
        let mut kept: Vec<(&Elem, &[u8])> = Vec::new();
        let find = |l: &Lists, id| l.elems.iter().position(|e| e.id == id);
        let has = |l: &Lists, id| find(l, id).is_some();
        for (e, v) in self.elems.iter().zip(local_values) {
            match find(remote, e.id) {
                // Both hold it: the newer LSET's value (a register).
                Some(j) if remote.elems[j].set > e.set => {
                    kept.push((&remote.elems[j], &remote_values[j]));
                }
                Some(_) => kept.push((e, v)),
                None if !e.seen_by(&remote.cc) => kept.push((e, v)),
                None => {}
            }
        }
        for (e, v) in remote.elems.iter().zip(remote_values) {
            if !has(self, e.id) && !e.seen_by(&self.cc) {
                kept.push((e, v));
            }
        }
        kept.sort_by(|a, b| (&a.0.pos, a.0.id).cmp(&(&b.0.pos, b.0.id)));
        let mut out = Lists {
            version: self.version.max(remote.version),
            elems: kept.iter().map(|(e, _)| (*e).clone()).collect(),
            cc: self.cc.clone(),
            ends: None,
            ttl: self.ttl.join(&self.cc, &remote.ttl, &remote.cc),
        };
        out.cc.join(&remote.cc);
        if kept.is_empty() {
            out.ttl = Ttl::default(); // a deleted key's TTL goes with it
        }
        let values = kept.iter().map(|(_, v)| v.to_vec()).collect();
        (out, values)
    }

    /// `kind 'L' | version cc elems`, each `stamp index fp path`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(b'L');
        put_varint(out, self.version);
        self.cc.encode(out);
        put_varint(out, self.elems.len() as u64);
        for e in &self.elems {
            put_varint(out, e.id.0);
            put_varint(out, u64::from(e.id.1));
            out.extend_from_slice(&e.fp.to_le_bytes());
            put_varint(out, e.pos.len() as u64);
            for &(zone, a, b) in &e.pos {
                out.push(zone as u8);
                put_varint(out, a);
                put_varint(out, u64::from(b));
            }
        }
        // After the elements, the LSET stamps where there are any (`s`:
        // count, then index and stamp per element set).
        let set: Vec<(usize, u64)> = (self.elems.iter().enumerate())
            .filter(|(_, e)| e.set != 0)
            .map(|(i, e)| (i, e.set))
            .collect();
        if !set.is_empty() {
            out.push(b's');
            put_varint(out, set.len() as u64);
            for (i, s) in set {
                put_varint(out, i as u64);
                put_varint(out, s);
            }
        }
        // Then the TTL dots where there are any (`t`).
        if !self.ttl.is_empty() {
            out.push(b't');
            self.ttl.encode(out);
        }
    }

    pub fn decode(b: &[u8]) -> Result<Lists, String> {
        let mut c = Cursor(b);
        if c.byte()? != b'L' {
            return Err("unknown merge metadata".into());
        }
        let version = c.varint()?;
        let cc = Context::decode(&mut c)?;
        let small = |v: u64| u32::try_from(v).map_err(|_| "bad list element in merge metadata");
        let n = c.count()?;
        let mut elems = Vec::with_capacity(n);
        for _ in 0..n {
            let id = (c.varint()?, small(c.varint()?)?);
            let fp = c.u64_le()?;
            let k = c.count()?;
            let mut pos = Vec::with_capacity(k);
            for _ in 0..k {
                let zone = c.byte()? as i8;
                if !(-1..=1).contains(&zone) {
                    return Err("bad list position in merge metadata".into());
                }
                pos.push((zone, c.varint()?, small(c.varint()?)?));
            }
            elems.push(Elem {
                id,
                pos,
                fp,
                set: 0,
            });
        }
        let mut ttl = Ttl::default();
        let mut section = if c.0.is_empty() {
            None
        } else {
            Some(c.byte()?)
        };
        if section == Some(b's') {
            for _ in 0..c.count()? {
                let i = usize::try_from(c.varint()?).unwrap_or(usize::MAX);
                let e = elems
                    .get_mut(i)
                    .ok_or("bad list element in merge metadata")?;
                e.set = c.varint()?;
            }
            section = if c.0.is_empty() {
                None
            } else {
                Some(c.byte()?)
            };
        }
        match section {
            None => {}
            Some(b't') => ttl = Ttl::decode(&mut c)?,
            Some(_) => return Err("bad section in merge metadata".into()),
        }
        c.end()?;
        Ok(Lists {
            version,
            elems,
            cc,
            ends: None,
            ttl,
        })
    }

    /// DEBUG MERGEINFO's lines (at most 16 elements shown, as
    /// `index:stamp.k`).
    pub fn describe(&self) -> Vec<String> {
        let shown: Vec<String> = (self.elems.iter().enumerate())
            .take(16)
            .map(|(i, e)| format!("{i}:{}.{}", e.id.0, e.id.1))
            .collect();
        vec![
            "type:list".to_string(),
            format!("version:{}", self.version),
            self.cc.describe(),
            format!("elements:{} {}", self.elems.len(), shown.join(",")),
            self.ttl.describe(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::list::ListValue;

    fn list(items: &[&str]) -> Value {
        let mut l = ListValue::new();
        for i in items {
            l.push_back(-2, i.as_bytes());
        }
        Value::List(Box::new(l))
    }

    /// A TTL write moves the state to its stamp, elements as they were,
    /// whether the ends told the list or its elements do; a state behind
    /// the key does not move.
    #[test]
    fn a_ttl_write_moves_the_state_where_it_described_the_key() {
        let st = |ms| make_stamp(ms, 0, 1);
        let v = list(&["a", "b"]);
        let mut told = Lists::current(None, st(1), None);
        let push = [EndOp::Push { left: false, n: 2 }];
        assert!(told.note_ends((st(1), st(2)), &push, Some(&v)).is_some());
        let mut plain = Lists::current(None, st(2), Some(&v));
        for l in [&mut told, &mut plain] {
            assert!(l.describes(st(2)) && !l.describes(st(3)));
            assert!(!l.note_ttl_move(st(1), st(3)), "behind the key");
            assert!(l.note_ttl_move(st(2), st(3)));
            assert!(l.describes(st(3)) && l.cc.covers(st(3)));
        }
        let now = |l: &Lists| Lists::current(Some(l), st(3), Some(&v)).elems;
        assert_eq!(now(&told), now(&plain));
    }

    /// A push's fingerprints read on the stack are the Vec's, in order.
    #[test]
    fn pushed_values_on_the_stack_read_as_in_a_vec() {
        let v = list(&["a", "b", "c", "d", "e", "f"]);
        for (n, left) in (0..=6).flat_map(|n| [(n, true), (n, false)]) {
            let want = pushed_many(Some(&v), left, n);
            assert_eq!(want.len(), n);
            assert_eq!(with_pushed(Some(&v), left, n, <[u64]>::to_vec), want);
        }
        let fp = |s: &str| fingerprint(s.as_bytes());
        let got = with_pushed(Some(&v), true, 2, <[u64]>::to_vec);
        assert_eq!(
            got,
            [fp("b"), fp("a")],
            "the head's second value went first"
        );
        assert!(with_pushed(None, true, 1, <[u64]>::is_empty));
    }

    fn st(ms: u64, node: u64) -> u64 {
        make_stamp(ms, 0, node)
    }

    fn strs(v: &[Vec<u8>]) -> Vec<String> {
        v.iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    fn join(a: &Lists, av: &Value, b: &Lists, bv: &Value) -> (Lists, Vec<String>) {
        let (j, v) = a.join(&values(Some(av)), b, &values(Some(bv)));
        (j, strs(&v))
    }

    /// From [a b], A pushes x at the head and y at the tail, B pushes p at
    /// the head and q at the tail: all survive, in one order both ways.
    #[test]
    fn concurrent_pushes_all_survive_in_one_order() {
        let base = list(&["a", "b"]);
        let common = Lists::current(None, st(10, 1), Some(&base));
        let (va, vb) = (list(&["x", "a", "b", "y"]), list(&["p", "a", "b", "q"]));
        let a = Lists::current(Some(&common), st(20, 1), Some(&va));
        let b = Lists::current(Some(&common), st(21, 2), Some(&vb));
        let (ab, vab) = join(&a, &va, &b, &vb);
        let (ba, vba) = join(&b, &vb, &a, &va);
        assert_eq!(ab, ba);
        assert_eq!(vab, vba);
        assert_eq!(vab, ["p", "x", "a", "b", "y", "q"]);
    }

    /// A pops the head while B inserts after it: the pop removes only the
    /// element A saw; B's insert stays, where B put it.
    #[test]
    fn a_pop_and_a_concurrent_insert_converge() {
        let base = list(&["a", "b", "c"]);
        let common = Lists::current(None, st(10, 1), Some(&base));
        let (va, vb) = (list(&["b", "c"]), list(&["a", "n", "b", "c"]));
        let a = Lists::current(Some(&common), st(20, 1), Some(&va));
        let b = Lists::current(Some(&common), st(21, 2), Some(&vb));
        let (ab, vab) = join(&a, &va, &b, &vb);
        let (ba, vba) = join(&b, &vb, &a, &va);
        assert_eq!(ab, ba);
        assert_eq!(vab, vba);
        assert_eq!(vab, ["n", "b", "c"]);
    }

    /// A token list `[t t t]`: A pops the head, B the tail. The writes
    /// told the state which end they took, so the list ends one token
    /// (the middle one) on both sides, not two (a diff of equal values
    /// took both pops for the last token). Pops of the same end take the
    /// same token: it is removed once.
    #[test]
    fn pops_of_equal_values_at_either_end_remove_the_elements_they_took() {
        let base = list(&["t", "t", "t"]);
        let common = Lists::current(None, st(10, 1), Some(&base));
        let two = list(&["t", "t"]);
        let popped = |prev: &Lists, stamp: u64, left: bool| {
            let mut s = prev.clone();
            s.note_ends((prev.version, stamp), &[EndOp::Pop { left, n: 1 }], None);
            Lists::current(Some(&s), stamp, Some(&two))
        };
        let a = popped(&common, st(20, 1), true);
        let b = popped(&common, st(21, 2), false);
        let (ab, vab) = join(&a, &two, &b, &two);
        let (ba, vba) = join(&b, &two, &a, &two);
        assert_eq!((ab.elems.clone(), &vab), (ba.elems.clone(), &vba));
        assert_eq!(vab, ["t"]);
        assert_eq!(ab.elems[0].id, common.elems[1].id, "the middle token");
        let b_head = popped(&common, st(21, 2), true);
        let (_, v) = join(&a, &two, &b_head, &two);
        assert_eq!(v, ["t", "t"]);
    }

    /// Pushes and pops told in a row compose: LPUSH x, RPOP 2 (the last
    /// old element and nothing new), LTRIM as pops at both ends.
    #[test]
    fn told_ends_compose_across_writes() {
        let base = list(&["a", "b", "c"]);
        let mut s = Lists::current(None, st(10, 1), Some(&base));
        let pushed = list(&["x", "a", "b", "c"]);
        s.note_ends(
            (st(10, 1), st(11, 1)),
            &[EndOp::Push { left: true, n: 1 }],
            Some(&pushed),
        );
        s.note_ends(
            (st(11, 1), st(12, 1)),
            &[EndOp::Pop { left: false, n: 2 }],
            None,
        );
        let now = Lists::current(Some(&s), st(12, 1), Some(&list(&["x", "a"])));
        assert_eq!(now.elems[1].id, s.elems[0].id, "a is still a");
        assert_eq!(now.elems[0].id, (st(11, 1), 0), "x is the push's");
        // A write that did not tell (its version is not the last told)
        // leaves the list to the diff.
        let mut t = now.clone();
        t.note_ends(
            (st(30, 1), st(31, 1)),
            &[EndOp::Pop { left: true, n: 1 }],
            None,
        );
        assert_eq!(t.ends, None);
    }

    /// The facts of an LPUSH and an RPOP, applied on a peer that holds
    /// what the origin held, leave the peer's state the origin's; a pop of
    /// an element a pop here took already takes nothing more; a push that
    /// would land behind a concurrent push here is a gap.
    #[test]
    fn end_facts_reproduce_the_origins_pushes_and_pops() {
        let base = list(&["a", "b"]);
        let s0 = st(10, 1);
        let common = Lists::current(None, s0, Some(&base));
        let (mut origin, mut peer) = (common.clone(), common.clone());
        // LPUSH l x y at the origin.
        let (s1, after) = (st(20, 1), list(&["y", "x", "a", "b"]));
        let told = origin
            .note_ends((s0, s1), &[EndOp::Push { left: true, n: 2 }], Some(&after))
            .unwrap();
        let fps = vec![fingerprint(b"x"), fingerprint(b"y")];
        let push = EndFact::Push {
            left: true,
            fps,
            was_empty: told.was_empty,
        };
        assert_eq!(peer.apply_end_fact((s0, s1, s0), push), Ok(2));
        let push = EndFact::Push {
            left: true,
            fps: vec![],
            was_empty: false,
        };
        assert_eq!(
            peer.apply_end_fact((s1, s1, s0), push),
            Err(NotApplied::Duplicate)
        );
        // RPOP l at the origin; the peer popped b too, concurrently.
        let (s2, two) = (st(30, 1), list(&["y", "x", "a"]));
        let told = origin
            .note_ends((s1, s2), &[EndOp::Pop { left: false, n: 1 }], None)
            .unwrap();
        let mut other = peer.clone();
        other
            .note_ends((s1, st(31, 2)), &[EndOp::Pop { left: false, n: 1 }], None)
            .unwrap();
        let pop = EndFact::Pop {
            left: false,
            ids: &told.popped,
        };
        assert_eq!(peer.apply_end_fact((s1, s2, s1), pop), Ok(1));
        let pop = EndFact::Pop {
            left: false,
            ids: &told.popped,
        };
        assert_eq!(other.apply_end_fact((st(31, 2), s2, s1), pop), Ok(0));
        let (o, p) = (
            Lists::current(Some(&origin), s2, Some(&two)),
            Lists::current(Some(&peer), s2, Some(&two)),
        );
        assert!(o.same_content(&p));
        // A push here newer than the origin's next LPUSH: that one lands
        // behind it, not at the head: a gap.
        let mut here = p.clone();
        let three = list(&["n", "y", "x", "a"]);
        here.note_ends(
            (s2, st(50, 2)),
            &[EndOp::Push { left: true, n: 1 }],
            Some(&three),
        )
        .unwrap();
        let push = EndFact::Push {
            left: true,
            fps: vec![fingerprint(b"z")],
            was_empty: false,
        };
        assert_eq!(
            here.apply_end_fact((st(50, 2), st(40, 1), s2), push),
            Err(NotApplied::Gap)
        );
    }

    /// LTRIM's and a rotation's facts (DECISIONS 234, 237) among equal
    /// values: the peer drops and moves the origin's elements by id and
    /// ends with its state; an element gone here already is a pop of 0
    /// for a trim, and a gap for a rotation (its value is only known by it).
    #[test]
    fn trim_and_rotation_facts_reproduce_the_origins_state() {
        let (s0, s1, s2) = (st(10, 1), st(20, 1), st(30, 1));
        let base = list(&["t", "t", "t", "t", "t"]);
        let common = Lists::current(None, s0, Some(&base));
        let (mut origin, mut peer) = (common.clone(), common.clone());
        // LTRIM l 1 -2 at the origin: one at each end.
        let trim = [
            EndOp::Pop { left: true, n: 1 },
            EndOp::Pop { left: false, n: 1 },
        ];
        let told = origin.note_ends((s0, s1), &trim, None).unwrap();
        assert_eq!(told.head_popped, 1);
        let (head, tail) = told.popped.split_at(told.head_popped);
        // A peer that popped the head element too drops only the tail's.
        let mut other = peer.clone();
        other
            .note_ends((s0, st(15, 2)), &[EndOp::Pop { left: true, n: 1 }], None)
            .unwrap();
        assert_eq!(
            other.apply_trim_fact((st(15, 2), s1, s0), (head, tail)),
            Ok((0, 1))
        );
        assert_eq!(peer.apply_trim_fact((s0, s1, s0), (head, tail)), Ok((1, 1)));
        assert_eq!(
            peer.apply_trim_fact((s1, s1, s0), (head, tail)),
            Err(NotApplied::Duplicate)
        );
        // LMOVE l l LEFT RIGHT at the origin.
        let rotate = [
            EndOp::Pop { left: true, n: 1 },
            EndOp::Push { left: false, n: 1 },
        ];
        let three = list(&["t", "t", "t"]);
        let told = origin.note_ends((s1, s2), &rotate, Some(&three)).unwrap();
        let fp = fingerprint(b"t");
        let moved = (true, told.popped[0], false);
        let mut gone = peer.clone();
        gone.note_ends((s1, st(25, 2)), &[EndOp::Pop { left: true, n: 1 }], None)
            .unwrap();
        assert_eq!(
            gone.apply_rotate_fact((st(25, 2), s2, s1), moved, (fp, told.was_empty)),
            Err(NotApplied::Gap)
        );
        assert_eq!(
            peer.apply_rotate_fact((s1, s2, s1), moved, (fp, told.was_empty)),
            Ok(())
        );
        let (o, p) = (
            Lists::current(Some(&origin), s2, Some(&three)),
            Lists::current(Some(&peer), s2, Some(&three)),
        );
        assert!(o.same_content(&p));
        assert_eq!(o.elems.last().map(|e| e.id), Some((s2, 0)));
    }

    /// A transaction's writes share a stamp: its pushes number their
    /// elements on, and the list they tell sorts as a join orders it.
    #[test]
    fn a_transactions_pushes_share_a_stamp_and_keep_their_order() {
        let base = list(&["a"]);
        let s0 = st(10, 1);
        let mut s = Lists::current(None, s0, Some(&base));
        let s1 = st(20, 1);
        let after = list(&["x", "a"]);
        s.note_ends((s0, s1), &[EndOp::Push { left: true, n: 1 }], Some(&after))
            .unwrap();
        let after = list(&["y", "x", "a", "z"]);
        s.note_ends((s1, s1), &[EndOp::Push { left: true, n: 1 }], Some(&after))
            .unwrap();
        s.note_ends((s1, s1), &[EndOp::Push { left: false, n: 1 }], Some(&after))
            .unwrap();
        let now = Lists::current(Some(&s), s1, Some(&after));
        let mut sorted = now.elems.clone();
        sorted.sort_by(|a, b| (&a.pos, a.id).cmp(&(&b.pos, b.id)));
        assert_eq!(sorted, now.elems, "list order is position order");
        let ids: Vec<(u64, u32)> = now.elems.iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![(s1, 1), (s1, 0), (s0, 0), (s1, 2)]);
    }

    #[test]
    fn encoding_round_trips() {
        let base = list(&["a", "b"]);
        let l0 = Lists::current(None, st(5, 3), Some(&base));
        let l = Lists::current(Some(&l0), st(6, 3), Some(&list(&["a", "z", "b"])));
        assert_eq!(
            l.elems[1].pos.len(),
            2,
            "an insert is its neighbour's child"
        );
        let mut out = Vec::new();
        l.encode(&mut out);
        assert_eq!(Lists::decode(&out).unwrap(), l);
        assert!(Lists::decode(&out[..out.len() - 1]).is_err());
    }
}
