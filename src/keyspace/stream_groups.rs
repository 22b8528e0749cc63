//! Consumer groups of a stream (Redis's streamCG, streamConsumer and
//! streamNACK in t_stream.c): what each group has delivered (its last ID and
//! logical read counter), its pending entries list (PEL: one NACK per
//! delivered, unacknowledged entry, naming its consumer), and its consumers
//! with their own PELs (the IDs they hold).
//!
//! The PEL and the consumers' own PELs are one structure
//! ([`super::stream_pel`]): an ID is in a consumer's PEL exactly when the
//! group's NACK for it names that consumer, by construction. Groups and
//! consumers are kept in byte order of their names, as Redis's radix trees
//! list them. The lag and
//! entries-read arithmetic is Redis 7.0's (streamEstimateDistanceFromFirst-
//! EverEntry, streamRangeHasTombstones, streamReplyWithCGLag).

use std::collections::BTreeMap;

use super::stream::{Fields, StreamId, StreamValue};
pub(crate) use super::stream_pel::{Nack, Pel};

/// A group's entries-read counter when it is not known (SCG_INVALID_ENTRIES_READ).
pub(crate) const INVALID_ENTRIES_READ: i64 = -1;

/// A consumer; its pending entries are the group PEL's
/// ([`Pel::of`], [`Pel::count_of`]).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Consumer {
    /// Unix ms of its last read or claim.
    pub seen_time: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub last_id: StreamId,
    pub entries_read: i64,
    pub pel: Pel,
    pub consumers: BTreeMap<Vec<u8>, Consumer>,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group {
            last_id,
            entries_read,
            pel: Pel::default(),
            consumers: BTreeMap::new(),
        }
    }

    /// Creates the consumer if missing (seen now); whether it was created.
    /// An existing one is only refreshed when `refresh`.
    pub fn touch_consumer(&mut self, name: &[u8], now: i64, refresh: bool) -> bool {
        match self.consumers.get_mut(name) {
            Some(c) => {
                if refresh {
                    c.seen_time = now;
                }
                false
            }
            None => {
                let c = Consumer { seen_time: now };
                self.consumers.insert(name.to_vec(), c);
                true
            }
        }
    }

    /// Gives entry `id` to `consumer` (created by the caller), as a first
    /// delivery: a NACK already there (after XGROUP SETID) moves to it.
    pub fn deliver(&mut self, id: StreamId, consumer: &[u8], now: i64) -> Nack {
        self.pel.insert(id, consumer, now, 1);
        self.pel[&id].clone()
    }

    /// Removes the NACK of `id` from the group and its consumer (XACK, or
    /// a claim of an entry that is gone); whether there was one.
    pub fn ack(&mut self, id: StreamId) -> bool {
        self.pel.remove(&id).is_some()
    }

    /// Moves the NACK of `id` (present) to `consumer` (present).
    pub fn reassign(&mut self, id: StreamId, consumer: &[u8]) {
        let Some(n) = self.pel.get(&id) else {
            return;
        };
        if n.consumer() != consumer {
            let (time, count) = (n.delivery_time, n.delivery_count);
            self.pel.insert(id, consumer, time, count);
        }
    }

    /// Deletes a consumer and its pending entries; how many it had.
    pub fn delete_consumer(&mut self, name: &[u8]) -> Option<usize> {
        self.consumers.remove(name)?;
        Some(self.pel.remove_owner(name))
    }
}

/// What a group read (streamReplyWithRange with a group) did: the entries
/// served, the NACKs created (each propagated as an XCLAIM), and whether
/// the group's last ID moved.
pub struct GroupRead {
    pub entries: Vec<(StreamId, Fields)>,
    pub nacks: Vec<(StreamId, Nack)>,
    pub moved: bool,
}

impl StreamValue {
    /// Whether `start..=end` (None: open) may hold a deleted entry
    /// (streamRangeHasTombstones).
    pub fn has_tombstones(&self, start: Option<StreamId>, end: Option<StreamId>) -> bool {
        let del = self.max_deleted;
        if self.is_empty() || del == StreamId::MIN || self.first_id() > del {
            return false;
        }
        start.unwrap_or(StreamId::MIN) <= del && del <= end.unwrap_or(StreamId::MAX)
    }

