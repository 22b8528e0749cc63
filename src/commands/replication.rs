//! Replication commands (Redis's replication.c family): the table entries;
//! the handlers live with the state they drive in `src/replication/`.

use super::{flags::*, Command};
use crate::replication::{master, replica};

pub static COMMANDS: &[Command] = &[
    Command::new("psync", -3, ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI, master::psync)
        .acl("admin slow dangerous")
        .doc_in("server", "2.8.0", "An internal command used in replication.")
        .complexity("O(N)"),
    Command::new("sync", 1, ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI, master::sync)
        .acl("admin slow dangerous")
        .doc_in("server", "1.0.0", "An internal command used in replication.")
        .complexity("O(N)"),
    Command::new("replconf", -1, ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY, master::replconf)
        .acl("admin slow dangerous")
        .doc_in("server", "3.0.0", "An internal command for configuring the replication stream.")
        .complexity("O(1)"),
    Command::new("replicaof", 3, ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING, replica::replicaof)
        .acl("admin slow dangerous")
        .doc_in(
            "server",
            "5.0.0",
            "Configures a server as replica of another, or promotes it to a master.",
        )
        .complexity("O(1)"),
    Command::new("slaveof", 3, ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING, replica::replicaof)
        .acl("admin slow dangerous")
        .doc_in(
            "server",
            "1.0.0",
            "Sets a Redis server as a replica of another, or promotes it to being a master.",
        )
        .complexity("O(1)"),
    Command::new("role", 1, NOSCRIPT | LOADING | STALE | FAST, crate::replication::role)
        .acl("admin fast dangerous")
        .doc_in("server", "2.8.12", "Returns the replication role.")
        .complexity("O(1)"),
    Command::new("wait", 3, NOSCRIPT, master::wait)
        .acl("slow connection")
        .tips(&["request_policy:all_shards", "response_policy:agg_min"])
        .doc_in(
            "generic",
            "3.0.0",
            "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed.",
        )
        .complexity("O(1)"),
    Command::new("waitaof", 4, NOSCRIPT, master::waitaof)
        .acl("slow connection")
        .tips(&["request_policy:all_shards", "response_policy:agg_min"])
        .doc_in(
            "generic",
            "7.2.0",
            "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas.",
        )
        .complexity("O(1)"),
    Command::new("failover", -1, ADMIN | NOSCRIPT | STALE, crate::replication::failover::failover)
        .acl("admin slow dangerous")
        .doc_in("server", "6.2.0", "Starts a coordinated failover from a server to one of its replicas.")
        .complexity("O(1)"),
];
