//! Stream values (Redis's t_stream.c data): entries ordered by ID, each a
//! list of field-value pairs, plus the metadata Redis keeps (last ID,
//! entries added, the largest deleted ID) and the consumer groups
//! (`stream_groups.rs`).
//!
//! Entries live in *nodes* as Redis's radix tree of listpacks keeps them:
//! a B-tree maps each node's key (the ID of the entry that opened it,
//! Redis's master ID) to one byte buffer holding its entries delta-encoded
//! against a master field list (`stream_node.rs`, DECISIONS 95). Nodes are
//! opened by the same `stream-node-max-entries` / `stream-node-max-bytes`
//! rule as streamAppendItem's, so approximate trimming (`MAXLEN ~`,
//! `MINID ~`) removes the same whole nodes as Redis and leaves the same
//! entries, and the RDB writer emits one listpack per node. Readers get
//! entries decoded into owned [`Fields`]; the memory against Redis is
//! measured in docs/STREAMS-HLL-GEO.md (`bench/streams.sh`).

use std::collections::BTreeMap;

use super::stream_node::{Cursor, Node, Raw};

/// A stream entry ID: milliseconds and sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The next ID, None past the last possible one.
    pub fn next(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId::new(ms + 1, 0)),
            (ms, seq) => Some(StreamId::new(ms, seq + 1)),
        }
    }

    /// The previous ID, None before 0-0.
    pub fn prev(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId::new(ms - 1, u64::MAX)),
            (ms, seq) => Some(StreamId::new(ms, seq - 1)),
        }
    }

    pub fn text(self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }

    /// The 16-byte big-endian form (radix-tree keys in the RDB).
    pub fn to_be(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.ms.to_be_bytes());
        b[8..].copy_from_slice(&self.seq.to_be_bytes());
        b
    }
}

/// One entry's fields and values, packed: for each item a u32 length
/// (little endian) and its bytes, fields and values alternating.
#[derive(Clone, Debug, PartialEq)]
pub struct Fields(Box<[u8]>);

impl Fields {
    pub fn pack<'a>(items: impl Iterator<Item = &'a [u8]>) -> Fields {
        let mut v = Vec::new();
        for it in items {
            v.extend_from_slice(&(it.len() as u32).to_le_bytes());
            v.extend_from_slice(it);
        }
        Fields(v.into_boxed_slice())
    }

    /// Fields and values, alternating.
    pub fn items(&self) -> impl Iterator<Item = &[u8]> {
        let b = &self.0;
        let mut at = 0;
        std::iter::from_fn(move || {
            if at >= b.len() {
                return None;
            }
            let n = u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as usize;
            let it = &b[at + 4..at + 4 + n];
            at += 4 + n;
            Some(it)
        })
    }

    pub fn count(&self) -> usize {
        self.items().count()
    }

    pub(super) fn bytes(&self) -> usize {
        self.0.len()
    }
}

/// How a trim decides what goes (XADD's and XTRIM's options).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trim {
    MaxLen(u64),
    MinId(StreamId),
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct StreamValue {
    /// The nodes by key: the ID of the entry that opened each (Redis's
    /// master ID), never a node without live entries.
    nodes: BTreeMap<StreamId, Node>,
    /// Live entries.
    length: usize,
    pub last_id: StreamId,
    pub entries_added: u64,
    pub max_deleted: StreamId,
    /// Consumer groups by name (`stream_groups.rs`).
    pub groups: BTreeMap<Vec<u8>, super::stream_groups::Group>,
}

/// Redis's listpack header and an entry's fixed fields, roughly: what the
/// byte half of the node split rule counts.
const NODE_BASE: usize = 16;

/// Entries of a range, node by node (`StreamValue::range`): forwards a
/// node is walked lazily; backwards its entries in range are listed first.
pub struct Range<'a> {
    nodes: std::collections::btree_map::Range<'a, StreamId, Node>,
    lo: StreamId,
    hi: StreamId,
    rev: bool,
    node: Option<&'a Node>,
    /// Forwards: the walk over the current node.
    cursor: Option<Cursor<'a>>,
    /// Backwards: the current node's entries still to yield, the next last.
    pending: Vec<Raw>,
}

