//! EVAL, EVALSHA, SCRIPT and Redis's Lua environment against the real
//! binary: conversions, errors in Redis 7's format (checked against
//! redis-server 7.0.15), the sandbox, the script cache, replication of a
//! script's effects and its atomicity.

mod common;
use common::*;

fn raw(r: &mut Raw, args: &[&str]) -> String {
    raw_cmd(r, args)
}

#[test]
fn lua_to_resp_conversions() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    assert_eq!(raw(&mut r, &["EVAL", "return 'x'", "0"]), "x");
    assert_eq!(raw(&mut r, &["EVAL", "return 1.9", "0"]), ":1");
    assert_eq!(raw(&mut r, &["EVAL", "return -3", "0"]), ":-3");
    assert_eq!(raw(&mut r, &["EVAL", "return true", "0"]), ":1");
    assert_eq!(raw(&mut r, &["EVAL", "return false", "0"]), "nil");
    assert_eq!(raw(&mut r, &["EVAL", "return nil", "0"]), "nil");
    assert_eq!(raw(&mut r, &["EVAL", "return {1,nil,3}", "0"]), "*1[:1]");
    assert_eq!(
        raw(&mut r, &["EVAL", "return {1,2,{3,'x'},false,true}", "0"]),
        "*5[:1,:2,*2[:3,x],nil,:1]"
    );
    assert_eq!(raw(&mut r, &["EVAL", "return {a=1}", "0"]), "*0[]");
    assert_eq!(raw(&mut r, &["EVAL", "return {err='bad'}", "0"]), "-bad");
    assert_eq!(raw(&mut r, &["EVAL", "return {ok='fine'}", "0"]), "+fine");
    assert_eq!(
        raw(&mut r, &["EVAL", "return redis.status_reply('FINE')", "0"]),
        "+FINE"
    );
    assert_eq!(
        raw(&mut r, &["EVAL", "return redis.error_reply('-x y')", "0"]),
        "-x y"
    );
    assert_eq!(
        raw(&mut r, &["EVAL", "return {1, 'a', {err='inner'}}", "0"]),
        "*3[:1,a,-inner]"
    );
    assert_eq!(
        raw(&mut r, &["EVAL", "return KEYS[1]..ARGV[1]", "1", "k", "a"]),
        "ka"
    );
}

#[test]
fn resp_to_lua_conversions() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    let t = |r: &mut Raw, body: &str| raw(r, &["EVAL", body, "0"]);
    assert_eq!(
        t(&mut r, "return type(redis.call('get','nokey'))"),
        "boolean"
    );
    assert_eq!(t(&mut r, "return redis.call('ping').ok"), "PONG");
    assert_eq!(t(&mut r, "return redis.call('ping')"), "+PONG");
    assert_eq!(t(&mut r, "return type(redis.call('incr','n'))"), "number");
    assert_eq!(
        t(
            &mut r,
            "redis.call('rpush','l','a','b'); return redis.call('lrange','l',0,-1)"
        ),
        "*2[a,b]"
    );
    assert_eq!(t(&mut r, "return redis.call('hgetall','nokey')"), "*0[]");
    assert_eq!(
        t(&mut r, "return type(redis.call('lrange','nokey',0,-1))"),
        "table"
    );
    assert_eq!(
        t(
            &mut r,
            "local e = redis.pcall('lpush','n','x'); return e.err"
        ),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    // RESP3 forms after redis.setresp(3).
    assert_eq!(
        t(
            &mut r,
            "redis.setresp(3); return type(redis.call('get','nokey'))"
        ),
        "nil"
    );
    assert_eq!(
        t(&mut r, "redis.setresp(3); redis.call('hset','h','f','v'); return redis.call('hgetall','h').map.f"),
        "v"
    );
}

/// redis.call reads its arguments from the Lua stack (scripting/stack.rs):
/// numbers as Redis's "%.17g" (checked against redis-server 7.0.15),
/// thousands of arguments, the refusals of bad ones, the RESP3 forms.
#[test]
fn call_arguments_and_replies_on_the_stack() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    let t = |r: &mut Raw, body: &str| raw(r, &["EVAL", body, "0"]);
    for (n, want) in [
        ("1.5", "1.5"),
        ("3", "3"),
        ("1e20", "1e+20"),
        ("0.1", "0.10000000000000001"),
        ("-0.0", "-0"),
        ("1e-17", "1.0000000000000001e-17"),
        ("123456789012345678", "1.2345678901234568e+17"),
        ("-42", "-42"),
    ] {
        let body = format!("redis.call('set','x',{n}); return redis.call('get','x')");
        assert_eq!(t(&mut r, &body), want, "{n}");
    }
    assert_eq!(
        t(
            &mut r,
            "local a = {} for i=1,7999 do a[i] = 1 end return redis.call('lpush', 'big', unpack(a))"
        ),
        ":7999"
    );
    assert_eq!(
        t(&mut r, "return redis.pcall('set','x',{})"),
        "-ERR Lua redis lib command arguments must be strings or integers"
    );
    assert_eq!(
        t(&mut r, "return redis.pcall()"),
        "-ERR Please specify at least one argument for this redis lib call"
    );
    assert_eq!(
        t(&mut r, "local e = redis.pcall('nosuch'); return e.err"),
        "ERR Unknown Redis command called from script"
    );
    assert_eq!(
        t(
            &mut r,
            "redis.setresp(3); redis.call('zadd','z',1.5,'m'); return tostring(redis.call('zscore','z','m').double)"
        ),
        "1.5"
    );
    assert_eq!(
        t(
            &mut r,
            "redis.setresp(3); redis.call('sadd','s','a'); return tostring(redis.call('smembers','s').set.a)"
        ),
        "true"
    );
    // A call's reply nested in a returned table, the script's KEYS and ARGV.
    assert_eq!(
        raw(
            &mut r,
            &[
                "EVAL",
                "return {redis.call('incrby', KEYS[1], ARGV[1]), redis.pcall('incr', KEYS[2]), #KEYS, #ARGV}",
                "2",
                "n1",
                "big",
                "5"
            ]
        ),
        "*4[:5,-WRONGTYPE Operation against a key holding the wrong kind of value,:2,:1]"
    );
}

