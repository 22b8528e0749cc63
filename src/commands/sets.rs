//! Sets (Redis's t_set.c): SADD SREM SCARD SISMEMBER SMISMEMBER SMEMBERS
//! SRANDMEMBER SPOP SMOVE SINTER SINTERCARD SINTERSTORE SUNION SUNIONSTORE
//! SDIFF SDIFFSTORE SSCAN.
//!
//! Multi-key commands lock all their keys' shards at once
//! (`ctx.open_many`), so they are atomic. To read several sets together
//! while the `Locked` view hands out one entry at a time, the algebra
//! commands move each source value out of its entry (a cheap swap of the
//! box) and put it back before replying; nobody can observe the gap since
//! the shards stay locked.
//!
//! Propagation follows Redis: commands go out as given when they wrote,
//! except SPOP, which is sent as `SREM key members...` (all popped members in
//! one record) or as `DEL key` when it popped the whole set. A write that
//! touches several keys stamps them all with one version, later than each
//! key's previous one. Every source key is type-checked before anything
//! is computed (a wrong-type key is reported even after a missing one). Results of the algebra are built as Redis 7.0 builds
//! them (starting as an intset), so OBJECT ENCODING of a stored result
//! matches.

use super::keyspec::KeySpec;
use std::sync::atomic::Ordering::Relaxed;

use super::access::{named_args, Locked};
use super::collscan::{distinct_indices, parse_scan, rand_u64, reply_scan};
use super::events::class;
use super::util::{arg_i64, eq_ic};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::merge::fact;
use crate::keyspace::set::SetValue;
use crate::keyspace::{StrValue, Value};
use crate::protocol::Args;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "set", acl = "set"),
    cmd("sadd", -3, WRITE | DENYOOM | FAST, sadd)
        .doc("1.0.0", "Adds one or more members to a set. Creates the key if it doesn't exist.")
        .complexity("O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "insert"])]),
    cmd("srem", -3, WRITE | FAST, srem)
        .doc("1.0.0", "Removes one or more members from a set. Deletes the set if the last member was removed.")
        .complexity("O(N) where N is the number of members to be removed.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])]),
    cmd("scard", 2, READONLY | FAST, scard)
        .doc("1.0.0", "Returns the number of members in a set.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"])]),
    cmd("sismember", 3, READONLY | FAST, sismember)
        .doc("1.0.0", "Determines whether a member belongs to a set.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"])]),
    cmd("smismember", -3, READONLY | FAST, smismember)
        .doc("6.2.0", "Determines whether multiple members belong to a set.")
        .complexity("O(N) where N is the number of elements being checked for membership")
        .keys(1, 1, 1),
    cmd("smembers", 2, READONLY, smembers)
        .doc("1.0.0", "Returns all members of a set.")
        .complexity("O(N) where N is the set cardinality.")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output_order"]),
    cmd("srandmember", -2, READONLY, srandmember)
        .doc("1.0.0", "Get one or multiple random members from a set")
        .complexity("Without the count argument O(1), otherwise O(N) where N is the absolute value of the passed count.")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output"]),
    cmd("spop", -2, WRITE | FAST, spop)
        .doc("1.0.0", "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped.")
        .complexity("Without the count argument O(1), otherwise O(N) where N is the value of the passed count.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"])])
        .tips(&["nondeterministic_output"]),
    cmd("smove", 4, WRITE | FAST, smove)
        .doc("1.0.0", "Moves a member from one set to another.")
        .keys(1, 2, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "delete"]),
            KeySpec::at(2, &["RW", "insert"]),
        ]),
    cmd("sinter", -2, READONLY, sinter)
        .doc("1.0.0", "Returns the intersect of multiple sets.")
        .complexity("O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.")
        .keys(1, -1, 1)
        .tips(&["nondeterministic_output_order"]),
    cmd("sintercard", -3, READONLY, sintercard)
        .doc("7.0.0", "Returns the number of members of the intersect of multiple sets.")
        .complexity("O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.")
        .keys_fn(sintercard_keys)
        .key_specs(&[KeySpec::at(1, &["RO", "access"]).keynum(0, 1, 1)]),
    cmd("sinterstore", -3, WRITE | DENYOOM, sinterstore)
        .doc("1.0.0", "Stores the intersect of multiple sets in a key.")
        .complexity("O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.")
        .keys(1, -1, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "update"]),
            KeySpec::at(2, &["RO", "access"]).range(-1, 1, 0),
        ]),
    cmd("sunion", -2, READONLY, sunion)
        .doc("1.0.0", "Returns the union of multiple sets.")
        .complexity("O(N) where N is the total number of elements in all given sets.")
        .keys(1, -1, 1)
        .tips(&["nondeterministic_output_order"]),
    cmd("sunionstore", -3, WRITE | DENYOOM, sunionstore)
        .doc("1.0.0", "Stores the union of multiple sets in a key.")
        .complexity("O(N) where N is the total number of elements in all given sets.")
        .keys(1, -1, 1)
        .key_specs(&[
            KeySpec::at(1, &["OW", "update"]),
            KeySpec::at(2, &["RO", "access"]).range(-1, 1, 0),
        ]),
    cmd("sdiff", -2, READONLY, sdiff)
        .doc("1.0.0", "Returns the difference of multiple sets.")
        .complexity("O(N) where N is the total number of elements in all given sets.")
        .keys(1, -1, 1)
        .tips(&["nondeterministic_output_order"]),
    cmd("sdiffstore", -3, WRITE | DENYOOM, sdiffstore)
        .doc("1.0.0", "Stores the difference of multiple sets in a key.")
        .complexity("O(N) where N is the total number of elements in all given sets.")
        .keys(1, -1, 1)
        .key_specs(&[
            KeySpec::at(1, &["OW", "update"]),
            KeySpec::at(2, &["RO", "access"]).range(-1, 1, 0),
        ]),
    cmd("sscan", -3, READONLY, sscan)
        .doc("2.8.0", "Iterates over members of a set.")
        .complexity("O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection.")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output"]),
};