impl Range<'_> {
    /// The next live entry in range of the current node, if any.
    fn next_here(&mut self) -> Option<Raw> {
        if self.rev {
            return self.pending.pop();
        }
        let (lo, hi) = (self.lo, self.hi);
        let c = self.cursor.as_mut()?;
        let r = c.find(|r| !r.deleted() && r.id >= lo)?;
        if r.id > hi {
            // Nodes never overlap: nothing further is in range.
            self.cursor = None;
            self.nodes = Default::default();
            return None;
        }
        Some(r)
    }
}

impl Iterator for Range<'_> {
    type Item = (StreamId, Fields);

    fn next(&mut self) -> Option<(StreamId, Fields)> {
        loop {
            if let Some(n) = self.node {
                if let Some(r) = self.next_here() {
                    return Some((r.id, n.fields(&r)));
                }
            }
            let (key, node) = if self.rev {
                self.nodes.next_back()?
            } else {
                self.nodes.next()?
            };
            if self.rev {
                let (lo, hi) = (self.lo, self.hi);
                self.pending = node
                    .iter(*key)
                    .filter(|r| !r.deleted() && lo <= r.id && r.id <= hi)
                    .collect();
            } else {
                self.cursor = Some(node.iter(*key));
            }
            self.node = Some(node);
        }
    }
}

impl StreamValue {
    pub fn len(&self) -> usize {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The node holding `id` if any: its key and the node.
    fn node_of(&self, id: StreamId) -> Option<(StreamId, &Node)> {
        self.nodes.range(..=id).next_back().map(|(k, n)| (*k, n))
    }

    /// The first or last live entry's ID.
    fn edge(&self, last: bool) -> Option<StreamId> {
        let (key, n) = if last {
            self.nodes.iter().next_back()?
        } else {
            self.nodes.iter().next()?
        };
        if last && n.live == n.total && n.total > 0 {
            // No entry of the node is deleted: its last one is live.
            return Some(n.last);
        }
        let mut live = n.iter(*key).filter(|r| !r.deleted());
        if last {
            live.last().map(|r| r.id)
        } else {
            live.next().map(|r| r.id)
        }
    }

    /// The last live entry's ID, without its fields: O(1) unless the last
    /// node holds deleted entries (XREADGROUP asks it on every `>` read).
    pub fn last_live_id(&self) -> Option<StreamId> {
        self.edge(true)
    }

    pub fn first_id(&self) -> StreamId {
        self.edge(false).unwrap_or_default()
    }

    /// The entry with ID `id`, if present.
    pub fn entry(&self, id: StreamId) -> Option<Fields> {
        let (key, n) = self.node_of(id)?;
        let r = n.iter(key).find(|r| r.id >= id).filter(|r| r.id == id)?;
        (!r.deleted()).then(|| n.fields(&r))
    }

    pub fn first(&self) -> Option<(StreamId, Fields)> {
        self.range(StreamId::MIN, StreamId::MAX, false).next()
    }

    pub fn last(&self) -> Option<(StreamId, Fields)> {
        self.range(StreamId::MIN, StreamId::MAX, true).next()
    }

    /// Entries with IDs in `lo..=hi`, forwards or backwards.
    pub fn range(&self, lo: StreamId, hi: StreamId, rev: bool) -> Range<'_> {
        let from = self.node_of(lo).map_or(lo, |(k, _)| k);
        let nodes = if lo > hi {
            self.nodes.range(StreamId::MAX..StreamId::MAX)
        } else {
            self.nodes.range(from..=hi)
        };
        Range {
            nodes,
            lo,
            hi,
            rev,
            node: None,
            cursor: None,
            pending: Vec::new(),
        }
    }

