//! CONFIG GET / SET / RESETSTAT / REWRITE / HELP.
//!
//! The values live in `Server::config` (see `config/mod.rs`); CONFIG SET
//! checks every pair against the directive table before storing any, so a
//! failed call changes nothing (Redis 7's atomic multi-pair SET), then
//! mirrors the hot values into `Server::hot`. CONFIG REWRITE edits the file
//! the server was started with in place: comments, unknown lines and
//! unchanged directives stay as they were, changed ones are replaced where
//! they stand and new ones are appended, then the file is replaced
//! atomically (write to a temp file, fsync, rename).

use std::collections::HashMap;

use super::util::{glob_match, lossy};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::config::{parse, Config, Directive, Kind, Status, DIRECTIVES};
use crate::protocol::Args;

const ADMIN_FLAGS: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    container("config", -2, help)
        .doc("2.0.0", "A container for server configuration commands.")
        .subs(SUBS),
};

static SUBS: &[Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    cmd("get", -3, ADMIN_FLAGS, get)
        .doc("2.0.0", "Returns the effective values of configuration parameters."),
    cmd("set", -4, ADMIN_FLAGS, set)
        .doc("2.0.0", "Sets configuration parameters in-flight.")
        .tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
    cmd("resetstat", 2, ADMIN_FLAGS, resetstat)
        .doc("2.0.0", "Resets the server's statistics."),
    cmd("rewrite", 2, ADMIN_FLAGS, rewrite)
        .doc("2.8.0", "Persists the effective configuration to file."),
    cmd("help", 2, LOADING | STALE, help)
        .doc("5.0.0", "Returns helpful text about the different subcommands."),
};

const HELP: &[&str] = &[
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
    "HELP",
    "    Prints this help.",
];

fn help(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.array(HELP.len());
    for l in HELP {
        ctx.out.simple(l);
    }
    Ok(())
}

/// Directives hidden from glob patterns (Redis's debug configs).
fn hidden(d: &Directive) -> bool {
    matches!(
        d.name,
        "rdb-key-save-delay"
            | "key-load-delay"
            | "loading-process-events-interval-bytes"
            | "req-res-logfile"
            | "watchdog-period"
            | "client-default-resp"
            | "cluster-ping-interval"
    )
}

fn get(ctx: &mut Ctx, args: Args) -> CmdResult {
    let cfg = ctx.core.config.read();
    let mut out: Vec<(String, String)> = vec![];
    for pat in args.iter().skip(2) {
        let is_glob = pat.iter().any(|c| matches!(c, b'*' | b'?' | b'[' | b'\\'));
        if !is_glob {
            // An exact name is answered under the name as given, as Redis does.
            let given = lossy(pat);
            if let Some(v) = cfg.get(&given) {
                if !out.iter().any(|(n, _)| n.eq_ignore_ascii_case(&given)) {
                    out.push((given, v.to_string()));
                }
            }
            continue;
        }
        for d in DIRECTIVES {
            if is_glob && hidden(d) {
                continue;
            }
            for name in std::iter::once(&d.name).chain(d.aliases.iter()) {
                if glob_match(pat, name.as_bytes(), true) && !out.iter().any(|(n, _)| n == name) {
                    out.push((name.to_string(), cfg.get(d.name).unwrap_or("").to_string()));
                }
            }
        }
    }
    drop(cfg);
    ctx.out.map(out.len());
    for (n, v) in out {
        ctx.out.bulk_str(&n);
        ctx.out.bulk_str(&v);
    }
    Ok(())
}

fn set_failed(name: &str, why: &str) -> CmdError {
    CmdError::err(format!(
        "CONFIG SET failed (possibly related to argument '{name}') - {why}"
    ))
}

/// Splits a CONFIG SET value into the words a config line would have.
fn value_args(d: &Directive, value: &str) -> Vec<String> {
    match d.kind {
        Kind::Words
        | Kind::Bind
        | Kind::Save
        | Kind::ClientOutputBuffer
        | Kind::OomValues
        | Kind::Percentiles
        | Kind::ReplicaOf
        | Kind::Flags(_) => {
            let w: Vec<String> = value.split_whitespace().map(String::from).collect();
            if w.is_empty() {
                vec![String::new()]
            } else {
                w
            }
        }
        _ => vec![value.to_string()],
    }
}

