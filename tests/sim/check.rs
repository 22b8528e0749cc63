//! What the simulator checks, and the record it checks against.
//!
//! During a run: every client command's writes are logged with the state
//! each left its keys in at its origin, right after it ran ([`History`]:
//! the version, which is the write's stamp, and the value); a version
//! must name one state wherever it is logged. Every record a node applies
//! is counted ([`Applied`]): no key version is installed twice on one node
//! (between restarts) by two deliveries, which is what a write applied
//! twice would do.
//!
//! After the run, with every link healed and the network drained, the
//! checks of [`CHECKS`] run in order: every node holds the same data
//! (keys, values, expiry, versions), and every key holds what the merge
//! rules expect from the writes acknowledged to clients ([`Rules`]; today
//! whole-key last-writer-wins: the state of the write with the highest
//! stamp, so a deleted key may only be present if re-written after its
//! delete). Checks are functions of the final [`World`]: a new merge rule
//! adds a [`Rules`] impl (or a check), not a new simulator.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lattice::facade::effects::{Effect, MERGED_BASE};
use lattice::facade::keyspace::{Value, SHARDS};
use lattice::facade::server::Server;

use super::node::Node;
use crate::workload::canonical;

/// A key: its database and name.
pub type Key = (usize, Vec<u8>);

/// A key as a node holds it: its version (a tombstone's or flush's when
/// absent, 0 for never written) and, if present, its type, contents
/// (`workload::canonical`) and expiry deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyState {
    pub version: u64,
    pub value: Option<(String, Vec<u8>, u64)>,
}

/// A write acknowledged to a client, as its origin saw it.
#[derive(Clone, Debug)]
pub struct Logged {
    pub node: usize,
    pub event: usize,
    /// The record's command (a rule for counters sums their arguments).
    pub argv: Vec<Vec<u8>>,
    /// The key right after the command ran at its origin.
    pub after: KeyState,
}

/// Every acknowledged write, per key and version; and every flush.
#[derive(Default)]
pub struct History {
    pub writes: BTreeMap<Key, BTreeMap<u64, Logged>>,
    /// (database, or None for all, stamp).
    pub flushes: Vec<(Option<usize>, u64)>,
    /// Keys a write found merging at its origin (a counter: its base
    /// carries `effects::MERGED_BASE`).
    pub counters: BTreeSet<Key>,
}

impl History {
    /// Logs the writes of one client command run on `node` (its
    /// `effects`); Err if a version already logged now names another state.
    pub fn note_command(
        &mut self,
        node: &Node,
        effects: &[Effect],
        event: usize,
    ) -> Result<(), String> {
        for e in effects {
            match e.argv[0].to_ascii_uppercase().as_slice() {
                b"FLUSHDB" => self.flushes.push((Some(e.db), e.version)),
                b"FLUSHALL" => self.flushes.push((None, e.version)),
                _ => {}
            }
            self.counters
                .extend(merging_keys(e).into_iter().map(|k| (e.db, k)));
            for key in written_keys(e) {
                let after = key_state(&node.srv, e.db, &key);
                // A key the command only read keeps an older version.
                if after.version < e.version {
                    continue;
                }
                let logged = Logged {
                    node: node.idx,
                    event,
                    argv: e.argv.clone(),
                    after: after.clone(),
                };
                let versions = self.writes.entry((e.db, key.clone())).or_default();
                if let Some(was) = versions.get(&after.version) {
                    if was.after != after {
                        return Err(format!(
                            "version {} of {} names two states: {:?} (node {}, event {}) and {:?} (node {})",
                            after.version, show_key(&(e.db, key)), was.after, was.node, was.event, after, node.idx
                        ));
                    }
                    continue;
                }
                versions.insert(after.version, logged);
            }
        }
        Ok(())
    }

    /// A node restarted from its RDB: each key with an expiry that the
    /// load dropped (it expired while the node was stopped) and left a
    /// tombstone for is a deletion that node made, as the sweep's expired
    /// keys are: logged as a DEL at the tombstone's stamp. Under active
    /// replication the load stamps it right after the expired version
    /// (docs/MERGE-DESIGN.md section 8 item 28), which also beats a write of
    /// another node concurrent with that version in the same millisecond
    /// (seed 11594): a deletion the rules must know of.
    pub fn note_load_deletions(
        &mut self,
        node: &Node,
        before: &BTreeMap<Key, KeyState>,
        event: usize,
    ) {
        for (key, was) in before {
            let Some((_, _, expire_at)) = &was.value else {
                continue;
            };
            let now = key_state(&node.srv, key.0, &key.1);
            if *expire_at == 0 || now.value.is_some() || now.version <= was.version {
                continue;
            }
            let logged = Logged {
                node: node.idx,
                event,
                argv: vec![b"DEL".to_vec(), key.1.clone()],
                after: now.clone(),
            };
            let versions = self.writes.entry(key.clone()).or_default();
            versions.entry(now.version).or_insert(logged);
        }
    }
}

