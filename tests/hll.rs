//! HyperLogLog through the real binary, side by side with redis-server 7.0:
//! the same commands give the same replies and the same sketch bytes
//! (sparse, promoted, dense, merged, cached), sketches move between the
//! two servers as plain strings, and damaged sketches get Redis's errors.
mod common;
use common::*;

use rand::{rngs::StdRng, Rng, SeedableRng};

type C = redis::Connection;

fn get(c: &mut C, k: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(k).query(c).unwrap()
}

/// A random HyperLogLog command over six keys.
fn draw(rng: &mut StdRng) -> Vec<String> {
    let k = |rng: &mut StdRng| format!("h{}", rng.gen_range(0..6));
    let mut v: Vec<String> = match rng.gen_range(0..20) {
        0..=11 => {
            let n = [0, 1, 3, 20, 300, 1500][rng.gen_range(0..6)];
            let mut v = vec!["PFADD".into(), k(rng)];
            let scale = 10u64.pow(rng.gen_range(1..7));
            v.extend((0..n).map(|_| rng.gen_range(0..scale).to_string()));
            v
        }
        12..=14 => vec!["PFCOUNT".into(), k(rng)],
        15 => vec!["PFCOUNT".into(), k(rng), k(rng), "missing".into()],
        16..=17 => vec!["PFMERGE".into(), k(rng), k(rng), k(rng)],
        _ => {
            let sub = ["ENCODING", "DECODE", "TODENSE", "GETREG"][rng.gen_range(0..4)];
            vec!["PFDEBUG".into(), sub.into(), k(rng)]
        }
    };
    v.shrink_to_fit();
    v
}

#[test]
fn same_replies_and_bytes_as_redis() {
    let s = Server::start(&["--hll-sparse-max-bytes", "1200"]);
    let o = RedisOracle::start(&["--hll-sparse-max-bytes", "1200"]);
    let (a, b) = (&mut s.conn(), &mut o.conn());
    let mut rng = StdRng::seed_from_u64(25);
    for step in 0..600 {
        let line = draw(&mut rng);
        let (ours, theirs) = (run(a, &line), run(b, &line));
        assert_eq!(ours, theirs, "step {step}: {:?}", &line[..2]);
        let key = if line[0] == "PFDEBUG" {
            &line[2]
        } else {
            &line[1]
        };
        assert_eq!(get(a, key), get(b, key), "step {step}: bytes of {key}");
    }
    assert_eq!(digest(a), digest(b));
}

#[test]
fn sketches_move_between_servers_as_strings() {
    let s = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    let (a, b) = (&mut s.conn(), &mut o.conn());
    let els: Vec<String> = (0..5000).map(|i| format!("e{i}")).collect();
    let mut args = vec!["PFADD".to_string(), "theirs".into()];
    args.extend(els.iter().take(200).cloned());
    run(b, &args).unwrap();
    args[1] = "dense".into();
    args.extend(els.iter().cloned());
    run(b, &args).unwrap();
    for k in ["theirs", "dense"] {
        let sketch = get(b, k).unwrap();
        let _: () = redis::cmd("SET").arg(k).arg(&sketch).query(a).unwrap();
        let ours: i64 = cmd(a, &["PFCOUNT", k]);
        assert_eq!(ours, cmd::<i64>(b, &["PFCOUNT", k]), "{k}");
        let dump: Vec<u8> = redis::cmd("DUMP").arg(k).query(a).unwrap();
        let _: () = redis::cmd("RESTORE")
            .arg(format!("{k}2"))
            .arg(0)
            .arg(dump)
            .query(b)
            .unwrap();
        assert_eq!(get(b, &format!("{k}2")), get(a, k));
    }
    assert_eq!(cmd::<String>(a, &["PFDEBUG", "ENCODING", "dense"]), "dense");
    assert_eq!(cmd::<String>(a, &["OBJECT", "ENCODING", "theirs"]), "raw");
    let union: i64 = cmd(a, &["PFCOUNT", "theirs", "dense"]);
    assert_eq!(union, cmd::<i64>(b, &["PFCOUNT", "theirs", "dense"]));
}

#[test]
fn errors_as_redis() {
    let s = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    let (a, b) = (&mut s.conn(), &mut o.conn());
    let lines: &[&[&str]] = &[
        &["SET", "str", "not a sketch at all"],
        &["LPUSH", "list", "x"],
        &["PFADD", "str", "a"],
        &["PFCOUNT", "str"],
        &["PFCOUNT", "list"],
        &["PFCOUNT", "nokey", "str"],
        &["PFMERGE", "dst", "str"],
        &["PFMERGE", "list", "nokey"],
        &["PFADD", "h", "a", "b", "c"],
        &["APPEND", "h", "hello"],
        &["PFCOUNT", "h"],
        &["PFCOUNT", "h", "h"],
        &["PFADD", "h", "zz"],
        &["PFDEBUG", "GETREG", "h"],
        &["PFDEBUG", "DECODE", "nokey"],
        &["PFDEBUG", "NOSUCH", "h"],
        &["PFADD", "d", "a"],
        &["PFDEBUG", "TODENSE", "d"],
        &["PFDEBUG", "DECODE", "d"],
        &["SETRANGE", "d", "4", "\x01"],
        &["PFCOUNT", "d"],
        &["PFADD", "e"],
        &["SETRANGE", "e", "4", "\x02"],
        &["PFCOUNT", "e"],
        &["PFSELFTEST", "extra"],
    ];
    for l in lines {
        let l: Vec<String> = l.iter().map(|x| x.to_string()).collect();
        assert_eq!(run(a, &l), run(b, &l), "{l:?}");
    }
}

#[test]
fn selftest_and_cache() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(cmd::<String>(c, &["PFSELFTEST"]), "OK");
    assert_eq!(cmd::<i64>(c, &["PFADD", "h", "a", "b", "c"]), 1);
    assert_eq!(get(c, "h").unwrap()[15], 0x80);
    assert_eq!(cmd::<i64>(c, &["PFCOUNT", "h"]), 3);
    assert_eq!(get(c, "h").unwrap()[8..16], [3, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(cmd::<i64>(c, &["PFADD", "h", "a"]), 0);
    assert_eq!(get(c, "h").unwrap()[15], 0);
}
