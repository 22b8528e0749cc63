//! Transactions as clients see them: MULTI/EXEC/DISCARD queueing and
//! errors, WATCH broken by other connections' writes, expiry, FLUSHALL and
//! SWAPDB, isolation of EXEC against concurrent clients on other threads,
//! redis-rs atomic pipelines, and the effect stream of a transaction.

mod common;
use common::*;

use std::sync::Arc;
use std::time::Duration;

use redis::Value as V;

fn exec_raw(c: &mut redis::Connection) -> V {
    redis::cmd("EXEC").query(c).unwrap()
}

#[test]
fn queue_and_exec_replies() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    // Errors are inline elements of EXEC's array (raw: redis-rs turns them
    // into an Err of the whole reply).
    let mut r = s.raw();
    r.send(b"MULTI\r\nSET a 1\r\nINCR a\r\nSET s x\r\nINCR s\r\nGET a\r\nEXEC\r\n");
    for want in [
        "+OK",
        "+QUEUED",
        "+QUEUED",
        "+QUEUED",
        "+QUEUED",
        "+QUEUED",
        "*5",
        "+OK",
        ":2",
        "+OK",
        "-ERR value is not an integer or out of range",
        "$1",
        "2",
    ] {
        assert_eq!(r.line().trim_end(), want);
    }
    // Empty transaction.
    cmd::<()>(&mut c, &["MULTI"]);
    assert_eq!(exec_raw(&mut c), V::Array(vec![]));
}

#[test]
fn errors_and_execabort() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(cmd_err(&mut c, &["EXEC"]), "ERR EXEC without MULTI");
    assert_eq!(cmd_err(&mut c, &["DISCARD"]), "ERR DISCARD without MULTI");
    cmd::<()>(&mut c, &["MULTI"]);
    assert_eq!(
        cmd_err(&mut c, &["MULTI"]),
        "ERR MULTI calls can not be nested"
    );
    assert_eq!(
        cmd_err(&mut c, &["WATCH", "x"]),
        "ERR WATCH inside MULTI is not allowed"
    );
    // Neither error aborts the transaction.
    cmd::<String>(&mut c, &["SET", "k", "v"]);
    assert_eq!(exec_raw(&mut c), V::Array(vec![V::Okay]));

    for bad in [
        &["NOSUCHCMD", "x"][..],
        &["SET", "k"][..],
        &["SHUTDOWN"][..],
    ] {
        cmd::<()>(&mut c, &["MULTI"]);
        cmd::<String>(&mut c, &["SET", "k2", "v"]);
        cmd_err(&mut c, bad);
        cmd::<String>(&mut c, &["SET", "k3", "v"]);
        assert_eq!(
            cmd_err(&mut c, &["EXEC"]),
            "EXECABORT Transaction discarded because of previous errors."
        );
        assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "k2", "k3"]), 0);
    }
    cmd::<()>(&mut c, &["MULTI"]);
    assert_eq!(
        cmd_err(&mut c, &["SHUTDOWN"]),
        "ERR Command not allowed inside a transaction"
    );
    cmd::<()>(&mut c, &["DISCARD"]);
    // The client is out of MULTI after EXECABORT and DISCARD.
    assert_eq!(cmd::<String>(&mut c, &["PING"]), "PONG");
}

#[test]
fn discard_drops_queue_and_watches() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut o = s.conn();
    cmd::<()>(&mut c, &["SET", "x", "1"]);
    cmd::<()>(&mut c, &["WATCH", "x"]);
    cmd::<()>(&mut o, &["SET", "x", "10"]);
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["DEL", "x"]);
    assert_eq!(cmd::<String>(&mut c, &["DISCARD"]), "OK");
    assert_eq!(cmd::<String>(&mut c, &["GET", "x"]), "10");
    // DISCARD also cleared the dirty flag and the watches.
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["INCR", "x"]);
    assert_eq!(exec_raw(&mut c), V::Array(vec![V::Int(11)]));
}

