//! One connection: read, parse, execute, write.
//!
//! The loop reads whatever the socket has into the query buffer, executes
//! every complete command in it (a pipeline of any depth) with replies
//! appended to one output buffer, and writes what the socket takes of it.
//! Only a framing error or a limit breach closes the connection; command
//! errors are replies. Replies the socket does not take are held while the
//! connection reads and runs the client's next commands, as Redis does, up
//! to `HELD_MAX` (then back-pressure: no more input until the socket takes
//! some); a batch stops executing once `OUT_BATCH_MAX` of replies are held;
//! output is subject to `client-output-buffer-limit` (see `core/client.rs`)
//! and the client's memory to `maxmemory-clients` (`core/client_mem.rs`:
//! the connection publishes it at the end of a batch and when a command's
//! replies reallocate the reply buffer).
//! [`dispatch`] takes a client's parsed arguments to `commands::call`: lookup,
//! arity, auth and ACL here, then admission and the run with its bookkeeping
//! (MONITOR, tracking, stats, slowlog) there, then the reply's CLIENT REPLY mode.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
// quanta reads the TSC (calibrated against the OS clock) where it is usable:
// ~10 ns against ~25-50 ns for clock_gettime on a VM, and every command
// takes one reading (see `process_input`). Redis does the same (monotonic.c).
use quanta::Instant;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::lookahead::Lookahead;
use super::tls::HandOff;
use super::{NewConn, Server};
use crate::commands::call::{self, Caller};
use crate::commands::{flags, CmdError, Ctx};
use crate::core::client::{ClientState, Push, ReplyMode};
use crate::core::client_mem;
use crate::core::ctx::ActiveWrite;
use crate::core::sockio::{ConnIo, QueryBuf};
use crate::core::stats::WorkerStats;
use crate::keyspace::hlc::{unix_ms, Hlc};
use crate::protocol::{Args, ParseLimits, Parsed, ReplyBuf, RequestParser};
use crate::{log_verbose, log_warning};

/// What one worker thread owns: its clock and counters.
pub(crate) struct Worker {
    pub clock: RefCell<Hlc>,
    pub stats: Arc<WorkerStats>,
    /// An `Instant` and the unix time in µs it corresponds to: wall-clock time is
    /// derived from the monotonic reading each command takes anyway, so a
    /// command costs one clock read. The cron refreshes it (`sync_wall_clock`).
    wall_base: Cell<(Instant, u64)>,
}

/// Unix time in microseconds.
fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl Worker {
    pub(crate) fn new(srv: Arc<Server>, stats: Arc<WorkerStats>) -> Self {
        Worker {
            clock: RefCell::new(Hlc::new(srv.node_id)),
            stats,
            wall_base: Cell::new((Instant::now(), unix_us())),
        }
    }

    /// Re-reads the wall clock (follows system time adjustments).
    pub(crate) fn sync_wall_clock(&self) {
        self.wall_base.set((Instant::now(), unix_us()));
    }

    /// The unix ms at monotonic instant `t`.
    #[inline]
    pub(crate) fn unix_ms_at(&self, t: Instant) -> u64 {
        // Added in microseconds and truncated once, so the result is never
        // behind a direct clock read by more than that read's own truncation.
        let (base, us) = self.wall_base.get();
        (us + t.saturating_duration_since(base).as_micros() as u64) / 1000
    }
}

/// Redis 7.0.15's reply to a non-loopback client in protected mode, byte
/// for byte ("Setup a an" included: compared with redis-server's).
const PROTECTED_DENIED: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// Protected mode's decision, as Redis 7.0's `clientAcceptHandler`: with
/// `protected-mode yes` and no password for the default user, a TCP client
/// whose address is not loopback is refused, whatever `bind` says; unix
/// socket clients (no address) are served. An IPv4 address mapped into
/// IPv6 (`::ffff:127.0.0.1`, on a dual-stack socket) counts as what it maps.
pub(crate) fn protected_refuses(
    peer: Option<std::net::SocketAddr>,
    protected_mode: bool,
    has_password: bool,
) -> bool {
    protected_mode && !has_password && peer.is_some_and(|a| !a.ip().to_canonical().is_loopback())
}

/// Serves one accepted connection until it closes.
pub(crate) async fn serve(srv: Arc<Server>, worker: Rc<Worker>, conn: NewConn) {
    match conn {
        NewConn::Tcp(s, addr) => {
            let _ = s.set_nonblocking(true);
            set_keepalive(&s, srv.hot.tcp_keepalive.load(Relaxed));
            let laddr = s.local_addr().ok();
            if let Some(ring) = super::uring::current() {
                let io = super::uring::UringIo::new(ring, s);
                return serve_stream(srv, worker, io, Some(addr), laddr, false).await;
            }
            serve_epoll(srv, worker, s, Some(addr), laddr, false).await
        }
        NewConn::Tls(s, addr) => {
            let _ = s.set_nonblocking(true);
            set_keepalive(&s, srv.hot.tcp_keepalive.load(Relaxed));
            let laddr = s.local_addr().ok();
            let Some(config) = srv.core.tls.server() else {
                return;
            };
            match super::tls::TlsStream::new(s, config, addr.to_string()) {
                Ok(t) => serve_epoll(srv, worker, t, Some(addr), laddr, true).await,
                Err(e) => log_verbose!("Error accepting a client connection: {e}"),
            }
        }
        NewConn::Unix(s) => {
            let _ = s.set_nonblocking(true);
            serve_epoll(srv, worker, s, None, None, false).await
        }
    }
}

fn set_keepalive(s: &std::net::TcpStream, secs: u64) {
    if secs == 0 {
        return;
    }
    let fd = s.as_raw_fd();
    let on: libc::c_int = 1;
    let idle: libc::c_int = secs as libc::c_int;
    // SAFETY: fd is a valid open socket owned by `s` for the duration of the
    // calls, and each option value points to a live c_int of the right size.
    unsafe {
        let sz = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_KEEPALIVE,
            &on as *const _ as *const libc::c_void,
            sz,
        );
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_KEEPIDLE,
            &idle as *const _ as *const libc::c_void,
            sz,
        );
    }
}

