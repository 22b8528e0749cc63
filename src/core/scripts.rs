//! The script cache EVAL, EVALSHA and SCRIPT share (`scripting/`): script
//! bodies by their SHA1 (40 lower-case hex digits). Each worker thread
//! compiles the bodies into its own Lua state; SCRIPT FLUSH empties this
//! cache and bumps `generation`, so every thread drops what it compiled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;

#[derive(Default)]
pub struct ScriptCache {
    bodies: Mutex<HashMap<String, Arc<[u8]>>>,
    generation: AtomicU64,
}

impl ScriptCache {
    /// Adds `body` under `sha` (no-op when present).
    pub fn insert(&self, sha: &str, body: &[u8]) {
        let mut b = self.bodies.lock();
        if !b.contains_key(sha) {
            b.insert(sha.to_string(), body.into());
        }
    }

    pub fn get(&self, sha: &str) -> Option<Arc<[u8]>> {
        self.bodies.lock().get(sha).cloned()
    }

    pub fn contains(&self, sha: &str) -> bool {
        self.bodies.lock().contains_key(sha)
    }

    pub fn len(&self) -> usize {
        self.bodies.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SCRIPT FLUSH: forgets every script.
    pub fn flush(&self) {
        self.bodies.lock().clear();
        self.generation.fetch_add(1, Relaxed);
    }

    /// Bumped by every flush: a thread's compiled scripts of an older
    /// generation are stale.
    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }
}
