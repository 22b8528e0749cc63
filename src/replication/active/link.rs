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

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{applying, record, Active, Host, HostRef};
use crate::core::stats::WorkerStats;
use crate::keyspace::hlc::{unix_ms, Hlc};
use crate::protocol::Args;
use crate::replication::node_link;
use crate::{log_notice, log_warning};

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
    /// INFO's value for this peer.
    pub fn info(&self, o: &mut String) {
        let up = self.up.load(Acquire);
        let idle = unix_ms().saturating_sub(self.last_io_ms.load(Relaxed)) / 1000;
        let _ = write!(
            o,
            "host={},port={},state={},offset={},last_io_seconds_ago={},applied={},conflicts={},snapshots={},continues={}",
            self.host,
            self.port,
            if up { "connected" } else { "connecting" },
            self.next.load(Relaxed).saturating_sub(1),
            if self.last_io_ms.load(Relaxed) == 0 {
                -1
            } else {
                idle as i64
            },
            self.applied.load(Relaxed),
            self.conflicts.load(Relaxed),
            self.snapshots.load(Relaxed),
            self.continues.load(Relaxed),
        );
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
pub fn add_peer(node: &HostRef, host: String, port: u16) -> bool {
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
pub fn drop_all(active: &Active) {
    for l in active.links.lock().drain(..) {
        l.stop();
    }
}

/// Stops pulling from every peer but `host:port` (REPLICAOF without
/// multi-master: the new peer replaces the old).
pub fn keep_only(active: &Active, host: &str, port: u16) {
    active.links.lock().retain(|l| {
        let keep = l.host == host && l.port == port;
        if !keep {
            l.stop();
        }
        keep
    });
}

fn link_thread(node: &HostRef, st: &Arc<LinkState>) {
    let mut clock = Hlc::new(node.identity().1);
    let stats = node.core().new_worker_stats();
    while !st.stop.load(Acquire) {
        log_notice!("Connecting to active peer {}:{}", st.host, st.port);
        node.active().stability.forget_link(&st.key());
        // A panic applying a record (a bug) ends this connection, logged,
        // and the link reconnects from its last applied batch, instead of
        // the thread dying and the peer never being heard again.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(node, st, &mut clock, &stats)
        }));
        let ran = ran.unwrap_or_else(|p| {
            let what = (p.downcast_ref::<&str>().map(|s| s.to_string()))
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(format!(
                "a panic applying the peer's stream ({what}); reconnecting"
            ))
        });
        if let Err(e) = ran {
            if !st.stop.load(Acquire) {
                log_warning!("Active replication link with {}:{}: {e}", st.host, st.port);
                *st.last_error.lock() = e;
            }
        }
        closed(&**node, st);
        *st.socket.lock() = None;
        if st.stop.load(Acquire) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The socket with its read buffer, talking to an active peer.
struct Conn(crate::replication::conn::Conn);

impl std::ops::Deref for Conn {
    type Target = crate::replication::conn::Conn;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// A connection of the link ended (its socket closed, or the simulator
/// cut it): the link is down until the next handshake.
pub fn closed(node: &dyn Host, st: &LinkState) {
    if st.up.swap(false, AcqRel) {
        node.active().direct_gen.fetch_add(1, AcqRel);
        super::update_quorum(node.active(), node.core());
    }
}

impl Conn {
    fn send(&mut self, argv: &[&[u8]]) -> Result<(), String> {
        self.0.send(argv).map_err(|e| format!("write error: {e}"))
    }

    /// Reads more; Ok(0) after a second without bytes, an error once
    /// `timeout` passed without any.
    fn fill(&mut self) -> Result<usize, String> {
        use crate::replication::conn::Filled;
        match self.0.fill()? {
            Filled::Bytes(n) => Ok(n),
            Filled::Quiet => Ok(0),
            Filled::TimedOut => Err(format!(
                "the peer sent nothing for {} s",
                self.timeout.as_secs()
            )),
        }
    }

    fn line(&mut self) -> Result<String, String> {
        loop {
            if let Some(line) = self.0.take_line()? {
                return Ok(line);
            }
            self.fill()?;
        }
    }
}

impl node_link::Handshake for Conn {
    fn send(&mut self, argv: &[&[u8]]) -> Result<(), String> {
        Conn::send(self, argv)
    }

    fn line(&mut self) -> Result<String, String> {
        Conn::line(self)
    }
}

/// AUTH (masterauth / masteruser) and REPLCONF listening-port, as a
/// replica's handshake does (the node-link client's steps,
/// `replication/node_link.rs`). A refused AUTH still sends the
/// LATTICE.PEER that follows, so that the peer logs the refused link too
/// (`server/conn.rs`, `log_refused_link`), then ends the connection.
fn handshake(node: &dyn Host, c: &mut Conn, hello: &Hello) -> Result<(), String> {
    let (credentials, port) = {
        let cfg = node.core().config.read();
        let port = node_link::own_port(&cfg, node.port() as i64);
        (node_link::Credentials::from_config(&cfg), port.to_string())
    };
    if let Some(r) = node_link::auth(c, &credentials)? {
        if r.starts_with('-') {
            let _ = c.send(&hello.argv.iter().map(Vec::as_slice).collect::<Vec<_>>());
            let _ = c.line();
            return Err(format!(
                "Unable to AUTH to the peer as '{}': {r}",
                credentials.user_name()
            ));
        }
    }
    let r = node_link::listening_port(c, &port)?;
    if r.starts_with('-') {
        return Err(format!("the peer refused REPLCONF: {r}"));
    }
    Ok(())
}

fn run(
    node: &HostRef,
    st: &Arc<LinkState>,
    clock: &mut Hlc,
    stats: &Arc<WorkerStats>,
) -> Result<(), String> {
    let timeout = node.timeout();
    let s = node_link::connect(&st.host, st.port, timeout, |e| {
        format!("can't connect: {e}")
    })?;
    *st.socket.lock() = s.try_clone().ok();
    let s = node_link::secure(node.core(), s, &st.host, "peer")?;
    let mut c = Conn(crate::replication::conn::Conn::new(s, "peer", timeout));
    let hello = hello(&**node, st);
    handshake(&**node, &mut c, &hello)?;
    c.send(&hello.argv.iter().map(Vec::as_slice).collect::<Vec<_>>())?;
    let reply = c.line()?;
    let mut link = Link::open(node, st, (clock.clone(), stats.clone()), &hello, &reply)?;
    let r = pump(&mut link, &mut c);
    // The clock lives on across connections.
    clock.clone_from(&link.clock);
    r
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

/// The socket loop of a connection: applies what arrives, answers.
fn pump(link: &mut Link, c: &mut Conn) -> Result<(), String> {
    let (mut last_ack, mut last_report) = (Instant::now(), None::<Instant>);
    loop {
        let mut ask = Vec::new();
        c.start += link.apply_bytes(&c.buf[c.start..], &mut ask)?;
        // A feed sends whole batches; bytes that stay short of one (a
        // damaged length that waits for bytes never coming) end the link.
        if c.start < c.buf.len() && link.sealed_at.elapsed() > c.timeout {
            return Err(format!(
                "no whole batch from the peer for {} s (damaged stream?)",
                c.timeout.as_secs()
            ));
        }
        // Acknowledge what we applied at once (WAIT on the peer counts
        // it), and once a second anyway; our stable stamp once a second.
        let second = Duration::from_secs(1);
        let ack_due = last_ack.elapsed() >= second;
        let stable_due = last_report.is_none_or(|t| t.elapsed() >= second);
        for argv in link.replies(ask, ack_due, stable_due) {
            c.send(&argv.iter().map(Vec::as_slice).collect::<Vec<_>>())?;
            match argv[0].as_slice() {
                b"LATTICE.ACK" => last_ack = Instant::now(),
                b"LATTICE.STABLE" => last_report = Some(Instant::now()),
                _ => {}
            }
        }
        if link.st.stop.load(Acquire) {
            return Ok(());
        }
        if c.fill()? > 0 {
            link.st.last_io_ms.store(unix_ms(), Relaxed);
        }
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

/// One connection's pulling side: the apply rule (module doc of `mod.rs`)
/// over the batches the peer sends, and what goes back to it. The socket
/// loop (`pump`) feeds it what it reads; it is also the simulator's seam
/// (tests/simulator.rs), which feeds it batches held in memory:
/// [`Link::open`] with the peer's answer to [`hello`], then
/// [`Link::apply_bytes`] and [`Link::replies`] per delivery, [`closed`]
/// when the connection ends.
pub struct Link {
    /// Owned, so that a link can outlive any borrow (the simulator keeps
    /// one per connection); a method that holds shards while it calls
    /// `&mut self` ones clones it first.
    pub(super) node: HostRef,
    st: Arc<LinkState>,
    pub(super) clock: Hlc,
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
    sealed_at: Instant,
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
    /// The [`Active::direct_gen`] the peer was last told of, and the
    /// offset last acknowledged.
    gen: u64,
    last_acked: u64,
    /// States a previous connection asked for in vain, asked again with
    /// the first replies.
    resend: Vec<(usize, Vec<u8>)>,
}

impl Link {
    /// The peer's answer to [`hello`]'s LATTICE.PEER (`reply`, its first
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
        super::update_quorum(active, node.core());
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
        match super::rejoin_refusal(self.node.active(), self.node.core(), id) {
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
            let max = core.config.read().get_i64("active-max-clock-skew").max(0) as u64;
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
                && active
                    .first_state_sight(super::state_fingerprint(rec.origin, db, key, stamp, merge))
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
            (payload, super::serve::merge_state(&g, key))
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
                super::serve::answer_state(&*self.node, db, key);
                false
            }
            std::cmp::Ordering::Equal => false,
        }
    }

    /// Runs a record's command with its stamp, as the origin's write.
    pub(super) fn replay_args(&mut self, db: usize, stamp: u64, args: Args) {
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
    pub(super) fn replay(&mut self, db: usize, stamp: u64, argv: &[&[u8]]) {
        let owned = crate::protocol::OwnedArgs::new(argv);
        self.replay_args(db, stamp, owned.args());
    }

    /// Replaces `key` with a DUMP payload expiring at `at` (0: never), as a
    /// write stamped `stamp`: `RESTORE key at payload REPLACE ABSTTL`.
    pub(super) fn restore_at(
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
    /// A unit whose first write carries a fact, all of one key: a consumer
    /// group's read (`stream_facts.rs`). None where it is not one; else the
    /// keys to ask for (none where it applied).
    fn apply_unit_fact(&mut self, writes: &[UnitWrite<'_>]) -> Option<Vec<(usize, Vec<u8>)>> {
        let first = writes.first().filter(|w| !w.facts.is_empty())?;
        let &[(i, _)] = &first.bases[..] else {
            return None;
        };
        if !Args::new(first.argv, &first.spans)
            .get(0)
            .eq_ignore_ascii_case(b"xclaim")
        {
            return None; // (a transaction's writes: their facts are not used)
        }
        let key = &first.argv[first.spans.get(arg_index(i))?.clone()];
        let same = |w: &UnitWrite| {
            (w.db, w.stamp) == (first.db, first.stamp) && w.keys().all(|(_, k, _, _)| k == key)
        };
        if !writes.iter().all(same) {
            return None;
        }
        let args: Vec<Args> = (writes.iter())
            .map(|w| Args::new(w.argv, &w.spans))
            .collect();
        let db = first.db;
        if self.apply_group_read(db, key, first.stamp, &first.facts, &args) {
            self.st.applied.fetch_add(writes.len() as u64, Relaxed);
            return Some(vec![]);
        }
        Some(vec![(db, key.to_vec())])
    }
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
    if let Some(order) = super::sim_hooks::stamp_order() {
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

/// REPLICAOF on an active node: `NO ONE` stops pulling from every peer;
/// `host port` adds a peer under `multi-master`, else replaces the peer.
/// The node stays writable and keeps its data (KeyDB's behaviour).
pub fn replicaof(
    ctx: &mut crate::commands::Ctx,
    args: Args,
    node: &HostRef,
) -> crate::commands::CmdResult {
    use crate::commands::CmdError;
    let active = node.active();
    let (host, port) = (args.get(1), args.get(2));
    if host.eq_ignore_ascii_case(b"no") && port.eq_ignore_ascii_case(b"one") {
        drop_all(active);
        log_notice!("Active replication: every peer dropped (REPLICAOF NO ONE)");
        ctx.out.ok();
        return Ok(());
    }
    let port = crate::commands::util::arg_i64(port)?;
    if !(0..=65535).contains(&port) {
        return Err(CmdError::Msg("ERR Invalid master port".into()));
    }
    let host = String::from_utf8_lossy(host).into_owned();
    if !ctx.core.config.read().get_bool("multi-master") {
        keep_only(active, &host, port as u16);
    }
    if add_peer(node, host.clone(), port as u16) {
        log_notice!("Active replication: pulling from {host}:{port} (user request)");
        ctx.out.ok();
    } else {
        ctx.out.simple("OK Already connected to specified master");
    }
    Ok(())
}
