//! Hash values (Redis's t_hash.c objects): issue 3.
//!
//! Placeholder representation until the hashes family lands: the public API
//! below (`len`, `iter`, `encoding`, `mem_usage`) is what the rest of the
//! server relies on; the family may change the representation behind it.

type Pair = (Box<[u8]>, Box<[u8]>);

#[derive(Clone, Debug, PartialEq, Default)]
pub struct HashValue {
    pairs: Vec<Pair>,
}

impl HashValue {
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// (field, value) pairs, in the encoding's order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.pairs.iter().map(|(f, v)| (&f[..], &v[..]))
    }

    /// OBJECT ENCODING: "listpack" or "hashtable".
    pub fn encoding(&self) -> &'static str {
        "listpack"
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        self.pairs.iter().map(|(f, v)| f.len() + v.len() + 32).sum()
    }
}
