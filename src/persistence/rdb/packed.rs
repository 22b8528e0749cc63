//! Parsers for the compact blobs an RDB file embeds inside string values:
//! ziplist (RDB types 10, 12, 13 and quicklist 1 nodes), listpack (types
//! 16, 17, 20 and quicklist 2 nodes), zipmap (type 9) and intset (type 11).
//!
//! Each parser validates the whole blob the way Redis's deep sanitization
//! does (header sizes and counts agree with the contents, every entry lies
//! inside the blob, the terminator is where it should be, back lengths and
//! previous-entry lengths are consistent) and returns the elements as owned
//! byte strings (integers formatted in decimal, as Redis reads them back).
//! Nothing is allocated from a claimed size: element vectors grow as entries
//! are actually parsed, and every entry takes at least one byte of input.

use super::RdbError;

fn corrupt(what: &str, why: &str) -> RdbError {
    RdbError::Corrupt(format!("{what}: {why}"))
}

fn int_bytes(n: i64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// `n` bytes at `at`, or an error naming `what`.
fn slice<'a>(b: &'a [u8], at: usize, n: usize, what: &str) -> Result<&'a [u8], RdbError> {
    at.checked_add(n)
        .and_then(|end| b.get(at..end))
        .ok_or_else(|| corrupt(what, "entry out of range"))
}

fn le_u32(b: &[u8], at: usize, what: &str) -> Result<u32, RdbError> {
    Ok(u32::from_le_bytes(
        slice(b, at, 4, what)?.try_into().expect("4 bytes"),
    ))
}

fn le_u16(b: &[u8], at: usize, what: &str) -> Result<u16, RdbError> {
    Ok(u16::from_le_bytes(
        slice(b, at, 2, what)?.try_into().expect("2 bytes"),
    ))
}

/// Sign-extends the little-endian integer in `b` (1 to 8 bytes).
fn le_signed(b: &[u8]) -> i64 {
    let mut buf = [0u8; 8];
    buf[..b.len()].copy_from_slice(b);
    let shift = 64 - 8 * b.len() as u32;
    (i64::from_le_bytes(buf) << shift) >> shift
}

/// The elements of a ziplist.
pub(crate) fn ziplist(b: &[u8]) -> Result<Vec<Vec<u8>>, RdbError> {
    const W: &str = "ziplist";
    if b.len() < 11 {
        return Err(corrupt(W, "too short"));
    }
    if le_u32(b, 0, W)? as usize != b.len() {
        return Err(corrupt(W, "header size mismatch"));
    }
    let tail = le_u32(b, 4, W)? as usize;
    let count = le_u16(b, 8, W)?;
    if b[b.len() - 1] != 0xFF {
        return Err(corrupt(W, "missing terminator"));
    }
    let mut out = Vec::new();
    let (mut at, mut prev_len, mut last_start) = (10, 0, 10);
    while at < b.len() - 1 {
        let (value, next) = zip_entry(b, at, prev_len)?;
        if next >= b.len() {
            return Err(corrupt(W, "entry overruns terminator"));
        }
        (prev_len, last_start, at) = (next - at, at, next);
        out.push(value);
    }
    if (count != u16::MAX && count as usize != out.len()) || tail != last_start {
        return Err(corrupt(W, "header count or tail mismatch"));
    }
    Ok(out)
}

