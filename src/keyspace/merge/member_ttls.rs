//! The TTLs of a merging collection's members (member expiry under active
//! replication; docs/MEMBER-EXPIRY.md, DECISIONS 305-309): each member's
//! TTL is a register of TTL dots of its own, merged as the key's TTL is
//! (`ttl.rs`). Concurrent TTL writes on one member all count and the
//! member's TTL resolves from them: a write that removed it (HPERSIST,
//! KeyDB's `PERSIST key member`, an HSET of the field, which clears its
//! TTL as Redis 7.4 does) wins, else the latest deadline; a TTL write
//! that saw another replaces it. A write that did not touch the member's
//! TTL makes no dot.
//!
//! A member's register lives while the member does: a member removed
//! (SREM, HDEL, ZREM, a pop, its own expiry) loses its dots, as a deleted
//! key loses its TTL dots, so a member made again starts with none, and a
//! TTL write concurrent with a remove of its member goes with the member
//! (the remove saw the member's add; the TTL write added no member dot),
//! as an EXPIRE concurrent with a DEL does. A member's expiry is its
//! node's remove of the member (SREM / HDEL / ZREM at a stamp of its own):
//! an observed remove, so an add of the member on a peer concurrent with
//! it survives it on both nodes.
//!
//! The TTLs themselves stay in the shard's side map (`member_ttl.rs`);
//! the registers are found lazily from it, as the key's TTL dots are from
//! the key's expiry: whoever brings the key's state up to its version
//! compares the side map with the registers, and a member whose deadline
//! differs took it from the key's last write ([`MemberTtlDots::refresh`]).
//! After a join, the side map takes what the joined registers resolve to
//! (replication/active/merging.rs replays it as PEXPIREMEMBERAT or
//! `PERSIST key member`).
//!
//! A member TTL write (PEXPIREMEMBERAT, every EXPIREMEMBER's record;
//! HPEXPIREAT, every HEXPIRE's; HPERSIST; `PERSIST key member`) travels as
//! a fact of these registers (DECISIONS 326), as the key's TTL write does
//! (`ttl.rs`): the origin notes its dots at once ([`MemberTtlDots::note_write`]:
//! `PREV`, and per member a `DROP` of each dot it replaced at the member's
//! argument index); a peer applies it where it holds every dot replaced
//! and every member named ([`MemberTtlDots::apply_write`]), else asks for
//! the key's state.

use std::collections::BTreeMap;

use super::codec::{put_bytes, put_varint, Cursor};
use super::context::Context;
use super::fact::{Fact, NotApplied, DROP, KIND, PREV, SHIFT};
use super::ttl::Ttl;
use crate::keyspace::hlc::stamp_node;
use crate::keyspace::member_ttl::MemberTtls;

/// A member TTL write on one member, as its record names it: the member's
/// argument index, the member, its deadline (unix ms; 0: cleared).
pub(crate) type MemberWrite<'a> = (u32, &'a [u8], u64);

/// Each member's TTL dots (members without any are not held). A
/// `BTreeMap`, empty and unallocated for a collection without member
/// TTLs, in member order for the encoding.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MemberTtlDots(BTreeMap<Box<[u8]>, Ttl>);

impl MemberTtlDots {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The deadline `member`'s dots resolve to (unix ms; 0: none).
    pub fn at(&self, member: &[u8]) -> u64 {
        self.0.get(member).map_or(0, Ttl::at)
    }

    /// Whether `member` has TTL dots.
    pub fn has(&self, member: &[u8]) -> bool {
        self.0.contains_key(member)
    }

    /// Every member with dots and the deadline they resolve to (0: none).
    pub fn resolved(&self) -> impl Iterator<Item = (&[u8], u64)> {
        self.0.iter().map(|(m, t)| (&**m, t.at()))
    }

    /// Whether the registers disagree with the key's side map `side` (its
    /// member TTLs; None: none), for the members `present` says the key
    /// holds.
    pub fn differ(&self, side: Option<&MemberTtls>, present: impl Fn(&[u8]) -> bool) -> bool {
        let side_at = |m: &[u8]| side.and_then(|s| s.get(m)).unwrap_or(0);
        let held_differ = (self.0.iter()).any(|(m, t)| !present(m) || side_at(m) != t.at());
        held_differ || side.is_some_and(|s| s.iter().any(|(m, at)| present(m) && self.at(m) != at))
    }