#[test]
fn errors_have_redis_7_format() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    raw(&mut r, &["SET", "s", "x"]);
    let e = |r: &mut Raw, body: &str| raw(r, &["EVAL", body, "0"]);
    assert_eq!(
        e(&mut r, "return redis.call('incr','s')"),
        "-ERR value is not an integer or out of range script: c243b9f46db13ba8f69da41b45a77708832babed, on @user_script:1."
    );
    assert_eq!(
        e(&mut r, "error('boom')"),
        "-ERR user_script:1: boom script: 82903a0434f1503e152f89c03c9acd881a0e8150, on @user_script:1."
    );
    assert_eq!(
        e(&mut r, "error({err='My Error'})"),
        "-My Error script: e115b36aa4ca34249363168860134d6f8b667d30, on @user_script:1."
    );
    assert_eq!(
        e(&mut r, "return redis.call('nosuch')"),
        "-ERR Unknown Redis command called from script script: 206396248e12c6e742fd7296250433c8d7343b74, on @user_script:1."
    );
    assert_eq!(
        e(&mut r, "return redis.call('incr', 'a', 'b')"),
        "-ERR Wrong number of args calling Redis command from script script: 0f02b03720c86f7d902e0cd401927ba432a9094d, on @user_script:1."
    );
    assert_eq!(
        e(&mut r, "return redis.call('eval_ro','return 1',0)"),
        "-ERR This Redis command is not allowed from script script: f351d3ffd8062dae11e9d688db1168244d5fd528, on @user_script:1."
    );
    // Blocking pops and QUIT are `noscript` in Redis too (a script must
    // not block, nor close its caller's connection).
    for body in [
        "return redis.call('bzpopmin','z',0)",
        "return redis.call('bzpopmax','z',0)",
        "return redis.call('quit')",
    ] {
        let err = e(&mut r, body);
        assert!(
            err.starts_with("-ERR This Redis command is not allowed from script"),
            "{body}: {err}"
        );
    }
    assert_eq!(
        e(&mut r, "return redis.call('set',{},1)"),
        "-ERR Lua redis lib command arguments must be strings or integers script: 12e0efe2d45abadf1970283ca3dc784782db03cb, on @user_script:1."
    );
    assert_eq!(
        e(&mut r, "syntax error here"),
        "-ERR Error compiling script (new function): user_script:1: '=' expected near 'error'"
    );
    assert_eq!(
        e(&mut r, "redis.setresp(4)"),
        "-ERR RESP version must be 2 or 3. script: 68e72e4d8a428b9f599dce492315f2455a425a82, on @user_script:1."
    );
    assert_eq!(
        e(&mut r, "return redis.error_reply()"),
        "-ERR wrong number or type of arguments"
    );
    assert_eq!(
        raw(&mut r, &["EVAL", "return 1", "-1"]),
        "-ERR Number of keys can't be negative"
    );
    assert_eq!(
        raw(&mut r, &["EVAL", "return 1", "2", "a"]),
        "-ERR Number of keys can't be greater than number of args"
    );
    assert_eq!(
        raw(&mut r, &["EVAL_RO", "return redis.call('set','a',1)", "0"]),
        "-ERR Write commands are not allowed from read-only scripts. script: 119b0beb461d5982ddacc6dda6829882d5e16b4d, on @user_script:1."
    );
    // pcall returns the error as a table instead of raising it.
    assert_eq!(
        e(&mut r, "return redis.pcall('incr', 'a', 'b')['err']"),
        "ERR Wrong number of args calling Redis command from script"
    );
    assert_eq!(
        e(&mut r, "return redis.pcall('nosuch')"),
        "-ERR Unknown Redis command called from script"
    );
    assert_eq!(raw(&mut r, &["PING"]), "+PONG", "the server stays up");
}

