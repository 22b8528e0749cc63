//! The command families, and what every handler shares: how writes are
//! reported (`Ctx::propagate` and its kin, below) and how commands run
//! in-process (`replay`, `run_local`).
//!
//! Each family module (`strings.rs`, `keys.rs`, ... like Redis's t_string.c)
//! exports a static slice of [`Command`]s. [`CommandTable`] (`core/table.rs`)
//! gathers them once at start-up; it is the single source of truth for
//! dispatch, arity checks, COMMAND INFO/DOCS/GETKEYS, ACL categories and
//! which commands propagate.
//!
//! Every list of commands, top-level or subcommands, is written in one form,
//! the [`command_table!`] macro: a `family(..)` line with the group and the
//! ACL category its commands share, then one entry per command, its head
//! (name, arity, flags, handler, extra ACL categories) followed by the const
//! builder calls for the facts that vary per command (docs, keys, key specs,
//! tips, subcommands). What Redis derives is not written: the ACL categories
//! implied by the flags (see the macro), the key specs of plain first/last/step
//! keys (`keyspec::derived`), `movablekeys`. Why a macro and not only the const
//! builder: docs/DECISIONS.md (39).
//!
//! A handler receives a [`Ctx`] (the core, the admin interface, its client's
//! state, the worker's clock and counters, the reply buffer) and the parsed arguments. It
//! first parses its options into plain values, touching no data; then it locks
//! the shards it needs, executes, writes its reply into `ctx.out`, and reports
//! its write through [`Ctx::propagate`]. Failures are returned as typed
//! [`CmdError`]s and rendered to Redis's exact strings by the dispatcher.

pub(crate) mod access;
pub(crate) mod acl;
pub(crate) mod bitops;
pub(crate) mod blocking;
pub(crate) mod call;
pub(crate) mod collscan;
pub(crate) mod config_cmd;
pub(crate) mod connection;
pub(crate) mod cron;
pub(crate) mod dump;
pub(crate) mod events;
pub(crate) mod evict;
pub(crate) mod expire;
pub(crate) mod geo;
pub(crate) mod gone;
pub(crate) mod hash_ttl;
pub(crate) mod hashes;
pub(crate) mod hll;
pub(crate) mod keys;
pub(crate) mod lists;
pub(crate) mod member_expire;
pub(crate) mod multi;
pub(crate) mod pubsub;
pub(crate) mod server_cmds;
pub(crate) mod sets;
pub(crate) mod sort;
pub(crate) mod stream_groups;
pub(crate) mod streams;
pub(crate) mod strings;
pub(crate) mod tracking;
pub(crate) mod unbuilt;
pub(crate) mod util;
pub(crate) mod zsets;

pub(crate) use crate::core::ctx::Ctx;
pub(crate) use crate::core::error::CmdError;
pub(crate) use crate::core::keyspec;
pub(crate) use crate::core::table::command_table;
pub(crate) use crate::core::table::{flags, CmdResult, Command, CommandId, CommandTable, Handler};

use crate::core::admin::Admin;
use crate::core::client::ClientState;
use crate::core::stats::WorkerStats;
use crate::core::Core;
use crate::effects::{Base, Effect, EffectRef};
use crate::keyspace::hlc::Hlc;
use crate::protocol::{Args, ReplyBuf};

#[cfg(test)]
mod form_tests {
    use super::{flags::*, Command};

    /// Redis 7's ACL categories.
    const CATEGORIES: &str = "keyspace read write set sortedset list hash string bitmap \
        hyperloglog geo stream pubsub admin fast slow blocking dangerous connection \
        transaction scripting";

    /// Whether `flags` imply category `cat` (setImplicitACLCategories);
    /// @fast and @slow always follow from the FAST flag.
    fn implied(flags: u32, cat: &str) -> bool {
        match cat {
            "write" => flags & WRITE != 0,
            "read" => flags & READONLY != 0,
            "admin" | "dangerous" => flags & ADMIN != 0,
            "pubsub" => flags & PUBSUB != 0,
            "blocking" => flags & BLOCKING != 0,
            "fast" | "slow" => true,
            _ => false,
        }
    }

