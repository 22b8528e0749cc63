//! A replica's link seen from its master, side by side with redis-server
//! 7.0 where the behaviour is Redis's: commands sent on the link after SYNC
//! or PSYNC run but get no reply (the link drops, with Redis's log lines),
//! keyspace commands are refused, a second SYNC is ignored; replicas that
//! ask while a disk snapshot runs share it; a disk snapshot nobody waits
//! for stops (without `save` points); FLUSHALL stops a snapshot for
//! replicas, whose replicas then sync again.

mod common;
use common::*;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A server under test, ours or Redis: its port and its log file.
struct Target {
    port: u16,
    log: PathBuf,
}

impl Target {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn conn(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn raw(&self) -> Raw {
        let s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Raw {
            r: std::io::BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    /// Waits until the log has `what` (30 s at most).
    fn logged(&self, what: &str) {
        eventually_seen(&format!("{what:?} in the log of :{}", self.port), || {
            let log = self.log();
            let tail = log.lines().rev().take(8).collect::<Vec<_>>().join(" | ");
            (log.contains(what), tail)
        });
    }
}

fn ours(extra: &[&str]) -> (Server, Target) {
    let s = Server::start(extra);
    let t = Target {
        port: s.port,
        log: s.dir.join("server.log"),
    };
    (s, t)
}

fn redis(extra: &[&str]) -> (RedisOracle, Target) {
    let r = RedisOracle::start(extra);
    let t = Target {
        port: r.port,
        log: r.dir.join("redis.log"),
    };
    (r, t)
}

/// Reads until the server closes the link; panics if it is still open
/// after 10 s. Returns what was read.
fn read_until_closed(raw: &mut Raw) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(10);
    raw.w
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match raw.r.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) if Instant::now() < deadline => {}
            Err(e) => panic!("the link is still open after 10 s ({e}); read {got:?}"),
        }
    }
}

/// A replica's link: SYNC, or PSYNC with its +FULLRESYNC line read.
fn link(t: &Target, psync: bool) -> Raw {
    let mut raw = t.raw();
    if psync {
        raw.send(b"PSYNC ? -1\r\n");
        let line = raw.line();
        assert!(line.starts_with("+FULLRESYNC "), "{line:?}");
    } else {
        raw.send(b"SYNC\r\n");
    }
    raw
}

/// CONFIG SET sent on a SYNC link runs, its reply is not sent, the link
/// drops with Redis's line naming the command.
fn config_set_on_link_runs(t: &Target) {
    let mut raw = link(t, false);
    raw.send(b"CONFIG SET maxmemory-samples 7\r\n");
    let got = read_until_closed(&mut raw);
    assert!(!String::from_utf8_lossy(&got).contains("+OK"), "{got:?}");
    let mut c = t.conn();
    let v: Vec<String> = cmd(&mut c, &["CONFIG", "GET", "maxmemory-samples"]);
    assert_eq!(v[1], "7");
    t.logged("Replica generated a reply to command 'config|set', disconnecting it: id=");
    t.logged(" flags=S ");
    eventually("the replica gone", || {
        info_field::<u64>(&mut c, "connected_slaves") == 0
    });
}

#[test]
fn a_command_on_a_replica_link_runs_and_its_reply_drops_the_link() {
    let (_s, t) = ours(&[]);
    config_set_on_link_runs(&t);
    let (_r, o) = redis(&[]);
    config_set_on_link_runs(&o);
}

/// SET sent on a PSYNC link is refused before it runs: the key stays
/// unset, the refusal counts as Redis counts it, both lines are logged.
fn keyspace_refused(t: &Target) {
    let mut c = t.conn();
    let _: () = cmd(&mut c, &["CONFIG", "RESETSTAT"]);
    let mut raw = link(t, true);
    raw.send(b"SET k v\r\n");
    read_until_closed(&mut raw);
    let v: Option<String> = cmd(&mut c, &["GET", "k"]);
    assert_eq!(v, None);
    t.logged("Replica generated a reply to command 'set', disconnecting it: ");
    t.logged("== CRITICAL == This master is sending an error to its replica: 'Replica can't interact with the keyspace' after processing the command 'set'");
    let stats: String = cmd(&mut c, &["INFO", "commandstats"]);
    let set = stats.lines().find(|l| l.starts_with("cmdstat_set:"));
    let set = set.unwrap_or_else(|| panic!("{stats}"));
    assert!(set.starts_with("cmdstat_set:calls=0,"), "{set}");
    assert!(set.ends_with("rejected_calls=1,failed_calls=0"), "{set}");
    assert_eq!(info_field::<u64>(&mut c, "unexpected_error_replies"), 1);
    assert_eq!(info_field::<u64>(&mut c, "total_error_replies"), 1);
}

#[test]
fn a_keyspace_command_on_a_replica_link_is_refused() {
    let (_s, t) = ours(&[]);
    keyspace_refused(&t);
    let (_r, o) = redis(&[]);
    keyspace_refused(&o);
}

