//! [`Slab`]: the dense, chunked storage of a shard's entries.
//!
//! Entries are packed into fixed-size chunks of about 4 KiB (one allocator
//! size class, so no rounding waste). Growing adds one chunk; past the first
//! chunk nothing is ever copied or reallocated, so a shard's memory grows by
//! 4 KiB steps with no transient copy (no 2x spike, and no big freed blocks
//! left for the allocator to hold on to). The first chunk alone starts at
//! [`FIRST_CHUNK`] entries and doubles up to a whole chunk: a database has
//! 256 shards, and a 4 KiB chunk for each shard's first key would make a
//! small database's used_memory jump by 1 MiB in its first few hundred keys
//! (maxmemory tests and users watching INFO expect memory to follow the data). Removal swaps the last entry into the hole, so
//! the slab stays dense: positions are `0..len`, and only the last chunk can
//! be partly empty. The shard's hash index maps keys to positions.
//!
//! [`Key`] is the entry's key: up to [`KEY_INLINE`] bytes are stored inside
//! the entry itself (no allocation, and no extra cache miss when a lookup
//! compares keys); longer keys go to the heap. A key with a TTL carries its
//! expiry time in front of its bytes in one heap block, so persistent keys
//! (the common case) pay nothing for a field most of them never use.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use super::Entry;

/// Longest key stored inline in a [`Key`].
pub(crate) const KEY_INLINE: usize = 18;

/// Access metadata carried in a key's spare bytes: the 24-bit LRU clock
/// (little endian) and the 8-bit LFU counter. Byte-aligned so that it fits
/// beside the tag in every variant of [`Key`].
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Meta([u8; 4]);

impl Meta {
    #[inline]
    pub fn lru(self) -> u32 {
        u32::from_le_bytes([self.0[0], self.0[1], self.0[2], 0])
    }

    #[inline]
    pub fn set_lru(&mut self, lru: u32) {
        self.0[..3].copy_from_slice(&lru.to_le_bytes()[..3]);
    }

    #[inline]
    pub fn lfu(self) -> u8 {
        self.0[3]
    }

    #[inline]
    pub fn set_lfu(&mut self, lfu: u8) {
        self.0[3] = lfu;
    }
}

/// A key: inline when short, boxed otherwise. Derefs to `[u8]`. 24 bytes,
/// the same as a `Vec<u8>` header, without a 16+ byte allocation for short
/// keys; every variant also carries the entry's LRU/LFU [`Meta`] in bytes
/// that would otherwise be padding.
#[derive(Clone)]
pub enum Key {
    Inline {
        meta: Meta,
        len: u8,
        buf: [u8; KEY_INLINE],
    },
    Heap {
        meta: Meta,
        bytes: Box<[u8]>,
    },
    /// A key with a TTL: 8 bytes of expiry (unix ms, little endian, never
    /// 0), then the key's bytes.
    Volatile {
        meta: Meta,
        bytes: Box<[u8]>,
    },
}

const EXP: usize = 8;

impl Deref for Key {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Key::Inline { len, buf, .. } => &buf[..*len as usize],
            Key::Heap { bytes, .. } => bytes,
            Key::Volatile { bytes, .. } => &bytes[EXP..],
        }
    }
}

impl Key {
    /// Absolute expiry in unix ms; 0 = persistent.
    #[inline]
    pub fn expire_at(&self) -> u64 {
        match self {
            Key::Volatile { bytes, .. } => {
                u64::from_le_bytes(bytes[..EXP].try_into().expect("8 bytes"))
            }
            _ => 0,
        }
    }

    /// Sets (`at > 0`) or clears (`at == 0`) the expiry carried by the key.
    pub fn set_expire_at(&mut self, at: u64) {
        let meta = self.meta();
        match self {
            Key::Volatile { bytes, .. } if at != 0 => {
                bytes[..EXP].copy_from_slice(&at.to_le_bytes())
            }
            Key::Volatile { .. } => {
                *self = Key::from(&**self);
                *self.meta_mut() = meta;
            }
            _ if at == 0 => {}
            _ => {
                let mut v = Vec::with_capacity(EXP + self.len());
                v.extend_from_slice(&at.to_le_bytes());
                v.extend_from_slice(self);
                let bytes = v.into_boxed_slice();
                *self = Key::Volatile { meta, bytes };
            }
        }
    }

    #[inline]
    pub fn meta(&self) -> Meta {
        match self {
            Key::Inline { meta, .. } | Key::Heap { meta, .. } | Key::Volatile { meta, .. } => *meta,
        }
    }

    #[inline]
    pub fn meta_mut(&mut self) -> &mut Meta {
        match self {
            Key::Inline { meta, .. } | Key::Heap { meta, .. } | Key::Volatile { meta, .. } => meta,
        }
    }
}

impl From<&[u8]> for Key {
    #[inline]
    fn from(k: &[u8]) -> Key {
        if k.len() <= KEY_INLINE {
            let mut buf = [0u8; KEY_INLINE];
            buf[..k.len()].copy_from_slice(k);
            Key::Inline {
                meta: Meta::default(),
                len: k.len() as u8,
                buf,
            }
        } else {
            Key::Heap {
                meta: Meta::default(),
                bytes: k.into(),
            }
        }
    }
}

impl From<&Vec<u8>> for Key {
    fn from(k: &Vec<u8>) -> Key {
        Key::from(&k[..])
    }
}

impl From<Vec<u8>> for Key {
    fn from(k: Vec<u8>) -> Key {
        if k.len() <= KEY_INLINE {
            Key::from(&k[..])
        } else {
            Key::Heap {
                meta: Meta::default(),
                bytes: k.into_boxed_slice(),
            }
        }
    }
}

