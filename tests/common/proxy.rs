//! A fault-injecting TCP proxy for integration tests: put it between two
//! nodes (e.g. point a replica's `replicaof` at `proxy.port`) and break the
//! link on purpose while the test runs.
//!
//! Every accepted connection is forwarded both ways to
//! `127.0.0.1:target_port`. The controls take effect at once, on current
//! and future connections, and may be called from the test thread at any
//! time:
//!
//! - [`Proxy::cut`] closes every connection and closes new ones as soon as
//!   they are accepted (the peer sees "connection reset / EOF") until
//!   [`Proxy::heal`].
//! - [`Proxy::freeze`] keeps connections open but carries nothing in either
//!   direction (the proxy stops reading, so the senders' socket buffers
//!   fill up as on a dead link) until [`Proxy::thaw`].
//! - [`Proxy::set_delay`] adds latency: each chunk is forwarded that long
//!   after it was read (chunks queue up, so throughput is not capped).
//! - [`Proxy::kill_connections`] closes the current connections and keeps
//!   accepting new ones.
//! - [`Proxy::truncate_next_down`] / [`Proxy::garble_next_down`] damage the
//!   target->client stream (the master->replica direction when a replica
//!   connects through the proxy).
//! - [`Proxy::bytes_up`] / [`Proxy::bytes_down`] count the bytes forwarded
//!   client->target and target->client: the bytes on the wire.
//!
//! Std threads only: one accept thread, and per connection a reader and a
//! writer thread per direction. When one side closes, the bytes already read
//! from it are delivered and then the whole connection is closed. Dropping
//! the proxy closes every socket and joins every thread.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often blocked loops look at the flags.
const TICK: Duration = Duration::from_millis(5);

/// A chunk read from one side, with the time it was read.
type Chunk = (Instant, Vec<u8>);

