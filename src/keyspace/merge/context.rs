//! What the per-element merges share (`elements.rs`, `lists.rs`): a key's
//! causal context, the newest stamp seen per node slot, which tells a dot
//! (or element id) the other side removed from one it has not seen yet;
//! and the fingerprint that tells a changed value from an unchanged one.

use super::codec::{put_varint, Cursor};
use crate::keyspace::hlc::stamp_node;

/// Per node slot, the newest stamp seen (sorted by slot). Contiguous:
/// a node learns another's effects on a key only through whole states
/// that include the earlier ones.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Context(Vec<(u64, u64)>);

impl Context {
    /// Notes `stamp` as seen (0: nothing).
    pub fn see(&mut self, stamp: u64) {
        if stamp == 0 {
            return;
        }
        let slot = stamp_node(stamp);
        match self.0.binary_search_by_key(&slot, |c| c.0) {
            Ok(i) => self.0[i].1 = self.0[i].1.max(stamp),
            Err(i) => self.0.insert(i, (slot, stamp)),
        }
    }

    /// Whether the write stamped `stamp` was seen.
    pub fn covers(&self, stamp: u64) -> bool {
        let slot = stamp_node(stamp);
        self.0
            .binary_search_by_key(&slot, |c| c.0)
            .is_ok_and(|i| self.0[i].1 >= stamp)
    }

    /// The newest stamp of `slot` seen (0: none).
    pub fn newest(&self, slot: u64) -> u64 {
        self.0
            .binary_search_by_key(&slot, |c| c.0)
            .map_or(0, |i| self.0[i].1)
    }

    /// The newest stamp seen of each slot.
    pub fn stamps(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|c| c.1)
    }

    /// Everything `other` saw, seen.
    pub fn join(&mut self, other: &Context) {
        for &(_, s) in &other.0 {
            self.see(s);
        }
    }

    /// `count (slot stamp)*`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.0.len() as u64);
        for &(slot, s) in &self.0 {
            put_varint(out, slot);
            put_varint(out, s);
        }
    }

    pub fn decode(c: &mut Cursor) -> Result<Context, String> {
        let n = c.count()?;
        let mut cc = Vec::with_capacity(n);
        for _ in 0..n {
            cc.push((c.varint()?, c.varint()?));
        }
        if cc.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err("merge metadata context out of order".into());
        }
        Ok(Context(cc))
    }

    /// DEBUG MERGEINFO's `context:` line.
    pub fn describe(&self) -> String {
        let cc: Vec<String> = self.0.iter().map(|(s, t)| format!("{s}:{t}")).collect();
        format!("context:{}", cc.join(","))
    }
}

/// FNV-1a of a value: the same on every node (a fingerprint travels in
/// states).
pub(crate) fn fingerprint(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    })
}
