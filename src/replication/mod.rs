//! Replication, Redis's protocol both ways (PSYNC2): this node as a master
//! feeding replicas (`master/`) and as a replica of a Redis or LatticeDB
//! master (`replica/`), sharing one stream (`backlog.rs`).
//!
//! What is shared, and why it lives here:
//! - The replication ids (`ReplIds`): master_replid, and master_replid2 with
//!   second_repl_offset, the history this node can still serve partial
//!   resyncs of after a failover (Redis's PSYNC2).
//! - The backlog, whose end is master_repl_offset on both roles. A master
//!   appends its own writes (the write-effect stream, encoded as RESP by
//!   [`Feed`]); a replica appends the exact bytes its master sent, so that
//!   sub-replicas (A -> B -> C) get the top master's stream with the same
//!   offsets, and its own effects are not fed (they would duplicate it).
//! - `is_replica`: the one flag the command path reads (read-only
//!   replicas, expiry left to the master), a relaxed load per write.
//!
//! INFO replication and ROLE are rendered here from both sides.

pub(crate) mod active;
pub(crate) mod backlog;
pub(crate) mod commands;
pub(crate) mod conn;
pub(crate) mod failover;
pub(crate) mod host;
pub(crate) mod keydb_view;
pub(crate) mod master;
pub(crate) mod node_link;
pub(crate) mod replica;
pub(crate) mod spill;
pub(crate) mod stage;
pub(crate) mod tls_link;

use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::core::info::Fields;
use crate::effects::{Effect, EffectRef, EffectSink};
use host::Host;

/// The replication ids of this node's history (Redis's replid/replid2).
#[derive(Clone, Debug)]
pub struct ReplIds {
    pub replid: String,
    /// The previous master's id, valid up to `second_offset` (else 40 zeros).
    pub replid2: String,
    /// Last offset of `replid2`'s history plus one (Redis's
    /// second_replid_offset), -1 when none.
    pub second_offset: i64,
}

pub(crate) const NO_REPLID: &str = "0000000000000000000000000000000000000000";

impl ReplIds {
    fn new() -> Self {
        ReplIds {
            replid: crate::core::random::random_hex(40),
            replid2: NO_REPLID.into(),
            second_offset: -1,
        }
    }
}

pub struct Replication {
    pub backlog: Arc<backlog::Backlog>,
    pub ids: Mutex<ReplIds>,
    /// This node follows a master (REPLICAOF host port). Shared with the
    /// [`Feed`], which stops feeding our own effects while it is set.
    pub is_replica: Arc<AtomicBool>,
    /// Our replicas (master side).
    pub master: master::MasterSide,
    /// Our link to our master (replica side).
    pub replica: replica::ReplicaSide,
    /// A FAILOVER in progress, if any.
    pub failover: failover::Failover,
    /// Active replication's stream and peers (`active/`), idle unless
    /// `active-replica` or `multi-master` is on.
    pub active: Arc<active::Active>,
    /// The effect stream feeds the backlog (subscribed on first use).
    fed: AtomicBool,
    /// Our replication id and offset name data we hold (we synced, or had
    /// replicas): a replica then asks its master to continue from them.
    pub has_history: AtomicBool,
}

impl Default for Replication {
    fn default() -> Self {
        Replication {
            backlog: Default::default(),
            ids: Mutex::new(ReplIds::new()),
            is_replica: Arc::new(AtomicBool::new(false)),
            master: Default::default(),
            replica: Default::default(),
            failover: Default::default(),
            active: Arc::new(active::Active::new(crate::core::random::random_hex(40))),
            fed: AtomicBool::new(false),
            has_history: AtomicBool::new(false),
        }
    }
}

impl Replication {
    #[inline]
    pub fn is_replica(&self) -> bool {
        self.is_replica.load(Relaxed)
    }

    /// Starts the backlog (the first replica attached, or a replica that
    /// will relay to its own replicas), and subscribes it to the write
    /// effects once: before that, writes build no records for it.
    pub fn activate_backlog<H: Host>(&self, srv: &H) {
        let size = srv.config.read().get_i64("repl-backlog-size").max(1) as usize;
        self.backlog.activate(size);
        self.backlog.start_spiller(std::path::Path::new("."));
        self.load_limits(srv);
        self.has_history.store(true, Release);
        if !self.fed.swap(true, AcqRel) {
            srv.effects.subscribe(Arc::new(Feed {
                backlog: self.backlog.clone(),
                is_replica: self.is_replica.clone(),
            }));
        }
    }

