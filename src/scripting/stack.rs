/*
 * `redis.call`, `redis.pcall` and a run's KEYS and ARGV as C functions of
 * the Lua state, working on its stack directly (Redis's script_lua.c
 * luaRedisGenericCommand and luaRedisProtocolToLuaType, in Rust).
 *
 * What it owns: reading a call's arguments from the Lua stack into a
 * reused argument buffer (`Scratch`: one buffer, its spans, the reply
 * buffer; nothing allocated per call once they have grown), pushing the
 * command's RESP reply onto the stack as the Lua value Redis makes of it
 * (`push_reply`), raising a failed `redis.call`'s error table, and
 * calling a script or FUNCTION under Redis's error handler (`run_script`,
 * `run_function`).
 *
 * Why C functions rather than mlua callbacks: a callback took its
 * arguments as a Lua table the prelude built, converted them to owned
 * values, and returned the reply through mlua's references; that wrapper
 * cost about twice the command it ran (docs/PERFORMANCE.md, "Scripts").
 *
 * Lua raises errors with longjmp, which must not pass over a Rust frame
 * that owns something to drop: the Rust work (`run_call`) ends before
 * anything is raised, and the functions that push values hold only
 * borrowed bytes and integers (an out-of-memory error while pushing leaks
 * the scratch buffers at worst). A panic in a command is caught here and
 * resumed once the script's Lua call has returned (`resume_panic`).
 */

use std::cell::{Cell, RefCell};
use std::ffi::c_int;
use std::ops::Range;

use mlua::ffi::{self, lua_State};

use crate::protocol::{Args, ReplyBuf};

/// The reused buffers of one call: the arguments' bytes and their spans,
/// and the command's reply.
struct Scratch {
    buf: Vec<u8>,
    spans: Vec<Range<usize>>,
    reply: ReplyBuf,
}

thread_local! {
    /// Taken while a call uses it (a new one is made if a call nests).
    static SCRATCH: Cell<Option<Box<Scratch>>> = const { Cell::new(None) };
    /// A command's panic, caught in `redis.call`, resumed by `resume_panic`.
    static PANIC: RefCell<Option<Box<dyn std::any::Any + Send>>> = const { RefCell::new(None) };
}

fn take_scratch() -> Box<Scratch> {
    SCRATCH.with(|s| s.take()).unwrap_or_else(|| {
        Box::new(Scratch {
            buf: Vec::with_capacity(256),
            spans: Vec::with_capacity(8),
            reply: ReplyBuf::new(2),
        })
    })
}

/// Keeps the buffers for the next call, unless they grew large (a big
/// reply once should not stay allocated).
fn put_scratch(s: Box<Scratch>) {
    if s.buf.capacity() <= 64 * 1024 && s.reply.buf.capacity() <= 64 * 1024 {
        SCRATCH.with(|c| c.set(Some(s)));
    }
}

/// Resumes the panic a command raised inside `redis.call`, once the Lua
/// call that ran the script has returned.
pub(super) fn resume_panic() {
    if let Some(p) = PANIC.with(|p| p.borrow_mut().take()) {
        std::panic::resume_unwind(p);
    }
}

/// The run's protocol and replication modes, from the function's
/// environment table (`modes` in the prelude: [1] redis.setresp's 2 or 3,
/// [2] redis.set_repl's 0 to 3).
///
/// # Safety
/// `l` is the state running a function made by `Vm::new` with that table
/// as its environment.
unsafe fn modes(l: *mut lua_State) -> super::call::Modes {
    // SAFETY: as the function's contract; the environment index is valid
    // in a C function, the table's slots are numbers the prelude keeps.
    unsafe {
        ffi::lua_rawgeti_(l, ffi::LUA_ENVIRONINDEX, 1);
        ffi::lua_rawgeti_(l, ffi::LUA_ENVIRONINDEX, 2);
        let resp = ffi::lua_tonumber(l, -2);
        let repl = ffi::lua_tonumber(l, -1);
        ffi::lua_settop(l, -3);
        super::call::Modes {
            resp: if resp == 3.0 { 3 } else { 2 },
            repl: repl.clamp(0.0, 3.0) as u8,
        }
    }
}

