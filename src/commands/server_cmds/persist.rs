//! SAVE and BGSAVE (Redis's rdb.c saveCommand / bgsaveCommand). What they
//! start lives in `persistence/save.rs`.

use super::super::util::eq_ic;
use super::super::{CmdError, CmdResult, Ctx};
use crate::protocol::Args;

pub fn save(ctx: &mut Ctx, _args: Args) -> CmdResult {
    crate::persistence::save::save(ctx.srv)?;
    ctx.out.ok();
    Ok(())
}

/// BGSAVE [SCHEDULE]
pub fn bgsave(ctx: &mut Ctx, args: Args) -> CmdResult {
    let schedule = match args.len() {
        1 => false,
        2 if eq_ic(args.get(1), "SCHEDULE") => true,
        _ => return Err(CmdError::Syntax),
    };
    let line = crate::persistence::save::bgsave(ctx.srv, schedule, ctx.client.in_exec)?;
    ctx.out.simple(line);
    Ok(())
}
