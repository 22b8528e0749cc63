//! A consumer group's pending entries list (PEL): one NACK per delivered,
//! unacknowledged entry, and through the same NACKs each consumer's own
//! PEL (Redis keeps a second radix tree per consumer; here a consumer's
//! PEL is a chain through the group's NACKs).
//!
//! Layout, for XACK at pipeline 16 over ~500,000 pending entries (DECISIONS
//! 316-318): a B-tree of IDs alone (`index`, ID -> slot number) keeps its
//! nodes small, so its upper levels stay cached; the NACKs sit in a slab
//! (`slots`, reused through `free`); each slot links to the previous and
//! next NACK of the same consumer in ID order, so a consumer's PEL costs
//! two slot numbers a NACK instead of a tree of its own, and XACK edits
//! one tree and two neighbouring slots. A NACK names its consumer by a
//! shared name (one `Arc<[u8]>` per consumer, the key of its `chains`
//! entry), not an allocation of its own.
//!
//! Appending to a consumer's chain (a delivery of an entry newer than all
//! it holds) or prepending (a claim of an older one) is O(1) after the
//! tree's insert. An insert in the middle finds its neighbours by walking
//! four ways at once (the group's IDs backwards and forwards from the new
//! ID, the chain from either end) and stops at the first that finds one,
//! so it costs the shortest of those distances. A consumer's range from an
//! ID (XPENDING with a consumer, XREADGROUP of history) starts the same
//! way.
//!
//! Everything outside sees an ordered map of ID to NACK (`iter`, `range`,
//! `get`) plus each consumer's IDs in order (`of`, `of_from`,
//! `count_of`); the two sides cannot disagree, as there is one NACK.

use std::collections::BTreeMap;
use std::ops::{Bound, Index, RangeBounds};
use std::sync::Arc;

use super::stream::StreamId;

/// No slot: the end of a chain.
const NIL: u32 = u32::MAX;

/// A slab at least this long is compacted once three quarters of it is free.
const COMPACT_FROM: usize = 1024;

/// One pending entry: who holds it, when it was last delivered (unix ms)
/// and how many times. Its times may be edited in place (`Pel::get_mut`);
/// its consumer changes only through `Pel::insert`.
#[derive(Clone, Debug, PartialEq)]
pub struct Nack {
    consumer: Arc<[u8]>,
    pub delivery_time: i64,
    pub delivery_count: u64,
}

impl Nack {
    /// The consumer holding the entry.
    pub fn consumer(&self) -> &[u8] {
        &self.consumer
    }
}

/// A NACK in the slab, linked into its consumer's chain.
#[derive(Clone)]
struct Slot {
    id: StreamId,
    nack: Nack,
    prev: u32,
    next: u32,
}

/// A consumer's PEL: the ends of its chain and its length.
#[derive(Clone, Copy)]
struct Chain {
    first: u32,
    last: u32,
    len: usize,
}

#[derive(Clone, Default)]
pub struct Pel {
    index: BTreeMap<StreamId, u32>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Per consumer holding at least one NACK; the key is the name every
    /// one of its NACKs shares.
    chains: BTreeMap<Arc<[u8]>, Chain>,
}

impl Pel {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn contains_key(&self, id: &StreamId) -> bool {
        self.index.contains_key(id)
    }

    pub fn get(&self, id: &StreamId) -> Option<&Nack> {
        self.index.get(id).map(|&s| &self.slot(s).nack)
    }

    /// The NACK of `id`, to edit its times.
    pub fn get_mut(&mut self, id: &StreamId) -> Option<&mut Nack> {
        let s = *self.index.get(id)?;
        Some(&mut self.slot_mut(s).nack)
    }

