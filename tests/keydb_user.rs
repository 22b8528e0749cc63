//! A KeyDB user's files, unchanged (issue 28, "Done when"): the keydb.conf
//! KeyDB ships (its directives, KeyDB-only ones included) and a dump.rdb
//! in KeyDB's encoding holding member expiries (`keydb-subexpire-*` aux
//! pairs after their key, DECISIONS 122), a KEYDB.CRON job (RDB type 64,
//! KeyDB's rdb.cpp) and the `mvcc-tstamp` aux field an active KeyDB writes
//! before every key. lattice-server starts on them and behaves as KeyDB
//! would: the member TTLs hold and expire, the job runs, and both survive
//! a SAVE and a restart from our own file.
//!
//! No KeyDB binary makes the file here (none is packaged for this machine,
//! DECISIONS 111): it is written byte by byte from KeyDB's format, as
//! tests/member_expiry.rs's is.

mod common;

use common::rdb::{aux, string};
use common::*;
use std::time::Duration;

/// KeyDB 6.3's shipped keydb.conf, its comments left out, with the paths a
/// test needs (port, dir and pidfile come from the harness or below).
const KEYDB_CONF: &str = r#"bind 127.0.0.1 -::1
protected-mode yes
tcp-backlog 511
timeout 0
tcp-keepalive 300
daemonize no
supervised no
loglevel notice
databases 16
always-show-logo yes
set-proc-title yes
proc-title-template "{title} {listen-addr} {server-mode}"
save 900 1
save 300 10
save 60 10000
stop-writes-on-bgsave-error yes
rdbcompression yes
rdbchecksum yes
dbfilename dump.rdb
rdb-del-sync-files no
replica-serve-stale-data yes
replica-read-only yes
repl-diskless-sync no
repl-diskless-sync-delay 5
repl-diskless-load disabled
repl-disable-tcp-nodelay no
replica-priority 100
acllog-max-len 128
lazyfree-lazy-eviction no
lazyfree-lazy-expire no
lazyfree-lazy-server-del no
replica-lazy-flush no
lazyfree-lazy-user-del no
lazyfree-lazy-user-flush no
oom-score-adj no
oom-score-adj-values 0 200 800
disable-thp yes
appendonly no
appendfilename "appendonly.aof"
appendfsync everysec
no-appendfsync-on-rewrite no
auto-aof-rewrite-percentage 100
auto-aof-rewrite-min-size 64mb
aof-load-truncated yes
aof-use-rdb-preamble yes
lua-time-limit 5000
slowlog-log-slower-than 10000
slowlog-max-len 128
latency-monitor-threshold 0
notify-keyspace-events ""
hash-max-ziplist-entries 512
hash-max-ziplist-value 64
list-max-ziplist-size -2
list-compress-depth 0
set-max-intset-entries 512
zset-max-ziplist-entries 128
zset-max-ziplist-value 64
hll-sparse-max-bytes 3000
stream-node-max-bytes 4096
stream-node-max-entries 100
activerehashing yes
client-output-buffer-limit normal 0 0 0
client-output-buffer-limit replica 256mb 64mb 60
client-output-buffer-limit pubsub 32mb 8mb 60
hz 10
dynamic-hz yes
aof-rewrite-incremental-fsync yes
rdb-save-incremental-fsync yes
jemalloc-bg-thread yes
server-threads 2
replica-weighting-factor 2
active-client-balancing yes
"#;

fn now_ms() -> u64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    d.unwrap().as_millis() as u64
}

