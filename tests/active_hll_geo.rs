//! Issue 25 item 5: HyperLogLog and geo under active-active, on a
//! partitioned pair and a 3-node mesh of real processes (docs/MERGE-DESIGN.md
//! section 2, DECISIONS 104 and 105). A sketch's registers join by maximum
//! (a PFADD on each side of a partition: PFCOUNT counts both), a write that
//! replaced the sketch wins over a concurrent PFADD (Redis Enterprise's
//! "DEL wins"); geo members merge as the sorted-set members they are.

mod common;

use common::proxy::Proxy;
use common::*;

/// The sketch bytes of `key` (GET), equal on every node once converged.
fn bytes(c: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    cmd(c, &["GET", key])
}

fn count(c: &mut redis::Connection, key: &str) -> i64 {
    cmd(c, &["PFCOUNT", key])
}

/// A PFADD on each side of a partition: PFCOUNT counts both sides' elements
/// on both nodes, and the sketches are the same bytes; a new key made on
/// both sides, and a sketch dense on one side, too.
#[test]
fn pfadds_on_both_sides_of_a_partition_all_count() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["PFADD", "h", "base1", "base2"]);
    let many: Vec<String> = (0..3000).map(|i| format!("d{i}")).collect();
    let mut args = vec!["PFADD", "dense"];
    args.extend(many.iter().map(String::as_str));
    let _: i64 = cmd(&mut a, &args);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["PFADD", "h", "a1", "a2", "a3"]);
    let _: i64 = cmd(&mut b, &["PFADD", "h", "b1", "b2"]);
    let _: i64 = cmd(&mut a, &["PFADD", "new", "x"]);
    let _: i64 = cmd(&mut b, &["PFADD", "new", "y", "z"]);
    let _: i64 = cmd(&mut b, &["PFADD", "dense", "extra1", "extra2"]);
    let _: i64 = cmd(&mut a, &["PFADD", "dense", "extra3"]);
    assert_eq!(count(&mut a, "h"), 5);
    assert_eq!(count(&mut b, "h"), 4);
    p.heal();
    let dense_want = count_of_all(&many, &["extra1", "extra2", "extra3"]);
    eventually("both nodes to count every element added on either", || {
        [&mut a, &mut b]
            .into_iter()
            .all(|c| (count(c, "h"), count(c, "new"), count(c, "dense")) == (7, 3, dense_want))
    });
    converged(&[&p.a, &p.b]);
    assert_eq!(bytes(&mut a, "h"), bytes(&mut b, "h"));
    assert_eq!(bytes(&mut a, "dense"), bytes(&mut b, "dense"));
    let enc: String = cmd(&mut a, &["PFDEBUG", "ENCODING", "dense"]);
    assert_eq!(enc, "dense");
    // Both keep adding from there.
    let _: i64 = cmd(&mut a, &["PFADD", "h", "after-a"]);
    let _: i64 = cmd(&mut b, &["PFADD", "h", "after-b"]);
    eventually("9 on both", || {
        count(&mut a, "h") == 9 && count(&mut b, "h") == 9
    });
    converged(&[&p.a, &p.b]);
}

/// What one sketch fed `many` and `more` counts (the estimate, computed by
/// a single node, here a fresh lattice-server).
fn count_of_all(many: &[String], more: &[&str]) -> i64 {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut args = vec!["PFADD", "k"];
    args.extend(many.iter().map(String::as_str));
    args.extend(more);
    let _: i64 = cmd(&mut c, &args);
    count(&mut c, "k")
}

