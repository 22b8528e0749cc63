//! Set commands as a client sees them: replies, errors, WRONGTYPE,
//! encodings and their conversion, RESP3 shapes, the multi-key algebra,
//! SPOP/SRANDMEMBER counts, and the SSCAN guarantee on a growing set.

mod common;
use common::*;

use std::collections::{HashMap, HashSet};

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn enc(c: &mut redis::Connection, k: &str) -> String {
    cmd(c, &["OBJECT", "ENCODING", k])
}

#[test]
fn basic_commands() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(cmd::<i64>(&mut c, &["SADD", "s", "3", "1", "2", "1"]), 3);
    assert_eq!(cmd::<i64>(&mut c, &["SADD", "s", "1"]), 0);
    // An intset answers in ascending order.
    assert_eq!(
        cmd::<Vec<String>>(&mut c, &["SMEMBERS", "s"]),
        vec!["1", "2", "3"]
    );
    assert_eq!(cmd::<i64>(&mut c, &["SCARD", "s"]), 3);
    assert_eq!(cmd::<i64>(&mut c, &["SCARD", "nokey"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["SISMEMBER", "s", "2"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["SISMEMBER", "s", "x"]), 0);
    assert_eq!(
        cmd::<Vec<i64>>(&mut c, &["SMISMEMBER", "s", "1", "x", "3"]),
        vec![1, 0, 1]
    );
    assert_eq!(
        cmd::<Vec<i64>>(&mut c, &["SMISMEMBER", "nokey", "1"]),
        vec![0]
    );
    assert_eq!(cmd::<i64>(&mut c, &["SREM", "s", "1", "x"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["SREM", "s", "2", "3"]), 2);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "s"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["SREM", "s", "2"]), 0);
}

