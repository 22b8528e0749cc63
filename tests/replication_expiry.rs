//! Expiry on a plain replica, as Redis does it: a key the replica sees as
//! logically expired is hidden from its clients' reads but kept until its
//! master's DEL arrives, the master's own commands still find it, a write
//! on a writable replica deletes it, and the keys a writable replica's own
//! clients gave a TTL it expires itself.

mod common;
use common::*;
use std::time::Duration;

/// A master whose active expiry is off (so only its DELs or our reads
/// could remove a key) and a replica of it, linked.
fn pair() -> (Server, Server) {
    let m = Server::start(&[]);
    let mut mc = m.conn();
    let _: () = cmd(&mut mc, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let r = Server::start(&["--replicaof", "127.0.0.1", &m.port.to_string()]);
    let mut rc = r.conn();
    eventually("the link", || caught_up(&mut mc, &mut rc));
    (m, r)
}

/// The replica's link is up and it has applied all the master wrote.
fn caught_up(master: &mut redis::Connection, replica: &mut redis::Connection) -> bool {
    let offset: u64 = info_field(master, "master_repl_offset");
    info_field::<String>(replica, "master_link_status") == "up"
        && info_field::<u64>(replica, "master_repl_offset") == offset
}

/// SETs each `[key, value, px]` on the master, waits for the replica, then
/// `then_ms` more.
fn set_on_master(
    mc: &mut redis::Connection,
    rc: &mut redis::Connection,
    sets: &[[&str; 3]],
    then_ms: u64,
) {
    for [key, value, px] in sets {
        let _: () = cmd(mc, &["SET", key, value, "PX", px]);
    }
    eventually("the writes", || caught_up(mc, rc));
    std::thread::sleep(Duration::from_millis(then_ms));
}

#[test]
fn a_replica_hides_an_expired_key_and_keeps_it_for_its_master() {
    let (m, r) = pair();
    let (mut mc, mut rc) = (m.conn(), r.conn());
    let sets = [["gone", "v", "100"], ["k", "1", "1500"]];
    set_on_master(&mut mc, &mut rc, &sets, 200);
    // Read as missing, but not deleted: the master has not said so.
    assert_eq!(cmd::<Option<String>>(&mut rc, &["GET", "gone"]), None);
    assert_eq!(cmd::<i64>(&mut rc, &["EXISTS", "gone"]), 0);
    assert_eq!(cmd::<i64>(&mut rc, &["TTL", "gone"]), -2);
    assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 2);
    let _: String = cmd(&mut rc, &["DEBUG", "OBJECT", "gone"]);
    // The master's INCR, sent while k is live there, lands after k's
    // deadline here: it finds k as it is (the TTL stays), not a new key.
    let mut sleeper = r.conn();
    let nap = std::thread::spawn(move || cmd::<()>(&mut sleeper, &["DEBUG", "SLEEP", "1.8"]));
    std::thread::sleep(Duration::from_millis(100));
    // 2: k was live on the master (the premise; its TTL leaves 1.2 s for
    // the link to catch up before this).
    assert_eq!(cmd::<i64>(&mut mc, &["INCR", "k"]), 2);
    nap.join().unwrap();
    eventually("the INCR", || caught_up(&mut mc, &mut rc));
    assert_eq!(cmd::<i64>(&mut rc, &["EXISTS", "k"]), 0);
    let _: String = cmd(&mut rc, &["DEBUG", "OBJECT", "k"]);
    assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 2);
    // The master's DEL removes them.
    let _: i64 = cmd(&mut mc, &["DEL", "gone", "k"]);
    eventually("the DEL", || caught_up(&mut mc, &mut rc));
    assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 0);
}

#[test]
fn a_write_on_a_writable_replica_deletes_an_expired_key_a_read_does_not() {
    let (m, r) = pair();
    let (mut mc, mut rc) = (m.conn(), r.conn());
    let sets = [["key1", "5", "10"], ["key2", "5", "10"]];
    set_on_master(&mut mc, &mut rc, &sets, 50);
    let _: () = cmd(&mut rc, &["CONFIG", "SET", "replica-read-only", "no"]);
    assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 2);
    // INCR deletes the expired key1 and creates it again, without a TTL.
    assert_eq!(cmd::<i64>(&mut rc, &["INCR", "key1"]), 1);
    assert_eq!(cmd::<i64>(&mut rc, &["TTL", "key1"]), -1);
    // GET only hides key2.
    assert_eq!(cmd::<Option<String>>(&mut rc, &["GET", "key2"]), None);
    assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 2);
}

#[test]
fn a_writable_replica_expires_the_keys_its_clients_gave_a_ttl() {
    let (m, r) = pair();
    let (mut mc, mut rc) = (m.conn(), r.conn());
    // The master's key with a TTL is the master's to expire.
    set_on_master(&mut mc, &mut rc, &[["theirs", "v", "100"]], 0);
    let _: () = cmd(&mut rc, &["CONFIG", "SET", "replica-read-only", "no"]);
    let _: () = cmd(&mut rc, &["SET", "a", "1", "PX", "200"]);
    let _: () = cmd(&mut rc, &["SET", "b", "2"]);
    let _: i64 = cmd(&mut rc, &["PEXPIRE", "b", "200"]);
    let _: () = cmd(&mut rc, &["SET", "c", "3", "EX", "100"]);
    let _: () = cmd(&mut rc, &["SET", "d", "3", "PX", "200"]);
    let _: i64 = cmd(&mut rc, &["PERSIST", "d"]);
    assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 5);
    // No command touches them: the replica's cycle removes a and b only.
    eventually("the replica's own expiry", || {
        cmd::<i64>(&mut rc, &["DBSIZE"]) == 3
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cmd::<i64>(&mut rc, &["DBSIZE"]), 3);
    let _: String = cmd(&mut rc, &["DEBUG", "OBJECT", "theirs"]);
    assert_eq!(cmd::<i64>(&mut rc, &["EXISTS", "c", "d"]), 2);
    assert!(info_field::<u64>(&mut rc, "expired_keys") >= 2);
}

#[test]
fn a_full_sync_forgets_the_keys_a_writable_replica_remembered() {
    let (_first_master, r) = pair();
    let mut rc = r.conn();
    let _: () = cmd(&mut rc, &["CONFIG", "SET", "replica-read-only", "no"]);
    let _: () = cmd(&mut rc, &["SET", "mine", "1", "PX", "300"]);
    assert_eq!(info_field::<u64>(&mut rc, "slave_expires_tracked_keys"), 1);
    // A second master, whose `mine` has a TTL of its own: after the full
    // sync the key is that master's, which the replica must not expire.
    let m2 = Server::start(&[]);
    let mut m2c = m2.conn();
    let _: () = cmd(&mut m2c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    // Its TTL outlasts the full sync, however slow the box.
    let _: () = cmd(&mut m2c, &["SET", "mine", "theirs", "PX", "5000"]);
    let set_at = std::time::Instant::now();
    let _: () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &m2.port.to_string()]);
    eventually("the sync from the second master", || {
        caught_up(&mut m2c, &mut rc) && cmd::<i64>(&mut rc, &["DBSIZE"]) == 1
    });
    assert_eq!(info_field::<u64>(&mut rc, "slave_expires_tracked_keys"), 0);
    std::thread::sleep(Duration::from_millis(5300).saturating_sub(set_at.elapsed()));
    // Past both deadlines: the key is hidden from reads, kept for its master.
    assert_eq!(cmd::<Option<String>>(&mut rc, &["GET", "mine"]), None);
    let _: String = cmd(&mut rc, &["DEBUG", "OBJECT", "mine"]);
}
