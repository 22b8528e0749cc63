//! Configuration: redis.conf syntax, command-line directives, CONFIG GET/SET.
//!
//! Every directive we know lives in one table ([`directives::DIRECTIVES`])
//! with its type, default and status: built (applied), a documented no-op
//! (nothing here that it could change: a notice is logged once and the value
//! kept for CONFIG GET/REWRITE) or refused (not built, and ignoring it would
//! change what clients or operators see: a non-default value fails start-up
//! and CONFIG SET). docs/CONFIG.md lists every directive with its status and
//! why; a test keeps it and this table in step. Values are kept as normalised strings, as CONFIG
//! GET shows them, and typed getters read them.
//!
//! Configuration on hot paths (docs/ARCHITECTURE.md): a value read per
//! command, per connection event, per replicated write or per cron tick is
//! read from `core::HotConfig` (`Core::hot`), a mirror in atomics that
//! `HotConfig::load` fills at start-up and inside the CONFIG SET that
//! changes it (`Core::config_changed`; a subsystem's own copies through
//! `Admin::config_changed`), never from a cron. Start-up, syncs, snapshots,
//! admin commands and error paths read this `Config` in place. A new
//! directive read on a hot path adds its field to `HotConfig` and its line
//! to `HotConfig::load`.

pub(crate) mod directives;
pub mod oom;
pub(crate) mod parse;

use std::collections::{BTreeMap, BTreeSet};

pub(crate) use directives::{Directive, Kind, Status, DIRECTIVES};

/// The live configuration.
#[derive(Clone, Debug)]
pub struct Config {
    values: BTreeMap<&'static str, String>,
    /// Directives given in the config file or on the command line.
    pub explicit: BTreeSet<&'static str>,
    /// Path of the config file, if started with one (for CONFIG REWRITE).
    pub file: Option<std::path::PathBuf>,
    /// What the load decided that the log should say once it is open.
    pub notes: Vec<String>,
    /// `user <name> <rules...>` lines, name first, selectors in
    /// parentheses merged into one word; applied once the command table
    /// exists (`commands::acl::load_at_startup`).
    pub users: Vec<Vec<String>>,
}

impl Default for Config {
    fn default() -> Self {
        let mut values = BTreeMap::new();
        for d in DIRECTIVES {
            values.insert(d.name, d.default.to_string());
        }
        Config {
            values,
            explicit: BTreeSet::new(),
            file: None,
            notes: Vec::new(),
            users: Vec::new(),
        }
    }
}

/// `node-id`: empty, or 1 to 16 hex digits, not all zero; shown as 16
/// lowercase digits.
fn normalize_node_id(v: &str) -> Result<String, String> {
    if v.is_empty() {
        return Ok(String::new());
    }
    match u64::from_str_radix(v, 16) {
        Ok(id) if id != 0 && v.len() <= 16 && v.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(format!("{id:016x}"))
        }
        _ => Err("argument must be 1 to 16 hex digits, not all zero".into()),
    }
}

