//! The server: listeners, worker threads and the state they share.
//!
//! Start-up binds every listener, then starts `server-threads` workers. Each
//! worker is one OS thread running its own single-threaded tokio event loop
//! over the connections it was given; an acceptor thread hands new
//! connections to workers round-robin. A connection lives on one worker for
//! its whole life, and that worker executes its commands directly on the
//! keyspace shards (see `keyspace/mod.rs`): there is no hop to another thread
//! on the request path. Each worker also runs its share of the active expiry
//! cycle over a fixed subset of the shards.
//!
//! [`Server`] is what all threads share: keyspace, configuration, command
//! table, client registry, counters and the write-effect stream.

pub mod blocking;
pub mod client;
pub mod conn;
pub mod cron;
pub mod pubsub;
pub mod stats;

use std::net::SocketAddr;
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed,
};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, Notify};

use crate::commands::CommandTable;
use crate::config::Config;
use crate::effects::Effects;
use crate::keyspace::Keyspace;
use crate::{log_notice, log_warning};
use client::ClientRegistry;
use stats::WorkerStats;

/// How SHUTDOWN asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownKind {
    Default,
    Save,
    NoSave,
    /// A signal (SIGTERM/SIGINT).
    Signal(i32),
}

/// Configuration values read on the hot path, mirrored from [`Config`].
#[derive(Default)]
pub struct HotConfig {
    pub proto_max_bulk_len: AtomicUsize,
    pub query_buffer_limit: AtomicUsize,
    pub maxclients: AtomicUsize,
    pub timeout_secs: AtomicU64,
    pub requirepass: RwLock<Option<String>>,
    pub hz: AtomicU64,
    pub slowlog_slower_than: AtomicU64,
    pub slowlog_max_len: AtomicUsize,
    pub active_expire: AtomicBool,
    /// `protected-mode`: without a password, only loopback clients are served.
    pub protected_mode: AtomicBool,
    /// `client-output-buffer-limit`, parsed (see `client::ObufLimits`).
    pub obuf_limits: RwLock<client::ObufLimits>,
    /// Thresholds at which small collections leave their compact encoding.
    pub encoding: EncodingLimits,
    /// `notify-keyspace-events` as `commands::events::class` bits.
    pub notify_keyspace_events: AtomicU32,
    /// `lazyfree-lazy-user-del`: DEL frees big values as UNLINK does.
    pub lazyfree_user_del: AtomicBool,
    /// `lazyfree-lazy-expire`: expired big values are freed in the background.
    pub lazyfree_expire: AtomicBool,
    /// `maxmemory` in bytes (0: no limit) and how to stay under it.
    pub maxmemory: AtomicU64,
    /// min-replicas-to-write and min-replicas-max-lag (seconds).
    pub min_replicas_to_write: AtomicU64,
    pub min_replicas_max_lag: AtomicU64,
    pub eviction: crate::commands::evict::EvictionConfig,
}

/// The `*-max-listpack-*` / `set-max-intset-entries` thresholds: a
/// collection converts from its compact encoding (listpack, intset) to the
/// big one when it grows past them, as in Redis; CONFIG SET applies to
/// conversions made afterwards.
#[derive(Default)]
pub struct EncodingLimits {
    /// `list-max-listpack-size`: > 0 entries per node, < 0 a size class
    /// (-1 4 KiB ... -5 64 KiB).
    pub list_max_listpack_size: AtomicI64,
    pub hash_max_listpack_entries: AtomicUsize,
    pub hash_max_listpack_value: AtomicUsize,
    pub set_max_intset_entries: AtomicUsize,
    pub set_max_listpack_entries: AtomicUsize,
    pub set_max_listpack_value: AtomicUsize,
    pub zset_max_listpack_entries: AtomicUsize,
    pub zset_max_listpack_value: AtomicUsize,
}

impl EncodingLimits {
    /// Redis 7's defaults (the directives' defaults), for code without a
    /// server: tests and fuzzing of the loader.
    pub fn defaults() -> EncodingLimits {
        let l = EncodingLimits::default();
        l.load(&Config::default());
        l
    }

