//! DUMP / RESTORE / MIGRATE as a user sees them: round trips of every type
//! and encoding through our server, payloads exchanged with a real
//! redis-server both ways, Redis's exact errors for bad input (which change
//! nothing), IDLETIME/FREQ, and MIGRATE to another lattice-server and to
//! redis-server. Also a seeded mutation run over real payloads (CRC fixed up
//! so the mutations reach the decoder) that must never panic.

mod common;
#[path = "../fuzz/rdb_check.rs"]
mod rdb_check;

use common::*;

use lattice::facade::persistence::rdb::CRC64;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn bin(c: &mut redis::Connection, args: &[&[u8]]) -> redis::RedisResult<redis::Value> {
    let mut q = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        q.arg(*a);
    }
    q.query(c)
}

fn dump(c: &mut redis::Connection, key: &str) -> Vec<u8> {
    redis::cmd("DUMP").arg(key).query(c).unwrap()
}

fn restore(
    c: &mut redis::Connection,
    key: &str,
    ttl: &str,
    payload: &[u8],
    opts: &[&str],
) -> String {
    let mut q = redis::cmd("RESTORE");
    q.arg(key).arg(ttl).arg(payload);
    for o in opts {
        q.arg(*o);
    }
    match q.query::<String>(c) {
        Ok(s) => s,
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")),
    }
}

/// A key's type, encoding-independent contents and OBJECT ENCODING.
fn describe(c: &mut redis::Connection, key: &str) -> String {
    let t: String = cmd(c, &["TYPE", key]);
    let v = match t.as_str() {
        "string" => format!("{:?}", cmd::<Vec<u8>>(c, &["GET", key])),
        "list" => format!("{:?}", cmd::<Vec<Vec<u8>>>(c, &["LRANGE", key, "0", "-1"])),
        "hash" => {
            let mut p: Vec<(Vec<u8>, Vec<u8>)> = cmd(c, &["HGETALL", key]);
            p.sort();
            format!("{p:?}")
        }
        "set" => {
            let mut m: Vec<Vec<u8>> = cmd(c, &["SMEMBERS", key]);
            m.sort();
            format!("{m:?}")
        }
        "zset" => format!(
            "{:?}",
            cmd::<Vec<(Vec<u8>, String)>>(c, &["ZRANGE", key, "0", "-1", "WITHSCORES"])
        ),
        "none" => return "none".into(),
        t => panic!("type {t}"),
    };
    let enc: String = cmd(c, &["OBJECT", "ENCODING", key]);
    format!("{t}/{enc}/{v}")
}

/// Every type in its encodings; returns the key names.
fn populate(c: &mut redis::Connection) -> Vec<&'static str> {
    let long = "L".repeat(200);
    let comp = "abcd".repeat(100);
    let mut p = redis::pipe();
    p.cmd("SET").arg("s_int").arg("-123456789").ignore();
    p.cmd("SET").arg("s_emb").arg("hello").ignore();
    p.cmd("SET").arg("s_raw").arg(&long).ignore();
    p.cmd("SET").arg("s_lzf").arg(&comp).ignore();
    p.cmd("SET").arg("s_bin").arg(&b"\x00\xff\r\n"[..]).ignore();
    p.cmd("RPUSH")
        .arg("l_small")
        .arg(&["a", "1", "-70000", "b"])
        .ignore();
    for i in 0..1000 {
        p.cmd("RPUSH")
            .arg("l_big")
            .arg(format!("item{i}{}", "z".repeat(i % 30)))
            .ignore();
        if i < 600 {
            p.cmd("HSET")
                .arg("h_big")
                .arg(format!("f{i}"))
                .arg(i)
                .ignore();
            p.cmd("SADD").arg("set_bigint").arg(i).ignore();
        }
        if i < 200 {
            p.cmd("ZADD")
                .arg("z_big")
                .arg(i as f64 / 7.0)
                .arg(format!("m{i}"))
                .ignore();
            p.cmd("SADD").arg("set_str").arg(format!("m{i}")).ignore();
        }
    }
    p.cmd("RPUSH")
        .arg("l_plain")
        .arg(&long)
        .arg("P".repeat(20_000))
        .ignore();
    p.cmd("HSET")
        .arg("h_small")
        .arg("f")
        .arg("v")
        .arg("n")
        .arg("12")
        .ignore();
    p.cmd("HSET").arg("h_longval").arg("f").arg(&long).ignore();
    p.cmd("SADD")
        .arg("set_int")
        .arg(&["3", "-1", "100000"])
        .ignore();
    p.cmd("ZADD")
        .arg("z_small")
        .arg(&["1.5", "a", "-inf", "b", "inf", "c", "0", "d"])
        .ignore();
    p.cmd("ZADD")
        .arg("z_longmember")
        .arg("1")
        .arg(&long)
        .ignore();
    let _: () = p.query(c).unwrap();
    vec![
        "s_int",
        "s_emb",
        "s_raw",
        "s_lzf",
        "s_bin",
        "l_small",
        "l_big",
        "l_plain",
        "h_small",
        "h_big",
        "h_longval",
        "set_int",
        "set_bigint",
        "set_str",
        "z_small",
        "z_big",
        "z_longmember",
    ]
}

