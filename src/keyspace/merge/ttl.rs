//! A merging collection's TTL as a register of its own (issue 24, docs/MERGE-DESIGN.md
//! section 2): the writes that set or removed the key's TTL are *TTL dots*
//! (the write's stamp and the expiry it left, 0 for none), kept as a
//! collection keeps its members' dots (`elements.rs`): a TTL write replaces
//! the dots it saw, a join keeps a dot both sides have or one the other side
//! has not seen (its causal context does not cover it). So concurrent TTL
//! writes all survive, and the key's TTL is resolved from them as Redis
//! Enterprise's Active-Active databases document: PERSIST wins, else the
//! longest TTL. A write that did not change the TTL (SADD, HSET, LPUSH...)
//! makes no dot and removes none: the TTL another node set concurrently
//! stays. A deleted key's TTL dots go with it (a re-made key has no TTL).
//!
//! Dots are found lazily, as members' are: whoever brings the key's state up
//! to its version compares the key's expiry with the register's and, where
//! they differ, takes the key's last write for a TTL write
//! ([`Ttl::refresh`]). Every write brings the state up first (and a link
//! before it applies a peer's write), so that write is the one that changed
//! the TTL.
//!
//! A TTL write (EXPIRE and its family, PERSIST) on a set, hash or sorted
//! set travels as a fact of this register where [`super::fact::TTL_FACTS`]
//! is on, and on a list where [`super::fact::LIST_TTL_FACTS`] is too
//! (docs/MERGE-DESIGN.md section 9; a counter has no register: its TTL is its
//! winning reset's, `reset.rs`): the origin notes its dot at once
//! ([`Ttl::note_write`]: the dots it saw go, its own comes) and names the
//! dots it replaced; a peer applies it where it holds every one of them
//! ([`Ttl::apply_write`]), else asks for the key's state.

use super::codec::{put_varint, Cursor};
use super::context::Context;
use super::fact::{Fact, NotApplied, DROP, KIND, PREV, SHIFT, WORD};
use crate::keyspace::hlc::stamp_node;
use crate::keyspace::value::Value;

/// The `WORD` index at which a TTL write's fact names the type of the value
/// it found ([`type_code`]; below `stream.rs`'s made-word and the key
/// states' words of `deletes.rs`). `PREV` and the dots replaced say what the
/// origin saw of the key's TTL, nothing of its value: a peer whose key holds
/// another type is on the other side of a type conflict, which the key's
/// whole state resolves (the last writer wins the key, docs/MERGE.md).
/// Applied there, the fact stamped each side's own value with the write's
/// version, and the two never compared again (simulator seed 35412: a set
/// on one node, a sorted set on the other, one version). DECISIONS 322.
const TYPE_WORD: u32 = (1 << 16) - 2;

/// The code [`TYPE_WORD`] carries for a value that has a TTL register.
pub(crate) fn type_code(value: &Value) -> u64 {
    match value {
        Value::Set(_) => 1,
        Value::Hash(_) => 2,
        Value::ZSet(_) => 3,
        Value::List(_) => 4,
        Value::Stream(_) => 5,
        Value::Str(_) | Value::Cron(_) => 0,
    }
}

/// The fact entry naming the type `code` of the value a TTL write found.
pub(crate) fn type_fact(code: u64) -> Fact {
    (WORD | (TYPE_WORD << SHIFT), code)
}

/// Whether a TTL write's `facts` were made on a value of another type than
/// `value` (false where they name none: an origin before DECISIONS 322).
pub(crate) fn other_type(facts: &[Fact], value: &Value) -> bool {
    let word = facts.iter().find(|f| f.0 == WORD | (TYPE_WORD << SHIFT));
    word.is_some_and(|f| f.1 != type_code(value))
}

/// The TTL dots of a key: `(stamp, expiry)`, oldest first; empty for a key
/// no TTL write touched since it was made.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Ttl(Vec<(u64, u64)>);

impl Ttl {
    /// The expiry the dots resolve to (unix ms; 0: none): none where there
    /// are no dots or one removed the TTL (PERSIST wins), else the latest
    /// expiry (the longest TTL wins).
    pub fn at(&self) -> u64 {
        if self.0.iter().any(|d| d.1 == 0) {
            return 0;
        }
        self.0.iter().map(|d| d.1).max().unwrap_or(0)
    }

    /// The key at `version`, present or not, expiring at `at` (0: no TTL):
    /// a deleted key loses its dots; an expiry that differs from the one
    /// the dots give was set by the write that made `version`.
    pub fn refresh(&mut self, version: u64, present: bool, at: u64) {
        if !present {
            self.0.clear();
        } else if self.at() != at {
            self.0 = vec![(version, at)];
        }
    }