    fn load(&self, c: &Config) {
        let u = |name: &str| c.get_i64(name).max(0) as usize;
        self.list_max_listpack_size
            .store(c.get_i64("list-max-listpack-size"), Relaxed);
        self.hash_max_listpack_entries
            .store(u("hash-max-listpack-entries"), Relaxed);
        self.hash_max_listpack_value
            .store(u("hash-max-listpack-value"), Relaxed);
        self.set_max_intset_entries
            .store(u("set-max-intset-entries"), Relaxed);
        self.set_max_listpack_entries
            .store(u("set-max-listpack-entries"), Relaxed);
        self.set_max_listpack_value
            .store(u("set-max-listpack-value"), Relaxed);
        self.zset_max_listpack_entries
            .store(u("zset-max-listpack-entries"), Relaxed);
        self.zset_max_listpack_value
            .store(u("zset-max-listpack-value"), Relaxed);
    }
}

impl HotConfig {
    /// Refreshes the mirror after the configuration changed.
    pub fn load(&self, c: &Config) {
        self.proto_max_bulk_len
            .store(c.get_i64("proto-max-bulk-len") as usize, Relaxed);
        self.query_buffer_limit
            .store(c.get_i64("client-query-buffer-limit") as usize, Relaxed);
        self.maxclients
            .store(c.get_i64("maxclients") as usize, Relaxed);
        self.timeout_secs
            .store(c.get_i64("timeout") as u64, Relaxed);
        let pass = c.get_str("requirepass");
        *self.requirepass.write() = if pass.is_empty() { None } else { Some(pass) };
        self.hz.store(c.get_i64("hz").clamp(1, 500) as u64, Relaxed);
        self.slowlog_slower_than
            .store(c.get_i64("slowlog-log-slower-than") as u64, Relaxed);
        self.slowlog_max_len
            .store(c.get_i64("slowlog-max-len") as usize, Relaxed);
        self.protected_mode
            .store(c.get_bool("protected-mode"), Relaxed);
        if let Some(l) = client::ObufLimits::parse(&c.get_str("client-output-buffer-limit")) {
            *self.obuf_limits.write() = l;
        }
        if let Some(l) = crate::log::Level::parse(&c.get_str("loglevel")) {
            crate::log::set_level(l);
        }
        self.encoding.load(c);
        self.notify_keyspace_events.store(
            crate::commands::events::parse_classes(&c.get_str("notify-keyspace-events")),
            Relaxed,
        );
        self.lazyfree_user_del
            .store(c.get_bool("lazyfree-lazy-user-del"), Relaxed);
        self.lazyfree_expire
            .store(c.get_bool("lazyfree-lazy-expire"), Relaxed);
        self.maxmemory
            .store(c.get_i64("maxmemory").max(0) as u64, Relaxed);
        self.min_replicas_to_write
            .store(c.get_i64("min-replicas-to-write").max(0) as u64, Relaxed);
        self.min_replicas_max_lag
            .store(c.get_i64("min-replicas-max-lag").max(0) as u64, Relaxed);
        self.eviction.load(c);
    }
}

/// One SLOWLOG entry.
#[derive(Clone, Debug)]
pub struct SlowEntry {
    pub id: u64,
    pub time: u64,
    pub usec: u64,
    pub args: Vec<Vec<u8>>,
    pub addr: String,
    pub name: String,
}

/// State shared by every thread.
pub struct Server {
    pub keyspace: Keyspace,
    pub config: RwLock<Config>,
    pub hot: HotConfig,
    pub effects: Effects,
    pub commands: CommandTable,
    pub clients: ClientRegistry,
    pub workers: Mutex<Vec<Arc<WorkerStats>>>,
    /// INFO's instantaneous_* rates, sampled by the cron.
    pub metrics: stats::InstantMetrics,
    pub started: Instant,
    pub start_unix_ms: u64,
    pub run_id: String,
    /// Low bits of the HLC stamps this node issues.
    pub node_id: u64,
    pub tcp_port: AtomicUsize,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub slowlog: Mutex<std::collections::VecDeque<SlowEntry>>,
    pub slowlog_next_id: AtomicU64,
    /// CLIENT PAUSE: deadline (unix ms, 0 = none) and whether all commands pause.
    pub pause_until_ms: AtomicU64,
    pub pause_all: AtomicBool,
    pub unpaused: Notify,
    pub shutdown_tx: Mutex<Option<std::sync::mpsc::Sender<ShutdownKind>>>,
    pub shutting_down: AtomicBool,
    pub lastsave_unix: AtomicU64,
    /// Pub/sub channels and patterns (see `pubsub.rs`).
    pub pubsub: pubsub::PubSub,
    /// Keys WATCHed by clients (`commands/multi.rs`).
    pub watch: Arc<crate::commands::multi::WatchRegistry>,
    /// Clients blocked on keys (BLPOP & co.), see `blocking.rs`.
    pub blocking: blocking::Registry,
    pub tracking: crate::commands::tracking::Tracking,
    /// The background thread that frees big values and flushed databases.
    pub lazyfree: crate::keyspace::lazyfree::LazyFree,
    /// RDB snapshots and the AOF (`src/persistence/`).
    pub persist: crate::persistence::Persistence,
    /// Replication, both roles (`src/replication/`).
    pub repl: crate::replication::Replication,
}

