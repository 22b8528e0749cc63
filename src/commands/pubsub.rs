//! Pub/sub commands (Redis's pubsub.c): (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE,
//! PUBLISH, SPUBLISH and PUBSUB introspection.
//!
//! Without cluster mode, shard channels are plain channels in a namespace of
//! their own. The registry shared by all threads lives in
//! `core/pubsub.rs`; this module keeps each client's own view
//! (`ClientState::pubsub`) in step with it and mirrors the counts into the
//! client's shared record (CLIENT LIST `sub=`/`psub=`/`ssub=`, flag `P`).
//! A RESP2 client with any subscription is in subscribed mode: only the
//! commands of [`check_subscribed_mode`] run.

use super::keyspec::KeySpec;
use std::sync::atomic::Ordering::Relaxed;

use super::util::lossy;
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::core::client::{ClientState, ReplyMode};
use crate::core::pubsub::Kind;
use crate::core::Core;
use crate::protocol::Args;

const SUB_FLAGS: u32 = PUBSUB | NOSCRIPT | LOADING | STALE;
const PUB_FLAGS: u32 = PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "pubsub", acl = ""),
    cmd("subscribe", -2, SUB_FLAGS, subscribe)
        .doc("2.0.0", "Listens for messages published to channels.")
        .complexity("O(N) where N is the number of channels to subscribe to."),
    cmd("unsubscribe", -1, SUB_FLAGS, unsubscribe)
        .doc("2.0.0", "Stops listening to messages posted to channels.")
        .complexity("O(N) where N is the number of channels to unsubscribe."),
    cmd("psubscribe", -2, SUB_FLAGS, psubscribe)
        .doc("2.0.0", "Listens for messages published to channels that match one or more patterns.")
        .complexity("O(N) where N is the number of patterns to subscribe to."),
    cmd("punsubscribe", -1, SUB_FLAGS, punsubscribe)
        .doc("2.0.0", "Stops listening to messages published to channels that match one or more patterns.")
        .complexity("O(N) where N is the number of patterns to unsubscribe."),
    cmd("publish", 3, PUB_FLAGS, publish)
        .doc("2.0.0", "Posts a message to a channel.")
        .complexity("O(N+M) where N is the number of clients subscribed to the receiving channel and M is the total number of subscribed patterns (by any client)."),
    cmd("ssubscribe", -2, SUB_FLAGS, ssubscribe)
        .doc("7.0.0", "Listens for messages published to shard channels.")
        .complexity("O(N) where N is the number of shard channels to subscribe to.")
        .keys(1, -1, 1)
        .key_specs(&[KeySpec::at(1, &["not_key"]).range(-1, 1, 0)]),
    cmd("sunsubscribe", -1, SUB_FLAGS, sunsubscribe)
        .doc("7.0.0", "Stops listening to messages posted to shard channels.")
        .complexity("O(N) where N is the number of clients already subscribed to a shard channel.")
        .keys(1, -1, 1)
        .key_specs(&[KeySpec::at(1, &["not_key"]).range(-1, 1, 0)]),
    cmd("spublish", 3, PUB_FLAGS, spublish)
        .doc("7.0.0", "Post a message to a shard channel")
        .complexity("O(N) where N is the number of clients subscribed to the receiving shard channel.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["not_key"])]),
    container("pubsub", -2, help)
        .doc("2.8.0", "A container for Pub/Sub commands.")
        .complexity("Depends on subcommand.")
        .subs(SUBS),
};

const INTRO_FLAGS: u32 = PUBSUB | LOADING | STALE;

