//! Keyspace commands (Redis's db.c and object.c): SWAPDB FLUSHDB FLUSHALL
//! DBSIZE KEYS SCAN RANDOMKEY DEL UNLINK EXISTS TYPE RENAME RENAMENX MOVE COPY
//! TOUCH OBJECT. SELECT lives in `connection.rs`.
//!
//! Locking. Single-database multi-key commands lock their keys' shards through
//! `ctx.open_many`, which makes them atomic. MOVE and COPY ... DB touch two
//! databases: they lock the two shards in the global order (database, then
//! shard) with `Keyspace::lock_pair`. SWAPDB locks every shard of both
//! databases, lower index first; FLUSHALL every shard of every database. The
//! write effect is always emitted while the locks are held, so the effect
//! stream orders it correctly against concurrent writes.
//!
//! SCAN. A shard's hash table reorders itself when it grows, so a position in
//! it would not survive a resize. The cursor is instead built on the fixed
//! shard array and on the keys' hashes, which never change:
//!
//! ```text
//!   cursor = part << 13 | level << 8 | shard
//! ```
//!
//! On arriving at a shard (`part == 0`), SCAN picks a `level` so that each of
//! the shard's `2^level` parts holds about COUNT keys; part `p` is the set of
//! keys whose hash bits 40.. equal `p` modulo `2^level`. Each part is read
//! whole under the shard lock, and the level stays fixed (it is in the cursor)
//! until the shard is done, so the parts of a shard cover every key exactly
//! once however the table resizes in between: a key present for the whole
//! scan is returned exactly once. A shard has at most 64 parts, since reading
//! one costs a pass over the shard. One call reads parts until it has COUNT keys
//! or has examined about 10 x COUNT entries (as Redis bounds empty buckets).
//!
//! Propagation. DEL and UNLINK propagate only the keys that existed (no effect
//! if none did): the replayed command then does exactly what the original did,
//! and deterministically so. RENAME and RENAMENX propagate as RENAME; COPY
//! always with REPLACE (it is only propagated when it copied); MOVE, SWAPDB,
//! FLUSHDB and FLUSHALL as given (without ASYNC/SYNC). A write gives every key
//! it creates one version, the one its effect carries.

use std::sync::atomic::Ordering::Relaxed;

