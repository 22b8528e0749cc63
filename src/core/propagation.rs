//! `propagation-error-behavior`: what a command that fails while applied
//! from the replication stream or the AOF does, as Redis 7.0's
//! `afterErrorReply` (networking.c): it is logged as `== CRITICAL ==`, and
//! with `panic` (or `panic-on-replicas` for a read-only replica's stream)
//! the process stops, so a divergence cannot go on silently. Redis's own
//! test suite runs with `panic`.

use super::Core;

/// Where the failed command came from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Source {
    /// This replica's master.
    Master,
    /// The AOF being loaded.
    Aof,
}

/// Logs a command from `source` that answered `err`, and stops the process
/// when `propagation-error-behavior` says so.
pub(crate) fn failed(core: &Core, source: Source, err: &str, command: &str) {
    let (from, to) = match source {
        Source::Master => ("replica", "master"),
        Source::Aof => ("server", "AOF-loading-client"),
    };
    let err: String = err.chars().take(4096).collect();
    crate::log_warning!(
        "== CRITICAL == This {from} is sending an error to its {to}: '{err}' after processing the command '{command}'"
    );
    // An error path, once before a possible abort: read in place.
    let (behavior, read_only) = {
        let c = core.config.read();
        (
            c.get_str("propagation-error-behavior"),
            c.get_bool("replica-read-only"),
        )
    };
    if panics(&behavior, source, read_only) {
        crate::log_warning!(
            "Guru Meditation: This {from} panicked sending an error to its {to} after processing the command '{command}'"
        );
        std::process::abort();
    }
}

/// Redis's rule: a read-only replica panics under `panic` and
/// `panic-on-replicas`; AOF loading only under `panic`.
fn panics(behavior: &str, source: Source, replica_read_only: bool) -> bool {
    match source {
        Source::Master => replica_read_only && matches!(behavior, "panic" | "panic-on-replicas"),
        Source::Aof => behavior == "panic",
    }
}

#[cfg(test)]
mod tests {
    use super::{panics, Source};

    #[test]
    fn who_panics() {
        assert!(!panics("ignore", Source::Master, true));
        assert!(panics("panic", Source::Master, true));
        assert!(panics("panic-on-replicas", Source::Master, true));
        assert!(!panics("panic", Source::Master, false));
        assert!(panics("panic", Source::Aof, true));
        assert!(!panics("panic-on-replicas", Source::Aof, true));
    }
}
