//! INFO's text: Redis 7's sections, field names and layout.
//!
//! Each section's fields come as data (`core/info.rs` [`Fields`]): this
//! file builds the server's own sections (server, clients, memory, stats,
//! cpu, the per-command ones, keyspace) and takes persistence's and
//! replication's fields from their subsystems. One formatter,
//! `write_section`, writes them all: `# Name\r\n` plus a `name:value\r\n`
//! line a field; sections are joined by a blank line and always come in
//! Redis's order whatever order they were asked in
//! (`commands/server_cmds/info.rs` picks them). Client libraries parse this
//! text (redis-py into a dict, node-redis for `loading:`), so every line is
//! either a header or `name:value`. Counters are summed over the workers'
//! stats.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::Server;
use crate::core::info::{Fields, Value};
use crate::core::stats::{sum, Metric, WorkerStats};

/// The INFO text of the given sections.
pub(crate) fn info_text(srv: &Arc<Server>, sections: &[&str]) -> String {
    let workers = srv.workers.lock().clone();
    // Grown section by section, not reserved up front: the memory section
    // reads used_memory while this is allocated, and Redis's tests allow
    // INFO's own bytes 4 KB over maxmemory (unit/maxmemory).
    let mut out = String::new();
    for s in sections {
        let (title, fields) = match *s {
            "server" => ("Server", server(srv)),
            "clients" => ("Clients", clients(srv)),
            "memory" => ("Memory", memory(srv)),
            "persistence" => ("Persistence", persistence(srv)),
            "stats" => ("Stats", stats(srv, &workers)),
            "replication" => ("Replication", crate::replication::info_fields(&**srv)),
            "cpu" => ("CPU", cpu()),
            "modules" => ("Modules", Fields::new()),
            "commandstats" => ("Commandstats", commandstats(srv, &workers)),
            "errorstats" => ("Errorstats", errorstats(&workers)),
            "latencystats" => ("Latencystats", latencystats(srv, &workers)),
            "cluster" => ("Cluster", cluster()),
            "keyspace" => ("Keyspace", keyspace(srv)),
            _ => continue, // (the command names only these)
        };
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        write_section(&mut out, title, &fields);
    }
    out
}

/// The one formatter of INFO's text: `# Title`, then `name:value` lines.
fn write_section(o: &mut String, title: &str, fields: &Fields) {
    o.push_str("# ");
    o.push_str(title);
    o.push_str("\r\n");
    for (name, value) in fields.iter() {
        o.push_str(name);
        o.push(':');
        write_value(o, value);
        o.push_str("\r\n");
    }
}

/// A value as Redis writes it; a list as `k=v,k=v`.
fn write_value(o: &mut String, value: &Value) {
    let _ = match value {
        Value::Int(n) => write!(o, "{n}"),
        Value::Uint(n) => write!(o, "{n}"),
        Value::Float(v, decimals) => write!(o, "{v:.decimals$}"),
        Value::Percent(v) => write!(o, "{v:.2}%"),
        Value::Str(s) => o.write_str(s),
        Value::List(items) => {
            for (i, (k, v)) in items.iter().enumerate() {
                if i > 0 {
                    o.push(',');
                }
                o.push_str(k);
                o.push('=');
                write_value(o, v);
            }
            Ok(())
        }
    };
}

/// Appends fields, one `"name" => value` a line.
macro_rules! kv {
    ($f:expr, $($k:literal => $v:expr),* $(,)?) => {
        $( $f.add($k, $v); )*
    };
}

fn uname() -> (String, String) {
    // SAFETY: utsname is plain old data; uname fills it with NUL-terminated
    // strings, read below only if the call succeeded.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return ("Linux".into(), "x86_64".into());
        }
        let s = |f: &[libc::c_char]| {
            std::ffi::CStr::from_ptr(f.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        (
            format!("{} {}", s(&u.sysname), s(&u.release)),
            s(&u.machine),
        )
    }
}

