//! A packed sequence of byte strings in one buffer: the list chunk's
//! storage, Redis's listpack idea. Each element is written as
//! `len | bytes | len`, the length as one byte when below 255, else as the
//! marker 0xFF and a 4-byte little-endian length (mirrored at the end:
//! 4 bytes then 0xFF), so the sequence can be walked from either end.
//!
//! Why: a boxed element costs a 16-byte pointer plus its own allocation
//! (32+ bytes for a 12-byte element); packed it costs its bytes plus 2.
//! Operations other than the ends shift bytes inside one buffer, which the
//! list keeps small (a chunk is bounded by `list-max-listpack-size`).
//!
//! Both ends are O(1) without moving the other elements: the elements live
//! in `buf[head..]`, and `buf[..head]` is room at the front. A push at the
//! front writes its element backwards into that room; a pop at the front
//! only advances `head`; the back is the Vec's own end. When the side a
//! push needs is full, the live bytes are recentred inside the allocation
//! if its spare allows (the push's bytes plus half the rest to that side),
//! else the allocation doubles, its new bytes on the side that ran out (at
//! the back that is the Vec's own growth). Up to 8 KiB of live bytes any
//! spare allows it, so a small list's allocation grows exactly as a Vec's
//! and costs what it did; above that the spare must be the live size too,
//! so a move is paid for by as many bytes of pushes (amortized O(1)). A
//! queue (push at one end, pop at the other) thus reuses its buffer.
//! `head` and `count` are u32 so that a chunk costs what it did before the
//! front room (the list keeps a chunk's count far below 2^32; a front room
//! past 2^32 bytes is closed up, see `advance`).

/// See the module comment.
#[derive(Debug, Default)]
pub(crate) struct Packed {
    buf: Vec<u8>,
    /// Start of the first element; `buf[..head]` is free.
    head: u32,
    count: u32,
}

/// The most elements a chunk holds: the list treats a larger positive
/// `list-max-listpack-size` as this.
pub(crate) const MAX_COUNT: usize = u32::MAX as usize - 1;

const BIG: u8 = 0xFF;

/// Live bytes up to which a push may recentre them into any spare (see
/// `spare_to_recentre`): the default fill's chunk size.
const SMALL: usize = 8192;

/// Bytes `v` takes encoded.
#[inline]
fn enc_len(v: &[u8]) -> usize {
    if v.len() < BIG as usize {
        v.len() + 2
    } else {
        v.len() + 10
    }
}

fn encode(v: &[u8], out: &mut Vec<u8>) {
    if v.len() < BIG as usize {
        out.push(v.len() as u8);
        out.extend_from_slice(v);
        out.push(v.len() as u8);
    } else {
        let n = (v.len() as u32).to_le_bytes();
        out.push(BIG);
        out.extend_from_slice(&n);
        out.extend_from_slice(v);
        out.extend_from_slice(&n);
        out.push(BIG);
    }
}

/// Writes `v` encoded into `dst`, which is exactly `enc_len(v)` long.
#[inline]
fn encode_into(v: &[u8], dst: &mut [u8]) {
    let n = dst.len();
    if v.len() < BIG as usize {
        dst[0] = v.len() as u8;
        dst[1..n - 1].copy_from_slice(v);
        dst[n - 1] = v.len() as u8;
    } else {
        let len = (v.len() as u32).to_le_bytes();
        dst[0] = BIG;
        dst[1..5].copy_from_slice(&len);
        dst[5..n - 5].copy_from_slice(v);
        dst[n - 5..n - 1].copy_from_slice(&len);
        dst[n - 1] = BIG;
    }
}

fn encoded(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() + 10);
    encode(v, &mut out);
    out
}

