//! The pulling side of active replication: one thread per peer reads the
//! peer's stream and applies its records by the rule in `mod.rs`.
//!
//! The link remembers the peer's stream id and the next offset across
//! reconnects, so a dropped connection continues where it stopped; a peer
//! that restarted (a new stream id) or no longer holds that offset sends a
//! snapshot of key states instead, merged key by key into the live data
//! (the newer stamp wins), while this node serves reads and writes. The
//! position also survives a restart of this node, saved with its data
//! (`resume.rs`): the first connection then asks to continue from it. A
//! peer that restarted sends, instead of a snapshot, the keys we lack of
//! its writes since the newest we applied (`own_write_stamp`), then its
//! new stream.
//!
//! A link is three jobs, one file each: this one holds what a link knows
//! of its peer across connections ([`LinkState`]), the set of peers
//! (REPLICAOF, `add_peer`) and what a connection asks for ([`hello`]);
//! `socket.rs` runs a link's thread (connect, handshake, the read loop);
//! `apply.rs` is the sans-IO [`Link`], the apply rule over what arrives,
//! which the simulator drives without sockets (tests/sim/).

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Active, Host, HostRef};
use crate::core::info::Fields;
use crate::keyspace::hlc::unix_ms;
use crate::protocol::Args;
use crate::{log_notice, log_warning};
mod apply;
mod socket;

pub use apply::Link;
use socket::link_thread;

/// One peer we pull from.
pub struct LinkState {
    pub host: String,
    pub port: u16,
    stop: AtomicBool,
    up: AtomicBool,
    /// The peer's node id, once a handshake told it (0: not yet).
    peer_id: AtomicU64,
    /// The peer's stream id and the next offset we want from it.
    stream_id: Mutex<String>,
    next: AtomicU64,
    /// Everything of the peer's stream before `next` is applied here,
    /// snapshot included (false from a +FULL until its end): only then is
    /// the position worth saving (`position`) or continuing from. Written
    /// under `stream_id`'s lock.
    settled: AtomicBool,
    /// A position loaded at start that this link continues from: the slot
    /// our stamps had and the stamp from which the peer sends back the keys
    /// we wrote (see `resume.rs`). Cleared once settled.
    resume: Mutex<Option<(u64, u64)>>,
    /// The newest stamp of the peer's own writes applied from its stream
    /// (0: none since its last snapshot began), and its slot (u64::MAX:
    /// unknown): after the peer restarts, it sends what we lack of its
    /// stream from that stamp instead of a snapshot (`resume.rs`).
    own_write_stamp: AtomicU64,
    peer_slot: AtomicU64,
    /// Merging the keys a restarted peer sent by stamp: a reconnect before
    /// the end asks for them again, not for its stream's offset.
    by_stamp: AtomicBool,
    /// The position last written to the AOF (`resume::aof_notes`).
    noted: Mutex<String>,
    /// Keys whose state a connection asked for and that did not come
    /// before it ended, as they were asked (together or alone): the next
    /// connection asks again. The records that made us ask are behind
    /// `next` already, so nothing else would (found by the simulator).
    pending: Mutex<Vec<Vec<DbKey>>>,
    /// Keys asked for and not answered yet: while some are, `position` is
    /// not saved (a restart would forget them; the last position saved
    /// before, or a snapshot, makes the link see those records again).
    asking: AtomicUsize,
    last_io_ms: AtomicU64,
    /// Records applied as they came, and keys whose state we asked for.
    applied: AtomicU64,
    conflicts: AtomicU64,
    /// Snapshots taken from this peer (it could not continue our offset),
    /// and connections that continued its stream (after a reconnect, or a
    /// restart from a saved position).
    snapshots: AtomicU64,
    continues: AtomicU64,
    socket: Mutex<Option<TcpStream>>,
    last_error: Mutex<String>,
}

