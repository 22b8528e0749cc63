//! maxmemory: OOM replies under noeviction, eviction that keeps used_memory
//! near the limit, which keys each policy chooses, and what an eviction
//! tells the rest (event, counter, WATCH, tracking, AOF).

mod common;
use common::*;

fn used_memory(c: &mut redis::Connection) -> u64 {
    info_field(c, "used_memory")
}

fn evicted_keys(c: &mut redis::Connection) -> u64 {
    info_field(c, "evicted_keys")
}

/// SETs `n` keys `prefix:i` of 1 KB, with `ttl` seconds when given;
/// returns the first error reply, if any.
fn fill(c: &mut redis::Connection, prefix: &str, n: usize, ttl: Option<u64>) -> Option<String> {
    let value = "v".repeat(1000);
    for i in 0..n {
        let key = format!("{prefix}:{i}");
        let mut set = redis::cmd("SET");
        set.arg(&key).arg(&value);
        if let Some(t) = ttl {
            set.arg("EX").arg(t);
        }
        if let Err(e) = set.query::<()>(c) {
            return Some(e.to_string());
        }
    }
    None
}

/// Sets maxmemory to what is used now plus `headroom` bytes.
fn limit_to_now_plus(c: &mut redis::Connection, headroom: u64) -> u64 {
    let limit = used_memory(c) + headroom;
    let _: () = cmd(c, &["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    limit
}

#[test]
fn noeviction_refuses_writes_that_grow_memory() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["SET", "keep", "1"]);
    limit_to_now_plus(&mut c, 1 << 20);
    let err = fill(&mut c, "k", 5000, None).expect("writes refused once over the limit");
    // (The redis crate shows the code as "OOM:".)
    assert!(
        err.starts_with("OOM")
            && err.ends_with("command not allowed when used memory > 'maxmemory'."),
        "{err}"
    );
    // Reads and deletes still run, and deleting makes room again.
    assert_eq!(cmd::<String>(&mut c, &["GET", "keep"]), "1");
    let keys: Vec<String> = cmd(&mut c, &["KEYS", "k:*"]);
    let mut del = vec!["DEL"];
    del.extend(keys.iter().map(|k| k.as_str()));
    let n: usize = cmd(&mut c, &del);
    assert_eq!(n, keys.len());
    let _: () = cmd(&mut c, &["SET", "after", "x"]);
    assert_eq!(evicted_keys(&mut c), 0);

    // A volatile policy with no volatile keys has nothing to evict either.
    let _: () = cmd(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "volatile-lru"],
    );
    let err = fill(&mut c, "p", 5000, None).expect("no volatile keys to evict");
    assert!(err.starts_with("OOM"), "{err}");
}

#[test]
fn allkeys_eviction_keeps_memory_near_the_limit() {
    let s = Server::start(&["--maxmemory-policy", "allkeys-random"]);
    let mut c = s.conn();
    let limit = limit_to_now_plus(&mut c, 2 << 20);
    assert_eq!(fill(&mut c, "k", 20_000, None), None); // ~20 MB through a 2 MB window
    let used = used_memory(&mut c);
    assert!(
        used <= limit + (256 << 10),
        "used {used} over limit {limit}"
    );
    // Lift the limit first: any command over it may evict more.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    let evicted = evicted_keys(&mut c);
    let size: u64 = cmd(&mut c, &["DBSIZE"]);
    assert_eq!(size + evicted, 20_000);
    assert!(evicted > 10_000, "evicted {evicted}");
}

#[test]
fn volatile_ttl_evicts_the_keys_expiring_first() {
    let s = Server::start(&["--maxmemory-policy", "volatile-ttl"]);
    let mut c = s.conn();
    assert_eq!(fill(&mut c, "persistent", 100, None), None);
    assert_eq!(fill(&mut c, "long", 100, Some(100_000)), None);
    limit_to_now_plus(&mut c, 2 << 20);
    assert_eq!(fill(&mut c, "short", 10_000, Some(1000)), None);
    assert!(evicted_keys(&mut c) > 5_000);
    let persistent: Vec<String> = cmd(&mut c, &["KEYS", "persistent:*"]);
    let long: Vec<String> = cmd(&mut c, &["KEYS", "long:*"]);
    assert_eq!((persistent.len(), long.len()), (100, 100));
}

