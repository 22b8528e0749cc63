//! Edits of a list away from its ends (LSET, LINSERT, LREM) as facts
//! (issue 24; docs/MERGE-DESIGN.md section 9): the origin applies the edit to the
//! list's elements by index and names the element ids it touched; a peer
//! finds those ids in its own elements and applies the same edit there,
//! with no round trip for the key's state. This module owns both halves:
//! [`Lists::note_edit`] at the origin (with `Shard::note_list_edit`, which
//! reads the list), [`Lists::plan_edit_fact`] then [`Lists::commit_edit_fact`]
//! at a peer.
//!
//! - LSET sets a register on the element: its id and position stay, its
//!   value and `set` stamp change; of two LSETs of one element the newer
//!   stamp's value is kept. An LSET concurrent with a remove of the
//!   element (a pop, LREM, LTRIM) wins: the element stays, with the LSET's
//!   value, where it stood (an update wins, as a re-add does; DECISIONS
//!   220). A remove's fact that meets an element whose LSET its origin
//!   may not have seen, and an LSET's fact whose element is gone here,
//!   are gaps: the key's state decides.
//! - LINSERT puts a new element `(stamp, 0)` as a child of its left
//!   neighbour's position (the head or tail zone where it has none), as a
//!   diff placed such an element before (RGA, lists.rs' module comment).
//! - LREM removes the element ids it saw (an observed remove).
//!
//! A peer locates ids by a scan of its elements: O(list), as the lists
//! have no index by id (the edits themselves are O(list) in Redis).

use super::{Component, Elem, Lists};
use crate::keyspace::hlc;
use crate::keyspace::merge::context::fingerprint;
use crate::keyspace::merge::fact::{self, Fact, NotApplied, ADD, DROP, PREV, SHIFT, WORD};
use crate::keyspace::merge::MergeType;
use crate::keyspace::{Shard, Value};

/// An edit at its origin, by indices of the list (the values' fingerprints).
pub enum Edit<'a> {
    /// LSET: the element at `index` held `old`, now `new`.
    Set { index: usize, old: u64, new: u64 },
    /// LINSERT: a value `fp` put at `index` (of the list after it).
    Insert { index: usize, fp: u64 },
    /// LREM: the elements at `indices` (ascending, of the list before it),
    /// each of value `fp`, removed.
    Remove { indices: &'a [usize], fp: u64 },
}

/// Where an inserted element's position comes from (a WORD in its fact).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// After the element of this id: a child of its position.
    After((u64, u32)),
    /// Before every element (a root of the head zone).
    Head,
    /// After every element (a root of the tail zone).
    Tail,
}

/// An edit's fact as a peer applies it.
pub enum EditFact<'a> {
    Set { id: (u64, u32), fp: u64 },
    Insert { place: Place, fp: u64 },
    Remove { ids: &'a [(u64, u32)] },
}

/// What an applied edit fact changes in the list's values here: nothing,
/// the value at an index, a value inserted at an index, the values at
/// these (ascending) indices removed.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    None,
    Set(usize),
    Insert(usize),
    Remove(Vec<usize>),
}

impl Edit<'_> {
    /// The fingerprints of the list before the edit, from those after it
    /// (None where the indices do not fit).
    fn before(&self, after: &[u64]) -> Option<Vec<u64>> {
        let mut b = after.to_vec();
        match *self {
            Edit::Set { index, old, .. } => *b.get_mut(index)? = old,
            Edit::Insert { index, .. } => {
                (index < b.len()).then(|| b.remove(index))?;
            }
            Edit::Remove { indices, fp } => {
                for &i in indices {
                    (i <= b.len()).then(|| b.insert(i, fp))?;
                }
            }
        }
        Some(b)
    }
}

/// An element id as a fact entry of `kind` (`kind | k << SHIFT, stamp`);
/// None where its index does not fit the entry.
fn entry(kind: u32, (stamp, k): (u64, u32)) -> Option<Fact> {
    (k < 1 << (32 - SHIFT)).then_some((kind | (k << SHIFT), stamp))
}

/// The position of an element inserted by `stamp` at `place`
/// (`anchor`: the position of `place`'s element, if any).
fn inserted(place: Place, anchor: &[Component], stamp: u64) -> Vec<Component> {
    match place {
        Place::Head => vec![(-1, u64::MAX - stamp, 0)],
        Place::Tail => vec![(1, stamp, 0)],
        Place::After(_) => {
            let mut p = anchor.to_vec();
            p.push((0, u64::MAX - stamp, u32::MAX));
            p
        }
    }
}