/// PFMERGE on each side of a partition into one destination: the
/// destination ends with every source's registers.
#[test]
fn pfmerge_on_both_sides_joins_its_destination() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["PFADD", "src1", "p", "q"]);
    let _: i64 = cmd(&mut a, &["PFADD", "src2", "r", "s", "t"]);
    let _: i64 = cmd(&mut a, &["PFADD", "dst", "o"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: () = cmd(&mut a, &["PFMERGE", "dst", "src1"]);
    let _: () = cmd(&mut b, &["PFMERGE", "dst", "src2"]);
    p.heal();
    eventually("dst to count o p q r s t on both", || {
        count(&mut a, "dst") == 6 && count(&mut b, "dst") == 6
    });
    converged(&[&p.a, &p.b]);
}

/// A DEL (or a SET, an APPEND: any write that replaces the sketch)
/// concurrent with a PFADD on the other side wins: the PFADD had not seen
/// it (Redis Enterprise's "DEL wins"). A PFADD made after the DEL, on the
/// node that saw it, starts a new sketch that counts only itself.
#[test]
fn a_delete_or_set_wins_over_a_concurrent_pfadd() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    for k in ["deleted", "set", "readded"] {
        let _: i64 = cmd(&mut a, &["PFADD", k, "x", "y"]);
    }
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["DEL", "deleted"]);
    let _: i64 = cmd(&mut b, &["PFADD", "deleted", "z"]);
    let _: () = cmd(&mut a, &["SET", "set", "plain"]);
    let _: i64 = cmd(&mut b, &["PFADD", "set", "z"]);
    let _: i64 = cmd(&mut a, &["DEL", "readded"]);
    let _: i64 = cmd(&mut a, &["PFADD", "readded", "new"]);
    let _: i64 = cmd(&mut b, &["PFADD", "readded", "z"]);
    p.heal();
    let ok = |c: &mut redis::Connection| {
        cmd::<i64>(c, &["EXISTS", "deleted"]) == 0
            && cmd::<Option<String>>(c, &["GET", "set"]).as_deref() == Some("plain")
            && count(c, "readded") == 1
    };
    let t = std::time::Instant::now();
    while !(ok(&mut a) && ok(&mut b)) {
        if t.elapsed().as_secs() > 20 {
            for c in [&mut a, &mut b] {
                for k in ["deleted", "set", "readded"] {
                    let v: Vec<String> = cmd(c, &["DEBUG", "MERGEINFO", k]);
                    let e: i64 = cmd(c, &["EXISTS", k]);
                    eprintln!("DUMP {k} {e} {v:?}");
                }
            }
            panic!("the resets did not win on both nodes");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    converged(&[&p.a, &p.b]);
}

/// Writes that change no register are no reset: an EXPIRE on one side
/// keeps a concurrent PFADD on the other, and the TTL stays. A PFCOUNT
/// writes nothing under active replication (no cached estimate: DECISIONS
/// 104), so it cannot undo a concurrent PFADD either.
#[test]
fn expire_and_pfcount_keep_a_concurrent_pfadd() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    for k in ["ttl", "counted"] {
        let _: i64 = cmd(&mut a, &["PFADD", k, "x", "y"]);
    }
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["EXPIRE", "ttl", "1000"]);
    let _: i64 = cmd(&mut b, &["PFADD", "ttl", "z"]);
    let _: i64 = cmd(&mut a, &["PFADD", "counted", "w"]);
    let _: i64 = cmd(&mut b, &["PFCOUNT", "counted"]);
    p.heal();
    eventually("3 elements and the TTL on both nodes", || {
        [&mut a, &mut b].into_iter().all(|c| {
            let ttl: i64 = cmd(c, &["TTL", "ttl"]);
            count(c, "ttl") == 3 && (990..=1000).contains(&ttl) && count(c, "counted") == 3
        })
    });
    converged(&[&p.a, &p.b]);
}

/// A 3-node mesh, every node adding its own elements to one sketch while
/// every link is cut: every node counts every element once healed.
#[test]
fn a_mesh_of_three_counts_every_pfadd_across_a_partition() {
    // proxies[i][j]: what node j pulls from node i.
    let (nodes, proxies) = mesh(3);
    let mut conns: Vec<_> = nodes.iter().map(|n| n.conn()).collect();
    let _: i64 = cmd(&mut conns[0], &["PFADD", "visitors", "start"]);
    let refs: Vec<&Server> = nodes.iter().collect();
    converged(&refs);
    for round in 0..10 {
        if round == 5 {
            proxies.iter().flatten().for_each(Proxy::cut);
        }
        for (i, c) in conns.iter_mut().enumerate() {
            let (e1, e2) = (format!("n{i}r{round}a"), format!("n{i}r{round}b"));
            let _: i64 = cmd(c, &["PFADD", "visitors", &e1, &e2]);
        }
    }
    proxies.iter().flatten().for_each(Proxy::heal);
    // What one sketch fed the same 61 elements counts.
    let all: Vec<String> = (0..10)
        .flat_map(|r| (0..3).flat_map(move |i| [format!("n{i}r{r}a"), format!("n{i}r{r}b")]))
        .collect();
    let want = count_of_all(&all, &["start"]);
    eventually("every node to count the 61 visitors", || {
        conns.iter_mut().all(|c| count(c, "visitors") == want)
    });
    converged(&refs);
}