fn server(srv: &Arc<Server>) -> Fields {
    let mut f = Fields::new();
    let cfg = srv.config.read();
    let (os, arch) = uname();
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64;
    let up = srv.started.elapsed().as_secs();
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let config_file = cfg
        .file
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let hz = srv.hot.hz.load(Relaxed);
    kv!(f,
        "redis_version" => crate::REDIS_VERSION,
        "redis_git_sha1" => "00000000",
        "redis_git_dirty" => 0,
        "redis_build_id" => "0",
        "redis_mode" => "standalone",
        "os" => format!("{os} {arch}"),
        "arch_bits" => usize::BITS,
        "monotonic_clock" => "POSIX clock_gettime",
        "multiplexing_api" => "epoll",
        "atomicvar_api" => "c11-builtin",
        "gcc_version" => "0.0.0",
        "process_id" => std::process::id(),
        "process_supervised" => super::supervise::info_name(),
        "run_id" => srv.run_id.clone(),
        "lattice_node_id" => srv.identity.hex(),
        "lattice_node_slot" => srv.identity.slot,
        "tcp_port" => srv.tcp_port.load(Relaxed),
        "server_time_usec" => now_us,
        "uptime_in_seconds" => up,
        "uptime_in_days" => up / 86400,
        "hz" => hz,
        "configured_hz" => cfg.get_i64("hz"),
        "lru_clock" => crate::commands::access::lru_clock(crate::keyspace::hlc::unix_ms()),
        "executable" => exe,
        "config_file" => config_file,
        "io_threads_active" => 0,
        "lattice_version" => crate::LATTICE_VERSION,
        "server_threads" => srv.workers.lock().len(),
    );
    // Redis's one conditional field: a shutdown waiting for replicas.
    if let Some(left) = srv.shutdown.wait_left_ms() {
        kv!(f, "shutdown_in_milliseconds" => left);
    }
    f
    // (No `listenerN` lines: they are Redis 7.2's; we report 7.0's fields,
    // DECISIONS 60.)
}

fn clients(srv: &Arc<Server>) -> Fields {
    let mut f = Fields::new();
    let all = srv.clients.snapshot();
    let max_in = all.iter().map(|c| c.qbuf.load(Relaxed)).max().unwrap_or(0);
    let max_out = all.iter().map(|c| c.obuf.load(Relaxed)).max().unwrap_or(0);
    kv!(f,
        // Replicas are not clients here, as in Redis.
        "connected_clients" => all.iter().filter(|c| !c.flags.lock().contains('S')).count(),
        "cluster_connections" => 0,
        "maxclients" => srv.hot.maxclients.load(Relaxed),
        "client_recent_max_input_buffer" => max_in,
        "client_recent_max_output_buffer" => max_out,
        "blocked_clients" => all.iter().filter(|c| c.flags.lock().contains('b')).count(),
        "tracking_clients" => srv.tracking.stats().0,
        "clients_in_timeout_table" => 0,
    );
    f
}

pub(crate) use crate::alloc::{rss_bytes, used_memory};

/// INFO's `mem_clients_normal`: the memory of the clients that client
/// eviction counts (normal and pub/sub ones).
fn clients_memory(srv: &Server) -> usize {
    let all = srv.clients.snapshot();
    let counted = all.iter().filter(|c| c.mem_kind_counted.load(Relaxed));
    counted
        .map(|c| crate::core::client_mem::client_memory(c))
        .sum()
}

/// Redis's bytesToHuman: "895.39K".
pub(crate) fn human(n: u64) -> String {
    let d = n as f64;
    const UNITS: &[(f64, &str)] = &[
        (1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0, "P"),
        (1024.0 * 1024.0 * 1024.0 * 1024.0, "T"),
        (1024.0 * 1024.0 * 1024.0, "G"),
        (1024.0 * 1024.0, "M"),
        (1024.0, "K"),
    ];
    for (u, s) in UNITS {
        if d >= *u {
            return format!("{:.2}{s}", d / u);
        }
    }
    format!("{n}B")
}

fn total_system_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            l.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .unwrap_or(0)
        * 1024
}

