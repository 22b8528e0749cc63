//! Merge facts (issue 24, docs/MERGE-DESIGN.md "Facts"): what a merging write did
//! to its key's merge state at its origin, carried in the write's record,
//! so that a peer applies the write in O(what it named) with no round trip
//! for the key's whole state.
//!
//! A fact is a short list of `(kind | argument index, stamp)` pairs beside
//! the record's argv; its values (a member, a field's value, a score, an
//! increment) are read from the argv itself:
//!
//! - `PREV i, s`: the key at argument i; `s` is the origin's own newest
//!   stamp on the key before this write (its part's stamp for a counter,
//!   its slot's entry in the causal context for a collection; 0: none).
//!   A peer that has not seen `s` missed an earlier write of the origin on
//!   the key (a dropped connection, a snapshot that crossed the stream):
//!   that is a *gap*, and the peer asks for the key's state instead, as
//!   every merging write did before facts.
//! - `RESET i, r`: the counter reset the increment counted from; a peer
//!   that has not seen that reset has a gap too.
//! - `ADD i, 0`: the member at argument i was added or set by the write:
//!   its dot is the write's stamp.
//! - `DROP i, d`: the dot `d` of the member at argument i was removed (the
//!   write saw it: a remove, or an add that replaced it); a peer that has
//!   not seen `d` has a gap.
//!
//! - `COUNTED i, p`: the write counted into the field (sorted-set member)
//!   at argument i (HINCRBY, HINCRBYFLOAT, ZINCRBY; docs/MERGE-DESIGN.md, "field
//!   counters"); `p` is a print of that field's merge state (its counter
//!   and dots) at the origin before the write. A peer whose state of the
//!   field prints the same runs the origin's steps on it and ends where the
//!   origin did; any other peer asks for the key's state (a concurrent
//!   write of the field here, which only a join resolves).
//! - `WORD j, w`: the j-th word of a number the argv does not hold: a float
//!   increment (INCRBYFLOAT's and HINCRBYFLOAT's records are the SET and
//!   HSET of their result), words 0 and 1 of its long double.
//!
//! `COUNTED`'s and `WORD`'s second halves are numbers, not stamps: the
//! record codes them as they are ([`is_raw`]).
//!
//! Applying a fact is idempotent (a write whose stamp the key's state
//! covers already is a duplicate and changes nothing), so a record
//! delivered twice, or after a state that included it, is harmless.
//!
//! The origin emits a fact only where its write is the first of its stamp
//! on the key: two writes of one transaction share a stamp, and the second
//! travels the old way (its record asks the peers to fetch the key's state).

use hashbrown::hash_map::EntryRef;

use super::elements::{Dot, Dots, Elements, Item};
use super::{Counter, Incr, Merged, Part};
use crate::keyspace::hlc::stamp_node;
use crate::keyspace::longdouble::F80;

/// Whether writes on sets, hashes and sorted sets emit their facts (a
/// switch for bisecting: off, collections travel as states, one round trip
/// per write, while their origin still keeps its elements' state current
/// in O(members named), `Elements::note_write`). A peer applies one only
/// where it is newer than the key there (DECISIONS 77).
pub(crate) const ELEMENT_FACTS: bool = true;

/// Whether list pushes and pops emit their facts (lists.rs,
/// `Lists::apply_end_fact`; a switch for bisecting, as [`ELEMENT_FACTS`]).
/// On since the nineteenth session: the full workload's list seeds that
/// kept them off (237, 1140, 1187, 260, 807, ...) were a flush's survivors
/// chosen by a stale or compacted state and a fact's result at its stamp
/// holding more than the origin's, which no one answered
/// (docs/MERGE-DESIGN.md section 8, items 33 and 34).
pub(crate) const LIST_FACTS: bool = true;

/// Whether LSET, LINSERT and LREM emit their facts (lists/edits.rs; a
/// switch as [`LIST_FACTS`]): off, their origin's list state follows them
/// by the diff of values, and their peers ask for the key's state.
pub(crate) const LIST_EDIT_FACTS: bool = true;

/// Whether writes on a set, hash or sorted set with a TTL emit their facts,
/// and EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT and PERSIST on one travel as
/// facts of its TTL register (merge/ttl.rs: `PREV` and a `DROP` per TTL
/// dot replaced, at the key's argument; the expiry is the record's
/// PEXPIREAT argument, 0 for PERSIST). A switch as [`ELEMENT_FACTS`]: off,
/// such writes travel as states (DECISIONS 228-230).
pub(crate) const TTL_FACTS: bool = true;

/// Whether the removes that pick their members at the origin (SPOP,
/// SMOVE; ZPOPMIN/ZPOPMAX and their blocking and ZMPOP forms,
/// ZREMRANGEBYSCORE/RANK/LEX) travel as facts: on an active node their
/// record is the SREM/ZREM (and SMOVE's SADD) of the members they took,
/// with its fact, as SREM's and ZREM's (a switch as [`ELEMENT_FACTS`]; off,
/// they go as Redis propagates them and their peers ask for the key's
/// state). DECISIONS 233.
pub(crate) const REMOVE_FACTS: bool = true;

