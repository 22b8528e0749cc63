//! Issue 25 item 5: streams under active-active, on a partitioned pair and
//! a 3-node mesh of real processes (docs/MERGE-DESIGN.md section 10, DECISIONS 106
//! and 112-117). `*` makes IDs that carry the node's slot in their sequence's
//! low bits, so two nodes never make one ID; every entry added on any node
//! is kept, in one ID order everywhere; XDEL and trims remove only the
//! entries their node had seen.

mod common;

use common::proxy::Proxy;
use common::*;

type Entries = Vec<(String, Vec<String>)>;

/// Every entry of `key`, in ID order.
fn entries(c: &mut redis::Connection, key: &str) -> Entries {
    cmd(c, &["XRANGE", key, "-", "+"])
}

fn ids(c: &mut redis::Connection, key: &str) -> Vec<String> {
    entries(c, key).into_iter().map(|e| e.0).collect()
}

/// The node's slot (`node-slot`), which its IDs carry.
fn slot(c: &mut redis::Connection) -> u64 {
    let v: Vec<String> = cmd(c, &["CONFIG", "GET", "node-slot"]);
    v[1].parse().unwrap()
}

fn xadd(c: &mut redis::Connection, key: &str, field: &str, value: &str) -> String {
    cmd(c, &["XADD", key, "*", field, value])
}

/// XINFO STREAM's counts and IDs (not its node layout, which a merged
/// stream may split elsewhere).
fn info(c: &mut redis::Connection, key: &str) -> std::collections::BTreeMap<String, String> {
    info_of(cmd(c, &["XINFO", "STREAM", key]))
}

/// [`info`] of XINFO STREAM's answer.
fn info_of(v: Vec<redis::Value>) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for pair in v.chunks(2) {
        let name: String = redis::from_redis_value(&pair[0]).unwrap();
        if let Ok(text) = redis::from_redis_value::<String>(&pair[1]) {
            if !name.starts_with("radix-tree") {
                out.insert(name, text);
            }
        }
    }
    out
}

/// An ID as numbers, for sorting.
fn id_key(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap();
    (ms.parse().unwrap(), seq.parse().unwrap())
}

fn seq_of(id: &str) -> u64 {
    id.split_once('-').unwrap().1.parse().unwrap()
}

/// XADD on both sides of a partition: once healed, both nodes hold every
/// entry, with the same IDs in the same order, and the same digest; the
/// IDs `*` made carry each node's slot.
#[test]
fn xadds_on_both_sides_of_a_partition_are_all_kept() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let (sa, sb) = (slot(&mut a), slot(&mut b));
    let first = xadd(&mut a, "s", "base", "0");
    assert_eq!(seq_of(&first) % 1024, sa, "{first}");
    converged(&[&p.a, &p.b]);
    p.partition();
    let mut made = vec![first];
    for i in 0..5 {
        let ia = xadd(&mut a, "s", "a", &i.to_string());
        let ib = xadd(&mut b, "s", "b", &i.to_string());
        assert_eq!(seq_of(&ia) % 1024, sa, "{ia}");
        assert_eq!(seq_of(&ib) % 1024, sb, "{ib}");
        made.extend([ia, ib]);
    }
    // A stream made on both sides at once.
    let na = xadd(&mut a, "new", "from", "a");
    let nb = xadd(&mut b, "new", "from", "b");
    p.heal();
    made.sort_by_key(|id| id_key(id));
    eventually("both nodes to hold all 11 entries", || {
        ids(&mut a, "s") == made && ids(&mut b, "s") == made
    });
    let mut both = vec![na, nb];
    both.sort_by_key(|id| id_key(id));
    eventually("the stream made on both sides to hold both entries", || {
        ids(&mut a, "new") == both && ids(&mut b, "new") == both
    });
    converged(&[&p.a, &p.b]);
    assert_eq!(entries(&mut a, "s"), entries(&mut b, "s"));
    let len: i64 = cmd(&mut a, &["XLEN", "s"]);
    assert_eq!(len, 11);
    // The counts XINFO shows agree too: 11 entries added, the last ID the
    // largest either side made.
    let (ia, ib) = (info(&mut a, "s"), info(&mut b, "s"));
    assert_eq!(ia, ib);
    assert_eq!(ia["entries-added"], "11");
    assert_eq!(&ia["last-generated-id"], made.last().unwrap());
    // Both add on from the merged stream: above every ID either made.
    let after = xadd(&mut b, "s", "after", "heal");
    assert_eq!(ids(&mut b, "s").last(), Some(&after));
    converged(&[&p.a, &p.b]);
}

/// Explicit IDs under active replication: one whose sequence's low bits
/// are the node's slot is taken; another node's is refused with an error
/// naming the rule; `ms-*` makes a sequence with the node's slot.
#[test]
fn explicit_ids_must_carry_the_nodes_slot() {
    let n = active_node(&[]);
    let mut c = n.conn();
    let s = slot(&mut c);
    let mine = format!("5-{}", 1024 + s);
    let got: String = cmd(&mut c, &["XADD", "x", &mine, "f", "v"]);
    assert_eq!(got, mine);
    let other = format!("6-{}", (s + 1) % 1024);
    let err = cmd_err(&mut c, &["XADD", "x", &other, "f", "v"]);
    assert!(err.contains("active replication"), "{err}");
    let partial: String = cmd(&mut c, &["XADD", "x", "6-*", "f", "v"]);
    assert_eq!(partial, format!("6-{s}"));
    let again: String = cmd(&mut c, &["XADD", "x", "6-*", "f", "v"]);
    assert_eq!(again, format!("6-{}", 1024 + s));
    let len: i64 = cmd(&mut c, &["XLEN", "x"]);
    assert_eq!(len, 3);
}

/// XDEL on one side of a partition and XADD on the other: the deleted
/// entry stays deleted, the added one is kept.
#[test]
fn xdel_and_a_concurrent_xadd_both_hold() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let gone = xadd(&mut a, "s", "f", "1");
    let kept = xadd(&mut a, "s", "f", "2");
    converged(&[&p.a, &p.b]);
    p.partition();
    let n: i64 = cmd(&mut a, &["XDEL", "s", &gone]);
    assert_eq!(n, 1);
    let added = xadd(&mut b, "s", "f", "3");
    p.heal();
    let want = vec![kept, added];
    eventually("the XDEL and the XADD both held", || {
        ids(&mut a, "s") == want && ids(&mut b, "s") == want
    });
    converged(&[&p.a, &p.b]);
}

/// XTRIM on one side (and an XADD with MAXLEN) while the other adds: the
/// trim removes what its node had seen, the concurrent adds survive it.
#[test]
fn a_trim_keeps_the_adds_it_did_not_see() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let old: Vec<String> = (0..6)
        .map(|i| xadd(&mut a, "s", "old", &i.to_string()))
        .collect();
    for i in 0..4 {
        xadd(&mut a, "t", "old", &i.to_string());
    }
    converged(&[&p.a, &p.b]);
    p.partition();
    let n: i64 = cmd(&mut a, &["XTRIM", "s", "MAXLEN", "2"]);
    assert_eq!(n, 4);
    let b1 = xadd(&mut b, "s", "b", "1");
    let b2 = xadd(&mut b, "s", "b", "2");
    let ta: String = cmd(&mut a, &["XADD", "t", "MAXLEN", "1", "*", "a", "x"]);
    let tb = xadd(&mut b, "t", "b", "y");
    p.heal();
    let want = vec![old[4].clone(), old[5].clone(), b1, b2];
    eventually("the trim and the adds both held", || {
        ids(&mut a, "s") == want && ids(&mut b, "s") == want
    });
    let mut t_want = vec![ta, tb];
    t_want.sort_by_key(|id| id_key(id));
    eventually("XADD's MAXLEN kept the concurrent add", || {
        ids(&mut a, "t") == t_want && ids(&mut b, "t") == t_want
    });
    converged(&[&p.a, &p.b]);
}

/// A 3-node mesh, every node adding to one stream while every link is cut:
/// every entry is on every node, in one order.
#[test]
fn a_mesh_of_three_keeps_every_xadd() {
    let (nodes, proxies) = mesh(3);
    let mut conns: Vec<_> = nodes.iter().map(|n| n.conn()).collect();
    xadd(&mut conns[0], "events", "start", "0");
    let refs: Vec<&Server> = nodes.iter().collect();
    converged(&refs);
    let mut made = 1;
    for round in 0..6 {
        if round == 2 {
            proxies.iter().flatten().for_each(Proxy::cut);
        }
        for (i, c) in conns.iter_mut().enumerate() {
            xadd(c, "events", &format!("n{i}"), &round.to_string());
            made += 1;
        }
    }
    proxies.iter().flatten().for_each(Proxy::heal);
    eventually("every node to hold every entry", || {
        let all: Vec<Vec<String>> = conns.iter_mut().map(|c| ids(c, "events")).collect();
        all[0].len() == made && all.iter().all(|x| *x == all[0])
    });
    converged(&refs);
}

