//! Typed command errors, rendered to Redis's exact reply strings at the edge.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum CmdError {
    WrongType,
    NotInteger,
    NotFloat,
    Syntax,
    NoSuchKey,
    Overflow,
    /// "ERR wrong number of arguments for '<cmd>' command"
    WrongArity(String),
    /// "ERR unknown command '<name>', with args beginning with: ..."
    UnknownCommand {
        name: String,
        args: Vec<String>,
    },
    /// "ERR unknown subcommand '<sub>'. Try <CMD> HELP."
    UnknownSubcommand {
        cmd: String,
        sub: String,
    },
    NoAuth,
    /// Any other error: the full text, starting with its code ("ERR ...").
    Msg(String),
    /// An error reply already counted in the error statistics when it was
    /// first returned (a script's error that came from `redis.call`): the
    /// command counts as failed, the error is not counted again.
    Counted(String),
}

impl CmdError {
    /// An error with the "ERR " prefix.
    pub fn err(msg: impl Into<String>) -> CmdError {
        CmdError::Msg(format!("ERR {}", msg.into()))
    }

    /// The line sent after '-'.
    pub fn render(&self) -> String {
        match self {
            CmdError::WrongType => {
                "WRONGTYPE Operation against a key holding the wrong kind of value".into()
            }
            CmdError::NotInteger => "ERR value is not an integer or out of range".into(),
            CmdError::NotFloat => "ERR value is not a valid float".into(),
            CmdError::Syntax => "ERR syntax error".into(),
            CmdError::NoSuchKey => "ERR no such key".into(),
            CmdError::Overflow => "ERR increment or decrement would overflow".into(),
            CmdError::WrongArity(c) => format!("ERR wrong number of arguments for '{c}' command"),
            CmdError::UnknownCommand { name, args } => {
                let mut s = format!("ERR unknown command '{name}', with args beginning with: ");
                for a in args {
                    s.push('\'');
                    s.push_str(a);
                    s.push_str("' ");
                }
                s
            }
            CmdError::UnknownSubcommand { cmd, sub } => {
                format!(
                    "ERR unknown subcommand '{sub}'. Try {} HELP.",
                    cmd.to_uppercase()
                )
            }
            CmdError::NoAuth => "NOAUTH Authentication required.".into(),
            CmdError::Msg(m) | CmdError::Counted(m) => m.clone(),
        }
    }

    /// The error code counted by INFO errorstats ("ERR", "WRONGTYPE", ...).
    pub fn code(&self) -> String {
        error_code(&self.render()).to_string()
    }
}

/// The code INFO errorstats counts a rendered error under: its first word
/// ("ERR" where it has none).
pub(crate) fn error_code(rendered: &str) -> &str {
    let first = rendered.split(' ').next().unwrap_or_default();
    if first.is_empty() {
        "ERR"
    } else {
        first
    }
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}
