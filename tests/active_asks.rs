//! Which writes on a merging key travel as facts and which still make the
//! peer ask for the key's state (issue 24 item 1: "a state is asked for
//! only where a fact's causal base is missing ... never on the normal
//! path"; docs/MERGE-DESIGN.md section 9). On an active pair of real processes,
//! each write command Redis has on a set, hash, sorted set, list, stream or
//! counter runs once on an existing key of one node, after everything
//! before it has arrived; once the pair converged, the states both nodes
//! asked for (INFO `conflicts=`) are read. Every command is in one of two
//! lists: it travels as a fact (0 asks), or it asks, with the reason. The
//! second list only shrinks: a command that stops asking fails the test
//! until it moves to the first.

mod common;

use common::*;

/// What a case's write is expected to do.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Travels as a fact: no state asked for.
    Fact,
    /// Asks for the state of its key(s), for the reason given.
    Asks(&'static str),
}
use Expect::*;

const DEL: &str = "a sketch's delete (a reset) travels by version; a peer converges by \
                   the key's state";
const STORE: &str = "SORT ... STORE onto an existing key goes as DEL and RPUSH in \
                     MULTI/EXEC: a unit's writes carry no fact";
const RENAMED_COUNTER: &str = "a renamed counter's destination has no merge state of its \
                               own (the counter's stays with the source): by state";
const CLEARS_MEMBER_TTL: &str = "a write that clears a member's TTL (HSET of a field with one) or \
                                 replays as one on the peer (HINCRBY's HSET): by state, so that \
                                 its clearing dot is made once (DECISIONS 327)";
const REMOVES_MEMBER_TTL: &str =
    "a remove of a member with TTL dots: a peer holding the member by \
                                  a concurrent add must drop the dots the remover saw, which the \
                                  fact does not name (DECISIONS 327)";
const NOT_A_NUMBER: &str = "a reset to a value that is no number, which the record \
                            (APPEND's, SETRANGE's) does not say: by state";