/// The set inside a value already checked to be one.
fn set_ref(v: &Value) -> &SetValue {
    match v {
        Value::Set(s) => s,
        _ => unreachable!("type checked by get_set"),
    }
}

fn set_mut(v: &mut Value) -> &mut SetValue {
    match v {
        Value::Set(s) => s,
        _ => unreachable!("type checked by get_set"),
    }
}

fn max_intset(ctx: &Ctx) -> usize {
    ctx.core.hot.encoding.set_max_intset_entries.load(Relaxed)
}

/// Runs `f` on the set at `key` (None if missing), for read commands.
fn read<R>(
    ctx: &mut Ctx,
    key: &[u8],
    f: impl FnOnce(&mut Ctx, Option<&SetValue>) -> R,
) -> Result<R, CmdError> {
    let mut l = ctx.open(key);
    let s = l.get_set(key)?.map(|e| set_ref(&e.value));
    ctx.read_hit(key, s.is_some());
    Ok(f(ctx, s))
}

fn sadd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let max = max_intset(ctx);
    let mut l = ctx.open(key);
    let prev = match l.get_set(key)? {
        Some(e) => Some(e.version),
        None => {
            let v = Value::Set(Box::new(SetValue::for_member(args.get(2))));
            l.put(key, v, 0, 0);
            None
        }
    };
    let e = l.entry(key).expect("present above");
    let s = set_mut(&mut e.value);
    let added = args.iter().skip(2).filter(|m| s.add(m, max)).count();
    ctx.out.int(added as i64);
    // Under active replication an SADD that added nothing is a write all
    // the same: it re-asserts its members against a concurrent SREM
    // elsewhere (docs/MERGE.md, "re-assert").
    if added == 0 && !ctx.core.active {
        return Ok(());
    }
    let version = match prev {
        Some(p) => ctx.version_after(p),
        None => ctx.new_version(),
    };
    e.version = version;
    if ctx.core.active {
        ctx.note_added(&mut l, key, version, &named_args(&args, 2, 1));
    }
    if added > 0 {
        ctx.notify(class::SET, "sadd", key);
    }
    ctx.propagate_args(version, &args);
    Ok(())
}

