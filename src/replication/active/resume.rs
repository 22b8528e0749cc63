//! Where each link stood in its peer's stream, kept with the data so that
//! a restarted node continues its peers' streams instead of taking a
//! snapshot of each (docs/ACTIVE-ACTIVE-DESIGN.md, "Restart"; DECISIONS 48).
//!
//! A link's *position* is the peer's stream id and the next offset we want
//! from it. It is saved only while the link is *settled* (every record
//! before that offset, and every key state of a snapshot, is applied here),
//! as an aux field of each RDB file we write, taken at the snapshot's cut
//! (`lattice-link`, one per link: `<host> <port> <peer node id> <stream id>
//! <next offset> <our node slot>`), and in the AOF as the same field in an annotation,
//! written when it changed (at most once a second, persistence's cron) and
//! for every link at the top of a rewritten base. Records applied after the
//! position was taken and also in the data are harmless to apply again: a
//! write applies only on its exact base versions and asks for a key's
//! state only when newer than the key here, and a key state applies only
//! when newer.
//!
//! At start the loaded positions wait in [`Active::saved_links`]; the link
//! to the same host and port takes its own (`take`). Its first handshake
//! asks to continue from it, with `SINCE <stamp> <slot>`: the peer also
//! sends the state of every key whose version this node made (the slot our
//! stamps carried) at or after that stamp, the writes of ours the files had not kept yet (after the cut, or
//! the AOF's unsynced tail) which the peer received before we stopped.
//!
//! The other direction (DECISIONS 51): our stream is new at each start, so
//! a peer that pulled from the previous one cannot continue by offset. What
//! it lacks of that stream is our own writes it did not apply, all stamped
//! with our slot, and what we forwarded to it of origins it does not pull
//! from directly. Its link remembers the newest stamp of our own writes it
//! applied (`LinkState::own_write_stamp`, saved here too) and asks
//! `FROM-ORIGIN <our node id> <stamp> <slots>`; we answer `+RESUME` and send
//! the states of our slot's keys and tombstones stamped since that stamp
//! (or since our files' newest, if older) less [`OWN_WRITES_MARGIN_MS`],
//! every key of an origin it does not hear directly (not one of `<slots>`
//! or its own), and every key whose state we answered at another node's
//! version since (its own included: `Shard::answered`, DECISIONS 334),
//! then our stream, as after a snapshot ([`origin_filter`]).

use std::collections::HashSet;
use std::sync::Arc;

use super::Active;
use crate::core::client::{FromOrigin, PeerRequest};
use crate::keyspace::hlc::{make_stamp, stamp_ms, stamp_node};

/// The aux field (and AOF annotation) holding one link's position.
pub(crate) const AUX_LINK: &str = "lattice-link";

/// The aux field (and AOF annotation at a new base) holding the sequence
/// number of our last record, so that a restart numbers on above it even
/// where the clock went back since the last start (our sequence numbers
/// start at the start time; peers forward only what passes the highest
/// they saw of us, `Active::first_sight`: simulator seed 1500, a clock
/// 12 s ahead at the first start and back at the restart).
pub(crate) const AUX_SEQ: &str = "lattice-seq";

/// How far before the newest stamp loaded our lost writes may be stamped:
/// a write stamped just before another can reach the AOF just after it.
const LOST_WRITES_MARGIN_MS: u64 = 1000;

/// How far before the newest stamp of our own writes a peer applied our
/// writes it did not apply may be stamped. Our stream does not hold our
/// writes in stamp order: each worker thread has its own clock, and a write
/// is stamped before it is appended (a command's run under its shard lock
/// in between); a key state the peer asked for lands a round trip after the
/// write that made it ask. All of that is far below a second; as in
/// [`LOST_WRITES_MARGIN_MS`], a second more of keys costs little.
const OWN_WRITES_MARGIN_MS: u64 = 1000;

