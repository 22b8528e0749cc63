//! The merge workload and its checks (issue 13: "every counter equals the
//! sum of the increments that were acknowledged, no deleted element
//! reappears unless re-added later").
//!
//! The full workload (tests/common/workload.rs) mixes every command family
//! on a few keys: type changes, RENAME, *STORE, expiry and flushes make the
//! expected value of a merging key a matter of the whole history, so there
//! merging keys are checked by `converged` only. This workload keeps to
//! what merges, on keys of one type each, and checks each key against a
//! model built from what each acknowledged command did at its origin:
//!
//! - **Counters** (`c0`, `c1`: INCR, INCRBY, DECR, DECRBY): the value every
//!   node ends with is the sum of the acknowledged increments. So too each
//!   field of the hash `h2`, which only HINCRBY writes; `h1` mixes HINCRBY
//!   with HSET, HDEL, DEL and HINCRBYFLOAT (field counters and their
//!   resets: checked by `converged`). Float counters too: `f0` (only
//!   INCRBYFLOAT) and the fields of `h3` (only HINCRBYFLOAT) end at the
//!   sum of their increments, quarters, so that the sum is exact; so do
//!   the scores of `z1` (only ZINCRBY; `z0` mixes it with ZADD, ZREM, DEL).
//! - **HyperLogLog** (`p0`: only PFADD): every node ends with the registers
//!   of one sketch fed every acknowledged element; `p1` mixes PFADD with
//!   DEL, PFMERGE, PFCOUNT and EXPIRE (checked by `converged`).
//! - **Streams** (`x0`: XADD `*`, XADD MAXLEN, XDEL and XTRIM MINID of an
//!   entry the origin holds, XTRIM MAXLEN, DEL): every node ends with every
//!   acknowledged XADD's entry but those an acknowledged XDEL, trim or DEL
//!   removed where it ran (entries are members named by their IDs). Its
//!   consumer groups (`g0`, `g1`: CREATE, XREADGROUP, XACK, XCLAIM,
//!   XAUTOCLAIM, SETID with or without ENTRIESREAD, DELCONSUMER, DESTROY)
//!   are checked by `converged`: every node ends with the same groups,
//!   last IDs, pending entries (owner, delivery count) and consumers. A
//!   second stream, `x1` (XADD making it, DEL, XSETID, TTL writes and
//!   PERSIST, CREATE MKSTREAM, reads of both streams), by `converged`.
//! - **TTLs**: `s1` also takes EXPIRE (far in the future) and PERSIST, its
//!   TTL a register of its own (checked by `converged`). Member TTLs
//!   (EXPIREMEMBER and its family, HEXPIRE/HPEXPIREAT, HPERSIST, `PERSIST
//!   key member`, far in the future) on `s1`, `h0` and `z0`, each member's
//!   a register of its own (checked by `member TTLs`, DECISIONS 309).
//! - **Elements** (sets `s0`, `s1`; hash `h0`; sorted set `z0`: adds,
//!   removes, ZPOPMIN/ZPOPMAX, ZREMRANGEBYSCORE/RANK, DEL; list `l0`:
//!   pushes, pops, rotations (LMOVE/RPOPLPUSH onto itself), LREM,
//!   LINSERT, LSET, LTRIM at either or both ends,
//!   its elements named by their ids): around each command the origin's merge state of the key
//!   is read (without storing it: `Meta::current`), and the dots it added
//!   and removed are logged. The observed-remove rule then says exactly
//!   what must remain: a member is present if and only if one of its added
//!   dots was removed by no command, with the value of the newest such dot
//!   (a field's, a score). A member present otherwise is a deleted element
//!   that came back; one missing is an acknowledged add lost. Merges make no
//!   dots, so every dot a node ends with must be one a command made.

use std::collections::{BTreeMap, BTreeSet};

use lattice::facade::keyspace::hll;
use lattice::facade::keyspace::merge::elements::{item_of, items, Item};
use lattice::facade::keyspace::merge::Meta;
use lattice::facade::server::Server;
use rand::rngs::StdRng;
use rand::Rng;

use super::check::{show_key, World};

/// The workloads a run may use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Workload {
    /// Every write command family (tests/common/workload.rs).
    #[default]
    Every,
    /// Counters and collections only, checked against their merge rules.
    Merging,
}

const DB: usize = 0;
const MEMBERS: [&str; 4] = ["m0", "m1", "m2", "m3"];