fn memory(srv: &Arc<Server>) -> Fields {
    let mut f = Fields::new();
    let (used, peak) = used_memory();
    let rss = rss_bytes();
    let frag = rss as f64 / used.max(1) as f64;
    let cfg = srv.config.read();
    let maxmemory = cfg.get_i64("maxmemory") as u64;
    let policy = cfg
        .get("maxmemory-policy")
        .unwrap_or("noeviction")
        .to_string();
    let sys = total_system_memory();
    let startup = 1024 * 1024u64;
    let dataset = used.saturating_sub(startup);
    let lua = crate::scripting::lua_memory() as u64;
    kv!(f,
        "used_memory" => used,
        "used_memory_human" => human(used),
        "used_memory_rss" => rss,
        "used_memory_rss_human" => human(rss),
        "used_memory_peak" => peak,
        "used_memory_peak_human" => human(peak),
        "used_memory_peak_perc" => Value::percent(used as f64 * 100.0 / peak.max(1) as f64),
        "used_memory_overhead" => startup,
        "used_memory_startup" => startup,
        "used_memory_dataset" => dataset,
        "used_memory_dataset_perc" => Value::percent(dataset as f64 * 100.0 / used.max(1) as f64),
        "allocator_allocated" => used,
        "allocator_active" => used,
        "allocator_resident" => rss,
        "total_system_memory" => sys,
        "total_system_memory_human" => human(sys),
        "used_memory_lua" => lua,
        "used_memory_vm_eval" => lua,
        "used_memory_lua_human" => human(lua),
        "used_memory_scripts_eval" => srv.scripts.bytes(),
        "number_of_cached_scripts" => srv.scripts.len(),
        "number_of_functions" => 0,
        "number_of_libraries" => 0,
        "used_memory_vm_functions" => 32768,
        "used_memory_vm_total" => lua + 32768,
        "used_memory_vm_total_human" => human(lua + 32768),
        "used_memory_functions" => 184,
        "used_memory_scripts" => 184,
        "used_memory_scripts_human" => "184B",
        "maxmemory" => maxmemory,
        "maxmemory_human" => human(maxmemory),
        "maxmemory_policy" => policy,
        "allocator_frag_ratio" => Value::float(1.0, 2),
        "allocator_frag_bytes" => 0,
        "allocator_rss_ratio" => Value::float(frag, 2),
        "allocator_rss_bytes" => rss as i64 - used as i64,
        "rss_overhead_ratio" => Value::float(1.0, 2),
        "rss_overhead_bytes" => 0,
        "mem_fragmentation_ratio" => Value::float(frag, 2),
        "mem_fragmentation_bytes" => rss as i64 - used as i64,
        "mem_not_counted_for_evict" => 0,
        "mem_replication_backlog" => 0,
        "mem_total_replication_buffers" => srv.repl.master.buffer_bytes(&**srv),
        "mem_clients_slaves" => 0,
        "mem_clients_normal" => clients_memory(srv),
        "mem_cluster_links" => 0,
        "mem_aof_buffer" => 0,
        "mem_allocator" => "mimalloc",
        "active_defrag_running" => 0,
        "lazyfree_pending_objects" => srv.lazyfree.pending(),
        "lazyfreed_objects" => srv.lazyfree.freed(),
    );
    f
}

fn persistence(srv: &Arc<Server>) -> Fields {
    let mut f = Fields::new();
    let snap = &srv.persist.snapshot;
    kv!(f,
        "loading" => srv.persist.loading.active() as u8,
        "async_loading" => srv.persist.loading.async_active() as u8,
        "current_cow_peak" => 0,
        "current_cow_size" => 0,
        "current_cow_size_age" => 0,
        "current_fork_perc" => Value::float(0.0, 2),
        "current_save_keys_processed" => snap.keys_done.load(Relaxed) * snap.running() as usize,
        "current_save_keys_total" => snap.keys_total.load(Relaxed) * snap.running() as usize,
    );
    f.append(crate::persistence::save::info_fields(srv));
    f.append(crate::persistence::aof::info_fields(srv));
    f.append(srv.persist.loading.info_fields());
    f
}

/// Samples the counters behind INFO's instantaneous rates (the cron's job).
pub(crate) fn sample_rates(srv: &Server) {
    let w = srv.workers.lock().clone();
    srv.metrics.sample([
        sum(&w, |s| &s.commands_processed),
        sum(&w, |s| &s.net_input_bytes),
        sum(&w, |s| &s.net_output_bytes),
    ]);
}