/// A stream's merge state survives a restart from the RDB and from the
/// AOF: an entry deleted before the restart is not brought back by a peer
/// that still holds it.
#[test]
fn a_streams_merge_state_survives_a_restart() {
    for persistence in [
        &["--save", ""][..],
        &["--appendonly", "yes", "--appendfsync", "always"],
    ] {
        let dir = tempdir("stream-merge");
        let dir_arg = dir.to_str().unwrap().to_string();
        let mut args = vec!["--dir", dir_arg.as_str()];
        args.extend_from_slice(persistence);
        let a = active_node(&args);
        let mut c = a.conn();
        let x = xadd(&mut c, "s", "f", "1");
        xadd(&mut c, "s", "f", "2");
        let _: i64 = cmd(&mut c, &["XDEL", "s", &x]);
        let _: String = cmd(&mut c, &["XGROUP", "CREATE", "s", "g", "0"]);
        let _: redis::Value = cmd(
            &mut c,
            &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"],
        );
        let info =
            |c: &mut redis::Connection| -> Vec<String> { cmd(c, &["DEBUG", "MERGEINFO", "s"]) };
        let before = info(&mut c);
        assert!(before.contains(&"type:stream".to_string()), "{before:?}");
        let groups = before.iter().find(|l| l.starts_with("groups:")).unwrap();
        assert!(
            groups.contains("g[dots=") && groups.contains("c@"),
            "{groups}"
        );
        if persistence[0] == "--save" {
            let _: () = cmd(&mut c, &["SAVE"]);
        }
        drop(c);
        drop(a);
        let a = active_node(&args);
        let mut c = a.conn();
        assert_eq!(info(&mut c), before, "{persistence:?}");
        assert_eq!(ids(&mut c, "s").len(), 1);
    }
}

/// A reply as text, for comparing what two nodes answer.
fn text(v: &redis::Value) -> String {
    match v {
        redis::Value::Nil => "nil".into(),
        redis::Value::Int(n) => n.to_string(),
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        redis::Value::Array(a) => {
            let parts: Vec<String> = a.iter().map(text).collect();
            format!("[{}]", parts.join(" "))
        }
        other => format!("{other:?}"),
    }
}

/// The fields of a flat `name value ...` reply, as text.
fn fields(v: &redis::Value) -> Vec<(String, String)> {
    let redis::Value::Array(a) = v else {
        panic!("not an array: {v:?}");
    };
    a.chunks(2).map(|p| (text(&p[0]), text(&p[1]))).collect()
}

/// What XINFO GROUPS, XINFO CONSUMERS and XPENDING say of `key`'s groups,
/// less the times (idle, inactive), which depend on when a node is asked;
/// None where a group listed went away before its entries were read (a
/// peer's XGROUP DESTROY merging in between: ask again).
fn groups_view(c: &mut redis::Connection, key: &str) -> Option<Vec<String>> {
    let groups: Vec<redis::Value> = cmd(c, &["XINFO", "GROUPS", key]);
    let mut out = Vec::new();
    for g in &groups {
        let f = fields(g);
        let name = f[0].1.clone();
        out.push(format!("{f:?}"));
        let pending: Vec<(String, String, i64, i64)> =
            poll(c, &["XPENDING", key, &name, "-", "+", "1000"])?;
        for (id, owner, _idle, count) in pending {
            out.push(format!("{name} pending {id} {owner} {count}"));
        }
        let consumers: Vec<redis::Value> = poll(c, &["XINFO", "CONSUMERS", key, &name])?;
        for c in &consumers {
            let f = fields(c);
            let kept: Vec<&(String, String)> = f.iter().filter(|p| p.0 != "idle").collect();
            out.push(format!("{name} consumer {kept:?}"));
        }
    }
    Some(out)
}

/// Waits until every node answers the same of `key`'s groups (DEBUG
/// DIGEST leaves groups out, as Redis's), and the same digest; returns the
/// view.
fn groups_converged(nodes: &[&Server], key: &str) -> Vec<String> {
    converged(nodes);
    let mut conns: Vec<_> = nodes.iter().map(|n| n.conn()).collect();
    let mut views: Vec<Vec<String>> = Vec::new();
    let agree = |views: &mut Vec<Vec<String>>, conns: &mut Vec<redis::Connection>| {
        let read: Option<Vec<_>> = conns.iter_mut().map(|c| groups_view(c, key)).collect();
        let Some(read) = read else {
            return false;
        };
        *views = read;
        views.windows(2).all(|w| w[0] == w[1])
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !agree(&mut views, &mut conns) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!views.is_empty(), "a group went away on every read");
    for w in views.windows(2) {
        assert_eq!(w[0], w[1], "the nodes' consumer groups to converge");
    }
    converged(nodes);
    views.swap_remove(0)
}

/// XREADGROUP with COUNT `n` as `who`: the IDs delivered.
fn read_group(c: &mut redis::Connection, group: &str, who: &str, n: usize) -> Vec<String> {
    let n = n.to_string();
    let args = [
        "XREADGROUP",
        "GROUP",
        group,
        who,
        "COUNT",
        &n,
        "STREAMS",
        "s",
        ">",
    ];
    let v: redis::Value = cmd(c, &args);
    let mut ids = Vec::new();
    if let redis::Value::Array(streams) = v {
        for s in streams {
            let redis::Value::Array(kv) = s else { continue };
            let redis::Value::Array(entries) = &kv[1] else {
                continue;
            };
            for e in entries {
                let redis::Value::Array(e) = e else { continue };
                ids.push(text(&e[0]));
            }
        }
    }
    ids
}

/// XPENDING's extended form for group `g`: (ID, owner, delivery count).
fn pending(c: &mut redis::Connection, g: &str) -> Vec<(String, String, i64)> {
    let p: Vec<(String, String, i64, i64)> = cmd(c, &["XPENDING", "s", g, "-", "+", "1000"]);
    p.into_iter().map(|(id, who, _, n)| (id, who, n)).collect()
}

fn group_names(c: &mut redis::Connection) -> Vec<String> {
    let groups: Vec<redis::Value> = cmd(c, &["XINFO", "GROUPS", "s"]);
    groups.iter().map(|g| fields(g)[0].1.clone()).collect()
}

/// Consumer groups merge per entry (DECISIONS 107, 130-132): on both sides
/// of a partition, XACKs of different entries both hold; an XACK on one
/// side and an XCLAIM of the same entry on the other keep the claim; one
/// entry delivered on both sides is pending once, owned alike everywhere;
/// groups made on either side are on both; the last-delivered ID is the
/// larger.
#[test]
fn consumer_groups_merge_per_entry_across_a_partition() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let e: Vec<String> = (0..6)
        .map(|i| xadd(&mut a, "s", "f", &i.to_string()))
        .collect();
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "g", "0"]);
    assert_eq!(read_group(&mut a, "g", "bob", 3), e[..3]);
    eventually("b to hold bob's pending entries", || {
        let p: redis::RedisResult<(i64, redis::Value, redis::Value, redis::Value)> =
            redis::cmd("XPENDING").arg("s").arg("g").query(&mut b);
        p.is_ok_and(|p| p.0 == 3)
    });
    groups_converged(&[&p.a, &p.b], "s");
    p.partition();
    let acked: i64 = cmd(&mut a, &["XACK", "s", "g", &e[0]]);
    assert_eq!(acked, 1);
    let acked: i64 = cmd(&mut b, &["XACK", "s", "g", &e[1]]);
    assert_eq!(acked, 1);
    // e2: acknowledged on a, claimed by carol on b at once.
    let acked: i64 = cmd(&mut a, &["XACK", "s", "g", &e[2]]);
    assert_eq!(acked, 1);
    let claimed: Vec<redis::Value> = cmd(&mut b, &["XCLAIM", "s", "g", "carol", "0", &e[2]]);
    assert_eq!(claimed.len(), 1);
    // e3 delivered on both sides, to alice and to dave.
    assert_eq!(read_group(&mut a, "g", "alice", 1), e[3..4]);
    assert_eq!(read_group(&mut b, "g", "dave", 1), e[3..4]);
    // e4 delivered on b only, then a's reads are the farthest.
    assert_eq!(read_group(&mut b, "g", "dave", 1), e[4..5]);
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "ga", "$"]);
    let _: String = cmd(&mut b, &["XGROUP", "CREATE", "s", "gb", "0"]);
    p.heal();
    let view = groups_converged(&[&p.a, &p.b], "s");
    for c in [&mut a, &mut b] {
        assert_eq!(group_names(c), ["g", "ga", "gb"], "{view:?}");
        let pel = pending(c, "g");
        let ids: Vec<&str> = pel.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(ids, [&e[2], &e[3], &e[4]], "{view:?}");
        // The claim held over the concurrent XACK (add-wins), counted.
        assert_eq!((pel[0].1.as_str(), pel[0].2), ("carol", 2), "{view:?}");
        // e3: one owner, the same on both nodes (the later delivery's).
        assert!(["alice", "dave"].contains(&pel[1].1.as_str()), "{view:?}");
        assert_eq!((pel[2].1.as_str(), pel[2].2), ("dave", 1), "{view:?}");
        let info: Vec<redis::Value> = cmd(c, &["XINFO", "GROUPS", "s"]);
        let g = fields(&info[0]);
        let last = g.iter().find(|f| f.0 == "last-delivered-id").unwrap();
        assert_eq!(last.1, e[4], "the larger last-delivered ID");
    }
    // Reads go on from the merged group: e5 is the one left.
    assert_eq!(read_group(&mut b, "g", "bob", 10), e[5..6]);
    groups_converged(&[&p.a, &p.b], "s");
}

