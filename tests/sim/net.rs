//! The simulated network: one *pipe* per directed link of the topology
//! (a node pulling from another), and on it at most one connection at a
//! time. A connection is the two real halves of a LATTICE.PEER
//! connection, driven with bytes in memory instead of a socket: the
//! serving node's `serve::Feed` (its answer, the key states that go
//! first, then its stream coded for this peer) and the pulling node's
//! `link::Link` (the apply rule). What the feed writes waits in `down`,
//! what the link sends back (`LATTICE.STATE`, `ACK`, `DIRECT`, `STABLE`)
//! in `up`, each message with the virtual time it may arrive at. A
//! connection is a TCP stream: its messages arrive in order; the scheduler
//! reorders across connections, delays, and drops connections (what was
//! in flight is lost, the link reconnects from the offset it applied, as
//! the real one does after its one-second pause).

use std::collections::VecDeque;
use std::sync::Arc;

use lattice::facade::keyspace::hlc::Hlc;
use lattice::facade::protocol::OwnedArgs;
use lattice::facade::replication::active::link::{self, Link, LinkState};
use lattice::facade::replication::active::serve::{self, Feed, Step};

use super::node::{port_of, Node};

/// A message in flight: when it may arrive, and its bytes (down: batches)
/// or commands (up).
pub struct Msg<T> {
    pub due: u64,
    pub body: T,
}

/// One connection of a pipe.
pub struct Conn {
    pub feed: Feed,
    pub link: Link,
    pub down: VecDeque<Msg<Vec<u8>>>,
    pub up: VecDeque<Msg<Vec<Vec<Vec<u8>>>>>,
    /// Virtual time the link last acknowledged and reported its stable
    /// stamp (it does both once a second anyway).
    pub last_ack: u64,
    pub last_stable: u64,
}

/// `puller` pulls from `server`.
pub struct Pipe {
    pub server: usize,
    pub puller: usize,
    /// The puller's link state for this peer (remade at its restart).
    pub st: Arc<LinkState>,
    pub conn: Option<Conn>,
    /// No connection before this virtual time (the link's pause).
    pub retry_at: u64,
}

impl Pipe {
    /// The link of `puller` to `server`, registered in the puller's
    /// links (and given the position its loaded data holds, if any).
    pub fn link_state(puller: &Node, server: usize) -> Arc<LinkState> {
        link::new_link(&puller.host, "sim".into(), port_of(server)).expect("one link per peer")
    }

    /// Whether a message may arrive now on the connection.
    pub fn due(&self, now: u64) -> bool {
        self.conn.as_ref().is_some_and(|c| {
            c.down.front().is_some_and(|m| m.due <= now)
                || c.up.front().is_some_and(|m| m.due <= now)
        })
    }

    /// Messages in flight on the connection.
    pub fn in_flight(&self) -> usize {
        self.conn.as_ref().map_or(0, |c| c.down.len() + c.up.len())
    }
}

/// Opens a connection of `server` to `puller` as the link thread does
/// (LATTICE.PEER, the answer, the key states that go first); Err with
/// why it was refused.
pub fn connect(
    server: &Node,
    puller: &Node,
    st: &Arc<LinkState>,
    now: u64,
) -> Result<Conn, String> {
    puller.enter(now);
    let hello = link::hello(&*puller.host, st);
    let argv: Vec<&[u8]> = hello.argv.iter().map(Vec::as_slice).collect();
    let owned = OwnedArgs::new(&argv);
    server.enter(now);
    let req = serve::peer_request(owned.args(), &*server.host).map_err(|e| e.render())?;
    let addr = format!("sim:{}", port_of(puller.idx));
    let mut feed = Feed::open(&server.host, req, addr);
    let reply = feed.answer();
    let mut first = Vec::new();
    feed.preamble(&mut first).map_err(|e| e.to_string())?;
    puller.enter(now);
    let tools = (
        Hlc::new(puller.identity.slot),
        puller.srv.new_worker_stats(),
    );
    let link = match Link::open(&puller.host, st, tools, &hello, reply.trim_end()) {
        Ok(l) => l,
        Err(e) => {
            server.enter(now);
            feed.close();
            return Err(e);
        }
    };
    let mut c = Conn {
        feed,
        link,
        down: VecDeque::new(),
        up: VecDeque::new(),
        last_ack: now,
        last_stable: 0,
    };
    if !first.is_empty() {
        c.down.push_back(Msg {
            due: now,
            body: first,
        });
    }
    // The link answers at once, before any batch comes (the real link's
    // loop calls `replies` first): the states an earlier connection asked
    // for in vain are asked again now, not only after the peer sends
    // something (simulator seed 11251 waited for a batch that never came).
    answer(&mut c, Vec::new(), now, now);
    Ok(c)
}

