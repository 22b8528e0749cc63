//! The deterministic fault simulator of active replication (issue 13 item
//! 7; docs/MERGE-DESIGN.md "The simulator (as built)").
//!
//! N real nodes (2 to 5 in-process `Server`s) in one of four topologies
//! (pair, chain, ring, mesh), no sockets and no threads of their own: the
//! simulator owns time and delivery. One seeded RNG schedules every event:
//! client commands on random nodes (tests/common/workload.rs, every write
//! command family, deterministic mode), the feeds turning their streams
//! into batches, deliveries on each connection with delays (in order
//! within a connection, any order across them), dropped connections
//! (what was in flight is lost; the link reconnects from the offset it
//! applied), partitions and heals, restarts from an RDB the node saved,
//! and clock skew (up to a third of `active-max-clock-skew` each way).
//! Virtual time moves only when the scheduler moves it; each node's clock
//! is virtual time plus its skew. A run is a function of its seed: a
//! failure prints the seed, the event and the last events, and
//! `SIM_SEED=<n>` replays it.
//!
//! What is real: the whole server (commands, effects, stamps, keyspace,
//! tombstones, the cron's PINGs and tombstone collection, RDB save and
//! load with the link positions), the feed's coding and filtering, the
//! link's apply rule, its state requests and state groups, the handshake's
//! decisions (continue, resume, snapshot). What is simulated: sockets
//! (bytes in queues), threads (one thread runs everything, in the order
//! the RNG picks), time, and the disk (an RDB in memory). Not run: the
//! active expiry cycle and the disk tier of the stream (see `run` below).

pub mod check;
pub mod merging;
pub mod net;
pub mod node;
pub mod planted;

use std::collections::BTreeSet;
use std::sync::Arc;

use lattice::facade::replication::active;
use lattice::facade::server::identity::Identity;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::workload::{self, Gen};
use check::{Applied, History};
use net::Pipe;
use node::Node;

/// Virtual time at the start of every run (2030): past the wall clock,
/// so that nothing reading the real clock on another thread (the RDB
/// writer) finds a key expired that the simulated nodes hold live.
const EPOCH_MS: u64 = 1_900_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// Two nodes pulling from each other.
    Pair,
    /// Each node pulls from its neighbours: 0 - 1 - 2 ...
    Chain,
    /// Each node pulls from the one before it only: records go round.
    Ring,
    /// Every node pulls from every other.
    Mesh,
}

impl Topology {
    /// (puller, server) pairs for `n` nodes.
    fn pipes(self, n: usize) -> Vec<(usize, usize)> {
        let all = (0..n).flat_map(|a| (0..n).map(move |b| (a, b)));
        match self {
            Topology::Pair | Topology::Mesh => all.filter(|(a, b)| a != b).collect(),
            Topology::Chain => all.filter(|(a, b)| a.abs_diff(*b) == 1).collect(),
            Topology::Ring => (0..n).map(|a| (a, (a + n - 1) % n)).collect(),
        }
    }
}

/// What a run is made of (drawn from the seed unless set).
#[derive(Clone, Debug)]
pub struct Plan {
    pub nodes: usize,
    pub topology: Topology,
    /// Scheduled events before the final heal and drain.
    pub events: usize,
}

impl Plan {
    /// A plan drawn from `rng`: 2 to 5 nodes, a topology, `events`.
    pub fn draw(rng: &mut StdRng, events: usize) -> Plan {
        let topology = [
            Topology::Pair,
            Topology::Chain,
            Topology::Ring,
            Topology::Mesh,
        ][rng.gen_range(0..4)];
        let nodes = if topology == Topology::Pair {
            2
        } else {
            rng.gen_range(3..=5)
        };
        Plan {
            nodes,
            topology,
            events,
        }
    }
}

/// Knobs a test may set (the defaults are the CI run's).
#[derive(Clone, Debug)]
pub struct Options {
    pub events: usize,
    /// Keep every event of the trace (else the last [`TRACE_TAIL`]).
    pub full_trace: bool,
    pub workload: merging::Workload,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            events: 250,
            full_trace: false,
            workload: merging::Workload::Every,
        }
    }
}

/// Events kept for a failure's report.
const TRACE_TAIL: usize = 40;

/// A failed run: what to print and how to replay it.
#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub event: usize,
    pub what: String,
    pub plan: String,
    pub trace: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "simulator seed {} failed at event {}: {}",
            self.seed, self.event, self.what
        )?;
        writeln!(f, "  plan: {}", self.plan)?;
        writeln!(f, "  last events:")?;
        for t in &self.trace {
            writeln!(f, "    {t}")?;
        }
        write!(
            f,
            "  replay: SIM_SEED={} cargo test --test simulator -- --nocapture",
            self.seed
        )
    }
}