    /// Reads the back-pressure settings and the backlog's hard cap from the
    /// configuration: when a replica attaches (before its first byte, so a
    /// burst of writes right after a sync is already held back), and in
    /// the CONFIG SET that changes one ([`config_changed`]).
    pub fn load_limits<H: Host>(&self, srv: &H) {
        let c = srv.config.read();
        self.master.load_throttle_conf(&c);
        let hard = replica_hard_limit(&c.get_str("client-output-buffer-limit"));
        self.backlog.hard_cap.store(hard, Relaxed);
        let disk = match c.get_str("repl-lag-policy") == "spill" {
            true => c.get_i64("repl-backlog-disk-size").max(0) as u64,
            false => 0,
        };
        self.backlog.disk_max.store(disk, Relaxed);
    }

    /// A new history: new replid, the old one kept as replid2 up to the
    /// current offset (Redis's shiftReplicationId, at promotion).
    pub fn shift_replid(&self) {
        let mut ids = self.ids.lock();
        ids.replid2 = std::mem::replace(&mut ids.replid, crate::core::random::random_hex(40));
        ids.second_offset = self.backlog.end() as i64 + 1;
    }
}

/// The sink that encodes this master's write effects into the backlog.
struct Feed {
    backlog: Arc<backlog::Backlog>,
    is_replica: Arc<AtomicBool>,
}

impl EffectSink for Feed {
    fn on_effect(&self, e: &EffectRef<'_>) {
        if self.is_replica.load(Relaxed) || e.aof_only() {
            return;
        }
        self.backlog
            .append_command(e.db, crate::effects::for_replicas(e.argv));
        master::WROTE.with(|w| w.set(true));
    }

    fn on_effects(&self, effects: &[Effect]) {
        if self.is_replica.load(Relaxed) {
            return;
        }
        self.backlog.append_commands(
            (effects.iter().filter(|e| !e.aof_only()))
                .map(|e| (e.db, crate::effects::for_replicas(&e.argv[..]))),
        );
        master::WROTE.with(|w| w.set(true));
    }
}

/// INFO's replication section.
pub(crate) fn info_fields<H: Host>(srv: &H) -> Fields {
    let mut f = Fields::new();
    let repl = srv.repl();
    let keydb = keydb_view::enabled(srv.core());
    if repl.is_replica() {
        f.add("role", "slave");
        f.append(repl.replica.info_fields(srv));
    } else if keydb && keydb_view::has_links(&repl.active) {
        f.add("role", "active-replica");
        f.append(keydb_view::info_links(&repl.active));
    } else {
        f.add("role", "master");
    }
    if srv.core().active {
        f.append(active::info_fields(&srv.repl().active, srv.core()));
    }
    f.append(repl.master.info_fields(srv, keydb));
    let ids = repl.ids.lock().clone();
    let (first, histlen) = repl.backlog.range();
    let active = repl.backlog.is_active();
    f.add("master_failover_state", repl.failover.state_name())
        .add("master_replid", ids.replid)
        .add("master_replid2", ids.replid2)
        .add("master_repl_offset", repl.backlog.end())
        .add("second_repl_offset", ids.second_offset)
        .add("repl_backlog_active", active)
        .add(
            "repl_backlog_size",
            srv.config.read().get_i64("repl-backlog-size"),
        )
        .add(
            "repl_backlog_first_byte_offset",
            if active { first } else { 0 },
        )
        .add("repl_backlog_histlen", if active { histlen } else { 0 });
    f.append(repl.master.lag_fields(srv));
    f
}

/// ROLE: ["master", offset, [[ip, port, ack offset], ...]] or
/// ["slave", host, port, state, offset].
pub(crate) fn role<H: Host>(
    ctx: &mut crate::commands::Ctx,
    _args: crate::protocol::Args,
) -> crate::commands::CmdResult {
    let srv = host::of::<H>(ctx);
    let repl = srv.repl();
    if repl.is_replica() {
        return repl.replica.role_reply(ctx, repl.backlog.end());
    }
    if keydb_view::enabled(srv.core()) {
        return keydb_view::role(ctx, repl);
    }
    let list = repl.master.replicas.lock().clone();
    ctx.out.array(3);
    ctx.out.bulk(b"master");
    ctx.out.int(repl.backlog.end() as i64);
    ctx.out.array(list.len());
    for r in list {
        ctx.out.array(3);
        ctx.out.bulk(r.ip.as_bytes());
        ctx.out.bulk(r.port.load(Relaxed).to_string().as_bytes());
        ctx.out
            .bulk(r.ack_offset.load(Relaxed).to_string().as_bytes());
    }
    Ok(())
}

/// Replication's part in serving connections (`server/hooks.rs`; the
/// server implements it, `server/replication_host.rs`).
pub(crate) struct ReplicationHooks;
pub(crate) static HOOKS: ReplicationHooks = ReplicationHooks;

