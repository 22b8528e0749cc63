//! Clients: the state a connection keeps for itself, and what other
//! connections may see or do to it (CLIENT LIST, CLIENT KILL, MONITOR feed).
//!
//! [`ClientState`] belongs to the connection's task and is passed to commands
//! by `&mut`. [`ClientShared`] is the part in the registry: a few atomics the
//! connection refreshes per command, and a channel through which others push
//! to it (monitor lines, a kill order).
//!
//! Output buffer limits (`client-output-buffer-limit`): the bytes queued for
//! a client are its reply buffer not yet written (`obuf`, set by the
//! connection around each write) plus the pushes sitting in its channel
//! (`pushed`, counted by [`ClientShared::push`] and uncounted once written).
//! A client over its class's hard limit, or over the soft limit for longer
//! than soft-secs, is flagged `closing` and woken through `kill`: the
//! connection task selects on it even while blocked writing to a peer that
//! never reads, so it drops the channel (and its memory) promptly.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use tokio::sync::Notify;

use parking_lot::Mutex;
use tokio::sync::mpsc;

/// Something pushed to a connection by another.
pub enum Push {
    /// Already-encoded bytes to write (MONITOR lines, pub/sub messages,
    /// invalidations).
    Bytes(Arc<PushBuf>),
    /// CLIENT KILL or timeout: close the connection.
    Kill,
}

/// Bytes on their way to connections, shared by every client a message
/// goes to. They are counted once ([`pushes_in_flight`]) from creation until
/// the last holder drops them (written, or copied into a reply buffer):
/// maxmemory leaves them out, as Redis's pending writes are flushed to the
/// sockets before its next command, and counting them would make eviction
/// feed itself (each evicted key's invalidations evicting more keys).
pub struct PushBuf(Vec<u8>);

static PUSHES_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

impl PushBuf {
    pub fn shared(bytes: Vec<u8>) -> Arc<PushBuf> {
        PUSHES_IN_FLIGHT.fetch_add(bytes.capacity(), Relaxed);
        Arc::new(PushBuf(bytes))
    }
}

impl std::ops::Deref for PushBuf {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl Drop for PushBuf {
    fn drop(&mut self) {
        PUSHES_IN_FLIGHT.fetch_sub(self.0.capacity(), Relaxed);
    }
}

/// Heap bytes of pushes not yet written or taken into a reply buffer.
pub(crate) fn pushes_in_flight() -> usize {
    PUSHES_IN_FLIGHT.load(Relaxed)
}

/// CLIENT REPLY mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Drop the reply of the command being executed, then back to `On`.
    Skip,
    /// Set by CLIENT REPLY SKIP: becomes `Skip` once that command is done.
    SkipNext,
}

/// The id a replica's link to its master runs the master's commands as
/// (`replication/replica/stream.rs`, Redis's CLIENT_MASTER): lazy expiry
/// never hides nor deletes a key for it (`commands/access.rs`).
pub(crate) const MASTER_LINK_ID: u64 = u64::MAX;