#[test]
fn round_trips_every_type() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let keys = populate(&mut c);
    for k in &keys {
        let p = dump(&mut c, k);
        let copy = format!("{k}_copy");
        assert_eq!(restore(&mut c, &copy, "0", &p, &[]), "OK", "{k}");
        assert_eq!(describe(&mut c, k), describe(&mut c, &copy), "{k}");
        assert_eq!(cmd::<i64>(&mut c, &["PTTL", &copy]), -1);
    }
    let missing: Option<Vec<u8>> = cmd(&mut c, &["DUMP", "nosuchkey"]);
    assert_eq!(missing, None);
    // BUSYKEY, REPLACE, TTL, ABSTTL.
    let p = dump(&mut c, "l_small");
    assert_eq!(
        restore(&mut c, "s_emb", "0", &p, &[]),
        "BUSYKEY Target key name already exists."
    );
    assert_eq!(cmd::<String>(&mut c, &["TYPE", "s_emb"]), "string");
    assert_eq!(restore(&mut c, "s_emb", "5000", &p, &["REPLACE"]), "OK");
    assert_eq!(cmd::<String>(&mut c, &["TYPE", "s_emb"]), "list");
    let pttl: i64 = cmd(&mut c, &["PTTL", "s_emb"]);
    // Up to 4 s for a loaded machine between RESTORE and PTTL.
    assert!(pttl > 1000 && pttl <= 5000, "{pttl}");
    let at = lattice::facade::keyspace::hlc::unix_ms() + 100_000;
    assert_eq!(
        restore(&mut c, "abs", &at.to_string(), &p, &["ABSTTL"]),
        "OK"
    );
    assert_eq!(cmd::<u64>(&mut c, &["PEXPIRETIME", "abs"]), at);
    // A TTL in the past: OK, the replaced key is gone.
    assert_eq!(
        restore(&mut c, "abs", "1", &p, &["ABSTTL", "REPLACE"]),
        "OK"
    );
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "abs"]), 0);
}

#[test]
fn payloads_cross_between_redis_and_lattice() {
    let r = RedisOracle::start(&["--requirepass", ""]);
    let s = Server::start(&[]);
    let (mut rc, mut lc) = (r.conn(), s.conn());
    let keys = populate(&mut rc);
    populate(&mut lc);
    for k in &keys {
        let from_redis = dump(&mut rc, k);
        assert_eq!(
            restore(&mut lc, "x", "0", &from_redis, &["REPLACE"]),
            "OK",
            "{k}"
        );
        assert_eq!(
            describe(&mut lc, "x"),
            describe(&mut rc, k),
            "redis -> lattice {k}"
        );
        let from_us = dump(&mut lc, k);
        assert_eq!(
            restore(&mut rc, "y", "0", &from_us, &["REPLACE"]),
            "OK",
            "{k}"
        );
        assert_eq!(
            describe(&mut rc, "y"),
            describe(&mut rc, k),
            "lattice -> redis {k}"
        );
    }
}

/// Strings for LZF (`rdbcompression`): mostly incompressible bytes with a
/// few repeats (the output runs up to its limit), compressible digits, and
/// long runs.
fn lzf_inputs(rng: &mut StdRng) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for _ in 0..1500 {
        let n = rng.gen_range(21..320);
        let mut s: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
        for _ in 0..rng.gen_range(0..3) {
            let (at, from) = (rng.gen_range(0..n - 8), rng.gen_range(0..n - 8));
            s.copy_within(from..from + 4, at);
        }
        v.push(s);
    }
    for _ in 0..300 {
        let n = rng.gen_range(21..600);
        v.push((0..n).map(|_| rng.gen_range(b'0'..=b'4')).collect());
    }
    v.push(vec![b'x'; 100_000]);
    v.push(b"abc".repeat(30_000));
    v
}

