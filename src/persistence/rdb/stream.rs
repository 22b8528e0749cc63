//! Streams in the RDB (type 19, STREAM_LISTPACKS_2, what Redis 7.0 writes;
//! type 15 read too): one listpack per node, keyed by its master ID, in
//! t_stream.c's layout, then the stream's metadata and consumer groups.
//!
//! A node's listpack: the master entry (live count, deleted count, the
//! master fields' count, the fields, a 0 terminator), then per entry its
//! flags, ms and seq deltas from the master ID, the values alone when its
//! fields are the master's (SAMEFIELDS) or its field count and pairs, and
//! its element count (lp-count). We write no deleted entries, so a node we
//! write holds only live ones.
//!
//! Consumer groups follow the metadata (rdbSaveObject / rdbLoadObject): per
//! group its name, last ID, entries-read (type 19 only), the group PEL (raw
//! 16-byte IDs with delivery time and count), then the consumers with their
//! seen time and their PELs (IDs only, each resolved in the group PEL). The
//! loader refuses what Redis refuses, with Redis's messages: duplicate
//! groups, consumers or PEL entries, a consumer PEL entry missing from the
//! group PEL or held by two consumers, and a group PEL entry no consumer
//! holds (Redis checks that one only under deep sanitization; a NACK
//! without a consumer would break our invariants, so it is always refused).

use std::collections::BTreeMap;

use super::encode::{write_len, write_string, Listpack};
use super::RdbError;
use crate::keyspace::stream::{Fields, StreamId, StreamValue};
use crate::keyspace::stream_groups::{Consumer, Group, INVALID_ENTRIES_READ};
use crate::protocol::parse_i64;

const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;

/// One node's listpack, from its master ID and entries.
pub(crate) fn node_listpack(master: StreamId, entries: &[(StreamId, Fields)]) -> Vec<u8> {
    let mut lp = Listpack::new();
    let master_fields: Vec<&[u8]> = entries[0].1.items().step_by(2).collect();
    lp.push_int(entries.len() as i64);
    lp.push_int(0);
    lp.push_int(master_fields.len() as i64);
    for f in &master_fields {
        lp.push(f);
    }
    lp.push_int(0);
    for (id, fields) in entries {
        let names: Vec<&[u8]> = fields.items().step_by(2).collect();
        let same = names == master_fields;
        lp.push_int(if same { FLAG_SAMEFIELDS } else { 0 });
        lp.push_int(id.ms.wrapping_sub(master.ms) as i64);
        lp.push_int(id.seq.wrapping_sub(master.seq) as i64);
        if same {
            for v in fields.items().skip(1).step_by(2) {
                lp.push(v);
            }
        } else {
            lp.push_int(names.len() as i64);
            for it in fields.items() {
                lp.push(it);
            }
        }
        let n = names.len() as i64;
        lp.push_int(if same { n + 3 } else { 2 * n + 4 });
    }
    lp.finish()
}

fn bad(why: &str) -> RdbError {
    RdbError::Corrupt(format!("Stream listpack integrity check failed. ({why})"))
}

/// The entries of one node's listpack elements (deleted ones skipped),
/// checked against the master entry's counts.
pub(crate) fn parse_node(
    master: StreamId,
    els: &[Vec<u8>],
) -> Result<Vec<(StreamId, Fields)>, RdbError> {
    let int = |at: usize| -> Result<i64, RdbError> {
        let e = els.get(at).ok_or_else(|| bad("truncated"))?;
        parse_i64(e).ok_or_else(|| bad("integer expected"))
    };
    let (count, deleted, nf) = (int(0)?, int(1)?, int(2)?);
    if count < 0 || deleted < 0 || nf < 0 || nf as usize > els.len() {
        return Err(bad("bad master entry"));
    }
    let fields: Vec<&[u8]> = els
        .get(3..3 + nf as usize)
        .ok_or_else(|| bad("truncated"))?
        .iter()
        .map(|f| &f[..])
        .collect();
    let mut at = 3 + nf as usize;
    if els.get(at).map(|e| &e[..]) != Some(b"0") {
        return Err(bad("no master terminator"));
    }
    at += 1;
    let mut out = Vec::new();
    let (mut live, mut dead) = (0i64, 0i64);
    while at < els.len() {
        let (entry, next) = parse_entry(master, els, at, &fields)?;
        at = next;
        match entry {
            Some(e) => {
                if out
                    .last()
                    .is_some_and(|(p, _): &(StreamId, Fields)| *p >= e.0)
                {
                    return Err(bad("IDs not increasing"));
                }
                out.push(e);
                live += 1;
            }
            None => dead += 1,
        }
    }
    if live != count || dead != deleted {
        return Err(bad("counts do not match the entries"));
    }
    Ok(out)
}

