//! HyperLogLog commands (Redis's hyperloglog.c): PFADD PFCOUNT PFMERGE
//! PFDEBUG PFSELFTEST, over string values holding Redis's sketch bytes
//! (`keyspace/hll.rs` owns the format and the estimator).
//!
//! As in Redis, a sketch is a `raw` string any string command may read or
//! damage: every command checks the header first (a bad one is WRONGTYPE's
//! "Key is not a valid HyperLogLog string value.") and reports registers
//! that do not add up as INVALIDOBJ. PFCOUNT of one key stores the estimate
//! in the header's cache, a write: it bumps the key's version and
//! propagates itself, as Redis does (`dirty++`), so a replica's bytes stay
//! equal to its master's. PFADD and PFMERGE propagate verbatim (the sketch
//! update is deterministic); PFDEBUG GETREG/TODENSE propagate when they
//! turned a sparse sketch dense.

use std::sync::atomic::Ordering::Relaxed;

use super::events::class;
use super::keyspec::KeySpec;
use super::strings::{str_of, str_of_mut};
use super::util::eq_ic;
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::hll::{self, Corrupt, REGISTERS};
use crate::keyspace::{Entry, StrValue, Value};
use crate::protocol::Args;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "hyperloglog", acl = "hyperloglog"),
    cmd("pfadd", -2, WRITE | DENYOOM | FAST, pfadd)
        .doc("2.8.9", "Adds the specified elements to the specified HyperLogLog.")
        .complexity("O(1) to add every element.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "insert"])]),
    cmd("pfcount", -2, READONLY | MAY_REPLICATE, pfcount)
        .doc("2.8.9", "Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).")
        .complexity("O(1) with a very small average constant time when called with a single key. O(N) with N being the number of keys, and much bigger constant times, when called with multiple keys.")
        .keys(1, -1, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access"]).range(-1, 1, 0)
                .notes("RW because it may change the internal representation of the key, and propagate to replicas"),
        ]),
    cmd("pfmerge", -2, WRITE | DENYOOM, pfmerge)
        .doc("2.8.9", "Merge N different HyperLogLogs into a single one.")
        .complexity("O(N) to merge N HyperLogLogs, but with high constant times.")
        .keys(1, -1, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "insert"]),
            KeySpec::at(2, &["RO", "access"]).range(-1, 1, 0),
        ]),
    cmd("pfdebug", 3, WRITE | DENYOOM | ADMIN, pfdebug)
        .doc("2.8.9", "Internal commands for debugging HyperLogLog values")
        .complexity("N/A")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RW", "access"])]),
    cmd("pfselftest", 1, ADMIN, pfselftest)
        .doc("2.8.9", "An internal command for testing HyperLogLog values")
        .complexity("N/A"),
};

fn not_hll() -> CmdError {
    CmdError::Msg("WRONGTYPE Key is not a valid HyperLogLog string value.".into())
}

fn invalid(_: Corrupt) -> CmdError {
    CmdError::Msg("INVALIDOBJ Corrupted HLL object detected".into())
}

/// The sketch at `e`, checked (isHLLObjectOrReply); WRONGTYPE otherwise.
fn checked(e: &Entry) -> Result<(), CmdError> {
    match &e.value {
        Value::Str(s) if s.with_bytes(hll::looks_valid) => Ok(()),
        Value::Str(_) => Err(not_hll()),
        _ => Err(CmdError::WrongType),
    }
}

/// The writable sketch bytes of a checked entry.
fn bytes_mut(e: &mut Entry) -> &mut Vec<u8> {
    str_of_mut(&mut e.value).make_raw()
}

fn sparse_max(ctx: &Ctx) -> usize {
    ctx.core.hot.encoding.hll_sparse_max_bytes.load(Relaxed)
}

/// Stamps a written sketch and reports the write.
fn written(ctx: &mut Ctx, e: &mut Entry, created: bool, argv: &[&[u8]]) {
    e.version = if created {
        ctx.new_version()
    } else {
        ctx.version_after(e.version)
    };
    ctx.propagate(e.version, argv);
}

/// Under active replication, before a write grows the sketch at `key`:
/// its merge state brought up to date (`keyspace/merge/hll.rs`); the key's
/// version before the write.
fn before_growth(ctx: &Ctx, l: &mut super::access::Locked, key: &[u8]) -> Option<u64> {
    if !ctx.core.active {
        return None;
    }
    l.prepare_sketch(key);
    ctx.base_of(key)
}