/// The write commands on a merging type, on existing keys (`@x` is key x
/// of the case, made by [`setup`]), and what each does.
const CASES: &[(&str, Expect)] = &[
    // Sets.
    ("SADD @s z", Fact),
    ("SADD @s a", Fact),
    ("SREM @s a", Fact),
    ("SPOP @s", Fact),
    ("SPOP @s 2", Fact),
    ("SPOP @s 9", Fact),
    ("SMOVE @s @t a", Fact),
    ("SMOVE @s @t c", Fact),
    ("SMOVE @s @u a", Fact),
    ("SPOP @o", Fact),
    ("SINTERSTORE @t @s @t", Fact),
    ("SUNIONSTORE @t @s @t", Fact),
    ("SDIFFSTORE @t @s @t", Fact),
    // Hashes.
    ("HSET @h f 9", Fact),
    ("HSET @h q 1 f 3", Fact),
    ("HMSET @h f 8", Fact),
    ("HSETNX @h q 1", Fact),
    ("HDEL @h f", Fact),
    ("HINCRBY @h f 2", Fact),
    ("HINCRBYFLOAT @h f 1.5", Fact),
    // Sorted sets.
    ("ZADD @z 9 a", Fact),
    ("ZADD @z 9 q", Fact),
    ("ZADD @z XX GT CH 9 a", Fact),
    ("ZADD @z INCR 2 a", Fact),
    ("ZINCRBY @z 2 a", Fact),
    ("ZREM @z a", Fact),
    ("ZPOPMIN @z", Fact),
    ("ZPOPMAX @z 2", Fact),
    ("BZPOPMIN @z 0", Fact),
    ("BZPOPMAX @z 0", Fact),
    ("ZMPOP 1 @z MIN", Fact),
    ("BZMPOP 0 1 @z MAX COUNT 2", Fact),
    ("ZREMRANGEBYSCORE @z 1 2", Fact),
    ("ZREMRANGEBYRANK @z 0 1", Fact),
    ("ZREMRANGEBYLEX @w [a [b", Fact),
    ("ZPOPMAX @z 9", Fact),
    ("ZRANGESTORE @y @z 0 1", Fact),
    ("ZUNIONSTORE @y 2 @z @y", Fact),
    ("ZINTERSTORE @y 2 @z @y", Fact),
    ("ZDIFFSTORE @y 2 @z @y", Fact),
    ("GEOADD @g 13.36 38.11 palermo", Fact),
    (
        "GEOSEARCHSTORE @y @g FROMLONLAT 13.5 38.2 BYRADIUS 10 km",
        Fact,
    ),
    // Lists.
    ("LPUSH @l z", Fact),
    ("RPUSH @l z y", Fact),
    ("LPUSHX @l z", Fact),
    ("RPUSHX @l z", Fact),
    ("LPOP @l", Fact),
    ("RPOP @l 2", Fact),
    ("BLPOP @l 0", Fact),
    ("BRPOP @l 0", Fact),
    ("LMPOP 1 @l LEFT COUNT 2", Fact),
    ("BLMPOP 0 1 @l RIGHT", Fact),
    ("LSET @l 1 X", Fact),
    ("LINSERT @l BEFORE c X", Fact),
    ("LREM @l 1 c", Fact),
    ("LTRIM @l 1 -2", Fact),
    ("LTRIM @l 2 -1", Fact),
    ("LTRIM @l 0 1", Fact),
    ("LTRIM @l 9 1", Fact),
    ("LMOVE @l @m LEFT RIGHT", Fact),
    ("RPOPLPUSH @l @m", Fact),
    ("BLMOVE @l @m RIGHT LEFT 0", Fact),
    ("BRPOPLPUSH @l @m 0", Fact),
    ("LMOVE @m @u LEFT LEFT", Fact),
    ("LMOVE @m @l RIGHT RIGHT", Fact),
    ("LMOVE @l @l LEFT RIGHT", Fact),
    ("RPOPLPUSH @l @l", Fact),
    ("LMOVE @k @k LEFT LEFT", Fact),
    ("SORT @l ALPHA STORE @m", Asks(STORE)),
    // Counters.
    ("INCR @n", Fact),
    ("INCRBY @n 3", Fact),
    ("DECR @n", Fact),
    ("DECRBY @n 3", Fact),
    ("INCRBYFLOAT @n 1.5", Fact),
    ("SET @n 7", Fact),
    ("GETSET @n 7", Fact),
    ("SET @n 7 GET", Fact),
    ("SET @n x", Fact),
    ("SETEX @n 100 7", Fact),
    ("PSETEX @n 100000 7", Fact),
    ("MSET @n 7", Fact),
    ("APPEND @n 1", Fact),
    ("SETRANGE @n 0 9", Fact),
    ("APPEND @n x", Asks(NOT_A_NUMBER)),
    ("SETRANGE @n 0 x", Asks(NOT_A_NUMBER)),
    ("INCR @q", Fact),
    ("SET @q 7 KEEPTTL", Fact),
    // TTL writes on a list and a counter, and writes under a TTL.
    ("EXPIRE @l 100", Fact),
    ("PEXPIRE @l 100000", Fact),
    ("EXPIREAT @l 4000000000", Fact),
    ("PEXPIREAT @e 4000000000000", Fact),
    ("PERSIST @e", Fact),
    ("LPUSH @e z", Fact),
    ("RPUSH @e z", Fact),
    ("LPOP @e", Fact),
    ("RPOP @e 2", Fact),
    ("LSET @e 0 X", Fact),
    ("EXPIRE @n 100", Fact),
    ("PEXPIREAT @q 4000000000000", Fact),
    ("PERSIST @q", Fact),
    // Member TTL writes, and writes on keys with member TTLs (`@ms`,
    // `@mh`, `@mz`: member a / field f with a TTL; DECISIONS 326-327).
    ("EXPIREMEMBER @ms b 100", Fact),
    ("EXPIREMEMBER @ms a 500", Fact),
    ("EXPIREMEMBER @ms a 500000 ms", Fact),
    ("EXPIREMEMBERAT @mz a 4000000000", Fact),
    ("PEXPIREMEMBERAT @mz b 4000000000000", Fact),
    ("PERSIST @ms a", Fact),
    ("HEXPIRE @mh 100 FIELDS 2 f g", Fact),
    ("HPEXPIRE @mh 100000 NX FIELDS 2 f g", Fact),
    ("HEXPIREAT @mh 4000000000 GT FIELDS 1 f", Fact),
    ("HPERSIST @mh FIELDS 1 f", Fact),
    ("SADD @ms z", Fact),
    ("SADD @ms a", Fact),
    ("SREM @ms b", Fact),
    ("ZPOPMIN @mz", Asks(REMOVES_MEMBER_TTL)),
    ("SREM @ms a", Asks(REMOVES_MEMBER_TTL)),
    ("HSET @mh g 9", Fact),
    ("HINCRBY @mh g 2", Fact),
    ("HSET @mh f 9", Asks(CLEARS_MEMBER_TTL)),
    ("HINCRBY @mh f 2", Asks(CLEARS_MEMBER_TTL)),
    ("HDEL @mh f", Asks(REMOVES_MEMBER_TTL)),
    ("ZADD @mz 9 a", Fact),
    ("ZINCRBY @mz 2 a", Fact),
    ("ZREM @mz b", Fact),
    ("EXPIRE @ms 100", Fact),
    ("EXPIRE @mh 100", Fact),
    ("PEXPIREAT @mz 4000000000000", Fact),
    // Streams (`@x`: entries %0 %1 %2, group g, %0 and %1 pending with
    // alice, bob a consumer with none).
    ("XADD @x * f 4", Fact),
    ("XADD @x MAXLEN 2 * f 4", Fact),
    ("XADD @v * f 1", Fact),
    ("XADD @v MAXLEN 0 * f 1", Fact),
    ("XDEL @x %2", Fact),
    ("XTRIM @x MAXLEN 1", Fact),
    ("XACK @x g %0 %1", Fact),
    ("XREADGROUP GROUP g bob COUNT 1 STREAMS @x >", Fact),
    ("XREADGROUP GROUP g bob NOACK STREAMS @x >", Fact),
    ("XREADGROUP GROUP g dave NOACK COUNT 1 STREAMS @x >", Fact),
    ("XREADGROUP GROUP g bob STREAMS @x @xb > >", Fact),
    ("XREADGROUP GROUP g bob NOACK STREAMS @x @xb > >", Fact),
    ("XCLAIM @x g bob 0 %0", Fact),
    ("XCLAIM @x g bob 0 %0 %1 JUSTID", Fact),
    ("XCLAIM @x g carol 0 %2 FORCE", Fact),
    ("XAUTOCLAIM @x g bob 0 0", Fact),
    ("XAUTOCLAIM @x g carol 0 0 COUNT 1 JUSTID", Fact),
    ("XGROUP CREATE @x g2 $", Fact),
    ("XGROUP CREATE @x g2 0 ENTRIESREAD 0", Fact),
    ("XGROUP CREATE @v g 0 MKSTREAM", Fact),
    ("XGROUP CREATECONSUMER @x g carol", Fact),
    ("XGROUP DELCONSUMER @x g alice", Fact),
    ("XGROUP DELCONSUMER @x g bob", Fact),
    ("XGROUP SETID @x g 0", Fact),
    ("XGROUP SETID @x g $ ENTRIESREAD 3", Fact),
    ("XGROUP DESTROY @x g", Fact),
    ("XSETID @x 9999999999999-0", Fact),
    (
        "XSETID @x 9999999999999-0 ENTRIESADDED 10 MAXDELETEDID 9999999999998-0",
        Fact,
    ),
    ("EXPIRE @x 100", Fact),
    ("PEXPIREAT @j 4000000000000", Fact),
    ("PERSIST @j", Fact),
    ("XADD @j * f 2", Fact),
    ("XADD @j MAXLEN 1 * f 2", Fact),
    ("XTRIM @j MAXLEN 0", Fact),
    ("XSETID @j 9999999999999-0", Fact),
    ("XREADGROUP GROUP g bob COUNT 1 STREAMS @jg >", Fact),
    ("XREADGROUP GROUP g bob NOACK STREAMS @jg >", Fact),
    ("XGROUP CREATECONSUMER @jg g carol", Fact),
    ("XGROUP SETID @jg g 0", Fact),
    ("XGROUP CREATE @jg g2 $", Fact),
    ("DEL @x", Fact),
    // Any merging type.
    ("DEL @s", Fact),
    ("UNLINK @z", Fact),
    ("GETDEL @n", Fact),
    ("DEL @h @l @m", Fact),
    ("DEL @q", Fact),
    ("UNLINK @p", Asks(DEL)),
    ("RENAME @h @r", Fact),
    ("RENAMENX @l @r", Fact),
    ("RENAME @n @r", Asks(RENAMED_COUNTER)),
    ("COPY @s @t REPLACE", Fact),
    ("RENAME @x @r", Fact),
    ("RENAMENX @x @r", Fact),
    ("COPY @x @r", Fact),
    ("COPY @j @x REPLACE", Fact),
];

