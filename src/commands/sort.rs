//! SORT and SORT_RO (Redis's sort.c): sorts the elements of a list, set or
//! sorted set, numerically or (ALPHA) by bytes, optionally by the values of
//! other keys (BY pattern, `*` replaced by the element, `key->field` for a
//! hash field), returns them or other keys' values (GET pattern, `#` = the
//! element), with LIMIT, DESC, and STORE into a list.
//!
//! Locking: the source's elements are copied under its shard lock; the
//! BY/GET keys are then read one at a time (each under its own shard lock),
//! so a SORT ... BY/GET is not a snapshot of the other keys against
//! concurrent writers on other threads. Inside MULTI/EXEC it is: EXEC holds
//! every shard for a SORT (`multi.rs`), and those reads borrow the held
//! locks. STORE is propagated as `DEL dst` + `RPUSH dst elements...` (or
//! `DEL dst` alone for an empty result): the stored list, whatever the
//! source's iteration order, replays identically.

use super::keyspec::KeySpec;
use std::cmp::Ordering;

use super::events::class;
use super::strings::str_of;
use super::util::{arg_i64, eq_ic, parse_f64};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::list::ListValue;
use crate::keyspace::Value;
use crate::protocol::Args;

const CX: &str = "O(N+M*log(M)) where N is the number of elements in the list or set to sort, and M the number of returned elements. When the elements are not sorted, complexity is O(N).";

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "generic", acl = "set sortedset list"),
    cmd("sort", -2, WRITE | DENYOOM, sort, acl = "dangerous")
        .doc("1.0.0", "Sorts the elements in a list, a set, or a sorted set, optionally storing the result.")
        .complexity(CX)
        .keys(1, 1, 1)
        .keys_fn(sort_keys)
        .key_specs(&[
            KeySpec::at(1, &["RO", "access"]),
            KeySpec::unknown(&["RO", "access"])
                .notes("For the optional BY/GET keyword. It is marked 'unknown' because the key names derive from the content of the key we sort"),
            KeySpec::unknown(&["OW", "update"])
                .notes("For the optional STORE keyword. It is marked 'unknown' because the keyword can appear anywhere in the argument array"),
        ])
        .key_flags_fn(sort_key_flags),
    cmd("sort_ro", -2, READONLY, sort_ro, acl = "dangerous")
        .doc("7.0.0", "Returns the sorted elements of a list, a set, or a sorted set.")
        .complexity(CX)
        .keys(1, 1, 1)
        .keys_fn(sort_ro_keys)
        .key_specs(&[
            KeySpec::at(1, &["RO", "access"]),
            KeySpec::unknown(&["RO", "access"])
                .notes("For the optional BY/GET keyword. It is marked 'unknown' because the key names derive from the content of the key we sort"),
        ]),
};

/// The source key and, with STORE, the destination.
/// SORT reads its source and overwrites its STORE destination.
fn sort_key_flags(_args: Args, pos: usize) -> Option<&'static [&'static str]> {
    Some(if pos == 1 {
        &["RO", "access"]
    } else {
        &["OW", "update"]
    })
}

fn sort_keys(args: Args) -> Vec<usize> {
    let mut keys = vec![1];
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        if eq_ic(a, "limit") {
            i += 3;
            continue;
        }
        if (eq_ic(a, "by") || eq_ic(a, "get")) && i + 1 < args.len() {
            i += 2;
            continue;
        }
        if eq_ic(a, "store") && i + 1 < args.len() {
            keys.truncate(1);
            keys.push(i + 1);
            i += 2;
            continue;
        }
        i += 1;
    }
    keys
}

/// The source key (a key function, as Redis: BY/GET patterns make SORT_RO
/// movablekeys too).
fn sort_ro_keys(_args: Args) -> Vec<usize> {
    vec![1]
}

/// SORT's options, parsed before any data is touched.
struct SortOpts<'a> {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    by: Option<&'a [u8]>,
    dont_sort: bool,
    gets: Vec<&'a [u8]>,
    store: Option<&'a [u8]>,
}

/// Whether the client's user may read every key (SORT's BY and GET
/// patterns name keys no ACL check saw; Redis refuses them otherwise).
fn full_key_access(ctx: &Ctx, args: Args) -> bool {
    let Some(u) = ctx.client.user.as_ref().filter(|u| !u.free) else {
        return true;
    };
    let t = &ctx.core.commands;
    let name = if eq_ic(args.get(0), "sort_ro") {
        &b"sort_ro"[..]
    } else {
        b"sort"
    };
    t.lookup(name)
        .is_some_and(|id| u.all_keys_allowed(t, id, args, crate::core::acl::user::READ))
}

fn acl_denied(option: &str) -> CmdError {
    CmdError::err(format!(
        "{option} option of SORT denied due to insufficient ACL permissions."
    ))
}

