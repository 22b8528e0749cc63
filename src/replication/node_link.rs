//! The client side of a link to another node, shared by a replica's link
//! to its master (`replica/link.rs`) and an active link to its peer
//! (`active/link.rs`): resolving and connecting within the link's timeout,
//! TLS when `tls-replication` is on, and the handshake steps both send,
//! AUTH with `masteruser`/`masterauth` and `REPLCONF listening-port` with
//! the port other nodes reach us at.
//!
//! What a refusal means differs between the two (a replica logs a refused
//! REPLCONF and goes on, as Redis's does; an active link stops), and so do
//! their error texts: these steps return the reply, and the caller decides.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::conn::Stream;
use crate::config::Config;
use crate::core::Core;

/// Resolves `host` and connects within `timeout` from `bind-source-addr`
/// (if set), with the socket options both links use: no Nagle delay, a
/// one-second read timeout (a quiet second returns to the caller) and
/// `timeout` to write. `failed` words a connection error (each link logs
/// its own text).
pub(crate) fn connect(
    core: &Core,
    (host, port): (&str, u16),
    timeout: Duration,
    failed: impl FnOnce(std::io::Error) -> String,
) -> Result<TcpStream, String> {
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("can't resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("can't resolve {host}"))?;
    let source = core.config.read().get_str("bind-source-addr");
    let s = connect_from(&source, &addr, timeout).map_err(failed)?;
    let _ = s.set_nodelay(true);
    s.set_read_timeout(Some(Duration::from_secs(1)))
        .and_then(|()| s.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// A socket bound to `source` (Redis's bind-source-addr: an address,
/// resolved as a host name would be; "" lets the kernel choose), connected
/// to `addr` within `timeout`. A bind that fails fails the connection, as
/// Redis's anetTcpGenericConnect (`bind: <reason>`).
fn connect_from(
    source: &str,
    addr: &std::net::SocketAddr,
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    if source.is_empty() {
        return TcpStream::connect_timeout(addr, timeout);
    }
    let bind_err = |e: std::io::Error| std::io::Error::new(e.kind(), format!("bind: {e}"));
    let from = (source, 0)
        .to_socket_addrs()
        .map_err(bind_err)?
        .find(|a| a.is_ipv4() == addr.is_ipv4())
        .ok_or_else(|| bind_err(std::io::ErrorKind::AddrNotAvailable.into()))?;
    let s = Socket::new(Domain::for_address(*addr), Type::STREAM, None)?;
    s.bind(&from.into()).map_err(bind_err)?;
    s.connect_timeout(&(*addr).into(), timeout)?;
    Ok(s.into())
}

/// `s` as the link's stream: over TLS with `tls-replication` on (the
/// client side of `core/tls.rs`, see `conn::secure`), else plain. `who`
/// names the other side in errors ("master", "peer").
pub(crate) fn secure(core: &Core, s: TcpStream, host: &str, who: &str) -> Result<Stream, String> {
    let tls = match core.config.read().get_bool("tls-replication") {
        true => Some(
            core.tls
                .client()
                .ok_or("tls-replication is on but TLS is not configured")?,
        ),
        false => None,
    };
    super::conn::secure(s, host, tls, who)
}

/// What a link authenticates with: `masteruser` (empty: the default user)
/// and `masterauth` (empty: no AUTH).
pub(crate) struct Credentials {
    pub user: String,
    pub pass: String,
}

impl Credentials {
    pub(crate) fn from_config(c: &Config) -> Self {
        Credentials {
            user: c.get_str("masteruser"),
            pass: c.get_str("masterauth"),
        }
    }

    /// The user as a log line names it.
    pub(crate) fn user_name(&self) -> &str {
        if self.user.is_empty() {
            "default"
        } else {
            &self.user
        }
    }
}

/// The port other nodes reach us at, as `REPLCONF listening-port` tells
/// it: our TLS port when links go over TLS (and one is set), as Redis's,
/// else `tcp_port`.
pub(crate) fn own_port(c: &Config, tcp_port: i64) -> i64 {
    match (c.get_bool("tls-replication"), c.get_i64("tls-port")) {
        (true, p) if p != 0 => p,
        _ => tcp_port,
    }
}

/// A link's connection as the handshake steps use it.
pub(crate) trait Handshake {
    /// Sends one command.
    fn send(&mut self, argv: &[&[u8]]) -> Result<(), String>;
    /// Reads one reply line (without CRLF).
    fn line(&mut self) -> Result<String, String>;
    /// The next command sent is `step`'s (a replica's link shows each step
    /// as its stage, and times it).
    fn step(&mut self, _step: Step) {}
}

/// The handshake steps both links send.
pub(crate) enum Step {
    Auth,
    ListeningPort,
}

/// AUTH [user] password: None without `masterauth` (nothing sent), else
/// the reply.
pub(crate) fn auth(link: &mut impl Handshake, c: &Credentials) -> Result<Option<String>, String> {
    if c.pass.is_empty() {
        return Ok(None);
    }
    link.step(Step::Auth);
    if c.user.is_empty() {
        link.send(&[b"AUTH", c.pass.as_bytes()])?;
    } else {
        link.send(&[b"AUTH", c.user.as_bytes(), c.pass.as_bytes()])?;
    }
    link.line().map(Some)
}

/// REPLCONF listening-port `port`: the reply.
pub(crate) fn listening_port(link: &mut impl Handshake, port: &str) -> Result<String, String> {
    link.step(Step::ListeningPort);
    link.send(&[b"REPLCONF", b"listening-port", port.as_bytes()])?;
    link.line()
}
