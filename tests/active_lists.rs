//! List edits away from the ends (LSET, LINSERT, LREM) on a pair of real
//! processes (issue 24; docs/MERGE.md and MERGE-DESIGN.md section 9): they travel as
//! facts that name element ids (keyspace/merge/lists/edits.rs), so a peer
//! applies them with no round trip for the key's state, and concurrent
//! edits on a partitioned pair converge to the documented result.

mod common;

use common::*;

/// The `conflicts=` count of a node's link (key states it asked for).
fn conflicts(c: &mut redis::Connection) -> u64 {
    let info: String = cmd(c, &["INFO", "replication"]);
    let line = info.lines().find(|l| l.starts_with("peer0:"));
    let field = line.expect("a peer line").split(',');
    let n = field.into_iter().find_map(|f| f.strip_prefix("conflicts="));
    n.expect("a conflicts field").parse().unwrap()
}

fn range(c: &mut redis::Connection, key: &str) -> Vec<String> {
    cmd(c, &["LRANGE", key, "0", "-1"])
}

/// Both nodes hold `want` at `key`.
fn both_hold(p: &Pair, key: &str, want: &[&str]) {
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    eventually(&format!("both nodes to hold {key} = {want:?}"), || {
        range(&mut a, key) == want && range(&mut b, key) == want
    });
    converged(&[&p.a, &p.b]);
}

/// The normal path: edits on either node, each after the other's have
/// arrived, apply on the peer from their facts (equal values told apart
/// by id), and neither node asks for the list's state.
#[test]
fn edits_travel_as_facts_without_asking_for_state() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["RPUSH", "l", "t", "t", "t", "u"]);
    converged(&[&p.a, &p.b]);
    let asked = (conflicts(&mut a), conflicts(&mut b));
    let _: () = cmd(&mut a, &["LSET", "l", "1", "X"]);
    both_hold(&p, "l", &["t", "X", "t", "u"]);
    let _: i64 = cmd(&mut b, &["LINSERT", "l", "AFTER", "X", "n"]);
    both_hold(&p, "l", &["t", "X", "n", "t", "u"]);
    let _: i64 = cmd(&mut a, &["LINSERT", "l", "BEFORE", "t", "h"]);
    both_hold(&p, "l", &["h", "t", "X", "n", "t", "u"]);
    let _: i64 = cmd(&mut b, &["LREM", "l", "-1", "t"]);
    both_hold(&p, "l", &["h", "t", "X", "n", "u"]);
    let _: () = cmd(&mut b, &["LSET", "l", "-1", "U"]);
    // Each write after the other's has arrived: a write here older than
    // the key's version here (a concurrent one) is not the normal path.
    both_hold(&p, "l", &["h", "t", "X", "n", "U"]);
    let _: i64 = cmd(&mut a, &["RPUSH", "l", "n"]);
    both_hold(&p, "l", &["h", "t", "X", "n", "U", "n"]);
    let _: i64 = cmd(&mut a, &["LREM", "l", "0", "n"]);
    both_hold(&p, "l", &["h", "t", "X", "U"]);
    assert_eq!(
        (conflicts(&mut a), conflicts(&mut b)),
        asked,
        "no list state asked for"
    );
}

/// Partitions `p`, runs `on_a` then (a few ms later, so its stamp is the
/// newer) `on_b`, and heals.
fn concurrently(
    p: &Pair,
    on_a: impl FnOnce(&mut redis::Connection),
    on_b: impl FnOnce(&mut redis::Connection),
) {
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    p.partition();
    on_a(&mut a);
    std::thread::sleep(std::time::Duration::from_millis(5));
    on_b(&mut b);
    p.heal();
}

/// Two LSETs of one element: a register, the newer LSET's value is kept
/// and the list keeps its length (before, both values stayed).
#[test]
fn concurrent_lsets_of_one_element_keep_the_newer() {
    let p = Pair::start(&[]);
    let _: i64 = cmd(&mut p.a.conn(), &["RPUSH", "l", "a", "b", "c"]);
    converged(&[&p.a, &p.b]);
    concurrently(
        &p,
        |a| cmd::<()>(a, &["LSET", "l", "1", "A"]),
        |b| cmd::<()>(b, &["LSET", "l", "1", "B"]),
    );
    both_hold(&p, "l", &["a", "B", "c"]);
}

/// An LSET of an element another node pops concurrently: the update wins
/// (as a re-add wins over a concurrent remove): the element stays where it
/// stood, with the LSET's value; the pop's client got the old value.
#[test]
fn an_lset_wins_over_a_concurrent_pop_of_its_element() {
    let p = Pair::start(&[]);
    let _: i64 = cmd(&mut p.a.conn(), &["RPUSH", "l", "a", "b", "c"]);
    converged(&[&p.a, &p.b]);
    concurrently(
        &p,
        |a| cmd::<()>(a, &["LSET", "l", "0", "X"]),
        |b| {
            let popped: String = cmd(b, &["LPOP", "l"]);
            assert_eq!(popped, "a");
        },
    );
    both_hold(&p, "l", &["X", "b", "c"]);
}

/// LINSERT after one element on both nodes: both elements land after it,
/// the newer first (RGA; Redis Enterprise documents both kept, in one
/// order everywhere).
#[test]
fn linserts_after_one_element_on_both_nodes_keep_both() {
    let p = Pair::start(&[]);
    let _: i64 = cmd(&mut p.a.conn(), &["RPUSH", "l", "x", "z"]);
    converged(&[&p.a, &p.b]);
    concurrently(
        &p,
        |a| {
            let _: i64 = cmd(a, &["LINSERT", "l", "AFTER", "x", "y1"]);
        },
        |b| {
            let _: i64 = cmd(b, &["LINSERT", "l", "AFTER", "x", "y2"]);
        },
    );
    both_hold(&p, "l", &["x", "y2", "y1", "z"]);
}

/// LREM removes the elements it saw: a value pushed concurrently on the
/// other node stays (an observed remove, as a set's SREM).
#[test]
fn lrem_keeps_an_equal_value_pushed_concurrently() {
    let p = Pair::start(&[]);
    let _: i64 = cmd(&mut p.a.conn(), &["RPUSH", "l", "a", "x", "b", "x"]);
    converged(&[&p.a, &p.b]);
    concurrently(
        &p,
        |a| {
            let _: i64 = cmd(a, &["LREM", "l", "0", "x"]);
        },
        |b| {
            let _: i64 = cmd(b, &["LPUSH", "l", "x"]);
        },
    );
    both_hold(&p, "l", &["x", "a", "b"]);
}
