//! Key specs and command tips: the parts of a command-table entry that tell
//! clients (cluster routing, ACL key selectors, proxies) where a command's
//! keys are and what it does to each (Redis 7's COMMAND INFO fields 8 and 9).
//!
//! A spec is Redis's two-step search: `begin_search` finds where the keys
//! start (a fixed index, or the argument after a keyword), `find_keys` says
//! how many follow (a range, or a count read from an argument). Flags name
//! the access: one of RW/RO/OW/RM plus access/update/insert/delete, and
//! not_key, incomplete, variable_flags where they apply.
//!
//! Entries written with `.key_specs(...)` list their specs exactly as Redis
//! reports them; entries without derive one spec from first/last/step (see
//! [`derived`]). Specs are plain const data so the table stays one static
//! literal; [`KeySpec::find`] evaluates one against a command line (COMMAND
//! GETKEYSANDFLAGS).

use super::table::Command;
use crate::protocol::eq_ic;
use crate::protocol::Args;

/// The flag names a spec may carry (Redis's key-spec flags).
#[cfg(test)]
pub(crate) const FLAG_NAMES: &[&str] = &[
    "RW",
    "RO",
    "OW",
    "RM",
    "access",
    "update",
    "insert",
    "delete",
    "not_key",
    "incomplete",
    "variable_flags",
];

/// Where the keys start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Begin {
    /// At this argument index (the command name is 0).
    Index(i32),
    /// After the last (`startfrom` < 0) or first occurrence of the keyword,
    /// searching from `startfrom`.
    Keyword(&'static str, i32),
    /// Not expressible: GETKEYS uses the entry's keys function.
    Unknown,
}

/// How many keys follow the start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Find {
    /// Up to `last` (relative to the start; negative counts from the end),
    /// every `step`; `limit` > 1 takes 1/limit of what is left.
    Range {
        last: i32,
        step: i32,
        limit: i32,
    },
    /// The key count is at `idx` (relative to the start), the first key at
    /// `first`, then every `step`.
    KeyNum {
        idx: i32,
        first: i32,
        step: i32,
    },
    Unknown,
}

#[derive(Clone, Copy, Debug)]
pub struct KeySpec {
    pub flags: &'static [&'static str],
    pub begin: Begin,
    pub find: Find,
    pub notes: &'static str,
}

const ONE_KEY: Find = Find::Range {
    last: 0,
    step: 1,
    limit: 0,
};

impl KeySpec {
    /// One key at `index`.
    pub const fn at(index: i32, flags: &'static [&'static str]) -> KeySpec {
        KeySpec {
            flags,
            begin: Begin::Index(index),
            find: ONE_KEY,
            notes: "",
        }
    }
    /// One key after `keyword`, searched from `startfrom`.
    pub const fn keyword(kw: &'static str, from: i32, flags: &'static [&'static str]) -> KeySpec {
        KeySpec {
            flags,
            begin: Begin::Keyword(kw, from),
            find: ONE_KEY,
            notes: "",
        }
    }
    /// Keys whose place the spec cannot express.
    pub const fn unknown(flags: &'static [&'static str]) -> KeySpec {
        KeySpec {
            flags,
            begin: Begin::Unknown,
            find: Find::Unknown,
            notes: "",
        }
    }
    pub const fn range(mut self, last: i32, step: i32, limit: i32) -> KeySpec {
        self.find = Find::Range { last, step, limit };
        self
    }
    pub const fn keynum(mut self, idx: i32, first: i32, step: i32) -> KeySpec {
        self.find = Find::KeyNum { idx, first, step };
        self
    }
    pub const fn notes(mut self, notes: &'static str) -> KeySpec {
        self.notes = notes;
        self
    }

    /// Positions of the keys this spec finds in `args` (name at 0), as
    /// Redis's getKeysUsingKeySpecs; empty for unknown specs or when the
    /// command line is too short.
    pub fn find(&self, args: Args) -> Vec<usize> {
        let argc = args.len() as i64;
        let start = match self.begin {
            Begin::Index(i) => i as i64,
            Begin::Keyword(kw, from) => match keyword_pos(args, kw, from) {
                Some(p) => p + 1,
                None => return vec![],
            },
            Begin::Unknown => return vec![],
        };
        if start >= argc {
            return vec![];
        }
        let (first, last, step) = match self.find {
            Find::Range { last, step, limit } => {
                let end = if last >= 0 {
                    start + last as i64
                } else if limit <= 1 {
                    argc + last as i64
                } else {
                    start + (argc - start + last as i64 + 1) / limit as i64 - 1
                };
                (start, end, step.max(1) as i64)
            }
            Find::KeyNum { idx, first, step } => {
                let at = (start + idx as i64) as usize;
                if at >= args.len() {
                    return vec![];
                }
                let n = std::str::from_utf8(args.get(at))
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                    .unwrap_or(0);
                let k0 = start + first as i64;
                (k0, k0 + (n - 1) * step as i64, step.max(1) as i64)
            }
            Find::Unknown => return vec![],
        };
        (first..=last.min(argc - 1))
            .step_by(step as usize)
            .map(|i| i as usize)
            .collect()
    }
}