impl Config {
    /// Finds a directive by name or alias, case-insensitively.
    pub fn directive(name: &str) -> Option<&'static Directive> {
        let lower = name.to_ascii_lowercase();
        DIRECTIVES
            .iter()
            .find(|d| d.name == lower || d.aliases.contains(&lower.as_str()))
    }

    /// The normalised value of a directive.
    pub fn get(&self, name: &str) -> Option<&str> {
        let d = Self::directive(name)?;
        self.values.get(d.name).map(|s| s.as_str())
    }

    /// Checks `args` for directive `d` and returns the value to store
    /// (client-output-buffer-limit merges its classes into the current one).
    pub fn check(&self, d: &'static Directive, args: &[String]) -> Result<String, String> {
        let v = d.kind.normalize(args)?;
        if d.name == "hz" {
            // Redis clamps hz into [1, 500] rather than refusing it.
            return Ok(v.parse::<i64>().unwrap_or(10).clamp(1, 500).to_string());
        }
        if d.name == "node-id" {
            return normalize_node_id(&v);
        }
        if let Kind::ClientOutputBuffer = d.kind {
            let cur = self.values.get(d.name).map(|s| s.as_str()).unwrap_or("");
            return Ok(directives::merge_cob(cur, &v));
        }
        Ok(v)
    }

    /// Validates and stores one value (start-up and CONFIG SET).
    pub fn set(&mut self, name: &str, args: &[String]) -> Result<(), String> {
        let d = Self::directive(name)
            .ok_or_else(|| "Bad directive or wrong number of arguments".to_string())?;
        let v = self.check(d, args)?;
        self.values.insert(d.name, v);
        Ok(())
    }

    /// Stores an already checked value.
    pub fn store(&mut self, d: &'static Directive, value: String) {
        self.values.insert(d.name, value);
    }

    /// All (name, value) pairs, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        DIRECTIVES.iter().map(move |d| {
            (
                d.name,
                self.values.get(d.name).map(|s| s.as_str()).unwrap_or(""),
            )
        })
    }

    /// Whether a directive differs from its default.
    pub fn is_default(&self, d: &Directive) -> bool {
        let v = self.values.get(d.name).map(|s| s.as_str()).unwrap_or("");
        Self::is_default_value(d, v)
    }

    /// The value of directive `name`, which the code names itself: an
    /// unknown name (a typo) fails debug builds at the caller. The names
    /// written as literals are also checked by a test (`tests` below).
    #[track_caller]
    fn known(&self, name: &str) -> Option<&str> {
        let v = self.get(name);
        debug_assert!(v.is_some(), "no config directive named {name:?}");
        v
    }

    /// An integer or memory directive (0 if unknown or not a number).
    #[track_caller]
    pub fn get_i64(&self, name: &str) -> i64 {
        self.known(name)
            .and_then(|v| parse::parse_memory(v).ok())
            .unwrap_or(0)
    }

    /// A yes/no directive.
    #[track_caller]
    pub fn get_bool(&self, name: &str) -> bool {
        self.known(name) == Some("yes")
    }

    /// A directive's value as text.
    #[track_caller]
    pub fn get_str(&self, name: &str) -> String {
        self.known(name).unwrap_or("").to_string()
    }

    pub fn port(&self) -> u16 {
        self.get_i64("port") as u16
    }

    /// Worker threads: `server-threads` (alias io-threads); 0 means one per core.
    pub fn threads(&self) -> usize {
        match self.get_i64("server-threads") {
            n if n > 0 => n as usize,
            _ => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        }
    }

    /// No-op directives set to a non-default value.
    pub fn noops_in_use(&self) -> Vec<&'static str> {
        DIRECTIVES
            .iter()
            .filter(|d| d.status == Status::NoOp && !self.is_default(d))
            .map(|d| d.name)
            .collect()
    }

    /// Whether `value` (normalised) is directive `d`'s default.
    pub fn is_default_value(d: &Directive, value: &str) -> bool {
        value == d.default
            || d.kind
                .normalize(&[d.default.to_string()])
                .is_ok_and(|n| n == value)
    }

    /// Ends a load (file and command line): several `replicaof` lines name
    /// several peers under `active-replica`/`multi-master`; a plain replica
    /// follows the last one, as Redis does (which keeps the last line), and
    /// a note says so.
    pub fn finish_load(&mut self) {
        let v = self.get_str("replicaof");
        let pairs = directives::replicaof_pairs(&v);
        let active = self.get_bool("active-replica") || self.get_bool("multi-master");
        if pairs.len() > 1 && !active {
            let (host, port) = pairs.last().cloned().unwrap_or_default();
            self.notes.push(format!(
                "replicaof was given {} times: this node replicates from the last one, {host} {port} (several masters need active-replica yes or multi-master yes)",
                pairs.len()
            ));
            self.values.insert("replicaof", format!("{host} {port}"));
        }
    }
}

/// The reason a refused directive's value stops start-up and CONFIG SET.
pub(crate) fn refused_reason(d: &Directive) -> String {
    format!(
        "'{}' is not supported by LatticeDB yet (docs/CONFIG.md): refusing rather than ignore it",
        d.name
    )
}

/// Logs, once per process and directive, that a no-op directive was set.
pub fn warn_noop(name: &str) {
    static WARNED: parking_lot::Mutex<BTreeSet<String>> = parking_lot::Mutex::new(BTreeSet::new());
    if WARNED.lock().insert(name.to_string()) {
        crate::log_notice!(
            "The '{name}' directive has no effect in LatticeDB (docs/CONFIG.md says why): its value is kept for CONFIG GET and REWRITE."
        );
    }
}

#[cfg(test)]
mod tests {
    use super::Config;
    use std::path::Path;

    /// Literal names given to `.get(...)` in src/ that are not a Config's.
    const NOT_CONFIG: &[&str] = &[];