fn srem(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_set(key)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let s = set_mut(&mut e.value);
    let mut removed = 0;
    for m in args.iter().skip(2) {
        removed += s.remove(m) as i64;
        if s.is_empty() {
            break;
        }
    }
    ctx.out.int(removed);
    if removed == 0 {
        return Ok(());
    }
    let version = ctx.version_after(e.version);
    e.version = version;
    l.clear_member_ttls(key, args.iter().skip(2));
    ctx.notify(class::SET, "srem", key);
    if ctx.core.active {
        ctx.note_members(&mut l, key, version, &named_args(&args, 2, 1));
    }
    ctx.remove_if_empty(&mut l, key);
    ctx.propagate_args(version, &args);
    Ok(())
}

fn scard(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, s| {
        ctx.out.int(s.map_or(0, |s| s.len() as i64))
    })
}

fn sismember(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, s| {
        ctx.out
            .int(s.is_some_and(|s| s.contains(args.get(2))) as i64)
    })
}

fn smismember(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, s| {
        ctx.out.array(args.len() - 2);
        for m in args.iter().skip(2) {
            ctx.out.int(s.is_some_and(|s| s.contains(m)) as i64);
        }
    })
}

fn smembers(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, s| match s {
        None => ctx.out.set(0),
        Some(s) => {
            ctx.out.set(s.len());
            s.iter().for_each(|m| ctx.out.bulk(&m));
        }
    })
}

fn srandmember(ctx: &mut Ctx, args: Args) -> CmdResult {
    let count = match args.len() {
        2 => None,
        3 => {
            let n = arg_i64(args.get(2))?;
            if n == i64::MIN {
                return Err(CmdError::err("value is out of range, value must between -9223372036854775807 and 9223372036854775807"));
            }
            Some(n)
        }
        _ => return Err(CmdError::Syntax),
    };
    read(ctx, args.get(1), |ctx, s| {
        let mut rnd = rand_u64;
        let Some(n) = count else {
            match s.and_then(|s| s.random(&mut rnd)) {
                Some(m) => ctx.out.bulk(&m),
                None => ctx.out.null(),
            }
            return;
        };
        let Some(s) = s.filter(|_| n != 0) else {
            return ctx.out.array(0);
        };
        if n < 0 {
            ctx.out.array(n.unsigned_abs() as usize);
            for _ in 0..n.unsigned_abs() {
                let m = s.random(&mut rnd).expect("not empty");
                ctx.out.bulk(&m);
            }
            return;
        }
        let picks = pick_distinct(s, n as usize);
        ctx.out.array(picks.len());
        picks.iter().for_each(|m| ctx.out.bulk(m));
    })
}

/// `count` distinct random members (all of them if `count >= len`).
fn pick_distinct(s: &SetValue, count: usize) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>>;
    if count >= s.len() {
        return s.iter().map(|m| m.to_vec()).collect();
    }
    if count * 3 > s.len() {
        all = s.iter().map(|m| m.to_vec()).collect();
        let idx = distinct_indices(all.len(), count);
        return idx
            .into_iter()
            .map(|i| std::mem::take(&mut all[i]))
            .collect();
    }
    let mut rnd = rand_u64;
    let mut seen = hashbrown::HashSet::with_capacity(count);
    all = Vec::with_capacity(count);
    while all.len() < count {
        let m = s.random(&mut rnd).expect("not empty").to_vec();
        if seen.insert(m.clone()) {
            all.push(m);
        }
    }
    all
}