fn parse_opts(
    args: Args<'_>,
    read_only: bool,
    full_access: bool,
) -> Result<SortOpts<'_>, CmdError> {
    let mut o = SortOpts {
        desc: false,
        alpha: false,
        limit: None,
        by: None,
        dont_sort: false,
        gets: vec![],
        store: None,
    };
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        let left = args.len() - i - 1;
        if eq_ic(a, "asc") {
            o.desc = false;
        } else if eq_ic(a, "desc") {
            o.desc = true;
        } else if eq_ic(a, "alpha") {
            o.alpha = true;
        } else if eq_ic(a, "limit") && left >= 2 {
            o.limit = Some((arg_i64(args.get(i + 1))?, arg_i64(args.get(i + 2))?));
            i += 2;
        } else if eq_ic(a, "store") && left >= 1 && !read_only {
            o.store = Some(args.get(i + 1));
            i += 1;
        } else if eq_ic(a, "by") && left >= 1 {
            if !full_access {
                return Err(acl_denied("BY"));
            }
            let p = args.get(i + 1);
            // A pattern without '*' means "do not sort".
            o.dont_sort = !p.contains(&b'*');
            o.by = Some(p);
            i += 1;
        } else if eq_ic(a, "get") && left >= 1 {
            if !full_access {
                return Err(acl_denied("GET"));
            }
            o.gets.push(args.get(i + 1));
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok(o)
}

fn sort(ctx: &mut Ctx, args: Args) -> CmdResult {
    let opts = parse_opts(args, false, full_key_access(ctx, args))?;
    sort_generic(ctx, args.get(1), opts)
}

fn sort_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    let opts = parse_opts(args, true, full_key_access(ctx, args))?;
    sort_generic(ctx, args.get(1), opts)
}

/// The source's elements (in the order Redis reads them), or WRONGTYPE.
fn load_source(ctx: &mut Ctx, key: &[u8]) -> Result<(Vec<Vec<u8>>, bool), CmdError> {
    let mut l = ctx.open(key);
    Ok(match l.entry(key).map(|e| &e.value) {
        None => (vec![], false),
        Some(Value::List(v)) => (v.iter().map(<[u8]>::to_vec).collect(), false),
        Some(Value::Set(v)) => (v.iter().map(|m| m.to_vec()).collect(), true),
        Some(Value::ZSet(v)) => (v.iter().map(|(m, _)| m.to_vec()).collect(), false),
        Some(_) => return Err(CmdError::WrongType),
    })
}

fn sort_generic(ctx: &mut Ctx, key: &[u8], mut o: SortOpts) -> CmdResult {
    let (mut elems, is_set) = load_source(ctx, key)?;
    // An unsorted set would store (or replicate) in hash order: sort it
    // by bytes instead, as Redis does (also for a script, whose result
    // must not depend on the set's order).
    if o.dont_sort && is_set && (o.store.is_some() || ctx.client.in_script) {
        o.dont_sort = false;
        o.alpha = true;
        o.by = None;
    }
    if !o.dont_sort {
        sort_elements(ctx, &mut elems, &o)?;
    } else if o.desc {
        elems.reverse();
    }
    let (start, end) = limit_range(o.limit, elems.len());
    let picked = if start <= end {
        &elems[start..=end]
    } else {
        &[][..]
    };
    let mut rows: Vec<Option<Vec<u8>>> = vec![];
    for e in picked {
        if o.gets.is_empty() {
            rows.push(Some(e.clone()));
        }
        for g in &o.gets {
            rows.push(lookup_by_pattern(ctx, g, e));
        }
    }
    match o.store {
        Some(dst) => store(ctx, dst, rows),
        None => {
            ctx.out.array(rows.len());
            for r in &rows {
                match r {
                    Some(v) => ctx.out.bulk(v),
                    None => ctx.out.null(),
                }
            }
            Ok(())
        }
    }
}