    /// The join of `self` (whose key saw `ours`) and `theirs` (whose key
    /// saw `their_cc`): the dots both hold, and those one holds that the
    /// other has not seen.
    pub fn join(&self, ours: &Context, theirs: &Ttl, their_cc: &Context) -> Ttl {
        let both = |d: &(u64, u64), side: &Ttl| side.0.iter().any(|o| o.0 == d.0);
        let mut kept: Vec<(u64, u64)> = (self.0.iter())
            .filter(|d| both(d, theirs) || !their_cc.covers(d.0))
            .copied()
            .collect();
        kept.extend(
            (theirs.0.iter())
                .filter(|d| !both(d, self) && !ours.covers(d.0))
                .copied(),
        );
        kept.sort_unstable();
        kept.dedup_by_key(|d| d.0);
        Ttl(kept)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the dot stamped `stamp` is held.
    pub(super) fn holds(&self, stamp: u64) -> bool {
        self.0.iter().any(|d| d.0 == stamp)
    }

    /// The stamps of the dots held, oldest first.
    pub(super) fn stamps(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|d| d.0)
    }

    /// A TTL write stamped `stamp` that saw the dots stamped `seen` and
    /// left the key expiring at `at` (0: none): those go, its own comes.
    pub(super) fn write(&mut self, seen: &[u64], stamp: u64, at: u64) {
        self.0.retain(|d| !seen.contains(&d.0) && d.0 != stamp);
        let i = self.0.partition_point(|d| d.0 < stamp);
        self.0.insert(i, (stamp, at));
    }

    /// Origin, after a TTL write stamped `stamp` left its key expiring at
    /// `at` (this register and `cc` describe the key before it): the write
    /// replaces every dot (it saw them all), and its fact goes to `facts`
    /// where it is the stamp's first write of the key: `PREV` (the
    /// origin's newest stamp seen before) and a `DROP` per dot replaced,
    /// all at the key's argument `key_index`. Returns whether it went.
    pub fn note_write(
        &mut self,
        cc: &mut Context,
        (stamp, at): (u64, u64),
        key_index: u32,
        facts: &mut Vec<Fact>,
    ) -> bool {
        let prev = cc.newest(stamp_node(stamp));
        let emit = prev < stamp;
        if emit {
            facts.push((PREV | (key_index << SHIFT), prev));
            let drops = self.0.iter().map(|d| (DROP | (key_index << SHIFT), d.0));
            facts.extend(drops);
        }
        self.0 = vec![(stamp, at)];
        cc.see(stamp);
        emit
    }

    /// Peer: a TTL write's fact ([`Self::note_write`]) stamped `stamp`
    /// that left its key expiring at `at`, applied where this register
    /// holds every dot it replaced and `cc` has seen its `PREV`. Returns
    /// the expiry the register resolves to after it, which the key takes.
    pub fn apply_write(
        &mut self,
        cc: &mut Context,
        (stamp, at): (u64, u64),
        facts: &[Fact],
    ) -> Result<u64, NotApplied> {
        if cc.covers(stamp) {
            return Err(NotApplied::Duplicate);
        }
        let prev = facts.iter().find(|f| f.0 & KIND == PREV).map_or(0, |f| f.1);
        let seen: Vec<u64> = (facts.iter())
            .filter(|f| f.0 & KIND == DROP)
            .map(|f| f.1)
            .collect();
        let held = |s: &u64| self.0.iter().any(|d| d.0 == *s);
        if (prev != 0 && !cc.covers(prev)) || !seen.iter().all(held) {
            return Err(NotApplied::Gap);
        }
        self.write(&seen, stamp, at);
        cc.see(stamp);
        Ok(self.at())
    }

