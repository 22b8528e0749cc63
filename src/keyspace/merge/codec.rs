//! The byte format of merge states (key states on the stream, the RDB's
//! `lattice-merge` aux field): varints, length-prefixed bytes, and a
//! cursor that refuses truncated or oversized input.

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Reads a merge state.
pub struct Cursor<'a>(pub &'a [u8]);

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

    pub fn end(&self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err("trailing bytes in merge metadata".into())
        }
    }
}