use super::access::{lru_clock, Locked};
use super::collscan::{parse_scan_at, rand_u64, ScanOpts};
use super::keyspec::KeySpec;
use super::util::{arg_i64, eq_ic, glob_match};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::core::Core;
use crate::keyspace::{Entry, Key, Shard, ShardGuard, StrValue, Value, SHARDS};
use crate::protocol::Args;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "generic", acl = "keyspace"),
    cmd("swapdb", 3, WRITE | FAST, swapdb, acl = "dangerous")
        .group("server")
        .doc("4.0.0", "Swaps two Redis databases."),
    cmd("flushdb", -1, WRITE, flushdb, acl = "dangerous")
        .group("server")
        .doc("1.0.0", "Remove all keys from the current database.")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    cmd("flushall", -1, WRITE, flushall, acl = "dangerous")
        .group("server")
        .doc("1.0.0", "Removes all keys from all databases.")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    cmd("dbsize", 1, READONLY | FAST, dbsize)
        .group("server")
        .doc("1.0.0", "Returns the number of keys in the database.")
        .tips(&["request_policy:all_shards", "response_policy:agg_sum"]),
    cmd("keys", 2, READONLY, keys, acl = "dangerous")
        .doc("1.0.0", "Returns all key names that match a pattern.")
        .complexity("O(N)")
        .tips(&["request_policy:all_shards", "nondeterministic_output_order"]),
    cmd("scan", -2, READONLY, scan)
        .doc("2.8.0", "Iterates over the key names in the database.")
        .complexity("O(1) for every call. O(N) for a complete iteration.")
        .tips(&["nondeterministic_output", "request_policy:special"]),
    cmd("randomkey", 1, READONLY, randomkey)
        .doc("1.0.0", "Returns a random key name from the database.")
        .tips(&["request_policy:all_shards", "nondeterministic_output"]),
    cmd("del", -2, WRITE, del)
        .doc("1.0.0", "Deletes one or more keys.")
        .complexity("O(N)")
        .keys(1, -1, 1)
        .key_specs(&[KeySpec::at(1, &["RM", "delete"]).range(-1, 1, 0)])
        .tips(&["request_policy:multi_shard", "response_policy:agg_sum"]),
    cmd("unlink", -2, WRITE | FAST, unlink)
        .doc("4.0.0", "Asynchronously deletes one or more keys.")
        .complexity("O(1) for each key removed regardless of its size.")
        .keys(1, -1, 1)
        .key_specs(&[KeySpec::at(1, &["RM", "delete"]).range(-1, 1, 0)])
        .tips(&["request_policy:multi_shard", "response_policy:agg_sum"]),
    cmd("exists", -2, READONLY | FAST, exists)
        .doc("1.0.0", "Determines whether one or more keys exist.")
        .complexity("O(N)")
        .keys(1, -1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"]).range(-1, 1, 0)])
        .tips(&["request_policy:multi_shard", "response_policy:agg_sum"]),
    cmd("type", 2, READONLY | FAST, type_cmd)
        .doc("1.0.0", "Determines the type of value stored at a key.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"])]),
    cmd("rename", 3, WRITE, rename)
        .doc("1.0.0", "Renames a key and overwrites the destination.")
        .keys(1, 2, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "delete"]),
            KeySpec::at(2, &["OW", "update"]),
        ]),
    cmd("renamenx", 3, WRITE | FAST, renamenx)
        .doc("1.0.0", "Renames a key only when the target key name doesn't exist.")
        .keys(1, 2, 1)
        .key_specs(&[
            KeySpec::at(1, &["RW", "access", "delete"]),
            KeySpec::at(2, &["OW", "insert"]),
        ]),
    cmd("move", 3, WRITE | FAST, move_cmd)
        .doc("1.0.0", "Moves a key to another database.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "access", "update"])]),
    cmd("copy", -3, WRITE | DENYOOM, copy)
        .doc("6.2.0", "Copies the value of a key to a new key.")
        .complexity("O(N) worst case for collections, where N is the number of nested items.")
        .keys(1, 2, 1)
        .key_specs(&[KeySpec::at(1, &["RO", "access"]), KeySpec::at(2, &["OW", "update"])]),
    // KeyDB's (issue 28 item 3).
    cmd("keydb.mexists", -2, READONLY | FAST, keydb_mexists)
        .doc("6.0.0", "Returns whether each of the keys exists.")
        .complexity("O(N)")
        .keys(1, -1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"]).range(-1, 1, 0)]),
    cmd("touch", -2, READONLY | FAST, touch)
        .doc("3.2.1", "Returns the number of existing keys out of those specified after updating the time they were last accessed.")
        .complexity("O(N)")
        .keys(1, -1, 1)
        .key_specs(&[KeySpec::at(1, &["RO"]).range(-1, 1, 0)])
        .tips(&["request_policy:multi_shard", "response_policy:agg_sum"]),
    container("object", -2, object_parent)
        .doc("2.2.3", "A container for object introspection commands.")
        .subs(OBJECT_SUBS),
};

static OBJECT_SUBS: &[Command] = crate::commands::command_table! {
    family(group = "generic", acl = "keyspace"),
    cmd("encoding", 3, READONLY, object_encoding)
        .doc("2.2.3", "Returns the internal encoding of a Redis object.")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RO"])])
        .tips(&["nondeterministic_output"]),
    // KeyDB's: seconds since the key was last written (its version's stamp).
    cmd("lastmodified", 3, READONLY, object_lastmodified)
        .doc("6.0.0", "Returns the seconds since a key was last modified.")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RO"])])
        .tips(&["nondeterministic_output"]),
    cmd("freq", 3, READONLY, object_freq)
        .doc("4.0.0", "Returns the logarithmic access frequency counter of a Redis object.")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RO"])])
        .tips(&["nondeterministic_output"]),
    cmd("idletime", 3, READONLY, object_idletime)
        .doc("2.2.3", "Returns the time since the last access to a Redis object.")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RO"])])
        .tips(&["nondeterministic_output"]),
    cmd("refcount", 3, READONLY, object_refcount)
        .doc("2.2.3", "Returns the reference count of a value of a key.")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RO"])])
        .tips(&["nondeterministic_output"]),
    cmd("help", 2, LOADING | STALE, object_help)
        .doc("6.2.0", "Returns helpful text about the different subcommands."),
};

fn out_of_range() -> CmdError {
    CmdError::err("DB index is out of range")
}

fn same_object() -> CmdError {
    CmdError::err("source and destination objects are the same")
}

/// A database index argument (MOVE, COPY ... DB).
fn db_arg(ctx: &Ctx, a: &[u8]) -> Result<usize, CmdError> {
    let n = arg_i64(a)?;
    if n < 0 || n as usize >= ctx.core.keyspace.num_dbs() {
        return Err(out_of_range());
    }
    Ok(n as usize)
}

/// Opens keys without refreshing their access time (Redis's LOOKUP_NOTOUCH).
fn open_no_touch<'a, 'k>(ctx: &mut Ctx<'a>, keys: &[&'k [u8]]) -> Locked<'a, 'k> {
    let prev = ctx.client.no_touch;
    ctx.client.no_touch = true;
    let l = ctx.open_many(keys.iter().copied());
    ctx.client.no_touch = prev;
    l
}

fn arg_keys(args: Args<'_>, from: usize) -> Vec<&[u8]> {
    args.iter().skip(from).collect()
}

// ---------------------------------------------------------------- SWAPDB

