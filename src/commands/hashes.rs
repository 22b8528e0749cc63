//! Hashes (Redis's t_hash.c): HSET HSETNX HMSET HGET HMGET HGETALL HKEYS
//! HVALS HLEN HEXISTS HDEL HINCRBY HINCRBYFLOAT HSTRLEN HRANDFIELD HSCAN.
//!
//! Handlers parse first, then lock the key, execute, reply and propagate
//! once while holding the lock. Propagation follows Redis: commands go out
//! as given, except HINCRBYFLOAT, sent as `HSET key field <result>` so that
//! replicas store the exact text. HSETNX and HDEL propagate only when they
//! wrote. Emptying a hash (HDEL) removes the key with a "del" event. The
//! representation and its conversion thresholds live in `keyspace/hash.rs`;
//! HSCAN's cursor scheme in `collscan.rs`.

use super::keyspec::KeySpec;
use std::sync::atomic::Ordering::Relaxed;

use super::access::named_args;
use super::collscan::{distinct_indices, parse_scan, rand_u64, reply_scan};
use super::events::class;
use super::util::{arg_i64, eq_ic};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::hash::{HashLimits, HashValue};
use crate::keyspace::longdouble::F80;
use crate::keyspace::merge::{Base, Incr};
use crate::keyspace::{Entry, Value};
use crate::protocol::{parse_i64, Args};

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "hash", acl = "hash"),
    // KeyDB's (issue 28 item 3; KeyDB's t_hash.cpp hrenameCommand).
    cmd("keydb.hrename", 4, WRITE | FAST, keydb_hrename)
        .doc("6.0.0", "Rename a hash field, keeping its value.")
        .keys(1, 1, 1),
    cmd("hset", -4, WRITE | DENYOOM | FAST, hset)
        .doc("2.0.0", "Creates or modifies the value of a field in a hash.")
        .complexity("O(1) for each field/value pair added, so O(N) to add N field/value pairs when the command is called with multiple field/value pairs.")
        .keys(1, 1, 1),
    cmd("hsetnx", 4, WRITE | DENYOOM | FAST, hsetnx)
        .doc("2.0.0", "Sets the value of a field in a hash only when the field doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "insert"])]),
    cmd("hmset", -4, WRITE | DENYOOM | FAST, hset)
        .doc("2.0.0", "Sets the values of multiple fields.")
        .complexity("O(N) where N is the number of fields being set.")
        .keys(1, 1, 1),
    cmd("hget", 3, READONLY | FAST, hget)
        .doc("2.0.0", "Returns the value of a field in a hash.")
        .keys(1, 1, 1),
    cmd("hmget", -3, READONLY | FAST, hmget)
        .doc("2.0.0", "Returns the values of all fields in a hash.")
        .complexity("O(N) where N is the number of fields being requested.")
        .keys(1, 1, 1),
    cmd("hgetall", 2, READONLY, hgetall)
        .doc("2.0.0", "Returns all fields and values in a hash.")
        .complexity("O(N) where N is the size of the hash.")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output_order"]),
    cmd("hkeys", 2, READONLY, hkeys)
        .doc("2.0.0", "Returns all fields in a hash.")
        .complexity("O(N) where N is the size of the hash.")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output_order"]),
    cmd("hvals", 2, READONLY, hvals)
        .doc("2.0.0", "Returns all values in a hash.")
        .complexity("O(N) where N is the size of the hash.")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output_order"]),
    cmd("hlen", 2, READONLY | FAST, hlen)
        .doc("2.0.0", "Returns the number of fields in a hash.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"])]),
    cmd("hexists", 3, READONLY | FAST, hexists)
        .doc("2.0.0", "Determines whether a field exists in a hash.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"])]),
    cmd("hdel", -3, WRITE | FAST, hdel)
        .doc("2.0.0", "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.")
        .complexity("O(N) where N is the number of fields to be removed.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])]),
    cmd("hincrby", 4, WRITE | DENYOOM | FAST, hincrby)
        .doc("2.0.0", "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("hincrbyfloat", 4, WRITE | DENYOOM | FAST, hincrbyfloat)
        .doc("2.6.0", "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("hstrlen", 3, READONLY | FAST, hstrlen)
        .doc("3.2.0", "Returns the length of the value of a field.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"])]),
    cmd("hrandfield", -2, READONLY, hrandfield)
        .doc("6.2.0", "Returns one or more random fields from a hash.")
        .complexity("O(N) where N is the number of fields returned")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output"]),
    cmd("hscan", -3, READONLY, hscan)
        .doc("2.8.0", "Iterates over fields and values of a hash.")
        .complexity("O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection.")
        .keys(1, 1, 1)
        .tips(&["nondeterministic_output"]),
};

