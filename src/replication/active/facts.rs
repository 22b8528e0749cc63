//! How a link applies a merging write's fact (keyspace/merge/fact.rs): an
//! increment of a counter, members added, set or removed in a set, hash or
//! sorted set. The fact applies here in O(what the write named), with no
//! round trip to the origin for the key's state; where it cannot (a gap:
//! something it builds on has not arrived; the key here is of another
//! type), the caller asks for the key's state as it did before facts.
//!
//! What the fact changes in the value is written through ordinary commands
//! replayed with the resulting version (SET, SADD, SREM, HSET, HDEL, ZADD,
//! ZREM), so the AOF and plain replicas see ordinary writes, as after a
//! join (merging.rs). The resulting version is the newer of the key's here
//! and the write's stamp: every node that applied the same facts ends at
//! the same version.

use crate::effects::Fact;
use crate::keyspace::list::ListValue;
use crate::keyspace::merge::context::fingerprint;
use crate::keyspace::merge::elements::{item_of, Change, Item};
use crate::keyspace::merge::fact::{self, NotApplied, ADD, COUNTED, KIND, SHIFT};
use crate::keyspace::merge::lists::{Change as ListChange, EditFact, Lists, Place};
use crate::keyspace::merge::reset::{is_reset, ResetFact};
use crate::keyspace::merge::state::typed;
use crate::keyspace::merge::stream::STREAM_TTL_FACTS;
use crate::keyspace::merge::{Base, Counter, Elements, Incr, MergeType, Merged, Meta};
use crate::keyspace::{Entry, Value};
use crate::protocol::Args;

use super::link::Link;
use super::merging::put_words;

/// What a fact-carrying write is, by its command.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Write {
    /// INCR, INCRBY, DECR, DECRBY: the increment; INCRBYFLOAT (its
    /// record is a SET) its float, from the fact's words.
    Increment(Incr),
    Set,
    Hash,
    ZSet,
    /// SREM, HDEL, ZREM: the arguments are members only.
    Remove(Collection),
    /// LPUSH, RPUSH, LPUSHX, RPUSHX (`push`), LPOP, RPOP: at the head
    /// (`left`) or the tail of a list.
    List {
        left: bool,
        push: bool,
    },
    /// LSET, LINSERT, LREM: an edit of a list by element ids.
    ListEdit,
    /// PEXPIREAT (every EXPIRE's record; the expiry) and PERSIST (0): a
    /// write of a collection's TTL register (keyspace/merge/ttl.rs).
    Ttl(u64),
    /// LTRIM: pops at both ends of a list.
    Trim,
    /// LMOVE, RPOPLPUSH of a list onto itself: a pop at one end (`from`:
    /// the head) and a push of its value at the other (`to`).
    Rotate {
        from: bool,
        to: bool,
    },
}

/// The kind of collection a write is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Collection {
    Set,
    Hash,
    ZSet,
}

fn write_of(argv: &Args, facts: &[Fact]) -> Option<Write> {
    let name = argv.get(0).to_ascii_lowercase();
    let by = |sign: i128| -> Option<Write> {
        let n: i64 = std::str::from_utf8(argv.get(2)).ok()?.parse().ok()?;
        Some(Write::Increment(Incr::Int(sign * i128::from(n))))
    };
    match &name[..] {
        b"incr" => Some(Write::Increment(Incr::Int(1))),
        b"decr" => Some(Write::Increment(Incr::Int(-1))),
        b"incrby" if argv.len() == 3 => by(1),
        b"decrby" if argv.len() == 3 => by(-1),
        b"set" => fact::words_float(facts).map(|f| Write::Increment(Incr::Float(f))),
        b"sadd" => Some(Write::Set),
        b"hset" | b"hmset" | b"hsetnx" | b"hincrby" => Some(Write::Hash),
        b"zadd" | b"zincrby" => Some(Write::ZSet),
        b"srem" => Some(Write::Remove(Collection::Set)),
        b"hdel" => Some(Write::Remove(Collection::Hash)),
        b"zrem" => Some(Write::Remove(Collection::ZSet)),
        b"lpush" | b"lpushx" => Some(Write::List {
            left: true,
            push: true,
        }),
        b"rpush" | b"rpushx" => Some(Write::List {
            left: false,
            push: true,
        }),
        b"lset" | b"linsert" | b"lrem" => Some(Write::ListEdit),
        b"pexpireat" if argv.len() == 3 => {
            let at = std::str::from_utf8(argv.get(2)).ok()?.parse().ok()?;
            Some(Write::Ttl(at))
        }
        b"persist" if argv.len() == 2 => Some(Write::Ttl(0)),
        b"ltrim" if argv.len() == 4 => Some(Write::Trim),
        b"lmove" if argv.len() == 5 && argv.get(1) == argv.get(2) => {
            let side = |i: usize| argv.get(i).eq_ignore_ascii_case(b"left");
            Some(Write::Rotate {
                from: side(3),
                to: side(4),
            })
        }
        b"rpoplpush" if argv.len() == 3 && argv.get(1) == argv.get(2) => Some(Write::Rotate {
            from: false,
            to: true,
        }),
        b"lpop" | b"rpop" if argv.len() <= 3 => Some(Write::List {
            left: name[0] == b'l',
            push: false,
        }),
        _ => None,
    }
}

