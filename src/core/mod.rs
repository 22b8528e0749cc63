//! The core: the state data commands are written against, shared by every
//! thread — the keyspace, the configuration and its hot mirror, the
//! write-effect stream, the command table, and the registries commands
//! consult (clients, WATCH, client-side tracking, blocked clients, pub/sub,
//! slowlog, pause), plus the lazyfree thread.
//!
//! Persistence, replication and the listeners are not here: they live in
//! the layers above (docs/ARCHITECTURE.md, "Layers"), and a command reaches
//! them only through [`admin::Admin`]. The server holds a `Core` and derefs
//! to it, so code of the upper layers reads `srv.keyspace` as before, while
//! a handler's `Ctx` carries only `&Core` and `&dyn Admin`.

pub(crate) mod acl;
pub(crate) mod admin;
pub(crate) mod blocking;
pub(crate) mod client;
pub(crate) mod client_mem;
pub(crate) mod ctx;
pub(crate) mod error;
pub(crate) mod eviction;
pub(crate) mod info;
pub(crate) mod keyspec;
pub(crate) mod latency;
pub(crate) mod multi;
pub(crate) mod notify;
pub(crate) mod propagation;
pub(crate) mod pubsub;
pub(crate) mod random;
pub(crate) mod replica_disk;
pub(crate) mod scripts;
pub(crate) mod sockio;
pub(crate) mod stats;
pub(crate) mod table;
pub(crate) mod tls;
pub(crate) mod tls_key;
pub(crate) mod tracking;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;

use crate::config::Config;
use crate::effects::Effects;
use crate::keyspace::encoding::EncodingLimits;
use crate::keyspace::Keyspace;
use client::ClientRegistry;
use stats::WorkerStats;
use table::CommandTable;

/// What data commands share (see the module comment).
pub struct Core {
    pub keyspace: Keyspace,
    pub config: RwLock<Config>,
    pub hot: HotConfig,
    pub effects: Effects,
    pub commands: CommandTable,
    pub clients: ClientRegistry,
    pub workers: Mutex<Vec<Arc<WorkerStats>>>,
    /// INFO's instantaneous_* rates, sampled by the cron.
    pub metrics: crate::core::stats::InstantMetrics,
    /// Low bits of the HLC stamps this node issues.
    pub node_id: u64,
    /// Active replication (`active-replica` or `multi-master`): every write
    /// records the versions its keys had and deletions leave tombstones
    /// (docs/ACTIVE-ACTIVE-DESIGN.md). Fixed at start.
    pub active: bool,
    /// Active replication: no stamp issued here may be at or below this
    /// (the latest FLUSHDB/FLUSHALL's stamp, and stamps from peers or
    /// writes whose clock ran ahead of ours: HLC's receive rule, applied
    /// only when a stamp is ahead of the wall clock, so it is rarely
    /// written). See `Ctx::version_after`.
    pub stamp_floor: AtomicU64,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub slowlog: Mutex<std::collections::VecDeque<SlowEntry>>,
    pub slowlog_next_id: AtomicU64,
    /// CLIENT PAUSE: deadline (unix ms, 0 = none) and whether all commands pause.
    pub pause_until_ms: AtomicU64,
    pub pause_all: AtomicBool,
    pub unpaused: Notify,
    /// Pub/sub channels and patterns (see `core/pubsub.rs`).
    pub pubsub: crate::core::pubsub::PubSub,
    /// Keys WATCHed by clients (`commands/multi.rs`).
    pub watch: Arc<multi::WatchRegistry>,
    /// Clients blocked on keys (BLPOP & co.), see `core/blocking.rs`.
    pub blocking: crate::core::blocking::Registry,
    pub tracking: tracking::Tracking,
    /// The background thread that frees big values and flushed databases.
    pub lazyfree: crate::keyspace::lazyfree::LazyFree,
    /// Script bodies by SHA1 (EVAL, EVALSHA, SCRIPT; see `scripting/`).
    pub scripts: scripts::ScriptCache,
    /// FUNCTION libraries (FCALL; see `scripting/functions.rs`).
    pub functions: scripts::Functions,
    /// ACL users and the security log (see `core/acl`).
    pub acl: acl::Acl,
    /// The TLS configurations in use (`core/tls.rs`).
    pub tls: tls::Tls,
    /// LATENCY's event samples (`latency-monitor-threshold`).
    pub latency: latency::LatencyMonitor,
    /// KEYDB.CRON jobs to run (`keyspace/cron.rs`, `server/cron_jobs.rs`).
    pub cron: crate::keyspace::cron::Schedule,
    /// A writable replica's keys its own clients gave a TTL, which it
    /// expires itself (`keyspace/expire.rs`, `commands/call.rs`).
    pub replica_keys: crate::keyspace::expire::ReplicaKeys,
}