/// XGROUP DESTROY on one side while the other reads from and acknowledges
/// in the group: the group is gone on both (a destroy removes the group it
/// saw; reads in it do not make it again). A group made on both sides at
/// once, at different IDs, is one group whose last-delivered ID is the
/// later CREATE's.
#[test]
fn xgroup_destroy_wins_over_a_concurrent_xreadgroup() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let e: Vec<String> = (0..4)
        .map(|i| xadd(&mut a, "s", "f", &i.to_string()))
        .collect();
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "g", "0"]);
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "keep", "0"]);
    read_group(&mut a, "g", "bob", 1);
    groups_converged(&[&p.a, &p.b], "s");
    p.partition();
    let n: i64 = cmd(&mut a, &["XGROUP", "DESTROY", "s", "g"]);
    assert_eq!(n, 1);
    assert_eq!(read_group(&mut b, "g", "carol", 2), e[1..3]);
    let _: i64 = cmd(&mut b, &["XACK", "s", "g", &e[0]]);
    let _: i64 = cmd(&mut b, &["XGROUP", "CREATECONSUMER", "s", "g", "dave"]);
    // "both": made on each side, a at e[1], then b (later) at e[2].
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "both", &e[1]]);
    // b's CREATE is the later (stamps order by milliseconds first).
    std::thread::sleep(std::time::Duration::from_millis(5));
    let _: String = cmd(&mut b, &["XGROUP", "CREATE", "s", "both", &e[2]]);
    p.heal();
    let view = groups_converged(&[&p.a, &p.b], "s");
    for c in [&mut a, &mut b] {
        assert_eq!(group_names(c), ["both", "keep"], "{view:?}");
        let info: Vec<redis::Value> = cmd(c, &["XINFO", "GROUPS", "s"]);
        let both = fields(&info[0]);
        let last = both.iter().find(|f| f.0 == "last-delivered-id").unwrap();
        assert_eq!(last.1, e[2], "the later CREATE's ID: {view:?}");
        let err = cmd_err(c, &["XREADGROUP", "GROUP", "g", "x", "STREAMS", "s", ">"]);
        assert!(err.starts_with("NOGROUP"), "{err}");
    }
}

/// A 3-node mesh, every link cut: each node reads from one group with a
/// consumer of its own and acknowledges an entry read before the cut; once
/// healed the three answer the same of the group, every acknowledgment
/// held and every delivery pending.
#[test]
fn a_mesh_of_three_converges_its_consumer_groups() {
    let (nodes, proxies) = mesh(3);
    let mut conns: Vec<_> = nodes.iter().map(|n| n.conn()).collect();
    let e: Vec<String> = (0..9)
        .map(|i| xadd(&mut conns[0], "s", "f", &i.to_string()))
        .collect();
    let _: String = cmd(&mut conns[0], &["XGROUP", "CREATE", "s", "g", "0"]);
    assert_eq!(read_group(&mut conns[0], "g", "first", 3), e[..3]);
    let refs: Vec<&Server> = nodes.iter().collect();
    groups_converged(&refs, "s");
    proxies.iter().flatten().for_each(Proxy::cut);
    for (i, c) in conns.iter_mut().enumerate() {
        let _: i64 = cmd(c, &["XACK", "s", "g", &e[i]]);
        let got = read_group(c, "g", &format!("n{i}"), 2);
        assert_eq!(got, e[3..5], "each node delivers the next two");
    }
    let _: String = cmd(&mut conns[2], &["XGROUP", "CREATE", "s", "late", "$"]);
    proxies.iter().flatten().for_each(Proxy::heal);
    let view = groups_converged(&refs, "s");
    for c in conns.iter_mut() {
        let ids: Vec<String> = pending(c, "g").into_iter().map(|x| x.0).collect();
        assert_eq!(ids, e[3..5], "{view:?}");
        assert_eq!(group_names(c), ["g", "late"], "{view:?}");
    }
    assert_eq!(read_group(&mut conns[1], "g", "after", 10), e[5..]);
    groups_converged(&refs, "s");
}

/// The `conflicts=` count of a node's link (key states it asked for).
fn conflicts(c: &mut redis::Connection) -> u64 {
    let info: String = cmd(c, &["INFO", "replication"]);
    let line = info.lines().find(|l| l.starts_with("peer0:")).unwrap();
    let field = line
        .split(',')
        .find(|f| f.starts_with("conflicts="))
        .unwrap();
    field["conflicts=".len()..].parse().unwrap()
}

/// Whether XACK and XREADGROUP's reads travel as facts (DECISIONS 239-240).
fn group_facts() -> bool {
    use lattice::facade::keyspace::merge::{groups, stream};
    stream::STREAM_FACTS && groups::GROUP_FACTS
}

/// A stream written on one node: XADD, XDEL and XTRIM travel as facts
/// (the peer asks for no state), a group write (XREADGROUP) as a fact with
/// group facts on, else by one state round trip (DECISIONS 182, 240); both
/// nodes end with one merge state.
#[test]
fn a_stream_written_on_one_node_travels_without_state_round_trips() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    xadd(&mut a, "s", "f", "first");
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "g", "0"]);
    converged(&[&p.a, &p.b]);
    let before = conflicts(&mut b);
    let mut made = Vec::new();
    for i in 0..30 {
        made.push(xadd(&mut a, "s", "f", &i.to_string()));
    }
    let _: i64 = cmd(&mut a, &["XDEL", "s", &made[3]]);
    let _: i64 = cmd(&mut a, &["XTRIM", "s", "MAXLEN", "20"]);
    converged(&[&p.a, &p.b]);
    assert_eq!(
        conflicts(&mut b),
        before,
        "XADD, XDEL and XTRIM travel as facts"
    );
    let _: redis::Value = cmd(
        &mut a,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "COUNT",
            "5",
            "STREAMS",
            "s",
            ">",
        ],
    );
    converged(&[&p.a, &p.b]);
    // (DEBUG DIGEST leaves groups out: wait for the XREADGROUP too.)
    eventually("b to hold the 5 entries read", || {
        let p: (i64, redis::Value, redis::Value, redis::Value) =
            cmd(&mut b, &["XPENDING", "s", "g"]);
        p.0 == 5
    });
    // A group write travels as its commands, replayed nowhere by version
    // with stream facts on: the peer asks for the key's state once (the
    // read's records come together; DECISIONS 182).
    // With them off, it replays where its base matches: no ask.
    let asks = conflicts(&mut b) - before;
    if group_facts() {
        assert_eq!(asks, 0, "{asks} asks for one XREADGROUP (a fact)");
    } else if lattice::facade::keyspace::merge::stream::STREAM_FACTS {
        assert!((1..=2).contains(&asks), "{asks} asks for one XREADGROUP");
    } else {
        assert_eq!(asks, 0, "{asks} asks for one XREADGROUP");
    }
    assert_eq!(entries(&mut a, "s"), entries(&mut b, "s"));
    let ma: Vec<String> = cmd(&mut a, &["DEBUG", "MERGEINFO", "s"]);
    let mb: Vec<String> = cmd(&mut b, &["DEBUG", "MERGEINFO", "s"]);
    assert_eq!(ma, mb, "one merge state on both nodes");
}

/// Both nodes' `conflicts=` counts and merge states of `key`, once they
/// converged: what a fact test compares before and after.
fn merge_info(c: &mut redis::Connection, key: &str) -> Vec<String> {
    cmd(c, &["DEBUG", "MERGEINFO", key])
}

