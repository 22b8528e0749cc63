//! The master side: replicas attach with PSYNC (or SYNC), get a partial
//! resync from the backlog or a full one (a fork-free snapshot sent as
//! `$<len>` from a file, or diskless as `$EOF:<mark>` straight from the
//! serializer), then follow the backlog from their offset.
//!
//! This module owns the master's state: the attached replicas
//! ([`ReplicaHandle`]), the sync counters and what WAIT counts. The jobs
//! live in the files below it, one each:
//!
//! - `commands.rs`: PSYNC, SYNC, REPLCONF and LATTICE.PEER, which turn a
//!   client into a replica (or an active peer);
//! - `wait.rs`: WAIT and WAITAOF, and the GETACKs they put in the stream;
//! - `feed.rs`: a replica's connection once it asked (`serve_replica`): the
//!   partial resync, then the stream and its ACKs;
//! - `link.rs`: what a replica sends on its link, served in every phase
//!   (ACKs; other commands run, and one that is answered drops the link);
//! - `fullsync.rs`: a full sync: its snapshot, +FULLRESYNC and the
//!   payload's transfer;
//! - `disk.rs`: disk-based full syncs, shared by the replicas that ask
//!   while one is taken, stopped when none waits for it;
//! - `diskless.rs`: diskless full syncs shared by the replicas that ask
//!   within `repl-diskless-sync-delay`;
//! - `pin.rs`: what the backlog keeps for attached and departed replicas;
//! - `throttle.rs`: back-pressure on writers (`repl-lag-policy throttle`);
//! - `info.rs`: INFO replication's master fields.
//!
//! Nothing is queued per replica: a feeder copies the backlog's bytes past
//! its replica's position into the socket, so a slow replica is never
//! disconnected for its output buffer; the backlog keeps what it still
//! needs (`pin.rs`, `backlog.rs`) and writers are slowed when it lags too
//! far (`throttle.rs`).

use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::core::client::{ReplConf, ReplWait, SyncRequest, WaitAof, WaitRequest};
use crate::keyspace::hlc::unix_ms;

mod commands;
mod disk;
mod diskless;
mod feed;
mod fullsync;
mod info;
mod link;
mod pin;
mod throttle;
mod wait;

pub(crate) use commands::{lattice_peer, psync, replconf, sync};
pub(crate) use feed::serve_replica;
pub(crate) use link::{admit_on_link, Runner};
pub(crate) use throttle::{throttle, WROTE};
pub(crate) use wait::{answer_wait, request_acks, wait, waitaof};

use diskless::{SyncGroup, SyncReaders};
use pin::Departed;

/// One attached replica, as INFO's slaveN line shows it.
pub struct ReplicaHandle {
    pub client_id: u64,
    pub ip: String,
    /// REPLCONF listening-port (0 until told).
    pub port: AtomicU64,
    /// Offset the replica last acknowledged (REPLCONF ACK).
    pub ack_offset: AtomicU64,
    /// Offset the replica's AOF is fsynced to (REPLCONF ACK ... FACK).
    pub fack_offset: AtomicU64,
    /// Unix ms of the last ACK.
    pub ack_ms: AtomicU64,
    /// Next offset the feeder sends: the backlog keeps it.
    pub sent: AtomicU64,
    /// wait_bgsave, send_bulk or online.
    pub state: Mutex<&'static str>,
}

#[derive(Default)]
pub struct MasterSide {
    pub replicas: Mutex<Vec<Arc<ReplicaHandle>>>,
    pub sync_full: AtomicU64,
    pub sync_partial_ok: AtomicU64,
    pub sync_partial_err: AtomicU64,
    /// Woken when a replica acknowledges (WAIT).
    pub acked_notify: tokio::sync::Notify,
    /// Back-pressure: write batches delayed, and the total delay (µs).
    pub throttled: AtomicU64,
    pub throttle_us: AtomicU64,
    /// Replicas closed for lagging past the hard limit.
    pub lag_disconnects: AtomicU64,
    /// repl-throttle-lag, and whether repl-lag-policy is "throttle".
    throttle_lag: AtomicU64,
    throttle_on: std::sync::atomic::AtomicBool,
    /// Replicas waiting for the next shared diskless snapshot.
    pending_sync: Mutex<Option<SyncGroup>>,
    /// The diskless snapshot running, and who still reads it.
    diskless_sync: Mutex<Option<Arc<SyncReaders>>>,
    /// The disk snapshot running for replicas, and who waits for it.
    disk_sync: Mutex<Option<Arc<disk::DiskSync>>>,
    /// Replicas that left with bytes unacknowledged, under `repl-lag-policy
    /// spill`: their history is kept (on disk) for their partial resync.
    departed: Mutex<Vec<Departed>>,
}

/// Why a snapshot for replicas was stopped before its end.
#[derive(Clone, Copy, Debug)]
pub(super) enum Stop {
    /// FLUSHALL: the dataset it holds is gone (Redis kills its RDB child).
    Flushall,
    /// No replica waits for it any more (and no `save` point wants it).
    Unwanted,
}

impl Stop {
    /// The end of the line that says a snapshot ended this way.
    fn says(why: Option<Stop>) -> &'static str {
        match why {
            Some(Stop::Flushall) => "by FLUSHALL",
            Some(Stop::Unwanted) => "as no replica waits for it",
            None => "before its end (stopped)",
        }
    }
}

/// FLUSHALL: a snapshot running for replicas holds a dataset that is gone,
/// so it stops, as Redis kills its RDB child; its replicas' syncs fail
/// ("SYNC failed") and they sync again, from a new snapshot.
pub(crate) fn stop_for_flushall<H: crate::replication::host::Host>(srv: &H) {
    let master = &srv.repl().master;
    let disk = master.disk_sync.lock().clone();
    if let Some(sync) = disk {
        sync.stop(srv, Stop::Flushall);
    }
    let diskless = master.diskless_sync.lock().clone();
    if let Some(readers) = diskless {
        readers.stop(srv, Stop::Flushall);
    }
}

impl ReplicaHandle {
    /// ip:listening-port, the replica's name across its connections.
    fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port.load(Relaxed))
    }
}

impl MasterSide {
    /// Replicas online whose last ACK is at most `max_lag_ms` old.
    pub fn good_replicas(&self, max_lag_ms: u64) -> usize {
        let now = unix_ms();
        self.replicas
            .lock()
            .iter()
            .filter(|r| {
                *r.state.lock() == "online"
                    && now.saturating_sub(r.ack_ms.load(Relaxed)) <= max_lag_ms
            })
            .count()
    }

    /// Replicas online whose AOF is fsynced up to `offset` (WAITAOF).
    pub fn fsynced(&self, offset: u64) -> usize {
        self.replicas
            .lock()
            .iter()
            .filter(|r| *r.state.lock() == "online" && r.fack_offset.load(Relaxed) >= offset)
            .count()
    }

    /// Replicas online that acknowledged `offset` (WAIT).
    pub fn acked(&self, offset: u64) -> usize {
        self.replicas
            .lock()
            .iter()
            .filter(|r| *r.state.lock() == "online" && r.ack_offset.load(Relaxed) >= offset)
            .count()
    }
}
