//! One node of a stream in memory (DECISIONS 95): a run of consecutive
//! entries packed into a single byte buffer, the role a listpack plays in
//! Redis's radix tree of listpacks, in a tighter layout of our own.
//!
//! A node's buffer starts with its *master fields* (the field names of the
//! entry that opened it: a varint count, then each name as a varint length
//! and its bytes), then holds its entries in ID order. An entry is a flag
//! byte ([`DELETED`], [`SAMEFIELDS`]), its ID as two varints relative to
//! the entry before it (the node's key for the first: the ms difference,
//! then the seq difference when the ms are equal or the seq itself when
//! they are not), then either the values alone (SAMEFIELDS: its field names
//! are the master fields) or a varint field count and the field/value
//! pairs, each a varint length and its bytes. A small entry with the
//! master's fields therefore costs 3 bytes plus its values.
//!
//! XDEL sets an entry's DELETED flag in place; the node is dropped when its
//! last live entry goes (as Redis drops an emptied listpack). The buffer is
//! only ever written by this module, so decoding trusts it: a malformed
//! buffer is a bug here, not bad input (RDB input is checked in
//! `persistence/rdb/stream.rs` before it becomes a node).

use super::stream::{Fields, StreamId};

/// The entry was deleted (XDEL or an exact trim) but still occupies bytes.
pub(crate) const DELETED: u8 = 1;
/// The entry's field names are the node's master fields.
pub(crate) const SAMEFIELDS: u8 = 2;

#[derive(Clone, Debug, PartialEq, Default)]
pub(crate) struct Node {
    /// Master fields, then entries (module comment).
    buf: Vec<u8>,
    /// Live entries.
    pub live: u32,
    /// Live and deleted entries: what Redis's split rule counts.
    pub total: u32,
    /// Redis's split rule's byte estimate (`StreamValue::append`).
    pub bytes: usize,
    /// The ID of the last entry written, live or deleted.
    pub last: StreamId,
}

/// An entry located in a node's buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Raw {
    pub id: StreamId,
    /// Offset of its flag byte.
    at: usize,
    /// Offset of its first item (a value, or the field count).
    items: usize,
    flags: u8,
}

impl Raw {
    pub(crate) fn deleted(&self) -> bool {
        self.flags & DELETED != 0
    }
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn varint(buf: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = buf[*at];
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

fn put_item(buf: &mut Vec<u8>, it: &[u8]) {
    put_varint(buf, it.len() as u64);
    buf.extend_from_slice(it);
}

fn item<'a>(buf: &'a [u8], at: &mut usize) -> &'a [u8] {
    let n = varint(buf, at) as usize;
    let it = &buf[*at..*at + n];
    *at += n;
    it
}

/// A walk over a node's entries ([`Node::iter`]).
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    /// The next entry's flag byte.
    at: usize,
    /// The ID before it (the node's key before the first).
    prev: StreamId,
    master_fields: usize,
}

impl Iterator for Cursor<'_> {
    type Item = Raw;

    fn next(&mut self) -> Option<Raw> {
        let (buf, start) = (self.buf, self.at);
        if start >= buf.len() {
            return None;
        }
        let flags = buf[start];
        let mut at = start + 1;
        let dms = varint(buf, &mut at);
        let dseq = varint(buf, &mut at);
        let prev = self.prev;
        let id = if dms == 0 {
            StreamId::new(prev.ms, prev.seq + dseq)
        } else {
            StreamId::new(prev.ms + dms, dseq)
        };
        let items = at;
        let n = if flags & SAMEFIELDS != 0 {
            self.master_fields
        } else {
            2 * varint(buf, &mut at) as usize
        };
        for _ in 0..n {
            item(buf, &mut at);
        }
        self.at = at;
        self.prev = id;
        Some(Raw {
            id,
            at: start,
            items,
            flags,
        })
    }
}

impl Node {
    /// An empty node whose master fields are `f`'s field names.
    pub(crate) fn open(f: &Fields) -> Node {
        let mut buf = Vec::new();
        put_varint(&mut buf, (f.count() / 2) as u64);
        for name in f.items().step_by(2) {
            put_item(&mut buf, name);
        }
        Node {
            buf,
            ..Node::default()
        }
    }