/// The directives a CONFIG SET names, checked before any value as Redis's
/// configSetCommand does: the first unknown name wins, else the last
/// immutable, protected or duplicate one.
fn check_names(cfg: &Config, args: Args) -> Result<Vec<&'static Directive>, CmdError> {
    let (mut found, mut unknown, mut refused) = (vec![], None, None);
    for i in (2..args.len()).step_by(2) {
        let name = lossy(args.get(i));
        let Some(d) = Config::directive(&name) else {
            unknown.get_or_insert(name);
            continue;
        };
        if !d.mutable {
            refused = Some(set_failed(&name, "can't set immutable config"));
        } else if d.protected && cfg.get("enable-protected-configs") == Some("no") {
            refused = Some(set_failed(&name, "can't set protected config"));
        } else if found.iter().any(|x: &&Directive| x.name == d.name) {
            refused = Some(set_failed(&name, "duplicate parameter"));
        }
        found.push(d);
    }
    if let Some(name) = unknown {
        return Err(CmdError::err(format!(
            "Unknown option or number of arguments for CONFIG SET - '{name}'"
        )));
    }
    refused.map_or(Ok(found), Err)
}

/// Checks one CONFIG SET value of directive `d` (named `name`).
fn check_value(
    cfg: &Config,
    d: &'static Directive,
    name: &str,
    value: &str,
) -> Result<String, CmdError> {
    let v = cfg
        .check(d, &value_args(d, value))
        .map_err(|e| set_failed(name, &e))?;
    if d.name == "dir" && !std::path::Path::new(&v).is_dir() {
        return Err(set_failed(name, "No such file or directory"));
    }
    if d.status == Status::Refused && !Config::is_default_value(d, &v) {
        return Err(set_failed(name, &crate::config::refused_reason(d)));
    }
    Ok(v)
}

