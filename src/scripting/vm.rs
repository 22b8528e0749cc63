//! One Lua 5.1 state per worker thread, with Redis's environment
//! (`prelude.lua`), the scripts it compiled, and Redis's PRNG.

use std::cell::RefCell;

use mlua::{Function, Lua, LuaOptions, RegistryKey, StdLib, Table};

use crate::core::Core;

/// A map by name with foldhash (looked up on every EVALSHA and FCALL).
type FastMap<V> = hashbrown::HashMap<String, V, foldhash::fast::RandomState>;

/// A thread's Lua state and the scripts compiled in it.
pub(crate) struct Vm {
    pub lua: Lua,
    /// The prelude's private table (`rcall`, `run`, `env`, `G`, `resp`).
    pub private: Table,
    /// The state's main thread, on which runs are called
    /// (`call_with`: registry references, not mlua's call).
    pub(crate) state: *mut mlua::lua_State,
    /// The scripts compiled here (in the registry) and their flags.
    funcs: FastMap<(RegistryKey, u32)>,
    /// FUNCTION libraries compiled here, by name: the library's id and its
    /// functions.
    libs: FastMap<(u64, FastMap<Function>)>,
    /// The core and cache generation the compiled scripts belong to.
    owner: (usize, u64),
    /// This state's memory as last added to `LUA_MEMORY`.
    counted: usize,
    /// The runs of EVAL scripts and FUNCTIONs (`stack::run_script`,
    /// `stack::run_function`), in the registry.
    pub(crate) run: (RegistryKey, RegistryKey),
    /// FCALL's lookups, by the name argument as spelled, made at the
    /// function directory's generation `found_gen` (`Functions::generation`):
    /// a call finds its function here with no lock, copy or clone.
    found: hashbrown::HashMap<Vec<u8>, Found, foldhash::fast::RandomState>,
    found_gen: u64,
}

/// A function as FCALL found it: its name as registered, its flags, and
/// its callback compiled in this state (in the registry).
pub(crate) struct Found {
    pub name: String,
    pub flags: u32,
    pub f: RegistryKey,
}

/// At most this many names in `Vm::found` (a client spelling one name in
/// every case cannot grow it without bound).
const FOUND_MAX: usize = 64;

/// The memory of every thread's Lua state (INFO's used_memory_lua), as
/// each last saw it after a script.
static LUA_MEMORY: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The flags of script `sha` if this thread compiled it (None also when
/// its state is busy running a script).
pub(super) fn cached_flags(core: &Core, sha: &str) -> Option<u32> {
    VM.with(|cell| {
        let slot = cell.try_borrow().ok()?;
        let vm = slot.as_ref()?;
        let owner = (core as *const Core as usize, core.scripts.generation());
        (vm.owner == owner).then(|| vm.funcs.get(sha).map(|f| f.1))?
    })
}

/// The flags of FCALL's function `arg` if this thread found it at the
/// directory's current generation (None also when its state is busy).
pub(super) fn found_flags(core: &Core, arg: &[u8]) -> Option<u32> {
    let gen = core.functions.generation();
    VM.with(|cell| {
        let slot = cell.try_borrow().ok()?;
        slot.as_ref()?.found(gen, arg).map(|f| f.flags)
    })
}

/// The memory all Lua states use.
pub(crate) fn lua_memory() -> usize {
    LUA_MEMORY.load(std::sync::atomic::Ordering::Relaxed)
}

/// The script running on this thread, for the count hook.
pub(super) struct Current {
    pub start: std::time::Instant,
    pub busy: std::sync::Arc<crate::core::scripts::Busy>,
    pub threshold_ms: u64,
    /// Past the threshold: the run as other threads see it, registered in
    /// `busy` (made from `pending` then).
    pub run: Option<std::sync::Arc<crate::core::scripts::Running>>,
    /// The `Pending` of `invoke`'s frame, alive while this is current.
    pub pending: *const (),
}

/// What a run's `Running` record is made of, should it pass the busy
/// threshold (most runs do not, and pay for no copy of their arguments).
pub(super) struct Pending<'a> {
    pub eval: bool,
    pub name: &'a str,
    /// The command that runs it (FUNCTION STATS).
    pub sent: Option<crate::protocol::Args<'a>>,
    pub shards: Option<&'a [(usize, usize)]>,
    pub script: &'a super::call::Script<'a>,
}