/// Per-connection state owned by the connection's task.
pub struct ClientState {
    pub id: u64,
    /// Connected over loopback or a unix socket (`enable-debug-command local`).
    pub local: bool,
    pub db: usize,
    pub resp: u8,
    pub authenticated: bool,
    /// The ACL user this connection runs as; `None` for the server's own
    /// clients (links, replay), which ACLs do not restrict.
    pub user: Option<Arc<super::acl::User>>,
    /// The ACL generation `user` was read at (see `core/acl`).
    pub acl_gen: u64,
    pub name: Option<String>,
    pub lib_name: Option<String>,
    pub lib_ver: Option<String>,
    pub reply_mode: ReplyMode,
    pub no_evict: bool,
    pub no_touch: bool,
    pub monitor: bool,
    /// CLIENT TRACKING is on (a hint: reads by other clients skip the
    /// tracking registry's lock; see `commands/tracking.rs`).
    pub tracking: bool,
    /// BCAST prefixes of its tracking (its memory, `core/client_mem.rs`).
    pub tracking_prefixes: usize,
    /// Set by QUIT, SHUTDOWN or a self-kill: close once replies are written.
    pub close_after_reply: bool,
    /// Set by SHUTDOWN: the server should stop after this reply.
    pub shutdown_requested: Option<crate::core::admin::ShutdownKind>,
    pub shared: Option<Arc<ClientShared>>,
    /// The address MONITOR and the slowlog show for a client the server
    /// runs itself, which has no `shared` (a replica's master client: the
    /// master's address, as Redis shows it).
    pub internal_addr: Option<Arc<str>>,
    /// The command table id of the master client's last command (CLIENT
    /// LIST `cmd=`; `usize::MAX`: none yet). Only `commands::run_master`
    /// sets it: a connection's record is refreshed by the connection.
    pub last_cmd: usize,
    /// Pub/sub subscriptions (see `core/pubsub.rs`).
    pub pubsub: crate::core::pubsub::ClientSubs,
    /// Transactions (`commands/multi.rs`): the open MULTI, if any.
    pub multi: Option<crate::core::multi::MultiState>,
    /// True while EXEC runs this client's queued commands: blocking
    /// commands (BLPOP ...) must answer as if they timed out, not block.
    pub in_exec: bool,
    /// True while a script of this client runs commands (Redis's
    /// CLIENT_SCRIPT on its Lua client): SORT orders a set's output.
    pub in_script: bool,
    /// Keys this client WATCHes (unregistered when dropped).
    pub watches: Option<crate::core::multi::Watches>,
    /// Effects of the running EXEC, emitted together when it ends.
    pub exec_effects: Option<Vec<crate::effects::Effect>>,
    /// Keys the running EXEC made ready for blocked clients (db, key):
    /// signalled when it ends, as Redis serves them after the command.
    pub exec_ready: Vec<(usize, Vec<u8>)>,
    /// BLPOP & co.: a pending block and retry state (see `blocking.rs`).
    pub block: super::blocking::BlockSlot,
    /// What REPLCONF told us (a replica's handshake).
    pub replconf: Option<Box<ReplConf>>,
    /// Set by PSYNC/SYNC: the connection becomes a replica feed.
    pub sync_request: Option<SyncRequest>,
    /// Set by LATTICE.PEER: after the batch's replies the connection
    /// becomes an active peer's feed.
    pub peer_request: Option<PeerRequest>,
    /// Set by a WAIT or WAITAOF that must wait: answered by the connection.
    pub repl_wait: Option<ReplWait>,
}

impl ClientState {
    pub fn new(id: u64) -> Self {
        ClientState {
            id,
            local: true,
            db: 0,
            resp: 2,
            authenticated: true,
            user: None,
            acl_gen: 0,
            name: None,
            lib_name: None,
            lib_ver: None,
            reply_mode: ReplyMode::On,
            no_evict: false,
            no_touch: false,
            monitor: false,
            tracking: false,
            tracking_prefixes: 0,
            close_after_reply: false,
            shutdown_requested: None,
            shared: None,
            internal_addr: None,
            last_cmd: usize::MAX,
            pubsub: Default::default(),
            multi: None,
            in_exec: false,
            in_script: false,
            watches: None,
            exec_effects: None,
            exec_ready: Vec::new(),
            block: Default::default(),
            replconf: None,
            sync_request: None,
            peer_request: None,
            repl_wait: None,
        }
    }

    /// The client's address as MONITOR and the slowlog show it ("" for
    /// the server's own clients but the master's).
    pub(crate) fn shown_addr(&self) -> String {
        match (&self.shared, &self.internal_addr) {
            (Some(sh), _) => sh.addr.clone(),
            (None, Some(addr)) => addr.to_string(),
            (None, None) => String::new(),
        }
    }
}

