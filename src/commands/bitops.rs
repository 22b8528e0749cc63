//! Bitmap commands (Redis's bitops.c): SETBIT GETBIT BITCOUNT BITPOS BITOP
//! BITFIELD BITFIELD_RO, operating on string values as big-endian bit arrays
//! (bit 0 is the most significant bit of byte 0).
//!
//! Offsets are bounded by proto-max-bulk-len (512 MB by default) as in Redis.
//! Writes turn the value into the `raw` encoding and zero-extend it. BITCOUNT
//! and BITPOS answer for a missing key before looking at their range
//! arguments, exactly as Redis 7.2 does (Redis 8 changed that order).
//! BITFIELD propagates verbatim only when it had a SET or INCRBY; BITOP
//! propagates verbatim when it wrote or deleted its destination.

use super::keyspec::KeySpec;
use std::sync::atomic::Ordering::Relaxed;

use super::strings::{str_of, str_of_mut};
use super::util::{arg_i64, eq_ic};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::{StrValue, Value};
use crate::protocol::Args;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "bitmap", acl = "bitmap"),
    cmd("setbit", 4, WRITE | DENYOOM, setbit)
        .doc("2.2.0", "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("getbit", 3, READONLY | FAST, getbit)
        .doc("2.2.0", "Returns a bit value by offset.")
        .keys(1, 1, 1),
    cmd("bitcount", -2, READONLY, bitcount)
        .doc("2.6.0", "Counts the number of set bits (population counting) in a string.")
        .complexity("O(N)")
        .keys(1, 1, 1),
    cmd("bitpos", -3, READONLY, bitpos)
        .doc("2.8.7", "Finds the first set (1) or clear (0) bit in a string.")
        .complexity("O(N)")
        .keys(1, 1, 1),
    cmd("bitop", -4, WRITE | DENYOOM, bitop)
        .doc("2.6.0", "Performs bitwise operations on multiple strings, and stores the result.")
        .complexity("O(N)")
        .keys(2, -1, 1)
        .key_specs(&[
            KeySpec::at(2, &["OW", "update"]),
            KeySpec::at(3, &["RO", "access"]).range(-1, 1, 0),
        ]),
    cmd("bitfield", -2, WRITE | DENYOOM, bitfield)
        .doc("3.2.0", "Performs arbitrary bitfield integer operations on strings.")
        .complexity("O(1) for each subcommand specified")
        .keys(1, 1, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "update", "variable_flags"])
                .notes("This command allows both access and modification of the key"),
        ])
        .key_flags_fn(bitfield_key_flags),
    cmd("bitfield_ro", -2, READONLY | FAST, bitfield_ro)
        .doc("6.0.0", "Performs arbitrary read-only bitfield integer operations on strings.")
        .complexity("O(1) for each subcommand specified")
        .keys(1, 1, 1),
};

/// Redis's getBitOffsetFromArgument: `n` or, with `bits > 0`, `#n` (n*bits).
fn bit_offset(ctx: &Ctx, a: &[u8], bits: u32) -> Result<u64, CmdError> {
    let err = || CmdError::err("bit offset is not an integer or out of range");
    let hash = bits > 0 && a.first() == Some(&b'#');
    let mut n = arg_i64(if hash { &a[1..] } else { a }).map_err(|_| err())?;
    if hash {
        n = n.checked_mul(bits as i64).ok_or_else(err)?;
    }
    let max = ctx.core.hot.proto_max_bulk_len.load(Relaxed) as i64;
    if n < 0 || (ctx.replay_version.is_none() && (n >> 3) >= max) {
        return Err(err());
    }
    Ok(n as u64)
}

/// The writable bytes of `key`, created or zero-extended to hold bit
/// `max_bit` (Redis's lookupStringForBitCommand). Returns the entry's
/// previous version (None if created) and whether the string grew.
fn open_for_bits<'l>(
    l: &'l mut super::access::Locked,
    key: &[u8],
    max_bit: u64,
) -> Result<(&'l mut crate::keyspace::Entry, Option<u64>, bool), CmdError> {
    let need = (max_bit >> 3) as usize + 1;
    let created = l.get_str(key)?.is_none();
    if created {
        let data = vec![0u8; need];
        l.put(key, Value::Str(StrValue::raw(data)), 0, 0);
    }
    let e = l.entry(key).expect("present");
    let prev = (!created).then_some(e.version);
    let data = str_of_mut(&mut e.value).make_raw();
    let grew = data.len() < need;
    if grew {
        data.resize(need, 0);
    }
    Ok((e, prev, created || grew))
}

