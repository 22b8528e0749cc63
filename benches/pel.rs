//! A consumer group's pending entries at 500,000 NACKs (issue 29): the
//! structures before (a `BTreeMap<StreamId, Nack>` whose NACK owns its
//! consumer's name, and a `BTreeSet<StreamId>` per consumer) against
//! `keyspace::stream_pel::Pel` (a B-tree of IDs over a slab of NACKs,
//! each consumer's PEL a chain through them), operation by operation:
//! delivery (XREADGROUP `>`: an insert of a new, largest ID), lookup,
//! the group's range (XPENDING, XAUTOCLAIM), a consumer's range
//! (XPENDING with a consumer, XREADGROUP of history), a claim (XCLAIM to
//! another consumer), and XACK in random order.
//!
//! `cargo bench --bench pel -- [--entries N] [--consumers C] [--rounds R]`.
//! Prints ns per operation, the best of R rounds. A benchmark, not a test:
//! it asserts only that both structures agree.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use lattice::facade::keyspace::stream::StreamId;
use lattice::facade::keyspace::stream_pel::Pel;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use mimalloc::MiMalloc;

// The server's allocator.
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// The NACK before: it owns its consumer's name.
struct OldNack {
    consumer: Vec<u8>,
    delivery_time: i64,
    delivery_count: u64,
}

/// The group's pending entries before, as `keyspace::stream_groups` kept
/// them.
#[derive(Default)]
struct OldPel {
    pel: BTreeMap<StreamId, OldNack>,
    consumers: BTreeMap<Vec<u8>, BTreeSet<StreamId>>,
}

impl OldPel {
    fn deliver(&mut self, id: StreamId, consumer: &[u8], now: i64) {
        let nack = OldNack {
            consumer: consumer.to_vec(),
            delivery_time: now,
            delivery_count: 1,
        };
        self.pel.insert(id, nack);
        if let Some(c) = self.consumers.get_mut(consumer) {
            c.insert(id);
        }
    }

    fn ack(&mut self, id: StreamId) -> bool {
        let Some(n) = self.pel.remove(&id) else {
            return false;
        };
        if let Some(c) = self.consumers.get_mut(&n.consumer) {
            c.remove(&id);
        }
        true
    }

    fn reassign(&mut self, id: StreamId, consumer: &[u8]) {
        let Some(n) = self.pel.get_mut(&id) else {
            return;
        };
        if n.consumer != consumer {
            let old = std::mem::replace(&mut n.consumer, consumer.to_vec());
            if let Some(c) = self.consumers.get_mut(&old) {
                c.remove(&id);
            }
        }
        if let Some(c) = self.consumers.get_mut(consumer) {
            c.insert(id);
        }
    }
}

struct Opts {
    entries: u64,
    consumers: usize,
    rounds: usize,
}

fn opts() -> Opts {
    let mut o = Opts {
        entries: 500_000,
        consumers: 1,
        rounds: 3,
    };
    let args: Vec<String> = std::env::args().collect();
    for w in args.windows(2) {
        let n = || w[1].parse().expect("a number");
        match w[0].as_str() {
            "--entries" => o.entries = n() as u64,
            "--consumers" => o.consumers = n(),
            "--rounds" => o.rounds = n(),
            _ => {}
        }
    }
    o
}

/// Nanoseconds per operation of `f` over `ops` operations.
fn per_op(ops: usize, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64 / ops as f64
}

/// One round of every operation on one structure, ns per operation.
struct Round {
    deliver: f64,
    lookup: f64,
    group_range: f64,
    consumer_range: f64,
    claim: f64,
    ack: f64,
}

/// The IDs, the consumers' names, and the random draws both sides share.
struct Work {
    ids: Vec<StreamId>,
    names: Vec<Vec<u8>>,
    probes: Vec<StreamId>,
    claims: Vec<(StreamId, usize)>,
    acks: Vec<StreamId>,
}

fn work(o: &Opts) -> Work {
    let mut rng = StdRng::seed_from_u64(29);
    let ids: Vec<StreamId> = (0..o.entries)
        .map(|i| StreamId::new(1_700_000_000_000 + i, 0))
        .collect();
    let names = (0..o.consumers)
        .map(|c| format!("consumer-{c}").into_bytes())
        .collect();
    let pick = |rng: &mut StdRng| ids[rng.gen_range(0..ids.len())];
    let probes = (0..100_000).map(|_| pick(&mut rng)).collect();
    let claims = (0..100_000)
        .map(|_| (pick(&mut rng), rng.gen_range(0..o.consumers)))
        .collect();
    let mut acks = ids.clone();
    acks.shuffle(&mut rng);
    Work {
        ids,
        names,
        probes,
        claims,
        acks,
    }
}

const RANGES: usize = 2_000;
const RANGE_LEN: usize = 100;

/// The operations measured, on either structure; each returns what it
/// read, so the two can be checked against each other.
trait Structure: Default {
    fn add_consumer(&mut self, _name: &[u8]) {}
    fn deliver(&mut self, id: StreamId, consumer: &[u8]);
    fn lookup(&self, id: &StreamId) -> u64;
    /// The delivery times of up to RANGE_LEN entries from `from`.
    fn group_range(&self, from: StreamId) -> u64;
    fn consumer_range(&self, consumer: &[u8], from: StreamId) -> u64;
    fn claim(&mut self, id: StreamId, consumer: &[u8]);
    fn ack(&mut self, id: &StreamId) -> bool;
}

