//! `redis.call` and `redis.pcall`: one command run from a script, as the
//! dispatcher would run it, its reply converted to Lua.

use mlua::{Lua, Value, Variadic};

use crate::commands::flags::{NOSCRIPT, WRITE};
use crate::commands::{CmdError, CommandId, Ctx};
use crate::protocol::{Args, ReplyBuf};

/// What a running script may do, fixed when it starts.
pub struct Script {
    /// The database the script started in (EVAL's client's).
    pub db: usize,
    /// The declared keys; `None` when the script declared none and holds
    /// every shard.
    pub keys: Option<Vec<Vec<u8>>>,
    /// EVAL_RO / EVALSHA_RO.
    pub read_only: bool,
}

/// A failed call: the error reply's text, e.g. "ERR Unknown ...".
type Refusal = String;

/// Runs the command `args`; returns whether it succeeded and its reply as
/// a Lua value (an error reply as {err=..}).
pub fn rcall(
    ctx: &mut Ctx,
    s: &Script,
    lua: &Lua,
    args: Variadic<Value>,
) -> mlua::Result<(bool, Value)> {
    let resp = lua_resp(lua);
    let reply = match argv(lua, &args).and_then(|a| run(ctx, s, &a, resp)) {
        Ok(buf) => buf,
        Err(msg) => {
            let t = lua.create_table()?;
            t.set("err", msg)?;
            return Ok((false, Value::Table(t)));
        }
    };
    let v = super::convert::reply_to_lua(lua, &reply)?;
    let failed = reply.first() == Some(&b'-');
    Ok((!failed, v))
}

fn lua_resp(lua: &Lua) -> u8 {
    let p: Option<mlua::Table> = lua.named_registry_value("lattice_private").ok();
    p.and_then(|p| p.raw_get::<u8>("resp").ok()).unwrap_or(2)
}

/// The call's arguments as strings (numbers as Lua prints them).
fn argv(lua: &Lua, args: &[Value]) -> Result<Vec<Vec<u8>>, Refusal> {
    if args.is_empty() {
        return Err("ERR Please specify at least one argument for this redis lib call".into());
    }
    let bad = || Refusal::from("ERR Lua redis lib command arguments must be strings or integers");
    args.iter()
        .map(|a| match a {
            Value::String(_) | Value::Integer(_) | Value::Number(_) => lua
                .coerce_string(a.clone())
                .ok()
                .flatten()
                .map(|s| s.as_bytes().to_vec())
                .ok_or_else(bad),
            _ => Err(bad()),
        })
        .collect()
}

/// Looks the command up and checks it may run here.
fn resolve(ctx: &Ctx, s: &Script, args: Args) -> Result<CommandId, Refusal> {
    let t = &ctx.core.commands;
    let unknown = || Refusal::from("ERR Unknown Redis command called from script");
    let mut id = t.lookup(args.get(0)).ok_or_else(unknown)?;
    if t.has_subcommands(id) && args.len() > 1 {
        id = t.lookup_sub(id, args.get(1)).ok_or_else(|| {
            CmdError::UnknownSubcommand {
                cmd: t.get(id).name.to_string(),
                sub: String::from_utf8_lossy(args.get(1)).into_owned(),
            }
            .render()
        })?;
    }
    let cmd = t.get(id);
    if !cmd.arity_ok(args.len()) {
        return Err("ERR Wrong number of args calling Redis command from script".into());
    }
    if cmd.flags & NOSCRIPT != 0 {
        return Err("ERR This Redis command is not allowed from script".into());
    }
    if s.read_only && cmd.flags & WRITE != 0 {
        return Err("ERR Write commands are not allowed from read-only scripts.".into());
    }
    check_keys(ctx, s, id, args)?;
    Ok(id)
}

/// With declared keys only their shards are held: a command may name only
/// declared keys of the script's database (DECISIONS 54).
fn check_keys(ctx: &Ctx, s: &Script, id: CommandId, args: Args) -> Result<(), Refusal> {
    let Some(keys) = &s.keys else { return Ok(()) };
    let pos = crate::commands::multi::command_keys(ctx.core, id, args);
    let ok = pos.is_some_and(|pos| {
        pos.is_empty()
            || (ctx.client.db == s.db && pos.iter().all(|&p| keys.iter().any(|k| k == args.get(p))))
    });
    if ok {
        return Ok(());
    }
    Err(
        "ERR Script attempted to access a key not declared in KEYS (a script that declares keys \
         holds only their shards; pass numkeys 0 to hold the whole keyspace)"
            .into(),
    )
}

/// Runs one command, returning its RESP reply (or the refusal).
fn run(ctx: &mut Ctx, s: &Script, argv: &[Vec<u8>], resp: u8) -> Result<Vec<u8>, Refusal> {
    let owned = crate::protocol::OwnedArgs::new(argv);
    let args = owned.args();
    let id = resolve(ctx, s, args)?;
    let cmd = ctx.core.commands.get(id);
    let mut out = ReplyBuf::new(resp);
    let start = quanta::Instant::now();
    let r = {
        let mut sub = Ctx {
            core: ctx.core,
            admin: ctx.admin,
            client: &mut *ctx.client,
            out: &mut out,
            clock: &mut *ctx.clock,
            stats: ctx.stats,
            now_ms: ctx.now_ms,
            replay_version: None,
            sent: Some(args),
            active: crate::core::ctx::ActiveWrite::for_command(ctx.core, cmd.flags),
        };
        (cmd.handler)(&mut sub, args)
    };
    ctx.stats
        .record_call(id, start.elapsed().as_micros() as u64, r.is_err());
    if let Err(e) = r {
        ctx.stats.record_error(&e.code());
        out.buf.clear();
        out.error(&e.render());
    }
    Ok(out.buf)
}
