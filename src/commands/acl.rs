/*
 * The ACL command (SETUSER, GETUSER, DELUSER, USERS, LIST, WHOAMI, CAT,
 * GENPASS, LOG, DRYRUN, LOAD, SAVE, HELP) and the permission check every
 * command passes (`admit`, called by dispatch, EXEC and redis.call), with
 * its ACL LOG entry and Redis's error strings. The users and their rules
 * are `core/acl`; this file parses, checks and replies.
 */

use std::collections::BTreeMap;
use std::sync::Arc;

use super::util::{arg_i64, eq_ic, lossy};
use super::{flags::*, CmdError, CmdResult, Command, CommandId, Ctx};
use crate::core::acl::{user, Denied, LogContext, LogEntry, Reason, User};
use crate::core::client::ClientState;
use crate::core::table::ACL_CATEGORIES;
use crate::core::Core;
use crate::protocol::Args;

const ADM: u32 = ADMIN | NOSCRIPT | LOADING | STALE;
const OPEN: u32 = NOSCRIPT | LOADING | STALE;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    container("acl", -2, help)
        .doc("6.0.0", "A container for Access List Control commands.")
        .subs(SUBS),
};

static SUBS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    cmd("cat", -2, OPEN, cat)
        .doc("6.0.0", "Lists the ACL categories, or the commands inside a category."),
    cmd("deluser", -3, ADM, deluser)
        .doc("6.0.0", "Deletes ACL users, and terminates their connections.")
        .complexity("O(1) amortized time considering the typical user."),
    cmd("dryrun", -4, ADM, dryrun)
        .doc("7.0.0", "Simulates the execution of a command by a user, without executing the command."),
    cmd("genpass", -2, OPEN, genpass)
        .doc("6.0.0", "Generates a pseudorandom, secure password that can be used to identify ACL users."),
    cmd("getuser", 3, ADM, getuser)
        .doc("6.0.0", "Lists the ACL rules of a user.")
        .complexity("O(N). Where N is the number of password, command and pattern rules that the user has."),
    cmd("help", 2, LOADING | STALE, help)
        .doc("6.0.0", "Returns helpful text about the different subcommands."),
    cmd("list", 2, ADM, list)
        .doc("6.0.0", "Dumps the effective rules in ACL file format.")
        .complexity("O(N). Where N is the number of configured users."),
    cmd("load", 2, ADM, load)
        .doc("6.0.0", "Reloads the rules from the configured ACL file.")
        .complexity("O(N). Where N is the number of configured users."),
    cmd("log", -2, ADM, log)
        .doc("6.0.0", "Lists recent security events generated due to ACL rules.")
        .complexity("O(N) with N being the number of entries shown."),
    cmd("save", 2, ADM, save)
        .doc("6.0.0", "Saves the effective ACL rules in the configured ACL file.")
        .complexity("O(N). Where N is the number of configured users."),
    cmd("setuser", -3, ADM, setuser)
        .doc("6.0.0", "Creates and modifies an ACL user and its rules.")
        .complexity("O(N). Where N is the number of rules provided."),
    cmd("users", 2, ADM, users)
        .doc("6.0.0", "Lists all ACL users.")
        .complexity("O(N). Where N is the number of configured users."),
    cmd("whoami", 2, OPEN, whoami)
        .doc("6.0.0", "Returns the authenticated username of the current connection."),
};

const HELP: &[&str] = &[
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
];

fn help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    super::server_cmds::reply_help(ctx, "acl", HELP);
    Ok(())
}

/// Redis's addReplySubcommandSyntaxError.
fn sub_syntax(args: Args) -> CmdError {
    CmdError::err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
        lossy(args.get(1))
    ))
}

/*
 * The check.
 */

/// Whether the client's user may run `args` (command `id`); a denial is
/// logged under `context` and returned as Redis's NOPERM error for it.
#[inline]
pub(crate) fn admit(
    core: &Core,
    client: &ClientState,
    id: CommandId,
    args: Args,
    context: LogContext,
) -> Result<(), CmdError> {
    match &client.user {
        Some(u) if !u.free => check_slow(core, client, u, id, args, context),
        _ => Ok(()),
    }
}