/// The collection a write changes.
fn collection(write: Write) -> Option<Collection> {
    match write {
        Write::Set => Some(Collection::Set),
        Write::Hash => Some(Collection::Hash),
        Write::ZSet => Some(Collection::ZSet),
        Write::Remove(c) => Some(c),
        Write::Increment(_)
        | Write::List { .. }
        | Write::ListEdit
        | Write::Trim
        | Write::Rotate { .. }
        | Write::Ttl(_) => None,
    }
}

/// The member at argument `i` of a write and the value it gave it (a
/// remove names members only: their value is never read).
fn item_at<'a>(write: Write, argv: &Args<'a>, i: u32) -> Option<(&'a [u8], Item)> {
    let i = i as usize;
    if i < 2 || i >= argv.len() {
        return None;
    }
    let m = argv.get(i);
    let item = match write {
        Write::Set | Write::Remove(_) => Item::Member,
        Write::Hash if i + 1 < argv.len() => Item::Field(argv.get(i + 1).to_vec()),
        Write::Hash => return None,
        Write::ZSet => {
            let s = crate::commands::zsets::parse_score(argv.get(i - 1))?;
            // -0 is stored as 0 (DECISIONS 66).
            Item::Score(if s == 0.0 { 0.0 } else { s })
        }
        Write::Increment(_)
        | Write::List { .. }
        | Write::ListEdit
        | Write::Trim
        | Write::Rotate { .. }
        | Write::Ttl(_) => return None,
    };
    Some((m, item))
}

impl Link {
    /// Applies a write's fact to `key` (its only key); false where it does
    /// not apply here: the caller asks for the key's state.
    pub(super) fn apply_fact(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        argv: &Args,
    ) -> bool {
        // Older than a flush here: gone, as the flush removed such a
        // write's key on every node that held it (as for states, merging.rs).
        let ks = &self.node.core().keyspace;
        if stamp < ks.db(db).lock(ks.slot(key).shard).flushed_at() {
            return true;
        }
        if is_reset(stamp, facts) {
            return self.apply_reset((db, key), (stamp, facts, argv));
        }
        if super::stream_facts::is_stream_write(argv) {
            return self.apply_stream_fact(db, key, stamp, facts, argv);
        }
        if let Some(writes) = super::member_ttl_facts::member_ttl_writes(argv) {
            return self.apply_member_ttl((db, key), stamp, facts, &writes);
        }
        match write_of(argv, facts) {
            Some(Write::Increment(by)) => self.apply_increment(db, key, stamp, by, facts),
            Some(Write::List { left, push }) => {
                self.apply_list(db, key, stamp, facts, (left, push, argv))
            }
            Some(Write::ListEdit) => self.apply_list_edit(db, key, stamp, facts, argv),
            Some(Write::Ttl(at)) => self.apply_ttl(db, key, (stamp, at), facts),
            Some(Write::Trim) => self.apply_trim(db, key, stamp, facts),
            Some(Write::Rotate { from, to }) => {
                self.apply_rotate(db, key, stamp, facts, (from, to, argv))
            }
            Some(w) if facts.iter().any(|f| f.0 & KIND == COUNTED) => {
                self.apply_count(db, key, stamp, facts, (w, argv))
            }
            Some(w) => self.apply_elements(db, key, stamp, facts, (w, argv)),
            None => false,
        }
    }

    /// A record that carries the states of the keys its write deleted or
    /// overwrote (keyspace/merge/deletes.rs): each joins with ours, as the
    /// state a peer asked for before did (merging.rs), with no round trip;
    /// the record's other keys were only read. Returns the keys whose
    /// state is asked for: those that do not merge so here (another type:
    /// whole-key last-writer-wins).
    pub(super) fn apply_states(
        &mut self,
        db: usize,
        stamp: u64,
        (bases, facts): (&[crate::effects::Base], &[Fact]),
        argv: &Args,
    ) -> Vec<Vec<u8>> {
        let mut ask = Vec::new();
        for &(i, _) in bases {
            let arg = i & !crate::effects::MERGED_BASE;
            let Some(state) = crate::keyspace::merge::deletes::state_of(facts, arg) else {
                continue;
            };
            let key = argv.get(arg as usize);
            let merges = {
                let ks = &self.node.core().keyspace;
                ks.db(db).lock(ks.slot(key).shard).merges(key)
            };
            let both = (&state.payload[..], &state.merge[..]);
            if (self.merge_state(db, key, (stamp, state.at), both, merges)).is_none() {
                ask.push(key.to_vec());
            }
        }
        ask
    }

