//! DEBUG (the subset test suites use) and MEMORY.
//!
//! DEBUG OBJECT and MEMORY USAGE look keys up without side effects (no LRU
//! touch, no lazy-expiry deletion), as Redis's objectCommandLookup does.
//! DEBUG OBJECT's line ends with a field of ours, `lattice_version:<n>`,
//! the key's HLC version (tests check that persistence keeps it).
//! DEBUG DIGEST follows Redis's scheme: each key's digest mixes its name,
//! type, value and expiry, and the keys' digests are XOR-ed, so the result
//! does not depend on iteration order and is all zeros for an empty dataset.

use super::super::keyspec::KeySpec;
use std::sync::atomic::Ordering::Relaxed;

use super::super::util::{arg_i64, eq_ic, lossy};
use super::super::{flags::*, CmdError, CmdResult, Command, Ctx};
use super::reply_help;
use super::sha1::{hex, sha1};
use crate::core::admin::Reload;
use crate::keyspace::stream::StreamId;
use crate::keyspace::{Entry, Value};
use crate::protocol::Args;

pub(super) static MEMORY_SUBCOMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    cmd("usage", -3, READONLY, usage)
        .doc("4.0.0", "Estimates the memory usage of a key.")
        .complexity("O(N) where N is the number of samples.")
        .keys(2, 2, 1)
        .key_specs(&[KeySpec::at(2, &["RO"])]),
    cmd("stats", 2, 0, stats)
        .doc("4.0.0", "Returns details about memory usage.")
        .tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"]),
    cmd("doctor", 2, 0, doctor)
        .doc("4.0.0", "Outputs a memory problems report.")
        .tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"]),
    cmd("malloc-stats", 2, 0, malloc_stats)
        .doc("4.0.0", "Returns the allocator statistics.")
        .complexity("Depends on how much memory is allocated, could be slow")
        .tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"]),
    cmd("purge", 2, 0, purge)
        .doc("4.0.0", "Asks the allocator to release memory.")
        .complexity("Depends on how much memory is allocated, could be slow")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    cmd("help", 2, 0, memory_help)
        .doc("4.0.0", "Returns helpful text about the different subcommands."),
};

const DEBUG_HELP: &[&str] = &[
    "DIGEST",
    "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]",
    "    Output a hex signature of the values of all the specified keys.",
    "RELOAD [option ...]",
    "    Save the RDB on disk and reload it back to memory. Available <option> values:",
    "    * MERGE: conflicting keys will be loaded from RDB.",
    "    * NOFLUSH: the existing database will not be removed before load, but",
    "      conflicting keys will generate an error.",
    "    * NOSAVE: the database will be loaded from an existing RDB file.",
    "POPULATE <count> [<prefix>] [<size>]",
    "    Create <count> string keys named key:<num>. If <prefix> is specified then",
    "    it is used instead of the 'key' prefix. These are not propagated to",
    "    replicas.",
    "PROTOCOL <type>",
    "    Reply with a test value of the specified type. <type> can be: string,",
    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
    "    true, false.",
    "OBJECT <key>",
    "    Show low level info about the key and associated value.",
    "ERROR <string>",
    "    Return a Redis protocol error with <string> as message. Useful for clients",
    "    unit tests to simulate Redis errors.",
    "LOG <message>",
    "    Write <message> to the server log.",
    "REPLYBUFFER RESIZING <0|1>",
    "    Enable or disable the reply buffer resize cron job",
    "CLOCK-OFFSET [<ms>]",
    "    Run the version stamps this node issues <ms> ahead of the wall clock",
    "    (negative: behind; expiry keeps the wall clock). Without <ms>: the offset.",
    "PAUSE-CRON <0|1>",
    "    Stop periodic cron job processing.",
    "MERGEINFO <key>",
    "    Show how <key> merges under active replication: its version, the node",
    "    slot that wrote it and, for a counter, each node's part.",
    "REPLICATE <command> [<arg> ...]",
    "    Send <command> to the replicas without running it here (the AOF and",
    "    active peers do not get it).",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not",
    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
    "    default.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
];