fn setbit(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let off = bit_offset(ctx, args.get(2), 0)?;
    let on = match arg_i64(args.get(3)) {
        Ok(v @ (0 | 1)) => v as u8,
        _ => return Err(CmdError::err("bit is not an integer or out of range")),
    };
    let mut l = ctx.open(key);
    let (e, prev, dirty) = open_for_bits(&mut l, key, off)?;
    let data = str_of_mut(&mut e.value).make_raw();
    let (byte, shift) = ((off >> 3) as usize, 7 - (off & 7) as u8);
    let old = (data[byte] >> shift) & 1;
    if dirty || old != on {
        data[byte] = (data[byte] & !(1 << shift)) | (on << shift);
        e.version = match prev {
            Some(p) => ctx.version_after(p),
            None => ctx.new_version(),
        };
        let argv: Vec<&[u8]> = args.iter().collect();
        ctx.propagate(e.version, &argv);
        ctx.notify(super::events::class::STRING, "setbit", args.get(1));
    }
    ctx.out.int(old as i64);
    Ok(())
}

fn getbit(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let off = bit_offset(ctx, args.get(2), 0)?;
    let mut l = ctx.open(key);
    let found = l.get_str(key)?;
    ctx.read_hit(key, found.is_some());
    let bit = match found {
        None => 0,
        Some(e) => str_of(&e.value).with_bytes(|b| {
            b.get((off >> 3) as usize)
                .map_or(0, |&c| (c >> (7 - (off & 7))) & 1)
        }),
    };
    ctx.out.int(bit as i64);
    Ok(())
}

/// Resolves a BITCOUNT/BITPOS range to inclusive bit positions within a
/// string of `len` bytes; None when empty. Indexes are bytes unless `bit`.
fn bit_range(start: i64, end: i64, len: usize, bit: bool) -> Option<(u64, u64)> {
    let total = if bit { len as i64 * 8 } else { len as i64 };
    let fix = |v: i64| if v < 0 { (total + v).max(0) } else { v };
    let (start, end) = (fix(start), fix(end).min(total - 1));
    if start > end || total == 0 {
        return None;
    }
    Some(if bit {
        (start as u64, end as u64)
    } else {
        (start as u64 * 8, end as u64 * 8 + 7)
    })
}

/// Bits of byte `i` inside the inclusive bit range [lo, hi], as a mask.
fn byte_mask(i: u64, lo: u64, hi: u64) -> u8 {
    let first = if i == lo >> 3 {
        0xFFu8 >> (lo & 7)
    } else {
        0xFF
    };
    let last = if i == hi >> 3 {
        0xFFu8 << (7 - (hi & 7))
    } else {
        0xFF
    };
    first & last
}

