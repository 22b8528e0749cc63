//! The command table and dispatch.
//!
//! Each family module (`strings.rs`, `keys.rs`, ... like Redis's t_string.c)
//! exports a static slice of [`Command`]s. [`CommandTable`] gathers them once
//! at start-up; it is the single source of truth for dispatch, arity checks,
//! COMMAND INFO/DOCS/GETKEYS, ACL categories and which commands propagate.
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
//! A handler receives a [`Ctx`] (the shared server, its client's state, the
//! worker's clock and counters, the reply buffer) and the parsed arguments. It
//! first parses its options into plain values, touching no data; then it locks
//! the shards it needs, executes, writes its reply into `ctx.out`, and reports
//! its write through [`Ctx::propagate`]. Failures are returned as typed
//! [`CmdError`]s and rendered to Redis's exact strings by the dispatcher.

pub mod access;
pub mod bitops;
pub mod blocking;
pub mod collscan;
pub mod config_cmd;
pub mod connection;
pub mod dump;
pub mod events;
pub mod evict;
pub mod expire;
pub mod gone;
pub mod hashes;
pub mod keys;
pub mod keyspec;
pub mod lists;
pub mod multi;
pub mod pubsub;
pub mod server_cmds;
pub mod sets;
pub mod sort;
pub mod strings;
pub mod tracking;
pub mod util;
pub mod zsets;

// hashbrown (foldhash) rather than std (SipHash): the table is looked up once per command.
use hashbrown::HashMap;

pub use crate::core::error::CmdError;

use crate::core::admin::Admin;
use crate::core::client::ClientState;
use crate::core::stats::WorkerStats;
use crate::core::Core;
use crate::effects::{Effect, EffectRef};
use crate::keyspace::hlc::Hlc;
use crate::protocol::{Args, ReplyBuf};

pub type CmdResult = Result<(), CmdError>;
pub type Handler = fn(&mut Ctx, Args) -> CmdResult;
/// Extracts key positions for commands whose keys are not first/last/step.
pub type KeysFn = fn(Args) -> Vec<usize>;
/// The key-spec flags of the key at a position, for `variable_flags` commands.
pub type KeyFlagsFn = fn(Args, usize) -> Option<&'static [&'static str]>;

/// Command flags (Redis 7's names, see COMMAND INFO).
pub mod flags {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const ADMIN: u32 = 1 << 3;
    pub const PUBSUB: u32 = 1 << 4;
    pub const NOSCRIPT: u32 = 1 << 5;
    pub const BLOCKING: u32 = 1 << 6;
    pub const LOADING: u32 = 1 << 7;
    pub const STALE: u32 = 1 << 8;
    pub const SKIP_MONITOR: u32 = 1 << 9;
    pub const SKIP_SLOWLOG: u32 = 1 << 10;
    pub const FAST: u32 = 1 << 11;
    pub const NO_AUTH: u32 = 1 << 12;
    pub const MAY_REPLICATE: u32 = 1 << 13;
    pub const NO_MULTI: u32 = 1 << 14;
    pub const ALLOW_BUSY: u32 = 1 << 15;
    pub const NO_MANDATORY_KEYS: u32 = 1 << 16;
    /// Runs only as `enable-debug-command` allows (Redis's CMD_PROTECTED;
    /// not shown by COMMAND INFO, as in Redis).
    pub const PROTECTED: u32 = 1 << 17;
    pub const NO_ASYNC_LOADING: u32 = 1 << 18;

