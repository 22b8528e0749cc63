//! Sorted-set values (Redis's t_zset.c objects).
//!
//! Two representations, as in Redis, so OBJECT ENCODING answers the same:
//!
//! - `listpack` ([`Repr::Pack`]): a `Vec` of `(member, score)` kept sorted
//!   by (score, member). Small sets (at most `zset-max-listpack-entries`
//!   members of at most `zset-max-listpack-value` bytes) live here: lookups
//!   by member scan it (as Redis scans its listpack), ranges binary-search.
//! - `skiplist` ([`Repr::Big`]): an arena of treap nodes ordered by
//!   (score, member), each carrying its subtree size, so rank, select, and
//!   range bounds are O(log n) expected; plus a `hashbrown::HashTable<u32>`
//!   of node indices keyed by the member's hash for O(1) ZSCORE. The member
//!   bytes are stored once, in the node (inline up to 22 bytes, else in
//!   their own allocation); the table holds 4-byte indices (its eq/hash
//!   closures look the member up in the arena). A node costs 48 bytes +
//!   ~5-10 bytes of table (+ a long member's allocation), well under Redis's
//!   skiplist node + dict entry + sds. Inline members spare a cache miss
//!   per member lookup and per score tie, and an allocation per insert.
//!
//! Conversion goes one way (listpack → skiplist) when a set outgrows the
//! limits, as Redis does; store commands build their destination with the
//! encoding Redis would pick for its final size ([`ZSetValue::from_sorted`]).
//!
//! ZSCAN on a skiplist walks the arena by slot index: the cursor is the next
//! slot to visit. A node keeps its slot for as long as its member stays in
//! the set (updates change the score in place and relink the node), so every
//! member present for the whole scan is returned exactly once; members added
//! meanwhile may or may not be seen. The price: the arena does not compact
//! (freed slots are reused by later inserts, and an emptied set frees all),
//! so a skiplist that shrank a lot keeps its peak node array.

use std::cmp::Ordering;

use hashbrown::{DefaultHashBuilder, HashTable};

const NIL: u32 = u32::MAX;

/// The `zset-max-listpack-*` thresholds in force for a write.
#[derive(Clone, Copy, Debug)]
pub struct ZLimits {
    pub max_entries: usize,
    pub max_value: usize,
}

/// Orders (score, member) pairs as Redis does: by score, then member bytes.
#[inline]
pub(crate) fn key_cmp(s1: f64, m1: &[u8], s2: f64, m2: &[u8]) -> Ordering {
    s1.partial_cmp(&s2)
        .unwrap_or(Ordering::Equal)
        .then_with(|| m1.cmp(m2))
}

/// The score a set stores: -0 is stored as 0, in every encoding.
///
/// Redis's listpack stores scores as text, where -0 reads back as 0, while
/// its skiplist keeps -0; so the same ZADD answers `-0` or `0` by the set's
/// size, and two copies of one set that took different encodings (a
/// replica or peer that loaded it from a snapshot as a listpack, a node
/// that grew it to a skiplist) disagree. Storing 0 everywhere keeps every
/// copy equal (DECISIONS 66; simulator seed 4444).
#[inline]
fn pack_score(s: f64) -> f64 {
    if s == 0.0 {
        0.0
    } else {
        s
    }
}

/// Longest member a node stores inline.
const INLINE: usize = 22;

/// A node's member: inline when short (most members are), so a lookup or a
/// tie-break reads the node alone, and no allocation is made per member.
#[derive(Clone)]
enum Member {
    /// Bytes, then their length.
    Inline([u8; INLINE], u8),
    Heap(Box<[u8]>),
}

impl Default for Member {
    fn default() -> Self {
        Member::Inline([0; INLINE], 0)
    }
}

impl From<&[u8]> for Member {
    fn from(m: &[u8]) -> Member {
        if m.len() <= INLINE {
            let mut b = [0; INLINE];
            b[..m.len()].copy_from_slice(m);
            Member::Inline(b, m.len() as u8)
        } else {
            Member::Heap(m.into())
        }
    }
}

impl std::ops::Deref for Member {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Member::Inline(b, n) => &b[..*n as usize],
            Member::Heap(b) => b,
        }
    }
}

impl Member {
    /// Heap bytes held apart from the node.
    fn heap_len(&self) -> usize {
        match self {
            Member::Inline(..) => 0,
            Member::Heap(b) => b.len(),
        }
    }
}

#[derive(Clone)]
struct Node {
    member: Member,
    score: f64,
    left: u32,
    right: u32,
    size: u32,
    prio: u32,
}