fn stats(srv: &Arc<Server>, w: &[Arc<WorkerStats>]) -> Fields {
    let mut f = Fields::new();
    let processed = sum(w, |s| &s.commands_processed);
    let input = sum(w, |s| &s.net_input_bytes);
    let output = sum(w, |s| &s.net_output_bytes);
    let errors: u64 = w
        .iter()
        .map(|s| s.errors.lock().values().sum::<u64>())
        .sum();
    let ops = srv.metrics.rate(Metric::Commands) as u64;
    let ikbps = srv.metrics.rate(Metric::NetInput) / 1024.0;
    let okbps = srv.metrics.rate(Metric::NetOutput) / 1024.0;
    kv!(f,
        "total_connections_received" => srv.total_connections.load(Relaxed),
        "total_commands_processed" => processed,
        "instantaneous_ops_per_sec" => ops,
        "total_net_input_bytes" => input,
        "total_net_output_bytes" => output,
        "total_net_repl_input_bytes" => 0,
        "total_net_repl_output_bytes" => 0,
        "instantaneous_input_kbps" => Value::float(ikbps, 2),
        "instantaneous_output_kbps" => Value::float(okbps, 2),
        "instantaneous_input_repl_kbps" => Value::float(0.0, 2),
        "instantaneous_output_repl_kbps" => Value::float(0.0, 2),
        "rejected_connections" => srv.rejected_connections.load(Relaxed),
        "sync_full" => srv.repl.master.sync_full.load(Relaxed),
        "sync_partial_ok" => srv.repl.master.sync_partial_ok.load(Relaxed),
        "sync_partial_err" => srv.repl.master.sync_partial_err.load(Relaxed),
        "expired_keys" => sum(w, |s| &s.expired_keys),
        "expired_stale_perc" => Value::float(0.0, 2),
        "expired_time_cap_reached_count" => 0,
        "expire_cycle_cpu_milliseconds" => 0,
        "evicted_keys" => sum(w, |s| &s.evicted_keys),
        "evicted_clients" => srv.clients.book.evicted_clients(),
        "total_eviction_exceeded_time" => 0,
        "current_eviction_exceeded_time" => 0,
        "keyspace_hits" => sum(w, |s| &s.keyspace_hits),
        "keyspace_misses" => sum(w, |s| &s.keyspace_misses),
        "pubsub_channels" => srv.pubsub.count(crate::core::pubsub::Kind::Channel),
        "pubsub_patterns" => srv.pubsub.count(crate::core::pubsub::Kind::Pattern),
        "pubsubshard_channels" => srv.pubsub.count(crate::core::pubsub::Kind::Shard),
        "latest_fork_usec" => 0,
        "total_forks" => 0,
        "migrate_cached_sockets" => 0,
        "slave_expires_tracked_keys" => srv.replica_keys.len(),
        "active_defrag_hits" => 0,
        "active_defrag_misses" => 0,
        "active_defrag_key_hits" => 0,
        "active_defrag_key_misses" => 0,
        "total_active_defrag_time" => 0,
        "current_active_defrag_time" => 0,
        "tracking_total_keys" => srv.tracking.stats().1,
        "tracking_total_items" => srv.tracking.total_items(),
        "tracking_total_prefixes" => srv.tracking.stats().2,
        "unexpected_error_replies" => sum(w, |s| &s.unexpected_errors),
        "total_error_replies" => errors,
        "dump_payload_sanitizations" => 0,
        "total_reads_processed" => processed,
        "total_writes_processed" => processed,
        "io_threaded_reads_processed" => 0,
        "io_threaded_writes_processed" => 0,
        "reply_buffer_shrinks" => 0,
        "reply_buffer_expands" => 0,
    );
    f
}

/// (system, user) CPU seconds of `who` (RUSAGE_SELF, RUSAGE_CHILDREN, RUSAGE_THREAD).
fn rusage(who: libc::c_int) -> (f64, f64) {
    // SAFETY: rusage is plain old data, filled by getrusage; read only on success.
    unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut r) != 0 {
            return (0.0, 0.0);
        }
        let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        (t(r.ru_stime), t(r.ru_utime))
    }
}

fn cpu() -> Fields {
    let (s, u) = rusage(libc::RUSAGE_SELF);
    let (cs, cu) = rusage(libc::RUSAGE_CHILDREN);
    let (ts, tu) = rusage(libc::RUSAGE_THREAD);
    let mut f = Fields::new();
    kv!(f,
        "used_cpu_sys" => Value::float(s, 6),
        "used_cpu_user" => Value::float(u, 6),
        "used_cpu_sys_children" => Value::float(cs, 6),
        "used_cpu_user_children" => Value::float(cu, 6),
        "used_cpu_sys_main_thread" => Value::float(ts, 6),
        "used_cpu_user_main_thread" => Value::float(tu, 6),
    );
    f
}

