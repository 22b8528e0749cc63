//! List values (Redis's t_list.c objects): issue 3.
//!
//! Placeholder representation until the lists family lands: the public API
//! below (`len`, `iter`, `encoding`, `mem_usage`) is what the rest of the
//! server (TYPE, OBJECT ENCODING, MEMORY USAGE, DEBUG DIGEST, COPY) relies
//! on; the family may change the representation behind it.

use std::collections::VecDeque;

#[derive(Clone, Debug, PartialEq, Default)]
pub struct ListValue {
    items: VecDeque<Box<[u8]>>,
}

impl ListValue {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Elements from head to tail.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.items.iter().map(|b| &b[..])
    }

    /// OBJECT ENCODING: "listpack" or "quicklist".
    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        self.items.iter().map(|b| b.len() + 16).sum()
    }
}
