//! The RDB loader against real files: dumps written by redis-server (every
//! type in both encodings, TTLs, several databases), Redis's own fixtures of
//! old encodings (zipmap, ziplist, quicklist 1), and corrupt, truncated and
//! mutated files. The expected values are always what a redis-server reports
//! after loading the same file, read back over the wire.

mod common;
use common::RedisOracle;

#[path = "../fuzz/rdb_check.rs"]
mod rdb_check;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lattice::facade::keyspace::Value;
use lattice::facade::persistence::rdb::decode::{self, LoadOpts};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A key's type and contents, comparable across the two servers.
#[derive(Debug, PartialEq)]
enum Canon {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    Set(Vec<Vec<u8>>),
    ZSet(Vec<(Vec<u8>, f64)>),
    /// Entries: "ms-seq" and the fields and values.
    Stream(Vec<(String, Vec<Vec<u8>>)>),
}

#[derive(Debug, PartialEq)]
struct Expected {
    value: Canon,
    encoding: String,
    expire_at_ms: u64,
}

type Keys = BTreeMap<(usize, Vec<u8>), Expected>;

fn canon(v: &Value) -> Canon {
    match v {
        Value::Str(s) => Canon::Str(s.to_vec()),
        Value::List(l) => Canon::List(l.iter().map(|e| e.to_vec()).collect()),
        Value::Hash(h) => {
            let mut p: Vec<_> = h.iter().map(|(f, x)| (f.to_vec(), x.to_vec())).collect();
            p.sort();
            Canon::Hash(p)
        }
        Value::Set(s) => {
            let mut m: Vec<_> = s.iter().map(|m| m.to_vec()).collect();
            m.sort();
            Canon::Set(m)
        }
        Value::ZSet(z) => Canon::ZSet(z.iter().map(|(m, s)| (m.to_vec(), s)).collect()),
        Value::Stream(x) => {
            use lattice::facade::keyspace::stream::StreamId;
            let es = x.range(StreamId::MIN, StreamId::MAX, false);
            Canon::Stream(
                es.map(|(id, f)| (id.text(), f.items().map(|b| b.to_vec()).collect()))
                    .collect(),
            )
        }
        // Redis writes no KEYDB.CRON job: its fields, compared as one string.
        Value::Cron(j) => Canon::Str(format!("{j:?}").into_bytes()),
    }
}

fn start_redis(dir: &Path, dbfilename: &str) -> RedisOracle {
    let dir = dir.to_str().unwrap();
    RedisOracle::start(&["--dir", dir, "--dbfilename", dbfilename])
}

fn q<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&[u8]]) -> T {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c)
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(args[0])))
}

/// Everything a redis-server holds, per database.
fn snapshot(r: &RedisOracle) -> Keys {
    let mut c = r.conn();
    let mut out = Keys::new();
    for db in 0..16usize {
        let _: () = q(&mut c, &[b"SELECT", db.to_string().as_bytes()]);
        let keys: Vec<Vec<u8>> = q(&mut c, &[b"KEYS", b"*"]);
        for k in keys {
            let t: String = q(&mut c, &[b"TYPE", &k]);
            let value = match t.as_str() {
                "string" => Canon::Str(q(&mut c, &[b"GET", &k])),
                "list" => Canon::List(q(&mut c, &[b"LRANGE", &k, b"0", b"-1"])),
                "hash" => {
                    let mut p: Vec<(Vec<u8>, Vec<u8>)> = q(&mut c, &[b"HGETALL", &k]);
                    p.sort();
                    Canon::Hash(p)
                }
                "set" => {
                    let mut m: Vec<Vec<u8>> = q(&mut c, &[b"SMEMBERS", &k]);
                    m.sort();
                    Canon::Set(m)
                }
                "zset" => {
                    let p: Vec<(Vec<u8>, String)> =
                        q(&mut c, &[b"ZRANGE", &k, b"0", b"-1", b"WITHSCORES"]);
                    Canon::ZSet(p.into_iter().map(|(m, s)| (m, parse_score(&s))).collect())
                }
                other => panic!("unexpected type {other}"),
            };
            let encoding: String = q(&mut c, &[b"OBJECT", b"ENCODING", &k]);
            let pexp: i64 = q(&mut c, &[b"PEXPIRETIME", &k]);
            let expected = Expected {
                value,
                encoding,
                expire_at_ms: pexp.max(0) as u64,
            };
            out.insert((db, k), expected);
        }
    }
    out
}

