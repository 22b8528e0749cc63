//! `lattice-server [/path/to/redis.conf | -] [--directive value ...]`
//!
//! Parses the configuration (exiting 1 with Redis's fatal config error text
//! on a bad one), daemonizes if asked, opens the log file (and syslog),
//! sets the OOM score (`oom-score-adj`), logs the start-up
//! banner, what the config load decided and a notice for each no-op
//! directive in use (docs/CONFIG.md), then runs the server.

use lattice::facade::alloc::{mark_installed, Counting};
use lattice::facade::config::parse::{parse_args, Invocation};
use lattice::facade::config::{oom, warn_noop, Config};
use lattice::facade::server::{self, supervise};
use mimalloc::MiMalloc;

// mimalloc, with every allocation counted for INFO's used_memory.
#[global_allocator]
static GLOBAL: Counting<MiMalloc> = Counting(MiMalloc);

fn main() {
    mark_installed();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut config = match parse_args(&args) {
        Ok(Invocation::Run(c)) => *c,
        Ok(Invocation::Print(s)) => {
            println!("{s}");
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    if config.get_bool("disable-thp") {
        disable_thp();
    }
    // `supervised`: a supervised server stays in the foreground (Redis).
    let supervisor = supervise::detect(&config.get_str("supervised"));
    let supervised = matches!(supervisor, Ok(Some(_)));
    if config.get_bool("daemonize") && !supervised {
        daemonize(&mut config);
    }
    open_log(&config);
    // Redis's first three lines: warnings, tagged C (logged before the
    // server knows its role).
    lattice::log_warning!("oO0OoO0OoO0Oo LatticeDB is starting oO0OoO0OoO0Oo");
    lattice::log_warning!(
        "LatticeDB version={} (Redis {} compatible), bits=64, pid={}, just started",
        lattice::LATTICE_VERSION,
        lattice::REDIS_VERSION,
        std::process::id()
    );
    // As redis-server: the warning only when started with no argument at
    // all (command-line directives are a configuration too).
    match args.is_empty() {
        false => lattice::log_warning!("Configuration loaded"),
        true => lattice::log_warning!(
            "Warning: no config file specified, using the default config. In order to specify a config file use lattice-server /path/to/redis.conf"
        ),
    }
    // From here on the role tag is the server's: S while it replicates a
    // master (an active node, writable, stays M), as Redis's.
    let replica = !config.get_str("replicaof").is_empty()
        && !config.get_bool("active-replica")
        && !config.get_bool("multi-master");
    lattice::log::set_role(if replica { b'S' } else { b'M' });
    // oom-score-adj: the role's score now, and again at each role change.
    let _ = oom::apply(
        &config.get_str("oom-score-adj"),
        &config.get_str("oom-score-adj-values"),
    );
    lattice::log::on_role_change(oom::role_changed);
    lattice::log_notice!(
        "Running mode=standalone, port={}, server-threads={}.",
        config.port(),
        config.threads()
    );
    match &supervisor {
        Ok(Some(s)) => supervise::start(s),
        Ok(None) => {}
        Err(warning) => lattice::log_warning!("{warning}"),
    }
    for note in &config.notes {
        lattice::log_warning!("{note}");
    }
    for name in config.noops_in_use() {
        warn_noop(name);
    }
    // The banner once the listeners are bound, as Redis prints it (after
    // initServer): tools read its " PID: " line as "this port is mine".
    let banner = |config: &Config| {
        if config.get_bool("always-show-logo") {
            print_logo(config);
        }
    };
    match server::run(config, banner) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // Empty: the reason was logged already (Redis's last line, which
            // tools read).
            if !e.is_empty() {
                lattice::log_warning!("{e}");
            }
            std::process::exit(1);
        }
    }
}

/// The log: `logfile` (or stdout), `loglevel`, and syslog too with
/// `syslog-enabled yes`. Exits 1 when the file cannot be opened.
fn open_log(config: &Config) {
    if let Err(e) = lattice::log::set_file(&config.get_str("logfile")) {
        eprintln!("Can't open the log file: {e}");
        std::process::exit(1);
    }
    if let Some(l) = lattice::log::Level::parse(&config.get_str("loglevel")) {
        lattice::log::set_level(l);
    }
    if config.get_bool("syslog-enabled") {
        let (ident, facility) = (
            config.get_str("syslog-ident"),
            config.get_str("syslog-facility"),
        );
        if let Err(e) =
            lattice::log::open_syslog(&ident, &facility, &config.get_str("syslog-socket"))
        {
            eprintln!("Can't open a socket for syslog: {e}");
            std::process::exit(1);
        }
    }
}

/// `daemonize yes`: detach into the background as redis-server does (stdio to
/// /dev/null, default pidfile /var/run/redis.pid). Runs before any thread.
fn daemonize(config: &mut Config) {
    // SAFETY: called from main before any other thread exists, so fork() in
    // daemon() duplicates a single-threaded process; the arguments are plain
    // flags (keep the working directory, redirect stdio to /dev/null).
    let rc = unsafe { libc::daemon(1, 0) };
    if rc != 0 {
        eprintln!("Can't daemonize: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    if config.get_str("pidfile").is_empty() {
        let _ = config.set("pidfile", &["/var/run/redis.pid".to_string()]);
    }
}

/// The start-up banner (`always-show-logo yes`). Like Redis's, it names the
/// port and the PID: tools that start the server (Redis's own test suite)
/// wait for " PID: <pid>" in its output.
fn print_logo(config: &Config) {
    println!(
        "\n    LatticeDB {} (Redis {} compatible) 64 bit\n    Running in standalone mode\n    Port: {}\n    PID: {}\n",
        lattice::LATTICE_VERSION,
        lattice::REDIS_VERSION,
        config.port(),
        std::process::id()
    );
}

/// disable-thp (Redis's default "yes"): no transparent huge pages for this
/// process. The allocator asks for them on its arenas, and a huge-page fault
/// makes 2 MiB resident at once, so RSS grew in 2 MiB steps past the data.
#[cfg(target_os = "linux")]
fn disable_thp() {
    // SAFETY: PR_SET_THP_DISABLE only sets a flag on this process's mm; no
    // memory is passed to the kernel. A failure leaves THP as it was.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

#[cfg(not(target_os = "linux"))]
fn disable_thp() {}
