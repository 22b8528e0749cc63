//! Replication commands (Redis's replication.c family): the table entries
//! of the handlers in this module's siblings. The server adds them to the
//! command table (`server::command_families`), instantiated for its own
//! type: a handler finds the host behind its `Ctx` by that type
//! (`host::of`).

use super::host::Host;
use super::{master, replica};
use crate::commands::{flags::*, CmdError, Command};
use crate::protocol::Args;

/// The replication commands of a node whose host is `H`.
pub(crate) struct Commands<H>(std::marker::PhantomData<H>);

impl<H: Host> Commands<H> {
    pub(crate) const TABLE: &'static [Command] = crate::commands::command_table! {
    family(group = "server", acl = ""),
    cmd("psync", -3, ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI, master::psync::<H>)
        .doc("2.8.0", "An internal command used in replication.")
        .complexity("O(N)"),
    cmd("sync", 1, ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI, master::sync::<H>)
        .doc("1.0.0", "An internal command used in replication.")
        .complexity("O(N)"),
    cmd("replconf", -1, ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY, master::replconf)
        .doc("3.0.0", "An internal command for configuring the replication stream."),
    cmd("replicaof", 3, ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING, replica::replicaof::<H>)
        .doc("5.0.0", "Configures a server as replica of another, or promotes it to a master."),
    cmd("slaveof", 3, ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING, replica::replicaof::<H>)
        .doc("1.0.0", "Sets a Redis server as a replica of another, or promotes it to being a master."),
    cmd("role", 1, NOSCRIPT | LOADING | STALE | FAST, crate::replication::role::<H>, acl = "admin dangerous")
        .doc("2.8.12", "Returns the replication role."),
    cmd("wait", 3, NOSCRIPT, master::wait::<H>, acl = "connection")
        .group("generic")
        .doc("3.0.0", "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed.")
        .tips(&["request_policy:all_shards", "response_policy:agg_min"]),
    cmd("waitaof", 4, NOSCRIPT, master::waitaof::<H>, acl = "connection")
        .group("generic")
        .doc("7.2.0", "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas.")
        .tips(&["request_policy:all_shards", "response_policy:agg_min"]),
    cmd("lattice.peer", -5, ADMIN | NOSCRIPT | NO_MULTI | STALE, master::lattice_peer::<H>)
        .doc("8.0.0", "An internal command used in active replication: a peer asks for this node's stream."),
    cmd("failover", -1, ADMIN | NOSCRIPT | STALE, crate::replication::failover::failover::<H>)
        .doc("6.2.0", "Starts a coordinated failover from a server to one of its replicas."),
    };
}

/// What REPLICAOF (and SLAVEOF) asks for, on a plain node (`replica/`) as
/// on an active one (`active/link/`).
pub(crate) enum ReplicaOf {
    /// `NO ONE`.
    NoOne,
    /// `host port`: a master (or a peer) to follow.
    Master(String, u16),
}

/// REPLICAOF's arguments, checked as Redis checks them.
pub(crate) fn replicaof_args(args: &Args) -> Result<ReplicaOf, CmdError> {
    let (host, port) = (args.get(1), args.get(2));
    if host.eq_ignore_ascii_case(b"no") && port.eq_ignore_ascii_case(b"one") {
        return Ok(ReplicaOf::NoOne);
    }
    let port = crate::commands::util::arg_i64(port)?;
    if !(0..=65535).contains(&port) {
        return Err(CmdError::Msg("ERR Invalid master port".into()));
    }
    let host = String::from_utf8_lossy(host).into_owned();
    Ok(ReplicaOf::Master(host, port as u16))
}
