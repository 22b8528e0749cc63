//! Sorted sets (Redis's t_zset.c): ZADD and friends, ranges by rank, score
//! and lex, the pops, random members, the set algebra (ZUNION/ZINTER/ZDIFF
//! and their STORE forms, ZINTERCARD) and ZSCAN. Blocking BZPOP* come later.
//!
//! The value type lives in `keyspace/zset.rs` (listpack / skiplist forms,
//! rank queries in O(log n)). Here every handler parses its options into
//! plain values first, with Redis's exact errors and their order, then locks,
//! executes and replies. Ranges reduce to a rank interval (`count_below` on
//! the range's bounds) that is then walked forward or backward, so a LIMIT or
//! a REV costs nothing extra. Writes propagate as Redis does: the command as
//! given (ZADD, ZINCRBY, ZREM, *STORE, ZPOPMIN/MAX), ZMPOP as ZPOPMIN/ZPOPMAX
//! with its count; a write that changed nothing is not propagated.
//! Replies follow Redis 7: scores are doubles (bulk strings in RESP2), and in
//! RESP3 WITHSCORES replies are arrays of [member, score] pairs.
//!
//! Lex ranges are only meaningful when all scores are equal; over mixed
//! scores a listpack answers exactly as Redis's listpack walks do (checked
//! by differential fuzzing against redis-server 7.0), and so does the
//! skiplist form, whose tree descent would otherwise stop where the tree's
//! shape puts it (Redis's answer there depends on its random node levels):
//! the answer depends on the members' order alone, so a replica whose tree
//! was built otherwise (a full sync, a RESTORE) removes or stores the same
//! members for the same record. ZADD picks the encoding of
//! a new key from its first member, as Redis 7.0 does; ZRANK/ZREVRANK take
//! Redis 7.2's WITHSCORE.

use super::keyspec::KeySpec;
use std::sync::atomic::Ordering::Relaxed;

use hashbrown::HashMap;

use super::access::{named_args, Locked};
use super::blocking;
use super::collscan::{parse_scan, rand_u64};
use super::events::class;
use super::util::{arg_i64, eq_ic, glob_match, parse_f64};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::merge;
use crate::keyspace::zset::{ZLimits, ZSetValue};
use crate::keyspace::Value;
use crate::protocol::{format_double, Args, ReplyBuf};

/// Owned (member, score) pairs.
type Items = Vec<(Box<[u8]>, f64)>;

/// Keys of `ZUNIONSTORE dest numkeys k..` style commands.
fn keys_store(args: Args) -> Vec<usize> {
    let mut v = vec![1];
    v.extend(numkeys_at(args, 2));
    v
}

/// Keys of `ZUNION numkeys k..` style commands.
fn keys_numkeys(args: Args) -> Vec<usize> {
    numkeys_at(args, 1)
}

fn keys_numkeys_at2(args: Args) -> Vec<usize> {
    numkeys_at(args, 2)
}

fn numkeys_at(args: Args, i: usize) -> Vec<usize> {
    let n = if i < args.len() {
        arg_i64(args.get(i)).unwrap_or(0).max(0) as usize
    } else {
        0
    };
    (i + 1..(i + 1 + n).min(args.len())).collect()
}

