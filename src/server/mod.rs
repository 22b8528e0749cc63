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

pub(crate) mod admin;
pub(crate) mod conn;
pub(crate) mod cron;
pub(crate) mod cron_jobs;
pub(crate) mod hooks;
pub(crate) mod identity;
pub(crate) mod info;
mod lookahead;
pub(crate) mod persistence_host;
pub(crate) mod replication_host;
pub(crate) mod shutdown;
pub(crate) mod supervise;
pub(crate) mod sync_files;
pub(crate) mod tls;
pub(crate) mod uring;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::commands::CommandTable;
use crate::config::Config;
pub(crate) use crate::core::admin::ShutdownKind;
use crate::core::stats::WorkerStats;
use crate::core::Core;
use crate::{log_notice, log_warning};

/// State shared by every thread: the [`Core`] data commands see (reached
/// through `Deref`, so `srv.keyspace` reads as before), and what only the
/// server and its subsystems use.
pub struct Server {
    pub core: Core,
    pub started: Instant,
    pub run_id: String,
    /// The node id and the slot its stamps carry (`identity.rs`).
    pub identity: identity::Identity,
    pub tcp_port: AtomicUsize,
    /// The main thread's mailbox: a shutdown asked, tagged with
    /// `shutdown.attempt()` at the time.
    pub shutdown_tx: Mutex<Option<std::sync::mpsc::Sender<(ShutdownKind, u64)>>>,
    /// The shutdown under way, if any (`shutdown.rs`).
    pub shutdown: shutdown::State,
    /// The acceptor's mailbox for new listeners (CONFIG SET port / tls-port).
    rebind: Mutex<Option<mpsc::UnboundedSender<Rebind>>>,
    pub shutting_down: AtomicBool,
    pub lastsave_unix: AtomicU64,
    /// RDB snapshots and the AOF (`src/persistence/`).
    pub persist: crate::persistence::Persistence,
    /// Replication, both roles (`src/replication/`).
    pub repl: crate::replication::Replication,
    /// The sync payload a replica loaded, for `rdb-del-sync-files` (`sync_files.rs`).
    pub(crate) sync_file: sync_files::SyncFileNote,
}

impl std::ops::Deref for Server {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Server {
    /// A server with a fresh identity (tests; start-up uses
    /// [`Server::with_identity`]).
    pub fn new(config: Config) -> Arc<Server> {
        Self::with_identity(config, identity::Identity::random())
    }

    pub fn with_identity(config: Config, identity: identity::Identity) -> Arc<Server> {
        let run_id = random_hex(40);
        let now = crate::keyspace::hlc::unix_ms();
        let srv = Arc::new(Server {
            core: Core::new(
                config,
                identity.slot,
                CommandTable::build(&command_families()),
            ),
            started: Instant::now(),
            run_id,
            identity,
            tcp_port: AtomicUsize::new(0),
            shutdown_tx: Mutex::new(None),
            shutdown: Default::default(),
            rebind: Mutex::new(None),
            shutting_down: AtomicBool::new(false),
            lastsave_unix: AtomicU64::new(now / 1000),
            persist: Default::default(),
            repl: Default::default(),
            sync_file: Default::default(),
        });
        // A script past busy-reply-threshold answers its thread's other
        // clients through this (DECISIONS 57).
        let weak = Arc::downgrade(&srv);
        let serve: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            if let Some(s) = weak.upgrade() {
                conn::serve_while_busy(&s);
            }
        });
        let _ = srv.scripts.busy.serve.set(serve);
        srv
    }

    /// Asks the main thread to stop the server; the attempt it is part of
    /// (`shutdown::State::refused_after`).
    pub fn request_shutdown(&self, kind: ShutdownKind) -> u64 {
        // While loading at start-up the main thread is in the load: stop
        // it, so that the shutdown happens now (and saves nothing).
        self.persist.loading.abort_for_shutdown();
        let attempt = self.shutdown.attempt();
        if let Some(tx) = self.shutdown_tx.lock().as_ref() {
            let _ = tx.send((kind, attempt));
        }
        attempt
    }

    /// Pauses every client's writes until told otherwise (FAILOVER and a
    /// shutdown's wait for replicas; CLIENT UNPAUSE ends it too, as the
    /// one pause Redis clients can see).
    pub fn pause_writes(&self, on: bool) {
        if on {
            self.pause_all.store(false, Relaxed);
            self.pause_until_ms.store(u64::MAX / 2, Relaxed);
        } else {
            self.pause_until_ms.store(0, Relaxed);
            self.pause_all.store(false, Relaxed);
            self.unpaused.notify_waiters();
        }
    }
}

