//! RDB snapshots as a user sees them: SAVE/BGSAVE files that redis-server
//! loads with the same data (DEBUG DIGEST compared), BGSAVE capturing the
//! instant it was asked for while writes go on, LASTSAVE and INFO fields,
//! and MISCONF after a failed background save.

mod common;
use common::*;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A real redis-server loading `dir/dbfilename`.
fn oracle(dir: &Path, dbfilename: &str) -> RedisOracle {
    let dir = dir.to_str().unwrap();
    RedisOracle::start(&["--dir", dir, "--dbfilename", dbfilename])
}

/// Every type in both of its encodings, TTLs, and three databases.
fn populate(c: &mut redis::Connection) {
    let mut p = redis::pipe();
    p.cmd("SET").arg("str:int").arg("12345");
    p.cmd("SET").arg("str:bigint").arg("123456789012345");
    p.cmd("SET").arg("str:short").arg("hello");
    p.cmd("SET").arg("str:long").arg("x".repeat(300)); // LZF
    p.cmd("SET").arg("str:rand").arg(
        (0..200u32)
            .map(|i| (i * 7919 % 251) as u8)
            .collect::<Vec<_>>(),
    );
    p.cmd("APPEND").arg("str:raw").arg("appended");
    p.cmd("SET").arg("ttl:ms").arg("v").arg("PX").arg("500000");
    p.cmd("RPUSH")
        .arg("list:small")
        .arg(&["a", "1", "-7", "300", "70000", "-2147483649"]);
    for i in 0..2000 {
        p.cmd("RPUSH").arg("list:big").arg(format!("element-{i}"));
    }
    p.cmd("HSET")
        .arg("hash:small")
        .arg(&["f1", "v1", "f2", "2"]);
    for i in 0..600 {
        p.cmd("HSET").arg("hash:big").arg(format!("f{i}")).arg(i);
    }
    p.cmd("SADD")
        .arg("set:int")
        .arg(&["1", "2", "-3", "70000", "5000000000"]);
    p.cmd("SADD").arg("set:str").arg(&["a", "b", "c"]);
    for i in 0..700 {
        p.cmd("SADD").arg("set:big").arg(format!("m{i}"));
    }
    p.cmd("ZADD")
        .arg("zset:small")
        .arg(&["1", "a", "2.5", "b", "-3", "c", "inf", "d"]);
    for i in 0..300 {
        p.cmd("ZADD")
            .arg("zset:big")
            .arg(i as f64 / 3.0)
            .arg(format!("m{i}"));
    }
    p.cmd("EXPIRE").arg("hash:small").arg(100000);
    p.cmd("SELECT").arg(2).cmd("SET").arg("db2").arg("two");
    p.cmd("SELECT").arg(9).cmd("RPUSH").arg("db9").arg("nine");
    p.cmd("SELECT").arg(0);
    let () = p.query(c).unwrap();
}