/// C's atof: the longest numeric prefix, 0 if none.
fn atof(a: &[u8]) -> f64 {
    let s = lossy(a);
    let s = s.trim_start();
    let end = s
        .char_indices()
        .take_while(|(i, c)| {
            c.is_ascii_digit() || *c == '.' || (*i == 0 && (*c == '-' || *c == '+'))
        })
        .map(|(i, c)| i + c.len_utf8())
        .last()
        .unwrap_or(0);
    s[..end].parse().unwrap_or(0.0)
}

pub(super) fn debug(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    let n = args.len();
    if eq_ic(sub, "HELP") && n == 2 {
        reply_help(ctx, "debug", DEBUG_HELP);
    } else if eq_ic(sub, "SLEEP") && n == 3 {
        let secs = std::time::Duration::from_secs_f64(atof(args.get(2)).clamp(0.0, 1e6));
        // Redis's one thread sleeps, its link to its master included.
        ctx.admin.hold_master_link(secs);
        std::thread::sleep(secs);
        ctx.out.ok();
    } else if eq_ic(sub, "SET-DISABLE-DENY-SCRIPTS") && n == 3 {
        let on = atof(args.get(2)) as i64 != 0;
        ctx.core.scripts.disable_deny.store(on, Relaxed);
        ctx.out.ok();
    } else if eq_ic(sub, "SET-ACTIVE-EXPIRE") && n == 3 {
        let on = atof(args.get(2)) as i64 != 0;
        ctx.core.hot.active_expire.store(on, Relaxed);
        ctx.out.ok();
    } else if eq_ic(sub, "PAUSE-CRON") && n == 3 {
        let on = atof(args.get(2)) as i64 != 0;
        ctx.core.hot.cron_paused.store(on, Relaxed);
        ctx.out.ok();
    } else if eq_ic(sub, "ERROR") && n == 3 {
        // Replies with the given text as an error (clients' test suites use it).
        return Err(CmdError::Msg(lossy(args.get(2))));
    } else if eq_ic(sub, "QUICKLIST-PACKED-THRESHOLD") && n == 3 {
        // Lists keep big elements in ordinary chunks: nothing to tune.
        ctx.out.ok();
    } else if eq_ic(sub, "LOG") && n == 3 {
        crate::log_warning!("DEBUG LOG: {}", lossy(args.get(2)));
        ctx.out.ok();
    } else if eq_ic(sub, "CLOCK-OFFSET") && n <= 3 {
        clock_offset(ctx, args)?;
    } else if eq_ic(sub, "MERGEINFO") && n == 3 {
        merge_info(ctx, args.get(2));
    } else if eq_ic(sub, "OBJECT") && n == 3 {
        // A key expired but not yet deleted is shown, as Redis's dictFind does.
        let line =
            with_entry_raw(ctx, args.get(2), true, object_line).ok_or(CmdError::NoSuchKey)?;
        ctx.out.simple(&line);
    } else if eq_ic(sub, "DIGEST") && n == 2 {
        let d = dataset_digest(ctx);
        ctx.out.simple(&hex(&d));
    } else if eq_ic(sub, "RELOAD") {
        reload(ctx, args)?;
    } else if eq_ic(sub, "POPULATE") && (3..=5).contains(&n) {
        populate(ctx, args)?;
    } else if eq_ic(sub, "PROTOCOL") && n == 3 {
        protocol(ctx, args.get(2))?;
    } else if eq_ic(sub, "SET-SKIP-CHECKSUM-VALIDATION") && n == 3 {
        let on = atof(args.get(2)) as i64 != 0;
        crate::persistence::rdb::decode::SKIP_CHECKSUM_VALIDATION.store(on, Relaxed);
        ctx.out.ok();
    } else if eq_ic(sub, "AOF-FLUSH-SLEEP") && n == 3 {
        let us = std::str::from_utf8(args.get(2))
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(CmdError::NotInteger)?;
        ctx.admin.debug_aof_flush_sleep(us);
        ctx.out.ok();
    } else if eq_ic(sub, "REPLICATE") && n >= 3 {
        // Sends the command to plain replicas without running it here
        // (Redis's tests make a replica diverge with it).
        let mut argv: Vec<&[u8]> = vec![crate::effects::REPLICAS_ONLY];
        argv.extend(args.iter().skip(2));
        ctx.propagate_repl_only(&argv);
        ctx.out.ok();
    } else if eq_ic(sub, "REPLYBUFFER") && n == 4 && eq_ic(args.get(2), "RESIZING") {
        let on = atof(args.get(3)) as i64 != 0;
        ctx.core.hot.reply_no_resize.store(!on, Relaxed);
        ctx.out.ok();
    } else if eq_ic(sub, "LOADAOF") && n == 2 {
        ctx.admin.debug_loadaof();
        ctx.out.ok();
    } else if eq_ic(sub, "DIGEST-VALUE") && n >= 2 {
        ctx.out.array(n - 2);
        for k in args.iter().skip(2) {
            let d = with_entry(ctx, k, |e, _| value_digest(e)).unwrap_or([0; 20]);
            ctx.out.simple(&hex(&d));
        }
    } else {
        return Err(CmdError::err(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try DEBUG HELP.",
            lossy(sub)
        )));
    }
    Ok(())
}

