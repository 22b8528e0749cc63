//! The records of the active stream, as stored and as sent.
//!
//! **Stored** (a node's stream, [`super::Active::stream`]): frames of a
//! 4-byte little-endian length and a body. A body is a kind byte, the
//! record's header with absolute values, and a *tail* that no layer but
//! the applying one looks into:
//!
//! ```text
//!   write:  'W' origin(8) seq db stamp | bases argv
//!   unit:   'U' origin(8) seq db stamp | count first members
//!   state:  'S' origin(8) db stamp     | expire-at key payload
//!   ping:   'P'                        | words (stable.rs)
//! ```
//!
//! (integers are LEB128 varints; `bases` is a count and (argument index,
//! stamp - base version) pairs, 0 for a key that did not exist; `argv`,
//! `words`, `key` and `payload` are length-prefixed byte strings, `argv`
//! and `words` after their count.) A feed reads the origin with no parsing (its filter) and the
//! frames with no RESP parser.
//!
//! A *unit* is the writes of one MULTI/EXEC (a transaction, or a command
//! Redis propagates as several records), which a peer applies all or none
//! (link/apply.rs): one record, so one seq, and no other record between its
//! writes. Its header's db is the first write's and its stamp the newest
//! write's; `first` is stamp - the first write's stamp, and each member is
//! `db zigzag(stamp - previous member's stamp) len tail`, `tail` a write's
//! (`bases argv`, its bases against the member's own stamp).
//!
//! **On the wire** a feed sends batches, each one frame:
//!
//! ```text
//!   'B' len(u32 LE) next(u64 LE) crc(u32 LE) records[len]
//! ```
//!
//! `next` is the stream offset the peer continues from after the batch
//! (it is not the count of bytes received: a feed skips records and
//! re-codes the rest), and `crc` the CRC-32C of len, next and the records:
//! a link applies a batch only once its checksum holds, so a stream
//! garbled on the way is dropped, never applied. Inside, each record is
//! coded against the previous one on the same connection ([`Coder`]): a
//! flags byte (kind; whether origin, seq and db are given, else the
//! previous origin, its next seq and the previous db; writes and units
//! share the seq count), the given fields,
//! the stamp as a signed difference from the previous record's, then the
//! tail's length and the tail as stored. The header of a SET thus costs
//! ~4 bytes where the stored one costs ~26 and a RESP one ~140: a write
//! crosses a link in about the bytes its client sent (issue 12's wire
//! target, DECISIONS 49).

use std::ops::Range;

use crate::effects::{Base, EffectRef, Fact};
use crate::keyspace::merge::fact;

pub(crate) const WRITE: u8 = b'W';
pub(crate) const UNIT: u8 = b'U';
pub(crate) const STATE: u8 = b'S';
pub(crate) const PING: u8 = b'P';
/// On the wire only: the end of a snapshot's key states.
pub(crate) const SNAP_END: u8 = b'E';

const BATCH: u8 = b'B';
/// A batch's header: 'B', len, next, crc.
pub(crate) const BATCH_HEADER: usize = 1 + 4 + 8 + 4;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Reads a record's fields in order.
pub(crate) struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    /// A varint: one byte at once, up to ten read from one 8-byte word and
    /// at most two bytes more (a stamp or a sequence number takes nine),
    /// else byte by byte ([`Self::varint_slow`], which also tells the
    /// errors).
    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, String> {
        match self.0.first() {
            Some(&b) if b < 0x80 => {
                self.0 = &self.0[1..];
                Ok(u64::from(b))
            }
            _ => match self.varint_word() {
                Some((v, n)) => {
                    self.0 = &self.0[n..];
                    Ok(v)
                }
                None => self.varint_slow(),
            },
        }
    }

    /// A varint and its length read word-wise, None where the bytes left
    /// are fewer than a word or the number is longer than ten bytes.
    fn varint_word(&self) -> Option<(u64, usize)> {
        let word = u64::from_le_bytes(self.0.get(..8)?.try_into().ok()?);
        let ends = !word & 0x8080_8080_8080_8080;
        if ends != 0 {
            let n = ends.trailing_zeros() as usize / 8 + 1;
            let kept = if n == 8 { u64::MAX } else { (1 << (8 * n)) - 1 };
            return Some((gather7(word & kept), n));
        }
        let low = gather7(word);
        match *self.0.get(8)? {
            b8 if b8 < 0x80 => Some((low | u64::from(b8) << 56, 9)),
            b8 => match *self.0.get(9)? {
                b9 if b9 < 0x80 => {
                    let high = u64::from(b8 & 0x7f) << 56 | u64::from(b9) << 63;
                    Some((low | high, 10))
                }
                _ => None,
            },
        }
    }

    fn varint_slow(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(v);
            }
        }
        Err("truncated or overlong number in an active record".into())
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.0.len() {
            return Err("truncated active record".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    #[inline]
    fn u64_le(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    #[inline]
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.varint()?;
        self.take(usize::try_from(n).map_err(|_| "bad length in an active record")?)
    }

    #[inline]
    fn db(&mut self) -> Result<usize, String> {
        usize::try_from(self.varint()?).map_err(|_| "bad database in an active record".into())
    }
}

/// A record, decoded but for its tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rec<'a> {
    pub kind: u8,
    pub origin: u64,
    /// The origin's write number (writes and units only; 0: never
    /// forwarded).
    pub seq: u64,
    pub db: usize,
    pub stamp: u64,
    pub tail: &'a [u8],
}

