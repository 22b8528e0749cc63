//! Member expiry: a TTL on one member of a set, hash or sorted set (KeyDB's
//! EXPIREMEMBER family and Redis 7.4's HEXPIRE family share it;
//! docs/MEMBER-EXPIRY.md).
//!
//! The TTLs live beside the values, not in them: a shard holds one boxed
//! [`ShardTtls`] (each key's [`MemberTtls`], and the keys ordered by their
//! earliest member deadline, the active cycle's index), None while no key of
//! the shard has one. A key without member TTLs pays nothing (no field in
//! [`super::Entry`], no change to any value encoding) and a shard one
//! pointer. The active expiry cycle (`expire.rs`, same cycle and budget as
//! keys) finds keys with due members in order, as the key index does for
//! volatile keys.
//!
//! The side map follows the entry: a key removed or replaced by a whole new
//! value ([`super::Shard::insert`]) loses its member TTLs
//! (`forget_member_ttls`, called from the shard's removal paths); RENAME
//! moves them ([`super::Shard::take_member_ttls`] /
//! [`super::Shard::put_member_ttls`]). A TTL whose member is gone by the
//! time it fires (SPOP, ZPOPMIN...: HDEL, SREM and ZREM clear it) is
//! dropped then without any effect.
//!
//! Cost of a member TTL: the member's bytes twice (the by-member map and the
//! by-time set) plus about 60 bytes of map and tree overhead; a key's first
//! member TTL adds the key's bytes twice (side map, due index) and a
//! `MemberTtls` (two empty collections, ~80 bytes).

use std::collections::{BTreeSet, HashMap};

use super::{merge, Entry, Shard, Value};

/// The member TTLs of one key: member -> absolute unix ms, and the same
/// ordered by time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberTtls {
    by_member: HashMap<Box<[u8]>, u64>,
    by_time: BTreeSet<(u64, Box<[u8]>)>,
}

impl MemberTtls {
    /// The earliest deadline, if any member has one.
    pub fn earliest(&self) -> Option<u64> {
        self.by_time.first().map(|(at, _)| *at)
    }

    pub fn get(&self, member: &[u8]) -> Option<u64> {
        self.by_member.get(member).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }

    /// Every (member, deadline), earliest first.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u64)> {
        self.by_time.iter().map(|(at, m)| (&**m, *at))
    }

    pub fn set(&mut self, member: &[u8], at: u64) {
        if let Some(old) = self.by_member.insert(member.into(), at) {
            self.by_time.remove(&(old, member.into()));
        }
        self.by_time.insert((at, member.into()));
    }

    /// Clears `member`'s TTL; returns whether it had one.
    pub fn clear(&mut self, member: &[u8]) -> bool {
        match self.by_member.remove(member) {
            Some(at) => self.by_time.remove(&(at, member.into())),
            None => false,
        }
    }

    /// Takes the members due at `now_ms`, earliest first.
    fn take_due(&mut self, now_ms: u64) -> Vec<Box<[u8]>> {
        let mut due = Vec::new();
        while self.by_time.first().is_some_and(|(at, _)| *at <= now_ms) {
            let (_, m) = self.by_time.pop_first().expect("checked");
            self.by_member.remove(&m);
            due.push(m);
        }
        due
    }
}

/// Members removed from a key because their TTLs passed.
#[derive(Debug)]
pub struct MembersGone {
    pub key: Box<[u8]>,
    /// The collection's type name ("set", "hash", "zset").
    pub kind: &'static str,
    /// The members removed (those still present when due).
    pub members: Vec<Box<[u8]>>,
    /// The key's version before.
    pub prev: u64,
    /// The whole entry, when the last member went (the key is removed).
    pub emptied: Option<Entry>,
}

/// A shard's member TTLs: each key's, and the keys by their earliest
/// member deadline (the active cycle's index). A shard holds one only while
/// some key of it has a member TTL.
#[derive(Default)]
pub(crate) struct ShardTtls {
    by_key: HashMap<Box<[u8]>, MemberTtls>,
    due: BTreeSet<(u64, Box<[u8]>)>,
}