/// PING pipelined with SYNC (one write) runs on the link, not as the
/// client's: no PONG comes back.
fn pipelined_after_sync(t: &Target) {
    let mut raw = t.raw();
    raw.send(b"SYNC\r\nPING\r\n");
    let got = read_until_closed(&mut raw);
    assert!(!String::from_utf8_lossy(&got).contains("PONG"), "{got:?}");
    t.logged("Replica generated a reply to command 'ping', disconnecting it: ");
}

#[test]
fn a_command_pipelined_after_sync_runs_on_the_link() {
    let (_s, t) = ours(&[]);
    pipelined_after_sync(&t);
    let (_r, o) = redis(&[]);
    pipelined_after_sync(&o);
}

/// A second SYNC and REPLCONF ACK on a link get no reply: the link stays
/// and carries the stream (SET's key).
fn sync_again_ignored(t: &Target) {
    let mut raw = link(t, true);
    raw.send(b"SYNC\r\nREPLCONF ACK 0\r\n");
    // The payload: $<len> (after keepalive newlines), then its bytes.
    let len = loop {
        let line = raw.line();
        if let Some(n) = line.trim_end().strip_prefix('$') {
            break n.parse::<usize>().unwrap();
        }
        assert_eq!(line, "\n", "before the payload");
    };
    raw.bytes(len);
    let mut c = t.conn();
    let _: () = cmd(&mut c, &["SET", "after", "1"]);
    let mut stream = Vec::new();
    while !String::from_utf8_lossy(&stream).contains("after") {
        let line = raw.line();
        assert!(!line.is_empty(), "the link closed: {stream:?}");
        stream.extend_from_slice(line.as_bytes());
    }
    assert_eq!(info_field::<u64>(&mut c, "connected_slaves"), 1);
    assert!(!t.log().contains("Replica generated a reply"));
}

#[test]
fn a_second_sync_on_a_replica_link_is_ignored() {
    let (_s, t) = ours(&["--repl-diskless-sync", "no"]);
    sync_again_ignored(&t);
    let (_r, o) = redis(&["--repl-diskless-sync", "no"]);
    sync_again_ignored(&o);
}

/// Ten keys, each a tenth of a second to save: a disk snapshot of a
/// second, stopped early by whatever the test does.
fn slow_keys(c: &mut redis::Connection, delay_us: &str) {
    for i in 0..10 {
        let _: () = cmd(c, &["SET", &format!("k{i}"), "v"]);
    }
    let _: () = cmd(c, &["CONFIG", "SET", "rdb-key-save-delay", delay_us]);
}

/// Two replicas asking while one disk snapshot is taken share it: the
/// same offset and the same payload, one snapshot started, Redis's line
/// for the second.
fn disk_snapshot_shared(t: &Target) {
    let mut c = t.conn();
    slow_keys(&mut c, "100000");
    let mut a = t.raw();
    a.send(b"PSYNC ? -1\r\n");
    eventually("the snapshot", || {
        info_field::<u64>(&mut c, "rdb_bgsave_in_progress") == 1
    });
    let mut b = t.raw();
    b.send(b"PSYNC ? -1\r\n");
    t.logged("Waiting for end of BGSAVE for SYNC");
    let (la, lb) = (a.line(), b.line());
    assert!(la.starts_with("+FULLRESYNC "), "{la:?}");
    assert_eq!(la, lb);
    let payload = |r: &mut Raw| loop {
        let line = r.line();
        if let Some(n) = line.trim_end().strip_prefix('$') {
            return r.bytes(n.parse().unwrap());
        }
    };
    assert_eq!(payload(&mut a), payload(&mut b));
    assert_eq!(t.log().matches("Starting BGSAVE for SYNC").count(), 1);
    assert_eq!(info_field::<u64>(&mut c, "sync_full"), 2);
}

#[test]
fn replicas_that_ask_during_a_disk_snapshot_share_it() {
    let (_s, t) = ours(&["--repl-diskless-sync", "no"]);
    disk_snapshot_shared(&t);
    let (_r, o) = redis(&["--repl-diskless-sync", "no"]);
    disk_snapshot_shared(&o);
}