    fn apply_increment(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        by: Incr,
        facts: &[Fact],
    ) -> bool {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let e = g.get_raw(slot.hash, key);
        // Another type, or a TTL here while TTL facts are off (a key with
        // one merges by its state then). With them on, the TTL is the
        // reset's: ours, the fact's (`RESET`) or a newer one, which the
        // increment keeps (`SET ... KEEPTTL`; DECISIONS 230).
        let ttl_here = |e: &Entry| e.expire_at() != 0 && !fact::TTL_FACTS;
        if e.is_some_and(|e| !matches!(e.value, Value::Str(_)) || ttl_here(e)) {
            return false;
        }
        let base = Base::of(e.map(|e| &e.value));
        let version = g.version_of(slot.hash, key);
        let Ok(counter) = typed::<Counter>(g.merge_meta(key)) else {
            return false;
        };
        let mut c = Counter::current(counter, version, base);
        let before = c.value();
        // A late fact (older than the key here) from a node this counter
        // holds no part of, or older than its reset: the nodes that applied
        // it hold more than those that took a state without it, at one
        // version (see below). Older than the reset, its origin may have
        // lost its own part since, to a write of another type that a newer
        // reset elsewhere then replaced: that node takes the reset's state
        // whole and never sees its increment again (full seed 95169).
        let slot_of = crate::keyspace::hlc::stamp_node(stamp);
        let unknown_node = !c.parts.iter().any(|p| p.slot == slot_of);
        let late_part = stamp < version && (unknown_node || stamp < c.reset);
        match c.apply_increment(stamp, by, facts) {
            Ok(()) => {}
            Err(NotApplied::Duplicate) => return true,
            Err(NotApplied::Gap) => return false,
        }
        let version = version.max(stamp);
        c.version = version;
        let after = c.value();
        g.set_merge_meta(key, c.wrap());
        drop(g);
        match after {
            Merged::Int(_) | Merged::Float(_) if after != before => {
                let n = after.text().unwrap_or_default();
                let argv: [&[u8]; 4] = [b"SET", key, n.as_bytes(), b"KEEPTTL"];
                self.replay(db, version, &argv);
            }
            _ => self.raise_version(db, key, version),
        }
        self.note_merge_state(db, key);
        // Its version did not move, so no peer learns the new part from
        // a state: ours goes to every peer, whose join at one version takes
        // it (simulator seed 7573: a late copy of an INCRBY, stamped before
        // another type replaced the counter and a counter made elsewhere
        // replaced that, added its part on two nodes of three).
        if late_part {
            super::serve::answer_state(&*self.node, db, key);
        }
        true
    }

    fn apply_elements(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        (write, argv): (Write, &Args),
    ) -> bool {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let c = collection(write);
        if ttl_unfit(g.get_raw(slot.hash, key), g.merge_meta(key))
            || super::member_ttl_facts::member_ttls_unfit(&g, (slot.hash, key), facts, argv)
        {
            return false; // its TTLs merge by its state
        }
        let fits = match g.get_raw(slot.hash, key).map(|e| &e.value) {
            None => true,
            Some(Value::Set(_)) => c == Some(Collection::Set),
            Some(Value::Hash(_)) => c == Some(Collection::Hash),
            Some(Value::ZSet(_)) => c == Some(Collection::ZSet),
            Some(_) => false,
        };
        let adds = facts.iter().any(|f| f.0 & KIND == ADD);
        if !fits || (adds && matches!(write, Write::Remove(_))) {
            return false;
        }
        let version = g.version_of(slot.hash, key);
        // A fact applies onto elements that describe the key as it is (a
        // collection, or one deleted by a write that noted what it saw),
        // or onto nothing older than it. Anything else (elements older
        // than the key: another type came and went, a write here that
        // noted no dots) is for the key's state to decide, as before facts.
        let clean = match typed::<Elements>(g.merge_meta(key)) {
            Ok(Some(e)) => e.version == version,
            Err(()) => false,
            Ok(None) => version <= stamp,
        };
        if !clean {
            return false;
        }
        // A fact older than the key here (a concurrent write, or one late)
        // is a duplicate where its stamp is seen already; else the key's
        // state decides, as before facts: whole-key last-writer-wins
        // between types makes the elements' own context too little to tell
        // an add that another type's write since removed (simulator seed
        // 576). The common case, a write newer than the key, applies here.
        if version > stamp {
            return covered::<Elements>(g.merge_meta(key), stamp);
        }
        let applied = g.with_elements(slot.hash, key, |e, value| {
            let item = |i| item_at(write, argv, i);
            e.apply_fact(stamp, facts, item, |m| item_of(value, m))
        });
        drop(g);
        let changes = match applied {
            Some(Ok(changes)) => changes,
            Some(Err(NotApplied::Duplicate)) => return true,
            Some(Err(NotApplied::Gap)) | None => return false,
        };
        self.settle_elements(db, key, write, &changes, version.max(stamp));
        true
    }

    /// A counted write's fact (HINCRBY, HINCRBYFLOAT, ZINCRBY, ZADD INCR:
    /// `fact::COUNTED`): the field grows as it did at the origin, where
    /// this node's state of the field is the origin's before the write
    /// (keyspace/merge/fact.rs, `Elements::apply_count`); false, the key's
    /// state asked for, where it is not.
    fn apply_count(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        (write, argv): (Write, &Args),
    ) -> bool {
        let Some((field, by)) = counted_in(write, argv, facts) else {
            return false;
        };
        let scores = collection(write) == Some(Collection::ZSet);
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        if ttl_unfit(g.get_raw(slot.hash, key), g.merge_meta(key))
            || super::member_ttl_facts::member_ttls_unfit(&g, (slot.hash, key), facts, argv)
        {
            return false; // its TTLs merge by its state
        }
        let fits = match g.get_raw(slot.hash, key) {
            None => true,
            Some(e) => match &e.value {
                Value::Hash(_) => !scores,
                Value::ZSet(_) => scores,
                _ => false,
            },
        };
        if !fits {
            return false;
        }
        // As for other collection facts (`apply_elements`): onto a state
        // that describes the key, and newer than it.
        let version = g.version_of(slot.hash, key);
        let clean = match typed::<Elements>(g.merge_meta(key)) {
            Ok(Some(e)) => e.version == version,
            Err(()) => false,
            Ok(None) => version <= stamp,
        };
        if !clean {
            return false;
        }
        if version > stamp {
            return covered::<Elements>(g.merge_meta(key), stamp);
        }
        let applied = g.with_elements(slot.hash, key, |e, value| {
            let here = item_of(value, field);
            e.apply_count(stamp, facts, (field, by, scores), here)
        });
        drop(g);
        let now = match applied {
            Some(Ok(now)) => now,
            Some(Err(NotApplied::Duplicate)) => return true,
            Some(Err(NotApplied::Gap)) | None => return false,
        };
        let put = [Change::Put(field.to_vec(), now)];
        self.settle_elements(db, key, write, &put, version.max(stamp));
        true
    }