fn commandstats(srv: &Arc<Server>, w: &[Arc<WorkerStats>]) -> Fields {
    let mut f = Fields::new();
    for (id, name) in srv.commands.full_names.iter().enumerate() {
        let get = |field: fn(&crate::core::stats::CmdStats) -> &std::sync::atomic::AtomicU64| {
            w.iter()
                .map(|s| field(&s.cmds[id]).load(Relaxed))
                .sum::<u64>()
        };
        let calls = get(|c| &c.calls);
        let rejected = get(|c| &c.rejected);
        let failed = get(|c| &c.failed);
        if calls == 0 && rejected == 0 && failed == 0 {
            continue;
        }
        let usec = get(|c| &c.usec);
        let per = if calls == 0 {
            0.0
        } else {
            usec as f64 / calls as f64
        };
        let mut line = Fields::new();
        kv!(line,
            "calls" => calls,
            "usec" => usec,
            "usec_per_call" => Value::float(per, 2),
            "rejected_calls" => rejected,
            "failed_calls" => failed,
        );
        f.add(format!("cmdstat_{name}"), line);
    }
    f
}

/// Each command's latency percentiles (`latency-tracking-info-percentiles`)
/// in microseconds, from its histogram (core/stats.rs: the upper bound of
/// the power-of-two step, DECISIONS 101).
fn latencystats(srv: &Arc<Server>, w: &[Arc<WorkerStats>]) -> Fields {
    let wanted = srv
        .config
        .read()
        .get_str("latency-tracking-info-percentiles");
    let ps: Vec<(String, f64)> = wanted
        .split_whitespace()
        .filter_map(|p| Some((format!("p{p}"), p.parse().ok()?)))
        .collect();
    let mut f = Fields::new();
    for (id, name) in srv.commands.full_names.iter().enumerate() {
        let h = crate::core::stats::histogram(w, id);
        if h.iter().all(|&n| n == 0) {
            continue;
        }
        let mut line = Fields::new();
        for (label, p) in &ps {
            let ns = crate::core::stats::percentile_ns(&h, *p);
            line.add(label.clone(), Value::float(ns as f64 / 1000.0, 3));
        }
        f.add(format!("latency_percentiles_usec_{name}"), line);
    }
    f
}

fn errorstats(w: &[Arc<WorkerStats>]) -> Fields {
    let mut all = std::collections::BTreeMap::<String, u64>::new();
    for s in w {
        for (k, v) in s.errors.lock().iter() {
            *all.entry(k.clone()).or_default() += v;
        }
    }
    let mut f = Fields::new();
    for (k, v) in all {
        let mut line = Fields::new();
        line.add("count", v);
        f.add(format!("errorstat_{k}"), line);
    }
    f
}

fn cluster() -> Fields {
    let mut f = Fields::new();
    f.add("cluster_enabled", 0);
    f
}

fn keyspace(srv: &Arc<Server>) -> Fields {
    let mut f = Fields::new();
    for i in 0..srv.keyspace.num_dbs() {
        let db = srv.keyspace.db(i);
        let keys = db.len();
        if keys > 0 {
            let (expires, avg_ttl) = db.volatile_stats(crate::keyspace::hlc::unix_ms());
            let mut line = Fields::new();
            kv!(line, "keys" => keys, "expires" => expires, "avg_ttl" => avg_ttl);
            f.add(format!("db{i}"), line);
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of value as Redis writes it, in the fields' order.
    #[test]
    fn a_section_is_written_as_redis_writes_it() {
        let mut line = Fields::new();
        line.add("calls", 3u64)
            .add("usec_per_call", Value::float(1.0 / 3.0, 2));
        let mut f = Fields::new();
        f.add("negative", -1i64)
            .add("flag", true)
            .add("cpu", Value::float(0.5, 6))
            .add("perc", Value::percent(12.5))
            .add("name", "spill")
            .add(format!("cmdstat_{}", "get"), line)
            .add("latency_percentiles_usec_ping", Fields::new());
        let mut o = String::new();
        write_section(&mut o, "Stats", &f);
        assert_eq!(
            o,
            "# Stats\r\nnegative:-1\r\nflag:1\r\ncpu:0.500000\r\nperc:12.50%\r\nname:spill\r\n\
             cmdstat_get:calls=3,usec_per_call=0.33\r\nlatency_percentiles_usec_ping:\r\n"
        );
    }
}
