//! Helpers shared by the collection families (hashes, sets, and later
//! sorted sets): the HSCAN/SSCAN/ZSCAN argument parser and reply, and the
//! random numbers of HRANDFIELD/SRANDMEMBER/SPOP (ZRANDMEMBER).
//!
//! Cursors. A compact collection (listpack, intset) is returned whole with
//! cursor 0, as Redis does. A big one is a `keyspace::ordtable::OrdTable`
//! whose cursor is a 64-bit element hash: the scan returns elements in hash
//! order, and the next cursor is the hash just after the last one returned.
//! Every element present for the whole scan is returned exactly once, however
//! the table grows or shrinks between calls (see `ordtable.rs`). A family
//! calls [`parse_scan`] before locking, collects the elements its value's
//! `scan` yields (filtering with [`ScanOpts::matches`]), then replies with
//! [`reply_scan`].
//!
//! Randomness. A per-thread xorshift64* generator, seeded once from the
//! clock, the thread and a stack address: no dependency, fast, and good
//! enough for picking elements (Redis uses its own non-cryptographic
//! random() too). Not for anything secret.

use std::cell::Cell;

use super::util::{arg_i64, eq_ic, glob_match};
use super::CmdError;
use crate::protocol::{Args, ReplyBuf};

/// Parsed `cursor [MATCH pattern] [COUNT count]`.
pub(crate) struct ScanOpts<'a> {
    pub cursor: u64,
    pub count: usize,
    pub pattern: Option<&'a [u8]>,
    /// SCAN's TYPE filter (only SCAN accepts it).
    pub type_name: Option<&'a [u8]>,
}

impl ScanOpts<'_> {
    /// Whether an element (a field, member) passes MATCH.
    pub(crate) fn matches(&self, e: &[u8]) -> bool {
        self.pattern.is_none_or(|p| glob_match(p, e, false))
    }
}

/// Parses a cursor as Redis's strtoul does (a leading '-' wraps around).
pub(crate) fn parse_cursor(a: &[u8]) -> Result<u64, CmdError> {
    let invalid = || CmdError::err("invalid cursor");
    let (neg, digits) = match a.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, a),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(invalid());
    }
    let v: u64 = std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(invalid)?;
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// Parses `HSCAN key cursor [MATCH p] [COUNT n]` (cursor at index 2).
pub(crate) fn parse_scan(args: Args<'_>) -> Result<ScanOpts<'_>, CmdError> {
    parse_scan_at(args, 2, false)
}

/// Parses a SCAN-family command whose cursor is `args[cursor_at]`, options
/// after it; TYPE is accepted only when `allow_type` (SCAN itself).
pub(crate) fn parse_scan_at(
    args: Args<'_>,
    cursor_at: usize,
    allow_type: bool,
) -> Result<ScanOpts<'_>, CmdError> {
    let mut o = ScanOpts {
        cursor: parse_cursor(args.get(cursor_at))?,
        count: 10,
        pattern: None,
        type_name: None,
    };
    let mut i = cursor_at + 1;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Err(CmdError::Syntax);
        }
        let (opt, val) = (args.get(i), args.get(i + 1));
        if eq_ic(opt, "COUNT") {
            let n = arg_i64(val)?;
            if n < 1 {
                return Err(CmdError::Syntax);
            }
            o.count = n as usize;
        } else if eq_ic(opt, "MATCH") {
            o.pattern = Some(val).filter(|p| *p != b"*");
        } else if allow_type && eq_ic(opt, "TYPE") {
            o.type_name = Some(val);
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    Ok(o)
}

/// Replies `[cursor, [elements...]]` (a flat array in both protocols).
pub(crate) fn reply_scan(out: &mut ReplyBuf, cursor: u64, items: &[Vec<u8>]) {
    out.array(2);
    out.bulk(cursor.to_string().as_bytes());
    out.array(items.len());
    for it in items {
        out.bulk(it);
    }
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let local = 0u8;
    let addr = &local as *const u8 as u64;
    (t ^ addr.rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15) | 1
}

/// A random u64 (xorshift64*).
pub(crate) fn rand_u64() -> u64 {
    RNG.with(|c| {
        let mut x = c.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// A random index below `n` (> 0).
pub(crate) fn rand_below(n: usize) -> usize {
    (rand_u64() % n as u64) as usize
}

/// `count` distinct indices below `n` (`count <= n`), in random order:
/// a partial Fisher-Yates shuffle when `count` is a good part of `n`,
/// rejection sampling otherwise.
pub(crate) fn distinct_indices(n: usize, count: usize) -> Vec<usize> {
    if count * 3 > n {
        let mut v: Vec<usize> = (0..n).collect();
        for i in 0..count {
            let j = i + rand_below(n - i);
            v.swap(i, j);
        }
        v.truncate(count);
        return v;
    }
    let mut seen = hashbrown::HashSet::with_capacity(count);
    let mut v = Vec::with_capacity(count);
    while v.len() < count {
        let i = rand_below(n);
        if seen.insert(i) {
            v.push(i);
        }
    }
    v
}