/// One link's position, as saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedLink {
    pub host: String,
    pub port: u16,
    /// The peer's node id (0: unknown); for the log, the match is by
    /// host and port.
    pub node_id: u64,
    pub stream_id: String,
    pub next: u64,
    /// The slot our stamps carried: our keys the peer sends back on resume
    /// are those stamped with it (`node-slot` may change at a restart).
    pub own_slot: u64,
    /// The newest stamp of the peer's own writes applied through the link
    /// (0: none since its last snapshot): after the peer restarts, it sends
    /// back what we lack of its writes from there (`FROM-ORIGIN`).
    pub own_write_stamp: u64,
}

impl SavedLink {
    /// The aux field's value.
    pub fn encode(&self) -> String {
        format!(
            "{} {} {:016x} {} {} {} {}",
            self.host,
            self.port,
            self.node_id,
            self.stream_id,
            self.next,
            self.own_slot,
            self.own_write_stamp
        )
    }

    /// Parses [`Self::encode`]'s form (without the last field, as written
    /// before DECISIONS 51: no stamp); None if malformed.
    pub fn parse(v: &[u8]) -> Option<SavedLink> {
        let s = std::str::from_utf8(v).ok()?;
        let mut w = s.split(' ');
        let link = SavedLink {
            host: w.next().filter(|h| !h.is_empty())?.to_string(),
            port: w.next()?.parse().ok()?,
            node_id: u64::from_str_radix(w.next()?, 16).ok()?,
            stream_id: w.next().filter(|i| !i.is_empty() && *i != "?")?.to_string(),
            next: w.next()?.parse().ok()?,
            own_slot: w.next()?.parse().ok()?,
            own_write_stamp: w.next().map_or(Some(0), |v| v.parse().ok())?,
        };
        w.next().is_none().then_some(link)
    }
}

/// The aux fields of every settled link (at a snapshot's cut); `slot` is
/// the one our stamps carry.
pub(crate) fn aux_fields(active: &Active, slot: u64) -> Vec<(String, String)> {
    let mut aux: Vec<_> = (active.links.lock().iter())
        .filter_map(|l| l.position(slot))
        .map(|p| (AUX_LINK.to_string(), p.encode()))
        .collect();
    aux.push((AUX_SEQ.to_string(), active.seq.lock().to_string()));
    aux
}

/// The AOF's annotations: every settled link's position if `all` (a new
/// base), else those that changed since they were last noted.
pub(crate) fn aof_notes(active: &Active, slot: u64, all: bool) -> Vec<(String, String)> {
    let links = active.links.lock();
    let mut notes = Vec::new();
    for l in links.iter() {
        let Some(p) = l.position(slot) else { continue };
        let v = p.encode();
        if l.note_if_changed(&v) || all {
            notes.push((AUX_LINK.to_string(), v));
        }
    }
    if all {
        notes.push((AUX_SEQ.to_string(), active.seq.lock().to_string()));
    }
    notes
}

/// The positions loaded, until their links take them.
#[derive(Default)]
pub struct Loaded {
    links: Vec<SavedLink>,
    /// The stamp from which peers send back our keys ([`lost_writes_since`]
    /// of the stamp floor right after loading).
    lost_since: u64,
    /// The stamp floor when active replication started, after loading (None
    /// before): no write of ours since the start is stamped at or below it.
    start_floor: Option<u64>,
    /// The highest sequence number of ours the data notes ([`AUX_SEQ`]).
    pub seq: u64,
    /// The stamps of the tombstones the load left for keys that expired
    /// while we were stopped: writes of ours since the start, stamped below
    /// `start_floor` (right after each key's version, persistence/load.rs).
    deleted_at_load: Arc<HashSet<u64>>,
}

/// After loading: the stamps of the deletions the load made, which a peer
/// resuming our stream gets whatever its stamp (simulator seed 21491: a
/// chain whose middle node restarted, its expired key's tombstone never
/// reached the far end).
pub(crate) fn note_load_deletions(active: &Active, stamps: Vec<u64>) {
    if stamps.is_empty() {
        return;
    }
    let mut loaded = active.saved_links.lock();
    Arc::make_mut(&mut loaded.deleted_at_load).extend(stamps);
}

/// At start, after loading: the stamp floor our writes since follow.
pub(crate) fn note_start(active: &Active, floor: u64) {
    active.saved_links.lock().start_floor = Some(floor);
}