impl Server {
    pub fn new(config: Config) -> Arc<Server> {
        let databases = config.get_i64("databases").max(1) as usize;
        let hot = HotConfig::default();
        hot.active_expire.store(true, Relaxed);
        hot.load(&config);
        let run_id = random_hex(40);
        let node_id = u64::from_str_radix(&run_id[..4], 16).unwrap_or(1);
        let now = crate::keyspace::hlc::unix_ms();
        Arc::new(Server {
            keyspace: Keyspace::new(databases),
            config: RwLock::new(config),
            hot,
            effects: Effects::default(),
            commands: CommandTable::build(),
            clients: ClientRegistry::default(),
            workers: Mutex::new(vec![]),
            metrics: Default::default(),
            started: Instant::now(),
            start_unix_ms: now,
            run_id,
            node_id,
            tcp_port: AtomicUsize::new(0),
            total_connections: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            slowlog: Mutex::new(Default::default()),
            slowlog_next_id: AtomicU64::new(0),
            pause_until_ms: AtomicU64::new(0),
            pause_all: AtomicBool::new(false),
            unpaused: Notify::new(),
            shutdown_tx: Mutex::new(None),
            shutting_down: AtomicBool::new(false),
            lastsave_unix: AtomicU64::new(now / 1000),
            pubsub: Default::default(),
            watch: Default::default(),
            blocking: Default::default(),
            tracking: Default::default(),
            lazyfree: Default::default(),
            persist: Default::default(),
            repl: Default::default(),
        })
    }

    /// A new stats block for one worker (or a test harness).
    pub fn new_worker_stats(&self) -> Arc<WorkerStats> {
        let s = Arc::new(WorkerStats::new(self.commands.all.len()));
        self.workers.lock().push(s.clone());
        s
    }

    /// Asks the main thread to stop the server.
    pub fn request_shutdown(&self, kind: ShutdownKind) {
        if let Some(tx) = self.shutdown_tx.lock().as_ref() {
            let _ = tx.send(kind);
        }
    }
}

/// Random lowercase hex (run ids), seeded from the clock and address space.
pub fn random_hex(n: usize) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::with_capacity(n);
    let state = std::collections::hash_map::RandomState::new();
    let mut i = 0u64;
    while out.len() < n {
        let mut h = state.build_hasher();
        h.write_u64(i);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        out.push_str(&format!("{:016x}", h.finish()));
        i += 1;
    }
    out.truncate(n);
    out
}

/// A connection accepted by the acceptor, on its way to a worker.
pub enum NewConn {
    Tcp(std::net::TcpStream, SocketAddr),
    Unix(std::os::unix::net::UnixStream),
}

/// Binds the listeners described by `bind`/`port`/`unixsocket`.
fn bind_listeners(
    cfg: &Config,
) -> Result<
    (
        Vec<std::net::TcpListener>,
        Option<std::os::unix::net::UnixListener>,
    ),
    String,