fn wait_for_bgsave(c: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while info_field::<u32>(c, "rdb_bgsave_in_progress") == 1 {
        assert!(Instant::now() < deadline, "BGSAVE did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn save_writes_a_file_redis_loads_with_the_same_data() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    populate(&mut c);
    let digest: String = cmd(&mut c, &["DEBUG", "DIGEST"]);
    assert_eq!(cmd::<String>(&mut c, &["SAVE"]), "OK");
    let o = oracle(&s.dir, "dump.rdb");
    let mut r = o.conn();
    assert_eq!(cmd::<String>(&mut r, &["DEBUG", "DIGEST"]), digest);
    for (key, enc) in [
        ("list:big", "quicklist"),
        ("hash:small", "listpack"),
        ("hash:big", "hashtable"),
        ("set:int", "intset"),
        ("set:big", "hashtable"),
        ("zset:small", "listpack"),
        ("zset:big", "skiplist"),
    ] {
        let got: String = cmd(&mut r, &["OBJECT", "ENCODING", key]);
        assert_eq!(got, enc, "{key}");
    }
    assert!(cmd::<i64>(&mut r, &["PTTL", "ttl:ms"]) > 400_000);
}

#[test]
fn bgsave_captures_the_instant_it_was_asked_for() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let n = 100_000;
    let mut p = redis::pipe();
    for i in 0..n {
        p.cmd("SET")
            .arg(format!("k{i}"))
            .arg(format!("old{i}"))
            .ignore();
    }
    let () = p.query(&mut c).unwrap();
    let digest: String = cmd(&mut c, &["DEBUG", "DIGEST"]);
    // The writes below are sent right behind BGSAVE on the same connection,
    // so they all happen after the cut, most of them while it is written.
    let mut p = redis::pipe();
    p.cmd("BGSAVE");
    for i in (0..n).rev() {
        match i % 3 {
            0 => p.cmd("SET").arg(format!("k{i}")).arg("new").ignore(),
            1 => p.cmd("DEL").arg(format!("k{i}")).ignore(),
            _ => p.cmd("SET").arg(format!("fresh{i}")).arg("new").ignore(),
        };
    }
    let (started,): (String,) = p.query(&mut c).unwrap();
    assert_eq!(started, "Background saving started");
    wait_for_bgsave(&mut c);
    assert_eq!(info_field::<String>(&mut c, "rdb_last_bgsave_status"), "ok");
    let o = oracle(&s.dir, "dump.rdb");
    let mut r = o.conn();
    assert_eq!(cmd::<i64>(&mut r, &["DBSIZE"]), n);
    assert_eq!(cmd::<String>(&mut r, &["DEBUG", "DIGEST"]), digest);
}

#[test]
fn lastsave_and_info_follow_saves() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let () = cmd(&mut c, &["SET", "a", "1"]);
    let () = cmd(&mut c, &["SET", "b", "2"]);
    assert_eq!(info_field::<u64>(&mut c, "rdb_changes_since_last_save"), 2);
    let before: i64 = cmd(&mut c, &["LASTSAVE"]);
    let saves: u64 = info_field(&mut c, "rdb_saves");
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        cmd::<String>(&mut c, &["BGSAVE"]),
        "Background saving started"
    );
    wait_for_bgsave(&mut c);
    assert!(cmd::<i64>(&mut c, &["LASTSAVE"]) > before);
    assert_eq!(info_field::<u64>(&mut c, "rdb_changes_since_last_save"), 0);
    assert_eq!(info_field::<u64>(&mut c, "rdb_saves"), saves + 1);
    assert!(info_field::<i64>(&mut c, "rdb_last_bgsave_time_sec") >= 0);
    assert_eq!(cmd_err(&mut c, &["BGSAVE", "NOW"]), "ERR syntax error");
    assert!(s.dir.join("dump.rdb").exists());
}

#[test]
fn failed_bgsave_stops_writes_until_a_save_succeeds() {
    let s = Server::start(&["--save", "3600 1", "--enable-protected-configs", "yes"]);
    let mut c = s.conn();
    let gone = s.dir.join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    let () = cmd(&mut c, &["CONFIG", "SET", "dir", gone.to_str().unwrap()]);
    std::fs::remove_dir(&gone).unwrap();
    let () = cmd(&mut c, &["SET", "k", "v"]);
    assert_eq!(
        cmd::<String>(&mut c, &["BGSAVE"]),
        "Background saving started"
    );
    wait_for_bgsave(&mut c);
    assert_eq!(
        info_field::<String>(&mut c, "rdb_last_bgsave_status"),
        "err"
    );
    let err = cmd_err(&mut c, &["SET", "k", "v2"]);
    assert!(
        err.starts_with("MISCONF Redis is configured to save RDB snapshots"),
        "{err}"
    );
    assert!(cmd_err(&mut c, &["PING"]).starts_with("MISCONF"));
    assert_eq!(cmd::<String>(&mut c, &["GET", "k"]), "v");
    // MULTI with a write: the EXEC is refused, the write never happens.
    let mut r = s.raw();
    let _ = raw_cmd(&mut r, &["MULTI"]);
    let queued = raw_cmd(&mut r, &["INCR", "n"]);
    assert!(queued.starts_with("-MISCONF"), "{queued}");
    // Writes are back once the disk works again (the server's working
    // directory was the removed one: point it at the new one).
    std::fs::create_dir_all(&gone).unwrap();
    let () = cmd(&mut c, &["CONFIG", "SET", "dir", gone.to_str().unwrap()]);
    assert_eq!(
        cmd::<String>(&mut c, &["BGSAVE"]),
        "Background saving started"
    );
    wait_for_bgsave(&mut c);
    assert_eq!(info_field::<String>(&mut c, "rdb_last_bgsave_status"), "ok");
    let () = cmd(&mut c, &["SET", "k", "v3"]);
    // Without save points, a failed save does not stop writes.
    std::fs::remove_dir_all(&gone).unwrap();
    let () = cmd(&mut c, &["BGSAVE"]);
    wait_for_bgsave(&mut c);
    let () = cmd(&mut c, &["CONFIG", "SET", "save", ""]);
    let () = cmd(&mut c, &["SET", "k", "v4"]);
}

