//! The RDB format: constants shared by the writer (`encode.rs`) and the loader
//! (`decode.rs`), and the error type.
//!
//! We write RDB version 10 (Redis 7.0's), using only the types 7.0 knows, so
//! that every Redis 7.x loads our files and RESTOREs our DUMP payloads; we load
//! versions 1 to 11 (11 is Redis 7.2's, which adds listpack-encoded sets). See
//! docs/DECISIONS.md.
//!
//! Per-key HLC versions: before a batch of keys the writer may put an aux field
//! named [`AUX_VERSIONS`] whose value is the batch's versions as little-endian
//! u64s, in key order. Redis skips unknown aux fields (it logs them at debug
//! level); our loader gives each following key the next version of the batch,
//! and a fresh stamp to keys without one.
//!
//! Active replication's deletions (docs/DECISIONS.md 41), written only by a
//! node with `active-replica`/`multi-master` on, so a plain node's files
//! are unchanged: after a database's SELECTDB, [`AUX_FLUSHED`] holds the
//! stamp of its last FLUSHDB/FLUSHALL (decimal), and after its keys, one or
//! more [`AUX_TOMBSTONES`] fields hold its tombstones, each
//! `<stamp: u64 LE><key length: u32 LE><key>`, repeated. Both apply to the
//! database the last SELECTDB chose. Redis 7.0's loader skips unknown aux
//! fields wherever they are (rdbLoadRioWithLoadingCtx), so it loads these
//! files with the same keys.

pub(crate) mod encode;
pub(crate) mod stream;

/// Version we write.
pub(crate) const RDB_VERSION: u16 = 10;
/// Newest version we load.
pub(crate) const RDB_VERSION_MAX_LOAD: u16 = 11;

/// Aux field carrying the versions of the keys that follow it.
pub(crate) const AUX_VERSIONS: &[u8] = b"lattice-versions";

/// Aux field carrying tombstones of the selected database (active
/// replication).
pub(crate) const AUX_TOMBSTONES: &[u8] = b"lattice-tombs";

/// Aux field carrying the stamp of the selected database's last flush
/// (active replication).
pub(crate) const AUX_FLUSHED: &[u8] = b"lattice-flushed";

/// Aux field carrying the merge state of keys of the selected database
/// that merge instead of the last writer winning (active replication,
/// `keyspace/merge.rs`): `<key length: u32 LE><key><state length: u32
/// LE><state>`, repeated; written after the database's keys, like
/// [`AUX_TOMBSTONES`], and in fields of at most [`TOMBSTONES_PER_AUX`]
/// bytes too.
pub(crate) const AUX_MERGE: &[u8] = b"lattice-merge";

/// KeyDB's member TTLs (its rdb.cpp, read for the format): after a key's
/// record, one pair of aux fields per member TTL, the member then its
/// deadline in unix ms as decimal text; a loader applies them to the key
/// just read (`keyspace/member_ttl.rs`). Redis ignores unknown aux fields.
pub(crate) const AUX_SUBEXPIRE_KEY: &[u8] = b"keydb-subexpire-key";
pub(crate) const AUX_SUBEXPIRE_WHEN: &[u8] = b"keydb-subexpire-when";

/// Bytes of tombstones per [`AUX_TOMBSTONES`] field, at most (one field
/// may exceed it by one tombstone).
pub(crate) const TOMBSTONES_PER_AUX: usize = 64 * 1024;

/// Value types (the byte before a key).
pub(crate) mod types {
    pub(crate) const STRING: u8 = 0;
    pub(crate) const LIST: u8 = 1;
    pub(crate) const SET: u8 = 2;
    pub(crate) const ZSET: u8 = 3;
    pub(crate) const HASH: u8 = 4;
    pub(crate) const ZSET_2: u8 = 5;
    pub(crate) const MODULE_PRE_GA: u8 = 6;
    pub(crate) const MODULE_2: u8 = 7;
    pub(crate) const HASH_ZIPMAP: u8 = 9;
    pub(crate) const LIST_ZIPLIST: u8 = 10;
    pub(crate) const SET_INTSET: u8 = 11;
    pub(crate) const ZSET_ZIPLIST: u8 = 12;
    pub(crate) const HASH_ZIPLIST: u8 = 13;
    pub(crate) const LIST_QUICKLIST: u8 = 14;
    pub(crate) const STREAM_LISTPACKS: u8 = 15;
    pub(crate) const HASH_LISTPACK: u8 = 16;
    pub(crate) const ZSET_LISTPACK: u8 = 17;
    pub(crate) const LIST_QUICKLIST_2: u8 = 18;
    pub(crate) const STREAM_LISTPACKS_2: u8 = 19;
    pub(crate) const SET_LISTPACK: u8 = 20;
    pub(crate) const STREAM_LISTPACKS_3: u8 = 21;
    /// KeyDB's KEYDB.CRON job (its rdb.h RDB_TYPE_CRON): script, start
    /// and interval (ms, 8 bytes little-endian each), the keys, the args.
    pub(crate) const CRON_KEYDB: u8 = 64;
    /// LatticeDB's: KeyDB's fields, then the next run (ms), a flags byte
    /// (1: single-shot) and the owner node id (8 bytes LE): KeyDB's own
    /// record keeps neither (DECISIONS 110).
    pub(crate) const CRON: u8 = 65;
}