/// Replies held for a client that has not authenticated, at most.
const UNAUTH_OUTPUT_MAX: usize = 1024;

/// Serves a connection on epoll (TLS, unix sockets, `io-uring no`).
async fn serve_epoll<T>(
    srv: Arc<Server>,
    worker: Rc<Worker>,
    stream: T,
    addr: Option<std::net::SocketAddr>,
    laddr: Option<std::net::SocketAddr>,
    tls: bool,
) where
    T: AsRawFd + HandOff,
    for<'a> &'a T: Read + Write,
{
    // SAFETY: `stream` is an owned std TcpStream/UnixStream moved into the
    // AsyncFd; its fd stays open and unchanged until the AsyncFd drops it.
    let Ok(io) = (unsafe { AsyncFd::register(stream) }) else {
        return;
    };
    serve_stream(srv, worker, io, addr, laddr, tls).await
}

async fn serve_stream<I>(
    srv: Arc<Server>,
    worker: Rc<Worker>,
    io: I,
    addr: Option<std::net::SocketAddr>,
    laddr: Option<std::net::SocketAddr>,
    tls: bool,
) where
    I: ConnIo,
    I::Stream: HandOff,
    for<'a> &'a I::Stream: Read + Write,
{
    let fd = io.raw_fd();
    let id = srv.clients.next_id();
    if srv.clients.len() >= srv.hot.maxclients.load(Relaxed) {
        srv.rejected_connections.fetch_add(1, Relaxed);
        // One non-blocking write, as Redis: a refused client gets no more.
        let _ = io.write_now(b"-ERR max number of clients reached\r\n");
        return;
    }
    if protected_refuses(
        addr,
        srv.hot.protected_mode.load(Relaxed),
        !srv.acl.default_user().nopass,
    ) {
        srv.rejected_connections.fetch_add(1, Relaxed);
        let _ = io.write_now(PROTECTED_DENIED.as_bytes());
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let shared = srv.clients.register(id, addr, laddr, fd, unix_ms(), tx);
    let mut registered = Registered {
        srv: &srv,
        client: ClientState::new(id),
    };
    let client = &mut registered.client;
    client.local = addr.is_none_or(|a| a.ip().to_canonical().is_loopback());
    client.authenticated = !srv.acl.auth_required();
    crate::commands::connection::set_user(&srv, client, srv.acl.default_user());
    client.shared = Some(shared.clone());
    let mut qb = QueryBuf::new();
    let mut parser = RequestParser::new();
    let mut out = ReplyBuf::default();

    // Set when process_input stopped early because `out` grew large: the
    // commands left in the query buffer run after the write, before any read.
    let mut more_input = false;
    // `out.buf[..sent]` is written; the rest waits for the socket, and the
    // connection reads and runs commands meanwhile, as Redis does (a plain
    // socket; a TLS one writes its replies before it reads on).
    let mut sent = 0;
    let mut mem = client_mem::Publisher::default();
    mem.update(
        &shared,
        qb.memory() + out.buf.capacity() + client_mem::structures(client),
    );
    // The first bytes of a TCP connection are looked at once: a TLS
    // handshake sent to the plain port is logged and closed.
    let mut first_read = !tls && addr.is_some();
    'conn: loop {
        let held = sent < out.buf.len();
        // Past HELD_MAX of held replies, no more commands run until the
        // socket takes some (back-pressure, for a client that never reads).
        let room = out.buf.len() - sent <= HELD_MAX;
        // Waiting for input with nothing pending: a script past its
        // threshold on this thread may answer this client (BUSY).
        // (Not a TLS connection: its socket carries records, not commands.)
        let quiet = !tls && !more_input && !held && qb.pending().is_empty() && !io.buffered();
        let _idle = quiet.then(|| Idle::new(id, fd));
        let timeout = srv.hot.timeout_secs.load(Relaxed);
        let idle = timeout > 0 && !client.monitor && client.pubsub.total() == 0;
        let n = tokio::select! {
            biased;
            _ = shared.kill.notified() => break 'conn,
            p = rx.recv() => match p {
                Some(Push::Bytes(b)) => {
                    if !take_push(&io, &b, &mut out, &mut sent, &shared) { break 'conn; }
                    if account(&srv, client, &mut mem, &qb, &mut out, &mut sent, &shared) {
                        break 'conn;
                    }
                    continue 'conn;
                }
                Some(Push::Kill) | None => break 'conn,
            },
            w = io.write_more(&out.buf, &mut sent), if held => {
                if w.is_err() { break 'conn; }
                if account(&srv, client, &mut mem, &qb, &mut out, &mut sent, &shared) {
                    break 'conn;
                }
                continue 'conn;
            }
            _ = std::future::ready(()), if more_input && room => 0,
            r = io.read_some(&mut qb), if !more_input && room => match r {
                Ok(0) | Err(_) => break 'conn,
                Ok(n) => n,
            },
            _ = tokio::time::sleep(std::time::Duration::from_secs(timeout)), if idle => {
                log_verbose!("Closing idle client");
                break 'conn;
            }
        };
        // Pushes already queued go before this input: a CLIENT KILL answered
        // before this client's next command arrived closes it before it runs.
        while let Ok(p) = rx.try_recv() {
            match p {
                Push::Bytes(b) => {
                    if !take_push(&io, &b, &mut out, &mut sent, &shared) {
                        break 'conn;
                    }
                }
                Push::Kill => break 'conn,
            }
        }
        if std::mem::take(&mut first_read) && tls_hello(qb.pending()) {
            log_warning!(
                "Closing the connection of {}: it sent a TLS handshake to the plain port (TLS is served on tls-port)",
                shared.addr
            );
            break 'conn;
        }
        worker.stats.add_net(n as u64, 0);
        shared.last_interaction_ms.store(unix_ms(), Relaxed);
        let held_before = out.buf.len() - sent;
        let batch = process_input(
            &srv,
            &worker,
            &mut *client,
            &mut parser,
            &mut qb,
            (&mut out, sent),
            &mut mem,
        )
        .await;
        let close = batch.close;
        if close {
            // QUIT, or an ACL change that ends this client: it leaves the
            // registries before its last reply goes out, so once that reply
            // is read no command on another connection finds it (Redis frees
            // it before serving the next event; DECISIONS 22: a reply read
            // happens before what its client sends next). Client eviction
            // stops counting it too.
            shared.mem_kind_counted.store(false, Relaxed);
            leave_registries(&srv, client);
        }
        more_input = batch.more;
        crate::commands::tracking::flush_bcast(&srv);
        qb.shrink_if_idle();
        shared.qbuf.store(shown_qbuf(&qb, &parser), Relaxed);
        if batch.evicted {
            break;
        }
        if let Some(wait) = super::hooks::after_batch(&srv) {
            tokio::time::sleep(wait).await;
        }
        if out.buf.len() > sent {
            if batch.ran > 1 {
                // A pipelined batch's replies wait for the other
                // connections this turn woke to run theirs: the client then
                // reads many replies per wake-up, as Redis's replies wait
                // for the end of its event loop's turn (DECISIONS 335).
                tokio::task::yield_now().await;
            }
            super::hooks::before_reply(&srv);
            worker
                .stats
                .add_net(0, (out.buf.len() - sent - held_before) as u64);
            shared.obuf.store(out.buf.len() - sent, Relaxed);
            let limit = output_limit(&srv, client);
            if (limit.hard > 0 || limit.soft > 0) && shared.check_output_limit(&limit, unix_ms()) {
                break;
            }
            if !client.authenticated && srv.acl.auth_required() {
                // A client that has not authenticated may not make the
                // server hold its replies: past 1 KiB, or whatever the
                // socket does not take at once, it is closed (Redis's fix
                // for CVE-2025-21605).
                if out.len() > UNAUTH_OUTPUT_MAX || !io.write_now(&out.buf[sent..]) {
                    log_verbose!("Closing unauthenticated client over its output limit: id={id}");
                    break;
                }
                sent = out.buf.len();
            } else if tls || must_drain(client, close) {
                // Before a state that writes on its own (or closes), the
                // replies are all out.
                if io.write_all(&out.buf[sent..], &shared.kill).await.is_err() {
                    break;
                }
                sent = out.buf.len();
            } else if io.write_held(&out.buf, &mut sent).is_err() {
                break;
            }
        }
        if account(&srv, client, &mut mem, &qb, &mut out, &mut sent, &shared) {
            break;
        }
        if let Some(w) = client.repl_wait.take() {
            // WAIT/WAITAOF: the replies before it are out; answer once the
            // replicas (or the disk) acknowledged, then read on.
            crate::replication::master::answer_wait(&*srv, w, &shared.kill, &mut out).await;
            if io.write_all(&out.buf, &shared.kill).await.is_err() {
                break;
            }
            out.buf.clear();
            more_input = true;
        }
        if let Some(req) = client.peer_request.take() {
            // LATTICE.PEER: the connection becomes an active peer's feed,
            // on a thread of its own (with its TLS session, if any),
            // taken over from epoll (a ring's receive is stopped first, and
            // what it had received joins the query buffer).
            let Ok(io) = io.into_epoll(&mut qb).await else {
                break;
            };
            let fd = io.get_ref().as_raw_fd();
            let addr = shared.addr.clone();
            let host = srv.peer_host();
            let tls = io.get_ref().take_tls();
            crate::replication::active::serve::hand_off(&host, fd, qb.pending(), req, addr, tls);
            break;
        }
        if let Some(req) = client.sync_request.take() {
            // PSYNC/SYNC: from here on this connection is a replica's feed,
            // which client eviction does not count; what the replica sends
            // on it runs as a command would here.
            shared.mem_kind_counted.store(false, Relaxed);
            srv.clients.book.uncount(&shared);
            let mut run = |c: &mut ClientState, a: Args, o: &mut ReplyBuf| {
                dispatch(&srv, &worker, c, o, a, Instant::now());
            };
            let link = crate::replication::master::Runner {
                run: &mut run,
                stats: &worker.stats,
            };
            // The feeder runs on epoll (see LATTICE.PEER above).
            let Ok(io) = io.into_epoll(&mut qb).await else {
                break;
            };
            crate::replication::master::serve_replica(&srv, &io, qb, client, req, &shared, link)
                .await;
            break;
        }
        if client.block.request.is_some() {
            if !block_wait(&srv, &worker, &mut *client, &io, &mut qb, &mut out, &shared).await {
                break;
            }
            more_input = true;
            crate::commands::tracking::flush_bcast(&srv);
        }
        if let Some(kind) = client.shutdown_requested.take() {
            // SHUTDOWN: a blocked client until the main thread decides; on
            // success the process exits under it.
            let attempt = srv.request_shutdown(kind);
            shared.flags.lock().push('b');
            srv.shutdown.refused_after(attempt, &shared.kill).await;
            shared.flags.lock().retain(|c| c != 'b');
            out.error("ERR Errors trying to SHUTDOWN. Check logs.");
            if io.write_all(&out.buf, &shared.kill).await.is_err() {
                break;
            }
            out.buf.clear();
            more_input = true;
        }
        if close {
            break;
        }
    }
}

/// The `client-output-buffer-limit` class of `client`.
fn output_limit(srv: &Server, client: &ClientState) -> crate::core::client::ObufLimit {
    let limits = *srv.hot.obuf_limits.read();
    if client.monitor {
        limits.monitor()
    } else if client.pubsub.total() > 0 {
        limits.pubsub
    } else {
        limits.normal
    }
}

/// Whether the batch left a state that writes on its own or closes, so
/// the replies held must be written first.
fn must_drain(client: &ClientState, close: bool) -> bool {
    close
        || client.repl_wait.is_some()
        || client.peer_request.is_some()
        || client.sync_request.is_some()
        || client.block.request.is_some()
        || client.shutdown_requested.is_some()
}

/// CLIENT LIST's `qbuf`: the bytes not yet run, but only the body of a big
/// argument being received, as Redis shows its query buffer then.
fn shown_qbuf(qb: &QueryBuf, parser: &RequestParser) -> usize {
    let pending = qb.end - qb.start;
    match parser.waiting_bulk() {
        Some((body, need)) if need - body >= BIG_ARG => pending.saturating_sub(body),
        _ => pending,
    }
}

/// Takes a push into the reply buffer, behind the replies held, and starts
/// writing if none were: the loop writes it as it writes replies, never
/// waiting here, so the channel is drained at once and a client that does
/// not read holds its pushes in its reply buffer, counted (used memory,
/// client eviction) and limited as Redis's output buffer. Pushes still in
/// the channel are in flight (`PushBuf`), which maxmemory leaves out.
fn take_push<I: ConnIo>(
    io: &I,
    b: &[u8],
    out: &mut ReplyBuf,
    sent: &mut usize,
    shared: &crate::core::client::ClientShared,
) -> bool {
    let idle = *sent == out.buf.len();
    out.buf.extend_from_slice(b);
    shared.push_written(b.len());
    if idle && io.write_held(&out.buf, sent).is_err() {
        return false;
    }
    shared.obuf.store(out.buf.len() - *sent, Relaxed);
    true
}

/// After a write or a batch: forgets the replies written, then publishes
/// the client's memory (`core/client_mem.rs`), which may evict clients.
/// Returns whether this client must close (evicted).
fn account(
    srv: &Server,
    client: &ClientState,
    mem: &mut client_mem::Publisher,
    qb: &QueryBuf,
    out: &mut ReplyBuf,
    sent: &mut usize,
    shared: &crate::core::client::ClientShared,
) -> bool {
    if *sent == out.buf.len() {
        *sent = 0;
        out.buf.clear();
        shared.obuf.store(0, Relaxed);
        if out.buf.capacity() > 1 << 20 && !srv.hot.reply_no_resize.load(Relaxed) {
            out.buf = Vec::with_capacity(16 * 1024);
        }
    } else {
        shared.obuf.store(out.buf.len() - *sent, Relaxed);
        if *sent > 1 << 20 && *sent * 2 > out.buf.len() {
            // Most of it is written: give the front back.
            out.buf.drain(..*sent);
            *sent = 0;
        }
    }
    let base = qb.memory() + out.buf.capacity() + client_mem::structures(client);
    mem.update(shared, base)
}

/// Whether `b` starts as a TLS ClientHello record does (handshake, 3.x),
/// which no RESP or inline command does.
fn tls_hello(b: &[u8]) -> bool {
    b.len() >= 3 && b[0] == 0x16 && b[1] == 0x03 && b[2] <= 0x04
}

/// This worker's connections waiting for input with nothing pending:
/// client id -> socket. A map, not a list: every request at pipeline 1
/// enters and leaves it, and a list's removal scanned all of them (~500
/// instructions a request with 50 clients, callgrind; O(1) now).
type IdleMap = hashbrown::HashMap<u64, std::os::fd::RawFd, foldhash::fast::FixedState>;

thread_local! {
    static IDLE: RefCell<IdleMap> = RefCell::new(IdleMap::default());
}

/// A connection's place in `IDLE` while it waits for input.
struct Idle(u64);

impl Idle {
    fn new(id: u64, fd: std::os::fd::RawFd) -> Idle {
        IDLE.with(|v| v.borrow_mut().insert(id, fd));
        Idle(id)
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        IDLE.with(|v| v.borrow_mut().remove(&self.0));
    }
}

/// Called from a script's count hook while it runs past
/// `busy-reply-threshold` (Redis's processEventsWhileBlocked): this worker's
/// other clients are stuck behind the script, so the complete commands
/// waiting on their sockets are answered here, in order: SCRIPT KILL,
/// FUNCTION KILL and SHUTDOWN NOSAVE act, every other command gets BUSY.
/// Only connections waiting for input with nothing buffered are served (a
/// partial command stays in the socket: the bytes are peeked, and only the
/// complete commands answered are taken).
pub(crate) fn serve_while_busy(srv: &Arc<Server>) {
    let idle: Vec<std::os::fd::RawFd> = IDLE.with(|v| v.borrow().values().copied().collect());
    let ring = super::uring::current();
    if let Some(r) = &ring {
        r.reap_now(); // once for all of this thread's ring connections
    }
    for fd in idle {
        let mut out = ReplyBuf::new(2);
        let on_ring = ring
            .as_ref()
            .is_some_and(|r| r.answer_queued(fd, |queued| answer_commands(srv, queued, &mut out)));
        if !on_ring && !answer_socket(srv, fd, &mut out) {
            continue;
        }
        if !out.buf.is_empty() {
            // SAFETY: `fd` is the socket of a connection task of this thread,
            // open while it is in IDLE (the task removes it before it drops
            // the socket), with no send of the ring in flight (nothing held).
            unsafe {
                libc::send(
                    fd,
                    out.buf.as_ptr().cast(),
                    out.buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
        }
    }
}

/// An epoll connection's part of `serve_while_busy`: answers the complete
/// commands waiting in the socket and takes exactly their bytes (false if
/// there were none).
fn answer_socket(srv: &Arc<Server>, fd: std::os::fd::RawFd, out: &mut ReplyBuf) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: `fd` as in `serve_while_busy`; `buf` is writable for its length.
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n <= 0 {
        return false;
    }
    let used = answer_commands(srv, &buf[..n as usize], out);
    if used > 0 {
        // SAFETY: as above; this takes exactly the bytes parsed.
        unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), used, libc::MSG_DONTWAIT) };
    }
    used > 0
}