/// Whether LTRIM (pops at both ends: a fact naming the ids it took at
/// each), LMOVE/RPOPLPUSH/BLMOVE/BRPOPLPUSH between two keys (a pop's
/// record on the source and a push's on the destination, each with its
/// fact) and onto one key (a rotation: one fact of its pop and push)
/// travel as facts (a switch as [`LIST_FACTS`]; off, as states).
/// DECISIONS 234, 235, 237.
pub(crate) const LIST_MOVE_FACTS: bool = true;

/// Whether whole-key deletes (DEL, UNLINK, GETDEL, SPOP of the whole set)
/// and overwrites (the *STOREs, COPY, RENAME) of a counter, set, hash,
/// sorted set or list carry the states of the keys they wrote, which a peer
/// joins with no round trip (`deletes.rs`; a switch as [`ELEMENT_FACTS`];
/// off, their peers ask for the keys' states). DECISIONS 242-246.
pub(crate) const DELETE_FACTS: bool = true;

/// Whether a write on a counter that is not an increment (SET, GETSET,
/// SETEX, APPEND, SETRANGE, MSET of one key; EXPIRE and its family, PERSIST)
/// travels as a fact of the reset it makes (merge/reset.rs: the reset's
/// base, the parts it observed and the key's expiry after it); off, such
/// writes travel as states (DECISIONS 248-250).
pub(crate) const RESET_FACTS: bool = true;

/// Whether EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT and PERSIST on a list
/// travel as facts of its TTL register, as on a set, hash or sorted set
/// ([`TTL_FACTS`]; merge/ttl.rs); off, as states (DECISIONS 251).
pub(crate) const LIST_TTL_FACTS: bool = true;

/// One entry of a fact: the kind ORed into an argument index, and a stamp.
pub(crate) type Fact = (u32, u64);

/// The kind bits of a [`Fact`]'s first half; the argument index is above
/// them (`kind | index << SHIFT`: small numbers, one byte on the wire).
pub(crate) const KIND: u32 = 7;
pub(crate) const SHIFT: u32 = 3;
pub(crate) const PREV: u32 = 1;
pub(crate) const RESET: u32 = 2;
pub(crate) const ADD: u32 = 3;
pub(crate) const DROP: u32 = 4;
pub(crate) const COUNTED: u32 = 5;
pub(crate) const WORD: u32 = 6;

/// Whether a fact entry's second half is a number (coded as it is), not a
/// stamp (coded as its distance below the write's).
pub(crate) fn is_raw(entry: u32) -> bool {
    matches!(entry & KIND, COUNTED | WORD)
}

/// A float increment as two `WORD` entries (see the module comment).
pub(crate) fn float_words(f: F80, facts: &mut Vec<Fact>) {
    let (neg, m, e) = match f {
        F80::Fin { neg, m, e } => (neg, m, e),
        _ => return, // increments are finite
    };
    let high = u64::from(e as u32) | (u64::from(neg) << 32);
    facts.extend([(WORD, m), (WORD | (1 << SHIFT), high)]);
}

/// The float increment a fact's `WORD` entries carry, if any.
pub(crate) fn words_float(facts: &[Fact]) -> Option<F80> {
    let word = |j: u32| {
        facts
            .iter()
            .find(|f| f.0 == WORD | (j << SHIFT))
            .map(|f| f.1)
    };
    let (m, high) = (word(0)?, word(1)?);
    Some(F80::Fin {
        neg: high >> 32 & 1 == 1,
        m,
        e: high as u32 as i32,
    })
}

thread_local! {
    /// Set while an active link writes what a peer's fact or state changed:
    /// the commands it replays must not note facts of their own (the link
    /// stores the merge state it computed).
    static APPLYING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a write here notes its merge facts (not while a link applies).
pub(crate) fn noting() -> bool {
    !APPLYING.with(std::cell::Cell::get)
}

/// Runs `f` with noting off (see [`noting`]).
pub(crate) fn applying<R>(f: impl FnOnce() -> R) -> R {
    let was = APPLYING.with(|a| a.replace(true));
    let r = f();
    APPLYING.with(|a| a.set(was));
    r
}

/// Why a fact was not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotApplied {
    /// Its write is in the state here already: nothing to do.
    Duplicate,
    /// Something it builds on has not arrived: ask for the key's state.
    Gap,
}

/// The `PREV` and `RESET` stamps of a fact (0 where absent).
fn bases_of(facts: &[Fact]) -> (u64, u64) {
    let find = |kind| facts.iter().find(|f| f.0 & KIND == kind).map_or(0, |f| f.1);
    (find(PREV), find(RESET))
}

impl Counter {
    fn part(&self, slot: u64) -> Option<&Part> {
        self.parts.iter().find(|p| p.slot == slot)
    }

    /// Origin, before adding an increment stamped `stamp`: its fact's
    /// `PREV` and `RESET` stamps, or None where this stamp already wrote
    /// the counter (a transaction's second increment).
    pub fn fact_base(&self, stamp: u64) -> Option<(u64, u64)> {
        let prev = self.part(stamp_node(stamp)).map_or(0, |p| p.stamp);
        (prev < stamp).then_some((prev, self.reset))
    }

