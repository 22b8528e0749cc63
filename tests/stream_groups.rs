//! Stream consumer groups through the real binary, side by side with
//! redis-server 7.0: random XGROUP / XREADGROUP / XACK / XPENDING / XCLAIM /
//! XAUTOCLAIM / XINFO give the same replies (delivery times and idle times
//! masked: the two servers read their own clocks); streams with groups move
//! both ways through DUMP/RESTORE and through RDB files; a redis-server
//! replica of lattice-server ends with the same PELs and consumers (what
//! XREADGROUP and the claims propagate); a blocked XREADGROUP is woken by an XADD from
//! another client, and fails as Redis's does when its group or key goes;
//! mutated payloads of a stream with groups never panic the loader or the
//! server, whatever group command runs on what loaded.
mod common;
#[path = "../fuzz/rdb_check.rs"]
mod rdb_check;
use common::*;

use lattice::facade::persistence::rdb::CRC64;

use rand::{rngs::StdRng, Rng, SeedableRng};
use redis::Value as V;

type C = redis::Connection;

fn is_bulk(v: &V) -> bool {
    matches!(v, V::BulkString(_) | V::SimpleString(_))
}

/// Replaces what depends on a server's clock with 0: a PEL row's time
/// ([id, consumer, time, count] and [id, time, count]), `seen-time` and
/// `idle` fields; and `radix-tree-nodes` (Redis's rax internals).
fn mask(v: V) -> V {
    mask_fields(v, true)
}

/// `radix-tree-nodes` alone masked: for a stream moved as is.
fn mask_nodes(v: V) -> V {
    mask_fields(v, false)
}

fn masked(k: &V, times: bool) -> bool {
    match k {
        V::BulkString(b) => {
            b == b"radix-tree-nodes" || (times && (b == b"seen-time" || b == b"idle"))
        }
        _ => false,
    }
}

fn mask_fields(v: V, times: bool) -> V {
    match v {
        V::Array(items) => {
            let mut items: Vec<V> = items.into_iter().map(|v| mask_fields(v, times)).collect();
            let n = items.len();
            let int = |v: &V| matches!(v, V::Int(_));
            if times
                && n == 4
                && is_bulk(&items[0])
                && is_bulk(&items[1])
                && int(&items[2])
                && int(&items[3])
            {
                items[2] = V::Int(0);
            } else if times && n == 3 && is_bulk(&items[0]) && int(&items[1]) && int(&items[2]) {
                items[1] = V::Int(0);
            }
            for i in 1..n {
                if masked(&items[i - 1], times) && int(&items[i]) {
                    items[i] = V::Int(0);
                }
            }
            V::Array(items)
        }
        V::Map(pairs) => V::Map(
            pairs
                .into_iter()
                .map(|(k, v)| {
                    let v = if masked(&k, times) {
                        V::Int(0)
                    } else {
                        mask_fields(v, times)
                    };
                    (k, v)
                })
                .collect(),
        ),
        other => other,
    }
}

fn some_id(rng: &mut StdRng, ms: u64) -> String {
    match rng.gen_range(0..6) {
        0 => "0".into(),
        1 => "$".into(),
        2 => "-".into(),
        3 => "bad".into(),
        _ => format!("{}-0", rng.gen_range(1000..=ms)),
    }
}

fn pel_ids(rng: &mut StdRng, ms: u64) -> Vec<String> {
    (0..rng.gen_range(1..4))
        .map(|_| format!("{}-0", rng.gen_range(1000..=ms)))
        .collect()
}

fn draw_group(rng: &mut StdRng, key: &str, g: &str, c: &str, ms: u64) -> Vec<String> {
    match rng.gen_range(0..6) {
        0 => {
            let mut l = s(&["XGROUP", "CREATE", key, g, &some_id(rng, ms)]);
            if rng.gen_bool(0.5) {
                l.push("MKSTREAM".into());
            }
            if rng.gen_bool(0.3) {
                l.extend(["ENTRIESREAD".into(), rng.gen_range(-2..6).to_string()]);
            }
            l
        }
        1 => {
            let mut l = s(&["XGROUP", "SETID", key, g, &some_id(rng, ms)]);
            if rng.gen_bool(0.3) {
                l.extend(["ENTRIESREAD".into(), rng.gen_range(-1..6).to_string()]);
            }
            l
        }
        2 => s(&["XGROUP", "DESTROY", key, g]),
        3 => s(&["XGROUP", "CREATECONSUMER", key, g, c]),
        4 => s(&["XGROUP", "DELCONSUMER", key, g, c]),
        _ => s(&["XGROUP", "HELP"]),
    }
}

