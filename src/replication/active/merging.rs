//! How a link applies a peer's key state where the key merges
//! (keyspace/merge/, docs/MERGE-DESIGN.md): a counter's parts and a collection's
//! elements join with ours instead of the newer state replacing ours. The
//! join's result is written through ordinary commands replayed with its
//! stamp (SET, DEL, SADD, SREM, HSET, HDEL, ZADD, ZREM), so the AOF and
//! plain replicas see ordinary writes; then the joined state is stored.
//! Keys of different types on the two sides do not merge: the newer state
//! replaces (whole-key last-writer-wins, the caller's path).

use super::applying;
use crate::core::Core;
use crate::effects::EffectRef;
use crate::keyspace::merge::elements::{Change, Elements, Item};
use crate::keyspace::merge::hll::{is_sketch, Hll};
use crate::keyspace::merge::lists::{values, Lists};
use crate::keyspace::merge::stream::{same_value, stream_of, Stream as StreamState};
use crate::keyspace::merge::{merges_by_parts, Base, Counter, MergeType, Merged, Meta};
use crate::keyspace::{Shard, Value};
use crate::log_warning;

use super::link::Link;

/// What a state says of its key's type, for deciding how it merges.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    Absent,
    Set,
    Hash,
    ZSet,
    List,
    /// A string holding a HyperLogLog sketch (keyspace/merge/hll.rs).
    Sketch,
    /// A stream (keyspace/merge/stream.rs).
    Stream,
    /// A string.
    Other,
}

fn kind(v: Option<&Value>) -> Kind {
    match v {
        None => Kind::Absent,
        Some(Value::Set(_)) => Kind::Set,
        Some(Value::Hash(_)) => Kind::Hash,
        Some(Value::ZSet(_)) => Kind::ZSet,
        Some(Value::List(_)) => Kind::List,
        Some(Value::Stream(_)) => Kind::Stream,
        Some(v) if is_sketch(v) => Kind::Sketch,
        Some(_) => Kind::Other,
    }
}

/// How a key merges (keyspace/merge/).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    Elements,
    List,
    Counter,
    Hll,
    Stream,
}

impl Family {
    /// The family of a merge state's type (the one match of the stored
    /// enum's variants in this file: which join a type takes).
    fn of_state(meta: &Meta) -> Family {
        match meta {
            Meta::Counter(_) => Family::Counter,
            Meta::Elements(_) => Family::Elements,
            Meta::List(_) => Family::List,
            Meta::Hll(_) => Family::Hll,
            Meta::Stream(_) => Family::Stream,
        }
    }
}

/// How one side of a merge merges: by its value's type where present,
/// else by the merge state its deletion left (None: a plain deletion).
fn family(kind: Kind, meta: Option<&Meta>) -> Option<Family> {
    let state = meta.map(Family::of_state);
    match (kind, state) {
        // A sketch whose state is a counter's (a PFADD that reset a string
        // INCR wrote, joined as counters: see `merge_state`) stays one: a
        // sketch's state made up for it at its version would lose the
        // counter's reset and parts, the stamps by which a resuming peer
        // is sent the key (simulator seed 47061).
        (Kind::Sketch, Some(Family::Counter)) => Some(Family::Counter),
        (Kind::Sketch, _) | (Kind::Other, Some(Family::Hll)) => Some(Family::Hll),
        (Kind::Stream, _) => Some(Family::Stream),
        (Kind::Set | Kind::Hash | Kind::ZSet, _) => Some(Family::Elements),
        (Kind::List, _) => Some(Family::List),
        (Kind::Other, _) => Some(Family::Counter),
        (Kind::Absent, state) => state,
    }
}

