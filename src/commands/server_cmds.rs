//! Server and introspection commands.

use super::{CmdError, Command, Ctx};

pub static COMMANDS: &[Command] = &[];

/// CLIENT SETNAME's rule: no spaces, newlines or other special characters.
pub fn validate_client_name(name: &[u8]) -> Result<(), CmdError> {
    if name.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(CmdError::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

pub fn set_client_name(ctx: &mut Ctx, name: &[u8]) {
    let s = String::from_utf8_lossy(name).into_owned();
    if let Some(sh) = &ctx.client.shared {
        *sh.name.lock() = s.clone();
    }
    ctx.client.name = if s.is_empty() { None } else { Some(s) };
}