#[cold]
fn check_slow(
    core: &Core,
    client: &ClientState,
    u: &User,
    id: CommandId,
    args: Args,
    context: LogContext,
) -> Result<(), CmdError> {
    let Err(denied) = u.check(&core.commands, id, args) else {
        return Ok(());
    };
    log_denial(core, client, denied, id, args, context);
    let name = &core.commands.full_names[id];
    Err(CmdError::Msg(match (context, denied) {
        (LogContext::Lua, d) => {
            format!("ERR The user executing the script {}", reason_text(d))
        }
        (_, Denied::Command) => {
            format!("NOPERM this user has no permissions to run the '{name}' command")
        }
        (_, Denied::Key(_)) => {
            "NOPERM this user has no permissions to access one of the keys used as arguments".into()
        }
        (_, Denied::Channel(_)) => {
            "NOPERM this user has no permissions to access one of the channels used as arguments"
                .into()
        }
    }))
}

/// Redis's getAclErrorMessage.
fn reason_text(d: Denied) -> &'static str {
    match d {
        Denied::Command => "can't run this command or subcommand",
        Denied::Key(_) => {
            "can't access at least one of the keys mentioned in the command arguments"
        }
        Denied::Channel(_) => "can't publish to the channel mentioned in the command",
    }
}

/// EXEC's check of a queued command: the rules may have changed since it
/// was queued (Redis's execCommand).
pub(crate) fn admit_queued(
    core: &Core,
    client: &ClientState,
    id: CommandId,
    args: Args,
) -> CmdResult {
    let Some(u) = client.user.as_ref().filter(|u| !u.free) else {
        return Ok(());
    };
    let Err(denied) = u.check(&core.commands, id, args) else {
        return Ok(());
    };
    log_denial(core, client, denied, id, args, LogContext::Multi);
    let why = match denied {
        Denied::Command => "no permission to execute the command or subcommand",
        Denied::Key(_) => "no permission to touch the specified keys",
        Denied::Channel(_) => "no permission to access one of the channels used as arguments",
    };
    Err(CmdError::Msg(format!("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {why}")))
}

fn log_denial(
    core: &Core,
    client: &ClientState,
    denied: Denied,
    id: CommandId,
    args: Args,
    context: LogContext,
) {
    let (reason, object) = match denied {
        Denied::Command => (
            Reason::Command,
            core.commands.full_names[id].as_bytes().to_vec(),
        ),
        Denied::Key(i) => (Reason::Key, args.get(i).to_vec()),
        Denied::Channel(i) => (Reason::Channel, args.get(i).to_vec()),
    };
    let user = client
        .user
        .as_ref()
        .map_or("default".into(), |u| u.name.clone());
    let current = core.commands.full_names[id].clone();
    add_log(core, client, reason, context, object, user, &current);
}

/// A failed AUTH (or HELLO AUTH) for `user`.
pub(crate) fn log_auth_failure(core: &Core, client: &ClientState, user: &[u8], cmd: &[u8]) {
    let context = match client.multi.is_some() {
        true => LogContext::Multi,
        false => LogContext::Toplevel,
    };
    let current = lossy(cmd).to_ascii_lowercase();
    add_log(
        core,
        client,
        Reason::Auth,
        context,
        cmd.to_vec(),
        lossy(user),
        &current,
    );
}

fn add_log(
    core: &Core,
    client: &ClientState,
    reason: Reason,
    context: LogContext,
    object: Vec<u8>,
    username: String,
    current: &str,
) {
    let client_info = client.shared.as_ref().map_or(String::new(), |sh| {
        super::server_cmds::client::client_line(core, sh, Some(current))
    });
    // A denied command's entry, which formats a client line anyway.
    let max = core.config.read().get_i64("acllog-max-len").max(0) as usize;
    core.acl.log(
        LogEntry {
            count: 1,
            reason,
            context,
            object,
            username,
            ctime_ms: crate::keyspace::hlc::unix_ms(),
            client_info,
        },
        max,
    );
}

