//! Commands of features LatticeDB does not build answer as Redis 7.0 does
//! where Redis has an answer (CLUSTER and friends without cluster mode,
//! MODULE without modules, SCRIPT DEBUG NO), and otherwise with a clear
//! "not supported by LatticeDB yet" naming docs/COMMANDS.md (issue 28 item
//! 4); LOLWUT as Redis 7.0. Compared with redis-server 7.0.15 side by side.

mod common;

use common::{cmd, RedisOracle, Server};

fn reply(c: &mut redis::Connection, args: &[&str]) -> String {
    let mut q = redis::cmd(args[0]);
    for a in &args[1..] {
        q.arg(*a);
    }
    match q.query::<redis::Value>(c) {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")),
    }
}

#[test]
fn cluster_module_and_friends_answer_as_redis_without_those_features() {
    let (s, o) = (Server::start(&[]), RedisOracle::start(&[]));
    let (mut ours, mut redis) = (s.conn(), o.conn());
    let same: &[&[&str]] = &[
        &["CLUSTER", "INFO"],
        &["CLUSTER", "HELP"],
        &["CLUSTER", "SLOTS"],
        &["CLUSTER", "KEYSLOT", "a"],
        &["CLUSTER", "NOSUCH"],
        &["CLUSTER", "INFO", "extra"],
        &["CLUSTER"],
        &["READONLY"],
        &["READWRITE"],
        &["ASKING"],
        &["MODULE", "LIST"],
        &["MODULE", "HELP"],
        &["MODULE", "LOAD", "/nonexistent.so"],
        &["MODULE", "UNLOAD", "x"],
        &["MODULE", "NOSUCH"],
        &["SCRIPT", "DEBUG", "NO"],
        &["SCRIPT", "DEBUG", "MAYBE"],
        &["FUNCTION", "HELP"],
        &["LOLWUT"],
        &["LOLWUT", "VERSION", "7"],
        &["LOLWUT", "VERSION", "x"],
        &[
            "COMMAND",
            "INFO",
            "restore-asking",
            "asking",
            "lolwut",
            "module|list",
        ],
        &["COMMAND", "INFO", "keys", "cluster|nodes"],
    ];
    for args in same {
        assert_eq!(reply(&mut ours, args), reply(&mut redis, args), "{args:?}");
    }
    // The CLUSTER subcommands Redis lists, in its table's (hash) order.
    let sorted = |c: &mut redis::Connection| {
        let mut v: Vec<String> = cmd(c, &["COMMAND", "LIST", "FILTERBY", "PATTERN", "cluster*"]);
        v.sort();
        v
    };
    assert_eq!(sorted(&mut ours), sorted(&mut redis));
    // RESTORE-ASKING is RESTORE.
    let dump: Vec<u8> = {
        let _: () = cmd(&mut ours, &["SET", "k", "v"]);
        redis::cmd("DUMP").arg("k").query(&mut ours).unwrap()
    };
    let r: String = redis::cmd("RESTORE-ASKING")
        .arg("k2")
        .arg(0)
        .arg(dump)
        .query(&mut ours)
        .unwrap();
    assert_eq!(r, "OK");
    assert_eq!(cmd::<String>(&mut ours, &["GET", "k2"]), "v");
}

#[test]
fn what_is_not_built_says_so_and_names_the_docs_page() {
    let s = Server::start(&["--enable-module-command", "yes"]);
    let mut c = s.conn();
    assert_eq!(
        reply(&mut c, &["MODULE", "LOAD", "/x.so"]),
        "ERR MODULE LOAD is not supported by LatticeDB yet (docs/COMMANDS.md): modules are not built"
    );
    assert_eq!(
        reply(&mut c, &["SCRIPT", "DEBUG", "YES"]),
        "ERR SCRIPT DEBUG YES is not supported by LatticeDB yet (docs/COMMANDS.md): the Lua debugger is not built"
    );
    for name in ["keydb.nhset", "KEYDB.NHGET"] {
        assert_eq!(
            reply(&mut c, &[name, "a", "b"]),
            format!(
                "ERR '{}' is KeyDB's and not supported by LatticeDB yet (docs/COMMANDS.md)",
                name.to_uppercase()
            )
        );
    }
    // OBJECT LASTMODIFIED is built (tests/keydb_commands.rs): a missing key is null.
    assert_eq!(reply(&mut c, &["OBJECT", "LASTMODIFIED", "k"]), "nil");
    // A mistyped name is still an unknown command.
    assert!(reply(&mut c, &["NOSUCHCMD"]).starts_with("ERR unknown command 'NOSUCHCMD'"));
}