/// Under active replication, after a write stamped `version` grew the
/// sketch at `key` (see [`before_growth`]): the growth is noted, so that
/// concurrent PFADDs on other nodes join by register maximum, and the
/// record tells peers to merge the key's state rather than replay it where
/// the key moved there.
fn grew(l: &mut super::access::Locked, key: &[u8], prev: Option<u64>) {
    let Some(prev) = prev else { return };
    let version = l.entry(key).map_or(0, |e| e.version);
    l.note_sketch_growth(key, prev, version);
}

fn pfadd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let max = sparse_max(ctx);
    let mut l = ctx.open(key);
    let prev = before_growth(ctx, &mut l, key);
    let created = match l.entry(key) {
        None => {
            l.put(key, Value::Str(StrValue::raw(hll::new_sketch())), 0, 0);
            true
        }
        Some(e) => {
            checked(e)?;
            false
        }
    };
    let e = l.entry(key).expect("present");
    let data = bytes_mut(e);
    let mut updated = created;
    for ele in args.iter().skip(2) {
        updated |= hll::add(data, ele, max).map_err(invalid)?;
    }
    if updated {
        hll::invalidate(data);
        let argv: Vec<&[u8]> = args.iter().collect();
        ctx.mark_merged(key);
        written(ctx, e, created, &argv);
        grew(&mut l, key, prev);
        ctx.notify(class::STRING, "pfadd", key);
    }
    ctx.out.int(updated as i64);
    Ok(())
}

fn pfcount(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() > 2 {
        return pfcount_union(ctx, args);
    }
    let key = args.get(1);
    let mut l = ctx.open(key);
    let found = l.entry(key);
    ctx.read_hit(key, found.is_some());
    let Some(e) = found else {
        ctx.out.int(0);
        return Ok(());
    };
    checked(e)?;
    if let Some(card) = str_of(&e.value).with_bytes(hll::cached) {
        ctx.out.int(card as i64);
        return Ok(());
    }
    if ctx.core.active {
        // Under active replication the estimate is not cached: a cache
        // write is a write, which a concurrent PFADD elsewhere would turn
        // into a merge of the key's state (a read making merge traffic),
        // and its record, replayed late, an older version of the key
        // (keyspace/merge/hll.rs, DECISIONS 104).
        let card = str_of(&e.value)
            .with_bytes(hll::histogram)
            .map_err(invalid)?;
        ctx.out.int(hll::estimate(&card) as i64);
        return Ok(());
    }
    let data = bytes_mut(e);
    let card = hll::estimate(&hll::histogram(data).map_err(invalid)?);
    hll::set_cache(data, card);
    written(ctx, e, false, &[b"PFCOUNT", key]);
    ctx.out.int(card as i64);
    Ok(())
}

/// The registers' maximum over the sketches at `keys` (missing keys are
/// empty sketches), and whether any of them was dense.
fn union(
    ctx: &mut Ctx,
    l: &mut super::access::Locked,
    keys: &[&[u8]],
) -> Result<(Box<[u8; REGISTERS]>, bool), CmdError> {
    let mut max = Box::new([0u8; REGISTERS]);
    let mut dense = false;
    for &k in keys {
        let found = l.entry(k);
        ctx.read_hit(k, found.is_some());
        let Some(e) = found else { continue };
        checked(e)?;
        let s = str_of(&e.value);
        dense |= s.with_bytes(|b| !hll::is_sparse(b));
        s.with_bytes(|b| hll::merge_into(&mut max, b))
            .map_err(invalid)?;
    }
    Ok((max, dense))
}

fn pfcount_union(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let mut l = ctx.open_many(keys.iter().copied());
    let (max, _) = union(ctx, &mut l, &keys)?;
    ctx.out.int(hll::estimate(&hll::raw_histogram(&max)) as i64);
    Ok(())
}

fn pfmerge(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let dst = keys[0];
    let max_bytes = sparse_max(ctx);
    let mut l = ctx.open_many(keys.iter().copied());
    let (max, dense) = union(ctx, &mut l, &keys)?;
    let prev = before_growth(ctx, &mut l, dst);
    let created = !l.exists(dst);
    if created {
        l.put(dst, Value::Str(StrValue::raw(hll::new_sketch())), 0, 0);
    }
    let e = l.entry(dst).expect("present");
    let data = bytes_mut(e);
    if dense {
        hll::to_dense(data).map_err(invalid)?;
    }
    for (i, &m) in max.iter().enumerate() {
        if m != 0 {
            // As Redis, a register a damaged sketch cannot take is skipped.
            let _ = hll::set_register(data, i, m, max_bytes);
        }
    }
    hll::invalidate(data);
    let argv: Vec<&[u8]> = args.iter().collect();
    ctx.mark_merged(dst);
    written(ctx, e, created, &argv);
    grew(&mut l, dst, prev);
    ctx.notify(class::STRING, "pfadd", dst);
    ctx.out.ok();
    Ok(())
}