/// The hash inside a value already checked to be one.
fn hash_ref(v: &Value) -> &HashValue {
    match v {
        Value::Hash(h) => h,
        _ => unreachable!("type checked by get_hash"),
    }
}

fn hash_mut(v: &mut Value) -> &mut HashValue {
    match v {
        Value::Hash(h) => h,
        _ => unreachable!("type checked by get_hash"),
    }
}

fn limits(ctx: &Ctx) -> HashLimits {
    let e = &ctx.core.hot.encoding;
    HashLimits {
        entries: e.hash_max_listpack_entries.load(Relaxed),
        value: e.hash_max_listpack_value.load(Relaxed),
    }
}

/// The hash at `key` for a write, created empty if missing; stamps the
/// entry's version and returns it.
fn hash_for_write<'l>(
    ctx: &mut Ctx,
    l: &'l mut super::access::Locked,
    key: &[u8],
) -> Result<(&'l mut Entry, u64), CmdError> {
    let version = match l.get_hash(key)? {
        Some(e) => ctx.version_after(e.version),
        None => {
            let v = ctx.new_version();
            l.put(key, Value::Hash(Box::default()), 0, v);
            v
        }
    };
    let e = l.entry(key).expect("present above");
    e.version = version;
    Ok((e, version))
}

fn hset(ctx: &mut Ctx, args: Args) -> CmdResult {
    if !args.len().is_multiple_of(2) {
        let name = String::from_utf8_lossy(args.get(0)).to_ascii_lowercase();
        return Err(CmdError::WrongArity(name));
    }
    let key = args.get(1);
    let lim = limits(ctx);
    let mut l = ctx.open(key);
    let (e, version) = hash_for_write(ctx, &mut l, key)?;
    let h = hash_mut(&mut e.value);
    let mut added = 0;
    for i in (2..args.len()).step_by(2) {
        added += h.set(args.get(i), args.get(i + 1), lim) as i64;
    }
    // A field written whole loses its TTL (Redis 7.4's rule).
    l.clear_member_ttls(key, (2..args.len()).step_by(2).map(|i| args.get(i)));
    if eq_ic(args.get(0), "hmset") {
        ctx.out.ok();
    } else {
        ctx.out.int(added);
    }
    if ctx.core.active {
        ctx.note_members(&mut l, key, version, &named_args(&args, 2, 2));
    }
    ctx.notify(class::HASH, "hset", key);
    ctx.propagate_args(version, &args);
    Ok(())
}

/// KEYDB.HRENAME key src dst: the field `src` becomes `dst` (replacing a
/// `dst` that exists), with its value; 1, or a null reply when the key is
/// missing, or "ERR hash key doesn't exist" when the field is, as KeyDB
/// answers. KeyDB neither propagates nor notifies it; we do, as the HDEL
/// and HSET it amounts to (one unit: a replica, a Redis one too, and the
/// AOF apply both or neither).
fn keydb_hrename(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, src, dst) = (args.get(1), args.get(2), args.get(3));
    let lim = limits(ctx);
    let mut l = ctx.open(key);
    let Some(e) = l.get_hash(key)? else {
        ctx.out.null();
        return Ok(());
    };
    let h = hash_mut(&mut e.value);
    let Some(value) = h.get(src).map(|v| v.to_vec()) else {
        return Err(CmdError::err("hash key doesn't exist"));
    };
    h.remove(src);
    h.set(dst, &value, lim);
    let version = ctx.version_after(e.version);
    e.version = version;
    ctx.out.int(1);
    if ctx.core.active {
        // Two records: the members go the lazy way (peers ask for the key).
        l.touch_members(key, [src, dst].into_iter());
    }
    ctx.notify(class::HASH, "hdel", key);
    ctx.notify(class::HASH, "hset", key);
    ctx.propagate_unit(
        version,
        &[vec![b"HDEL", key, src], vec![b"HSET", key, dst, &value]],
    );
    Ok(())
}