#[cfg(test)]
thread_local! {
    /// Bytes moved by regrowing and recentring, for the tests' amortized
    /// bounds.
    static MOVED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[inline]
fn counted_move(_n: usize) {
    #[cfg(test)]
    MOVED.with(|m| m.set(m.get() + _n));
}

/// (start of the element's bytes, their length, end of the element) for
/// the element whose header is at `at`.
#[inline]
fn read_fwd(buf: &[u8], at: usize) -> (usize, usize, usize) {
    if buf[at] != BIG {
        let len = buf[at] as usize;
        (at + 1, len, at + 2 + len)
    } else {
        let len = u32::from_le_bytes(buf[at + 1..at + 5].try_into().expect("4 bytes")) as usize;
        (at + 5, len, at + 10 + len)
    }
}

/// (start of the element, start of its bytes, their length) for the
/// element that ends at `end`.
#[inline]
fn read_back(buf: &[u8], end: usize) -> (usize, usize, usize) {
    if buf[end - 1] != BIG {
        let len = buf[end - 1] as usize;
        (end - 2 - len, end - 1 - len, len)
    } else {
        let len = u32::from_le_bytes(buf[end - 5..end - 1].try_into().expect("4 bytes")) as usize;
        (end - 10 - len, end - 5 - len, len)
    }
}

impl Clone for Packed {
    /// The copy holds the live bytes only (no front room).
    fn clone(&self) -> Packed {
        Packed {
            buf: self.live().to_vec(),
            head: 0,
            count: self.count,
        }
    }
}

impl PartialEq for Packed {
    fn eq(&self, other: &Packed) -> bool {
        self.count == other.count && self.live() == other.live()
    }
}

impl Packed {
    pub(crate) fn one(v: &[u8]) -> Packed {
        Packed {
            buf: encoded(v),
            head: 0,
            count: 1,
        }
    }

    /// One element, with room for `cap` bytes: a chunk that follows a full
    /// one will fill up too, so it skips the doubling (and the freed
    /// buffers it leaves behind). The room is at the front when `front`
    /// (the chunk will grow by pushes at the front), else at the back.
    pub(crate) fn one_with_capacity(v: &[u8], cap: usize, front: bool) -> Packed {
        let n = enc_len(v);
        if !front || cap <= n || cap - n > u32::MAX as usize {
            let mut buf = Vec::with_capacity(cap.max(n));
            encode(v, &mut buf);
            return Packed {
                buf,
                head: 0,
                count: 1,
            };
        }
        let mut buf = vec![0; cap];
        encode_into(v, &mut buf[cap - n..]);
        Packed {
            buf,
            head: (cap - n) as u32,
            count: 1,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.count as usize
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Heap bytes held.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Drops the front room and the spare capacity (a full chunk that will
    /// not grow again).
    pub(crate) fn shrink_to_fit(&mut self) {
        if self.head > 0 {
            self.buf = self.live().to_vec();
            self.head = 0;
        } else {
            self.buf.shrink_to_fit();
        }
    }

    #[inline]
    fn head(&self) -> usize {
        self.head as usize
    }

    /// The encoded elements.
    #[inline]
    fn live(&self) -> &[u8] {
        &self.buf[self.head()..]
    }

    pub(crate) fn iter(&self) -> Iter<'_> {
        let buf = self.live();
        Iter {
            buf,
            front: 0,
            back: buf.len(),
        }
    }

    /// Offset of element `i` in `live()` (`len()` gives the end).
    fn offset(&self, i: usize) -> usize {
        let buf = self.live();
        let mut at = 0;
        for _ in 0..i {
            at = read_fwd(buf, at).2;
        }
        at
    }

    /// Elements from index `from` on.
    pub(crate) fn range_from(&self, from: usize) -> Iter<'_> {
        let buf = self.live();
        Iter {
            buf,
            front: self.offset(from.min(self.len())),
            back: buf.len(),
        }
    }

    pub(crate) fn get(&self, i: usize) -> Option<&[u8]> {
        if i >= self.len() {
            return None;
        }
        let buf = self.live();
        let (s, len, _) = read_fwd(buf, self.offset(i));
        Some(&buf[s..s + len])
    }

    /// Empties the buffer (its allocation stays) once the last element left.
    fn reset_if_empty(&mut self) {
        if self.count == 0 {
            self.buf.clear();
            self.head = 0;
        }
    }

    /// Moves the live bytes so that they start at `to` (the buffer ends
    /// with them).
    fn move_live(&mut self, to: usize) {
        let (h, live) = (self.head(), self.buf.len() - self.head());
        counted_move(live);
        if to > h {
            self.buf.resize(to + live, 0);
        }
        self.buf.copy_within(h..h + live, to);
        self.buf.truncate(to + live);
        self.head = to as u32;
    }

    /// Drops `n` bytes at the front of the live bytes.
    fn advance(&mut self, n: usize) {
        let h = self.head() + n;
        if h > u32::MAX as usize {
            self.move_live(0);
            self.buf.drain(..n);
        } else {
            self.head = h as u32;
        }
    }

    /// Free bytes in the allocation beyond the live ones, when they are
    /// enough to recentre for a push of `n` bytes. Up to `SMALL` live bytes
    /// any spare will do: the allocation grows as a Vec's would, so a small
    /// list holds no more than before the front room, and a move costs at
    /// most what every push at the head used to. Above it the spare must
    /// also be as large as the live bytes, so each side gets at least half
    /// their size and the move is paid for by that many bytes of pushes
    /// (amortized O(1)).
    fn spare_to_recentre(&self, n: usize) -> Option<usize> {
        let live = self.buf.len() - self.head();
        let spare = self.buf.capacity() - live;
        let extra = if live <= SMALL { 0 } else { live };
        (spare >= extra + n).then_some(spare)
    }

    pub(crate) fn push_back(&mut self, v: &[u8]) {
        let n = enc_len(v);
        if self.buf.len() + n > self.buf.capacity() {
            match self.spare_to_recentre(n) {
                // The push gets `n` and half of the rest; the front keeps the other half.
                Some(spare) if self.head() > 0 => self.move_live((spare - n) / 2),
                // The Vec's own growth (doubling); the front room is kept.
                _ => {
                    counted_move(self.buf.len());
                    self.buf.reserve(n);
                }
            }
        }
        encode(v, &mut self.buf);
        self.count += 1;
    }

    pub(crate) fn push_front(&mut self, v: &[u8]) {
        let n = enc_len(v);
        if self.head() < n && !self.grow_front(n) {
            self.move_live(0);
            self.buf.splice(0..0, encoded(v));
            self.count += 1;
            return;
        }
        let at = self.head() - n;
        encode_into(v, &mut self.buf[at..at + n]);
        self.head = at as u32;
        self.count += 1;
    }

    /// Makes at least `need` bytes of front room: recentred in the same
    /// allocation when its spare allows (`spare_to_recentre`), else in one
    /// twice as large (as the Vec grows at the back) whose new bytes all
    /// go to the front, the back's spare kept. False when `need` is past
    /// what `head` can hold.
    fn grow_front(&mut self, need: usize) -> bool {
        if need > u32::MAX as usize {
            return false;
        }
        let max = u32::MAX as usize;
        if let Some(spare) = self.spare_to_recentre(need) {
            self.move_live((need + (spare - need) / 2).min(max));
            return true;
        }
        let (h, live) = (self.head(), self.buf.len() - self.head());
        let back = self.buf.capacity() - self.buf.len();
        let cap = (2 * self.buf.capacity()).max(live + need + back).max(8);
        let room = (cap - live - back).min(max);
        counted_move(live);
        let mut nb = Vec::with_capacity(room + live + back);
        nb.resize(room, 0);
        nb.extend_from_slice(&self.buf[h..]);
        self.buf = nb;
        self.head = room as u32;
        true
    }

    #[cfg(test)]
    pub(crate) fn pop_front(&mut self) -> Option<Box<[u8]>> {
        self.pop_front_with(|v| v.into())
    }

    #[cfg(test)]
    pub(crate) fn pop_back(&mut self) -> Option<Box<[u8]>> {
        self.pop_back_with(|v| v.into())
    }

    /// Removes the first element, handing its bytes to `f` first (no copy
    /// of them is made).
    pub(crate) fn pop_front_with<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        if self.count == 0 {
            return None;
        }
        let (s, len, end) = read_fwd(self.live(), 0);
        let r = f(&self.live()[s..s + len]);
        self.advance(end);
        self.count -= 1;
        self.reset_if_empty();
        Some(r)
    }

    /// Removes the last element, handing its bytes to `f` first.
    pub(crate) fn pop_back_with<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        if self.count == 0 {
            return None;
        }
        let (start, s, len) = read_back(self.live(), self.buf.len() - self.head());
        let r = f(&self.live()[s..s + len]);
        self.buf.truncate(self.head() + start);
        self.count -= 1;
        self.reset_if_empty();
        Some(r)
    }

    /// Replaces element `i` (which must exist).
    pub(crate) fn set(&mut self, i: usize, v: &[u8]) {
        let at = self.offset(i);
        let end = read_fwd(self.live(), at).2;
        let h = self.head();
        if end - at == enc_len(v) {
            encode_into(v, &mut self.buf[h + at..h + end]);
        } else {
            self.buf.splice(h + at..h + end, encoded(v));
        }
    }

    /// Inserts `v` before element `i` (`i == len()` appends).
    pub(crate) fn insert(&mut self, i: usize, v: &[u8]) {
        let at = self.head() + self.offset(i);
        self.buf.splice(at..at, encoded(v));
        self.count += 1;
    }

    /// Moves elements `at..` into a new sequence.
    pub(crate) fn split_off(&mut self, at: usize) -> Packed {
        let off = self.head() + self.offset(at);
        let tail = Packed {
            buf: self.buf.split_off(off),
            head: 0,
            count: self.count - at as u32,
        };
        self.count = at as u32;
        self.reset_if_empty();
        tail
    }

    /// Keeps the elements for which `keep` is true, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        let mut out = Vec::with_capacity(self.buf.len() - self.head());
        let mut count = 0;
        for e in self.iter() {
            if keep(e) {
                encode(e, &mut out);
                count += 1;
            }
        }
        self.buf = out;
        self.head = 0;
        self.count = count;
    }

    /// Removes the first `n` elements.
    pub(crate) fn drain_front(&mut self, n: usize) {
        let n = n.min(self.len());
        let off = self.offset(n);
        self.advance(off);
        self.count -= n as u32;
        self.reset_if_empty();
    }

    /// Keeps the first `n` elements.
    pub(crate) fn truncate(&mut self, n: usize) {
        if n < self.len() {
            let off = self.head() + self.offset(n);
            self.buf.truncate(off);
            self.count = n as u32;
            self.reset_if_empty();
        }
    }
}

