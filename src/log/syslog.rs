//! Syslog: with `syslog-enabled yes`, every log line's message also goes to
//! the local syslog daemon, as Redis's serverLogRaw does after writing the
//! line (`syslog(level, "%s", msg)` after `openlog(syslog-ident, LOG_PID |
//! LOG_NDELAY | LOG_NOWAIT, syslog-facility)`).
//!
//! We write the datagram ourselves rather than through libc's global
//! openlog/syslog, so that the socket's path is ours to choose: it is the
//! LatticeDB directive `syslog-socket` (default `/dev/log`, the path glibc
//! uses), which lets a container or a test point it at another listener
//! (DECISIONS 337). The format is glibc's for the local socket,
//! `<PRI>Mmm dd hh:mm:ss ident[pid]: message`, where PRI is facility * 8 +
//! severity: Redis's levels map as debug -> LOG_DEBUG, verbose -> LOG_INFO,
//! notice -> LOG_NOTICE, warning -> LOG_WARNING. The timestamp is UTC, as
//! our log lines are (local syslog daemons stamp a line on receipt anyway).
//! A send that fails (no daemon listening) is dropped, as glibc's syslog
//! drops it; each send names the path, so a restarted daemon is reached.

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::Level;

/// Where the messages go and how they are tagged.
struct Target {
    sock: UnixDatagram,
    path: PathBuf,
    ident: String,
    facility: u8,
}

static ON: AtomicBool = AtomicBool::new(false);
static TARGET: Mutex<Option<Target>> = Mutex::new(None);

/// Syslog's facility code for `syslog-facility` (`user`, `local0`..`local7`).
pub fn facility_code(name: &str) -> Option<u8> {
    match name {
        "user" => Some(1),
        _ => {
            let n: u8 = name.strip_prefix("local")?.parse().ok()?;
            (n <= 7 && name.len() == 6).then_some(16 + n)
        }
    }
}

/// Sends every later log line's message to the socket at `path` too.
pub fn open(ident: &str, facility: &str, path: &str) -> std::io::Result<()> {
    let facility = facility_code(facility).unwrap_or(16);
    let sock = UnixDatagram::unbound()?;
    *TARGET.lock() = Some(Target {
        sock,
        path: path.into(),
        ident: ident.to_string(),
        facility,
    });
    ON.store(true, Ordering::Release);
    Ok(())
}

/// Syslog's severity for one of our levels.
fn severity(l: Level) -> u8 {
    match l {
        Level::Debug => 7,
        Level::Verbose => 6,
        Level::Notice => 5,
        Level::Warning | Level::Nothing => 4,
    }
}

/// One datagram: `<PRI>Mmm dd hh:mm:ss ident[pid]: msg` (glibc's format
/// for the local socket; the day is padded with a space, as `%e`).
fn datagram(facility: u8, l: Level, stamp: (u32, u32, i64), ident: &str, msg: &str) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (month, day, sod) = stamp;
    format!(
        "<{}>{} {:>2} {:02}:{:02}:{:02} {}[{}]: {}",
        facility as u32 * 8 + severity(l) as u32,
        MONTHS[(month.clamp(1, 12) - 1) as usize],
        day,
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60,
        ident,
        std::process::id(),
        msg
    )
}

/// Sends `msg` at level `l`, when syslog is on.
pub(super) fn send(l: Level, msg: &str) {
    if !ON.load(Ordering::Acquire) {
        return;
    }
    let t = TARGET.lock();
    let Some(t) = t.as_ref() else { return };
    let line = datagram(t.facility, l, super::utc_now(), &t.ident, msg);
    let _ = t.sock.send_to(line.as_bytes(), &t.path);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facilities_are_syslogs_codes() {
        assert_eq!(facility_code("user"), Some(1));
        assert_eq!(facility_code("local0"), Some(16));
        assert_eq!(facility_code("local7"), Some(23));
        assert_eq!(facility_code("local8"), None);
        assert_eq!(facility_code("local07"), None);
        assert_eq!(facility_code("daemon"), None);
    }

    #[test]
    fn a_datagram_is_in_glibcs_format() {
        let pid = std::process::id();
        // local0 (16) * 8 + LOG_WARNING (4) = 132.
        let d = datagram(16, Level::Warning, (12, 7, 3_723), "redis", "hello");
        assert_eq!(d, format!("<132>Dec  7 01:02:03 redis[{pid}]: hello"));
        // user (1) * 8 + LOG_DEBUG (7) = 15; verbose is LOG_INFO (6).
        let d = datagram(1, Level::Debug, (1, 17, 0), "x", "m");
        assert_eq!(d, format!("<15>Jan 17 00:00:00 x[{pid}]: m"));
        assert!(datagram(23, Level::Verbose, (1, 1, 0), "", "m").starts_with("<190>"));
        assert!(datagram(16, Level::Notice, (1, 1, 0), "r", "m").starts_with("<133>"));
    }

    #[test]
    fn lines_reach_the_socket() {
        let dir = std::env::temp_dir().join(format!("lattice-syslog-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("log.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).unwrap();
        open("ident-x", "local3", path.to_str().unwrap()).unwrap();
        send(Level::Notice, "a message");
        // Other tests' lines may arrive too: take the first that is ours.
        listener
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 512];
        let got = loop {
            let n = listener.recv(&mut buf).unwrap();
            let got = String::from_utf8_lossy(&buf[..n]).to_string();
            if got.ends_with("a message") {
                break got;
            }
        };
        // local3 (19) * 8 + LOG_NOTICE (5) = 157.
        assert!(got.starts_with("<157>"), "{got}");
        assert!(got.ends_with(&format!(" ident-x[{}]: a message", std::process::id())));
        ON.store(false, Ordering::Release);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