/// The keys a record writes (or opened): those it names as bases, or a
/// DEL's without bases (a key state applied as a tombstone).
pub fn written_keys(e: &Effect) -> BTreeSet<Vec<u8>> {
    let mut keys: BTreeSet<Vec<u8>> = e
        .bases
        .iter()
        .filter_map(|&(i, _)| e.argv.get((i & !MERGED_BASE) as usize).cloned())
        .collect();
    let name = e.argv[0].to_ascii_uppercase();
    if keys.is_empty() && (name == b"DEL" || name == b"UNLINK") {
        keys.extend(e.argv[1..].iter().cloned());
    }
    keys
}

/// The keys a record's bases flag as merging (`effects::MERGED_BASE`).
fn merging_keys(e: &Effect) -> BTreeSet<Vec<u8>> {
    e.bases
        .iter()
        .filter(|&&(i, _)| i & MERGED_BASE != 0)
        .filter_map(|&(i, _)| e.argv.get((i & !MERGED_BASE) as usize).cloned())
        .collect()
}

/// Whether `key` merges on `srv` (it holds merge state for it).
pub fn merges(srv: &Server, db: usize, key: &[u8]) -> bool {
    let slot = srv.keyspace.slot(key);
    srv.keyspace.db(db).lock(slot.shard).merges(key)
}

/// The version of every word of `words` read as a key, in each of the
/// first `dbs` databases (a tombstone's too): what a command that sent
/// nothing to its peers must leave as it was, since no peer would hear of
/// a stamp it took (full seed 43,263: a refused XADD stamped a tombstone).
pub fn versions_named(srv: &Server, dbs: usize, words: &[&[u8]]) -> Vec<u64> {
    let ks = &srv.keyspace;
    let mut out = Vec::with_capacity(dbs * words.len());
    for db in 0..dbs.min(ks.num_dbs()) {
        for w in words {
            let slot = ks.slot(w);
            out.push(ks.db(db).lock(slot.shard).version_of(slot.hash, w));
        }
    }
    out
}

/// `key` as `srv` holds it now (expired or not: what the table holds).
pub fn key_state(srv: &Server, db: usize, key: &[u8]) -> KeyState {
    let ks = &srv.keyspace;
    let slot = ks.slot(key);
    let g = ks.db(db).lock(slot.shard);
    KeyState {
        version: g.version_of(slot.hash, key),
        value: g.get_raw(slot.hash, key).map(|e| {
            let t = e.value.type_name().to_string();
            (t, canonical(&e.value), e.expire_at())
        }),
    }
}

/// A key version installed: database, key, version.
type Installed = (usize, Vec<u8>, u64);

/// Per node (since its last start), each key version it installed from a
/// peer's record, and the delivery that did.
#[derive(Default)]
pub struct Applied {
    seen: Vec<HashMap<Installed, usize>>,
}

impl Applied {
    /// A node (re)started: it has applied nothing yet.
    pub fn reset(&mut self, node: usize) {
        if self.seen.len() <= node {
            self.seen.resize_with(node + 1, HashMap::new);
        }
        self.seen[node].clear();
    }

    /// The effects of delivery `delivery` on `node` (`srv`): Err if one
    /// installs a key version an earlier delivery installed (a write
    /// applied twice). Not for a key that merges there: a counter converges
    /// by joining key states, each written at the higher of the two
    /// versions, so one version may be written again with what a later
    /// state added (docs/MERGE-DESIGN.md; its writes are never replayed).
    pub fn note(
        &mut self,
        (node, srv): (usize, &Server),
        effects: &[Effect],
        delivery: usize,
    ) -> Result<(), String> {
        let seen = &mut self.seen[node];
        for e in effects {
            for key in written_keys(e) {
                if merges(srv, e.db, &key) {
                    continue;
                }
                let k = (e.db, key, e.version);
                match seen.get(&k) {
                    Some(&d) if d != delivery => {
                        return Err(format!(
                            "node {node} applied version {} of {} twice (deliveries {d} and {delivery}): {}",
                            e.version,
                            show_key(&(k.0, k.1.clone())),
                            crate::workload::show(&e.argv)
                        ));
                    }
                    Some(_) => {}
                    None => {
                        seen.insert(k, delivery);
                    }
                }
            }
        }
        Ok(())
    }
}