    /// Peer: an increment of `by` stamped `stamp` with its fact. The part
    /// of the origin grows where it stood at the fact's `PREV`; the reset
    /// it counted from must be ours or older (a newer reset here observed
    /// less of the part, so the growth shows).
    pub fn apply_increment(
        &mut self,
        stamp: u64,
        by: Incr,
        facts: &[Fact],
    ) -> Result<(), NotApplied> {
        let (prev, reset) = bases_of(facts);
        let have = self.part(stamp_node(stamp)).map_or(0, |p| p.stamp);
        if have >= stamp {
            return Err(NotApplied::Duplicate);
        }
        if have != prev || reset > self.reset {
            return Err(NotApplied::Gap);
        }
        let version = self.version;
        self.add(stamp_node(stamp), by, stamp);
        self.version = version.max(stamp);
        Ok(())
    }
}

/// A member a write named, as the origin notes it: its argument index, the
/// member, and its value's fingerprint now (None: it is absent now).
pub(crate) type Named<'a> = (u32, &'a [u8], Option<u64>);

/// A dot's stamp and fingerprint.
type StampAndPrint = (u64, u64);

/// What applying a fact changes in a collection's value.
pub(crate) use super::elements::Change;

impl Elements {
    /// Origin, after a write stamped `stamp` named `members` of this
    /// collection (this state is the key's as it was before the write):
    /// each named member's dots become the write's one where it is present
    /// now, none where it is absent; the fact goes to `facts` unless this
    /// stamp already wrote the key (then nothing is pushed and false is
    /// returned, the state follows all the same).
    pub fn note_write(
        &mut self,
        key_index: u32,
        stamp: u64,
        members: &[Named<'_>],
        facts: &mut Vec<Fact>,
    ) -> bool {
        let prev = self.cc.newest(stamp_node(stamp));
        let emit = prev < stamp;
        let start = facts.len();
        facts.push((PREV | (key_index << SHIFT), prev));
        for &(i, m, fp) in members {
            let drop = |d: &Dot| (DROP | (i << SHIFT), d.stamp);
            let Some(fp) = fp else {
                if let Some(old) = self.dots.remove(m) {
                    facts.extend(old.iter().map(drop));
                }
                continue;
            };
            let dot = Dots::One(Dot {
                stamp,
                fp,
                value: None,
            });
            // A member with dots has them replaced in place (its key kept);
            // one hash and probe either way.
            match self.dots.entry_ref(m) {
                EntryRef::Occupied(mut o) => {
                    facts.extend(std::mem::replace(o.get_mut(), dot).iter().map(drop));
                }
                EntryRef::Vacant(v) => {
                    v.insert(dot);
                }
            }
            facts.push((ADD | (i << SHIFT), 0));
        }
        self.cc.see(stamp);
        self.version = stamp;
        if !emit {
            facts.truncate(start);
        }
        emit
    }

    /// Origin, after an increment (HINCRBY, HINCRBYFLOAT, ZINCRBY) of one
    /// field, this state being the key's as it was before: as
    /// `count_field` then `note_write` of the field, then the field's
    /// counter settled and its new dot given the value written (the steps
    /// `Shard::count_field` took one by one), with the field's dots and
    /// counter each looked up once (DECISIONS 215). The fact stays in
    /// `facts`, closed by `COUNTED` with `counting`'s print, only where
    /// `counting` is Some and the stamp's first write of the key.
    /// Returns, where `value` is asked, the counter's value if it is at
    /// the write's stamp.
    pub fn note_counted(
        &mut self,
        w: super::elements::CountedWrite<'_>,
        counting: Option<(u32, u64)>,
        value: bool,
        facts: &mut Vec<Fact>,
    ) -> Option<Merged> {
        let (stamp, (i, m)) = (w.stamp, w.field);
        let prev = self.cc.newest(stamp_node(stamp));
        let emit = prev < stamp;
        let start = facts.len();
        facts.push((PREV | (1 << SHIFT), prev));
        let drop = |d: &Dot| (DROP | (i << SHIFT), d.stamp);
        let fp = w.now.as_ref().map(Item::fingerprint);
        let dot = |fp| {
            Dots::One(Dot {
                stamp,
                fp,
                value: None,
            })
        };
        // The field's newest dot's stamp before the write, its dots
        // replaced by the write's (none where it is absent now).
        let (newest, ds) = match (self.dots.entry_ref(m), fp) {
            (EntryRef::Occupied(o), None) => {
                let old = o.remove();
                facts.extend(old.iter().map(drop));
                (old.last().map(|d| d.stamp), None)
            }
            (EntryRef::Occupied(o), Some(fp)) => {
                let ds = o.into_mut();
                let old = std::mem::replace(ds, dot(fp));
                facts.extend(old.iter().map(drop));
                (old.last().map(|d| d.stamp), Some(ds))
            }
            (EntryRef::Vacant(_), None) => (None, None),
            (EntryRef::Vacant(v), Some(fp)) => (None, Some(v.insert(dot(fp)))),
        };
        if fp.is_some() {
            facts.push((ADD | (i << SHIFT), 0));
        }
        let c = super::elements::count_into(&mut self.counters, m, newest, (stamp, w.by.0, w.by.1));
        let settled = super::elements::settle(c, stamp, w.now.as_ref());
        let at = value && c.version == stamp;
        let value = at.then(|| settled.unwrap_or_else(|| c.value()));
        if let Some(d) = ds.and_then(|ds| ds.last_mut()) {
            d.value = w.now.map(Box::new);
        }
        self.cc.see(stamp);
        self.version = stamp;
        match counting {
            Some((at, print)) if emit && ELEMENT_FACTS => {
                facts.push((COUNTED | (at << SHIFT), print))
            }
            _ => facts.truncate(start),
        }
        value
    }

    /// Peer: applies a write's fact. `item(i)`: the member at argument i
    /// and the value the write gave it; `here(m)`: member m's value in the
    /// key now (the newest dot's value lives there). Returns what changes
    /// in the value; the state here follows (its version becomes the
    /// newer of its own and the write's stamp).
    pub fn apply_fact<'a>(
        &mut self,
        stamp: u64,
        facts: &[Fact],
        item: impl Fn(u32) -> Option<(&'a [u8], Item)>,
        here: impl Fn(&[u8]) -> Option<Item>,
    ) -> Result<Vec<Change>, NotApplied> {
        if self.cc.covers(stamp) {
            return Err(NotApplied::Duplicate);
        }
        let (prev, _) = bases_of(facts);
        let unseen = |d: u64| d != 0 && d != stamp && !self.cc.covers(d);
        if unseen(prev) || facts.iter().any(|f| f.0 & KIND == DROP && unseen(f.1)) {
            return Err(NotApplied::Gap);
        }
        // Every member named must read from the argv (else the record is
        // not what its fact says: its state is asked for), before anything
        // changes.
        let touched = |f: &&Fact| matches!(f.0 & KIND, ADD | DROP);
        if facts
            .iter()
            .filter(touched)
            .any(|f| item(f.0 >> SHIFT).is_none())
        {
            return Err(NotApplied::Gap);
        }
        // A counted field's write resets its counter by what it saw, which
        // a fact does not say: the key's state tells.
        let counted =
            |f: &Fact| item(f.0 >> SHIFT).is_some_and(|(m, _)| self.counters.contains_key(m));
        if facts.iter().filter(touched).any(counted) {
            return Err(NotApplied::Gap);
        }
        // The members named, each once, with its newest dot before.
        let mut named: Vec<(&[u8], Option<StampAndPrint>)> = Vec::new();
        let mut once = hashbrown::HashSet::new();
        for f in facts.iter().filter(touched) {
            let (m, _) = item(f.0 >> SHIFT).ok_or(NotApplied::Gap)?;
            if once.insert(m) {
                let newest = self.newest(m).map(|d| (d.stamp, d.fp));
                named.push((m, newest));
                // Every dot of a member the fact touches carries its value
                // while the fact applies (the newest's is the key's).
                if let Some(ds) = self.dots.get_mut(m) {
                    let v = here(m);
                    for d in ds.iter_mut().filter(|d| d.value.is_none()) {
                        d.value = v.clone().map(Box::new);
                    }
                }
            }
        }
        for f in facts {
            let kind = f.0 & KIND;
            if kind != ADD && kind != DROP {
                continue;
            }
            let (m, it) = item(f.0 >> SHIFT).ok_or(NotApplied::Gap)?;
            let ds = self.dots.entry(m.into()).or_default();
            if kind == DROP {
                ds.retain(|d| d.stamp != f.1);
            } else if let Err(at) = ds.binary_search_by_key(&stamp, |d| d.stamp) {
                let fp = it.fingerprint();
                ds.insert(
                    at,
                    Dot {
                        stamp,
                        fp,
                        value: Some(Box::new(it)),
                    },
                );
            }
        }
        let mut changes = Vec::new();
        for (m, before) in named {
            let ds = self.dots.get_mut(m).expect("named members have an entry");
            let Some(newest) = ds.last_mut() else {
                self.dots.remove(m);
                if before.is_some() {
                    changes.push(Change::Remove(m.to_vec()));
                }
                continue;
            };
            let value = newest.value.take().map_or(Item::Member, |v| *v);
            if before.is_none_or(|(_, fp)| fp != newest.fp) {
                changes.push(Change::Put(m.to_vec(), value));
            }
            for d in ds
                .iter_mut()
                .filter(|d| matches!(d.value.as_deref(), Some(Item::Member)))
            {
                d.value = None; // a set's members carry no value
            }
        }
        self.cc.see(stamp);
        self.version = self.version.max(stamp);
        Ok(changes)
    }
}

/// The value a counted write's command computes from the field's value
/// before (`here`): HINCRBY's integer sum, HINCRBYFLOAT's long double sum
/// printed, ZINCRBY's double sum (`scores`). None where it has none (the
/// origin's command would have failed).
fn written_by(here: Option<&Item>, by: Incr, scores: bool) -> Option<Item> {
    match (here, by, scores) {
        (None | Some(Item::Score(_)), Incr::Float(f), true) => {
            let cur = match here {
                Some(Item::Score(s)) => *s,
                _ => 0.0,
            };
            let s = cur + f.to_f64();
            // -0 is stored as 0 (DECISIONS 66).
            (!s.is_nan()).then_some(Item::Score(if s == 0.0 { 0.0 } else { s }))
        }
        (None | Some(Item::Field(_)), _, false) => {
            let cur = match here {
                Some(Item::Field(v)) => v.as_slice(),
                _ => b"0",
            };
            let int = std::str::from_utf8(cur).ok()?.parse::<i64>().ok();
            let text = match by {
                Incr::Int(n) => int?.checked_add(i64::try_from(n).ok()?)?.to_string(),
                Incr::Float(f) => {
                    let cur = int.map_or_else(|| F80::parse(cur), |n| Some(F80::from_i64(n)))?;
                    let sum = cur.add(&f);
                    sum.is_finite().then(|| sum.format_human())?
                }
            };
            Some(Item::Field(text.into_bytes()))
        }
        _ => None,
    }
}

impl Elements {
    /// A print of field `m`'s merge state, its counter and its dots (what
    /// a `COUNTED` fact compares; see the module comment).
    pub fn field_print(&self, m: &[u8]) -> u64 {
        // Encoded into a buffer of the thread's, reused: no allocation.
        thread_local!(static PRINT: std::cell::RefCell<Vec<u8>> = const {
            std::cell::RefCell::new(Vec::new())
        });
        PRINT.with_borrow_mut(|b| {
            b.clear();
            self.print_into(m, b);
            super::context::fingerprint(b)
        })
    }

