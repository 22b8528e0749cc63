//! How a link applies the facts of a stream's claims (XCLAIM's and
//! XAUTOCLAIM's records) and XGROUP's subcommands (DECISIONS 254, 255;
//! what they tell and the checks: `keyspace/merge/groups/writes.rs`).
//! Where the check holds here, the write is replayed at its stamp and what
//! the replay took from this node's clock is set to the origin's
//! ([`Link::as_the_origin`]); else the caller asks for the key's state.

use crate::effects::Fact;
use crate::keyspace::merge::groups::writes::{self, Claim, ClaimTold, XgroupTold};
use crate::keyspace::stream::StreamId;
use crate::protocol::Args;

use super::{group_fact_here, id_of, missing_here, stream_fact_here, AsOrigin};
use crate::replication::active::link::Link;

/// A claim's records: its group, the claim, and per record claimed (not
/// gone) its ID and delivery time.
struct ClaimUnit<'a> {
    group: &'a [u8],
    claim: Claim<'a>,
    times: Vec<(StreamId, i64)>,
}

/// A claim as its records say it (`XCLAIM key group consumer 0 id TIME t
/// RETRYCOUNT n FORCE JUSTID LASTID last` each, of one group and LASTID;
/// `gone` the records whose entries were gone at the origin).
fn claim_of<'a>(key: &[u8], writes: &[Args<'a>], gone: &[u32]) -> Option<ClaimUnit<'a>> {
    let first = writes.first()?;
    let (group, last) = (first.get(2), id_of(first.get(13))?);
    let is = |a: &[u8], n: &[u8]| a.eq_ignore_ascii_case(n);
    let mut claim = Claim {
        consumer: None,
        ids: Vec::new(),
        last,
    };
    let mut times = Vec::new();
    for (i, c) in writes.iter().enumerate() {
        let shape = c.len() == 14 && is(c.get(0), b"xclaim") && is(c.get(6), b"time");
        if !shape || c.get(1) != key || c.get(2) != group || c.get(4) != b"0" {
            return None;
        }
        if !is(c.get(11), b"justid") || id_of(c.get(13))? != last {
            return None;
        }
        let id = id_of(c.get(5))?;
        claim.ids.push(id);
        if gone.contains(&(i as u32)) {
            continue;
        }
        if claim.consumer.is_some_and(|n| n != c.get(3)) {
            return None;
        }
        claim.consumer = Some(c.get(3));
        times.push((id, std::str::from_utf8(c.get(7)).ok()?.parse().ok()?));
    }
    Some(ClaimUnit {
        group,
        claim,
        times,
    })
}

/// The command a peer replays for an XGROUP fact: CREATE and SETID with
/// the last ID and entries-read the origin resolved, the others as they
/// came.
fn xgroup_replay(argv: &Args, told: &XgroupTold) -> Option<Vec<Vec<u8>>> {
    let sub = argv.get(1);
    let mut out: Vec<Vec<u8>> = (0..4).map(|i| argv.get(i).to_vec()).collect();
    if sub.eq_ignore_ascii_case(b"create") || sub.eq_ignore_ascii_case(b"setid") {
        let (id, read) = told.register()?;
        out.extend([id.text().into_bytes(), b"ENTRIESREAD".to_vec()]);
        out.push(read.to_string().into_bytes());
        if told.words[4].is_some() {
            out.push(b"MKSTREAM".to_vec());
        }
    } else if argv.len() == 5 {
        out.push(argv.get(4).to_vec());
    }
    Some(out)
}

impl Link {
    /// Applies a claim's records (`writes`, all of `key`, the first
    /// carrying `told`) at `stamp` (DECISIONS 254); false where it does not
    /// apply here: the caller asks for the key's state.
    pub(in crate::replication::active) fn apply_claims(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        told: &ClaimTold,
        writes: &[Args],
    ) -> bool {
        let Some(ClaimUnit {
            group,
            claim,
            times,
        }) = claim_of(key, writes, &told.gone)
        else {
            return false;
        };
        let checked = self.checked_here(db, key, |g, at| {
            group_fact_here(g, at, (stamp, told.prev, group), |state, v, gv, gm| {
                let ok = writes::check_claim((gv, gm), &state.cc, told, &claim, v);
                ok.then(|| claim.consumer.and_then(|c| gm.consumers.get(c).copied()))
            })
        });
        let (version, part) = match checked {
            Ok(c) => c,
            Err(applied) => return applied,
        };
        for w in writes {
            self.replay_args(db, stamp, *w);
        }
        let touched = claim.consumer.filter(|_| told.seen != 0);
        let origin = AsOrigin {
            group,
            times,
            consumer: touched.map(|c| (c, told.seen, part)),
            reset: None,
        };
        self.as_the_origin(db, key, stamp, &origin);
        self.settle_stream(db, key, stamp, version.max(stamp));
        true
    }

    /// Applies an XGROUP subcommand's fact to `key` (DECISIONS 255); false
    /// where it does not apply here: the caller asks for the key's state.
    pub(in crate::replication::active) fn apply_xgroup_fact(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        facts: &[Fact],
        argv: &Args,
    ) -> bool {
        let Some(told) = XgroupTold::decode(facts) else {
            return false;
        };
        let Some(replay) = xgroup_replay(argv, &told).filter(|r| r[2] == key) else {
            return false;
        };
        let (sub, group) = (argv.get(1).to_ascii_lowercase(), argv.get(3));
        let arg4: &[u8] = if argv.len() > 4 { argv.get(4) } else { b"" };
        let checked = self.checked_here(db, key, |g, at| match &sub[..] {
            b"create" if told.words[4].is_some() => missing_here(g, at, (stamp, told.words[4])),
            b"create" => stream_fact_here(g, at, (stamp, told.prev), |state, v| {
                let absent = !v.groups.contains_key(group) && !state.groups.contains_key(group);
                absent.then_some(None)
            }),
            _ => group_fact_here(g, at, (stamp, told.prev, group), |state, _, gv, gm| {
                let ok = match &sub[..] {
                    b"setid" => writes::check_setid(gm, &told),
                    b"createconsumer" => writes::check_createconsumer((gv, gm), &told, arg4),
                    b"delconsumer" => writes::check_delconsumer((gv, gm), &state.cc, &told, arg4),
                    b"destroy" => writes::check_destroy(Some(gm), &state.cc, &told),
                    _ => false,
                };
                ok.then(|| gm.consumers.get(arg4).copied())
            }),
        });
        let (version, part) = match checked {
            Ok(c) => c,
            Err(applied) => return applied,
        };
        let replay: Vec<&[u8]> = replay.iter().map(|a| &a[..]).collect();
        self.replay(db, stamp, &replay);
        let origin = AsOrigin {
            group,
            times: Vec::new(),
            consumer: told.words[3].map(|seen| (arg4, seen, part)),
            reset: told.resets[3],
        };
        if origin.consumer.is_some() || origin.reset.is_some() {
            self.as_the_origin(db, key, stamp, &origin);
        }
        self.settle_stream(db, key, stamp, version.max(stamp));
        true
    }
}