/*
 * Users.
 */

fn has_space(s: &[u8]) -> bool {
    s.iter().any(|&b| b == b' ' || b == 0)
}

/// Applies SETUSER rules to a copy of `current` (or a new user) and returns
/// it, or Redis's error naming the rule that failed; nothing is changed.
pub(crate) fn apply_rules(
    core: &Core,
    name: &str,
    current: Option<&User>,
    rules: &[Vec<u8>],
) -> Result<User, String> {
    let merged = user::merge_selectors(rules).map_err(|at| {
        format!(
            "Unmatched parenthesis in acl selector starting at '{}'.",
            lossy(&at)
        )
    })?;
    let pubsub_all = core.acl.pubsub_all();
    let mut u = current
        .cloned()
        .unwrap_or_else(|| User::new(name, pubsub_all));
    for op in &merged {
        u.apply(&core.commands, op, pubsub_all).map_err(|e| {
            format!(
                "Error in ACL SETUSER modifier '{}': {}",
                lossy(op),
                e.text()
            )
        })?;
    }
    Ok(u)
}

fn setuser(ctx: &mut Ctx, args: Args) -> CmdResult {
    let name = args.get(2);
    if has_space(name) {
        return Err(CmdError::err(
            "Usernames can't contain spaces or null characters",
        ));
    }
    let name = lossy(name);
    let rules: Vec<Vec<u8>> = args.iter().skip(3).map(|a| a.to_vec()).collect();
    let old = ctx.core.acl.user(&name);
    let u = apply_rules(ctx.core, &name, old.as_deref(), &rules).map_err(CmdError::err)?;
    let revoked = old.as_ref().is_some_and(|o| channels_revoked(o, &u));
    if revoked {
        kill_pubsub_clients(ctx, &name, &u);
    }
    ctx.core.acl.put(u);
    ctx.out.ok();
    Ok(())
}

/// Whether the new rules take away a channel the old ones allowed
/// (Redis's ACLKillPubsubClientsIfNeeded's test).
fn channels_revoked(old: &User, new: &User) -> bool {
    if new.selectors.iter().any(|s| s.all_channels) {
        return false;
    }
    let upcoming: Vec<&Vec<u8>> = new.selectors.iter().flat_map(|s| &s.channels).collect();
    old.selectors
        .iter()
        .any(|s| s.all_channels || s.channels.iter().any(|c| !upcoming.contains(&c)))
}

/// Closes the user's clients subscribed to a channel or pattern the new
/// rules (`new`) no longer allow: a connection re-checks nothing once
/// subscribed, so Redis closes those (ACLKillPubsubClientsIfNeeded), and
/// only those: a subscriber whose channels all stay allowed stays.
fn kill_pubsub_clients(ctx: &mut Ctx, name: &str, new: &User) {
    use crate::core::pubsub::Kind;
    let allowed = |kind: Kind, channel: &[u8]| {
        (new.selectors.iter()).any(|s| s.channel_ok(channel, kind == Kind::Pattern))
    };
    for c in ctx.core.clients.snapshot() {
        let subscribed = c
            .subs
            .iter()
            .any(|n| n.load(std::sync::atomic::Ordering::Relaxed) > 0);
        if !subscribed || *c.user.lock() != name {
            continue;
        }
        let subs = ctx.core.pubsub.subscriptions_of(c.id);
        if subs.iter().any(|(kind, ch)| !allowed(*kind, ch)) {
            if c.id == ctx.client.id {
                ctx.client.close_after_reply = true;
            } else {
                c.kill_now();
                ctx.core.clients.unregister(c.id);
            }
        }
    }
}

