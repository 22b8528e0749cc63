//! The replica side: REPLICAOF, the link to our master, acknowledgements.
//!
//! The link is one plain thread with a blocking socket (`link_thread`):
//! connect, Redis's handshake (PING, AUTH, REPLCONF listening-port / capa
//! eof psync2, PSYNC with the cached replication id and offset), then a full
//! sync or a partial one (+CONTINUE), then the command stream. A full sync
//! goes through a temp file (loaded as at start-up, renamed to
//! `dbfilename`), or with `repl-diskless-load` straight from the socket
//! (`SocketPayload`): `on-empty-db` into the empty databases, `swapdb` into
//! a staging dataset swapped in on success (DECISIONS 30). Each
//! command runs through `commands::run_master` as the master client (exempt
//! from read-only, no replies), and its exact bytes are appended to the
//! backlog, which makes our offset the master's and is what our own
//! replicas read. A thread, not a task: the link's work is sequential and
//! mostly waiting, and loading a big RDB must not hold a worker.
//!
//! Every stage of a sync (`stage.rs`: connecting, each handshake reply,
//! the PSYNC reply, the payload's header, the payload, loading it) ends
//! within `repl-timeout` of its last progress; INFO replication shows the
//! stage and how long the link has been in it. Any failure (connect,
//! handshake, a truncated or corrupt payload, a timeout, garbage from the
//! peer) ends the link: the thread logs why, waits a second and starts
//! over with a PSYNC for what it has. A failed load empties the databases
//! (swapdb: drops the staging data, the old dataset stays), so a
//! half-loaded dataset is never served as complete. REPLICAOF bumps
//! `generation`, which every loop of the old link checks. DEBUG SLEEP
//! holds the link too, as Redis's single thread would be held.
//!
//! This module owns the replica's state ([`ReplicaSide`]); the jobs live in
//! the files below it, one each:
//!
//! - `replicaof.rs`: REPLICAOF and the `replicaof` directive, promotion
//!   (REPLICAOF NO ONE, FAILOVER), and what a change of master resets;
//! - `link.rs`: the link thread, its socket (`Peer`) and the handshake;
//! - `psync.rs`: PSYNC, and what its answer starts (a continued history,
//!   or a full sync and the dataset it replaces);
//! - `load.rs`: a full sync's payload, through a temp file or handed to
//!   `socket_load.rs`, which decodes it straight from the socket;
//! - `stream.rs`: the command stream once synced, applied as the master
//!   client, relayed to our backlog and acknowledged;
//! - `info.rs`: INFO replication's replica fields.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::time::Duration;

use parking_lot::Mutex;

use crate::commands::{CmdResult, Ctx};
use crate::keyspace::hlc::unix_ms;
use crate::replication::stage::StageClock;

mod info;
mod link;
mod load;
mod master_client;
mod psync;
mod replicaof;
mod socket_load;
mod stream;

pub(crate) use replicaof::{follow_for_failover, getack, promote, replicaof, start_from_config};

#[derive(Default)]
pub struct ReplicaSide {
    /// (host, port) of our master.
    master: Mutex<Option<(String, u16)>>,
    /// Where the link is (INFO's master_sync_stage, ROLE's state).
    stage: StageClock,
    generation: AtomicU64,
    up: AtomicBool,
    last_io_ms: AtomicU64,
    down_since_ms: AtomicU64,
    /// The link's socket, so REPLICAOF can close it at once.
    socket: Mutex<Option<TcpStream>>,
    /// Full sync progress (bytes).
    sync_total: AtomicU64,
    sync_read: AtomicU64,
    /// Database the master client has selected (kept across links).
    master_db: AtomicUsize,
    /// The master client's id and age in CLIENT LIST (`master_client.rs`).
    master_client: master_client::Identity,
    /// The next PSYNC is a FAILOVER hand-over (see `failover.rs`).
    failover_psync: AtomicBool,
    /// The target answered that PSYNC with an error (an ACL without
    /// +psync, say): FAILOVER aborts at once, as Redis's.
    pub(crate) failover_refused: AtomicBool,
    /// Unix ms until which a DEBUG SLEEP holds the link (see `debug_sleep`).
    paused_until_ms: AtomicU64,
    /// Held while a command from the master is applied and its bytes
    /// counted, and by a snapshot's cut: the offset saved in an RDB
    /// (repl-offset) matches its data. Taken only through
    /// [`Self::hold_apply`] (persistence's snapshot cut reaches it through
    /// its host).
    apply_lock: Mutex<()>,
}

