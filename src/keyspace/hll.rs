//! HyperLogLog sketches in Redis's exact byte layout (hyperloglog.c), so a
//! sketch written by redis-server reads here and the reverse: to GET, SET,
//! DUMP, RDB and replication a HyperLogLog is a plain string.
//!
//! Layout: a 16-byte header, `"HYLL"`, the encoding (0 dense, 1 sparse),
//! three zero bytes and the cached cardinality (8 bytes little endian, its
//! top bit set when stale), then the registers: 16384 registers of 6 bits.
//! Dense packs them little-endian-first into 12288 bytes; sparse is a run
//! length code of ZERO (`00llllll`, 1-64 zero registers), XZERO
//! (`01llllll llllllll`, 1-16384) and VAL (`1vvvvvll`, 1-4 registers of
//! value 1-32) opcodes. A sparse sketch turns dense when a register needs
//! more than 32 or the string would pass `hll-sparse-max-bytes`.
//!
//! The sparse update follows Redis's in-place algorithm step for step
//! (split the opcode covering the register, then merge adjacent equal VALs
//! from the previous opcode over at most five opcodes), not a canonical
//! re-encoding: the same PFADDs then give the same bytes on both servers,
//! which DEBUG DIGEST, GET and replication to a Redis replica rely on.
//! The estimate is Ertl's improved raw estimator with Redis's constants, in
//! the same f64 operations, so PFCOUNT answers the same number.
//!
//! Why here and not in `commands/`: the sketch is a representation of a
//! string value, like the compact encodings of the collections, and the
//! keyspace layer's merge code may join sketches by register maximum.
//! Every function checks its bounds: a corrupted sketch (any bytes SETRANGE
//! can write) gives `Err(Corrupt)`, never a panic.

/// A sketch whose bytes do not describe 16384 registers
/// (Redis's "-INVALIDOBJ Corrupted HLL object detected").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

pub(crate) const HDR: usize = 16;
pub(crate) const P: u32 = 14;
pub(crate) const Q: u32 = 64 - P;
pub const REGISTERS: usize = 1 << P;
pub(crate) const DENSE_SIZE: usize = HDR + (REGISTERS * 6).div_ceil(8);
pub(crate) const DENSE: u8 = 0;
pub(crate) const SPARSE: u8 = 1;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
const SEED: u64 = 0xadc8_3b19;
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

/// One sparse opcode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Op {
    /// `len` zero registers, one byte (ZERO) or two (XZERO).
    Zero { len: usize, wide: bool },
    /// `len` registers of value `val`.
    Val { val: u8, len: usize },
}

impl Op {
    fn bytes(self) -> usize {
        match self {
            Op::Zero { wide: true, .. } => 2,
            _ => 1,
        }
    }

    fn span(self) -> usize {
        match self {
            Op::Zero { len, .. } | Op::Val { len, .. } => len,
        }
    }
}

/// The opcode at `b[i]` (an XZERO cut short reads its missing byte as 0,
/// as the string's terminator does in Redis).
pub(crate) fn op_at(b: &[u8], i: usize) -> Op {
    let c = b[i];
    match c & 0xc0 {
        0x00 => Op::Zero {
            len: (c & 0x3f) as usize + 1,
            wide: false,
        },
        0x40 => {
            let lo = b.get(i + 1).copied().unwrap_or(0) as usize;
            Op::Zero {
                len: ((((c & 0x3f) as usize) << 8) | lo) + 1,
                wide: true,
            }
        }
        _ => Op::Val {
            val: ((c >> 2) & 0x1f) + 1,
            len: (c & 3) as usize + 1,
        },
    }
}

fn val_byte(val: u8, len: usize) -> u8 {
    0x80 | ((val - 1) << 2) | (len as u8 - 1)
}

/// Appends the shortest zero opcode for `len` registers.
fn push_zero(out: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        let l = len - 1;
        out.push(0x40 | (l >> 8) as u8);
        out.push((l & 0xff) as u8);
    } else {
        out.push((len - 1) as u8);
    }
}

/// Redis's isHLLObjectOrReply checks (anything else is WRONGTYPE's
/// "Key is not a valid HyperLogLog string value.").
pub(crate) fn looks_valid(b: &[u8]) -> bool {
    b.len() >= HDR
        && &b[..4] == b"HYLL"
        && b[4] <= SPARSE
        && (b[4] != DENSE || b.len() == DENSE_SIZE)
}

/// A new, empty sketch: sparse, one XZERO covering every register.
pub(crate) fn new_sketch() -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(b"HYLL");
    v.push(SPARSE);
    v.extend_from_slice(&[0; 11]);
    push_zero(&mut v, XZERO_MAX_LEN);
    v
}