/// The ziplist entry at `at` (whose predecessor is `prev_len` bytes long):
/// its value and where the next entry starts.
fn zip_entry(b: &[u8], mut at: usize, prev_len: usize) -> Result<(Vec<u8>, usize), RdbError> {
    const W: &str = "ziplist";
    let byte = |i: usize| {
        b.get(i)
            .copied()
            .ok_or_else(|| corrupt(W, "entry out of range"))
    };
    let (prevlen, n) = match byte(at)? {
        p @ 0..=253 => (p as usize, 1),
        254 => (le_u32(b, at + 1, W)? as usize, 5),
        _ => return Err(corrupt(W, "bad prevlen")),
    };
    if prevlen != prev_len {
        return Err(corrupt(W, "prevlen mismatch"));
    }
    at += n;
    let enc = byte(at)?;
    let (hdr, len) = match enc >> 6 {
        0 => (1, (enc & 0x3F) as usize),
        1 => (2, (((enc & 0x3F) as usize) << 8) | byte(at + 1)? as usize),
        2 if enc == 0x80 => {
            let len = u32::from_be_bytes(slice(b, at + 1, 4, W)?.try_into().expect("4"));
            (5, len as usize)
        }
        2 => return Err(corrupt(W, "bad string encoding")),
        _ => {
            let width = match enc {
                0xC0 => 2,
                0xD0 => 4,
                0xE0 => 8,
                0xF0 => 3,
                0xFE => 1,
                0xF1..=0xFD => return Ok((int_bytes((enc & 0x0F) as i64 - 1), at + 1)),
                _ => return Err(corrupt(W, "bad integer encoding")),
            };
            let v = int_bytes(le_signed(slice(b, at + 1, width, W)?));
            return Ok((v, at + 1 + width));
        }
    };
    Ok((slice(b, at + hdr, len, W)?.to_vec(), at + hdr + len))
}

/// Bytes of a listpack back length for an entry of `l` bytes.
fn backlen_size(l: usize) -> usize {
    match l {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    }
}

/// The elements of a listpack.
pub(crate) fn listpack(b: &[u8]) -> Result<Vec<Vec<u8>>, RdbError> {
    const W: &str = "listpack";
    if b.len() < 7 {
        return Err(corrupt(W, "too short"));
    }
    if le_u32(b, 0, W)? as usize != b.len() {
        return Err(corrupt(W, "header size mismatch"));
    }
    let count = le_u16(b, 4, W)?;
    if b[b.len() - 1] != 0xFF {
        return Err(corrupt(W, "missing terminator"));
    }
    let mut out = Vec::new();
    let mut at = 6;
    while at < b.len() - 1 {
        let start = at;
        let enc = b[at];
        let (value, hdr, data) = if enc & 0x80 == 0 {
            (int_bytes(enc as i64), 1, 0)
        } else if enc & 0xC0 == 0x80 {
            let len = (enc & 0x3F) as usize;
            (slice(b, at + 1, len, W)?.to_vec(), 1, len)
        } else if enc & 0xE0 == 0xC0 {
            let lo = *slice(b, at + 1, 1, W)?.first().expect("1");
            let u = (((enc & 0x1F) as i64) << 8) | lo as i64;
            let v = if u >= 1 << 12 { u - (1 << 13) } else { u };
            (int_bytes(v), 2, 0)
        } else if enc & 0xF0 == 0xE0 {
            let lo = *slice(b, at + 1, 1, W)?.first().expect("1");
            let len = (((enc & 0x0F) as usize) << 8) | lo as usize;
            (slice(b, at + 2, len, W)?.to_vec(), 2, len)
        } else {
            match enc {
                0xF0 => {
                    let len = le_u32(b, at + 1, W)? as usize;
                    (slice(b, at + 5, len, W)?.to_vec(), 5, len)
                }
                0xF1..=0xF4 => {
                    let width = [2, 3, 4, 8][(enc - 0xF1) as usize];
                    (int_bytes(le_signed(slice(b, at + 1, width, W)?)), 1, width)
                }
                _ => return Err(corrupt(W, "bad entry encoding")),
            }
        };
        let entry_len = hdr + data;
        let bl = backlen_size(entry_len);
        let back = slice(b, start + entry_len, bl, W)?;
        if decode_backlen(back) != Some(entry_len) {
            return Err(corrupt(W, "bad back length"));
        }
        at = start + entry_len + bl;
        if at >= b.len() {
            return Err(corrupt(W, "entry overruns terminator"));
        }
        out.push(value);
    }
    if count != u16::MAX && count as usize != out.len() {
        return Err(corrupt(W, "header count mismatch"));
    }
    Ok(out)
}

