//! How a link applies a peer's key state where the key merges
//! (keyspace/merge/, docs/MERGE.md): a counter's parts and a collection's
//! elements join with ours instead of the newer state replacing ours. The
//! join's result is written through ordinary commands replayed with its
//! stamp (SET, DEL, SADD, SREM, HSET, HDEL, ZADD, ZREM), so the AOF and
//! plain replicas see ordinary writes; then the joined state is stored.
//! Keys of different types on the two sides do not merge: the newer state
//! replaces (whole-key last-writer-wins, the caller's path).

use super::applying;
use crate::effects::EffectRef;
use crate::keyspace::merge::elements::{is_collection, Change, Elements, Item};
use crate::keyspace::merge::{Base, Counter, Merged, Meta};
use crate::keyspace::Value;
use crate::log_warning;

use super::link::Link;

/// What a state says of its key's type, for deciding how it merges.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Absent,
    Set,
    Hash,
    ZSet,
    /// A string or a list.
    Other,
}

fn kind(v: Option<&Value>) -> Kind {
    match v {
        None => Kind::Absent,
        Some(Value::Set(_)) => Kind::Set,
        Some(Value::Hash(_)) => Kind::Hash,
        Some(Value::ZSet(_)) => Kind::ZSet,
        Some(_) => Kind::Other,
    }
}

/// A DUMP payload's value (None: empty, the key is absent, or damaged).
fn payload_value(payload: &[u8]) -> Option<Value> {
    if payload.is_empty() {
        return None;
    }
    let limits = crate::keyspace::encoding::EncodingLimits::defaults();
    crate::persistence::rdb::decode::decode_dump_payload(payload, &limits).ok()
}

/// The local side of a merge, read under the key's shard lock.
struct Local {
    meta: Option<Meta>,
    version: u64,
    kind: Kind,
    base: Base,
    at: u64,
}

