//! A replica of a diskless master (`repl-diskless-sync yes`) resyncs over
//! and over while writers fill the master with lists, sets, sorted sets,
//! hashes and strings (binary ones too), as Redis's
//! integration/replication-psync does: the link is cut (from the master's
//! side or the replica's) and each time the replica must be `connected`
//! again, and online on the master, within a few seconds, for every
//! `repl-diskless-load` mode. Then both hold the same data.
//!
//! The hang this caught: a value whose LZF form fills the room the
//! compressor is given made the snapshot's serializer panic, and the master
//! never took another snapshot (`a_value_at_lzf_s_limit_...`).
//!
//! `LATTICE_RESYNC_ITERS` sets the number of cuts per mode (default 30).

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one resync may take: repl-timeout's default. A resync takes
/// well under a second here, but the replica fsyncs the payload's temp
/// file, and with another process flushing gigabytes to the same disk that
/// fsync alone took seconds; a sync that never ends (the hang this file
/// is about) fails all the same.
const RESYNC_DEADLINE: Duration = Duration::from_secs(60);

/// A tiny xorshift generator (each writer its own, seeded differently).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn key(&mut self) -> String {
        format!("key:{}", self.below(2000))
    }
    /// As Redis's randomValue: small or big integers, or up to 256 bytes
    /// of letters, of 5 digits (compressible), or of any byte.
    fn value(&mut self) -> Vec<u8> {
        let len = self.below(257) as usize;
        match self.below(6) {
            0 => (self.below(2000) as i64 - 1000).to_string().into_bytes(),
            1 => (self.next() as i64 >> 20).to_string().into_bytes(),
            2 => (0..len).map(|_| b'0' + self.below(75) as u8).collect(),
            3 => (0..len).map(|_| b'0' + self.below(5) as u8).collect(),
            _ => (0..len).map(|_| self.next() as u8).collect(),
        }
    }
}

/// One writer: random commands on random keys of all types in `db`, as
/// Redis's createComplexDataset, until `stop`.
fn writer(port: u16, db: u8, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let url = format!("redis://127.0.0.1:{port}/{db}");
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (db as u64) << 32);
        while !stop.load(Relaxed) {
            let (k, k2) = (rng.key().into_bytes(), rng.key().into_bytes());
            let (v, f) = (rng.value(), rng.value());
            let score = (rng.below(2000) as f64 / 7.0).to_string().into_bytes();
            let argv: Vec<&[u8]> = match rng.below(14) {
                0 => vec![b"SET", &k, &v],
                1 => vec![b"LPUSH", &k, &v],
                2 => vec![b"RPUSH", &k, &v],
                3 => vec![b"LREM", &k, b"0", &v],
                4 => vec![b"LPOP", &k],
                5 => vec![b"SADD", &k, &v],
                6 => vec![b"SREM", &k, &v],
                7 => vec![b"SUNIONSTORE", &k2, &k, &k2],
                8 => vec![b"ZADD", &k, &score, &v],
                9 => vec![b"ZUNIONSTORE", &k2, b"2", &k, &k2],
                10 => vec![b"HSET", &k, &f, &v],
                11 => vec![b"HDEL", &k, &f],
                12 => vec![b"DEL", &k],
                _ => vec![b"RANDOMKEY"],
            };
            let mut q = redis::cmd(std::str::from_utf8(argv[0]).unwrap());
            for a in &argv[1..] {
                q.arg(*a);
            }
            // WRONGTYPE and the like are part of the mix.
            let _ = q.query::<redis::Value>(&mut c);
        }
    })
}

/// The master's count of syncs served (full and partial).
fn syncs(m: &mut redis::Connection) -> u64 {
    info_field::<u64>(m, "sync_full") + info_field::<u64>(m, "sync_partial_ok")
}

/// The replica is connected and the master lists it online.
fn linked(m: &mut redis::Connection, r: &mut redis::Connection) -> bool {
    let role: Vec<redis::Value> = cmd(r, &["ROLE"]);
    let connected = matches!(&role[3], redis::Value::BulkString(s) if s == b"connected");
    let info: String = cmd(m, &["INFO", "replication"]);
    connected && info.contains("slave0:") && info.contains("state=online")
}

