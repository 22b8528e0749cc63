//! A replica's link, seen from its master: the connection after SYNC or
//! PSYNC, which carries the snapshot and the stream one way and the
//! replica's REPLCONF ACKs the other.
//!
//! Whatever else a replica sends on it runs, as Redis runs it (a replica is
//! a client), but a link carries no replies: a command that produced one
//! drops the link, logged as Redis logs it ("Replica generated a reply to
//! command 'ping', disconnecting it: <client>"), and an error reply is
//! logged as one sent to a replica ("== CRITICAL == This master is sending
//! an error to its replica: ..."). Commands that touch the keyspace (read,
//! write, may-replicate) are refused at admission ([`admit_on_link`]:
//! "Replica can't interact with the keyspace"), as Redis refuses them: a
//! replica is exempt from CLIENT PAUSE, so it must not write around one.
//!
//! The connection lends the link its way of running a command
//! ([`Runner`]: `server/conn.rs`'s dispatch, with that worker's counters),
//! so what runs is admitted, counted and logged as any client's command.
//! The link is read in every phase of a sync (waiting for a snapshot
//! [`Link::wait_serving`], the transfer, the stream [`Link::take_input`]),
//! so a replica that hangs up is noticed at once, and one that waited for a
//! snapshot leaves it (`disk.rs`).

use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use super::ReplicaHandle;
use crate::commands::flags::{MAY_REPLICATE, READONLY, WRITE};
use crate::commands::{CmdError, CommandId};
use crate::core::client::{ClientShared, ClientState};
use crate::core::sockio::{read_some, write_all, QueryBuf};
use crate::core::stats::WorkerStats;
use crate::keyspace::hlc::unix_ms;
use crate::log_warning;
use crate::protocol::{Args, ParseLimits, Parsed, ReplyBuf, RequestParser};
use crate::replication::host::Host;

/// How the connection runs a command the replica sent, and the counters of
/// its worker (INFO's unexpected_error_replies).
pub(crate) struct Runner<'a> {
    pub run: &'a mut dyn FnMut(&mut ClientState, Args, &mut ReplyBuf),
    pub stats: &'a WorkerStats,
}

/// A command on a replica's link that reads, writes or may replicate is
/// refused before it runs, last of replication's checks (Redis's
/// processCommand).
pub(crate) fn admit_on_link(client: &ClientState, flags: u32) -> Result<(), CmdError> {
    let linked = client.replconf.as_ref().is_some_and(|c| c.linked);
    if linked && flags & (READONLY | WRITE | MAY_REPLICATE) != 0 {
        return Err(CmdError::err("Replica can't interact with the keyspace"));
    }
    Ok(())
}

/// The link must close: the replica hung up, broke the protocol or had a
/// command answered.
pub(super) struct Closed;

/// A replica's connection while its master serves it.
pub(super) struct Link<'a, T: AsRawFd> {
    pub io: &'a AsyncFd<T>,
    pub qb: QueryBuf,
    parser: RequestParser,
    client: &'a mut ClientState,
    pub shared: &'a Arc<ClientShared>,
    runner: Runner<'a>,
    pub handle: Arc<ReplicaHandle>,
}

impl<'a, T> Link<'a, T>
where
    T: AsRawFd,
    for<'b> &'b T: Read + Write,
{
    pub(super) fn new(
        (io, qb): (&'a AsyncFd<T>, QueryBuf),
        client: &'a mut ClientState,
        shared: &'a Arc<ClientShared>,
        runner: Runner<'a>,
        handle: Arc<ReplicaHandle>,
    ) -> Self {
        client.replconf.get_or_insert_with(Default::default).linked = true;
        Link {
            io,
            qb,
            parser: RequestParser::new(),
            client,
            shared,
            runner,
            handle,
        }
    }

    /// Reads more of what the replica sends into `qb` (cancel-safe, for
    /// `select!`; the socket is the link's `io`, apart so that the link's
    /// other fields stay free meanwhile).
    pub(super) async fn read(io: &AsyncFd<T>, qb: &mut QueryBuf) -> Result<(), Closed> {
        match read_some(io, qb).await {
            Ok(n) if n > 0 => Ok(()),
            _ => Err(Closed),
        }
    }

    /// Handles the complete commands read: REPLCONF ACKs move the replica's
    /// offsets, the others run. Ok(true) when an ACK came.
    pub(super) fn take_input<H: Host>(&mut self, srv: &H) -> Result<bool, Closed> {
        let Link {
            qb,
            parser,
            client,
            shared,
            runner,
            handle,
            ..
        } = self;
        if !qb.pending().is_empty() {
            // Any input shows the replica alive: it sends newlines while
            // it loads a big payload, as Redis's replicas do.
            handle.ack_ms.store(unix_ms(), Relaxed);
        }
        let mut acked = false;
        loop {
            match parser.parse(qb.pending(), &ParseLimits::default()) {
                Ok(Parsed::Command { consumed }) => {
                    let args = parser.args(qb.pending());
                    let ran = match ack(args) {
                        Some((off, fack)) => {
                            acked |= take_ack(handle, off, fack);
                            Ok(())
                        }
                        None if args.is_empty() => Ok(()),
                        None => run_one(srv, runner, client, shared, args),
                    };
                    qb.consume(consumed);
                    ran?;
                }
                Ok(Parsed::Incomplete) => return Ok(acked),
                Err(_) => return Err(Closed),
            }
        }
    }

    /// Waits for `fut` while serving the link: the replica's commands run
    /// (those that came with its SYNC once `fut` took its first step, as
    /// Redis runs them after SYNC started its snapshot), its hang-up ends
    /// the wait, and a newline goes each second, Redis's keepalive while a
    /// sync is prepared (none while DEBUG SLEEP runs: Redis's blocks the
    /// whole server, and tests rely on the replica timing out then). None:
    /// the link must close.
    pub(super) async fn wait_serving<H: Host, F: Future>(
        &mut self,
        srv: &H,
        fut: F,
    ) -> Option<F::Output> {
        tokio::pin!(fut);
        let first = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
        if let Poll::Ready(r) = first {
            return Some(r);
        }
        self.take_input(srv).ok()?;
        let second = Duration::from_secs(1);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + second, second);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (io, shared) = (self.io, self.shared);
        loop {
            tokio::select! {
                r = &mut fut => return Some(r),
                _ = shared.kill.notified() => return None,
                r = Self::read(io, &mut self.qb) => {
                    r.ok()?;
                    self.take_input(srv).ok()?;
                }
                _ = tick.tick() => {
                    if !srv.repl().replica.debug_sleeping() {
                        write_all(io, b"\n", &shared.kill).await.ok()?;
                    }
                }
            }
        }
    }
}

