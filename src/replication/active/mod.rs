//! Active replication: every node takes writes, and nodes that pull each
//! other's streams converge (KeyDB's `active-replica` / `multi-master`,
//! built on stamps; docs/ACTIVE-ACTIVE-DESIGN.md is the design).
//!
//! Each node has its own stream ([`Active::stream`], a [`Backlog`] with
//! its own offsets and disk tier, not the Redis replication backlog): its
//! own writes, and the records it forwards because some peer does not
//! hear their origin directly (a chain, a ring). Its records (binary,
//! record.rs has the formats, stored and on the wire):
//!
//! ```text
//!   W origin seq db stamp | bases argv     a write
//!   U origin seq db stamp | writes         a unit: a MULTI/EXEC's writes, applied all or none
//!   S origin db stamp     | expire-at key payload   a key's state (DUMP payload, empty: absent)
//!   P                     | id own stable (origin frontier)...   once a second: keeps an
//!                           idle link's timeout from firing; the frontiers of stable.rs,
//!                           which decide tombstone collection
//! ```
//!
//! `<origin>` is the writing node's 64-bit id and `<seq>` its count of
//! writes; a node forwards a record the first time it sees its (origin,
//! seq) (the version vector, [`Active::first_sight`]), and a feed skips
//! records of origins its peer pulls from directly, so each write crosses
//! each link once and never goes back to its origin.
//!
//! A write record is the write as the effect stream recorded it, with its
//! stamp and its *bases*: the version each key it opened had before it.
//! A peer applies it as it is only where its own keys have exactly those
//! versions (then the result is the same everywhere: a key's version names
//! one value on every node). Elsewhere the write and the peer's key
//! diverged: if the write's stamp is newer, the peer asks the origin for
//! the key's whole state (`LATTICE.STATE <db> <key>`, sent back on the
//! link), which comes as a state record in the stream and is applied if its
//! stamp is newer than the key's; if the peer's key is newer, the peer's
//! own record of it will win at the origin. So whatever order writes
//! arrive in, every node ends with the state of each key's newest write
//! (last writer wins, ties broken by the stamp's node slot), deletes
//! included: a deleted key keeps a tombstone with its deletion's stamp
//! (`keyspace::Shard::set_tombstone`).
//!
//! The writes of one MULTI/EXEC (a transaction, or a command Redis
//! propagates as several records) are one *unit* record: the writer's
//! thread gathers them from MULTI to EXEC (`StreamFeed::unit_effect`), and
//! a peer applies all of them under one hold of their keys' shards, or
//! none and asks for the state of all their keys (docs/ACTIVE-ACTIVE-DESIGN.md
//! "Units", DECISIONS 50).
//!
//! The serving side is `serve.rs` (LATTICE.PEER, a snapshot of key states
//! for a peer that cannot continue, then the stream); the pulling side,
//! one thread per peer, and the apply rule are `link/`.

mod facts;
pub(crate) mod link;
mod member_ttl_facts;
mod merging;
pub(crate) mod record;
pub(crate) mod resume;
pub(crate) mod serve;
pub(crate) mod sim_hooks;
pub(crate) mod stable;
mod stream_facts;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::backlog::Backlog;
use crate::core::admin::Admin;
use crate::core::info::Fields;
use crate::core::Core;
use crate::effects::{EffectRef, EffectSink};

/// What active replication needs from the node that runs it (the server
/// implements it; this module never names the server): the data, its own
/// state, and who this node is.
pub trait Host: Send + Sync {
    /// The node's data and upper layers; records replay through it.
    fn admin(&self) -> &dyn Admin;
    fn active(&self) -> &Arc<Active>;
    /// This node's id and the slot its stamps carry.
    fn identity(&self) -> (u64, u64);
    /// The port peers reach this node on (REPLCONF listening-port).
    fn port(&self) -> u16;
}

/// A shared handle on the host, for the link and feed threads.
pub type HostRef = Arc<dyn Host>;

impl dyn Host + '_ {
    pub fn core(&self) -> &Core {
        self.admin().core()
    }

    /// `repl-timeout`.
    pub fn timeout(&self) -> Duration {
        self.core().hot.replication.timeout()
    }
}

