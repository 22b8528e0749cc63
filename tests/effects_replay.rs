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

use lattice::commands::gone::{actively_expired, Gone};
use lattice::commands::{replay, run_local};
use lattice::config::Config;
use lattice::core::client::ClientState;
use lattice::core::stats::WorkerStats;
use lattice::effects::{Effect, Recorder};
use lattice::keyspace::expire::active_expire_cycle;
use lattice::keyspace::hlc::{unix_ms, Hlc};
use lattice::keyspace::{Value, SHARDS};
use lattice::persistence::rdb::encode::dump_payload;
use lattice::server::Server;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// The counting allocator, so that `maxmemory` sees memory and evicts (the
// eviction run of the concurrent workload).
#[global_allocator]
static ALLOC: lattice::alloc::Counting<std::alloc::System> =
    lattice::alloc::Counting(std::alloc::System);

/// Keys per type pool ("s0".."s2" strings, "l.." lists, "h.." hashes,
/// "t.." sets, "z.." sorted sets); a command mostly draws from its type's
/// pool, sometimes from another one (WRONGTYPE and conversions).
const KEYS_PER_TYPE: usize = 3;
const POOLS: [char; 5] = ['s', 'l', 'h', 't', 'z'];
const DBS: usize = 4;

/// Write commands the generator leaves out, each with why. Keep it short:
/// a data write belongs in [`template`].
const EXCLUDED: &[(&str, &str)] = &[
    (
        "function|delete",
        "FUNCTION libraries are not keyspace data (tests/scripting.rs)",
    ),
    (
        "function|flush",
        "FUNCTION libraries are not keyspace data (tests/scripting.rs)",
    ),
    (
        "function|load",
        "FUNCTION libraries are not keyspace data (tests/scripting.rs)",
    ),
    (
        "function|restore",
        "FUNCTION libraries are not keyspace data (tests/scripting.rs)",
    ),
];

/// One generated command line.
type Line = Vec<Vec<u8>>;

/// A line from displayable parts.
macro_rules! args {
    ($($x:expr),* $(,)?) => { vec![$($x.to_string().into_bytes()),*] };
}

/// What the templates draw from.
struct Gen {
    rng: StdRng,
    /// DUMP payloads of values of every type and encoding, for RESTORE,
    /// with the pool of their type.
    payloads: Arc<Vec<(char, Vec<u8>)>>,
    /// Port of the stub MIGRATE target.
    migrate_port: u16,
}

impl Gen {
    fn n(&mut self, r: std::ops::Range<i64>) -> i64 {
        self.rng.gen_range(r)
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.rng.gen_range(0..xs.len())]
    }

    /// A key of pool `t`, or now and then of any pool.
    fn key(&mut self, t: char) -> String {
        let t = if self.chance(0.05) {
            self.pick(&POOLS)
        } else {
            t
        };
        format!("{t}{}", self.rng.gen_range(0..KEYS_PER_TYPE))
    }

    fn keys(&mut self, t: char, max: i64) -> Vec<String> {
        let n = self.n(1..max + 1);
        (0..n).map(|_| self.key(t)).collect()
    }

    /// A collection member / field / list element.
    fn member(&mut self) -> String {
        if self.chance(0.2) {
            self.n(0..4).to_string()
        } else {
            format!("m{}", self.rng.gen_range(0..6))
        }
    }

    fn members(&mut self, max: i64) -> Vec<String> {
        let n = self.n(1..max + 1);
        (0..n).map(|_| self.member()).collect()
    }

    fn value(&mut self) -> String {
        match self.rng.gen_range(0..4) {
            0 => self.n(-5..100).to_string(),
            1 => format!("v{}", self.rng.gen_range(0..1000)),
            2 => "1.5".into(),
            _ => "x".repeat(self.rng.gen_range(0..60)),
        }
    }

    fn db(&mut self) -> String {
        self.rng.gen_range(0..DBS).to_string()
    }

    fn score(&mut self) -> String {
        match self.rng.gen_range(0..10) {
            0 => "1.5".into(),
            1 => "-inf".into(),
            2 => "+inf".into(),
            3 => "-0.25".into(),
            _ => self.n(-5..20).to_string(),
        }
    }

    /// A TTL argument for EXPIRE-like commands in `unit` ("s", "ms",
    /// "unix s", "unix ms"), mostly short, sometimes in the past.
    fn ttl(&mut self, unit: &str) -> String {
        let now = unix_ms() as i64;
        match unit {
            "s" => self.n(-2..100),
            "ms" => self.n(-50..300),
            "unix s" => now / 1000 + self.n(-5..100),
            _ => now + self.n(-100..90_000),
        }
        .to_string()
    }

    fn end(&mut self) -> &'static str {
        self.pick(&["LEFT", "RIGHT"])
    }
}