fn draw_read(rng: &mut StdRng, key: &str, g: &str, c: &str, ms: u64) -> Vec<String> {
    let mut l = s(&["XREADGROUP", "GROUP", g, c]);
    if rng.gen_bool(0.5) {
        l.extend(["COUNT".into(), rng.gen_range(0..4).to_string()]);
    }
    if rng.gen_bool(0.2) {
        l.push("NOACK".into());
    }
    l.push("STREAMS".into());
    let id = match rng.gen_range(0..5) {
        0 => "0".to_string(),
        1 => format!("{}-0", rng.gen_range(1000..=ms)),
        _ => ">".to_string(),
    };
    if rng.gen_bool(0.2) {
        l.extend([key.into(), "s1".into(), id.clone(), ">".into()]);
    } else {
        l.extend([key.into(), id]);
    }
    l
}

fn draw_claim(rng: &mut StdRng, key: &str, g: &str, c: &str, ms: u64) -> Vec<String> {
    if rng.gen_bool(0.5) {
        let mut l = s(&["XCLAIM", key, g, c, "0"]);
        l.extend(pel_ids(rng, ms));
        for opt in ["JUSTID", "FORCE"] {
            if rng.gen_bool(0.3) {
                l.push(opt.into());
            }
        }
        if rng.gen_bool(0.2) {
            l.extend(["RETRYCOUNT".into(), rng.gen_range(0..9).to_string()]);
        }
        if rng.gen_bool(0.2) {
            l.extend([
                "LASTID".into(),
                format!("{}-0", rng.gen_range(1000..=ms + 3)),
            ]);
        }
        return l;
    }
    let start = pick(rng, &["0", "-", "(1005"]).to_string();
    let mut l = s(&["XAUTOCLAIM", key, g, c, "0", &start]);
    if rng.gen_bool(0.5) {
        l.extend(["COUNT".into(), rng.gen_range(1..4).to_string()]);
    }
    if rng.gen_bool(0.3) {
        l.push("JUSTID".into());
    }
    l
}

fn draw(rng: &mut StdRng, ms: &mut u64) -> Vec<String> {
    let key = pick(rng, &["s0", "s0", "s1", "str"]).to_string();
    let g = pick(rng, &["g0", "g1"]);
    let c = pick(rng, &["c0", "c1", "c2"]);
    let m = *ms;
    match rng.gen_range(0..24) {
        0..=4 => {
            *ms += 1;
            s(&["XADD", &key, &format!("{}-0", *ms), "f", &ms.to_string()])
        }
        5 | 6 => draw_group(rng, &key, g, c, m),
        7..=10 => draw_read(rng, &key, g, c, m),
        11 | 12 => {
            let mut l = s(&["XACK", &key, g]);
            l.extend(pel_ids(rng, m));
            l
        }
        13 => s(&["XPENDING", &key, g]),
        14 => {
            let mut l = s(&["XPENDING", &key, g]);
            if rng.gen_bool(0.3) {
                l.extend(["IDLE".into(), "0".into()]);
            }
            l.extend(s(&[pick(rng, &["-", "(1003"]), pick(rng, &["+", "(1010"])]));
            l.push(rng.gen_range(0..5).to_string());
            if rng.gen_bool(0.5) {
                l.push(c.into());
            }
            l
        }
        15..=17 => draw_claim(rng, &key, g, c, m),
        18 => {
            let mut l = s(&["XDEL", &key]);
            l.extend(pel_ids(rng, m));
            l
        }
        19 => s(&[
            "XTRIM",
            &key,
            "MAXLEN",
            "=",
            &rng.gen_range(0..8).to_string(),
        ]),
        20 => s(&["XINFO", "GROUPS", &key]),
        21 => s(&["XINFO", "CONSUMERS", &key, g]),
        22 => s(&["XINFO", "STREAM", &key, "FULL", "COUNT", "3"]),
        _ => s(&["SET", "str", "x"]),
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
        let mut rng = StdRng::seed_from_u64(7 + resp);
        let mut ms = 1000;
        for step in 0..2500 {
            let line = draw(&mut rng, &mut ms);
            let (x, y) = (run(a, &line).map(mask), run(b, &line).map(mask));
            assert_eq!(x, y, "RESP{resp} step {step}: {line:?}");
        }
        assert_eq!(digest(a), digest(b));
        for k in ["s0", "s1"] {
            let l = s(&["XINFO", "STREAM", k, "FULL", "COUNT", "0"]);
            assert_eq!(run(a, &l).map(mask), run(b, &l).map(mask), "{k}");
        }
    }
}

