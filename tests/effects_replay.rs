//! The write-effect stream is complete and deterministic: a random workload
//! runs in-process on one server while a `Recorder` keeps every effect; the
//! records are then replayed with `commands::replay` on a fresh server, and
//! both keyspaces must be identical in every database: the same keys, values,
//! expiry deadlines and versions.
//!
//! The workload mixes every write command that exists in the command table
//! (optional ones such as INCR are used when some family provides them), short
//! TTLs so that keys expire lazily in the middle of the run, and cross-database
//! commands. It runs once on one thread and once on several threads sharing
//! the keys while an active expiry cycle runs beside them, which checks that
//! effects are emitted in lock order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lattice::commands::{replay, run_local};
use lattice::config::Config;
use lattice::core::client::ClientState;
use lattice::effects::{Effect, Recorder};
use lattice::keyspace::expire::active_expire_cycle;
use lattice::keyspace::hlc::{unix_ms, Hlc};
use lattice::keyspace::{Value, SHARDS};
use lattice::server::Server;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: usize = 24;
const DBS: usize = 4;

/// One generated command line.
type Line = Vec<String>;

fn key(rng: &mut StdRng) -> String {
    format!("k{}", rng.gen_range(0..KEYS))
}

fn value(rng: &mut StdRng) -> String {
    match rng.gen_range(0..3) {
        0 => rng.gen_range(-5..100).to_string(),
        1 => format!("v{}", rng.gen_range(0..1000)),
        _ => "x".repeat(rng.gen_range(0..60)),
    }
}

fn s(v: &[&str]) -> Line {
    v.iter().map(|x| x.to_string()).collect()
}

/// A SET with a random option mix (relative and absolute TTLs, some short).
fn gen_set(rng: &mut StdRng) -> Line {
    let mut l = s(&["SET", &key(rng), &value(rng)]);
    let now = unix_ms();
    match rng.gen_range(0..8) {
        0 => l.extend(s(&["EX", &rng.gen_range(1..100).to_string()])),
        1 => l.extend(s(&["PX", &rng.gen_range(1..150).to_string()])),
        2 => l.extend(s(&["KEEPTTL"])),
        3 => l.extend(s(&["PXAT", &(now + rng.gen_range(1..100_000)).to_string()])),
        4 => l.push("NX".into()),
        5 => l.push("XX".into()),
        _ => {}
    }
    l
}

fn gen_expire(rng: &mut StdRng) -> Line {
    let k = key(rng);
    let now = unix_ms() as i64;
    let mut l = match rng.gen_range(0..6) {
        0 => s(&["EXPIRE", &k, &rng.gen_range(-2..200).to_string()]),
        1 => s(&["PEXPIRE", &k, &rng.gen_range(-50..300).to_string()]),
        2 => s(&[
            "EXPIREAT",
            &k,
            &(now / 1000 + rng.gen_range(-5..500)).to_string(),
        ]),
        3 => s(&[
            "PEXPIREAT",
            &k,
            &(now + rng.gen_range(-100..90_000)).to_string(),
        ]),
        4 => s(&["PERSIST", &k]),
        _ => s(&["PTTL", &k]),
    };
    if l[0] != "PERSIST" && l[0] != "PTTL" && rng.gen_bool(0.3) {
        l.push(["NX", "XX", "GT", "LT"][rng.gen_range(0..4)].into());
    }
    l
}

fn gen_multi(rng: &mut StdRng) -> Line {
    let n = rng.gen_range(1..4);
    let name = if rng.gen_bool(0.5) { "DEL" } else { "UNLINK" };
    let mut l = vec![name.to_string()];
    l.extend((0..n).map(|_| key(rng)));
    l
}

