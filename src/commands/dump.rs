//! DUMP, RESTORE and MIGRATE (Redis's cluster.c commands of the same names).
//!
//! DUMP serializes one value as an RDB payload (`rdb::encode::dump_payload`:
//! type, value, RDB version 10, CRC-64), so redis-server RESTOREs what we
//! DUMP; RESTORE decodes with the RDB loader (`rdb::decode`), which accepts
//! payloads up to RDB version 11 and sanitizes them deeply (a client sends
//! the bytes). Decoding happens before any lock is taken; the checks run in
//! Redis's order (BUSYKEY, then TTL, then the payload) so errors match.
//!
//! RESTORE propagates as Redis does: a relative TTL is rewritten to the
//! absolute time it resolved to, with ABSTTL appended, so a replica or the
//! AOF gets the same expiry; a RESTORE whose TTL is already in the past
//! deletes the replaced key and propagates DEL (or nothing).
//!
//! MIGRATE is a DUMP here and a RESTORE over a blocking socket there, then a
//! DEL of each key the target acknowledged (propagated as DEL). Like Redis,
//! it blocks its worker for the exchange (bounded by the timeout); unlike
//! Redis it does not hold the keys' locks during network I/O: a key written
//! meanwhile (its version changed) is kept rather than deleted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::access::lru_clock;
use super::events::class;
use super::keyspec::KeySpec;
use super::util::{arg_i64, eq_ic};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::Entry;
use crate::persistence::rdb::{decode, encode, RdbError};
use crate::protocol::{request, Args};

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "generic", acl = "keyspace"),
    cmd("dump", 2, READONLY, dump)
        .doc("2.6.0", "Returns a serialized representation of the value stored at a key.")
        .complexity("O(1) to access the key and additional O(N*M) to serialize it, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1).")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO", "access"])])
        .tips(&["nondeterministic_output"]),
    cmd("restore", -4, WRITE | DENYOOM, restore, acl = "dangerous")
        .doc("2.6.0", "Creates a key from the serialized representation of a value.")
        .complexity("O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["OW", "update"])]),
    cmd("restore-asking", -4, WRITE | DENYOOM | ASKING, restore, acl = "dangerous")
        .group("server")
        .doc("3.0.0", "An internal command for migrating keys in a cluster")
        .complexity("O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["OW", "update"])]),
    cmd("migrate", -6, WRITE, migrate, acl = "dangerous")
        .doc("2.6.0", "Atomically transfers a key from one Redis instance to another.")
        .complexity("This command actually executes a DUMP+DEL in the source instance, and a RESTORE in the target instance. See the pages of these commands for time complexity. Also an O(N) data transfer between the two instances is performed.")
        .keys(3, 3, 1)
        .keys_fn(migrate_keys)
        .key_specs(&[
            KeySpec::at(3, &["RW", "access", "delete"]),
            KeySpec::keyword("KEYS", -2, &["RW", "access", "delete", "incomplete"]).range(-1, 1, 0),
        ])
        .tips(&["nondeterministic_output"]),
};

fn compress(ctx: &Ctx) -> bool {
    ctx.core
        .hot
        .persistence
        .rdbcompression
        .load(std::sync::atomic::Ordering::Relaxed)
}

// ---------------------------------------------------------------- DUMP

fn dump(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let compress = compress(ctx);
    let mut l = ctx.open(key);
    let payload = l
        .entry(key)
        .map(|e| encode::dump_payload(&e.value, compress));
    drop(l);
    ctx.stats.hit(payload.is_some());
    match payload {
        Some(p) => ctx.out.bulk(&p),
        None => ctx.out.null(),
    }
    Ok(())
}

// ---------------------------------------------------------------- RESTORE

struct RestoreOpts {
    replace: bool,
    absttl: bool,
    idle: Option<u64>,
    freq: Option<u8>,
}

fn parse_restore(args: Args) -> Result<RestoreOpts, CmdError> {
    let mut o = RestoreOpts {
        replace: false,
        absttl: false,
        idle: None,
        freq: None,
    };
    let mut i = 4;
    while i < args.len() {
        let a = args.get(i);
        let more = i + 1 < args.len();
        if eq_ic(a, "REPLACE") {
            o.replace = true;
        } else if eq_ic(a, "ABSTTL") {
            o.absttl = true;
        } else if eq_ic(a, "IDLETIME") && more && o.freq.is_none() {
            let n = arg_i64(args.get(i + 1))?;
            if n < 0 {
                return Err(CmdError::err("Invalid IDLETIME value, must be >= 0"));
            }
            o.idle = Some(n as u64);
            i += 1;
        } else if eq_ic(a, "FREQ") && more && o.idle.is_none() {
            let n = arg_i64(args.get(i + 1))?;
            if !(0..=255).contains(&n) {
                return Err(CmdError::err("Invalid FREQ value, must be >= 0 and <= 255"));
            }
            o.freq = Some(n as u8);
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok(o)
}

/// RESTORE's payload error, as Redis words it.
fn payload_error(e: &RdbError) -> CmdError {
    match e {
        RdbError::BadHeader(_) | RdbError::Checksum { .. } => {
            CmdError::err("DUMP payload version or checksum are wrong")
        }
        _ => {
            // Redis's rdbReportError line, which operators (and the suite) grep.
            crate::log_warning!(
                "Internal error in RDB reading offset 0, function at rdb.c:0 -> {e}"
            );
            CmdError::err("Bad data format")
        }
    }
}

fn restore(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, ttl_arg) = (args.get(1), args.get(2));
    let o = parse_restore(args)?;
    // Decoded before locking; its errors are reported in Redis's order.
    let ttl = arg_i64(ttl_arg);
    let value = decode::decode_dump_payload(args.get(3), &ctx.core.hot.encoding);
    let lfu_policy = ctx.core.hot.eviction.policy().is_lfu();
    let mut l = ctx.open(key);
    let old_version = l.entry(key).map(|e| e.version);
    if old_version.is_some() && !o.replace {
        return Err(CmdError::Msg(
            "BUSYKEY Target key name already exists.".into(),
        ));
    }
    let ttl = ttl?;
    if ttl < 0 {
        return Err(CmdError::err("Invalid TTL value, must be >= 0"));
    }
    let value = value.map_err(|e| payload_error(&e))?;
    let now = ctx.now_ms as i64;
    let at = match (ttl, o.absttl) {
        (0, _) => 0,
        (t, true) => t,
        (t, false) => t.saturating_add(now),
    };
    let version = match old_version {
        Some(v) => ctx.version_after(v),
        None => ctx.new_version(),
    };
    if old_version.is_some() {
        l.remove(key);
    }
    if at != 0 && at <= now && ctx.replay_version.is_none() {
        // Already expired: the key is not created (the old one is gone);
        // a replica or AOF replay creates it and lets the expiry remove it.
        if old_version.is_some() {
            ctx.propagate(version, &[b"DEL", key]);
            ctx.notify(class::GENERIC, "del", key);
        }
        drop(l);
        ctx.out.ok();
        return Ok(());
    }
    // A KEYDB.CRON job (KEYDB.CRON and the AOF propagate jobs so): due
    // for the scheduler, which checks whether this node runs it.
    let job_due = match &value {
        crate::keyspace::Value::Cron(j) => Some(j.next_ms),
        _ => None,
    };
    l.put(key, value, at as u64, version);
    if let Some(e) = l.entry(key) {
        set_access(e, &o, lfu_policy, lru_clock(ctx.now_ms));
    }
    if let Some(due) = job_due {
        ctx.core.cron.add(ctx.db(), key, due);
    }
    propagate_restore(ctx, version, args, ttl != 0 && !o.absttl, at);
    ctx.notify(class::GENERIC, "restore", key);
    ctx.signal_ready(ctx.db(), key);
    drop(l);
    ctx.out.ok();
    Ok(())
}

/// IDLETIME (under an LRU or no policy) or FREQ (under an LFU policy) on
/// the new entry, as Redis's objectSetLRUOrLFU; the other is ignored.
fn set_access(e: &mut Entry, o: &RestoreOpts, lfu_policy: bool, now_lru: u32) {
    if lfu_policy {
        if let Some(f) = o.freq {
            e.set_lfu(f);
            e.set_lru(now_lru);
        }
    } else if let Some(idle) = o.idle {
        e.set_lru(now_lru.wrapping_sub(idle.min(0xFF_FFFF) as u32) & 0xFF_FFFF);
    }
}

/// RESTORE as received, or with its TTL made absolute and ABSTTL appended.
fn propagate_restore(ctx: &mut Ctx, version: u64, args: Args, rewrite: bool, at: i64) {
    let at = at.to_string();
    let mut argv: Vec<&[u8]> = (0..args.len()).map(|i| args.get(i)).collect();
    if rewrite {
        argv[2] = at.as_bytes();
        argv.push(b"ABSTTL");
    }
    ctx.propagate(version, &argv);
}

// ---------------------------------------------------------------- MIGRATE

struct MigrateOpts<'a> {
    host: &'a [u8],
    port: &'a [u8],
    keys: Vec<&'a [u8]>,
    db: i64,
    timeout_ms: u64,
    copy: bool,
    replace: bool,
    auth: Option<(Option<&'a [u8]>, &'a [u8])>,
}

fn parse_migrate(args: Args<'_>) -> Result<MigrateOpts<'_>, CmdError> {
    let mut o = MigrateOpts {
        host: args.get(1),
        port: args.get(2),
        keys: vec![args.get(3)],
        db: 0,
        timeout_ms: 0,
        copy: false,
        replace: false,
        auth: None,
    };
    let mut i = 6;
    while i < args.len() {
        let a = args.get(i);
        let left = args.len() - i - 1;
        if eq_ic(a, "COPY") {
            o.copy = true;
        } else if eq_ic(a, "REPLACE") {
            o.replace = true;
        } else if eq_ic(a, "AUTH") {
            if left < 1 {
                return Err(CmdError::Syntax);
            }
            o.auth = Some((None, args.get(i + 1)));
            i += 1;
        } else if eq_ic(a, "AUTH2") {
            if left < 2 {
                return Err(CmdError::Syntax);
            }
            o.auth = Some((Some(args.get(i + 1)), args.get(i + 2)));
            i += 2;
        } else if eq_ic(a, "KEYS") {
            if !args.get(3).is_empty() {
                return Err(CmdError::err(
                    "When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            o.keys = (i + 1..args.len()).map(|j| args.get(j)).collect();
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let timeout = arg_i64(args.get(5))?;
    o.db = arg_i64(args.get(4))?;
    o.timeout_ms = if timeout <= 0 { 1000 } else { timeout as u64 };
    Ok(o)
}

/// MIGRATE's key positions: the key argument, or those after KEYS (the
/// arguments of AUTH and AUTH2 skipped, as Redis's migrateGetKeys).
fn migrate_keys(args: Args) -> Vec<usize> {
    let mut i = 6;
    while i < args.len() {
        let a = args.get(i);
        if eq_ic(a, "AUTH") {
            i += 1;
        } else if eq_ic(a, "AUTH2") {
            i += 2;
        } else if eq_ic(a, "KEYS") && args.get(3).is_empty() {
            return (i + 1..args.len()).collect();
        }
        i += 1;
    }
    vec![3]
}

/// A key read for migration: its payload, TTL and the version it had.
struct Outgoing<'a> {
    key: &'a [u8],
    payload: Vec<u8>,
    ttl: i64,
    version: u64,
}

fn io_error(what: &str) -> CmdError {
    CmdError::Msg(format!("IOERR error or timeout {what} to target instance"))
}

fn migrate(ctx: &mut Ctx, args: Args) -> CmdResult {
    let o = parse_migrate(args)?;
    let compress = compress(ctx);
    let now = ctx.now_ms;
    let mut l = ctx.open_many(o.keys.iter().copied());
    let mut out = Vec::new();
    for &key in &o.keys {
        if let Some(e) = l.entry(key) {
            let ttl = match e.expire_at() {
                0 => 0,
                at => (at as i64 - now as i64).max(1),
            };
            out.push(Outgoing {
                key,
                payload: encode::dump_payload(&e.value, compress),
                ttl,
                version: e.version,
            });
        }
    }
    drop(l);
    if out.is_empty() {
        ctx.out.simple("NOKEY");
        return Ok(());
    }
    let timeout = Duration::from_millis(o.timeout_ms);
    let mut stream = connect(o.host, o.port, timeout)
        .ok_or_else(|| CmdError::Msg("IOERR error or timeout connecting to the client".into()))?;
    let request = migrate_request(&o, &out);
    if stream.write_all(&request).is_err() {
        return Err(io_error("writing"));
    }
    let (acked, error) = read_replies(&mut stream, &o, out.len());
    if !o.copy {
        delete_migrated(ctx, &out[..acked.len()], &acked);
    }
    match error {
        Some(e) => Err(e),
        None => {
            ctx.out.ok();
            Ok(())
        }
    }
}

fn connect(host: &[u8], port: &[u8], timeout: Duration) -> Option<TcpStream> {
    let host = std::str::from_utf8(host).ok()?;
    let port: u16 = std::str::from_utf8(port).ok()?.parse().ok()?;
    let addr = (host, port).to_socket_addrs().ok()?.next()?;
    let s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    s.set_nodelay(true).ok()?;
    Some(s)
}

/// AUTH (if asked), SELECT, then one RESTORE per key.
fn migrate_request(o: &MigrateOpts, out: &[Outgoing]) -> Vec<u8> {
    let mut buf = Vec::new();
    match o.auth {
        Some((Some(user), pass)) => request::command(&mut buf, &[b"AUTH", user, pass]),
        Some((None, pass)) => request::command(&mut buf, &[b"AUTH", pass]),
        None => {}
    }
    request::command(&mut buf, &[b"SELECT", o.db.to_string().as_bytes()]);
    for k in out {
        let ttl = k.ttl.to_string();
        let mut argv: Vec<&[u8]> = vec![b"RESTORE", k.key, ttl.as_bytes(), &k.payload];
        if o.replace {
            argv.push(b"REPLACE");
        }
        request::command(&mut buf, &argv);
    }
    buf
}

fn read_line(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = Vec::new();
    Read::take(&mut *r, 64 * 1024)
        .read_until(b'\n', &mut line)
        .ok()?;
    if !line.ends_with(b"\r\n") {
        return None;
    }
    line.truncate(line.len() - 2);
    (!line.is_empty()).then_some(line)
}

/// Reads the replies; returns which keys the target accepted (in order, up
/// to the first unreadable reply) and the error to answer with, if any.
fn read_replies(
    stream: &mut TcpStream,
    o: &MigrateOpts,
    n: usize,
) -> (Vec<bool>, Option<CmdError>) {
    let mut r = BufReader::new(stream);
    let mut pre = Vec::new();
    for _ in 0..(1 + o.auth.is_some() as usize) {
        match read_line(&mut r) {
            Some(l) => pre.push(l),
            None => return (Vec::new(), Some(io_error("reading"))),
        }
    }
    let pre_err = pre.into_iter().find(|l| l[0] == b'-');
    let mut acked = Vec::with_capacity(n);
    let mut error = None;
    for _ in 0..n {
        let Some(line) = read_line(&mut r) else {
            return (acked, error.or_else(|| Some(io_error("reading"))));
        };
        let failed = match &pre_err {
            Some(e) => Some(e.clone()),
            None => (line[0] == b'-').then_some(line),
        };
        if let (Some(e), None) = (&failed, &error) {
            error = Some(CmdError::err(format!(
                "Target instance replied with error: {}",
                String::from_utf8_lossy(&e[1..])
            )));
        }
        acked.push(failed.is_none());
    }
    (acked, error)
}

/// Deletes the keys the target accepted, unless they changed meanwhile,
/// and propagates them as one DEL (Redis rewrites MIGRATE so), a single
/// record for the replicas and the AOF to apply as a unit.
fn delete_migrated(ctx: &mut Ctx, out: &[Outgoing], acked: &[bool]) {
    let keys: Vec<&[u8]> = out.iter().map(|k| k.key).collect();
    let mut l = ctx.open_many(keys.iter().copied());
    let mut deleted: Vec<&[u8]> = vec![b"DEL"];
    let mut newest = 0;
    for (k, _) in out.iter().zip(acked).filter(|(_, &a)| a) {
        if l.entry(k.key).is_some_and(|e| e.version == k.version) {
            let old = l.remove(k.key);
            deleted.push(k.key);
            newest = newest.max(k.version);
            ctx.notify(class::GENERIC, "del", k.key);
            drop(old);
        }
    }
    if deleted.len() > 1 {
        // One dirty per key, as Redis counts (propagate adds the first).
        ctx.stats.add_dirty(deleted.len() as u64 - 2);
        let v = ctx.version_after(newest);
        ctx.propagate(v, &deleted);
    }
    drop(l);
}