impl Rec<'_> {
    /// A record of `kind` with no header fields yet and an empty tail.
    pub(crate) fn bare(kind: u8) -> Self {
        Rec {
            kind,
            origin: 0,
            seq: 0,
            db: 0,
            stamp: 0,
            tail: &[],
        }
    }
}

// ---- Stored records ----------------------------------------------------

fn frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    body(out);
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Appends a write record: `origin`'s write number `seq` (0: a record that
/// is never forwarded, e.g. a snapshot's flush).
pub(crate) fn encode_write(out: &mut Vec<u8>, origin: u64, seq: u64, e: &EffectRef<'_>) {
    with_room(out, write_bound(e), |p| put_write(p, origin, seq, e));
}

/// [`encode_write`] at the start of `room`, which is grown to the record's
/// bound where it is shorter and otherwise left as it is (a writer thread
/// keeps one: no zero-filling and truncating per record, issue 24); returns
/// the record's length, `room[..len]`.
pub(crate) fn encode_write_in(
    room: &mut Vec<u8>,
    origin: u64,
    seq: u64,
    e: &EffectRef<'_>,
) -> usize {
    let bound = write_bound(e);
    if room.len() < bound {
        room.resize(bound, 0);
    }
    let mut p = Put { buf: room, at: 0 };
    put_write(&mut p, origin, seq, e);
    p.at
}

/// The most bytes a write record of `e` takes.
fn write_bound(e: &EffectRef<'_>) -> usize {
    4 + 1 + 8 + 3 * VARINT_MAX + tail_bound(e)
}

fn put_write(p: &mut Put<'_>, origin: u64, seq: u64, e: &EffectRef<'_>) {
    p.raw(&[0; 4]);
    p.byte(WRITE);
    p.raw(&origin.to_le_bytes());
    p.varint(seq);
    p.varint(e.db as u64);
    p.varint(e.version);
    write_tail(p, e);
    let len = (p.at - 4) as u32;
    p.buf[..4].copy_from_slice(&len.to_le_bytes());
}

/// A write's tail: its bases (against its stamp) and its argv.
fn put_write_tail(out: &mut Vec<u8>, e: &EffectRef<'_>) {
    with_room(out, tail_bound(e), |p| write_tail(p, e));
}

/// The most bytes [`write_tail`] writes for `e`.
fn tail_bound(e: &EffectRef<'_>) -> usize {
    let fields = 3 + 2 * e.bases.len() + 2 * e.facts.len() + e.argv.len();
    let bytes: usize = e.argv.iter().map(|a| a.len()).sum();
    fields * VARINT_MAX + bytes
}

fn write_tail(p: &mut Put<'_>, e: &EffectRef<'_>) {
    p.varint(e.bases.len() as u64);
    for &(i, v) in e.bases {
        debug_assert!(v < e.version || v == 0);
        p.varint(u64::from(i));
        p.varint(if v == 0 { 0 } else { e.version - v });
    }
    p.varint(e.argv.len() as u64);
    for a in e.argv {
        p.bytes(a);
    }
    // A merging write's fact (keyspace/merge/fact.rs), only where it has
    // one: `count (kind|index, stamp + 1 - value, or 0)*` (a fact may name
    // the write's own stamp: a member named twice drops its first dot); a
    // number (`fact::is_raw`) as it is.
    if !e.facts.is_empty() {
        p.varint(e.facts.len() as u64);
        for &(i, v) in e.facts {
            p.varint(u64::from(i));
            if fact::is_raw(i) {
                p.varint(v);
                continue;
            }
            debug_assert!(v <= e.version);
            p.varint(if v == 0 { 0 } else { e.version + 1 - v });
        }
    }
}

/// The most bytes a varint takes.
const VARINT_MAX: usize = 10;

