//! KEYDB.CRON (issue 28 item 3): scheduled Lua scripts, their key, their
//! persistence (RDB, AOF) and replication (a plain replica, an active pair).
//! KeyDB's own tests/unit/cron.tcl runs too (ci/keydb-active.sh).

mod common;

use std::time::Duration;

use common::*;

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

fn get_i64(c: &mut redis::Connection, key: &str) -> i64 {
    cmd::<Option<i64>>(c, &["GET", key]).unwrap_or(0)
}

#[test]
fn single_and_repeating_jobs_run_and_a_single_one_is_deleted() {
    let s = Server::start(&["--hz", "100"]);
    let mut c = s.conn();
    let script = "redis.call('incr', KEYS[1])";
    let () = cmd(
        &mut c,
        &["KEYDB.CRON", "once", "SINGLE", "0", "1", script, "1", "a"],
    );
    eventually("the single job to run", || get_i64(&mut c, "a") == 1);
    eventually("its key to go", || {
        cmd::<i64>(&mut c, &["EXISTS", "once"]) == 0
    });
    // A start of 0 and an interval in the past: runs now, then one interval on.
    let () = cmd(
        &mut c,
        &["KEYDB.CRON", "rep", "REPEAT", "0", "400", script, "1", "b"],
    );
    eventually("the first run", || get_i64(&mut c, "b") >= 1);
    sleep_ms(200);
    assert_eq!(get_i64(&mut c, "b"), 1);
    eventually("the second run", || get_i64(&mut c, "b") == 2);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "rep"]), 1);
    assert_eq!(cmd::<String>(&mut c, &["TYPE", "rep"]), "unknown");
    // DEL cancels it.
    let () = cmd(&mut c, &["DEL", "rep"]);
    sleep_ms(600);
    assert_eq!(get_i64(&mut c, "b"), 2);
}

#[test]
fn a_job_runs_in_its_database_with_its_keys_and_args_and_can_be_replaced() {
    let s = Server::start(&["--hz", "100"]);
    let mut c = s.conn();
    let () = cmd(&mut c, &["SELECT", "3"]);
    let set = "redis.call('set', KEYS[1], ARGV[1] .. ARGV[2])";
    let () = cmd(
        &mut c,
        &["KEYDB.CRON", "j", "single", "300", set, "1", "k", "x", "y"],
    );
    let () = cmd(
        &mut c,
        &[
            "KEYDB.CRON",
            "j",
            "single",
            "300",
            set,
            "1",
            "other",
            "p",
            "q",
        ],
    );
    eventually("the replacing job to run", || {
        cmd::<Option<String>>(&mut c, &["GET", "other"]).as_deref() == Some("pq")
    });
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "k"]), 0);
    let () = cmd(&mut c, &["SELECT", "0"]);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "other"]), 0);
}

#[test]
fn a_run_publishes_keydbs_cron_executed_event() {
    let s = Server::start(&["--hz", "100", "--notify-keyspace-events", "KEA"]);
    let mut sub = s.client().get_connection().unwrap();
    let mut ps = sub.as_pubsub();
    ps.subscribe("__keyevent@0__:CRON Executed").unwrap();
    let mut c = s.conn();
    let () = cmd(&mut c, &["KEYDB.CRON", "j", "single", "0", "1", "return 1"]);
    ps.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let msg = ps.get_message().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "j");
}

#[test]
fn errors_are_keydbs() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let e = cmd_err(
        &mut c,
        &["KEYDB.CRON", "j", "single", "0", "0", "return 1", "0"],
    );
    assert!(e.contains("interval must be positive"), "{e}");
    let e = cmd_err(&mut c, &["KEYDB.CRON", "j", "weekly", "10", "return 1"]);
    assert!(e.contains("syntax error"), "{e}");
    let e = cmd_err(&mut c, &["KEYDB.CRON", "j", "single", "soon", "return 1"]);
    assert!(e.contains("missing expire time"), "{e}");
    let e = cmd_err(
        &mut c,
        &["KEYDB.CRON", "j", "single", "10", "return 1", "3", "k"],
    );
    assert!(e.contains("numkeys is too big"), "{e}");
    let e = cmd_err(&mut c, &["KEYDB.CRON", "j", "single", "10"]);
    assert!(e.contains("wrong number of arguments"), "{e}");
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "j"]), 0);
}

