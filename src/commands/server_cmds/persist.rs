//! SAVE, BGSAVE and BGREWRITEAOF (Redis's rdb.c saveCommand / bgsaveCommand). What they
//! start lives in `persistence/save.rs`, reached through `Ctx::admin`.

use super::super::util::eq_ic;
use super::super::{CmdError, CmdResult, Ctx};
use crate::protocol::Args;

pub(super) fn save(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.admin.save()?;
    ctx.out.ok();
    Ok(())
}

/// BGSAVE [SCHEDULE]
pub(super) fn bgsave(ctx: &mut Ctx, args: Args) -> CmdResult {
    let schedule = match args.len() {
        1 => false,
        2 if eq_ic(args.get(1), "SCHEDULE") => true,
        _ => return Err(CmdError::Syntax),
    };
    let line = ctx.admin.bgsave(schedule, ctx.client.in_exec)?;
    ctx.out.simple(line);
    Ok(())
}

/// BGREWRITEAOF
pub(super) fn bgrewriteaof(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let line = ctx.admin.bgrewriteaof()?;
    ctx.out.simple(line);
    Ok(())
}
