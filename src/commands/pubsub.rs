//! Pub/sub (Redis's pubsub.c). Issue 3: being built.

use super::Command;

pub static COMMANDS: &[Command] = &[];
