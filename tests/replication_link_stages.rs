//! Every stage of a replica's sync ends: a scripted master (a plain
//! TcpListener) plays the protocol up to a stage and goes silent; the
//! replica shows that stage in INFO replication (`master_sync_stage`,
//! `master_sync_stage_seconds`, and Redis's transfer fields) and ROLE,
//! then, `repl-timeout` later, logs what it waited for in Redis's words
//! and connects again. The newlines a master sends while it prepares a
//! sync keep the link waiting; a replica sends its own while it loads.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The replicas' repl-timeout: a test looks at a stage between its first
/// second and its timeout, which a loaded machine must not miss.
const TIMEOUT_SECS: u64 = 6;

/// A master that answers what it is told to, then nothing.
struct FakeMaster {
    listener: TcpListener,
    port: u16,
}

impl FakeMaster {
    fn new() -> FakeMaster {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        FakeMaster { listener, port }
    }

    /// The replica's next connection (within 30 s).
    fn accept(&self) -> TcpStream {
        let mut s = None;
        eventually("the replica to connect", || {
            s = self.listener.accept().ok().map(|(s, _)| s);
            s.is_some()
        });
        let s = s.unwrap();
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// The next connection of the replica listening on `port`: one whose
    /// handshake says `REPLCONF listening-port <port>` (answered: +PONG to
    /// PING, +OK to the rest). Any other is dropped: the tests run beside
    /// others whose replicas may still retry a master port the system has
    /// since handed to us (CI once accepted such a stray connection 1 s
    /// after PSYNC and took it for an early reconnect).
    fn accept_from(&self, port: u16) -> TcpStream {
        loop {
            let mut s = self.accept();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let said = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                FakeMaster::serve_until(&mut s, "REPLCONF").0
            }));
            let listening = matches!(&said, Ok(args) if args.len() == 3
                && args[1].eq_ignore_ascii_case("listening-port")
                && args[2] == port.to_string());
            if listening {
                s.write_all(b"+OK\r\n").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                return s;
            }
        }
    }

    /// Answers the replica's commands (+PONG, +OK) until one named
    /// `last` arrives, which is left unanswered; returns its arguments and
    /// when the last reply started to go out (the replica heard from us no
    /// earlier: its wait began then or later).
    fn serve_until(s: &mut TcpStream, last: &str) -> (Vec<String>, Instant) {
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        let mut replied = Instant::now();
        loop {
            while let Some((args, used)) = next_command(&buf) {
                buf.drain(..used);
                if args.join(" ").eq_ignore_ascii_case(last) || args[0].eq_ignore_ascii_case(last) {
                    return (args, replied);
                }
                let reply: &[u8] = if args[0].eq_ignore_ascii_case("ping") {
                    b"+PONG\r\n"
                } else {
                    b"+OK\r\n"
                };
                replied = Instant::now();
                s.write_all(reply).unwrap();
            }
            let n = s.read(&mut tmp).unwrap();
            assert!(n > 0, "the replica closed before sending {last}");
            buf.extend_from_slice(&tmp[..n]);
        }
    }
}

/// The first complete RESP command in `buf`, and its length.
fn next_command(buf: &[u8]) -> Option<(Vec<String>, usize)> {
    let text = std::str::from_utf8(buf).ok()?;
    let mut lines = text.split_inclusive("\r\n");
    let head = lines.next()?;
    let argc: usize = head.strip_prefix('*')?.trim_end().parse().ok()?;
    let mut used = head.len();
    let mut args = Vec::new();
    for _ in 0..argc {
        let len_line = lines.next()?;
        let arg = lines.next()?;
        if !arg.ends_with("\r\n") {
            return None;
        }
        used += len_line.len() + arg.len();
        args.push(arg.trim_end().to_string());
    }
    Some((args, used))
}

/// A replica of `fake` with a short repl-timeout.
fn replica_of(fake: &FakeMaster, extra: &[&str]) -> (Server, redis::Connection) {
    let (r, c, _) = replica_of_since(fake, extra);
    (r, c)
}

/// [`replica_of`], and when REPLICAOF was sent (before the replica's
/// first wait began).
fn replica_of_since(fake: &FakeMaster, extra: &[&str]) -> (Server, redis::Connection, Instant) {
    let timeout = TIMEOUT_SECS.to_string();
    let mut args = vec!["--repl-timeout", &timeout];
    args.extend_from_slice(extra);
    let r = Server::start(&args);
    let mut c = r.conn();
    let asked = Instant::now();
    let _: () = cmd(&mut c, &["REPLICAOF", "127.0.0.1", &fake.port.to_string()]);
    (r, c, asked)
}

fn info_value(info: &str, field: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO:\n{info}"))
        .to_string()
}

/// Waits until the replica has been in `stage` for a second; returns its
/// INFO replication then.
fn in_stage_for_a_second(r: &mut redis::Connection, stage: &str) -> String {
    let mut info = String::new();
    eventually(&format!("a second in {stage}"), || {
        info = cmd(r, &["INFO", "replication"]);
        info_value(&info, "master_sync_stage") == stage
            && info_value(&info, "master_sync_stage_seconds")
                .parse::<u64>()
                .unwrap()
                >= 1
    });
    info
}

