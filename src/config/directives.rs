//! The table of every redis.conf (Redis 7.0/7.2) and keydb.conf (KeyDB 6.3)
//! directive we recognise, with its kind, default, status and mutability.
//!
//! The Redis part was taken from what a real Redis 7.0 answers to `CONFIG GET *`
//! and to `CONFIG SET` probes (types, ranges, enums, immutability), plus the
//! 7.2 additions and the KeyDB-only directives. Aliases (`slaveof`,
//! `hash-max-ziplist-entries`, ...) hang off their canonical directive, as in
//! Redis's `standardConfig` table. A handful of directives that are not
//! values at all (`include`, `rename-command`, `user`, `loadmodule`,
//! `sentinel`) are handled by the parser in `parse.rs`.

use super::parse::parse_memory;

/// How a directive's value is checked and normalised.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Bool,
    /// Integer in [min, max] (plain digits: units are for memory kinds).
    Int(i64, i64),
    /// A memory size ("1gb", "512mb", "100") in [0, i64::MAX].
    Memory,
    /// A memory size or a percentage ("10%").
    MemOrPercent,
    /// An octal integer (unixsocketperm).
    Octal,
    /// One of the listed words.
    Enum(&'static [&'static str]),
    /// Any of the listed words together (Redis's multi-arg enum of bit
    /// flags, shutdown-on-sig*): the first word alone means none.
    Flags(&'static [&'static str]),
    /// Any single string.
    Str,
    /// Any number of words (storage-provider...).
    Words,
    /// One or more addresses.
    Bind,
    /// `save ""` or pairs of `seconds changes`.
    Save,
    /// `<class> <hard> <soft> <seconds>` groups.
    ClientOutputBuffer,
    /// Three integers in [-2000, 2000].
    OomValues,
    /// Floats in [0, 100].
    Percentiles,
    /// Keyspace event classes.
    NotifyEvents,
    /// `host port`, or `no one` (stored as "").
    ReplicaOf,
}

pub(crate) const INT: i64 = i32::MAX as i64;
pub(crate) const UINT: i64 = u32::MAX as i64;
pub(crate) const LONG: i64 = i64::MAX;

impl Kind {
    /// Checks `args` and returns the value as CONFIG GET shows it.
    pub fn normalize(&self, args: &[String]) -> Result<String, String> {
        match self {
            Kind::Words => return Ok(args.join(" ")),
            Kind::Bind => return norm_bind(args),
            Kind::Save => return norm_save(args),
            Kind::ClientOutputBuffer => return norm_cob(args),
            Kind::OomValues => return norm_oom(args),
            Kind::Percentiles => return norm_percentiles(args),
            Kind::ReplicaOf => return norm_replicaof(args),
            Kind::Flags(words) => return norm_flags(words, args),
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
                let v: i64 = a
                    .parse()
                    .map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
                if v < min || v > max {
                    return Err(format!(
                        "argument must be between {min} and {max} inclusive"
                    ));
                }
                Ok(v.to_string())
            }
            Kind::Memory => {
                let v =
                    parse_memory(a).map_err(|_| "argument must be a memory value".to_string())?;
                if v < 0 {
                    return Err("argument must be a memory value".into());
                }
                Ok(v.to_string())
            }
            Kind::MemOrPercent => norm_mem_or_percent(a),
            Kind::Octal => match i64::from_str_radix(a, 8) {
                Ok(v) if (0..=0o777).contains(&v) => Ok(format!("{v:o}")),
                Ok(_) => Err("argument must be between 0 and 511 inclusive".into()),
                Err(_) => Err("argument couldn't be parsed as an octal number".into()),
            },
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
            Kind::NotifyEvents => norm_events(a),
            _ => Ok(a.clone()),
        }
    }
}