/// What the registry knows of a client.
pub struct ClientShared {
    pub id: u64,
    pub addr: String,
    pub laddr: String,
    pub fd: i32,
    pub created_ms: u64,
    pub last_interaction_ms: AtomicU64,
    pub db: AtomicUsize,
    pub last_cmd: AtomicUsize,
    pub qbuf: AtomicUsize,
    pub obuf: AtomicUsize,
    pub resp: AtomicUsize,
    pub monitor: AtomicBool,
    pub name: Mutex<String>,
    /// The ACL user's name (CLIENT LIST `user=`, CLIENT KILL USER).
    pub user: Mutex<String>,
    pub lib: Mutex<(String, String)>,
    /// CLIENT NO-EVICT / NO-TOUCH / pubsub flags for CLIENT LIST.
    pub flags: Mutex<String>,
    pub tx: mpsc::UnboundedSender<Push>,
    /// Bytes pushed through `tx` not yet written to the socket, and how many
    /// pushes that is (CLIENT LIST `oll`).
    pub pushed: AtomicUsize,
    pub pushed_items: AtomicUsize,
    /// When the output first went over the soft limit (unix ms, 0: not over).
    pub soft_since_ms: AtomicU64,
    /// Set once the output buffer limit was overcome: no more pushes.
    pub closing: AtomicBool,
    /// Wakes the connection task to close (see the module comment).
    pub kill: Notify,
    /// Subscription counts by `pubsub::Kind` (CLIENT LIST sub/psub/ssub).
    pub subs: [AtomicUsize; 3],
    /// Commands queued by an open MULTI; -1 outside one (CLIENT LIST multi=).
    pub multi_queued: std::sync::atomic::AtomicI64,
    /// The connection's share of this client's memory: its buffers and
    /// structures, without `pushed` (see `core/client_mem.rs`).
    pub mem_base: AtomicUsize,
    /// What the memory book counts for this client (`mem_base + pushed`
    /// when last published; 0 once closing or when not counted).
    pub mem_counted: AtomicUsize,
    /// Counted in the clients' memory (false for a replica's feed).
    pub mem_kind_counted: AtomicBool,
    /// Set when client eviction closed it (no longer listed).
    pub evicted: AtomicBool,
    /// The book this client is counted in.
    pub(crate) book: std::sync::Weak<super::client_mem::MemBook>,
}

/// All connected clients.
#[derive(Default)]
pub struct ClientRegistry {
    next_id: AtomicU64,
    /// The clients by id, and their memory (`core/client_mem.rs`).
    pub book: Arc<super::client_mem::MemBook>,
    pub monitors: AtomicUsize,
    /// The `unixsocket` path, for the addresses of unix-socket clients.
    unix_path: Mutex<String>,
}

impl ClientRegistry {
    /// A registry whose client eviction starts with `limit` bytes (0: off).
    pub fn with_limit(limit: usize) -> ClientRegistry {
        let r = ClientRegistry::default();
        r.book.set_limit(limit);
        r
    }

    /// Records the unix socket path (at start-up).
    pub fn set_unix_path(&self, path: &str) {
        *self.unix_path.lock() = path.to_string();
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Relaxed) + 1
    }

    #[allow(clippy::too_many_arguments)]
    pub fn register(
        &self,
        id: u64,
        addr: Option<SocketAddr>,
        laddr: Option<SocketAddr>,
        fd: i32,
        now_ms: u64,
        tx: mpsc::UnboundedSender<Push>,
    ) -> Arc<ClientShared> {
        // Redis shows a unix-socket client as "<path>:0", local "<path>".
        let path = self.unix_path.lock().clone();
        let addr = addr
            .map(|a| a.to_string())
            .unwrap_or_else(|| format!("{path}:0"));
        let laddr = laddr.map(|a| a.to_string()).unwrap_or(path);
        let mut c = ClientShared::new(id, addr, laddr, fd, now_ms, tx);
        c.book = Arc::downgrade(&self.book);
        let c = Arc::new(c);
        self.book.clients.lock().insert(id, c.clone());
        c
    }

    /// Lists a replica's master client (Redis's CLIENT_MASTER, `flags=M`):
    /// `addr` is the master's end of the link, `laddr` ours. Nothing reads
    /// its channel: the link thread owns the client and refreshes the
    /// record once per read (`replication/replica/master_client.rs`).
    pub fn register_master(
        &self,
        id: u64,
        addr: String,
        laddr: String,
        fd: i32,
        created_ms: u64,
    ) -> Arc<ClientShared> {
        let (tx, _) = mpsc::unbounded_channel();
        let c = ClientShared::new(id, addr, laddr, fd, created_ms, tx);
        *c.flags.lock() = "M".into();
        // Redis's master client has no ACL user.
        *c.user.lock() = "(superuser)".into();
        c.mem_kind_counted.store(false, Relaxed);
        let c = Arc::new(c);
        self.book.clients.lock().insert(id, c.clone());
        c
    }

    pub fn unregister(&self, id: u64) {
        let gone = self.book.clients.lock().remove(&id);
        if let Some(c) = gone {
            if c.monitor.load(Relaxed) {
                self.monitors.fetch_sub(1, Relaxed);
            }
            self.book.uncount(&c);
        }
    }

    /// Unregisters `c` unless its id now names another record.
    pub fn unregister_record(&self, c: &Arc<ClientShared>) {
        let mut clients = self.book.clients.lock();
        if clients.get(&c.id).is_some_and(|now| Arc::ptr_eq(now, c)) {
            clients.remove(&c.id);
        }
    }

    pub fn len(&self) -> usize {
        self.book.clients.lock().len()
    }

    /// A snapshot of every client, by id (an evicted client is gone at
    /// once, as Redis frees it, though its task may still be closing).
    pub fn snapshot(&self) -> Vec<Arc<ClientShared>> {
        let clients = self.book.clients.lock();
        let listed = clients.values().filter(|c| !c.evicted.load(Relaxed));
        listed.cloned().collect()
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientShared>> {
        self.book.clients.lock().get(&id).cloned()
    }

    /// Sends an encoded line to every MONITOR client, enforcing `limit`.
    pub fn feed_monitors(&self, line: Arc<PushBuf>, limit: &ObufLimit) {
        let now = crate::keyspace::hlc::unix_ms();
        // Pushed outside the map's lock: a push may evict clients.
        let monitors: Vec<Arc<ClientShared>> = self
            .book
            .clients
            .lock()
            .values()
            .filter(|c| c.monitor.load(Relaxed))
            .cloned()
            .collect();
        for c in monitors {
            c.push(line.clone(), limit, now);
        }
    }
}

