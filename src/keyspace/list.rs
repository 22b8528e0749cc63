//! List values (Redis's t_list.c objects, quicklist.c's layout).
//!
//! Representation: a deque of chunks, each chunk a [`Packed`] buffer
//! (elements written one after another with their lengths, Redis's listpack
//! idea: 2 bytes of overhead per short element instead of a pointer and an
//! allocation) plus its byte count. This is Redis's quicklist: a small list
//! is one chunk, a big list is many chunks whose size is bounded by
//! `list-max-listpack-size` (positive: entries per chunk; negative: a byte
//! class, -1 = 4 KiB ... -5 = 64 KiB), so an insertion or removal in the
//! middle moves at most one chunk's pointers, never the whole list's.
//! Pushes and pops at both ends are O(1) amortized and move no other
//! element's bytes (a chunk keeps room at its front too, see packed.rs; the
//! chunk started at the head when the head one is full gets its room at the
//! front); positional access (LINDEX, LSET, LRANGE's start) walks chunk
//! lengths, O(n / chunk size).
//!
//! The fill limit is passed to every operation that may grow a chunk, so
//! CONFIG SET list-max-listpack-size applies to the writes made after it.
//!
//! OBJECT ENCODING answers "quicklist" for every list: that is what Redis 7.0
//! answers (7.0 creates every list as a quicklist; the Tcl suite of 7.0
//! asserts it), and 7.0 is the version whose suite this server is held to.

use std::collections::VecDeque;

use super::packed::{Packed, MAX_COUNT};

/// One chunk (a quicklist node): never empty once in a list.
#[derive(Clone, Debug, Default)]
struct Chunk {
    items: Packed,
    /// Sum of element lengths plus a small per-element overhead.
    bytes: usize,
}

/// Per-element overhead counted against a byte-class fill limit (a
/// listpack entry's header and back-length).
const ENTRY_OVERHEAD: usize = 2;

/// The byte budget of negative `list-max-listpack-size` values.
fn size_class(fill: i64) -> usize {
    match fill {
        -1 => 4096,
        -2 => 8192,
        -3 => 16384,
        -4 => 32768,
        _ => 65536,
    }
}

impl Chunk {
    fn one(v: &[u8]) -> Chunk {
        Chunk {
            items: Packed::one(v),
            bytes: v.len() + ENTRY_OVERHEAD,
        }
    }

    /// The chunk started when the end chunk is full: sized for a byte-class
    /// fill up front (see `Packed::one_with_capacity`), its room on the side
    /// it will grow from (`front` for the head chunk).
    fn after_full(v: &[u8], fill: i64, front: bool) -> Chunk {
        let cap = if fill < 0 { size_class(fill) } else { 0 };
        Chunk {
            items: Packed::one_with_capacity(v, cap, front),
            bytes: v.len() + ENTRY_OVERHEAD,
        }
    }

    /// Whether one more element of `len` bytes still fits under `fill`.
    fn fits(&self, fill: i64, len: usize) -> bool {
        if self.items.is_empty() {
            return true;
        }
        if fill > 0 {
            self.items.len() < (fill as usize).min(MAX_COUNT)
        } else {
            self.bytes + len + ENTRY_OVERHEAD <= size_class(fill)
        }
    }

    /// Whether the chunk is over `fill` (after an insertion in the middle).
    fn over(&self, fill: i64) -> bool {
        if fill > 0 {
            self.items.len() > (fill as usize).min(MAX_COUNT)
        } else {
            self.items.len() > 1 && self.bytes > size_class(fill)
        }
    }

    fn recount(&mut self) {
        self.bytes = self.items.iter().map(|e| e.len() + ENTRY_OVERHEAD).sum();
    }
}

/// A Redis list.
#[derive(Clone, Debug, Default)]
pub struct ListValue {
    chunks: VecDeque<Chunk>,
    len: usize,
}

