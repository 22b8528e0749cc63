//! Lists (Redis's t_list.c): LPUSH ... LMPOP and the blocking pops.
//!
//! Every handler parses its arguments first, then locks its key(s), works on
//! the [`ListValue`] (see `keyspace/list.rs` for the chunked layout), replies,
//! and reports the write once, propagated as Redis propagates it: pushes,
//! LPOP/RPOP (with or without count), LMOVE and RPOPLPUSH as given; LMPOP as
//! `LPOP|RPOP key n` with the number actually popped; the blocking commands
//! as their non-blocking forms (BLPOP → `LPOP key`, BLMOVE → LMOVE, ...).
//! A write that empties a list removes the key (and notifies "del").
//! Pushes call `signal_ready` so that clients blocked on the key wake up.
//!
//! Blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP) stay
//! synchronous: when nothing can be served and the client may block, the
//! handler stores a [`BlockRequest`] in the client state and writes no reply;
//! the connection task waits (see `core/blocking.rs`) and re-runs it.

use super::keyspec::KeySpec;
use std::sync::atomic::Ordering::Relaxed;

use super::access::Locked;
use super::blocking;
use super::events::class;
use super::util::{arg_i64, eq_ic};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::list::ListValue;
use crate::keyspace::merge::context::fingerprint;
use crate::keyspace::merge::fact;
use crate::keyspace::merge::lists::{Edit, EndOp};
use crate::keyspace::Value;
use crate::protocol::{parse_i64, Args};

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "list", acl = "list"),
    cmd("lpush", -3, WRITE | DENYOOM | FAST, lpush)
        .doc("1.0.0", "Prepends one or more elements to a list. Creates the key if it doesn't exist.")
        .complexity("O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "insert"])]),
    cmd("rpush", -3, WRITE | DENYOOM | FAST, rpush)
        .doc("1.0.0", "Appends one or more elements to a list. Creates the key if it doesn't exist.")
        .complexity("O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "insert"])]),
    cmd("lpushx", -3, WRITE | DENYOOM | FAST, lpushx)
        .doc("2.2.0", "Prepends one or more elements to a list only when the list exists.")
        .complexity("O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "insert"])]),
    cmd("rpushx", -3, WRITE | DENYOOM | FAST, rpushx)
        .doc("2.2.0", "Appends an element to a list only when the list exists.")
        .complexity("O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "insert"])]),
    cmd("lpop", -2, WRITE | FAST, lpop)
        .doc("1.0.0", "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.")
        .complexity("O(N) where N is the number of elements returned")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"])]),
    cmd("rpop", -2, WRITE | FAST, rpop)
        .doc("1.0.0", "Returns and removes the last elements of a list. Deletes the list if the last element was popped.")
        .complexity("O(N) where N is the number of elements returned")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"])]),
    cmd("llen", 2, READONLY | FAST, llen)
        .doc("1.0.0", "Returns the length of a list.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"])]),
    cmd("lrange", 4, READONLY, lrange)
        .doc("1.0.0", "Returns a range of elements from a list.")
        .complexity("O(S+N) where S is the distance of start offset from HEAD for small lists, from nearest end (HEAD or TAIL) for large lists; and N is the number of elements in the specified range.")
        .keys(1, 1, 1),
    cmd("lindex", 3, READONLY, lindex)
        .doc("1.0.0", "Returns an element from a list by its index.")
        .complexity("O(N) where N is the number of elements to traverse to get to the element at index. This makes asking for the first or the last element of the list O(1).")
        .keys(1, 1, 1),
    cmd("lset", 4, WRITE | DENYOOM, lset)
        .doc("1.0.0", "Sets the value of an element in a list by its index.")
        .complexity("O(N) where N is the length of the list. Setting either the first or the last element of the list is O(1).")
        .keys(1, 1, 1),
    cmd("linsert", 5, WRITE | DENYOOM, linsert)
        .doc("2.2.0", "Inserts an element before or after another element in a list.")
        .complexity("O(N) where N is the number of elements to traverse before seeing the value pivot. This means that inserting somewhere on the left end on the list (head) can be considered O(1) and inserting somewhere on the right end (tail) is O(N).")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "insert"])]),
    cmd("lrem", 4, WRITE, lrem)
        .doc("1.0.0", "Removes elements from a list. Deletes the list if the last element was removed.")
        .complexity("O(N+M) where N is the length of the list and M is the number of elements removed.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])]),
    cmd("ltrim", 4, WRITE, ltrim)
        .doc("1.0.0", "Removes elements from both ends a list. Deletes the list if all elements were trimmed.")
        .complexity("O(N) where N is the number of elements to be removed by the operation.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "delete"])]),
    cmd("lpos", -3, READONLY, lpos)
        .doc("6.0.6", "Returns the index of matching elements in a list.")
        .complexity("O(N) where N is the number of elements in the list, for the average case. When searching for elements near the head or the tail of the list, or when the MAXLEN option is provided, the command may run in constant time.")
        .keys(1, 1, 1),
    cmd("rpoplpush", 3, WRITE | DENYOOM, rpoplpush)
        .doc("1.2.0", "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped.")
        .keys(1, 2, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "delete"]),
            KeySpec::at(2, &["RW", "insert"]),
        ]),
    cmd("lmove", 5, WRITE | DENYOOM, lmove)
        .doc("6.2.0", "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved.")
        .keys(1, 2, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "delete"]),
            KeySpec::at(2, &["RW", "insert"]),
        ]),
    cmd("lmpop", -4, WRITE, lmpop)
        .doc("7.0.0", "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped.")
        .complexity("O(N+M) where N is the number of provided keys and M is the number of elements returned.")
        .keys_fn(lmpop_keys)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"]).keynum(0, 1, 1)]),
    cmd("blpop", -3, WRITE | NOSCRIPT | BLOCKING, blpop)
        .doc("2.0.0", "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.")
        .complexity("O(N) where N is the number of provided keys.")
        .keys(1, -2, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"]).range(-2, 1, 0)]),
    cmd("brpop", -3, WRITE | NOSCRIPT | BLOCKING, brpop)
        .doc("2.0.0", "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.")
        .complexity("O(N) where N is the number of provided keys.")
        .keys(1, -2, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "delete"]).range(-2, 1, 0)]),
    cmd("brpoplpush", 4, WRITE | DENYOOM | NOSCRIPT | BLOCKING, brpoplpush)
        .doc("2.2.0", "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped.")
        .keys(1, 2, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "delete"]),
            KeySpec::at(2, &["RW", "insert"]),
        ]),
    cmd("blmove", 6, WRITE | DENYOOM | NOSCRIPT | BLOCKING, blmove)
        .doc("6.2.0", "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved.")
        .keys(1, 2, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "delete"]),
            KeySpec::at(2, &["RW", "insert"]),
        ]),
    cmd("blmpop", -5, WRITE | BLOCKING, blmpop)
        .doc("7.0.0", "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped.")
        .complexity("O(N+M) where N is the number of provided keys and M is the number of elements returned.")
        .keys_fn(blmpop_keys)
        .key_specs(&[KeySpec::at(2, &["RW", "access", "delete"]).keynum(0, 1, 1)]),
};

