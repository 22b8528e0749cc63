//! Full syncs as Redis schedules them: replicas that ask for a diskless
//! sync within `repl-diskless-sync-delay` (or until
//! `repl-diskless-sync-max-replicas` wait) share one snapshot, and
//! `rdb-key-save-delay` stretches a sync while writes keep flowing to the
//! replica behind it.

mod common;
use common::*;

fn fill(c: &mut redis::Connection, prefix: &str, n: usize) {
    let mut p = redis::pipe();
    for i in 0..n {
        p.cmd("SET").arg(format!("{prefix}{i}")).arg(i).ignore();
    }
    let _: () = p.query(c).unwrap();
}

/// How many snapshots the master started for replicas (its log).
fn bgsaves_for_sync(s: &Server) -> usize {
    let log = std::fs::read_to_string(s.dir.join("server.log")).unwrap_or_default();
    log.matches("Starting BGSAVE for SYNC").count()
}

fn replica_of(m: &Server) -> Server {
    Server::start(&["--replicaof", "127.0.0.1", &m.port.to_string()])
}

#[test]
fn replicas_within_the_delay_share_one_snapshot() {
    // A long delay: only the second replica's arrival starts the sync.
    let m = Server::start(&[
        "--repl-diskless-sync-delay",
        "60",
        "--repl-diskless-sync-max-replicas",
        "2",
    ]);
    let mut mc = m.conn();
    fill(&mut mc, "k", 1000);
    let r1 = replica_of(&m);
    eventually("the first replica waiting", || {
        let info: String = cmd(&mut mc, &["INFO", "replication"]);
        info.contains("state=wait_bgsave")
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(bgsaves_for_sync(&m), 0, "the sync did not wait");
    let r2 = replica_of(&m);
    let (mut c1, mut c2) = (r1.conn(), r2.conn());
    eventually("both replicas in sync", || {
        in_sync(&mut mc, &mut c1) && in_sync(&mut mc, &mut c2)
    });
    assert_eq!(bgsaves_for_sync(&m), 1);
    assert_eq!(info_field::<u64>(&mut mc, "sync_full"), 2);
    assert_eq!(digest(&mut c1), digest(&mut mc));
    assert_eq!(digest(&mut c2), digest(&mut mc));
    // Later writes reach both.
    let _: i64 = cmd(&mut mc, &["INCR", "after"]);
    eventually("live writes", || {
        in_sync(&mut mc, &mut c1) && in_sync(&mut mc, &mut c2)
    });
}

#[test]
fn replicas_arriving_within_the_delay_share_it() {
    let m = Server::start(&["--repl-diskless-sync-delay", "5"]);
    let mut mc = m.conn();
    fill(&mut mc, "k", 100);
    // Both started first, then pointed at the master one right after the
    // other: starting a server can take longer than the delay on a loaded
    // machine, two REPLICAOFs cannot.
    let (r1, r2) = (Server::start(&[]), Server::start(&[]));
    let (mut c1, mut c2) = (r1.conn(), r2.conn());
    let port = m.port.to_string();
    for c in [&mut c1, &mut c2] {
        let _: () = cmd(c, &["REPLICAOF", "127.0.0.1", &port]);
    }
    eventually("both replicas in sync", || {
        in_sync(&mut mc, &mut c1) && in_sync(&mut mc, &mut c2)
    });
    assert_eq!(bgsaves_for_sync(&m), 1);
}

#[test]
fn rdb_key_save_delay_stretches_the_sync_while_writes_flow() {
    let m = Server::start(&["--repl-diskless-sync-delay", "0"]);
    let mut mc = m.conn();
    fill(&mut mc, "k", 300);
    // 300 keys at 20 ms each: the sync takes about 6 s, time for a loaded
    // machine to send the writes below while it runs.
    let _: () = cmd(&mut mc, &["CONFIG", "SET", "rdb-key-save-delay", "20000"]);
    let r = replica_of(&m);
    let mut rc = r.conn();
    eventually("the snapshot running", || {
        info_field::<u64>(&mut mc, "rdb_bgsave_in_progress") == 1
    });
    // Writes during the sync: new keys and changes to keys not saved yet.
    for i in 0..100 {
        let _: () = cmd(&mut mc, &["SET", &format!("live{i}"), "v"]);
        let _: i64 = cmd(&mut mc, &["INCR", &format!("k{}", 299 - i)]);
    }
    assert_eq!(info_field::<u64>(&mut mc, "rdb_bgsave_in_progress"), 1);
    assert_eq!(info_field::<String>(&mut rc, "master_link_status"), "down");
    eventually("the replica in sync", || in_sync(&mut mc, &mut rc));
    let v: String = cmd(&mut rc, &["GET", "live99"]);
    assert_eq!(v, "v");
    let v: i64 = cmd(&mut rc, &["GET", "k200"]);
    assert_eq!(v, 201);
    assert_eq!(bgsaves_for_sync(&m), 1);
}
