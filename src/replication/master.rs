//! The master side: replicas attach with PSYNC (or SYNC), get a snapshot
//! or a partial resync, then follow the backlog from their offset.
//! (Built in steps; see docs/STATUS.md.)

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::server::Server;

/// One attached replica, as INFO's slaveN line shows it.
pub struct ReplicaHandle {
    pub client_id: u64,
    pub ip: String,
    /// REPLCONF listening-port (0 until told).
    pub port: AtomicU64,
    /// Offset the replica last acknowledged (REPLCONF ACK).
    pub ack_offset: AtomicU64,
    /// Unix ms of the last ACK.
    pub ack_ms: AtomicU64,
    /// Next offset the feeder will send.
    pub sent: AtomicU64,
    /// wait_bgsave, send_bulk or online.
    pub state: Mutex<&'static str>,
}

#[derive(Default)]
pub struct MasterSide {
    pub replicas: Mutex<Vec<Arc<ReplicaHandle>>>,
}

impl MasterSide {
    /// connected_slaves and the slaveN lines.
    pub fn info_fields(&self, _srv: &Server, o: &mut String) {
        let list = self.replicas.lock().clone();
        let _ = write!(o, "connected_slaves:{}\r\n", list.len());
        let now = crate::keyspace::hlc::unix_ms();
        for (i, r) in list.iter().enumerate() {
            let _ = write!(
                o,
                "slave{i}:ip={},port={},state={},offset={},lag={}\r\n",
                r.ip,
                r.port.load(Relaxed),
                r.state.lock(),
                r.ack_offset.load(Relaxed),
                now.saturating_sub(r.ack_ms.load(Relaxed)) / 1000,
            );
        }
    }

    pub fn failover_state(&self) -> &'static str {
        "no-failover"
    }
}

use crate::commands::{CmdError, CmdResult, Ctx};
use crate::protocol::Args;

pub fn psync(_ctx: &mut Ctx, _args: Args) -> CmdResult {
    Err(CmdError::Msg("ERR PSYNC is not built yet".into()))
}

pub fn sync(_ctx: &mut Ctx, _args: Args) -> CmdResult {
    Err(CmdError::Msg("ERR SYNC is not built yet".into()))
}

pub fn replconf(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.ok();
    Ok(())
}

pub fn wait(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.int(0);
    Ok(())
}

pub fn waitaof(_ctx: &mut Ctx, _args: Args) -> CmdResult {
    Err(CmdError::Msg("ERR WAITAOF is not built yet".into()))
}

pub fn failover(_ctx: &mut Ctx, _args: Args) -> CmdResult {
    Err(CmdError::Msg("ERR FAILOVER is not built yet".into()))
}