impl Place {
    /// Its WORD's number in a fact.
    fn word(self) -> u64 {
        match self {
            Place::After(_) => 0,
            Place::Head => 1,
            Place::Tail => 2,
        }
    }

    /// The place a fact's WORD (and its anchor, for `After`) names.
    pub fn of(word: u64, anchor: Option<(u64, u32)>) -> Option<Place> {
        match word {
            0 => anchor.map(Place::After),
            1 => Some(Place::Head),
            2 => Some(Place::Tail),
            _ => None,
        }
    }
}

impl Lists {
    /// At the origin: `self` is the list (current) before an edit stamped
    /// `stamp`; the edit applied to its elements, the state at `stamp`.
    /// Returns the fact's entries after its PREV, or None, nothing
    /// changed, where the edit does not fit the elements.
    pub fn note_edit(&mut self, stamp: u64, edit: &Edit) -> Option<Vec<Fact>> {
        let mut facts = Vec::new();
        match *edit {
            Edit::Set { index, new, .. } => {
                let e = self.elems.get_mut(index)?;
                facts.push(entry(ADD, e.id)?);
                (e.fp, e.set) = (new, stamp);
            }
            Edit::Insert { index, fp } => {
                let len = self.elems.len();
                let place = match index {
                    i if i > len => return None,
                    i if i == len => Place::Tail,
                    0 => Place::Head,
                    i => Place::After(self.elems[i - 1].id),
                };
                facts.push((WORD, place.word()));
                let anchor: &[Component] = match place {
                    Place::After(id) => {
                        facts.push(entry(ADD, id)?);
                        &self.elems[index - 1].pos
                    }
                    _ => &[],
                };
                let pos = inserted(place, anchor, stamp);
                let id = (stamp, 0);
                let set = 0;
                self.elems.insert(index, Elem { id, pos, fp, set });
            }
            Edit::Remove { indices, .. } => {
                if indices.iter().any(|&i| i >= self.elems.len()) {
                    return None;
                }
                for &i in indices {
                    facts.push(entry(DROP, self.elems[i].id)?);
                }
                for &i in indices.iter().rev() {
                    self.elems.remove(i);
                }
            }
        }
        self.version = stamp;
        self.ends = None;
        self.cc.see(stamp);
        Some(facts)
    }

    /// Peer: an edit's fact stamped `stamp` (`prev`: its PREV) on this
    /// state, current at the key's `version`: applied to the elements by
    /// id ([`Lists::plan_edit_fact`], [`Lists::commit_edit_fact`]).
    #[cfg(test)]
    pub fn apply_edit_fact(
        &mut self,
        (version, stamp, prev): (u64, u64, u64),
        fact: &EditFact,
    ) -> Result<Change, NotApplied> {
        let change = self.plan_edit_fact((version, stamp, prev), fact)?;
        self.commit_edit_fact((version, stamp), fact, &change);
        Ok(change)
    }

    /// What an edit's fact stamped `stamp` (`prev`: its PREV) changes in
    /// the values of this state, current at the key's `version`; nothing
    /// changed yet. A gap where an id it names has not arrived here, an
    /// LSET's element is gone here (the LSET wins, and only the key's
    /// state tells where it stood), the anchor of an insert is gone, or a
    /// remove meets an LSET its origin may not have seen.
    pub fn plan_edit_fact(
        &self,
        (version, stamp, prev): (u64, u64, u64),
        fact: &EditFact,
    ) -> Result<Change, NotApplied> {
        if self.cc.covers(stamp) {
            return Err(NotApplied::Duplicate);
        }
        if self.version != version || (prev != 0 && !self.cc.covers(prev)) {
            return Err(NotApplied::Gap);
        }
        match *fact {
            EditFact::Set { id, .. } => match self.find(id) {
                Some(j) if self.elems[j].set < stamp => Ok(Change::Set(j)),
                Some(_) => Ok(Change::None),
                None => Err(NotApplied::Gap),
            },
            EditFact::Insert { place, .. } => {
                let e = self.inserted_elem(place, 0, stamp)?;
                let key = (&e.pos, e.id);
                let j = (self.elems.iter())
                    .position(|o| (&o.pos, o.id) > key)
                    .unwrap_or(self.elems.len());
                Ok(Change::Insert(j))
            }
            EditFact::Remove { ids } => self.removed_here(ids, stamp),
        }
    }

