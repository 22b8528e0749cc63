//! LZF, the compression of RDB strings (`rdbcompression yes`): the format
//! of Marc Lehmann's liblzf, which Redis embeds, and the same choices as its
//! compressor (a 16-bit hash of 3 bytes, the "very fast" re-hashing after a
//! match), so our DUMP payloads and RDB files are byte for byte Redis's.
//!
//! The format is a sequence of:
//! - a literal run: `000LLLLL` then L+1 bytes (1 to 32);
//! - a back reference of 3 to 8 bytes: `LLLOOOOO OOOOOOOO` (L = length-2,
//!   1 to 6; the offset O+1 counts back from the output's end);
//! - a longer one, 9 to 264 bytes: `111OOOOO LLLLLLLL OOOOOOOO` (length-9).
//!
//! Ours and not the `lzf` crate's: that one's compressor indexes past its
//! output buffer (a panic) when the output fills up exactly as a literal
//! run ends and a match follows. Here every write is a `Vec` push, and the
//! output limit is checked as liblzf checks it.

const HLOG: u32 = 16;
const HSIZE: usize = 1 << HLOG;
/// Literals per run.
const MAX_LIT: usize = 1 << 5;
/// How far back a reference reaches.
const MAX_OFF: usize = 1 << 13;
/// The longest reference.
const MAX_REF: usize = (1 << 8) + (1 << 3);

/// The hash slot of the 3 bytes whose value is `h` (liblzf's IDX).
fn slot(h: u32) -> usize {
    ((h >> (3 * 8 - HLOG)).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1)
}

/// The hash table: the last position each 3-byte hash was seen at. One
/// per thread, reused: a slot written by an earlier call (another epoch)
/// reads as empty, as a zeroed table's would, without zeroing 512 KB per
/// string.
struct Table {
    epoch: u32,
    slots: Vec<(u32, u32)>,
}

impl Table {
    fn begin(&mut self) {
        if self.slots.is_empty() {
            self.slots = vec![(0, 0); HSIZE];
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.slots.fill((0, 0));
            self.epoch = 1;
        }
    }

    /// The position last stored at slot `h` (0: none), replaced by `ip`.
    fn swap(&mut self, h: usize, ip: usize) -> usize {
        let (epoch, pos) = std::mem::replace(&mut self.slots[h], (self.epoch, ip as u32));
        if epoch == self.epoch {
            pos as usize
        } else {
            0
        }
    }
}

thread_local! {
    static TABLE: std::cell::RefCell<Table> = const {
        std::cell::RefCell::new(Table { epoch: 0, slots: Vec::new() })
    };
}

/// The output being built: literal runs open with a placeholder control
/// byte, set when the run ends (dropped if the run stays empty).
struct Out {
    buf: Vec<u8>,
    /// Literals in the open run.
    lit: usize,
}

impl Out {
    fn start_run(&mut self) {
        self.buf.push(0);
        self.lit = 0;
    }

    /// Closes the open run: its control byte, or no run at all if empty.
    fn end_run(&mut self) {
        if self.lit == 0 {
            self.buf.pop();
        } else {
            let at = self.buf.len() - self.lit - 1;
            self.buf[at] = (self.lit - 1) as u8;
        }
    }

    fn literal(&mut self, b: u8) {
        self.buf.push(b);
        self.lit += 1;
        if self.lit == MAX_LIT {
            self.end_run();
            self.start_run();
        }
    }

    /// A back reference of `len` + 2 bytes, `off` + 1 back.
    fn reference(&mut self, len: usize, off: usize) {
        if len < 7 {
            self.buf.push((off >> 8) as u8 + ((len as u8) << 5));
        } else {
            self.buf.push((off >> 8) as u8 + (7 << 5));
            self.buf.push((len - 7) as u8);
        }
        self.buf.push(off as u8);
    }
}

/// How many bytes from `ip` on equal those from `r` on (3 are known to),
/// as liblzf counts them: up to `maxlen`, except that when `maxlen` > 16
/// the first 16 steps are taken unchecked (they stay inside `input`).
fn match_len(input: &[u8], r: usize, ip: usize, maxlen: usize) -> usize {
    let mut len = 2;
    if maxlen > 16 {
        for _ in 0..16 {
            len += 1;
            if input[r + len] != input[ip + len] {
                return len;
            }
        }
    }
    loop {
        len += 1;
        if len >= maxlen || input[r + len] != input[ip + len] {
            return len;
        }
    }
}

/// Compresses `input` into at most `limit` bytes: None if it does not fit
/// (as liblzf's 0; Redis passes the length less 4 and stores raw then).
pub(crate) fn compress(input: &[u8], limit: usize) -> Option<Vec<u8>> {
    // Positions are u32 (a string is at most 512 MB).
    if input.len() < 3 || input.len() > u32::MAX as usize {
        return None;
    }
    TABLE.with_borrow_mut(|t| {
        t.begin();
        compress_with(input, limit, t)
    })
}

