//! Writing RDB files byte by byte, for tests that load a file another
//! server wrote (KeyDB's member expiries and cron jobs: no KeyDB binary is
//! at hand, DECISIONS 111).

/// An RDB string below 64 bytes: one length byte, then the bytes.
pub fn string(out: &mut Vec<u8>, s: &[u8]) {
    assert!(s.len() < 64);
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

/// An aux field (`RDB_OPCODE_AUX`, 0xFA): its name and value.
pub fn aux(out: &mut Vec<u8>, k: &[u8], v: &[u8]) {
    out.push(0xFA);
    string(out, k);
    string(out, v);
}