/// Answers the complete commands at the start of `input` (a partial one
/// stays for the connection); returns the bytes they took.
fn answer_commands(srv: &Arc<Server>, input: &[u8], out: &mut ReplyBuf) -> usize {
    let mut parser = RequestParser::new();
    let limits = ParseLimits::default();
    let mut used = 0;
    while let Ok(Parsed::Command { consumed }) = parser.parse(&input[used..], &limits) {
        let args = parser.args(&input[used..]);
        if !args.is_empty() {
            answer_busy(srv, args, out);
        }
        used += consumed;
    }
    used
}

/// One command of a client served by `serve_while_busy`.
fn answer_busy(srv: &Arc<Server>, args: Args, out: &mut ReplyBuf) {
    let eval = srv.scripts.busy.runs().first().is_none_or(|r| r.eval);
    let is = |i: usize, s: &str| args.len() > i && args.get(i).eq_ignore_ascii_case(s.as_bytes());
    if (is(0, "script") || is(0, "function")) && is(1, "kill") && args.len() == 2 {
        match crate::scripting::kill(srv, is(0, "script")) {
            Ok(()) => out.ok(),
            Err(e) => out.error(&e.render()),
        }
    } else if is(0, "function") && is(1, "stats") && args.len() == 2 {
        if let Err(e) = crate::scripting::function_stats(srv, out) {
            out.error(&e.render());
        }
    } else if is(0, "shutdown") && args.iter().any(|a| a.eq_ignore_ascii_case(b"nosave")) {
        let flags = crate::core::admin::ShutdownFlags {
            nosave: true,
            now: true,
            ..Default::default()
        };
        srv.request_shutdown(crate::core::admin::ShutdownKind::Command(flags));
    } else {
        out.error(&crate::scripting::busy_error(eval).render());
    }
}