#[test]
fn errors_and_wrongtype() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let wrong = "WRONGTYPE Operation against a key holding the wrong kind of value";
    cmd::<()>(&mut c, &["SET", "str", "x"]);
    cmd::<()>(&mut c, &["SADD", "s", "a"]);
    for args in [
        &["SADD", "str", "a"][..],
        &["SREM", "str", "a"],
        &["SMEMBERS", "str"],
        &["SPOP", "str"],
        &["SPOP", "str", "0"],
        &["SRANDMEMBER", "str"],
        &["SMOVE", "str", "s", "a"],
        &["SMOVE", "s", "str", "a"],
        &["SINTER", "str", "nokey"],
        &["SUNION", "nokey", "str"],
        &["SDIFF", "s", "str"],
        &["SINTERCARD", "2", "s", "str"],
        &["SSCAN", "str", "0"],
    ] {
        assert_eq!(cmd_err(&mut c, args), wrong, "{args:?}");
    }
    // Every key is type-checked, even after a missing one.
    assert_eq!(cmd_err(&mut c, &["SINTER", "nokey", "str"]), wrong);
    assert_eq!(
        cmd_err(&mut c, &["SINTERSTORE", "d", "nokey", "str"]),
        wrong
    );
    assert_eq!(cmd_err(&mut c, &["SINTERCARD", "2", "nokey", "str"]), wrong);
    // A missing source makes SMOVE answer 0 before any type check.
    assert_eq!(cmd::<i64>(&mut c, &["SMOVE", "nokey", "str", "a"]), 0);
    assert_eq!(
        cmd_err(&mut c, &["SPOP", "s", "-1"]),
        "ERR value is out of range, must be positive"
    );
    assert_eq!(
        cmd_err(&mut c, &["SPOP", "s", "1", "2"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(&mut c, &["SRANDMEMBER", "s", "-9223372036854775808"]),
        "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"
    );
    assert_eq!(
        cmd_err(&mut c, &["SINTERCARD", "0", "s"]),
        "ERR numkeys should be greater than 0"
    );
    assert_eq!(
        cmd_err(&mut c, &["SINTERCARD", "x", "s"]),
        "ERR numkeys should be greater than 0"
    );
    assert_eq!(
        cmd_err(&mut c, &["SINTERCARD", "2", "s"]),
        "ERR Number of keys can't be greater than number of args"
    );
    assert_eq!(
        cmd_err(&mut c, &["SINTERCARD", "1", "s", "LIMIT", "-1"]),
        "ERR LIMIT can't be negative"
    );
    assert_eq!(
        cmd_err(&mut c, &["SINTERCARD", "1", "s", "FOO", "1"]),
        "ERR syntax error"
    );
    assert_eq!(cmd_err(&mut c, &["SSCAN", "s", "x"]), "ERR invalid cursor");
}

#[test]
fn encodings_convert_once() {
    let s = Server::start(&["--set-max-intset-entries", "4"]);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SADD", "i", "1", "2", "3", "4"]);
    assert_eq!(enc(&mut c, "i"), "intset");
    cmd::<()>(&mut c, &["SADD", "i", "5"]);
    assert_eq!(enc(&mut c, "i"), "hashtable");
    cmd::<()>(&mut c, &["SREM", "i", "1", "2", "3"]);
    assert_eq!(enc(&mut c, "i"), "hashtable");
    cmd::<()>(&mut c, &["SADD", "j", "1"]);
    cmd::<()>(&mut c, &["SADD", "j", "a"]);
    assert_eq!(enc(&mut c, "j"), "hashtable");
    cmd::<()>(&mut c, &["SADD", "k", "a"]);
    assert_eq!(enc(&mut c, "k"), "hashtable");
    // Not canonical integers are strings.
    cmd::<()>(&mut c, &["SADD", "l", "01"]);
    assert_eq!(enc(&mut c, "l"), "hashtable");
    // Stored results are built as Redis builds them.
    cmd::<()>(&mut c, &["SADD", "x", "1", "2", "a"]);
    cmd::<()>(&mut c, &["SADD", "y", "1", "2", "b"]);
    assert_eq!(cmd::<i64>(&mut c, &["SINTERSTORE", "d", "x", "y"]), 2);
    assert_eq!(enc(&mut c, "d"), "intset");
    assert_eq!(cmd::<i64>(&mut c, &["SUNIONSTORE", "d", "x", "y"]), 4);
    assert_eq!(enc(&mut c, "d"), "hashtable");
}

#[test]
fn algebra_and_store() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SADD", "a", "1", "2", "3", "x"]);
    cmd::<()>(&mut c, &["SADD", "b", "2", "3", "4", "x"]);
    cmd::<()>(&mut c, &["SADD", "c", "3", "x", "9"]);
    let q = |c: &mut redis::Connection, a: &[&str]| sorted(cmd::<Vec<String>>(c, a));
    assert_eq!(q(&mut c, &["SINTER", "a", "b", "c"]), vec!["3", "x"]);
    assert_eq!(q(&mut c, &["SINTER", "a", "a"]), vec!["1", "2", "3", "x"]);
    assert!(q(&mut c, &["SINTER", "a", "nokey"]).is_empty());
    assert_eq!(
        q(&mut c, &["SUNION", "a", "nokey", "c"]),
        vec!["1", "2", "3", "9", "x"]
    );
    assert_eq!(q(&mut c, &["SDIFF", "a", "b"]), vec!["1"]);
    assert_eq!(q(&mut c, &["SDIFF", "a", "a"]), Vec::<String>::new());
    assert!(q(&mut c, &["SDIFF", "nokey", "a"]).is_empty());
    assert_eq!(cmd::<i64>(&mut c, &["SINTERCARD", "2", "a", "b"]), 3);
    assert_eq!(
        cmd::<i64>(&mut c, &["SINTERCARD", "2", "a", "b", "LIMIT", "2"]),
        2
    );
    assert_eq!(
        cmd::<i64>(&mut c, &["SINTERCARD", "2", "a", "b", "LIMIT", "0"]),
        3
    );
    assert_eq!(cmd::<i64>(&mut c, &["SINTERCARD", "2", "a", "nokey"]), 0);
    // Stores overwrite any type and drop the TTL.
    cmd::<()>(&mut c, &["SET", "d", "str", "EX", "100"]);
    assert_eq!(cmd::<i64>(&mut c, &["SINTERSTORE", "d", "a", "b"]), 3);
    assert_eq!(cmd::<i64>(&mut c, &["TTL", "d"]), -1);
    assert_eq!(q(&mut c, &["SMEMBERS", "d"]), vec!["2", "3", "x"]);
    assert_eq!(cmd::<i64>(&mut c, &["SDIFFSTORE", "d", "a", "b", "c"]), 1);
    assert_eq!(q(&mut c, &["SMEMBERS", "d"]), vec!["1"]);
    assert_eq!(cmd::<i64>(&mut c, &["SUNIONSTORE", "d", "d", "c"]), 4);
    // An empty result deletes the destination.
    assert_eq!(cmd::<i64>(&mut c, &["SINTERSTORE", "d", "a", "nokey"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "d"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["SDIFFSTORE", "d", "a", "a"]), 0);
    // COMMAND GETKEYS knows SINTERCARD's keys.
    let keys: Vec<String> = cmd(
        &mut c,
        &[
            "COMMAND",
            "GETKEYS",
            "SINTERCARD",
            "2",
            "a",
            "b",
            "LIMIT",
            "1",
        ],
    );
    assert_eq!(keys, vec!["a", "b"]);
}

#[test]
fn smove() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SADD", "src", "a", "b"]);
    assert_eq!(cmd::<i64>(&mut c, &["SMOVE", "src", "dst", "a"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["SMOVE", "src", "dst", "zz"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["SMOVE", "src", "src", "b"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["SMOVE", "src", "src", "zz"]), 0);
    assert_eq!(cmd::<Vec<String>>(&mut c, &["SMEMBERS", "dst"]), vec!["a"]);
    assert_eq!(cmd::<i64>(&mut c, &["SMOVE", "src", "dst", "b"]), 1);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "src"]), 0);
    assert_eq!(cmd::<i64>(&mut c, &["SCARD", "dst"]), 2);
    // Moving an integer into a new key makes an intset.
    cmd::<()>(&mut c, &["SADD", "n", "7"]);
    assert_eq!(cmd::<i64>(&mut c, &["SMOVE", "n", "m", "7"]), 1);
    assert_eq!(enc(&mut c, "m"), "intset");
}