    /// As [`Self::differ`], leaving out the members `named` (a write about
    /// to change their TTLs, checked by the caller).
    pub fn differ_but(
        &self,
        side: Option<&MemberTtls>,
        present: impl Fn(&[u8]) -> bool,
        named: &[&[u8]],
    ) -> bool {
        let others = |m: &[u8]| !named.contains(&m);
        let side_at = |m: &[u8]| side.and_then(|s| s.get(m)).unwrap_or(0);
        let held_differ = (self.0.iter())
            .filter(|(m, _)| others(m))
            .any(|(m, t)| !present(m) || side_at(m) != t.at());
        held_differ
            || side.is_some_and(|s| {
                s.iter()
                    .any(|(m, at)| others(m) && present(m) && self.at(m) != at)
            })
    }

    /// Members removed lose their dots (a write's removes, applied).
    pub fn retain_present(&mut self, present: impl Fn(&[u8]) -> bool) {
        self.0.retain(|m, _| present(m));
    }

    /// Origin, after a member TTL write stamped `stamp` left each member
    /// of `writes` (its argument index, the member, its deadline now; 0:
    /// cleared) with that deadline (these registers and `cc` describe the
    /// key before it): each member's dots become the write's one (it saw
    /// them all), and its fact goes to `facts`, `PREV` at the key's
    /// argument 1 and a `DROP` per dot replaced at the member's index,
    /// where it is the stamp's first write of the key (else nothing is
    /// pushed and false is returned; the registers follow all the same).
    pub fn note_write(
        &mut self,
        cc: &mut Context,
        stamp: u64,
        writes: &[MemberWrite<'_>],
        facts: &mut Vec<Fact>,
    ) -> bool {
        let prev = cc.newest(stamp_node(stamp));
        let emit = prev < stamp;
        if emit {
            facts.push((PREV | (1 << SHIFT), prev));
        }
        for (k, &(i, m, at)) in writes.iter().enumerate() {
            if writes[..k].iter().any(|w| w.1 == m) {
                continue; // named twice: its first names what it replaced
            }
            let old = self.0.remove(m);
            if emit {
                let drops = old.iter().flat_map(Ttl::stamps);
                facts.extend(drops.map(|d| (DROP | (i << SHIFT), d)));
            }
            let mut t = Ttl::default();
            t.write(&[], stamp, at);
            self.0.insert(m.into(), t);
        }
        cc.see(stamp);
        emit
    }

    /// Peer: a member TTL write's fact ([`Self::note_write`]) stamped
    /// `stamp`, its `writes` read from its record (argument index, member,
    /// deadline), applied where `cc` has seen its `PREV`, every member it
    /// names is `present` here and these registers hold every dot it
    /// replaced. Returns each member with the deadline its register
    /// resolves to after it, which the key's side map takes.
    pub fn apply_write<'m>(
        &mut self,
        cc: &mut Context,
        stamp: u64,
        (writes, facts): (&[MemberWrite<'m>], &[Fact]),
        present: impl Fn(&[u8]) -> bool,
    ) -> Result<Vec<(&'m [u8], u64)>, NotApplied> {
        if cc.covers(stamp) {
            return Err(NotApplied::Duplicate);
        }
        let prev = facts.iter().find(|f| f.0 & KIND == PREV).map_or(0, |f| f.1);
        let dropped = |i: u32| {
            (facts.iter())
                .filter(move |f| f.0 & KIND == DROP && f.0 >> SHIFT == i)
                .map(|f| f.1)
        };
        let held = |&(i, m, _): &MemberWrite<'_>| {
            let t = self.0.get(m);
            present(m) && dropped(i).all(|d| t.is_some_and(|t| t.holds(d)))
        };
        let named = |f: &Fact| writes.iter().any(|w| f.0 >> SHIFT == w.0);
        let drops_named = (facts.iter()).filter(|f| f.0 & KIND == DROP).all(named);
        if (prev != 0 && !cc.covers(prev)) || !drops_named || !writes.iter().all(held) {
            return Err(NotApplied::Gap);
        }
        let mut out = Vec::with_capacity(writes.len());
        for &(i, m, at) in writes {
            let seen: Vec<u64> = dropped(i).collect();
            let t = self.0.entry(m.into()).or_default();
            t.write(&seen, stamp, at);
            out.push((m, t.at()));
        }
        cc.see(stamp);
        Ok(out)
    }

    /// The registers brought up to the key at `version` whose side map is
    /// `side`: a member gone loses its dots; a member whose deadline
    /// differs from what its dots give took it from the write that made
    /// `version` (0 where it has none now: a write that cleared it).
    pub fn refresh(
        &mut self,
        version: u64,
        side: Option<&MemberTtls>,
        present: impl Fn(&[u8]) -> bool,
    ) {
        self.0.retain(|m, _| present(m));
        if let Some(side) = side {
            for (m, at) in side.iter().filter(|(m, _)| present(m)) {
                match self.0.get_mut(m) {
                    Some(t) => t.refresh(version, true, at),
                    None if at != 0 => {
                        let mut t = Ttl::default();
                        t.refresh(version, true, at);
                        self.0.insert(m.into(), t);
                    }
                    None => {}
                }
            }
        }
        for (m, t) in self.0.iter_mut() {
            if side.and_then(|s| s.get(m)).is_none() {
                t.refresh(version, true, 0);
            }
        }
        self.0.retain(|_, t| !t.is_empty());
    }

    /// The join of `self` (whose key saw `ours`) and `theirs` (whose key
    /// saw `their_cc`), for the members `kept` (those the joined state
    /// holds): each member's registers joined as the key's are.
    pub fn join<'m>(
        &self,
        ours: &Context,
        theirs: &MemberTtlDots,
        their_cc: &Context,
        kept: impl Iterator<Item = &'m [u8]>,
    ) -> MemberTtlDots {
        let mut out = BTreeMap::new();
        if self.is_empty() && theirs.is_empty() {
            return MemberTtlDots(out);
        }
        let none = Ttl::default();
        for m in kept {
            let (a, b) = (self.0.get(m), theirs.0.get(m));
            if a.is_none() && b.is_none() {
                continue;
            }
            let j = a.unwrap_or(&none).join(ours, b.unwrap_or(&none), their_cc);
            if !j.is_empty() {
                out.insert(m.into(), j);
            }
        }
        MemberTtlDots(out)
    }