/// What the Rust part of a call left on the stack's top.
enum Outcome {
    /// The reply's value.
    Reply,
    /// The failed call's error table (`redis.call` raises it).
    Failed,
    /// An error to raise whether called or pcalled (a string).
    Raise,
}

/// `redis.call(cmd, ...)`: the reply, or the error table raised.
///
/// # Safety
/// Called by Lua only, on a function `Vm::new` made (see `modes`).
pub(super) unsafe extern "C-unwind" fn redis_call(l: *mut lua_State) -> c_int {
    // SAFETY: Lua calls this with a valid state; `call` leaves one value.
    unsafe {
        match call(l) {
            Outcome::Reply => 1,
            Outcome::Failed | Outcome::Raise => ffi::lua_error(l),
        }
    }
}

/// `redis.pcall(cmd, ...)`: the reply, or the error table returned.
///
/// # Safety
/// As `redis_call`.
pub(super) unsafe extern "C-unwind" fn redis_pcall(l: *mut lua_State) -> c_int {
    // SAFETY: as in `redis_call`.
    unsafe {
        match call(l) {
            Outcome::Reply | Outcome::Failed => 1,
            Outcome::Raise => ffi::lua_error(l),
        }
    }
}

/// Runs the call whose arguments are the whole stack; leaves one value on
/// it. No Rust value that needs dropping is alive when this returns (the
/// caller may raise a Lua error).
///
/// # Safety
/// As `redis_call`.
unsafe fn call(l: *mut lua_State) -> Outcome {
    // SAFETY: `l` is valid (the contract); `modes` reads the environment.
    let modes = unsafe { modes(l) };
    let mut s = take_scratch();
    // SAFETY: the arguments are the stack's values 1..=top; copied, they
    // are popped, so the reply has the stack's room (a call of 7,999
    // arguments leaves little).
    let read = unsafe {
        let read = read_args(l, &mut s.buf, &mut s.spans);
        ffi::lua_settop(l, 0);
        read
    };
    let ran = read.and_then(|()| {
        let args = Args::new(&s.buf, &s.spans);
        let reply = &mut s.reply;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            super::with_bound(|ctx, script| super::call::run_into(ctx, script, args, modes, reply))
        }));
        match r {
            Ok(Ok(r)) => r.map_err(Ok),
            Ok(Err(unbound)) => Err(Err(unbound.to_string())),
            Err(p) => {
                PANIC.with(|x| *x.borrow_mut() = Some(p));
                Err(Err("a command panicked inside a script".into()))
            }
        }
    });
    // SAFETY: one value pushed on a stack with room for it (Lua gives a C
    // function LUA_MINSTACK free slots); `push_value` checks for more.
    let out = unsafe {
        match &ran {
            Ok(()) => {
                let reply = &s.reply.buf;
                push_value(l, reply, &mut 0, 0);
                if reply.first() == Some(&b'-') {
                    Outcome::Failed
                } else {
                    Outcome::Reply
                }
            }
            // A refusal: the error table, counted already.
            Err(Ok(msg)) => {
                push_error_table(l, msg.as_bytes());
                Outcome::Failed
            }
            Err(Err(msg)) => {
                push_bytes(l, msg.as_bytes());
                Outcome::Raise
            }
        }
    };
    drop(ran);
    put_scratch(s);
    out
}

/// A call that did not run: the refusal to answer (`Ok`, as an error
/// table) or an error to raise (`Err`, as a string).
type NotRun = Result<String, String>;

/// Copies the stack's values into `buf` and `spans`: strings as they are,
/// numbers as Redis's "%.17g".
///
/// # Safety
/// `l` is a valid state.
unsafe fn read_args(
    l: *mut lua_State,
    buf: &mut Vec<u8>,
    spans: &mut Vec<Range<usize>>,
) -> Result<(), NotRun> {
    buf.clear();
    spans.clear();
    // SAFETY: `l` is valid (the contract).
    let n = unsafe { ffi::lua_gettop(l) };
    if n == 0 {
        return Err(Ok(
            "ERR Please specify at least one argument for this redis lib call".into(),
        ));
    }
    for i in 1..=n {
        let start = buf.len();
        // SAFETY: `i` is a valid index (above); a string's pointer and
        // length are Lua's, valid while it is on the stack (copied at once).
        unsafe {
            match ffi::lua_type(l, i) {
                ffi::LUA_TSTRING => {
                    let mut len = 0;
                    let p = ffi::lua_tolstring(l, i, &mut len);
                    buf.extend_from_slice(std::slice::from_raw_parts(p as *const u8, len));
                }
                ffi::LUA_TNUMBER => number(buf, ffi::lua_tonumber(l, i)),
                _ => {
                    return Err(Ok(
                        "ERR Lua redis lib command arguments must be strings or integers".into(),
                    ))
                }
            }
        }
        spans.push(start..buf.len());
    }
    Ok(())
}