fn parse_unit(a: &[u8]) -> Result<bool, CmdError> {
    if eq_ic(a, "BIT") {
        Ok(true)
    } else if eq_ic(a, "BYTE") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

fn bitcount(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_str(key)? else {
        ctx.read_hit(key, false);
        ctx.out.int(0);
        return Ok(());
    };
    ctx.read_hit(key, true);
    let s = str_of(&e.value);
    let (start, end, bit) = match args.len() {
        2 => (0, -1, false),
        4 | 5 => {
            let (start, end) = (arg_i64(args.get(2))?, arg_i64(args.get(3))?);
            if start < 0 && end < 0 && start > end {
                ctx.out.int(0);
                return Ok(());
            }
            let bit = args.len() == 5 && parse_unit(args.get(4))?;
            (start, end, bit)
        }
        _ => return Err(CmdError::Syntax),
    };
    let n = s.with_bytes(|b| match bit_range(start, end, b.len(), bit) {
        None => 0,
        Some((lo, hi)) => count_bits(b, lo, hi),
    });
    ctx.out.int(n as i64);
    Ok(())
}

fn count_bits(b: &[u8], lo: u64, hi: u64) -> u64 {
    let (first, last) = ((lo >> 3) as usize, (hi >> 3) as usize);
    let edge = |i: usize| (b[i] & byte_mask(i as u64, lo, hi)).count_ones() as u64;
    if first == last {
        return edge(first);
    }
    let chunks = b[first + 1..last].chunks_exact(8);
    let rest: u64 = chunks
        .remainder()
        .iter()
        .map(|c| c.count_ones() as u64)
        .sum();
    let words: u64 = chunks
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")).count_ones() as u64)
        .sum();
    let (pre, post) = (edge(first), rest);
    pre + words + post + edge(last)
}

fn bitpos(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let want = match arg_i64(args.get(2))? {
        v @ (0 | 1) => v as u8,
        _ => return Err(CmdError::err("The bit argument must be 1 or 0.")),
    };
    let mut l = ctx.open(key);
    let Some(e) = l.get_str(key)? else {
        ctx.read_hit(key, false);
        ctx.out.int(if want == 1 { -1 } else { 0 });
        return Ok(());
    };
    ctx.read_hit(key, true);
    let s = str_of(&e.value);
    let (start, end, end_given, bit) = match args.len() {
        3 => (0, -1, false, false),
        4..=6 => {
            let start = arg_i64(args.get(3))?;
            let bit = args.len() == 6 && parse_unit(args.get(5))?;
            let end = if args.len() >= 5 {
                Some(arg_i64(args.get(4))?)
            } else {
                None
            };
            (start, end.unwrap_or(-1), end.is_some(), bit)
        }
        _ => return Err(CmdError::Syntax),
    };
    let pos = s.with_bytes(|b| match bit_range(start, end, b.len(), bit) {
        None => -1,
        Some((lo, hi)) => match find_bit(b, lo, hi, want) {
            Some(p) => p as i64,
            None if want == 0 && !end_given => hi as i64 + 1,
            None => -1,
        },
    });
    ctx.out.int(pos);
    Ok(())
}

/// The first bit equal to `want` in the inclusive bit range [lo, hi].
fn find_bit(b: &[u8], lo: u64, hi: u64, want: u8) -> Option<u64> {
    let skip = if want == 1 { 0x00 } else { 0xFF };
    let mut i = lo >> 3;
    while i <= hi >> 3 {
        let idx = i as usize;
        let mask = byte_mask(i, lo, hi);
        if mask == 0xFF && b[idx] == skip {
            // Jump over a run of uninteresting whole bytes.
            let run_end = ((hi >> 3) as usize).min(b.len() - 1);
            let n = b[idx..run_end].iter().take_while(|&&c| c == skip).count();
            i += n.max(1) as u64;
            continue;
        }
        let v = if want == 1 { b[idx] } else { !b[idx] } & mask;
        if v != 0 {
            return Some(i * 8 + v.leading_zeros() as u64);
        }
        i += 1;
    }
    None
}

#[derive(Clone, Copy, PartialEq)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

fn bitop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let name = args.get(1);
    let op = [
        ("AND", BitOp::And),
        ("OR", BitOp::Or),
        ("XOR", BitOp::Xor),
        ("NOT", BitOp::Not),
    ]
    .into_iter()
    .find(|(n, _)| eq_ic(name, n))
    .map(|(_, o)| o)
    .ok_or(CmdError::Syntax)?;
    if op == BitOp::Not && args.len() != 4 {
        return Err(CmdError::err(
            "BITOP NOT must be called with a single source key.",
        ));
    }
    let dest = args.get(2);
    let keys: Vec<&[u8]> = args.iter().skip(2).collect();
    let mut l = ctx.open_many(keys.iter().copied());
    let mut srcs: Vec<Vec<u8>> = Vec::with_capacity(keys.len() - 1);
    for &k in &keys[1..] {
        srcs.push(match l.get_str(k)? {
            Some(e) => str_of(&e.value).to_vec(),
            None => vec![],
        });
    }
    let res = bitop_compute(op, &srcs);
    let len = res.len();
    let prev = l.entry(dest).map(|e| e.version);
    let version = match prev {
        Some(p) => ctx.version_after(p),
        None => ctx.new_version(),
    };
    let wrote = if res.is_empty() {
        l.remove(dest).is_some()
    } else {
        let v = Value::Str(StrValue::raw(res));
        l.put(dest, v, 0, version);
        true
    };
    if wrote {
        ctx.propagate_args(version, &args);
        if len > 0 {
            ctx.notify(super::events::class::STRING, "set", dest)
        } else {
            ctx.notify(super::events::class::GENERIC, "del", dest)
        }
    }
    ctx.out.int(len as i64);
    Ok(())
}

fn bitop_compute(op: BitOp, srcs: &[Vec<u8>]) -> Vec<u8> {
    let maxlen = srcs.iter().map(Vec::len).max().unwrap_or(0);
    if maxlen == 0 {
        return vec![];
    }
    if op == BitOp::Not {
        return srcs[0].iter().map(|b| !b).collect();
    }
    let mut res = vec![0u8; maxlen];
    let at = |s: &Vec<u8>, i: usize| s.get(i).copied().unwrap_or(0);
    res[..srcs[0].len()].copy_from_slice(&srcs[0]);
    for s in &srcs[1..] {
        for (i, r) in res.iter_mut().enumerate() {
            match op {
                BitOp::And => *r &= at(s, i),
                BitOp::Or => *r |= at(s, i),
                _ => *r ^= at(s, i),
            }
        }
    }
    res
}

