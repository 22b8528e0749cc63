//! A stream's merge state (issue 25 item 5, docs/MERGE-DESIGN.md section 10,
//! DECISIONS 106 and 112-117): what a stream key keeps beside its value so
//! that entries added on different nodes are all kept, and XDEL and trims
//! remove only what their node had seen.
//!
//! **The entry ID is the dot.** Under active replication `*` makes IDs
//! whose sequence carries the writing node's slot in its low 10 bits
//! (`commands/streams.rs`), and a node's IDs in one stream only grow, so a
//! context in *ID space* tells what a node has seen: per slot, the highest
//! entry ID of that slot ([`Stream::seen`]). A join keeps an entry both
//! sides hold, or one side holds whose ID the other side's context does not
//! cover (an add it has not seen); an entry one side lacks and covers was
//! removed there (XDEL, a trim, a DEL) and stays removed. Removed entries
//! cost nothing: no per-entry metadata at all.
//!
//! The context is raised by XADD itself ([`Stream::added`], run where the
//! command runs, replays included), not only lazily: an XADD then an XDEL
//! on one node before any read must leave the entry covered, or a peer's
//! copy of it would come back. Lazily, as the other kinds' states
//! (`mod.rs`), a state that describes an older version than the key's
//! ([`Stream::current`]) covers every entry the key holds now: a write
//! that made entries without telling (RESTORE, a RENAME onto the key) made
//! adds this node has seen.
//!
//! `entries-added` is a base (the stream's count when its state was made,
//! or a reset's: a stream made anew counts from 0, XSETID or a RESTORE
//! from their value's count) plus a grow-only count per slot of the XADDs
//! that node made, joined by maximum (each node's adds reach the others in
//! order), less what the reset had counted (DECISIONS 192: the newer reset
//! wins a join, adds it had not seen count on top); `max-deleted-entry-id`
//! is the state's too, the highest ever, by maximum (DECISIONS 195); so
//! is the last ID: the highest entry ID seen or last ID set (DECISIONS
//! 196). A join that adds nothing to the newer side takes that side's
//! counts and IDs (DECISIONS 193). Consumer groups merge per entry (`groups.rs`: groups and
//! consumers as observed-remove members, pending entries as registers by
//! dot, the last-delivered ID by reset then maximum). The TTL joins by TTL
//! dots as a collection's (`ttl.rs`), over a stamp context kept beside.

use super::codec::{put_varint, Cursor};
use super::context::Context;
use super::fact::{self, NotApplied};
use super::groups::{self, Groups};
use super::ttl::Ttl;
use crate::keyspace::hlc::{stamp_node, NODE_BITS};
use crate::keyspace::stream::{StreamId, StreamValue};
use crate::keyspace::Value;

/// Whether EXPIRE & co and PERSIST on a stream travel as facts of its TTL
/// register, as on a set (`ttl.rs`; DECISIONS 283); off, the peer asks
/// for the stream's state.
pub(crate) const STREAM_TTL_FACTS: bool = true;

/// The slot an entry ID names (its sequence's low bits).
pub(crate) fn slot_of(id: StreamId) -> u64 {
    id.seq & ((1 << NODE_BITS) - 1)
}

/// A stream key's merge state (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Stream {
    /// The key's version this describes.
    pub version: u64,
    /// Per slot (sorted), the highest entry ID of that slot seen.
    pub seen: Vec<(u64, StreamId)>,
    /// Per slot (sorted), the XADDs that node made, seen here.
    pub added: Vec<(u64, u64)>,
    /// Entries added before the per-slot counts began, or the count a
    /// reset set (a stream made anew, XSETID, RESTORE: [`Self::restart`]).
    pub base: u64,
    /// The stamp of the last reset of the count (0: none), and the sum of
    /// `added` it saw: the count is `base + sum(added) - below`, so adds
    /// the reset had not seen count on top of it (DECISIONS 192).
    pub reset: u64,
    pub below: u64,
    /// The stream's max-deleted-entry-id: the highest ID XDEL removed or
    /// XSETID set, ever (a stream made anew keeps it, as it keeps `seen`),
    /// joined by maximum; the value's is this (DECISIONS 195).
    pub deleted: StreamId,
    /// The highest last ID a write set beyond the entries (XSETID, a
    /// RESTORE), ever, by maximum: the value's last ID is the higher of it
    /// and [`Self::top`] (DECISIONS 196).
    pub last: StreamId,
    /// The writes seen, per node slot (for the TTL dots).
    pub cc: Context,
    pub ttl: Ttl,
    /// The consumer groups' merge states (`groups.rs`).
    pub groups: Groups,
}

/// The stream a value holds, if it is one.
pub(crate) fn stream_of(v: Option<&Value>) -> Option<&StreamValue> {
    match v {
        Some(Value::Stream(s)) => Some(s),
        _ => None,
    }
}

impl Stream {
    /// The state of a key at `version` holding `value`: `meta` if it
    /// describes that version; else `meta` (or a new state) that has seen
    /// every entry the key holds, its base raised to the stream's
    /// `entries-added` where that is higher than the state's count.
    pub fn current(meta: Option<&Stream>, version: u64, value: Option<&Value>) -> Stream {
        if let Some(m) = meta.filter(|m| m.version == version) {
            return m.clone();
        }
        let mut s = meta.cloned().unwrap_or_default();
        s.version = version;
        s.cc.see(version);
        if let Some(v) = stream_of(value) {
            for (id, _) in v.range(StreamId::MIN, StreamId::MAX, false) {
                s.see(id);
            }
            // A write that set the count without telling (XSETID, a
            // RESTORE, a RENAME onto the key, a stream made anew): the
            // state counts what the value says from here on (DECISIONS 192).
            match meta {
                None => (s.base, s.deleted) = (v.entries_added, v.max_deleted),
                Some(_) => s.follow(version, v),
            }
        }
        groups::note(&mut s.groups, stream_of(value), version);
        s
    }

    /// After a group write stamped `stamp` (the state described the key's
    /// version before it): the groups as `value` holds them now, what it
    /// made or changed dotted with `stamp` (`groups.rs`); a stream the
    /// write made (XGROUP CREATE MKSTREAM) counts from its value's
    /// `entries-added` (0) on.
    pub fn noted_groups(&mut self, value: Option<&Value>, stamp: u64) {
        self.version = stamp;
        self.cc.see(stamp);
        if let Some(v) = stream_of(value) {
            self.follow(stamp, v);
        }
        groups::note(&mut self.groups, stream_of(value), stamp);
    }

