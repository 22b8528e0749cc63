//! The conversions between RESP and Lua, as Redis documents them
//! (redis.io, "Lua API reference": "Data type conversion").

use mlua::{Lua, Result, Table, Value};

use crate::protocol::ReplyBuf;

/// Deepest reply table converted (Redis refuses deeper ones too).
const MAX_DEPTH: usize = 1000;

/// A command's RESP reply (as written into a `ReplyBuf`) as a Lua value:
/// integer -> number, bulk -> string, null -> false (RESP2) or nil
/// (RESP3 null), array -> table, status -> {ok=..}, error -> {err=..};
/// RESP3: map -> {map=..}, set -> {set=..}, double -> {double=..},
/// boolean -> boolean, big number -> {big_number=..}, verbatim ->
/// {verbatim_string={format=..,string=..}}.
pub fn reply_to_lua(lua: &Lua, buf: &[u8]) -> Result<Value> {
    let mut pos = 0;
    parse(lua, buf, &mut pos)
}

fn line<'a>(buf: &'a [u8], pos: &mut usize) -> &'a [u8] {
    let start = *pos;
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

fn kv_table(lua: &Lua, key: &str, v: Value) -> Result<Value> {
    let t = lua.create_table()?;
    t.set(key, v)?;
    Ok(Value::Table(t))
}

fn parse(lua: &Lua, buf: &[u8], pos: &mut usize) -> Result<Value> {
    let Some(&tag) = buf.get(*pos) else {
        return Ok(Value::Nil);
    };
    *pos += 1;
    let head = line(buf, pos);
    match tag {
        b':' => Ok(Value::Number(num(head) as f64)),
        b'$' | b'=' if head == b"-1" => Ok(Value::Boolean(false)),
        b'$' | b'=' => {
            let n = num(head) as usize;
            let body = &buf[*pos..(*pos + n).min(buf.len())];
            *pos = (*pos + n + 2).min(buf.len());
            if tag == b'$' {
                return Ok(Value::String(lua.create_string(body)?));
            }
            let t = lua.create_table()?;
            t.set("format", lua.create_string(body.get(..3).unwrap_or(b""))?)?;
            t.set("string", lua.create_string(body.get(4..).unwrap_or(b""))?)?;
            kv_table(lua, "verbatim_string", Value::Table(t))
        }
        b'+' => kv_table(lua, "ok", Value::String(lua.create_string(head)?)),
        b'-' => {
            // Counted when the command failed; the script's reply does
            // not count it again (Redis's ignore_error_stats_update).
            super::call::error_table(lua, &String::from_utf8_lossy(head), true)
        }
        b'*' if head == b"-1" => Ok(Value::Boolean(false)),
        b'*' | b'>' => Ok(Value::Table(seq(lua, buf, pos, num(head))?)),
        b'%' => {
            let t = lua.create_table()?;
            for _ in 0..num(head) {
                let k = parse(lua, buf, pos)?;
                let v = parse(lua, buf, pos)?;
                t.set(k, v)?;
            }
            kv_table(lua, "map", Value::Table(t))
        }
        b'~' => {
            let t = lua.create_table()?;
            for _ in 0..num(head) {
                t.set(parse(lua, buf, pos)?, true)?;
            }
            kv_table(lua, "set", Value::Table(t))
        }
        b'_' => Ok(Value::Nil),
        b'#' => Ok(Value::Boolean(head == b"t")),
        b',' => {
            let d = std::str::from_utf8(head).ok().and_then(|s| s.parse().ok());
            kv_table(lua, "double", Value::Number(d.unwrap_or(0.0)))
        }
        b'(' => kv_table(lua, "big_number", Value::String(lua.create_string(head)?)),
        b'|' => {
            // An attribute: not shown to scripts; the reply follows it.
            for _ in 0..num(head) * 2 {
                parse(lua, buf, pos)?;
            }
            parse(lua, buf, pos)
        }
        _ => Ok(Value::Nil),
    }
}

