//! Lists (Redis's t_list.c): LPUSH ... LMPOP, blocking pops. Issue 3: being built.

use super::Command;

pub static COMMANDS: &[Command] = &[];