/// What a passing run did (and a digest of its trace, to show that a
/// seed replays the same run).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub commands: usize,
    pub deliveries: usize,
    pub drops: usize,
    pub restarts: usize,
    pub partitions: usize,
    pub refusals: usize,
    pub keys: usize,
    pub digest: u64,
    /// The last events (all of them with `Options::full_trace`).
    pub trace: Vec<String>,
}

/// One run.
pub struct Sim {
    seed: u64,
    rng: StdRng,
    now: u64,
    plan: Plan,
    nodes: Vec<Node>,
    pipes: Vec<Pipe>,
    /// Pairs of nodes that cannot reach each other (a partition).
    cut: BTreeSet<(usize, usize)>,
    gen: Gen,
    cmds: Vec<(String, f64)>,
    total: f64,
    history: History,
    workload: merging::Workload,
    /// What the merge workload's commands did (`merging.rs`).
    merge_log: merging::Log,
    applied: Applied,
    event: usize,
    deliveries: usize,
    trace: Vec<String>,
    full_trace: bool,
    /// `SIM_WATCH=<db>:<key>`: the key's state and merge state on every
    /// node are traced after every event that changes them (debugging a
    /// failure).
    watch: Option<(check::Key, Vec<Watched>)>,
    /// The furthest any node's clock read before its last jump back.
    peak_clock: u64,
    report: Report,
}

/// DUMP payloads with the pool of their type.
type Payloads = Arc<Vec<(char, Vec<u8>)>>;

/// The RESTORE payloads of the workload, made once per process.
fn payloads() -> Payloads {
    static P: std::sync::OnceLock<Payloads> = std::sync::OnceLock::new();
    P.get_or_init(|| Arc::new(workload::payloads())).clone()
}

/// What the trace shows of a watched key on one node: its state and its
/// merge state.
type Watched = (check::KeyState, Option<String>);

/// The key `SIM_WATCH=<db>:<key>` names, if set.
fn watched() -> Option<(check::Key, Vec<Watched>)> {
    let w = std::env::var("SIM_WATCH").ok()?;
    let (db, key) = w.split_once(':')?;
    Some(((db.parse().ok()?, key.as_bytes().to_vec()), Vec::new()))
}

/// Runs seed `seed`; the report, or the failure.
pub fn run(seed: u64, opts: &Options) -> Result<Report, Box<Failure>> {
    lattice::log::set_level(lattice::log::Level::Warning);
    // Keys land in the same shards, and snapshots send them in the same
    // order, in every run (the hasher's seed is random otherwise).
    lattice::facade::keyspace::set_thread_fixed_hash(true);
    let mut sim = Sim::new(seed, opts);
    let r = sim.run_all();
    lattice::facade::keyspace::hlc::set_thread_clock(None);
    lattice::facade::keyspace::set_thread_fixed_hash(false);
    r.map_err(|what| Box::new(sim.failure(what)))
}

