//! A counter's reset as a fact (issue 24, DECISIONS 248-250): a write on a
//! counter that is not an increment (SET, GETSET, SETEX, APPEND, SETRANGE,
//! MSET of one key; EXPIRE and its family, PERSIST) resets it (docs/MERGE-DESIGN.md
//! section 2): its register `(stamp, base, observed)` takes the value the
//! write left as its base and every part the writing node had as observed,
//! so that increments it had not seen survive it.
//!
//! The reset's whole register travels in the write's record, so a peer
//! joins it into its counter in O(nodes) with no round trip
//! ([`Counter::apply_reset`]): the origin's counter right after the reset
//! is exactly `(stamp, base, observed = parts = what it had)`, a state like
//! any other, and a join of states needs nothing to have arrived before it.
//! The entries, at the key's argument 1 but for the parts':
//!
//! - `RESET 1, stamp`: the write's own stamp (an increment's `RESET` names
//!   an older reset, so this marks a reset fact);
//! - `ADD slot, s` and `COUNTED slot, total`: a part observed, its stamp
//!   and its total (an i64, two's complement), the node's slot in place of
//!   an argument index;
//! - `WORD 3, expiry`: the key's expiry after the write (unix ms, 0: none),
//!   which the key takes where this reset wins (a counter's TTL is its
//!   winning reset's);
//! - `WORD 4, tag` and `WORD 5` (`6`): the base: 1 an integer (an i64), 2
//!   a float (its long double's two words), 0 none that is a number (the
//!   value is then read from a SET's or MSET's argv; another write's asks).
//!
//! No fact is made where a part holds a float or a total past i64, or the
//! base is an integer past i64 (rare: their writes go as states).

use super::fact::{Fact, ADD, COUNTED, KIND, RESET, SHIFT, WORD};
use super::{Amount, Base, Counter, Part};
use crate::keyspace::longdouble::F80;

const EXPIRY: u32 = 3;
const BASE_TAG: u32 = 4;
const BASE_WORD: u32 = 5;

/// A reset's fact as a peer reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct ResetFact {
    /// The base; None where it is no number (the value is the argv's).
    pub base: Option<Base>,
    /// The key's expiry after the write (0: none).
    pub at: u64,
    observed: Box<[Part]>,
}

/// Whether a write stamped `stamp` carries a reset's fact (its own stamp
/// as `RESET`, and a base: a transaction's INCR after its SET names the
/// SET's reset, of the same stamp, but no base).
pub(crate) fn is_reset(stamp: u64, facts: &[Fact]) -> bool {
    facts.contains(&(RESET | (1 << SHIFT), stamp))
        && facts.iter().any(|f| f.0 == WORD | (BASE_TAG << SHIFT))
}

fn word(facts: &[Fact], j: u32) -> Option<u64> {
    let w = facts.iter().find(|f| f.0 == WORD | (j << SHIFT));
    w.map(|f| f.1)
}

impl ResetFact {
    /// The reset a write stamped `stamp` carries (None: not a reset's
    /// fact, or one this build cannot read).
    pub fn of(stamp: u64, facts: &[Fact]) -> Option<ResetFact> {
        if !is_reset(stamp, facts) {
            return None;
        }
        let base = match word(facts, BASE_TAG)? {
            0 => None,
            1 => Some(Base::Int(i128::from(word(facts, BASE_WORD)? as i64))),
            2 => {
                let (m, high) = (word(facts, BASE_WORD)?, word(facts, BASE_WORD + 1)?);
                let e = high as u32 as i32;
                Some(Base::Float(F80::Fin {
                    neg: high >> 32 & 1 == 1,
                    m,
                    e,
                }))
            }
            _ => return None,
        };
        let mut observed: Vec<Part> = Vec::new();
        for f in facts.iter().filter(|f| f.0 & KIND == ADD) {
            let slot = u64::from(f.0 >> SHIFT);
            let total = facts
                .iter()
                .find(|t| t.0 == COUNTED | ((slot as u32) << SHIFT))?;
            observed.push(Part::new(slot, i128::from(total.1 as i64), F80::ZERO, f.1));
        }
        observed.sort_by_key(|p| p.slot);
        observed.dedup_by_key(|p| p.slot);
        Some(ResetFact {
            base,
            at: word(facts, EXPIRY)?,
            observed: observed.into_boxed_slice(),
        })
    }

    /// The origin's counter right after the reset (its parts: those it
    /// observed), with `base` where the fact's is no number.
    pub fn counter(&self, stamp: u64, base: Base) -> Counter {
        Counter {
            version: stamp,
            reset: stamp,
            base: super::Stored::of(self.base.unwrap_or(base)),
            observed: self.observed.clone(),
            parts: self.observed.clone(),
        }
    }
}