fn swapdb(ctx: &mut Ctx, args: Args) -> CmdResult {
    refuse_if_active(ctx, "SWAPDB")?;
    let a = arg_i64(args.get(1)).map_err(|_| CmdError::err("invalid first DB index"))?;
    let b = arg_i64(args.get(2)).map_err(|_| CmdError::err("invalid second DB index"))?;
    let n = ctx.core.keyspace.num_dbs() as i64;
    if !(0..n).contains(&a) || !(0..n).contains(&b) {
        return Err(out_of_range());
    }
    let (lo, hi) = (a.min(b) as usize, a.max(b) as usize);
    if lo != hi {
        let ks = &ctx.core.keyspace;
        let mut ga = ks.db(lo).lock_all();
        let mut gb = ks.db(hi).lock_all();
        for (x, y) in ga.iter_mut().zip(gb.iter_mut()) {
            std::mem::swap(&mut **x, &mut **y);
        }
        let v = ctx.new_version();
        ctx.propagate(v, &[b"SWAPDB", args.get(1), args.get(2)]);
        ctx.core.blocking.signal_db(lo);
        ctx.core.blocking.signal_db(hi);
        // A writable replica's remembered keys are in the other db now.
        ctx.core.replica_keys.clear();
    }
    ctx.out.ok();
    Ok(())
}

// ---------------------------------------------------------------- FLUSHDB / FLUSHALL

/// Parses `[ASYNC|SYNC]`; true means free the data on a background thread.
fn parse_flush(ctx: &Ctx, args: Args) -> Result<bool, CmdError> {
    match args.len() {
        1 => Ok(ctx.core.hot.lazyfree_user_flush.load(Relaxed)),
        2 if eq_ic(args.get(1), "ASYNC") => Ok(true),
        2 if eq_ic(args.get(1), "SYNC") => Ok(false),
        _ => Err(CmdError::Syntax),
    }
}

/// Frees flushed shards, on the lazyfree thread when `lazy`.
fn free_shards(ctx: &Ctx, shards: Vec<Shard>, lazy: bool) {
    if lazy {
        ctx.core.lazyfree.free_shards(shards);
    }
}