#[test]
fn watch_broken_by_other_connection() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut o = s.conn();
    cmd::<()>(&mut c, &["SET", "x", "1"]);
    cmd::<()>(&mut c, &["WATCH", "x", "y", "absent"]);
    cmd::<()>(&mut o, &["SET", "other", "1"]); // other keys: no effect
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["SET", "x", "2"]);
    assert_eq!(exec_raw(&mut c), V::Array(vec![V::Okay]));

    // A same-value rewrite breaks it.
    cmd::<()>(&mut c, &["WATCH", "x"]);
    cmd::<()>(&mut o, &["SET", "x", "2"]);
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["SET", "x", "3"]);
    assert_eq!(exec_raw(&mut c), V::Nil);
    assert_eq!(cmd::<String>(&mut c, &["GET", "x"]), "2");

    // A key created and deleted again after WATCH breaks it too.
    cmd::<()>(&mut c, &["WATCH", "ghost"]);
    cmd::<()>(&mut o, &["SET", "ghost", "1"]);
    cmd::<()>(&mut o, &["DEL", "ghost"]);
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["PING"]);
    assert_eq!(exec_raw(&mut c), V::Nil);

    // RENAME onto a watched key.
    cmd::<()>(&mut o, &["SET", "src", "v"]);
    cmd::<()>(&mut c, &["WATCH", "dst"]);
    cmd::<()>(&mut o, &["RENAME", "src", "dst"]);
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["PING"]);
    assert_eq!(exec_raw(&mut c), V::Nil);

    // UNWATCH forgets; EXEC unwatches.
    cmd::<()>(&mut c, &["WATCH", "x"]);
    cmd::<()>(&mut c, &["UNWATCH"]);
    cmd::<()>(&mut o, &["SET", "x", "9"]);
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["PING"]);
    assert_eq!(
        exec_raw(&mut c),
        V::Array(vec![V::SimpleString("PONG".into())])
    );

    // WATCH remembers the database of the key.
    cmd::<()>(&mut c, &["SELECT", "5"]);
    cmd::<()>(&mut c, &["SET", "x", "30"]);
    cmd::<()>(&mut c, &["WATCH", "x"]);
    cmd::<()>(&mut o, &["SET", "x", "10"]); // db 0
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["PING"]);
    assert_eq!(
        exec_raw(&mut c),
        V::Array(vec![V::SimpleString("PONG".into())])
    );
}

#[test]
fn watch_broken_by_expiry() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut o = s.conn();
    cmd::<()>(&mut c, &["SET", "x", "1", "PX", "100"]);
    cmd::<()>(&mut c, &["WATCH", "x"]);
    std::thread::sleep(Duration::from_millis(300));
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["INCR", "x"]);
    assert_eq!(exec_raw(&mut c), V::Nil);

    // EXPIRE on a watched key is a modification.
    cmd::<()>(&mut c, &["SET", "y", "1"]);
    cmd::<()>(&mut c, &["WATCH", "y"]);
    cmd::<()>(&mut o, &["PEXPIRE", "y", "100000"]);
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["PING"]);
    assert_eq!(exec_raw(&mut c), V::Nil);
}

#[test]
fn watch_and_flush_swapdb() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut o = s.conn();
    let ping_exec = |c: &mut redis::Connection| {
        cmd::<()>(c, &["MULTI"]);
        cmd::<String>(c, &["PING"]);
        exec_raw(c)
    };
    let pong = V::Array(vec![V::SimpleString("PONG".into())]);

    cmd::<()>(&mut c, &["SET", "x", "1"]);
    cmd::<()>(&mut c, &["WATCH", "x"]);
    cmd::<()>(&mut o, &["FLUSHALL"]);
    assert_eq!(ping_exec(&mut c), V::Nil);

    // Flushing a database where the watched key does not exist: no change.
    cmd::<()>(&mut c, &["WATCH", "x"]);
    cmd::<()>(&mut o, &["SET", "z", "1"]);
    cmd::<()>(&mut o, &["FLUSHDB"]);
    assert_eq!(ping_exec(&mut c), pong);

    cmd::<()>(&mut c, &["SET", "x", "1"]);
    cmd::<()>(&mut c, &["WATCH", "x"]);
    cmd::<()>(&mut o, &["FLUSHDB"]);
    assert_eq!(ping_exec(&mut c), V::Nil);

    // SWAPDB touches watched keys that exist, and those it creates.
    cmd::<()>(&mut c, &["SET", "x", "1"]);
    cmd::<()>(&mut c, &["WATCH", "x"]);
    cmd::<()>(&mut o, &["SWAPDB", "0", "1"]);
    assert_eq!(ping_exec(&mut c), V::Nil);
    cmd::<()>(&mut c, &["WATCH", "x"]); // absent in db 0 now
    cmd::<()>(&mut o, &["SWAPDB", "0", "1"]);
    assert_eq!(ping_exec(&mut c), V::Nil);
}