fn spop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let count = match args.len() {
        2 => None,
        3 => {
            // Redis's getPositiveLongFromObjectOrReply: one message for all.
            match arg_i64(args.get(2)) {
                Ok(n) if n >= 0 => Some(n as usize),
                _ => return Err(CmdError::err("value is out of range, must be positive")),
            }
        }
        _ => return Err(CmdError::Syntax),
    };
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_set(key)? else {
        match count {
            None => ctx.out.null(),
            Some(_) => ctx.out.set(0),
        }
        return Ok(());
    };
    let s = set_mut(&mut e.value);
    let mut rnd = rand_u64;
    let whole = count.is_some_and(|n| n >= s.len());
    let popped: Vec<Vec<u8>> = match count {
        None => vec![s.pop_random(&mut rnd).expect("not empty")],
        Some(0) => {
            ctx.out.set(0);
            return Ok(());
        }
        Some(_) if whole => s.iter().map(|m| m.to_vec()).collect(),
        Some(n) => (0..n).filter_map(|_| s.pop_random(&mut rnd)).collect(),
    };
    let version = ctx.version_after(e.version);
    e.version = version;
    match count {
        None => ctx.out.bulk(&popped[0]),
        Some(_) => {
            ctx.out.set(popped.len());
            popped.iter().for_each(|m| ctx.out.bulk(m));
        }
    }
    ctx.notify(class::SET, "spop", key);
    let emptied = whole || e.value.is_empty_collection();
    // On an active node, one SREM of the members taken, with its fact
    // (DECISIONS 233): a peer removes the dots the pop saw, no state asked.
    let srem: Option<Vec<&[u8]>> = (ctx.core.active && fact::REMOVE_FACTS && !whole).then(|| {
        [&b"SREM"[..], key]
            .into_iter()
            .chain(popped.iter().map(|m| &m[..]))
            .collect()
    });
    if let Some(argv) = &srem {
        ctx.note_members(&mut l, key, version, &named_args_of(argv));
    }
    if emptied {
        l.remove(key);
        ctx.notify(class::GENERIC, "del", key);
    }
    if whole {
        ctx.note_states(&mut l, &[b"DEL", key], &[key]);
        ctx.propagate(version, &[b"DEL", key]);
    } else if let Some(argv) = srem {
        ctx.propagate(version, &argv);
    } else {
        // One SREM per member, as Redis 7.0 propagates SPOP with a count.
        let records: Vec<Vec<&[u8]>> = popped.iter().map(|m| vec![&b"SREM"[..], key, m]).collect();
        ctx.propagate_unit(version, &records);
    }
    Ok(())
}

/// The members of a record `CMD key member...`, each with its argument
/// index, as [`Ctx::note_members`] takes them.
fn named_args_of<'m>(argv: &[&'m [u8]]) -> Vec<(u32, &'m [u8])> {
    (argv.iter().enumerate().skip(2))
        .map(|(i, m)| (i as u32, *m))
        .collect()
}

fn smove(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (src, dst, m) = (args.get(1), args.get(2), args.get(3));
    let max = max_intset(ctx);
    let mut l = ctx.open_many([src, dst]);
    let Some(se) = l.entry(src) else {
        ctx.out.int(0);
        return Ok(());
    };
    let src_version = se.version;
    l.get_set(src)?;
    let dst_version = l.get_set(dst)?.map(|e| e.version);
    if src == dst {
        let has = set_ref(&l.entry(src).expect("present").value).contains(m);
        ctx.out.int(has as i64);
        return Ok(());
    }
    let dst_has =
        dst_version.is_some() && set_ref(&l.entry(dst).expect("present").value).contains(m);
    let se = l.entry(src).expect("present");
    if !set_mut(&mut se.value).remove(m) {
        ctx.out.int(0);
        return Ok(());
    }
    // A member the destination already has only leaves the source: as in
    // Redis, the destination is not modified (its WATCHers keep their
    // transaction), so the effect is the SREM alone.
    let prev = if dst_has {
        src_version
    } else {
        src_version.max(dst_version.unwrap_or(0))
    };
    let version = ctx.version_after(prev);
    se.version = version;
    ctx.notify(class::SET, "srem", src);
    // On an active node, the SREM from the source and the SADD to the
    // destination go as two records, each with its fact (DECISIONS 233).
    let as_facts = ctx.core.active && fact::REMOVE_FACTS;
    if as_facts {
        ctx.note_members(&mut l, src, version, &[(2, m)]);
    }
    ctx.remove_if_empty(&mut l, src);
    ctx.out.int(1);
    if dst_has {
        ctx.propagate(version, &[b"SREM", src, m]);
        return Ok(());
    }
    if as_facts {
        ctx.propagate(version, &[b"SREM", src, m]);
    }
    if dst_version.is_none() {
        l.put(
            dst,
            Value::Set(Box::new(SetValue::for_member(m))),
            0,
            version,
        );
    }
    let de = l.entry(dst).expect("present");
    de.version = version;
    set_mut(&mut de.value).add(m, max);
    ctx.notify(class::SET, "sadd", dst);
    if as_facts {
        ctx.note_added(&mut l, dst, version, &[(2, m)]);
        ctx.propagate(version, &[b"SADD", dst, m]);
    } else {
        ctx.propagate(version, &[b"SMOVE", src, dst, m]);
    }
    Ok(())
}