impl ClientShared {
    /// The record of a replica's link to its master (`flags=M`), which has
    /// no ACL user: its `user` only fills CLIENT LIST.
    pub fn is_master_link(&self) -> bool {
        self.flags.lock().contains('M')
    }

    /// A fresh record: database 0, no command yet, the default user.
    fn new(
        id: u64,
        addr: String,
        laddr: String,
        fd: i32,
        now_ms: u64,
        tx: mpsc::UnboundedSender<Push>,
    ) -> ClientShared {
        ClientShared {
            id,
            addr,
            laddr,
            fd,
            created_ms: now_ms,
            last_interaction_ms: AtomicU64::new(now_ms),
            db: AtomicUsize::new(0),
            last_cmd: AtomicUsize::new(usize::MAX),
            qbuf: AtomicUsize::new(0),
            obuf: AtomicUsize::new(0),
            resp: AtomicUsize::new(2),
            monitor: AtomicBool::new(false),
            name: Mutex::new(String::new()),
            user: Mutex::new("default".into()),
            lib: Mutex::new((String::new(), String::new())),
            flags: Mutex::new(String::new()),
            tx,
            pushed: AtomicUsize::new(0),
            pushed_items: AtomicUsize::new(0),
            soft_since_ms: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            kill: Notify::new(),
            subs: Default::default(),
            multi_queued: std::sync::atomic::AtomicI64::new(-1),
            mem_base: AtomicUsize::new(0),
            mem_counted: AtomicUsize::new(0),
            mem_kind_counted: AtomicBool::new(true),
            evicted: AtomicBool::new(false),
            book: std::sync::Weak::new(),
        }
    }

    /// Queues bytes for this client and enforces its output buffer limit.
    /// Once the client is closing, pushes are dropped.
    pub fn push(&self, bytes: Arc<PushBuf>, limit: &ObufLimit, now_ms: u64) {
        if self.closing.load(Relaxed) {
            return;
        }
        self.pushed.fetch_add(bytes.len(), Relaxed);
        self.pushed_items.fetch_add(1, Relaxed);
        let _ = self.tx.send(Push::Bytes(bytes));
        if !self.check_output_limit(limit, now_ms) {
            super::client_mem::publish_to_book(self);
        }
    }

    /// CLIENT KILL: closes the connection at once, even while it is blocked
    /// writing to a peer that does not read (`kill` wakes that wait).
    pub fn kill_now(&self) {
        let _ = self.tx.send(Push::Kill);
        self.kill.notify_one();
    }

    /// The connection wrote a push of `len` bytes.
    pub fn push_written(&self, len: usize) {
        self.pushed.fetch_sub(len, Relaxed);
        self.pushed_items.fetch_sub(1, Relaxed);
    }

    /// Bytes queued for this client (CLIENT LIST `omem`).
    pub fn output_memory(&self) -> usize {
        self.obuf.load(Relaxed) + self.pushed.load(Relaxed)
    }