#[test]
fn spop_and_srandmember() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let members: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
    let mut q = redis::cmd("SADD");
    q.arg("s").arg(&members);
    q.query::<()>(&mut c).unwrap();
    let all: HashSet<String> = members.iter().cloned().collect();
    for n in [1usize, 10, 40, 99, 100, 200] {
        let v: Vec<String> = cmd(&mut c, &["SRANDMEMBER", "s", &n.to_string()]);
        assert_eq!(v.len(), n.min(100));
        let set: HashSet<String> = v.iter().cloned().collect();
        assert_eq!(set.len(), v.len());
        assert!(set.is_subset(&all));
    }
    let v: Vec<String> = cmd(&mut c, &["SRANDMEMBER", "s", "-300"]);
    assert_eq!(v.len(), 300);
    assert!(v.iter().all(|m| all.contains(m)));
    assert!(cmd::<Vec<String>>(&mut c, &["SRANDMEMBER", "s", "0"]).is_empty());
    assert!(cmd::<Vec<String>>(&mut c, &["SRANDMEMBER", "nokey", "5"]).is_empty());
    assert_eq!(
        cmd::<Option<String>>(&mut c, &["SRANDMEMBER", "nokey"]),
        None
    );
    let one: String = cmd(&mut c, &["SPOP", "s"]);
    assert!(all.contains(&one));
    let ten: Vec<String> = cmd(&mut c, &["SPOP", "s", "10"]);
    assert_eq!(ten.iter().collect::<HashSet<_>>().len(), 10);
    assert_eq!(cmd::<i64>(&mut c, &["SCARD", "s"]), 89);
    assert!(!ten.contains(&one));
    assert!(cmd::<Vec<String>>(&mut c, &["SPOP", "s", "0"]).is_empty());
    let rest: Vec<String> = cmd(&mut c, &["SPOP", "s", "1000"]);
    assert_eq!(rest.len(), 89);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "s"]), 0);
    assert_eq!(cmd::<Option<String>>(&mut c, &["SPOP", "s"]), None);
    assert!(cmd::<Vec<String>>(&mut c, &["SPOP", "s", "3"]).is_empty());
    // Intsets pop too.
    cmd::<()>(&mut c, &["SADD", "i", "1", "2", "3"]);
    let p: Vec<String> = cmd(&mut c, &["SPOP", "i", "2"]);
    assert_eq!(p.len(), 2);
    assert_eq!(cmd::<i64>(&mut c, &["SCARD", "i"]), 1);
}

#[test]
fn resp3_shapes() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SADD", "s", "1", "2"]);
    let mut r = s.raw();
    let _ = raw_cmd(&mut r, &["HELLO", "3"]);
    assert_eq!(raw_cmd(&mut r, &["SMEMBERS", "s"]), "~2[1,2]");
    assert_eq!(raw_cmd(&mut r, &["SMEMBERS", "nokey"]), "~0[]");
    assert_eq!(raw_cmd(&mut r, &["SINTER", "s", "s"]), "~2[1,2]");
    assert_eq!(raw_cmd(&mut r, &["SUNION", "s"]), "~2[1,2]");
    assert_eq!(raw_cmd(&mut r, &["SDIFF", "s", "nokey"]), "~2[1,2]");
    assert!(raw_cmd(&mut r, &["SRANDMEMBER", "s", "-3"]).starts_with("*3["));
    assert!(raw_cmd(&mut r, &["SRANDMEMBER", "s", "5"]).starts_with("*2["));
    assert_eq!(raw_cmd(&mut r, &["SPOP", "nokey", "2"]), "~0[]");
    assert_eq!(raw_cmd(&mut r, &["SPOP", "nokey"]), "_");
    assert!(raw_cmd(&mut r, &["SPOP", "s", "1"]).starts_with("~1["));
    assert_eq!(raw_cmd(&mut r, &["SMISMEMBER", "s", "x"]), "*1[:0]");
}

