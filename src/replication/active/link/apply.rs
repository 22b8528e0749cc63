//! The sans-IO pulling side of one connection ([`Link`]): the apply rule
//! (module doc of `active/mod.rs`) over the batches the peer sends, the
//! key states it asks for and how they apply, and what goes back to the
//! peer. Facts (`facts.rs`, `stream_facts.rs`) and joins (`merging.rs`)
//! are further `impl Link` blocks.

use std::collections::{HashMap, HashSet};

use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::Instant;

use super::{direct_ids, Hello, LinkState};
use crate::core::stats::WorkerStats;
use crate::keyspace::hlc::{unix_ms, Hlc};
use crate::keyspace::merge::groups::ReadTold;
use crate::protocol::Args;
use crate::replication::active::{
    applying, record, rejoin_refusal, serve, sim_hooks, state_fingerprint, update_quorum, Host,
    HostRef,
};
use crate::{log_notice, log_warning};
/// One connection's pulling side: the apply rule (module doc of `mod.rs`)
/// over the batches the peer sends, and what goes back to it. The socket
/// loop (`pump`) feeds it what it reads; it is also the simulator's seam
/// (tests/simulator.rs), which feeds it batches held in memory:
/// [`Link::open`] with the peer's answer to [`hello`](super::hello), then
/// [`Link::apply_bytes`] and [`Link::replies`] per delivery, [`closed`](super::closed)
/// when the connection ends.
pub struct Link {
    /// Owned, so that a link can outlive any borrow (the simulator keeps
    /// one per connection); a method that holds shards while it calls
    /// `&mut self` ones clones it first.
    pub(in crate::replication::active) node: HostRef,
    pub(super) st: Arc<LinkState>,
    pub(in crate::replication::active) clock: Hlc,
    stats: Arc<WorkerStats>,
    /// Still reading the snapshot (its bytes are not stream offsets).
    snapshot: bool,
    /// Keys whose state we asked for and not yet received.
    asked: HashSet<(usize, Vec<u8>)>,
    /// Keys asked for together (a unit's, a multi-key write's), by group:
    /// their states apply together once all came (`StateGroup`).
    grouped: HashMap<(usize, Vec<u8>), u64>,
    groups: HashMap<u64, StateGroup>,
    next_group: u64,
    /// When the last sealed batch was applied.
    pub(super) sealed_at: Instant,
    /// The client and reply buffer records run with, kept across records.
    client: crate::core::client::ClientState,
    out: crate::protocol::ReplyBuf,
    /// This connection's record decoding state (record.rs).
    coder: record::Coder,
    /// Scratch space kept across records: a write's bases and argument
    /// spans, and a record being forwarded.
    bases: Vec<crate::effects::Base>,
    facts: Vec<crate::effects::Fact>,
    spans: Vec<std::ops::Range<usize>>,
    fwd: Vec<u8>,
    /// The [`Active::direct_gen`](crate::replication::active::Active::direct_gen) the peer was last told of, and the
    /// offset last acknowledged.
    gen: u64,
    last_acked: u64,
    /// States a previous connection asked for in vain, asked again with
    /// the first replies.
    resend: Vec<(usize, Vec<u8>)>,
}

