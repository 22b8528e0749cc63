//! The random workload of write commands that tests/effects_replay.rs and
//! the deterministic simulator (tests/simulator.rs) run: a template per
//! write command of the table, covering its option classes, over a small
//! keyspace of a few keys per type, with reads that expire keys lazily,
//! SELECT and MULTI/EXEC blocks mixed in. Each test binary that uses it
//! includes it with `#[path = "common/workload.rs"] mod workload;` (it is
//! not part of `common/mod.rs`, which every test binary compiles).
//!
//! With [`Gen::deterministic`] it leaves out what would make a run depend
//! on more than its seed: the commands whose result is random (SPOP), and
//! those whose effects follow the iteration order of a hash table, which
//! the process seeds at random (SCAN and RANDOMKEY expire keys in it, and
//! SORT BY nosort keeps it).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::Arc;

use lattice::facade::commands::run_local;
use lattice::facade::config::Config;
use lattice::facade::core::client::ClientState;
use lattice::facade::keyspace::hlc::{unix_ms, Hlc};
use lattice::facade::keyspace::Value;
use lattice::facade::server::Server;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Keys per type pool ("s0".."s2" strings, "l.." lists, "h.." hashes,
/// "t.." sets, "z.." sorted sets); a command mostly draws from its type's
/// pool, sometimes from another one (WRONGTYPE and conversions).
pub const KEYS_PER_TYPE: usize = 3;
pub const POOLS: [char; 5] = ['s', 'l', 'h', 't', 'z'];
pub const DBS: usize = 4;

/// Write commands the generator leaves out, each with why. Keep it short:
/// a data write belongs in [`template`].
pub const EXCLUDED: &[(&str, &str)] = &[
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
    (
        "restore-asking",
        "RESTORE's handler under its cluster name (RESTORE is drawn; tests/not_built.rs)",
    ),
    (
        "keydb.cron",
        "its job runs later on a timer, not as a replayed write; it propagates as RESTORE (drawn), tests/cron.rs",
    ),];

/// The commands that write a member's TTL (docs/MEMBER-EXPIRY.md): drawn by
/// the simulator; not by tests/effects_replay.rs, whose one-unit check
/// does not model the removals of due members that go ahead of a
/// command's record by design (DECISIONS 119).
pub const MEMBER_TTL_WRITES: &[&str] = &[
    "expiremember",
    "expirememberat",
    "pexpirememberat",
    "hexpire",
    "hpexpire",
    "hexpireat",
    "hpexpireat",
    // Writes only where a field has a TTL.
    "hpersist",
];

/// One generated command line.
pub type Line = Vec<Vec<u8>>;

/// A line from displayable parts.
#[macro_export]
macro_rules! args {
    ($($x:expr),* $(,)?) => { vec![$($x.to_string().into_bytes()),*] };
}

/// What the templates draw from.
pub struct Gen {
    pub rng: StdRng,
    /// DUMP payloads of values of every type and encoding, for RESTORE,
    /// with the pool of their type.
    pub payloads: Arc<Vec<(char, Vec<u8>)>>,
    /// Port of the stub MIGRATE target.
    pub migrate_port: u16,
    /// Databases drawn from (SELECT, MOVE ...).
    pub dbs: usize,
    /// Leave out what depends on more than the seed (module doc).
    pub deterministic: bool,
}

impl Gen {
    /// A generator seeded with `seed`, over [`DBS`] databases.
    pub fn new(seed: u64, payloads: Arc<Vec<(char, Vec<u8>)>>, migrate_port: u16) -> Gen {
        Gen {
            rng: StdRng::seed_from_u64(seed),
            payloads,
            migrate_port,
            dbs: DBS,
            deterministic: false,
        }
    }

    pub fn n(&mut self, r: std::ops::Range<i64>) -> i64 {
        self.rng.gen_range(r)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.rng.gen_range(0..xs.len())]
    }

    /// A key of pool `t`, or now and then of any pool.
    pub fn key(&mut self, t: char) -> String {
        let t = if self.chance(0.05) {
            self.pick(&POOLS)
        } else {
            t
        };
        format!("{t}{}", self.rng.gen_range(0..KEYS_PER_TYPE))
    }

    pub fn keys(&mut self, t: char, max: i64) -> Vec<String> {
        let n = self.n(1..max + 1);
        (0..n).map(|_| self.key(t)).collect()
    }

    /// A collection member / field / list element.
    pub fn member(&mut self) -> String {
        if self.chance(0.2) {
            self.n(0..4).to_string()
        } else {
            format!("m{}", self.rng.gen_range(0..6))
        }
    }

    pub fn members(&mut self, max: i64) -> Vec<String> {
        let n = self.n(1..max + 1);
        (0..n).map(|_| self.member()).collect()
    }

    pub fn value(&mut self) -> String {
        match self.rng.gen_range(0..4) {
            0 => self.n(-5..100).to_string(),
            1 => format!("v{}", self.rng.gen_range(0..1000)),
            2 => "1.5".into(),
            _ => "x".repeat(self.rng.gen_range(0..60)),
        }
    }

    pub fn db(&mut self) -> String {
        self.rng.gen_range(0..self.dbs).to_string()
    }

    pub fn score(&mut self) -> String {
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
    pub fn ttl(&mut self, unit: &str) -> String {
        let now = unix_ms() as i64;
        match unit {
            "s" => self.n(-2..100),
            "ms" => self.n(-50..300),
            "unix s" => now / 1000 + self.n(-5..100),
            _ => now + self.n(-100..90_000),
        }
        .to_string()
    }

    pub fn end(&mut self) -> &'static str {
        self.pick(&["LEFT", "RIGHT"])
    }
}