fn parse_score(s: &str) -> f64 {
    match s {
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        _ => s.parse().unwrap(),
    }
}

/// Our loader's view of a file (keys already expired are left out, as a
/// master loading the file drops them).
fn decode_file(path: &Path) -> Keys {
    let data = std::fs::read(path).unwrap();
    let limits = rdb_check::default_limits();
    let opts = LoadOpts {
        on_resize: None,
        on_aux: None,
        limits: &limits,
        verify_checksum: true,
    };
    let now = lattice::facade::keyspace::hlc::unix_ms();
    let mut out = Keys::new();
    decode::load(&data[..], &opts, &mut |k| {
        if k.expire_at_ms == 0 || k.expire_at_ms > now {
            let e = Expected {
                encoding: k.value.encoding().to_string(),
                value: canon(&k.value),
                expire_at_ms: k.expire_at_ms,
            };
            assert!(out.insert((k.db, k.key), e).is_none(), "duplicate key");
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    out
}

fn assert_same(ours: &Keys, theirs: &Keys, what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: key count");
    for (k, want) in theirs {
        let got = ours
            .get(k)
            .unwrap_or_else(|| panic!("{what}: missing {k:?}"));
        let name = String::from_utf8_lossy(&k.1);
        assert_eq!(got.encoding, want.encoding, "{what}: encoding of {name}");
        assert_eq!(
            got.expire_at_ms, want.expire_at_ms,
            "{what}: expiry of {name}"
        );
        assert!(got.value == want.value, "{what}: value of {name}");
    }
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lattice-rdbload-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Redis's source tree, for its test fixtures.
fn redis_src() -> PathBuf {
    let candidates = [
        std::env::var("LATTICE_REDIS_SRC").ok().map(PathBuf::from),
        Some(PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/.ci/cache/redis-src/redis-7.0.15"
        ))),
    ];
    for c in candidates.into_iter().flatten() {
        if c.join("tests/assets/encodings.rdb").exists() {
            return c;
        }
    }
    panic!(
        "Redis 7.0.15 sources not found: run the CI fetch (ci/tcl.sh) so that \
         .ci/cache/redis-src/redis-7.0.15 exists, or set LATTICE_REDIS_SRC"
    );
}

fn populate(c: &mut redis::Connection) {
    let long = "x".repeat(100);
    let lzf = "abcabcabc".repeat(50);
    let mut pipe = redis::pipe();
    let mut run = |_: &mut redis::Connection, args: Vec<String>| {
        let cmd = pipe.cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        cmd.ignore();
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    for cmd in [
        s(&["SET", "int", "12345"]),
        s(&["SET", "neg", "-9000000000"]),
        s(&["SET", "small", "-7"]),
        s(&["SET", "embstr", "hello world"]),
        s(&["SET", "raw", &long]),
        s(&["SET", "lzf", &lzf]),
        s(&["SET", "empty", ""]),
        s(&["SET", "ttl", "v", "PX", "900000"]),
        s(&["RPUSH", "list", "a", "1", "-300", "70000", "b"]),
        s(&["HSET", "hash", "f1", "v1", "f2", "22"]),
        s(&["SADD", "intset", "1", "-5", "100000", "3"]),
        s(&["SADD", "strset", "a", "b", "c"]),
        s(&[
            "ZADD", "zset", "1.5", "a", "-2", "b", "inf", "c", "-inf", "d",
        ]),
        s(&["HSET", "bighashval", "f", &long]),
        s(&["ZADD", "bigzsetval", "1", &long]),
        s(&["SELECT", "3"]),
        s(&["SET", "db3", "x"]),
        s(&["RPUSH", "db3list", "y"]),
        s(&["EXPIRE", "db3list", "5000"]),
        s(&["SELECT", "0"]),
    ] {
        run(c, cmd);
    }
    // Big ones: multi-node list, hashtable hash, hashtable sets, skiplist.
    for i in 0..2000 {
        let v = format!("element-{i}-{}", "y".repeat(i % 50));
        run(c, s(&["RPUSH", "biglist", &v]));
        if i < 600 {
            run(c, s(&["HSET", "bighash", &format!("f{i}"), &v]));
            run(
                c,
                s(&["ZADD", "bigzset", &format!("{}", i as f64 / 3.0), &v]),
            );
            run(c, s(&["SADD", "bigstrset", &v]));
        }
        if i < 600 {
            run(c, s(&["SADD", "bigintset", &i.to_string()]));
        }
    }
    run(c, s(&["RPUSH", "plainlist", &"p".repeat(100_000), "q"]));
    let _: () = pipe.query(c).unwrap();
}

#[test]
fn loads_what_redis_server_saves() {
    let dir = tmpdir("save");
    let r = start_redis(&dir, "dump.rdb");
    let mut c = r.conn();
    populate(&mut c);
    let _: () = q(&mut c, &[b"SAVE"]);
    drop(r);
    let file = dir.join("dump.rdb");
    let ours = decode_file(&file);
    let r = start_redis(&dir, "dump.rdb");
    let theirs = snapshot(&r);
    assert!(theirs.len() > 20);
    assert_same(&ours, &theirs, "dump.rdb");
    let data = std::fs::read(&file).unwrap();
    mutate_many(&data, 1500, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn loads_redis_fixtures_of_old_encodings() {
    let assets = redis_src().join("tests/assets");
    let dir = tmpdir("fixtures");
    for name in [
        "encodings.rdb",
        "hash-zipmap.rdb",
        "hash-ziplist.rdb",
        "list-quicklist.rdb",
        "zset-ziplist.rdb",
    ] {
        std::fs::copy(assets.join(name), dir.join(name)).unwrap();
        let ours = decode_file(&dir.join(name));
        let r = start_redis(&dir, name);
        let theirs = snapshot(&r);
        assert!(!theirs.is_empty(), "{name}: redis loaded nothing");
        assert_same(&ours, &theirs, name);
        mutate_many(&std::fs::read(dir.join(name)).unwrap(), 600, 2);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupt_fixtures_give_errors() {
    let assets = redis_src().join("tests/assets");
    let limits = rdb_check::default_limits();
    let opts = LoadOpts {
        on_resize: None,
        on_aux: None,
        limits: &limits,
        verify_checksum: true,
    };
    let data = std::fs::read(assets.join("corrupt_ziplist.rdb")).unwrap();
    assert!(decode::load(&data[..], &opts, &mut |_| Ok(())).is_err());
    // Empty keys are skipped, as Redis skips them.
    let data = std::fs::read(assets.join("corrupt_empty_keys.rdb")).unwrap();
    let res = decode::load(&data[..], &opts, &mut |k| {
        panic!("loaded empty key {:?}", k.key)
    });
    if let Ok(s) = res {
        assert_eq!(s.keys, 0);
    }
    mutate_many(&data, 500, 3);
}

/// Bit flips, byte overwrites, truncations, insertions and random length
/// bytes over a valid file: never a panic (see `fuzz/rdb_check.rs`).
fn mutate_many(data: &[u8], rounds: usize, seed: u64) {
    let limits = rdb_check::default_limits();
    let mut rng = StdRng::seed_from_u64(seed);
    // Cheap: a prefix of a big file exercises the same parsers.
    let data = &data[..data.len().min(16 * 1024)];
    for _ in 0..rounds {
        let mut d = data.to_vec();
        for _ in 0..rng.gen_range(1..4) {
            let at = rng.gen_range(0..d.len().max(1));
            match rng.gen_range(0..5) {
                0 if !d.is_empty() => d[at] ^= 1 << rng.gen_range(0..8),
                1 if !d.is_empty() => d[at] = rng.gen(),
                2 => d.truncate(at),
                3 => d.insert(at.min(d.len()), rng.gen()),
                _ if !d.is_empty() => d[at] = [0x80, 0x81, 0xC3, 0xFF, 0xFE][rng.gen_range(0..5)],
                _ => {}
            }
        }
        rdb_check::check(&d, &limits);
        // As a payload too: the body of a file with a valid footer.
        if d.len() > 9 {
            rdb_check::check(&payload_of(&d[9..]), &limits);
        }
    }
}

fn payload_of(body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&10u16.to_le_bytes());
    let crc = lattice::facade::persistence::rdb::CRC64.checksum(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

/// Our writer's files load back through our loader: values, encodings,
/// expiries, databases and the per-key versions of the aux field.
#[test]
fn writer_and_loader_agree() {
    use lattice::facade::keyspace::hash::{HashLimits, HashValue};
    use lattice::facade::keyspace::list::ListValue;
    use lattice::facade::keyspace::set::SetValue;
    use lattice::facade::keyspace::zset::{ZLimits, ZSetValue};
    use lattice::facade::keyspace::Entry;
    use lattice::facade::persistence::rdb::encode;

    let hl = HashLimits {
        entries: 512,
        value: 64,
    };
    let zl = ZLimits {
        max_entries: 128,
        max_value: 64,
    };
    let mut values = vec![
        Value::string(b"12"),
        Value::string(b"short"),
        Value::string(&b"ab".repeat(300)),
    ];
    let (mut l, mut h, mut hbig, mut s, mut sbig) = (
        ListValue::new(),
        HashValue::default(),
        HashValue::default(),
        SetValue::default(),
        SetValue::default(),
    );
    for i in 0..700 {
        let v = format!("v{i}");
        l.push_back(-2, v.as_bytes());
        hbig.set(v.as_bytes(), b"x", hl);
        sbig.add(v.as_bytes(), 512);
        if i < 10 {
            h.set(v.as_bytes(), &[b'y'; 3], hl);
            s.add(i.to_string().as_bytes(), 512);
        }
    }
    let zs = |n: usize| {
        let items = (0..n)
            .map(|i| {
                (
                    format!("m{i}").into_bytes().into_boxed_slice(),
                    i as f64 * 0.5,
                )
            })
            .collect();
        ZSetValue::from_sorted(items, zl)
    };
    values.extend([
        Value::List(Box::new(l)),
        Value::Hash(Box::new(h)),
        Value::Hash(Box::new(hbig)),
        Value::Set(Box::new(s)),
        Value::Set(Box::new(sbig)),
        Value::ZSet(Box::new(zs(5))),
        Value::ZSet(Box::new(zs(300))),
    ]);
    let entries: Vec<Entry> = values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let expire = if i % 3 == 0 {
                4_000_000_000_000 + i as u64
            } else {
                0
            };
            Entry::new(
                format!("k{i}").as_bytes().into(),
                v,
                expire,
                1000 + i as u64,
            )
        })
        .collect();
    let mut body = Vec::new();
    encode::write_header(&mut body);
    let (a, b) = entries.split_at(4);
    encode::write_select_db(&mut body, 0, a.len() as u64, 0);
    encode::encode_entries(&mut body, a.iter(), &encode::SaveOpts::default());
    encode::write_select_db(&mut body, 5, b.len() as u64, 0);
    encode::encode_entries(&mut body, b.iter(), &encode::SaveOpts::default());
    let mut w = encode::FileWriter::new(Vec::new(), true);
    w.write(&body).unwrap();
    let file = w.finish().unwrap();
    let limits = rdb_check::default_limits();
    let opts = LoadOpts {
        on_resize: None,
        on_aux: None,
        limits: &limits,
        verify_checksum: true,
    };
    let mut got = Vec::new();
    let sum = decode::load(&file[..], &opts, &mut |k| {
        got.push(k);
        Ok(())
    })
    .unwrap();
    assert_eq!(sum.rdb_version, 10);
    assert_eq!(got.len(), entries.len());
    for (i, (k, e)) in got.iter().zip(&entries).enumerate() {
        assert_eq!(k.key, e.key.to_vec());
        assert_eq!(k.db, if i < 4 { 0 } else { 5 });
        assert_eq!(k.version, Some(e.version));
        assert_eq!(k.expire_at_ms, e.expire_at());
        assert_eq!(k.value.encoding(), e.value.encoding(), "k{i}");
        assert!(canon(&k.value) == canon(&e.value), "k{i}");
    }
}
