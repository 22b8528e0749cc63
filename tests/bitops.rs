//! Bitmap commands through the real binary: bit order, ranges in BYTE and
//! BIT units, BITOP, BITFIELD types/overflow modes, and Redis's error texts.
mod common;
use common::*;

use redis::Value as V;

type C = redis::Connection;

fn bytes(c: &mut C, k: &str) -> Vec<u8> {
    redis::cmd("GET").arg(k).query(c).unwrap()
}

const OFFSET_ERR: &str = "ERR bit offset is not an integer or out of range";

#[test]
fn setbit_getbit() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(cmd::<i64>(c, &["SETBIT", "k", "7", "1"]), 0);
    assert_eq!(cmd::<i64>(c, &["SETBIT", "k", "7", "1"]), 1);
    assert_eq!(cmd::<i64>(c, &["SETBIT", "k", "0", "1"]), 0);
    assert_eq!(bytes(c, "k"), vec![0x81]);
    assert_eq!(cmd::<i64>(c, &["SETBIT", "k", "17", "1"]), 0);
    assert_eq!(bytes(c, "k"), vec![0x81, 0, 0x40]);
    assert_eq!(cmd::<i64>(c, &["SETBIT", "k", "7", "0"]), 1);
    assert_eq!(cmd::<i64>(c, &["GETBIT", "k", "0"]), 1);
    assert_eq!(cmd::<i64>(c, &["GETBIT", "k", "7"]), 0);
    assert_eq!(cmd::<i64>(c, &["GETBIT", "k", "1000"]), 0);
    assert_eq!(cmd::<i64>(c, &["GETBIT", "none", "3"]), 0);
    // Integers are their decimal text: '1' is 0x31.
    assert_eq!(cmd::<String>(c, &["SET", "n", "1"]), "OK");
    assert_eq!(cmd::<i64>(c, &["GETBIT", "n", "2"]), 1);
    assert_eq!(cmd::<i64>(c, &["SETBIT", "n", "7", "0"]), 1);
    assert_eq!(cmd::<String>(c, &["GET", "n"]), "0");
    let bit_err = "ERR bit is not an integer or out of range";
    assert_eq!(cmd_err(c, &["SETBIT", "k", "1", "2"]), bit_err);
    assert_eq!(cmd_err(c, &["SETBIT", "k", "1", "x"]), bit_err);
    assert_eq!(cmd_err(c, &["SETBIT", "k", "-1", "1"]), OFFSET_ERR);
    assert_eq!(cmd_err(c, &["SETBIT", "k", "x", "1"]), OFFSET_ERR);
    assert_eq!(cmd_err(c, &["SETBIT", "k", "4294967296", "1"]), OFFSET_ERR);
    assert_eq!(cmd_err(c, &["GETBIT", "k", "4294967296"]), OFFSET_ERR);
    assert_eq!(
        cmd_err(c, &["GETBIT", "k"]),
        "ERR wrong number of arguments for 'getbit' command"
    );
}

#[test]
fn offsets_follow_proto_max_bulk_len() {
    let s = Server::start(&["--proto-max-bulk-len", "1000"]);
    let c = &mut s.conn();
    assert_eq!(cmd::<i64>(c, &["SETBIT", "k", "7999", "1"]), 0);
    assert_eq!(cmd_err(c, &["SETBIT", "k", "8000", "1"]), OFFSET_ERR);
    assert_eq!(cmd::<i64>(c, &["STRLEN", "k"]), 1000);
}