/// One command of the merge workload.
pub fn draw(rng: &mut StdRng) -> Vec<Vec<u8>> {
    let member = |rng: &mut StdRng| MEMBERS[rng.gen_range(0..MEMBERS.len())].to_string();
    let words: Vec<String> = match rng.gen_range(0..145) {
        0..=29 => {
            let key = format!("c{}", rng.gen_range(0..2));
            match rng.gen_range(0..5) {
                0 => vec!["INCR".into(), key],
                1 => vec!["DECR".into(), key],
                2 => vec!["INCRBY".into(), key, rng.gen_range(-9..=9).to_string()],
                3 => vec!["DECRBY".into(), key, rng.gen_range(-9..=9).to_string()],
                _ => vec!["INCRBYFLOAT".into(), "f0".into(), quarter(rng)],
            }
        }
        30..=54 => {
            let key = format!("s{}", rng.gen_range(0..2));
            match rng.gen_range(0..12) {
                0..=4 => vec!["SADD".into(), key, member(rng), member(rng)],
                5..=8 => vec!["SREM".into(), key, member(rng)],
                9 => vec!["DEL".into(), key],
                10 => {
                    let secs = rng.gen_range(100_000..100_010).to_string();
                    vec!["EXPIRE".into(), "s1".into(), secs]
                }
                _ => vec!["PERSIST".into(), "s1".into()],
            }
        }
        55..=64 => {
            let by = rng.gen_range(-9..=9).to_string();
            match rng.gen_range(0..12) {
                0..=3 => vec!["HINCRBY".into(), "h2".into(), member(rng), by],
                4..=6 => vec!["HINCRBY".into(), "h1".into(), member(rng), by],
                7 => vec!["HSET".into(), "h1".into(), member(rng), by],
                8 => vec!["HDEL".into(), "h1".into(), member(rng)],
                9 => vec!["DEL".into(), "h1".into()],
                10 => vec![
                    "HINCRBYFLOAT".into(),
                    "h3".into(),
                    member(rng),
                    quarter(rng),
                ],
                _ => vec![
                    "HINCRBYFLOAT".into(),
                    "h1".into(),
                    member(rng),
                    quarter(rng),
                ],
            }
        }
        65..=79 => match rng.gen_range(0..12) {
            0..=5 => {
                let v = format!("v{}", rng.gen_range(0..3));
                vec!["HSET".into(), "h0".into(), member(rng), v]
            }
            6..=8 => vec!["HDEL".into(), "h0".into(), member(rng)],
            9 => vec!["DEL".into(), "h0".into()],
            10 => ttl_write(rng, "h0"),
            _ => vec!["PERSIST".into(), "h0".into()],
        },
        80..=89 => {
            let v = member(rng);
            // The edits' variants from the member drawn (no more draws:
            // the other keys' streams stay as they were).
            let pick = usize::from(v.as_bytes().last().copied().unwrap_or(0)) % 3;
            let w: Vec<&str> = match rng.gen_range(0..12) {
                0..=2 => vec!["LPUSH", "l0", &v],
                3..=5 => vec!["RPUSH", "l0", &v, "x"],
                // A pop, or a rotation (a pop and a push of its value).
                6 if pick == 2 => vec!["LMOVE", "l0", "l0", "LEFT", "RIGHT"],
                6 => vec!["LPOP", "l0"],
                7 if pick == 2 => vec!["RPOPLPUSH", "l0", "l0"],
                7 => vec!["RPOP", "l0"],
                8 => vec!["LREM", "l0", ["1", "0", "-1"][pick], &v],
                9 => vec!["LINSERT", "l0", ["BEFORE", "AFTER"][pick % 2], &v, "y"],
                10 => vec!["LSET", "l0", ["1", "-1", "0"][pick], &v],
                // Trims at the tail, at both ends, at the head.
                _ => match pick {
                    0 => vec!["LTRIM", "l0", "0", "4"],
                    1 => vec!["LTRIM", "l0", "1", "-1"],
                    _ => vec!["LTRIM", "l0", "1", "-2"],
                },
            };
            w.into_iter().map(String::from).collect()
        }
        130.. => draw_member_ttl(rng),
        110.. => draw_stream(rng),
        100..=109 => {
            // HyperLogLog: `p0` only grows (PFADD), `p1` also takes DEL,
            // PFMERGE, PFCOUNT (its cached estimate) and EXPIRE.
            let ele = |rng: &mut StdRng| format!("e{}", rng.gen_range(0..40));
            match rng.gen_range(0..12) {
                0..=5 => vec!["PFADD".into(), "p0".into(), ele(rng), ele(rng)],
                6..=7 => vec!["PFADD".into(), "p1".into(), ele(rng)],
                8 => vec!["DEL".into(), "p1".into()],
                9 => vec!["PFMERGE".into(), "p1".into(), "p0".into()],
                10 => vec!["PFCOUNT".into(), "p1".into()],
                _ => {
                    let secs = rng.gen_range(100_000..100_010).to_string();
                    vec!["EXPIRE".into(), "p1".into(), secs]
                }
            }
        }
        _ => match rng.gen_range(0..14) {
            0..=5 => {
                let score = rng.gen_range(1..4).to_string();
                vec!["ZADD".into(), "z0".into(), score, member(rng)]
            }
            6..=7 => vec!["ZREM".into(), "z0".into(), member(rng)],
            8 => {
                // Removes that pick their members here, the variant from
                // the member drawn (no more draws: other keys' streams stay).
                let m = member(rng);
                let w: &[&str] = match m.as_bytes()[1] {
                    b'0' => &["ZPOPMIN", "z0"],
                    b'1' => &["ZPOPMAX", "z0", "2"],
                    b'2' => &["ZREMRANGEBYSCORE", "z0", "2", "3"],
                    _ => &["ZREMRANGEBYRANK", "z0", "0", "0"],
                };
                w.iter().map(|w| w.to_string()).collect()
            }
            9 => vec!["DEL".into(), "z0".into()],
            10 => vec!["ZINCRBY".into(), "z0".into(), quarter(rng), member(rng)],
            11 => ttl_write(rng, "z0"),
            _ => vec!["ZINCRBY".into(), "z1".into(), quarter(rng), member(rng)],
        },
    };
    words.into_iter().map(String::into_bytes).collect()
}

