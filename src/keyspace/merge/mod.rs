//! Merge metadata (issue 13, docs/MERGE-DESIGN.md): what a key keeps beside its
//! value so that concurrent writes on different nodes merge instead of the
//! last writer winning: counters here, collections in `elements.rs`, lists
//! in `lists.rs`.
//!
//! A **counter** is a string key that INCR, INCRBY, DECR, DECRBY or
//! INCRBYFLOAT wrote under active replication. Its [`Counter`] keeps each node's contribution
//! apart: a *part* per node slot, the running total of that node's
//! increments, stamped by its last one (only that node writes its part, and
//! its stamps order its own versions, so a part joins by its stamp: a
//! PN-counter whose P and N are folded into one total, which also lets a
//! part go down). The value read is the *base* set by the last reset (a
//! SET, a DEL, any write that is not an increment) plus every part's growth
//! since that reset observed it:
//!
//! ```text
//!   value = base + sum(parts) - sum(observed)
//! ```
//!
//! so an increment made concurrently with a SET elsewhere survives it, one
//! the SET had seen does not (docs/MERGE.md, the rules table). Joining two
//! counters ([`Counter::join`]) is commutative, associative and idempotent:
//! the later reset wins (equal resets join their observed parts), parts join
//! by stamp. A node applies a peer's key state by joining it with its own
//! (`replication/active/link/`).
//!
//! Resets are recorded lazily: a counter describes the key at one version
//! ([`Counter::version`]); a write that is not an increment moves the key's
//! version on and leaves the counter as it was, and whoever reads the
//! counter next sees the versions differ and takes the write for a reset
//! that observed every part this node had ([`Counter::current`]). So the
//! commands that do not merge need no hook at all. Every change of the parts
//! goes through [`Counter::current`] first, which keeps that exact.
//!
//! **Float counters.** INCRBYFLOAT (and HINCRBYFLOAT on a field counter,
//! `elements.rs`) adds to its node's part too, into `Part::float`, a sum
//! kept apart from the integer `total` and computed as Redis computes
//! INCRBYFLOAT, in 80-bit long double (`keyspace/longdouble.rs`); a reset
//! to a float sets a `Base::Float`. Where a float part grew since the
//! reset (or the base is a float) the value is a float: the base, plus the
//! integer growth, plus each part's float growth in slot order, so every
//! node adds the same numbers in the same order and prints the same text.
//! The origin writes that printed sum as the key's value (not its own
//! `cur + incr`, which may differ in the last digit), so its value agrees
//! with its counter and never reads as a reset (DECISIONS 79).
//!
//! The counters live in a side map per shard (`Shard::merge`), allocated only
//! once a key becomes a counter under active replication; a deleted
//! counter's entry stays with its tombstone (its parts are what the DEL
//! observed) and both are collected together.

mod codec;
pub(crate) mod context;
pub(crate) mod deletes;
pub(crate) mod elements;
pub(crate) mod fact;
pub(crate) mod groups;
pub(crate) mod hll;
pub(crate) mod lists;
pub(crate) mod member_ttls;
pub(crate) mod reset;
pub(crate) mod state;
pub(crate) mod stream;
pub(crate) mod ttl;

use codec::{put_varint, Cursor};
pub(crate) use elements::Elements;
pub(crate) use lists::Lists;
pub(crate) use state::MergeType;

use crate::keyspace::longdouble::F80;
use crate::keyspace::Value;

/// A key's merge state: how it merges.
#[derive(Clone, Debug, PartialEq)]
pub enum Meta {
    Counter(Counter),
    /// Boxed, as are lists' and streams': a counter's (the commonest
    /// state, one per key INCR wrote) then costs its own size, not theirs
    /// (176 bytes a state before, 104 after).
    Elements(Box<Elements>),
    List(Box<Lists>),
    /// A HyperLogLog's (`hll.rs`).
    Hll(hll::Hll),
    /// A stream's (`stream.rs`).
    Stream(Box<stream::Stream>),
}

/// Whether a value merges by its parts (members, fields, elements) rather
/// than as a counter or a whole: sets, hashes, sorted sets and lists.
pub(crate) fn merges_by_parts(value: &Value) -> bool {
    elements::is_collection(value) || matches!(value, Value::List(_))
}

/// `$body` with `$s` bound to the state `$meta` holds, whatever its type
/// (each type's [`MergeType`] implementation): the one place the variants
/// are listed for an operation every type has.
macro_rules! each {
    ($meta:expr, $s:ident => $body:expr) => {
        match $meta {
            Meta::Counter($s) => $body,
            Meta::Elements(b) => {
                let $s = &**b;
                $body
            }
            Meta::List(b) => {
                let $s = &**b;
                $body
            }
            Meta::Hll($s) => $body,
            Meta::Stream(b) => {
                let $s = &**b;
                $body
            }
        }
    };
}

/// [`each!`] on a state to change.
macro_rules! each_mut {
    ($meta:expr, $s:ident => $body:expr) => {
        match $meta {
            Meta::Counter($s) => $body,
            Meta::Elements(b) => {
                let $s = &mut **b;
                $body
            }
            Meta::List(b) => {
                let $s = &mut **b;
                $body
            }
            Meta::Hll($s) => $body,
            Meta::Stream(b) => {
                let $s = &mut **b;
                $body
            }
        }
    };
}

/// `T`'s state brought up to the key at `version` holding `value`, from
/// `meta` where it holds one of `T` (`MergeType::current`).
fn current_as<T: MergeType>(meta: Option<&Meta>, version: u64, value: Option<&Value>) -> Meta {
    T::current(meta.and_then(T::of), version, value).wrap()
}

