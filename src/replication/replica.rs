//! The replica side: REPLICAOF, the link to our master (handshake, full or
//! partial sync, then the command stream), acknowledgements.
//! (Built in steps; see docs/STATUS.md.)

use crate::server::Server;

#[derive(Default)]
pub struct ReplicaSide {}

impl ReplicaSide {
    /// INFO's replica-only fields, from master_host to replica_announced.
    pub fn info_fields(&self, _srv: &Server, _o: &mut String) {}
}

use crate::commands::{CmdError, CmdResult, Ctx};
use crate::protocol::Args;

/// REPLICAOF host port | NO ONE (and SLAVEOF).
pub fn replicaof(_ctx: &mut Ctx, _args: Args) -> CmdResult {
    Err(CmdError::Msg("ERR REPLICAOF is not built yet".into()))
}

impl ReplicaSide {
    /// ROLE on a replica: ["slave", host, port, state, offset].
    pub fn role_reply(&self, _ctx: &mut Ctx) -> CmdResult {
        Err(CmdError::Msg(
            "ERR ROLE on a replica is not built yet".into(),
        ))
    }
}

impl ReplicaSide {
    /// The link to our master is up (PSYNC from our own replicas is served).
    pub fn link_up(&self) -> bool {
        false
    }
}

/// REPLCONF GETACK from our master: answered on the link (by the link).
pub fn getack(_ctx: &mut Ctx) -> CmdResult {
    Ok(())
}