impl PartialEq for ListValue {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl ListValue {
    pub fn new() -> ListValue {
        ListValue::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements from head to tail (reversible).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &[u8]> + '_ {
        self.chunks.iter().flat_map(|c| c.items.iter())
    }

    /// The elements chunk by chunk (quicklist nodes), for the RDB writer.
    pub fn chunks(&self) -> impl Iterator<Item = crate::keyspace::packed::Iter<'_>> + '_ {
        self.chunks.iter().map(|c| c.items.iter())
    }

    /// Elements from index `start` (0-based, clamped) to the tail.
    pub fn iter_from(&self, start: usize) -> impl Iterator<Item = &[u8]> + '_ {
        let (ci, off) = self.locate(start).unwrap_or((self.chunks.len(), 0));
        self.chunks
            .range(ci..)
            .enumerate()
            .flat_map(move |(k, c)| c.items.range_from(if k == 0 { off } else { 0 }))
    }

    /// OBJECT ENCODING: Redis 7.0 answers "quicklist" for every list.
    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        self.chunks.iter().map(|c| 48 + c.items.capacity()).sum()
    }

    /// Number of chunks (quicklist nodes), for tests and DEBUG.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    pub fn push_front(&mut self, fill: i64, v: &[u8]) {
        self.len += 1;
        if let Some(c) = self.chunks.front_mut() {
            if c.fits(fill, v.len()) {
                c.bytes += v.len() + ENTRY_OVERHEAD;
                c.items.push_front(v);
                return;
            }
            // Full: it will not grow again from this end.
            c.items.shrink_to_fit();
            self.chunks.push_front(Chunk::after_full(v, fill, true));
            return;
        }
        self.chunks.push_front(Chunk::one(v));
    }

    pub fn push_back(&mut self, fill: i64, v: &[u8]) {
        self.len += 1;
        if let Some(c) = self.chunks.back_mut() {
            if c.fits(fill, v.len()) {
                c.bytes += v.len() + ENTRY_OVERHEAD;
                c.items.push_back(v);
                return;
            }
            c.items.shrink_to_fit();
            self.chunks.push_back(Chunk::after_full(v, fill, false));
            return;
        }
        self.chunks.push_back(Chunk::one(v));
    }

    /// Pushes at the head (`left`) or the tail.
    pub fn push(&mut self, fill: i64, left: bool, v: &[u8]) {
        if left {
            self.push_front(fill, v)
        } else {
            self.push_back(fill, v)
        }
    }

    pub fn pop_front(&mut self) -> Option<Box<[u8]>> {
        self.pop_with(true, |v| v.into())
    }

    pub fn pop_back(&mut self) -> Option<Box<[u8]>> {
        self.pop_with(false, |v| v.into())
    }

    /// Pops from the head (`left`) or the tail, handing the element's bytes
    /// to `f` before they are dropped (a reply written from them needs no
    /// copy).
    pub fn pop_with<R>(&mut self, left: bool, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let c = if left {
            self.chunks.front_mut()?
        } else {
            self.chunks.back_mut()?
        };
        let mut n = 0;
        let r = if left {
            c.items.pop_front_with(|v| {
                n = v.len();
                f(v)
            })
        } else {
            c.items.pop_back_with(|v| {
                n = v.len();
                f(v)
            })
        }?;
        c.bytes -= n + ENTRY_OVERHEAD;
        if c.items.is_empty() {
            if left {
                self.chunks.pop_front();
            } else {
                self.chunks.pop_back();
            }
        }
        self.len -= 1;
        Some(r)
    }

    /// Pops from the head (`left`) or the tail.
    pub fn pop(&mut self, left: bool) -> Option<Box<[u8]>> {
        if left {
            self.pop_front()
        } else {
            self.pop_back()
        }
    }

    /// The chunk holding index `i` and the offset inside it, walking from
    /// the nearer end.
    fn locate(&self, i: usize) -> Option<(usize, usize)> {
        if i >= self.len {
            return None;
        }
        if i < self.len / 2 {
            let mut rest = i;
            for (ci, c) in self.chunks.iter().enumerate() {
                if rest < c.items.len() {
                    return Some((ci, rest));
                }
                rest -= c.items.len();
            }
        } else {
            let mut base = self.len;
            for (ci, c) in self.chunks.iter().enumerate().rev() {
                base -= c.items.len();
                if i >= base {
                    return Some((ci, i - base));
                }
            }
        }
        None
    }

    /// The element at index `i` (0 = head).
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let (ci, off) = self.locate(i)?;
        self.chunks[ci].items.get(off)
    }

    /// Replaces the element at `i`; false when out of range.
    pub fn set(&mut self, fill: i64, i: usize, v: &[u8]) -> bool {
        let Some((ci, off)) = self.locate(i) else {
            return false;
        };
        let c = &mut self.chunks[ci];
        let old = c.items.get(off).map_or(0, <[u8]>::len);
        c.bytes = c.bytes - old + v.len();
        c.items.set(off, v);
        self.split_if_over(fill, ci);
        true
    }

    /// Inserts `v` so that it ends up at index `i` (`i <= len`).
    pub fn insert(&mut self, fill: i64, i: usize, v: &[u8]) {
        if i == 0 {
            return self.push_front(fill, v);
        }
        if i >= self.len {
            return self.push_back(fill, v);
        }
        let (ci, off) = self.locate(i).expect("index checked against len");
        let c = &mut self.chunks[ci];
        c.bytes += v.len() + ENTRY_OVERHEAD;
        c.items.insert(off, v);
        self.len += 1;
        self.split_if_over(fill, ci);
    }

    /// Splits chunk `ci` in halves when it grew past `fill`, and the halves
    /// again while they are (a long element LSET into a byte-class chunk
    /// can leave a half over; a chunk of one element never is).
    fn split_if_over(&mut self, fill: i64, ci: usize) {
        if !self.chunks[ci].over(fill) {
            return;
        }
        let c = &mut self.chunks[ci];
        let half = c.items.len() / 2;
        let mut tail = Chunk {
            items: c.items.split_off(half),
            bytes: 0,
        };
        c.recount();
        tail.recount();
        self.chunks.insert(ci + 1, tail);
        self.split_if_over(fill, ci + 1);
        self.split_if_over(fill, ci);
    }

    /// Index of the first element equal to `pivot`.
    pub fn position(&self, pivot: &[u8]) -> Option<usize> {
        self.iter().position(|e| e == pivot)
    }

    /// Removes up to `limit` elements equal to `v` (0 = all), scanning from
    /// the head, or from the tail when `from_tail`. Returns how many.
    pub fn remove_matching(&mut self, v: &[u8], limit: usize, from_tail: bool) -> usize {
        let total = self.iter().filter(|e| *e == v).count();
        let n = if limit == 0 { total } else { total.min(limit) };
        if n == 0 {
            return 0;
        }
        // Matches to keep before removing (head order): from the tail, the
        // last `n` matches go.
        let mut skip = if from_tail { total - n } else { 0 };
        let mut left = n;
        for c in self.chunks.iter_mut() {
            if left == 0 {
                break;
            }
            c.items.retain(|e| {
                if left == 0 || e != v {
                    return true;
                }
                if skip > 0 {
                    skip -= 1;
                    return true;
                }
                left -= 1;
                false
            });
            c.recount();
        }
        self.chunks.retain(|c| !c.items.is_empty());
        self.len -= n;
        n
    }

    /// Drops `n` elements from the head.
    pub fn drop_front(&mut self, mut n: usize) {
        n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let c = self.chunks.front_mut().expect("len covers chunks");
            if c.items.len() <= n {
                n -= c.items.len();
                self.chunks.pop_front();
            } else {
                c.items.drain_front(n);
                c.recount();
                n = 0;
            }
        }
    }

    /// Drops `n` elements from the tail.
    pub fn drop_back(&mut self, mut n: usize) {
        n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let c = self.chunks.back_mut().expect("len covers chunks");
            let cl = c.items.len();
            if cl <= n {
                n -= cl;
                self.chunks.pop_back();
            } else {
                c.items.truncate(cl - n);
                c.recount();
                n = 0;
            }
        }
    }
}