/// The first byte of a stored merge state that starts with the key's
/// answer note ([`Meta::encode_stored`]); no state's tag.
const ANSWERED_TAG: u8 = b'A';

fn decode_as<T: MergeType>(b: &[u8]) -> Result<Meta, String> {
    T::decode(b).map(T::wrap)
}

impl Meta {
    /// The key's version it describes.
    pub fn version(&self) -> u64 {
        each!(self, s => MergeType::version(s))
    }

    /// The newest stamp of each node whose writes it holds (a counter's
    /// parts and reset, a collection's causal context): a key written by a
    /// node whose version another node's write made since, as after merge
    /// facts (fact.rs), still holds that node's writes.
    pub fn stamps(&self) -> Vec<u64> {
        each!(self, s => MergeType::stamps(s))
    }

    /// Whether it holds a write stamped at or before `stamp`
    /// (`MergeType::holds_before`).
    pub fn holds_before(&self, stamp: u64) -> bool {
        each!(self, s => MergeType::holds_before(s, stamp))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        each!(self, s => MergeType::encode(s, out))
    }

    /// Its encoding as this node's files keep it: [`Self::encode`]'s,
    /// after the key's answer note where it has one (`Shard::answered`:
    /// local, so never in a state sent to a peer).
    pub fn encode_stored(&self, answered: Option<u64>, out: &mut Vec<u8>) {
        if let Some(stamp) = answered {
            out.push(ANSWERED_TAG);
            put_varint(out, stamp);
        }
        self.encode(out);
    }

    /// [`Self::encode_stored`]'s form: the state and the answer note.
    pub fn decode_stored(b: &[u8]) -> Result<(Meta, Option<u64>), String> {
        if b.first() != Some(&ANSWERED_TAG) {
            return Ok((Meta::decode(b)?, None));
        }
        let mut c = Cursor(&b[1..]);
        let stamp = c.varint()?;
        Ok((Meta::decode(c.0)?, Some(stamp)))
    }

    pub fn decode(b: &[u8]) -> Result<Meta, String> {
        match b.first() {
            Some(&Counter::TAG) => decode_as::<Counter>(b),
            Some(&Elements::TAG) => decode_as::<Elements>(b),
            Some(&Lists::TAG) => decode_as::<Lists>(b),
            Some(&hll::Hll::TAG) => decode_as::<hll::Hll>(b),
            Some(&stream::Stream::TAG) => decode_as::<stream::Stream>(b),
            _ => Err("unknown merge metadata".into()),
        }
    }

    /// As of the key's `version` and `value` (see each kind's `current`),
    /// of the kind the value has: elements for a set, hash or sorted set,
    /// a list's for a list, else a counter (an absent key keeps the kind
    /// it had). Which kind is this function's decision; bringing the
    /// state up is the kind's (`MergeType::current`).
    pub fn current(meta: Option<&Meta>, version: u64, value: Option<&Value>) -> Meta {
        // A HyperLogLog's: a sketch, or what replaced one (hll.rs).
        let sketch = match value {
            Some(v) => hll::is_sketch(v),
            None => false,
        };
        if sketch
            || matches!(
                (meta, value),
                (Some(Meta::Hll(_)), None | Some(Value::Str(_)))
            )
        {
            return current_as::<hll::Hll>(meta, version, value);
        }
        // Else the value's type, or for an absent key the state's.
        let was = |f: fn(&Meta) -> bool| meta.is_some_and(f);
        let is = |of_value: fn(&Value) -> bool, of_meta: fn(&Meta) -> bool| match value {
            Some(v) => of_value(v),
            None => was(of_meta),
        };
        // A stream's (stream.rs): a stream, or a deleted one.
        if is(
            |v| matches!(v, Value::Stream(_)),
            |m| matches!(m, Meta::Stream(_)),
        ) {
            return current_as::<stream::Stream>(meta, version, value);
        }
        if is(
            |v| matches!(v, Value::List(_)),
            |m| matches!(m, Meta::List(_)),
        ) {
            return current_as::<Lists>(meta, version, value);
        }
        if is(elements::is_collection, |m| matches!(m, Meta::Elements(_))) {
            current_as::<Elements>(meta, version, value)
        } else {
            current_as::<Counter>(meta, version, value)
        }
    }

    /// A collection's or list's TTL dots brought up to the key at
    /// `version`, present or not, expiring at `at` (`ttl.rs`); a counter's
    /// TTL follows its resets (docs/MERGE-DESIGN.md).
    pub fn refresh_ttl(&mut self, version: u64, present: bool, at: u64) {
        if let Some(ttl) = each_mut!(self, s => MergeType::ttl_mut(s)) {
            ttl.refresh(version, present, at);
        }
    }

    /// Whether its TTL dots disagree with a key present or not, expiring
    /// at `at` (never for a counter).
    pub fn ttl_differs(&self, present: bool, at: u64) -> bool {
        let Some(ttl) = each!(self, s => MergeType::ttl(s)) else {
            return false;
        };
        (!present && !ttl.is_empty()) || (present && ttl.at() != at)
    }

    pub fn describe(&self) -> Vec<String> {
        each!(self, s => MergeType::describe(s))
    }

    /// Its state of type `T`, if it holds one (`MergeType::of`).
    pub fn get<T: MergeType>(&self) -> Option<&T> {
        T::of(self)
    }

    pub fn get_mut<T: MergeType>(&mut self) -> Option<&mut T> {
        T::of_mut(self)
    }
}