/// A peer's state of `T`: the one it sent (true), else made for its key at
/// `stamp` holding `value`, expiring at `at` (false: it kept none, as a
/// key written before it merged, or a sketch's against a counter's).
fn remote_of<T: MergeType>(
    meta: Option<Meta>,
    (stamp, at): (u64, u64),
    value: Option<&Value>,
) -> (T, bool) {
    match meta.and_then(T::take) {
        Some(s) => (s, true),
        None => (T::made(stamp, value, at), false),
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

/// How a join's result is versioned ([`Link::outcome`]).
#[derive(Clone, Copy, Debug)]
enum Outcome {
    Unchanged,
    Adopt(u64),
    Commit(u64),
}

/// The local side of a merge, read under the key's shard lock.
struct Local {
    meta: Option<Meta>,
    /// The value, where it is a collection (its members' values are what
    /// the newest dots name: keyspace/merge/elements.rs).
    value: Option<Value>,
    version: u64,
    kind: Kind,
    base: Base,
    at: u64,
}

impl Link {
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
        if stamp < self.flushed_at(db, key) {
            // Older than a flush here: gone, merging or not, as the flush
            // removed such a key on every node that held it (seed 20).
            return Some(false);
        }
        let remote_value = payload_value(payload);
        let remote_kind = kind(remote_value.as_ref());
        let collection = remote_value.as_ref().is_some_and(merges_by_parts);
        if !merges && remote_meta.is_none() && !collection && !self.local_is_collection(db, key) {
            return None;
        }
        let local = self.read_local(db, key);
        let both_present = local.kind != Kind::Absent && remote_kind != Kind::Absent;
        // A sketch is a string: one type to this check.
        let string = |k: Kind| if k == Kind::Sketch { Kind::Other } else { k };
        if both_present && string(local.kind) != string(remote_kind) {
            return None; // another type: whole-key last-writer-wins
        }
        let family = match (
            family(local.kind, local.meta.as_ref()),
            family(remote_kind, remote_meta.as_ref()),
        ) {
            (Some(a), Some(b)) if a == b => a,
            // A sketch's state against a counter's (a string INCR wrote on
            // one side, a sketch or a string written over one on the other):
            // both join as counters, as every string did before sketches
            // merged, so that nodes that hold one write under the two kinds
            // (a reset read as a sketch's on one node, as a counter's on
            // another) agree (simulator seeds 1002, 1224, 1669, 1853, 2672, 2991).
            (Some(Family::Hll), Some(Family::Counter))
            | (Some(Family::Counter), Some(Family::Hll)) => Family::Counter,
            (Some(a), None) | (None, Some(a)) => a,
            // Another kind of key (a deletion of another type), or two
            // deletions that never merged: whole-key last-writer-wins.
            _ => return None,
        };
        // The peer's state of the family's type, then its join (what a
        // join writes is each type's own).
        let value = remote_value.as_ref();
        let stamped = (stamp, at);
        Some(match family {
            Family::Elements => {
                let (remote, _) = remote_of::<Elements>(remote_meta, stamped, value);
                self.merge_elements(db, key, local, (&remote, value, at))
            }
            Family::List => {
                let (remote, _) = remote_of::<Lists>(remote_meta, stamped, value);
                self.merge_list(db, key, local, (&remote, value, at))
            }
            Family::Hll => {
                let (remote, _) = remote_of::<Hll>(remote_meta, stamped, value);
                self.merge_hll(db, key, local, (&remote, string_bytes(value)))
            }
            Family::Stream => {
                let (remote, _) = remote_of::<StreamState>(remote_meta, stamped, value);
                self.merge_stream(db, key, local, (&remote, value))
            }
            Family::Counter => {
                let remote = remote_of::<Counter>(remote_meta, stamped, value);
                self.merge_counter(db, key, local, remote, (at, payload))
            }
        })
    }

    /// After a peer's state replaced the key whole (the newer of two
    /// that do not merge: another type): the merge state it carried, if
    /// any, becomes the key's here.
    pub(super) fn take_merge_state(&mut self, db: usize, key: &[u8], merge: &[u8]) {
        if merge.is_empty() {
            return;
        }
        match Meta::decode(merge) {
            Ok(m) => {
                // Its members' TTLs too (a RESTORE carries none).
                if let Some(e) = m.get::<Elements>().filter(|e| !e.member_ttls.is_empty()) {
                    let version = e.version;
                    self.set_member_expiries(db, key, e, version);
                }
                self.store(db, key, m)
            }
            Err(e) => log_warning!("A key state from an active peer is damaged: {e}"),
        }
    }

    /// The stamp of the last flush of `key`'s shard here.
    fn flushed_at(&self, db: usize, key: &[u8]) -> u64 {
        let ks = &self.node.core().keyspace;
        ks.db(db).lock(ks.slot(key).shard).flushed_at()
    }

    fn local_is_collection(&self, db: usize, key: &[u8]) -> bool {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let g = ks.db(db).lock(slot.shard);
        g.get_raw(slot.hash, key)
            .is_some_and(|e| merges_by_parts(&e.value))
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
            value: e.map(|e| &e.value).filter(|v| merges_by_parts(v)).cloned(),
            version: g.version_of(slot.hash, key),
            kind: kind(e.map(|e| &e.value)),
            base: Base::of(e.map(|e| &e.value)),
            at: e.map_or(0, |e| e.expire_at()),
        }
    }

    /// Counters (keyspace/merge/mod.rs): the join's value written with a
    /// SET (or a DEL, or the peer's value when its reset won and is no
    /// integer), at the version [`Self::outcome`] gives.
    fn merge_counter(
        &mut self,
        db: usize,
        key: &[u8],
        local: Local,
        (mut remote, remote_kept): (Counter, bool),
        (at, payload): (u64, &[u8]),
    ) -> bool {
        let counter = local.meta.as_ref().and_then(Meta::get);
        let mut mine = Counter::current(counter, local.version, local.base);
        if counter.is_none() {
            observe_own_parts(&mut mine, &remote);
        }
        if !remote_kept {
            observe_own_parts(&mut remote, &mine);
        }
        let remote = &remote;
        let mut joined = mine.join(remote);
        joined.forget_before(self.flushed_at(db, key));
        let Some((outcome, version)) =
            self.version_joined(db, key, (&mine, remote), &mut joined, (true, true))
        else {
            return false;
        };
        let at = winning_expiry(&mine, remote, &joined, (local.at, at));
        match joined.value() {
            v @ (Merged::Int(_) | Merged::Float(_)) if mine.value() != v || local.at != at => {
                let (n, at) = (v.text().unwrap_or_default(), at.to_string());
                let mut argv: Vec<&[u8]> = vec![b"SET", key, n.as_bytes()];
                if at != "0" {
                    argv.extend([&b"PXAT"[..], at.as_bytes()]);
                }
                self.replay(db, version, &argv);
            }
            Merged::Absent if local.kind != Kind::Absent => self.delete_at(db, key, version),
            Merged::Other if joined.reset == remote.reset && remote.reset != mine.reset => {
                // The peer's reset won: its value.
                self.restore_at(db, key, (at, payload), version);
            }
            // The key's value stays (the same number, absent, or our
            // reset's value): only its version moves.
            _ => self.raise_version(db, key, version),
        }
        self.store(db, key, joined.wrap());
        self.settle(db, key, outcome)
    }

    /// Sets, hashes and sorted sets (keyspace/merge/elements.rs): the
    /// members the join removes, then those it adds or changes, as
    /// commands, at the version [`Self::outcome`] gives; the expiry is
    /// what the joined TTL dots give (keyspace/merge/ttl.rs).
    fn merge_elements(
        &mut self,
        db: usize,
        key: &[u8],
        local: Local,
        (remote, remote_value, _): (&Elements, Option<&Value>, u64),
    ) -> bool {
        let mine = (local.meta.and_then(Elements::take))
            .unwrap_or_else(|| Elements::current(None, local.version, None));
        let (mut joined, changes) = mine.join(local.value.as_ref(), remote, remote_value);
        let Some((outcome, version)) =
            self.version_joined(db, key, (&mine, remote), &mut joined, (true, true))
        else {
            return false;
        };
        let kind = if local.kind == Kind::Absent {
            kind(remote_value)
        } else {
            local.kind
        };
        let (removes, puts): (Vec<&Change>, Vec<&Change>) =
            changes.iter().partition(|c| matches!(c, Change::Remove(_)));
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
            self.replay(db, version, &argv);
        }
        if !puts.is_empty() {
            let (name, words) = put_words(kind, &puts);
            let mut argv: Vec<&[u8]> = vec![name, key];
            argv.extend(words.iter().map(|w| &w[..]));
            self.replay(db, version, &argv);
        }
        self.set_member_expiries(db, key, &joined, version);
        self.set_expiry(db, key, joined.ttl.at(), version);
        self.finish(db, key, joined, (outcome, version))
    }

    /// Lists (keyspace/merge/lists.rs): the joined list, where it differs
    /// from ours, written whole (a RESTORE of it, with the expiry the
    /// joined TTL dots give), at the version [`Self::outcome`] gives.
    fn merge_list(
        &mut self,
        db: usize,
        key: &[u8],
        local: Local,
        (remote, remote_value, _): (&Lists, Option<&Value>, u64),
    ) -> bool {
        let mine = (local.meta.and_then(Lists::take))
            .unwrap_or_else(|| Lists::current(None, local.version, local.value.as_ref()));
        let ours = values(local.value.as_ref());
        let (mut joined, list) = mine.join(&ours, remote, &values(remote_value));
        let Some((outcome, version)) =
            self.version_joined(db, key, (&mine, remote), &mut joined, (true, true))
        else {
            return false;
        };
        let at = joined.ttl.at();
        if list.is_empty() {
            if local.kind != Kind::Absent {
                self.delete_at(db, key, version);
            }
        } else if list != ours {
            let mut l = crate::keyspace::list::ListValue::new();
            for v in &list {
                l.push_back(-2, v);
            }
            let payload =
                crate::persistence::rdb::encode::dump_payload(&Value::List(Box::new(l)), false);
            self.restore_at(db, key, (at, &payload), version);
        } else {
            self.set_expiry(db, key, at, version);
        }
        self.finish(db, key, joined, (outcome, version))
    }

    /// HyperLogLogs (keyspace/merge/hll.rs): the joined sketch (the
    /// registers' maximum, or the later reset's value), where it differs
    /// from ours, written whole (a RESTORE of it with the expiry the joined
    /// state gives), or the key deleted, at the version [`Self::outcome`]
    /// gives.
    fn merge_hll(
        &mut self,
        db: usize,
        key: &[u8],
        local: Local,
        (remote, theirs): (&Hll, Option<Vec<u8>>),
    ) -> bool {
        let ours = {
            let ks = &self.node.core().keyspace;
            let slot = ks.slot(key);
            let g = ks.db(db).lock(slot.shard);
            string_bytes(g.get_raw(slot.hash, key).map(|e| &e.value))
        };
        let mine = local.meta.and_then(Hll::take).unwrap_or_else(|| {
            let value = ours
                .as_ref()
                .map(|b| Value::Str(crate::keyspace::StrValue::raw(b.clone())));
            Hll::made(local.version, value.as_ref(), local.at)
        });
        let max_bytes = (self.node.core().hot.encoding.hll_sparse_max_bytes)
            .load(std::sync::atomic::Ordering::Relaxed);
        let (mut joined, value) = mine.join(ours.as_deref(), remote, theirs.as_deref(), max_bytes);
        let values_same = (value == ours, value == theirs);
        let Some((outcome, version)) =
            self.version_joined(db, key, (&mine, remote), &mut joined, values_same)
        else {
            return false;
        };
        let at = joined.ttl.at();
        match &value {
            None => {
                if local.kind != Kind::Absent {
                    self.delete_at(db, key, version);
                }
            }
            Some(v) if Some(v) != ours.as_ref() || local.at != at => {
                let s = crate::keyspace::StrValue::raw(v.clone());
                let payload = crate::persistence::rdb::encode::dump_payload(&Value::Str(s), false);
                self.restore_at(db, key, (at, &payload), version);
            }
            Some(_) => {}
        }
        self.finish(db, key, joined, (outcome, version))
    }

    /// Streams (keyspace/merge/stream.rs): the joined stream (every entry
    /// one side holds that the other has not seen removed, in ID order),
    /// where it differs from ours, written whole (a RESTORE of it with the
    /// expiry the joined TTL dots give), or the key deleted, at the version
    /// [`Self::outcome`] gives.
    fn merge_stream(
        &mut self,
        db: usize,
        key: &[u8],
        local: Local,
        (remote, their_value): (&StreamState, Option<&Value>),
    ) -> bool {
        let core = self.node.core();
        let ours = {
            let slot = core.keyspace.slot(key);
            let g = core.keyspace.db(db).lock(slot.shard);
            g.get_raw(slot.hash, key).map(|e| e.value.clone())
        };
        let mine = (local.meta.and_then(StreamState::take))
            .unwrap_or_else(|| StreamState::made(local.version, ours.as_ref(), local.at));
        let enc = &core.hot.encoding;
        let limits = (
            enc.stream_node_max_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
            enc.stream_node_max_entries
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let (ours, theirs) = (stream_of(ours.as_ref()), stream_of(their_value));
        let (mut joined, value) = mine.join(ours, remote, theirs, limits);
        let values_same = (
            same_value(value.as_ref(), ours),
            same_value(value.as_ref(), theirs),
        );
        let Some((outcome, version)) =
            self.version_joined(db, key, (&mine, remote), &mut joined, values_same)
        else {
            return false;
        };
        let at = joined.ttl.at();
        match value {
            None => {
                if local.kind != Kind::Absent {
                    self.delete_at(db, key, version);
                }
            }
            Some(v) if !same_value(Some(&v), ours) || local.at != at => {
                let v = Value::Stream(Box::new(v));
                let payload = crate::persistence::rdb::encode::dump_payload(&v, false);
                self.restore_at(db, key, (at, &payload), version);
            }
            Some(_) => {}
        }
        self.finish(db, key, joined, (outcome, version))
    }

    /// The generic head of every join's write: [`Self::version_join`] of
    /// `joined` against the two sides it joined (`mine`, `remote`), equal
    /// but for versions where their states' contents are and
    /// `values_same` says their values are (a sketch's bytes, a stream's
    /// entries: not in the state), with the type's version rules
    /// (`MergeType::FRESH_COMMIT`, `EXACT_JOIN`); `joined` then stands at
    /// the version its outcome gives.
    fn version_joined<T: MergeType>(
        &mut self,
        db: usize,
        key: &[u8],
        (mine, remote): (&T, &T),
        joined: &mut T,
        values_same: (bool, bool),
    ) -> Option<(Outcome, u64)> {
        let same = (
            joined.same_content(mine) && values_same.0,
            joined.same_content(remote) && values_same.1,
        );
        let versions = (mine.version(), remote.version());
        let rules = (T::FRESH_COMMIT, T::EXACT_JOIN);
        let joined_at = self.version_join(db, key, same, versions, rules)?;
        joined.set_version(joined_at.1);
        Some(joined_at)
    }

    /// The generic tail of a join's write (all but a counter's, which
    /// moves the key's version by the write it chose): the key at the
    /// join's version, the joined state stored, the outcome settled.
    fn finish<T: MergeType>(
        &mut self,
        db: usize,
        key: &[u8],
        joined: T,
        (outcome, version): (Outcome, u64),
    ) -> bool {
        self.raise_version(db, key, version);
        self.store(db, key, joined.wrap());
        self.settle(db, key, outcome)
    }

    /// [`Self::outcome`] and its version; None where the join changed
    /// nothing here (after answering a newer state that lacks ours).
    fn version_join(
        &mut self,
        db: usize,
        key: &[u8],
        same: (bool, bool),
        (local, remote): (u64, u64),
        (fresh, equal_behind): (bool, bool),
    ) -> Option<(Outcome, u64)> {
        match self.outcome(same, (local, remote), fresh) {
            Outcome::Unchanged => {
                // Where the peer's state is as new as ours or newer but
                // lacks something ours holds, ours goes to every peer, as a
                // commit's does, so that its makers learn it (seed 1357). As
                // new: a collection that took a peer's fact keeps the fact's
                // stamp as its version while holding more than the origin
                // (a concurrent member of ours), so one version may name two
                // contents (full seed 11685: a hash field every node but one
                // lacked for good). Only where facts do that and the join
                // is exact (`equal_behind`: counters, sets, hashes, sorted
                // sets, lists: a pop's fact applied where a flush had taken
                // the list, full seed 260): a stream's copies at one version
                // may differ in what its join leaves each side (consumer
                // groups go whole to the newer side), and two nodes answered
                // each other for ever (full seed 1187). A state older than ours
                // that lacks something is a late copy whose makers moved on:
                // answering those too flooded a mesh with states.
                let behind = remote > local || (equal_behind && remote == local);
                if !same.1 && behind {
                    super::serve::answer_state(&*self.node, db, key);
                }
                None
            }
            o @ (Outcome::Adopt(v) | Outcome::Commit(v)) => Some((o, v)),
        }
    }

    /// The version a join's result takes, so that equal results have equal
    /// versions on every node: the local one where the join added nothing
    /// here (unchanged), the peer's where it is what the peer sent (adopt),
    /// else, where each side knew something the other did not (commit: our
    /// result goes to every peer, so the other side learns what it lacked):
    /// - for a counter (`fresh` false), the newer of the two: a counter's
    ///   version is the newest stamp its parts and reset hold (an increment
    ///   applied as a fact moves it to the newer of the two as well,
    ///   facts.rs), so nodes with one state have one version however they
    ///   came by it (DECISIONS 77: a fresh stamp per commit left a node
    ///   that reached the same counter by facts at another version);
    /// - for a collection or a list (`fresh`), a fresh stamp of ours: a
    ///   state no node had (they travel as states, section 3 of MERGE-DESIGN.md).
    ///
    /// `same`: whether the join equals the local and the remote state but
    /// for their versions.
    fn outcome(&mut self, same: (bool, bool), (local, remote): (u64, u64), fresh: bool) -> Outcome {
        match same {
            (_, true) if remote > local => Outcome::Adopt(remote),
            (true, _) => Outcome::Unchanged,
            (false, true) if !fresh => Outcome::Adopt(local),
            _ if fresh => Outcome::Commit(self.fresh_stamp(local.max(remote))),
            _ => Outcome::Commit(local.max(remote)),
        }
    }

    /// A stamp of ours after `prev` and the node's stamp floor, as a
    /// client's write gets (`Ctx::active_stamp_after`): a restarted node's
    /// peers resume from its floor (resume.rs), so a stamp below it would
    /// never reach them (seed 133).
    fn fresh_stamp(&mut self, prev: u64) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let core = self.node.core();
        let floor = core.stamp_floor.load(Relaxed);
        let s = self.clock.after(prev.max(floor));
        if crate::keyspace::hlc::stamp_ms(s) > crate::keyspace::hlc::stamp_clock_ms() {
            core.stamp_floor.fetch_max(s, Relaxed);
        }
        s
    }

    /// Before a peer's flush of `dbs` stamped `stamp` applies here: the
    /// merging keys it will leave (newer than it) that hold writes as old
    /// as it, which go to every peer as states once it applied
    /// ([`Self::answer_states`]). The flush removed, as an observed remove,
    /// what its node had seen of them, which a key kept here whole still
    /// holds; the flushing node's join with our state removes it and its
    /// answer brings the removal back (facts alone would never tell). A
    /// collection's elements older than the flush go here too
    /// (`Shard::flush_older_elements`), so the keys are chosen before: a
    /// peer that took our state of one before would keep them for good
    /// (simulator seed 56566).
    pub(super) fn flush_survivors(
        &self,
        dbs: std::ops::Range<usize>,
        stamp: u64,
    ) -> Vec<(usize, Box<[u8]>)> {
        let ks = &self.node.core().keyspace;
        let mut out = Vec::new();
        for db in dbs {
            for shard in 0..crate::keyspace::SHARDS {
                let mut g = ks.db(db).lock(shard);
                // Which states hold writes the flush took is each type's
                // (`MergeType::holds_before`): a collection's or a list's
                // elements' own stamps (full seed 260, a list), every
                // counter (full seed 35723). Each state is brought up to
                // its key's version first: a list or a collection written
                // here since its last read describes an older version
                // (full seed 807).
                for key in g.merge_keys() {
                    let m = g.merge_meta_now(ks.slot(&key).hash, &key);
                    if m.is_some_and(|m| m.version() > stamp && m.holds_before(stamp)) {
                        out.push((db, key));
                    }
                }
            }
        }
        out
    }

    /// Sends our state of each key to every peer.
    pub(super) fn answer_states(&self, keys: Vec<(usize, Box<[u8]>)>) {
        for (db, key) in keys {
            super::serve::answer_state(&*self.node, db, &key);
        }
    }

    /// After a join was written: whether the caller forwards the peer's
    /// state (adopted); a commit instead sends our own state of the key to
    /// every peer, the origin included, which lacks what we added.
    fn settle(&mut self, db: usize, key: &[u8], outcome: Outcome) -> bool {
        if let Outcome::Commit(_) = outcome {
            super::serve::answer_state(&*self.node, db, key);
            return false;
        }
        true
    }

    /// Raises the key's version (its entry's or tombstone's) to `version`
    /// where it is lower, its value unchanged.
    pub(super) fn raise_version(&self, db: usize, key: &[u8], version: u64) {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        ks.db(db)
            .lock(slot.shard)
            .raise_version(slot.hash, key, version);
    }

    /// Gives the key the expiry `at` (0: none), replayed as a PEXPIREAT or
    /// PERSIST stamped `stamp`, where it has another now (read after the
    /// join's writes: a remove that emptied the key and an add that made
    /// it again lost its TTL on the way, simulator seed 1678); nothing
    /// where the key is absent.
    fn set_expiry(&mut self, db: usize, key: &[u8], at: u64, stamp: u64) {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let now = (ks.db(db).lock(slot.shard))
            .get_raw(slot.hash, key)
            .map(|e| e.expire_at());
        if now.is_none_or(|now| now == at) {
            return;
        }
        if at == 0 {
            return self.replay(db, stamp, &[b"PERSIST", key]);
        }
        let at = at.to_string();
        self.replay(db, stamp, &[b"PEXPIREAT", key, at.as_bytes()]);
    }

    /// Gives the key's members the TTLs the joined registers resolve to
    /// (keyspace/merge/member_ttls.rs), replayed stamped `stamp` as
    /// `PEXPIREMEMBERAT key member ms` or KeyDB's `PERSIST key member`
    /// where they have another now.
    fn set_member_expiries(&mut self, db: usize, key: &[u8], joined: &Elements, stamp: u64) {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let writes =
            (ks.db(db).lock(slot.shard)).member_ttl_writes(slot.hash, key, &joined.member_ttls);
        for (member, at) in writes {
            if at == 0 {
                self.replay(db, stamp, &[b"PERSIST", key, &member]);
            } else {
                let at = at.to_string();
                self.replay(
                    db,
                    stamp,
                    &[b"PEXPIREMEMBERAT", key, &member, at.as_bytes()],
                );
            }
        }
    }

    /// Stores the key's merge state, and tells the AOF (the writes that
    /// made the join hold only its values: `effects::MERGE_STATE`).
    fn store(&self, db: usize, key: &[u8], meta: Meta) {
        let core = self.node.core();
        let slot = core.keyspace.slot(key);
        core.keyspace
            .db(db)
            .lock(slot.shard)
            .set_merge_meta(key, meta);
        self.note_merge_state(db, key);
    }

    /// Tells the AOF, where one is on, the key's merge state as it is now
    /// (`effects::MERGE_STATE`): the writes that changed it hold only its
    /// values. Nothing is encoded where nobody keeps it.
    pub(super) fn note_merge_state(&self, db: usize, key: &[u8]) {
        let core = self.node.core();
        if !core.effects.merge_state_wanted() {
            return;
        }
        let slot = core.keyspace.slot(key);
        let g = core.keyspace.db(db).lock(slot.shard);
        emit_merge_state(core, &g, db, key);
    }

    /// Deletes `key` as a write stamped `stamp` (a peer's deletion, a
    /// merged counter that ends absent): a DEL where it exists, else its
    /// tombstone alone, and a stamped DEL for the AOF (its loader makes it a
    /// tombstone again).
    pub(super) fn delete_at(&mut self, db: usize, key: &[u8], stamp: u64) {
        let core = self.node.core();
        // A state's deletion: collected only once every peer is past now
        // (`Stability::hold`, seed 33745).
        let now = crate::keyspace::hlc::make_stamp(crate::keyspace::hlc::stamp_clock_ms(), 0, 0);
        self.node.active().stability.hold(db, key, now);
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
                facts: &[],
            })
        });
    }
}