#[test]
fn sscan_small_and_growing() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SADD", "small", "3", "1", "2"]);
    let (cur, items): (String, Vec<String>) = cmd(&mut c, &["SSCAN", "small", "0", "COUNT", "1"]);
    assert_eq!(
        (cur.as_str(), items),
        ("0", vec!["1".into(), "2".into(), "3".into()])
    );
    let (_, items): (String, Vec<String>) = cmd(&mut c, &["SSCAN", "small", "0", "MATCH", "[12]"]);
    assert_eq!(items, vec!["1", "2"]);
    // A big set that keeps growing (through several resizes) while it is
    // scanned: every member present from the start is returned.
    let original: Vec<String> = (0..1500).map(|i| format!("m{i}")).collect();
    let mut q = redis::cmd("SADD");
    q.arg("big").arg(&original);
    q.query::<()>(&mut c).unwrap();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut cur = "0".to_string();
    let mut round = 0;
    loop {
        let (next, items): (String, Vec<String>) =
            cmd(&mut c, &["SSCAN", "big", &cur, "COUNT", "100"]);
        for m in items {
            *seen.entry(m).or_insert(0) += 1;
        }
        round += 1;
        let grow: Vec<String> = (0..100).map(|i| format!("g{round}-{i}")).collect();
        let mut q = redis::cmd("SADD");
        q.arg("big").arg(&grow);
        q.query::<()>(&mut c).unwrap();
        if next == "0" {
            break;
        }
        cur = next;
    }
    for m in &original {
        assert_eq!(seen.get(m), Some(&1), "{m}");
    }
    // And while it shrinks.
    let mut seen = HashSet::new();
    let mut cur = "0".to_string();
    loop {
        let (next, items): (String, Vec<String>) =
            cmd(&mut c, &["SSCAN", "big", &cur, "COUNT", "100"]);
        seen.extend(items);
        let gone: Vec<String> = seen
            .iter()
            .filter(|m| m.starts_with('g'))
            .take(500)
            .cloned()
            .collect();
        if !gone.is_empty() {
            let mut q = redis::cmd("SREM");
            q.arg("big").arg(&gone);
            q.query::<()>(&mut c).unwrap();
        }
        if next == "0" {
            break;
        }
        cur = next;
    }
    assert!(original.iter().all(|m| seen.contains(m)));
}

mod replay {
    //! The effect stream of the hash and set writes is complete and
    //! deterministic: a random workload (SPOP, HINCRBYFLOAT and the stores
    //! included) runs in-process while a recorder keeps every effect; the
    //! effects replayed on a fresh server give the same keys, contents,
    //! encodings and versions.

    use std::collections::BTreeMap;
    use std::sync::Arc;

    use lattice::facade::commands::{replay, run_local};
    use lattice::facade::config::Config;
    use lattice::facade::core::client::ClientState;
    use lattice::facade::effects::Recorder;
    use lattice::facade::keyspace::hlc::Hlc;
    use lattice::facade::keyspace::{Value, SHARDS};
    use lattice::facade::server::Server;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn line(rng: &mut StdRng) -> Vec<String> {
        let k = |rng: &mut StdRng| format!("k{}", rng.gen_range(0..8));
        let m = |rng: &mut StdRng| {
            if rng.gen_bool(0.5) {
                rng.gen_range(0..40).to_string()
            } else {
                format!("m{}", rng.gen_range(0..40))
            }
        };
        let n = |rng: &mut StdRng| rng.gen_range(0..6).to_string();
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        match rng.gen_range(0..17) {
            0 | 1 => v(&["SADD", &k(rng), &m(rng), &m(rng), &m(rng)]),
            2 => v(&["SREM", &k(rng), &m(rng), &m(rng)]),
            3 => v(&["SPOP", &k(rng)]),
            4 => v(&["SPOP", &k(rng), &n(rng)]),
            5 => v(&["SMOVE", &k(rng), &k(rng), &m(rng)]),
            6 => v(&["SINTERSTORE", &k(rng), &k(rng), &k(rng)]),
            7 => v(&["SUNIONSTORE", &k(rng), &k(rng), &k(rng)]),
            8 => v(&["SDIFFSTORE", &k(rng), &k(rng), &k(rng)]),
            9 | 10 => v(&["HSET", &k(rng), &m(rng), &m(rng), &m(rng), &m(rng)]),
            11 => v(&["HSETNX", &k(rng), &m(rng), &m(rng)]),
            12 => v(&["HDEL", &k(rng), &m(rng), &m(rng)]),
            13 => v(&["HINCRBY", &k(rng), &m(rng), &n(rng)]),
            14 => v(&["HINCRBYFLOAT", &k(rng), &m(rng), "0.1"]),
            15 => v(&["HMSET", &k(rng), &m(rng), "x"]),
            _ => v(&["DEL", &k(rng)]),
        }
    }