impl From<Box<[u8]>> for Key {
    fn from(k: Box<[u8]>) -> Key {
        Key::from(k.into_vec())
    }
}

impl<const N: usize> From<&[u8; N]> for Key {
    fn from(k: &[u8; N]) -> Key {
        Key::from(&k[..])
    }
}

impl From<&str> for Key {
    fn from(k: &str) -> Key {
        Key::from(k.as_bytes())
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Key) -> bool {
        **self == **other
    }
}

impl Eq for Key {}

impl PartialEq<[u8]> for Key {
    fn eq(&self, other: &[u8]) -> bool {
        &**self == other
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (**self).hash(h)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// Entries per chunk: as many as fit in 4096 bytes.
pub(crate) const CHUNK: usize = {
    let n = 4096 / std::mem::size_of::<Entry>();
    if n == 0 {
        1
    } else {
        n
    }
};

/// Capacity of a shard's first chunk when its first entry arrives.
const FIRST_CHUNK: usize = 2;

#[derive(Default)]
pub(crate) struct Slab {
    chunks: Vec<Vec<Entry>>,
    len: usize,
}

impl Slab {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> &Entry {
        &self.chunks[i / CHUNK][i % CHUNK]
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut Entry {
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }

    /// Appends `e`; returns its position.
    pub(crate) fn push(&mut self, e: Entry) -> usize {
        if self.len.is_multiple_of(CHUNK) {
            let cap = if self.len == 0 {
                FIRST_CHUNK.min(CHUNK)
            } else {
                CHUNK
            };
            self.chunks.push(Vec::with_capacity(cap));
        }
        let last = self.chunks.last_mut().expect("pushed above");
        if last.len() == last.capacity() {
            // Only the first chunk can be full here: double it, up to CHUNK.
            last.reserve_exact((last.capacity() * 2).min(CHUNK) - last.len());
        }
        last.push(e);
        self.len += 1;
        self.len - 1
    }

    /// Removes the entry at `i`, moving the last entry (at position
    /// `len - 1` before the call) into its place. Returns the removed entry.
    pub(crate) fn swap_remove(&mut self, i: usize) -> Entry {
        assert!(i < self.len, "slab index out of range");
        let last_chunk = self.chunks.last_mut().expect("non-empty");
        let last = last_chunk.pop().expect("last chunk is never empty");
        if last_chunk.is_empty() {
            self.chunks.pop();
        }
        self.len -= 1;
        if i == self.len {
            last
        } else {
            std::mem::replace(self.get_mut(i), last)
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.chunks.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::Value;

    fn e(n: usize) -> Entry {
        Entry::new(
            n.to_string().into_bytes().into(),
            Value::string(b"v"),
            0,
            n as u64,
        )
    }

    #[test]
    fn push_and_swap_remove_keep_it_dense() {
        let mut s = Slab::default();
        for n in 0..CHUNK * 3 + 1 {
            assert_eq!(s.push(e(n)), n);
        }
        assert_eq!(s.chunks.len(), 4);
        let gone = s.swap_remove(0);
        assert_eq!(gone.version, 0);
        assert_eq!(s.get(0).version, (CHUNK * 3) as u64);
        assert_eq!(s.chunks.len(), 3);
        while !s.is_empty() {
            s.swap_remove(s.len() / 2);
        }
        assert!(s.chunks.is_empty());
        assert_eq!(s.iter().count(), 0);
    }

    #[test]
    fn first_chunk_grows_with_the_entries_later_chunks_are_whole() {
        let mut s = Slab::default();
        s.push(e(0));
        assert_eq!(s.chunks[0].capacity(), FIRST_CHUNK);
        for n in 1..CHUNK {
            s.push(e(n));
            let cap = s.chunks[0].capacity();
            assert!(cap > n && cap <= CHUNK && cap <= 2 * (n + 1), "{n}: {cap}");
        }
        assert_eq!(s.chunks[0].capacity(), CHUNK);
        s.push(e(CHUNK));
        assert_eq!(s.chunks[1].capacity(), CHUNK);
        assert!((0..=CHUNK).all(|n| s.get(n).version == n as u64));
    }

    #[test]
    fn keys_inline_or_boxed() {
        assert_eq!(std::mem::size_of::<Key>(), 24);
        for len in [0, 1, 16, KEY_INLINE, KEY_INLINE + 1, 100] {
            let bytes: Vec<u8> = (0..len as u8).collect();
            let k = Key::from(&bytes[..]);
            assert_eq!(&*k, &bytes[..]);
            assert_eq!(matches!(k, Key::Inline { .. }), len <= KEY_INLINE);
            assert_eq!(Key::from(bytes.clone()), k);
            let mut v = k.clone();
            assert_eq!(v.expire_at(), 0);
            v.set_expire_at(1234);
            assert_eq!((v.expire_at(), &*v), (1234, &bytes[..]));
            v.set_expire_at(99);
            assert_eq!((v.expire_at(), &*v), (99, &bytes[..]));
            v.meta_mut().set_lru(0xAB_CDEF);
            v.meta_mut().set_lfu(7);
            v.set_expire_at(0);
            assert_eq!((v.expire_at(), &*v), (0, &bytes[..]));
            assert_eq!((v.meta().lru(), v.meta().lfu()), (0xAB_CDEF, 7));
            assert_eq!(matches!(v, Key::Inline { .. }), len <= KEY_INLINE);
        }
    }
}