/// A random line for the write command `name` (a table name, "parent|sub"
/// for a subcommand), covering its option classes; `None` if there is no
/// template.
fn template(name: &str, g: &mut Gen) -> Option<Line> {
    let now = unix_ms() as i64;
    let l = match name {
        // --- strings
        "set" => {
            let mut l = args!["SET", g.key('s'), g.value()];
            match g.n(0..10) {
                0 => l.extend(args!["EX", g.n(1..100)]),
                1 => l.extend(args!["PX", g.n(1..150)]),
                2 => l.extend(args!["EXAT", now / 1000 + g.n(1..100)]),
                3 => l.extend(args!["PXAT", now + g.n(1..100_000)]),
                4 => l.extend(args!["PXAT", now - g.n(1..1000)]),
                5 => l.extend(args!["KEEPTTL"]),
                _ => {}
            }
            if g.chance(0.3) {
                l.extend(args![g.pick(&["NX", "XX"])]);
            }
            if g.chance(0.2) {
                l.extend(args!["GET"]);
            }
            l
        }
        "setnx" => args!["SETNX", g.key('s'), g.value()],
        "setex" => args!["SETEX", g.key('s'), g.n(1..100), g.value()],
        "psetex" => args!["PSETEX", g.key('s'), g.n(1..300), g.value()],
        "mset" | "msetnx" => {
            let mut l = args![name.to_uppercase()];
            for k in g.keys('s', 3) {
                l.extend(args![k, g.value()]);
            }
            l
        }
        "getset" => args!["GETSET", g.key('s'), g.value()],
        "getdel" => args!["GETDEL", g.key('s')],
        "getex" => {
            let mut l = args!["GETEX", g.key('s')];
            match g.n(0..7) {
                0 => l.extend(args!["EX", g.n(1..100)]),
                1 => l.extend(args!["PX", g.n(1..300)]),
                2 => l.extend(args!["EXAT", now / 1000 + g.n(-2..100)]),
                3 => l.extend(args!["PXAT", now + g.n(-100..90_000)]),
                4 => l.extend(args!["PERSIST"]),
                _ => {}
            }
            l
        }
        "append" => args!["APPEND", g.key('s'), g.value()],
        "incr" | "decr" => args![name.to_uppercase(), g.key('s')],
        "incrby" | "decrby" => args![name.to_uppercase(), g.key('s'), g.n(-10..10)],
        "incrbyfloat" => {
            let by = g.pick(&["1.5", "-0.25", "3e2", "10", "0.1"]);
            args!["INCRBYFLOAT", g.key('s'), by]
        }
        "setrange" => {
            let v = if g.chance(0.1) {
                String::new()
            } else {
                g.value()
            };
            args!["SETRANGE", g.key('s'), g.n(0..20), v]
        }
        // --- bitmaps
        "setbit" => args!["SETBIT", g.key('s'), g.n(0..100), g.n(0..2)],
        "bitop" => {
            let op = g.pick(&["AND", "OR", "XOR", "NOT"]);
            let mut l = args!["BITOP", op, g.key('s')];
            let n = if op == "NOT" { 1 } else { 3 };
            l.extend(g.keys('s', n).into_iter().map(String::into_bytes));
            l
        }
        "bitfield" => {
            let mut l = args!["BITFIELD", g.key('s')];
            for _ in 0..g.n(1..4) {
                let ty = g.pick(&["i5", "u8", "i16", "u1", "u63", "i64"]);
                let off = if g.chance(0.2) {
                    format!("#{}", g.n(0..4))
                } else {
                    g.n(0..64).to_string()
                };
                match g.n(0..4) {
                    0 => l.extend(args!["GET", ty, off]),
                    1 => l.extend(args!["SET", ty, off, g.n(-200..200)]),
                    2 => l.extend(args!["INCRBY", ty, off, g.n(-200..200)]),
                    _ => l.extend(args!["OVERFLOW", g.pick(&["WRAP", "SAT", "FAIL"])]),
                }
            }
            l
        }
        // --- keyspace
        "del" | "unlink" => {
            let mut l = args![name.to_uppercase()];
            let t = g.pick(&POOLS);
            l.extend(g.keys(t, 3).into_iter().map(String::into_bytes));
            l
        }
        "rename" | "renamenx" => {
            let t = g.pick(&POOLS);
            args![name.to_uppercase(), g.key(t), g.key(t)]
        }
        "move" => {
            let t = g.pick(&POOLS);
            args!["MOVE", g.key(t), g.db()]
        }
        "copy" => {
            let t = g.pick(&POOLS);
            let mut l = args!["COPY", g.key(t), g.key(t)];
            if g.chance(0.5) {
                l.extend(args!["DB", g.db()]);
            }
            if g.chance(0.5) {
                l.extend(args!["REPLACE"]);
            }
            l
        }
        "swapdb" => args!["SWAPDB", g.db(), g.db()],
        "flushdb" | "flushall" => {
            let mut l = args![name.to_uppercase()];
            if g.chance(0.5) {
                l.extend(args![g.pick(&["ASYNC", "SYNC"])]);
            }
            l
        }
        // --- expiry
        "expire" | "pexpire" | "expireat" | "pexpireat" => {
            let unit = match name {
                "expire" => "s",
                "pexpire" => "ms",
                "expireat" => "unix s",
                _ => "unix ms",
            };
            let t = g.pick(&POOLS);
            let mut l = args![name.to_uppercase(), g.key(t), g.ttl(unit)];
            if g.chance(0.4) {
                l.extend(args![g.pick(&["NX", "XX", "GT", "LT"])]);
            }
            l
        }
        "persist" => {
            let t = g.pick(&POOLS);
            args!["PERSIST", g.key(t)]
        }
        // --- lists
        "lpush" | "rpush" | "lpushx" | "rpushx" => {
            let mut l = args![name.to_uppercase(), g.key('l')];
            l.extend(g.members(4).into_iter().map(String::into_bytes));
            l
        }
        "lpop" | "rpop" => {
            let mut l = args![name.to_uppercase(), g.key('l')];
            if g.chance(0.4) {
                l.extend(args![g.n(0..5)]);
            }
            l
        }
        "lset" => args!["LSET", g.key('l'), g.n(-3..3), g.member()],
        "linsert" => {
            let side = g.pick(&["BEFORE", "AFTER"]);
            args!["LINSERT", g.key('l'), side, g.member(), g.member()]
        }
        "lrem" => args!["LREM", g.key('l'), g.n(-2..3), g.member()],
        "ltrim" => args!["LTRIM", g.key('l'), g.n(-4..3), g.n(-3..6)],
        "rpoplpush" => args!["RPOPLPUSH", g.key('l'), g.key('l')],
        "lmove" => args!["LMOVE", g.key('l'), g.key('l'), g.end(), g.end()],
        "blmove" => args!["BLMOVE", g.key('l'), g.key('l'), g.end(), g.end(), 0],
        "brpoplpush" => args!["BRPOPLPUSH", g.key('l'), g.key('l'), 0],
        "blpop" | "brpop" => {
            let mut l = args![name.to_uppercase()];
            l.extend(g.keys('l', 3).into_iter().map(String::into_bytes));
            l.extend(args![g.pick(&["0", "0.01"])]);
            l
        }
        "lmpop" | "blmpop" | "zmpop" | "bzmpop" => {
            let (t, ends) = if name.contains('z') {
                ('z', ["MIN", "MAX"])
            } else {
                ('l', ["LEFT", "RIGHT"])
            };
            let mut l = args![name.to_uppercase()];
            if name.starts_with('b') {
                l.extend(args!["0"]);
            }
            let keys = g.keys(t, 3);
            l.extend(args![keys.len()]);
            l.extend(keys.into_iter().map(String::into_bytes));
            l.extend(args![g.pick(&ends)]);
            if g.chance(0.5) {
                l.extend(args!["COUNT", g.n(1..5)]);
            }
            l
        }
        // --- hashes
        "hset" | "hmset" => {
            let mut l = args![name.to_uppercase(), g.key('h')];
            for _ in 0..g.n(1..4) {
                l.extend(args![g.member(), g.value()]);
            }
            l
        }
        "hsetnx" => args!["HSETNX", g.key('h'), g.member(), g.value()],
        "hdel" => {
            let mut l = args!["HDEL", g.key('h')];
            l.extend(g.members(3).into_iter().map(String::into_bytes));
            l
        }
        "hincrby" => args!["HINCRBY", g.key('h'), g.member(), g.n(-10..10)],
        "hincrbyfloat" => {
            let by = g.pick(&["1.5", "-0.25", "3e2", "10", "0.1"]);
            args!["HINCRBYFLOAT", g.key('h'), g.member(), by]
        }
        // --- sets
        "sadd" | "srem" => {
            let mut l = args![name.to_uppercase(), g.key('t')];
            l.extend(g.members(4).into_iter().map(String::into_bytes));
            l
        }
        "spop" => {
            let mut l = args!["SPOP", g.key('t')];
            if g.chance(0.6) {
                l.extend(args![g.n(0..8)]);
            }
            l
        }
        "smove" => args!["SMOVE", g.key('t'), g.key('t'), g.member()],
        "sinterstore" | "sunionstore" | "sdiffstore" => {
            let mut l = args![name.to_uppercase(), g.key('t')];
            l.extend(g.keys('t', 3).into_iter().map(String::into_bytes));
            l
        }
        // --- sorted sets
        "zadd" => {
            let mut l = args!["ZADD", g.key('z')];
            let flags: &[&str] = g.pick(&[
                &[][..],
                &["NX"],
                &["XX"],
                &["GT"],
                &["LT"],
                &["XX", "GT"],
                &["LT", "CH"],
                &["CH"],
                &["NX", "CH"],
            ]);
            l.extend(flags.iter().map(|f| f.as_bytes().to_vec()));
            let incr = g.chance(0.2);
            if incr {
                l.extend(args!["INCR"]);
            }
            for _ in 0..if incr { 1 } else { g.n(1..6) } {
                l.extend(args![g.score(), g.member()]);
            }
            l
        }
        "zincrby" => args!["ZINCRBY", g.key('z'), g.score(), g.member()],
        "zrangestore" => {
            let mut l = args!["ZRANGESTORE", g.key('z'), g.key('z')];
            let rev = g.chance(0.3);
            let (mut lo, mut hi, by) = match g.n(0..3) {
                0 => (g.n(-3..3).to_string(), g.n(-2..5).to_string(), None),
                1 => {
                    let lo = g.pick(&["-inf", "(1", "0", "3"]).to_string();
                    let hi = g.pick(&["+inf", "(10", "5", "2"]).to_string();
                    (lo, hi, Some("BYSCORE"))
                }
                _ => {
                    let lo = g.pick(&["-", "[m1", "(m2"]).to_string();
                    let hi = g.pick(&["+", "[m4", "(m3"]).to_string();
                    (lo, hi, Some("BYLEX"))
                }
            };
            if rev && by.is_some() {
                std::mem::swap(&mut lo, &mut hi);
            }
            l.extend(args![lo, hi]);
            if let Some(by) = by {
                l.extend(args![by]);
            }
            if rev {
                l.extend(args!["REV"]);
            }
            if by.is_some() && g.chance(0.4) {
                l.extend(args!["LIMIT", g.n(0..3), g.n(-1..4)]);
            }
            l
        }
        "zrem" => {
            let mut l = args!["ZREM", g.key('z')];
            l.extend(g.members(3).into_iter().map(String::into_bytes));
            l
        }
        "zremrangebyrank" => args!["ZREMRANGEBYRANK", g.key('z'), g.n(-4..3), g.n(-3..4)],
        "zremrangebyscore" => {
            let lo = g.pick(&["-inf", "0", "(2", "5"]);
            let hi = g.pick(&["+inf", "(10", "3", "1.5"]);
            args!["ZREMRANGEBYSCORE", g.key('z'), lo, hi]
        }
        "zremrangebylex" => {
            let lo = g.pick(&["-", "[m2", "(m1", "[m0"]);
            let hi = g.pick(&["+", "[m3", "(m5", "(m4"]);
            args!["ZREMRANGEBYLEX", g.key('z'), lo, hi]
        }
        "zpopmin" | "zpopmax" => {
            let mut l = args![name.to_uppercase(), g.key('z')];
            if g.chance(0.5) {
                l.extend(args![g.n(0..5)]);
            }
            l
        }
        "bzpopmin" | "bzpopmax" => {
            let mut l = args![name.to_uppercase()];
            l.extend(g.keys('z', 3).into_iter().map(String::into_bytes));
            l.extend(args!["0"]);
            l
        }
        "zunionstore" | "zinterstore" | "zdiffstore" => {
            let mut l = args![name.to_uppercase(), g.key('z')];
            // Sets are valid inputs (score 1).
            let keys: Vec<String> = (0..g.n(1..4))
                .map(|_| {
                    let t = if g.chance(0.25) { 't' } else { 'z' };
                    g.key(t)
                })
                .collect();
            l.extend(args![keys.len()]);
            let n = keys.len();
            l.extend(keys.into_iter().map(String::into_bytes));
            if name != "zdiffstore" {
                if g.chance(0.4) {
                    l.extend(args!["WEIGHTS"]);
                    for _ in 0..n {
                        l.extend(args![g.pick(&["1", "2", "-1", "0.5"])]);
                    }
                }
                if g.chance(0.4) {
                    l.extend(args!["AGGREGATE", g.pick(&["SUM", "MIN", "MAX"])]);
                }
            }
            l
        }
        // --- SORT
        "sort" => {
            let t = g.pick(&['l', 't', 'z']);
            let mut l = args!["SORT", g.key(t)];
            if g.chance(0.3) {
                l.extend(args!["BY", g.pick(&["nosort", "s*", "h*->m1"])]);
            }
            if g.chance(0.3) {
                l.extend(args!["LIMIT", g.n(0..3), g.n(-1..5)]);
            }
            for _ in 0..g.n(0..3) {
                l.extend(args!["GET", g.pick(&["#", "s*", "h*->m2"])]);
            }
            if g.chance(0.4) {
                l.extend(args![g.pick(&["ASC", "DESC"])]);
            }
            if g.chance(0.7) {
                l.extend(args!["ALPHA"]);
            }
            if g.chance(0.7) {
                l.extend(args!["STORE", g.key('l')]);
            }
            l
        }
        // --- DUMP/RESTORE, MIGRATE
        "restore" => {
            let (t, payload) = g.payloads[g.rng.gen_range(0..g.payloads.len())].clone();
            let key = g.key(t);
            let abs = g.chance(0.3);
            let ttl = match (abs, g.n(0..3)) {
                (false, 0) => 0,
                (false, _) => g.n(1..500),
                (true, _) => now + g.n(-100..90_000),
            };
            let mut l = args!["RESTORE", key, ttl];
            l.push(payload);
            if g.chance(0.7) {
                l.extend(args!["REPLACE"]);
            }
            if abs {
                l.extend(args!["ABSTTL"]);
            }
            match g.n(0..4) {
                0 => l.extend(args!["IDLETIME", g.n(0..1000)]),
                1 => l.extend(args!["FREQ", g.n(0..256)]),
                _ => {}
            }
            l
        }
        "migrate" => {
            let t = g.pick(&POOLS);
            let many = g.chance(0.3);
            let key = if many { String::new() } else { g.key(t) };
            let mut l = args!["MIGRATE", "127.0.0.1", g.migrate_port, key, 0, 1000];
            if g.chance(0.3) {
                l.extend(args!["COPY"]);
            }
            if g.chance(0.5) {
                l.extend(args!["REPLACE"]);
            }
            match g.n(0..6) {
                0 => l.extend(args!["AUTH", "pw"]),
                1 => l.extend(args!["AUTH2", "user", "pw"]),
                _ => {}
            }
            if many {
                l.extend(args!["KEYS"]);
                l.extend(g.keys(t, 3).into_iter().map(String::into_bytes));
            }
            l
        }
        _ => return None,
    };
    Some(l)
}

