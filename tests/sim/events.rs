//! The simulator's ordinary events (a client command, a feed turning its
//! stream into batches, a delivery) and its end: the drain until nothing
//! is in flight, the sweep that lets every node expire what its clock
//! says is due, and the final checks.

use rand::Rng;

use super::check::{self, World};
use super::merging;
use super::{net, Sim};
use crate::workload::{self, show};

impl Sim {
    /// A delay on the network: mostly short, now and then long.
    pub(super) fn delay(&mut self) -> u64 {
        if self.rng.gen_bool(0.1) {
            self.rng.gen_range(100..1500)
        } else {
            self.rng.gen_range(0..20)
        }
    }

    /// A step of the workload (a command, or a MULTI block) on a random
    /// node; its writes are logged as acknowledged.
    pub(super) fn client_step(&mut self) -> Result<(), String> {
        let i = self.rng.gen_range(0..self.nodes.len());
        self.nodes[i].enter(self.now);
        if self.workload == merging::Workload::Merging {
            return self.merging_step(i);
        }
        let (lines, _) = workload::step(&mut self.gen, &self.cmds, self.total);
        let from = self.nodes[i].effects_len();
        let words: Vec<&[u8]> = lines.iter().flatten().map(Vec::as_slice).collect();
        let versions = check::versions_named(&self.nodes[i].srv, self.gen.dbs, &words);
        for l in &lines {
            if let Err(e) = self.nodes[i].run(l) {
                if !workload::expected_error(&e) {
                    return Err(format!("template error: {}: {e}", show(l)));
                }
            }
        }
        let effects = self.nodes[i].effects_since(from);
        let shown: Vec<String> = lines.iter().map(|l| show(l)).collect();
        self.note(format!(
            "n{i} runs {} ({} records)",
            shown.join("; "),
            effects.len()
        ));
        self.unsent_stamps(i, effects.is_empty(), (&words, &versions))?;
        self.report.commands += lines.len();
        self.history
            .note_command(&self.nodes[i], &effects, self.event)
    }

    /// A command of the merge workload on node `i`, logged with the dots
    /// of its key before and after (`merging.rs`).
    fn merging_step(&mut self, i: usize) -> Result<(), String> {
        let line = merging::bind(&self.nodes[i].srv, merging::draw(&mut self.rng));
        let from = self.nodes[i].effects_len();
        let key = merging::observed_key(&line);
        let before = merging::observe(&self.nodes[i].srv, &key);
        let words: Vec<&[u8]> = line.iter().map(Vec::as_slice).collect();
        let versions = check::versions_named(&self.nodes[i].srv, 1, &words);
        let reply = self.nodes[i].run(&line);
        let after = merging::observe(&self.nodes[i].srv, &key);
        self.merge_log.note(&line, reply.is_ok(), (&before, &after));
        let effects = self.nodes[i].effects_since(from);
        self.note(format!(
            "n{i} runs {} ({} records)",
            show(&line),
            effects.len()
        ));
        self.unsent_stamps(i, effects.is_empty(), (&words, &versions))?;
        self.report.commands += 1;
        self.history
            .note_command(&self.nodes[i], &effects, self.event)
    }

    /// A client step on node `i` that recorded nothing (`silent`) left
    /// every key it named at the version it had (`versions`, of `words`
    /// before it ran: [`check::versions_named`]).
    fn unsent_stamps(
        &self,
        i: usize,
        silent: bool,
        (words, versions): (&[&[u8]], &[u64]),
    ) -> Result<(), String> {
        if !silent {
            return Ok(());
        }
        let dbs = versions.len() / words.len().max(1);
        let now = check::versions_named(&self.nodes[i].srv, dbs, words);
        let changed = (now.iter().zip(versions)).position(|(a, b)| a != b);
        match changed {
            None => Ok(()),
            Some(at) => Err(format!(
                "n{i} recorded nothing but moved db {} key {}'s version from {} to {}",
                at / words.len(),
                String::from_utf8_lossy(words[at % words.len()]),
                versions[at],
                now[at]
            )),
        }
    }

    /// The feed of a random connection sends what its stream has new.
    pub(super) fn pump_one(&mut self) -> Result<(), String> {
        let open: Vec<usize> = (0..self.pipes.len())
            .filter(|&p| self.pipes[p].conn.is_some())
            .collect();
        if open.is_empty() {
            return Ok(());
        }
        let p = open[self.rng.gen_range(0..open.len())];
        let due = self.now + self.delay();
        self.pump(p, due)
    }

    /// Runs pipe `p`'s feed; a feed that fails ends its connection.
    pub(super) fn pump(&mut self, p: usize, due: u64) -> Result<(), String> {
        let (now, server) = (self.now, self.pipes[p].server);
        let Some(c) = self.pipes[p].conn.as_mut() else {
            return Ok(());
        };
        match net::pump(&self.nodes[server], c, now, due) {
            Ok(0) => {}
            Ok(n) => self.note(format!(
                "feed n{server}->n{}: {n} batch(es)",
                self.pipes[p].puller
            )),
            Err(e) => {
                self.note(format!(
                    "feed n{server}->n{} ends: {e}",
                    self.pipes[p].puller
                ));
                self.disconnect(p);
            }
        }
        Ok(())
    }