    #[test]
    fn entries_declare_only_known_categories_their_flags_do_not_imply() {
        fn check(cmds: &[Command]) {
            for c in cmds {
                for cat in c.acl.split_whitespace() {
                    let known = CATEGORIES.split_whitespace().any(|k| k == cat);
                    assert!(known, "{}: no category @{cat}", c.name);
                    assert!(
                        !implied(c.flags, cat),
                        "{}: @{cat} follows from the flags",
                        c.name
                    );
                }
                check(c.subcommands);
            }
        }
        // The whole table, the replication commands included.
        for family in crate::server::command_families() {
            check(family);
        }
    }
}

/// The families of this layer; the server adds those of the layers above
/// (`server::command_families`) and builds the table from all of them.
pub(crate) fn families() -> [&'static [Command]; 23] {
    [
        connection::COMMANDS,
        strings::COMMANDS,
        bitops::COMMANDS,
        keys::COMMANDS,
        expire::COMMANDS,
        member_expire::COMMANDS,
        lists::COMMANDS,
        hashes::COMMANDS,
        hash_ttl::COMMANDS,
        sets::COMMANDS,
        zsets::COMMANDS,
        hll::COMMANDS,
        geo::COMMANDS,
        streams::COMMANDS,
        sort::COMMANDS,
        multi::COMMANDS,
        pubsub::COMMANDS,
        server_cmds::COMMANDS,
        config_cmd::COMMANDS,
        acl::COMMANDS,
        dump::COMMANDS,
        unbuilt::COMMANDS,
        cron::COMMANDS,
    ]
}