#[test]
fn shutdown_save_writes_the_file_and_a_failing_save_keeps_the_server_up() {
    let s = Server::start(&["--save", "", "--enable-protected-configs", "yes"]);
    let mut c = s.conn();
    let () = cmd(&mut c, &["SET", "k", "v"]);
    let gone = s.dir.join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    let () = cmd(&mut c, &["CONFIG", "SET", "dir", gone.to_str().unwrap()]);
    std::fs::remove_dir(&gone).unwrap();
    assert_eq!(
        cmd_err(&mut c, &["SHUTDOWN", "SAVE"]),
        "ERR Errors trying to SHUTDOWN. Check logs."
    );
    let () = cmd(&mut c, &["CONFIG", "SET", "dir", s.dir.to_str().unwrap()]);
    let _ = redis::cmd("SHUTDOWN").arg("SAVE").query::<()>(&mut c);
    let mut s = s;
    let status = s.child.wait().unwrap();
    assert!(status.success());
    let o = oracle(&s.dir, "dump.rdb");
    assert_eq!(cmd::<String>(&mut o.conn(), &["GET", "k"]), "v");
}

/// A redis-server of our own choosing that writes a dump for us to load.
fn redis_dump(dir: &Path, fill: impl FnOnce(&mut redis::Connection)) -> String {
    let o = oracle(dir, "dump.rdb");
    let mut r = o.conn();
    fill(&mut r);
    let digest: String = cmd(&mut r, &["DEBUG", "DIGEST"]);
    let () = cmd(&mut r, &["SAVE"]);
    digest
}