/// Keys of `LMPOP numkeys key...`.
fn lmpop_keys(args: Args) -> Vec<usize> {
    numkeys_positions(args, 1)
}

/// Keys of `BLMPOP timeout numkeys key...`.
fn blmpop_keys(args: Args) -> Vec<usize> {
    numkeys_positions(args, 2)
}

fn numkeys_positions(args: Args, at: usize) -> Vec<usize> {
    match parse_i64(args.get(at)) {
        Some(n) if n > 0 && (n as usize) < args.len() - at => (at + 1..=at + n as usize).collect(),
        _ => vec![],
    }
}

/// The list inside a value already checked to be a list.
fn list_mut(v: &mut Value) -> &mut ListValue {
    match v {
        Value::List(l) => l,
        _ => unreachable!("type checked by get_list"),
    }
}

/// `list-max-listpack-size` as a chunk fill (0 behaves as 1, below -5 as -5).
fn fill(ctx: &Ctx) -> i64 {
    match ctx.core.hot.encoding.list_max_listpack_size.load(Relaxed) {
        0 => 1,
        f => f.max(-5),
    }
}

/// A count that must be >= 0, with Redis's getPositiveLong error `msg`.
fn arg_nonneg(a: &[u8], msg: &str) -> Result<i64, CmdError> {
    match parse_i64(a) {
        Some(n) if n >= 0 => Ok(n),
        _ => Err(CmdError::err(msg)),
    }
}

