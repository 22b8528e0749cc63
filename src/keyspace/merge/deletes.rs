//! Whole-key deletes and overwrites of a merging key as facts (issue 24
//! item 1, DECISIONS 242-247; docs/MERGE-DESIGN.md section 9).
//!
//! A DEL, UNLINK, GETDEL or SPOP of a whole set on a counter, set, hash,
//! sorted set or list is an observed remove of the whole key (section 2's
//! table): what the deleting node had seen goes, what was written
//! concurrently elsewhere survives. What the deleter had seen is the
//! merge state its delete left: the key's causal context (a collection's
//! or a list's), or a counter's parts and the reset that observed them.
//! With no member left it is O(nodes), not O(key), and it is exactly the
//! state a peer asked for before: the record now carries it, and the peer
//! joins it at once (the join a state asked for takes,
//! replication/active/merging.rs), with no round trip. An overwrite (the
//! *STOREs, COPY, RENAME's two keys) is that delete plus the new contents
//! as new adds: its record carries the key's state after it, the new
//! value's DUMP payload and the merge state (context and dots), which a
//! peer joins the same way.
//!
//! A join needs no base: a peer that had not seen a write the writer saw
//! takes the writer's context all the same, and that write, arriving
//! later, is a duplicate there. So such a record never asks, but where
//! the key here does not merge with the state (another type: whole-key
//! last-writer-wins), and its argv is not replayed: every key the write
//! changed has its state in the record; its other keys were only read.
//!
//! A state travels as `WORD` entries of the fact (`fact.rs`), numbered
//! `key << 16 | w` (`key`: the key's argument index; `w`: the word): word
//! 0 the merge state's length in bytes, 1 the payload's (0: the key is
//! absent), 2 the expiry (0: none), then the merge state's bytes and the
//! payload's, eight to a word, little end first. Other facts' `WORD`s are
//! numbered 0 and 1, below any state's. A record whose states would pass
//! [`MAX_BYTES`] carries none: its peers ask, as before. A stream's
//! delete travels so too (its state is its context, counts and groups'
//! dots, O(nodes + groups): DECISIONS 282), and so does a RENAME or COPY
//! that leaves a stream (its state and payload, O(key) within
//! [`MAX_BYTES`] as any overwrite's: DECISIONS 300); HyperLogLogs (a
//! delete is a reset) keep asking.

use super::fact::{Fact, DELETE_FACTS, KIND, SHIFT, WORD};
use super::Meta;
use crate::keyspace::{Shard, Value};

/// The most bytes of state one record carries (DECISIONS 243).
pub(crate) const MAX_BYTES: usize = 16 * 1024;

/// The word number of a state's first word: the key's argument index.
const KEY_SHIFT: u32 = 16;

/// Whether a key whose merge state is `meta` travels by it: a counter's,
/// a collection's or a list's; a stream's where the write deleted it
/// (`present`: it holds a value after the write; DECISIONS 282), or, with
/// [`STREAM_OVERWRITES`], where it holds one (RENAME, COPY: DECISIONS
/// 300; within [`MAX_BYTES`] as every overwrite); sketches keep asking.
fn carried(meta: &Meta, present: bool) -> bool {
    match meta {
        Meta::Counter(_) | Meta::Elements(_) | Meta::List(_) => true,
        Meta::Stream(_) => !present || STREAM_OVERWRITES,
        _ => false,
    }
}

/// Whether a write that leaves a stream at a key it wrote (RENAME,
/// RENAMENX, COPY onto it) carries the stream's state as a collection's
/// overwrite does (DECISIONS 300); off, its peers ask for it.
pub(crate) const STREAM_OVERWRITES: bool = true;

/// Origin, after a delete or an overwrite of `key` (at argument `arg` of
/// the write's record) in `shard`: the key's state now (its merge state
/// brought up to its version, its value's DUMP payload by `dump`, its
/// expiry) goes to `facts`. False, `facts` cleared, where the key does not
/// travel so (the record then asks its peers, as before).
pub(crate) fn note_state(
    shard: &mut Shard,
    (hash, key): (u64, &[u8]),
    (arg, dump): (u32, impl Fn(&Value) -> Vec<u8>),
    facts: &mut Vec<Fact>,
) -> bool {
    let fits = DELETE_FACTS && arg > 0 && arg < 1 << (29 - KEY_SHIFT);
    stream_state_made(shard, hash, key);
    let mut merge = Vec::new();
    let present = shard.get_raw(hash, key).is_some();
    match shard.merge_meta_now(hash, key) {
        Some(m) if fits && carried(m, present) => m.encode(&mut merge),
        _ => {
            facts.clear();
            return false;
        }
    }
    let (payload, at) = match shard.get_raw(hash, key) {
        Some(e) => (dump(&e.value), e.expire_at()),
        None => (Vec::new(), 0),
    };
    let carried_bytes: usize = facts.iter().filter(|f| is_state_word(f.0)).count() * 8;
    if carried_bytes + merge.len() + payload.len() > MAX_BYTES {
        facts.clear();
        return false;
    }
    let word = |w: u32| WORD | (((arg << KEY_SHIFT) | w) << SHIFT);
    let lens = [merge.len() as u64, payload.len() as u64, at];
    facts.extend((0..3).map(|w| (word(w), lens[w as usize])));
    let bytes = merge.iter().chain(&payload).copied().collect::<Vec<u8>>();
    for (j, chunk) in bytes.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        facts.push((word(3 + j as u32), u64::from_le_bytes(w)));
    }
    true
}

