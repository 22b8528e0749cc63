/*
 * ACL: the registry of users, the user each connection runs as, and the
 * security log (Redis 7.0's acl.c model; the rules are in `user.rs`, the
 * ACL command and the check dispatch runs in `commands/acl.rs`).
 *
 * Users live in a sorted map of `Arc<User>` values that are replaced, never
 * changed in place. A connection holds the `Arc` of its user and the
 * registry's generation when it took it; every change bumps the
 * generation, and the connection re-reads its user by name before its
 * next command when the two differ. So the cost on the command path is
 * one relaxed load, plus, for a user that is not all-permissive (`free`),
 * the check itself: the default user of a server without ACL rules pays
 * nothing more (docs/DECISIONS.md).
 *
 * `requirepass` is the default user's password, as in Redis: setting it
 * (config or CONFIG SET) resets the default user's passwords to that one,
 * an empty value makes it `nopass`.
 */

pub(crate) mod user;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::table::CommandTable;
pub(crate) use user::{Denied, User};

/// What ACL LOG records a denial as.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason {
    Command,
    Key,
    Channel,
    Auth,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

/// Where the denied command ran.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LogContext {
    Toplevel,
    Multi,
    Lua,
}

impl LogContext {
    pub fn name(self) -> &'static str {
        match self {
            LogContext::Toplevel => "toplevel",
            LogContext::Multi => "multi",
            LogContext::Lua => "lua",
        }
    }
}

/// One ACL LOG entry.
#[derive(Clone, Debug)]
pub struct LogEntry {
    pub count: u64,
    pub reason: Reason,
    pub context: LogContext,
    pub object: Vec<u8>,
    pub username: String,
    pub ctime_ms: u64,
    pub client_info: String,
}

/// Entries this close in time with the same fields are one entry counted
/// again (Redis's ACL_LOG_GROUPING_MAX_TIME_DELTA).
const LOG_GROUPING_MS: u64 = 60_000;

/// The user every connection starts as.
pub(crate) const DEFAULT: &str = "default";

pub struct Acl {
    users: RwLock<BTreeMap<String, Arc<User>>>,
    generation: AtomicU64,
    /// Whether a connection must AUTH before running commands: the default
    /// user has a password or is off (Redis's authRequired).
    auth_required: AtomicBool,
    /// `acl-pubsub-default allchannels`: new users and `reset` get `&*`.
    pubsub_all: AtomicBool,
    log: Mutex<VecDeque<LogEntry>>,
}

impl Default for Acl {
    fn default() -> Acl {
        Acl {
            users: RwLock::new(BTreeMap::new()),
            generation: AtomicU64::new(1),
            auth_required: AtomicBool::new(false),
            pubsub_all: AtomicBool::new(false),
            log: Mutex::new(VecDeque::new()),
        }
    }
}

impl Acl {
    /// The registry with the default user (`on nopass ~* &* +@all`).
    pub fn new(t: &CommandTable) -> Acl {
        let acl = Acl::default();
        acl.users
            .write()
            .insert("default".into(), Arc::new(default_user(t)));
        acl
    }

    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    #[inline]
    pub fn auth_required(&self) -> bool {
        self.auth_required.load(Relaxed)
    }

    pub fn pubsub_all(&self) -> bool {
        self.pubsub_all.load(Relaxed)
    }

    pub fn set_pubsub_default(&self, all: bool) {
        self.pubsub_all.store(all, Relaxed);
    }

    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.users.read().get(name).cloned()
    }

    pub fn default_user(&self) -> Arc<User> {
        self.user("default")
            .expect("the default user always exists")
    }

    pub fn users(&self) -> Vec<Arc<User>> {
        self.users.read().values().cloned().collect()
    }

    /// Publishes `u` (new or changed) under its name.
    pub fn put(&self, u: User) {
        let mut users = self.users.write();
        users.insert(u.name.clone(), Arc::new(u));
        self.changed(&users);
    }

    /// Removes users; returns how many existed.
    pub fn remove(&self, names: &[String]) -> usize {
        let mut users = self.users.write();
        let n = names.iter().filter(|n| users.remove(*n).is_some()).count();
        self.changed(&users);
        n
    }

    /// Replaces every user at once (ACL LOAD, start-up); a set without a
    /// default user gets the built-in one.
    pub fn replace_all(&self, t: &CommandTable, mut set: BTreeMap<String, Arc<User>>) {
        set.entry("default".into())
            .or_insert_with(|| Arc::new(default_user(t)));
        let mut users = self.users.write();
        *users = set;
        self.changed(&users);
    }

    fn changed(&self, users: &BTreeMap<String, Arc<User>>) {
        let d = users.get(DEFAULT);
        let required = d.is_none_or(|d| !d.nopass || !d.enabled);
        self.auth_required.store(required, Relaxed);
        self.generation.fetch_add(1, Relaxed);
    }

    /// `requirepass`: the default user's only password, or `nopass`.
    pub fn set_requirepass(&self, t: &CommandTable, pass: &str) {
        let mut u = (*self.default_user()).clone();
        let _ = u.apply(t, b"resetpass", self.pubsub_all());
        let op = if pass.is_empty() {
            b"nopass".to_vec()
        } else {
            [b">", pass.as_bytes()].concat()
        };
        let _ = u.apply(t, &op, self.pubsub_all());
        self.put(u);
    }

    /// Re-reads the client's user after a change to the registry; a user
    /// deleted meanwhile (its connections are being closed) allows nothing.
    #[cold]
    pub fn refresh(&self, client: &mut super::client::ClientState) {
        let gen = self.generation();
        if let Some(old) = &client.user {
            let name = old.name.clone();
            client.user = Some(
                self.user(&name)
                    .unwrap_or_else(|| Arc::new(User::new(&name, false))),
            );
        }
        client.acl_gen = gen;
    }

    /// The user a name and password open, if any (disabled users open
    /// nothing).
    pub fn authenticate(&self, name: &[u8], pass: &[u8]) -> Option<Arc<User>> {
        let u = self.user(std::str::from_utf8(name).ok()?)?;
        u.password_ok(pass).then_some(u)
    }

    /// Adds a denial to the log, or counts it on a recent equal entry.
    pub fn log(&self, e: LogEntry, max_len: usize) {
        let mut log = self.log.lock();
        let same = log.iter().take(10).position(|x| {
            x.reason == e.reason
                && x.context == e.context
                && x.object == e.object
                && x.username == e.username
                && x.ctime_ms.abs_diff(e.ctime_ms) <= LOG_GROUPING_MS
        });
        if let Some(i) = same {
            let mut x = log.remove(i).expect("index found above");
            x.count += 1;
            x.ctime_ms = e.ctime_ms;
            x.client_info = e.client_info;
            log.push_front(x);
            return;
        }
        log.push_front(e);
        log.truncate(max_len);
    }

    pub fn log_entries(&self, count: usize) -> Vec<LogEntry> {
        self.log.lock().iter().take(count).cloned().collect()
    }

    pub fn log_reset(&self) {
        self.log.lock().clear();
    }
}

/// Redis's default user: `on nopass ~* &* +@all`.
pub(crate) fn default_user(t: &CommandTable) -> User {
    let mut u = User::new("default", false);
    for op in ["+@all", "~*", "&*", "on", "nopass"] {
        u.apply(t, op.as_bytes(), false)
            .expect("the default user's rules are valid");
    }
    u
}