impl Ctx<'_> {
    /// [`Self::propagate`] of the command's own words: those of a usual
    /// write (SADD k m, HSET k f v, INCRBY k n) go on the stack, so a
    /// write makes no allocation for its record's argv.
    pub fn propagate_args(&mut self, version: u64, args: &Args) {
        const FEW: usize = 8;
        if args.len() > FEW {
            let argv: Vec<&[u8]> = args.iter().collect();
            return self.propagate(version, &argv);
        }
        let mut words: [&[u8]; FEW] = [&[]; FEW];
        for (w, a) in words.iter_mut().zip(args.iter()) {
            *w = a;
        }
        self.propagate(version, &words[..args.len()]);
    }

    /// Reports a write on the current database (see `effects.rs`). Call while
    /// still holding the shard locks of the keys written.
    pub fn propagate(&mut self, version: u64, argv: &[&[u8]]) {
        self.propagate_db(self.client.db, version, argv);
    }

    pub fn propagate_db(&mut self, db: usize, version: u64, argv: &[&[u8]]) {
        self.stats.add_dirty(1);
        if self.core.watch.active() {
            multi::touch_write(self.core, db, argv);
        }
        if self.core.tracking.active() {
            tracking::touch_write(self, argv);
        }
        self.emit_as_sent(db, version, argv);
    }

    /// [`Self::emit_effect`], in the client's spelling when the record is
    /// the command it sent.
    fn emit_as_sent(&mut self, db: usize, version: u64, argv: &[&[u8]]) {
        if self.core.effects.enabled() {
            if let Some(s) = self.sent.filter(|s| as_sent(s, argv)) {
                let mut v = argv.to_vec();
                v[0] = s.get(0);
                return self.emit_effect(db, version, &v);
            }
        }
        self.emit_effect(db, version, argv);
    }

    /// Sends a record to the effect stream, or to the running EXEC's buffer
    /// (which emits its records as one unit, see `multi.rs`).
    fn emit_effect(&mut self, db: usize, version: u64, argv: &[&[u8]]) {
        if !self.core.effects.enabled() {
            // Nobody records (an active node's stream starts at its first
            // peer): the fact noted goes with no record, not the next one.
            if let Some(a) = &mut self.active {
                a.facts.clear();
            }
            return;
        }
        // The record's bases and the merge fact a write noted
        // (keyspace/merge/fact.rs) go with it, each built in a buffer of the
        // write's that goes back for the next: no allocation per record.
        let Some(a) = &mut self.active else {
            return self.emit_effect_based(db, version, argv, &[], &[]);
        };
        let facts = std::mem::take(&mut a.facts);
        let mut bases = std::mem::take(&mut a.record_bases);
        bases.clear();
        bases.extend(bases_in(argv, a));
        self.emit_effect_based(db, version, argv, &bases, &facts);
        if let Some(a) = &mut self.active {
            a.facts = facts;
            a.facts.clear();
            a.record_bases = bases;
        }
    }

    /// [`Self::emit_effect`] with the bases and facts given.
    fn emit_effect_based(
        &mut self,
        db: usize,
        version: u64,
        argv: &[&[u8]],
        bases: &[Base],
        facts: &[crate::effects::Fact],
    ) {
        if self.core.effects.enabled() {
            let e = EffectRef {
                db,
                version,
                argv,
                bases,
                facts,
            };
            match &mut self.client.exec_effects {
                Some(buf) => buf.push(e.to_owned()),
                None if deferring() => defer(e.to_owned()),
                None => self.core.effects.emit(&e),
            }
        }
    }

    /// How a key deleted because its expiry passed is propagated: UNLINK
    /// with `lazyfree-lazy-expire`, else DEL (Redis's propagateDeletion).
    pub fn expired_del_name(&self) -> &'static [u8] {
        gone::Why::Expired.del_name(self.core)
    }

    /// How a user deletion (GETDEL) is propagated: UNLINK with
    /// `lazyfree-lazy-user-del`, else DEL.
    pub fn user_del_name(&self) -> &'static [u8] {
        use std::sync::atomic::Ordering::Relaxed;
        if self.core.hot.lazyfree_user_del.load(Relaxed) {
            b"UNLINK"
        } else {
            b"DEL"
        }
    }

    /// Reports a write Redis propagates as several records (SPOP with a
    /// count: one SREM per member): outside a transaction, several records
    /// go between MULTI and EXEC, as Redis wraps a command's records.
    pub fn propagate_unit(&mut self, version: u64, records: &[Vec<&[u8]>]) {
        // A fact noted for the unit goes with its first write, not the
        // MULTI (XREADGROUP's, commands/stream_groups.rs).
        let facts = self.active.as_mut().map(|a| std::mem::take(&mut a.facts));
        self.propagate_unit_facts(version, records, vec![(0, facts.unwrap_or_default())]);
    }

    /// [`Self::propagate_unit`], each record `i` of `facts` (in order)
    /// carrying its fact (a read of several streams: each stream's first
    /// record, commands/stream_groups.rs).
    pub fn propagate_unit_facts(
        &mut self,
        version: u64,
        records: &[Vec<&[u8]>],
        facts: Vec<(usize, Vec<crate::effects::Fact>)>,
    ) {
        // While expiry DELs are held back, their release wraps the unit.
        let wrap = records.len() > 1
            && self.client.exec_effects.is_none()
            && self.core.effects.enabled()
            && !deferring();
        let db = self.client.db;
        if wrap {
            self.emit_effect(db, version, &[b"MULTI"]);
        }
        let mut facts = facts.into_iter().peekable();
        for (i, r) in records.iter().enumerate() {
            if let (Some((_, f)), Some(a)) = (facts.next_if(|f| f.0 == i), &mut self.active) {
                a.facts = f;
            }
            self.propagate_db(db, version, r);
        }
        if wrap {
            self.emit_effect(db, version, &[b"EXEC"]);
        }
    }

    /// Sends a record to replicas that changed no key (PUBLISH): no dirty
    /// count, no WATCH or tracking touch, and the AOF skips it.
    pub fn propagate_repl_only(&mut self, argv: &[&[u8]]) {
        let v = self.new_version();
        self.emit_as_sent(self.client.db, v, argv);
    }

    /// Reports that an expired key, whose version was `prev`, was deleted
    /// by this command's lazy expiry with the stamp `stamp` (see `gone.rs`).
    pub fn propagate_expired(&mut self, db: usize, key: &[u8], stamp: u64, prev: u64) {
        gone::key_gone(&self.gone(), gone::Why::Expired, db, key, |argv| {
            let bases = gone::bases(self.core, prev);
            self.emit_effect_based(db, stamp, argv, &bases, &[]);
        });
    }

    /// [`Self::propagate_expired`] for a key a `Locked` view expired while
    /// locking: outside EXEC its DEL is held back with the records that
    /// follow until the view is dropped ([`flush_deferred`], still under
    /// the locks), which wraps several in MULTI/EXEC as Redis wraps a
    /// command's records (MGET over two expired keys, SET on an expired
    /// key). Returns whether a record was deferred.
    pub(crate) fn propagate_expired_deferred(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: u64,
        prev: u64,
    ) -> bool {
        if !self.core.effects.enabled() || self.client.exec_effects.is_some() {
            self.propagate_expired(db, key, stamp, prev);
            return false;
        }
        gone::key_gone(&self.gone(), gone::Why::Expired, db, key, |argv| {
            let argv = argv.iter().map(|a| a.to_vec()).collect();
            let bases = gone::bases(self.core, prev);
            defer(Effect {
                db,
                version: stamp,
                argv,
                bases,
                facts: vec![],
            });
        });
        true
    }
}

