//! Sets (Redis's t_set.c). Issue 3: being built.

use super::Command;

pub static COMMANDS: &[Command] = &[];