/// A registered client: however its connection ends, a handler's panic
/// included (the task's future is dropped while unwinding), it leaves the
/// registries (pub/sub, tracking, CLIENT LIST and the maxclients count).
struct Registered<'a> {
    srv: &'a Server,
    client: ClientState,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        leave_registries(self.srv, &mut self.client);
    }
}

/// Takes `client` out of the registries (idempotent).
fn leave_registries(srv: &Server, client: &mut ClientState) {
    let id = client.id;
    crate::commands::pubsub::remove_client(srv, client);
    srv.tracking.remove_client(id);
    srv.clients.unregister(id);
}

/// Replies held before they are written: past this, complete commands wait
/// in the query buffer until `out` is written, so a pipeline of big replies
/// to a slow reader never piles up in memory (back-pressure).
const OUT_BATCH_MAX: usize = 4 << 20;

/// Replies a connection holds for a socket that does not take them, at
/// most (give or take a batch's): past it, the connection stops reading and
/// running the client's commands. Redis holds without bound (only
/// `client-output-buffer-limit` and client eviction close such a client);
/// this keeps one client that never reads from using the memory of many.
const HELD_MAX: usize = 32 << 20;

/// What a run of [`process_input`] left: whether to close the connection,
/// whether commands are left in the query buffer, and how many ran.
struct Batch {
    close: bool,
    more: bool,
    ran: u32,
    /// Client eviction closed this client during the batch.
    evicted: bool,
}

