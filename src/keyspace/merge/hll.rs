//! A HyperLogLog's merge state (issue 25 item 5, docs/MERGE-DESIGN.md, DECISIONS
//! 104): what a string key holding a sketch (`keyspace/hll.rs`) keeps beside
//! its value so that PFADDs made on different nodes join by register
//! maximum instead of the last writer winning.
//!
//! A sketch's registers only grow under PFADD and PFMERGE, and the maximum
//! of two register arrays is a join (commutative, associative, idempotent),
//! so two sketches that grew from one starting point join by taking, per
//! register, the larger. What cannot join that way is a write that *replaced*
//! the sketch (SET, DEL, APPEND, SETRANGE, RESTORE, expiry, a flush...): its
//! registers may be lower. Such a write is a **reset**; [`Hll::reset`] is
//! the stamp of the last one the key's registers count from (a sketch made on
//! an absent key counts from the reset that left it absent: a DEL's, or none
//! for a key never written, so that two nodes making one key concurrently
//! join their registers). Two states join so:
//!
//! - the same reset: the registers' maximum (the value as PFMERGE of both
//!   into an empty key writes it, so every node writes the same bytes:
//!   [`join_values`]), the TTL by TTL dots (`ttl.rs`), as a collection's;
//! - different resets: the later reset's side, whole (value and TTL): a
//!   DEL or SET concurrent with a PFADD wins over it, as Redis Enterprise's
//!   Active-Active HyperLogLog does ("DEL wins"), and a PFADD that saw the
//!   reset counts from it, so it survives.
//!
//! Resets are found lazily, as a counter's are (`mod.rs`): PFADD and PFMERGE
//! tell the state they grew the sketch ([`Hll::grew`]); any other write
//! moves the key's version without telling, and whoever reads the state next
//! compares the registers with the [`Hll::digest`] it recorded: the same
//! registers (EXPIRE, PERSIST, PFDEBUG TODENSE, a SET of the same sketch, a
//! cached estimate written by a node without active replication) are no
//! reset, other registers or no sketch are. (PFCOUNT caches nothing under
//! active replication: `commands/hll.rs`.)

use super::codec::{put_varint, Cursor};
use super::context::{fingerprint, Context};
use super::ttl::Ttl;
use crate::keyspace::hll as sketch;
use crate::keyspace::Value;

/// A HyperLogLog key's merge state (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hll {
    /// The key's version this describes.
    pub version: u64,
    /// The stamp of the write the registers count from.
    pub reset: u64,
    /// The registers' fingerprint at `version` (0: no sketch).
    pub digest: u64,
    /// The writes seen, per node slot (for the TTL dots).
    pub cc: Context,
    pub ttl: Ttl,
}

/// The sketch bytes of a value, if it holds a valid-looking one.
pub(crate) fn sketch_of(value: Option<&Value>) -> Option<Vec<u8>> {
    match value {
        Some(Value::Str(s)) => s.with_bytes(|b| sketch::looks_valid(b).then(|| b.to_vec())),
        _ => None,
    }
}

/// Whether a value is a string holding a sketch.
pub(crate) fn is_sketch(value: &Value) -> bool {
    matches!(value, Value::Str(s) if s.with_bytes(sketch::looks_valid))
}

/// The registers of a sketch (None: damaged).
fn registers(b: &[u8]) -> Option<Box<[u8; sketch::REGISTERS]>> {
    let mut regs = Box::new([0u8; sketch::REGISTERS]);
    sketch::merge_into(&mut regs, b).ok()?;
    Some(regs)
}

/// The registers' fingerprint of a value (0: no sketch, or a damaged one).
pub(crate) fn digest(value: Option<&Value>) -> u64 {
    sketch_of(value)
        .and_then(|b| registers(&b))
        .map_or(0, |r| fingerprint(&r[..]) | 1)
}

impl Hll {
    /// The state of a key at `version` holding `value`: `meta` if it
    /// describes that version; else, where the registers are still those
    /// `meta` recorded, the same reset (the write changed no register);
    /// else a reset at `version`.
    pub fn current(meta: Option<&Hll>, version: u64, value: Option<&Value>) -> Hll {
        match meta {
            Some(m) if m.version == version => m.clone(),
            Some(m) => {
                let d = digest(value);
                let mut cc = m.cc.clone();
                cc.see(version);
                let reset = if d != 0 && d == m.digest {
                    m.reset
                } else {
                    version
                };
                Hll {
                    version,
                    reset,
                    digest: d,
                    cc,
                    ttl: m.ttl.clone(),
                }
            }
            None => {
                let mut cc = Context::default();
                cc.see(version);
                Hll {
                    version,
                    reset: version,
                    digest: digest(value),
                    cc,
                    ttl: Ttl::default(),
                }
            }
        }
    }

