//! The write-effect stream: one deterministic record per write.
//!
//! Every command that changes the keyspace reports what it did through
//! [`Effects::emit`], the single choke point that AOF and replication consume.
//! A record is the command that reproduces the change exactly on any replica,
//! rewritten the way Redis propagates non-deterministic commands (EXPIRE as
//! PEXPIREAT, SET ... EX as SET ... PXAT, INCRBYFLOAT as SET ... KEEPTTL,
//! expired keys as DEL or UNLINK), plus the database and the version stamp the write
//! gave its keys. Replaying the records through [`crate::commands::replay`] on an
//! empty keyspace yields an identical keyspace, versions included.
//!
//! Records are emitted while the writer still holds its shard locks, so the
//! stream orders the writes to any one key as they happened. With no
//! subscriber the stream costs one relaxed load per write.
//!
//! Fidelity to Redis 7.0's replication stream (tests/propagation.rs, and
//! the Tcl suite's assert_replication_stream tests): a command propagated
//! unrewritten keeps the client's spelling (`Ctx::sent`); PUBLISH reaches
//! replicas but not the AOF ([`Effect::repl_only`]); SPOP with a count is
//! one SREM per member between MULTI and EXEC. A command whose locking
//! lazily expired keys holds their DELs back, with its own records, until
//! its `Locked` view drops (still under the locks): several are then
//! wrapped in MULTI/EXEC as Redis wraps a command's records (MGET over two
//! expired keys, SET on an expired key); SCAN and RANDOMKEY expire each key
//! under its own view, so their DELs stay unwrapped, as in Redis.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// Under active replication, a key the write found, as the index of its
/// name in `argv` and the version it had then (0: absent, no tombstone).
/// A peer applies the write as it is only where its keys have these
/// versions (docs/ACTIVE-ACTIVE-DESIGN.md, "What travels").
pub(crate) type Base = (u32, u64);

pub(crate) use crate::keyspace::merge::fact::Fact;

/// Set in a base's argument index when its key merges (a counter,
/// `keyspace/merge.rs`): a peer merges the key's state instead of
/// replaying the write (docs/MERGE-DESIGN.md). Mask it off to index the argv.
pub const MERGED_BASE: u32 = 1 << 31;

/// One write, as it must be replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effect {
    pub db: usize,
    /// HLC stamp given to the keys this write touched.
    pub version: u64,
    pub argv: Vec<Vec<u8>>,
    /// Empty unless active replication is on.
    pub bases: Vec<Base>,
    /// Active replication: what a merging write did to its key's merge
    /// state (keyspace/merge/fact.rs); empty for every other write.
    pub facts: Vec<Fact>,
}

impl Effect {
    /// The borrowed view sinks take.
    fn with_ref<R>(&self, f: impl FnOnce(&EffectRef<'_>) -> R) -> R {
        let argv: Vec<&[u8]> = self.argv.iter().map(|a| a.as_slice()).collect();
        f(&EffectRef {
            db: self.db,
            version: self.version,
            argv: &argv,
            bases: &self.bases,
            facts: &self.facts,
        })
    }

    pub fn repl_only(&self) -> bool {
        is_repl_only(self.argv.first().map(|a| a.as_slice()))
    }

    pub fn aof_only(&self) -> bool {
        self.argv.first().is_some_and(|a| a == MERGE_STATE)
    }
}

/// One write as sinks see it: borrowed from the writer, so a write that
/// goes straight to the sinks (all but the records held for a unit: a
/// transaction's, a command's with lazy-expire DELs) costs no copy of its
/// arguments before a sink encodes them.
#[derive(Clone, Copy, Debug)]
pub struct EffectRef<'a> {
    pub db: usize,
    pub version: u64,
    pub argv: &'a [&'a [u8]],
    pub bases: &'a [Base],
    pub facts: &'a [Fact],
}

impl EffectRef<'_> {
    // `&self` as it was: clippy asks for `self` of crate-private items only (DECISIONS 303).
    #[allow(clippy::wrong_self_convention)]
    pub fn to_owned(&self) -> Effect {
        Effect {
            db: self.db,
            version: self.version,
            argv: self.argv.iter().map(|a| a.to_vec()).collect(),
            bases: self.bases.to_vec(),
            facts: self.facts.to_vec(),
        }
    }

    pub fn repl_only(&self) -> bool {
        is_repl_only(self.argv.first().copied())
    }

    /// A key's merge state for the AOF alone ([`MERGE_STATE`]).
    pub fn aof_only(&self) -> bool {
        self.argv.first().is_some_and(|a| *a == MERGE_STATE)
    }

    /// A command for plain replicas alone ([`REPLICAS_ONLY`]).
    pub fn replicas_alone(&self) -> bool {
        self.argv.first().is_some_and(|a| *a == REPLICAS_ONLY)
    }
}

/// The name of a record that is no command: a key's merge state after an
/// active peer's state was joined into it (`[MERGE_STATE, key, state]`,
/// replication/active/merging.rs), for the AOF alone, which writes it as
/// an annotation (`#LM:`) that its loader applies in place, so a node
/// restarted from its AOF keeps the per-node parts and dots it merged
/// (the writes it replays rebuild only its own). Replicas and the active
/// stream never see it.
pub(crate) const MERGE_STATE: &[u8] = b"\0lattice-merge";