/// A random line for the write command `name` (a table name, "parent|sub"
/// for a subcommand), covering its option classes; `None` if there is no
/// template.
pub fn template(name: &str, g: &mut Gen) -> Option<Line> {
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
        // --- HyperLogLog (sketches in the string pool)
        "pfadd" => {
            let mut l = args!["PFADD", g.key('s')];
            l.extend(g.members(4).into_iter().map(String::into_bytes));
            l
        }
        "pfmerge" => {
            let mut l = args!["PFMERGE", g.key('s')];
            l.extend(g.keys('s', 3).into_iter().map(String::into_bytes));
            l
        }
        "pfdebug" => {
            let sub = g.pick(&["TODENSE", "GETREG", "ENCODING"]);
            args!["PFDEBUG", sub, g.key('s')]
        }
        // --- geo (indexes in the sorted-set pool)
        "geoadd" => {
            let mut l = args!["GEOADD", g.key('z')];
            let flags: &[&str] = g.pick(&[&[][..], &["NX"], &["XX", "CH"], &["CH"]]);
            l.extend(flags.iter().map(|f| f.as_bytes().to_vec()));
            for _ in 0..g.n(1..4) {
                let (lon, lat) = (g.n(-20..20) as f64 * 0.7, g.n(-20..20) as f64 * 0.4);
                l.extend(args![lon, lat, g.member()]);
            }
            l
        }
        "georadius" | "georadiusbymember" => {
            let mut l = args![name.to_uppercase(), g.key('z')];
            if name == "georadius" {
                l.extend(args![g.n(-10..10), g.n(-10..10)]);
            } else {
                l.extend(args![g.member()]);
            }
            l.extend(args![g.n(0..3000), "km"]);
            if g.chance(0.5) {
                l.extend(args!["COUNT", g.n(1..4)]);
            }
            let store = g.pick(&["STORE", "STOREDIST"]);
            l.extend(args![store, g.key('z')]);
            l
        }
        "geosearchstore" => {
            let mut l = args!["GEOSEARCHSTORE", g.key('z'), g.key('z')];
            if g.chance(0.5) {
                l.extend(args!["FROMMEMBER", g.member()]);
            } else {
                l.extend(args!["FROMLONLAT", g.n(-10..10), g.n(-10..10)]);
            }
            if g.chance(0.5) {
                l.extend(args!["BYRADIUS", g.n(0..3000), "km"]);
            } else {
                l.extend(args!["BYBOX", g.n(0..3000), g.n(0..3000), "km"]);
            }
            if g.chance(0.3) {
                l.extend(args!["STOREDIST"]);
            }
            l
        }
        // --- streams (pool 'q')
        "xadd" => {
            let mut l = args!["XADD", g.key('q')];
            if g.chance(0.1) {
                l.extend(args!["NOMKSTREAM"]);
            }
            if g.chance(0.3) {
                let approx = g.pick(&["~", "="]);
                if g.chance(0.5) {
                    l.extend(args!["MAXLEN", approx, g.n(0..20)]);
                } else {
                    l.extend(args!["MINID", approx, g.n(0..40)]);
                }
            }
            if g.deterministic || g.chance(0.95) {
                l.extend(args![format!("{}-*", g.n(1..40))]);
            } else {
                l.extend(args!["*"]);
            }
            for _ in 0..g.n(1..3) {
                l.extend(args![g.member(), g.value()]);
            }
            l
        }
        "xdel" => {
            let mut l = args!["XDEL", g.key('q')];
            for _ in 0..g.n(1..3) {
                l.extend(args![format!("{}-{}", g.n(30..40), g.n(0..4))]);
            }
            l
        }
        "xtrim" => {
            let approx = g.pick(&["~", "="]);
            if g.chance(0.5) {
                args!["XTRIM", g.key('q'), "MAXLEN", approx, g.n(0..20)]
            } else {
                args!["XTRIM", g.key('q'), "MINID", approx, g.n(0..40)]
            }
        }
        "xsetid" => args![
            "XSETID",
            g.key('q'),
            format!("{}-{}", g.n(30..60), g.n(0..3))
        ],
        // Consumer groups: groups g0..g1, consumers c0..c2. XREADGROUP reads
        // new entries only: a history read changes delivery counts that
        // Redis does not propagate (see `canonical`).
        "xgroup|create" => {
            let id = g.pick(&["0", "$", "20-0"]);
            let mut l = args!["XGROUP", "CREATE", cg_key(g), cg_group(g), id];
            if g.chance(0.5) {
                l.extend(args!["MKSTREAM"]);
            }
            if g.chance(0.2) {
                l.extend(args!["ENTRIESREAD", g.n(-1..10)]);
            }
            l
        }
        "xgroup|setid" => {
            let id = g.pick(&["0", "$", "25-0"]);
            let mut l = args!["XGROUP", "SETID", cg_key(g), cg_group(g), id];
            if g.chance(0.3) {
                l.extend(args!["ENTRIESREAD", g.n(0..10)]);
            }
            l
        }
        "xgroup|destroy" => args!["XGROUP", "DESTROY", cg_key(g), cg_group(g)],
        "xgroup|createconsumer" => {
            args![
                "XGROUP",
                "CREATECONSUMER",
                cg_key(g),
                cg_group(g),
                cg_consumer(g)
            ]
        }
        "xgroup|delconsumer" => {
            args![
                "XGROUP",
                "DELCONSUMER",
                cg_key(g),
                cg_group(g),
                cg_consumer(g)
            ]
        }
        "xreadgroup" => {
            let mut l = args!["XREADGROUP", "GROUP", cg_group(g), cg_consumer(g)];
            if g.chance(0.5) {
                l.extend(args!["COUNT", g.n(1..4)]);
            }
            if g.chance(0.3) {
                l.extend(args!["NOACK"]);
            }
            l.extend(args!["STREAMS", cg_key(g), ">"]);
            l
        }
        "xack" => {
            let mut l = args!["XACK", cg_key(g), cg_group(g)];
            l.extend(cg_ids(g));
            l
        }
        "xclaim" => {
            let mut l = args!["XCLAIM", cg_key(g), cg_group(g), cg_consumer(g), 0];
            l.extend(cg_ids(g));
            for opt in ["JUSTID", "FORCE"] {
                if g.chance(0.3) {
                    l.extend(args![opt]);
                }
            }
            if g.chance(0.2) {
                l.extend(args!["RETRYCOUNT", g.n(0..5)]);
            }
            if g.chance(0.2) {
                l.extend(args!["LASTID", format!("{}-0", g.n(1..50))]);
            }
            l
        }
        "xautoclaim" => {
            let mut l = args!["XAUTOCLAIM", cg_key(g), cg_group(g), cg_consumer(g), 0, "0"];
            if g.chance(0.5) {
                l.extend(args!["COUNT", g.n(1..4)]);
            }
            if g.chance(0.3) {
                l.extend(args!["JUSTID"]);
            }
            l
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
            match g.chance(0.3) {
                // KeyDB's PERSIST of one member's TTL.
                true => args!["PERSIST", g.key(t), g.member()],
                false => args!["PERSIST", g.key(t)],
            }
        }
        // --- member expiry (KeyDB's spelling, on sets, hashes and sorted
        // sets; Redis 7.4's, on hashes)
        "expiremember" => {
            let t = g.pick(&['t', 'h', 'z']);
            if g.chance(0.2) {
                // A read of a member's TTL now and then: it expires due
                // members lazily, as a write's open does.
                return Some(args![g.pick(&["TTL", "PTTL"]), g.key(t), g.member()]);
            }
            let mut l = args!["EXPIREMEMBER", g.key(t), g.member()];
            match g.chance(0.5) {
                true => l.extend(args![g.ttl("ms"), "ms"]),
                false => l.extend(args![g.ttl("s")]),
            }
            l
        }
        "expirememberat" | "pexpirememberat" => {
            let t = g.pick(&['t', 'h', 'z']);
            let unit = if name == "expirememberat" {
                "unix s"
            } else {
                "unix ms"
            };
            args![name.to_uppercase(), g.key(t), g.member(), g.ttl(unit)]
        }
        "hexpire" | "hpexpire" | "hexpireat" | "hpexpireat" => {
            let unit = match name {
                "hexpire" => "s",
                "hpexpire" => "ms",
                "hexpireat" => "unix s",
                _ => "unix ms",
            };
            let mut l = args![
                name.to_uppercase(),
                g.key('h'),
                g.ttl(unit).replace('-', "")
            ];
            if g.chance(0.4) {
                l.extend(args![g.pick(&["NX", "XX", "GT", "LT"])]);
            }
            let fields = g.members(3);
            l.extend(args!["FIELDS", fields.len()]);
            l.extend(fields.into_iter().map(String::into_bytes));
            l
        }
        "hpersist" => {
            let fields = g.members(3);
            // Now and then a read of the fields' TTLs instead (as above).
            let name = match g.chance(0.2) {
                true => g.pick(&["HTTL", "HPEXPIRETIME"]),
                false => "HPERSIST",
            };
            let mut l = args![name, g.key('h'), "FIELDS", fields.len()];
            l.extend(fields.into_iter().map(String::into_bytes));
            l
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
        "keydb.hrename" => args!["KEYDB.HRENAME", g.key('h'), g.member(), g.member()],
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
                let by: &[&str] = if g.deterministic {
                    &["s*", "h*->m1"]
                } else {
                    &["nosort", "s*", "h*->m1"]
                };
                l.extend(args!["BY", g.pick(by)]);
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
/// Group commands meet on one stream and group mostly, so that reads
/// leave entries pending for XACK and the claims to find.
fn cg_key(g: &mut Gen) -> String {
    if g.chance(0.75) {
        "q0".into()
    } else {
        g.key('q')
    }
}

fn cg_group(g: &mut Gen) -> String {
    if g.chance(0.8) {
        "g0".into()
    } else {
        "g1".into()
    }
}

fn cg_consumer(g: &mut Gen) -> String {
    format!("c{}", g.n(0..3))
}

/// Entry IDs near those XADD gives (`<n>-*` with n below 40): a few, or
/// now and then every `<n>-0`, so that XACK and XCLAIM find pending ones.
fn cg_ids(g: &mut Gen) -> Line {
    if g.chance(0.6) {
        return (1..40).map(|n| format!("{n}-0").into_bytes()).collect();
    }
    (0..g.n(1..3))
        .map(|_| format!("{}-{}", g.n(1..40), g.n(0..2)).into_bytes())
        .collect()
}

pub fn weight(name: &str) -> f64 {
    match name {
        "lpush" | "rpush" | "sadd" | "zadd" | "hset" => 5.0,
        "flushall" => 0.05,
        "flushdb" => 0.15,
        "swapdb" => 0.3,
        "migrate" => 0.5,
        // A pending entry for XACK to find needs entries, a group and a
        // read first on the same stream in the same database.
        "xadd" => 4.0,
        "xreadgroup" | "xgroup|create" => 3.0,
        "xack" | "xclaim" | "xautoclaim" => 2.0,
        // Member TTLs (drawn by the simulator only): often enough that
        // writes of one member's TTL meet under partitions in most runs.
        "expiremember" | "hpexpire" => 4.0,
        "expirememberat" | "pexpirememberat" | "hexpire" | "hpersist" | "persist" => 2.0,
        _ => 1.0,
    }
}

/// Reads mixed into the workload: they expire keys lazily (MGET over
/// several, SCAN and RANDOMKEY each key under its own view).
pub fn read_line(g: &mut Gen) -> Line {
    let t = g.pick(&POOLS);
    let mut choice = g.n(0..12);
    if g.deterministic && (choice == 9 || choice == 10) {
        choice = 7; // not SCAN nor RANDOMKEY: MGET
    }
    match choice {
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
pub fn write_commands(srv: &Server) -> Vec<String> {
    let t = &srv.commands;
    let mut v: Vec<String> = (0..t.all.len())
        .filter(|&id| t.get(id).is_write())
        .map(|id| t.full_names[id].clone())
        .collect();
    v.sort();
    v
}

/// The write commands the workload draws from, with their weights
/// (with `deterministic`, not SPOP, whose pick is random).
pub fn drawable(srv: &Server, deterministic: bool) -> Vec<(String, f64)> {
    let excluded: BTreeSet<&str> = EXCLUDED.iter().map(|e| e.0).collect();
    write_commands(srv)
        .into_iter()
        .filter(|n| !excluded.contains(n.as_str()))
        .filter(|n| !(deterministic && n == "spop"))
        .map(|n| {
            let w = weight(&n);
            (n, w)
        })
        .collect()
}

/// One workload step: the lines to run (several for a MULTI block) and the
/// write command they were drawn for, if any.
pub fn step(g: &mut Gen, cmds: &[(String, f64)], total: f64) -> (Vec<Line>, Option<String>) {
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
pub fn expected_error(err: &str) -> bool {
    !(err.contains("syntax error")
        || err.contains("wrong number of arguments")
        || err.contains("unknown command")
        || err.contains("unknown subcommand"))
}

/// DUMP payloads of values of each type, small (listpack, intset) and big,
/// each with the pool of its type.
pub fn payloads() -> Vec<(char, Vec<u8>)> {
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

/// The value's content, independent of its encoding and of the iteration
/// order of unordered types.
pub fn canonical(v: &Value) -> Vec<u8> {
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
        Value::Stream(x) => {
            use lattice::facade::keyspace::stream::StreamId;
            let mut items: Vec<Vec<u8>> = x
                .range(StreamId::MIN, StreamId::MAX, false)
                .map(|(id, f)| {
                    [
                        id.text().into_bytes(),
                        f.items().collect::<Vec<_>>().join(&b"="[..]),
                    ]
                    .concat()
                })
                .collect();
            let meta = format!(
                "{} {} {}",
                x.last_id.text(),
                x.entries_added,
                x.max_deleted.text()
            );
            items.push(meta.into_bytes());
            // Groups without what Redis leaves per node: seen and delivery
            // times, and entries-read (an XREADGROUP's XCLAIM carries
            // LASTID, not the read counter).
            for (name, gr) in &x.groups {
                let mut line = format!(
                    "group {} {}",
                    String::from_utf8_lossy(name),
                    gr.last_id.text()
                );
                for (id, n) in gr.pel.iter() {
                    let c = String::from_utf8_lossy(n.consumer());
                    line += &format!(" {}:{c}:{}", id.text(), n.delivery_count);
                }
                for c in gr.consumers.keys() {
                    let held = gr.pel.count_of(c);
                    line += &format!(" [{}:{held}]", String::from_utf8_lossy(c));
                }
                items.push(line.into_bytes());
            }
            join(items, false)
        }
        Value::Cron(j) => format!("{j:?}").into_bytes(),
    }
}

pub fn show(line: &[Vec<u8>]) -> String {
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
