//! Server and introspection commands through the real binary: INFO, COMMAND,
//! CLIENT, MONITOR, SLOWLOG, DEBUG, MEMORY, SHUTDOWN, and the connection
//! directives maxclients, timeout, tcp-keepalive and unixsocket.
mod common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

use redis::Value;

fn info(c: &mut redis::Connection, args: &[&str]) -> String {
    let mut all = vec!["INFO"];
    all.extend_from_slice(args);
    cmd::<String>(c, &all)
}

/// The `field:value` pairs of an INFO text.
fn info_field(text: &str, field: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim_end().to_string())
}

#[test]
fn info_is_parseable_and_reports_the_dataset() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["SET", "a", "1"]);
    let _: () = cmd(&mut c, &["SET", "b", "2", "EX", "100"]);
    let _ = cmd_err(&mut c, &["NOSUCHCOMMAND"]);
    for args in [&[][..], &["all"], &["everything"], &["default"]] {
        let text = info(&mut c, args);
        assert!(text.contains("\r\n"), "INFO lines end with CRLF");
        for line in text.split("\r\n") {
            assert!(
                line.is_empty() || line.starts_with("# ") || line.contains(':'),
                "unparseable INFO line {line:?}"
            );
        }
    }
    let text = info(&mut c, &["everything"]);
    assert_eq!(info_field(&text, "redis_version").unwrap(), "7.0.15");
    assert!(info_field(&text, "lattice_version").is_some());
    assert_eq!(info_field(&text, "role").unwrap(), "master");
    assert_eq!(info_field(&text, "loading").unwrap(), "0");
    assert_eq!(info_field(&text, "connected_slaves").unwrap(), "0");
    assert!(
        info_field(&text, "connected_clients")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert!(
        info_field(&text, "used_memory")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert!(
        info_field(&text, "rdb_changes_since_last_save")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 2
    );
    assert!(info_field(&text, "used_cpu_user")
        .unwrap()
        .parse::<f64>()
        .is_ok());
    // b's TTL of 100 s, in ms, less the time since its SET.
    let db0 = info_field(&text, "db0").unwrap();
    let avg_ttl: u64 = db0
        .strip_prefix("keys=2,expires=1,avg_ttl=")
        .unwrap()
        .parse()
        .unwrap();
    assert!((90_000..=100_000).contains(&avg_ttl), "{db0}");
    let set = info_field(&text, "cmdstat_set").unwrap();
    assert!(set.starts_with("calls=2,usec="), "{set}");
    assert!(set.contains(",usec_per_call=") && set.ends_with(",rejected_calls=0,failed_calls=0"));
    assert!(info_field(&text, "errorstat_ERR")
        .unwrap()
        .starts_with("count="));

    // Only the sections asked for, in Redis's order; unknown ones are empty.
    let two = info(&mut c, &["keyspace", "SERVER"]);
    let headers: Vec<&str> = two.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(headers, ["# Server", "# Keyspace"]);
    assert_eq!(info(&mut c, &["nosuch"]), "");
    let default = info(&mut c, &[]);
    assert!(!default.contains("# Commandstats") && default.contains("# Errorstats"));
}

#[test]
fn command_table_introspection() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let count: i64 = cmd(&mut c, &["COMMAND", "COUNT"]);
    let all: Vec<Value> = cmd(&mut c, &["COMMAND"]);
    assert_eq!(all.len() as i64, count);
    let list: Vec<String> = cmd(&mut c, &["COMMAND", "LIST"]);
    assert!(list.contains(&"get".to_string()) && list.contains(&"client|list".to_string()));

    let info: Vec<Value> = cmd(&mut c, &["COMMAND", "INFO", "get", "nosuch"]);
    assert_eq!(info[1], Value::Nil);
    let Value::Array(get) = &info[0] else {
        panic!("{info:?}")
    };
    assert_eq!(get.len(), 10);
    assert_eq!(get[0], Value::BulkString(b"get".to_vec()));
    assert_eq!(get[1], Value::Int(2));
    assert_eq!(&get[3..6], &[Value::Int(1), Value::Int(1), Value::Int(1)]);
    let cats: Vec<String> = redis::from_redis_value(&get[6]).unwrap();
    assert_eq!(cats, ["@read", "@string", "@fast"]);

    let keys: Vec<String> = cmd(&mut c, &["COMMAND", "GETKEYS", "SET", "k1", "v"]);
    assert_eq!(keys, ["k1"]);
    assert_eq!(
        cmd_err(&mut c, &["COMMAND", "GETKEYS", "NOSUCH", "x"]),
        "ERR Invalid command specified"
    );
    assert_eq!(
        cmd_err(&mut c, &["COMMAND", "GETKEYS", "PING", "x"]),
        "ERR The command has no key arguments"
    );
    assert_eq!(
        cmd_err(&mut c, &["COMMAND", "GETKEYS", "GET", "a", "b"]),
        "ERR Invalid number of arguments specified for command"
    );
    assert_eq!(
        cmd_err(&mut c, &["COMMAND", "FOO"]),
        "ERR unknown subcommand 'FOO'. Try COMMAND HELP."
    );
    let pat: Vec<String> = cmd(
        &mut c,
        &["COMMAND", "LIST", "FILTERBY", "PATTERN", "client|*"],
    );
    assert!(pat.contains(&"client|kill".to_string()) && !pat.contains(&"get".to_string()));
    let docs: Value = cmd(&mut c, &["COMMAND", "DOCS", "get"]);
    let Value::Array(d) = docs else { panic!() };
    assert_eq!(d[0], Value::BulkString(b"get".to_vec()));
}

