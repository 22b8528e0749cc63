//! (family being built)

use super::Command;

pub static COMMANDS: &[Command] = &[];
