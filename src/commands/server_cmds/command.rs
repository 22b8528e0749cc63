//! COMMAND and its subcommands, generated only from the command table.
//!
//! Nothing here lists commands by hand: names, arity, flags, key positions,
//! ACL categories and docs all come from `srv.commands`, so a family that
//! adds a command shows up in COMMAND, COMMAND DOCS and GETKEYS at once.
//! Redis 7 derives a few things the table leaves implicit, and so do we:
//! ACL categories implied by flags (write → @write, not fast → @slow, ...),
//! the `movablekeys` flag, and key specs for entries that give none
//! (`keyspec::derived`, from first/last/step).

use super::super::keyspec::{self, Begin, Find, KeySpec};
use super::super::util::{eq_ic, glob_match, lossy};
use super::super::{flags::*, CmdError, CmdResult, Command, CommandId, Ctx};
use super::reply_help;
use crate::protocol::{Args, ReplyBuf};

const CMD: u32 = LOADING | STALE;

pub(super) static SUBCOMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = "connection"),
    cmd("count", 2, CMD, count)
        .doc("2.8.13", "Returns a count of commands."),
    cmd("list", -2, CMD, list)
        .doc("7.0.0", "Returns a list of command names.")
        .complexity("O(N) where N is the total number of Redis commands")
        .tips(&["nondeterministic_output_order"]),
    cmd("info", -2, CMD, info)
        .doc("2.8.13", "Returns information about one, multiple or all commands.")
        .complexity("O(N) where N is the number of commands to look up")
        .tips(&["nondeterministic_output_order"]),
    cmd("docs", -2, CMD, docs)
        .doc("7.0.0", "Returns documentary information about one, multiple or all commands.")
        .complexity("O(N) where N is the number of commands to look up")
        .tips(&["nondeterministic_output_order"]),
    cmd("getkeys", -3, CMD, getkeys)
        .doc("2.8.13", "Extracts the key names from an arbitrary command.")
        .complexity("O(N) where N is the number of arguments to the command"),
    cmd("getkeysandflags", -3, CMD, getkeysandflags)
        .doc("7.0.0", "Extracts the key names and access flags for an arbitrary command.")
        .complexity("O(N) where N is the number of arguments to the command"),
    cmd("help", 2, CMD, help)
        .doc("5.0.0", "Returns helpful text about the different subcommands."),
};

const HELP: &[&str] = &[
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
];

fn help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    reply_help(ctx, "command", HELP);
    Ok(())
}

fn flag_names(cmd: &Command) -> Vec<&'static str> {
    let mut v: Vec<&str> = crate::commands::flags::NAMES
        .iter()
        .filter(|(b, _)| cmd.flags & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if cmd.keys_fn.is_some() {
        v.push("movablekeys");
    }
    if cmd.flags & ALLOW_BUSY != 0 {
        v.push("allow_busy");
    }
    v
}

pub(super) use crate::core::table::acl_categories;

fn write_key_specs(out: &mut ReplyBuf, cmd: &Command) {
    let specs = keyspec::specs_of(cmd);
    out.set(specs.len());
    for spec in specs {
        write_key_spec(out, &spec);
    }
}

fn write_key_spec(out: &mut ReplyBuf, spec: &KeySpec) {
    out.map(if spec.notes.is_empty() { 3 } else { 4 });
    if !spec.notes.is_empty() {
        out.bulk(b"notes");
        out.bulk_str(spec.notes);
    }
    out.bulk(b"flags");
    out.set(spec.flags.len());
    for f in spec.flags {
        out.simple(f);
    }
    out.bulk(b"begin_search");
    out.map(2);
    out.bulk(b"type");
    match spec.begin {
        Begin::Index(i) => {
            out.bulk(b"index");
            out.bulk(b"spec");
            out.map(1);
            out.bulk(b"index");
            out.int(i as i64);
        }
        Begin::Keyword(kw, from) => {
            out.bulk(b"keyword");
            out.bulk(b"spec");
            out.map(2);
            out.bulk(b"keyword");
            out.bulk_str(kw);
            out.bulk(b"startfrom");
            out.int(from as i64);
        }
        Begin::Unknown => {
            out.bulk(b"unknown");
            out.bulk(b"spec");
            out.map(0);
        }
    }
    out.bulk(b"find_keys");
    out.map(2);
    out.bulk(b"type");
    let fields: &[(&str, i32)] = match spec.find {
        Find::Range { last, step, limit } => {
            out.bulk(b"range");
            &[("lastkey", last), ("keystep", step), ("limit", limit)]
        }
        Find::KeyNum { idx, first, step } => {
            out.bulk(b"keynum");
            &[("keynumidx", idx), ("firstkey", first), ("keystep", step)]
        }
        Find::Unknown => {
            out.bulk(b"unknown");
            &[]
        }
    };
    out.bulk(b"spec");
    out.map(fields.len());
    for (name, v) in fields {
        out.bulk_str(name);
        out.int(*v as i64);
    }
}

