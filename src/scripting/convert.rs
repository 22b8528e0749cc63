/*
 * A script's result as RESP, read straight off the Lua stack, as Redis's
 * luaReplyToRedisReply (redis.io, "Lua API reference": "Data type
 * conversion"); a command's reply becomes a Lua value in `stack.rs`.
 *
 * Why from the stack rather than from mlua values: converting the run's
 * three results to `mlua::Value`s took a reference slot for each string
 * and table, and every table field a lookup through mlua (~0.85k
 * instructions of an FCALL with mlua's call, docs/PERFORMANCE.md
 * "Scripts"). Here the run's results stay on the stack until the reply
 * is written (`Results`), and tables are read with raw gets as Redis
 * reads them: no metamethod runs, so nothing here can change a table
 * while it is read.
 *
 * Nothing here raises a Lua error while a table has room on the stack:
 * the raw gets and `lua_next` allocate nothing; `lua_checkstack` may grow
 * the stack (an allocation failure there ends the process, as Rust's own
 * allocation failures and Redis's do).
 */

use std::ffi::{c_int, CStr};

use mlua::ffi::{self, lua_State};

use crate::commands::CmdError;
use crate::protocol::ReplyBuf;

/// Deepest reply table converted (Redis refuses deeper ones too).
const MAX_DEPTH: usize = 1000;

/// The three results a run closure (`stack::run_script`,
/// `stack::run_function`) left on the stack: ok, the result, the
/// protocol. Dropping it pops them (and anything above `top`).
pub(super) struct Results {
    pub l: *mut lua_State,
    /// The stack's top before the run's closure was pushed.
    pub top: c_int,
}

impl Drop for Results {
    fn drop(&mut self) {
        // SAFETY: `l` is the state the run used, `top` a level at or below
        // its top (the run pushed above it); lowering the top never raises.
        unsafe { ffi::lua_settop(self.l, self.top) }
    }
}

impl Results {
    /// Writes the script's reply (an error as the command's error), as
    /// Redis's scriptCall and luaCallFunction do with the result.
    pub(super) fn reply(&self, out: &mut ReplyBuf, name: &str) -> Result<(), CmdError> {
        let (ok, value, resp) = (self.top + 1, self.top + 2, self.top + 3);
        // SAFETY: the run left three values above `top` (`Results`'s
        // contract), so these are valid absolute indices.
        unsafe {
            let l = self.l;
            let resp = if ffi::lua_tonumber(l, resp) == 3.0 {
                3
            } else {
                2
            };
            if ffi::lua_toboolean(l, ok) == 0 {
                return Err(failure(l, value, name));
            }
            if ffi::lua_type(l, value) == ffi::LUA_TTABLE {
                if let Some(e) = string_field(l, value, c"err") {
                    return Err(reply_error(l, value, error_line(&e)));
                }
            }
            to_reply(l, value, out, 0, resp);
        }
        Ok(())
    }
}

/// Writes the value at `idx` (absolute) as a reply: string -> bulk,
/// number -> integer (truncated), true -> 1 and false -> null while the
/// script speaks RESP2 (`resp`, redis.setresp) or booleans in RESP3, nil
/// -> null, a table with `err` -> error, `ok` -> status, `double`,
/// `big_number`, `verbatim_string`, `map`, `set` -> those, any other
/// table -> array of its items up to the first nil.
///
/// # Safety
/// `l` is valid, `idx` an absolute index of a value on its stack.
unsafe fn to_reply(l: *mut lua_State, idx: c_int, out: &mut ReplyBuf, depth: usize, resp: u8) {
    // SAFETY: the contract; strings are read while on the stack.
    unsafe {
        match ffi::lua_type(l, idx) {
            ffi::LUA_TSTRING => out.bulk(bytes(l, idx)),
            ffi::LUA_TNUMBER => out.int(c_long_long(ffi::lua_tonumber(l, idx))),
            ffi::LUA_TBOOLEAN => match ffi::lua_toboolean(l, idx) != 0 {
                b if resp == 3 => out.boolean(b),
                true => out.int(1),
                false => out.null(),
            },
            ffi::LUA_TTABLE if depth < MAX_DEPTH => table_to_reply(l, idx, out, depth, resp),
            ffi::LUA_TTABLE => out.error("ERR reached lua stack limit"),
            _ => out.null(),
        }
    }
}

/// C's `(long long)` of a double as x86 computes it: NaN and values out
/// of range give i64::MIN (Rust's `as` would saturate).
fn c_long_long(n: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if (-LIMIT..LIMIT).contains(&n) {
        n as i64
    } else {
        i64::MIN
    }
}