/// The skiplist-encoded form: an order-statistics treap plus a member index.
#[derive(Clone)]
pub struct Big {
    nodes: Vec<Node>,
    free: Vec<u32>,
    root: u32,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    rng: u64,
}

#[derive(Clone)]
enum Repr {
    Pack(Vec<(Box<[u8]>, f64)>),
    Big(Box<Big>),
}

#[derive(Clone)]
pub struct ZSetValue {
    repr: Repr,
}

impl Default for ZSetValue {
    fn default() -> Self {
        ZSetValue {
            repr: Repr::Pack(Vec::new()),
        }
    }
}

impl std::fmt::Debug for ZSetValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(m, s)| (String::from_utf8_lossy(m), s)))
            .finish()
    }
}

impl PartialEq for ZSetValue {
    fn eq(&self, o: &Self) -> bool {
        self.len() == o.len() && self.iter().zip(o.iter()).all(|(a, b)| a == b)
    }
}

impl Big {
    fn new() -> Big {
        Big {
            nodes: Vec::new(),
            free: Vec::new(),
            root: NIL,
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }

    #[inline]
    fn size(&self, t: u32) -> u32 {
        if t == NIL {
            0
        } else {
            self.nodes[t as usize].size
        }
    }

    #[inline]
    fn fix(&mut self, t: u32) {
        let n = &self.nodes[t as usize];
        let s = 1 + self.size(n.left) + self.size(n.right);
        self.nodes[t as usize].size = s;
    }

    fn hash(&self, m: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(m)
    }

    fn find(&self, m: &[u8]) -> Option<u32> {
        let nodes = &self.nodes;
        self.index
            .find(self.hash(m), |&i| &*nodes[i as usize].member == m)
            .copied()
    }

    /// Whether node `a` orders before node `b`.
    #[inline(always)]
    fn less(&self, a: u32, b: u32) -> bool {
        let (x, y) = (&self.nodes[a as usize], &self.nodes[b as usize]);
        // Members are read only on a score tie.
        match x.score.partial_cmp(&y.score) {
            Some(Ordering::Less) => true,
            Some(Ordering::Greater) => false,
            _ => *x.member < *y.member,
        }
    }

    /// Splits `t` into (nodes ordered before node `x`, the rest); `x` is
    /// not in `t`. Called on the subtree a new node takes over, whose
    /// expected depth is O(1).
    fn split(&mut self, t: u32, x: u32) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        if self.less(t, x) {
            let (l, r) = self.split(self.nodes[t as usize].right, x);
            self.nodes[t as usize].right = l;
            self.fix(t);
            (t, r)
        } else {
            let (l, r) = self.split(self.nodes[t as usize].left, x);
            self.nodes[t as usize].left = r;
            self.fix(t);
            (l, t)
        }
    }