/// A TTL write on `key` (far in the future: no key expires during a run):
/// EXPIRE, PEXPIREAT, or EXPIRE GT (which leaves a longer TTL as it is).
/// Travels as a fact of the key's TTL register (keyspace/merge/ttl.rs).
fn ttl_write(rng: &mut StdRng, key: &str) -> Vec<String> {
    let secs = rng.gen_range(100_000..100_010);
    let w = |s: &[&str]| -> Vec<String> { s.iter().map(|w| w.to_string()).collect() };
    match secs % 3 {
        0 => w(&["EXPIRE", key, &secs.to_string()]),
        1 => w(&["PEXPIREAT", key, &(4_000_000_000_000u64 + secs).to_string()]),
        _ => w(&["EXPIRE", key, &secs.to_string(), "GT"]),
    }
}

/// A write of a member's TTL (DECISIONS 306, 309) on `s1`, `h0` or `z0`,
/// far in the future (no member expires during a run, so the dot model of
/// [`Log`] needs no expiries): EXPIREMEMBER (s or ms), EXPIREMEMBERAT,
/// PEXPIREMEMBERAT, KeyDB's `PERSIST key member`, and on `h0` HEXPIRE,
/// HPEXPIREAT (with NX/XX/GT/LT now and then) and HPERSIST of 1-2
/// fields. `h0`'s HSETs clear a field's TTL (DECISIONS 306). Checked by
/// `member TTLs` (tests/sim/check.rs): every node ends with the same TTLs.
fn draw_member_ttl(rng: &mut StdRng) -> Vec<String> {
    let key = ["s1", "h0", "z0"][rng.gen_range(0..3)];
    let m = MEMBERS[rng.gen_range(0..MEMBERS.len())];
    let secs = rng.gen_range(100_000..100_010);
    let at_ms = (4_000_000_000_000u64 + secs).to_string();
    let secs = secs.to_string();
    let w = |s: &[&str]| -> Vec<String> { s.iter().map(|w| w.to_string()).collect() };
    let fields = |rng: &mut StdRng| -> Vec<&str> {
        let n = rng.gen_range(1..3);
        (0..n)
            .map(|_| MEMBERS[rng.gen_range(0..MEMBERS.len())])
            .collect()
    };
    match rng.gen_range(0..10) {
        0..=1 => w(&["EXPIREMEMBER", key, m, &secs]),
        2 => w(&["EXPIREMEMBER", key, m, &format!("{secs}000"), "ms"]),
        3 => w(&["EXPIREMEMBERAT", key, m, &at_ms[..at_ms.len() - 3]]),
        4 => w(&["PEXPIREMEMBERAT", key, m, &at_ms]),
        5 => w(&["PERSIST", key, m]),
        6..=7 => {
            let flag = ["", "NX", "XX", "GT", "LT"][rng.gen_range(0..5)];
            let fs = fields(rng);
            let name = if fs.len() == 1 {
                "HEXPIRE"
            } else {
                "HPEXPIREAT"
            };
            let when = if fs.len() == 1 { &secs } else { &at_ms };
            let mut l = w(&[name, "h0", when]);
            l.extend((!flag.is_empty()).then(|| flag.to_string()));
            l.extend(w(&["FIELDS", &fs.len().to_string()]));
            l.extend(w(&fs));
            l
        }
        _ => {
            let fs = fields(rng);
            let mut l = w(&["HPERSIST", "h0", "FIELDS", &fs.len().to_string()]);
            l.extend(w(&fs));
            l
        }
    }
}

/// A command on the stream `x0`: XADD `*` (sometimes with MAXLEN), XDEL and
/// XTRIM MINID of an entry the origin holds (`@pick<k>`, bound by
/// [`bind`]), XTRIM MAXLEN, DEL.
fn draw_stream(rng: &mut StdRng) -> Vec<String> {
    let pick = |rng: &mut StdRng| format!("@pick{}", rng.gen_range(0..6));
    let v = |rng: &mut StdRng| format!("v{}", rng.gen_range(0..9));
    let n = |rng: &mut StdRng| rng.gen_range(2..8).to_string();
    let w = |s: &[&str]| -> Vec<String> { s.iter().map(|w| w.to_string()).collect() };
    match rng.gen_range(0..28) {
        0..=5 => w(&["XADD", "x0", "*", "f", &v(rng)]),
        6 => w(&["XADD", "x0", "MAXLEN", "=", &n(rng), "*", "f", &v(rng)]),
        7..=8 => w(&["XDEL", "x0", &pick(rng)]),
        9 => w(&["XTRIM", "x0", "MAXLEN", "=", &n(rng)]),
        10 => w(&["XTRIM", "x0", "MINID", "=", &pick(rng)]),
        11 => w(&["DEL", "x0"]),
        24.. => draw_second_stream(rng),
        _ => draw_group(rng),
    }
}