/// A count that must be >= 1, with error `msg`.
fn arg_positive(a: &[u8], msg: &str) -> Result<i64, CmdError> {
    match parse_i64(a) {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(CmdError::err(msg)),
    }
}

/// LEFT or RIGHT: true for LEFT (the head).
fn arg_side(a: &[u8]) -> Result<bool, CmdError> {
    if eq_ic(a, "left") {
        Ok(true)
    } else if eq_ic(a, "right") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

fn pop_event(left: bool) -> &'static str {
    if left {
        "lpop"
    } else {
        "rpop"
    }
}

fn push_event(left: bool) -> &'static str {
    if left {
        "lpush"
    } else {
        "rpush"
    }
}

/// Resolves a Redis range (negative from the tail) against `len`:
/// `Some((start, count))`, or None when empty.
fn resolve_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let mut s = if start < 0 {
        len.saturating_add(start)
    } else {
        start
    };
    let mut e = if end < 0 {
        len.saturating_add(end)
    } else {
        end
    };
    if s < 0 {
        s = 0;
    }
    if s > e || s >= len {
        return None;
    }
    if e >= len {
        e = len - 1;
    }
    Some((s as usize, (e - s + 1) as usize))
}

// ------------------------------------------------------------------ pushes

fn lpush(ctx: &mut Ctx, args: Args) -> CmdResult {
    push_generic(ctx, args, true, false)
}

fn rpush(ctx: &mut Ctx, args: Args) -> CmdResult {
    push_generic(ctx, args, false, false)
}

fn lpushx(ctx: &mut Ctx, args: Args) -> CmdResult {
    push_generic(ctx, args, true, true)
}

fn rpushx(ctx: &mut Ctx, args: Args) -> CmdResult {
    push_generic(ctx, args, false, true)
}

/// LPUSH/RPUSH/LPUSHX/RPUSHX; `xx`: only onto an existing list.
fn push_generic(ctx: &mut Ctx, args: Args, left: bool, xx: bool) -> CmdResult {
    let key = args.get(1);
    let fill = fill(ctx);
    let mut l = ctx.open(key);
    let (len, version) = match l.get_list(key)? {
        None if xx => {
            ctx.out.int(0);
            return Ok(());
        }
        None => {
            let mut list = ListValue::new();
            for v in args.iter().skip(2) {
                list.push(fill, left, v);
            }
            let len = list.len();
            let version = ctx.new_version();
            l.put(key, Value::List(Box::new(list)), 0, version);
            (len, version)
        }
        Some(e) => {
            let list = list_mut(&mut e.value);
            for v in args.iter().skip(2) {
                list.push(fill, left, v);
            }
            e.version = ctx.version_after(e.version);
            (list.len(), e.version)
        }
    };
    let n = args.len() - 2;
    ctx.note_list_ends(&mut l, key, version, &[EndOp::Push { left, n }]);
    ctx.out.int(len as i64);
    ctx.notify(class::LIST, push_event(left), key);
    ctx.signal_ready(ctx.db(), key);
    ctx.propagate_args(version, &args);
    Ok(())
}

// ------------------------------------------------------------------ pops

fn lpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    pop_generic(ctx, args, true)
}

fn rpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    pop_generic(ctx, args, false)
}

