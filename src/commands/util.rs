//! Argument parsing shared by the command families, with Redis's rules.

use super::CmdError;
use crate::protocol::parse_i64;

/// An i64 argument ("ERR value is not an integer or out of range").
pub(crate) fn arg_i64(a: &[u8]) -> Result<i64, CmdError> {
    parse_i64(a).ok_or(CmdError::NotInteger)
}

pub(crate) fn parse_f64(a: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(a).ok()?;
    if s.is_empty() || s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let v = match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => {
            if lower.contains("nan") || lower.contains("inf") {
                return None;
            }
            if let Some(v) = parse_hex_f64(&lower) {
                return Some(v);
            }
            // Rust accepts forms C does not ("1_0" no; ".5", "5." yes in both).
            lower.parse::<f64>().ok()?
        }
    };
    if v.is_nan() {
        None
    } else {
        Some(v)
    }
}

/// C's hexadecimal floats, which strtod accepts (`0x10`, `-0x1.8p3`):
/// `[sign]0x<hex digits>[.<hex digits>][p[sign]<decimal exponent>]`,
/// already lower-cased. None if `s` is not one.
fn parse_hex_f64(s: &str) -> Option<f64> {
    let (neg, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let body = rest.strip_prefix("0x")?;
    let (digits, exp) = match body.split_once('p') {
        Some((d, e)) => (d, e.parse::<i32>().ok()?),
        None => (body, 0),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut m = 0f64;
    for c in int.chars().chain(frac.chars()) {
        m = m * 16.0 + c.to_digit(16)? as f64;
    }
    let scale = exp.checked_sub(4 * frac.len() as i32)?;
    let v = m * 2f64.powi(scale);
    if v.is_infinite() {
        return None; // out of range, as strtod's ERANGE
    }
    Some(if neg { -v } else { v })
}

pub(crate) use crate::glob::glob_match;

pub(crate) use crate::protocol::eq_ic;

/// Lossy UTF-8 rendering of an argument for error messages.
pub(crate) fn lossy(a: &[u8]) -> String {
    String::from_utf8_lossy(a).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_floats_parse_as_strtod() {
        for (s, v) in [
            ("0x10", 16.0),
            ("-0x1p2", -4.0),
            ("0x1.8p1", 3.0),
            ("0x.8", 0.5),
            ("0X1P-1", 0.5),
        ] {
            assert_eq!(parse_f64(s.as_bytes()), Some(v), "{s}");
        }
        for s in ["0x", "0xg", "0x1p", "0x1p2.5", "0x1p99999"] {
            assert_eq!(parse_f64(s.as_bytes()), None, "{s}");
        }
    }

    #[test]
    fn floats() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b"abc"), None);
    }
}
