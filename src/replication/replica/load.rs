//! A full sync's payload: its header, then the payload into a temp file
//! loaded as at start-up (`repl-diskless-load disabled`), or decoded
//! straight from the socket (`socket_load.rs`); a helper thread sends the
//! master newlines meanwhile and aborts a load that stops moving.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::link::Peer;
use super::socket_load::load_from_socket;
use crate::keyspace::hlc::unix_ms;
use crate::replication::host::{Host, SocketLoadMode};
use crate::replication::stage::Stage;
use crate::{log_notice, log_warning};

/// The full-sync payload's header: `$<len>` or `$EOF:<40 byte mark>`.
pub(super) struct PayloadSpec {
    pub(super) len: Option<u64>,
    pub(super) mark: Option<Vec<u8>>,
}

fn parse_payload_header(header: &str) -> Result<PayloadSpec, String> {
    if let Some(e) = header.strip_prefix('-') {
        return Err(format!("MASTER aborted replication with an error: {e}"));
    }
    let spec = header
        .strip_prefix('$')
        .ok_or_else(|| format!("Bad protocol from MASTER, the first byte is not '$' (we received '{header}'), are you sure the host and port are right?"))?;
    match spec.strip_prefix("EOF:") {
        Some(m) if m.len() == 40 => Ok(PayloadSpec {
            len: None,
            mark: Some(m.as_bytes().to_vec()),
        }),
        Some(_) => Err("bad EOF mark from master".into()),
        None => Ok(PayloadSpec {
            len: Some(
                spec.parse()
                    .map_err(|_| format!("bad RDB length from master: {spec}"))?,
            ),
            mark: None,
        }),
    }
}

/// `repl-diskless-load`: whether this payload is parsed straight from the
/// socket, and into what. `swapdb` loads asynchronously (old data served)
/// when the master continues the history we hold (same replid, as Redis).
fn socket_load_mode<H: Host>(srv: &H, replid: &str) -> Option<SocketLoadMode> {
    let mode = srv.config.read().get_str("repl-diskless-load");
    match mode.as_str() {
        "swapdb" => Some(SocketLoadMode::Swap {
            async_load: srv.repl().ids.lock().replid == replid,
        }),
        "on-empty-db" if srv.keyspace.total_keys() == 0 => Some(SocketLoadMode::Live),
        _ => None,
    }
}
/// The payload's header, then the payload, loaded; a socket load's
/// staging data is returned to be committed with the new history.
pub(super) fn receive_payload<H: Host>(
    srv: &Arc<H>,
    gen: u64,
    peer: &mut Peer,
    replid: &str,
) -> Result<Option<H::SocketLoad>, String> {
    let side = &srv.repl().replica;
    peer.begin(Stage::ReceivePayloadHeader);
    let header = peer.line()?;
    let spec = parse_payload_header(&header)?;
    side.sync_total.store(spec.len.unwrap_or(0), Relaxed);
    side.sync_read.store(0, Relaxed);
    let socket = socket_load_mode(&**srv, replid);
    let to = if socket.is_some() {
        "to parser"
    } else {
        "to disk"
    };
    match spec.len {
        Some(n) => log_notice!("MASTER <-> REPLICA sync: receiving {n} bytes from master {to}"),
        None => {
            log_notice!("MASTER <-> REPLICA sync: receiving streamed RDB from master with EOF {to}")
        }
    }
    peer.begin(Stage::ReceivePayload);
    match socket {
        Some(mode) => {
            let taken = || srv.load_progress();
            let job = watched(&**srv, peer, taken, |peer| {
                load_from_socket(srv, gen, peer, &spec, mode)
            });
            job.map(Some)
                .map_err(|e| format!("MASTER <-> REPLICA sync failed: {e}"))
        }
        None => load_via_file(srv, peer, &spec).map(|()| None),
    }
}

/// Runs `work` (a load) while a helper thread sends the master a newline
/// every second, as Redis's replicas do while they load (so a long load
/// does not look like a dead replica), and watches `taken` (bytes the
/// loader read plus keys it decoded): if it stays still for longer than
/// `repl-timeout`, the helper logs the stage's timeout and aborts the
/// load, which fails at its next read or key.
fn watched<T, H: Host>(
    srv: &H,
    peer: &mut Peer,
    taken: impl Fn() -> u64 + Sync,
    work: impl FnOnce(&mut Peer) -> T,
) -> T {
    let watch = Watch {
        // Over TLS the newlines go through the session the load reads
        // from (`tls_link.rs`).
        sock: peer.s.try_clone().ok(),
        done: AtomicBool::new(false),
        stage: peer.stage,
        timeout: peer.timeout,
    };
    std::thread::scope(|scope| {
        let helper = scope.spawn(|| watch.run(&taken, &|| srv.abort_load()));
        let r = work(peer);
        watch.done.store(true, Release);
        helper.thread().unpark();
        r
    })
}

