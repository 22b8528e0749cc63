//! INFO's fields as data. Each subsystem returns the fields of its part of
//! a section as [`Fields`]: `(name, value)` pairs in output order, values
//! typed. One formatter (`server/info.rs`) writes every section's text from
//! them: the `# Name` header, one `name:value` line a field, Redis's number
//! formats, and the `k=v,k=v` values of the slaveN, dbN and cmdstat_ lines
//! (a [`Value::List`]). So no subsystem writes INFO's text, and a field's
//! layout is decided in one place.

use std::borrow::Cow;

/// A field's name: most are literals, a numbered one (`slave0`, `db3`,
/// `cmdstat_get`) is built.
pub(crate) type Name = Cow<'static, str>;

/// A field's value, written as Redis writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Uint(u64),
    /// Fixed decimals, as C's `%.Nf` (`used_cpu_sys:0.012000`).
    Float(f64, usize),
    /// Two decimals and a `%` (`used_memory_peak_perc:12.50%`).
    Percent(f64),
    Str(Cow<'static, str>),
    /// `k=v,k=v` (`slave0:ip=..,port=..`); its values are not lists.
    List(Fields),
}

impl Value {
    /// `v` with `decimals` decimals.
    pub fn float(v: f64, decimals: usize) -> Value {
        Value::Float(v, decimals)
    }

    /// `v` as a percentage with two decimals.
    pub fn percent(v: f64) -> Value {
        Value::Percent(v)
    }
}

/// The fields of (part of) one section, in output order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fields(Vec<(Name, Value)>);

impl Fields {
    pub fn new() -> Fields {
        Fields(Vec::new())
    }

    /// Appends a field.
    pub fn add(&mut self, name: impl Into<Name>, value: impl Into<Value>) -> &mut Fields {
        self.0.push((name.into(), value.into()));
        self
    }

    /// Appends every field of `more`.
    pub fn append(&mut self, more: Fields) -> &mut Fields {
        self.0.extend(more.0);
        self
    }

    pub fn iter(&self) -> impl Iterator<Item = &(Name, Value)> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

macro_rules! from_int {
    ($variant:ident as $t:ty: $($from:ty),*) => {
        $(impl From<$from> for Value {
            fn from(v: $from) -> Value {
                Value::$variant(v as $t)
            }
        })*
    };
}
from_int!(Int as i64: i64, i32);
from_int!(Uint as u64: u64, u32, u16, u8, usize);

/// A flag is written 0 or 1, as Redis writes it.
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Uint(v as u64)
    }
}

impl From<&'static str> for Value {
    fn from(v: &'static str) -> Value {
        Value::Str(Cow::Borrowed(v))
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Str(Cow::Owned(v))
    }
}

impl From<Fields> for Value {
    fn from(v: Fields) -> Value {
        Value::List(v)
    }
}