#[test]
fn sandbox() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    let e = |r: &mut Raw, body: &str| raw(r, &["EVAL", body, "0"]);
    assert_eq!(
        e(&mut r, "a=1"),
        "-ERR user_script:1: Attempt to modify a readonly table script: 86eda770a6060824b090dd4df091e3bd4121279c, on @user_script:1."
    );
    assert_eq!(
        e(&mut r, "return os"),
        "-ERR user_script:1: Script attempted to access nonexistent global variable 'os' script: f03b5ad6e7d58786b6a5e879efbea4a4408f5c2f, on @user_script:1."
    );
    for g in [
        "io", "loadfile", "dofile", "debug", "print", "getfenv", "require",
    ] {
        let reply = e(&mut r, &format!("return {g}"));
        assert!(
            reply.contains("nonexistent global variable"),
            "{g}: {reply}"
        );
    }
    assert!(e(&mut r, "string.foo = 1").contains("Attempt to modify a readonly table"));
    assert!(e(&mut r, "loadstring('x = 1')()").contains("Attempt to modify a readonly table"));
    assert_eq!(e(&mut r, "local a = {} ; a.x = 1 ; return a.x"), ":1");
    assert_eq!(e(&mut r, "return table.concat({1,2},',')"), "1,2");
    assert_eq!(e(&mut r, "return ('x'):rep(3)"), "xxx");
    assert_eq!(e(&mut r, "return bit.band(7,3)"), ":3");
    assert_eq!(e(&mut r, "return bit.tohex(255, 4)"), "00ff");
    assert_eq!(
        e(&mut r, "return redis.sha1hex('')"),
        "da39a3ee5e6b4b0d3255bfef95601890afd80709"
    );
    assert_eq!(e(&mut r, "return redis.REDIS_VERSION"), "7.0.15");
    assert_eq!(
        e(
            &mut r,
            "return {redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING}"
        ),
        "*4[:0,:1,:2,:3]"
    );
    assert_eq!(
        e(&mut r, "return redis.log(redis.LOG_WARNING, 'hi')"),
        "nil"
    );
    // Redis's PRNG: math.randomseed(0) restarts redisLrand48's sequence.
    assert_eq!(
        e(&mut r, "math.randomseed(0); return tostring(math.random())"),
        "0.17082803611217"
    );
    assert_eq!(
        e(&mut r, "math.randomseed(0); return math.random(10)"),
        ":2"
    );
}

#[test]
fn script_cache() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db";
    assert_eq!(
        raw(&mut r, &["EVALSHA", sha, "0"]),
        "-NOSCRIPT No matching script. Please use EVAL."
    );
    assert_eq!(
        raw(&mut r, &["EVALSHA", "abc", "0"]),
        "-NOSCRIPT No matching script. Please use EVAL."
    );
    assert_eq!(raw(&mut r, &["SCRIPT", "EXISTS", sha, "x"]), "*2[:0,:0]");
    assert_eq!(raw(&mut r, &["SCRIPT", "LOAD", "return 1"]), sha);
    assert_eq!(
        raw(&mut r, &["SCRIPT", "EXISTS", &sha.to_uppercase(), "x"]),
        "*2[:1,:0]"
    );
    assert_eq!(raw(&mut r, &["EVALSHA", sha, "0"]), ":1");
    assert_eq!(raw(&mut r, &["EVALSHA_RO", &sha.to_uppercase(), "0"]), ":1");
    assert_eq!(raw(&mut r, &["SCRIPT", "FLUSH"]), "+OK");
    assert_eq!(
        raw(&mut r, &["EVALSHA", sha, "0"]),
        "-NOSCRIPT No matching script. Please use EVAL."
    );
    // EVAL caches what it runs.
    assert_eq!(raw(&mut r, &["EVAL", "return 1", "0"]), ":1");
    assert_eq!(raw(&mut r, &["EVALSHA", sha, "0"]), ":1");
    assert_eq!(raw(&mut r, &["SCRIPT", "FLUSH", "ASYNC"]), "+OK");
    assert_eq!(raw(&mut r, &["SCRIPT", "EXISTS", sha]), "*1[:0]");
    assert_eq!(raw(&mut r, &["SCRIPT", "FLUSH", "SYNC"]), "+OK");
    assert_eq!(
        raw(&mut r, &["SCRIPT", "FLUSH", "bad"]),
        "-ERR SCRIPT FLUSH only support SYNC|ASYNC option"
    );
    assert_eq!(
        raw(&mut r, &["SCRIPT", "KILL"]),
        "-NOTBUSY No scripts in execution right now."
    );
    assert!(raw(&mut r, &["SCRIPT", "LOAD", "syntax error here"])
        .starts_with("-ERR Error compiling script"));
    // Another connection (maybe another thread) sees the cache too.
    assert_eq!(
        raw(&mut r, &["SCRIPT", "LOAD", "return 2"]),
        "7f923f79fe76194c868d7e1d0820de36700eb649"
    );
    let mut other = s.raw();
    assert_eq!(
        raw(
            &mut other,
            &["EVALSHA", "7f923f79fe76194c868d7e1d0820de36700eb649", "0"]
        ),
        ":2"
    );
}

