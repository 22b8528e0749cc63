//! The RDB writer: values, keys and file framing in Redis 7.0's format
//! (RDB version 10), byte for byte what Redis would write for the same data
//! in the same encodings, so Redis loads our files and DUMP payloads.
//!
//! Everything writes into a `Vec<u8>`: a snapshot serializes a batch of keys
//! into a buffer under the shard lock and writes the buffer to the file
//! outside it, and DUMP builds its payload in memory anyway. The file's CRC
//! is kept by [`FileWriter`], which sees every byte in order.
//!
//! Encodings chosen, as Redis 7.0's rdbSaveObject:
//! - strings: integers that fit 32 bits as int8/16/32, others raw, or LZF
//!   when `rdbcompression` is on, the string is longer than 20 bytes and it
//!   shrinks by more than 4 bytes;
//! - lists: QUICKLIST_2, one PACKED listpack node per list chunk;
//! - hashes: HASH_LISTPACK when listpack-encoded, else HASH;
//! - sets: SET_INTSET when intset-encoded, else SET;
//! - sorted sets: ZSET_LISTPACK when listpack-encoded, else ZSET_2
//!   (binary doubles), members written from the highest rank down as Redis
//!   does.

use std::io::{self, Write};

use super::{len, opcode, types, AUX_VERSIONS, CRC64, QUICKLIST_NODE_PACKED, RDB_VERSION};
use crate::keyspace::hash::HashValue;
use crate::keyspace::list::ListValue;
use crate::keyspace::set::SetValue;
use crate::keyspace::stream::StreamValue;
use crate::keyspace::zset::ZSetValue;
use crate::keyspace::{Entry, StrValue, Value};
use crate::protocol::format_double;
use crate::protocol::parse_i64;

/// What eviction metadata to store with each key (Redis stores the LRU idle
/// time under an LRU policy, the LFU counter under an LFU one, else nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyMeta {
    None,
    /// IDLE opcode; `now_lru` is the current 24-bit LRU clock.
    Idle {
        now_lru: u32,
    },
    /// FREQ opcode: the LFU counter after decay.
    Freq {
        now_lru: u32,
        decay_minutes: u32,
    },
}

/// How to write.
#[derive(Clone, Copy, Debug)]
pub struct SaveOpts {
    /// `rdbcompression`.
    pub compress: bool,
    pub meta: KeyMeta,
}

impl Default for SaveOpts {
    fn default() -> Self {
        SaveOpts {
            compress: true,
            meta: KeyMeta::None,
        }
    }
}

