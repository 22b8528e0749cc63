//! Hashes (Redis's t_hash.c). Issue 3: being built.

use super::Command;

pub static COMMANDS: &[Command] = &[];