/// How often a write command is drawn, against 1 for most: the ones that
/// fill collections more (so that the many that empty them find some), the
/// ones that wipe or move whole databases sparingly, MIGRATE (a connection
/// each) less often.
fn weight(name: &str) -> f64 {
    match name {
        "lpush" | "rpush" | "sadd" | "zadd" | "hset" => 5.0,
        "flushall" => 0.05,
        "flushdb" => 0.15,
        "swapdb" => 0.3,
        "migrate" => 0.5,
        _ => 1.0,
    }
}

/// Reads mixed into the workload: they expire keys lazily (MGET over
/// several, SCAN and RANDOMKEY each key under its own view).
fn read_line(g: &mut Gen) -> Line {
    let t = g.pick(&POOLS);
    match g.n(0..12) {
        0 => args!["GET", g.key('s')],
        1 => args!["EXISTS", g.key(t), g.key(t)],
        2 => args!["PTTL", g.key(t)],
        3 => args!["LRANGE", g.key('l'), 0, -1],
        4 => args!["SMEMBERS", g.key('t')],
        5 => args!["ZRANGE", g.key('z'), 0, -1, "WITHSCORES"],
        6 => args!["HGETALL", g.key('h')],
        7 => args!["MGET", g.key(t), g.key(t), g.key(t)],
        8 => args!["TYPE", g.key(t)],
        9 => args!["SCAN", 0, "COUNT", 1000],
        10 => args!["RANDOMKEY"],
        _ => args!["SRANDMEMBER", g.key('t'), g.n(-3..4)],
    }
}