/// The fingerprints of the key states a node saw lately, in two
/// generations of at most [`SeenStates::GENERATION`] each: a state that
/// loops (a cycle in the topology that does not pass its origin) is
/// recognised on its next lap, long before its generation is dropped.
#[derive(Default)]
struct SeenStates {
    current: std::collections::HashSet<u64>,
    previous: std::collections::HashSet<u64>,
}

impl SeenStates {
    const GENERATION: usize = 1 << 16;

    /// Adds `fp`; false if it was there.
    fn insert(&mut self, fp: u64) -> bool {
        if self.current.contains(&fp) || self.previous.contains(&fp) {
            return false;
        }
        if self.current.len() >= Self::GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(fp)
    }
}

/// What [`Active::first_state_sight`] knows a key state by.
pub(crate) fn state_fingerprint(
    origin: u64,
    db: usize,
    key: &[u8],
    stamp: u64,
    merge: &[u8],
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (origin, db, key, stamp, merge).hash(&mut h);
    h.finish()
}

/// This node's side of active replication.
pub struct Active {
    /// The records of the writes made here, for peers to read.
    pub stream: Arc<Backlog>,
    /// Names this stream's history: a peer that held another (this node
    /// restarted) cannot continue by offset and takes a snapshot.
    pub stream_id: String,
    /// Feeders sleep here until the stream grows.
    pub bell: Bell,
    /// The peers we pull from (`replicaof` lines, REPLICAOF).
    pub links: Mutex<Vec<Arc<link::LinkState>>>,
    /// The peers pulling from us.
    pub feeds: Mutex<Vec<Arc<serve::FeedState>>>,
    /// This node's own records written to the stream, and their bytes
    /// (INFO; the stream also holds what it forwards).
    pub records: AtomicU64,
    pub own_bytes: AtomicU64,
    /// Bytes the feeds wrote to peers' sockets (records, seals, markers,
    /// snapshots): the wire cost (INFO, bench/active-active.sh).
    pub sent_bytes: AtomicU64,
    /// This node's id (set at start): the origin of its own records.
    pub node_id: AtomicU64,
    /// The sequence number of this node's last record: its start time in
    /// ms << 16 plus a count, so it keeps growing across restarts (peers
    /// remember the highest they saw). Held while the record is appended,
    /// so sequence numbers follow the stream's order.
    seq: Mutex<u64>,
    /// The version vector: per origin, the highest sequence number applied
    /// here (a record at or below it came by another path already and is
    /// not forwarded again).
    pub applied: Mutex<HashMap<u64, u64>>,
    /// Key states seen here lately (their fingerprints): a state goes on to
    /// our peers once, even where it changed nothing here ([`Self::first_state_sight`]).
    states_seen: Mutex<SeenStates>,
    /// Bumped when a link learns or loses its peer's node id: the links
    /// then tell their peers which origins this node hears directly.
    pub direct_gen: AtomicU64,
    /// Own records were appended since the feeders were last woken: they
    /// are woken once per batch of commands (`ring_if_dirty`, from the
    /// after-batch hook and the cron), not once per write.
    dirty: AtomicBool,
    /// The stream holds records of other origins (this node forwards):
    /// until then a feed sends what it reads without looking into it.
    pub foreign: AtomicBool,
    /// `replica-quorum` N with `replica-serve-stale-data no`: fewer than N
    /// peers are connected, so commands without the `stale` flag are
    /// refused (KeyDB's rule; `update_quorum`).
    pub below_quorum: AtomicBool,
    /// Peers that left, by node id, with the offset they will ask for: the
    /// stream keeps it for them (on disk past memory, within
    /// `repl-backlog-disk-size`), so a partitioned peer continues instead
    /// of taking a snapshot.
    pub departed: Mutex<HashMap<u64, u64>>,
    /// The links' positions the loaded data holds, until `start` creates
    /// their links (`resume.rs`).
    pub saved_links: Mutex<resume::Loaded>,
    /// What may still arrive where: decides which tombstones go
    /// (`stable.rs`).
    pub stability: stable::Stability,
    /// The cron's last PING and collection (ms), and the next shard it
    /// collects: per node, not per process (the simulator runs several
    /// nodes in one process).
    cron_last_ms: AtomicU64,
    collect_next: AtomicUsize,
    /// Whether this node's own writes enter the stream: from the first
    /// peer that attaches to it on ([`record_own_writes`], DECISIONS 177).
    recording: Mutex<bool>,
}