/// LPOP/RPOP key [count].
fn pop_generic(ctx: &mut Ctx, args: Args, left: bool) -> CmdResult {
    if args.len() > 3 {
        return Err(CmdError::WrongArity(pop_event(left).into()));
    }
    let count = match args.len() {
        3 => Some(arg_nonneg(
            args.get(2),
            "value is out of range, must be positive",
        )?),
        _ => None,
    };
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_list(key)? else {
        match count {
            Some(_) => ctx.out.null_array(),
            None => ctx.out.null(),
        }
        return Ok(());
    };
    if count == Some(0) {
        ctx.out.array(0);
        return Ok(());
    }
    let list = list_mut(&mut e.value);
    let n = match count {
        None => {
            list.pop_with(left, |v| ctx.out.bulk(v))
                .expect("stored lists are never empty");
            1
        }
        Some(n) => {
            let k = (n as usize).min(list.len());
            ctx.out.array(k);
            for _ in 0..k {
                list.pop_with(left, |v| ctx.out.bulk(v)).expect("k <= len");
            }
            k
        }
    };
    let version = ctx.version_after(e.version);
    e.version = version;
    ctx.note_list_ends(&mut l, key, version, &[EndOp::Pop { left, n }]);
    finish_pop(ctx, &mut l, key, left);
    ctx.propagate_args(version, &args);
    Ok(())
}

/// After elements were popped from `key`: the pop event, and the key's
/// removal (with "del") when the list is now empty.
fn finish_pop(ctx: &mut Ctx, l: &mut Locked, key: &[u8], left: bool) {
    ctx.notify(class::LIST, pop_event(left), key);
    ctx.remove_if_empty(l, key);
}

/// Pops up to `count` elements from the first non-empty list among `keys`
/// (all locked in `l`), replying `[key, [elements]]`, and propagates
/// `LPOP|RPOP key n`. Returns false, with no reply, when all are empty.
fn mpop_from(
    ctx: &mut Ctx,
    l: &mut Locked,
    keys: &[&[u8]],
    left: bool,
    count: usize,
) -> Result<bool, CmdError> {
    for &key in keys {
        let Some(e) = l.get_list(key)? else {
            continue;
        };
        let list = list_mut(&mut e.value);
        let k = count.min(list.len());
        ctx.out.array(2);
        ctx.out.bulk(key);
        ctx.out.array(k);
        for _ in 0..k {
            list.pop_with(left, |v| ctx.out.bulk(v)).expect("k <= len");
        }
        let version = ctx.version_after(e.version);
        e.version = version;
        ctx.note_list_ends(l, key, version, &[EndOp::Pop { left, n: k }]);
        finish_pop(ctx, l, key, left);
        let n = k.to_string();
        let cmd: &[u8] = if left { b"LPOP" } else { b"RPOP" };
        ctx.propagate(version, &[cmd, key, n.as_bytes()]);
        return Ok(true);
    }
    Ok(false)
}

/// The parsed `numkeys key... LEFT|RIGHT [COUNT n]` of LMPOP/BLMPOP.
struct MpopArgs<'a> {
    keys: Vec<&'a [u8]>,
    left: bool,
    count: usize,
}

