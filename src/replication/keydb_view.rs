//! KeyDB's view of an active node in ROLE and INFO replication, behind the
//! `active-replica-view keydb` directive (DECISIONS 109).
//!
//! By default a node with active-replica links answers ROLE `master` and
//! INFO role:master: it takes writes, and Redis clients (node-redis's ready
//! check, Sentinel-aware pools) only write to a node that says so. KeyDB
//! itself shows such a node as KeyDB's `active-replica` role, and KeyDB's
//! tests and tools read that view (checked against KeyDB's
//! replication.cpp roleCommand and server.cpp's INFO):
//! - ROLE, with links: `[active-replica, host, port, state, offset]`, or an
//!   array of those when there are several links; without links the master
//!   form, whose replica list is the peers pulling from us;
//! - INFO: role:active-replica, connected_masters, then per link
//!   master_host, master_port, master_link_status,
//!   master_last_io_seconds_ago, master_sync_in_progress,
//!   slave_read_repl_offset, slave_repl_offset (the second link's fields
//!   named master_1_host and so on); the peers pulling from us as
//!   `slaveN:ip=..,port=..,state=online,offset=..,lag=0` lines (state
//!   `wait_bgsave` until the peer acknowledged our stream past its
//!   snapshot), counted in connected_slaves.

use std::sync::atomic::Ordering::*;

use super::active::Active;
use super::Replication;
use crate::core::info::Fields;
use crate::core::Core;

/// Whether ROLE and INFO show this node as KeyDB does (read in place:
/// those two commands only).
pub(crate) fn enabled(core: &Core) -> bool {
    core.active && core.config.read().get_str("active-replica-view") == "keydb"
}

/// Whether this node has links to peers (KeyDB: a non-empty master list).
pub(crate) fn has_links(active: &Active) -> bool {
    !active.links.lock().is_empty()
}

/// INFO's fields after `role:active-replica`.
pub(crate) fn info_links(active: &Active) -> Fields {
    let links = active.links.lock().clone();
    let up = links.iter().filter(|l| l.is_up()).count();
    let mut f = Fields::new();
    f.add("connected_masters", up);
    for (i, l) in links.iter().enumerate() {
        let p = if i == 0 {
            String::new()
        } else {
            format!("_{i}")
        };
        let off = l.offset();
        f.add(format!("master{p}_host"), l.host.clone())
            .add(format!("master{p}_port"), l.port)
            .add(
                format!("master{p}_link_status"),
                if l.is_up() { "up" } else { "down" },
            )
            .add(format!("master{p}_last_io_seconds_ago"), l.idle_seconds())
            .add(format!("master{p}_sync_in_progress"), 0)
            .add("slave_read_repl_offset", off)
            .add("slave_repl_offset", off);
    }
    f
}

/// The peers pulling from us as (ip, port, offset, online): KeyDB lists
/// them as its replicas, `online` once a peer has applied its snapshot and
/// acknowledged our stream from where it starts (KeyDB: the sync is done).
fn feeds(active: &Active) -> Vec<(String, String, u64, bool)> {
    let feeds = active.feeds.lock();
    feeds
        .iter()
        .map(|f| {
            let (ip, port) = match f.addr.rsplit_once(':') {
                Some((ip, port)) => (ip.trim_matches(['[', ']']).to_string(), port.to_string()),
                None => (f.addr.clone(), "0".to_string()),
            };
            let acked = f.acked.load(Acquire);
            let online = acked != 0 && acked >= f.first.load(Acquire);
            (ip, port, acked, online)
        })
        .collect()
}

/// The peers pulling from us as INFO's slaveN fields, numbered after the
/// Redis replicas (`first`).
pub(crate) fn info_feeds(active: &Active, first: usize) -> Fields {
    let mut f = Fields::new();
    for (i, (ip, port, off, online)) in feeds(active).into_iter().enumerate() {
        let mut line = Fields::new();
        line.add("ip", ip)
            .add("port", port)
            .add("state", if online { "online" } else { "wait_bgsave" })
            .add("offset", off)
            .add("lag", 0);
        f.add(format!("slave{}", first + i), line);
    }
    f
}

/// ROLE in KeyDB's view.
pub(crate) fn role(
    ctx: &mut crate::commands::Ctx,
    repl: &Replication,
) -> crate::commands::CmdResult {
    let links = repl.active.links.lock().clone();
    if links.is_empty() {
        let replicas = repl.master.replicas.lock().clone();
        let feeds = feeds(&repl.active);
        ctx.out.array(3);
        ctx.out.bulk(b"master");
        ctx.out.int(repl.active.stream.end() as i64);
        ctx.out.array(replicas.len() + feeds.len());
        for r in replicas {
            ctx.out.array(3);
            ctx.out.bulk(r.ip.as_bytes());
            ctx.out.bulk(r.port.load(Relaxed).to_string().as_bytes());
            ctx.out
                .bulk(r.ack_offset.load(Relaxed).to_string().as_bytes());
        }
        for (ip, port, off, _) in feeds {
            ctx.out.array(3);
            ctx.out.bulk(ip.as_bytes());
            ctx.out.bulk(port.as_bytes());
            ctx.out.bulk(off.to_string().as_bytes());
        }
        return Ok(());
    }
    if links.len() > 1 {
        ctx.out.array(links.len());
    }
    for l in links {
        ctx.out.array(5);
        ctx.out.bulk(b"active-replica");
        ctx.out.bulk(l.host.as_bytes());
        ctx.out.int(l.port as i64);
        ctx.out.bulk(if l.is_up() {
            &b"connected"[..]
        } else {
            &b"connecting"[..]
        });
        ctx.out.int(l.offset() as i64);
    }
    Ok(())
}
