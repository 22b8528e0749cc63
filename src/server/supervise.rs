//! `supervised`: telling a service manager that the server is ready, as
//! Redis 7.0 does. systemd: datagrams to `$NOTIFY_SOCKET` (sd_notify's
//! protocol: `STATUS=...`, `READY=1` once serving, `STOPPING=1` at shutdown),
//! for `Type=notify` units such as Debian's redis-server.service, which
//! passes `--supervised systemd`. upstart: the process stops itself
//! (SIGSTOP) to say it is up, as Redis does, before loading. `auto` picks
//! whichever the environment names. A supervised server does not daemonize.

use std::sync::OnceLock;

/// The service manager found at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Supervisor {
    Systemd(String),
    Upstart,
}

static SYSTEMD: OnceLock<String> = OnceLock::new();

/// Which supervisor `supervised <mode>` and the environment name, if any
/// (no logging: called before the log is open). `Err` carries Redis's
/// warning when the mode asks for one the environment does not have.
pub fn detect(mode: &str) -> Result<Option<Supervisor>, String> {
    let systemd = std::env::var("NOTIFY_SOCKET")
        .ok()
        .filter(|s| !s.is_empty());
    let upstart = std::env::var_os("UPSTART_JOB").is_some();
    match mode {
        "systemd" => match systemd {
            Some(s) => Ok(Some(Supervisor::Systemd(s))),
            None => Err(
                "systemd supervision requested or auto-detected, but NOTIFY_SOCKET not found!"
                    .into(),
            ),
        },
        "upstart" if upstart => Ok(Some(Supervisor::Upstart)),
        "upstart" => Err("upstart supervision requested, but UPSTART_JOB not found!".into()),
        "auto" if upstart => Ok(Some(Supervisor::Upstart)),
        "auto" => Ok(systemd.map(Supervisor::Systemd)),
        _ => Ok(None),
    }
}

/// Starts supervision (after the log is open): systemd is told the server
/// is loading; upstart is told it is up by stopping, as Redis does.
pub fn start(s: &Supervisor) {
    match s {
        Supervisor::Systemd(path) => {
            let _ = SYSTEMD.set(path.clone());
            if notify("STATUS=LatticeDB is loading...\n") {
                crate::log_notice!(
                    "Supervised by systemd. Please make sure you set appropriate values for TimeoutStartSec and TimeoutStopSec in your service unit."
                );
            }
        }
        Supervisor::Upstart => {
            crate::log_notice!("supervised by upstart, will stop to signal readiness.");
            // SAFETY: raise(2) sends a signal to this process; no memory involved.
            unsafe { libc::raise(libc::SIGSTOP) };
            std::env::remove_var("UPSTART_JOB");
        }
    }
}

/// What INFO's `process_supervised` says.
pub(crate) fn info_name() -> &'static str {
    if SYSTEMD.get().is_some() {
        "systemd"
    } else {
        "no"
    }
}

/// Sends one sd_notify message if systemd supervises us; true if sent.
pub(crate) fn notify(msg: &str) -> bool {
    let Some(path) = SYSTEMD.get() else {
        return false;
    };
    match send(path, msg) {
        Ok(()) => true,
        Err(e) => {
            crate::log_warning!("systemd supervision error: {e}");
            false
        }
    }
}

fn send(path: &str, msg: &str) -> std::io::Result<()> {
    let sock = std::os::unix::net::UnixDatagram::unbound()?;
    match path.strip_prefix('@') {
        // An abstract socket name (Linux).
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sock.send_to_addr(msg.as_bytes(), &addr)?;
        }
        None => {
            sock.send_to(msg.as_bytes(), path)?;
        }
    }
    Ok(())
}
