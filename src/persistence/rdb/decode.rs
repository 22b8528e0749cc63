//! The RDB loader: streams a whole file ([`load`]) or decodes one RESTORE
//! payload ([`decode_dump_payload`]) into keyspace values.
//!
//! Every type and encoding of RDB versions 1 to 11 is read: plain strings
//! (integer and LZF encodings), the old linked encodings (LIST, SET, ZSET,
//! ZSET_2, HASH) and the packed ones (zipmap, ziplist, intset, quicklists of
//! ziplists or listpacks, listpacks). Values are rebuilt with the public
//! collection APIs under the current encoding limits, converting as Redis
//! 7.0's rdbLoadObject converts, so OBJECT ENCODING answers what Redis would
//! after loading the same file. Streams (types 15 and 19, consumer groups
//! included) load through `rdb/stream.rs`; Redis 7.2's stream type 21 and
//! module values are refused with [`RdbError::Unsupported`] naming the key
//! rather than silently dropped.
//!
//! Hardening: the input is untrusted (RESTORE takes it from any client).
//! Lengths are checked against what is left, no allocation is sized from a
//! claimed count beyond [`RESERVE_CAP`], strings are read incrementally,
//! duplicate members/fields are errors (Redis's deep sanitization) and no
//! input panics (see the fuzz target `rdb_loader` and `tests/rdb_load.rs`).
//! Collections that turn out empty are skipped by [`load`] (Redis skips
//! them with a log line) and refused by [`decode_dump_payload`].

use std::collections::{HashSet, VecDeque};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use super::packed;
use super::{len, opcode, types, RdbError, AUX_VERSIONS, RDB_VERSION_MAX_LOAD};
use super::{module_opcode, QUICKLIST_NODE_PACKED, QUICKLIST_NODE_PLAIN};
use super::{AUX_FLUSHED, AUX_MERGE, AUX_SUBEXPIRE_KEY, AUX_SUBEXPIRE_WHEN, AUX_TOMBSTONES};
use crate::keyspace::encoding::EncodingLimits;
use crate::keyspace::hash::{HashLimits, HashValue};
use crate::keyspace::list::ListValue;
use crate::keyspace::set::SetValue;
use crate::keyspace::zset::{key_cmp, ZLimits, ZSetValue};
use crate::keyspace::Value;

/// DEBUG SET-SKIP-CHECKSUM-VALIDATION: RESTORE payloads and loaded files
/// are not checked against their CRC-64 (Redis's server-wide
/// skip_checksum_validation, used by its corrupt-dump tests).
pub(crate) static SKIP_CHECKSUM_VALIDATION: AtomicBool = AtomicBool::new(false);

/// Most elements reserved up front from a claimed count.
const RESERVE_CAP: usize = 4096;

/// One key read from a file.
#[derive(Debug)]
pub struct LoadedKey {
    pub db: usize,
    pub key: Vec<u8>,
    pub value: Value,
    /// Absolute expiry in unix ms; 0 = none.
    pub expire_at_ms: u64,
    pub idle_secs: Option<u64>,
    pub freq: Option<u8>,
    /// From the [`AUX_VERSIONS`] aux field, when the file has one.
    pub version: Option<u64>,
}

/// Told an aux field's name and value.
pub(crate) type AuxHook = dyn Fn(&[u8], &[u8]);

pub struct LoadOpts<'a> {
    pub limits: &'a EncodingLimits,
    pub verify_checksum: bool,
    /// Told each RESIZEDB (database, keys) before that database's keys, so
    /// the loader can size its tables once.
    pub on_resize: Option<&'a dyn Fn(usize, u64)>,
    /// Told each aux field (name, value) as it is read, before the keys
    /// (Redis logs the producing version, the file's age and memory then).
    pub on_aux: Option<&'a AuxHook>,
}

#[derive(Debug)]
pub struct LoadSummary {
    pub rdb_version: u16,
    pub keys: u64,
    /// Empty collections skipped (Redis logs them and loads the rest).
    pub empty_skipped: u64,
    /// The aux fields, but for the per-key ones (versions, tombstones,
    /// flush stamps), which go where they belong.
    pub aux: Vec<(Vec<u8>, Vec<u8>)>,
    /// Active replication's tombstones: (database, key, stamp).
    pub tombstones: Vec<(usize, Vec<u8>, u64)>,
    /// Active replication's per-database flush stamps: (database, stamp).
    pub flushed: Vec<(usize, u64)>,
    /// Active replication's merge states: (database, key, state as
    /// `keyspace::merge::Meta::encode` wrote it).
    pub merge: Vec<(usize, Vec<u8>, Vec<u8>)>,
    /// FUNCTION libraries' code (RDB_OPCODE_FUNCTION2), in file order.
    pub functions: Vec<Vec<u8>>,
    /// Member TTLs (KeyDB's [`AUX_SUBEXPIRE_KEY`] / [`AUX_SUBEXPIRE_WHEN`]
    /// pairs after a key): (database, key, member, unix ms).
    pub member_ttls: Vec<MemberTtl>,
}

/// One member TTL read from a file: (database, key, member, unix ms).
pub(crate) type MemberTtl = (usize, Vec<u8>, Vec<u8>, u64);

fn corrupt(s: impl Into<String>) -> RdbError {
    RdbError::Corrupt(s.into())
}

use super::CRC64 as CRC;

/// A reader that keeps the running checksum of what it consumed.
struct Src<R: Read> {
    r: R,
    digest: crc::Digest<'static, u64, crc::Table<16>>,
}

/// A length or a special string encoding (the top bits 11).
enum Len {
    Plain(u64),
    Encoded(u8),
}