/// Compressed strings and lists of them DUMP to Redis's exact bytes (the
/// same LZF output), and every one loads back.
#[test]
fn compressed_values_dump_as_redis_does() {
    let r = RedisOracle::start(&["--requirepass", ""]);
    let s = Server::start(&[]);
    let (mut rc, mut lc) = (r.conn(), s.conn());
    let inputs = lzf_inputs(&mut StdRng::seed_from_u64(7));
    for c in [&mut rc, &mut lc] {
        let mut p = redis::pipe();
        for (i, v) in inputs.iter().enumerate() {
            p.cmd("SET").arg(format!("s{i}")).arg(&v[..]).ignore();
            let list = inputs.iter().cycle().skip(i).take(3);
            p.cmd("RPUSH")
                .arg(format!("l{i}"))
                .arg(list.collect::<Vec<_>>())
                .ignore();
        }
        let () = p.query(c).unwrap();
    }
    for i in 0..inputs.len() {
        for k in [format!("s{i}"), format!("l{i}")] {
            let ours = dump(&mut lc, &k);
            assert_eq!(ours, dump(&mut rc, &k), "DUMP {k}");
            assert_eq!(restore(&mut lc, "back", "0", &ours, &["REPLACE"]), "OK");
            assert_eq!(describe(&mut lc, "back"), describe(&mut lc, &k), "{k}");
        }
    }
}

fn with_crc(body: &[u8], version: u16) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&version.to_le_bytes());
    let crc = CRC64.checksum(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

#[test]
fn bad_payloads_are_refused_and_change_nothing() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["SET", "k", "old"]);
    let good = dump(&mut c, "k");
    let body = &good[..good.len() - 10];
    const VC: &str = "ERR DUMP payload version or checksum are wrong";
    const BAD: &str = "ERR Bad data format";
    let mut flipped = good.clone();
    flipped[2] ^= 1;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"short".to_vec(), VC),
        (flipped, VC),
        (with_crc(body, 12), VC),
        (with_crc(&[0, 9, b'x'], 10), BAD),
        (with_crc(&[2, 0], 10), BAD),
        (with_crc(&[15, 0], 10), BAD),
        (with_crc(&[2, 2, 1, b'a', 1, b'a'], 10), BAD),
        (with_crc(&[0, 1, b'x', 0], 10), BAD),
    ];
    for (p, want) in &cases {
        assert_eq!(restore(&mut c, "k", "0", p, &["REPLACE"]), *want);
        assert_eq!(restore(&mut c, "new", "0", p, &[]), *want);
    }
    assert_eq!(cmd::<String>(&mut c, &["GET", "k"]), "old");
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "new"]), 0);
    // Version 11 (Redis 7.2) is accepted.
    assert_eq!(restore(&mut c, "v11", "0", &with_crc(body, 11), &[]), "OK");
    // Option errors, in Redis's order.
    let e =
        |c: &mut redis::Connection, ttl: &str, opts: &[&str]| restore(c, "k2", ttl, &good, opts);
    assert_eq!(e(&mut c, "-1", &[]), "ERR Invalid TTL value, must be >= 0");
    assert_eq!(
        e(&mut c, "x", &[]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        e(&mut c, "0", &["IDLETIME", "-1"]),
        "ERR Invalid IDLETIME value, must be >= 0"
    );
    assert_eq!(
        e(&mut c, "0", &["FREQ", "256"]),
        "ERR Invalid FREQ value, must be >= 0 and <= 255"
    );
    assert_eq!(
        e(&mut c, "0", &["IDLETIME", "1", "FREQ", "1"]),
        "ERR syntax error"
    );
    assert_eq!(e(&mut c, "0", &["BOGUS"]), "ERR syntax error");
    assert_eq!(
        restore(&mut c, "k", "-1", &good, &[]),
        "BUSYKEY Target key name already exists."
    );
}

#[test]
fn idletime_and_freq() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["SET", "k", "v"]);
    let p = dump(&mut c, "k");
    assert_eq!(
        restore(&mut c, "idle", "0", &p, &["IDLETIME", "1000"]),
        "OK"
    );
    let idle: i64 = cmd(&mut c, &["OBJECT", "IDLETIME", "idle"]);
    assert!((1000..1010).contains(&idle), "{idle}");
    let _: () = cmd(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"],
    );
    assert_eq!(restore(&mut c, "freq", "0", &p, &["FREQ", "100"]), "OK");
    assert_eq!(cmd::<i64>(&mut c, &["OBJECT", "FREQ", "freq"]), 100);
}