fn hsetnx(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, field, value) = (args.get(1), args.get(2), args.get(3));
    let lim = limits(ctx);
    let mut l = ctx.open(key);
    if let Some(e) = l.get_hash(key)? {
        if hash_ref(&e.value).contains(field) {
            ctx.out.int(0);
            return Ok(());
        }
    }
    let (e, version) = hash_for_write(ctx, &mut l, key)?;
    hash_mut(&mut e.value).set(field, value, lim);
    ctx.out.int(1);
    ctx.notify(class::HASH, "hset", key);
    ctx.note_members(&mut l, key, version, &[(2, field)]);
    ctx.propagate(version, &[b"HSETNX", key, field, value]);
    Ok(())
}

/// Runs `f` on the hash at `key` (None if missing), for read commands.
fn read<R>(
    ctx: &mut Ctx,
    key: &[u8],
    f: impl FnOnce(&mut Ctx, Option<&HashValue>) -> R,
) -> Result<R, CmdError> {
    let mut l = ctx.open(key);
    let h = l.get_hash(key)?.map(|e| hash_ref(&e.value));
    ctx.read_hit(key, h.is_some());
    Ok(f(ctx, h))
}

fn hget(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, h| {
        match h.and_then(|h| h.get(args.get(2))) {
            Some(v) => ctx.out.bulk(v),
            None => ctx.out.null(),
        }
    })
}

fn hmget(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, h| {
        ctx.out.array(args.len() - 2);
        for f in args.iter().skip(2) {
            match h.and_then(|h| h.get(f)) {
                Some(v) => ctx.out.bulk(v),
                None => ctx.out.null(),
            }
        }
    })
}

fn hgetall(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, h| {
        let Some(h) = h else {
            return ctx.out.map(0);
        };
        ctx.out.map(h.len());
        for (f, v) in h.iter() {
            ctx.out.bulk(f);
            ctx.out.bulk(v);
        }
    })
}

fn hkeys(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, h| {
        ctx.out.array(h.map_or(0, |h| h.len()));
        h.iter()
            .flat_map(|h| h.iter())
            .for_each(|(f, _)| ctx.out.bulk(f));
    })
}

fn hvals(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, h| {
        ctx.out.array(h.map_or(0, |h| h.len()));
        h.iter()
            .flat_map(|h| h.iter())
            .for_each(|(_, v)| ctx.out.bulk(v));
    })
}

fn hlen(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, h| {
        ctx.out.int(h.map_or(0, |h| h.len() as i64))
    })
}

fn hexists(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, h| {
        ctx.out
            .int(h.is_some_and(|h| h.contains(args.get(2))) as i64)
    })
}

fn hstrlen(ctx: &mut Ctx, args: Args) -> CmdResult {
    read(ctx, args.get(1), |ctx, h| {
        let n = h.and_then(|h| h.get(args.get(2))).map_or(0, |v| v.len());
        ctx.out.int(n as i64)
    })
}

