//! The pub/sub registry shared by every worker thread (Redis's
//! `server.pubsub_channels` / `pubsub_patterns` / `pubsubshard_channels`).
//!
//! A connection's subscriptions are recorded twice: in its own
//! [`ClientSubs`] (owned by its task, used for replies' counts, UNSUBSCRIBE
//! without arguments and clean-up at disconnect) and here, name → the
//! subscribed clients' [`ClientShared`] handles. PUBLISH on any thread takes
//! the read lock, encodes the message once per protocol version, and queues
//! it through each subscriber's push channel ([`ClientShared::push`]), which
//! wakes the subscriber's own task to write it. That push enforces the
//! `client-output-buffer-limit pubsub` class, so a subscriber that does not
//! read is disconnected instead of growing without bound; its task then
//! removes it from here ([`PubSub::remove_client`]).
//!
//! Lock order: nothing here takes a keyspace shard lock, so keyspace
//! notifications may publish while their command holds shard locks.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use hashbrown::{HashMap, HashSet};
use parking_lot::RwLock;

use super::client::{ClientShared, ObufLimit, PushBuf};
use crate::protocol::ReplyBuf;

/// The three subscription namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
    Shard,
}

impl Kind {
    pub fn index(self) -> usize {
        self as usize
    }
    /// The reply tag of a subscription.
    pub fn sub_tag(self) -> &'static str {
        match self {
            Kind::Channel => "subscribe",
            Kind::Pattern => "psubscribe",
            Kind::Shard => "ssubscribe",
        }
    }
    /// The reply tag of an unsubscription.
    pub fn unsub_tag(self) -> &'static str {
        match self {
            Kind::Channel => "unsubscribe",
            Kind::Pattern => "punsubscribe",
            Kind::Shard => "sunsubscribe",
        }
    }
}

/// One connection's subscriptions, owned by its task.
#[derive(Default, Debug)]
pub struct ClientSubs {
    pub sets: [HashSet<Vec<u8>>; 3],
}

impl ClientSubs {
    /// All subscriptions (the CLIENT_PUBSUB flag: subscribed mode).
    pub fn total(&self) -> usize {
        self.sets.iter().map(|s| s.len()).sum()
    }
    /// The count a (P)SUBSCRIBE reply carries: channels + patterns; shard
    /// channels are counted on their own, as in Redis.
    pub fn count_for(&self, kind: Kind) -> usize {
        match kind {
            Kind::Shard => self.sets[2].len(),
            _ => self.sets[0].len() + self.sets[1].len(),
        }
    }
}

type Subscribers = HashMap<u64, Arc<ClientShared>>;

#[derive(Default)]
struct Maps {
    by_kind: [HashMap<Vec<u8>, Subscribers>; 3],
}

/// The server-wide registry.
#[derive(Default)]
pub struct PubSub {
    maps: RwLock<Maps>,
}

/// A message encoded for RESP2 and RESP3 clients, built on first use.
struct Encoded<'a> {
    parts: &'a [&'a [u8]],
    forms: [Option<Arc<PushBuf>>; 2],
}

impl Encoded<'_> {
    fn for_resp(&mut self, resp: usize) -> Arc<PushBuf> {
        let i = (resp >= 3) as usize;
        self.forms[i]
            .get_or_insert_with(|| {
                let mut b = ReplyBuf::new(if i == 1 { 3 } else { 2 });
                b.push(self.parts.len());
                for p in self.parts {
                    b.bulk(p);
                }
                PushBuf::shared(b.buf)
            })
            .clone()
    }
}

fn deliver(subs: &Subscribers, enc: &mut Encoded, limit: &ObufLimit, now_ms: u64) -> usize {
    for c in subs.values() {
        c.push(enc.for_resp(c.resp.load(Relaxed)), limit, now_ms);
    }
    subs.len()
}