/// What the final checks see.
pub struct World<'a> {
    /// The nodes (for checks that ask them more than their data).
    pub nodes: &'a [Node],
    pub history: &'a History,
    /// Each node's data: every key it holds with a deadline after the
    /// horizon (or none), with its state.
    pub dumps: Vec<BTreeMap<Key, KeyState>>,
    /// The furthest any node clock read (ms). A key whose deadline is at or before
    /// it has expired for some node, which deletes it (and its delete
    /// spreads) or never held it; the others drop it when their own
    /// clocks pass the deadline: each node expires keys by its own clock,
    /// so until then, with skewed clocks, such a key may be live on one
    /// node and gone on another. The checks compare what the nodes hold
    /// beyond that horizon, where every clock agrees.
    pub horizon: u64,
}

/// `state` unless its deadline is at or before `now_ms`.
pub fn live(state: Option<KeyState>, now_ms: u64) -> Option<KeyState> {
    state.filter(|s| s.value.as_ref().is_some_and(|v| v.2 == 0 || v.2 > now_ms))
}

/// Every key `srv` holds whose deadline is after `now_ms` (or none).
pub fn live_dump(srv: &Server, now_ms: u64) -> BTreeMap<Key, KeyState> {
    dump(srv)
        .into_iter()
        .filter_map(|(k, s)| live(Some(s), now_ms).map(|s| (k, s)))
        .collect()
}

/// Every key `srv` holds, in every database.
pub fn dump(srv: &Server) -> BTreeMap<Key, KeyState> {
    let ks = &srv.keyspace;
    let mut m = BTreeMap::new();
    for db in 0..ks.num_dbs() {
        for sh in 0..SHARDS {
            let g = ks.db(db).lock(sh);
            for e in g.iter() {
                let t = e.value.type_name().to_string();
                let value = Some((t, canonical(&e.value), e.expire_at()));
                let state = KeyState {
                    version: e.version,
                    value,
                };
                m.insert((db, e.key.to_vec()), state);
            }
        }
    }
    m
}

/// A final check: Ok, or what is wrong.
pub type Check = fn(&World) -> Result<(), String>;

/// The final checks, in order.
pub const CHECKS: &[(&str, Check)] = &[
    ("converged", converged),
    ("member TTLs", member_ttls_converged),
    ("merge rules", merge_rules),
];

/// The TTLs of `key`'s members on `srv` (its members present only).
fn member_ttls(srv: &Server, key: &Key) -> Vec<(Vec<u8>, u64)> {
    let ks = &srv.keyspace;
    let slot = ks.slot(&key.1);
    let g = ks.db(key.0).lock(slot.shard);
    let (Some(e), Some(t)) = (g.get_raw(slot.hash, &key.1), g.member_ttls(&key.1)) else {
        return Vec::new();
    };
    let present = |m: &[u8]| match &e.value {
        Value::Set(s) => s.contains(m),
        Value::Hash(h) => h.contains(m),
        Value::ZSet(z) => z.score(m).is_some(),
        _ => false,
    };
    let mut out: Vec<(Vec<u8>, u64)> = (t.iter())
        .filter(|(m, _)| present(m))
        .map(|(m, at)| (m.to_vec(), at))
        .collect();
    out.sort();
    out
}

/// Every node holds the same member TTLs on the keys it holds (beyond the
/// horizon): a member's TTL merges as the key's (DECISIONS 305).
fn member_ttls_converged(w: &World) -> Result<(), String> {
    let keys: BTreeSet<&Key> = w.dumps.iter().flat_map(|d| d.keys()).collect();
    for k in keys {
        let first = member_ttls(&w.nodes[0].srv, k);
        for (i, n) in w.nodes.iter().enumerate().skip(1) {
            let other = member_ttls(&n.srv, k);
            if first != other {
                let meta = |n: usize| merge_state(&w.nodes[n].srv, k);
                return Err(format!(
                    "{}: node 0's member TTLs {first:?}, node {i}'s {other:?} (merge states: {:?} / {:?})",
                    show_key(k),
                    meta(0),
                    meta(i)
                ));
            }
        }
    }
    Ok(())
}