impl Link {
    /// The peer's answer to [`hello`](super::hello)'s LATTICE.PEER (`reply`, its first
    /// line): where the connection starts in its stream, and the link for
    /// it. `tools`: the clock and counters its writes run with.
    pub fn open(
        node: &HostRef,
        st: &Arc<LinkState>,
        tools: (Hlc, Arc<WorkerStats>),
        hello: &Hello,
        reply: &str,
    ) -> Result<Link, String> {
        let mut w = reply.split_whitespace();
        let (kind, sid, off) = (
            w.next(),
            w.next(),
            w.next().and_then(|o| o.parse::<u64>().ok()),
        );
        let peer_id = w.next().and_then(|p| u64::from_str_radix(p, 16).ok());
        let peer_slot = w.next().and_then(|s| s.parse::<u64>().ok());
        // +RESUME: our stream continues after the keys we lost (SINCE), which
        // come first, as a snapshot's do.
        let (kind, sid, off, peer_id) = match (kind, sid, off, peer_id) {
            (Some(k @ ("+CONTINUE" | "+RESUME" | "+FULL")), Some(sid), Some(off), Some(p)) => {
                (k, sid, off, p)
            }
            _ => return Err(format!("the peer refused: {reply}")),
        };
        let snapshot = kind != "+CONTINUE";
        // +RESUME for another stream: the peer restarted and sends the keys we
        // lack of its writes (and of origins we hear through it), then its new
        // stream (resume.rs).
        let by_stamp = kind == "+RESUME" && sid != hello.known;
        st.start_at(sid, off, !snapshot);
        st.met(peer_id, peer_slot);
        st.by_stamp.store(by_stamp, Release);
        if kind == "+FULL" {
            // A snapshot brings back whatever we lost too; the stamps of the
            // peer's writes count again from its end.
            *st.resume.lock() = None;
            st.own_write_stamp.store(0, Release);
            st.snapshots.fetch_add(1, Relaxed);
        } else {
            st.continues.fetch_add(1, Relaxed);
        }
        st.up.store(true, Release);
        let active = node.active();
        active.direct_gen.fetch_add(1, AcqRel);
        update_quorum(active, node.core());
        st.last_io_ms.store(unix_ms(), Relaxed);
        // After the five fields, a +FULL or a +RESUME by stamp says why we
        // could not continue (older peers send none).
        let why: Vec<&str> = w.collect();
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(": {}", why.join(" "))
        };
        log_notice!(
            "Active peer {}:{} {}{why}",
            st.host,
            st.port,
            match kind {
                "+FULL" => "sends a snapshot",
                "+RESUME" if by_stamp =>
                    "restarted: resumes with the keys this node lacks of its writes, then its new stream (no snapshot)",
                "+RESUME" if !why.is_empty() =>
                    "resumes by stamp, the keys this node lacks first (no snapshot)",
                "+RESUME" => "continues its stream after the keys this node lost",
                _ => "continues its stream",
            }
        );
        let mut link = Link {
            node: node.clone(),
            st: st.clone(),
            clock: tools.0,
            stats: tools.1,
            snapshot,
            asked: HashSet::new(),
            grouped: HashMap::new(),
            groups: HashMap::new(),
            next_group: 0,
            sealed_at: Instant::now(),
            client: crate::core::client::ClientState::new(0),
            out: crate::protocol::ReplyBuf::new(2),
            coder: record::Coder::new(peer_id),
            bases: Vec::new(),
            facts: Vec::new(),
            spans: Vec::new(),
            fwd: Vec::new(),
            gen: hello.gen,
            last_acked: 0,
            resend: Vec::new(),
        };
        // What the last connection asked for and did not get.
        let pending = std::mem::take(&mut *st.pending.lock());
        let mut resend = Vec::new();
        for keys in pending {
            link.want_states(keys, &mut resend);
        }
        link.resend = resend;
        link.st.asking.store(link.asked.len(), Release);
        Ok(link)
    }

    /// Applies every whole batch at the start of `buf` (the bytes the peer
    /// sent, as they arrived); returns the bytes used. Adds to `ask` the
    /// keys found diverged, whose state [`Self::replies`] asks for.
    pub fn apply_bytes(
        &mut self,
        buf: &[u8],
        ask: &mut Vec<(usize, Vec<u8>)>,
    ) -> Result<usize, String> {
        self.refuse_if_away_too_long()?;
        let mut used = 0;
        while let Some((next, records, len)) = record::next_batch(&buf[used..])? {
            let records = used + records.start..used + records.end;
            self.apply_batch(&buf[records], ask)?;
            used += len;
            self.st.next.store(next, Release);
            self.sealed_at = Instant::now();
        }
        self.st.asking.store(self.asked.len(), Release);
        Ok(used)
    }

    /// What goes back to the peer after applying: the states `ask` names
    /// (`LATTICE.STATE`), the origins we now hear directly if they changed
    /// (`LATTICE.DIRECT`), the offset applied if it moved or `ack_due`
    /// (`LATTICE.ACK`), our stable stamp if `stable_due` (`LATTICE.STABLE`).
    pub fn replies(
        &mut self,
        ask: Vec<(usize, Vec<u8>)>,
        ack_due: bool,
        stable_due: bool,
    ) -> Vec<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<Vec<u8>>> = std::mem::take(&mut self.resend)
            .into_iter()
            .chain(ask)
            .map(|(db, key)| vec![b"LATTICE.STATE".to_vec(), db.to_string().into(), key])
            .collect();
        let st = &self.st;
        if !self.snapshot {
            st.settle();
        }
        let active = self.node.active();
        let now_gen = active.direct_gen.load(Acquire);
        if now_gen != self.gen {
            // Our direct links changed: the peer forwards us only what we
            // do not hear from its origin directly.
            self.gen = now_gen;
            let ids = direct_ids(active, st);
            let mut argv = vec![b"LATTICE.DIRECT".to_vec()];
            argv.extend(ids.into_iter().map(String::into_bytes));
            out.push(argv);
        }
        let done = st.next.load(Acquire).saturating_sub(1);
        if done != self.last_acked || ack_due {
            out.push(vec![b"LATTICE.ACK".to_vec(), done.to_string().into()]);
            self.last_acked = done;
        }
        if stable_due {
            let stable = active.stability.stable.load(Relaxed).to_string();
            out.push(vec![b"LATTICE.STABLE".to_vec(), stable.into()]);
        }
        out
    }

    /// A peer that was away longer than the grace while tombstones were
    /// collected here anyway sends nothing that is applied (`stable.rs`).
    fn refuse_if_away_too_long(&self) -> Result<(), String> {
        let id = self.st.peer_id.load(Acquire);
        match rejoin_refusal(self.node.active(), self.node.core(), id) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    /// Applies the records of a batch whose checksum held.
    fn apply_batch(
        &mut self,
        records: &[u8],
        ask: &mut Vec<(usize, Vec<u8>)>,
    ) -> Result<(), String> {
        let mut r = record::Reader(records);
        while !r.0.is_empty() {
            let rec = self.coder.get(&mut r)?;
            self.record(&rec, ask)?;
        }
        Ok(())
    }

    /// One record (forwarded to our own peers when it is new here).
    fn record(
        &mut self,
        rec: &record::Rec<'_>,
        ask: &mut Vec<(usize, Vec<u8>)>,
    ) -> Result<(), String> {
        match rec.kind {
            record::WRITE => {
                let db = self.db_arg(rec.db)?;
                let keys = self.apply_write(rec)?;
                self.want_states(keys.into_iter().map(|k| (db, k)).collect(), ask);
                self.note_peer_write(rec);
            }
            record::UNIT => {
                let keys = self.apply_unit(rec)?;
                self.want_states(keys, ask);
                self.note_peer_write(rec);
            }
            record::STATE => {
                let (at, key, payload) = record::state_parts(rec.tail)?;
                let (db, stamp) = (self.db_arg(rec.db)?, self.checked_stamp(rec.stamp)?);
                // The answer to a state we asked for is the peer's own; a
                // state of another origin it forwards is not (taken for
                // one, it ended the wait, and the answer was never asked
                // again when the connection dropped: simulator seed 3711).
                let asked = (db, key.to_vec());
                let answer =
                    rec.origin == self.st.peer_id.load(Relaxed) && self.asked.remove(&asked);
                let group = if answer {
                    self.grouped.remove(&asked)
                } else {
                    None
                };
                match group {
                    Some(g) => self.hold_state(g, rec, stamp)?,
                    None => self.apply_state(db, key, (stamp, at), payload, rec),
                }
            }
            record::SNAP_END => {
                self.snapshot = false;
                log_notice!(
                    "Active peer {}:{}: snapshot merged",
                    self.st.host,
                    self.st.port
                );
            }
            _ => {
                // A ping: the peer's frontiers (stable.rs).
                let mut spans = std::mem::take(&mut self.spans);
                let words = record::argv_parts(rec.tail, &mut spans)?;
                let (link, waiting) = (self.st.key(), !self.asked.is_empty() || !ask.is_empty());
                let args = Args::new(words, &spans);
                self.node.active().stability.on_ping(&link, args, waiting);
                self.spans = spans;
            }
        }
        Ok(())
    }

    /// Asks for the states of `keys` (those of one write or unit, not
    /// asked for already): together, so that they apply together.
    fn want_states(&mut self, keys: Vec<(usize, Vec<u8>)>, ask: &mut Vec<(usize, Vec<u8>)>) {
        let new: Vec<_> = keys
            .into_iter()
            .filter(|k| !self.asked.contains(k))
            .collect();
        self.st.conflicts.fetch_add(new.len() as u64, Relaxed);
        if new.len() > 1 {
            let g = self.next_group;
            self.next_group += 1;
            let group = StateGroup {
                missing: new.len(),
                states: Vec::with_capacity(new.len()),
            };
            self.groups.insert(g, group);
            self.grouped.extend(new.iter().map(|k| (k.clone(), g)));
        }
        self.asked.extend(new.iter().cloned());
        ask.extend(new);
    }

    /// A state asked for in group `g`: kept until the group's last one
    /// comes, then all apply under one hold of their shards.
    fn hold_state(&mut self, g: u64, rec: &record::Rec<'_>, stamp: u64) -> Result<(), String> {
        let Some(group) = self.groups.get_mut(&g) else {
            return Ok(());
        };
        group.states.push(HeldState {
            origin: rec.origin,
            db: rec.db,
            stamp,
            tail: rec.tail.to_vec(),
        });
        group.missing -= 1;
        if group.missing > 0 {
            return Ok(());
        }
        let group = self.groups.remove(&g).unwrap_or_default();
        let node = self.node.clone();
        let ks = &node.core().keyspace;
        let mut targets = Vec::with_capacity(group.states.len());
        for h in &group.states {
            let (_, key, _) = record::state_parts(&h.tail)?;
            targets.push((h.db, ks.slot(key).shard));
        }
        let _hold = ks.hold(Some(&targets));
        for h in &group.states {
            let (at, key, payload) = record::state_parts(&h.tail)?;
            let rec = record::Rec {
                kind: record::STATE,
                origin: h.origin,
                seq: 0,
                db: h.db,
                stamp: h.stamp,
                tail: &h.tail,
            };
            self.apply_state_held(h.db, key, (h.stamp, at), payload, &rec);
        }
        Ok(())
    }

    /// Notes the stamp of a write of the peer's own from its stream (not
    /// a snapshot's flush): after the peer restarts, we ask for what we
    /// lack of its writes from there (`LinkState::own_write_stamp`).
    fn note_peer_write(&self, rec: &record::Rec<'_>) {
        if !self.snapshot && rec.origin == self.st.peer_id.load(Relaxed) {
            self.st.own_write_stamp.fetch_max(rec.stamp, Release);
        }
    }

    /// A record's stamp, refused when further ahead of our clock than
    /// `active-max-clock-skew`; one ahead of the wall clock raises the
    /// stamp floor, so that our later writes to the key follow it.
    fn checked_stamp(&self, stamp: u64) -> Result<u64, String> {
        let core = self.node.core();
        let now = crate::keyspace::hlc::stamp_clock_ms();
        let ms = crate::keyspace::hlc::stamp_ms(stamp);
        if ms > now {
            let max = core.hot.replication.max_clock_skew_ms.load(Relaxed);
            if ms - now > max {
                return Err(format!(
                    "a record is stamped {} ms ahead of this node's clock (active-max-clock-skew is {max} ms): check the clocks of both nodes",
                    ms - now
                ));
            }
            core.stamp_floor.fetch_max(stamp, Relaxed);
        }
        Ok(stamp)
    }

    fn db_arg(&self, db: usize) -> Result<usize, String> {
        if db >= self.node.core().keyspace.num_dbs() {
            return Err(format!(
                "the peer wrote to database {db}, which this node does not have"
            ));
        }
        Ok(db)
    }

    /// A write: applies it where every key has its base version; returns
    /// the keys that diverged and whose state we must ask for (the write is
    /// newer than what we hold).
    fn apply_write(&mut self, rec: &record::Rec<'_>) -> Result<Vec<Vec<u8>>, String> {
        let (origin, seq) = (rec.origin, rec.seq);
        let node = self.node.clone();
        let active = node.active();
        if origin == active.node_id.load(Relaxed) {
            return Ok(vec![]); // our own write, back through a ring
        }
        let stamp = self.checked_stamp(rec.stamp)?;
        let flushed_before = (seq == 0).then(|| flushed_at(&*node, rec.db));
        let (mut bases, mut facts, mut spans) = (
            std::mem::take(&mut self.bases),
            std::mem::take(&mut self.facts),
            std::mem::take(&mut self.spans),
        );
        let r = record::write_parts(stamp, rec.tail, (&mut bases, &mut facts), &mut spans)
            .and_then(|argv| {
                let argv = Args::new(argv, &spans);
                self.apply_parts(rec, stamp, (&bases, &facts), argv)
            });
        (self.bases, self.facts, self.spans) = (bases, facts, spans);
        let diverged = r?;
        // Forwarded whether or not it applied here (a peer of ours may hold
        // its bases), once.
        if seq != 0 && active.first_sight(origin, seq) && active.wanted(origin) {
            self.forward(rec);
        }
        // A snapshot's flush (seq 0) has no sequence number to be forwarded
        // once by: as a key state, it goes on when it changed something
        // here (the database's flush stamp moved), so it cannot loop, and a
        // peer that hears the flush's origin only through us gets it
        // (found by the simulator, seed 67).
        if let Some(before) = flushed_before {
            if flushed_at(&*node, rec.db) > before && active.wanted(origin) {
                self.forward(rec);
            }
        }
        Ok(diverged)
    }

    fn apply_parts(
        &mut self,
        rec: &record::Rec<'_>,
        stamp: u64,
        (bases, facts): (&[crate::effects::Base], &[crate::effects::Fact]),
        argv: Args,
    ) -> Result<Vec<Vec<u8>>, String> {
        let db = rec.db;
        if bases.iter().any(|&(i, _)| arg_index(i) >= argv.len()) {
            return Err("a record's base outside its arguments".into());
        }
        let node = self.node.clone();
        let ks = &node.core().keyspace;
        let targets: Vec<(usize, usize)> = bases
            .iter()
            .map(|&(i, _)| (db, ks.slot(argv.get(arg_index(i))).shard))
            .collect();
        // A write without keys (FLUSHDB, FLUSHALL) holds nothing: it locks
        // every shard itself, in order (an empty hold would have it lock
        // them as "outside the plan", logging each).
        let _hold = (!targets.is_empty()).then(|| ks.hold(Some(&targets)));
        // A delete's or an overwrite's record carries the states of the
        // keys it wrote (keyspace/merge/deletes.rs): joined, not replayed.
        if crate::keyspace::merge::deletes::carries_states(facts) {
            let ask = self.apply_states(db, stamp, (bases, facts), &argv);
            self.st.applied.fetch_add(1, Relaxed);
            return Ok(ask);
        }
        // A merging write that carries its fact applies it, with no round
        // trip; where it cannot (a gap), the key's state is asked for.
        if let ([(i, _)], false) = (bases, facts.is_empty()) {
            let key = argv.get(arg_index(*i));
            if self.apply_fact(db, key, stamp, facts, &argv) {
                self.st.applied.fetch_add(1, Relaxed);
                return Ok(vec![]);
            }
            return Ok(vec![key.to_vec()]);
        }
        let keys: Vec<(&[u8], u64, Local)> = bases
            .iter()
            .map(|&(i, want)| {
                let key = argv.get(arg_index(i));
                (key, want, local(&*node, db, key, i))
            })
            .collect();
        if keys
            .iter()
            .all(|(_, want, l)| (!l.merges || l.replays) && l.version == *want)
        {
            let flush = flushed_dbs(&argv, db, ks.num_dbs()).filter(|_| bases.is_empty());
            let survivors = flush.map(|dbs| self.flush_survivors(dbs, stamp));
            self.replay_args(db, stamp, argv);
            self.answer_states(survivors.unwrap_or_default());
            self.st.applied.fetch_add(1, Relaxed);
            return Ok(vec![]);
        }
        // Not applied: every key older than the write converges by its
        // state, not only those that diverged (the others would keep their
        // version here while the origin's moved on); a key that merges, by
        // its state whatever its version (keyspace/merge.rs).
        let want = keys
            .into_iter()
            .filter(|(_, _, l)| l.merges || newer(stamp, l.version))
            .map(|(key, _, _)| key.to_vec());
        Ok(want.collect())
    }

    /// A unit (a transaction's writes): applies all of them, in order and
    /// under one hold of every shard they touch, where every key has its
    /// first base version in the unit; else none, and returns the keys
    /// whose state we must ask for: all of the unit's keys older than it,
    /// so that the unit's keys converge together.
    fn apply_unit(&mut self, rec: &record::Rec<'_>) -> Result<Vec<(usize, Vec<u8>)>, String> {
        let node = self.node.clone();
        let active = node.active();
        if rec.origin == active.node_id.load(Relaxed) {
            return Ok(vec![]); // our own unit, back through a ring
        }
        let stamp = self.checked_stamp(rec.stamp)?;
        let mut members = Vec::new();
        record::unit_parts(stamp, rec.tail, &mut members)?;
        let mut writes = Vec::with_capacity(members.len());
        for m in &members {
            writes.push(UnitWrite::decode(m, self.db_arg(m.db)?)?);
        }
        let n = self.node.core().keyspace.num_dbs();
        let mut survivors = Vec::new();
        for w in writes.iter().filter(|w| w.bases.is_empty()) {
            if let Some(dbs) = flushed_dbs(&Args::new(w.argv, &w.spans), w.db, n) {
                survivors.extend(self.flush_survivors(dbs, w.stamp));
            }
        }
        let diverged = self.apply_unit_writes(stamp, &writes);
        self.answer_states(survivors);
        if rec.seq != 0 && active.first_sight(rec.origin, rec.seq) && active.wanted(rec.origin) {
            self.forward(rec); // whole, as one record
        }
        Ok(diverged)
    }

    fn apply_unit_writes(&mut self, stamp: u64, writes: &[UnitWrite<'_>]) -> Vec<(usize, Vec<u8>)> {
        let node = self.node.clone();
        let ks = &node.core().keyspace;
        // A write without keys (FLUSHDB, FLUSHALL, PUBLISH) may touch any
        // shard: the unit then holds them all, as such an EXEC does.
        let targets: Option<Vec<(usize, usize)>> =
            writes.iter().all(|w| !w.bases.is_empty()).then(|| {
                let keys = writes.iter().flat_map(UnitWrite::keys);
                keys.map(|(db, key, _, _)| (db, ks.slot(key).shard))
                    .collect()
            });
        let _hold = ks.hold(targets.as_deref());
        if let Some(diverged) = self.apply_unit_fact(writes) {
            return diverged;
        }
        // Each key's first base in the unit is the version it must have
        // here; a later write's base is an earlier write's stamp. A key that
        // merges converges by its state (keyspace/merge.rs).
        let mut seen = HashSet::new();
        let mut firsts: Vec<(usize, &[u8], u64, Local)> = Vec::new();
        for w in writes {
            for (db, key, want, i) in w.keys() {
                if seen.insert((db, key)) {
                    firsts.push((db, key, want, local(&*node, db, key, i)));
                }
            }
        }
        // A key merges if any write of the unit flagged it, not only its
        // first (a DEL then an RPUSH of a list: the RPUSH is the merging
        // write).
        for w in writes {
            for (db, key, _, i) in w.keys() {
                if i & crate::effects::MERGED_BASE != 0 {
                    let first = firsts.iter_mut().find(|f| f.0 == db && f.1 == key);
                    if let Some(f) = first {
                        f.3.merges = true;
                    }
                }
            }
        }
        if firsts
            .iter()
            .all(|(_, _, want, l)| (!l.merges || l.replays) && *want == l.version)
        {
            for w in writes {
                self.replay_args(w.db, w.stamp, Args::new(w.argv, &w.spans));
            }
            self.st.applied.fetch_add(writes.len() as u64, Relaxed);
            return vec![];
        }
        // Its writes without keys (a FLUSHDB in the transaction) apply as
        // they would alone, unconditionally: the states asked for below
        // bring only the unit's keys, and the flush must still drop the
        // others older than it (found by the simulator, seed 261).
        for w in writes.iter().filter(|w| w.bases.is_empty()) {
            self.replay_args(w.db, w.stamp, Args::new(w.argv, &w.spans));
        }
        firsts
            .into_iter()
            .filter(|(_, _, _, l)| l.merges || newer(stamp, l.version))
            .map(|(db, key, _, _)| (db, key.to_vec()))
            .collect()
    }

    /// Puts a peer's record in our stream, for our peers that do not hear
    /// its origin directly.
    fn forward(&mut self, rec: &record::Rec<'_>) {
        self.fwd.clear();
        record::encode_stored(&mut self.fwd, rec);
        self.node.active().append_foreign(&self.fwd);
    }

    /// A key state record: the key's whole state, applied if newer than ours.
    /// Forwarded when it changed the key here.
    fn apply_state(
        &mut self,
        db: usize,
        key: &[u8],
        s: (u64, u64),
        payload: &[u8],
        rec: &record::Rec<'_>,
    ) {
        let node = self.node.clone();
        let ks = &node.core().keyspace;
        let _hold = ks.hold(Some(&[(db, ks.slot(key).shard)]));
        self.apply_state_held(db, key, s, payload, rec);
    }

    /// [`Self::apply_state`] with the key's shard held.
    fn apply_state_held(
        &mut self,
        db: usize,
        key: &[u8],
        s: (u64, u64),
        payload: &[u8],
        rec: &record::Rec<'_>,
    ) {
        let (stamp, at) = s;
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let merge = record::state_merge(rec.tail).unwrap_or_default();
        let (local, merges) = {
            let g = ks.db(db).lock(slot.shard);
            (g.version_of(slot.hash, key), g.merges(key))
        };
        // Seen here for the first time: not a snapshot's (a peer that takes
        // one hears its origin), nor our own back through a ring. Asked
        // only where the state would go on (a pair or a mesh forwards none).
        let active = self.node.active();
        let first_sight = || {
            !self.snapshot
                && rec.origin != active.node_id.load(Relaxed)
                && active.first_state_sight(state_fingerprint(rec.origin, db, key, stamp, merge))
        };
        let wanted = active.wanted(rec.origin);
        let first = wanted && first_sight();
        if let Some(changed) = self.merge_state(db, key, s, (payload, merge), merges) {
            if (changed || first) && wanted {
                self.forward(rec);
            }
            return;
        }
        if !newer(stamp, local) && !self.wins_tie(db, key, (stamp, local), (payload, merge)) {
            // Not newer here, yet maybe newer at a peer that asked us and
            // took our older answer: we forwarded a write we could not
            // apply, and reached its version by another path before the
            // origin's state came (simulator seed 19296).
            if first {
                self.forward(rec);
            }
            return;
        }
        if payload.is_empty() {
            let collected = self.node.active().stability.collected_below(stamp);
            if merge.is_empty() && local == 0 && collected {
                // A late copy of a deletion collected here (item 35).
                return;
            }
            self.delete_at(db, key, stamp);
        } else {
            self.restore_at(db, key, (at, payload), stamp);
        }
        // The key is the peer's now, and so is its merge state: a later
        // state of the peer's then joins as the same history (seed 45).
        self.take_merge_state(db, key, merge);
        if self.node.active().wanted(rec.origin) {
            self.forward(rec);
        }
    }

    /// Two states of a key at one version that do not merge and differ in
    /// type (a counter made of a list's deletion on one node, the list's
    /// tombstone on another; simulator seed 21846), or two deletions of
    /// different families: the greater by
    /// content (present before absent, then the DUMP payload, then the
    /// merge state) wins on every node, as a tie of stamps is broken by
    /// slot. Where ours wins, it goes to our peers, so that the node that
    /// sent the lesser learns it. The key's shard is held.
    fn wins_tie(
        &mut self,
        db: usize,
        key: &[u8],
        (stamp, local): (u64, u64),
        theirs: (&[u8], &[u8]),
    ) -> bool {
        if stamp != local || stamp == 0 {
            return false;
        }
        let ks = &self.node.core().keyspace;
        let slot = ks.slot(key);
        let ours = {
            let mut g = ks.db(db).lock(slot.shard);
            g.merge_meta_now(slot.hash, key);
            let payload = g.get_raw(slot.hash, key).map_or_else(Vec::new, |e| {
                crate::persistence::rdb::encode::dump_payload(&e.value, false)
            });
            (payload, serve::merge_state(&g, key))
        };
        // Only between types (a DUMP payload's first byte, absent: none):
        // one type at one version is one write, whose copies may differ in
        // bytes that are not its content (a stream's consumer seen-times).
        if theirs.0.first() == ours.0.first() && !ours.0.is_empty() {
            return false;
        }
        let rank = |(payload, merge): (&[u8], &[u8])| {
            (!payload.is_empty(), payload.to_vec(), merge.to_vec())
        };
        match rank(theirs).cmp(&rank((&ours.0, &ours.1))) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => {
                serve::answer_state(&*self.node, db, key);
                false
            }
            std::cmp::Ordering::Equal => false,
        }
    }

    /// Runs a record's command with its stamp, as the origin's write.
    pub(in crate::replication::active) fn replay_args(
        &mut self,
        db: usize,
        stamp: u64,
        args: Args,
    ) {
        let mut r = crate::commands::Replayer {
            host: self.node.admin(),
            clock: &mut self.clock,
            stats: &self.stats,
            client: &mut self.client,
            out: &mut self.out,
        };
        let merge_applying = crate::keyspace::merge::fact::applying;
        if let Err(err) = applying(|| merge_applying(|| r.replay(db, stamp, args))) {
            log_warning!("A record from an active peer failed: {err}");
        }
    }

    /// [`Self::replay_args`] for a command made here (a key state).
    pub(in crate::replication::active) fn replay(&mut self, db: usize, stamp: u64, argv: &[&[u8]]) {
        let owned = crate::protocol::OwnedArgs::new(argv);
        self.replay_args(db, stamp, owned.args());
    }

    /// Replaces `key` with a DUMP payload expiring at `at` (0: never), as a
    /// write stamped `stamp`: `RESTORE key at payload REPLACE ABSTTL`.
    pub(in crate::replication::active) fn restore_at(
        &mut self,
        db: usize,
        key: &[u8],
        (at, payload): (u64, &[u8]),
        stamp: u64,
    ) {
        let at = at.to_string();
        let argv: [&[u8]; 6] = [
            b"RESTORE",
            key,
            at.as_bytes(),
            payload,
            b"REPLACE",
            b"ABSTTL",
        ];
        self.replay(db, stamp, &argv);
    }
}