/// BITFIELD overflow behaviour.
#[derive(Clone, Copy, PartialEq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq)]
enum FieldOp {
    Get,
    Set(i64),
    Incr(i64),
}

struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

/// "i1".."i64" or "u1".."u63" (case-sensitive, as Redis).
fn field_type(a: &[u8]) -> Result<(bool, u32), CmdError> {
    let err = || {
        CmdError::err("Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.")
    };
    let signed = match a.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(err()),
    };
    match arg_i64(&a[1..]) {
        Ok(n) if n >= 1 && n <= if signed { 64 } else { 63 } => Ok((signed, n as u32)),
        _ => Err(err()),
    }
}

fn parse_bitfield(ctx: &Ctx, args: Args) -> Result<Vec<Field>, CmdError> {
    let mut ops = vec![];
    let mut overflow = Overflow::Wrap;
    let mut i = 2;
    while i < args.len() {
        let (a, rem) = (args.get(i), args.len() - i - 1);
        let kind = if eq_ic(a, "GET") && rem >= 2 {
            0
        } else if eq_ic(a, "SET") && rem >= 3 {
            1
        } else if eq_ic(a, "INCRBY") && rem >= 3 {
            2
        } else if eq_ic(a, "OVERFLOW") && rem >= 1 {
            let t = args.get(i + 1);
            overflow = [
                ("WRAP", Overflow::Wrap),
                ("SAT", Overflow::Sat),
                ("FAIL", Overflow::Fail),
            ]
            .into_iter()
            .find(|(n, _)| eq_ic(t, n))
            .map(|(_, o)| o)
            .ok_or_else(|| CmdError::err("Invalid OVERFLOW type specified"))?;
            i += 2;
            continue;
        } else {
            return Err(CmdError::Syntax);
        };
        let (signed, bits) = field_type(args.get(i + 1))?;
        let offset = bit_offset(ctx, args.get(i + 2), bits)?;
        let op = match kind {
            0 => FieldOp::Get,
            1 => FieldOp::Set(arg_i64(args.get(i + 3))?),
            _ => FieldOp::Incr(arg_i64(args.get(i + 3))?),
        };
        ops.push(Field {
            op,
            signed,
            bits,
            offset,
            overflow,
        });
        i += if kind == 0 { 3 } else { 4 };
    }
    Ok(ops)
}

fn bitfield(ctx: &mut Ctx, args: Args) -> CmdResult {
    bitfield_generic(ctx, args, false)
}

fn bitfield_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    bitfield_generic(ctx, args, true)
}

fn bitfield_generic(ctx: &mut Ctx, args: Args, ro: bool) -> CmdResult {
    let ops = parse_bitfield(ctx, args)?;
    let max_write = ops
        .iter()
        .filter(|f| f.op != FieldOp::Get)
        .map(|f| f.offset + f.bits as u64 - 1)
        .max();
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(max_write) = max_write else {
        let data = l.get_str(key)?.map(|e| str_of(&e.value).to_vec());
        let data = data.unwrap_or_default();
        ctx.out.array(ops.len());
        for f in &ops {
            ctx.out.int(read_field(&data, f));
        }
        return Ok(());
    };
    if ro {
        return Err(CmdError::err(
            "BITFIELD_RO only supports the GET subcommand",
        ));
    }
    let (e, prev, grown) = open_for_bits(&mut l, key, max_write)?;
    let data = str_of_mut(&mut e.value).make_raw();
    ctx.out.array(ops.len());
    // As Redis: each write that changed the value (or created or grew the
    // string) counts as a change in the dirty counter; none, no write. A
    // string created or grown is always written (and counts once), even
    // when every write failed its OVERFLOW FAIL: Redis then keeps the
    // padding unpropagated, which would leave replicas and active peers
    // with different bytes.
    let mut changes = 0;
    for f in &ops {
        match apply_field(data, f) {
            Some((v, changed)) => {
                ctx.out.int(v);
                changes += u64::from(grown || changed);
            }
            None => ctx.out.null(),
        }
    }
    if changes == 0 && !grown {
        return Ok(());
    }
    ctx.stats.add_dirty(changes.max(1) - 1);
    e.version = match prev {
        Some(p) => ctx.version_after(p),
        None => ctx.new_version(),
    };
    let argv: Vec<&[u8]> = args.iter().collect();
    ctx.propagate(e.version, &argv);
    ctx.notify(super::events::class::STRING, "setbit", args.get(1));
    Ok(())
}

