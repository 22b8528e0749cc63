//! How a link applies a stream write's fact (keyspace/merge/stream.rs,
//! `Told`; DECISIONS 165-168): an XADD's entry, the entries an XDEL
//! removed, a trim's threshold. Where the fact's base is here (the key's
//! stamp context has seen the origin's previous write of the key, and
//! every entry the write removed), it applies in O(what it names) even
//! where the key moved here through this node's own writes: IDs never
//! collide (they end in their node's slot), so a peer's entry lands in ID
//! order beside ours. Else (a gap, a key absent here or with a TTL) the
//! caller asks for the key's state, as every stream write whose base moved
//! did before.
//!
//! What the fact changes is written through ordinary commands replayed
//! with the write's stamp (XADD of the entry with its ID, XDEL of the
//! entries still here, XTRIM MINID just above the threshold), so the AOF
//! and plain replicas see ordinary writes; the key and its merge state
//! then stand at the newer of their version here and the stamp, as every
//! node that applied the same writes does.

use crate::effects::Fact;
use crate::keyspace::merge::fact::NotApplied;
use crate::keyspace::merge::state::typed;
use crate::keyspace::merge::stream::{stream_of, Stream, Told};
use crate::keyspace::merge::{MergeType, Meta};
use crate::keyspace::stream::StreamId;
use crate::keyspace::Value;
use crate::protocol::Args;

use super::link::Link;

/// Whether a record's command is a stream write that carries a fact.
pub(super) fn is_stream_write(argv: &Args) -> bool {
    let name = argv.get(0);
    [&b"xadd"[..], b"xdel", b"xtrim"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// A full entry ID as a record carries it (`ms-seq`).
fn id_of(a: &[u8]) -> Option<StreamId> {
    let text = std::str::from_utf8(a).ok()?;
    let (ms, seq) = text.split_once('-')?;
    Some(StreamId::new(ms.parse().ok()?, seq.parse().ok()?))
}

impl Link {
    /// Applies a stream write's fact to `key`; false where it does not
    /// apply here: the caller asks for the key's state.
    pub(super) fn apply_stream_fact(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        argv: &Args,
    ) -> bool {
        let Some(told) = Told::decode(facts) else {
            return false;
        };
        let id_at = |i: u32| (i >= 2 && (i as usize) < argv.len()).then(|| argv.get(i as usize));
        let id_at = |i: u32| id_at(i).and_then(id_of);
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let version = g.version_of(slot.hash, key);
        let (state, checked) = {
            let Some(e) = g.get_raw(slot.hash, key) else {
                return false; // made again here or there: states join
            };
            let Value::Stream(s) = &e.value else {
                return false;
            };
            if e.expire_at() != 0 {
                return false; // a key with a TTL merges by its state
            }
            let Ok(meta) = typed::<Stream>(g.merge_meta(key)) else {
                return false;
            };
            let state = Stream::current(meta, version, Some(&e.value));
            let checked = state.check_fact(stamp, &told, s, id_at);
            (state, checked)
        };
        match checked {
            Ok(()) => {}
            Err(NotApplied::Duplicate) => return true,
            Err(NotApplied::Gap) => return false,
        }
        g.set_merge_meta(key, state.wrap());
        drop(g);
        self.replay_stream_fact(db, key, stamp, &told, argv);
        self.settle_stream(db, key, stamp, version.max(stamp));
        true
    }

    /// The fact's changes as commands stamped `stamp`: the entry added,
    /// the entries removed that are still here, the trim.
    fn replay_stream_fact(&mut self, db: usize, key: &[u8], stamp: u64, told: &Told, argv: &Args) {
        if let Some(i) = told.add {
            let mut xadd: Vec<&[u8]> = vec![b"XADD", key];
            xadd.extend((i as usize..argv.len()).map(|j| argv.get(j)));
            self.replay(db, stamp, &xadd);
        }
        let here = |ks: &crate::keyspace::Keyspace, id: StreamId| {
            let slot = ks.slot(key);
            let g = ks.db(db).lock(slot.shard);
            let v = g.get_raw(slot.hash, key).map(|e| &e.value);
            stream_of(v).is_some_and(|s| s.entry(id).is_some())
        };
        let node = self.node.clone();
        let ks = &node.core().keyspace;
        let drops: Vec<&[u8]> = (told.drops.iter())
            .map(|&i| argv.get(i as usize))
            .filter(|a| id_of(a).is_some_and(|id| here(ks, id)))
            .collect();
        if !drops.is_empty() {
            let mut xdel: Vec<&[u8]> = vec![b"XDEL", key];
            xdel.extend(drops);
            self.replay(db, stamp, &xdel);
        }
        if let Some((t, _)) = &told.trim {
            let above = t.next().map(|n| n.text());
            let xtrim: Vec<&[u8]> = match &above {
                Some(min) => vec![b"XTRIM", key, b"MINID", min.as_bytes()],
                None => vec![b"XTRIM", key, b"MAXLEN", b"0"],
            };
            self.replay(db, stamp, &xtrim);
        }
    }

    /// After a stream fact's commands: the key and its merge state at
    /// `version` (the newer of the key's before and the write's `stamp`).
    /// The state is what the origin's next write reads: brought to the
    /// write's stamp as `Stream::current` does (an XADD's own note left it
    /// there already; an XDEL or trim notes nothing), then at `version`.
    fn settle_stream(&mut self, db: usize, key: &[u8], stamp: u64, version: u64) {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        {
            let mut g = ks.db(db).lock(slot.shard);
            let meta = g.merge_meta(key).and_then(Meta::get);
            let value = g.get_raw(slot.hash, key).map(|e| &e.value);
            let mut s = Stream::current(meta, stamp, value);
            s.version = version;
            g.set_merge_meta(key, s.wrap());
            g.raise_version(slot.hash, key, version);
        }
        self.note_merge_state(db, key);
    }
}
