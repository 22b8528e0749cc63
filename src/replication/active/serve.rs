//! The serving side of active replication: a peer's link sends
//! `LATTICE.PEER <node id> <slot> <stream id> <offset>`; we refuse a peer
//! with our node id or slot (a copied data directory, or two nodes whose
//! stamps could tie), else answer `+CONTINUE <stream id> <offset>` (then
//! our node id and slot, as every answer) when our
//! stream still holds what it asks for, or `+FULL <stream id> <offset>`
//! followed by the state of every key and tombstone (state records, one shard
//! at a time, so no copy of the dataset is made) and a snapshot end; then
//! the stream from that offset, in checksummed batches coded for this
//! connection (record.rs). A peer restarted from its files asks to
//! continue with `SINCE <stamp> <slot>` (`resume.rs`): when we can, the
//! answer is `+RESUME`, the states of the keys it wrote since that stamp
//! (which it may have lost) and a snapshot end, then the stream. A peer
//! that pulled from our stream before we restarted asks `FROM-ORIGIN <our
//! id> <stamp> <slots>` (`resume.rs`): the answer is `+RESUME` too, with
//! the keys it lacks of our writes (and of origins it hears only through
//! us) instead of every key. The peer sends back `LATTICE.STATE <db>
//! <key>` (answered in the stream), `LATTICE.ACK <offset>` and
//! `LATTICE.STABLE <stamp>` (its stable stamp, `stable.rs`).
//!
//! The connection leaves the async worker for a thread of its own with
//! blocking I/O, as Redis gives a replica's socket to its own writer: the
//! feed is one sequential loop that reads the stream and codes its
//! records for the peer. A peer that came to our TLS port brings its TLS
//! session along (`FeedSock`, DECISIONS 91).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use super::record::{self, encode_state, Coder};
use super::resume::KeyFilter;
use super::{Active, Host, HostRef};
use crate::commands::{CmdError, CmdResult, Ctx};
use crate::core::client::{FromOrigin, PeerRequest};
use crate::core::info::Fields;
use crate::core::Core;
use crate::effects::EffectRef;
use crate::keyspace::hlc::stamp_node;
use crate::protocol::Args;
use crate::protocol::{ParseLimits, Parsed, RequestParser};
use crate::{log_notice, log_warning};
use parking_lot::Mutex;
use rustls::ServerConnection;

/// A peer reading our stream.
pub struct FeedState {
    pub addr: String,
    pub node_id: u64,
    /// The origins whose records it does not get from us: itself, and the
    /// nodes it pulls from directly (`LATTICE.DIRECT` updates them).
    skip: Mutex<HashSet<u64>>,
    /// The next offset it gets.
    pub pos: AtomicU64,
    /// The offset it last acknowledged.
    pub acked: AtomicU64,
    /// The first offset of our stream it gets (after its snapshot, if it
    /// takes one): once it acknowledges that, it is in sync (KeyDB's
    /// `state=online`, `replication/keydb_view.rs`; a PING record comes
    /// every second).
    pub first: AtomicU64,
    gone: AtomicBool,
}

impl FeedState {
    /// Whether this peer gets records of `origin` from us.
    pub fn takes(&self, origin: u64) -> bool {
        !self.skip.lock().contains(&origin)
    }
}

/// Parses a node id (16 hex digits).
fn parse_node_id(a: &[u8]) -> Option<u64> {
    std::str::from_utf8(a)
        .ok()
        .filter(|h| h.len() == 16)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
}

/// What follows LATTICE.PEER's offset: the node ids the peer pulls from,
/// then its optional `SINCE <stamp> <slot>` and `FROM-ORIGIN <our node id>
/// <stamp> <slots>` (resume.rs).
struct PeerTail {
    direct: Vec<u64>,
    lost_since: Option<(u64, u64)>,
    from_origin: Option<FromOrigin>,
}

