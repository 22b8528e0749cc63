//! The records of the active stream, encoded and decoded.
//!
//! A record is a RESP array, so the stream is framed like any Redis
//! stream and one parser reads it; but its header is one binary bulk
//! string, not a field per bulk: in RESP the header of a SET (origin, seq,
//! database, stamp, one base) cost ~140 bytes, as much as the SET itself,
//! where this costs ~35. Integers are LEB128 varints; the origin is 8
//! little-endian bytes (it is read by every feed's filter).
//!
//! ```text
//!   write:  [ "W" origin(8) seq db stamp n (arg index, base)*n ] argv...
//!   state:  [ "S" origin(8) db stamp expire-at ] key payload
//! ```
//!
//! A base is written as `stamp - version` (small for a key written
//! recently), or 0 for a key that did not exist (version 0); a record's
//! stamp is always above its bases.

use crate::effects::{Base, EffectRef};
use crate::protocol::request::{array, bulk};

const WRITE: u8 = b'W';
const STATE: u8 = b'S';

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads the header's fields in order.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(v);
            }
        }
        Err("truncated or overlong number in a record header".into())
    }

    fn origin(&mut self) -> Result<u64, String> {
        let (o, rest) = self
            .0
            .split_first_chunk::<8>()
            .ok_or("truncated record header")?;
        self.0 = rest;
        Ok(u64::from_le_bytes(*o))
    }
}

/// Appends a write record: `origin`'s write number `seq` (0: a record that
/// is never forwarded, e.g. a snapshot's flush).
pub fn encode_write(out: &mut Vec<u8>, origin: u64, seq: u64, e: &EffectRef<'_>) {
    let mut hdr = Vec::with_capacity(40);
    hdr.push(WRITE);
    hdr.extend_from_slice(&origin.to_le_bytes());
    put_varint(&mut hdr, seq);
    put_varint(&mut hdr, e.db as u64);
    put_varint(&mut hdr, e.version);
    put_varint(&mut hdr, e.bases.len() as u64);
    for &(i, v) in e.bases {
        debug_assert!(v < e.version || v == 0);
        put_varint(&mut hdr, u64::from(i));
        put_varint(&mut hdr, if v == 0 { 0 } else { e.version - v });
    }
    array(out, 1 + e.argv.len());
    bulk(out, &hdr);
    for a in e.argv {
        bulk(out, a);
    }
}

/// Appends a key's state as `origin` holds it: `(stamp, expire at)`, and
/// its DUMP payload (empty: absent).
pub fn encode_state(
    out: &mut Vec<u8>,
    origin: u64,
    db: usize,
    key: &[u8],
    s: (u64, u64),
    payload: &[u8],
) {
    let mut hdr = Vec::with_capacity(32);
    hdr.push(STATE);
    hdr.extend_from_slice(&origin.to_le_bytes());
    put_varint(&mut hdr, db as u64);
    put_varint(&mut hdr, s.0);
    put_varint(&mut hdr, s.1);
    array(out, 3);
    bulk(out, &hdr);
    bulk(out, key);
    bulk(out, payload);
}

/// The checksum a feed seals each batch of records with
/// (`LATTICE.CK <crc>`): CRC-32C of the batch's bytes.
pub fn checksum(bytes: &[u8]) -> u32 {
    const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    CRC.checksum(bytes)
}

/// Appends the seal of `out[from..]`.
pub fn seal(out: &mut Vec<u8>, from: usize) {
    let ck = checksum(&out[from..]).to_string();
    crate::protocol::request::command(out, &[b"LATTICE.CK".as_slice(), ck.as_bytes()]);
}

/// The origin of a record whose first element is `first`, if it is a
/// write or a state (the feed's filter reads only this).
pub fn origin_of(first: &[u8]) -> Option<u64> {
    match first.first() {
        Some(&WRITE | &STATE) => Reader(&first[1..]).origin().ok(),
        _ => None,
    }
}

