//! One simulated node: a real in-process `Server` with active replication
//! on (`active-replica` and `multi-master`), its stream started without
//! threads (`active::start_stream`), one client that runs the workload's
//! commands, and its own clock: virtual time plus the node's skew, set as
//! the thread's clock (`hlc::set_thread_clock`) before anything of the
//! node runs. A restart saves an RDB of the node in memory with the real
//! snapshot code, drops the server and loads the file into a new one with
//! the same identity, as a node started again on its data directory does
//! (the link positions come back from the file's `lattice-link` fields).

use std::io::Write;
use std::sync::mpsc;
use std::sync::Arc;

use lattice::facade::commands::run_local;
use lattice::facade::config::Config;
use lattice::facade::core::client::ClientState;
use lattice::facade::core::stats::WorkerStats;
use lattice::facade::effects::{Effect, Recorder};
use lattice::facade::keyspace::hlc::{set_thread_clock, Hlc};
use lattice::facade::persistence::load::{load_reader, OnDuplicate};
use lattice::facade::persistence::snapshot::{self, SnapFormat, SnapshotJob};
use lattice::facade::replication::active::{self, HostRef};
use lattice::facade::server::identity::Identity;
use lattice::facade::server::Server;

/// The port a node is known by (a link to it is `sim:<port>`).
pub fn port_of(idx: usize) -> u16 {
    7000 + idx as u16
}

pub struct Node {
    pub idx: usize,
    pub identity: Identity,
    /// How far this node's clock runs ahead of virtual time (ms).
    pub skew: i64,
    pub srv: Arc<Server>,
    pub host: HostRef,
    /// Every effect the node emits: its own writes during a client command,
    /// the records it applies during a delivery.
    pub rec: Arc<Recorder>,
    clock: Hlc,
    stats: Arc<WorkerStats>,
    client: ClientState,
    /// Starts of this node (0 for the first): what a node applied counts
    /// per start.
    pub incarnation: u32,
}

impl Node {
    /// A node started at virtual time `now`, empty or from `rdb`.
    pub fn start(idx: usize, identity: Identity, skew: i64, now: u64, rdb: Option<&[u8]>) -> Node {
        set_thread_clock(Some(now.saturating_add_signed(skew)));
        let srv = Server::with_identity(config(), identity);
        srv.tcp_port
            .store(port_of(idx) as usize, std::sync::atomic::Ordering::Relaxed);
        let rec = Arc::new(Recorder::default());
        srv.effects.subscribe(rec.clone());
        if let Some(rdb) = rdb {
            let stats = load_reader(&srv, rdb, OnDuplicate::Fail).expect("load the node's RDB");
            lattice::facade::server::hooks::rdb_aux_loaded(&srv, &stats.aux, &stats.expired_keys);
        }
        let host = srv.peer_host();
        active::start_stream(&host);
        Node {
            idx,
            identity,
            skew,
            clock: Hlc::new(identity.slot),
            stats: srv.new_worker_stats(),
            client: ClientState::new(1),
            srv,
            host,
            rec,
            incarnation: 0,
        }
    }

    /// Makes this node's clock the thread's: virtual `now` plus its skew.
    pub fn enter(&self, now: u64) {
        set_thread_clock(Some(now.saturating_add_signed(self.skew)));
    }

    /// Runs one client command (the node's clock must be entered).
    pub fn run(&mut self, argv: &[Vec<u8>]) -> Result<Vec<u8>, String> {
        let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let (srv, clock, stats) = (&self.srv, &mut self.clock, &self.stats);
        run_local(srv, clock, stats, &mut self.client, &argv)
    }

    /// The effects recorded since `from`.
    pub fn effects_since(&self, from: usize) -> Vec<Effect> {
        self.rec.0.lock()[from..].to_vec()
    }

    pub fn effects_len(&self) -> usize {
        self.rec.0.lock().len()
    }

    /// An RDB of the node, written by the real snapshot code into memory.
    pub fn save(&self) -> Vec<u8> {
        let buf = Shared::default();
        let (tx, rx) = mpsc::channel();
        let job = SnapshotJob {
            format: SnapFormat::Rdb,
            path: Default::default(),
            stream: Some(Box::new(buf.clone())),
            at_cut: None,
            done: Box::new(move |r| {
                let _ = tx.send(r.map(|_| ()).map_err(|e| e.to_string()));
            }),
            threads: 1,
            aux: vec![],
        };
        snapshot::start(&self.srv, job).unwrap_or_else(|e| panic!("snapshot: {e:?}"));
        rx.recv()
            .expect("the snapshot finished")
            .expect("the snapshot wrote");
        let bytes = buf.0.lock().clone();
        bytes
    }
}

/// The configuration of every node: an active node of a mesh (links are
/// made by the simulator, not from `replicaof`).
fn config() -> Config {
    let mut c = Config::default();
    let quiet = ("loglevel", "warning");
    for (k, v) in [("active-replica", "yes"), ("multi-master", "yes"), quiet] {
        c.set(k, &[v.to_string()]).expect(k);
    }
    c
}

/// A writer whose bytes stay readable after it is handed away.
#[derive(Clone, Default)]
struct Shared(Arc<parking_lot::Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
