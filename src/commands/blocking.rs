//! The command side of blocking (BLPOP & co., BZPOPMIN & co.): parse a
//! timeout, and block a client on keys whose locks the handler holds. The
//! registry of waiters and the design are in `core/blocking.rs`.

use super::{CmdError, Ctx};
use crate::core::blocking::BlockRequest;
use crate::protocol::Args;

/// Blocks the client on `keys` (their locks held by the caller), or, where
/// it may not block (MULTI/EXEC, replay), replies the timeout's null array.
pub(crate) fn block_or_null(ctx: &mut Ctx, args: Args, keys: &[&[u8]], deadline_ms: u64) {
    if may_block(ctx) {
        let keys = keys.iter().map(|k| k.to_vec()).collect();
        block_on(ctx, args, keys, deadline_ms);
    } else {
        ctx.out.null_array();
    }
}

/// Whether the client running `ctx` may block.
pub(crate) fn may_block(ctx: &Ctx) -> bool {
    ctx.client.shared.is_some()
        && !ctx.client.block.deny
        && !ctx.client.in_exec
        && ctx.replay_version.is_none()
}

/// A blocking command's timeout in seconds, as Redis's
/// getTimeoutFromObjectOrReply: the deadline in unix ms (0 = forever).
pub(crate) fn parse_timeout(now_ms: u64, a: &[u8]) -> Result<u64, CmdError> {
    let secs = crate::commands::util::parse_f64(a)
        .ok_or(CmdError::err("timeout is not a float or out of range"))?;
    let ms = (secs * 1000.0).ceil();
    // Redis casts to long long: out of range becomes LLONG_MIN, "negative".
    if !(0.0..9.2e18).contains(&ms) {
        return Err(CmdError::err("timeout is negative"));
    }
    let ms = ms as u64;
    Ok(if ms == 0 {
        0
    } else {
        now_ms.saturating_add(ms)
    })
}

/// Blocks the client on `keys` (call while holding their locks). The caller
/// has checked [`may_block`].
pub(crate) fn block_on(ctx: &mut Ctx, args: Args, keys: Vec<Vec<u8>>, deadline_ms: u64) {
    block_on_argv(ctx, args.to_vec(), keys, deadline_ms);
}

/// [`block_on`], re-running `argv` when woken (XREAD's `$` resolved).
pub(crate) fn block_on_argv(
    ctx: &mut Ctx,
    argv: Vec<Vec<u8>>,
    keys: Vec<Vec<u8>>,
    deadline_ms: u64,
) {
    let (ticket, deadline_ms) = match ctx.client.block.retry {
        Some((t, d)) => (Some(t), d),
        None => (None, deadline_ms),
    };
    let db = ctx.db();
    let guard = ctx.core.blocking.register(ctx.client.id, db, &keys, ticket);
    ctx.client.block.request = Some(BlockRequest {
        db,
        keys,
        deadline_ms,
        argv,
        guard,
    });
}
