//! Persistence under active replication (issue 12, items 3 and 8): a node
//! restarted from its RDB file or its AOF gets back every key's version
//! (HLC stamp), its tombstones and its databases' flush stamps, and stamps
//! its new writes after all of them. Without that, a restarted node's stale
//! data would look newer than its peers' newer writes and win everywhere,
//! and keys it had deleted would come back from a peer that missed the
//! delete. Redis 7.0 still loads the files (it skips our aux fields and
//! annotations), and a plain node's files do not change.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

/// An active node (no peers yet) keeping its files in `dir`.
fn node(dir: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--dir", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    active_node(&args)
}

/// The key's version, from DEBUG OBJECT's `lattice_version` field.
fn version(c: &mut redis::Connection, key: &str) -> u64 {
    let line: String = cmd(c, &["DEBUG", "OBJECT", key]);
    line.split(' ')
        .find_map(|w| w.strip_prefix("lattice_version:"))
        .unwrap_or_else(|| panic!("no lattice_version in {line}"))
        .parse()
        .unwrap()
}

/// BGREWRITEAOF, waiting until it is done.
fn rewrite(c: &mut redis::Connection) {
    let _: String = cmd(c, &["BGREWRITEAOF"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while info_field::<i64>(c, "aof_rewrite_in_progress") == 1
        || info_field::<i64>(c, "aof_rewrite_scheduled") == 1
    {
        assert!(Instant::now() < deadline, "the rewrite did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How a node keeps its data across a restart: its directives, and what it
/// does before it is killed.
struct Persist {
    tag: &'static str,
    args: &'static [&'static str],
    before_kill: fn(&mut redis::Connection),
}

const RDB: Persist = Persist {
    tag: "rdb",
    args: &[],
    before_kill: |c| {
        let () = cmd(c, &["SAVE"]);
    },
};

const AOF: Persist = Persist {
    tag: "aof",
    args: &["--appendonly", "yes"],
    before_kill: |_| {},
};

/// The AOF rewritten (its base now holds what was written so far), then
/// one more write in the incr file.
fn rewrite_then_write(c: &mut redis::Connection) {
    rewrite(c);
    let () = cmd(c, &["SET", "after-rewrite", "x"]);
}

const AOF_RDB_BASE: Persist = Persist {
    tag: "aof-rdb-base",
    args: &["--appendonly", "yes", "--aof-use-rdb-preamble", "yes"],
    before_kill: rewrite_then_write,
};

const AOF_COMMAND_BASE: Persist = Persist {
    tag: "aof-cmd-base",
    args: &["--appendonly", "yes", "--aof-use-rdb-preamble", "no"],
    before_kill: rewrite_then_write,
};

/// Keys of every type (a list long enough for several RPUSH commands in a
/// rewritten base), a TTL, a second database.
fn populate(c: &mut redis::Connection) -> Vec<&'static str> {
    let mut p = redis::pipe();
    p.cmd("SET").arg("s").arg("v");
    p.cmd("SET").arg("n").arg(12345);
    p.cmd("INCR").arg("n");
    for i in 0..150 {
        p.cmd("RPUSH").arg("l").arg(i);
    }
    p.cmd("HSET").arg("h").arg(&["f1", "v1", "f2", "v2"]);
    p.cmd("SADD").arg("set").arg(&["a", "b", "c"]);
    p.cmd("ZADD").arg("z").arg(&["1", "a", "2", "b"]);
    p.cmd("SET").arg("ttl").arg("v").arg("EX").arg(1000);
    p.cmd("PEXPIRE").arg("h").arg(5_000_000);
    p.cmd("SET").arg("gone").arg("v");
    p.cmd("DEL").arg("gone");
    let () = p.query(c).unwrap();
    vec!["s", "n", "l", "h", "set", "z", "ttl"]
}

/// Every way of persisting keeps each key's version, and a write after the
/// restart is stamped after the loaded keys.
#[test]
fn versions_survive_a_restart_from_the_rdb_and_the_aof() {
    for p in [RDB, AOF, AOF_RDB_BASE, AOF_COMMAND_BASE] {
        let dir = tempdir(&format!("versions-{}", p.tag));
        let s = node(&dir, p.args);
        let mut c = s.conn();
        let keys = populate(&mut c);
        let () = cmd(&mut c, &["SELECT", "3"]);
        let () = cmd(&mut c, &["SET", "db3", "x"]);
        let v3 = version(&mut c, "db3");
        let () = cmd(&mut c, &["SELECT", "0"]);
        let before: Vec<u64> = keys.iter().map(|k| version(&mut c, k)).collect();
        let dig = digest(&mut c);
        (p.before_kill)(&mut c);
        drop(c);
        drop(s);
        let s = node(&dir, p.args);
        let mut c = s.conn();
        let after: Vec<u64> = keys.iter().map(|k| version(&mut c, k)).collect();
        assert_eq!(after, before, "{}: versions after the restart", p.tag);
        let () = cmd(&mut c, &["SELECT", "3"]);
        assert_eq!(version(&mut c, "db3"), v3, "{}", p.tag);
        let () = cmd(&mut c, &["SELECT", "0"]);
        if p.tag.starts_with("aof-") {
            let () = cmd(&mut c, &["DEL", "after-rewrite"]);
        }
        assert_eq!(digest(&mut c), dig, "{}: data after the restart", p.tag);
        let () = cmd(&mut c, &["SET", "new", "x"]);
        let max = before.iter().copied().max().unwrap().max(v3);
        assert!(version(&mut c, "new") > max, "{}", p.tag);
    }
}

/// A stamp far ahead of the clock (a node whose clock ran ahead wrote it):
/// after loading it, the node's writes are still stamped after it.
#[test]
fn writes_after_loading_a_stamp_from_the_future_are_stamped_after_it() {
    let dir = tempdir("future");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let future = (now_ms + 3_600_000) << 22;
    // REDIS0010, the versions aux field, one key "k" = "v", EOF, no CRC.
    let mut f = b"REDIS0010".to_vec();
    f.extend_from_slice(&[0xFA, 16]);
    f.extend_from_slice(b"lattice-versions");
    f.push(8);
    f.extend_from_slice(&future.to_le_bytes());
    f.extend_from_slice(&[0xFE, 0, 0, 1, b'k', 1, b'v', 0xFF]);
    f.extend_from_slice(&[0; 8]);
    std::fs::write(dir.join("dump.rdb"), &f).unwrap();
    let s = node(&dir, &[]);
    let mut c = s.conn();
    assert_eq!(version(&mut c, "k"), future);
    let () = cmd(&mut c, &["SET", "other", "x"]);
    assert!(version(&mut c, "other") > future);
    let () = cmd(&mut c, &["SET", "k", "w"]);
    assert!(version(&mut c, "k") > future);
}

/// The RDB file holds the tombstones and the flush stamp (read back with
/// our decoder), and Redis 7.0 loads it with the same data.
#[test]
fn tombstones_and_flushes_are_in_the_rdb_and_redis_loads_it() {
    use lattice::facade::keyspace::encoding::EncodingLimits;
    use lattice::facade::persistence::rdb::decode::{self, LoadOpts};
    let dir = tempdir("tombs");
    let s = node(&dir, &[]);
    let mut c = s.conn();
    populate(&mut c);
    let () = cmd(&mut c, &["SET", "deleted", "v"]);
    let v = version(&mut c, "deleted");
    let _: i64 = cmd(&mut c, &["DEL", "deleted"]);
    let () = cmd(&mut c, &["SELECT", "1"]);
    let () = cmd(&mut c, &["SET", "flushed", "v"]);
    let () = cmd(&mut c, &["FLUSHDB"]);
    let () = cmd(&mut c, &["SELECT", "2"]);
    let () = cmd(&mut c, &["SET", "kept", "v"]);
    let () = cmd(&mut c, &["FLUSHDB"]);
    let () = cmd(&mut c, &["SET", "kept", "w"]);
    let flushed_at = version(&mut c, "kept");
    let () = cmd(&mut c, &["SELECT", "0"]);
    let dig = digest(&mut c);
    let () = cmd(&mut c, &["SAVE"]);
    let bytes = std::fs::read(dir.join("dump.rdb")).unwrap();
    let limits = EncodingLimits::defaults();
    let opts = LoadOpts {
        limits: &limits,
        verify_checksum: true,
        on_resize: None,
        on_aux: None,
    };
    let sum = decode::load(&bytes[..], &opts, &mut |_| Ok(())).unwrap();
    let tomb = |db: usize, key: &[u8]| {
        sum.tombstones
            .iter()
            .find(|(d, k, _)| *d == db && k == key)
            .map(|t| t.2)
    };
    assert!(tomb(0, b"deleted").is_some_and(|s| s > v), "{sum:?}");
    assert!(tomb(0, b"gone").is_some(), "{sum:?}");
    assert_eq!(sum.flushed.len(), 2, "{sum:?}");
    assert!(sum.flushed.iter().any(|&(d, s)| d == 2 && s < flushed_at));
    assert!(sum.flushed.iter().any(|&(d, _)| d == 1));
    // Not left in the plain aux fields.
    assert!(!sum.aux.iter().any(|(k, _)| k.starts_with(b"lattice-tombs")));
    // Restarted, the node has them back: a new write of a deleted key is
    // stamped after its tombstone.
    drop(c);
    drop(s);
    let s = node(&dir, &[]);
    let mut c = s.conn();
    assert_eq!(digest(&mut c), dig);
    let () = cmd(&mut c, &["SET", "deleted", "again"]);
    assert!(version(&mut c, "deleted") > tomb(0, b"deleted").unwrap());
    drop(c);
    drop(s);
    // Redis 7.0 loads the same file.
    let o = RedisOracle::start(&["--dir", dir.to_str().unwrap()]);
    let mut r = o.conn();
    assert_eq!(digest(&mut r), dig);
    assert_eq!(cmd::<i64>(&mut r, &["DBSIZE"]), 7);
}

/// Redis 7.0 loads an active node's AOF (stamp annotations in the incr
/// file; the base as RDB with our aux fields, or as commands with stamped
/// FLUSHDB and DEL for the flush and the tombstones) with the same data.
#[test]
fn redis_loads_an_active_nodes_aof() {
    for preamble in ["yes", "no"] {
        let dir = tempdir(&format!("redis-aof-{preamble}"));
        let args = [
            "--appendonly",
            "yes",
            "--aof-use-rdb-preamble",
            preamble,
            "--appendfsync",
            "always",
        ];
        let s = node(&dir, &args);
        let mut c = s.conn();
        populate(&mut c);
        let () = cmd(&mut c, &["SELECT", "1"]);
        let () = cmd(&mut c, &["SET", "flushed", "v"]);
        let () = cmd(&mut c, &["FLUSHDB"]);
        let () = cmd(&mut c, &["SET", "kept", "v"]);
        let () = cmd(&mut c, &["SELECT", "0"]);
        rewrite(&mut c);
        let () = cmd(&mut c, &["SET", "after", "rewrite"]);
        let _: i64 = cmd(&mut c, &["DEL", "s"]);
        let _: i64 = cmd(&mut c, &["RPUSH", "l", "more"]);
        let dig = digest(&mut c);
        drop(c);
        drop(s);
        let incr = std::fs::read_dir(dir.join("appendonlydir"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
            .unwrap();
        let text = String::from_utf8_lossy(&std::fs::read(incr).unwrap()).into_owned();
        assert!(text.contains("#LV:"), "{text}");
        let o = RedisOracle::start(&[
            "--dir",
            dir.to_str().unwrap(),
            "--appendonly",
            "yes",
            "--aof-use-rdb-preamble",
            preamble,
        ]);
        assert_eq!(digest(&mut o.conn()), dig, "preamble {preamble}");
    }
}

/// A plain node writes neither stamps into its AOF nor tombstones (it has
/// none) into its RDB.
#[test]
fn a_plain_nodes_files_have_no_stamps() {
    let s = Server::start(&["--appendonly", "yes"]);
    let mut c = s.conn();
    populate(&mut c);
    let () = cmd(&mut c, &["SAVE"]);
    let rdb = std::fs::read(s.dir.join("dump.rdb")).unwrap();
    let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    assert!(!has(&rdb, b"lattice-tombs") && !has(&rdb, b"lattice-flushed"));
    assert!(!has(&rdb, b"lattice-link"));
    let mut aof = Vec::new();
    for e in std::fs::read_dir(s.dir.join("appendonlydir")).unwrap() {
        aof.extend(std::fs::read(e.unwrap().path()).unwrap());
    }
    assert!(has(&aof, b"RPUSH") && !has(&aof, b"#LV:") && !has(&aof, b"#AUX:"));
}

/// The pair of issue 12 item 8: B saves `k1 = v1` and deletes `k2` and
/// flushes database 1 while A is down; A comes back and writes `k1 = v2`
/// while B is down; B comes back from its files. Linked again, both must
/// end with A's newer `k1` and without B's deleted keys: B's reloaded `v1`
/// must not look newer than `v2` (it would with a load-time stamp), and A's
/// older copies of the deleted keys must not come back (they would without
/// B's tombstones and flush stamp).
fn a_restarted_node_converges(p: Persist) {
    let (da, dbb) = (
        tempdir(&format!("pair-{}-a", p.tag)),
        tempdir(&format!("pair-{}-b", p.tag)),
    );
    let a = node(&da, &[]);
    let b = node(&dbb, p.args);
    pull(&a, b.port);
    pull(&b, a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    let mut ca = a.conn();
    for k in ["k1", "k2", "k3"] {
        let () = cmd(&mut ca, &["SET", k, "v1"]);
    }
    let () = cmd(&mut ca, &["SELECT", "1"]);
    let () = cmd(&mut ca, &["SET", "f", "x"]);
    let () = cmd(&mut ca, &["SELECT", "0"]);
    converged(&[&a, &b]);
    // A saves and goes down; B deletes meanwhile, persists, goes down.
    let () = cmd(&mut ca, &["SAVE"]);
    drop(ca);
    drop(a);
    let mut cb = b.conn();
    let _: i64 = cmd(&mut cb, &["DEL", "k2"]);
    let () = cmd(&mut cb, &["SELECT", "1"]);
    let () = cmd(&mut cb, &["FLUSHDB"]);
    let () = cmd(&mut cb, &["SELECT", "0"]);
    (p.before_kill)(&mut cb);
    drop(cb);
    drop(b);
    // A back from its RDB, writes while B is down.
    let a = node(&da, &[]);
    let mut ca = a.conn();
    let () = cmd(&mut ca, &["SET", "k1", "v2"]);
    // B back from its files: its k1 is the older one.
    let b = node(&dbb, p.args);
    let mut cb = b.conn();
    assert_eq!(cmd::<String>(&mut cb, &["GET", "k1"]), "v1", "{}", p.tag);
    assert_eq!(cmd::<Option<String>>(&mut cb, &["GET", "k2"]), None);
    pull(&a, b.port);
    pull(&b, a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    converged(&[&a, &b]);
    for c in [&mut ca, &mut cb] {
        assert_eq!(cmd::<String>(c, &["GET", "k1"]), "v2", "{}", p.tag);
        assert_eq!(cmd::<Option<String>>(c, &["GET", "k2"]), None, "{}", p.tag);
        assert_eq!(cmd::<String>(c, &["GET", "k3"]), "v1", "{}", p.tag);
        let () = cmd(c, &["SELECT", "1"]);
        assert_eq!(cmd::<i64>(c, &["DBSIZE"]), 0, "{}", p.tag);
        let () = cmd(c, &["SELECT", "0"]);
    }
}

#[test]
fn a_node_restarted_from_its_rdb_converges_with_newer_writes_and_its_deletes() {
    a_restarted_node_converges(RDB);
}

#[test]
fn a_node_restarted_from_its_aof_converges_with_newer_writes_and_its_deletes() {
    a_restarted_node_converges(AOF);
}

#[test]
fn a_node_restarted_from_a_rewritten_aof_converges_with_newer_writes_and_its_deletes() {
    a_restarted_node_converges(AOF_RDB_BASE);
    a_restarted_node_converges(AOF_COMMAND_BASE);
}

/// INFO's line for a node's first peer.
fn peer_line(c: &mut redis::Connection) -> String {
    info_field(c, "peer0")
}

/// A peer line's numeric field.
fn peer_count(line: &str, field: &str) -> u64 {
    line.split(',')
        .find_map(|f| f.strip_prefix(&format!("{field}=")))
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        .parse()
        .unwrap()
}

/// The AOF files of `dir`, concatenated.
fn aof_bytes(dir: &Path) -> Vec<u8> {
    let mut aof = Vec::new();
    for e in std::fs::read_dir(dir.join("appendonlydir")).unwrap() {
        aof.extend(std::fs::read(e.unwrap().path()).unwrap());
    }
    aof
}

/// A pair A <-> B with data written on both; A keeps its files in `dir`.
fn linked_pair(dir: &Path, args: &[&str]) -> (Server, Server) {
    let a = node(dir, args);
    let b = active_node(&[]);
    pull(&a, b.port);
    pull(&b, a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    let (mut ca, mut cb) = (a.conn(), b.conn());
    for i in 0..50 {
        let () = cmd(&mut ca, &["SET", &format!("a{i}"), "x"]);
        let () = cmd(&mut cb, &["SET", &format!("b{i}"), "y"]);
    }
    let _: i64 = cmd(&mut cb, &["RPUSH", "list", "1", "2", "3"]);
    converged(&[&a, &b]);
    (a, b)
}

/// While A is down, B writes, overwrites and deletes keys A holds.
fn b_writes_while_a_is_down(b: &Server) {
    let mut cb = b.conn();
    let () = cmd(&mut cb, &["SET", "b-new", "z"]);
    let () = cmd(&mut cb, &["SET", "a3", "from-b"]);
    let _: i64 = cmd(&mut cb, &["DEL", "b1", "a4"]);
    let _: i64 = cmd(&mut cb, &["RPUSH", "list", "4"]);
}

/// A restarted from `dir` pulls from B again (and B from A's new port).
fn restart_and_link(dir: &Path, args: &[&str], b: &Server) -> Server {
    let a = node(dir, args);
    pull(&a, b.port);
    pull(b, a.port);
    wait_linked(&a, 1);
    wait_linked(b, 1);
    a
}

/// A's data after the catch-up: B's writes and deletes made while A was
/// down, and the write A made after its save that only B kept.
fn assert_caught_up(a: &Server, b: &Server, lost_write: bool) {
    converged(&[a, b]);
    let mut ca = a.conn();
    assert_eq!(cmd::<String>(&mut ca, &["GET", "b-new"]), "z");
    assert_eq!(cmd::<String>(&mut ca, &["GET", "a3"]), "from-b");
    assert_eq!(cmd::<Option<String>>(&mut ca, &["GET", "b1"]), None);
    assert_eq!(cmd::<Option<String>>(&mut ca, &["GET", "a4"]), None);
    assert_eq!(cmd::<i64>(&mut ca, &["LLEN", "list"]), 4);
    if lost_write {
        assert_eq!(cmd::<String>(&mut ca, &["GET", "after-save"]), "w");
    }
}

/// Issue 12 item 8, partial catch-up: A saves its RDB with its link to B
/// settled, writes once more (a write its file does not hold), is killed;
/// B writes and deletes; A restarted from the file continues B's stream
/// from the saved position instead of taking a snapshot, and gets back its
/// own lost write from B.
#[test]
fn a_node_restarted_from_its_rdb_continues_its_peers_stream() {
    let dir = tempdir("resume-rdb");
    let (a, b) = linked_pair(&dir, &[]);
    let mut ca = a.conn();
    let () = cmd(&mut ca, &["SAVE"]);
    let () = cmd(&mut ca, &["SET", "after-save", "w"]);
    converged(&[&a, &b]);
    drop(ca);
    drop(a);
    b_writes_while_a_is_down(&b);
    // This time the peer is a `replicaof` line: the link made at start
    // takes the position.
    let port = b.port.to_string();
    let a = node(&dir, &["--replicaof", "127.0.0.1", &port]);
    pull(&b, a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    assert_caught_up(&a, &b, true);
    let line = peer_line(&mut a.conn());
    assert_eq!(peer_count(&line, "snapshots"), 0, "{line}");
    assert_eq!(peer_count(&line, "continues"), 1, "{line}");
    assert!(b.log().contains("continues after a restart"), "{}", b.log());
}

/// The same from the AOF: the link's position is an annotation of the
/// AOF, written once a second when it changed.
#[test]
fn a_node_restarted_from_its_aof_continues_its_peers_stream() {
    let dir = tempdir("resume-aof");
    let args = ["--appendonly", "yes"];
    let (a, b) = linked_pair(&dir, &args);
    let mut cb = b.conn();
    let () = cmd(&mut cb, &["SET", "last-before-kill", "q"]);
    converged(&[&a, &b]);
    eventually("A's AOF to note its link's position", || {
        String::from_utf8_lossy(&aof_bytes(&dir)).contains("#AUX:lattice-link ")
    });
    drop(a);
    b_writes_while_a_is_down(&b);
    let a = restart_and_link(&dir, &args, &b);
    assert_caught_up(&a, &b, false);
    let line = peer_line(&mut a.conn());
    assert_eq!(peer_count(&line, "snapshots"), 0, "{line}");
    assert_eq!(peer_count(&line, "continues"), 1, "{line}");
}

/// A rewritten AOF keeps the positions in its base (an aux field of the RDB
/// preamble, or an annotation atop a base of commands): A restarted from it
/// continues too. Redis 7.0 loads the files, positions and all.
#[test]
fn a_node_restarted_from_a_rewritten_aof_continues_its_peers_stream() {
    for preamble in ["yes", "no"] {
        let dir = tempdir(&format!("resume-rewrite-{preamble}"));
        let args = ["--appendonly", "yes", "--aof-use-rdb-preamble", preamble];
        let (a, b) = linked_pair(&dir, &args);
        let mut ca = a.conn();
        rewrite(&mut ca);
        let base = std::fs::read_dir(dir.join("appendonlydir"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains(".base."))
            .unwrap();
        let text = String::from_utf8_lossy(&std::fs::read(&base).unwrap()).into_owned();
        let note = if preamble == "yes" {
            "lattice-link"
        } else {
            "#AUX:lattice-link "
        };
        assert!(text.contains(note), "preamble {preamble}: {text}");
        let dig = digest(&mut ca);
        drop(ca);
        drop(a);
        // Redis loads the AOF as it is (A's data before B's new writes).
        let o = RedisOracle::start(&["--dir", dir.to_str().unwrap(), "--appendonly", "yes"]);
        assert_eq!(digest(&mut o.conn()), dig, "preamble {preamble}");
        drop(o);
        b_writes_while_a_is_down(&b);
        let a = restart_and_link(&dir, &args, &b);
        assert_caught_up(&a, &b, false);
        let line = peer_line(&mut a.conn());
        assert_eq!(peer_count(&line, "snapshots"), 0, "{preamble}: {line}");
        assert_eq!(peer_count(&line, "continues"), 1, "{preamble}: {line}");
    }
}

/// Both restarted: A's saved position in B's stream is worth nothing (B's
/// stream is a new one), but the stamp of B's writes saved with it is: A
/// resumes by stamp (DECISIONS 51), sending its own lost keys' stamp too,
/// and ends with B's data, writes and deletes made while A was down
/// included, without a snapshot. A reaches B through a proxy, so B
/// restarted on another port has the same address.
#[test]
fn a_saved_position_the_peer_no_longer_holds_resumes_by_stamp() {
    let (da, dbb) = (tempdir("fallback-a"), tempdir("fallback-b"));
    let a = node(&da, &[]);
    let b = node(&dbb, &[]);
    let to_b = common::proxy::Proxy::start(b.port);
    pull(&a, to_b.port);
    pull(&b, a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    let (mut ca, mut cb) = (a.conn(), b.conn());
    for i in 0..50 {
        let () = cmd(&mut ca, &["SET", &format!("a{i}"), "x"]);
        let () = cmd(&mut cb, &["SET", &format!("b{i}"), "y"]);
    }
    let _: i64 = cmd(&mut cb, &["RPUSH", "list", "1", "2", "3"]);
    converged(&[&a, &b]);
    let () = cmd(&mut ca, &["SAVE"]);
    drop((ca, cb));
    drop(a);
    b_writes_while_a_is_down(&b);
    let () = cmd(&mut b.conn(), &["SAVE"]);
    drop(b);
    let b = node(&dbb, &[]);
    to_b.retarget(b.port);
    // B's new stream reaches past A's saved offset: only its id tells the
    // positions apart.
    let mut cb = b.conn();
    for i in 0..300 {
        let () = cmd(&mut cb, &["SET", &format!("late{i}"), &"v".repeat(40)]);
    }
    let end: u64 = info_field(&mut cb, "active_stream_offset");
    assert!(end > 20_000, "{end}");
    let a = node(&da, &[]);
    pull(&a, to_b.port);
    pull(&b, a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    assert_caught_up(&a, &b, false);
    assert!(a.log().contains("as the loaded data holds"), "{}", a.log());
    let line = peer_line(&mut a.conn());
    assert_eq!(peer_count(&line, "snapshots"), 0, "{line}");
    assert_eq!(peer_count(&line, "continues"), 1, "{line}");
    assert!(a.log().contains("resumes with the keys this node lacks"));
}

/// Redis 7.0 loads an RDB file and an AOF that hold link positions.
#[test]
fn redis_loads_files_with_link_positions() {
    let dir = tempdir("resume-redis");
    let args = ["--appendonly", "yes", "--appendfsync", "always"];
    let (a, _b) = linked_pair(&dir, &args);
    let mut ca = a.conn();
    eventually("A's AOF to note its link's position", || {
        String::from_utf8_lossy(&aof_bytes(&dir)).contains("#AUX:lattice-link ")
    });
    let () = cmd(&mut ca, &["SAVE"]);
    let dig = digest(&mut ca);
    let rdb = std::fs::read(dir.join("dump.rdb")).unwrap();
    assert!(rdb.windows(12).any(|w| w == b"lattice-link"));
    drop(ca);
    drop(a);
    for appendonly in ["no", "yes"] {
        let o = RedisOracle::start(&["--dir", dir.to_str().unwrap(), "--appendonly", appendonly]);
        assert_eq!(digest(&mut o.conn()), dig, "appendonly {appendonly}");
    }
}

/// A's directives: it keeps its files in `dir` and its node slot across
/// restarts (as it does unless `node-slot` is set: the slot is a hash of
/// the node id, which the files keep), and `extra`.
fn node_a(dir: &Path, slot: &str, extra: &[&str]) -> Server {
    let mut args = vec!["--node-slot", slot];
    args.extend_from_slice(extra);
    node(dir, &args)
}

/// B pulls from A through a proxy (A restarted on another port keeps its
/// address); A pulls from B; both wrote keys, A once more a second later.
fn pair_behind_a_proxy(dir: &Path, slot: &str) -> (Server, Server, common::proxy::Proxy) {
    let a = node_a(dir, slot, &[]);
    let b = active_node(&[]);
    let to_a = common::proxy::Proxy::start(a.port);
    pull(&a, b.port);
    pull(&b, to_a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    let (mut ca, mut cb) = (a.conn(), b.conn());
    for i in 0..50 {
        let () = cmd(&mut ca, &["SET", &format!("a{i}"), "x"]);
        let () = cmd(&mut cb, &["SET", &format!("b{i}"), "y"]);
    }
    std::thread::sleep(Duration::from_millis(1100));
    let () = cmd(&mut ca, &["SET", "a-fresh", "f"]);
    converged(&[&a, &b]);
    (a, b, to_a)
}

/// A (killed) comes back from `dir` on another port, pulling from B again
/// (its saved position: DECISIONS 48); the proxy B pulls through now
/// leads to it.
fn restart_behind_the_proxy(
    (dir, slot): (&Path, &str),
    b: &Server,
    to_a: &common::proxy::Proxy,
) -> Server {
    let a = node_a(
        dir,
        slot,
        &["--replicaof", "127.0.0.1", &b.port.to_string()],
    );
    to_a.retarget(a.port);
    to_a.thaw();
    to_a.kill_connections();
    wait_linked(&a, 1);
    wait_linked(b, 1);
    a
}

/// B's link's snapshots and continues so far ([`assert_resumed_by_stamp`]
/// counts from there).
fn link_counts(b: &Server) -> (u64, u64) {
    let line = peer_line(&mut b.conn());
    (
        peer_count(&line, "snapshots"),
        peer_count(&line, "continues"),
    )
}

/// B's link to the restarted A resumed by stamp: one more continue than
/// `before` (its counts taken just before A was killed), no more snapshot,
/// and B's log says so; A sent fewer than `most` keys (those stamped since
/// a second before the last of its writes B applied, and of origins B does
/// not hear directly). Counted from `before`, not from zero: on a loaded
/// machine a link may hear nothing for `repl-timeout` (3 s here) before A
/// is killed and reconnect, continuing A's stream (seen once, with a
/// release build linking beside the tests), which is no snapshot either.
fn assert_resumed_by_stamp(a: &Server, b: &Server, most: u64, before: (u64, u64)) {
    let sent = a
        .log()
        .lines()
        .find_map(|l| {
            l.split("sent ")
                .nth(1)?
                .strip_suffix(" keys a resuming peer lacks")
        })
        .map(|n| n.parse::<u64>().unwrap());
    assert!(
        sent.is_some_and(|n| n < most),
        "{sent:?} keys sent: {}",
        a.log()
    );
    let line = peer_line(&mut b.conn());
    assert_eq!(peer_count(&line, "snapshots"), before.0, "{line}");
    assert_eq!(peer_count(&line, "continues"), before.1 + 1, "{line}");
    let log = b.log();
    assert!(
        log.contains("resumes with the keys this node lacks"),
        "{log}"
    );
}

/// Writes on both sides after the restart, then the same data on both.
fn write_both_and_converge(a: &Server, b: &Server) {
    let (mut ca, mut cb) = (a.conn(), b.conn());
    let () = cmd(&mut ca, &["SET", "a-after-restart", "1"]);
    let () = cmd(&mut cb, &["SET", "b-after-restart", "2"]);
    let _: i64 = cmd(&mut cb, &["DEL", "a10"]);
    converged(&[a, b]);
    assert_eq!(cmd::<String>(&mut cb, &["GET", "a-after-restart"]), "1");
    assert_eq!(cmd::<String>(&mut ca, &["GET", "b-after-restart"]), "2");
}

/// DECISIONS 51: A's writes that B never received (the link was frozen)
/// but A's file kept, a new key, an overwrite and deletes, reach B after
/// A restarts, without a snapshot of A: A's stream is new, and B asks for
/// A's keys stamped since the newest of A's writes it applied.
#[test]
fn the_peer_of_a_restarted_node_gets_the_writes_it_missed_without_a_snapshot() {
    let (dir, slot) = (tempdir("own-resume-missed"), unique_node_slot());
    let (a, b, to_a) = pair_behind_a_proxy(&dir, &slot);
    to_a.freeze();
    let mut ca = a.conn();
    let () = cmd(&mut ca, &["SET", "a-unsent", "u"]);
    let () = cmd(&mut ca, &["SET", "a1", "changed"]);
    let _: i64 = cmd(&mut ca, &["DEL", "a2", "b3"]);
    let () = cmd(&mut ca, &["SAVE"]);
    drop(ca);
    let before = link_counts(&b);
    drop(a);
    let mut cb = b.conn();
    assert_eq!(cmd::<Option<String>>(&mut cb, &["GET", "a-unsent"]), None);
    let () = cmd(&mut cb, &["SET", "b-while-a-down", "d"]);
    let a = restart_behind_the_proxy((&dir, &slot), &b, &to_a);
    write_both_and_converge(&a, &b);
    assert_eq!(cmd::<String>(&mut cb, &["GET", "a-unsent"]), "u");
    assert_eq!(cmd::<String>(&mut cb, &["GET", "a1"]), "changed");
    assert_eq!(cmd::<i64>(&mut cb, &["EXISTS", "a2", "b3"]), 0);
    assert_eq!(
        cmd::<String>(&mut a.conn(), &["GET", "b-while-a-down"]),
        "d"
    );
    assert_resumed_by_stamp(&a, &b, 10, before);
}

/// Issue 12 item 8 both ways: A saves, deletes a saved key and writes new
/// ones (B applies them), and is killed: its file still has the deleted key
/// and lacks the new ones. Restarted, A continues B's stream and gets its
/// delete and its lost writes back from B (DECISIONS 48); B continues A's
/// new stream without a snapshot (DECISIONS 51) and keeps them.
#[test]
fn a_restarted_node_and_its_peer_both_continue_and_keep_its_lost_writes() {
    let (dir, slot) = (tempdir("own-resume-lost"), unique_node_slot());
    let (a, b, to_a) = pair_behind_a_proxy(&dir, &slot);
    let mut ca = a.conn();
    let () = cmd(&mut ca, &["SET", "saved-then-deleted", "v"]);
    let () = cmd(&mut ca, &["SAVE"]);
    let _: i64 = cmd(&mut ca, &["DEL", "saved-then-deleted"]);
    let () = cmd(&mut ca, &["SET", "lost-1", "l1"]);
    let _: i64 = cmd(&mut ca, &["RPUSH", "lost-list", "1", "2"]);
    converged(&[&a, &b]);
    drop(ca);
    let before = link_counts(&b);
    drop(a);
    let a = restart_behind_the_proxy((&dir, &slot), &b, &to_a);
    write_both_and_converge(&a, &b);
    for c in [&mut a.conn(), &mut b.conn()] {
        assert_eq!(
            cmd::<Option<String>>(c, &["GET", "saved-then-deleted"]),
            None
        );
        assert_eq!(cmd::<String>(c, &["GET", "lost-1"]), "l1");
        assert_eq!(cmd::<i64>(c, &["LLEN", "lost-list"]), 2);
    }
    assert_resumed_by_stamp(&a, &b, 10, before);
    let line = peer_line(&mut a.conn());
    assert_eq!(peer_count(&line, "snapshots"), 0, "{line}");
    assert_eq!(peer_count(&line, "continues"), 1, "{line}");
}

/// DECISIONS 51, a chain: C <-> A <-> B, B does not pull from C and hears
/// C's writes only through A. A forwarded a write of C that B never
/// received (the link was frozen) and saved it; restarted, A sends B the
/// keys of the origins B does not hear directly, so B has it without a
/// snapshot (A's link to C continues after it: C does not send it again).
#[test]
fn the_peer_of_a_restarted_node_gets_what_it_forwarded_of_another_origin() {
    let (dir, slot) = (tempdir("own-resume-chain"), unique_node_slot());
    let a = node_a(&dir, &slot, &["--multi-master", "yes"]);
    let (b, c) = (active_node(&[]), active_node(&[]));
    let to_a = common::proxy::Proxy::start(a.port);
    pull(&a, b.port);
    pull(&a, c.port);
    pull(&b, to_a.port);
    pull(&c, to_a.port);
    wait_linked(&a, 2);
    // B must apply A's writes from A's stream, not from the snapshot it
    // takes of A first: only a write applied from the stream gives B a
    // stamp to resume from (DECISIONS 51). Its link to A, through the
    // proxy, may connect after A's writes: then B had them all in its
    // snapshot and rightly took another one after A's restart.
    wait_linked(&b, 1);
    wait_linked(&c, 1);
    let (mut ca, mut cb, mut cc) = (a.conn(), b.conn(), c.conn());
    for i in 0..20 {
        let () = cmd(&mut ca, &["SET", &format!("a{i}"), "x"]);
        let () = cmd(&mut cb, &["SET", &format!("b{i}"), "y"]);
        let () = cmd(&mut cc, &["SET", &format!("c{i}"), "z"]);
    }
    converged(&[&a, &b, &c]);
    to_a.freeze();
    let () = cmd(&mut cc, &["SET", "c-unsent", "u"]);
    eventually("A to apply C's write", || {
        cmd::<Option<String>>(&mut ca, &["GET", "c-unsent"]).is_some()
    });
    let () = cmd(&mut ca, &["SAVE"]);
    drop(ca);
    let before = link_counts(&b);
    drop(a);
    assert_eq!(cmd::<Option<String>>(&mut cb, &["GET", "c-unsent"]), None);
    let port = b.port.to_string();
    let a = node_a(
        &dir,
        &slot,
        &["--multi-master", "yes", "--replicaof", "127.0.0.1", &port],
    );
    to_a.retarget(a.port);
    to_a.thaw();
    to_a.kill_connections();
    wait_linked(&b, 1);
    eventually("B to get C's write through A", || {
        cmd::<Option<String>>(&mut cb, &["GET", "c-unsent"]).is_some()
    });
    pull(&a, c.port);
    wait_linked(&a, 2);
    let () = cmd(&mut cc, &["SET", "c-after", "1"]);
    converged(&[&a, &b, &c]);
    // A's keys written within a second of its last and C's 21 keys.
    assert_resumed_by_stamp(&a, &b, 20 + 21 + 1, before);
}

/// `XINFO STREAM key`'s counters a join of two histories sets: the
/// entries-added count, the last ID, the max-deleted-entry-id.
fn stream_counts(c: &mut redis::Connection, key: &str) -> Vec<String> {
    let info: Vec<redis::Value> = cmd(c, &["XINFO", "STREAM", key]);
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        redis::Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    };
    let fields = ["entries-added", "last-generated-id", "max-deleted-entry-id"];
    (info.chunks(2))
        .filter(|kv| fields.contains(&text(&kv[0]).as_str()))
        .map(|kv| format!("{} {}", text(&kv[0]), text(&kv[1])))
        .collect()
}

/// DECISIONS 334 (simulator seeds 2808, 52336): A joins B's stream with
/// a history B lacks and commits the join at B's version (a stream's
/// version is the newest stamp it holds, DECISIONS 183), answering it into
/// its stream, which B does not pull at that moment; A then restarts from
/// its RDB. B resumes A's new stream by stamp, from the last of A's own
/// writes it applied, and must still get the answer: the key's version is
/// B's own, so only A's note of the answer finds it.
///
/// The history: A's add to `q` is older than B's FLUSHALL but reaches B
/// after it (dropped there); A applies the flush after its add, and its
/// tombstone keeps the stream's history (DECISIONS 195-196), so A's join
/// with B's new `q` counts both adds.
#[test]
fn a_join_answered_at_the_peers_version_reaches_it_after_a_restart_from_the_rdb() {
    an_answer_survives_a_restart(&[], true);
}

/// The same, A keeping an AOF (the note is in the merge-state annotation
/// written as the answer is made).
#[test]
fn a_join_answered_at_the_peers_version_reaches_it_after_a_restart_from_the_aof() {
    an_answer_survives_a_restart(&["--appendonly", "yes", "--appendfsync", "always"], false);
}

/// The test of the two above: A started with `extra`, saving with SAVE
/// before it is killed where `save`.
fn an_answer_survives_a_restart(extra: &[&str], save: bool) {
    let tag = if save {
        "answer-resume-rdb"
    } else {
        "answer-resume-aof"
    };
    let (dir, slot) = (tempdir(tag), unique_node_slot());
    let a = node_a(&dir, &slot, extra);
    let b = active_node(&[]);
    let (to_a, to_b) = (
        common::proxy::Proxy::start(a.port),
        common::proxy::Proxy::start(b.port),
    );
    pull(&a, to_b.port);
    pull(&b, to_a.port);
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    let (mut ca, mut cb) = (a.conn(), b.conn());
    let () = cmd(&mut ca, &["SET", "a-first", "1"]);
    converged(&[&a, &b]);
    if !save {
        // A base that keeps A's node id (the peer resumes by stamp only
        // from the node it pulled from).
        rewrite(&mut ca);
    }
    to_a.cut();
    to_b.cut();
    let _: String = cmd(&mut ca, &["XADD", "q", "*", "f", "a"]);
    std::thread::sleep(Duration::from_millis(1100));
    let () = cmd(&mut cb, &["FLUSHALL"]);
    let () = cmd(&mut ca, &["SET", "a-later", "1"]);
    // B takes A's add (older than its flush: dropped) and A's later write,
    // the newest of A's own writes B applies before A restarts.
    to_a.heal();
    eventually("B to apply A's later write", || {
        cmd::<Option<String>>(&mut cb, &["GET", "a-later"]).is_some()
    });
    to_a.cut();
    let _: String = cmd(&mut cb, &["XADD", "q", "*", "f", "b"]);
    to_b.heal();
    eventually("A to join B's stream with its own history", || {
        cmd::<i64>(&mut ca, &["XLEN", "q"]) == 1
            && stream_counts(&mut ca, "q").contains(&"entries-added 2".to_string())
    });
    if save {
        let () = cmd(&mut ca, &["SAVE"]);
    } else {
        // The AOF notes A's position in B's stream at most once a second:
        // past the join, so that A does not make it again after the
        // restart (only the note then tells A's new stream about it).
        std::thread::sleep(Duration::from_millis(1500));
    }
    drop(ca);
    drop(a);
    let mut args = extra.to_vec();
    let b_port = to_b.port.to_string();
    args.extend(["--replicaof", "127.0.0.1", &b_port]);
    let a = node_a(&dir, &slot, &args);
    to_a.retarget(a.port);
    to_a.heal();
    wait_linked(&a, 1);
    wait_linked(&b, 1);
    let (mut ca, mut cb) = (a.conn(), b.conn());
    let () = cmd(&mut cb, &["SET", "b-after-restart", "1"]);
    let () = cmd(&mut ca, &["SET", "a-after-restart", "1"]);
    converged(&[&a, &b]);
    eventually("one stream on both nodes", || {
        stream_counts(&mut ca, "q") == stream_counts(&mut cb, "q")
    });
    assert!(
        stream_counts(&mut cb, "q").contains(&"entries-added 2".to_string()),
        "{:?}",
        stream_counts(&mut cb, "q")
    );
    assert!(
        b.log().contains("resumes with the keys this node lacks"),
        "{}",
        b.log()
    );
}