fn parse_peer_tail(args: &Args) -> Result<PeerTail, CmdError> {
    let mut i = 5;
    let mut direct = Vec::new();
    while i < args.len() {
        let Some(id) = parse_node_id(args.get(i)) else {
            break;
        };
        direct.push(id);
        i += 1;
    }
    let mut tail = PeerTail {
        direct,
        lost_since: None,
        from_origin: None,
    };
    while i < args.len() {
        let word = args.get(i);
        if word.eq_ignore_ascii_case(b"SINCE") && i + 2 < args.len() {
            let since = crate::commands::util::arg_i64(args.get(i + 1))?;
            let slot = crate::commands::util::arg_i64(args.get(i + 2))?;
            tail.lost_since = Some((slot.max(0) as u64, since.max(0) as u64));
        } else if word.eq_ignore_ascii_case(b"FROM-ORIGIN") && i + 3 < args.len() {
            let (id, stamp, slots) = (args.get(i + 1), args.get(i + 2), args.get(i + 3));
            tail.from_origin = Some(
                super::resume::parse_from_origin(id, stamp, slots)
                    .ok_or_else(|| CmdError::err("invalid FROM-ORIGIN"))?,
            );
            i += 1;
        } else {
            return Err(CmdError::err("invalid node id"));
        }
        i += 3;
    }
    Ok(tail)
}

/// LATTICE.PEER <node id (hex)> <slot> <stream id | ?> <offset> [<node id
/// it pulls from> ...] [SINCE <stamp> <slot>] [FROM-ORIGIN <our node id>
/// <stamp> <slots>].
pub(crate) fn peer_cmd(ctx: &mut Ctx, args: Args, host: &dyn Host) -> CmdResult {
    let req = peer_request(args, host)?;
    if ctx.client.shared.is_none() {
        return Err(CmdError::err("LATTICE.PEER needs a connection"));
    }
    ctx.client.peer_request = Some(req);
    Ok(())
}

/// LATTICE.PEER's arguments, checked: what the peer asks for, or why it
/// is refused. Also the simulator's seam (tests/simulator.rs), which
/// passes it what the peer's [`super::link::hello`] made.
pub fn peer_request(args: Args, host: &dyn Host) -> Result<PeerRequest, CmdError> {
    let core = host.core();
    if !core.active {
        return Err(CmdError::err(
            "this node does not run active replication (active-replica no)",
        ));
    }
    let node_id = parse_node_id(args.get(1)).ok_or_else(|| CmdError::err("invalid node id"))?;
    let tail = parse_peer_tail(&args)?;
    let slot = crate::commands::util::arg_i64(args.get(2))?;
    let offset = crate::commands::util::arg_i64(args.get(4))?;
    let (my_id, my_slot) = host.identity();
    if node_id == my_id {
        return Err(CmdError::Msg(format!(
            "ERR duplicate node id {node_id:016x}: this node has it too (a copied data directory?); give one of them another `node-id`"
        )));
    }
    if slot as u64 == my_slot {
        return Err(CmdError::Msg(format!(
            "ERR node slot {slot} is this node's too: set a different `node-slot` on one of them"
        )));
    }
    if let Some(why) = super::rejoin_refusal(host.active(), core, node_id) {
        return Err(CmdError::Msg(format!("ERR {why}")));
    }
    Ok(PeerRequest {
        node_id,
        stream_id: String::from_utf8_lossy(args.get(3)).into_owned(),
        offset: offset.max(0) as u64,
        slot: slot.max(0) as u64,
        direct: tail.direct,
        lost_since: tail.lost_since,
        from_origin: tail.from_origin,
    })
}

/// Takes the connection `fd` over from its async worker: the feed runs on a
/// thread of its own with a blocking duplicate of the socket (the worker
/// closes its own fd when it returns), and the connection's TLS session
/// if it came to the TLS port.
pub(crate) fn hand_off(
    host: &HostRef,
    fd: RawFd,
    leftover: &[u8],
    req: PeerRequest,
    addr: String,
    tls: Option<ServerConnection>,
) {
    // SAFETY: `fd` is the connection's socket, open for the whole call
    // (the caller's AsyncFd owns it and drops it only after we return).
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let sock = match borrowed.try_clone_to_owned() {
        Ok(owned) => TcpStream::from(owned),
        Err(e) => {
            log_warning!("Active replication: can't take over the peer's socket: {e}");
            return;
        }
    };
    let sock = FeedSock::new(sock, tls);
    let (host, leftover) = (host.clone(), leftover.to_vec());
    let spawned = std::thread::Builder::new()
        .name("lattice-peer-feed".into())
        .spawn(move || serve(&host, sock, leftover, req, addr));
    if let Err(e) = spawned {
        log_warning!("Active replication: can't start a feed thread: {e}");
    }
}