/// Redis's LIMIT arithmetic: the inclusive index range to output
/// (`start > end` when nothing is).
fn limit_range(limit: Option<(i64, i64)>, len: usize) -> (usize, usize) {
    let len = len as i64;
    let (mut start, mut end) = match limit {
        None => (0, len - 1),
        Some((off, count)) => {
            let s = off.max(0);
            (
                s,
                if count < 0 {
                    len - 1
                } else {
                    s.saturating_add(count) - 1
                },
            )
        }
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    if start < 0 || end < start {
        return (1, 0);
    }
    (start as usize, end as usize)
}

/// Sorts `elems` by their weights (the element itself, or the BY key's
/// value), numerically or by bytes; ties are broken by the element's bytes
/// so the order is deterministic.
fn sort_elements(ctx: &mut Ctx, elems: &mut Vec<Vec<u8>>, o: &SortOpts) -> CmdResult {
    enum W {
        Num(f64),
        Bytes(Option<Vec<u8>>),
    }
    let mut weighted = Vec::with_capacity(elems.len());
    for e in elems.drain(..) {
        let by = match o.by {
            Some(p) => lookup_by_pattern(ctx, p, &e),
            None => Some(e.clone()),
        };
        let w = if o.alpha {
            W::Bytes(by)
        } else {
            let n = match by {
                None => 0.0,
                Some(b) => parse_f64(&b).ok_or(CmdError::err(
                    "One or more scores can't be converted into double",
                ))?,
            };
            W::Num(n)
        };
        weighted.push((w, e));
    }
    weighted.sort_by(|(a, ea), (b, eb)| {
        let c = match (a, b) {
            (W::Num(x), W::Num(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
            (W::Bytes(x), W::Bytes(y)) => x.cmp(y),
            _ => Ordering::Equal,
        };
        let c = c.then_with(|| ea.cmp(eb));
        if o.desc {
            c.reverse()
        } else {
            c
        }
    });
    elems.extend(weighted.into_iter().map(|(_, e)| e));
    Ok(())
}

/// Redis's lookupKeyByPattern: `#` is the element; otherwise the first `*`
/// is replaced by it, and `key->field` reads a hash field. A pattern
/// without `*`, a missing key, or a key of another type gives None.
fn lookup_by_pattern(ctx: &mut Ctx, pattern: &[u8], elem: &[u8]) -> Option<Vec<u8>> {
    if pattern == b"#" {
        return Some(elem.to_vec());
    }
    let star = pattern.iter().position(|&b| b == b'*')?;
    let arrow = pattern[star + 1..]
        .windows(2)
        .position(|w| w == b"->")
        .map(|p| star + 1 + p)
        .filter(|&p| p + 2 < pattern.len());
    let key_end = arrow.unwrap_or(pattern.len());
    let key = [&pattern[..star], elem, &pattern[star + 1..key_end]].concat();
    let mut l = ctx.open(&key);
    let e = l.entry(&key)?;
    match (arrow, &e.value) {
        (None, Value::Str(_)) => Some(str_of(&e.value).to_vec()),
        (Some(a), Value::Hash(h)) => h.get(&pattern[a + 2..]).map(<[u8]>::to_vec),
        _ => None,
    }
}

/// SORT ... STORE: replaces `dst` with a list of the rows (nil GETs as
/// empty strings), or deletes it for an empty result; replies the length.
fn store(ctx: &mut Ctx, dst: &[u8], rows: Vec<Option<Vec<u8>>>) -> CmdResult {
    let fill = match ctx
        .core
        .hot
        .encoding
        .list_max_listpack_size
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        0 => 1,
        f => f.max(-5),
    };
    let mut l = ctx.open(dst);
    let old = l.entry(dst).map(|e| e.version);
    let version = match old {
        Some(v) => ctx.version_after(v),
        None => ctx.new_version(),
    };
    let n = rows.len();
    if n == 0 {
        if l.remove(dst).is_some() {
            ctx.notify(class::GENERIC, "del", dst);
            ctx.propagate(version, &[b"DEL", dst]);
        }
        ctx.out.int(0);
        return Ok(());
    }
    let mut list = ListValue::new();
    for r in &rows {
        list.push_back(fill, r.as_deref().unwrap_or(b""));
    }
    l.put(dst, Value::List(Box::new(list)), 0, version);
    ctx.notify(class::LIST, "sortstore", dst);
    ctx.signal_ready(ctx.db(), dst);
    // The stored list itself rather than the SORT (which Redis sends):
    // the source and the BY/GET keys were read under other locks, so a
    // replica re-running it could read them otherwise. Replacing a key is
    // DEL then RPUSH, which go as one unit (MULTI/EXEC).
    let mut rpush: Vec<&[u8]> = vec![b"RPUSH", dst];
    rpush.extend(rows.iter().map(|r| r.as_deref().unwrap_or(b"")));
    if old.is_some() {
        ctx.propagate_unit(version, &[vec![b"DEL", dst], rpush]);
    } else {
        ctx.propagate(version, &rpush);
    }
    ctx.out.int(n as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::limit_range;

    #[test]
    fn limit_arithmetic_matches_redis() {
        assert_eq!(limit_range(None, 5), (0, 4));
        assert_eq!(limit_range(Some((1, 2)), 5), (1, 2));
        assert_eq!(limit_range(Some((-3, 2)), 5), (0, 1));
        assert_eq!(limit_range(Some((3, -1)), 5), (3, 4));
        let empty = |r: (usize, usize)| r.0 > r.1;
        assert!(empty(limit_range(Some((10, 2)), 5)));
        assert!(empty(limit_range(Some((0, 0)), 5)));
        assert!(empty(limit_range(None, 0)));
    }
}