> {
    let port = cfg.port();
    let mut tcp = vec![];
    if port != 0 {
        // `tcp-backlog` (511 when this build does not know the directive).
        let backlog = match cfg.get_i64("tcp-backlog") {
            n if n > 0 => n.min(i32::MAX as i64) as i32,
            _ => 511,
        };
        for addr in cfg.get_str("bind").split_whitespace() {
            let (optional, addr) = match addr.strip_prefix('-') {
                Some(a) => (true, a),
                None => (false, addr),
            };
            let addr = match addr {
                "*" => "0.0.0.0",
                "::*" => "::",
                a => a,
            };
            let sa: SocketAddr = if addr.contains(':') {
                format!("[{addr}]:{port}")
            } else {
                format!("{addr}:{port}")
            }
            .parse()
            .map_err(|e| format!("Invalid bind address '{addr}': {e}"))?;
            match bind_tcp(sa, backlog) {
                Ok(l) => tcp.push(l),
                Err(e) if optional => log_notice!("Could not bind optional address {sa}: {e}"),
                Err(e) => {
                    // Redis's two lines; tools (its test suite) look for the second.
                    log_warning!(
                        "Warning: Could not create server TCP listening socket {sa}: bind: {e}"
                    );
                    return Err(format!("Failed listening on port {port} (tcp), aborting."));
                }
            }
        }
    }
    let path = cfg.get_str("unixsocket");
    let unix = if path.is_empty() {
        None
    } else {
        let _ = std::fs::remove_file(&path);
        let l = std::os::unix::net::UnixListener::bind(&path)
            .map_err(|e| format!("Failed opening Unix socket: {e}"))?;
        let perm = u32::from_str_radix(&cfg.get_str("unixsocketperm"), 8).unwrap_or(0);
        if perm != 0 {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(perm));
        }
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        Some(l)
    };
    if tcp.is_empty() && unix.is_none() {
        return Err("Configured to not listen anywhere, exiting.".into());
    }
    Ok((tcp, unix))
}

fn bind_tcp(sa: SocketAddr, backlog: i32) -> std::io::Result<std::net::TcpListener> {
    // std sets SO_REUSEADDR on Unix, as Redis does.
    let l = std::net::TcpListener::bind(sa)?;
    // std listens with a backlog of 128; a burst of connections beyond it
    // loses SYNs and waits a second for the retry. Listening again sets
    // Redis's `tcp-backlog` (511) instead (the kernel caps it at somaxconn).
    // SAFETY: the fd belongs to `l`, a bound listening socket, while called.
    unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), backlog) };
    Ok(l)
}

/// Runs the server until SHUTDOWN or a signal. Returns the process exit code.
pub fn run(config: Config) -> Result<i32, String> {
    let (tcp, unix) = bind_listeners(&config)?;
    let threads = config.threads();
    let pidfile = config.get_str("pidfile");
    let unix_path = config.get_str("unixsocket");
    let port = config.port();
    let srv = Server::new(config);
    // Clients are served while the data loads (after the workers start),
    // with -LOADING for commands without the `loading` flag.
    crate::persistence::load::begin_startup(&srv);
    srv.tcp_port.store(port as usize, Relaxed);
    srv.clients.set_unix_path(&unix_path);
    if !pidfile.is_empty() {
        let _ = std::fs::write(&pidfile, format!("{}\n", std::process::id()));
    }
    let (shutdown_tx, shutdown_rx) = std::sync::mpsc::channel();
    *srv.shutdown_tx.lock() = Some(shutdown_tx.clone());

    let pin = matches!(
        srv.config
            .read()
            .get_str("server-thread-affinity")
            .to_ascii_lowercase()
            .as_str(),
        "yes" | "true"
    );
    let mut senders = vec![];
    for i in 0..threads {
        let (tx, rx) = mpsc::unbounded_channel::<NewConn>();
        senders.push(tx);
        let srv = srv.clone();
        let stats = srv.new_worker_stats();
        std::thread::Builder::new()
            .name(format!("lattice-worker-{i}"))
            .spawn(move || {
                if pin {
                    pin_to_cpu(i);
                }
                worker_main(srv, stats, i, threads, rx)
            })
            .map_err(|e| e.to_string())?;
    }
    {
        let srv = srv.clone();
        std::thread::Builder::new()
            .name("lattice-accept".into())
            .spawn(move || acceptor_main(srv, tcp, unix, senders, shutdown_tx))
            .map_err(|e| e.to_string())?;
    }
    log_notice!("Server initialized");
    crate::persistence::load::at_startup(&srv)?;
    crate::replication::replica::start_from_config(&srv);
    log_notice!("Ready to accept connections tcp");
    loop {
        let kind = shutdown_rx.recv().unwrap_or(ShutdownKind::Default);
        match kind {
            ShutdownKind::Signal(sig) => {
                let name = if sig == libc::SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                };
                log_warning!("Received {name} scheduling shutdown...");
                // As Redis: if the final save fails, the server stays up.
                if !crate::persistence::save::save_on_shutdown(&srv, false) {
                    continue;
                }
            }
            _ => log_warning!("User requested shutdown..."),
        }
        break;
    }
    crate::persistence::aof::on_shutdown(&srv);
    srv.shutting_down.store(true, Relaxed);
    if !pidfile.is_empty() {
        let _ = std::fs::remove_file(&pidfile);
    }
    if !unix_path.is_empty() {
        let _ = std::fs::remove_file(&unix_path);
    }
    log_warning!("{} is now ready to exit, bye bye...", "LatticeDB");
    Ok(0)
}

