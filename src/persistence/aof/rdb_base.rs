//! RDB-format AOF parts: loading a `.base.rdb` file or an old-style AOF's
//! RDB preamble into the keyspace, and the empty RDB written as the first
//! base of a new, empty AOF.
//!
//! Decoding is `crate::persistence::rdb::decode`'s job; until it is part of
//! this build, a base in RDB format is refused with a clear error and new
//! bases are written in AOF format (see [`rdb_supported`]).

use std::io::Read;
use std::sync::Arc;

use crate::server::Server;

/// Whether RDB bases can be loaded (and so may be written).
pub fn rdb_supported() -> bool {
    false
}

/// Loads the RDB at the reader's position, leaving the reader just past
/// its checksum (an AOF tail may follow).
pub fn load(_srv: &Arc<Server>, _r: &mut impl Read) -> Result<(), String> {
    Err("this build cannot load RDB data yet (set aof-use-rdb-preamble no)".into())
}

/// An RDB file holding no keys: header, EOF opcode, CRC-64.
pub fn empty_rdb() -> Vec<u8> {
    use crate::persistence::rdb::{opcode, CRC64, RDB_VERSION};
    let mut v = format!("REDIS{RDB_VERSION:04}").into_bytes();
    v.push(opcode::EOF);
    let crc = CRC64.checksum(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    v
}