/// Runs `f` on room for `bound` bytes at the end of `out`, then keeps what
/// it wrote: one capacity check a record instead of one a byte pushed (the
/// pushes were ~400 instructions of an INCR's record, issue 24).
fn with_room(out: &mut Vec<u8>, bound: usize, f: impl FnOnce(&mut Put<'_>)) {
    let start = out.len();
    out.resize(start + bound, 0);
    let mut p = Put {
        buf: &mut out[start..],
        at: 0,
    };
    f(&mut p);
    let end = start + p.at;
    out.truncate(end);
}

/// The 56 low bits of `x` as eight 7-bit groups, one in each byte's low
/// bits (lowest group first): 28-bit halves to 32-bit lanes, 14-bit
/// quarters to 16-bit lanes, 7-bit groups to bytes.
fn spread7(x: u64) -> u64 {
    let x = (x & 0x0FFF_FFFF) | ((x & 0x00FF_FFFF_F000_0000) << 4);
    let x = (x & 0x0000_3FFF_0000_3FFF) | ((x & 0x0FFF_C000_0FFF_C000) << 2);
    (x & 0x007F_007F_007F_007F) | ((x & 0x3F80_3F80_3F80_3F80) << 1)
}

/// The inverse of [`spread7`]: the low 7 bits of each byte of `x`,
/// packed (the first byte's lowest).
fn gather7(x: u64) -> u64 {
    let x = x & 0x7F7F_7F7F_7F7F_7F7F;
    let x = (x & 0x007F_007F_007F_007F) | ((x & 0x7F00_7F00_7F00_7F00) >> 1);
    let x = (x & 0x0000_3FFF_0000_3FFF) | ((x & 0x3FFF_0000_3FFF_0000) >> 2);
    (x & 0x0FFF_FFFF) | ((x & 0x0FFF_FFFF_0000_0000) >> 4)
}

/// A cursor over room sized for the worst case (see [`with_room`]): each
/// write checks only its own bounds, which the sizing makes hold.
struct Put<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Put<'_> {
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.buf[self.at] = b;
        self.at += 1;
    }

    fn raw(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }

    /// As [`put_varint`]: a small number in one store, inlined.
    #[inline(always)]
    fn varint(&mut self, v: u64) {
        if v < 0x80 {
            self.byte(v as u8);
        } else {
            self.varint_long(v);
        }
    }

    /// A number of two bytes or more (a stamp takes nine): all ten bytes
    /// of the window are written with no loop (its 7-bit groups spread
    /// to bytes by three shifts and masks), then the length counted from
    /// the leading zeros is kept and its last byte ends the number.
    fn varint_long(&mut self, v: u64) {
        let w: &mut [u8; VARINT_MAX] = (&mut self.buf[self.at..self.at + VARINT_MAX])
            .try_into()
            .expect("a window of VARINT_MAX bytes");
        let low = spread7(v & ((1 << 56) - 1)) | 0x8080_8080_8080_8080;
        w[..8].copy_from_slice(&low.to_le_bytes());
        w[8] = ((v >> 56) as u8 & 0x7f) | 0x80;
        w[9] = (v >> 63) as u8;
        let n = (70 - v.leading_zeros() as usize) / 7;
        w[n - 1] &= 0x7f;
        self.at += n;
    }

    fn bytes(&mut self, b: &[u8]) {
        self.varint(b.len() as u64);
        self.raw(b);
    }
}

/// The writes of a unit, gathered as they are made (the origin's writer
/// thread buffers them from MULTI to EXEC), then stored as one record.
#[derive(Default)]
pub(crate) struct UnitBuilder {
    members: Vec<u8>,
    count: u64,
    db: usize,
    first: u64,
    last: u64,
    newest: u64,
    tail: Vec<u8>,
}

impl UnitBuilder {
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Forgets the writes gathered (a new unit starts).
    pub(crate) fn clear(&mut self) {
        self.members.clear();
        self.count = 0;
    }

    /// Adds a write to the unit.
    pub(crate) fn push(&mut self, e: &EffectRef<'_>) {
        if self.count == 0 {
            (self.db, self.first, self.last, self.newest) = (e.db, e.version, e.version, 0);
        }
        self.count += 1;
        self.newest = self.newest.max(e.version);
        put_varint(&mut self.members, e.db as u64);
        put_varint(
            &mut self.members,
            zigzag(e.version.wrapping_sub(self.last) as i64),
        );
        self.last = e.version;
        self.tail.clear();
        put_write_tail(&mut self.tail, e);
        put_bytes(&mut self.members, &self.tail);
    }

    /// Appends the unit as one stored record: `origin`'s write number `seq`.
    pub(crate) fn finish(&self, out: &mut Vec<u8>, origin: u64, seq: u64) {
        frame(out, |out| {
            out.push(UNIT);
            out.extend_from_slice(&origin.to_le_bytes());
            put_varint(out, seq);
            put_varint(out, self.db as u64);
            put_varint(out, self.newest);
            put_varint(out, self.count);
            put_varint(out, self.newest - self.first);
            out.extend_from_slice(&self.members);
        });
    }
}

/// Appends a key's state as `origin` holds it: `(stamp, expire at)`, its
/// DUMP payload (empty: absent) and, for a key that merges, its merge
/// state (`keyspace/merge.rs`; empty: none, the field is left out).
pub(crate) fn encode_state(
    out: &mut Vec<u8>,
    origin: u64,
    db: usize,
    key: &[u8],
    s: (u64, u64),
    (payload, merge): (&[u8], &[u8]),
) {
    frame(out, |out| {
        out.push(STATE);
        out.extend_from_slice(&origin.to_le_bytes());
        put_varint(out, db as u64);
        put_varint(out, s.0);
        put_varint(out, s.1);
        put_bytes(out, key);
        put_bytes(out, payload);
        if !merge.is_empty() {
            put_bytes(out, merge);
        }
    });
}

/// Appends a ping: `words` are what it tells the peers (stable.rs); it
/// also keeps an idle link's timeout from firing.
pub(crate) fn encode_ping(out: &mut Vec<u8>, words: &[&[u8]]) {
    frame(out, |out| {
        out.push(PING);
        put_varint(out, words.len() as u64);
        for w in words {
            put_bytes(out, w);
        }
    });
}

/// Appends `r` as stored (a forwarded record enters our stream so).
pub(crate) fn encode_stored(out: &mut Vec<u8>, r: &Rec<'_>) {
    frame(out, |out| {
        out.push(r.kind);
        if matches!(r.kind, WRITE | UNIT | STATE) {
            out.extend_from_slice(&r.origin.to_le_bytes());
            if r.kind != STATE {
                put_varint(out, r.seq);
            }
            put_varint(out, r.db as u64);
            put_varint(out, r.stamp);
        }
        out.extend_from_slice(r.tail);
    });
}