    /// Joins `a` and `b` (every key of `a` below every key of `b`).
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].prio > self.nodes[b as usize].prio {
            let r = self.merge(self.nodes[a as usize].right, b);
            self.nodes[a as usize].right = r;
            self.fix(a);
            a
        } else {
            let l = self.merge(a, self.nodes[b as usize].left);
            self.nodes[b as usize].left = l;
            self.fix(b);
            b
        }
    }

    /// Points `parent`'s child slot (the root if NIL) at `c`.
    #[inline]
    fn set_child(&mut self, parent: u32, left: bool, c: u32) {
        if parent == NIL {
            self.root = c;
        } else if left {
            self.nodes[parent as usize].left = c;
        } else {
            self.nodes[parent as usize].right = c;
        }
    }

    fn next_prio(&mut self) -> u32 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    }

    /// Links node `x` (detached, size 1) into the tree at its place: one
    /// descent to where its priority puts it (counting it into the sizes
    /// on the way), then a split of the subtree it takes over.
    fn link(&mut self, x: u32) {
        let p = self.nodes[x as usize].prio;
        let (mut parent, mut left, mut t) = (NIL, false, self.root);
        while t != NIL && self.nodes[t as usize].prio > p {
            self.nodes[t as usize].size += 1;
            parent = t;
            left = self.less(x, t);
            let n = &self.nodes[t as usize];
            t = if left { n.left } else { n.right };
        }
        let (l, r) = self.split(t, x);
        let n = &mut self.nodes[x as usize];
        (n.left, n.right) = (l, r);
        self.fix(x);
        self.set_child(parent, left, x);
    }

    /// Unlinks node `x` from the tree (it stays in the arena): one descent
    /// to it (uncounting it from the sizes), then its children merged.
    fn unlink(&mut self, x: u32) {
        let (mut parent, mut left, mut t) = (NIL, false, self.root);
        while t != x {
            debug_assert!(t != NIL, "unlink: node not in the tree");
            self.nodes[t as usize].size -= 1;
            parent = t;
            left = self.less(x, t);
            let n = &self.nodes[t as usize];
            t = if left { n.left } else { n.right };
        }
        let (l, r) = (self.nodes[x as usize].left, self.nodes[x as usize].right);
        let c = self.merge(l, r);
        self.set_child(parent, left, c);
        let n = &mut self.nodes[x as usize];
        (n.left, n.right, n.size) = (NIL, NIL, 1);
    }

    fn insert(&mut self, m: &[u8], score: f64) {
        let prio = self.next_prio();
        let node = Node {
            member: m.into(),
            score: pack_score(score),
            left: NIL,
            right: NIL,
            size: 1,
            prio,
        };
        let x = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.link(x);
        let h = self.hash(m);
        let (nodes, hasher) = (&self.nodes, &self.hasher);
        self.index.insert_unique(h, x, |&i| {
            use std::hash::BuildHasher;
            hasher.hash_one(&*nodes[i as usize].member)
        });
    }

    fn remove(&mut self, m: &[u8]) -> Option<f64> {
        let h = self.hash(m);
        let nodes = &self.nodes;
        let Ok(slot) = self
            .index
            .find_entry(h, |&i| &*nodes[i as usize].member == m)
        else {
            return None;
        };
        let (x, _) = slot.remove();
        self.unlink(x);
        let n = &mut self.nodes[x as usize];
        n.member = Member::default();
        let score = n.score;
        self.free.push(x);
        if self.index.is_empty() {
            self.nodes.clear();
            self.free.clear();
            self.root = NIL;
        }
        Some(score)
    }

    fn set_score(&mut self, x: u32, score: f64) {
        self.unlink(x);
        self.nodes[x as usize].score = pack_score(score);
        self.link(x);
    }

    /// Number of nodes, in order, for which `below` holds (it must be
    /// true for a prefix of the order).
    fn count_below(&self, below: &dyn Fn(f64, &[u8]) -> bool) -> usize {
        let (mut t, mut c) = (self.root, 0usize);
        while t != NIL {
            let n = &self.nodes[t as usize];
            if below(n.score, &n.member) {
                c += self.size(n.left) as usize + 1;
                t = n.right;
            } else {
                t = n.left;
            }
        }
        c
    }

    /// The rank of node `x`: one descent to it.
    fn rank_of(&self, x: u32) -> usize {
        let (mut t, mut c) = (self.root, 0usize);
        while t != x {
            let n = &self.nodes[t as usize];
            if self.less(t, x) {
                c += self.size(n.left) as usize + 1;
                t = n.right;
            } else {
                t = n.left;
            }
        }
        c + self.size(self.nodes[x as usize].left) as usize
    }

    /// The stack of an in-order walk positioned at rank `k`.
    fn stack_at(&self, mut k: usize, rev: bool) -> Vec<u32> {
        let mut st = Vec::with_capacity(40);
        let mut t = self.root;
        while t != NIL {
            let n = &self.nodes[t as usize];
            let ls = self.size(n.left) as usize;
            match k.cmp(&ls) {
                Ordering::Less => {
                    if !rev {
                        st.push(t);
                    }
                    t = n.left;
                }
                Ordering::Equal => {
                    st.push(t);
                    break;
                }
                Ordering::Greater => {
                    if rev {
                        st.push(t);
                    }
                    k -= ls + 1;
                    t = n.right;
                }
            }
        }
        st
    }
}

/// A member's place in a [`ZSetValue`]: a listpack index or a node slot.
#[derive(Clone, Copy, Debug)]
pub struct Pos(usize);

/// Walks a sorted set in rank order (or reverse) from a starting rank.
pub enum ZIter<'a> {
    Pack {
        v: &'a [(Box<[u8]>, f64)],
        pos: usize,
        rev: bool,
        done: bool,
    },
    Big {
        z: &'a Big,
        stack: Vec<u32>,
        rev: bool,
    },
}