/// One key spec of COMMAND INFO as (flags, begin_search, find_keys) text.
fn spec_text(spec: &Value) -> String {
    let v: Vec<Value> = redis::from_redis_value(spec).unwrap();
    let mut out = vec![];
    for pair in v.chunks(2) {
        let name: String = redis::from_redis_value(&pair[0]).unwrap();
        if name == "notes" {
            continue;
        }
        out.push(format!("{name}={}", flat(&pair[1])));
    }
    out.join(" ")
}

fn flat(v: &Value) -> String {
    match v {
        Value::Array(a) | Value::Set(a) => a.iter().map(flat).collect::<Vec<_>>().join(","),
        Value::Map(m) => m
            .iter()
            .map(|(k, v)| format!("{}:{}", flat(k), flat(v)))
            .collect::<Vec<_>>()
            .join(","),
        Value::BulkString(b) => String::from_utf8_lossy(b).into(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

#[test]
fn key_specs_tips_and_key_flags() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let info: Vec<Vec<Value>> = cmd(
        &mut c,
        &["COMMAND", "INFO", "lmove", "zunionstore", "dbsize"],
    );
    let specs = |i: usize| -> Vec<String> {
        let v: Vec<Value> = redis::from_redis_value(&info[i][8]).unwrap();
        v.iter().map(spec_text).collect()
    };
    assert_eq!(
        specs(0),
        [
            "flags=RW,access,delete begin_search=type,index,spec,index,1 \
             find_keys=type,range,spec,lastkey,0,keystep,1,limit,0",
            "flags=RW,insert begin_search=type,index,spec,index,2 \
             find_keys=type,range,spec,lastkey,0,keystep,1,limit,0",
        ]
    );
    assert_eq!(
        specs(1)[1],
        "flags=RO,access begin_search=type,index,spec,index,2 \
         find_keys=type,keynum,spec,keynumidx,0,firstkey,1,keystep,1"
    );
    assert_eq!(
        flat(&info[2][7]),
        "request_policy:all_shards,response_policy:agg_sum"
    );

    // Flags per key, including commands whose flags depend on arguments.
    for (line, want) in [
        ("SET k v", "k,OW,update"),
        ("SET k v GET", "k,RW,access,update"),
        ("SORT src BY w_* STORE dst", "src,RO,access,dst,OW,update"),
        ("ZUNIONSTORE d 2 a b", "d,OW,update,a,RO,access,b,RO,access"),
        ("BITFIELD k GET u8 0", "k,RO,access"),
    ] {
        let mut argv = vec!["COMMAND", "GETKEYSANDFLAGS"];
        argv.extend(line.split(' '));
        let got: Value = cmd(&mut c, &argv);
        assert_eq!(flat(&got), want, "{line}");
    }
}

#[test]
fn client_setname_list_kill() {
    let s = Server::start(&[]);
    let mut a = s.conn();
    let mut b = s.conn();
    let _: () = cmd(&mut b, &["CLIENT", "SETNAME", "victim"]);
    assert_eq!(cmd::<String>(&mut b, &["CLIENT", "GETNAME"]), "victim");
    assert_eq!(
        cmd_err(&mut b, &["CLIENT", "SETNAME", "a b"]),
        "ERR Client names cannot contain spaces, newlines or special characters."
    );
    let b_id: i64 = cmd(&mut b, &["CLIENT", "ID"]);
    let list: String = cmd(&mut a, &["CLIENT", "LIST"]);
    let line = list
        .lines()
        .find(|l| l.contains("name=victim"))
        .expect("victim listed");
    assert!(
        line.starts_with(&format!("id={b_id} addr=127.0.0.1:")),
        "{line}"
    );
    for field in [
        " laddr=",
        " fd=",
        " age=",
        " idle=",
        " flags=N ",
        " db=0 ",
        " cmd=client|id ",
        " resp=2",
        " lib-name=",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    let me: String = cmd(&mut a, &["CLIENT", "INFO"]);
    assert!(me.contains(" cmd=client|info "), "{me}");
    let only: String = cmd(&mut a, &["CLIENT", "LIST", "ID", &b_id.to_string()]);
    assert_eq!(only.lines().count(), 1);

    let killed: i64 = cmd(&mut a, &["CLIENT", "KILL", "ID", &b_id.to_string()]);
    assert_eq!(killed, 1);
    // Gone from CLIENT LIST as soon as KILL has replied, as in Redis.
    let gone: String = cmd(&mut a, &["CLIENT", "LIST", "ID", &b_id.to_string()]);
    assert_eq!(gone, "");
    assert!(redis::cmd("PING").query::<String>(&mut b).is_err());
    assert_eq!(
        cmd_err(&mut a, &["CLIENT", "KILL", "1.2.3.4:5"]),
        "ERR No such client"
    );
    assert_eq!(
        cmd_err(&mut a, &["CLIENT", "KILL", "ID", "abc"]),
        "ERR client-id should be greater than 0"
    );
    // SKIPME defaults to yes: killing our own address by filter spares us.
    let mut r = s.raw();
    r.send(b"CLIENT INFO\r\n");
    let _len = r.line();
    let info = r.line();
    assert_eq!(r.line(), "\r\n");
    let addr = info
        .split(' ')
        .nth(1)
        .unwrap()
        .trim_start_matches("addr=")
        .to_string();
    r.send(format!("CLIENT KILL ADDR {addr}\r\n").as_bytes());
    assert_eq!(r.line(), ":0\r\n");
    r.send(format!("CLIENT KILL {addr}\r\n").as_bytes());
    assert_eq!(r.line(), "+OK\r\n");
    assert!(r.closed());
}

#[test]
fn client_reply_modes() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    r.send(b"CLIENT REPLY SKIP\r\nPING a\r\nPING b\r\nCLIENT REPLY OFF\r\nPING c\r\nCLIENT REPLY ON\r\nPING d\r\n");
    assert_eq!(r.line(), "$1\r\n");
    assert_eq!(r.line(), "b\r\n");
    assert_eq!(r.line(), "+OK\r\n");
    assert_eq!(r.line(), "$1\r\n");
    assert_eq!(r.line(), "d\r\n");
}

#[test]
fn monitor_receives_commands() {
    let s = Server::start(&[]);
    let mut m = s.raw();
    m.send(b"MONITOR\r\n");
    assert_eq!(m.line(), "+OK\r\n");
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["SET", "mk", "hello world"]);
    // The client library's own handshake (CLIENT SETINFO) is fed too.
    let mut line = m.line();
    while !line.contains("\"mk\"") {
        assert!(line.starts_with('+'), "{line}");
        line = m.line();
    }
    assert!(line.contains(" [0 127.0.0.1:"), "{line}");
    assert!(
        line.ends_with("\"SET\" \"mk\" \"hello world\"\r\n"),
        "{line}"
    );
}

#[test]
fn slowlog_records_commands() {
    let s = Server::start(&["--slowlog-log-slower-than", "0"]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["CLIENT", "SETNAME", "slowpoke"]);
    let _: () = cmd(&mut c, &["SET", "sk", "sv"]);
    let entries: Vec<Value> = cmd(&mut c, &["SLOWLOG", "GET", "1"]);
    assert_eq!(entries.len(), 1);
    let Value::Array(e) = &entries[0] else {
        panic!("{entries:?}")
    };
    assert_eq!(e.len(), 6);
    assert!(matches!(e[0], Value::Int(_)) && matches!(e[1], Value::Int(_)));
    let argv: Vec<String> = redis::from_redis_value(&e[3]).unwrap();
    assert_eq!(argv, ["SET", "sk", "sv"]);
    let addr: String = redis::from_redis_value(&e[4]).unwrap();
    assert!(addr.starts_with("127.0.0.1:"));
    assert_eq!(
        redis::from_redis_value::<String>(&e[5]).unwrap(),
        "slowpoke"
    );
    assert!(cmd::<i64>(&mut c, &["SLOWLOG", "LEN"]) >= 2);
    let _: () = cmd(&mut c, &["SLOWLOG", "RESET"]);
    assert!(cmd::<i64>(&mut c, &["SLOWLOG", "LEN"]) <= 1);
    assert_eq!(
        cmd_err(&mut c, &["SLOWLOG", "GET", "-2"]),
        "ERR count should be greater than or equal to -1"
    );
}

#[test]
fn client_pause_holds_writes_until_unpause() {
    let s = Server::start(&[]);
    let mut admin = s.conn();
    let _: () = cmd(&mut admin, &["CLIENT", "PAUSE", "20000", "WRITE"]);
    let client = s.client();
    let writer = std::thread::spawn(move || {
        let mut w = client.get_connection().unwrap();
        cmd::<String>(&mut w, &["SET", "pk", "v"])
    });
    // The writer is held: a blocked client (as in Redis).
    eventually("the paused writer to block", || {
        common::info_field::<i64>(&mut admin, "blocked_clients") == 1
    });
    // Reads still run; the write is held.
    assert_eq!(cmd::<Option<String>>(&mut admin, &["GET", "pk"]), None);
    assert!(!writer.is_finished());
    let _: () = cmd(&mut admin, &["CLIENT", "UNPAUSE"]);
    assert_eq!(writer.join().unwrap(), "OK");
    assert_eq!(cmd::<String>(&mut admin, &["GET", "pk"]), "v");
    assert_eq!(
        cmd_err(&mut admin, &["CLIENT", "PAUSE", "10", "FOO"]),
        "ERR CLIENT PAUSE mode must be WRITE or ALL"
    );
}

#[test]
fn unixsocket_accepts_connections() {
    let path = std::env::temp_dir().join(format!("lattice-srv-{}.sock", std::process::id()));
    let p = path.to_str().unwrap().to_string();
    let s = Server::start(&["--unixsocket", &p]);
    let mut u = std::os::unix::net::UnixStream::connect(&path).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    u.write_all(b"PING\r\nCLIENT INFO\r\n").unwrap();
    let mut r = BufReader::new(u);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "+PONG\r\n");
    line.clear();
    r.read_line(&mut line).unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    assert!(line.contains(&format!(" addr={p}:0 laddr={p} ")), "{line}");
    drop(s);
}