    /// After PFADD or PFMERGE stamped `stamp` grew the sketch now holding
    /// `value`. A sketch the write made (the key was absent) counts from
    /// the reset that left it absent (its DEL, or nothing: two nodes that
    /// make one key concurrently join their registers), so the reset stays.
    pub fn grew(&mut self, stamp: u64, value: Option<&Value>) {
        self.version = stamp;
        self.digest = digest(value);
        self.cc.see(stamp);
    }

    /// The join of `self` (the key here holds `ours`) and `theirs` (the
    /// peer's key holds `their_value`): the joined state and the value it
    /// gives (None: absent). `max_bytes`: `hll-sparse-max-bytes`.
    pub fn join(
        &self,
        ours: Option<&[u8]>,
        theirs: &Hll,
        their_value: Option<&[u8]>,
        max_bytes: usize,
    ) -> (Hll, Option<Vec<u8>>) {
        let mut cc = self.cc.clone();
        cc.join(&theirs.cc);
        let version = self.version.max(theirs.version);
        if self.reset != theirs.reset {
            let (win, value) = if self.reset > theirs.reset {
                (self, ours)
            } else {
                (theirs, their_value)
            };
            let joined = Hll {
                version,
                cc,
                ..win.clone()
            };
            return (joined, value.map(<[u8]>::to_vec));
        }
        let value = join_values(ours, their_value, max_bytes);
        let joined = Hll {
            version,
            reset: self.reset,
            digest: digest_bytes(value.as_deref()),
            ttl: self.ttl.join(&self.cc, &theirs.ttl, &theirs.cc),
            cc,
        };
        (joined, value)
    }

    /// Whether `self` and `other` are one state but for the version.
    pub fn same_content(&self, other: &Hll) -> bool {
        (self.reset, self.digest, &self.cc, &self.ttl)
            == (other.reset, other.digest, &other.cc, &other.ttl)
    }

    /// `kind 'H' | version reset digest context ttl`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(b'H');
        put_varint(out, self.version);
        put_varint(out, self.reset);
        out.extend_from_slice(&self.digest.to_le_bytes());
        self.cc.encode(out);
        self.ttl.encode(out);
    }

    pub fn decode(b: &[u8]) -> Result<Hll, String> {
        let mut c = Cursor(b);
        if c.byte()? != b'H' {
            return Err("unknown merge metadata".into());
        }
        let version = c.varint()?;
        let reset = c.varint()?;
        let mut d = [0u8; 8];
        for x in &mut d {
            *x = c.byte()?;
        }
        let cc = Context::decode(&mut c)?;
        let ttl = Ttl::decode(&mut c)?;
        c.end()?;
        Ok(Hll {
            version,
            reset,
            digest: u64::from_le_bytes(d),
            cc,
            ttl,
        })
    }

    /// DEBUG MERGEINFO's lines.
    pub fn describe(&self) -> Vec<String> {
        vec![
            "type:hyperloglog".to_string(),
            format!("version:{}", self.version),
            format!(
                "reset:{} reset_slot:{}",
                self.reset,
                crate::keyspace::hlc::stamp_node(self.reset)
            ),
            format!("digest:{:016x}", self.digest),
            self.cc.describe(),
            self.ttl.describe(),
        ]
    }
}

fn digest_bytes(b: Option<&[u8]>) -> u64 {
    b.and_then(|b| sketch::looks_valid(b).then_some(b))
        .and_then(registers)
        .map_or(0, |r| fingerprint(&r[..]) | 1)
}

