//! The command stream once synced: each command runs as the master client
//! (`commands::run_master`), its exact bytes are relayed to our backlog, and
//! the link acknowledges ten times a second and on GETACK.

use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::link::Peer;
use crate::core::client::{ClientState, MASTER_LINK_ID};
use crate::keyspace::hlc::Hlc;
use crate::protocol::{ParseLimits, Parsed, RequestParser};
use crate::replication::host::Host;

/// The command stream, until the link fails or REPLICAOF changes it.
pub(super) fn stream<H: Host>(srv: &Arc<H>, gen: u64, peer: &mut Peer) -> Result<(), String> {
    let side = &srv.repl().replica;
    let mut client = ClientState::new(MASTER_LINK_ID);
    client.db = side.master_db.load(Relaxed);
    client.internal_addr = master_addr(peer);
    let listed = super::master_client::list(&srv.clients, &side.master_client, peer, &mut client);
    let mut clock = Hlc::new(srv.node_id);
    let stats = srv.new_worker_stats();
    let mut parser = RequestParser::new();
    let mut last_ack = Instant::now() - Duration::from_secs(2);
    // Stream bytes that came with the end of the payload are parsed first.
    let mut link = Link {
        clock: &mut clock,
        stats: &stats,
        client: &mut client,
        parser: &mut parser,
        listed: &listed,
    };
    let mut buffered = peer.start < peer.buf.len();
    // Redis's replicas ACK once a second, from their cron; ten times keeps
    // the master's backlog (which holds what we have not acknowledged) ten
    // times smaller under a heavy write load, for a few bytes a second.
    // The ACKs keep that cadence whether or not writes come (the read
    // wakes us at least once an interval): a write is acknowledged at the
    // next tick, or at once when the master asks (GETACK), never because it
    // arrived. An ACK sent as soon as a write landed after a quiet spell
    // told a failing-over master that a replica SIGSTOPped just before the
    // write had it: a multi-threaded process stops only once the thread
    // the kernel picked for the signal has run, and until then this thread
    // can still read and apply (Redis's failover.tcl, "failover command to
    // any replica works", on a loaded machine; DECISIONS 178).
    const ACK_EVERY: Duration = Duration::from_millis(100);
    const QUIET: Duration = Duration::from_millis(5);
    let _ = peer.conn.s.tcp().set_read_timeout(Some(ACK_EVERY));
    let mut last_bytes = Instant::now();
    loop {
        if side.generation.load(Acquire) != gen {
            return Ok(());
        }
        if last_ack.elapsed() >= ACK_EVERY {
            send_ack(&**srv, peer)?;
            last_ack = Instant::now();
        }
        side.wait_out_pause(gen);
        // (Without a byte for repl-timeout, fill ends the link.)
        if !std::mem::take(&mut buffered) && peer.fill()? == 0 {
            continue;
        }
        // Bytes after a quiet spell: if the process was just told to stop,
        // stop before applying them, as Redis's one thread would.
        if last_bytes.elapsed() >= QUIET {
            wait_out_stop_signal();
        }
        last_bytes = Instant::now();
        if link.apply_buffered(srv, peer)? {
            last_ack = Instant::now();
        }
        // The batch's writes go to the AOF now, as a client's would.
        srv.aof_before_reply();
        srv.repl().backlog.wake_if_dirty();
    }
}

/// Where MONITOR and the slowlog show the master's commands from, as Redis
/// shows its master client: the master's address (the socket's peer).
fn master_addr(peer: &Peer) -> Option<Arc<str>> {
    let addr = peer.conn.s.tcp().peer_addr().ok()?;
    Some(addr.to_string().into())
}

/// What applies the master's commands: the master client and its clock.
struct Link<'a> {
    clock: &'a mut Hlc,
    stats: &'a crate::core::stats::WorkerStats,
    client: &'a mut ClientState,
    parser: &'a mut RequestParser,
    /// The master client's CLIENT LIST record, refreshed once per read.
    listed: &'a super::master_client::Listed<'a>,
}