/// After loading: the positions the data holds (the last one per host and
/// port wins: the AOF notes each change), for the links `start` creates;
/// `floor` is the stamp floor the load left.
pub(crate) fn restore(active: &Active, aux: &[(Vec<u8>, Vec<u8>)], floor: u64) {
    let mut loaded = active.saved_links.lock();
    loaded.lost_since = lost_writes_since(floor);
    for (_, v) in aux.iter().filter(|(k, _)| k == AUX_SEQ.as_bytes()) {
        let seq = std::str::from_utf8(v).ok().and_then(|v| v.parse().ok());
        loaded.seq = loaded.seq.max(seq.unwrap_or(0));
    }
    let saved = &mut loaded.links;
    for (k, v) in aux.iter().filter(|(k, _)| k == AUX_LINK.as_bytes()) {
        let Some(link) = SavedLink::parse(v) else {
            crate::log_warning!(
                "Ignoring a malformed {} field: {}",
                String::from_utf8_lossy(k),
                String::from_utf8_lossy(v)
            );
            continue;
        };
        saved.retain(|s| !(s.host == link.host && s.port == link.port));
        saved.push(link);
    }
}

/// The loaded position of the link to `host:port`, taken (each is used
/// once, by the link created at start), and the stamp from which the peer
/// must send back our keys.
pub(crate) fn take(active: &Active, host: &str, port: u16) -> Option<(SavedLink, u64)> {
    let mut loaded = active.saved_links.lock();
    let links = &mut loaded.links;
    let i = links
        .iter()
        .position(|s| s.host == host && s.port == port)?;
    Some((links.swap_remove(i), loaded.lost_since))
}

/// Which key states a peer that cannot continue our stream as it is gets
/// first: those stamped with a slot of `since` at or after its stamp, and
/// with `others_but`, those of every slot neither in `since` nor in it.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyFilter {
    pub since: Vec<(u64, u64)>,
    pub others_but: Option<HashSet<u64>>,
    /// Stamps sent whatever `since` says (`Loaded::deleted_at_load`).
    pub exact: Arc<HashSet<u64>>,
}

impl KeyFilter {
    /// Keys stamped with `slot` at or after `since`, only.
    pub(crate) fn slot_since(slot: u64, since: u64) -> KeyFilter {
        KeyFilter {
            since: vec![(slot, since)],
            ..KeyFilter::default()
        }
    }

    /// Whether a key (or a flush) stamped `stamp` is sent.
    pub(crate) fn wants(&self, stamp: u64) -> bool {
        if self.exact.contains(&stamp) {
            return true;
        }
        let slot = stamp_node(stamp);
        let mut listed = false;
        for &(s, since) in &self.since {
            if s == slot {
                if stamp >= since {
                    return true;
                }
                listed = true;
            }
        }
        !listed
            && self
                .others_but
                .as_ref()
                .is_some_and(|but| !but.contains(&slot))
    }
}

/// What a peer whose position in our stream we cannot continue (we
/// restarted, or trimmed it) lacks of it, by stamp (`FROM-ORIGIN`), or
/// None if it must take a snapshot: it pulled from another node at our
/// address (our id differs), or applied none of our writes since its last
/// snapshot of us. `me`: our node id and slot. With `SINCE` (it restarted
/// too), its own keys it may have lost as well.
pub(crate) fn origin_filter(
    active: &Active,
    me: (u64, u64),
    req: &PeerRequest,
) -> Option<KeyFilter> {
    let from = req.from_origin.as_ref()?;
    if from.node_id != me.0 || from.stamp == 0 {
        return None;
    }
    let before = |s: u64| make_stamp(stamp_ms(s).saturating_sub(OWN_WRITES_MARGIN_MS), 0, 0);
    let mut f = KeyFilter::default();
    // Our writes it did not apply: stamped (with the slot it saw) after the
    // last it did, less the margin.
    f.since.push((stamp_node(from.stamp), before(from.stamp)));
    if req.stream_id != active.stream_id {
        // We restarted: and every write we made since, stamped after the
        // floor we started at (before the above if our stamps had run
        // ahead of the clock and our files lost the last of them).
        let loaded = active.saved_links.lock();
        f.since.push((me.1, loaded.start_floor.unwrap_or(0)));
        f.exact = loaded.deleted_at_load.clone();
    }
    f.since.extend(req.lost_since);
    // Origins it hears only through us: what we forwarded of them and it
    // did not get is in our data only. Its own keys it has (or `SINCE`).
    let mut but: HashSet<u64> = from.direct_slots.iter().copied().collect();
    but.insert(req.slot);
    f.others_but = Some(but);
    Some(f)
}