/// A number argument as Redis writes it ("%.17g"): a whole number below
/// 1e17 as its digits, without making a string.
fn number(buf: &mut Vec<u8>, n: f64) {
    if n.fract() == 0.0 && n.abs() < 1e17 && n != 0.0 {
        let mut b = [0u8; 20];
        buf.extend_from_slice(crate::protocol::fmt_i64_pub(&mut b, n as i64));
    } else {
        buf.extend_from_slice(crate::protocol::format_double(n).as_bytes());
    }
}

/// Pushes a string.
///
/// # Safety
/// `l` is valid with a free stack slot.
unsafe fn push_bytes(l: *mut lua_State, b: &[u8]) {
    // SAFETY: the contract; Lua copies the bytes.
    unsafe { ffi::lua_pushlstring_(l, b.as_ptr() as *const _, b.len()) }
}

/// Pushes `{err = msg, ignore_error_stats_update = true}`: the error was
/// counted in the statistics already (the script's reply does not count
/// it again).
///
/// # Safety
/// As `push_bytes`, with three free slots.
unsafe fn push_error_table(l: *mut lua_State, msg: &[u8]) {
    // SAFETY: the contract.
    unsafe {
        ffi::lua_createtable(l, 0, 2);
        push_bytes(l, String::from_utf8_lossy(msg).as_bytes());
        ffi::lua_setfield(l, -2, c"err".as_ptr());
        ffi::lua_pushboolean(l, 1);
        ffi::lua_setfield(l, -2, c"ignore_error_stats_update".as_ptr());
    }
}

/// Pushes `{key = <the value on top>}` in place of that value.
///
/// # Safety
/// `l` is valid with a value on top and two free slots.
unsafe fn wrap(l: *mut lua_State, key: &std::ffi::CStr) {
    // SAFETY: the contract.
    unsafe {
        ffi::lua_createtable(l, 0, 1);
        ffi::lua_insert(l, -2);
        ffi::lua_setfield(l, -2, key.as_ptr());
    }
}

/// The line at `pos` (to its CRLF), moving `pos` past it.
fn line<'a>(buf: &'a [u8], pos: &mut usize) -> &'a [u8] {
    let start = (*pos).min(buf.len());
    let end = buf[start..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(buf.len(), |i| start + i);
    *pos = (end + 2).min(buf.len());
    &buf[start..end]
}

