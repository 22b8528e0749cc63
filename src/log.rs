//! Logging in Redis's format: `pid:role dd Mon yyyy hh:mm:ss.mmm <level> message`,
//! where role is `M`/`S`/`C` as Redis's (see [`set_role`], [`as_child`]) and
//! level is `.` debug, `-` verbose, `*` notice, `#` warning. With
//! `syslog-enabled yes` each message goes to syslog too (`syslog.rs`).

mod syslog;
pub use syslog::{facility_code as syslog_facility_code, open as open_syslog};

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

use parking_lot::Mutex;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
#[repr(u8)]
pub enum Level {
    Debug = 0,
    Verbose = 1,
    Notice = 2,
    Warning = 3,
    Nothing = 4,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "debug" => Level::Debug,
            "verbose" => Level::Verbose,
            "notice" => Level::Notice,
            "warning" => Level::Warning,
            "nothing" => Level::Nothing,
            _ => return None,
        })
    }
    fn mark(self) -> char {
        match self {
            Level::Debug => '.',
            Level::Verbose => '-',
            Level::Notice => '*',
            Level::Warning | Level::Nothing => '#',
        }
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Notice as u8);
/// The role tag after the pid, as Redis's: `M` master, `S` replica, `C`
/// what Redis's fork child logs (here: a snapshot's own lines, and the lines
/// before the server is initialised, which Redis logs before it knows its
/// pid), `X` sentinel (never here).
static ROLE: AtomicU8 = AtomicU8::new(b'C');

thread_local! {
    /// Set while a thread logs what Redis's fork child would (`C`).
    static CHILD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What runs after each [`set_role`] (the OOM score's class, config::oom).
static ROLE_HOOK: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets the process's role tag (`M` or `S`).
pub fn set_role(tag: u8) {
    ROLE.store(tag, Ordering::Relaxed);
    if let Some(hook) = ROLE_HOOK.get() {
        hook();
    }
}

/// The process's role tag (`M`, `S`, or `C` before it is known).
pub fn role_tag() -> u8 {
    ROLE.load(Ordering::Relaxed)
}

/// Runs `hook` after every later role change (once set, kept).
pub fn on_role_change(hook: fn()) {
    let _ = ROLE_HOOK.set(hook);
}

/// Runs `f` with this thread's lines tagged `C`, as the lines Redis's fork
/// child logs (a snapshot's "DB saved on disk").
pub fn as_child<R>(f: impl FnOnce() -> R) -> R {
    let was = CHILD.with(|c| c.replace(true));
    let r = f();
    CHILD.with(|c| c.set(was));
    r
}

fn role() -> char {
    if CHILD.with(|c| c.get()) {
        'C'
    } else {
        ROLE.load(Ordering::Relaxed) as char
    }
}
static FILE: Mutex<Option<std::fs::File>> = Mutex::new(None);

pub fn set_level(l: Level) {
    LEVEL.store(l as u8, Ordering::Relaxed);
}

/// Logs to `path` instead of stdout ("" = stdout).
pub fn set_file(path: &str) -> std::io::Result<()> {
    let f = if path.is_empty() {
        None
    } else {
        Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        )
    };
    *FILE.lock() = f;
    Ok(())
}

pub fn enabled(l: Level) -> bool {
    l as u8 >= LEVEL.load(Ordering::Relaxed)
}

pub fn log(l: Level, msg: &str) {
    if !enabled(l) {
        return;
    }
    let line = format!(
        "{}:{} {} {} {}\n",
        std::process::id(),
        role(),
        timestamp(),
        l.mark(),
        msg
    );
    let mut f = FILE.lock();
    match f.as_mut() {
        Some(file) => {
            let _ = file.write_all(line.as_bytes());
        }
        None => {
            let _ = std::io::stdout().lock().write_all(line.as_bytes());
        }
    }
    drop(f);
    syslog::send(l, msg);
}

/// Now in UTC: (month 1-12, day of the month, seconds since midnight).
fn utc_now() -> (u32, u32, i64) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (_, mo, d) = civil_from_days(secs.div_euclid(86400));
    (mo, d, secs.rem_euclid(86400))
}

/// "22 Nov 2026 19:56:06.123" in UTC.
fn timestamp() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let secs = (ms / 1000) as i64;
    let (y, mo, d) = civil_from_days(secs.div_euclid(86400));
    let sod = secs.rem_euclid(86400);
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{:02} {} {} {:02}:{:02}:{:02}.{:03}",
        d,
        MONTHS[(mo - 1) as usize],
        y,
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[macro_export]
macro_rules! log_notice { ($($t:tt)*) => { $crate::log::log($crate::log::Level::Notice, &format!($($t)*)) } }
#[macro_export]
macro_rules! log_warning { ($($t:tt)*) => { $crate::log::log($crate::log::Level::Warning, &format!($($t)*)) } }
#[macro_export]
macro_rules! log_verbose { ($($t:tt)*) => { $crate::log::log($crate::log::Level::Verbose, &format!($($t)*)) } }
#[macro_export]
macro_rules! log_debug { ($($t:tt)*) => { $crate::log::log($crate::log::Level::Debug, &format!($($t)*)) } }

#[cfg(test)]
mod tests {
    #[test]
    fn roles() {
        super::as_child(|| assert_eq!(super::role(), 'C'));
    }

    #[test]
    fn dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_000), (2024, 10, 4));
    }
}