impl Pending<'_> {
    fn running(&self, start: std::time::Instant) -> std::sync::Arc<crate::core::scripts::Running> {
        let r = std::sync::Arc::new(crate::core::scripts::Running {
            eval: self.eval,
            name: self.name.to_string(),
            argv: self.sent.map_or_else(Vec::new, |a| a.to_vec()),
            start,
            shards: self.shards.map(|s| s.to_vec()),
            dirty: self.script.dirty.get().into(),
            killed: Default::default(),
        });
        // From now on the script's writes mark the record (`call::resolve`).
        let _ = self.script.run.set(r.clone());
        r
    }
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
    /// When this thread's state started running a library's code (FUNCTION
    /// LOAD's 500 ms limit).
    static LOADING: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
    /// Redis's lrand48 state (rand.c), seeded with 0 as `redisSrand48(0)`.
    static RAND: std::cell::Cell<u64> = const { std::cell::Cell::new(0x330E) };
}

/// Runs `f` with this thread's VM, built on first use and cleared of its
/// compiled scripts when the cache was flushed since.
pub(super) fn with<R>(core: &Core, f: impl FnOnce(&mut Vm) -> R) -> R {
    VM.with(|cell| {
        let mut slot = cell.borrow_mut();
        let owner = (core as *const Core as usize, core.scripts.generation());
        let vm = slot.get_or_insert_with(|| Vm::new().expect("the Lua environment builds"));
        if vm.owner != owner {
            vm.funcs.clear();
            vm.lua.expire_registry_values();
            vm.owner = owner;
            let _ = vm.lua.gc_collect();
        }
        let r = f(vm);
        vm.count_memory();
        r
    })
}