impl Drop for Link {
    /// The connection ends: the states asked for and not received are
    /// asked again by the next one, grouped as they were (the states of a
    /// group that did arrive are held here and go with the link).
    fn drop(&mut self) {
        let mut groups: HashMap<u64, Vec<(usize, Vec<u8>)>> = HashMap::new();
        let mut pending = Vec::new();
        for k in &self.asked {
            match self.grouped.get(k) {
                Some(g) => groups.entry(*g).or_default().push(k.clone()),
                None => pending.push(vec![k.clone()]),
            }
        }
        for (g, mut keys) in groups {
            let held = self.groups.get(&g).map_or(&[][..], |h| &h.states[..]);
            for h in held {
                if let Ok((_, key, _)) = record::state_parts(&h.tail) {
                    keys.push((h.db, key.to_vec()));
                }
            }
            keys.sort();
            pending.push(keys);
        }
        // In a fixed order: the states then come in one (the simulator
        // replays a run exactly).
        pending.sort();
        self.st.pending.lock().extend(pending);
    }
}

/// A key state that waits for the other states of its group.
struct HeldState {
    origin: u64,
    db: usize,
    stamp: u64,
    tail: Vec<u8>,
}

/// The states of keys asked for together, gathered until the last comes.
#[derive(Default)]
struct StateGroup {
    missing: usize,
    states: Vec<HeldState>,
}