/// Runs `n` rounds of `write` on both nodes at once, each from a thread
/// of its own (`write(conn, node, round)`).
fn on_both_at_once(p: &Pair, n: usize, write: fn(&mut redis::Connection, usize, usize)) {
    std::thread::scope(|s| {
        for (node, server) in [&p.a, &p.b].into_iter().enumerate() {
            let mut c = server.conn();
            s.spawn(move || {
                for i in 0..n {
                    write(&mut c, node, i);
                }
            });
        }
    });
}

/// Both nodes of a pair XADD to one stream at once (DECISIONS 165, 168):
/// with stream facts on, each XADD's fact applies at the other even where
/// the key moved there through that node's own XADDs, an entry older than
/// the last one there going in in ID order, and no state is asked for on
/// either side (with the switch off, DECISIONS 169, the states join); either way
/// both hold the same entries, counts, digest and merge state.
#[test]
fn concurrent_xadds_on_both_nodes_travel_as_facts() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    xadd(&mut a, "s", "f", "first");
    converged(&[&p.a, &p.b]);
    let before = (conflicts(&mut a), conflicts(&mut b));
    on_both_at_once(&p, 300, |c, node, i| {
        let v = format!("{node}:{i}");
        let _: String = cmd(c, &["XADD", "s", "*", "f", &v, "g", "x"]);
    });
    converged(&[&p.a, &p.b]);
    // (With the switch off, DECISIONS 169: each XADD whose base moved at
    // the peer asks for the key's state, and the rest must hold all the
    // same.)
    if lattice::facade::keyspace::merge::stream::STREAM_FACTS {
        assert_eq!((conflicts(&mut a), conflicts(&mut b)), before);
    }
    let len: i64 = cmd(&mut a, &["XLEN", "s"]);
    assert_eq!(len, 601);
    let got = ids(&mut a, "s");
    let mut sorted = got.clone();
    sorted.sort_by_key(|id| id_key(id));
    assert_eq!(got, sorted, "in ID order");
    assert_eq!(entries(&mut a, "s"), entries(&mut b, "s"));
    assert_eq!(info(&mut a, "s"), info(&mut b, "s"));
    assert_eq!(info(&mut a, "s")["entries-added"], "601");
    // (Joined by states, the facts off, the two merge states may differ in
    // the stamps their last joins saw while the streams agree.)
    if lattice::facade::keyspace::merge::stream::STREAM_FACTS {
        assert_eq!(merge_info(&mut a, "s"), merge_info(&mut b, "s"));
    }
    // Reads from an ID see the merged order too (a late entry is not
    // hidden inside a node: XRANGE from each ID gives the rest).
    let mid = &got[300];
    let tail: Entries = cmd(&mut b, &["XRANGE", "s", mid, "+"]);
    assert_eq!(tail.len(), 301);
}

/// XDEL and XTRIM on one node while both add (DECISIONS 166, 167): with
/// stream facts on, the removes travel as facts where the peer has seen
/// what they removed, as states where it has not (an add concurrent with a
/// trim, kept); either way both nodes converge on the same entries, counts
/// and merge state.
#[test]
fn removes_against_concurrent_xadds_converge() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    xadd(&mut a, "s", "f", "first");
    converged(&[&p.a, &p.b]);
    on_both_at_once(&p, 200, |c, node, i| {
        let id: String = cmd(c, &["XADD", "s", "*", "f", &i.to_string()]);
        match (node, i % 10) {
            (0, 3) => {
                let _: i64 = cmd(c, &["XDEL", "s", &id]);
            }
            (0, 7) => {
                let _: i64 = cmd(c, &["XTRIM", "s", "MAXLEN", "50"]);
            }
            (1, 5) => {
                let _: String = cmd(c, &["XADD", "s", "MAXLEN", "80", "*", "t", "x"]);
            }
            _ => {}
        }
    });
    converged(&[&p.a, &p.b]);
    assert_eq!(entries(&mut a, "s"), entries(&mut b, "s"));
    assert_eq!(info(&mut a, "s"), info(&mut b, "s"));
    if lattice::facade::keyspace::merge::stream::STREAM_FACTS {
        assert_eq!(merge_info(&mut a, "s"), merge_info(&mut b, "s"));
    }
    // Quiet now: one more XDEL and XTRIM each travel as a fact. Each
    // waits for the one before to reach the other node: issued back to
    // back on two nodes they are concurrent (a trim that has not seen the
    // other node's newest state is a gap, rightly asked for), which a
    // loaded machine turned into asks here (1 full-suite run in 1).
    let before = (conflicts(&mut a), conflicts(&mut b));
    let first = ids(&mut a, "s")[0].clone();
    let _: i64 = cmd(&mut b, &["XDEL", "s", &first]);
    converged(&[&p.a, &p.b]);
    let _: i64 = cmd(&mut a, &["XTRIM", "s", "MAXLEN", "10"]);
    converged(&[&p.a, &p.b]);
    let _: String = cmd(&mut b, &["XADD", "s", "MAXLEN", "5", "*", "f", "end"]);
    converged(&[&p.a, &p.b]);
    if lattice::facade::keyspace::merge::stream::STREAM_FACTS {
        assert_eq!((conflicts(&mut a), conflicts(&mut b)), before);
    }
    let len: i64 = cmd(&mut b, &["XLEN", "s"]);
    assert_eq!(len, 5);
    assert_eq!(entries(&mut a, "s"), entries(&mut b, "s"));
    if lattice::facade::keyspace::merge::stream::STREAM_FACTS {
        assert_eq!(merge_info(&mut a, "s"), merge_info(&mut b, "s"));
    }
}

/// A stream deleted and made again counts its entries from 0, as on a
/// plain server, on both nodes (DECISIONS 192-193; full simulator seed
/// 49699): XGROUP CREATE MKSTREAM gives entries-added 0 on both, not the
/// old stream's 3; an XADD then 1; XSETID's ENTRIESADDED is
/// the count from then on; DEL then XADD gives 1. Each step waits until
/// both nodes show the same XINFO STREAM and merge state.
#[test]
fn a_stream_made_anew_counts_from_zero_on_both_nodes() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let mut agree = |a: &mut redis::Connection, want: (&str, &str)| {
        eventually("both nodes to show the stream alike", || {
            // (The key may be absent on b for a while: XINFO's error.)
            let shown = |c: &mut redis::Connection| {
                let i = poll::<Vec<redis::Value>>(c, &["XINFO", "STREAM", "s"])?;
                Some((info_of(i), merge_info(c, "s")))
            };
            let (sa, sb) = (shown(a), shown(&mut b));
            sa.is_some() && sa == sb
        });
        let i = info(a, "s");
        assert_eq!(
            (i["entries-added"].as_str(), i["last-generated-id"].as_str()),
            want
        );
    };
    for i in 0..3 {
        xadd(&mut a, "s", "f", &i.to_string());
    }
    let last = ids(&mut a, "s")[2].clone();
    agree(&mut a, ("3", &last));
    let _: i64 = cmd(&mut a, &["DEL", "s"]);
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
    // (Its last ID stays the old one's: IDs are never made again, DECISIONS 196.)
    agree(&mut a, ("0", &last));
    let id = xadd(&mut a, "s", "f", "x");
    agree(&mut a, ("1", &id));
    let _: String = cmd(&mut a, &["XSETID", "s", &id, "ENTRIESADDED", "7"]);
    agree(&mut a, ("7", &id));
    let id = xadd(&mut a, "s", "f", "y");
    agree(&mut a, ("8", &id));
    let _: i64 = cmd(&mut a, &["DEL", "s"]);
    let id = xadd(&mut a, "s", "f", "z");
    agree(&mut a, ("1", &id));
}

/// An XADD refused on a missing key writes nothing: it does not stamp the
/// key, so a write made concurrently elsewhere, older than the refusal,
/// holds on both nodes once healed (full simulator seed 43,263, DECISIONS
/// 329). Two refusals: an ID at or below a deleted stream's last (which an
/// active node keeps, DECISIONS 196) and an explicit ID of another node's
/// slot. Each left a tombstone at its stamp, newer than the peer's SET.
#[test]
fn a_refused_xadd_on_a_missing_key_does_not_stamp_it() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: String = cmd(&mut a, &["XADD", "s1", "9-*", "f", "v"]);
    converged(&[&p.a, &p.b]);
    let _: i64 = cmd(&mut a, &["DEL", "s1"]);
    converged(&[&p.a, &p.b]);
    p.partition();
    for key in ["s1", "s2"] {
        let _: () = cmd(&mut a, &["SET", key, "x"]);
    }
    std::thread::sleep(std::time::Duration::from_millis(5));
    let err = cmd_err(&mut b, &["XADD", "s1", "4-*", "f", "v"]);
    assert!(err.contains("equal or smaller"), "{err}");
    let other = format!("1-{}", (slot(&mut b) + 1) % 1024);
    let err = cmd_err(&mut b, &["XADD", "s2", &other, "f", "v"]);
    assert!(err.contains("active replication"), "{err}");
    p.heal();
    let want = Some("x".to_string());
    eventually("both SETs to hold on both nodes", || {
        ["s1", "s2"].iter().all(|k| {
            poll::<Option<String>>(&mut a, &["GET", k]).flatten() == want
                && poll::<Option<String>>(&mut b, &["GET", k]).flatten() == want
        })
    });
    converged(&[&p.a, &p.b]);
}