/// The only replica waiting for a disk snapshot leaves: without `save`
/// points the snapshot stops; with one it goes on.
fn unwanted_snapshot(t: &Target, save: &str) -> bool {
    let mut c = t.conn();
    let _: () = cmd(&mut c, &["CONFIG", "SET", "save", save]);
    slow_keys(&mut c, "1000000");
    let raw = link(t, true);
    eventually("the snapshot", || {
        info_field::<u64>(&mut c, "rdb_bgsave_in_progress") == 1
    });
    raw.w.shutdown(std::net::Shutdown::Both).unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if info_field::<u64>(&mut c, "rdb_bgsave_in_progress") == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn a_disk_snapshot_no_replica_waits_for_stops_without_save_points() {
    let (_s, t) = ours(&["--repl-diskless-sync", "no"]);
    assert!(unwanted_snapshot(&t, ""), "the snapshot went on");
    t.logged("Background saving terminated as no replica waits for it");
    let (_s2, t2) = ours(&["--repl-diskless-sync", "no"]);
    assert!(!unwanted_snapshot(&t2, "900 1"), "the snapshot stopped");
    let (_r, o) = redis(&["--repl-diskless-sync", "no"]);
    assert!(unwanted_snapshot(&o, ""), "Redis's snapshot went on");
    let (_r2, o2) = redis(&["--repl-diskless-sync", "no"]);
    assert!(!unwanted_snapshot(&o2, "900 1"), "Redis's snapshot stopped");
}

/// A diskless replica's link: REPLCONF capa eof, PSYNC, +FULLRESYNC read.
fn diskless_link(t: &Target) -> Raw {
    let mut raw = t.raw();
    assert_eq!(raw_cmd(&mut raw, &["REPLCONF", "capa", "eof"]), "+OK");
    raw.send(b"PSYNC ? -1\r\n");
    let mut line = raw.line();
    while line == "\n" {
        line = raw.line();
    }
    assert!(line.starts_with("+FULLRESYNC "), "{line:?}");
    raw
}

/// Whether `got` is a whole diskless payload: `$EOF:<mark>\r\n`, the
/// RDB, the mark (after keepalive newlines).
fn whole_payload(got: &[u8]) -> bool {
    let start = got.iter().position(|&b| b != b'\n').unwrap_or(got.len());
    let got = &got[start..];
    let Some(rest) = got.strip_prefix(b"$EOF:") else {
        return false;
    };
    rest.len() > 42 && rest.ends_with(&rest[..40])
}

/// FLUSHALL during a diskless transfer stops it: the payload ends without
/// its mark, the link closes, the next sync takes a new snapshot. Redis's
/// child sends `$EOF:` with its first 16 KB, so the keys are big enough (and
/// not compressed) for one to send it: the transfer is under way when
/// FLUSHALL comes.
fn flushall_stops_diskless(t: &Target) {
    let mut c = t.conn();
    let big = "x".repeat(20_000);
    for i in 0..10 {
        let _: () = cmd(&mut c, &["SET", &format!("k{i}"), &big]);
    }
    let _: () = cmd(&mut c, &["CONFIG", "SET", "rdbcompression", "no"]);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "1000000"]);
    let mut raw = diskless_link(t);
    let mut eof = raw.line();
    while eof == "\n" {
        eof = raw.line();
    }
    let mark = eof.trim_end().strip_prefix("$EOF:").expect("$EOF:<mark>");
    let _: () = cmd(&mut c, &["FLUSHALL"]);
    let got = read_until_closed(&mut raw);
    assert!(
        !got.ends_with(mark.as_bytes()),
        "the payload looks complete"
    );
    t.logged("Diskless rdb transfer, done reading from pipe, 1 replicas still up.");
    t.logged("SYNC failed. BGSAVE child returned an error");
    let mut again = diskless_link(t);
    let got = read_until_payload(&mut again);
    assert!(whole_payload(&got), "the new payload: {got:?}");
    t.logged("Background RDB transfer started by pid");
}

/// Reads until what was read is a whole diskless payload, or the link
/// closes (10 s at most).
fn read_until_payload(raw: &mut Raw) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while !whole_payload(&got) && Instant::now() < deadline {
        match raw.r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

#[test]
fn flushall_stops_a_diskless_transfer_and_the_replica_syncs_again() {
    let (_s, t) = ours(&["--repl-diskless-sync", "yes"]);
    flushall_stops_diskless(&t);
    t.logged("Background transfer terminated by FLUSHALL");
    let (_r, o) = redis(&[
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]);
    flushall_stops_diskless(&o);
}

/// FLUSHALL during a disk snapshot for a replica stops it too: the replica
/// gets no payload, its link closes.
fn flushall_stops_disk(t: &Target) {
    let mut c = t.conn();
    slow_keys(&mut c, "1000000");
    let mut raw = link(t, true);
    eventually("the snapshot", || {
        info_field::<u64>(&mut c, "rdb_bgsave_in_progress") == 1
    });
    let _: () = cmd(&mut c, &["FLUSHALL"]);
    let got = read_until_closed(&mut raw);
    assert!(got.iter().all(|&b| b == b'\n'), "{got:?}");
    t.logged("SYNC failed. BGSAVE child returned an error");
    eventually("the snapshot gone", || {
        info_field::<u64>(&mut c, "rdb_bgsave_in_progress") == 0
    });
}

#[test]
fn flushall_stops_a_disk_snapshot_for_replicas() {
    let (_s, t) = ours(&["--repl-diskless-sync", "no"]);
    flushall_stops_disk(&t);
    t.logged("Background saving terminated by FLUSHALL");
    let (_r, o) = redis(&["--repl-diskless-sync", "no"]);
    flushall_stops_disk(&o);
}