fn keyword_pos(args: Args, kw: &str, from: i32) -> Option<i64> {
    let argc = args.len() as i64;
    let hit = |i: &i64| eq_ic(args.get(*i as usize), kw);
    if from >= 0 {
        (from as i64..argc).find(hit)
    } else {
        (1..=argc + from as i64).rev().find(hit)
    }
}

/// The spec an entry without `.key_specs` gets: its first/last/step keys
/// with RW/update (write commands) or RO/access flags; unknown for an entry
/// with a keys function.
pub(crate) fn derived(cmd: &Command) -> Option<KeySpec> {
    if cmd.keys_fn.is_none() && cmd.first_key <= 0 {
        return None;
    }
    let flags: &'static [&'static str] = if cmd.is_write() {
        &["RW", "update"]
    } else {
        &["RO", "access"]
    };
    if cmd.keys_fn.is_some() {
        // Movable keys the entry does not describe: say so.
        return Some(KeySpec::unknown(flags));
    }
    let last = if cmd.last_key < 0 {
        cmd.last_key
    } else {
        cmd.last_key - cmd.first_key
    };
    Some(KeySpec::at(cmd.first_key, flags).range(last, cmd.key_step, 0))
}

/// The specs COMMAND INFO shows for `cmd`.
pub(crate) fn specs_of(cmd: &Command) -> Vec<KeySpec> {
    if !cmd.key_specs.is_empty() {
        return cmd.key_specs.to_vec();
    }
    derived(cmd).into_iter().collect()
}

/// The flags of the key at `pos` in `args`: what the entry's key-flags
/// function says, else those of the first spec that finds it, else of the first spec that cannot say (unknown/keyword).
pub(crate) fn flags_for(cmd: &Command, args: Args, pos: usize) -> &'static [&'static str] {
    if let Some(flags) = cmd.key_flags_fn.and_then(|f| f(args, pos)) {
        return flags;
    }
    let specs = specs_of(cmd);
    specs
        .iter()
        .find(|s| s.find(args).contains(&pos))
        .or_else(|| specs.iter().find(|s| s.begin == Begin::Unknown))
        .or(specs.first())
        .map_or(&[], |s| s.flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finds with `spec` in the space-separated command line `line`.
    fn find(spec: KeySpec, line: &str) -> Vec<usize> {
        let mut spans = vec![];
        for w in line.split(' ') {
            let at = spans
                .last()
                .map_or(0, |r: &std::ops::Range<usize>| r.end + 1);
            spans.push(at..at + w.len());
        }
        spec.find(Args::new(line.as_bytes(), &spans))
    }

    #[test]
    fn every_table_spec_uses_redis_flag_names() {
        fn check(cmds: &[Command]) {
            for c in cmds {
                for spec in c.key_specs {
                    for f in spec.flags {
                        assert!(FLAG_NAMES.contains(f), "{}: key-spec flag {f}", c.name);
                    }
                }
                check(c.subcommands);
            }
        }
        for family in crate::server::command_families() {
            check(family);
        }
    }

    #[test]
    fn range_keynum_and_keyword_specs_find_redis_positions() {
        let mset = KeySpec::at(1, &["OW"]).range(-1, 2, 0);
        assert_eq!(find(mset, "mset a 1 b 2"), [1, 3]);
        let sources = KeySpec::at(2, &["RO"]).keynum(0, 1, 1);
        assert_eq!(find(sources, "zunionstore dst 2 x y weights 1 2"), [3, 4]);
        let store = KeySpec::keyword("STORE", 6, &["OW"]);
        assert_eq!(find(store, "georadius k 0 0 1 km store dst"), [7]);
        assert_eq!(find(store, "georadius k 0 0 1 km"), Vec::<usize>::new());
        let streams = KeySpec::keyword("STREAMS", 1, &["RO"]).range(-1, 1, 2);
        assert_eq!(find(streams, "xread count 2 streams s1 s2 0 0"), [4, 5]);
        let dst = KeySpec::at(1, &["OW"]);
        assert_eq!(find(dst, "sort"), Vec::<usize>::new());
    }
}