/// A key's merge state as DEBUG MERGEINFO describes it, on one line.
pub fn merge_state(srv: &Server, k: &Key) -> Option<String> {
    let slot = srv.keyspace.slot(&k.1);
    let g = srv.keyspace.db(k.0).lock(slot.shard);
    g.merge_meta(&k.1).map(|m| m.describe().join(" | "))
}

/// Every node holds the same keys with the same values, expiry and
/// versions (beyond the horizon).
fn converged(w: &World) -> Result<(), String> {
    let first = &w.dumps[0];
    for (i, d) in w.dumps.iter().enumerate().skip(1) {
        let keys: BTreeSet<&Key> = first.keys().chain(d.keys()).collect();
        for k in keys {
            if first.get(k) != d.get(k) {
                let meta = |n: usize| merge_state(&w.nodes[n].srv, k);
                return Err(format!(
                    "{}: node 0 holds {:?}, node {i} holds {:?} (merge states: {:?} / {:?})",
                    show_key(k),
                    first.get(k),
                    d.get(k),
                    meta(0),
                    meta(i)
                ));
            }
        }
    }
    Ok(())
}

/// What a key must hold at the end under the merge rules, given the
/// results acknowledged writes left at their origins (`writes`, by
/// version) and the flushes of its database: `None` for absent.
///
/// This is where the expected value under the merge rules lives. Today
/// one rule covers every key: whole-key last-writer-wins, the state of
/// the write with the highest stamp (a stamp orders by time, then
/// logical count, then node slot), a flush counting as a delete stamped
/// with the flush's stamp. Rules of other kinds (counters: the sum of
/// the acknowledged increments; sets and hashes: per element) go in as
/// other impls, chosen per key by what was written to it.
pub trait Rules {
    fn expected(
        &self,
        key: &Key,
        writes: &BTreeMap<u64, Logged>,
        flushes: &[u64],
    ) -> Option<KeyState>;
}

/// Whole-key last-writer-wins (docs/ACTIVE-ACTIVE-DESIGN.md section 3).
pub struct WholeKeyLww;

impl Rules for WholeKeyLww {
    fn expected(
        &self,
        _key: &Key,
        writes: &BTreeMap<u64, Logged>,
        flushes: &[u64],
    ) -> Option<KeyState> {
        let last_write = writes.last_key_value();
        let last_flush = flushes.iter().copied().max().unwrap_or(0);
        match last_write {
            Some((&v, w)) if v > last_flush => w.after.value.is_some().then(|| w.after.clone()),
            _ => None,
        }
    }
}

/// Every key of every node holds what [`WholeKeyLww`] expects, but for
/// counters (a write found the key merging, or a node holds merge state
/// for it at the end): their rule (docs/MERGE-DESIGN.md) is not written here yet,
/// so they are checked by `converged` only.
fn merge_rules(w: &World) -> Result<(), String> {
    let rules = WholeKeyLww;
    let mut keys: BTreeSet<&Key> = w.history.writes.keys().collect();
    keys.extend(w.dumps.iter().flat_map(|d| d.keys()));
    let none = BTreeMap::new();
    let counter = |k: &Key| {
        w.history.counters.contains(k) || w.nodes.iter().any(|n| merges(&n.srv, k.0, &k.1))
    };
    for key in keys.into_iter().filter(|k| !counter(k)) {
        let writes = w.history.writes.get(key).unwrap_or(&none);
        let flushes: Vec<u64> = w
            .history
            .flushes
            .iter()
            .filter(|(db, _)| db.is_none_or(|db| db == key.0))
            .map(|&(_, s)| s)
            .collect();
        let want = live(rules.expected(key, writes, &flushes), w.horizon);
        for (i, d) in w.dumps.iter().enumerate() {
            if d.get(key) != want.as_ref() {
                let last = writes
                    .last_key_value()
                    .map(|(_, l)| (l.node, l.event, crate::workload::show(&l.argv)));
                return Err(format!(
                    "{}: node {i} holds {:?}, the rules expect {want:?} (last write: {last:?})",
                    show_key(key),
                    d.get(key)
                ));
            }
        }
    }
    Ok(())
}

pub fn show_key(k: &Key) -> String {
    format!("db {} key {}", k.0, String::from_utf8_lossy(&k.1))
}