impl Counter {
    /// Origin, after a write stamped `stamp` that is not an increment left
    /// the key holding `base` and expiring at `at`: the counter becomes
    /// the reset it is (as [`Counter::current`] reads it lazily, so nothing
    /// a reader sees changes), and where this is the stamp's first write of
    /// the key its fact goes to `facts` (the module comment). Returns
    /// whether it went.
    pub fn note_reset(
        &mut self,
        stamp: u64,
        (base, at): (Base, u64),
        facts: &mut Vec<Fact>,
    ) -> bool {
        let first = self.version < stamp;
        let now = Counter::current(Some(self), stamp, base);
        *self = now;
        if !first || self.reset != stamp || !super::fact::RESET_FACTS {
            return false;
        }
        let start = facts.len();
        facts.push((RESET | (1 << SHIFT), stamp));
        facts.push((WORD | (EXPIRY << SHIFT), at));
        let base_words: &[(u32, u64)] = match base {
            Base::Int(n) => match i64::try_from(n) {
                Ok(n) => &[(1, n as u64)],
                Err(_) => &[(9, 0)],
            },
            Base::Float(F80::Fin { neg, m, e }) => {
                &[(2, m), (2, u64::from(e as u32) | (u64::from(neg) << 32))]
            }
            Base::Other => &[(0, 0)],
            _ => &[(9, 0)],
        };
        let tag = base_words[0].0;
        facts.push((WORD | (BASE_TAG << SHIFT), u64::from(tag)));
        if tag != 0 {
            for (j, &(_, w)) in base_words.iter().enumerate() {
                facts.push((WORD | ((BASE_WORD + j as u32) << SHIFT), w));
            }
        }
        let mut fits = tag != 9;
        for p in self.observed.iter() {
            match p.amount {
                Amount::Int(t) if p.stamp <= stamp => facts.extend([
                    (ADD | ((p.slot as u32) << SHIFT), p.stamp),
                    (COUNTED | ((p.slot as u32) << SHIFT), t as u64),
                ]),
                _ => fits = false,
            }
        }
        if !fits {
            facts.truncate(start);
        }
        fits
    }

    /// Peer: a reset's fact stamped `stamp` joined into this counter (the
    /// key's here, brought up to its version): the join of states, so it
    /// needs nothing else to have arrived. Returns the joined counter.
    pub fn apply_reset(&self, stamp: u64, fact: &ResetFact, base: Base) -> Counter {
        let mut joined = self.join(&fact.counter(stamp, base));
        joined.version = self.version.max(stamp);
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::merge::Incr;

    fn st(ms: u64, node: u64) -> u64 {
        make_stamp(ms, 0, node)
    }

    /// k=10; A: SET k 0 (its fact), B: INCR concurrently -> 1 on both,
    /// whichever applies first; applied twice, nothing more.
    #[test]
    fn a_reset_fact_keeps_the_increments_it_had_not_seen() {
        let mut c0 = Counter::current(None, st(1, 1), Base::Absent);
        c0.add(1, Incr::Int(10), st(1, 1));
        let (mut a, mut b) = (c0.clone(), c0.clone());
        let mut facts = Vec::new();
        assert!(a.note_reset(st(20, 1), (Base::Int(0), 0), &mut facts));
        b.add(2, Incr::Int(1), st(21, 2));
        let fact = ResetFact::of(st(20, 1), &facts).expect("a reset fact");
        assert_eq!(fact.base, Some(Base::Int(0)));
        let b2 = b.apply_reset(st(20, 1), &fact, Base::Other);
        assert_eq!(b2.int_value(), Some(1));
        assert_eq!(b2.apply_reset(st(20, 1), &fact, Base::Other), b2);
        let a2 = a.join(&b);
        assert_eq!(a2.int_value(), Some(1));
        assert!(a2.same_content(&b2));
        // A second write of the stamp (a transaction's) has no fact.
        let mut again = Vec::new();
        assert!(!a.note_reset(st(20, 1), (Base::Int(5), 0), &mut again));
        assert!(again.is_empty());
    }

    /// A float base, a base that is no number, and the expiry, read back.
    #[test]
    fn a_reset_fact_round_trips_its_base_and_expiry() {
        let f = F80::parse(b"2.5").unwrap();
        for base in [Base::Float(f), Base::Other, Base::Int(-7)] {
            let mut c = Counter::current(None, st(1, 1), Base::Int(3));
            c.add(3, Incr::Int(4), st(2, 3));
            let mut facts = Vec::new();
            assert!(c.note_reset(st(9, 1), (base, 1234), &mut facts));
            let r = ResetFact::of(st(9, 1), &facts).unwrap();
            let want = (base != Base::Other).then_some(base);
            assert_eq!((r.base, r.at), (want, 1234));
            assert_eq!(r.counter(st(9, 1), base), c);
        }
    }
}