/// A stream with two groups, pending entries (one of a deleted entry), a
/// consumer without any, and a NOACK read.
fn build_groups(c: &mut C) {
    build_groups_seq(c, 1);
}

/// [`build_groups`] with entry IDs `<i>-<seq>` (an active node's IDs
/// carry its slot: tests/active_streams.rs).
fn build_groups_seq(c: &mut C, seq: u64) {
    let id = |i: u64| format!("{i}-{seq}");
    for i in 1..=20 {
        let _: String = cmd(c, &["XADD", "k", &id(i), "f", &i.to_string()]);
    }
    let _: String = cmd(c, &["XGROUP", "CREATE", "k", "g1", "0"]);
    let _: String = cmd(
        c,
        &["XGROUP", "CREATE", "k", "g2", &id(5), "ENTRIESREAD", "5"],
    );
    let _: V = cmd(
        c,
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "alice",
            "COUNT",
            "4",
            "STREAMS",
            "k",
            ">",
        ],
    );
    let _: V = cmd(
        c,
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "bob",
            "COUNT",
            "3",
            "STREAMS",
            "k",
            ">",
        ],
    );
    let _: V = cmd(
        c,
        &[
            "XREADGROUP",
            "GROUP",
            "g2",
            "carol",
            "NOACK",
            "COUNT",
            "2",
            "STREAMS",
            "k",
            ">",
        ],
    );
    let _: i64 = cmd(c, &["XGROUP", "CREATECONSUMER", "k", "g2", "dave"]);
    let _: i64 = cmd(c, &["XDEL", "k", &id(2)]);
    let _: i64 = cmd(c, &["XACK", "k", "g1", &id(3)]);
    let _: String = cmd(c, &["XGROUP", "CREATE", "empty", "g", "$", "MKSTREAM"]);
}

fn full(c: &mut C, key: &str) -> V {
    mask_nodes(run(c, &s(&["XINFO", "STREAM", key, "FULL", "COUNT", "0"])).unwrap())
}

#[test]
fn groups_move_both_ways_through_dump_and_rdb_files() {
    let o = RedisOracle::start(&[]);
    let srv = Server::start(&[]);
    let (a, b) = (&mut srv.conn(), &mut o.conn());
    build_groups(b);
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
    copy(b, a);
    let want = (full(b, "k"), full(b, "empty"));
    assert_eq!((full(a, "k"), full(a, "empty")), want);
    let _: String = cmd(a, &["DEBUG", "RELOAD"]);
    assert_eq!((full(a, "k"), full(a, "empty")), want);
    let _: () = redis::cmd("FLUSHALL").query(b).unwrap();
    copy(a, b);
    assert_eq!((full(b, "k"), full(b, "empty")), want);
    assert_eq!(digest(a), digest(b));

    // Whole files: redis-server's dump.rdb loads here, ours loads there.
    let _: String = cmd(b, &["SAVE"]);
    let dir = o.dir.to_str().unwrap().to_string();
    let from_redis = Server::start(&["--dir", &dir, "--dbfilename", "dump.rdb"]);
    let c = &mut from_redis.conn();
    assert_eq!((full(c, "k"), full(c, "empty")), want);
    // Ours replaces redis-server's file in the same directory.
    std::fs::remove_file(o.dir.join("dump.rdb")).unwrap();
    let _: String = cmd(c, &["SAVE"]);
    let back = RedisOracle::start(&["--dir", &dir, "--dbfilename", "dump.rdb"]);
    let r = &mut back.conn();
    assert_eq!((full(r, "k"), full(r, "empty")), want);
}