fn take_shards(guards: &mut [ShardGuard<'_>], into: &mut Vec<Shard>) {
    for g in guards.iter_mut() {
        if !g.is_empty() || g.volatile_len() != 0 {
            into.push(g.take_all());
        }
    }
}

/// Refuses a command that has no convergent meaning under active
/// replication (docs/ACTIVE-ACTIVE-DESIGN.md, "Tombstones").
fn refuse_if_active(ctx: &Ctx, name: &str) -> Result<(), CmdError> {
    if ctx.core.active && ctx.replay_version.is_none() {
        return Err(CmdError::Msg(format!(
            "ERR {name} is not supported with active replication"
        )));
    }
    Ok(())
}

/// FLUSHDB / FLUSHALL under active replication: one stamp, after every
/// version this node has issued or seen (the floor moves to it), and a
/// per-database tombstone in every shard (`Shard::flush_older_than`).
fn flush_active(ctx: &mut Ctx, dbs: std::ops::Range<usize>, name: &[u8]) {
    use std::sync::atomic::Ordering::Relaxed;
    let stamp = match ctx.replay_version {
        Some(v) => v,
        None => {
            let next_ms = crate::keyspace::hlc::make_stamp(ctx.now_ms + 1, 0, 0);
            ctx.active_stamp_after(next_ms)
        }
    };
    ctx.core.stamp_floor.fetch_max(stamp, Relaxed);
    let ks = &ctx.core.keyspace;
    for db in dbs {
        for mut g in ks.db(db).lock_all() {
            g.flush_older_than(&ks.hasher, stamp);
        }
    }
    ctx.propagate(stamp, &[name]);
}

fn flushdb(ctx: &mut Ctx, args: Args) -> CmdResult {
    let lazy = parse_flush(ctx, args)?;
    if ctx.core.active {
        let db = ctx.db();
        flush_active(ctx, db..db + 1, b"FLUSHDB");
        ctx.out.ok();
        return Ok(());
    }
    let mut taken = vec![];
    {
        let mut g = ctx.core.keyspace.db(ctx.db()).lock_all();
        take_shards(&mut g, &mut taken);
        let v = ctx.new_version();
        ctx.propagate(v, &[b"FLUSHDB"]);
    }
    // Blocked XREADGROUPs learn their stream is gone (Redis's
    // scanDatabaseForDeletedStreams); other waiters block again.
    ctx.core.blocking.signal_db(ctx.db());
    free_shards(ctx, taken, lazy);
    ctx.out.ok();
    Ok(())
}

fn flushall(ctx: &mut Ctx, args: Args) -> CmdResult {
    let lazy = parse_flush(ctx, args)?;
    ctx.admin.abort_bgsave();
    if ctx.core.active {
        flush_active(ctx, 0..ctx.core.keyspace.num_dbs(), b"FLUSHALL");
        ctx.out.ok();
        return Ok(());
    }
    let mut taken = vec![];
    {
        let mut all = ctx.core.keyspace.lock_everything();
        for g in all.iter_mut() {
            take_shards(g, &mut taken);
        }
        let v = ctx.new_version();
        ctx.propagate(v, &[b"FLUSHALL"]);
    }
    // As Redis's flushSlaveKeysWithExpireList.
    ctx.core.replica_keys.clear();
    for db in 0..ctx.core.keyspace.num_dbs() {
        ctx.core.blocking.signal_db(db);
    }
    free_shards(ctx, taken, lazy);
    ctx.out.ok();
    Ok(())
}

// ---------------------------------------------------------------- DBSIZE / KEYS / RANDOMKEY

fn dbsize(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let n = ctx.core.keyspace.db(ctx.db()).len();
    ctx.out.int(n as i64);
    Ok(())
}

fn keys(ctx: &mut Ctx, args: Args) -> CmdResult {
    let pattern = args.get(1);
    let all = pattern == b"*";
    let now = ctx.now_ms;
    let db = ctx.core.keyspace.db(ctx.db());
    let mut found: Vec<Key> = vec![];
    for i in 0..SHARDS {
        let g = db.lock(i);
        for e in g.iter() {
            if !e.is_expired(now) && (all || glob_match(pattern, &e.key, false)) {
                found.push(e.key.clone());
            }
        }
    }
    ctx.out.array(found.len());
    for k in &found {
        ctx.out.bulk(k);
    }
    Ok(())
}

fn randomkey(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let now = ctx.now_ms;
    let db = ctx.core.keyspace.db(ctx.db());
    // Uniform over keys, not shards: pick the i-th key of the database by
    // the shards' sizes (picking a shard first would favour the keys of a
    // shard that follows empty ones). Expired keys met are deleted, as
    // Redis's lazy expiry does (each propagated as its own DEL).
    let mut expired: Vec<Key> = vec![];
    for _ in 0..8 {
        expire_keys(ctx, &mut expired);
        let sizes: Vec<usize> = (0..SHARDS).map(|i| db.lock(i).len()).collect();
        let total: usize = sizes.iter().sum();
        if total == 0 {
            break;
        }
        let mut n = rand_u64() as usize % total;
        let shard = sizes
            .iter()
            .position(|&len| {
                let here = n < len;
                if !here {
                    n -= len;
                }
                here
            })
            .expect("n below the total");
        let g = db.lock(shard);
        // The shard may have shrunk since it was measured: take any key.
        if g.is_empty() {
            continue;
        }
        let e = g.nth(n % g.len()).expect("index below len");
        if !e.is_expired(now) {
            ctx.out.bulk(&e.key);
            return Ok(());
        }
        expired.push(e.key.clone());
    }
    expire_keys(ctx, &mut expired);
    // Mostly expired keys: any live one (deleting up to 128 expired keys
    // met on the way), else nil.
    for i in 0..SHARDS {
        let g = db.lock(i);
        let mut live = None;
        for e in g.iter() {
            if !e.is_expired(now) {
                live = Some(e.key.clone());
                break;
            }
            if expired.len() < 128 {
                expired.push(e.key.clone());
            }
        }
        drop(g);
        expire_keys(ctx, &mut expired);
        if let Some(k) = live {
            ctx.out.bulk(&k);
            return Ok(());
        }
    }
    ctx.out.null();
    Ok(())
}

// ---------------------------------------------------------------- SCAN

const LEVEL_SHIFT: u32 = 8;
const PART_SHIFT: u32 = 13;
/// At most 64 parts per shard: reading a part costs a pass over its shard,
/// so this bounds a full scan to 64 passes over the data however small the
/// COUNT (a large shard then gives more than COUNT keys per call, which
/// COUNT, a hint, allows).
const MAX_LEVEL: u32 = 6;
/// Hash bits above the shard bits (32..40) choose a key's part.
const PART_HASH_SHIFT: u32 = 40;

/// A decoded SCAN cursor (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cursor {
    shard: usize,
    level: u32,
    part: u64,
}

impl Cursor {
    fn decode(c: u64) -> Cursor {
        Cursor {
            shard: (c as usize) & (SHARDS - 1),
            level: ((c >> LEVEL_SHIFT) & 0x1F) as u32,
            part: c >> PART_SHIFT,
        }
    }

    fn encode(self) -> u64 {
        self.part << PART_SHIFT | (self.level as u64) << LEVEL_SHIFT | self.shard as u64
    }

    /// The cursor after this part, or None when the database is done.
    fn next(self) -> Option<Cursor> {
        if self.part + 1 < (1u64 << self.level) {
            return Some(Cursor {
                part: self.part + 1,
                ..self
            });
        }
        (self.shard + 1 < SHARDS).then_some(Cursor {
            shard: self.shard + 1,
            level: 0,
            part: 0,
        })
    }
}

/// The level that splits `len` keys into parts of about `target` keys.
fn choose_level(len: usize, target: usize) -> u32 {
    let parts = len.div_ceil(target.max(1)).max(1);
    parts.next_power_of_two().trailing_zeros().min(MAX_LEVEL)
}

fn scan(ctx: &mut Ctx, args: Args) -> CmdResult {
    let o = parse_scan_at(args, 1, true)?;
    let c = o.cursor;
    let mut found: Vec<Key> = vec![];
    let Some(mut cur) = start_cursor(c) else {
        reply_scan(ctx, 0, &found);
        return Ok(());
    };
    let budget = o.count.saturating_mul(10).max(100);
    let mut examined = 0usize;
    let mut expired: Vec<Key> = vec![];
    let next = loop {
        examined += scan_part(ctx, &mut cur, &o, &mut found, &mut expired);
        expire_keys(ctx, &mut expired);
        match cur.next() {
            None => break 0,
            Some(n) => cur = n,
        }
        if found.len() >= o.count || examined >= budget {
            break cur.encode();
        }
    };
    reply_scan(ctx, next, &found);
    Ok(())
}