    /// Flag names in the order Redis 7 prints them in COMMAND INFO, except
    /// `allow_busy`, which Redis prints after the derived `movablekeys`.
    pub const NAMES: &[(u32, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (SKIP_MONITOR, "skip_monitor"),
        (SKIP_SLOWLOG, "skip_slowlog"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (MAY_REPLICATE, "may_replicate"),
        (NO_MANDATORY_KEYS, "no_mandatory_keys"),
        (NO_ASYNC_LOADING, "no_async_loading"),
        (NO_MULTI, "no_multi"),
    ];
}

/*
 * The command-table form. Every family writes its list as
 *
 *     pub static COMMANDS: &[Command] = crate::commands::command_table! {
 *         family(group = "generic", acl = "keyspace"),
 *         cmd("del", -2, WRITE, del)
 *             .doc("1.0.0", "Deletes one or more keys.")
 *             .complexity("O(N)")
 *             .keys(1, -1, 1),
 *         cmd("flushdb", -1, WRITE, flushdb, acl = "dangerous")
 *             .group("server")
 *             .doc("1.0.0", "Remove all keys from the current database."),
 *         container("object", -2, object_parent)
 *             .doc("2.2.3", "A container for object introspection commands.")
 *             .subs(OBJECT_SUBS),
 *     };
 *
 * `family(..)` is written once per list: the docs group (COMMAND DOCS) and
 * the ACL category every command of the list carries ("" for none).
 *
 * `cmd(name, arity, flags, handler)` is one command; `, acl = ".."` adds the
 * categories that are neither the family's nor implied by the flags. Redis
 * 7 (server.c, setImplicitACLCategories) implies: write -> @write,
 * readonly -> @read, admin -> @admin @dangerous, pubsub -> @pubsub,
 * fast -> @fast, blocking -> @blocking, and @slow for whatever is not @fast.
 * COMMAND INFO adds those (`server_cmds/command.rs`, `acl_categories`), so an
 * entry never spells them out (a test below checks); what is left is e.g.
 * @dangerous on FLUSHDB or @connection on WAIT. There is no builder call for
 * categories: the family line and the head are the only places they go.
 *
 * `container(name, arity, handler)` is a command whose work is done by its
 * subcommands (CONFIG, CLIENT, OBJECT): no flags and no ACL category but
 * the implied @slow, as Redis's containers.
 *
 * The builder calls after the head are the `const fn`s of [`Command`], in
 * this order by convention: `group` (only for an entry outside its family's
 * group), `doc`, `complexity`, `keys`, `keys_fn`, `key_specs`,
 * `key_flags_fn`, `tips`, `subs`. Defaults: since 1.0.0, complexity O(1), no
 * keys, key specs derived from `keys` (`keyspec::derived`).
 * The whole list is one const expression, so the table stays static data.
 * Braces, not brackets: rustfmt leaves a `name! { }` body as written, so
 * every list keeps this layout (one line per head and per builder call, long
 * strings unbroken) whether or not its lines fit in 100 columns. Invoked by
 * its path, so a family's imports do not change for it.
 */
/// One list of the command table, in the form described above.
macro_rules! command_table {
    (
        family(group = $group:literal, acl = $acl:literal),
        $( $head:ident ( $($arg:tt)* ) $( .$method:ident ( $($marg:tt)* ) )* ),* $(,)?
    ) => {
        &[$(
            $crate::commands::command_table!(@head $group, $acl, $head($($arg)*))
                $( .$method($($marg)*) )*
        ),*]
    };
    (@head $group:literal, $acl:literal,
        cmd($name:literal, $arity:expr, $flags:expr, $handler:expr $(, acl = $extra:literal)? $(,)?)
    ) => {
        $crate::commands::Command {
            group: $group,
            acl: concat!($acl $(, " ", $extra)?),
            ..$crate::commands::Command::new($name, $arity, $flags, $handler)
        }
    };
    (@head $group:literal, $acl:literal, container($name:literal, $arity:expr, $handler:expr $(,)?)) => {
        $crate::commands::Command {
            group: $group,
            ..$crate::commands::Command::new($name, $arity, 0, $handler)
        }
    };
}
pub(crate) use command_table;

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

/// One entry of the command table.
pub struct Command {
    /// Lower-case name; subcommands use their own name ("get" for CONFIG GET).
    pub name: &'static str,
    /// Redis arity: N exact, -N at least N (the name counts).
    pub arity: i32,
    pub flags: u32,
    /// Declared ACL categories without '@', space-separated: the family's
    /// and the entry's extras (`command_table!`); those the flags imply are
    /// added by COMMAND INFO, not written here.
    pub acl: &'static str,
    pub first_key: i32,
    pub last_key: i32,
    pub key_step: i32,
    pub keys_fn: Option<KeysFn>,
    pub group: &'static str,
    pub summary: &'static str,
    pub since: &'static str,
    pub complexity: &'static str,
    pub handler: Handler,
    pub subcommands: &'static [Command],
    /// Key specs as Redis reports them; empty: derived from first/last/step
    /// (`keyspec::derived`).
    pub key_specs: &'static [keyspec::KeySpec],
    /// Per-key flags for commands whose flags depend on their arguments
    /// (`variable_flags`: SET with or without GET, SORT's STORE key);
    /// `None` for a key falls back to the specs.
    pub key_flags_fn: Option<KeyFlagsFn>,
    /// Command tips (COMMAND INFO field 8), e.g. "nondeterministic_output".
    pub tips: &'static [&'static str],
}

impl Command {
    /// A table entry with the common defaults, for `command_table!`.
    pub const fn new(name: &'static str, arity: i32, flags: u32, handler: Handler) -> Command {
        Command {
            name,
            arity,
            flags,
            acl: "",
            first_key: 0,
            last_key: 0,
            key_step: 0,
            keys_fn: None,
            group: "generic",
            summary: "",
            since: "1.0.0",
            complexity: "O(1)",
            handler,
            subcommands: &[],
            key_specs: &[],
            key_flags_fn: None,
            tips: &[],
        }
    }
    pub const fn keys(mut self, first: i32, last: i32, step: i32) -> Command {
        self.first_key = first;
        self.last_key = last;
        self.key_step = step;
        self
    }
    pub const fn keys_fn(mut self, f: KeysFn) -> Command {
        self.keys_fn = Some(f);
        self
    }
    /// The version that added the command, and its one-line summary.
    pub const fn doc(mut self, since: &'static str, summary: &'static str) -> Command {
        self.since = since;
        self.summary = summary;
        self
    }
    /// The docs group, for an entry outside its family's.
    pub const fn group(mut self, group: &'static str) -> Command {
        self.group = group;
        self
    }
    pub const fn complexity(mut self, c: &'static str) -> Command {
        self.complexity = c;
        self
    }
    pub const fn key_specs(mut self, specs: &'static [keyspec::KeySpec]) -> Command {
        self.key_specs = specs;
        self
    }
    pub const fn key_flags_fn(mut self, f: KeyFlagsFn) -> Command {
        self.key_flags_fn = Some(f);
        self
    }
    pub const fn tips(mut self, tips: &'static [&'static str]) -> Command {
        self.tips = tips;
        self
    }
    pub const fn subs(mut self, subs: &'static [Command]) -> Command {
        self.subcommands = subs;
        self
    }
    pub fn is_write(&self) -> bool {
        self.flags & flags::WRITE != 0
    }
    pub fn arity_ok(&self, argc: usize) -> bool {
        if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= (-self.arity) as usize
        }
    }
    /// Positions of key arguments in `args` (which include the name).
    pub fn key_positions(&self, args: Args) -> Vec<usize> {
        if let Some(f) = self.keys_fn {
            return f(args);
        }
        if self.first_key <= 0 {
            return vec![];
        }
        let argc = args.len() as i32;
        let last = if self.last_key < 0 {
            argc + self.last_key
        } else {
            self.last_key.min(argc - 1)
        };
        let step = self.key_step.max(1) as usize;
        (self.first_key as usize..=last.max(0) as usize)
            .step_by(step)
            .filter(|&i| i < args.len())
            .collect()
    }
}