fn parse_mpop(args: Args<'_>, numkeys_at: usize) -> Result<MpopArgs<'_>, CmdError> {
    let numkeys = arg_positive(args.get(numkeys_at), "numkeys should be greater than 0")?;
    let where_at = (numkeys_at as u64).saturating_add(numkeys as u64 + 1);
    if where_at >= args.len() as u64 {
        return Err(CmdError::Syntax);
    }
    let where_at = where_at as usize;
    let left = arg_side(args.get(where_at))?;
    let mut count = None;
    let mut j = where_at + 1;
    while j < args.len() {
        if count.is_none() && eq_ic(args.get(j), "count") && j + 1 < args.len() {
            count = Some(arg_positive(
                args.get(j + 1),
                "count should be greater than 0",
            )?);
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    Ok(MpopArgs {
        keys: (numkeys_at + 1..where_at).map(|i| args.get(i)).collect(),
        left,
        count: count.unwrap_or(1) as usize,
    })
}

fn lmpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let p = parse_mpop(args, 1)?;
    let mut l = ctx.open_many(p.keys.iter().copied());
    if !mpop_from(ctx, &mut l, &p.keys, p.left, p.count)? {
        ctx.out.null_array();
    }
    Ok(())
}

// ------------------------------------------------------------------ reads

fn llen(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let n = l.get_list(key)?.map(|e| list_mut(&mut e.value).len());
    ctx.read_hit(key, n.is_some());
    ctx.out.int(n.unwrap_or(0) as i64);
    Ok(())
}

fn lrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    let start = arg_i64(args.get(2))?;
    let end = arg_i64(args.get(3))?;
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_list(key)? else {
        ctx.read_hit(key, false);
        ctx.out.array(0);
        return Ok(());
    };
    ctx.read_hit(key, true);
    let list = list_mut(&mut e.value);
    match resolve_range(start, end, list.len()) {
        None => ctx.out.array(0),
        Some((s, n)) => {
            ctx.out.array(n);
            for v in list.iter_from(s).take(n) {
                ctx.out.bulk(v);
            }
        }
    }
    Ok(())
}

fn lindex(ctx: &mut Ctx, args: Args) -> CmdResult {
    let index = arg_i64(args.get(2))?;
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_list(key)? else {
        ctx.read_hit(key, false);
        ctx.out.null();
        return Ok(());
    };
    ctx.read_hit(key, true);
    let list = list_mut(&mut e.value);
    let i = if index < 0 {
        list.len() as i64 + index
    } else {
        index
    };
    match (i >= 0).then(|| list.get(i as usize)).flatten() {
        Some(v) => ctx.out.bulk(v),
        None => ctx.out.null(),
    }
    Ok(())
}

/// LPOS's options.
struct LposOpts {
    rank: i64,
    /// None: COUNT not given (reply a single index); Some(0): all.
    count: Option<usize>,
    maxlen: usize,
}

fn parse_lpos(args: Args) -> Result<LposOpts, CmdError> {
    let mut o = LposOpts {
        rank: 1,
        count: None,
        maxlen: 0,
    };
    let mut j = 3;
    while j < args.len() {
        let opt = args.get(j);
        let more = j + 1 < args.len();
        if eq_ic(opt, "rank") && more {
            let r = arg_i64(args.get(j + 1))?;
            if r == i64::MIN {
                return Err(CmdError::err("value is out of range, value must between -9223372036854775807 and 9223372036854775807"));
            }
            if r == 0 {
                return Err(CmdError::err("RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list"));
            }
            o.rank = r;
        } else if eq_ic(opt, "count") && more {
            o.count = Some(arg_nonneg(args.get(j + 1), "COUNT can't be negative")? as usize);
        } else if eq_ic(opt, "maxlen") && more {
            o.maxlen = arg_nonneg(args.get(j + 1), "MAXLEN can't be negative")? as usize;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 2;
    }
    Ok(o)
}

fn lpos(ctx: &mut Ctx, args: Args) -> CmdResult {
    let o = parse_lpos(args)?;
    let (key, ele) = (args.get(1), args.get(2));
    let mut l = ctx.open(key);
    let Some(e) = l.get_list(key)? else {
        ctx.read_hit(key, false);
        match o.count {
            Some(_) => ctx.out.array(0),
            None => ctx.out.null(),
        }
        return Ok(());
    };
    ctx.read_hit(key, true);
    let list = list_mut(&mut e.value);
    let len = list.len();
    let scan = if o.maxlen == 0 {
        len
    } else {
        o.maxlen.min(len)
    };
    let skip = o.rank.unsigned_abs() - 1;
    let want = match o.count {
        None => 1,
        Some(0) => usize::MAX,
        Some(c) => c,
    };
    let matches = |it: &mut dyn Iterator<Item = (usize, &[u8])>| -> Vec<usize> {
        it.take(scan)
            .filter(|(_, v)| *v == ele)
            .skip(skip.min(usize::MAX as u64) as usize)
            .take(want)
            .map(|(i, _)| i)
            .collect()
    };
    let found = if o.rank > 0 {
        matches(&mut list.iter().enumerate())
    } else {
        matches(&mut list.iter().rev().enumerate().map(|(i, v)| (len - 1 - i, v)))
    };
    match o.count {
        Some(_) => {
            ctx.out.array(found.len());
            for i in found {
                ctx.out.int(i as i64);
            }
        }
        None => match found.first() {
            Some(&i) => ctx.out.int(i as i64),
            None => ctx.out.null(),
        },
    }
    Ok(())
}

// ------------------------------------------------------------------ edits

fn lset(ctx: &mut Ctx, args: Args) -> CmdResult {
    let index = arg_i64(args.get(2));
    let (key, v) = (args.get(1), args.get(3));
    let fill = fill(ctx);
    let mut l = ctx.open(key);
    let e = l.get_list(key)?.ok_or(CmdError::NoSuchKey)?;
    let index = index?;
    let list = list_mut(&mut e.value);
    let i = if index < 0 {
        list.len() as i64 + index
    } else {
        index
    };
    let old = list.get(i.max(0) as usize).map(fingerprint);
    if i < 0 || !list.set(fill, i as usize, v) {
        return Err(CmdError::err("index out of range"));
    }
    e.version = ctx.version_after(e.version);
    let version = e.version;
    if let Some(old) = old {
        let (index, new) = (i as usize, fingerprint(v));
        ctx.note_list_edit(&mut l, key, version, &Edit::Set { index, old, new });
    }
    ctx.out.ok();
    ctx.notify(class::LIST, "lset", key);
    ctx.propagate_args(version, &args);
    Ok(())
}

fn linsert(ctx: &mut Ctx, args: Args) -> CmdResult {
    let after = if eq_ic(args.get(2), "after") {
        true
    } else if eq_ic(args.get(2), "before") {
        false
    } else {
        return Err(CmdError::Syntax);
    };
    let (key, pivot, v) = (args.get(1), args.get(3), args.get(4));
    let fill = fill(ctx);
    let mut l = ctx.open(key);
    let Some(e) = l.get_list(key)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let list = list_mut(&mut e.value);
    let Some(p) = list.position(pivot) else {
        ctx.out.int(-1);
        return Ok(());
    };
    let index = p + after as usize;
    list.insert(fill, index, v);
    let len = list.len();
    e.version = ctx.version_after(e.version);
    let version = e.version;
    let fp = fingerprint(v);
    ctx.note_list_edit(&mut l, key, version, &Edit::Insert { index, fp });
    ctx.out.int(len as i64);
    ctx.notify(class::LIST, "linsert", key);
    ctx.propagate_args(version, &args);
    Ok(())
}

fn lrem(ctx: &mut Ctx, args: Args) -> CmdResult {
    let count = arg_i64(args.get(2))?;
    let (key, v) = (args.get(1), args.get(3));
    let mut l = ctx.open(key);
    let Some(e) = l.get_list(key)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let list = list_mut(&mut e.value);
    let limit = count.unsigned_abs().min(usize::MAX as u64) as usize;
    // Which elements go, for the write's fact (active replication only).
    let indices = match ctx.core.active {
        true => matching_indices(list, v, limit, count < 0),
        false => Vec::new(),
    };
    let removed = list.remove_matching(v, limit, count < 0);
    ctx.out.int(removed as i64);
    if removed == 0 {
        return Ok(());
    }
    let version = ctx.version_after(e.version);
    e.version = version;
    if indices.len() == removed {
        let edit = Edit::Remove {
            indices: &indices,
            fp: fingerprint(v),
        };
        ctx.note_list_edit(&mut l, key, version, &edit);
    }
    ctx.notify(class::LIST, "lrem", key);
    ctx.remove_if_empty(&mut l, key);
    ctx.propagate_args(version, &args);
    Ok(())
}

/// The indices (ascending) of the elements equal to `v` that LREM removes:
/// the first `limit` of them (0: all) from the head, or from the tail.
fn matching_indices(list: &ListValue, v: &[u8], limit: usize, from_tail: bool) -> Vec<usize> {
    let mut at: Vec<usize> = (list.iter().enumerate())
        .filter(|(_, x)| *x == v)
        .map(|(i, _)| i)
        .collect();
    let n = if limit == 0 {
        at.len()
    } else {
        limit.min(at.len())
    };
    match from_tail {
        false => at.truncate(n),
        true => at = at.split_off(at.len() - n),
    }
    at
}

fn ltrim(ctx: &mut Ctx, args: Args) -> CmdResult {
    let start = arg_i64(args.get(2))?;
    let end = arg_i64(args.get(3))?;
    let key = args.get(1);
    let mut l = ctx.open(key);
    let Some(e) = l.get_list(key)? else {
        ctx.out.ok();
        return Ok(());
    };
    let list = list_mut(&mut e.value);
    let len = list.len();
    let (front, back) = match resolve_range(start, end, len) {
        None => (len, 0),
        Some((s, n)) => (s, len - s - n),
    };
    list.drop_front(front);
    list.drop_back(back);
    let version = ctx.version_after(e.version);
    if front + back > 0 {
        e.version = version;
    }
    if front + back > 0 {
        let ops = [
            EndOp::Pop {
                left: true,
                n: front,
            },
            EndOp::Pop {
                left: false,
                n: back,
            },
        ];
        ctx.note_list_ends(&mut l, key, version, &ops);
    }
    ctx.out.ok();
    ctx.notify(class::LIST, "ltrim", key);
    ctx.remove_if_empty(&mut l, key);
    if front + back > 0 {
        ctx.propagate_args(version, &args);
    }
    Ok(())
}

// ------------------------------------------------------------------ moves

fn rpoplpush(ctx: &mut Ctx, args: Args) -> CmdResult {
    let argv: Vec<&[u8]> = args.iter().collect();
    if !move_generic(ctx, args.get(1), args.get(2), false, true, &argv)? {
        ctx.out.null();
    }
    Ok(())
}

fn lmove(ctx: &mut Ctx, args: Args) -> CmdResult {
    let from = arg_side(args.get(3))?;
    let to = arg_side(args.get(4))?;
    let argv: Vec<&[u8]> = args.iter().collect();
    if !move_generic(ctx, args.get(1), args.get(2), from, to, &argv)? {
        ctx.out.null();
    }
    Ok(())
}

/// Pops from `src` (head if `from_left`) and pushes onto `dst` (head if
/// `to_left`), replying with the element, and propagating `argv`. Returns
/// false, with no reply, when `src` does not exist.
fn move_generic(
    ctx: &mut Ctx,
    src: &[u8],
    dst: &[u8],
    from_left: bool,
    to_left: bool,
    argv: &[&[u8]],
) -> Result<bool, CmdError> {
    let fill = fill(ctx);
    let mut l = ctx.open_many([src, dst]);
    let Some(se) = l.get_list(src)? else {
        return Ok(false);
    };
    let src_version = se.version;
    let dst_version = l.get_list(dst)?.map(|e| e.version);
    let version = ctx.version_after(src_version.max(dst_version.unwrap_or(0)));
    let se = l.get_list(src)?.expect("checked above");
    let v = list_mut(&mut se.value)
        .pop(from_left)
        .expect("stored lists are never empty");
    se.version = version;
    match l.get_list(dst)? {
        Some(de) => {
            list_mut(&mut de.value).push(fill, to_left, &v);
            de.version = version;
        }
        None => {
            let mut list = ListValue::new();
            list.push(fill, to_left, &v);
            l.put(dst, Value::List(Box::new(list)), 0, version);
        }
    }
    let pop = EndOp::Pop {
        left: from_left,
        n: 1,
    };
    let push = EndOp::Push {
        left: to_left,
        n: 1,
    };
    // Between two keys on an active node: the pop's record on the source
    // and the push's on the destination, each with its fact (DECISIONS
    // 235); a rotation (one key) goes as the command, with a fact of its
    // pop and push (DECISIONS 237).
    let as_facts = ctx.core.active && fact::LIST_MOVE_FACTS && src != dst;
    if src == dst {
        ctx.note_list_ends(&mut l, src, version, &[pop, push]);
    } else {
        ctx.note_list_ends(&mut l, src, version, &[pop]);
        if as_facts {
            let name: &[u8] = if from_left { b"LPOP" } else { b"RPOP" };
            ctx.propagate(version, &[name, src]);
        }
        ctx.note_list_ends(&mut l, dst, version, &[push]);
    }
    ctx.out.bulk(&v);
    ctx.notify(class::LIST, push_event(to_left), dst);
    ctx.signal_ready(ctx.db(), dst);
    finish_pop(ctx, &mut l, src, from_left);
    if as_facts {
        let name: &[u8] = if to_left { b"LPUSH" } else { b"RPUSH" };
        ctx.propagate(version, &[name, dst, &v]);
    } else {
        ctx.propagate(version, argv);
    }
    Ok(true)
}

// ------------------------------------------------------------------ blocking

fn blpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    bpop_generic(ctx, args, true)
}

fn brpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    bpop_generic(ctx, args, false)
}

