//! Sets, hashes and sorted sets that merge per element (docs/MERGE.md):
//! an observed-remove set (add-wins) over the members, with each member's
//! value (a hash field's, a sorted-set member's score) last-writer-wins.
//!
//! Each member carries a *dot*: the stamp of the write that last added or
//! changed it (a stamp names its node and is unique, so it serves as the
//! dot directly). The key carries a *causal context* `cc`: per node slot,
//! the newest stamp of that node's whose effect on the key this node has
//! seen. A member absent here whose dot `cc` covers was removed here; one
//! whose dot `cc` does not cover was added where we have not looked yet.
//! So joining two states keeps a member both have (the newer dot's value),
//! drops one that only one side has when the other side's `cc` covers it
//! (the other side saw it and removed it), and keeps it otherwise: an add
//! concurrent with a remove wins, a DEL of the whole key removes only what
//! the deleting node had seen (Bieniusa et al.'s optimized OR-set).
//!
//! As counters do (`merge.rs`), elements are brought up to date lazily: a
//! write moves the key's version, and whoever reads the state next diffs
//! the value against the dots it holds ([`Elements::current`]): members new
//! or changed get the write's stamp as their dot, members gone leave their
//! dot to `cc`. Every state that leaves the node is read so and stored, so
//! a member's dot never changes once a peer has seen it.

use hashbrown::HashMap;

use crate::keyspace::hlc::stamp_node;
use crate::keyspace::Value;

/// One member's dot and a fingerprint of its value (hash field value,
/// score bits; 0 for set members), to notice a changed value.
pub type Dot = (u64, u64);

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Elements {
    /// The key's version this describes.
    pub version: u64,
    pub dots: HashMap<Box<[u8]>, Dot>,
    /// Per node slot, the newest stamp seen (sorted by slot).
    pub cc: Vec<(u64, u64)>,
    /// Members the writes since `version` named as added or set (SADD of
    /// a member present, HSET of an unchanged value): they take the next
    /// stamp as their dot, as a new add would (add-wins over a concurrent
    /// remove). Local only; never encoded.
    pub touched: Vec<Box<[u8]>>,
}

/// A member's value in a collection.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Member,
    Field(Vec<u8>),
    Score(f64),
}

impl Item {
    fn fingerprint(&self) -> u64 {
        match self {
            Item::Member => 0,
            Item::Field(v) => fnv64(v),
            Item::Score(s) => s.to_bits(),
        }
    }
}