#[test]
fn maxclients_rejects_extra_connections() {
    let s = Server::start(&["--maxclients", "2"]);
    // The server may count the start-up probe's connection until it sees
    // it closed: two clients get in once it has.
    let mut turned_away = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut a, _b) = loop {
        let (mut a, mut b) = (s.raw(), s.raw());
        a.send(b"PING\r\n");
        b.send(b"PING\r\n");
        let (la, lb) = (a.line(), b.line());
        if (la.as_str(), lb.as_str()) == ("+PONG\r\n", "+PONG\r\n") {
            break (a, b);
        }
        for l in [la, lb] {
            assert!(l == "+PONG\r\n" || l == "-ERR max number of clients reached\r\n");
            turned_away += usize::from(l != "+PONG\r\n");
        }
        assert!(Instant::now() < deadline, "two clients never got in");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut c = s.raw();
    assert_eq!(c.line(), "-ERR max number of clients reached\r\n");
    assert!(c.closed());
    let rejected = {
        a.send(b"INFO stats\r\n");
        let n: usize = a.line()[1..].trim().parse().unwrap();
        String::from_utf8(a.bytes(n + 2)).unwrap()
    };
    let want = (1 + turned_away).to_string();
    assert_eq!(info_field(&rejected, "rejected_connections").unwrap(), want);
}

