//! Client eviction (`maxmemory-clients`, Redis 7.0's evictClients): what a
//! client's memory is, the sum over the clients the limit applies to, and
//! closing the biggest clients while that sum is over the limit.
//!
//! Each connection task owns its client's buffers, so only it can measure
//! them. It publishes its share ([`ClientShared::mem_base`]: the query and
//! reply buffers' capacity, the replies it holds included, queued MULTI
//! commands, WATCHed keys, subscriptions, tracking prefixes and a fixed part,
//! [`structures`]) only when that share changes: at the end of a batch, and
//! inside one when a command's replies reallocated the reply buffer (a size
//! class change), so a request that changes nothing costs no atomic.
//! Bytes other threads push to a client (`ClientShared::pushed`: pub/sub,
//! tracking redirection, MONITOR) are published by the pusher, while a limit
//! is set.
//!
//! The [`MemBook`] keeps one atomic sum of what is published for the
//! clients it counts (normal and pub/sub clients, no-evict ones included,
//! as Redis; not a replica's feed nor the master's client). A publish adds
//! its difference (a swap of the client's counted figure, so concurrent
//! publishes of one client never drift) and, when the sum is over the limit,
//! evicts: the evictable clients, largest first, are marked evicted (gone
//! from CLIENT LIST at once, as Redis frees them), taken out of the sum and
//! woken to close through their kill channel, as CLIENT KILL does, whatever
//! worker owns them. While no limit is set nothing is published: setting
//! one republishes every client first ([`MemBook::set_limit`]). The cron
//! republishes too (`server/cron_jobs.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;

use super::client::{ClientShared, ClientState};

/// Whether any book in the process has a limit: a push checks this before
/// reaching its client's book (a plain load while client eviction is off).
static ANY_LIMIT: AtomicBool = AtomicBool::new(false);

/// A client's memory that no buffer shows: its records (state, shared
/// record, parser, channel) and its task, about Redis's `sizeof(client)`.
pub(crate) const FIXED: usize = 2048;
/// A WATCHed key's share (Redis counts its list node and watchedKey).
const WATCH_COST: usize = 48;
/// A subscription's share beyond its name (a hash set slot and the name's
/// allocation header).
const SUB_COST: usize = 40;
/// A tracking prefix's share beyond its bytes.
const PREFIX_COST: usize = 64;
/// Redis's floor for the limit: a smaller setting would leave no client
/// able to talk to the server (getClientEvictionLimit).
const MIN_LIMIT: usize = 128 * 1024;

/// The clients by id, and the memory book of client eviction.
#[derive(Default)]
pub struct MemBook {
    pub(crate) clients: Mutex<BTreeMap<u64, Arc<ClientShared>>>,
    /// The sum of the clients' `mem_counted` (signed: concurrent publishes
    /// may pass each other for a moment).
    total: AtomicI64,
    /// The limit in bytes (0: client eviction off).
    limit: AtomicUsize,
    /// INFO's `evicted_clients`.
    evicted: AtomicU64,
    /// Set once "all evictable clients evicted" was logged, until under.
    warned: AtomicBool,
    /// One eviction at a time, so two threads do not both close a client
    /// for the same excess.
    evicting: Mutex<()>,
}

/// The effective limit of `maxmemory-clients` (`setting` as the directive
/// holds it: bytes, or a percentage of `maxmemory` ending in `%`).
pub(crate) fn limit_of(setting: &str, maxmemory: u64) -> usize {
    let bytes = match setting.strip_suffix('%') {
        Some(p) if maxmemory > 0 => {
            (maxmemory as f64 * p.parse::<f64>().unwrap_or(0.0) / 100.0) as usize
        }
        Some(_) => 0,
        None => setting.parse::<usize>().unwrap_or(0),
    };
    if bytes == 0 {
        0
    } else {
        bytes.max(MIN_LIMIT)
    }
}

/// The memory of a client's structures (everything but its buffers).
pub(crate) fn structures(client: &ClientState) -> usize {
    let multi = client.multi.as_ref().map_or(0, |m| m.bytes);
    let watches = client.watches.as_ref().map_or(0, |w| w.keys.len());
    let subs: usize = client.pubsub.sets.iter().map(|s| s.capacity()).sum();
    FIXED + multi + watches * WATCH_COST + subs * SUB_COST + client.tracking_prefixes * PREFIX_COST
}

/// A client's memory as CLIENT LIST's `tot-mem` shows it.
pub(crate) fn client_memory(c: &ClientShared) -> usize {
    c.mem_base.load(Relaxed) + c.pushed.load(Relaxed)
}

/// Whether client eviction may close `c` (Redis's clientEvictionAllowed).
fn evictable(c: &ClientShared) -> bool {
    if c.closing.load(Relaxed) || !c.mem_kind_counted.load(Relaxed) {
        return false;
    }
    let flags = c.flags.lock();
    !flags.contains(['e', 'S', 'M'])
}

