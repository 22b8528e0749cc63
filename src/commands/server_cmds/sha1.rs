//! SHA-1 for DEBUG DIGEST: Redis digests the dataset with SHA-1. The `sha1`
//! crate (a dependency already, for the scripts' SHA1HEX) uses the CPU's
//! SHA extensions where it has them; the hand-written SHA-1 this file held
//! copied each value and hashed ~5x slower (issue 29 item 3).

use sha1::{Digest, Sha1};

/// The SHA-1 of `data`.
pub(super) fn sha1(data: &[u8]) -> [u8; 20] {
    Sha1::digest(data).into()
}

/// Lower-case hex of a digest.
pub(super) fn hex(d: &[u8; 20]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }
}
