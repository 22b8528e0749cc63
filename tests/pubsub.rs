//! Pub/sub as a client sees it: delivery across connections on different
//! worker threads, patterns, shard channels, (un)subscribe replies, RESP2
//! subscribed mode and RESP3 pushes, PUBSUB/INFO/CLIENT LIST introspection,
//! the pubsub output buffer limit on a subscriber that never reads, and
//! keyspace notifications.
//!
//! Replies are read with a small RESP reader over raw sockets so the exact
//! shapes (`*` against `>`, nil entries) are checked.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq)]
enum V {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Arr(Vec<V>),
    Push(Vec<V>),
    Other(String),
}

fn b(s: &str) -> V {
    V::Bulk(s.as_bytes().to_vec())
}

fn arr(items: &[V]) -> V {
    V::Arr(items.to_vec())
}

fn read_v(r: &mut Raw) -> V {
    let line = r.line();
    assert!(!line.is_empty(), "connection closed");
    let line = line.trim_end_matches("\r\n");
    let (t, rest) = line.split_at(1);
    let n = || rest.parse::<i64>().unwrap();
    match t {
        "+" => V::Simple(rest.into()),
        "-" => V::Err(rest.into()),
        ":" => V::Int(n()),
        "_" => V::Nil,
        "$" if n() < 0 => V::Nil,
        "$" => {
            let mut v = r.bytes(n() as usize + 2);
            v.truncate(v.len() - 2);
            V::Bulk(v)
        }
        "*" if n() < 0 => V::Nil,
        "*" | ">" | "%" => {
            let k = if t == "%" { 2 * n() } else { n() };
            let items = (0..k).map(|_| read_v(r)).collect();
            if t == ">" {
                V::Push(items)
            } else {
                V::Arr(items)
            }
        }
        _ => V::Other(line.into()),
    }
}

fn enc(args: &[&str]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    v
}

fn send(r: &mut Raw, args: &[&str]) {
    r.send(&enc(args));
}

fn call(r: &mut Raw, args: &[&str]) -> V {
    send(r, args);
    read_v(r)
}

/// Reads `n` replies.
fn read_n(r: &mut Raw, n: usize) -> Vec<V> {
    (0..n).map(|_| read_v(r)).collect()
}

/// Polls `f` until it is true or 30 s pass (only a bound on a hang).
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn fanout_across_worker_threads() {
    let s = Server::start(&["--server-threads", "4"]);
    let mut subs: Vec<Raw> = (0..8).map(|_| s.raw()).collect();
    for r in subs.iter_mut() {
        let v = call(r, &["SUBSCRIBE", "news"]);
        assert_eq!(v, arr(&[b("subscribe"), b("news"), V::Int(1)]));
    }
    let mut pubs: Vec<Raw> = (0..4).map(|_| s.raw()).collect();
    for i in 0..40 {
        let p = &mut pubs[i % 4];
        let msg = format!("m{i}");
        assert_eq!(call(p, &["PUBLISH", "news", &msg]), V::Int(8));
    }
    assert_eq!(call(&mut pubs[0], &["PUBLISH", "nobody", "x"]), V::Int(0));
    for r in subs.iter_mut() {
        for i in 0..40 {
            let want = arr(&[b("message"), b("news"), b(&format!("m{i}"))]);
            assert_eq!(read_v(r), want);
        }
    }
}

