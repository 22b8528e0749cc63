//! ACL users (Redis 7.0's model): rules, the check on every command path,
//! ACL LOG, users from the config and from an ACL file, requirepass as the
//! default user's password, and the limits on clients that have not
//! authenticated. Replies and error strings are compared with the real
//! redis-server 7.0 where both can run the same commands.

mod common;

use common::{cmd, cmd_err, raw_cmd, tempdir, RedisOracle, Server};

/// A connection authenticated as `user`.
fn conn_as(port: u16, user: &str, pass: &str) -> redis::Connection {
    let url = format!("redis://{user}:{pass}@127.0.0.1:{port}/");
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// A reply rendered for comparison; ACL LIST's single-command rules come
/// in hash order in Redis, so each line's words are sorted.
fn render(v: redis::RedisResult<redis::Value>) -> String {
    match v {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!(
            "ERR {} {}",
            e.code().unwrap_or(""),
            e.detail().unwrap_or("")
        ),
    }
}

fn run(c: &mut redis::Connection, args: &[&str]) -> String {
    let mut q = redis::cmd(args[0]);
    for a in &args[1..] {
        q.arg(*a);
    }
    render(q.query(c))
}

fn sorted_lines(lines: Vec<String>) -> Vec<Vec<String>> {
    lines
        .iter()
        .map(|l| {
            let mut w: Vec<String> = l.split(' ').map(str::to_string).collect();
            w.sort();
            w
        })
        .collect()
}

#[test]
fn setuser_getuser_list_and_errors_match_redis() {
    let s = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    let (mut a, mut b) = (s.conn(), o.conn());
    let script: &[&[&str]] = &[
        &[
            "ACL", "SETUSER", "alice", "on", ">p1", "~app:*", "+@read", "+@write",
        ],
        &[
            "ACL",
            "SETUSER",
            "bob",
            "on",
            "#5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8",
            "%R~r:*",
            "%W~w:*",
            "&news.*",
            "-@all",
            "+@string",
        ],
        &[
            "ACL",
            "SETUSER",
            "carol",
            "reset",
            "+@all",
            "-@dangerous",
            "~*",
            "(~x:* +get)",
            "(%R~y:* +@hash)",
        ],
        &[
            "ACL",
            "SETUSER",
            "dave",
            "nopass",
            "on",
            "+@all",
            "-debug",
            "+debug|digest",
            "-config",
            "+config|get",
        ],
        &["ACL", "SETUSER", "erin", "+select|0", "-@all", "+select|0"],
        &["ACL", "GETUSER", "alice"],
        &["ACL", "GETUSER", "bob"],
        &["ACL", "GETUSER", "carol"],
        &["ACL", "GETUSER", "nobody"],
        &["ACL", "USERS"],
        &["ACL", "SETUSER", "x", "+nosuchcommand"],
        &["ACL", "SETUSER", "x", "+@nosuchcategory"],
        &["ACL", "SETUSER", "x", "~*", "~foo"],
        &["ACL", "SETUSER", "x", "&*", "&foo"],
        &["ACL", "SETUSER", "x", "#abc"],
        &["ACL", "SETUSER", "x", "<nosuchpass"],
        &["ACL", "SETUSER", "x", "%~"],
        &["ACL", "SETUSER", "x", "+config|get|x"],
        &["ACL", "SETUSER", "x", "(~x +get"],
        &["ACL", "SETUSER", "x", "bogus"],
        &["ACL", "SETUSER", "bad name"],
        &["ACL", "DELUSER", "default"],
        &["ACL", "DRYRUN", "alice", "get", "app:1"],
        &["ACL", "DRYRUN", "alice", "get", "other"],
        &["ACL", "DRYRUN", "alice", "info"],
        &["ACL", "DRYRUN", "bob", "set", "r:1", "v"],
        &["ACL", "DRYRUN", "bob", "get", "r:1"],
        &["ACL", "DRYRUN", "bob", "publish", "sports", "m"],
        &["ACL", "DRYRUN", "carol", "get", "x:1"],
        &["ACL", "DRYRUN", "carol", "flushall"],
        &["ACL", "DRYRUN", "dave", "config", "set", "a", "b"],
        &["ACL", "DRYRUN", "dave", "config", "get", "a"],
        &["ACL", "DRYRUN", "nobody", "get", "a"],
        &["ACL", "DRYRUN", "alice", "nosuch"],
        &["ACL", "DRYRUN", "alice", "get"],
        &["ACL", "CAT", "nosuch"],
        &["ACL", "GENPASS", "0"],
        &["ACL", "LOG", "RESET"],
        &["ACL", "DELUSER", "alice", "nobody"],
        &["AUTH", "nobody", "x"],
        &["AUTH", "x"],
        &["ACL", "WHOAMI"],
    ];
    for args in script {
        assert_eq!(run(&mut a, args), run(&mut b, args), "{args:?}");
    }
    let list = |c: &mut redis::Connection| sorted_lines(cmd::<Vec<String>>(c, &["ACL", "LIST"]));
    assert_eq!(list(&mut a), list(&mut b));
    let cat = |c: &mut redis::Connection| cmd::<Vec<String>>(c, &["ACL", "CAT"]);
    assert_eq!(cat(&mut a), cat(&mut b));
}

#[test]
fn restricted_users_are_checked_on_every_path() {
    let s = Server::start(&[]);
    let mut admin = s.conn();
    cmd::<String>(
        &mut admin,
        &[
            "ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@read", "+@write", "+multi", "+exec",
            "+eval",
        ],
    );
    let mut c = conn_as(s.port, "app", "pw");
    cmd::<String>(&mut c, &["SET", "app:1", "v"]);
    assert_eq!(cmd::<String>(&mut c, &["GET", "app:1"]), "v");
    assert_eq!(
        cmd_err(&mut c, &["GET", "other"]),
        "NOPERM this user has no permissions to access one of the keys used as arguments"
    );
    assert_eq!(
        cmd_err(&mut c, &["INFO"]),
        "NOPERM this user has no permissions to run the 'info' command"
    );
    // In a transaction: refused at queueing, the EXEC aborts.
    let mut r = s.raw();
    raw_cmd(&mut r, &["AUTH", "app", "pw"]);
    assert_eq!(raw_cmd(&mut r, &["MULTI"]), "+OK");
    assert!(raw_cmd(&mut r, &["DEL", "x"]).starts_with("-NOPERM"));
    assert!(raw_cmd(&mut r, &["EXEC"]).starts_with("-EXECABORT"));
    // Rules changed between queueing and EXEC.
    assert_eq!(raw_cmd(&mut r, &["MULTI"]), "+OK");
    assert_eq!(raw_cmd(&mut r, &["SET", "app:2", "v"]), "+QUEUED");
    cmd::<String>(&mut admin, &["ACL", "SETUSER", "app", "-set"]);
    let exec = raw_cmd(&mut r, &["EXEC"]);
    assert!(exec.contains("NOPERM ACLs rules changed"), "{exec}");
    // In a script.
    let e = cmd_err(&mut c, &["EVAL", "return redis.call('get','other')", "0"]);
    assert!(
        e.contains("The user executing the script can't access at least one of the keys"),
        "{e}"
    );
    let log: Vec<redis::Value> = cmd(&mut admin, &["ACL", "LOG"]);
    let text = format!("{log:?}");
    for want in ["lua", "multi", "toplevel", "info", "other"] {
        assert!(text.contains(want), "{want} in {text}");
    }
    // Deleting the user closes its connections.
    cmd::<i64>(&mut admin, &["ACL", "DELUSER", "app"]);
    assert!(redis::cmd("PING").query::<String>(&mut c).is_err());
}

#[test]
fn read_and_write_key_patterns_and_channels() {
    let s = Server::start(&[]);
    let mut admin = s.conn();
    cmd::<String>(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "rw",
            "on",
            "nopass",
            "+@all",
            "%R~src:*",
            "%W~dst:*",
            "resetchannels",
            "&chat.*",
        ],
    );
    cmd::<String>(&mut admin, &["SET", "src:1", "v"]);
    let mut c = conn_as(s.port, "rw", "any");
    assert_eq!(cmd::<String>(&mut c, &["GET", "src:1"]), "v");
    assert!(cmd_err(&mut c, &["SET", "src:1", "w"]).starts_with("NOPERM"));
    assert!(cmd_err(&mut c, &["GET", "dst:1"]).starts_with("NOPERM"));
    assert_eq!(cmd::<String>(&mut c, &["COPY", "src:1", "dst:1"]), "1");
    assert_eq!(cmd::<i64>(&mut c, &["PUBLISH", "chat.a", "m"]), 0);
    assert_eq!(
        cmd_err(&mut c, &["PUBLISH", "news", "m"]),
        "NOPERM this user has no permissions to access one of the channels used as arguments"
    );
}