/// Every family's commands, gathered once.
pub struct CommandTable {
    by_name: HashMap<Vec<u8>, CommandId>,
    pub all: Vec<&'static Command>,
    /// "name" or "parent|sub" of each id, for stats.
    pub full_names: Vec<String>,
    /// Ids of each top-level command's subcommands, by lower-case name.
    subs: HashMap<CommandId, HashMap<Vec<u8>, CommandId>>,
}

pub type CommandId = usize;

/// The families of this layer; the server adds those of the layers above
/// (`server::command_families`) and builds the table from all of them.
pub fn families() -> [&'static [Command]; 15] {
    [
        connection::COMMANDS,
        strings::COMMANDS,
        bitops::COMMANDS,
        keys::COMMANDS,
        expire::COMMANDS,
        lists::COMMANDS,
        hashes::COMMANDS,
        sets::COMMANDS,
        zsets::COMMANDS,
        sort::COMMANDS,
        multi::COMMANDS,
        pubsub::COMMANDS,
        server_cmds::COMMANDS,
        config_cmd::COMMANDS,
        dump::COMMANDS,
    ]
}

impl CommandTable {
    pub fn build(families: &[&'static [Command]]) -> CommandTable {
        let mut t = CommandTable {
            by_name: HashMap::new(),
            all: vec![],
            full_names: vec![],
            subs: HashMap::new(),
        };
        for fam in families {
            for cmd in fam.iter() {
                let id = t.all.len();
                t.all.push(cmd);
                t.full_names.push(cmd.name.to_string());
                let dup = t.by_name.insert(cmd.name.as_bytes().to_vec(), id);
                assert!(dup.is_none(), "command {} registered twice", cmd.name);
                let mut subs = HashMap::new();
                for sub in cmd.subcommands {
                    let sid = t.all.len();
                    t.all.push(sub);
                    t.full_names.push(format!("{}|{}", cmd.name, sub.name));
                    subs.insert(sub.name.as_bytes().to_vec(), sid);
                }
                if !subs.is_empty() {
                    t.subs.insert(id, subs);
                }
            }
        }
        t
    }

    /// Finds a top-level command, case-insensitively.
    pub fn lookup(&self, name: &[u8]) -> Option<CommandId> {
        if name.len() > 64 {
            return None;
        }
        let mut buf = [0u8; 64];
        let lower = &mut buf[..name.len()];
        lower.copy_from_slice(name);
        lower.make_ascii_lowercase();
        self.by_name.get(&lower[..]).copied()
    }

    /// Finds a subcommand of `parent`, case-insensitively.
    pub fn lookup_sub(&self, parent: CommandId, name: &[u8]) -> Option<CommandId> {
        let lower = name.to_ascii_lowercase();
        self.subs.get(&parent)?.get(&lower).copied()
    }

    pub fn has_subcommands(&self, id: CommandId) -> bool {
        self.subs.contains_key(&id)
    }

    pub fn get(&self, id: CommandId) -> &'static Command {
        self.all[id]
    }