/// A node's contribution to a counter: 32 bytes, so that each node that
/// increments a key costs it 32 bytes more (issue 24; DECISIONS 142).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The node's slot (the low bits of its stamps).
    pub slot: u64,
    /// The stamp of its last increment.
    pub stamp: u64,
    /// The sum of its increments ([`Part::total`]) and of its float
    /// increments ([`Part::float`]).
    amount: Amount,
}

const _: () = assert!(std::mem::size_of::<Part>() == 32);

/// A part's sums: the integer total (decrements subtract) and, apart from
/// it so that integer increments stay exact, the float increments
/// (INCRBYFLOAT, HINCRBYFLOAT) summed in Redis's long double (section
/// "Float counters" of the module comment). Inline where the total fits in
/// 64 bits and there is no float, or the float is all there is; boxed
/// otherwise (rare: a total past the i64 range, or both kinds of
/// increment). One pair of sums has one coding ([`Amount::of`]), so parts
/// compare by their sums.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Amount {
    Int(i64),
    /// A finite float, no integer total: `F80::Fin` with a 16-bit exponent
    /// (every sum long double arithmetic makes has one).
    Float {
        neg: bool,
        e: i16,
        m: u64,
    },
    Wide(Box<(i128, F80)>),
}

impl Amount {
    fn of(total: i128, float: F80) -> Amount {
        if float == F80::ZERO {
            if let Ok(t) = i64::try_from(total) {
                return Amount::Int(t);
            }
        }
        if let (0, F80::Fin { neg, m, e }) = (total, float) {
            if let Ok(e) = i16::try_from(e) {
                return Amount::Float { neg, e, m };
            }
        }
        Amount::Wide(Box::new((total, float)))
    }
}

impl Part {
    /// `slot`'s part with these sums, as of its write stamped `stamp`.
    pub fn new(slot: u64, total: i128, float: F80, stamp: u64) -> Part {
        Part {
            slot,
            stamp,
            amount: Amount::of(total, float),
        }
    }

    /// The sum of its integer increments (decrements subtract).
    pub fn total(&self) -> i128 {
        match &self.amount {
            Amount::Int(t) => i128::from(*t),
            Amount::Float { .. } => 0,
            Amount::Wide(w) => w.0,
        }
    }

    /// The sum of its float increments, in Redis's long double.
    pub fn float(&self) -> F80 {
        match &self.amount {
            Amount::Int(_) => F80::ZERO,
            &Amount::Float { neg, e, m } => F80::Fin {
                neg,
                m,
                e: i32::from(e),
            },
            Amount::Wide(w) => w.1,
        }
    }

    fn set_float(&mut self, float: F80) {
        self.amount = Amount::of(self.total(), float);
    }

    /// Adds one increment.
    fn add(&mut self, by: Incr) {
        if let (Amount::Int(t), Incr::Int(n)) = (&mut self.amount, by) {
            if let Some(sum) = i64::try_from(n).ok().and_then(|n| t.checked_add(n)) {
                *t = sum;
                return;
            }
        }
        let (total, float) = match by {
            Incr::Int(n) => (self.total() + n, self.float()),
            Incr::Float(f) => (self.total(), self.float().add(&f)),
        };
        self.amount = Amount::of(total, float);
    }
}

/// What the last reset set the key to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// Deleted (or never written): increments count from 0.
    Absent,
    Int(i128),
    /// A finite number that is not an integer ("1.5").
    Float(F80),
    /// A sorted-set score (a double, exactly): a counter's sum agrees with
    /// it where it rounds to it.
    Score(F80),
    /// Not a number (a string, a list...): increments not seen by the
    /// reset are not added to it; the key keeps the value it was reset to.
    Other,
}

impl Base {
    /// The base a key's current value gives when it is read as a reset.
    pub fn of(value: Option<&Value>) -> Base {
        match value {
            None => Base::Absent,
            Some(Value::Str(s)) => s
                .as_int()
                .map(i128::from)
                .map_or_else(|| s.with_bytes(Base::of_bytes), Base::Int),
            Some(_) => Base::Other,
        }
    }

    /// The base a string (or a hash field's value) gives: an integer as
    /// Redis's string2ll reads one, else a float written as INCRBYFLOAT
    /// prints one ("1.5", not "1.50" nor "15e-1": a merged sum is printed,
    /// and must read as the bytes the key holds everywhere).
    pub fn of_bytes(b: &[u8]) -> Base {
        match parse_i128(b) {
            Some(n) => Base::Int(n),
            None => match F80::parse(b).filter(F80::is_finite) {
                Some(f) if f.format_human().as_bytes() == b => Base::Float(f),
                _ => Base::Other,
            },
        }
    }
}

/// What one increment adds: INCRBY's integer or INCRBYFLOAT's float.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Incr {
    Int(i128),
    Float(F80),
}

/// The strict decimal form Redis's string2ll accepts, widened to i128 (a
/// merged counter can leave the i64 range, section "Overflow" of MERGE-DESIGN.md).
fn parse_i128(b: &[u8]) -> Option<i128> {
    // Most values: up to 18 digits, no leading zero, an optional minus
    // (never "-0"), read with no string made; the rest as below.
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    let short = (1..=18).contains(&digits.len()) && digits.iter().all(u8::is_ascii_digit);
    if short && (digits[0] != b'0' || (digits.len() == 1 && !neg)) {
        let n = digits
            .iter()
            .fold(0i128, |n, &d| n * 10 + i128::from(d - b'0'));
        return Some(if neg { -n } else { n });
    }
    let s = std::str::from_utf8(b).ok()?;
    let n: i128 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

/// What a counter reads as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merged {
    Absent,
    Int(i128),
    /// A float counter's sum (see "Float counters").
    Float(F80),
    /// The value the winning reset left (not a number).
    Other,
}