fn serve(host: &HostRef, sock: FeedSock, leftover: Vec<u8>, req: PeerRequest, addr: String) {
    let _ = sock.sock.set_nonblocking(false);
    let _ = sock.sock.set_nodelay(true);
    let mut feed = Feed::open(host, req, addr);
    let r = (|| -> std::io::Result<()> {
        let mut w = sock.try_clone()?;
        let reader = sock.try_clone()?;
        start_reader(host, reader, leftover, feed.state.clone());
        w.write_all(feed.answer().as_bytes())?;
        feed.preamble(&mut w)?;
        send_stream(&**host, &mut w, &mut feed)
    })();
    if let Err(e) = r {
        log_notice!("Active replica {} left: {e}", feed.state.addr);
    }
    let _ = sock.sock.shutdown(std::net::Shutdown::Both);
    feed.close();
}

/// A feed's socket, shared by its writer and its reader thread: plain, or
/// with the TLS session both use under a lock. Only the writer writes to
/// the socket (it encrypts under the lock, then writes outside it, so a
/// peer slow to read never holds the reader up); records the reader's
/// side makes (a key update's answer) go out with the writer's next
/// write or flush, in the session's order.
struct FeedSock {
    sock: TcpStream,
    tls: Option<Arc<Mutex<ServerConnection>>>,
    /// The reader's ciphertext not yet taken by the session.
    raw: Vec<u8>,
}

impl FeedSock {
    fn new(sock: TcpStream, tls: Option<ServerConnection>) -> FeedSock {
        let tls = tls.map(|mut c| {
            // Batches are encrypted whole (the writer holds them anyway).
            c.set_buffer_limit(None);
            Arc::new(Mutex::new(c))
        });
        FeedSock {
            sock,
            tls,
            raw: Vec::new(),
        }
    }

    fn try_clone(&self) -> std::io::Result<FeedSock> {
        Ok(FeedSock {
            sock: self.sock.try_clone()?,
            tls: self.tls.clone(),
            raw: Vec::new(),
        })
    }

    /// The session's pending records, taken under its lock.
    fn sealed(tls: &Mutex<ServerConnection>, plain: &[u8]) -> std::io::Result<Vec<u8>> {
        crate::replication::tls_link::seal(&mut **tls.lock(), plain)
    }
}

impl Write for FeedSock {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &self.tls {
            None => self.sock.write(buf),
            Some(tls) => {
                let out = Self::sealed(tls, buf)?;
                self.sock.write_all(&out)?;
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &self.tls {
            None => Ok(()),
            Some(tls) => {
                let out = Self::sealed(tls, b"")?;
                self.sock.write_all(&out)
            }
        }
    }
}

impl Read for FeedSock {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(tls) = self.tls.clone() else {
            return self.sock.read(buf);
        };
        crate::replication::tls_link::read_shared(&tls, &mut self.raw, &mut self.sock, buf)
    }
}

/// One connection's serving side: the answer to LATTICE.PEER, the key
/// states that go first, then the stream coded for this peer. The feed
/// thread (`serve`) writes what it makes to the socket; it is also the
/// simulator's seam (tests/simulator.rs), which holds the bytes in memory:
/// [`Feed::open`], [`Feed::answer`], [`Feed::preamble`], then
/// [`Feed::step`] as the stream grows, [`on_peer_command`] for what the
/// peer sends back, [`Feed::close`] when the connection ends.
pub struct Feed {
    host: HostRef,
    pub state: Arc<FeedState>,
    start: FeedStart,
    /// Why it cannot continue its position (empty when it can): logged
    /// here, and sent after the answer line's fields for the peer to log.
    why: String,
    /// Where the peer starts in our stream.
    from: u64,
    coder: Coder,
    /// The stream's bytes from the feed's position on that were read but
    /// not sent yet (the tail of a record cut by a read).
    buf: Vec<u8>,
    out: Vec<u8>,
    /// Records were skipped since the last batch sent.
    skipped: bool,
}

/// What one [`Feed::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The stream has nothing new for the peer.
    Idle,
    /// Read a record's start only: read on.
    Partial,
    /// Moved the peer's position on, writing this many bytes (0: the
    /// records read were all skipped).
    Sent(usize),
}