impl Core {
    pub fn new(config: Config, node_id: u64, commands: CommandTable) -> Core {
        let databases = config.get_i64("databases").max(1) as usize;
        let hot = HotConfig::default();
        hot.active_expire.store(true, Relaxed);
        hot.load(&config);
        let active = config.get_bool("active-replica") || config.get_bool("multi-master");
        let client_limit = Self::client_limit(&config);
        let acl = acl::Acl::new(&commands);
        acl.set_pubsub_default(config.get_str("acl-pubsub-default") == "allchannels");
        acl.set_requirepass(&commands, &config.get_str("requirepass"));
        Core {
            acl,
            active,
            stamp_floor: AtomicU64::new(0),
            keyspace: Keyspace::new(databases),
            config: RwLock::new(config),
            hot,
            effects: Effects::default(),
            commands,
            clients: ClientRegistry::with_limit(client_limit),
            workers: Mutex::new(vec![]),
            metrics: Default::default(),
            node_id,
            total_connections: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            slowlog: Mutex::new(Default::default()),
            slowlog_next_id: AtomicU64::new(0),
            pause_until_ms: AtomicU64::new(0),
            pause_all: AtomicBool::new(false),
            unpaused: Notify::new(),
            pubsub: Default::default(),
            watch: Default::default(),
            blocking: Default::default(),
            tracking: Default::default(),
            lazyfree: Default::default(),
            scripts: Default::default(),
            functions: Default::default(),
            tls: Default::default(),
            latency: Default::default(),
            cron: Default::default(),
            replica_keys: Default::default(),
        }
    }

    /// A new stats block for one worker (or a test harness).
    pub fn new_worker_stats(&self) -> Arc<WorkerStats> {
        let s = Arc::new(WorkerStats::new(self.commands.all.len()));
        let tracking = self.config.read().get_bool("latency-tracking");
        s.latency_tracking.store(tracking, Relaxed);
        self.workers.lock().push(s.clone());
        s
    }

    /// Records a latency event of `ms` milliseconds if it reaches
    /// `latency-monitor-threshold` (Redis's latencyAddSampleIfNeeded).
    /// Inlined: every command pays the comparison, only a slow one the rest.
    #[inline(always)]
    pub fn latency_event(&self, event: &str, ms: u64) {
        let t = self.hot.latency_threshold_ms.load(Relaxed);
        if t > 0 && ms >= t {
            self.latency_add(event, ms);
        }
    }

    #[cold]
    fn latency_add(&self, event: &str, ms: u64) {
        let now = crate::keyspace::hlc::unix_ms() / 1000;
        self.latency.add(event, ms, now);
    }

    /// `maxmemory-clients` in bytes (0: no client eviction).
    fn client_limit(c: &Config) -> usize {
        let maxmemory = c.get_i64("maxmemory").max(0) as u64;
        client_mem::limit_of(&c.get_str("maxmemory-clients"), maxmemory)
    }

    /// Mirrors the configuration's hot values after a change (CONFIG SET).
    pub fn config_changed(&self, c: &Config) {
        self.hot.load(c);
        self.clients.book.set_limit(Self::client_limit(c));
        let tracking = c.get_bool("latency-tracking");
        for w in self.workers.lock().iter() {
            w.latency_tracking.store(tracking, Relaxed);
        }
    }
}