/// A write of a unit, decoded.
struct UnitWrite<'a> {
    db: usize,
    stamp: u64,
    bases: Vec<crate::effects::Base>,
    argv: &'a [u8],
    spans: Vec<std::ops::Range<usize>>,
    /// Its fact (a consumer group read's, on its first write: DECISIONS 240).
    facts: Vec<crate::effects::Fact>,
}

impl<'a> UnitWrite<'a> {
    fn decode(m: &record::Member<'a>, db: usize) -> Result<Self, String> {
        let (mut bases, mut spans) = (Vec::new(), Vec::new());
        // A unit's writes apply all or none by their bases; their facts
        // are not used (a conflict asks for the keys' states), but for a
        // consumer group read's (`stream_facts.rs`).
        let mut facts = Vec::new();
        let argv = record::write_parts(m.stamp, m.tail, (&mut bases, &mut facts), &mut spans)?;
        if bases.iter().any(|&(i, _)| arg_index(i) >= spans.len()) {
            return Err("a record's base outside its arguments".into());
        }
        Ok(UnitWrite {
            db,
            stamp: m.stamp,
            bases,
            argv,
            spans,
            facts,
        })
    }

    /// Its keys: (db, key, base version, base index with its flags).
    fn keys(&self) -> impl Iterator<Item = (usize, &'a [u8], u64, u32)> + '_ {
        let argv = self.argv;
        self.bases.iter().map(move |&(i, v)| {
            let key = &argv[self.spans[arg_index(i)].clone()];
            (self.db, key, v, i)
        })
    }
}

impl Link {
    /// A unit whose writes are consumer group reads' or a claim's records
    /// (`stream_facts.rs`): per key a run of its writes, the first carrying
    /// the fact (a read of several streams: several runs). None where it
    /// is not one; else the keys to ask for (none where all applied).
    fn apply_unit_fact(&mut self, writes: &[UnitWrite<'_>]) -> Option<Vec<(usize, Vec<u8>)>> {
        // Per stream read (a read of several streams: one run per key, each
        // led by its fact, DECISIONS 285), the run's key and its writes.
        let mut runs: Vec<(&[u8], &[UnitWrite<'_>])> = Vec::new();
        let mut rest = writes;
        while let Some(first) = rest.first() {
            let key = unit_fact_key(first, writes[0].stamp)?;
            let n = rest
                .iter()
                .take_while(|w| w.facts.is_empty() || std::ptr::eq(*w, first));
            let n = n
                .take_while(|w| w.keys().all(|(_, k, _, _)| k == key))
                .count();
            let same = |w: &UnitWrite| (w.db, w.stamp) == (first.db, first.stamp);
            if !rest[..n].iter().all(same) {
                return None;
            }
            runs.push((key, &rest[..n]));
            rest = &rest[n..];
        }
        let mut asks = Vec::new();
        for (key, run) in runs {
            let args: Vec<Args> = (run.iter()).map(|w| Args::new(w.argv, &w.spans)).collect();
            let (db, first) = (run[0].db, &run[0]);
            if self.apply_group_read(db, key, first.stamp, &first.facts, &args) {
                self.st.applied.fetch_add(run.len() as u64, Relaxed);
            } else {
                asks.push((db, key.to_vec()));
            }
        }
        Some(asks)
    }
}

/// The key of a unit's write `w` that leads a group read's or claim's
/// records with their fact (an XCLAIM, or a NOACK read's XGROUP), of the
/// unit's `stamp`; None where it is not one (a transaction's writes: their
/// facts are not used).
fn unit_fact_key<'a>(w: &UnitWrite<'a>, stamp: u64) -> Option<&'a [u8]> {
    if w.facts.is_empty() || w.stamp != stamp {
        return None;
    }
    let &[(i, _)] = &w.bases[..] else {
        return None;
    };
    let name = Args::new(w.argv, &w.spans).get(0);
    let noack = || ReadTold::decode(&w.facts).is_some_and(|t| t.noack.is_some());
    let leads =
        name.eq_ignore_ascii_case(b"xclaim") || (name.eq_ignore_ascii_case(b"xgroup") && noack());
    if !leads {
        return None;
    }
    Some(&w.argv[w.spans.get(arg_index(i))?.clone()])
}

/// The databases a FLUSHDB (`db`) or FLUSHALL (all `n`) record empties.
fn flushed_dbs(argv: &Args, db: usize, n: usize) -> Option<std::ops::Range<usize>> {
    let name = argv.get(0);
    if name.eq_ignore_ascii_case(b"flushdb") {
        Some(db..db + 1)
    } else if name.eq_ignore_ascii_case(b"flushall") {
        Some(0..n)
    } else {
        None
    }
}

/// A base's argument index, without its flags.
fn arg_index(i: u32) -> usize {
    (i & !crate::effects::MERGED_BASE) as usize
}

/// A key as a record finds it here.
struct Local {
    /// Its version (entry, tombstone or 0).
    version: u64,
    /// It merges (keyspace/merge.rs), here or, as the record's base says,
    /// at the origin: its state is merged, the write is not replayed.
    merges: bool,
    /// A stream, with stream facts off: where the base matches, the write
    /// replays as it is, an XADD with its ID, giving the origin's entries
    /// and merge state (keyspace/merge/stream.rs); else its state is
    /// merged. Not a deleted key: nodes may hold different merge states at
    /// one tombstone (a flush leaves the states of the keys it removed), so
    /// the write that makes the stream again joins states (simulator seed
    /// 4626). With them on, never: a fact applied where the key moved
    /// leaves one version naming two contents (DECISIONS 182).
    replays: bool,
}

/// How `key`, a record's base `i`, is here; its shard must be held by this
/// thread.
fn local(node: &dyn Host, db: usize, key: &[u8], i: u32) -> Local {
    let ks = &node.core().keyspace;
    let slot = ks.slot(key);
    let g = ks.db(db).lock(slot.shard);
    Local {
        version: g.version_of(slot.hash, key),
        merges: i & crate::effects::MERGED_BASE != 0 || g.merges(key),
        replays: !crate::keyspace::merge::stream::STREAM_FACTS
            && g.get_raw(slot.hash, key)
                .is_some_and(|e| matches!(e.value, crate::keyspace::Value::Stream(_))),
    }
}

/// Whether a record stamped `stamp` is newer than the key's `local`
/// version: the apply rule's one order, the stamp as a number (its time,
/// then its logical count, then the writing node's slot: a tie of time is
/// broken by the slot, the same way on every node).
fn newer(stamp: u64, local: u64) -> bool {
    // The simulator may put another order here, on its thread only.
    if let Some(order) = sim_hooks::stamp_order() {
        return order(stamp, local);
    }
    stamp > local
}

/// The stamp of the last flush of `db` here (0: none).
fn flushed_at(node: &dyn Host, db: usize) -> u64 {
    let ks = &node.core().keyspace;
    (0..crate::keyspace::SHARDS)
        .map(|i| ks.db(db).lock(i).flushed_at())
        .max()
        .unwrap_or(0)
}