/// Names (as in the table, "parent|sub" for subcommands) of every command
/// flagged `write`.
fn write_commands(srv: &Server) -> Vec<String> {
    let t = &srv.commands;
    let mut v: Vec<String> = (0..t.all.len())
        .filter(|&id| t.get(id).is_write())
        .map(|id| t.full_names[id].clone())
        .collect();
    v.sort();
    v
}

/// The write commands the workload draws from, with their weights.
fn drawable(srv: &Server) -> Vec<(String, f64)> {
    let excluded: BTreeSet<&str> = EXCLUDED.iter().map(|e| e.0).collect();
    write_commands(srv)
        .into_iter()
        .filter(|n| !excluded.contains(n.as_str()))
        .map(|n| {
            let w = weight(&n);
            (n, w)
        })
        .collect()
}

/// One workload step: the lines to run (several for a MULTI block) and the
/// write command they were drawn for, if any.
fn step(g: &mut Gen, cmds: &[(String, f64)], total: f64) -> (Vec<Line>, Option<String>) {
    let draw_write = |g: &mut Gen| {
        let mut x = g.rng.gen_range(0.0..total);
        for (name, w) in cmds {
            if x < *w {
                let l = template(name, g).expect("every drawable command has a template");
                return (l, name.clone());
            }
            x -= w;
        }
        let (name, _) = cmds.last().unwrap();
        (template(name, g).unwrap(), name.clone())
    };
    match g.n(0..100) {
        0..=74 => {
            let (l, name) = draw_write(g);
            (vec![l], Some(name))
        }
        75..=87 => (vec![read_line(g)], None),
        88..=91 => (vec![args!["SELECT", g.db()]], None),
        // Keys outside the pools that nothing touches again: the active
        // expiry cycle's.
        92..=94 => {
            let (k, ttl) = (g.n(0..300), g.n(1..100));
            (vec![args!["SET", format!("x{k}"), "v", "PX", ttl]], None)
        }
        _ => {
            let mut v = vec![args!["MULTI"]];
            for _ in 0..g.n(1..4) {
                if g.chance(0.15) {
                    v.push(args!["SELECT", g.db()]);
                }
                v.push(draw_write(g).0);
            }
            v.push(args!["EXEC"]);
            (v, None)
        }
    }
}

