//! Test harness: starts the real `lattice-server` binary on a free port and
//! hands out connections from the `redis` crate.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod proxy;
pub mod rdb;

pub struct Server {
    pub child: Child,
    pub port: u16,
    pub dir: std::path::PathBuf,
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    /// Starts the server with extra `--directive value` arguments.
    pub fn start(extra: &[&str]) -> Server {
        Self::start_with(None, extra)
    }

    /// Starts the server with an optional config file path and extra args.
    /// Retries on another port if the chosen one was taken in the meantime.
    pub fn start_with(config_file: Option<&str>, extra: &[&str]) -> Server {
        for _ in 0..5 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("lattice-test-{port}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_lattice-server"));
            if let Some(f) = config_file {
                cmd.arg(f);
            }
            cmd.arg("--port")
                .arg(port.to_string())
                .arg("--dir")
                .arg(&dir);
            // Tests use DEBUG (Redis 7 disables it by default); a test
            // about that setting passes its own.
            if !extra.contains(&"--enable-debug-command") {
                cmd.args(["--enable-debug-command", "local"]);
            }
            // A diskless full sync starts at once (Redis's default waits
            // 5 s for more replicas); a test about that passes its own.
            if !extra.contains(&"--repl-diskless-sync-delay") {
                cmd.args(["--repl-diskless-sync-delay", "0"]);
            }
            // LATTICE_TEST_IO_URING=yes: every server serves plain TCP
            // through io_uring (tests/io_uring.rs; docs/PERFORMANCE.md
            // "Kernel path" has the suite's results with it on).
            if let Ok(v) = std::env::var("LATTICE_TEST_IO_URING") {
                if !extra.contains(&"--io-uring") {
                    cmd.args(["--io-uring", &v]);
                }
            }
            cmd.args(extra);
            let log = std::fs::File::create(dir.join("server.log")).unwrap();
            cmd.stdout(log.try_clone().unwrap()).stderr(log);
            let child = cmd.spawn().expect("start lattice-server");
            let mut s = Server { child, port, dir };
            let password = extra
                .iter()
                .position(|a| *a == "--requirepass")
                .and_then(|i| extra.get(i + 1))
                .filter(|p| !p.is_empty());
            if s.wait_ready(password.copied()) {
                return s;
            }
        }
        panic!("lattice-server did not start");
    }

    /// Waits until our child answers PING (accepting and done loading); false if it exited (e.g.
    /// the port was taken between `free_port` and its bind). With a password it authenticates
    /// first: NOAUTH comes before LOADING, and would say nothing of the load.
    fn wait_ready(&mut self, password: Option<&str>) -> bool {
        // Generous: a debug build on a loaded machine may take seconds.
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                // Make sure it is our server answering, not another process.
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                let authed = match password {
                    None => true,
                    Some(p) => {
                        let auth = format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{p}\r\n", p.len());
                        s.write_all(auth.as_bytes()).is_ok()
                            && r.read_line(&mut line).is_ok()
                            && line == "+OK\r\n"
                    }
                };
                line.clear();
                let _ = s.write_all(b"PING\r\n");
                // Any reply but "-LOADING ..." (PONG, or NOAUTH with a
                // password set another way).
                if authed
                    && r.read_line(&mut line).is_ok()
                    && !line.is_empty()
                    && !line.starts_with("-LOADING")
                    && self.child.try_wait().ok().flatten().is_none()
                {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("server did not start on port {}", self.port);
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).unwrap()
    }

    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().unwrap()
    }

    /// A raw TCP connection for protocol-level tests.
    pub fn raw(&self) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        // Only bounds a hang: a reply may take seconds on a loaded machine.
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Raw {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        print_log_if_failing("lattice-server", self.port, &self.dir.join("server.log"));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Raw RESP over TCP: send bytes, read reply lines.
pub struct Raw {
    pub r: BufReader<TcpStream>,
    pub w: TcpStream,
}

impl Raw {
    pub fn send(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).unwrap();
    }
    /// Reads one line including CRLF ("" on EOF).
    pub fn line(&mut self) -> String {
        let mut s = String::new();
        self.r.read_line(&mut s).unwrap_or(0);
        s
    }
    /// Reads exactly n bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.r.read_exact(&mut v).unwrap();
        v
    }
    /// Whether the server closed the connection.
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0))
    }
}

/// Runs a command and returns its value.
pub fn cmd<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&str]) -> T {
    let mut q = redis::cmd(args[0]);
    for a in &args[1..] {
        q.arg(*a);
    }
    q.query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// A command's value, or None where the server answered an error (inside
/// [`eventually`]: a replica still loading answers LOADING, which means
/// "not yet", not a failure).
pub fn poll<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&str]) -> Option<T> {
    let mut q = redis::cmd(args[0]);
    for a in &args[1..] {
        q.arg(*a);
    }
    q.query(c).ok()
}