/// An argument this long is read into a query buffer sized for it at once
/// (Redis's PROTO_MBULK_BIG_ARG).
const BIG_ARG: usize = 32 * 1024;

/// Executes the complete commands in the query buffer. Returns whether the
/// connection must close (QUIT, protocol error, query buffer limit),
/// whether it stopped early with commands left (`out` reached
/// OUT_BATCH_MAX), and how many commands ran ([`Batch`]).
async fn process_input(
    srv: &Arc<Server>,
    worker: &Worker,
    client: &mut ClientState,
    parser: &mut RequestParser,
    qb: &mut QueryBuf,
    (out, sent): (&mut ReplyBuf, usize),
    mem: &mut client_mem::Publisher,
) -> Batch {
    // CLIENT LIST's qbuf while the batch runs: the whole read, the running
    // command included, as Redis's query buffer until the batch is done.
    if let Some(sh) = &client.shared {
        sh.qbuf.store(qb.end - qb.start, Relaxed);
    }
    // One clock read per command: each command's end is the next one's start.
    let mut t = Instant::now();
    let mut ran = 0;
    // A command whose replies reallocated the reply buffer publishes the
    // client's memory at once (client eviction), checking the output
    // buffer limit first, as Redis does on each reply.
    let mut out_cap = out.buf.capacity();
    // The keys of the commands ahead, prefetched (`lookahead.rs`).
    let mut ahead = Lookahead::new();
    loop {
        ahead.before_command(&srv.keyspace, client.db, qb.pending());
        // Per command: an AUTH earlier in this batch lifts the
        // unauthenticated caps for the commands after it, as in Redis.
        let limits = ParseLimits {
            max_bulk_len: srv.hot.proto_max_bulk_len.load(Relaxed),
            unauthenticated: !client.authenticated && srv.acl.auth_required(),
            ..Default::default()
        };
        match parser.parse(qb.pending(), &limits) {
            Ok(Parsed::Command { consumed }) => {
                let args = parser.args(qb.pending());
                if !args.is_empty() {
                    if let Some(wait) = pause_wait(srv, client, args) {
                        // A paused client is a blocked client, as in Redis
                        // (INFO blocked_clients, CLIENT LIST flags=b).
                        let shared = client.shared.clone();
                        if let Some(sh) = &shared {
                            sh.flags.lock().push('b');
                        }
                        wait.await;
                        if let Some(sh) = &shared {
                            sh.flags.lock().retain(|c| c != 'b');
                        }
                        t = Instant::now();
                    }
                    t = dispatch(srv, worker, client, out, parser.args(qb.pending()), t);
                    ran += 1;
                }
                qb.consume(consumed);
                if out.buf.capacity() != out_cap {
                    out_cap = out.buf.capacity();
                    if grew_over(srv, client, mem, qb, (out, sent)) {
                        return Batch {
                            close: true,
                            more: false,
                            ran,
                            evicted: true,
                        };
                    }
                }
                if client.block.request.is_some()
                    || client.repl_wait.is_some()
                    || client.shutdown_requested.is_some()
                    || client.sync_request.is_some()
                {
                    return Batch {
                        close: false,
                        more: qb.start != qb.end,
                        ran,
                        evicted: false,
                    };
                }
                if srv.blocking.busy() {
                    // Clients this command woke are served before it replies.
                    srv.blocking
                        .settle(std::time::Duration::from_millis(200))
                        .await;
                }
                if client.close_after_reply {
                    return Batch {
                        close: true,
                        more: false,
                        ran,
                        evicted: false,
                    };
                }
                if out.len() >= OUT_BATCH_MAX {
                    return Batch {
                        close: false,
                        more: qb.start != qb.end,
                        ran,
                        evicted: false,
                    };
                }
            }
            Ok(Parsed::Incomplete) => {
                if let Some((body, need)) = parser.waiting_bulk() {
                    if need - body >= BIG_ARG {
                        qb.reserve(need);
                    }
                }
                break;
            }
            Err(e) => {
                out.error(&format!("ERR Protocol error: {}", e.0));
                log_verbose!("Protocol error ({}) from client: id={}", e.0, client.id);
                return Batch {
                    close: true,
                    more: false,
                    ran,
                    evicted: false,
                };
            }
        }
    }
    let pending = qb.end - qb.start;
    if pending > srv.hot.query_buffer_limit.load(Relaxed) {
        log_warning!(
            "Closing client that reached max query buffer length: id={} qbuf={pending}",
            client.id
        );
        return Batch {
            close: true,
            more: false,
            ran,
            evicted: false,
        };
    }
    Batch {
        close: false,
        more: false,
        ran,
        evicted: false,
    }
}