/// Every family of the command table: the commands layer's, then the
/// replication commands (written in `replication/`, above the commands).
pub(crate) fn command_families() -> Vec<&'static [crate::commands::Command]> {
    let mut f = crate::commands::families().to_vec();
    f.push(crate::scripting::COMMANDS);
    f.push(crate::scripting::FUNCTION_COMMANDS);
    f.push(crate::replication::commands::Commands::<Server>::TABLE);
    f
}

/// The server behind a handler's `Ctx`, for the commands written in the
/// layers above the core (PSYNC, WAIT, BGREWRITEAOF's scheduling ...).
/// The server as active replication's host (`replication/active`).
struct PeerHost(Arc<Server>);

impl crate::replication::active::Host for PeerHost {
    fn admin(&self) -> &dyn crate::core::admin::Admin {
        &self.0
    }
    fn active(&self) -> &Arc<crate::replication::active::Active> {
        &self.0.repl.active
    }
    fn identity(&self) -> (u64, u64) {
        (self.0.identity.node_id, self.0.identity.slot)
    }
    fn port(&self) -> u16 {
        self.0.tcp_port.load(std::sync::atomic::Ordering::Relaxed) as u16
    }
}

impl Server {
    /// A handle on this server for active replication's threads.
    pub fn peer_host(self: &Arc<Self>) -> crate::replication::active::HostRef {
        Arc::new(PeerHost(self.clone()))
    }
}

pub(crate) use crate::core::random::random_hex;

/// A connection accepted by the acceptor, on its way to a worker.
pub(crate) enum NewConn {
    Tcp(std::net::TcpStream, SocketAddr),
    /// A connection to `tls-port`.
    Tls(std::net::TcpStream, SocketAddr),
    Unix(std::os::unix::net::UnixStream),
}

/// New listeners for the acceptor: those of `port` (plain) or `tls-port`
/// replace the current ones, which close before `done` is told.
pub(crate) struct Rebind {
    tls: bool,
    listeners: Vec<std::net::TcpListener>,
    done: std::sync::mpsc::Sender<()>,
}

impl Server {
    /// CONFIG SET port / tls-port (Redis's changeListenPort): listens on
    /// `port` at every address of `cfg`'s `bind` (nowhere for 0), then
    /// closes the old listeners of that kind; an error (the port is
    /// taken) changes nothing.
    pub fn listen_on(&self, tls: bool, port: u16, cfg: &Config) -> Result<(), String> {
        let listeners = bind_port(cfg, port)?;
        let Some(tx) = self.rebind.lock().clone() else {
            return Err("the server does not accept connections yet".into());
        };
        let (done, ack) = std::sync::mpsc::channel();
        tx.send(Rebind {
            tls,
            listeners,
            done,
        })
        .map_err(|_| "the acceptor is gone".to_string())?;
        // The old listeners are closed once this returns (the acceptor
        // answers at once; the bound only guards a stuck one).
        let _ = ack.recv_timeout(std::time::Duration::from_secs(5));
        if !tls {
            self.tcp_port.store(port as usize, Relaxed);
        }
        Ok(())
    }
}

/// The plain TCP listeners, the unix socket, the TLS listeners.
type Listeners = (
    Vec<std::net::TcpListener>,
    Option<std::os::unix::net::UnixListener>,
    Vec<std::net::TcpListener>,
);

/// Binds the listeners described by `bind`/`port`/`unixsocket`/`tls-port`.
fn bind_listeners(cfg: &Config) -> Result<Listeners, String> {
    let tcp = bind_port(cfg, cfg.port())?;
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
    let tls = bind_port(cfg, cfg.get_i64("tls-port") as u16)?;
    if tcp.is_empty() && unix.is_none() && tls.is_empty() {
        return Err("Configured to not listen anywhere, exiting.".into());
    }
    Ok((tcp, unix, tls))
}

/// Listeners on `port` at every `bind` address (none for port 0).
fn bind_port(cfg: &Config, port: u16) -> Result<Vec<std::net::TcpListener>, String> {
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
    Ok(tcp)
}

fn bind_tcp(sa: SocketAddr, backlog: i32) -> std::io::Result<std::net::TcpListener> {
    // std sets SO_REUSEADDR on Unix, as Redis does.
    let l = match sa {
        SocketAddr::V4(_) => std::net::TcpListener::bind(sa)?,
        SocketAddr::V6(v6) => bind_v6_only(v6)?,
    };
    // std listens with a backlog of 128; a burst of connections beyond it
    // loses SYNs and waits a second for the retry. Listening again sets
    // Redis's `tcp-backlog` (511) instead (the kernel caps it at somaxconn).
    // SAFETY: the fd belongs to `l`, a bound listening socket, while called.
    unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), backlog) };
    Ok(l)
}