#[test]
fn a_redis_replica_gets_the_same_groups() {
    let srv = Server::start(&[]);
    let port = srv.port.to_string();
    let o = RedisOracle::start(&["--replicaof", "127.0.0.1", &port]);
    let (m, r) = (&mut srv.conn(), &mut o.conn());
    eventually("the replica's link", || {
        info_field::<String>(r, "master_link_status") == "up"
    });
    build_groups(m);
    for i in 1..=3 {
        let _: i64 = cmd(m, &["XDEL", "k", &format!("{}-1", 4 + i)]);
    }
    let _: V = cmd(m, &["XCLAIM", "k", "g1", "erin", "0", "1-1", "6-1", "7-1"]);
    let _: V = cmd(
        m,
        &["XAUTOCLAIM", "k", "g1", "frank", "0", "0", "COUNT", "2"],
    );
    let _: V = cmd(
        m,
        &[
            "XREADGROUP",
            "GROUP",
            "g2",
            "carol",
            "NOACK",
            "STREAMS",
            "k",
            ">",
        ],
    );
    let _: i64 = cmd(m, &["XGROUP", "DELCONSUMER", "k", "g1", "bob"]);
    eventually("the replica in sync", || in_sync(m, r));
    // Entries-read is not propagated by Redis 7.0 for XREADGROUP without
    // NOACK (its XCLAIM carries LASTID only), so the PELs, consumers and
    // last IDs are compared, not the lag.
    for (key, group) in [("k", "g1"), ("k", "g2"), ("empty", "g")] {
        for line in [
            s(&["XPENDING", key, group]),
            s(&["XPENDING", key, group, "-", "+", "100"]),
            s(&["XINFO", "CONSUMERS", key, group]),
        ] {
            assert_eq!(run(m, &line).map(mask), run(r, &line).map(mask), "{line:?}");
        }
    }
    let last_ids = |c: &mut C| -> Vec<String> {
        let groups: Vec<std::collections::HashMap<String, V>> = cmd(c, &["XINFO", "GROUPS", "k"]);
        groups
            .iter()
            .map(|g| format!("{:?}", g["last-delivered-id"]))
            .collect()
    };
    assert_eq!(last_ids(m), last_ids(r));
}

fn wait_blocked(c: &mut C, n: u64) {
    eventually("a blocked client", || {
        info_field::<u64>(c, "blocked_clients") == n
    });
}

#[test]
fn blocked_xreadgroup_is_served_or_told_why_not() {
    let srv = Server::start(&[]);
    let c = &mut srv.conn();
    let _: String = cmd(c, &["XGROUP", "CREATE", "q", "g", "$", "MKSTREAM"]);
    let block = [
        "XREADGROUP",
        "GROUP",
        "g",
        "w",
        "BLOCK",
        "0",
        "STREAMS",
        "q",
        ">",
    ];

    // Woken by an XADD on another connection, with an XREAD behind it.
    let (mut r1, mut r2) = (srv.raw(), srv.raw());
    raw_send(&mut r1, &block);
    raw_send(&mut r2, &["XREAD", "BLOCK", "0", "STREAMS", "q", "$"]);
    wait_blocked(c, 2);
    let _: String = cmd(c, &["XADD", "q", "7-1", "a", "b"]);
    assert!(read_reply(&mut r1).contains("7-1"));
    assert!(read_reply(&mut r2).contains("7-1"));
    let pending: V = cmd(c, &["XPENDING", "q", "g"]);
    assert!(format!("{pending:?}").contains("7-1"), "{pending:?}");

    // Its group destroyed: NOGROUP.
    raw_send(&mut r1, &block);
    wait_blocked(c, 1);
    let _: i64 = cmd(c, &["XGROUP", "DESTROY", "q", "g"]);
    let reply = read_reply(&mut r1);
    assert!(
        reply.contains("NOGROUP the consumer group this client was blocked on no longer exists"),
        "{reply}"
    );

    // Its stream deleted: UNBLOCKED.
    let _: String = cmd(c, &["XGROUP", "CREATE", "q", "g", "$"]);
    raw_send(&mut r1, &block);
    wait_blocked(c, 1);
    let _: i64 = cmd(c, &["DEL", "q"]);
    let reply = read_reply(&mut r1);
    assert!(
        reply.contains("UNBLOCKED the stream key no longer exists"),
        "{reply}"
    );
}

/// A stream `q` with group `g`, and a connection blocked reading it.
fn blocked_on_fresh_stream(srv: &Server, c: &mut C) -> Raw {
    let _: i64 = cmd(c, &["DEL", "q"]);
    let _: String = cmd(c, &["XADD", "q", "1-0", "f", "v"]);
    let _: String = cmd(c, &["XGROUP", "CREATE", "q", "g", "$"]);
    let mut r = srv.raw();
    let block = [
        "XREADGROUP",
        "GROUP",
        "g",
        "w",
        "BLOCK",
        "0",
        "STREAMS",
        "q",
        ">",
    ];
    raw_send(&mut r, &block);
    wait_blocked(c, 1);
    r
}