pub(crate) fn is_sparse(b: &[u8]) -> bool {
    b[4] == SPARSE
}

/// MurmurHash64A (Austin Appleby's, 64-bit, little-endian reads).
pub(crate) fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let mut k = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        for (i, &b) in rest.iter().enumerate() {
            h ^= (b as u64) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element goes to and the run length of its hash's
/// zeros plus one (hllPatLen).
pub fn pattern(ele: &[u8]) -> (usize, u8) {
    let hash = murmur64a(ele, SEED);
    let index = (hash as usize) & (REGISTERS - 1);
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// Register `i` of the dense registers `r` (past its end reads as 0).
pub(crate) fn dense_get(r: &[u8], i: usize) -> u8 {
    let byte = i * 6 / 8;
    let fb = (i * 6) & 7;
    let b0 = r[byte] as u16;
    let b1 = r.get(byte + 1).copied().unwrap_or(0) as u16;
    (((b0 >> fb) | (b1 << (8 - fb))) & 63) as u8
}

/// The eight registers packed in six dense bytes (6-bit registers, least
/// significant bits first), one a byte of the result read little-endian:
/// the 48 bits are spread into two 24-bit halves, four 12-bit quarters,
/// then eight 6-bit fields, each step one shift and two masks.
#[inline]
fn unpack8(c: &[u8]) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(&c[..6]);
    let x = u64::from_le_bytes(b);
    let y = (x & 0xff_ffff) | (x >> 24) << 32;
    let y = (y & 0x0000_0fff_0000_0fff) | (y & 0x00ff_f000_00ff_f000) << 4;
    let y = (y & 0x003f_003f_003f_003f) | (y & 0x0fc0_0fc0_0fc0_0fc0) << 2;
    y.to_le_bytes()
}

/// The dense registers `r` (12288 bytes), one a byte: what reading them
/// one by one with [`dense_get`] spends ~25 instructions a register on,
/// this does in under two (PFCOUNT of several keys reads every register
/// of every key).
pub(crate) fn unpack_dense(r: &[u8]) -> Box<[u8; REGISTERS]> {
    let mut out = Box::new([0u8; REGISTERS]);
    for (o, c) in out.chunks_exact_mut(8).zip(r.chunks_exact(6)) {
        o.copy_from_slice(&unpack8(c));
    }
    out
}

/// Sets register `i` of the dense registers `r` to `v`.
pub(crate) fn dense_set(r: &mut [u8], i: usize, v: u8) {
    let byte = i * 6 / 8;
    let fb = (i * 6) & 7;
    let v = v as u16;
    r[byte] = (r[byte] & !((63u16 << fb) as u8)) | ((v << fb) as u8);
    if let Some(b1) = r.get_mut(byte + 1) {
        let fb8 = 8 - fb;
        *b1 = (*b1 & !((63u16 >> fb8) as u8)) | ((v >> fb8) as u8);
    }
}

/// The cached cardinality, if valid.
pub(crate) fn cached(b: &[u8]) -> Option<u64> {
    let card = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    (b[15] & 0x80 == 0).then_some(card)
}

pub(crate) fn set_cache(b: &mut [u8], card: u64) {
    b[8..16].copy_from_slice(&card.to_le_bytes());
}

pub(crate) fn invalidate(b: &mut [u8]) {
    b[15] |= 0x80;
}

/// Turns a sparse sketch dense in place (hllSparseToDense); a dense one
/// is left alone.
pub(crate) fn to_dense(v: &mut Vec<u8>) -> Result<(), Corrupt> {
    if !is_sparse(v) {
        return Ok(());
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..HDR].copy_from_slice(&v[..HDR]);
    dense[4] = DENSE;
    let regs = &mut dense[HDR..];
    let (mut idx, mut i) = (0usize, HDR);
    while i < v.len() {
        let op = op_at(v, i);
        if let Op::Val { val, len } = op {
            if idx + len > REGISTERS {
                break;
            }
            for r in idx..idx + len {
                dense_set(regs, r, val);
            }
        }
        idx += op.span();
        i += op.bytes();
    }
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    *v = dense;
    Ok(())
}

/// Sets register `index` to `count` if that raises it; whether it did.
pub(crate) fn set_register(
    v: &mut Vec<u8>,
    index: usize,
    count: u8,
    max_bytes: usize,
) -> Result<bool, Corrupt> {
    if !is_sparse(v) {
        let regs = &mut v[HDR..];
        if count <= dense_get(regs, index) {
            return Ok(false);
        }
        dense_set(regs, index, count);
        return Ok(true);
    }
    if count > VAL_MAX_VALUE {
        return promote(v, index, count);
    }
    sparse_set(v, index, count, max_bytes)
}

/// Adds an element (hllAdd); whether a register changed.
pub(crate) fn add(v: &mut Vec<u8>, ele: &[u8], max_bytes: usize) -> Result<bool, Corrupt> {
    let (index, count) = pattern(ele);
    set_register(v, index, count, max_bytes)
}

fn promote(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    to_dense(v)?;
    dense_set(&mut v[HDR..], index, count);
    Ok(true)
}

/// The opcode covering register `index`: its byte offset, the offset of
/// the one before (None for the first) and the first register it covers.
fn locate(v: &[u8], index: usize) -> Result<(usize, Option<usize>, usize), Corrupt> {
    let (mut i, mut prev, mut first) = (HDR, None, 0usize);
    while i < v.len() {
        let op = op_at(v, i);
        if index < first + op.span() {
            return Ok((i, prev, first));
        }
        prev = Some(i);
        i += op.bytes();
        first += op.span();
    }
    Err(Corrupt)
}

/// The sparse case of [`set_register`] (hllSparseSet).
fn sparse_set(v: &mut Vec<u8>, index: usize, count: u8, max_bytes: usize) -> Result<bool, Corrupt> {
    let (p, prev, first) = locate(v, index)?;
    let op = op_at(v, p);
    match op {
        Op::Val { val, .. } if val >= count => return Ok(false),
        Op::Val { len: 1, .. }
        | Op::Zero {
            len: 1,
            wide: false,
        } => {
            v[p] = val_byte(count, 1);
        }
        _ => {
            let seq = split(op, index - first, count);
            let old = op.bytes();
            if seq.len() > old && v.len() + seq.len() - old > max_bytes {
                return promote(v, index, count);
            }
            let end = (p + old).min(v.len());
            v.splice(p..end, seq);
        }
    }
    merge_vals(v, prev.unwrap_or(HDR));
    invalidate(v);
    Ok(true)
}

/// The opcodes replacing `op` once its register at offset `at` is `count`.
fn split(op: Op, at: usize, count: u8) -> Vec<u8> {
    let mut seq = Vec::with_capacity(5);
    let after = op.span() - 1 - at;
    match op {
        Op::Zero { .. } => {
            if at > 0 {
                push_zero(&mut seq, at);
            }
            seq.push(val_byte(count, 1));
            if after > 0 {
                push_zero(&mut seq, after);
            }
        }
        Op::Val { val, .. } => {
            if at > 0 {
                seq.push(val_byte(val, at));
            }
            seq.push(val_byte(count, 1));
            if after > 0 {
                seq.push(val_byte(val, after));
            }
        }
    }
    seq
}

/// Redis's step 4: from `p`, over at most five opcodes, merges adjacent
/// VALs of equal value whose lengths fit one opcode.
fn merge_vals(v: &mut Vec<u8>, mut p: usize) {
    let mut scan = 5;
    while p < v.len() && scan > 0 {
        scan -= 1;
        let Op::Val { val, len } = op_at(v, p) else {
            p += op_at(v, p).bytes();
            continue;
        };
        if p + 1 < v.len() {
            if let Op::Val { val: v2, len: l2 } = op_at(v, p + 1) {
                if v2 == val && len + l2 <= VAL_MAX_LEN {
                    v[p + 1] = val_byte(val, len + l2);
                    v.remove(p);
                    continue;
                }
            }
        }
        p += 1;
    }
}

/// The register histogram (hllDenseRegHisto / hllSparseRegHisto); a
/// sparse sketch not covering exactly 16384 registers is corrupt.
pub(crate) fn histogram(v: &[u8]) -> Result<[u64; 64], Corrupt> {
    if !is_sparse(v) {
        return Ok(raw_histogram(&unpack_dense(&v[HDR..])));
    }
    let mut h = [0u64; 64];
    let (mut idx, mut i) = (0usize, HDR);
    while i < v.len() {
        let op = op_at(v, i);
        match op {
            Op::Zero { len, .. } => h[0] += len as u64,
            Op::Val { val, len } => h[val as usize] += len as u64,
        }
        idx += op.span();
        i += op.bytes();
    }
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    Ok(h)
}

/// The histogram of plain registers (one byte each).
pub(crate) fn raw_histogram(regs: &[u8; REGISTERS]) -> [u64; 64] {
    let mut h = [0u64; 64];
    for &r in regs.iter() {
        h[(r & 63) as usize] += 1;
    }
    h
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0f64, x);
    loop {
        x *= x;
        let prev = z;
        z += x * y;
        y += y;
        if prev == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0f64, 1.0 - x);
    loop {
        x = x.sqrt();
        let prev = z;
        y *= 0.5;
        let d = 1.0 - x;
        z -= d * d * y;
        if prev == z {
            return z / 3.0;
        }
    }
}