    type Dump = BTreeMap<Vec<u8>, (String, &'static str, Vec<Vec<u8>>, u64)>;

    fn dump(srv: &Server) -> Dump {
        let mut out = BTreeMap::new();
        for sh in 0..SHARDS {
            let g = srv.keyspace.db(0).lock(sh);
            for e in g.iter() {
                let mut items: Vec<Vec<u8>> = match &e.value {
                    Value::Set(s) => s.iter().map(|m| m.to_vec()).collect(),
                    Value::Hash(h) => h.iter().map(|(f, v)| [f, b"=", v].concat()).collect(),
                    Value::Str(s) => vec![s.to_vec()],
                    _ => vec![],
                };
                items.sort();
                let t = e.value.type_name().to_string();
                out.insert(e.key.to_vec(), (t, e.value.encoding(), items, e.version));
            }
        }
        out
    }

    #[test]
    fn effects_replay_matches() {
        let mut cfg = Config::default();
        cfg.set("set-max-intset-entries", &["8".into()]).unwrap();
        cfg.set("hash-max-listpack-entries", &["8".into()]).unwrap();
        let srv = Server::new(cfg.clone());
        let rec = Arc::new(Recorder::default());
        srv.effects.subscribe(rec.clone());
        let mut rng = StdRng::seed_from_u64(7);
        let mut clock = Hlc::new(srv.node_id);
        let stats = srv.new_worker_stats();
        let mut client = ClientState::new(1);
        for _ in 0..4000 {
            let l = line(&mut rng);
            let argv: Vec<&[u8]> = l.iter().map(|a| a.as_bytes()).collect();
            let _ = run_local(&srv, &mut clock, &stats, &mut client, &argv);
        }
        let effects = rec.0.lock().clone();
        assert!(effects.len() > 1000);
        let copy = Server::new(cfg);
        let mut clock = Hlc::new(copy.node_id);
        let stats = copy.new_worker_stats();
        for e in &effects {
            replay(&copy, &mut clock, &stats, e).unwrap_or_else(|err| panic!("{e:?}: {err}"));
        }
        let (a, b) = (dump(&srv), dump(&copy));
        assert!(a.len() > 2);
        let encs: std::collections::HashSet<&str> = a.values().map(|v| v.1).collect();
        assert!(encs.contains("hashtable"), "{encs:?}");
        assert_eq!(a, b);
    }
}

/// SMOVE of a member the destination already has modifies only the source:
/// a transaction WATCHing the destination still commits (Redis's rule).
#[test]
fn smove_to_set_that_has_member_leaves_destination_unmodified() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut other = s.conn();
    cmd::<i64>(&mut c, &["SADD", "src", "a", "b"]);
    cmd::<i64>(&mut c, &["SADD", "dst", "a"]);
    cmd::<()>(&mut c, &["WATCH", "dst"]);
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<()>(&mut c, &["SADD", "dst", "c"]);
    assert_eq!(cmd::<i64>(&mut other, &["SMOVE", "src", "dst", "a"]), 1);
    let res: Option<Vec<i64>> = cmd(&mut c, &["EXEC"]);
    assert_eq!(res, Some(vec![1]));
    assert_eq!(cmd::<i64>(&mut c, &["SCARD", "dst"]), 2);
    assert_eq!(cmd::<i64>(&mut c, &["SCARD", "src"]), 1);
    // Moving a member the destination lacks does modify it.
    cmd::<()>(&mut c, &["WATCH", "dst"]);
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<()>(&mut c, &["SADD", "dst", "d"]);
    assert_eq!(cmd::<i64>(&mut other, &["SMOVE", "src", "dst", "b"]), 1);
    let res: Option<Vec<i64>> = cmd(&mut c, &["EXEC"]);
    assert_eq!(res, None);
}