/// One command from its words, its reply or its error's text (the
/// randomized side-by-side tests send the same words to lattice-server and
/// to redis-server and compare both).
pub fn run(c: &mut redis::Connection, args: &[String]) -> Result<redis::Value, String> {
    let mut q = redis::cmd(&args[0]);
    for a in &args[1..] {
        q.arg(a.as_str());
    }
    q.query::<redis::Value>(c).map_err(|e| e.to_string())
}

/// Owned words for [`run`].
pub fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// One of `xs`, drawn by `rng`.
pub fn pick<'a>(rng: &mut impl rand::Rng, xs: &[&'a str]) -> &'a str {
    xs[rng.gen_range(0..xs.len())]
}

/// Runs a command that must fail; returns the error text as Redis sent it.
pub fn cmd_err(c: &mut redis::Connection, args: &[&str]) -> String {
    let mut q = redis::cmd(args[0]);
    for a in &args[1..] {
        q.arg(*a);
    }
    match q.query::<redis::Value>(c) {
        Ok(v) => panic!("{args:?} should fail, got {v:?}"),
        Err(e) => {
            let code = e.code().unwrap_or("").to_string();
            let detail = e.detail().unwrap_or("").to_string();
            format!("{code} {detail}").trim().to_string()
        }
    }
}

/// Sends `args` as one RESP command on a raw connection and renders the
/// reply with [`read_reply`].
pub fn raw_cmd(r: &mut Raw, args: &[&str]) -> String {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{}\r\n", a.len(), a));
    }
    r.send(req.as_bytes());
    read_reply(r)
}

/// Reads one reply and renders it compactly: bulk strings as their text,
/// null as `nil`, aggregates as `*N[a,b]` (`~`, `%`, `>` likewise), other
/// lines as they are.
pub fn read_reply(r: &mut Raw) -> String {
    let line = r.line();
    let line = line.trim_end();
    let (t, rest) = line.split_at(1);
    match t {
        "$" => {
            let n: i64 = rest.parse().unwrap();
            if n < 0 {
                return "nil".into();
            }
            let b = r.bytes(n as usize + 2);
            String::from_utf8_lossy(&b[..n as usize]).into_owned()
        }
        "*" | "~" | "%" | ">" => {
            let n: i64 = rest.parse().unwrap();
            if n < 0 {
                return "nil".into();
            }
            let k = if t == "%" { 2 * n } else { n };
            let items: Vec<String> = (0..k).map(|_| read_reply(r)).collect();
            format!("{t}{n}[{}]", items.join(","))
        }
        _ => line.to_string(),
    }
}

/// One field of `INFO all`, parsed (panics if absent or not a `T`).
pub fn info_field<T: std::str::FromStr>(c: &mut redis::Connection, field: &str) -> T {
    let info: String = cmd(c, &["INFO", "all"]);
    let v = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO"));
    v.trim()
        .parse()
        .unwrap_or_else(|_| panic!("INFO {field}:{v} does not parse"))
}

/// A real redis-server (Debian's, the oracle for edge cases and interop),
/// on a free loopback port with saving off, killed on drop. `extra` adds or
/// overrides directives (`--dir`, `--dbfilename`, ...).
pub struct RedisOracle {
    pub child: Child,
    pub port: u16,
    /// Its own `dir` (a replica writes its dump there) and log file.
    pub dir: std::path::PathBuf,
}

impl RedisOracle {
    pub fn start(extra: &[&str]) -> RedisOracle {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("redis-oracle-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("/usr/bin/redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--enable-debug-command",
                "yes",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        let o = RedisOracle { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            // PING answers once the dump is loaded (-LOADING before).
            if let Ok(mut c) = o.try_conn() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return o;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not start on port {port}");
    }

    pub fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?.get_connection()
    }

    pub fn conn(&self) -> redis::Connection {
        self.try_conn().unwrap()
    }
}

impl Drop for RedisOracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        print_log_if_failing("redis-server", self.port, &self.dir.join("redis.log"));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// When a test fails, the servers it started print their logs' last lines
/// into its captured output, so a failure in CI explains itself.
fn print_log_if_failing(what: &str, port: u16, log: &std::path::Path) {
    if !std::thread::panicking() {
        return;
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(40)..];
    eprintln!("---- {what} on port {port}, last {} log lines:", tail.len());
    for l in tail {
        eprintln!("{l}");
    }
}

// ------------------------------------------------------------ replication

/// Polls `f` every 50 ms for up to 30 s; panics naming `what` if it never holds.
pub fn eventually(what: &str, f: impl FnMut() -> bool) {
    eventually_within(what, Duration::from_secs(30), f);
}

/// [`eventually`] for up to `limit` (for waits longer than 30 s can be on
/// a loaded machine: the limit only bounds a hang).
pub fn eventually_within(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out ({limit:?}) waiting for {what}");
}

/// [`eventually`] for a check that also says what it saw: the last of it
/// goes in the panic, so a wait that timed out shows where it stood.
pub fn eventually_seen(what: &str, mut f: impl FnMut() -> (bool, String)) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, seen) = f();
        if ok {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out (30s) waiting for {what}; last seen: {seen}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn digest(c: &mut redis::Connection) -> String {
    cmd(c, &["DEBUG", "DIGEST"])
}

/// The replica's link is up, its offset is the master's and both hold the
/// same data (DEBUG DIGEST, equal between Redis and LatticeDB).
pub fn in_sync(master: &mut redis::Connection, replica: &mut redis::Connection) -> bool {
    let offset: u64 = info_field(master, "master_repl_offset");
    let link: String = info_field(replica, "master_link_status");
    link == "up"
        && info_field::<u64>(replica, "master_repl_offset") == offset
        && digest(master) == digest(replica)
}

/// A `node-slot` no other node of this test process has: two active peers
/// whose slots collide refuse each other (1 chance in 1024 per pair with
/// the slot drawn from a random node id), which would fail a test at random.
pub fn unique_node_slot() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    ((u64::from(std::process::id()) * 37 + n) % 1024).to_string()
}

