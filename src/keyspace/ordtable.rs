//! The "hashtable" encoding of big hashes and sets: a hash table whose slots
//! stay sorted by the elements' 64-bit hashes, so that HSCAN/SSCAN (and later
//! ZSCAN) can resume from a cursor that survives any resize.
//!
//! Layout. `slots` holds `homes` home slots plus [`SLACK`] overflow slots at
//! the end (no wrap-around). An element's home is `hash * homes / 2^64`:
//! monotonic in the hash for any table size, so a resize can aim at a load
//! of 2/3 instead of doubling. An element lives at its home or, by linear
//! probing, after it. Insertion keeps
//! the occupied slots sorted by hash (it shifts the rest of the run right),
//! deletion shifts the run back left. Invariants:
//!
//! 1. reading the slots left to right, hashes never decrease;
//! 2. every element sits at or after its home, with no empty slot between.
//!
//! Since `home` is monotonic in the hash, every element whose hash is `>= c`
//! sits at or after `home(c)` whatever the table's size: that is the cursor
//! guarantee. [`OrdTable::scan`] returns elements in hash order from a cursor
//! `c` (a hash value) and the next cursor is `last hash + 1`, so an element
//! present for the whole scan is returned exactly once, even if the table
//! grows or shrinks between calls (all elements sharing one full 64-bit hash
//! are returned in the same call).
//!
//! Memory: one slot is a `Option<Box<[u8]>>` (16 bytes); the table is grown
//! past 7/8 load (ordered probing keeps misses short) and shrunk under 1/8
//! (as Redis shrinks dicts under 10%); a resize moves the elements once.
//! Each element is a single allocation; a hash packs field and value into it
//! (see [`Packed`]). Hashes are not stored but recomputed (foldhash, a few ns
//! for short strings) on the few probes an operation makes.
//!
//! The hasher is one process-wide randomly seeded foldhash state, so the
//! order is unpredictable to clients (hash flooding) but stable while the
//! process lives, which is all a cursor needs.

use std::hash::BuildHasher;
use std::marker::PhantomData;
use std::sync::OnceLock;

/// Overflow slots after the last home slot; an insert that would run past
/// them grows the table instead.
const SLACK: usize = 32;
/// Smallest number of home slots.
const MIN_HOMES: usize = 8;

/// How an element's lookup key is found in its bytes.
pub trait KeyOf {
    fn key(elem: &[u8]) -> &[u8];
}

/// Set members: the whole element is the key.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Whole;
impl KeyOf for Whole {
    #[inline]
    fn key(elem: &[u8]) -> &[u8] {
        elem
    }
}

/// Hash entries: a [`Packed`] field/value pair keyed by its field.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Packed;
impl KeyOf for Packed {
    #[inline]
    fn key(elem: &[u8]) -> &[u8] {
        unpack(elem).0
    }
}

/// Packs a field and its value into one allocation:
/// `varint(field len) field value`.
pub(crate) fn pack(field: &[u8], value: &[u8]) -> Box<[u8]> {
    let mut v = Vec::with_capacity(field.len() + value.len() + 5);
    let mut n = field.len();
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            v.push(b);
            break;
        }
        v.push(b | 0x80);
    }
    v.extend_from_slice(field);
    v.extend_from_slice(value);
    v.into_boxed_slice()
}

/// The (field, value) of a [`pack`]ed element.
#[inline]
pub(crate) fn unpack(e: &[u8]) -> (&[u8], &[u8]) {
    let (mut n, mut shift, mut i) = (0usize, 0, 0);
    loop {
        let b = e[i];
        n |= ((b & 0x7f) as usize) << shift;
        i += 1;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    (&e[i..i + n], &e[i + n..])
}

fn hasher() -> &'static hashbrown::DefaultHashBuilder {
    static H: OnceLock<hashbrown::DefaultHashBuilder> = OnceLock::new();
    H.get_or_init(hashbrown::DefaultHashBuilder::default)
}

/// The hash that orders elements (and that cursors are made of).
#[inline]
pub(crate) fn hash_of(key: &[u8]) -> u64 {
    hasher().hash_one(key)
}

/// A hash-ordered table of byte-string elements (see the module comment).
#[derive(Clone, Debug)]
pub struct OrdTable<K: KeyOf> {
    slots: Vec<Option<Box<[u8]>>>,
    homes: usize,
    len: usize,
    _k: PhantomData<K>,
}

impl<K: KeyOf> PartialEq for OrdTable<K> {
    fn eq(&self, o: &Self) -> bool {
        self.len == o.len
            && self
                .iter()
                .all(|e| o.get(K::key(e)).is_some_and(|x| x == e))
    }
}