static SUBS: &[Command] = crate::commands::command_table! {
    family(group = "pubsub", acl = ""),
    cmd("channels", -2, INTRO_FLAGS, channels)
        .doc("2.8.0", "Returns the active channels.")
        .complexity("O(N) where N is the number of active channels, and assuming constant time pattern matching (relatively short channels and patterns)"),
    cmd("numpat", 2, INTRO_FLAGS, numpat)
        .doc("2.8.0", "Returns a count of unique pattern subscriptions."),
    cmd("numsub", -2, INTRO_FLAGS, numsub)
        .doc("2.8.0", "Returns a count of subscribers to channels.")
        .complexity("O(N) for the NUMSUB subcommand, where N is the number of requested channels"),
    cmd("shardchannels", -2, INTRO_FLAGS, shardchannels)
        .doc("7.0.0", "Returns the active shard channels.")
        .complexity("O(N) where N is the number of active shard channels, and assuming constant time pattern matching (relatively short shard channels)."),
    cmd("shardnumsub", -2, INTRO_FLAGS, shardnumsub)
        .doc("7.0.0", "Returns the count of subscribers of shard channels.")
        .complexity("O(N) for the SHARDNUMSUB subcommand, where N is the number of requested shard channels"),
    cmd("help", 2, LOADING | STALE, help)
        .doc("6.2.0", "Returns helpful text about the different subcommands."),
};

const HELP: &[&str] = &[
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",
];

/// RESP2 subscribed mode (Redis's processCommand check): a client with any
/// subscription may only run these; `full_name` is "name" or "parent|sub".
pub(crate) fn check_subscribed_mode(client: &ClientState, full_name: &str) -> Result<(), CmdError> {
    if client.resp != 2 || client.pubsub.total() == 0 {
        return Ok(());
    }
    match full_name {
        "ping" | "subscribe" | "ssubscribe" | "unsubscribe" | "sunsubscribe" | "psubscribe"
        | "punsubscribe" | "quit" | "reset" => Ok(()),
        _ => Err(CmdError::err(format!(
            "Can't execute '{full_name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
        ))),
    }
}

/// Whether PING must answer in the subscribed-mode shape (["pong", arg]).
pub(crate) fn in_resp2_subscribed_mode(client: &ClientState) -> bool {
    client.resp == 2 && client.pubsub.total() > 0
}

/// Drops every subscription of a client without replies (disconnect, RESET).
pub(crate) fn remove_client(srv: &Core, client: &mut ClientState) {
    srv.pubsub.remove_client(&mut client.pubsub, client.id);
    sync_shared(client);
}

/// Mirrors the client's counts into its shared record (CLIENT LIST).
fn sync_shared(client: &ClientState) {
    let Some(sh) = &client.shared else { return };
    for (i, set) in client.pubsub.sets.iter().enumerate() {
        sh.subs[i].store(set.len(), Relaxed);
    }
    let mut f = sh.flags.lock();
    f.retain(|c| c != 'P');
    if client.pubsub.total() > 0 {
        f.push('P');
    }
}

fn reply_event(ctx: &mut Ctx, tag: &str, name: Option<&[u8]>, count: usize) {
    ctx.out.push(3);
    ctx.out.bulk_str(tag);
    match name {
        Some(n) => ctx.out.bulk(n),
        None => ctx.out.null(),
    }
    ctx.out.int(count as i64);
}

/// (Un)subscribe confirmations are pushes: as in Redis, they reach the
/// client even under CLIENT REPLY OFF/SKIP, which the dispatcher applies by
/// truncating `out`, so they go through the client's push channel instead.
fn confirm_despite_reply_mode(ctx: &mut Ctx, mark: usize) {
    if !matches!(ctx.client.reply_mode, ReplyMode::Off | ReplyMode::Skip) {
        return;
    }
    let bytes = ctx.out.buf.split_off(mark);
    if let Some(sh) = &ctx.client.shared {
        let limit = ctx.core.hot.obuf_limits.read().pubsub;
        sh.push(
            crate::core::client::PushBuf::shared(bytes),
            &limit,
            ctx.now_ms,
        );
    }
}

fn sub_generic(ctx: &mut Ctx, args: Args, kind: Kind) -> CmdResult {
    let mark = ctx.out.len();
    for name in args.iter().skip(1) {
        if ctx.client.pubsub.sets[kind.index()].insert(name.to_vec()) {
            if let Some(sh) = &ctx.client.shared {
                ctx.core.pubsub.subscribe(kind, name, sh);
            }
        }
        let n = ctx.client.pubsub.count_for(kind);
        reply_event(ctx, kind.sub_tag(), Some(name), n);
    }
    sync_shared(ctx.client);
    confirm_despite_reply_mode(ctx, mark);
    Ok(())
}