/// A counter read from a state that kept none (a sketch's, or a string's
/// with no merge state: a reset at its version that observed nothing we
/// know of): its reset observed at least its own node's part, where the
/// other side holds one stamped at or before it (that node's increments
/// came before its reset there). Without it, a part the reset had removed
/// came back where a counter met a sketch's state (simulator seed 96643:
/// an INCR, then a GETDEL, a PFADD and an expiry on its node; the other,
/// whose counter kept the INCR's part, brought it back as 1). Where the
/// other side holds a newer part of that node, the total the reset saw is
/// unknown here: nothing is added.
fn observe_own_parts(c: &mut Counter, other: &Counter) {
    let slot = crate::keyspace::hlc::stamp_node(c.reset);
    let seen = other.parts.iter().find(|p| p.slot == slot);
    let Some(part) = seen.filter(|p| c.reset != 0 && p.stamp <= c.reset) else {
        return;
    };
    let mut observed = c.observed.to_vec();
    match observed.binary_search_by_key(&slot, |o| o.slot) {
        Ok(i) if observed[i].stamp >= part.stamp => return,
        Ok(i) => observed[i] = part.clone(),
        Err(i) => observed.insert(i, part.clone()),
    }
    c.observed = observed.into_boxed_slice();
}

/// The expiry a merged counter keeps: the winning reset's (an increment
/// keeps a key's TTL, any other write is a reset and sets it), the peer's
/// when its reset is the later one even where our key is newer by an
/// increment made since (simulator seed 51); for one reset seen by both,
/// the newer side's. `(ours, theirs)`: the two keys' expiry times.
fn winning_expiry(
    mine: &Counter,
    remote: &Counter,
    joined: &Counter,
    (ours, theirs): (u64, u64),
) -> u64 {
    if remote.reset != mine.reset {
        if joined.reset == remote.reset {
            theirs
        } else {
            ours
        }
    } else if remote.version > mine.version {
        theirs
    } else {
        ours
    }
}

