//! Connection commands: PING ECHO QUIT SELECT HELLO AUTH RESET, and the
//! cluster's CLUSTER (every subcommand of Redis 7.0's), READONLY, READWRITE
//! and ASKING: cluster mode is not built, so they answer as a Redis started
//! without `cluster-enabled` does, "This instance has cluster support
//! disabled" (after the usual unknown-subcommand and arity checks), and
//! COMMAND, COMMAND DOCS and ACL rules see them as in Redis.

use super::util::{arg_i64, eq_ic};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::protocol::Args;

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "connection", acl = "connection"),
    cmd("ping", -1, FAST, ping)
        .doc("1.0.0", "Returns the server's liveliness response.")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    cmd("echo", 2, FAST, echo)
        .doc("1.0.0", "Returns the given string."),
    cmd("quit", -1, NOSCRIPT | FAST | NO_AUTH | STALE | ALLOW_BUSY | LOADING, quit)
        .doc("1.0.0", "Closes the connection."),
    cmd("select", 2, FAST | LOADING | STALE, select)
        .doc("1.0.0", "Changes the selected database."),
    cmd("hello", -1, FAST | NO_AUTH | STALE | LOADING | NOSCRIPT | ALLOW_BUSY, hello)
        .doc("6.0.0", "Handshakes with the Redis server."),
    cmd("auth", -2, FAST | NO_AUTH | STALE | LOADING | NOSCRIPT | ALLOW_BUSY, auth)
        .doc("1.0.0", "Authenticates the connection."),
    cmd("reset", 1, FAST | NO_AUTH | STALE | LOADING | NOSCRIPT | ALLOW_BUSY, reset)
        .doc("6.2.0", "Resets the connection."),
    cmd("readonly", 1, FAST | LOADING | STALE, no_cluster)
        .group("cluster")
        .doc("3.0.0", "Enables read-only queries for a connection to a Redis Cluster replica node."),
    container("cluster", -2, no_cluster)
        .group("cluster")
        .doc("3.0.0", "A container for cluster commands")
        .complexity("Depends on subcommand.")
        .subs(CLUSTER_SUBCOMMANDS),
    cmd("readwrite", 1, FAST | LOADING | STALE, no_cluster)
        .group("cluster")
        .doc("3.0.0", "Enables read-write queries for a connection to a Reads Cluster replica node."),
    cmd("asking", 1, FAST, no_cluster)
        .group("cluster")
        .doc("3.0.0", "Sent by cluster clients after an -ASK redirect"),
};

