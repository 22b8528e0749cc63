//! Active replication (issue 12 item 5): a transaction's writes, and a
//! multi-key command's, apply at a peer as one unit: a client there never
//! sees some of them without the others, and where a key diverged the
//! unit's keys converge together. Real processes, as tests/active_active.rs.

mod common;

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::*;

/// Reads `keys` on `n` with MGET until `done` (or a minute passed: the
/// writer failed), and returns every distinct answer seen, in order.
fn watch(n: &Server, keys: &[&str], done: &AtomicBool) -> Vec<Vec<Option<String>>> {
    let mut c = n.conn();
    let mut args = vec!["MGET"];
    args.extend_from_slice(keys);
    let mut seen: Vec<Vec<Option<String>>> = vec![];
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done.load(SeqCst) && Instant::now() < deadline {
        let v: Vec<Option<String>> = cmd(&mut c, &args);
        if seen.last() != Some(&v) {
            seen.push(v);
        }
    }
    seen
}

fn all_equal(v: &[Option<String>]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

/// Runs 3000 transactions of 40 SETs on `writer` while a client on
/// `reader` reads the 40 keys; asserts it never saw some of a
/// transaction's writes without the others.
fn transactions_seen_whole(writer: &Server, reader: &Server, all: &[&Server]) {
    // A link is up before the snapshot that starts it is merged, and a
    // snapshot merges key by key (a reader may see any mix while it does):
    // start once a write made after it has arrived.
    let _: () = cmd(&mut writer.conn(), &["SET", "linked", "1"]);
    let mut rc = reader.conn();
    eventually("the reader to have merged its snapshot", || {
        cmd::<Option<String>>(&mut rc, &["GET", "linked"]).is_some()
    });
    let done = AtomicBool::new(false);
    // Many keys a transaction, so that its writes take a while to apply.
    let keys: Vec<String> = (0..40).map(|i| format!("tx:{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let seen = std::thread::scope(|s| {
        let watcher = s.spawn(|| watch(reader, &keys, &done));
        let mut c = writer.conn();
        for i in 0..3000 {
            let v = format!("{i:0>200}");
            let mut p = redis::pipe();
            p.atomic();
            for k in &keys {
                p.cmd("SET").arg(*k).arg(&v);
            }
            p.query::<()>(&mut c).unwrap();
        }
        converged(all);
        done.store(true, SeqCst);
        watcher.join().unwrap()
    });
    let torn = seen.iter().filter(|v| !all_equal(v)).count();
    assert_eq!(torn, 0, "half transactions seen, of {}", seen.len());
    // The reader saw the transactions arrive, not only the end.
    assert!(seen.len() > 10, "{}", seen.len());
    let last: Option<String> = cmd(&mut reader.conn(), &["GET", keys[39]]);
    assert_eq!(last, Some(format!("{:0>200}", 2999)));
}

#[test]
fn a_client_on_the_peer_never_sees_half_a_transaction() {
    let (a, b) = (active_node(&[]), active_node(&[]));
    pull(&b, a.port);
    wait_linked(&b, 1);
    transactions_seen_whole(&a, &b, &[&a, &b]);
}

#[test]
fn a_chain_forwards_a_transaction_whole() {
    // c hears a only through b, which forwards a's units as they came.
    let (a, b, c) = (active_node(&[]), active_node(&[]), active_node(&[]));
    pull(&b, a.port);
    pull(&c, b.port);
    wait_linked(&b, 1);
    wait_linked(&c, 1);
    transactions_seen_whole(&a, &c, &[&a, &b, &c]);
}

/// Two nodes, each pulling from the other through a proxy of its own.
fn pair() -> (Server, Server, Proxy, Proxy) {
    let (a, b) = (active_node(&[]), active_node(&[]));
    let (pa, pb) = (Proxy::start(a.port), Proxy::start(b.port));
    pull(&a, pb.port);
    pull(&b, pa.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    (a, b, pa, pb)
}

/// `write` on a's side of a partition, after b wrote `u:2`; then, healed
/// with a slow link from a to b (its stream and the states b asks for),
/// what a client on b sees of `u:1 u:2` until both nodes converge.
fn diverged_unit(write: &[&[&str]]) -> Vec<Vec<Option<String>>> {
    let (a, b, pa, pb) = pair();
    let (mut ca, mut cb) = (a.conn(), b.conn());
    let _: () = cmd(&mut ca, &["MSET", "u:1", "old", "u:2", "old"]);
    converged(&[&a, &b]);
    pa.cut();
    pb.cut();
    let _: () = cmd(&mut cb, &["SET", "u:2", "b"]);
    std::thread::sleep(Duration::from_millis(5));
    let mut p = redis::pipe();
    p.atomic();
    for w in write {
        p.cmd(w[0]).arg(&w[1..]);
    }
    p.query::<()>(&mut ca).unwrap();
    // States b asks for come 2 x 300 ms after the unit: long enough for a
    // reader to see a unit applied in part.
    pa.set_delay(Duration::from_millis(300));
    let done = AtomicBool::new(false);
    let seen = std::thread::scope(|s| {
        let reader = s.spawn(|| watch(&b, &["u:1", "u:2"], &done));
        pa.heal();
        pb.heal();
        converged(&[&a, &b]);
        done.store(true, SeqCst);
        reader.join().unwrap()
    });
    for c in [&mut ca, &mut cb] {
        let v: Vec<Option<String>> = cmd(c, &["MGET", "u:1", "u:2"]);
        assert_eq!(v, vec![Some("a".to_string()); 2]);
    }
    seen
}

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

#[test]
fn a_transaction_whose_key_diverged_on_the_peer_converges_whole() {
    // b's write of u:2 is older than a's transaction: both keys end with
    // the transaction's values, and b shows either all of it or none.
    let seen = diverged_unit(&[&["SET", "u:1", "a"], &["SET", "u:2", "a"]]);
    let before = vec![s("old"), s("b")];
    assert!(
        seen.iter().all(|v| *v == before || *v == [s("a"), s("a")]),
        "{seen:?}"
    );
    assert_eq!(seen.first(), Some(&before), "{seen:?}");
}

#[test]
fn mset_across_shards_applies_all_or_nothing() {
    // Without conflict: a reader on the peer never sees part of an MSET.
    let (a, b) = (active_node(&[]), active_node(&[]));
    pull(&b, a.port);
    wait_linked(&b, 1);
    let keys: Vec<String> = (0..8).map(|i| format!("m:{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let done = AtomicBool::new(false);
    let seen = std::thread::scope(|s| {
        let reader = s.spawn(|| watch(&b, &keys, &done));
        let mut c = a.conn();
        for i in 0..3000 {
            let v = i.to_string();
            let mut args = vec!["MSET"];
            for k in &keys {
                args.extend([*k, v.as_str()]);
            }
            let _: () = cmd(&mut c, &args);
        }
        converged(&[&a, &b]);
        done.store(true, SeqCst);
        reader.join().unwrap()
    });
    assert!(seen.iter().all(|v| all_equal(v)), "{seen:?}");
    assert!(seen.len() > 10, "{seen:?}");

    // With one key diverged on the peer: every key converges, together.
    let seen = diverged_unit(&[&["MSET", "u:1", "a", "u:2", "a"]]);
    let before = vec![s("old"), s("b")];
    assert!(
        seen.iter().all(|v| *v == before || *v == [s("a"), s("a")]),
        "{seen:?}"
    );
}
