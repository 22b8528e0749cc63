//! Merge metadata (issue 13, docs/MERGE.md): what a key keeps beside its
//! value so that concurrent writes on different nodes merge instead of the
//! last writer winning. Built so far: counters.
//!
//! A **counter** is a string key that INCR, INCRBY, DECR or DECRBY wrote
//! under active replication. Its [`Counter`] keeps each node's contribution
//! apart: a *part* per node slot, the running total of that node's
//! increments, stamped by its last one (only that node writes its part, and
//! its stamps order its own versions, so a part joins by its stamp: a
//! PN-counter whose P and N are folded into one total, which also lets a
//! part go down). The value read is the *base* set by the last reset (a
//! SET, a DEL, any write that is not an increment) plus every part's growth
//! since that reset observed it:
//!
//! ```text
//!   value = base + sum(parts) - sum(observed)
//! ```
//!
//! so an increment made concurrently with a SET elsewhere survives it, one
//! the SET had seen does not (docs/MERGE.md, the rules table). Joining two
//! counters ([`Counter::join`]) is commutative, associative and idempotent:
//! the later reset wins (equal resets join their observed parts), parts join
//! by stamp. A node applies a peer's key state by joining it with its own
//! (`replication/active/link.rs`).
//!
//! Resets are recorded lazily: a counter describes the key at one version
//! ([`Counter::version`]); a write that is not an increment moves the key's
//! version on and leaves the counter as it was, and whoever reads the
//! counter next sees the versions differ and takes the write for a reset
//! that observed every part this node had ([`Counter::current`]). So the
//! commands that do not merge need no hook at all. Every change of the parts
//! goes through [`Counter::current`] first, which keeps that exact.
//!
//! The counters live in a side map per shard (`Shard::merge`), allocated only
//! once a key becomes a counter under active replication; a deleted
//! counter's entry stays with its tombstone (its parts are what the DEL
//! observed) and both are collected together.

mod codec;
pub mod context;
pub mod elements;
pub mod fact;
pub mod lists;
pub mod ttl;

use codec::{put_varint, Cursor};
pub use elements::Elements;
pub use lists::Lists;

use crate::keyspace::{StrValue, Value};

/// A key's merge state: how it merges.
#[derive(Clone, Debug, PartialEq)]
pub enum Meta {
    Counter(Counter),
    Elements(Elements),
    List(Lists),
}

/// Whether a value merges by its parts (members, fields, elements) rather
/// than as a counter or a whole: sets, hashes, sorted sets and lists.
pub fn merges_by_parts(value: &Value) -> bool {
    elements::is_collection(value) || matches!(value, Value::List(_))
}

impl Meta {
    /// The key's version it describes.
    pub fn version(&self) -> u64 {
        match self {
            Meta::Counter(c) => c.version,
            Meta::Elements(e) => e.version,
            Meta::List(l) => l.version,
        }
    }

    /// The newest stamp of each node whose writes it holds (a counter's
    /// parts and reset, a collection's causal context): a key written by a
    /// node whose version another node's write made since, as after merge
    /// facts (fact.rs), still holds that node's writes.
    pub fn stamps(&self) -> Vec<u64> {
        match self {
            Meta::Counter(c) => c.parts.iter().map(|p| p.stamp).chain([c.reset]).collect(),
            Meta::Elements(e) => e.cc.stamps().collect(),
            Meta::List(l) => l.cc.stamps().collect(),
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Meta::Counter(c) => c.encode(out),
            Meta::Elements(e) => e.encode(out),
            Meta::List(l) => l.encode(out),
        }
    }

    pub fn decode(b: &[u8]) -> Result<Meta, String> {
        match b.first() {
            Some(b'C') => Counter::decode(b).map(Meta::Counter),
            Some(b'E') => Elements::decode(b).map(Meta::Elements),
            Some(b'L') => Lists::decode(b).map(Meta::List),
            _ => Err("unknown merge metadata".into()),
        }
    }

    /// As of the key's `version` and `value` (see each kind's `current`),
    /// of the kind the value has: elements for a set, hash or sorted set,
    /// a list's for a list, else a counter (an absent key keeps the kind
    /// it had).
    pub fn current(meta: Option<&Meta>, version: u64, value: Option<&Value>) -> Meta {
        let list = match value {
            Some(v) => matches!(v, Value::List(_)),
            None => matches!(meta, Some(Meta::List(_))),
        };
        if list {
            let l = match meta {
                Some(Meta::List(l)) => Some(l),
                _ => None,
            };
            return Meta::List(Lists::current(l, version, value));
        }
        let as_elements = match value {
            Some(v) => elements::is_collection(v),
            None => matches!(meta, Some(Meta::Elements(_))),
        };
        if as_elements {
            let e = match meta {
                Some(Meta::Elements(e)) => Some(e),
                _ => None,
            };
            Meta::Elements(Elements::current(e, version, value))
        } else {
            let c = match meta {
                Some(Meta::Counter(c)) => Some(c),
                _ => None,
            };
            Meta::Counter(Counter::current(c, version, Base::of(value)))
        }
    }

