//! The merge trait (issue 24 item 4, docs/MERGE-DESIGN.md "Adding a merging type
//! or operation"): what every merging state has, whatever its type, so
//! that [`Meta`] (the stored enum) and the drivers that join states and
//! apply facts (replication/active/merging.rs, facts.rs, stream_facts.rs)
//! are written once, generically, instead of a `match` arm per type.
//!
//! This module owns [`MergeType`] and its implementations for the five
//! states: [`Counter`] (mod.rs), [`Elements`] (sets, hashes, sorted sets),
//! [`Lists`], [`Hll`] and [`Stream`]. Each implementation only maps the
//! trait onto the type's own methods and fields, which stay in the type's
//! file; what a join or a fact does to a type's value (its arguments
//! differ: a collection's members, a sketch's bytes, a stream's node
//! limits) stays type-specific there too.
//!
//! `Meta` stays an enum (no `Box<dyn MergeType>`): a counter, the commonest
//! state, costs its own size with no vtable and no second allocation, and
//! every generic call is monomorphised to what the per-type arm was
//! (DECISIONS 172).

use super::context::Context;
use super::hll::Hll;
use super::stream::Stream;
use super::ttl::Ttl;
use super::{Base, Counter, Elements, Lists, Meta};
use crate::keyspace::Value;

/// A merging state: the key's version it describes, its causal context,
/// its TTL dots, how it is brought up to a key's version and value, how it
/// compares, encodes and describes itself.
pub trait MergeType: Clone + Sized {
    /// The first byte of its encoding (`Meta::decode` dispatches on it).
    const TAG: u8;

    /// Where a join made a state neither side had (a commit,
    /// replication/active/merging.rs `Link::outcome`): whether it takes a
    /// fresh stamp as its version (a state no node had, which travels as a
    /// state), or the newer of the two sides' (a counter: its version is
    /// the newest stamp its parts and reset hold, DECISIONS 77).
    const FRESH_COMMIT: bool = true;

    /// Whether its join is exact, so that a peer's state as new as ours
    /// that lacks something ours holds is answered with ours
    /// (`Link::version_join`'s `equal_behind`): not a sketch's, nor a
    /// stream's with stream facts off, whose copies at one version may
    /// differ in what a join leaves each side (full seed 1187).
    const EXACT_JOIN: bool = true;

    /// The stored enum holding it.
    fn wrap(self) -> Meta;
    /// It, where `meta` holds one of its type.
    fn of(meta: &Meta) -> Option<&Self>;
    fn of_mut(meta: &mut Meta) -> Option<&mut Self>;
    /// It, taken out of `meta` where `meta` holds one of its type.
    fn take(meta: Meta) -> Option<Self>;

    /// The key's version it describes.
    fn version(&self) -> u64;
    fn set_version(&mut self, version: u64);

    /// The newest stamp of each node whose writes it holds (`Meta::stamps`).
    fn stamps(&self) -> Vec<u64>;

    /// Whether it holds a write stamped at or before `stamp` (not 0): a
    /// flush stamped `stamp` removed such writes on the flushing node
    /// (`Link::flush_survivors`). By default, a stamp of its context.
    fn holds_before(&self, stamp: u64) -> bool {
        self.stamps().into_iter().any(|s| s != 0 && s <= stamp)
    }

    /// Its causal context (None: a counter's, whose parts are stamped
    /// instead): a fact whose stamp it covers is one it has seen.
    fn context(&self) -> Option<&Context>;

    /// Whether it has seen the write stamped `stamp` by its context.
    fn covers(&self, stamp: u64) -> bool {
        self.context().is_some_and(|cc| cc.covers(stamp))
    }

    /// `prev` (None: nothing known) brought up to the key at `version`
    /// holding `value` (None: absent): a write since read as a reset, or
    /// as whatever the type makes of it.
    fn current(prev: Option<&Self>, version: u64, value: Option<&Value>) -> Self;

    /// Equal but for the versions they describe.
    fn same_content(&self, other: &Self) -> bool;

    /// Its TTL dots (ttl.rs; None: a counter's TTL follows its resets).
    fn ttl(&self) -> Option<&Ttl>;
    fn ttl_mut(&mut self) -> Option<&mut Ttl>;

    fn encode(&self, out: &mut Vec<u8>);
    fn decode(b: &[u8]) -> Result<Self, String>;
    /// DEBUG MERGEINFO's lines.
    fn describe(&self) -> Vec<String>;

