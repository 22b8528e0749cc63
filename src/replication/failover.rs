//! FAILOVER [TO host port [FORCE]] [ABORT] [TIMEOUT ms]: a coordinated
//! switch of roles with a replica, as Redis 6.2+ does it.
//!
//! 1. waiting-for-sync: writes are paused (CLIENT PAUSE WRITE) and the
//!    replicas asked for an ACK; once the target acknowledged everything
//!    (or the timeout passed with FORCE) ...
//! 2. failover-in-progress: this master becomes a replica of the target
//!    and its handshake sends `PSYNC <our replid> <offset> FAILOVER`, which
//!    makes the target promote itself before it serves the (partial) sync.
//! 3. Once the link is up, writes resume (and get READONLY: we are a
//!    replica now). A timeout without FORCE, ABORT, a target that refuses
//!    the PSYNC (at once) or does not take over, puts everything back:
//!    master again, writes resumed.
//!
//! The driver is a short-lived thread that polls every 10 ms: the steps are
//! sequential and rare, and nothing on the command path waits for it.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::commands::util::{arg_i64, eq_ic};
use crate::commands::{CmdError, CmdResult, Ctx};
use crate::protocol::Args;
use crate::replication::host::{self, Host};
use crate::{log_notice, log_warning};

const NONE: u8 = 0;
const WAITING: u8 = 1;
const IN_PROGRESS: u8 = 2;

#[derive(Default)]
pub struct Failover {
    state: AtomicU8,
    /// Bumped by every FAILOVER and FAILOVER ABORT: a driver whose
    /// generation is no longer current was aborted (or superseded).
    generation: AtomicU64,
}

impl Failover {
    /// INFO's master_failover_state.
    pub fn state_name(&self) -> &'static str {
        match self.state.load(Relaxed) {
            WAITING => "waiting-for-sync",
            IN_PROGRESS => "failover-in-progress",
            _ => "no-failover",
        }
    }
}

struct Plan {
    target: Option<(String, u16)>,
    force: bool,
    timeout_ms: u64,
}