    /// Appends an entry whose ID is above the last one (checked by the
    /// caller), opening a node as Redis's streamAppendItem would.
    pub fn append(&mut self, id: StreamId, f: Fields, max_bytes: usize, max_entries: usize) {
        let size = f.bytes() + 8;
        let max_bytes = if max_bytes == 0 { 1 << 30 } else { max_bytes };
        let open = match self.nodes.iter_mut().next_back() {
            Some((_, n)) => {
                // (A node's counters are u32: it closes before they wrap.)
                let full = n.bytes + size >= max_bytes
                    || (max_entries > 0 && n.total as usize >= max_entries)
                    || n.total == u32::MAX;
                if full {
                    n.seal();
                }
                full
            }
            None => true,
        };
        if open {
            let mut n = Node::open(&f);
            n.bytes = NODE_BASE;
            self.nodes.insert(id, n);
        }
        let (key, n) = self.nodes.iter_mut().next_back().expect("a node");
        n.push(*key, id, &f);
        n.bytes += size;
        self.length += 1;
        self.last_id = id;
        self.entries_added += 1;
    }

    /// Puts an entry whose ID may be below the last one, absent here
    /// (active replication: a peer's entry that arrives after later ones
    /// of this node, `replication/active/stream_facts.rs`). Above the last
    /// node's entries it is appended; else the node it falls in is rebuilt
    /// with it (O(entries of one node)), split by `max_entries`. The last
    /// ID stays the larger of the two; `entries-added` is the caller's.
    pub fn insert(&mut self, id: StreamId, f: Fields, max_bytes: usize, max_entries: usize) {
        let tail = self.nodes.iter().next_back().map(|(_, n)| n.last);
        if tail.is_none_or(|last| id > last) {
            let (last_id, added) = (self.last_id, self.entries_added);
            self.append(id, f, max_bytes, max_entries);
            (self.last_id, self.entries_added) = (last_id.max(id), added);
            return;
        }
        let key = match self.node_of(id) {
            Some((k, _)) => k,
            None => *self.nodes.keys().next().expect("a node"),
        };
        let n = self.nodes.remove(&key).expect("the node");
        let mut es: Vec<(StreamId, Fields)> = (n.iter(key).filter(|r| !r.deleted()))
            .map(|r| (r.id, n.fields(&r)))
            .collect();
        self.length -= es.len();
        let at = es.partition_point(|e| e.0 < id);
        es.insert(at, (id, f));
        let per_node = if max_entries == 0 {
            es.len()
        } else {
            max_entries
        };
        for part in es.chunks(per_node) {
            self.load_node(part[0].0, part.to_vec());
        }
        self.last_id = self.last_id.max(id);
    }