/// CLUSTER's subcommands, as Redis 7.0 lists them (COMMAND INFO CLUSTER).
static CLUSTER_SUBCOMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "cluster", acl = ""),
    cmd("addslots", -3, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Assign new hash slots to receiving node")
        .complexity("O(N) where N is the total number of hash slot arguments"),
    cmd("addslotsrange", -4, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("7.0.0", "Assign new hash slots to receiving node")
        .complexity("O(N) where N is the total number of the slots between the start slot and end slot arguments."),
    cmd("bumpepoch", 2, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Advance the cluster config epoch")
        .tips(&["nondeterministic_output"]),
    cmd("count-failure-reports", 3, ADMIN | STALE, no_cluster)
        .doc("3.0.0", "Return the number of failure reports active for a given node")
        .complexity("O(N) where N is the number of failure reports")
        .tips(&["nondeterministic_output"]),
    cmd("countkeysinslot", 3, STALE, no_cluster)
        .doc("3.0.0", "Return the number of local keys in the specified hash slot"),
    cmd("delslots", -3, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Set hash slots as unbound in receiving node")
        .complexity("O(N) where N is the total number of hash slot arguments"),
    cmd("delslotsrange", -4, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("7.0.0", "Set hash slots as unbound in receiving node")
        .complexity("O(N) where N is the total number of the slots between the start slot and end slot arguments."),
    cmd("failover", -2, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Forces a replica to perform a manual failover of its master."),
    cmd("flushslots", 2, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Delete a node's own slots information"),
    cmd("forget", 3, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Remove a node from the nodes table"),
    cmd("getkeysinslot", 4, STALE, no_cluster)
        .doc("3.0.0", "Return local key names in the specified hash slot")
        .complexity("O(log(N)) where N is the number of requested keys")
        .tips(&["nondeterministic_output"]),
    cmd("help", 2, LOADING | STALE, no_cluster)
        .doc("5.0.0", "Show helpful text about the different subcommands"),
    cmd("info", 2, STALE, no_cluster)
        .doc("3.0.0", "Provides info about Redis Cluster node state")
        .tips(&["nondeterministic_output"]),
    cmd("keyslot", 3, STALE, no_cluster)
        .doc("3.0.0", "Returns the hash slot of the specified key")
        .complexity("O(N) where N is the number of bytes in the key"),
    cmd("links", 2, STALE, no_cluster)
        .doc("7.0.0", "Returns a list of all TCP links to and from peer nodes in cluster")
        .complexity("O(N) where N is the total number of Cluster nodes")
        .tips(&["nondeterministic_output"]),
    cmd("meet", -4, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Force a node cluster to handshake with another node"),
    cmd("myid", 2, STALE, no_cluster)
        .doc("3.0.0", "Return the node id"),
    cmd("nodes", 2, STALE, no_cluster)
        .doc("3.0.0", "Get Cluster config for the node")
        .complexity("O(N) where N is the total number of Cluster nodes")
        .tips(&["nondeterministic_output"]),
    cmd("replicas", 3, ADMIN | STALE, no_cluster)
        .doc("5.0.0", "List replica nodes of the specified master node")
        .tips(&["nondeterministic_output"]),
    cmd("replicate", 3, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Reconfigure a node as a replica of the specified master node"),
    cmd("reset", -2, ADMIN | NOSCRIPT | STALE, no_cluster)
        .doc("3.0.0", "Reset a Redis Cluster node")
        .complexity("O(N) where N is the number of known nodes. The command may execute a FLUSHALL as a side effect."),
    cmd("saveconfig", 2, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Forces the node to save cluster state on disk"),
    cmd("set-config-epoch", 3, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Set the configuration epoch in a new node"),
    cmd("setslot", -4, ADMIN | STALE | NO_ASYNC_LOADING, no_cluster)
        .doc("3.0.0", "Bind a hash slot to a specific node"),
    cmd("shards", 2, STALE, no_cluster)
        .doc("7.0.0", "Get array of cluster slots to node mappings")
        .complexity("O(N) where N is the total number of cluster nodes")
        .tips(&["nondeterministic_output"]),
    cmd("slaves", 3, ADMIN | STALE, no_cluster)
        .doc("3.0.0", "List replica nodes of the specified master node")
        .tips(&["nondeterministic_output"]),
    cmd("slots", 2, STALE, no_cluster)
        .doc("3.0.0", "Get array of Cluster slot to node mappings")
        .complexity("O(N) where N is the total number of Cluster nodes")
        .tips(&["nondeterministic_output"]),
};

/// CLUSTER's subcommands, READONLY, READWRITE, ASKING: refused as a
/// standalone Redis refuses them.
fn no_cluster(_ctx: &mut Ctx, _args: Args) -> CmdResult {
    Err(CmdError::err("This instance has cluster support disabled"))
}

fn ping(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() <= 2 && super::pubsub::in_resp2_subscribed_mode(ctx.client) {
        ctx.out.array(2);
        ctx.out.bulk(b"pong");
        ctx.out
            .bulk(if args.len() == 2 { args.get(1) } else { b"" });
        return Ok(());
    }
    match args.len() {
        1 => ctx.out.simple("PONG"),
        2 => ctx.out.bulk(args.get(1)),
        _ => return Err(CmdError::WrongArity("ping".into())),
    }
    Ok(())
}

fn echo(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.out.bulk(args.get(1));
    Ok(())
}

fn quit(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.out.ok();
    ctx.client.close_after_reply = true;
    Ok(())
}

fn select(ctx: &mut Ctx, args: Args) -> CmdResult {
    let n = arg_i64(args.get(1))?;
    if n < 0 || n as usize >= ctx.core.keyspace.num_dbs() {
        return Err(CmdError::err("DB index is out of range"));
    }
    ctx.client.db = n as usize;
    ctx.out.ok();
    Ok(())
}

/// Authenticates the connection as `user` (AUTH, HELLO AUTH); a failure
/// is logged to ACL LOG under the command's name, as Redis does.
fn authenticate(ctx: &mut Ctx, user: &[u8], pass: &[u8], cmd: &[u8]) -> CmdResult {
    let Some(u) = ctx.core.acl.authenticate(user, pass) else {
        super::acl::log_auth_failure(ctx.core, ctx.client, user, cmd);
        return Err(CmdError::Msg(
            "WRONGPASS invalid username-password pair or user is disabled.".into(),
        ));
    };
    set_user(ctx.core, ctx.client, u);
    ctx.client.authenticated = true;
    Ok(())
}

/// Makes `u` the connection's user (CLIENT LIST shows its name).
pub(crate) fn set_user(
    core: &crate::core::Core,
    client: &mut crate::core::client::ClientState,
    u: std::sync::Arc<crate::core::acl::User>,
) {
    if let Some(sh) = &client.shared {
        *sh.user.lock() = u.name.clone();
    }
    client.acl_gen = core.acl.generation();
    client.user = Some(u);
}

fn auth(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (user, pass): (&[u8], &[u8]) = match args.len() {
        2 => (b"default", args.get(1)),
        3 => (args.get(1), args.get(2)),
        _ => return Err(CmdError::Syntax),
    };
    if args.len() == 2 && ctx.core.acl.default_user().nopass {
        return Err(CmdError::err(
            "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        ));
    }
    authenticate(ctx, user, pass, args.get(0))?;
    ctx.out.ok();
    Ok(())
}

fn hello(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut proto = None;
    let mut i = 1;
    if args.len() >= 2 {
        let v = arg_i64(args.get(1)).map_err(|_| {
            CmdError::Msg("ERR Protocol version is not an integer or out of range".into())
        })?;
        if !(2..=3).contains(&v) {
            return Err(CmdError::Msg("NOPROTO unsupported protocol version".into()));
        }
        proto = Some(v as u8);
        i = 2;
    }
    let mut name = None;
    let mut auth_pair = None;
    while i < args.len() {
        let more = args.len() - i - 1;
        if eq_ic(args.get(i), "AUTH") && more >= 2 {
            auth_pair = Some((args.get(i + 1), args.get(i + 2)));
            i += 3;
        } else if eq_ic(args.get(i), "SETNAME") && more >= 1 {
            name = Some(args.get(i + 1));
            i += 2;
        } else {
            return Err(CmdError::err(format!(
                "Syntax error in HELLO option '{}'",
                super::util::lossy(args.get(i))
            )));
        }
    }
    if let Some((u, p)) = auth_pair {
        authenticate(ctx, u, p, args.get(0))?;
    }
    if !ctx.client.authenticated && ctx.core.acl.auth_required() {
        return Err(CmdError::Msg("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into()));
    }
    if let Some(n) = name {
        super::server_cmds::validate_client_name(n)?;
        super::server_cmds::set_client_name(ctx, n);
    }
    if let Some(p) = proto {
        ctx.client.resp = p;
        ctx.out.resp = p;
        if let Some(sh) = &ctx.client.shared {
            sh.resp
                .store(p as usize, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let out = &mut *ctx.out;
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(crate::REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(ctx.client.resp as i64);
    out.bulk(b"id");
    out.int(ctx.client.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(if ctx.admin.is_replica() {
        b"replica"
    } else {
        b"master"
    });
    out.bulk(b"modules");
    out.array(0);
    Ok(())
}

fn reset(ctx: &mut Ctx, _args: Args) -> CmdResult {
    super::pubsub::remove_client(ctx.core, ctx.client);
    super::multi::reset(ctx.client);
    ctx.core.tracking.remove_client(ctx.client.id);
    let c = &mut *ctx.client;
    c.db = 0;
    c.resp = 2;
    ctx.out.resp = 2;
    c.name = None;
    c.reply_mode = crate::core::client::ReplyMode::On;
    c.no_evict = false;
    c.no_touch = false;
    if c.monitor {
        c.monitor = false;
        if let Some(sh) = &c.shared {
            sh.monitor
                .store(false, std::sync::atomic::Ordering::Relaxed);
            ctx.core
                .clients
                .monitors
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    if let Some(sh) = &c.shared {
        sh.name.lock().clear();
        sh.resp.store(2, std::sync::atomic::Ordering::Relaxed);
    }
    c.authenticated = !ctx.core.acl.auth_required();
    if c.user.is_some() {
        let d = ctx.core.acl.default_user();
        set_user(ctx.core, ctx.client, d);
    }
    ctx.out.simple("RESET");
    Ok(())
}