/// A command on the second stream `x1` (checked by `converged` only):
/// XADD `*` (which makes it where it is absent: DECISIONS 297), DEL,
/// XSETID to its top entry (`@top1`, bound by [`bind`]; with ENTRIESADDED
/// and MAXDELETEDID or not), a TTL write or PERSIST, XGROUP CREATE
/// MKSTREAM, and a read of both streams (NOACK or not).
fn draw_second_stream(rng: &mut StdRng) -> Vec<String> {
    let w = |s: &[&str]| -> Vec<String> { s.iter().map(|w| w.to_string()).collect() };
    let c = format!("c{}", rng.gen_range(0..3));
    let read = ["XREADGROUP", "GROUP", "g0", &c, "COUNT", "2"];
    let streams = ["STREAMS", "x0", "x1", ">", ">"];
    match rng.gen_range(0..12) {
        0..=2 => w(&["XADD", "x1", "*", "f", &c]),
        3 => w(&["DEL", "x1"]),
        4 => w(&["XSETID", "x1", "@top1"]),
        5 => w(&[
            "XSETID",
            "x1",
            "@top1",
            "ENTRIESADDED",
            "100",
            "MAXDELETEDID",
            "@top1",
        ]),
        6 => ttl_write(rng, "x1"),
        7 => w(&["PERSIST", "x1"]),
        8 => w(&["XGROUP", "CREATE", "x1", "g0", "0", "MKSTREAM"]),
        9 => w(&[&read[..], &["NOACK"], &streams].concat()),
        _ => w(&[&read[..], &streams].concat()),
    }
}

/// A consumer-group command on `x0` (groups `g0`, `g1`; consumers `c0`..
/// `c2`): CREATE (MKSTREAM), XREADGROUP (NOACK or not), XACK and XCLAIM of an entry the
/// origin holds, XAUTOCLAIM, SETID back to the start or to an entry with
/// ENTRIESREAD, DELCONSUMER, DESTROY. Checked by `converged` (its canonical stream holds the groups,
/// their last IDs, pending entries with owners and counts, consumers).
fn draw_group(rng: &mut StdRng) -> Vec<String> {
    let g = format!("g{}", rng.gen_range(0..2));
    let c = format!("c{}", rng.gen_range(0..3));
    let pick = format!("@pick{}", rng.gen_range(0..6));
    let w = |s: &[&str]| -> Vec<String> { s.iter().map(|w| w.to_string()).collect() };
    let read = [
        "XREADGROUP",
        "GROUP",
        &g,
        &c,
        "COUNT",
        "2",
        "STREAMS",
        "x0",
        ">",
    ];
    match rng.gen_range(0..16) {
        0..=2 => w(&["XGROUP", "CREATE", "x0", &g, "0", "MKSTREAM"]),
        // (A NOACK read takes the draw made already, as SETID ENTRIESREAD
        // below: one read in five, DECISIONS 285.)
        7 => w(&[&read[..6], &["NOACK"], &read[6..]].concat()),
        3..=6 => w(&read),
        8..=10 => w(&["XACK", "x0", &g, &pick]),
        11..=12 => w(&["XCLAIM", "x0", &g, &c, "0", &pick]),
        13 => w(&["XAUTOCLAIM", "x0", &g, &c, "0", "0-0", "COUNT", "2"]),
        // (SETID ... ENTRIESREAD takes the draws made already, so that
        // no seed's sequence of draws changed when it came: its count is
        // the consumer's digit.)
        14 => match rng.gen_range(0..3) {
            0 => w(&["XGROUP", "SETID", "x0", &g, "0"]),
            1 => w(&["XGROUP", "DELCONSUMER", "x0", &g, &c]),
            _ => w(&["XGROUP", "SETID", "x0", &g, &pick, "ENTRIESREAD", &c[1..]]),
        },
        _ => w(&["XGROUP", "DESTROY", "x0", &g]),
    }
}

/// `line` with each `@pick<k>` replaced by the ID of the `k`-th entry
/// (modulo their number) of the stream `x0` on `srv` (`0-1` where it has
/// none): XDEL and XTRIM MINID of entries the origin holds; each `@top1`
/// by the top entry's ID of `x1` (`0-1` where it has none).
pub fn bind(srv: &Server, mut line: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let ids: Vec<Vec<u8>> = stream_ids(srv, b"x0");
    for w in line.iter_mut().skip(2).filter(|w| *w == b"@top1") {
        *w = (stream_ids(srv, b"x1").pop()).unwrap_or_else(|| b"0-1".to_vec());
    }
    for w in line.iter_mut().skip(2) {
        let Some(k) = w.strip_prefix(b"@pick") else {
            continue;
        };
        let k: usize = std::str::from_utf8(k).unwrap().parse().unwrap();
        *w = match ids.len() {
            0 => b"0-1".to_vec(),
            n => ids[k % n].clone(),
        };
    }
    line
}

