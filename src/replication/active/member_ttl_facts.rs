//! How a link applies a member TTL write's fact (DECISIONS 326;
//! keyspace/merge/member_ttls.rs, `MemberTtlDots::apply_write`): the
//! record of EXPIREMEMBER and its family (`PEXPIREMEMBERAT key member ms`),
//! of HEXPIRE and its family (`HPEXPIREAT key ms FIELDS n field...`),
//! HPERSIST (`HPERSIST key FIELDS n field...`) and KeyDB's `PERSIST key
//! member` names the members whose TTL it set or cleared; its fact names
//! the origin's `PREV` on the key and, per member, the TTL dots it
//! replaced. Where this node's state describes the key (its version, its
//! TTL, every member's TTL), holds every member named and every dot
//! replaced, the members' registers take the write's dot and the side map
//! what they resolve to, replayed as `PEXPIREMEMBERAT` or `PERSIST key
//! member` where it changes (as a join writes it, merging.rs). Anywhere
//! else the caller asks for the key's state, as before.

use crate::effects::Fact;
use crate::keyspace::member_ttl::{has_member, member_type};
use crate::keyspace::merge::elements::Elements;
use crate::keyspace::merge::fact::{NotApplied, DROP, KIND, SHIFT};
use crate::keyspace::merge::member_ttls::MemberWrite;
use crate::keyspace::merge::ttl::other_type;
use crate::keyspace::merge::Meta;
use crate::keyspace::Shard;
use crate::protocol::{parse_i64, Args};

use super::link::Link;

/// The member TTL writes of a record, if it is one (see the module
/// comment); None for any other command.
pub(super) fn member_ttl_writes<'a>(argv: &Args<'a>) -> Option<Vec<MemberWrite<'a>>> {
    let name = argv.get(0).to_ascii_lowercase();
    let ms = |i: usize| parse_i64(argv.get(i)).and_then(|n| u64::try_from(n).ok());
    let fields = |from: usize, at: u64| -> Option<Vec<MemberWrite<'a>>> {
        let n = parse_i64(argv.get(from - 1))?;
        (n >= 1 && n as usize == argv.len().checked_sub(from)?).then(|| {
            (from..argv.len())
                .map(|i| (i as u32, argv.get(i), at))
                .collect()
        })
    };
    match (&name[..], argv.len()) {
        (b"pexpirememberat", 4) => Some(vec![(2, argv.get(2), ms(3)?.max(1))]),
        (b"persist", 3) => Some(vec![(2, argv.get(2), 0)]),
        (b"hpexpireat", n) if n >= 6 => fields(5, ms(2)?.max(1)),
        (b"hpersist", n) if n >= 5 => fields(4, 0),
        _ => None,
    }
}

/// Whether an element write's fact (SADD, HSET, ZADD, SREM... and the
/// counted ones) on `key` must not apply here for its member TTLs
/// (DECISIONS 327), so that the key's state is asked for: the state's
/// registers are not the side map's; a hash write names a field with a TTL
/// here (its replayed HSET would clear it, a clearing write the origin did
/// not make); or a member the write removed survives here (a concurrent
/// add) with TTL dots, which the origin dropped with the member and a join
/// would drop too.
pub(super) fn member_ttls_unfit(
    g: &Shard,
    (hash, key): (u64, &[u8]),
    facts: &[Fact],
    argv: &Args,
) -> bool {
    if g.member_ttls(key).is_none()
        && (g.merge_meta(key).and_then(Meta::get::<Elements>))
            .is_none_or(|e| e.member_ttls.is_empty())
    {
        return false;
    }
    if g.member_ttls_stale_but((hash, key), g.merge_meta(key), &[]) {
        return true;
    }
    let Some(e) = g.merge_meta(key).and_then(Meta::get::<Elements>) else {
        return false;
    };
    let name = argv.get(0).to_ascii_lowercase();
    let hash_put = matches!(&name[..], b"hset" | b"hmset" | b"hsetnx" | b"hincrby");
    let ttl_here = |i: usize| g.member_ttl(key, argv.get(i)).is_some();
    if hash_put && (2..argv.len()).any(ttl_here) {
        return true;
    }
    // A member with TTL dots here keeps a dot the write did not drop.
    let dropped = |i: usize, stamp: u64| {
        (facts.iter()).any(|f| f.0 & KIND == DROP && f.0 >> SHIFT == i as u32 && f.1 == stamp)
    };
    let removes = matches!(&name[..], b"srem" | b"hdel" | b"zrem");
    removes
        && (2..argv.len()).any(|i| {
            let m = argv.get(i);
            e.member_ttls.has(m)
                && (e.dots.get(m)).is_some_and(|ds| ds.iter().any(|d| !dropped(i, d.stamp)))
        })
}

impl Link {
    /// Applies a member TTL write's fact to `key`; false where it does not
    /// apply here (the caller asks for the key's state).
    pub(super) fn apply_member_ttl(
        &mut self,
        (db, key): (usize, &[u8]),
        stamp: u64,
        facts: &[Fact],
        writes: &[MemberWrite<'_>],
    ) -> bool {
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let mut g = ks.db(db).lock(slot.shard);
        let Some(entry) = g.get_raw(slot.hash, key) else {
            return false;
        };
        if !member_type(&entry.value) || other_type(facts, &entry.value) {
            return false; // another type: the key's state decides
        }
        let at = entry.expire_at();
        let absent: Vec<&[u8]> = (writes.iter())
            .filter(|w| !has_member(&entry.value, w.1))
            .map(|w| w.1)
            .collect();
        let version = g.version_of(slot.hash, key);
        if g.member_ttls_stale_but((slot.hash, key), g.merge_meta(key), &[]) {
            return false;
        }
        let side: Vec<u64> = (writes.iter())
            .map(|w| g.member_ttl(key, w.1).unwrap_or(0))
            .collect();
        let e = match g.merge_meta_mut(key) {
            Some(Meta::Elements(e)) if e.version == version && e.ttl.at() == at => e,
            _ => return false,
        };
        if version > stamp {
            return e.cc.covers(stamp);
        }
        let present = |m: &[u8]| !absent.contains(&m);
        let resolved = match e
            .member_ttls
            .apply_write(&mut e.cc, stamp, (writes, facts), present)
        {
            Ok(r) => r,
            Err(NotApplied::Duplicate) => return true,
            Err(NotApplied::Gap) => return false,
        };
        drop(g);
        let moved = version.max(stamp);
        let changed = (resolved.iter().zip(&side)).filter(|((_, now), was)| now != *was);
        for (&(m, now), _) in changed {
            let now_text = now.to_string();
            let argv: Vec<&[u8]> = match now {
                0 => vec![b"PERSIST", key, m],
                _ => vec![b"PEXPIREMEMBERAT", key, m, now_text.as_bytes()],
            };
            self.replay(db, moved, &argv);
        }
        self.raise_version(db, key, moved);
        let ks = &self.node.core().keyspace;
        if let Some(Meta::Elements(e)) = ks.db(db).lock(slot.shard).merge_meta_mut(key) {
            e.version = moved;
        }
        self.note_merge_state(db, key);
        true
    }
}