fn role_state(r: &mut redis::Connection) -> String {
    let role: Vec<redis::Value> = cmd(r, &["ROLE"]);
    match &role[3] {
        redis::Value::BulkString(s) => String::from_utf8_lossy(s).into_owned(),
        v => panic!("ROLE state {v:?}"),
    }
}

/// The replica gave up on the silent master: it said why in its log, and
/// connects again, not before `repl-timeout` passed since `silent` (taken
/// before the replica's last wait began, so a slow test thread cannot make
/// a correct replica look early).
fn times_out_and_retries(fake: &FakeMaster, replica: &Server, silent: Instant, said: &str) {
    let _again = fake.accept_from(replica.port);
    assert!(
        silent.elapsed() >= Duration::from_secs(TIMEOUT_SECS),
        "reconnected after {:?}, before repl-timeout",
        silent.elapsed()
    );
    let said = format!("{said} (waited {TIMEOUT_SECS} s for ");
    eventually("the timeout logged", || replica.log().contains(&said));
}

const CONNECTING: &str = "Timeout connecting to the MASTER...";
const BULK: &str = "Timeout receiving bulk data from MASTER... If the problem persists try to set the 'repl-timeout' parameter in redis.conf to a larger value.";

#[test]
fn a_master_silent_after_accepting_times_out_the_handshake() {
    let fake = FakeMaster::new();
    let (replica, mut r, silent) = replica_of_since(&fake, &[]);
    let _s = fake.accept();
    let info = in_stage_for_a_second(&mut r, "receive-ping-reply");
    assert_eq!(info_value(&info, "master_link_status"), "down");
    assert_eq!(info_value(&info, "master_sync_in_progress"), "0");
    assert_eq!(role_state(&mut r), "handshake");
    times_out_and_retries(&fake, &replica, silent, CONNECTING);
    assert!(replica.log().contains("for the reply to PING)"));
}

#[test]
fn a_master_silent_after_replconf_capa_times_out_the_handshake() {
    let fake = FakeMaster::new();
    let (replica, mut r) = replica_of(&fake, &[]);
    let mut s = fake.accept();
    let (_, silent) = FakeMaster::serve_until(&mut s, "REPLCONF capa eof capa psync2");
    in_stage_for_a_second(&mut r, "receive-capa-reply");
    times_out_and_retries(&fake, &replica, silent, CONNECTING);
    assert!(replica.log().contains("for the reply to REPLCONF capa)"));
}

#[test]
fn a_master_silent_after_psync_times_out() {
    let fake = FakeMaster::new();
    let (replica, mut r) = replica_of(&fake, &[]);
    let mut s = fake.accept();
    let (psync, silent) = FakeMaster::serve_until(&mut s, "PSYNC");
    assert_eq!(psync, ["PSYNC", "?", "-1"]);
    in_stage_for_a_second(&mut r, "receive-psync-reply");
    times_out_and_retries(&fake, &replica, silent, CONNECTING);
    assert!(replica.log().contains("for the reply to PSYNC)"));
}