#[test]
fn declared_keys_only_when_keys_are_declared() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    assert_eq!(
        raw(
            &mut r,
            &["EVAL", "return redis.call('set', KEYS[1], 'v')", "1", "a"]
        ),
        "+OK"
    );
    // An undeclared key before any write: the script runs again holding
    // every shard, and succeeds (DECISIONS 54).
    assert_eq!(
        raw(
            &mut r,
            &["EVAL", "return redis.call('set', 'other', 'v')", "1", "a"],
        ),
        "+OK"
    );
    // ... even when the script caught the refusal with pcall.
    assert_eq!(
        raw(
            &mut r,
            &[
                "EVAL",
                "pcall(redis.call, 'get', 'zz'); return redis.call('set', KEYS[1], 'w')",
                "1",
                "a"
            ],
        ),
        "+OK"
    );
    // After a write it can no longer be run again: refused.
    let e = raw(
        &mut r,
        &[
            "EVAL",
            "redis.call('set', KEYS[1], 'v'); return redis.call('set', 'other', 'v')",
            "1",
            "a",
        ],
    );
    assert!(
        e.starts_with("-ERR Script attempted to access a key not declared in KEYS"),
        "{e}"
    );
    // With no declared keys the script holds everything and may touch anything.
    assert_eq!(
        raw(
            &mut r,
            &["EVAL", "return redis.call('set', 'other', 'v')", "0"]
        ),
        "+OK"
    );
    assert_eq!(
        raw(&mut r, &["EVAL", "return redis.call('dbsize')", "0"]),
        ":2"
    );
    // A script's SELECT does not change its caller's database.
    assert_eq!(
        raw(
            &mut r,
            &[
                "EVAL",
                "redis.call('select', 1); return redis.call('set','x','1')",
                "0"
            ]
        ),
        "+OK"
    );
    assert_eq!(raw(&mut r, &["EXISTS", "x"]), ":0");
    // Inside MULTI the script runs under EXEC's locks.
    raw(&mut r, &["MULTI"]);
    raw(
        &mut r,
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "n"],
    );
    raw(&mut r, &["EVAL", "return redis.call('incr', 'n')", "0"]);
    assert_eq!(raw(&mut r, &["EXEC"]), "*2[:1,:2]");
}

#[test]
fn script_writes_reach_a_replica_as_effects() {
    let m = Server::start(&[]);
    let rep = Server::start(&["--replicaof", "127.0.0.1", &m.port.to_string()]);
    let mut mc = m.conn();
    let mut rc = rep.conn();
    eventually("the replica links", || {
        info_field::<String>(&mut rc, "master_link_status") == "up"
    });
    let _: redis::Value = cmd(
        &mut mc,
        &["EVAL", "redis.call('set', KEYS[1], ARGV[1]); redis.call('incrby', KEYS[2], 5); return redis.call('expire', KEYS[1], 100)", "2", "k1", "k2", "v"],
    );
    let _: redis::Value = cmd(
        &mut mc,
        &[
            "EVAL",
            "return redis.call('rpush', 'l', math.random(1000))",
            "0",
        ],
    );
    eventually("the replica has the script's writes", || {
        in_sync(&mut mc, &mut rc)
    });
    let v: String = cmd(&mut rc, &["GET", "k1"]);
    assert_eq!(v, "v");
    let n: i64 = cmd(&mut rc, &["GET", "k2"]);
    assert_eq!(n, 5);
    let ttl: i64 = cmd(&mut rc, &["TTL", "k1"]);
    assert!(ttl > 90, "{ttl}");
    let ml: Vec<String> = cmd(&mut mc, &["LRANGE", "l", "0", "-1"]);
    let rl: Vec<String> = cmd(&mut rc, &["LRANGE", "l", "0", "-1"]);
    assert_eq!(ml, rl);
}

/// A script doing INCR k1; INCR k2 while other clients read MGET k1 k2:
/// no reader ever sees them differ, whether the script declares its keys
/// or not.
#[test]
fn a_script_is_atomic_for_other_clients() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    use std::sync::Arc;
    let s = Server::start(&["--server-threads", "4"]);
    for keys in [&["2", "k1", "k2"][..], &["0"][..]] {
        let mut c = s.conn();
        let _: () = cmd(&mut c, &["MSET", "k1", "0", "k2", "0"]);
        let (stop, reads) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (mut rc, stop, reads) = (s.conn(), stop.clone(), reads.clone());
                std::thread::spawn(move || {
                    while !stop.load(Relaxed) {
                        let v: Vec<i64> = cmd(&mut rc, &["MGET", "k1", "k2"]);
                        assert_eq!(v[0], v[1], "a reader saw a script half done");
                        reads.fetch_add(1, Relaxed);
                    }
                })
            })
            .collect();
        let body = "redis.call('incr','k1'); for i = 1, 200 do local x = i * i end; return redis.call('incr','k2')";
        let mut args = vec!["EVAL", body];
        args.extend_from_slice(keys);
        // At least 2000 scripts, and on until the readers read 1000 times
        // between them (a loaded machine may start them late), bounded.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut ran = 0;
        while ran < 2000 || (reads.load(Relaxed) < 1000 && std::time::Instant::now() < deadline) {
            let _: i64 = cmd(&mut c, &args);
            ran += 1;
        }
        stop.store(true, Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert!(reads.load(Relaxed) >= 1000, "the readers hardly ran");
        let v: Vec<i64> = cmd(&mut c, &["MGET", "k1", "k2"]);
        assert_eq!(v, vec![ran, ran]);
    }
}