    /// [`Self::current`] of nothing, with TTL dots for the key at
    /// `version`, present or not, expiring at `at`: the state of a side
    /// that kept none (a peer's state that carried none, a key here
    /// written before it merged).
    fn made(version: u64, value: Option<&Value>, at: u64) -> Self {
        let mut s = Self::current(None, version, value);
        if let Some(ttl) = s.ttl_mut() {
            ttl.refresh(version, value.is_some(), at);
        }
        s
    }
}

/// The state of type `T` in `meta`: `Ok(None)` where there is none,
/// `Err(())` where there is one of another type.
#[allow(clippy::result_unit_err)]
pub(crate) fn typed<T: MergeType>(meta: Option<&Meta>) -> Result<Option<&T>, ()> {
    match meta {
        None => Ok(None),
        Some(m) => T::of(m).map(Some).ok_or(()),
    }
}

/// The items every implementation spells the same way: the enum variant
/// (boxed or not), the version field, the methods the type has itself.
macro_rules! common {
    ($t:ty, $variant:ident, $tag:expr, boxed) => {
        fn wrap(self) -> Meta {
            Meta::$variant(Box::new(self))
        }
        fn of(meta: &Meta) -> Option<&Self> {
            match meta {
                Meta::$variant(s) => Some(&**s),
                _ => None,
            }
        }
        fn of_mut(meta: &mut Meta) -> Option<&mut Self> {
            match meta {
                Meta::$variant(s) => Some(&mut **s),
                _ => None,
            }
        }
        fn take(meta: Meta) -> Option<Self> {
            match meta {
                Meta::$variant(s) => Some(*s),
                _ => None,
            }
        }
        common!($t, $tag);
    };
    ($t:ty, $variant:ident, $tag:expr, inline) => {
        fn wrap(self) -> Meta {
            Meta::$variant(self)
        }
        fn of(meta: &Meta) -> Option<&Self> {
            match meta {
                Meta::$variant(s) => Some(s),
                _ => None,
            }
        }
        fn of_mut(meta: &mut Meta) -> Option<&mut Self> {
            match meta {
                Meta::$variant(s) => Some(s),
                _ => None,
            }
        }
        fn take(meta: Meta) -> Option<Self> {
            match meta {
                Meta::$variant(s) => Some(s),
                _ => None,
            }
        }
        common!($t, $tag);
    };
    ($t:ty, $tag:expr) => {
        const TAG: u8 = $tag;
        fn version(&self) -> u64 {
            self.version
        }
        fn set_version(&mut self, version: u64) {
            self.version = version;
        }
        fn same_content(&self, other: &Self) -> bool {
            <$t>::same_content(self, other)
        }
        fn encode(&self, out: &mut Vec<u8>) {
            <$t>::encode(self, out)
        }
        fn decode(b: &[u8]) -> Result<Self, String> {
            <$t>::decode(b)
        }
        fn describe(&self) -> Vec<String> {
            <$t>::describe(self)
        }
    };
}

/// The items of a type with a causal context and TTL dots (all but a
/// counter), whose `current` reads the key's value.
macro_rules! with_context {
    ($t:ty) => {
        fn context(&self) -> Option<&Context> {
            Some(&self.cc)
        }
        fn current(prev: Option<&Self>, version: u64, value: Option<&Value>) -> Self {
            <$t>::current(prev, version, value)
        }
        fn ttl(&self) -> Option<&Ttl> {
            Some(&self.ttl)
        }
        fn ttl_mut(&mut self) -> Option<&mut Ttl> {
            Some(&mut self.ttl)
        }
    };
}

impl MergeType for Counter {
    common!(Counter, Counter, b'C', inline);
    const FRESH_COMMIT: bool = false;

    /// Its parts' stamps and its reset's.
    fn stamps(&self) -> Vec<u64> {
        (self.parts.iter().map(|p| p.stamp))
            .chain([self.reset])
            .collect()
    }

    /// Always: a part is stamped with its node's last increment, so one
    /// a flush saw and removed may have moved on since (full seed 35723).
    fn holds_before(&self, _stamp: u64) -> bool {
        true
    }

    fn context(&self) -> Option<&Context> {
        None
    }