/// Where a scan resumes from cursor `c`; a part number beyond its level's
/// range (a cursor we never returned) resumes at the next shard.
fn start_cursor(c: u64) -> Option<Cursor> {
    let cur = Cursor::decode(c);
    if cur.level > MAX_LEVEL {
        return None;
    }
    let parts = 1u64 << cur.level;
    if cur.part >= parts {
        return Cursor {
            part: parts - 1,
            ..cur
        }
        .next();
    }
    Some(cur)
}

/// Deletes (and propagates as DEL, one record each, as Redis's lazy
/// expiry does) the keys a read found expired, once its shard lock is gone.
fn expire_keys(ctx: &mut Ctx, keys: &mut Vec<Key>) {
    for k in keys.drain(..) {
        drop(ctx.open(&k));
    }
}

/// Collects the live keys of one part of a shard, and its expired ones in
/// `expired`; returns the entries examined (an empty shard costs next to
/// nothing, so an empty or nearly empty database is scanned in one call).
fn scan_part(
    ctx: &Ctx,
    cur: &mut Cursor,
    o: &ScanOpts,
    found: &mut Vec<Key>,
    expired: &mut Vec<Key>,
) -> usize {
    let ks = &ctx.core.keyspace;
    let now = ctx.now_ms;
    let g = ks.db(ctx.db()).lock(cur.shard);
    if cur.part == 0 {
        cur.level = choose_level(g.len(), o.count.max(16));
    }
    let mask = (1u64 << cur.level) - 1;
    for e in g.iter() {
        if mask != 0 && (ks.hasher.hash(&e.key) >> PART_HASH_SHIFT) & mask != cur.part {
            continue;
        }
        if e.is_expired(now) {
            expired.push(e.key.clone());
            continue;
        }
        if let Some(t) = o.type_name {
            if !eq_ic(t, e.value.type_name()) {
                continue;
            }
        }
        if let Some(p) = o.pattern {
            if !glob_match(p, &e.key, false) {
                continue;
            }
        }
        found.push(e.key.clone());
    }
    g.len()
}

fn reply_scan(ctx: &mut Ctx, next: u64, keys: &[Key]) {
    ctx.out.array(2);
    ctx.out.bulk(next.to_string().as_bytes());
    ctx.out.array(keys.len());
    for k in keys {
        ctx.out.bulk(k);
    }
}

// ---------------------------------------------------------------- DEL / UNLINK / EXISTS / TOUCH / TYPE

fn del(ctx: &mut Ctx, args: Args) -> CmdResult {
    let lazy = ctx.core.hot.lazyfree_user_del.load(Relaxed);
    del_generic(ctx, args, b"DEL", lazy)
}

/// DEL whose big values are freed on the lazyfree thread.
fn unlink(ctx: &mut Ctx, args: Args) -> CmdResult {
    del_generic(ctx, args, b"UNLINK", true)
}

fn del_generic(ctx: &mut Ctx, args: Args, name: &'static [u8], lazy: bool) -> CmdResult {
    let keys = arg_keys(args, 1);
    let mut l = ctx.open_many(keys.iter().copied());
    let mut removed: Vec<&[u8]> = vec![name];
    for k in &keys {
        if let Some(old) = l.remove(k) {
            if lazy {
                ctx.core.lazyfree.free_entry(old);
            }
            removed.push(k);
            ctx.notify(super::events::class::GENERIC, "del", k);
        }
    }
    let n = removed.len() - 1;
    if n > 0 {
        let v = ctx.new_version();
        propagate_delete_facts(ctx, &mut l, v, &mut removed);
        if removed.len() > 1 {
            ctx.propagate(v, &removed);
        }
    }
    drop(l);
    ctx.out.int(n as i64);
    Ok(())
}

/// On an active node, each key of `removed` (after the command's name)
/// whose delete carries the state it left goes as a record `NAME key` of
/// its own, stamped `v` (keyspace/merge/deletes.rs, DECISIONS 242: a fact
/// names one key); the others stay in `removed`, for one record.
fn propagate_delete_facts(ctx: &mut Ctx, l: &mut Locked, v: u64, removed: &mut Vec<&[u8]>) {
    if !ctx.core.active {
        return;
    }
    let name = removed[0];
    let mut rest = vec![name];
    for &k in &removed[1..] {
        if ctx.note_states(l, &[name, k], &[k]) {
            ctx.propagate(v, &[name, k]);
        } else {
            rest.push(k);
        }
    }
    *removed = rest;
}

fn exists(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys = arg_keys(args, 1);
    let mut l = open_no_touch(ctx, &keys);
    let n = count_hits(ctx, &mut l, &keys);
    ctx.out.int(n as i64);
    Ok(())
}