    fn print_into(&self, m: &[u8], b: &mut Vec<u8>) {
        match self.counters.get(m) {
            Some(c) => c.encode(b),
            None => b.push(0),
        }
        for d in self.dots.get(m).map_or(&[][..], Dots::as_slice) {
            b.extend_from_slice(&d.stamp.to_le_bytes());
            b.extend_from_slice(&d.fp.to_le_bytes());
            let tag = match d.value.as_deref() {
                None => 0,
                Some(Item::Member) => 1,
                Some(Item::Field(_)) => 2,
                Some(Item::Score(_)) => 3,
            };
            b.push(tag);
            if let Some(v) = &d.value {
                b.extend_from_slice(&v.fingerprint().to_le_bytes());
            }
        }
    }

    /// Both sides, after a counted write stamped `stamp` wrote `written`
    /// to field `m` (whose dot it just replaced): the field's counter
    /// settles on it (a write it does not agree with resets it), and the
    /// field holds the counter's sum where the counter has one (the origin
    /// writes the sum, DECISIONS 79), its dot keeping that value (a
    /// counted field's dots carry what was written). Returns the value.
    pub fn settle_count(&mut self, m: &[u8], stamp: u64, written: Item) -> Item {
        self.settle_counter(m, stamp, Some(&written));
        let sum = (self.counters.get(m))
            .filter(|c| c.version == stamp)
            .map(Counter::value);
        let now = match (sum, &written) {
            (Some(Merged::Float(f)), Item::Score(_)) if f.to_f64().is_finite() => {
                Item::Score(f.to_f64())
            }
            (Some(v), Item::Field(_)) => v.text().map_or(written, |t| Item::Field(t.into_bytes())),
            _ => written,
        };
        if let Some(d) = self.dots.get_mut(m).and_then(|ds| ds.last_mut()) {
            d.fp = now.fingerprint();
            d.value = Some(Box::new(now.clone()));
        }
        now
    }

