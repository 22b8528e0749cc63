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

/// See the module comment.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Packed {
    buf: Vec<u8>,
    count: usize,
}

const BIG: u8 = 0xFF;

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

fn encoded(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() + 10);
    encode(v, &mut out);
    out
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

impl Packed {
    pub(crate) fn one(v: &[u8]) -> Packed {
        Packed {
            buf: encoded(v),
            count: 1,
        }
    }

    /// One element, with room for `cap` bytes: a chunk that follows a full
    /// one will fill up too, so it skips the doubling (and the freed
    /// buffers it leaves behind).
    pub(crate) fn one_with_capacity(v: &[u8], cap: usize) -> Packed {
        let mut buf = Vec::with_capacity(cap.max(v.len() + 10));
        encode(v, &mut buf);
        Packed { buf, count: 1 }
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Heap bytes held.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.buf.shrink_to_fit();
    }

    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter {
            buf: &self.buf,
            front: 0,
            back: self.buf.len(),
        }
    }

    /// Byte offset of element `i` (`len()` gives the end).
    fn offset(&self, i: usize) -> usize {
        let mut at = 0;
        for _ in 0..i {
            at = read_fwd(&self.buf, at).2;
        }
        at
    }

    /// Elements from index `from` on.
    pub(crate) fn range_from(&self, from: usize) -> Iter<'_> {
        Iter {
            buf: &self.buf,
            front: self.offset(from.min(self.count)),
            back: self.buf.len(),
        }
    }

    pub(crate) fn get(&self, i: usize) -> Option<&[u8]> {
        if i >= self.count {
            return None;
        }
        let (s, len, _) = read_fwd(&self.buf, self.offset(i));
        Some(&self.buf[s..s + len])
    }

    pub(crate) fn push_back(&mut self, v: &[u8]) {
        encode(v, &mut self.buf);
        self.count += 1;
    }

    pub(crate) fn push_front(&mut self, v: &[u8]) {
        self.buf.splice(0..0, encoded(v));
        self.count += 1;
    }

    pub(crate) fn pop_front(&mut self) -> Option<Box<[u8]>> {
        if self.count == 0 {
            return None;
        }
        let (s, len, end) = read_fwd(&self.buf, 0);
        let v: Box<[u8]> = self.buf[s..s + len].into();
        self.buf.drain(..end);
        self.count -= 1;
        Some(v)
    }

    pub(crate) fn pop_back(&mut self) -> Option<Box<[u8]>> {
        if self.count == 0 {
            return None;
        }
        let (start, s, len) = read_back(&self.buf, self.buf.len());
        let v: Box<[u8]> = self.buf[s..s + len].into();
        self.buf.truncate(start);
        self.count -= 1;
        Some(v)
    }

    /// Replaces element `i` (which must exist).
    pub(crate) fn set(&mut self, i: usize, v: &[u8]) {
        let at = self.offset(i);
        let end = read_fwd(&self.buf, at).2;
        self.buf.splice(at..end, encoded(v));
    }

    /// Inserts `v` before element `i` (`i == len()` appends).
    pub(crate) fn insert(&mut self, i: usize, v: &[u8]) {
        let at = self.offset(i);
        self.buf.splice(at..at, encoded(v));
        self.count += 1;
    }

    /// Moves elements `at..` into a new sequence.
    pub(crate) fn split_off(&mut self, at: usize) -> Packed {
        let off = self.offset(at);
        let tail = Packed {
            buf: self.buf.split_off(off),
            count: self.count - at,
        };
        self.count = at;
        tail
    }

    /// Keeps the elements for which `keep` is true, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        let mut out = Vec::with_capacity(self.buf.len());
        let mut count = 0;
        for e in self.iter() {
            if keep(e) {
                encode(e, &mut out);
                count += 1;
            }
        }
        self.buf = out;
        self.count = count;
    }

    /// Removes the first `n` elements.
    pub(crate) fn drain_front(&mut self, n: usize) {
        let n = n.min(self.count);
        let off = self.offset(n);
        self.buf.drain(..off);
        self.count -= n;
    }

    /// Keeps the first `n` elements.
    pub(crate) fn truncate(&mut self, n: usize) {
        if n < self.count {
            let off = self.offset(n);
            self.buf.truncate(off);
            self.count = n;
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
        let mut p = Packed::default();
        let mut m: VecDeque<Vec<u8>> = VecDeque::new();
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
                    let tail = q.split_off(i);
                    assert!(q.iter().chain(tail.iter()).eq(p.iter()));
                }
            }
        }
    }
}