#[test]
fn resp3_exec_and_abort() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    r.send(b"HELLO 3\r\n");
    let first = r.line();
    assert!(first.starts_with('%'), "{first}");
    let n: usize = first[1..].trim().parse().unwrap();
    for _ in 0..n * 2 {
        let l = r.line();
        if l.starts_with('$') {
            r.line();
        } else if l.starts_with('*') {
            // "modules" => empty array
        }
    }
    r.send(b"SET k 1\r\nWATCH k\r\nSET k 2\r\nMULTI\r\nGET k\r\nEXEC\r\n");
    for want in ["+OK", "+OK", "+OK", "+OK", "+QUEUED", "_"] {
        assert_eq!(r.line().trim_end(), want);
    }
    r.send(b"MULTI\r\nGET k\r\nEXEC\r\n");
    for want in ["+OK", "+QUEUED", "*1", "$1", "2"] {
        assert_eq!(r.line().trim_end(), want);
    }
    // RESP2: aborted EXEC is a null array.
    let mut r2 = s.raw();
    r2.send(b"WATCH k\r\nSET k 3\r\nMULTI\r\nEXEC\r\n");
    for want in ["+OK", "+OK", "+OK", "*-1"] {
        assert_eq!(r2.line().trim_end(), want);
    }
}

#[test]
fn watch_increments_are_exact_across_threads() {
    let s = Server::start(&["--server-threads", "4"]);
    let s = Arc::new(s);
    let (threads, per) = (4, 60);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut c = s.conn();
                let mut done = 0;
                while done < per {
                    cmd::<()>(&mut c, &["WATCH", "counter"]);
                    let v: Option<i64> = cmd(&mut c, &["GET", "counter"]);
                    let next = (v.unwrap_or(0) + 1).to_string();
                    cmd::<()>(&mut c, &["MULTI"]);
                    cmd::<String>(&mut c, &["SET", "counter", &next]);
                    if exec_raw(&mut c) != V::Nil {
                        done += 1;
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut c = s.conn();
    assert_eq!(
        cmd::<i64>(&mut c, &["GET", "counter"]),
        (threads * per) as i64
    );
}

#[test]
fn exec_is_never_seen_half_applied() {
    let s = Arc::new(Server::start(&["--server-threads", "4"]));
    let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (s, keys, stop) = (s.clone(), keys.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut c = s.conn();
                let mut seen = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut q = redis::cmd("MGET");
                    for k in &keys {
                        q.arg(k);
                    }
                    let vals: Vec<Option<String>> = q.query(&mut c).unwrap();
                    let first = &vals[0];
                    assert!(vals.iter().all(|v| v == first), "half-applied: {vals:?}");
                    seen += 1;
                }
                seen
            })
        })
        .collect();
    let mut w = s.conn();
    for round in 0..200 {
        let v = round.to_string();
        cmd::<()>(&mut w, &["MULTI"]);
        for k in &keys {
            cmd::<String>(&mut w, &["SET", k, &v]);
        }
        let V::Array(r) = exec_raw(&mut w) else {
            panic!()
        };
        assert_eq!(r.len(), keys.len());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

#[test]
fn keyless_and_cross_db_transactions() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SET", "a", "1"]);
    cmd::<()>(&mut c, &["MULTI"]);
    for q in [
        &["SET", "b", "2"][..],
        &["DBSIZE"][..],
        &["KEYS", "*"][..],
        &["SELECT", "3"][..],
        &["SET", "c", "3"][..],
        &["MOVE", "c", "0"][..],
        &["SELECT", "0"][..],
        &["MGET", "a", "b", "c"][..],
        &["FLUSHALL"][..],
        &["DBSIZE"][..],
    ] {
        assert_eq!(cmd::<String>(&mut c, q), "QUEUED");
    }
    let V::Array(r) = exec_raw(&mut c) else {
        panic!()
    };
    assert_eq!(r[1], V::Int(2));
    assert_eq!(r[5], V::Int(1));
    assert_eq!(
        r[7],
        V::Array(vec![
            V::BulkString(b"1".to_vec()),
            V::BulkString(b"2".to_vec()),
            V::BulkString(b"3".to_vec())
        ])
    );
    assert_eq!(r[9], V::Int(0));
    // The server still serves other keys (no lock left behind).
    cmd::<()>(&mut c, &["SET", "after", "1"]);
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 1);
}