    /// After a write stamped `stamp` left the stream `v`: its count is the
    /// state's from here on (a reset where it differs), its
    /// max-deleted-entry-id raises the state's (DECISIONS 192, 195).
    fn follow(&mut self, stamp: u64, v: &StreamValue) {
        self.restart(stamp, v.entries_added);
        self.deleted = self.deleted.max(v.max_deleted);
        self.last = self.last.max(v.last_id);
    }

    /// The stream's last ID: the highest entry ID seen or last ID set
    /// (DECISIONS 196).
    pub fn last_id(&self) -> StreamId {
        self.top().max(self.last)
    }

    /// The count starts over at `count` (a reset stamped `stamp`) where it
    /// is not `count` already: a stream made anew, or a write that set its
    /// `entries-added` (DECISIONS 192). Adds this state has not seen still
    /// count on top of it when they join.
    pub fn restart(&mut self, stamp: u64, count: u64) {
        if self.entries_added() != count {
            self.reset = stamp;
            self.base = count;
            self.below = self.added_sum();
        }
    }

    /// The sum of the per-slot counts.
    fn added_sum(&self) -> u64 {
        self.added.iter().fold(0, |n, c| n.saturating_add(c.1))
    }

    /// Notes the entry `id` as seen.
    pub fn see(&mut self, id: StreamId) {
        let slot = slot_of(id);
        match self.seen.binary_search_by_key(&slot, |c| c.0) {
            Ok(i) => self.seen[i].1 = self.seen[i].1.max(id),
            Err(i) => self.seen.insert(i, (slot, id)),
        }
    }

    /// Whether the entry `id` was seen (an entry seen and absent was
    /// removed).
    pub fn covers(&self, id: StreamId) -> bool {
        let slot = slot_of(id);
        self.seen
            .binary_search_by_key(&slot, |c| c.0)
            .is_ok_and(|i| self.seen[i].1 >= id)
    }

    /// The highest entry ID of `slot` seen (0-0: none).
    pub fn seen_in(&self, slot: u64) -> StreamId {
        self.seen
            .binary_search_by_key(&slot, |c| c.0)
            .map_or(StreamId::MIN, |i| self.seen[i].1)
    }

    /// The highest entry ID seen (of any slot).
    pub fn top(&self) -> StreamId {
        self.seen.iter().map(|c| c.1).max().unwrap_or_default()
    }

    /// After XADD stamped `stamp`, on the node of `slot`, added `id`
    /// (`made`: to a stream it made, whose count starts over).
    pub fn added(&mut self, slot: u64, id: StreamId, (stamp, made): (u64, bool)) {
        if made {
            self.restart(stamp, 0);
        }
        self.version = stamp;
        self.cc.see(stamp);
        self.see(id);
        match self.added.binary_search_by_key(&slot, |c| c.0) {
            Ok(i) => self.added[i].1 += 1,
            Err(i) => self.added.insert(i, (slot, 1)),
        }
    }

    /// The stream's `entries-added`.
    pub fn entries_added(&self) -> u64 {
        self.base
            .saturating_add(self.added_sum())
            .saturating_sub(self.below)
    }

    /// The joined count's reset: the newer one (with the base and sum it
    /// set); at one stamp, the larger of each (the same reset; two states
    /// made each on its own say none, 0, and keep the larger base).
    fn reset_joined(&self, theirs: &Stream) -> (u64, u64, u64) {
        let (a, b) = (
            (self.reset, self.base, self.below),
            (theirs.reset, theirs.base, theirs.below),
        );
        match a.0.cmp(&b.0) {
            std::cmp::Ordering::Less => b,
            std::cmp::Ordering::Greater => a,
            std::cmp::Ordering::Equal => (a.0, a.1.max(b.1), a.2.max(b.2)),
        }
    }

    /// The join of `self` (the key here holds `ours`) and `theirs` (the
    /// peer's key holds `their_value`): the joined state and the stream it
    /// gives (None: absent), built in ID order with node limits `limits`
    /// (`stream-node-max-bytes`, `stream-node-max-entries`).
    pub fn join(
        &self,
        ours: Option<&StreamValue>,
        theirs: &Stream,
        their_value: Option<&StreamValue>,
        limits: (usize, usize),
    ) -> (Stream, Option<StreamValue>) {
        let (reset, base, below) = self.reset_joined(theirs);
        let mut joined = Stream {
            version: self.version.max(theirs.version),
            seen: self.seen.clone(),
            added: self.added.clone(),
            base,
            reset,
            below,
            deleted: self.deleted.max(theirs.deleted),
            last: self.last.max(theirs.last),
            cc: self.cc.clone(),
            ttl: self.ttl.join(&self.cc, &theirs.ttl, &theirs.cc),
            groups: Groups::new(),
        };
        joined.cc.join(&theirs.cc);
        for &(_, id) in &theirs.seen {
            joined.see(id);
        }
        for &(slot, n) in &theirs.added {
            match joined.added.binary_search_by_key(&slot, |c| c.0) {
                Ok(i) => joined.added[i].1 = joined.added[i].1.max(n),
                Err(i) => joined.added.insert(i, (slot, n)),
            }
        }
        let mine = groups::Side {
            groups: &self.groups,
            value: ours,
            cc: &self.cc,
            version: self.version,
        };
        let other = groups::Side {
            groups: &theirs.groups,
            value: their_value,
            cc: &theirs.cc,
            version: theirs.version,
        };
        let (kept, metas, recount) = groups::join(&mine, &other);
        joined.groups = metas;
        let value = self.join_values(ours, theirs, their_value, &joined, limits, !kept.is_empty());
        let value = value.map(|mut v| {
            v.groups = kept;
            for name in &recount {
                groups::recount(&mut v, name, &mut joined.groups);
            }
            if let Some(p) = self.newer_alike(ours, theirs, their_value, &joined) {
                (v.last_id, v.max_deleted) = (p.last_id, p.max_deleted);
                v.entries_added = p.entries_added;
            }
            v
        });
        (joined, value)
    }

