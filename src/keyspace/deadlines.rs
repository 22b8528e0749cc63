//! A shard's volatile keys by deadline: the index the active expiry cycle
//! pops from (soonest first), eviction's volatile-ttl reads, and INFO
//! keyspace counts (`expires=`, `avg_ttl=`).
//!
//! An entry is `(deadline in unix ms, the key's hash)`: the key itself is
//! found through the shard's index by that hash (`Shard::expiring_at`), so
//! the set holds 16 bytes a volatile key, not a copy of its name. The sum
//! of the deadlines is kept beside the set, so the keys' average TTL is
//! exact and O(1) to read, where Redis 7.0 estimates it from the keys its
//! expiry cycle samples.

use std::collections::BTreeSet;

#[derive(Default)]
pub(super) struct Deadlines {
    set: BTreeSet<(u64, u64)>,
    /// The sum of the deadlines in `set` (u128: 2^64 deadlines of 2^64 ms
    /// cannot overflow it).
    sum: u128,
}

impl Deadlines {
    pub(super) fn len(&self) -> usize {
        self.set.len()
    }

    pub(super) fn insert(&mut self, at: u64, hash: u64) {
        if self.set.insert((at, hash)) {
            self.sum += u128::from(at);
        }
    }

    pub(super) fn remove(&mut self, at: u64, hash: u64) {
        if self.set.remove(&(at, hash)) {
            self.sum -= u128::from(at);
        }
    }

    /// The soonest deadline and its key's hash.
    pub(super) fn first(&self) -> Option<(u64, u64)> {
        self.set.first().copied()
    }

    pub(super) fn pop_first(&mut self) -> Option<(u64, u64)> {
        let first = self.set.pop_first()?;
        self.sum -= u128::from(first.0);
        Some(first)
    }

    /// The sum of the deadlines, to average them over several shards.
    pub(super) fn sum(&self) -> u128 {
        self.sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_follows_inserts_removes_and_pops() {
        let mut d = Deadlines::default();
        d.insert(100, 1);
        d.insert(300, 2);
        d.insert(300, 2); // already there: counted once
        assert_eq!((d.len(), d.sum()), (2, 400));
        d.remove(50, 9); // not there: nothing changes
        assert_eq!((d.len(), d.sum()), (2, 400));
        assert_eq!(d.pop_first(), Some((100, 1)));
        assert_eq!((d.len(), d.sum()), (1, 300));
        d.remove(300, 2);
        assert_eq!((d.len(), d.sum(), d.first()), (0, 0, None));
    }
}