/// XINFO GROUPS' fields of group `g` of `s` (entries-read and lag among them).
fn group_info(c: &mut redis::Connection) -> Vec<(String, String)> {
    let groups: Vec<redis::Value> = cmd(c, &["XINFO", "GROUPS", "s"]);
    fields(&groups[0])
}

/// A group's entries-read is in the stream's merge state (DECISIONS 238):
/// an `XGROUP SETID` of the same ID with a smaller ENTRIESREAD on one side
/// of a partition is a reset, so it wins over reads on the other side as a
/// SETID back does; once healed both nodes say the same last-delivered ID,
/// entries-read and lag, and hold one merge state.
#[test]
fn entries_read_and_lag_agree_after_a_partition() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let e: Vec<String> = (0..5)
        .map(|i| xadd(&mut a, "s", "f", &i.to_string()))
        .collect();
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "g", "0"]);
    assert_eq!(read_group(&mut a, "g", "bob", 3), e[..3]);
    groups_converged(&[&p.a, &p.b], "s");
    p.partition();
    let _: String = cmd(
        &mut a,
        &["XGROUP", "SETID", "s", "g", &e[2], "ENTRIESREAD", "1"],
    );
    assert_eq!(read_group(&mut b, "g", "dave", 1), e[3..4]);
    xadd(&mut b, "s", "f", "late");
    p.heal();
    groups_converged(&[&p.a, &p.b], "s");
    let want = |c: &mut redis::Connection| {
        let f = group_info(c);
        let get = |n: &str| f.iter().find(|p| p.0 == n).unwrap().1.clone();
        (get("last-delivered-id"), get("entries-read"), get("lag"))
    };
    // 6 entries added, 1 read as counted by the SETID that won.
    let got = (e[2].clone(), "1".to_string(), "5".to_string());
    assert_eq!(want(&mut a), got);
    assert_eq!(want(&mut b), got);
    eventually("one merge state", || {
        merge_info(&mut a, "s") == merge_info(&mut b, "s")
    });
}

/// A job queue on one node at a time (XADD, XREADGROUP `>`, XACK), first
/// on a, then on b: with group facts on, every write travels as a fact and
/// neither node asks for a state (DECISIONS 239, 240); both end with the
/// same groups (entries-read and lag among them) and one merge state.
#[test]
fn a_job_queue_travels_as_facts() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    xadd(&mut a, "s", "f", "first");
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "g", "$"]);
    groups_converged(&[&p.a, &p.b], "s");
    let before = (conflicts(&mut a), conflicts(&mut b));
    for (c, who) in [(&mut a, "wa"), (&mut b, "wb")] {
        for i in 0..20 {
            xadd(c, "s", "job", &i.to_string());
            let got = read_group(c, "g", who, 1);
            assert_eq!(got.len(), 1, "{who} round {i}");
            if i % 4 != 3 {
                let acked: i64 = cmd(c, &["XACK", "s", "g", &got[0]]);
                assert_eq!(acked, 1);
            }
        }
        converged(&[&p.a, &p.b]);
        groups_converged(&[&p.a, &p.b], "s");
    }
    if group_facts() {
        assert_eq!((conflicts(&mut a), conflicts(&mut b)), before);
    }
    let view = groups_converged(&[&p.a, &p.b], "s");
    assert_eq!(pending(&mut a, "g").len(), 10, "{view:?}");
    assert_eq!(group_info(&mut a), group_info(&mut b));
    eventually("one merge state", || {
        merge_info(&mut a, "s") == merge_info(&mut b, "s")
    });
}

/// A stream's DEL is an observed remove (docs/MERGE.md's table, Redis
/// Enterprise's Active-Active streams example): on one side of a partition
/// DEL removes the entries its node had seen; an entry XADDed on the other
/// side at once survives, and both nodes hold exactly it once healed.
#[test]
fn a_del_keeps_the_entries_added_elsewhere_at_once() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    xadd(&mut a, "s", "f", "seen");
    converged(&[&p.a, &p.b]);
    p.partition();
    let _: i64 = cmd(&mut a, &["DEL", "s"]);
    let late = xadd(&mut b, "s", "f", "late");
    p.heal();
    converged(&[&p.a, &p.b]);
    for c in [&mut a, &mut b] {
        assert_eq!(ids(c, "s"), std::slice::from_ref(&late));
    }
    assert_eq!(info(&mut a, "s"), info(&mut b, "s"));
}

/// XINFO STREAM FULL of `s` as text, less the node layout (radix-tree
/// fields): entries, counts, and every group's pending entries (owner,
/// delivery time, count) and consumers (seen time), which the group views
/// above leave out.
fn full_view(c: &mut redis::Connection) -> String {
    let v: Vec<redis::Value> = cmd(c, &["XINFO", "STREAM", "s", "FULL"]);
    let kept = v
        .chunks(2)
        .filter(|p| !text(&p[0]).starts_with("radix-tree"));
    let lines: Vec<String> = kept
        .map(|p| format!("{} {}", text(&p[0]), text(&p[1])))
        .collect();
    lines.join("\n")
}

/// Waits until the pair's groups converged, then both nodes say the same
/// XINFO STREAM FULL (times included) and hold one merge state; returns
/// the view.
fn fully_converged(p: &Pair) -> String {
    groups_converged(&[&p.a, &p.b], "s");
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    eventually("one XINFO STREAM FULL and one merge state", || {
        full_view(&mut a) == full_view(&mut b) && merge_info(&mut a, "s") == merge_info(&mut b, "s")
    });
    full_view(&mut a)
}

/// Six entries added to `s` on a, group g made, the first `n` read there
/// by w1; the pair converged. The entries' IDs.
fn six_entries_and_a_read(p: &Pair, n: usize) -> Vec<String> {
    let mut a = p.a.conn();
    let e: Vec<String> = (0..6)
        .map(|i| xadd(&mut a, "s", "f", &i.to_string()))
        .collect();
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "g", "0"]);
    assert_eq!(read_group(&mut a, "g", "w1", n), e[..n]);
    fully_converged(p);
    e
}

/// A job queue's recovery path (DECISIONS 254, 255): on one side of a
/// partition a worker claims another's stale entries (XCLAIM, XAUTOCLAIM)
/// and the group is managed (CREATECONSUMER, CREATE), while the other side
/// adds and reads new work; then, healed, DELCONSUMER, SETID and DESTROY
/// on one node at a time. With claim and XGROUP facts on, neither node
/// asks for a state (with them off, each of those writes asks), and after
/// each step both say the same XINFO STREAM FULL, delivery and seen times
/// included, and hold one merge state (`groups::writes::CLAIM_FACTS` and
/// `XGROUP_FACTS` on; off, this test fails: the peers ask).
#[test]
fn claims_and_group_writes_travel_as_facts_beside_reads_elsewhere() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let e = six_entries_and_a_read(&p, 4);
    let before = (conflicts(&mut a), conflicts(&mut b));
    p.partition();
    let claimed: Vec<String> = cmd(
        &mut a,
        &["XCLAIM", "s", "g", "w2", "0", &e[0], &e[1], "JUSTID"],
    );
    assert_eq!(claimed, e[..2]);
    let auto: (String, Vec<String>, Vec<String>) = cmd(
        &mut a,
        &[
            "XAUTOCLAIM",
            "s",
            "g",
            "w3",
            "0",
            "0",
            "COUNT",
            "1",
            "JUSTID",
        ],
    );
    assert_eq!(auto.1, e[..1]);
    let _: i64 = cmd(&mut a, &["XGROUP", "CREATECONSUMER", "s", "g", "w4"]);
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "g2", "$"]);
    xadd(&mut b, "s", "f", "late");
    assert_eq!(read_group(&mut b, "g", "w5", 1), e[4..5]);
    p.heal();
    let view = fully_converged(&p);
    assert_eq!(pending(&mut b, "g")[0].1, "w3", "{view}");
    let steps: [(usize, &[&str]); 4] = [
        (1, &["XGROUP", "DELCONSUMER", "s", "g", "w1"]),
        (0, &["XGROUP", "SETID", "s", "g", &e[1]]),
        (1, &["XGROUP", "DESTROY", "s", "g2"]),
        (0, &["XGROUP", "SETID", "s", "g", "$", "ENTRIESREAD", "7"]),
    ];
    for (node, w) in steps {
        let c = if node == 0 { &mut a } else { &mut b };
        let _: redis::Value = cmd(c, w);
        fully_converged(&p);
    }
    let asked = (conflicts(&mut a) - before.0, conflicts(&mut b) - before.1);
    assert_eq!(asked, (0, 0), "states asked for");
    assert_eq!(group_names(&mut a), ["g"]);
    let pel: Vec<String> = pending(&mut a, "g").into_iter().map(|p| p.1).collect();
    assert_eq!(pel, ["w3", "w2", "w5"]);
}