impl ShardTtls {
    /// Moves `key` in the due index from deadline `before` to `after`.
    fn reindex(&mut self, key: &[u8], before: Option<u64>, after: Option<u64>) {
        if before == after {
            return;
        }
        if let Some(b) = before {
            self.due.remove(&(b, key.into()));
        }
        if let Some(a) = after {
            self.due.insert((a, key.into()));
        }
    }

    /// Takes `key`'s TTLs out, with its index entry.
    fn take(&mut self, key: &[u8]) -> Option<MemberTtls> {
        let t = self.by_key.remove(key)?;
        self.reindex(key, t.earliest(), None);
        Some(t)
    }

    /// Runs `f` on `key`'s TTLs (made if absent), keeping the index and
    /// dropping the TTLs once empty.
    fn with<R>(&mut self, key: &[u8], f: impl FnOnce(&mut MemberTtls) -> R) -> R {
        let t = self.by_key.entry(key.into()).or_default();
        let before = t.earliest();
        let r = f(t);
        let (after, empty) = (t.earliest(), t.is_empty());
        if empty {
            self.by_key.remove(key);
        }
        self.reindex(key, before, after);
        r
    }
}

/// The member TTLs of `key` in a shard's index (a free function so the
/// shard can lend them while another of its fields is borrowed).
#[inline]
pub(super) fn of<'a>(index: &'a Option<Box<ShardTtls>>, key: &[u8]) -> Option<&'a MemberTtls> {
    index.as_ref()?.by_key.get(key)
}

/// Whether `value` is a type whose members can have TTLs.
pub(crate) fn member_type(value: &Value) -> bool {
    matches!(value, Value::Set(_) | Value::Hash(_) | Value::ZSet(_))
}

/// Whether `member` is in the collection `value`.
pub(crate) fn has_member(value: &Value, member: &[u8]) -> bool {
    match value {
        Value::Set(s) => s.contains(member),
        Value::Hash(h) => h.contains(member),
        Value::ZSet(z) => z.score(member).is_some(),
        _ => false,
    }
}

fn remove_member(value: &mut Value, member: &[u8]) -> bool {
    match value {
        Value::Set(s) => s.remove(member),
        Value::Hash(h) => h.remove(member),
        Value::ZSet(z) => z.remove(member).is_some(),
        _ => false,
    }
}

impl Shard {
    /// Whether any key of this shard has member TTLs.
    #[inline]
    pub fn has_member_ttls(&self) -> bool {
        self.member_ttls.is_some()
    }

    /// The member TTLs of `key`, if it has any.
    pub fn member_ttls(&self, key: &[u8]) -> Option<&MemberTtls> {
        of(&self.member_ttls, key)
    }

    /// A running snapshot gets `key`'s entry (and TTLs) as they are now,
    /// before its member TTLs change.
    fn before_ttl_change(&mut self, hash: u64, key: &[u8]) {
        if self.snap.is_some() {
            if let Some(p) = self.pos(hash, key) {
                self.before_write(p);
            }
        }
    }

    /// `member`'s deadline (unix ms) in `key`, if it has one.
    pub fn member_ttl(&self, key: &[u8], member: &[u8]) -> Option<u64> {
        self.member_ttls(key)?.get(member)
    }

    /// Runs `f` on the shard's index (made if absent; dropped once empty).
    fn with_index<R>(&mut self, f: impl FnOnce(&mut ShardTtls) -> R) -> R {
        let index = self.member_ttls.get_or_insert_with(Box::default);
        let r = f(index);
        if index.by_key.is_empty() {
            self.member_ttls = None; // give the memory back
        }
        r
    }

    /// Sets `member`'s deadline in `key` (the caller checked both exist).
    pub fn set_member_ttl(&mut self, hash: u64, key: &[u8], member: &[u8], at: u64) {
        self.before_ttl_change(hash, key);
        self.with_index(|i| i.with(key, |t| t.set(member, at)));
    }

