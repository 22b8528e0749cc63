//! redis.conf syntax: lines of `directive arg arg ...`, `#` comments, quoted
//! arguments, `include`, and the command-line form
//! `lattice-server [file | -] [--directive value ...]`.
//!
//! As redis-server does, the command-line directives are turned into config
//! text (values quoted like `sdscatrepr`) and appended to the file's text, so
//! that one loader handles both and its fatal errors look alike, line
//! numbers included.

use super::{Config, Kind, Status};

/// Parses "1gb", "10mb", "5k", "100" (Redis's memtoull: k=1000, kb=1024 ...).
#[allow(clippy::result_unit_err)] // kept: callers match on Ok/Err only
pub(crate) fn parse_memory(s: &str) -> Result<i64, ()> {
    let l = s.to_ascii_lowercase();
    let (num, mul): (&str, i64) = if let Some(n) = l.strip_suffix("gb") {
        (n, 1 << 30)
    } else if let Some(n) = l.strip_suffix("mb") {
        (n, 1 << 20)
    } else if let Some(n) = l.strip_suffix("kb") {
        (n, 1 << 10)
    } else if let Some(n) = l.strip_suffix('g') {
        (n, 1_000_000_000)
    } else if let Some(n) = l.strip_suffix('m') {
        (n, 1_000_000)
    } else if let Some(n) = l.strip_suffix('k') {
        (n, 1_000)
    } else if let Some(n) = l.strip_suffix('b') {
        (n, 1)
    } else {
        (l.as_str(), 1)
    };
    let v: i64 = num.parse().map_err(|_| ())?;
    v.checked_mul(mul).ok_or(())
}

/// Splits one config line into words (sdssplitargs rules).
#[allow(clippy::result_unit_err)]
pub(crate) fn split_line(line: &str) -> Result<Vec<String>, ()> {
    let mut out = Vec::new();
    let mut p = crate::protocol::RequestParser::new();
    let mut tmp = line.as_bytes().to_vec();
    tmp.extend_from_slice(b"\n");
    match p.parse(&tmp, &Default::default()) {
        Ok(crate::protocol::Parsed::Command { .. }) => {
            for a in p.args(&tmp).iter() {
                out.push(String::from_utf8_lossy(a).into_owned());
            }
            Ok(out)
        }
        _ => Err(()),
    }
}

/// Appends `b` quoted as Redis's `sdscatrepr` does, byte by byte (bytes
/// outside printable ASCII as `\xNN`): MONITOR lines, AOF manifest names.
pub(crate) fn push_quoted_bytes(o: &mut String, b: &[u8]) {
    o.push('"');
    for &c in b {
        match c {
            b'\\' => o.push_str("\\\\"),
            b'"' => o.push_str("\\\""),
            b'\n' => o.push_str("\\n"),
            b'\r' => o.push_str("\\r"),
            b'\t' => o.push_str("\\t"),
            7 => o.push_str("\\a"),
            8 => o.push_str("\\b"),
            c if c.is_ascii_graphic() || c == b' ' => o.push(c as char),
            c => {
                let _ = std::fmt::Write::write_fmt(o, format_args!("\\x{c:02x}"));
            }
        }
    }
    o.push('"');
}