    /// A TTL write's fact (EXPIRE's PEXPIREAT record, PERSIST; keyspace/
    /// merge/ttl.rs, `Ttl::apply_write`) on a set, hash, sorted set or list
    /// here whose state describes it, TTL included: its TTL register takes
    /// the write's dot in place of those it replaced, and the key the
    /// expiry the register resolves to (PERSIST wins, else the latest),
    /// replayed as PEXPIREAT or PERSIST where it changes. False, the key's
    /// state asked for, where the fact does not apply (a dot it replaced is
    /// not here: a concurrent TTL write here, or a gap).
    fn apply_ttl(
        &mut self,
        db: usize,
        key: &[u8],
        (stamp, at): (u64, u64),
        facts: &[Fact],
    ) -> bool {
        if !fact::TTL_FACTS {
            return false;
        }
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let Some(entry) = g.get_raw(slot.hash, key) else {
            return false;
        };
        let list = matches!(entry.value, Value::List(_));
        let stream = matches!(entry.value, Value::Stream(_));
        if !list && !stream && !crate::keyspace::merge::elements::is_collection(&entry.value) {
            return false;
        }
        if crate::keyspace::merge::ttl::other_type(facts, &entry.value) {
            return false; // a type conflict: the key's state decides
        }
        if g.member_ttls_stale_but((slot.hash, key), g.merge_meta(key), &[]) {
            return false; // member TTLs not in the state: by the key's state
        }
        let before = entry.expire_at();
        let version = g.version_of(slot.hash, key);
        // The state's TTL register and context, where it describes the key.
        let (ttl, cc) = match g.merge_meta_mut(key) {
            Some(Meta::Elements(e)) if !list && e.version == version => (&mut e.ttl, &mut e.cc),
            Some(Meta::List(l)) if list && fact::LIST_TTL_FACTS && l.describes(version) => {
                (&mut l.ttl, &mut l.cc)
            }
            Some(Meta::Stream(s)) if stream && STREAM_TTL_FACTS && s.version == version => {
                (&mut s.ttl, &mut s.cc)
            }
            _ => return false,
        };
        if ttl.at() != before {
            return false;
        }
        if version > stamp {
            return cc.covers(stamp);
        }
        let now = match ttl.apply_write(cc, (stamp, at), facts) {
            Ok(now) => now,
            Err(NotApplied::Duplicate) => return true,
            Err(NotApplied::Gap) => return false,
        };
        drop(g);
        let moved = (version, version.max(stamp));
        let now_text = now.to_string();
        if now != before {
            let argv: Vec<&[u8]> = match now {
                0 => vec![b"PERSIST", key],
                _ => vec![b"PEXPIREAT", key, now_text.as_bytes()],
            };
            self.replay(db, moved.1, &argv);
        }
        self.raise_version(db, key, moved.1);
        let ks = &self.node.core().keyspace;
        let mut g = ks.db(db).lock(slot.shard);
        match g.merge_meta_mut(key) {
            Some(Meta::Elements(e)) => e.version = moved.1,
            Some(Meta::List(l)) => {
                l.note_ttl_move(moved.0, moved.1);
            }
            Some(Meta::Stream(s)) => s.version = moved.1,
            _ => {}
        }
        drop(g); // before the AOF note, which locks the shard again
        self.note_merge_state(db, key);
        true
    }