fn pfdebug(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (sub, key) = (args.get(1), args.get(2));
    let mut l = ctx.open(key);
    let Some(e) = l.entry(key) else {
        return Err(CmdError::err("The specified key does not exist"));
    };
    checked(e)?;
    let sparse = str_of(&e.value).with_bytes(hll::is_sparse);
    let argv: Vec<&[u8]> = args.iter().collect();
    if eq_ic(sub, "getreg") {
        if sparse {
            hll::to_dense(bytes_mut(e)).map_err(invalid)?;
            written(ctx, e, false, &argv);
        }
        let regs: Vec<u8> = str_of(&e.value).with_bytes(|b| {
            (0..REGISTERS)
                .map(|i| hll::dense_get(&b[hll::HDR..], i))
                .collect()
        });
        ctx.out.array(REGISTERS);
        for r in regs {
            ctx.out.int(r as i64);
        }
    } else if eq_ic(sub, "decode") {
        if !sparse {
            return Err(CmdError::err("HLL encoding is not sparse"));
        }
        let text = str_of(&e.value).with_bytes(hll::decode);
        ctx.out.bulk(text.as_bytes());
    } else if eq_ic(sub, "encoding") {
        ctx.out.simple(if sparse { "sparse" } else { "dense" });
    } else if eq_ic(sub, "todense") {
        if sparse {
            hll::to_dense(bytes_mut(e)).map_err(invalid)?;
            written(ctx, e, false, &argv);
        }
        ctx.out.int(sparse as i64);
    } else {
        let s = String::from_utf8_lossy(sub);
        return Err(CmdError::err(format!("Unknown PFDEBUG subcommand '{s}'")));
    }
    Ok(())
}

/// PFSELFTEST: the dense registers keep what is written, and the
/// estimate of a sparse and a dense sketch fed the same 10^7 elements
/// agree and stay within six standard errors.
fn pfselftest(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let mut seed = ctx.now_ms | 1;
    let mut rand = move || {
        // xorshift64*
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut regs = vec![0u8; hll::DENSE_SIZE - hll::HDR];
    let mut want = vec![0u8; REGISTERS];
    for _ in 0..1000 {
        for (i, w) in want.iter_mut().enumerate() {
            *w = (rand() & 63) as u8;
            hll::dense_set(&mut regs, i, *w);
        }
        for (i, &w) in want.iter().enumerate() {
            let got = hll::dense_get(&regs, i);
            if got != w {
                let msg = format!("TESTFAILED Register {i} should be {w} but is {got}");
                return Err(CmdError::Msg(msg));
            }
        }
    }
    selftest_estimates(sparse_max(ctx), rand())?;
    ctx.out.ok();
    Ok(())
}

fn selftest_estimates(max_bytes: usize, seed: u64) -> CmdResult {
    let fail = |m: String| Err(CmdError::Msg(format!("TESTFAILED {m}")));
    let mut dense = hll::new_sketch();
    hll::to_dense(&mut dense).expect("a new sketch is valid");
    let mut sparse = hll::new_sketch();
    let relerr = 1.04 / (REGISTERS as f64).sqrt();
    let mut checkpoint = 1u64;
    for j in 1..=10_000_000u64 {
        let ele = (j ^ seed).to_le_bytes();
        let _ = hll::add(&mut dense, &ele, max_bytes);
        let _ = hll::add(&mut sparse, &ele, max_bytes);
        if j != checkpoint {
            continue;
        }
        if j < max_bytes as u64 / 2 && !hll::is_sparse(&sparse) {
            return fail("sparse encoding not used".into());
        }
        let count = |v: &[u8]| hll::histogram(v).map(|h| hll::estimate(&h)).unwrap_or(0);
        let d = count(&dense);
        if d != count(&sparse) {
            return fail("dense/sparse disagree".into());
        }
        let maxerr = if j == 10 {
            1
        } else {
            (relerr * 6.0 * j as f64).ceil() as u64
        };
        if d.abs_diff(j) > maxerr {
            return fail(format!("Too big error. card:{j} abserr:{}", d.abs_diff(j)));
        }
        checkpoint *= 10;
    }
    Ok(())
}
