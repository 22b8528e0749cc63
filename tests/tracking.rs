//! Client-side caching (CLIENT TRACKING): invalidation delivery over real
//! connections, in RESP3 push form and via RESP2 redirect, plus errors.
mod common;
use common::*;

/// Sends a command inline and returns the next `n` reply lines joined.
fn run(r: &mut Raw, c: &str, n: usize) -> String {
    r.send(format!("{c}\r\n").as_bytes());
    lines(r, n)
}

fn lines(r: &mut Raw, n: usize) -> String {
    (0..n).map(|_| r.line()).collect::<String>()
}

fn resp3(s: &Server) -> Raw {
    let mut r = s.raw();
    r.send(b"HELLO 3\r\n");
    // The HELLO map ends with "modules" and its empty array.
    while r.line() != "modules\r\n" {}
    assert_eq!(r.line(), "*0\r\n");
    r
}

const INV_FOO: &str = ">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nfoo\r\n";

#[test]
fn default_mode_invalidates_after_other_write() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    assert_eq!(run(&mut a, "CLIENT TRACKING on", 1), "+OK\r\n");
    assert_eq!(run(&mut a, "GET foo", 1), "_\r\n");
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SET", "foo", "1"]);
    assert_eq!(lines(&mut a, 6), INV_FOO);
    // The key is forgotten: a second write sends nothing; a PING comes next.
    cmd::<()>(&mut c, &["SET", "foo", "2"]);
    assert_eq!(run(&mut a, "PING", 1), "+PONG\r\n");
}

#[test]
fn resp2_redirect_to_subscriber_and_flushall() {
    let s = Server::start(&[]);
    let mut sub = s.raw();
    let id = run(&mut sub, "CLIENT ID", 1)[1..].trim().to_string();
    run(&mut sub, "SUBSCRIBE __redis__:invalidate", 6);
    let mut t = s.raw();
    let on = format!("CLIENT TRACKING on REDIRECT {id}");
    assert_eq!(run(&mut t, &on, 1), "+OK\r\n");
    assert_eq!(run(&mut t, "CLIENT GETREDIR", 1), format!(":{id}\r\n"));
    run(&mut t, "GET foo", 1);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SET", "foo", "1"]);
    let msg = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n";
    assert_eq!(lines(&mut sub, 8), format!("{msg}*1\r\n$3\r\nfoo\r\n"));
    cmd::<()>(&mut c, &["FLUSHALL"]);
    assert_eq!(lines(&mut sub, 6), format!("{msg}$-1\r\n"));
}

#[test]
fn bcast_prefix_and_noloop() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    run(&mut a, "CLIENT TRACKING on BCAST PREFIX fo NOLOOP", 1);
    assert_eq!(run(&mut a, "SET foo 1", 1), "+OK\r\n"); // own write: no push
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SET", "bar", "1"]); // no match
    cmd::<()>(&mut c, &["SET", "foo", "1"]);
    assert_eq!(lines(&mut a, 6), INV_FOO);
    assert_eq!(run(&mut a, "PING", 1), "+PONG\r\n");
}

#[test]
fn optin_tracks_only_after_caching_yes() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    run(&mut a, "CLIENT TRACKING on OPTIN", 1);
    run(&mut a, "GET bar", 1);
    run(&mut a, "CLIENT CACHING yes", 1);
    run(&mut a, "GET foo", 1);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["SET", "bar", "1"]);
    cmd::<()>(&mut c, &["SET", "foo", "1"]);
    assert_eq!(lines(&mut a, 6), INV_FOO);
}

#[test]
fn errors_match_redis() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let e = |c: &mut redis::Connection, a: &str| cmd_err(c, &a.split(' ').collect::<Vec<_>>());
    assert!(e(&mut c, "CLIENT TRACKING on PREFIX a")
        .contains("PREFIX option requires BCAST mode to be enabled"));
    assert!(e(&mut c, "CLIENT TRACKING on OPTIN OPTOUT")
        .contains("You can't specify both OPTIN mode and OPTOUT mode"));
    assert!(e(&mut c, "CLIENT TRACKING on REDIRECT 9999")
        .contains("The client ID you want redirect to does not exist"));
    assert!(e(&mut c, "CLIENT CACHING yes").contains("CLIENT CACHING can be called only"));
    assert!(e(&mut c, "CLIENT TRACKING on BCAST PREFIX a PREFIX ab")
        .contains("Prefix 'a' overlaps with another provided prefix 'ab'"));
    assert_eq!(cmd::<i64>(&mut c, &["CLIENT", "GETREDIR"]), -1);
}

