//! In-process scaling benchmark (issue 29 item 4): N threads drive the
//! command path (`commands::run_local`: lookup, arity, locking, the
//! handler, the effect stream, the reply's encoding) over one real
//! keyspace, with no sockets, so the load generator does not share the
//! cores it measures and a 2-core box can still show how the server's own
//! work scales from 1 thread to 2.
//!
//! Keys are drawn before the clock starts, uniformly or Zipf-skewed
//! (s = 0.99, the YCSB default), so each thread's loop is the command path
//! alone. Per run it prints the total and per-thread throughput, the
//! per-thread throughput against the 1-thread run's (1.00 = linear), and
//! the shard locks and the active stream's lock that found their mutex
//! held (per 1,000 commands) with the time spent waiting
//! (`keyspace::held::lock_wait`, `replication::active::stream_lock_wait`).
//!
//! `cargo bench --bench inproc -- [--threads 1,2] [--ops N] [--keys K]
//! [--dist uniform,zipf] [--cmd set,get,incr,sadd,lpush] [--active no,yes]`
//! (bench/inproc.sh runs the whole matrix). A benchmark, not a test: it
//! asserts nothing.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use lattice::facade::commands::run_local;
use lattice::facade::config::Config;
use lattice::facade::core::client::ClientState;
use lattice::facade::keyspace::hlc::Hlc;
use lattice::facade::server::Server;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use mimalloc::MiMalloc;

// The server's allocator, counted as in main.rs.
#[global_allocator]
static GLOBAL: lattice::facade::alloc::Counting<MiMalloc> =
    lattice::facade::alloc::Counting(MiMalloc);

struct Opts {
    threads: Vec<usize>,
    ops: usize,
    keys: usize,
    dists: Vec<String>,
    cmds: Vec<String>,
    active: Vec<bool>,
}

fn list(v: &str) -> Vec<String> {
    v.split(',').map(str::to_string).collect()
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        threads: vec![1, 2],
        ops: 1_000_000,
        keys: 100_000,
        dists: list("uniform,zipf"),
        cmds: list("set,get,incr,sadd,lpush"),
        active: vec![false, true],
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--threads" => o.threads = list(&val()).iter().filter_map(|t| t.parse().ok()).collect(),
            "--ops" => o.ops = val().parse().unwrap_or(o.ops),
            "--keys" => o.keys = val().parse().unwrap_or(o.keys),
            "--dist" => o.dists = list(&val()),
            "--cmd" => o.cmds = list(&val()),
            "--active" => o.active = list(&val()).iter().map(|v| v == "yes").collect(),
            _ => {} // cargo bench passes --bench
        }
    }
    o
}

/// Key indices drawn from a Zipf law over `n` keys (inverse of its CDF).
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let mut sum = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|k| {
                sum += 1.0 / (k as f64).powf(s);
                sum
            })
            .collect();
        cdf.iter_mut().for_each(|c| *c /= sum);
        Zipf { cdf }
    }

    fn draw(&self, rng: &mut StdRng) -> usize {
        let u: f64 = rng.gen();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// Each thread's key indices, drawn before the clock starts.
fn draw_keys(o: &Opts, dist: &str, thread: usize) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(thread as u64 + 1);
    let zipf = (dist == "zipf").then(|| Zipf::new(o.keys, 0.99));
    (0..o.ops)
        .map(|_| match &zipf {
            Some(z) => z.draw(&mut rng) as u32,
            None => rng.gen_range(0..o.keys) as u32,
        })
        .collect()
}

fn server(active: bool) -> Arc<Server> {
    let mut c = Config::default();
    c.set("loglevel", &["warning".into()]).expect("loglevel");
    if active {
        c.set("active-replica", &["yes".into()])
            .expect("active-replica");
    }
    let srv = Server::new(c);
    if active {
        lattice::facade::replication::active::start_stream(&srv.peer_host());
    }
    srv
}

/// The command `cmd` on key `k` (its name and arguments).
fn command<'a>(cmd: &str, key: &'a [u8]) -> [&'a [u8]; 3] {
    match cmd {
        "get" => [b"GET", key, b""],
        "incr" => [b"INCR", key, b""],
        "sadd" => [b"SADD", key, b"member"],
        "lpush" => [b"LPUSH", key, b"element"],
        _ => [b"SET", key, b"value-of-sixteen"],
    }
}