/// A table's reply (see `to_reply`).
///
/// # Safety
/// As `to_reply`, the value at `t` being a table.
unsafe fn table_to_reply(l: *mut lua_State, t: c_int, out: &mut ReplyBuf, depth: usize, resp: u8) {
    // SAFETY: the contract; each branch pops what it pushed (the top is
    // put back to `base`), so the nested calls' indices stay valid.
    unsafe {
        // Each level holds at most three values (a field, a key, a value).
        if ffi::lua_checkstack(l, 4) == 0 {
            return out.error("ERR reached lua stack limit");
        }
        let base = ffi::lua_gettop(l);
        if let Some(e) = string_field(l, t, c"err") {
            return out.error(&error_line(&e));
        }
        if let Some(s) = string_field(l, t, c"ok") {
            return out.simple(&s.replace(['\r', '\n'], " "));
        }
        if field(l, t, c"double") == ffi::LUA_TNUMBER {
            out.double(ffi::lua_tonumber(l, -1));
            return ffi::lua_settop(l, base);
        }
        ffi::lua_settop(l, base);
        if let Some(s) = string_field(l, t, c"big_number") {
            return out.bignum(&s.replace(['\r', '\n'], " "));
        }
        if field(l, t, c"verbatim_string") == ffi::LUA_TTABLE {
            let v = base + 1;
            let f = field(l, v, c"format") == ffi::LUA_TSTRING;
            let s = field(l, v, c"string") == ffi::LUA_TSTRING;
            if f && s {
                verbatim(out, bytes(l, base + 2), bytes(l, base + 3));
                return ffi::lua_settop(l, base);
            }
        }
        ffi::lua_settop(l, base);
        for kind in [c"map", c"set"] {
            if field(l, t, kind) == ffi::LUA_TTABLE {
                return collection(l, base + 1, kind == c"map", out, depth, resp);
            }
            ffi::lua_settop(l, base);
        }
        let mut n = 0;
        while ffi::lua_rawgeti(l, t, n + 1) != ffi::LUA_TNIL {
            ffi::lua_settop(l, base);
            n += 1;
        }
        ffi::lua_settop(l, base);
        out.array(n as usize);
        for i in 1..=n {
            ffi::lua_rawgeti(l, t, i);
            to_reply(l, base + 1, out, depth + 1, resp);
            ffi::lua_settop(l, base);
        }
    }
}

/// The reply of a `map` (its pairs) or `set` (its keys) table at `m`,
/// the top of the stack, which it pops.
///
/// # Safety
/// As `to_reply`, the table at `m` being the stack's top.
unsafe fn collection(
    l: *mut lua_State,
    m: c_int,
    map: bool,
    out: &mut ReplyBuf,
    depth: usize,
    resp: u8,
) {
    // SAFETY: the contract; `pairs` gets a key and a value's slots
    // (`table_to_reply` checked for four).
    unsafe {
        let n = pairs(l, m, |_, _| {});
        if map {
            out.map(n);
        } else {
            out.set(n);
        }
        pairs(l, m, |key, value| {
            to_reply(l, key, out, depth + 1, resp);
            if map {
                to_reply(l, value, out, depth + 1, resp);
            }
        });
        ffi::lua_settop(l, m - 1);
    }
}

/// A verbatim string's reply: `=len\r\nfmt:text` in RESP3 (the format
/// padded or cut to three bytes), the text as a bulk string in RESP2.
fn verbatim(out: &mut ReplyBuf, f: &[u8], s: &[u8]) {
    if out.resp >= 3 {
        let mut b = format!("={}\r\n", s.len() + 4).into_bytes();
        b.extend_from_slice(&f[..f.len().min(3)]);
        b.resize(b.len() + 3 - f.len().min(3), b' ');
        b.push(b':');
        b.extend_from_slice(s);
        b.extend_from_slice(b"\r\n");
        out.raw(&b);
    } else {
        out.bulk(s);
    }
}

/// Calls `each(key, value)` (absolute indices) for every pair of the
/// table at `m` in `lua_next`'s order; returns how many there were.
///
/// # Safety
/// `l` is valid with the table at `m` and two free slots beyond what
/// `each` uses; `each` leaves the stack as it found it and does not
/// change the key (no `lua_tolstring` on a number).
unsafe fn pairs(l: *mut lua_State, m: c_int, mut each: impl FnMut(c_int, c_int)) -> usize {
    // SAFETY: the contract: [key] -> [key, value] -> each -> [key].
    unsafe {
        let mut n = 0;
        ffi::lua_pushnil(l);
        while ffi::lua_next(l, m) != 0 {
            let top = ffi::lua_gettop(l);
            each(top - 1, top);
            ffi::lua_settop(l, top - 1);
            n += 1;
        }
        n
    }
}