#[test]
fn patterns_and_channels_both_deliver() {
    let s = Server::start(&[]);
    let mut sub = s.raw();
    assert_eq!(
        call(&mut sub, &["PSUBSCRIBE", "news.*", "h?llo"]),
        arr(&[b("psubscribe"), b("news.*"), V::Int(1)])
    );
    assert_eq!(
        read_v(&mut sub),
        arr(&[b("psubscribe"), b("h?llo"), V::Int(2)])
    );
    assert_eq!(
        call(&mut sub, &["SUBSCRIBE", "news.art"]),
        arr(&[b("subscribe"), b("news.art"), V::Int(3)])
    );
    let mut p = s.conn();
    let n: i64 = cmd(&mut p, &["PUBLISH", "news.art", "hi"]);
    assert_eq!(n, 2);
    let got = read_n(&mut sub, 2);
    assert!(got.contains(&arr(&[b("message"), b("news.art"), b("hi")])));
    assert!(got.contains(&arr(&[b("pmessage"), b("news.*"), b("news.art"), b("hi")])));
    let n: i64 = cmd(&mut p, &["PUBLISH", "hallo", "x"]);
    assert_eq!(n, 1);
    assert_eq!(
        read_v(&mut sub),
        arr(&[b("pmessage"), b("h?llo"), b("hallo"), b("x")])
    );
    let n: i64 = cmd(&mut p, &["PUBSUB", "NUMPAT"]);
    assert_eq!(n, 2);
    // Shard channels are their own namespace.
    let n: i64 = cmd(&mut p, &["SPUBLISH", "news.art", "x"]);
    assert_eq!(n, 0);
}

#[test]
fn unsubscribe_replies() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    assert_eq!(
        call(&mut r, &["UNSUBSCRIBE"]),
        arr(&[b("unsubscribe"), V::Nil, V::Int(0)])
    );
    assert_eq!(
        call(&mut r, &["PUNSUBSCRIBE"]),
        arr(&[b("punsubscribe"), V::Nil, V::Int(0)])
    );
    assert_eq!(
        call(&mut r, &["SUNSUBSCRIBE"]),
        arr(&[b("sunsubscribe"), V::Nil, V::Int(0)])
    );
    send(&mut r, &["SUBSCRIBE", "a", "b", "a", "c"]);
    let counts: Vec<V> = read_n(&mut r, 4)
        .into_iter()
        .map(|v| match v {
            V::Arr(x) => x[2].clone(),
            v => v,
        })
        .collect();
    assert_eq!(counts, [V::Int(1), V::Int(2), V::Int(2), V::Int(3)]);
    assert_eq!(
        call(&mut r, &["PSUBSCRIBE", "p*"]),
        arr(&[b("psubscribe"), b("p*"), V::Int(4)])
    );
    // Without arguments: one reply per channel, counts going down, in any
    // order; the pattern still counts.
    send(&mut r, &["UNSUBSCRIBE"]);
    let mut names = vec![];
    for (i, v) in read_n(&mut r, 3).into_iter().enumerate() {
        let V::Arr(x) = v else { panic!("{v:?}") };
        assert_eq!(x[0], b("unsubscribe"));
        assert_eq!(x[2], V::Int(3 - i as i64));
        names.push(x[1].clone());
    }
    names.sort_by_key(|v| format!("{v:?}"));
    assert_eq!(names, [b("a"), b("b"), b("c")]);
    assert_eq!(
        call(&mut r, &["UNSUBSCRIBE", "zz"]),
        arr(&[b("unsubscribe"), b("zz"), V::Int(1)])
    );
    assert_eq!(
        call(&mut r, &["PUNSUBSCRIBE"]),
        arr(&[b("punsubscribe"), b("p*"), V::Int(0)])
    );
    // Out of subscribed mode: ordinary commands run again.
    assert_eq!(call(&mut r, &["PING"]), V::Simple("PONG".into()));
}

#[test]
fn resp2_subscribed_mode_and_reset() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    call(&mut r, &["SSUBSCRIBE", "sh"]);
    assert_eq!(
        call(&mut r, &["GET", "k"]),
        V::Err(
            "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context".into()
        )
    );
    let V::Err(e) = call(&mut r, &["CONFIG", "GET", "x"]) else {
        panic!()
    };
    assert!(e.starts_with("ERR Can't execute 'config|get':"), "{e}");
    assert_eq!(call(&mut r, &["PING"]), arr(&[b("pong"), b("")]));
    assert_eq!(call(&mut r, &["PING", "hi"]), arr(&[b("pong"), b("hi")]));
    assert_eq!(call(&mut r, &["RESET"]), V::Simple("RESET".into()));
    assert_eq!(call(&mut r, &["GET", "k"]), V::Nil);
    let mut c = s.conn();
    let v: Vec<redis::Value> = cmd(&mut c, &["PUBSUB", "SHARDNUMSUB", "sh"]);
    assert_eq!(v[1], redis::Value::Int(0));
    assert_eq!(call(&mut r, &["QUIT"]), V::Simple("OK".into()));
}