impl<K: KeyOf> Default for OrdTable<K> {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl<K: KeyOf> OrdTable<K> {
    /// A table sized for `n` elements.
    pub fn with_capacity(n: usize) -> Self {
        let homes = grown(n);
        OrdTable {
            slots: empty_slots(homes),
            homes,
            len: 0,
            _k: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn home(&self, h: u64) -> usize {
        home_in(h, self.homes)
    }

    #[inline]
    fn hash_at(&self, i: usize) -> Option<u64> {
        self.slots[i].as_deref().map(|e| hash_of(K::key(e)))
    }

    /// Where `key` (of hash `h`) is: Ok(its slot), or Err(the slot where
    /// it would be inserted: after every element of hash `<= h`).
    fn position(&self, h: u64, key: &[u8]) -> Result<usize, usize> {
        let mut i = self.home(h);
        while let Some(Some(e)) = self.slots.get(i).map(|s| s.as_deref()) {
            let k = K::key(e);
            let eh = hash_of(k);
            if eh > h {
                break;
            }
            if eh == h && k == key {
                return Ok(i);
            }
            i += 1;
        }
        Err(i)
    }

    /// The element whose key is `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let i = self.position(hash_of(key), key).ok()?;
        self.slots[i].as_deref()
    }

    /// Replaces the element at `key`'s slot (same key), or inserts it in
    /// hash order, shifting the rest of its run right. Returns the previous
    /// element with that key.
    pub fn insert(&mut self, elem: Box<[u8]>) -> Option<Box<[u8]>> {
        let h = hash_of(K::key(&elem));
        loop {
            let mut i = match self.position(h, K::key(&elem)) {
                Ok(i) => return self.slots[i].replace(elem),
                Err(i) => i,
            };
            if self.len + 1 > max_len(self.homes) {
                self.rebuild(grown(self.len + 1));
                i = self.position(h, K::key(&elem)).unwrap_err();
            }
            match (i..self.slots.len()).find(|&j| self.slots[j].is_none()) {
                Some(j) => {
                    self.slots[i..=j].rotate_right(1);
                    self.slots[i] = Some(elem);
                    self.len += 1;
                    return None;
                }
                // The run would overflow the slack: grow.
                None => self.rebuild(self.homes + self.homes / 2),
            }
        }
    }

    /// Removes and returns the element whose key is `key`.
    pub fn remove(&mut self, key: &[u8]) -> Option<Box<[u8]>> {
        let i = self.position(hash_of(key), key).ok()?;
        Some(self.remove_at(i))
    }

    fn remove_at(&mut self, mut i: usize) -> Box<[u8]> {
        let out = self.slots[i].take().expect("occupied slot");
        // Backward-shift: pull later elements of the run towards their home.
        while i + 1 < self.slots.len() {
            match self.hash_at(i + 1) {
                Some(h) if self.home(h) <= i => {
                    self.slots[i] = self.slots[i + 1].take();
                    i += 1;
                }
                _ => break,
            }
        }
        self.len -= 1;
        if self.homes > MIN_HOMES && self.len * 8 < self.homes {
            self.rebuild(grown(self.len));
        }
        out
    }

    /// Moves every element into a table of `homes` home slots (more if
    /// the elements do not fit in its slack).
    fn rebuild(&mut self, mut homes: usize) {
        // A dry run first (hashes only), so that the elements move once and
        // nothing but the two slot arrays is alive at a time.
        while !self.fits(homes) {
            homes += homes / 2;
        }
        let old = std::mem::replace(&mut self.slots, empty_slots(homes));
        self.homes = homes;
        let mut next = 0usize;
        for e in old.into_iter().flatten() {
            let pos = self.home(hash_of(K::key(&e))).max(next);
            self.slots[pos] = Some(e);
            next = pos + 1;
        }
    }

    /// Whether the elements, placed in order, fit `homes` homes + slack.
    fn fits(&self, homes: usize) -> bool {
        let n = homes + SLACK;
        let mut next = 0usize;
        for e in self.iter() {
            next = home_in(hash_of(K::key(e)), homes).max(next) + 1;
            if next > n {
                return false;
            }
        }
        true
    }

    /// Elements in hash order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.slots.iter().filter_map(|s| s.as_deref())
    }