/// The first whole stored frame of `buf`: its body and its length with
/// the length field.
pub(crate) fn next_frame(buf: &[u8]) -> Option<(&[u8], usize)> {
    let len = u32::from_le_bytes(buf.get(..4)?.try_into().unwrap()) as usize;
    let body = buf.get(4..4 + len)?;
    Some((body, 4 + len))
}

/// The origin of a stored write, unit or state (the feed's filter reads
/// only this).
pub(crate) fn origin_of(body: &[u8]) -> Option<u64> {
    match body.first() {
        Some(&WRITE | &UNIT | &STATE) => Reader(&body[1..]).u64_le().ok(),
        _ => None,
    }
}

#[inline]
pub(crate) fn decode_stored(body: &[u8]) -> Result<Rec<'_>, String> {
    let (&kind, rest) = body.split_first().ok_or("empty active record")?;
    let mut r = Reader(rest);
    let mut rec = Rec::bare(kind);
    match kind {
        WRITE | UNIT | STATE => {
            rec.origin = r.u64_le()?;
            if kind != STATE {
                rec.seq = r.varint()?;
            }
            rec.db = r.db()?;
            rec.stamp = r.varint()?;
        }
        PING => {}
        _ => return Err(format!("unknown active record kind {kind}")),
    }
    rec.tail = r.0;
    Ok(rec)
}

// ---- Tails ---------------------------------------------------------------

/// A write's tail: its bases (into `bases`, as versions), its fact (into
/// `facts`, empty where it has none) and its argument spans within the
/// returned slice (into `spans`).
pub(crate) fn write_parts<'a>(
    stamp: u64,
    tail: &'a [u8],
    (bases, facts): (&mut Vec<Base>, &mut Vec<Fact>),
    spans: &mut Vec<Range<usize>>,
) -> Result<&'a [u8], String> {
    let mut r = Reader(tail);
    bases.clear();
    facts.clear();
    spans.clear();
    // (index, stamp + offset - value): bases are below their write's
    // stamp (offset 0), a fact's stamps at most equal to it (offset 1).
    let versioned = |r: &mut Reader<'_>, offset: u64| -> Result<(u32, u64), String> {
        let i = u32::try_from(r.varint()?).map_err(|_| "bad argument index in a record")?;
        let d = r.varint()?;
        let v = if d == 0 {
            0
        } else {
            stamp
                .saturating_add(offset)
                .checked_sub(d)
                .ok_or("bad base in a record")?
        };
        Ok((i, v))
    };
    for _ in 0..r.varint()? {
        bases.push(versioned(&mut r, 0)?);
    }
    let argv = r.0;
    for _ in 0..r.varint()? {
        let a = r.bytes()?;
        let at = a.as_ptr() as usize - argv.as_ptr() as usize;
        spans.push(at..at + a.len());
    }
    if spans.is_empty() {
        return Err("a write without arguments in an active record".into());
    }
    let argv = &argv[..argv.len() - r.0.len()];
    if !r.0.is_empty() {
        for _ in 0..r.varint()? {
            let (i, d) = (r.varint()?, r.varint()?);
            let i = u32::try_from(i).map_err(|_| "bad argument index in a record")?;
            let v = match d {
                _ if fact::is_raw(i) => d,
                0 => 0,
                _ => (stamp.saturating_add(1).checked_sub(d)).ok_or("bad fact in a record")?,
            };
            facts.push((i, v));
        }
        if !r.0.is_empty() {
            return Err("bad arguments in an active record".into());
        }
    }
    Ok(argv)
}

/// An argument list (a write's, a ping's): a count, then length-prefixed
/// strings; their spans within the returned slice go into `spans`.
pub(crate) fn argv_parts<'a>(
    tail: &'a [u8],
    spans: &mut Vec<Range<usize>>,
) -> Result<&'a [u8], String> {
    spans.clear();
    if tail.is_empty() {
        return Ok(tail); // a bare ping
    }
    let mut r = Reader(tail);
    let argc = r.varint()?;
    let argv = r.0;
    for _ in 0..argc {
        let a = r.bytes()?;
        let at = a.as_ptr() as usize - argv.as_ptr() as usize;
        spans.push(at..at + a.len());
    }
    if !r.0.is_empty() {
        return Err("bad arguments in an active record".into());
    }
    Ok(argv)
}

/// A state's tail: (expire at, key, payload).
pub(crate) fn state_parts(tail: &[u8]) -> Result<(u64, &[u8], &[u8]), String> {
    let mut r = Reader(tail);
    let at = r.varint()?;
    let key = r.bytes()?;
    let payload = r.bytes()?;
    Ok((at, key, payload))
}

/// A state's merge state (empty: the key does not merge).
pub(crate) fn state_merge(tail: &[u8]) -> Result<&[u8], String> {
    let mut r = Reader(tail);
    r.varint()?;
    r.bytes()?;
    r.bytes()?;
    if r.0.is_empty() {
        return Ok(b"");
    }
    r.bytes()
}

/// One write of a unit's tail: its database, stamp and write tail (for
/// [`write_parts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member<'a> {
    pub db: usize,
    pub stamp: u64,
    pub tail: &'a [u8],
}