/// Reads `bits` bits at bit `off` (missing bytes read as zero), MSB first.
fn get_bits(data: &[u8], off: u64, bits: u32) -> u64 {
    let mut v = 0u64;
    for i in 0..bits as u64 {
        let p = off + i;
        let byte = data.get((p >> 3) as usize).copied().unwrap_or(0);
        v = (v << 1) | ((byte >> (7 - (p & 7))) & 1) as u64;
    }
    v
}

fn set_bits(data: &mut [u8], off: u64, bits: u32, v: u64) {
    for i in 0..bits as u64 {
        let p = off + i;
        let bit = ((v >> (bits as u64 - 1 - i)) & 1) as u8;
        let (byte, shift) = ((p >> 3) as usize, 7 - (p & 7) as u8);
        data[byte] = (data[byte] & !(1 << shift)) | (bit << shift);
    }
}

/// The field's value as the reply integer (sign-extended if signed).
fn read_field(data: &[u8], f: &Field) -> i64 {
    let raw = get_bits(data, f.offset, f.bits);
    if f.signed && f.bits < 64 && raw >> (f.bits - 1) & 1 == 1 {
        (raw | (u64::MAX << f.bits)) as i64
    } else {
        raw as i64
    }
}

/// Executes a SET/INCRBY; returns the reply value, None on FAIL overflow.
fn apply_field(data: &mut [u8], f: &Field) -> Option<(i64, bool)> {
    let old = read_field(data, f);
    let (value, incr) = match f.op {
        FieldOp::Set(v) => (v, 0),
        FieldOp::Incr(by) => (old, by),
        FieldOp::Get => return Some((old, false)),
    };
    let checked = if f.signed {
        signed_overflow(value, incr, f.bits, f.overflow)
    } else {
        unsigned_overflow(value as u64, incr, f.bits, f.overflow).map(|v| v as i64)
    };
    let new = match checked {
        Some(_) if f.overflow == Overflow::Fail => return None,
        Some(limit) => limit,
        None => value.wrapping_add(incr),
    };
    set_bits(data, f.offset, f.bits, new as u64);
    let now = read_field(data, f);
    let reply = match f.op {
        FieldOp::Set(_) => old,
        _ => now,
    };
    Some((reply, now != old))
}

/// Redis's checkSignedBitfieldOverflow, including its wrapping arithmetic
/// (so a saturating SET of a far-out-of-range value lands where Redis's
/// does). Returns the value to store on overflow, None when in range.
fn signed_overflow(value: i64, incr: i64, bits: u32, ow: Overflow) -> Option<i64> {
    let max: i64 = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = (-max) - 1;
    let (maxincr, minincr) = (max.wrapping_sub(value), min.wrapping_sub(value));
    let wrap = || {
        let c = (value as u64).wrapping_add(incr as u64);
        if bits == 64 {
            return c as i64;
        }
        let mask = u64::MAX << bits;
        (if c >> (bits - 1) & 1 == 1 {
            c | mask
        } else {
            c & !mask
        }) as i64
    };
    let high =
        value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr);
    let low =
        value < min || (bits != 64 && incr < minincr) || (value < 0 && incr < 0 && incr < minincr);
    match (high, low, ow) {
        (false, false, _) => None,
        (_, _, Overflow::Wrap) => Some(wrap()),
        (true, _, _) => Some(max),
        (false, true, _) => Some(min),
    }
}

/// Redis's checkUnsignedBitfieldOverflow, with the same conventions.
fn unsigned_overflow(value: u64, incr: i64, bits: u32, ow: Overflow) -> Option<u64> {
    let max: u64 = (1u64 << bits) - 1;
    let maxincr = max.wrapping_sub(value) as i64;
    let minincr = value.wrapping_neg() as i64;
    let wrap = || value.wrapping_add(incr as u64) & max;
    let high = value > max || (incr > 0 && incr > maxincr);
    let low = incr < 0 && incr < minincr;
    match (high, low, ow) {
        (false, false, _) => None,
        (_, _, Overflow::Wrap) => Some(wrap()),
        (true, _, _) => Some(max),
        (false, true, _) => Some(0),
    }
}

/// BITFIELD only reads its key when every operation is a GET.
fn bitfield_key_flags(args: Args, _pos: usize) -> Option<&'static [&'static str]> {
    let writes = ["set", "incrby"];
    let write = args
        .iter()
        .skip(2)
        .any(|a| writes.iter().any(|w| eq_ic(a, w)));
    Some(if write {
        &["RW", "access", "update"]
    } else {
        &["RO", "access"]
    })
}
