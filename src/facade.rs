//! The library's one public face: exactly what the binary (`src/main.rs`),
//! the tests (`tests/`, the simulator and `tests/common` included), the
//! benchmark (`benches/`) and the fuzz targets (`fuzz/`) use.
//!
//! Every other module is private to the crate (`src/lib.rs`), so rustc's
//! dead-code lint sees an item lose its last user and CI (clippy with
//! `-D warnings`) fails on it. The paths here mirror the crate's own
//! (`facade::keyspace::hlc::Hlc` is `crate::keyspace::hlc::Hlc`), so a use
//! line still says where an item lives. Only `log` stays public besides this
//! module: the logging macros expand to `$crate::log::log`.
//!
//! To let a test use something new: prefer what a user sees (a real server
//! and a client, `tests/common`); failing that, add the item to the module
//! here that mirrors its home, naming it alone (no glob, no whole module).
//! Whatever this module names counts as used, with everything public on it.

/// Counting allocator: the binary installs it, tests read its figure.
pub mod alloc {
    pub use crate::alloc::{allocated_bytes, mark_installed, Counting};
}

/// Running commands in process, without a connection.
pub mod commands {
    pub use crate::commands::{replay, run_local};
    pub mod gone {
        pub use crate::commands::gone::{actively_expired, Gone};
    }
}

/// Configuration: the command line and redis.conf.
pub mod config {
    pub use crate::config::{oom, warn_noop, Config};
    pub mod parse {
        pub use crate::config::parse::{parse_args, Invocation};
    }
}

/// A client's state and a worker's statistics, for `run_local`.
pub mod core {
    pub mod client {
        pub use crate::core::client::ClientState;
    }
    pub mod stats {
        pub use crate::core::stats::WorkerStats;
    }
}

/// The write-effect stream, recorded.
pub mod effects {
    pub use crate::effects::{Effect, Recorder, MERGED_BASE};
}

/// Values, clocks and the merge rules the checkers compare with.
pub mod keyspace {
    pub use crate::keyspace::value::Value;
    pub use crate::keyspace::{set_thread_fixed_hash, Entry, SHARDS};
    pub mod encoding {
        pub use crate::keyspace::encoding::EncodingLimits;
    }
    pub mod expire {
        pub use crate::keyspace::expire::active_expire_cycle;
    }
    pub mod hash {
        pub use crate::keyspace::hash::{HashLimits, HashValue};
    }
    pub mod held {
        pub use crate::keyspace::held::lock_wait;
    }
    pub mod hlc {
        pub use crate::keyspace::hlc::{set_thread_clock, unix_ms, Hlc, NODE_BITS};
    }
    pub mod hll {
        pub use crate::keyspace::hll::{merge_into, pattern, REGISTERS};
    }
    pub mod list {
        pub use crate::keyspace::list::ListValue;
    }
    pub mod merge {
        pub use crate::keyspace::merge::Meta;
        pub mod elements {
            pub use crate::keyspace::merge::elements::{item_of, items, Item};
        }
        pub mod groups {
            pub use crate::keyspace::merge::groups::GROUP_FACTS;
        }
        pub mod lists {
            pub use crate::keyspace::merge::lists::values;
        }
        pub mod stream {
            pub use crate::keyspace::merge::stream::STREAM_FACTS;
        }
    }
    pub mod set {
        pub use crate::keyspace::set::SetValue;
    }
    pub mod stream {
        pub use crate::keyspace::stream::StreamId;
    }
    pub mod stream_pel {
        pub use crate::keyspace::stream_pel::Pel;
    }
    pub mod zset {
        pub use crate::keyspace::zset::{ZLimits, ZSetValue};
    }
}

/// RDB bytes both ways, snapshots and loading.
pub mod persistence {
    pub mod load {
        pub use crate::persistence::load::{load_reader, OnDuplicate};
    }
    pub mod rdb {
        pub use crate::persistence::rdb::CRC64;
        pub mod decode {
            pub use crate::persistence::rdb::decode::{decode_dump_payload, load, LoadOpts};
        }
        pub mod encode {
            pub use crate::persistence::rdb::encode::{
                dump_payload, encode_entries, write_header, write_select_db, FileWriter, SaveOpts,
            };
        }
    }
    pub mod snapshot {
        pub use crate::persistence::snapshot::{start, SnapFormat, SnapshotJob};
    }
}