#[test]
fn requirepass_is_the_default_users_password() {
    let s = Server::start(&["--requirepass", "sesame"]);
    let mut r = s.raw();
    assert!(raw_cmd(&mut r, &["GET", "a"]).starts_with("-NOAUTH"));
    assert!(raw_cmd(&mut r, &["AUTH", "wrong"]).starts_with("-WRONGPASS"));
    assert_eq!(raw_cmd(&mut r, &["AUTH", "default", "sesame"]), "+OK");
    let list = raw_cmd(&mut r, &["ACL", "LIST"]);
    // sha256("sesame")
    let hash = "d0c04f4b1951e4aeaaec8223ed2039e542f3aae805a6fa7f6d794e5afff5d272";
    assert!(
        list.contains(&format!("user default on #{hash} ~* &* +@all")),
        "{list}"
    );
    assert_eq!(
        raw_cmd(&mut r, &["CONFIG", "SET", "requirepass", ""]),
        "+OK"
    );
    assert!(raw_cmd(&mut r, &["ACL", "LIST"]).contains("user default on nopass ~* &* +@all"));
    // HELLO AUTH with a user.
    raw_cmd(&mut r, &["ACL", "SETUSER", "u", "on", ">p", "+@all", "~*"]);
    let mut r2 = s.raw();
    assert!(raw_cmd(&mut r2, &["HELLO", "3", "AUTH", "u", "bad"]).starts_with("-WRONGPASS"));
    assert!(raw_cmd(&mut r2, &["HELLO", "3", "AUTH", "u", "p"]).starts_with("%7"));
    assert_eq!(raw_cmd(&mut r2, &["ACL", "WHOAMI"]), "u");
    // CLIENT KILL USER.
    assert_eq!(raw_cmd(&mut r, &["CLIENT", "KILL", "USER", "u"]), ":1");
    assert!(raw_cmd(&mut r, &["CLIENT", "KILL", "USER", "nobody"]).contains("No such user"));
}

