//! The master client as other connections see it: CLIENT LIST's `flags=M`
//! line, `CLIENT LIST TYPE master`, `CLIENT KILL` by its id, address or
//! type, and INFO's `connected_clients`, all as Redis's CLIENT_MASTER.
//!
//! The link thread runs the master's commands as a `ClientState` of its own
//! (`stream.rs`). What others see is a record in the client registry,
//! listed while the stream runs ([`list`]) and refreshed once per read
//! ([`refresh`]: database, last command, last interaction), never per
//! command, so applying a command costs what it did. The record is only a
//! view: the link's `ClientState` has no `shared`, so the master client
//! still never blocks, subscribes or answers (DECISIONS 310), and a CLIENT
//! KILL that hits the record closes the link's socket
//! (`Admin::kill_master_link_if`); the link reconnects and resyncs
//! partially, as Redis's replica does.
//!
//! Its id and age survive a partial resync, as Redis resurrects its cached
//! master with them; after a full sync or a promotion the next stream gets
//! a new id (Redis creates a new master client then). REPLICAOF takes the
//! record out of the list at once, as Redis frees its master client in the
//! command (`unlist`), not when the old link thread notices.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use parking_lot::Mutex;

use super::link::Peer;
use crate::core::client::{ClientRegistry, ClientShared, ClientState};
use crate::keyspace::hlc::unix_ms;
use std::sync::atomic::Ordering::Relaxed;

/// What a partial resync keeps of the master client, as Redis's cached
/// master: its id, creation time and last command.
#[derive(Clone, Copy)]
struct Kept {
    id: u64,
    created_ms: u64,
    last_cmd: usize,
}

/// The master client kept across links until a full sync or a promotion.
#[derive(Default)]
pub(super) struct Identity(Mutex<Option<Kept>>);

impl Identity {
    /// A full sync or a promotion: the next master client is a new one.
    pub(super) fn forget(&self) {
        *self.0.lock() = None;
    }

    fn get_or_new(&self, clients: &ClientRegistry) -> Kept {
        *self.0.lock().get_or_insert_with(|| Kept {
            id: clients.next_id(),
            created_ms: unix_ms(),
            last_cmd: usize::MAX,
        })
    }

    fn id(&self) -> Option<u64> {
        self.0.lock().map(|k| k.id)
    }
}

/// The record while it is listed; dropping it (the stream ended) takes it
/// out of the list unless a newer stream listed its own since, and keeps
/// its last command for the next stream.
pub(super) struct Listed<'a> {
    clients: &'a ClientRegistry,
    identity: &'a Identity,
    record: Arc<ClientShared>,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.clients.unregister_record(&self.record);
        if let Some(k) = self.identity.0.lock().as_mut() {
            if k.id == self.record.id {
                k.last_cmd = self.record.last_cmd.load(Relaxed);
            }
        }
    }
}

/// Lists the master client of the stream starting on `peer`'s socket, the
/// link's `client` (database already set) taking its kept last command.
pub(super) fn list<'a>(
    clients: &'a ClientRegistry,
    identity: &'a Identity,
    peer: &Peer,
    client: &mut ClientState,
) -> Listed<'a> {
    let kept = identity.get_or_new(clients);
    client.last_cmd = kept.last_cmd;
    let sock = peer.conn.s.tcp();
    let shown = |a: std::io::Result<std::net::SocketAddr>| a.map(|a| a.to_string());
    let record = clients.register_master(
        kept.id,
        shown(sock.peer_addr()).unwrap_or_default(),
        shown(sock.local_addr()).unwrap_or_default(),
        sock.as_raw_fd(),
        kept.created_ms,
    );
    let listed = Listed {
        clients,
        identity,
        record,
    };
    listed.refresh(client, unix_ms());
    listed
}

impl Listed<'_> {
    /// After a read was applied: what CLIENT LIST shows of the master
    /// client (`last_io_ms`: when the read came, Redis's lastinteraction).
    #[inline]
    pub(super) fn refresh(&self, client: &ClientState, last_io_ms: u64) {
        let r = &self.record;
        r.db.store(client.db, Relaxed);
        r.last_cmd.store(client.last_cmd, Relaxed);
        r.last_interaction_ms.store(last_io_ms, Relaxed);
    }
}

/// REPLICAOF (another master, or NO ONE when `forget`): the master client
/// leaves the list now; a promotion also drops its identity.
pub(super) fn unlist(clients: &ClientRegistry, identity: &Identity, forget: bool) {
    if let Some(id) = identity.id() {
        clients.unregister(id);
    }
    if forget {
        identity.forget();
    }
}