impl Merged {
    /// A number as a key's string holds it (INCR's or INCRBYFLOAT's text);
    /// None for what is no number.
    pub fn text(self) -> Option<String> {
        match self {
            Merged::Int(n) => Some(n.to_string()),
            Merged::Float(f) => Some(f.format_human()),
            Merged::Absent | Merged::Other => None,
        }
    }

    /// DEBUG MERGEINFO's spelling: `=n`, `=absent`, `=other`.
    pub fn describe(self) -> String {
        match self {
            Merged::Absent => "=absent".into(),
            Merged::Int(n) => format!("={n}"),
            Merged::Float(f) => format!("={}", f.format_human()),
            Merged::Other => "=other".into(),
        }
    }
}

/// A counter's merge state (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// The key's version this describes (its data's, or its tombstone's).
    pub version: u64,
    /// The stamp of the write that set `base`.
    pub reset: u64,
    base: Stored,
    /// The parts as the reset saw them, by slot.
    pub observed: Box<[Part]>,
    /// Every node's part, by slot (boxed slices, not Vecs, as `base` is
    /// stored apart: a counter's state is 72 bytes, not 96; DECISIONS 143).
    pub parts: Box<[Part]>,
}

const _: () = assert!(std::mem::size_of::<Counter>() == 72);
// A HyperLogLog's state (72 bytes, unboxed) leaves no room for the tag.
const _: () = assert!(std::mem::size_of::<Meta>() == 80);

/// A [`Base`] as a counter stores it: its integer in two halves, so that
/// the counter aligns to 8 bytes, not an i128's 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stored {
    Absent,
    Int(u64, u64),
    Float(F80),
    Score(F80),
    Other,
}

impl Stored {
    fn of(base: Base) -> Stored {
        match base {
            Base::Absent => Stored::Absent,
            Base::Int(n) => Stored::Int(n as u64, (n >> 64) as u64),
            Base::Float(f) => Stored::Float(f),
            Base::Score(f) => Stored::Score(f),
            Base::Other => Stored::Other,
        }
    }

    fn get(self) -> Base {
        match self {
            Stored::Absent => Base::Absent,
            Stored::Int(lo, hi) => Base::Int(((u128::from(hi) << 64) | u128::from(lo)) as i128),
            Stored::Float(f) => Base::Float(f),
            Stored::Score(f) => Base::Score(f),
            Stored::Other => Base::Other,
        }
    }
}

impl Counter {
    /// The counter of a key at `version` whose value gives `base`: `meta`
    /// if it describes that version, else a reset at `version` that
    /// observed every part of `meta` (see the module comment).
    pub fn current(meta: Option<&Counter>, version: u64, base: Base) -> Counter {
        match meta {
            Some(m) if m.is_at(version, base) => m.clone(),
            Some(m) => Counter {
                version,
                reset: version,
                base: Stored::of(base),
                observed: m.parts.clone(),
                parts: m.parts.clone(),
            },
            None => Counter {
                version,
                reset: version,
                base: Stored::of(base),
                observed: Box::default(),
                parts: Box::default(),
            },
        }
    }

    /// Whether this counter describes the key at `version` whose value
    /// gives `base` ([`Self::current`] keeps it as it is).
    pub fn is_at(&self, version: u64, base: Base) -> bool {
        self.value_at(version, base).is_some()
    }

    /// [`Self::value`] where [`Self::is_at`] holds (it reads the value to
    /// tell), None where it does not: one sum for both.
    pub fn value_at(&self, version: u64, base: Base) -> Option<Merged> {
        if self.version != version {
            return None;
        }
        let value = self.value();
        agrees(value, base).then_some(value)
    }
}

/// Whether a counter's value is still the key's, whose value gives `base`
/// (a write inside the same MULTI/EXEC shares the increment's stamp).
/// The key's value is the one a float counter computes where it prints the
/// same (the origin writes the sum's text, and a float read back from its
/// text prints as it did).
fn agrees(value: Merged, base: Base) -> bool {
    match (value, base) {
        (Merged::Int(n), Base::Int(v)) => n == v,
        (Merged::Float(x), Base::Float(y)) => x.format_human() == y.format_human(),
        (Merged::Float(x), Base::Score(y)) => x.to_f64() == y.to_f64(),
        (Merged::Float(x), Base::Int(v)) => x.format_human() == v.to_string(),
        (Merged::Absent, Base::Absent) | (Merged::Other, Base::Other) => true,
        _ => false,
    }
}

impl Counter {
    /// Adds `by` to `slot`'s part, as a write stamped `stamp`.
    pub fn add(&mut self, slot: u64, by: Incr, stamp: u64) {
        let i = match self.parts.binary_search_by_key(&slot, |p| p.slot) {
            Ok(i) => i,
            Err(i) => {
                let part = Part::new(slot, 0, F80::ZERO, stamp);
                // One part per node that wrote the key, so exactly (a
                // Vec's first push would reserve four).
                let mut parts = std::mem::take(&mut self.parts).into_vec();
                parts.reserve_exact(1);
                parts.insert(i, part);
                self.parts = parts.into_boxed_slice();
                i
            }
        };
        let p = &mut self.parts[i];
        p.add(by);
        p.stamp = stamp;
        self.version = stamp;
    }