/// `r` sends `c` (words split on spaces) and reads one reply, rendered.
fn rc(r: &mut Raw, c: &str) -> String {
    raw_cmd(r, &c.split(' ').collect::<Vec<_>>())
}

fn inv(keys: &[&str]) -> String {
    format!(">2[invalidate,*{}[{}]]", keys.len(), keys.join(","))
}

#[test]
fn bcast_sends_one_message_per_prefix_per_batch() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    assert_eq!(
        rc(&mut a, "CLIENT TRACKING on BCAST PREFIX b: PREFIX a:"),
        "+OK"
    );
    let mut w = s.raw();
    w.send(b"MULTI\r\nSET a:1 x\r\nSET b:1 x\r\nSET a:2 x\r\nSET c:1 x\r\nEXEC\r\n");
    for _ in 0..5 {
        read_reply(&mut w);
    }
    // Prefixes in order, keys sorted, c:1 matched none.
    assert_eq!(read_reply(&mut a), inv(&["a:1", "a:2"]));
    assert_eq!(read_reply(&mut a), inv(&["b:1"]));
    // A pipelined batch is one pass too.
    w.send(b"SET a:3 x\r\nSET a:4 x\r\n");
    read_reply(&mut w);
    read_reply(&mut w);
    assert_eq!(read_reply(&mut a), inv(&["a:3", "a:4"]));
    assert_eq!(rc(&mut a, "PING"), "+PONG");
}

#[test]
fn own_write_invalidation_follows_the_reply() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    rc(&mut a, "CLIENT TRACKING on");
    rc(&mut a, "GET foo");
    a.send(b"SET foo 1\r\nPING\r\n");
    assert_eq!(read_reply(&mut a), "+OK");
    assert_eq!(read_reply(&mut a), inv(&["foo"]));
    assert_eq!(read_reply(&mut a), "+PONG");
    // In a transaction, after EXEC's reply; a flush is a null invalidation.
    rc(&mut a, "GET foo");
    a.send(b"MULTI\r\nINCR foo\r\nFLUSHDB\r\nEXEC\r\n");
    for want in ["+OK", "+QUEUED", "+QUEUED", "*2[:2,+OK]"] {
        assert_eq!(read_reply(&mut a), want);
    }
    assert_eq!(read_reply(&mut a), inv(&["foo"]));
    assert_eq!(read_reply(&mut a), ">2[invalidate,_]");
    // NOLOOP: nothing for its own writes.
    rc(&mut a, "CLIENT TRACKING on NOLOOP");
    rc(&mut a, "GET foo");
    assert_eq!(rc(&mut a, "SET foo 2"), "+OK");
    assert_eq!(rc(&mut a, "PING"), "+PONG");
}

#[test]
fn expired_keys_are_invalidated() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    let mut c = s.conn();
    rc(&mut a, "CLIENT TRACKING on");
    // Active expiry. (TTLs a loaded machine cannot run out between the
    // SET and the GET: the GET must see the key.)
    cmd::<()>(&mut c, &["SET", "k1", "v", "PX", "1000"]);
    assert_eq!(rc(&mut a, "GET k1"), "v");
    assert_eq!(read_reply(&mut a), inv(&["k1"]));
    // Lazy expiry during the client's own read: after the reply.
    cmd::<()>(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    cmd::<()>(&mut c, &["SET", "k2", "v", "PX", "1000"]);
    assert_eq!(rc(&mut a, "GET k2"), "v");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(rc(&mut a, "MGET k2 k3"), "*2[_,_]");
    assert_eq!(read_reply(&mut a), inv(&["k2"]));
    // BCAST gets expirations too.
    rc(&mut a, "CLIENT TRACKING off");
    rc(&mut a, "CLIENT TRACKING on BCAST NOLOOP");
    cmd::<()>(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);
    rc(&mut a, "SET k4 v PX 20");
    assert_eq!(read_reply(&mut a), inv(&["k4"]));
}