    /// A random due message arrives.
    pub(super) fn deliver_one(&mut self) -> Result<(), String> {
        let now = self.now;
        let mut due: Vec<(usize, bool)> = Vec::new();
        for (i, pipe) in self.pipes.iter().enumerate() {
            if let Some(c) = &pipe.conn {
                if c.down.front().is_some_and(|m| m.due <= now) {
                    due.push((i, true));
                }
                if c.up.front().is_some_and(|m| m.due <= now) {
                    due.push((i, false));
                }
            }
        }
        if due.is_empty() {
            return Ok(());
        }
        let (p, down) = due[self.rng.gen_range(0..due.len())];
        let back = now + self.delay();
        self.deliver(p, down, back)
    }

    /// Delivers the next message of pipe `p` (`down`: to the link, else
    /// to the feed); `back`: when what the link answers arrives.
    pub(super) fn deliver(&mut self, p: usize, down: bool, back: u64) -> Result<(), String> {
        let (now, server, puller) = (self.now, self.pipes[p].server, self.pipes[p].puller);
        let Some(c) = self.pipes[p].conn.as_mut() else {
            return Ok(());
        };
        if !down {
            net::deliver_up(&self.nodes[server], c, now);
            return Ok(());
        }
        let from = self.nodes[puller].effects_len();
        let r = net::deliver_down(&self.nodes[puller], c, now, back);
        let effects = self.nodes[puller].effects_since(from);
        self.deliveries += 1;
        self.report.deliveries += 1;
        self.note(format!(
            "n{server}->n{puller} delivered: {} applied",
            effects.len()
        ));
        if self.watch.is_some() {
            for e in &effects {
                let what = format!(
                    "  n{puller} applies db {} v {}: {}",
                    e.db,
                    e.version,
                    show(&e.argv)
                );
                self.note(what);
            }
        }
        let node = (puller, &*self.nodes[puller].srv);
        self.applied.note(node, &effects, self.deliveries)?;
        if let Err(e) = r {
            self.note(format!("link n{puller}<-n{server} ends: {e}"));
            self.report.refusals += 1;
            self.disconnect(p);
        }
        Ok(())
    }

    /// Heals nothing, but runs every connection until nothing is in
    /// flight and no feed has anything new: reconnects what may, sends
    /// and delivers at once, moves time only to the next message due.
    pub(super) fn settle(&mut self) -> Result<(), String> {
        for _ in 0..20_000 {
            let mut busy = false;
            for p in 0..self.pipes.len() {
                self.pipes[p].retry_at = self.pipes[p].retry_at.min(self.now);
                self.reconnect(p);
                let before = self.pipes[p].in_flight();
                self.pump(p, self.now)?;
                busy |= self.pipes[p].in_flight() > before;
                while self.pipes[p].due(self.now) {
                    let down = self.pipes[p]
                        .conn
                        .as_ref()
                        .is_some_and(|c| c.down.front().is_some_and(|m| m.due <= self.now));
                    self.deliver(p, down, self.now)?;
                    busy = true;
                }
            }
            let next = self
                .pipes
                .iter()
                .filter_map(|p| p.conn.as_ref())
                .flat_map(|c| {
                    c.down
                        .front()
                        .map(|m| m.due)
                        .into_iter()
                        .chain(c.up.front().map(|m| m.due))
                })
                .min();
            match next {
                None if !busy => return Ok(()),
                Some(t) if t > self.now => self.now = t,
                _ => {}
            }
        }
        Err("the network did not go quiet after the heal".into())
    }

    /// Every node reads every key (in order), so that each expires what
    /// its own clock says is due, as a client's reads would.
    pub(super) fn sweep(&mut self) -> Result<(), String> {
        let mut keys: std::collections::BTreeSet<check::Key> =
            self.history.writes.keys().cloned().collect();
        for n in &self.nodes {
            keys.extend(check::dump(&n.srv).into_keys());
        }
        for i in 0..self.nodes.len() {
            self.nodes[i].enter(self.now);
            let from = self.nodes[i].effects_len();
            for (db, key) in &keys {
                let _ = self.nodes[i].run(&[b"SELECT".to_vec(), db.to_string().into_bytes()]);
                let _ = self.nodes[i].run(&[b"EXISTS".to_vec(), key.clone()]);
            }
            let effects = self.nodes[i].effects_since(from);
            self.note(format!(
                "n{i} sweeps {} keys: {} expired",
                keys.len(),
                effects.len()
            ));
            self.history
                .note_command(&self.nodes[i], &effects, self.event)?;
        }
        Ok(())
    }

    /// The checks of `check::CHECKS` on the final state.
    pub(super) fn final_checks(&mut self) -> Result<(), String> {
        let clocks = self
            .nodes
            .iter()
            .map(|n| self.now.saturating_add_signed(n.skew));
        // A clock that jumped back may have expired keys before.
        let horizon = clocks.max().unwrap_or(self.now).max(self.peak_clock);
        let dumps: Vec<_> = self
            .nodes
            .iter()
            .map(|n| check::live_dump(&n.srv, horizon))
            .collect();
        self.report.keys = dumps[0].len();
        let world = World {
            nodes: &self.nodes,
            history: &self.history,
            dumps,
            horizon,
        };
        for (name, check) in check::CHECKS {
            check(&world).map_err(|e| format!("check `{name}` failed: {e}"))?;
        }
        if self.workload == merging::Workload::Merging {
            merging::check(&world, &self.merge_log)
                .map_err(|e| format!("check `merging` failed: {e}"))?;
        }
        Ok(())
    }
}