/// Opcodes that are not value types.
pub(crate) mod opcode {
    pub(crate) const FUNCTION2: u8 = 245;
    pub(crate) const FUNCTION_PRE_GA: u8 = 246;
    pub(crate) const MODULE_AUX: u8 = 247;
    pub(crate) const IDLE: u8 = 248;
    pub(crate) const FREQ: u8 = 249;
    pub(crate) const AUX: u8 = 250;
    pub(crate) const RESIZEDB: u8 = 251;
    pub(crate) const EXPIRETIME_MS: u8 = 252;
    pub(crate) const EXPIRETIME: u8 = 253;
    pub(crate) const SELECTDB: u8 = 254;
    pub(crate) const EOF: u8 = 255;
}

/// Length encoding: the top two bits of the first byte.
pub(crate) mod len {
    pub(crate) const BITS_14: u8 = 1;
    /// 0x80: a 32-bit big-endian length follows; 0x81: a 64-bit one.
    pub(crate) const LEN_32: u8 = 0x80;
    pub(crate) const LEN_64: u8 = 0x81;
    /// Top bits 11: a specially encoded string, kind in the low six bits.
    pub(crate) const ENCVAL: u8 = 3;
    pub(crate) const ENC_INT8: u8 = 0;
    pub(crate) const ENC_INT16: u8 = 1;
    pub(crate) const ENC_INT32: u8 = 2;
    pub(crate) const ENC_LZF: u8 = 3;
}

/// Quicklist 2 node containers.
pub(crate) const QUICKLIST_NODE_PLAIN: u64 = 1;
pub(crate) const QUICKLIST_NODE_PACKED: u64 = 2;

/// Module value opcodes (to skip module aux data without the module).
pub(crate) mod module_opcode {
    pub(crate) const EOF: u64 = 0;
    pub(crate) const SINT: u64 = 1;
    pub(crate) const UINT: u64 = 2;
    pub(crate) const FLOAT: u64 = 3;
    pub(crate) const DOUBLE: u64 = 4;
    pub(crate) const STRING: u64 = 5;
}

/// CRC-64/Jones as Redis computes it (crc64.c), over the whole file up to the
/// checksum, and over a DUMP payload up to its checksum.
pub const CRC64: crc::Crc<u64, crc::Table<16>> =
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_REDIS);

/// Why a file or payload could not be loaded.
#[derive(Debug)]
pub enum RdbError {
    Io(std::io::Error),
    /// Not an RDB file, or a version we do not know.
    BadHeader(String),
    /// The checksum at the end does not match the contents.
    Checksum {
        expected: u64,
        computed: u64,
    },
    /// A type we cannot hold (streams, modules).
    Unsupported(String),
    /// Anything malformed; the text says what and where.
    Corrupt(String),
}

impl std::fmt::Display for RdbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RdbError::Io(e) => write!(f, "I/O error: {e}"),
            RdbError::BadHeader(s) => write!(f, "bad RDB header: {s}"),
            RdbError::Checksum { expected, computed } => write!(
                f,
                "Wrong RDB checksum expected: ({expected:x}) got: ({computed:x}). RDB CRC error"
            ),
            RdbError::Unsupported(s) => write!(f, "unsupported: {s}"),
            RdbError::Corrupt(s) => write!(f, "corrupt RDB: {s}"),
        }
    }
}

impl std::error::Error for RdbError {}

impl From<std::io::Error> for RdbError {
    fn from(e: std::io::Error) -> Self {
        RdbError::Io(e)
    }
}

pub(crate) mod decode;
pub(crate) mod lzf;
pub(crate) mod packed;
