//! Lazy freeing: UNLINK, DEL with lazyfree-lazy-user-del and FLUSHALL ASYNC
//! hand big values to the background thread; INFO counts them and
//! used_memory (the allocator's count) comes back down.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// Waits (up to 30 s) until `field` reaches at least `want`.
fn wait_field(c: &mut redis::Connection, field: &str, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v: u64 = info_field(c, field);
        if v >= want || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn fill_set(c: &mut redis::Connection, key: &str, n: usize) {
    let members: Vec<String> = (0..n).map(|i| format!("member:{i}")).collect();
    let mut argv = vec!["SADD", key];
    argv.extend(members.iter().map(|s| s.as_str()));
    let added: usize = cmd(c, &argv);
    assert_eq!(added, n);
}

#[test]
fn unlink_frees_big_values_in_the_background() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let before: u64 = info_field(&mut c, "used_memory");
    fill_set(&mut c, "big", 100_000);
    let peak: u64 = info_field(&mut c, "used_memory");
    assert!(
        peak > before + 2_000_000,
        "100k members: {before} -> {peak}"
    );

    // A small value is freed in place, not counted.
    let _: () = cmd(&mut c, &["SET", "small", "x"]);
    let n: i64 = cmd(&mut c, &["UNLINK", "small", "big", "missing"]);
    assert_eq!(n, 2);
    assert_eq!(wait_field(&mut c, "lazyfreed_objects", 1), 1);
    assert_eq!(info_field::<u64>(&mut c, "lazyfree_pending_objects"), 0);
    let after: u64 = info_field(&mut c, "used_memory");
    assert!(
        after < before + (peak - before) / 4,
        "{before} {peak} {after}"
    );
    let gone: i64 = cmd(&mut c, &["EXISTS", "big"]);
    assert_eq!(gone, 0);
}

#[test]
fn del_follows_lazyfree_lazy_user_del_and_flush_async_counts_keys() {
    let s = Server::start(&["--lazyfree-lazy-user-del", "yes"]);
    let mut c = s.conn();
    fill_set(&mut c, "a", 1000);
    let _: i64 = cmd(&mut c, &["DEL", "a"]);
    assert_eq!(wait_field(&mut c, "lazyfreed_objects", 1), 1);

    let _: () = cmd(&mut c, &["CONFIG", "SET", "lazyfree-lazy-user-del", "no"]);
    fill_set(&mut c, "b", 1000);
    let _: i64 = cmd(&mut c, &["DEL", "b"]);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(info_field::<u64>(&mut c, "lazyfreed_objects"), 1);

    for i in 0..50 {
        let _: () = cmd(&mut c, &["SET", &format!("k{i}"), "v"]);
    }
    let _: () = cmd(&mut c, &["FLUSHALL", "ASYNC"]);
    let size: i64 = cmd(&mut c, &["DBSIZE"]);
    assert_eq!(size, 0);
    assert_eq!(wait_field(&mut c, "lazyfreed_objects", 51), 51);
}