/// After CONFIG SET: the backlog's limits and the back-pressure settings
/// hold from the next command on (the rest of replication reads
/// `Core::hot`, which the same CONFIG SET reloaded).
pub(crate) fn config_changed<H: Host>(srv: &H) {
    srv.repl().load_limits(srv);
}

/// Worker 0's cron: PINGs replicas every `repl-ping-replica-period`
/// through the stream (as Redis, so it counts in the offsets and keeps an
/// idle link alive), and frees a lone master's backlog after
/// `repl-backlog-ttl`.
pub(crate) fn cron<H: Host>(srv: &H) {
    use std::sync::atomic::AtomicU64;
    static LAST_PING_MS: AtomicU64 = AtomicU64::new(0);
    static NO_REPLICAS_SINCE_MS: AtomicU64 = AtomicU64::new(0);
    let repl = srv.repl();
    let now = crate::keyspace::hlc::unix_ms();
    // Departed replicas whose history is gone stop pinning the backlog.
    repl.master.update_keep_from(&repl.backlog);
    if repl.is_replica() || repl.master.replicas.lock().is_empty() {
        if repl.is_replica() || !repl.backlog.is_active() {
            NO_REPLICAS_SINCE_MS.store(0, Relaxed);
            return;
        }
        // repl-backlog-ttl: a master alone frees its backlog after that
        // long, with a new replication id (nobody can continue the old).
        let since = match NO_REPLICAS_SINCE_MS.load(Relaxed) {
            0 => {
                NO_REPLICAS_SINCE_MS.store(now, Relaxed);
                now
            }
            t => t,
        };
        let ttl = srv.hot.replication.backlog_ttl_secs.load(Relaxed);
        if ttl > 0 && now.saturating_sub(since) >= ttl * 1000 {
            repl.backlog.deactivate();
            repl.master.forget_departed(&repl.backlog);
            *repl.ids.lock() = ReplIds::new();
            NO_REPLICAS_SINCE_MS.store(0, Relaxed);
            crate::log_notice!(
                "Replication backlog freed after {ttl} seconds without connected replicas."
            );
        }
        return;
    }
    NO_REPLICAS_SINCE_MS.store(0, Relaxed);
    let period = srv.hot.replication.ping_period_secs.load(Relaxed) * 1000;
    // The first period starts now: a new replica's stream does not begin
    // with a PING (Redis pings on its cron's period, not on attach).
    if LAST_PING_MS.load(Relaxed) == 0 {
        LAST_PING_MS.store(now, Relaxed);
    }
    if now.saturating_sub(LAST_PING_MS.load(Relaxed)) >= period {
        LAST_PING_MS.store(now, Relaxed);
        repl.backlog.append_raw(b"*1\r\n$4\r\nPING\r\n");
        repl.backlog.wake_if_dirty();
    }
}

/// `repl-timeout`: how long either end of a link waits without progress.
pub(crate) fn repl_timeout<H: Host>(srv: &H) -> std::time::Duration {
    srv.hot.replication.timeout()
}

/// The hard limit of the `replica` class in a client-output-buffer-limit
/// value ("normal 0 0 0 replica 256mb 64mb 60 pubsub ...").
pub(crate) fn replica_hard_limit(v: &str) -> usize {
    let w: Vec<&str> = v.split_whitespace().collect();
    w.chunks(4)
        .find(|c| c.len() == 4 && (c[0] == "replica" || c[0] == "slave"))
        .and_then(|c| crate::config::parse::parse_memory(c[1]).ok())
        .map_or(256 << 20, |b| b as usize)
}

/// Replication's admission of a command, in Redis's processCommand order:
/// `min-replicas-to-write`: a master with fewer good replicas (online,
/// acknowledged within `min-replicas-max-lag` seconds) refuses writes, and
/// an EXEC holding one, with NOREPLICAS (one relaxed load when unset); a
/// replica's READONLY and MASTERDOWN; last, a replica's link may not touch
/// the keyspace (`master/link.rs`). An EXEC's `flags` hold its queued
/// commands' (`commands::call::admit`, which also ends a refused
/// transaction).
pub(crate) fn admit_write<H: Host>(
    srv: &H,
    client: &mut crate::core::client::ClientState,
    _id: crate::commands::CommandId,
    flags: u32,
) -> Result<(), crate::commands::CmdError> {
    admit_by_role(srv, flags)?;
    master::admit_on_link(client, flags)
}