/// One COMMAND INFO entry (Redis 7's ten fields), subcommands nested.
fn write_info(ctx: &mut Ctx, id: CommandId) {
    let srv = ctx.core;
    let cmd = srv.commands.get(id);
    let out = &mut *ctx.out;
    out.array(10);
    out.bulk(srv.commands.full_names[id].as_bytes());
    out.int(cmd.arity as i64);
    let flags = flag_names(cmd);
    out.set(flags.len());
    for f in flags {
        out.simple(f);
    }
    out.int(cmd.first_key as i64);
    out.int(cmd.last_key as i64);
    out.int(cmd.key_step as i64);
    let cats = acl_categories(cmd);
    out.set(cats.len());
    for c in cats {
        out.simple(&format!("@{c}"));
    }
    out.set(cmd.tips.len());
    for t in cmd.tips {
        out.bulk(t.as_bytes()); // bulk strings, as Redis's addReplyCommandTips
    }
    write_key_specs(out, cmd);
    let subs = sub_ids(ctx, id);
    ctx.out.set(subs.len());
    for s in subs {
        write_info(ctx, s);
    }
}

/// Ids of `id`'s subcommands, in table order.
fn sub_ids(ctx: &Ctx, id: CommandId) -> Vec<CommandId> {
    let cmd = ctx.core.commands.get(id);
    cmd.subcommands
        .iter()
        .filter_map(|s| ctx.core.commands.lookup_sub(id, s.name.as_bytes()))
        .collect()
}

/// Finds "name" or "parent|sub".
fn resolve(ctx: &Ctx, name: &[u8]) -> Option<CommandId> {
    let t = &ctx.core.commands;
    match name.iter().position(|&c| c == b'|') {
        None => t.lookup(name),
        Some(p) => t.lookup_sub(t.lookup(&name[..p])?, &name[p + 1..]),
    }
}

pub(super) fn command_all(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let ids: Vec<CommandId> = ctx.core.commands.top_level().map(|(id, _)| id).collect();
    ctx.out.array(ids.len());
    for id in ids {
        write_info(ctx, id);
    }
    Ok(())
}

fn count(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.int(ctx.core.commands.num_top_level() as i64);
    Ok(())
}