#[test]
fn broken_redirect_is_reported() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    let id = rc(&mut r, "CLIENT ID")[1..].to_string();
    let mut a = resp3(&s);
    rc(&mut a, &format!("CLIENT TRACKING on REDIRECT {id}"));
    rc(&mut a, "GET foo");
    assert_eq!(rc(&mut r, "QUIT"), "+OK");
    assert!(r.closed());
    let mut c = s.conn();
    // The server has let go of the closed client.
    eventually("the redirect client to be gone", || {
        cmd::<String>(&mut c, &["CLIENT", "LIST", "ID", &id]).is_empty()
    });
    cmd::<()>(&mut c, &["SET", "foo", "1"]);
    let want = format!(">2[tracking-redir-broken,:{id}]");
    assert_eq!(read_reply(&mut a), want);
    let info = rc(&mut a, "CLIENT TRACKINGINFO");
    assert_eq!(
        info,
        format!("%3[flags,~2[on,broken_redirect],redirect,:{id},prefixes,*0[]]")
    );
    let list: String = cmd(&mut c, &["CLIENT", "LIST"]);
    assert!(list.contains("flags=tR db=0"), "{list}");
    assert!(list.contains(&format!("redir={id} ")), "{list}");
}

#[test]
fn table_limit_and_info_fields() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    let mut b = resp3(&s);
    let mut c = s.conn();
    rc(&mut a, "CLIENT TRACKING on");
    rc(&mut b, "CLIENT TRACKING on");
    rc(&mut b, "CLIENT TRACKING on BCAST PREFIX x PREFIX y");
    rc(&mut b, "CLIENT TRACKING off");
    rc(&mut b, "CLIENT TRACKING on BCAST PREFIX x PREFIX y");
    rc(&mut a, "MGET k1 k2");
    let info: String = cmd(&mut c, &["INFO"]);
    for want in [
        "tracking_clients:2\r\n",
        "tracking_total_keys:2\r\n",
        "tracking_total_items:2\r\n",
        "tracking_total_prefixes:2\r\n",
    ] {
        assert!(info.contains(want), "{want} in {info}");
    }
    cmd::<()>(&mut c, &["CONFIG", "SET", "tracking-table-max-keys", "1"]);
    let got = read_reply(&mut a);
    assert!(got == inv(&["k1"]) || got == inv(&["k2"]), "{got}");
    assert_eq!(rc(&mut a, "PING"), "+PONG");
}

#[test]
fn caching_errors_and_scope() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    rc(&mut a, "CLIENT TRACKING on");
    assert!(
        rc(&mut a, "CLIENT CACHING yes").contains("only valid when tracking is enabled in OPTIN")
    );
    assert_eq!(rc(&mut a, "CLIENT CACHING maybe"), "-ERR syntax error");
    assert!(rc(&mut a, "CLIENT TRACKING on BCAST").contains("You can't switch BCAST mode"));
    rc(&mut a, "CLIENT TRACKING off");
    rc(&mut a, "CLIENT TRACKING on OPTOUT");
    assert!(rc(&mut a, "CLIENT TRACKING on OPTIN").contains("switch OPTIN/OPTOUT"));
    // CACHING no survives CLIENT subcommands, ends after the next command.
    rc(&mut a, "CLIENT CACHING no");
    assert!(rc(&mut a, "CLIENT TRACKINGINFO").contains("caching-no"));
    rc(&mut a, "GET skipped");
    rc(&mut a, "GET tracked");
    let mut c = s.conn();
    cmd::<()>(&mut c, &["MSET", "skipped", "1", "tracked", "1"]);
    assert_eq!(read_reply(&mut a), inv(&["tracked"]));
    assert_eq!(rc(&mut a, "PING"), "+PONG");
}