impl LinkState {
    /// INFO's value for this peer (its `peerN` field).
    pub fn info(&self) -> Fields {
        let up = self.up.load(Acquire);
        let mut f = Fields::new();
        f.add("host", self.host.clone())
            .add("port", self.port)
            .add("state", if up { "connected" } else { "connecting" })
            .add("offset", self.next.load(Relaxed).saturating_sub(1))
            .add("last_io_seconds_ago", self.idle_seconds())
            .add("applied", self.applied.load(Relaxed))
            .add("conflicts", self.conflicts.load(Relaxed))
            .add("snapshots", self.snapshots.load(Relaxed))
            .add("continues", self.continues.load(Relaxed));
        f
    }

    /// `host:port`: names the link (its stable bounds, `stable.rs`).
    pub fn key(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Acquire)
    }

    /// The last offset of the peer's stream applied here (ROLE and INFO's
    /// KeyDB view, `active-replica-view keydb`).
    pub fn offset(&self) -> u64 {
        self.next.load(Relaxed).saturating_sub(1)
    }

    /// Seconds since the link last heard from its peer (-1: never).
    pub fn idle_seconds(&self) -> i64 {
        match self.last_io_ms.load(Relaxed) {
            0 => -1,
            t => (unix_ms().saturating_sub(t) / 1000) as i64,
        }
    }

    /// The peer's node id while the link is up.
    pub fn peer_id(&self) -> Option<u64> {
        let id = self.peer_id.load(Acquire);
        (self.is_up() && id != 0).then_some(id)
    }

    /// Where this link stands in the peer's stream, while settled; `slot`
    /// is the one our stamps carry.
    pub fn position(&self, slot: u64) -> Option<super::resume::SavedLink> {
        let sid = self.stream_id.lock();
        if !self.settled.load(Acquire) || *sid == "?" || self.asking.load(Acquire) > 0 {
            return None;
        }
        Some(super::resume::SavedLink {
            host: self.host.clone(),
            port: self.port,
            node_id: self.peer_id.load(Acquire),
            stream_id: sid.clone(),
            next: self.next.load(Acquire),
            own_slot: slot,
            own_write_stamp: self.own_write_stamp.load(Acquire),
        })
    }

    /// Records `v` as the position last noted in the AOF; false if it was.
    pub fn note_if_changed(&self, v: &str) -> bool {
        let mut noted = self.noted.lock();
        if *noted == v {
            return false;
        }
        v.clone_into(&mut noted);
        true
    }

    /// What LATTICE.PEER asks for: the stream id and offset to continue
    /// from ("?" unless settled or resuming a loaded position), the slot
    /// and stamp from which our own keys come back (resuming only), and
    /// the peer's id and the stamp from which it sends what we lack of its
    /// own writes if it cannot continue (we applied some: `FROM-ORIGIN`).
    fn request(&self) -> Ask {
        let sid = self.stream_id.lock();
        let resume = *self.resume.lock();
        let (peer, stamp) = (
            self.peer_id.load(Acquire),
            self.own_write_stamp.load(Acquire),
        );
        let own_writes = (peer != 0 && stamp != 0).then_some((peer, stamp));
        let by_stamp = self.by_stamp.load(Acquire);
        let (sid, next) = if by_stamp || !(self.settled.load(Acquire) || resume.is_some()) {
            ("?".into(), 0)
        } else {
            (sid.clone(), self.next.load(Acquire))
        };
        Ask {
            sid,
            next,
            since: resume,
            own_writes,
        }
    }

    /// The peer's answer to LATTICE.PEER: its stream id and our offset in
    /// it; a snapshot (or the keys a resume needs) follows unless `settled`.
    fn start_at(&self, sid: &str, next: u64, settled: bool) {
        let mut known = self.stream_id.lock();
        self.settled.store(settled, Release);
        sid.clone_into(&mut known);
        self.next.store(next, Release);
    }

    /// The snapshot (or a resume's keys) is merged.
    fn settle(&self) {
        if !self.settled.load(Acquire) {
            let _sid = self.stream_id.lock();
            self.settled.store(true, Release);
            *self.resume.lock() = None;
            self.by_stamp.store(false, Release);
        }
    }

    /// A handshake's answer named the peer (and its slot, if it told): the
    /// stamp of its writes we applied belongs to the node we knew.
    fn met(&self, peer_id: u64, slot: Option<u64>) {
        if self.peer_id.swap(peer_id, AcqRel) != peer_id {
            self.own_write_stamp.store(0, Release);
        }
        self.peer_slot.store(slot.unwrap_or(u64::MAX), Release);
    }

    fn stop(&self) {
        self.stop.store(true, Release);
        if let Some(s) = self.socket.lock().take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// A key and its database.
type DbKey = (usize, Vec<u8>);

/// What a link's LATTICE.PEER asks for (`LinkState::request`).
struct Ask {
    sid: String,
    next: u64,
    /// `SINCE`: our slot, and the stamp from which our own keys come back.
    since: Option<(u64, u64)>,
    /// `FROM-ORIGIN`: the peer's id and the newest stamp of its writes
    /// applied here.
    own_writes: Option<(u64, u64)>,
}

/// Starts pulling from `host:port`, unless we already do.
pub(crate) fn add_peer(node: &HostRef, host: String, port: u16) -> bool {
    let Some(st) = new_link(node, host, port) else {
        return false;
    };
    let node = node.clone();
    let spawned = std::thread::Builder::new()
        .name("lattice-peer-link".into())
        .spawn(move || link_thread(&node, &st));
    if let Err(e) = spawned {
        log_warning!("Active replication: can't start a link thread: {e}");
    }
    true
}

/// The link to `host:port`, registered in [`Active::links`] with the
/// position the loaded data holds for it, unless we have one already
/// (None). [`add_peer`] then starts its thread; the simulator
/// (tests/simulator.rs) drives it with bytes in memory instead (see
/// [`hello`] and [`Link`]).
pub fn new_link(node: &HostRef, host: String, port: u16) -> Option<Arc<LinkState>> {
    let mut links = node.active().links.lock();
    if links.iter().any(|l| l.host == host && l.port == port) {
        return None;
    }
    let saved = super::resume::take(node.active(), &host, port);
    if let Some((s, _)) = &saved {
        log_notice!(
            "Active peer {host}:{port}: continuing from offset {} of its stream {} (node {:016x}), as the loaded data holds",
            s.next,
            s.stream_id,
            s.node_id
        );
    }
    let st = Arc::new(LinkState {
        host,
        port,
        stop: AtomicBool::new(false),
        up: AtomicBool::new(false),
        peer_id: AtomicU64::new(saved.as_ref().map_or(0, |s| s.0.node_id)),
        stream_id: Mutex::new(saved.as_ref().map_or("?".into(), |s| s.0.stream_id.clone())),
        next: AtomicU64::new(saved.as_ref().map_or(0, |s| s.0.next)),
        own_write_stamp: AtomicU64::new(saved.as_ref().map_or(0, |s| s.0.own_write_stamp)),
        peer_slot: AtomicU64::new(u64::MAX),
        by_stamp: AtomicBool::new(false),
        settled: AtomicBool::new(false),
        resume: Mutex::new(saved.map(|(s, since)| (s.own_slot, since))),
        noted: Mutex::new(String::new()),
        pending: Mutex::new(Vec::new()),
        asking: AtomicUsize::new(0),
        last_io_ms: AtomicU64::new(0),
        applied: AtomicU64::new(0),
        conflicts: AtomicU64::new(0),
        snapshots: AtomicU64::new(0),
        continues: AtomicU64::new(0),
        socket: Mutex::new(None),
        last_error: Mutex::new(String::new()),
    });
    links.push(st.clone());
    Some(st)
}

/// Stops pulling from every peer (REPLICAOF NO ONE).
pub(crate) fn drop_all(active: &Active) {
    for l in active.links.lock().drain(..) {
        l.stop();
    }
}

/// Stops pulling from every peer but `host:port` (REPLICAOF without
/// multi-master: the new peer replaces the old).
pub(crate) fn keep_only(active: &Active, host: &str, port: u16) {
    active.links.lock().retain(|l| {
        let keep = l.host == host && l.port == port;
        if !keep {
            l.stop();
        }
        keep
    });
}

/// A connection of the link ended (its socket closed, or the simulator
/// cut it): the link is down until the next handshake.
pub fn closed(node: &dyn Host, st: &LinkState) {
    if st.up.swap(false, AcqRel) {
        node.active().direct_gen.fetch_add(1, AcqRel);
        super::update_quorum(node.active(), node.core());
    }
}

/// What a link sends to open a connection (`LATTICE.PEER ...`), and what
/// [`Link::open`] needs to read the answer.
pub struct Hello {
    pub argv: Vec<Vec<u8>>,
    /// The stream id we asked to continue ("?": none).
    known: String,
    /// [`Active::direct_gen`] before asking: a change since is told to the
    /// peer (`LATTICE.DIRECT`).
    gen: u64,
}

/// A link (re)connects: until its peer's first PING it bounds nothing
/// (`stable.rs`); what it asks for.
pub fn hello(node: &dyn Host, st: &LinkState) -> Hello {
    node.active().stability.forget_link(&st.key());
    let gen = node.active().direct_gen.load(Acquire);
    let ask = st.request();
    let argv = peer_argv(node, st, &ask);
    Hello {
        argv,
        known: ask.sid,
        gen,
    }
}

/// LATTICE.PEER's arguments for `ask`.
fn peer_argv(node: &dyn Host, st: &LinkState, ask: &Ask) -> Vec<Vec<u8>> {
    let (id, slot) = node.identity();
    let mut argv: Vec<Vec<u8>> = vec![b"LATTICE.PEER".to_vec()];
    let words = [format!("{id:016x}"), slot.to_string(), ask.sid.clone()];
    argv.extend(words.into_iter().map(String::into_bytes));
    argv.push(ask.next.to_string().into_bytes());
    argv.extend(
        direct_ids(node.active(), st)
            .into_iter()
            .map(String::into_bytes),
    );
    if let Some((slot, stamp)) = ask.since {
        argv.extend([
            b"SINCE".to_vec(),
            stamp.to_string().into(),
            slot.to_string().into(),
        ]);
    }
    if let Some((node_id, stamp)) = ask.own_writes {
        let from = crate::core::client::FromOrigin {
            node_id,
            stamp,
            direct_slots: direct_slots(node.active(), st),
        };
        argv.push(b"FROM-ORIGIN".to_vec());
        argv.extend(super::resume::from_origin_args(&from).map(String::into_bytes));
    }
    argv
}

/// The slots of the other peers we pull from (those known): their keys
/// come from them, not from a peer that forwarded them.
fn direct_slots(active: &Active, st: &LinkState) -> Vec<u64> {
    let links = active.links.lock();
    let others = links.iter().filter(|l| !std::ptr::eq(&***l, st));
    others
        .map(|l| l.peer_slot.load(Acquire))
        .filter(|&s| s != u64::MAX)
        .collect()
}

/// The node ids (hex) we pull from directly, but the one `st` pulls from.
fn direct_ids(active: &Active, st: &LinkState) -> Vec<String> {
    let own = st.peer_id.load(Acquire);
    let mut ids: Vec<u64> = active.direct_origins();
    ids.retain(|&d| d != own);
    ids.iter().map(|d| format!("{d:016x}")).collect()
}
/// REPLICAOF on an active node: `NO ONE` stops pulling from every peer;
/// `host port` adds a peer under `multi-master`, else replaces the peer.
/// The node stays writable and keeps its data (KeyDB's behaviour).
pub(crate) fn replicaof(
    ctx: &mut crate::commands::Ctx,
    args: Args,
    node: &HostRef,
) -> crate::commands::CmdResult {
    use crate::replication::commands::{replicaof_args, ReplicaOf};
    let active = node.active();
    let (host, port) = match replicaof_args(&args)? {
        ReplicaOf::NoOne => {
            drop_all(active);
            log_notice!("Active replication: every peer dropped (REPLICAOF NO ONE)");
            ctx.out.ok();
            return Ok(());
        }
        ReplicaOf::Master(host, port) => (host, port),
    };
    if !ctx.core.config.read().get_bool("multi-master") {
        keep_only(active, &host, port);
    }
    if add_peer(node, host.clone(), port) {
        log_notice!("Active replication: pulling from {host}:{port} (user request)");
        ctx.out.ok();
    } else {
        ctx.out.simple("OK Already connected to specified master");
    }
    Ok(())
}
