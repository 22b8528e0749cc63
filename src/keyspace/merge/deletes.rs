//! Whole-key deletes of a merging key as facts (issue 24 item 1,
//! DECISIONS 242-244; docs/MERGE.md section 9).
//!
//! A DEL, UNLINK, GETDEL or SPOP of a whole set on a counter, set, hash,
//! sorted set or list is an observed remove of the whole key (section 2's
//! table): what the deleting node had seen goes, what was written
//! concurrently elsewhere survives. What the deleter had seen is the
//! merge state its delete left: the key's causal context (a collection's
//! or a list's), or a counter's parts and its reset that observed them.
//! With no member left it is O(nodes), not O(key), and it is exactly the
//! state a peer asked for before: the record now carries it, so the peer
//! joins it at once (the same join a state asked for takes,
//! replication/active/merging.rs), with no round trip.
//!
//! The state travels as the fact's `WORD` entries (`fact.rs`): word 0 the
//! state's length in bytes, words 1.. its bytes, eight to a word, little
//! end first. A join needs no base: a peer that had not seen a write the
//! deleter saw takes the deleter's context all the same, and that write,
//! arriving later, is a duplicate there. A state above [`MAX_BYTES`]
//! (a hash whose many fields counted on several nodes keeps their
//! counters after a delete) is not carried: its peers ask, as before.
//! Streams (their groups) and HyperLogLogs (a delete is a reset) keep
//! asking.

use super::fact::{Fact, DELETE_FACTS, SHIFT, WORD};
use super::Meta;

/// The largest state a delete's record carries (DECISIONS 243).
pub const MAX_BYTES: usize = 1024;

/// Whether a delete of a key whose merge state is `meta` travels as a
/// fact: a counter's, a collection's or a list's (streams and sketches
/// keep asking).
fn carried(meta: &Meta) -> bool {
    matches!(meta, Meta::Counter(_) | Meta::Elements(_) | Meta::List(_))
}

/// Origin, after a whole-key delete: the state it left (`meta`, brought
/// up to the key's tombstone) goes to `facts` as `WORD` entries. False,
/// nothing pushed, where it does not travel as a fact.
pub fn note(meta: &Meta, facts: &mut Vec<Fact>) -> bool {
    if !DELETE_FACTS || !carried(meta) {
        return false;
    }
    let mut state = Vec::new();
    meta.encode(&mut state);
    if state.len() > MAX_BYTES {
        return false;
    }
    facts.push((WORD, state.len() as u64));
    for (j, chunk) in state.chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        facts.push((WORD | ((j as u32 + 1) << SHIFT), u64::from_le_bytes(word)));
    }
    true
}

/// Peer: the state a delete's fact carries (None: none, or not whole).
pub fn state_of(facts: &[Fact]) -> Option<Vec<u8>> {
    let word = |j: u32| facts.iter().find(|f| f.0 == WORD | (j << SHIFT)).map(|f| f.1);
    let len = usize::try_from(word(0)?).ok().filter(|&n| n <= MAX_BYTES)?;
    let mut state = Vec::with_capacity(len + 8);
    for j in 1..=len.div_ceil(8) as u32 {
        state.extend_from_slice(&word(j)?.to_le_bytes());
    }
    state.truncate(len);
    Some(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::hlc::make_stamp;
    use crate::keyspace::merge::{Base, Counter, Elements, MergeType};

    /// A deleted set's state and a counter's travel whole through the
    /// words and decode to what was noted; a stream's is not carried.
    #[test]
    fn a_deletes_state_round_trips_through_its_words() {
        let mut e = Elements::default();
        let mut f = Vec::new();
        e.note_write(1, make_stamp(10, 0, 1), &[(2, b"m", Some(0))], &mut f);
        let deleted = Elements::current(Some(&e), make_stamp(20, 0, 1), None).wrap();
        let counter = Counter::current(None, make_stamp(30, 0, 2), Base::Int(5)).wrap();
        for meta in [deleted, counter] {
            let mut facts = Vec::new();
            assert!(note(&meta, &mut facts));
            let bytes = state_of(&facts).expect("a whole state");
            assert_eq!(Meta::decode(&bytes), Ok(meta));
            facts.pop();
            assert_eq!(state_of(&facts), None, "a word missing: no state");
        }
        let stream = crate::keyspace::merge::stream::Stream::current(None, 7, None).wrap();
        assert!(!note(&stream, &mut Vec::new()));
    }
}
