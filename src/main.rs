//! `lattice-server [/path/to/redis.conf] [--directive value ...]`

use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match lattice::config::parse::load_from_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    match lattice::server::run(config) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            lattice::log_warning!("{e}");
            std::process::exit(1);
        }
    }
}