impl ReplicaSide {
    /// The link to our master is up (our own replicas may sync then).
    pub fn link_up(&self) -> bool {
        self.up.load(Acquire)
    }

    /// Holds the apply lock (see `apply_lock`): what the replica applied,
    /// its offset and its stream's database are of one instant meanwhile.
    #[inline]
    pub fn hold_apply(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.apply_lock.lock()
    }

    /// ROLE on a replica: ["slave", host, port, state, offset].
    /// `offset`: master_repl_offset.
    pub fn role_reply(&self, ctx: &mut Ctx, offset: u64) -> CmdResult {
        let (host, port) = self.master.lock().clone().unwrap_or_default();
        ctx.out.array(5);
        ctx.out.bulk(b"slave");
        ctx.out.bulk(host.as_bytes());
        ctx.out.int(port as i64);
        ctx.out.bulk(self.stage.get().role_state().as_bytes());
        ctx.out.int(offset as i64);
        Ok(())
    }

    /// Ends the current link (its thread sees the new generation).
    /// CLIENT KILL aimed at our master's link (Redis lists the master as a
    /// client): closes the socket when `hit(peer addr, local addr)` says
    /// so; the link thread reconnects and asks for a partial resync.
    pub fn kill_link_if(&self, hit: impl Fn(&str, &str) -> bool) -> bool {
        let guard = self.socket.lock();
        let Some(s) = guard.as_ref() else {
            return false;
        };
        let (Ok(peer), Ok(local)) = (s.peer_addr(), s.local_addr()) else {
            return false;
        };
        if !hit(&peer.to_string(), &local.to_string()) {
            return false;
        }
        let _ = s.shutdown(Shutdown::Both);
        true
    }

    /// DEBUG SLEEP: Redis sleeps in its one thread, link included (no
    /// reads from the master, no ACKs, no reconnection); ours stops the
    /// link thread for as long, at its next read or connection attempt.
    pub fn debug_sleep(&self, d: Duration) {
        let until = unix_ms().saturating_add(d.as_millis() as u64);
        self.paused_until_ms.fetch_max(until, Relaxed);
    }

    /// Whether a DEBUG SLEEP is running now (on a master too: its
    /// keepalives to waiting replicas stop meanwhile, as Redis's do).
    pub fn debug_sleeping(&self) -> bool {
        self.paused_until_ms.load(Relaxed) > unix_ms()
    }

    /// Waits out a DEBUG SLEEP (while this link is current).
    fn wait_out_pause(&self, gen: u64) {
        loop {
            let until = self.paused_until_ms.load(Relaxed);
            if until == 0 {
                return;
            }
            let left = until.saturating_sub(unix_ms());
            if left == 0 {
                let _ = self
                    .paused_until_ms
                    .compare_exchange(until, 0, Relaxed, Relaxed);
                return;
            }
            if self.generation.load(Acquire) != gen {
                return;
            }
            std::thread::sleep(Duration::from_millis(left.min(100)));
        }
    }

    fn stop_link(&self) {
        self.generation.fetch_add(1, AcqRel);
        if let Some(s) = self.socket.lock().take() {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.up.store(false, Release);
    }
}

impl ReplicaSide {
    /// The database the master's stream has selected (repl-stream-db).
    pub fn stream_db(&self) -> usize {
        self.master_db.load(Relaxed)
    }

    pub fn set_stream_db(&self, db: usize) {
        self.master_db.store(db, Relaxed);
    }
}
