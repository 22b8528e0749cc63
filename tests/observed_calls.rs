//! What MONITOR, the slowlog and the latency monitor see of the commands a
//! server runs for others: a replica's of its master's stream (Redis's
//! master client, run with CMD_CALL_FULL) and EXEC's of its queued
//! commands. Each check runs on a LatticeDB pair and on a redis-server
//! 7.0.15 pair, and the two views must be the same.

mod common;

use common::*;
use redis::Value;

/// A master and its replica, synced; `ours` picks LatticeDB or Redis.
enum Node {
    Ours(Server),
    Redis(RedisOracle),
}

impl Node {
    fn start(ours: bool, extra: &[&str]) -> Node {
        match ours {
            true => Node::Ours(Server::start(extra)),
            false => Node::Redis(RedisOracle::start(extra)),
        }
    }
    fn port(&self) -> u16 {
        match self {
            Node::Ours(s) => s.port,
            Node::Redis(o) => o.port,
        }
    }
    fn conn(&self) -> redis::Connection {
        match self {
            Node::Ours(s) => s.conn(),
            Node::Redis(o) => o.conn(),
        }
    }
    fn raw(&self) -> Raw {
        let s = std::net::TcpStream::connect(("127.0.0.1", self.port())).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        Raw {
            r: std::io::BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }
}

fn synced_pair(ours: bool) -> (Node, Node) {
    let m = Node::start(ours, &[]);
    let mport = m.port().to_string();
    let r = Node::start(ours, &["--replicaof", "127.0.0.1", &mport]);
    let (mut mc, mut rc) = (m.conn(), r.conn());
    let _: () = cmd(&mut mc, &["SET", "warm", "up"]);
    eventually("the replica in sync", || in_sync(&mut mc, &mut rc));
    (m, r)
}

/// A MONITOR line as "[db who] cmd args", the command name in lower case,
/// the master's address as "master" (None: a line of the link's own
/// chatter, PING and REPLCONF).
fn shown(line: &str, master: &str) -> Option<String> {
    let rest = line.trim_end().split_once(' ')?.1;
    let (who, argv) = rest.split_once("] ")?;
    let (name, args) = argv.split_once(' ').unwrap_or((argv, ""));
    let name = name.to_lowercase();
    if name == "\"ping\"" || name == "\"replconf\"" {
        return None;
    }
    let who = who.replace(master, "master");
    Some(format!("{who}] {name} {args}").trim_end().to_string())
}

/// The replica's MONITOR lines and SLOWLOG entries (command, address,
/// name) for what its master's clients ran.
fn replica_view(ours: bool) -> (Vec<String>, Vec<String>) {
    let (m, r) = synced_pair(ours);
    let master = format!("127.0.0.1:{}", m.port());
    let mut rc = r.conn();
    let _: () = cmd(&mut rc, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    let _: () = cmd(&mut rc, &["SLOWLOG", "RESET"]);
    let mut mon = r.raw();
    mon.send(b"MONITOR\r\n");
    assert_eq!(mon.line(), "+OK\r\n");

    let mut mc = m.conn();
    let _: () = cmd(&mut mc, &["SELECT", "3"]);
    let _: () = cmd(&mut mc, &["SET", "a", "1"]);
    let _: () = cmd(&mut mc, &["SELECT", "0"]);
    let _: Value = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("b")
        .arg("2")
        .cmd("INCR")
        .arg("c")
        .query(&mut mc)
        .unwrap();
    let _: () = cmd(&mut mc, &["SET", "end", "1"]);

    let mut lines = vec![];
    while !lines.iter().any(|l: &String| l.contains("\"end\"")) {
        let line = mon.line();
        assert!(line.starts_with('+'), "{line:?} after {lines:?}");
        lines.extend(shown(&line, &master));
    }
    let entries: Vec<Value> = cmd(&mut rc, &["SLOWLOG", "GET", "-1"]);
    let mut slow: Vec<String> = entries
        .iter()
        .rev()
        .map(|e| {
            let Value::Array(f) = e else { panic!("{e:?}") };
            let argv: Vec<String> = redis::from_redis_value(&f[3]).unwrap();
            let addr: String = redis::from_redis_value(&f[4]).unwrap();
            let name: String = redis::from_redis_value(&f[5]).unwrap();
            let who = if addr == master { "master" } else { "client" };
            format!("{} {who} name={name:?}", argv.join(" ").to_lowercase())
        })
        .filter(|e| !e.starts_with("ping") && !e.starts_with("replconf"))
        .collect();
    // The replica's own clients' commands (SLOWLOG RESET, MONITOR) aside.
    slow.retain(|e| e.contains(" master "));
    (lines, slow)
}

#[test]
fn a_replica_shows_its_masters_commands_as_redis_does() {
    let (lines, slow) = replica_view(true);
    assert_eq!(
        lines,
        [
            "[3 master] \"select\" \"3\"",
            "[3 master] \"set\" \"a\" \"1\"",
            "[0 master] \"select\" \"0\"",
            "[0 master] \"multi\"",
            "[0 master] \"set\" \"b\" \"2\"",
            "[0 master] \"incr\" \"c\"",
            "[0 master] \"exec\"",
            "[0 master] \"set\" \"end\" \"1\"",
        ]
    );
    assert_eq!(
        slow,
        [
            "select 3 master name=\"\"",
            "set a 1 master name=\"\"",
            "select 0 master name=\"\"",
            "multi master name=\"\"",
            "set b 2 master name=\"\"",
            "incr c master name=\"\"",
            "set end 1 master name=\"\"",
        ]
    );
    assert_eq!((lines, slow), replica_view(false));
}

/// The names in LATENCY LATEST and the commands in SLOWLOG GET after a
/// transaction whose one queued command is a FAST one made slow (LPUSH of
/// 200,000 elements, over a 1 ms threshold).
fn exec_view(node: &Node) -> (Vec<String>, Vec<String>) {
    let mut c = node.conn();
    for (k, v) in [
        ("latency-monitor-threshold", "1"),
        ("slowlog-log-slower-than", "0"),
    ] {
        let _: () = cmd(&mut c, &["CONFIG", "SET", k, v]);
    }
    let _: i64 = cmd(&mut c, &["LATENCY", "RESET"]);
    let _: () = cmd(&mut c, &["SLOWLOG", "RESET"]);
    let mut lpush = redis::cmd("LPUSH");
    lpush.arg("big");
    for i in 0..200_000 {
        lpush.arg(i);
    }
    let _: Value = redis::pipe()
        .atomic()
        .add_command(lpush)
        .query(&mut c)
        .unwrap();
    let latest: Vec<Vec<Value>> = cmd(&mut c, &["LATENCY", "LATEST"]);
    let mut events: Vec<String> = latest
        .iter()
        .map(|e| redis::from_redis_value(&e[0]).unwrap())
        .filter(|e: &String| e.ends_with("command"))
        .collect();
    events.sort();
    let entries: Vec<Value> = cmd(&mut c, &["SLOWLOG", "GET", "-1"]);
    let slow = entries
        .iter()
        .rev()
        .map(|e| {
            let Value::Array(f) = e else { panic!("{e:?}") };
            let argv: Vec<String> = redis::from_redis_value(&f[3]).unwrap();
            argv[0].to_lowercase()
        })
        .filter(|name| ["multi", "lpush", "exec"].contains(&name.as_str()))
        .collect();
    (events, slow)
}

#[test]
fn execs_queued_commands_are_slowlog_entries_and_latency_events() {
    let ours = exec_view(&Node::start(true, &[]));
    assert_eq!(
        ours,
        (
            vec!["command".to_string(), "fast-command".into()],
            vec!["multi".to_string(), "lpush".into()]
        )
    );
    assert_eq!(ours, exec_view(&Node::start(false, &[])));
}

/// What a writable replica's INFO counts of a master command that fails
/// there (its key holds another type here): errorstats under the error's
/// code, total_error_replies, unexpected_error_replies (Redis's errors
/// "sent" to a master), and the command's failed_calls.
fn master_error_counts(ours: bool) -> Vec<String> {
    let (m, r) = synced_pair(ours);
    let (mut mc, mut rc) = (m.conn(), r.conn());
    let _: () = cmd(&mut rc, &["CONFIG", "SET", "replica-read-only", "no"]);
    let _: () = cmd(&mut mc, &["SET", "k", "1"]);
    eventually("the replica holds k", || {
        cmd::<Option<String>>(&mut rc, &["GET", "k"]).is_some()
    });
    let _: () = cmd(&mut rc, &["CONFIG", "RESETSTAT"]);
    let _: i64 = cmd(&mut rc, &["DEL", "k"]);
    let _: i64 = cmd(&mut rc, &["LPUSH", "k", "a"]);
    let _: i64 = cmd(&mut mc, &["INCR", "k"]);
    let _: () = cmd(&mut mc, &["SET", "done", "1"]);
    eventually("the replica ran the master's INCR", || {
        cmd::<Option<String>>(&mut rc, &["GET", "done"]).is_some()
    });
    let mut lines = Vec::new();
    for section in ["errorstats", "stats", "commandstats"] {
        let info: String = cmd(&mut rc, &["INFO", section]);
        let wanted = |l: &&str| {
            l.starts_with("errorstat_")
                || l.starts_with("total_error_replies")
                || l.starts_with("unexpected_error_replies")
                || l.starts_with("cmdstat_incr:")
        };
        for l in info.lines().filter(wanted) {
            // usec fields differ; the counts are what is compared.
            let counts = l.split(',').filter(|f| !f.contains("usec"));
            lines.push(counts.collect::<Vec<_>>().join(","));
        }
    }
    lines
}

#[test]
fn a_masters_command_that_fails_on_the_replica_counts_as_redis_counts_it() {
    let ours = master_error_counts(true);
    assert_eq!(ours, master_error_counts(false));
    assert!(
        ours.contains(&"errorstat_WRONGTYPE:count=1".to_string()),
        "{ours:?}"
    );
}

/// One CLIENT LIST line's fields, by name.
fn fields(line: &str) -> std::collections::HashMap<String, String> {
    (line.split_whitespace())
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The replica's master client (`flags=M`) as its users see it: CLIENT
/// LIST and its TYPE filter, INFO's connected_clients, and CLIENT KILL by
/// user, by type (the link comes back by a partial resync, keeping the
/// client's id, database and last command, as Redis's cached master) and
/// by id. Fields that depend on the process (memory, timings) are left out.
fn master_client_view(ours: bool) -> Vec<String> {
    let (m, r) = synced_pair(ours);
    let (mut mc, mut rc) = (m.conn(), r.conn());
    let _: () = cmd(&mut mc, &["SELECT", "3"]);
    let _: () = cmd(&mut mc, &["SET", "b", "1"]);
    let _: () = cmd(&mut rc, &["SELECT", "3"]);
    eventually("the replica holds b", || {
        cmd::<Option<String>>(&mut rc, &["GET", "b"]).is_some()
    });
    let listed = |rc: &mut redis::Connection| -> Vec<String> {
        let all: String = cmd(rc, &["CLIENT", "LIST"]);
        all.lines()
            .filter(|l| l.contains("flags=M"))
            .map(String::from)
            .collect()
    };
    let masters = listed(&mut rc);
    assert_eq!(masters.len(), 1, "{masters:?}");
    let f = fields(&masters[0]);
    let typed: String = cmd(&mut rc, &["CLIENT", "LIST", "TYPE", "master"]);
    assert_eq!(fields(typed.trim_end())["id"], f["id"]);
    // Its laddr is the replica's end of the link, as the master lists it.
    let replicas: String = cmd(&mut mc, &["CLIENT", "LIST", "TYPE", "replica"]);
    assert_eq!(fields(replicas.trim_end())["addr"], f["laddr"]);
    let mut view: Vec<String> = ["name", "flags", "db", "sub", "psub", "multi", "cmd", "user"]
        .iter()
        .map(|k| format!("{k}={}", f[*k]))
        .collect();
    view.push(format!(
        "addr is the master: {}",
        f["addr"] == format!("127.0.0.1:{}", m.port())
    ));
    let connected: i64 = info_field(&mut rc, "connected_clients");
    view.push(format!("connected_clients={connected}"));
    // A user named as our record's placeholder names no client: deleting
    // it leaves the link alone.
    let _: () = cmd(&mut rc, &["ACL", "SETUSER", "(superuser)", "on"]);
    let deleted: i64 = cmd(&mut rc, &["ACL", "DELUSER", "(superuser)"]);
    view.push(format!("deluser (superuser): {deleted}"));
    let kept = listed(&mut rc);
    let same = kept.len() == 1 && fields(&kept[0])["laddr"] == f["laddr"];
    view.push(format!("link kept after the deluser: {same}"));
    let by_user: i64 = cmd(&mut rc, &["CLIENT", "KILL", "USER", "default"]);
    view.push(format!("kill user default: {by_user}"));
    let by_type: i64 = cmd(&mut rc, &["CLIENT", "KILL", "TYPE", "master"]);
    view.push(format!("kill type master: {by_type}"));
    let mut back = Vec::new();
    eventually("the master client listed again", || {
        back = listed(&mut rc);
        !back.is_empty() && in_sync(&mut mc, &mut rc)
    });
    let g = fields(&back[0]);
    for k in ["id", "db", "cmd"] {
        view.push(format!(
            "after a partial resync, {k} kept: {}",
            g[k] == f[k]
        ));
    }
    view.push(format!("new socket: {}", g["laddr"] != f["laddr"]));
    // A WAIT right behind a write makes the master ask for an ACK: the
    // master client's last command is then REPLCONF.
    let _: (String, i64) = redis::pipe()
        .cmd("SET")
        .arg("c")
        .arg("1")
        .cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut mc)
        .unwrap();
    let mut asked = String::new();
    eventually("the master client ran the GETACK", || {
        asked = fields(&listed(&mut rc)[0])["cmd"].clone();
        asked == "replconf"
    });
    view.push(format!("after WAIT, cmd={asked}"));
    let by_id: i64 = cmd(&mut rc, &["CLIENT", "KILL", "ID", &g["id"]]);
    view.push(format!("kill id: {by_id}"));
    view
}

#[test]
fn a_replica_lists_its_master_client_as_redis_does() {
    let ours = master_client_view(true);
    assert_eq!(ours, master_client_view(false));
    assert!(ours.contains(&"flags=M".to_string()), "{ours:?}");
}
