//! RDB-format AOF parts: loading a `.base.rdb` file or an old-style AOF's
//! RDB preamble into the keyspace, and the empty RDB written as the first
//! base of a new, empty AOF.
//!
//! Decoding and inserting are `persistence::load`'s job (the RDB loader);
//! this module only adapts it to the AOF's files.

use std::io::Read;
use std::sync::Arc;

use crate::persistence::Host;

/// Whether RDB bases can be loaded (and so may be written).
pub(super) fn rdb_supported() -> bool {
    true
}

/// Loads the RDB at the reader's position, leaving the reader just past
/// its checksum (an AOF tail may follow: the decoder reads no further).
/// Returns its aux fields.
pub(super) fn load<H: Host>(srv: &Arc<H>, r: &mut impl Read) -> Result<Aux, String> {
    use crate::persistence::load::{load_reader, OnDuplicate};
    load_reader(srv, r, OnDuplicate::Fail)
        .map(|stats| stats.aux)
        .map_err(|e| e.to_string())
}

/// Aux fields (name, value), from RDB parts and `#AUX:` annotations.
pub(super) type Aux = Vec<(Vec<u8>, Vec<u8>)>;

/// An RDB file holding no keys: header, EOF opcode, CRC-64.
pub(super) fn empty_rdb() -> Vec<u8> {
    use crate::persistence::rdb::{opcode, CRC64, RDB_VERSION};
    let mut v = format!("REDIS{RDB_VERSION:04}").into_bytes();
    v.push(opcode::EOF);
    let crc = CRC64.checksum(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    v
}