    /// Top-level commands only.
    pub fn top_level(&self) -> impl Iterator<Item = (CommandId, &'static Command)> + '_ {
        let mut ids: Vec<CommandId> = self.by_name.values().copied().collect();
        ids.sort_unstable();
        ids.into_iter().map(move |id| (id, self.all[id]))
    }

    pub fn num_top_level(&self) -> usize {
        self.by_name.len()
    }
}

/// What a handler may use while executing one command.
pub struct Ctx<'a> {
    /// What data commands share (keyspace, config, registries).
    pub core: &'a Core,
    /// Persistence, replication and the server, for the commands that
    /// reach them (see `core/admin.rs`).
    pub admin: &'a dyn Admin,
    pub client: &'a mut ClientState,
    pub out: &'a mut ReplyBuf,
    pub clock: &'a mut Hlc,
    pub stats: &'a WorkerStats,
    /// Cached unix ms for the whole command (as Redis's `mstime` cache).
    pub now_ms: u64,
    /// When replaying an effect, the version it carries.
    pub replay_version: Option<u64>,
    /// The command as the client sent it (None when replaying): a record
    /// equal to it keeps the client's spelling of the name, as Redis
    /// propagates an unrewritten command's argv verbatim.
    pub sent: Option<Args<'a>>,
}