/// A length in RDB's variable encoding.
pub(crate) fn write_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend_from_slice(&[(len::BITS_14 << 6) | (n >> 8) as u8, n as u8]);
    } else if n <= u32::MAX as u64 {
        out.push(len::LEN_32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(len::LEN_64);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// An integer as RDB's int8/16/32 string encodings, if it fits.
fn write_int_encoded(out: &mut Vec<u8>, v: i64) -> bool {
    let enc = len::ENCVAL << 6;
    if let Ok(b) = i8::try_from(v) {
        out.extend_from_slice(&[enc | len::ENC_INT8, b as u8]);
    } else if let Ok(h) = i16::try_from(v) {
        out.push(enc | len::ENC_INT16);
        out.extend_from_slice(&h.to_le_bytes());
    } else if let Ok(w) = i32::try_from(v) {
        out.push(enc | len::ENC_INT32);
        out.extend_from_slice(&w.to_le_bytes());
    } else {
        return false;
    }
    true
}

/// A string (rdbSaveRawString): int-encoded when it is a canonical integer
/// of at most 11 characters that fits 32 bits, LZF-compressed when allowed
/// and worth it, raw otherwise.
pub(crate) fn write_string(out: &mut Vec<u8>, s: &[u8], compress: bool) {
    if s.len() <= 11 {
        if let Some(v) = parse_i64(s) {
            if write_int_encoded(out, v) {
                return;
            }
        }
    }
    if compress && s.len() > 20 && write_lzf(out, s) {
        return;
    }
    write_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// An integer value (an int-encoded string object).
fn write_int_string(out: &mut Vec<u8>, v: i64) {
    if !write_int_encoded(out, v) {
        let mut b = [0u8; 20];
        let digits = crate::protocol::fmt_i64_pub(&mut b, v);
        write_len(out, digits.len() as u64);
        out.extend_from_slice(digits);
    }
}

/// LZF form, when it saves more than 4 bytes (as Redis: the compressor
/// gets `len - 4` bytes of room, and the string is stored raw if that does
/// not hold it).
fn write_lzf(out: &mut Vec<u8>, s: &[u8]) -> bool {
    let Some(c) = super::lzf::compress(s, s.len() - 4) else {
        return false;
    };
    out.push((len::ENCVAL << 6) | len::ENC_LZF);
    write_len(out, c.len() as u64);
    write_len(out, s.len() as u64);
    out.extend_from_slice(&c);
    true
}

/// Builds Redis listpacks (listpack.c's format): a 6-byte header (total
/// bytes, element count), entries each followed by its back-length, and an
/// 0xFF terminator. Elements that are canonical integers get integer
/// encodings, as lpAppend chooses.
pub(crate) struct Listpack {
    buf: Vec<u8>,
    count: usize,
}

impl Default for Listpack {
    fn default() -> Self {
        Listpack::new()
    }
}

impl Listpack {
    pub(crate) fn new() -> Listpack {
        Listpack {
            buf: vec![0; 6],
            count: 0,
        }
    }

    pub(crate) fn push(&mut self, s: &[u8]) {
        let start = self.buf.len();
        match parse_i64(s) {
            Some(v) => self.push_int_body(v),
            None => self.push_str_body(s),
        }
        let entry_len = (self.buf.len() - start) as u64;
        push_backlen(&mut self.buf, entry_len);
        self.count += 1;
    }

    pub(crate) fn push_int(&mut self, v: i64) {
        let start = self.buf.len();
        self.push_int_body(v);
        let entry_len = (self.buf.len() - start) as u64;
        push_backlen(&mut self.buf, entry_len);
        self.count += 1;
    }

    fn push_int_body(&mut self, v: i64) {
        let b = &mut self.buf;
        if (0..=127).contains(&v) {
            b.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let u = (v as u64) & 0x1FFF;
            b.extend_from_slice(&[0xC0 | (u >> 8) as u8, u as u8]);
        } else if let Ok(h) = i16::try_from(v) {
            b.push(0xF1);
            b.extend_from_slice(&h.to_le_bytes());
        } else if (-(1 << 23)..1 << 23).contains(&v) {
            b.push(0xF2);
            b.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if let Ok(w) = i32::try_from(v) {
            b.push(0xF3);
            b.extend_from_slice(&w.to_le_bytes());
        } else {
            b.push(0xF4);
            b.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn push_str_body(&mut self, s: &[u8]) {
        let b = &mut self.buf;
        let n = s.len();
        if n < 64 {
            b.push(0x80 | n as u8);
        } else if n < 4096 {
            b.extend_from_slice(&[0xE0 | (n >> 8) as u8, n as u8]);
        } else {
            b.push(0xF0);
            b.extend_from_slice(&(n as u32).to_le_bytes());
        }
        b.extend_from_slice(s);
    }

    /// The finished listpack's bytes.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.buf.push(0xFF);
        let total = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&total.to_le_bytes());
        let count = self.count.min(u16::MAX as usize) as u16;
        self.buf[4..6].copy_from_slice(&count.to_le_bytes());
        self.buf
    }
}

/// An entry's back-length (lpEncodeBacklen): 7 bits per byte, the most
/// significant first, every byte but the first with its top bit set.
fn push_backlen(b: &mut Vec<u8>, l: u64) {
    let bytes = match l {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    };
    for i in (0..bytes).rev() {
        let septet = ((l >> (7 * i)) & 127) as u8;
        b.push(if i == bytes - 1 { septet } else { septet | 128 });
    }
}

/// An intset blob: encoding width, count, sorted little-endian integers.
fn intset_bytes(v: &[i64]) -> Vec<u8> {
    let (lo, hi) = (
        v.first().copied().unwrap_or(0),
        v.last().copied().unwrap_or(0),
    );
    let width: usize = if i16::try_from(lo).is_ok() && i16::try_from(hi).is_ok() {
        2
    } else if i32::try_from(lo).is_ok() && i32::try_from(hi).is_ok() {
        4
    } else {
        8
    };
    let mut b = Vec::with_capacity(8 + width * v.len());
    b.extend_from_slice(&(width as u32).to_le_bytes());
    b.extend_from_slice(&(v.len() as u32).to_le_bytes());
    for &n in v {
        b.extend_from_slice(&n.to_le_bytes()[..width]);
    }
    b
}

/// The RDB type byte `value` is written with.
pub(crate) fn type_of(value: &Value) -> u8 {
    match value {
        Value::Str(_) => types::STRING,
        Value::List(_) => types::LIST_QUICKLIST_2,
        Value::Hash(h) if matches!(**h, HashValue::Listpack(_)) => types::HASH_LISTPACK,
        Value::Hash(_) => types::HASH,
        Value::Set(s) if matches!(**s, SetValue::Intset(_)) => types::SET_INTSET,
        Value::Set(_) => types::SET,
        Value::ZSet(z) if z.is_compact() => types::ZSET_LISTPACK,
        Value::ZSet(_) => types::ZSET_2,
        Value::Stream(_) => types::STREAM_LISTPACKS_2,
        Value::Cron(_) => types::CRON,
    }
}

/// A value's type byte and body (what DUMP wraps, what a key record holds).
pub(crate) fn encode_value(out: &mut Vec<u8>, value: &Value, compress: bool) {
    out.push(type_of(value));
    encode_value_body(out, value, compress);
}

fn write_str_value(out: &mut Vec<u8>, s: &StrValue, compress: bool) {
    match s {
        StrValue::Int(n) => write_int_string(out, *n),
        _ => s.with_bytes(|b| write_string(out, b, compress)),
    }
}

fn write_list(out: &mut Vec<u8>, l: &ListValue, compress: bool) {
    let chunks: Vec<_> = l.chunks().collect();
    write_len(out, chunks.len() as u64);
    for chunk in chunks {
        write_len(out, QUICKLIST_NODE_PACKED);
        let mut lp = Listpack::new();
        for item in chunk {
            lp.push(item);
        }
        write_string(out, &lp.finish(), compress);
    }
}

fn write_hash(out: &mut Vec<u8>, h: &HashValue, compress: bool) {
    if let HashValue::Listpack(_) = h {
        let mut lp = Listpack::new();
        for (f, v) in h.iter() {
            lp.push(f);
            lp.push(v);
        }
        return write_string(out, &lp.finish(), compress);
    }
    write_len(out, h.len() as u64);
    for (f, v) in h.iter() {
        write_string(out, f, compress);
        write_string(out, v, compress);
    }
}

fn write_set(out: &mut Vec<u8>, s: &SetValue, compress: bool) {
    if let SetValue::Intset(v) = s {
        return write_string(out, &intset_bytes(v), compress);
    }
    write_len(out, s.len() as u64);
    for m in s.iter() {
        write_string(out, &m, compress);
    }
}

fn write_zset(out: &mut Vec<u8>, z: &ZSetValue, compress: bool) {
    if z.is_compact() {
        let mut lp = Listpack::new();
        for (m, score) in z.iter() {
            lp.push(m);
            lp.push(format_double(score).as_bytes());
        }
        return write_string(out, &lp.finish(), compress);
    }
    write_len(out, z.len() as u64);
    for (m, score) in z.iter_from(z.len().saturating_sub(1), true) {
        write_string(out, m, compress);
        out.extend_from_slice(&score.to_le_bytes());
    }
}

/// One key record: its expiry, eviction metadata, type, name and value
/// (rdbSaveKeyValuePair).
pub(crate) fn encode_entry(out: &mut Vec<u8>, e: &Entry, opts: &SaveOpts) {
    let at = e.expire_at();
    if at != 0 {
        out.push(opcode::EXPIRETIME_MS);
        out.extend_from_slice(&at.to_le_bytes());
    }
    match opts.meta {
        KeyMeta::None => {}
        KeyMeta::Idle { now_lru } => {
            out.push(opcode::IDLE);
            write_len(out, e.idle_secs(now_lru) as u64);
        }
        KeyMeta::Freq {
            now_lru,
            decay_minutes,
        } => {
            out.push(opcode::FREQ);
            out.push(e.lfu_decayed(now_lru, decay_minutes));
        }
    }
    out.push(type_of(&e.value));
    write_string(out, &e.key, opts.compress);
    encode_value_body(out, &e.value, opts.compress);
}

/// A value's body without its type byte.
fn encode_value_body(out: &mut Vec<u8>, value: &Value, compress: bool) {
    match value {
        Value::Str(s) => write_str_value(out, s, compress),
        Value::List(l) => write_list(out, l, compress),
        Value::Hash(h) => write_hash(out, h, compress),
        Value::Set(s) => write_set(out, s, compress),
        Value::ZSet(z) => write_zset(out, z, compress),
        Value::Stream(x) => write_stream(out, x, compress),
        Value::Cron(j) => write_cron(out, j, compress),
    }
}

/// A KEYDB.CRON job (types::CRON's layout).
fn write_cron(out: &mut Vec<u8>, j: &crate::keyspace::cron::CronJob, compress: bool) {
    write_string(out, &j.script, compress);
    out.extend_from_slice(&j.start_ms.to_le_bytes());
    out.extend_from_slice(&j.interval_ms.to_le_bytes());
    for part in [&j.keys, &j.args] {
        write_len(out, part.len() as u64);
        for s in part {
            write_string(out, s, compress);
        }
    }
    out.extend_from_slice(&j.next_ms.to_le_bytes());
    out.push(j.single as u8);
    out.extend_from_slice(&j.owner.to_le_bytes());
}

/// A stream as Redis 7.0 writes it (`rdb/stream.rs` builds the nodes and
/// the consumer groups).
fn write_stream(out: &mut Vec<u8>, x: &StreamValue, compress: bool) {
    let nodes = super::stream::node_blobs(x);
    write_len(out, nodes.len() as u64);
    for (k, lp) in nodes {
        write_string(out, &k, compress);
        write_string(out, &lp, compress);
    }
    let (last, first, del) = (x.last_id, x.first_id(), x.max_deleted);
    write_len(out, x.len() as u64);
    for n in [last.ms, last.seq, first.ms, first.seq, del.ms, del.seq] {
        write_len(out, n);
    }
    write_len(out, x.entries_added);
    super::stream::write_groups(out, x, compress);
}

/// Several key records preceded by the aux field carrying their versions.
pub fn encode_entries<'a>(
    out: &mut Vec<u8>,
    entries: impl IntoIterator<Item = &'a Entry> + Clone,
    opts: &SaveOpts,
) {
    let versions: Vec<u8> = entries
        .clone()
        .into_iter()
        .flat_map(|e| e.version.to_le_bytes())
        .collect();
    if versions.is_empty() {
        return;
    }
    write_aux(out, AUX_VERSIONS, &versions);
    for e in entries {
        encode_entry(out, e, opts);
    }
}

/// An aux field.
pub(crate) fn write_aux(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(opcode::AUX);
    write_string(out, name, false);
    write_string(out, value, false);
}

/// Appends one tombstone to the value of an `AUX_TOMBSTONES` field
/// (`rdb/mod.rs`): stamp, key length, key.
pub(crate) fn push_tombstone(value: &mut Vec<u8>, key: &[u8], stamp: u64) {
    value.extend_from_slice(&stamp.to_le_bytes());
    value.extend_from_slice(&(key.len() as u32).to_le_bytes());
    value.extend_from_slice(key);
}

/// Appends one key's merge state to the value of an `AUX_MERGE` field
/// (`rdb/mod.rs`).
pub(crate) fn push_merge_state(value: &mut Vec<u8>, key: &[u8], state: &[u8]) {
    value.extend_from_slice(&(key.len() as u32).to_le_bytes());
    value.extend_from_slice(key);
    value.extend_from_slice(&(state.len() as u32).to_le_bytes());
    value.extend_from_slice(state);
}

/// The magic and version.
pub fn write_header(out: &mut Vec<u8>) {
    out.extend_from_slice(format!("REDIS{RDB_VERSION:04}").as_bytes());
}

/// SELECTDB and RESIZEDB for a database section.
pub fn write_select_db(out: &mut Vec<u8>, db: usize, keys: u64, volatile: u64) {
    out.push(opcode::SELECTDB);
    write_len(out, db as u64);
    out.push(opcode::RESIZEDB);
    write_len(out, keys);
    write_len(out, volatile);
}

/// DUMP's payload: type and value, the RDB version (2 bytes LE) and the
/// CRC-64 of everything before it (8 bytes LE).
/// One FUNCTION library as RDB keeps it (Redis's rdbSaveFunctions):
/// RDB_OPCODE_FUNCTION2 and its code.
pub(crate) fn write_function(out: &mut Vec<u8>, code: &[u8], compress: bool) {
    out.push(opcode::FUNCTION2);
    write_string(out, code, compress);
}

/// FUNCTION DUMP's payload: the libraries, the RDB version, the CRC-64.
pub(crate) fn function_payload<'a>(
    codes: impl Iterator<Item = &'a [u8]>,
    compress: bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    for c in codes {
        write_function(&mut out, c, compress);
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = CRC64.checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

pub fn dump_payload(value: &Value, compress: bool) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&mut out, value, compress);
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = CRC64.checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A file being written: counts bytes and keeps the running CRC-64 over
/// everything written, so the trailer can be appended at the end.
pub struct FileWriter<W: Write> {
    inner: W,
    digest: crc::Digest<'static, u64, crc::Table<16>>,
    pub written: u64,
    checksum: bool,
}

impl<W: Write> FileWriter<W> {
    /// `checksum`: `rdbchecksum` (off writes a zero checksum, as Redis).
    pub fn new(inner: W, checksum: bool) -> FileWriter<W> {
        FileWriter {
            inner,
            digest: CRC64.digest(),
            written: 0,
            checksum,
        }
    }

    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.checksum {
            self.digest.update(bytes);
        }
        self.written += bytes.len() as u64;
        self.inner.write_all(bytes)
    }

    /// The inner writer, without a trailer (for files that are not RDB).
    pub fn into_inner(self) -> W {
        self.inner
    }

    /// Writes EOF and the checksum; returns the inner writer (to flush and
    /// sync it).
    pub fn finish(mut self) -> io::Result<W> {
        self.write(&[opcode::EOF])?;
        let crc = if self.checksum {
            self.digest.finalize()
        } else {
            0
        };
        self.inner.write_all(&crc.to_le_bytes())?;
        self.written += 8;
        Ok(self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_use_redis_widths() {
        let enc = |n| {
            let mut v = Vec::new();
            write_len(&mut v, n);
            v
        };
        assert_eq!(enc(10), [10]);
        assert_eq!(enc(700), [0x42, 0xBC]);
        assert_eq!(enc(17000), [0x80, 0, 0, 0x42, 0x68]);
    }

    #[test]
    fn small_integers_are_int_encoded() {
        let mut v = Vec::new();
        write_string(&mut v, b"-3", true);
        assert_eq!(v, [0xC0, 0xFD]);
        v.clear();
        write_string(&mut v, b"007", true);
        assert_eq!(v, [3, b'0', b'0', b'7']);
    }

    #[test]
    fn listpack_matches_redis_layout() {
        let mut lp = Listpack::new();
        lp.push(b"a");
        lp.push(b"1024");
        let b = lp.finish();
        // header(6) + [0x81 'a' 2] + [0xC4 0x00 2] + 0xFF
        assert_eq!(b, [13, 0, 0, 0, 2, 0, 0x81, b'a', 2, 0xC4, 0x00, 2, 0xFF]);
    }

    #[test]
    fn backlen_is_big_endian_septets() {
        let mut b = Vec::new();
        push_backlen(&mut b, 200);
        assert_eq!(b, [1, 200 - 128 + 128]);
    }

    #[test]
    fn dump_payload_has_version_and_crc() {
        let p = dump_payload(&Value::string(b"hello"), true);
        assert_eq!(&p[..7], &[0, 5, b'h', b'e', b'l', b'l', b'o']);
        assert_eq!(&p[7..9], &RDB_VERSION.to_le_bytes());
        assert_eq!(
            u64::from_le_bytes(p[9..].try_into().unwrap()),
            CRC64.checksum(&p[..9])
        );
    }
}