/// After a command reallocated the reply buffer: closes the client if its
/// output is over its limit, else publishes its memory (which may evict
/// it). Returns whether it must close now. `out.buf[..sent]` is written.
fn grew_over(
    srv: &Server,
    client: &ClientState,
    mem: &mut client_mem::Publisher,
    qb: &QueryBuf,
    (out, sent): (&ReplyBuf, usize),
) -> bool {
    let Some(sh) = &client.shared else {
        return false;
    };
    sh.obuf.store(out.buf.len() - sent, Relaxed);
    let limit = output_limit(srv, client);
    if (limit.hard > 0 || limit.soft > 0) && sh.check_output_limit(&limit, unix_ms()) {
        return true;
    }
    let base = qb.memory() + out.buf.capacity() + client_mem::structures(client);
    mem.update(sh, base)
}

/// If CLIENT PAUSE applies to this command, a future that resolves when the
/// pause ends.
fn pause_wait(
    srv: &Arc<Server>,
    client: &ClientState,
    args: Args,
) -> Option<impl std::future::Future<Output = ()>> {
    let until = srv.pause_until_ms.load(Relaxed);
    if until == 0 || client.monitor {
        return None;
    }
    // A command that will be rejected (unknown, wrong arity, no auth) gets
    // its error at once, as in Redis.
    let id = lookup_and_check(srv, client, args, false).ok()?;
    let all = srv.pause_all.load(Relaxed);
    let f = call::effective_flags(srv, client, id, args);
    let pausable = all || f & (flags::WRITE | flags::MAY_REPLICATE) != 0;
    if !pausable || unix_ms() >= until {
        return None;
    }
    let srv = srv.clone();
    Some(async move {
        loop {
            let until = srv.pause_until_ms.load(Relaxed);
            let now = unix_ms();
            if until == 0 || now >= until {
                return;
            }
            let notified = srv.unpaused.notified();
            let _ =
                tokio::time::timeout(std::time::Duration::from_millis(until - now), notified).await;
        }
    })
}

/// Executes one command and appends its reply to `out`. `start` is when the
/// command started; returns when it ended. Lookup and ACL here, admission
/// and the run through `call()` (commands/call.rs), then what a client's
/// reply needs: CLIENT REPLY and the invalidations of its own writes.
pub(crate) fn dispatch(
    srv: &Arc<Server>,
    worker: &Worker,
    client: &mut ClientState,
    out: &mut ReplyBuf,
    args: Args,
    start: Instant,
) -> Instant {
    out.resp = client.resp;
    if client.acl_gen != srv.acl.generation() {
        srv.acl.refresh(client);
    }
    let mut clock = worker.clock.borrow_mut();
    let stats = &*worker.stats;
    let admitted = lookup_and_check(srv, client, args, true).and_then(|id| {
        match call::admit(srv, srv, &mut clock, stats, client, id, args) {
            Ok(_flags) => Ok(id),
            Err(e) => Err((Some(id), e)),
        }
    });
    // Invalidations of keys evicted just now go ahead of the reply (Redis).
    crate::commands::tracking::append_deferred(srv, client.id, out);
    let mark = out.len();
    // In MULTI, commands are queued (Ok(None)) instead of run.
    let mut end = start;
    let ran = match crate::commands::multi::intercept(srv, client, out, args, admitted) {
        Err((id, e)) => {
            call::count_rejected(stats, id, &e);
            out.buf.truncate(mark);
            out.error(&e.render());
            None
        }
        Ok(None) => None,
        Ok(Some(id)) => {
            let mut ctx = Ctx {
                core: srv,
                admin: srv,
                client: &mut *client,
                out: &mut *out,
                clock: &mut clock,
                stats,
                now_ms: worker.unix_ms_at(start),
                replay_version: None,
                sent: Some(args),
                active: ActiveWrite::for_command(srv, srv.commands.get(id).flags),
            };
            let (_, ended) = call::call(&mut ctx, id, args, Caller::Client, Some(start));
            end = ended.unwrap_or(start);
            Some(id)
        }
    };
    drop(clock);
    if let (Some(id), Some(sh)) = (ran, &client.shared) {
        sh.last_cmd.store(id, Relaxed);
        sh.db.store(client.db, Relaxed);
    }
    match client.reply_mode {
        ReplyMode::On => {}
        ReplyMode::Off => out.buf.truncate(mark),
        ReplyMode::Skip => {
            out.buf.truncate(mark);
            client.reply_mode = ReplyMode::On;
        }
        ReplyMode::SkipNext => {
            out.buf.truncate(mark);
            client.reply_mode = ReplyMode::Skip;
        }
    }
    if let Some(id) = ran {
        crate::commands::tracking::after_command(srv, client, id, out);
    }
    end
}

