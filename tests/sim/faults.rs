//! The simulator's faults: connections that drop (and links that
//! reconnect after their pause), partitions and heals, restarts from the
//! node's saved RDB, and clock skew.

use rand::Rng;

use super::check;
use super::net::{self, Pipe};
use super::node::Node;
use super::Sim;

/// Skew drawn for a node: within a third of `active-max-clock-skew`
/// (60 s) each way, so that two nodes never differ by more than it.
pub(super) const MAX_SKEW_MS: i64 = 20_000;

impl Sim {
    /// Whether `a` and `b` are on two sides of a partition.
    fn is_cut(&self, a: usize, b: usize) -> bool {
        self.cut.contains(&(a.min(b), a.max(b)))
    }

    /// Connects pipe `p` if it has no connection, its link's pause is
    /// over and no partition is in the way.
    pub(super) fn reconnect(&mut self, p: usize) {
        let pipe = &self.pipes[p];
        let (server, puller) = (pipe.server, pipe.puller);
        if pipe.conn.is_some() || self.now < pipe.retry_at || self.is_cut(server, puller) {
            return;
        }
        let (s, l) = (&self.nodes[server], &self.nodes[puller]);
        match net::connect(s, l, &pipe.st, self.now) {
            Ok(c) => {
                let kind = c.feed.answer().split(' ').next().unwrap_or("").to_string();
                self.pipes[p].conn = Some(c);
                self.note(format!("n{puller} connects to n{server}: {kind}"));
            }
            Err(e) => {
                self.pipes[p].retry_at = self.now + 1000;
                self.report.refusals += 1;
                self.note(format!("n{puller} refused by n{server}: {e}"));
            }
        }
    }

    /// Ends pipe `p`'s connection; its link tries again in a second.
    pub(super) fn disconnect(&mut self, p: usize) {
        let now = self.now;
        let pipe = &mut self.pipes[p];
        if let Some(c) = pipe.conn.take() {
            let (s, l) = (&self.nodes[pipe.server], &self.nodes[pipe.puller]);
            net::disconnect(s, l, &pipe.st, c, now);
        }
        pipe.retry_at = now + 1000;
    }

    /// A random connection drops.
    pub(super) fn drop_one(&mut self) {
        let open: Vec<usize> = (0..self.pipes.len())
            .filter(|&p| self.pipes[p].conn.is_some())
            .collect();
        if open.is_empty() {
            return;
        }
        let p = open[self.rng.gen_range(0..open.len())];
        let lost = self.pipes[p].in_flight();
        self.disconnect(p);
        self.report.drops += 1;
        let (s, l) = (self.pipes[p].server, self.pipes[p].puller);
        self.note(format!(
            "connection n{s}->n{l} drops ({lost} messages lost)"
        ));
    }

    /// A random set of nodes is cut off from the others.
    pub(super) fn partition(&mut self) {
        let n = self.nodes.len();
        let side: Vec<bool> = (0..n).map(|_| self.rng.gen_bool(0.5)).collect();
        if side.iter().all(|&s| s) || side.iter().all(|&s| !s) {
            return;
        }
        for a in 0..n {
            for b in a + 1..n {
                if side[a] != side[b] {
                    self.cut.insert((a, b));
                }
            }
        }
        for p in 0..self.pipes.len() {
            if self.is_cut(self.pipes[p].server, self.pipes[p].puller) {
                self.disconnect(p);
            }
        }
        self.report.partitions += 1;
        let group: Vec<usize> = (0..n).filter(|&i| side[i]).collect();
        self.note(format!("partition: {group:?} apart"));
    }

    pub(super) fn heal(&mut self) {
        if !self.cut.is_empty() {
            self.cut.clear();
            self.note("partitions heal");
        }
    }

    /// A random node stops (saving its RDB, as SHUTDOWN does) and starts
    /// again from it: its connections end, its links come back with the
    /// positions the file holds.
    pub(super) fn restart(&mut self) -> Result<(), String> {
        let i = self.rng.gen_range(0..self.nodes.len());
        self.nodes[i].enter(self.now);
        let rdb = self.nodes[i].save();
        let before = check::dump(&self.nodes[i].srv);
        for p in 0..self.pipes.len() {
            if self.pipes[p].server == i || self.pipes[p].puller == i {
                self.disconnect(p);
            }
        }
        let old = &self.nodes[i];
        let (identity, skew, inc) = (old.identity, old.skew, old.incarnation);
        let mut node = Node::start(i, identity, skew, self.now, Some(&rdb));
        node.incarnation = inc + 1;
        self.nodes[i] = node;
        self.applied.reset(i);
        for p in 0..self.pipes.len() {
            if self.pipes[p].puller == i {
                self.pipes[p].st = Pipe::link_state(&self.nodes[i], self.pipes[p].server);
            }
        }
        self.history
            .note_load_deletions(&self.nodes[i], &before, self.event);
        self.report.restarts += 1;
        self.note(format!("n{i} restarts from its RDB ({} bytes)", rdb.len()));
        Ok(())
    }

    /// A random node's clock jumps (within the bound, or back to true).
    pub(super) fn skew(&mut self) {
        let i = self.rng.gen_range(0..self.nodes.len());
        let skew = if self.rng.gen_bool(0.3) {
            0
        } else {
            self.rng.gen_range(-MAX_SKEW_MS..=MAX_SKEW_MS)
        };
        let was = self.now.saturating_add_signed(self.nodes[i].skew);
        self.peak_clock = self.peak_clock.max(was);
        self.nodes[i].skew = skew;
        self.note(format!("n{i}'s clock is now {skew} ms off"));
    }
}