    /// Removes one entry (XDEL); whether it was there.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some((key, n)) = self.node_of(id) else {
            return false;
        };
        let Some(r) = n.iter(key).find(|r| r.id == id && !r.deleted()) else {
            return false;
        };
        let n = self.nodes.get_mut(&key).expect("the node");
        n.mark_deleted(&r);
        if n.live == 0 {
            self.nodes.remove(&key);
        }
        self.length -= 1;
        true
    }

    /// Trims from the oldest entry (streamTrim): whole nodes while they
    /// may go, then, unless `approx`, single entries. `limit` (0: none)
    /// caps the entries removed with whole nodes. Returns how many went.
    pub fn trim(&mut self, how: Trim, approx: bool, limit: usize) -> usize {
        let mut removed = 0;
        while let Some((&key, node)) = self.nodes.iter().next() {
            let live = node.live as usize;
            if let Trim::MaxLen(m) = how {
                if self.len() as u64 <= m {
                    break;
                }
            }
            let whole = match how {
                Trim::MaxLen(m) => (self.len() - live) as u64 >= m,
                Trim::MinId(min) => node.last < min,
            };
            if whole {
                if limit > 0 && removed + live > limit {
                    break;
                }
                self.nodes.remove(&key);
                self.length -= live;
                removed += live;
                continue;
            }
            if !approx {
                removed += self.trim_node(key, how);
            }
            break;
        }
        removed
    }

    /// Deletes the entries of node `key` (which keeps some) that `how`
    /// removes, from its first on; how many.
    fn trim_node(&mut self, key: StreamId, how: Trim) -> usize {
        let n = self.nodes.get_mut(&key).expect("the node");
        let mut removed = 0;
        for r in n.raws(key).into_iter().filter(|r| !r.deleted()) {
            let keep = match how {
                Trim::MaxLen(m) => (self.length - removed) as u64 <= m,
                Trim::MinId(min) => r.id >= min,
            };
            if keep {
                break;
            }
            n.mark_deleted(&r);
            removed += 1;
        }
        if n.live == 0 {
            self.nodes.remove(&key);
        }
        self.length -= removed;
        removed
    }

    /// The entries grouped by node: (node key, live entries), for the RDB.
    pub fn nodes(&self) -> impl Iterator<Item = (StreamId, Vec<(StreamId, Fields)>)> + '_ {
        self.nodes.iter().map(|(k, n)| {
            let es = n.raws(*k).into_iter().filter(|r| !r.deleted());
            (*k, es.map(|r| (r.id, n.fields(&r))).collect())
        })
    }

    /// A stream rebuilt from an RDB node by node (the IDs checked
    /// increasing and not below `master` by the caller).
    pub fn load_node(&mut self, master: StreamId, entries: Vec<(StreamId, Fields)>) {
        let Some(first) = entries.first() else {
            return;
        };
        let mut n = Node::open(&first.1);
        n.bytes = NODE_BASE;
        for (id, f) in &entries {
            n.push(master, *id, f);
            n.bytes += f.bytes() + 8;
        }
        n.seal();
        self.length += entries.len();
        self.nodes.insert(master, n);
    }

    pub fn mem_usage(&self) -> usize {
        let node = std::mem::size_of::<(StreamId, Node)>() + 16;
        self.nodes.values().map(|n| n.heap() + node).sum::<usize>() + self.groups_mem()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_live_id_skips_deleted_entries() {
        let mut s = StreamValue::default();
        assert_eq!(s.last_live_id(), None);
        for ms in 1..=5 {
            let f = Fields::pack([&b"f"[..], b"v"].into_iter());
            s.append(StreamId::new(ms, 0), f, 4096, 3);
        }
        assert_eq!(s.last_live_id(), Some(StreamId::new(5, 0)));
        assert!(s.delete(StreamId::new(5, 0)));
        assert_eq!(s.last_live_id(), Some(StreamId::new(4, 0)));
        assert!(s.delete(StreamId::new(4, 0)));
        // The last node (entries 4 and 5) is gone: the one before answers.
        assert_eq!(s.last_live_id(), Some(StreamId::new(3, 0)));
        assert_eq!(s.last().map(|e| e.0), s.last_live_id());
    }

    /// Entries put below the last ID land in order, in the node they fall
    /// in (split at the node limit), the last ID and count unchanged.
    #[test]
    fn an_insert_below_the_last_id_lands_in_order() {
        let f = || Fields::pack([&b"f"[..], b"v"].into_iter());
        let mut s = StreamValue::default();
        for ms in [10, 20, 30, 40, 50] {
            s.append(StreamId::new(ms, 0), f(), 4096, 3);
        }
        s.insert(StreamId::new(25, 1), f(), 4096, 3);
        s.insert(StreamId::new(5, 1), f(), 4096, 3);
        s.insert(StreamId::new(60, 1), f(), 4096, 3);
        let ids: Vec<u64> = (s.range(StreamId::MIN, StreamId::MAX, false))
            .map(|e| e.0.ms)
            .collect();
        assert_eq!(ids, vec![5, 10, 20, 25, 30, 40, 50, 60]);
        assert_eq!(s.len(), 8);
        assert_eq!(s.last_id, StreamId::new(60, 1));
        assert_eq!(s.entries_added, 5);
        assert!(s.nodes.values().all(|n| n.total <= 3));
        assert!(s.delete(StreamId::new(25, 1)));
        assert_eq!(s.entry(StreamId::new(5, 1)), Some(f()));
    }
}
