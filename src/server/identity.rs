//! This node's identity (docs/ACTIVE-ACTIVE-DESIGN.md, "Identity"): a 64-bit node
//! id drawn once and kept in every RDB file we write (aux field
//! `lattice-node-id`, hex), and the 10-bit slot the HLC stamps carry
//! (`Core::node_id`), derived from the id unless `node-slot` sets it.
//!
//! The slot must be known before the first clock exists (connections are
//! served while the data loads), so start-up reads the id from the RDB
//! file's leading aux fields before the server is built ([`resolve`]), rather
//! than after the load through `Hooks::rdb_aux_loaded`. The `node-id`
//! directive, when set, wins over the file.

use std::sync::atomic::Ordering::Relaxed;

use super::hooks::Hooks;
use super::Server;
use crate::config::Config;
use crate::keyspace::hlc::NODE_BITS;

/// The aux field carrying the node id.
pub(crate) const AUX_NODE_ID: &str = "lattice-node-id";

/// The node id and the slot its stamps carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub node_id: u64,
    pub slot: u64,
}

impl Identity {
    /// `node_id` with the slot `node-slot` asks for (negative: derived).
    pub fn new(node_id: u64, node_slot: i64) -> Identity {
        let slot = u64::try_from(node_slot).unwrap_or_else(|_| derive_slot(node_id));
        Identity { node_id, slot }
    }

    /// A fresh random id, the slot derived from it.
    pub fn random() -> Identity {
        Identity::new(random_id(), -1)
    }

    /// The id as INFO and the RDB show it.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.node_id)
    }
}

/// The slot of a node id: a fixed hash (splitmix64's finalizer, the same
/// on every build and platform) mod 1024.
pub(crate) fn derive_slot(node_id: u64) -> u64 {
    let mut z = node_id;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z % (1 << NODE_BITS)
}

/// 64 random bits, never 0.
fn random_id() -> u64 {
    loop {
        let id = u64::from_str_radix(&super::random_hex(16), 16).unwrap_or(0);
        if id != 0 {
            return id;
        }
    }
}

/// A node id from hex (the aux field's value); None if malformed or 0.
pub(crate) fn parse_id(hex: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(hex).ok()?;
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok().filter(|&id| id != 0)
}

/// The id saved in the RDB file at `path`, if it has one.
fn saved_id(path: &str) -> Option<u64> {
    let f = std::fs::File::open(path).ok()?;
    let aux = crate::persistence::rdb::decode::leading_aux(std::io::BufReader::new(f)).ok()?;
    aux.iter()
        .find(|(k, _)| k == AUX_NODE_ID.as_bytes())
        .and_then(|(_, v)| parse_id(v))
}

/// The id saved in the AOF's base, where it is an RDB file (the AOF is
/// what the node loads when `appendonly` is on, and a rewrite's base
/// carries the id as a snapshot does).
fn aof_saved_id(config: &Config) -> Option<u64> {
    let dir = std::path::PathBuf::from(config.get_str("appenddirname"));
    let manifest =
        crate::persistence::aof::manifest::load(&dir, &config.get_str("appendfilename")).ok()??;
    let base = manifest.base?;
    saved_id(dir.join(&base.name).to_str()?)
}

/// At start-up: the `node-id` directive, else the id in the files the node
/// loads (the AOF's base where `appendonly` is on, then `dbfilename`),
/// else a fresh one; the slot from `node-slot`, else derived. And whether
/// the id is fresh (drawn now): then no peer can know this node from before.
pub(crate) fn resolve(config: &Config) -> (Identity, bool) {
    let configured = config.get_str("node-id");
    let aof = || (config.get_str("appendonly") == "yes").then(|| aof_saved_id(config))?;
    let known = parse_id(configured.as_bytes())
        .or_else(aof)
        .or_else(|| saved_id(&config.get_str("dbfilename")));
    let slot = config.get_str("node-slot").parse().unwrap_or(-1);
    (
        Identity::new(known.unwrap_or_else(random_id), slot),
        known.is_none(),
    )
}

/// Writes the node id into every RDB file we keep, not into a full sync's
/// payload: a replica renames that payload to its `dbfilename`, and would
/// take its master's id at its next start.
pub(crate) struct IdentityHooks;

pub(crate) static HOOKS: IdentityHooks = IdentityHooks;

impl Hooks for IdentityHooks {
    fn rdb_aux(&self, srv: &Server) -> Vec<(String, String)> {
        // Set at the cut of a snapshot for replicas, before this is called.
        if srv.persist.snapshot.for_replicas.load(Relaxed) {
            return Vec::new();
        }
        vec![(AUX_NODE_ID.to_string(), srv.identity.hex())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_is_derived_unless_set() {
        let a = Identity::new(0x1234_5678_9abc_def0, -1);
        assert!(a.slot < 1024);
        assert_eq!(a.slot, derive_slot(0x1234_5678_9abc_def0));
        assert_eq!(Identity::new(0x1234_5678_9abc_def0, 7).slot, 7);
    }

    #[test]
    fn parse_id_accepts_hex_only() {
        assert_eq!(parse_id(b"00000000000000ff"), Some(255));
        assert_eq!(parse_id(b"ff"), Some(255));
        assert_eq!(parse_id(b"0"), None);
        assert_eq!(parse_id(b"xyz"), None);
        assert_eq!(parse_id(b"+ff"), None);
        assert_eq!(parse_id(b"11112222333344445"), None);
        assert_eq!(parse_id(b""), None);
    }

    #[test]
    fn random_ids_differ() {
        assert_ne!(Identity::random().node_id, Identity::random().node_id);
    }
}