    /// The value of the side whose state the join equals and which is the
    /// newer (or the only such side: two alike at one version say none),
    /// where it holds one: its last ID, max-deleted-entry-id and
    /// entries-added are the join's (its entries already are: it has seen
    /// every entry the other side holds), so a join that adds nothing to a
    /// side gives exactly its value, at its version (DECISIONS 193; a
    /// maximum of both sides' would give an older stream's last ID to a
    /// stream made anew, at the newer side's version: one version, two
    /// values).
    fn newer_alike<'a>(
        &self,
        ours: Option<&'a StreamValue>,
        theirs: &Stream,
        their_value: Option<&'a StreamValue>,
        joined: &Stream,
    ) -> Option<&'a StreamValue> {
        let alike = (joined.same_content(self), joined.same_content(theirs));
        match alike {
            (true, false) if self.version >= theirs.version => ours,
            (false, true) if theirs.version >= self.version => their_value,
            (true, true) if self.version > theirs.version => ours,
            (true, true) if theirs.version > self.version => their_value,
            _ => None,
        }
    }

    /// The stream the join gives (see [`Self::join`]).
    fn join_values(
        &self,
        ours: Option<&StreamValue>,
        theirs: &Stream,
        their_value: Option<&StreamValue>,
        joined: &Stream,
        (max_bytes, max_entries): (usize, usize),
        groups_survive: bool,
    ) -> Option<StreamValue> {
        let entries = merged_entries(ours, theirs, their_value, self);
        // Present where an entry or a group survives (a group made that
        // the other side's deletion had not seen), where both sides hold
        // the key, else where the side holding it is newer than the other's
        // deletion (an entry-less stream, e.g. XGROUP CREATE MKSTREAM).
        let present = match (ours, their_value) {
            (Some(_), Some(_)) => true,
            _ if !entries.is_empty() || groups_survive => true,
            (Some(_), None) => self.version > theirs.version,
            (None, Some(_)) => theirs.version > self.version,
            (None, None) => false,
        };
        if !present {
            return None;
        }
        let mut v = StreamValue::default();
        for (id, f) in entries {
            v.append(id, f, max_bytes, max_entries);
        }
        v.last_id = joined.last_id();
        v.max_deleted = joined.deleted;
        v.entries_added = joined.entries_added().max(v.len() as u64);
        Some(v)
    }

    /// Whether `self` and `other` are one state but for the version.
    pub fn same_content(&self, other: &Stream) -> bool {
        (&self.seen, &self.added, self.base, &self.cc, &self.ttl)
            == (&other.seen, &other.added, other.base, &other.cc, &other.ttl)
            && (self.reset, self.below) == (other.reset, other.below)
            && (self.deleted, self.last) == (other.deleted, other.last)
            && self.groups == other.groups
    }

    /// `kind 'S' | version base count (slot ms seq)* count (slot n)*
    /// context ttl groups [reset below ms seq ms seq [reads moved]]` (`groups.rs`; a
    /// state written before groups merged ends after the TTL, and decodes
    /// with none; the reset, max-deleted-entry-id and last ID set are
    /// written where one is, DECISIONS 192, 195, 196; the groups'
    /// entries-read after them where a group has one, DECISIONS 238, then
    /// their moved dots, DECISIONS 257).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(b'S');
        put_varint(out, self.version);
        put_varint(out, self.base);
        put_varint(out, self.seen.len() as u64);
        for &(slot, id) in &self.seen {
            put_varint(out, slot);
            put_varint(out, id.ms);
            put_varint(out, id.seq);
        }
        put_varint(out, self.added.len() as u64);
        for &(slot, n) in &self.added {
            put_varint(out, slot);
            put_varint(out, n);
        }
        self.cc.encode(out);
        self.ttl.encode(out);
        groups::encode(&self.groups, out);
        let reads = self.groups.values().any(|m| m.read.is_some());
        if reads || self.reset != 0 || self.deleted != StreamId::MIN || self.last != StreamId::MIN {
            put_varint(out, self.reset);
            put_varint(out, self.below);
            for id in [self.deleted, self.last] {
                put_varint(out, id.ms);
                put_varint(out, id.seq);
            }
        }
        if reads {
            groups::encode_reads(&self.groups, out);
            groups::encode_moved(&self.groups, out);
        }
    }

    pub fn decode(b: &[u8]) -> Result<Stream, String> {
        let mut c = Cursor(b);
        if c.byte()? != b'S' {
            return Err("unknown merge metadata".into());
        }
        let version = c.varint()?;
        let base = c.varint()?;
        let n = c.count()?;
        let mut seen = Vec::with_capacity(n);
        for _ in 0..n {
            let slot = c.varint()?;
            let id = StreamId::new(c.varint()?, c.varint()?);
            seen.push((slot, id));
        }
        let n = c.count()?;
        let mut added = Vec::with_capacity(n);
        for _ in 0..n {
            added.push((c.varint()?, c.varint()?));
        }
        let sorted = |s: &mut dyn Iterator<Item = u64>| {
            let v: Vec<u64> = s.collect();
            v.windows(2).all(|w| w[0] < w[1])
        };
        if !sorted(&mut seen.iter().map(|c| c.0)) || !sorted(&mut added.iter().map(|c| c.0)) {
            return Err("merge metadata context out of order".into());
        }
        let cc = Context::decode(&mut c)?;
        let ttl = Ttl::decode(&mut c)?;
        let mut groups = match c.0.is_empty() {
            true => Groups::new(),
            false => groups::decode(&mut c)?,
        };
        let (reset, below, deleted, last) = match c.0.is_empty() {
            true => (0, 0, StreamId::MIN, StreamId::MIN),
            false => (
                c.varint()?,
                c.varint()?,
                StreamId::new(c.varint()?, c.varint()?),
                StreamId::new(c.varint()?, c.varint()?),
            ),
        };
        if !c.0.is_empty() {
            groups::decode_reads(&mut groups, &mut c)?;
        }
        if !c.0.is_empty() {
            groups::decode_moved(&mut groups, &mut c)?;
        }
        c.end()?;
        Ok(Stream {
            version,
            seen,
            added,
            base,
            reset,
            below,
            deleted,
            last,
            cc,
            ttl,
            groups,
        })
    }

    /// DEBUG MERGEINFO's lines.
    pub fn describe(&self) -> Vec<String> {
        let seen: Vec<String> = (self.seen.iter())
            .map(|(s, id)| format!("{s}:{}", id.text()))
            .collect();
        let added: Vec<String> = (self.added.iter())
            .map(|(s, n)| format!("{s}:{n}"))
            .collect();
        vec![
            "type:stream".to_string(),
            format!("version:{}", self.version),
            format!("seen:{}", seen.join(",")),
            match (self.reset, self.deleted) {
                (0, StreamId::MIN) => format!("added:{} base:{}", added.join(","), self.base),
                (r, d) => format!(
                    "added:{} base:{} reset:{r} below:{} deleted:{}",
                    added.join(","),
                    self.base,
                    self.below,
                    d.text()
                ),
            },
            self.cc.describe(),
            self.ttl.describe(),
            groups::describe(&self.groups),
        ]
    }
}