fn info(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() == 2 {
        return command_all(ctx, args);
    }
    ctx.out.array(args.len() - 2);
    for name in args.iter().skip(2) {
        match resolve(ctx, name) {
            Some(id) => write_info(ctx, id),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

/// Every command id, each top-level one followed by its subcommands.
fn all_with_subs(ctx: &Ctx) -> Vec<CommandId> {
    let mut v = vec![];
    for (id, _) in ctx.core.commands.top_level() {
        v.push(id);
        v.extend(sub_ids(ctx, id));
    }
    v
}

fn list(ctx: &mut Ctx, args: Args) -> CmdResult {
    enum Filter {
        None,
        Module,
        AclCat(String),
        Pattern(Vec<u8>),
    }
    let filter = match args.len() {
        2 => Filter::None,
        5 if eq_ic(args.get(2), "FILTERBY") => {
            let (kind, val) = (args.get(3), args.get(4));
            if eq_ic(kind, "MODULE") {
                Filter::Module
            } else if eq_ic(kind, "ACLCAT") {
                Filter::AclCat(lossy(val).to_ascii_lowercase())
            } else if eq_ic(kind, "PATTERN") {
                Filter::Pattern(val.to_vec())
            } else {
                return Err(CmdError::Syntax);
            }
        }
        _ => return Err(CmdError::Syntax),
    };
    let t = &ctx.core.commands;
    let names: Vec<&str> = all_with_subs(ctx)
        .into_iter()
        .filter(|&id| match &filter {
            Filter::None => true,
            Filter::Module => false,
            Filter::AclCat(c) => acl_categories(t.get(id)).contains(&c.as_str()),
            Filter::Pattern(p) => glob_match(p, t.full_names[id].as_bytes(), true),
        })
        .map(|id| t.full_names[id].as_str())
        .collect();
    ctx.out.array(names.len());
    for n in names {
        ctx.out.bulk(n.as_bytes());
    }
    Ok(())
}

/// One COMMAND DOCS entry: name, then its doc map.
fn write_docs(ctx: &mut Ctx, id: CommandId) {
    let cmd = ctx.core.commands.get(id);
    let subs = sub_ids(ctx, id);
    let out = &mut *ctx.out;
    out.bulk(ctx.core.commands.full_names[id].as_bytes());
    out.map(4 + usize::from(!subs.is_empty()));
    for (k, v) in [
        ("summary", cmd.summary),
        ("since", cmd.since),
        ("group", cmd.group),
        ("complexity", cmd.complexity),
    ] {
        out.bulk_str(k);
        out.bulk_str(v);
    }
    if !subs.is_empty() {
        out.bulk(b"subcommands");
        out.map(subs.len());
        for s in subs {
            write_docs(ctx, s);
        }
    }
}

fn docs(ctx: &mut Ctx, args: Args) -> CmdResult {
    let ids: Vec<CommandId> = if args.len() == 2 {
        ctx.core.commands.top_level().map(|(id, _)| id).collect()
    } else {
        args.iter()
            .skip(2)
            .filter_map(|n| resolve(ctx, n))
            .collect()
    };
    ctx.out.map(ids.len());
    for id in ids {
        write_docs(ctx, id);
    }
    Ok(())
}

/// The target command of GETKEYS and the positions of its keys (relative to
/// `args[2..]`), with Redis's errors.
fn target_keys(ctx: &Ctx, args: Args) -> Result<(&'static Command, Vec<usize>), CmdError> {
    let t = &ctx.core.commands;
    let target = args.slice_from(2);
    let invalid = || CmdError::err("Invalid command specified");
    let mut id = t.lookup(target.get(0)).ok_or_else(invalid)?;
    if t.has_subcommands(id) && target.len() >= 2 {
        id = t.lookup_sub(id, target.get(1)).ok_or_else(invalid)?;
    }
    let cmd = t.get(id);
    if cmd.keys_fn.is_none() && cmd.first_key <= 0 {
        return Err(CmdError::err("The command has no key arguments"));
    }
    if !cmd.arity_ok(target.len()) {
        return Err(CmdError::err(
            "Invalid number of arguments specified for command",
        ));
    }
    let keys = cmd.key_positions(target);
    if keys.is_empty() && cmd.flags & NO_MANDATORY_KEYS == 0 {
        return Err(CmdError::err("Invalid arguments specified for command"));
    }
    Ok((cmd, keys))
}

fn getkeys(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (_, keys) = target_keys(ctx, args)?;
    ctx.out.array(keys.len());
    for k in keys {
        ctx.out.bulk(args.get(k + 2));
    }
    Ok(())
}

fn getkeysandflags(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (cmd, keys) = target_keys(ctx, args)?;
    let line = args.slice_from(2);
    ctx.out.array(keys.len());
    for k in keys {
        let kf = keyspec::flags_for(cmd, line, k);
        ctx.out.array(2);
        ctx.out.bulk(args.get(k + 2));
        ctx.out.set(kf.len());
        for f in kf {
            ctx.out.simple(f);
        }
    }
    Ok(())
}