/// DEBUG CLOCK-OFFSET [<ms>]: stamps run `ms` ahead of the wall clock (a
/// node whose clock is off, for tests of active replication); without an
/// argument, the offset in force.
fn clock_offset(ctx: &mut Ctx, args: Args) -> CmdResult {
    use crate::keyspace::hlc;
    if args.len() == 2 {
        ctx.out.int(hlc::clock_offset());
        return Ok(());
    }
    let ms = crate::commands::util::arg_i64(args.get(2))?;
    hlc::set_clock_offset(ms);
    crate::log_warning!("DEBUG CLOCK-OFFSET: stamps run {ms} ms off the wall clock");
    ctx.out.ok();
    Ok(())
}

/// DEBUG MERGEINFO <key>: how the key merges (docs/MERGE-DESIGN.md), one line per
/// fact: its version and the slot of the node that wrote it; for a counter
/// (keyspace/merge.rs) its reset, base and each node's part, as
/// `slot:total@stamp`. Tombstoned keys show their deletion.
fn merge_info(ctx: &mut Ctx, key: &[u8]) {
    use crate::keyspace::hlc::stamp_node;
    use crate::keyspace::merge::{merges_by_parts, Meta};
    let ks = &ctx.core.keyspace;
    let slot = ks.slot(key);
    let g = ks.db(ctx.client.db).lock(slot.shard);
    let e = g.get_raw(slot.hash, key);
    let version = g.version_of(slot.hash, key);
    let mut lines = vec![
        format!("exists:{}", u8::from(e.is_some())),
        format!("version:{version} slot:{}", stamp_node(version)),
    ];
    let value = e.map(|e| &e.value);
    match g.merge_meta(key) {
        None if !value.is_some_and(merges_by_parts) => lines.push("type:last-writer-wins".into()),
        m => lines.extend(Meta::current(m, version, value).describe()),
    }
    drop(g);
    ctx.out.array(lines.len());
    for l in &lines {
        ctx.out.simple(l);
    }
}

/// DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE]: save the RDB file, empty the
/// keyspace and load the file back (each step skippable), as Redis does to
/// check that what is saved is what is loaded.
fn reload(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut steps = Reload {
        save: true,
        flush: true,
        merge: false,
    };
    for a in args.iter().skip(2) {
        if eq_ic(a, "MERGE") {
            steps.merge = true;
        } else if eq_ic(a, "NOFLUSH") {
            steps.flush = false;
        } else if eq_ic(a, "NOSAVE") {
            steps.save = false;
        } else {
            return Err(CmdError::err(
                "DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.",
            ));
        }
    }
    if ctx.client.in_exec {
        // The save's serializer threads would wait on the shards EXEC holds.
        return Err(CmdError::err("DEBUG RELOAD is not allowed inside MULTI"));
    }
    ctx.admin.debug_reload(steps)?;
    ctx.out.ok();
    Ok(())
}

/// DEBUG POPULATE count [prefix] [size]: string keys `prefix:N` (default
/// `key`) holding `value:N`, cut or zero-padded to `size` bytes when given.
/// Existing keys are left alone. Like Redis, the keys are not propagated:
/// a test-data tool, not a write.
fn populate(ctx: &mut Ctx, args: Args) -> CmdResult {
    let positive = || CmdError::err("value is out of range, must be positive");
    let num = |i: usize| -> Result<u64, CmdError> {
        std::str::from_utf8(args.get(i))
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|&v| v >= 0)
            .map(|v| v as u64)
            .ok_or_else(positive)
    };
    let count = num(2)?;
    let prefix = if args.len() > 3 { args.get(3) } else { b"key" };
    let size = if args.len() > 4 {
        Some(num(4)? as usize)
    } else {
        None
    };
    for j in 0..count {
        let mut key = prefix.to_vec();
        key.extend_from_slice(format!(":{j}").as_bytes());
        let mut value = format!("value:{j}").into_bytes();
        if let Some(size) = size {
            value.resize(size, 0);
        }
        let mut l = ctx.open(&key);
        if !l.exists(&key) {
            let v = ctx.new_version();
            l.put(&key, Value::string(&value), 0, v);
        }
    }
    ctx.out.ok();
    Ok(())
}

