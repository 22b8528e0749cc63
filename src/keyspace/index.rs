//! [`Index`]: a shard's hash index from keys to slab positions.
//!
//! The shard keeps its entries in a dense slab (`table.rs`); this table maps
//! a key's hash to the entry's position there. It replaces a
//! `hashbrown::HashTable<u32>` for two reasons, both measured
//! (docs/PERFORMANCE.md, "Memory per key"):
//!
//! - **Bytes per key.** hashbrown spends 5 bytes a bucket (a 4-byte slot and
//!   a control byte) and doubles its bucket count, so its load swings between
//!   7/16 and 7/8: at 1M keys over 256 shards each shard sits at 48 % and the
//!   index costs 10.5 bytes a key. Here a slot is 4 bytes holding the tag and
//!   the position together, and the table grows by 1.5x with any number of
//!   groups (not a power of two), so its load stays between 58 % and 7/8: 4.6
//!   to 6.9 bytes a key.
//! - **Cache lines per lookup.** hashbrown keeps control bytes and slots in
//!   two arrays, two lines for one probe; here a group of 16 slots is one
//!   64-byte line with the tags inside, so a lookup reads one line of index,
//!   then the entry. [`Index::hint`] lets a prefetch name that line
//!   without the shard's lock (`prefetch.rs`).
//!
//! Layout: `groups` of 16 `u32` slots. A slot is `tag << shift | position`;
//! `shift` (the position's bits) is 24 until the table outgrows 2^24 slots,
//! then widens, up to 32 bits of position and no tag: past 16M keys a shard
//! still works, its probes compare more entries. Two slot values are
//! reserved: [`EMPTY`] and [`DELETED`] (a tombstone: a probe goes on past
//! it). A key's home group comes from the hash's low 32 bits (multiply and
//! shift onto the group count), its tag from the top bits, and the shard was
//! picked from bits 32..40 (`Keyspace::slot`): the three stay independent.
//! Probing is linear over groups and stops at the first group with an empty
//! slot, so a removal can empty a slot only in a group that has another
//! empty one, else it leaves a tombstone; tombstones count against the load
//! and go at the next rehash.
//!
//! The table stores no hashes, so growing re-hashes each key through the
//! caller's `rehash` closure (as hashbrown's `reserve` does).

/// Slots in a group: one 64-byte cache line.
const GROUP: usize = 16;
/// A slot no key has used since the last rehash: a probe stops here.
const EMPTY: u32 = u32::MAX;
/// A slot whose key was removed: a probe goes on past it.
const DELETED: u32 = u32::MAX - 1;
/// Position bits while the table is small: 8 bits of tag.
const MIN_SHIFT: u32 = 24;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Group([u32; GROUP]);

impl Group {
    const EMPTY: Group = Group([EMPTY; GROUP]);

    /// Bit i set where slot i holds `tag` (reserved values included: the
    /// caller checks the position). Written so that it vectorizes.
    #[inline]
    fn tag_mask(&self, tag: u32, shift: u32) -> u32 {
        let mut m = 0;
        for (i, &s) in self.0.iter().enumerate() {
            m |= ((tag_of(s, shift) == tag) as u32) << i;
        }
        m
    }

    /// Bit i set where slot i is [`EMPTY`].
    #[inline]
    fn empty_mask(&self) -> u32 {
        let mut m = 0;
        for (i, &s) in self.0.iter().enumerate() {
            m |= ((s == EMPTY) as u32) << i;
        }
        m
    }

    /// The first slot free for an insertion (empty or a tombstone).
    #[inline]
    fn free_slot(&self) -> Option<usize> {
        self.0.iter().position(|&s| s >= DELETED)
    }
}

#[inline]
fn tag_of(slot: u32, shift: u32) -> u32 {
    ((slot as u64) >> shift) as u32
}

#[inline]
fn pos_of(slot: u32, shift: u32) -> u32 {
    ((slot as u64) & ((1u64 << shift) - 1)) as u32
}

/// A shard's key index: hash -> slab position. See the module comment.
pub(crate) struct Index {
    groups: Box<[Group]>,
    /// Positions held (a shard's positions are `u32`s).
    len: u32,
    /// Tombstones held.
    deleted: u32,
    /// Bits of a slot that hold the position.
    shift: u32,
}

impl Default for Index {
    fn default() -> Self {
        Index {
            groups: Box::default(),
            len: 0,
            deleted: 0,
            shift: MIN_SHIFT,
        }
    }
}

/// Where a probe found a key: group and slot.
#[derive(Clone, Copy)]
struct At(usize, usize);

impl Index {
    #[inline]
    fn home(&self, hash: u64) -> usize {
        (((hash & 0xFFFF_FFFF) * self.groups.len() as u64) >> 32) as usize
    }

    #[inline]
    fn tag(&self, hash: u64) -> u32 {
        if self.shift >= 32 {
            0
        } else {
            (hash >> (32 + self.shift)) as u32
        }
    }