#[test]
fn idle_clients_are_closed_after_timeout() {
    let s = Server::start(&["--timeout", "1"]);
    let mut idle = s.raw();
    idle.send(b"PING\r\n");
    assert_eq!(idle.line(), "+PONG\r\n");
    let start = Instant::now();
    assert!(idle.closed(), "idle client should be closed");
    // By the server's 1 s timeout, not at Raw's 30 s read timeout.
    assert!(start.elapsed() < Duration::from_secs(20));
    let mut fresh = s.conn();
    assert_eq!(cmd::<String>(&mut fresh, &["PING"]), "PONG");
}

/// The timer column of the server side of connections to `port` in
/// /proc/net/tcp: "02" means a keepalive timer is armed.
fn server_side_timers(port: u16) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let local = format!(":{port:04X}");
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 5 && f[1].ends_with(&local) && f[3] == "01").then(|| f[5][..2].to_string())
        })
        .collect()
}

#[test]
fn tcp_keepalive_arms_the_socket_timer() {
    let on = Server::start(&["--tcp-keepalive", "60"]);
    let mut r = on.raw();
    r.send(b"PING\r\n");
    assert_eq!(r.line(), "+PONG\r\n");
    assert!(server_side_timers(on.port).contains(&"02".to_string()));
    let off = Server::start(&["--tcp-keepalive", "0"]);
    let mut r = off.raw();
    r.send(b"PING\r\n");
    assert_eq!(r.line(), "+PONG\r\n");
    let timers = server_side_timers(off.port);
    assert!(
        !timers.is_empty() && !timers.contains(&"02".to_string()),
        "{timers:?}"
    );
}