#[test]
fn migrate_to_lattice_and_redis() {
    let a = Server::start(&[]);
    let b = Server::start(&["--requirepass", "pw"]);
    let r = RedisOracle::start(&["--requirepass", ""]);
    let mut ac = a.conn();
    let keys = populate(&mut ac);
    let descs: Vec<String> = keys.iter().map(|k| describe(&mut ac, k)).collect();
    let _: () = cmd(&mut ac, &["PEXPIRE", "s_int", "100000"]);
    let bp = b.port.to_string();
    let rp = r.port.to_string();
    // One key, with AUTH, to db 2 of the other lattice-server.
    let ok: String = cmd(
        &mut ac,
        &[
            "MIGRATE",
            "127.0.0.1",
            &bp,
            "s_int",
            "2",
            "30000",
            "AUTH",
            "pw",
        ],
    );
    assert_eq!(ok, "OK");
    assert_eq!(cmd::<i64>(&mut ac, &["EXISTS", "s_int"]), 0);
    let mut bc = redis::Client::open(format!("redis://:pw@127.0.0.1:{}/2", b.port))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(describe(&mut bc, "s_int"), descs[0]);
    let pttl: i64 = cmd(&mut bc, &["PTTL", "s_int"]);
    assert!(pttl > 90_000, "{pttl}");
    // Wrong password: the target's error, the key stays.
    let err = cmd_err(
        &mut ac,
        &[
            "MIGRATE",
            "127.0.0.1",
            &bp,
            "s_emb",
            "0",
            "30000",
            "AUTH",
            "no",
        ],
    );
    assert!(
        err.starts_with("ERR Target instance replied with error:"),
        "{err}"
    );
    assert_eq!(cmd::<i64>(&mut ac, &["EXISTS", "s_emb"]), 1);
    // Everything else to redis-server with KEYS, COPY first then moving.
    let mut rest: Vec<&str> = vec![
        "MIGRATE",
        "127.0.0.1",
        &rp,
        "",
        "0",
        "30000",
        "COPY",
        "KEYS",
    ];
    rest.extend(&keys[1..]);
    assert_eq!(cmd::<String>(&mut ac, &rest), "OK");
    assert_eq!(cmd::<i64>(&mut ac, &["EXISTS", "s_emb"]), 1);
    let err = cmd_err(&mut ac, &rest);
    assert!(err.contains("BUSYKEY"), "{err}");
    rest[6] = "REPLACE";
    assert_eq!(cmd::<String>(&mut ac, &rest), "OK");
    let mut rc = r.conn();
    for (k, d) in keys.iter().zip(&descs).skip(1) {
        assert_eq!(cmd::<i64>(&mut ac, &["EXISTS", k]), 0, "{k}");
        let theirs = describe(&mut rc, k);
        // Same contents; redis-server may pick its own list encoding.
        assert_eq!(theirs.split('/').nth(2), d.split('/').nth(2), "{k}");
    }
    assert_eq!(
        cmd::<String>(&mut ac, &["MIGRATE", "127.0.0.1", &rp, "gone", "0", "100"]),
        "NOKEY"
    );
    let _: () = cmd(&mut ac, &["SET", "k", "v"]);
    let dead = free_port().to_string();
    assert_eq!(
        cmd_err(&mut ac, &["MIGRATE", "127.0.0.1", &dead, "k", "0", "100"]),
        "IOERR error or timeout connecting to the client"
    );
    assert_eq!(
        cmd_err(
            &mut ac,
            &["MIGRATE", "127.0.0.1", &rp, "k", "0", "100", "KEYS", "k"]
        ),
        "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"
    );
    assert_eq!(
        cmd_err(
            &mut ac,
            &["MIGRATE", "127.0.0.1", &rp, "k", "0", "100", "AUTH"]
        ),
        "ERR syntax error"
    );
}

#[test]
fn mutated_payloads_never_panic() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let keys = populate(&mut c);
    let limits = rdb_check::default_limits();
    let mut rng = StdRng::seed_from_u64(7);
    for k in &keys {
        let p = dump(&mut c, k);
        let body = &p[..p.len() - 10];
        for _ in 0..300 {
            let mut d = body[..body.len().min(4096)].to_vec();
            for _ in 0..rng.gen_range(1..4) {
                let at = rng.gen_range(0..d.len().max(1));
                match rng.gen_range(0..4) {
                    0 if !d.is_empty() => d[at] ^= 1 << rng.gen_range(0..8),
                    1 if !d.is_empty() => d[at] = rng.gen(),
                    2 => d.truncate(at),
                    _ => d.insert(at.min(d.len()), rng.gen()),
                }
            }
            rdb_check::check(&with_crc(&d, 10), &limits);
        }
    }
    // The server survives a burst of them too.
    let p = dump(&mut c, "h_small");
    for i in 0..200 {
        let mut d = p[..p.len() - 10].to_vec();
        let at = i % d.len();
        d[at] = d[at].wrapping_add(i as u8);
        let _ = bin(
            &mut c,
            &[b"RESTORE", b"fz", b"0", &with_crc(&d, 10), b"REPLACE"],
        );
    }
    assert_eq!(cmd::<String>(&mut c, &["PING"]), "PONG");
}

