//! Tombstone collection by causal stability (DECISIONS 52; docs/
//! ACTIVE-ACTIVE-DESIGN.md section 4).
//!
//! A tombstone stamped `t` is needed while a record stamped below `t` may
//! still arrive somewhere: an older write (or key state, or snapshot) would
//! otherwise bring the key back. Three things bound what may still arrive:
//!
//! - **Frontiers, in the stream.** Once a second each node appends
//!   `PING <node id> <own> <stable> [<origin> <frontier>]...` to its
//!   stream. `<own>`
//!   is below every own record it appends after the PING (its stamp clock
//!   minus [`STAMP_MARGIN_MS`], the longest a command may take between its
//!   stamp and its record); each `<frontier>` is the stamp below which it
//!   has already seen, so forwarded, every record of that origin. A link
//!   keeps the last PING it read ([`Stability::on_ping`]): the peer will
//!   send nothing below those bounds on it (streams are read in order).
//!   A link waiting for key states it asked for keeps its old bounds: it
//!   received records it could not apply yet.
//! - **This node's stable stamp** ([`Stability::stable_stamp`]): per
//!   origin the lowest bound over all our links (a link that gave none: 0,
//!   a link that is down keeps the bounds it had), then the lowest over
//!   origins. Nothing stamped below it will still arrive here.
//! - **Every peer's stable stamp.** A peer whose stable stamp passed `t`
//!   has the delete, so no key state or snapshot it sends can carry an
//!   older version. The peers we pull from say it in their PING
//!   (`<stable>`: in the stream, so we read it after every key state they
//!   made before); the peers pulling from us, which need the delete too,
//!   send `LATTICE.STABLE <stamp>` on the back channel once a second
//!   ([`Stability::on_report`]), kept after they leave: a departed peer
//!   blocks collection. A peer that connects counts as reporting 0 until
//!   it reports on that connection ([`Stability::on_open`]).
//!
//! Tombstones below the lowest of our stable stamp and every report are
//! collected (exactly: nothing can need them). `active-tombstone-grace`
//! bounds how long a departed peer blocks that: tombstones older than the
//! grace go anyway ("forced"), and a peer that stopped reporting longer
//! than the grace ago, while forced collections happened, is refused when it
//! returns ([`Stability::rejoin_refusal`], both at `LATTICE.PEER` and on our
//! link to it): it could hold keys deleted meanwhile and bring them back.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

use crate::keyspace::hlc::make_stamp;
use crate::protocol::Args;

/// How long a command may take between its stamp and its record entering
/// the stream: a PING's own bound is this far behind the stamp clock.
pub(crate) const STAMP_MARGIN_MS: u64 = 2000;

/// What a link's peer said in its last PING.
struct Bounds {
    /// The peer's node id, and its stable stamp.
    peer: u64,
    stable: u64,
    /// Per origin (the peer included): the stamp every record of it that
    /// the peer will still send us is at or above.
    by_origin: HashMap<u64, u64>,
}

/// A peer's last report of its stable stamp.
#[derive(Clone, Copy)]
struct Report {
    stamp: u64,
    /// Wall-clock ms it arrived.
    at_ms: u64,
}

/// This node's view of what may still arrive where (see the module doc).
#[derive(Default)]
pub struct Stability {
    /// Per link (`host:port`), the last PING read on it.
    links: Mutex<HashMap<String, Bounds>>,
    /// Per node pulling from us, its last report.
    reports: Mutex<HashMap<u64, Report>>,
    /// This node's stable stamp and the last collection's cutoff (INFO).
    pub stable: AtomicU64,
    pub cutoff: AtomicU64,
    /// The last collection's exact cutoff (below every stable stamp):
    /// [`Stability::collected_below`].
    pub exact: AtomicU64,
    /// Tombstones collected below the stable cutoff, and above it by the
    /// grace bound (INFO).
    pub collected: AtomicU64,
    pub forced: AtomicU64,
    /// Wall-clock ms of the last collection that removed tombstones the
    /// stable cutoff still kept (0: never).
    forced_ms: AtomicU64,
    /// Tombstones installed from a peer's key state, per database and key:
    /// the stamp taken when each was installed ([`Stability::hold`]).
    held: Mutex<HeldByDb>,
}