    /// Clears `member`'s TTL in `key`; returns whether it had one.
    pub fn clear_member_ttl(&mut self, hash: u64, key: &[u8], member: &[u8]) -> bool {
        if self.member_ttl(key, member).is_none() {
            return false;
        }
        self.before_ttl_change(hash, key);
        self.with_index(|i| i.with(key, |t| t.clear(member)))
    }

    /// Drops every member TTL of `key` (removed, or replaced whole).
    #[inline]
    pub(super) fn forget_member_ttls(&mut self, key: &[u8]) {
        if self.member_ttls(key).is_some() {
            self.with_index(|i| i.take(key));
        }
    }

    /// Takes `key`'s member TTLs out (RENAME: the caller puts them back
    /// under the new name with [`Self::put_member_ttls`]).
    pub fn take_member_ttls(&mut self, hash: u64, key: &[u8]) -> Option<Box<MemberTtls>> {
        self.member_ttls(key)?;
        self.before_ttl_change(hash, key);
        self.with_index(|i| i.take(key)).map(Box::new)
    }

    /// Gives `key` (present) the member TTLs `t`.
    pub fn put_member_ttls(&mut self, hash: u64, key: &[u8], t: Box<MemberTtls>) {
        if t.is_empty() {
            return;
        }
        self.before_ttl_change(hash, key);
        self.with_index(|i| i.with(key, |old| *old = *t));
    }

    /// Whether `key` has a member due at `now_ms`.
    #[inline]
    pub fn members_due(&self, key: &[u8], now_ms: u64) -> bool {
        self.member_ttls(key)
            .and_then(MemberTtls::earliest)
            .is_some_and(|at| at <= now_ms)
    }

    /// Removes `key`'s members due at `now_ms` from its value (and the key
    /// itself if that empties it). None if nothing was removed (no member
    /// due, or the due ones were gone already).
    pub fn expire_members(
        &mut self,
        hasher: &super::KeyHasher,
        hash: u64,
        key: &[u8],
        now_ms: u64,
    ) -> Option<MembersGone> {
        if !self.members_due(key, now_ms) {
            return None;
        }
        self.before_ttl_change(hash, key);
        let due = self.with_index(|i| i.with(key, |t| t.take_due(now_ms)));
        let e = self.find_mut(hash, key)?;
        let prev = e.version;
        let members: Vec<Box<[u8]>> = (due.into_iter())
            .filter(|m| remove_member(&mut e.value, m))
            .collect();
        if members.is_empty() {
            return None;
        }
        let kind = e.value.type_name();
        let emptied = if e.value.is_empty_collection() {
            self.remove(hasher, hash, key)
        } else {
            None
        };
        Some(MembersGone {
            key: key.into(),
            kind,
            members,
            prev,
            emptied,
        })
    }

    /// The key whose earliest member deadline comes first, if due.
    fn first_member_due(&self, now_ms: u64) -> Option<(u64, Box<[u8]>)> {
        let (at, key) = self.member_ttls.as_ref()?.due.first()?;
        (*at <= now_ms).then(|| (*at, key.clone()))
    }

    /// The active cycle's part for members: removes the due members of up
    /// to `max` keys, calling `on_gone` for each key that lost some (under
    /// this shard's lock; it returns the stamp of the removal, which becomes
    /// the key's version, and whether an emptied key leaves a tombstone).
    /// Returns how many keys lost members and whether more are due.
    pub fn expire_members_due(
        &mut self,
        hasher: &super::KeyHasher,
        now_ms: u64,
        max: usize,
        mut on_gone: impl FnMut(&MembersGone) -> (u64, bool),
    ) -> (usize, bool) {
        let mut n = 0;
        while n < max {
            let Some((at, key)) = self.first_member_due(now_ms) else {
                return (n, false);
            };
            let hash = hasher.hash(&key);
            let Some(gone) = self.expire_members(hasher, hash, &key, now_ms) else {
                // The due members were gone already; their TTLs went with
                // this call. A stale index entry (none expected) goes too.
                if let Some(i) = self.member_ttls.as_mut() {
                    i.due.remove(&(at, key));
                }
                continue;
            };
            let (stamp, tomb) = on_gone(&gone);
            if gone.emptied.is_some() {
                if tomb {
                    self.set_tombstone(&key, stamp);
                }
            } else if let Some(e) = self.find_mut(hash, &key) {
                e.version = stamp;
            }
            n += 1;
        }
        (n, self.first_member_due(now_ms).is_some())
    }