    /// Applies a planned `change` of `fact` to the elements; the state at
    /// the newer of `version` and `stamp`.
    pub fn commit_edit_fact(
        &mut self,
        (version, stamp): (u64, u64),
        fact: &EditFact,
        change: &Change,
    ) {
        match (change, fact) {
            (Change::Set(j), EditFact::Set { fp, .. }) => {
                (self.elems[*j].fp, self.elems[*j].set) = (*fp, stamp);
            }
            (Change::Insert(j), EditFact::Insert { place, fp }) => {
                if let Ok(e) = self.inserted_elem(*place, *fp, stamp) {
                    self.elems.insert(*j, e);
                }
            }
            (Change::Remove(at), _) => {
                for &j in at.iter().rev() {
                    self.elems.remove(j);
                }
            }
            _ => {}
        }
        self.version = version.max(stamp);
        self.ends = None;
        self.cc.see(stamp);
    }

    fn find(&self, id: (u64, u32)) -> Option<usize> {
        self.elems.iter().position(|e| e.id == id)
    }

    /// The element an insert stamped `stamp` at `place` makes here (a gap
    /// where its anchor is not here).
    fn inserted_elem(&self, place: Place, fp: u64, stamp: u64) -> Result<Elem, NotApplied> {
        let anchor: &[Component] = match place {
            Place::After(a) => &self.elems[self.find(a).ok_or(NotApplied::Gap)?].pos,
            _ => &[],
        };
        let pos = inserted(place, anchor, stamp);
        Ok(Elem {
            id: (stamp, 0),
            pos,
            fp,
            set: 0,
        })
    }

    /// An observed remove: the indices (ascending) of the ids still here.
    fn removed_here(&self, ids: &[(u64, u32)], stamp: u64) -> Result<Change, NotApplied> {
        let mut at = Vec::with_capacity(ids.len());
        for &id in ids {
            match self.find(id) {
                Some(j) if super::set_seen_by_origin(&self.elems[j], stamp) => at.push(j),
                Some(_) => return Err(NotApplied::Gap),
                None if self.cc.covers(id.0) => {}
                None => return Err(NotApplied::Gap),
            }
        }
        at.sort_unstable();
        Ok(Change::Remove(at))
    }
}