/// The key a command of the merge workload writes: `x0` for every stream
/// command (XGROUP and XREADGROUP name it after other words).
pub fn observed_key(line: &[Vec<u8>]) -> Vec<u8> {
    match line.iter().any(|w| w == b"x0") {
        true => b"x0".to_vec(),
        false => line[1].clone(),
    }
}

/// The consumer groups of `x0` on `srv` as members with their dots (its
/// merge state brought up to date and stored, as `observe` does for
/// collections): `#g/<group>@<dot>` for each CREATE dot, and
/// `#p/<group>@<incarnation>/<ID>` for each pending entry with its dot,
/// its incarnation the CREATE dot it was delivered under
/// (`keyspace/merge/groups.rs`).
fn group_dots(srv: &Server) -> Dots {
    let ks = &srv.keyspace;
    let slot = ks.slot(b"x0");
    let mut g = ks.db(DB).lock(slot.shard);
    let mut out = Dots::new();
    let Some(Meta::Stream(s)) = g.merge_meta_now(slot.hash, b"x0").cloned() else {
        return out;
    };
    for (name, m) in &s.groups {
        let name = String::from_utf8_lossy(name);
        for &d in &m.dots {
            out.insert(
                format!("#g/{name}@{d}").into_bytes(),
                vec![(d, Item::Member)],
            );
        }
        for (id, p) in &m.pel {
            for &(dot, inc) in &p.dots {
                let member = format!("#p/{name}@{inc}/{}", id.text()).into_bytes();
                out.entry(member).or_default().push((dot, Item::Member));
            }
        }
    }
    out
}

/// The groups and pending entries of `x0` the observed-remove rule gives
/// of `members` (the log's expected ones, or a node's): each group with a
/// CREATE dot left (`#g/<group>`), each pending entry with a dot left whose
/// CREATE (incarnation) is left (`#p/<group>/<ID>`).
fn live_groups(members: impl Iterator<Item = Vec<u8>>) -> BTreeSet<String> {
    let members: Vec<String> = (members.map(|m| String::from_utf8_lossy(&m).into_owned()))
        .filter(|m| m.starts_with('#'))
        .collect();
    let creates: BTreeSet<&str> = (members.iter())
        .filter_map(|m| m.strip_prefix("#g/"))
        .collect();
    let mut out = BTreeSet::new();
    for m in &members {
        if let Some(c) = m.strip_prefix("#g/") {
            out.insert(format!("#g/{}", c.split('@').next().unwrap_or_default()));
        } else if let Some((create, id)) = m.strip_prefix("#p/").and_then(|p| p.split_once('/')) {
            if creates.contains(create) {
                let group = create.split('@').next().unwrap_or_default();
                out.insert(format!("#p/{group}/{id}"));
            }
        }
    }
    out
}

/// The entry IDs of the stream at `key` on `srv`, in order (none where it
/// is absent or no stream).
fn stream_ids(srv: &Server, key: &[u8]) -> Vec<Vec<u8>> {
    use lattice::facade::keyspace::stream::StreamId;
    let ks = &srv.keyspace;
    let slot = ks.slot(key);
    let g = ks.db(DB).lock(slot.shard);
    match g.get_raw(slot.hash, key).map(|e| &e.value) {
        Some(lattice::facade::keyspace::Value::Stream(s)) => {
            (s.range(StreamId::MIN, StreamId::MAX, false))
                .map(|(id, _)| id.text().into_bytes())
                .collect()
        }
        _ => vec![],
    }
}

/// A float increment whose sums stay exact in binary (quarters), so that
/// the expected value of a float counter is known to the digit.
fn quarter(rng: &mut StdRng) -> String {
    (f64::from(rng.gen_range(-12..=12)) / 4.0).to_string()
}

/// A collection's members as its node's merge state sees them now: each
/// with its dots (stamp and value), oldest first.
type Dots = BTreeMap<Vec<u8>, Vec<(u64, Item)>>;

