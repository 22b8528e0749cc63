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
//! write, at its stamp). Every write brings the state up to date before it
//! runs (`Locked::prepare_merge`), so a diff usually spans one command. A
//! rewrite too big to compare whole (more than 4M cells between the common
//! prefix and suffix) gives the elements between new ids: the list is the
//! same, only a concurrent remove of one of them on another node misses.

use super::context::{fingerprint, Context};
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
        let kept = matching(old, &new);
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
        };
        l.cc.see(version);
        l
    }

    /// Whether `self` and `other` are one state but for their versions.
    pub fn same_content(&self, other: &Lists) -> bool {
        self.elems == other.elems && self.cc == other.cc
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
        };
        out.cc.join(&remote.cc);
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
        c.end()?;
        Ok(Lists { version, elems, cc })
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