/// KEYDB.MEXISTS key [key ...]: whether each key exists, as booleans
/// (integers 1/0 over RESP2), as KeyDB's db.cpp mexistsCommand answers.
fn keydb_mexists(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys = arg_keys(args, 1);
    let mut l = ctx.open_many(keys.iter().copied());
    let found: Vec<bool> = keys.iter().map(|k| l.exists(k)).collect();
    for (k, f) in keys.iter().zip(&found) {
        ctx.read_hit(k, *f);
    }
    drop(l);
    ctx.out.array(found.len());
    for f in found {
        ctx.out.boolean(f);
    }
    Ok(())
}

fn touch(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys = arg_keys(args, 1);
    let mut l = ctx.open_many(keys.iter().copied());
    let n = count_hits(ctx, &mut l, &keys);
    ctx.out.int(n as i64);
    Ok(())
}

/// How many of `keys` exist (repeats counted), as keyspace hits and misses.
fn count_hits(ctx: &Ctx, l: &mut Locked, keys: &[&[u8]]) -> usize {
    let mut n = 0;
    for k in keys {
        let found = l.exists(k);
        ctx.read_hit(k, found);
        n += usize::from(found);
    }
    n
}

fn type_cmd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = open_no_touch(ctx, &[key]);
    let t = l.entry(key).map_or("none", |e| e.value.type_name());
    ctx.read_hit(key, t != "none");
    ctx.out.simple(t);
    Ok(())
}

// ---------------------------------------------------------------- RENAME / RENAMENX

fn rename(ctx: &mut Ctx, args: Args) -> CmdResult {
    rename_generic(ctx, args, false)
}

fn renamenx(ctx: &mut Ctx, args: Args) -> CmdResult {
    rename_generic(ctx, args, true)
}

fn rename_generic(ctx: &mut Ctx, args: Args, nx: bool) -> CmdResult {
    let (src, dst) = (args.get(1), args.get(2));
    let mut l = ctx.open_many([src, dst]);
    let src_version = l.entry(src).ok_or(CmdError::NoSuchKey)?.version;
    let dst_version = l.entry(dst).map(|e| e.version);
    let blocked = src == dst || (nx && dst_version.is_some());
    if !blocked {
        let member_ttls = l.take_member_ttls(src);
        let mut e = l.remove(src).expect("checked above");
        let v = ctx.version_after(src_version.max(dst_version.unwrap_or(0)));
        e.rename(dst);
        e.version = v;
        l.put_entry(e);
        if let Some(t) = member_ttls {
            l.put_member_ttls(dst, t);
        }
        ctx.note_states(&mut l, &[b"RENAME", src, dst], &[src, dst]);
        ctx.propagate(v, &[b"RENAME", src, dst]);
        ctx.notify(super::events::class::GENERIC, "rename_from", src);
        ctx.notify(super::events::class::GENERIC, "rename_to", dst);
        ctx.signal_ready(ctx.db(), dst);
    }
    drop(l);
    if nx {
        ctx.out.int(i64::from(!blocked));
    } else {
        ctx.out.ok();
    }
    Ok(())
}

// ---------------------------------------------------------------- MOVE / COPY

/// The locked shards of a source key and a destination key, which may be
/// in different databases or in the very same shard.
struct Pair<'a> {
    src: ShardGuard<'a>,
    dst: Option<ShardGuard<'a>>,
    /// Set when locking expired a key whose DEL is held back: the records
    /// held are emitted when the pair is dropped, still under the locks,
    /// as a `Locked` view does.
    flush: Option<&'a Core>,
}

impl Drop for Pair<'_> {
    fn drop(&mut self) {
        if let Some(core) = self.flush {
            super::flush_deferred(core);
        }
    }
}

impl Pair<'_> {
    fn src(&mut self) -> &mut Shard {
        &mut self.src
    }
    fn dst(&mut self) -> &mut Shard {
        match &mut self.dst {
            Some(g) => g,
            None => &mut self.src,
        }
    }
}

/// Locks `src_key` in `src_db` and `dst_key` in `dst_db` in the global lock
/// order and applies lazy expiry to both, as `ctx.open` does.
fn open_pair<'a>(
    ctx: &mut Ctx<'a>,
    (src_db, src_key): (usize, &[u8]),
    (dst_db, dst_key): (usize, &[u8]),
) -> Pair<'a> {
    let ks = &ctx.core.keyspace;
    let (ss, ds) = (ks.slot(src_key), ks.slot(dst_key));
    let (src, dst) = ks.lock_pair((src_db, ss.shard), (dst_db, ds.shard));
    let mut p = Pair {
        src,
        dst,
        flush: None,
    };
    let held = expire_in(ctx, p.src(), src_db, src_key, ss.hash)
        | expire_in(ctx, p.dst(), dst_db, dst_key, ds.hash);
    if held {
        p.flush = Some(ctx.core);
    }
    if let Some(e) = p.src().find_mut(ss.hash, src_key) {
        if !ctx.client.no_touch {
            e.set_lru(lru_clock(ctx.now_ms));
        }
    }
    p
}

fn ss_hash(ctx: &Ctx, key: &[u8]) -> u64 {
    ctx.core.keyspace.hasher.hash(key)
}

