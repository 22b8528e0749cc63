//! LatticeDB as a replica: of a real redis-server 7 master (full sync,
//! live writes, partial resync after a dropped link, AUTH, read-only), of
//! another LatticeDB in a chain A -> B -> C with the top master's offsets,
//! promotion with REPLICAOF NO ONE, and a fake master that speaks garbage.

mod common;
use common::*;
use std::io::{Read, Write};

fn fill(c: &mut redis::Connection) {
    let _: () = cmd(c, &["SET", "s", "v"]);
    let _: () = cmd(c, &["SET", "ttl", "v", "EX", "1000"]);
    let _: i64 = cmd(c, &["RPUSH", "l", "a", "b", "1"]);
    let _: i64 = cmd(c, &["HSET", "h", "f", "v"]);
    let _: i64 = cmd(c, &["SADD", "set", "1", "2"]);
    let _: i64 = cmd(c, &["ZADD", "z", "1", "a"]);
    let _: () = cmd(c, &["SELECT", "3"]);
    let _: () = cmd(c, &["SET", "in3", "x"]);
    let _: () = cmd(c, &["SELECT", "0"]);
}

#[test]
fn replica_of_redis_syncs_follows_and_resumes_partially() {
    // No diskless delay, so the test does not wait 5 s for the sync.
    let m = RedisOracle::start(&["--repl-diskless-sync-delay", "0"]);
    let mut mc = m.conn();
    let _: () = cmd(&mut mc, &["CONFIG", "SET", "requirepass", "pw"]);
    let _: () = cmd(&mut mc, &["AUTH", "pw"]);
    fill(&mut mc);
    let s = Server::start(&["--repl-diskless-sync-delay", "0", "--masterauth", "pw"]);
    let mut rc = s.conn();
    let _: () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &m.port.to_string()]);
    eventually("the initial sync", || in_sync(&mut mc, &mut rc));
    assert_eq!(info_field::<String>(&mut rc, "role"), "slave");
    let role: Vec<redis::Value> = cmd(&mut rc, &["ROLE"]);
    assert_eq!(role[0], redis::Value::BulkString(b"slave".to_vec()));
    assert_eq!(role[3], redis::Value::BulkString(b"connected".to_vec()));
    // Read-only.
    let err = cmd_err(&mut rc, &["SET", "x", "1"]);
    assert!(
        err.contains("You can't write against a read only replica."),
        "{err}"
    );
    // Live writes, then a dropped link resumes with a partial resync.
    let _: i64 = cmd(&mut mc, &["INCR", "n"]);
    eventually("live writes", || in_sync(&mut mc, &mut rc));
    let killed: i64 = cmd(&mut mc, &["CLIENT", "KILL", "TYPE", "replica"]);
    assert_eq!(killed, 1);
    let _: i64 = cmd(&mut mc, &["INCR", "n"]);
    eventually("the resync", || in_sync(&mut mc, &mut rc));
    assert_eq!(info_field::<u64>(&mut mc, "sync_full"), 1);
    assert_eq!(info_field::<u64>(&mut mc, "sync_partial_ok"), 1);
    // The master's DEL of an expiring key reaches us.
    let _: i64 = cmd(&mut mc, &["PEXPIRE", "s", "50"]);
    eventually("the expiry", || {
        cmd::<Option<String>>(&mut rc, &["GET", "s"]).is_none() && in_sync(&mut mc, &mut rc)
    });
    // Promotion: writable, and the old history is kept as replid2.
    let old: String = info_field(&mut rc, "master_replid");
    let _: () = cmd(&mut rc, &["REPLICAOF", "NO", "ONE"]);
    let _: () = cmd(&mut rc, &["SET", "x", "1"]);
    assert_eq!(info_field::<String>(&mut rc, "role"), "master");
    assert_eq!(info_field::<String>(&mut rc, "master_replid2"), old);
}