fn hdel(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_hash(key)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let h = hash_mut(&mut e.value);
    let mut deleted = 0;
    for f in args.iter().skip(2) {
        deleted += h.remove(f) as i64;
        if h.is_empty() {
            break;
        }
    }
    ctx.out.int(deleted);
    if deleted == 0 {
        return Ok(());
    }
    let version = ctx.version_after(e.version);
    e.version = version;
    l.clear_member_ttls(key, args.iter().skip(2));
    ctx.notify(class::HASH, "hdel", key);
    if ctx.core.active {
        ctx.note_members(&mut l, key, version, &named_args(&args, 2, 1));
    }
    ctx.remove_if_empty(&mut l, key);
    ctx.propagate_args(version, &args);
    Ok(())
}

fn hincrby(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, field) = (args.get(1), args.get(2));
    let incr = arg_i64(args.get(3))?;
    let lim = limits(ctx);
    let mut l = ctx.open(key);
    let (cur, existed) = match l.get_hash(key)? {
        Some(e) => match hash_ref(&e.value).get(field) {
            Some(v) => (
                parse_i64(v).ok_or_else(|| CmdError::err("hash value is not an integer"))?,
                true,
            ),
            None => (0, false),
        },
        None => (0, false),
    };
    let new = cur.checked_add(incr).ok_or(CmdError::Overflow)?;
    let before = if existed {
        Base::Int(i128::from(cur))
    } else {
        Base::Absent
    };
    let (e, version) = hash_for_write(ctx, &mut l, key)?;
    hash_mut(&mut e.value).set(field, new.to_string().as_bytes(), lim);
    ctx.out.int(new);
    if ctx.core.active {
        ctx.count_field(
            &mut l,
            key,
            version,
            (2, field),
            (Incr::Int(incr.into()), before),
        );
    }
    ctx.notify(class::HASH, "hincrby", key);
    ctx.propagate(version, &[b"HINCRBY", key, field, args.get(3)]);
    Ok(())
}

fn hincrbyfloat(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, field) = (args.get(1), args.get(2));
    let incr = F80::parse(args.get(3)).ok_or(CmdError::NotFloat)?;
    if !incr.is_finite() {
        return Err(CmdError::err("value is NaN or Infinity"));
    }
    let lim = limits(ctx);
    let active = ctx.core.active;
    let mut l = ctx.open(key);
    // The field counter's base, read only where counters are kept.
    let (cur, before) = match l.get_hash(key)? {
        Some(e) => match hash_ref(&e.value).get(field) {
            Some(v) => (parse_hash_float(v)?, active.then(|| Base::of_bytes(v))),
            None => (F80::ZERO, Some(Base::Absent)),
        },
        None => (F80::ZERO, Some(Base::Absent)),
    };
    let sum = cur.add(&incr);
    if !sum.is_finite() {
        return Err(CmdError::err("increment would produce NaN or Infinity"));
    }
    let mut text = sum.format_human();
    let (e, version) = hash_for_write(ctx, &mut l, key)?;
    hash_mut(&mut e.value).set(field, text.as_bytes(), lim);
    match before.filter(|_| active) {
        None => {}
        Some(Base::Other) => l.touch_members(key, std::iter::once(field)), // a reset
        Some(before) => {
            // A float counter: the field holds its sum (as INCRBYFLOAT).
            let counted = ctx.count_field(
                &mut l,
                key,
                version,
                (2, field),
                (Incr::Float(incr), before),
            );
            if let Some(t) = counted.and_then(|m| m.text()).filter(|t| *t != text) {
                let e = l.entry(key).expect("written above");
                hash_mut(&mut e.value).set(field, t.as_bytes(), lim);
                l.reprint_member(key, field, version);
                text = t;
            }
        }
    }
    ctx.out.bulk(text.as_bytes());
    ctx.notify(class::HASH, "hincrbyfloat", key);
    ctx.propagate(version, &[b"HSET", key, field, text.as_bytes()]);
    // The increment keeps the field's TTL, the HSET it travels as clears
    // it: the TTL follows, as its own record (not wrapped with the HSET: a
    // Redis replica refuses it and would drop both; docs/DECISIONS.md 119).
    if let Some(at) = l.member_ttl(key, field) {
        let at = at.to_string();
        let argv: [&[u8]; 6] = [b"HPEXPIREAT", key, at.as_bytes(), b"FIELDS", b"1", field];
        ctx.propagate(version, &argv);
    }
    Ok(())
}