/// The cardinality estimate from a register histogram (hllCount: Ertl,
/// "New cardinality estimation algorithms for HyperLogLog sketches").
pub(crate) fn estimate(h: &[u64; 64]) -> u64 {
    let m = REGISTERS as f64;
    let q = Q as usize;
    let mut z = m * tau((m - h[q + 1] as f64) / m);
    for j in (1..=q).rev() {
        z += h[j] as f64;
        z *= 0.5;
    }
    z += m * sigma(h[0] as f64 / m);
    (ALPHA_INF * m * m / z).round() as u64
}

/// Raises `max[i]` to each register of the sketch (hllMerge).
pub fn merge_into(max: &mut [u8; REGISTERS], v: &[u8]) -> Result<(), Corrupt> {
    if !is_sparse(v) {
        // Unpacked first, the maximum is one vectorized loop.
        let regs = unpack_dense(&v[HDR..]);
        for (m, &r) in max.iter_mut().zip(regs.iter()) {
            *m = (*m).max(r);
        }
        return Ok(());
    }
    let (mut idx, mut i) = (0usize, HDR);
    while i < v.len() {
        let op = op_at(v, i);
        if let Op::Val { val, len } = op {
            if idx + len > REGISTERS {
                break;
            }
            for m in &mut max[idx..idx + len] {
                *m = (*m).max(val);
            }
        }
        idx += op.span();
        i += op.bytes();
    }
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    Ok(())
}