/// Configuration values read on a hot path (per command, per connection
/// event, per replicated write, per cron tick), mirrored from [`Config`]
/// by [`HotConfig::load`] at start-up and in the CONFIG SET that changes
/// them, so a new value holds from the next command on; no cron refreshes
/// a copy (docs/ARCHITECTURE.md, "Configuration on hot paths").
#[derive(Default)]
pub struct HotConfig {
    pub proto_max_bulk_len: AtomicUsize,
    pub query_buffer_limit: AtomicUsize,
    pub maxclients: AtomicUsize,
    pub timeout_secs: AtomicU64,
    pub hz: AtomicU64,
    pub slowlog_slower_than: AtomicU64,
    pub slowlog_max_len: AtomicUsize,
    /// `latency-monitor-threshold` in milliseconds (0: no latency events).
    pub latency_threshold_ms: AtomicU64,
    pub active_expire: AtomicBool,
    /// DEBUG PAUSE-CRON: the workers' periodic work is skipped while set.
    pub cron_paused: AtomicBool,
    /// DEBUG REPLYBUFFER RESIZING 0: a connection keeps its reply buffer's
    /// capacity (tests of client memory want stable figures).
    pub reply_no_resize: AtomicBool,
    /// `replica-read-only`: as a replica, refuse clients' writes.
    pub replica_read_only: AtomicBool,
    /// `protected-mode`: without a password, only loopback clients are served.
    pub protected_mode: AtomicBool,
    /// `client-output-buffer-limit`, parsed (see `crate::core::client::ObufLimits`).
    pub obuf_limits: RwLock<crate::core::client::ObufLimits>,
    /// Thresholds at which small collections leave their compact encoding.
    pub encoding: EncodingLimits,
    /// `notify-keyspace-events` as `commands::events::class` bits.
    pub notify_keyspace_events: AtomicU32,
    /// `lazyfree-lazy-user-del`: DEL frees big values as UNLINK does.
    pub lazyfree_user_del: AtomicBool,
    /// `lazyfree-lazy-expire`: expired big values are freed in the background.
    pub lazyfree_expire: AtomicBool,
    /// `maxmemory` in bytes (0: no limit) and how to stay under it.
    pub maxmemory: AtomicU64,
    /// min-replicas-to-write and min-replicas-max-lag (seconds).
    pub min_replicas_to_write: AtomicU64,
    pub min_replicas_max_lag: AtomicU64,
    /// `busy-reply-threshold` (`lua-time-limit`), milliseconds.
    pub busy_reply_threshold: AtomicU64,
    pub eviction: eviction::EvictionConfig,
    /// `tcp-keepalive` (seconds, 0: off), set on each accepted socket.
    pub tcp_keepalive: AtomicU64,
    /// `replica-ignore-maxmemory`: a replica leaves eviction to its master.
    pub replica_ignore_maxmemory: AtomicBool,
    /// `lazyfree-lazy-user-flush`: FLUSHDB/FLUSHALL without a mode free
    /// in the background.
    pub lazyfree_user_flush: AtomicBool,
    /// `tracking-table-max-keys` (0: no limit), enforced by the cron.
    pub tracking_table_max_keys: AtomicUsize,
    /// The values replication reads per command, per write or per tick.
    pub replication: ReplicationConfig,
    /// The values persistence and DUMP read per command or per tick.
    pub persistence: PersistenceConfig,
}

/// Replication's hot values (see [`HotConfig`]).
#[derive(Default)]
pub struct ReplicationConfig {
    /// `repl-timeout` in seconds (at least 1).
    pub timeout_secs: AtomicU64,
    /// `repl-ping-replica-period` in seconds (at least 1).
    pub ping_period_secs: AtomicU64,
    /// `repl-backlog-ttl` in seconds (0: kept for ever).
    pub backlog_ttl_secs: AtomicU64,
    /// `replica-serve-stale-data`: a replica whose link is down still
    /// serves reads.
    pub serve_stale_data: AtomicBool,
    /// `replica-quorum` (-1: never refuse) of an active node.
    pub quorum: std::sync::atomic::AtomicI64,
    /// `active-max-clock-skew` in ms: a peer's record further ahead of
    /// our clock is refused.
    pub max_clock_skew_ms: AtomicU64,
    /// `active-tombstone-grace` in seconds.
    pub tombstone_grace_secs: AtomicU64,
}

impl ReplicationConfig {
    fn load(&self, c: &Config) {
        let secs = |name: &str, min: i64| c.get_i64(name).max(min) as u64;
        self.timeout_secs.store(secs("repl-timeout", 1), Relaxed);
        self.ping_period_secs
            .store(secs("repl-ping-replica-period", 1), Relaxed);
        self.backlog_ttl_secs
            .store(secs("repl-backlog-ttl", 0), Relaxed);
        self.serve_stale_data
            .store(c.get_bool("replica-serve-stale-data"), Relaxed);
        self.quorum.store(c.get_i64("replica-quorum"), Relaxed);
        self.max_clock_skew_ms
            .store(secs("active-max-clock-skew", 0), Relaxed);
        self.tombstone_grace_secs
            .store(secs("active-tombstone-grace", 0), Relaxed);
    }

    /// `repl-timeout`: how long either end of a link waits without progress.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_secs.load(Relaxed))
    }
}

/// Persistence's hot values (see [`HotConfig`]).
#[derive(Default)]
pub struct PersistenceConfig {
    /// The `save` points, (seconds, changes) in the directive's order.
    pub save_points: RwLock<Vec<(u64, u64)>>,
    /// `stop-writes-on-bgsave-error`.
    pub stop_writes_on_bgsave_error: AtomicBool,
    /// `auto-aof-rewrite-percentage` (0: no automatic rewrite).
    pub auto_aof_rewrite_percentage: std::sync::atomic::AtomicI64,
    /// `auto-aof-rewrite-min-size` in bytes.
    pub auto_aof_rewrite_min_size: AtomicU64,
    /// `rdbcompression`, which DUMP's payloads follow too.
    pub rdbcompression: AtomicBool,
}