#[test]
fn shebang_flags() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    assert_eq!(raw(&mut r, &["EVAL", "#!lua\nreturn 1", "0"]), ":1");
    assert_eq!(
        raw(&mut r, &["EVAL", "#!not-lua\nreturn 1", "0"]),
        "-ERR Unexpected engine in script shebang: #!not-lua"
    );
    assert_eq!(
        raw(&mut r, &["EVAL", "#!lua flags=what\nreturn 1", "0"]),
        "-ERR Unexpected flag in script shebang: what"
    );
    assert!(raw(
        &mut r,
        &[
            "EVAL",
            "#!lua flags=no-writes\nredis.call('set','x','1')",
            "1",
            "x"
        ]
    )
    .starts_with("-ERR Write commands are not allowed from read-only scripts."));
    assert_eq!(
        raw(&mut r, &["EVAL_RO", "#!lua\nreturn 1", "0"]),
        "-ERR Can not execute a script with write flag using *_ro command."
    );
    // maxmemory reached: a script with flags (no allow-oom) is refused
    // before it runs, one without may read.
    raw(&mut r, &["SET", "x", "123"]);
    raw(&mut r, &["CONFIG", "SET", "maxmemory", "1"]);
    assert!(raw(&mut r, &["EVAL", "#!lua\nreturn 1", "0"]).starts_with("-OOM "));
    assert_eq!(
        raw(&mut r, &["EVAL", "return redis.call('get','x')", "1", "x"]),
        "123"
    );
    assert!(raw(
        &mut r,
        &["EVAL", "return redis.call('set','x','1')", "1", "x"]
    )
    .starts_with("-OOM command not allowed"));
    assert_eq!(
        raw(
            &mut r,
            &[
                "EVAL",
                "#!lua flags=allow-oom\nreturn redis.call('set','x','1')",
                "1",
                "x"
            ]
        ),
        "+OK"
    );
    raw(&mut r, &["CONFIG", "SET", "maxmemory", "0"]);
}

#[test]
fn sandbox_tricks_are_refused() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    for code in [
        "setmetatable(_G, {})",
        "local g = getmetatable(_G); g.__index = {}",
        "getmetatable('').__index = function() return 1 end",
        "rawset(_G, 'x', 1)",
        "redis.call = function() return 1 end",
        "bit.lshift = nil",
    ] {
        let e = raw(&mut r, &["EVAL", code, "0"]);
        assert!(
            e.contains("Attempt to modify a readonly table"),
            "{code}: {e}"
        );
    }
    let e = raw(
        &mut r,
        &["EVAL", "return unpack({1,2,3}, -2, 2147483647)", "0"],
    );
    assert!(e.contains("too many results to unpack"), "{e}");
    let e = raw(
        &mut r,
        &[
            "EVAL",
            "return loadstring(string.dump(function() return 1 end))()",
            "0",
        ],
    );
    assert!(e.contains("attempt to call a nil value"), "{e}");
    assert_eq!(
        raw(
            &mut r,
            &["EVAL", "return redis.call('set','n',9007199254740991)", "0"]
        ),
        "+OK"
    );
    assert_eq!(raw(&mut r, &["GET", "n"]), "9007199254740991");
    assert_eq!(
        raw(&mut r, &["EVAL", "return #KEYS + #ARGV", "1", "a", "b"]),
        ":2"
    );
}

