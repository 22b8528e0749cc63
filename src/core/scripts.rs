//! The script cache EVAL, EVALSHA and SCRIPT share (`scripting/`): script
//! bodies by their SHA1 (40 lower-case hex digits), with the flags their
//! shebang declares. Each worker thread compiles the bodies into its own Lua
//! state; SCRIPT FLUSH empties this cache and bumps `generation`, so every
//! thread drops what it compiled.

use std::collections::HashMap;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::Arc;

use parking_lot::RwLock;

/// A cached script: its body and its shebang's flags.
pub(crate) type Cached = (Arc<[u8]>, u32);

#[derive(Default)]
pub struct ScriptCache {
    bodies: RwLock<HashMap<String, Cached>>,
    generation: AtomicU64,
    /// Bytes of the cached bodies and their SHA1s (INFO's
    /// used_memory_scripts_eval).
    bytes: AtomicUsize,
    /// DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may call `noscript` commands.
    pub disable_deny: AtomicBool,
    /// Scripts running past `busy-reply-threshold`.
    pub busy: Arc<Busy>,
}

impl ScriptCache {
    /// Adds `body` with its script `flags` under `sha` (no-op when present).
    pub fn insert(&self, sha: &str, body: &[u8], flags: u32) {
        if self.bodies.read().contains_key(sha) {
            return;
        }
        let mut b = self.bodies.write();
        if !b.contains_key(sha) {
            b.insert(sha.to_string(), (body.into(), flags));
            self.bytes.fetch_add(body.len() + sha.len(), Relaxed);
        }
    }

    /// The body and flags of `sha`.
    pub fn get(&self, sha: &str) -> Option<Cached> {
        self.bodies.read().get(sha).cloned()
    }

    pub fn contains(&self, sha: &str) -> bool {
        self.bodies.read().contains_key(sha)
    }

    pub fn len(&self) -> usize {
        self.bodies.read().len()
    }

    /// Bytes the cached scripts take.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }

    /// SCRIPT FLUSH: forgets every script.
    pub fn flush(&self) {
        self.bodies.write().clear();
        self.bytes.store(0, Relaxed);
        self.generation.fetch_add(1, Relaxed);
    }

    /// Bumped by every flush: a thread's compiled scripts of an older
    /// generation are stale.
    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }
}

/// One function of a library, as FUNCTION LIST shows it.
#[derive(Clone, Debug)]
pub struct FunctionInfo {
    pub name: String,
    pub desc: Option<String>,
    /// Script flags (`scripting::flags`).
    pub flags: u32,
}

/// A FUNCTION library: its code (with its `#!lua name=...` line, as
/// loaded) and the functions it registered. Each worker thread compiles
/// the code into its own Lua state when it first calls one of them.
#[derive(Debug)]
pub struct Library {
    pub name: String,
    pub engine: String,
    pub code: Vec<u8>,
    pub functions: Vec<FunctionInfo>,
    /// Unique for the process's life: a thread's compiled copy is of this
    /// id, so a replaced library is compiled again.
    pub id: u64,
}

/// The FUNCTION libraries (FUNCTION LOAD/DELETE/FLUSH/RESTORE, FCALL).
pub struct Functions {
    state: RwLock<FunctionState>,
    next_id: AtomicU64,
    /// Changed by every `update`, to a value no directory of this process
    /// had before: a thread's FCALL lookups made at one generation stay
    /// right while it lasts (`scripting::vm`'s function cache).
    generation: AtomicU64,
}

/// Where `Functions::generation` values come from: process-wide, so two
/// directories (several cores in one test process) never share one.
static GENERATIONS: AtomicU64 = AtomicU64::new(0);

fn new_generation() -> u64 {
    GENERATIONS.fetch_add(1, Relaxed) + 1
}

impl Default for Functions {
    fn default() -> Self {
        Functions {
            state: Default::default(),
            next_id: Default::default(),
            generation: AtomicU64::new(new_generation()),
        }
    }
}

#[derive(Default, Clone)]
pub struct FunctionState {
    /// By name, in name order (FUNCTION LIST, DUMP, the RDB file).
    pub libs: std::collections::BTreeMap<String, Arc<Library>>,
    /// Function name (lower-case: FCALL's names are case-insensitive, as
    /// Redis's functions dictionary) -> its library.
    /// foldhash: looked up twice per FCALL (its flags, then the call).
    funcs: hashbrown::HashMap<String, Arc<Library>, foldhash::fast::RandomState>,
}