/// Closes every connection authenticated as one of `names`.
pub(crate) fn kill_user_clients(ctx: &mut Ctx, names: &[String]) {
    for c in ctx.core.clients.snapshot() {
        // A replica's master client has no user (its record shows one).
        if c.is_master_link() || !names.contains(&*c.user.lock()) {
            continue;
        }
        if c.id == ctx.client.id {
            ctx.client.close_after_reply = true;
        } else {
            c.kill_now();
            ctx.core.clients.unregister(c.id);
        }
    }
}

fn deluser(ctx: &mut Ctx, args: Args) -> CmdResult {
    let names: Vec<String> = args.iter().skip(2).map(lossy).collect();
    if names.iter().any(|n| n == "default") {
        return Err(CmdError::err("The 'default' user cannot be removed"));
    }
    let n = ctx.core.acl.remove(&names);
    kill_user_clients(ctx, &names);
    ctx.out.int(n as i64);
    Ok(())
}

fn getuser(ctx: &mut Ctx, args: Args) -> CmdResult {
    let Some(u) = ctx.core.acl.user(&lossy(args.get(2))) else {
        ctx.out.null();
        return Ok(());
    };
    let t = &ctx.core.commands;
    let out = &mut *ctx.out;
    out.map(6);
    out.bulk(b"flags");
    let flags = u.flags();
    out.array(flags.len());
    for f in flags {
        out.bulk(f.as_bytes());
    }
    out.bulk(b"passwords");
    out.array(u.passwords.len());
    for p in &u.passwords {
        out.bulk(p.as_bytes());
    }
    describe_selector(out, t, &u.selectors[0]);
    out.bulk(b"selectors");
    out.array(u.selectors.len() - 1);
    for s in &u.selectors[1..] {
        out.map(3);
        describe_selector(out, t, s);
    }
    Ok(())
}

fn describe_selector(
    out: &mut crate::protocol::ReplyBuf,
    t: &crate::core::table::CommandTable,
    s: &user::Selector,
) {
    out.bulk(b"commands");
    out.bulk(s.describe_commands(t).as_bytes());
    out.bulk(b"keys");
    out.bulk(s.describe_keys().as_bytes());
    out.bulk(b"channels");
    out.bulk(s.describe_channels().as_bytes());
}

fn users(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let all = ctx.core.acl.users();
    ctx.out.array(all.len());
    for u in all {
        ctx.out.bulk(u.name.as_bytes());
    }
    Ok(())
}

/// `user <name> <rules>` lines, as ACL LIST and ACL SAVE write them.
pub(crate) fn user_lines(core: &Core) -> Vec<String> {
    let users = core.acl.users();
    users
        .iter()
        .map(|u| format!("user {} {}", u.name, u.describe(&core.commands)))
        .collect()
}

fn list(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let lines = user_lines(ctx.core);
    ctx.out.array(lines.len());
    for l in lines {
        ctx.out.bulk(l.as_bytes());
    }
    Ok(())
}

fn whoami(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let name = ctx
        .client
        .user
        .as_ref()
        .map_or("default".to_string(), |u| u.name.clone());
    ctx.out.bulk(name.as_bytes());
    Ok(())
}

fn cat(ctx: &mut Ctx, args: Args) -> CmdResult {
    match args.len() {
        2 => {
            ctx.out.array(ACL_CATEGORIES.len());
            for c in ACL_CATEGORIES {
                ctx.out.bulk(c.as_bytes());
            }
        }
        3 => {
            let Some(bit) = crate::core::table::category_bit(args.get(2)) else {
                return Err(CmdError::err(format!(
                    "Unknown category '{}'",
                    lossy(&args.get(2)[..args.get(2).len().min(128)])
                )));
            };
            let t = &ctx.core.commands;
            let names: Vec<&String> = (0..t.all.len())
                .filter(|&id| t.categories[id] & bit != 0)
                .map(|id| &t.full_names[id])
                .collect();
            ctx.out.array(names.len());
            for n in names {
                ctx.out.bulk(n.as_bytes());
            }
        }
        _ => return Err(sub_syntax(args)),
    }
    Ok(())
}