/// The set algebra operations.
#[derive(Clone, Copy, PartialEq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// Source sets moved out of their entries (see the module comment), in the
/// order of the distinct keys; `None` for a missing key.
struct Sources<'k> {
    keys: Vec<&'k [u8]>,
    sets: Vec<Option<Box<SetValue>>>,
    /// For each key argument, its index in `keys`.
    order: Vec<usize>,
}

/// Type-checks every source key (WRONGTYPE wins over a missing key, as in
/// Redis 7.0.15) and takes their sets. For an intersection with a missing
/// key: Ok(None), the result is empty.
fn take_sources<'k>(
    l: &mut Locked,
    srcs: &[&'k [u8]],
    op: Op,
) -> Result<Option<Sources<'k>>, CmdError> {
    let mut missing = false;
    for k in srcs {
        missing |= l.get_set(k)?.is_none();
    }
    if missing && op == Op::Inter {
        return Ok(None);
    }
    let mut s = Sources {
        keys: vec![],
        sets: vec![],
        order: vec![],
    };
    for k in srcs {
        let i = match s.keys.iter().position(|x| x == k) {
            Some(i) => i,
            None => {
                s.keys.push(k);
                s.sets.push(l.entry(k).map(|e| {
                    match std::mem::replace(&mut e.value, Value::Str(StrValue::Int(0))) {
                        Value::Set(b) => b,
                        _ => unreachable!("type checked above"),
                    }
                }));
                s.keys.len() - 1
            }
        };
        s.order.push(i);
    }
    Ok(Some(s))
}

impl Sources<'_> {
    /// Puts the sets back into their entries.
    fn restore(self, l: &mut Locked) {
        for (k, s) in self.keys.into_iter().zip(self.sets) {
            if let Some(s) = s {
                l.entry(k).expect("locked").value = Value::Set(s);
            }
        }
    }

    fn arg(&self, i: usize) -> Option<&SetValue> {
        self.sets[self.order[i]].as_deref()
    }

    /// Members of the intersection, up to `limit` (0: all), in the order of
    /// the smallest set.
    fn inter(&self, limit: usize) -> Vec<Vec<u8>> {
        let mut sets: Vec<&SetValue> = (0..self.order.len()).filter_map(|i| self.arg(i)).collect();
        sets.sort_by_key(|s| s.len());
        let mut out = vec![];
        let Some((first, rest)) = sets.split_first() else {
            return out;
        };
        for m in first.iter() {
            if rest.iter().all(|s| s.contains(&m)) {
                out.push(m.to_vec());
                if out.len() == limit {
                    break;
                }
            }
        }
        out
    }

    /// The union or difference, built as Redis 7.0 builds its result set.
    fn union_diff(&self, op: Op, max: usize) -> SetValue {
        let mut out = SetValue::default();
        let n = self.order.len();
        if op == Op::Union {
            (0..n).filter_map(|i| self.arg(i)).for_each(|s| {
                s.iter().for_each(|m| {
                    out.add(&m, max);
                })
            });
        } else if let Some(first) = self.arg(0) {
            for m in first.iter() {
                if !(1..n).filter_map(|i| self.arg(i)).any(|s| s.contains(&m)) {
                    out.add(&m, max);
                }
            }
        }
        out
    }
}

/// Computes `op` over `srcs` under the lock: the result set, or None when
/// SINTER met a missing key.
fn compute(l: &mut Locked, srcs: &[&[u8]], op: Op, max: usize) -> Result<SetValue, CmdError> {
    let Some(s) = take_sources(l, srcs, op)? else {
        return Ok(SetValue::default());
    };
    let out = match op {
        Op::Inter => {
            let mut v = SetValue::default();
            s.inter(0).iter().for_each(|m| {
                v.add(m, max);
            });
            v
        }
        _ => s.union_diff(op, max),
    };
    s.restore(l);
    Ok(out)
}

