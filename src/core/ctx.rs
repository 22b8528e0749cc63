//! `Ctx`: what a command handler may use while it executes one command —
//! the core, the way up (`Admin`), its client's state, the reply buffer,
//! the worker's clock and counters. How a handler reports its writes
//! (`propagate`), opens keys (`open`) and notifies lives with the commands
//! (`commands/mod.rs`, `commands/access.rs`), in further `impl Ctx` blocks.

use std::sync::atomic::Ordering::Relaxed;

use super::admin::Admin;
use super::client::ClientState;
use super::stats::WorkerStats;
use super::Core;
use crate::keyspace::hlc::Hlc;
use crate::protocol::{Args, ReplyBuf};

/// What a handler may use while executing one command.
pub struct Ctx<'a> {
    /// What data commands share (keyspace, config, registries).
    pub core: &'a Core,
    /// Persistence, replication and the server, for the commands that
    /// reach them (see `core/admin.rs`).
    pub admin: &'a dyn Admin,
    pub client: &'a mut ClientState,
    pub out: &'a mut ReplyBuf,
    pub clock: &'a mut Hlc,
    pub stats: &'a WorkerStats,
    /// Cached unix ms for the whole command (as Redis's `mstime` cache).
    pub now_ms: u64,
    /// When replaying an effect, the version it carries.
    pub replay_version: Option<u64>,
    /// The command as the client sent it (None when replaying): a record
    /// equal to it keeps the client's spelling of the name, as Redis
    /// propagates an unrewritten command's argv verbatim.
    pub sent: Option<Args<'a>>,
    /// Under active replication, a write command's stamp and the versions
    /// its keys had (see [`ActiveWrite`]); None otherwise.
    pub active: Option<ActiveWrite>,
}

/// What active replication needs from one write command: the versions its
/// keys had when it opened them (the bases a peer checks before applying
/// the write as it is) and the one stamp all its writes take, after every
/// one of those versions, tombstones included, so that a delete or a key
/// created again is ordered after what it replaced wherever it arrives.
#[derive(Debug, Default)]
pub struct ActiveWrite {
    /// 0 until the command opens a key or asks for a version.
    pub stamp: u64,
    /// The keys opened, end to end, and for each its span there and the
    /// version it had (after lazy expiry). Both buffers come from a
    /// per-thread pool and go back to it: no allocation per write.
    keys: Vec<u8>,
    /// (start, end, version, merged: the key merges, its record says so).
    bases: Vec<(u32, u32, u64, bool)>,
    /// The merge fact of the write about to be propagated
    /// (keyspace/merge/fact.rs): its record carries it, then it is emptied.
    pub facts: Vec<crate::effects::Fact>,
    /// The bases of the record about to be propagated, built in this
    /// buffer (commands/mod.rs, `Ctx::emit_effect`) and kept for the next.
    pub record_bases: Vec<crate::effects::Base>,
}

thread_local! {
    static POOL: std::cell::RefCell<Vec<ActiveWrite>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Drop for ActiveWrite {
    fn drop(&mut self) {
        if self.keys.capacity() == 0 || self.keys.capacity() > 4096 {
            return;
        }
        let keys = std::mem::take(&mut self.keys);
        let bases = std::mem::take(&mut self.bases);
        let facts = std::mem::take(&mut self.facts);
        let record_bases = std::mem::take(&mut self.record_bases);
        // `try_with`: the pool's own entries are dropped as their thread
        // exits (a link thread of a dropped peer), when it is gone already.
        let _ = POOL.try_with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < 4 {
                p.push(ActiveWrite {
                    stamp: 0,
                    keys,
                    bases,
                    facts,
                    record_bases,
                });
            }
        });
    }
}

impl ActiveWrite {
    /// Some for a write command when active replication is on.
    pub fn for_command(core: &Core, flags: u32) -> Option<ActiveWrite> {
        (core.active && flags & super::table::flags::WRITE != 0).then(ActiveWrite::new)
    }

    /// An empty one, with buffers from the pool when it has some.
    pub fn new() -> ActiveWrite {
        let mut a = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
        a.stamp = 0;
        a.keys.clear();
        a.bases.clear();
        a.facts.clear();
        a
    }

    /// Each key opened, with the version it had.
    pub fn bases(&self) -> impl Iterator<Item = (&[u8], u64)> {
        self.bases
            .iter()
            .map(|&(s, e, v, _)| (&self.keys[s as usize..e as usize], v))
    }