pub struct Proxy {
    /// The port the proxy listens on (127.0.0.1).
    pub port: u16,
    /// The port it forwards to (127.0.0.1).
    pub target: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    cut: AtomicBool,
    frozen: AtomicBool,
    /// Writers between their last look at `frozen` and the end of a write.
    writing: AtomicU64,
    delay_us: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
    accepted: AtomicU64,
    /// Bytes target->client still to forward before closing that connection.
    truncate_down: Mutex<Option<u64>>,
    garble_down: AtomicBool,
    /// Set by [`Proxy::retarget`]: the port new connections go to (0:
    /// `target`).
    retarget: AtomicU64,
    conns: Mutex<Vec<Arc<Conn>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// One proxied connection: both sockets, so any thread can close it.
struct Conn {
    client: TcpStream,
    server: TcpStream,
    dead: AtomicBool,
}

impl Conn {
    fn kill(&self) {
        self.dead.store(true, SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Dir {
    /// client -> target
    Up,
    /// target -> client
    Down,
}

impl Proxy {
    /// Listens on a free 127.0.0.1 port and forwards to `127.0.0.1:target`.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let accept = std::thread::Builder::new()
            .name(format!("proxy-{port}-accept"))
            .spawn(move || accept_loop(listener, target, sh))
            .unwrap();
        Proxy {
            port,
            target,
            shared,
            accept: Some(accept),
        }
    }

    /// Closes every connection and every new one until [`Proxy::heal`].
    /// New connections go to `port` from now on (a node restarted on
    /// another port stays reachable at the proxy's).
    pub fn retarget(&self, port: u16) {
        self.shared.retarget.store(port as u64, SeqCst);
    }

    pub fn cut(&self) {
        self.shared.cut.store(true, SeqCst);
        self.kill_connections();
    }

    /// Accepts and forwards connections again after [`Proxy::cut`].
    pub fn heal(&self) {
        self.shared.cut.store(false, SeqCst);
    }

    /// Keeps connections open but forwards nothing until [`Proxy::thaw`].
    /// Returns once writes already under way are done (at most 5 s: a
    /// writer thread may wait that long for a core on a loaded machine, and
    /// only a receiver that stopped reading holds one longer), so the byte
    /// counters stand still from then on.
    pub fn freeze(&self) {
        self.shared.frozen.store(true, SeqCst);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.shared.writing.load(SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Forwards again what [`Proxy::freeze`] held back, and what follows.
    pub fn thaw(&self) {
        self.shared.frozen.store(false, SeqCst);
    }

    /// Forwards each chunk `d` after it was read (zero: no delay).
    pub fn set_delay(&self, d: Duration) {
        self.shared.delay_us.store(d.as_micros() as u64, SeqCst);
    }

    /// Closes the current connections; new ones are accepted as usual.
    pub fn kill_connections(&self) {
        for c in self.shared.conns.lock().unwrap().drain(..) {
            c.kill();
        }
    }

    /// After `n` more bytes target->client (on whichever connection carries
    /// them), closes that connection.
    pub fn truncate_next_down(&self, n: u64) {
        *self.shared.truncate_down.lock().unwrap() = Some(n);
    }

    /// Inverts every byte of the next chunk forwarded target->client.
    pub fn garble_next_down(&self) {
        self.shared.garble_down.store(true, SeqCst);
    }

    /// Bytes forwarded client->target so far.
    pub fn bytes_up(&self) -> u64 {
        self.shared.up.load(SeqCst)
    }

    /// Bytes forwarded target->client so far.
    pub fn bytes_down(&self) -> u64 {
        self.shared.down.load(SeqCst)
    }

    /// Connections accepted so far (including those closed by [`Proxy::cut`]).
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(SeqCst)
    }

    /// Connections open and forwarding now.
    pub fn connections(&self) -> usize {
        let conns = self.shared.conns.lock().unwrap();
        conns.iter().filter(|c| !c.dead.load(SeqCst)).count()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        self.kill_connections();
        let threads: Vec<_> = self.shared.threads.lock().unwrap().drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, target: u16, sh: Arc<Shared>) {
    while !sh.stop.load(SeqCst) {
        let client = match listener.accept() {
            Ok((s, _)) => s,
            // WouldBlock: nobody waiting; anything else: try again.
            Err(_) => {
                std::thread::sleep(TICK);
                continue;
            }
        };
        sh.accepted.fetch_add(1, SeqCst);
        if sh.cut.load(SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        // A target that is not there: the client sees its connection close.
        let port = match sh.retarget.load(SeqCst) {
            0 => target,
            p => p as u16,
        };
        let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nonblocking(false);
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let conn = Arc::new(Conn {
            client,
            server,
            dead: AtomicBool::new(false),
        });
        {
            // Under the lock `cut` drains: a cut that came while we were
            // connecting closes this connection too.
            let mut conns = sh.conns.lock().unwrap();
            if sh.cut.load(SeqCst) {
                conn.kill();
                continue;
            }
            conns.retain(|c| !c.dead.load(SeqCst));
            conns.push(conn.clone());
        }
        let mut threads = sh.threads.lock().unwrap();
        threads.retain(|t| !t.is_finished());
        for dir in [Dir::Up, Dir::Down] {
            let (from, to) = match dir {
                Dir::Up => (&conn.client, &conn.server),
                Dir::Down => (&conn.server, &conn.client),
            };
            let (from, to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
            // A bound on queued chunks: a slow (delayed) link pushes back.
            let (tx, rx) = sync_channel(256);
            let (c, s) = (conn.clone(), sh.clone());
            threads.push(std::thread::spawn(move || read_side(from, tx, &c, &s)));
            let (c, s) = (conn.clone(), sh.clone());
            threads.push(std::thread::spawn(move || write_side(to, rx, dir, &c, &s)));
        }
    }
}

/// Reads chunks from one socket into the queue; stops reading while frozen.
fn read_side(mut from: TcpStream, tx: SyncSender<Chunk>, c: &Conn, sh: &Shared) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 16 * 1024];
    while !c.dead.load(SeqCst) {
        if sh.frozen.load(SeqCst) {
            std::thread::sleep(TICK);
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                c.kill();
                break;
            }
        }
    }
    // Dropping `tx` lets the writer deliver what is queued, then close.
}

/// Writes queued chunks to the other socket, applying delay, freeze and the
/// damage asked for; closes the connection when the reader is done.
fn write_side(mut to: TcpStream, rx: Receiver<Chunk>, dir: Dir, c: &Conn, sh: &Shared) {
    while let Ok((at, chunk)) = rx.recv() {
        let due = at + Duration::from_micros(sh.delay_us.load(SeqCst));
        loop {
            if c.dead.load(SeqCst) {
                return;
            }
            let now = Instant::now();
            if now < due {
                std::thread::sleep((due - now).min(TICK));
                continue;
            }
            // Announce the write before looking at `frozen`: `freeze` sets
            // it first and then waits for `writing` to drop to zero.
            sh.writing.fetch_add(1, SeqCst);
            if !sh.frozen.load(SeqCst) {
                break;
            }
            sh.writing.fetch_sub(1, SeqCst);
            std::thread::sleep(TICK);
        }
        let ok = forward(&mut to, chunk, dir, sh);
        sh.writing.fetch_sub(1, SeqCst);
        if !ok {
            break;
        }
    }
    // The reading side ended (EOF or error) and everything read was sent,
    // or the write failed, or a truncation ended the connection.
    c.kill();
}

/// Writes one chunk, garbled or truncated if asked; false if the
/// connection must close now.
fn forward(to: &mut TcpStream, mut chunk: Vec<u8>, dir: Dir, sh: &Shared) -> bool {
    let mut close_after = false;
    if dir == Dir::Down {
        if sh.garble_down.swap(false, SeqCst) {
            chunk.iter_mut().for_each(|b| *b = !*b);
        }
        let mut t = sh.truncate_down.lock().unwrap();
        if let Some(left) = *t {
            let n = (left as usize).min(chunk.len());
            chunk.truncate(n);
            *t = if n as u64 == left {
                None
            } else {
                Some(left - n as u64)
            };
            close_after = t.is_none();
        }
    }
    // Counted before the write, so a peer that has read them sees them
    // counted (a failed write overcounts by one chunk: the link is gone).
    let counter = if dir == Dir::Up { &sh.up } else { &sh.down };
    counter.fetch_add(chunk.len() as u64, SeqCst);
    to.write_all(&chunk).is_ok() && !close_after
}