impl Active {
    /// `stream_id`: random, new at every start.
    pub fn new(stream_id: String) -> Self {
        Active {
            stream: Default::default(),
            stream_id,
            bell: Bell::default(),
            links: Mutex::new(vec![]),
            feeds: Mutex::new(vec![]),
            records: AtomicU64::new(0),
            own_bytes: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            node_id: AtomicU64::new(0),
            seq: Mutex::new(crate::keyspace::hlc::unix_ms() << 16),
            applied: Mutex::new(HashMap::new()),
            states_seen: Mutex::new(SeenStates::default()),
            direct_gen: AtomicU64::new(0),
            departed: Mutex::new(HashMap::new()),
            saved_links: Mutex::new(resume::Loaded::default()),
            stability: Default::default(),
            cron_last_ms: AtomicU64::new(0),
            collect_next: AtomicUsize::new(0),
            recording: Mutex::new(false),
            dirty: AtomicBool::new(false),
            foreign: AtomicBool::new(false),
            below_quorum: AtomicBool::new(false),
        }
    }

    /// Wakes the feeders if own records were appended since last time.
    #[inline]
    pub fn ring_if_dirty(&self) {
        if self.dirty.load(Relaxed) && self.dirty.swap(false, Relaxed) {
            self.bell.ring();
        }
    }

    /// Pins the stream at the lowest offset a peer, connected or gone,
    /// still needs, and trims what none needs.
    pub fn pin(&self) {
        let feeds = self.feeds.lock();
        let attached = feeds.iter().map(|f| f.pos.load(Acquire)).min();
        let gone = self.departed.lock().values().copied().min();
        self.stream.set_pin(attached, gone);
        drop(feeds);
        self.stream.trim();
    }

    /// The node ids of the peers we pull from that are connected.
    pub fn direct_origins(&self) -> Vec<u64> {
        self.links
            .lock()
            .iter()
            .filter_map(|l| l.peer_id())
            .collect()
    }

    /// Marks `seq` of `origin` as seen; false if it (or a later one) was.
    pub fn first_sight(&self, origin: u64, seq: u64) -> bool {
        let mut applied = self.applied.lock();
        let last = applied.entry(origin).or_insert(0);
        if seq <= *last {
            return false;
        }
        *last = seq;
        true
    }

    /// Marks the key state `fingerprint` (origin, database, key, stamp and
    /// merge state, [`state_fingerprint`]) as seen; false if it was lately.
    ///
    /// Why states are forwarded by sight and not only when they change
    /// something: in a ring, a node that holds more than a newer state it
    /// receives answers with its own (merging.rs, `version_join`), which
    /// reaches only its next node. If that node holds the same already, the
    /// answer changed nothing there, and forwarding only what changes would
    /// stop it there, short of the node that made the newer state (the
    /// simulator's seeds 2753, 3167, 3755). Forwarded once per node, a state
    /// goes round until it is back at its origin, or until a node saw it.
    pub fn first_state_sight(&self, fingerprint: u64) -> bool {
        self.states_seen.lock().insert(fingerprint)
    }

    /// Peers that acknowledged our stream up to `offset` (WAIT).
    pub fn acked(&self, offset: u64) -> usize {
        if offset == 0 {
            return 0;
        }
        let feeds = self.feeds.lock();
        feeds
            .iter()
            .filter(|f| f.acked.load(Acquire) >= offset)
            .count()
    }

    /// Whether a record of `origin` must enter our stream to reach anyone:
    /// a connected peer that does not hear `origin` directly, or a peer
    /// that left (it may need it when it returns). In a pair or a full mesh
    /// nothing is, so a snapshot merged from a peer is not copied into our
    /// stream.
    pub fn wanted(&self, origin: u64) -> bool {
        !self.departed.lock().is_empty() || self.feeds.lock().iter().any(|f| f.takes(origin))
    }

    /// Appends bytes to the stream and wakes the feeders.
    pub fn append(&self, bytes: &[u8]) {
        self.stream.append_raw(bytes);
        self.bell.ring();
    }

    /// Appends a record of another origin (forwarding): from now on the
    /// feeds filter what they send (see `serve::send_stream`).
    pub fn append_foreign(&self, bytes: &[u8]) {
        self.foreign.store(true, Release);
        self.append(bytes);
    }
}