/// Resolves the command (and subcommand) and checks arity, auth and the
/// user's ACL (a denial goes to ACL LOG when `log` is set).
fn lookup_and_check(
    srv: &Server,
    client: &ClientState,
    args: Args,
    log: bool,
) -> Result<usize, (Option<usize>, CmdError)> {
    let name = args.get(0);
    let Some(mut id) = srv.commands.lookup(name) else {
        if let Some(e) = crate::commands::unbuilt::not_built(name) {
            return Err((None, e));
        }
        let shown: Vec<String> = args
            .iter()
            .skip(1)
            .take(16)
            .map(|a| String::from_utf8_lossy(&a[..a.len().min(128)]).into_owned())
            .collect();
        return Err((
            None,
            CmdError::UnknownCommand {
                name: String::from_utf8_lossy(&name[..name.len().min(128)]).into_owned(),
                args: shown,
            },
        ));
    };
    // As Redis: the bare container name runs the parent if its arity allows
    // (COMMAND), and fails the parent's arity check otherwise (CONFIG).
    if srv.commands.has_subcommands(id) && args.len() >= 2 {
        let parent = srv.commands.get(id);
        match srv.commands.lookup_sub(id, args.get(1)) {
            Some(sub) => id = sub,
            None => {
                if let Some(e) = crate::commands::unbuilt::sub_not_built(parent.name, args.get(1)) {
                    return Err((None, e));
                }
                // Like an unknown command, an unknown subcommand is not
                // counted against its parent's rejected_calls (Redis 7).
                return Err((
                    None,
                    CmdError::UnknownSubcommand {
                        cmd: parent.name.to_string(),
                        sub: String::from_utf8_lossy(args.get(1)).into_owned(),
                    },
                ));
            }
        }
    }
    let cmd = srv.commands.get(id);
    if !cmd.arity_ok(args.len()) {
        return Err((
            Some(id),
            CmdError::WrongArity(srv.commands.full_names[id].clone()),
        ));
    }
    if cmd.flags & flags::PROTECTED != 0 {
        protected_allowed(srv, client, id).map_err(|e| (Some(id), e))?;
    }
    if !client.authenticated && cmd.flags & flags::NO_AUTH == 0 && srv.acl.auth_required() {
        log_refused_link(srv, client, id, &CmdError::NoAuth);
        return Err((Some(id), CmdError::NoAuth));
    }
    if client
        .user
        .as_ref()
        .is_some_and(|u| !u.free && !u.allows_fast(cmd, id, args))
    {
        acl_check(srv, client, id, args, log).map_err(|e| {
            log_refused_link(srv, client, id, &e);
            (Some(id), e)
        })?;
    }
    crate::commands::pubsub::check_subscribed_mode(client, &srv.commands.full_names[id])
        .map_err(|e| (Some(id), e))?;
    Ok(id)
}

/// A replica's PSYNC/SYNC/REPLCONF or an active peer's LATTICE.PEER refused for
/// authentication or ACL: logged here, as the link logs it on its side
/// (a user's other denials are only in ACL LOG, as in Redis).
#[cold]
fn log_refused_link(srv: &Server, client: &ClientState, id: usize, e: &CmdError) {
    let who = match srv.commands.full_names[id].as_str() {
        "lattice.peer" => "an active peer",
        "psync" | "sync" => "a replica",
        "replconf" => "a replica or active peer",
        _ => return,
    };
    let addr = client.shared.as_ref().map_or("?", |s| s.addr.as_str());
    let user = client.user.as_ref().map_or("default", |u| u.name.as_str());
    log_warning!("Refused the link of {who} from {addr} (user '{user}'): {e}");
}

/// The ACL check of a restricted user; without `log`, a denial is only
/// reported (CLIENT PAUSE's look ahead: the command is checked again).
#[cold]
fn acl_check(
    srv: &Server,
    client: &ClientState,
    id: usize,
    args: Args,
    log: bool,
) -> Result<(), CmdError> {
    use crate::core::acl::LogContext;
    if !log {
        let u = client.user.as_ref().expect("checked by the caller");
        return u
            .check(&srv.commands, id, args)
            .map_err(|_| CmdError::err("no permission"));
    }
    let context = match client.multi.is_some() {
        true => LogContext::Multi,
        false => LogContext::Toplevel,
    };
    crate::commands::acl::admit(srv, client, id, args, context)
}

/// Redis's protected commands: DEBUG runs only when `enable-debug-command`
/// is `yes`, or `local` and the client is on loopback or a unix socket
/// (Redis 7's default is `no`); MODULE LOAD/LOADEX/UNLOAD the same by
/// `enable-module-command`.
fn protected_allowed(srv: &Server, client: &ClientState, id: usize) -> Result<(), CmdError> {
    let (directive, what) = match srv.commands.full_names[id].starts_with("module|") {
        true => ("enable-module-command", "MODULE"),
        false => ("enable-debug-command", "DEBUG"),
    };
    // DEBUG and MODULE are rare admin commands: read in place.
    let setting = srv.config.read().get_str(directive);
    if setting == "yes" || (setting == "local" && client.local) {
        return Ok(());
    }
    Err(CmdError::err(format!(
        "{what} command not allowed. If the {directive} option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.",
    )))
}