fn algebra(ctx: &mut Ctx, args: Args, op: Op) -> CmdResult {
    let srcs: Vec<&[u8]> = args.iter().skip(1).collect();
    let max = max_intset(ctx);
    let mut l = ctx.open_many(srcs.iter().copied());
    if op == Op::Inter {
        // SINTER replies in the smallest set's order, without building a set.
        let members = match take_sources(&mut l, &srcs, op)? {
            Some(s) => {
                let v = s.inter(0);
                s.restore(&mut l);
                v
            }
            None => vec![],
        };
        ctx.out.set(members.len());
        members.iter().for_each(|m| ctx.out.bulk(m));
        return Ok(());
    }
    let out = compute(&mut l, &srcs, op, max)?;
    ctx.out.set(out.len());
    out.iter().for_each(|m| ctx.out.bulk(&m));
    Ok(())
}

fn algebra_store(ctx: &mut Ctx, args: Args, op: Op, event: &str) -> CmdResult {
    let dst = args.get(1);
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let srcs = &keys[1..];
    let max = max_intset(ctx);
    let mut l = ctx.open_many(keys.iter().copied());
    let out = compute(&mut l, srcs, op, max)?;
    let prev = l.entry(dst).map(|e| e.version);
    let n = out.len();
    let version = match prev {
        Some(p) => ctx.version_after(p),
        None if n > 0 => ctx.new_version(),
        None => {
            ctx.out.int(0);
            return Ok(());
        }
    };
    if n > 0 {
        l.put(dst, Value::Set(Box::new(out)), 0, version);
        ctx.notify(class::SET, event, dst);
    } else {
        l.remove(dst);
        ctx.notify(class::GENERIC, "del", dst);
    }
    ctx.out.int(n as i64);
    let argv: Vec<&[u8]> = args.iter().collect();
    ctx.note_states(&mut l, &argv, &[dst]);
    ctx.propagate(version, &argv);
    Ok(())
}

fn sinter(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra(ctx, args, Op::Inter)
}

fn sunion(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra(ctx, args, Op::Union)
}

fn sdiff(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra(ctx, args, Op::Diff)
}

fn sinterstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra_store(ctx, args, Op::Inter, "sinterstore")
}

fn sunionstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra_store(ctx, args, Op::Union, "sunionstore")
}

fn sdiffstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    algebra_store(ctx, args, Op::Diff, "sdiffstore")
}

/// SINTERCARD's numkeys, checked against the arguments.
fn parse_numkeys(args: Args) -> Result<usize, CmdError> {
    let positive = || CmdError::err("numkeys should be greater than 0");
    let n = arg_i64(args.get(1)).map_err(|_| positive())?;
    if n <= 0 {
        return Err(positive());
    }
    if n as u64 > (args.len() - 2) as u64 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    Ok(n as usize)
}

fn sintercard_keys(args: Args) -> Vec<usize> {
    match parse_numkeys(args) {
        Ok(n) => (2..2 + n).collect(),
        Err(_) => vec![],
    }
}

fn sintercard(ctx: &mut Ctx, args: Args) -> CmdResult {
    let n = parse_numkeys(args)?;
    let mut limit = 0usize;
    let mut i = 2 + n;
    while i < args.len() {
        if eq_ic(args.get(i), "LIMIT") && i + 1 < args.len() {
            let neg = || CmdError::err("LIMIT can't be negative");
            let v = arg_i64(args.get(i + 1)).map_err(|_| neg())?;
            limit = usize::try_from(v).map_err(|_| neg())?;
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let srcs: Vec<&[u8]> = args.iter().skip(2).take(n).collect();
    let mut l = ctx.open_many(srcs.iter().copied());
    let card = match take_sources(&mut l, &srcs, Op::Inter)? {
        Some(s) => {
            let c = s.inter(limit).len();
            s.restore(&mut l);
            c
        }
        None => 0,
    };
    ctx.out.int(card as i64);
    Ok(())
}

fn sscan(ctx: &mut Ctx, args: Args) -> CmdResult {
    let o = parse_scan(args)?;
    read(ctx, args.get(1), |ctx, s| {
        let mut items = Vec::new();
        let next = match s {
            Some(s) => s.scan(o.cursor, o.count, |m| {
                if o.matches(m) {
                    items.push(m.to_vec());
                }
            }),
            None => 0,
        };
        reply_scan(ctx.out, next, &items);
    })
}
