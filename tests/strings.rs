//! String commands through the real binary: replies, Redis's exact error
//! strings, integer/float overflow rules, length limits and expiry options.
mod common;
use common::*;

use std::thread::sleep;
use std::time::Duration;

type C = redis::Connection;

fn get(c: &mut C, k: &str) -> Option<String> {
    cmd(c, &["GET", k])
}

#[test]
fn set_variants_and_get() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(cmd::<String>(c, &["SET", "k", "v"]), "OK");
    assert_eq!(cmd::<Option<String>>(c, &["SET", "k", "w", "NX"]), None);
    assert_eq!(cmd::<String>(c, &["SET", "k", "w", "XX"]), "OK");
    assert_eq!(cmd::<Option<String>>(c, &["SET", "nk", "w", "XX"]), None);
    assert_eq!(
        cmd::<Option<String>>(c, &["SET", "k", "x", "GET"]),
        Some("w".into())
    );
    assert_eq!(cmd::<Option<String>>(c, &["SET", "k2", "x", "GET"]), None);
    assert_eq!(get(c, "k2").as_deref(), Some("x"));
    // Repeated options are accepted as in Redis; the last expiry wins.
    assert_eq!(
        cmd::<String>(c, &["SET", "k", "v", "EX", "1", "EX", "100"]),
        "OK"
    );
    assert_eq!(
        cmd::<Option<String>>(c, &["SET", "k", "v", "NX", "NX"]),
        None
    );
    assert_eq!(
        cmd_err(c, &["SET", "k", "v", "NX", "XX"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(c, &["SET", "k", "v", "EX", "1", "PX", "1"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(c, &["SET", "k", "v", "KEEPTTL", "EX", "1"]),
        "ERR syntax error"
    );
    assert_eq!(cmd_err(c, &["SET", "k", "v", "EX"]), "ERR syntax error");
    assert_eq!(
        cmd_err(c, &["SET", "k", "v", "PERSIST"]),
        "ERR syntax error"
    );
    // Syntax is checked before the expire value.
    assert_eq!(
        cmd_err(c, &["SET", "k", "v", "EX", "-1", "BAD"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(c, &["SET", "k", "v", "EX", "0"]),
        "ERR invalid expire time in 'set' command"
    );
    assert_eq!(
        cmd_err(c, &["SET", "k", "v", "EX", "9223372036854775807"]),
        "ERR invalid expire time in 'set' command"
    );
    assert_eq!(
        cmd_err(c, &["SET", "k", "v", "PX", "x"]),
        "ERR value is not an integer or out of range"
    );
    // PXAT in the past: OK, and the key is gone.
    assert_eq!(cmd::<String>(c, &["SET", "k", "v", "PXAT", "1"]), "OK");
    assert_eq!(get(c, "k"), None);
    assert_eq!(
        cmd_err(c, &["SET", "k"]),
        "ERR wrong number of arguments for 'set' command"
    );
}

#[test]
fn setnx_setex_psetex_and_ttl_options() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(cmd::<i64>(c, &["SETNX", "a", "1"]), 1);
    assert_eq!(cmd::<i64>(c, &["SETNX", "a", "2"]), 0);
    assert_eq!(get(c, "a").as_deref(), Some("1"));
    assert_eq!(
        cmd_err(c, &["SETEX", "k", "0", "v"]),
        "ERR invalid expire time in 'setex' command"
    );
    assert_eq!(
        cmd_err(c, &["PSETEX", "k", "-5", "v"]),
        "ERR invalid expire time in 'psetex' command"
    );
    assert_eq!(
        cmd_err(c, &["SETEX", "k", "9223372036854775", "v"]),
        "ERR invalid expire time in 'setex' command"
    );
    assert_eq!(
        cmd_err(c, &["SETEX", "k", "x", "v"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(cmd::<String>(c, &["SETEX", "long", "100", "v"]), "OK");
    assert_eq!(cmd::<String>(c, &["PSETEX", "short", "150", "v"]), "OK");
    // TTLs a loaded machine cannot run out between two commands for the
    // keys looked at before the sleep.
    assert_eq!(cmd::<String>(c, &["PSETEX", "kept", "100000", "v"]), "OK");
    assert_eq!(cmd::<String>(c, &["SET", "kept", "w", "KEEPTTL"]), "OK");
    let pttl: i64 = cmd(c, &["PTTL", "kept"]);
    assert!((1..=100_000).contains(&pttl), "{pttl}");
    assert_eq!(
        cmd::<String>(c, &["PSETEX", "cleared", "100000", "v"]),
        "OK"
    );
    assert_eq!(cmd::<String>(c, &["SET", "cleared", "w"]), "OK");
    assert_eq!(cmd::<i64>(c, &["TTL", "cleared"]), -1);
    // INCR, APPEND and SETRANGE keep the TTL.
    assert_eq!(cmd::<String>(c, &["PSETEX", "n", "100000", "1"]), "OK");
    assert_eq!(cmd::<i64>(c, &["INCR", "n"]), 2);
    assert!(cmd::<i64>(c, &["PTTL", "n"]) > 0);
    // At least 400 ms later, the 150 ms key is gone.
    sleep(Duration::from_millis(400));
    assert_eq!(get(c, "short"), None);
    assert_eq!(get(c, "long").as_deref(), Some("v"));
    assert_eq!(get(c, "cleared").as_deref(), Some("w"));
}

#[test]
fn getex_options() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    // A missing key answers nil before its expire value is validated.
    assert_eq!(
        cmd::<Option<String>>(c, &["GETEX", "none", "EX", "-1"]),
        None
    );
    assert_eq!(cmd::<String>(c, &["SET", "k", "v"]), "OK");
    assert_eq!(
        cmd_err(c, &["GETEX", "k", "EX", "-1"]),
        "ERR invalid expire time in 'getex' command"
    );
    assert_eq!(
        cmd_err(c, &["GETEX", "k", "EX", "abc"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        cmd_err(c, &["GETEX", "k", "PERSIST", "EX", "1"]),
        "ERR syntax error"
    );
    assert_eq!(cmd_err(c, &["GETEX", "k", "NX"]), "ERR syntax error");
    assert_eq!(cmd_err(c, &["GETEX", "k", "KEEPTTL"]), "ERR syntax error");
    assert_eq!(cmd::<String>(c, &["GETEX", "k"]), "v");
    assert_eq!(cmd::<String>(c, &["GETEX", "k", "PX", "150"]), "v");
    for k in ["p", "q", "r"] {
        assert_eq!(cmd::<String>(c, &["SET", k, "v"]), "OK");
    }
    // A TTL a loaded machine cannot run out before the PERSIST.
    assert_eq!(cmd::<String>(c, &["GETEX", "p", "PX", "100000"]), "v");
    assert_eq!(cmd::<String>(c, &["GETEX", "p", "PERSIST"]), "v");
    assert_eq!(cmd::<i64>(c, &["TTL", "p"]), -1);
    assert_eq!(cmd::<String>(c, &["GETEX", "q", "EX", "100"]), "v");
    let far = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1000)
        .to_string();
    assert_eq!(cmd::<String>(c, &["GETEX", "r", "EXAT", &far]), "v");
    assert_eq!(cmd::<String>(c, &["SET", "old", "v"]), "OK");
    // An absolute time in the past deletes the key after replying.
    assert_eq!(cmd::<String>(c, &["GETEX", "old", "PXAT", "1"]), "v");
    assert_eq!(get(c, "old"), None);
    sleep(Duration::from_millis(400));
    assert_eq!(get(c, "k"), None);
    assert_eq!(get(c, "p").as_deref(), Some("v"));
    assert_eq!(get(c, "q").as_deref(), Some("v"));
    assert_eq!(get(c, "r").as_deref(), Some("v"));
}

#[test]
fn getset_getdel_mget_mset_msetnx() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(cmd::<Option<String>>(c, &["GETSET", "k", "1"]), None);
    assert_eq!(
        cmd::<Option<String>>(c, &["GETSET", "k", "2"]),
        Some("1".into())
    );
    assert_eq!(cmd::<Option<String>>(c, &["GETDEL", "k"]), Some("2".into()));
    assert_eq!(cmd::<Option<String>>(c, &["GETDEL", "k"]), None);
    assert_eq!(
        cmd::<String>(c, &["MSET", "a", "1", "b", "2", "a", "3"]),
        "OK"
    );
    assert_eq!(
        cmd::<Vec<Option<String>>>(c, &["MGET", "a", "b", "zz"]),
        vec![Some("3".into()), Some("2".into()), None]
    );
    assert_eq!(
        cmd_err(c, &["MSET", "a", "1", "b"]),
        "ERR wrong number of arguments for 'mset' command"
    );
    assert_eq!(
        cmd_err(c, &["MSETNX", "a", "1", "b"]),
        "ERR wrong number of arguments for 'msetnx' command"
    );
    assert_eq!(cmd::<i64>(c, &["MSETNX", "x", "1", "a", "9"]), 0);
    assert_eq!(get(c, "x"), None);
    assert_eq!(cmd::<i64>(c, &["MSETNX", "x", "1", "y", "2"]), 1);
    assert_eq!(get(c, "y").as_deref(), Some("2"));
    assert_eq!(
        cmd_err(c, &["MGET"]),
        "ERR wrong number of arguments for 'mget' command"
    );
}

#[test]
fn counters_and_overflow() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(cmd::<i64>(c, &["INCR", "n"]), 1);
    assert_eq!(cmd::<i64>(c, &["INCRBY", "n", "10"]), 11);
    assert_eq!(cmd::<i64>(c, &["DECR", "n"]), 10);
    assert_eq!(cmd::<i64>(c, &["DECRBY", "n", "-5"]), 15);
    assert_eq!(cmd::<i64>(c, &["DECR", "m"]), -1);
    let max = i64::MAX.to_string();
    assert_eq!(cmd::<String>(c, &["SET", "big", &max]), "OK");
    let overflow = "ERR increment or decrement would overflow";
    assert_eq!(cmd_err(c, &["INCR", "big"]), overflow);
    assert_eq!(
        cmd_err(c, &["INCRBY", "m", &i64::MIN.to_string()]),
        overflow
    );
    assert_eq!(
        cmd_err(c, &["DECRBY", "n", "-9223372036854775808"]),
        "ERR decrement would overflow"
    );
    let not_int = "ERR value is not an integer or out of range";
    assert_eq!(cmd_err(c, &["INCRBY", "n", "1.5"]), not_int);
    assert_eq!(cmd_err(c, &["INCRBY", "n", "9223372036854775808"]), not_int);
    for bad in ["abc", " 1", "1 ", "01", "1.0", ""] {
        assert_eq!(cmd::<String>(c, &["SET", "s", bad]), "OK");
        assert_eq!(cmd_err(c, &["INCR", "s"]), not_int, "{bad:?}");
    }
    // A raw string holding a canonical integer still counts.
    assert_eq!(cmd::<String>(c, &["SET", "r", "1"]), "OK");
    assert_eq!(cmd::<i64>(c, &["APPEND", "r", "0"]), 2);
    assert_eq!(cmd::<i64>(c, &["INCR", "r"]), 11);
}

#[test]
fn incrbyfloat_matches_redis_formatting() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let f = |c: &mut C, k: &str, by: &str| cmd::<String>(c, &["INCRBYFLOAT", k, by]);
    assert_eq!(f(c, "x", "10.5"), "10.5");
    assert_eq!(f(c, "x", "0.1"), "10.6");
    assert_eq!(cmd::<String>(c, &["SET", "y", "1"]), "OK");
    assert_eq!(f(c, "y", "-1.1"), "-0.1");
    assert_eq!(f(c, "z", "3.0e3"), "3000");
    assert_eq!(f(c, "w", "1e20"), "100000000000000000000");
    assert_eq!(f(c, "h", "0x10"), "16");
    assert_eq!(f(c, "h", "1e-20"), "16");
    assert_eq!(f(c, "h", "-16"), "0");
    // The stored value is the formatted text; INCR then works on it.
    assert_eq!(cmd::<i64>(c, &["INCR", "z"]), 3001);
    let not_float = "ERR value is not a valid float";
    for bad in ["abc", " 1", "1 ", "nan", "1e", "", "1e5000"] {
        assert_eq!(cmd_err(c, &["INCRBYFLOAT", "x", bad]), not_float, "{bad:?}");
    }
    assert_eq!(cmd::<String>(c, &["SET", "s", "foo"]), "OK");
    assert_eq!(cmd_err(c, &["INCRBYFLOAT", "s", "1"]), not_float);
    assert_eq!(
        cmd_err(c, &["INCRBYFLOAT", "x", "inf"]),
        "ERR increment would produce NaN or Infinity"
    );
    assert_eq!(cmd::<String>(c, &["SET", "e", "1.5e3"]), "OK");
    assert_eq!(f(c, "e", "0"), "1500");
    // A NUL inside the number: the whole string must be the number, as
    // Redis's string2ld (SETRANGE made "1\02"; so is an increment "1\02").
    assert_eq!(cmd::<String>(c, &["SET", "n", "1"]), "OK");
    assert_eq!(cmd::<i64>(c, &["SETRANGE", "n", "2", "2"]), 3);
    assert_eq!(cmd_err(c, &["INCRBYFLOAT", "n", "1"]), not_float);
    assert_eq!(cmd_err(c, &["INCRBYFLOAT", "x", "1\x002"]), not_float);
    assert_eq!(cmd::<i64>(c, &["HSET", "hn", "f", "1\x002"]), 1);
    let not_hash_float = "ERR hash value is not a float";
    assert_eq!(
        cmd_err(c, &["HINCRBYFLOAT", "hn", "f", "1"]),
        not_hash_float
    );
    // INCRBYFLOAT keeps the TTL (propagated as SET .. KEEPTTL); one a
    // loaded machine cannot run out before the INCRBYFLOAT.
    assert_eq!(cmd::<String>(c, &["PSETEX", "t", "100000", "1"]), "OK");
    assert_eq!(f(c, "t", "1"), "2");
    let pttl: i64 = cmd(c, &["PTTL", "t"]);
    assert!((1..=100_000).contains(&pttl), "{pttl}");
}

#[test]
fn append_strlen_ranges() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(cmd::<i64>(c, &["APPEND", "k", "Hello"]), 5);
    assert_eq!(cmd::<i64>(c, &["APPEND", "k", " World"]), 11);
    assert_eq!(cmd::<i64>(c, &["STRLEN", "k"]), 11);
    assert_eq!(cmd::<i64>(c, &["STRLEN", "none"]), 0);
    assert_eq!(cmd::<String>(c, &["SET", "n", "-123"]), "OK");
    assert_eq!(cmd::<i64>(c, &["STRLEN", "n"]), 4);
    let gr = |c: &mut C, a: &str, b: &str| cmd::<String>(c, &["GETRANGE", "k", a, b]);
    assert_eq!(gr(c, "0", "4"), "Hello");
    assert_eq!(gr(c, "-5", "-1"), "World");
    assert_eq!(gr(c, "0", "-1"), "Hello World");
    assert_eq!(gr(c, "-100", "100"), "Hello World");
    assert_eq!(gr(c, "5", "2"), "");
    assert_eq!(gr(c, "-1", "-5"), "");
    assert_eq!(gr(c, "20", "30"), "");
    assert_eq!(cmd::<String>(c, &["SUBSTR", "k", "6", "-1"]), "World");
    assert_eq!(cmd::<String>(c, &["GETRANGE", "n", "1", "2"]), "12");
    assert_eq!(cmd::<String>(c, &["GETRANGE", "none", "0", "-1"]), "");
    assert_eq!(
        cmd_err(c, &["GETRANGE", "k", "a", "1"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(cmd::<i64>(c, &["SETRANGE", "k", "6", "Redis"]), 11);
    assert_eq!(get(c, "k").as_deref(), Some("Hello Redis"));
    assert_eq!(cmd::<i64>(c, &["SETRANGE", "p", "3", "ab"]), 5);
    assert_eq!(get(c, "p").as_deref(), Some("\0\0\0ab"));
    assert_eq!(cmd::<i64>(c, &["SETRANGE", "none", "5", ""]), 0);
    assert_eq!(get(c, "none"), None);
    assert_eq!(cmd::<i64>(c, &["SETRANGE", "k", "100", ""]), 11);
    assert_eq!(cmd::<i64>(c, &["SETRANGE", "n", "0", "9"]), 4);
    assert_eq!(get(c, "n").as_deref(), Some("9123"));
    assert_eq!(
        cmd_err(c, &["SETRANGE", "k", "-1", "x"]),
        "ERR offset is out of range"
    );
    assert_eq!(
        cmd_err(c, &["SETRANGE", "k", "536870912", "x"]),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
}

#[test]
fn length_limit_follows_proto_max_bulk_len() {
    let s = Server::start(&["--proto-max-bulk-len", "1000"]);
    let c = &mut s.conn();
    let err = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
    assert_eq!(cmd::<i64>(c, &["SETRANGE", "k", "990", "0123456789"]), 1000);
    assert_eq!(cmd_err(c, &["APPEND", "k", "x"]), err);
    assert_eq!(cmd_err(c, &["SETRANGE", "k", "995", "0123456789"]), err);
    assert_eq!(cmd_err(c, &["SETRANGE", "new", "1000", "x"]), err);
    assert_eq!(cmd::<i64>(c, &["STRLEN", "k"]), 1000);
}

#[test]
fn lcs_variants() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(
        cmd::<String>(c, &["MSET", "a", "ohmytext", "b", "mynewtext"]),
        "OK"
    );
    assert_eq!(cmd::<String>(c, &["LCS", "a", "b"]), "mytext");
    assert_eq!(cmd::<i64>(c, &["LCS", "a", "b", "LEN"]), 6);
    assert_eq!(cmd::<String>(c, &["LCS", "a", "none"]), "");
    use redis::Value as V;
    let b = |s: &str| V::BulkString(s.as_bytes().to_vec());
    let pair = |x: i64, y: i64| V::Array(vec![V::Int(x), V::Int(y)]);
    let v: V = cmd(
        c,
        &["LCS", "a", "b", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"],
    );
    let expect = V::Array(vec![
        b("matches"),
        V::Array(vec![V::Array(vec![pair(4, 7), pair(5, 8), V::Int(4)])]),
        b("len"),
        V::Int(6),
    ]);
    assert_eq!(v, expect);
    let v: V = cmd(c, &["LCS", "a", "b", "IDX"]);
    let expect = V::Array(vec![
        b("matches"),
        V::Array(vec![
            V::Array(vec![pair(4, 7), pair(5, 8)]),
            V::Array(vec![pair(2, 3), pair(0, 1)]),
        ]),
        b("len"),
        V::Int(6),
    ]);
    assert_eq!(v, expect);
    assert_eq!(
        cmd_err(c, &["LCS", "a", "b", "IDX", "LEN"]),
        "ERR If you want both the length and indexes, please just use IDX."
    );
    assert_eq!(cmd_err(c, &["LCS", "a", "b", "FOO"]), "ERR syntax error");
    assert_eq!(
        cmd_err(c, &["LCS", "a", "b", "MINMATCHLEN"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(c, &["LCS", "a", "b", "MINMATCHLEN", "x"]),
        "ERR value is not an integer or out of range"
    );
}

#[test]
fn lcs_transient_memory_limit() {
    let s = Server::start(&["--proto-max-bulk-len", "10000"]);
    let c = &mut s.conn();
    let long = "x".repeat(100);
    assert_eq!(cmd::<String>(c, &["MSET", "a", &long, "b", &long]), "OK");
    assert_eq!(
        cmd_err(c, &["LCS", "a", "b"]),
        "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"
    );
}

#[test]
fn binary_values_round_trip() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let bin: Vec<u8> = (0..=255u8).collect();
    let _: () = redis::cmd("SET").arg("bin").arg(&bin).query(c).unwrap();
    let got: Vec<u8> = redis::cmd("GET").arg("bin").query(c).unwrap();
    assert_eq!(got, bin);
    let got: Vec<u8> = redis::cmd("GETRANGE")
        .arg("bin")
        .arg(250)
        .arg(-1)
        .query(c)
        .unwrap();
    assert_eq!(got, bin[250..]);
}