    /// `count (member ttl)*`, in member order.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.0.len() as u64);
        for (m, t) in &self.0 {
            put_bytes(out, m);
            t.encode(out);
        }
    }

    pub fn decode(c: &mut Cursor) -> Result<MemberTtlDots, String> {
        let mut map = BTreeMap::new();
        for _ in 0..c.count()? {
            let m: Box<[u8]> = c.bytes()?.into();
            let t = Ttl::decode(c)?;
            if t.is_empty() || map.insert(m, t).is_some() {
                return Err("bad member TTL in merge metadata".into());
            }
        }
        Ok(MemberTtlDots(map))
    }

    /// DEBUG MERGEINFO's `member-ttls:` line (at most 16 members).
    pub fn describe(&self) -> String {
        let shown: Vec<String> = (self.0.iter().take(16))
            .map(|(m, t)| format!("{}[{}]", String::from_utf8_lossy(m), t.describe()))
            .collect();
        format!("member-ttls:{} {}", self.0.len(), shown.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::super::ttl::tests::{seen, st};
    use super::*;

    fn side(ttls: &[(&str, u64)]) -> MemberTtls {
        let mut t = MemberTtls::default();
        for (m, at) in ttls {
            t.set(m.as_bytes(), *at);
        }
        t
    }

    const ALL: fn(&[u8]) -> bool = |_| true;

    /// Concurrent TTL writes on one member: the later deadline wins on
    /// both sides; a clearing write (HPERSIST, HSET) wins over any.
    #[test]
    fn concurrent_member_ttls_resolve_as_the_keys_do() {
        let (mut a, mut b) = (MemberTtlDots::default(), MemberTtlDots::default());
        a.refresh(st(20, 1), Some(&side(&[("m", 9000)])), ALL);
        b.refresh(st(21, 2), Some(&side(&[("m", 4000)])), ALL);
        let (a_cc, b_cc) = (seen(&[st(20, 1)]), seen(&[st(21, 2)]));
        let m = [&b"m"[..]];
        let ab = a.join(&a_cc, &b, &b_cc, m.into_iter());
        let ba = b.join(&b_cc, &a, &a_cc, m.into_iter());
        assert_eq!((ab.at(b"m"), &ab), (9000, &ba));
        // C saw A's only, then cleared it.
        let mut c = a.clone();
        c.refresh(st(22, 3), Some(&side(&[])), ALL);
        assert_eq!((c.at(b"m"), c.is_empty()), (0, false));
        let c_cc = seen(&[st(20, 1), st(22, 3)]);
        let mut ab_cc = a_cc.clone();
        ab_cc.join(&b_cc);
        assert_eq!(ab.join(&ab_cc, &c, &c_cc, m.into_iter()).at(b"m"), 0);
        assert_eq!(c.join(&c_cc, &ab, &ab_cc, m.into_iter()).at(b"m"), 0);
    }

    /// A member removed loses its dots; the join keeps no register for a
    /// member it does not keep, and a side that saw a dot and dropped it
    /// (the member removed and made again) drops it from the join.
    #[test]
    fn a_removed_members_dots_go_with_it() {
        let mut a = MemberTtlDots::default();
        a.refresh(st(20, 1), Some(&side(&[("m", 9000)])), ALL);
        let mut b = a.clone();
        b.refresh(st(30, 2), Some(&side(&[("m", 9000)])), |m| m != b"m");
        assert!(b.is_empty());
        let (a_cc, b_cc) = (seen(&[st(20, 1)]), seen(&[st(20, 1), st(30, 2)]));
        let kept = [&b"m"[..]];
        assert!(a.join(&a_cc, &b, &b_cc, kept.into_iter()).is_empty());
        assert!(b.join(&b_cc, &a, &a_cc, kept.into_iter()).is_empty());
        assert!(a.join(&a_cc, &a, &a_cc, std::iter::empty()).is_empty());
    }

    /// Member TTL writes as facts (DECISIONS 326): concurrent first
    /// writes on two nodes each apply the other's and resolve as a join
    /// would; a fact applied twice changes nothing; a clear that saw both
    /// applies where both dots are held; a peer that lacks a dot the write
    /// replaced, or the member, asks (a gap).
    #[test]
    fn member_ttl_writes_apply_as_facts_where_the_dots_they_replaced_are_held() {
        let (mut a, mut b) = (MemberTtlDots::default(), MemberTtlDots::default());
        let (mut a_cc, mut b_cc) = (seen(&[st(10, 1)]), seen(&[st(10, 1)]));
        let (mut fa, mut fb) = (Vec::new(), Vec::new());
        assert!(a.note_write(&mut a_cc, st(20, 1), &[(2, b"m", 9000)], &mut fa));
        let (mut d, mut d_cc) = (a.clone(), a_cc.clone());
        assert!(b.note_write(&mut b_cc, st(21, 2), &[(2, b"m", 4000)], &mut fb));
        let wa: [(u32, &[u8], u64); 1] = [(2, b"m", 9000)];
        let wb: [(u32, &[u8], u64); 1] = [(2, b"m", 4000)];
        let on_a = a.apply_write(&mut a_cc, st(21, 2), (&wb, &fb), ALL);
        let on_b = b.apply_write(&mut b_cc, st(20, 1), (&wa, &fa), ALL);
        assert_eq!(
            (on_a, on_b),
            (Ok(vec![(&b"m"[..], 9000)]), Ok(vec![(&b"m"[..], 9000)]))
        );
        assert_eq!((&a, &a_cc), (&b, &b_cc));
        let dup = b.apply_write(&mut b_cc, st(20, 1), (&wa, &fa), ALL);
        assert_eq!(dup, Err(NotApplied::Duplicate));
        // A clear that saw both dots names both.
        let mut fp = Vec::new();
        assert!(a.note_write(&mut a_cc, st(30, 1), &[(2, b"m", 0)], &mut fp));
        assert_eq!(fp.iter().filter(|f| f.0 == DROP | (2 << SHIFT)).count(), 2);
        let wp: [(u32, &[u8], u64); 1] = [(2, b"m", 0)];
        let on_b = b.apply_write(&mut b_cc, st(30, 1), (&wp, &fp), ALL);
        assert_eq!(on_b, Ok(vec![(&b"m"[..], 0)]));
        assert_eq!((&a, &a_cc), (&b, &b_cc));
        // D never got B's write: it lacks a dot the clear replaced.
        let gap = d.apply_write(&mut d_cc, st(30, 1), (&wp, &fp), ALL);
        assert_eq!(gap, Err(NotApplied::Gap));
        // A node without the member asks too.
        let mut e = MemberTtlDots::default();
        let mut e_cc = seen(&[st(10, 1)]);
        let gone = e.apply_write(&mut e_cc, st(20, 1), (&wa, &fa), |m| m != b"m");
        assert_eq!(gone, Err(NotApplied::Gap));
    }

    #[test]
    fn registers_and_side_maps_compare_and_round_trip() {
        let s = side(&[("a", 100), ("b", 200)]);
        let mut r = MemberTtlDots::default();
        assert!(r.differ(Some(&s), ALL));
        r.refresh(st(5, 1), Some(&s), ALL);
        assert!(!r.differ(Some(&s), ALL));
        assert!(r.differ(Some(&s), |m| m != b"a"));
        assert!(r.differ(None, ALL));
        let mut out = Vec::new();
        r.encode(&mut out);
        let back = MemberTtlDots::decode(&mut Cursor(&out)).unwrap();
        assert_eq!(back, r);
        assert!(r.describe().starts_with("member-ttls:2 a["));
    }
}