#[test]
fn chain_of_lattice_nodes_relays_the_exact_stream() {
    let a = Server::start(&["--repl-diskless-sync-delay", "0"]);
    let mut ac = a.conn();
    fill(&mut ac);
    let b = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--replicaof",
        "127.0.0.1",
        &a.port.to_string(),
    ]);
    let c = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--replicaof",
        "127.0.0.1",
        &b.port.to_string(),
    ]);
    let (mut bc, mut cc) = (b.conn(), c.conn());
    for i in 0..200 {
        let _: () = cmd(&mut ac, &["SET", &format!("k{i}"), &i.to_string()]);
    }
    let _: i64 = cmd(&mut ac, &["EXPIRE", "k1", "100"]);
    eventually("A -> B", || in_sync(&mut ac, &mut bc));
    eventually("B -> C", || in_sync(&mut ac, &mut cc));
    // A restarted middle node: C's link drops and resumes partially.
    let _: () = cmd(&mut bc, &["CLIENT", "KILL", "TYPE", "replica"]);
    let _: () = cmd(&mut ac, &["SET", "after", "1"]);
    eventually("C again", || in_sync(&mut ac, &mut cc));
    assert_eq!(info_field::<u64>(&mut bc, "sync_partial_ok"), 1);
    // B promoted: it closes C's link, as Redis's replicationUnsetMaster,
    // and C follows it with a partial resync (PSYNC2), learning B's new id.
    let _: () = cmd(&mut bc, &["REPLICAOF", "NO", "ONE"]);
    let _: () = cmd(&mut bc, &["SET", "on-b", "1"]);
    let new_id: String = info_field(&mut bc, "master_replid");
    eventually("C follows B under B's new id", || {
        in_sync(&mut bc, &mut cc) && info_field::<String>(&mut cc, "master_replid") == new_id
    });
    assert_eq!(info_field::<u64>(&mut bc, "sync_partial_ok"), 2);
    assert_eq!(info_field::<u64>(&mut bc, "sync_full"), 1);
}

/// A "master" that answers the handshake with nonsense: the replica keeps
/// retrying, logs, and serves its clients all along.
#[test]
fn a_master_speaking_garbage_never_takes_the_replica_down() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let mut accepted = 0;
        for stream in listener.incoming().take(3) {
            let mut s = stream.unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            let garbage: &[u8] = match accepted {
                0 => b"+PONG\r\n+OK\r\n+OK\r\n+FULLRESYNC abc 0\r\n$100\r\nshort",
                1 => b"\x00\xff garbage \r\n\r\n$$$",
                _ => b"+PONG\r\n+OK\r\n+OK\r\n+FULLRESYNC abc 0\r\n$EOF:0123456789012345678901234567890123456789\r\nREDIS0010notanrdb0123456789012345678901234567890123456789",
            };
            let _ = s.write_all(garbage);
            accepted += 1;
        }
        accepted
    });
    let s = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--replicaof",
        "127.0.0.1",
        &port.to_string(),
    ]);
    let mut c = s.conn();
    assert_eq!(fake.join().unwrap(), 3);
    let pong: String = cmd(&mut c, &["PING"]);
    assert_eq!(pong, "PONG");
    assert_eq!(info_field::<String>(&mut c, "master_link_status"), "down");
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 0);
}

#[test]
fn failover_switches_roles_with_a_partial_resync() {
    let a = Server::start(&["--repl-diskless-sync-delay", "0"]);
    let mut ac = a.conn();
    let err = cmd_err(&mut ac, &["FAILOVER"]);
    assert!(
        err.contains("FAILOVER requires connected replicas."),
        "{err}"
    );
    let err = cmd_err(&mut ac, &["FAILOVER", "ABORT"]);
    assert!(err.contains("No failover in progress."), "{err}");
    fill(&mut ac);
    let b = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--replicaof",
        "127.0.0.1",
        &a.port.to_string(),
    ]);
    let mut bc = b.conn();
    eventually("the initial sync", || in_sync(&mut ac, &mut bc));
    let err = cmd_err(
        &mut ac,
        &["FAILOVER", "TO", "127.0.0.1", "1", "TIMEOUT", "100"],
    );
    assert!(err.contains("is not a replica"), "{err}");
    let _: () = cmd(&mut ac, &["FAILOVER", "TIMEOUT", "5000"]);
    eventually("the switch", || {
        info_field::<String>(&mut bc, "role") == "master"
            && info_field::<String>(&mut ac, "role") == "slave"
            && info_field::<String>(&mut ac, "master_link_status") == "up"
            && info_field::<String>(&mut ac, "master_failover_state") == "no-failover"
    });
    let _: () = cmd(&mut bc, &["SET", "on-new-master", "1"]);
    eventually("A follows B", || in_sync(&mut bc, &mut ac));
    let err = cmd_err(&mut ac, &["SET", "x", "1"]);
    assert!(err.contains("read only replica"), "{err}");
    assert_eq!(info_field::<u64>(&mut bc, "sync_partial_ok"), 1);
    assert_eq!(info_field::<u64>(&mut bc, "sync_full"), 0);
}

