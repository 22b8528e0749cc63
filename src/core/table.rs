//! The command table's types: [`Command`] (name, arity, flags, key
//! positions, ACL categories, docs, handler), the `command_table!` form
//! every family declares its list in, and [`CommandTable`], built once from
//! all the lists; the single source of truth for dispatch, arity checks,
//! COMMAND INFO/DOCS/GETKEYS, ACL categories and which commands propagate.
//! The lists themselves are the families' (`commands/*.rs`, and
//! `replication/commands.rs`); the server hands them to
//! [`CommandTable::build`].

// hashbrown (foldhash) rather than std (SipHash): the table is looked up once per command.
use hashbrown::HashMap;

use super::ctx::Ctx;
use super::error::CmdError;
use super::keyspec;
use crate::protocol::Args;

pub(crate) type CmdResult = Result<(), CmdError>;
pub(crate) type Handler = fn(&mut Ctx, Args) -> CmdResult;
/// Extracts key positions for commands whose keys are not first/last/step.
pub(crate) type KeysFn = fn(Args) -> Vec<usize>;
/// The key-spec flags of the key at a position, for `variable_flags` commands.
pub(crate) type KeyFlagsFn = fn(Args, usize) -> Option<&'static [&'static str]>;
/// The flags of one call of a command whose flags depend on its arguments
/// (Redis's getCommandFlags: EVAL with a shebang, FCALL by its function).
pub(crate) type FlagsFn = fn(&super::Core, Args, u32) -> u32;

fn category_mask(cmd: &Command) -> u32 {
    acl_categories(cmd)
        .iter()
        .filter_map(|c| category_bit(c.as_bytes()))
        .fold(0, |m, b| m | b)
}

/// Command flags (Redis 7's names, see COMMAND INFO).
pub(crate) mod flags {
    pub(crate) const WRITE: u32 = 1 << 0;
    pub(crate) const READONLY: u32 = 1 << 1;
    pub(crate) const DENYOOM: u32 = 1 << 2;
    pub(crate) const ADMIN: u32 = 1 << 3;
    pub(crate) const PUBSUB: u32 = 1 << 4;
    pub(crate) const NOSCRIPT: u32 = 1 << 5;
    pub(crate) const BLOCKING: u32 = 1 << 6;
    pub(crate) const LOADING: u32 = 1 << 7;
    pub(crate) const STALE: u32 = 1 << 8;
    pub(crate) const SKIP_MONITOR: u32 = 1 << 9;
    pub(crate) const SKIP_SLOWLOG: u32 = 1 << 10;
    pub(crate) const FAST: u32 = 1 << 11;
    pub(crate) const NO_AUTH: u32 = 1 << 12;
    pub(crate) const MAY_REPLICATE: u32 = 1 << 13;
    pub(crate) const NO_MULTI: u32 = 1 << 14;
    pub(crate) const ALLOW_BUSY: u32 = 1 << 15;
    pub(crate) const NO_MANDATORY_KEYS: u32 = 1 << 16;
    /// Runs only as `enable-debug-command` allows (Redis's CMD_PROTECTED;
    /// not shown by COMMAND INFO, as in Redis).
    pub(crate) const PROTECTED: u32 = 1 << 17;
    pub(crate) const NO_ASYNC_LOADING: u32 = 1 << 18;
    /// Served on a cluster node importing the slot after ASKING (Redis's
    /// CMD_ASKING; RESTORE-ASKING only): shown by COMMAND INFO, nothing
    /// else, as cluster mode is not built.
    pub(crate) const ASKING: u32 = 1 << 19;