fn compress_with(input: &[u8], limit: usize, htab: &mut Table) -> Option<Vec<u8>> {
    let n = input.len();
    let mut out = Out {
        buf: Vec::with_capacity(limit.min(n) + 1),
        lit: 0,
    };
    out.start_run();
    let mut ip = 0;
    let mut hval = (input[0] as u32) << 8 | input[1] as u32;
    while ip < n - 2 {
        hval = hval << 8 | input[ip + 2] as u32;
        let h = slot(hval);
        let r = htab.swap(h, ip);
        let off = ip.wrapping_sub(r).wrapping_sub(1);
        if off < MAX_OFF && r > 0 && input[r..r + 3] == input[ip..ip + 3] {
            if out.buf.len() - (out.lit == 0) as usize + 4 >= limit {
                return None;
            }
            let len = match_len(input, r, ip, (n - ip - 2).min(MAX_REF)) - 2;
            out.end_run();
            out.reference(len, off);
            out.start_run();
            ip += len + 2;
            if ip >= n - 2 {
                break;
            }
            // Hash the two positions the reference skipped last.
            ip -= 2;
            hval = (input[ip] as u32) << 8 | input[ip + 1] as u32;
            for _ in 0..2 {
                hval = hval << 8 | input[ip + 2] as u32;
                htab.swap(slot(hval), ip);
                ip += 1;
            }
        } else {
            if out.buf.len() >= limit {
                return None;
            }
            out.literal(input[ip]);
            ip += 1;
        }
    }
    // At most two bytes are left, and a run's control byte.
    if out.buf.len() + 3 > limit {
        return None;
    }
    for &b in &input[ip..] {
        out.literal(b);
    }
    out.end_run();
    (out.buf.len() <= limit).then_some(out.buf)
}

/// Decompresses `input` into exactly `len` bytes; None if the data is
/// corrupt or decodes to another length.
pub(crate) fn decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = input[ip] as usize;
        ip += 1;
        if ctrl < 1 << 5 {
            let run = input.get(ip..ip + ctrl + 1)?;
            if out.len() + run.len() > len {
                return None;
            }
            out.extend_from_slice(run);
            ip += run.len();
            continue;
        }
        let mut n = ctrl >> 5;
        if n == 7 {
            n += *input.get(ip)? as usize;
            ip += 1;
        }
        let back = ((ctrl & 0x1f) << 8) + *input.get(ip)? as usize + 1;
        ip += 1;
        n += 2;
        if back > out.len() || out.len() + n > len {
            return None;
        }
        // Byte by byte: a reference may overlap what it produces.
        let from = out.len() - back;
        for i in 0..n {
            out.push(out[from + i]);
        }
    }
    (out.len() == len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Random bytes with a few repeats copied in: mostly incompressible,
    /// so the output runs right up to the limit (where the `lzf` crate's
    /// compressor indexed out of bounds).
    fn near_incompressible(r: &mut impl FnMut() -> u64) -> Vec<u8> {
        let n = 21 + (r() % 300) as usize;
        let mut s: Vec<u8> = (0..n).map(|_| r() as u8).collect();
        for _ in 0..(r() % 3) {
            let (at, from) = ((r() as usize) % (n - 8), (r() as usize) % (n - 8));
            for k in 0..4 {
                s[at + k] = s[from + k];
            }
        }
        s
    }

    fn round_trips(s: &[u8]) {
        for limit in [s.len().saturating_sub(4), s.len(), s.len() * 2] {
            if let Some(c) = compress(s, limit) {
                assert!(
                    c.len() <= limit,
                    "{} bytes over a limit of {limit}",
                    c.len()
                );
                assert_eq!(decompress(&c, s.len()).as_deref(), Some(s));
            }
        }
    }

    /// The `lzf` crate's compressor panics on the 65,599th of these.
    #[test]
    fn near_incompressible_data_round_trips_within_the_limit() {
        let mut r = rng(88172645463325252);
        for _ in 0..100_000 {
            round_trips(&near_incompressible(&mut r));
        }
    }

    #[test]
    fn compressible_data_round_trips_within_the_limit() {
        let mut r = rng(2463534242);
        for i in 0..5_000 {
            let n = (r() % 2_000) as usize;
            let k = [2, 5, 40][i % 3];
            let s: Vec<u8> = (0..n).map(|_| b'0' + (r() % k) as u8).collect();
            round_trips(&s);
        }
    }

    #[test]
    fn compresses_repetitive_data() {
        let s = b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaabcabcabcabcabcabcbca0123456789";
        let c = compress(s, s.len() - 4).unwrap();
        // Redis 7.0 DUMPs this value with exactly these 25 bytes.
        assert_eq!(
            c,
            b"\x01aa\xe0\x1f\x00\x01bc\xe0\x06\x02 \x10\t0123456789".to_vec()
        );
        let long = vec![7u8; 100_000];
        let c = compress(&long, long.len()).unwrap();
        assert!(c.len() < 1200, "{} bytes", c.len()); // 379 references of 264 bytes
        assert_eq!(decompress(&c, long.len()).unwrap(), long);
    }

    #[test]
    fn corrupt_input_is_refused() {
        let c = compress(b"abcabcabcabcabcabcabc", 100).unwrap();
        assert_eq!(decompress(&c, 20), None); // decodes to 21
        assert_eq!(decompress(&c[..c.len() - 1], 21), None);
        assert_eq!(decompress(b"\x20\x05", 10), None); // reference before the start
        assert_eq!(decompress(b"\x05ab", 6), None); // literal run past the end
        assert_eq!(decompress(b"", 0), Some(vec![]));
    }
}
