//! The script cache EVAL, EVALSHA and SCRIPT share (`scripting/`): script
//! bodies by their SHA1 (40 lower-case hex digits), with the flags their
//! shebang declares. Each worker thread compiles the bodies into its own Lua
//! state; SCRIPT FLUSH empties this cache and bumps `generation`, so every
//! thread drops what it compiled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::RwLock;

/// A cached script: its body and its shebang's flags.
pub type Cached = (Arc<[u8]>, u32);

#[derive(Default)]
pub struct ScriptCache {
    bodies: RwLock<HashMap<String, Cached>>,
    generation: AtomicU64,
    /// Bytes of the cached bodies and their SHA1s (INFO's
    /// used_memory_scripts_eval).
    bytes: AtomicUsize,
    /// DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may call `noscript` commands.
    pub disable_deny: AtomicBool,
}

impl ScriptCache {
    /// Adds `body` with its script `flags` under `sha` (no-op when present).
    pub fn insert(&self, sha: &str, body: &[u8], flags: u32) {
        if self.bodies.read().contains_key(sha) {
            return;
        }
        let mut b = self.bodies.write();
        if !b.contains_key(sha) {
            b.insert(sha.to_string(), (body.into(), flags));
            self.bytes.fetch_add(body.len() + sha.len(), Relaxed);
        }
    }

    /// The body and flags of `sha`.
    pub fn get(&self, sha: &str) -> Option<Cached> {
        self.bodies.read().get(sha).cloned()
    }

    pub fn contains(&self, sha: &str) -> bool {
        self.bodies.read().contains_key(sha)
    }

    pub fn len(&self) -> usize {
        self.bodies.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the cached scripts take.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }

    /// SCRIPT FLUSH: forgets every script.
    pub fn flush(&self) {
        self.bodies.write().clear();
        self.bytes.store(0, Relaxed);
        self.generation.fetch_add(1, Relaxed);
    }

    /// Bumped by every flush: a thread's compiled scripts of an older
    /// generation are stale.
    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }
}
