//! Lists that merge per element (docs/MERGE.md): concurrent pushes on two
//! nodes both survive, in one order on every node, and pops, LREM, LTRIM,
//! LSET and LINSERT converge.
//!
//! Each element has an *id* (the stamp of the write that put it there and
//! its index among that write's new elements) and a *position* that never
//! changes. Elements are an observed-remove set of ids, as a collection's
//! members are (`elements.rs`): the join keeps an id both sides have, and
//! one that only one side has unless the other side's causal context `cc`
//! covers its stamp (that side saw it and removed it). The list is the
//! surviving elements in position order.
//!
//! A position is a path, compared component by component (a prefix comes
//! first): an element put at the head (no element of the old list before
//! it) gets a root component of the left zone, newest first; one put at
//! the tail (none after it), a root component of the right zone, newest
//! last; one put between two old elements is a child of its left
//! neighbour, and siblings order newest first, so it lands right after
//! that neighbour and before whatever followed it when it was written
//! (Roh et al.'s RGA, with paths instead of a tree). Pushes, the common
//! case, keep paths one component long.
//!
//! As `elements.rs` does, the state is brought up to date lazily: a write
//! moves the key's version, and whoever reads the state next diffs the
//! list against the stored elements by a fingerprint of each value (a
//! longest common subsequence: the elements it keeps stay, the others
//! were removed, and the values it does not match were put there by the
//! write, at its stamp). A rewrite too big to compare whole (more than 4M
//! cells between the common prefix and suffix) gives the elements between
//! new ids: the list is the same, only a concurrent remove of one of them
//! on another node misses.
//!
//! No diff of values can tell which of several equal values a write took
//! (`[t t t]` after an LPOP and after an RPOP are both `[t t]`), so the
//! writes that only push and pop at the ends (LPUSH, RPOP, LMOVE, LTRIM,
//! the blocking pops: the common case, and every token list's) tell the
//! state what they did ([`Lists::note_ends`]); the next read aligns the
//! list by that instead of by the diff ([`Ends`]).

use super::context::{fingerprint, Context};
use super::ttl::Ttl;
use crate::keyspace::Value;

use super::codec::{put_varint, Cursor};

/// A position's component: zone (-1 head, 0 child, 1 tail), then the
/// order within it (see [`Lists::current`]).
pub type Component = (i8, u64, u32);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Elem {
    /// The stamp of the write that put the element, and its index among
    /// that write's new elements.
    pub id: (u64, u32),
    pub pos: Vec<Component>,
    /// A fingerprint of the value, to diff a list against its elements.
    pub fp: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Lists {
    /// The key's version this describes.
    pub version: u64,
    /// The elements, in list order (parallel to the list's values).
    pub elems: Vec<Elem>,
    /// The causal context: the newest stamp seen per node slot.
    pub cc: Context,
    /// What the writes since `version` did at the list's ends, where that
    /// is all they did. Local only; never encoded.
    pub ends: Option<Ends>,
    /// The key's TTL dots (`ttl.rs`).
    pub ttl: Ttl,
}

/// The list after writes that only pushed and popped at its ends, told by
/// the writes ([`Lists::note_ends`]): `head` new elements, then the
/// elements `from..to` of the state, then `tail` new elements. `at`: the
/// key's version after the last write told (a write that did not tell
/// moves the version on, and the alignment is no longer used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ends {
    head: usize,
    from: usize,
    to: usize,
    tail: usize,
    at: u64,
}

/// What a write did at one end of a list (`left`: the head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndOp {
    Push { left: bool, n: usize },
    Pop { left: bool, n: usize },
}