/// A claim or an XGROUP write against a concurrent write of the same parts
/// on the other side of a partition (DECISIONS 131, 254, 255): the fact
/// does not apply (the peer asks) and the states join: a claim survives a
/// concurrent XACK of its entry; a DELCONSUMER keeps the entry claimed
/// from that consumer elsewhere at once, with its new owner; a SETID back
/// wins over a concurrent read; a consumer made on both sides is one.
#[test]
fn claims_and_group_writes_against_concurrent_writes_converge() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let e = six_entries_and_a_read(&p, 3);
    let concurrently = |on_a: &[&str], on_b: &[&str]| {
        let (mut a, mut b) = (p.a.conn(), p.b.conn());
        p.partition();
        let _: redis::Value = cmd(&mut a, on_a);
        std::thread::sleep(std::time::Duration::from_millis(5));
        let _: redis::Value = cmd(&mut b, on_b);
        p.heal();
        fully_converged(&p)
    };
    let view = concurrently(
        &["XCLAIM", "s", "g", "w2", "0", &e[0]],
        &["XACK", "s", "g", &e[0]],
    );
    let owners = |c: &mut redis::Connection| -> Vec<(String, String)> {
        pending(c, "g").into_iter().map(|p| (p.0, p.1)).collect()
    };
    let own = |id: &String, who: &str| (id.clone(), who.to_string());
    let want = [own(&e[0], "w2"), own(&e[1], "w1"), own(&e[2], "w1")];
    assert_eq!(owners(&mut a), want, "{view}");
    let view = concurrently(
        &["XGROUP", "DELCONSUMER", "s", "g", "w1"],
        &["XCLAIM", "s", "g", "w3", "0", &e[2]],
    );
    assert_eq!(
        owners(&mut a),
        [own(&e[0], "w2"), own(&e[2], "w3")],
        "{view}"
    );
    let view = concurrently(
        &["XGROUP", "SETID", "s", "g", &e[0]],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "w4",
            "COUNT",
            "1",
            "STREAMS",
            "s",
            ">",
        ],
    );
    let last = |c: &mut redis::Connection| {
        let f = group_info(c);
        f.iter()
            .find(|p| p.0 == "last-delivered-id")
            .unwrap()
            .1
            .clone()
    };
    assert_eq!(
        (last(&mut a), last(&mut b)),
        (e[0].clone(), e[0].clone()),
        "{view}"
    );
    let view = concurrently(
        &["XGROUP", "CREATECONSUMER", "s", "g", "w9"],
        &["XGROUP", "CREATECONSUMER", "s", "g", "w9"],
    );
    assert_eq!(view.matches("w9").count(), 1, "{view}");
}

/// XINFO GROUPS' entries-read and lag of group g of `s`.
fn read_and_lag(c: &mut redis::Connection) -> (String, String) {
    let f = group_info(c);
    let get = |n: &str| f.iter().find(|p| p.0 == n).unwrap().1.clone();
    (get("entries-read"), get("lag"))
}

/// Reads of one group on both sides of a partition, of entries added on
/// each side (DECISIONS 241, 257): once healed, entries-read counts every
/// entry up to the last-delivered ID, as Redis 7.0 does on one node, and
/// lag the one entry left, on both nodes (with the recount off the larger
/// side's count stayed: entries-read 3, lag 4); a read of it leaves lag 0.
#[test]
fn lag_counts_the_reads_of_both_sides_after_a_partition() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let sleep = || std::thread::sleep(std::time::Duration::from_millis(5));
    xadd(&mut a, "s", "f", "e0");
    let _: String = cmd(&mut a, &["XGROUP", "CREATE", "s", "g", "0"]);
    assert_eq!(read_group(&mut a, "g", "wa", 1).len(), 1);
    fully_converged(&p);
    p.partition();
    for i in 0..3 {
        xadd(&mut a, "s", "x", &i.to_string());
    }
    assert_eq!(read_group(&mut a, "g", "wa", 10).len(), 3);
    sleep();
    for i in 0..2 {
        xadd(&mut b, "s", "y", &i.to_string());
    }
    assert_eq!(read_group(&mut b, "g", "wb", 10).len(), 2);
    sleep();
    let left = xadd(&mut a, "s", "x", "left");
    p.heal();
    fully_converged(&p);
    for c in [&mut a, &mut b] {
        assert_eq!(read_and_lag(c), ("6".into(), "1".into()));
    }
    assert_eq!(read_group(&mut b, "g", "wb", 10), [left]);
    fully_converged(&p);
    for c in [&mut a, &mut b] {
        assert_eq!(read_and_lag(c), ("7".into(), "0".into()));
    }
}

/// Both nodes' asks (INFO `conflicts=`), summed.
fn pair_asks(p: &Pair) -> u64 {
    asks_all(&mut p.a.conn()) + asks_all(&mut p.b.conn())
}

/// A stream's DEL (and UNLINK) is an observed remove of what its node had
/// seen (docs/MERGE.md): an entry and a group made concurrently on the
/// other node survive it, the entries and group it saw do not. Its record
/// carries the state the delete left (DECISIONS 282), so the node it
/// reaches asks for none (the deleter asks for the concurrent XADD's key:
/// a fact of a stream deleted here).
#[test]
fn a_streams_delete_travels_as_a_fact_and_keeps_a_concurrent_add() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    six_entries_and_a_read(&p, 2);
    let b_before = asks_all(&mut b);
    p.partition();
    assert_eq!(cmd::<i64>(&mut a, &["DEL", "s"]), 1);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let kept = xadd(&mut b, "s", "f", "b");
    let _: String = cmd(&mut b, &["XGROUP", "CREATE", "s", "h", "0"]);
    p.heal();
    fully_converged(&p);
    for c in [&mut a, &mut b] {
        assert_eq!(ids(c, "s"), std::slice::from_ref(&kept));
        assert_eq!(group_names(c), ["h"]);
    }
    assert_eq!(asks_all(&mut b) - b_before, 0, "b asked for the DEL's key");
    // Deleted again with nothing concurrent: gone on both, no ask.
    let before = pair_asks(&p);
    assert_eq!(cmd::<i64>(&mut b, &["UNLINK", "s"]), 1);
    converged(&[&p.a, &p.b]);
    for c in [&mut a, &mut b] {
        assert_eq!(cmd::<i64>(c, &["EXISTS", "s"]), 0);
    }
    assert_eq!(pair_asks(&p) - before, 0, "states asked for by the UNLINK");
}

/// `key`'s absolute expiry in ms (PEXPIRETIME: -1 none, -2 no key).
fn expiry(c: &mut redis::Connection, key: &str) -> i64 {
    cmd(c, &["PEXPIRETIME", key])
}

/// Both nodes hold `s` expiring at one time, `want` where given (Some(-1):
/// none); returns it.
fn one_expiry(p: &Pair, want: Option<i64>) -> i64 {
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    eventually("one expiry of s on both nodes", || {
        let (ea, eb) = (expiry(&mut a, "s"), expiry(&mut b, "s"));
        ea == eb && want.is_none_or(|w| w == ea)
    });
    expiry(&mut a, "s")
}