/// `FROM-ORIGIN`'s three arguments: the peer's node id, the stamp, and
/// the slots we hear directly (comma-separated; `-`: none).
pub(crate) fn from_origin_args(from: &FromOrigin) -> [String; 3] {
    let slots: Vec<String> = from.direct_slots.iter().map(u64::to_string).collect();
    [
        format!("{:016x}", from.node_id),
        from.stamp.to_string(),
        if slots.is_empty() {
            "-".into()
        } else {
            slots.join(",")
        },
    ]
}

/// Parses [`from_origin_args`]' form; None if malformed.
pub(crate) fn parse_from_origin(id: &[u8], stamp: &[u8], slots: &[u8]) -> Option<FromOrigin> {
    let text = |b| std::str::from_utf8(b).ok();
    let slots = text(slots)?;
    let direct_slots = match slots {
        "-" => Vec::new(),
        _ => slots
            .split(',')
            .map(|s| s.parse().ok())
            .collect::<Option<_>>()?,
    };
    Some(FromOrigin {
        node_id: u64::from_str_radix(text(id).filter(|i| i.len() == 16)?, 16).ok()?,
        stamp: text(stamp)?.parse().ok()?,
        direct_slots,
    })
}

/// The stamp from which a peer must send us our own keys back: the newest
/// stamp loaded (`floor`, the stamp floor after loading) less a margin.
/// Our writes the files did not keep were stamped after it.
fn lost_writes_since(floor: u64) -> u64 {
    make_stamp(stamp_ms(floor).saturating_sub(LOST_WRITES_MARGIN_MS), 0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_reads_back_as_written() {
        let p = SavedLink {
            host: "10.0.0.7".into(),
            port: 6380,
            node_id: 0xfeed,
            stream_id: "9e662c90e0d734a24ea48cb86d6f16e2cdcc8791".into(),
            next: 3425,
            own_slot: 17,
            own_write_stamp: 7_000_000_017,
        };
        assert_eq!(SavedLink::parse(p.encode().as_bytes()), Some(p.clone()));
        // As written before the stamp was saved: none.
        let old = SavedLink::parse(b"10.0.0.7 6380 000000000000feed sid 3425 17").unwrap();
        assert_eq!(old.own_write_stamp, 0);
    }

    #[test]
    fn a_key_filter_sends_a_slots_keys_since_its_stamp_and_other_slots_unless_excluded() {
        let at = |ms: u64, slot: u64| make_stamp(ms, 0, slot);
        let f = KeyFilter {
            since: vec![(1, at(100, 0)), (1, at(300, 0)), (2, at(200, 0))],
            others_but: Some([3].into()),
            exact: Arc::new([at(5, 1)].into()),
        };
        assert!(f.wants(at(5, 1)), "a deletion made at load");
        assert!(f.wants(at(100, 1)) && !f.wants(at(99, 1)));
        assert!(f.wants(at(200, 2)) && !f.wants(at(150, 2)));
        assert!(!f.wants(at(500, 3)), "a slot heard directly");
        assert!(f.wants(at(1, 4)), "an origin heard only through us");
        let only = KeyFilter::slot_since(2, at(200, 0));
        assert!(only.wants(at(200, 2)) && !only.wants(at(500, 4)));
    }

    #[test]
    fn from_origin_reads_back_as_written() {
        for slots in [vec![], vec![4, 1023]] {
            let f = FromOrigin {
                node_id: 0xabc,
                stamp: 99,
                direct_slots: slots,
            };
            let [id, stamp, slots] = from_origin_args(&f);
            let back = parse_from_origin(id.as_bytes(), stamp.as_bytes(), slots.as_bytes());
            assert_eq!(back, Some(f));
        }
        assert_eq!(parse_from_origin(b"abc", b"1", b"-"), None);
        assert_eq!(parse_from_origin(b"0000000000000abc", b"1", b"x"), None);
    }

    fn request(stream_id: &str, from: Option<FromOrigin>) -> PeerRequest {
        PeerRequest {
            node_id: 0xb,
            stream_id: stream_id.into(),
            offset: 5,
            slot: 2,
            direct: vec![],
            lost_since: Some((2, make_stamp(50, 0, 0))),
            from_origin: from,
        }
    }

    #[test]
    fn a_peer_resumes_from_the_stamp_of_our_writes_it_applied() {
        let active = Active::new("new".into());
        note_start(&active, make_stamp(25_000, 0, 1));
        let me = (0xa, 1);
        let from = |node_id, stamp| FromOrigin {
            node_id,
            stamp,
            direct_slots: vec![3],
        };
        // Another node at our address, or nothing applied: a snapshot.
        let other = request("old", Some(from(0xeeee, make_stamp(20_000, 0, 1))));
        assert!(origin_filter(&active, me, &other).is_none());
        assert!(origin_filter(&active, me, &request("old", Some(from(0xa, 0)))).is_none());
        assert!(origin_filter(&active, me, &request("old", None)).is_none());
        let f = origin_filter(
            &active,
            me,
            &request("old", Some(from(0xa, make_stamp(20_000, 0, 1)))),
        );
        let f = f.unwrap();
        assert!(f.wants(make_stamp(19_000, 0, 1)) && !f.wants(make_stamp(18_999, 5, 1)));
        assert!(f.wants(make_stamp(50, 0, 2)) && !f.wants(make_stamp(49, 0, 2)));
        assert!(!f.wants(make_stamp(30_000, 0, 3)) && f.wants(make_stamp(1, 0, 4)));
        // Our writes since we started are sent even if stamped before.
        let newer = request("old", Some(from(0xa, make_stamp(90_000, 0, 1))));
        let f = origin_filter(&active, me, &newer).unwrap();
        assert!(f.wants(make_stamp(25_001, 0, 1)) && !f.wants(make_stamp(24_000, 0, 1)));
        // Our stream, trimmed: our writes since the stamp only.
        let trimmed = request("new", Some(from(0xa, make_stamp(90_000, 0, 1))));
        let f = origin_filter(&active, me, &trimmed).unwrap();
        assert!(!f.wants(make_stamp(25_001, 0, 1)) && f.wants(make_stamp(89_000, 0, 1)));
    }

    #[test]
    fn malformed_positions_are_refused() {
        for bad in [
            "",
            "h 1 ff sid 10",
            "h 1 ff sid 10 3 extra",
            "h 70000 ff sid 10 3",
            "h 1 zz sid 10 3",
            "h 1 ff ? 10 3",
        ] {
            assert_eq!(SavedLink::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn the_last_position_of_a_peer_wins_and_is_taken_once() {
        let active = Active::new("x".into());
        let at = |next: u64| {
            let v = format!("h 1 ff sid {next} 3");
            (AUX_LINK.as_bytes().to_vec(), v.into_bytes())
        };
        let aux = [at(10), at(20), (b"other".to_vec(), b"1".to_vec())];
        restore(&active, &aux, 0);
        assert_eq!(take(&active, "h", 1).map(|s| s.0.next), Some(20));
        assert_eq!(take(&active, "h", 1), None);
    }

    /// Our last sequence number goes to the data and comes back: a restart
    /// numbers on above it whatever its clock says.
    #[test]
    fn the_last_sequence_number_is_saved_and_restored() {
        let active = Active::new("x".into());
        *active.seq.lock() = 42 << 16;
        let aux = aux_fields(&active, 1);
        assert!(aux.contains(&(AUX_SEQ.to_string(), (42u64 << 16).to_string())));
        let again = Active::new("y".into());
        let aux: Vec<_> = (aux.iter())
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .chain([(AUX_SEQ.as_bytes().to_vec(), b"junk".to_vec())])
            .collect();
        restore(&again, &aux, 0);
        assert_eq!(again.saved_links.lock().seq, 42 << 16);
    }
}