/// Lazy expiry of `key` in a locked `shard`. Its DEL is held back to go
/// with the command's record, as Redis wraps them (a MOVE or COPY onto an
/// expired key: MULTI, DEL, the command, EXEC); returns whether it was.
fn expire_in(ctx: &mut Ctx, shard: &mut Shard, db: usize, key: &[u8], hash: u64) -> bool {
    let due = shard
        .get_raw(hash, key)
        .is_some_and(|e| e.is_expired(ctx.now_ms));
    if due && ctx.replay_version.is_none() {
        let Some(old) = shard.remove(&ctx.core.keyspace.hasher, hash, key) else {
            return false;
        };
        let stamp = ctx.deletion_stamp(old.version);
        if ctx.core.active {
            shard.set_tombstone(key, stamp);
        }
        return ctx.propagate_expired_deferred(db, key, stamp, old.version);
    }
    false
}

fn move_cmd(ctx: &mut Ctx, args: Args) -> CmdResult {
    refuse_if_active(ctx, "MOVE")?;
    let key = args.get(1);
    let dst_db = db_arg(ctx, args.get(2))?;
    let src_db = ctx.db();
    if dst_db == src_db {
        return Err(same_object());
    }
    let mut p = open_pair(ctx, (src_db, key), (dst_db, key));
    let hasher = &ctx.core.keyspace.hasher;
    let hash = hasher.hash(key);
    let moved = p.src().get_raw(hash, key).is_some() && p.dst().get_raw(hash, key).is_none();
    if moved {
        let mut e = p.src().remove(hasher, hash, key).expect("checked above");
        if matches!(e.value, crate::keyspace::Value::Stream(_)) {
            // Gone from the source db: its XREADGROUPs fail (Redis's dbDelete).
            ctx.signal_ready(src_db, key);
        }
        let v = ctx.version_after(e.version);
        e.version = v;
        p.dst().insert(hasher, hash, e);
        ctx.propagate(v, &[b"MOVE", key, args.get(2)]);
        ctx.notify_db(src_db, super::events::class::GENERIC, "move_from", key);
        ctx.notify_db(dst_db, super::events::class::GENERIC, "move_to", key);
        ctx.signal_ready(dst_db, key);
    }
    drop(p);
    ctx.out.int(i64::from(moved));
    Ok(())
}

struct CopyOpts {
    db: Option<usize>,
    replace: bool,
}