impl PersistenceConfig {
    fn load(&self, c: &Config) {
        let mut nums = c
            .get("save")
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|s| s.parse().ok());
        let mut points = vec![];
        while let (Some(secs), Some(changes)) = (nums.next(), nums.next()) {
            points.push((secs, changes));
        }
        *self.save_points.write() = points;
        self.stop_writes_on_bgsave_error
            .store(c.get_bool("stop-writes-on-bgsave-error"), Relaxed);
        self.auto_aof_rewrite_percentage
            .store(c.get_i64("auto-aof-rewrite-percentage"), Relaxed);
        self.auto_aof_rewrite_min_size.store(
            c.get_i64("auto-aof-rewrite-min-size").max(0) as u64,
            Relaxed,
        );
        self.rdbcompression
            .store(c.get_bool("rdbcompression"), Relaxed);
    }
}

impl HotConfig {
    /// Refreshes the mirror after the configuration changed.
    pub fn load(&self, c: &Config) {
        self.proto_max_bulk_len
            .store(c.get_i64("proto-max-bulk-len") as usize, Relaxed);
        self.query_buffer_limit
            .store(c.get_i64("client-query-buffer-limit") as usize, Relaxed);
        self.maxclients
            .store(c.get_i64("maxclients") as usize, Relaxed);
        self.timeout_secs
            .store(c.get_i64("timeout") as u64, Relaxed);
        self.hz.store(c.get_i64("hz").clamp(1, 500) as u64, Relaxed);
        self.slowlog_slower_than
            .store(c.get_i64("slowlog-log-slower-than") as u64, Relaxed);
        self.slowlog_max_len
            .store(c.get_i64("slowlog-max-len") as usize, Relaxed);
        self.latency_threshold_ms.store(
            c.get_i64("latency-monitor-threshold").max(0) as u64,
            Relaxed,
        );
        self.protected_mode
            .store(c.get_bool("protected-mode"), Relaxed);
        if let Some(l) =
            crate::core::client::ObufLimits::parse(&c.get_str("client-output-buffer-limit"))
        {
            *self.obuf_limits.write() = l;
        }
        if let Some(l) = crate::log::Level::parse(&c.get_str("loglevel")) {
            crate::log::set_level(l);
        }
        self.encoding.load(c);
        self.notify_keyspace_events.store(
            notify::parse_classes(&c.get_str("notify-keyspace-events")),
            Relaxed,
        );
        self.lazyfree_user_del
            .store(c.get_bool("lazyfree-lazy-user-del"), Relaxed);
        self.lazyfree_expire
            .store(c.get_bool("lazyfree-lazy-expire"), Relaxed);
        self.replica_read_only
            .store(c.get_bool("replica-read-only"), Relaxed);
        self.maxmemory
            .store(c.get_i64("maxmemory").max(0) as u64, Relaxed);
        self.busy_reply_threshold
            .store(c.get_i64("busy-reply-threshold").max(0) as u64, Relaxed);
        self.min_replicas_to_write
            .store(c.get_i64("min-replicas-to-write").max(0) as u64, Relaxed);
        self.min_replicas_max_lag
            .store(c.get_i64("min-replicas-max-lag").max(0) as u64, Relaxed);
        self.eviction.load(c);
        self.load_others(c);
    }

    /// The rest of [`HotConfig::load`]: connections, flushes, tracking
    /// and the subsystems' values.
    fn load_others(&self, c: &Config) {
        self.tcp_keepalive
            .store(c.get_i64("tcp-keepalive").max(0) as u64, Relaxed);
        self.replica_ignore_maxmemory
            .store(c.get_bool("replica-ignore-maxmemory"), Relaxed);
        self.lazyfree_user_flush
            .store(c.get_bool("lazyfree-lazy-user-flush"), Relaxed);
        self.tracking_table_max_keys.store(
            c.get_i64("tracking-table-max-keys").max(0) as usize,
            Relaxed,
        );
        self.replication.load(c);
        self.persistence.load(c);
    }
}

/// One SLOWLOG entry.
#[derive(Clone, Debug)]
pub struct SlowEntry {
    pub id: u64,
    pub time: u64,
    pub usec: u64,
    pub args: Vec<Vec<u8>>,
    pub addr: String,
    pub name: String,
}