/// The helper of [`watched`].
struct Watch {
    sock: Option<crate::replication::conn::Stream>,
    done: AtomicBool,
    stage: Stage,
    timeout: Duration,
}

impl Watch {
    fn run(&self, taken: &dyn Fn() -> u64, abort: &dyn Fn()) {
        let second = Duration::from_secs(1);
        let (mut seen, mut moved, mut newline) = (taken(), Instant::now(), Instant::now());
        while !self.done.load(Acquire) {
            std::thread::park_timeout(second);
            if newline.elapsed() >= second {
                newline = Instant::now();
                if let Some(s) = &self.sock {
                    let _ = s.send_shared(b"\n");
                }
            }
            let now = taken();
            if now != seen {
                (seen, moved) = (now, Instant::now());
            } else if moved.elapsed() > self.timeout + second && !self.done.load(Acquire) {
                // (A second more than the socket's own timeout, which
                // reports a master gone quiet first.)
                log_warning!("{}", self.stage.timeout_message(self.timeout.as_secs()));
                abort();
                return;
            }
        }
    }
}
/// `repl-diskless-load disabled`: the payload into a temp file, loaded as
/// at start-up, then renamed to `dbfilename`.
fn load_via_file<H: Host>(srv: &Arc<H>, peer: &mut Peer, spec: &PayloadSpec) -> Result<(), String> {
    let tmp = format!("temp-{}.{}.rdb", unix_ms() / 1000, std::process::id());
    let r = receive_rdb(&**srv, peer, spec, &tmp).and_then(|()| {
        log_notice!("MASTER <-> REPLICA sync: Flushing old data");
        log_notice!("MASTER <-> REPLICA sync: Loading DB in memory");
        peer.begin(Stage::Loading);
        let path = std::path::Path::new(&tmp);
        let taken = || srv.load_progress();
        watched(&**srv, peer, taken, |_| srv.load_file(path))
    });
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("MASTER <-> REPLICA sync failed: {e}"));
    }
    let dbfile = srv.config.read().get_str("dbfilename");
    if let Err(e) = std::fs::rename(&tmp, &dbfile) {
        log_warning!("Failed trying to rename the temp DB into {dbfile} in MASTER <-> REPLICA synchronization: {e}");
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(())
}

/// `$<len>\r\n<bytes>` or `$EOF:<40 byte mark>\r\n<bytes><mark>` into `path`.
fn receive_rdb<H: Host>(
    srv: &H,
    peer: &mut Peer,
    spec: &PayloadSpec,
    path: &str,
) -> Result<(), String> {
    let side = &srv.repl().replica;
    let (len, eof_mark) = (spec.len, &spec.mark);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| {
        format!("Opening the temp file needed for MASTER <-> REPLICA synchronization: {e}")
    })?);
    let mut got: u64 = 0;
    // With an EOF mark, the last 40 bytes seen are held back until more
    // arrive: they may be the mark.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let want = len.map_or(usize::MAX, |l| (l - got) as usize);
        if want == 0 {
            break;
        }
        if peer.start == peer.buf.len() {
            peer.fill()?;
            continue;
        }
        let chunk = peer.take(want).to_vec();
        got += chunk.len() as u64;
        side.sync_read.store(got, Relaxed);
        match &eof_mark {
            None => f.write_all(&chunk).map_err(|e| e.to_string())?,
            Some(mark) => {
                tail.extend_from_slice(&chunk);
                // The command stream may follow the mark in the same read:
                // what comes after it goes back to the peer's buffer.
                if let Some(p) = tail.windows(40).position(|w| w == &mark[..]) {
                    let after = tail.len() - (p + 40);
                    peer.start -= after;
                    tail.truncate(p);
                    f.write_all(&tail).map_err(|e| e.to_string())?;
                    break;
                }
                if tail.len() > 40 {
                    let keep = tail.split_off(tail.len() - 40);
                    f.write_all(&tail).map_err(|e| e.to_string())?;
                    tail = keep;
                }
            }
        }
    }
    f.flush().map_err(|e| e.to_string())?;
    // Redis fsyncs the temp file too; on a disk busy with other writers
    // that can take long, which the log says (the stage has no timeout here).
    let began = Instant::now();
    f.get_ref().sync_all().map_err(|e| e.to_string())?;
    if began.elapsed() >= Duration::from_secs(1) {
        log_warning!(
            "MASTER <-> REPLICA sync: fsync of the received RDB took {:.1} s",
            began.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
