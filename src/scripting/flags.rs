//! Script flags: the `#!lua flags=...` shebang of an EVAL script (and the
//! flags a FUNCTION registers), and what they make of the command's own
//! flags (Redis's script.c `scripts_flags_def`, eval.c
//! `evalExtractShebangFlags`, `scriptFlagsToCmdFlags`).

use crate::commands::flags::{DENYOOM, MAY_REPLICATE, STALE, WRITE};

/// A script without a shebang: Redis's backwards-compatible mode (may
/// write, checked command by command; no flag is declared).
pub(super) const EVAL_COMPAT: u32 = 1 << 0;
pub(super) const NO_WRITES: u32 = 1 << 1;
pub(super) const ALLOW_OOM: u32 = 1 << 2;
pub(super) const ALLOW_STALE: u32 = 1 << 3;
pub(super) const NO_CLUSTER: u32 = 1 << 4;
pub(super) const ALLOW_CROSS_SLOT: u32 = 1 << 5;

/// The flags by their names, in Redis's order.
pub(super) const NAMES: [(u32, &str); 5] = [
    (NO_WRITES, "no-writes"),
    (ALLOW_OOM, "allow-oom"),
    (ALLOW_STALE, "allow-stale"),
    (NO_CLUSTER, "no-cluster"),
    (ALLOW_CROSS_SLOT, "allow-cross-slot-keys"),
];

pub(super) fn by_name(name: &[u8]) -> Option<u32> {
    NAMES
        .iter()
        .find(|(_, n)| n.as_bytes() == name)
        .map(|&(f, _)| f)
}

/// The shebang of `body`: its flags, and the length of its first line
/// (which is not compiled; its line feed is, so line numbers stay right).
/// A body without one is in compatibility mode. Err: Redis's message.
pub(super) fn shebang(body: &[u8]) -> Result<(u32, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((EVAL_COMPAT, 0));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err("Invalid script shebang".into());
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let words = crate::config::parse::split_line(&line).unwrap_or_default();
    let mut parts = words.iter().map(|w| w.as_str());
    let Some(engine) = parts.next() else {
        return Err("Invalid engine in script shebang".into());
    };
    if engine != "#!lua" {
        return Err(format!("Unexpected engine in script shebang: {engine}"));
    }
    let mut flags = 0;
    for p in parts {
        let Some(list) = p.strip_prefix("flags=") else {
            return Err(format!("Unknown lua shebang option: {p}"));
        };
        for f in list.split(',').filter(|_| !list.is_empty()) {
            flags |= by_name(f.as_bytes())
                .ok_or_else(|| format!("Unexpected flag in script shebang: {f}"))?;
        }
    }
    Ok((flags, end))
}

/// The command flags of a call of a script with `script` flags (Redis's
/// scriptFlagsToCmdFlags): a script that declared flags writes, needs
/// memory and refuses stale data unless it says otherwise.
pub(super) fn command_flags(cmd: u32, script: u32) -> u32 {
    if script & EVAL_COMPAT != 0 {
        return cmd;
    }
    let mut f = cmd & !(STALE | DENYOOM | WRITE | MAY_REPLICATE);
    if script & (ALLOW_OOM | NO_WRITES) == 0 {
        f |= DENYOOM;
    }
    if script & NO_WRITES == 0 {
        f |= WRITE;
    }
    if script & ALLOW_STALE != 0 {
        f |= STALE;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs() {
        assert_eq!(shebang(b"return 1").unwrap(), (EVAL_COMPAT, 0));
        assert_eq!(shebang(b"#!lua\nreturn 1").unwrap(), (0, 5));
        assert_eq!(
            shebang(b"#!lua flags=no-writes,allow-oom\n").unwrap().0,
            NO_WRITES | ALLOW_OOM
        );
        assert_eq!(shebang(b"#!lua flags=\n").unwrap().0, 0);
        assert_eq!(shebang(b"#!lua").unwrap_err(), "Invalid script shebang");
        assert_eq!(
            shebang(b"#!not-lua\n").unwrap_err(),
            "Unexpected engine in script shebang: #!not-lua"
        );
        assert_eq!(
            shebang(b"#!lua badger=data\n").unwrap_err(),
            "Unknown lua shebang option: badger=data"
        );
        assert_eq!(
            shebang(b"#!lua flags=allow-oom,what?\n").unwrap_err(),
            "Unexpected flag in script shebang: what?"
        );
    }
}