    /// Whether the active cycle has member work here.
    pub fn has_member_due(&self) -> bool {
        self.member_ttls.is_some()
    }
}

/// Active replication: a member's TTL in the key's merge state
/// (`merge/member_ttls.rs`, DECISIONS 305-309).
impl Shard {
    /// Whether the member TTL registers of `key`'s state `meta` disagree
    /// with its side map for a member other than those `named` (a write
    /// about to change or clear their TTLs, which the caller checks):
    /// element and key TTL writes travel as facts only where they do not
    /// (DECISIONS 327).
    pub fn member_ttls_stale_but(
        &self,
        (hash, key): (u64, &[u8]),
        meta: Option<&merge::Meta>,
        named: &[&[u8]],
    ) -> bool {
        let side = self.member_ttls(key);
        let value = self.get_raw(hash, key).map(|e| &e.value);
        match meta.and_then(merge::Meta::get::<merge::Elements>) {
            Some(e) if !e.member_ttls.is_empty() || side.is_some() => {
                let present = |m: &[u8]| value.is_some_and(|v| has_member(v, m));
                e.member_ttls.differ_but(side, present, named)
            }
            _ => false,
        }
    }

    /// Active replication, at the origin of a member TTL write stamped
    /// `stamp` on `key` (version `prev` before) that moved each member of
    /// `writes` (argument index, member, deadline before, deadline now; 0:
    /// none) and is in the side map already: the members' registers take
    /// the write's dot and its fact goes to `facts`, with the type of the
    /// value (`MemberTtlDots::note_write`, DECISIONS 326). False, nothing
    /// changed, where the key's state does not describe it as it was (its
    /// version, its TTL, each member's deadline): the lazy path finds the
    /// write (`MemberTtlDots::refresh`).
    pub fn note_member_ttls(
        &mut self,
        (hash, key): (u64, &[u8]),
        (prev, stamp): (u64, u64),
        writes: &[(u32, &[u8], u64, u64)],
        facts: &mut Vec<merge::fact::Fact>,
    ) -> bool {
        let Some(entry) = self.get_raw(hash, key) else {
            return false;
        };
        let typed = merge::ttl::type_fact(merge::ttl::type_code(&entry.value));
        let named: Vec<&[u8]> = writes.iter().map(|w| w.1).collect();
        let meta = self.merge_meta(key);
        if self.member_ttls_stale_but((hash, key), meta, &named) {
            return false;
        }
        let at = entry.expire_at();
        let Some(merge::Meta::Elements(e)) = self.merge.get_mut(key).map(|m| &mut **m) else {
            return false;
        };
        let before_held = writes.iter().all(|w| e.member_ttls.at(w.1) == w.2);
        if e.version != prev || e.ttl.at() != at || !before_held {
            return false;
        }
        let now: Vec<(u32, &[u8], u64)> = writes.iter().map(|w| (w.0, w.1, w.3)).collect();
        if e.member_ttls.note_write(&mut e.cc, stamp, &now, facts) {
            facts.push(typed);
        }
        e.version = stamp;
        true
    }

    /// Active replication, after a peer's element write applied as a fact
    /// (SREM, HDEL, ZREM, an add): members it removed lose their TTL dots,
    /// as their side map entries went with them.
    pub fn drop_gone_member_ttls(&mut self, hash: u64, key: &[u8]) {
        let pos = self.pos(hash, key);
        let value = pos.map(|p| &self.entries.get(p).value);
        if let Some(merge::Meta::Elements(e)) = self.merge.get_mut(key).map(|m| &mut **m) {
            if !e.member_ttls.is_empty() {
                e.member_ttls
                    .retain_present(|m| value.is_some_and(|v| has_member(v, m)));
            }
        }
    }