impl Sim {
    fn new(seed: u64, opts: &Options) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let plan = Plan::draw(&mut rng, opts.events);
        let now = EPOCH_MS;
        let mut slots: Vec<u64> = Vec::new();
        while slots.len() < plan.nodes {
            let s = rng.gen_range(0..1024);
            if !slots.contains(&s) {
                slots.push(s);
            }
        }
        let max_skew = faults::MAX_SKEW_MS;
        let nodes: Vec<Node> = (0..plan.nodes)
            .map(|i| {
                let id = Identity::new(0x51_0000 + (seed << 8) + i as u64 + 1, slots[i] as i64);
                let skew = if rng.gen_bool(0.5) {
                    rng.gen_range(-max_skew..=max_skew)
                } else {
                    0
                };
                Node::start(i, id, skew, now, None)
            })
            .collect();
        let pipes = plan
            .topology
            .pipes(plan.nodes)
            .into_iter()
            .map(|(puller, server)| Pipe {
                server,
                puller,
                st: Pipe::link_state(&nodes[puller], server),
                conn: None,
                retry_at: now,
            })
            .collect();
        let mut gen = Gen::new(rng.gen(), payloads(), 1);
        gen.dbs = 2;
        gen.deterministic = true;
        let cmds: Vec<(String, f64)> = workload::drawable(&nodes[0].srv, true)
            .into_iter()
            .filter(|(n, _)| n != "migrate")
            .collect();
        let total = cmds.iter().map(|c| c.1).sum();
        let mut applied = Applied::default();
        (0..plan.nodes).for_each(|i| applied.reset(i));
        Sim {
            seed,
            rng,
            now,
            plan,
            nodes,
            pipes,
            cut: BTreeSet::new(),
            gen,
            cmds,
            total,
            history: History::default(),
            workload: opts.workload,
            merge_log: merging::Log::default(),
            applied,
            event: 0,
            deliveries: 0,
            trace: Vec::new(),
            full_trace: opts.full_trace,
            watch: watched(),
            peak_clock: 0,
            report: Report::default(),
        }
    }

    /// Notes an event in the trace.
    fn note(&mut self, what: impl Into<String>) {
        self.trace_line(what.into());
        self.watch_key();
    }

    fn trace_line(&mut self, what: String) {
        let line = format!("#{} t+{}ms {}", self.event, self.now - EPOCH_MS, what);
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.report.digest, &line).hash(&mut h);
        self.report.digest = h.finish();
        self.trace.push(line);
        if !self.full_trace && self.trace.len() > 2 * TRACE_TAIL {
            self.trace.drain(..TRACE_TAIL);
        }
    }

    /// Traces the watched key if its state changed on a node.
    fn watch_key(&mut self) {
        let Some((key, was)) = self.watch.take() else {
            return;
        };
        let now: Vec<Watched> = self
            .nodes
            .iter()
            .map(|n| {
                let state = check::key_state(&n.srv, key.0, &key.1);
                (state, check::merge_state(&n.srv, &key))
            })
            .collect();
        for (i, (s, m)) in now.iter().enumerate() {
            if was.get(i) != Some(&(s.clone(), m.clone())) {
                let m = m.as_deref().unwrap_or("none");
                let k = check::show_key(&key);
                self.trace_line(format!("  watch {k}: n{i} {s:?}\n      merge: {m}"));
            }
        }
        self.watch = Some((key, now));
    }

    fn failure(&self, what: String) -> Failure {
        let keep = if self.full_trace {
            self.trace.len()
        } else {
            TRACE_TAIL
        };
        let from = self.trace.len().saturating_sub(keep);
        Failure {
            seed: self.seed,
            event: self.event,
            what,
            plan: format!(
                "{:?}, {} nodes (slots {:?}, skews {:?} ms), {} events",
                self.plan.topology,
                self.plan.nodes,
                self.nodes
                    .iter()
                    .map(|n| n.identity.slot)
                    .collect::<Vec<_>>(),
                self.nodes.iter().map(|n| n.skew).collect::<Vec<_>>(),
                self.plan.events
            ),
            trace: self.trace[from..].to_vec(),
        }
    }

    /// The scheduled events, then the heal, the drain and the checks.
    fn run_all(&mut self) -> Result<Report, String> {
        for _ in 0..self.plan.events {
            self.event += 1;
            self.advance();
            self.background()?;
            self.one_event()?;
        }
        self.event += 1;
        self.note("heal all, drain");
        self.cut.clear();
        self.settle()?;
        self.sweep()?;
        self.settle()?;
        self.final_checks()?;
        self.report.trace = std::mem::take(&mut self.trace);
        Ok(self.report.clone())
    }

    /// Moves virtual time on: mostly a few ms, now and then a pause.
    fn advance(&mut self) {
        self.now += match self.rng.gen_range(0..100) {
            0..=1 => self.rng.gen_range(500..3000),
            2..=9 => self.rng.gen_range(20..200),
            _ => self.rng.gen_range(0..4),
        };
    }

    /// What runs on its own as time passes: each node's cron (its PING and
    /// tombstone collection, once a second by its own clock), the links'
    /// reconnections and their once-a-second acknowledgements.
    fn background(&mut self) -> Result<(), String> {
        for n in &self.nodes {
            n.enter(self.now);
            active::cron(n.host.active(), n.host.core());
        }
        for i in 0..self.pipes.len() {
            self.reconnect(i);
            let (now, puller) = (self.now, self.pipes[i].puller);
            if let Some(c) = self.pipes[i].conn.as_mut() {
                if now >= c.last_ack + 1000 || now >= c.last_stable + 1000 {
                    self.nodes[puller].enter(now);
                    net::answer(c, Vec::new(), now, now + 1);
                }
            }
        }
        Ok(())
    }

    /// One scheduled event, drawn by weight.
    fn one_event(&mut self) -> Result<(), String> {
        match self.rng.gen_range(0..1000) {
            0..=449 => self.client_step(),
            450..=619 => self.pump_one(),
            620..=929 => self.deliver_one(),
            930..=964 => {
                self.drop_one();
                Ok(())
            }
            965..=979 => {
                self.partition();
                Ok(())
            }
            980..=989 => {
                self.heal();
                Ok(())
            }
            990..=994 => self.restart(),
            _ => {
                self.skew();
                Ok(())
            }
        }
    }
}

mod events;
mod faults;
