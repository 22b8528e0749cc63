//! One connection: read, parse, execute, write.
//!
//! The loop reads whatever the socket has into the query buffer, executes
//! every complete command in it (a pipeline of any depth) with replies
//! appended to one output buffer, and writes that buffer once. Only a framing
//! error or a limit breach closes the connection; command errors are replies.
//! [`dispatch`] is the single path from parsed arguments to a handler: lookup,
//! arity, auth, pause, MONITOR feed, execution, stats and slowlog.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::client::{ClientState, Push, ReplyMode};
use super::stats::WorkerStats;
use super::{NewConn, Server};
use crate::commands::{flags, CmdError, Ctx};
use crate::keyspace::hlc::{unix_ms, Hlc};
use crate::protocol::{Args, ParseLimits, Parsed, ReplyBuf, RequestParser};
use crate::{log_verbose, log_warning};

/// What one worker thread owns: its clock and counters.
pub struct Worker {
    pub clock: RefCell<Hlc>,
    pub stats: Arc<WorkerStats>,
    pub index: usize,
}

impl Worker {
    pub fn new(srv: Arc<Server>, stats: Arc<WorkerStats>, index: usize) -> Self {
        Worker {
            clock: RefCell::new(Hlc::new(srv.node_id)),
            stats,
            index,
        }
    }
}

/// Redis's reply to a non-loopback client in protected mode (exact text).
const PROTECTED_DENIED: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Set up an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// Serves one accepted connection until it closes.
pub async fn serve(srv: Arc<Server>, worker: Rc<Worker>, conn: NewConn) {
    match conn {
        NewConn::Tcp(s, addr) => {
            let _ = s.set_nonblocking(true);
            set_keepalive(&s, srv.config.read().get_i64("tcp-keepalive"));
            let laddr = s.local_addr().ok();
            use std::os::fd::AsRawFd;
            let fd = s.as_raw_fd();
            let Ok(s) = tokio::net::TcpStream::from_std(s) else {
                return;
            };
            serve_stream(srv, worker, s, Some(addr), laddr, fd).await
        }
        NewConn::Unix(s) => {
            let _ = s.set_nonblocking(true);
            use std::os::fd::AsRawFd;
            let fd = s.as_raw_fd();
            let Ok(s) = tokio::net::UnixStream::from_std(s) else {
                return;
            };
            serve_stream(srv, worker, s, None, None, fd).await
        }
    }
}