impl Vm {
    fn new() -> mlua::Result<Vm> {
        // The libraries Redis loads (base, table, string, math, debug: the
        // last only for the error handler; coroutine is part of base in 5.1).
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG;
        // SAFETY: `debug` is the only unsafe library loaded; the prelude
        // keeps it for Redis's error handler and removes it from the
        // globals, and scripts run in an environment that only reaches what
        // the prelude lists (no os, io, debug, loadfile, getfenv ...).
        let lua = unsafe { Lua::unsafe_new_with(libs, LuaOptions::new()) };
        if global_is_mimalloc() {
            // SAFETY: the state's blocks so far came from mlua's allocator
            // through the global allocator, mimalloc: `lua_alloc`'s contract.
            unsafe {
                lua.exec_raw::<()>((), |state| {
                    mlua::ffi::lua_setallocf(state, lua_alloc, std::ptr::null_mut())
                })?;
            }
        }
        let private = lua.create_table()?;
        private.set("version", "7.0.15")?;
        private.set("version_num", 0x07000f)?;
        private.set("resp", 2)?;
        private.set(
            "sha1",
            lua.create_function(|_, s: mlua::String| Ok(sha1_hex(&s.as_bytes())))?,
        )?;
        private.set("log", lua.create_function(log)?)?;
        private.set("rand", lua.create_function(|_, ()| Ok(rand()))?)?;
        private.set(
            "seed",
            lua.create_function(|_, s: f64| {
                seed(s as i64 as i32);
                Ok(())
            })?,
        )?;
        private.set("bit", super::bit::library(&lua)?)?;
        private.set("cjson_raw", super::cjson::library(&lua)?)?;
        private.set("cmsgpack_raw", super::cmsgpack::library(&lua)?)?;
        private.set(
            "flag_names",
            lua.create_sequence_from(super::flags::NAMES.iter().map(|(_, n)| *n))?,
        )?;
        lua.set_named_registry_value("lattice_private", private.clone())?;
        for (i, name) in TRAMPOLINE_NAMES.iter().enumerate() {
            // SAFETY: `TRAMPOLINES[i]` only moves values on the Lua stack
            // and calls a Lua function (see `trampoline`).
            private.set(*name, unsafe { lua.create_c_function(TRAMPOLINES[i]) }?)?;
        }
        private.set("bound_acl_check", super::bound_acl_check(&lua)?)?;
        // redis.call and redis.pcall read the run's modes from their
        // environment, the prelude's `modes` table.
        let modes = lua.create_sequence_from([2, 3])?;
        private.set("modes", &modes)?;
        private.set("c_call", with_env(&lua, super::stack::redis_call, &modes)?)?;
        private.set(
            "c_pcall",
            with_env(&lua, super::stack::redis_pcall, &modes)?,
        )?;
        lua.load(include_str!("prelude.lua"))
            .set_name("=prelude")
            .call::<()>(private.clone())?;
        lua.gc_collect()?;
        // Redis's luaMaskCountHook: every 100,000 instructions.
        lua.set_hook(
            mlua::HookTriggers::new().every_nth_instruction(100_000),
            count_hook,
        );
        let g: Table = private.raw_get("G")?;
        let env_seen: Table = private.raw_get("env_seen")?;
        let globals = [
            mlua::Value::Table(g),
            mlua::Value::Table(env_seen),
            mlua::Value::String(lua.create_string("KEYS")?),
            mlua::Value::String(lua.create_string("ARGV")?),
        ];
        let run = (
            lua.create_registry_value(run_closure(
                &lua,
                super::stack::run_script,
                &private,
                &modes,
                &globals,
            )?)?,
            lua.create_registry_value(run_closure(
                &lua,
                super::stack::run_function,
                &private,
                &modes,
                &[],
            )?)?,
        );
        let mut state = std::ptr::null_mut();
        // SAFETY: only reads the pointer of the state the closure runs
        // on: the main thread's (exec_raw calls it there).
        unsafe { lua.exec_raw::<()>((), |l| state = l)? };
        Ok(Vm {
            lua,
            private,
            state,
            funcs: Default::default(),
            libs: Default::default(),
            owner: (0, 0),
            counted: 0,
            run,
            found: Default::default(),
            found_gen: 0,
        })
    }

    fn count_memory(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self.lua.used_memory();
        if now > self.counted {
            LUA_MEMORY.fetch_add(now - self.counted, Relaxed);
        } else {
            LUA_MEMORY.fetch_sub(self.counted - now, Relaxed);
        }
        self.counted = now;
    }

    /// The script `sha` if this state compiled it, with its flags.
    pub(crate) fn compiled(&self, sha: &str) -> Option<(&RegistryKey, u32)> {
        self.funcs.get(sha).map(|(f, flags)| (f, *flags))
    }

    /// Compiles the script `sha` from `body` (its shebang line left out,
    /// its line feed kept) unless this state has it; returns its flags.
    /// Err: the reply's error, Redis's shebang message or "Error
    /// compiling script (new function): ...".
    pub(crate) fn compile(&mut self, sha: &str, body: &[u8]) -> Result<u32, String> {
        if let Some(f) = self.funcs.get(sha) {
            return Ok(f.1);
        }
        let (flags, skip) = super::flags::shebang(body).map_err(|m| format!("ERR {m}"))?;
        let env: Table = self.private.raw_get("env").map_err(|e| e.to_string())?;
        let f = self
            .lua
            .load(&body[skip..])
            .set_name("@user_script")
            .set_mode(mlua::ChunkMode::Text)
            .set_environment(env)
            .into_function()
            .map_err(|e| {
                let m = match e {
                    mlua::Error::SyntaxError { message, .. } => message,
                    e => e.to_string(),
                };
                format!("ERR Error compiling script (new function): {m}")
            })?;
        let f = self
            .lua
            .create_registry_value(f)
            .map_err(|e| e.to_string())?;
        self.funcs.insert(sha.to_string(), (f, flags));
        Ok(flags)
    }