    /// [`Self::bases`], each with whether the key merges (see
    /// [`Ctx::mark_merged`]).
    pub fn bases_merged(&self) -> impl Iterator<Item = (&[u8], u64, bool)> {
        self.bases
            .iter()
            .map(|&(s, e, v, m)| (&self.keys[s as usize..e as usize], v, m))
    }

    /// Notes `key` (once) with its version.
    fn note(&mut self, key: &[u8], version: u64) {
        if self.bases().any(|(k, _)| k == key) {
            return;
        }
        let start = self.keys.len() as u32;
        self.keys.extend_from_slice(key);
        self.bases
            .push((start, self.keys.len() as u32, version, false));
    }
}

impl<'a> Ctx<'a> {
    /// The context of a command this one runs (EXEC's queued commands, a
    /// script's calls), sent as `sent`, with command flags `flags`: its
    /// client, clock and time are this command's; its reply goes to `out`
    /// (None: this command's reply buffer).
    pub fn nested<'b>(
        &'b mut self,
        out: Option<&'b mut ReplyBuf>,
        sent: Args<'b>,
        flags: u32,
    ) -> Ctx<'b> {
        Ctx {
            core: self.core,
            admin: self.admin,
            active: ActiveWrite::for_command(self.core, flags),
            client: &mut *self.client,
            out: out.unwrap_or(&mut *self.out),
            clock: &mut *self.clock,
            stats: self.stats,
            now_ms: self.now_ms,
            replay_version: None,
            sent: Some(sent),
        }
    }
}

impl Ctx<'_> {
    /// The selected database's index.
    pub fn db(&self) -> usize {
        self.client.db
    }

    /// The version stamp for a write to a key whose previous version is `prev`.
    pub fn version_after(&mut self, prev: u64) -> u64 {
        if let Some(v) = self.replay_version {
            return v;
        }
        if self.active.is_none() {
            return self.clock.after_at(prev, self.now_ms);
        }
        let stamp = self.active.as_ref().map_or(0, |a| a.stamp);
        if stamp > prev {
            return stamp;
        }
        let s = self.active_stamp_after(prev);
        if let Some(a) = &mut self.active {
            a.stamp = s;
        }
        s
    }

    /// Under active replication, a fresh stamp after `prev` and the
    /// node's stamp floor; a stamp ahead of the wall clock raises the floor
    /// (HLC's receive rule), so that every later stamp follows it.
    pub fn active_stamp_after(&mut self, prev: u64) -> u64 {
        let floor = self.core.stamp_floor.load(Relaxed);
        let s = self.clock.after_at(prev.max(floor), self.now_ms);
        if crate::keyspace::hlc::stamp_ms(s) > self.now_ms {
            self.core.stamp_floor.fetch_max(s, Relaxed);
        }
        s
    }

    /// A version stamp for a write that does not replace an existing key
    /// (under active replication: the command's stamp, which follows the
    /// versions of every key it opened).
    pub fn new_version(&mut self) -> u64 {
        if let Some(v) = self.replay_version {
            return v;
        }
        match self.active.as_ref().map(|a| a.stamp) {
            Some(0) => {
                let s = self.active_stamp_after(0);
                if let Some(a) = &mut self.active {
                    a.stamp = s;
                }
                s
            }
            Some(s) => s,
            None => self.clock.now_at(self.now_ms),
        }
    }

    /// Under active replication: marks `key` (opened already) as one whose
    /// state merges (a counter, `keyspace/merge.rs`): its record tells the
    /// peers to merge its state rather than replay the write.
    pub fn mark_merged(&mut self, key: &[u8]) {
        let Some(a) = &mut self.active else {
            return;
        };
        let keys = &a.keys;
        let found = (a.bases.iter_mut()).find(|b| &keys[b.0 as usize..b.1 as usize] == key);
        if let Some(b) = found {
            b.3 = true;
        }
    }

    /// Under active replication, the version `key` had when this write
    /// command opened it (None: not opened, or not active).
    pub fn base_of(&self, key: &[u8]) -> Option<u64> {
        let a = self.active.as_ref()?;
        a.bases().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Under active replication: notes that this write command opened
    /// `key`, whose version was `version`, and returns the command's stamp
    /// (after it); 0 when active replication is off or this is no write.
    pub fn note_base(&mut self, key: &[u8], version: u64) -> u64 {
        let Some(a) = &mut self.active else {
            return 0;
        };
        a.note(key, version);
        let stamp = a.stamp;
        let s = match self.replay_version {
            Some(v) => v,
            None if stamp > version => stamp,
            None => self.active_stamp_after(version),
        };
        if let Some(a) = &mut self.active {
            a.stamp = s;
        }
        s
    }
}