impl Link<'_> {
    /// Applies the whole commands in the peer's buffer and relays their
    /// bytes to our backlog, answering GETACKs; whether it ACKed. All under
    /// `apply_lock`, so a snapshot's cut sees the data, the offset and the
    /// stream's database of one instant (an RDB saved here, or a
    /// sub-replica's full sync, continues at exactly the right byte).
    fn apply_buffered<H: Host>(&mut self, srv: &Arc<H>, peer: &mut Peer) -> Result<bool, String> {
        let side = &srv.repl().replica;
        let _applying = side.hold_apply();
        let mut acked = false;
        let mut relayed = peer.start;
        loop {
            let pending = &peer.buf[peer.start..];
            let consumed = match self.parser.parse(pending, &ParseLimits::default()) {
                Ok(Parsed::Command { consumed }) => consumed,
                Ok(Parsed::Incomplete) => break,
                Err(e) => return Err(format!("protocol error from master: {}", e.0)),
            };
            let args = self.parser.args(pending);
            let getack = args.len() >= 2
                && args.get(0).eq_ignore_ascii_case(b"replconf")
                && args.get(1).eq_ignore_ascii_case(b"getack");
            if !getack && !args.is_empty() {
                let r = crate::commands::run_master(
                    srv.admin(),
                    self.clock,
                    self.stats,
                    self.client,
                    args,
                );
                if let Err(e) = r {
                    master_error_counted(self.stats, &e);
                    let name = String::from_utf8_lossy(args.get(0)).to_ascii_lowercase();
                    crate::core::propagation::failed(
                        srv,
                        crate::core::propagation::Source::Master,
                        &e,
                        &name,
                    );
                }
            }
            peer.start += consumed;
            if getack {
                // The offset it reports counts the GETACK itself.
                srv.repl()
                    .backlog
                    .append_raw(&peer.buf[relayed..peer.start]);
                relayed = peer.start;
                send_ack(&**srv, peer)?;
                acked = true;
                // Redis's master client ran REPLCONF (CLIENT LIST cmd=).
                if let Some(id) = srv.commands.lookup(b"replconf") {
                    self.client.last_cmd = id;
                }
            }
        }
        // One relay per read, not per command.
        if relayed < peer.start {
            srv.repl()
                .backlog
                .append_raw(&peer.buf[relayed..peer.start]);
        }
        side.master_db.store(self.client.db, Relaxed);
        self.listed
            .refresh(self.client, side.last_io_ms.load(Relaxed));
        Ok(acked)
    }
}

/// REPLCONF ACK <offset> [FACK <aof offset>] (FACK when our AOF is on and
/// fsynced: WAITAOF on our master counts us then).
fn send_ack<H: Host>(srv: &H, peer: &mut Peer) -> Result<(), String> {
    wait_out_stop_signal();
    srv.aof_before_reply();
    let off = srv.repl().backlog.end().to_string();
    if srv.aof_on() && srv.aof_synced_to(srv.aof_end()) {
        peer.send(&[b"REPLCONF", b"ACK", off.as_bytes(), b"FACK", off.as_bytes()])
    } else {
        peer.send(&[b"REPLCONF", b"ACK", off.as_bytes()])
    }
}

/// A SIGSTOP (or another stopping signal) sent to this process and not yet
/// taken: we do not ACK until the stop has happened. Redis's one thread
/// takes the signal before it reads another byte, so a replica stopped
/// before a write never acknowledges it. Ours is several threads, and the
/// kernel stops them all only once the thread it picked for the signal
/// (the main thread) has run: on a loaded machine this link thread could
/// read, apply and ACK a write sent after the stop in that window (Redis's
/// unit/wait and integration/failover, about one run in five under load;
/// DECISIONS 180). The signal sits in the process's shared pending set
/// until taken, and once taken every thread stops at its next system call,
/// so sleeping until the set is clear makes this thread stop right there.
/// Read from /proc before an ACK (ten a second, and one per GETACK) and
/// before applying bytes that end a quiet spell of 5 ms (a busy stream
/// never pays it): Redis's integration/replication-4 stops the replica,
/// writes, and expects the write applied only after it continues.
fn wait_out_stop_signal() {
    // SIGSTOP, SIGTSTP, SIGTTIN and SIGTTOU are signals 19-22 (bits 18-21).
    const STOP_SIGNALS: u64 = 0xf << 18;
    let pending = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("ShdPnd:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .is_some_and(|set| set & STOP_SIGNALS != 0)
    };
    // Bounded: a stop that never happens (a blocked main thread) costs at
    // most a second of ACKs, never the link.
    for _ in 0..1000 {
        if !pending() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A command of the master's stream that failed here counts as Redis's
/// `afterErrorReply` counts an error "sent" to the master client (which
/// reads none): in errorstats under its code, in total_error_replies, and
/// in unexpected_error_replies.
fn master_error_counted(stats: &crate::core::stats::WorkerStats, err: &str) {
    let code = crate::core::error::error_code(err);
    stats.record_error(code);
    stats.unexpected_errors.fetch_add(1, Relaxed);
}