    /// Flag names in the order Redis 7 prints them in COMMAND INFO, except
    /// `allow_busy`, which Redis prints after the derived `movablekeys`.
    pub(crate) const NAMES: &[(u32, &str)] = &[
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
        (ASKING, "asking"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        // MAY_REPLICATE is not shown: Redis 7.0 hides it on purpose.
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
            $crate::core::table::command_table!(@head $group, $acl, $head($($arg)*))
                $( .$method($($marg)*) )*
        ),*]
    };
    (@head $group:literal, $acl:literal,
        cmd($name:literal, $arity:expr, $flags:expr, $handler:expr $(, acl = $extra:literal)? $(,)?)
    ) => {
        $crate::core::table::Command {
            group: $group,
            acl: concat!($acl $(, " ", $extra)?),
            ..$crate::core::table::Command::new($name, $arity, $flags, $handler)
        }
    };
    (@head $group:literal, $acl:literal, container($name:literal, $arity:expr, $handler:expr $(,)?)) => {
        $crate::core::table::Command {
            group: $group,
            ..$crate::core::table::Command::new($name, $arity, 0, $handler)
        }
    };
}
pub(crate) use command_table;

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
    /// Flags of one call, from its static flags and arguments (`flags_for`).
    pub flags_fn: Option<FlagsFn>,
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
            flags_fn: None,
            tips: &[],
        }
    }
    pub const fn keys(mut self, first: i32, last: i32, step: i32) -> Command {
        self.first_key = first;
        self.last_key = last;
        self.key_step = step;
        self
    }
    pub const fn flags_fn(mut self, f: FlagsFn) -> Command {
        self.flags_fn = Some(f);
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
    /// The flags of this call: `flags` unless they depend on the arguments.
    #[inline]
    pub fn flags_for(&self, core: &super::Core, args: Args) -> u32 {
        match self.flags_fn {
            None => self.flags,
            Some(f) => f(core, args, self.flags),
        }
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

/// ACL categories in Redis's order (acl.c's ACLCommandCategories): a
/// category's index is its bit in [`CommandTable::categories`].
pub(crate) const ACL_CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// The command's ACL categories: declared plus implied by its flags.
pub(crate) fn acl_categories(cmd: &Command) -> Vec<&'static str> {
    use flags::*;
    let f = cmd.flags;
    let declared: Vec<&str> = cmd.acl.split_whitespace().collect();
    ACL_CATEGORIES
        .iter()
        .copied()
        .filter(|c| {
            declared.contains(c)
                || match *c {
                    "write" => f & WRITE != 0,
                    "read" => f & READONLY != 0,
                    "admin" | "dangerous" => f & ADMIN != 0,
                    "pubsub" => f & PUBSUB != 0,
                    "fast" => f & FAST != 0,
                    "slow" => f & FAST == 0 && !declared.contains(&"fast"),
                    "blocking" => f & BLOCKING != 0,
                    _ => false,
                }
        })
        .collect()
}

/// The bit of a category in [`CommandTable::categories`], by name.
pub(crate) fn category_bit(name: &[u8]) -> Option<u32> {
    ACL_CATEGORIES
        .iter()
        .position(|c| c.as_bytes().eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// Every family's commands, gathered once.
pub struct CommandTable {
    by_name: HashMap<Vec<u8>, CommandId>,
    pub all: Vec<&'static Command>,
    /// "name" or "parent|sub" of each id, for stats.
    pub full_names: Vec<String>,
    /// Ids of each top-level command's subcommands, by lower-case name.
    subs: HashMap<CommandId, HashMap<Vec<u8>, CommandId>>,
    /// Each id's ACL categories, one bit per [`ACL_CATEGORIES`] entry.
    pub categories: Vec<u32>,
}

pub(crate) type CommandId = usize;

impl CommandTable {
    pub fn build(families: &[&'static [Command]]) -> CommandTable {
        let mut t = CommandTable {
            by_name: HashMap::new(),
            all: vec![],
            full_names: vec![],
            subs: HashMap::new(),
            categories: vec![],
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
        t.categories = t.all.iter().map(|c| category_mask(c)).collect();
        t
    }

    /// Ids of the subcommands of `id` (they follow it in the table).
    pub fn sub_ids(&self, id: CommandId) -> std::ops::Range<CommandId> {
        id + 1..id + 1 + self.all[id].subcommands.len()
    }

    /// Finds "name" or "parent|sub" as ACL rules name commands (Redis's
    /// lookupCommandBySds: one level of subcommands, strict).
    pub fn lookup_full(&self, name: &[u8]) -> Option<CommandId> {
        let mut parts = name.split(|&b| b == b'|');
        let id = self.lookup(parts.next()?)?;
        match (parts.next(), parts.next()) {
            (None, _) => Some(id),
            (Some(sub), None) => self.lookup_sub(id, sub),
            _ => None,
        }
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
