//! KEYDB.CRON, KeyDB's scheduled Lua scripts (issue 28 item 3):
//!
//! ```text
//! KEYDB.CRON name SINGLE|REPEAT [start] interval script [numkeys [key ...] [arg ...]]
//! ```
//!
//! `name` becomes a key holding the job (`keyspace/cron.rs`): the script
//! runs as EVAL would, with the keys and args, in the database the command
//! ran in, at `start + interval` (unix ms; `start` defaults to now), then
//! every `interval` ms for REPEAT; a SINGLE job's key is deleted after its
//! run. DEL on the key cancels the job, and KEYDB.CRON on an existing name
//! replaces it. Replies, errors and the argument rules follow KeyDB's
//! cron.cpp (read, not copied): a fourth argument that is an integer is
//! the interval and the third the start; "ERR interval must be positive";
//! "ERR Missing arguments or numkeys is too big".
//!
//! The job propagates as its whole value (`RESTORE name 0 <payload>
//! REPLACE`): replicas, peers and the AOF get the same job, with its owner
//! (this node) and next run; the runs happen on the owner only and its
//! writes replicate as any script's (`server/cron_jobs.rs`, DECISIONS 110).

use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::cron::CronJob;
use crate::keyspace::Value;
use crate::protocol::{parse_i64, Args};

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "scripting", acl = "scripting"),
    cmd("keydb.cron", -5, WRITE | DENYOOM, keydb_cron)
        .doc("6.5.2", "Run a specified script after start + delay, optionally repeating every delay interval. The job may be cancelled by deleting the key associated with the job (name parameter)")
        .complexity("O(N) where N is the number of keys and arguments")
        .keys(1, 1, 1),
};

/// The job KEYDB.CRON's arguments describe, for database `db` at `now`.
pub(crate) fn parse(args: Args, now: u64, owner: u64) -> Result<CronJob, CmdError> {
    let single = match args.get(2) {
        m if m.eq_ignore_ascii_case(b"single") => true,
        m if m.eq_ignore_ascii_case(b"repeat") => false,
        _ => return Err(CmdError::Syntax),
    };
    let first = parse_i64(args.get(3)).ok_or_else(|| CmdError::err("missing expire time"))?;
    // `start interval script ...` when the fourth is an integer too.
    let (start, interval, at) = match (args.len() > 5).then(|| parse_i64(args.get(4))).flatten() {
        Some(second) => (first, second, 5),
        None => (now as i64, first, 4),
    };
    if interval <= 0 {
        return Err(CmdError::err("interval must be positive"));
    }
    if at >= args.len() {
        return Err(CmdError::Syntax);
    }
    let numkeys = match args.len() > at + 1 {
        true => parse_i64(args.get(at + 1)).ok_or(CmdError::NotInteger)?,
        false => 0,
    };
    if numkeys < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    let first_key = at + 2;
    if numkeys > 0 && (args.len() as i64) < first_key as i64 + numkeys {
        return Err(CmdError::err("Missing arguments or numkeys is too big"));
    }
    let keys_end = first_key + numkeys as usize;
    let start = start.max(0) as u64;
    Ok(CronJob {
        script: args.get(at).to_vec(),
        start_ms: start,
        interval_ms: interval as u64,
        next_ms: start.saturating_add(interval as u64),
        single,
        keys: (first_key..keys_end)
            .map(|i| args.get(i).to_vec())
            .collect(),
        args: (keys_end.max(first_key)..args.len())
            .map(|i| args.get(i).to_vec())
            .collect(),
        owner,
    })
}

fn keydb_cron(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let job = parse(args, ctx.now_ms, ctx.core.node_id)?;
    let next = job.next_ms;
    let value = Value::Cron(Box::new(job));
    let payload = crate::persistence::rdb::encode::dump_payload(&value, false);
    let db = ctx.db();
    let mut l = ctx.open(key);
    let version = match l.entry(key).map(|e| e.version) {
        Some(v) => {
            l.remove(key);
            ctx.version_after(v)
        }
        None => ctx.new_version(),
    };
    l.put(key, value, 0, version);
    ctx.propagate(version, &[b"RESTORE", key, b"0", &payload, b"REPLACE"]);
    drop(l);
    ctx.core.cron.add(db, key, next);
    ctx.out.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::OwnedArgs;

    fn job(argv: &[&str]) -> Result<CronJob, String> {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        let owned = OwnedArgs::new(&argv);
        parse(owned.args(), 1_000, 7).map_err(|e| e.render())
    }

    #[test]
    fn arguments_as_keydb_reads_them() {
        let j = job(&["keydb.cron", "j", "repeat", "0", "900", "return 1"]).unwrap();
        assert_eq!(
            (j.start_ms, j.interval_ms, j.next_ms, j.single),
            (0, 900, 900, false)
        );
        let j = job(&["keydb.cron", "j", "repeat", "900", "return 1"]).unwrap();
        assert_eq!((j.start_ms, j.next_ms), (1_000, 1_900));
        let j = job(&["keydb.cron", "j", "repeat", "0", "900", "return 1", "0"]).unwrap();
        assert_eq!(
            (j.start_ms, j.interval_ms, j.next_ms, j.single),
            (0, 900, 900, false)
        );
        assert!(j.keys.is_empty() && j.args.is_empty());
        let j = job(&["keydb.cron", "j", "single", "500", "s", "1", "k", "a", "b"]).unwrap();
        assert_eq!(
            (j.start_ms, j.interval_ms, j.next_ms, j.single),
            (1_000, 500, 1_500, true)
        );
        assert_eq!(j.keys, vec![b"k".to_vec()]);
        assert_eq!(j.args, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(j.owner, 7);
        let j = job(&["keydb.cron", "j", "single", "5", "10", "s", "0", "x"]).unwrap();
        assert_eq!(
            (j.start_ms, j.interval_ms, j.keys.len(), j.args.len()),
            (5, 10, 0, 1)
        );
    }

    #[test]
    fn errors_as_keydb_gives_them() {
        let e = |a: &[&str]| job(a).unwrap_err();
        assert_eq!(
            e(&["keydb.cron", "j", "often", "5", "s"]),
            "ERR syntax error"
        );
        assert_eq!(
            e(&["keydb.cron", "j", "single", "x", "s"]),
            "ERR missing expire time"
        );
        assert_eq!(
            e(&["keydb.cron", "j", "single", "0", "0", "s", "1", "k"]),
            "ERR interval must be positive"
        );
        assert_eq!(
            e(&["keydb.cron", "j", "single", "5", "s", "2", "k"]),
            "ERR Missing arguments or numkeys is too big"
        );
        assert_eq!(
            e(&["keydb.cron", "j", "single", "5", "s", "x"]),
            "ERR value is not an integer or out of range"
        );
    }
}