/// An IPv6 listener that takes IPv6 only (`IPV6_V6ONLY`), as Redis's: the
/// default `bind * -::*` listens on 0.0.0.0 and :: on the same port, which
/// a dual-stack :: socket would make fail with "address in use"; and IPv4
/// clients keep arriving with IPv4 addresses. Not yet listening.
fn bind_v6_only(sa: std::net::SocketAddrV6) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let err = std::io::Error::last_os_error;
    // SAFETY: socket() returns a new fd or -1; a valid fd is owned by the
    // listener at once (closed on every error path below).
    let fd = unsafe { libc::socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(err());
    }
    // SAFETY: `fd` is a fresh socket that nothing else owns.
    let l = unsafe { std::net::TcpListener::from_raw_fd(fd) };
    let on: libc::c_int = 1;
    let int_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    for (level, opt) in [
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY),
        (libc::SOL_SOCKET, libc::SO_REUSEADDR),
    ] {
        // SAFETY: the fd is `l`'s, open; the value is a live c_int of int_len bytes.
        let rc = unsafe {
            libc::setsockopt(
                l.as_raw_fd(),
                level,
                opt,
                &on as *const _ as *const libc::c_void,
                int_len,
            )
        };
        if rc != 0 {
            return Err(err());
        }
    }
    // SAFETY: sockaddr_in6 is plain data (all-zero is valid); every field
    // is set from `sa` before bind reads it.
    let mut addr: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    addr.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    addr.sin6_port = sa.port().to_be();
    addr.sin6_flowinfo = sa.flowinfo();
    addr.sin6_addr.s6_addr = sa.ip().octets();
    addr.sin6_scope_id = sa.scope_id();
    // SAFETY: the pointer and length describe `addr`, alive for the call.
    let rc = unsafe {
        libc::bind(
            l.as_raw_fd(),
            &addr as *const libc::sockaddr_in6 as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(err());
    }
    Ok(l)
}