impl Feed {
    /// A peer's LATTICE.PEER was accepted: registers its feed and decides
    /// where it starts (continue, resume, or a snapshot).
    pub fn open(host: &HostRef, req: PeerRequest, addr: String) -> Feed {
        // Before its start is chosen: every write after it is recorded.
        super::record_own_writes(host);
        let active = host.active();
        let mut skip: HashSet<u64> = req.direct.iter().copied().collect();
        skip.insert(req.node_id);
        skip.remove(&host.identity().0);
        let feed = Arc::new(FeedState {
            addr: addr.clone(),
            node_id: req.node_id,
            skip: Mutex::new(skip),
            pos: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            first: AtomicU64::new(u64::MAX),
            gone: AtomicBool::new(false),
        });
        let stream = &active.stream;
        let cont = req.stream_id == active.stream_id && stream.can_continue_from(req.offset);
        let (me, my_slot) = host.identity();
        let start = feed_start(active, (me, my_slot), &req, cont);
        let from = first_offset(active, &req, &start, cont);
        feed.pos.store(from, Release);
        feed.first.store(from, Release);
        active.departed.lock().remove(&req.node_id);
        (active.stability).on_open(req.node_id, crate::keyspace::hlc::unix_ms());
        active.feeds.lock().push(feed.clone());
        active.pin();
        // Why it cannot continue its position (a snapshot, or a resume by
        // stamp): logged here, and sent for the peer to log.
        let why = match (&start, cont) {
            (FeedStart::Full, _) | (FeedStart::Resume(_), false) => {
                no_continue_reason(active, me, &req, &start)
            }
            _ => String::new(),
        };
        log_notice!(
            "Active replica {addr} (node {:016x}) {} from offset {from}{}",
            req.node_id,
            match (&start, cont) {
                (FeedStart::Full, _) => "takes a snapshot",
                (FeedStart::Continue, _) => "continues",
                (FeedStart::Resume(_), true) =>
                    "continues after a restart, its own recent keys first,",
                (FeedStart::Resume(_), false) =>
                    "resumes by stamp, the keys it lacks first (no snapshot),",
            },
            if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            }
        );
        Feed {
            host: host.clone(),
            state: feed,
            start,
            why,
            from,
            coder: Coder::new(me),
            buf: Vec::with_capacity(64 * 1024),
            out: Vec::with_capacity(64 * 1024),
            skipped: false,
        }
    }

    /// The answer line: `+CONTINUE`, `+RESUME` or `+FULL`, our stream id,
    /// the offset the peer starts from, our node id and slot.
    pub fn answer(&self) -> String {
        let kind = match self.start {
            FeedStart::Full => "FULL",
            FeedStart::Continue => "CONTINUE",
            FeedStart::Resume(_) => "RESUME",
        };
        let (me, my_slot) = self.host.identity();
        let sid = &self.host.active().stream_id;
        let why = if self.why.is_empty() {
            String::new()
        } else {
            format!(" {}", self.why)
        };
        format!("+{kind} {sid} {} {me:016x} {my_slot}{why}\r\n", self.from)
    }

    /// What goes before the stream: nothing, or the key states of a
    /// snapshot or a resume and the snapshot's end.
    pub fn preamble(&mut self, w: &mut impl Write) -> std::io::Result<()> {
        let (core, me) = (self.host.core(), self.host.identity().0);
        let coding = (w, &mut self.coder, self.from);
        match &self.start {
            FeedStart::Continue => Ok(()),
            FeedStart::Full => send_states(core, me, coding, None),
            FeedStart::Resume(f) => send_states(core, me, coding, Some(f)),
        }
    }

    /// Sends what the stream holds from the peer's position (one read of
    /// it), but for the records it hears from their origin directly (or
    /// is the origin of), in a sealed batch that carries the offset the
    /// peer continues from. Never waits.
    pub fn step(&mut self, w: &mut impl Write) -> std::io::Result<Step> {
        const READ: usize = 256 * 1024;
        let active = self.host.active();
        let (stream, feed) = (&active.stream, &*self.state);
        let pos = feed.pos.load(Acquire);
        let n = stream
            .read(pos + self.buf.len() as u64, READ, &mut self.buf)
            .map_err(|_| std::io::Error::other("the stream no longer holds what the peer needs"))?;
        if n == 0 {
            return Ok(Step::Idle);
        }
        let out = &mut self.out;
        out.clear();
        let start = record::begin_batch(out);
        // Until the stream holds another origin's records (this node
        // forwards), there is nothing to filter.
        let used = if active.foreign.load(Acquire) {
            translate(&mut self.coder, &self.buf, out, Some(&feed.skip.lock()))?
        } else {
            translate(&mut self.coder, &self.buf, out, None)?
        };
        if used == 0 {
            return Ok(Step::Partial); // one record longer than what was read
        }
        self.skipped |= out.len() - start - record::BATCH_HEADER < used;
        self.buf.drain(..used);
        let next = pos + used as u64;
        // A batch goes out when it has records, or when the feed caught
        // up after skipping some: it tells the peer where it is (a
        // reconnect would otherwise repeat what was skipped, harmless but
        // wasted).
        let mut sent = 0;
        if out.len() > start + record::BATCH_HEADER || (self.skipped && stream.end() < next) {
            record::end_batch(out, start, next);
            w.write_all(out)?;
            active.sent_bytes.fetch_add(out.len() as u64, Relaxed);
            self.skipped = false;
            sent = out.len();
        }
        feed.pos.store(next, Release);
        active.pin();
        Ok(Step::Sent(sent))
    }

    /// The connection ended: what the peer has not acknowledged stays in
    /// the stream for it (the bytes in flight too).
    pub fn close(self) {
        let (active, feed) = (self.host.active(), &self.state);
        feed.gone.store(true, Release);
        let acked = feed.acked.load(Acquire);
        let resume = if acked > 0 {
            acked + 1
        } else {
            feed.pos.load(Acquire)
        };
        active
            .departed
            .lock()
            .insert(feed.node_id, resume.min(feed.pos.load(Acquire)));
        active.feeds.lock().retain(|f| !Arc::ptr_eq(f, feed));
        active.pin();
    }
}

