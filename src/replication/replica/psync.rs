//! PSYNC for what we hold, and what the answer starts: +CONTINUE (a new
//! replication id becomes our replid2) or +FULLRESYNC, whose payload
//! (`load.rs`) replaces the dataset with the new history in one step.

use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use super::link::Peer;
use super::load::receive_payload;
use super::replicaof::disconnect_replicas;
use crate::replication::host::Host;
use crate::replication::stage::Stage;
use crate::{log_notice, log_warning};

/// PSYNC for what we hold: the stream continues, or a full sync first.
pub(super) fn psync<H: Host>(srv: &Arc<H>, gen: u64, peer: &mut Peer) -> Result<(), String> {
    let (replid, offset) = cached_master(&**srv);
    // Redis's replica says which PSYNC it tries.
    let off_arg = if replid == "?" {
        log_notice!("Partial resynchronization not possible (no cached master)");
        "-1".to_string()
    } else {
        log_notice!(
            "Trying a partial resynchronization (request {replid}:{}).",
            offset + 1
        );
        (offset + 1).to_string()
    };
    peer.begin(Stage::ReceivePsyncReply);
    let failover = srv.repl().replica.failover_psync.swap(false, AcqRel);
    if failover {
        peer.send(&[b"PSYNC", replid.as_bytes(), off_arg.as_bytes(), b"FAILOVER"])?;
    } else {
        peer.send(&[b"PSYNC", replid.as_bytes(), off_arg.as_bytes()])?;
    }
    let reply = peer.line()?;
    if failover && reply.starts_with('-') {
        srv.repl().replica.failover_refused.store(true, Release);
    }
    if let Some(rest) = reply.strip_prefix("+FULLRESYNC ") {
        let mut w = rest.split_whitespace();
        let id = w.next().unwrap_or_default().to_string();
        let off: u64 = w
            .next()
            .and_then(|o| o.parse().ok())
            .ok_or("bad FULLRESYNC reply")?;
        log_notice!("Full resync from master: {id}:{off}");
        full_sync(srv, gen, peer, &id, off)
    } else if let Some(rest) = reply.strip_prefix("+CONTINUE") {
        continue_from(&**srv, rest.trim(), &replid);
        log_notice!("MASTER <-> REPLICA sync: Master accepted a Partial Resynchronization.");
        Ok(())
    } else {
        Err(format!("unexpected reply to PSYNC from master: {reply}"))
    }
}
/// (replid, offset) for PSYNC: our own history ("?" when we have none
/// worth continuing, e.g. before our first sync).
fn cached_master<H: Host>(srv: &H) -> (String, u64) {
    let repl = srv.repl();
    if !repl.has_history.load(Acquire) {
        return ("?".into(), 0);
    }
    (repl.ids.lock().replid.clone(), repl.backlog.end())
}

/// +CONTINUE [<new replid>]: a new id means our master changed history
/// (a failover); ours becomes replid2, valid up to our offset.
fn continue_from<H: Host>(srv: &H, new_id: &str, old_id: &str) {
    let repl = srv.repl();
    log_notice!("Successful partial resynchronization with master.");
    if !new_id.is_empty() && new_id != old_id {
        let mut ids = repl.ids.lock();
        ids.replid2 = old_id.to_string();
        ids.second_offset = repl.backlog.end() as i64 + 1;
        ids.replid = new_id.to_string();
        drop(ids);
        log_notice!("Master replication ID changed to {new_id}");
        // As Redis: our own replicas reconnect to learn the new id (they
        // continue partially, the old one being our replid2 now).
        disconnect_replicas(srv);
    }
    repl.activate_backlog(srv);
    repl.has_history.store(true, Release);
}
/// Loads the payload (into a temp file first, or straight from the
/// socket, per `repl-diskless-load`); on any failure no half-loaded
/// dataset is left (see `persistence::load`) and the error is returned.
fn full_sync<H: Host>(
    srv: &Arc<H>,
    gen: u64,
    peer: &mut Peer,
    replid: &str,
    offset: u64,
) -> Result<(), String> {
    let loaded = receive_payload(srv, gen, peer, replid)?;
    let repl = srv.repl();
    let side = &repl.replica;
    // A snapshot's cut sees the new data with the new history, or neither.
    let cut = side.hold_apply();
    if let Some(job) = loaded {
        srv.commit_socket_load(job);
    }
    repl.backlog.reset_to(offset);
    *repl.ids.lock() = crate::replication::ReplIds {
        replid: replid.to_string(),
        replid2: crate::replication::NO_REPLID.into(),
        second_offset: -1,
    };
    side.master_db.store(0, Relaxed);
    side.master_client.forget();
    repl.activate_backlog(&**srv);
    repl.has_history.store(true, Release);
    drop(cut);
    dataset_replaced(&**srv);
    restart_aof(srv);
    // Our own replicas follow a history that just ended: they resync.
    disconnect_replicas(&**srv);
    log_notice!("MASTER <-> REPLICA sync: Finished with success");
    Ok(())
}
/// A full sync replaced the dataset: as Redis (signalFlushedDb, or
/// swapMainDbWithTempDb), WATCHed keys are touched, tracking clients get a
/// flush invalidation and clients blocked on keys look again.
fn dataset_replaced<H: Host>(srv: &H) {
    srv.watch.touch_db(None);
    crate::commands::tracking::invalidate_all(srv, u64::MAX);
    for db in 0..srv.keyspace.num_dbs() {
        srv.blocking.signal_db(db);
    }
}

/// With the AOF on, its files still hold the old dataset: a rewrite (or
/// one scheduled after the running one) bases it on the new one, as
/// Redis's restartAOFAfterSYNC.
fn restart_aof<H: Host>(srv: &Arc<H>) {
    if !srv.config.read().get_bool("appendonly") {
        return;
    }
    if let Err(e) = srv.rebase_aof() {
        log_warning!("Can't rewrite the AOF after the sync with the master: {e}");
    }
}