    /// Whether `f`'s field names are the master fields.
    fn has_master_fields(&self, f: &Fields) -> bool {
        let mut at = 0;
        let n = varint(&self.buf, &mut at) as usize;
        let mut names = f.items().step_by(2);
        for _ in 0..n {
            match names.next() {
                Some(name) if name == item(&self.buf, &mut at) => {}
                _ => return false,
            }
        }
        names.next().is_none()
    }

    /// Appends entry `id` (above every ID in the node; `key` is the node's
    /// key, the base of the first entry's deltas).
    pub(crate) fn push(&mut self, key: StreamId, id: StreamId, f: &Fields) {
        let prev = if self.total == 0 { key } else { self.last };
        let same = self.has_master_fields(f);
        self.buf.push(if same { SAMEFIELDS } else { 0 });
        let dms = id.ms - prev.ms;
        put_varint(&mut self.buf, dms);
        put_varint(
            &mut self.buf,
            if dms == 0 { id.seq - prev.seq } else { id.seq },
        );
        if same {
            for v in f.items().skip(1).step_by(2) {
                put_item(&mut self.buf, v);
            }
        } else {
            put_varint(&mut self.buf, (f.count() / 2) as u64);
            for it in f.items() {
                put_item(&mut self.buf, it);
            }
        }
        self.live += 1;
        self.total += 1;
        self.last = id;
    }

    /// Every entry, deleted ones included, in ID order.
    pub(crate) fn raws(&self, key: StreamId) -> Vec<Raw> {
        self.iter(key).collect()
    }

    /// Every entry, deleted ones included, in ID order, decoded as needed.
    pub(crate) fn iter(&self, key: StreamId) -> Cursor<'_> {
        let mut at = 0;
        let n = varint(&self.buf, &mut at) as usize;
        for _ in 0..n {
            item(&self.buf, &mut at);
        }
        Cursor {
            buf: &self.buf,
            at,
            prev: key,
            master_fields: n,
        }
    }

    /// The fields and values of entry `r`.
    pub(crate) fn fields(&self, r: &Raw) -> Fields {
        let buf = &self.buf;
        let mut at = r.items;
        if r.flags & SAMEFIELDS != 0 {
            // Names from the master fields, values from the entry, in turn.
            let mut name_at = 0;
            let n = 2 * varint(buf, &mut name_at) as usize;
            Fields::pack((0..n).map(|i| {
                let cursor = if i % 2 == 0 { &mut name_at } else { &mut at };
                item(buf, cursor)
            }))
        } else {
            let n = 2 * varint(buf, &mut at) as usize;
            Fields::pack((0..n).map(|_| item(buf, &mut at)))
        }
    }

    /// Marks entry `r` (live) deleted.
    pub(crate) fn mark_deleted(&mut self, r: &Raw) {
        self.buf[r.at] |= DELETED;
        self.live -= 1;
    }

    /// Gives back the growth slack of a node no longer appended to.
    pub(crate) fn seal(&mut self) {
        self.buf.shrink_to_fit();
    }

    /// Heap bytes of the node (MEMORY USAGE).
    pub(crate) fn heap(&self) -> usize {
        self.buf.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(items: &[&str]) -> Fields {
        Fields::pack(items.iter().map(|s| s.as_bytes()))
    }

    #[test]
    fn entries_round_trip_with_and_without_master_fields() {
        let key = StreamId::new(5, 7);
        let mut n = Node::open(&f(&["a", "b"]));
        let es = [
            (StreamId::new(5, 7), f(&["a", "1", "b", "2"])),
            (StreamId::new(5, 9), f(&["x", "long value"])),
            (StreamId::new(1 << 40, 3), f(&["a", "", "b", "z"])),
            (StreamId::new(u64::MAX, u64::MAX), f(&["a", "1"])),
        ];
        for (id, fs) in &es {
            n.push(key, *id, fs);
        }
        let raws = n.raws(key);
        assert_eq!(raws.len(), 4);
        for (r, (id, fs)) in raws.iter().zip(&es) {
            assert_eq!(r.id, *id);
            assert_eq!(&n.fields(r), fs);
        }
        n.mark_deleted(&raws[1]);
        let raws = n.raws(key);
        assert!(raws[1].deleted() && !raws[0].deleted());
        assert_eq!(n.fields(&raws[2]), es[2].1);
        assert_eq!((n.live, n.total), (3, 4));
    }
}