/// [`Stability::holds`]' copy.
pub struct Holds(HeldByDb);

/// Per database, per key, the stamp a cutoff must pass.
type HeldByDb = HashMap<usize, HashMap<Box<[u8]>, u64>>;

impl Holds {
    /// Whether the tombstone of `key` in `db` must stay at `cutoff`.
    pub fn keeps(&self, db: usize, key: &[u8], cutoff: u64) -> bool {
        (self.0.get(&db))
            .and_then(|m| m.get(key))
            .is_some_and(|&h| h >= cutoff)
    }
}

/// The stamp below every own record appended from now on.
fn own_bound(stamp_clock_ms: u64) -> u64 {
    make_stamp(stamp_clock_ms.saturating_sub(STAMP_MARGIN_MS), 0, 0)
}

fn parse_u64(a: &[u8], radix: u32) -> Option<u64> {
    std::str::from_utf8(a)
        .ok()
        .and_then(|s| u64::from_str_radix(s, radix).ok())
}

impl Stability {
    /// The PING record this node appends to its stream once a second:
    /// its id, its own bound and its first-seen frontier per origin.
    pub fn ping_record(&self, me: u64, stamp_clock_ms: u64) -> Vec<u8> {
        let mut words = vec![
            "PING".to_string(),
            format!("{me:016x}"),
            own_bound(stamp_clock_ms).to_string(),
            self.stable.load(Relaxed).to_string(),
        ];
        for (origin, stamp) in self.first_seen(me) {
            words.extend([format!("{origin:016x}"), stamp.to_string()]);
        }
        let argv: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        let mut b = Vec::new();
        super::record::encode_ping(&mut b, &argv);
        b
    }

    /// Per origin, the stamp below which this node has seen every record
    /// of it: the highest bound our links gave, but for an origin we pull
    /// from directly, whose records the other peers do not send us (they
    /// skip it), only its own link's.
    fn first_seen(&self, me: u64) -> HashMap<u64, u64> {
        let links = self.links.lock();
        let direct: HashSet<u64> = links.values().map(|b| b.peer).collect();
        let mut seen: HashMap<u64, u64> = HashMap::new();
        for b in links.values() {
            for (&origin, &stamp) in &b.by_origin {
                if origin == me || (origin != b.peer && direct.contains(&origin)) {
                    continue;
                }
                let s = seen.entry(origin).or_insert(0);
                *s = (*s).max(stamp);
            }
        }
        seen
    }

    /// A PING read on link `link`; `waiting`: the link still waits for
    /// key states it asked for, so the bounds stay as they were. A bare
    /// `PING` (a node without this scheme) tells nothing.
    pub fn on_ping(&self, link: &str, args: Args, waiting: bool) {
        if waiting || args.len() < 4 || !args.len().is_multiple_of(2) {
            return;
        }
        let number = |i: usize| parse_u64(args.get(i), 10);
        let (Some(peer), Some(own), Some(stable)) =
            (parse_u64(args.get(1), 16), number(2), number(3))
        else {
            return;
        };
        let mut by_origin = HashMap::from([(peer, own)]);
        for i in (4..args.len()).step_by(2) {
            if let (Some(o), Some(s)) = (parse_u64(args.get(i), 16), parse_u64(args.get(i + 1), 10))
            {
                by_origin.insert(o, s);
            }
        }
        self.links.lock().insert(
            link.to_string(),
            Bounds {
                peer,
                stable,
                by_origin,
            },
        );
    }

    /// A link (re)connects: until its first PING it bounds nothing (the
    /// peer may have restarted and forget what it forwarded).
    pub fn forget_link(&self, link: &str) {
        self.links.lock().remove(link);
    }

    /// Forgets the links no longer configured (REPLICAOF NO ONE).
    pub fn retain_links(&self, keys: &[String]) {
        self.links.lock().retain(|k, _| keys.contains(k));
    }