fn assert_unblocked(r: &mut Raw, how: &str) {
    let reply = read_reply(r);
    assert!(
        reply.contains("UNBLOCKED the stream key no longer exists"),
        "{how}: {reply}"
    );
}

#[test]
fn a_stream_gone_by_itself_moved_or_renamed_wakes_its_readers_as_redis() {
    let srv = Server::start(&[]);
    let c = &mut srv.conn();

    // Active expiry.
    let mut r = blocked_on_fresh_stream(&srv, c);
    let _: i64 = cmd(c, &["PEXPIRE", "q", "1"]);
    assert_unblocked(&mut r, "active expiry");

    // Lazy expiry, by another client's access.
    let _: String = cmd(c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let mut r = blocked_on_fresh_stream(&srv, c);
    let _: i64 = cmd(c, &["PEXPIRE", "q", "1"]);
    eventually("lazy expiry", || cmd::<i64>(c, &["EXISTS", "q"]) == 0);
    assert_unblocked(&mut r, "lazy expiry");
    let _: String = cmd(c, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);

    // MOVE to another database.
    let mut r = blocked_on_fresh_stream(&srv, c);
    let _: i64 = cmd(c, &["MOVE", "q", "1"]);
    assert_unblocked(&mut r, "MOVE");

    // RENAMEd away.
    let mut r = blocked_on_fresh_stream(&srv, c);
    let _: String = cmd(c, &["RENAME", "q", "elsewhere"]);
    assert_unblocked(&mut r, "RENAME");

    // Eviction under maxmemory (the only key with a TTL, so the only one
    // volatile-random may evict).
    let mut r = blocked_on_fresh_stream(&srv, c);
    let _: i64 = cmd(c, &["EXPIRE", "q", "1000"]);
    let used: u64 = info_field(c, "used_memory");
    let _: String = cmd(c, &["CONFIG", "SET", "maxmemory-policy", "volatile-random"]);
    let _: String = cmd(
        c,
        &["CONFIG", "SET", "maxmemory", &(used + 200_000).to_string()],
    );
    let big = "x".repeat(10_000);
    for i in 0..100 {
        let _: redis::RedisResult<String> = redis::cmd("SET").arg(i).arg(&big).query(c);
    }
    assert_eq!(cmd::<i64>(c, &["EXISTS", "q"]), 0);
    assert_unblocked(&mut r, "eviction");
    let _: String = cmd(c, &["CONFIG", "SET", "maxmemory", "0"]);

    // A plain XREAD is not told: it keeps waiting (Redis serves it from the
    // next stream at the key).
    let _: String = cmd(c, &["FLUSHALL"]);
    let _: String = cmd(c, &["XADD", "q", "5-0", "f", "v"]);
    let mut r = srv.raw();
    raw_send(&mut r, &["XREAD", "BLOCK", "0", "STREAMS", "q", "$"]);
    wait_blocked(c, 1);
    let _: i64 = cmd(c, &["PEXPIRE", "q", "1"]);
    eventually("expiry", || cmd::<i64>(c, &["EXISTS", "q"]) == 0);
    wait_blocked(c, 1);
    let _: String = cmd(c, &["XADD", "q", "7-0", "a", "b"]);
    let reply = read_reply(&mut r);
    assert!(reply.contains("7-0"), "{reply}");
}

fn raw_send(r: &mut Raw, args: &[&str]) {
    let mut b = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        b.extend(format!("${}\r\n{a}\r\n", a.len()).bytes());
    }
    r.send(&b);
}