/// One thread's contended locks so far: shard locks, then the active
/// stream's (how many, ns waited).
fn waits() -> [(u64, u64); 2] {
    [
        lattice::facade::keyspace::held::lock_wait(),
        lattice::facade::replication::active::stream_lock_wait(),
    ]
}

/// One thread's loop; returns its seconds and the locks it waited for
/// (shard, stream: how many, ns).
fn drive(
    srv: &Arc<Server>,
    cmd: &str,
    keys: &[Vec<u8>],
    picks: &[u32],
    id: u64,
) -> (f64, [(u64, u64); 2]) {
    let mut clock = Hlc::new(srv.identity.slot);
    let stats = srv.new_worker_stats();
    let mut client = ClientState::new(id);
    let arity = if matches!(cmd, "get" | "incr") { 2 } else { 3 };
    let w0 = waits();
    let start = Instant::now();
    for &i in picks {
        let argv = command(cmd, &keys[i as usize]);
        let r = run_local(srv, &mut clock, &stats, &mut client, &argv[..arity]);
        std::hint::black_box(r.ok());
    }
    let secs = start.elapsed().as_secs_f64();
    let w1 = waits();
    let since = |i: usize| (w1[i].0 - w0[i].0, w1[i].1 - w0[i].1);
    (secs, [since(0), since(1)])
}

/// One run: `threads` threads, each `o.ops` commands; prints its line.
fn run(o: &Opts, cmd: &str, dist: &str, active: bool, threads: usize, base: &mut f64) {
    let srv = server(active);
    let keys: Vec<Vec<u8>> = (0..o.keys)
        .map(|i| format!("key:{i:012}").into_bytes())
        .collect();
    if cmd == "get" {
        // Something to read: every key set first (not timed).
        drive(
            &srv,
            "set",
            &keys,
            &(0..o.keys as u32).collect::<Vec<_>>(),
            0,
        );
    }
    let picks: Vec<Vec<u32>> = (0..threads).map(|t| draw_keys(o, dist, t)).collect();
    let barrier = Barrier::new(threads);
    let results: Vec<(f64, [(u64, u64); 2])> = std::thread::scope(|s| {
        let handles: Vec<_> = picks
            .iter()
            .enumerate()
            .map(|(t, p)| {
                let (srv, keys, barrier) = (&srv, &keys, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    drive(srv, cmd, keys, p, t as u64 + 1)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let per_thread: f64 = results.iter().map(|r| o.ops as f64 / r.0).sum::<f64>() / threads as f64;
    if threads == 1 {
        *base = per_thread;
    }
    let total_ops = (o.ops * threads) as f64;
    let per_1k =
        |i: usize| results.iter().map(|r| r.1[i].0).sum::<u64>() as f64 * 1000.0 / total_ops;
    let ns_per_op = |i: usize| results.iter().map(|r| r.1[i].1).sum::<u64>() as f64 / total_ops;
    println!(
        "{:<6} {:<8} {:<6} {:>7} {:>12.0} {:>12.0} {:>7.2} {:>10.2} {:>7.1} {:>10.2} {:>7.1}",
        cmd,
        dist,
        if active { "yes" } else { "no" },
        threads,
        per_thread * threads as f64,
        per_thread,
        per_thread / *base,
        per_1k(0),
        ns_per_op(0),
        per_1k(1),
        ns_per_op(1),
    );
}

fn main() {
    let o = parse_opts();
    println!(
        "{} ops per thread, {} keys; scaling = per-thread rate / 1-thread rate",
        o.ops, o.keys
    );
    println!(
        "{:<6} {:<8} {:<6} {:>7} {:>12} {:>12} {:>7} {:>10} {:>7} {:>10} {:>7}",
        "cmd",
        "keys",
        "active",
        "threads",
        "total/s",
        "thread/s",
        "scaling",
        "shard w/1k",
        "ns/op",
        "strm w/1k",
        "ns/op"
    );
    for cmd in &o.cmds {
        for dist in &o.dists {
            for &active in &o.active {
                let mut base = 0.0;
                for &t in &o.threads {
                    run(&o, cmd, dist, active, t, &mut base);
                }
            }
        }
    }
}