impl<'a> FromIterator<&'a [u8]> for ListValue {
    /// Builds a list with the default fill (-2, 8 KiB chunks).
    fn from_iter<I: IntoIterator<Item = &'a [u8]>>(it: I) -> Self {
        let mut l = ListValue::new();
        for e in it {
            l.push_back(-2, e);
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_eq(l: &ListValue, m: &VecDeque<Vec<u8>>) {
        assert_eq!(l.len(), m.len());
        let a: Vec<&[u8]> = l.iter().collect();
        let b: Vec<&[u8]> = m.iter().map(|v| &v[..]).collect();
        assert_eq!(a, b);
        let ar: Vec<&[u8]> = l.iter().rev().collect();
        let br: Vec<&[u8]> = m.iter().rev().map(|v| &v[..]).collect();
        assert_eq!(ar, br);
    }

    /// Chunk invariants: none empty, lengths and byte counts add up, each
    /// within `fill` (a byte class may hold one element larger than it).
    fn chunks_ok(l: &ListValue, fill: i64) {
        assert_eq!(l.chunks.iter().map(|c| c.items.len()).sum::<usize>(), l.len);
        for c in &l.chunks {
            assert!(!c.items.is_empty());
            let mut r = c.clone();
            r.recount();
            assert_eq!(r.bytes, c.bytes);
            assert!(!c.over(fill), "chunk of {} over {fill}", c.items.len());
        }
    }

    /// Interleaved pushes and pops at both ends with LINSERT, LSET, LREM,
    /// LTRIM, LPOS and LINDEX in the middle, for positive and negative
    /// fills, short and long (>= 255 bytes, larger than a 4 KiB class)
    /// elements, against a VecDeque.
    #[test]
    fn against_model_all_fills() {
        for fill in [1, 2, 5, 128, -1, -2, -5] {
            let mut l = ListValue::new();
            let mut m: VecDeque<Vec<u8>> = VecDeque::new();
            let mut x: u64 = 11u64.wrapping_add(fill as u64);
            for step in 0..4000u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (x >> 24) as usize;
                let len = match r % 50 {
                    0 => 5000,
                    1..=4 => 255 + r % 400,
                    _ => 1 + r % 12,
                };
                let v: Vec<u8> = (0..len).map(|k| b'a' + ((k + r % 5) % 5) as u8).collect();
                match (x >> 33) % 12 {
                    0..=2 => {
                        l.push_front(fill, &v);
                        m.push_front(v);
                    }
                    3 | 4 => {
                        l.push_back(fill, &v);
                        m.push_back(v);
                    }
                    5 => assert_eq!(l.pop_front().map(|b| b.to_vec()), m.pop_front()),
                    6 => assert_eq!(l.pop_back().map(|b| b.to_vec()), m.pop_back()),
                    7 => {
                        let i = r % (m.len() + 1);
                        l.insert(fill, i, &v);
                        m.insert(i, v);
                    }
                    8 if !m.is_empty() => {
                        let i = r % m.len();
                        assert!(l.set(fill, i, &v));
                        m[i] = v;
                    }
                    9 if step % 4 == 0 => {
                        let (a, b) = (r % 3, (r >> 4) % 3);
                        l.drop_front(a);
                        m.drain(..a.min(m.len()));
                        l.drop_back(b);
                        m.truncate(m.len().saturating_sub(b));
                    }
                    10 => {
                        let n = l.remove_matching(&v, 1, step % 2 == 0);
                        let at = if step % 2 == 0 {
                            m.iter().rposition(|e| *e == v)
                        } else {
                            m.iter().position(|e| *e == v)
                        };
                        assert_eq!(n, at.map_or(0, |i| m.remove(i).map_or(0, |_| 1)));
                    }
                    _ => {
                        assert_eq!(l.position(&v), m.iter().position(|e| *e == v));
                        if !m.is_empty() {
                            let i = r % m.len();
                            assert_eq!(l.get(i), Some(&m[i][..]));
                        }
                    }
                }
                if step % 16 == 0 {
                    model_eq(&l, &m);
                    chunks_ok(&l, fill);
                    let s = r % (m.len() + 1);
                    assert!(l.iter_from(s).eq(m.iter().skip(s).map(|v| &v[..])));
                }
            }
            model_eq(&l, &m);
            assert_eq!(l.clone(), l);
        }
    }