/// Errors a generated line may meet (the data decides); any other (syntax,
/// arity, unknown command) means a template is wrong.
fn expected_error(err: &str) -> bool {
    !(err.contains("syntax error")
        || err.contains("wrong number of arguments")
        || err.contains("unknown command")
        || err.contains("unknown subcommand"))
}

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

/// DUMP payloads of values of each type, small (listpack, intset) and big,
/// each with the pool of its type.
fn payloads() -> Vec<(char, Vec<u8>)> {
    let srv = Server::new(Config::default());
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let mut client = ClientState::new(1);
    let mut run = |argv: Vec<String>| {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        run_local(&srv, &mut clock, &stats, &mut client, &argv).unwrap()
    };
    let mut writes: Vec<(char, Vec<String>)> = vec![
        ('s', vec!["SET".into(), "12345".into()]),
        ('s', vec!["SET".into(), "v".repeat(40)]),
    ];
    for n in [3, 200] {
        let many = |f: &dyn Fn(usize) -> Vec<String>| (0..n).flat_map(f).collect::<Vec<_>>();
        let m = |j| format!("m{}", j % 6 + j / 6 * 100);
        writes.extend([
            ('l', [vec!["RPUSH".into()], many(&|j| vec![m(j)])].concat()),
            (
                'h',
                [vec!["HSET".into()], many(&|j| vec![m(j), j.to_string()])].concat(),
            ),
            ('t', [vec!["SADD".into()], many(&|j| vec![m(j)])].concat()),
            (
                't',
                [vec!["SADD".into()], many(&|j| vec![j.to_string()])].concat(),
            ),
            (
                'z',
                [vec!["ZADD".into()], many(&|j| vec![j.to_string(), m(j)])].concat(),
            ),
        ]);
    }
    writes
        .into_iter()
        .enumerate()
        .map(|(i, (t, mut w))| {
            let key = format!("p{i}");
            w.insert(1, key.clone());
            run(w);
            let reply = run(vec!["DUMP".into(), key]);
            // "$<len>\r\n<payload>\r\n"
            let start = reply.iter().position(|&b| b == b'\n').unwrap() + 1;
            (t, reply[start..reply.len() - 2].to_vec())
        })
        .collect()
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

fn show(line: &[Vec<u8>]) -> String {
    let parts: Vec<String> = line
        .iter()
        .map(|a| {
            if a.len() > 40 {
                format!("<{} bytes>", a.len())
            } else {
                String::from_utf8_lossy(a).into_owned()
            }
        })
        .collect();
    parts.join(" ")
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
        let cmds = drawable(srv);
        let total = cmds.iter().map(|c| c.1).sum();
        Worker {
            gen: Gen {
                rng: StdRng::seed_from_u64(seed),
                payloads,
                migrate_port: port,
            },
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
        let st = active_expire_cycle(&srv.keyspace, 0, 1, unix_ms(), budget, |db, e| {
            actively_expired(&gone, &mut clock, db, e)
        });
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
    lattice::alloc::mark_installed();
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
        let used = lattice::alloc::allocated_bytes().unwrap();
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
    let mut g = Gen {
        rng: StdRng::seed_from_u64(7),
        payloads: Arc::new(vec![('s', vec![])]),
        migrate_port: 1,
    };
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