fn unsub_one(ctx: &mut Ctx, kind: Kind, name: &[u8]) {
    if ctx.client.pubsub.sets[kind.index()].remove(name) {
        ctx.core.pubsub.unsubscribe(kind, name, ctx.client.id);
    }
    let n = ctx.client.pubsub.count_for(kind);
    reply_event(ctx, kind.unsub_tag(), Some(name), n);
}

fn unsub_generic(ctx: &mut Ctx, args: Args, kind: Kind) -> CmdResult {
    let mark = ctx.out.len();
    if args.len() > 1 {
        for name in args.iter().skip(1) {
            unsub_one(ctx, kind, name);
        }
    } else {
        let all: Vec<Vec<u8>> = ctx.client.pubsub.sets[kind.index()]
            .iter()
            .cloned()
            .collect();
        if all.is_empty() {
            let n = ctx.client.pubsub.count_for(kind);
            reply_event(ctx, kind.unsub_tag(), None, n);
        }
        for name in all {
            unsub_one(ctx, kind, &name);
        }
    }
    sync_shared(ctx.client);
    confirm_despite_reply_mode(ctx, mark);
    Ok(())
}

fn subscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    sub_generic(ctx, args, Kind::Channel)
}

fn psubscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    sub_generic(ctx, args, Kind::Pattern)
}

fn ssubscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    sub_generic(ctx, args, Kind::Shard)
}

fn unsubscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    unsub_generic(ctx, args, Kind::Channel)
}

fn punsubscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    unsub_generic(ctx, args, Kind::Pattern)
}

fn sunsubscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    unsub_generic(ctx, args, Kind::Shard)
}

fn publish_generic(ctx: &mut Ctx, args: Args, shard: bool) -> CmdResult {
    let limit = ctx.core.hot.obuf_limits.read().pubsub;
    let n = ctx
        .core
        .pubsub
        .publish(shard, args.get(1), args.get(2), &limit, ctx.now_ms);
    ctx.out.int(n as i64);
    // Replicas get it too (their subscribers hear it), as Redis does.
    let name: &[u8] = if shard { b"SPUBLISH" } else { b"PUBLISH" };
    ctx.propagate_repl_only(&[name, args.get(1), args.get(2)]);
    Ok(())
}

fn publish(ctx: &mut Ctx, args: Args) -> CmdResult {
    publish_generic(ctx, args, false)
}

fn spublish(ctx: &mut Ctx, args: Args) -> CmdResult {
    publish_generic(ctx, args, true)
}

fn list_names(ctx: &mut Ctx, args: Args, kind: Kind) -> CmdResult {
    if args.len() > 3 {
        return Err(CmdError::err(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            lossy(args.get(1))
        )));
    }
    let pat = (args.len() == 3).then(|| args.get(2));
    let names = ctx.core.pubsub.names(kind, pat);
    ctx.out.array(names.len());
    for n in &names {
        ctx.out.bulk(n);
    }
    Ok(())
}

fn channels(ctx: &mut Ctx, args: Args) -> CmdResult {
    list_names(ctx, args, Kind::Channel)
}

fn shardchannels(ctx: &mut Ctx, args: Args) -> CmdResult {
    list_names(ctx, args, Kind::Shard)
}

fn count_subs(ctx: &mut Ctx, args: Args, kind: Kind) -> CmdResult {
    ctx.out.array((args.len() - 2) * 2);
    for name in args.iter().skip(2) {
        ctx.out.bulk(name);
        let n = ctx.core.pubsub.num_subscribers(kind, name);
        ctx.out.int(n as i64);
    }
    Ok(())
}

fn numsub(ctx: &mut Ctx, args: Args) -> CmdResult {
    count_subs(ctx, args, Kind::Channel)
}

fn shardnumsub(ctx: &mut Ctx, args: Args) -> CmdResult {
    count_subs(ctx, args, Kind::Shard)
}

fn numpat(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.int(ctx.core.pubsub.count(Kind::Pattern) as i64);
    Ok(())
}

fn help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.array(HELP.len());
    for l in HELP {
        ctx.out.simple(l);
    }
    Ok(())
}