/// Reads a back length stored left to right (most significant group first,
/// continuation bit on every byte but the first).
fn decode_backlen(b: &[u8]) -> Option<usize> {
    let mut v = 0usize;
    for (i, &byte) in b.iter().enumerate() {
        if (i > 0) != (byte & 0x80 != 0) {
            return None;
        }
        v = (v << 7) | (byte & 0x7F) as usize;
    }
    Some(v)
}

/// The field/value pairs of a zipmap (flattened: f1, v1, f2, v2...).
pub(crate) fn zipmap(b: &[u8]) -> Result<Vec<Vec<u8>>, RdbError> {
    const W: &str = "zipmap";
    if b.len() < 2 || b[b.len() - 1] != 0xFF {
        return Err(corrupt(W, "bad framing"));
    }
    let len_at = |at: usize| -> Result<(usize, usize), RdbError> {
        match *b.get(at).ok_or_else(|| corrupt(W, "entry out of range"))? {
            n @ 0..=253 => Ok((n as usize, 1)),
            254 => {
                let n = le_u32(b, at + 1, W)? as usize;
                if n < 254 {
                    return Err(corrupt(W, "non-canonical length"));
                }
                Ok((n, 5))
            }
            _ => Err(corrupt(W, "entry out of range")),
        }
    };
    let mut out = Vec::new();
    let mut at = 1;
    while b[at] != 0xFF {
        let (flen, n) = len_at(at)?;
        out.push(slice(b, at + n, flen, W)?.to_vec());
        at += n + flen;
        let (vlen, n) = len_at(at)?;
        let free = *slice(b, at + n, 1, W)?.first().expect("1") as usize;
        out.push(slice(b, at + n + 1, vlen, W)?.to_vec());
        at += n + 1 + vlen + free;
        if at >= b.len() {
            return Err(corrupt(W, "entry overruns terminator"));
        }
    }
    let count = out.len() / 2;
    if count == 0 || (b[0] != 254 && b[0] as usize != count) {
        return Err(corrupt(W, "bad count"));
    }
    Ok(out)
}

/// The members of an intset, ascending.
pub(crate) fn intset(b: &[u8]) -> Result<Vec<i64>, RdbError> {
    const W: &str = "intset";
    let width = le_u32(b, 0, W)? as usize;
    if !matches!(width, 2 | 4 | 8) {
        return Err(corrupt(W, "bad encoding"));
    }
    let count = le_u32(b, 4, W)? as usize;
    if count.checked_mul(width).and_then(|n| n.checked_add(8)) != Some(b.len()) {
        return Err(corrupt(W, "size mismatch"));
    }
    let out: Vec<i64> = b[8..].chunks_exact(width).map(le_signed).collect();
    if out.windows(2).any(|w| w[0] >= w[1]) {
        return Err(corrupt(W, "not sorted or duplicated"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listpack_entries() {
        // "a", 5, -1 (13-bit), 300 (int16).
        let mut lp = vec![0, 0, 0, 0, 4, 0];
        lp.extend_from_slice(&[0x81, b'a', 2]);
        lp.extend_from_slice(&[5, 1]);
        lp.extend_from_slice(&[0xDF, 0xFF, 2]);
        lp.extend_from_slice(&[0xF1, 0x2C, 0x01, 3]);
        lp.push(0xFF);
        let n = lp.len() as u32;
        lp[..4].copy_from_slice(&n.to_le_bytes());
        let v = listpack(&lp).unwrap();
        assert_eq!(
            v,
            vec![
                b"a".to_vec(),
                b"5".to_vec(),
                b"-1".to_vec(),
                b"300".to_vec()
            ]
        );
        for cut in 0..lp.len() {
            assert!(listpack(&lp[..cut]).is_err());
        }
    }

    #[test]
    fn intset_entries() {
        let mut b = vec![2, 0, 0, 0, 2, 0, 0, 0];
        b.extend_from_slice(&(-3i16).to_le_bytes());
        b.extend_from_slice(&7i16.to_le_bytes());
        assert_eq!(intset(&b).unwrap(), vec![-3, 7]);
        b.truncate(11);
        assert!(intset(&b).is_err());
    }
}