impl<R: Read> Src<R> {
    fn new(r: R) -> Self {
        Src {
            r,
            digest: CRC.digest(),
        }
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RdbError> {
        self.r.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => corrupt("unexpected end of data"),
            _ => RdbError::Io(e),
        })?;
        self.digest.update(buf);
        Ok(())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], RdbError> {
        let mut b = [0u8; N];
        self.fill(&mut b)?;
        Ok(b)
    }

    fn u8(&mut self) -> Result<u8, RdbError> {
        Ok(self.array::<1>()?[0])
    }

    /// `n` bytes, read in bounded pieces so a lying length cannot make us
    /// allocate more than the input actually holds.
    fn bytes(&mut self, n: u64) -> Result<Vec<u8>, RdbError> {
        // Small strings (nearly all keys and values): one exact read.
        if n <= 1 << 16 {
            let mut out = vec![0u8; n as usize];
            self.fill(&mut out)?;
            return Ok(out);
        }
        let mut out = Vec::with_capacity(1 << 16);
        let got = (&mut self.r).take(n).read_to_end(&mut out)?;
        if got as u64 != n {
            return Err(corrupt("unexpected end of data in a string"));
        }
        self.digest.update(&out);
        Ok(out)
    }

    fn len_or_enc(&mut self) -> Result<Len, RdbError> {
        let b = self.u8()?;
        Ok(match b >> 6 {
            0 => Len::Plain((b & 0x3F) as u64),
            1 => Len::Plain((((b & 0x3F) as u64) << 8) | self.u8()? as u64),
            3 => Len::Encoded(b & 0x3F),
            _ if b == len::LEN_32 => Len::Plain(u32::from_be_bytes(self.array()?) as u64),
            _ if b == len::LEN_64 => Len::Plain(u64::from_be_bytes(self.array()?)),
            _ => return Err(corrupt(format!("unknown length encoding {b:#x}"))),
        })
    }

    fn len(&mut self) -> Result<u64, RdbError> {
        match self.len_or_enc()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(_) => Err(corrupt("encoded string where a length was expected")),
        }
    }

    fn string(&mut self) -> Result<Vec<u8>, RdbError> {
        match self.len_or_enc()? {
            Len::Plain(n) => self.bytes(n),
            Len::Encoded(len::ENC_INT8) => Ok((self.u8()? as i8).to_string().into_bytes()),
            Len::Encoded(len::ENC_INT16) => {
                Ok(i16::from_le_bytes(self.array()?).to_string().into_bytes())
            }
            Len::Encoded(len::ENC_INT32) => {
                Ok(i32::from_le_bytes(self.array()?).to_string().into_bytes())
            }
            Len::Encoded(len::ENC_LZF) => self.lzf(),
            Len::Encoded(e) => Err(corrupt(format!("unknown string encoding {e}"))),
        }
    }

    fn lzf(&mut self) -> Result<Vec<u8>, RdbError> {
        let clen = self.len()?;
        let ulen = self.len()?;
        // LZF expands at most ~88x (a 3-byte back reference yields 264).
        if clen == 0 || ulen == 0 || ulen > clen.saturating_mul(100) {
            return Err(corrupt("invalid LZF compressed string"));
        }
        let data = self.bytes(clen)?;
        super::lzf::decompress(&data, ulen as usize)
            .ok_or_else(|| corrupt("invalid LZF compressed string"))
    }

    /// A ZSET (type 3) score: a length-prefixed decimal or a marker.
    fn text_double(&mut self) -> Result<f64, RdbError> {
        match self.u8()? {
            253 => Ok(f64::NAN),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => {
                let b = self.bytes(n as u64)?;
                parse_double(&b).ok_or_else(|| corrupt("bad zset score"))
            }
        }
    }

    fn binary_double(&mut self) -> Result<f64, RdbError> {
        Ok(f64::from_le_bytes(self.array()?))
    }

    fn count(&mut self) -> Result<u64, RdbError> {
        self.len()
    }
}