    /// A counter's reset (keyspace/merge/reset.rs: SET and the other string
    /// writes, and the TTL writes, on a counter): its register joins ours
    /// (a join of states: nothing else need have arrived), and the key
    /// takes the joined value and, as the fact's reset wins, its expiry,
    /// replayed as `SET key value [PXAT at]`. False, the key's state asked
    /// for, where the key here is no counter (another type, no counter
    /// state), is newer than the write and lacks it, or its value is no
    /// number that the record does not say (APPEND, SETRANGE, a TTL write).
    fn apply_reset(&mut self, (db, key): (usize, &[u8]), write: (u64, &[Fact], &Args)) -> bool {
        let (stamp, facts, argv) = write;
        let Some(fact) = ResetFact::of(stamp, facts).filter(|_| fact::RESET_FACTS) else {
            return false;
        };
        let name = argv.get(0).to_ascii_lowercase();
        let said = matches!(&name[..], b"set" | b"mset") && argv.len() >= 3;
        if fact.base.is_none() && !said {
            return false;
        }
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let e = g.get_raw(slot.hash, key);
        let sketch = |e: &Entry| crate::keyspace::merge::hll::is_sketch(&e.value);
        if e.is_some_and(|e| !matches!(e.value, Value::Str(_)) || sketch(e)) {
            return false;
        }
        let (at_here, base_here) = (e.map_or(0, Entry::expire_at), Base::of(e.map(|e| &e.value)));
        let version = g.version_of(slot.hash, key);
        let Ok(Some(counter)) = typed::<Counter>(g.merge_meta(key)) else {
            return false;
        };
        let mine = Counter::current(Some(counter), version, base_here);
        let mut joined = mine.apply_reset(stamp, &fact, Base::Other);
        joined.forget_before(g.flushed_at());
        if joined.same_content(&mine) {
            return true; // in the counter here already
        }
        // The key's value and expiry: the winning reset's, increments it had
        // not seen on top. A reset older than the key here (a write here
        // came after it) joins all the same, at our version (DECISIONS 252).
        let won = joined.reset == stamp;
        let at = if won { fact.at } else { at_here };
        let text = match joined.value() {
            v @ (Merged::Int(_) | Merged::Float(_)) => v.text().map(String::into_bytes),
            Merged::Other if !won => None, // our reset's value stays
            Merged::Other if said => Some(argv.get(2).to_vec()),
            _ => return false,
        };
        let changed = joined.value() != mine.value() || at != at_here || won && fact.base.is_none();
        let (late, version) = (version >= stamp, version.max(stamp));
        g.set_merge_meta(key, joined.wrap());
        drop(g);
        if let (true, Some(text)) = (changed, &text) {
            let at = at.to_string();
            let mut argv: Vec<&[u8]> = vec![b"SET", key, text];
            if at != "0" {
                argv.extend([&b"PXAT"[..], at.as_bytes()]);
            }
            self.replay(db, version, &argv);
        }
        self.raise_version(db, key, version);
        self.note_merge_state(db, key);
        // Its version did not move, so no peer learns the joined reset from
        // a state at it: ours goes to every peer, as an increment's late
        // part does (`apply_increment`; simulator seed 7573).
        if late {
            super::serve::answer_state(&*self.node, db, key);
        }
        true
    }

    /// A list write's fact (keyspace/merge/lists.rs, `apply_end_fact`):
    /// what it pushed or popped at one end lands at that end here, replayed
    /// as an LPUSH/RPUSH of its values or an LPOP/RPOP of as many as it
    /// took that are still here; false, the key's state asked for, where
    /// they do not.
    fn apply_list(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        (left, push, argv): (bool, bool, &Args),
    ) -> bool {
        use crate::keyspace::merge::lists::EndFact;
        let prev = facts
            .iter()
            .find(|f| f.0 & KIND == fact::PREV)
            .map_or(0, |f| f.1);
        let ids: Vec<(u64, u32)> = (facts.iter())
            .filter(|f| f.0 & KIND == fact::DROP)
            .map(|f| (f.1, f.0 >> SHIFT))
            .collect();
        let values: Vec<&[u8]> = (2..argv.len()).map(|i| argv.get(i)).collect();
        let end_fact = match push {
            true => EndFact::Push {
                left,
                fps: values.iter().map(|v| fingerprint(v)).collect(),
                was_empty: facts.iter().any(|f| f.0 == fact::WORD && f.1 == 1),
            },
            false => EndFact::Pop { left, ids: &ids },
        };
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let value = g.get_raw(slot.hash, key).map(|e| &e.value);
        if value.is_some_and(|v| !matches!(v, Value::List(_))) {
            return false;
        }
        let absent = value.is_none();
        let version = g.version_of(slot.hash, key);
        if version > stamp {
            return covered::<Lists>(g.merge_meta(key), stamp);
        }
        // A list's state, if any: its ends or version say (apply_end_fact).
        let Ok(state) = typed::<Lists>(g.merge_meta(key)) else {
            return false;
        };
        if state.is_none() {
            let fresh = Lists::current(None, version, value);
            g.set_merge_meta(key, fresh.wrap());
        }
        let Some(l) = g.merge_meta_mut(key).and_then(Meta::get_mut::<Lists>) else {
            return false;
        };
        // A list a push makes here has no TTL, as at its origin where the
        // push made it too; where it did not (a pop here emptied the list
        // under a TTL the origin's keeps), the join decides the TTL.
        let made_here = absent && push && fact::LIST_TTL_FACTS;
        if made_here && !l.ttl.is_empty() && !facts.iter().any(|f| f.0 == fact::WORD && f.1 == 1) {
            return false;
        }
        let applied = l.apply_end_fact((version, stamp, prev), end_fact);
        if made_here && applied.is_ok() {
            l.ttl = Default::default();
        }
        drop(g);
        let n = match applied {
            Ok(n) => n,
            Err(NotApplied::Duplicate) => return true,
            Err(NotApplied::Gap) => return false,
        };
        let version = version.max(stamp);
        let count = n.to_string();
        let argv: Vec<&[u8]> = match (push, left) {
            (true, true) => [&b"LPUSH"[..], key].into_iter().chain(values).collect(),
            (true, false) => [&b"RPUSH"[..], key].into_iter().chain(values).collect(),
            (false, true) => vec![b"LPOP", key, count.as_bytes()],
            (false, false) => vec![b"RPOP", key, count.as_bytes()],
        };
        if n > 0 {
            self.replay(db, version, &argv);
        }
        self.raise_version(db, key, version);
        self.note_merge_state(db, key);
        true
    }