    /// The value read as a reset's base ([`Base::of`]).
    fn current(prev: Option<&Self>, version: u64, value: Option<&Value>) -> Self {
        Counter::current(prev, version, Base::of(value))
    }

    fn ttl(&self) -> Option<&Ttl> {
        None
    }

    fn ttl_mut(&mut self) -> Option<&mut Ttl> {
        None
    }
}

impl MergeType for Elements {
    common!(Elements, Elements, b'E', boxed);
    with_context!(Elements);

    fn stamps(&self) -> Vec<u64> {
        self.cc.stamps().collect()
    }

    /// Its context's stamps (one per node, its newest) or any element's
    /// own dot: what a flush takes (full seed 260).
    fn holds_before(&self, stamp: u64) -> bool {
        let before = |s: u64| s != 0 && s <= stamp;
        self.cc.stamps().any(before) || self.dots.values().flatten().any(|d| before(d.stamp))
    }
}

impl MergeType for Lists {
    common!(Lists, List, b'L', boxed);
    with_context!(Lists);

    fn stamps(&self) -> Vec<u64> {
        self.cc.stamps().collect()
    }

    /// Its context's stamps or any element's id (its write's stamp).
    fn holds_before(&self, stamp: u64) -> bool {
        let before = |s: u64| s != 0 && s <= stamp;
        self.cc.stamps().any(before) || self.elems.iter().any(|e| before(e.id.0))
    }
}

impl MergeType for Hll {
    common!(Hll, Hll, b'H', inline);
    const EXACT_JOIN: bool = false;
    with_context!(Hll);

    /// Its context's stamps and its reset's.
    fn stamps(&self) -> Vec<u64> {
        self.cc.stamps().chain([self.reset]).collect()
    }
}

impl MergeType for Stream {
    common!(Stream, Stream, b'S', boxed);
    /// With stream facts on, exact (DECISIONS 210): groups join per part
    /// (`groups.rs`), so two states at one version join alike on both
    /// sides, and the side whose state holds a removal the other lacks
    /// must tell it (full seed 25421: a flush's replay removed a group its
    /// maker had not seen, its tombstone's join elsewhere kept it).
    const EXACT_JOIN: bool = super::stream::STREAM_FACTS;
    /// With stream facts on, the counter's rule (DECISIONS 183): the
    /// version is the newest stamp the state holds, however reached.
    const FRESH_COMMIT: bool = !super::stream::STREAM_FACTS;
    with_context!(Stream);

    fn stamps(&self) -> Vec<u64> {
        self.cc.stamps().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each type's tag is the first byte it encodes, so `Meta::decode`
    /// finds it, and a state wraps into the variant it is taken back from.
    fn round_trip<T: MergeType + PartialEq + std::fmt::Debug>(s: T) {
        let mut out = Vec::new();
        MergeType::encode(&s, &mut out);
        assert_eq!(out[0], T::TAG);
        assert_eq!(Meta::decode(&out).unwrap(), s.clone().wrap());
        let meta = s.clone().wrap();
        assert_eq!(T::of(&meta), Some(&s));
        assert_eq!(typed::<T>(Some(&meta)), Ok(Some(&s)));
        assert_eq!(typed::<T>(None), Ok(None));
        assert_eq!(T::take(meta), Some(s));
    }

    #[test]
    fn every_type_round_trips_through_meta() {
        let set = Value::Set(Default::default());
        round_trip(<Counter as MergeType>::current(None, 5, None));
        round_trip(<Elements as MergeType>::current(None, 5, Some(&set)));
        round_trip(<Lists as MergeType>::current(None, 5, None));
        round_trip(<Hll as MergeType>::current(None, 5, None));
        round_trip(<Stream as MergeType>::current(None, 5, None));
        let counter = Counter::current(None, 5, Base::Absent).wrap();
        assert_eq!(typed::<Elements>(Some(&counter)), Err(()));
        assert_eq!(Elements::of(&counter), None);
    }

    /// A made state has TTL dots for a present key with an expiry; a
    /// counter has none to make.
    #[test]
    fn a_made_state_has_its_keys_ttl() {
        let set = Value::Set(Default::default());
        let e = Elements::made(7, Some(&set), 1000);
        assert_eq!(e.ttl.at(), 1000);
        assert_eq!(Elements::made(7, None, 1000).ttl.at(), 0);
        assert!(Counter::made(7, None, 1000).ttl().is_none());
    }
}
