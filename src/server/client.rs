//! Clients: the state a connection keeps for itself, and what other
//! connections may see or do to it (CLIENT LIST, CLIENT KILL, MONITOR feed).
//!
//! [`ClientState`] belongs to the connection's task and is passed to commands
//! by `&mut`. [`ClientShared`] is the part in the registry: a few atomics the
//! connection refreshes per command, and a channel through which others push
//! to it (monitor lines, a kill order).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;

/// Something pushed to a connection by another.
pub enum Push {
    /// Already-encoded bytes to write (MONITOR lines, later pub/sub).
    Bytes(Arc<Vec<u8>>),
    /// CLIENT KILL or timeout: close the connection.
    Kill,
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

/// Per-connection state owned by the connection's task.
pub struct ClientState {
    pub id: u64,
    pub db: usize,
    pub resp: u8,
    pub authenticated: bool,
    pub name: Option<String>,
    pub lib_name: Option<String>,
    pub lib_ver: Option<String>,
    pub reply_mode: ReplyMode,
    pub no_evict: bool,
    pub no_touch: bool,
    pub monitor: bool,
    /// Set by QUIT, SHUTDOWN or a self-kill: close once replies are written.
    pub close_after_reply: bool,
    /// Set by SHUTDOWN: the server should stop after this reply.
    pub shutdown_requested: Option<crate::server::ShutdownKind>,
    pub shared: Option<Arc<ClientShared>>,
}

impl ClientState {
    pub fn new(id: u64) -> Self {
        ClientState {
            id,
            db: 0,
            resp: 2,
            authenticated: true,
            name: None,
            lib_name: None,
            lib_ver: None,
            reply_mode: ReplyMode::On,
            no_evict: false,
            no_touch: false,
            monitor: false,
            close_after_reply: false,
            shutdown_requested: None,
            shared: None,
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
    pub lib: Mutex<(String, String)>,
    /// CLIENT NO-EVICT / NO-TOUCH / pubsub flags for CLIENT LIST.
    pub flags: Mutex<String>,
    pub tx: mpsc::UnboundedSender<Push>,
    pub unix: bool,
}

/// All connected clients.
#[derive(Default)]
pub struct ClientRegistry {
    next_id: AtomicU64,
    clients: Mutex<BTreeMap<u64, Arc<ClientShared>>>,
    pub monitors: AtomicUsize,
    /// The `unixsocket` path, for the addresses of unix-socket clients.
    unix_path: Mutex<String>,
}

impl ClientRegistry {
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
        let unix = addr.is_none();
        // Redis shows a unix-socket client as "<path>:0", local "<path>".
        let path = self.unix_path.lock().clone();
        let c = Arc::new(ClientShared {
            id,
            addr: addr
                .map(|a| a.to_string())
                .unwrap_or_else(|| format!("{path}:0")),
            laddr: laddr.map(|a| a.to_string()).unwrap_or(path),
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
            lib: Mutex::new((String::new(), String::new())),
            flags: Mutex::new(String::new()),
            tx,
            unix,
        });
        self.clients.lock().insert(id, c.clone());
        c
    }

    pub fn unregister(&self, id: u64) {
        if let Some(c) = self.clients.lock().remove(&id) {
            if c.monitor.load(Relaxed) {
                self.monitors.fetch_sub(1, Relaxed);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.clients.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of every client, by id.
    pub fn snapshot(&self) -> Vec<Arc<ClientShared>> {
        self.clients.lock().values().cloned().collect()
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientShared>> {
        self.clients.lock().get(&id).cloned()
    }

    /// Sends an encoded line to every MONITOR client.
    pub fn feed_monitors(&self, line: Arc<Vec<u8>>) {
        for c in self.clients.lock().values() {
            if c.monitor.load(Relaxed) {
                let _ = c.tx.send(Push::Bytes(line.clone()));
            }
        }
    }
}