/// EXPIRE & co and PERSIST on a stream write its TTL register, as on a set
/// (docs/MERGE.md): with nothing concurrent they travel as facts (no ask,
/// DECISIONS 283); concurrent TTL writes resolve to the longest, PERSIST
/// wins over a concurrent EXPIRE.
#[test]
fn a_streams_ttl_writes_travel_as_facts_and_merge_as_a_sets() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    six_entries_and_a_read(&p, 2);
    let before = pair_asks(&p);
    let _: () = cmd(&mut a, &["XSETID", "s", "9000000000000-0"]);
    assert_eq!(cmd::<i64>(&mut a, &["EXPIRE", "s", "1000"]), 1);
    let at = one_expiry(&p, None);
    assert!(at > 0, "an expiry: {at}");
    assert_eq!(cmd::<i64>(&mut b, &["PEXPIREAT", "s", "4000000000000"]), 1);
    one_expiry(&p, Some(4_000_000_000_000));
    assert_eq!(cmd::<i64>(&mut a, &["PERSIST", "s"]), 1);
    one_expiry(&p, Some(-1));
    fully_converged(&p);
    assert_eq!(
        pair_asks(&p) - before,
        0,
        "states asked for by the TTL writes"
    );
    // Concurrent: the longest TTL, then PERSIST over an EXPIRE.
    p.partition();
    let _: i64 = cmd(&mut a, &["PEXPIREAT", "s", "4000000000000"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let _: i64 = cmd(&mut b, &["PEXPIREAT", "s", "3000000000000"]);
    p.heal();
    one_expiry(&p, Some(4_000_000_000_000));
    fully_converged(&p);
    p.partition();
    let _: i64 = cmd(&mut a, &["PERSIST", "s"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let _: i64 = cmd(&mut b, &["PEXPIREAT", "s", "4500000000000"]);
    p.heal();
    one_expiry(&p, Some(-1));
    fully_converged(&p);
    assert_eq!(ids(&mut a, "s").len(), 6);
}

/// XSETID (with ENTRIESADDED and MAXDELETEDID) travels as a fact where
/// nothing was written concurrently (DECISIONS 284): no ask, one XINFO
/// STREAM on both nodes. Against a concurrent XADD elsewhere it asks, and
/// the states join: the entry kept, the last ID the higher, and the count
/// XSETID set with the add it had not seen on top (DECISIONS 192).
#[test]
fn xsetid_travels_as_a_fact_and_joins_with_a_concurrent_add() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    six_entries_and_a_read(&p, 2);
    let before = pair_asks(&p);
    let _: () = cmd(&mut a, &["XSETID", "s", "9000000000000-0"]);
    // b's XSETID after a's arrived: else the two are concurrent, and
    // concurrent writes of one key ask (the race CI met).
    fully_converged(&p);
    let _: () = cmd(
        &mut b,
        &[
            "XSETID",
            "s",
            "9000000000001-0",
            "ENTRIESADDED",
            "20",
            "MAXDELETEDID",
            "9000000000000-5",
        ],
    );
    fully_converged(&p);
    let want = info(&mut a, "s");
    assert_eq!(want.get("entries-added").map(String::as_str), Some("20"));
    assert_eq!(info(&mut b, "s"), want);
    assert_eq!(pair_asks(&p) - before, 0, "states asked for by XSETID");
    p.partition();
    let _: () = cmd(
        &mut a,
        &["XSETID", "s", "9000000000002-0", "ENTRIESADDED", "30"],
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    xadd(&mut b, "s", "f", "late");
    p.heal();
    fully_converged(&p);
    let (ia, ib) = (info(&mut a, "s"), info(&mut b, "s"));
    assert_eq!(ia, ib);
    assert_eq!(ia.get("entries-added").map(String::as_str), Some("31"));
    assert_eq!(ia.get("length").map(String::as_str), Some("7"));
}

/// XREADGROUP ... NOACK `>` as `who`: the IDs delivered (none pending).
fn read_noack(c: &mut redis::Connection, who: &str, n: usize) -> Vec<String> {
    let n = n.to_string();
    let args = [
        "XREADGROUP",
        "GROUP",
        "g",
        who,
        "COUNT",
        &n,
        "NOACK",
        "STREAMS",
        "s",
        ">",
    ];
    let v: Option<Vec<(String, Entries)>> = cmd(c, &args);
    v.into_iter()
        .flatten()
        .flat_map(|(_, e)| e)
        .map(|e| e.0)
        .collect()
}

/// NOACK reads travel as facts (DECISIONS 285): by an existing consumer
/// (one `XGROUP SETID` record) and by a consumer the read makes (`XGROUP
/// CREATECONSUMER` then SETID), with nothing concurrent, no node asks and
/// both hold one XINFO STREAM FULL (seen times included). NOACK reads on
/// both sides of a partition join: the larger last-delivered ID, both
/// consumers, nothing pending from them.
#[test]
fn noack_reads_travel_as_facts_and_join_after_a_partition() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let e = six_entries_and_a_read(&p, 1);
    let before = pair_asks(&p);
    assert_eq!(read_noack(&mut a, "w1", 1), e[1..2]);
    fully_converged(&p);
    assert_eq!(read_noack(&mut b, "w2", 1), e[2..3]);
    fully_converged(&p);
    assert_eq!(read_noack(&mut a, "w2", 1), e[3..4]);
    fully_converged(&p);
    assert_eq!(pair_asks(&p) - before, 0, "states asked for by NOACK reads");
    p.partition();
    assert_eq!(read_noack(&mut a, "w3", 1), e[4..5]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(read_noack(&mut b, "w4", 2), e[4..6]);
    p.heal();
    let view = fully_converged(&p);
    assert!(view.contains("w3") && view.contains("w4"), "{view}");
    assert_eq!(pending(&mut a, "g"), [(e[0].clone(), "w1".to_string(), 1)]);
    let last = group_info(&mut b);
    let last = last.iter().find(|f| f.0 == "last-delivered-id").unwrap();
    assert_eq!(last.1, e[5]);
}

/// XGROUP CREATE ... MKSTREAM of a missing key travels as a fact (DECISIONS
/// 286): on a key never written and on a stream deleted before, no node
/// asks and both hold one stream and group (entries-added 0, as Redis).
/// Made on both sides of a partition, the two streams join: both groups.
#[test]
fn a_stream_made_by_xgroup_create_mkstream_travels_as_a_fact() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let before = pair_asks(&p);
    let mk = |c: &mut redis::Connection, g: &str| {
        let _: String = cmd(c, &["XGROUP", "CREATE", "s", g, "$", "MKSTREAM"]);
    };
    mk(&mut a, "g");
    fully_converged(&p);
    xadd(&mut b, "s", "f", "1");
    fully_converged(&p);
    assert_eq!(cmd::<i64>(&mut a, &["DEL", "s"]), 1);
    converged(&[&p.a, &p.b]);
    mk(&mut b, "h");
    fully_converged(&p);
    for c in [&mut a, &mut b] {
        assert_eq!(group_names(c), ["h"]);
        assert_eq!(
            info(c, "s").get("entries-added").map(String::as_str),
            Some("0")
        );
    }
    assert_eq!(pair_asks(&p) - before, 0, "states asked for by MKSTREAM");
    assert_eq!(cmd::<i64>(&mut a, &["DEL", "s"]), 1);
    converged(&[&p.a, &p.b]);
    p.partition();
    mk(&mut a, "g1");
    std::thread::sleep(std::time::Duration::from_millis(5));
    mk(&mut b, "g2");
    p.heal();
    fully_converged(&p);
    for c in [&mut a, &mut b] {
        assert_eq!(group_names(c), ["g1", "g2"]);
    }
}

/// An XREADGROUP of several streams (one unit: each stream's records led
/// by its fact) travels as facts (DECISIONS 285), NOACK or not: no ask,
/// one group state per stream on both nodes. On both sides of a partition
/// the reads join per stream.
#[test]
fn a_read_of_several_streams_travels_as_facts() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    for k in ["s", "t"] {
        for i in 0..4 {
            xadd(&mut a, k, "f", &i.to_string());
        }
        let _: String = cmd(&mut a, &["XGROUP", "CREATE", k, "g", "0"]);
    }
    fully_converged(&p);
    let read = |c: &mut redis::Connection, who: &str, noack: bool| {
        let mut args = vec!["XREADGROUP", "GROUP", "g", who, "COUNT", "1"];
        args.extend(noack.then_some("NOACK"));
        args.extend(["STREAMS", "s", "t", ">", ">"]);
        let v: Vec<(String, Entries)> = cmd(c, &args);
        assert_eq!(v.len(), 2, "{who}: both streams served");
    };
    let both = |p: &Pair| {
        fully_converged(p);
        let mut t = groups_converged(&[&p.a, &p.b], "t");
        t.sort();
        t
    };
    let before = pair_asks(&p);
    read(&mut a, "w1", false);
    both(&p);
    read(&mut b, "w2", true);
    both(&p);
    read(&mut a, "w2", false);
    both(&p);
    assert_eq!(pair_asks(&p) - before, 0, "states asked for by the reads");
    p.partition();
    read(&mut a, "w3", false);
    std::thread::sleep(std::time::Duration::from_millis(5));
    read(&mut b, "w4", false);
    p.heal();
    let view = both(&p);
    assert!(view.iter().any(|l| l.contains("w3")), "{view:?}");
    assert!(view.iter().any(|l| l.contains("w4")), "{view:?}");
}

/// The XADD that makes a stream travels as a fact (DECISIONS 297): on a
/// key never written and on a stream deleted before (with a trim), no
/// node asks, and both hold one stream (entries-added as the origin's).
/// Made by XADD on both sides of a partition, the two streams join: both
/// entries, on both nodes.
#[test]
fn the_xadd_that_makes_a_stream_travels_as_a_fact() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let before = pair_asks(&p);
    xadd(&mut a, "s", "f", "1");
    fully_converged(&p);
    xadd(&mut b, "s", "f", "2");
    fully_converged(&p);
    assert_eq!(cmd::<i64>(&mut a, &["DEL", "s"]), 1);
    converged(&[&p.a, &p.b]);
    let _: String = cmd(&mut b, &["XADD", "s", "MAXLEN", "1", "*", "f", "3"]);
    fully_converged(&p);
    for c in [&mut a, &mut b] {
        assert_eq!(ids(c, "s").len(), 1);
        assert_eq!(
            info(c, "s").get("entries-added").map(String::as_str),
            Some("1")
        );
    }
    assert_eq!(
        pair_asks(&p) - before,
        0,
        "states asked for by a stream's first XADD"
    );
    assert_eq!(cmd::<i64>(&mut a, &["DEL", "s"]), 1);
    converged(&[&p.a, &p.b]);
    let (ia, ib) = xadds_on_both_sides(&p);
    let mut want = vec![ia, ib];
    want.sort();
    for c in [&mut a, &mut b] {
        assert_eq!(ids(c, "s"), want);
    }
}