/// A test directory, removed when the test ends (passed or not).
pub struct TestDir(std::path::PathBuf);

impl std::ops::Deref for TestDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An empty directory for `tag` of this test process.
pub fn tempdir(tag: &str) -> TestDir {
    let d = std::env::temp_dir().join(format!("lattice-dir-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TestDir(d)
}

// ------------------------------------------------------------ active replication

/// A node that takes writes (`active-replica yes`, a short repl-timeout, a
/// slot of its own) and will pull from the peers it is told of.
pub fn active_node(extra: &[&str]) -> Server {
    let slot = unique_node_slot();
    let mut args = vec!["--active-replica", "yes", "--repl-timeout", "3"];
    args.extend_from_slice(&["--node-slot", &slot]);
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// `a` pulls from `port` (a peer, or a proxy in front of one).
pub fn pull(a: &Server, port: u16) {
    let r: String = cmd(
        &mut a.conn(),
        &["REPLICAOF", "127.0.0.1", &port.to_string()],
    );
    assert!(r.starts_with("OK"), "{r}");
}

/// `peers` links of `n` are connected.
pub fn wait_linked(n: &Server, peers: usize) {
    let mut c = n.conn();
    eventually("the peer links to connect", || {
        let info: String = cmd(&mut c, &["INFO", "replication"]);
        info.matches("state=connected").count() == peers
    });
}

/// The key states a node's links asked for (every `conflicts=` of INFO
/// replication, summed).
pub fn asks_all(c: &mut redis::Connection) -> u64 {
    let info: String = cmd(c, &["INFO", "replication"]);
    let fields = info.split([',', '\n', '\r']);
    let n = fields.filter_map(|f| f.strip_prefix("conflicts="));
    n.map(|n| n.parse::<u64>().unwrap()).sum()
}

/// Waits until every node holds the same data: DEBUG DIGEST and DBSIZE at
/// the same moment (DEBUG DIGEST skips a key whose TTL passed, DBSIZE
/// counts it until it is removed: equal in the end).
pub fn converged(nodes: &[&Server]) {
    let mut conns: Vec<_> = nodes.iter().map(|n| n.conn()).collect();
    eventually("the nodes to converge", || {
        let d: Vec<(String, i64)> = conns
            .iter_mut()
            .map(|c| (digest(c), cmd(c, &["DBSIZE"])))
            .collect();
        d.windows(2).all(|w| w[0] == w[1])
    });
}

/// Two active nodes, each pulling from the other through a proxy of its
/// own: `pa` carries a's stream to b, `pb` b's stream to a.
pub struct Pair {
    pub a: Server,
    pub b: Server,
    pub pa: proxy::Proxy,
    pub pb: proxy::Proxy,
}

impl Pair {
    /// Started with `extra` directives on both nodes, and linked.
    pub fn start(extra: &[&str]) -> Pair {
        let (a, b) = (active_node(extra), active_node(extra));
        let (pa, pb) = (proxy::Proxy::start(a.port), proxy::Proxy::start(b.port));
        pull(&a, pb.port);
        pull(&b, pa.port);
        wait_linked(&a, 1);
        wait_linked(&b, 1);
        Pair { a, b, pa, pb }
    }

    pub fn partition(&self) {
        self.pa.cut();
        self.pb.cut();
    }

    pub fn heal(&self) {
        self.pa.heal();
        self.pb.heal();
    }
}

/// A full mesh of `n` active nodes (multi-master), each link through a
/// proxy of its own (`proxies[i][j]`: what node j pulls from node i), linked.
pub fn mesh(n: usize) -> (Vec<Server>, Vec<Vec<proxy::Proxy>>) {
    let nodes: Vec<Server> = (0..n)
        .map(|_| active_node(&["--multi-master", "yes"]))
        .collect();
    let proxies: Vec<Vec<proxy::Proxy>> = nodes
        .iter()
        .map(|node| (0..n).map(|_| proxy::Proxy::start(node.port)).collect())
        .collect();
    for (j, node) in nodes.iter().enumerate() {
        for (i, row) in proxies.iter().enumerate() {
            if i != j {
                pull(node, row[j].port);
            }
        }
    }
    for node in &nodes {
        wait_linked(node, n - 1);
    }
    (nodes, proxies)
}