impl Ends {
    fn apply(&mut self, op: EndOp) {
        match op {
            EndOp::Push { left: true, n } => self.head += n,
            EndOp::Push { left: false, n } => self.tail += n,
            EndOp::Pop { left, n } => {
                // The new elements at that end go first, then the state's,
                // then (the list emptied) the new ones at the other end.
                let near = if left { self.head } else { self.tail };
                let from_near = n.min(near);
                let from_old = (n - from_near).min(self.to - self.from);
                let from_far = n - from_near - from_old;
                if left {
                    self.head -= from_near;
                    self.from += from_old;
                    self.tail -= from_far.min(self.tail);
                } else {
                    self.tail -= from_near;
                    self.to -= from_old;
                    self.head -= from_far.min(self.head);
                }
            }
        }
    }
}

/// The values of a list (empty for an absent key or another type).
pub fn values(value: Option<&Value>) -> Vec<Vec<u8>> {
    match value {
        Some(Value::List(l)) => l.iter().map(<[u8]>::to_vec).collect(),
        _ => Vec::new(),
    }
}

/// For each value of the new list, the old element it still is, if any:
/// a longest common subsequence of the fingerprints (the common prefix and
/// suffix first, then the middle, when it is small enough to compare
/// whole; a bigger rewrite keeps only the prefix and suffix).
fn matching(old: &[Elem], new: &[u64]) -> Vec<Option<usize>> {
    let mut kept = vec![None; new.len()];
    let prefix = old.iter().zip(new).take_while(|(e, f)| e.fp == **f).count();
    let room = old.len().min(new.len()) - prefix;
    let suffix = (old.iter().rev().zip(new.iter().rev()))
        .take(room)
        .take_while(|(e, f)| e.fp == **f)
        .count();
    for (i, k) in kept.iter_mut().enumerate().take(prefix) {
        *k = Some(i);
    }
    for i in 0..suffix {
        kept[new.len() - 1 - i] = Some(old.len() - 1 - i);
    }
    let (om, nm) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );
    const MAX_CELLS: usize = 1 << 22;
    if om.is_empty() || nm.is_empty() || om.len() * nm.len() > MAX_CELLS {
        return kept;
    }
    // lcs[i][j]: the LCS length of om[i..] and nm[j..].
    let w = nm.len() + 1;
    let mut lcs = vec![0u32; (om.len() + 1) * w];
    for i in (0..om.len()).rev() {
        for j in (0..nm.len()).rev() {
            lcs[i * w + j] = if om[i].fp == nm[j] {
                lcs[(i + 1) * w + j + 1] + 1
            } else {
                lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < om.len() && j < nm.len() {
        if om[i].fp == nm[j] {
            kept[prefix + j] = Some(prefix + i);
            i += 1;
            j += 1;
        } else if lcs[(i + 1) * w + j] >= lcs[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    kept
}

impl Lists {
    /// The list of a key at `version` whose value is `value`: `meta` if
    /// it describes that version, else `meta` brought up to it (module
    /// comment).
    pub fn current(meta: Option<&Lists>, version: u64, value: Option<&Value>) -> Lists {
        if let Some(m) = meta.filter(|m| m.version == version) {
            return m.clone();
        }
        let old: &[Elem] = meta.map_or(&[], |m| &m.elems);
        let new: Vec<u64> = values(value).iter().map(|v| fingerprint(v)).collect();
        let told = meta.and_then(|m| m.aligned_by_ends(version, &new));
        let kept = told.unwrap_or_else(|| matching(old, &new));
        let mut elems: Vec<Elem> = Vec::with_capacity(new.len());
        let mut k = 0u32;
        for (i, &f) in new.iter().enumerate() {
            if let Some(o) = kept[i] {
                elems.push(old[o].clone());
                continue;
            }
            let old_before = kept[..i].iter().any(Option::is_some);
            let old_after = kept[i + 1..].iter().any(Option::is_some);
            let pos = if !old_after {
                vec![(1, version, k)]
            } else if !old_before {
                vec![(-1, u64::MAX - version, k)]
            } else {
                let mut p = elems[i - 1].pos.clone();
                p.push((0, u64::MAX - version, u32::MAX - k));
                p
            };
            elems.push(Elem {
                id: (version, k),
                pos,
                fp: f,
            });
            k += 1;
        }
        let mut l = Lists {
            version,
            elems,
            cc: meta.map(|m| m.cc.clone()).unwrap_or_default(),
            ends: None,
            ttl: meta.map(|m| m.ttl.clone()).unwrap_or_default(),
        };
        l.cc.see(version);
        l
    }

    /// Origin, after a write that moved the key from version `prev` to
    /// `stamp` by `ops` at the list's ends: the next [`Lists::current`]
    /// aligns the list by them. A write before it that did not tell (its
    /// version is not `prev`) leaves the diff to align it.
    pub fn note_ends(&mut self, prev: u64, stamp: u64, ops: &[EndOp]) {
        let mut e = match self.ends {
            Some(e) if e.at == prev => e,
            None if self.version == prev => Ends {
                head: 0,
                from: 0,
                to: self.elems.len(),
                tail: 0,
                at: prev,
            },
            _ => {
                self.ends = None;
                return;
            }
        };
        for &op in ops {
            e.apply(op);
        }
        e.at = stamp;
        self.ends = Some(e);
    }

    /// For each value of the list at `version` (fingerprints `new`), the
    /// element it still is, by what its writes told ([`Ends`]); None where
    /// they did not tell, or the list is not what they told (a write that
    /// did not tell shares their stamp: a transaction's LSET).
    fn aligned_by_ends(&self, version: u64, new: &[u64]) -> Option<Vec<Option<usize>>> {
        let e = self
            .ends
            .filter(|e| e.at == version && e.to <= self.elems.len())?;
        let mid = e.to - e.from;
        if new.len() != e.head + mid + e.tail {
            return None;
        }
        let old = &self.elems[e.from..e.to];
        if old.iter().zip(&new[e.head..]).any(|(o, f)| o.fp != *f) {
            return None;
        }
        let mut kept = vec![None; new.len()];
        for i in 0..mid {
            kept[e.head + i] = Some(e.from + i);
        }
        Some(kept)
    }

    /// Whether `self` and `other` are one state but for their versions.
    pub fn same_content(&self, other: &Lists) -> bool {
        self.elems == other.elems && self.cc == other.cc && self.ttl == other.ttl
    }

    /// Joins `remote` (whose values are `remote_values`) into `self` (whose
    /// values are `local_values`): the joined state and its values.
    pub fn join(
        &self,
        local_values: &[Vec<u8>],
        remote: &Lists,
        remote_values: &[Vec<u8>],
    ) -> (Lists, Vec<Vec<u8>>) {
        let mut kept: Vec<(&Elem, &[u8])> = Vec::new();
        let has = |l: &Lists, id| l.elems.iter().any(|e| e.id == id);
        for (e, v) in self.elems.iter().zip(local_values) {
            if has(remote, e.id) || !remote.cc.covers(e.id.0) {
                kept.push((e, v));
            }
        }
        for (e, v) in remote.elems.iter().zip(remote_values) {
            if !has(self, e.id) && !self.cc.covers(e.id.0) {
                kept.push((e, v));
            }
        }
        kept.sort_by(|a, b| (&a.0.pos, a.0.id).cmp(&(&b.0.pos, b.0.id)));
        let mut out = Lists {
            version: self.version.max(remote.version),
            elems: kept.iter().map(|(e, _)| (*e).clone()).collect(),
            cc: self.cc.clone(),
            ends: None,
            ttl: self.ttl.join(&self.cc, &remote.ttl, &remote.cc),
        };
        out.cc.join(&remote.cc);
        if kept.is_empty() {
            out.ttl = Ttl::default(); // a deleted key's TTL goes with it
        }
        let values = kept.iter().map(|(_, v)| v.to_vec()).collect();
        (out, values)
    }

    /// `kind 'L' | version cc elems`, each `stamp index fp path`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(b'L');
        put_varint(out, self.version);
        self.cc.encode(out);
        put_varint(out, self.elems.len() as u64);
        for e in &self.elems {
            put_varint(out, e.id.0);
            put_varint(out, u64::from(e.id.1));
            out.extend_from_slice(&e.fp.to_le_bytes());
            put_varint(out, e.pos.len() as u64);
            for &(zone, a, b) in &e.pos {
                out.push(zone as u8);
                put_varint(out, a);
                put_varint(out, u64::from(b));
            }
        }
        // After the elements, the TTL dots where there are any (`t`).
        if !self.ttl.is_empty() {
            out.push(b't');
            self.ttl.encode(out);
        }
    }

    pub fn decode(b: &[u8]) -> Result<Lists, String> {
        let mut c = Cursor(b);
        if c.byte()? != b'L' {
            return Err("unknown merge metadata".into());
        }
        let version = c.varint()?;
        let cc = Context::decode(&mut c)?;
        let small = |v: u64| u32::try_from(v).map_err(|_| "bad list element in merge metadata");
        let n = c.count()?;
        let mut elems = Vec::with_capacity(n);
        for _ in 0..n {
            let id = (c.varint()?, small(c.varint()?)?);
            let fp = c.u64_le()?;
            let k = c.count()?;
            let mut pos = Vec::with_capacity(k);
            for _ in 0..k {
                let zone = c.byte()? as i8;
                if !(-1..=1).contains(&zone) {
                    return Err("bad list position in merge metadata".into());
                }
                pos.push((zone, c.varint()?, small(c.varint()?)?));
            }
            elems.push(Elem { id, pos, fp });
        }
        let mut ttl = Ttl::default();
        if !c.0.is_empty() {
            if c.byte()? != b't' {
                return Err("bad section in merge metadata".into());
            }
            ttl = Ttl::decode(&mut c)?;
        }
        c.end()?;
        Ok(Lists {
            version,
            elems,
            cc,
            ends: None,
            ttl,
        })
    }

    /// DEBUG MERGEINFO's lines (at most 16 elements shown, as
    /// `index:stamp.k`).
    pub fn describe(&self) -> Vec<String> {
        let shown: Vec<String> = (self.elems.iter().enumerate())
            .take(16)
            .map(|(i, e)| format!("{i}:{}.{}", e.id.0, e.id.1))
            .collect();
        vec![
            "type:list".to_string(),
            format!("version:{}", self.version),
            self.cc.describe(),
            format!("elements:{} {}", self.elems.len(), shown.join(",")),
            self.ttl.describe(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::list::ListValue;

    fn list(items: &[&str]) -> Value {
        let mut l = ListValue::new();
        for i in items {
            l.push_back(-2, i.as_bytes());
        }
        Value::List(Box::new(l))
    }

    fn st(ms: u64, node: u64) -> u64 {
        make_stamp(ms, 0, node)
    }

    fn strs(v: &[Vec<u8>]) -> Vec<String> {
        v.iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    fn join(a: &Lists, av: &Value, b: &Lists, bv: &Value) -> (Lists, Vec<String>) {
        let (j, v) = a.join(&values(Some(av)), b, &values(Some(bv)));
        (j, strs(&v))
    }

    /// From [a b], A pushes x at the head and y at the tail, B pushes p at
    /// the head and q at the tail: all survive, in one order both ways.
    #[test]
    fn concurrent_pushes_all_survive_in_one_order() {
        let base = list(&["a", "b"]);
        let common = Lists::current(None, st(10, 1), Some(&base));
        let (va, vb) = (list(&["x", "a", "b", "y"]), list(&["p", "a", "b", "q"]));
        let a = Lists::current(Some(&common), st(20, 1), Some(&va));
        let b = Lists::current(Some(&common), st(21, 2), Some(&vb));
        let (ab, vab) = join(&a, &va, &b, &vb);
        let (ba, vba) = join(&b, &vb, &a, &va);
        assert_eq!(ab, ba);
        assert_eq!(vab, vba);
        assert_eq!(vab, ["p", "x", "a", "b", "y", "q"]);
    }

    /// A pops the head while B inserts after it: the pop removes only the
    /// element A saw; B's insert stays, where B put it.
    #[test]
    fn a_pop_and_a_concurrent_insert_converge() {
        let base = list(&["a", "b", "c"]);
        let common = Lists::current(None, st(10, 1), Some(&base));
        let (va, vb) = (list(&["b", "c"]), list(&["a", "n", "b", "c"]));
        let a = Lists::current(Some(&common), st(20, 1), Some(&va));
        let b = Lists::current(Some(&common), st(21, 2), Some(&vb));
        let (ab, vab) = join(&a, &va, &b, &vb);
        let (ba, vba) = join(&b, &vb, &a, &va);
        assert_eq!(ab, ba);
        assert_eq!(vab, vba);
        assert_eq!(vab, ["n", "b", "c"]);
    }

    /// A token list `[t t t]`: A pops the head, B the tail. The writes
    /// told the state which end they took, so the list ends one token
    /// (the middle one) on both sides, not two (a diff of equal values
    /// took both pops for the last token). Pops of the same end take the
    /// same token: it is removed once.
    #[test]
    fn pops_of_equal_values_at_either_end_remove_the_elements_they_took() {
        let base = list(&["t", "t", "t"]);
        let common = Lists::current(None, st(10, 1), Some(&base));
        let two = list(&["t", "t"]);
        let popped = |prev: &Lists, stamp: u64, left: bool| {
            let mut s = prev.clone();
            s.note_ends(prev.version, stamp, &[EndOp::Pop { left, n: 1 }]);
            Lists::current(Some(&s), stamp, Some(&two))
        };
        let a = popped(&common, st(20, 1), true);
        let b = popped(&common, st(21, 2), false);
        let (ab, vab) = join(&a, &two, &b, &two);
        let (ba, vba) = join(&b, &two, &a, &two);
        assert_eq!((ab.elems.clone(), &vab), (ba.elems.clone(), &vba));
        assert_eq!(vab, ["t"]);
        assert_eq!(ab.elems[0].id, common.elems[1].id, "the middle token");
        let b_head = popped(&common, st(21, 2), true);
        let (_, v) = join(&a, &two, &b_head, &two);
        assert_eq!(v, ["t", "t"]);
    }

    /// Pushes and pops told in a row compose: LPUSH x, RPOP 2 (the last
    /// old element and nothing new), LTRIM as pops at both ends.
    #[test]
    fn told_ends_compose_across_writes() {
        let base = list(&["a", "b", "c"]);
        let mut s = Lists::current(None, st(10, 1), Some(&base));
        s.note_ends(st(10, 1), st(11, 1), &[EndOp::Push { left: true, n: 1 }]);
        s.note_ends(st(11, 1), st(12, 1), &[EndOp::Pop { left: false, n: 2 }]);
        let now = Lists::current(Some(&s), st(12, 1), Some(&list(&["x", "a"])));
        assert_eq!(now.elems[1].id, s.elems[0].id, "a is still a");
        assert_eq!(now.elems[0].id, (st(12, 1), 0), "x is new");
        // A write that did not tell (its version is not the last told)
        // leaves the list to the diff.
        let mut t = now.clone();
        t.note_ends(st(30, 1), st(31, 1), &[EndOp::Pop { left: true, n: 1 }]);
        assert_eq!(t.ends, None);
    }

    #[test]
    fn encoding_round_trips() {
        let base = list(&["a", "b"]);
        let l0 = Lists::current(None, st(5, 3), Some(&base));
        let l = Lists::current(Some(&l0), st(6, 3), Some(&list(&["a", "z", "b"])));
        assert_eq!(
            l.elems[1].pos.len(),
            2,
            "an insert is its neighbour's child"
        );
        let mut out = Vec::new();
        l.encode(&mut out);
        assert_eq!(Lists::decode(&out).unwrap(), l);
        assert!(Lists::decode(&out[..out.len() - 1]).is_err());
    }
}