/// DEBUG PROTOCOL <type>: one reply of each RESP type, for client tests.
fn protocol(ctx: &mut Ctx, kind: &[u8]) -> CmdResult {
    let out = &mut *ctx.out;
    match lossy(kind).to_ascii_lowercase().as_str() {
        "string" => out.bulk(b"Hello World"),
        "integer" => out.int(12345),
        // Redis's literal, not pi.
        #[allow(clippy::approx_constant)]
        "double" => out.double(3.141),
        "bignum" => out.bignum("1234567999999999999999999999999999999"),
        "null" => out.null(),
        "array" | "set" => {
            if eq_ic(kind, "set") {
                out.set(3);
            } else {
                out.array(3);
            }
            (0..3).for_each(|j| out.int(j));
        }
        "map" => {
            out.map(3);
            for j in 0..3 {
                out.int(j);
                out.boolean(j == 1);
            }
        }
        "attrib" => {
            if out.resp >= 3 {
                out.raw(b"|1\r\n");
                out.bulk(b"key-popularity");
                out.array(2);
                out.bulk(b"key:123");
                out.int(90);
            }
            out.bulk(b"Some real reply following the attribute");
        }
        "push" => {
            if out.resp < 3 {
                return Err(CmdError::err("RESP2 is not supported by this command"));
            }
            out.push(2);
            out.bulk(b"server-cpu-usage");
            out.int(42);
            out.bulk(b"Some real reply following the push reply");
        }
        "verbatim" => out.verbatim(b"This is a verbatim\nstring"),
        "true" => out.boolean(true),
        "false" => out.boolean(false),
        _ => {
            return Err(CmdError::err(
                "Wrong protocol type name. Please use one of the following: \
                 string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false",
            ))
        }
    }
    Ok(())
}

/// Runs `f` on the live entry of `key` in the client's database, without
/// touching or deleting it.
fn with_entry<R>(ctx: &Ctx, key: &[u8], f: impl FnOnce(&Entry, u64) -> R) -> Option<R> {
    with_entry_raw(ctx, key, false, f)
}

/// `with_entry`, showing a key that is expired but not deleted yet when
/// `expired`.
fn with_entry_raw<R>(
    ctx: &Ctx,
    key: &[u8],
    expired: bool,
    f: impl FnOnce(&Entry, u64) -> R,
) -> Option<R> {
    let ks = &ctx.core.keyspace;
    let slot = ks.slot(key);
    let shard = ks.db(ctx.client.db).lock(slot.shard);
    let e = shard.get_raw(slot.hash, key)?;
    if !expired && e.is_expired(ctx.now_ms) {
        return None;
    }
    Some(f(e, ctx.now_ms))
}

/// Length of a string as RDB would serialize it (no compression).
fn serialized_len(v: &Value) -> usize {
    let s = match v {
        Value::Str(s) => s,
        // Collections: element bytes plus a length prefix each (an estimate
        // until the RDB writer of issue 4 can answer exactly).
        Value::List(l) => return l.iter().map(|e| e.len() + 1).sum::<usize>() + 1,
        Value::Set(st) => return st.iter().map(|e| e.len() + 1).sum::<usize>() + 1,
        Value::Hash(h) => return h.iter().map(|(f, v)| f.len() + v.len() + 2).sum::<usize>() + 1,
        Value::ZSet(z) => return z.iter().map(|(m, _)| m.len() + 9).sum::<usize>() + 1,
        Value::Stream(x) => {
            let nodes = crate::persistence::rdb::stream::node_blobs(x);
            return nodes.iter().map(|(_, lp)| lp.len() + 19).sum::<usize>() + 12;
        }
        Value::Cron(j) => return j.mem_usage(),
    };
    if let crate::keyspace::StrValue::Int(n) = s {
        return if (-128..=127).contains(n) {
            2
        } else if (-32768..=32767).contains(n) {
            3
        } else if i32::try_from(*n).is_ok() {
            5
        } else {
            1 + s.len()
        };
    }
    let len = s.len();
    let prefix = if len < 64 {
        1
    } else if len < 16384 {
        2
    } else {
        5
    };
    prefix + len
}