/// After +FULLRESYNC, newlines (a master preparing the payload) keep the
/// replica waiting past repl-timeout; once they stop, it times out.
#[test]
fn newlines_keep_the_payload_header_wait_alive_until_they_stop() {
    let fake = FakeMaster::new();
    let (replica, mut r) = replica_of(&fake, &[]);
    let mut s = fake.accept();
    FakeMaster::serve_until(&mut s, "PSYNC");
    let id = "a".repeat(40);
    s.write_all(format!("+FULLRESYNC {id} 0\r\n").as_bytes())
        .unwrap();
    let kept_alive = Instant::now();
    let mut silent = kept_alive;
    while kept_alive.elapsed() < Duration::from_secs(TIMEOUT_SECS + 2) {
        silent = Instant::now();
        s.write_all(b"\n").unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
    let info: String = cmd(&mut r, &["INFO", "replication"]);
    assert_eq!(
        info_value(&info, "master_sync_stage"),
        "receive-payload-header"
    );
    assert_eq!(info_value(&info, "master_sync_in_progress"), "1");
    assert_eq!(role_state(&mut r), "sync");
    assert!(
        !replica.log().contains(BULK),
        "timed out despite the newlines"
    );
    times_out_and_retries(&fake, &replica, silent, BULK);
    assert!(replica
        .log()
        .contains("for the payload's $<length> or $EOF:<mark> line)"));
}

/// A payload that stops after 10 of its 100 bytes, to disk or to the
/// socket loader: INFO shows the transfer, then it times out.
fn a_payload_cut_short_times_out(load: &str) {
    let fake = FakeMaster::new();
    let (replica, mut r) = replica_of(&fake, &["--repl-diskless-load", load]);
    let mut s = fake.accept();
    FakeMaster::serve_until(&mut s, "PSYNC");
    let id = "b".repeat(40);
    s.write_all(format!("+FULLRESYNC {id} 0\r\n$100\r\n").as_bytes())
        .unwrap();
    let silent = Instant::now();
    s.write_all(b"REDIS0010\xfa").unwrap();
    in_stage_for_a_second(&mut r, "receive-payload");
    let mut info = String::new();
    eventually("a second without payload bytes", || {
        info = cmd(&mut r, &["INFO", "replication"]);
        info_value(&info, "master_sync_last_io_seconds_ago") != "0"
    });
    assert_eq!(info_value(&info, "master_sync_stage"), "receive-payload");
    assert_eq!(info_value(&info, "master_sync_in_progress"), "1");
    assert_eq!(info_value(&info, "master_sync_total_bytes"), "100");
    assert_eq!(info_value(&info, "master_sync_read_bytes"), "10");
    assert_eq!(info_value(&info, "master_sync_left_bytes"), "90");
    times_out_and_retries(&fake, &replica, silent, BULK);
    assert!(replica.log().contains("for the payload's next bytes)"));
}

#[test]
fn a_payload_cut_short_times_out_on_disk() {
    a_payload_cut_short_times_out("disabled");
}

#[test]
fn a_payload_cut_short_times_out_in_the_socket_loader() {
    a_payload_cut_short_times_out("swapdb");
}

#[test]
fn a_silent_connected_master_times_out() {
    let fake = FakeMaster::new();
    let (replica, mut r) = replica_of(&fake, &[]);
    let mut s = fake.accept();
    FakeMaster::serve_until(&mut s, "PSYNC");
    let silent = Instant::now();
    s.write_all(format!("+CONTINUE {}\r\n", "c".repeat(40)).as_bytes())
        .unwrap();
    let info = in_stage_for_a_second(&mut r, "connected");
    assert_eq!(info_value(&info, "master_link_status"), "up");
    assert_eq!(role_state(&mut r), "connected");
    let said = "MASTER timeout: no data nor PING received...";
    times_out_and_retries(&fake, &replica, silent, said);
    assert!(replica.log().contains("for data or a PING)"));
}

/// An RDB of three keys, as redis-server saves it.
fn three_keys_rdb() -> Vec<u8> {
    let o = RedisOracle::start(&[]);
    let mut c = o.conn();
    let _: () = cmd(&mut c, &["DEBUG", "POPULATE", "3"]);
    let _: () = cmd(&mut c, &["SAVE"]);
    std::fs::read(o.dir.join("dump.rdb")).unwrap()
}

/// A load that stops making progress (here `key-load-delay`, ten
/// seconds a key) is given up repl-timeout later; meanwhile the replica
/// sends its master newlines, as Redis's replicas do while they load.
#[test]
fn a_stalled_load_times_out_and_keeps_the_master_posted() {
    let rdb = three_keys_rdb();
    let fake = FakeMaster::new();
    let (replica, mut r) = replica_of(&fake, &["--key-load-delay", "10000000"]);
    let mut s = fake.accept();
    FakeMaster::serve_until(&mut s, "PSYNC");
    let id = "d".repeat(40);
    s.write_all(format!("+FULLRESYNC {id} 0\r\n${}\r\n", rdb.len()).as_bytes())
        .unwrap();
    let silent = Instant::now();
    s.write_all(&rdb).unwrap();
    let info = in_stage_for_a_second(&mut r, "loading");
    assert_eq!(info_value(&info, "master_sync_in_progress"), "1");
    let mut newline = [0u8; 1];
    s.read_exact(&mut newline).unwrap();
    assert_eq!(&newline, b"\n");
    times_out_and_retries(
        &fake,
        &replica,
        silent,
        "Timeout loading the payload from MASTER...",
    );
    assert!(replica
        .log()
        .contains("for the loader to take more of the payload)"));
    assert_eq!(cmd::<i64>(&mut r, &["DBSIZE"]), 0);
}

/// DEBUG SLEEP on a replica holds its link as Redis's single thread
/// would: killed inside the same transaction, the link stays down for the
/// whole sleep (6 s), long enough for a master with `repl-backlog-ttl 2`
/// to free its backlog even on a loaded machine, so the replica comes back with a full sync (as
/// Redis's replication-psync "backlog expired" tests expect).
#[test]
fn debug_sleep_holds_the_replication_link() {
    let master = Server::start(&["--repl-backlog-ttl", "2"]);
    let replica = Server::start(&[]);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let _: () = cmd(&mut m, &["SET", "k", "v"]);
    let _: () = cmd(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    );
    eventually("first sync", || in_sync(&mut m, &mut r));
    let full: u64 = info_field(&mut m, "sync_full");
    let slept = Instant::now();
    let replies: Vec<redis::Value> = redis::pipe()
        .atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("master")
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("6")
        .query(&mut r)
        .unwrap();
    assert_eq!(replies.len(), 2);
    assert!(slept.elapsed() >= Duration::from_secs(6));
    let _: () = cmd(&mut m, &["SET", "k", "after"]);
    eventually("back in sync", || in_sync(&mut m, &mut r));
    assert!(info_field::<u64>(&mut m, "sync_partial_err") > 0);
    assert_eq!(info_field::<u64>(&mut m, "sync_full"), full + 1);
    assert!(master.log().contains("Replication backlog freed"));
}
