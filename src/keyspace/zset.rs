//! Sorted-set values (Redis's t_zset.c objects): issue 3.
//!
//! Placeholder representation until the sorted-sets family lands: the public
//! API below (`len`, `iter`, `encoding`, `mem_usage`) is what the rest of the
//! server relies on; the family may change the representation behind it.

#[derive(Clone, Debug, PartialEq, Default)]
pub struct ZSetValue {
    members: Vec<(Box<[u8]>, f64)>,
}

impl ZSetValue {
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// (member, score) in rank order (score, then member bytes).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], f64)> + '_ {
        self.members.iter().map(|(m, s)| (&m[..], *s))
    }

    /// OBJECT ENCODING: "listpack" or "skiplist".
    pub fn encoding(&self) -> &'static str {
        "listpack"
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        self.members.iter().map(|(m, _)| m.len() + 24).sum()
    }
}