    /// Peer: a counted write's fact (`COUNTED`): field `m` grows by `by`
    /// as it did at the origin, whose state of the field printed as this
    /// one's does; `here` is the field's value here. Returns the field's
    /// value after it (what to write), the state following.
    pub fn apply_count(
        &mut self,
        stamp: u64,
        facts: &[Fact],
        (m, by, scores): (&[u8], Incr, bool),
        here: Option<Item>,
    ) -> Result<Item, NotApplied> {
        if self.cc.covers(stamp) {
            return Err(NotApplied::Duplicate);
        }
        // The key changed between a hash and a sorted set: the origin
        // dropped counters of the other kind, which a join tells.
        if self.scores != scores && !self.counters.is_empty() {
            return Err(NotApplied::Gap);
        }
        let (prev, _) = bases_of(facts);
        let unseen = |d: u64| d != 0 && d != stamp && !self.cc.covers(d);
        if unseen(prev) || facts.iter().any(|f| f.0 & KIND == DROP && unseen(f.1)) {
            return Err(NotApplied::Gap);
        }
        let print = facts.iter().find(|f| f.0 & KIND == COUNTED).map(|f| f.1);
        if print != Some(self.field_print(m)) {
            return Err(NotApplied::Gap);
        }
        let written = written_by(here.as_ref(), by, scores).ok_or(NotApplied::Gap)?;
        // The origin's steps (`Shard::count_field`, `note_write`), on the
        // same state of the field.
        self.scores = scores;
        self.count_field(m, stamp, by, Item::base(here.as_ref()));
        let dot = Dot {
            stamp,
            fp: written.fingerprint(),
            value: None,
        };
        self.dots.insert(m.into(), Dots::One(dot));
        self.cc.see(stamp);
        self.version = self.version.max(stamp);
        Ok(self.settle_count(m, stamp, written))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::merge::Base;

    fn st(ms: u64, node: u64) -> u64 {
        make_stamp(ms, 0, node)
    }

    fn members(e: &Elements) -> Vec<String> {
        let mut m: Vec<String> = (e.dots.keys())
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        m.sort();
        m
    }

    /// An argv of set members: index i names `argv[i]`.
    fn set_item(argv: &'static [&'static str]) -> impl Fn(u32) -> Option<(&'static [u8], Item)> {
        move |i| argv.get(i as usize).map(|m| (m.as_bytes(), Item::Member))
    }