#[test]
fn lolwut_version_5_draws_schotter() {
    let s = Server::start(&[]);
    let text: String = cmd(&mut s.conn(), &["LOLWUT", "VERSION", "5", "20", "4", "3"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.last().copied(),
        Some("Georg Nees - schotter, plotter on paper, 1968. Redis ver. 7.0.15")
    );
    // A canvas of Braille characters 20 columns wide, with dots drawn.
    let canvas = &lines[..lines.len() - 2];
    assert!(canvas.len() >= 3);
    for l in canvas {
        assert_eq!(l.chars().count(), 20, "{l}");
        assert!(l.chars().all(|c| ('\u{2800}'..='\u{28ff}').contains(&c)));
    }
    assert!(canvas.iter().any(|l| l.chars().any(|c| c != '\u{2800}')));
}

/// A command's name and arity.
type NameArity = (String, i64);

/// Each command of redis-server 7.0.15's COMMAND table, with its arity and
/// its subcommands'.
fn redis_table(c: &mut redis::Connection) -> Vec<(String, i64, Vec<NameArity>)> {
    let entries: Vec<Vec<redis::Value>> = cmd(c, &["COMMAND"]);
    let name_arity = |e: &[redis::Value]| -> NameArity {
        (
            redis::from_redis_value(&e[0]).unwrap(),
            redis::from_redis_value(&e[1]).unwrap(),
        )
    };
    entries
        .iter()
        .map(|e| {
            let (name, arity) = name_arity(e);
            let subs: Vec<Vec<redis::Value>> = redis::from_redis_value(&e[9]).unwrap();
            let subs = subs.iter().map(|s| name_arity(s)).collect();
            (name, arity, subs)
        })
        .collect()
}

/// Walks every command Redis 7.0 has: LatticeDB lists it, and a call that
/// cannot run (too few arguments, an unknown subcommand) fails with
/// Redis's own error, never "unknown command". Then KeyDB's own commands:
/// built, or "not supported by LatticeDB yet".
#[test]
fn every_redis_and_keydb_command_is_known() {
    let (s, o) = (Server::start(&[]), RedisOracle::start(&[]));
    let (mut ours, mut redis) = (s.conn(), o.conn());
    let table = redis_table(&mut redis);
    assert!(table.len() >= 200, "{}", table.len());
    let listed: Vec<String> = cmd(&mut ours, &["COMMAND", "LIST"]);
    let mut probes: Vec<Vec<String>> = vec![];
    for (name, arity, subs) in &table {
        assert!(listed.contains(name), "COMMAND LIST lacks {name}");
        if !subs.is_empty() {
            probes.push(vec![name.clone(), "NOSUCHSUB".into()]);
        } else if !matches!(arity, 1 | -1) {
            probes.push(vec![name.clone()]);
        }
        for (full, arity) in subs {
            assert!(listed.contains(full), "COMMAND LIST lacks {full}");
            // Only the calls too short to run (a 2-argument one would run).
            if !matches!(arity, 2 | -2) {
                probes.push(full.split('|').map(str::to_string).collect());
            }
        }
    }
    assert!(probes.len() >= 250, "{}", probes.len());
    for p in &probes {
        let args: Vec<&str> = p.iter().map(String::as_str).collect();
        let (got, want) = (reply(&mut ours, &args), reply(&mut redis, &args));
        assert!(!got.contains("unknown command"), "{args:?}: {got}");
        assert_eq!(got, want, "{args:?}");
    }
    // KeyDB 6.3's own commands: none is an unknown command to us.
    let keydb = [
        "KEYDB.CRON",
        "KEYDB.HRENAME",
        "KEYDB.MEXISTS",
        "KEYDB.NHGET",
        "KEYDB.NHSET",
        "KEYDB.MVCCRESTORE",
        "EXPIREMEMBER",
        "EXPIREMEMBERAT",
        "PEXPIREMEMBERAT",
        "RREPLAY",
        "LFENCE",
    ];
    for name in keydb {
        let got = reply(&mut ours, &[name]);
        assert!(
            got.starts_with("ERR wrong number of arguments")
                || got
                    .ends_with("is KeyDB's and not supported by LatticeDB yet (docs/COMMANDS.md)"),
            "{name}: {got}"
        );
    }
    let got = reply(&mut ours, &["OBJECT", "LASTMODIFIED"]);
    assert!(got.starts_with("ERR wrong number of arguments"), "{got}");
}