    /// The parts' growth since the reset observed them: the integer sum,
    /// the float sum (in slot order, so the same everywhere) if any float
    /// part grew, and whether any part grew at all.
    fn growth(&self) -> (i128, Option<F80>, bool) {
        let (mut sum, mut float) = (0i128, None::<F80>);
        let mut grew = false;
        for p in &self.parts {
            let seen = self.observed.iter().find(|o| o.slot == p.slot);
            match seen {
                Some(o) if o.stamp >= p.stamp => {}
                _ => grew = true,
            }
            // Integer parts (nearly all) grow with no float at all.
            let int_growth = match (&p.amount, seen.map(|o| &o.amount)) {
                (Amount::Int(t), None) => Some(i128::from(*t)),
                (Amount::Int(t), Some(Amount::Int(o))) => Some(i128::from(*t) - i128::from(*o)),
                _ => None,
            };
            if let Some(n) = int_growth {
                sum += n;
                continue;
            }
            sum += p.total() - seen.map_or(0, Part::total);
            let (float_now, seen_float) = (p.float(), seen.map_or(F80::ZERO, Part::float));
            if float_now != seen_float {
                let by = float_now.add(&seen_float.neg());
                float = Some(float.unwrap_or(F80::ZERO).add(&by));
            }
        }
        (sum, float, grew)
    }

    /// The value the key has.
    pub fn value(&self) -> Merged {
        let (growth, float, grew) = self.growth();
        let as_float = |base: F80| {
            let sum = base.add(&F80::from_i128(growth));
            Merged::Float(sum.add(&float.unwrap_or(F80::ZERO)))
        };
        match self.base() {
            Base::Other => Merged::Other,
            Base::Float(b) | Base::Score(b) => as_float(b),
            Base::Int(b) if float.is_some() => as_float(F80::from_i128(b)),
            Base::Absent if float.is_some() => as_float(F80::ZERO),
            Base::Int(b) => Merged::Int(b + growth),
            Base::Absent if grew => Merged::Int(growth),
            Base::Absent => Merged::Absent,
        }
    }

    /// The join of two counters of one key (commutative, associative,
    /// idempotent): the later reset with its base, or for one reset seen
    /// by both the union of what each saw of it; parts by stamp.
    pub fn join(&self, other: &Counter) -> Counter {
        let (reset, base, observed) = if self.reset > other.reset {
            (self.reset, self.base, self.observed.clone())
        } else if other.reset > self.reset {
            (other.reset, other.base, other.observed.clone())
        } else {
            let base = if self.base == other.base {
                self.base
            } else {
                // One write read two ways cannot happen; a deterministic
                // pick all the same.
                Stored::of(self.base().max_by_rank(other.base()))
            };
            (
                self.reset,
                base,
                join_parts(&self.observed, &other.observed),
            )
        };
        Counter {
            version: self.version.max(other.version),
            reset,
            base,
            observed,
            parts: join_parts(&self.parts, &other.parts),
        }
    }

    /// A flush stamped `flushed` removed, on every node, each part written
    /// before it (a flush removes what is older than its stamp, not what
    /// its node had seen): such a part counts as observed by the reset
    /// whatever the reset's node knew of it. Without it, a node that took
    /// the part before the flush arrived brought it back under a later
    /// reset that had never seen it, while the flushing node, which had
    /// dropped it, did not (full seeds 34852, 65203; DECISIONS 262).
    pub fn forget_before(&mut self, flushed: u64) {
        let old = |p: &&Part| p.stamp < flushed;
        if !self.parts.iter().filter(old).any(|p| !self.saw(p)) {
            return;
        }
        let mut observed = self.observed.to_vec();
        for p in self.parts.iter().filter(old) {
            match observed.binary_search_by_key(&p.slot, |o| o.slot) {
                Ok(i) if observed[i].stamp >= p.stamp => {}
                Ok(i) => observed[i] = p.clone(),
                Err(i) => observed.insert(i, p.clone()),
            }
        }
        self.observed = observed.into_boxed_slice();
    }

    /// Whether the reset observed `part` as it is (or a later total of
    /// its node).
    fn saw(&self, part: &Part) -> bool {
        (self.observed.iter()).any(|o| o.slot == part.slot && o.stamp >= part.stamp)
    }

    /// Whether `self` and `other` are one state but for the version they
    /// describe (the reset, its base, and the parts seen and known).
    pub fn same_content(&self, other: &Counter) -> bool {
        (self.reset, self.base, &self.observed, &self.parts)
            == (other.reset, other.base, &other.observed, &other.parts)
    }

    /// What the last reset set the key to.
    pub fn base(&self) -> Base {
        self.base.get()
    }

    /// The value as a key's string, when it is an integer.
    #[cfg(test)]
    pub fn int_value(&self) -> Option<i128> {
        match self.value() {
            Merged::Int(n) => Some(n),
            _ => None,
        }
    }
}

impl Base {
    fn rank(self) -> (u8, i128, String) {
        match self {
            Base::Absent => (0, 0, String::new()),
            Base::Int(n) => (1, n, String::new()),
            Base::Float(f) => (2, 0, f.format_human()),
            Base::Score(f) => (3, 0, f.format_human()),
            Base::Other => (4, 0, String::new()),
        }
    }

    fn max_by_rank(self, other: Base) -> Base {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }
}

/// Parts by slot, each slot's newest (by stamp; equal stamps hold equal
/// totals, the larger is kept all the same so that the join is total).
fn join_parts(a: &[Part], b: &[Part]) -> Box<[Part]> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.slot == y.slot => {
                i += 1;
                j += 1;
                if (y.stamp, y.total(), codec::f80_key(y.float()))
                    > (x.stamp, x.total(), codec::f80_key(x.float()))
                {
                    y.clone()
                } else {
                    x.clone()
                }
            }
            (Some(x), Some(y)) if x.slot < y.slot => {
                i += 1;
                x.clone()
            }
            (Some(x), None) => {
                i += 1;
                x.clone()
            }
            (_, Some(y)) => {
                j += 1;
                y.clone()
            }
            (None, None) => unreachable!(),
        };
        out.push(next);
    }
    out.into_boxed_slice()
}