#[test]
fn resp3_pushes() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    let V::Arr(_) = call(&mut r, &["HELLO", "3"]) else {
        panic!()
    };
    assert_eq!(
        call(&mut r, &["SUBSCRIBE", "ch"]),
        V::Push(vec![b("subscribe"), b("ch"), V::Int(1)])
    );
    // RESP3 has no subscribed mode.
    assert_eq!(call(&mut r, &["SET", "k", "v"]), V::Simple("OK".into()));
    assert_eq!(call(&mut r, &["PING"]), V::Simple("PONG".into()));
    let mut p = s.conn();
    let n: i64 = cmd(&mut p, &["PUBLISH", "ch", "hello"]);
    assert_eq!(n, 1);
    assert_eq!(
        read_v(&mut r),
        V::Push(vec![b("message"), b("ch"), b("hello")])
    );
    // Publishing to itself: the reply, then the message.
    assert_eq!(call(&mut r, &["PUBLISH", "ch", "me"]), V::Int(1));
    assert_eq!(
        read_v(&mut r),
        V::Push(vec![b("message"), b("ch"), b("me")])
    );
    assert_eq!(
        call(&mut r, &["UNSUBSCRIBE"]),
        V::Push(vec![b("unsubscribe"), b("ch"), V::Int(0)])
    );
    assert_eq!(
        call(&mut r, &["UNSUBSCRIBE"]),
        V::Push(vec![b("unsubscribe"), V::Nil, V::Int(0)])
    );
}

#[test]
fn introspection_and_cleanup_on_disconnect() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut r = s.raw();
    send(&mut r, &["SUBSCRIBE", "ch1", "ch2", "other"]);
    read_n(&mut r, 3);
    call(&mut r, &["PSUBSCRIBE", "ch*"]);
    call(&mut r, &["SSUBSCRIBE", "s1"]);
    let mut r2 = s.raw();
    call(&mut r2, &["SUBSCRIBE", "ch1"]);

    let mut chans: Vec<String> = cmd(&mut c, &["PUBSUB", "CHANNELS"]);
    chans.sort();
    assert_eq!(chans, ["ch1", "ch2", "other"]);
    let mut chans: Vec<String> = cmd(&mut c, &["PUBSUB", "CHANNELS", "ch*"]);
    chans.sort();
    assert_eq!(chans, ["ch1", "ch2"]);
    let v: Vec<redis::Value> = cmd(&mut c, &["PUBSUB", "NUMSUB", "ch1", "ch2", "none"]);
    use redis::Value as R;
    let bs = |s: &str| R::BulkString(s.as_bytes().to_vec());
    assert_eq!(
        v,
        [
            bs("ch1"),
            R::Int(2),
            bs("ch2"),
            R::Int(1),
            bs("none"),
            R::Int(0)
        ]
    );
    let n: i64 = cmd(&mut c, &["PUBSUB", "NUMPAT"]);
    assert_eq!(n, 1);
    let v: Vec<String> = cmd(&mut c, &["PUBSUB", "SHARDCHANNELS"]);
    assert_eq!(v, ["s1"]);
    let v: Vec<redis::Value> = cmd(&mut c, &["PUBSUB", "SHARDNUMSUB", "s1"]);
    assert_eq!(v, [bs("s1"), R::Int(1)]);
    assert_eq!(
        cmd_err(&mut c, &["PUBSUB", "CHANNELS", "a", "b"]),
        "ERR unknown subcommand or wrong number of arguments for 'CHANNELS'. Try PUBSUB HELP."
    );
    let help: Vec<String> = cmd(&mut c, &["PUBSUB", "HELP"]);
    assert_eq!(help.len(), 14);

    assert_eq!(info_field::<u64>(&mut c, "pubsub_channels"), 3);
    assert_eq!(info_field::<u64>(&mut c, "pubsub_patterns"), 1);
    assert_eq!(info_field::<u64>(&mut c, "pubsubshard_channels"), 1);
    let list: String = cmd(&mut c, &["CLIENT", "LIST"]);
    let line = list.lines().find(|l| l.contains("sub=3")).expect(&list);
    assert!(line.contains(" flags=P ") && line.contains(" psub=1 ") && line.contains(" ssub=1 "));
    let pubsub_list: String = cmd(&mut c, &["CLIENT", "LIST", "TYPE", "pubsub"]);
    assert_eq!(pubsub_list.lines().count(), 2);

    drop(r);
    drop(r2);
    assert!(eventually(
        || info_field::<u64>(&mut c, "pubsub_channels") == 0
    ));
    assert_eq!(info_field::<u64>(&mut c, "pubsub_patterns"), 0);
    assert_eq!(info_field::<u64>(&mut c, "pubsubshard_channels"), 0);
    let n: i64 = cmd(&mut c, &["PUBLISH", "ch1", "x"]);
    assert_eq!(n, 0);
    let list: String = cmd(&mut c, &["CLIENT", "LIST"]);
    assert!(!list.contains("flags=P"), "{list}");
}

