//! Set values (Redis's t_set.c objects).
//!
//! Encodings as Redis 7.0 answers OBJECT ENCODING (7.0 has no set listpack;
//! its Tcl suite is our reference):
//!
//! - `intset`: a sorted `Vec<i64>`, while every member is a canonical
//!   decimal integer (Redis's string2ll) and there are at most
//!   `set-max-intset-entries` of them; members iterate in ascending order,
//!   as Redis's intset.
//! - `hashtable`: an [`OrdTable`] of members (hash-ordered open addressing,
//!   see `ordtable.rs`), one allocation per member plus a 16-byte slot.
//!
//! A set converts to `hashtable` once and never back. Iteration yields
//! [`Member`]s, which deref to the member's bytes (an intset member is
//! formatted on the fly).

use std::ops::Deref;

use super::ordtable::{OrdTable, Whole};
use crate::protocol::{fmt_i64_pub, parse_i64};

#[derive(Clone, Debug, PartialEq)]
pub enum SetValue {
    Intset(Vec<i64>),
    Table(OrdTable<Whole>),
}

impl Default for SetValue {
    fn default() -> Self {
        SetValue::Intset(Vec::new())
    }
}

/// A member as iteration yields it: borrowed bytes or a formatted integer.
pub enum Member<'a> {
    Bytes(&'a [u8]),
    Int { buf: [u8; 20], start: u8 },
}

impl<'a> Member<'a> {
    fn int(n: i64) -> Member<'a> {
        let mut buf = [0u8; 20];
        let len = fmt_i64_pub(&mut buf, n).len();
        Member::Int {
            buf,
            start: (20 - len) as u8,
        }
    }
}

impl Deref for Member<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Member::Bytes(b) => b,
            Member::Int { buf, start } => &buf[*start as usize..],
        }
    }
}

impl SetValue {
    /// An empty set of the encoding Redis's setTypeCreate picks for a first
    /// member `m`.
    pub fn for_member(m: &[u8]) -> SetValue {
        if parse_i64(m).is_some() {
            SetValue::Intset(Vec::new())
        } else {
            SetValue::Table(OrdTable::default())
        }
    }

    pub fn len(&self) -> usize {
        match self {
            SetValue::Intset(v) => v.len(),
            SetValue::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Members, in the encoding's order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = Member<'_>> + '_> {
        match self {
            SetValue::Intset(v) => Box::new(v.iter().map(|&n| Member::int(n))),
            SetValue::Table(t) => Box::new(t.iter().map(Member::Bytes)),
        }
    }

    /// OBJECT ENCODING: "intset" or "hashtable".
    pub fn encoding(&self) -> &'static str {
        match self {
            SetValue::Intset(_) => "intset",
            SetValue::Table(_) => "hashtable",
        }
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        match self {
            SetValue::Intset(v) => v.capacity() * 8,
            SetValue::Table(t) => t.mem_usage(),
        }
    }

    pub fn contains(&self, m: &[u8]) -> bool {
        match self {
            SetValue::Intset(v) => parse_i64(m).is_some_and(|n| v.binary_search(&n).is_ok()),
            SetValue::Table(t) => t.get(m).is_some(),
        }
    }

    /// Adds `m`; true if it is new. Converts to `hashtable` for a
    /// non-integer member or past `max_intset` members.
    pub fn add(&mut self, m: &[u8], max_intset: usize) -> bool {
        if let SetValue::Intset(v) = self {
            match parse_i64(m) {
                Some(n) => match v.binary_search(&n) {
                    Ok(_) => return false,
                    Err(i) => {
                        v.insert(i, n);
                        if v.len() > max_intset {
                            self.convert();
                        }
                        return true;
                    }
                },
                None => self.convert(),
            }
        }
        match self {
            SetValue::Table(t) => t.insert(m.into()).is_none(),
            SetValue::Intset(_) => unreachable!("converted above"),
        }
    }

    /// Removes `m`; true if it was there.
    pub fn remove(&mut self, m: &[u8]) -> bool {
        match self {
            SetValue::Intset(v) => match parse_i64(m).map(|n| v.binary_search(&n)) {
                Some(Ok(i)) => {
                    v.remove(i);
                    true
                }
                _ => false,
            },
            SetValue::Table(t) => t.remove(m).is_some(),
        }
    }

    fn convert(&mut self) {
        if let SetValue::Intset(v) = self {
            let mut t = OrdTable::with_capacity(v.len() + 1);
            for m in v.iter() {
                t.insert((*Member::int(*m)).into());
            }
            *self = SetValue::Table(t);
        }
    }

    /// A uniformly random member.
    pub fn random(&self, rnd: &mut impl FnMut() -> u64) -> Option<Member<'_>> {
        match self {
            SetValue::Intset(v) if v.is_empty() => None,
            SetValue::Intset(v) => Some(Member::int(v[(rnd() % v.len() as u64) as usize])),
            SetValue::Table(t) => t.random(rnd).map(Member::Bytes),
        }
    }

    /// Removes and returns a uniformly random member.
    pub fn pop_random(&mut self, rnd: &mut impl FnMut() -> u64) -> Option<Vec<u8>> {
        match self {
            SetValue::Intset(v) if v.is_empty() => None,
            SetValue::Intset(v) => {
                let n = v.remove((rnd() % v.len() as u64) as usize);
                Some(Member::int(n).to_vec())
            }
            SetValue::Table(t) => t.pop_random(rnd).map(Vec::from),
        }
    }

    /// SSCAN: calls `f` for the members from `cursor` on; returns the next
    /// cursor. An intset is returned whole with cursor 0, as Redis does.
    pub fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&[u8])) -> u64 {
        match self {
            SetValue::Intset(v) => {
                v.iter().for_each(|&n| f(&Member::int(n)));
                0
            }
            SetValue::Table(t) => t.scan(cursor, count, f),
        }
    }
}
