//! The `cjson` library Redis loads (lua-cjson 2.1, deps/lua/src/lua_cjson.c):
//! `encode`, `decode`, `null` and the configuration functions, with its
//! rules and messages. The functions here return `(true, value)` or
//! `(false, message)`; the prelude raises the message as the C library's
//! luaL_error would (no position of its own).

use std::cell::RefCell;
use std::rc::Rc;

use mlua::{LightUserData, Lua, Result, Table, Value};

/// lua-cjson's configuration (its defaults).
struct Config {
    sparse_convert: bool,
    sparse_ratio: i64,
    sparse_safe: i64,
    encode_max_depth: i64,
    decode_max_depth: i64,
    /// 0 off, 1 on, 2 "null".
    encode_invalid_numbers: u8,
    decode_invalid_numbers: bool,
    precision: usize,
    keep_buffer: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: true,
            precision: 14,
            keep_buffer: true,
        }
    }
}

type Cfg = Rc<RefCell<Config>>;

fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

/// The raw functions (see the module comment), for the prelude to wrap.
pub(super) fn library(lua: &Lua) -> Result<Table> {
    let cfg: Cfg = Rc::new(RefCell::new(Config::default()));
    let t = lua.create_table()?;
    let c = cfg.clone();
    t.set(
        "encode",
        lua.create_function(move |lua, v: mlua::Variadic<Value>| {
            if v.len() != 1 {
                return fail(lua, "bad argument #1 to 'encode' (expected 1 argument)");
            }
            let mut out = Vec::new();
            match encode(&c.borrow(), &v[0], 0, &mut out) {
                Ok(()) => Ok((true, Value::String(lua.create_string(&out)?))),
                Err(m) => fail(lua, &m),
            }
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "decode",
        lua.create_function(move |lua, v: mlua::Variadic<Value>| {
            let s = match v.first() {
                Some(Value::String(s)) if v.len() == 1 => s.as_bytes().to_vec(),
                Some(Value::Integer(_) | Value::Number(_)) if v.len() == 1 => lua
                    .coerce_string(v[0].clone())?
                    .map(|s| s.as_bytes().to_vec())
                    .unwrap_or_default(),
                _ => return fail(lua, "bad argument #1 to 'decode' (expected 1 argument)"),
            };
            let mut p = Parser {
                s: &s,
                pos: 0,
                depth: 0,
                cfg: &c.borrow(),
            };
            match p.document(lua) {
                Ok(v) => Ok((true, v)),
                Err(m) => fail(lua, &m),
            }
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "encode_max_depth",
        lua.create_function(move |lua, v: Option<i64>| {
            int_option(lua, v, &mut c.borrow_mut().encode_max_depth, 1)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "decode_max_depth",
        lua.create_function(move |lua, v: Option<i64>| {
            int_option(lua, v, &mut c.borrow_mut().decode_max_depth, 1)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "encode_number_precision",
        lua.create_function(move |lua, v: Option<i64>| {
            let mut p = c.borrow().precision as i64;
            let r = int_option(lua, v.filter(|&x| x <= 14), &mut p, 1);
            c.borrow_mut().precision = p as usize;
            r
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "encode_keep_buffer",
        lua.create_function(move |_, v: Option<Value>| {
            let mut c = c.borrow_mut();
            if let Some(b) = v.as_ref().and_then(truthy) {
                c.keep_buffer = b;
            }
            Ok((true, Value::Boolean(c.keep_buffer)))
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "encode_invalid_numbers",
        lua.create_function(move |lua, v: Option<Value>| {
            let mut c = c.borrow_mut();
            match &v {
                Some(Value::String(s)) if &*s.as_bytes() == b"null" => c.encode_invalid_numbers = 2,
                Some(x) => {
                    if let Some(b) = truthy(x) {
                        c.encode_invalid_numbers = b as u8;
                    }
                }
                None => {}
            }
            let r = match c.encode_invalid_numbers {
                2 => Value::String(lua.create_string("null")?),
                n => Value::Boolean(n == 1),
            };
            Ok((true, r))
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "decode_invalid_numbers",
        lua.create_function(move |_, v: Option<Value>| {
            let mut c = c.borrow_mut();
            if let Some(b) = v.as_ref().and_then(truthy) {
                c.decode_invalid_numbers = b;
            }
            Ok((true, Value::Boolean(c.decode_invalid_numbers)))
        })?,
    )?;
    let c = cfg;
    t.set(
        "encode_sparse_array",
        lua.create_function(
            move |_, (a, b, d): (Option<Value>, Option<i64>, Option<i64>)| {
                let mut c = c.borrow_mut();
                if let Some(x) = a.as_ref().and_then(truthy) {
                    c.sparse_convert = x;
                }
                if let Some(b) = b.filter(|&b| b >= 0) {
                    c.sparse_ratio = b;
                }
                if let Some(d) = d.filter(|&d| d >= 0) {
                    c.sparse_safe = d;
                }
                Ok((true, Value::Boolean(c.sparse_convert)))
            },
        )?,
    )?;
    t.set("null", null())?;
    Ok(t)
}

fn fail(lua: &Lua, m: &str) -> Result<(bool, Value)> {
    Ok((false, Value::String(lua.create_string(m)?)))
}

/// A boolean option: true/false, "on"/"off".
fn truthy(v: &Value) -> Option<bool> {
    match v {
        Value::Boolean(b) => Some(*b),
        Value::String(s) => match &*s.as_bytes() {
            b"on" => Some(true),
            b"off" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn int_option(_: &Lua, v: Option<i64>, setting: &mut i64, min: i64) -> Result<(bool, Value)> {
    if let Some(v) = v.filter(|&v| v >= min) {
        *setting = v;
    }
    Ok((true, Value::Integer(*setting)))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::LightUserData(_) => "userdata",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    }
}

fn encode(
    cfg: &Config,
    v: &Value,
    depth: i64,
    out: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    match v {
        Value::String(s) => encode_string(&s.as_bytes(), out),
        Value::Integer(n) => number(cfg, *n as f64, "number", out)?,
        Value::Number(n) => number(cfg, *n, "number", out)?,
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(u) if u.0.is_null() => out.extend_from_slice(b"null"),
        Value::Table(t) => {
            let depth = depth + 1;
            if depth > cfg.encode_max_depth {
                return Err(format!("Cannot serialise, excessive nesting ({depth})"));
            }
            match array_length(cfg, t)? {
                Some(n) if n > 0 => {
                    out.push(b'[');
                    for i in 1..=n {
                        if i > 1 {
                            out.push(b',');
                        }
                        let x: Value = t.raw_get(i).map_err(|e| e.to_string())?;
                        encode(cfg, &x, depth, out)?;
                    }
                    out.push(b']');
                }
                _ => {
                    out.push(b'{');
                    let mut first = true;
                    for pair in t.clone().pairs::<Value, Value>() {
                        let (k, x) = pair.map_err(|e| e.to_string())?;
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        match &k {
                            Value::Integer(n) => {
                                out.push(b'"');
                                number(cfg, *n as f64, "number", out)?;
                                out.extend_from_slice(b"\":");
                            }
                            Value::Number(n) => {
                                out.push(b'"');
                                number(cfg, *n, "number", out)?;
                                out.extend_from_slice(b"\":");
                            }
                            Value::String(s) => {
                                encode_string(&s.as_bytes(), out);
                                out.push(b':');
                            }
                            other => {
                                return Err(format!(
                                    "Cannot serialise {}: table key must be a number or string",
                                    type_name(other)
                                ))
                            }
                        }
                        encode(cfg, &x, depth, out)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                type_name(other)
            ))
        }
    }
    Ok(())
}

/// The length of `t` as an array, None when it is not one (lua_array_length).
fn array_length(cfg: &Config, t: &Table) -> std::result::Result<Option<i64>, String> {
    let (mut max, mut items) = (0i64, 0i64);
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, _) = pair.map_err(|e| e.to_string())?;
        let k = match k {
            Value::Integer(n) => n as f64,
            Value::Number(n) => n,
            _ => return Ok(None),
        };
        if k.floor() != k || k < 1.0 {
            return Ok(None);
        }
        max = max.max(k as i64);
        items += 1;
    }
    if cfg.sparse_ratio > 0 && max > items * cfg.sparse_ratio && max > cfg.sparse_safe {
        if !cfg.sparse_convert {
            return Err("Cannot serialise table: excessively sparse array".into());
        }
        return Ok(None);
    }
    Ok(Some(max))
}

fn number(cfg: &Config, n: f64, what: &str, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    if !n.is_finite() {
        match cfg.encode_invalid_numbers {
            0 => return Err(format!("Cannot serialise {what}: must not be NaN or Inf")),
            2 => {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            _ if n.is_nan() => {
                out.extend_from_slice(b"nan");
                return Ok(());
            }
            _ => {}
        }
    }
    out.extend_from_slice(crate::protocol::format_g(n, cfg.precision).as_bytes());
    Ok(())
}

fn encode_string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            8 => out.extend_from_slice(b"\\b"),
            9 => out.extend_from_slice(b"\\t"),
            10 => out.extend_from_slice(b"\\n"),
            12 => out.extend_from_slice(b"\\f"),
            13 => out.extend_from_slice(b"\\r"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    depth: i64,
    cfg: &'a Config,
}

/// A token as lua-cjson names it in its errors.
enum Tok {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str(Vec<u8>),
    Num(f64),
    Bool(bool),
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

impl Tok {
    fn name(&self) -> &'static str {
        match self {
            Tok::ObjBegin => "T_OBJ_BEGIN",
            Tok::ObjEnd => "T_OBJ_END",
            Tok::ArrBegin => "T_ARR_BEGIN",
            Tok::ArrEnd => "T_ARR_END",
            Tok::Str(_) => "T_STRING",
            Tok::Num(_) => "T_NUMBER",
            Tok::Bool(_) => "T_BOOLEAN",
            Tok::Null => "T_NULL",
            Tok::Colon => "T_COLON",
            Tok::Comma => "T_COMMA",
            Tok::End => "T_END",
            Tok::Error(m) => m,
        }
    }
}

impl Parser<'_> {
    fn document(&mut self, lua: &Lua) -> std::result::Result<Value, String> {
        if self.s.len() >= 2 && (self.s[0] == 0 || self.s[1] == 0) {
            return Err("JSON parser does not support UTF-16 or UTF-32".into());
        }
        let (start, t) = self.next();
        let v = self.value(lua, start, t)?;
        let (at, t) = self.next();
        if !matches!(t, Tok::End) {
            return Err(self.expected("the end", at, &t));
        }
        Ok(v)
    }

    fn expected(&self, what: &str, at: usize, t: &Tok) -> String {
        format!(
            "Expected {what} but found {} at character {}",
            t.name(),
            at + 1
        )
    }

    fn value(&mut self, lua: &Lua, at: usize, t: Tok) -> std::result::Result<Value, String> {
        let l = |e: mlua::Error| e.to_string();
        Ok(match t {
            Tok::Str(s) => Value::String(lua.create_string(&s).map_err(l)?),
            Tok::Num(n) => Value::Number(n),
            Tok::Bool(b) => Value::Boolean(b),
            Tok::Null => null(),
            Tok::ObjBegin => {
                self.nest(at)?;
                let t = lua.create_table().map_err(l)?;
                let (at, mut tok) = self.next();
                if !matches!(tok, Tok::ObjEnd) {
                    let mut at = at;
                    loop {
                        let Tok::Str(k) = tok else {
                            return Err(self.expected("object key string", at, &tok));
                        };
                        let (cat, c) = self.next();
                        if !matches!(c, Tok::Colon) {
                            return Err(self.expected("colon", cat, &c));
                        }
                        let (vat, vt) = self.next();
                        let v = self.value(lua, vat, vt)?;
                        t.raw_set(lua.create_string(&k).map_err(l)?, v).map_err(l)?;
                        let (sat, sep) = self.next();
                        match sep {
                            Tok::ObjEnd => break,
                            Tok::Comma => {}
                            other => return Err(self.expected("comma or object end", sat, &other)),
                        }
                        (at, tok) = self.next();
                    }
                }
                self.depth -= 1;
                Value::Table(t)
            }
            Tok::ArrBegin => {
                self.nest(at)?;
                let t = lua.create_table().map_err(l)?;
                let (mut at, mut tok) = self.next();
                if !matches!(tok, Tok::ArrEnd) {
                    let mut i = 1;
                    loop {
                        let v = self.value(lua, at, tok)?;
                        t.raw_set(i, v).map_err(l)?;
                        i += 1;
                        let (sat, sep) = self.next();
                        match sep {
                            Tok::ArrEnd => break,
                            Tok::Comma => {}
                            other => return Err(self.expected("comma or array end", sat, &other)),
                        }
                        (at, tok) = self.next();
                    }
                }
                self.depth -= 1;
                Value::Table(t)
            }
            other => return Err(self.expected("value", at, &other)),
        })
    }

    fn nest(&mut self, at: usize) -> std::result::Result<(), String> {
        self.depth += 1;
        if self.depth > self.cfg.decode_max_depth {
            return Err(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth,
                at + 1
            ));
        }
        Ok(())
    }

    /// The next token and where it starts.
    fn next(&mut self) -> (usize, Tok) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let at = self.pos;
        let Some(&c) = self.s.get(self.pos) else {
            return (at, Tok::End);
        };
        let one = |t: Tok, p: &mut usize| {
            *p += 1;
            t
        };
        let t = match c {
            b'{' => one(Tok::ObjBegin, &mut self.pos),
            b'}' => one(Tok::ObjEnd, &mut self.pos),
            b'[' => one(Tok::ArrBegin, &mut self.pos),
            b']' => one(Tok::ArrEnd, &mut self.pos),
            b':' => one(Tok::Colon, &mut self.pos),
            b',' => one(Tok::Comma, &mut self.pos),
            b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(),
            _ if self.s[self.pos..].starts_with(b"true") => {
                self.pos += 4;
                Tok::Bool(true)
            }
            _ if self.s[self.pos..].starts_with(b"false") => {
                self.pos += 5;
                Tok::Bool(false)
            }
            _ if self.s[self.pos..].starts_with(b"null") => {
                self.pos += 4;
                Tok::Null
            }
            b'+' | b'i' | b'I' | b'n' | b'N' if self.cfg.decode_invalid_numbers => self.number(),
            _ => Tok::Error("invalid token"),
        };
        (at, t)
    }

    fn number(&mut self) -> Tok {
        let rest = &self.s[self.pos..];
        let mut end = 0;
        while end < rest.len()
            && matches!(rest[end], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'x' | b'X' | b'a'..=b'd' | b'f' | b'A'..=b'D' | b'F' | b'i' | b'n' | b'I' | b'N' | b't' | b'y' | b'T' | b'Y')
        {
            end += 1;
        }
        // The longest prefix that parses, as strtod stops where it can.
        while end > 0 {
            let text = std::str::from_utf8(&rest[..end]).unwrap_or("");
            if let Ok(n) = text.parse::<f64>() {
                let t = text.trim_start_matches(['-', '+']);
                let invalid = text.starts_with('+')
                    || t.len() > 1 && t.starts_with('0') && t.as_bytes()[1].is_ascii_digit()
                    || !t.as_bytes()[0].is_ascii_digit();
                if invalid && !self.cfg.decode_invalid_numbers {
                    return Tok::Error("invalid number");
                }
                self.pos += end;
                return Tok::Num(n);
            }
            end -= 1;
        }
        Tok::Error("invalid number")
    }

    fn string(&mut self) -> Tok {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.pos) else {
                return Tok::Error("unexpected end of string");
            };
            self.pos += 1;
            match c {
                b'"' => return Tok::Str(out),
                b'\\' => {
                    let Some(&e) = self.s.get(self.pos) else {
                        return Tok::Error("invalid escape code");
                    };
                    self.pos += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let Some(cp) = self.unicode() else {
                                return Tok::Error("invalid unicode escape code");
                            };
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(cp.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Tok::Error("invalid escape code"),
                    }
                }
                _ => out.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.s.get(self.pos..self.pos + 4)?;
        let v = u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?;
        self.pos += 4;
        Some(v)
    }

    fn unicode(&mut self) -> Option<char> {
        let hi = self.hex4()?;
        if (0xD800..0xDC00).contains(&hi) {
            if self.s.get(self.pos..self.pos + 2)? != b"\\u" {
                return None;
            }
            self.pos += 2;
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return None;
            }
            return char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
        }
        char::from_u32(hi)
    }
}
