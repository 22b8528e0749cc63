//! The `bit` library (LuaBitOp) Redis loads: 32-bit operations on numbers.

use mlua::{Lua, Result, Table, Variadic};

/// A number as LuaBitOp sees it: rounded, wrapped to 32 bits.
fn tobit(x: f64) -> i32 {
    let r = x.round_ties_even();
    (r.rem_euclid(4294967296.0) as u64 as u32) as i32
}

fn fold(args: Variadic<f64>, f: fn(i32, i32) -> i32) -> Result<i32> {
    let mut it = args.into_iter().map(tobit);
    let first = it.next().ok_or_else(|| {
        mlua::Error::RuntimeError("bad argument #1 (number expected, got no value)".into())
    })?;
    Ok(it.fold(first, f))
}

pub(super) fn library(lua: &Lua) -> Result<Table> {
    let t = lua.create_table()?;
    t.set("tobit", lua.create_function(|_, x: f64| Ok(tobit(x)))?)?;
    t.set("bnot", lua.create_function(|_, x: f64| Ok(!tobit(x)))?)?;
    t.set(
        "band",
        lua.create_function(|_, a: Variadic<f64>| fold(a, |x, y| x & y))?,
    )?;
    t.set(
        "bor",
        lua.create_function(|_, a: Variadic<f64>| fold(a, |x, y| x | y))?,
    )?;
    t.set(
        "bxor",
        lua.create_function(|_, a: Variadic<f64>| fold(a, |x, y| x ^ y))?,
    )?;
    t.set(
        "lshift",
        lua.create_function(|_, (x, n): (f64, f64)| {
            Ok(((tobit(x) as u32) << (tobit(n) & 31)) as i32)
        })?,
    )?;
    t.set(
        "rshift",
        lua.create_function(|_, (x, n): (f64, f64)| {
            Ok(((tobit(x) as u32) >> (tobit(n) & 31)) as i32)
        })?,
    )?;
    t.set(
        "arshift",
        lua.create_function(|_, (x, n): (f64, f64)| Ok(tobit(x) >> (tobit(n) & 31)))?,
    )?;
    t.set(
        "rol",
        lua.create_function(|_, (x, n): (f64, f64)| {
            Ok((tobit(x) as u32).rotate_left((tobit(n) & 31) as u32) as i32)
        })?,
    )?;
    t.set(
        "ror",
        lua.create_function(|_, (x, n): (f64, f64)| {
            Ok((tobit(x) as u32).rotate_right((tobit(n) & 31) as u32) as i32)
        })?,
    )?;
    t.set(
        "bswap",
        lua.create_function(|_, x: f64| Ok(tobit(x).swap_bytes()))?,
    )?;
    t.set(
        "tohex",
        lua.create_function(|_, (x, n): (f64, Option<f64>)| {
            let n = n.map_or(8, tobit);
            let (upper, n) = (n < 0, n.unsigned_abs().min(8) as usize);
            let v = tobit(x) as u32 as u64;
            let s = format!("{:08x}", v);
            let s = s[8 - n..].to_string();
            Ok(if upper { s.to_uppercase() } else { s })
        })?,
    )?;
    Ok(t)
}