impl<'a> Iterator for ZIter<'a> {
    type Item = (&'a [u8], f64);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            ZIter::Pack { v, pos, rev, done } => {
                if *done || *pos >= v.len() {
                    return None;
                }
                let (m, s) = &v[*pos];
                if *rev {
                    if *pos == 0 {
                        *done = true;
                    } else {
                        *pos -= 1;
                    }
                } else {
                    *pos += 1;
                }
                Some((m, *s))
            }
            ZIter::Big { z, stack, rev } => {
                let t = stack.pop()?;
                let n = &z.nodes[t as usize];
                let mut c = if *rev { n.left } else { n.right };
                while c != NIL {
                    stack.push(c);
                    let cn = &z.nodes[c as usize];
                    c = if *rev { cn.right } else { cn.left };
                }
                Some((&n.member, n.score))
            }
        }
    }
}

impl ZSetValue {
    /// An empty set in the encoding Redis's zsetTypeCreate picks for the
    /// expected size and longest member.
    pub fn with_hint(size: usize, max_len: usize, lim: ZLimits) -> ZSetValue {
        if size <= lim.max_entries && max_len <= lim.max_value && lim.max_entries > 0 {
            ZSetValue::default()
        } else {
            ZSetValue {
                repr: Repr::Big(Box::new(Big::new())),
            }
        }
    }

    /// Builds a set from pairs sorted by (score, member), in the encoding
    /// Redis gives a store destination of that size (zsetConvertToListpackIfNeeded).
    pub fn from_sorted(items: Vec<(Box<[u8]>, f64)>, lim: ZLimits) -> ZSetValue {
        let max_len = items.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
        if items.len() <= lim.max_entries && max_len <= lim.max_value {
            let items = items.into_iter().map(|(m, s)| (m, pack_score(s))).collect();
            return ZSetValue {
                repr: Repr::Pack(items),
            };
        }
        let mut b = Big::new();
        for (m, s) in items {
            b.insert(&m, s);
        }
        ZSetValue {
            repr: Repr::Big(Box::new(b)),
        }
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Pack(v) => v.len(),
            Repr::Big(b) => b.index.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (member, score) in rank order (score, then member bytes).
    pub fn iter(&self) -> ZIter<'_> {
        self.iter_from(0, false)
    }

