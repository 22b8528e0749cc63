//! Becoming a replica or a master again: REPLICAOF (and the `replicaof`
//! directive at start-up) starts a link thread for the new master; NO ONE
//! and FAILOVER's hand-over promote us with a new replication id. Either
//! way our own replicas are disconnected, to learn the new history.

use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use super::link::link_thread;
use super::master_client;
use crate::commands::{CmdResult, Ctx};
use crate::protocol::Args;
use crate::replication::commands::{replicaof_args, ReplicaOf};
use crate::replication::host::{self, Host};
use crate::replication::stage::Stage;
use crate::{log_notice, log_warning};

/// REPLCONF GETACK from a client other than our master link: nothing to do
/// (the link answers its master's GETACK itself).
pub(crate) fn getack(_ctx: &mut Ctx) -> CmdResult {
    Ok(())
}

/// REPLICAOF host port | NO ONE (and SLAVEOF).
pub(crate) fn replicaof<H: Host>(ctx: &mut Ctx, args: Args) -> CmdResult {
    let srv = host::of::<H>(ctx);
    if ctx.core.active {
        let host = srv.peer_host();
        return crate::replication::active::link::replicaof(ctx, args, &host);
    }
    let (host, port) = match replicaof_args(&args)? {
        ReplicaOf::NoOne => {
            promote(&**srv);
            ctx.out.ok();
            return Ok(());
        }
        ReplicaOf::Master(host, port) => (host, port),
    };
    let repl = srv.repl();
    if repl.is_replica() && *repl.replica.master.lock() == Some((host.clone(), port)) {
        log_notice!("REPLICAOF would result into synchronization with the master we are already connected with. No operation performed.");
        ctx.out.simple("OK Already connected to specified master");
        return Ok(());
    }
    follow(srv, host.clone(), port);
    log_notice!(
        "REPLICAOF {host}:{port} enabled (user request from 'id={}')",
        ctx.client.id
    );
    ctx.out.ok();
    Ok(())
}

/// The `replicaof` directive at start-up ("host port").
pub(crate) fn start_from_config<H: Host>(srv: &Arc<H>) {
    let v = srv.config.read().get_str("replicaof");
    // Several lines: the last one wins, as in Redis.
    if let Some((h, p)) = crate::config::directives::replicaof_pairs(&v).pop() {
        follow(srv, h, p);
    }
}

/// Becomes a replica of host:port: the current history is the cached
/// master (so a demoted master can continue partially from its new master,
/// PSYNC2), then the link thread starts.
fn follow<H: Host>(srv: &Arc<H>, host: String, port: u16) {
    let side = &srv.repl().replica;
    side.stop_link();
    master_client::unlist(&srv.clients, &side.master_client, false);
    *side.master.lock() = Some((host.clone(), port));
    remember_master(&**srv, vec![host.clone(), port.to_string()]);
    side.stage.set(Stage::Connect);
    side.down_since_ms.store(0, Relaxed);
    srv.repl().is_replica.store(true, Release);
    crate::log::set_role(b'S');
    // Clients blocked on keys would wait for writes that now come from the
    // master only: Redis unblocks them with an error; we let them time out.
    let gen = side.generation.load(Acquire);
    let srv2 = srv.clone();
    let spawned = std::thread::Builder::new()
        .name("lattice-repl-link".into())
        .spawn(move || link_thread(srv2, gen, host, port));
    if let Err(e) = spawned {
        log_warning!("Can't start the replication link thread: {e}");
    }
}

/// Keeps the `replicaof` directive equal to the master we follow, as
/// Redis's `server.masterhost` is: CONFIG GET replicaof reads it and CONFIG
/// REWRITE writes it, so a replica restarted from a rewritten file comes
/// back as a replica and continues from its RDB's replication id.
fn remember_master<H: Host>(srv: &H, args: Vec<String>) {
    if let Err(e) = srv.config.write().set("replicaof", &args) {
        log_warning!("Can't record the master in the config: {e}");
    }
}

/// FAILOVER's step 2: become the replica of `host:port`, whose PSYNC
/// carries FAILOVER so that the target promotes itself first.
pub(crate) fn follow_for_failover<H: Host>(srv: &Arc<H>, host: String, port: u16) {
    srv.repl().replica.failover_refused.store(false, Release);
    srv.repl().replica.failover_psync.store(true, Release);
    follow(srv, host, port);
}

/// REPLICAOF NO ONE: a master again, with a new replication id; the old
/// one stays as replid2 so our replicas can continue partially.
pub(crate) fn promote<H: Host>(srv: &H) {
    let repl = srv.repl();
    if !repl.is_replica() {
        return;
    }
    repl.replica.stop_link();
    master_client::unlist(&srv.clients, &repl.replica.master_client, true);
    *repl.replica.master.lock() = None;
    remember_master(srv, vec!["no".into(), "one".into()]);
    repl.shift_replid();
    repl.is_replica.store(false, Release);
    // As Redis's replicationUnsetMaster: our replicas reconnect to learn
    // the new id, and continue partially from our replid2.
    disconnect_replicas(srv);
    crate::log::set_role(b'M');
    log_notice!("MASTER MODE enabled (user request)");
}

/// Closes our replicas' links (Redis's disconnectSlaves): each reconnects
/// and PSYNCs, which tells it our current replication id.
pub(super) fn disconnect_replicas<H: Host>(srv: &H) {
    for r in srv.repl().master.replicas.lock().iter() {
        if let Some(c) = srv.clients.get(r.client_id) {
            c.kill_now();
        }
    }
}