/// KeyDB's dump: a set `s` {far, soon} whose members expire at `far_ms`
/// and `soon_ms`, and a job `job` that runs `INCR ticks` every 100 ms from
/// `start_ms`; each key after an `mvcc-tstamp` aux field, as an active
/// KeyDB saves it. No checksum (zeros: not checked).
fn keydb_dump(far_ms: u64, soon_ms: u64, start_ms: u64) -> Vec<u8> {
    let mut f = b"REDIS0009".to_vec();
    aux(&mut f, b"redis-ver", b"6.3.4");
    aux(&mut f, b"redis-bits", b"64");
    f.extend_from_slice(&[0xFE, 0]); // SELECTDB 0
    aux(&mut f, b"mvcc-tstamp", b"1749051342113705984");
    f.push(2); // a set
    string(&mut f, b"s");
    f.push(2);
    string(&mut f, b"far");
    string(&mut f, b"soon");
    for (member, at) in [(&b"far"[..], far_ms), (b"soon", soon_ms)] {
        aux(&mut f, b"keydb-subexpire-key", member);
        aux(&mut f, b"keydb-subexpire-when", at.to_string().as_bytes());
    }
    aux(&mut f, b"mvcc-tstamp", b"1749051342113705985");
    f.push(64); // RDB_TYPE_CRON
    string(&mut f, b"job");
    string(&mut f, b"redis.call('incr', KEYS[1])");
    f.extend_from_slice(&start_ms.to_le_bytes());
    f.extend_from_slice(&100u64.to_le_bytes());
    f.push(1); // keys
    string(&mut f, b"ticks");
    f.push(0); // args
    f.push(0xFF);
    f.extend_from_slice(&[0; 8]);
    f
}

fn ticks(c: &mut redis::Connection) -> i64 {
    cmd::<Option<i64>>(c, &["GET", "ticks"]).unwrap_or(0)
}

/// What the user sees of the data: the job runs, the far member keeps
/// its TTL, the soon one is gone once due.
fn behaves_as_keydb(c: &mut redis::Connection, far_ms: u64, soon_ms: u64) {
    let first = ticks(c);
    eventually("the cron job to run twice more", || ticks(c) >= first + 2);
    let ttl: i64 = cmd(c, &["PTTL", "s", "far"]);
    let left = far_ms.saturating_sub(now_ms()) as i64;
    assert!(ttl > 0 && ttl <= left + 1000, "{ttl} against {left}");
    let wait = soon_ms.saturating_sub(now_ms());
    std::thread::sleep(Duration::from_millis(wait + 50));
    let members: Vec<String> = cmd(c, &["SMEMBERS", "s"]);
    assert_eq!(members, ["far"]);
    // KeyDB's answer for a member without a TTL, gone or not.
    assert_eq!(cmd::<i64>(c, &["TTL", "s", "soon"]), -1);
}

#[test]
fn a_keydb_conf_and_dump_with_member_ttls_and_a_cron_job_start_and_behave() {
    let dir = tempdir("keydb-user");
    let now = now_ms();
    let (far, soon) = (now + 1_000_000, now + 1_500);
    std::fs::write(dir.join("dump.rdb"), keydb_dump(far, soon, now)).unwrap();
    let conf = dir.join("keydb.conf");
    let pid = dir.join("keydb.pid");
    let text = format!("{KEYDB_CONF}pidfile {}\n", pid.display());
    std::fs::write(&conf, text).unwrap();
    let dir_arg = dir.to_str().unwrap();
    let conf_arg = conf.to_str().unwrap();
    let s = Server::start_with(Some(conf_arg), &["--dir", dir_arg]);
    let mut c = s.conn();
    let threads: Vec<String> = cmd(&mut c, &["CONFIG", "GET", "server-threads"]);
    assert_eq!(threads, ["server-threads", "2"]);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "job"]), 1);
    behaves_as_keydb(&mut c, far, soon);

    // Saved by us and started again: the job and the far member's TTL stay.
    let () = cmd(&mut c, &["SAVE"]);
    drop(c);
    drop(s);
    let s = Server::start_with(Some(conf_arg), &["--dir", dir_arg]);
    let mut c = s.conn();
    let first = ticks(&mut c);
    assert!(first >= 2, "the counter the job wrote was saved: {first}");
    eventually("the job to run again", || ticks(&mut c) > first);
    let ttl: i64 = cmd(&mut c, &["PTTL", "s", "far"]);
    assert!(ttl > 0, "{ttl}");
    assert_eq!(cmd::<Vec<String>>(&mut c, &["SMEMBERS", "s"]), ["far"]);
}