#[test]
fn functions_load_call_list_dump_restore_and_survive_a_reload() {
    let s = Server::start(&[]);
    let mut r = s.raw();
    let lib = "#!lua name=mylib\n\
        redis.register_function('incr2', function(keys, args) \
            return redis.call('incrby', keys[1], 2) end)\n\
        redis.register_function{function_name='get_ro', callback=function(keys) \
            return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads'}";
    assert_eq!(raw(&mut r, &["FUNCTION", "LOAD", lib]), "mylib");
    assert_eq!(
        raw(&mut r, &["FUNCTION", "LOAD", lib]),
        "-ERR Library 'mylib' already exists"
    );
    assert_eq!(raw(&mut r, &["FCALL", "incr2", "1", "c"]), ":2");
    assert_eq!(raw(&mut r, &["FCALL", "INCR2", "1", "c"]), ":4");
    assert_eq!(raw(&mut r, &["FCALL_RO", "get_ro", "1", "c"]), "4");
    assert!(raw(&mut r, &["FCALL_RO", "incr2", "1", "c"])
        .starts_with("-ERR Can not execute a script with write flag using *_ro command."));
    assert_eq!(
        raw(&mut r, &["FCALL", "nosuch", "0"]),
        "-ERR Function not found"
    );
    let list = raw(&mut r, &["FUNCTION", "LIST"]);
    assert!(
        list.contains("mylib") && list.contains("reads") && list.contains("no-writes"),
        "{list}"
    );
    // Loading runs with only redis.register_function and redis.log.
    let e = raw(
        &mut r,
        &["FUNCTION", "LOAD", "#!lua name=bad\nredis.call('ping')"],
    );
    assert_eq!(
        e,
        "-ERR Error registering functions: ERR user_function:2: Script attempted to access \
         nonexistent global variable 'call'"
    );
    // DUMP / FLUSH / RESTORE.
    r.send(b"*2\r\n$8\r\nFUNCTION\r\n$4\r\nDUMP\r\n");
    let len: usize = r.line().trim_end()[1..].parse().unwrap();
    let payload = r.bytes(len + 2)[..len].to_vec();
    assert_eq!(raw(&mut r, &["FUNCTION", "FLUSH"]), "+OK");
    assert_eq!(
        raw(&mut r, &["FCALL", "incr2", "1", "c"]),
        "-ERR Function not found"
    );
    let mut req = b"*3\r\n$8\r\nFUNCTION\r\n$7\r\nRESTORE\r\n".to_vec();
    req.extend_from_slice(format!("${len}\r\n").as_bytes());
    req.extend_from_slice(&payload);
    req.extend_from_slice(b"\r\n");
    r.send(&req);
    assert_eq!(read_reply(&mut r), "+OK");
    assert_eq!(raw(&mut r, &["FCALL", "incr2", "1", "c"]), ":6");
    // Saved in the RDB file and loaded back.
    assert_eq!(raw(&mut r, &["DEBUG", "RELOAD"]), "+OK");
    assert_eq!(raw(&mut r, &["FCALL", "incr2", "1", "c"]), ":8");
    let stats = raw(&mut r, &["FUNCTION", "STATS"]);
    assert!(
        stats.contains("libraries_count,:1") && stats.contains("functions_count,:2"),
        "{stats}"
    );
}