// ---- Encoding (key states on the stream, RDB aux) -------------------------

fn put_parts(out: &mut Vec<u8>, parts: &[Part]) {
    put_varint(out, parts.len() as u64);
    for p in parts {
        put_varint(out, p.slot);
        out.extend_from_slice(&p.total().to_le_bytes());
        put_varint(out, p.stamp);
    }
}

fn parts_of(c: &mut Cursor) -> Result<Box<[Part]>, String> {
    let n = c.count()?;
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let slot = c.varint()?;
        let total = c.i128_le()?;
        let stamp = c.varint()?;
        parts.push(Part::new(slot, total, F80::ZERO, stamp));
    }
    if parts.windows(2).any(|w| w[0].slot >= w[1].slot) {
        return Err("merge metadata parts out of order".into());
    }
    Ok(parts.into_boxed_slice())
}

impl Counter {
    /// `kind 'C' | version reset base observed parts`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(b'C');
        put_varint(out, self.version);
        put_varint(out, self.reset);
        match self.base() {
            Base::Absent => out.push(0),
            Base::Int(n) => {
                out.push(1);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Base::Other => out.push(2),
            Base::Float(f) => {
                out.push(3);
                codec::put_f80(out, f);
            }
            Base::Score(f) => {
                out.push(4);
                codec::put_f80(out, f);
            }
        }
        put_parts(out, &self.observed);
        put_parts(out, &self.parts);
        // Float parts, only where there are any: `'f'` and each list's
        // floats in its order (an integer counter's coding is unchanged).
        let floats = |ps: &[Part]| ps.iter().any(|p| p.float() != F80::ZERO);
        if floats(&self.observed) || floats(&self.parts) {
            out.push(b'f');
            for p in self.observed.iter().chain(&self.parts) {
                codec::put_f80(out, p.float());
            }
        }
    }

    pub fn decode(b: &[u8]) -> Result<Counter, String> {
        let mut c = Cursor(b);
        if c.byte()? != b'C' {
            return Err("unknown merge metadata".into());
        }
        let version = c.varint()?;
        let reset = c.varint()?;
        let base = match c.byte()? {
            0 => Base::Absent,
            1 => Base::Int(c.i128_le()?),
            2 => Base::Other,
            3 => Base::Float(c.f80()?),
            4 => Base::Score(c.f80()?),
            _ => return Err("bad base in merge metadata".into()),
        };
        let mut observed = parts_of(&mut c)?;
        let mut parts = parts_of(&mut c)?;
        if c.end().is_err() {
            if c.byte()? != b'f' {
                return Err("bad merge metadata trailer".into());
            }
            for p in observed.iter_mut().chain(parts.iter_mut()) {
                p.set_float(c.f80()?);
            }
        }
        c.end()?;
        Ok(Counter {
            version,
            reset,
            base: Stored::of(base),
            observed,
            parts,
        })
    }