type Conn = redis::Connection;

/// Waits until `f(master, replica)`, or panics with the replica's
/// replication INFO.
fn within(what: &str, m: &mut Conn, r: &mut Conn, f: impl Fn(&mut Conn, &mut Conn) -> bool) {
    let start = Instant::now();
    while start.elapsed() < RESYNC_DEADLINE {
        if f(m, r) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let info: String = cmd(r, &["INFO", "replication"]);
    panic!("{what}: not within {RESYNC_DEADLINE:?}; replica's INFO:\n{info}");
}

/// Cuts the link `iters` times under three writers; each time the replica
/// must resync (a full sync: the backlog is tiny) and be online again.
fn resyncs_under_load(load: &str) {
    let iters: usize = std::env::var("LATTICE_RESYNC_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let master = Server::start(&["--repl-diskless-sync", "yes", "--repl-backlog-size", "100"]);
    let replica = Server::start(&["--repl-diskless-load", load]);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = [9, 11, 12]
        .into_iter()
        .map(|db| writer(master.port, db, stop.clone()))
        .collect();
    let port = master.port.to_string();
    let _: () = cmd(&mut r, &["REPLICAOF", "127.0.0.1", &port]);
    within("first sync", &mut m, &mut r, linked);
    for i in 0..iters {
        let before = syncs(&mut m);
        // Alternately from either end, as the Tcl tests do both.
        if i % 2 == 0 {
            let _: i64 = cmd(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
        } else {
            let _: i64 = cmd(&mut r, &["CLIENT", "KILL", "TYPE", "master"]);
        }
        within(&format!("resync {i}"), &mut m, &mut r, |m, r| {
            syncs(m) > before && linked(m, r)
        });
    }
    stop.store(true, Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    eventually("same data", || in_sync(&mut m, &mut r));
}

#[test]
fn disk_load_resyncs_from_a_diskless_master_under_writes() {
    resyncs_under_load("disabled");
}

#[test]
fn swapdb_resyncs_from_a_diskless_master_under_writes() {
    resyncs_under_load("swapdb");
}

#[test]
fn on_empty_db_resyncs_from_a_diskless_master_under_writes() {
    resyncs_under_load("on-empty-db");
}

/// The 65,599th of a stream of near-incompressible strings (random bytes
/// with a 4-byte repeat or two): its LZF output reaches the room given to
/// the compressor just as a literal run ends, and a match follows. The
/// `lzf` crate's compressor indexed past its buffer there.
fn lzf_edge_value() -> Vec<u8> {
    let mut x: u64 = 88172645463325252;
    let mut r = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut s = Vec::new();
    for _ in 0..65_599 {
        let n = 21 + (r() % 300) as usize;
        s = (0..n).map(|_| r() as u8).collect();
        for _ in 0..(r() % 3) {
            let (at, from) = ((r() as usize) % (n - 8), (r() as usize) % (n - 8));
            s.copy_within(from..from + 4, at);
        }
    }
    s
}

/// A master holding that value serves full syncs, diskless or from disk,
/// one after the other (it used to serve none: the snapshot's serializer
/// panicked, and the snapshot stayed "in progress" for good).
#[test]
fn a_value_at_lzf_s_limit_does_not_stop_full_syncs() {
    for diskless in ["yes", "no"] {
        let master = Server::start(&["--repl-diskless-sync", diskless]);
        let mut m = master.conn();
        let edge = lzf_edge_value();
        let _: () = redis::cmd("SET")
            .arg("edge")
            .arg(&edge)
            .query(&mut m)
            .unwrap();
        let _: i64 = redis::cmd("RPUSH")
            .arg("l")
            .arg(&edge)
            .query(&mut m)
            .unwrap();
        for _ in 0..2 {
            let replica = Server::start(&[]);
            let mut r = replica.conn();
            let _: () = cmd(
                &mut r,
                &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
            );
            within("sync", &mut m, &mut r, linked);
            let got: Vec<u8> = redis::cmd("GET").arg("edge").query(&mut r).unwrap();
            assert_eq!(got, edge);
        }
    }
}