fn num(s: &[u8]) -> i64 {
    std::str::from_utf8(s)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Deepest reply pushed (Redis refuses deeper ones too).
const MAX_DEPTH: usize = 1000;

/// Pushes the RESP value at `pos` of `buf` as Redis converts a reply for
/// Lua: integer -> number, bulk -> string, null -> false (RESP2) or nil
/// (RESP3 null), array -> table, status -> {ok=..}, error -> {err=..};
/// RESP3: map -> {map=..}, set -> {set=..}, double -> {double=..},
/// boolean -> boolean, big number -> {big_number=..}, verbatim ->
/// {verbatim_string={format=..,string=..}}; attributes are skipped.
///
/// # Safety
/// `l` is valid with a free slot; deeper levels check for their own.
unsafe fn push_value(l: *mut lua_State, buf: &[u8], pos: &mut usize, depth: usize) {
    // SAFETY: each branch pushes exactly one value (after `lua_checkstack`
    // for the slots beyond the first); the bytes are copied by Lua.
    unsafe {
        let Some(&tag) = buf.get(*pos) else {
            return ffi::lua_pushnil(l);
        };
        if depth >= MAX_DEPTH || ffi::lua_checkstack(l, 4) == 0 {
            return push_error_table(l, b"ERR reached lua stack limit");
        }
        *pos += 1;
        let head = line(buf, pos);
        match tag {
            b':' => ffi::lua_pushnumber(l, num(head) as f64),
            b'$' | b'=' if head == b"-1" => ffi::lua_pushboolean(l, 0),
            b'$' | b'=' => {
                let n = num(head).max(0) as usize;
                let from = (*pos).min(buf.len());
                let body = &buf[from..(from + n).min(buf.len())];
                *pos = (from + n + 2).min(buf.len());
                if tag == b'$' {
                    return push_bytes(l, body);
                }
                ffi::lua_createtable(l, 0, 2);
                push_bytes(l, body.get(..3).unwrap_or(b""));
                ffi::lua_setfield(l, -2, c"format".as_ptr());
                push_bytes(l, body.get(4..).unwrap_or(b""));
                ffi::lua_setfield(l, -2, c"string".as_ptr());
                wrap(l, c"verbatim_string");
            }
            b'+' => {
                push_bytes(l, head);
                wrap(l, c"ok");
            }
            b'-' => push_error_table(l, head),
            b'*' if head == b"-1" => ffi::lua_pushboolean(l, 0),
            b'*' | b'>' => {
                let n = num(head);
                ffi::lua_createtable(l, n.clamp(0, 1024) as c_int, 0);
                for i in 1..=n {
                    push_value(l, buf, pos, depth + 1);
                    ffi::lua_rawseti_(l, -2, i as c_int);
                }
            }
            b'%' | b'~' => {
                ffi::lua_createtable(l, 0, num(head).clamp(0, 1024) as c_int);
                for _ in 0..num(head) {
                    push_value(l, buf, pos, depth + 1);
                    if tag == b'%' {
                        push_value(l, buf, pos, depth + 1);
                    } else {
                        ffi::lua_pushboolean(l, 1);
                    }
                    set_field(l);
                }
                wrap(l, if tag == b'%' { c"map" } else { c"set" });
            }
            b'_' => ffi::lua_pushnil(l),
            b'#' => ffi::lua_pushboolean(l, (head == b"t") as c_int),
            b',' => {
                let d = std::str::from_utf8(head).ok().and_then(|s| s.parse().ok());
                ffi::lua_pushnumber(l, d.unwrap_or(0.0));
                wrap(l, c"double");
            }
            b'(' => {
                push_bytes(l, head);
                wrap(l, c"big_number");
            }
            b'|' => {
                // An attribute: not shown to scripts; the reply follows it.
                for _ in 0..num(head) * 2 {
                    push_value(l, buf, pos, depth + 1);
                    ffi::lua_settop(l, -2);
                }
                push_value(l, buf, pos, depth)
            }
            _ => ffi::lua_pushnil(l),
        }
    }
}

/// Sets table[key] = value from the stack's top three (table, key,
/// value), dropping a pair whose key Lua cannot index by (nil, NaN).
///
/// # Safety
/// `l` is valid with a table, a key and a value on top.
unsafe fn set_field(l: *mut lua_State) {
    // SAFETY: the contract; a nil or NaN key would raise in lua_rawset.
    unsafe {
        let bad = match ffi::lua_type(l, -2) {
            ffi::LUA_TNIL => true,
            ffi::LUA_TNUMBER => ffi::lua_tonumber(l, -2).is_nan(),
            _ => false,
        };
        if bad {
            ffi::lua_settop(l, -3);
        } else {
            ffi::lua_rawset(l, -3);
        }
    }
}

/// Pushes the running script's KEYS and ARGV (a function's keys and
/// arguments) as two new tables (nil, nil outside a run).
///
/// # Safety
/// `l` is valid with two free slots (and two for the table being filled).
unsafe fn push_args(l: *mut lua_State) {
    let lists = super::bound_lists();
    // SAFETY: two tables pushed, each string set into the table below it;
    // the lists borrow the bound run's arguments, alive while it runs.
    unsafe {
        let Some((keys, argv)) = lists else {
            ffi::lua_pushnil(l);
            ffi::lua_pushnil(l);
            return;
        };
        for list in [keys, argv] {
            ffi::lua_createtable(l, list.len().min(1 << 20) as c_int, 0);
            for (i, a) in list.iter().enumerate() {
                push_bytes(l, a);
                ffi::lua_rawseti_(l, -2, i as c_int + 1);
            }
        }
    }
}

/// Starts a run as Redis's scriptRun does: the modes back to RESP2 and
/// replicate-all, `priv.killed` false; then puts the error handler below
/// the function at 1 (the stack is then [handler, f]).
///
/// # Safety
/// `l` is in a closure of `run_closure`'s making (modes as environment,
/// the handler, the private table and "killed" as upvalues 1-3), with the
/// function at 1 and three free slots.
unsafe fn begin_run(l: *mut lua_State) {
    // SAFETY: the contract; rawset on the private table (a plain table)
    // with a key it has does not allocate.
    unsafe {
        ffi::lua_settop(l, 1);
        ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
        ffi::lua_insert(l, 1);
        ffi::lua_pushinteger(l, 2);
        ffi::lua_rawseti(l, ffi::LUA_ENVIRONINDEX, 1);
        ffi::lua_pushinteger(l, 3);
        ffi::lua_rawseti(l, ffi::LUA_ENVIRONINDEX, 2);
        ffi::lua_pushvalue(l, ffi::lua_upvalueindex(3));
        ffi::lua_pushboolean(l, 0);
        ffi::lua_rawset(l, ffi::lua_upvalueindex(2));
    }
}

/// Calls the function at 2 with the `nargs` values above it under the
/// handler at 1, as Redis's luaCallFunction (one `lua_pcall`), and
/// returns ok, the result (or the handler's error table) and the protocol
/// `redis.setresp` left.
///
/// # Safety
/// As `begin_run`, the stack being [handler, f, args...].
unsafe fn finish_run(l: *mut lua_State, nargs: c_int) -> c_int {
    // SAFETY: the contract; [handler, f, args..] -> [ok, result, resp].
    unsafe {
        let status = ffi::lua_pcall(l, nargs, 1, 1);
        ffi::lua_pushboolean(l, (status == 0) as c_int);
        ffi::lua_replace(l, 1);
        ffi::lua_rawgeti(l, ffi::LUA_ENVIRONINDEX, 1);
        3
    }
}

/// A FUNCTION's run: calls FUNCTION `f` with the run's keys and
/// arguments as its two parameters (`push_args`) under Redis's error
/// handler: ok, the result (or the error table), the protocol. (It was
/// Lua: a function, an upvalue trampoline and `xpcall`, three Lua calls
/// around the one.)
///
/// # Safety
/// `l` is the state running the closure `vm::run_closure` made of it.
pub(super) unsafe extern "C-unwind" fn run_function(l: *mut lua_State) -> c_int {
    // SAFETY: Lua calls this with a valid state and the upvalues and
    // environment `run_closure` gave it; at most six slots are used (Lua
    // gives a C function twenty). This frame owns nothing to drop.
    unsafe {
        begin_run(l);
        push_args(l);
        finish_run(l, 2)
    }
}

/// An EVAL script's run: runs `f` as `run_function` runs a FUNCTION,
/// with no parameters: the run's keys and arguments go into the globals
/// KEYS and ARGV and into what the sandbox has shown of the globals
/// (upvalues 4 and 5: G and env_seen; 6 and 7: the strings "KEYS" and
/// "ARGV", so no key is interned per run). It was Lua (four table writes
/// and `xpcall`) around the one call.
///
/// # Safety
/// As `run_function`.
pub(super) unsafe extern "C-unwind" fn run_script(l: *mut lua_State) -> c_int {
    // SAFETY: as in `run_function`; [handler, f, keys, argv]: each table
    // is pushed with its key below it and set with lua_rawset (G and
    // env_seen are plain tables, their __index does not run).
    unsafe {
        begin_run(l);
        push_args(l);
        for table in [4, 5] {
            for (key, value) in [(6, 3), (7, 4)] {
                ffi::lua_pushvalue(l, ffi::lua_upvalueindex(key));
                ffi::lua_pushvalue(l, value);
                ffi::lua_rawset(l, ffi::lua_upvalueindex(table));
            }
        }
        ffi::lua_settop(l, 2);
        finish_run(l, 0)
    }
}