/// The commands that make key `x` of case `i` (`@x`), `;` between two.
fn setup(i: usize, x: &str) -> Vec<Vec<String>> {
    let k = format!("c{i}:{x}");
    let lines = match x {
        "s" => "SADD K a b c d",
        "t" => "SADD K c d e",
        "o" => "SADD K a",
        "h" => "HSET K f 1 g 2",
        "z" => "ZADD K 1 a 2 b 3 c 4 d",
        "y" => "ZADD K 1 c 5 e",
        "w" => "ZADD K 0 a 0 b 0 c",
        "g" => "GEOADD K 13.5 38.2 catania",
        "l" => "RPUSH K a b c d e c",
        "m" => "RPUSH K x y",
        "k" => "RPUSH K x",
        "n" => "INCRBY K 5",
        "e" => "RPUSH K a b c;EXPIRE K 1000",
        "q" => "INCRBY K 5;EXPIRE K 1000",
        "p" => "PFADD K a b",
        "j" => "XADD K * f 1;EXPIRE K 1000",
        "jg" => "XADD K * f 1;XGROUP CREATE K g 0;EXPIRE K 1000",
        "ms" => "SADD K a b c;EXPIREMEMBER K a 1000",
        "mh" => "HSET K f 1 g 2;HEXPIRE K 1000 FIELDS 1 f",
        "mz" => "ZADD K 1 a 2 b;EXPIREMEMBER K a 1000",
        _ => return vec![], // made by the write
    };
    let line = |l: &str| {
        l.split(' ')
            .map(|w| if w == "K" { k.clone() } else { w.to_string() })
            .collect()
    };
    lines.split(';').map(line).collect()
}

/// The commands that make key `x` of case `i`: [`setup`]'s line, or a
/// stream's several (`@x`, `@xb`: three entries, group g, two read by
/// alice, consumer bob).
fn setup_lines(i: usize, x: &str) -> Vec<Vec<String>> {
    if x != "x" && x != "xb" {
        return setup(i, x);
    }
    let k = format!("c{i}:{x}");
    let lines = [
        "XADD K * f 1",
        "XADD K * f 2",
        "XADD K * f 3",
        "XGROUP CREATE K g 0",
        "XREADGROUP GROUP g alice COUNT 2 STREAMS K >",
        "XGROUP CREATECONSUMER K g bob",
    ];
    let word = |w: &str| if w == "K" { k.clone() } else { w.to_string() };
    (lines.iter())
        .map(|l| l.split(' ').map(word).collect())
        .collect()
}