/// Geo members are sorted-set members scored by their geohash: GEOADDs on
/// both sides of a partition all survive, a ZREM (or a GEOSEARCHSTORE's
/// overwrite: a replacement) removes only what its node saw, and a member
/// moved on both sides ends at one position everywhere (the later write's).
#[test]
fn geo_members_merge_as_sorted_set_members() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(
        &mut a,
        &[
            "GEOADD",
            "g",
            "13.361389",
            "38.115556",
            "Palermo",
            "15.087269",
            "37.502669",
            "Catania",
        ],
    );
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["GEOADD", "g", "2.349014", "48.864716", "Paris"]);
    let _: i64 = cmd(&mut b, &["GEOADD", "g", "-0.118092", "51.509865", "London"]);
    let _: i64 = cmd(&mut a, &["ZREM", "g", "Catania"]);
    let _: i64 = cmd(&mut b, &["GEOADD", "g", "12.496366", "41.902782", "Rome"]);
    let _: i64 = cmd(&mut a, &["GEOADD", "g", "13.0", "38.0", "Palermo"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let _: i64 = cmd(&mut b, &["GEOADD", "g", "13.5", "38.5", "Palermo"]);
    p.heal();
    let names = |c: &mut redis::Connection| {
        let mut m: Vec<String> = cmd(c, &["ZRANGE", "g", "0", "-1"]);
        m.sort();
        m
    };
    eventually("every add kept, Catania removed", || {
        [&mut a, &mut b]
            .into_iter()
            .all(|c| names(c) == ["London", "Palermo", "Paris", "Rome"])
    });
    converged(&[&p.a, &p.b]);
    let pos = |c: &mut redis::Connection| -> Vec<Option<(f64, f64)>> {
        cmd(c, &["GEOPOS", "g", "Palermo", "London"])
    };
    let (pa, pb) = (pos(&mut a), pos(&mut b));
    assert_eq!(pa, pb);
    let palermo = pa[0].expect("Palermo has a position");
    assert!((palermo.0 - 13.5).abs() < 1e-4 && (palermo.1 - 38.5).abs() < 1e-4);
    let near: Vec<String> = cmd(
        &mut b,
        &[
            "GEOSEARCH",
            "g",
            "FROMLONLAT",
            "2.35",
            "48.86",
            "BYRADIUS",
            "400",
            "km",
            "ASC",
        ],
    );
    assert_eq!(near, ["Paris", "London"]);
}

/// A 3-node mesh, each node adding its own places to one geo key while
/// every link is cut: every place is on every node, at one position.
#[test]
fn a_mesh_of_three_keeps_every_geoadd() {
    let (nodes, proxies) = mesh(3);
    let mut conns: Vec<_> = nodes.iter().map(|n| n.conn()).collect();
    let _: i64 = cmd(&mut conns[0], &["GEOADD", "places", "10", "45", "origin"]);
    let refs: Vec<&Server> = nodes.iter().collect();
    converged(&refs);
    proxies.iter().flatten().for_each(Proxy::cut);
    for (i, c) in conns.iter_mut().enumerate() {
        let lon = format!("{}", 11 + i);
        let _: i64 = cmd(c, &["GEOADD", "places", &lon, "46", &format!("n{i}")]);
    }
    proxies.iter().flatten().for_each(Proxy::heal);
    eventually("every node to hold four places", || {
        conns
            .iter_mut()
            .all(|c| cmd::<i64>(c, &["ZCARD", "places"]) == 4)
    });
    converged(&refs);
    let d: f64 = cmd(&mut conns[2], &["GEODIST", "places", "n0", "n2", "km"]);
    assert!((150.0..160.0).contains(&d), "{d}");
}

/// A sketch's merge state (its reset, registers' fingerprint, context)
/// survives a restart from the RDB (the `lattice-merge` aux field) and from
/// the AOF (PFADD replayed notes its growth again), so a DEL made before
/// the restart still wins over a PFADD that had not seen it.
#[test]
fn a_sketchs_merge_state_survives_a_restart() {
    for persistence in [
        &["--save", ""][..],
        &["--appendonly", "yes", "--appendfsync", "always"],
    ] {
        let dir = tempdir("hll-merge");
        let dir_arg = dir.to_str().unwrap().to_string();
        let mut args = vec!["--dir", dir_arg.as_str()];
        args.extend_from_slice(persistence);
        let a = active_node(&args);
        let mut c = a.conn();
        let _: i64 = cmd(&mut c, &["PFADD", "grown", "x", "y"]);
        let _: i64 = cmd(&mut c, &["PFADD", "grown", "z"]);
        let _: i64 = cmd(&mut c, &["PFADD", "reset", "x"]);
        let _: () = cmd(&mut c, &["SET", "reset", "plain"]);
        let _: i64 = cmd(&mut c, &["PFADD", "deleted", "x"]);
        let _: i64 = cmd(&mut c, &["DEL", "deleted"]);
        let info = |c: &mut redis::Connection| -> Vec<Vec<String>> {
            ["grown", "reset", "deleted"]
                .iter()
                .map(|k| cmd(c, &["DEBUG", "MERGEINFO", k]))
                .collect()
        };
        let before = info(&mut c);
        assert!(
            before[0].contains(&"type:hyperloglog".to_string()),
            "{before:?}"
        );
        if persistence[0] == "--save" {
            let _: () = cmd(&mut c, &["SAVE"]);
        }
        drop(c);
        drop(a);
        let a = active_node(&args);
        let mut c = a.conn();
        assert_eq!(info(&mut c), before, "{persistence:?}");
        assert_eq!(count(&mut c, "grown"), 3);
    }
}