    /// Walks from rank `rank` towards higher ranks, or lower ones if `rev`.
    pub fn iter_from(&self, rank: usize, rev: bool) -> ZIter<'_> {
        match &self.repr {
            Repr::Pack(v) => ZIter::Pack {
                v,
                pos: rank,
                rev,
                done: false,
            },
            Repr::Big(b) => ZIter::Big {
                z: b,
                stack: if rank < b.index.len() {
                    b.stack_at(rank, rev)
                } else {
                    Vec::new()
                },
                rev,
            },
        }
    }

    /// OBJECT ENCODING: "listpack" or "skiplist".
    pub fn encoding(&self) -> &'static str {
        match &self.repr {
            Repr::Pack(_) => "listpack",
            Repr::Big(_) => "skiplist",
        }
    }

    pub fn is_compact(&self) -> bool {
        matches!(self.repr, Repr::Pack(_))
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        match &self.repr {
            Repr::Pack(v) => v.capacity() * 24 + v.iter().map(|(m, _)| m.len()).sum::<usize>(),
            Repr::Big(b) => {
                b.nodes.capacity() * std::mem::size_of::<Node>()
                    + b.index.capacity() * 5
                    + b.free.capacity() * 4
                    + b.nodes.iter().map(|n| n.member.heap_len()).sum::<usize>()
            }
        }
    }

    /// The score of `m`.
    pub fn score(&self, m: &[u8]) -> Option<f64> {
        match &self.repr {
            Repr::Pack(v) => v.iter().find(|(x, _)| &**x == m).map(|(_, s)| *s),
            Repr::Big(b) => b.find(m).map(|i| b.nodes[i as usize].score),
        }
    }

    /// Converts to the skiplist encoding.
    fn convert_to_big(&mut self) {
        if let Repr::Pack(v) = &mut self.repr {
            let mut b = Big::new();
            for (m, s) in std::mem::take(v) {
                b.insert(&m, s);
            }
            self.repr = Repr::Big(Box::new(b));
        }
    }

    /// Adds `m` (which must be absent), converting the encoding if the set
    /// outgrows the listpack limits.
    pub fn insert(&mut self, m: &[u8], score: f64, lim: ZLimits) {
        if let Repr::Pack(v) = &self.repr {
            if v.len() + 1 > lim.max_entries || m.len() > lim.max_value {
                self.convert_to_big();
            }
        }
        match &mut self.repr {
            Repr::Pack(v) => {
                let score = pack_score(score);
                let at = v.partition_point(|(x, s)| key_cmp(*s, x, score, m) == Ordering::Less);
                v.insert(at, (m.into(), score));
            }
            Repr::Big(b) => b.insert(m, score),
        }
    }

    /// Where a present member `m` is, and its score: one lookup that
    /// [`ZSetValue::update_at`] reuses (ZADD reads then writes a member).
    pub fn find(&self, m: &[u8]) -> Option<(Pos, f64)> {
        match &self.repr {
            Repr::Pack(v) => v
                .iter()
                .position(|(x, _)| &**x == m)
                .map(|i| (Pos(i), v[i].1)),
            Repr::Big(b) => b
                .find(m)
                .map(|i| (Pos(i as usize), b.nodes[i as usize].score)),
        }
    }

    /// Changes the score of the member `m` found at `at` (no write since).
    pub fn update_at(&mut self, at: Pos, m: &[u8], score: f64) {
        match &mut self.repr {
            Repr::Pack(v) => {
                let score = pack_score(score);
                let (x, _) = v.remove(at.0);
                let i = v.partition_point(|(y, s)| key_cmp(*s, y, score, m) == Ordering::Less);
                v.insert(i, (x, score));
            }
            Repr::Big(b) => b.set_score(at.0 as u32, score),
        }
    }

    /// Changes the score of a present member `m`.
    pub fn update(&mut self, m: &[u8], score: f64) {
        if let Some((at, _)) = self.find(m) {
            self.update_at(at, m, score);
        }
    }

    /// Removes `m`, returning its score.
    pub fn remove(&mut self, m: &[u8]) -> Option<f64> {
        match &mut self.repr {
            Repr::Pack(v) => {
                let i = v.iter().position(|(x, _)| &**x == m)?;
                Some(v.remove(i).1)
            }
            Repr::Big(b) => b.remove(m),
        }
    }

    /// The 0-based rank of `m` and its score.
    pub fn rank(&self, m: &[u8]) -> Option<(usize, f64)> {
        match &self.repr {
            Repr::Pack(v) => v.iter().position(|(x, _)| &**x == m).map(|i| (i, v[i].1)),
            Repr::Big(b) => {
                let x = b.find(m)?;
                Some((b.rank_of(x), b.nodes[x as usize].score))
            }
        }
    }

    /// How many leading elements satisfy `below` (true on a prefix).
    pub fn count_below(&self, below: &dyn Fn(f64, &[u8]) -> bool) -> usize {
        match &self.repr {
            Repr::Pack(v) => v.partition_point(|(m, s)| below(*s, m)),
            Repr::Big(b) => b.count_below(below),
        }
    }

    /// The element at rank `k`.
    pub fn get(&self, k: usize) -> Option<(&[u8], f64)> {
        self.iter_from(k, false).next()
    }

    /// Removes ranks `start..=end` (valid ranks), returning how many.
    pub fn remove_ranks(&mut self, start: usize, end: usize) -> usize {
        match &mut self.repr {
            Repr::Pack(v) => {
                v.drain(start..=end);
            }
            Repr::Big(_) => {
                let ms: Vec<Box<[u8]>> = self
                    .iter_from(start, false)
                    .take(end + 1 - start)
                    .map(|(m, _)| m.into())
                    .collect();
                for m in ms {
                    self.remove(&m);
                }
            }
        }
        end + 1 - start
    }

    /// One ZSCAN step: up to about `count` elements from `cursor`, and the
    /// next cursor (0 when done). A listpack answers whole with cursor 0.
    pub fn scan(&self, cursor: u64, count: usize, out: &mut Vec<(Box<[u8]>, f64)>) -> u64 {
        match &self.repr {
            Repr::Pack(v) => {
                out.extend(v.iter().cloned());
                0
            }
            Repr::Big(b) => {
                let mut i = cursor as usize;
                let mut visited = 0;
                let mut found = 0;
                while i < b.nodes.len() && found < count.max(1) && visited < count.max(1) * 10 {
                    let n = &b.nodes[i];
                    // Free slots have an empty member and are in `free`;
                    // live nodes are those the index points back to.
                    if b.find(&n.member) == Some(i as u32) {
                        out.push((n.member[..].into(), n.score));
                        found += 1;
                    }
                    visited += 1;
                    i += 1;
                }
                if i >= b.nodes.len() {
                    0
                } else {
                    i as u64
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    #[derive(PartialEq, Clone, Copy, Debug)]
    struct F(f64);
    impl PartialOrd for F {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Eq for F {}
    impl Ord for F {
        fn cmp(&self, o: &Self) -> Ordering {
            self.0.partial_cmp(&o.0).unwrap()
        }
    }

    /// Subtree sizes add up and priorities are heap-ordered; returns the size.
    fn check_tree(b: &Big, t: u32, max_prio: u32) -> u32 {
        if t == NIL {
            return 0;
        }
        let n = &b.nodes[t as usize];
        assert!(n.prio <= max_prio, "heap order");
        let s = 1 + check_tree(b, n.left, n.prio) + check_tree(b, n.right, n.prio);
        assert_eq!(n.size, s, "subtree size");
        s
    }

    fn check(z: &ZSetValue, model: &BTreeSet<(F, Vec<u8>)>) {
        if let Repr::Big(b) = &z.repr {
            assert_eq!(check_tree(b, b.root, u32::MAX) as usize, z.len());
        }
        assert_eq!(z.len(), model.len());
        let got: Vec<(Vec<u8>, f64)> = z.iter().map(|(m, s)| (m.to_vec(), s)).collect();
        let want: Vec<(Vec<u8>, f64)> = model.iter().map(|(s, m)| (m.clone(), s.0)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn node_layout() {
        assert_eq!(std::mem::size_of::<Member>(), 24);
        assert_eq!(std::mem::size_of::<Node>(), 48);
        let long = vec![7u8; INLINE + 1];
        for m in [&b""[..], b"element:12345", &long[..INLINE], &long] {
            assert_eq!(&*Member::from(m), m);
        }
    }

    #[test]
    fn model_check() {
        let lims = [
            ZLimits {
                max_entries: 128,
                max_value: 64,
            },
            ZLimits {
                max_entries: 0,
                max_value: 64,
            },
        ];
        for lim in lims {
            let mut z = ZSetValue::with_hint(0, 0, lim);
            let mut model = BTreeSet::new();
            let mut scores: HashMap<Vec<u8>, f64> = HashMap::new();
            let mut rng = 12345u64;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            for step in 0..6000 {
                // Some members too long to be stored inline.
                let k = next() % 300;
                let m = format!(
                    "m{k}{}",
                    if k % 5 == 0 {
                        "-long-enough-for-the-heap"
                    } else {
                        ""
                    }
                )
                .into_bytes();
                let s = (next() % 50) as f64;
                match next() % 4 {
                    0 | 1 => {
                        if let Some(old) = scores.insert(m.clone(), s) {
                            model.remove(&(F(old), m.clone()));
                            z.update(&m, s);
                        } else {
                            z.insert(&m, s, lim);
                        }
                        model.insert((F(s), m.clone()));
                    }
                    2 => {
                        let r = z.remove(&m);
                        let old = scores.remove(&m);
                        assert_eq!(r, old);
                        if let Some(o) = old {
                            model.remove(&(F(o), m.clone()));
                        }
                    }
                    _ => {
                        let want = model.iter().position(|(_, x)| *x == m);
                        assert_eq!(z.rank(&m).map(|r| r.0), want);
                        let below = z.count_below(&|sc, _| sc < s);
                        assert_eq!(below, model.iter().filter(|(x, _)| x.0 < s).count());
                        if !model.is_empty() {
                            let k = (next() as usize) % model.len();
                            let fwd: Vec<_> =
                                z.iter_from(k, false).map(|(m, _)| m.to_vec()).collect();
                            let want: Vec<_> =
                                model.iter().skip(k).map(|(_, m)| m.clone()).collect();
                            assert_eq!(fwd, want);
                            let back: Vec<_> =
                                z.iter_from(k, true).map(|(m, _)| m.to_vec()).collect();
                            let want: Vec<_> = model
                                .iter()
                                .take(k + 1)
                                .rev()
                                .map(|(_, m)| m.clone())
                                .collect();
                            assert_eq!(back, want);
                        }
                    }
                }
                if step % 97 == 0 {
                    check(&z, &model);
                }
            }
            check(&z, &model);
            if lim.max_entries == 0 {
                assert_eq!(z.encoding(), "skiplist");
                // A scan visits every member exactly once.
                let mut seen = Vec::new();
                let mut cur = 0;
                loop {
                    cur = z.scan(cur, 7, &mut seen);
                    if cur == 0 {
                        break;
                    }
                }
                assert_eq!(seen.len(), z.len());
                let n = z.len();
                assert_eq!(z.remove_ranks(1, n - 2), n - 2);
                assert_eq!(z.len(), 2);
            }
        }
    }
}