/// FNV-1a: the same on every node (a fingerprint travels in states).
fn fnv64(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether `value` merges per element.
pub fn is_collection(value: &Value) -> bool {
    matches!(value, Value::Set(_) | Value::Hash(_) | Value::ZSet(_))
}

/// Every member of a collection with its value.
pub fn items(value: Option<&Value>) -> Vec<(Vec<u8>, Item)> {
    match value {
        Some(Value::Set(s)) => s.iter().map(|m| (m.to_vec(), Item::Member)).collect(),
        Some(Value::Hash(h)) => h
            .iter()
            .map(|(f, v)| (f.to_vec(), Item::Field(v.to_vec())))
            .collect(),
        Some(Value::ZSet(z)) => z
            .iter()
            .map(|(m, s)| (m.to_vec(), Item::Score(s)))
            .collect(),
        _ => Vec::new(),
    }
}

/// One member's value in `value`.
fn item_of(value: Option<&Value>, m: &[u8]) -> Option<Item> {
    match value? {
        Value::Set(s) => s.contains(m).then_some(Item::Member),
        Value::Hash(h) => h.get(m).map(|v| Item::Field(v.to_vec())),
        Value::ZSet(z) => z.score(m).map(Item::Score),
        _ => None,
    }
}

/// What a join changes in the local value.
#[derive(Debug, PartialEq)]
pub enum Change {
    /// Add the member, or set its value.
    Put(Vec<u8>, Item),
    Remove(Vec<u8>),
}

impl Elements {
    /// The elements of a key at `version` whose value is `value`: `meta`
    /// if it describes that version, else `meta` brought up to it (new or
    /// changed members dotted `version`; see the module comment).
    pub fn current(meta: Option<&Elements>, version: u64, value: Option<&Value>) -> Elements {
        if let Some(m) = meta.filter(|m| m.version == version) {
            return m.clone();
        }
        let mut e = Elements {
            version,
            dots: HashMap::new(),
            cc: meta.map(|m| m.cc.clone()).unwrap_or_default(),
            touched: Vec::new(),
        };
        let touched = |m: &[u8]| meta.is_some_and(|old| old.touched.iter().any(|t| &**t == m));
        e.see(version);
        for (m, item) in items(value) {
            let fp = item.fingerprint();
            let dot = match meta.and_then(|old| old.dots.get(&m[..])) {
                Some(&(d, f)) if f == fp && !touched(&m) => d,
                _ => version,
            };
            e.dots.insert(m.into(), (dot, fp));
        }
        e
    }

    /// Whether `self` and `other` are one state but for the version they
    /// describe (the same dots and causal context).
    pub fn same_content(&self, other: &Elements) -> bool {
        self.dots == other.dots && self.cc == other.cc
    }

    /// Notes `stamp` as seen.
    fn see(&mut self, stamp: u64) {
        if stamp == 0 {
            return;
        }
        let slot = stamp_node(stamp);
        match self.cc.binary_search_by_key(&slot, |c| c.0) {
            Ok(i) => self.cc[i].1 = self.cc[i].1.max(stamp),
            Err(i) => self.cc.insert(i, (slot, stamp)),
        }
    }

    /// Whether this node has seen the write stamped `dot`.
    fn covers(&self, dot: u64) -> bool {
        let slot = stamp_node(dot);
        self.cc
            .binary_search_by_key(&slot, |c| c.0)
            .is_ok_and(|i| self.cc[i].1 >= dot)
    }

    /// Joins `remote` (whose value is `remote_value`) into `self` (the
    /// local state, whose value is `local_value`): the joined state, and
    /// what must change in the local value to match it.
    pub fn join(
        &self,
        local_value: Option<&Value>,
        remote: &Elements,
        remote_value: Option<&Value>,
    ) -> (Elements, Vec<Change>) {
        let mut out = Elements {
            version: self.version.max(remote.version),
            dots: HashMap::with_capacity(self.dots.len().max(remote.dots.len())),
            cc: self.cc.clone(),
            touched: Vec::new(),
        };
        for &(_, s) in &remote.cc {
            out.see(s);
        }
        let mut changes = Vec::new();
        for (m, &(dl, fl)) in &self.dots {
            match remote.dots.get(m) {
                Some(&(dr, fr)) if (dr, fr) > (dl, fl) => {
                    out.dots.insert(m.clone(), (dr, fr));
                    if fr != fl {
                        let item = item_of(remote_value, m).unwrap_or(Item::Member);
                        changes.push(Change::Put(m.to_vec(), item));
                    }
                }
                Some(_) => {
                    out.dots.insert(m.clone(), (dl, fl));
                }
                None if remote.covers(dl) => changes.push(Change::Remove(m.to_vec())),
                None => {
                    out.dots.insert(m.clone(), (dl, fl));
                }
            }
        }
        for (m, &(dr, fr)) in &remote.dots {
            if self.dots.contains_key(m) || self.covers(dr) {
                continue;
            }
            if let Some(item) = item_of(remote_value, m) {
                out.dots.insert(m.clone(), (dr, fr));
                changes.push(Change::Put(m.to_vec(), item));
            }
        }
        let _ = local_value;
        changes.sort_by(|a, b| change_key(a).cmp(change_key(b)));
        (out, changes)
    }
}

fn change_key(c: &Change) -> &[u8] {
    match c {
        Change::Put(m, _) | Change::Remove(m) => m,
    }
}

// ---- Encoding --------------------------------------------------------------

use super::codec::{put_bytes, put_varint, Cursor};

impl Elements {
    /// `kind 'E' | version cc dots` (dots sorted by member, so that equal
    /// states encode equal).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(b'E');
        put_varint(out, self.version);
        put_varint(out, self.cc.len() as u64);
        for &(slot, s) in &self.cc {
            put_varint(out, slot);
            put_varint(out, s);
        }
        let mut dots: Vec<_> = self.dots.iter().collect();
        dots.sort_unstable_by(|a, b| a.0.cmp(b.0));
        put_varint(out, dots.len() as u64);
        for (m, &(d, f)) in dots {
            put_bytes(out, m);
            put_varint(out, d);
            out.extend_from_slice(&f.to_le_bytes());
        }
    }

    pub fn decode(b: &[u8]) -> Result<Elements, String> {
        let mut c = Cursor(b);
        if c.byte()? != b'E' {
            return Err("unknown merge metadata".into());
        }
        let version = c.varint()?;
        let n = c.count()?;
        let mut cc = Vec::with_capacity(n);
        for _ in 0..n {
            cc.push((c.varint()?, c.varint()?));
        }
        if cc.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err("merge metadata context out of order".into());
        }
        let n = c.count()?;
        let mut dots = HashMap::with_capacity(n);
        for _ in 0..n {
            let m = c.bytes()?;
            let d = c.varint()?;
            let f = c.u64_le()?;
            dots.insert(m.into(), (d, f));
        }
        c.end()?;
        Ok(Elements {
            version,
            dots,
            cc,
            touched: Vec::new(),
        })
    }

    /// DEBUG MERGEINFO's lines (at most 16 dots shown).
    pub fn describe(&self) -> Vec<String> {
        let cc: Vec<String> = self.cc.iter().map(|(s, t)| format!("{s}:{t}")).collect();
        let mut dots: Vec<_> = self.dots.iter().collect();
        dots.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let shown: Vec<String> = dots
            .iter()
            .take(16)
            .map(|(m, (d, _))| format!("{}@{d}", String::from_utf8_lossy(m)))
            .collect();
        vec![
            "type:elements".to_string(),
            format!("version:{}", self.version),
            format!("context:{}", cc.join(",")),
            format!("dots:{} {}", self.dots.len(), shown.join(",")),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::set::SetValue;

    fn set(members: &[&str]) -> Value {
        let mut s = SetValue::default();
        for m in members {
            s.add(m.as_bytes(), 512);
        }
        Value::Set(Box::new(s))
    }

    fn st(ms: u64, node: u64) -> u64 {
        make_stamp(ms, 0, node)
    }

    /// From one common state, A adds x and removes b, B adds y and removes
    /// c: everything survives but the removed ones, on both sides.
    #[test]
    fn adds_and_removes_of_different_members_all_survive() {
        let v0 = st(10, 1);
        let base = set(&["a", "b", "c"]);
        let common = Elements::current(None, v0, Some(&base));
        let (va, vb) = (set(&["a", "c", "x"]), set(&["a", "b", "y"]));
        let a = Elements::current(Some(&common), st(20, 1), Some(&va));
        let b = Elements::current(Some(&common), st(21, 2), Some(&vb));
        let (ab, ch) = a.join(Some(&va), &b, Some(&vb));
        let (ba, _) = b.join(Some(&vb), &a, Some(&va));
        assert_eq!(ab, ba);
        assert_eq!(
            ch,
            vec![
                Change::Remove(b"c".to_vec()),
                Change::Put(b"y".to_vec(), Item::Member)
            ]
        );
        let mut members: Vec<_> = ab.dots.keys().map(|m| m.to_vec()).collect();
        members.sort();
        assert_eq!(members, vec![b"a".to_vec(), b"x".to_vec(), b"y".to_vec()]);
    }

    /// An add concurrent with a remove of the same member keeps it.
    #[test]
    fn add_wins_over_a_concurrent_remove() {
        let v0 = st(10, 1);
        let base = set(&["m"]);
        let common = Elements::current(None, v0, Some(&base));
        let removed = Elements::current(Some(&common), st(20, 1), None);
        // B re-adds m: a new dot (its SADD of a member it had is a no-op in
        // the value, but a DEL+SADD or SREM+SADD gives it a fresh dot).
        let mut readded = Elements::current(Some(&common), st(21, 2), None);
        readded = Elements::current(Some(&readded), st(22, 2), Some(&base));
        let (j, ch) = removed.join(None, &readded, Some(&base));
        assert_eq!(ch, vec![Change::Put(b"m".to_vec(), Item::Member)]);
        assert!(j.dots.contains_key(&b"m"[..]));
        // The remove alone (B never touched m again) removes it.
        let (j, ch) = common.join(Some(&base), &removed, None);
        assert_eq!(ch, vec![Change::Remove(b"m".to_vec())]);
        assert!(j.dots.is_empty());
    }

    #[test]
    fn encoding_round_trips() {
        let e = Elements::current(None, st(5, 3), Some(&set(&["a", "bb", "1"])));
        let mut out = Vec::new();
        e.encode(&mut out);
        assert_eq!(Elements::decode(&out).unwrap(), e);
        assert!(Elements::decode(&out[..out.len() - 2]).is_err());
    }
}