/// A string value's bytes (None: absent, or not a string).
fn string_bytes(v: Option<&Value>) -> Option<Vec<u8>> {
    match v {
        Some(Value::Str(s)) => Some(s.with_bytes(<[u8]>::to_vec)),
        _ => None,
    }
}

/// The command and its words that put `puts` into a collection of `kind`.
pub(super) fn put_words(kind: Kind, puts: &[&Change]) -> (&'static [u8], Vec<Vec<u8>>) {
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

/// [`Link::note_merge_state`] under the shard's lock `g`, the caller having
/// checked that the AOF wants it: the key's merge state as the files keep
/// it (its answer note included), for the AOF.
pub(super) fn emit_merge_state(core: &Core, g: &Shard, db: usize, key: &[u8]) {
    let mut state = Vec::new();
    match g.merge_meta(key) {
        Some(meta) => meta.encode_stored(g.answered(key), &mut state),
        None => return,
    }
    let argv: [&[u8]; 3] = [crate::effects::MERGE_STATE, key, &state];
    applying(|| {
        core.effects.emit(&EffectRef {
            db,
            version: 0,
            argv: &argv,
            bases: &[],
            facts: &[],
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::longdouble::F80;
    use crate::keyspace::merge::Part;

    fn parts(p: &[(u64, i128, u64)]) -> Box<[Part]> {
        (p.iter())
            .map(|&(slot, total, stamp)| Part::new(slot, total, F80::ZERO, stamp))
            .collect()
    }

    /// Simulator seed 96643: n1's INCR, then its GETDEL and a sketch;
    /// n0 holds the INCR's part under a reset of its own that saw it. n1's
    /// state, read as a counter, is a reset that observed its own part.
    #[test]
    fn a_reset_read_from_a_state_without_a_counter_observed_its_nodes_earlier_part() {
        let (n0, n1) = (696, 869);
        let mut mine = Counter::current(None, make_stamp(150, 0, n0), Base::Other);
        mine.parts = parts(&[(n1, 1, make_stamp(100, 0, n1))]);
        mine.observed = mine.parts.clone();
        let theirs = || Counter::current(None, make_stamp(200, 0, n1), Base::Absent);
        assert_eq!(mine.join(&theirs()).value(), Merged::Int(1), "as it was");
        let mut remote = theirs();
        observe_own_parts(&mut remote, &mine);
        assert_eq!(mine.join(&remote).value(), Merged::Absent);
        // Another node's part, or a part of its node newer than the reset:
        // what the reset saw of them is unknown here.
        let mut other = mine.clone();
        other.parts = parts(&[
            (n0, 2, make_stamp(120, 0, n0)),
            (n1, 3, make_stamp(250, 0, n1)),
        ]);
        let mut remote = theirs();
        observe_own_parts(&mut remote, &other);
        assert!(remote.observed.is_empty());
    }
}