fn genpass(ctx: &mut Ctx, args: Args) -> CmdResult {
    let bits = match args.len() {
        2 => 256,
        3 => arg_i64(args.get(2))?,
        _ => return Err(sub_syntax(args)),
    };
    if bits <= 0 || bits > 4096 {
        return Err(CmdError::err("ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096"));
    }
    let chars = (bits as usize).div_ceil(4);
    let mut raw = vec![0u8; chars.div_ceil(2)];
    random_bytes(&mut raw)?;
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    ctx.out.bulk(&hex.as_bytes()[..chars]);
    Ok(())
}

/// Bytes from the kernel's CSPRNG.
fn random_bytes(buf: &mut [u8]) -> Result<(), CmdError> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .map_err(|e| CmdError::err(format!("Reading /dev/urandom: {e}")))
}

fn log(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut count = 10usize;
    match args.len() {
        2 => {}
        3 if eq_ic(args.get(2), "reset") => {
            ctx.core.acl.log_reset();
            ctx.out.ok();
            return Ok(());
        }
        3 => count = arg_i64(args.get(2))?.max(0) as usize,
        _ => return Err(sub_syntax(args)),
    }
    let now = crate::keyspace::hlc::unix_ms();
    let entries = ctx.core.acl.log_entries(count);
    let out = &mut *ctx.out;
    out.array(entries.len());
    for e in entries {
        out.map(7);
        out.bulk(b"count");
        out.int(e.count as i64);
        out.bulk(b"reason");
        out.bulk(e.reason.name().as_bytes());
        out.bulk(b"context");
        out.bulk(e.context.name().as_bytes());
        out.bulk(b"object");
        out.bulk(&e.object);
        out.bulk(b"username");
        out.bulk(e.username.as_bytes());
        out.bulk(b"age-seconds");
        out.double(now.saturating_sub(e.ctime_ms) as f64 / 1000.0);
        out.bulk(b"client-info");
        out.bulk(e.client_info.as_bytes());
    }
    Ok(())
}

fn dryrun(ctx: &mut Ctx, args: Args) -> CmdResult {
    let Some(u) = ctx.core.acl.user(&lossy(args.get(2))) else {
        return Err(CmdError::err(format!(
            "User '{}' not found",
            lossy(args.get(2))
        )));
    };
    let line = args.slice_from(3);
    let t = &ctx.core.commands;
    let Some(mut id) = t.lookup(line.get(0)) else {
        return Err(CmdError::err(format!(
            "Command '{}' not found",
            lossy(line.get(0))
        )));
    };
    if t.has_subcommands(id) && line.len() >= 2 {
        id = t
            .lookup_sub(id, line.get(1))
            .ok_or_else(|| CmdError::err(format!("Command '{}' not found", lossy(line.get(0)))))?;
    }
    let name = &t.full_names[id];
    if !t.get(id).arity_ok(line.len()) {
        return Err(CmdError::err(format!(
            "wrong number of arguments for '{name}' command"
        )));
    }
    match u.check(t, id, line) {
        Ok(()) => ctx.out.ok(),
        Err(Denied::Command) => ctx
            .out
            .bulk(format!("This user has no permissions to run the '{name}' command").as_bytes()),
        Err(Denied::Key(i)) => ctx.out.bulk(
            format!(
                "This user has no permissions to access the '{}' key",
                lossy(line.get(i))
            )
            .as_bytes(),
        ),
        Err(Denied::Channel(i)) => ctx.out.bulk(
            format!(
                "This user has no permissions to access the '{}' channel",
                lossy(line.get(i))
            )
            .as_bytes(),
        ),
    }
    Ok(())
}

/*
 * The ACL file.
 */

const NO_FILE: &str = "This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

fn aclfile(ctx: &Ctx) -> Result<String, CmdError> {
    let f = ctx.core.config.read().get_str("aclfile");
    if f.is_empty() {
        return Err(CmdError::err(NO_FILE));
    }
    Ok(f)
}