fn with_crc(body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&10u16.to_le_bytes());
    let crc = CRC64.checksum(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

#[test]
fn mutated_group_payloads_never_panic() {
    let srv = Server::start(&[]);
    let c = &mut srv.conn();
    build_groups(c);
    let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(c).unwrap();
    let body = &dump[..dump.len() - 10];
    let limits = rdb_check::default_limits();
    let mut rng = StdRng::seed_from_u64(25);
    let (mut loaded, mut tried) = (0, 0);
    for i in 0..1500 {
        let mut d = body.to_vec();
        // Mostly in the groups, which follow the nodes.
        let from = if rng.gen_bool(0.7) {
            body.len() * 2 / 3
        } else {
            0
        };
        for _ in 0..rng.gen_range(1..4) {
            let at = rng.gen_range(from..d.len().max(from + 1)).min(d.len());
            match rng.gen_range(0..4) {
                0 if at < d.len() => d[at] ^= 1 << rng.gen_range(0..8),
                1 if at < d.len() => d[at] = rng.gen(),
                2 => d.truncate(at),
                _ => d.insert(at, rng.gen()),
            }
        }
        let payload = with_crc(&d);
        rdb_check::check(&payload, &limits);
        if i % 4 != 0 {
            continue;
        }
        tried += 1;
        let restored = redis::cmd("RESTORE")
            .arg("m")
            .arg(0)
            .arg(&payload)
            .arg("REPLACE")
            .query::<V>(c);
        if restored.is_err() {
            continue;
        }
        loaded += 1;
        for line in [
            s(&["XINFO", "STREAM", "m", "FULL"]),
            s(&["XINFO", "GROUPS", "m"]),
            s(&["XPENDING", "m", "g1", "-", "+", "10"]),
            s(&["XREADGROUP", "GROUP", "g1", "alice", "STREAMS", "m", "0"]),
            s(&["XREADGROUP", "GROUP", "g1", "zed", "STREAMS", "m", ">"]),
            s(&["XAUTOCLAIM", "m", "g1", "bob", "0", "0"]),
            s(&["XACK", "m", "g1", "1-1", "4-1"]),
            s(&["XGROUP", "DELCONSUMER", "m", "g1", "bob"]),
            s(&["DEBUG", "DIGEST-VALUE", "m"]),
        ] {
            let _ = run(c, &line);
        }
    }
    assert!(tried > 300 && loaded > 0, "{loaded} of {tried} loaded");
    assert_eq!(cmd::<String>(c, &["PING"]), "PONG");
}

/// What two nodes must agree on for a stream's groups: the PELs (idle times
/// masked), the consumers and the groups' last IDs (entries-read is not
/// propagated by XREADGROUP, as with Redis replicas).
fn group_view(c: &mut C) -> Vec<Result<V, String>> {
    let mut v = vec![run(c, &s(&["XRANGE", "k", "-", "+"]))];
    for g in ["g1", "g2"] {
        for line in [
            s(&["XPENDING", "k", g, "-", "+", "100"]),
            s(&["XINFO", "CONSUMERS", "k", g]),
        ] {
            v.push(run(c, &line).map(mask));
        }
    }
    let groups: Vec<std::collections::HashMap<String, V>> = cmd(c, &["XINFO", "GROUPS", "k"]);
    let last = groups
        .iter()
        .map(|g| g["last-delivered-id"].clone())
        .collect();
    v.push(Ok(V::Array(last)));
    v
}

fn same_groups(a: &mut C, b: &mut C) -> bool {
    cmd::<i64>(a, &["EXISTS", "k"]) == 1 && group_view(a) == group_view(b)
}

#[test]
fn groups_on_an_active_pair_replicate_whole() {
    let p = Pair::start(&[]);
    let (a, b) = (&mut p.a.conn(), &mut p.b.conn());
    // Explicit IDs on an active node carry its slot (DECISIONS 112).
    let slot: Vec<String> = cmd(a, &["CONFIG", "GET", "node-slot"]);
    let seq: u64 = slot[1].parse().unwrap();
    let id = |i: u64| format!("{i}-{seq}");
    build_groups_seq(a, seq);
    eventually("b to hold a's groups", || same_groups(a, b));
    // Group writes on b travel to a.
    let _: i64 = cmd(b, &["XACK", "k", "g1", &id(1)]);
    let _: V = cmd(b, &["XCLAIM", "k", "g1", "zoe", "0", &id(4)]);
    let _: V = cmd(
        b,
        &[
            "XREADGROUP",
            "GROUP",
            "g2",
            "ann",
            "COUNT",
            "2",
            "STREAMS",
            "k",
            ">",
        ],
    );
    eventually("a to hold b's group writes", || same_groups(a, b));
    // Both sides of a partition write the groups: the entries merge and the
    // groups go whole to the newer side (DECISIONS 116), and both end with
    // the same groups.
    p.partition();
    let _: V = cmd(
        a,
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "alice",
            "COUNT",
            "3",
            "STREAMS",
            "k",
            ">",
        ],
    );
    let _: i64 = cmd(b, &["XACK", "k", "g1", &id(4), &id(5)]);
    let _: i64 = cmd(b, &["XGROUP", "CREATECONSUMER", "k", "g2", "bea"]);
    p.heal();
    eventually("the pair to agree on the groups", || same_groups(a, b));
    converged(&[&p.a, &p.b]);
}