fn parse(args: Args) -> Result<(Plan, bool), CmdError> {
    let mut plan = Plan {
        target: None,
        force: false,
        timeout_ms: 0,
    };
    let (mut abort, mut i) = (false, 1);
    while i < args.len() {
        let a = args.get(i);
        if eq_ic(a, "TO") && i + 2 < args.len() && plan.target.is_none() {
            let port = arg_i64(args.get(i + 2))?;
            let host = String::from_utf8_lossy(args.get(i + 1)).into_owned();
            plan.target = Some((host, port.clamp(0, 65535) as u16));
            i += 3;
        } else if eq_ic(a, "FORCE") {
            plan.force = true;
            i += 1;
        } else if eq_ic(a, "ABORT") {
            abort = true;
            i += 1;
        } else if eq_ic(a, "TIMEOUT") && i + 1 < args.len() {
            let t = arg_i64(args.get(i + 1))?;
            if t <= 0 {
                return Err(CmdError::err("FAILOVER timeout must be greater than 0"));
            }
            plan.timeout_ms = t as u64;
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    if abort && (plan.target.is_some() || plan.force || plan.timeout_ms > 0) {
        return Err(CmdError::err(
            "FAILOVER abort doesn't accept other arguments.",
        ));
    }
    if plan.force && (plan.target.is_none() || plan.timeout_ms == 0) {
        return Err(CmdError::err(
            "FAILOVER with force option requires both a timeout and target HOST and IP.",
        ));
    }
    Ok((plan, abort))
}

pub(crate) fn failover<H: Host>(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (plan, abort) = parse(args)?;
    let srv = host::of::<H>(ctx);
    let fo = &srv.repl().failover;
    if abort {
        if fo.state.load(Relaxed) == NONE {
            return Err(CmdError::err("No failover in progress."));
        }
        fo.generation.fetch_add(1, AcqRel);
        // As Redis: over at once while waiting for the sync; once we
        // follow the target, the driver turns us back into a master.
        if fo
            .state
            .compare_exchange(WAITING, NONE, AcqRel, Relaxed)
            .is_ok()
        {
            end(&**srv, "FAILOVER ABORT");
        }
        ctx.out.ok();
        return Ok(());
    }
    if srv.repl().is_replica() {
        return Err(CmdError::err(
            "FAILOVER is not valid when server is a replica.",
        ));
    }
    let replicas = srv.repl().master.replicas.lock().clone();
    if replicas.is_empty() {
        return Err(CmdError::err("FAILOVER requires connected replicas."));
    }
    if fo.state.load(Relaxed) != NONE {
        return Err(CmdError::err("FAILOVER already in progress."));
    }
    if let Some((host, port)) = &plan.target {
        let r = replicas
            .iter()
            .find(|r| &r.ip == host && r.port.load(Relaxed) == *port as u64)
            .ok_or_else(|| CmdError::err("FAILOVER target HOST and PORT is not a replica."))?;
        if *r.state.lock() != "online" {
            return Err(CmdError::err("FAILOVER target replica is not online."));
        }
    }
    let generation = fo.generation.fetch_add(1, AcqRel) + 1;
    fo.state.store(WAITING, Relaxed);
    srv.pause_writes(true);
    let srv2 = srv.clone();
    let spawned = std::thread::Builder::new()
        .name("lattice-failover".into())
        .spawn(move || drive(&srv2, plan, generation));
    if spawned.is_err() {
        end(&**srv, "could not start the failover thread");
        return Err(CmdError::err("FAILOVER could not start"));
    }
    log_notice!("FAILOVER requested by client id={}", ctx.client.id);
    ctx.out.ok();
    Ok(())
}

fn end<H: Host>(srv: &H, why: &str) {
    let fo = &srv.repl().failover;
    if !why.is_empty() {
        log_warning!("FAILOVER aborted: {why}");
    }
    fo.state.store(NONE, Relaxed);
    srv.pause_writes(false);
}

fn drive<H: Host>(srv: &Arc<H>, plan: Plan, generation: u64) {
    let fo = &srv.repl().failover;
    let aborted = || fo.generation.load(Acquire) != generation;
    let start = Instant::now();
    let deadline = (plan.timeout_ms > 0).then(|| start + Duration::from_millis(plan.timeout_ms));
    let offset = srv.repl().backlog.end();
    // 1. Wait for the target (or any replica) to acknowledge everything.
    let target = loop {
        if aborted() {
            return; // FAILOVER ABORT ended it
        }
        if let Some(t) = synced_target(&**srv, &plan, offset) {
            break t;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            if plan.force {
                let t = plan.target.clone().expect("FORCE needs a target");
                log_notice!(
                    "FAILOVER to {}:{} time out exceeded, failing over.",
                    t.0,
                    t.1
                );
                break t;
            }
            return end(&**srv, "Failover target did not sync within the timeout");
        }
        super::master::request_acks(&**srv);
        std::thread::sleep(Duration::from_millis(10));
    };
    // 2. Become the target's replica; its PSYNC FAILOVER promotes it.
    if fo
        .state
        .compare_exchange(WAITING, IN_PROGRESS, AcqRel, Relaxed)
        .is_err()
    {
        return; // aborted meanwhile
    }
    log_notice!(
        "Failover target {}:{} is synced, switching roles",
        target.0,
        target.1
    );
    super::replica::follow_for_failover(srv, target.0.clone(), target.1);
    let handover = Instant::now() + Duration::from_millis(plan.timeout_ms.max(5000));
    while Instant::now() < handover && !aborted() {
        if srv.repl().replica.failover_refused.swap(false, AcqRel) {
            super::replica::promote(&**srv);
            return end(&**srv, "Failover target rejected psync request");
        }
        if srv.repl().replica.link_up() {
            fo.state.store(NONE, Relaxed);
            srv.pause_writes(false);
            log_notice!("Failover to {}:{} succeeded", target.0, target.1);
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // 3. The target did not take over: master again.
    super::replica::promote(&**srv);
    end(
        &**srv,
        "the target did not accept the failover; this node is a master again",
    );
}

/// The replica to hand over to, once it acknowledged `offset`.
fn synced_target<H: Host>(srv: &H, plan: &Plan, offset: u64) -> Option<(String, u16)> {
    let replicas = srv.repl().master.replicas.lock().clone();
    replicas
        .iter()
        .filter(|r| *r.state.lock() == "online" && r.ack_offset.load(Relaxed) >= offset)
        .map(|r| (r.ip.clone(), r.port.load(Relaxed) as u16))
        .find(|t| plan.target.as_ref().is_none_or(|p| p == t))
}