    /// `count (stamp at)*`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.0.len() as u64);
        for &(s, at) in &self.0 {
            put_varint(out, s);
            put_varint(out, at);
        }
    }

    pub fn decode(c: &mut Cursor) -> Result<Ttl, String> {
        let n = c.count()?;
        let mut dots = Vec::with_capacity(n);
        for _ in 0..n {
            dots.push((c.varint()?, c.varint()?));
        }
        if dots.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err("merge metadata TTL dots out of order".into());
        }
        Ok(Ttl(dots))
    }

    /// DEBUG MERGEINFO's `ttl:` line (`stamp=expiry`, each dot).
    pub fn describe(&self) -> String {
        let dots: Vec<String> = self.0.iter().map(|(s, at)| format!("{s}={at}")).collect();
        format!("ttl:{}", dots.join(","))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;

    /// A stamp of node `node` at `ms`.
    pub(in crate::keyspace::merge) fn st(ms: u64, node: u64) -> u64 {
        make_stamp(ms, 0, node)
    }

    /// A context that saw `stamps`.
    pub(in crate::keyspace::merge) fn seen(stamps: &[u64]) -> Context {
        let mut cc = Context::default();
        stamps.iter().for_each(|&s| cc.see(s));
        cc
    }

    /// EXPIRE on A; B, which saw the key before, writes a member later:
    /// B's write made no dot, so A's TTL stays on both.
    #[test]
    fn a_write_that_did_not_touch_the_ttl_keeps_it() {
        let mut a = Ttl::default();
        a.refresh(st(20, 1), true, 5000);
        let b = Ttl::default();
        let (a_cc, b_cc) = (seen(&[st(10, 1), st(20, 1)]), seen(&[st(10, 1), st(30, 2)]));
        assert_eq!(a.join(&a_cc, &b, &b_cc).at(), 5000);
        assert_eq!(b.join(&b_cc, &a, &a_cc).at(), 5000);
    }

    /// Concurrent TTL writes: the longest wins; PERSIST wins over any.
    #[test]
    fn concurrent_ttls_resolve_to_the_longest_and_persist_wins() {
        let (mut a, mut b, mut p) = (Ttl::default(), Ttl::default(), Ttl::default());
        a.refresh(st(20, 1), true, 9000);
        b.refresh(st(21, 2), true, 4000);
        let (a_cc, b_cc) = (seen(&[st(20, 1)]), seen(&[st(21, 2)]));
        let ab = a.join(&a_cc, &b, &b_cc);
        assert_eq!((ab.at(), ab.clone()), (9000, b.join(&b_cc, &a, &a_cc)));
        p.refresh(st(19, 3), true, 7000);
        p.refresh(st(22, 3), true, 0);
        let p_cc = seen(&[st(22, 3)]);
        let mut abp_cc = a_cc.clone();
        abp_cc.join(&b_cc);
        assert_eq!(ab.join(&abp_cc, &p, &p_cc).at(), 0);
    }

    /// TTL writes as facts: concurrent EXPIREs on two nodes each apply
    /// the other's fact and resolve to the longest; a PERSIST that saw both
    /// wins; a fact applied twice changes nothing; a peer that lacks a dot
    /// the write replaced (it missed it, or replaced it concurrently) asks.
    #[test]
    fn ttl_writes_apply_as_facts_where_the_dots_they_replaced_are_held() {
        let (mut a, mut b) = (Ttl::default(), Ttl::default());
        let (mut a_cc, mut b_cc) = (seen(&[st(10, 1)]), seen(&[st(10, 1)]));
        let (mut fa, mut fb) = (Vec::new(), Vec::new());
        assert!(a.note_write(&mut a_cc, (st(20, 1), 9000), 1, &mut fa));
        assert!(b.note_write(&mut b_cc, (st(21, 2), 4000), 1, &mut fb));
        assert_eq!(a.apply_write(&mut a_cc, (st(21, 2), 4000), &fb), Ok(9000));
        assert_eq!(b.apply_write(&mut b_cc, (st(20, 1), 9000), &fa), Ok(9000));
        let dup = b.apply_write(&mut b_cc, (st(20, 1), 9000), &fa);
        assert_eq!(dup, Err(NotApplied::Duplicate));
        assert_eq!((&a, &a_cc), (&b, &b_cc));
        let mut fp = Vec::new();
        let mut c = a.clone();
        let mut c_cc = a_cc.clone();
        assert!(a.note_write(&mut a_cc, (st(30, 1), 0), 1, &mut fp));
        assert_eq!(fp.iter().filter(|f| f.0 & KIND == DROP).count(), 2);
        assert_eq!(b.apply_write(&mut b_cc, (st(30, 1), 0), &fp), Ok(0));
        assert_eq!((&a, &a_cc), (&b, &b_cc));
        // A third node that replaced B's dot itself holds it no more.
        let mut fc = Vec::new();
        assert!(c.note_write(&mut c_cc, (st(25, 3), 100), 1, &mut fc));
        let gap = c.apply_write(&mut c_cc, (st(30, 1), 0), &fp);
        assert_eq!(gap, Err(NotApplied::Gap));
        // A second TTL write of one stamp (a transaction's) has no fact.
        let mut again = Vec::new();
        assert!(!a.note_write(&mut a_cc, (st(30, 1), 5), 1, &mut again));
        assert!(again.is_empty());
    }

    /// A TTL write that saw another replaces it: shortening a TTL works.
    #[test]
    fn a_later_ttl_write_that_saw_the_earlier_replaces_it() {
        let mut a = Ttl::default();
        a.refresh(st(20, 1), true, 9000);
        let mut b = a.clone();
        b.refresh(st(30, 2), true, 1000);
        let (a_cc, b_cc) = (seen(&[st(20, 1)]), seen(&[st(20, 1), st(30, 2)]));
        assert_eq!(a.join(&a_cc, &b, &b_cc).at(), 1000);
        assert_eq!(b.join(&b_cc, &a, &a_cc).at(), 1000);
    }
}