#[test]
fn a_job_survives_a_restart_from_the_rdb_and_from_the_aof() {
    for aof in ["no", "yes"] {
        let dir = tempdir(&format!("cron-{aof}"));
        let d = dir.to_str().unwrap();
        let s = Server::start(&["--dir", d, "--appendonly", aof, "--hz", "100"]);
        let mut c = s.conn();
        let script = "redis.call('incr', KEYS[1])";
        let start = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 60_000)
            .to_string();
        // Due in a minute, then every 300 ms: nothing runs before the restart.
        let () = cmd(
            &mut c,
            &[
                "KEYDB.CRON",
                "later",
                "repeat",
                &start,
                "300",
                script,
                "1",
                "n",
            ],
        );
        let () = cmd(
            &mut c,
            &["KEYDB.CRON", "soon", "repeat", "0", "300", script, "1", "m"],
        );
        eventually("the first run", || get_i64(&mut c, "m") >= 1);
        if aof == "no" {
            let () = cmd(&mut c, &["SAVE"]);
        } else {
            let _: String = cmd(&mut c, &["BGREWRITEAOF"]);
            sleep_ms(500);
        }
        let before = get_i64(&mut c, "m");
        drop(c);
        drop(s);
        let s = Server::start(&["--dir", d, "--appendonly", aof, "--hz", "100"]);
        let mut c = s.conn();
        assert_eq!(
            cmd::<i64>(&mut c, &["EXISTS", "later", "soon"]),
            2,
            "aof {aof}"
        );
        eventually("the loaded job to run", || get_i64(&mut c, "m") > before);
        assert_eq!(get_i64(&mut c, "n"), 0);
    }
}

#[test]
fn a_replica_holds_the_job_and_gets_its_writes_without_running_it() {
    let m = Server::start(&["--hz", "100"]);
    let r = Server::start(&["--hz", "100"]);
    let (mut mc, mut rc) = (m.conn(), r.conn());
    let () = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &m.port.to_string()]);
    eventually("the replica to sync", || in_sync(&mut mc, &mut rc));
    let script = "redis.call('incr', KEYS[1])";
    let () = cmd(
        &mut mc,
        &["KEYDB.CRON", "j", "repeat", "0", "300", script, "1", "n"],
    );
    eventually("two runs", || get_i64(&mut mc, "n") >= 2);
    eventually("the replica to follow", || in_sync(&mut mc, &mut rc));
    assert_eq!(cmd::<i64>(&mut rc, &["EXISTS", "j"]), 1);
    // Stop the master's runs: the replica's count stays the master's.
    let () = cmd(&mut mc, &["DEL", "j"]);
    eventually("the replica to follow", || in_sync(&mut mc, &mut rc));
    let n = get_i64(&mut mc, "n");
    sleep_ms(700);
    assert_eq!(get_i64(&mut rc, "n"), n);
    // A promoted replica runs the jobs it holds.
    let () = cmd(
        &mut mc,
        &["KEYDB.CRON", "j2", "repeat", "0", "300", script, "1", "p"],
    );
    eventually("the replica to follow", || in_sync(&mut mc, &mut rc));
    drop(mc);
    drop(m);
    let () = cmd(&mut rc, &["REPLICAOF", "NO", "ONE"]);
    let p = get_i64(&mut rc, "p");
    eventually("the promoted replica to run the job", || {
        get_i64(&mut rc, "p") > p
    });
}

#[test]
fn under_active_replication_only_the_jobs_owner_runs_it() {
    let (a, b) = (active_node(&["--hz", "100"]), active_node(&["--hz", "100"]));
    pull(&a, b.port);
    pull(&b, a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    let mut c = a.conn();
    let script = "redis.call('incr', KEYS[1])";
    // One run, then the next in a long while.
    let () = cmd(
        &mut c,
        &[
            "KEYDB.CRON",
            "j",
            "repeat",
            "0",
            "1000000",
            script,
            "1",
            "n",
        ],
    );
    converged(&[&a, &b]);
    sleep_ms(300);
    converged(&[&a, &b]);
    assert_eq!(get_i64(&mut c, "n"), 1);
    assert_eq!(get_i64(&mut b.conn(), "n"), 1);
    assert_eq!(cmd::<i64>(&mut b.conn(), &["EXISTS", "j"]), 1);
    // A job created on b runs on b, its writes reach a.
    let () = cmd(
        &mut b.conn(),
        &["KEYDB.CRON", "k", "single", "0", "1", script, "1", "m"],
    );
    eventually("b's job to run and its key to go on a", || {
        get_i64(&mut c, "m") == 1 && cmd::<i64>(&mut c, &["EXISTS", "k"]) == 0
    });
    converged(&[&a, &b]);
}