impl FunctionState {
    /// Adds `lib`; with `replace`, in place of a library of its name.
    /// Err: Redis's message.
    pub fn add(&mut self, lib: Arc<Library>, replace: bool) -> Result<(), String> {
        let old = self.libs.get(&lib.name).cloned();
        if old.is_some() && !replace {
            return Err(format!("Library '{}' already exists", lib.name));
        }
        for f in &lib.functions {
            if let Some(owner) = self.funcs.get(&f.name.to_ascii_lowercase()) {
                if owner.name != lib.name {
                    return Err(format!("Function {} already exists", f.name));
                }
            }
        }
        if let Some(old) = old {
            self.remove(&old.name);
        }
        for f in &lib.functions {
            self.funcs.insert(f.name.to_ascii_lowercase(), lib.clone());
        }
        self.libs.insert(lib.name.clone(), lib);
        Ok(())
    }

    pub fn remove(&mut self, name: &str) -> bool {
        let Some(lib) = self.libs.remove(name) else {
            return false;
        };
        for f in &lib.functions {
            self.funcs.remove(&f.name.to_ascii_lowercase());
        }
        true
    }
}

impl Functions {
    /// A new library id.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Relaxed) + 1
    }

    /// The flags of function `f`, if there is one (FCALL's flags, asked
    /// before every call: no copies).
    pub fn flags_of(&self, f: &str) -> Option<u32> {
        let s = self.state.read();
        let lib = lookup_ci(&s.funcs, f)?;
        let info = lib
            .functions
            .iter()
            .find(|x| x.name.eq_ignore_ascii_case(f))?;
        Some(info.flags)
    }

    /// A copy of the libraries (cheap: the libraries are shared).
    pub fn snapshot(&self) -> FunctionState {
        self.state.read().clone()
    }

    /// Runs `f` on the libraries, under the write lock; a new generation
    /// once they changed (before the lock is released).
    pub fn update<R>(&self, f: impl FnOnce(&mut FunctionState) -> R) -> R {
        let mut state = self.state.write();
        let r = f(&mut state);
        self.generation.store(new_generation(), Release);
        r
    }

    /// The directory's generation. Read it before a lookup: what the
    /// lookup found is then no older than the generation read, so a thread
    /// may keep it until the generation changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Acquire)
    }

    /// Function `f` (any case): its name as registered, its flags, its
    /// library.
    pub fn find(&self, f: &str) -> Option<(String, u32, Arc<Library>)> {
        let s = self.state.read();
        let lib = lookup_ci(&s.funcs, f)?;
        let info = lib
            .functions
            .iter()
            .find(|x| x.name.eq_ignore_ascii_case(f))?;
        Some((info.name.clone(), info.flags, lib.clone()))
    }

    /// (libraries, functions).
    pub fn counts(&self) -> (usize, usize) {
        let s = self.state.read();
        (s.libs.len(), s.funcs.len())
    }
}

/// A script or function that ran past `busy-reply-threshold` (Redis's
/// timed-out script): other clients that need what it holds get BUSY,
/// SCRIPT KILL / FUNCTION KILL may stop it (DECISIONS 57).
pub struct Running {
    /// EVAL (false: FCALL).
    pub eval: bool,
    /// The SHA1 or function name.
    pub name: String,
    /// The command that runs it (FUNCTION STATS).
    pub argv: Vec<Vec<u8>>,
    pub start: std::time::Instant,
    /// The (database, shard)s it holds; `None`: every shard.
    pub shards: Option<Vec<(usize, usize)>>,
    /// It wrote: it can no longer be killed (UNKILLABLE).
    pub dirty: AtomicBool,
    /// SCRIPT KILL / FUNCTION KILL asked it to stop.
    pub killed: AtomicBool,
}

/// The scripts running past the threshold.
#[derive(Default)]
pub struct Busy {
    runs: parking_lot::Mutex<Vec<Arc<Running>>>,
    /// `runs.len()`, read without the lock on every command.
    count: AtomicUsize,
    /// The server's way to answer its thread's other clients while a
    /// script runs on it (set by the server at start).
    pub serve: std::sync::OnceLock<Arc<dyn Fn() + Send + Sync>>,
}

impl Busy {
    /// Whether any script is past the threshold (one relaxed load).
    #[inline]
    pub fn any(&self) -> bool {
        self.count.load(Relaxed) > 0
    }

    pub fn add(&self, r: Arc<Running>) {
        let mut runs = self.runs.lock();
        runs.push(r);
        self.count.store(runs.len(), Relaxed);
    }

    pub fn remove(&self, r: &Arc<Running>) {
        let mut runs = self.runs.lock();
        runs.retain(|x| !Arc::ptr_eq(x, r));
        self.count.store(runs.len(), Relaxed);
    }

    /// The scripts past the threshold, oldest first.
    pub fn runs(&self) -> Vec<Arc<Running>> {
        self.runs.lock().clone()
    }
}

/// `map[name]` for a map keyed by lowercase names: without a copy when
/// `name` has no capitals (the usual case: FCALL runs this per call).
fn lookup_ci<'m, V, S: std::hash::BuildHasher>(
    map: &'m hashbrown::HashMap<String, V, S>,
    name: &str,
) -> Option<&'m V> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        map.get(&name.to_ascii_lowercase())
    } else {
        map.get(name)
    }
}