const RANGE_CX: &str = "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.";

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "sorted-set", acl = "sortedset"),
    cmd("zadd", -4, WRITE | DENYOOM | FAST, zadd)
        .doc("1.2.0", "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.")
        .complexity("O(log(N)) for each item added, where N is the number of elements in the sorted set.")
        .keys(1, 1, 1),
    cmd("zincrby", 4, WRITE | DENYOOM | FAST, zincrby)
        .doc("1.2.0", "Increments the score of a member in a sorted set.")
        .complexity("O(log(N))")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("zcard", 2, READONLY | FAST, zcard)
        .doc("1.2.0", "Returns the number of members in a sorted set.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"])]),
    cmd("zcount", 4, READONLY | FAST, zcount)
        .doc("2.0.0", "Returns the count of members in a sorted set that have scores within a range.")
        .complexity("O(log(N))")
        .keys(1, 1, 1),
    cmd("zlexcount", 4, READONLY | FAST, zlexcount)
        .doc("2.8.9", "Returns the number of members in a sorted set within a lexicographical range.")
        .complexity("O(log(N))")
        .keys(1, 1, 1),
    cmd("zscore", 3, READONLY | FAST, zscore)
        .doc("1.2.0", "Returns the score of a member in a sorted set.")
        .keys(1, 1, 1),
    cmd("zmscore", -3, READONLY | FAST, zmscore)
        .doc("6.2.0", "Returns the score of one or more members in a sorted set.")
        .complexity("O(N) where N is the number of members being requested.")
        .keys(1, 1, 1),
    cmd("zrank", -3, READONLY | FAST, zrank)
        .doc("2.0.0", "Returns the index of a member in a sorted set ordered by ascending scores.")
        .complexity("O(log(N))")
        .keys(1, 1, 1),
    cmd("zrevrank", -3, READONLY | FAST, zrevrank)
        .doc("2.0.0", "Returns the index of a member in a sorted set ordered by descending scores.")
        .complexity("O(log(N))")
        .keys(1, 1, 1),
    cmd("zrange", -4, READONLY, zrange)
        .doc("1.2.0", "Returns members in a sorted set within a range of indexes.")
        .complexity(RANGE_CX)
        .keys(1, 1, 1),
    cmd("zrangestore", -5, WRITE | DENYOOM, zrangestore)
        .doc("6.2.0", "Stores a range of members from sorted set in a key.")
        .complexity("O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements stored into the destination key.")
        .keys(1, 2, 1)
        .key_specs(&[KeySpec::at(1, &["OW", "update"]), KeySpec::at(2, &["RO", "access"])]),
    cmd("zrevrange", -4, READONLY, zrevrange)
        .doc("1.2.0", "Returns members in a sorted set within a range of indexes in reverse order.")
        .complexity(RANGE_CX)
        .keys(1, 1, 1),
    cmd("zrangebyscore", -4, READONLY, zrangebyscore)
        .doc("1.0.5", "Returns members in a sorted set within a range of scores.")
        .complexity(RANGE_CX)
        .keys(1, 1, 1),
    cmd("zrevrangebyscore", -4, READONLY, zrevrangebyscore)
        .doc("2.2.0", "Returns members in a sorted set within a range of scores in reverse order.")
        .complexity(RANGE_CX)
        .keys(1, 1, 1),
    cmd("zrangebylex", -4, READONLY, zrangebylex)
        .doc("2.8.9", "Returns members in a sorted set within a lexicographical range.")
        .complexity(RANGE_CX)
        .keys(1, 1, 1),
    cmd("zrevrangebylex", -4, READONLY, zrevrangebylex)
        .doc("2.8.9", "Returns members in a sorted set within a lexicographical range in reverse order.")
        .complexity(RANGE_CX)
        .keys(1, 1, 1),
    cmd("zrem", -3, WRITE | FAST, zrem)
        .doc("1.2.0", "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.")
        .complexity("O(M*log(N)) with N being the number of elements in the sorted set and M the number of elements to be removed.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])]),
    cmd("zremrangebyrank", 4, WRITE, zremrangebyrank)
        .doc("2.0.0", "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.")
        .complexity("O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])]),
    cmd("zremrangebyscore", 4, WRITE, zremrangebyscore)
        .doc("1.2.0", "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.")
        .complexity("O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])]),
    cmd("zremrangebylex", 4, WRITE, zremrangebylex)
        .doc("2.8.9", "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed.")
        .complexity("O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])]),
    cmd("zpopmin", -2, WRITE | FAST, zpopmin)
        .doc("5.0.0", "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.")
        .complexity("O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of elements popped.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"])]),
    cmd("zpopmax", -2, WRITE | FAST, zpopmax)
        .doc("5.0.0", "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.")
        .complexity("O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of elements popped.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"])]),
    cmd("bzpopmin", -3, WRITE | NOSCRIPT | FAST | BLOCKING, bzpopmin)
        .doc("5.0.0", "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.")
        .complexity("O(log(N)) with N being the number of elements in the sorted set.")
        .keys(1, -2, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"]).range(-2, 1, 0)]),
    cmd("bzpopmax", -3, WRITE | NOSCRIPT | FAST | BLOCKING, bzpopmax)
        .doc("5.0.0", "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise.  Deletes the sorted set if the last element was popped.")
        .complexity("O(log(N)) with N being the number of elements in the sorted set.")
        .keys(1, -2, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"]).range(-2, 1, 0)]),
    cmd("bzmpop", -5, WRITE | BLOCKING, bzmpop)
        .doc("7.0.0", "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.")
        .complexity("O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in the sorted set, and M being the number of elements popped.")
        .keys_fn(keys_numkeys_at2)
        .key_specs(&[KeySpec::at(2, &["RW", "access", "delete"]).keynum(0, 1, 1)]),
    cmd("zmpop", -4, WRITE, zmpop)
        .doc("7.0.0", "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped.")
        .complexity("O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in the sorted set, and M being the number of elements popped.")
        .keys_fn(keys_numkeys)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"]).keynum(0, 1, 1)]),
    cmd("zrandmember", -2, READONLY, zrandmember)
        .doc("6.2.0", "Returns one or more random members from a sorted set.")
        .complexity("O(N) where N is the number of members returned")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output"]),
    cmd("zunion", -3, READONLY, zunion)
        .doc("6.2.0", "Returns the union of multiple sorted sets.")
        .complexity("O(N)+O(M*log(M)) with N being the sum of the sizes of the input sorted sets, and M being the number of elements in the resulting sorted set.")
        .keys_fn(keys_numkeys)
        .key_specs(&[KeySpec::at(1, &["RO", "access"]).keynum(0, 1, 1)]),
    cmd("zunionstore", -4, WRITE | DENYOOM, zunionstore)
        .doc("2.0.0", "Stores the union of multiple sorted sets in a key.")
        .complexity("O(N)+O(M log(M)) with N being the sum of the sizes of the input sorted sets, and M being the number of elements in the resulting sorted set.")
        .keys(1, 1, 1)
        .keys_fn(keys_store)
        .key_specs(&[
            KeySpec::at(1, &["OW", "update"]),
            KeySpec::at(2, &["RO", "access"]).keynum(0, 1, 1),
        ]),
    cmd("zinter", -3, READONLY, zinter)
        .doc("6.2.0", "Returns the intersect of multiple sorted sets.")
        .complexity("O(N*K)+O(M*log(M)) worst case with N being the smallest input sorted set, K being the number of input sorted sets and M being the number of elements in the resulting sorted set.")
        .keys_fn(keys_numkeys)
        .key_specs(&[KeySpec::at(1, &["RO", "access"]).keynum(0, 1, 1)]),
    cmd("zinterstore", -4, WRITE | DENYOOM, zinterstore)
        .doc("2.0.0", "Stores the intersect of multiple sorted sets in a key.")
        .complexity("O(N*K)+O(M*log(M)) worst case with N being the smallest input sorted set, K being the number of input sorted sets and M being the number of elements in the resulting sorted set.")
        .keys(1, 1, 1)
        .keys_fn(keys_store)
        .key_specs(&[
            KeySpec::at(1, &["OW", "update"]),
            KeySpec::at(2, &["RO", "access"]).keynum(0, 1, 1),
        ]),
    cmd("zintercard", -3, READONLY, zintercard)
        .doc("7.0.0", "Returns the number of members of the intersect of multiple sorted sets.")
        .complexity("O(N*K) worst case with N being the smallest input sorted set, K being the number of input sorted sets.")
        .keys_fn(keys_numkeys)
        .key_specs(&[KeySpec::at(1, &["RO", "access"]).keynum(0, 1, 1)]),
    cmd("zdiff", -3, READONLY, zdiff)
        .doc("6.2.0", "Returns the difference between multiple sorted sets.")
        .complexity("O(L + (N-K)log(N)) worst case where L is the total number of elements in all the sets, N is the size of the first set, and K is the size of the result set.")
        .keys_fn(keys_numkeys)
        .key_specs(&[KeySpec::at(1, &["RO", "access"]).keynum(0, 1, 1)]),
    cmd("zdiffstore", -4, WRITE | DENYOOM, zdiffstore)
        .doc("6.2.0", "Stores the difference of multiple sorted sets in a key.")
        .complexity("O(L + (N-K)log(N)) worst case where L is the total number of elements in all the sets, N is the size of the first set, and K is the size of the result set.")
        .keys(1, 1, 1)
        .keys_fn(keys_store)
        .key_specs(&[
            KeySpec::at(1, &["OW", "update"]),
            KeySpec::at(2, &["RO", "access"]).keynum(0, 1, 1),
        ]),
    cmd("zscan", -3, READONLY, zscan)
        .doc("2.8.0", "Iterates over members and scores of a sorted set.")
        .complexity("O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection.")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output"]),
};

// ---------------------------------------------------------------- helpers

pub(crate) fn limits(ctx: &Ctx) -> ZLimits {
    let e = &ctx.core.hot.encoding;
    ZLimits {
        max_entries: e.zset_max_listpack_entries.load(Relaxed),
        max_value: e.zset_max_listpack_value.load(Relaxed),
    }
}

fn zs(v: &Value) -> &ZSetValue {
    match v {
        Value::ZSet(z) => z,
        _ => unreachable!("type checked by get_zset"),
    }
}

fn zs_mut(v: &mut Value) -> &mut ZSetValue {
    match v {
        Value::ZSet(z) => z,
        _ => unreachable!("type checked by get_zset"),
    }
}

/// The sorted set at `key` for reading (WRONGTYPE otherwise), counting the hit.
fn read_zset<'e>(
    ctx: &Ctx,
    l: &'e mut Locked<'_, '_>,
    key: &[u8],
) -> Result<Option<&'e ZSetValue>, CmdError> {
    let z = l.get_zset(key)?.map(|e| zs(&e.value));
    ctx.read_hit(key, z.is_some());
    Ok(z)
}

/// A score argument as getDoubleFromObject reads it.
pub(crate) fn parse_score(a: &[u8]) -> Option<f64> {
    let v = parse_f64(a)?;
    if v == 0.0 {
        // strtod underflow (ERANGE with a zero result) is an error too.
        let mant = a.split(|&c| c == b'e' || c == b'E').next().unwrap_or(a);
        if mant.iter().any(|c| (b'1'..=b'9').contains(c)) {
            return None;
        }
    }
    if v.is_infinite() {
        // strtod overflow (ERANGE) is an error; only spelled-out infinities pass.
        let s = std::str::from_utf8(a).ok()?.to_ascii_lowercase();
        let s = s.trim_start_matches(['+', '-']);
        if s != "inf" && s != "infinity" {
            return None;
        }
    }
    Some(v)
}

fn arg_score(a: &[u8]) -> Result<f64, CmdError> {
    parse_score(a).ok_or(CmdError::NotFloat)
}

/// Writes `n` (member, score) items, flat or as RESP3 pairs.
fn reply_items<'a>(
    out: &mut ReplyBuf,
    items: impl Iterator<Item = (&'a [u8], f64)>,
    n: usize,
    withscores: bool,
) {
    if !withscores {
        out.array(n);
        items.take(n).for_each(|(m, _)| out.bulk(m));
    } else if out.resp >= 3 {
        out.array(n);
        for (m, s) in items.take(n) {
            out.array(2);
            out.bulk(m);
            out.double(s);
        }
    } else {
        out.array(2 * n);
        for (m, s) in items.take(n) {
            out.bulk(m);
            out.double(s);
        }
    }
}

/// Bumps the version of `key` after an in-place write and returns it.
fn bump(ctx: &mut Ctx, l: &mut Locked, key: &[u8]) -> u64 {
    let prev = l.entry(key).map_or(0, |e| e.version);
    let v = ctx.version_after(prev);
    l.set_version(key, v);
    v
}