    /// Up to about `count` elements whose hash is `>= cursor`, in hash order,
    /// passed to `f`; returns the next cursor (0 when done). Examines at most
    /// `10 * count` slots beyond the first, as Redis bounds empty buckets.
    pub fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&[u8])) -> u64 {
        let mut i = self.home(cursor);
        let mut taken = 0usize;
        let mut last: Option<u64> = None;
        let mut budget = count.saturating_mul(10).max(10);
        while i < self.slots.len() {
            if let Some(e) = self.slots[i].as_deref() {
                let h = hash_of(K::key(e));
                if h >= cursor {
                    if taken >= count && last != Some(h) {
                        return h;
                    }
                    f(e);
                    taken += 1;
                    last = Some(h);
                }
            } else if i >= self.homes {
                // Past the homes, an empty slot ends the last run.
                return 0;
            } else if taken >= count || budget == 0 {
                // Resume at this empty slot's range: every hash below its
                // start has been returned (they live before it).
                return self.slot_start(i).max(cursor).max(1);
            }
            budget = budget.saturating_sub(1);
            i += 1;
        }
        0
    }

    /// The smallest hash whose home is slot `i`.
    fn slot_start(&self, i: usize) -> u64 {
        ((i as u128) << 64).div_ceil(self.homes as u128) as u64
    }

    /// A uniformly random element; `rnd` yields random u64s.
    pub fn random(&self, rnd: &mut impl FnMut() -> u64) -> Option<&[u8]> {
        if self.len == 0 {
            return None;
        }
        loop {
            let i = (rnd() % self.slots.len() as u64) as usize;
            if let Some(e) = self.slots[i].as_deref() {
                return Some(e);
            }
        }
    }

    /// Removes a random element.
    pub fn pop_random(&mut self, rnd: &mut impl FnMut() -> u64) -> Option<Box<[u8]>> {
        if self.len == 0 {
            return None;
        }
        loop {
            let i = (rnd() % self.slots.len() as u64) as usize;
            if self.slots[i].is_some() {
                return Some(self.remove_at(i));
            }
        }
    }

    /// Heap bytes: the slot array and the elements.
    pub fn mem_usage(&self) -> usize {
        self.slots.len() * 16 + self.iter().map(|e| alloc_size(e.len())).sum::<usize>()
    }
}

/// The home of hash `h` among `homes` slots: monotonic in `h`.
#[inline]
fn home_in(h: u64, homes: usize) -> usize {
    ((h as u128 * homes as u128) >> 64) as usize
}

/// Most elements a table of `homes` homes holds before it grows: 7/8.
/// Searches stop at the first larger hash, so a miss costs no more than a
/// hit (about 4.5 probes at the 7/8 peak); inserts shift the run after them.
fn max_len(homes: usize) -> usize {
    homes * 7 / 8
}

/// The homes for `n` elements after a resize: load 2/3, so growing (at 7/8)
/// multiplies the table by about 4/3 and the load stays within 2/3..7/8.
fn grown(n: usize) -> usize {
    (n + n / 2).max(MIN_HOMES)
}

fn empty_slots(homes: usize) -> Vec<Option<Box<[u8]>>> {
    let n = homes + SLACK;
    let mut v = Vec::with_capacity(n);
    v.resize_with(n, || None);
    v
}

/// Bytes an allocator hands out for `n` requested (rounded to 8).
pub(crate) fn alloc_size(n: usize) -> usize {
    (n + 7) & !7
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<K: KeyOf>(t: &OrdTable<K>) {
        let hs: Vec<u64> = t.iter().map(|e| hash_of(K::key(e))).collect();
        assert!(hs.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(hs.len(), t.len());
    }

    #[test]
    fn insert_remove_scan() {
        let mut t: OrdTable<Whole> = OrdTable::default();
        for i in 0..5000 {
            assert!(t.insert(i.to_string().into_bytes().into()).is_none());
        }
        check(&t);
        assert!(t.insert(b"42".to_vec().into()).is_some());
        assert_eq!(t.len(), 5000);
        for i in 0..5000 {
            assert!(t.get(i.to_string().as_bytes()).is_some());
        }
        // Scan while the table shrinks and grows: every survivor once.
        let mut seen = std::collections::HashMap::new();
        let mut c = 0;
        let mut round = 0;
        loop {
            c = t.scan(c, 7, |e| *seen.entry(e.to_vec()).or_insert(0) += 1);
            round += 1;
            if round % 3 == 0 {
                for k in 0..40 {
                    t.insert(format!("new{round}-{k}").into_bytes().into());
                }
            }
            if c == 0 {
                break;
            }
        }
        for i in 0..5000 {
            assert_eq!(seen.get(i.to_string().as_bytes()), Some(&1), "{i}");
        }
        for i in 0..4990 {
            assert!(t.remove(i.to_string().as_bytes()).is_some());
        }
        check(&t);
        assert!(t.get(b"4995").is_some());
        assert!(t.get(b"5").is_none());
    }

    #[test]
    fn packed() {
        let e = pack(&[b'f'; 300], b"v");
        assert_eq!(unpack(&e), (&[b'f'; 300][..], &b"v"[..]));
        let mut t: OrdTable<Packed> = OrdTable::default();
        t.insert(pack(b"a", b"1"));
        t.insert(pack(b"a", b"2"));
        assert_eq!(t.len(), 1);
        assert_eq!(unpack(t.get(b"a").unwrap()).1, b"2");
    }
}
