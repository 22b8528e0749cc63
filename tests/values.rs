//! The compact value and key layout seen from a client: OBJECT ENCODING at
//! the inline/boxed/embstr/raw boundaries, in-place edits of inline values,
//! and TTLs and access times surviving the key's change between its inline,
//! boxed and volatile forms (see docs/PERFORMANCE.md).
mod common;
use common::*;

type C = redis::Connection;

fn enc(c: &mut C, k: &str) -> String {
    cmd(c, &["OBJECT", "ENCODING", k])
}

#[test]
fn encodings_at_the_size_boundaries() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let cases = [
        ("123".to_string(), "int"),
        ("0123".to_string(), "embstr"),
        ("a".repeat(22), "embstr"),
        ("a".repeat(23), "embstr"),
        ("a".repeat(44), "embstr"),
        ("a".repeat(45), "raw"),
        ("12345678901234567890123".to_string(), "embstr"),
    ];
    for (v, want) in &cases {
        let _: () = cmd(c, &["SET", "k", v]);
        assert_eq!(enc(c, "k"), *want, "value of {} bytes", v.len());
        assert_eq!(cmd::<String>(c, &["GET", "k"]), *v);
        assert_eq!(cmd::<i64>(c, &["STRLEN", "k"]), v.len() as i64);
    }
    // In-place edits turn any encoding raw and keep the bytes.
    let _: () = cmd(c, &["SET", "n", "5"]);
    assert_eq!(cmd::<i64>(c, &["APPEND", "n", "1"]), 2);
    assert_eq!(enc(c, "n"), "raw");
    assert_eq!(cmd::<i64>(c, &["INCR", "n"]), 52);
    assert_eq!(enc(c, "n"), "int");
    let _: () = cmd(c, &["SET", "s", "abc"]);
    assert_eq!(cmd::<i64>(c, &["SETRANGE", "s", "20", "xyz"]), 23);
    assert_eq!(enc(c, "s"), "raw");
    assert_eq!(
        cmd::<Vec<u8>>(c, &["GET", "s"]),
        b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0xyz".to_vec()
    );
    let _: () = cmd(c, &["SET", "f", "1.5"]);
    assert_eq!(cmd::<String>(c, &["INCRBYFLOAT", "f", "1.5"]), "3");
    assert_eq!(enc(c, "f"), "embstr");
}

#[test]
fn ttl_survives_key_layout_changes() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    // 18 bytes: inline; 19 and 40: boxed.
    for key in ["k".repeat(18), "k".repeat(19), "k".repeat(40)] {
        let other = format!("{key}-renamed");
        let _: () = cmd(c, &["SET", &key, "v"]);
        assert_eq!(cmd::<i64>(c, &["TTL", &key]), -1);
        // TTL rounds to the second: a loaded machine may take more than
        // half of one between two commands.
        let ttl = |c: &mut redis::Connection, k: &str| cmd::<i64>(c, &["TTL", k]);
        assert_eq!(cmd::<i64>(c, &["EXPIRE", &key, "100"]), 1);
        assert!((90..=100).contains(&ttl(c, &key)));
        assert_eq!(cmd::<i64>(c, &["EXPIRE", &key, "200"]), 1);
        assert!((190..=200).contains(&ttl(c, &key)));
        assert_eq!(cmd::<String>(c, &["GET", &key]), "v");
        let _: () = cmd(c, &["RENAME", &key, &other]);
        assert!((190..=200).contains(&ttl(c, &other)));
        assert_eq!(cmd::<i64>(c, &["PERSIST", &other]), 1);
        assert_eq!(cmd::<i64>(c, &["TTL", &other]), -1);
        assert_eq!(cmd::<String>(c, &["GET", &other]), "v");
        let _: () = cmd(c, &["SET", &other, "w", "PX", "1"]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(cmd::<Option<String>>(c, &["GET", &other]), None);
        assert_eq!(cmd::<i64>(c, &["EXISTS", &key, &other]), 0);
    }
    assert_eq!(cmd::<i64>(c, &["DBSIZE"]), 0);
}

#[test]
fn access_time_survives_ttl_changes() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    let _: () = cmd(c, &["SET", "k", "v"]);
    let lru = |c: &mut C| -> String {
        let line: String = cmd(c, &["DEBUG", "OBJECT", "k"]);
        line.split(' ')
            .find(|w| w.starts_with("lru:"))
            .expect("lru field")
            .to_string()
    };
    let before = lru(c);
    assert_eq!(cmd::<i64>(c, &["EXPIRE", "k", "100"]), 1);
    assert_eq!(lru(c), before);
    assert_eq!(cmd::<i64>(c, &["PERSIST", "k"]), 1);
    assert_eq!(lru(c), before);
}