/// One entry at `at`: Some unless flagged deleted, and where the next
/// begins.
fn parse_entry(
    master: StreamId,
    els: &[Vec<u8>],
    mut at: usize,
    master_fields: &[&[u8]],
) -> Result<(Option<(StreamId, Fields)>, usize), RdbError> {
    let int = |at: &mut usize| -> Result<i64, RdbError> {
        let e = els.get(*at).ok_or_else(|| bad("truncated entry"))?;
        *at += 1;
        parse_i64(e).ok_or_else(|| bad("integer expected"))
    };
    let flags = int(&mut at)?;
    let ms = master.ms.wrapping_add(int(&mut at)? as u64);
    let seq = master.seq.wrapping_add(int(&mut at)? as u64);
    let same = flags & FLAG_SAMEFIELDS != 0;
    let items: Vec<&[u8]> = if same {
        let vals = els
            .get(at..at + master_fields.len())
            .ok_or_else(|| bad("truncated values"))?;
        at += master_fields.len();
        master_fields
            .iter()
            .zip(vals)
            .flat_map(|(f, v)| [*f, &v[..]])
            .collect()
    } else {
        let n = int(&mut at)?;
        if n < 0 || (2 * n) as usize > els.len() {
            return Err(bad("bad field count"));
        }
        let its = els
            .get(at..at + 2 * n as usize)
            .ok_or_else(|| bad("truncated"))?;
        at += 2 * n as usize;
        its.iter().map(|v| &v[..]).collect()
    };
    let n = (items.len() / 2) as i64;
    let want = if same { n + 3 } else { 2 * n + 4 };
    if int(&mut at)? != want {
        return Err(bad("lp-count does not match"));
    }
    let entry = (flags & FLAG_DELETED == 0).then(|| {
        let f = Fields::pack(items.into_iter());
        (StreamId::new(ms, seq), f)
    });
    Ok((entry, at))
}

/// Every node of `s`: its 16-byte key and listpack.
pub(crate) fn node_blobs(s: &StreamValue) -> Vec<([u8; 16], Vec<u8>)> {
    s.nodes()
        .map(|(m, es)| (m.to_be(), node_listpack(m, &es)))
        .collect()
}

/// A master ID from a node key.
pub(crate) fn node_key(k: &[u8]) -> Result<StreamId, RdbError> {
    if k.len() != 16 {
        return Err(bad("node key is not 16 bytes"));
    }
    let ms = u64::from_be_bytes(k[..8].try_into().expect("8 bytes"));
    let seq = u64::from_be_bytes(k[8..].try_into().expect("8 bytes"));
    Ok(StreamId::new(ms, seq))
}

/// The consumer groups of `x` (type 19's layout).
pub(crate) fn write_groups(out: &mut Vec<u8>, x: &StreamValue, compress: bool) {
    write_len(out, x.groups.len() as u64);
    for (name, g) in &x.groups {
        write_string(out, name, compress);
        write_len(out, g.last_id.ms);
        write_len(out, g.last_id.seq);
        write_len(out, g.entries_read as u64);
        write_len(out, g.pel.len() as u64);
        for (id, n) in g.pel.iter() {
            out.extend_from_slice(&id.to_be());
            out.extend_from_slice(&n.delivery_time.to_le_bytes());
            write_len(out, n.delivery_count);
        }
        write_len(out, g.consumers.len() as u64);
        for (cname, c) in &g.consumers {
            write_string(out, cname, compress);
            out.extend_from_slice(&c.seen_time.to_le_bytes());
            write_len(out, g.pel.count_of(cname) as u64);
            for (id, _) in g.pel.of(cname) {
                out.extend_from_slice(&id.to_be());
            }
        }
    }
}