    /// Compiles a library's code (after its metadata line) and runs it to
    /// register its functions. Err: the reply's error text.
    pub(crate) fn load_library(&self, code: &[u8]) -> Result<Vec<Registered>, String> {
        let env: Table = self.private.raw_get("fenv").map_err(|e| e.to_string())?;
        let f = self
            .lua
            .load(code)
            .set_name("@user_function")
            .set_mode(mlua::ChunkMode::Text)
            .set_environment(env)
            .into_function()
            .map_err(|e| {
                let m = match e {
                    mlua::Error::SyntaxError { message, .. } => message,
                    e => e.to_string(),
                };
                format!("ERR Error compiling function: {m}")
            })?;
        let load: Function = self
            .private
            .raw_get("load_library")
            .map_err(|e| e.to_string())?;
        self.private
            .set("killed", false)
            .map_err(|e| e.to_string())?;
        LOADING.with(|l| l.set(Some(std::time::Instant::now())));
        let r = load.call::<(bool, mlua::Value)>(f);
        LOADING.with(|l| l.set(None));
        let (ok, v) = r.map_err(|e| e.to_string())?;
        if !ok {
            let msg = v
                .as_string()
                .map(|s| s.to_string_lossy())
                .unwrap_or_default();
            return Err(format!("ERR Error registering functions: {msg}"));
        }
        let mlua::Value::Table(list) = v else {
            return Err("ERR No functions registered".into());
        };
        let mut out = Vec::new();
        for entry in list.sequence_values::<Table>() {
            let t = entry.map_err(|e| e.to_string())?;
            let get = |k: &str| t.raw_get::<Option<String>>(k).ok().flatten();
            let names: Vec<String> = t
                .raw_get::<Table>("flags")
                .map(|f| {
                    f.sequence_values::<String>()
                        .filter_map(|x| x.ok())
                        .collect()
                })
                .unwrap_or_default();
            out.push(Registered {
                info: crate::core::scripts::FunctionInfo {
                    name: get("name").unwrap_or_default(),
                    desc: get("description"),
                    flags: names
                        .iter()
                        .filter_map(|n| super::flags::by_name(n.as_bytes()))
                        .fold(0, |a, b| a | b),
                },
                f: t.raw_get("callback").map_err(|e| e.to_string())?,
            });
        }
        if out.is_empty() {
            return Err("ERR No functions registered".into());
        }
        Ok(out)
    }

    /// Keeps the functions of library `lib` (compiled here as `id`).
    pub(crate) fn keep_library(&mut self, lib: &str, id: u64, fs: Vec<Registered>) {
        let fs = fs.into_iter().map(|r| (r.info.name, r.f)).collect();
        self.libs.insert(lib.to_string(), (id, fs));
    }

    /// FCALL's function `arg` as this state last found it, if the
    /// directory is still at generation `gen` (read before any lookup).
    pub(crate) fn found(&self, gen: u64, arg: &[u8]) -> Option<&Found> {
        (self.found_gen == gen).then(|| self.found.get(arg))?
    }

    /// Keeps what FCALL found for `arg` at generation `gen`: the function
    /// `f` registered as `name` with `flags`.
    pub(crate) fn keep_found(
        &mut self,
        gen: u64,
        arg: &[u8],
        (name, flags, f): (String, u32, Function),
    ) -> mlua::Result<()> {
        if self.found_gen != gen || self.found.len() >= FOUND_MAX {
            self.found.clear();
            self.lua.expire_registry_values();
            self.found_gen = gen;
        }
        let f = self.lua.create_registry_value(f)?;
        self.found.insert(arg.to_vec(), Found { name, flags, f });
        Ok(())
    }