/// Elements of a [`Packed`], from either end.
pub struct Iter<'a> {
    buf: &'a [u8],
    front: usize,
    back: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.front >= self.back {
            return None;
        }
        let (s, len, end) = read_fwd(self.buf, self.front);
        self.front = end;
        Some(&self.buf[s..s + len])
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        let (start, s, len) = read_back(self.buf, self.back);
        self.back = start;
        Some(&self.buf[s..s + len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Random operations against a VecDeque model, with short and long
    /// (>= 255 bytes) elements.
    #[test]
    fn matches_a_deque() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut p = Packed::one_with_capacity(b"first", 64, true);
        let mut m: VecDeque<Vec<u8>> = VecDeque::from([b"first".to_vec()]);
        for step in 0..20_000 {
            let len = if rnd() % 10 == 0 {
                255 + (rnd() % 300) as usize
            } else {
                (rnd() % 20) as usize
            };
            let v: Vec<u8> = (0..len).map(|i| (i as u64 + step) as u8).collect();
            match rnd() % 10 {
                0 | 1 => {
                    p.push_back(&v);
                    m.push_back(v);
                }
                2 | 3 => {
                    p.push_front(&v);
                    m.push_front(v);
                }
                4 => assert_eq!(p.pop_front().map(|b| b.to_vec()), m.pop_front()),
                5 => assert_eq!(p.pop_back().map(|b| b.to_vec()), m.pop_back()),
                6 if !m.is_empty() => {
                    let i = (rnd() as usize) % m.len();
                    p.set(i, &v);
                    m[i] = v;
                }
                7 => {
                    let i = (rnd() as usize) % (m.len() + 1);
                    p.insert(i, &v);
                    m.insert(i, v);
                }
                8 if m.len() > 4 => {
                    let n = (rnd() as usize) % 3;
                    p.drain_front(n);
                    m.drain(..n);
                    let keep = m.len() - (rnd() as usize) % 2;
                    p.truncate(keep);
                    m.truncate(keep);
                }
                _ => {
                    let b = (rnd() % 7) as u8;
                    p.retain(|e| e.first() != Some(&b));
                    m.retain(|e| e.first() != Some(&b));
                }
            }
            assert_eq!(p.len(), m.len());
            if step % 97 == 0 {
                assert!(p.iter().eq(m.iter().map(|v| &v[..])));
                assert!(p.iter().rev().eq(m.iter().rev().map(|v| &v[..])));
                if !m.is_empty() {
                    let i = (rnd() as usize) % m.len();
                    assert_eq!(p.get(i), Some(&m[i][..]));
                    assert!(p.range_from(i).eq(m.range(i..).map(|v| &v[..])));
                    let mut q = p.clone();
                    assert_eq!(q, p);
                    let tail = q.split_off(i);
                    assert!(q.iter().chain(tail.iter()).eq(p.iter()));
                }
            }
            if step % 1000 == 0 {
                let before = p.clone();
                p.shrink_to_fit();
                assert_eq!(p, before);
            }
        }
    }

    /// A push at the front writes into the front room: the buffer is not
    /// reallocated and `head` moves down by the element's encoded size.
    #[test]
    fn front_pushes_fill_the_room_in_place() {
        let mut p = Packed::one_with_capacity(b"last", 4096, true);
        assert_eq!(p.head(), 4096 - 6);
        let ptr = p.buf.as_ptr();
        let long = vec![b'x'; 300];
        for i in 0..10u8 {
            let h = p.head();
            p.push_front(&[i; 20]);
            assert_eq!(p.head(), h - 22);
            p.push_front(&long);
            assert_eq!(p.head(), h - 22 - 310);
        }
        assert_eq!(p.buf.as_ptr(), ptr);
        assert_eq!(p.capacity(), 4096);
        assert_eq!(p.len(), 21);
        assert_eq!(p.get(0), Some(&long[..]));
        assert_eq!(p.get(1), Some(&[9u8; 20][..]));
        assert_eq!(p.get(20), Some(&b"last"[..]));
        // A pop at the front gives the room back for the next push.
        let h = p.head();
        assert_eq!(p.pop_front().as_deref(), Some(&long[..]));
        assert_eq!(p.head(), h + 310);
        p.push_front(b"again");
        assert_eq!(p.head(), h + 310 - 7);
        assert_eq!(p.buf.as_ptr(), ptr);
    }

    /// Pushes at the front of a buffer without room regrow the room to the
    /// live size (doubling), not by one element at a time.
    #[test]
    fn front_room_grows_geometrically() {
        let mut p = Packed::one(b"a");
        let mut grows = 0;
        let mut cap = p.capacity();
        for i in 0..10_000u32 {
            p.push_front(&i.to_le_bytes());
            if p.capacity() != cap {
                grows += 1;
                cap = p.capacity();
            }
        }
        assert!(grows < 20, "{grows} regrows for 10000 pushes");
        assert!(cap <= 2 * 6 * 10_001 + 16, "capacity {cap}");
        assert!(p
            .iter()
            .rev()
            .skip(1)
            .map(|e| u32::from_le_bytes(e.try_into().unwrap()))
            .eq(0..10_000));
    }

    /// Regrowing and recentring move O(1) bytes per pushed byte, whatever
    /// the mix of ends: one end only, alternating ends, and queues either
    /// way (the pops at the other end) above `SMALL` live bytes. A queue
    /// under it may move its live bytes more often (any spare is used
    /// before the allocation grows), ten bytes per byte pushed here,
    /// where every head push or pop used to move them all.
    #[test]
    fn moves_are_amortized_constant() {
        for (pattern, queue, bound) in [
            (0, 0, 4),
            (1, 0, 4),
            (2, 0, 4),
            (3, 3000, 4),
            (4, 3000, 4),
            (3, 1000, 16),
            (4, 1000, 16),
        ] {
            let mut p = Packed::one(b"seed");
            MOVED.with(|m| m.set(0));
            let mut pushed = 0;
            for i in 0..100_000u32 {
                let v = i.to_le_bytes();
                if pattern == 0 || (pattern >= 2 && i.is_multiple_of(2)) || pattern == 3 {
                    p.push_front(&v);
                } else {
                    p.push_back(&v);
                }
                pushed += 6;
                if queue > 0 && p.len() > queue {
                    drop(if pattern == 3 {
                        p.pop_back()
                    } else {
                        p.pop_front()
                    });
                }
            }
            let moved = MOVED.with(|m| m.get());
            let live = p.buf.len() - p.head();
            assert!(
                moved <= bound * pushed,
                "pattern {pattern}/{queue}: {moved} bytes moved for {pushed}"
            );
            assert!(
                p.capacity() <= 4 * live + 64,
                "pattern {pattern}/{queue}: {} for {live}",
                p.capacity()
            );
        }
    }

    /// Up to `SMALL` live bytes, pushes at mixed ends grow the allocation
    /// as a Vec grows (doubling when full): at most twice the live bytes.
    #[test]
    fn small_buffers_grow_as_a_vec() {
        for pattern in 0..3 {
            let mut p = Packed::one(b"seed");
            let mut i = 0u32;
            while p.buf.len() - p.head() < SMALL - 100 {
                let v = format!("element:{i}");
                if pattern == 0
                    || (pattern == 2 && i.is_multiple_of(3))
                    || (pattern == 1 && i.is_multiple_of(2))
                {
                    p.push_front(v.as_bytes());
                } else {
                    p.push_back(v.as_bytes());
                }
                let live = p.buf.len() - p.head();
                assert!(
                    p.capacity() <= 2 * live + 16,
                    "pattern {pattern} live {live} cap {}",
                    p.capacity()
                );
                i += 1;
            }
        }
    }

    /// A queue in one buffer (push at one end, pop at the other) reuses its
    /// allocation instead of growing without bound.
    #[test]
    fn queues_reuse_the_buffer() {
        for front_in in [false, true] {
            let mut p = Packed::default();
            let mut m = VecDeque::new();
            let mut max_cap = 0;
            for i in 0..200_000u32 {
                let v = i.to_le_bytes();
                if front_in {
                    p.push_front(&v);
                    m.push_front(v.to_vec());
                } else {
                    p.push_back(&v);
                    m.push_back(v.to_vec());
                }
                if m.len() > 16 {
                    let (a, b) = if front_in {
                        (p.pop_back(), m.pop_back())
                    } else {
                        (p.pop_front(), m.pop_front())
                    };
                    assert_eq!(a.map(|b| b.to_vec()), b);
                }
                max_cap = max_cap.max(p.capacity());
            }
            assert!(p.iter().eq(m.iter().map(|v| &v[..])));
            assert!(
                max_cap <= 512,
                "front_in {front_in}: capacity reached {max_cap}"
            );
        }
    }

    /// Every operation on a buffer whose elements sit behind front room.
    #[test]
    fn middle_operations_after_front_pushes() {
        let mut p = Packed::one_with_capacity(b"z", 1024, true);
        for v in [&b"c"[..], b"b", b"a"] {
            p.push_front(v);
        }
        let long = vec![b'L'; 1000];
        p.insert(2, &long);
        p.set(0, b"A");
        p.set(1, b"bb");
        let got: Vec<&[u8]> = p.iter().collect();
        assert_eq!(got, vec![&b"A"[..], b"bb", &long[..], b"c", b"z"]);
        p.drain_front(1);
        p.truncate(3);
        let got: Vec<&[u8]> = p.iter().rev().collect();
        assert_eq!(got, vec![&b"c"[..], &long[..], b"bb"]);
        p.retain(|e| e != b"c");
        assert_eq!(p.len(), 2);
        let tail = p.split_off(1);
        assert_eq!(tail.get(0), Some(&long[..]));
        assert_eq!(p.pop_back().as_deref(), Some(&b"bb"[..]));
        assert!(p.is_empty() && p.iter().next().is_none());
        p.push_front(b"x");
        p.push_back(b"y");
        assert!(p.iter().eq([&b"x"[..], b"y"]));
    }
}