    /// The origin's facts, applied at a peer that holds what the origin
    /// held, give the origin's state; applied again, nothing.
    #[test]
    fn a_fact_reproduces_its_write_once() {
        let argv: &[&str] = &["SADD", "s", "a", "b"];
        let mut origin = Elements::default();
        let mut peer = Elements::default();
        let mut facts = Vec::new();
        let s1 = st(10, 1);
        let named = [(2, &b"a"[..], Some(0)), (3, &b"b"[..], Some(0))];
        assert!(origin.note_write(1, s1, &named, &mut facts));
        let ch = peer
            .apply_fact(s1, &facts, set_item(argv), |_| None)
            .unwrap();
        assert_eq!(ch.len(), 2);
        assert!(origin.same_content(&peer));
        let again = peer.apply_fact(s1, &facts, set_item(argv), |_| None);
        assert_eq!(again, Err(NotApplied::Duplicate));
        // SREM s a: drops a's dot, the peer removes it.
        let argv: &[&str] = &["SREM", "s", "a"];
        facts.clear();
        let s2 = st(20, 1);
        assert!(origin.note_write(1, s2, &[(2, b"a", None)], &mut facts));
        let ch = peer
            .apply_fact(s2, &facts, set_item(argv), |_| Some(Item::Member))
            .unwrap();
        assert_eq!(ch, vec![Change::Remove(b"a".to_vec())]);
        assert!(origin.same_content(&peer));
    }

    /// A remove concurrent with a re-add elsewhere: the add survives on
    /// both nodes, whichever fact arrives first (add-wins).
    #[test]
    fn an_add_survives_a_concurrent_remove_in_either_order() {
        let s0 = st(10, 1);
        let mut common = Elements::default();
        let mut f0 = Vec::new();
        common.note_write(1, s0, &[(2, b"m", Some(0))], &mut f0);
        let (mut a, mut b) = (common.clone(), common.clone());
        let (mut fa, mut fb) = (Vec::new(), Vec::new());
        let (sa, sb) = (st(20, 1), st(21, 2));
        a.note_write(1, sa, &[(2, b"m", None)], &mut fa); // SREM s m
        b.note_write(1, sb, &[(2, b"m", Some(0))], &mut fb); // SADD s m
        let argv: &[&str] = &["X", "s", "m"];
        let ch = a.apply_fact(sb, &fb, set_item(argv), |_| None).unwrap();
        assert_eq!(ch, vec![Change::Put(b"m".to_vec(), Item::Member)]);
        let ch = b
            .apply_fact(sa, &fa, set_item(argv), |_| Some(Item::Member))
            .unwrap();
        assert_eq!(ch, vec![]);
        assert!(a.same_content(&b));
        assert_eq!(members(&a), vec!["m"]);
    }

    /// A fact whose origin wrote the key before, unseen here, is a gap.
    #[test]
    fn a_missed_write_of_the_origin_is_a_gap() {
        let mut origin = Elements::default();
        let mut f1 = Vec::new();
        let mut f2 = Vec::new();
        origin.note_write(1, st(10, 1), &[(2, b"a", Some(0))], &mut f1);
        origin.note_write(1, st(20, 1), &[(2, b"b", Some(0))], &mut f2);
        let argv: &[&str] = &["SADD", "s", "b"];
        let mut peer = Elements::default();
        let r = peer.apply_fact(st(20, 1), &f2, set_item(argv), |_| None);
        assert_eq!(r, Err(NotApplied::Gap));
        assert!(peer.dots.is_empty(), "a gap changes nothing");
    }

    /// Hash fields: an older concurrent write of a field keeps its value
    /// in the dot, the newer one stays in the key.
    #[test]
    fn an_older_concurrent_field_write_stays_behind_the_newer() {
        let mut a = Elements::default();
        let mut b = Elements::default();
        let (mut fa, mut fb) = (Vec::new(), Vec::new());
        let (sa, sb) = (st(20, 1), st(21, 2));
        a.note_write(1, sa, &[(2, b"f", Some(fingerprint(b"1")))], &mut fa);
        b.note_write(1, sb, &[(2, b"f", Some(fingerprint(b"2")))], &mut fb);
        let va = |_: u32| Some((&b"f"[..], Item::Field(b"1".to_vec())));
        let vb = |_: u32| Some((&b"f"[..], Item::Field(b"2".to_vec())));
        let ch = a
            .apply_fact(sb, &fb, vb, |_| Some(Item::Field(b"1".to_vec())))
            .unwrap();
        assert_eq!(
            ch,
            vec![Change::Put(b"f".to_vec(), Item::Field(b"2".to_vec()))]
        );
        let ch = b
            .apply_fact(sa, &fa, va, |_| Some(Item::Field(b"2".to_vec())))
            .unwrap();
        assert_eq!(ch, vec![]);
        assert!(a.same_content(&b));
        assert_eq!(
            a.dots[&b"f"[..]][0].value.as_deref(),
            Some(&Item::Field(b"1".to_vec()))
        );
    }