#[test]
fn unauthenticated_clients_are_held_to_small_limits() {
    let s = Server::start(&["--requirepass", "x"]);
    let mut r = s.raw();
    r.send(b"*100\r\n");
    assert!(r.line().contains("unauthenticated multibulk length"));
    let mut r = s.raw();
    r.send(b"*1\r\n$100000000\r\n");
    assert!(r.line().contains("unauthenticated bulk length"));
    // A client that only sends and never authenticates: closed once its
    // replies pass 1 KiB.
    let mut r = s.raw();
    let many = "*1\r\n$4\r\nPING\r\n".repeat(200);
    r.send(many.as_bytes());
    let mut seen = 0;
    while r.line().starts_with("-NOAUTH") {
        seen += 1;
    }
    assert!(seen < 200, "{seen} replies");
    // Authenticated, the same pipeline is answered whole.
    let mut r = s.raw();
    raw_cmd(&mut r, &["AUTH", "x"]);
    r.send(many.as_bytes());
    for _ in 0..200 {
        assert_eq!(r.line(), "+PONG\r\n");
    }
}

#[test]
fn users_from_the_config_and_from_an_acl_file() {
    let s = Server::start(&[
        "--user",
        "alice",
        "on",
        ">a",
        "~*",
        "+@all",
        "--user",
        "default",
        "on",
        "nopass",
        "~*",
        "+@all",
        "-flushall",
    ]);
    let mut c = s.conn();
    assert!(cmd_err(&mut c, &["FLUSHALL"]).starts_with("NOPERM"));
    let mut a = conn_as(s.port, "alice", "a");
    assert_eq!(cmd::<String>(&mut a, &["ACL", "WHOAMI"]), "alice");
    drop(s);

    let dir = tempdir("aclfile");
    let file = dir.join("users.acl");
    std::fs::write(
        &file,
        "user default on nopass ~* &* +@all\nuser bob on >b ~b:* +get\n",
    )
    .unwrap();
    let s = Server::start(&["--aclfile", file.to_str().unwrap()]);
    let mut c = s.conn();
    let mut b = conn_as(s.port, "bob", "b");
    assert!(cmd_err(&mut b, &["SET", "b:1", "v"]).starts_with("NOPERM"));
    cmd::<String>(&mut c, &["ACL", "SETUSER", "carol", "on", ">c", "+ping"]);
    assert_eq!(cmd::<String>(&mut c, &["ACL", "SAVE"]), "OK");
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains("user carol on #"), "{saved}");
    std::fs::write(
        &file,
        "user default on nopass ~* &* +@all\nuser dan on nopass +get ~*\n",
    )
    .unwrap();
    assert_eq!(cmd::<String>(&mut c, &["ACL", "LOAD"]), "OK");
    assert_eq!(
        cmd::<Vec<String>>(&mut c, &["ACL", "USERS"]),
        ["dan", "default"]
    );
    // bob was replaced: his connection is closed.
    assert!(redis::cmd("PING").query::<String>(&mut b).is_err());
    std::fs::write(
        &file,
        "user default on nopass ~* &* +@all\nuser eve on +nosuch\n",
    )
    .unwrap();
    let e = cmd_err(&mut c, &["ACL", "LOAD"]);
    assert!(
        e.contains("users.acl:2: Error in ACL SETUSER modifier '+nosuch'"),
        "{e}"
    );
    drop(s);

    // A corrupt file stops start-up, naming the line.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lattice-server"))
        .args([
            "--port",
            &common::free_port().to_string(),
            "--aclfile",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(text.contains("users.acl:2:"), "{text}");
    // Users in both places are refused, as Redis does.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lattice-server"))
        .args([
            "--port",
            &common::free_port().to_string(),
            "--aclfile",
            file.to_str().unwrap(),
            "--user",
            "x",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn config_rewrite_writes_the_current_users() {
    let dir = tempdir("acl-rewrite");
    let conf = dir.join("redis.conf");
    std::fs::write(&conf, "# users\nuser alice on >a ~* +@all\nhz 10\n").unwrap();
    let s = Server::start_with(Some(conf.to_str().unwrap()), &[]);
    let mut c = s.conn();
    cmd::<String>(&mut c, &["ACL", "SETUSER", "bob", "on", "nopass", "+ping"]);
    cmd::<i64>(&mut c, &["ACL", "DELUSER", "alice"]);
    assert_eq!(cmd::<String>(&mut c, &["CONFIG", "REWRITE"]), "OK");
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(!text.contains("user alice"), "{text}");
    assert!(
        text.contains("user bob on nopass resetchannels -@all +ping\n"),
        "{text}"
    );
    assert!(
        text.contains("user default on nopass ~* &* +@all\n"),
        "{text}"
    );
    assert!(text.starts_with("# users\nuser bob"), "{text}");
    drop(s);
    // The rewritten file starts a server with the same users (without the
    // first server's `dir`, which is gone with it).
    let text: Vec<&str> = text.lines().filter(|l| !l.starts_with("dir ")).collect();
    std::fs::write(&conf, text.join("\n")).unwrap();
    let s = Server::start_with(Some(conf.to_str().unwrap()), &[]);
    let mut b = conn_as(s.port, "bob", "x");
    assert_eq!(cmd::<String>(&mut b, &["PING"]), "PONG");
}

/// A raw connection to `port` (either server).
fn raw_at(port: u16) -> common::Raw {
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    common::Raw {
        r: std::io::BufReader::new(s.try_clone().unwrap()),
        w: s,
    }
}

/// What SLOWLOG and MONITOR show of passwords and ACL rules, on one server.
fn redactions(port: u16) -> (Vec<Vec<String>>, Vec<String>) {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut mon = raw_at(port);
    assert_eq!(raw_cmd(&mut mon, &["MONITOR"]), "+OK");
    let _: () = cmd(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    let _: () = cmd(&mut c, &["SLOWLOG", "RESET"]);
    let sent: &[&[&str]] = &[
        &["ACL", "SETUSER", "slowlog test user", "+get", "+set"],
        &["ACL", "SETUSER", "bob", ">pw", "+get"],
        &["CONFIG", "SET", "masterauth", "", "maxmemory-samples", "5"],
        &["CONFIG", "SET", "requirepass", ""],
        &[
            "MIGRATE",
            "127.0.0.1",
            "1",
            "nokey",
            "9",
            "5000",
            "AUTH",
            "pw",
        ],
        &[
            "MIGRATE",
            "127.0.0.1",
            "1",
            "nokey",
            "9",
            "5000",
            "COPY",
            "AUTH2",
            "u",
            "pw",
        ],
        &["AUTH", "not-real"],
        &["AUTH", "not-real", "not-a-password"],
        &[
            "HELLO",
            "2",
            "SETNAME",
            "x",
            "AUTH",
            "not-real",
            "not-a-password",
        ],
        &["AUTH", "a", "b", "c"],
    ];
    for args in sent {
        let _ = run(&mut c, args);
    }
    let _: () = cmd(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "-1"]);
    let log: Vec<redis::Value> = cmd(&mut c, &["SLOWLOG", "GET", "20"]);
    let mut slow: Vec<Vec<String>> = log
        .into_iter()
        .map(|e| match e {
            redis::Value::Array(f) => redis::from_redis_value(&f[3]).unwrap(),
            v => panic!("{v:?}"),
        })
        .collect();
    slow.reverse();
    // MONITOR: the non-admin commands (MIGRATE, AUTH, HELLO), without time
    // and address.
    let monitored = (0..6)
        .map(|_| mon.line().split_once("] ").unwrap().1.trim().to_string())
        .collect();
    (slow, monitored)
}

#[test]
fn slowlog_and_monitor_redact_passwords_and_acl_rules_as_redis() {
    let s = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    let ours = redactions(s.port);
    assert_eq!(ours, redactions(o.port));
    assert!(ours.0.contains(&vec![
        "ACL".into(),
        "SETUSER".into(),
        "(redacted)".into(),
        "(redacted)".into(),
        "(redacted)".into()
    ]));
    let hello = r#""HELLO" "2" "SETNAME" "x" "AUTH" "(redacted)" "(redacted)""#;
    assert!(ours.1.iter().any(|l| l == hello), "{:?}", ours.1);
    let auth2 = ["AUTH2", "(redacted)", "(redacted)"].map(String::from);
    assert!(ours.0.iter().any(|l| l.ends_with(&auth2)), "{:?}", ours.0);
}

#[test]
fn a_scripts_acl_check_cmd_answers_for_its_caller() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(
        &mut c,
        &[
            "ACL",
            "SETUSER",
            "bob",
            "on",
            ">123",
            "+@scripting",
            "+set",
            "~x*",
        ],
    );
    let mut bob = conn_as(s.port, "bob", "123");
    let _: () = cmd(&mut c, &["ACL", "LOG", "RESET"]); // the client's own CLIENT SETINFO
    let eval = |c: &mut redis::Connection, body: &str, keys: &[&str]| {
        let n = keys.len().to_string();
        let mut args = vec!["EVAL", body, &n];
        args.extend(keys);
        run(c, &args)
    };
    let yes = "int(1)";
    let no = "nil";
    assert_eq!(
        eval(
            &mut bob,
            "return redis.acl_check_cmd('set','xx',1)",
            &["xx"]
        ),
        yes
    );
    assert_eq!(
        eval(
            &mut bob,
            "return redis.acl_check_cmd('hset','xx','f',1)",
            &["xx"]
        ),
        no
    );
    assert_eq!(
        eval(&mut bob, "return redis.acl_check_cmd('set','yy',1)", &[]),
        no
    );
    let err = eval(&mut bob, "return redis.acl_check_cmd('nosuch','a')", &[]);
    assert!(
        err.contains("Invalid command passed to redis.acl_check_cmd()"),
        "{err}"
    );
    // The default user may run everything; no ACL LOG entry either way.
    assert_eq!(
        eval(
            &mut c,
            "return redis.acl_check_cmd('hset','xx','f',1)",
            &["xx"]
        ),
        yes
    );
    let log: Vec<redis::Value> = cmd(&mut c, &["ACL", "LOG"]);
    assert!(log.is_empty(), "{log:?}");
}

/// A connection authenticated as `user` that ran `SUBSCRIBE`/`PSUBSCRIBE`
/// of `names` and read their confirmations.
fn subscriber(port: u16, user: &str, verb: &str, names: &[&str]) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let mut t = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    t.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let resp = |words: &[&str]| {
        let mut s = format!("*{}\r\n", words.len());
        for w in words {
            s += &format!("${}\r\n{w}\r\n", w.len());
        }
        s
    };
    let mut req = resp(&["AUTH", user, "p"]);
    req += &resp(&[&[verb][..], names].concat());
    t.write_all(req.as_bytes()).unwrap();
    let confirm = format!("{}\r\n", verb.to_lowercase());
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got
        .windows(confirm.len())
        .filter(|w| *w == confirm.as_bytes())
        .count()
        < names.len()
    {
        let n = t.read(&mut buf).unwrap();
        assert!(n > 0, "closed while subscribing");
        got.extend_from_slice(&buf[..n]);
    }
    t
}

/// Whether a subscriber is still connected: it gets the message
/// published after the change (a closed one reads end of stream).
fn still_subscribed(t: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    match t.read(&mut buf) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => false,
        Err(e) => panic!("no message and no close: {e}"),
    }
}

/// ACL SETUSER that takes channels away closes the user's subscribers
/// that hold one of them, and only those (Redis 7.0's
/// ACLKillPubsubClientsIfNeeded), checked side by side with redis-server.
#[test]
fn taking_channels_away_closes_only_the_subscribers_that_lose_one() {
    let s = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    let mut outcomes = Vec::new();
    for (port, mut admin) in [(s.port, s.conn()), (o.port, o.conn())] {
        let setup = ["ACL", "SETUSER", "sub", "on", ">p", "+@all", "~*"];
        let setup: Vec<&str> = setup.into_iter().chain(["&news", "&sports*"]).collect();
        assert_eq!(run(&mut admin, &setup), "ok");
        let mut subs = [
            subscriber(port, "sub", "SUBSCRIBE", &["news"]),
            subscriber(port, "sub", "PSUBSCRIBE", &["sports*"]),
            subscriber(port, "sub", "SUBSCRIBE", &["news", "sports1"]),
        ];
        let change = ["ACL", "SETUSER", "sub", "resetchannels", "&news"];
        assert_eq!(run(&mut admin, &change), "ok");
        run(&mut admin, &["PUBLISH", "news", "x"]);
        run(&mut admin, &["PUBLISH", "sports1", "x"]);
        outcomes.push(subs.iter_mut().map(still_subscribed).collect::<Vec<_>>());
    }
    assert_eq!(outcomes[0], vec![true, false, false]);
    assert_eq!(
        outcomes[0], outcomes[1],
        "lattice-server against redis-server"
    );
}

/// Dispatch decides a restricted user's common commands by a quick test
/// (`FastPath` in core/acl/user.rs: prefix and exact key patterns, one- and
/// many-key commands) before the general check: both must answer as
/// redis-server does, for patterns it takes and those it leaves to the
/// general check (globs, read- or write-only patterns, selectors, no
/// channels), side by side with redis-server 7.0.
#[test]
fn the_quick_acl_check_answers_as_redis_for_every_kind_of_pattern() {
    let users: &[&[&str]] = &[
        &["+@all", "~app:*"],
        &["+@all", "~averylongprefix:*"],
        &["+@all", "~exact", "~k?y", "~app:*"],
        &["+@all", "%R~r:*", "~w:*"],
        &["+@all", "~app:*", "(~other:* +get)"],
        &["+@read", "~app:*"],
        &["+@all", "-get", "~*"],
        &["+@all", "~app:*", "resetchannels", "&ch"],
        &["+@all", "~*app"],
    ];
    let lines: &[&[&str]] = &[
        &["GET", "app:1"],
        &["GET", "app:"],
        &["GET", "app"],
        &["GET", "ap"],
        &["GET", "app:with-a-long-tail"],
        &["GET", "xapp:1"],
        &["GET", "averylongprefix:1"],
        &["GET", "averylongprefix"],
        &["GET", "exact"],
        &["GET", "exact2"],
        &["GET", "key"],
        &["GET", "other:1"],
        &["GET", "r:1"],
        &["GET", "w:1"],
        &["SET", "app:1", "v"],
        &["SET", "other:1", "v"],
        &["SET", "r:1", "v"],
        &["SET", "w:1", "v"],
        &["MSET", "app:1", "a", "app:2", "b"],
        &["MSET", "app:1", "a", "other:1", "b"],
        &["MGET", "app:1", "app:2"],
        &["MGET", "app:1", "other:1"],
        &["DEL", "app:9", "other:9"],
        &["EXISTS", "app:1", "app:2"],
        &["XREAD", "STREAMS", "app:s", "0"],
        &["EVAL", "return 1", "1", "other:1"],
        &["OBJECT", "ENCODING", "app:1"],
        &["PUBLISH", "ch", "m"],
        &["PUBLISH", "news", "m"],
        &["PING"],
    ];
    let s = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    let verdict = |c: &mut redis::Connection, line: &[&str]| {
        let r = run(c, line);
        match r.contains("NOPERM") {
            true => r,
            false => "allowed".to_string(),
        }
    };
    for (i, rules) in users.iter().enumerate() {
        let name = format!("u{i}");
        for port in [s.port, o.port] {
            let mut admin = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .unwrap()
                .get_connection()
                .unwrap();
            let mut setuser = vec!["ACL", "SETUSER", &name, "on", ">pw"];
            setuser.extend_from_slice(rules);
            cmd::<String>(&mut admin, &setuser);
        }
        let (mut ours, mut theirs) = (conn_as(s.port, &name, "pw"), conn_as(o.port, &name, "pw"));
        for line in lines {
            assert_eq!(
                verdict(&mut ours, line),
                verdict(&mut theirs, line),
                "{rules:?} {line:?}"
            );
        }
    }
}