    /// Checks the queued output against `limit` as Redis's
    /// checkClientOutputBufferLimits: over hard, or over soft continuously
    /// for more than soft-secs. On a breach, logs Redis's line, flags the
    /// client and wakes its task; returns whether it must close.
    pub fn check_output_limit(&self, limit: &ObufLimit, now_ms: u64) -> bool {
        if self.closing.load(Relaxed) {
            return true;
        }
        let used = self.output_memory();
        let hard = limit.hard > 0 && used >= limit.hard;
        let mut soft = limit.soft > 0 && used >= limit.soft;
        if soft {
            let since = self.soft_since_ms.load(Relaxed);
            if since == 0 {
                self.soft_since_ms.store(now_ms, Relaxed);
                soft = false;
            } else if now_ms.saturating_sub(since) <= limit.soft_secs * 1000 {
                soft = false;
            }
        } else {
            self.soft_since_ms.store(0, Relaxed);
        }
        if !(hard || soft) || self.closing.swap(true, Relaxed) {
            return hard || soft;
        }
        crate::log_warning!(
            "Client id={} addr={} laddr={} fd={} name={} omem={used} scheduled to be closed ASAP \
             for overcoming of output buffer limits.",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            self.name.lock()
        );
        self.kill.notify_one();
        true
    }
}

/// One class's `client-output-buffer-limit`: 0 means no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObufLimit {
    pub hard: usize,
    pub soft: usize,
    pub soft_secs: u64,
}

/// The `client-output-buffer-limit` classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObufLimits {
    pub normal: ObufLimit,
    pub replica: ObufLimit,
    pub pubsub: ObufLimit,
}

/// Redis's default `client-output-buffer-limit`.
#[cfg(test)]
pub(crate) const DEFAULT_OBUF_LIMITS: &str =
    "normal 0 0 0 replica 256mb 64mb 60 pubsub 32mb 8mb 60";

impl ObufLimits {
    /// Parses `<class> <hard> <soft> <soft-secs>` groups over the defaults
    /// (classes not named keep their default). An empty string (directive
    /// unknown to this build) gives the defaults; a malformed one `None`.
    pub fn parse(s: &str) -> Option<ObufLimits> {
        let mut l = Self::defaults();
        let words: Vec<&str> = s.split_whitespace().collect();
        if !words.len().is_multiple_of(4) {
            return None;
        }
        for g in words.chunks(4) {
            let mem = |w: &str| {
                crate::config::parse::parse_memory(w)
                    .ok()
                    .filter(|v| *v >= 0)
            };
            let secs: i64 = g[3].parse().ok().filter(|v| *v >= 0)?;
            let class = ObufLimit {
                hard: mem(g[1])? as usize,
                soft: mem(g[2])? as usize,
                soft_secs: secs as u64,
            };
            match g[0].to_ascii_lowercase().as_str() {
                "normal" => l.normal = class,
                "replica" | "slave" => l.replica = class,
                "pubsub" => l.pubsub = class,
                _ => return None,
            }
        }
        Some(l)
    }

    pub fn defaults() -> ObufLimits {
        ObufLimits {
            normal: ObufLimit::default(),
            replica: ObufLimit {
                hard: 256 << 20,
                soft: 64 << 20,
                soft_secs: 60,
            },
            pubsub: ObufLimit {
                hard: 32 << 20,
                soft: 8 << 20,
                soft_secs: 60,
            },
        }
    }

    /// The limit for a MONITOR client. Redis counts MONITOR as "normal"
    /// (unlimited by default), so a monitor that never reads grows without
    /// bound there; LatticeDB falls back to the pubsub class when "normal"
    /// sets no limit, so the server's memory stays bounded.
    pub fn monitor(&self) -> ObufLimit {
        if self.normal.hard == 0 && self.normal.soft == 0 {
            self.pubsub
        } else {
            self.normal
        }
    }
}

// ---------------------------------------------------------------- replication
// What a connection asked of replication, kept in its state until the
// connection acts on it (`replication/master/` serves them).

/// LATTICE.PEER: an active peer asks for our stream (see
/// `replication/active/serve.rs`).
#[derive(Clone, Debug)]
pub struct PeerRequest {
    pub node_id: u64,
    /// The stream id it holds an offset of ("?": none).
    pub stream_id: String,
    /// The first offset it wants.
    pub offset: u64,
    /// The slot its stamps carry.
    pub slot: u64,
    /// The node ids it pulls from directly: records of those origins are
    /// not forwarded to it.
    pub direct: Vec<u64>,
    /// It restarted from its files (`SINCE <stamp> <slot>`): the slot its
    /// stamps carried and the stamp from which it wants back the keys it
    /// wrote (it may have lost them; see `replication/active/resume.rs`).
    pub lost_since: Option<(u64, u64)>,
    /// `FROM-ORIGIN ...`: it pulled from our previous stream (we
    /// restarted) and wants what it lacks of it by stamp instead of a
    /// snapshot (see `replication/active/resume.rs`).
    pub from_origin: Option<FromOrigin>,
}

