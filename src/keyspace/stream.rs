//! Stream values (Redis's t_stream.c data): entries ordered by ID, each a
//! list of field-value pairs, plus the metadata Redis keeps (last ID,
//! entries added, the largest deleted ID) and the consumer groups
//! (`stream_groups.rs`).
//!
//! Entries live in a B-tree keyed by ID, their fields and values packed in
//! one allocation. Beside them the stream keeps the *node* structure Redis's
//! radix tree of listpacks has: which entry opened each node, and how many
//! entries (live and deleted) and bytes the node holds, split by the same
//! `stream-node-max-entries` / `stream-node-max-bytes` rule. Approximate
//! trimming (`MAXLEN ~`, `MINID ~`) removes whole nodes, as Redis does, so
//! it leaves the same entries; the RDB writer emits one listpack per node.
//! Why not Redis's listpacks themselves: the packed B-tree costs a few
//! words more per entry but needs no listpack editing on XDEL; the memory
//! against Redis is measured in docs/STREAMS-HLL-GEO.md.

use std::collections::BTreeMap;

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

    fn bytes(&self) -> usize {
        self.0.len()
    }
}

/// A node of Redis's layout: the entries from its master ID on.
#[derive(Clone, Debug, PartialEq, Default)]
struct Node {
    live: usize,
    /// Live and deleted: what Redis's split rule counts.
    total: usize,
    bytes: usize,
}

/// How a trim decides what goes (XADD's and XTRIM's options).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trim {
    MaxLen(u64),
    MinId(StreamId),
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct StreamValue {
    entries: BTreeMap<StreamId, Fields>,
    nodes: BTreeMap<StreamId, Node>,
    pub last_id: StreamId,
    pub entries_added: u64,
    pub max_deleted: StreamId,
    /// Consumer groups by name (`stream_groups.rs`).
    pub groups: BTreeMap<Vec<u8>, super::stream_groups::Group>,
}

/// Redis's listpack header and an entry's fixed fields, roughly: what the
/// byte half of the node split rule counts.
const NODE_BASE: usize = 16;

impl StreamValue {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn first_id(&self) -> StreamId {
        self.entries.keys().next().copied().unwrap_or_default()
    }

    /// The entry with ID `id`, if present.
    pub fn entry(&self, id: StreamId) -> Option<&Fields> {
        self.entries.get(&id)
    }

    pub fn first(&self) -> Option<(StreamId, &Fields)> {
        self.entries.iter().next().map(|(k, v)| (*k, v))
    }

    pub fn last(&self) -> Option<(StreamId, &Fields)> {
        self.entries.iter().next_back().map(|(k, v)| (*k, v))
    }

    /// Entries with IDs in `lo..=hi`, forwards or backwards.
    pub fn range(
        &self,
        lo: StreamId,
        hi: StreamId,
        rev: bool,
    ) -> Box<dyn Iterator<Item = (StreamId, &Fields)> + '_> {
        if lo > hi {
            return Box::new(std::iter::empty());
        }
        let r = self.entries.range(lo..=hi).map(|(k, v)| (*k, v));
        if rev {
            Box::new(r.rev())
        } else {
            Box::new(r)
        }
    }

    /// Appends an entry whose ID is above the last one (checked by the
    /// caller), opening a node as Redis's streamAppendItem would.
    pub fn append(&mut self, id: StreamId, f: Fields, max_bytes: usize, max_entries: usize) {
        let size = f.bytes() + 8;
        let max_bytes = if max_bytes == 0 { 1 << 30 } else { max_bytes };
        let open = match self.nodes.iter_mut().next_back() {
            Some((_, n)) => {
                n.bytes + size >= max_bytes || (max_entries > 0 && n.total >= max_entries)
            }
            None => true,
        };
        if open {
            self.nodes.insert(id, Node::default());
        }
        let n = self.nodes.values_mut().next_back().expect("a node");
        n.live += 1;
        n.total += 1;
        n.bytes += size + if open { NODE_BASE } else { 0 };
        self.entries.insert(id, f);
        self.last_id = id;
        self.entries_added += 1;
    }

    /// Removes one entry (XDEL); whether it was there.
    pub fn delete(&mut self, id: StreamId) -> bool {
        if self.entries.remove(&id).is_none() {
            return false;
        }
        let master = *self.nodes.range(..=id).next_back().expect("a node").0;
        let n = self.nodes.get_mut(&master).expect("the node");
        n.live -= 1;
        if n.live == 0 {
            self.nodes.remove(&master);
        }
        true
    }

    /// The entries of the node opened by `master`.
    fn node_ids(&self, master: StreamId) -> Vec<StreamId> {
        let end = self.nodes.range(master..).nth(1).map(|(k, _)| *k);
        let r = self.entries.range(master..);
        match end {
            Some(e) => r.take_while(|(k, _)| **k < e).map(|(k, _)| *k).collect(),
            None => r.map(|(k, _)| *k).collect(),
        }
    }

    /// Trims from the oldest entry (streamTrim): whole nodes while they
    /// may go, then, unless `approx`, single entries. `limit` (0: none)
    /// caps the entries removed with whole nodes. Returns how many went.
    pub fn trim(&mut self, how: Trim, approx: bool, limit: usize) -> usize {
        let mut removed = 0;
        while let Some((&master, node)) = self.nodes.iter().next() {
            let live = node.live;
            if let Trim::MaxLen(m) = how {
                if self.len() as u64 <= m {
                    break;
                }
            }
            let ids = self.node_ids(master);
            let whole = match how {
                Trim::MaxLen(m) => (self.len() - live) as u64 >= m,
                Trim::MinId(min) => ids.last().is_some_and(|l| *l < min),
            };
            if whole {
                if limit > 0 && removed + live > limit {
                    break;
                }
                for id in ids {
                    self.entries.remove(&id);
                }
                self.nodes.remove(&master);
                removed += live;
                continue;
            }
            if approx {
                break;
            }
            for id in ids {
                let keep = match how {
                    Trim::MaxLen(m) => self.len() as u64 <= m,
                    Trim::MinId(min) => id >= min,
                };
                if keep {
                    break;
                }
                self.delete(id);
                removed += 1;
            }
            break;
        }
        removed
    }

    /// The entries grouped by node: (master ID, entries), for the RDB.
    pub fn nodes(&self) -> Vec<(StreamId, Vec<(StreamId, &Fields)>)> {
        let masters: Vec<StreamId> = self.nodes.keys().copied().collect();
        masters
            .iter()
            .map(|&m| {
                let ids = self.node_ids(m);
                let es = ids.iter().map(|id| (*id, &self.entries[id])).collect();
                (m, es)
            })
            .collect()
    }

    /// A stream rebuilt from an RDB node by node (the IDs checked
    /// increasing by the caller).
    pub fn load_node(&mut self, master: StreamId, entries: Vec<(StreamId, Fields)>) {
        if entries.is_empty() {
            return;
        }
        let mut n = Node::default();
        for (id, f) in entries {
            n.live += 1;
            n.total += 1;
            n.bytes += f.bytes() + 8;
            self.entries.insert(id, f);
        }
        n.bytes += NODE_BASE;
        self.nodes.insert(master, n);
    }

    pub fn mem_usage(&self) -> usize {
        self.entries.values().map(|f| f.bytes() + 48).sum::<usize>()
            + 64 * self.nodes.len()
            + self.groups_mem()
    }
}