/// What a feed sends before the stream.
enum FeedStart {
    /// Nothing: the peer continues from its offset.
    Continue,
    /// The states of the keys it lacks, then the stream (resume.rs).
    Resume(KeyFilter),
    /// Every key's state.
    Full,
}

/// How the feed of `req` starts; `cont`: our stream holds its offset.
/// Why a peer cannot continue its position in our stream, in words for an
/// operator (both sides log it): the cases `feed_start` and
/// `resume::origin_filter` tell apart. `start`: what it gets instead (a
/// resume by stamp needs no word on why it is not a snapshot).
fn no_continue_reason(active: &Active, me: u64, req: &PeerRequest, start: &FeedStart) -> String {
    // Worded from neither side ("the puller", "the server"): both log it.
    if req.stream_id == "?" {
        return "the puller holds no position in the server's stream (a new peer, or one that \
                lost its files)"
            .into();
    }
    if req.stream_id == active.stream_id {
        let (first, end) = active.stream.served_range();
        return if req.offset > end + 1 {
            format!(
                "offset {} is past the server's stream end {end}",
                req.offset
            )
        } else {
            format!(
                "offset {} was trimmed from the server's stream (oldest kept: {first}; see \
                 repl-backlog-size, the replica output buffer limit, repl-backlog-disk-size)",
                req.offset
            )
        };
    }
    let restarted = "the server restarted since (its stream is new)";
    if !matches!(start, FeedStart::Full) {
        return restarted.into();
    }
    match &req.from_origin {
        None => format!("{restarted}, and the puller named none of its writes it holds"),
        Some(f) if f.node_id != me => format!(
            "{restarted}, and the puller pulled from another node at its address (node {:016x})",
            f.node_id
        ),
        Some(_) => format!(
            "{restarted}, and the puller applied none of its writes since its last snapshot"
        ),
    }
}

fn feed_start(active: &Active, me: (u64, u64), req: &PeerRequest, cont: bool) -> FeedStart {
    if cont {
        // A peer restarted from its files continues after the keys it
        // wrote that we hold and it may have lost.
        return match req.lost_since {
            Some((slot, since)) => FeedStart::Resume(KeyFilter::slot_since(slot, since)),
            None => FeedStart::Continue,
        };
    }
    // We restarted (or trimmed its offset): what it lacks of our stream,
    // by stamp, when it can tell.
    super::resume::origin_filter(active, me, req).map_or(FeedStart::Full, FeedStart::Resume)
}

/// Where the feed of `req` starts in our stream: its offset where it
/// continues; where it resumes by stamp after we restarted, the start of
/// our new stream while we still hold it all, so that it gets what we
/// did since the start that its keys' stamps do not tell (a join's
/// commit at another node's version: simulator seeds 52792, 96643;
/// docs/MERGE-DESIGN.md section 8 item 31); else our stream's end.
fn first_offset(active: &Active, req: &PeerRequest, start: &FeedStart, cont: bool) -> u64 {
    let stream = &active.stream;
    if cont {
        return req.offset;
    }
    let restarted = req.stream_id != active.stream_id;
    if restarted && matches!(start, FeedStart::Resume(_)) && stream.can_continue_from(1) {
        return 1;
    }
    stream.end() + 1
}