/// Wakes the feeders when records are appended. A writer pays one atomic
/// load when no feeder sleeps.
#[derive(Default)]
pub struct Bell {
    rung: Mutex<u64>,
    cv: Condvar,
    sleepers: AtomicUsize,
}

impl Bell {
    pub fn ring(&self) {
        fence(SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            *self.rung.lock() += 1;
            self.cv.notify_all();
        }
    }

    /// Sleeps until a ring or `max`, unless `ready` (checked after
    /// announcing the sleep, so a ring in between is not missed).
    pub fn sleep_unless(&self, ready: impl Fn() -> bool, max: Duration) {
        self.sleepers.fetch_add(1, SeqCst);
        let mut g = self.rung.lock();
        let seen = *g;
        fence(SeqCst);
        if !ready() {
            let deadline = std::time::Instant::now() + max;
            while *g == seen && !self.cv.wait_until(&mut g, deadline).timed_out() {}
        }
        drop(g);
        self.sleepers.fetch_sub(1, SeqCst);
    }
}

thread_local! {
    /// Set while a link thread applies a peer's record: the writes that
    /// causes are the origin's, not ours, and do not enter our stream.
    static APPLYING: Cell<bool> = const { Cell::new(false) };
    static ENCODE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` as the application of a peer's record (see [`APPLYING`]).
pub(crate) fn applying<R>(f: impl FnOnce() -> R) -> R {
    APPLYING.with(|a| a.set(true));
    let r = f();
    APPLYING.with(|a| a.set(false));
    r
}

/// The effect sink that writes this node's own writes to its stream.
struct StreamFeed(Arc<Active>);

impl EffectSink for StreamFeed {
    fn on_effect(&self, e: &EffectRef<'_>) {
        if APPLYING.with(|a| a.get()) || e.aof_only() || e.replicas_alone() {
            return;
        }
        if UNIT_DEPTH.with(|d| d.get()) > 0 || is_unit_bound(e.argv) {
            return self.unit_effect(e);
        }
        let (a, origin) = (&self.0, self.0.node_id.load(Relaxed));
        ENCODE_BUF.with(|b| {
            let mut b = b.borrow_mut();
            let mut seq = crate::keyspace::held::lock_tallied(&a.seq, &STREAM_WAITED);
            *seq += 1;
            let n = record::encode_write_in(&mut b, origin, *seq, e);
            a.stream.append_raw(&b[..n]);
            a.counted(n);
            drop(seq);
            if b.len() > ENCODE_ROOM_KEPT {
                *b = Vec::new(); // a big record's room goes
            }
        });
        a.dirty.store(true, Relaxed);
    }
}

/// The most room a writer thread keeps for encoding its records
/// ([`record::encode_write_in`]).
const ENCODE_ROOM_KEPT: usize = 64 << 10;

impl Active {
    /// Counts an own record of `n` bytes (INFO). Called under the `seq`
    /// lock, the only place they change: a load and a store each, not a
    /// locked read-modify-write.
    fn counted(&self, n: usize) {
        self.own_bytes
            .store(self.own_bytes.load(Relaxed) + n as u64, Relaxed);
        self.records.store(self.records.load(Relaxed) + 1, Relaxed);
    }
}

thread_local! {
    /// This thread's contended takes of the stream's lock (`seq`, held
    /// while an own record is appended) and the time waited.
    static STREAM_WAITED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// How deep this thread is inside MULTI ... EXEC records, and the
    /// writes gathered since the outermost MULTI (see [`StreamFeed::unit_effect`]).
    static UNIT_DEPTH: Cell<u32> = const { Cell::new(0) };
    static UNIT: RefCell<record::UnitBuilder> = RefCell::new(record::UnitBuilder::default());
}

/// This thread's contended takes of the stream's lock so far: how many,
/// and the nanoseconds waited (benches/inproc.rs).
pub fn stream_lock_wait() -> (u64, u64) {
    STREAM_WAITED.with(Cell::get)
}

impl StreamFeed {
    /// A record of a unit (MULTI, a write between, EXEC): its writes are
    /// gathered on this thread and enter the stream as one record at EXEC,
    /// so a peer applies them all or none and nothing lands between them.
    /// A transaction's records come from one thread, under its locks.
    #[cold]
    fn unit_effect(&self, e: &EffectRef<'_>) {
        let depth = UNIT_DEPTH.with(|d| d.get());
        match e.argv {
            [n] if n.eq_ignore_ascii_case(b"multi") => {
                if depth == 0 {
                    UNIT.with(|u| u.borrow_mut().clear());
                }
                UNIT_DEPTH.with(|d| d.set(depth + 1));
            }
            // An EXEC whose MULTI came before we recorded (a peer attached
            // in between): its writes went out one by one.
            [n] if n.eq_ignore_ascii_case(b"exec") && depth == 0 => {}
            [n] if n.eq_ignore_ascii_case(b"exec") => {
                UNIT_DEPTH.with(|d| d.set(depth - 1));
                if depth <= 1 {
                    UNIT.with(|u| self.append_unit(&u.borrow()));
                }
            }
            _ => UNIT.with(|u| u.borrow_mut().push(e)),
        }
    }

    /// Appends a gathered unit (nothing if it has no write), under the seq
    /// lock as any own record.
    fn append_unit(&self, unit: &record::UnitBuilder) {
        if unit.is_empty() {
            return;
        }
        let origin = self.0.node_id.load(Relaxed);
        ENCODE_BUF.with(|b| {
            let mut b = b.borrow_mut();
            b.clear();
            let mut seq = crate::keyspace::held::lock_tallied(&self.0.seq, &STREAM_WAITED);
            *seq += 1;
            unit.finish(&mut b, origin, *seq);
            self.0.stream.append_raw(&b);
            self.0.counted(b.len());
        });
        self.0.dirty.store(true, Relaxed);
    }
}

/// MULTI and EXEC, which bound a unit.
fn is_unit_bound(argv: &[&[u8]]) -> bool {
    matches!(argv, [n] if n.eq_ignore_ascii_case(b"multi") || n.eq_ignore_ascii_case(b"exec"))
}

/// At start-up: the stream and its feed, and the links to the peers the
/// config names. `fresh_id`: our node id was drawn at this start; our own
/// writes then enter the stream from the first peer that attaches on
/// ([`record_own_writes`]), else from now on.
pub(crate) fn start(host: &HostRef, fresh_id: bool) {
    prepare_stream(host);
    if !fresh_id {
        record_own_writes(host);
    }
    let active = host.active();
    // What a peer has not received waits for it in memory up to the
    // replica hard limit, then on disk (in its own directory: the Redis
    // backlog spills beside it with the same file names).
    let dir = std::path::Path::new("active-stream");
    match std::fs::create_dir_all(dir) {
        Ok(()) => active.stream.start_spiller(dir),
        Err(e) => crate::log_warning!("Active replication: no disk tier for the stream ({e})"),
    }
    let (v, multi) = {
        let c = host.core().config.read();
        (c.get_str("replicaof"), c.get_bool("multi-master"))
    };
    let mut peers = crate::config::directives::replicaof_pairs(&v);
    if !multi {
        // Without multi-master a node has one peer: the last line's.
        peers = peers.split_off(peers.len().saturating_sub(1));
    }
    for (h, p) in peers {
        link::add_peer(host, h, p);
    }
}

/// [`start`] but for the disk tier and the links, which need threads: this
/// node's identity, its stream, and its writes entering the stream. Also
/// the simulator's seam (tests/simulator.rs), which makes its links itself
/// (`link::new_link`).
pub fn start_stream(host: &HostRef) {
    prepare_stream(host);
    record_own_writes(host);
}

/// [`start_stream`] but for our own writes entering the stream.
fn prepare_stream(host: &HostRef) {
    let core = host.core();
    let active = host.active();
    active.node_id.store(host.identity().0, Relaxed);
    let floor = core.stamp_floor.load(Acquire);
    resume::note_start(active, floor);
    // Our sequence numbers must pass those of our previous run, which our
    // peers remember (`first_sight`): a clock stepped back since then
    // would start them lower, and our records would never be forwarded.
    // The newest stamp our data holds is at or after that run's start.
    // And above the last number the data notes (resume.rs, `AUX_SEQ`):
    // the newest stamp kept may be older than our last records where the
    // clock went back between the starts.
    let after_loaded = (crate::keyspace::hlc::stamp_ms(floor) + 1) << 16;
    let noted = active.saved_links.lock().seq;
    let mut seq = active.seq.lock();
    *seq = (*seq).max(after_loaded).max(noted);
    drop(seq);
    let (size, disk, hard) = {
        let c = core.config.read();
        let size = c.get_i64("repl-backlog-size").max(16 * 1024) as usize;
        let disk = c.get_i64("repl-backlog-disk-size").max(0) as u64;
        let hard = super::replica_hard_limit(&c.get_str("client-output-buffer-limit"));
        (size, disk, hard)
    };
    active.stream.activate(size);
    active.stream.hard_cap.store(hard, Relaxed);
    active.stream.disk_max.store(disk, Relaxed);
}

/// Our own writes enter the stream from now on, if they did not yet: at
/// the start of a node whose id is not new, else when the first peer
/// attaches, before it chooses where the peer starts (DECISIONS 177), as
/// Redis creates its backlog at its first replica. A node of a new id is
/// known to no peer: none holds our stream's id (new at every start, told
/// only by a feed's answer) or resumes by our node id, so the first to
/// attach takes a snapshot, which starts at the stream's end anyway.
pub(crate) fn record_own_writes(host: &HostRef) {
    let active = host.active();
    // Under the lock until subscribed: a second peer attaching at once
    // must not choose its start before our writes are recorded.
    let mut on = active.recording.lock();
    if !*on {
        let feed = Arc::new(StreamFeed(active.clone()));
        host.core().effects.subscribe(feed);
        *on = true;
    }
}

/// Recomputes [`Active::below_quorum`] (the cron, CONFIG SET, a link up
/// or down). `replica-quorum` -1, the default, never refuses: an active
/// node serves whatever its peers do.
pub(crate) fn update_quorum(active: &Active, core: &Core) {
    let quorum = core.hot.replication.quorum.load(Relaxed);
    let serve_stale = core.hot.replication.serve_stale_data.load(Relaxed);
    let below = quorum >= 0 && !serve_stale && {
        let up = active.links.lock().iter().filter(|l| l.is_up()).count();
        (up as i64) < quorum
    };
    active.below_quorum.store(below, Relaxed);
}

/// Worker 0's cron, once a second: a PING record with this node's
/// frontiers (so a peer's link notices a dead connection by its own
/// timeout, and learns what is stable), and the collection of tombstones.
pub fn cron(active: &Active, core: &Core) {
    update_quorum(active, core);
    let now = crate::keyspace::hlc::unix_ms();
    if now.saturating_sub(active.cron_last_ms.load(Relaxed)) < 1000 {
        return;
    }
    active.cron_last_ms.store(now, Relaxed);
    collect_tombstones(active, core);
    ping(active);
}

/// `active-tombstone-grace` in ms.
fn grace_ms(core: &Core) -> u64 {
    1000 * core.hot.replication.tombstone_grace_secs.load(Relaxed)
}

/// Forgets, a slice of the keyspace per call, the tombstones below every
/// node's stable stamp, and those older than `active-tombstone-grace`
/// whatever a departed peer still blocks (`stable.rs`).
fn collect_tombstones(active: &Active, core: &Core) {
    let st = &active.stability;
    let keys: Vec<String> = active.links.lock().iter().map(|l| l.key()).collect();
    st.retain_links(&keys);
    let now = crate::keyspace::hlc::stamp_clock_ms();
    let me = active.node_id.load(Relaxed);
    let stable = st.stable_stamp(me, &keys, now);
    st.stable.store(stable, Relaxed);
    let grace_cutoff = crate::keyspace::hlc::make_stamp(now.saturating_sub(grace_ms(core)), 0, 0);
    let (exact, cutoff) = st.cutoffs(stable, &keys, grace_cutoff);
    st.cutoff.store(cutoff, Relaxed);
    st.exact.store(exact, Relaxed);
    let ks = &core.keyspace;
    let total = ks.num_dbs() * crate::keyspace::SHARDS;
    let (mut collected, mut forced) = (0, 0);
    // A quarter of the shards per second: every tombstone is looked at
    // within 4 s, and no call holds one shard's lock for long.
    let holds = st.holds(exact);
    for _ in 0..total.div_ceil(4) {
        let i = active.collect_next.fetch_add(1, Relaxed) % total;
        let (db, shard) = (i / crate::keyspace::SHARDS, i % crate::keyspace::SHARDS);
        let mut g = ks.db(db).lock(shard);
        collected += g.collect_tombstones(exact, |k| holds.keeps(db, k, exact));
        if cutoff > exact {
            forced += g.collect_tombstones(cutoff, |k| holds.keeps(db, k, cutoff));
        }
    }
    st.note_collected(collected, forced, crate::keyspace::hlc::unix_ms());
}

/// Why the peer `node` may not rejoin (it was away longer than the grace
/// while tombstones were collected anyway), if so.
pub(crate) fn rejoin_refusal(active: &Active, core: &Core, node: u64) -> Option<String> {
    let now = crate::keyspace::hlc::unix_ms();
    active.stability.rejoin_refusal(node, grace_ms(core), now)
}

/// Tombstones held (INFO).
pub(crate) fn tombstones(core: &Core) -> usize {
    let ks = &core.keyspace;
    (0..ks.num_dbs())
        .flat_map(|db| (0..crate::keyspace::SHARDS).map(move |s| (db, s)))
        .map(|(db, s)| ks.db(db).lock(s).tombstone_count())
        .sum()
}

/// Appends the PING record (`stable.rs`) for the peers reading the
/// stream, or that will when they return.
fn ping(active: &Active) {
    if active.feeds.lock().is_empty() && active.departed.lock().is_empty() {
        return;
    }
    let me = active.node_id.load(Relaxed);
    let now = crate::keyspace::hlc::stamp_clock_ms();
    let b = active.stability.ping_record(me, now);
    active.stream.append_raw(&b);
    active.bell.ring();
}

/// INFO replication's fields for the peers of an active node.
pub(crate) fn info_fields(active: &Active, core: &Core) -> Fields {
    let st = &active.stability;
    let stable = st.stable.load(Relaxed);
    // How far behind this node's clock what is stable here is (-1: nothing).
    let lag = match crate::keyspace::hlc::stamp_ms(stable) {
        0 => -1,
        ms => crate::keyspace::hlc::stamp_clock_ms().saturating_sub(ms) as i64,
    };
    let cutoff = st.cutoff.load(Relaxed);
    // Each stamp also as the time it names (unix ms), for an operator.
    let ms = crate::keyspace::hlc::stamp_ms;
    let mut f = Fields::new();
    f.add("active_tombstones", tombstones(core))
        .add("active_tombstones_collected", st.collected.load(Relaxed))
        .add("active_tombstones_forced", st.forced.load(Relaxed))
        .add("active_stable_stamp", stable)
        .add("active_stable_unix_ms", ms(stable))
        .add("active_stable_lag_ms", lag)
        .add("active_collect_cutoff", cutoff)
        .add("active_collect_cutoff_unix_ms", ms(cutoff));
    let links = active.links.lock();
    // KeyDB's summary of its links (its tests and tools read it); never a
    // top-level master_link_status, which clients take for a replica's.
    let all_up = links.iter().all(|l| l.is_up());
    f.add("active_replica", 1)
        .add("active_peers", links.len())
        .add(
            "master_global_link_status",
            if all_up { "up" } else { "down" },
        );
    for (i, l) in links.iter().enumerate() {
        f.add(format!("peer{i}"), l.info());
    }
    f.add("active_stream_offset", active.stream.end())
        .add("active_own_records", active.records.load(Relaxed))
        .add("active_own_bytes", active.own_bytes.load(Relaxed))
        .add("active_sent_bytes", active.sent_bytes.load(Relaxed))
        .add("active_feeds", active.feeds.lock().len());
    f.append(serve::feed_fields(active));
    f
}

#[cfg(test)]
mod tests {
    use super::SeenStates;

    /// A state is forwarded once: seen again (another path, a lap of a
    /// cycle) it is known, also after its generation was moved aside.
    #[test]
    fn a_state_is_seen_once_across_a_generation() {
        let mut seen = SeenStates::default();
        assert!(seen.insert(7));
        assert!(!seen.insert(7));
        for fp in 100..100 + SeenStates::GENERATION as u64 {
            assert!(seen.insert(fp));
        }
        assert!(!seen.insert(7), "the previous generation still knows it");
        for fp in 1_000_000..1_000_000 + SeenStates::GENERATION as u64 {
            seen.insert(fp);
        }
        assert!(seen.insert(7), "two generations later it is forgotten");
    }
}
