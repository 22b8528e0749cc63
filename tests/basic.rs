//! Smoke tests of the connection loop through real clients.
mod common;
use common::*;

#[test]
fn ping_set_get_and_errors() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    assert_eq!(cmd::<String>(&mut c, &["PING"]), "PONG");
    assert_eq!(cmd::<String>(&mut c, &["SET", "k", "v"]), "OK");
    assert_eq!(cmd::<String>(&mut c, &["GET", "k"]), "v");
    assert_eq!(cmd::<Option<String>>(&mut c, &["GET", "missing"]), None);
    assert_eq!(
        cmd_err(&mut c, &["GET"]),
        "ERR wrong number of arguments for 'get' command"
    );
    assert!(cmd_err(&mut c, &["NOSUCH", "a"]).starts_with("ERR unknown command 'NOSUCH'"));
}

#[test]
fn pipelines_and_inline_commands() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    let mut batch = Vec::new();
    for i in 0..1000 {
        batch.extend_from_slice(
            format!("*3\r\n$3\r\nSET\r\n$4\r\nk{i:03}\r\n$1\r\nv\r\n").as_bytes(),
        );
    }
    r.send(&batch);
    for _ in 0..1000 {
        assert_eq!(r.line(), "+OK\r\n");
    }
    r.send(b"PING\r\nGET k001\r\n");
    assert_eq!(r.line(), "+PONG\r\n");
    assert_eq!(r.line(), "$1\r\n");
    assert_eq!(r.line(), "v\r\n");
}

#[test]
fn protocol_error_closes_only_that_connection() {
    let s = Server::start(&["--proto-max-bulk-len", "1000"]);
    let mut bad = s.raw();
    bad.send(b"*1\r\n$2000\r\n");
    assert_eq!(bad.line(), "-ERR Protocol error: invalid bulk length\r\n");
    assert!(bad.closed());
    let mut bad2 = s.raw();
    bad2.send(b"*1\r\nfoo\r\n");
    assert_eq!(
        bad2.line(),
        "-ERR Protocol error: expected '$', got 'f'\r\n"
    );
    let mut c = s.conn();
    assert_eq!(cmd::<String>(&mut c, &["PING"]), "PONG");
}

#[test]
fn resp3_via_hello() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    r.send(b"HELLO 3\r\n");
    assert_eq!(r.line(), "%7\r\n");
    // Skip the map's 7 pairs: the last value is the empty "modules" array.
    while r.line() != "*0\r\n" {}
    r.send(b"GET nokey\r\n");
    assert_eq!(r.line(), "_\r\n");
}

/// One deep pipeline, sent in one write, against redis-server, reply by
/// reply: writes and reads of the same keys (strings, hashes, sets, sorted
/// sets, lists) across shards, with a transaction, a blocking command that
/// waits, a SELECT and CLIENT REPLY in the middle. Commands run one by one,
/// in order, whatever the server reads ahead of the running one (a batch's
/// keys are prefetched, `server/lookahead.rs`).
#[test]
fn a_deep_pipeline_answers_as_redis_does_reply_by_reply() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let mut cmds: Vec<Vec<String>> = Vec::new();
    for i in 0..3000 {
        match i {
            700 => cmds.extend([s(&["MULTI"]), s(&["INCR", "s:1"]), s(&["GET", "s:1"])]),
            701 => cmds.extend([s(&["HSET", "h:2", "f", "v"]), s(&["EXEC"])]),
            1200 => cmds.extend([s(&["MULTI"]), s(&["SET", "s:3"]), s(&["EXEC"])]),
            1500 => cmds.push(s(&["BLPOP", "l:none", "0.2"])),
            1501 => cmds.extend([
                s(&["RPUSH", "l:1", "x"]),
                s(&["BLPOP", "l:none", "l:1", "0"]),
            ]),
            1800 => cmds.extend([s(&["SELECT", "1"]), s(&["SET", "s:1", "other"])]),
            2100 => cmds.extend([s(&["GET", "s:1"]), s(&["SELECT", "0"])]),
            2400 => cmds.extend([s(&["CLIENT", "REPLY", "SKIP"]), s(&["INCR", "s:2"])]),
            _ => {}
        }
        let k = rng.gen_range(0..40).to_string();
        let v = rng.gen_range(0..5).to_string();
        let c = match rng.gen_range(0..12) {
            0 => s(&["SET", &format!("s:{k}"), &v]),
            // Sometimes a hash: WRONGTYPE.
            1 => s(&["GET", &format!("{}:{k}", pick(&mut rng, &["s", "s", "h"]))]),
            2 => s(&["INCR", &format!("s:{k}")]),
            3 => s(&["DEL", &format!("s:{k}"), &format!("h:{k}")]),
            4 => s(&["HSET", &format!("h:{k}"), &v, &k]),
            5 => s(&["HGET", &format!("h:{k}"), &v]),
            6 => s(&["SADD", &format!("z:{k}"), &v]),
            7 => s(&["SCARD", &format!("z:{k}")]),
            8 => s(&["ZADD", &format!("o:{k}"), &v, &k]),
            9 => s(&["ZSCORE", &format!("o:{k}"), &k]),
            10 => s(&["RPUSH", &format!("l:{k}"), &v]),
            _ => s(&["LPOP", &format!("l:{k}")]),
        };
        cmds.push(c);
    }
    let mut batch = Vec::new();
    for c in &cmds {
        batch.extend_from_slice(format!("*{}\r\n", c.len()).as_bytes());
        for a in c {
            batch.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    // CLIENT REPLY SKIP silences itself and the command after it.
    let replies = cmds.len() - 2;
    let answers = |r: &mut Raw| {
        r.send(&batch);
        (0..replies).map(|_| read_reply(r)).collect::<Vec<_>>()
    };
    let s = Server::start(&[]);
    let ours = answers(&mut s.raw());
    let oracle = RedisOracle::start(&[]);
    let addr = format!("127.0.0.1:{}", oracle.port);
    let w = std::net::TcpStream::connect(addr).unwrap();
    let mut raw = Raw {
        r: std::io::BufReader::new(w.try_clone().unwrap()),
        w,
    };
    let theirs = answers(&mut raw);
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "reply {i}");
    }
    assert!(ours.iter().any(|r| r.starts_with("-WRONGTYPE")));
    assert!(ours.iter().any(|r| r.starts_with("-EXECABORT")));
}