impl Shard {
    /// Active replication, at the origin of an edit stamped `stamp` of the
    /// list at `key` (version `prev` before): its merge state follows the
    /// edit by index ([`Lists::note_edit`]), and the write's fact goes to
    /// `facts` (PREV, then the ids it named). Nothing changes, the write
    /// left to the diff and its peers asking for the key's state, where
    /// the key has no list state, or this stamp wrote it already (a
    /// transaction's second write).
    pub fn note_list_edit(
        &mut self,
        hash: u64,
        key: &[u8],
        (prev, stamp): (u64, u64),
        edit: &Edit,
        facts: &mut Vec<Fact>,
    ) {
        if !fact::LIST_EDIT_FACTS {
            return;
        }
        let node = hlc::stamp_node(stamp);
        let Some(old) = self.merge_meta(key).and_then(Lists::of) else {
            return;
        };
        let newest = old.cc.newest(node);
        if newest >= stamp {
            return;
        }
        // The common case: the state is the list's before the edit, and
        // the edit applies in place. Else it is brought up to that version
        // first (O(list), as a read would).
        if old.version != prev || old.ends.is_some() {
            let after: Vec<u64> = match self.pos(hash, key).map(|p| &self.entries.get(p).value) {
                Some(Value::List(l)) => l.iter().map(fingerprint).collect(),
                None => Vec::new(),
                Some(_) => return,
            };
            let Some(before) = edit.before(&after) else {
                return;
            };
            let fresh = Lists::current_fps(Some(old), prev, &before);
            self.set_merge_meta(key, fresh.wrap());
        }
        let Some(l) = self.merge.get_mut(key).and_then(|m| m.get_mut::<Lists>()) else {
            return;
        };
        let Some(entries) = l.note_edit(stamp, edit) else {
            return;
        };
        facts.push((PREV | (1 << SHIFT), newest));
        facts.extend(entries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::list::ListValue;
    use crate::keyspace::merge::lists::values;

    fn list(items: &[&str]) -> Value {
        let mut l = ListValue::new();
        for i in items {
            l.push_back(-2, i.as_bytes());
        }
        Value::List(Box::new(l))
    }

    fn fp(s: &str) -> u64 {
        fingerprint(s.as_bytes())
    }

    fn id_of(f: &Fact) -> (u64, u32) {
        (f.1, f.0 >> SHIFT)
    }

    /// An LSET, an LINSERT and an LREM among equal values, applied by
    /// their facts on a peer that held what the origin held: the peer's
    /// state is the origin's, and each fact changes the index it should.
    #[test]
    fn edit_facts_reproduce_the_origins_edits_among_equal_values() {
        let s0 = make_stamp(10, 0, 1);
        let base = Lists::current(None, s0, Some(&list(&["t", "t", "t", "u"])));
        let (mut origin, mut peer) = (base.clone(), base.clone());
        // LSET l 1 X.
        let s1 = make_stamp(20, 0, 1);
        let set = Edit::Set {
            index: 1,
            old: fp("t"),
            new: fp("X"),
        };
        let f = origin.note_edit(s1, &set).unwrap();
        let fact = EditFact::Set {
            id: id_of(&f[0]),
            fp: fp("X"),
        };
        assert_eq!(peer.apply_edit_fact((s0, s1, 0), &fact), Ok(Change::Set(1)));
        assert_eq!(
            peer.apply_edit_fact((s1, s1, 0), &fact),
            Err(NotApplied::Duplicate)
        );
        // LINSERT l AFTER X n (after index 1): [t X n t u].
        let s2 = make_stamp(30, 0, 1);
        let ins = Edit::Insert {
            index: 2,
            fp: fp("n"),
        };
        let f = origin.note_edit(s2, &ins).unwrap();
        assert_eq!(f[0], (WORD, 0));
        let place = Place::of(f[0].1, Some(id_of(&f[1]))).unwrap();
        let fact = EditFact::Insert { place, fp: fp("n") };
        assert_eq!(
            peer.apply_edit_fact((s1, s2, s1), &fact),
            Ok(Change::Insert(2))
        );
        // LREM l -1 t: the last t (index 3), not the first.
        let s3 = make_stamp(40, 0, 1);
        let rem = Edit::Remove {
            indices: &[3],
            fp: fp("t"),
        };
        let f = origin.note_edit(s3, &rem).unwrap();
        let ids: Vec<(u64, u32)> = f.iter().map(id_of).collect();
        assert_eq!(ids, [base.elems[2].id]);
        let fact = EditFact::Remove { ids: &ids };
        assert_eq!(
            peer.apply_edit_fact((s2, s3, s2), &fact),
            Ok(Change::Remove(vec![3]))
        );
        assert!(origin.same_content(&peer));
        assert_eq!(origin.version, peer.version);
        // A fact whose PREV this peer has not seen is a gap.
        let s5 = make_stamp(60, 0, 1);
        let later = make_stamp(50, 0, 1);
        let fact = EditFact::Remove { ids: &[] };
        assert_eq!(
            peer.apply_edit_fact((s3, s5, later), &fact),
            Err(NotApplied::Gap)
        );
    }

    /// Two LSETs of one element join to the newer's value either way, the
    /// list as long as before; an LSET joins over a concurrent pop of its
    /// element (update wins); the LSET stamps survive the encoding.
    #[test]
    fn lsets_join_as_a_register_that_wins_over_a_remove() {
        let s0 = make_stamp(10, 0, 1);
        let v0 = list(&["a", "b", "c"]);
        let base = Lists::current(None, s0, Some(&v0));
        let set = |node: u64, ms: u64, new: &str| {
            let mut l = base.clone();
            let edit = Edit::Set {
                index: 1,
                old: fp("b"),
                new: fp(new),
            };
            l.note_edit(make_stamp(ms, 0, node), &edit).unwrap();
            l
        };
        let (a, b) = (set(1, 20, "A"), set(2, 21, "B"));
        let (va, vb) = (
            values(Some(&list(&["a", "A", "c"]))),
            values(Some(&list(&["a", "B", "c"]))),
        );
        let (ab, xab) = a.join(&va, &b, &vb);
        let (ba, xba) = b.join(&vb, &a, &va);
        assert_eq!((ab.elems.clone(), &xab), (ba.elems.clone(), &xba));
        assert_eq!(xab, values(Some(&list(&["a", "B", "c"]))));
        // B pops b (index 1) concurrently with A's LSET of it.
        let mut popped = base.clone();
        let rem = Edit::Remove {
            indices: &[1],
            fp: fp("b"),
        };
        popped.note_edit(make_stamp(22, 0, 2), &rem).unwrap();
        let vp = values(Some(&list(&["a", "c"])));
        let (j, x) = popped.join(&vp, &a, &va);
        assert_eq!(x, va, "the LSET's element stays");
        let (_, y) = a.join(&va, &popped, &vp);
        assert_eq!(y, va);
        let mut out = Vec::new();
        j.encode(&mut out);
        assert_eq!(Lists::decode(&out).unwrap(), j);
        assert_eq!(j.elems[1].set, make_stamp(20, 0, 1));
    }
}