/// A script's read-only command tracks the keys the script declared, for
/// the client running it (as Redis); a script that reads nothing, and
/// EVAL_RO itself, track none.
#[test]
fn a_script_that_reads_tracks_its_declared_keys() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    assert_eq!(rc(&mut a, "CLIENT TRACKING on"), "+OK");
    let mut c = s.conn();
    let mset = |c: &mut redis::Connection| cmd::<()>(c, &["MSET", "k1", "1", "k2", "1"]);
    // A write only: nothing tracked.
    rc(&mut a, "EVAL redis.call('set','k3','x') 2 k1 k2");
    mset(&mut c);
    // A read of another key: both declared keys are tracked.
    assert_eq!(rc(&mut a, "EVAL redis.call('get','k3') 2 k1 k2"), "_");
    mset(&mut c);
    assert_eq!(read_reply(&mut a), inv(&["k1"]));
    assert_eq!(read_reply(&mut a), inv(&["k2"]));
    // EVAL_RO tracks nothing by itself, only by its reads.
    rc(&mut a, "EVAL_RO redis.call('ping') 2 k1 k2");
    mset(&mut c);
    rc(&mut a, "EVAL_RO redis.call('get','k1') 2 k1 k2");
    mset(&mut c);
    assert_eq!(read_reply(&mut a), inv(&["k1"]));
    assert_eq!(read_reply(&mut a), inv(&["k2"]));
    assert_eq!(rc(&mut a, "PING"), "+PONG");
}

/// `tracking-table-max-keys` applies before the tracking client's next
/// command, not only in the cron (Redis's #11715): with the cron paused
/// (DEBUG PAUSE-CRON), a command queued in MULTI gets the invalidation of
/// the key evicted from the table ahead of its QUEUED, then EXEC runs.
#[test]
fn the_tracking_table_limit_applies_before_the_next_command() {
    let s = Server::start(&[]);
    let mut a = resp3(&s);
    let mut c = s.conn();
    cmd::<()>(&mut c, &["DEBUG", "PAUSE-CRON", "1"]);
    assert_eq!(rc(&mut a, "CLIENT TRACKING on"), "+OK");
    assert_eq!(rc(&mut a, "MGET k1 k2"), "*2[_,_]");
    assert_eq!(rc(&mut a, "MULTI"), "+OK");
    cmd::<()>(&mut c, &["CONFIG", "SET", "tracking-table-max-keys", "1"]);
    // The cron is paused: nothing is evicted until a command runs (any
    // client's, as in Redis; here the tracking client's own).
    a.send(b"PING\r\n");
    let got = read_reply(&mut a);
    assert!(got == inv(&["k1"]) || got == inv(&["k2"]), "{got}");
    assert_eq!(read_reply(&mut a), "+QUEUED");
    assert_eq!(rc(&mut a, "EXEC"), "*1[+PONG]");
    cmd::<()>(&mut c, &["DEBUG", "PAUSE-CRON", "0"]);
}

/// Once a client has read QUIT's +OK, it is gone for every other
/// connection (Redis frees it before serving the next event): CLIENT LIST
/// no longer shows it, and a client redirecting its invalidations to it is
/// told the redirect broke. Repeated, as the two connections may be served
/// by two workers.
#[test]
fn a_client_that_quit_is_gone_once_its_reply_is_read() {
    let s = Server::start(&[]);
    let mut t = resp3(&s);
    let mut c = s.conn();
    for round in 0..30 {
        let mut q = s.raw();
        let id = run(&mut q, "CLIENT ID", 1)[1..].trim().to_string();
        let on = format!("CLIENT TRACKING on REDIRECT {id}");
        assert_eq!(rc(&mut t, &on), "+OK");
        let key = format!("k{round}");
        assert_eq!(rc(&mut t, &format!("GET {key}")), "_");
        assert_eq!(run(&mut q, "QUIT", 1), "+OK\r\n");
        let list: String = cmd(&mut c, &["CLIENT", "LIST"]);
        assert!(
            !list.contains(&format!("id={id} ")),
            "round {round}: {list}"
        );
        cmd::<()>(&mut c, &["SET", &key, "1"]);
        let got = read_reply(&mut t);
        assert!(
            got.contains("tracking-redir-broken"),
            "round {round}: {got}"
        );
        assert_eq!(rc(&mut t, "CLIENT TRACKING off"), "+OK");
    }
}