/// Stream writes on a stream with a TTL travel as facts where its state's
/// TTL register gives the expiry on both nodes (DECISIONS 298): XADD, XDEL,
/// XTRIM and XSETID ask for no state and keep the TTL. XADDs on both sides
/// of a partition join: both entries, one TTL.
#[test]
fn stream_writes_on_a_stream_with_a_ttl_travel_as_facts() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let first = xadd(&mut a, "s", "f", "1");
    assert_eq!(cmd::<i64>(&mut a, &["PEXPIREAT", "s", "4000000000000"]), 1);
    fully_converged(&p);
    let before = pair_asks(&p);
    let second = xadd(&mut a, "s", "f", "2");
    fully_converged(&p);
    xadd(&mut b, "s", "f", "3");
    fully_converged(&p);
    assert_eq!(cmd::<i64>(&mut a, &["XDEL", "s", &first]), 1);
    fully_converged(&p);
    let _: String = cmd(&mut b, &["XSETID", "s", "9999999999999-0"]);
    fully_converged(&p);
    assert_eq!(cmd::<i64>(&mut a, &["XTRIM", "s", "MINID", &second]), 0);
    let _: String = cmd(&mut a, &["XADD", "s", "MAXLEN", "2", "*", "f", "4"]);
    fully_converged(&p);
    assert_eq!(
        pair_asks(&p) - before,
        0,
        "states asked for by writes under a TTL"
    );
    for c in [&mut a, &mut b] {
        assert_eq!(cmd::<i64>(c, &["PEXPIRETIME", "s"]), 4000000000000);
        assert_eq!(ids(c, "s").len(), 2);
    }
    let (ia, ib) = xadds_on_both_sides(&p);
    for c in [&mut a, &mut b] {
        let held = ids(c, "s");
        assert!(held.contains(&ia) && held.contains(&ib), "{held:?}");
        assert_eq!(cmd::<i64>(c, &["PEXPIRETIME", "s"]), 4000000000000);
    }
}

/// An XADD to `s` on each side of a partition, a's first; the pair healed
/// and converged. The two IDs.
fn xadds_on_both_sides(p: &Pair) -> (String, String) {
    p.partition();
    let ia = xadd(&mut p.a.conn(), "s", "a", "1");
    std::thread::sleep(std::time::Duration::from_millis(5));
    let ib = xadd(&mut p.b.conn(), "s", "b", "1");
    p.heal();
    fully_converged(p);
    (ia, ib)
}

/// `n` entries added to `s`, group g made at 0.
fn stream_with_group(c: &mut redis::Connection, n: usize) {
    for i in 0..n {
        xadd(c, "s", "f", &i.to_string());
    }
    let _: String = cmd(c, &["XGROUP", "CREATE", "s", "g", "0"]);
}

/// `who` reads one new entry of `s` in group g: its ID.
fn read_one(c: &mut redis::Connection, who: &str) -> String {
    let mut args: Vec<&str> = "XREADGROUP GROUP g _ COUNT 1 STREAMS s >"
        .split(' ')
        .collect();
    args[3] = who;
    let v: Vec<(String, Entries)> = cmd(c, &args);
    v[0].1[0].0.clone()
}

/// Both nodes say one XINFO STREAM FULL of `key` (times included) and hold
/// one merge state of it, after [`converged`].
fn key_converged(p: &Pair, key: &str) {
    converged(&[&p.a, &p.b]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let full =
        |c: &mut redis::Connection| format!("{:?}", run(c, &s(&["XINFO", "STREAM", key, "FULL"])));
    eventually(
        &format!("one XINFO STREAM FULL and merge state of {key}"),
        || full(&mut a) == full(&mut b) && merge_info(&mut a, key) == merge_info(&mut b, key),
    );
}

/// RENAME, RENAMENX and COPY of a stream carry the states of the keys they
/// wrote, as a collection's (DECISIONS 300): no node asks, and both hold
/// one stream, groups included. A RENAME on one side of a partition and an
/// XADD to its source on the other: the source keeps the concurrent entry
/// (an observed remove), the destination holds what the RENAME moved.
#[test]
fn a_streams_rename_and_copy_travel_as_facts() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    stream_with_group(&mut a, 3);
    read_one(&mut a, "w");
    key_converged(&p, "s");
    let before = pair_asks(&p);
    let _: String = cmd(&mut a, &["RENAME", "s", "r"]);
    key_converged(&p, "r");
    assert_eq!(cmd::<i64>(&mut b, &["RENAMENX", "r", "t"]), 1);
    key_converged(&p, "t");
    assert_eq!(cmd::<i64>(&mut a, &["COPY", "t", "u"]), 1);
    key_converged(&p, "u");
    xadd(&mut b, "u", "f", "3");
    key_converged(&p, "u");
    assert_eq!(
        pair_asks(&p) - before,
        0,
        "states asked for by RENAME and COPY"
    );
    for c in [&mut a, &mut b] {
        assert_eq!(ids(c, "t").len(), 3);
        assert_eq!(ids(c, "u").len(), 4);
        assert_eq!(cmd::<i64>(c, &["EXISTS", "s", "r"]), 0);
    }
    p.partition();
    let _: String = cmd(&mut a, &["RENAME", "t", "v"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let late = xadd(&mut b, "t", "f", "late");
    p.heal();
    key_converged(&p, "t");
    key_converged(&p, "v");
    for c in [&mut a, &mut b] {
        assert_eq!(ids(c, "t"), std::slice::from_ref(&late));
        assert_eq!(ids(c, "v").len(), 3);
    }
}

/// Consumer-group writes on a stream with a TTL travel as facts too
/// (DECISIONS 298): reads, an XACK, XGROUP's subcommands ask for no state
/// and keep the TTL; reads of one group on both sides of a partition join.
#[test]
fn group_writes_on_a_stream_with_a_ttl_travel_as_facts() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    stream_with_group(&mut a, 6);
    assert_eq!(cmd::<i64>(&mut a, &["PEXPIREAT", "s", "4000000000000"]), 1);
    fully_converged(&p);
    let before = pair_asks(&p);
    let first = read_one(&mut a, "w1");
    fully_converged(&p);
    read_one(&mut b, "w2");
    fully_converged(&p);
    assert_eq!(cmd::<i64>(&mut b, &["XACK", "s", "g", &first]), 1);
    fully_converged(&p);
    let _: i64 = cmd(&mut a, &["XGROUP", "CREATECONSUMER", "s", "g", "w3"]);
    fully_converged(&p);
    assert_eq!(
        pair_asks(&p) - before,
        0,
        "states asked for by group writes under a TTL"
    );
    p.partition();
    read_one(&mut a, "w1");
    read_one(&mut b, "w2");
    p.heal();
    fully_converged(&p);
    for c in [&mut a, &mut b] {
        assert_eq!(cmd::<i64>(c, &["PEXPIRETIME", "s"]), 4000000000000);
    }
}