    /// Whether the member TTL registers of `key`'s state `meta` disagree
    /// with its side map (a write changed a member's TTL since they were
    /// read).
    pub(super) fn member_ttls_stale(
        &self,
        key: &[u8],
        value: Option<&Value>,
        meta: Option<&merge::Meta>,
    ) -> bool {
        let side = self.member_ttls(key);
        match meta.and_then(merge::Meta::get::<merge::Elements>) {
            Some(e) if !e.member_ttls.is_empty() || side.is_some() => e
                .member_ttls
                .differ(side, |m| value.is_some_and(|v| has_member(v, m))),
            _ => false,
        }
    }

    /// What `key`'s side map must change to hold what the member TTL
    /// registers `joined` resolve to (a join's): each member present
    /// whose deadline differs, with its deadline (0: none).
    pub fn member_ttl_writes(
        &self,
        hash: u64,
        key: &[u8],
        joined: &merge::member_ttls::MemberTtlDots,
    ) -> Vec<(Box<[u8]>, u64)> {
        let side = self.member_ttls(key);
        let Some(value) = self.get_raw(hash, key).map(|e| &e.value) else {
            return Vec::new();
        };
        let side_at = |m: &[u8]| side.and_then(|s| s.get(m)).unwrap_or(0);
        let mut writes: Vec<(Box<[u8]>, u64)> = (joined.resolved())
            .filter(|&(m, at)| has_member(value, m) && side_at(m) != at)
            .map(|(m, at)| (m.into(), at))
            .collect();
        let cleared = (side.into_iter().flat_map(MemberTtls::iter))
            .filter(|&(m, _)| joined.at(m) == 0 && has_member(value, m));
        writes.extend(cleared.map(|(m, _)| (m.into(), 0)));
        writes
    }

    /// `meta`, `key`'s state brought up to `version`, takes its member
    /// TTLs from the side map (`MemberTtlDots::refresh`).
    pub(super) fn refresh_member_ttls(
        &self,
        key: &[u8],
        value: Option<&Value>,
        version: u64,
        meta: &mut merge::Meta,
    ) {
        let side = self.member_ttls(key);
        if let Some(e) = meta.get_mut::<merge::Elements>() {
            if side.is_some() || !e.member_ttls.is_empty() {
                let present = |m: &[u8]| value.is_some_and(|v| has_member(v, m));
                e.member_ttls.refresh(version, side, present);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::set::SetValue;
    use crate::keyspace::Keyspace;

    #[test]
    fn due_members_leave_in_order_and_the_last_takes_the_key() {
        let ks = Keyspace::new(1);
        let s = ks.slot(b"k");
        let mut g = ks.db(0).lock(s.shard);
        let mut set = SetValue::default();
        for m in [&b"a"[..], b"b", b"c"] {
            set.add(m, 512);
        }
        let e = Entry::new(b"k"[..].into(), Value::Set(Box::new(set)), 0, 7);
        g.insert(&ks.hasher, s.hash, e);
        g.set_member_ttl(s.hash, b"k", b"a", 100);
        g.set_member_ttl(s.hash, b"k", b"b", 200);
        g.set_member_ttl(s.hash, b"k", b"b", 300);
        assert_eq!(g.member_ttl(b"k", b"b"), Some(300));
        let mut seen = Vec::new();
        let (n, more) = g.expire_members_due(&ks.hasher, 250, 10, |gone| {
            seen.push(gone.members.clone());
            (9, false)
        });
        assert_eq!((n, more), (1, false));
        assert_eq!(seen, [vec![Box::from(&b"a"[..])]]);
        assert_eq!(g.get_raw(s.hash, b"k").unwrap().version, 9);
        assert!(g.has_member_due());
        // Removing the key forgets its TTLs and empties the index.
        g.remove(&ks.hasher, s.hash, b"k");
        assert!(!g.has_member_ttls() && !g.has_member_due());
    }
}