#[test]
fn bitcount_ranges() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    assert_eq!(cmd::<String>(c, &["SET", "k", "foobar"]), "OK");
    let bc = |c: &mut C, a: &[&str]| {
        let mut v = vec!["BITCOUNT", "k"];
        v.extend_from_slice(a);
        cmd::<i64>(c, &v)
    };
    assert_eq!(bc(c, &[]), 26);
    assert_eq!(bc(c, &["0", "0"]), 4);
    assert_eq!(bc(c, &["1", "1"]), 6);
    assert_eq!(bc(c, &["1", "1", "BYTE"]), 6);
    assert_eq!(bc(c, &["5", "30", "BIT"]), 17);
    assert_eq!(bc(c, &["-2", "-1"]), 7);
    assert_eq!(bc(c, &["-1", "-5"]), 0);
    assert_eq!(bc(c, &["100", "200"]), 0);
    assert_eq!(bc(c, &["0", "-1", "bit"]), 26);
    assert_eq!(cmd::<i64>(c, &["BITCOUNT", "none"]), 0);
    // As Redis 7.2: a missing key answers 0 before its range is checked.
    assert_eq!(cmd::<i64>(c, &["BITCOUNT", "none", "0"]), 0);
    assert_eq!(cmd_err(c, &["BITCOUNT", "k", "0"]), "ERR syntax error");
    assert_eq!(
        cmd_err(c, &["BITCOUNT", "k", "0", "1", "FOO"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(c, &["BITCOUNT", "k", "0", "1", "BIT", "x"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(c, &["BITCOUNT", "k", "a", "1"]),
        "ERR value is not an integer or out of range"
    );
}

#[test]
fn bitpos_ranges() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg(&[0xffu8, 0xf0, 0x00][..])
        .query(c)
        .unwrap();
    let bp = |c: &mut C, a: &[&str]| {
        let mut v = vec!["BITPOS", "k"];
        v.extend_from_slice(a);
        cmd::<i64>(c, &v)
    };
    assert_eq!(bp(c, &["0"]), 12);
    assert_eq!(bp(c, &["1"]), 0);
    assert_eq!(bp(c, &["1", "2"]), -1);
    assert_eq!(bp(c, &["0", "1"]), 12);
    assert_eq!(bp(c, &["1", "1", "-1"]), 8);
    assert_eq!(bp(c, &["1", "7", "15", "BIT"]), 7);
    assert_eq!(bp(c, &["0", "2", "9", "BIT"]), -1);
    assert_eq!(bp(c, &["1", "2", "-1", "bit"]), 2);
    // All ones: without an end the zero after the string counts.
    let _: () = redis::cmd("SET")
        .arg("ones")
        .arg(&[0xffu8; 2][..])
        .query(c)
        .unwrap();
    assert_eq!(cmd::<i64>(c, &["BITPOS", "ones", "0"]), 16);
    assert_eq!(cmd::<i64>(c, &["BITPOS", "ones", "0", "0"]), 16);
    assert_eq!(cmd::<i64>(c, &["BITPOS", "ones", "0", "0", "-1"]), -1);
    assert_eq!(cmd::<i64>(c, &["BITPOS", "none", "0"]), 0);
    assert_eq!(cmd::<i64>(c, &["BITPOS", "none", "1"]), -1);
    assert_eq!(cmd::<String>(c, &["SET", "empty", ""]), "OK");
    assert_eq!(cmd::<i64>(c, &["BITPOS", "empty", "0"]), -1);
    assert_eq!(
        cmd_err(c, &["BITPOS", "k", "2"]),
        "ERR The bit argument must be 1 or 0."
    );
    assert_eq!(
        cmd_err(c, &["BITPOS", "k", "1", "0", "1", "FOO"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(c, &["BITPOS", "k", "1", "x"]),
        "ERR value is not an integer or out of range"
    );
}

#[test]
fn bitop_operations() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let set = |c: &mut C, k: &str, v: &[u8]| {
        let _: () = redis::cmd("SET").arg(k).arg(v).query(c).unwrap();
    };
    set(c, "a", &[0xf0, 0x0f]);
    set(c, "b", &[0xff]);
    assert_eq!(cmd::<i64>(c, &["BITOP", "AND", "d", "a", "b"]), 2);
    assert_eq!(bytes(c, "d"), vec![0xf0, 0x00]);
    assert_eq!(cmd::<i64>(c, &["BITOP", "or", "d", "a", "b"]), 2);
    assert_eq!(bytes(c, "d"), vec![0xff, 0x0f]);
    assert_eq!(cmd::<i64>(c, &["BITOP", "XOR", "d", "a", "b", "none"]), 2);
    assert_eq!(bytes(c, "d"), vec![0x0f, 0x0f]);
    assert_eq!(cmd::<i64>(c, &["BITOP", "NOT", "d", "a"]), 2);
    assert_eq!(bytes(c, "d"), vec![0x0f, 0xf0]);
    // The destination may be a source.
    assert_eq!(cmd::<i64>(c, &["BITOP", "NOT", "a", "a"]), 2);
    assert_eq!(bytes(c, "a"), vec![0x0f, 0xf0]);
    // All sources empty: the destination is deleted.
    assert_eq!(cmd::<i64>(c, &["BITOP", "AND", "d", "n1", "n2"]), 0);
    assert_eq!(cmd::<Option<String>>(c, &["GET", "d"]), None);
    assert_eq!(
        cmd_err(c, &["BITOP", "NOT", "d", "a", "b"]),
        "ERR BITOP NOT must be called with a single source key."
    );
    assert_eq!(cmd_err(c, &["BITOP", "NAND", "d", "a"]), "ERR syntax error");
    assert_eq!(
        cmd_err(c, &["BITOP", "AND", "d"]),
        "ERR wrong number of arguments for 'bitop' command"
    );
}

#[test]
fn bitfield_types_and_overflow() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let bf = |c: &mut C, a: &[&str]| -> V {
        let mut v = vec!["BITFIELD", "k"];
        v.extend_from_slice(a);
        cmd(c, &v)
    };
    let ints = |xs: &[i64]| V::Array(xs.iter().map(|&x| V::Int(x)).collect());
    assert_eq!(
        bf(c, &["SET", "i8", "0", "-1", "GET", "u8", "0"]),
        ints(&[0, 255])
    );
    assert_eq!(bf(c, &["INCRBY", "u8", "#0", "10"]), ints(&[9]));
    assert_eq!(bf(c, &["GET", "i4", "0", "GET", "u4", "4"]), ints(&[0, 9]));
    assert_eq!(bf(c, &["SET", "u8", "#1", "200"]), ints(&[0]));
    assert_eq!(bytes(c, "k"), vec![9, 200]);
    // WRAP (default), SAT and FAIL on a u8 holding 200 and an i8.
    assert_eq!(bf(c, &["INCRBY", "u8", "8", "100"]), ints(&[44]));
    assert_eq!(
        bf(
            c,
            &["OVERFLOW", "SAT", "INCRBY", "u8", "8", "250", "INCRBY", "i8", "8", "-300"]
        ),
        ints(&[255, -128])
    );
    assert_eq!(
        bf(
            c,
            &["OVERFLOW", "FAIL", "INCRBY", "u8", "8", "200", "GET", "u8", "8"]
        ),
        V::Array(vec![V::Nil, V::Int(128)])
    );
    assert_eq!(bf(c, &["SET", "i8", "8", "200"]), ints(&[-128]));
    assert_eq!(bf(c, &["GET", "i8", "8"]), ints(&[-56]));
    // 64-bit signed and 63-bit unsigned extremes.
    let max = i64::MAX.to_string();
    assert_eq!(
        bf(c, &["SET", "i64", "100", &max, "INCRBY", "i64", "100", "1"]),
        ints(&[0, i64::MIN])
    );
    assert_eq!(
        bf(
            c,
            &["OVERFLOW", "SAT", "SET", "u63", "200", "-1", "GET", "u63", "200"]
        ),
        ints(&[0, i64::MAX])
    );
    // Redis's overflow check wraps for far-out-of-range SET values: a
    // saturating SET of i64::MIN into an i16 stores +32767, as in Redis.
    let min = i64::MIN.to_string();
    assert_eq!(
        cmd::<V>(
            c,
            &["BITFIELD", "q", "OVERFLOW", "SAT", "SET", "i16", "0", &min, "GET", "i16", "0"]
        ),
        ints(&[0, 32767])
    );
    assert_eq!(
        cmd::<V>(
            c,
            &["BITFIELD", "q", "OVERFLOW", "SAT", "SET", "i8", "0", "-200", "GET", "i8", "0"]
        ),
        ints(&[127, -128])
    );
    // Reads past the end are zeros; a GET-only call on a missing key works.
    assert_eq!(bf(c, &["GET", "u16", "10000"]), ints(&[0]));
    assert_eq!(
        cmd::<V>(c, &["BITFIELD", "none", "GET", "i8", "0"]),
        ints(&[0])
    );
    assert_eq!(cmd::<Option<String>>(c, &["GET", "none"]), None);
    assert_eq!(cmd::<V>(c, &["BITFIELD", "k"]), V::Array(vec![]));
    assert_eq!(
        cmd::<V>(c, &["BITFIELD_RO", "k", "GET", "u8", "0"]),
        ints(&[9])
    );
}

#[test]
fn bitfield_errors() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let type_err =
        "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
    for t in ["u64", "i65", "I8", "x8", "i0", "u", "i-1"] {
        assert_eq!(
            cmd_err(c, &["BITFIELD", "k", "GET", t, "0"]),
            type_err,
            "{t}"
        );
    }
    assert_eq!(
        cmd_err(c, &["BITFIELD", "k", "GET", "i8", "-1"]),
        OFFSET_ERR
    );
    assert_eq!(
        cmd_err(c, &["BITFIELD", "k", "GET", "i8", "#-1"]),
        OFFSET_ERR
    );
    assert_eq!(
        cmd_err(c, &["BITFIELD", "k", "GET", "u8", "4294967296"]),
        OFFSET_ERR
    );
    assert_eq!(
        cmd_err(c, &["BITFIELD", "k", "OVERFLOW", "FOO", "GET", "i8", "0"]),
        "ERR Invalid OVERFLOW type specified"
    );
    assert_eq!(cmd_err(c, &["BITFIELD", "k", "FOO"]), "ERR syntax error");
    assert_eq!(
        cmd_err(c, &["BITFIELD", "k", "GET", "i8"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(c, &["BITFIELD", "k", "SET", "i8", "0"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(c, &["BITFIELD", "k", "INCRBY", "i8", "0", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        cmd_err(c, &["BITFIELD_RO", "k", "SET", "i8", "0", "1"]),
        "ERR BITFIELD_RO only supports the GET subcommand"
    );
    // Nothing was written by the failed calls.
    assert_eq!(cmd::<Option<String>>(c, &["GET", "k"]), None);
}

/// unit/bitops's "SETBIT/BITFIELD only increase dirty when the value
/// changed", side by side with redis-server: the dirty counter after each
/// step, and no write propagated for a step that changed nothing.
#[test]
fn setbit_and_bitfield_count_only_changes_as_dirty() {
    let s = Server::start(&[]);
    let o = common::RedisOracle::start(&[]);
    let steps: &[&[&str]] = &[
        &["SETBIT", "foo", "0", "0"],
        &["BITFIELD", "foo2", "SET", "i5", "0", "0"],
        &["SETBIT", "foo", "0", "0"],
        &["BITFIELD", "foo2", "SET", "i5", "0", "0"],
        &["SETBIT", "foo", "0", "1"],
        &["SETBIT", "foo", "0", "1"],
        &[
            "BITFIELD", "foo2", "SET", "i5", "0", "1", "SET", "i5", "5", "3",
        ],
        &[
            "BITFIELD", "foo2", "SET", "i5", "0", "1", "INCRBY", "u3", "20", "0",
        ],
        &[
            "BITFIELD", "foo2", "OVERFLOW", "FAIL", "INCRBY", "i5", "0", "100",
        ],
        &["BITFIELD", "foo2", "INCRBY", "u2", "100", "1"],
    ];
    let dirty = |c: &mut redis::Connection| -> Vec<i64> {
        steps
            .iter()
            .map(|args| {
                let _: redis::Value = cmd(c, args);
                common::info_field(c, "rdb_changes_since_last_save")
            })
            .collect()
    };
    let ours = dirty(&mut s.conn());
    assert_eq!(ours, dirty(&mut o.conn()));
    assert_eq!(ours[1], ours[3]);
}