/// `words` with each `%j` the ID of entry j of the case's stream `@x`.
fn with_entry_ids(c: &mut redis::Connection, i: usize, words: Vec<String>) -> Vec<String> {
    if !words.iter().any(|w| w.starts_with('%')) {
        return words;
    }
    let entries: Vec<(String, Vec<String>)> = cmd(c, &["XRANGE", &format!("c{i}:x"), "-", "+"]);
    let id = |w: &str| {
        Some(
            entries[w.strip_prefix('%')?.parse::<usize>().ok()?]
                .0
                .clone(),
        )
    };
    (words.into_iter()).map(|w| id(&w).unwrap_or(w)).collect()
}

/// The words of case `i`'s write, its `@x` keys named for the case.
fn words(i: usize, write: &str) -> Vec<String> {
    let at = |w: &str| w.strip_prefix('@').map(|x| format!("c{i}:{x}"));
    write
        .split(' ')
        .map(|w| at(w).unwrap_or_else(|| w.to_string()))
        .collect()
}

/// Waits until both nodes hold one merge state of the stream `key`, its
/// groups' included (DEBUG DIGEST leaves groups out, so a group write's
/// record may still be on its way when the digests agree).
fn groups_converged(a: &mut redis::Connection, b: &mut redis::Connection, key: &str) {
    let state =
        |c: &mut redis::Connection| format!("{:?}", run(c, &s(&["DEBUG", "MERGEINFO", key])));
    eventually(&format!("one merge state of {key}"), || {
        state(a) == state(b)
    });
}

/// The states a node's link asked for (`conflicts=`).
fn asks(c: &mut redis::Connection) -> u64 {
    let info: String = cmd(c, &["INFO", "replication"]);
    let line = info.lines().find(|l| l.starts_with("peer0:"));
    let field = line.expect("a peer line").split(',');
    let n = field.into_iter().find_map(|f| f.strip_prefix("conflicts="));
    n.expect("a conflicts field").parse().unwrap()
}