    /// The slots a table of `groups` groups may fill (live plus
    /// tombstones) before it grows: 7/8 of them.
    fn max_filled(groups: usize) -> usize {
        groups * GROUP * 7 / 8
    }

    /// Probes for the position `hash` maps to for which `eq` holds.
    #[inline]
    fn probe(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<At> {
        if self.groups.is_empty() {
            return None;
        }
        let (tag, shift) = (self.tag(hash), self.shift);
        let mut g = self.home(hash);
        loop {
            let group = &self.groups[g];
            let mut m = group.tag_mask(tag, shift);
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                m &= m - 1;
                let s = group.0[i];
                if s < DELETED && eq(pos_of(s, shift)) {
                    return Some(At(g, i));
                }
            }
            if group.empty_mask() != 0 {
                return None;
            }
            g = if g + 1 == self.groups.len() { 0 } else { g + 1 };
        }
    }

    /// The position `hash` maps to for which `eq` holds.
    #[inline]
    pub(crate) fn find(&self, hash: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let shift = self.shift;
        self.probe(hash, eq)
            .map(|At(g, i)| pos_of(self.groups[g].0[i], shift))
    }

    /// Re-points the slot of `hash` holding position `from` to `to`.
    pub(crate) fn replace(&mut self, hash: u64, from: u32, to: u32) {
        if let Some(At(g, i)) = self.probe(hash, |p| p == from) {
            let tag = self.tag(hash);
            self.groups[g].0[i] = self.slot(tag, to);
        }
    }

    /// Removes the slot of `hash` holding position `pos`.
    pub(crate) fn remove(&mut self, hash: u64, pos: u32) {
        let Some(At(g, i)) = self.probe(hash, |p| p == pos) else {
            return;
        };
        let group = &mut self.groups[g];
        // A probe stops at a group with an empty slot; if this group had
        // none, a key may have probed past it, so it gets a tombstone.
        if group.empty_mask() != 0 {
            group.0[i] = EMPTY;
        } else {
            group.0[i] = DELETED;
            self.deleted += 1;
        }
        self.len -= 1;
    }

    #[inline]
    fn slot(&self, tag: u32, pos: u32) -> u32 {
        debug_assert!(pos < DELETED && (pos as u64) < (1u64 << self.shift));
        if self.shift >= 32 {
            pos
        } else {
            (tag << self.shift) | pos
        }
    }

    /// Inserts position `pos` for `hash`, whose key must be absent;
    /// `rehash` gives the hash of the key at a position, for growth.
    pub(crate) fn insert_unique(&mut self, hash: u64, pos: u32, rehash: impl Fn(u32) -> u64) {
        self.reserve(1, rehash);
        let tag = self.tag(hash);
        let slot = self.slot(tag, pos);
        self.place(hash, slot);
    }

    /// Puts `slot` in the first free slot of `hash`'s probe sequence.
    fn place(&mut self, hash: u64, slot: u32) {
        let mut g = self.home(hash);
        loop {
            if let Some(i) = self.groups[g].free_slot() {
                if self.groups[g].0[i] == DELETED {
                    self.deleted -= 1;
                }
                self.groups[g].0[i] = slot;
                self.len += 1;
                return;
            }
            g = if g + 1 == self.groups.len() { 0 } else { g + 1 };
        }
    }

    /// Makes room for `more` positions without growing meanwhile.
    pub(crate) fn reserve(&mut self, more: usize, rehash: impl Fn(u32) -> u64) {
        let need = self.len as usize + more;
        if need + self.deleted as usize <= Self::max_filled(self.groups.len()) {
            return;
        }
        // Tombstones alone filled it and the keys leave a quarter free:
        // rebuild at this size. Else grow by 1.5x until the keys fit.
        let mut groups = self.groups.len();
        if need > Self::max_filled(groups) * 3 / 4 {
            groups = groups.max(1);
            while Self::max_filled(groups) < need {
                groups += groups.div_ceil(2);
            }
        }
        self.rebuild(groups, rehash);
    }

    /// Re-inserts every position into a table of `groups` groups.
    fn rebuild(&mut self, groups: usize, rehash: impl Fn(u32) -> u64) {
        let old = std::mem::replace(
            &mut self.groups,
            vec![Group::EMPTY; groups].into_boxed_slice(),
        );
        let old_shift = self.shift;
        let slots = (groups * GROUP) as u64;
        self.shift = (64 - slots.leading_zeros()).clamp(MIN_SHIFT, 32);
        self.len = 0;
        self.deleted = 0;
        for group in old.iter() {
            for &s in &group.0 {
                if s < DELETED {
                    let pos = pos_of(s, old_shift);
                    let hash = rehash(pos);
                    let slot = self.slot(self.tag(hash), pos);
                    self.place(hash, slot);
                }
            }
        }
    }

    /// The first position whose slot carries `hash`'s tag in its probe
    /// sequence (the key not compared): the entry a prefetch brings in.
    #[inline]
    pub(crate) fn first_candidate(&self, hash: u64) -> Option<u32> {
        self.probe(hash, |_| true)
            .map(|At(g, i)| pos_of(self.groups[g].0[i], self.shift))
    }