/// The members of `key` on `srv`, dotted (empty for a counter or an
/// absent key). The merge state is brought up to date and stored, as a
/// peer's asking for the key's state would: a dot it names is then the
/// one every later state of the node names (an unstored one may move to
/// a later write's stamp while nobody has seen it: the laziness of
/// `keyspace/merge/elements.rs`).
pub fn observe(srv: &Server, key: &[u8]) -> Dots {
    if key == b"x0" {
        // A stream's entries are members named by their IDs, each its own
        // dot (an ID is never made twice: keyspace/merge/stream.rs).
        let mut out: Dots = (stream_ids(srv, key).into_iter())
            .map(|id| (id, vec![(0, Item::Member)]))
            .collect();
        out.extend(group_dots(srv));
        return out;
    }
    let ks = &srv.keyspace;
    let slot = ks.slot(key);
    let mut g = ks.db(DB).lock(slot.shard);
    let e = match g.merge_meta_now(slot.hash, key).cloned() {
        Some(Meta::Elements(e)) => e,
        Some(Meta::List(l)) => {
            // A list's elements are members named by their ids.
            let value = g.get_raw(slot.hash, key).map(|e| &e.value);
            let vals = lattice::facade::keyspace::merge::lists::values(value);
            return (l.elems.iter().zip(vals))
                .map(|(e, v)| {
                    // Its dot: its put's, or its last LSET's (a register
                    // on the element: an LSET replaces the element's dot).
                    let id = format!("{}.{}", e.id.0, e.id.1).into_bytes();
                    let dot = if e.set == 0 { e.id.0 } else { e.set };
                    (id, vec![(dot, Item::Field(v))])
                })
                .collect();
        }
        _ => return Dots::new(),
    };
    let value = g.get_raw(slot.hash, key).map(|e| &e.value);
    let mut out = Dots::new();
    for (m, item) in items(value) {
        let Some(dots) = e.dots.get(&m[..]) else {
            continue;
        };
        let dotted = dots.iter().enumerate().map(|(i, d)| {
            let v = match &d.value {
                _ if i + 1 == dots.len() => item.clone(),
                Some(v) => (**v).clone(),
                None => Item::Member,
            };
            (d.stamp, v)
        });
        out.insert(m, dotted.collect());
    }
    out
}

/// A dot a command added: member, dot, value.
type Added = (Vec<u8>, u64, Item);

/// What the acknowledged commands of the merge workload did.
#[derive(Default)]
pub struct Log {
    /// Per counter key, the sum of its acknowledged increments (None
    /// while nothing was acknowledged).
    sums: BTreeMap<Vec<u8>, i128>,
    /// The same per field of `h2` (only HINCRBY writes it).
    field_sums: BTreeMap<Vec<u8>, i128>,
    /// Float counters: `f0` (INCRBYFLOAT) and each field of `h3`
    /// (HINCRBYFLOAT), by (key, field); exact, as the increments are
    /// quarters.
    float_sums: BTreeMap<(Vec<u8>, Vec<u8>), f64>,
    /// The elements acknowledged PFADDs added to `p0`.
    sketched: BTreeSet<Vec<u8>>,
    /// Per collection key: every dot a command added, with its member and
    /// value, and every dot a command removed.
    added: BTreeMap<Vec<u8>, Vec<Added>>,
    /// (key, member, dot): a write adds several members with one dot.
    removed: BTreeSet<(Vec<u8>, Vec<u8>, u64)>,
    /// Which command removed a dot (for the failure's message).
    removed_by: BTreeMap<(Vec<u8>, Vec<u8>, u64), String>,
}

impl Log {
    /// One command, acknowledged (`ok`), with the key's dots at its
    /// origin before and after it ran.
    pub fn note(&mut self, line: &[Vec<u8>], ok: bool, (before, after): (&Dots, &Dots)) {
        if !ok {
            return;
        }
        let key = observed_key(line);
        let delta = |i: usize| -> i128 {
            std::str::from_utf8(&line[i])
                .ok()
                .and_then(|s| s.parse().ok())
                .expect("a drawn integer")
        };
        let by = match line[0].as_slice() {
            b"INCR" => Some(1),
            b"DECR" => Some(-1),
            b"INCRBY" => Some(delta(2)),
            b"DECRBY" => Some(-delta(2)),
            _ => None,
        };
        if let Some(by) = by {
            *self.sums.entry(key).or_default() += by;
            return;
        }
        if key.starts_with(b"p") {
            if key == b"p0" {
                self.sketched.extend(line[2..].iter().cloned());
            }
            return; // p1: converged checks it
        }
        let float = |i: usize| -> f64 {
            let s = std::str::from_utf8(&line[i]).expect("a drawn float");
            s.parse().expect("a drawn float")
        };
        match (line[0].as_slice(), key.as_slice()) {
            (b"INCRBYFLOAT", _) => {
                *self.float_sums.entry((key, vec![])).or_default() += float(2);
                return;
            }
            (b"HINCRBYFLOAT", b"h3") => {
                let field = line[2].clone();
                *self.float_sums.entry((key, field)).or_default() += float(3);
                return;
            }
            (b"ZINCRBY", b"z1") => {
                let member = line[3].clone();
                *self.float_sums.entry((key, member)).or_default() += float(2);
                return;
            }
            (b"ZINCRBY", _) => return, // z0: converged checks it
            _ => {}
        }
        if key == b"h2" {
            *self.field_sums.entry(line[2].clone()).or_default() += delta(3);
            return;
        }
        let ttl = [&b"EXPIRE"[..], b"PEXPIREAT", b"PERSIST"];
        let member_ttl = [
            &b"EXPIREMEMBER"[..],
            b"EXPIREMEMBERAT",
            b"PEXPIREMEMBERAT",
            b"HEXPIRE",
            b"HPEXPIREAT",
            b"HPERSIST",
        ];
        if key == b"h1"
            || ttl.contains(&line[0].as_slice())
            || member_ttl.contains(&line[0].as_slice())
        {
            return; // converged and `member TTLs` check them
        }
        let has = |dots: &Dots, m: &[u8], stamp: u64| {
            dots.get(m)
                .is_some_and(|ds| ds.iter().any(|d| d.0 == stamp))
        };
        for (m, dots) in after {
            for (dot, item) in dots.iter().filter(|d| !has(before, m, d.0)) {
                let added = self.added.entry(key.clone()).or_default();
                added.push((m.clone(), *dot, item.clone()));
            }
        }
        for (m, dots) in before {
            for (dot, _) in dots.iter().filter(|d| !has(after, m, d.0)) {
                let removed = (key.clone(), m.clone(), *dot);
                self.removed.insert(removed.clone());
                self.removed_by.insert(removed, crate::workload::show(line));
            }
        }
    }