    /// LTRIM's fact (keyspace/merge/lists.rs, `apply_trim_fact`): the
    /// elements it took at each end, those still here at that end, dropped
    /// and replayed as an LTRIM of this list's indices; false, the key's
    /// state asked for, where they are not at their ends here.
    fn apply_trim(&mut self, db: usize, key: &[u8], stamp: u64, facts: &[Fact]) -> bool {
        let prev = facts.iter().find(|f| f.0 & KIND == fact::PREV);
        let prev = prev.map_or(0, |f| f.1);
        let Some(front) = facts.iter().find(|f| f.0 == fact::WORD) else {
            return false;
        };
        let ids: Vec<(u64, u32)> = (facts.iter())
            .filter(|f| f.0 & KIND == fact::DROP)
            .map(|f| (f.1, f.0 >> SHIFT))
            .collect();
        let Some((head, tail)) = usize::try_from(front.1)
            .ok()
            .and_then(|f| ids.split_at_checked(f))
        else {
            return false;
        };
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let value = g.get_raw(slot.hash, key).map(|e| &e.value);
        if value.is_some_and(|v| !matches!(v, Value::List(_))) {
            return false;
        }
        let version = g.version_of(slot.hash, key);
        if version > stamp {
            return covered::<Lists>(g.merge_meta(key), stamp);
        }
        let Ok(state) = typed::<Lists>(g.merge_meta(key)) else {
            return false;
        };
        if state.is_none() {
            let fresh = Lists::current(None, version, value);
            g.set_merge_meta(key, fresh.wrap());
        }
        let Some(l) = g.merge_meta_mut(key).and_then(Meta::get_mut::<Lists>) else {
            return false;
        };
        let applied = l.apply_trim_fact((version, stamp, prev), (head, tail));
        drop(g);
        let (f, b) = match applied {
            Ok(n) => n,
            Err(NotApplied::Duplicate) => return true,
            Err(NotApplied::Gap) => return false,
        };
        let version = version.max(stamp);
        if f + b > 0 {
            let (start, stop) = (f.to_string(), format!("-{}", b + 1));
            self.replay(
                db,
                version,
                &[b"LTRIM", key, start.as_bytes(), stop.as_bytes()],
            );
        }
        self.raise_version(db, key, version);
        self.note_merge_state(db, key);
        true
    }

    /// A rotation's fact (LMOVE of a list onto itself; keyspace/merge/
    /// lists.rs, `apply_rotate_fact`): the element it popped is at that
    /// end here, and its value pushed at the other end lands there;
    /// replayed as the same command. False, the key's state asked for,
    /// where it does not.
    fn apply_rotate(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        (from, to, argv): (bool, bool, &Args),
    ) -> bool {
        let prev = facts.iter().find(|f| f.0 & KIND == fact::PREV);
        let prev = prev.map_or(0, |f| f.1);
        let drops: Vec<(u64, u32)> = (facts.iter())
            .filter(|f| f.0 & KIND == fact::DROP)
            .map(|f| (f.1, f.0 >> SHIFT))
            .collect();
        let (Some(word), [id]) = (facts.iter().find(|f| f.0 == fact::WORD), &drops[..]) else {
            return false;
        };
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let value = g.get_raw(slot.hash, key).map(|e| &e.value);
        let Some(Value::List(list)) = value else {
            return false;
        };
        let end = if from {
            Some(0)
        } else {
            list.len().checked_sub(1)
        };
        let Some(fp) = end.and_then(|i| list.get(i)).map(fingerprint) else {
            return false;
        };
        // The value the origin moved (its fact's second word): a peer that
        // holds another there (an LSET the origin saw and we have not)
        // would push that one under the moved element's id, which no join
        // could tell apart (simulator seed 51821; DECISIONS 261).
        let moved = facts.iter().find(|f| f.0 == fact::WORD | (1 << SHIFT));
        if moved.is_some_and(|f| f.1 != fp) {
            return false;
        }
        let version = g.version_of(slot.hash, key);
        if version > stamp {
            return covered::<Lists>(g.merge_meta(key), stamp);
        }
        let Ok(state) = typed::<Lists>(g.merge_meta(key)) else {
            return false;
        };
        if state.is_none() {
            let fresh = Lists::current(None, version, value);
            g.set_merge_meta(key, fresh.wrap());
        }
        let Some(l) = g.merge_meta_mut(key).and_then(Meta::get_mut::<Lists>) else {
            return false;
        };
        let applied =
            l.apply_rotate_fact((version, stamp, prev), (from, *id, to), (fp, word.1 == 1));
        drop(g);
        match applied {
            Ok(()) => {}
            Err(NotApplied::Duplicate) => return true,
            Err(NotApplied::Gap) => return false,
        }
        let version = version.max(stamp);
        let words: Vec<&[u8]> = argv.iter().collect();
        self.replay(db, version, &words);
        self.raise_version(db, key, version);
        self.note_merge_state(db, key);
        true
    }