/// A stored value read as a long double (integers are exact).
fn parse_hash_float(v: &[u8]) -> Result<F80, CmdError> {
    let not_float = || CmdError::err("hash value is not a float");
    match parse_i64(v) {
        Some(n) => Ok(F80::from_i64(n)),
        // string2ld wants strtold to consume every byte: a NUL stops it.
        None if v.contains(&0) => Err(not_float()),
        None => F80::parse(v).filter(F80::is_finite).ok_or_else(not_float),
    }
}

/// HRANDFIELD's count argument: (count, may repeat, with values).
fn parse_randfield(args: Args) -> Result<Option<(usize, bool, bool)>, CmdError> {
    if args.len() == 2 {
        return Ok(None);
    }
    let withvalues = match args.len() {
        3 => false,
        4 if eq_ic(args.get(3), "WITHVALUES") => true,
        _ => return Err(CmdError::Syntax),
    };
    let n = arg_i64(args.get(2))?;
    if n == i64::MIN {
        return Err(CmdError::err(
            "value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ));
    }
    if withvalues && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&n) {
        return Err(CmdError::err("value is out of range"));
    }
    Ok(Some((n.unsigned_abs() as usize, n < 0, withvalues)))
}

fn hrandfield(ctx: &mut Ctx, args: Args) -> CmdResult {
    let opts = parse_randfield(args)?;
    read(ctx, args.get(1), |ctx, h| {
        let mut rnd = rand_u64;
        let Some((count, repeat, withvalues)) = opts else {
            match h.and_then(|h| h.random(&mut rnd)) {
                Some((f, _)) => ctx.out.bulk(f),
                None => ctx.out.null(),
            }
            return;
        };
        let Some(h) = h.filter(|_| count > 0) else {
            return ctx.out.array(0);
        };
        let picks: Vec<(&[u8], &[u8])> = if repeat {
            (0..count).filter_map(|_| h.random(&mut rnd)).collect()
        } else if count >= h.len() {
            h.iter().collect()
        } else if count * 3 > h.len() {
            let all: Vec<(&[u8], &[u8])> = h.iter().collect();
            distinct_indices(all.len(), count)
                .into_iter()
                .map(|i| all[i])
                .collect()
        } else {
            // Few among many: draw until `count` distinct fields.
            let mut seen = hashbrown::HashSet::with_capacity(count);
            let mut v = Vec::with_capacity(count);
            while v.len() < count {
                let p = h.random(&mut rnd).expect("not empty");
                if seen.insert(p.0) {
                    v.push(p);
                }
            }
            v
        };
        reply_pairs(ctx, &picks, withvalues);
    })
}

/// HRANDFIELD's reply: fields, or (RESP3) pairs / (RESP2) flat pairs.
fn reply_pairs(ctx: &mut Ctx, picks: &[(&[u8], &[u8])], withvalues: bool) {
    if !withvalues {
        ctx.out.array(picks.len());
        picks.iter().for_each(|(f, _)| ctx.out.bulk(f));
        return;
    }
    let resp3 = ctx.out.resp >= 3;
    ctx.out
        .array(if resp3 { picks.len() } else { 2 * picks.len() });
    for (f, v) in picks {
        if resp3 {
            ctx.out.array(2);
        }
        ctx.out.bulk(f);
        ctx.out.bulk(v);
    }
}

fn hscan(ctx: &mut Ctx, args: Args) -> CmdResult {
    let o = parse_scan(args)?;
    read(ctx, args.get(1), |ctx, h| {
        let mut items = Vec::new();
        let next = match h {
            Some(h) => h.scan(o.cursor, o.count, |f, v| {
                if o.matches(f) {
                    items.push(f.to_vec());
                    items.push(v.to_vec());
                }
            }),
            None => 0,
        };
        reply_scan(ctx.out, next, &items);
    })
}
