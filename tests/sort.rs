//! SORT and SORT_RO as clients see them: numeric and ALPHA order, DESC,
//! LIMIT, BY and GET patterns (string keys and hash fields), BY nosort,
//! STORE, errors.

mod common;
use common::*;

fn strs(c: &mut redis::Connection, args: &[&str]) -> Vec<Option<String>> {
    cmd(c, args)
}

fn some(v: &[&str]) -> Vec<Option<String>> {
    v.iter().map(|s| Some(s.to_string())).collect()
}

#[test]
fn sort_orders_limits_and_patterns() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    cmd::<i64>(c, &["RPUSH", "l", "3", "10", "1", "2"]);
    assert_eq!(strs(c, &["SORT", "l"]), some(&["1", "2", "3", "10"]));
    assert_eq!(
        strs(c, &["SORT", "l", "DESC"]),
        some(&["10", "3", "2", "1"])
    );
    assert_eq!(
        strs(c, &["SORT", "l", "ALPHA"]),
        some(&["1", "10", "2", "3"])
    );
    assert_eq!(
        strs(c, &["SORT", "l", "LIMIT", "1", "2"]),
        some(&["2", "3"])
    );
    assert_eq!(strs(c, &["SORT_RO", "l", "LIMIT", "10", "2"]), some(&[]));
    // BY a string key per element, GET # and another key, missing → nil.
    for (e, w) in [("3", "1"), ("10", "2"), ("1", "3")] {
        cmd::<()>(c, &["SET", &format!("w_{e}"), w]);
        cmd::<i64>(c, &["HSET", &format!("h_{e}"), "name", &format!("n{e}")]);
    }
    assert_eq!(
        strs(
            c,
            &["SORT", "l", "BY", "w_*", "GET", "#", "GET", "h_*->name"]
        ),
        vec![
            Some("2".into()),
            None,
            Some("3".into()),
            Some("n3".into()),
            Some("10".into()),
            Some("n10".into()),
            Some("1".into()),
            Some("n1".into()),
        ]
    );
    // BY without '*' keeps the source order.
    assert_eq!(
        strs(c, &["SORT", "l", "BY", "nosort"]),
        some(&["3", "10", "1", "2"])
    );
    // Sets and sorted sets.
    cmd::<i64>(c, &["SADD", "s", "b", "a", "c"]);
    assert_eq!(strs(c, &["SORT", "s", "ALPHA"]), some(&["a", "b", "c"]));
    cmd::<i64>(c, &["ZADD", "z", "3", "x", "1", "y", "2", "w"]);
    assert_eq!(
        strs(c, &["SORT", "z", "BY", "nosort"]),
        some(&["y", "w", "x"])
    );
    // STORE replaces the destination with a list; an empty result deletes it.
    assert_eq!(cmd::<i64>(c, &["SORT", "l", "STORE", "dst"]), 4);
    assert_eq!(
        strs(c, &["LRANGE", "dst", "0", "-1"]),
        some(&["1", "2", "3", "10"])
    );
    assert_eq!(cmd::<i64>(c, &["SORT", "missing", "STORE", "dst"]), 0);
    assert_eq!(cmd::<i64>(c, &["EXISTS", "dst"]), 0);
}

#[test]
fn sort_errors() {
    let s = Server::start(&[]);
    let c = &mut s.conn();
    cmd::<()>(c, &["SET", "str", "x"]);
    assert!(cmd_err(c, &["SORT", "str"]).starts_with("WRONGTYPE"));
    cmd::<i64>(c, &["RPUSH", "l", "a", "1"]);
    assert_eq!(
        cmd_err(c, &["SORT", "l"]),
        "ERR One or more scores can't be converted into double"
    );
    assert_eq!(cmd_err(c, &["SORT", "l", "FOO"]), "ERR syntax error");
    assert_eq!(
        cmd_err(c, &["SORT_RO", "l", "STORE", "d"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd_err(c, &["SORT", "l", "LIMIT", "x", "1"]),
        "ERR value is not an integer or out of range"
    );
}
