//! Commands of features LatticeDB does not build, answering as clearly as
//! Redis would (issue 28 item 4; docs/COMMANDS.md lists them all):
//! - MODULE, as a Redis 7.0 with no module loaded: HELP, an empty LIST,
//!   and LOAD/LOADEX/UNLOAD refused by `enable-module-command` as Redis
//!   refuses them (its default `no`); where that directive allows them, a
//!   clear "not supported by LatticeDB yet" instead of a failed load.
//! - KeyDB's own commands and subcommands not built yet ([`not_built`],
//!   [`sub_not_built`]: OBJECT LASTMODIFIED): "not supported by
//!   LatticeDB yet" naming the docs page, not "unknown command", as if the
//!   user had mistyped. They are not in the command table (COMMAND lists
//!   Redis 7.0's commands), so the dispatcher asks here when a name is not
//!   found.
//!
//! CLUSTER and its subcommands, READONLY, READWRITE and ASKING live with
//! the connection commands (`connection.rs`): Redis has an answer for them
//! without cluster mode, and we give it.

use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::protocol::Args;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    container("module", -2, module_parent)
        .doc("4.0.0", "A container for module commands")
        .complexity("Depends on subcommand.")
        .subs(MODULE_SUBCOMMANDS),
};

static MODULE_SUBCOMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    cmd("help", 2, LOADING | STALE, module_help)
        .doc("5.0.0", "Show helpful text about the different subcommands"),
    cmd("list", 2, ADMIN | NOSCRIPT, module_list)
        .doc("4.0.0", "List all modules loaded by the server")
        .complexity("O(N) where N is the number of loaded modules.")
        .tips(&["nondeterministic_output_order"]),
    cmd("load", -3, ADMIN | NOSCRIPT | NO_ASYNC_LOADING | PROTECTED, module_load)
        .doc("4.0.0", "Load a module"),
    cmd("loadex", -3, ADMIN | NOSCRIPT | NO_ASYNC_LOADING | PROTECTED, module_load)
        .doc("7.0.0", "Load a module with extended parameters"),
    cmd("unload", 3, ADMIN | NOSCRIPT | NO_ASYNC_LOADING | PROTECTED, module_load)
        .doc("4.0.0", "Unload a module"),
};

/// Where the commands LatticeDB does not build are listed.
pub(crate) const DOCS_PAGE: &str = "docs/COMMANDS.md";

fn module_parent(_: &mut Ctx, _: Args) -> CmdResult {
    Err(CmdError::err("unknown subcommand"))
}

fn module_help(ctx: &mut Ctx, _: Args) -> CmdResult {
    super::server_cmds::reply_help(
        ctx,
        "module",
        &[
            "LIST",
            "    Return a list of loaded modules.",
            "LOAD <path> [<arg> ...]",
            "    Load a module library from <path>, passing to it any optional arguments.",
            "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
            "    Load a module library from <path>, while passing it module configurations and optional arguments.",
            "UNLOAD <name>",
            "    Unload a module.",
        ],
    );
    Ok(())
}

/// No module is ever loaded.
fn module_list(ctx: &mut Ctx, _: Args) -> CmdResult {
    ctx.out.array(0);
    Ok(())
}

/// LOAD, LOADEX, UNLOAD where `enable-module-command` lets them run.
fn module_load(_: &mut Ctx, args: Args) -> CmdResult {
    Err(CmdError::err(format!(
        "MODULE {} is not supported by LatticeDB yet ({DOCS_PAGE}): modules are not built",
        String::from_utf8_lossy(args.get(1)).to_uppercase()
    )))
}

/// KeyDB's commands not built yet, by lower-case name: its nested hashes,
/// its MVCC restore, and the two its own active replication sends between
/// KeyDB nodes (RREPLAY's envelope and LFENCE; ours speaks LATTICE.PEER).
const KEYDB: &[&str] = &[
    "keydb.nhget",
    "keydb.nhset",
    "keydb.mvccrestore",
    "rreplay",
    "lfence",
];

/// KeyDB's subcommands not built yet: (command, subcommand).
const KEYDB_SUBS: &[(&str, &str)] = &[];

/// The error for a subcommand the table does not have, when it names one
/// of KeyDB's (OBJECT LASTMODIFIED).
pub(crate) fn sub_not_built(cmd: &str, sub: &[u8]) -> Option<CmdError> {
    let sub = String::from_utf8_lossy(sub).to_ascii_lowercase();
    KEYDB_SUBS.contains(&(cmd, sub.as_str())).then(|| {
        CmdError::err(format!(
            "'{} {}' is KeyDB's and not supported by LatticeDB yet ({DOCS_PAGE})",
            cmd.to_uppercase(),
            sub.to_uppercase()
        ))
    })
}

/// The error for a command name the table does not have, when it names a
/// command of a feature not built (see the module comment).
pub(crate) fn not_built(name: &[u8]) -> Option<CmdError> {
    let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
    KEYDB.contains(&lower.as_str()).then(|| {
        CmdError::err(format!(
            "'{}' is KeyDB's and not supported by LatticeDB yet ({DOCS_PAGE})",
            lower.to_uppercase()
        ))
    })
}