    /// Every directive name written as a literal in a config read
    /// (`get_i64("...")`, `get_str`, `get_bool`, and `.get("...")`, which in
    /// src/ is only Config's) names a directive of the table: a misspelled
    /// name would read 0, "" or no.
    #[test]
    fn every_directive_name_in_the_code_exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut calls = 0;
        let mut unknown = vec![];
        for path in rust_files(&src) {
            let text = std::fs::read_to_string(&path).unwrap();
            for (line, name) in literal_reads(&text) {
                calls += 1;
                if Config::directive(name).is_none() && !NOT_CONFIG.contains(&name) {
                    let file = path.strip_prefix(src.parent().unwrap()).unwrap();
                    unknown.push(format!("{}:{line}: {name:?}", file.display()));
                }
            }
        }
        assert!(
            calls > 50,
            "found only {calls} config reads: has the scan gone stale?"
        );
        assert!(
            unknown.is_empty(),
            "config reads of names that are not in config/directives.rs:\n{}",
            unknown.join("\n")
        );
    }

    /// docs/CONFIG.md lists every directive of the table and every word the
    /// loader handles itself, each with the code's status; the code reads
    /// only built directives, and names every built one somewhere.
    #[test]
    fn docs_config_md_matches_the_code() {
        use super::{parse::LOADER_DIRECTIVES, Status, DIRECTIVES};
        use std::collections::BTreeMap;
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let doc = std::fs::read_to_string(root.join("docs/CONFIG.md")).unwrap();
        let mut rows = BTreeMap::new();
        for line in doc.lines() {
            let Some(rest) = line.strip_prefix("| `") else {
                continue;
            };
            let cells: Vec<&str> = rest.split(" | ").collect();
            let name = cells[0].trim_end_matches('`');
            let status = cells.get(3).copied().unwrap_or("").trim();
            assert!(
                rows.insert(name.to_string(), status.to_string()).is_none(),
                "docs/CONFIG.md lists {name} twice"
            );
        }
        let word = |s: Status| match s {
            Status::Built => "built",
            Status::NoOp => "no-op",
            Status::Refused => "refused",
        };
        let mut code: BTreeMap<String, &str> = DIRECTIVES
            .iter()
            .map(|d| (d.name.to_string(), word(d.status)))
            .collect();
        for (name, s) in LOADER_DIRECTIVES {
            code.insert(name.to_string(), word(*s));
        }
        let mut wrong = vec![];
        for (name, status) in &code {
            match rows.get(name) {
                None => wrong.push(format!("{name}: missing from docs/CONFIG.md")),
                Some(doc) if doc != status => wrong.push(format!(
                    "{name}: {status} in the code, {doc} in docs/CONFIG.md"
                )),
                _ => {}
            }
        }
        for name in rows.keys().filter(|n| !code.contains_key(*n)) {
            wrong.push(format!("{name}: in docs/CONFIG.md, not in the code"));
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));

        // The code reads only built directives, and names each built one.
        let src = root.join("src");
        let mut text = String::new();
        for path in rust_files(&src) {
            if !path.ends_with("config/directives.rs") {
                text.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
        for (_, name) in literal_reads(&text) {
            if let Some(d) = Config::directive(name) {
                assert_eq!(d.status, Status::Built, "the code reads {name}, not built");
            }
        }
        for d in DIRECTIVES.iter().filter(|d| d.status == Status::Built) {
            assert!(
                text.contains(&format!("\"{}\"", d.name)),
                "{} is built but no code names it",
                d.name
            );
        }
    }

    #[test]
    fn the_scan_finds_literal_reads_only() {
        // Quotes written as ' so that this file's own scan skips them.
        let text = [
            "c.get_i64('hz');",
            "x.get_str(key); // get_str('in-a-comment')",
            "l.get_str(b'k')",
            "",
            "c.get_bool(\n  'no-such')",
        ]
        .join("\n")
        .replace('\'', "\"");
        assert_eq!(literal_reads(&text), [(1, "hz"), (6, "no-such")]);
    }

    /// `(line, name)` of each read of a directive by a literal name.
    fn literal_reads(text: &str) -> Vec<(usize, &str)> {
        let mut found = vec![];
        for getter in ["get_i64", "get_str", "get_bool", ".get"] {
            let call = format!("{getter}(");
            for (at, _) in text.match_indices(&call) {
                let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
                if text[line_start..at].contains("//") {
                    continue; // in a comment
                }
                let rest = &text[at + call.len()..];
                let arg = rest.trim_start();
                let Some(lit) = arg.strip_prefix('"') else {
                    continue;
                };
                let Some(end) = lit.find('"') else { continue };
                let start = text.len() - lit.len();
                found.push((text[..start].matches('\n').count() + 1, &lit[..end]));
            }
        }
        found.sort();
        found
    }

    fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut out = vec![];
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(rust_files(&p));
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
        out
    }
}
