//! The conversion of a script's result to RESP, as Redis documents it
//! (redis.io, "Lua API reference": "Data type conversion"); a command's
//! reply becomes a Lua value in `stack.rs`.

use mlua::{Table, Value};

use crate::protocol::ReplyBuf;

/// Deepest reply table converted (Redis refuses deeper ones too).
const MAX_DEPTH: usize = 1000;

/// Writes a script's return value as its reply (Redis's
/// luaReplyToRedisReply): string -> bulk, number -> integer (truncated),
/// true -> 1 and false -> null while the script speaks RESP2 (`resp`,
/// redis.setresp) or booleans in RESP3, nil -> null, a table with `err`
/// -> error, `ok` -> status, `double`, `big_number`, `verbatim_string`,
/// `map`, `set` -> those, any other table -> array of its items up to the
/// first nil.
pub(super) fn lua_to_reply(out: &mut ReplyBuf, v: &Value, depth: usize, resp: u8) {
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
pub(super) fn error_line(msg: &str) -> String {
    msg.strip_prefix('-')
        .unwrap_or(msg)
        .replace(['\r', '\n'], " ")
}
