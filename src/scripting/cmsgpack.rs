//! The `cmsgpack` library Redis loads (lua-cmsgpack 0.4,
//! deps/lua/src/lua_cmsgpack.c): `pack`, `unpack`, `unpack_one`,
//! `unpack_limit`, with its encodings (numbers that are whole int64 values
//! as integers, others as float when exact, else double; tables whose keys
//! are exactly 1..n as arrays; nesting past 16 as nil). Functions return
//! `(true, values...)` or `(false, message)`; the prelude raises.

use mlua::{Lua, MultiValue, Result, Table, Value};

/// Tables nested deeper than this are packed as nil (circular references).
const MAX_NESTING: usize = 16;

pub(super) fn library(lua: &Lua) -> Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        lua.create_function(|lua, args: mlua::Variadic<Value>| {
            if args.is_empty() {
                return fail(
                    lua,
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                );
            }
            let mut out = Vec::new();
            for a in args.iter() {
                encode(a, 0, &mut out)?;
            }
            ok(lua, vec![Value::String(lua.create_string(&out)?)])
        })?,
    )?;
    t.set(
        "unpack",
        lua.create_function(|lua, s: mlua::String| unpack(lua, &s.as_bytes(), 0, 0, true))?,
    )?;
    t.set(
        "unpack_one",
        lua.create_function(|lua, (s, off): (mlua::String, Option<i64>)| {
            unpack(lua, &s.as_bytes(), 1, off.unwrap_or(0), false)
        })?,
    )?;
    t.set(
        "unpack_limit",
        lua.create_function(|lua, (s, limit, off): (mlua::String, i64, Option<i64>)| {
            unpack(
                lua,
                &s.as_bytes(),
                limit,
                off.unwrap_or(0),
                limit == 0 && off.unwrap_or(0) == 0,
            )
        })?,
    )?;
    Ok(t)
}

fn ok(lua: &Lua, vals: Vec<Value>) -> Result<MultiValue> {
    let _ = lua;
    let mut v = vec![Value::Boolean(true)];
    v.extend(vals);
    Ok(MultiValue::from_vec(v))
}

fn fail(lua: &Lua, m: &str) -> Result<MultiValue> {
    Ok(MultiValue::from_vec(vec![
        Value::Boolean(false),
        Value::String(lua.create_string(m)?),
    ]))
}

