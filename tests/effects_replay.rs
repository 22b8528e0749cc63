//! The write-effect stream is complete and deterministic: a random workload
//! runs in-process on one server while a `Recorder` keeps every effect; the
//! records are then replayed with `commands::replay` on a fresh server, and
//! both keyspaces must be identical in every database: the same keys, values,
//! expiry deadlines and versions.
//!
//! The workload is generated from the command table: every command flagged
//! `write` is drawn, through a template per command below that covers its
//! option classes (SET's NX/XX/GET/EX/PX/EXAT/PXAT/KEEPTTL, ZADD's
//! NX/XX/GT/LT/CH/INCR, SORT .. STORE, RESTORE of DUMP payloads, MIGRATE to
//! a stub target ...). A write command with neither a template nor an entry
//! in [`EXCLUDED`] fails `every_write_command_has_a_template`, so a new write
//! cannot be added without replay coverage. Reads that expire keys lazily,
//! SELECT and MULTI/EXEC blocks are mixed in, with short TTLs so that keys
//! expire in the middle of the run.
//!
//! The single-threaded run replays in lockstep: after every command the new
//! records are replayed on the replica and both keyspaces are compared, so a
//! divergence names the command that caused it. It runs with compact
//! encodings limited to a few elements, and now and then rebuilds every
//! value of the replica from its DUMP payload, as a full sync would build
//! it, so that a record whose replay depends on a value's encoding or
//! internal shape rather than its contents diverges. It also checks that each
//! step's records are one unit (one record, or several between MULTI and
//! EXEC, as Redis propagates a command), that every write command emitted
//! a record at least once and that no template produced a syntax error. The concurrent run has several threads share the
//! keys while an active expiry cycle and an eviction loop (`maxmemory`
//! lowered under the memory in use, policy by policy) run beside them, with
//! the lazyfree options on so that deletions propagate as UNLINK; it checks
//! that effects are emitted in lock order, and compares once at the end.
//! `REPLAY_SEED` and `REPLAY_OPS` in the environment run other seeds or
//! longer runs by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lattice::facade::commands::gone::{actively_expired, Gone};
use lattice::facade::commands::{replay, run_local};
use lattice::facade::config::Config;
use lattice::facade::core::client::ClientState;
use lattice::facade::core::stats::WorkerStats;
use lattice::facade::effects::{Effect, Recorder};
use lattice::facade::keyspace::expire::active_expire_cycle;
use lattice::facade::keyspace::hlc::{unix_ms, Hlc};
use lattice::facade::keyspace::SHARDS;
use lattice::facade::persistence::rdb::encode::dump_payload;
use lattice::facade::server::Server;

#[path = "common/workload.rs"]
mod workload;
use workload::*;

// The counting allocator, so that `maxmemory` sees memory and evicts (the
// eviction run of the concurrent workload).
#[global_allocator]
static ALLOC: lattice::facade::alloc::Counting<std::alloc::System> =
    lattice::facade::alloc::Counting(std::alloc::System);

/// A stub MIGRATE target: answers +OK to every command it is sent.
fn migrate_target() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || serve_ok(conn));
        }
    });
    port
}