/// Whether XADD, XDEL and XTRIM emit their facts (on since the twentieth
/// session, DECISIONS 182). A fact applies where the key moved, so one
/// version no longer names one content: with them on, a stream's other
/// writes (DEL, group writes) never replay by version match at a peer
/// (`link/apply.rs`, `Local::replays`: the peer asks for the key's state), and a
/// stream join's version is the newer of the two sides' (the newest stamp
/// the state holds, as a fact leaves it: `merging.rs`, `merge_stream`).
/// Off, a stream write whose base moved at a peer costs a state round
/// trip and one whose base matches replays (the seventeenth session's).
/// Off at the end of the twentieth session (DECISIONS 185: full simulator
/// seed 49699, a stream deleted and made again kept its old state's count,
/// so a join's value counted an entries-added the origin's did not, at one
/// version); on again since the twenty-first, with the count's reset and a
/// join that adds nothing to the newer side giving its value (DECISIONS
/// 192-194); off again at its end (DECISIONS 179: full seed 25421, a stream
/// at one version with a group on one node and none on another); on since
/// the twenty-second, a stream's state at an equal version that lacks ours
/// answered (DECISIONS 210, `state.rs`'s `EXACT_JOIN`).
pub const STREAM_FACTS: bool = true;

/// Whether XADD, XDEL, XTRIM and XSETID on a stream with a TTL travel as
/// facts where the stream state's TTL register gives the key's expiry at
/// the origin and at the peer, as a set's writes (DECISIONS 228, 298);
/// off, they ask for the stream's state.
pub(crate) const TTL_WRITE_FACTS: bool = true;

/// Whether XSETID travels as a fact ([`SetidTold`], DECISIONS 284); off,
/// its peers ask for the stream's state.
pub(crate) const SETID_FACTS: bool = true;

/// Whether the XADD that makes a stream travels as a fact ([`Told`]'s
/// `made`, DECISIONS 297); off, its peers ask for the stream's state.
pub(crate) const MADE_FACTS: bool = true;

/// The `WORD` index of [`Told`]'s `made`: above a trim's words (0 to
/// `3 + 2 * slot`), below the key states' (`deletes.rs`, `1 << 16` on).
const MADE_WORD: u32 = (1 << 16) - 1;

/// What a stream write's fact says (DECISIONS 165-167), as the origin
/// builds it and a peer reads it back from the record's `(kind | index,
/// stamp)` pairs (`fact.rs`):
///
/// - `PREV 1, s`: the origin's newest stamp on the key before the write
///   (its slot's entry in the state's stamp context; 0: none);
/// - `ADD i, 0`: XADD added the entry whose ID is argument i (its fields
///   follow it);
/// - `DROP i, 0`: XDEL removed the entry whose ID is argument i (only
///   those it found: an ID it named and did not hold is not told);
/// - `WORD 0` and `WORD 1`: a trim's threshold T (its ms and seq): it
///   removed every entry at or below T that the origin had seen;
///   `WORD 2 + 2k` and `WORD 3 + 2k`: the highest ID of slot k the origin
///   had seen at or below T (its bound: what the peer must have seen); a
///   bound that is T itself (the usual case: the origin saw past T) is
///   `WORD 2 + 2k, 0` alone, two or three bytes on the wire;
/// - `WORD 2^16 - 1, p`: the XADD made the key (DECISIONS 297); `p` the print
///   ([`Stream::print`]) of the (deleted) stream's state it made it on:
///   a peer where the key is absent and its state prints the same replays
///   the record as it came (the trim's words are then not told).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Told {
    pub prev: u64,
    pub add: Option<u32>,
    pub drops: Vec<u32>,
    pub trim: Option<(StreamId, Vec<(u64, StreamId)>)>,
    pub made: Option<u64>,
}

impl Told {
    /// The fact's pairs (see [`Told`]).
    pub fn encode(&self, facts: &mut Vec<fact::Fact>) {
        facts.push((fact::PREV | (1 << fact::SHIFT), self.prev));
        if let Some(i) = self.add {
            facts.push((fact::ADD | (i << fact::SHIFT), 0));
        }
        facts.extend(
            self.drops
                .iter()
                .map(|&i| (fact::DROP | (i << fact::SHIFT), 0)),
        );
        if let Some((t, bounds)) = &self.trim {
            let word = |j: u64| fact::WORD | ((j as u32) << fact::SHIFT);
            facts.extend([(word(0), t.ms), (word(1), t.seq)]);
            for &(slot, b) in bounds {
                match b == *t {
                    true => facts.push((word(2 + 2 * slot), 0)),
                    false => {
                        facts.extend([(word(2 + 2 * slot), b.ms), (word(3 + 2 * slot), b.seq)])
                    }
                }
            }
        }
        if let Some(print) = self.made {
            facts.push((fact::WORD | (MADE_WORD << fact::SHIFT), print));
        }
    }

    /// Reads a fact back; None where it is not a stream write's.
    pub fn decode(facts: &[fact::Fact]) -> Option<Told> {
        let mut told = Told::default();
        let mut words: Vec<(u64, u64)> = Vec::new();
        for &(e, v) in facts {
            let i = e >> fact::SHIFT;
            match e & fact::KIND {
                fact::PREV => told.prev = v,
                fact::ADD if told.add.is_none() => told.add = Some(i),
                fact::DROP => told.drops.push(i),
                fact::WORD if i == MADE_WORD => told.made = Some(v),
                fact::WORD => words.push((u64::from(i), v)),
                _ => return None,
            }
        }
        if words.is_empty() {
            return Some(told);
        }
        let word = |j: u64| words.iter().find(|w| w.0 == j).map(|w| w.1);
        let t = StreamId::new(word(0)?, word(1)?);
        let mut bounds = Vec::new();
        for &(j, ms) in words.iter().filter(|w| w.0 >= 2 && w.0 % 2 == 0) {
            let b = word(j + 1).map_or(t, |seq| StreamId::new(ms, seq));
            bounds.push(((j - 2) / 2, b));
        }
        bounds.sort_unstable();
        told.trim = Some((t, bounds));
        Some(told)
    }
}

