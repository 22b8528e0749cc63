//! In-process scaling benchmark (issue 29 item 4; docs/SCALING.md reads
//! its numbers). N threads each drive a connection's command path
//! (`facade::server::conn::Session`: the dispatch a connection's loop
//! calls, from parsed arguments to the reply bytes: lookup, ACL,
//! admission, `call` with a client's bookkeeping, the shard lock, the
//! handler, the effect stream, tracking) over one real keyspace, with no
//! sockets, so the load generator does not share the cores it measures
//! and a 2-core box can still show how the server's own work scales.
//!
//! Every key is written once before the clock starts (by the command
//! measured, so INCR finds a counter and LPUSH a list) and each thread's
//! keys are drawn beforehand, uniformly or Zipf-skewed (s = 0.99, the YCSB
//! default), so a run is the command path alone, on a keyspace that
//! neither grows nor differs between thread counts. A batch of
//! `--pipeline` commands ends as a connection's does (`end_batch`: the
//! hooks that wake replica feeders).
//!
//! Three ways the node's writes leave it (`--feed`):
//! - `plain`: nobody subscribes to the effect stream (one relaxed load
//!   a write);
//! - `repl`: the replication backlog is subscribed, as when a replica has
//!   attached (every write encoded into it under its one lock; no feeder
//!   reads it, so it only trims);
//! - `active`: `active-replica yes` and the active stream recording our
//!   writes (merge states kept per write, each record under the stream's
//!   sequence lock), as a node with peers.
//!
//! Per run it prints the total and per-thread throughput, the ratio to the
//! 1-thread run's per-thread rate (`scaling`, 1.00 = linear) and, per
//! 1,000 commands and in ns per command, the waits of the three locks a
//! write may find held, counted per thread on their contended path only
//! (a `try_lock` first, the clock read only when it fails): the shard
//! locks (`keyspace::held::lock_wait`), the backlogs' buffer
//! (`replication::backlog::append_lock_wait`) and the active stream's
//! sequence (`replication::active::stream_lock_wait`). Each line is the
//! best of `--repeat` runs, with the load average beside it.
//!
//! `cargo bench --bench inproc -- [--threads 1,2,4] [--ops N] [--keys K]
//! [--dist uniform,zipf] [--cmd get,set,incr,lpush,hset,sadd]
//! [--feed plain,repl,active] [--pipeline P] [--repeat R] [--pin]
//! [--config name=value,...]` (e.g. `--config maxmemory=64gb`: every
//! command then sums the allocator's per-thread counters)
//! (bench/inproc.sh). A benchmark, not a test: it asserts nothing.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use lattice::facade::config::Config;
use lattice::facade::server::conn::Session;
use lattice::facade::server::Server;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use mimalloc::MiMalloc;

// The server's allocator, counted as in main.rs.
#[global_allocator]
static GLOBAL: lattice::facade::alloc::Counting<MiMalloc> =
    lattice::facade::alloc::Counting(MiMalloc);

/// Every key is this wide: `key:` and 12 digits.
const KEY_LEN: usize = 16;

struct Opts {
    threads: Vec<usize>,
    ops: usize,
    keys: usize,
    dists: Vec<String>,
    cmds: Vec<String>,
    feeds: Vec<String>,
    pipeline: usize,
    repeat: usize,
    pin: bool,
    /// Directives set on every node (`--config maxmemory=64gb,...`).
    config: Vec<(String, String)>,
}