impl MemBook {
    /// Sets the limit (0: off); a limit republishes every client, then
    /// evicts what is over.
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Relaxed);
        if bytes == 0 {
            return;
        }
        ANY_LIMIT.store(true, Relaxed);
        self.republish_all();
    }

    /// Publishes every client's current figure, then evicts (the cron's).
    pub fn republish_all(&self) {
        if self.limit() == 0 {
            return;
        }
        let all: Vec<Arc<ClientShared>> = self.clients.lock().values().cloned().collect();
        for c in &all {
            self.publish(c);
        }
        self.evict();
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    /// INFO's `evicted_clients`.
    pub fn evicted_clients(&self) -> u64 {
        self.evicted.load(Relaxed)
    }

    /// The counted sum (what the limit is compared with).
    pub fn total(&self) -> usize {
        self.total.load(Relaxed).max(0) as usize
    }

    /// Takes `c` out of the sum (it closed).
    pub(crate) fn uncount(&self, c: &ClientShared) {
        let old = c.mem_counted.swap(0, Relaxed);
        self.total.fetch_sub(old as i64, Relaxed);
    }

    /// Counts `c`'s current figure; returns whether the sum is over the limit.
    fn publish(&self, c: &ClientShared) -> bool {
        let counted = !c.closing.load(Relaxed) && c.mem_kind_counted.load(Relaxed);
        let new = if counted { client_memory(c) } else { 0 };
        let old = c.mem_counted.swap(new, Relaxed);
        if new != old {
            self.total.fetch_add(new as i64 - old as i64, Relaxed);
        }
        let limit = self.limit();
        limit != 0 && self.total() > limit
    }

    /// Closes the largest evictable clients until the sum is at most the
    /// limit (Redis's evictClients, which walks its size buckets the same
    /// way: largest first).
    pub fn evict(&self) {
        let limit = self.limit();
        if limit == 0 || self.total() <= limit {
            self.warned.store(false, Relaxed);
            return;
        }
        let _one = self.evicting.lock();
        let mut victims: Vec<(usize, Arc<ClientShared>)> = {
            let clients = self.clients.lock();
            let open = clients.values().filter(|c| evictable(c));
            open.map(|c| (c.mem_counted.load(Relaxed), c.clone()))
                .collect()
        };
        victims.sort_by_key(|v| std::cmp::Reverse(v.0));
        for (_, c) in victims {
            if self.total() <= limit {
                return;
            }
            if c.closing.swap(true, Relaxed) {
                continue;
            }
            c.evicted.store(true, Relaxed);
            crate::log_notice!(
                "Evicting client: id={} addr={} laddr={} fd={} name={} tot-mem={}",
                c.id,
                c.addr,
                c.laddr,
                c.fd,
                c.name.lock(),
                client_memory(&c)
            );
            self.uncount(&c);
            self.evicted.fetch_add(1, Relaxed);
            c.kill_now();
        }
        if self.total() > limit && !self.warned.swap(true, Relaxed) {
            crate::log_warning!("Over client maxmemory after evicting all evictable clients");
        }
    }
}

/// Publishes `c`'s figure to its book when a limit is set, and evicts what
/// is over: after a push grew its output, and when its connection's share
/// changed. Without a limit nothing is published (a plain load): setting
/// one republishes every client ([`MemBook::set_limit`]).
pub(crate) fn publish_to_book(c: &ClientShared) {
    if !ANY_LIMIT.load(Relaxed) {
        return;
    }
    if let Some(book) = c.book.upgrade() {
        if book.limit() != 0 && book.publish(c) {
            book.evict();
        }
    }
}

/// What a connection last published of its client's share.
#[derive(Default)]
pub(crate) struct Publisher {
    last: usize,
}

impl Publisher {
    /// Records the connection's share `base`; when it changed and a limit
    /// is set, publishes it and evicts what is over. Returns whether this
    /// client is closing (evicted itself, or over its output limit).
    pub(crate) fn update(&mut self, c: &ClientShared, base: usize) -> bool {
        if base != self.last {
            self.last = base;
            c.mem_base.store(base, Relaxed);
            publish_to_book(c);
        }
        c.closing.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_bytes_or_a_percentage_of_maxmemory_with_a_floor() {
        assert_eq!(limit_of("0", 0), 0);
        assert_eq!(limit_of("3000000", 0), 3_000_000);
        assert_eq!(limit_of("1", 0), MIN_LIMIT);
        assert_eq!(limit_of("7%", 6 << 20), 6 * 1048576 * 7 / 100);
        assert_eq!(limit_of("7%", 0), 0);
    }
}