/// What XSETID's fact says (DECISIONS 284): `PREV 1, s` as a stream
/// write's, and `WORD 0, p`: the print ([`Stream::setid_print`]) of the
/// state the write built on (its count and IDs), so that a peer replays
/// the XSETID only where its own state prints the same (no add, XDEL or
/// XSETID here that the origin had not seen): the replay then gives the
/// origin's value and state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SetidTold {
    pub prev: u64,
    pub print: u64,
}

impl SetidTold {
    pub(crate) fn encode(&self, facts: &mut Vec<fact::Fact>) {
        facts.push((fact::PREV | (1 << fact::SHIFT), self.prev));
        facts.push((fact::WORD, self.print));
    }

    /// Reads a fact back; None where it is not XSETID's.
    pub(crate) fn decode(facts: &[fact::Fact]) -> Option<SetidTold> {
        match facts {
            [(p, prev), (fact::WORD, print)] if *p == fact::PREV | (1 << fact::SHIFT) => {
                Some(SetidTold {
                    prev: *prev,
                    print: *print,
                })
            }
            _ => None,
        }
    }
}

impl Stream {
    /// Origin, before a write stamped `stamp`: its fact's `PREV`, or None
    /// where this stamp wrote the key already (a transaction's second
    /// write travels without a fact).
    pub fn fact_prev(&self, stamp: u64) -> Option<u64> {
        let prev = self.cc.newest(stamp_node(stamp));
        (prev < stamp).then_some(prev)
    }

    /// A print of the whole state (version included): two states that
    /// print the same make the same state of a write replayed on them
    /// (XGROUP CREATE MKSTREAM of a missing key, DECISIONS 286).
    pub fn print(&self) -> u64 {
        let mut b = Vec::new();
        self.encode(&mut b);
        super::context::fingerprint(&b)
    }

    /// What an XSETID's result depends on besides its arguments (its
    /// fact's print, [`SetidTold`]): the per-slot counts, the count's
    /// reset, max-deleted-entry-id and the last ID.
    pub fn setid_print(&self) -> u64 {
        let mut b = Vec::new();
        for &(slot, n) in &self.added {
            put_varint(&mut b, slot);
            put_varint(&mut b, n);
        }
        let (deleted, last) = (self.deleted, self.last_id());
        for n in [
            self.base,
            self.reset,
            self.below,
            deleted.ms,
            deleted.seq,
            last.ms,
            last.seq,
        ] {
            put_varint(&mut b, n);
        }
        super::context::fingerprint(&b)
    }

    /// Origin: a trim's part of the fact: threshold `t` and, per slot this
    /// state has seen (after the write's add, `added`), its bound.
    pub fn trim_told(
        &self,
        t: StreamId,
        added: Option<StreamId>,
    ) -> (StreamId, Vec<(u64, StreamId)>) {
        let mut seen = self.seen.clone();
        if let Some(id) = added {
            match seen.binary_search_by_key(&slot_of(id), |c| c.0) {
                Ok(i) => seen[i].1 = seen[i].1.max(id),
                Err(i) => seen.insert(i, (slot_of(id), id)),
            }
        }
        let bounds = seen.iter().map(|&(slot, top)| (slot, top.min(t)));
        (t, bounds.collect())
    }

    /// Peer: whether a stream write's fact applies to this state (the
    /// key's, holding `value`): Ok, a duplicate (its stamp is seen), or a
    /// gap (what it builds on has not arrived, DECISIONS 165-167). `id_at`
    /// reads the ID at an argument of the write.
    pub fn check_fact(
        &self,
        stamp: u64,
        told: &Told,
        value: &StreamValue,
        id_at: impl Fn(u32) -> Option<StreamId>,
    ) -> Result<(), NotApplied> {
        if self.cc.covers(stamp) {
            return Err(NotApplied::Duplicate);
        }
        if told.prev != 0 && !self.cc.covers(told.prev) {
            return Err(NotApplied::Gap);
        }
        let mut added = None;
        if let Some(i) = told.add {
            let id = id_at(i).ok_or(NotApplied::Gap)?;
            // Its slot's own, and new here (an ID seen but with its stamp
            // unseen is not what the fact says: the state tells).
            if slot_of(id) != stamp_node(stamp) || self.covers(id) {
                return Err(NotApplied::Gap);
            }
            added = Some(id);
        }
        for &i in &told.drops {
            let id = id_at(i).ok_or(NotApplied::Gap)?;
            // An entry removed that this node never saw (its add would come
            // back after the remove); or one gone here that no XDEL here
            // counted (a trim took it: max-deleted-entry-id joins by state).
            if !self.covers(id) || (value.entry(id).is_none() && value.max_deleted < id) {
                return Err(NotApplied::Gap);
            }
        }
        if let Some((t, bounds)) = &told.trim {
            // Every entry the trim removed was seen here, and every entry
            // here at or below T was seen there (else an add concurrent
            // with the trim: kept by a join, which the state does).
            // (A bound is in its slot's terms: T may end in another.)
            let seen = |slot: u64, b: StreamId| {
                self.seen_in(slot) >= b || added.is_some_and(|id| slot_of(id) == slot && b <= id)
            };
            if bounds.iter().any(|&(slot, b)| !seen(slot, b)) {
                return Err(NotApplied::Gap);
            }
            let bound = |id: StreamId| bounds.iter().find(|b| b.0 == slot_of(id)).map(|b| b.1);
            let unseen = |id: StreamId| bound(id).is_none_or(|b| id > b);
            if value
                .range(StreamId::MIN, *t, false)
                .any(|(id, _)| unseen(id))
            {
                return Err(NotApplied::Gap);
            }
        }
        Ok(())
    }
}

/// The entries a join keeps, in ID order: those both sides hold, and those
/// one side holds that the other's state has not seen.
fn merged_entries(
    ours: Option<&StreamValue>,
    theirs: &Stream,
    their_value: Option<&StreamValue>,
    mine: &Stream,
) -> Vec<(StreamId, crate::keyspace::stream::Fields)> {
    let all = |s: Option<&StreamValue>| -> Vec<_> {
        s.map(|s| s.range(StreamId::MIN, StreamId::MAX, false).collect())
            .unwrap_or_default()
    };
    let (a, b) = (all(ours), all(their_value));
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let take_a = j >= b.len() || (i < a.len() && a[i].0 <= b[j].0);
        let take_b = i >= a.len() || (j < b.len() && b[j].0 <= a[i].0);
        if take_a && take_b {
            out.push(a[i].clone());
            (i, j) = (i + 1, j + 1);
        } else if take_a {
            if !theirs.covers(a[i].0) {
                out.push(a[i].clone());
            }
            i += 1;
        } else {
            if !mine.covers(b[j].0) {
                out.push(b[j].clone());
            }
            j += 1;
        }
    }
    out
}