/// Quotes a value as Redis's `sdscatrepr` does.
pub(crate) fn quote(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            '\x07' => o.push_str("\\a"),
            '\x08' => o.push_str("\\b"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                o.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

const USAGE: &str = "Usage: ./lattice-server [/path/to/redis.conf] [options] [-]
       ./lattice-server - (read config from stdin)
       ./lattice-server -v or --version
       ./lattice-server -h or --help

Examples:
       ./lattice-server (run the server with default config)
       ./lattice-server /etc/redis/6379.conf
       ./lattice-server --port 7777
       ./lattice-server --port 7777 --replicaof 127.0.0.1 8888
       ./lattice-server /etc/myredis.conf --loglevel verbose -
       ./lattice-server /etc/myredis.conf --loglevel verbose
";

/// What the command line asks for.
pub enum Invocation {
    Run(Box<Config>),
    /// Print this and exit 0 (-v, -h).
    Print(String),
}

/// Turns `--name v v --other v` into config text, one directive a line.
/// An I/O error as strerror() words, without Rust's "(os error N)".
pub(crate) fn io_error_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

fn options_text(args: &[String]) -> String {
    let mut text = String::new();
    let mut i = 0;
    let mut first = true;
    while i < args.len() {
        let a = &args[i];
        match a.strip_prefix("--") {
            Some(name) if !name.is_empty() => {
                if !first {
                    text.push('\n');
                }
                first = false;
                text.push_str(name);
                // `--save` with no value means `save ""`.
                let next_is_opt = args.get(i + 1).is_none_or(|n| n.starts_with("--"));
                if name.eq_ignore_ascii_case("save") && next_is_opt {
                    text.push_str(" \"\"");
                }
            }
            _ => {
                text.push(' ');
                text.push_str(&quote(a));
            }
        }
        i += 1;
    }
    text
}

/// Builds the configuration from the command line: an optional config file
/// (or `-` for stdin) followed by `--directive value...` pairs.
pub fn parse_args(args: &[String]) -> Result<Invocation, String> {
    if args.len() == 1 {
        match args[0].as_str() {
            "-v" | "--version" => {
                // `v=` is the Redis version we are compatible with, for
                // scripts that parse `redis-server -v`.
                return Ok(Invocation::Print(format!(
                    "LatticeDB server v={} sha=00000000:0 malloc=mimalloc bits=64 build=lattice-{}",
                    crate::REDIS_VERSION,
                    crate::LATTICE_VERSION
                )));
            }
            "-h" | "--help" => return Ok(Invocation::Print(USAGE.to_string())),
            _ => {}
        }
    }
    let mut cfg = Config::default();
    let mut text = String::new();
    let mut rest = args;
    let mut stdin = false;
    if let Some(first) = args.first() {
        if first == "-" {
            stdin = true;
            rest = &args[1..];
        } else if !first.starts_with('-') {
            text = std::fs::read_to_string(first).map_err(|e| {
                format!(
                    "Fatal error, can't open config file '{first}': {}",
                    io_error_text(&e)
                )
            })?;
            let path = std::fs::canonicalize(first).unwrap_or_else(|_| first.into());
            cfg.file = Some(path);
            rest = &args[1..];
        }
    }
    // A trailing `-` also means "and read stdin", as redis-server allows.
    if rest.last().is_some_and(|a| a == "-") {
        stdin = true;
        rest = &rest[..rest.len() - 1];
    }
    if stdin {
        crate::log_warning!("Reading config from stdin");
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map_err(|e| e.to_string())?;
        text.push_str(&s);
    }
    text.push('\n');
    text.push_str(&options_text(rest));
    Loader::default().load_text(&mut cfg, &text)?;
    cfg.finish_load();
    Ok(Invocation::Run(Box::new(cfg)))
}

/// Redis's fatal config error text.
pub(crate) fn fatal(line_no: usize, line: &str, reason: &str) -> String {
    format!(
        "\n*** FATAL CONFIG FILE ERROR (Redis {}) ***\nReading the configuration file, at line {}\n>>> '{}'\n{}",
        crate::REDIS_VERSION,
        line_no,
        line,
        reason
    )
}

/// The config-file words that are not values of the table
/// (`directives.rs`) but handled by the loader itself, with their status
/// (docs/CONFIG.md lists them too; a test keeps the two in step).
#[cfg(test)]
pub(crate) const LOADER_DIRECTIVES: &[(&str, Status)] = &[
    ("include", Status::Built),
    // Refused: a renamed command would stay reachable under its name.
    ("rename-command", Status::Refused),
    // ACL users, applied at start-up (`commands::acl::load_at_startup`).
    ("user", Status::Built),
    ("loadmodule", Status::Refused),
    ("sentinel", Status::Refused),
    ("is-flash-enabled", Status::Refused),
    ("rdbfuzz-mode", Status::NoOp),
    // Deprecated, ignored as Redis 7 does.
    ("list-max-ziplist-entries", Status::NoOp),
    ("list-max-ziplist-value", Status::NoOp),
    ("lua-replicate-commands", Status::NoOp),
];

/// State across the lines of one load (and its includes).
#[derive(Default)]
pub(crate) struct Loader {
    /// A `save` line was seen: later ones append instead of replacing.
    save_seen: bool,
    /// A `replicaof` line was seen: later ones append (several peers under
    /// `multi-master`; a plain replica follows the last one).
    replicaof_seen: bool,
    depth: usize,
    /// Only compute values: no chdir, no includes, bad lines skipped (used
    /// by CONFIG REWRITE to read what the old file said).
    pub dry: bool,
}

impl Loader {
    /// A loader that only computes values (see [`Loader::dry`]).
    pub(crate) fn dry() -> Loader {
        Loader {
            dry: true,
            ..Default::default()
        }
    }

    /// Applies every line of a config text.
    pub(crate) fn load_text(&mut self, cfg: &mut Config, text: &str) -> Result<(), String> {
        for (n, raw) in text.split('\n').enumerate() {
            let line = raw.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fail = |reason: &str| fatal(n + 1, line, reason);
            let words =
                split_line(line).map_err(|_| fail("Unbalanced quotes in configuration line"))?;
            if words.is_empty() {
                continue;
            }
            let r = self.apply(cfg, &words);
            if self.dry {
                continue;
            }
            r.map_err(|e| match e {
                LineError::Reason(r) => fail(&r),
                LineError::Nested(s) => s,
            })?;
        }
        Ok(())
    }

    fn apply(&mut self, cfg: &mut Config, words: &[String]) -> Result<(), LineError> {
        let name = words[0].to_ascii_lowercase();
        let args = &words[1..];
        let reason = |s: &str| Err(LineError::Reason(s.to_string()));
        match name.as_str() {
            "include" if args.len() == 1 && self.dry => return Ok(()),
            "include" if args.len() == 1 => return self.include(cfg, &args[0]),
            "rename-command" if args.len() == 2 => {
                return reason("rename-command is not supported by LatticeDB: refusing to start rather than leave the command reachable")
            }
            "user" if !args.is_empty() => return self.user(cfg, args),
            "loadmodule" if !args.is_empty() => {
                return reason("Modules are not supported by LatticeDB: refusing to start rather than run without the commands the module adds")
            }
            "sentinel" => return reason("Unrecognized sentinel configuration statement."),
            "rdbfuzz-mode" => return Ok(()), // KeyDB: a no-op here
            "is-flash-enabled" if args.is_empty() => {
                return reason("FLASH storage is not enabled in this build")
            }
            "list-max-ziplist-entries" | "list-max-ziplist-value" | "lua-replicate-commands"
                if args.len() == 1 =>
            {
                return Ok(()) // deprecated: ignored, as Redis 7 does
            }
            _ => {}
        }
        let Some(d) = Config::directive(&name) else {
            return reason("Bad directive or wrong number of arguments");
        };
        let mut value = cfg.check(d, args).map_err(LineError::Reason)?;
        if d.name == "dir" && !self.dry {
            value = change_dir(&value).map_err(LineError::Reason)?;
        }
        if let Kind::Save = d.kind {
            if self.save_seen && !value.is_empty() {
                let cur = cfg.get(d.name).unwrap_or("");
                if !cur.is_empty() {
                    value = format!("{cur} {value}");
                }
            }
            self.save_seen = true;
        }
        if let Kind::ReplicaOf = d.kind {
            let cur = cfg.get(d.name).unwrap_or("");
            if self.replicaof_seen && !value.is_empty() && !cur.is_empty() {
                value = format!("{cur} {value}");
            }
            self.replicaof_seen = true;
        }
        cfg.store(d, value);
        cfg.explicit.insert(d.name);
        if d.status == Status::Refused && !cfg.is_default(d) {
            return reason(&super::refused_reason(d));
        }
        Ok(())
    }

    /// A `user` line: kept for start-up, where its rules are checked
    /// against the command table. A name given twice, or a selector left
    /// open, is refused here, naming the line (Redis's
    /// ACLAppendUserForLoading).
    fn user(&mut self, cfg: &mut Config, args: &[String]) -> Result<(), LineError> {
        let reason = |s: &str| Err(LineError::Reason(s.to_string()));
        if cfg.users.iter().any(|u| u[0] == args[0]) {
            return reason(&format!("Error in user declaration '{}': Duplicate user found. A user can only be defined once in config files", args[0]));
        }
        let mut words = vec![args[0].clone()];
        let mut open: Option<String> = None;
        for a in &args[1..] {
            match open.as_mut() {
                Some(sel) => {
                    sel.push(' ');
                    sel.push_str(a);
                    if a.ends_with(')') {
                        words.push(open.take().unwrap_or_default());
                    }
                }
                None if a.starts_with('(') && !a.ends_with(')') => open = Some(a.clone()),
                None => words.push(a.clone()),
            }
        }
        if let Some(sel) = open {
            let first = sel.split(' ').next().unwrap_or_default().to_string();
            return reason(&format!(
                "Error in user declaration '{first}': Syntax error"
            ));
        }
        cfg.users.push(words);
        Ok(())
    }

    fn include(&mut self, cfg: &mut Config, path: &str) -> Result<(), LineError> {
        if self.depth > 16 {
            return Err(LineError::Reason("Too many nested includes".into()));
        }
        if path.contains(['*', '?', '[']) {
            for p in glob_files(path) {
                self.include_one(cfg, &p)?;
            }
            return Ok(());
        }
        self.include_one(cfg, path)
    }

    fn include_one(&mut self, cfg: &mut Config, path: &str) -> Result<(), LineError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            LineError::Nested(format!(
                "Fatal error, can't open config file '{path}': {}",
                io_error_text(&e)
            ))
        })?;
        self.depth += 1;
        let r = self.load_text(cfg, &text);
        self.depth -= 1;
        r.map_err(LineError::Nested)
    }
}