/// PFDEBUG DECODE's text of a sparse sketch ("Z:16384", "v:3,1 z:5"...).
pub(crate) fn decode(v: &[u8]) -> String {
    let mut s = String::new();
    let mut i = HDR;
    while i < v.len() {
        let op = op_at(v, i);
        if !s.is_empty() {
            s.push(' ');
        }
        match op {
            Op::Zero { len, wide: false } => s.push_str(&format!("z:{len}")),
            Op::Zero { len, wide: true } => s.push_str(&format!("Z:{len}")),
            Op::Val { val, len } => s.push_str(&format!("v:{val},{len}")),
        }
        i += op.bytes();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_registers_round_trip() {
        let mut r = vec![0u8; DENSE_SIZE - HDR];
        let vals: Vec<u8> = (0..REGISTERS).map(|i| ((i * 7919) % 64) as u8).collect();
        for (i, &x) in vals.iter().enumerate() {
            dense_set(&mut r, i, x);
        }
        for (i, &x) in vals.iter().enumerate() {
            assert_eq!(dense_get(&r, i), x, "register {i}");
        }
    }

    /// A dense sketch whose register `i` is `f(i)`.
    fn dense_of(f: impl Fn(usize) -> u8) -> Vec<u8> {
        let mut d = new_sketch();
        to_dense(&mut d).unwrap();
        for i in 0..REGISTERS {
            dense_set(&mut d[HDR..], i, f(i));
        }
        d
    }

    #[test]
    fn dense_merge_and_histogram_read_every_register() {
        let a = dense_of(|i| ((i * 7919) % 64) as u8);
        let b = dense_of(|i| ((i * 104_729 + 13) % 51) as u8);
        let mut max = [0u8; REGISTERS];
        merge_into(&mut max, &a).unwrap();
        merge_into(&mut max, &b).unwrap();
        let mut want = [0u64; 64];
        for (i, &m) in max.iter().enumerate() {
            let (x, y) = (dense_get(&a[HDR..], i), dense_get(&b[HDR..], i));
            assert_eq!(m, x.max(y), "register {i}");
            want[x as usize] += 1;
        }
        assert_eq!(histogram(&a).unwrap(), want);
    }

    #[test]
    fn sparse_and_dense_agree() {
        let mut s = new_sketch();
        let mut d = new_sketch();
        to_dense(&mut d).unwrap();
        for i in 0..500u32 {
            let e = i.to_string();
            add(&mut s, e.as_bytes(), 3000).unwrap();
            add(&mut d, e.as_bytes(), 3000).unwrap();
        }
        assert!(is_sparse(&s));
        assert_eq!(
            estimate(&histogram(&s).unwrap()),
            estimate(&histogram(&d).unwrap())
        );
        let mut s2 = s.clone();
        to_dense(&mut s2).unwrap();
        assert_eq!(&s2[HDR..], &d[HDR..]);
    }

    #[test]
    fn corrupt_sparse_is_detected() {
        let mut s = new_sketch();
        s.extend_from_slice(b"hello");
        assert_eq!(histogram(&s), Err(Corrupt));
        assert_eq!(to_dense(&mut s.clone()), Err(Corrupt));
        let mut m = [0u8; REGISTERS];
        assert_eq!(merge_into(&mut m, &s), Err(Corrupt));
    }
}
