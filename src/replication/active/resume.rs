//! Where each link stood in its peer's stream, kept with the data so that
//! a restarted node continues its peers' streams instead of taking a
//! snapshot of each (docs/ACTIVE-ACTIVE.md, "Restart"; DECISIONS 48).
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

use super::Active;
use crate::keyspace::hlc::{make_stamp, stamp_ms};

/// The aux field (and AOF annotation) holding one link's position.
pub const AUX_LINK: &str = "lattice-link";

/// How far before the newest stamp loaded our lost writes may be stamped:
/// a write stamped just before another can reach the AOF just after it.
const LOST_WRITES_MARGIN_MS: u64 = 1000;

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
}

impl SavedLink {
    /// The aux field's value.
    pub fn encode(&self) -> String {
        format!(
            "{} {} {:016x} {} {} {}",
            self.host, self.port, self.node_id, self.stream_id, self.next, self.own_slot
        )
    }

    /// Parses [`Self::encode`]'s form; None if malformed.
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
        };
        w.next().is_none().then_some(link)
    }
}

/// The aux fields of every settled link (at a snapshot's cut); `slot` is
/// the one our stamps carry.
pub fn aux_fields(active: &Active, slot: u64) -> Vec<(String, String)> {
    active
        .links
        .lock()
        .iter()
        .filter_map(|l| l.position(slot))
        .map(|p| (AUX_LINK.to_string(), p.encode()))
        .collect()
}

/// The AOF's annotations: every settled link's position if `all` (a new
/// base), else those that changed since they were last noted.
pub fn aof_notes(active: &Active, slot: u64, all: bool) -> Vec<(String, String)> {
    let links = active.links.lock();
    let mut notes = Vec::new();
    for l in links.iter() {
        let Some(p) = l.position(slot) else { continue };
        let v = p.encode();
        if l.note_if_changed(&v) || all {
            notes.push((AUX_LINK.to_string(), v));
        }
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
}

/// After loading: the positions the data holds (the last one per host and
/// port wins: the AOF notes each change), for the links `start` creates;
/// `floor` is the stamp floor the load left.
pub fn restore(active: &Active, aux: &[(Vec<u8>, Vec<u8>)], floor: u64) {
    let mut loaded = active.saved_links.lock();
    loaded.lost_since = lost_writes_since(floor);
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
pub fn take(active: &Active, host: &str, port: u16) -> Option<(SavedLink, u64)> {
    let mut loaded = active.saved_links.lock();
    let links = &mut loaded.links;
    let i = links
        .iter()
        .position(|s| s.host == host && s.port == port)?;
    Some((links.swap_remove(i), loaded.lost_since))
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
        };
        assert_eq!(SavedLink::parse(p.encode().as_bytes()), Some(p));
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
}