fn load(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let path = aclfile(ctx)?;
    let users = load_file(ctx.core, &path).map_err(CmdError::err)?;
    // Every user but the default one is replaced: their connections
    // close, this one too after the reply (Redis's ACLFreeUserAndKillClients).
    let old: Vec<String> = ctx
        .core
        .acl
        .users()
        .iter()
        .map(|u| u.name.clone())
        .collect();
    let old: Vec<String> = old.into_iter().filter(|n| n != "default").collect();
    ctx.core.acl.replace_all(&ctx.core.commands, users);
    kill_user_clients(ctx, &old);
    ctx.out.ok();
    Ok(())
}

fn save(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let path = aclfile(ctx)?;
    let mut text = user_lines(ctx.core).join("\n");
    text.push('\n');
    let tmp = format!("{path}.tmp-{}", std::process::id());
    let r = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        crate::log_warning!("Writing ACL file for ACL SAVE: {e}");
        return Err(CmdError::err("There was an error trying to save the ACLs. Please check the server logs for more information"));
    }
    ctx.out.ok();
    Ok(())
}

/// Reads an ACL file into a new set of users (Redis's ACLLoadFromFile):
/// every line `user <name> <rules>`; any error, reported with its file and
/// line, and nothing is loaded.
pub(crate) fn load_file(core: &Core, path: &str) -> Result<BTreeMap<String, Arc<User>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "Error loading ACLs, opening file '{path}': {}",
            crate::config::parse::io_error_text(&e)
        )
    })?;
    let mut users = BTreeMap::new();
    let mut errors = String::new();
    for (i, raw) in text.split('\n').enumerate() {
        if let Err(e) = load_line(core, raw, &mut users) {
            errors.push_str(&format!("{path}:{}: {e}. ", i + 1));
        }
    }
    if errors.is_empty() {
        return Ok(users);
    }
    errors.push_str(
        "WARNING: ACL errors detected, no change to the previously active ACL rules was performed",
    );
    Err(errors)
}

fn load_line(
    core: &Core,
    raw: &str,
    users: &mut BTreeMap<String, Arc<User>>,
) -> Result<(), String> {
    let line = raw.trim_matches(|c| " \t\r\n".contains(c));
    let words: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
    if words.is_empty() {
        return Ok(());
    }
    if words[0] != "user" || words.len() < 2 {
        return Err("should start with user keyword followed by the username".into());
    }
    let name = words[1];
    if users.contains_key(name) {
        return Err(format!("Duplicate user '{name}' found"));
    }
    let rules: Vec<Vec<u8>> = words[2..].iter().map(|w| w.as_bytes().to_vec()).collect();
    let u = apply_rules(core, name, None, &rules)?;
    users.insert(name.to_string(), Arc::new(u));
    Ok(())
}

/// Start-up: the users of `user` directives or of `aclfile` (never both).
pub(crate) fn load_at_startup(core: &Core, user_lines: &[Vec<String>]) -> Result<(), String> {
    let file = core.config.read().get_str("aclfile");
    if !file.is_empty() && !user_lines.is_empty() {
        return Err("Configuring Redis with users defined in redis.conf and at the same setting an ACL file path is invalid. This setup is very likely to lead to configuration errors and security holes, please define either an ACL file or declare users directly in your redis.conf, but not both.".into());
    }
    for words in user_lines {
        let name = &words[0];
        let rules: Vec<Vec<u8>> = words[1..].iter().map(|w| w.as_bytes().to_vec()).collect();
        // A `user default` line starts from a reset default user.
        let base = (name == "default").then(|| {
            let mut d = (*core.acl.default_user()).clone();
            let _ = d.apply(&core.commands, b"reset", core.acl.pubsub_all());
            d
        });
        let u = apply_rules(core, name, base.as_ref(), &rules)
            .map_err(|e| format!("Error loading ACL rule for the user named '{name}': {e}"))?;
        core.acl.put(u);
    }
    if !file.is_empty() {
        let users = load_file(core, &file)
            .map_err(|e| format!("Aborting Redis startup because of ACL errors: {e}"))?;
        core.acl.replace_all(&core.commands, users);
    }
    Ok(())
}