    /// The logical read counter of `id` when it can be known, else
    /// [`INVALID_ENTRIES_READ`] (streamEstimateDistanceFromFirstEverEntry).
    pub fn estimate_distance(&self, id: StreamId) -> i64 {
        let added = self.entries_added as i64;
        if self.entries_added == 0 {
            return 0;
        }
        if self.is_empty() && id <= self.last_id {
            return added;
        }
        if id == self.last_id {
            return added;
        } else if id > self.last_id {
            return INVALID_ENTRIES_READ;
        }
        let first = self.first_id();
        if self.max_deleted == StreamId::MIN || self.max_deleted < first {
            if id < first {
                return added.wrapping_sub(self.len() as i64);
            } else if id == first {
                return added.wrapping_sub(self.len() as i64).wrapping_add(1);
            }
        }
        INVALID_ENTRIES_READ
    }

    /// A group's lag, None when it cannot be known (streamReplyWithCGLag).
    pub fn lag(&self, g: &Group) -> Option<i64> {
        let added = self.entries_added as i64;
        if self.entries_added == 0 {
            return Some(0);
        }
        if g.entries_read != INVALID_ENTRIES_READ && !self.has_tombstones(Some(g.last_id), None) {
            return Some(added.wrapping_sub(g.entries_read));
        }
        match self.estimate_distance(g.last_id) {
            INVALID_ENTRIES_READ => None,
            read => Some(added.wrapping_sub(read)),
        }
    }

    /// Serves group `group` from `start` on (at most `count`, 0: all) to
    /// `consumer` (which exists): moves the group's last ID and read
    /// counter and, unless `noack`, records each entry as pending.
    pub fn read_group(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        start: StreamId,
        count: usize,
        noack: bool,
        now: i64,
    ) -> GroupRead {
        let take = if count == 0 { usize::MAX } else { count };
        let entries: Vec<(StreamId, Fields)> =
            self.range(start, StreamId::MAX, false).take(take).collect();
        let counters: Vec<(StreamId, bool, i64)> = entries
            .iter()
            .map(|(id, _)| {
                (
                    *id,
                    self.has_tombstones(Some(*id), None),
                    self.estimate_distance(*id),
                )
            })
            .collect();
        let added = self.entries_added;
        let g = self.groups.get_mut(group).expect("group checked");
        let mut read = GroupRead {
            entries: Vec::new(),
            nacks: Vec::new(),
            moved: false,
        };
        for (id, tomb, estimate) in counters {
            if id > g.last_id {
                if g.entries_read != INVALID_ENTRIES_READ && !tomb {
                    g.entries_read = g.entries_read.wrapping_add(1);
                } else if added != 0 {
                    g.entries_read = estimate;
                }
                g.last_id = id;
                read.moved = true;
            }
            if !noack {
                read.nacks.push((id, g.deliver(id, consumer, now)));
            }
        }
        read.entries = entries;
        read
    }

    /// The pending entries of `consumer` from `start` on (at most `count`,
    /// 0: all), each with its fields or None if it was deleted; those found
    /// count as delivered again (streamReplyWithRangeFromConsumerPEL).
    pub fn read_history(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        start: StreamId,
        count: usize,
        now: i64,
    ) -> Vec<(StreamId, Option<Fields>)> {
        let take = if count == 0 { usize::MAX } else { count };
        let g = self.groups.get(group).expect("group checked");
        let ids: Vec<StreamId> = (g.pel.of_from(consumer, start))
            .take(take)
            .map(|(id, _)| id)
            .collect();
        let out: Vec<(StreamId, Option<Fields>)> =
            ids.iter().map(|id| (*id, self.entry(*id))).collect();
        let g = self.groups.get_mut(group).expect("group checked");
        for (id, f) in &out {
            if f.is_some() {
                if let Some(n) = g.pel.get_mut(id) {
                    n.delivery_time = now;
                    n.delivery_count = n.delivery_count.wrapping_add(1);
                }
            }
        }
        out
    }

    /// Memory of the groups, roughly (MEMORY USAGE).
    pub fn groups_mem(&self) -> usize {
        self.groups
            .iter()
            .map(|(name, g)| {
                name.len()
                    + 96
                    + g.pel
                        .values()
                        .map(|n| n.consumer().len() + 64)
                        .sum::<usize>()
                    + (g.consumers.keys())
                        .map(|c| c.len() + 64 + 24 * g.pel.count_of(c))
                        .sum::<usize>()
            })
            .sum()
    }
}