    /// A collection's or list's TTL dots brought up to the key at
    /// `version`, present or not, expiring at `at` (`ttl.rs`); a counter's
    /// TTL follows its resets (docs/MERGE.md).
    pub fn refresh_ttl(&mut self, version: u64, present: bool, at: u64) {
        match self {
            Meta::Counter(_) => {}
            Meta::Elements(e) => e.ttl.refresh(version, present, at),
            Meta::List(l) => l.ttl.refresh(version, present, at),
        }
    }

    /// Whether its TTL dots disagree with a key present or not, expiring
    /// at `at` (never for a counter).
    pub fn ttl_differs(&self, present: bool, at: u64) -> bool {
        let ttl = match self {
            Meta::Counter(_) => return false,
            Meta::Elements(e) => &e.ttl,
            Meta::List(l) => &l.ttl,
        };
        (!present && !ttl.is_empty()) || (present && ttl.at() != at)
    }

    pub fn describe(&self) -> Vec<String> {
        match self {
            Meta::Counter(c) => c.describe(),
            Meta::Elements(e) => e.describe(),
            Meta::List(l) => l.describe(),
        }
    }
}

/// A node's contribution to a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// The node's slot (the low bits of its stamps).
    pub slot: u64,
    /// The sum of its increments (decrements subtract).
    pub total: i128,
    /// The stamp of its last increment.
    pub stamp: u64,
}

/// What the last reset set the key to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// Deleted (or never written): increments count from 0.
    Absent,
    Int(i128),
    /// Not an integer (a string, a list...): increments not seen by the
    /// reset are not added to it; the key keeps the value it was reset to.
    Other,
}

impl Base {
    /// The base a key's current value gives when it is read as a reset.
    pub fn of(value: Option<&Value>) -> Base {
        match value {
            None => Base::Absent,
            Some(Value::Str(s)) => s.as_int().map(i128::from).map_or_else(
                || s.with_bytes(parse_i128).map_or(Base::Other, Base::Int),
                Base::Int,
            ),
            Some(_) => Base::Other,
        }
    }
}

/// The strict decimal form Redis's string2ll accepts, widened to i128 (a
/// merged counter can leave the i64 range, section "Overflow" of MERGE.md).
fn parse_i128(b: &[u8]) -> Option<i128> {
    let s = std::str::from_utf8(b).ok()?;
    let n: i128 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

/// What a counter reads as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merged {
    Absent,
    Int(i128),
    /// The value the winning reset left (not an integer).
    Other,
}

impl Merged {
    /// DEBUG MERGEINFO's spelling: `=n`, `=absent`, `=other`.
    pub fn describe(self) -> String {
        match self {
            Merged::Absent => "=absent".into(),
            Merged::Int(n) => format!("={n}"),
            Merged::Other => "=other".into(),
        }
    }
}

/// A counter's merge state (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// The key's version this describes (its data's, or its tombstone's).
    pub version: u64,
    /// The stamp of the write that set `base`.
    pub reset: u64,
    pub base: Base,
    /// The parts as the reset saw them, by slot.
    pub observed: Vec<Part>,
    /// Every node's part, by slot.
    pub parts: Vec<Part>,
}

impl Counter {
    /// The counter of a key at `version` whose value gives `base`: `meta`
    /// if it describes that version, else a reset at `version` that
    /// observed every part of `meta` (see the module comment).
    pub fn current(meta: Option<&Counter>, version: u64, base: Base) -> Counter {
        match meta {
            Some(m) if m.version == version && m.agrees_with(base) => m.clone(),
            Some(m) => Counter {
                version,
                reset: version,
                base,
                observed: m.parts.clone(),
                parts: m.parts.clone(),
            },
            None => Counter {
                version,
                reset: version,
                base,
                observed: Vec::new(),
                parts: Vec::new(),
            },
        }
    }

    /// Whether the key's value is still the one this counter computes (a
    /// write inside the same MULTI/EXEC shares the increment's stamp).
    fn agrees_with(&self, base: Base) -> bool {
        match (self.value(), base) {
            (Merged::Int(n), Base::Int(v)) => n == v,
            (Merged::Absent, Base::Absent) | (Merged::Other, Base::Other) => true,
            _ => false,
        }
    }