fn gen_cross(rng: &mut StdRng) -> Line {
    let db = rng.gen_range(0..DBS).to_string();
    match rng.gen_range(0..6) {
        0 => s(&["RENAME", &key(rng), &key(rng)]),
        1 => s(&["RENAMENX", &key(rng), &key(rng)]),
        2 => s(&["COPY", &key(rng), &key(rng)]),
        3 => s(&["COPY", &key(rng), &key(rng), "DB", &db, "REPLACE"]),
        4 => s(&["MOVE", &key(rng), &db]),
        _ => s(&["COPY", &key(rng), &key(rng), "DB", &db]),
    }
}

/// Commands of other families, used only when the table has them.
fn gen_optional(rng: &mut StdRng) -> Line {
    let k = key(rng);
    match rng.gen_range(0..10) {
        0 => s(&["INCR", &k]),
        1 => s(&["INCRBY", &k, &rng.gen_range(-10..10).to_string()]),
        2 => s(&["APPEND", &k, &value(rng)]),
        3 => s(&["INCRBYFLOAT", &k, "1.5"]),
        4 => s(&["GETDEL", &k]),
        5 => s(&["GETEX", &k, "PX", &rng.gen_range(1..500).to_string()]),
        6 => s(&["SETEX", &k, "100", &value(rng)]),
        7 => s(&["MSET", &k, &value(rng), &key(rng), &value(rng)]),
        8 => s(&["SETRANGE", &k, &rng.gen_range(0..10).to_string(), "ab"]),
        _ => s(&["GETSET", &k, &value(rng)]),
    }
}

fn gen_line(rng: &mut StdRng) -> Line {
    match rng.gen_range(0..100) {
        0..=24 => gen_set(rng),
        25..=39 => gen_expire(rng),
        40..=49 => gen_multi(rng),
        50..=64 => gen_cross(rng),
        65..=74 => s(&["GET", &key(rng)]),
        75..=84 => s(&["SELECT", &rng.gen_range(0..DBS).to_string()]),
        85..=95 => gen_optional(rng),
        96..=97 => {
            let (a, b) = (rng.gen_range(0..DBS), rng.gen_range(0..DBS));
            s(&["SWAPDB", &a.to_string(), &b.to_string()])
        }
        98 => s(&["FLUSHDB"]),
        _ => {
            if rng.gen_bool(0.2) {
                s(&["FLUSHALL"])
            } else {
                s(&["EXISTS", &key(rng)])
            }
        }
    }
}

/// Runs `ops` random commands as one client with its own clock.
fn workload(srv: &Arc<Server>, seed: u64, ops: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let mut client = ClientState::new(seed + 1);
    for i in 0..ops {
        let line = gen_line(&mut rng);
        if srv.commands.lookup(line[0].as_bytes()).is_none() {
            continue;
        }
        let argv: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
        // Errors (WRONGTYPE, no such key, ...) are part of the workload.
        let _ = run_local(srv, &mut clock, &stats, &mut client, &argv);
        if i % 400 == 399 {
            // Let the short TTLs run out so lazy expiry happens mid-run.
            std::thread::sleep(std::time::Duration::from_millis(60));
        }
    }
}

/// Every key of every database: (type, bytes, expire_at, version).
type Dump = Vec<BTreeMap<Vec<u8>, (String, Vec<u8>, u64, u64)>>;

fn dump(srv: &Server) -> Dump {
    let ks = &srv.keyspace;
    (0..ks.num_dbs())
        .map(|db| {
            let mut m = BTreeMap::new();
            for sh in 0..SHARDS {
                let g = ks.db(db).lock(sh);
                for e in g.iter() {
                    let t = e.value.type_name().to_string();
                    let v = canonical(&e.value);
                    m.insert(e.key.to_vec(), (t, v, e.expire_at(), e.version));
                }
            }
            m
        })
        .collect()
}

