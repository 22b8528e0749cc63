//! Transactions: MULTI EXEC DISCARD WATCH UNWATCH (Redis's multi.c). Issue 3: being built.

use super::Command;

pub static COMMANDS: &[Command] = &[];