fn object_line(e: &Entry, now_ms: u64) -> String {
    let lru_now = crate::commands::access::lru_clock(now_ms);
    let idle = lru_now.wrapping_sub(e.lru()) & 0xFF_FFFF;
    let shared_int =
        matches!(&e.value, Value::Str(crate::keyspace::StrValue::Int(n)) if (0..10000).contains(n));
    format!(
        "Value at:{:p} refcount:{} encoding:{} serializedlength:{} lru:{} lru_seconds_idle:{} lattice_version:{}",
        e as *const Entry,
        if shared_int { i32::MAX } else { 1 },
        e.value.encoding(),
        serialized_len(&e.value),
        e.lru(),
        idle,
        e.version
    )
}

/// Redis's mixDigest: XOR sha1(data) into `d`, then d = sha1(d).
fn mix(d: &mut [u8; 20], data: &[u8]) {
    xor(d, data);
    *d = sha1(d);
}

/// Redis's xorDigest: XOR sha1(data) into `d`.
fn xor(d: &mut [u8; 20], data: &[u8]) {
    let h = sha1(data);
    for (a, b) in d.iter_mut().zip(h) {
        *a ^= b;
    }
}

/// Redis's xorObjectDigest: mixes the value's type and content into `d`,
/// then XORs in a marker if the key has an expiry.
fn mix_object(d: &mut [u8; 20], e: &Entry) {
    // Redis's OBJ_* type codes.
    let type_code: u32 = match e.value {
        Value::Str(_) => 0,
        Value::List(_) => 1,
        Value::Set(_) => 2,
        Value::ZSet(_) => 3,
        Value::Hash(_) => 4,
        Value::Stream(_) => 6,
        // KeyDB's OBJ_CRON.
        Value::Cron(_) => 7,
    };
    mix(d, &type_code.to_be_bytes());
    match &e.value {
        Value::Str(s) => s.with_bytes(|b| mix(d, b)),
        // Ordered: each element is mixed in turn.
        Value::List(l) => l.iter().for_each(|b| mix(d, b)),
        // Unordered: each element's digest is XORed in (xorDigest).
        Value::Set(st) => st.iter().for_each(|m| xor(d, &m)),
        Value::Hash(h) => {
            for (f, v) in h.iter() {
                let mut ele = [0u8; 20];
                mix(&mut ele, f);
                mix(&mut ele, v);
                xor(d, &ele);
            }
        }
        Value::ZSet(z) => {
            for (m, score) in z.iter() {
                let mut ele = [0u8; 20];
                mix(&mut ele, m);
                mix(&mut ele, crate::protocol::format_double(score).as_bytes());
                xor(d, &ele);
            }
        }
        // Ordered: each entry's "ms.seq", then its fields and values.
        Value::Stream(x) => {
            for (id, f) in x.range(StreamId::MIN, StreamId::MAX, false) {
                mix(d, format!("{}.{}", id.ms, id.seq).as_bytes());
                f.items().for_each(|b| mix(d, b));
            }
        }
        // Everything a run depends on, so nodes agree only on the same job.
        Value::Cron(j) => {
            mix(d, &j.script);
            for n in [j.start_ms, j.interval_ms, j.next_ms, j.owner] {
                mix(d, &n.to_le_bytes());
            }
            mix(d, &[j.single as u8]);
            j.keys.iter().chain(&j.args).for_each(|b| mix(d, b));
        }
    }
    if e.expire_at() != 0 {
        xor(d, b"!!expire!!");
    }
}

/// DEBUG DIGEST-VALUE's digest of one key's value.
fn value_digest(e: &Entry) -> [u8; 20] {
    let mut d = [0u8; 20];
    mix_object(&mut d, e);
    d
}