fn parse_copy(ctx: &Ctx, args: Args) -> Result<CopyOpts, CmdError> {
    let mut o = CopyOpts {
        db: None,
        replace: false,
    };
    let mut i = 3;
    while i < args.len() {
        let a = args.get(i);
        if eq_ic(a, "REPLACE") {
            o.replace = true;
        } else if eq_ic(a, "DB") && i + 1 < args.len() {
            o.db = Some(db_arg(ctx, args.get(i + 1))?);
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok(o)
}

fn copy(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (src, dst) = (args.get(1), args.get(2));
    let o = parse_copy(ctx, args)?;
    let src_db = ctx.db();
    let dst_db = o.db.unwrap_or(src_db);
    if src_db == dst_db && src == dst {
        return Err(same_object());
    }
    if dst_db != src_db {
        refuse_if_active(ctx, "COPY to another database")?;
    }
    let mut p = open_pair(ctx, (src_db, src), (dst_db, dst));
    if ctx.active.is_some() {
        let (sv, dv) = (
            p.src().version_of(ss_hash(ctx, src), src),
            p.dst().version_of(ss_hash(ctx, dst), dst),
        );
        ctx.note_base(src, sv);
        ctx.note_base(dst, dv);
    }
    let hasher = &ctx.core.keyspace.hasher;
    let (sh, dh) = (hasher.hash(src), hasher.hash(dst));
    let Some(se) = p.src().get_raw(sh, src) else {
        drop(p);
        ctx.out.int(0);
        return Ok(());
    };
    let (value, expire_at, src_version) = (se.value.clone(), se.expire_at(), se.version);
    let dst_version = p.dst().get_raw(dh, dst).map(|e| e.version);
    if dst_version.is_some() && !o.replace {
        drop(p);
        ctx.out.int(0);
        return Ok(());
    }
    let v = ctx.version_after(src_version.max(dst_version.unwrap_or(0)));
    let mut entry = Entry::new(dst.into(), value, expire_at, v);
    entry.set_lru(lru_clock(ctx.now_ms));
    entry.set_lfu(5);
    p.dst().insert(hasher, dh, entry);
    // As the client sent it (Redis does): replayed in order, the replica
    // holds the same keys, so it copies exactly when we did.
    let argv: Vec<&[u8]> = (0..args.len()).map(|i| args.get(i)).collect();
    ctx.note_state_in(p.dst(), &argv, dst);
    ctx.propagate(v, &argv);
    ctx.notify_db(dst_db, super::events::class::GENERIC, "copy_to", dst);
    ctx.signal_ready(dst_db, dst);
    drop(p);
    ctx.out.int(1);
    Ok(())
}

// ---------------------------------------------------------------- OBJECT

fn object_parent(_ctx: &mut Ctx, _args: Args) -> CmdResult {
    // The dispatcher always resolves a subcommand; this is never reached.
    Err(CmdError::WrongArity("object".into()))
}

/// Runs `f` on the entry named by OBJECT's key argument (null if missing),
/// without refreshing its access time.
/// The memory policy is read before any shard is locked.
fn with_object(
    ctx: &mut Ctx,
    args: Args,
    f: impl FnOnce(&Ctx, &Policy, &Entry) -> Result<i64, CmdError>,
) -> CmdResult {
    let policy = Policy::read(ctx);
    let key = args.get(2);
    let mut l = open_no_touch(ctx, &[key]);
    let r = match l.entry(key) {
        None => None,
        Some(e) => Some(f(ctx, &policy, e)?),
    };
    ctx.stats.hit(r.is_some());
    drop(l);
    match r {
        None => ctx.out.null(),
        Some(n) => ctx.out.int(n),
    }
    Ok(())
}

/// The eviction settings OBJECT's answers depend on.
struct Policy {
    lfu: bool,
    /// Whether values carry their own access data (no shared integers).
    no_shared: bool,
}

impl Policy {
    fn read(ctx: &Ctx) -> Policy {
        let p = ctx.core.hot.eviction.policy();
        Policy {
            lfu: p.is_lfu(),
            no_shared: ctx.core.hot.maxmemory.load(Relaxed) != 0 && (p.is_lru() || p.is_lfu()),
        }
    }
}

fn object_encoding(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(2);
    let mut l = open_no_touch(ctx, &[key]);
    let enc = l.entry(key).map(|e| e.value.encoding());
    ctx.stats.hit(enc.is_some());
    drop(l);
    match enc {
        Some(e) => ctx.out.bulk(e.as_bytes()),
        None => ctx.out.null(),
    }
    Ok(())
}

fn object_freq(ctx: &mut Ctx, args: Args) -> CmdResult {
    with_object(ctx, args, |ctx, policy, e| {
        if !policy.lfu {
            return Err(CmdError::err("An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."));
        }
        let decay = ctx.core.hot.eviction.lfu_decay_time();
        Ok(e.lfu_decayed(lru_clock(ctx.now_ms), decay) as i64)
    })
}

/// OBJECT LASTMODIFIED (KeyDB's object.cpp): whole seconds since the key's
/// last write, read from its version stamp (KeyDB reads its MVCC stamp).
fn object_lastmodified(ctx: &mut Ctx, args: Args) -> CmdResult {
    with_object(ctx, args, |ctx, _, e| {
        let at = crate::keyspace::hlc::stamp_ms(e.version);
        Ok((ctx.now_ms.saturating_sub(at) / 1000) as i64)
    })
}

fn object_idletime(ctx: &mut Ctx, args: Args) -> CmdResult {
    with_object(ctx, args, |ctx, policy, e| {
        if policy.lfu {
            return Err(CmdError::err("An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."));
        }
        let now = lru_clock(ctx.now_ms);
        Ok((now.wrapping_sub(e.lru()) & 0xFF_FFFF) as i64)
    })
}

fn object_refcount(ctx: &mut Ctx, args: Args) -> CmdResult {
    with_object(ctx, args, |_, policy, e| {
        // Redis shares the integers 0..10000 unless an LRU/LFU policy with a
        // memory limit needs per-object access data.
        Ok(match e.value {
            Value::Str(StrValue::Int(n)) if (0..10000).contains(&n) && !policy.no_shared => {
                i32::MAX as i64
            }
            _ => 1,
        })
    })
}

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

fn object_help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.array(OBJECT_HELP.len());
    for l in OBJECT_HELP {
        ctx.out.simple(l);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_roundtrip_and_walk() {
        let c = Cursor {
            shard: 7,
            level: 3,
            part: 5,
        };
        assert_eq!(Cursor::decode(c.encode()), c);
        let n = c.next().unwrap();
        assert_eq!((n.shard, n.part), (7, 6));
        let last = Cursor { part: 7, ..c };
        assert_eq!(last.next().unwrap().encode(), 8);
        let end = Cursor {
            shard: SHARDS - 1,
            level: 0,
            part: 0,
        };
        assert!(end.next().is_none());
    }

    #[test]
    fn levels() {
        assert_eq!(choose_level(0, 10), 0);
        assert_eq!(choose_level(10, 10), 0);
        assert_eq!(choose_level(11, 10), 1);
        assert_eq!(choose_level(600, 10), 6);
        assert_eq!(choose_level(1000, 10), MAX_LEVEL);
        assert_eq!(choose_level(usize::MAX / 2, 1), MAX_LEVEL);
    }

    #[test]
    fn cursors_parse_like_strtoul() {
        use crate::commands::collscan::parse_cursor;
        assert_eq!(parse_cursor(b"0"), Ok(0));
        assert_eq!(parse_cursor(b"-1"), Ok(u64::MAX));
        assert!(parse_cursor(b"18446744073709551616").is_err());
        assert!(parse_cursor(b"x").is_err());
        assert!(parse_cursor(b"").is_err());
    }
}