/// Two sketches of one reset joined: equal bytes stay; else the registers'
/// maximum written as PFMERGE of both into an absent key writes it (a
/// sparse sketch, dense where either side is dense or the sparse one would
/// pass `max_bytes`; the cached estimate stale), so the result is the same
/// bytes on every node whichever side is whose. A side that is absent or
/// no sketch (one reset cannot give two such values) counts as empty.
pub(crate) fn join_values(a: Option<&[u8]>, b: Option<&[u8]>, max_bytes: usize) -> Option<Vec<u8>> {
    if a == b {
        return a.map(<[u8]>::to_vec);
    }
    fn valid(v: Option<&[u8]>) -> Option<&[u8]> {
        v.filter(|b| sketch::looks_valid(b))
    }
    if valid(a).is_none() && valid(b).is_none() {
        // Neither is a sketch (one reset cannot give two such values): the
        // larger, a deterministic pick all the same.
        return a.max(b).map(<[u8]>::to_vec);
    }
    let (a, b) = (valid(a), valid(b));
    let mut max = Box::new([0u8; sketch::REGISTERS]);
    let mut dense = false;
    for v in [a, b].into_iter().flatten() {
        dense |= !sketch::is_sparse(v);
        // A damaged side adds what it can (PFMERGE's way).
        let _ = sketch::merge_into(&mut max, v);
    }
    let mut out = sketch::new_sketch();
    if dense {
        let _ = sketch::to_dense(&mut out);
    }
    for (i, &m) in max.iter().enumerate() {
        if m != 0 {
            let _ = sketch::set_register(&mut out, i, m, max_bytes);
        }
    }
    sketch::invalidate(&mut out);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::StrValue;

    const MAX: usize = 3000;

    fn st(ms: u64, node: u64) -> u64 {
        make_stamp(ms, 0, node)
    }

    fn with(elems: &[&str]) -> Vec<u8> {
        let mut s = sketch::new_sketch();
        for e in elems {
            sketch::add(&mut s, e.as_bytes(), MAX).unwrap();
        }
        sketch::invalidate(&mut s);
        s
    }

    fn val(b: &[u8]) -> Value {
        Value::Str(StrValue::raw(b.to_vec()))
    }

    fn count(b: &[u8]) -> u64 {
        sketch::estimate(&sketch::histogram(b).unwrap())
    }

    /// A PFADD on each side of a partition: both count, either way round,
    /// and the bytes are the same.
    #[test]
    fn concurrent_adds_join_by_register_maximum() {
        let base = with(&["a"]);
        let start = Hll::current(None, st(10, 1), Some(&val(&base)));
        let (mut a, mut b) = (start.clone(), start.clone());
        let va = with(&["a", "x"]);
        a.grew(st(20, 1), Some(&val(&va)));
        let vb = with(&["a", "y", "z"]);
        b.grew(st(21, 2), Some(&val(&vb)));
        let (ab, v1) = a.join(Some(&va), &b, Some(&vb), MAX);
        let (ba, v2) = b.join(Some(&vb), &a, Some(&va), MAX);
        assert_eq!(v1, v2);
        assert!(ab.same_content(&ba));
        assert_eq!(count(&v1.clone().unwrap()), 4);
        // Idempotent.
        let (again, v3) = ab.join(v1.as_deref(), &ba, v2.as_deref(), MAX);
        assert!(again.same_content(&ab));
        assert_eq!(v3, v1);
    }

    /// A DEL concurrent with a PFADD wins; a PFADD after the DEL (a new
    /// sketch, counting from the DEL) wins over the older one.
    #[test]
    fn a_reset_wins_over_concurrent_adds() {
        let base = with(&["a"]);
        let start = Hll::current(None, st(10, 1), Some(&val(&base)));
        let del = Hll::current(Some(&start), st(30, 1), None);
        assert_eq!(del.reset, st(30, 1));
        let mut b = start.clone();
        let vb = with(&["a", "y"]);
        b.grew(st(40, 2), Some(&val(&vb)));
        let (j, v) = del.join(None, &b, Some(&vb), MAX);
        assert_eq!((j.reset, v), (st(30, 1), None));
        let mut fresh = del.clone();
        let vf = with(&["q"]);
        fresh.grew(st(50, 1), Some(&val(&vf)));
        let (j, v) = b.join(Some(&vb), &fresh, Some(&vf), MAX);
        assert_eq!((j.reset, v), (st(30, 1), Some(vf)));
    }

    /// A write that changed no register (EXPIRE, PFCOUNT's cache) is no
    /// reset.
    #[test]
    fn same_registers_are_no_reset() {
        let v = with(&["a", "b"]);
        let start = Hll::current(None, st(10, 1), Some(&val(&v)));
        let mut cached = v.clone();
        sketch::set_cache(&mut cached, 2);
        let later = Hll::current(Some(&start), st(20, 1), Some(&val(&cached)));
        assert_eq!(later.reset, start.reset);
        let other = Hll::current(Some(&start), st(30, 1), Some(&val(&with(&["c"]))));
        assert_eq!(other.reset, st(30, 1));
    }

    #[test]
    fn encoding_round_trips() {
        let v = with(&["a"]);
        let mut h = Hll::current(None, st(10, 1), Some(&val(&v)));
        h.ttl.refresh(st(10, 1), true, 12345);
        h.cc.see(st(11, 3));
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(Hll::decode(&out).unwrap(), h);
        assert!(Hll::decode(&out[..out.len() - 1]).is_err());
    }
}