fn set(ctx: &mut Ctx, args: Args) -> CmdResult {
    if !args.len().is_multiple_of(2) {
        return Err(CmdError::WrongArity("config|set".into()));
    }
    // Redis's DENY_LOADING_CONFIG, whose error wins over any other.
    if ctx.admin.loading()
        && (2..args.len()).step_by(2).any(|i| {
            let n = args.get(i);
            [&b"appendonly"[..], b"repl-diskless-load", b"dir"]
                .iter()
                .any(|d| n.eq_ignore_ascii_case(d))
        })
    {
        return Err(CmdError::Msg(
            "LOADING Redis is loading the dataset in memory".into(),
        ));
    }
    let mut cfg = ctx.core.config.write();
    let mut checked: Vec<(&'static Directive, String)> = vec![];
    for (i, d) in (2..args.len()).step_by(2).zip(check_names(&cfg, args)?) {
        let name = lossy(args.get(i));
        checked.push((d, check_value(&cfg, d, &name, &lossy(args.get(i + 1)))?));
    }
    let tls = rebuild_tls(&cfg, &checked)?;
    listen_on_new_ports(ctx, &cfg, &checked)?;
    apply_oom_score(&cfg, &checked)?;
    for (d, mut v) in checked {
        match d.name {
            "requirepass" => ctx.core.acl.set_requirepass(&ctx.core.commands, &v),
            "acl-pubsub-default" => ctx.core.acl.set_pubsub_default(v == "allchannels"),
            _ => {}
        }
        if d.name == "dir" {
            v = parse::change_dir(&v).unwrap_or(v);
        }
        if d.status == Status::NoOp && !Config::is_default_value(d, &v) {
            crate::config::warn_noop(d.name);
        }
        cfg.store(d, v);
    }
    ctx.core.config_changed(&cfg);
    drop(cfg);
    if let Some(c) = tls {
        ctx.core.tls.install(c);
    }
    if let Err(e) = ctx.admin.config_changed() {
        let _ = ctx
            .core
            .config
            .write()
            .set("appendonly", &["no".to_string()]);
        return Err(set_failed("appendonly", &e));
    }
    // A lower maxmemory (or a new policy) takes effect now, as in Redis.
    if !(ctx.admin.is_replica()
        && ctx
            .core
            .hot
            .replica_ignore_maxmemory
            .load(std::sync::atomic::Ordering::Relaxed))
    {
        super::evict::evict_if_over(ctx);
    }
    ctx.out.ok();
    Ok(())
}

/// `port` / `tls-port` among the pairs: the server listens on the new
/// port before the value is stored (Redis's changeListenPort); a port it
/// cannot listen on changes nothing.
fn listen_on_new_ports(
    ctx: &Ctx,
    cfg: &Config,
    pairs: &[(&'static Directive, String)],
) -> Result<(), CmdError> {
    for (d, v) in pairs {
        let tls = match d.name {
            "port" => false,
            "tls-port" => true,
            _ => continue,
        };
        if cfg.get(d.name) == Some(v.as_str()) {
            continue;
        }
        let port = v.parse::<u16>().unwrap_or(0);
        ctx.admin.listen_on(tls, port, cfg).map_err(|e| {
            crate::log_warning!("Failed to listen on port {port}: {e}");
            set_failed(d.name, "Unable to listen on this port. Check server logs.")
        })?;
    }
    Ok(())
}

/// `oom-score-adj` or `oom-score-adj-values` changed among the pairs: the
/// process's OOM score is written before the values are stored; a score
/// that cannot be written changes nothing (Redis's updateOOMScoreAdj, whose
/// error names the first of the two that changed).
fn apply_oom_score(cfg: &Config, pairs: &[(&'static Directive, String)]) -> Result<(), CmdError> {
    const NAMES: [&str; 2] = ["oom-score-adj", "oom-score-adj-values"];
    let Some((first, _)) = pairs
        .iter()
        .find(|(d, v)| NAMES.contains(&d.name) && cfg.get(d.name) != Some(v.as_str()))
    else {
        return Ok(());
    };
    let value = |name: &str| {
        let given = pairs.iter().rev().find(|(d, _)| d.name == name);
        given.map_or_else(|| cfg.get_str(name), |(_, v)| v.clone())
    };
    crate::config::oom::apply(&value(NAMES[0]), &value(NAMES[1])).map_err(|e| {
        crate::log_warning!("Failed applying new configuration. Possibly related to new {} setting. Restoring previous settings.", first.name);
        set_failed(first.name, &e)
    })
}

/// A `tls-*` directive among the pairs: the TLS configurations built from
/// the new values (None when none is given or TLS stays off); an error
/// when they cannot be, which changes nothing (Redis's applyTlsCfg: the
/// reason is logged, the reply says to look there).
fn rebuild_tls(
    cfg: &Config,
    pairs: &[(&'static Directive, String)],
) -> Result<Option<crate::core::tls::Configs>, CmdError> {
    use crate::core::tls;
    let Some((first, _)) = pairs.iter().find(|(d, _)| tls::is_tls_directive(d.name)) else {
        return Ok(None);
    };
    let mut trial = cfg.clone();
    for (d, v) in pairs {
        trial.store(d, v.clone());
    }
    if !tls::wanted(&trial) {
        return Ok(None);
    }
    tls::build(&trial).map(Some).map_err(|e| {
        crate::log_warning!("{e}");
        crate::log_warning!(
            "Failed applying new configuration. Possibly related to new {} setting. Restoring previous settings.",
            first.name
        );
        set_failed(
            first.name,
            "Unable to update TLS configuration. Check server logs.",
        )
    })
}

fn resetstat(ctx: &mut Ctx, _args: Args) -> CmdResult {
    use std::sync::atomic::Ordering::Relaxed;
    for w in ctx.core.workers.lock().iter() {
        w.reset();
    }
    ctx.core.total_connections.store(0, Relaxed);
    ctx.core.rejected_connections.store(0, Relaxed);
    ctx.core.lazyfree.reset_freed();
    ctx.admin.reset_stats();
    ctx.out.ok();
    Ok(())
}

fn rewrite(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let cfg = ctx.core.config.read().clone();
    let Some(path) = cfg.file.clone() else {
        return Err(CmdError::err("The server is running without a config file"));
    };
    // Without an ACL file the users live in the config: their `user`
    // lines are rewritten from the current users, as Redis does.
    let users = match cfg.get_str("aclfile").is_empty() {
        true => Some(super::acl::user_lines(ctx.core)),
        false => None,
    };
    let res = rewrite_file(&cfg, &path, users.as_deref());
    match res {
        Ok(()) => {
            crate::log_notice!("CONFIG REWRITE executed with success.");
            ctx.out.ok();
            Ok(())
        }
        Err(e) => {
            crate::log_warning!("CONFIG REWRITE failed: {e}");
            Err(CmdError::err(format!("Rewriting config file: {e}")))
        }
    }
}

/// The config-file lines that express `value` for `d`.
pub(crate) fn render(d: &Directive, value: &str) -> Vec<String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    let line = |rest: &str| format!("{} {}", d.name, rest);
    match d.kind {
        Kind::Save if words.is_empty() => vec![line("\"\"")],
        Kind::Save => words.chunks(2).map(|c| line(&c.join(" "))).collect(),
        Kind::ClientOutputBuffer => words
            .chunks(4)
            .map(|c| {
                let (h, s) = (mem_units(c[1]), mem_units(c.get(2).copied().unwrap_or("0")));
                line(&format!(
                    "{} {h} {s} {}",
                    c[0],
                    c.get(3).copied().unwrap_or("0")
                ))
            })
            .collect(),
        Kind::Memory => vec![line(&mem_units(value))],
        Kind::ReplicaOf if words.is_empty() => vec![],
        Kind::Str => vec![line(&str_repr(value))],
        _ if words.is_empty() => vec![line("\"\"")],
        _ => vec![line(&words.join(" "))],
    }
}

/// A byte count as Redis's rewrite writes it: "2gb", "64mb", "3kb" or bytes.
fn mem_units(v: &str) -> String {
    let Ok(n) = v.parse::<i64>() else {
        return v.to_string();
    };
    for (unit, size) in [("gb", 1i64 << 30), ("mb", 1 << 20), ("kb", 1 << 10)] {
        if n != 0 && n % size == 0 {
            return format!("{}{unit}", n / size);
        }
    }
    n.to_string()
}

fn str_repr(v: &str) -> String {
    let plain = !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\'' && c != '\\');
    if plain {
        v.to_string()
    } else {
        parse::quote(v)
    }
}

/// Rewrites `path` to hold `cfg`, keeping what can be kept.
pub(crate) fn rewrite_file(
    cfg: &Config,
    path: &std::path::Path,
    users: Option<&[String]>,
) -> Result<(), String> {
    let old = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.to_string()),
    };
    let mut text = rewrite_text(cfg, &old);
    if let Some(users) = users {
        text = with_users(&text, users);
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        e.to_string()
    })
}

/// `text` with its `user` lines replaced by `users`: the first where the
/// first old one stood, the rest after it (at the end if there was none).
fn with_users(text: &str, users: &[String]) -> String {
    let is_user = |l: &str| {
        let t = l.trim_start();
        t.len() > 5 && t[..5].eq_ignore_ascii_case("user ")
    };
    let mut out: Vec<String> = vec![];
    let mut placed = false;
    for l in text.lines() {
        if !is_user(l) {
            out.push(l.to_string());
        } else if !placed {
            out.extend(users.iter().cloned());
            placed = true;
        }
    }
    if !placed {
        out.extend(users.iter().cloned());
    }
    let mut s = out.join("\n");
    s.push('\n');
    s
}

/// The new text of a config file whose old text is `old`.
pub(crate) fn rewrite_text(cfg: &Config, old: &str) -> String {
    let mut lines: Vec<Option<String>> = old.lines().map(|l| Some(l.to_string())).collect();
    // Where each known directive stands in the old file.
    let mut at: HashMap<&'static str, Vec<usize>> = HashMap::new();
    for (i, l) in old.lines().enumerate() {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if let Some(name) = parse::split_line(t).ok().and_then(|w| w.into_iter().next()) {
            if let Some(d) = Config::directive(&name) {
                at.entry(d.name).or_default().push(i);
            }
        }
    }
    // What the old file said (from the defaults), to spot unchanged values.
    let mut was = Config::default();
    let _ = parse::Loader::dry().load_text(&mut was, old);
    let mut appended = vec![];
    for d in DIRECTIVES {
        let now = cfg.get(d.name).unwrap_or("");
        let before = was.get(d.name).unwrap_or("");
        match at.get(d.name) {
            Some(_) if now == before => {}
            Some(idx) => {
                let new = render(d, now);
                for (k, &i) in idx.iter().enumerate() {
                    lines[i] = if k == 0 { Some(new.join("\n")) } else { None };
                }
                if new.is_empty() {
                    lines[idx[0]] = None;
                }
            }
            // `save` is always written, as Redis does, so that reloading
            // the file gives the same save points.
            None if d.name == "save" || (now != before && !cfg.is_default(d)) => {
                appended.extend(render(d, now))
            }
            None => {}
        }
    }
    let mut out: Vec<String> = lines.into_iter().flatten().collect();
    if !appended.is_empty() {
        out.push("# Generated by CONFIG REWRITE".into());
        out.extend(appended);
    }
    let mut s = out.join("\n");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrite_keeps_comments_and_unchanged_lines() {
        let old = "# my conf\nport  7000\nsave 900 1\nsave 300 10\nmaxmemory 1gb\n";
        let mut cfg = Config::default();
        parse::Loader::default().load_text(&mut cfg, old).unwrap();
        cfg.set("maxmemory", &["2gb".into()]).unwrap();
        cfg.set("hz", &["20".into()]).unwrap();
        let new = rewrite_text(&cfg, old);
        assert_eq!(
            new,
            "# my conf\nport  7000\nsave 900 1\nsave 300 10\nmaxmemory 2gb\n# Generated by CONFIG REWRITE\nhz 20\n"
        );
    }

    #[test]
    fn rewrite_has_no_side_effects() {
        let cwd = std::env::current_dir().unwrap();
        let old = "include /nonexistent/x.conf\ndir /\nslaveof 10.0.0.1 6379\n";
        let mut cfg = Config::default();
        cfg.set("replicaof", &["no".into(), "one".into()]).unwrap();
        let new = rewrite_text(&cfg, old);
        assert_eq!(std::env::current_dir().unwrap(), cwd);
        assert_eq!(
            new,
            "include /nonexistent/x.conf\ndir ./\n# Generated by CONFIG REWRITE\nsave 3600 1\nsave 300 100\nsave 60 10000\n"
        );
    }
}