/// Memory follows the data a key at a time, as Redis's does: the maxmemory
/// tests of Redis's suite fill "until 4 KB under the limit" with tiny keys
/// and then expect the same number again to cross it. Each shard's first
/// slab chunk used to be 4 KB, and each INFO call kept a rate sample for
/// 5 s, so used_memory jumped by up to 160 KB between two SETs.
#[test]
fn used_memory_grows_smoothly_with_tiny_keys_and_info_calls() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    for round in 0..3 {
        let _: () = cmd(&mut c, &["FLUSHALL"]);
        let start = used_memory(&mut c);
        let mut prev = start;
        for i in 0..2000 {
            let _: () = cmd(&mut c, &["SET", &format!("{round}:{i}"), "x"]);
            let now = used_memory(&mut c);
            assert!(
                now < prev + 8192,
                "round {round}, key {i}: used_memory {prev} -> {now}"
            );
            prev = now;
        }
        // About 120 bytes a key (Redis: about 70); a 4 KB chunk per shard
        // would be 1 MB for the first 256 shards alone.
        assert!(
            prev - start < 2000 * 200,
            "round {round}: {start} -> {prev}"
        );
    }
}

#[test]
fn instantaneous_ops_per_sec_shows_recent_commands() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let mut pipe = redis::pipe();
    for _ in 0..5000 {
        pipe.cmd("PING");
    }
    let _: Vec<String> = pipe.query(&mut c).unwrap();
    // The cron samples every 100 ms: wait for a sample to count them.
    eventually("instantaneous_ops_per_sec to count the PINGs", || {
        info_field::<u64>(&mut c, "instantaneous_ops_per_sec") > 0
    });
}

/// An evicted key is gone for everyone, as with Redis's evict.c: the
/// `evicted` keyspace event, INFO's evicted_keys, a WATCH on it broken,
/// client-side caches told, and a DEL in the AOF (the record replicas get).
#[test]
fn an_evicted_key_is_notified_counted_unwatched_invalidated_and_propagated() {
    let s = Server::start(&[
        "--maxmemory-policy",
        "allkeys-random",
        "--notify-keyspace-events",
        "Ee",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]);
    // Only bounds a hang: the messages are expected.
    let timeout = Some(std::time::Duration::from_secs(30));
    let mut c = s.conn();
    let _: () = cmd(&mut c, &["SET", "w", &"v".repeat(1 << 20)]);
    let mut watcher = s.conn();
    let _: () = cmd(&mut watcher, &["WATCH", "w"]);
    let mut inval = s.conn();
    let inval_id: i64 = cmd(&mut inval, &["CLIENT", "ID"]);
    let mut reader = s.conn();
    let redirect = inval_id.to_string();
    let _: () = cmd(
        &mut reader,
        &["CLIENT", "TRACKING", "on", "REDIRECT", &redirect],
    );
    let _: String = cmd(&mut reader, &["GET", "w"]);
    let mut inval = inval.as_pubsub();
    inval.set_read_timeout(timeout).unwrap();
    inval.subscribe("__redis__:invalidate").unwrap();
    let mut events = s.conn();
    let mut events = events.as_pubsub();
    events.set_read_timeout(timeout).unwrap();
    events.subscribe("__keyevent@0__:evicted").unwrap();

    // Half a megabyte under what is used: the next command evicts `w`,
    // the only key.
    let limit = used_memory(&mut c) - (512 << 10);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    let _: () = cmd(&mut c, &["SET", "small", "1"]);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(evicted_keys(&mut c), 1);
    assert_eq!(cmd::<i64>(&mut c, &["EXISTS", "w"]), 0);

    let m = events.get_message().unwrap();
    assert_eq!(m.get_channel_name(), "__keyevent@0__:evicted");
    assert_eq!(m.get_payload::<String>().unwrap(), "w");
    let m = inval.get_message().unwrap();
    assert_eq!(m.get_payload::<Vec<String>>().unwrap(), ["w"]);
    let _: () = cmd(&mut watcher, &["MULTI"]);
    let _: String = cmd(&mut watcher, &["SET", "w", "2"]);
    assert_eq!(
        cmd::<redis::Value>(&mut watcher, &["EXEC"]),
        redis::Value::Nil
    );

    let aof_dir = s.dir.join("appendonlydir");
    let incr = std::fs::read_dir(&aof_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incr AOF file");
    let aof = std::fs::read(incr).unwrap();
    let del = b"*2\r\n$3\r\nDEL\r\n$1\r\nw\r\n";
    assert!(
        aof.windows(del.len()).any(|w| w == del),
        "no DEL w in the AOF"
    );
}
