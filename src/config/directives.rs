//! The table of every redis.conf / keydb.conf directive we recognise.

/// How a directive's value is checked and normalised.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Bool,
    /// Integer in [min, max].
    Int(i64, i64),
    /// A memory size ("1gb", "512mb", "100") in [0, max].
    Memory(i64),
    /// One of the listed words.
    Enum(&'static [&'static str]),
    /// Any single string.
    Str,
    /// Any number of words (bind, save, client-output-buffer-limit...).
    Words,
}

impl Kind {
    /// Checks `args` and returns the value as CONFIG GET shows it.
    pub fn normalize(&self, args: &[String]) -> Result<String, String> {
        match self {
            Kind::Words => return Ok(args.join(" ")),
            _ if args.len() != 1 => return Err("wrong number of arguments".into()),
            _ => {}
        }
        let a = &args[0];
        match *self {
            Kind::Bool => match a.to_ascii_lowercase().as_str() {
                "yes" => Ok("yes".into()),
                "no" => Ok("no".into()),
                _ => Err("argument must be 'yes' or 'no'".into()),
            },
            Kind::Int(min, max) => {
                let v: i64 = super::parse::parse_memory(a)
                    .map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
                if v < min || v > max {
                    return Err(format!(
                        "argument must be between {min} and {max} inclusive"
                    ));
                }
                Ok(v.to_string())
            }
            Kind::Memory(max) => {
                let v = super::parse::parse_memory(a)
                    .map_err(|_| "argument must be a memory value".to_string())?;
                if v < 0 || v > max {
                    return Err(format!("argument must be between 0 and {max} inclusive"));
                }
                Ok(v.to_string())
            }
            Kind::Enum(words) => {
                let l = a.to_ascii_lowercase();
                if words.contains(&l.as_str()) {
                    Ok(l)
                } else {
                    Err(format!(
                        "argument(s) must be one of the following: {}",
                        words.join(", ")
                    ))
                }
            }
            Kind::Str => Ok(a.clone()),
            Kind::Words => unreachable!("handled above"),
        }
    }
}

/// Whether we act on a directive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Built and applied.
    Built,
    /// Recognised, feature not built yet: accepted with a warning logged once.
    Accepted,
    /// Ignoring it would be unsafe: refuse to start when set to a non-default value.
    Refused,
}

#[derive(Debug)]
pub struct Directive {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub kind: Kind,
    pub default: &'static str,
    pub status: Status,
    /// May CONFIG SET change it at run time?
    pub mutable: bool,
}

const fn d(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    status: Status,
    mutable: bool,
) -> Directive {
    Directive {
        name,
        aliases: &[],
        kind,
        default,
        status,
        mutable,
    }
}

const fn alias(mut dir: Directive, aliases: &'static [&'static str]) -> Directive {
    dir.aliases = aliases;
    dir
}

use Kind::*;
use Status::*;

const LONG: i64 = i64::MAX;

pub static DIRECTIVES: &[Directive] = &[
    d("port", Int(0, 65535), "6379", Built, false),
    d("bind", Words, "127.0.0.1 -::1", Built, false),
    d("protected-mode", Bool, "yes", Built, true),
    d("databases", Int(1, i32::MAX as i64), "16", Built, false),
    alias(
        d("server-threads", Int(0, 256), "0", Built, false),
        &["io-threads"],
    ),
    d("server-thread-affinity", Str, "no", Built, false),
    d("hz", Int(1, 500), "10", Built, true),
    d(
        "loglevel",
        Enum(&["debug", "verbose", "notice", "warning", "nothing"]),
        "notice",
        Built,
        true,
    ),
    d("logfile", Str, "", Built, false),
    d("daemonize", Bool, "no", Accepted, false),
    d("pidfile", Str, "", Built, false),
    d("dir", Str, "./", Built, true),
    d("dbfilename", Str, "dump.rdb", Accepted, true),
    d("proto-max-bulk-len", Memory(LONG), "536870912", Built, true),
    d(
        "client-query-buffer-limit",
        Memory(LONG),
        "1073741824",
        Built,
        true,
    ),
    // Temporary (limits branch) until the config branch's version merges.
    d(
        "client-output-buffer-limit",
        Words,
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        Built,
        true,
    ),
    d("maxclients", Int(1, LONG), "10000", Built, true),
    d("timeout", Int(0, i32::MAX as i64), "0", Built, true),
    d("tcp-keepalive", Int(0, i32::MAX as i64), "300", Built, true),
    d("unixsocket", Str, "", Built, false),
    d("unixsocketperm", Str, "0", Built, false),
    d("requirepass", Str, "", Built, true),
    d(
        "slowlog-log-slower-than",
        Int(-1, LONG),
        "10000",
        Built,
        true,
    ),
    d("slowlog-max-len", Int(0, LONG), "128", Built, true),
    d("latency-monitor-threshold", Int(0, LONG), "0", Built, true),
    d("save", Words, "3600 1 300 100 60 10000", Accepted, true),
    d("appendonly", Bool, "no", Accepted, true),
    d("maxmemory", Memory(LONG), "0", Accepted, true),
];