/// `server-thread-affinity yes`: worker i runs on CPU i (mod the CPU count).
fn pin_to_cpu(i: usize) {
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // SAFETY: cpu_set_t is plain data, zero is a valid empty set, and
    // sched_setaffinity(0, ...) only reads the set we pass for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(i % ncpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            log_warning!("Could not pin worker {i} to CPU {}", i % ncpu);
        }
    }
}

fn worker_main(
    srv: Arc<Server>,
    stats: Arc<WorkerStats>,
    index: usize,
    nworkers: usize,
    mut rx: mpsc::UnboundedReceiver<NewConn>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let local = tokio::task::LocalSet::new();
    let worker = std::rc::Rc::new(conn::Worker::new(srv.clone(), stats, index));
    local.block_on(&rt, async move {
        tokio::task::spawn_local(cron::worker_cron(
            srv.clone(),
            worker.clone(),
            index,
            nworkers,
        ));
        while let Some(c) = rx.recv().await {
            tokio::task::spawn_local(conn::serve(srv.clone(), worker.clone(), c));
        }
    });
}

fn acceptor_main(
    srv: Arc<Server>,
    tcp: Vec<std::net::TcpListener>,
    unix: Option<std::os::unix::net::UnixListener>,
    workers: Vec<mpsc::UnboundedSender<NewConn>>,
    shutdown: std::sync::mpsc::Sender<ShutdownKind>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let next = Arc::new(AtomicUsize::new(0));
        for l in tcp {
            let _ = l.set_nonblocking(true);
            let l = tokio::net::TcpListener::from_std(l).expect("listener");
            let (workers, next, srv) = (workers.clone(), next.clone(), srv.clone());
            tokio::spawn(async move {
                let mut failed = AcceptErrors::default();
                loop {
                    let (s, addr) = match l.accept().await {
                        Ok(c) => c,
                        Err(e) => {
                            failed.back_off(e).await;
                            continue;
                        }
                    };
                    srv.total_connections.fetch_add(1, Relaxed);
                    let _ = s.set_nodelay(true);
                    let Ok(s) = s.into_std() else { continue };
                    let i = next.fetch_add(1, Relaxed) % workers.len();
                    let _ = workers[i].send(NewConn::Tcp(s, addr));
                }
            });
        }
        if let Some(l) = unix {
            let l = tokio::net::UnixListener::from_std(l).expect("unix listener");
            let (workers, next, srv) = (workers.clone(), next.clone(), srv.clone());
            tokio::spawn(async move {
                let mut failed = AcceptErrors::default();
                loop {
                    let s = match l.accept().await {
                        Ok((s, _)) => s,
                        Err(e) => {
                            failed.back_off(e).await;
                            continue;
                        }
                    };
                    srv.total_connections.fetch_add(1, Relaxed);
                    let Ok(s) = s.into_std() else { continue };
                    let i = next.fetch_add(1, Relaxed) % workers.len();
                    let _ = workers[i].send(NewConn::Unix(s));
                }
            });
        }
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        let sig = tokio::select! {
            _ = term.recv() => libc::SIGTERM,
            _ = int.recv() => libc::SIGINT,
        };
        let _ = shutdown.send(ShutdownKind::Signal(sig));
        std::future::pending::<()>().await;
    });
}

/// A failed accept. Out of descriptors (EMFILE, ENFILE) or memory, the
/// pending connection stays queued and the listener readable, so accepting
/// again at once would fail again, at 100% CPU: wait [`Self::PAUSE`] first.
/// An error about the one connection (aborted before it was accepted)
/// consumed it: accept the next at once. Logged as Redis does ("Accepting
/// client connection: ..."), at most once a second.
#[derive(Default)]
struct AcceptErrors {
    logged: Option<Instant>,
}

impl AcceptErrors {
    const PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

    async fn back_off(&mut self, e: std::io::Error) {
        if self.logged.is_none_or(|t| t.elapsed().as_secs() >= 1) {
            self.logged = Some(Instant::now());
            log_warning!("Accepting client connection: {e}");
        }
        use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted};
        if !matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted) {
            tokio::time::sleep(Self::PAUSE).await;
        }
    }
}