fn set_keepalive(s: &std::net::TcpStream, secs: i64) {
    if secs <= 0 {
        return;
    }
    use std::os::fd::AsRawFd;
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

async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin>(
    srv: Arc<Server>,
    worker: Rc<Worker>,
    mut stream: S,
    addr: Option<std::net::SocketAddr>,
    laddr: Option<std::net::SocketAddr>,
    fd: i32,
) {
    let id = srv.clients.next_id();
    if srv.clients.len() >= srv.hot.maxclients.load(Relaxed) {
        srv.rejected_connections.fetch_add(1, Relaxed);
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    if addr.is_some_and(|a| !a.ip().is_loopback())
        && srv.hot.protected_mode.load(Relaxed)
        && srv.hot.requirepass.read().is_none()
    {
        srv.rejected_connections.fetch_add(1, Relaxed);
        let _ = stream.write_all(PROTECTED_DENIED.as_bytes()).await;
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let shared = srv.clients.register(id, addr, laddr, fd, unix_ms(), tx);
    let mut client = ClientState::new(id);
    client.authenticated = srv.hot.requirepass.read().is_none();
    client.shared = Some(shared.clone());
    let mut inbuf = BytesMut::with_capacity(16 * 1024);
    let mut parser = RequestParser::new();
    let mut out = ReplyBuf::default();

    'conn: loop {
        let timeout = srv.hot.timeout_secs.load(Relaxed);
        let idle_limit = if timeout > 0 && !client.monitor {
            std::time::Duration::from_secs(timeout)
        } else {
            std::time::Duration::from_secs(86400 * 365)
        };
        if inbuf.capacity() - inbuf.len() < 4096 {
            inbuf.reserve(16 * 1024);
        }
        let n = tokio::select! {
            r = stream.read_buf(&mut inbuf) => match r {
                Ok(0) | Err(_) => break 'conn,
                Ok(n) => n,
            },
            p = rx.recv() => {
                match p {
                    Some(Push::Bytes(b)) => {
                        if stream.write_all(&b).await.is_err() { break 'conn; }
                        continue 'conn;
                    }
                    Some(Push::Kill) | None => break 'conn,
                }
            },
            _ = tokio::time::sleep(idle_limit) => {
                log_verbose!("Closing idle client");
                break 'conn;
            }
        };
        worker.stats.add_net(n as u64, 0);
        shared.last_interaction_ms.store(unix_ms(), Relaxed);
        let limits = ParseLimits {
            max_bulk_len: srv.hot.proto_max_bulk_len.load(Relaxed),
            ..Default::default()
        };
        let mut close = false;
        loop {
            match parser.parse(&inbuf, &limits) {
                Ok(Parsed::Command { consumed }) => {
                    let args = parser.args(&inbuf);
                    if !args.is_empty() {
                        if let Some(wait) = pause_wait(&srv, &client, args) {
                            wait.await;
                        }
                        let args = parser.args(&inbuf);
                        dispatch(&srv, &worker, &mut client, &mut out, args);
                    }
                    inbuf.advance(consumed);
                    if client.close_after_reply {
                        close = true;
                        break;
                    }
                }
                Ok(Parsed::Incomplete) => break,
                Err(e) => {
                    out.error(&format!("ERR Protocol error: {}", e.0));
                    log_verbose!("Protocol error ({}) from client: id={id}", e.0);
                    close = true;
                    break;
                }
            }
        }
        if !close && inbuf.len() > srv.hot.query_buffer_limit.load(Relaxed) {
            log_warning!(
                "Closing client that reached max query buffer length: id={id} qbuf={}",
                inbuf.len()
            );
            close = true;
        }
        if inbuf.is_empty() && inbuf.capacity() > 1 << 20 {
            inbuf = BytesMut::with_capacity(16 * 1024);
        }
        shared.qbuf.store(inbuf.len(), Relaxed);
        if !out.is_empty() {
            worker.stats.add_net(0, out.len() as u64);
            if stream.write_all(&out.buf).await.is_err() {
                break;
            }
            out.buf.clear();
            if out.buf.capacity() > 1 << 20 {
                out.buf = Vec::with_capacity(16 * 1024);
            }
        }
        if let Some(kind) = client.shutdown_requested.take() {
            let _ = stream.flush().await;
            srv.request_shutdown(kind);
        }
        if close {
            break;
        }
    }
    let _ = stream.flush().await;
    srv.clients.unregister(id);
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
    let id = srv.commands.lookup(args.get(0))?;
    let cmd = srv.commands.get(id);
    let all = srv.pause_all.load(Relaxed);
    let pausable = all || cmd.is_write() || cmd.flags & flags::MAY_REPLICATE != 0;
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

/// Executes one command and appends its reply to `out`.
pub fn dispatch(
    srv: &Arc<Server>,
    worker: &Worker,
    client: &mut ClientState,
    out: &mut ReplyBuf,
    args: Args,
) {
    let mark = out.len();
    out.resp = client.resp;
    let res = lookup_and_check(srv, client, args);
    let (id, result, usec) = match res {
        Err((id, e)) => {
            worker.stats.record_rejected(id);
            (None, Err(e), 0)
        }
        Ok(id) => {
            let cmd = srv.commands.get(id);
            if srv.clients.monitors.load(Relaxed) > 0
                && cmd.flags & (flags::ADMIN | flags::SKIP_MONITOR) == 0
            {
                feed_monitors(srv, client, args);
            }
            let start = Instant::now();
            let mut clock = worker.clock.borrow_mut();
            let mut ctx = Ctx {
                srv,
                client: &mut *client,
                out: &mut *out,
                clock: &mut clock,
                stats: &worker.stats,
                now_ms: unix_ms(),
                replay_version: None,
            };
            let r = (cmd.handler)(&mut ctx, args);
            let usec = start.elapsed().as_micros() as u64;
            worker.stats.record_call(id, usec, r.is_err());
            (Some(id), r, usec)
        }
    };
    if let Err(e) = &result {
        out.buf.truncate(mark);
        let msg = e.render();
        worker.stats.record_error(&e.code());
        out.error(&msg);
    }
    if let Some(id) = id {
        maybe_slowlog(srv, client, id, args, usec);
        if let Some(sh) = &client.shared {
            sh.last_cmd.store(id, Relaxed);
            sh.db.store(client.db, Relaxed);
        }
    }
    match client.reply_mode {
        ReplyMode::On => {}
        ReplyMode::Off => out.buf.truncate(mark),
        ReplyMode::Skip => {
            out.buf.truncate(mark);
            client.reply_mode = ReplyMode::On;
        }
    }
}

/// Resolves the command (and subcommand) and checks arity and auth.
fn lookup_and_check(
    srv: &Server,
    client: &ClientState,
    args: Args,
) -> Result<usize, (Option<usize>, CmdError)> {
    let name = args.get(0);
    let Some(mut id) = srv.commands.lookup(name) else {
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
    if srv.commands.has_subcommands(id) {
        let parent = srv.commands.get(id);
        if args.len() >= 2 {
            match srv.commands.lookup_sub(id, args.get(1)) {
                Some(sub) => id = sub,
                None => {
                    return Err((
                        Some(id),
                        CmdError::UnknownSubcommand {
                            cmd: parent.name.to_string(),
                            sub: String::from_utf8_lossy(args.get(1)).into_owned(),
                        },
                    ))
                }
            }
        } else {
            return Err((Some(id), CmdError::WrongArity(parent.name.to_string())));
        }
    }
    let cmd = srv.commands.get(id);
    if !cmd.arity_ok(args.len()) {
        return Err((
            Some(id),
            CmdError::WrongArity(srv.commands.full_names[id].clone()),
        ));
    }
    if !client.authenticated && cmd.flags & flags::NO_AUTH == 0 {
        return Err((Some(id), CmdError::NoAuth));
    }
    Ok(id)
}

fn feed_monitors(srv: &Server, client: &ClientState, args: Args) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let addr = client
        .shared
        .as_ref()
        .map(|s| s.addr.clone())
        .unwrap_or_default();
    let mut line = format!(
        "+{}.{:06} [{} {}]",
        now.as_secs(),
        now.subsec_micros(),
        client.db,
        addr
    );
    for a in args.iter() {
        line.push_str(" \"");
        for &c in a {
            match c {
                b'\\' => line.push_str("\\\\"),
                b'"' => line.push_str("\\\""),
                b'\n' => line.push_str("\\n"),
                b'\r' => line.push_str("\\r"),
                b'\t' => line.push_str("\\t"),
                7 => line.push_str("\\a"),
                8 => line.push_str("\\b"),
                c if c.is_ascii_graphic() || c == b' ' => line.push(c as char),
                c => line.push_str(&format!("\\x{c:02x}")),
            }
        }
        line.push('"');
    }
    line.push_str("\r\n");
    srv.clients.feed_monitors(Arc::new(line.into_bytes()));
}

fn maybe_slowlog(srv: &Server, client: &ClientState, id: usize, args: Args, usec: u64) {
    let threshold = srv.hot.slowlog_slower_than.load(Relaxed) as i64;
    if threshold < 0 || (usec as i64) < threshold {
        return;
    }
    let cmd = srv.commands.get(id);
    if cmd.flags & flags::SKIP_SLOWLOG != 0 {
        return;
    }
    let max = srv.hot.slowlog_max_len.load(Relaxed);
    let mut shown: Vec<Vec<u8>> = vec![];
    let argc = args.len();
    for (i, a) in args.iter().enumerate() {
        if i == 31 && argc > 32 {
            shown.push(format!("... ({} more arguments)", argc - 31).into_bytes());
            break;
        }
        if a.len() > 128 {
            let mut v = a[..128].to_vec();
            v.extend_from_slice(format!("... ({} more bytes)", a.len() - 128).as_bytes());
            shown.push(v);
        } else {
            shown.push(a.to_vec());
        }
    }
    let entry = super::SlowEntry {
        id: srv.slowlog_next_id.fetch_add(1, Relaxed),
        time: unix_ms() / 1000,
        usec,
        args: shown,
        addr: client
            .shared
            .as_ref()
            .map(|s| s.addr.clone())
            .unwrap_or_default(),
        name: client.name.clone().unwrap_or_default(),
    };
    let mut log = srv.slowlog.lock();
    log.push_front(entry);
    while log.len() > max {
        log.pop_back();
    }
}