/// A stream a write left at `key` with no merge state of its own (RENAME,
/// COPY onto the key: the state stayed with the source) gets the one it
/// would be given lazily (`Stream::current`: it has seen every entry it
/// holds, its groups dotted at its version), so that its overwrite
/// carries it (DECISIONS 300).
fn stream_state_made(shard: &mut Shard, hash: u64, key: &[u8]) {
    if !STREAM_OVERWRITES || shard.merge_meta(key).is_some() {
        return;
    }
    let Some(e) = shard.get_raw(hash, key) else {
        return;
    };
    if !matches!(e.value, Value::Stream(_)) {
        return;
    }
    let (at, version) = (e.expire_at(), shard.version_of(hash, key));
    let mut s = super::stream::Stream::current(None, version, Some(&e.value));
    s.ttl.refresh(version, true, at);
    shard.set_merge_meta(key, Meta::Stream(Box::new(s)));
}

/// The argument index by which a record `argv` names `key` (its first
/// after the command's name, as the record's base names it; 0: none).
pub(crate) fn arg_of(argv: &[&[u8]], key: &[u8]) -> u32 {
    let at = argv.iter().skip(1).position(|a| *a == key);
    at.map_or(0, |i| i as u32 + 1)
}

/// Whether a fact entry is a word of a key's state.
fn is_state_word(entry: u32) -> bool {
    entry & KIND == WORD && entry >> SHIFT >= 1 << KEY_SHIFT
}

/// Whether a record's fact carries key states (see the module comment).
pub(crate) fn carries_states(facts: &[Fact]) -> bool {
    facts.iter().any(|f| is_state_word(f.0))
}

/// A key's state as a record carries it.
#[derive(Debug, PartialEq)]
pub(crate) struct KeyState {
    pub merge: Vec<u8>,
    /// The value's DUMP payload (empty: the key is absent).
    pub payload: Vec<u8>,
    /// Its expiry (0: none).
    pub at: u64,
}

/// Peer: the state a record's fact carries for the key at argument `arg`
/// (None: none, or not whole).
pub(crate) fn state_of(facts: &[Fact], arg: u32) -> Option<KeyState> {
    let base = arg.checked_shl(KEY_SHIFT)?;
    let word = |w: u32| {
        let entry = WORD | ((base | w) << SHIFT);
        facts.iter().find(|f| f.0 == entry).map(|f| f.1)
    };
    let m = usize::try_from(word(0)?).ok().filter(|&n| n <= MAX_BYTES)?;
    let p = usize::try_from(word(1)?).ok().filter(|&n| n <= MAX_BYTES)?;
    let mut bytes = Vec::with_capacity(m + p + 8);
    for j in 0..(m + p).div_ceil(8) as u32 {
        bytes.extend_from_slice(&word(3 + j)?.to_le_bytes());
    }
    bytes.truncate(m + p);
    let payload = bytes.split_off(m);
    Some(KeyState {
        merge: bytes,
        payload,
        at: word(2)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::{Entry, Keyspace};

    /// A deleted set's state and a set's after an overwrite travel whole
    /// through the words, each under its key's argument index, and decode
    /// to what the shard holds; a word missing, no state.
    #[test]
    fn key_states_round_trip_through_their_words() {
        let ks = Keyspace::new(1);
        let mut shard = Shard::default();
        let (s, t) = (ks.slot(b"s"), ks.slot(b"t"));
        let mut set = crate::keyspace::set::SetValue::default();
        for m in [&b"a"[..], b"b"] {
            set.add(m, 512);
        }
        let v1 = make_stamp(10, 0, 1);
        let value = Value::Set(Box::new(set));
        shard.insert(
            &ks.hasher,
            t.hash,
            Entry::new(b"t".as_slice().into(), value, 99, v1),
        );
        shard.insert(
            &ks.hasher,
            s.hash,
            Entry::new(b"s".as_slice().into(), Value::string(b"x"), 0, v1),
        );
        shard.merge_meta_now(s.hash, b"s");
        shard.remove(&ks.hasher, s.hash, b"s");
        let dump = |_: &Value| b"payload".to_vec();
        let mut facts = vec![(WORD, 7)];
        assert!(
            !note_state(&mut shard, (s.hash, b"s"), (1, dump), &mut facts),
            "a string with no state"
        );
        assert!(facts.is_empty());
        assert!(note_state(
            &mut shard,
            (t.hash, b"t"),
            (2, dump),
            &mut facts
        ));
        assert!(carries_states(&facts));
        let got = state_of(&facts, 2).expect("t's state");
        assert_eq!(got.at, 99);
        let mut merge = Vec::new();
        shard.merge_meta(b"t").expect("noted").encode(&mut merge);
        assert_eq!(got.merge, merge);
        assert_eq!(got.payload, b"payload");
        assert_eq!(state_of(&facts, 1), None);
        facts.pop();
        assert_eq!(state_of(&facts, 2), None, "a word missing");
    }
}