/// Stores `items` (sorted) at `dest` or deletes `dest` if there are none,
/// replies the count, propagates `argv` and notifies `event` if it wrote.
pub(crate) fn store_sorted(
    ctx: &mut Ctx,
    l: &mut Locked,
    dest: &[u8],
    items: Vec<(Box<[u8]>, f64)>,
    event: &str,
    argv: &[&[u8]],
) {
    let n = items.len();
    ctx.out.int(n as i64);
    let prev = l.entry(dest).map(|e| e.version);
    if n == 0 {
        if let Some(p) = prev {
            l.remove(dest);
            let v = ctx.version_after(p);
            ctx.note_states(l, argv, &[dest]);
            ctx.propagate(v, argv);
            ctx.notify(class::GENERIC, "del", dest);
        }
        return;
    }
    let v = match prev {
        Some(p) => ctx.version_after(p),
        None => ctx.new_version(),
    };
    let z = ZSetValue::from_sorted(items, limits(ctx));
    l.put(dest, Value::ZSet(Box::new(z)), 0, v);
    ctx.note_states(l, argv, &[dest]);
    ctx.propagate(v, argv);
    ctx.notify(class::ZSET, event, dest);
    ctx.signal_ready(ctx.db(), dest);
}

fn argv_of(args: Args<'_>) -> Vec<&[u8]> {
    args.iter().collect()
}

/// xorshift64* per thread, for ZRANDMEMBER.

// ---------------------------------------------------------------- ranges

#[derive(Clone, Copy, Debug)]
struct ScoreRange {
    min: f64,
    max: f64,
    minex: bool,
    maxex: bool,
}

impl ScoreRange {
    fn gte_min(&self, s: f64) -> bool {
        if self.minex {
            s > self.min
        } else {
            s >= self.min
        }
    }
    fn lte_max(&self, s: f64) -> bool {
        if self.maxex {
            s < self.max
        } else {
            s <= self.max
        }
    }
}

fn parse_bound(a: &[u8]) -> Option<(f64, bool)> {
    // strtod of nothing is 0, which zslParseRange accepts.
    let num = |x: &[u8]| {
        if x.is_empty() {
            Some(0.0)
        } else {
            parse_f64(x)
        }
    };
    match a.first() {
        Some(b'(') => num(&a[1..]).map(|v| (v, true)),
        _ => num(a).map(|v| (v, false)),
    }
}

fn parse_score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange, CmdError> {
    let err = || CmdError::err("min or max is not a float");
    let (min, minex) = parse_bound(min).ok_or_else(err)?;
    let (max, maxex) = parse_bound(max).ok_or_else(err)?;
    Ok(ScoreRange {
        min,
        max,
        minex,
        maxex,
    })
}

#[derive(Clone, Debug)]
enum Lex {
    NegInf,
    PosInf,
    Incl(Vec<u8>),
    Excl(Vec<u8>),
}

#[derive(Clone, Debug)]
struct LexRange {
    min: Lex,
    max: Lex,
}

impl LexRange {
    /// sdscmplex(min, max) > 0, or equal with an exclusive end.
    fn is_empty(&self) -> bool {
        use std::cmp::Ordering::*;
        let (cmp, ex) = match (&self.min, &self.max) {
            (Lex::NegInf, Lex::NegInf) | (Lex::PosInf, Lex::PosInf) => (Equal, true),
            (Lex::NegInf, _) | (_, Lex::PosInf) => (Less, false),
            (Lex::PosInf, _) | (_, Lex::NegInf) => (Greater, false),
            (Lex::Incl(a) | Lex::Excl(a), Lex::Incl(b) | Lex::Excl(b)) => (
                a.cmp(b),
                matches!(self.min, Lex::Excl(_)) || matches!(self.max, Lex::Excl(_)),
            ),
        };
        cmp == Greater || (cmp == Equal && ex)
    }
    fn gte_min(&self, m: &[u8]) -> bool {
        match &self.min {
            Lex::NegInf => true,
            Lex::PosInf => false,
            Lex::Incl(x) => m >= &x[..],
            Lex::Excl(x) => m > &x[..],
        }
    }
    fn lte_max(&self, m: &[u8]) -> bool {
        match &self.max {
            Lex::NegInf => false,
            Lex::PosInf => true,
            Lex::Incl(x) => m <= &x[..],
            Lex::Excl(x) => m < &x[..],
        }
    }
}

fn parse_lex_item(a: &[u8]) -> Option<Lex> {
    match a {
        b"-" => Some(Lex::NegInf),
        b"+" => Some(Lex::PosInf),
        [b'[', rest @ ..] => Some(Lex::Incl(rest.to_vec())),
        [b'(', rest @ ..] => Some(Lex::Excl(rest.to_vec())),
        _ => None,
    }
}

fn parse_lex_range(min: &[u8], max: &[u8]) -> Result<LexRange, CmdError> {
    let err = || CmdError::err("min or max not valid string range item");
    Ok(LexRange {
        min: parse_lex_item(min).ok_or_else(err)?,
        max: parse_lex_item(max).ok_or_else(err)?,
    })
}