/// The connection ends: both halves learn it, what was in flight is lost.
pub fn disconnect(server: &Node, puller: &Node, st: &LinkState, c: Conn, now: u64) {
    puller.enter(now);
    link::closed(&*puller.host, st);
    server.enter(now);
    c.feed.close();
}

/// Runs the feed until the stream has nothing new for the peer; each
/// batch becomes a message arriving at `due` (or after the last one).
/// Returns the messages made.
pub fn pump(server: &Node, c: &mut Conn, now: u64, due: u64) -> Result<usize, String> {
    server.enter(now);
    let mut made = 0;
    loop {
        let mut out = Vec::new();
        match c.feed.step(&mut out).map_err(|e| e.to_string())? {
            Step::Idle => return Ok(made),
            Step::Partial => continue,
            Step::Sent(_) if out.is_empty() => continue,
            Step::Sent(_) => {
                let due = c.down.back().map_or(due, |m| m.due.max(due));
                c.down.push_back(Msg { due, body: out });
                made += 1;
            }
        }
    }
}

/// Delivers the next batch message to the link if it is due: applied,
/// and what the link answers goes up (arriving at `due`). Err: the link
/// ended the connection (a refused stamp, a peer away too long...).
pub fn deliver_down(puller: &Node, c: &mut Conn, now: u64, due: u64) -> Result<bool, String> {
    if c.down.front().is_none_or(|m| m.due > now) {
        return Ok(false);
    }
    let bytes = c.down.pop_front().expect("a message is due").body;
    puller.enter(now);
    let mut ask = Vec::new();
    let used = c.link.apply_bytes(&bytes, &mut ask)?;
    assert_eq!(used, bytes.len(), "a feed's message holds whole batches");
    answer(c, ask, now, due);
    Ok(true)
}

/// What the link sends back after applying (states it asks for, its
/// acknowledgement, its stable stamp once a second).
pub fn answer(c: &mut Conn, ask: Vec<(usize, Vec<u8>)>, now: u64, due: u64) {
    let ack_due = now >= c.last_ack + 1000;
    let stable_due = now >= c.last_stable + 1000;
    let replies = c.link.replies(ask, ack_due, stable_due);
    if replies.iter().any(|r| r[0] == b"LATTICE.ACK") {
        c.last_ack = now;
    }
    if stable_due {
        c.last_stable = now;
    }
    if !replies.is_empty() {
        let due = c.up.back().map_or(due, |m| m.due.max(due));
        c.up.push_back(Msg { due, body: replies });
    }
}

/// Delivers the next message of the link to the feed's node if it is
/// due: each command as the feed's reader thread runs it.
pub fn deliver_up(server: &Node, c: &mut Conn, now: u64) -> bool {
    if c.up.front().is_none_or(|m| m.due > now) {
        return false;
    }
    let Some(m) = c.up.pop_front() else {
        return false;
    };
    server.enter(now);
    for argv in &m.body {
        let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let owned = OwnedArgs::new(&argv);
        serve::on_peer_command(&*server.host, &c.feed.state, owned.args());
    }
    true
}