/// RESTORE's effects, as replicas and the AOF get them: a relative TTL is
/// rewritten to the absolute deadline with ABSTTL appended, ABSTTL and no
/// TTL go as received, a RESTORE REPLACE whose deadline already passed is a
/// DEL; replaying the effects rebuilds the same keys, deadlines and versions.
#[test]
fn restore_propagates_deterministically() {
    use lattice::facade::commands::{replay, run_local};
    use lattice::facade::config::Config;
    use lattice::facade::core::client::ClientState;
    use lattice::facade::effects::Recorder;
    use lattice::facade::keyspace::hlc::Hlc;
    use lattice::facade::server::Server;
    use std::sync::Arc;

    let srv = Server::new(Config::default());
    let rec = Arc::new(Recorder::default());
    srv.effects.subscribe(rec.clone());
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let mut client = ClientState::new(1);
    let mut run = |argv: &[&[u8]]| run_local(&srv, &mut clock, &stats, &mut client, argv);
    run(&[b"RPUSH", b"src", b"a", b"b"]).unwrap();
    let reply = run(&[b"DUMP", b"src"]).unwrap();
    // "$<n>\r\n<payload>\r\n"
    let start = reply.iter().position(|&b| b == b'\n').unwrap() + 1;
    let payload = reply[start..reply.len() - 2].to_vec();
    let abs = (lattice::facade::keyspace::hlc::unix_ms() + 500_000).to_string();
    run(&[b"RESTORE", b"rel", b"100000", &payload]).unwrap();
    run(&[b"RESTORE", b"abs", abs.as_bytes(), &payload, b"absttl"]).unwrap();
    run(&[b"RESTORE", b"none", b"0", &payload, b"IDLETIME", b"5"]).unwrap();
    run(&[b"RESTORE", b"src", b"1", &payload, b"ABSTTL", b"REPLACE"]).unwrap();
    let effects = rec.0.lock().clone();
    let argv: Vec<Vec<String>> = effects
        .iter()
        .map(|e| {
            e.argv
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .collect();
    assert_eq!(argv.len(), 5, "{argv:?}");
    let rel = &argv[1];
    assert_eq!(
        (rel[0].as_str(), rel[1].as_str(), rel[4].as_str()),
        ("RESTORE", "rel", "ABSTTL")
    );
    let at: u64 = rel[2].parse().unwrap();
    let now = lattice::facade::keyspace::hlc::unix_ms();
    assert!(at > now + 90_000 && at <= now + 100_000, "{at}");
    assert_eq!(argv[2][2], abs);
    assert_eq!(argv[2].len(), 5);
    assert_eq!(argv[3][2], "0");
    assert_eq!(argv[4], vec!["DEL".to_string(), "src".to_string()]);
    // Replay on a fresh server: same keys, deadlines, versions.
    let copy = Server::new(Config::default());
    let mut clock2 = Hlc::new(copy.node_id);
    let stats2 = copy.new_worker_stats();
    for e in &effects {
        replay(&copy, &mut clock2, &stats2, e).unwrap();
    }
    for key in [&b"rel"[..], b"abs", b"none", b"src"] {
        let show = |s: &Arc<Server>| {
            let ks = &s.keyspace;
            let slot = ks.slot(key);
            let g = ks.db(0).lock(slot.shard);
            g.get_raw(slot.hash, key)
                .map(|e| (e.expire_at(), e.version, format!("{:?}", e.value)))
        };
        assert_eq!(show(&srv), show(&copy), "{}", String::from_utf8_lossy(key));
    }
}

#[test]
fn a_quicklist_node_of_zero_bytes_is_bad_data() {
    // From Redis's corrupt-dump suite: one PLAIN node whose encoded length is 0.
    let s = Server::start(&[]);
    let mut c = s.conn();
    let payload = b"\x12\x01\x01\x00\x0a\x00\x8f\xc6\xc0\x57\x1c\x0a\xb3\x3c";
    let err: redis::RedisResult<()> = redis::cmd("RESTORE")
        .arg("l")
        .arg(0)
        .arg(&payload[..])
        .arg("REPLACE")
        .query(&mut c);
    let err = err.unwrap_err();
    assert_eq!(err.detail(), Some("Bad data format"), "{err:?}");
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "l"]), 0);
}