#[test]
fn debug_memory_time_and_latency() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let zero = "0".repeat(40);
    assert_eq!(cmd::<String>(&mut c, &["DEBUG", "DIGEST"]), zero);
    let _: () = cmd(&mut c, &["SET", "foo", "bar"]);
    // Same algorithm as Redis: this is what Redis 7 answers for foo=bar.
    assert_eq!(
        cmd::<String>(&mut c, &["DEBUG", "DIGEST"]),
        "d2ab4820c1be0580ea28efbfe8bfa1dc05bb802a"
    );
    let dv: Vec<String> = cmd(&mut c, &["DEBUG", "DIGEST-VALUE", "foo", "nokey"]);
    assert_eq!(
        dv,
        ["68467c70ae30376e7ce005bcc8827f5ba7fd67dc", zero.as_str()]
    );
    let obj: String = cmd(&mut c, &["DEBUG", "OBJECT", "foo"]);
    assert!(obj.starts_with("Value at:0x"), "{obj}");
    assert!(
        obj.contains(" refcount:1 encoding:embstr serializedlength:4 lru:"),
        "{obj}"
    );
    assert!(obj.contains(" lru_seconds_idle:"), "{obj}");
    assert_eq!(
        cmd_err(&mut c, &["DEBUG", "OBJECT", "nokey"]),
        "ERR no such key"
    );
    assert_eq!(
        cmd_err(&mut c, &["DEBUG", "NOSUCH"]),
        "ERR unknown subcommand or wrong number of arguments for 'NOSUCH'. Try DEBUG HELP."
    );
    let _: () = cmd(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let _: () = cmd(&mut c, &["DEBUG", "SLEEP", "0"]);

    assert!(cmd::<i64>(&mut c, &["MEMORY", "USAGE", "foo"]) > 0);
    assert_eq!(
        cmd::<Option<i64>>(&mut c, &["MEMORY", "USAGE", "nokey"]),
        None
    );
    assert_eq!(
        cmd_err(&mut c, &["MEMORY", "USAGE", "foo", "BAR"]),
        "ERR syntax error"
    );
    let stats: Vec<Value> = cmd(&mut c, &["MEMORY", "STATS"]);
    assert_eq!(stats.len() % 2, 0);
    let _: () = cmd(&mut c, &["MEMORY", "PURGE"]);

    let t: Vec<String> = cmd(&mut c, &["TIME"]);
    let secs: u64 = t[0].parse().unwrap();
    assert!(secs > 1_600_000_000 && t[1].parse::<u32>().unwrap() < 1_000_000);
    assert!(cmd::<i64>(&mut c, &["LASTSAVE"]) > 1_600_000_000);
    assert_eq!(cmd::<Vec<Value>>(&mut c, &["LATENCY", "LATEST"]), vec![]);
    assert_eq!(cmd::<i64>(&mut c, &["LATENCY", "RESET"]), 0);
    let help: Vec<String> = cmd(&mut c, &["CLIENT", "HELP"]);
    assert!(help[0].starts_with("CLIENT <subcommand>"));
    assert_eq!(help.last().unwrap(), "    Prints this help.");
}