/// integration/failover's "failover aborts if target rejects sync
/// request": a target whose ACL refuses PSYNC makes the FAILOVER abort,
/// the master a master again with writes resumed, as in Redis.
#[test]
fn a_failover_whose_target_refuses_psync_aborts() {
    let a = Server::start(&["--repl-diskless-sync-delay", "0"]);
    let mut ac = a.conn();
    fill(&mut ac);
    let b = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--replicaof",
        "127.0.0.1",
        &a.port.to_string(),
    ]);
    let mut bc = b.conn();
    eventually("the initial sync", || in_sync(&mut ac, &mut bc));
    let _: () = cmd(&mut bc, &["ACL", "SETUSER", "default", "-psync"]);
    let _: () = cmd(
        &mut ac,
        &["FAILOVER", "TO", "127.0.0.1", &b.port.to_string()],
    );
    eventually("the failover to end", || {
        info_field::<String>(&mut ac, "master_failover_state") == "no-failover"
            && a.log()
                .contains("FAILOVER aborted: Failover target rejected psync request")
    });
    assert_eq!(info_field::<String>(&mut ac, "role"), "master");
    assert_eq!(info_field::<String>(&mut bc, "role"), "slave");
    let _: () = cmd(&mut ac, &["SET", "after-abort", "1"]);
    let _: () = cmd(&mut bc, &["ACL", "SETUSER", "default", "+psync"]);
    eventually("B follows A again", || in_sync(&mut ac, &mut bc));
    // A master again, A closed B's link (Redis's replicationUnsetMaster):
    // B continued with a partial resync, as the Tcl test counts.
    eventually("B's partial resync", || {
        info_field::<u64>(&mut ac, "sync_partial_ok") == 1
    });
    assert_eq!(info_field::<u64>(&mut ac, "sync_full"), 1);
}