    /// Adds `by` to `slot`'s part, as a write stamped `stamp`.
    pub fn add(&mut self, slot: u64, by: i128, stamp: u64) {
        match self.parts.binary_search_by_key(&slot, |p| p.slot) {
            Ok(i) => {
                self.parts[i].total += by;
                self.parts[i].stamp = stamp;
            }
            Err(i) => self.parts.insert(
                i,
                Part {
                    slot,
                    total: by,
                    stamp,
                },
            ),
        }
        self.version = stamp;
    }

    /// The sum of the parts' growth since the reset observed them, and
    /// whether any part grew at all.
    fn growth(&self) -> (i128, bool) {
        let mut sum = 0i128;
        let mut grew = false;
        for p in &self.parts {
            let seen = self.observed.iter().find(|o| o.slot == p.slot);
            match seen {
                Some(o) if o.stamp >= p.stamp => {}
                _ => grew = true,
            }
            sum += p.total - seen.map_or(0, |o| o.total);
        }
        (sum, grew)
    }

    /// The value the key has.
    pub fn value(&self) -> Merged {
        let (growth, grew) = self.growth();
        match self.base {
            Base::Other => Merged::Other,
            Base::Int(b) => Merged::Int(b + growth),
            Base::Absent if grew => Merged::Int(growth),
            Base::Absent => Merged::Absent,
        }
    }

    /// The join of two counters of one key (commutative, associative,
    /// idempotent): the later reset with its base, or for one reset seen
    /// by both the union of what each saw of it; parts by stamp.
    pub fn join(&self, other: &Counter) -> Counter {
        let (reset, base, observed) = if self.reset > other.reset {
            (self.reset, self.base, self.observed.clone())
        } else if other.reset > self.reset {
            (other.reset, other.base, other.observed.clone())
        } else {
            let base = if self.base == other.base {
                self.base
            } else {
                // One write read two ways cannot happen; a deterministic
                // pick all the same.
                self.base.max_by_rank(other.base)
            };
            (
                self.reset,
                base,
                join_parts(&self.observed, &other.observed),
            )
        };
        Counter {
            version: self.version.max(other.version),
            reset,
            base,
            observed,
            parts: join_parts(&self.parts, &other.parts),
        }
    }

    /// Whether `self` and `other` are one state but for the version they
    /// describe (the reset, its base, and the parts seen and known).
    pub fn same_content(&self, other: &Counter) -> bool {
        (self.reset, self.base, &self.observed, &self.parts)
            == (other.reset, other.base, &other.observed, &other.parts)
    }

    /// The value as a key's string, when it is an integer.
    pub fn int_value(&self) -> Option<i128> {
        match self.value() {
            Merged::Int(n) => Some(n),
            _ => None,
        }
    }
}

impl Base {
    fn rank(self) -> (u8, i128) {
        match self {
            Base::Absent => (0, 0),
            Base::Int(n) => (1, n),
            Base::Other => (2, 0),
        }
    }

    fn max_by_rank(self, other: Base) -> Base {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }
}

/// Parts by slot, each slot's newest (by stamp; equal stamps hold equal
/// totals, the larger is kept all the same so that the join is total).
fn join_parts(a: &[Part], b: &[Part]) -> Vec<Part> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.slot == y.slot => {
                i += 1;
                j += 1;
                if (y.stamp, y.total) > (x.stamp, x.total) {
                    *y
                } else {
                    *x
                }
            }
            (Some(x), Some(y)) if x.slot < y.slot => {
                i += 1;
                *x
            }
            (Some(x), None) => {
                i += 1;
                *x
            }
            (_, Some(y)) => {
                j += 1;
                *y
            }
            (None, None) => unreachable!(),
        };
        out.push(next);
    }
    out
}

/// A merged integer as the string value a key holds: an `Int` when it fits
/// in 64 bits, else its digits (INCR then answers "not an integer", as
/// Redis does for a string out of range).
pub fn int_str(n: i128) -> StrValue {
    match i64::try_from(n) {
        Ok(v) => StrValue::Int(v),
        Err(_) => StrValue::from_bytes(n.to_string().as_bytes()),
    }
}

// ---- Encoding (key states on the stream, RDB aux) -------------------------

fn put_parts(out: &mut Vec<u8>, parts: &[Part]) {
    put_varint(out, parts.len() as u64);
    for p in parts {
        put_varint(out, p.slot);
        out.extend_from_slice(&p.total.to_le_bytes());
        put_varint(out, p.stamp);
    }
}

fn parts_of(c: &mut Cursor) -> Result<Vec<Part>, String> {
    let n = c.count()?;
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let slot = c.varint()?;
        let total = c.i128_le()?;
        let stamp = c.varint()?;
        parts.push(Part { slot, total, stamp });
    }
    if parts.windows(2).any(|w| w[0].slot >= w[1].slot) {
        return Err("merge metadata parts out of order".into());
    }
    Ok(parts)
}