/// Whether two streams hold the same entries, IDs, counts and groups (their
/// node layout aside: a stream rebuilt by a join may split its nodes
/// elsewhere).
pub(crate) fn same_value(a: Option<&StreamValue>, b: Option<&StreamValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            (
                a.last_id,
                a.entries_added,
                a.max_deleted,
                a.len(),
                &a.groups,
            ) == (
                b.last_id,
                b.entries_added,
                b.max_deleted,
                b.len(),
                &b.groups,
            ) && a.range(StreamId::MIN, StreamId::MAX, false).eq(b.range(
                StreamId::MIN,
                StreamId::MAX,
                false,
            ))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::stream::Fields;

    const A: u64 = 3;
    const B: u64 = 7;

    /// An ID of node `slot`: `n`-th within millisecond `ms`.
    fn id(ms: u64, n: u64, slot: u64) -> StreamId {
        StreamId::new(ms, n * 1024 + slot)
    }

    /// A node's side: its stream and state after its XADDs (`adds`) on
    /// top of `from`, with `stamp` counting up from `version`.
    fn side(from: &(Stream, StreamValue), adds: &[StreamId], slot: u64) -> (Stream, StreamValue) {
        let (mut s, mut v) = from.clone();
        for (i, &x) in adds.iter().enumerate() {
            v.append(x, Fields::pack([&b"f"[..], b"v"].into_iter()), 0, 0);
            s.added(slot, x, ((x.ms << 20) | ((i as u64) << 10) | slot, false));
        }
        v.entries_added = s.entries_added();
        (s, v)
    }

    fn ids(v: &Option<StreamValue>) -> Vec<StreamId> {
        let v = v.as_ref().expect("present");
        v.range(StreamId::MIN, StreamId::MAX, false)
            .map(|e| e.0)
            .collect()
    }

    fn empty() -> (Stream, StreamValue) {
        (Stream::default(), StreamValue::default())
    }

    #[test]
    fn concurrent_adds_are_all_kept_in_id_order_whichever_side_joins() {
        let base = side(&empty(), &[id(10, 0, A)], A);
        let a = side(&base, &[id(20, 0, A), id(20, 1, A)], A);
        let b = side(&base, &[id(15, 0, B), id(20, 0, B)], B);
        let (ja, va) = a.0.join(Some(&a.1), &b.0, Some(&b.1), (0, 0));
        let (jb, vb) = b.0.join(Some(&b.1), &a.0, Some(&a.1), (0, 0));
        let want = vec![
            id(10, 0, A),
            id(15, 0, B),
            id(20, 0, A),
            id(20, 0, B),
            id(20, 1, A),
        ];
        assert_eq!(ids(&va), want);
        assert!(same_value(va.as_ref(), vb.as_ref()));
        assert!(ja.same_content(&jb));
        let v = va.unwrap();
        assert_eq!(v.entries_added, 5);
        assert_eq!(v.last_id, id(20, 1, A));
        // Idempotent: joining the result with itself or a side changes
        // nothing more.
        let (again, v2) = ja.join(Some(&v), &ja, Some(&v), (0, 0));
        assert!(again.same_content(&ja) && same_value(v2.as_ref(), Some(&v)));
        let (_, v3) = ja.join(Some(&v), &a.0, Some(&a.1), (0, 0));
        assert!(same_value(v3.as_ref(), Some(&v)));
    }

    #[test]
    fn a_removed_entry_stays_removed_and_a_concurrent_add_survives() {
        let base = side(&empty(), &[id(10, 0, A), id(11, 0, A), id(12, 0, A)], A);
        // A deletes 10 and trims 11 (both seen); B adds 13 concurrently.
        let mut a = base.clone();
        assert!(a.1.delete(id(10, 0, A)) && a.1.delete(id(11, 0, A)));
        a.0 = Stream::current(Some(&a.0), 99, None);
        let b = side(&base, &[id(13, 0, B)], B);
        let (_, v) = a.0.join(Some(&a.1), &b.0, Some(&b.1), (0, 0));
        assert_eq!(ids(&v), vec![id(12, 0, A), id(13, 0, B)]);
        let (_, v) = b.0.join(Some(&b.1), &a.0, Some(&a.1), (0, 0));
        assert_eq!(ids(&v), vec![id(12, 0, A), id(13, 0, B)]);
    }

    #[test]
    fn a_deleted_key_keeps_only_the_adds_it_had_not_seen() {
        let base = side(&empty(), &[id(10, 0, A)], A);
        let mut gone = base.0.clone();
        gone.version = base.0.version + 1;
        let b = side(&base, &[id(40, 0, B)], B);
        let (_, v) = gone.join(None, &b.0, Some(&b.1), (0, 0));
        assert_eq!(ids(&v), vec![id(40, 0, B)]);
        // Nothing unseen: the deletion wins.
        let (_, v) = gone.join(None, &base.0, Some(&base.1), (0, 0));
        assert!(v.is_none());
    }

    #[test]
    fn an_entry_less_stream_against_a_deletion_goes_to_the_newer() {
        let mut made = Stream::current(None, 70, None);
        made.version = 70;
        let mut gone = Stream::current(None, 60, None);
        gone.version = 60;
        let empty = StreamValue::default();
        let (_, v) = gone.join(None, &made, Some(&empty), (0, 0));
        assert!(v.is_some());
        let (_, v) = made.join(Some(&empty), &gone, None, (0, 0));
        assert!(v.is_some());
        gone.version = 80;
        let (_, v) = gone.join(None, &made, Some(&empty), (0, 0));
        assert!(v.is_none());
    }

    #[test]
    fn current_sees_entries_a_write_made_without_telling() {
        let (_, mut v) = side(&empty(), &[id(5, 0, A), id(6, 0, B)], A);
        v.entries_added = 9;
        let s = Stream::current(None, 42, Some(&Value::Stream(Box::new(v))));
        assert!(s.covers(id(5, 0, A)) && s.covers(id(6, 0, B)));
        assert!(!s.covers(id(6, 1, B)) && !s.covers(id(7, 0, A)));
        assert_eq!(s.entries_added(), 9);
        assert_eq!(s.top(), id(6, 0, B));
    }

    /// A fact's pairs read back as they were told.
    #[test]
    fn a_told_fact_round_trips() {
        let told = Told {
            prev: 77,
            add: Some(4),
            drops: vec![],
            trim: Some((id(9, 0, A), vec![(A, id(9, 0, A)), (B, id(8, 1, B))])),
            made: None,
        };
        let mut facts = Vec::new();
        told.encode(&mut facts);
        assert_eq!(facts.len(), 2 + 2 + 1 + 2, "a bound at T is one word");
        assert_eq!(Told::decode(&facts), Some(told));
        let told = Told {
            prev: 77,
            add: Some(4),
            drops: vec![],
            trim: Some((id(0, 0, A), vec![(A, id(0, 0, A))])),
            made: Some(u64::MAX - 3),
        };
        let mut facts = Vec::new();
        told.encode(&mut facts);
        assert_eq!(Told::decode(&facts), Some(told));
        let xdel = Told {
            prev: 0,
            drops: vec![2, 4],
            ..Told::default()
        };
        facts.clear();
        xdel.encode(&mut facts);
        assert_eq!(Told::decode(&facts), Some(xdel));
    }

    /// A state whose stamp context saw `stamps`, holding `v`.
    fn seen_at(v: &StreamValue, stamps: &[u64]) -> Stream {
        let mut s = Stream::current(None, stamps[0], Some(&Value::Stream(Box::new(v.clone()))));
        for &st in stamps {
            s.cc.see(st);
        }
        s
    }

    /// An XADD's fact applies where the origin's previous write is seen,
    /// even with this node's own later entries here; its missed write, or
    /// its own entry again, is a gap or a duplicate.
    #[test]
    fn an_xadd_fact_applies_unless_its_base_is_missing() {
        let stamp = |ms: u64, slot: u64| (ms << 20) | slot;
        let (_, v) = side(&empty(), &[id(10, 0, A), id(30, 0, B)], B);
        let here = seen_at(&v, &[stamp(10, A), stamp(30, B)]);
        let add = |prev| Told {
            prev,
            add: Some(2),
            ..Told::default()
        };
        let new = |_| Some(id(20, 0, A)); // below B's entry: a late one
        assert_eq!(
            here.check_fact(stamp(20, A), &add(stamp(10, A)), &v, new),
            Ok(())
        );
        let missed = add(stamp(15, A));
        assert_eq!(
            here.check_fact(stamp(20, A), &missed, &v, new),
            Err(NotApplied::Gap)
        );
        let old = |_| Some(id(10, 0, A));
        assert_eq!(
            here.check_fact(stamp(10, A), &add(0), &v, old),
            Err(NotApplied::Duplicate)
        );
        // An ID of another slot than its stamp's is not what a fact says.
        let other = |_| Some(id(20, 0, B));
        assert_eq!(
            here.check_fact(stamp(20, A), &add(stamp(10, A)), &v, other),
            Err(NotApplied::Gap)
        );
    }

    /// A trim's fact applies where every entry it removed was seen here and
    /// every entry here at or below its threshold was seen there; an XDEL's
    /// where its entries were seen.
    #[test]
    fn a_remove_fact_is_a_gap_where_its_entries_or_ours_are_unseen() {
        let stamp = |ms: u64, slot: u64| (ms << 20) | slot;
        let (_, v) = side(&empty(), &[id(10, 0, A), id(20, 0, A), id(25, 0, B)], A);
        let here = seen_at(&v, &[stamp(20, A), stamp(25, B)]);
        let trim = |t: StreamId, bounds: Vec<(u64, StreamId)>| Told {
            prev: stamp(20, A),
            trim: Some((t, bounds)),
            ..Told::default()
        };
        let none = |_| None;
        // A trimmed to 20 having seen A's entries only: ours (B's 25) is
        // above the threshold, applies.
        let t = trim(id(20, 0, A), vec![(A, id(20, 0, A))]);
        assert_eq!(here.check_fact(stamp(40, A), &t, &v, none), Ok(()));
        // Through 30: B's 25 unseen there, kept by a join: a gap.
        let t = trim(id(30, 0, A), vec![(A, id(20, 0, A))]);
        assert_eq!(
            here.check_fact(stamp(40, A), &t, &v, none),
            Err(NotApplied::Gap)
        );
        // It removed an entry of A's we have not seen (A's 22).
        let t = trim(id(22, 0, A), vec![(A, id(22, 0, A)), (B, id(22, 0, A))]);
        assert_eq!(
            here.check_fact(stamp(40, A), &t, &v, none),
            Err(NotApplied::Gap)
        );
        let xdel = Told {
            prev: stamp(20, A),
            drops: vec![2],
            ..Told::default()
        };
        let seen = |_| Some(id(10, 0, A));
        assert_eq!(here.check_fact(stamp(40, A), &xdel, &v, seen), Ok(()));
        let unseen = |_| Some(id(50, 0, B));
        assert_eq!(
            here.check_fact(stamp(40, A), &xdel, &v, unseen),
            Err(NotApplied::Gap)
        );
    }

    /// A stream deleted and made again by XGROUP CREATE MKSTREAM counts
    /// from 0, and a peer's join with it (a tombstone, or the old stream
    /// whose deletion it never saw) gives exactly its value: one version,
    /// one value (full simulator seed 49699, DECISIONS 192-193). An add
    /// the reset had not seen counts on top of it.
    #[test]
    fn a_stream_made_anew_counts_from_zero_and_joins_to_its_own_value() {
        let at = |ms: u64| ms << 20;
        let old = side(&empty(), &[id(10, 0, A)], A);
        let gone = Stream::current(Some(&old.0), at(40), None);
        let mut made = gone.clone();
        let fresh = StreamValue::default();
        made.noted_groups(Some(&Value::Stream(Box::new(fresh.clone()))), at(50));
        assert_eq!(made.entries_added(), 0);
        for (state, value) in [(&gone, None), (&old.0, Some(&old.1))] {
            for (j, v) in [
                state.join(value, &made, Some(&fresh), (0, 0)),
                made.join(Some(&fresh), state, value, (0, 0)),
            ] {
                assert!(j.same_content(&made));
                assert!(same_value(v.as_ref(), Some(&fresh)), "{v:?}");
            }
        }
        // XADD to it: 1; B's add to the old stream, unseen by the reset,
        // survives and counts on top, whichever side joins.
        let mut again = made.clone();
        again.added(A, id(70, 0, A), (at(70), false));
        assert_eq!(again.entries_added(), 1);
        let mut v = fresh.clone();
        v.append(
            id(70, 0, A),
            Fields::pack([&b"f"[..], b"v"].into_iter()),
            0,
            0,
        );
        v.entries_added = 1;
        let b = side(&old, &[id(20, 0, B)], B);
        let (j1, v1) = again.join(Some(&v), &b.0, Some(&b.1), (0, 0));
        let (j2, v2) = b.0.join(Some(&b.1), &again, Some(&v), (0, 0));
        assert!(j1.same_content(&j2) && same_value(v1.as_ref(), v2.as_ref()));
        assert_eq!(ids(&v1), vec![id(20, 0, B), id(70, 0, A)]);
        assert_eq!((j1.entries_added(), v1.unwrap().entries_added), (2, 2));
        // XADD on a deleted key (no group) starts over too.
        let mut readd = gone.clone();
        readd.added(A, id(80, 0, A), (at(80), true));
        assert_eq!(readd.entries_added(), 1);
    }

    /// A stream made anew keeps the old stream's max-deleted-entry-id after
    /// a join with it, where a peer deleted an entry and then added one the
    /// deletion had not seen, whichever side joins, and the value's is the
    /// state's (merge simulator seeds 1768 and 954, DECISIONS 195).
    #[test]
    fn a_stream_made_anew_keeps_its_own_max_deleted_id() {
        let at = |ms: u64| ms << 20;
        let old = side(&empty(), &[id(10, 0, A), id(11, 0, B)], A);
        let mut b = old.clone();
        assert!(b.1.delete(id(11, 0, B)));
        b.1.max_deleted = id(11, 0, B);
        b.0.noted_groups(Some(&Value::Stream(Box::new(b.1.clone()))), at(30) | B);
        assert_eq!(b.0.deleted, id(11, 0, B));
        let b = side(&b, &[id(60, 0, B)], B);
        let mut made = Stream::current(Some(&old.0), at(40), None);
        let fresh = StreamValue::default();
        made.noted_groups(Some(&Value::Stream(Box::new(fresh.clone()))), at(50));
        let (j1, v1) = made.join(Some(&fresh), &b.0, Some(&b.1), (0, 0));
        let (j2, v2) = b.0.join(Some(&b.1), &made, Some(&fresh), (0, 0));
        assert!(j1.same_content(&j2) && same_value(v1.as_ref(), v2.as_ref()));
        assert_eq!(ids(&v1), vec![id(60, 0, B)]);
        let want = id(11, 0, B);
        assert_eq!((j1.deleted, v1.unwrap().max_deleted), (want, want));
        // An XDEL concurrent with the reset raises it whichever way it
        // arrives (a fact here, or the state).
        let mut c = b.clone();
        assert!(c.1.delete(id(60, 0, B)));
        c.1.max_deleted = id(60, 0, B);
        c.0.noted_groups(Some(&Value::Stream(Box::new(c.1.clone()))), at(70) | B);
        let (j3, _) = made.join(Some(&fresh), &c.0, Some(&c.1), (0, 0));
        assert_eq!(j3.deleted, id(60, 0, B));
    }

    /// XSETID's entries-added, read lazily by the next write, is the count
    /// from then on, lower or higher.
    #[test]
    fn a_count_set_without_telling_is_read_as_a_reset() {
        let (s, mut v) = side(&empty(), &[id(5, 0, A), id(6, 0, A), id(7, 0, A)], A);
        assert_eq!(s.entries_added(), 3);
        for n in [1, 9] {
            v.entries_added = n;
            let now = Stream::current(
                Some(&s),
                99 << 20,
                Some(&Value::Stream(Box::new(v.clone()))),
            );
            assert_eq!((now.entries_added(), now.reset), (n, 99 << 20));
            let mut after = now.clone();
            after.added(A, id(100, 0, A), ((100 << 20) | A, false));
            assert_eq!(after.entries_added(), n + 1);
        }
    }

    #[test]
    fn the_state_encodes_and_decodes() {
        let (s, _) = side(&empty(), &[id(5, 0, A), id(9, 2, B)], A);
        let mut s = s;
        s.base = 4;
        let mut out = Vec::new();
        s.encode(&mut out);
        assert_eq!(Stream::decode(&out), Ok(s.clone()));
        // (The last byte is the groups' count, 0: a state written before
        // groups merged ends before it and decodes with none.)
        assert!(Stream::decode(&out[..out.len() - 2]).is_err());
        assert_eq!(Stream::decode(&out[..out.len() - 1]), Ok(s.clone()));
        // With a reset: four varints more, read back.
        s.restart(1 << 30, 0);
        s.deleted = id(3, 0, B);
        assert_eq!((s.reset, s.below, s.entries_added()), (1 << 30, 2, 0));
        out.clear();
        s.encode(&mut out);
        assert_eq!(Stream::decode(&out), Ok(s));
    }

    /// Full seed 25421 (DECISIONS 210): a group made by XGROUP CREATE
    /// MKSTREAM on one node, a newer flush on another that had not seen
    /// it. Where the flush replays over the group, its state covers the
    /// group's dot and lacks it; where the flushing node's tombstone joins
    /// the group's state, the group survives, at the flush's version. The
    /// two states stand at one version: their join, in either order, is
    /// the side without the group, which is why a stream's state at an
    /// equal version that lacks ours is answered (`EXACT_JOIN`).
    #[test]
    fn a_flush_and_its_tombstone_join_to_one_state_in_either_order() {
        let at = |ms: u64, slot: u64| (ms << 20) | slot;
        let mut v = StreamValue::default();
        let g = crate::keyspace::stream_groups::Group::new(StreamId::MIN, 0);
        v.groups.insert(b"g0".to_vec(), g);
        let mut made = Stream::default();
        made.noted_groups(Some(&Value::Stream(Box::new(v.clone()))), at(10, A));
        let flushed = Stream::current(Some(&made), at(20, B), None);
        let tombstone = Stream::current(None, at(20, B), None);
        let (kept, kept_v) = made.join(Some(&v), &tombstone, None, (0, 0));
        assert_eq!(kept.version, flushed.version);
        let kv = kept_v.expect("the group survives the tombstone's join");
        assert!(kv.groups.contains_key(&b"g0"[..]));
        for (j, jv) in [
            flushed.join(None, &kept, Some(&kv), (0, 0)),
            kept.join(Some(&kv), &flushed, None, (0, 0)),
        ] {
            assert!(j.same_content(&flushed), "{:?}", j.describe());
            assert!(jv.is_none(), "{jv:?}");
        }
    }
}
