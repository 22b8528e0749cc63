//! Set values (Redis's t_set.c objects): issue 3.
//!
//! Placeholder representation until the sets family lands: the public API
//! below (`len`, `iter`, `encoding`, `mem_usage`) is what the rest of the
//! server relies on; the family may change the representation behind it.

#[derive(Clone, Debug, PartialEq, Default)]
pub struct SetValue {
    members: Vec<Box<[u8]>>,
}

impl SetValue {
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Members, in the encoding's order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.members.iter().map(|m| &m[..])
    }

    /// OBJECT ENCODING: "intset", "listpack" or "hashtable".
    pub fn encoding(&self) -> &'static str {
        "listpack"
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        self.members.iter().map(|m| m.len() + 16).sum()
    }
}
