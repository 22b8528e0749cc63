//! INFO [section ...]: which sections a request names, in Redis's order.
//! The server writes them (`server/info.rs`): INFO reports on every layer.

use super::super::{CmdResult, Ctx};
use crate::protocol::Args;

/// Every section, in output order: (name, in "default", in "all").
const SECTIONS: &[(&str, bool, bool)] = &[
    ("server", true, true),
    ("clients", true, true),
    ("memory", true, true),
    ("persistence", true, true),
    ("stats", true, true),
    ("replication", true, true),
    ("cpu", true, true),
    ("modules", true, true),
    ("commandstats", false, true),
    ("errorstats", true, true),
    ("latencystats", false, true),
    ("cluster", true, true),
    ("keyspace", true, true),
];

/// Which sections a request names.
fn wanted(args: Args) -> Vec<&'static str> {
    let mut want = vec![false; SECTIONS.len()];
    if args.len() == 1 {
        for (i, s) in SECTIONS.iter().enumerate() {
            want[i] = s.1;
        }
    }
    for a in args.iter().skip(1) {
        let a = String::from_utf8_lossy(a).to_ascii_lowercase();
        for (i, s) in SECTIONS.iter().enumerate() {
            let hit = match a.as_str() {
                "default" => s.1,
                "all" => s.2,
                "everything" => true,
                name => name == s.0,
            };
            want[i] |= hit;
        }
    }
    SECTIONS
        .iter()
        .zip(want)
        .filter(|(_, w)| *w)
        .map(|(s, _)| s.0)
        .collect()
}

pub(super) fn info(ctx: &mut Ctx, args: Args) -> CmdResult {
    let text = ctx.admin.info(&wanted(args));
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}