#[test]
fn shutdown_stops_the_server() {
    let mut s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(cmd_err(&mut c, &["SHUTDOWN", "FOO"]), "ERR syntax error");
    assert_eq!(
        cmd_err(&mut c, &["SHUTDOWN", "ABORT"]),
        "ERR No shutdown in progress."
    );
    let mut r = s.raw();
    r.send(b"SHUTDOWN NOSAVE\r\n");
    let mut buf = [0u8; 16];
    assert_eq!(
        r.r.read(&mut buf).unwrap_or(0),
        0,
        "no reply, connection closed"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = s.child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("server still running after SHUTDOWN");
}

#[test]
fn resp3_replies_and_kill_filters() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    r.send(b"HELLO 3\r\n");
    while r.line() != "*0\r\n" {}
    // INFO and CLIENT INFO are verbatim strings in RESP3.
    r.send(b"INFO cluster\r\n");
    assert_eq!(r.line(), "=34\r\n");
    assert_eq!(r.line(), "txt:# Cluster\r\n");
    assert_eq!(r.line(), "cluster_enabled:0\r\n");
    assert_eq!(r.line(), "\r\n");
    r.send(b"CLIENT INFO\r\n");
    assert!(r.line().starts_with('='));
    assert!(r.line().contains(" resp=3 "));
    assert_eq!(r.line(), "\r\n");

    // Subcommands are listed (and resolvable) as "parent|sub".
    let mut c = s.conn();
    let info: Vec<Value> = cmd(&mut c, &["COMMAND", "INFO", "client|kill"]);
    let Value::Array(kill) = &info[0] else {
        panic!("{info:?}")
    };
    assert_eq!(kill[0], Value::BulkString(b"client|kill".to_vec()));
    assert_eq!(kill[1], Value::Int(-3));
    let flags: Vec<String> = redis::from_redis_value(&kill[2]).unwrap();
    assert!(flags.contains(&"admin".to_string()));

    // TYPE filter with SKIPME no kills every normal client, ourselves last.
    let mut other = s.raw();
    other.send(b"PING\r\n");
    assert_eq!(other.line(), "+PONG\r\n");
    assert_eq!(
        cmd_err(&mut c, &["CLIENT", "KILL", "TYPE", "nosuch"]),
        "ERR Unknown client type 'nosuch'"
    );
    let n: i64 = cmd(
        &mut c,
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "no"],
    );
    assert!(n >= 3, "{n}");
    assert!(other.closed());
    assert!(r.closed());
    assert!(redis::cmd("PING").query::<String>(&mut c).is_err());
}

#[test]
fn debug_is_disabled_unless_enabled() {
    let s = Server::start(&["--enable-debug-command", "no"]);
    let mut c = s.conn();
    assert_eq!(
        cmd_err(&mut c, &["DEBUG", "SLEEP", "0"]),
        "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", \
         you can run it from a local connection, otherwise you need to set this option in the \
         configuration file, and then restart the server."
    );
    let s = Server::start(&["--enable-debug-command", "local"]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["DEBUG", "SLEEP", "0"]);
}