#[derive(Clone, Debug)]
enum Kind {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

/// The forward rank interval `[first, last)` a score or lex range covers,
/// found from its low end, or from its high end if `rev` (which differs only
/// for lex ranges over members of mixed scores, where Redis's walks do).
fn bounds(z: &ZSetValue, k: &Kind, rev: bool) -> (usize, usize) {
    let r = match k {
        Kind::Score(r) => {
            let first = z.count_below(&|s, _| !r.gte_min(s));
            let last = z.count_below(&|s, _| r.lte_max(s));
            return (first, last.max(first));
        }
        Kind::Lex(r) => r,
        Kind::Rank(..) => unreachable!("rank ranges have no bounds"),
    };
    let n = z.len();
    // zslIsInLexRange: empty ranges, and ranges past either end.
    let (outside, mixed) = match (z.get(0), z.get(n.saturating_sub(1))) {
        (Some((lo, ls)), Some((hi, hs))) => (!r.gte_min(hi) || !r.lte_max(lo), ls != hs),
        _ => (true, false),
    };
    if r.is_empty() || outside {
        return (0, 0);
    }
    // Over mixed scores the members are not in lex order, so a descent
    // would stop where the tree's shape puts it, and the shape differs
    // between a master and its replica (built by other histories: a full
    // sync, a RESTORE): the same ZREMRANGEBYLEX or ZRANGESTORE BYLEX record
    // would remove or store other members there. Walk instead, as a
    // listpack does, which depends on the members' order alone.
    if z.is_compact() || mixed {
        // The listpack walks of zzlFirstInLexRange / zzlLastInLexRange.
        let items: Vec<&[u8]> = z.iter().map(|(m, _)| m).collect();
        if rev {
            let Some(e) = items.iter().rposition(|m| r.lte_max(m)) else {
                return (0, 0);
            };
            let k = items[..=e]
                .iter()
                .rev()
                .take_while(|m| r.gte_min(m))
                .count();
            return (e + 1 - k, e + 1);
        }
        let Some(f) = items.iter().position(|m| r.gte_min(m)) else {
            return (0, 0);
        };
        let k = items[f..].iter().take_while(|m| r.lte_max(m)).count();
        return (f, f + k);
    }
    let first = z.count_below(&|_, m| !r.gte_min(m));
    let last = z.count_below(&|_, m| r.lte_max(m));
    if !z.get(first).is_some_and(|(m, _)| r.lte_max(m)) {
        return (first, first);
    }
    (first, last.max(first))
}

/// Normalizes a rank range as Redis does; None when empty.
fn rank_interval(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    let n = len as i64;
    let mut s = if start < 0 { n + start } else { start };
    let mut e = if end < 0 { n + end } else { end };
    if s < 0 {
        s = 0;
    }
    if s > e || s >= n {
        return None;
    }
    if e >= n {
        e = n - 1;
    }
    Some((s as usize, e as usize))
}

/// A parsed ZRANGE-family request.
#[derive(Clone, Debug)]
struct RangeReq {
    kind: Kind,
    rev: bool,
    offset: i64,
    limit: i64,
    withscores: bool,
}

/// Where to start walking and how many to take, for `req` on `z`.
fn plan(z: &ZSetValue, req: &RangeReq) -> (usize, usize) {
    let len = z.len();
    if let Kind::Rank(start, end) = req.kind {
        return match rank_interval(len, start, end) {
            None => (0, 0),
            Some((s, e)) if req.rev => (len - 1 - s, e - s + 1),
            Some((s, e)) => (s, e - s + 1),
        };
    }
    let (first, last) = bounds(z, &req.kind, req.rev);
    if let Kind::Lex(r) = &req.kind {
        return plan_lex(z, req, r, first, last);
    }
    let avail = (last - first) as i64;
    if req.offset < 0 || req.offset >= avail {
        return (0, 0);
    }
    let mut n = avail - req.offset;
    if req.limit >= 0 {
        n = n.min(req.limit);
    }
    let start = if req.rev {
        last - 1 - req.offset as usize
    } else {
        first + req.offset as usize
    };
    (start, n as usize)
}

/// A lex range walks as Redis does: from the range's end, skip OFFSET
/// elements unchecked, then take while the far bound holds (the same as
/// counting when scores are equal, as lex ranges require).
fn plan_lex(
    z: &ZSetValue,
    req: &RangeReq,
    r: &LexRange,
    first: usize,
    last: usize,
) -> (usize, usize) {
    if last <= first || req.offset < 0 {
        return (0, 0);
    }
    let off = req.offset as usize;
    let start = if req.rev {
        match (last - 1).checked_sub(off) {
            Some(s) => s,
            None => return (0, 0),
        }
    } else {
        first.saturating_add(off)
    };
    if start >= z.len() {
        return (0, 0);
    }
    let limit = if req.limit < 0 {
        usize::MAX
    } else {
        req.limit as usize
    };
    let n = z
        .iter_from(start, req.rev)
        .take(limit)
        .take_while(|(m, _)| if req.rev { r.gte_min(m) } else { r.lte_max(m) })
        .count();
    (start, n)
}

#[derive(Clone, Copy, PartialEq)]
enum Auto {
    Rank,
    Score,
    Lex,
}

/// zrangeGenericCommand's option parsing. `kind`/`rev` are fixed by the
/// legacy commands (None: ZRANGE/ZRANGESTORE choose with keywords).
fn parse_range(
    args: Args,
    min_idx: usize,
    kind: Option<Auto>,
    rev: Option<bool>,
    store: bool,
) -> Result<RangeReq, CmdError> {
    let (mut kind_o, mut rev_o) = (kind, rev);
    let (mut withscores, mut offset, mut limit) = (false, 0i64, -1i64);
    let mut j = min_idx + 2;
    while j < args.len() {
        let a = args.get(j);
        let left = args.len() - j - 1;
        if !store && eq_ic(a, "withscores") {
            withscores = true;
        } else if eq_ic(a, "limit") && left >= 2 {
            offset = arg_i64(args.get(j + 1))?;
            limit = arg_i64(args.get(j + 2))?;
            j += 2;
        } else if rev_o.is_none() && eq_ic(a, "rev") {
            rev_o = Some(true);
        } else if kind_o.is_none() && eq_ic(a, "bylex") {
            kind_o = Some(Auto::Lex);
        } else if kind_o.is_none() && eq_ic(a, "byscore") {
            kind_o = Some(Auto::Score);
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let rev = rev_o.unwrap_or(false);
    let auto = kind_o.unwrap_or(Auto::Rank);
    // As Redis: only a count other than -1 counts as a LIMIT here.
    if limit != -1 && auto == Auto::Rank {
        return Err(CmdError::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && auto == Auto::Lex {
        return Err(CmdError::err(
            "syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    let (mut lo, mut hi) = (args.get(min_idx), args.get(min_idx + 1));
    if rev && auto != Auto::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let kind = match auto {
        Auto::Rank => Kind::Rank(arg_i64(lo)?, arg_i64(hi)?),
        Auto::Score => Kind::Score(parse_score_range(lo, hi)?),
        Auto::Lex => Kind::Lex(parse_lex_range(lo, hi)?),
    };
    Ok(RangeReq {
        kind,
        rev,
        offset,
        limit,
        withscores,
    })
}

fn range_generic(ctx: &mut Ctx, args: Args, kind: Option<Auto>, rev: Option<bool>) -> CmdResult {
    let req = parse_range(args, 2, kind, rev, false)?;
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(z) = read_zset(ctx, &mut l, key)? else {
        ctx.out.array(0);
        return Ok(());
    };
    let (start, n) = plan(z, &req);
    reply_items(ctx.out, z.iter_from(start, req.rev), n, req.withscores);
    Ok(())
}

fn zrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    range_generic(ctx, args, None, None)
}
fn zrevrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    range_generic(ctx, args, Some(Auto::Rank), Some(true))
}
fn zrangebyscore(ctx: &mut Ctx, args: Args) -> CmdResult {
    range_generic(ctx, args, Some(Auto::Score), Some(false))
}
fn zrevrangebyscore(ctx: &mut Ctx, args: Args) -> CmdResult {
    range_generic(ctx, args, Some(Auto::Score), Some(true))
}
fn zrangebylex(ctx: &mut Ctx, args: Args) -> CmdResult {
    range_generic(ctx, args, Some(Auto::Lex), Some(false))
}
fn zrevrangebylex(ctx: &mut Ctx, args: Args) -> CmdResult {
    range_generic(ctx, args, Some(Auto::Lex), Some(true))
}

fn zrangestore(ctx: &mut Ctx, args: Args) -> CmdResult {
    let req = parse_range(args, 3, None, None, true)?;
    let (dest, src) = (args.get(1), args.get(2));
    let mut l = ctx.open_many([dest, src]);
    let mut items: Vec<(Box<[u8]>, f64)> = match read_zset(ctx, &mut l, src)? {
        None => Vec::new(),
        Some(z) => {
            let (start, n) = plan(z, &req);
            z.iter_from(start, req.rev)
                .take(n)
                .map(|(m, s)| (m.into(), s))
                .collect()
        }
    };
    if req.rev {
        items.reverse();
    }
    store_sorted(ctx, &mut l, dest, items, "zrangestore", &argv_of(args));
    Ok(())
}

// ---------------------------------------------------------------- ZADD

#[derive(Default, Clone, Copy)]
pub(crate) struct AddFlags {
    pub(crate) nx: bool,
    pub(crate) xx: bool,
    pub(crate) gt: bool,
    pub(crate) lt: bool,
    pub(crate) ch: bool,
    pub(crate) incr: bool,
}

/// ZADD's (score, member) arguments.
type ScorePairs<'a> = Vec<(f64, &'a [u8])>;

/// What zsetAdd did with one pair.
enum AddOutcome {
    Added(f64),
    Updated(f64),
    /// Present, score kept (still "processed" for INCR's reply).
    Same(f64),
    Nop,
}

fn parse_zadd(args: Args<'_>) -> Result<(AddFlags, ScorePairs<'_>), CmdError> {
    let mut f = AddFlags::default();
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        let flag = match () {
            _ if eq_ic(a, "nx") => &mut f.nx,
            _ if eq_ic(a, "xx") => &mut f.xx,
            _ if eq_ic(a, "ch") => &mut f.ch,
            _ if eq_ic(a, "incr") => &mut f.incr,
            _ if eq_ic(a, "gt") => &mut f.gt,
            _ if eq_ic(a, "lt") => &mut f.lt,
            _ => break,
        };
        *flag = true;
        i += 1;
    }
    let rest = args.len() - i;
    if rest == 0 || !rest.is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    if f.nx && f.xx {
        return Err(CmdError::err(
            "XX and NX options at the same time are not compatible",
        ));
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Err(CmdError::err(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if f.incr && rest > 2 {
        return Err(CmdError::err(
            "INCR option supports a single increment-element pair",
        ));
    }
    let mut pairs = Vec::with_capacity(rest / 2);
    while i < args.len() {
        pairs.push((arg_score(args.get(i))?, args.get(i + 1)));
        i += 2;
    }
    Ok((f, pairs))
}

fn nan_err() -> CmdError {
    CmdError::err("resulting score is not a number (NaN)")
}

/// Redis's zsetAdd for one pair.
fn zset_add(
    z: &mut ZSetValue,
    f: AddFlags,
    score: f64,
    m: &[u8],
    lim: ZLimits,
) -> Result<AddOutcome, CmdError> {
    match z.find(m) {
        Some((at, cur)) => {
            if f.nx {
                return Ok(AddOutcome::Nop);
            }
            let new = if f.incr { cur + score } else { score };
            if new.is_nan() {
                return Err(nan_err());
            }
            if (f.lt && new >= cur) || (f.gt && new <= cur) {
                return Ok(AddOutcome::Nop);
            }
            if new != cur {
                z.update_at(at, m, new);
                Ok(AddOutcome::Updated(new))
            } else {
                Ok(AddOutcome::Same(new))
            }
        }
        None if f.xx => Ok(AddOutcome::Nop),
        None => {
            z.insert(m, score, lim);
            Ok(AddOutcome::Added(score))
        }
    }
}

fn zadd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (f, pairs) = parse_zadd(args)?;
    zadd_generic(ctx, args, f, &pairs)
}

fn zincrby(ctx: &mut Ctx, args: Args) -> CmdResult {
    let score = arg_score(args.get(2))?;
    let f = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    zadd_generic(ctx, args, f, &[(score, args.get(3))])
}

/// What ZADD's pairs did to one set.
#[derive(Default)]
struct AddTally {
    added: i64,
    updated: i64,
    processed: i64,
    last: f64,
    failed: Option<CmdError>,
    /// Under active replication: the pairs added, updated or re-added
    /// (not those NX/XX/GT/LT skipped), to re-assert (DECISIONS 67).
    applied: Vec<usize>,
}

/// Applies ZADD's pairs to `z` in order, stopping at the first error.
/// `track`: note in `applied` which pairs were applied.
fn add_pairs(
    z: &mut ZSetValue,
    f: AddFlags,
    pairs: &[(f64, &[u8])],
    (lim, track): (ZLimits, bool),
) -> AddTally {
    let mut t = AddTally::default();
    for (i, &(score, m)) in pairs.iter().enumerate() {
        let outcome = zset_add(z, f, score, m, lim);
        if track
            && matches!(
                outcome,
                Ok(AddOutcome::Added(_) | AddOutcome::Updated(_) | AddOutcome::Same(_))
            )
        {
            t.applied.push(i);
        }
        match outcome {
            Err(err) => {
                t.failed = Some(err);
                break;
            }
            Ok(AddOutcome::Added(s)) => {
                (t.added, t.processed, t.last) = (t.added + 1, t.processed + 1, s)
            }
            Ok(AddOutcome::Updated(s)) => {
                (t.updated, t.processed, t.last) = (t.updated + 1, t.processed + 1, s)
            }
            Ok(AddOutcome::Same(s)) => (t.processed, t.last) = (t.processed + 1, s),
            Ok(AddOutcome::Nop) => {}
        }
    }
    t
}

/// A score and its member, as ZADD takes them.
type ScorePair<'a> = (f64, &'a [u8]);

/// Active replication: notes the members a ZADD applied (`applied`,
/// indexes into `pairs`) for its record's fact, where its argv ends with
/// the pairs (score, member) and the scores in it are the members' new
/// ones; an increment (ZINCRBY, ZADD INCR) travels the lazy way.
fn note_pairs(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    key: &[u8],
    version: u64,
    (f, pairs, argv): (AddFlags, &[ScorePair<'_>], &[&[u8]]),
    applied: &[usize],
) {
    let first = argv.len().checked_sub(2 * pairs.len());
    let named: Option<Vec<(u32, &[u8])>> = first.filter(|_| !f.incr).and_then(|first| {
        (applied.iter())
            .map(|&i| {
                let at = first + 2 * i + 1;
                (argv.get(at) == Some(&pairs[i].1)).then_some((at as u32, pairs[i].1))
            })
            .collect()
    });
    match named {
        Some(named) => ctx.note_members(l, key, version, &named),
        None => l.touch_members(key, applied.iter().map(|&i| pairs[i].1)),
    }
}

/// Active replication, after ZINCRBY (ZADD INCR) stamped `version` added
/// `incr` to `member` of `key`, whose score was `before`: the member's
/// score is a counter (keyspace/merge/elements.rs), so that increments on
/// several nodes add up; it holds the counter's sum, which it returns
/// (DECISIONS 79).
fn count_score(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    (key, version): (&[u8], u64),
    (incr, member): ScorePair<'_>,
    (index, before): (u32, Option<f64>),
) -> f64 {
    use crate::keyspace::longdouble::F80;
    use crate::keyspace::merge::{Base, Incr, Merged};
    let base = before.map_or(Base::Absent, |s| Base::Score(F80::from_f64(s)));
    let by = (Incr::Float(F80::from_f64(incr)), base);
    let counted = ctx.count_field(l, key, version, (index, member), by);
    let e = l.entry(key).expect("written above");
    let now = zs_mut(&mut e.value).score(member).unwrap_or(incr);
    match counted {
        Some(Merged::Float(f)) if f.to_f64() != now && f.to_f64().is_finite() => {
            let e = l.entry(key).expect("written above");
            zs_mut(&mut e.value).update(member, f.to_f64());
            l.reprint_member(key, member, version);
            f.to_f64()
        }
        _ => now,
    }
}

/// ZADD and ZINCRBY.
fn zadd_generic(ctx: &mut Ctx, args: Args, f: AddFlags, pairs: &[(f64, &[u8])]) -> CmdResult {
    zadd_with(ctx, args.get(1), f, pairs, &argv_of(args))
}

/// ZADD of `pairs` to `key`, reported as `argv` (GEOADD reports the ZADD it
/// stands for). One keyspace lookup: an existing set is changed in place
/// (its version bumped there); a new one is built first and stored only if
/// a pair added to it (Redis 7.0 picks its encoding from the first member
/// alone).
pub(crate) fn zadd_with(
    ctx: &mut Ctx,
    key: &[u8],
    f: AddFlags,
    pairs: &[(f64, &[u8])],
    argv: &[&[u8]],
) -> CmdResult {
    let lim = limits(ctx);
    let mut l = ctx.open(key);
    // Under active replication an add of a present member with its score
    // is a write too: it re-asserts the member against a concurrent remove
    // elsewhere (docs/MERGE.md, "re-assert").
    let reasserts = ctx.core.active;
    // ZINCRBY (ZADD INCR) counts into the member's score counter there.
    let counts = reasserts && f.incr;
    let before = match counts {
        true => l
            .get_zset(key)?
            .and_then(|e| zs_mut(&mut e.value).score(pairs[0].1)),
        false => None,
    };
    // Only finite scores count (an infinity is no counter's base).
    let counts = counts && pairs[0].0.is_finite() && before.is_none_or(f64::is_finite);
    let (mut t, version) = match l.get_zset(key)? {
        Some(e) => {
            let t = add_pairs(zs_mut(&mut e.value), f, pairs, (lim, reasserts));
            if t.added + t.updated > 0 || (reasserts && t.processed > 0) {
                e.version = ctx.version_after(e.version);
            }
            (t, e.version)
        }
        None if f.xx => (AddTally::default(), 0),
        None => {
            let mut z = ZSetValue::with_hint(1, pairs[0].1.len(), lim);
            let t = add_pairs(&mut z, f, pairs, (lim, reasserts));
            let v = ctx.new_version();
            if t.added + t.updated > 0 {
                l.put(key, Value::ZSet(Box::new(z)), 0, v);
            }
            (t, v)
        }
    };
    let changed = t.added + t.updated > 0;
    if changed || (reasserts && t.processed > 0 && version != 0) {
        if counts && !t.applied.is_empty() {
            // The member is the last argument (ZINCRBY, or ZADD's one pair).
            let index = (argv.len() - 1) as u32;
            t.last = count_score(ctx, &mut l, (key, version), pairs[0], (index, before));
        } else if reasserts {
            note_pairs(ctx, &mut l, key, version, (f, pairs, argv), &t.applied);
        }
        ctx.propagate(version, argv);
    }
    if changed {
        ctx.notify(class::ZSET, if f.incr { "zincr" } else { "zadd" }, key);
        ctx.signal_ready(ctx.db(), key);
    }
    if let Some(err) = t.failed {
        return Err(err);
    }
    if f.incr {
        if t.processed > 0 {
            ctx.out.double(t.last);
        } else {
            ctx.out.null();
        }
    } else {
        ctx.out
            .int(if f.ch { t.added + t.updated } else { t.added });
    }
    Ok(())
}

// ---------------------------------------------------------------- reads

fn zcard(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let n = read_zset(ctx, &mut l, key)?.map_or(0, |z| z.len());
    ctx.out.int(n as i64);
    Ok(())
}

fn count_generic(ctx: &mut Ctx, args: Args, kind: Kind) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let n = match read_zset(ctx, &mut l, key)? {
        None => 0,
        Some(z) => {
            let (a, b) = bounds(z, &kind, false);
            b - a
        }
    };
    ctx.out.int(n as i64);
    Ok(())
}

fn zcount(ctx: &mut Ctx, args: Args) -> CmdResult {
    let r = parse_score_range(args.get(2), args.get(3))?;
    count_generic(ctx, args, Kind::Score(r))
}

fn zlexcount(ctx: &mut Ctx, args: Args) -> CmdResult {
    let r = parse_lex_range(args.get(2), args.get(3))?;
    count_generic(ctx, args, Kind::Lex(r))
}

fn zscore(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    match read_zset(ctx, &mut l, key)?.and_then(|z| z.score(args.get(2))) {
        Some(s) => ctx.out.double(s),
        None => ctx.out.null(),
    }
    Ok(())
}

fn zmscore(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let z = read_zset(ctx, &mut l, key)?;
    ctx.out.array(args.len() - 2);
    for m in args.slice_from(2).iter() {
        match z.and_then(|z| z.score(m)) {
            Some(s) => ctx.out.double(s),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

fn rank_generic(ctx: &mut Ctx, args: Args, rev: bool) -> CmdResult {
    if args.len() > 4 {
        return Err(CmdError::Syntax);
    }
    let withscore = args.len() == 4;
    if withscore && !eq_ic(args.get(3), "withscore") {
        return Err(CmdError::Syntax);
    }
    let key = args.get(1);
    let mut l = ctx.open(key);
    let z = read_zset(ctx, &mut l, key)?;
    match z.and_then(|z| z.rank(args.get(2)).map(|r| (r, z.len()))) {
        None if withscore => ctx.out.null_array(),
        None => ctx.out.null(),
        Some(((r, s), len)) => {
            let r = if rev { len - 1 - r } else { r };
            if withscore {
                ctx.out.array(2);
                ctx.out.int(r as i64);
                ctx.out.double(s);
            } else {
                ctx.out.int(r as i64);
            }
        }
    }
    Ok(())
}

fn zrank(ctx: &mut Ctx, args: Args) -> CmdResult {
    rank_generic(ctx, args, false)
}

fn zrevrank(ctx: &mut Ctx, args: Args) -> CmdResult {
    rank_generic(ctx, args, true)
}

// ---------------------------------------------------------------- removals

fn zrem(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let mut n = 0;
    if let Some(e) = l.get_zset(key)? {
        let z = zs_mut(&mut e.value);
        for m in args.slice_from(2).iter() {
            if z.remove(m).is_some() {
                n += 1;
                if z.is_empty() {
                    break;
                }
            }
        }
    }
    if n > 0 {
        let v = bump(ctx, &mut l, key);
        l.clear_member_ttls(key, args.iter().skip(2));
        ctx.note_members(&mut l, key, v, &named_args(&args, 2, 1));
        ctx.propagate(v, &argv_of(args));
        ctx.notify(class::ZSET, "zrem", key);
        ctx.remove_if_empty(&mut l, key);
    }
    ctx.out.int(n);
    Ok(())
}

fn remrange_generic(ctx: &mut Ctx, args: Args, kind: Kind, event: &str) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let mut n = 0;
    let mut taken: Vec<Box<[u8]>> = Vec::new();
    if let Some(e) = l.get_zset(key)? {
        let z = zs_mut(&mut e.value);
        let range = match kind {
            Kind::Rank(s, e) => rank_interval(z.len(), s, e),
            _ => Some(bounds(z, &kind, false))
                .filter(|(a, b)| b > a)
                .map(|(a, b)| (a, b - 1)),
        };
        if let Some((a, b)) = range {
            if as_zrem(ctx) {
                taken = z
                    .iter_from(a, false)
                    .take(b + 1 - a)
                    .map(|(m, _)| m.into())
                    .collect();
            }
            n = z.remove_ranks(a, b);
        }
    }
    if n > 0 {
        let v = bump(ctx, &mut l, key);
        propagate_removed(ctx, &mut l, (key, v), &taken, &argv_of(args));
        ctx.notify(class::ZSET, event, key);
        ctx.remove_if_empty(&mut l, key);
    }
    ctx.out.int(n as i64);
    Ok(())
}

fn zremrangebyrank(ctx: &mut Ctx, args: Args) -> CmdResult {
    let kind = Kind::Rank(arg_i64(args.get(2))?, arg_i64(args.get(3))?);
    remrange_generic(ctx, args, kind, "zremrangebyrank")
}

fn zremrangebyscore(ctx: &mut Ctx, args: Args) -> CmdResult {
    let kind = Kind::Score(parse_score_range(args.get(2), args.get(3))?);
    remrange_generic(ctx, args, kind, "zremrangebyscore")
}

fn zremrangebylex(ctx: &mut Ctx, args: Args) -> CmdResult {
    let kind = Kind::Lex(parse_lex_range(args.get(2), args.get(3))?);
    remrange_generic(ctx, args, kind, "zremrangebylex")
}

/// Whether a remove that picks its members here (a pop, a range) goes as
/// the ZREM of the members it took, with its fact (DECISIONS 233).
fn as_zrem(ctx: &Ctx) -> bool {
    ctx.core.active && merge::fact::REMOVE_FACTS
}

/// Propagates a remove of `taken` from `key` at version `v`: on an active
/// node as `ZREM key taken...`, its members noted in the key's merge state
/// (a peer applies it as a fact, as ZREM's); else as `plain` (what Redis
/// propagates). Call before the key is removed if emptied.
fn propagate_removed(
    ctx: &mut Ctx,
    l: &mut Locked,
    (key, v): (&[u8], u64),
    taken: &[Box<[u8]>],
    plain: &[&[u8]],
) {
    if !as_zrem(ctx) {
        return ctx.propagate(v, plain);
    }
    let argv: Vec<&[u8]> = [&b"ZREM"[..], key]
        .into_iter()
        .chain(taken.iter().map(|m| &m[..]))
        .collect();
    let named: Vec<(u32, &[u8])> = (argv.iter().enumerate().skip(2))
        .map(|(i, m)| (i as u32, *m))
        .collect();
    ctx.note_members(l, key, v, &named);
    ctx.propagate(v, &argv);
}

// ---------------------------------------------------------------- pops

/// Pops up to `count` from `key` (already known to be a non-empty zset),
/// propagated as `plain` (or as a ZREM: [`propagate_removed`]).
fn pop_from(
    ctx: &mut Ctx,
    l: &mut Locked,
    key: &[u8],
    (max, count): (bool, usize),
    plain: &[&[u8]],
) -> Vec<(Box<[u8]>, f64)> {
    let Some(e) = l.entry(key) else {
        return Vec::new();
    };
    let z = zs_mut(&mut e.value);
    let n = count.min(z.len());
    let start = if max { z.len() - 1 } else { 0 };
    let got: Vec<(Box<[u8]>, f64)> = z
        .iter_from(start, max)
        .take(n)
        .map(|(m, s)| (m.into(), s))
        .collect();
    for (m, _) in &got {
        z.remove(m);
    }
    if !got.is_empty() {
        let v = bump(ctx, l, key);
        if as_zrem(ctx) {
            let taken: Vec<Box<[u8]>> = got.iter().map(|(m, _)| m.clone()).collect();
            propagate_removed(ctx, l, (key, v), &taken, plain);
        }
        ctx.notify(class::ZSET, if max { "zpopmax" } else { "zpopmin" }, key);
        ctx.remove_if_empty(l, key);
        if !as_zrem(ctx) {
            let v = l
                .entry(key)
                .map_or_else(|| ctx.new_version(), |e| e.version);
            ctx.propagate(v, plain);
        }
    }
    got
}

fn pop_generic(ctx: &mut Ctx, args: Args, max: bool) -> CmdResult {
    if args.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let count = if args.len() == 3 {
        match arg_i64(args.get(2))? {
            n if n < 0 => return Err(CmdError::err("value is out of range, must be positive")),
            n => Some(n as usize),
        }
    } else {
        None
    };
    let key = args.get(1);
    let mut l = ctx.open(key);
    if l.get_zset(key)?.is_none() || count == Some(0) {
        ctx.out.array(0);
        return Ok(());
    }
    let got = pop_from(ctx, &mut l, key, (max, count.unwrap_or(1)), &argv_of(args));
    let items = got.iter().map(|(m, s)| (&m[..], *s));
    if count.is_none() {
        // A single pop is a flat [member, score] in both protocols.
        ctx.out.array(2);
        if let Some((m, s)) = got.first() {
            ctx.out.bulk(m);
            ctx.out.double(*s);
        }
    } else {
        reply_items(ctx.out, items, got.len(), true);
    }
    Ok(())
}

fn zpopmin(ctx: &mut Ctx, args: Args) -> CmdResult {
    pop_generic(ctx, args, false)
}

fn zpopmax(ctx: &mut Ctx, args: Args) -> CmdResult {
    pop_generic(ctx, args, true)
}

/// ZMPOP numkeys key.. MIN|MAX [COUNT n]: (keys, max, count).
fn parse_zmpop(args: Args<'_>, idx: usize) -> Result<(Vec<&[u8]>, bool, usize), CmdError> {
    let numkeys = match arg_i64(args.get(idx)) {
        Ok(n) if n > 0 => n as usize,
        _ => return Err(CmdError::err("numkeys should be greater than 0")),
    };
    let where_idx = idx.saturating_add(numkeys).saturating_add(1);
    if where_idx >= args.len() {
        return Err(CmdError::Syntax);
    }
    let w = args.get(where_idx);
    let max = if eq_ic(w, "min") {
        false
    } else if eq_ic(w, "max") {
        true
    } else {
        return Err(CmdError::Syntax);
    };
    let mut count = None;
    let mut j = where_idx + 1;
    while j < args.len() {
        if count.is_none() && eq_ic(args.get(j), "count") && j + 1 < args.len() {
            match arg_i64(args.get(j + 1)) {
                Ok(n) if n > 0 => count = Some(n as usize),
                _ => return Err(CmdError::err("count should be greater than 0")),
            }
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let keys = (idx + 1..where_idx).map(|i| args.get(i)).collect();
    Ok((keys, max, count.unwrap_or(1)))
}

fn zmpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (keys, max, count) = parse_zmpop(args, 1)?;
    let mut l = ctx.open_many(keys.iter().copied());
    if !mpop_from(ctx, &mut l, &keys, max, count)? {
        ctx.out.null_array();
    }
    Ok(())
}

/// ZMPOP/BZMPOP's pop from the first non-empty key: replies `[key,
/// [[member, score]...]]` and propagates ZPOPMIN|ZPOPMAX key n. Whether
/// a key was found. While a woken BZMPOP re-runs, a key that is no longer
/// a sorted set is passed over (Redis serves blocked clients only from a
/// key of their type).
fn mpop_from(
    ctx: &mut Ctx,
    l: &mut Locked,
    keys: &[&[u8]],
    max: bool,
    count: usize,
) -> Result<bool, CmdError> {
    let retrying = ctx.client.block.retry.is_some();
    for &key in keys {
        match l.get_zset(key) {
            Ok(Some(_)) => {}
            Ok(None) => continue,
            Err(_) if retrying => continue,
            Err(e) => return Err(e),
        }
        // Redis propagates the number actually popped.
        let n = l.entry(key).map_or(0, |e| zs(&e.value).len()).min(count);
        let c = n.to_string();
        let name: &[u8] = if max { b"ZPOPMAX" } else { b"ZPOPMIN" };
        let got = pop_from(ctx, l, key, (max, count), &[name, key, c.as_bytes()]);
        ctx.out.array(2);
        ctx.out.bulk(key);
        ctx.out.array(got.len());
        for (m, s) in &got {
            ctx.out.array(2);
            ctx.out.bulk(m);
            ctx.out.double(*s);
        }
        return Ok(true);
    }
    Ok(false)
}

// ---------------------------------------------------------------- blocking pops

fn bzpopmin(ctx: &mut Ctx, args: Args) -> CmdResult {
    bzpop_generic(ctx, args, false)
}

fn bzpopmax(ctx: &mut Ctx, args: Args) -> CmdResult {
    bzpop_generic(ctx, args, true)
}

/// BZPOPMIN/BZPOPMAX key... timeout: `[key, member, score]` from the first
/// non-empty key, propagated as ZPOPMIN|ZPOPMAX key; else blocks (see
/// `core/blocking.rs`), or replies a null array where it may not block.
fn bzpop_generic(ctx: &mut Ctx, args: Args, max: bool) -> CmdResult {
    let deadline = blocking::parse_timeout(ctx.now_ms, args.get(args.len() - 1))?;
    let keys: Vec<&[u8]> = (1..args.len() - 1).map(|i| args.get(i)).collect();
    let retrying = ctx.client.block.retry.is_some();
    let mut l = ctx.open_many(keys.iter().copied());
    for &key in &keys {
        match l.get_zset(key) {
            Ok(Some(_)) => {}
            Ok(None) => continue,
            Err(_) if retrying => continue,
            Err(e) => return Err(e),
        }
        let name: &[u8] = if max { b"ZPOPMAX" } else { b"ZPOPMIN" };
        let got = pop_from(ctx, &mut l, key, (max, 1), &[name, key]);
        let (m, score) = &got[0];
        ctx.out.array(3);
        ctx.out.bulk(key);
        ctx.out.bulk(m);
        ctx.out.double(*score);
        return Ok(());
    }
    blocking::block_or_null(ctx, args, &keys, deadline);
    Ok(())
}

/// BZMPOP timeout numkeys key... MIN|MAX [COUNT n].
fn bzmpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let deadline = blocking::parse_timeout(ctx.now_ms, args.get(1))?;
    let (keys, max, count) = parse_zmpop(args, 2)?;
    let mut l = ctx.open_many(keys.iter().copied());
    if !mpop_from(ctx, &mut l, &keys, max, count)? {
        blocking::block_or_null(ctx, args, &keys, deadline);
    }
    Ok(())
}

// ---------------------------------------------------------------- ZRANDMEMBER

fn zrandmember(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() > 4 {
        return Err(CmdError::Syntax);
    }
    let key = args.get(1);
    if args.len() == 2 {
        let mut l = ctx.open(key);
        match read_zset(ctx, &mut l, key)? {
            Some(z) => {
                let k = (rand_u64() % z.len() as u64) as usize;
                ctx.out.bulk(z.get(k).map_or(&b""[..], |x| x.0));
            }
            None => ctx.out.null(),
        }
        return Ok(());
    }
    let count = arg_i64(args.get(2))?;
    if count == i64::MIN {
        return Err(CmdError::err("value is out of range"));
    }
    let withscores = args.len() == 4;
    if withscores && !eq_ic(args.get(3), "withscores") {
        return Err(CmdError::Syntax);
    }
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return Err(CmdError::err("value is out of range"));
    }
    let mut l = ctx.open(key);
    let Some(z) = read_zset(ctx, &mut l, key)? else {
        ctx.out.array(0);
        return Ok(());
    };
    let len = z.len();
    if count < 0 {
        // Streamed: the count may be far larger than the set.
        let n = count.unsigned_abs() as usize;
        let items = (0..n).filter_map(|_| z.get((rand_u64() % len as u64) as usize));
        reply_items(ctx.out, items, n, withscores);
        return Ok(());
    }
    let ranks: Vec<usize> = if count as usize >= len {
        (0..len).collect()
    } else {
        sample_distinct(len, count as usize)
    };
    let items = ranks.iter().filter_map(|&r| z.get(r));
    reply_items(ctx.out, items, ranks.len(), withscores);
    Ok(())
}

/// `n` distinct ranks out of `len` (n < len), in random order.
fn sample_distinct(len: usize, n: usize) -> Vec<usize> {
    if n * 3 > len {
        let mut all: Vec<usize> = (0..len).collect();
        for i in 0..n {
            let j = i + (rand_u64() % (len - i) as u64) as usize;
            all.swap(i, j);
        }
        all.truncate(n);
        return all;
    }
    let mut seen = hashbrown::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let r = (rand_u64() % len as u64) as usize;
        if seen.insert(r) {
            out.push(r);
        }
    }
    out
}

// ---------------------------------------------------------------- set algebra

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Agg {
    Sum,
    Min,
    Max,
}

fn aggregate(agg: Agg, a: f64, b: f64) -> f64 {
    match agg {
        Agg::Sum => {
            let s = a + b;
            if s.is_nan() {
                0.0
            } else {
                s
            }
        }
        Agg::Min => a.min(b),
        Agg::Max => a.max(b),
    }
}

struct AlgebraReq<'a> {
    keys: Vec<&'a [u8]>,
    weights: Vec<f64>,
    agg: Agg,
    withscores: bool,
}

/// zunionInterDiffGenericCommand's parsing; `idx` is numkeys' position.
fn parse_algebra<'a>(
    args: Args<'a>,
    idx: usize,
    op: Op,
    store: bool,
    name: &str,
) -> Result<AlgebraReq<'a>, CmdError> {
    let n = arg_i64(args.get(idx))?;
    if n < 1 {
        return Err(CmdError::err(format!(
            "at least 1 input key is needed for '{name}' command"
        )));
    }
    if n as u64 > (args.len() - idx - 1) as u64 {
        return Err(CmdError::Syntax);
    }
    let n = n as usize;
    let keys: Vec<&[u8]> = (idx + 1..idx + 1 + n).map(|i| args.get(i)).collect();
    let mut r = AlgebraReq {
        keys,
        weights: vec![1.0; n],
        agg: Agg::Sum,
        withscores: false,
    };
    let mut j = idx + 1 + n;
    while j < args.len() {
        let a = args.get(j);
        let left = args.len() - j - 1;
        if op != Op::Diff && eq_ic(a, "weights") && left >= n {
            for k in 0..n {
                r.weights[k] = parse_score(args.get(j + 1 + k))
                    .ok_or_else(|| CmdError::err("weight value is not a float"))?;
            }
            j += n;
        } else if op != Op::Diff && eq_ic(a, "aggregate") && left >= 1 {
            let v = args.get(j + 1);
            r.agg = match () {
                _ if eq_ic(v, "sum") => Agg::Sum,
                _ if eq_ic(v, "min") => Agg::Min,
                _ if eq_ic(v, "max") => Agg::Max,
                _ => return Err(CmdError::Syntax),
            };
            j += 1;
        } else if !store && eq_ic(a, "withscores") {
            r.withscores = true;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(r)
}

/// Copies the members (and scores; 1 for plain sets) of `key`.
fn read_input(l: &mut Locked, key: &[u8]) -> Result<Items, CmdError> {
    Ok(match l.entry(key).map(|e| &e.value) {
        None => Vec::new(),
        Some(Value::ZSet(z)) => z.iter().map(|(m, s)| (m.into(), s)).collect(),
        Some(Value::Set(s)) => s.iter().map(|m| (Box::<[u8]>::from(&*m), 1.0)).collect(),
        Some(_) => return Err(CmdError::WrongType),
    })
}

fn weighted(w: f64, s: f64) -> f64 {
    let v = w * s;
    if v.is_nan() {
        0.0
    } else {
        v
    }
}

/// Computes the result, sorted by (score, member).
fn compute(mut inputs: Vec<(Items, f64)>, op: Op, agg: Agg) -> Vec<(Box<[u8]>, f64)> {
    let mut out: Vec<(Box<[u8]>, f64)> = match op {
        Op::Union => {
            inputs.sort_by_key(|i| i.0.len());
            let mut acc: HashMap<Box<[u8]>, f64> = HashMap::new();
            for (items, w) in inputs {
                for (m, s) in items {
                    let v = weighted(w, s);
                    acc.entry(m)
                        .and_modify(|x| *x = aggregate(agg, *x, v))
                        .or_insert(v);
                }
            }
            acc.into_iter().collect()
        }
        Op::Inter => {
            inputs.sort_by_key(|i| i.0.len());
            let maps: Vec<HashMap<&[u8], f64>> = inputs[1..]
                .iter()
                .map(|(items, _)| items.iter().map(|(m, s)| (&m[..], *s)).collect())
                .collect();
            let (first, w0) = &inputs[0];
            first
                .iter()
                .filter_map(|(m, s)| {
                    let mut v = weighted(*w0, *s);
                    for (k, map) in maps.iter().enumerate() {
                        v = aggregate(agg, v, weighted(inputs[k + 1].1, *map.get(&m[..])?));
                    }
                    Some((m.clone(), v))
                })
                .collect()
        }
        Op::Diff => {
            let others: hashbrown::HashSet<&[u8]> = inputs[1..]
                .iter()
                .flat_map(|(items, _)| items.iter().map(|(m, _)| &m[..]))
                .collect();
            inputs[0]
                .0
                .iter()
                .filter(|(m, _)| !others.contains(&m[..]))
                .cloned()
                .collect()
        }
    };
    out.sort_by(|a, b| crate::keyspace::zset::key_cmp(a.1, &a.0, b.1, &b.0));
    out
}

fn algebra(ctx: &mut Ctx, args: Args, op: Op, store: bool, name: &str) -> CmdResult {
    let idx = if store { 2 } else { 1 };
    let req = parse_algebra(args, idx, op, store, name)?;
    let dest = args.get(1);
    let mut all = req.keys.clone();
    if store {
        all.push(dest);
    }
    let mut l = ctx.open_many(all.iter().copied());
    let mut inputs = Vec::with_capacity(req.keys.len());
    for (k, w) in req.keys.iter().zip(&req.weights) {
        inputs.push((read_input(&mut l, k)?, *w));
    }
    let items = compute(inputs, op, req.agg);
    if store {
        let event = match op {
            Op::Union => "zunionstore",
            Op::Inter => "zinterstore",
            Op::Diff => "zdiffstore",
        };
        store_sorted(ctx, &mut l, dest, items, event, &argv_of(args));
    } else {
        let it = items.iter().map(|(m, s)| (&m[..], *s));
        reply_items(ctx.out, it, items.len(), req.withscores);
    }
    Ok(())
}

fn zunion(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra(ctx, args, Op::Union, false, "zunion")
}
fn zinter(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra(ctx, args, Op::Inter, false, "zinter")
}
fn zdiff(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra(ctx, args, Op::Diff, false, "zdiff")
}
fn zunionstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra(ctx, args, Op::Union, true, "zunionstore")
}
fn zinterstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra(ctx, args, Op::Inter, true, "zinterstore")
}
fn zdiffstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra(ctx, args, Op::Diff, true, "zdiffstore")
}

fn zintercard(ctx: &mut Ctx, args: Args) -> CmdResult {
    let n = arg_i64(args.get(1))?;
    if n < 1 {
        return Err(CmdError::err(
            "at least 1 input key is needed for 'zintercard' command",
        ));
    }
    if n as u64 > (args.len() - 2) as u64 {
        return Err(CmdError::Syntax);
    }
    let n = n as usize;
    let mut limit = 0usize;
    let mut j = 2 + n;
    while j < args.len() {
        if eq_ic(args.get(j), "limit") && j + 1 < args.len() {
            match arg_i64(args.get(j + 1)) {
                Ok(v) if v >= 0 => limit = v as usize,
                Ok(_) => return Err(CmdError::err("LIMIT can't be negative")),
                Err(_) => return Err(CmdError::err("LIMIT can't be negative")),
            }
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let keys: Vec<&[u8]> = (2..2 + n).map(|i| args.get(i)).collect();
    let mut l = ctx.open_many(keys.iter().copied());
    let mut inputs = Vec::with_capacity(n);
    for k in &keys {
        inputs.push((read_input(&mut l, k)?, 1.0));
    }
    let mut c = compute(inputs, Op::Inter, Agg::Sum).len();
    if limit > 0 {
        c = c.min(limit);
    }
    ctx.out.int(c as i64);
    Ok(())
}

// ---------------------------------------------------------------- ZSCAN

fn zscan(ctx: &mut Ctx, args: Args) -> CmdResult {
    let o = parse_scan(args)?;
    let (cursor, count, pattern) = (o.cursor, o.count, o.pattern);
    let key = args.get(1);
    let mut l = ctx.open(key);
    let mut found = Vec::new();
    let next = match read_zset(ctx, &mut l, key)? {
        Some(z) => z.scan(cursor, count, &mut found),
        None => 0,
    };
    if let Some(p) = pattern {
        found.retain(|(m, _)| glob_match(p, m, false));
    }
    ctx.out.array(2);
    ctx.out.bulk(next.to_string().as_bytes());
    ctx.out.array(found.len() * 2);
    for (m, s) in &found {
        ctx.out.bulk(m);
        ctx.out.bulk(format_double(*s).as_bytes());
    }
    Ok(())
}