    /// DEBUG MERGEINFO's lines.
    pub fn describe(&self) -> Vec<String> {
        let node = crate::keyspace::hlc::stamp_node;
        let parts = |ps: &[Part]| {
            ps.iter()
                .map(|p| match p.float() {
                    F80::ZERO => format!("{}:{}@{}", p.slot, p.total(), p.stamp),
                    f => format!("{}:{}+{}@{}", p.slot, p.total(), f.format_human(), p.stamp),
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        let base = match self.base() {
            Base::Absent => "absent".to_string(),
            Base::Int(n) => n.to_string(),
            Base::Float(f) => f.format_human(),
            Base::Score(f) => format!("score {}", f.to_f64()),
            Base::Other => "other".to_string(),
        };
        vec![
            "type:counter".to_string(),
            format!("version:{}", self.version),
            format!("reset:{} reset_slot:{}", self.reset, node(self.reset)),
            format!("base:{base}"),
            format!("observed:{}", parts(&self.observed)),
            format!("parts:{}", parts(&self.parts)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(version: u64, base: Base) -> Counter {
        Counter::current(None, version, base)
    }

    /// A stored state reads back with its answer note, or none; a state
    /// sent to a peer (`encode`) never reads as one that has a note.
    #[test]
    fn a_stored_state_keeps_its_answer_note() {
        let meta = at(7, Base::Int(3)).wrap();
        for note in [None, Some(0), Some(u64::MAX)] {
            let mut out = Vec::new();
            meta.encode_stored(note, &mut out);
            assert_eq!(Meta::decode_stored(&out), Ok((meta.clone(), note)));
        }
        let mut out = Vec::new();
        meta.encode(&mut out);
        assert_eq!(Meta::decode_stored(&out), Ok((meta.clone(), None)));
        assert!(Meta::decode(&[ANSWERED_TAG, 1, b'C']).is_err());
        assert!(Meta::decode_stored(&[ANSWERED_TAG]).is_err());
    }

    /// The integer reading's short path reads what the string round trip
    /// (its only form before) reads: every string of a few characters
    /// from digits and signs, and the powers of ten around each length.
    #[test]
    fn an_integer_reads_as_by_its_string_round_trip() {
        let slow = |b: &[u8]| {
            let s = std::str::from_utf8(b).ok()?;
            let n: i128 = s.parse().ok()?;
            (n.to_string() == s).then_some(n)
        };
        let alphabet = b"-+019a ";
        let mut cases: Vec<Vec<u8>> = vec![Vec::new()];
        for len in 1..=4 {
            let mut next = Vec::new();
            for c in cases.iter().filter(|c| c.len() == len - 1) {
                next.extend(alphabet.iter().map(|&a| [&c[..], &[a]].concat()));
            }
            cases.extend(next);
        }
        for k in 0..39 {
            let p = 10i128.pow(k);
            for n in [p - 1, p, p + 1, -p + 1, -p, -p - 1] {
                cases.push(n.to_string().into_bytes());
                cases.push(format!("0{n}").into_bytes());
            }
        }
        cases.push(i128::MAX.to_string().into_bytes());
        cases.push(i128::MIN.to_string().into_bytes());
        cases.push("٣".as_bytes().to_vec());
        for c in &cases {
            assert_eq!(parse_i128(c), slow(c), "{:?}", String::from_utf8_lossy(c));
        }
    }

    /// The seed's case: 1, then one INCR on a node and three on another.
    #[test]
    fn concurrent_increments_add_up() {
        let mut a = at(10, Base::Int(1));
        let mut b = a.clone();
        a.add(1, Incr::Int(1), 21);
        for s in [22, 32, 42] {
            b.add(2, Incr::Int(1), s);
        }
        let (ab, ba) = (a.join(&b), b.join(&a));
        assert_eq!(ab, ba);
        assert_eq!(ab.value(), Merged::Int(5));
        assert_eq!(ab.join(&a), ab, "idempotent");
    }

    /// k=10; A: SET k 0 (a reset that saw nothing of B), B: INCR -> 1.
    #[test]
    fn an_increment_concurrent_with_a_reset_survives_it() {
        let start = at(10, Base::Int(10));
        let a = Counter::current(Some(&start), 30, Base::Int(0));
        let mut b = start.clone();
        b.add(2, Incr::Int(1), 21);
        assert_eq!(a.join(&b).value(), Merged::Int(1));
        assert_eq!(b.join(&a).value(), Merged::Int(1));
        // One the reset had seen does not.
        let seen = Counter::current(Some(&b), 40, Base::Int(0));
        assert_eq!(seen.join(&b).value(), Merged::Int(0));
    }

    /// A DEL that saw every increment keeps the key deleted; a concurrent
    /// increment brings it back with only its own growth.
    #[test]
    fn a_delete_removes_what_it_saw() {
        let mut c = at(10, Base::Absent);
        c.add(1, Incr::Int(5), 11);
        let del = Counter::current(Some(&c), 20, Base::Absent);
        assert_eq!(del.value(), Merged::Absent);
        let mut other = c.clone();
        other.add(2, Incr::Int(2), 15);
        assert_eq!(del.join(&other).value(), Merged::Int(2));
    }

    /// A part stamped before a flush counts as observed by a later reset
    /// that had not seen it (the flushing node dropped it); a part written
    /// after the flush still counts; idempotent (DECISIONS 262).
    #[test]
    fn a_part_older_than_a_flush_is_forgotten() {
        let mut c = at(10, Base::Absent);
        c.add(1, Incr::Int(-3), 12); // written before the flush at 20
        c.add(2, Incr::Int(9), 11);
        let mut reset = Counter::current(None, 30, Base::Int(99));
        reset.add(2, Incr::Int(9), 11);
        reset.observed = reset.parts.clone(); // the reset saw node 2's part only
        let mut joined = c.join(&reset);
        assert_eq!(joined.value(), Merged::Int(96));
        joined.forget_before(20);
        assert_eq!(joined.value(), Merged::Int(99));
        let once = joined.clone();
        joined.forget_before(20);
        assert_eq!(joined, once);
        joined.add(1, Incr::Int(1), 40); // after the flush: its growth counts
        joined.forget_before(20);
        assert_eq!(joined.value(), Merged::Int(100));
    }

    fn f(s: &str) -> F80 {
        F80::parse(s.as_bytes()).unwrap()
    }

    /// k=10.5; A: INCRBYFLOAT 0.1, B: INCRBYFLOAT 0.2 and INCRBY 1 -> 11.8
    /// both ways; A's SET 2.5 then keeps B's growth: 3.7 + A's nothing.
    #[test]
    fn float_increments_add_up_and_print_as_redis() {
        let start = at(10, Base::Float(f("10.5")));
        let (mut a, mut b) = (start.clone(), start.clone());
        a.add(1, Incr::Float(f("0.1")), 21);
        b.add(2, Incr::Float(f("0.2")), 22);
        b.add(2, Incr::Int(1), 23);
        let (ab, ba) = (a.join(&b), b.join(&a));
        assert_eq!(ab, ba);
        assert_eq!(number(ab.value()), "11.8");
        let reset = Counter::current(Some(&a), 30, Base::Float(f("2.5")));
        assert_eq!(number(reset.join(&b).value()), "3.7");
        // An integer counter stays one until a float grows it.
        let mut c = at(10, Base::Int(1));
        c.add(1, Incr::Int(2), 11);
        assert_eq!(c.value(), Merged::Int(3));
        c.add(1, Incr::Float(f("0.5")), 12);
        assert_eq!(number(c.value()), "3.5");
        // The key's text agrees with the sum: no reset is read there.
        let text = number(c.value());
        assert!(agrees(c.value(), Base::of_bytes(text.as_bytes())));
    }

    fn number(v: Merged) -> String {
        match v {
            Merged::Float(x) => x.format_human(),
            Merged::Int(n) => n.to_string(),
            other => panic!("not a number: {other:?}"),
        }
    }

    #[test]
    fn encoding_round_trips() {
        let mut c = at(10, Base::Int(-3));
        c.add(7, Incr::Int(i128::from(i64::MAX) * 4), 11);
        c = Counter::current(Some(&c), 12, Base::Other);
        c.add(3, Incr::Int(-2), 13);
        let mut out = Vec::new();
        c.encode(&mut out);
        assert_eq!(Counter::decode(&out).unwrap(), c);
        assert!(Counter::decode(&out[..out.len() - 1]).is_err());
        // With float parts and a float base.
        c.add(3, Incr::Float(F80::parse(b"-0.25").unwrap()), 14);
        c = Counter::current(Some(&c), 15, Base::Float(F80::parse(b"1000.5").unwrap()));
        let mut out = Vec::new();
        c.encode(&mut out);
        assert_eq!(Counter::decode(&out).unwrap(), c);
        assert!(Counter::decode(&out[..out.len() - 1]).is_err());
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// States the previous version (48-byte parts, 029e581) encoded decode
    /// to the same counters and encode back to the same bytes: a part past
    /// the i64 range, one with an integer and a float sum, one with a float
    /// alone, a reset that observed parts; and one writer from absent.
    #[test]
    fn states_the_previous_version_encoded_decode() {
        let old = "43100d020202fbffffffffffffffffffffffffffffff0c07fcffffffffffffff01000000\
                   000000000b0302ffffffffffffffffffffffffffffffff1003000000000000000000000000\
                   000000000e07fcffffffffffffff01000000000000000b66000000000000000000000000000\
                   00000000000000000000000000000000000000000000000c0c1ffffff0001000000000000\
                   0080bfffffff0000000000000000000000000000";
        let old = old.split_whitespace().collect::<String>();
        let c = Counter::decode(&hex(&old)).unwrap();
        assert_eq!(
            c.describe(),
            [
                "type:counter",
                "version:16",
                "reset:13 reset_slot:13",
                "base:other",
                "observed:2:-5@12,7:36893488147419103228@11",
                "parts:2:-1+1.5@16,3:0+-0.25@14,7:36893488147419103228@11"
            ]
        );
        let mut out = Vec::new();
        c.encode(&mut out);
        assert_eq!(out, hex(&old));
        let one = hex("431514000001010300000000000000000000000000000015");
        let d = Counter::decode(&one).unwrap();
        assert_eq!(d.value(), Merged::Int(3));
        assert_eq!(*d.parts, [Part::new(1, 3, F80::ZERO, 21)]);
        let mut out = Vec::new();
        d.encode(&mut out);
        assert_eq!(out, one);
    }

    /// A part keeps its sums exactly whichever coding holds them, and one
    /// pair of sums has one coding (parts compare by their sums).
    #[test]
    fn parts_hold_their_sums_exactly_in_any_coding() {
        let mut p = Part::new(1, 0, F80::ZERO, 1);
        p.add(Incr::Int(i128::from(i64::MAX)));
        p.add(Incr::Int(2));
        assert_eq!(p.total(), i128::from(i64::MAX) + 2);
        assert!(matches!(p.amount, Amount::Wide(_)));
        p.add(Incr::Int(-3));
        assert_eq!(p, Part::new(1, i128::from(i64::MAX) - 1, F80::ZERO, 1));
        assert!(matches!(p.amount, Amount::Int(_)));
        p.add(Incr::Float(f("0.5")));
        assert_eq!((p.total(), p.float()), (i128::from(i64::MAX) - 1, f("0.5")));
        let mut q = Part::new(2, 0, F80::ZERO, 1);
        q.add(Incr::Float(f("-0.25")));
        assert!(matches!(q.amount, Amount::Float { .. }));
        assert_eq!((q.total(), q.float()), (0, f("-0.25")));
        q.add(Incr::Int(1));
        assert_eq!(q, Part::new(2, 1, f("-0.25"), 1));
        // Floats no long double sum makes (a decoded exponent past 16 bits).
        for odd in [
            F80::Inf(true),
            F80::NaN,
            F80::Fin {
                neg: false,
                m: 1,
                e: 40000,
            },
        ] {
            assert_eq!(Part::new(3, 0, odd, 1).float(), odd);
        }
    }

    #[test]
    fn a_stored_base_is_the_base() {
        let ints = [0, 1, -1, -3, i128::from(i64::MIN) - 1, i128::MAX, i128::MIN];
        let bases = ints.map(Base::Int).into_iter().chain([
            Base::Absent,
            Base::Other,
            Base::Float(f("-2.5")),
            Base::Score(f("0.125")),
        ]);
        for b in bases {
            assert_eq!(Stored::of(b).get(), b);
            assert_eq!(at(1, b).base(), b);
        }
    }

    #[test]
    fn base_reads_strict_integers_only() {
        let s = |b: &[u8]| Value::Str(crate::keyspace::StrValue::from_bytes(b));
        assert_eq!(Base::of(Some(&s(b"42"))), Base::Int(42));
        assert_eq!(Base::of(Some(&s(b"042"))), Base::Other);
        assert_eq!(
            Base::of(Some(&s(b"99999999999999999999"))),
            Base::Int(99999999999999999999)
        );
        assert_eq!(Base::of(None), Base::Absent);
        // Floats as INCRBYFLOAT prints them, only.
        assert!(matches!(Base::of(Some(&s(b"1.5"))), Base::Float(_)));
        for other in [&b"1.50"[..], b"15e-1", b"inf", b"1.5\0", b" 1.5", b"x"] {
            assert_eq!(Base::of(Some(&s(other))), Base::Other);
        }
    }
}
