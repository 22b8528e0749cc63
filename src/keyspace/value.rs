//! Values stored in the keyspace.
//!
//! Strings keep Redis's three encodings so that OBJECT ENCODING answers as
//! Redis does: `int` (a canonical decimal that fits an i64), `embstr` (a string
//! of at most 44 bytes written whole by SET and never modified in place) and
//! `raw` (anything else, or any string modified in place by APPEND, SETRANGE,
//! SETBIT...). Collections live in their own modules (`list.rs`, `hash.rs`,
//! `set.rs`, `zset.rs`), boxed so that a [`Value`] stays 24 bytes: the box
//! takes the niche left in [`StrValue`]'s tag, and a string key pays nothing
//! for the collection variants.
//!
//! Memory layout: a [`StrValue`] is 24 bytes. Strings written whole of up to
//! [`STR_INLINE`] bytes live inside it (no allocation, no extra cache miss on
//! GET); longer ones are one boxed slice; strings edited in place are a boxed
//! `Vec` (the extra indirection buys amortized growth for APPEND/SETRANGE
//! without widening every value by the `Vec`'s capacity word). See
//! docs/PERFORMANCE.md for the measurements.

use super::hash::HashValue;
use super::list::ListValue;
use super::set::SetValue;
use super::stream::StreamValue;
use super::zset::ZSetValue;
use crate::protocol::parse_i64;

/// Redis's OBJ_ENCODING_EMBSTR_SIZE_LIMIT.
pub(crate) const EMBSTR_LIMIT: usize = 44;
/// Longest string stored inside a [`StrValue`].
pub(crate) const STR_INLINE: usize = 22;

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(StrValue),
    List(Box<ListValue>),
    Hash(Box<HashValue>),
    Set(Box<SetValue>),
    ZSet(Box<ZSetValue>),
    Stream(Box<StreamValue>),
    /// A KEYDB.CRON job (`cron.rs`).
    Cron(Box<super::cron::CronJob>),
}

/// A string value. Build it with [`StrValue::from_bytes`] (SET's choice of
/// encoding), [`StrValue::from_int`], [`StrValue::embedded`] (never int) or
/// [`StrValue::raw`]; read it with [`StrValue::with_bytes`].
#[derive(Clone, PartialEq)]
pub enum StrValue {
    Int(i64),
    /// Written whole, up to [`STR_INLINE`] bytes: embstr.
    Inline {
        len: u8,
        buf: [u8; STR_INLINE],
    },
    /// Written whole, longer: embstr up to [`EMBSTR_LIMIT`] bytes, raw above.
    Boxed(Box<[u8]>),
    /// Modified in place (or created for that): always raw.
    // Boxed: a bare Vec would make StrValue 32 bytes, not 24 (the size test below).
    #[allow(clippy::box_collection)]
    Raw(Box<Vec<u8>>),
}

impl std::fmt::Debug for StrValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StrValue::Int(n) => write!(f, "Int({n})"),
            StrValue::Raw(v) => write!(f, "Raw({:?})", String::from_utf8_lossy(v)),
            _ => self.with_bytes(|b| write!(f, "Str({:?})", String::from_utf8_lossy(b))),
        }
    }
}

impl Value {
    /// Builds a string value with the encoding SET would choose.
    pub fn string(data: &[u8]) -> Value {
        Value::Str(StrValue::from_bytes(data))
    }