fn list(v: &str) -> Vec<String> {
    v.split(',').map(str::to_string).collect()
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        threads: vec![1, 2, 4],
        ops: 1_000_000,
        keys: 1_000_000,
        dists: list("uniform,zipf"),
        cmds: list("get,set,incr,lpush,hset"),
        feeds: list("plain,repl,active"),
        pipeline: 16,
        repeat: 3,
        pin: false,
        config: Vec::new(),
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
            "--feed" => o.feeds = list(&val()),
            "--pipeline" => o.pipeline = val().parse().unwrap_or(o.pipeline).max(1),
            "--repeat" => o.repeat = val().parse().unwrap_or(o.repeat).max(1),
            "--pin" => o.pin = true,
            "--config" => {
                o.config = list(&val())
                    .iter()
                    .filter_map(|d| d.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }
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
fn draw_keys(o: &Opts, zipf: Option<&Zipf>, thread: usize) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(thread as u64 + 1);
    (0..o.ops)
        .map(|_| match zipf {
            Some(z) => z.draw(&mut rng) as u32,
            None => rng.gen_range(0..o.keys) as u32,
        })
        .collect()
}

/// A fresh node whose writes leave it by `feed` (module comment).
fn server(o: &Opts, feed: &str) -> Arc<Server> {
    let mut c = Config::default();
    c.set("loglevel", &["warning".into()]).expect("loglevel");
    for (k, v) in &o.config {
        c.set(k, std::slice::from_ref(v))
            .expect("--config directive");
    }
    if feed == "active" {
        c.set("active-replica", &["yes".into()])
            .expect("active-replica");
    }
    let srv = Server::new(c);
    match feed {
        "active" => lattice::facade::replication::active::start_stream(&srv.peer_host()),
        "repl" => srv.repl.activate_backlog(&*srv),
        _ => {}
    }
    srv
}

/// The command `cmd` on key `k`: its name and arguments.
fn command<'a>(cmd: &str, key: &'a [u8]) -> ([&'a [u8]; 4], usize) {
    match cmd {
        "get" => ([b"GET", key, b"", b""], 2),
        "incr" => ([b"INCR", key, b"", b""], 2),
        "lpush" => ([b"LPUSH", key, b"element", b""], 3),
        "hset" => ([b"HSET", key, b"field", b"value-of-sixteen"], 4),
        "sadd" => ([b"SADD", key, b"member", b""], 3),
        _ => ([b"SET", key, b"value-of-sixteen", b""], 3),
    }
}

/// The locks a write may find held, as this thread counted them so far
/// (how many, ns waited): shard, backlog buffer, active stream sequence.
type Waits = [(u64, u64); 3];

fn waits() -> Waits {
    [
        lattice::facade::keyspace::held::lock_wait(),
        lattice::facade::replication::backlog::append_lock_wait(),
        lattice::facade::replication::active::stream_lock_wait(),
    ]
}

/// Pins the calling thread to `cpu` (of those this process may use).
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes
    // inside it, and sched_setaffinity reads `size_of` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// One session's loop over `picks`; its seconds and the waits it counted.
fn drive(s: &mut Session, cmd: &str, keys: &[u8], picks: &[u32], pipeline: usize) -> (f64, Waits) {
    let w0 = waits();
    let start = Instant::now();
    for batch in picks.chunks(pipeline) {
        for &i in batch {
            let at = i as usize * KEY_LEN;
            let (argv, n) = command(cmd, &keys[at..at + KEY_LEN]);
            s.run(&argv[..n]);
        }
        std::hint::black_box(s.end_batch());
    }
    let secs = start.elapsed().as_secs_f64();
    let w1 = waits();
    (
        secs,
        std::array::from_fn(|i| (w1[i].0 - w0[i].0, w1[i].1 - w0[i].1)),
    )
}

/// What one run measured: each thread's seconds and waits.
struct Outcome {
    threads: Vec<(f64, Waits)>,
}

impl Outcome {
    /// Commands a second, all threads together (total ops over the
    /// slowest thread's time).
    fn total_rate(&self, ops: usize) -> f64 {
        let slowest = self.threads.iter().map(|t| t.0).fold(0.0, f64::max);
        (ops * self.threads.len()) as f64 / slowest
    }

    /// Lock `i`'s waits per 1,000 commands and ns waited per command.
    fn wait(&self, i: usize, ops: usize) -> (f64, f64) {
        let all = (ops * self.threads.len()) as f64;
        let n: u64 = self.threads.iter().map(|t| t.1[i].0).sum();
        let ns: u64 = self.threads.iter().map(|t| t.1[i].1).sum();
        (n as f64 * 1000.0 / all, ns as f64 / all)
    }
}

/// One run on a fresh node: every key written once, then `threads`
/// sessions run their picks at once.
fn run_once(o: &Opts, cmd: &str, feed: &str, keys: &[u8], picks: &[Vec<u32>]) -> Outcome {
    let srv = server(o, feed);
    let mut setup = Session::new(&srv, 0);
    let all: Vec<u32> = (0..o.keys as u32).collect();
    let fill = if cmd == "get" { "set" } else { cmd };
    drive(&mut setup, fill, keys, &all, 64);
    let barrier = Barrier::new(picks.len());
    let threads = std::thread::scope(|s| {
        let handles: Vec<_> = picks
            .iter()
            .enumerate()
            .map(|(t, p)| {
                let (srv, barrier) = (&srv, &barrier);
                s.spawn(move || {
                    if o.pin {
                        pin_to(t % ncpus());
                    }
                    let mut session = Session::new(srv, t as u64 + 1);
                    barrier.wait();
                    drive(&mut session, cmd, keys, p, o.pipeline)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    // The data goes now, not when the process ends (a node of the active
    // feed keeps an Arc of its server in the stream's threads).
    setup.run(&[b"FLUSHALL", b"SYNC"]);
    Outcome { threads }
}

fn ncpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn load_average() -> String {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    l.split_whitespace().next().unwrap_or("?").to_string()
}

/// The best of `o.repeat` runs (by total rate) of one configuration;
/// prints its line. `base` is the 1-thread per-thread rate, set by the
/// 1-thread run.
fn run(o: &Opts, cmd: &str, dist: &str, feed: &str, threads: usize, keys: &[u8], base: &mut f64) {
    let zipf = (dist == "zipf").then(|| Zipf::new(o.keys, 0.99));
    let picks: Vec<Vec<u32>> = (0..threads)
        .map(|t| draw_keys(o, zipf.as_ref(), t))
        .collect();
    drop(zipf);
    let load = load_average();
    let best = (0..o.repeat)
        .map(|_| run_once(o, cmd, feed, keys, &picks))
        .max_by(|a, b| a.total_rate(o.ops).total_cmp(&b.total_rate(o.ops)))
        .expect("one run at least");
    let total = best.total_rate(o.ops);
    let per_thread = total / threads as f64;
    if threads == 1 {
        *base = per_thread;
    }
    let w: Vec<(f64, f64)> = (0..3).map(|i| best.wait(i, o.ops)).collect();
    println!(
        "{:<6} {:<8} {:<7} {:>3} {:>11.0} {:>11.0} {:>6.2} {:>7.2} {:>6.1} {:>7.2} {:>6.1} {:>7.2} {:>6.1}  {}-{}",
        cmd,
        dist,
        feed,
        threads,
        total,
        per_thread,
        per_thread / *base,
        w[0].0,
        w[0].1,
        w[1].0,
        w[1].1,
        w[2].0,
        w[2].1,
        load,
        load_average(),
    );
}

fn main() {
    lattice::facade::alloc::mark_installed(); // as main.rs: used_memory counts
    let o = parse_opts();
    println!(
        "{} ops per thread, {} keys, pipeline {}, best of {}, {} cpus{}{:?}; \
         scaling = per-thread rate / 1-thread rate; waits per 1k commands, ns per command",
        o.ops,
        o.keys,
        o.pipeline,
        o.repeat,
        ncpus(),
        if o.pin { ", pinned" } else { "" },
        o.config,
    );
    println!(
        "{:<6} {:<8} {:<7} {:>3} {:>11} {:>11} {:>6} {:>7} {:>6} {:>7} {:>6} {:>7} {:>6}  load",
        "cmd",
        "keys",
        "feed",
        "thr",
        "total/s",
        "thread/s",
        "scale",
        "shard/k",
        "ns",
        "blog/k",
        "ns",
        "strm/k",
        "ns"
    );
    let keys: Vec<u8> = (0..o.keys)
        .flat_map(|i| format!("key:{i:012}").into_bytes())
        .collect();
    for cmd in &o.cmds {
        for dist in &o.dists {
            for feed in &o.feeds {
                let mut base = 0.0;
                for &t in &o.threads {
                    run(&o, cmd, dist, feed, t, &keys, &mut base);
                }
            }
        }
    }
}