/// A replica's MASTERDOWN and READONLY; a master's (or an active node's)
/// MASTERDOWN below quorum and NOREPLICAS.
fn admit_by_role<H: Host>(srv: &H, flags: u32) -> Result<(), crate::commands::CmdError> {
    use crate::commands::{flags::WRITE, CmdError};
    if srv.repl().is_replica() {
        return replica_admit(srv, flags);
    }
    if srv.core().active && srv.repl().active.below_quorum.load(Relaxed) {
        deny_stale(flags)?;
    }
    let need = srv.hot.min_replicas_to_write.load(Relaxed);
    if need == 0 || flags & WRITE == 0 {
        return Ok(());
    }
    let max_lag_ms = srv.hot.min_replicas_max_lag.load(Relaxed) * 1000;
    if srv.repl().master.good_replicas(max_lag_ms) as u64 >= need {
        return Ok(());
    }
    Err(CmdError::Msg(
        "NOREPLICAS Not enough good replicas to write.".into(),
    ))
}

/// MASTERDOWN for a command without the `stale` flag (a replica whose
/// master link is down, an active node below `replica-quorum`, both with
/// `replica-serve-stale-data no`); an EXEC lacks it when one of its queued
/// commands does (Redis's cmd_inv_flags).
fn deny_stale(flags: u32) -> Result<(), crate::commands::CmdError> {
    use crate::commands::{flags::STALE, CmdError};
    if flags & STALE != 0 {
        return Ok(());
    }
    Err(CmdError::Msg(
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.".into(),
    ))
}

/// On a replica: MASTERDOWN while the link is down with
/// `replica-serve-stale-data no` (commands without the stale flag), and
/// READONLY for writes with `replica-read-only yes`.
fn replica_admit<H: Host>(srv: &H, flags: u32) -> Result<(), crate::commands::CmdError> {
    use crate::commands::{flags::WRITE, CmdError};
    let serve_stale = srv.hot.replication.serve_stale_data.load(Relaxed);
    let read_only = srv.hot.replica_read_only.load(Relaxed);
    if !serve_stale && !srv.repl().replica.link_up() {
        deny_stale(flags)?;
    }
    if read_only && flags & WRITE != 0 {
        return Err(CmdError::Msg(
            "READONLY You can't write against a read only replica.".into(),
        ));
    }
    Ok(())
}

/// The replication aux fields of an RDB taken now (Redis's
/// rdbPopulateSaveInfo): our history's id and offset, and the database the
/// stream has selected, so that a restarted node continues partially.
/// Called at a snapshot's cut, with every shard locked.
pub(crate) fn save_info<H: Host>(srv: &H) -> Vec<(String, String)> {
    let repl = srv.repl();
    if !repl.has_history.load(Acquire) {
        return Vec::new();
    }
    let db = if repl.is_replica() {
        repl.replica.stream_db()
    } else {
        0
    };
    vec![
        ("repl-stream-db".into(), db.to_string()),
        ("repl-id".into(), repl.ids.lock().replid.clone()),
        ("repl-offset".into(), repl.backlog.end().to_string()),
    ]
}

/// At start-up, after loading an RDB with replication aux fields: take the
/// history back, so our replicas (or our master) continue partially. A
/// master starts its backlog at once: writes made before a replica comes
/// back must be in it. As Redis 7.0's master, it continues the history
/// under a new id, the file's as its second (replid2, valid up to the
/// file's offset), and its backlog starts with the deletions of the keys
/// the load found expired (`expired`), which its replicas still hold.
pub(crate) fn restore_save_info<H: Host>(
    srv: &H,
    aux: &[(Vec<u8>, Vec<u8>)],
    expired: &[(usize, Vec<u8>)],
) {
    let get = |k: &[u8]| {
        aux.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    };
    let (Some(id), Some(offset)) = (get(b"repl-id"), get(b"repl-offset")) else {
        return;
    };
    let Ok(offset) = offset.parse::<u64>() else {
        return;
    };
    if id.len() != 40 {
        return;
    }
    let repl = srv.repl();
    *repl.ids.lock() = ReplIds {
        replid: id,
        replid2: NO_REPLID.into(),
        second_offset: -1,
    };
    repl.backlog.reset_to(offset);
    let db = get(b"repl-stream-db")
        .and_then(|d| d.parse().ok())
        .unwrap_or(0);
    repl.replica.set_stream_db(db);
    repl.has_history.store(true, Release);
    let replica = !srv.config.read().get_str("replicaof").is_empty();
    if !replica {
        repl.shift_replid();
        repl.activate_backlog(srv);
        let del: &[u8] = match srv.config.read().get_bool("lazyfree-lazy-expire") {
            true => b"UNLINK",
            false => b"DEL",
        };
        for (db, key) in expired {
            repl.backlog.append_command(*db, &[del, key]);
        }
        // To repl-backlog-size at once (appends trim with some slack): a
        // replica whose resume point these deletions pushed out full-syncs.
        repl.backlog.trim();
    }
    crate::log_notice!("Restored replication ID and offset from the RDB: offset {offset}");
}