    /// A field named twice in one write (HSET h f x f y): the first add's
    /// dot is dropped by the second, and the peer ends with the last value.
    #[test]
    fn a_member_named_twice_takes_its_last_value() {
        let argv: &[&str] = &["HSET", "h", "f", "x", "f", "y"];
        let item = |i: u32| {
            let i = i as usize;
            Some((
                argv[i].as_bytes(),
                Item::Field(argv[i + 1].as_bytes().to_vec()),
            ))
        };
        let mut origin = Elements::default();
        let mut facts = Vec::new();
        let s = st(10, 1);
        let fy = fingerprint(b"y");
        origin.note_write(
            1,
            s,
            &[(2, b"f", Some(fy)), (4, b"f", Some(fy))],
            &mut facts,
        );
        let mut peer = Elements::default();
        let ch = peer.apply_fact(s, &facts, item, |_| None).unwrap();
        assert_eq!(
            ch,
            vec![Change::Put(b"f".to_vec(), Item::Field(b"y".to_vec()))]
        );
        assert!(origin.same_content(&peer));
    }

    use super::super::context::fingerprint;

    /// The origin's steps for HINCRBY h f `by` stamped `s` on `e`, whose
    /// field f reads `here` (what `Shard::count_field` and `note_write` do):
    /// its fact, and the value written.
    fn origin_hincrby(e: &mut Elements, s: u64, by: i128, here: Option<Item>) -> (Vec<Fact>, Item) {
        let print = e.field_print(b"f");
        let written = written_by(here.as_ref(), Incr::Int(by), false).unwrap();
        e.count_field(b"f", s, Incr::Int(by), Item::base(here.as_ref()));
        let mut facts = Vec::new();
        e.note_write(1, s, &[(2, b"f", Some(written.fingerprint()))], &mut facts);
        facts.push((COUNTED | (2 << SHIFT), print));
        let now = e.settle_count(b"f", s, written);
        (facts, now)
    }

    /// A counted field's fact, applied where the field's state is the
    /// origin's before, leaves the origin's state; once only; and a peer
    /// whose field differs (a concurrent write there) asks for the state,
    /// changing nothing.
    #[test]
    fn a_counted_write_applies_where_the_field_printed_the_same() {
        let mut origin = Elements::default();
        let (f1, v1) = origin_hincrby(&mut origin, st(10, 1), 5, None);
        assert_eq!(v1, Item::Field(b"5".to_vec()));
        let mut peer = Elements::default();
        let got = peer.apply_count(st(10, 1), &f1, (b"f", Incr::Int(5), false), None);
        assert_eq!(got, Ok(v1.clone()));
        assert!(origin.same_content(&peer));
        let again = peer.apply_count(
            st(10, 1),
            &f1,
            (b"f", Incr::Int(5), false),
            Some(v1.clone()),
        );
        assert_eq!(again, Err(NotApplied::Duplicate));
        // The peer counts too (its own part), unseen by the origin: the
        // origin's next increment no longer finds its state there.
        let mut other = peer.clone();
        let _ = origin_hincrby(&mut other, st(20, 2), 1, Some(v1.clone()));
        let (f2, v2) = origin_hincrby(&mut origin, st(30, 1), 2, Some(v1.clone()));
        assert_eq!(v2, Item::Field(b"7".to_vec()));
        let before = other.clone();
        let got = other.apply_count(st(30, 1), &f2, (b"f", Incr::Int(2), false), None);
        assert_eq!(got, Err(NotApplied::Gap));
        assert_eq!(other, before, "a gap changes nothing");
    }

    /// `note_counted`'s reference: the steps `Shard::count_field` took one
    /// by one before it (count, note the write, settle the counter, keep
    /// the value written in the new dot, the fact kept or dropped).
    fn counted_by_steps(
        e: &mut Elements,
        w: &super::super::elements::CountedWrite<'_>,
        counting: Option<(u32, u64)>,
        value: bool,
    ) -> (Vec<Fact>, Option<Merged>) {
        let (s, (i, m)) = (w.stamp, w.field);
        e.count_field(m, s, w.by.0, w.by.1);
        let mut facts = Vec::new();
        let fp = w.now.as_ref().map(Item::fingerprint);
        let emitted = e.note_write(1, s, &[(i, m, fp)], &mut facts);
        let settled = e.settle_counter(m, s, w.now.as_ref());
        e.keep_written(m, w.now.clone());
        match counting {
            Some((at, p)) if emitted && ELEMENT_FACTS => facts.push((COUNTED | (at << SHIFT), p)),
            _ => facts.clear(),
        }
        let at = e.counters.get(m).filter(|c| value && c.version == s);
        (facts, at.map(|c| settled.unwrap_or_else(|| c.value())))
    }

