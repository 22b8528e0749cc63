//! The commands that turn a client into a replica or a peer: PSYNC (with
//! FAILOVER's hand-over), SYNC, REPLCONF and LATTICE.PEER. They only note
//! the request on the client (`ClientState::sync_request`); after the
//! batch's replies the connection hands itself to `feed::serve_replica`.

use std::time::Duration;

use super::feed::host_of;
use super::SyncRequest;
use crate::commands::{CmdError, CmdResult, Ctx};
use crate::protocol::Args;
use crate::replication::host::{self, Host};
use crate::{log_notice, log_warning};

pub(crate) fn psync<H: Host>(ctx: &mut Ctx, args: Args) -> CmdResult {
    let offset = crate::commands::util::arg_i64(args.get(2)).inspect_err(|_| {
        let conf = ctx.client.replconf.as_deref().cloned().unwrap_or_default();
        let ip = conf.ip.clone().or_else(|| {
            let shared = ctx.client.shared.as_ref()?;
            Some(host_of(&shared.addr))
        });
        let name = match ip {
            Some(ip) => format!("{ip}:{}", conf.listening_port),
            None => format!("client id #{}", ctx.client.id),
        };
        log_warning!("Replica {name} asks for synchronization but with a wrong offset");
    })?;
    let replid = String::from_utf8_lossy(args.get(1)).into_owned();
    if args.len() > 3 && args.get(3).eq_ignore_ascii_case(b"failover") {
        // Our master hands over to us (FAILOVER): promote, then serve it.
        let srv = host::of::<H>(ctx);
        if replid != srv.repl().ids.lock().replid {
            return Err(CmdError::Msg(
                "ERR PSYNC FAILOVER replid must match my replid.".into(),
            ));
        }
        log_notice!("Failover request received for replid {replid}.");
        catch_up_before_promotion(&**srv, offset);
        crate::replication::replica::promote(&**srv);
    }
    request_sync::<H>(ctx, true, replid, offset)
}

/// A master failing over to us asks to continue from `offset`: what it
/// sent us before it paused. Redis's replica has applied all of it that
/// reached its socket by then (one event loop: the link's bytes are read
/// before the new connection's handshake is done). Our link has a thread
/// of its own, which may not have run yet (a loaded machine, or a replica
/// that was SIGSTOPped and has just been continued: failover.tcl's "with
/// force" case): wait for it, a bounded time, so that the master gets its
/// partial sync instead of a full one. This blocks one worker for at most
/// `MAX_WAIT`, once per failover.
fn catch_up_before_promotion<H: Host>(srv: &H, offset: i64) {
    const MAX_WAIT: Duration = Duration::from_millis(500);
    let want = (offset - 1).max(0) as u64;
    let start = std::time::Instant::now();
    while srv.repl().backlog.end() < want
        && srv.repl().replica.link_up()
        && start.elapsed() < MAX_WAIT
    {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// LATTICE.PEER: an active peer asks for our stream (`active/serve.rs`).
pub(crate) fn lattice_peer<H: Host>(ctx: &mut Ctx, args: Args) -> CmdResult {
    let host = host::of::<H>(ctx).peer_host();
    crate::replication::active::serve::peer_cmd(ctx, args, &*host)
}

pub(crate) fn sync<H: Host>(ctx: &mut Ctx, _args: Args) -> CmdResult {
    request_sync::<H>(ctx, false, "?".into(), -1)
}

fn request_sync<H: Host>(ctx: &mut Ctx, psync: bool, replid: String, offset: i64) -> CmdResult {
    let linked = ctx.client.replconf.as_ref().is_some_and(|c| c.linked);
    if linked || ctx.client.sync_request.is_some() || ctx.client.shared.is_none() {
        return Ok(()); // already a replica (Redis ignores it)
    }
    let repl = host::of::<H>(ctx).repl();
    if repl.is_replica() && !repl.replica.link_up() {
        return Err(CmdError::Msg(
            "NOMASTERLINK Can't SYNC while not connected with my master".into(),
        ));
    }
    ctx.client.sync_request = Some(SyncRequest {
        psync,
        replid,
        offset,
    });
    Ok(())
}

/// REPLCONF <option> <value> ...: listening-port, ip-address, capa, ack,
/// getack (on a replica, from its master), rdb-only and the like.
pub(crate) fn replconf(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    let conf = ctx.client.replconf.get_or_insert_with(Default::default);
    let mut i = 1;
    while i < args.len() {
        let opt = String::from_utf8_lossy(args.get(i)).to_ascii_lowercase();
        let val = args.get(i + 1);
        match opt.as_str() {
            "listening-port" => {
                let p = crate::commands::util::arg_i64(val)?;
                conf.listening_port = p.clamp(0, 65535) as u16;
            }
            "ip-address" => conf.ip = Some(String::from_utf8_lossy(val).into_owned()),
            "capa" => {
                conf.capa_eof |= val.eq_ignore_ascii_case(b"eof");
                conf.capa_psync2 |= val.eq_ignore_ascii_case(b"psync2");
            }
            "getack" => return crate::replication::replica::getack(ctx),
            "ack" | "fack" => return Ok(()), // acks arrive on the feed, not here
            "rdb-only" | "rdb-filter-only" => {}
            _ => {
                return Err(CmdError::Msg(format!(
                    "ERR Unrecognized REPLCONF option: {opt}"
                )))
            }
        }
        i += 2;
    }
    ctx.out.ok();
    Ok(())
}