/// What a peer that pulled from a stream of ours we no longer have holds
/// of it: `FROM-ORIGIN <our node id> <stamp> <slots>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FromOrigin {
    /// The node it pulled from (our id, unless another node took our
    /// address).
    pub node_id: u64,
    /// The newest stamp of our own writes it applied from that stream.
    pub stamp: u64,
    /// The slots of the nodes it pulls from directly (their keys come
    /// from them).
    pub direct_slots: Vec<u64>,
}

/// What a connection told us with REPLCONF before PSYNC.
#[derive(Default, Clone, Debug)]
pub struct ReplConf {
    pub listening_port: u16,
    pub ip: Option<String>,
    pub capa_eof: bool,
    pub capa_psync2: bool,
    /// The connection is a replica's link (it sent SYNC or PSYNC): its
    /// commands may not touch the keyspace (`replication::admit_write`).
    pub linked: bool,
}

/// A PSYNC or SYNC to serve once the connection's replies are written.
#[derive(Debug)]
pub struct SyncRequest {
    /// PSYNC (SYNC is the old protocol: full sync, no +FULLRESYNC line).
    pub psync: bool,
    pub replid: String,
    /// The first offset the replica wants (its offset + 1).
    pub offset: i64,
}

/// A WAIT that could not be answered at once.
#[derive(Debug)]
pub struct WaitRequest {
    pub offset: u64,
    /// Under active replication, the active stream's end: peers that
    /// acknowledged it count too.
    pub active_offset: u64,
    pub replicas: usize,
    /// Unix ms, 0: forever.
    pub deadline_ms: u64,
}

/// A WAIT or WAITAOF the connection answers once it is satisfied or
/// timed out (the worker serves other clients meanwhile).
#[derive(Debug)]
pub enum ReplWait {
    Wait(WaitRequest),
    WaitAof(WaitAof),
}

/// A WAITAOF in progress (answered by the connection, as WAIT).
#[derive(Debug)]
pub struct WaitAof {
    /// Our AOF's offset the client's writes end at (None: numlocal 0).
    pub local_end: Option<u64>,
    pub offset: u64,
    pub replicas: usize,
    pub deadline_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_limits() {
        assert_eq!(
            ObufLimits::parse(DEFAULT_OBUF_LIMITS),
            Some(ObufLimits::defaults())
        );
        assert_eq!(ObufLimits::parse(""), Some(ObufLimits::defaults()));
        let l = ObufLimits::parse("normal 1mb 512kb 10").unwrap();
        assert_eq!(
            l.normal,
            ObufLimit {
                hard: 1 << 20,
                soft: 512 << 10,
                soft_secs: 10
            }
        );
        assert_eq!(l.pubsub, ObufLimits::defaults().pubsub);
        assert_eq!(ObufLimits::parse("normal 1mb 0"), None);
        assert_eq!(ObufLimits::parse("bogus 0 0 0"), None);
        assert_eq!(ObufLimits::parse("normal -1 0 0"), None);
    }

    #[test]
    fn soft_limit_needs_to_last() {
        let reg = ClientRegistry::default();
        let (tx, _rx) = mpsc::unbounded_channel();
        let c = reg.register(1, None, None, 5, 0, tx);
        let limit = ObufLimit {
            hard: 0,
            soft: 100,
            soft_secs: 2,
        };
        c.obuf.store(150, Relaxed);
        assert!(!c.check_output_limit(&limit, 10_000)); // starts the clock
        assert!(!c.check_output_limit(&limit, 12_000)); // 2 s: not longer
        c.obuf.store(50, Relaxed);
        assert!(!c.check_output_limit(&limit, 12_500)); // back under: reset
        c.obuf.store(150, Relaxed);
        assert!(!c.check_output_limit(&limit, 13_000));
        assert!(c.check_output_limit(&limit, 15_001));
        // Closing: further pushes are dropped, not queued.
        c.push(PushBuf::shared(vec![0; 10]), &limit, 15_002);
        assert_eq!(c.pushed.load(Relaxed), 0);
    }
}
