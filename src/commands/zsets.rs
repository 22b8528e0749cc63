//! Sorted sets (Redis's t_zset.c). Issue 3: being built.

use super::Command;

pub static COMMANDS: &[Command] = &[];