    /// Function `name` of `lib`, compiling the library here if this state
    /// has not got this version of it.
    pub(crate) fn library_function(
        &mut self,
        lib: &crate::core::scripts::Library,
        name: &str,
    ) -> Result<Function, String> {
        if let Some((id, fs)) = self.libs.get(&lib.name) {
            if *id == lib.id {
                if let Some(f) = fs.get(name) {
                    return Ok(f.clone());
                }
            }
        }
        let code = super::functions::code_of(&lib.code);
        let fs = self.load_library(code)?;
        self.keep_library(&lib.name, lib.id, fs);
        self.libs
            .get(&lib.name)
            .and_then(|(_, fs)| fs.get(name).cloned())
            .ok_or_else(|| "ERR Function not found".into())
    }
}

/// Sets the script this thread runs (None when it ends); returns the one
/// that was set.
pub(super) fn set_current(c: Option<Current>) -> Option<Current> {
    CURRENT.with(|x| std::mem::replace(&mut *x.borrow_mut(), c))
}

/// Redis's count hook (scriptInterrupt): past `busy-reply-threshold` the
/// run is registered as busy (other threads answer BUSY to what needs its
/// shards), this thread's idle clients are answered, and a killed script
/// is stopped; `priv.killed` makes a pcall that caught the error raise it
/// again, as Redis's line hook does.
fn count_hook(lua: &Lua, _: mlua::Debug) -> mlua::Result<mlua::VmState> {
    use std::sync::atomic::Ordering::Relaxed;
    if LOADING
        .with(|l| l.get())
        .is_some_and(|t| t.elapsed().as_millis() > LOAD_TIMEOUT_MS)
    {
        stop(lua, "ERR FUNCTION LOAD timeout")?;
        return Err(mlua::Error::runtime("FUNCTION LOAD timeout"));
    }
    let step =
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            let cur = c.as_mut()?;
            if cur.run.is_none() {
                let elapsed = cur.start.elapsed().as_millis() as u64;
                if elapsed < cur.threshold_ms {
                    return None;
                }
                // SAFETY: `pending` points to the `Pending` on `invoke`'s
                // stack, which outlives the Lua call this hook runs in (it is
                // taken out of CURRENT before that frame ends).
                let pending = unsafe { &*(cur.pending as *const Pending) };
                let run = pending.running(cur.start);
                crate::log_warning!(
                "Slow script detected: still in execution after {elapsed} milliseconds. You can \
                 try killing the script using the {} command. Script name is: {}.",
                if run.eval { "SCRIPT KILL" } else { "FUNCTION KILL" },
                run.name
            );
                cur.busy.add(run.clone());
                cur.run = Some(run);
            }
            Some((cur.busy.serve.get().cloned(), cur.run.clone()?))
        });
    let Some((serve, run)) = step else {
        return Ok(mlua::VmState::Continue);
    };
    if let Some(serve) = serve {
        serve();
    }
    if run.killed.load(Relaxed) {
        crate::log_warning!("Lua script killed by user with SCRIPT KILL.");
        stop(lua, &format!("ERR {KILLED}"))?;
        return Err(mlua::Error::runtime(KILLED));
    }
    Ok(mlua::VmState::Continue)
}

/// FUNCTION LOAD's limit on running a library's code (Redis's
/// LOAD_TIMEOUT_MS).
const LOAD_TIMEOUT_MS: u128 = 500;

/// Marks the run as stopped with `err`: the error handler reports it and
/// a pcall that catches it raises it again (`priv.killed`).
fn stop(lua: &Lua, err: &str) -> mlua::Result<()> {
    if let Ok(p) = lua.named_registry_value::<Table>("lattice_private") {
        let t = lua.create_table()?;
        t.set("err", err)?;
        p.set("killed", t)?;
    }
    Ok(())
}

/// The error a killed script ends with.
pub(super) const KILLED: &str = "Script killed by user with SCRIPT KILL...";

/// A function a library registered, with its callback.
pub(crate) struct Registered {
    pub info: crate::core::scripts::FunctionInfo,
    pub f: Function,
}

