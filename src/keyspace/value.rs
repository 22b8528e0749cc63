//! Values stored in the keyspace.
//!
//! Strings keep Redis's three encodings so that OBJECT ENCODING answers as
//! Redis does: `int` (a canonical decimal that fits an i64), `embstr` (a string
//! of at most 44 bytes written whole by SET and never modified in place) and
//! `raw` (anything else, or any string modified in place by APPEND, SETRANGE,
//! SETBIT...). Collection types arrive with their command families.

use crate::protocol::parse_i64;

/// Redis's OBJ_ENCODING_EMBSTR_SIZE_LIMIT.
pub const EMBSTR_LIMIT: usize = 44;
/// Largest string value (proto-max-bulk-len default; Redis's 512 MB).
pub const MAX_STRING: usize = 512 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(StrValue),
}

#[derive(Clone, Debug, PartialEq)]
pub enum StrValue {
    Int(i64),
    /// `raw == false` means embstr (if short enough).
    Bytes {
        data: Vec<u8>,
        raw: bool,
    },
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
        }
    }

    /// The OBJECT ENCODING name.
    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Str(StrValue::Int(_)) => "int",
            Value::Str(StrValue::Bytes { data, raw }) => {
                if !raw && data.len() <= EMBSTR_LIMIT {
                    "embstr"
                } else {
                    "raw"
                }
            }
        }
    }

    /// Approximate bytes used, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        match self {
            Value::Str(StrValue::Int(_)) => 16,
            Value::Str(StrValue::Bytes { data, .. }) => 16 + data.capacity(),
        }
    }
}

impl StrValue {
    pub fn from_bytes(data: &[u8]) -> StrValue {
        if data.len() <= 20 {
            if let Some(n) = parse_i64(data) {
                return StrValue::Int(n);
            }
        }
        StrValue::Bytes {
            data: data.to_vec(),
            raw: data.len() > EMBSTR_LIMIT,
        }
    }

    pub fn from_int(n: i64) -> StrValue {
        StrValue::Int(n)
    }

    pub fn len(&self) -> usize {
        match self {
            StrValue::Int(n) => {
                let mut b = [0u8; 20];
                crate::protocol::fmt_i64_pub(&mut b, *n).len()
            }
            StrValue::Bytes { data, .. } => data.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with the string's bytes (formatting an int on the stack).
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            StrValue::Int(n) => {
                let mut b = [0u8; 20];
                f(crate::protocol::fmt_i64_pub(&mut b, *n))
            }
            StrValue::Bytes { data, .. } => f(data),
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.with_bytes(|b| b.to_vec())
    }

    /// Mutable bytes for in-place edits: converts to the raw encoding.
    pub fn make_raw(&mut self) -> &mut Vec<u8> {
        if let StrValue::Int(_) = self {
            *self = StrValue::Bytes {
                data: self.to_vec(),
                raw: true,
            };
        }
        match self {
            StrValue::Bytes { data, raw } => {
                *raw = true;
                data
            }
            StrValue::Int(_) => unreachable!("converted above"),
        }
    }
}