fn serve_ok(conn: TcpStream) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    let mut header = String::new();
    loop {
        header.clear();
        if r.read_line(&mut header).unwrap_or(0) == 0 {
            return;
        }
        let n: usize = header.trim_end()[1..].parse().unwrap();
        for _ in 0..n {
            header.clear();
            r.read_line(&mut header).unwrap();
            let len: usize = header.trim_end()[1..].parse().unwrap();
            let mut body = vec![0; len + 2];
            r.read_exact(&mut body).unwrap();
        }
        if w.write_all(b"+OK\r\n").is_err() {
            return;
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

/// The first difference between two dumps, if any.
fn diff(a: &Dump, b: &Dump) -> Option<String> {
    for (db, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        for (k, v) in x {
            if y.get(k) != Some(v) {
                let key = String::from_utf8_lossy(k);
                return Some(format!(
                    "db {db} key {key}: origin {v:?}, replay {:?}",
                    y.get(k)
                ));
            }
        }
        if let Some(k) = y.keys().find(|k| !x.contains_key(*k)) {
            let key = String::from_utf8_lossy(k);
            return Some(format!("db {db} key {key}: only in the replay {:?}", y[k]));
        }
    }
    None
}

fn recorded_server() -> (Arc<Server>, Arc<Recorder>) {
    let srv = Server::new(Config::default());
    let rec = Arc::new(Recorder::default());
    srv.effects.subscribe(rec.clone());
    (srv, rec)
}

/// Runs CONFIG SET `name` `value` on `srv`.
fn config_set(srv: &Arc<Server>, name: &str, value: &str) {
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let mut client = ClientState::new(u64::MAX);
    let argv: [&[u8]; 4] = [b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()];
    run_local(srv, &mut clock, &stats, &mut client, &argv).unwrap();
}

/// Compact encodings only up to a few elements, so that most collections
/// take their big encoding, and convert, in the middle of the run.
fn small_encodings(srv: &Arc<Server>) {
    for name in [
        "zset-max-listpack-entries",
        "hash-max-listpack-entries",
        "set-max-listpack-entries",
        "set-max-intset-entries",
        "list-max-listpack-size",
    ] {
        config_set(srv, name, "4");
    }
}

/// A fresh server effects are replayed on.
struct Replica {
    srv: Arc<Server>,
    clock: Hlc,
    stats: Arc<WorkerStats>,
}

impl Replica {
    fn new() -> Replica {
        let srv = Server::new(Config::default());
        let clock = Hlc::new(srv.node_id);
        let stats = srv.new_worker_stats();
        Replica { srv, clock, stats }
    }

    fn with_small_encodings() -> Replica {
        let r = Replica::new();
        small_encodings(&r.srv);
        r
    }

    /// Rebuilds every value from its DUMP payload, keeping keys, expiry
    /// and versions, as a full sync builds a replica's: other encodings and
    /// internal shapes than the history of writes gave. A record whose
    /// replay depends on more than the values' contents then diverges.
    fn reshape(&mut self) {
        let ks = &self.srv.keyspace;
        let mut restores = vec![];
        for db in 0..ks.num_dbs() {
            for sh in 0..SHARDS {
                for e in ks.db(db).lock(sh).iter() {
                    let argv = vec![
                        b"RESTORE".to_vec(),
                        e.key.to_vec(),
                        e.expire_at().to_string().into_bytes(),
                        dump_payload(&e.value, false),
                        b"REPLACE".to_vec(),
                        b"ABSTTL".to_vec(),
                    ];
                    let version = e.version;
                    restores.push(Effect {
                        db,
                        version,
                        argv,
                        bases: vec![],
                        facts: vec![],
                    });
                }
            }
        }
        self.replay(&restores);
    }

    fn replay(&mut self, effects: &[Effect]) {
        for e in effects {
            replay(&self.srv, &mut self.clock, &self.stats, e)
                .unwrap_or_else(|err| panic!("replaying {e:?}: {err}"));
        }
    }
}

/// One client running generated steps on `srv`.
struct Worker {
    srv: Arc<Server>,
    gen: Gen,
    cmds: Vec<(String, f64)>,
    total: f64,
    clock: Hlc,
    stats: Arc<WorkerStats>,
    client: ClientState,
}

impl Worker {
    fn new(srv: &Arc<Server>, seed: u64, payloads: Arc<Vec<(char, Vec<u8>)>>, port: u16) -> Worker {
        // Member TTLs: tests/member_expiry.rs (`MEMBER_TTL_WRITES`).
        let mut cmds = drawable(srv, false);
        cmds.retain(|(n, _)| !MEMBER_TTL_WRITES.contains(&n.as_str()));
        let total = cmds.iter().map(|c| c.1).sum();
        Worker {
            gen: Gen::new(seed, payloads, port),
            cmds,
            total,
            clock: Hlc::new(srv.node_id),
            stats: srv.new_worker_stats(),
            client: ClientState::new(seed + 1),
            srv: srv.clone(),
        }
    }

    /// Runs one random step; returns its lines, the write it was drawn
    /// for, and whether every line's reply was one the data explains.
    fn step(&mut self) -> (Vec<Line>, Option<String>, Result<(), String>) {
        let (lines, name) = step(&mut self.gen, &self.cmds, self.total);
        let ok = self.run(&lines);
        (lines, name, ok)
    }

    /// Runs `lines`; an error the data does not explain is returned.
    fn run(&mut self, lines: &[Line]) -> Result<(), String> {
        let mut ok = Ok(());
        for l in lines {
            let argv: Vec<&[u8]> = l.iter().map(|a| a.as_slice()).collect();
            let r = run_local(
                &self.srv,
                &mut self.clock,
                &self.stats,
                &mut self.client,
                &argv,
            );
            // Errors (WRONGTYPE, no such key, ...) are part of the workload.
            if let Err(e) = r {
                if !expected_error(&e) && ok.is_ok() {
                    ok = Err(format!("{}: {e}", show(l)));
                }
            }
        }
        ok
    }
}

/// Runs `ops` steps as one client; the sleeps let short TTLs run out so
/// lazy expiry happens mid-run.
fn workload(
    srv: &Arc<Server>,
    seed: u64,
    ops: usize,
    payloads: Arc<Vec<(char, Vec<u8>)>>,
    port: u16,
) {
    let mut w = Worker::new(srv, seed, payloads, port);
    for i in 0..ops {
        let (lines, _, ok) = w.step();
        if let Err(e) = ok {
            panic!(
                "template error in {:?}: {e}",
                lines.iter().map(|l| show(l)).collect::<Vec<_>>()
            );
        }
        if i % 400 == 399 {
            std::thread::sleep(Duration::from_millis(60));
        }
    }
}

/// Replays `rec` on a fresh server and compares it with `srv`.
fn replay_and_compare(srv: &Arc<Server>, rec: &Recorder) {
    let effects = rec.0.lock().clone();
    assert!(effects.len() > 500, "workload too small: {}", effects.len());
    let mut copy = Replica::new();
    copy.replay(&effects);
    let a = dump(srv);
    let total: usize = a.iter().map(|m| m.len()).sum();
    assert!(total > 0, "workload left no keys to compare");
    if let Some(d) = diff(&a, &dump(&copy.srv)) {
        panic!("{d}");
    }
}

/// Runs the active expiry cycle as the server's cron does (emitting each
/// deletion under its shard lock) until `done`; returns the keys removed.
fn active_expiry(srv: &Arc<Server>, done: &AtomicBool) -> usize {
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let gone = Gone {
        core: &srv.core,
        stats: &stats,
        client: 0,
        now_ms: 0,
    };
    let mut removed = 0;
    while !done.load(Ordering::Relaxed) {
        let budget = Duration::from_millis(5);
        let st = active_expire_cycle(
            &srv.keyspace,
            0,
            1,
            unix_ms(),
            budget,
            |db, e| actively_expired(&gone, &mut clock, db, e),
            |_, _| (0, false),
        );
        removed += st.expired;
        std::thread::sleep(Duration::from_millis(5));
    }
    removed
}

/// A number from the environment (`REPLAY_SEED`, `REPLAY_OPS`), else
/// `default`.
fn env_or(var: &str, default: u64) -> u64 {
    std::env::var(var).map_or(default, |v| v.parse().expect(var))
}

/// Lowers `maxmemory` a little under the memory in use now and then (with
/// each eviction policy in turn) until `done`, as CONFIG SET makes the
/// server evict at once; returns the keys evicted.
fn eviction(srv: &Arc<Server>, done: &AtomicBool) -> u64 {
    lattice::facade::alloc::mark_installed();
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let mut client = ClientState::new(2);
    let mut config_set = |name: &str, value: &str| {
        let argv: [&[u8]; 4] = [b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()];
        run_local(srv, &mut clock, &stats, &mut client, &argv).unwrap();
    };
    let policies = [
        "allkeys-random",
        "volatile-ttl",
        "allkeys-lru",
        "volatile-lfu",
    ];
    let mut i = 0;
    while !done.load(Ordering::Relaxed) {
        config_set("maxmemory-policy", policies[i % policies.len()]);
        let used = lattice::facade::alloc::allocated_bytes().unwrap();
        config_set("maxmemory", &used.saturating_sub(2048).max(1).to_string());
        config_set("maxmemory", "0");
        i += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let argv: [&[u8]; 2] = [b"INFO", b"stats"];
    let info = run_local(srv, &mut clock, &stats, &mut client, &argv).unwrap();
    let info = String::from_utf8(info).unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("evicted_keys:"))
        .unwrap();
    line["evicted_keys:".len()..].parse().unwrap()
}

#[test]
fn every_write_command_has_a_template() {
    let srv = Server::new(Config::default());
    let writes = write_commands(&srv);
    let mut g = Gen::new(7, Arc::new(vec![('s', vec![])]), 1);
    let excluded: BTreeSet<&str> = EXCLUDED.iter().map(|e| e.0).collect();
    let missing: Vec<&String> = writes
        .iter()
        .filter(|n| !excluded.contains(n.as_str()) && template(n, &mut g).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "write commands with no replay template in tests/effects_replay.rs \
         (add one to `template`, or an entry with a reason to EXCLUDED): {missing:?}"
    );
    for (name, why) in EXCLUDED {
        assert!(!why.is_empty(), "{name}: an exclusion needs a reason");
        assert!(
            writes.iter().any(|w| w == name),
            "excluded {name} is not a write command of the table"
        );
    }
}

/// Commands whose lazy-expiry DELs may go ahead of their write, each
/// alone: reads that expire each key under its own lock (Redis does not
/// wrap SCAN's and RANDOMKEY's DELs either), SORT, whose BY/GET keys are
/// each read so, and MIGRATE, which reads its keys before talking to the
/// target and deletes them after, under other locks.
const LONE_DELS_AHEAD: &[&str] = &["SCAN", "RANDOMKEY", "SORT", "MIGRATE"];

/// Whether the records of one step are one unit, as Redis propagates a
/// command (or a transaction): a single record, or several between MULTI
/// and EXEC, never nested. For [`LONE_DELS_AHEAD`], lone DELs of other
/// keys may come first.
fn one_unit(lines: &[Line], records: &[Effect]) -> Result<(), String> {
    let name = |e: &Effect| String::from_utf8_lossy(&e.argv[0]).to_uppercase();
    // Split into units: a MULTI ... EXEC block, or one record.
    let mut units: Vec<&[Effect]> = vec![];
    let mut open = None;
    for (i, e) in records.iter().enumerate() {
        match (name(e).as_str(), open) {
            ("MULTI", Some(_)) => return Err("nested MULTI".into()),
            ("MULTI", None) => open = Some(i),
            ("EXEC", None) => return Err("EXEC without MULTI".into()),
            ("EXEC", Some(start)) => {
                units.push(&records[start..=i]);
                open = None;
            }
            (_, Some(_)) => {}
            (_, None) => units.push(&records[i..=i]),
        }
    }
    if open.is_some() {
        return Err("MULTI without EXEC".into());
    }
    let Some((last, ahead)) = units.split_last() else {
        return Ok(());
    };
    let may = lines.len() == 1
        && LONE_DELS_AHEAD
            .iter()
            .any(|n| lines[0][0].eq_ignore_ascii_case(n.as_bytes()));
    if ahead.is_empty() {
        return Ok(());
    } else if !may {
        return Err("several records, not one unit between MULTI and EXEC".into());
    }
    for u in ahead {
        let lone_del = u.len() == 1 && ["DEL", "UNLINK"].contains(&name(&u[0]).as_str());
        let key = u[0].argv.get(1);
        let written_after = last
            .iter()
            .any(|e| e.argv[1..].iter().any(|a| Some(a) == key));
        if !lone_del || u[0].argv.len() != 2 || written_after {
            return Err(format!(
                "{} ahead of the write, not one unit with it",
                show(&u[0].argv)
            ));
        }
    }
    Ok(())
}

/// The single-threaded run's replica, kept in step with the origin.
struct Lockstep {
    srv: Arc<Server>,
    rec: Arc<Recorder>,
    replica: Replica,
    replayed: usize,
    steps: usize,
}

impl Lockstep {
    /// Replays the records `lines` (just run by `w`) emitted and compares
    /// both keyspaces; returns how many records there were.
    fn check(&mut self, w: &Worker, lines: &[Line], ok: Result<(), String>) -> usize {
        let shown: Vec<String> = lines.iter().map(|l| show(l)).collect();
        if let Err(e) = ok {
            panic!("template error in {shown:?}: {e}");
        }
        let new: Vec<Effect> = self.rec.0.lock()[self.replayed..].to_vec();
        self.replayed += new.len();
        if let Err(e) = one_unit(lines, &new) {
            let recs: Vec<String> = new.iter().map(|e| show(&e.argv)).collect();
            panic!("step {}: {shown:?} emitted {recs:?}: {e}", self.steps);
        }
        self.replica.replay(&new);
        if let Some(d) = diff(&dump(&self.srv), &dump(&self.replica.srv)) {
            let recs: Vec<String> = new.iter().map(|e| show(&e.argv)).collect();
            let (i, db) = (self.steps, w.client.db);
            panic!("step {i}: {shown:?} (db {db}) emitted {recs:?}: {d}");
        }
        self.steps += 1;
        if self.steps.is_multiple_of(150) {
            self.replica.reshape();
        }
        if self.steps.is_multiple_of(400) {
            // Let the short TTLs run out so lazy expiry happens mid-run.
            std::thread::sleep(Duration::from_millis(60));
        }
        new.len()
    }
}

#[test]
fn replay_reproduces_single_threaded_workload() {
    let (srv, rec) = recorded_server();
    small_encodings(&srv);
    let seed = env_or("REPLAY_SEED", 42);
    let mut w = Worker::new(&srv, seed, Arc::new(payloads()), migrate_target());
    let mut ls = Lockstep {
        srv: srv.clone(),
        rec,
        replica: Replica::with_small_encodings(),
        replayed: 0,
        steps: 0,
    };
    // Write command -> times it was drawn, times it emitted records.
    let mut counts: BTreeMap<String, (usize, usize)> =
        w.cmds.iter().map(|c| (c.0.clone(), (0, 0))).collect();
    for _ in 0..env_or("REPLAY_OPS", 5000) {
        let (lines, name, ok) = w.step();
        let n = ls.check(&w, &lines, ok);
        if let Some(c) = name.and_then(|name| counts.get_mut(&name)) {
            c.0 += 1;
            c.1 += (n > 0) as usize;
        }
    }
    let total: usize = dump(&srv).iter().map(|m| m.len()).sum();
    assert!(total > 0, "workload left no keys to compare");
    // Every write command must have written: those the draw left out
    // (FLUSHALL is rare) are run until they do, between random steps.
    for (name, c) in counts.iter().filter(|c| c.1 .1 == 0) {
        let mut tries = 0;
        loop {
            let line = template(name, &mut w.gen).unwrap();
            // XDEL writes only where its stream holds an ID it names, and
            // the draws may have moved every stream past those (a stream's
            // IDs only grow): its stream starts again with the first one.
            if name == "xdel" {
                let key = String::from_utf8_lossy(&line[1]).into_owned();
                let id = String::from_utf8_lossy(&line[2]).into_owned();
                let prep: Vec<Line> = vec![
                    vec![b"DEL".to_vec(), key.clone().into_bytes()],
                    ["XADD", &key, &id, "f", "v"]
                        .map(|a| a.as_bytes().to_vec())
                        .to_vec(),
                ];
                // One step each: two records are not one unit.
                for l in &prep {
                    let ok = w.run(std::slice::from_ref(l));
                    ls.check(&w, std::slice::from_ref(l), ok);
                }
            }
            let ok = w.run(std::slice::from_ref(&line));
            if ls.check(&w, std::slice::from_ref(&line), ok) > 0 {
                break;
            }
            tries += 1;
            assert!(
                tries < 300,
                "{name} never emitted a record (drawn {} times, then {tries} more): \
                 does its template ever write?",
                c.0
            );
            let (lines, _, ok) = w.step();
            ls.check(&w, &lines, ok);
        }
    }
}

#[test]
fn replay_reproduces_concurrent_workload() {
    let (srv, rec) = recorded_server();
    {
        // Deletions propagate as UNLINK with the lazyfree options.
        let mut clock = Hlc::new(srv.node_id);
        let stats = srv.new_worker_stats();
        let mut client = ClientState::new(1);
        for opt in [
            "lazyfree-lazy-user-del",
            "lazyfree-lazy-expire",
            "lazyfree-lazy-eviction",
        ] {
            let argv: [&[u8]; 4] = [b"CONFIG", b"SET", opt.as_bytes(), b"yes"];
            run_local(&srv, &mut clock, &stats, &mut client, &argv).unwrap();
        }
    }
    let payloads = Arc::new(payloads());
    let port = migrate_target();
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let (srv, payloads) = (srv.clone(), payloads.clone());
            let seed = env_or("REPLAY_SEED", 1000) + t;
            std::thread::spawn(move || workload(&srv, seed, 2500, payloads, port))
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let expirer = {
        let (srv, done) = (srv.clone(), done.clone());
        std::thread::spawn(move || active_expiry(&srv, &done))
    };
    let evictor = {
        let (srv, done) = (srv.clone(), done.clone());
        std::thread::spawn(move || eviction(&srv, &done))
    };
    for t in threads {
        t.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let (expired, evicted) = (expirer.join().unwrap(), evictor.join().unwrap());
    assert!(expired > 0, "active expiry removed nothing");
    assert!(evicted > 0, "eviction removed nothing");
    replay_and_compare(&srv, &rec);
}