/// `redis.log(level, message)`.
fn log(_: &Lua, (level, msg): (i64, String)) -> mlua::Result<()> {
    match level {
        0 => crate::log_debug!("{msg}"),
        1 => crate::log_verbose!("{msg}"),
        2 => crate::log_notice!("{msg}"),
        _ => crate::log_warning!("{msg}"),
    }
    Ok(())
}

/// The SHA1 of `data` in lower-case hex.
pub(super) fn sha1_hex(data: &[u8]) -> String {
    String::from_utf8_lossy(&sha1_key(data)).into_owned()
}

/// The SHA1 of `data` in lower-case hex, on the stack.
pub(super) fn sha1_key(data: &[u8]) -> [u8; 40] {
    use sha1::{Digest, Sha1};
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut key = [0u8; 40];
    for (i, b) in Sha1::digest(data).iter().enumerate() {
        key[2 * i] = HEX[(b >> 4) as usize];
        key[2 * i + 1] = HEX[(b & 15) as usize];
    }
    key
}

/// `redisLrand48() % INT32_MAX / INT32_MAX`, as Redis's math.random.
fn rand() -> f64 {
    const A: u64 = 0x5DEECE66D;
    let x = RAND.with(|r| {
        let x = (r.get().wrapping_mul(A).wrapping_add(0xB)) & ((1 << 48) - 1);
        r.set(x);
        x
    });
    let r = (x >> 17) as i64;
    (r % i32::MAX as i64) as f64 / i32::MAX as f64
}

/// `redisSrand48(seed)`.
fn seed(s: i32) {
    RAND.with(|r| r.set(((s as u32 as u64) << 16) | 0x330E));
}

/// The prelude's functions that raise errors on behalf of the script, each
/// exposed through a C function: a C function called in tail position
/// (`return redis.call(..)`) keeps the script's frame, so Redis's error
/// handler still finds the script's line, as with Redis's C functions.
const TRAMPOLINE_NAMES: [&str; 8] = [
    "c_sha1hex",
    "c_setresp",
    "c_acl_check_cmd",
    "c_log",
    "c_set_repl",
    "c_unpack",
    "c_cjson_encode",
    "c_cjson_decode",
];
const TRAMPOLINE_KEYS: [&std::ffi::CStr; 8] = [
    c"l_sha1hex",
    c"l_setresp",
    c"l_acl_check_cmd",
    c"l_log",
    c"l_set_repl",
    c"l_unpack",
    c"l_cjson_encode",
    c"l_cjson_decode",
];
const TRAMPOLINES: [mlua::lua_CFunction; 8] = [
    trampoline::<0>,
    trampoline::<1>,
    trampoline::<2>,
    trampoline::<3>,
    trampoline::<4>,
    trampoline::<5>,
    trampoline::<6>,
    trampoline::<7>,
];

/// The Lua states' allocator where the server's global allocator is
/// mimalloc (not in unit tests): mimalloc's malloc API, as Redis gives Lua
/// the libc's. mlua's allocator went through Rust's `GlobalAlloc`
/// (mimalloc's aligned path, the server's byte count) and kept its own
/// count: ~0.5k instructions an FCALL. Lua's memory is then counted by
/// Lua (`used_memory_lua`), not in the server's `used_memory`, as in Redis.
///
/// # Safety
/// `ptr` is null or a block from mimalloc.
unsafe extern "C-unwind" fn lua_alloc(
    _: *mut std::ffi::c_void,
    ptr: *mut std::ffi::c_void,
    _osize: usize,
    nsize: usize,
) -> *mut std::ffi::c_void {
    // SAFETY: the contract: `ptr` is null or mimalloc's; mi_realloc of
    // null allocates, and shrinking never fails (Lua 5.1 needs both).
    unsafe {
        if nsize == 0 {
            libmimalloc_sys::mi_free(ptr);
            return std::ptr::null_mut();
        }
        libmimalloc_sys::mi_realloc(ptr, nsize)
    }
}