#[test]
fn redis_rs_atomic_pipeline_and_stats() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let (a, b): (i64, String) = redis::pipe()
        .atomic()
        .cmd("INCRBY")
        .arg("n")
        .arg(5)
        .cmd("SET")
        .arg("m")
        .arg("x")
        .ignore()
        .cmd("GET")
        .arg("m")
        .query(&mut c)
        .unwrap();
    assert_eq!((a, b.as_str()), (5, "x"));
    let info: String = cmd(&mut c, &["INFO", "commandstats"]);
    for name in ["multi", "exec", "incrby", "set", "get"] {
        assert!(
            info.contains(&format!("cmdstat_{name}:calls=1,")),
            "{name}: {info}"
        );
    }
}

#[test]
fn effects_of_a_transaction_are_one_unit() {
    use lattice::facade::commands::{replay, run_local};
    use lattice::facade::config::Config;
    use lattice::facade::core::client::ClientState;
    use lattice::facade::effects::Recorder;
    use lattice::facade::keyspace::hlc::Hlc;

    let srv = lattice::facade::server::Server::new(Config::default());
    let rec = Arc::new(Recorder::default());
    srv.effects.subscribe(rec.clone());
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let mut client = ClientState::new(1);
    let mut run = |argv: &[&str]| {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        run_local(&srv, &mut clock, &stats, &mut client, &argv).unwrap()
    };
    run(&["MULTI"]);
    assert_eq!(run(&["SET", "a", "1"]), b"+QUEUED\r\n");
    run(&["GET", "a"]);
    run(&["SET", "b", "2"]);
    run(&["EXEC"]);
    // One write alone is not wrapped.
    run(&["MULTI"]);
    run(&["SET", "c", "3"]);
    run(&["EXEC"]);
    let names: Vec<String> = rec
        .0
        .lock()
        .iter()
        .map(|e| String::from_utf8_lossy(&e.argv[0]).to_uppercase())
        .collect();
    assert_eq!(names, ["MULTI", "SET", "SET", "EXEC", "SET"]);

    let copy = lattice::facade::server::Server::new(Config::default());
    let mut clock2 = Hlc::new(copy.node_id);
    let stats2 = copy.new_worker_stats();
    for e in rec.0.lock().iter() {
        replay(&copy, &mut clock2, &stats2, e).unwrap();
    }
    let mut c2 = ClientState::new(2);
    let got = run_local(
        &copy,
        &mut clock2,
        &stats2,
        &mut c2,
        &[b"MGET", b"a", b"b", b"c"],
    );
    assert_eq!(got.unwrap(), b"*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n");
}

#[test]
fn monitor_shows_exec_after_its_commands() {
    let s = Server::start(&[]);
    let mut m = s.raw();
    m.send(b"MONITOR\r\n");
    assert_eq!(m.line().trim_end(), "+OK");
    let mut c = s.conn();
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["SET", "foo", "bar"]);
    exec_raw(&mut c);
    cmd::<()>(&mut c, &["MULTI"]);
    let _ = cmd_err(&mut c, &["SYNTAX", "error"]);
    let _ = cmd_err(&mut c, &["EXEC"]);
    for want in [
        "\"multi\"",
        "\"set\" \"foo\" \"bar\"",
        "\"exec\"",
        "\"multi\"",
        "\"exec\"",
    ] {
        let mut l = m.line().to_lowercase();
        while l.contains("\"client\"") {
            l = m.line().to_lowercase(); // redis-rs's CLIENT SETINFO
        }
        assert!(l.contains(want), "{want} not in {l}");
    }
}

