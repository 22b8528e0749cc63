//! WAIT and WAITAOF: the commands note what they wait for on the client
//! (`ClientState::repl_wait`), put a `REPLCONF GETACK *` in the stream, and
//! the connection awaits the replicas' ACKs (`answer_wait`) before it reads
//! on.

use std::time::Duration;

use super::{ReplWait, WaitAof, WaitRequest};
use crate::commands::{CmdError, CmdResult, Ctx};
use crate::keyspace::hlc::unix_ms;
use crate::protocol::Args;
use crate::replication::host::{self, Host};

/// A WAIT/WAITAOF timeout argument (ms, 0: forever) as a unix-ms deadline
/// (0: none).
fn wait_deadline(ctx: &Ctx, arg: &[u8]) -> Result<u64, CmdError> {
    let timeout = crate::commands::util::arg_i64(arg)?;
    if timeout < 0 {
        return Err(CmdError::Msg("ERR timeout is negative".into()));
    }
    Ok(if timeout == 0 {
        0
    } else {
        ctx.now_ms + timeout as u64
    })
}

/// WAIT numreplicas timeout: how many replicas acknowledged every write
/// this server made so far (this client's included), waiting up to
/// `timeout` ms (0: forever) for `numreplicas` of them.
pub(crate) fn wait<H: Host>(ctx: &mut Ctx, args: Args) -> CmdResult {
    let replicas = crate::commands::util::arg_i64(args.get(1))?;
    let deadline_ms = wait_deadline(ctx, args.get(2))?;
    let srv = host::of::<H>(ctx);
    if srv.repl().is_replica() {
        return Err(CmdError::Msg(
            "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.".into(),
        ));
    }
    let repl = srv.repl();
    let offset = repl.backlog.end();
    let active_offset = repl.active.stream.end();
    let acked = repl.master.acked(offset) + repl.active.acked(active_offset);
    if acked as i64 >= replicas || ctx.client.in_exec {
        ctx.out.int(acked as i64);
        return Ok(());
    }
    request_acks(&**srv);
    ctx.client.repl_wait = Some(ReplWait::Wait(WaitRequest {
        offset,
        active_offset,
        replicas: replicas.max(0) as usize,
        deadline_ms,
    }));
    Ok(())
}

/// Waits for `w` and writes its reply into `out`.
pub(crate) async fn answer_wait<H: Host>(
    srv: &H,
    w: ReplWait,
    kill: &tokio::sync::Notify,
    out: &mut crate::protocol::ReplyBuf,
) {
    match w {
        ReplWait::Wait(w) => {
            let n = wait_acks(srv, w, kill).await;
            out.int(n as i64);
        }
        ReplWait::WaitAof(w) => {
            let (local, n) = waitaof_acks(srv, w, kill).await;
            out.array(2);
            out.int(local as i64);
            out.int(n as i64);
        }
    }
}

/// Asks every replica for an immediate ACK (REPLCONF GETACK * in the
/// stream, as Redis does for WAIT).
pub(crate) fn request_acks<H: Host>(srv: &H) {
    let b = &srv.repl().backlog;
    if b.is_active() {
        b.append_raw(b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n");
        b.wake_if_dirty();
    }
}

/// Waits until `w.replicas` replicas acknowledged `w.offset`, the deadline
/// passes or the client is killed; returns how many did.
pub(super) async fn wait_acks<H: Host>(
    srv: &H,
    w: WaitRequest,
    kill: &tokio::sync::Notify,
) -> usize {
    let master = &srv.repl().master;
    // Active peers acknowledge on their own (no notify): poll them often.
    let step = if srv.core().active { 5 } else { 100 };
    loop {
        let n = master.acked(w.offset) + srv.repl().active.acked(w.active_offset);
        let now = unix_ms();
        if n >= w.replicas || (w.deadline_ms != 0 && now >= w.deadline_ms) {
            return n;
        }
        let left = if w.deadline_ms == 0 {
            step
        } else {
            (w.deadline_ms - now).min(step)
        };
        let acked = master.acked_notify.notified();
        tokio::select! {
            _ = acked => {}
            _ = kill.notified() => return n,
            _ = tokio::time::sleep(Duration::from_millis(left)) => {}
        }
    }
}

/// WAITAOF numlocal numreplicas timeout (Redis 7.2): waits until this
/// client's writes are fsynced to our AOF (numlocal 1) and to the AOF of
/// `numreplicas` replicas (their REPLCONF ACK ... FACK offsets); replies
/// [local fsynced 0|1, replicas that fsynced].
pub(crate) fn waitaof<H: Host>(ctx: &mut Ctx, args: Args) -> CmdResult {
    let numlocal = crate::commands::util::arg_i64(args.get(1))?;
    let numreplicas = crate::commands::util::arg_i64(args.get(2))?;
    let deadline_ms = wait_deadline(ctx, args.get(3))?;
    let srv = host::of::<H>(ctx);
    if srv.repl().is_replica() {
        return Err(CmdError::Msg(
            "ERR WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just local and are not propagated.".into(),
        ));
    }
    if numlocal > 0 && !srv.aof_on() {
        return Err(CmdError::Msg(
            "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.".into(),
        ));
    }
    let w = WaitAof {
        local_end: (numlocal > 0).then(|| srv.aof_end()),
        offset: srv.repl().backlog.end(),
        replicas: numreplicas.max(0) as usize,
        deadline_ms,
    };
    if ctx.client.in_exec {
        // Inside EXEC nothing can wait: the state as it is now.
        let local = w.local_end.is_some_and(|end| srv.aof_synced_to(end));
        ctx.out.array(2);
        ctx.out.int(local as i64);
        ctx.out.int(srv.repl().master.fsynced(w.offset) as i64);
        return Ok(());
    }
    if numreplicas > 0 {
        request_acks(&**srv);
    }
    ctx.client.repl_wait = Some(ReplWait::WaitAof(w));
    Ok(())
}

/// Waits for a WAITAOF's fsyncs; returns (local fsynced, replicas fsynced).
pub(super) async fn waitaof_acks<H: Host>(
    srv: &H,
    w: WaitAof,
    kill: &tokio::sync::Notify,
) -> (bool, usize) {
    let master = &srv.repl().master;
    if let Some(end) = w.local_end {
        if !srv.aof_synced_to(end) {
            srv.aof_fsync(); // fsync now rather than at the next second
        }
    }
    loop {
        let local = w.local_end.is_none_or(|end| srv.aof_synced_to(end));
        let n = master.fsynced(w.offset);
        let now = unix_ms();
        let done = local && n >= w.replicas;
        if done || (w.deadline_ms != 0 && now >= w.deadline_ms) {
            return (w.local_end.is_some() && local, n);
        }
        let left = if w.deadline_ms == 0 {
            20
        } else {
            (w.deadline_ms - now).min(20)
        };
        tokio::select! {
            _ = master.acked_notify.notified() => {}
            _ = kill.notified() => return (false, n),
            _ = tokio::time::sleep(Duration::from_millis(left)) => {}
        }
    }
}