impl Ctx<'_> {
    /// The records of members a `Locked` view expired while locking
    /// (`gone::members_gone`): their HDEL / SREM / ZREM (or the emptied
    /// key's DEL) go out at once, before the command's own record, never
    /// wrapped with it in MULTI/EXEC: a Redis replica refuses the
    /// member-TTL commands, and a transaction holding one would lose the
    /// removals with it (docs/DECISIONS.md 119).
    pub(crate) fn propagate_members_expired(
        &mut self,
        db: usize,
        m: &crate::keyspace::member_ttl::MembersGone,
        stamp: u64,
    ) {
        let bases = gone::bases(self.core, m.prev);
        let mut out: Option<Vec<Vec<u8>>> = None;
        gone::members_gone(&self.gone(), db, m, |argv| {
            out = Some(argv.iter().map(|a| a.to_vec()).collect());
        });
        if let Some(argv) = out {
            let refs: Vec<&[u8]> = argv.iter().map(|a| &a[..]).collect();
            self.emit_effect_based(db, stamp, &refs, &bases, &[]);
        }
    }
}

/// Whether a record of the command `name` writes a key that merges (a
/// counter, a set, a hash, a sorted set: keyspace/merge/) even when the key
/// did not exist before it: peers merge its state rather than replay it.
fn merging_command(name: &[u8]) -> bool {
    // Lowered into a stack buffer and matched, not compared name by name
    // with eq_ignore_ascii_case: this runs for every write's record under
    // active replication (~40 comparisons were ~80 instructions an INCR).
    let mut buf = [0u8; 16];
    let Some(lower) = buf.get_mut(..name.len()) else {
        return false; // longer than any merging command's name
    };
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    matches!(
        &*lower,
        b"lpush"
            | b"rpush"
            | b"lpushx"
            | b"rpushx"
            | b"linsert"
            | b"lset"
            | b"lrem"
            | b"ltrim"
            | b"lpop"
            | b"rpop"
            | b"lmpop"
            | b"blpop"
            | b"brpop"
            | b"blmpop"
            | b"lmove"
            | b"blmove"
            | b"rpoplpush"
            | b"brpoplpush"
            | b"incr"
            | b"incrby"
            | b"decr"
            | b"decrby"
            | b"sadd"
            | b"srem"
            | b"smove"
            | b"hset"
            | b"hsetnx"
            | b"hmset"
            | b"hdel"
            | b"hincrby"
            | b"hincrbyfloat"
            | b"zadd"
            | b"zrem"
            | b"zincrby"
            | b"zremrangebyscore"
            | b"zremrangebyrank"
            | b"zremrangebylex"
            | b"zpopmin"
            | b"zpopmax"
            | b"spop"
    )
}