/// BLPOP/BRPOP key... timeout: replies `[key, element]`, propagated as
/// `LPOP|RPOP key`.
fn bpop_generic(ctx: &mut Ctx, args: Args, left: bool) -> CmdResult {
    let deadline = blocking::parse_timeout(ctx.now_ms, args.get(args.len() - 1))?;
    let keys: Vec<&[u8]> = (1..args.len() - 1).map(|i| args.get(i)).collect();
    let retrying = ctx.client.block.retry.is_some();
    let mut l = ctx.open_many(keys.iter().copied());
    for &key in &keys {
        let e = match l.get_list(key) {
            Ok(Some(e)) => e,
            Ok(None) => continue,
            // Woken for a key that is no longer a list: keep waiting, as
            // Redis serves a blocked client only from a key of its type.
            Err(_) if retrying => continue,
            Err(err) => return Err(err),
        };
        let v = list_mut(&mut e.value)
            .pop(left)
            .expect("stored lists are never empty");
        let version = ctx.version_after(e.version);
        e.version = version;
        ctx.note_list_ends(&mut l, key, version, &[EndOp::Pop { left, n: 1 }]);
        ctx.out.array(2);
        ctx.out.bulk(key);
        ctx.out.bulk(&v);
        finish_pop(ctx, &mut l, key, left);
        let cmd: &[u8] = if left { b"LPOP" } else { b"RPOP" };
        ctx.propagate(version, &[cmd, key]);
        return Ok(());
    }
    blocking::block_or_null(ctx, args, &keys, deadline);
    drop(l);
    Ok(())
}