impl Ctx<'_> {
    /// The selected database's index.
    pub fn db(&self) -> usize {
        self.client.db
    }

    /// The version stamp for a write to a key whose previous version is `prev`.
    pub fn version_after(&mut self, prev: u64) -> u64 {
        match self.replay_version {
            Some(v) => v,
            None => self.clock.after_at(prev, self.now_ms),
        }
    }

    /// A version stamp for a write that does not replace an existing key.
    pub fn new_version(&mut self) -> u64 {
        match self.replay_version {
            Some(v) => v,
            None => self.clock.now_at(self.now_ms),
        }
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
        if self.core.effects.enabled() {
            let e = EffectRef { db, version, argv };
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
        let wrap =
            records.len() > 1 && self.client.exec_effects.is_none() && self.core.effects.enabled();
        let db = self.client.db;
        if wrap {
            self.emit_effect(db, version, &[b"MULTI"]);
        }
        for r in records {
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

    /// Reports that an expired key was deleted by this command's lazy
    /// expiry (see `gone.rs`).
    pub fn propagate_expired(&mut self, db: usize, key: &[u8]) {
        gone::key_gone(&self.gone(), gone::Why::Expired, db, key, |argv| {
            let v = self.clock.now_at(self.now_ms);
            self.emit_effect(db, v, argv);
        });
    }

    /// [`Self::propagate_expired`] for a key a `Locked` view expired while
    /// locking: outside EXEC its DEL is held back with the records that
    /// follow until the view is dropped ([`flush_deferred`], still under
    /// the locks), which wraps several in MULTI/EXEC as Redis wraps a
    /// command's records (MGET over two expired keys, SET on an expired
    /// key). Returns whether a record was deferred.
    pub(crate) fn propagate_expired_deferred(&mut self, db: usize, key: &[u8]) -> bool {
        if !self.core.effects.enabled() || self.client.exec_effects.is_some() {
            self.propagate_expired(db, key);
            return false;
        }
        gone::key_gone(&self.gone(), gone::Why::Expired, db, key, |argv| {
            let version = self.clock.now_at(self.now_ms);
            let argv = argv.iter().map(|a| a.to_vec()).collect();
            defer(Effect { db, version, argv });
        });
        true
    }
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
    let srv = host.core();
    // A transaction's bounds: its writes follow as ordinary records.
    if let [name] = effect.argv.as_slice() {
        if name.eq_ignore_ascii_case(b"multi") || name.eq_ignore_ascii_case(b"exec") {
            return Ok(());
        }
    }
    let mut client = ClientState::new(0);
    client.db = effect.db;
    let mut out = ReplyBuf::new(2);
    let spans: Vec<std::ops::Range<usize>> = {
        let mut off = 0;
        effect
            .argv
            .iter()
            .map(|a| {
                let r = off..off + a.len();
                off += a.len();
                r
            })
            .collect()
    };
    let flat: Vec<u8> = effect.argv.concat();
    let args = Args::new(&flat, &spans);
    let id = srv
        .commands
        .lookup(args.get(0))
        .ok_or("unknown command in effect")?;
    let cmd = srv.commands.get(id);
    let mut ctx = Ctx {
        core: srv,
        admin: host,
        client: &mut client,
        out: &mut out,
        clock,
        stats,
        now_ms: crate::keyspace::hlc::unix_ms(),
        replay_version: Some(effect.version),
        sent: None,
    };
    (cmd.handler)(&mut ctx, args).map_err(|e| e.render())
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
    let mut spans = Vec::with_capacity(argv.len());
    let mut off = 0;
    for a in argv {
        spans.push(off..off + a.len());
        off += a.len();
    }
    let flat: Vec<u8> = argv.concat();
    run_args(host, clock, stats, client, Args::new(&flat, &spans))
}

/// [`run_local`] for a command already parsed (a replica's link runs its
/// master's stream through here, without copying each command).
pub fn run_args(
    host: &dyn Admin,
    clock: &mut Hlc,
    stats: &WorkerStats,
    client: &mut ClientState,
    args: Args,
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
    let cmd = srv.commands.get(id);
    if !cmd.arity_ok(args.len()) {
        return Err(CmdError::WrongArity(srv.commands.full_names[id].clone()).render());
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
    };
    (cmd.handler)(&mut ctx, args).map_err(|e| e.render())?;
    Ok(out.buf)
}