/// A unit's tail: its writes, in order (into `members`); `stamp` is the
/// unit's.
pub(crate) fn unit_parts<'a>(
    stamp: u64,
    tail: &'a [u8],
    members: &mut Vec<Member<'a>>,
) -> Result<(), String> {
    let mut r = Reader(tail);
    members.clear();
    let count = r.varint()?;
    let mut at = stamp
        .checked_sub(r.varint()?)
        .ok_or("bad stamp in a unit")?;
    for _ in 0..count {
        let db = r.db()?;
        // The first member's difference is 0: `at` is its stamp already.
        at = at.wrapping_add(unzigzag(r.varint()?) as u64);
        if at > stamp {
            return Err("a unit's write is newer than the unit".into());
        }
        members.push(Member {
            db,
            stamp: at,
            tail: r.bytes()?,
        });
    }
    if members.is_empty() || !r.0.is_empty() {
        return Err("bad writes in an active unit".into());
    }
    Ok(())
}

// ---- The wire ------------------------------------------------------------

const KIND_BITS: u8 = 0x07;
const HAS_ORIGIN: u8 = 0x08;
const HAS_SEQ: u8 = 0x10;
const HAS_DB: u8 = 0x20;

fn kind_code(kind: u8) -> u8 {
    match kind {
        WRITE => 1,
        STATE => 2,
        PING => 3,
        UNIT => 5,
        _ => 4, // SNAP_END
    }
}

fn code_kind(code: u8) -> Result<u8, String> {
    match code {
        1 => Ok(WRITE),
        2 => Ok(STATE),
        3 => Ok(PING),
        4 => Ok(SNAP_END),
        5 => Ok(UNIT),
        _ => Err(format!("unknown active record code {code}")),
    }
}

/// One side of a connection's record coding: what the previous record
/// said, which the next one's header is written against. Both ends start
/// from the feeding node's id and zeros at each connection.
pub(crate) struct Coder {
    origin: u64,
    seq: u64,
    db: usize,
    stamp: u64,
}

impl Coder {
    pub(crate) fn new(feeding_node: u64) -> Self {
        Coder {
            origin: feeding_node,
            seq: 0,
            db: 0,
            stamp: 0,
        }
    }

    /// Appends `r` coded against the previous record.
    pub(crate) fn put(&mut self, out: &mut Vec<u8>, r: &Rec<'_>) {
        let flags_at = out.len();
        let mut flags = kind_code(r.kind);
        out.push(0);
        if matches!(r.kind, WRITE | UNIT | STATE) {
            if r.origin != self.origin {
                flags |= HAS_ORIGIN;
                out.extend_from_slice(&r.origin.to_le_bytes());
                self.origin = r.origin;
            }
            if r.kind != STATE {
                if flags & HAS_ORIGIN != 0 || r.seq != self.seq.wrapping_add(1) {
                    flags |= HAS_SEQ;
                    put_varint(out, r.seq);
                }
                self.seq = r.seq;
            }
            if r.db != self.db {
                flags |= HAS_DB;
                put_varint(out, r.db as u64);
                self.db = r.db;
            }
            put_varint(out, zigzag(r.stamp.wrapping_sub(self.stamp) as i64));
            self.stamp = r.stamp;
        }
        out[flags_at] = flags;
        put_bytes(out, r.tail);
    }

    /// Reads the next record of `r`.
    pub(crate) fn get<'a>(&mut self, r: &mut Reader<'a>) -> Result<Rec<'a>, String> {
        let (&flags, rest) = r.0.split_first().ok_or("truncated active record")?;
        r.0 = rest;
        let kind = code_kind(flags & KIND_BITS)?;
        let mut rec = Rec::bare(kind);
        if matches!(kind, WRITE | UNIT | STATE) {
            if flags & HAS_ORIGIN != 0 {
                self.origin = r.u64_le()?;
            }
            if kind != STATE {
                self.seq = match flags & HAS_SEQ {
                    0 => self.seq.wrapping_add(1),
                    _ => r.varint()?,
                };
                rec.seq = self.seq;
            }
            if flags & HAS_DB != 0 {
                self.db = r.db()?;
            }
            self.stamp = self.stamp.wrapping_add(unzigzag(r.varint()?) as u64);
            (rec.origin, rec.db, rec.stamp) = (self.origin, self.db, self.stamp);
        }
        rec.tail = r.bytes()?;
        Ok(rec)
    }
}

/// Starts a batch in `out`; returns where it starts (for [`end_batch`]).
pub(crate) fn begin_batch(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.push(BATCH);
    out.extend_from_slice(&[0; BATCH_HEADER - 1]);
    start
}

/// Ends the batch begun at `start`: the peer continues from `next` after it.
pub(crate) fn end_batch(out: &mut [u8], start: usize, next: u64) {
    let len = (out.len() - start - BATCH_HEADER) as u32;
    out[start + 1..start + 5].copy_from_slice(&len.to_le_bytes());
    out[start + 5..start + 13].copy_from_slice(&next.to_le_bytes());
    let crc = batch_crc(&out[start + 1..start + 13], &out[start + BATCH_HEADER..]);
    out[start + 13..start + 17].copy_from_slice(&crc.to_le_bytes());
}

fn batch_crc(len_next: &[u8], records: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(len_next), records)
}