/// What the group reader needs from the RDB source: lengths, strings, raw
/// bytes.
pub(crate) trait GroupSrc {
    /// An RDB length (rdbLoadLen).
    fn rdb_len(&mut self) -> Result<u64, RdbError>;
    fn string(&mut self) -> Result<Vec<u8>, RdbError>;
    fn raw<const N: usize>(&mut self) -> Result<[u8; N], RdbError>;
}

fn corrupt(why: &str) -> RdbError {
    RdbError::Corrupt(why.to_string())
}

fn raw_id(b: [u8; 16]) -> StreamId {
    node_key(&b).expect("16 bytes")
}

/// Reads the consumer groups into `x` (types 15 and 19; a type 15 group's
/// entries-read is estimated, as Redis does).
pub(crate) fn read_groups<S: GroupSrc>(
    s: &mut S,
    x: &mut StreamValue,
    v2: bool,
) -> Result<(), RdbError> {
    for _ in 0..s.rdb_len()? {
        let name = s.string()?;
        let last = StreamId::new(s.rdb_len()?, s.rdb_len()?);
        let read = if v2 {
            s.rdb_len()? as i64
        } else {
            x.estimate_distance(last)
        };
        if x.groups.contains_key(&name) {
            return Err(RdbError::Corrupt(format!(
                "Duplicated consumer group name {}",
                String::from_utf8_lossy(&name)
            )));
        }
        let read = if read < 0 { INVALID_ENTRIES_READ } else { read };
        let mut g = Group::new(last, read);
        let pel = read_pel(s)?;
        read_consumers(s, &mut g, pel)?;
        x.groups.insert(name, g);
    }
    Ok(())
}

/// A group PEL's entries not yet owned (delivery time and count by ID):
/// [`read_consumers`] names their consumers.
type Unowned = BTreeMap<StreamId, (i64, u64)>;

/// The group PEL, its NACKs not yet owned.
fn read_pel<S: GroupSrc>(s: &mut S) -> Result<Unowned, RdbError> {
    let mut pel = Unowned::new();
    for _ in 0..s.rdb_len()? {
        let id = raw_id(s.raw::<16>()?);
        let time = i64::from_le_bytes(s.raw::<8>()?);
        if pel.insert(id, (time, s.rdb_len()?)).is_some() {
            return Err(corrupt(
                "Duplicated global PEL entry loading stream consumer group",
            ));
        }
    }
    Ok(pel)
}

/// The consumers, each taking its entries of `pel` into the group's.
fn read_consumers<S: GroupSrc>(s: &mut S, g: &mut Group, mut pel: Unowned) -> Result<(), RdbError> {
    for _ in 0..s.rdb_len()? {
        let name = s.string()?;
        if g.consumers.contains_key(&name) {
            return Err(corrupt("Duplicate stream consumer detected."));
        }
        let c = Consumer {
            seen_time: i64::from_le_bytes(s.raw::<8>()?),
        };
        for _ in 0..s.rdb_len()? {
            let id = raw_id(s.raw::<16>()?);
            let Some((time, count)) = pel.remove(&id) else {
                if g.pel.contains_key(&id) {
                    return Err(corrupt(
                        "Stream consumer PEL entry already has a consumer assigned",
                    ));
                }
                return Err(corrupt("Consumer entry not found in group global PEL"));
            };
            g.pel.insert(id, &name, time, count);
        }
        g.consumers.insert(name, c);
    }
    if !pel.is_empty() {
        return Err(corrupt("Stream CG PEL entry without consumer"));
    }
    Ok(())
}