impl PubSub {
    /// Records `client` as subscribed to `name`.
    pub fn subscribe(&self, kind: Kind, name: &[u8], client: &Arc<ClientShared>) {
        let mut m = self.maps.write();
        m.by_kind[kind.index()]
            .entry(name.to_vec())
            .or_default()
            .insert(client.id, client.clone());
    }

    /// Client `id`'s subscriptions, of every kind (ACL SETUSER checks them
    /// against the user's new rules): a scan of the registry, for a rare
    /// command.
    pub fn subscriptions_of(&self, id: u64) -> Vec<(Kind, Vec<u8>)> {
        let m = self.maps.read();
        let kinds = [Kind::Channel, Kind::Pattern, Kind::Shard];
        kinds
            .into_iter()
            .flat_map(|k| {
                (m.by_kind[k.index()].iter())
                    .filter(|(_, subs)| subs.contains_key(&id))
                    .map(move |(name, _)| (k, name.clone()))
            })
            .collect()
    }

    /// Removes client `id` from `name`; empty entries are dropped.
    pub fn unsubscribe(&self, kind: Kind, name: &[u8], id: u64) {
        let mut m = self.maps.write();
        let map = &mut m.by_kind[kind.index()];
        if let Some(subs) = map.get_mut(name) {
            subs.remove(&id);
            if subs.is_empty() {
                map.remove(name);
            }
        }
    }

    /// Removes every subscription of a client (disconnect, RESET).
    pub fn remove_client(&self, subs: &mut ClientSubs, id: u64) {
        if subs.total() == 0 {
            return;
        }
        let mut m = self.maps.write();
        for (k, set) in subs.sets.iter_mut().enumerate() {
            let map = &mut m.by_kind[k];
            for name in set.drain() {
                if let Some(s) = map.get_mut(&name) {
                    s.remove(&id);
                    if s.is_empty() {
                        map.remove(&name);
                    }
                }
            }
        }
    }

    /// PUBLISH (or SPUBLISH with `shard`): delivers to the channel's
    /// subscribers and, for plain channels, to every matching pattern's.
    /// Returns the number of deliveries.
    pub fn publish(
        &self,
        shard: bool,
        channel: &[u8],
        msg: &[u8],
        limit: &ObufLimit,
        now_ms: u64,
    ) -> usize {
        let m = self.maps.read();
        let mut n = 0;
        let kind = if shard { Kind::Shard } else { Kind::Channel };
        if let Some(subs) = m.by_kind[kind.index()].get(channel) {
            let tag: &[u8] = if shard { b"smessage" } else { b"message" };
            let parts = [tag, channel, msg];
            let mut enc = Encoded {
                parts: &parts,
                forms: [None, None],
            };
            n += deliver(subs, &mut enc, limit, now_ms);
        }
        if shard {
            return n;
        }
        for (pat, subs) in &m.by_kind[Kind::Pattern.index()] {
            if !crate::glob::glob_match(pat, channel, false) {
                continue;
            }
            let parts = [&b"pmessage"[..], pat, channel, msg];
            let mut enc = Encoded {
                parts: &parts,
                forms: [None, None],
            };
            n += deliver(subs, &mut enc, limit, now_ms);
        }
        n
    }

    /// Active names of `kind` matching `pattern` (all when `None`).
    pub fn names(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let m = self.maps.read();
        m.by_kind[kind.index()]
            .keys()
            .filter(|k| pattern.is_none_or(|p| crate::glob::glob_match(p, k, false)))
            .cloned()
            .collect()
    }

    /// Subscribers of one name.
    pub fn num_subscribers(&self, kind: Kind, name: &[u8]) -> usize {
        self.maps.read().by_kind[kind.index()]
            .get(name)
            .map_or(0, |s| s.len())
    }

    /// How many distinct names of `kind` have subscribers (INFO, NUMPAT).
    pub fn count(&self, kind: Kind) -> usize {
        self.maps.read().by_kind[kind.index()].len()
    }
}