#[test]
fn debug_populate_and_protocol() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["SET", "p:0", "mine"]);
    let _: () = cmd(&mut c, &["DEBUG", "POPULATE", "3", "p", "10"]);
    assert_eq!(cmd::<String>(&mut c, &["GET", "p:0"]), "mine"); // existing keys stay
    assert_eq!(cmd::<Vec<u8>>(&mut c, &["GET", "p:2"]), b"value:2\0\0\0");
    let _: () = cmd(&mut c, &["DEBUG", "POPULATE", "2"]);
    assert_eq!(cmd::<String>(&mut c, &["GET", "key:1"]), "value:1");
    assert_eq!(
        cmd_err(&mut c, &["DEBUG", "POPULATE", "-1"]),
        "ERR value is out of range, must be positive"
    );
    let mut r = s.raw();
    for (kind, want) in [
        ("bignum", "$37\r\n1234567999999999999999999999999999999\r\n"),
        ("map", "*6\r\n:0\r\n:0\r\n:1\r\n:1\r\n:2\r\n:0\r\n"),
        (
            "attrib",
            "$39\r\nSome real reply following the attribute\r\n",
        ),
        ("push", "-ERR RESP2 is not supported by this command\r\n"),
    ] {
        r.send(format!("DEBUG PROTOCOL {kind}\r\n").as_bytes());
        let got = String::from_utf8(r.bytes(want.len())).unwrap();
        assert_eq!(got, want, "{kind}");
    }
    r.send(b"HELLO 3\r\n");
    read_reply(&mut r);
    for (kind, want) in [
        ("bignum", "(1234567999999999999999999999999999999\r\n"),
        ("map", "%3\r\n:0\r\n#f\r\n:1\r\n#t\r\n:2\r\n#f\r\n"),
        ("verbatim", "=29\r\ntxt:This is a verbatim\nstring\r\n"),
    ] {
        r.send(format!("DEBUG PROTOCOL {kind}\r\n").as_bytes());
        let got = String::from_utf8(r.bytes(want.len())).unwrap();
        assert_eq!(got, want, "{kind}");
    }
}

/// A server whose port is taken says so and never prints its banner's
/// " PID: " line, which Redis prints only after binding and which Redis's
/// test suite takes to mean "started on this port" (a server that printed
/// it and then failed to bind looked started, and the suite talked to
/// whatever held the port: integration/aof failed "connection refused").
#[test]
fn a_server_that_cannot_bind_its_port_prints_no_banner() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lattice-server"))
        .args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--always-show-logo",
            "yes",
        ])
        .args(["--save", ""])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("Failed listening on port"), "{text}");
    assert!(!text.contains(" PID: "), "{text}");
    // And one that binds prints it.
    let s = Server::start(&["--always-show-logo", "yes"]);
    eventually("the banner", || s.log().contains(" PID: "));
}

/// The fields of a CLIENT INFO/LIST line that do not depend on the
/// connection or the allocator, as unit/introspection's "CLIENT LIST" and
/// "CLIENT INFO" match them.
fn stable_fields(line: &str) -> Vec<String> {
    let skip = [
        "id",
        "addr",
        "laddr",
        "fd",
        "age",
        "idle",
        "qbuf-free",
        "argv-mem",
        "rbs",
    ];
    let skip = [&skip[..], &["rbp", "tot-mem", "lib-name", "lib-ver"]].concat();
    line.split_whitespace()
        .filter(|f| !skip.contains(&f.split('=').next().unwrap()))
        .map(String::from)
        .collect()
}

#[test]
fn client_info_and_list_show_the_running_command_in_qbuf_as_redis() {
    let s = Server::start(&[]);
    let o = common::RedisOracle::start(&[]);
    for args in [&["CLIENT", "INFO"][..], &["CLIENT", "LIST"]] {
        let ours: String = cmd(&mut s.conn(), args);
        let theirs: String = cmd(&mut o.conn(), args);
        let ours = stable_fields(ours.lines().last().unwrap());
        assert_eq!(ours, stable_fields(theirs.lines().last().unwrap()));
        // The query buffer holds the command being run, 26 bytes for
        // either ("*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n").
        assert!(ours.contains(&"qbuf=26".to_string()), "{ours:?}");
    }
}