impl Counter {
    /// `kind 'C' | version reset base observed parts`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(b'C');
        put_varint(out, self.version);
        put_varint(out, self.reset);
        match self.base {
            Base::Absent => out.push(0),
            Base::Int(n) => {
                out.push(1);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Base::Other => out.push(2),
        }
        put_parts(out, &self.observed);
        put_parts(out, &self.parts);
    }

    pub fn decode(b: &[u8]) -> Result<Counter, String> {
        let mut c = Cursor(b);
        if c.byte()? != b'C' {
            return Err("unknown merge metadata".into());
        }
        let version = c.varint()?;
        let reset = c.varint()?;
        let base = match c.byte()? {
            0 => Base::Absent,
            1 => Base::Int(c.i128_le()?),
            2 => Base::Other,
            _ => return Err("bad base in merge metadata".into()),
        };
        let observed = parts_of(&mut c)?;
        let parts = parts_of(&mut c)?;
        c.end()?;
        Ok(Counter {
            version,
            reset,
            base,
            observed,
            parts,
        })
    }

    /// DEBUG MERGEINFO's lines.
    pub fn describe(&self) -> Vec<String> {
        let node = crate::keyspace::hlc::stamp_node;
        let parts = |ps: &[Part]| {
            ps.iter()
                .map(|p| format!("{}:{}@{}", p.slot, p.total, p.stamp))
                .collect::<Vec<_>>()
                .join(",")
        };
        let base = match self.base {
            Base::Absent => "absent".to_string(),
            Base::Int(n) => n.to_string(),
            Base::Other => "other".to_string(),
        };
        vec![
            "type:counter".to_string(),
            format!("version:{}", self.version),
            format!("reset:{} reset_slot:{}", self.reset, node(self.reset)),
            format!("base:{base}"),
            format!("observed:{}", parts(&self.observed)),
            format!("parts:{}", parts(&self.parts)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(version: u64, base: Base) -> Counter {
        Counter::current(None, version, base)
    }

    /// The seed's case: 1, then one INCR on a node and three on another.
    #[test]
    fn concurrent_increments_add_up() {
        let mut a = at(10, Base::Int(1));
        let mut b = a.clone();
        a.add(1, 1, 21);
        for s in [22, 32, 42] {
            b.add(2, 1, s);
        }
        let (ab, ba) = (a.join(&b), b.join(&a));
        assert_eq!(ab, ba);
        assert_eq!(ab.value(), Merged::Int(5));
        assert_eq!(ab.join(&a), ab, "idempotent");
    }

    /// k=10; A: SET k 0 (a reset that saw nothing of B), B: INCR -> 1.
    #[test]
    fn an_increment_concurrent_with_a_reset_survives_it() {
        let start = at(10, Base::Int(10));
        let a = Counter::current(Some(&start), 30, Base::Int(0));
        let mut b = start.clone();
        b.add(2, 1, 21);
        assert_eq!(a.join(&b).value(), Merged::Int(1));
        assert_eq!(b.join(&a).value(), Merged::Int(1));
        // One the reset had seen does not.
        let seen = Counter::current(Some(&b), 40, Base::Int(0));
        assert_eq!(seen.join(&b).value(), Merged::Int(0));
    }

    /// A DEL that saw every increment keeps the key deleted; a concurrent
    /// increment brings it back with only its own growth.
    #[test]
    fn a_delete_removes_what_it_saw() {
        let mut c = at(10, Base::Absent);
        c.add(1, 5, 11);
        let del = Counter::current(Some(&c), 20, Base::Absent);
        assert_eq!(del.value(), Merged::Absent);
        let mut other = c.clone();
        other.add(2, 2, 15);
        assert_eq!(del.join(&other).value(), Merged::Int(2));
    }

    #[test]
    fn encoding_round_trips() {
        let mut c = at(10, Base::Int(-3));
        c.add(7, i128::from(i64::MAX) * 4, 11);
        c = Counter::current(Some(&c), 12, Base::Other);
        c.add(3, -2, 13);
        let mut out = Vec::new();
        c.encode(&mut out);
        assert_eq!(Counter::decode(&out).unwrap(), c);
        assert!(Counter::decode(&out[..out.len() - 1]).is_err());
    }

    #[test]
    fn base_reads_strict_integers_only() {
        let s = |b: &[u8]| Value::Str(StrValue::from_bytes(b));
        assert_eq!(Base::of(Some(&s(b"42"))), Base::Int(42));
        assert_eq!(Base::of(Some(&s(b"042"))), Base::Other);
        assert_eq!(
            Base::of(Some(&s(b"99999999999999999999"))),
            Base::Int(99999999999999999999)
        );
        assert_eq!(Base::of(None), Base::Absent);
    }
}