/// RESP parsing (the fuzz target) and owned arguments.
pub mod protocol {
    pub use crate::protocol::{OwnedArgs, ParseLimits, Parsed, RequestParser};
}

/// Active-active's sans-IO link and feed, driven by the simulator.
pub mod replication {
    pub mod backlog {
        pub use crate::replication::backlog::append_lock_wait;
    }
    pub mod active {
        pub use crate::replication::active::{cron, start_stream, stream_lock_wait, HostRef};
        pub mod link {
            pub use crate::replication::active::link::{closed, hello, new_link, Link, LinkState};
        }
        pub mod serve {
            pub use crate::replication::active::serve::{
                on_peer_command, peer_request, Feed, Step,
            };
        }
        pub mod sim_hooks {
            pub use crate::replication::active::sim_hooks::{set_stamp_order, StampOrder};
        }
    }
}

/// The server: run as the binary does, or built in process.
pub mod server {
    pub use crate::server::{run, Server};
    pub mod hooks {
        pub use crate::server::hooks::rdb_aux_loaded;
    }
    pub mod identity {
        pub use crate::server::identity::Identity;
    }
    pub mod supervise {
        pub use crate::server::supervise::{detect, start};
    }

    /// A connection's command path without its socket, for the in-process
    /// benchmark (benches/inproc.rs): each command goes through the
    /// dispatch a connection's loop calls (`conn::dispatch`: lookup, ACL,
    /// admission, `call` with a client's bookkeeping, tracking) from
    /// parsed arguments to the reply bytes, on a worker's own clock and
    /// counters; a batch ends with the hooks a connection runs before it
    /// writes its replies (`hooks::after_batch`, `before_reply`). Not
    /// registered among the clients (CLIENT LIST), and no pause wait.
    /// Defined here, not re-exported, so that `dispatch`, `Worker` and
    /// `ReplyBuf` stay `pub(crate)` (DECISIONS 319).
    pub mod conn {
        use std::ops::Range;
        use std::sync::Arc;

        use quanta::Instant;

        use crate::core::client::ClientState;
        use crate::protocol::{Args, ReplyBuf};
        use crate::server::conn::{dispatch, Worker};
        use crate::server::Server;

        pub struct Session {
            srv: Arc<Server>,
            worker: Worker,
            client: ClientState,
            out: ReplyBuf,
            /// The arguments laid out as the parser leaves them: one
            /// buffer and the spans in it (reused, no allocation a command).
            buf: Vec<u8>,
            spans: Vec<Range<usize>>,
            /// When the next command starts (each command's end).
            t: Instant,
        }

        impl Session {
            /// A connection of client `id` with the default user, on a
            /// worker of its own (its stats are summed into INFO's).
            pub fn new(srv: &Arc<Server>, id: u64) -> Session {
                let mut client = ClientState::new(id);
                client.authenticated = !srv.acl.auth_required();
                crate::commands::connection::set_user(srv, &mut client, srv.acl.default_user());
                Session {
                    srv: srv.clone(),
                    worker: Worker::new(srv.clone(), srv.new_worker_stats()),
                    client,
                    out: ReplyBuf::default(),
                    buf: Vec::with_capacity(256),
                    spans: Vec::with_capacity(8),
                    t: Instant::now(),
                }
            }

            /// Runs one command; its reply is appended to the batch's.
            pub fn run(&mut self, argv: &[&[u8]]) {
                self.buf.clear();
                self.spans.clear();
                for a in argv {
                    let at = self.buf.len();
                    self.buf.extend_from_slice(a);
                    self.spans.push(at..self.buf.len());
                }
                let args = Args::new(&self.buf, &self.spans);
                let (srv, worker) = (&self.srv, &self.worker);
                self.t = dispatch(srv, worker, &mut self.client, &mut self.out, args, self.t);
            }

            /// Ends a batch as a connection does before writing: the
            /// subsystems' follow-up (replica feeders woken, AOF), then
            /// the replies, returned and cleared.
            pub fn end_batch(&mut self) -> usize {
                let _ = crate::server::hooks::after_batch(&self.srv);
                crate::server::hooks::before_reply(&self.srv);
                let n = self.out.buf.len();
                self.out.buf.clear();
                self.t = Instant::now();
                n
            }
        }
    }
}