/// Runs the server until SHUTDOWN or a signal. Returns the process exit code.
/// `bound`: called once the listeners are bound, before anything else
/// (main prints the banner there: Redis prints its " PID: " line only after
/// a successful bind, and its test suite takes that line to mean the port
/// is this server's; printed before, a server that then failed to bind
/// looked started, and the suite talked to whatever held the port).
pub fn run(config: Config, bound: impl FnOnce(&Config)) -> Result<i32, String> {
    let tls_configs = match crate::core::tls::wanted(&config) {
        true => crate::core::tls::build(&config).map_err(|e| {
            log_warning!("{e}");
            format!("Failed to configure TLS. Check logs for more info. ({e})")
        })?,
        false => Default::default(),
    };
    let (tcp, unix, tls_listeners) = bind_listeners(&config)?;
    bound(&config);
    let threads = config.threads();
    let pidfile = config.get_str("pidfile");
    let unix_path = config.get_str("unixsocket");
    let port = config.port();
    let (identity, fresh_id) = identity::resolve(&config);
    let srv = Server::with_identity(config, identity);
    let users = srv.config.read().users.clone();
    crate::commands::acl::load_at_startup(&srv, &users)?;
    srv.core.tls.install(tls_configs);
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
            // 8 MiB, as Redis's main thread: scripts' data conversions
            // recurse per level of nesting (up to 1000 levels).
            .stack_size(8 << 20)
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
        let (signals_ready, ready) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("lattice-accept".into())
            .spawn(move || acceptor_main(srv, [tcp, tls_listeners], unix, senders, signals_ready))
            .map_err(|e| e.to_string())?;
        let _ = ready.recv();
    }
    log_notice!("Server initialized");
    match crate::persistence::load::at_startup(&srv) {
        // A shutdown stopped the load: it is in the channel below.
        Err(_) if srv.persist.loading.stopped_for_shutdown() => {}
        Err(e) => return Err(e),
        Ok(()) => {
            if srv.core.active {
                crate::replication::active::start(&srv.peer_host(), fresh_id);
            } else {
                crate::replication::replica::start_from_config(&srv);
            }
            log_notice!("Ready to accept connections");
            supervise::notify(if srv.repl.is_replica() {
                "STATUS=Ready to accept connections in read-only mode. Waiting for MASTER <-> REPLICA sync\n"
            } else {
                "STATUS=Ready to accept connections\n"
            });
            supervise::notify("READY=1\n");
        }
    }
    // SHUTDOWN and the signals (the acceptor logged a signal as it came):
    // shutdown.rs waits for lagging replicas, saves, or refuses and goes on.
    loop {
        let now = ShutdownKind::Command(crate::core::admin::ShutdownFlags {
            now: true,
            ..Default::default()
        });
        let (kind, attempt) = shutdown_rx.recv().unwrap_or((now, u64::MAX));
        if shutdown::handle(&srv, kind, attempt) {
            break;
        }
    }
    supervise::notify("STOPPING=1\n");
    crate::persistence::aof::on_shutdown(&srv);
    srv.shutting_down.store(true, Relaxed);
    if !pidfile.is_empty() {
        log_notice!("Removing the pid file.");
        let _ = std::fs::remove_file(&pidfile);
    }
    if !unix_path.is_empty() {
        log_notice!("Removing the unix socket file.");
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
    let uring = srv.config.read().get_bool("io-uring");
    let mut builder = tokio::runtime::Builder::new_current_thread();
    if uring {
        // The ring's SQEs queued during a turn go in once, before the park.
        builder.on_thread_park(uring::turn);
        builder.on_thread_unpark(uring::awake);
    }
    let rt = builder.enable_all().build().expect("tokio runtime");
    let local = tokio::task::LocalSet::new();
    let worker = std::rc::Rc::new(conn::Worker::new(srv.clone(), stats));
    local.block_on(&rt, async move {
        if uring {
            uring_start(index, nworkers);
        }
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

/// `io-uring yes`: this worker's ring, or epoll with one log line (per
/// server) saying why; the first worker logs which one serves.
fn uring_start(index: usize, nworkers: usize) {
    static REFUSED: std::sync::Once = std::sync::Once::new();
    match uring::install() {
        Ok(()) if index == 0 => log_notice!(
            "io_uring: plain TCP connections use a ring per worker ({nworkers} workers, SINGLE_ISSUER|COOP_TASKRUN)"
        ),
        Ok(()) => {}
        Err(e) => REFUSED.call_once(|| {
            log_warning!("io_uring is unavailable ({e}): connections use epoll")
        }),
    }
}

fn acceptor_main(
    srv: Arc<Server>,
    [tcp, tls]: [Vec<std::net::TcpListener>; 2],
    unix: Option<std::os::unix::net::UnixListener>,
    workers: Vec<mpsc::UnboundedSender<NewConn>>,
    signals_ready: std::sync::mpsc::Sender<()>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        // SIGTERM/SIGINT are ours before start-up goes on (a signal during
        // loading must not kill the process with the default action).
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        let _ = signals_ready.send(());
        let next = Arc::new(AtomicUsize::new(0));
        let spawn_all = |ls: Vec<std::net::TcpListener>, is_tls: bool| -> Vec<_> {
            ls.into_iter()
                .map(|l| serve_listener(&srv, l, is_tls, &workers, &next))
                .collect()
        };
        // The tasks of the plain and the TLS listeners, replaced by Rebind.
        let mut tasks = [spawn_all(tcp, false), spawn_all(tls, true)];
        let (rebind_tx, mut rebind_rx) = mpsc::unbounded_channel::<Rebind>();
        *srv.rebind.lock() = Some(rebind_tx);
        if let Some(l) = unix {
            let l = tokio::net::UnixListener::from_std(l).expect("unix listener");
            let (workers, next, srv) = (workers.clone(), next.clone(), srv.clone());
            tokio::spawn(async move {
                srv.persist.loading.clients_admitted().await;
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
        let sig = loop {
            tokio::select! {
                _ = term.recv() => break libc::SIGTERM,
                _ = int.recv() => break libc::SIGINT,
                Some(r) = rebind_rx.recv() => {
                    let kind = &mut tasks[r.tls as usize];
                    for t in kind.drain(..) {
                        t.abort();
                        let _ = t.await; // the listener is closed once it returns
                    }
                    *kind = spawn_all(r.listeners, r.tls);
                    let _ = r.done.send(());
                }
            }
        };
        // Redis's handler's line, as the signal comes (loading or not).
        let name = if sig == libc::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        if srv.persist.loading.active() {
            log_warning!("Received shutdown signal during loading, scheduling shutdown.");
        } else {
            log_warning!("Received {name} scheduling shutdown...");
        }
        srv.request_shutdown(ShutdownKind::Signal(sig));
        std::future::pending::<()>().await;
    });
}

/// Accepts on `l` and hands each connection to the next worker.
fn serve_listener(
    srv: &Arc<Server>,
    l: std::net::TcpListener,
    is_tls: bool,
    workers: &[mpsc::UnboundedSender<NewConn>],
    next: &Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    let _ = l.set_nonblocking(true);
    let l = tokio::net::TcpListener::from_std(l).expect("listener");
    let (workers, next, srv) = (workers.to_vec(), next.clone(), srv.clone());
    tokio::spawn(async move {
        // Start-up accepts once it loads a file or is done (Loading's doc).
        srv.persist.loading.clients_admitted().await;
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
            let c = match is_tls {
                true => NewConn::Tls(s, addr),
                false => NewConn::Tcp(s, addr),
            };
            let _ = workers[i].send(c);
        }
    })
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