fn seq(lua: &Lua, buf: &[u8], pos: &mut usize, n: i64) -> Result<Table> {
    let t = lua.create_table()?;
    for i in 1..=n {
        t.raw_set(i, parse(lua, buf, pos)?)?;
    }
    Ok(t)
}

/// Writes a script's return value as its reply (Redis's
/// luaReplyToRedisReply): string -> bulk, number -> integer (truncated),
/// true -> 1 and false -> null while the script speaks RESP2 (`resp`,
/// redis.setresp) or booleans in RESP3, nil -> null, a table with `err`
/// -> error, `ok` -> status, `double`, `big_number`, `verbatim_string`,
/// `map`, `set` -> those, any other table -> array of its items up to the
/// first nil.
pub fn lua_to_reply(out: &mut ReplyBuf, v: &Value, depth: usize, resp: u8) {
    match v {
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Integer(n) => out.int(*n),
        Value::Number(n) => out.int(c_long_long(*n)),
        Value::Boolean(b) if resp == 3 => out.boolean(*b),
        Value::Boolean(true) => out.int(1),
        Value::Table(t) if depth < MAX_DEPTH => table_to_reply(out, t, depth, resp),
        Value::Table(_) => out.error("ERR reached lua stack limit"),
        _ => out.null(),
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

fn table_to_reply(out: &mut ReplyBuf, t: &Table, depth: usize, resp: u8) {
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        return out.error(&error_line(&e.to_string_lossy()));
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
        return out.simple(&s.to_string_lossy().replace(['\r', '\n'], " "));
    }
    if let Ok(Value::Number(d)) = t.raw_get::<Value>("double") {
        return out.double(d);
    }
    if let Ok(Value::Integer(d)) = t.raw_get::<Value>("double") {
        return out.double(d as f64);
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("big_number") {
        return out.bignum(&s.to_string_lossy().replace(['\r', '\n'], " "));
    }
    if let Ok(Value::Table(v)) = t.raw_get::<Value>("verbatim_string") {
        let f = v.raw_get::<Value>("format");
        let s = v.raw_get::<Value>("string");
        if let (Ok(Value::String(f)), Ok(Value::String(s))) = (f, s) {
            let (f, s) = (f.as_bytes(), s.as_bytes());
            if out.resp >= 3 {
                let mut b = format!("={}\r\n", s.len() + 4).into_bytes();
                b.extend_from_slice(&f[..f.len().min(3)]);
                b.resize(b.len() + 3 - f.len().min(3), b' ');
                b.push(b':');
                b.extend_from_slice(&s);
                b.extend_from_slice(b"\r\n");
                out.raw(&b);
            } else {
                out.bulk(&s);
            }
            return;
        }
    }
    if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
        let pairs: Vec<(Value, Value)> = m.pairs().filter_map(|p| p.ok()).collect();
        out.map(pairs.len());
        for (k, v) in &pairs {
            lua_to_reply(out, k, depth + 1, resp);
            lua_to_reply(out, v, depth + 1, resp);
        }
        return;
    }
    if let Ok(Value::Table(s)) = t.raw_get::<Value>("set") {
        let keys: Vec<Value> = s
            .pairs::<Value, Value>()
            .filter_map(|p| p.ok())
            .map(|p| p.0)
            .collect();
        out.set(keys.len());
        for k in &keys {
            lua_to_reply(out, k, depth + 1, resp);
        }
        return;
    }
    let mut items = Vec::new();
    while let Ok(v) = t.raw_get::<Value>(items.len() + 1) {
        if v.is_nil() {
            break;
        }
        items.push(v);
    }
    out.array(items.len());
    for v in &items {
        lua_to_reply(out, v, depth + 1, resp);
    }
}

/// An error's text as a reply line: no leading '-', no line breaks.
pub fn error_line(msg: &str) -> String {
    msg.strip_prefix('-')
        .unwrap_or(msg)
        .replace(['\r', '\n'], " ")
}