/// REPLCONF ACK <offset> [FACK <aof offset>]: the offsets, if `args` is one.
fn ack(args: Args) -> Option<(Option<u64>, Option<u64>)> {
    let is = |i: usize, s: &[u8]| args.len() > i && args.get(i).eq_ignore_ascii_case(s);
    if args.len() < 3 || !is(0, b"replconf") || !is(1, b"ack") {
        return None;
    }
    let num = |i: usize| std::str::from_utf8(args.get(i)).ok()?.parse::<u64>().ok();
    let fack = (args.len() >= 5 && is(3, b"fack"))
        .then(|| num(4))
        .flatten();
    Some((num(2), fack))
}

/// Records an ACK's offsets; whether it had a valid one.
fn take_ack(handle: &ReplicaHandle, off: Option<u64>, fack: Option<u64>) -> bool {
    if let Some(f) = fack {
        handle.fack_offset.fetch_max(f, Relaxed);
    }
    let Some(off) = off else {
        return false;
    };
    handle.ack_offset.fetch_max(off, Relaxed);
    handle.ack_ms.store(unix_ms(), Relaxed);
    true
}

/// Runs a command the replica sent; one that produced a reply closes the
/// link (see the module comment).
fn run_one<H: Host>(
    srv: &H,
    runner: &mut Runner,
    client: &mut ClientState,
    shared: &ClientShared,
    args: Args,
) -> Result<(), Closed> {
    let mut out = ReplyBuf::new(client.resp);
    (runner.run)(client, args, &mut out);
    // What the connection would do after such a command has no place on a
    // link: WAIT's wait, a second SYNC (ignored, as Redis), LATTICE.PEER's
    // hand-off, SHUTDOWN's (not honoured from a link, DECISIONS 344).
    client.repl_wait = None;
    client.sync_request = None;
    client.peer_request = None;
    client.shutdown_requested = None;
    if out.is_empty() {
        return Ok(());
    }
    let id = command_id(srv, args);
    let name = id.map_or("<unknown>", |id| srv.commands.full_names[id].as_str());
    let shown = id.map_or("NULL", |id| srv.commands.full_names[id].as_str());
    let line = crate::commands::server_cmds::client::client_line(srv.core(), shared, Some(shown));
    log_warning!("Replica generated a reply to command '{name}', disconnecting it: {line}");
    if let Some(err) = out.buf.strip_prefix(b"-") {
        let end = err
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or(err.len());
        let text = String::from_utf8_lossy(&err[..end.min(4096)]);
        // Redis logs an error its code adds to ("ERR") without the code.
        let text = text.strip_prefix("ERR ").unwrap_or(&text);
        log_warning!(
            "== CRITICAL == This master is sending an error to its replica: '{text}' after processing the command '{name}'"
        );
        runner.stats.unexpected_errors.fetch_add(1, Relaxed);
    }
    Err(Closed)
}

/// The command (or subcommand) `args` names, if it is one.
fn command_id<H: Host>(srv: &H, args: Args) -> Option<CommandId> {
    let t = &srv.commands;
    let id = t.lookup(args.get(0))?;
    if t.has_subcommands(id) && args.len() >= 2 {
        return t.lookup_sub(id, args.get(1));
    }
    Some(id)
}