/// The state of every key and tombstone, shard by shard (each shard's
/// records are made under its lock, then written outside it), in batches
/// that leave the peer's position at `from`, then the snapshot's end.
/// With `lost`, only those (and the flushes) it wants: on `+RESUME`, the
/// keys a peer lacks (resume.rs).
fn send_states(
    core: &Core,
    me: u64,
    (w, coder, from): (&mut impl Write, &mut Coder, u64),
    lost: Option<&KeyFilter>,
) -> std::io::Result<()> {
    let wanted = |v: u64| lost.is_none_or(|f| f.wants(v));
    let ks = &core.keyspace;
    let (mut stored, mut out) = (Vec::new(), Vec::new());
    let mut sent = 0u64;
    for db in 0..ks.num_dbs() {
        // The database's last flush first: it drops the peer's keys older
        // than it, as it did here.
        encode_flush(core, me, db, &mut stored, wanted);
        for shard in 0..crate::keyspace::SHARDS {
            {
                let mut g = ks.db(db).lock(shard);
                merge_states_now(&mut g, ks);
                // A key is wanted by its version, or by a write its merge
                // state holds (a fact applied here keeps the key's version
                // another node's while it adds that node's part or dot).
                // So is a key whose state we answered at another node's
                // version (`Shard::answered`, DECISIONS 334).
                let by_merge = |key: &[u8]| {
                    (g.merge_meta(key)).is_some_and(|m| m.stamps().into_iter().any(wanted))
                        || g.answered(key).is_some_and(wanted)
                };
                for e in g.iter().filter(|e| wanted(e.version) || by_merge(&e.key)) {
                    let payload = crate::persistence::rdb::encode::dump_payload(&e.value, false);
                    let s = (e.version, e.expire_at());
                    let merge = merge_state(&g, &e.key);
                    encode_state(&mut stored, me, db, &e.key, s, (&payload, &merge));
                    sent += 1;
                }
                let tombs = g.tombstones().filter(|&(k, s)| wanted(s) || by_merge(k));
                for (key, stamp) in tombs {
                    let merge = merge_state(&g, key);
                    encode_state(&mut stored, me, db, key, (stamp, 0), (b"", &merge));
                    sent += 1;
                }
            }
            if !stored.is_empty() {
                out.clear();
                let start = record::begin_batch(&mut out);
                translate(coder, &stored, &mut out, None)?;
                record::end_batch(&mut out, start, from);
                w.write_all(&out)?;
                stored.clear();
            }
        }
    }
    if lost.is_some() {
        log_notice!("Active replication: sent {sent} keys a resuming peer lacks");
    }
    out.clear();
    let start = record::begin_batch(&mut out);
    coder.put(&mut out, &record::Rec::bare(record::SNAP_END));
    record::end_batch(&mut out, start, from);
    w.write_all(&out)
}

/// A flush record for `db`'s last flush, if it had one and `wanted` it.
fn encode_flush(
    core: &Core,
    me: u64,
    db: usize,
    stored: &mut Vec<u8>,
    wanted: impl Fn(u64) -> bool,
) {
    let ks = &core.keyspace;
    let flushed_at = (0..crate::keyspace::SHARDS)
        .map(|i| ks.db(db).lock(i).flushed_at())
        .max()
        .unwrap_or(0);
    if flushed_at > 0 && wanted(flushed_at) {
        let flush = EffectRef {
            db,
            version: flushed_at,
            argv: &[b"FLUSHDB"],
            bases: &[],
            facts: &[],
        };
        record::encode_write(stored, me, 0, &flush);
    }
}

/// A batch smaller than this is followed by a pause of [`LINGER`].
const LINGER_BELOW: usize = 64 * 1024;
const LINGER: Duration = Duration::from_micros(1000);

/// Sends the stream to the peer ([`Feed::step`]) while it is connected;
/// sleeps while there is nothing new.
fn send_stream(host: &dyn Host, w: &mut FeedSock, feed: &mut Feed) -> std::io::Result<()> {
    let active = host.active();
    let stream = &active.stream;
    w.sock.set_write_timeout(Some(host.timeout()))?;
    while !feed.state.gone.load(Acquire) {
        match feed.step(w)? {
            Step::Idle => {
                w.flush()?; // what the session has for the peer (TLS)
                let have = feed.state.pos.load(Acquire) + feed.buf.len() as u64;
                active.bell.sleep_unless(
                    || stream.end() + 1 > have || feed.state.gone.load(Acquire),
                    Duration::from_millis(100),
                );
            }
            Step::Partial => {}
            // A small batch: let writes gather for a moment before the
            // next one (each batch costs the writer's core a wake-up and a
            // send, and the peer a wake-up and an ack; DECISIONS 49).
            Step::Sent(n) if n < LINGER_BELOW => std::thread::sleep(LINGER),
            Step::Sent(_) => {}
        }
    }
    Ok(())
}