/// The bases of a record: the keys among `argv`'s arguments that the
/// command opened, each once, with the version it had then.
fn bases_in<'a>(
    argv: &'a [&'a [u8]],
    opened: &'a crate::core::ctx::ActiveWrite,
) -> impl Iterator<Item = Base> + 'a {
    // The command's name is looked at only for a key not known to merge.
    let mut merging = None;
    opened.bases_merged().filter_map(move |(key, v, merged)| {
        let i = argv.iter().skip(1).position(|a| *a == key)?;
        let by_name = || argv.first().is_some_and(|name| merging_command(name));
        let flag = if merged || *merging.get_or_insert_with(by_name) {
            crate::effects::MERGED_BASE
        } else {
            0
        };
        Some(((i as u32 + 1) | flag, v))
    })
}

thread_local! {
    /// Records held back while a `Locked` view that lazily expired a key is
    /// open (see [`Ctx::propagate_expired_deferred`]).
    static DEFERRED: std::cell::RefCell<Vec<Effect>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether records are being held back (see [`flush_deferred`]).
fn deferring() -> bool {
    DEFERRED.with(|d| !d.borrow().is_empty())
}

/// Holds `e` back (the first one starts holding).
fn defer(e: Effect) {
    DEFERRED.with(|d| d.borrow_mut().push(e));
}

/// Emits the held-back records: one alone, several between MULTI and EXEC.
/// Called when the `Locked` view that started holding them is dropped.
pub(crate) fn flush_deferred(srv: &Core) {
    let records = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
    multi::emit_unit(srv, records);
}

/// Whether a record is the sent command itself, but for the name's case.
fn as_sent(sent: &Args, argv: &[&[u8]]) -> bool {
    sent.len() == argv.len()
        && !argv.is_empty()
        && sent.get(0) != argv[0]
        && sent.get(0).eq_ignore_ascii_case(argv[0])
        && (1..argv.len()).all(|i| sent.get(i) == argv[i])
}

/// Replays one effect record on `srv`'s keyspace, as a replica or AOF loader
/// does: the command runs with the record's version instead of a fresh stamp.
pub fn replay(
    host: &dyn Admin,
    clock: &mut Hlc,
    stats: &WorkerStats,
    effect: &Effect,
) -> Result<(), String> {
    // A transaction's bounds: its writes follow as ordinary records.
    if let [name] = effect.argv.as_slice() {
        if name.eq_ignore_ascii_case(b"multi") || name.eq_ignore_ascii_case(b"exec") {
            return Ok(());
        }
    }
    let mut client = ClientState::new(0);
    let mut out = ReplyBuf::new(2);
    let owned = crate::protocol::OwnedArgs::new(&effect.argv);
    let args = owned.args();
    let mut r = Replayer {
        host,
        clock,
        stats,
        client: &mut client,
        out: &mut out,
    };
    r.replay(effect.db, effect.version, args)
}

/// What replaying records needs, kept across records by a caller that
/// replays many (an active peer's link: no allocation per record).
pub(crate) struct Replayer<'a> {
    pub host: &'a dyn Admin,
    pub clock: &'a mut Hlc,
    pub stats: &'a WorkerStats,
    pub client: &'a mut ClientState,
    pub out: &'a mut ReplyBuf,
}

impl Replayer<'_> {
    /// Runs the command `args` in `db` with the record's version.
    pub(crate) fn replay(&mut self, db: usize, version: u64, args: Args) -> Result<(), String> {
        let srv = self.host.core();
        let id = srv
            .commands
            .lookup(args.get(0))
            .ok_or("unknown command in effect")?;
        self.client.db = db;
        self.out.buf.clear();
        let mut ctx = Ctx {
            core: srv,
            admin: self.host,
            client: self.client,
            out: self.out,
            clock: self.clock,
            stats: self.stats,
            now_ms: crate::keyspace::hlc::unix_ms(),
            replay_version: Some(version),
            sent: None,
            active: srv.active.then(crate::core::ctx::ActiveWrite::new),
        };
        let (r, _) = call::call(&mut ctx, id, args, call::Caller::Replay, None);
        r.map_err(|e| e.render())
    }
}