fn encode(v: &Value, level: usize, out: &mut Vec<u8>) -> Result<()> {
    match v {
        Value::String(s) => bytes(&s.as_bytes(), out),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => int(*n, out),
        Value::Number(n) => {
            let n = *n;
            if n.is_finite() && (n as i64) as f64 == n {
                int(n as i64, out)
            } else {
                let f = n as f32;
                if f as f64 == n || (n.is_nan() && f.is_nan()) {
                    out.push(0xca);
                    out.extend_from_slice(&f.to_be_bytes());
                } else {
                    out.push(0xcb);
                    out.extend_from_slice(&n.to_be_bytes());
                }
            }
        }
        Value::Table(t) if level < MAX_NESTING => {
            let (mut count, mut max) = (0usize, 0usize);
            let mut array = true;
            for pair in t.clone().pairs::<Value, Value>() {
                let (k, _) = pair?;
                let n = match k {
                    Value::Integer(i) => i as f64,
                    Value::Number(f) => f,
                    _ => {
                        array = false;
                        f64::NAN
                    }
                };
                if !array || n <= 0.0 || n.fract() != 0.0 || n > i32::MAX as f64 {
                    array = false;
                    break;
                }
                max = max.max(n as usize);
                count += 1;
            }
            if array && max == count {
                let len = t.raw_len();
                header(len, [0x90, 0xdc, 0xdd], 15, out);
                for i in 1..=len {
                    encode(&t.raw_get::<Value>(i)?, level + 1, out)?;
                }
            } else {
                // Counted, then streamed: holding every pair would use a
                // Lua reference each (a big table runs out of them).
                let n = t.clone().pairs::<Value, Value>().count();
                header(n, [0x80, 0xde, 0xdf], 15, out);
                for pair in t.clone().pairs::<Value, Value>() {
                    let (k, x) = pair?;
                    encode(&k, level + 1, out)?;
                    encode(&x, level + 1, out)?;
                }
            }
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

/// An array or map header: fix form up to `fix_max`, then 16, then 32 bits.
fn header(n: usize, tags: [u8; 3], fix_max: usize, out: &mut Vec<u8>) {
    if n <= fix_max {
        out.push(tags[0] | n as u8);
    } else if n <= 0xffff {
        out.push(tags[1]);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(tags[2]);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn bytes(s: &[u8], out: &mut Vec<u8>) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff {
        out.push(0xd9);
        out.push(n as u8);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

fn int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Why a decode stopped (Redis's MP_CUR_ERROR_*).
enum Stop {
    Eof,
    Deep,
    BadFormat,
    Lua(mlua::Error),
}

impl From<mlua::Error> for Stop {
    fn from(e: mlua::Error) -> Stop {
        Stop::Lua(e)
    }
}

/// mp_unpack_full: up to `limit` objects from `offset` (all with `all`),
/// and, unless `all`, the next offset first (-1 at the end).
fn unpack(lua: &Lua, s: &[u8], limit: i64, offset: i64, all: bool) -> Result<MultiValue> {
    if offset < 0 || limit < 0 {
        return fail(
            lua,
            &format!(
                "Invalid request to unpack with offset of {offset} and limit of {}.",
                s.len()
            ),
        );
    }
    if offset as usize > s.len() {
        return fail(
            lua,
            &format!(
                "Start offset {offset} greater than input length {}.",
                s.len()
            ),
        );
    }
    let limit = if all { i64::MAX } else { limit };
    let mut pos = offset as usize;
    let mut vals = Vec::new();
    while pos < s.len() && (vals.len() as i64) < limit {
        match decode(lua, s, &mut pos) {
            Ok(v) => vals.push(v),
            Err(Stop::Eof) => return fail(lua, "Missing bytes in input."),
            Err(Stop::BadFormat) => return fail(lua, "Bad data format in input."),
            Err(Stop::Deep) => {
                return fail(lua, "stack overflow (in function mp_decode_to_lua_type)")
            }
            Err(Stop::Lua(e)) => return Err(e),
        }
    }
    if !all {
        let next = if pos >= s.len() { -1 } else { pos as i64 };
        vals.insert(0, Value::Integer(next));
    }
    ok(lua, vals)
}

fn take<'a>(s: &'a [u8], pos: &mut usize, n: usize) -> std::result::Result<&'a [u8], Stop> {
    let b = s.get(*pos..*pos + n).ok_or(Stop::Eof)?;
    *pos += n;
    Ok(b)
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0, |a, &x| a << 8 | x as u64)
}

fn decode(lua: &Lua, s: &[u8], pos: &mut usize) -> std::result::Result<Value, Stop> {
    decode_at(lua, s, pos, 0)
}

/// Deepest nesting decoded (Redis's Lua stack check stops it about there;
/// unchecked, a crafted payload would overflow this thread's stack).
const MAX_DEPTH: usize = 256;

fn decode_at(
    lua: &Lua,
    s: &[u8],
    pos: &mut usize,
    depth: usize,
) -> std::result::Result<Value, Stop> {
    if depth > MAX_DEPTH {
        return Err(Stop::Deep);
    }
    let tag = take(s, pos, 1)?[0];
    let num = |n: f64| Value::Number(n);
    Ok(match tag {
        0x00..=0x7f => num(tag as f64),
        0xe0..=0xff => num(tag as i8 as f64),
        0xcc => num(take(s, pos, 1)?[0] as f64),
        0xcd => num(be(take(s, pos, 2)?) as f64),
        0xce => num(be(take(s, pos, 4)?) as f64),
        0xcf => num(be(take(s, pos, 8)?) as f64),
        0xd0 => num(take(s, pos, 1)?[0] as i8 as f64),
        0xd1 => num(be(take(s, pos, 2)?) as u16 as i16 as f64),
        0xd2 => num(be(take(s, pos, 4)?) as u32 as i32 as f64),
        0xd3 => num(be(take(s, pos, 8)?) as i64 as f64),
        0xc0 => Value::Nil,
        0xc2 => Value::Boolean(false),
        0xc3 => Value::Boolean(true),
        0xca => num(f32::from_bits(be(take(s, pos, 4)?) as u32) as f64),
        0xcb => num(f64::from_bits(be(take(s, pos, 8)?))),
        0xa0..=0xbf => str_of(lua, take(s, pos, (tag & 0x1f) as usize)?)?,
        0xd9 | 0xc4 => {
            let n = take(s, pos, 1)?[0] as usize;
            str_of(lua, take(s, pos, n)?)?
        }
        0xda | 0xc5 => {
            let n = be(take(s, pos, 2)?) as usize;
            str_of(lua, take(s, pos, n)?)?
        }
        0xdb | 0xc6 => {
            let n = be(take(s, pos, 4)?) as usize;
            str_of(lua, take(s, pos, n)?)?
        }
        0x90..=0x9f => array(lua, s, pos, (tag & 0xf) as usize, depth)?,
        0xdc => {
            let n = be(take(s, pos, 2)?) as usize;
            array(lua, s, pos, n, depth)?
        }
        0xdd => {
            let n = be(take(s, pos, 4)?) as usize;
            array(lua, s, pos, n, depth)?
        }
        0x80..=0x8f => map(lua, s, pos, (tag & 0xf) as usize, depth)?,
        0xde => {
            let n = be(take(s, pos, 2)?) as usize;
            map(lua, s, pos, n, depth)?
        }
        0xdf => {
            let n = be(take(s, pos, 4)?) as usize;
            map(lua, s, pos, n, depth)?
        }
        _ => return Err(Stop::BadFormat),
    })
}

fn str_of(lua: &Lua, b: &[u8]) -> std::result::Result<Value, Stop> {
    Ok(Value::String(lua.create_string(b)?))
}

fn array(
    lua: &Lua,
    s: &[u8],
    pos: &mut usize,
    n: usize,
    depth: usize,
) -> std::result::Result<Value, Stop> {
    let t = lua.create_table()?;
    for i in 1..=n {
        let v = decode_at(lua, s, pos, depth + 1)?;
        t.raw_set(i, v)?;
    }
    Ok(Value::Table(t))
}

fn map(
    lua: &Lua,
    s: &[u8],
    pos: &mut usize,
    n: usize,
    depth: usize,
) -> std::result::Result<Value, Stop> {
    let t = lua.create_table()?;
    for _ in 0..n {
        let k = decode_at(lua, s, pos, depth + 1)?;
        let v = decode_at(lua, s, pos, depth + 1)?;
        t.set(k, v)?;
    }
    Ok(Value::Table(t))
}