/// Codes the whole stored records at the start of `stored` into `out`
/// for the wire, but for those of an origin in `skip`; returns the bytes
/// of `stored` consumed.
fn translate(
    coder: &mut Coder,
    stored: &[u8],
    out: &mut Vec<u8>,
    skip: Option<&HashSet<u64>>,
) -> std::io::Result<usize> {
    let mut used = 0;
    while let Some((body, n)) = record::next_frame(&stored[used..]) {
        used += n;
        if let Some(skip) = skip {
            if record::origin_of(body).is_some_and(|o| skip.contains(&o)) {
                continue;
            }
        }
        let rec = record::decode_stored(body)
            .map_err(|e| std::io::Error::other(format!("corrupt stream: {e}")))?;
        coder.put(out, &rec);
    }
    Ok(used)
}

/// Reads what the peer sends back on the feed's connection: state
/// requests and acknowledgements.
fn start_reader(host: &HostRef, mut sock: FeedSock, leftover: Vec<u8>, feed: Arc<FeedState>) {
    let host = host.clone();
    let spawned = std::thread::Builder::new()
        .name("lattice-peer-read".into())
        .spawn(move || {
            let mut buf = leftover;
            let mut parser = RequestParser::new();
            let mut tmp = vec![0u8; 16 * 1024];
            loop {
                let mut start = 0;
                loop {
                    match parser.parse(&buf[start..], &ParseLimits::default()) {
                        Ok(Parsed::Command { consumed }) => {
                            let args = parser.args(&buf[start..]);
                            on_peer_command(&*host, &feed, args);
                            start += consumed;
                        }
                        Ok(Parsed::Incomplete) => break,
                        Err(_) => {
                            feed.gone.store(true, Release);
                            return;
                        }
                    }
                }
                buf.drain(..start);
                match sock.read(&mut tmp) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&tmp[..n]),
                }
            }
            feed.gone.store(true, Release);
            host.active().bell.ring();
        });
    if let Err(e) = spawned {
        log_warning!("Active replication: can't start a reader thread: {e}");
    }
}

/// One command the peer sent back on the feed's connection (the reader
/// thread's, and the simulator's seam).
pub fn on_peer_command(host: &dyn Host, feed: &FeedState, args: Args) {
    let name = args.get(0);
    if name.eq_ignore_ascii_case(b"LATTICE.STATE") && args.len() == 3 {
        if let Some(db) = std::str::from_utf8(args.get(1))
            .ok()
            .and_then(|d| d.parse::<usize>().ok())
            .filter(|&d| d < host.core().keyspace.num_dbs())
        {
            answer_state(host, db, args.get(2));
        }
    } else if name.eq_ignore_ascii_case(b"LATTICE.DIRECT") {
        let mut skip: HashSet<u64> = (1..args.len())
            .filter_map(|i| parse_node_id(args.get(i)))
            .collect();
        skip.insert(feed.node_id);
        skip.remove(&host.identity().0);
        *feed.skip.lock() = skip;
    } else if name.eq_ignore_ascii_case(b"LATTICE.STABLE") && args.len() == 2 {
        if let Some(stamp) = std::str::from_utf8(args.get(1))
            .ok()
            .and_then(|o| o.parse().ok())
        {
            let now = crate::keyspace::hlc::unix_ms();
            host.active().stability.on_report(feed.node_id, stamp, now);
        }
    } else if name.eq_ignore_ascii_case(b"LATTICE.ACK") && args.len() == 2 {
        if let Some(off) = std::str::from_utf8(args.get(1))
            .ok()
            .and_then(|o| o.parse().ok())
        {
            feed.acked.store(off, Release);
        }
    }
}