fn parse_double(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// The limits of the moment, read once per value.
struct Lim {
    fill: i64,
    hash: HashLimits,
    intset: usize,
    z: ZLimits,
}

impl Lim {
    fn of(l: &EncodingLimits) -> Lim {
        Lim {
            fill: l.list_max_listpack_size.load(Relaxed),
            hash: HashLimits {
                entries: l.hash_max_listpack_entries.load(Relaxed),
                value: l.hash_max_listpack_value.load(Relaxed),
            },
            intset: l.set_max_intset_entries.load(Relaxed),
            z: ZLimits {
                max_entries: l.zset_max_listpack_entries.load(Relaxed),
                max_value: l.zset_max_listpack_value.load(Relaxed),
            },
        }
    }
}

/// A KEYDB.CRON job: KeyDB's record (a repeating job owned by no node,
/// next run one interval after its start time; KeyDB's record keeps no
/// single-shot flag) or ours, which adds what KeyDB's lacks.
fn cron<R: Read>(s: &mut Src<R>, t: u8) -> Result<Value, RdbError> {
    let script = s.string()?;
    let start_ms = u64::from_le_bytes(s.array()?);
    let interval_ms = u64::from_le_bytes(s.array()?);
    let mut parts = [Vec::new(), Vec::new()];
    for part in &mut parts {
        let n = s.len()?;
        for _ in 0..n {
            part.push(s.string()?);
        }
    }
    let [keys, args] = parts;
    let mut job = crate::keyspace::cron::CronJob {
        script,
        start_ms,
        interval_ms,
        next_ms: start_ms.saturating_add(interval_ms),
        single: false,
        keys,
        args,
        owner: 0,
    };
    if t == types::CRON {
        job.next_ms = u64::from_le_bytes(s.array()?);
        job.single = s.u8()? & 1 != 0;
        job.owner = u64::from_le_bytes(s.array()?);
    }
    Ok(Value::Cron(Box::new(job)))
}

/// Reads one value of type `t`. `Ok(None)`: an empty collection.
fn read_value<R: Read>(
    s: &mut Src<R>,
    t: u8,
    key: &[u8],
    lim: &Lim,
) -> Result<Option<Value>, RdbError> {
    let v = match t {
        types::STRING => return Ok(Some(Value::string(&s.string()?))),
        types::LIST | types::SET | types::ZSET | types::ZSET_2 | types::HASH => {
            linked_value(s, t, lim)?
        }
        types::LIST_QUICKLIST | types::LIST_QUICKLIST_2 => {
            quicklist(s, t, lim).map_err(|e| integrity(t, e))?
        }
        types::HASH_ZIPMAP
        | types::LIST_ZIPLIST
        | types::SET_INTSET
        | types::ZSET_ZIPLIST
        | types::HASH_ZIPLIST
        | types::HASH_LISTPACK
        | types::ZSET_LISTPACK
        | types::SET_LISTPACK => {
            let blob = s.string()?;
            packed_value(&blob, t, lim).map_err(|e| integrity(t, e))?
        }
        types::STREAM_LISTPACKS | types::STREAM_LISTPACKS_2 => return stream(s, t).map(Some),
        types::STREAM_LISTPACKS_3 => {
            return Err(RdbError::Unsupported(format!(
                "key '{}' is a stream of Redis 7.2's format, which this server cannot load",
                String::from_utf8_lossy(key)
            )))
        }
        types::CRON_KEYDB | types::CRON => return cron(s, t).map(Some),
        types::MODULE_PRE_GA | types::MODULE_2 => {
            return Err(RdbError::Unsupported(format!(
                "key '{}' holds a module value, which this server cannot load",
                String::from_utf8_lossy(key)
            )))
        }
        _ => return Err(corrupt(format!("unknown RDB value type {t}"))),
    };
    Ok((!v.is_empty_collection()).then_some(v))
}

/// A stream (types 15 and 19, `rdb/stream.rs`): its nodes, then its
/// metadata and consumer groups.
fn stream<R: Read>(s: &mut Src<R>, t: u8) -> Result<Value, RdbError> {
    use super::stream::{node_key, parse_node};
    use crate::keyspace::stream::{StreamId, StreamValue};
    let mut x = StreamValue::default();
    let mut last_seen = None;
    for _ in 0..s.count()? {
        let master = node_key(&s.string()?)?;
        let els = super::packed::listpack(&s.string()?).map_err(|e| integrity(t, e))?;
        let entries = parse_node(master, &els)?;
        if entries.is_empty() {
            return Err(corrupt("Empty listpack inside stream"));
        }
        // Redis opens a node with an entry above every earlier one, so
        // node keys rise past the entries before them: the nodes' ranges
        // never overlap (lookups by ID rely on it).
        if entries[0].0 < master || last_seen.is_some_and(|l| master <= l) {
            return Err(corrupt("Stream node IDs out of order"));
        }
        last_seen = entries.last().map(|e| e.0);
        x.load_node(master, entries);
    }
    let length = s.len()?;
    let mut id = || -> Result<StreamId, RdbError> { Ok(StreamId::new(s.len()?, s.len()?)) };
    x.last_id = id()?;
    if t == types::STREAM_LISTPACKS_2 {
        let _first = id()?;
        x.max_deleted = id()?;
        x.entries_added = s.len()?;
    } else {
        x.entries_added = length;
    }
    if length != x.len() as u64 || last_seen.is_some_and(|l| l > x.last_id) {
        return Err(corrupt(
            "Stream length or last ID inconsistent with its entries",
        ));
    }
    super::stream::read_groups(s, &mut x, t == types::STREAM_LISTPACKS_2)?;
    Ok(Value::Stream(Box::new(x)))
}

impl<R: Read> super::stream::GroupSrc for Src<R> {
    fn rdb_len(&mut self) -> Result<u64, RdbError> {
        self.len()
    }
    fn string(&mut self) -> Result<Vec<u8>, RdbError> {
        Src::string(self)
    }
    fn raw<const N: usize>(&mut self) -> Result<[u8; N], RdbError> {
        self.array()
    }
}

/// A malformed packed blob, worded as Redis's rdbLoadObject reports it
/// ("Zset ziplist integrity check failed."), which tools and the suite grep.
fn integrity(t: u8, e: RdbError) -> RdbError {
    let RdbError::Corrupt(detail) = e else {
        return e;
    };
    let what = match t {
        types::HASH_ZIPMAP => "Zipmap",
        types::LIST_ZIPLIST | types::LIST_QUICKLIST => "Ziplist",
        types::SET_INTSET => "Intset",
        types::SET_LISTPACK => "Listpack",
        types::ZSET_ZIPLIST => "Zset ziplist",
        types::ZSET_LISTPACK => "Zset listpack",
        types::HASH_ZIPLIST => "Hash ziplist",
        types::HASH_LISTPACK => "Hash listpack",
        types::STREAM_LISTPACKS | types::STREAM_LISTPACKS_2 => "Stream listpack",
        _ => "Quicklist",
    };
    RdbError::Corrupt(format!("{what} integrity check failed. ({detail})"))
}

/// The element-by-element encodings: LIST, SET, ZSET, ZSET_2, HASH.
fn linked_value<R: Read>(s: &mut Src<R>, t: u8, lim: &Lim) -> Result<Value, RdbError> {
    let n = s.count()?;
    Ok(match t {
        types::LIST => {
            let mut l = ListValue::new();
            for _ in 0..n {
                l.push_back(lim.fill, &s.string()?);
            }
            Value::List(Box::new(l))
        }
        types::SET => {
            // Redis starts a long set as a table, a short one as an intset.
            let mut set = if n > lim.intset as u64 {
                SetValue::for_member(b"x")
            } else {
                SetValue::default()
            };
            for _ in 0..n {
                if !set.add(&s.string()?, lim.intset) {
                    return Err(corrupt("Duplicate set members detected"));
                }
            }
            Value::Set(Box::new(set))
        }
        types::HASH => {
            let mut h = HashValue::default();
            for _ in 0..n {
                let (f, v) = (s.string()?, s.string()?);
                if !h.set(&f, &v, lim.hash) {
                    return Err(corrupt("Duplicate hash fields detected"));
                }
            }
            Value::Hash(Box::new(h))
        }
        _ => {
            let mut items = Vec::with_capacity((n as usize).min(RESERVE_CAP));
            for _ in 0..n {
                let m = s.string()?;
                let score = if t == types::ZSET {
                    s.text_double()?
                } else {
                    s.binary_double()?
                };
                items.push((m.into_boxed_slice(), score));
            }
            Value::ZSet(Box::new(zset(items, lim.z)?))
        }
    })
}

/// Checks and sorts zset pairs, in the encoding Redis picks after loading.
fn zset(mut items: Vec<(Box<[u8]>, f64)>, lim: ZLimits) -> Result<ZSetValue, RdbError> {
    if items.iter().any(|(_, s)| s.is_nan()) {
        return Err(corrupt("Zset with NAN score detected"));
    }
    let mut seen = HashSet::with_capacity(items.len());
    if !items.iter().all(|(m, _)| seen.insert(&m[..])) {
        return Err(corrupt("Duplicate zset fields detected"));
    }
    drop(seen);
    items.sort_by(|a, b| key_cmp(a.1, &a.0, b.1, &b.0));
    Ok(ZSetValue::from_sorted(items, lim))
}

/// A quicklist: nodes of ziplists (type 14) or of listpacks / plain
/// elements (type 18). Empty nodes are skipped, as Redis does.
fn quicklist<R: Read>(s: &mut Src<R>, t: u8, lim: &Lim) -> Result<Value, RdbError> {
    let nodes = s.count()?;
    let mut l = ListValue::new();
    for _ in 0..nodes {
        let container = if t == types::LIST_QUICKLIST_2 {
            s.len()?
        } else {
            QUICKLIST_NODE_PACKED
        };
        let blob = s.string()?;
        if blob.is_empty() {
            return Err(corrupt("quicklist node encoded_len is 0"));
        }
        match container {
            QUICKLIST_NODE_PLAIN => l.push_back(lim.fill, &blob),
            QUICKLIST_NODE_PACKED => {
                let elems = if t == types::LIST_QUICKLIST {
                    packed::ziplist(&blob)?
                } else {
                    packed::listpack(&blob)?
                };
                for e in elems {
                    l.push_back(lim.fill, &e);
                }
            }
            c => return Err(corrupt(format!("unknown quicklist node container {c}"))),
        }
    }
    Ok(Value::List(Box::new(l)))
}

/// A value held in one packed blob.
fn packed_value(blob: &[u8], t: u8, lim: &Lim) -> Result<Value, RdbError> {
    Ok(match t {
        types::LIST_ZIPLIST => {
            let mut l = ListValue::new();
            for e in packed::ziplist(blob)? {
                l.push_back(lim.fill, &e);
            }
            Value::List(Box::new(l))
        }
        types::SET_INTSET => {
            let mut set = SetValue::default();
            for n in packed::intset(blob)? {
                set.add(n.to_string().as_bytes(), lim.intset);
            }
            Value::Set(Box::new(set))
        }
        types::SET_LISTPACK => {
            let mut set = SetValue::default();
            for m in packed::listpack(blob)? {
                if !set.add(&m, lim.intset) {
                    return Err(corrupt("Duplicate set members detected"));
                }
            }
            Value::Set(Box::new(set))
        }
        types::ZSET_ZIPLIST | types::ZSET_LISTPACK => packed_zset(blob, t, lim)?,
        _ => packed_hash(blob, t, lim)?,
    })
}

fn packed_zset(blob: &[u8], t: u8, lim: &Lim) -> Result<Value, RdbError> {
    let elems = if t == types::ZSET_ZIPLIST {
        packed::ziplist(blob)?
    } else {
        packed::listpack(blob)?
    };
    if elems.len() % 2 != 0 {
        return Err(corrupt("zset blob with an odd number of elements"));
    }
    let mut items = Vec::with_capacity(elems.len() / 2);
    let mut it = elems.into_iter();
    while let (Some(m), Some(sc)) = (it.next(), it.next()) {
        let score = parse_double(&sc).ok_or_else(|| corrupt("bad zset score"))?;
        items.push((m.into_boxed_slice(), score));
    }
    // Redis converts these on the entry count only.
    let z = ZLimits {
        max_value: usize::MAX,
        ..lim.z
    };
    Ok(Value::ZSet(Box::new(zset(items, z)?)))
}

fn packed_hash(blob: &[u8], t: u8, lim: &Lim) -> Result<Value, RdbError> {
    let elems = match t {
        types::HASH_ZIPMAP => packed::zipmap(blob)?,
        types::HASH_ZIPLIST => packed::ziplist(blob)?,
        _ => packed::listpack(blob)?,
    };
    if elems.len() % 2 != 0 {
        return Err(corrupt("hash blob with an odd number of elements"));
    }
    // A zipmap converts on entries and lengths, the others on the entry
    // count only.
    let hl = HashLimits {
        entries: lim.hash.entries,
        value: if t == types::HASH_ZIPMAP {
            lim.hash.value
        } else {
            usize::MAX
        },
    };
    let mut h = HashValue::default();
    let mut it = elems.into_iter();
    while let (Some(f), Some(v)) = (it.next(), it.next()) {
        if !h.set(&f, &v, hl) {
            return Err(corrupt("Duplicate hash fields detected"));
        }
    }
    Ok(Value::Hash(Box::new(h)))
}

/// Skips a module's serialized data (Redis's rdbLoadCheckModuleValue).
fn skip_module_value<R: Read>(s: &mut Src<R>) -> Result<(), RdbError> {
    loop {
        match s.len()? {
            module_opcode::EOF => return Ok(()),
            module_opcode::SINT | module_opcode::UINT => {
                s.len()?;
            }
            module_opcode::STRING => {
                s.string()?;
            }
            module_opcode::FLOAT => {
                s.array::<4>()?;
            }
            module_opcode::DOUBLE => {
                s.array::<8>()?;
            }
            o => return Err(corrupt(format!("unknown module opcode {o}"))),
        }
    }
}

fn read_header<R: Read>(s: &mut Src<R>) -> Result<u16, RdbError> {
    let h: [u8; 9] = s
        .array()
        .map_err(|_| RdbError::BadHeader("file too short".into()))?;
    if &h[..5] != b"REDIS" || !h[5..].iter().all(u8::is_ascii_digit) {
        return Err(RdbError::BadHeader(
            "wrong signature trying to load DB".into(),
        ));
    }
    let v: u16 = std::str::from_utf8(&h[5..])
        .expect("digits")
        .parse()
        .expect("4 digits");
    if !(1..=RDB_VERSION_MAX_LOAD).contains(&v) {
        return Err(RdbError::BadHeader(format!(
            "can't handle RDB format version {v}"
        )));
    }
    Ok(v)
}

/// Per-key metadata seen before the key's type byte.
#[derive(Default)]
struct Pending {
    expire_at_ms: u64,
    idle_secs: Option<u64>,
    freq: Option<u8>,
}

/// The loader's state between records.
struct State {
    summary: LoadSummary,
    db: usize,
    versions: VecDeque<u64>,
    pending: Pending,
    /// The last key read, for the member TTLs that follow it (empty when
    /// it was skipped), and a member named by an aux field awaiting its
    /// deadline.
    last_key: Option<Vec<u8>>,
    sub_member: Option<Vec<u8>>,
}

/// Streams a whole RDB file (header to EOF + checksum) from `r`.
pub fn load(
    r: impl Read,
    opts: &LoadOpts,
    on_key: &mut dyn FnMut(LoadedKey) -> Result<(), RdbError>,
) -> Result<LoadSummary, RdbError> {
    let mut s = Src::new(r);
    let rdb_version = read_header(&mut s)?;
    let mut st = State {
        summary: LoadSummary {
            rdb_version,
            keys: 0,
            empty_skipped: 0,
            aux: Vec::new(),
            tombstones: Vec::new(),
            merge: Vec::new(),
            flushed: Vec::new(),
            functions: Vec::new(),
            member_ttls: Vec::new(),
        },
        db: 0,
        versions: VecDeque::new(),
        pending: Pending::default(),
        last_key: None,
        sub_member: None,
    };
    loop {
        let t = s.u8()?;
        if t == opcode::EOF {
            break;
        }
        if !read_opcode(&mut s, t, &mut st, opts)? {
            read_key(&mut s, t, opts, &mut st, on_key)?;
        }
    }
    if rdb_version >= 5 {
        verify_trailer(s, opts)?;
    }
    Ok(st.summary)
}

/// An aux field: name and value.
pub(crate) type AuxField = (Vec<u8>, Vec<u8>);

/// The aux fields at the head of an RDB file (before its first other
/// record), without reading further: what start-up needs before the server
/// is built (the node id, see `server/identity.rs`).
pub(crate) fn leading_aux(r: impl Read) -> Result<Vec<AuxField>, RdbError> {
    let mut s = Src::new(r);
    read_header(&mut s)?;
    let mut aux = Vec::new();
    while s.u8()? == opcode::AUX {
        aux.push((s.string()?, s.string()?));
    }
    Ok(aux)
}

/// Handles a non-key record; false if `t` is a value type.
fn read_opcode<R: Read>(
    s: &mut Src<R>,
    t: u8,
    st: &mut State,
    opts: &LoadOpts,
) -> Result<bool, RdbError> {
    let p = &mut st.pending;
    match t {
        opcode::EXPIRETIME => {
            let secs = i32::from_le_bytes(s.array()?) as i64;
            p.expire_at_ms = (secs * 1000).max(1) as u64;
        }
        opcode::EXPIRETIME_MS => {
            p.expire_at_ms = i64::from_le_bytes(s.array()?).max(1) as u64;
        }
        opcode::IDLE => p.idle_secs = Some(s.len()?),
        opcode::FREQ => p.freq = Some(s.u8()?),
        opcode::SELECTDB => {
            let n = s.len()?;
            st.db = usize::try_from(n)
                .ok()
                .filter(|&d| d < 1 << 24)
                .ok_or_else(|| corrupt(format!("bad database number {n}")))?;
        }
        opcode::RESIZEDB => {
            let keys = s.len()?;
            s.len()?;
            if let Some(f) = opts.on_resize {
                f(st.db, keys);
            }
        }
        opcode::AUX => {
            let (k, v) = (s.string()?, s.string()?);
            if let Some(f) = opts.on_aux {
                f(&k, &v);
            }
            if k == AUX_VERSIONS {
                if v.len() % 8 != 0 {
                    return Err(corrupt("bad lattice-versions aux field"));
                }
                st.versions = v
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
                    .collect();
            } else if k == AUX_TOMBSTONES {
                read_tombstones(&v, st.db, &mut st.summary.tombstones)?;
            } else if k == AUX_MERGE {
                read_merge_states(&v, st.db, &mut st.summary.merge)?;
            } else if k == AUX_SUBEXPIRE_KEY {
                if st.sub_member.replace(v).is_some() {
                    corrupt_subexpire(st);
                }
            } else if k == AUX_SUBEXPIRE_WHEN {
                read_subexpire(&v, st);
            } else if k == AUX_FLUSHED {
                let stamp = std::str::from_utf8(&v)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| corrupt("bad lattice-flushed aux field"))?;
                st.summary.flushed.push((st.db, stamp));
            } else {
                st.summary.aux.push((k, v));
            }
        }
        opcode::MODULE_AUX => {
            let id = s.len()?;
            if s.len()? != module_opcode::UINT {
                return Err(corrupt("bad module aux 'when' opcode"));
            }
            s.len()?;
            skip_module_value(s)?;
            crate::log_warning!("RDB: skipped aux data of module id {id:#x} (no modules here)");
        }
        opcode::FUNCTION2 | opcode::FUNCTION_PRE_GA => {
            if t == opcode::FUNCTION_PRE_GA {
                // Name, engine, optional description, then the code.
                s.string()?;
                s.string()?;
                if s.len()? != 0 {
                    s.string()?;
                }
            }
            st.summary.functions.push(s.string()?);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// KeyDB's member deadline after its member's aux field: the TTL of that
/// member of the key just read. A pair without its key (a skipped one) or
/// with a bad deadline is skipped with KeyDB's warning.
fn read_subexpire(v: &[u8], st: &mut State) {
    let at = std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse::<i64>().ok());
    match (st.sub_member.take(), &st.last_key, at) {
        (Some(m), Some(key), Some(at)) => {
            let at = at.max(1) as u64;
            st.summary.member_ttls.push((st.db, key.clone(), m, at));
        }
        (m, _, _) => {
            st.sub_member = m;
            corrupt_subexpire(st);
        }
    }
}

fn corrupt_subexpire(st: &mut State) {
    let key = st.last_key.as_deref().unwrap_or(b"(null)");
    let m = st.sub_member.take();
    crate::log_warning!(
        "Corrupt subexpire entry in RDB skipping. key: {} subkey: {}",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(m.as_deref().unwrap_or(b"(null)"))
    );
}

/// The tombstones an [`AUX_TOMBSTONES`] field holds, for database `db`.
fn read_tombstones(
    mut v: &[u8],
    db: usize,
    out: &mut Vec<(usize, Vec<u8>, u64)>,
) -> Result<(), RdbError> {
    let bad = || corrupt("bad lattice-tombs aux field");
    while !v.is_empty() {
        if v.len() < 12 {
            return Err(bad());
        }
        let stamp = u64::from_le_bytes(v[..8].try_into().expect("8"));
        let n = u32::from_le_bytes(v[8..12].try_into().expect("4")) as usize;
        let key = v.get(12..12 + n).ok_or_else(bad)?;
        out.push((db, key.to_vec(), stamp));
        v = &v[12 + n..];
    }
    Ok(())
}

/// The merge states an [`AUX_MERGE`] field holds, for database `db`.
fn read_merge_states(
    mut v: &[u8],
    db: usize,
    out: &mut Vec<(usize, Vec<u8>, Vec<u8>)>,
) -> Result<(), RdbError> {
    let bad = || corrupt("bad lattice-merge aux field");
    let take = |v: &mut &[u8]| -> Result<Vec<u8>, RdbError> {
        let n = v.get(..4).ok_or_else(bad)?;
        let n = u32::from_le_bytes(n.try_into().expect("4")) as usize;
        let b = v.get(4..4 + n).ok_or_else(bad)?.to_vec();
        *v = &v[4 + n..];
        Ok(b)
    };
    while !v.is_empty() {
        let key = take(&mut v)?;
        let state = take(&mut v)?;
        out.push((db, key, state));
    }
    Ok(())
}

/// Reads one key record of type `t` and hands it to `on_key`.
fn read_key<R: Read>(
    s: &mut Src<R>,
    t: u8,
    opts: &LoadOpts,
    st: &mut State,
    on_key: &mut dyn FnMut(LoadedKey) -> Result<(), RdbError>,
) -> Result<(), RdbError> {
    let key = s.string()?;
    let value = read_value(s, t, &key, &Lim::of(opts.limits))?;
    let version = st.versions.pop_front();
    let meta = std::mem::take(&mut st.pending);
    match &mut st.last_key {
        Some(k) if value.is_some() => {
            k.clear();
            k.extend_from_slice(&key);
        }
        _ => st.last_key = value.is_some().then(|| key.clone()),
    }
    let Some(value) = value else {
        crate::log_warning!(
            "rdbLoadObject skipping empty key: {}",
            String::from_utf8_lossy(&key)
        );
        st.summary.empty_skipped += 1;
        return Ok(());
    };
    st.summary.keys += 1;
    on_key(LoadedKey {
        db: st.db,
        key,
        value,
        expire_at_ms: meta.expire_at_ms,
        idle_secs: meta.idle_secs,
        freq: meta.freq,
        version,
    })
}

/// The 8-byte checksum after EOF (0: the writer did not compute one).
fn verify_trailer<R: Read>(mut s: Src<R>, opts: &LoadOpts) -> Result<(), RdbError> {
    let computed = s.digest.clone().finalize();
    let mut b = [0u8; 8];
    s.r.read_exact(&mut b)
        .map_err(|_| corrupt("unexpected end of data before the checksum"))?;
    let expected = u64::from_le_bytes(b);
    let verify = opts.verify_checksum && !SKIP_CHECKSUM_VALIDATION.load(Relaxed);
    if verify && expected != 0 && expected != computed {
        return Err(RdbError::Checksum { expected, computed });
    }
    Ok(())
}

/// RESTORE's payload: `<type><value><2-byte LE rdb version><8-byte LE CRC64>`.
/// A payload from a newer RDB version than we load, or whose checksum does
/// not match, is a [`RdbError::BadHeader`] / [`RdbError::Checksum`] (RESTORE
/// answers "DUMP payload version or checksum are wrong"); a malformed value,
/// trailing bytes or an empty collection is [`RdbError::Corrupt`] ("Bad data
/// format").
pub fn decode_dump_payload(payload: &[u8], limits: &EncodingLimits) -> Result<Value, RdbError> {
    verify_dump_payload(payload)?;
    decode_dump_body(&payload[..payload.len() - 10], limits)
}

/// The libraries' code in a FUNCTION DUMP payload (checked by the caller:
/// `verify_dump_payload`): RDB_OPCODE_FUNCTION2 records, each a string.
pub(crate) fn decode_function_payload(payload: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut s = Src::new(&payload[..payload.len() - 10]);
    let mut out = Vec::new();
    while !s.r.is_empty() {
        let t = s.u8().map_err(|_| "can not read data type")?;
        if t != opcode::FUNCTION2 && t != opcode::FUNCTION_PRE_GA {
            return Err("given type is not a function".into());
        }
        let bad = |_| "failed loading the given functions payload".to_string();
        if t == opcode::FUNCTION_PRE_GA {
            s.string().map_err(bad)?;
            s.string().map_err(bad)?;
            if s.len().map_err(bad)? != 0 {
                s.string().map_err(bad)?;
            }
        }
        out.push(s.string().map_err(bad)?);
    }
    Ok(out)
}

/// The footer checks only (Redis's verifyDumpPayload).
pub(crate) fn verify_dump_payload(payload: &[u8]) -> Result<(), RdbError> {
    if payload.len() < 10 {
        return Err(RdbError::BadHeader("DUMP payload too short".into()));
    }
    let footer = &payload[payload.len() - 10..];
    let ver = u16::from_le_bytes([footer[0], footer[1]]);
    if ver > RDB_VERSION_MAX_LOAD {
        return Err(RdbError::BadHeader(format!("DUMP payload version {ver}")));
    }
    if SKIP_CHECKSUM_VALIDATION.load(Relaxed) {
        return Ok(());
    }
    let expected = u64::from_le_bytes(footer[2..].try_into().expect("8"));
    let computed = CRC.checksum(&payload[..payload.len() - 8]);
    if expected != computed {
        return Err(RdbError::Checksum { expected, computed });
    }
    Ok(())
}

/// The type byte and value of a payload without its footer.
fn decode_dump_body(body: &[u8], limits: &EncodingLimits) -> Result<Value, RdbError> {
    let mut s = Src::new(body);
    let t = s.u8()?;
    let value = read_value(&mut s, t, b"", &Lim::of(limits))?
        .ok_or_else(|| corrupt("empty collection in DUMP payload"))?;
    if !s.r.is_empty() {
        return Err(corrupt("trailing bytes in DUMP payload"));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A KEYDB.CRON job as KeyDB writes it (type 64: script, start,
    /// interval, keys, args) loads as a repeating job owned by no node,
    /// due one interval after its start; ours (type 65) round-trips whole.
    #[test]
    fn cron_jobs_keydbs_and_ours() {
        use super::super::encode::{dump_payload, write_len, write_string};
        use crate::keyspace::cron::CronJob;
        let mut body = vec![types::CRON_KEYDB];
        write_string(&mut body, b"redis.call('incr', KEYS[1])", false);
        body.extend_from_slice(&1_000u64.to_le_bytes());
        body.extend_from_slice(&500u64.to_le_bytes());
        write_len(&mut body, 1);
        write_string(&mut body, b"k", false);
        write_len(&mut body, 1);
        write_string(&mut body, b"7", false);
        let Value::Cron(job) = decode_dump_body(&body, &EncodingLimits::defaults()).unwrap() else {
            panic!("not a job")
        };
        let want = CronJob {
            script: b"redis.call('incr', KEYS[1])".to_vec(),
            start_ms: 1_000,
            interval_ms: 500,
            next_ms: 1_500,
            single: false,
            keys: vec![b"k".to_vec()],
            args: vec![b"7".to_vec()],
            owner: 0,
        };
        assert_eq!(*job, want);
        let ours = CronJob {
            next_ms: 9_999,
            single: true,
            owner: 0xfeed,
            ..want
        };
        let payload = dump_payload(&Value::Cron(Box::new(ours.clone())), false);
        let Value::Cron(back) = decode_dump_payload(&payload, &EncodingLimits::defaults()).unwrap()
        else {
            panic!("not a job")
        };
        assert_eq!(*back, ours);
    }

    #[test]
    fn leading_aux_stops_at_the_first_other_record() {
        use super::super::encode::{write_aux, write_header, write_select_db};
        let mut f = Vec::new();
        write_header(&mut f);
        write_aux(&mut f, b"redis-ver", b"7.0.0");
        write_aux(&mut f, b"lattice-node-id", b"00000000000000ff");
        write_select_db(&mut f, 0, 1, 0);
        write_aux(&mut f, b"later", b"not read");
        let aux = leading_aux(&f[..]).unwrap();
        assert_eq!(
            aux,
            vec![
                (b"redis-ver".to_vec(), b"7.0.0".to_vec()),
                (b"lattice-node-id".to_vec(), b"00000000000000ff".to_vec()),
            ]
        );
        assert!(leading_aux(&b"NOTREDIS0"[..]).is_err());
    }

    fn limits() -> EncodingLimits {
        EncodingLimits::defaults()
    }

    fn payload(body: &[u8]) -> Vec<u8> {
        let mut p = body.to_vec();
        p.extend_from_slice(&10u16.to_le_bytes());
        let crc = CRC.checksum(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    }

    #[test]
    fn strings_and_errors() {
        let l = limits();
        let v = decode_dump_payload(&payload(&[0, 3, b'a', b'b', b'c']), &l).unwrap();
        assert_eq!(v, Value::string(b"abc"));
        let v = decode_dump_payload(&payload(&[0, 0xC0, 0xFB]), &l).unwrap();
        assert_eq!(v, Value::string(b"-5"));
        let mut p = payload(&[0, 1, b'x']);
        let n = p.len();
        p[n - 1] ^= 1;
        assert!(matches!(
            decode_dump_payload(&p, &l),
            Err(RdbError::Checksum { .. })
        ));
        assert!(decode_dump_payload(&payload(&[0, 5, b'x']), &l).is_err());
        assert!(decode_dump_payload(&payload(&[2, 2, 1, b'1', 1, b'1']), &l).is_err());
        assert!(decode_dump_payload(&payload(&[2, 0]), &l).is_err());
    }

    #[test]
    fn file_with_aux_versions() {
        let mut f = b"REDIS0010".to_vec();
        f.extend_from_slice(&[opcode::AUX, 16]);
        f.extend_from_slice(AUX_VERSIONS);
        f.push(8);
        f.extend_from_slice(&42u64.to_le_bytes());
        f.extend_from_slice(&[opcode::SELECTDB, 3, opcode::EXPIRETIME_MS]);
        f.extend_from_slice(&1234u64.to_le_bytes());
        f.extend_from_slice(&[0, 1, b'k', 1, b'v', opcode::EOF]);
        let crc = CRC.checksum(&f);
        f.extend_from_slice(&crc.to_le_bytes());
        let l = limits();
        let opts = LoadOpts {
            on_resize: None,
            on_aux: None,
            limits: &l,
            verify_checksum: true,
        };
        let mut got = Vec::new();
        let sum = load(&f[..], &opts, &mut |k| {
            got.push(k);
            Ok(())
        })
        .unwrap();
        assert_eq!(sum.keys, 1);
        assert_eq!(got[0].db, 3);
        assert_eq!(got[0].expire_at_ms, 1234);
        assert_eq!(got[0].version, Some(42));
        for cut in 0..f.len() {
            assert!(load(&f[..cut], &opts, &mut |_| Ok(())).is_err());
        }
    }

    #[test]
    fn file_with_tombstones_and_a_flush_stamp() {
        use super::super::encode::{push_tombstone, write_aux, write_header, write_select_db};
        let mut f = Vec::new();
        write_header(&mut f);
        write_select_db(&mut f, 2, 0, 0);
        write_aux(&mut f, AUX_FLUSHED, b"77");
        let mut v = Vec::new();
        push_tombstone(&mut v, b"gone", 99);
        push_tombstone(&mut v, b"", 100);
        write_aux(&mut f, AUX_TOMBSTONES, &v);
        f.push(opcode::EOF);
        let crc = CRC.checksum(&f);
        f.extend_from_slice(&crc.to_le_bytes());
        let l = limits();
        let opts = LoadOpts {
            on_resize: None,
            on_aux: None,
            limits: &l,
            verify_checksum: true,
        };
        let sum = load(&f[..], &opts, &mut |_| Ok(())).unwrap();
        assert_eq!(sum.flushed, vec![(2, 77)]);
        assert_eq!(
            sum.tombstones,
            vec![(2, b"gone".to_vec(), 99), (2, vec![], 100)]
        );
        assert!(sum.aux.is_empty());
        // A cut inside a tombstone (the first is 16 bytes) is a corrupt field.
        for cut in (1..v.len()).filter(|&c| c != 16) {
            let mut g = Vec::new();
            write_header(&mut g);
            write_aux(&mut g, AUX_TOMBSTONES, &v[..cut]);
            g.push(opcode::EOF);
            g.extend_from_slice(&[0; 8]);
            assert!(load(&g[..], &opts, &mut |_| Ok(())).is_err(), "{cut}");
        }
        let mut g = Vec::new();
        write_header(&mut g);
        write_aux(&mut g, AUX_FLUSHED, b"x1");
        g.push(opcode::EOF);
        g.extend_from_slice(&[0; 8]);
        assert!(load(&g[..], &opts, &mut |_| Ok(())).is_err());
    }

    #[test]
    fn set_listpack_and_old_zsets() {
        let l = limits();
        // SET_LISTPACK (RDB 11): members "a" and 7.
        let mut lp = vec![0, 0, 0, 0, 2, 0, 0x81, b'a', 2, 7, 1, 0xFF];
        let n = lp.len() as u8;
        lp[0] = n;
        let mut body = vec![types::SET_LISTPACK, n];
        body.extend_from_slice(&lp);
        let v = decode_dump_payload(&payload(&body), &l).unwrap();
        let Value::Set(set) = v else { panic!() };
        assert!(set.contains(b"a") && set.contains(b"7") && set.len() == 2);
        // ZSET (type 3): text scores and the inf/nan markers.
        let body = [types::ZSET, 2, 1, b'a', 3, b'1', b'.', b'5', 1, b'b', 255];
        let Value::ZSet(z) = decode_dump_payload(&payload(&body), &l).unwrap() else {
            panic!()
        };
        let got: Vec<_> = z.iter().map(|(m, s)| (m.to_vec(), s)).collect();
        assert_eq!(
            got,
            vec![(b"b".to_vec(), f64::NEG_INFINITY), (b"a".to_vec(), 1.5)]
        );
        let nan = [types::ZSET, 1, 1, b'a', 253];
        assert!(decode_dump_payload(&payload(&nan), &l).is_err());
        // ZSET_2: binary doubles.
        let mut body = vec![types::ZSET_2, 1, 1, b'm'];
        body.extend_from_slice(&2.25f64.to_le_bytes());
        let Value::ZSet(z) = decode_dump_payload(&payload(&body), &l).unwrap() else {
            panic!()
        };
        assert_eq!(z.score(b"m"), Some(2.25));
    }
}