    /// The TYPE name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
            // KeyDB's TYPE of a job (getObjectTypeName's default).
            Value::Cron(_) => "unknown",
        }
    }

    /// The OBJECT ENCODING name.
    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Str(StrValue::Int(_)) => "int",
            Value::Str(StrValue::Inline { .. }) => "embstr",
            Value::Str(StrValue::Boxed(b)) if b.len() <= EMBSTR_LIMIT => "embstr",
            Value::Str(_) => "raw",
            Value::List(l) => l.encoding(),
            Value::Hash(h) => h.encoding(),
            Value::Set(s) => s.encoding(),
            Value::ZSet(z) => z.encoding(),
            Value::Stream(_) => "stream",
            Value::Cron(_) => "raw",
        }
    }

    /// Approximate bytes used beyond the entry, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        match self {
            Value::Str(StrValue::Int(_) | StrValue::Inline { .. }) => 0,
            Value::Str(StrValue::Boxed(b)) => b.len(),
            Value::Str(StrValue::Raw(v)) => 24 + v.capacity(),
            Value::List(l) => l.mem_usage(),
            Value::Hash(h) => h.mem_usage(),
            Value::Set(s) => s.mem_usage(),
            Value::ZSet(z) => z.mem_usage(),
            Value::Stream(x) => x.mem_usage(),
            Value::Cron(j) => j.mem_usage(),
        }
    }

    /// Allocations to release when the value is dropped (Redis's
    /// lazyfreeGetFreeEffort): one for strings and compact encodings,
    /// the chunks of a list, the elements of a hash table or tree.
    pub fn free_effort(&self) -> usize {
        match self {
            Value::Str(_) | Value::Cron(_) => 1,
            Value::List(l) => l.chunk_count(),
            Value::Hash(h) if h.encoding() == "listpack" => 1,
            Value::Hash(h) => h.len(),
            Value::Set(s) if s.encoding() == "hashtable" => s.len(),
            Value::Set(_) => 1,
            Value::ZSet(z) if z.is_compact() => 1,
            Value::ZSet(z) => z.len(),
            // lazyfreeGetFreeEffort: a node per listpack (plus the rax's
            // root), a group and its PEL each, the first group's PEL size
            // standing for all.
            Value::Stream(x) => {
                let pel = x.groups.values().next().map_or(0, |g| g.pel.len());
                x.node_count() + 1 + x.groups.len() * (1 + pel)
            }
        }
    }

    /// Whether the value is a collection with no elements left: Redis
    /// deletes such keys, so a command that empties one removes the key.
    pub fn is_empty_collection(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::List(l) => l.is_empty(),
            Value::Hash(h) => h.is_empty(),
            Value::Set(s) => s.is_empty(),
            Value::ZSet(z) => z.is_empty(),
            // An empty stream stays (its last ID matters).
            Value::Stream(_) | Value::Cron(_) => false,
        }
    }
}

impl StrValue {
    /// The encoding SET chooses: int when canonical, else embedded.
    pub fn from_bytes(data: &[u8]) -> StrValue {
        if data.len() <= 20 {
            if let Some(n) = parse_i64(data) {
                return StrValue::Int(n);
            }
        }
        StrValue::embedded(data)
    }

    /// A string written whole, never int-encoded (as Redis's
    /// createStringObject: INCRBYFLOAT's result).
    pub fn embedded(data: &[u8]) -> StrValue {
        if data.len() <= STR_INLINE {
            let mut buf = [0u8; STR_INLINE];
            buf[..data.len()].copy_from_slice(data);
            StrValue::Inline {
                len: data.len() as u8,
                buf,
            }
        } else {
            StrValue::Boxed(data.into())
        }
    }

    /// A raw-encoded string owning `data` (for strings built to be edited).
    pub fn raw(data: Vec<u8>) -> StrValue {
        StrValue::Raw(Box::new(data))
    }

    pub fn from_int(n: i64) -> StrValue {
        StrValue::Int(n)
    }

    /// The integer, if int-encoded.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            StrValue::Int(n) => Some(*n),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            StrValue::Int(n) => {
                let mut b = [0u8; 20];
                crate::protocol::fmt_i64_pub(&mut b, *n).len()
            }
            StrValue::Inline { len, .. } => *len as usize,
            StrValue::Boxed(b) => b.len(),
            StrValue::Raw(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with the string's bytes (formatting an int on the stack).
    #[inline]
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            StrValue::Int(n) => {
                let mut b = [0u8; 20];
                f(crate::protocol::fmt_i64_pub(&mut b, *n))
            }
            StrValue::Inline { len, buf } => f(&buf[..*len as usize]),
            StrValue::Boxed(b) => f(b),
            StrValue::Raw(v) => f(v),
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.with_bytes(|b| b.to_vec())
    }

    /// Mutable bytes for in-place edits: converts to the raw encoding.
    pub fn make_raw(&mut self) -> &mut Vec<u8> {
        if !matches!(self, StrValue::Raw(_)) {
            *self = StrValue::raw(self.to_vec());
        }
        match self {
            StrValue::Raw(v) => v,
            _ => unreachable!("converted above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_encodings() {
        assert_eq!(std::mem::size_of::<StrValue>(), 24);
        assert_eq!(std::mem::size_of::<Value>(), 24);
        let enc = |v: StrValue| Value::Str(v).encoding();
        assert_eq!(enc(StrValue::from_bytes(b"12")), "int");
        assert_eq!(enc(StrValue::from_bytes(b"012")), "embstr");
        for len in [0, 1, STR_INLINE, STR_INLINE + 1, EMBSTR_LIMIT] {
            let data = vec![b'x'; len];
            let v = StrValue::from_bytes(&data);
            assert_eq!(enc(v.clone()), "embstr");
            assert_eq!(v.to_vec(), data);
            assert_eq!(v.len(), len);
        }
        let big = vec![b'y'; EMBSTR_LIMIT + 1];
        assert_eq!(enc(StrValue::from_bytes(&big)), "raw");
        let mut v = StrValue::from_int(-5);
        v.make_raw().push(b'!');
        assert_eq!(v.to_vec(), b"-5!");
        assert_eq!(enc(v), "raw");
    }
}