/// Redis's multi-arg flags enum: the words given, in the table's order;
/// the first word ("default") when none is set. SAVE and NOSAVE exclude
/// each other (the only combination Redis refuses).
fn norm_flags(words: &[&str], args: &[String]) -> Result<String, String> {
    let given: Vec<String> = args
        .iter()
        .flat_map(|a| a.split_whitespace())
        .map(|w| w.to_ascii_lowercase())
        .collect();
    if given.is_empty() || given.iter().any(|g| !words.contains(&g.as_str())) {
        return Err(format!(
            "argument(s) must be one of the following: {}",
            words.join(", ")
        ));
    }
    if given.iter().any(|g| g == "save") && given.iter().any(|g| g == "nosave") {
        return Err("shutdown options SAVE and NOSAVE can't be used simultaneously".into());
    }
    let set: Vec<&str> = words[1..]
        .iter()
        .copied()
        .filter(|w| given.iter().any(|g| g == w))
        .collect();
    Ok(if set.is_empty() {
        words[0].to_string()
    } else {
        set.join(" ")
    })
}

fn norm_mem_or_percent(a: &str) -> Result<String, String> {
    let bad = || "argument must be a memory or percent value".to_string();
    if let Some(p) = a.strip_suffix('%') {
        let v: i64 = p.parse().map_err(|_| bad())?;
        if v < 0 {
            return Err(bad());
        }
        if v > 100 {
            return Err("percentage argument must be less or equal to 100".into());
        }
        return Ok(format!("{v}%"));
    }
    match parse_memory(a) {
        Ok(v) if v >= 0 => Ok(v.to_string()),
        _ => Err(bad()),
    }
}

fn norm_bind(args: &[String]) -> Result<String, String> {
    if args.len() > 16 {
        return Err("Too many bind addresses specified.".into());
    }
    Ok(args.join(" "))
}

fn norm_save(args: &[String]) -> Result<String, String> {
    let bad = || "Invalid save parameters".to_string();
    if args.len() == 1 && args[0].is_empty() {
        return Ok(String::new());
    }
    let words: Vec<&str> = args.iter().flat_map(|a| a.split_whitespace()).collect();
    // A bare `save` line is zero pairs, as `save ""`: no save points (Redis
    // 7.0 accepts both; the test suite writes the former).
    if words.is_empty() {
        return Ok(String::new());
    }
    if !words.len().is_multiple_of(2) {
        return Err(bad());
    }
    for w in &words {
        match w.parse::<i64>() {
            Ok(v) if v >= 0 => {}
            _ => return Err(bad()),
        }
    }
    Ok(words
        .iter()
        .map(|w| w.parse::<i64>().unwrap_or(0).to_string())
        .collect::<Vec<_>>()
        .join(" "))
}

/// Validates `class hard soft secs` groups; returns them normalised (only the
/// given classes: the caller merges them into the current value).
fn norm_cob(args: &[String]) -> Result<String, String> {
    let words: Vec<&str> = args.iter().flat_map(|a| a.split_whitespace()).collect();
    if words.is_empty() || !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    let mut out = vec![];
    for g in words.chunks(4) {
        let class = match g[0].to_ascii_lowercase().as_str() {
            "normal" => "normal",
            "slave" | "replica" => "slave",
            "pubsub" => "pubsub",
            _ => {
                return Err("Invalid client class specified in buffer limit configuration.".into())
            }
        };
        let hard = parse_memory(g[1]);
        let soft = parse_memory(g[2]);
        let secs = g[3].parse::<i64>();
        match (hard, soft, secs) {
            (Ok(h), Ok(s), Ok(t)) if h >= 0 && s >= 0 && t >= 0 => {
                out.push(format!("{class} {h} {s} {t}"))
            }
            _ => {
                return Err(
                    "Error in hard, soft or soft_seconds setting in buffer limit configuration."
                        .into(),
                )
            }
        }
    }
    Ok(out.join(" "))
}

/// Merges normalised client-output-buffer-limit groups into `current`.
pub(crate) fn merge_cob(current: &str, update: &str) -> String {
    let mut groups: Vec<Vec<String>> = current
        .split_whitespace()
        .map(String::from)
        .collect::<Vec<_>>()
        .chunks(4)
        .map(|c| c.to_vec())
        .collect();
    let upd: Vec<String> = update.split_whitespace().map(String::from).collect();
    for g in upd.chunks(4) {
        match groups.iter_mut().find(|x| x[0] == g[0]) {
            Some(x) => *x = g.to_vec(),
            None => groups.push(g.to_vec()),
        }
    }
    groups.concat().join(" ")
}