#[test]
fn start_up_loads_a_redis_dump_and_our_own() {
    let dir = std::env::temp_dir().join(format!("lattice-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let digest = redis_dump(&dir, populate);
    let d = dir.to_str().unwrap();
    let s = Server::start(&["--dir", d]);
    let mut c = s.conn();
    assert_eq!(cmd::<String>(&mut c, &["DEBUG", "DIGEST"]), digest);
    assert_eq!(info_field::<u64>(&mut c, "rdb_last_load_keys_loaded"), 18);
    assert_eq!(
        cmd::<String>(&mut c, &["OBJECT", "ENCODING", "set:int"]),
        "intset"
    );
    // Our own file, written with versions, loads back the same.
    let () = cmd(&mut c, &["SET", "more", "data"]);
    let digest: String = cmd(&mut c, &["DEBUG", "DIGEST"]);
    let () = cmd(&mut c, &["SAVE"]);
    drop(c);
    drop(s);
    let s = Server::start(&["--dir", d]);
    assert_eq!(cmd::<String>(&mut s.conn(), &["DEBUG", "DIGEST"]), digest);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_corrupt_dump_stops_start_up_with_a_message() {
    let dir = std::env::temp_dir().join(format!("lattice-corrupt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bytes = b"REDIS0010\xfa\x09redis-ver\x05";
    std::fs::write(dir.join("dump.rdb"), bytes).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
        .args([
            "--port",
            &free_port().to_string(),
            "--dir",
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains("Fatal error loading the DB"), "{log}");
    // The file is left as it was.
    assert_eq!(std::fs::read(dir.join("dump.rdb")).unwrap(), bytes);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn debug_reload_keeps_every_key_and_encoding() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    populate(&mut c);
    let digest: String = cmd(&mut c, &["DEBUG", "DIGEST"]);
    let encodings: Vec<String> = ["list:big", "hash:big", "set:int", "zset:small"]
        .iter()
        .map(|k| cmd(&mut c, &["OBJECT", "ENCODING", k]))
        .collect();
    assert_eq!(cmd::<String>(&mut c, &["DEBUG", "RELOAD"]), "OK");
    assert_eq!(cmd::<String>(&mut c, &["DEBUG", "DIGEST"]), digest);
    let after: Vec<String> = ["list:big", "hash:big", "set:int", "zset:small"]
        .iter()
        .map(|k| cmd(&mut c, &["OBJECT", "ENCODING", k]))
        .collect();
    assert_eq!(after, encodings);
    // NOSAVE reloads the file as it is: a key written since is gone.
    let () = cmd(&mut c, &["SET", "later", "x"]);
    assert_eq!(cmd::<String>(&mut c, &["DEBUG", "RELOAD", "NOSAVE"]), "OK");
    assert_eq!(cmd::<Option<String>>(&mut c, &["GET", "later"]), None);
    assert_eq!(cmd::<String>(&mut c, &["DEBUG", "DIGEST"]), digest);
}

/// While DEBUG RELOAD empties and refills the keyspace, other clients get
/// -LOADING (as Redis's), never a half-loaded keyspace.
#[test]
fn other_clients_get_loading_errors_during_debug_reload() {
    let srv = Server::start(&[]);
    let mut c = srv.conn();
    let () = cmd(&mut c, &["DEBUG", "POPULATE", "200"]);
    // 200 keys at 20 ms each: four seconds of loading to observe.
    let () = cmd(&mut c, &["CONFIG", "SET", "key-load-delay", "20000"]);
    let reload = std::thread::spawn(move || cmd::<String>(&mut c, &["DEBUG", "RELOAD"]));
    let mut o = srv.conn();
    let mut saw_loading = false;
    while !reload.is_finished() {
        match run(&mut o, &s(&["DBSIZE"])) {
            Ok(redis::Value::Int(200)) => {}
            Err(e) if e.contains("loading the dataset") => saw_loading = true,
            other => panic!("a half-loaded keyspace: DBSIZE {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(reload.join().unwrap(), "OK");
    assert!(saw_loading, "four seconds of reload and no -LOADING");
    assert_eq!(cmd::<i64>(&mut o, &["DBSIZE"]), 200);
    assert_eq!(cmd::<String>(&mut o, &["GET", "key:7"]), "value:7");
}

#[test]
fn clients_get_loading_errors_while_the_dump_loads() {
    let dir = std::env::temp_dir().join(format!("lattice-loading-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    redis_dump(&dir, |c| {
        let () = cmd(c, &["DEBUG", "POPULATE", "2000"]);
    });
    // 2000 keys at 5 ms each: ten seconds of loading to observe, time for
    // a loaded machine to connect and ask before it ends.
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
        .args(["--port", &port.to_string(), "--key-load-delay", "5000"])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("redis://127.0.0.1:{port}/");
    let mut c = None;
    eventually("the loading server to accept", || {
        c = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .ok();
        c.is_some()
    });
    let mut c = c.unwrap();
    let err = cmd_err(&mut c, &["GET", "key:1"]);
    assert_eq!(err, "LOADING Redis is loading the dataset in memory");
    assert_eq!(info_field::<u32>(&mut c, "loading"), 1);
    assert!(info_field::<u64>(&mut c, "loading_total_bytes") > 0);
    let deadline = Instant::now() + Duration::from_secs(90);
    while info_field::<u32>(&mut c, "loading") == 1 {
        assert!(Instant::now() < deadline, "loading did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(cmd::<String>(&mut c, &["GET", "key:1"]), "value:1");
    assert_eq!(cmd::<i64>(&mut c, &["DBSIZE"]), 2000);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