/// The server's resident set size in bytes.
fn rss(s: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// A raw subscriber that will never read again.
fn idle_subscriber(s: &Server, channel: &str) -> TcpStream {
    let mut t = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    t.write_all(&enc(&["SUBSCRIBE", channel])).unwrap();
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < 30 {
        got += t.read(&mut buf[got..]).unwrap();
    }
    t
}

fn subscribers(c: &mut redis::Connection, ch: &str) -> i64 {
    let v: Vec<redis::Value> = cmd(c, &["PUBSUB", "NUMSUB", ch]);
    match v[1] {
        redis::Value::Int(n) => n,
        _ => panic!(),
    }
}

#[test]
fn slow_subscriber_hits_pubsub_output_limit() {
    let s = Server::start(&["--client-output-buffer-limit", "pubsub 2mb 1mb 60"]);
    let _slow = idle_subscriber(&s, "firehose");
    let mut c = s.conn();
    assert_eq!(subscribers(&mut c, "firehose"), 1);
    let before = rss(&s);
    // 64 MiB published: far beyond socket buffers plus the 2 MiB limit.
    let payload = "x".repeat(64 * 1024);
    for _ in 0..1024 {
        let _: i64 = cmd(&mut c, &["PUBLISH", "firehose", &payload]);
    }
    assert!(eventually(|| subscribers(&mut c, "firehose") == 0));
    let list: String = cmd(&mut c, &["CLIENT", "LIST", "TYPE", "pubsub"]);
    assert_eq!(list, "");
    let after = rss(&s);
    assert!(
        after < before + (32 << 20),
        "rss grew from {before} to {after}"
    );
    // A subscriber that reads is served as usual.
    let mut fast = s.raw();
    call(&mut fast, &["SUBSCRIBE", "firehose"]);
    let n: i64 = cmd(&mut c, &["PUBLISH", "firehose", "end"]);
    assert_eq!(n, 1);
    assert_eq!(
        read_v(&mut fast),
        arr(&[b("message"), b("firehose"), b("end")])
    );
}

#[test]
fn soft_limit_disconnects_after_its_seconds() {
    let s = Server::start(&["--client-output-buffer-limit", "pubsub 0 256kb 1"]);
    let _slow = idle_subscriber(&s, "ch");
    let mut c = s.conn();
    let payload = "y".repeat(32 * 1024);
    let deadline = Instant::now() + Duration::from_secs(30);
    while subscribers(&mut c, "ch") == 1 {
        assert!(Instant::now() < deadline, "never disconnected");
        let _: i64 = cmd(&mut c, &["PUBLISH", "ch", &payload]);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads one keyspace notification as (channel, payload).
fn note(r: &mut Raw) -> (String, String) {
    match read_v(r) {
        V::Arr(x) if x.len() == 4 => {
            let s = |v: &V| match v {
                V::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                v => panic!("{v:?}"),
            };
            (s(&x[2]), s(&x[3]))
        }
        v => panic!("{v:?}"),
    }
}

#[test]
fn keyspace_notifications() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
    let v: Vec<String> = cmd(&mut c, &["CONFIG", "GET", "notify-keyspace-events"]);
    assert_eq!(v[1], "AKE");
    let mut r = s.raw();
    call(&mut r, &["PSUBSCRIBE", "__key*__:*"]);
    let _: () = cmd(&mut c, &["SET", "foo", "bar"]);
    assert_eq!(note(&mut r), ("__keyspace@0__:foo".into(), "set".into()));
    assert_eq!(note(&mut r), ("__keyevent@0__:set".into(), "foo".into()));
    let _: i64 = cmd(&mut c, &["EXPIRE", "foo", "100"]);
    assert_eq!(note(&mut r), ("__keyspace@0__:foo".into(), "expire".into()));
    assert_eq!(note(&mut r), ("__keyevent@0__:expire".into(), "foo".into()));
    let _: i64 = cmd(&mut c, &["DEL", "foo", "missing"]);
    assert_eq!(note(&mut r), ("__keyspace@0__:foo".into(), "del".into()));
    assert_eq!(note(&mut r), ("__keyevent@0__:del".into(), "foo".into()));
    let _: i64 = cmd(&mut c, &["INCRBY", "n", "5"]);
    assert_eq!(note(&mut r), ("__keyspace@0__:n".into(), "incrby".into()));
    note(&mut r);

    // Only keyevent, only the expired class: the active cycle's deletions.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Ex"]);
    let v: Vec<String> = cmd(&mut c, &["CONFIG", "GET", "notify-keyspace-events"]);
    assert_eq!(v[1], "xE");
    let _: () = cmd(&mut c, &["SET", "gone", "1", "PX", "50"]);
    assert_eq!(
        note(&mut r),
        ("__keyevent@0__:expired".into(), "gone".into())
    );
    // Lazy expiry on access, in another database.
    let _: () = cmd(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let _: () = cmd(&mut c, &["SELECT", "3"]);
    let _: () = cmd(&mut c, &["SET", "lazy", "1", "PX", "20"]);
    std::thread::sleep(Duration::from_millis(60));
    let v: Option<String> = cmd(&mut c, &["GET", "lazy"]);
    assert_eq!(v, None);
    assert_eq!(
        note(&mut r),
        ("__keyevent@3__:expired".into(), "lazy".into())
    );

    // Disabled: nothing more is published.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", ""]);
    let _: () = cmd(&mut c, &["SET", "quiet", "1"]);
    let n: i64 = cmd(&mut c, &["PUBLISH", "__keyevent@0__:probe", "p"]);
    assert_eq!(n, 1);
    assert_eq!(note(&mut r), ("__keyevent@0__:probe".into(), "p".into()));
}

#[test]
fn new_key_notifications() {
    // Class `n`: one "new" event whenever a write creates a key (any type,
    // any command), before the command's own event; none for overwrites.
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Enl"]);
    let mut r = s.raw();
    call(&mut r, &["PSUBSCRIBE", "__keyevent@0__:*"]);
    let _: () = cmd(&mut c, &["SET", "s", "1"]);
    let _: () = cmd(&mut c, &["SET", "s", "2"]);
    let _: i64 = cmd(&mut c, &["RPUSH", "l", "a"]);
    let _: i64 = cmd(&mut c, &["RPUSH", "l", "b"]);
    let _: () = cmd(&mut c, &["RENAME", "s", "t"]);
    let got: Vec<(String, String)> = (0..4).map(|_| note(&mut r)).collect();
    let want = [("new", "s"), ("new", "l"), ("rpush", "l"), ("rpush", "l")];
    for ((ch, key), (ev, k)) in got.iter().zip(want) {
        assert_eq!(
            (ch.as_str(), key.as_str()),
            (&*format!("__keyevent@0__:{ev}"), k)
        );
    }
    assert_eq!(note(&mut r), ("__keyevent@0__:new".into(), "t".into()));
}

#[test]
fn key_miss_notifications() {
    // Class `m`: a read of a missing key publishes "keymiss", as Redis's
    // lookupKeyRead does; hits, writes and OBJECT do not.
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Em"]);
    let mut r = s.raw();
    call(&mut r, &["PSUBSCRIBE", "__keyevent@0__:*"]);
    let _: () = cmd(&mut c, &["SET", "here", "1"]);
    let _: Option<String> = cmd(&mut c, &["GET", "here"]);
    let _: Option<String> = cmd(&mut c, &["OBJECT", "ENCODING", "gone0"]);
    let _: Option<String> = cmd(&mut c, &["GET", "gone1"]);
    let _: i64 = cmd(&mut c, &["STRLEN", "gone2"]);
    let _: Vec<String> = cmd(&mut c, &["LRANGE", "gone3", "0", "-1"]);
    for k in ["gone1", "gone2", "gone3"] {
        assert_eq!(note(&mut r), ("__keyevent@0__:keymiss".into(), k.into()));
    }
}

#[test]
fn confirmations_survive_client_reply_off() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    send(&mut r, &["CLIENT", "REPLY", "OFF"]);
    assert_eq!(
        call(&mut r, &["SUBSCRIBE", "ch"]),
        arr(&[b("subscribe"), b("ch"), V::Int(1)])
    );
    let mut c = s.conn();
    let n: i64 = cmd(&mut c, &["PUBLISH", "ch", "x"]);
    assert_eq!(n, 1);
    assert_eq!(read_v(&mut r), arr(&[b("message"), b("ch"), b("x")]));
    assert_eq!(
        call(&mut r, &["UNSUBSCRIBE"]),
        arr(&[b("unsubscribe"), b("ch"), V::Int(0)])
    );
    // Other replies stay silenced.
    send(&mut r, &["PING"]);
    assert_eq!(
        call(&mut r, &["CLIENT", "REPLY", "ON"]),
        V::Simple("OK".into())
    );
}

#[test]
fn subscribers_are_exempt_from_idle_timeout() {
    let s = Server::start(&["--timeout", "1"]);
    let mut sub = s.raw();
    call(&mut sub, &["SUBSCRIBE", "ch"]);
    let mut idle = s.raw();
    call(&mut idle, &["PING"]);
    // Both idle past the timeout; `closed` then waits (up to 30 s) for
    // the server's cron to close the idle one.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(idle.closed());
    let mut c = s.conn();
    let n: i64 = cmd(&mut c, &["PUBLISH", "ch", "still here"]);
    assert_eq!(n, 1);
    assert_eq!(
        read_v(&mut sub),
        arr(&[b("message"), b("ch"), b("still here")])
    );
}

#[test]
fn redis_crate_pubsub_client() {
    let s = Server::start(&[]);
    let mut con = s.conn();
    let mut ps = con.as_pubsub();
    ps.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    ps.subscribe("events").unwrap();
    ps.psubscribe("ev*").unwrap();
    let mut p = s.conn();
    let n: i64 = cmd(&mut p, &["PUBLISH", "events", "payload"]);
    assert_eq!(n, 2);
    let mut got = vec![];
    for _ in 0..2 {
        let m = ps.get_message().unwrap();
        let pat: Option<String> = m.get_pattern().ok();
        let body: String = m.get_payload().unwrap();
        got.push((m.get_channel_name().to_string(), pat, body));
    }
    got.sort();
    assert_eq!(
        got,
        [
            ("events".into(), None, "payload".into()),
            ("events".into(), Some("ev*".into()), "payload".into()),
        ]
    );
    ps.unsubscribe("events").unwrap();
    ps.punsubscribe("ev*").unwrap();
    drop(ps);
    let pong: String = cmd(&mut con, &["PING"]);
    assert_eq!(pong, "PONG");
}

#[test]
fn notify_keyspace_events_normalized_as_redis() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    for (set, get) in [
        ("gKE", "gKE"),
        ("$lshzxeKE", "$lshzxeKE"),
        ("KA", "AK"),
        ("EA", "AE"),
        ("nKxm", "xnKm"),
        ("ndgE", "gdnE"),
        ("", ""),
    ] {
        let _: () = cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", set]);
        let v: Vec<String> = cmd(&mut c, &["CONFIG", "GET", "notify-keyspace-events"]);
        assert_eq!(v[1], get, "{set}");
    }
    let e = cmd_err(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Q"]);
    assert!(
        e.contains("Invalid event class character. Use 'Ag$lshzxeKEtmdn'."),
        "{e}"
    );
}