    /// The NACKs in ID order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&StreamId, &Nack)> + '_ {
        self.index.iter().map(|(id, &s)| (id, &self.slot(s).nack))
    }

    pub fn range<R: RangeBounds<StreamId>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&StreamId, &Nack)> + '_ {
        self.index
            .range(range)
            .map(|(id, &s)| (id, &self.slot(s).nack))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &StreamId> + '_ {
        self.index.keys()
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Nack> + '_ {
        self.iter().map(|(_, n)| n)
    }

    /// How many NACKs `consumer` holds.
    pub fn count_of(&self, consumer: &[u8]) -> usize {
        self.chains.get(consumer).map_or(0, |c| c.len)
    }

    /// The NACKs `consumer` holds, in ID order.
    pub fn of(&self, consumer: &[u8]) -> Owned<'_> {
        let at = self.chains.get(consumer).map_or(NIL, |c| c.first);
        Owned { pel: self, at }
    }

    /// The NACKs `consumer` holds from `start` on, in ID order.
    pub fn of_from(&self, consumer: &[u8], start: StreamId) -> Owned<'_> {
        let at = match self.chains.get_key_value(consumer) {
            None => NIL,
            Some((owner, &chain)) => self.seek(owner, chain, start),
        };
        Owned { pel: self, at }
    }

    /// Sets the NACK of `id` (held by `consumer`, delivered at `time`,
    /// `count` times), moving it to `consumer`'s chain; the NACK it
    /// replaced.
    pub fn insert(&mut self, id: StreamId, consumer: &[u8], time: i64, count: u64) -> Option<Nack> {
        let old = self.remove(&id);
        let (owner, chain) = match self.chains.get_key_value(consumer) {
            Some((owner, &chain)) => (owner.clone(), chain),
            None => {
                let none = Chain {
                    first: NIL,
                    last: NIL,
                    len: 0,
                };
                (Arc::from(consumer), none)
            }
        };
        let (prev, next) = self.neighbours(&owner, chain, id);
        let nack = Nack {
            consumer: owner.clone(),
            delivery_time: time,
            delivery_count: count,
        };
        let s = self.alloc(Slot {
            id,
            nack,
            prev,
            next,
        });
        self.link(prev, next, s);
        let chain = Chain {
            first: if prev == NIL { s } else { chain.first },
            last: if next == NIL { s } else { chain.last },
            len: chain.len + 1,
        };
        match self.chains.get_mut(consumer) {
            Some(c) => *c = chain,
            None => {
                self.chains.insert(owner, chain);
            }
        }
        self.index.insert(id, s);
        old
    }

    /// Removes the NACK of `id` from the group and its consumer.
    pub fn remove(&mut self, id: &StreamId) -> Option<Nack> {
        let s = self.index.remove(id)?;
        let slot = self.slots[s as usize].take().expect("indexed slot");
        self.free.push(s);
        self.link(slot.prev, slot.next, NIL);
        let name = slot.nack.consumer();
        let chain = self.chains.get_mut(name).expect("the holder's chain");
        chain.len -= 1;
        if chain.first == s {
            chain.first = slot.next;
        }
        if chain.last == s {
            chain.last = slot.prev;
        }
        if chain.len == 0 {
            self.chains.remove(name);
        }
        self.shrink();
        Some(slot.nack)
    }

    /// Removes every NACK `consumer` holds; how many there were.
    pub fn remove_owner(&mut self, consumer: &[u8]) -> usize {
        let ids: Vec<StreamId> = self.of(consumer).map(|(id, _)| id).collect();
        for id in &ids {
            self.remove(id);
        }
        ids.len()
    }

    fn slot(&self, s: u32) -> &Slot {
        self.slots[s as usize].as_ref().expect("live slot")
    }

    fn slot_mut(&mut self, s: u32) -> &mut Slot {
        self.slots[s as usize].as_mut().expect("live slot")
    }

    fn alloc(&mut self, slot: Slot) -> u32 {
        match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(slot);
                s
            }
            None => {
                assert!(self.slots.len() < NIL as usize, "PEL slab full");
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Joins `prev` and `next` (either may be NIL) through `mid` (NIL:
    /// directly).
    fn link(&mut self, prev: u32, next: u32, mid: u32) {
        if prev != NIL {
            self.slot_mut(prev).next = if mid == NIL { next } else { mid };
        }
        if next != NIL {
            self.slot_mut(next).prev = if mid == NIL { prev } else { mid };
        }
    }

    /// The slots between which `id` (not in `owner`'s chain) belongs in
    /// it: the shortest of four walks (module comment).
    fn neighbours(&self, owner: &Arc<[u8]>, chain: Chain, id: StreamId) -> (u32, u32) {
        if chain.len == 0 {
            return (NIL, NIL);
        }
        if self.slot(chain.last).id < id {
            return (chain.last, NIL);
        }
        if self.slot(chain.first).id > id {
            return (NIL, chain.first);
        }
        // first < id < last: the chain walks end before they pass its ends.
        let mine = |s: u32| Arc::ptr_eq(&self.slot(s).nack.consumer, owner);
        let mut back = self.index.range(..id).rev();
        let mut ahead = self.index.range((Bound::Excluded(id), Bound::Unbounded));
        let (mut head, mut tail) = (chain.first, chain.last);
        loop {
            if let Some((_, &s)) = back.next().filter(|(_, &s)| mine(s)) {
                return (s, self.slot(s).next);
            }
            if let Some((_, &s)) = ahead.next().filter(|(_, &s)| mine(s)) {
                return (self.slot(s).prev, s);
            }
            let n = self.slot(head).next;
            if self.slot(n).id > id {
                return (head, n);
            }
            head = n;
            let p = self.slot(tail).prev;
            if self.slot(p).id < id {
                return (p, tail);
            }
            tail = p;
        }
    }

    /// The first slot of `owner`'s chain at or after `start`.
    fn seek(&self, owner: &Arc<[u8]>, chain: Chain, start: StreamId) -> u32 {
        if self.slot(chain.first).id >= start {
            return chain.first;
        }
        if self.slot(chain.last).id < start {
            return NIL;
        }
        match self.index.get(&start) {
            Some(&s) if Arc::ptr_eq(&self.slot(s).nack.consumer, owner) => s,
            _ => self.neighbours(owner, chain, start).1,
        }
    }

    /// Frees the slab when empty, and compacts it (renumbering the slots
    /// in ID order) when three quarters of a large one is free: memory
    /// follows the PEL's size as a tree's would.
    fn shrink(&mut self) {
        if self.index.is_empty() {
            self.slots = Vec::new();
            self.free = Vec::new();
            return;
        }
        if self.slots.len() < COMPACT_FROM || self.index.len() * 4 > self.slots.len() {
            return;
        }
        let mut renumber = vec![NIL; self.slots.len()];
        for (new, s) in self.index.values_mut().enumerate() {
            renumber[*s as usize] = new as u32;
            *s = new as u32;
        }
        let at = |s: u32| if s == NIL { NIL } else { renumber[s as usize] };
        let mut slots = vec![None; self.index.len()];
        let old = std::mem::take(&mut self.slots);
        for (s, slot) in old.into_iter().enumerate() {
            if let Some(slot) = slot {
                slots[renumber[s] as usize] = Some(Slot {
                    prev: at(slot.prev),
                    next: at(slot.next),
                    ..slot
                });
            }
        }
        for c in self.chains.values_mut() {
            c.first = at(c.first);
            c.last = at(c.last);
        }
        self.slots = slots;
        self.free = Vec::new();
    }
}

/// A consumer's NACKs in ID order ([`Pel::of`]).
pub struct Owned<'a> {
    pel: &'a Pel,
    at: u32,
}