fn norm_oom(args: &[String]) -> Result<String, String> {
    let words: Vec<&str> = args.iter().flat_map(|a| a.split_whitespace()).collect();
    if words.len() != 3 {
        return Err("wrong number of arguments".into());
    }
    let mut out = vec![];
    for w in words {
        match w.parse::<i64>() {
            Ok(v) if (-2000..=2000).contains(&v) => out.push(v.to_string()),
            _ => {
                return Err(
                    "Invalid oom-score-adj-values, elements must be between -2000 and 2000.".into(),
                )
            }
        }
    }
    Ok(out.join(" "))
}

fn norm_percentiles(args: &[String]) -> Result<String, String> {
    let words: Vec<&str> = args.iter().flat_map(|a| a.split_whitespace()).collect();
    let mut out = vec![];
    for w in words {
        let v: f64 = w
            .parse()
            .map_err(|_| "Invalid latency-tracking-info-percentiles parameters".to_string())?;
        if !(0.0..=100.0).contains(&v) {
            return Err(
                "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                    .into(),
            );
        }
        out.push(format!("{v}"));
    }
    Ok(out.join(" "))
}

/// Keyspace event classes, normalised as Redis shows them: `A` (or the
/// single classes `g$lshzxetd`), then `K`, `E`, `m`, `n`.
fn norm_events(a: &str) -> Result<String, String> {
    const ALL: &str = "g$lshzxetd";
    const OK: &str = "Ag$lshzxeKEtmdn";
    if a.chars().any(|c| !OK.contains(c)) {
        return Err("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".into());
    }
    let has = |c: char| a.contains(c) || (a.contains('A') && ALL.contains(c));
    let mut out = String::new();
    if ALL.chars().all(has) {
        out.push('A');
    } else {
        out.extend(ALL.chars().filter(|&c| has(c)));
        out.extend(a.contains('n').then_some('n')); // Redis 7.0 prints 'n' here only
    }
    out.extend("KEm".chars().filter(|&c| a.contains(c)));
    Ok(out)
}

/// `host port`, or several pairs (`multi-master` peers; what several
/// `replicaof` lines add up to, see `parse.rs`), or `no one`.
fn norm_replicaof(args: &[String]) -> Result<String, String> {
    if args.is_empty() || !args.len().is_multiple_of(2) {
        return Err("wrong number of arguments".into());
    }
    if args.len() == 2 && args[0].eq_ignore_ascii_case("no") && args[1].eq_ignore_ascii_case("one")
    {
        return Ok(String::new());
    }
    let mut pairs = Vec::with_capacity(args.len() / 2);
    for pair in args.chunks(2) {
        match pair[1].parse::<u16>() {
            Ok(p) => pairs.push(format!("{} {p}", pair[0])),
            Err(_) => return Err("Invalid master port".into()),
        }
    }
    Ok(pairs.join(" "))
}

/// The `(host, port)` pairs of a `replicaof` value.
pub(crate) fn replicaof_pairs(v: &str) -> Vec<(String, u16)> {
    let w: Vec<&str> = v.split_whitespace().collect();
    w.chunks(2)
        .filter_map(|p| Some((p.first()?.to_string(), p.get(1)?.parse().ok()?)))
        .collect()
}

/// Whether we act on a directive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Built and applied.
    Built,
    /// A documented no-op (docs/CONFIG.md says why): a tuning knob of Redis
    /// internals we do not have, or a setting whose every value behaves
    /// alike here. Accepted, kept for CONFIG GET/REWRITE; a non-default
    /// value is logged once.
    NoOp,
    /// Not built, and ignoring it would change what clients or operators
    /// see: a non-default value refuses start-up (Redis's fatal config
    /// error, naming the line) and CONFIG SET.
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
    /// Settable only with `enable-protected-configs` (Redis's PROTECTED_CONFIG).
    pub protected: bool,
}

impl Directive {
    const fn built(mut self) -> Self {
        self.status = Status::Built;
        self
    }
    const fn refused(mut self) -> Self {
        self.status = Status::Refused;
        self
    }
    const fn imm(mut self) -> Self {
        self.mutable = false;
        self
    }
    const fn prot(mut self) -> Self {
        self.protected = true;
        self
    }
    const fn alias(mut self, aliases: &'static [&'static str]) -> Self {
        self.aliases = aliases;
        self
    }
}