    /// The fused origin step leaves the state, the fact and the value the
    /// step-by-step path did: a new field, one with a plain write's dot,
    /// one with a counter, a concurrent dot joined from another node, the
    /// same stamp twice (no fact), a field absent after, and a float
    /// score, with and without a fact wanted.
    #[test]
    fn a_fused_count_matches_the_steps() {
        use super::super::elements::CountedWrite;
        fn int(by: i128, before: Base, now: &str) -> (Incr, Base, &str) {
            (Incr::Int(by), before, now)
        }
        let mut other = Elements::default();
        other.note_write(
            1,
            st(15, 2),
            &[(2, b"f", Some(fingerprint(b"x")))],
            &mut Vec::new(),
        );
        let (mut a, mut b) = (Elements::default(), Elements::default());
        let steps = [
            (st(10, 1), int(5, Base::Absent, "5")),
            (st(20, 1), int(2, Base::Int(9), "11")),
            (st(20, 1), int(1, Base::Int(11), "12")),
            (st(30, 1), int(-4, Base::Int(12), "8")),
            (st(40, 1), int(3, Base::Int(8), "")),
            (st(50, 1), int(7, Base::Absent, "7")),
        ];
        for (n, (s, (by, before, now))) in steps.into_iter().enumerate() {
            if n == 1 {
                // A plain write of the field between (HSET f 9).
                for e in [&mut a, &mut b] {
                    let nine = Item::Field(b"9".to_vec());
                    e.note_write(
                        1,
                        st(12, 1),
                        &[(2, b"f", Some(nine.fingerprint()))],
                        &mut Vec::new(),
                    );
                    e.settle_counter(b"f", st(12, 1), Some(&nine));
                    e.keep_written(b"f", Some(nine));
                }
            }
            if n == 3 {
                a = a.join(None, &other, None).0;
                b = b.join(None, &other, None).0;
            }
            let now = (!now.is_empty()).then(|| Item::Field(now.as_bytes().to_vec()));
            let w = CountedWrite {
                stamp: s,
                field: (2, b"f"),
                by: (by, before),
                now,
            };
            let counting = (n % 2 == 0).then(|| (2, a.field_print(b"f")));
            let want = counted_by_steps(&mut a, &w, counting, n % 3 == 0);
            let mut facts = Vec::new();
            let got = b.note_counted(w, counting, n % 3 == 0, &mut facts);
            assert_eq!((facts, got), want, "step {n}");
            assert_eq!(a, b, "step {n}");
        }
        // A sorted set's float score.
        let (mut a, mut b) = (Elements::default(), Elements::default());
        for (n, (s, by, before)) in [(st(10, 1), "1.5", 0.0), (st(20, 1), "0.1", 1.5)]
            .into_iter()
            .enumerate()
        {
            let by = Incr::Float(F80::parse(by.as_bytes()).unwrap());
            let base = if n == 0 {
                Base::Absent
            } else {
                Base::Score(F80::from_f64(before))
            };
            let now = Some(Item::Score(before + if n == 0 { 1.5 } else { 0.1 }));
            let w = CountedWrite {
                stamp: s,
                field: (3, b"m"),
                by: (by, base),
                now,
            };
            let want = counted_by_steps(&mut a, &w, Some((3, 7)), true);
            let mut facts = Vec::new();
            let got = b.note_counted(w, Some((3, 7)), true, &mut facts);
            assert!(got.is_some(), "the counter is at the write");
            assert_eq!((facts, got), want, "score step {n}");
            assert_eq!(a, b, "score step {n}");
        }
    }

    #[test]
    fn a_float_increment_round_trips_through_its_words() {
        for text in ["0.1", "-3.75", "1e300", "0"] {
            let f = F80::parse(text.as_bytes()).unwrap();
            let mut facts = Vec::new();
            float_words(f, &mut facts);
            assert!(facts.iter().all(|e| is_raw(e.0)));
            assert_eq!(words_float(&facts), Some(f), "{text}");
        }
    }

    /// Counter: increments on two nodes add up from either order, and a
    /// duplicate changes nothing.
    #[test]
    fn increments_apply_once_in_any_order() {
        let c0 = Counter::current(None, 0, Base::Absent);
        let (mut a, mut b) = (c0.clone(), c0.clone());
        let (sa, sb) = (st(20, 1), st(21, 2));
        let (pa, ra) = a.fact_base(sa).unwrap();
        a.add(1, crate::keyspace::merge::Incr::Int(1), sa);
        let (pb, rb) = b.fact_base(sb).unwrap();
        b.add(2, crate::keyspace::merge::Incr::Int(3), sb);
        let fa = [(PREV | (1 << SHIFT), pa), (RESET | (1 << SHIFT), ra)];
        let fb = [(PREV | (1 << SHIFT), pb), (RESET | (1 << SHIFT), rb)];
        b.apply_increment(sa, Incr::Int(1), &fa).unwrap();
        a.apply_increment(sb, Incr::Int(3), &fb).unwrap();
        assert_eq!(a.int_value(), Some(4));
        assert!(a.same_content(&b));
        assert_eq!(
            a.apply_increment(sb, Incr::Int(3), &fb),
            Err(NotApplied::Duplicate)
        );
        // A later increment of B's whose predecessor A missed: a gap.
        let sb2 = st(30, 2);
        let (pb2, rb2) = b.fact_base(st(40, 2)).unwrap();
        let _ = sb2;
        let mut fresh = c0.clone();
        let f = [(PREV | (1 << SHIFT), pb2), (RESET | (1 << SHIFT), rb2)];
        assert_eq!(
            fresh.apply_increment(st(40, 2), Incr::Int(1), &f),
            Err(NotApplied::Gap)
        );
    }
}