impl<'a> Iterator for Owned<'a> {
    type Item = (StreamId, &'a Nack);

    fn next(&mut self) -> Option<(StreamId, &'a Nack)> {
        if self.at == NIL {
            return None;
        }
        let slot = self.pel.slot(self.at);
        self.at = slot.next;
        Some((slot.id, &slot.nack))
    }
}

impl Index<&StreamId> for Pel {
    type Output = Nack;

    fn index(&self, id: &StreamId) -> &Nack {
        self.get(id).expect("a NACK for the ID")
    }
}

/// Equal when they hold the same NACKs (not the same slab layout).
impl PartialEq for Pel {
    fn eq(&self, other: &Pel) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for Pel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    type Model = BTreeMap<StreamId, (Vec<u8>, i64, u64)>;

    fn check(pel: &Pel, model: &Model) {
        let got: Vec<_> = (pel.iter())
            .map(|(id, n)| {
                (
                    *id,
                    (n.consumer().to_vec(), n.delivery_time, n.delivery_count),
                )
            })
            .collect();
        let want: Vec<_> = model.iter().map(|(id, v)| (*id, v.clone())).collect();
        assert_eq!(got, want);
        for name in [&b"a"[..], b"b", b"c", b"d"] {
            let mine: Vec<StreamId> = (model.iter())
                .filter(|(_, v)| v.0 == name)
                .map(|(id, _)| *id)
                .collect();
            assert_eq!(pel.count_of(name), mine.len());
            assert_eq!(pel.of(name).map(|(id, _)| id).collect::<Vec<_>>(), mine);
            for start in [0, 7, 50, 99, 150] {
                let start = StreamId::new(start, 0);
                let from: Vec<StreamId> = mine.iter().copied().filter(|id| *id >= start).collect();
                let got: Vec<StreamId> = pel.of_from(name, start).map(|(id, _)| id).collect();
                assert_eq!(got, from);
            }
        }
    }

    /// Random inserts, moves and removes against an ordered map, with
    /// enough removals that the slab compacts.
    #[test]
    fn matches_an_ordered_map() {
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let (mut pel, mut model) = (Pel::default(), Model::new());
            for step in 0..3000 {
                let id = StreamId::new(rng.gen_range(0..120), 0);
                let name = [b"abcd"[rng.gen_range(0..4)]];
                if rng.gen_range(0..3) == 0 {
                    assert_eq!(pel.remove(&id).is_some(), model.remove(&id).is_some());
                } else if rng.gen_range(0..50) == 0 {
                    let n = pel.remove_owner(&name);
                    let before = model.len();
                    model.retain(|_, v| v.0 != name);
                    assert_eq!(n, before - model.len());
                } else {
                    pel.insert(id, &name, step, seed);
                    model.insert(id, (name.to_vec(), step, seed));
                }
                if step % 97 == 0 {
                    check(&pel, &model);
                }
            }
            check(&pel, &model);
        }
    }

    #[test]
    fn a_large_slab_compacts_and_keeps_the_chains() {
        let mut pel = Pel::default();
        for i in 0..5000 {
            pel.insert(
                StreamId::new(i, 0),
                [b"ab"[i as usize % 2]].as_slice(),
                0,
                1,
            );
        }
        for i in (0..5000).filter(|i| i % 10 != 0) {
            pel.remove(&StreamId::new(i, 0));
        }
        assert!(pel.slots.len() < 5000 / 2);
        let a: Vec<u64> = pel.of(b"a").map(|(id, _)| id.ms).collect();
        assert_eq!(a, (0..5000).step_by(10).collect::<Vec<_>>());
        assert_eq!(pel.count_of(b"b"), 0);
    }
}
