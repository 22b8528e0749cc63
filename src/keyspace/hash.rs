//! Hash values (Redis's t_hash.c objects).
//!
//! Two encodings, answering OBJECT ENCODING as Redis 7.0 does:
//!
//! - `listpack`: a `Vec` of packed field/value pairs in insertion order
//!   (new fields append, HDEL removes in place), searched linearly, as
//!   Redis's listpack. Used while the hash has at most
//!   `hash-max-listpack-entries` fields and no field or value longer than
//!   `hash-max-listpack-value` bytes.
//! - `hashtable`: an [`OrdTable`] (hash-ordered open addressing, see
//!   `ordtable.rs`), whose order makes HSCAN cursors survive resizes.
//!
//! Each pair is one allocation (`ordtable::pack`: varint field length, field,
//! value) in both encodings, so a pair costs its bytes plus a 16-byte slot,
//! less than Redis's dictEntry plus two sds. A hash converts to `hashtable`
//! once and never back, as in Redis.

use super::ordtable::{alloc_size, pack, unpack, OrdTable, Packed};

#[derive(Clone, Debug, PartialEq)]
pub enum HashValue {
    Listpack(Vec<Box<[u8]>>),
    Table(OrdTable<Packed>),
}

impl Default for HashValue {
    fn default() -> Self {
        HashValue::Listpack(Vec::new())
    }
}

/// The conversion thresholds (`hash-max-listpack-entries`, `-value`).
#[derive(Clone, Copy, Debug)]
pub struct HashLimits {
    pub entries: usize,
    pub value: usize,
}

impl HashValue {
    pub fn len(&self) -> usize {
        match self {
            HashValue::Listpack(v) => v.len(),
            HashValue::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (field, value) pairs, in the encoding's order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match self {
            HashValue::Listpack(v) => Box::new(v.iter().map(|e| unpack(e))),
            HashValue::Table(t) => Box::new(t.iter().map(unpack)),
        }
    }

    /// OBJECT ENCODING: "listpack" or "hashtable".
    pub fn encoding(&self) -> &'static str {
        match self {
            HashValue::Listpack(_) => "listpack",
            HashValue::Table(_) => "hashtable",
        }
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        match self {
            HashValue::Listpack(v) => {
                v.capacity() * 16 + v.iter().map(|e| alloc_size(e.len())).sum::<usize>()
            }
            HashValue::Table(t) => t.mem_usage(),
        }
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match self {
            HashValue::Listpack(v) => v.iter().map(|e| unpack(e)).find(|p| p.0 == field),
            HashValue::Table(t) => t.get(field).map(unpack),
        }
        .map(|p| p.1)
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }

    /// Converts a listpack hash whose field or value would exceed the
    /// value limit (Redis's hashTypeTryConversion, called before writing).
    pub fn prepare(&mut self, field: &[u8], value: &[u8], lim: HashLimits) {
        if matches!(self, HashValue::Listpack(_))
            && (field.len() > lim.value || value.len() > lim.value)
        {
            self.convert();
        }
    }

    /// Sets `field` to `value`; true if the field is new. Converts to
    /// `hashtable` past the limits.
    pub fn set(&mut self, field: &[u8], value: &[u8], lim: HashLimits) -> bool {
        self.prepare(field, value, lim);
        let new = match self {
            HashValue::Listpack(v) => match v.iter().position(|e| unpack(e).0 == field) {
                Some(i) => {
                    v[i] = pack(field, value);
                    false
                }
                None => {
                    v.push(pack(field, value));
                    true
                }
            },
            HashValue::Table(t) => t.insert(pack(field, value)).is_none(),
        };
        if matches!(self, HashValue::Listpack(v) if v.len() > lim.entries) {
            self.convert();
        }
        new
    }

    /// Removes `field`; true if it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self {
            HashValue::Listpack(v) => match v.iter().position(|e| unpack(e).0 == field) {
                Some(i) => {
                    v.remove(i);
                    true
                }
                None => false,
            },
            HashValue::Table(t) => t.remove(field).is_some(),
        }
    }

    fn convert(&mut self) {
        if let HashValue::Listpack(v) = self {
            let mut t = OrdTable::with_capacity(v.len());
            for e in v.drain(..) {
                t.insert(e);
            }
            *self = HashValue::Table(t);
        }
    }

    /// A uniformly random (field, value).
    pub fn random(&self, rnd: &mut impl FnMut() -> u64) -> Option<(&[u8], &[u8])> {
        match self {
            HashValue::Listpack(v) if v.is_empty() => None,
            HashValue::Listpack(v) => Some(unpack(&v[(rnd() % v.len() as u64) as usize])),
            HashValue::Table(t) => t.random(rnd).map(unpack),
        }
    }

    /// HSCAN: calls `f` for the pairs from `cursor` on; returns the next
    /// cursor. A listpack is returned whole with cursor 0, as Redis does.
    pub fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&[u8], &[u8])) -> u64 {
        match self {
            HashValue::Listpack(v) => {
                v.iter().for_each(|e| {
                    let (k, x) = unpack(e);
                    f(k, x)
                });
                0
            }
            HashValue::Table(t) => t.scan(cursor, count, |e| {
                let (k, x) = unpack(e);
                f(k, x)
            }),
        }
    }
}