/// A whole batch at the start of `buf`, checked: Some((next, the records'
/// range, the batch's length)); None until it has all arrived; an error
/// when the bytes are damaged.
pub(crate) fn next_batch(buf: &[u8]) -> Result<Option<(u64, Range<usize>, usize)>, String> {
    if buf.first().is_some_and(|&b| b != BATCH) {
        return Err("damaged stream from the peer (not a batch)".into());
    }
    if buf.len() < BATCH_HEADER {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[1..5].try_into().unwrap()) as usize;
    let next = u64::from_le_bytes(buf[5..13].try_into().unwrap());
    let crc = u32::from_le_bytes(buf[13..17].try_into().unwrap());
    let Some(records) = buf.get(BATCH_HEADER..BATCH_HEADER + len) else {
        return Ok(None);
    };
    if batch_crc(&buf[1..13], records) != crc {
        return Err("damaged stream from the peer (checksum mismatch)".into());
    }
    Ok(Some((
        next,
        BATCH_HEADER..BATCH_HEADER + len,
        BATCH_HEADER + len,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAMP: u64 = (1_790_000_000_000u64 << 22) | 5;

    #[test]
    fn a_varint_written_in_room_matches_one_pushed() {
        let mut values = vec![0, 1, 0x7f, 0x80, 0x3fff, 0x4000, STAMP, u64::MAX];
        values.extend([
            0x0123_4567_89ab_cdef,
            0xfedc_ba98_7654_3210,
            0x8000_0000_0000_0001,
        ]);
        values.extend((0..64).map(|b| 1u64 << b));
        values.extend((1..64).map(|b| (1u64 << b) - 1));
        for v in values {
            let mut pushed = vec![9];
            put_varint(&mut pushed, v);
            let mut room = vec![9];
            with_room(&mut room, VARINT_MAX, |p| p.varint(v));
            assert_eq!(room, pushed, "{v:#x}");
            assert_eq!(Reader(&room[1..]).varint(), Ok(v));
        }
    }

    #[test]
    fn a_varint_read_word_wise_reads_as_byte_by_byte() {
        let mut values = vec![0, 1, 0x7f, 0x80, 0x3fff, 0x4000, STAMP, u64::MAX];
        values.extend((0..64).map(|b| 1u64 << b));
        values.extend((1..64).map(|b| (1u64 << b) - 1));
        for v in values {
            let mut buf = vec![];
            put_varint(&mut buf, v);
            // Followed by nothing, by a little, by a word's worth.
            for pad in [0, 1, 3, 12] {
                let mut b = buf.clone();
                b.extend(std::iter::repeat_n(0xAB, pad));
                let mut fast = Reader(&b);
                assert_eq!(fast.varint(), Ok(v), "{v:#x} + {pad}");
                assert_eq!(fast.0.len(), pad);
                // Cut short: an error either way.
                for cut in 0..buf.len() {
                    let mut r = Reader(&buf[..cut]);
                    assert!(r.varint().is_err(), "{v:#x} cut at {cut}");
                }
            }
        }
        // Overlong (an 11th byte), on either path.
        let long = [0xFFu8; 12];
        assert!(Reader(&long).varint().is_err());
        assert!(Reader(&long[..10]).varint().is_err());
        // A tenth byte's high bits fall off, as they always did.
        let ten = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x03];
        assert_eq!(Reader(&ten).varint(), Reader(&ten).varint_slow());
    }

    fn set_effect<'a>(argv: &'a [&'a [u8]], bases: &'a [Base]) -> EffectRef<'a> {
        EffectRef {
            db: 3,
            version: STAMP,
            argv,
            bases,
            facts: &[],
        }
    }

    /// A record encoded in a writer's room (longer than it, holding an
    /// older record's bytes, or shorter) is the one appended.
    #[test]
    fn a_write_encoded_in_room_matches_one_appended() {
        let argv: [&[u8]; 3] = [b"SET", b"key:000000000001", &[b'x'; 100]];
        let bases = [(1, STAMP - (1000 << 22)), (2, 0)];
        let facts = [(crate::keyspace::merge::fact::ADD, STAMP - 3)];
        let e = EffectRef {
            facts: &facts,
            ..set_effect(&argv, &bases)
        };
        let mut appended = vec![7];
        encode_write(&mut appended, 42, 5 << 16, &e);
        for mut room in [vec![], vec![0xAB; 10], vec![0xCD; 4096]] {
            let before = room.len();
            let n = encode_write_in(&mut room, 42, 5 << 16, &e);
            assert_eq!(&room[..n], &appended[1..]);
            assert_eq!(room.len(), before.max(write_bound(&e)));
        }
    }

    /// A merging write's fact travels after its argv; a write without one
    /// is coded as it was before facts.
    #[test]
    fn a_fact_round_trips_after_the_argv() {
        use crate::keyspace::merge::fact::{ADD, DROP, PREV, SHIFT};
        let argv: [&[u8]; 3] = [b"SADD", b"s", b"m"];
        let bases = [(1 | crate::effects::MERGED_BASE, STAMP - 5)];
        let facts = [
            (PREV | (1 << SHIFT), STAMP - 7),
            (DROP | (2 << SHIFT), STAMP - 9),
            (DROP | (2 << SHIFT), STAMP),
            (ADD | (2 << SHIFT), 0),
        ];
        let mut stored = Vec::new();
        let e = EffectRef {
            facts: &facts,
            ..set_effect(&argv, &bases)
        };
        encode_write(&mut stored, 1, 2 << 16, &e);
        let mut plain = Vec::new();
        encode_write(&mut plain, 1, 2 << 16, &set_effect(&argv, &bases));
        assert_eq!(stored.len(), plain.len() + 1 + 4 * 2);
        let (body, _) = next_frame(&stored).unwrap();
        let rec = decode_stored(body).unwrap();
        let (mut b, mut f, mut spans) = (vec![], vec![], vec![]);
        let args = write_parts(rec.stamp, rec.tail, (&mut b, &mut f), &mut spans).unwrap();
        assert_eq!((&b[..], &f[..]), (&bases[..], &facts[..]));
        let got: Vec<&[u8]> = spans.iter().map(|s| &args[s.clone()]).collect();
        assert_eq!(got, argv);
    }

    /// A fact's numbers (a field's print, a float's words) are any u64,
    /// not stamps below the write's: they round-trip as they are.
    #[test]
    fn a_facts_numbers_round_trip_as_they_are() {
        use crate::keyspace::merge::fact::{COUNTED, PREV, SHIFT, WORD};
        let argv: [&[u8]; 4] = [b"HSET", b"h", b"f", b"1.5"];
        let bases = [(1 | crate::effects::MERGED_BASE, STAMP - 5)];
        let facts = [
            (PREV | (1 << SHIFT), STAMP - 7),
            (COUNTED | (2 << SHIFT), u64::MAX - 1),
            (WORD, STAMP + 1000),
            (WORD | (1 << SHIFT), 0),
        ];
        let mut stored = Vec::new();
        let e = EffectRef {
            facts: &facts,
            ..set_effect(&argv, &bases)
        };
        encode_write(&mut stored, 1, 2 << 16, &e);
        let (body, _) = next_frame(&stored).unwrap();
        let rec = decode_stored(body).unwrap();
        let (mut b, mut f, mut spans) = (vec![], vec![], vec![]);
        write_parts(rec.stamp, rec.tail, (&mut b, &mut f), &mut spans).unwrap();
        assert_eq!(f, facts);
    }

    #[test]
    fn a_write_round_trips_stored_and_on_the_wire() {
        let argv: [&[u8]; 3] = [b"SET", b"key:000000000001", &[b'x'; 100]];
        let bases = [(1, STAMP - (1000 << 22)), (2, 0)];
        let mut stored = Vec::new();
        encode_write(
            &mut stored,
            0xdead_beef_0123_4567,
            77 << 16,
            &set_effect(&argv, &bases),
        );
        let (body, n) = next_frame(&stored).unwrap();
        assert_eq!(n, stored.len());
        assert_eq!(origin_of(body), Some(0xdead_beef_0123_4567));
        let rec = decode_stored(body).unwrap();
        assert_eq!(
            (rec.kind, rec.seq, rec.db, rec.stamp),
            (WRITE, 77 << 16, 3, STAMP)
        );
        let (mut b, mut spans) = (vec![], vec![]);
        let args = write_parts(rec.stamp, rec.tail, (&mut b, &mut vec![]), &mut spans).unwrap();
        assert_eq!(b, bases);
        let got: Vec<&[u8]> = spans.iter().map(|s| &args[s.clone()]).collect();
        assert_eq!(got, argv);

        // Two writes in a batch: the second's header is a few bytes.
        let mut wire = Vec::new();
        let start = begin_batch(&mut wire);
        let mut tx = Coder::new(0xdead_beef_0123_4567);
        tx.put(&mut wire, &rec);
        let first = wire.len();
        let second = Rec {
            seq: rec.seq + 1,
            stamp: rec.stamp + (1 << 10),
            ..rec
        };
        tx.put(&mut wire, &second);
        assert!(
            wire.len() - first < rec.tail.len() + 6,
            "{}",
            wire.len() - first
        );
        end_batch(&mut wire, start, 12345);
        let (next, range, len) = next_batch(&wire).unwrap().unwrap();
        assert_eq!((next, len), (12345, wire.len()));
        let mut rx = Coder::new(0xdead_beef_0123_4567);
        let mut r = Reader(&wire[range]);
        assert_eq!(rx.get(&mut r).unwrap(), rec);
        assert_eq!(rx.get(&mut r).unwrap(), second);
        assert!(r.0.is_empty());

        // Forwarded, it is stored as it was.
        let mut again = Vec::new();
        encode_stored(&mut again, &second);
        assert_eq!(
            decode_stored(next_frame(&again).unwrap().0).unwrap(),
            second
        );
    }

    #[test]
    fn a_unit_round_trips_stored_forwarded_and_on_the_wire() {
        let set1: [&[u8]; 3] = [b"SET", b"k1", b"v"];
        let set2: [&[u8]; 3] = [b"SET", b"k2", b"v"];
        let append: [&[u8]; 3] = [b"APPEND", b"k1", b"w"];
        let b1 = [(1, STAMP - (5 << 22))];
        let b2 = [(1, 0)];
        let b3 = [(1, STAMP)];
        // Stamps as a transaction's commands take them, across databases
        // (a SELECT inside MULTI); the newest is the unit's.
        let writes = [
            EffectRef {
                db: 0,
                version: STAMP,
                argv: &set1,
                bases: &b1,
                facts: &[],
            },
            EffectRef {
                db: 2,
                version: STAMP + (3 << 10),
                argv: &set2,
                bases: &b2,
                facts: &[],
            },
            EffectRef {
                db: 0,
                version: STAMP + (1 << 10),
                argv: &append,
                bases: &b3,
                facts: &[],
            },
        ];
        let mut unit = UnitBuilder::default();
        unit.push(&set_effect(&set1, &b1)); // a unit left before: cleared
        unit.clear();
        for w in &writes {
            unit.push(w);
        }
        let mut stored = Vec::new();
        unit.finish(&mut stored, 42, 9 << 16);
        let (body, n) = next_frame(&stored).unwrap();
        assert_eq!((n, origin_of(body)), (stored.len(), Some(42)));
        let rec = decode_stored(body).unwrap();
        assert_eq!(
            (rec.kind, rec.seq, rec.db, rec.stamp),
            (UNIT, 9 << 16, 0, STAMP + (3 << 10))
        );
        let check = |rec: &Rec<'_>| {
            let mut members = vec![];
            unit_parts(rec.stamp, rec.tail, &mut members).unwrap();
            assert_eq!(members.len(), writes.len());
            for (m, w) in members.iter().zip(&writes) {
                assert_eq!((m.db, m.stamp), (w.db, w.version));
                let (mut bases, mut spans) = (vec![], vec![]);
                let args =
                    write_parts(m.stamp, m.tail, (&mut bases, &mut vec![]), &mut spans).unwrap();
                assert_eq!(bases, w.bases);
                let got: Vec<&[u8]> = spans.iter().map(|s| &args[s.clone()]).collect();
                assert_eq!(got, w.argv);
            }
        };
        check(&rec);

        // On the wire between two writes, then forwarded: the same record.
        let set = [(1, 0)];
        let mut before = Vec::new();
        encode_write(&mut before, 42, (9 << 16) - 1, &set_effect(&set1, &set));
        let first = decode_stored(next_frame(&before).unwrap().0).unwrap();
        let after = Rec {
            seq: rec.seq + 1,
            ..first
        };
        let mut wire = Vec::new();
        let start = begin_batch(&mut wire);
        let mut tx = Coder::new(42);
        for r in [&first, &rec, &after] {
            tx.put(&mut wire, r);
        }
        end_batch(&mut wire, start, 1);
        let (_, range, _) = next_batch(&wire).unwrap().unwrap();
        let mut rx = Coder::new(42);
        let mut r = Reader(&wire[range]);
        assert_eq!(rx.get(&mut r).unwrap(), first);
        let got = rx.get(&mut r).unwrap();
        assert_eq!(got, rec);
        assert_eq!(rx.get(&mut r).unwrap(), after);
        let mut again = Vec::new();
        encode_stored(&mut again, &got);
        assert_eq!(again, stored);
        check(&decode_stored(next_frame(&again).unwrap().0).unwrap());

        // Damaged: bytes after the last member, or cut short.
        let mut members = vec![];
        let long = [rec.tail, b"\0"].concat();
        assert!(unit_parts(rec.stamp, &long, &mut members).is_err());
        assert!(unit_parts(rec.stamp, &rec.tail[..rec.tail.len() - 1], &mut members).is_err());
    }

    #[test]
    fn states_pings_and_damage() {
        let mut stored = Vec::new();
        encode_state(&mut stored, 9, 1, b"k", (123_456, 789), (b"payload", b""));
        encode_ping(&mut stored, &[b"PING", b"7"]);
        let (body, n) = next_frame(&stored).unwrap();
        let st = decode_stored(body).unwrap();
        assert_eq!(
            (st.kind, st.origin, st.db, st.stamp),
            (STATE, 9, 1, 123_456)
        );
        assert_eq!(
            state_parts(st.tail).unwrap(),
            (789, &b"k"[..], &b"payload"[..])
        );
        let ping = decode_stored(next_frame(&stored[n..]).unwrap().0).unwrap();
        assert_eq!(ping.kind, PING);
        assert_eq!(origin_of(ping.tail), None);
        let mut spans = vec![];
        let words = argv_parts(ping.tail, &mut spans).unwrap();
        assert_eq!(&words[spans[1].clone()], b"7");

        let mut wire = Vec::new();
        let start = begin_batch(&mut wire);
        let mut tx = Coder::new(1);
        tx.put(&mut wire, &st);
        tx.put(&mut wire, &ping);
        end_batch(&mut wire, start, 7);
        assert_eq!(next_batch(&wire[..wire.len() - 1]).unwrap(), None);
        let mut bad = wire.clone();
        bad[BATCH_HEADER + 3] ^= 1;
        assert!(next_batch(&bad).is_err());
        bad = wire.clone();
        bad[6] ^= 1; // the offset
        assert!(next_batch(&bad).is_err());
        assert!(next_batch(b"*1\r\n$4\r\nPING\r\n").is_err());
        let (_, range, _) = next_batch(&wire).unwrap().unwrap();
        let mut rx = Coder::new(1);
        let mut r = Reader(&wire[range]);
        assert_eq!(rx.get(&mut r).unwrap(), st);
        assert_eq!(rx.get(&mut r).unwrap().kind, PING);
        assert!(decode_stored(b"W\x01\x02").is_err());
        assert!(write_parts(
            STAMP,
            b"\x01\x01\xff",
            (&mut vec![], &mut vec![]),
            &mut vec![]
        )
        .is_err());
    }
}