/// A replica restarted from its RDB (repl-id and repl-offset aux fields)
/// continues with a partial resync; so do replicas of a restarted master.
#[test]
fn restarts_resume_with_partial_resyncs() {
    let dir = std::env::temp_dir().join(format!("lattice-repl-restart-{}", std::process::id()));
    let (mdir, rdir) = (dir.join("m"), dir.join("r"));
    std::fs::create_dir_all(&mdir).unwrap();
    std::fs::create_dir_all(&rdir).unwrap();
    let (md, rd) = (mdir.to_str().unwrap(), rdir.to_str().unwrap());
    let m = Server::start(&["--repl-diskless-sync-delay", "0", "--dir", md]);
    let mut mc = m.conn();
    fill(&mut mc);
    let mport = m.port.to_string();
    let r = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--dir",
        rd,
        "--replicaof",
        "127.0.0.1",
        &mport,
    ]);
    let mut rc = r.conn();
    eventually("the initial sync", || in_sync(&mut mc, &mut rc));
    // The replica restarts.
    let _ = redis::cmd("SHUTDOWN").arg("SAVE").query::<()>(&mut rc);
    drop(r);
    let _: i64 = cmd(&mut mc, &["INCR", "while-replica-down"]);
    let r = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--dir",
        rd,
        "--replicaof",
        "127.0.0.1",
        &mport,
    ]);
    let mut rc = r.conn();
    eventually("the resync after the replica's restart", || {
        in_sync(&mut mc, &mut rc)
    });
    assert_eq!(info_field::<u64>(&mut mc, "sync_full"), 1);
    assert_eq!(info_field::<u64>(&mut mc, "sync_partial_ok"), 1);
    // The master restarts (on another port: the replica is pointed there).
    let _ = redis::cmd("SHUTDOWN").arg("SAVE").query::<()>(&mut mc);
    drop(m);
    let m = Server::start(&["--repl-diskless-sync-delay", "0", "--dir", md]);
    let mut mc = m.conn();
    let _: i64 = cmd(&mut mc, &["INCR", "after-master-restart"]);
    let _: () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &m.port.to_string()]);
    eventually("the resync after the master's restart", || {
        in_sync(&mut mc, &mut rc)
    });
    assert_eq!(info_field::<u64>(&mut mc, "sync_full"), 0);
    assert_eq!(info_field::<u64>(&mut mc, "sync_partial_ok"), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A replica made with REPLICAOF keeps its master in its config, as Redis's
/// does: CONFIG GET replicaof names it, CONFIG REWRITE writes it, so the
/// replica restarted from the rewritten file comes back as a replica and
/// continues partially from its RDB (Redis's psync2 test "Partial resync
/// after restart using RDB aux fields"); REPLICAOF NO ONE clears it.
#[test]
fn a_rewritten_config_brings_a_replica_back_as_one() {
    let dir = tempdir("repl-rewrite");
    let (conf, rdir) = (dir.join("replica.conf"), dir.join("r"));
    std::fs::create_dir_all(&rdir).unwrap();
    std::fs::write(&conf, format!("dir {}\n", rdir.display())).unwrap();
    let (conf, rd) = (conf.to_str().unwrap(), rdir.to_str().unwrap());
    let m = Server::start(&[]);
    let mut mc = m.conn();
    fill(&mut mc);
    let mport = m.port.to_string();
    let r = Server::start_with(Some(conf), &["--dir", rd]);
    let mut rc = r.conn();
    let _: () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &mport]);
    let got: Vec<String> = cmd(&mut rc, &["CONFIG", "GET", "replicaof"]);
    assert_eq!(got, ["replicaof".to_string(), format!("127.0.0.1 {mport}")]);
    eventually("the initial sync", || in_sync(&mut mc, &mut rc));
    let _: () = cmd(&mut rc, &["CONFIG", "REWRITE"]);
    let text = std::fs::read_to_string(conf).unwrap();
    assert!(
        text.contains(&format!("replicaof 127.0.0.1 {mport}")),
        "{text}"
    );
    let _ = redis::cmd("SHUTDOWN").arg("SAVE").query::<()>(&mut rc);
    drop(r);
    let _: i64 = cmd(&mut mc, &["INCR", "while-replica-down"]);
    let r = Server::start_with(Some(conf), &["--dir", rd]);
    let mut rc = r.conn();
    eventually("the resync after the restart", || in_sync(&mut mc, &mut rc));
    assert_eq!(info_field::<u64>(&mut mc, "sync_full"), 1);
    assert_eq!(info_field::<u64>(&mut mc, "sync_partial_ok"), 1);
    let _: () = cmd(&mut rc, &["REPLICAOF", "NO", "ONE"]);
    let got: Vec<String> = cmd(&mut rc, &["CONFIG", "GET", "replicaof"]);
    assert_eq!(got, ["replicaof", ""]);
    let _: () = cmd(&mut rc, &["CONFIG", "REWRITE"]);
    let text = std::fs::read_to_string(conf).unwrap();
    assert!(!text.contains("replicaof"), "{text}");
}

/// The commands a replica runs from its master's stream count in its INFO
/// commandstats (Redis's master client goes through call()): three SETs on
/// the master show as cmdstat_set calls=3 on the replica after a
/// CONFIG RESETSTAT there.
#[test]
fn a_replica_counts_its_masters_commands_in_commandstats() {
    let m = Server::start(&["--repl-diskless-sync-delay", "0"]);
    let r = Server::start(&[
        "--repl-diskless-sync-delay",
        "0",
        "--replicaof",
        "127.0.0.1",
        &m.port.to_string(),
    ]);
    let (mut mc, mut rc) = (m.conn(), r.conn());
    eventually("the sync", || in_sync(&mut mc, &mut rc));
    let _: () = cmd(&mut rc, &["CONFIG", "RESETSTAT"]);
    for v in ["a", "b", "c"] {
        let _: () = cmd(&mut mc, &["SET", "k", v]);
    }
    eventually("the SETs on the replica", || {
        cmd::<Option<String>>(&mut rc, &["GET", "k"]).as_deref() == Some("c")
    });
    let stats: String = cmd(&mut rc, &["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_set:calls=3,"), "{stats}");
}

/// PSYNC with an offset that is not a number: Redis's error, and its log
/// line naming the replica.
#[test]
fn psync_with_a_bad_offset_is_refused_and_logged() {
    let m = Server::start(&[]);
    let mut c = m.conn();
    let err = cmd_err(&mut c, &["PSYNC", "replicationid", "offset_str"]);
    assert_eq!(err, "ERR value is not an integer or out of range");
    assert!(m
        .log()
        .contains("asks for synchronization but with a wrong offset"));
    let pong: String = cmd(&mut c, &["PING"]);
    assert_eq!(pong, "PONG");
}
