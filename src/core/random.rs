//! Random identifiers: run ids, replication ids, EOF marks.

/// Random lowercase hex (run ids), seeded from the clock and address space.
pub(crate) fn random_hex(n: usize) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::with_capacity(n);
    let state = std::collections::hash_map::RandomState::new();
    let mut i = 0u64;
    while out.len() < n {
        let mut h = state.build_hasher();
        h.write_u64(i);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        out.push_str(&format!("{:016x}", h.finish()));
        i += 1;
    }
    out.truncate(n);
    out
}