/// Files matching a wildcard in the last path component, sorted; none is fine.
fn glob_files(path: &str) -> Vec<String> {
    let p = std::path::Path::new(path);
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let pat = p.file_name().map(|f| f.to_string_lossy().into_owned());
    let Some(pat) = pat else { return vec![] };
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return vec![];
    };
    let mut out: Vec<String> = rd
        .flatten()
        .filter(|e| e.path().is_file())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            crate::glob::glob_match(pat.as_bytes(), name.as_bytes(), false)
        })
        .map(|e| e.path().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// `dir` changes the working directory at once, as in Redis; CONFIG GET dir
/// then shows the absolute path.
pub(crate) fn change_dir(dir: &str) -> Result<String, String> {
    std::env::set_current_dir(dir).map_err(|e| io_error_text(&e))?;
    Ok(std::env::current_dir()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| dir.to_string()))
}

enum LineError {
    /// The reason this line is wrong.
    Reason(String),
    /// A complete message from an included file.
    Nested(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Config, String> {
        let mut c = Config::default();
        Loader::default().load_text(&mut c, text).map(|_| c)
    }

    #[test]
    fn save_lines_accumulate() {
        let c = load("save 900 1\nsave 300 10\n").unwrap();
        assert_eq!(c.get("save"), Some("900 1 300 10"));
        let c = load("save \"\"\n").unwrap();
        assert_eq!(c.get("save"), Some(""));
    }

    #[test]
    fn aliases_and_errors() {
        let c = load("slaveof 10.0.0.1 6380\nhash-max-ziplist-entries 100\n").unwrap();
        assert_eq!(c.get("replicaof"), Some("10.0.0.1 6380"));
        assert_eq!(c.get("hash-max-listpack-entries"), Some("100"));
        let e = load("port 1\n\nfoo bar\n").unwrap_err();
        assert!(e.contains("at line 3\n>>> 'foo bar'\nBad directive"), "{e}");
        assert!(load("tls-port 0\n").is_ok());
        assert!(load("user default on nopass ~* &* +@all\n").is_ok());
        assert!(load("user default on >secret ~* +@all\n").is_ok());
        assert!(load("user a on\nuser a off\n").is_err());
        assert!(load("user a on (~x +get\n").is_err());
        assert!(load("tls-replication yes\n").is_ok());
        assert!(load("tls-allowlist a\n").is_err());
        assert!(load("maxmemory 1gb\n").unwrap().get("maxmemory") == Some("1073741824"));
    }

    #[test]
    fn options() {
        let a: Vec<String> = ["--save", "900", "1", "300", "10", "--port", "7"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            options_text(&a),
            "save \"900\" \"1\" \"300\" \"10\"\nport \"7\""
        );
    }
}