    /// An edit's fact (LSET, LINSERT, LREM; keyspace/merge/lists/edits.rs):
    /// the ids it names found here, the edit applied to the list's state,
    /// and its change to the values replayed as an ordinary command
    /// ([`edit_replay`]); false, the key's state asked for, where the ids
    /// have not all arrived, the key is newer here or not a list, or no
    /// one command makes the change here (values equal to its neighbours').
    fn apply_list_edit(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        argv: &Args,
    ) -> bool {
        let prev = facts.iter().find(|f| f.0 & KIND == fact::PREV);
        let prev = prev.map_or(0, |f| f.1);
        let ids = |kind: u32| -> Vec<(u64, u32)> {
            (facts.iter())
                .filter(|f| f.0 & KIND == kind)
                .map(|f| (f.1, f.0 >> SHIFT))
                .collect()
        };
        let (adds, drops) = (ids(ADD), ids(fact::DROP));
        let Some((edit, v)) = edit_fact_of(argv, facts, &adds, &drops) else {
            return false;
        };
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let value = g.get_raw(slot.hash, key).map(|e| &e.value);
        let Some(Value::List(list)) = value else {
            return false;
        };
        let version = g.version_of(slot.hash, key);
        if version > stamp {
            return covered::<Lists>(g.merge_meta(key), stamp);
        }
        let Ok(state) = typed::<Lists>(g.merge_meta(key)) else {
            return false;
        };
        // The state in place where it describes the key (the common
        // case), else brought up to it (O(list), as a read would).
        let fresh = match state {
            Some(s) if s.version == version && s.ends.is_none() => None,
            s => Some(Lists::current(s, version, value)),
        };
        let Some(l) = fresh.as_ref().or(state) else {
            return false;
        };
        let change = match l.plan_edit_fact((version, stamp, prev), &edit) {
            Ok(c) => c,
            Err(NotApplied::Duplicate) => return true,
            Err(NotApplied::Gap) => return false,
        };
        let Some(replay) = edit_replay(&change, list, key, v) else {
            return false;
        };
        if let Some(f) = fresh {
            g.set_merge_meta(key, f.wrap());
        }
        let Some(l) = g.merge_meta_mut(key).and_then(Meta::get_mut::<Lists>) else {
            return false;
        };
        l.commit_edit_fact((version, stamp), &edit, &change);
        drop(g);
        let version = version.max(stamp);
        if let Some(argv) = replay {
            let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            self.replay(db, version, &argv);
        }
        self.raise_version(db, key, version);
        self.note_merge_state(db, key);
        true
    }

    /// After a collection's fact applied to its merge state: its changes
    /// written as commands at `version`, the key and its state at that
    /// version, and the state noted for the AOF.
    fn settle_elements(
        &mut self,
        db: usize,
        key: &[u8],
        write: Write,
        changes: &[Change],
        version: u64,
    ) {
        self.write_changes(db, key, write, changes, version);
        self.raise_version(db, key, version);
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let gone = g.get_raw(slot.hash, key).is_none();
        // Members the write removed lose their TTL dots (DECISIONS 327).
        g.drop_gone_member_ttls(slot.hash, key);
        if let Some(e) = g.merge_meta_mut(key).and_then(Meta::get_mut::<Elements>) {
            e.version = version;
            // A key the write deleted loses its TTL dots, as at its origin
            // (keyspace/mod.rs, `note_named`).
            if gone && fact::TTL_FACTS {
                e.ttl = Default::default();
            }
        }
        drop(g); // before the AOF note, which locks the shard again
        self.note_merge_state(db, key);
    }

    /// The removes, then the puts, of a fact's changes, as commands.
    fn write_changes(
        &mut self,
        db: usize,
        key: &[u8],
        write: Write,
        changes: &[Change],
        version: u64,
    ) {
        let (removes, puts): (Vec<&Change>, Vec<&Change>) =
            changes.iter().partition(|c| matches!(c, Change::Remove(_)));
        if !removes.is_empty() {
            let name: &[u8] = match collection(write) {
                Some(Collection::Hash) => b"HDEL",
                Some(Collection::ZSet) => b"ZREM",
                _ => b"SREM",
            };
            let mut argv: Vec<&[u8]> = vec![name, key];
            argv.extend(removes.iter().map(|c| match c {
                Change::Remove(m) | Change::Put(m, _) => &m[..],
            }));
            self.replay(db, version, &argv);
        }
        if !puts.is_empty() {
            let (name, words) = put_words(kind_of(write), &puts);
            let mut argv: Vec<&[u8]> = vec![name, key];
            argv.extend(words.iter().map(|w| &w[..]));
            self.replay(db, version, &argv);
        }
    }
}

/// The field a counted write counted into and its increment: HINCRBY's
/// from its argv, HINCRBYFLOAT's (its record an HSET) from the fact's
/// words, ZINCRBY's and ZADD INCR's score before the member.
fn counted_in<'a>(write: Write, argv: &Args<'a>, facts: &[Fact]) -> Option<(&'a [u8], Incr)> {
    let at = facts.iter().find(|f| f.0 & KIND == COUNTED)?.0 >> SHIFT;
    let at = at as usize;
    if at < 2 || at >= argv.len() {
        return None;
    }
    let by = match (collection(write)?, fact::words_float(facts)) {
        (Collection::Hash, Some(f)) => Incr::Float(f),
        (Collection::Hash, None) if at == 2 && argv.len() == 4 => {
            let n: i64 = std::str::from_utf8(argv.get(3)).ok()?.parse().ok()?;
            Incr::Int(n.into())
        }
        (Collection::ZSet, None) => {
            let s = crate::commands::zsets::parse_score(argv.get(at - 1))?;
            Incr::Float(crate::keyspace::longdouble::F80::from_f64(s))
        }
        _ => return None,
    };
    Some((argv.get(at), by))
}