    /// LPUSH onto a long list: the head chunk is sized for its class with
    /// the room at its front, and the full chunks behind it hold no more
    /// than their class.
    #[test]
    fn head_pushes_fill_chunks_from_the_front() {
        let mut l = ListValue::new();
        for i in 0..100_000u32 {
            l.push_front(-2, format!("{i:016}").as_bytes());
        }
        assert_eq!(l.get(0), Some(&b"0000000000099999"[..]));
        assert_eq!(l.get(99_999), Some(&b"0000000000000000"[..]));
        let per_chunk = 8192 / 18;
        assert_eq!(l.chunk_count(), 100_000usize.div_ceil(per_chunk));
        for c in l.chunks.iter().skip(1) {
            assert!(c.items.capacity() <= 8192, "{}", c.items.capacity());
        }
        assert!(l.mem_usage() < 100_000 * 19 + l.chunk_count() * 48 + 8192);
        for i in (0..100_000u32).rev() {
            assert_eq!(
                l.pop_front().as_deref(),
                Some(format!("{i:016}").as_bytes())
            );
        }
        assert!(l.is_empty() && l.chunk_count() == 0);
    }

    #[test]
    fn against_model() {
        let mut l = ListValue::new();
        let mut m: VecDeque<Vec<u8>> = VecDeque::new();
        let mut x: u64 = 7;
        for step in 0..5000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = format!("v{}", (x >> 40) % 13).into_bytes();
            let fill = 4;
            match (x >> 33) % 9 {
                0 | 1 => {
                    l.push_front(fill, &v);
                    m.push_front(v);
                }
                2 | 3 => {
                    l.push_back(fill, &v);
                    m.push_back(v);
                }
                4 => assert_eq!(l.pop_front().map(|b| b.to_vec()), m.pop_front()),
                5 => assert_eq!(l.pop_back().map(|b| b.to_vec()), m.pop_back()),
                6 => {
                    let i = (x as usize >> 3) % (m.len() + 1);
                    l.insert(fill, i, &v);
                    m.insert(i, v);
                }
                7 if !m.is_empty() => {
                    let i = (x as usize >> 3) % m.len();
                    assert_eq!(l.get(i), Some(&m[i][..]));
                    assert!(l.set(fill, i, &v));
                    m[i] = v;
                }
                _ => {
                    let lim = (step % 3) as usize;
                    let tail = step % 2 == 0;
                    let n = l.remove_matching(&v, lim, tail);
                    let mut removed = 0;
                    if tail {
                        let mut i = m.len();
                        while i > 0 && (lim == 0 || removed < lim) {
                            i -= 1;
                            if m[i] == v {
                                m.remove(i);
                                removed += 1;
                            }
                        }
                    } else {
                        let mut i = 0;
                        while i < m.len() && (lim == 0 || removed < lim) {
                            if m[i] == v {
                                m.remove(i);
                                removed += 1;
                            } else {
                                i += 1;
                            }
                        }
                    }
                    assert_eq!(n, removed);
                }
            }
            model_eq(&l, &m);
            let s = (x as usize) % (m.len() + 1);
            assert!(l.iter_from(s).eq(m.iter().skip(s).map(|v| &v[..])));
        }
        l.drop_front(3);
        m.drain(..3.min(m.len()));
        l.drop_back(5);
        let k = m.len().saturating_sub(5);
        m.truncate(k);
        model_eq(&l, &m);
    }
}