/// Whether the global allocator is mimalloc (the server's; unit tests and
/// some test binaries use the system's): a block it gives is in
/// mimalloc's heap. Then what mlua allocated may go to `lua_alloc`.
fn global_is_mimalloc() -> bool {
    extern "C" {
        // mimalloc.h's; libmimalloc-sys declares it only with a feature
        // that pulls in another crate.
        fn mi_is_in_heap_region(p: *const std::ffi::c_void) -> bool;
    }
    static IS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IS.get_or_init(|| {
        let layout = std::alloc::Layout::new::<u64>();
        // SAFETY: a non-zero-sized layout; the block is freed with it;
        // mi_is_in_heap_region only compares the address with mimalloc's
        // regions.
        unsafe {
            let p = std::alloc::alloc(layout);
            if p.is_null() {
                return false;
            }
            let r = mi_is_in_heap_region(p as *const std::ffi::c_void);
            std::alloc::dealloc(p, layout);
            r
        }
    })
}

/// A run's C closure (`stack::run_function` or `stack::run_script`) with
/// its upvalues: the prelude's error handler, the private table, "killed",
/// then `more`; and the run's modes as its environment.
fn run_closure(
    lua: &Lua,
    f: mlua::lua_CFunction,
    private: &Table,
    modes: &Table,
    more: &[mlua::Value],
) -> mlua::Result<Function> {
    let handler: Function = private.raw_get("handler")?;
    let n = 3 + more.len() as std::ffi::c_int;
    let mut args = mlua::MultiValue::new();
    for v in [
        mlua::Value::Table(modes.clone()),
        mlua::Value::Function(handler),
        mlua::Value::Table(private.clone()),
        mlua::Value::String(lua.create_string("killed")?),
    ] {
        args.push_back(v);
    }
    args.extend(more.iter().cloned());
    // SAFETY: the closure runs with modes at 1 and the upvalues at
    // 2..=n+1; lua_pushcclosure takes them, leaving modes and the function;
    // lua_setfenv on a C function always succeeds; only the function is
    // left. `stack`'s run functions read what this sets up.
    unsafe {
        lua.exec_raw(args, |state| {
            mlua::ffi::lua_pushcclosure(state, f, n);
            mlua::ffi::lua_pushvalue(state, 1);
            mlua::ffi::lua_setfenv(state, -2);
            mlua::ffi::lua_remove(state, 1);
        })
    }
}

/// The C function `f` with `env` as its environment (what
/// `LUA_ENVIRONINDEX` reads in it).
fn with_env(lua: &Lua, f: mlua::lua_CFunction, env: &Table) -> mlua::Result<Function> {
    // SAFETY: the closure runs with `env` at index 1 and leaves only the
    // new function on the stack; lua_setfenv on a C function always
    // succeeds. `f` is one of `stack`'s functions, whose use of the
    // environment this makes valid.
    unsafe {
        lua.exec_raw(env, |state| {
            mlua::ffi::lua_pushcfunction(state, f);
            mlua::ffi::lua_pushvalue(state, 1);
            mlua::ffi::lua_setfenv(state, -2);
            mlua::ffi::lua_remove(state, 1);
        })
    }
}

/// Calls the Lua function registered under `TRAMPOLINE_KEYS[I]` with this
/// call's arguments and returns all its results; its errors propagate.
unsafe extern "C-unwind" fn trampoline<const I: usize>(
    state: *mut mlua::lua_State,
) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY: Lua calls this with a valid state; the stack holds the
    // arguments. The registry entry is the prelude's function (set before
    // any script runs). This frame owns nothing to drop, so Lua's longjmp
    // on error may pass over it.
    unsafe {
        let n = ffi::lua_gettop(state);
        ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, TRAMPOLINE_KEYS[I].as_ptr());
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, n, ffi::LUA_MULTRET);
        ffi::lua_gettop(state)
    }
}
