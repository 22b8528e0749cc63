//! The byte format of merge states (key states on the stream, the RDB's
//! `lattice-merge` aux field): varints, length-prefixed bytes, and a
//! cursor that refuses truncated or oversized input.

use crate::keyspace::longdouble::F80;

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Reads a merge state.
pub struct Cursor<'a>(pub &'a [u8]);

/// A long double, exactly: `0 neg m e` for a finite one (m u64, e i32,
/// little-endian), `1 neg` an infinity, `2` NaN.
pub(super) fn put_f80(out: &mut Vec<u8>, f: F80) {
    match f {
        F80::Fin { neg, m, e } => {
            out.extend_from_slice(&[0, neg as u8]);
            out.extend_from_slice(&m.to_le_bytes());
            out.extend_from_slice(&e.to_le_bytes());
        }
        F80::Inf(neg) => out.extend_from_slice(&[1, neg as u8]),
        F80::NaN => out.push(2),
    }
}

/// A total order of long doubles by their coding (a tie-break, not a
/// numeric order).
pub(super) fn f80_key(f: F80) -> (u8, bool, u64, i32) {
    match f {
        F80::Fin { neg, m, e } => (0, neg, m, e),
        F80::Inf(neg) => (1, neg, 0, 0),
        F80::NaN => (2, false, 0, 0),
    }
}

fn truncated() -> String {
    "truncated merge metadata".into()
}

impl<'a> Cursor<'a> {
    pub fn byte(&mut self) -> Result<u8, String> {
        let (&b, rest) = self.0.split_first().ok_or_else(truncated)?;
        self.0 = rest;
        Ok(b)
    }

    pub fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(v);
            }
        }
        Err("bad varint in merge metadata".into())
    }

    /// A count of things that follow, each at least a byte long.
    pub fn count(&mut self) -> Result<usize, String> {
        let n = self.varint()?;
        if n > self.0.len() as u64 {
            return Err(truncated());
        }
        Ok(n as usize)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(truncated());
        }
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(b)
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.count()?;
        self.take(n)
    }

    pub fn u64_le(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    pub fn i128_le(&mut self) -> Result<i128, String> {
        Ok(i128::from_le_bytes(self.take(16)?.try_into().expect("16")))
    }

    pub fn f80(&mut self) -> Result<F80, String> {
        Ok(match self.byte()? {
            0 => {
                let neg = self.byte()? != 0;
                let m = self.u64_le()?;
                let e = i32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"));
                F80::Fin { neg, m, e }
            }
            1 => F80::Inf(self.byte()? != 0),
            2 => F80::NaN,
            _ => return Err("bad float in merge metadata".into()),
        })
    }

    pub fn end(&self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err("trailing bytes in merge metadata".into())
        }
    }
}