#[test]
fn each_merging_write_travels_as_a_fact_or_asks_for_a_stated_reason() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    for (i, (write, _)) in CASES.iter().enumerate() {
        let mut keys: Vec<&str> = write
            .split(' ')
            .filter_map(|w| w.strip_prefix('@'))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for line in keys.into_iter().flat_map(|x| setup_lines(i, x)) {
            if !line.is_empty() {
                run(&mut a, &line).expect("setup");
            }
        }
    }
    converged(&[&p.a, &p.b]);
    let mut wrong = Vec::new();
    for (i, &(write, expect)) in CASES.iter().enumerate() {
        let before = asks(&mut a) + asks(&mut b);
        let words = with_entry_ids(&mut a, i, words(i, write));
        run(&mut a, &words).unwrap_or_else(|e| panic!("{write}: {e}"));
        converged(&[&p.a, &p.b]);
        for x in ["x", "xb", "jg"] {
            if write.split(' ').any(|w| w == format!("@{x}")) {
                groups_converged(&mut a, &mut b, &format!("c{i}:{x}"));
            }
        }
        let asked = asks(&mut a) + asks(&mut b) - before;
        eprintln!("{write}: {asked}");
        match expect {
            Fact if asked != 0 => wrong.push(format!("{write}: asked {asked}, listed as a fact")),
            Asks(why) if asked == 0 => {
                wrong.push(format!("{write}: asked none, listed as asking ({why})"))
            }
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Partitions `p`, runs `on_a` then (a few ms later, so its stamp is the
/// newer) `on_b`, and heals.
fn concurrently(
    p: &Pair,
    on_a: impl FnOnce(&mut redis::Connection),
    on_b: impl FnOnce(&mut redis::Connection),
) {
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    p.partition();
    on_a(&mut a);
    std::thread::sleep(std::time::Duration::from_millis(5));
    on_b(&mut b);
    p.heal();
}

/// Both nodes answer `read` with `want` (sorted), then converge.
fn both_read(p: &Pair, read: &[&str], want: &[&str]) {
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let sorted = |c: &mut redis::Connection| {
        let mut v: Vec<String> = cmd(c, read);
        v.sort();
        v
    };
    eventually(&format!("both nodes to read {read:?} = {want:?}"), || {
        sorted(&mut a) == want && sorted(&mut b) == want
    });
    converged(&[&p.a, &p.b]);
}

/// SPOP and SMOVE remove the dots they saw, as SREM: a concurrent SADD of
/// the member taken (a re-assert) keeps it; a member moved lands in the
/// destination.
#[test]
fn spop_and_smove_lose_to_a_concurrent_re_add() {
    let p = Pair::start(&[]);
    let _: i64 = cmd(&mut p.a.conn(), &["SADD", "s", "m"]);
    let _: i64 = cmd(&mut p.a.conn(), &["SADD", "t", "x"]);
    converged(&[&p.a, &p.b]);
    concurrently(
        &p,
        |a| assert_eq!(cmd::<String>(a, &["SPOP", "s"]), "m"),
        |b| assert_eq!(cmd::<i64>(b, &["SADD", "s", "m"]), 0),
    );
    both_read(&p, &["SMEMBERS", "s"], &["m"]);
    concurrently(
        &p,
        |a| assert_eq!(cmd::<i64>(a, &["SMOVE", "s", "t", "m"]), 1),
        |b| assert_eq!(cmd::<i64>(b, &["SADD", "s", "m", "n"]), 1),
    );
    both_read(&p, &["SMEMBERS", "s"], &["m", "n"]);
    both_read(&p, &["SMEMBERS", "t"], &["m", "x"]);
}

/// ZPOPMIN and ZREMRANGEBYSCORE remove the dots they saw, as ZREM: a
/// member added concurrently in the range, or re-added, stays.
#[test]
fn zset_pops_and_ranges_keep_a_concurrent_add() {
    let p = Pair::start(&[]);
    let _: i64 = cmd(
        &mut p.a.conn(),
        &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
    );
    converged(&[&p.a, &p.b]);
    concurrently(
        &p,
        |a| {
            let _: Vec<String> = cmd(a, &["ZPOPMIN", "z"]);
            let _: i64 = cmd(a, &["ZREMRANGEBYSCORE", "z", "2", "5"]);
        },
        |b| {
            let _: i64 = cmd(b, &["ZADD", "z", "4", "d"]);
            let _: i64 = cmd(b, &["ZADD", "z", "1", "a"]);
        },
    );
    both_read(&p, &["ZRANGE", "z", "0", "-1"], &["a", "d"]);
}

fn range(c: &mut redis::Connection, key: &str) -> Vec<String> {
    cmd(c, &["LRANGE", key, "0", "-1"])
}

/// Both nodes hold the lists `want` (key, values), then converge.
fn lists_hold(p: &Pair, want: &[(&str, &[&str])]) {
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    eventually(&format!("both nodes to hold {want:?}"), || {
        want.iter()
            .all(|(k, v)| range(&mut a, k) == *v && range(&mut b, k) == *v)
    });
    converged(&[&p.a, &p.b]);
}

/// LTRIM among equal values drops the elements it took, by id: a
/// concurrent pop of another element leaves the list two shorter, of the
/// same element one shorter (a token list neither gains nor loses one).
#[test]
fn ltrim_and_a_concurrent_pop_of_equal_values_drop_each_element_once() {
    let p = Pair::start(&[]);
    let _: i64 = cmd(&mut p.a.conn(), &["RPUSH", "l", "t", "t", "t", "t"]);
    converged(&[&p.a, &p.b]);
    concurrently(
        &p,
        |a| cmd::<()>(a, &["LTRIM", "l", "1", "-1"]),
        |b| assert_eq!(cmd::<String>(b, &["RPOP", "l"]), "t"),
    );
    lists_hold(&p, &[("l", &["t", "t"])]);
    let _: i64 = cmd(&mut p.a.conn(), &["RPUSH", "l", "u"]);
    converged(&[&p.a, &p.b]);
    concurrently(
        &p,
        |a| cmd::<()>(a, &["LTRIM", "l", "0", "-2"]),
        |b| assert_eq!(cmd::<String>(b, &["RPOP", "l"]), "u"),
    );
    lists_hold(&p, &[("l", &["t", "t"])]);
}

/// LMOVE is a pop from its source and a push onto its destination: the
/// element it took, popped concurrently on the other node, leaves the
/// source once; the moved value lands in the destination; equal values
/// are told apart by id.
#[test]
fn lmove_and_a_concurrent_pop_of_equal_values_converge() {
    let p = Pair::start(&[]);
    let _: i64 = cmd(&mut p.a.conn(), &["RPUSH", "l", "t", "t", "t"]);
    converged(&[&p.a, &p.b]);
    concurrently(
        &p,
        |a| assert_eq!(cmd::<String>(a, &["LMOVE", "l", "m", "RIGHT", "LEFT"]), "t"),
        |b| assert_eq!(cmd::<String>(b, &["LPOP", "l"]), "t"),
    );
    lists_hold(&p, &[("l", &["t"]), ("m", &["t"])]);
    concurrently(
        &p,
        |a| assert_eq!(cmd::<String>(a, &["RPOPLPUSH", "l", "m"]), "t"),
        |b| assert_eq!(cmd::<String>(b, &["RPOP", "l"]), "t"),
    );
    lists_hold(&p, &[("l", &[]), ("m", &["t", "t"])]);
}

/// LMOVE of a list onto itself is a pop of the element (by id) and a push
/// of its value: the element popped concurrently on the other node leaves
/// once, and the value lands at the other end all the same.
#[test]
fn a_rotation_and_a_concurrent_pop_of_its_element_converge() {
    let p = Pair::start(&[]);
    let _: i64 = cmd(&mut p.a.conn(), &["RPUSH", "l", "a", "b", "c"]);
    converged(&[&p.a, &p.b]);
    concurrently(
        &p,
        |a| assert_eq!(cmd::<String>(a, &["LMOVE", "l", "l", "LEFT", "RIGHT"]), "a"),
        |b| assert_eq!(cmd::<String>(b, &["LPOP", "l"]), "a"),
    );
    lists_hold(&p, &[("l", &["b", "c", "a"])]);
    concurrently(
        &p,
        |a| assert_eq!(cmd::<String>(a, &["RPOPLPUSH", "l", "l"]), "a"),
        |b| assert_eq!(cmd::<String>(b, &["LPOP", "l"]), "b"),
    );
    lists_hold(&p, &[("l", &["a", "c"])]);
}

/// Runs `writes` (node, command) on the mesh `all` (`c`: a connection to
/// each), converging after each; the states all nodes asked for meanwhile.
fn asks_for_writes(
    all: &[&Server],
    c: &mut [redis::Connection],
    writes: &[(usize, &[&str])],
) -> u64 {
    let before: u64 = c.iter_mut().map(asks_all).sum();
    for &(n, w) in writes {
        let words: Vec<String> = w.iter().map(|w| w.to_string()).collect();
        run(&mut c[n], &words).expect("a write");
        converged(all);
    }
    c.iter_mut().map(asks_all).sum::<u64>() - before
}

/// On a 3-mesh, the converted removes and moves, from two nodes, ask no
/// node for a state: each node applies each record once, however many
/// links bring it.
#[test]
fn removes_and_moves_ask_for_no_state_on_a_mesh() {
    let (nodes, _proxies) = mesh(3);
    let all: Vec<&Server> = nodes.iter().collect();
    let mut c: Vec<redis::Connection> = nodes.iter().map(Server::conn).collect();
    let _: i64 = cmd(&mut c[0], &["SADD", "s", "a", "b", "c", "d"]);
    let _: i64 = cmd(
        &mut c[0],
        &["ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d"],
    );
    let _: i64 = cmd(&mut c[0], &["RPUSH", "l", "t", "t", "t", "t", "t", "t"]);
    converged(&all);
    let writes: [(usize, &[&str]); 8] = [
        (0, &["SPOP", "s"]),
        (1, &["SMOVE", "s", "t", "d"]),
        (0, &["ZPOPMIN", "z"]),
        (1, &["ZREMRANGEBYRANK", "z", "-1", "-1"]),
        (0, &["LTRIM", "l", "1", "-2"]),
        (1, &["LMOVE", "l", "m", "LEFT", "LEFT"]),
        (0, &["RPOPLPUSH", "l", "l"]),
        (1, &["RPOPLPUSH", "l", "m"]),
    ];
    let asked = asks_for_writes(&all, &mut c, &writes);
    assert_eq!(asked, 0, "states asked for on the mesh");
    let m: Vec<String> = cmd(&mut c[2], &["LRANGE", "m", "0", "-1"]);
    assert_eq!(m, ["t", "t"]);
}

/// A whole-key delete is an observed remove of what its node had seen
/// (docs/MERGE.md): a member, field, element added concurrently
/// on the other node survives it. Its record carries the state the delete
/// left (DECISIONS 242), so neither node asks for one.
#[test]
fn a_delete_travels_as_a_fact_and_keeps_a_concurrent_add() {
    let p = Pair::start(&[]);
    let mut a = p.a.conn();
    let _: i64 = cmd(&mut a, &["SADD", "s", "a", "b"]);
    let _: i64 = cmd(&mut a, &["HSET", "h", "f", "1"]);
    let _: i64 = cmd(&mut a, &["ZADD", "z", "1", "a"]);
    let _: i64 = cmd(&mut a, &["RPUSH", "l", "a", "b"]);
    converged(&[&p.a, &p.b]);
    let before = asks(&mut a) + asks(&mut p.b.conn());
    concurrently(
        &p,
        |a| assert_eq!(cmd::<i64>(a, &["DEL", "s", "h", "z", "l"]), 4),
        |b| {
            let _: i64 = cmd(b, &["SADD", "s", "y"]);
            let _: i64 = cmd(b, &["HSET", "h", "g", "2"]);
            let _: i64 = cmd(b, &["ZADD", "z", "2", "b"]);
            let _: i64 = cmd(b, &["RPUSH", "l", "c"]);
        },
    );
    both_read(&p, &["SMEMBERS", "s"], &["y"]);
    both_read(&p, &["HGETALL", "h"], &["2", "g"]);
    both_read(&p, &["ZRANGE", "z", "0", "-1"], &["b"]);
    lists_hold(&p, &[("l", &["c"])]);
    // Deleted again, now with nothing concurrent: gone on both.
    let _: Vec<String> = cmd(&mut a, &["SPOP", "s", "5"]);
    let _: i64 = cmd(&mut a, &["UNLINK", "h"]);
    both_read(&p, &["KEYS", "[sh]"], &[]);
    let asked = asks(&mut a) + asks(&mut p.b.conn()) - before;
    assert_eq!(asked, 0, "states asked for by the deletes");
}

/// A counter's delete resets what its node had seen: an increment made
/// concurrently on the other node survives it (the rules table: "SET/DEL
/// on a counter"), and the delete asks for no state.
#[test]
fn a_counters_delete_keeps_a_concurrent_increment() {
    let p = Pair::start(&[]);
    let mut a = p.a.conn();
    let _: i64 = cmd(&mut a, &["INCRBY", "n", "10"]);
    let _: i64 = cmd(&mut p.b.conn(), &["INCRBY", "n", "5"]);
    converged(&[&p.a, &p.b]);
    let before = asks(&mut a) + asks(&mut p.b.conn());
    concurrently(
        &p,
        |a| assert_eq!(cmd::<i64>(a, &["DEL", "n"]), 1),
        |b| assert_eq!(cmd::<i64>(b, &["INCR", "n"]), 16),
    );
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    eventually("both nodes to read n = 1", || {
        let n = |c: &mut redis::Connection| cmd::<Option<String>>(c, &["GET", "n"]);
        n(&mut a).as_deref() == Some("1") && n(&mut b).as_deref() == Some("1")
    });
    converged(&[&p.a, &p.b]);
    // Then a delete with nothing concurrent, and the counter made again.
    assert_eq!(cmd::<i64>(&mut b, &["DEL", "n"]), 1);
    assert_eq!(cmd::<i64>(&mut b, &["INCR", "n"]), 1);
    converged(&[&p.a, &p.b]);
    assert_eq!(cmd::<String>(&mut a, &["GET", "n"]), "1");
    let asked = asks(&mut a) + asks(&mut b) - before;
    assert_eq!(asked, 0, "states asked for by the deletes");
}

/// An overwrite is a delete of what its node had seen of the destination
/// plus the new contents as new adds (docs/MERGE.md): a member
/// added concurrently on the other node survives a *STORE, a COPY ...
/// REPLACE and a RENAME onto its key, and a RENAME's source keeps what
/// was added to it concurrently. Each record carries the states of the
/// keys it wrote (DECISIONS 245-246), so neither node asks for one.
#[test]
fn an_overwrite_travels_as_a_fact_and_keeps_a_concurrent_add() {
    let p = Pair::start(&[]);
    let mut a = p.a.conn();
    let _: i64 = cmd(&mut a, &["SADD", "s", "a", "b"]);
    let _: i64 = cmd(&mut a, &["SADD", "t", "c"]);
    let _: i64 = cmd(&mut a, &["SADD", "u", "d"]);
    let _: i64 = cmd(&mut a, &["ZADD", "z", "1", "a", "2", "b"]);
    let _: i64 = cmd(&mut a, &["ZADD", "w", "5", "e"]);
    let _: i64 = cmd(&mut a, &["HSET", "h", "f", "1"]);
    let _: i64 = cmd(&mut a, &["HSET", "g", "k", "2"]);
    converged(&[&p.a, &p.b]);
    let before = asks(&mut a) + asks(&mut p.b.conn());
    concurrently(
        &p,
        |a| {
            assert_eq!(cmd::<i64>(a, &["SUNIONSTORE", "s", "t"]), 1);
            assert_eq!(cmd::<i64>(a, &["ZRANGESTORE", "z", "w", "0", "-1"]), 1);
            assert_eq!(cmd::<i64>(a, &["COPY", "t", "u", "REPLACE"]), 1);
            cmd::<()>(a, &["RENAME", "g", "h"]);
        },
        |b| {
            let _: i64 = cmd(b, &["SADD", "s", "y"]);
            let _: i64 = cmd(b, &["ZADD", "z", "3", "y"]);
            let _: i64 = cmd(b, &["SADD", "u", "y"]);
            let _: i64 = cmd(b, &["HSET", "h", "y", "3"]);
            let _: i64 = cmd(b, &["HSET", "g", "x", "4"]);
        },
    );
    both_read(&p, &["SMEMBERS", "s"], &["c", "y"]);
    both_read(&p, &["ZRANGE", "z", "0", "-1"], &["e", "y"]);
    both_read(&p, &["SMEMBERS", "u"], &["c", "y"]);
    both_read(&p, &["HGETALL", "h"], &["2", "3", "k", "y"]);
    both_read(&p, &["HGETALL", "g"], &["4", "x"]);
    // Overwritten again, with nothing concurrent.
    let _: i64 = cmd(&mut a, &["SINTERSTORE", "s", "t", "u"]);
    let _: i64 = cmd(&mut a, &["ZUNIONSTORE", "z", "2", "z", "w"]);
    both_read(&p, &["SMEMBERS", "s"], &["c"]);
    both_read(&p, &["ZRANGE", "z", "0", "-1"], &["e", "y"]);
    let asked = asks(&mut a) + asks(&mut p.b.conn()) - before;
    assert_eq!(asked, 0, "states asked for by the overwrites");
}

/// On a 3-mesh, deletes and overwrites from two nodes ask no node for a
/// state: each node joins each record's states once, however many links
/// bring it, and all end equal.
#[test]
fn deletes_and_overwrites_ask_for_no_state_on_a_mesh() {
    let (nodes, _proxies) = mesh(3);
    let all: Vec<&Server> = nodes.iter().collect();
    let mut c: Vec<redis::Connection> = nodes.iter().map(Server::conn).collect();
    let _: i64 = cmd(&mut c[0], &["SADD", "s", "a", "b"]);
    let _: i64 = cmd(&mut c[0], &["SADD", "t", "c"]);
    let _: i64 = cmd(&mut c[1], &["ZADD", "z", "1", "a"]);
    let _: i64 = cmd(&mut c[1], &["INCRBY", "n", "7"]);
    let _: i64 = cmd(&mut c[2], &["INCRBY", "n", "3"]);
    converged(&all);
    let writes: [(usize, &[&str]); 6] = [
        (0, &["SUNIONSTORE", "u", "s", "t"]),
        (1, &["DEL", "s", "z"]),
        (0, &["GETDEL", "n"]),
        (1, &["RENAME", "u", "s"]),
        (0, &["COPY", "t", "s", "REPLACE"]),
        (1, &["SADD", "s", "d"]),
    ];
    let asked = asks_for_writes(&all, &mut c, &writes);
    assert_eq!(asked, 0, "states asked for on the mesh");
    for (n, c) in c.iter_mut().enumerate() {
        let mut s: Vec<String> = cmd(c, &["SMEMBERS", "s"]);
        s.sort();
        assert_eq!(s, ["c", "d"], "node {n}");
        let keys: Vec<String> = cmd(c, &["KEYS", "[nuz]"]);
        assert!(keys.is_empty(), "node {n}: {keys:?}");
    }
}

/// `key`'s `member` TTL in seconds on both nodes, once they agree.
fn member_ttl_on_both(p: &Pair, key: &str, member: &str) -> i64 {
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let mut last = (0, 0);
    eventually("both nodes to agree on a member's TTL", || {
        last = (
            cmd::<i64>(&mut a, &["TTL", key, member]),
            cmd::<i64>(&mut b, &["TTL", key, member]),
        );
        last.0.abs_diff(last.1) <= 1
    });
    last.0
}

/// Member TTL writes travel as facts (DECISIONS 326): one applies on the
/// peer with no state asked for; a concurrent write on the same member
/// replaced the dot the other's fact names, so each side lacks it and asks
/// for the key's state, and the join gives both the longest TTL; after
/// that, writes are facts again. An SADD of a member concurrent with a
/// HSET that cleared a field's TTL elsewhere: the peer's replay of the
/// HSET would clear it again, so it asks (DECISIONS 327).
#[test]
fn member_ttl_facts_apply_and_a_replaced_dot_asks() {
    let p = Pair::start(&[]);
    let (mut a, mut b) = (p.a.conn(), p.b.conn());
    let _: i64 = cmd(&mut a, &["SADD", "s", "x", "y"]);
    let _: i64 = cmd(&mut a, &["HSET", "h", "f", "1", "g", "2"]);
    assert_eq!(cmd::<i64>(&mut a, &["EXPIREMEMBER", "s", "x", "100"]), 1);
    converged(&[&p.a, &p.b]);
    let before = asks(&mut a) + asks(&mut b);
    // A fact applied: the peer takes the TTL with no state asked for.
    assert_eq!(cmd::<i64>(&mut a, &["EXPIREMEMBER", "s", "x", "200"]), 1);
    let set: Vec<i64> = cmd(&mut b, &["HEXPIRE", "h", "300", "FIELDS", "1", "f"]);
    assert_eq!(set, [1]);
    assert!((198..=200).contains(&member_ttl_on_both(&p, "s", "x")));
    assert!((298..=300).contains(&member_ttl_on_both(&p, "h", "f")));
    converged(&[&p.a, &p.b]);
    assert_eq!(asks(&mut a) + asks(&mut b), before, "facts applied");
    // Concurrent writes of one member's TTL: each replaced the dot the
    // other's fact names, so both ask, and the longest wins on both.
    concurrently(
        &p,
        |a| assert_eq!(cmd::<i64>(a, &["EXPIREMEMBER", "s", "x", "400"]), 1),
        |b| assert_eq!(cmd::<i64>(b, &["EXPIREMEMBER", "s", "x", "300"]), 1),
    );
    assert!((398..=400).contains(&member_ttl_on_both(&p, "s", "x")));
    converged(&[&p.a, &p.b]);
    let after = asks(&mut a) + asks(&mut b);
    assert!(after > before, "a fact whose replaced dot is gone asks");
    // An HSET that clears a field's TTL asks; the peer agrees it is gone.
    let _: i64 = cmd(&mut b, &["HSET", "h", "f", "5"]);
    assert_eq!(member_ttl_on_both(&p, "h", "f"), -1);
    converged(&[&p.a, &p.b]);
    let cleared = asks(&mut a) + asks(&mut b);
    assert!(cleared > after, "HSET of a field with a TTL goes by state");
    // Writes that change no member TTL, and member TTL writes, are facts.
    let _: i64 = cmd(&mut b, &["SADD", "s", "z"]);
    let _: i64 = cmd(&mut a, &["HSET", "h", "g", "7"]);
    assert_eq!(cmd::<i64>(&mut b, &["PERSIST", "s", "x"]), 1);
    let gone: Vec<i64> = cmd(&mut a, &["HPERSIST", "h", "FIELDS", "1", "f"]);
    assert_eq!(gone, [-1]);
    assert_eq!(member_ttl_on_both(&p, "s", "x"), -1);
    converged(&[&p.a, &p.b]);
    assert_eq!(asks(&mut a) + asks(&mut b), cleared, "facts again");
}