/// Each thread keeps the functions FCALL found until the libraries change
/// (DECISIONS 225): every change is seen at once, by every connection,
/// in the function run and in the flags the call is checked with.
#[test]
fn fcall_sees_every_change_to_the_libraries() {
    let s = Server::start(&[]);
    let (mut a, mut b) = (s.raw(), s.raw());
    let lib = |v: &str, flags: &str| {
        format!(
            "#!lua name=cached\n\
             redis.register_function{{function_name='f', callback=function() return {v} end, \
             flags={{{flags}}}}}\n\
             redis.register_function('abcdefg', function() return {v}0 end)"
        )
    };
    assert_eq!(raw(&mut a, &["FUNCTION", "LOAD", &lib("1", "")]), "cached");
    for r in [&mut a, &mut b] {
        assert_eq!(raw(r, &["FCALL", "f", "0"]), ":1");
    }
    // A function that may write is refused over maxmemory; one with
    // no-writes is not (the flags the dispatcher asks for).
    assert_eq!(raw(&mut a, &["CONFIG", "SET", "maxmemory", "1"]), "+OK");
    assert!(raw(&mut a, &["FCALL", "f", "0"]).starts_with("-OOM "));
    assert_eq!(raw(&mut a, &["CONFIG", "SET", "maxmemory", "0"]), "+OK");
    let v2 = lib("2", "'no-writes'");
    assert_eq!(raw(&mut b, &["FUNCTION", "LOAD", "REPLACE", &v2]), "cached");
    assert_eq!(raw(&mut a, &["CONFIG", "SET", "maxmemory", "1"]), "+OK");
    for r in [&mut a, &mut b] {
        assert_eq!(raw(r, &["FCALL", "f", "0"]), ":2");
        assert_eq!(raw(r, &["FCALL_RO", "f", "0"]), ":2");
    }
    assert_eq!(raw(&mut a, &["CONFIG", "SET", "maxmemory", "0"]), "+OK");
    let v3 = lib("3", "");
    assert_eq!(raw(&mut b, &["FUNCTION", "LOAD", "REPLACE", &v3]), "cached");
    for r in [&mut a, &mut b] {
        assert!(raw(r, &["FCALL_RO", "f", "0"])
            .starts_with("-ERR Can not execute a script with write flag using *_ro command."));
        assert_eq!(raw(r, &["FCALL", "f", "0"]), ":3");
    }
    // Every spelling of a name (more than a thread keeps at once).
    for i in 0..128u32 {
        let name: String = "abcdefg"
            .chars()
            .enumerate()
            .map(|(j, c)| {
                if i >> j & 1 == 1 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        assert_eq!(raw(&mut a, &["FCALL", &name, "0"]), ":30", "{name}");
    }
    assert_eq!(raw(&mut b, &["FUNCTION", "DELETE", "cached"]), "+OK");
    for r in [&mut a, &mut b] {
        assert_eq!(raw(r, &["FCALL", "f", "0"]), "-ERR Function not found");
        assert_eq!(
            raw(r, &["FCALL", "ABCDEFG", "0"]),
            "-ERR Function not found"
        );
    }
}

#[test]
fn busy_scripts_get_busy_replies_and_can_be_killed() {
    let s = Server::start(&["--busy-reply-threshold", "50"]);
    let mut others: Vec<Raw> = (0..3).map(|_| s.raw()).collect();
    let mut runner = s.raw();
    runner.send(b"*3\r\n$4\r\nEVAL\r\n$17\r\nwhile true do end\r\n$1\r\n0\r\n");
    // Running past the threshold (PONG until the script has started).
    eventually("the script to make the server busy", || {
        raw(&mut others[0], &["PING"]).starts_with("-BUSY")
    });
    // Whatever thread a client is on, it gets BUSY while the script (which
    // declared no keys: it holds everything) runs.
    for o in others.iter_mut() {
        assert!(raw(o, &["PING"]).starts_with("-BUSY Redis is busy running a script."));
    }
    assert!(raw(&mut others[0], &["FUNCTION", "KILL"]).starts_with("-BUSY"));
    assert_eq!(raw(&mut others[1], &["SCRIPT", "KILL"]), "+OK");
    let killed = read_reply(&mut runner);
    assert!(
        killed.starts_with("-ERR Script killed by user with SCRIPT KILL..."),
        "{killed}"
    );
    eventually("the script is gone", || {
        raw(&mut others[2], &["PING"]) == "+PONG"
    });
    assert_eq!(
        raw(&mut others[2], &["SCRIPT", "KILL"]),
        "-NOTBUSY No scripts in execution right now."
    );
    // One that wrote cannot be killed; SHUTDOWN NOSAVE still stops the server.
    runner.send(
        b"*4\r\n$4\r\nEVAL\r\n$44\r\nredis.call('set',KEYS[1],'1') while 1 do end\r\n$1\r\n1\r\n$1\r\nx\r\n",
    );
    // Busy once past the threshold (it holds only `x`: PING still runs;
    // its write, its first statement, is done by then).
    let mut kill = String::new();
    eventually("the writing script to be busy", || {
        kill = raw(&mut others[0], &["SCRIPT", "KILL"]);
        !kill.starts_with("-NOTBUSY")
    });
    assert!(kill.starts_with("-UNKILLABLE"), "{kill}");
    assert!(raw(&mut others[1], &["SHUTDOWN"]).starts_with("-BUSY"));
    others[2].send(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n");
    eventually("the server exits", || others[0].closed());
}

#[test]
fn cjson_as_redis() {
    // Expected replies from redis-server 7.0.15.
    let s = Server::start(&[]);
    let mut r = s.raw();
    let cases: &[(&str, &str)] = &[
        (
            "return cjson.encode({1,2,3,'a/b',{x=1}})",
            "[1,2,3,\"a\\/b\",{\"x\":1}]",
        ),
        (
            "return table.concat(cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]'), ' ')",
            "0 -5000 -1 0.0003 1023.2 0",
        ),
        ("return cjson.encode({})", "{}"),
        ("return cjson.encode({a=cjson.null})", "{\"a\":null}"),
        ("return cjson.encode(1/3)", "0.33333333333333"),
        ("return cjson.encode({[1.5]=1})", "{\"1.5\":1}"),
        (
            "return cjson.decode('[1,2')",
            "-ERR user_script:1: Expected comma or array end but found T_END at character 5 \
             script: c107001b5ba2ff860ee2557f64da37c4767ef4bd, on @user_script:1.",
        ),
        (
            "return cjson.encode({[false]=1})",
            "-ERR user_script:1: Cannot serialise boolean: table key must be a number or string \
             script: 3888fd4da9de5edc2de47ad6e74002c425e82a7c, on @user_script:1.",
        ),
        ("return cjson.decode('nan')", ":-9223372036854775808"),
    ];
    for (code, want) in cases {
        assert_eq!(&raw(&mut r, &["EVAL", code, "0"]), want, "{code}");
    }
}

#[test]
fn cmsgpack_as_redis() {
    // Expected replies from redis-server 7.0.15.
    let s = Server::start(&[]);
    let mut r = s.raw();
    let hex = "local h = '' for i = 1, #e do h = h .. string.format('%02x', string.byte(e, i)) end return h";
    let cases: &[(&str, &str)] = &[
        ("local e = cmsgpack.pack(0.1)", "cb3fb999999999999a"),
        (
            "local e = cmsgpack.pack(-1099511627776)",
            "d3ffffff0000000000",
        ),
        (
            "local e = cmsgpack.pack({1,2,{a=1},'x',true,false,nil})",
            "96010281a16101a178c3c2",
        ),
        (
            "local e = cmsgpack.pack(1.5, 300, -200, 70000, 5000000000, -40000, -3000000000, {})",
            "ca3fc00000cd012cd1ff38ce00011170cf000000012a05f200d2ffff63c0d3ffffffff4d2fa20090",
        ),
    ];
    for (code, want) in cases {
        let script = format!("{code} {hex}");
        assert_eq!(&raw(&mut r, &["EVAL", &script, "0"]), want, "{code}");
    }
    assert_eq!(
        raw(
            &mut r,
            &[
                "EVAL",
                "return {cmsgpack.unpack(cmsgpack.pack(1,'a',{b=2}))}",
                "0"
            ]
        ),
        "*3[:1,a,*0[]]"
    );
    // A deeply nested payload is an error, not a crash.
    let e = raw(
        &mut r,
        &[
            "EVAL",
            "return cmsgpack.unpack(string.rep(string.char(0x91), 100000) .. string.char(1))",
            "0",
        ],
    );
    assert!(e.starts_with("-ERR"), "{e}");
    assert_eq!(raw(&mut r, &["PING"]), "+PONG");
}

/// A script's LPUSH serves a client blocked in BLPOP on that key when the
/// script ends (python-redis-lock's reset wakes waiters this way), for
/// EVAL and FCALL alike, and a BLPOP with a 60 s timeout gets the element
/// at once rather than at its timeout (30 s: a bound a loaded machine
/// cannot reach by slowness alone).
#[test]
fn a_script_push_wakes_a_blocked_client() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let lib = "#!lua name=pushlib\nredis.register_function('push', function(keys, args) return redis.call('lpush', keys[1], 'x') end)";
    let _: String = cmd(&mut c, &["FUNCTION", "LOAD", lib]);
    for (i, call) in [
        &[
            "EVAL",
            "redis.call('del', KEYS[1]); return redis.call('lpush', KEYS[1], 'x')",
            "1",
        ][..],
        &["FCALL", "push", "1"][..],
    ]
    .iter()
    .enumerate()
    {
        let key = format!("signal{i}");
        let mut b = s.conn();
        let k = key.clone();
        let waiter = std::thread::spawn(move || {
            let t = std::time::Instant::now();
            let v: Option<(String, String)> = cmd(&mut b, &["BLPOP", &k, "60"]);
            (v, t.elapsed())
        });
        eventually("the BLPOP to block", || {
            info_field::<i64>(&mut c, "blocked_clients") == 1
        });
        let mut args = call.to_vec();
        args.push(&key);
        let n: i64 = cmd(&mut c, &args);
        assert_eq!(n, 1);
        let (v, waited) = waiter.join().unwrap();
        assert_eq!(v, Some((key.clone(), "x".to_string())), "{}", call[0]);
        assert!(
            waited < std::time::Duration::from_secs(30),
            "{}: woken only at its timeout",
            call[0]
        );
    }
}

/// SLOWLOG GET's entries as (args, client address, client name), newest
/// first, the timing fields left out.
fn slowlog(c: &mut redis::Connection) -> Vec<(Vec<String>, String, String)> {
    let entries: Vec<(i64, i64, i64, Vec<String>, String, String)> =
        cmd(c, &["SLOWLOG", "GET", "-1"]);
    entries
        .into_iter()
        .map(|(_, _, _, args, addr, name)| (args, addr, name))
        .collect()
}

#[test]
fn a_scripts_commands_go_to_the_slowlog_as_redis_logs_them() {
    let script = "redis.call('set','a','b'); return redis.call('get','a')";
    let s = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    let mut logs = vec![];
    for mut c in [s.conn(), o.conn()] {
        let _: () = cmd(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
        let _: () = cmd(&mut c, &["CLIENT", "SETNAME", "me"]);
        let _: () = cmd(&mut c, &["SLOWLOG", "RESET"]);
        assert_eq!(cmd::<String>(&mut c, &["EVAL", script, "0"]), "b");
        let log = slowlog(&mut c);
        // The EVAL itself, with our connection's address and name.
        assert_eq!(log[0].0, ["EVAL", script, "0"]);
        assert_eq!(log[0].2, "me");
        logs.push(log[..3].iter().skip(1).cloned().collect::<Vec<_>>());
    }
    let lua = |args: &[&str]| {
        let args = args.iter().map(|a| a.to_string()).collect();
        (args, "?:0".to_string(), String::new())
    };
    assert_eq!(logs[0], [lua(&["get", "a"]), lua(&["set", "a", "b"])]);
    assert_eq!(logs[0], logs[1], "as redis-server 7.0");
}

#[test]
fn a_scripts_slow_fast_command_is_a_latency_event() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["CONFIG", "SET", "latency-monitor-threshold", "1"]);
    // MGET is a fast command; a 4 KB value 7,000 times (28 MB of reply,
    // copied into Lua) takes more than a millisecond in any build (7,000
    // EXISTS did not in a release build). Only the script's call can be a
    // "fast-command" event: EVAL is not fast.
    let _: () = cmd(&mut c, &["SET", "k", &"v".repeat(4096)]);
    let script = "local t = {} for i = 1, 7000 do t[i] = 'k' end \
                  for i = 1, 3 do redis.call('mget', unpack(t)) end return 1";
    let _: i64 = cmd(&mut c, &["EVAL", script, "0"]);
    let latest: Vec<(String, i64, i64, i64)> = cmd(&mut c, &["LATENCY", "LATEST"]);
    let events: Vec<&str> = latest.iter().map(|e| e.0.as_str()).collect();
    assert!(events.contains(&"fast-command"), "{latest:?}");
}