/// The name of a record that carries, after it, a command for plain
/// replicas alone, never run here (`[REPLICAS_ONLY, command...]`: DEBUG
/// REPLICATE, Redis's replicationFeedSlaves of its arguments). The
/// replicas' feed sends the command after the name; the AOF and the active
/// stream skip the record.
pub(crate) const REPLICAS_ONLY: &[u8] = b"\0lattice-replicas";

/// Records for replicas only, never the AOF: PUBLISH and SPUBLISH (Redis
/// propagates them with PROPAGATE_REPL alone), and [`REPLICAS_ONLY`]'s.
fn is_repl_only(name: Option<&[u8]>) -> bool {
    name.is_some_and(|n| {
        n.eq_ignore_ascii_case(b"publish")
            || n.eq_ignore_ascii_case(b"spublish")
            || n == REPLICAS_ONLY
    })
}

/// The command a record sends to plain replicas: a [`REPLICAS_ONLY`]
/// record's carried command, else the record's own.
pub(crate) fn for_replicas<T: AsRef<[u8]>>(argv: &[T]) -> &[T] {
    match argv.first() {
        Some(n) if n.as_ref() == REPLICAS_ONLY => &argv[1..],
        _ => argv,
    }
}

/// A consumer of the stream (AOF writer, replication feed, test recorder).
pub trait EffectSink: Send + Sync {
    fn on_effect(&self, effect: &EffectRef<'_>);

    /// Whether it records [`MERGE_STATE`] records (the AOF, while on):
    /// an active link skips encoding a key's merge state nobody keeps.
    fn records_merge_state(&self) -> bool {
        false
    }

    /// Several records that must stay together (a transaction's MULTI ...
    /// EXEC): a sink that orders records under a lock takes it once, so no
    /// other writer's record lands in between.
    fn on_effects(&self, effects: &[Effect]) {
        for e in effects {
            e.with_ref(|e| self.on_effect(e));
        }
    }
}

/// The most sinks a node subscribes: each kind subscribes once (the AOF,
/// the replication backlog's feed, the active stream, a test's recorder).
const MAX_SINKS: usize = 8;

/// The stream's sinks: set once each, in order, and never removed, so a
/// write reads them with no lock (a `RwLock`'s read was two locked
/// read-modify-writes of one shared line a write, issue 24).
#[derive(Default)]
pub struct Effects {
    enabled: AtomicBool,
    sinks: [OnceLock<Arc<dyn EffectSink>>; MAX_SINKS],
    /// How many of `sinks` are set: stored after the slot it counts.
    count: AtomicUsize,
    /// Held while subscribing (one subscriber at a time takes the next slot).
    adding: Mutex<()>,
}

impl Effects {
    /// Whether anyone listens; writers skip building records when not.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Whether a sink records [`MERGE_STATE`] records now.
    pub fn merge_state_wanted(&self) -> bool {
        self.enabled() && self.sinks().any(|s| s.records_merge_state())
    }

    /// The sinks subscribed so far, in order.
    #[inline]
    fn sinks(&self) -> impl Iterator<Item = &Arc<dyn EffectSink>> {
        let n = self.count.load(Ordering::Acquire);
        self.sinks[..n].iter().filter_map(OnceLock::get)
    }

    /// Adds a sink; it sees every record emitted after this returns.
    pub fn subscribe(&self, sink: Arc<dyn EffectSink>) {
        let _one_at_a_time = self.adding.lock();
        let n = self.count.load(Ordering::Relaxed);
        assert!(n < MAX_SINKS, "more than {MAX_SINKS} effect sinks");
        let _ = self.sinks[n].set(sink);
        self.count.store(n + 1, Ordering::Release);
        self.enabled.store(true, Ordering::Release);
    }

    pub fn emit(&self, effect: &EffectRef<'_>) {
        for s in self.sinks() {
            s.on_effect(effect);
        }
    }

    /// Emits a record held since it was made.
    pub fn emit_owned(&self, effect: &Effect) {
        effect.with_ref(|e| self.emit(e));
    }

    /// Emits records as one unit (see [`EffectSink::on_effects`]).
    pub fn emit_all(&self, effects: &[Effect]) {
        for s in self.sinks() {
            s.on_effects(effects);
        }
    }
}

/// A sink that keeps every record (tests, DEBUG tooling).
#[derive(Default)]
pub struct Recorder(pub parking_lot::Mutex<Vec<Effect>>);

impl EffectSink for Recorder {
    fn on_effect(&self, effect: &EffectRef<'_>) {
        self.0.lock().push(effect.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink sees the records emitted after it subscribed, each sink in
    /// its order of subscription; a node with none builds no record.
    #[test]
    fn sinks_see_what_is_emitted_after_they_subscribe() {
        let fx = Effects::default();
        assert!(!fx.enabled() && !fx.merge_state_wanted());
        let set = |v: &[u8]| Effect {
            db: 0,
            version: 1,
            argv: vec![b"SET".to_vec(), b"k".to_vec(), v.to_vec()],
            bases: vec![],
            facts: vec![],
        };
        fx.emit_owned(&set(b"lost"));
        let (a, b) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        fx.subscribe(a.clone());
        assert!(fx.enabled());
        fx.emit_owned(&set(b"1"));
        fx.subscribe(b.clone());
        fx.emit_all(&[set(b"2"), set(b"3")]);
        let got = |r: &Recorder| {
            r.0.lock()
                .iter()
                .map(|e| e.argv[2].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(got(&a), [&b"1"[..], b"2", b"3"]);
        assert_eq!(got(&b), [&b"2"[..], b"3"]);
        assert!(!fx.merge_state_wanted());
    }
}