    /// This node's stable stamp: nothing stamped below it will still arrive
    /// on any of `links` (every link configured, up or not).
    pub fn stable_stamp(&self, me: u64, links: &[String], stamp_clock_ms: u64) -> u64 {
        let map = self.links.lock();
        let origins: HashSet<u64> = map
            .values()
            .flat_map(|b| b.by_origin.keys().copied())
            .filter(|&o| o != me)
            .collect();
        let mut stable = own_bound(stamp_clock_ms);
        for key in links {
            let Some(b) = map.get(key) else {
                return 0; // never told us what it may still send
            };
            for o in &origins {
                stable = stable.min(b.by_origin.get(o).copied().unwrap_or(0));
            }
        }
        stable
    }

    /// The peer `node` starts pulling from us: until it reports, it holds
    /// every collection back (stamp 0). A peer that never reported did not
    /// block any: one whose connections all dropped before its first
    /// report, after a restart from files older than the tombstones it had
    /// seen, lost a deletion for good (simulator seed 25604). What it
    /// reported before this connection may no longer hold (it restarted
    /// from older files, or takes a snapshot): it reports again.
    pub fn on_open(&self, node: u64, now_ms: u64) {
        self.on_report(node, 0, now_ms);
    }

    /// `LATTICE.STABLE <stamp>` from the peer `node` (pulling from us).
    pub fn on_report(&self, node: u64, stamp: u64, now_ms: u64) {
        let r = Report {
            stamp,
            at_ms: now_ms,
        };
        self.reports.lock().insert(node, r);
    }

    /// The cutoffs of this round: below every stable stamp (ours, those of
    /// the peers on `links`, every report), and that or the grace bound,
    /// whichever is higher.
    pub fn cutoffs(&self, stable: u64, links: &[String], grace_cutoff: u64) -> (u64, u64) {
        let map = self.links.lock();
        let pulled = links.iter().map(|k| map.get(k).map_or(0, |b| b.stable));
        let reports = self.reports.lock();
        let exact = pulled
            .chain(reports.values().map(|r| r.stamp))
            .fold(stable, u64::min);
        (exact, exact.max(grace_cutoff))
    }

    /// Whether a deletion stamped `stamp` of a key holding nothing here is
    /// one this node collected, or would at once: below the last exact
    /// cutoff nothing older can still arrive anywhere. A late copy of a
    /// key state (a peer answers every ask, and a link asks again after
    /// a reconnect: two answers, the wait ending at the first; docs/
    /// MERGE-DESIGN.md section 8 item 35) is then not installed again.
    pub fn collected_below(&self, stamp: u64) -> bool {
        stamp < self.exact.load(Relaxed)
    }

    /// Holds the tombstone of `key`, just installed from a peer's key
    /// state, until a cutoff passes `now` (a stamp of this node's clock).
    /// A state is an origin's record appended out of its stamps' order (an
    /// answer, DECISIONS 170): its deletion may be stamped below the
    /// bounds this node has already passed on in its PINGs, so a peer can
    /// report itself stable past that stamp without having the deletion
    /// yet (simulator seed 33745, a one-way ring: the tombstone was
    /// collected and an older copy of the key came back from a restart).
    /// This node forwards the state before its next PING, so a peer stable
    /// past `now` has it.
    pub fn hold(&self, db: usize, key: &[u8], now: u64) {
        let mut held = self.held.lock();
        let h = held.entry(db).or_default().entry(key.into()).or_insert(0);
        *h = (*h).max(now);
    }

    /// The holds, copied (a round locks shards, and a link holding a
    /// shard may call [`Self::hold`]): per database and key, the stamp a
    /// cutoff must pass. Forgets those `cutoff` passed already.
    pub fn holds(&self, cutoff: u64) -> Holds {
        let mut held = self.held.lock();
        held.retain(|_, m| {
            m.retain(|_, h| *h >= cutoff);
            !m.is_empty()
        });
        Holds(held.clone())
    }

    /// Counts a round's collections; `forced` ones mark the time.
    pub fn note_collected(&self, exact: usize, forced: usize, now_ms: u64) {
        self.collected.fetch_add(exact as u64, Relaxed);
        if forced > 0 {
            self.forced.fetch_add(forced as u64, Relaxed);
            self.forced_ms.store(now_ms, Relaxed);
        }
    }