/// Runs one command in-process as a connection would (command and subcommand
/// lookup, arity check), for tests and tools that drive a [`Server`] without
/// sockets. Returns the RESP reply, or the error line without its '-'.
pub fn run_local(
    host: &dyn Admin,
    clock: &mut Hlc,
    stats: &WorkerStats,
    client: &mut ClientState,
    argv: &[&[u8]],
) -> Result<Vec<u8>, String> {
    let owned = crate::protocol::OwnedArgs::new(argv);
    let caller = call::Caller::Internal;
    run_args_as(host, clock, stats, client, owned.args(), caller)
}

/// A command of a replica's master stream, already parsed: [`run_local`]
/// as Redis's master client ([`call::Caller::Master`]), without copying it.
pub(crate) fn run_master(
    host: &dyn Admin,
    clock: &mut Hlc,
    stats: &WorkerStats,
    client: &mut ClientState,
    args: Args,
) -> Result<Vec<u8>, String> {
    let caller = call::Caller::Master;
    run_args_as(host, clock, stats, client, args, caller)
}

/// Runs `args` as `caller`; inlined into each of the two above, so that
/// `call()`'s steps for the caller are decided when it is compiled.
#[inline(always)]
fn run_args_as(
    host: &dyn Admin,
    clock: &mut Hlc,
    stats: &WorkerStats,
    client: &mut ClientState,
    args: Args,
    caller: call::Caller,
) -> Result<Vec<u8>, String> {
    let srv = host.core();
    if args.is_empty() {
        return Err("ERR empty command".into());
    }
    let unknown = || {
        format!(
            "ERR unknown command '{}'",
            String::from_utf8_lossy(args.get(0))
        )
    };
    let mut id = srv.commands.lookup(args.get(0)).ok_or_else(unknown)?;
    if srv.commands.has_subcommands(id) {
        let name = srv.commands.get(id).name.to_string();
        if args.len() < 2 {
            return Err(CmdError::WrongArity(name).render());
        }
        id = srv.commands.lookup_sub(id, args.get(1)).ok_or_else(|| {
            CmdError::UnknownSubcommand {
                cmd: name,
                sub: String::from_utf8_lossy(args.get(1)).into_owned(),
            }
            .render()
        })?;
    }
    if matches!(caller, call::Caller::Master) {
        // As Redis's processCommand sets c->lastcmd, queued or not.
        client.last_cmd = id;
    }
    let cmd = srv.commands.get(id);
    if !cmd.arity_ok(args.len()) {
        return Err(CmdError::WrongArity(srv.commands.full_names[id].clone()).render());
    }
    if matches!(caller, call::Caller::Master) {
        let write = cmd.flags_for(srv, args) & flags::WRITE != 0;
        crate::core::replica_disk::check(host, write, cmd.name == "ping");
    }
    let mut out = ReplyBuf::new(client.resp);
    // In MULTI the command is queued, as on a connection.
    match multi::intercept(srv, client, &mut out, args, Ok(id)) {
        Ok(Some(_)) => {}
        Ok(None) => return Ok(out.buf),
        Err((_, e)) => return Err(e.render()),
    }
    let mut ctx = Ctx {
        core: srv,
        admin: host,
        client,
        out: &mut out,
        clock,
        stats,
        now_ms: crate::keyspace::hlc::unix_ms(),
        replay_version: None,
        sent: Some(args),
        active: crate::core::ctx::ActiveWrite::for_command(srv, cmd.flags),
    };
    // Counted in INFO commandstats as a connection's command is: a replica
    // counts what its master's stream ran, as Redis's call() does for it.
    let (r, _) = call::call(&mut ctx, id, args, caller, None);
    r.map_err(|e| e.render())?;
    Ok(out.buf)
}
