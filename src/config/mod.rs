//! Configuration: redis.conf syntax, command-line directives, CONFIG GET/SET.
//!
//! Every directive we know lives in one table ([`directives::DIRECTIVES`])
//! with its type, default and status: built (applied), accepted (a feature not
//! built yet: logged once and kept for CONFIG GET/REWRITE) or refused (a
//! security feature whose silent absence would be unsafe: start-up fails).
//! Values are kept as normalised strings, as CONFIG GET shows them; typed
//! getters read them, and the server mirrors the few hot ones into atomics.

pub mod directives;
pub mod parse;

use std::collections::BTreeMap;

pub use directives::{Directive, Kind, Status, DIRECTIVES};

/// The live configuration.
#[derive(Clone, Debug)]
pub struct Config {
    values: BTreeMap<&'static str, String>,
    /// Path of the config file, if started with one (for CONFIG REWRITE).
    pub file: Option<std::path::PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        let mut values = BTreeMap::new();
        for d in DIRECTIVES {
            values.insert(d.name, d.default.to_string());
        }
        Config { values, file: None }
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

    /// Validates and stores one value (start-up and CONFIG SET).
    pub fn set(&mut self, name: &str, args: &[String]) -> Result<(), String> {
        let d = Self::directive(name)
            .ok_or_else(|| "Bad directive or wrong number of arguments".to_string())?;
        let v = d.kind.normalize(args)?;
        self.values.insert(d.name, v);
        Ok(())
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

    pub fn get_i64(&self, name: &str) -> i64 {
        self.get(name)
            .and_then(|v| parse::parse_memory(v).ok())
            .unwrap_or(0)
    }

    pub fn get_bool(&self, name: &str) -> bool {
        self.get(name) == Some("yes")
    }

    pub fn get_str(&self, name: &str) -> String {
        self.get(name).unwrap_or("").to_string()
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
}