/// The value's content, independent of its encoding and of the iteration
/// order of unordered types.
fn canonical(v: &Value) -> Vec<u8> {
    let join = |mut items: Vec<Vec<u8>>, sort: bool| {
        if sort {
            items.sort();
        }
        items.join(&b"\0"[..])
    };
    match v {
        Value::Str(s) => s.to_vec(),
        Value::List(l) => join(l.iter().map(|e| e.to_vec()).collect(), false),
        Value::Set(st) => join(st.iter().map(|e| e.to_vec()).collect(), true),
        Value::Hash(h) => join(h.iter().map(|(f, v)| [f, b"=", v].concat()).collect(), true),
        Value::ZSet(z) => join(
            z.iter()
                .map(|(m, sc)| [m, b"=", sc.to_string().as_bytes()].concat())
                .collect(),
            false,
        ),
    }
}

fn recorded_server() -> (Arc<Server>, Arc<Recorder>) {
    let srv = Server::new(Config::default());
    let rec = Arc::new(Recorder::default());
    srv.effects.subscribe(rec.clone());
    (srv, rec)
}

/// Replays `rec` on a fresh server and compares it with `srv`.
fn replay_and_compare(srv: &Arc<Server>, rec: &Recorder) {
    let effects = rec.0.lock().clone();
    assert!(effects.len() > 500, "workload too small: {}", effects.len());
    let names: std::collections::BTreeSet<String> = effects
        .iter()
        .map(|e| String::from_utf8_lossy(&e.argv[0]).to_uppercase())
        .collect();
    for must in [
        "SET",
        "DEL",
        "PEXPIREAT",
        "RENAME",
        "COPY",
        "MOVE",
        "SWAPDB",
    ] {
        assert!(names.contains(must), "no {must} effect in {names:?}");
    }
    let copy = Server::new(Config::default());
    let mut clock = Hlc::new(copy.node_id);
    let stats = copy.new_worker_stats();
    for e in &effects {
        replay(&copy, &mut clock, &stats, e).unwrap_or_else(|err| panic!("{e:?}: {err}"));
    }
    let (a, b) = (dump(srv), dump(&copy));
    let total: usize = a.iter().map(|m| m.len()).sum();
    assert!(total > 0, "workload left no keys to compare");
    for (db, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        for (k, v) in x {
            let key = String::from_utf8_lossy(k);
            assert_eq!(Some(v), y.get(k), "db {db} key {key} differs after replay");
        }
        assert_eq!(x.len(), y.len(), "db {db}: replay has extra keys");
    }
}

/// Runs the active expiry cycle as the server's cron does (emitting each
/// deletion under its shard lock) until `done`; returns the keys removed.
fn active_expiry(srv: &Arc<Server>, done: &AtomicBool) -> usize {
    let mut clock = Hlc::new(srv.node_id);
    let mut removed = 0;
    while !done.load(Ordering::Relaxed) {
        let budget = Duration::from_millis(5);
        let st = active_expire_cycle(&srv.keyspace, 0, 1, unix_ms(), budget, |db, e| {
            let version = clock.now();
            let argv = vec![b"DEL".to_vec(), e.key.to_vec()];
            srv.effects.emit_owned(&Effect {
                db,
                version,
                argv,
                bases: vec![],
            });
            None
        });
        removed += st.expired;
        std::thread::sleep(Duration::from_millis(5));
    }
    removed
}

#[test]
fn replay_reproduces_single_threaded_workload() {
    let (srv, rec) = recorded_server();
    workload(&srv, 42, 4000);
    replay_and_compare(&srv, &rec);
}

#[test]
fn replay_reproduces_concurrent_workload() {
    let (srv, rec) = recorded_server();
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let srv = srv.clone();
            std::thread::spawn(move || workload(&srv, 1000 + t, 2500))
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let expirer = {
        let (srv, done) = (srv.clone(), done.clone());
        std::thread::spawn(move || active_expiry(&srv, &done))
    };
    for t in threads {
        t.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    assert!(expirer.join().unwrap() > 0, "active expiry removed nothing");
    replay_and_compare(&srv, &rec);
}