fn dataset_digest(ctx: &Ctx) -> [u8; 20] {
    let ks = &ctx.core.keyspace;
    let mut fin = [0u8; 20];
    for db in 0..ks.num_dbs() {
        let mut keys_digest = [0u8; 20];
        let mut any = false;
        for shard in ks.db(db).lock_all() {
            for e in shard.iter() {
                if e.is_expired(ctx.now_ms) {
                    continue;
                }
                any = true;
                let mut d = [0u8; 20];
                mix(&mut d, &e.key);
                mix_object(&mut d, e);
                xor(&mut keys_digest, &d);
            }
        }
        if any {
            mix(&mut fin, &(db as u32).to_be_bytes());
            for (a, b) in fin.iter_mut().zip(keys_digest) {
                *a ^= b;
            }
        }
    }
    fin
}

const MEMORY_HELP: &[&str] = &[
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
];

fn memory_help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    reply_help(ctx, "memory", MEMORY_HELP);
    Ok(())
}

/// Bytes an entry takes: table slot and entry header, key, value.
fn entry_usage(e: &Entry) -> usize {
    std::mem::size_of::<Entry>() + e.key.len() + e.value.mem_usage()
}

fn usage(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut i = 3;
    while i < args.len() {
        if eq_ic(args.get(i), "SAMPLES") && i + 1 < args.len() {
            let n = arg_i64(args.get(i + 1))?;
            if n < 0 {
                return Err(CmdError::Syntax);
            }
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    match with_entry(ctx, args.get(2), |e, _| entry_usage(e)) {
        Some(n) => ctx.out.int(n as i64),
        None => ctx.out.null(),
    }
    Ok(())
}

fn stats(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let (used, peak) = crate::alloc::used_memory();
    let ks = &ctx.core.keyspace;
    let keys = ks.total_keys();
    let startup = 1024 * 1024u64;
    let dataset = used.saturating_sub(startup);
    let dbs: Vec<(usize, usize, usize)> = (0..ks.num_dbs())
        .map(|i| (i, ks.db(i).len(), ks.db(i).volatile_len()))
        .filter(|d| d.1 > 0)
        .collect();
    let ints: &[(&str, u64)] = &[
        ("peak.allocated", peak),
        ("total.allocated", used),
        ("startup.allocated", startup),
        ("replication.backlog", 0),
        ("clients.slaves", 0),
        ("clients.normal", 0),
        ("cluster.links", 0),
        ("aof.buffer", 0),
        ("lua.caches", 0),
        ("functions.caches", 0),
    ];
    let out = &mut *ctx.out;
    out.map(ints.len() + dbs.len() + 11);
    for (k, v) in ints {
        out.bulk_str(k);
        out.int(*v as i64);
    }
    for (i, n, v) in dbs {
        out.bulk_str(&format!("db.{i}"));
        out.map(2);
        out.bulk(b"overhead.hashtable.main");
        out.int((n * 24) as i64);
        out.bulk(b"overhead.hashtable.expires");
        out.int((v * 32) as i64);
    }
    out.bulk(b"overhead.total");
    out.int(startup as i64);
    out.bulk(b"keys.count");
    out.int(keys as i64);
    out.bulk(b"keys.bytes-per-key");
    out.int(if keys == 0 {
        0
    } else {
        (dataset / keys as u64) as i64
    });
    out.bulk(b"dataset.bytes");
    out.int(dataset as i64);
    out.bulk(b"dataset.percentage");
    out.double(dataset as f64 * 100.0 / used.max(1) as f64);
    out.bulk(b"peak.percentage");
    out.double(used as f64 * 100.0 / peak.max(1) as f64);
    for k in [
        "allocator.allocated",
        "allocator.active",
        "allocator.resident",
    ] {
        out.bulk_str(k);
        out.int(used as i64);
    }
    out.bulk(b"fragmentation");
    out.double(1.0);
    out.bulk(b"fragmentation.bytes");
    out.int(0);
    Ok(())
}

fn doctor(ctx: &mut Ctx, _args: Args) -> CmdResult {
    // Redis stays silent below 5 MB of data; an empty keyspace is our cue.
    let text = if ctx.core.keyspace.total_keys() == 0 {
        "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n"
    } else {
        "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n"
    };
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

fn malloc_stats(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out
        .verbatim(b"Stats not supported for the current allocator");
    Ok(())
}

fn purge(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.ok();
    Ok(())
}