    /// What `key` must hold under the observed-remove rule: each surviving
    /// member with the value of its newest surviving dot.
    fn expected_members(&self, key: &[u8]) -> BTreeMap<Vec<u8>, Item> {
        let mut best: BTreeMap<Vec<u8>, (u64, Item)> = BTreeMap::new();
        for (m, dot, item) in self.added.get(key).into_iter().flatten() {
            if self.removed.contains(&(key.to_vec(), m.clone(), *dot)) {
                continue;
            }
            if best.get(m).is_none_or(|b| b.0 < *dot) {
                best.insert(m.clone(), (*dot, item.clone()));
            }
        }
        best.into_iter().map(|(m, (_, item))| (m, item)).collect()
    }
}

/// The merge rules on every node's final data (after `converged`).
pub fn check(w: &World, log: &Log) -> Result<(), String> {
    // `p0`: every node's registers are those of one sketch fed every
    // acknowledged element (the maximum per register of their patterns).
    let mut want = vec![0u8; hll::REGISTERS];
    for e in &log.sketched {
        let (i, count) = hll::pattern(e);
        want[i] = want[i].max(count);
    }
    for (i, n) in w.nodes.iter().enumerate() {
        if log.sketched.is_empty() {
            break;
        }
        let held = string_value(&n.srv, b"p0").and_then(|b| {
            let mut regs = Box::new([0u8; hll::REGISTERS]);
            hll::merge_into(&mut regs, &b).ok().map(|()| regs.to_vec())
        });
        if held.as_deref() != Some(&want[..]) {
            let shown = |r: &[u8]| r.iter().filter(|&&x| x != 0).count();
            return Err(format!(
                "p0: node {i} holds {} registers set, {} acknowledged elements set {}",
                held.as_deref()
                    .map_or("no sketch".into(), |r| shown(r).to_string()),
                log.sketched.len(),
                shown(&want)
            ));
        }
    }
    for (i, n) in w.nodes.iter().enumerate() {
        for (key, sum) in &log.sums {
            let held = string_value(&n.srv, key);
            if held.as_deref() != Some(sum.to_string().as_bytes()) {
                return Err(format!(
                    "{}: node {i} holds {:?}, the acknowledged increments sum to {sum}",
                    show_key(&(DB, key.clone())),
                    held.map(|h| String::from_utf8_lossy(&h).into_owned())
                ));
            }
        }
        for (field, sum) in &log.field_sums {
            let held = field_value(&n.srv, b"h2", field);
            if held.as_deref() != Some(sum.to_string().as_bytes()) {
                return Err(format!(
                    "h2.{}: node {i} holds {:?}, the acknowledged HINCRBYs sum to {sum}",
                    String::from_utf8_lossy(field),
                    held.map(|h| String::from_utf8_lossy(&h).into_owned())
                ));
            }
        }
        for ((key, field), sum) in &log.float_sums {
            let held = match (field.is_empty(), key.as_slice()) {
                (true, _) => string_value(&n.srv, key),
                (false, b"z1") => score_text(&n.srv, key, field),
                (false, _) => field_value(&n.srv, key, field),
            };
            if held.as_deref() != Some(sum.to_string().as_bytes()) {
                return Err(format!(
                    "{}{}{}: node {i} holds {:?}, the acknowledged float increments sum to {sum}",
                    show_key(&(DB, key.clone())),
                    if field.is_empty() { "" } else { "." },
                    String::from_utf8_lossy(field),
                    held.map(|h| String::from_utf8_lossy(&h).into_owned())
                ));
            }
        }
        // `x0`: every acknowledged XADD's entry, unless an acknowledged
        // XDEL, trim or DEL removed it where it ran (docs/MERGE-DESIGN.md section
        // 10, item 6).
        let entry = |m: &Vec<u8>| !m.starts_with(b"#");
        let want: Vec<Vec<u8>> = log
            .expected_members(b"x0")
            .into_keys()
            .filter(entry)
            .collect();
        let held: Vec<Vec<u8>> = observe(&n.srv, b"x0").into_keys().filter(entry).collect();
        if held != want {
            let text = |v: &[Vec<u8>]| -> Vec<String> {
                v.iter()
                    .map(|m| String::from_utf8_lossy(m).into_owned())
                    .collect()
            };
            return Err(format!(
                "x0: node {i} holds entries {:?}, the acknowledged XADDs less the removes that saw them are {:?} (removed: {:?})",
                text(&held),
                text(&want),
                (log.removed_by.iter())
                    .filter(|(k, _)| k.0 == b"x0")
                    .map(|(k, c)| format!("{} by {c}", String::from_utf8_lossy(&k.1)))
                    .collect::<Vec<_>>()
            ));
        }
        // `x0`'s groups: each group a CREATE made that no DESTROY or DEL
        // saw; each pending entry a delivery or claim made that no XACK,
        // claim, DELCONSUMER, DESTROY or DEL saw, in a group that is left
        // (DECISIONS 130, 131).
        let want = live_groups(log.expected_members(b"x0").into_keys());
        let held = live_groups(observe(&n.srv, b"x0").into_keys());
        if held != want {
            let raw = |m: BTreeMap<Vec<u8>, Item>| -> Vec<String> {
                (m.into_keys())
                    .filter(|m| m.starts_with(b"#"))
                    .map(|m| String::from_utf8_lossy(&m).into_owned())
                    .collect()
            };
            let node: BTreeMap<Vec<u8>, Item> = (observe(&n.srv, b"x0").into_iter())
                .map(|(m, ds)| (m, ds[0].1.clone()))
                .collect();
            return Err(format!(
                "x0 groups: node {i} holds {held:?} ({:?}), the observed-remove rule expects {want:?} ({:?}; removed: {:?})",
                raw(node),
                raw(log.expected_members(b"x0")),
                (log.removed_by.iter())
                    .filter(|(k, _)| k.0 == b"x0" && k.1.starts_with(b"#"))
                    .map(|(k, c)| format!("{}@{} by {c}", String::from_utf8_lossy(&k.1), k.2))
                    .collect::<Vec<_>>()
            ));
        }
        for key in log
            .added
            .keys()
            .filter(|_| std::env::var("SIM_ELEMENTS").is_ok())
        {
            let want = log.expected_members(key);
            let held: BTreeMap<Vec<u8>, Item> = observe(&n.srv, key)
                .into_iter()
                .filter_map(|(m, ds)| Some((m, ds.last()?.1.clone())))
                .collect();
            if held != want {
                let dots: Vec<String> = (log.added.get(key).into_iter().flatten())
                    .map(|(m, d, _)| {
                        let gone = log.removed_by.get(&(key.clone(), m.clone(), *d));
                        let gone = gone.map_or(String::new(), |c| format!(" (removed by {c})"));
                        format!("{}@{d}{gone}", String::from_utf8_lossy(m))
                    })
                    .collect();
                return Err(format!(
                    "{}: node {i} holds {} (dots {:?}), the observed-remove rule expects {} (dots added: {})",
                    show_key(&(DB, key.clone())),
                    show(&held),
                    observe(&n.srv, key).into_iter().map(|(m, ds)| format!("{}@{:?}", String::from_utf8_lossy(&m), ds)).collect::<Vec<_>>(),
                    show(&want),
                    dots.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// A member's value in the collection at `key` on `srv`, if it holds one.
fn member_item(srv: &Server, key: &[u8], member: &[u8]) -> Option<Item> {
    let ks = &srv.keyspace;
    let slot = ks.slot(key);
    let g = ks.db(DB).lock(slot.shard);
    item_of(Some(&g.get_raw(slot.hash, key)?.value), member)
}

/// A hash field's value on `srv`, if it holds one.
fn field_value(srv: &Server, key: &[u8], field: &[u8]) -> Option<Vec<u8>> {
    match member_item(srv, key, field)? {
        Item::Field(v) => Some(v),
        _ => None,
    }
}

/// A sorted-set member's score on `srv` as Rust prints it (quarters print
/// as the float sums the log keeps), if it holds one.
fn score_text(srv: &Server, key: &[u8], member: &[u8]) -> Option<Vec<u8>> {
    match member_item(srv, key, member)? {
        Item::Score(s) => Some(s.to_string().into_bytes()),
        _ => None,
    }
}

/// A string key's value on `srv`, if it holds one.
fn string_value(srv: &Server, key: &[u8]) -> Option<Vec<u8>> {
    let ks = &srv.keyspace;
    let slot = ks.slot(key);
    let g = ks.db(DB).lock(slot.shard);
    let e = g.get_raw(slot.hash, key)?;
    Some(crate::workload::canonical(&e.value))
}

fn show(m: &BTreeMap<Vec<u8>, Item>) -> String {
    let parts: Vec<String> = m
        .iter()
        .map(|(k, item)| format!("{}={item:?}", String::from_utf8_lossy(k)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}