fn blmpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let deadline = blocking::parse_timeout(ctx.now_ms, args.get(1))?;
    let p = parse_mpop(args, 2)?;
    let retrying = ctx.client.block.retry.is_some();
    let mut l = ctx.open_many(p.keys.iter().copied());
    match mpop_from(ctx, &mut l, &p.keys, p.left, p.count) {
        Ok(true) => return Ok(()),
        Ok(false) => {}
        // Woken for a key that is no longer a list: keep waiting (BLPOP).
        Err(CmdError::WrongType) if retrying => {}
        Err(err) => return Err(err),
    }
    blocking::block_or_null(ctx, args, &p.keys, deadline);
    drop(l);
    Ok(())
}

fn brpoplpush(ctx: &mut Ctx, args: Args) -> CmdResult {
    let deadline = blocking::parse_timeout(ctx.now_ms, args.get(3))?;
    let (src, dst) = (args.get(1), args.get(2));
    bmove_generic(ctx, args, false, true, &[b"RPOPLPUSH", src, dst], deadline)
}

fn blmove(ctx: &mut Ctx, args: Args) -> CmdResult {
    let from = arg_side(args.get(3))?;
    let to = arg_side(args.get(4))?;
    let deadline = blocking::parse_timeout(ctx.now_ms, args.get(5))?;
    let argv = [
        b"LMOVE" as &[u8],
        args.get(1),
        args.get(2),
        args.get(3),
        args.get(4),
    ];
    bmove_generic(ctx, args, from, to, &argv, deadline)
}

/// BLMOVE/BRPOPLPUSH: moves at once if the source has elements, else
/// blocks on the source (or replies null when not allowed to block).
fn bmove_generic(
    ctx: &mut Ctx,
    args: Args,
    from_left: bool,
    to_left: bool,
    argv: &[&[u8]],
    deadline: u64,
) -> CmdResult {
    let (src, dst) = (args.get(1), args.get(2));
    loop {
        if move_generic(ctx, src, dst, from_left, to_left, argv)? {
            return Ok(());
        }
        if !blocking::may_block(ctx) {
            // As LMOVE on a missing source: a null bulk.
            ctx.out.null();
            return Ok(());
        }
        // Re-checked under the lock the registration is made under, so a
        // push after move_generic released it cannot be missed.
        let mut l = ctx.open(src);
        if l.get_list(src)?.is_none() {
            blocking::block_on(ctx, args, vec![src.to_vec()], deadline);
            return Ok(());
        }
    }
}