/// Puts the state of `key` in the stream, under its shard's lock so that it
/// lands in order with the writes to it.
pub(super) fn answer_state(host: &dyn Host, db: usize, key: &[u8]) {
    let core = host.core();
    let ks = &core.keyspace;
    let (me, my_slot) = host.identity();
    let slot = ks.slot(key);
    let mut g = ks.db(db).lock(slot.shard);
    g.merge_meta_now(slot.hash, key);
    let mut buf = Vec::new();
    let version = match g.get_raw(slot.hash, key) {
        Some(e) => {
            let payload = crate::persistence::rdb::encode::dump_payload(&e.value, false);
            let merge = merge_state(&g, key);
            let s = (e.version, e.expire_at());
            encode_state(&mut buf, me, db, key, s, (&payload, &merge));
            e.version
        }
        None => {
            let stamp = g.version_of(slot.hash, key);
            let merge = merge_state(&g, key);
            encode_state(&mut buf, me, db, key, (stamp, 0), (b"", &merge));
            stamp
        }
    };
    if stamp_node(version) != my_slot && g.merges(key) {
        // Its version is not ours: a peer resuming by stamp would not find
        // it by its version, so note it (DECISIONS 334).
        g.note_answered(key, answer_stamp(core, my_slot));
        if core.effects.merge_state_wanted() {
            super::merging::emit_merge_state(core, &g, db, key);
        }
    }
    host.active().append(&buf);
    drop(g);
}

/// The stamp an answer's note carries: our clock now (or our stamp floor,
/// where our stamps ran ahead of it), with our slot, so that a peer's
/// resume by stamp, which asks for our writes since the last it applied
/// less a margin (resume.rs), takes the key where it did not get the
/// answer.
fn answer_stamp(core: &Core, my_slot: u64) -> u64 {
    use crate::keyspace::hlc::{make_stamp, stamp_clock_ms, stamp_ms};
    let floor = core.stamp_floor.load(std::sync::atomic::Ordering::Relaxed);
    make_stamp(stamp_clock_ms().max(stamp_ms(floor)), 0, my_slot)
}

/// The merge state a key's state record carries (keyspace/merge/): empty
/// for a key that does not merge. Brought up to date first (by
/// [`merge_states_now`], or `Shard::merge_meta_now` for one key).
pub(super) fn merge_state(g: &crate::keyspace::Shard, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(m) = g.merge_meta(key) {
        m.encode(&mut out);
    }
    out
}

/// Brings the merge state of every key of a shard up to date (and stores
/// it: what a peer sees of it must not change later).
fn merge_states_now(g: &mut crate::keyspace::Shard, ks: &crate::keyspace::Keyspace) {
    for key in g.merge_keys() {
        g.merge_meta_now(ks.slot(&key).hash, &key);
    }
}

/// INFO: the peers reading our stream.
pub(crate) fn feed_fields(active: &Active) -> Fields {
    let end = active.stream.end();
    let mut f = Fields::new();
    for (i, feed) in active.feeds.lock().iter().enumerate() {
        let pos = feed.pos.load(Acquire);
        let mut line = Fields::new();
        line.add("addr", feed.addr.clone())
            .add("node", format!("{:016x}", feed.node_id))
            .add("offset", pos)
            .add("lag_bytes", (end + 1).saturating_sub(pos));
        f.add(format!("feed{i}"), line);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(stream_id: &str, offset: u64) -> PeerRequest {
        PeerRequest {
            node_id: 0xb,
            stream_id: stream_id.into(),
            offset,
            slot: 2,
            direct: vec![],
            lost_since: None,
            from_origin: None,
        }
    }

    /// After our restart a resuming peer reads our new stream from its
    /// start while we hold it (simulator seed 52792), else from its end.
    #[test]
    fn a_peer_resuming_after_our_restart_reads_our_new_stream_from_its_start() {
        let active = Active::new("new".into());
        active.stream.activate(16 * 1024);
        active.stream.append_raw(&[0; 40]);
        let resume = FeedStart::Resume(KeyFilter::default());
        let at =
            |sid, start: &FeedStart, cont| first_offset(&active, &request(sid, 7), start, cont);
        assert_eq!(at("old", &resume, false), 1);
        assert_eq!(at("old", &FeedStart::Full, false), 41, "a snapshot");
        assert_eq!(
            at("new", &resume, false),
            41,
            "our stream, its offset trimmed"
        );
        assert_eq!(at("new", &FeedStart::Continue, true), 7);
        // Once our stream no longer holds its start: from its end.
        active.stream.append_raw(&[0; 20 * 1024]);
        active.stream.trim();
        assert!(!active.stream.can_continue_from(1));
        assert_eq!(at("old", &resume, false), 20 * 1024 + 41);
    }
}