/// Counts the call of a blocked command that ends without being re-run (a
/// timeout, CLIENT UNBLOCK): its first run, which blocked, was not counted.
fn count_blocked_call(srv: &Server, worker: &Worker, argv: &[Vec<u8>], failed: bool) {
    if let Some(id) = argv.first().and_then(|name| srv.commands.lookup(name)) {
        worker.stats.record_call(id, 0, failed);
    }
}

/// A client blocked by BLPOP & co. (see `core/blocking.rs`): waits for a wake-up,
/// the deadline, a kill or the peer closing (input that arrives meanwhile is
/// only buffered), re-running the command on each wake-up until it is
/// served; its reply (or the timeout's null array) ends up in `out`.
/// Returns false when the connection must close.
async fn block_wait<I: ConnIo>(
    srv: &Arc<Server>,
    worker: &Worker,
    client: &mut ClientState,
    io: &I,
    qb: &mut QueryBuf,
    out: &mut ReplyBuf,
    shared: &crate::core::client::ClientShared,
) -> bool {
    use crate::core::blocking::BlockRequest;
    enum Outcome {
        Woken,
        Timeout,
        Close,
    }
    shared.flags.lock().push('b');
    let alive = loop {
        let Some(req) = client.block.request.take() else {
            break true;
        };
        let BlockRequest {
            db,
            keys,
            deadline_ms,
            argv,
            guard,
        } = req;
        let outcome = loop {
            let left = deadline_ms.saturating_sub(unix_ms());
            tokio::select! {
                _ = guard.waiter.wait() => break Outcome::Woken,
                _ = tokio::time::sleep(std::time::Duration::from_millis(left)), if deadline_ms > 0 => break Outcome::Timeout,
                _ = shared.kill.notified() => break Outcome::Close,
                r = io.read_some(qb) => {
                    let over = qb.end - qb.start > srv.hot.query_buffer_limit.load(Relaxed);
                    if over || !matches!(r, Ok(n) if n > 0) {
                        break Outcome::Close;
                    }
                }
            }
        };
        let (ticket, woken) = (guard.waiter.ticket(), guard.waiter.was_woken());
        let guard_unblocked = guard.waiter.unblocked();
        // Held until this client re-ran (and passed its wake-up on).
        let token = guard.finish();
        let ended = match outcome {
            Outcome::Close => Some(false),
            Outcome::Timeout => {
                if woken {
                    srv.blocking.signal_keys(db, &keys);
                }
                count_blocked_call(srv, worker, &argv, false);
                out.resp = client.resp;
                out.null_array();
                Some(true)
            }
            Outcome::Woken if guard_unblocked.is_some() => {
                if woken {
                    srv.blocking.signal_keys(db, &keys);
                }
                count_blocked_call(srv, worker, &argv, guard_unblocked == Some(true));
                out.resp = client.resp;
                match guard_unblocked {
                    Some(true) => {
                        worker.stats.record_error("UNBLOCKED");
                        out.error("UNBLOCKED client unblocked via CLIENT UNBLOCK")
                    }
                    _ => out.null_array(),
                }
                Some(true)
            }
            Outcome::Woken => {
                client.block.retry = Some((ticket, deadline_ms));
                let spans: Vec<std::ops::Range<usize>> = argv
                    .iter()
                    .scan(0, |off, a| {
                        *off += a.len();
                        Some(*off - a.len()..*off)
                    })
                    .collect();
                let flat = argv.concat();
                dispatch(
                    srv,
                    worker,
                    client,
                    out,
                    Args::new(&flat, &spans),
                    Instant::now(),
                );
                client.block.retry = None;
                if client.block.request.is_none() {
                    srv.blocking.signal_keys(db, &keys);
                } else {
                    srv.blocking.signal_after(db, &keys, ticket);
                }
                client.block.request.is_none().then_some(true)
            }
        };
        if ended.is_some() {
            // Unblocked before the wake-up is given back: the writer that
            // woke this client replies once it is given back (settle), and
            // its client's next INFO must not count this one as blocked.
            shared.flags.lock().retain(|c| c != 'b');
        }
        drop(token);
        if let Some(alive) = ended {
            break alive;
        }
    };
    // (Already cleared above unless the loop had no request to wait on.)
    shared.flags.lock().retain(|c| c != 'b');
    alive
}

#[cfg(test)]
mod tests {
    use super::protected_refuses;

    /// Protected mode's decision for each kind of peer (the sandbox has no
    /// second host; tests/config.rs `protected_mode` connects from this
    /// machine's own non-loopback address where it has one).
    #[test]
    fn protected_mode_refuses_only_non_loopback_peers_without_a_password() {
        let at = |s: &str| Some(s.parse::<std::net::SocketAddr>().unwrap());
        for loopback in [
            "127.0.0.1:5",
            "127.9.9.9:5",
            "[::1]:5",
            "[::ffff:127.0.0.1]:5",
        ] {
            assert!(!protected_refuses(at(loopback), true, false), "{loopback}");
        }
        for outside in [
            "192.0.2.2:5",
            "10.0.0.1:5",
            "[fd00::2]:5",
            "[::ffff:10.1.2.3]:5",
        ] {
            assert!(protected_refuses(at(outside), true, false), "{outside}");
            assert!(!protected_refuses(at(outside), true, true), "{outside}");
            assert!(!protected_refuses(at(outside), false, false), "{outside}");
        }
        // A unix socket client has no address.
        assert!(!protected_refuses(None, true, false));
    }
}