/// A no-op, mutable directive; builders adjust the rest.
const fn d(name: &'static str, kind: Kind, default: &'static str) -> Directive {
    Directive {
        name,
        aliases: &[],
        kind,
        default,
        status: Status::NoOp,
        mutable: true,
        protected: false,
    }
}

use Kind::*;

pub(crate) static DIRECTIVES: &[Directive] = &[
    // Redis 7.0 (CONFIG GET *), in alphabetical order.
    d(
        "acl-pubsub-default",
        Enum(&["allchannels", "resetchannels"]),
        "resetchannels",
    )
    .built(),
    d("aclfile", Str, "").built().imm(),
    d("acllog-max-len", Int(0, LONG), "128").built(),
    d("active-defrag-cycle-max", Int(1, 99), "25"),
    d("active-defrag-cycle-min", Int(1, 99), "1"),
    d("active-defrag-ignore-bytes", Memory, "104857600"),
    d("active-defrag-max-scan-fields", Int(1, LONG), "1000"),
    d("active-defrag-threshold-lower", Int(0, 1000), "10"),
    d("active-defrag-threshold-upper", Int(0, 1000), "100"),
    d("active-expire-effort", Int(1, 10), "1"),
    d("activedefrag", Bool, "no"),
    d("activerehashing", Bool, "yes"),
    d("always-show-logo", Bool, "no").built().imm(),
    d("aof-disable-auto-gc", Bool, "no").built(),
    d("aof-load-truncated", Bool, "yes").built(),
    d("aof-rewrite-incremental-fsync", Bool, "yes"),
    d("aof-timestamp-enabled", Bool, "no").built(),
    d("aof-use-rdb-preamble", Bool, "yes").built(),
    d("aof_rewrite_cpulist", Str, "").imm(),
    d("appenddirname", Str, "appendonlydir").imm().built(),
    d("appendfilename", Str, "appendonly.aof").imm().built(),
    d(
        "appendfsync",
        Enum(&["everysec", "always", "no"]),
        "everysec",
    )
    .built(),
    d("appendonly", Bool, "no").built(),
    d("auto-aof-rewrite-min-size", Memory, "67108864").built(),
    d("auto-aof-rewrite-percentage", Int(0, INT), "100").built(),
    d("bgsave_cpulist", Str, "").imm(),
    d("bind-source-addr", Str, "").built(),
    d("bio_cpulist", Str, "").imm(),
    d("busy-reply-threshold", Int(0, LONG), "5000")
        .built()
        .alias(&["lua-time-limit"]),
    d(
        "client-output-buffer-limit",
        ClientOutputBuffer,
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
    )
    .built(),
    d("client-query-buffer-limit", Memory, "1073741824").built(),
    d("cluster-allow-pubsubshard-when-down", Bool, "yes"),
    d("cluster-allow-reads-when-down", Bool, "no"),
    d("cluster-allow-replica-migration", Bool, "yes"),
    d("cluster-announce-bus-port", Int(0, 65535), "0"),
    d("cluster-announce-hostname", Str, ""),
    d("cluster-announce-ip", Str, ""),
    d("cluster-announce-port", Int(0, 65535), "0"),
    d("cluster-announce-tls-port", Int(0, 65535), "0"),
    d("cluster-config-file", Str, "nodes.conf").imm(),
    d("cluster-enabled", Bool, "no").imm().refused(),
    d("cluster-link-sendbuf-limit", Memory, "0"),
    d("cluster-migration-barrier", Int(0, INT), "1"),
    d("cluster-node-timeout", Int(0, LONG), "15000"),
    d("cluster-port", Int(0, 65535), "0").imm(),
    d(
        "cluster-preferred-endpoint-type",
        Enum(&["ip", "hostname", "unknown-endpoint"]),
        "ip",
    ),
    d("cluster-replica-no-failover", Bool, "no").alias(&["cluster-slave-no-failover"]),
    d("cluster-replica-validity-factor", Int(0, INT), "10")
        .alias(&["cluster-slave-validity-factor"]),
    d("cluster-require-full-coverage", Bool, "yes"),
    d("crash-log-enabled", Bool, "yes"),
    d("crash-memcheck-enabled", Bool, "yes"),
    d("daemonize", Bool, "no").built().imm(),
    d("databases", Int(1, INT), "16").built().imm(),
    d("disable-thp", Bool, "yes").built().imm(),
    d("dynamic-hz", Bool, "yes"),
    d("enable-debug-command", Enum(&["no", "yes", "local"]), "no")
        .imm()
        .built(),
    d("enable-module-command", Enum(&["no", "yes", "local"]), "no")
        .imm()
        .built(),
    d(
        "enable-protected-configs",
        Enum(&["no", "yes", "local"]),
        "no",
    )
    .built()
    .imm(),
    d("hash-max-listpack-entries", Int(0, LONG), "512")
        .alias(&["hash-max-ziplist-entries"])
        .built(),
    d("hash-max-listpack-value", Memory, "64")
        .alias(&["hash-max-ziplist-value"])
        .built(),
    d("hll-sparse-max-bytes", Memory, "3000").built(),
    d("hz", Int(0, INT), "10").built(),
    d("ignore-warnings", Str, ""),
    d("io-threads-do-reads", Bool, "no").imm(),
    d("jemalloc-bg-thread", Bool, "yes"),
    d("latency-monitor-threshold", Int(0, LONG), "0").built(),
    d("latency-tracking", Bool, "yes").built(),
    d(
        "latency-tracking-info-percentiles",
        Percentiles,
        "50 99 99.9",
    )
    .built(),
    d("lazyfree-lazy-eviction", Bool, "no").built(),
    d("lazyfree-lazy-expire", Bool, "no").built(),
    d("lazyfree-lazy-server-del", Bool, "no"),
    d("lazyfree-lazy-user-del", Bool, "no").built(),
    d("lazyfree-lazy-user-flush", Bool, "no").built(),
    d("lfu-decay-time", Int(0, INT), "1").built(),
    d("lfu-log-factor", Int(0, INT), "10").built(),
    d("list-compress-depth", Int(0, INT), "0"),
    d("list-max-listpack-size", Int(-INT, INT), "-2")
        .alias(&["list-max-ziplist-size"])
        .built(),
    d("logfile", Str, "").built().imm(),
    d(
        "loglevel",
        Enum(&["debug", "verbose", "notice", "warning", "nothing"]),
        "notice",
    )
    .built(),
    d("masterauth", Str, "").built(),
    d("masteruser", Str, "").built(),
    d("maxclients", Int(1, UINT), "10000").built(),
    d("maxmemory", Memory, "0").built(),
    d("maxmemory-clients", MemOrPercent, "0").built(),
    d("maxmemory-eviction-tenacity", Int(0, 100), "10").built(),
    d(
        "maxmemory-policy",
        Enum(&[
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "noeviction",
        ]),
        "noeviction",
    )
    .built(),
    d("maxmemory-samples", Int(1, INT), "5").built(),
    d("min-replicas-max-lag", Int(0, INT), "10")
        .alias(&["min-slaves-max-lag"])
        .built(),
    d("min-replicas-to-write", Int(0, INT), "0")
        .alias(&["min-slaves-to-write"])
        .built(),
    d("no-appendfsync-on-rewrite", Bool, "no"),
    // LatticeDB (docs/ACTIVE-ACTIVE-DESIGN.md, "Identity"; server/identity.rs).
    // node-id: this node's 64-bit id, up to 16 hex digits ("": the id saved in the RDB file, else random).
    d("node-id", Str, "").built().imm(),
    // node-slot: the 10-bit slot its HLC stamps carry, 0-1023 (-1: the id's hash mod 1024).
    d("node-slot", Int(-1, 1023), "-1").built().imm(),
    d("notify-keyspace-events", NotifyEvents, "").built(),
    d(
        "oom-score-adj",
        Enum(&["no", "yes", "relative", "absolute"]),
        "no",
    )
    .built(),
    d("oom-score-adj-values", OomValues, "0 200 800").built(),
    d("pidfile", Str, "").built().imm(),
    d(
        "proc-title-template",
        Str,
        "{title} {listen-addr} {server-mode}",
    ),
    d(
        "propagation-error-behavior",
        Enum(&["ignore", "panic", "panic-on-replicas"]),
        "ignore",
    )
    .built(),
    d("protected-mode", Bool, "yes").built(),
    d("proto-max-bulk-len", Memory, "536870912").built(),
    d("rdb-del-sync-files", Bool, "no").built(),
    d("rdb-save-incremental-fsync", Bool, "yes"),
    d("rdbchecksum", Bool, "yes").imm().built(),
    d("rdbcompression", Bool, "yes").built(),
    d("repl-backlog-size", Memory, "1048576").built(),
    d("repl-backlog-ttl", Int(0, LONG), "3600").built(),
    d("repl-disable-tcp-nodelay", Bool, "no"),
    d(
        "repl-diskless-load",
        Enum(&["disabled", "on-empty-db", "swapdb"]),
        "disabled",
    )
    .built(),
    d("repl-diskless-sync", Bool, "yes").built(),
    d("repl-diskless-sync-delay", Int(0, INT), "5").built(),
    d("repl-diskless-sync-max-replicas", Int(0, INT), "0").built(),
    // LatticeDB: what a master does when a replica lags (DECISIONS 29, 31).
    d(
        "repl-lag-policy",
        Enum(&["spill", "throttle", "disconnect"]),
        "spill",
    )
    .built(),
    d("repl-backlog-disk-size", Memory, "4gb").built(),
    d("repl-throttle-lag", Memory, "32mb").built(),
    d("repl-ping-replica-period", Int(1, INT), "10")
        .alias(&["repl-ping-slave-period"])
        .built(),
    d("repl-timeout", Int(1, INT), "60").built(),
    d("replica-announce-ip", Str, "")
        .alias(&["slave-announce-ip"])
        .built(),
    d("replica-announce-port", Int(0, 65535), "0")
        .alias(&["slave-announce-port"])
        .built(),
    d("replica-announced", Bool, "yes").built(),
    d("replica-ignore-disk-write-errors", Bool, "no").built(),
    d("replica-ignore-maxmemory", Bool, "yes")
        .alias(&["slave-ignore-maxmemory"])
        .built(),
    d("replica-lazy-flush", Bool, "no").alias(&["slave-lazy-flush"]),
    d("replica-priority", Int(0, INT), "100")
        .alias(&["slave-priority"])
        .built(),
    d("replica-read-only", Bool, "yes")
        .alias(&["slave-read-only"])
        .built(),
    d("replica-serve-stale-data", Bool, "yes")
        .alias(&["slave-serve-stale-data"])
        .built(),
    d("replicaof", ReplicaOf, "")
        .imm()
        .alias(&["slaveof"])
        .built(),
    d(
        "sanitize-dump-payload",
        Enum(&["no", "yes", "clients"]),
        "no",
    ),
    d("save", Save, "3600 1 300 100 60 10000").built(),
    d("server_cpulist", Str, "").imm(),
    d("set-max-intset-entries", Int(0, LONG), "512").built(),
    d("set-proc-title", Bool, "yes").imm(),
    d(
        "shutdown-on-sigint",
        Flags(&["default", "save", "nosave", "now", "force"]),
        "default",
    )
    .built(),
    d(
        "shutdown-on-sigterm",
        Flags(&["default", "save", "nosave", "now", "force"]),
        "default",
    )
    .built(),
    d("shutdown-timeout", Int(0, INT), "10").built(),
    d("slowlog-log-slower-than", Int(-1, LONG), "10000").built(),
    d("slowlog-max-len", Int(0, LONG), "128").built(),
    d("socket-mark-id", Int(0, UINT), "0").imm().refused(),
    d("stop-writes-on-bgsave-error", Bool, "yes").built(),
    d("stream-node-max-bytes", Memory, "4096").built(),
    d("stream-node-max-entries", Int(0, LONG), "100").built(),
    d(
        "supervised",
        Enum(&["upstart", "systemd", "auto", "no"]),
        "no",
    )
    .imm()
    .built(),
    d("syslog-enabled", Bool, "no").imm().built(),
    d(
        "syslog-facility",
        Enum(&[
            "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
        ]),
        "local0",
    )
    .imm()
    .built(),
    d("syslog-ident", Str, "redis").imm().built(),
    // LatticeDB: the Unix datagram socket syslog lines go to (log/syslog.rs, DECISIONS 337).
    d("syslog-socket", Str, "/dev/log").imm().built(),
    d("tcp-backlog", Int(0, INT), "511").imm().built(),
    d("tcp-keepalive", Int(0, INT), "300").built(),
    d("timeout", Int(0, INT), "0").built(),
    // TLS (core/tls.rs): CONFIG SET of any but tls-port rebuilds the
    // configurations for new connections, or fails changing nothing.
    d("tls-auth-clients", Enum(&["no", "yes", "optional"]), "yes").built(),
    d("tls-ca-cert-dir", Str, "").built(),
    d("tls-ca-cert-file", Str, "").built(),
    d("tls-cert-file", Str, "").built(),
    d("tls-ciphers", Str, "").built(),
    d("tls-ciphersuites", Str, "").built(),
    d("tls-client-cert-file", Str, "").built(),
    d("tls-client-key-file", Str, "").built(),
    d("tls-client-key-file-pass", Str, "").built(),
    d("tls-cluster", Bool, "no").built(),
    d("tls-dh-params-file", Str, ""),
    d("tls-key-file", Str, "").built(),
    d("tls-key-file-pass", Str, "").built(),
    d("tls-port", Int(0, 65535), "0").built(),
    d("tls-prefer-server-ciphers", Bool, "no").built(),
    d("tls-protocols", Str, "").built(),
    d("tls-replication", Bool, "no").built(),
    d("tls-session-cache-size", Int(0, INT), "20480").built(),
    d("tls-session-cache-timeout", Int(0, INT), "300"),
    d("tls-session-caching", Bool, "yes").built(),
    d("tracking-table-max-keys", Int(0, LONG), "1000000").built(),
    d("unixsocket", Str, "").built().imm(),
    d("unixsocketperm", Octal, "0").built().imm(),
    d("zset-max-listpack-entries", Int(0, LONG), "128")
        .alias(&["zset-max-ziplist-entries"])
        .built(),
    d("zset-max-listpack-value", Memory, "64")
        .alias(&["zset-max-ziplist-value"])
        .built(),
    d("port", Int(0, 65535), "6379").built(),
    // Redis 7.0 with no config file: every interface (IPv6 optional), with
    // protected mode refusing non-loopback clients while no password is set.
    d("bind", Bind, "* -::*").built().imm(),
    d("dir", Str, "./").built().prot(),
    d("dbfilename", Str, "dump.rdb").built().prot(),
    d("requirepass", Str, "").built(),
    // Hidden (debug) Redis configs.
    d("rdb-key-save-delay", Int(LONG.wrapping_neg(), LONG), "0").built(),
    d("key-load-delay", Int(LONG.wrapping_neg(), LONG), "0").built(),
    d(
        "loading-process-events-interval-bytes",
        Int(1024, INT),
        "2097152",
    ),
    // Redis 7.2 additions (set-max-listpack-*: 7.2's listpack sets; we
    // behave as 7.0, whose small sets are intset/hashtable: DECISIONS 60).
    d("locale-collate", Str, "").refused(),
    d("set-max-listpack-entries", Int(0, LONG), "128"),
    d("set-max-listpack-value", Int(0, LONG), "64"),
    d("req-res-logfile", Str, "").imm(),
    d("watchdog-period", Int(0, INT), "0"),
    d("client-default-resp", Int(2, 3), "2").imm().refused(),
    d("cluster-ping-interval", Int(0, LONG), "0"),
    d("cluster-announce-human-nodename", Str, ""),
    // KeyDB 6.3 (keydb.conf and its config.cpp).
    d("server-threads", Int(0, 256), "0")
        .built()
        .imm()
        .alias(&["io-threads"]),
    d("server-thread-affinity", Str, "no").imm().built(),
    // LatticeDB: plain TCP connections do their socket I/O through a ring
    // per worker (server/uring.rs) instead of epoll; read at start-up.
    d("io-uring", Bool, "no").imm().built(),
    d("active-replica", Bool, "no").built().imm(),
    d("multi-master", Bool, "no").built().imm(),
    // LatticeDB: how ROLE and INFO show a node with active-replica links.
    // `master` (the default): a master, as Redis clients need to write to
    // it; `keydb`: as KeyDB does (ROLE `active-replica`, INFO
    // role:active-replica with master_* lines per link, peers pulling from
    // us as slaveN lines), for KeyDB's tools and tests (DECISIONS 109).
    d("active-replica-view", Enum(&["master", "keydb"]), "master").built(),
    // A no-op: a node never forwards a peer's write (each sends only its
    // own), so there is nothing to switch off (docs/ACTIVE-ACTIVE-DESIGN.md).
    d("multi-master-no-forward", Bool, "no"),
    // LatticeDB: how far ahead of this node's clock a peer's stamp may be
    // (ms) before the link is dropped instead of the write applied: a node
    // whose clock runs ahead must not win every conflict (ACTIVE-ACTIVE-DESIGN.md).
    d("active-max-clock-skew", Int(0, LONG), "60000").built(),
    // LatticeDB: the longest (seconds) a departed peer keeps deleted keys'
    // tombstones from being collected (they go once every node is past
    // them); a peer away longer is refused and must rejoin empty, or what
    // it still holds of keys deleted meanwhile comes back (DECISIONS 52).
    d("active-tombstone-grace", Int(0, LONG), "300").built(),
    d("replica-weighting-factor", Int(1, INT), "2").alias(&["slave-weighting-factor"]),
    d("replica-quorum", Int(-1, INT), "-1").built(),
    d("storage-provider", Words, "none").imm().refused(),
    d("storage-provider-options", Str, "").imm(),
    d("storage-flush-period", Int(1, 10000), "500"),
    d(
        "storage-cache-mode",
        Enum(&["writeback", "writethrough"]),
        "writethrough",
    )
    .imm(),
    d("scratch-file-path", Str, "").imm(),
    d("db-s3-object", Str, "").refused(),
    d("active-client-balancing", Bool, "yes"),
    d("availability-zone", Str, ""),
    d("overload-protect-percent", Int(0, 200), "0").refused(),
    d("force-eviction-percent", Int(0, 100), "0").refused(),
    d("max-snapshot-slip", Int(0, 5000), "400"),
    d("max-rand-count", Int(0, LONG / 2), "4611686018427387903").refused(),
    d("min-clients-per-thread", Int(0, 400), "20"),
    d("maxclients-reserved", Int(0, 100), "0").refused(),
    d("enable-keydb-fastsync", Bool, "no"),
    d("enable-async-commands", Bool, "no"),
    d("enable-async-rehash", Bool, "yes"),
    d("enable-motd", Bool, "yes").imm(),
    d("time-thread-priority", Bool, "no").imm(),
    d("use-fork", Bool, "yes").imm(),
    d("use-exit-on-panic", Bool, "no"),
    d("version-override", Str, "").imm().refused(),
    d("allow-write-during-load", Bool, "no").refused(),
    d("allow-rdb-resize-op", Bool, "yes"),
    d("delete-on-evict", Bool, "no"),
    d("prefetch-enabled", Bool, "yes"),
    d("multithread-load-enabled", Bool, "no"),
    d("loading-process-events-interval-keys", Memory, "8192"),
    d("repl-backlog-disk-reserve", Memory, "0").imm(),
    d("force-backlog-disk-reserve", Bool, "no"),
    d("maxstorage", Memory, "0").refused(),
    d("soft-shutdown", Bool, "no").refused(),
    d("flash-disable-key-cache", Bool, "no"),
    d("semi-ordered-set-bucket-size", Int(0, 1024), "0"),
    d("blob-support", Str, "false"),
    d("testmode", Bool, "no").imm(),
    d("tls-allowlist", Words, "").refused(),
    d("tls-auditlog-blocklist", Words, "").refused(),
    d("tls-rotation", Bool, "no").refused(),
];
