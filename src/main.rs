//! `lattice-server [/path/to/redis.conf | -] [--directive value ...]`
//!
//! Parses the configuration (exiting 1 with Redis's fatal config error text
//! on a bad one), opens the log file, then runs the server.

use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match lattice::config::parse::parse_args(&args) {
        Ok(lattice::config::parse::Invocation::Run(c)) => *c,
        Ok(lattice::config::parse::Invocation::Print(s)) => {
            println!("{s}");
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = lattice::log::set_file(&config.get_str("logfile")) {
        eprintln!("Can't open the log file: {e}");
        std::process::exit(1);
    }
    if let Some(l) = lattice::log::Level::parse(&config.get_str("loglevel")) {
        lattice::log::set_level(l);
    }
    lattice::log_notice!("oO0OoO0OoO0Oo LatticeDB is starting oO0OoO0OoO0Oo");
    lattice::log_notice!(
        "LatticeDB version={} (Redis {} compatible), bits=64, pid={}, just started",
        lattice::LATTICE_VERSION,
        lattice::REDIS_VERSION,
        std::process::id()
    );
    match &config.file {
        Some(_) => lattice::log_notice!("Configuration loaded"),
        None => lattice::log_warning!(
            "Warning: no config file specified, using the default config. In order to specify a config file use lattice-server /path/to/redis.conf"
        ),
    }
    lattice::log_notice!(
        "Running mode=standalone, port={}, server-threads={}.",
        config.port(),
        config.threads()
    );
    for name in config.accepted_in_use() {
        lattice::config::warn_accepted(name);
    }
    match lattice::server::run(config) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            lattice::log_warning!("{e}");
            std::process::exit(1);
        }
    }
}