/// Whether `first` starts a write record, or a state record.
pub fn is_write(first: &[u8]) -> bool {
    first.len() > 9 && first[0] == WRITE
}

pub fn is_state(first: &[u8]) -> bool {
    first.len() > 9 && first[0] == STATE
}

/// A write record's header.
#[derive(Debug, PartialEq, Eq)]
pub struct WriteHeader {
    pub origin: u64,
    pub seq: u64,
    pub db: usize,
    pub stamp: u64,
    pub bases: Vec<Base>,
}

pub fn decode_write(hdr: &[u8]) -> Result<WriteHeader, String> {
    let mut r = Reader(&hdr[1..]);
    let origin = r.origin()?;
    let seq = r.varint()?;
    let db = r.varint()? as usize;
    let stamp = r.varint()?;
    let n = r.varint()? as usize;
    let mut bases = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let i = u32::try_from(r.varint()?).map_err(|_| "bad argument index in a record")?;
        let d = r.varint()?;
        let v = if d == 0 {
            0
        } else {
            stamp.checked_sub(d).ok_or("bad base in a record")?
        };
        bases.push((i, v));
    }
    Ok(WriteHeader {
        origin,
        seq,
        db,
        stamp,
        bases,
    })
}

/// A state record's header: (origin, db, stamp, expire at).
pub fn decode_state(hdr: &[u8]) -> Result<(u64, usize, u64, u64), String> {
    let mut r = Reader(&hdr[1..]);
    let origin = r.origin()?;
    let db = r.varint()? as usize;
    Ok((origin, db, r.varint()?, r.varint()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ParseLimits, Parsed, RequestParser};

    fn parse(buf: &[u8]) -> Vec<Vec<u8>> {
        let mut p = RequestParser::new();
        match p.parse(buf, &ParseLimits::default()).unwrap() {
            Parsed::Command { consumed } => assert_eq!(consumed, buf.len()),
            Parsed::Incomplete => panic!("incomplete"),
        }
        p.args(buf).to_vec()
    }

    #[test]
    fn a_write_round_trips_and_its_header_is_small() {
        let stamp = (1_790_000_000_000u64 << 22) | 5;
        let argv: [&[u8]; 3] = [b"SET", b"key:000000000001", &[b'x'; 100]];
        let bases = [(1, stamp - (1000 << 22)), (2, 0)];
        let e = EffectRef {
            db: 3,
            version: stamp,
            argv: &argv,
            bases: &bases,
        };
        let mut out = Vec::new();
        encode_write(&mut out, 0xdead_beef_0123_4567, 77 << 16, &e);
        let args = parse(&out);
        assert!(is_write(&args[0]) && !is_state(&args[0]));
        assert_eq!(origin_of(&args[0]), Some(0xdead_beef_0123_4567));
        assert!(args[0].len() < 40, "{}", args[0].len());
        let h = decode_write(&args[0]).unwrap();
        assert_eq!(
            h,
            WriteHeader {
                origin: 0xdead_beef_0123_4567,
                seq: 77 << 16,
                db: 3,
                stamp,
                bases: bases.to_vec(),
            }
        );
        assert_eq!(&args[1..], &argv.map(|a| a.to_vec())[..]);
    }

    #[test]
    fn a_state_round_trips_and_garbage_is_an_error() {
        let mut out = Vec::new();
        encode_state(&mut out, 9, 1, b"k", (123_456, 789), b"payload");
        let args = parse(&out);
        assert!(is_state(&args[0]));
        assert_eq!(origin_of(&args[0]), Some(9));
        assert_eq!(decode_state(&args[0]).unwrap(), (9, 1, 123_456, 789));
        assert_eq!(args[1], b"k");
        assert_eq!(args[2], b"payload");
        assert!(decode_state(b"S12").is_err());
        assert!(decode_write(b"W\x01\x02\x03\x04\x05\x06\x07\x08\xff\xff").is_err());
        assert_eq!(origin_of(b"PING"), None);
    }
}