#[test]
fn mixed_transactions_and_db_wide_commands_do_not_deadlock() {
    let s = Arc::new(Server::start(&["--server-threads", "4"]));
    let scripts: Vec<Vec<Vec<&'static str>>> = vec![
        // Keyless commands: EXEC holds every shard of every database.
        vec![
            vec!["SET", "a", "1"],
            vec!["DBSIZE"],
            vec!["SELECT", "2"],
            vec!["SET", "b", "2"],
            vec!["SELECT", "0"],
        ],
        // Keyed commands only: just their shards.
        vec![
            vec!["SET", "x", "1"],
            vec!["RENAME", "x", "y"],
            vec!["MGET", "a", "y"],
        ],
        vec![
            vec!["SWAPDB", "0", "1"],
            vec!["SET", "z", "1"],
            vec!["MOVE", "z", "3"],
        ],
    ];
    let handles: Vec<_> = scripts
        .into_iter()
        .enumerate()
        .map(|(i, script)| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut c = s.conn();
                for round in 0..150 {
                    if (round + i) % 3 == 0 {
                        // Plain commands between transactions.
                        cmd::<()>(&mut c, &["SET", "a", "0"]);
                        cmd::<()>(&mut c, &["FLUSHDB"]);
                        continue;
                    }
                    cmd::<()>(&mut c, &["WATCH", "a", "y"]);
                    cmd::<()>(&mut c, &["MULTI"]);
                    for q in &script {
                        assert_eq!(cmd::<String>(&mut c, q), "QUEUED");
                    }
                    let _: V = redis::cmd("EXEC").query(&mut c).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut c = s.conn();
    assert_eq!(cmd::<String>(&mut c, &["PING"]), "PONG");
}

/// A blocking pop inside MULTI does not block: on an empty list it answers
/// as if it had timed out (null array), on a full one it pops at once.
#[test]
fn blocking_pop_inside_exec_does_not_block() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    r.send(b"MULTI\r\nBLPOP nolist 0\r\nRPUSH l a\r\nBLPOP l 0\r\nEXEC\r\n");
    for want in [
        "+OK", "+QUEUED", "+QUEUED", "+QUEUED", "*3", "*-1", ":1", "*2", "$1", "l", "$1", "a",
    ] {
        assert_eq!(r.line().trim_end(), want);
    }
    let mut c = s.conn();
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "l"]), 0);
}

/// CLIENT LIST shows how many commands an open MULTI has queued (multi=N),
/// and -1 outside a transaction, as Redis does.
#[test]
fn client_list_counts_queued_commands() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut other = s.conn();
    let id: i64 = cmd(&mut c, &["CLIENT", "ID"]);
    let multi_field = |o: &mut redis::Connection| -> String {
        let line: String = cmd(o, &["CLIENT", "LIST", "ID", &id.to_string()]);
        line.split(' ')
            .find(|f| f.starts_with("multi="))
            .unwrap()
            .to_string()
    };
    assert_eq!(multi_field(&mut other), "multi=-1");
    cmd::<()>(&mut c, &["MULTI"]);
    assert_eq!(multi_field(&mut other), "multi=0");
    cmd::<()>(&mut c, &["SET", "a", "1"]);
    cmd::<()>(&mut c, &["INCR", "a"]);
    assert_eq!(multi_field(&mut other), "multi=2");
    exec_raw(&mut c);
    assert_eq!(multi_field(&mut other), "multi=-1");
}

/// An EXEC refused at EXEC time for what its queue holds (a write that
/// `min-replicas-to-write` now refuses; a read is let through) answers
/// EXECABORT with the reason and ends the transaction, as Redis's
/// rejectCommand: admission decides once, with EXEC's flags holding its
/// queue's.
#[test]
fn exec_refused_for_its_queued_write_ends_the_transaction() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut o = s.conn();
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["SET", "k", "v"]);
    cmd::<()>(&mut o, &["CONFIG", "SET", "min-replicas-to-write", "1"]);
    assert_eq!(
        cmd_err(&mut c, &["EXEC"]),
        "EXECABORT Transaction discarded because of: NOREPLICAS Not enough good replicas to write."
    );
    assert_eq!(cmd_err(&mut c, &["DISCARD"]), "ERR DISCARD without MULTI");
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "k"]), 0);
    // A queue of reads runs.
    cmd::<()>(&mut c, &["MULTI"]);
    cmd::<String>(&mut c, &["GET", "k"]);
    assert_eq!(exec_raw(&mut c), V::Array(vec![V::Nil]));
}