    /// Why `node` may not rejoin: it stopped reporting more than `grace_ms`
    /// ago and tombstones were collected since by the grace bound, so it may
    /// still hold keys deleted meanwhile. None: welcome.
    pub fn rejoin_refusal(&self, node: u64, grace_ms: u64, now_ms: u64) -> Option<String> {
        let forced = self.forced_ms.load(Relaxed);
        if forced == 0 {
            return None;
        }
        let r = *self.reports.lock().get(&node)?;
        let away = now_ms.saturating_sub(r.at_ms);
        (away > grace_ms && forced > r.at_ms).then(|| {
            format!(
                "node {node:016x} was away {} s, longer than active-tombstone-grace ({} s), and tombstones it has not seen were collected here: it could bring deleted keys back; restart it with an empty data directory to rejoin",
                away / 1000,
                grace_ms / 1000
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
        let flat: Vec<u8> = words.concat().into_bytes();
        let mut spans = vec![];
        let mut off = 0;
        for w in words {
            spans.push(off..off + w.len());
            off += w.len();
        }
        (flat, spans)
    }

    fn ping(s: &Stability, link: &str, words: &[&str]) {
        let (flat, spans) = args(words);
        s.on_ping(link, Args::new(&flat, &spans), false);
    }

    const A: &str = "000000000000000a";
    const B: &str = "000000000000000b";
    const C: &str = "000000000000000c";

    #[test]
    fn stable_is_the_lowest_bound_over_links_and_origins() {
        let s = Stability::default();
        let links = ["b:1".to_string(), "c:1".to_string()];
        // c's link never spoke: nothing is stable.
        ping(&s, "b:1", &["PING", B, "500", "9", C, "300"]);
        assert_eq!(s.stable_stamp(0xa, &links, 10_000), 0);
        ping(&s, "c:1", &["PING", C, "400", "7", B, "450", A, "1"]);
        // Origin c: min(300 via b, 400 direct); origin b: min(500, 450).
        assert_eq!(s.stable_stamp(0xa, &links, 10_000), 300);
        // First seen: c only from its own link (b skips it for us).
        let f = s.first_seen(0xa);
        assert_eq!((f[&0xc], f[&0xb]), (400, 500));
        assert!(!f.contains_key(&0xa));
        // The peers' own stable stamps bound the cutoff.
        assert_eq!(s.cutoffs(300, &links, 0), (7, 7));
        // A link waiting for key states keeps its bounds.
        let (flat, spans) = args(&["PING", B, "900", "900"]);
        s.on_ping("b:1", Args::new(&flat, &spans), true);
        assert_eq!(s.first_seen(0xa)[&0xb], 500);
    }

    #[test]
    fn reports_lower_the_cutoff_and_the_grace_bounds_it() {
        let s = Stability::default();
        s.on_report(0xb, 100, 1_000);
        assert_eq!(s.cutoffs(500, &[], 50), (100, 100));
        assert_eq!(s.cutoffs(500, &[], 200), (100, 200));
        // Refused only once forced collections happened after it left, and
        // it has been away longer than the grace.
        assert_eq!(s.rejoin_refusal(0xb, 3_000, 10_000), None);
        s.note_collected(0, 1, 5_000);
        assert!(s.rejoin_refusal(0xb, 3_000, 10_000).is_some());
        assert_eq!(s.rejoin_refusal(0xb, 30_000, 10_000), None);
        assert_eq!(s.rejoin_refusal(0xc, 3_000, 10_000), None);
    }

    #[test]
    fn a_peer_that_has_not_reported_on_this_connection_holds_collection_back() {
        let s = Stability::default();
        assert_eq!(s.cutoffs(500, &[], 0), (500, 500), "no peer pulls from us");
        s.on_report(0xb, 400, 1_000);
        s.on_open(0xb, 2_000); // it connects again: its report is void
        assert_eq!(s.cutoffs(500, &[], 0), (0, 0));
        assert_eq!(
            s.cutoffs(500, &[], 200),
            (0, 200),
            "the grace still bounds it"
        );
        s.on_report(0xb, 450, 3_000);
        assert_eq!(s.cutoffs(500, &[], 0), (450, 450));
    }
}