    /// Where the groups are and how many, packed into one word that the
    /// lock holder publishes for prefetches made without the lock
    /// (`prefetch.rs`, [`hinted_group`]); 0 for an empty table or one too
    /// big to describe (no prefetch then).
    pub(crate) fn hint(&self) -> u64 {
        let n = self.groups.len() as u64;
        if n == 0 || n >= 1 << (64 - HINT_ADDR_BITS) {
            return 0;
        }
        let addr = self.groups.as_ptr() as u64 >> 6;
        if addr >= 1 << HINT_ADDR_BITS {
            return 0;
        }
        addr | n << HINT_ADDR_BITS
    }

    /// The address of `hash`'s home group.
    #[cfg(test)]
    pub(crate) fn home_addr(&self, hash: u64) -> usize {
        std::ptr::from_ref(&self.groups[self.home(hash)]) as usize
    }
}

/// Bits of a hint holding a group address (64-byte aligned, so shifted
/// by 6: user-space addresses below 2^48); the rest hold the group count.
const HINT_ADDR_BITS: u32 = 42;

/// The address of `hash`'s home group in the table a [`Index::hint`]
/// described. The table may have been replaced since: the address is then
/// stale, which a prefetch tolerates (it never faults).
#[inline]
pub(crate) fn hinted_group(hint: u64, hash: u64) -> Option<usize> {
    if hint == 0 {
        return None;
    }
    let base = (hint & ((1 << HINT_ADDR_BITS) - 1)) << 6;
    let n = hint >> HINT_ADDR_BITS;
    let home = ((hash & 0xFFFF_FFFF) * n) >> 32;
    Some((base + home * std::mem::size_of::<Group>() as u64) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A model run: keys are u64s whose "hash" is a mix of them with few
    /// distinct values (collisions, shared tags and home groups), positions
    /// kept dense as the shard keeps them (swap-remove).
    fn run(seed: u64, ops: usize, hash_bits: u32) {
        let mut rng = seed;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let hash_of = |k: u64| {
            let h = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            if hash_bits >= 64 {
                h
            } else {
                h & ((1u64 << hash_bits) - 1) | (h >> 60 << 60)
            }
        };
        let mut idx = Index::default();
        let mut slab: Vec<u64> = Vec::new();
        let mut model: HashMap<u64, ()> = HashMap::new();
        for _ in 0..ops {
            let k = next() % 3000;
            let h = hash_of(k);
            let found = {
                let slab = &slab;
                idx.find(h, |p| slab[p as usize] == k)
            };
            assert_eq!(found.is_some(), model.contains_key(&k), "key {k}");
            if let Some(p) = found {
                assert_eq!(slab[p as usize], k);
                if next() % 3 == 0 {
                    // Remove as the shard does: drop the slot, move the
                    // last entry into the hole and re-point its slot.
                    idx.remove(h, p);
                    let last = slab.len() as u32 - 1;
                    slab.swap_remove(p as usize);
                    if p != last {
                        idx.replace(hash_of(slab[p as usize]), last, p);
                    }
                    model.remove(&k);
                }
            } else {
                let pos = slab.len() as u32;
                slab.push(k);
                let snapshot = slab.clone();
                idx.insert_unique(h, pos, |p| hash_of(snapshot[p as usize]));
                model.insert(k, ());
            }
            assert_eq!(idx.len as usize, model.len());
        }
        for (p, &k) in slab.iter().enumerate() {
            assert_eq!(
                idx.find(hash_of(k), |q| slab[q as usize] == k),
                Some(p as u32)
            );
        }
    }

    #[test]
    fn agrees_with_a_model() {
        for seed in 1..6 {
            run(seed, 40_000, 64);
        }
    }

    #[test]
    fn agrees_with_a_model_when_hashes_collide() {
        // 6 bits of hash: every group and tag shared by many keys.
        run(7, 20_000, 6);
        run(8, 20_000, 12);
    }

    #[test]
    fn load_stays_between_bounds_while_growing() {
        let mut idx = Index::default();
        let hashes: Vec<u64> = (0..200_000u64)
            .map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        for (p, &h) in hashes.iter().enumerate() {
            idx.insert_unique(h, p as u32, |q| hashes[q as usize]);
            let slots = idx.groups.len() * GROUP;
            if p > 1000 {
                let load = idx.len as f64 / slots as f64;
                assert!((0.55..=0.875).contains(&load), "load {load} at {p}");
            }
        }
    }

    #[test]
    fn wide_positions_drop_the_tag() {
        let mut idx = Index::default();
        idx.rebuild((1 << 24) / GROUP, |_| 0);
        assert_eq!(idx.shift, 25);
        let big = (1u32 << 24) + 5;
        idx.insert_unique(0xABCD_EF01_2345_6789, big, |_| unreachable!());
        assert_eq!(idx.find(0xABCD_EF01_2345_6789, |p| p == big), Some(big));
    }
}