impl Link<'_> {
    /// A key state where the key may merge. `merges`: the key has merge
    /// state here. Returns whether the join changed anything here, or None
    /// when the key does not merge (the caller applies the newer state).
    pub(super) fn merge_state(
        &mut self,
        db: usize,
        key: &[u8],
        (stamp, at): (u64, u64),
        (payload, merge): (&[u8], &[u8]),
        merges: bool,
    ) -> Option<bool> {
        let remote_meta = match merge {
            b"" => None,
            m => match Meta::decode(m) {
                Ok(m) => Some(m),
                Err(e) => {
                    log_warning!("A key state from an active peer is damaged: {e}");
                    return Some(false);
                }
            },
        };
        let remote_value = payload_value(payload);
        let remote_kind = kind(remote_value.as_ref());
        let collection = remote_value.as_ref().is_some_and(is_collection);
        if !merges && remote_meta.is_none() && !collection && !self.local_is_collection(db, key) {
            return None;
        }
        let local = self.read_local(db, key);
        let kinds = [local.kind, remote_kind];
        let elements = kinds
            .iter()
            .any(|k| matches!(k, Kind::Set | Kind::Hash | Kind::ZSet))
            || matches!(remote_meta, Some(Meta::Elements(_)))
            || matches!(local.meta, Some(Meta::Elements(_)));
        let same_type = local.kind == remote_kind || kinds.contains(&Kind::Absent);
        if elements {
            if !same_type || kinds.contains(&Kind::Other) {
                return None;
            }
            let remote = match remote_meta {
                Some(Meta::Elements(e)) => e,
                _ => Elements::current(None, stamp, remote_value.as_ref()),
            };
            return Some(self.merge_elements(db, key, local, &remote, remote_value.as_ref()));
        }
        let remote = match remote_meta {
            Some(Meta::Counter(c)) => c,
            _ => Counter::current(None, stamp, Base::of(remote_value.as_ref())),
        };
        Some(self.merge_counter(db, key, local, &remote, (at, payload)))
    }

    fn local_is_collection(&self, db: usize, key: &[u8]) -> bool {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let g = ks.db(db).lock(slot.shard);
        g.get_raw(slot.hash, key)
            .is_some_and(|e| is_collection(&e.value))
    }

    /// The key here: its merge state (brought up to date and stored when
    /// it is a collection's), version, type and expiry.
    fn read_local(&self, db: usize, key: &[u8]) -> Local {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let meta = g.merge_meta_now(slot.hash, key).cloned();
        let e = g.get_raw(slot.hash, key);
        Local {
            meta: meta.or_else(|| g.merge_meta(key).cloned()),
            version: g.version_of(slot.hash, key),
            kind: kind(e.map(|e| &e.value)),
            base: Base::of(e.map(|e| &e.value)),
            at: e.map_or(0, |e| e.expire_at()),
        }
    }

    /// Counters (keyspace/merge/mod.rs): the join's value written with a
    /// SET (or a DEL, or the peer's value when its reset won and is no
    /// integer).
    fn merge_counter(
        &mut self,
        db: usize,
        key: &[u8],
        local: Local,
        remote: &Counter,
        (at, payload): (u64, &[u8]),
    ) -> bool {
        let counter = match &local.meta {
            Some(Meta::Counter(c)) => Some(c),
            _ => None,
        };
        let mine = Counter::current(counter, local.version, local.base);
        let mut joined = mine.join(remote);
        if joined == mine {
            return false;
        }
        // The expiry of the newer side.
        let at = if remote.version > mine.version {
            at
        } else {
            local.at
        };
        match joined.value() {
            Merged::Int(n) => {
                let (n, at) = (n.to_string(), at.to_string());
                let mut argv: Vec<&[u8]> = vec![b"SET", key, n.as_bytes()];
                if at != "0" {
                    argv.extend([&b"PXAT"[..], at.as_bytes()]);
                }
                self.replay(db, joined.version, &argv);
            }
            Merged::Absent => self.delete_at(db, key, joined.version),
            Merged::Other if joined.reset == remote.reset && remote.reset != mine.reset => {
                // The peer's reset won: its value, at its version.
                joined.version = remote.version;
                let at = at.to_string();
                let argv: [&[u8]; 6] = [
                    b"RESTORE",
                    key,
                    at.as_bytes(),
                    payload,
                    b"REPLACE",
                    b"ABSTTL",
                ];
                self.replay(db, joined.version, &argv);
            }
            Merged::Other => joined.version = mine.version, // ours won
        }
        self.store(db, key, Meta::Counter(joined));
        true
    }

    /// Sets, hashes and sorted sets (keyspace/merge/elements.rs): the
    /// members the join removes, then those it adds or changes, as
    /// commands. The key keeps its own expiry.
    fn merge_elements(
        &mut self,
        db: usize,
        key: &[u8],
        local: Local,
        remote: &Elements,
        remote_value: Option<&Value>,
    ) -> bool {
        let mine = match local.meta {
            Some(Meta::Elements(e)) => e,
            _ => Elements::current(None, local.version, None),
        };
        let (joined, changes) = mine.join(None, remote, remote_value);
        if joined == mine {
            return false;
        }
        let kind = if local.kind == Kind::Absent {
            kind(remote_value)
        } else {
            local.kind
        };
        let (removes, puts): (Vec<&Change>, Vec<&Change>) =
            changes.iter().partition(|c| matches!(c, Change::Remove(_)));
        let stamp = joined.version;
        if !removes.is_empty() {
            let name: &[u8] = match kind {
                Kind::Hash => b"HDEL",
                Kind::ZSet => b"ZREM",
                _ => b"SREM",
            };
            let mut argv: Vec<&[u8]> = vec![name, key];
            argv.extend(removes.iter().map(|c| match c {
                Change::Remove(m) | Change::Put(m, _) => &m[..],
            }));
            self.replay(db, stamp, &argv);
        }
        if !puts.is_empty() {
            let (name, words) = put_words(kind, &puts);
            let mut argv: Vec<&[u8]> = vec![name, key];
            argv.extend(words.iter().map(|w| &w[..]));
            self.replay(db, stamp, &argv);
        }
        self.store(db, key, Meta::Elements(joined));
        true
    }

    fn store(&self, db: usize, key: &[u8], meta: Meta) {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        ks.db(db).lock(slot.shard).set_merge_meta(key, meta);
    }

    /// Deletes `key` as a write stamped `stamp` (a peer's deletion, a
    /// merged counter that ends absent): a DEL where it exists, else its
    /// tombstone alone, and a stamped DEL for the AOF (its loader makes it a
    /// tombstone again).
    pub(super) fn delete_at(&mut self, db: usize, key: &[u8], stamp: u64) {
        let core = self.node.core();
        let slot = core.keyspace.slot(key);
        let exists = (core.keyspace.db(db).lock(slot.shard))
            .get_raw(slot.hash, key)
            .is_some();
        if exists {
            return self.replay(db, stamp, &[b"DEL", key]);
        }
        core.keyspace
            .db(db)
            .lock(slot.shard)
            .set_tombstone(key, stamp);
        applying(|| {
            core.effects.emit(&EffectRef {
                db,
                version: stamp,
                argv: &[b"DEL", key],
                bases: &[],
            })
        });
    }
}

/// The command and its words that put `puts` into a collection of `kind`.
fn put_words(kind: Kind, puts: &[&Change]) -> (&'static [u8], Vec<Vec<u8>>) {
    let mut words = Vec::new();
    for c in puts {
        let Change::Put(m, item) = c else { continue };
        match item {
            Item::Member => words.push(m.clone()),
            Item::Field(v) => words.extend([m.clone(), v.clone()]),
            Item::Score(s) => words.extend([format!("{s}").into_bytes(), m.clone()]),
        }
    }
    let name: &[u8] = match kind {
        Kind::Hash => b"HSET",
        Kind::ZSet => b"ZADD",
        _ => b"SADD",
    };
    (name, words)
}