impl Structure for OldPel {
    fn add_consumer(&mut self, name: &[u8]) {
        self.consumers.insert(name.to_vec(), BTreeSet::new());
    }

    fn deliver(&mut self, id: StreamId, consumer: &[u8]) {
        OldPel::deliver(self, id, consumer, 1);
    }

    fn lookup(&self, id: &StreamId) -> u64 {
        self.pel.get(id).map_or(0, |n| n.delivery_count)
    }

    fn group_range(&self, from: StreamId) -> u64 {
        let rows = self.pel.range(from..).take(RANGE_LEN);
        rows.map(|(_, n)| n.delivery_time as u64).sum()
    }

    fn consumer_range(&self, consumer: &[u8], from: StreamId) -> u64 {
        let rows = self.consumers[consumer].range(from..).take(RANGE_LEN);
        rows.map(|id| self.pel[id].delivery_time as u64).sum()
    }

    fn claim(&mut self, id: StreamId, consumer: &[u8]) {
        self.reassign(id, consumer);
    }

    fn ack(&mut self, id: &StreamId) -> bool {
        OldPel::ack(self, *id)
    }
}

impl Structure for Pel {
    fn deliver(&mut self, id: StreamId, consumer: &[u8]) {
        self.insert(id, consumer, 1, 1);
    }

    fn lookup(&self, id: &StreamId) -> u64 {
        self.get(id).map_or(0, |n| n.delivery_count)
    }

    fn group_range(&self, from: StreamId) -> u64 {
        let rows = self.range(from..).take(RANGE_LEN);
        rows.map(|(_, n)| n.delivery_time as u64).sum()
    }

    fn consumer_range(&self, consumer: &[u8], from: StreamId) -> u64 {
        let rows = self.of_from(consumer, from).take(RANGE_LEN);
        rows.map(|(_, n)| n.delivery_time as u64).sum()
    }

    fn claim(&mut self, id: StreamId, consumer: &[u8]) {
        let n = self.get(&id).expect("pending");
        if n.consumer() != consumer {
            let (time, count) = (n.delivery_time, n.delivery_count);
            self.insert(id, consumer, time, count);
        }
    }

    fn ack(&mut self, id: &StreamId) -> bool {
        self.remove(id).is_some()
    }
}

/// One round of every operation on a fresh `S`; what it read, summed.
fn round<S: Structure>(w: &Work) -> (Round, u64) {
    let mut p = S::default();
    for n in &w.names {
        p.add_consumer(n);
    }
    let mut sum = 0u64;
    let owner = |i: usize| &w.names[i % w.names.len()];
    let deliver = per_op(w.ids.len(), || {
        for (i, id) in w.ids.iter().enumerate() {
            p.deliver(*id, owner(i));
        }
    });
    let lookup = per_op(w.probes.len(), || {
        sum += w.probes.iter().map(|id| p.lookup(id)).sum::<u64>();
    });
    let group_range = per_op(RANGES, || {
        sum += w.probes[..RANGES]
            .iter()
            .map(|id| p.group_range(*id))
            .sum::<u64>();
    });
    let consumer_range = per_op(RANGES, || {
        let first = &w.names[0];
        sum += (w.probes[..RANGES].iter())
            .map(|id| p.consumer_range(first, *id))
            .sum::<u64>();
    });
    let claim = per_op(w.claims.len(), || {
        for (id, c) in &w.claims {
            p.claim(*id, &w.names[*c]);
        }
    });
    let ack = per_op(w.acks.len(), || {
        sum += w.acks.iter().filter(|id| p.ack(id)).count() as u64;
    });
    let r = Round {
        deliver,
        lookup,
        group_range,
        consumer_range,
        claim,
        ack,
    };
    (r, sum)
}

/// One column of a round.
type Column = fn(&Round) -> f64;

fn best(rounds: &[Round], f: impl Fn(&Round) -> f64) -> f64 {
    rounds.iter().map(f).fold(f64::INFINITY, f64::min)
}

fn main() {
    let o = opts();
    let w = work(&o);
    let (mut old, mut new) = (Vec::new(), Vec::new());
    for _ in 0..o.rounds {
        let (a, sa) = round::<OldPel>(&w);
        let (b, sb) = round::<Pel>(&w);
        assert_eq!(sa, sb, "both structures answer alike");
        old.push(a);
        new.push(b);
    }
    println!(
        "{} pending entries, {} consumer(s), ns per operation (best of {}):",
        o.entries, o.consumers, o.rounds
    );
    println!("| operation | before | after | after/before |");
    println!("|---|---|---|---|");
    let rows: [(&str, Column); 6] = [
        ("deliver (insert, newest ID)", |r| r.deliver),
        ("lookup", |r| r.lookup),
        ("group range, 100 rows", |r| r.group_range),
        ("consumer range, 100 rows", |r| r.consumer_range),
        ("claim to another consumer", |r| r.claim),
        ("XACK (remove, random order)", |r| r.ack),
    ];
    for (name, f) in rows {
        let (a, b) = (best(&old, f), best(&new, f));
        println!("| {name} | {a:.0} | {b:.0} | {:.2} |", b / a);
    }
}