/// Whether `meta` holds a state of `T` that has seen the write stamped
/// `stamp` (a fact older than the key here: a duplicate where it has).
/// Whether a collection fact cannot apply to the key whose entry here is
/// `entry` and whose merge state is `meta` for its TTL: the key has one
/// and TTL facts are off, or no elements state gives its expiry. Applying
/// there would refresh the state's TTL register from the key's expiry
/// (`Shard::with_elements`), a dot at the key's version that no other node
/// has (the fifteenth session's TTL seeds 4575 and 6838; DECISIONS 228):
/// the key's state decides instead.
fn ttl_unfit(entry: Option<&Entry>, meta: Option<&Meta>) -> bool {
    let Some(at) = entry.map(Entry::expire_at) else {
        return false; // an absent key's dots go with it (`Ttl::refresh`)
    };
    if at != 0 && !fact::TTL_FACTS {
        return true;
    }
    match typed::<Elements>(meta) {
        Ok(Some(e)) => e.ttl.at() != at,
        Ok(None) => at != 0,
        Err(()) => false, // not a collection's state: the caller refuses it
    }
}

fn covered<T: MergeType>(meta: Option<&Meta>, stamp: u64) -> bool {
    meta.and_then(T::of).is_some_and(|s| s.covers(stamp))
}

fn kind_of(write: Write) -> super::merging::Kind {
    use super::merging::Kind;
    match collection(write) {
        Some(Collection::Hash) => Kind::Hash,
        Some(Collection::ZSet) => Kind::ZSet,
        _ => Kind::Set,
    }
}

/// An edit's fact as the list state applies it, and the value it names
/// (LSET's new value, LINSERT's inserted one, LREM's removed one).
fn edit_fact_of<'a, 'f>(
    argv: &Args<'a>,
    facts: &[Fact],
    adds: &[(u64, u32)],
    drops: &'f [(u64, u32)],
) -> Option<(EditFact<'f>, &'a [u8])> {
    let name = argv.get(0).to_ascii_lowercase();
    match &name[..] {
        b"lset" if argv.len() == 4 => {
            let (id, v) = (*adds.first()?, argv.get(3));
            Some((
                EditFact::Set {
                    id,
                    fp: fingerprint(v),
                },
                v,
            ))
        }
        b"linsert" if argv.len() == 5 => {
            let word = facts.iter().find(|f| f.0 == fact::WORD)?.1;
            let place = Place::of(word, adds.first().copied())?;
            let v = argv.get(4);
            Some((
                EditFact::Insert {
                    place,
                    fp: fingerprint(v),
                },
                v,
            ))
        }
        b"lrem" if argv.len() == 4 => Some((EditFact::Remove { ids: drops }, argv.get(3))),
        _ => None,
    }
}

/// The one command that makes an edit's `change` to the list `values`
/// here: Some(None) where it changes no value; None where no command does
/// it exactly (an insert between values that occur earlier in the list, a
/// remove of some of a value's occurrences that are not its first or
/// last ones), and the key's state decides.
fn edit_replay(
    change: &ListChange,
    list: &ListValue,
    key: &[u8],
    v: &[u8],
) -> Option<Option<Vec<Vec<u8>>>> {
    let cmd = |parts: &[&[u8]]| Some(Some(parts.iter().map(|p| p.to_vec()).collect()));
    // The value at `i`, where this is its first occurrence.
    let first = |i: usize| -> Option<&[u8]> {
        let x = list.get(i)?;
        (list.iter().position(|y| y == x) == Some(i)).then_some(x)
    };
    match change {
        ListChange::None => Some(None),
        ListChange::Set(j) => cmd(&[b"LSET", key, j.to_string().as_bytes(), v]),
        ListChange::Insert(0) => cmd(&[b"LPUSH", key, v]),
        ListChange::Insert(j) if *j == list.len() => cmd(&[b"RPUSH", key, v]),
        ListChange::Insert(j) => match (first(j - 1), first(*j)) {
            (Some(x), _) => cmd(&[b"LINSERT", key, b"AFTER", x, v]),
            (None, Some(x)) => cmd(&[b"LINSERT", key, b"BEFORE", x, v]),
            (None, None) => None,
        },
        ListChange::Remove(at) if at.is_empty() => Some(None),
        ListChange::Remove(at) => {
            let occ: Vec<usize> = (list.iter().enumerate())
                .filter(|(_, x)| *x == v)
                .map(|(i, _)| i)
                .collect();
            let n = at.len() as i64;
            let count = if *at == occ {
                0
            } else if occ.starts_with(at) {
                n
            } else if occ.ends_with(at) {
                -n
            } else {
                return None;
            };
            cmd(&[b"LREM", key, count.to_string().as_bytes(), v])
        }
    }
}