/// Pushes `t[key]` (a raw get) and returns its type.
///
/// # Safety
/// `l` is valid with a table at `t` (absolute) and two free slots.
unsafe fn field(l: *mut lua_State, t: c_int, key: &CStr) -> c_int {
    // SAFETY: the contract; lua_rawget runs no metamethod.
    unsafe {
        ffi::lua_pushstring_(l, key.as_ptr());
        ffi::lua_rawget(l, t)
    }
}

/// `t[key]` if it is a string (as UTF-8, lossily); pushes nothing.
///
/// # Safety
/// As `field`.
unsafe fn string_field(l: *mut lua_State, t: c_int, key: &CStr) -> Option<String> {
    // SAFETY: the contract; the bytes are copied before the pop.
    unsafe {
        let s = (field(l, t, key) == ffi::LUA_TSTRING)
            .then(|| String::from_utf8_lossy(bytes(l, -1)).into_owned());
        ffi::lua_settop(l, -2);
        s
    }
}

/// The bytes of the string at `idx`, valid while it stays on the stack.
///
/// # Safety
/// `l` is valid with a string (not a number) at `idx`.
unsafe fn bytes<'a>(l: *mut lua_State, idx: c_int) -> &'a [u8] {
    // SAFETY: the contract; Lua's string is neither moved nor collected
    // while on the stack.
    unsafe {
        let mut len = 0;
        let p = ffi::lua_tolstring(l, idx, &mut len);
        std::slice::from_raw_parts(p as *const u8, len)
    }
}

/// An error table's reply: counted already when it came from a command
/// (`ignore_error_stats_update`).
///
/// # Safety
/// As `field`.
unsafe fn reply_error(l: *mut lua_State, t: c_int, line: String) -> CmdError {
    // SAFETY: the contract; one value pushed and popped.
    let counted = unsafe {
        field(l, t, c"ignore_error_stats_update");
        let b = ffi::lua_toboolean(l, -1) != 0;
        ffi::lua_settop(l, -2);
        b
    };
    if counted {
        CmdError::Counted(line)
    } else {
        CmdError::Msg(line)
    }
}

/// A failed script's error: Redis's "<err> script: <sha or function>, on
/// @user_script:<line>." when the error handler found the line.
///
/// # Safety
/// `l` is valid with the error handler's result at `v` (absolute) and
/// two free slots.
unsafe fn failure(l: *mut lua_State, v: c_int, sha: &str) -> CmdError {
    // SAFETY: the contract; each field read pops what it pushed.
    unsafe {
        if ffi::lua_type(l, v) != ffi::LUA_TTABLE {
            return CmdError::err("unknown error");
        }
        let Some(err) = string_field(l, v, c"err") else {
            return CmdError::err("unknown error");
        };
        let src = coerced_field(l, v, c"source").and_then(|s| String::from_utf8(s).ok());
        let line = coerced_field(l, v, c"line")
            .and_then(|s| std::str::from_utf8(&s).ok()?.trim().parse::<f64>().ok())
            .filter(|n| n.fract() == 0.0);
        let line = match (src, line) {
            (Some(src), Some(line)) => {
                error_line(&format!("{err} script: {sha}, on {src}:{}.", line as i64))
            }
            _ => error_line(&err),
        };
        reply_error(l, v, line)
    }
}

/// `t[key]` as Lua's `tostring` of a string or number (None otherwise).
///
/// # Safety
/// As `field`.
unsafe fn coerced_field(l: *mut lua_State, t: c_int, key: &CStr) -> Option<Vec<u8>> {
    // SAFETY: the contract; lua_tolstring converts the pushed copy (a
    // number becomes a string in place), which is popped after the copy.
    unsafe {
        let ty = field(l, t, key);
        let s = (ty == ffi::LUA_TSTRING || ty == ffi::LUA_TNUMBER).then(|| bytes(l, -1).to_vec());
        ffi::lua_settop(l, -2);
        s
    }
}

/// An error's text as a reply line: no leading '-', no line breaks.
pub(super) fn error_line(msg: &str) -> String {
    msg.strip_prefix('-')
        .unwrap_or(msg)
        .replace(['\r', '\n'], " ")
}
