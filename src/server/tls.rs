/*
 * TLS for client connections (`tls-port`), with rustls: the server's
 * configuration built from the `tls-*` directives, and [`TlsStream`], a
 * socket whose reads and writes go through a rustls session, so that the
 * connection loop (`conn.rs`) serves it exactly as a plain socket.
 *
 * The stream keeps the connection loop's rule for edge-triggered
 * readiness: a read that returns less than asked has drained the socket
 * (it reads ciphertext until the socket would block before returning a
 * short read), so the loop may clear readiness as it does for TCP. Writes
 * hand plaintext to the session and push its records out; what the socket
 * does not take stays in the session and `flush` finishes it (the loop
 * flushes after each batch, waiting for writability).
 *
 * Plain and TLS ports are served at once; replication and active-active
 * links stay plain (`tls-replication` is refused).
 */

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};

use crate::config::Config;

/// The server's TLS configuration, or `None` without `tls-port`.
pub fn server_config(cfg: &Config) -> Result<Option<Arc<ServerConfig>>, String> {
    if cfg.get_i64("tls-port") == 0 {
        return Ok(None);
    }
    let fail = |what: &str| format!("Failed to configure TLS. Check logs for more info. ({what})");
    let certs = load_certs(&cfg.get_str("tls-cert-file")).map_err(|e| fail(&e))?;
    let key = load_key(&cfg.get_str("tls-key-file")).map_err(|e| fail(&e))?;
    // ring: builds from Rust and assembly alone (aws-lc-rs, rustls's
    // preferred provider, needs cmake); its one deprecation is that it
    // offers no post-quantum key exchange (docs/DECISIONS.md 72).
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions = protocol_versions(&cfg.get_str("tls-protocols")).map_err(|e| fail(&e))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| fail(&e.to_string()))?;
    let auth = cfg.get_str("tls-auth-clients");
    let builder = if auth == "no" {
        builder.with_no_client_auth()
    } else {
        let roots = load_roots(cfg).map_err(|e| fail(&e))?;
        let mut v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        if auth == "optional" {
            v = v.allow_unauthenticated();
        }
        builder.with_client_cert_verifier(v.build().map_err(|e| fail(&e.to_string()))?)
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| fail(&e.to_string()))?;
    Ok(Some(Arc::new(config)))
}

fn protocol_versions(spec: &str) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    if spec.trim().is_empty() {
        return Ok(vec![&rustls::version::TLS12, &rustls::version::TLS13]);
    }
    let mut v = vec![];
    for p in spec.split_whitespace() {
        match p.to_ascii_lowercase().as_str() {
            "tlsv1.2" => v.push(&rustls::version::TLS12),
            "tlsv1.3" => v.push(&rustls::version::TLS13),
            _ => {
                return Err(format!(
                    "Invalid tls-protocols specified: {p} (TLSv1.2 and TLSv1.3 are supported)"
                ))
            }
        }
    }
    Ok(v)
}

fn open(path: &str, what: &str) -> Result<io::BufReader<std::fs::File>, String> {
    if path.is_empty() {
        return Err(format!("{what} is not set"));
    }
    std::fs::File::open(path)
        .map(io::BufReader::new)
        .map_err(|e| format!("{what} '{path}': {e}"))
}

fn load_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let mut r = open(path, "tls-cert-file")?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut r)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls-cert-file '{path}': {e}"))?;
    if certs.is_empty() {
        return Err(format!("tls-cert-file '{path}': no certificate"));
    }
    Ok(certs)
}

fn load_key(path: &str) -> Result<PrivateKeyDer<'static>, String> {
    let mut r = open(path, "tls-key-file")?;
    rustls_pemfile::private_key(&mut r)
        .map_err(|e| format!("tls-key-file '{path}': {e}"))?
        .ok_or_else(|| format!("tls-key-file '{path}': no private key"))
}

/// The CAs client certificates are checked against: `tls-ca-cert-file`
/// and every file of `tls-ca-cert-dir`.
fn load_roots(cfg: &Config) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let mut files = vec![];
    let file = cfg.get_str("tls-ca-cert-file");
    if !file.is_empty() {
        files.push(file);
    }
    let dir = cfg.get_str("tls-ca-cert-dir");
    if !dir.is_empty() {
        let rd = std::fs::read_dir(&dir).map_err(|e| format!("tls-ca-cert-dir '{dir}': {e}"))?;
        for e in rd.flatten() {
            files.push(e.path().to_string_lossy().into_owned());
        }
    }
    if files.is_empty() {
        return Err("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, tls-replication or tls-auth-clients are enabled!".into());
    }
    for f in files {
        let mut r = open(&f, "tls-ca-cert-file")?;
        for c in rustls_pemfile::certs(&mut r) {
            let c = c.map_err(|e| format!("CA file '{f}': {e}"))?;
            roots.add(c).map_err(|e| format!("CA file '{f}': {e}"))?;
        }
    }
    Ok(roots)
}

/// A TCP socket carrying a TLS session (see the module comment).
pub struct TlsStream {
    sock: std::net::TcpStream,
    tls: RefCell<ServerConnection>,
}

impl TlsStream {
    pub fn new(sock: std::net::TcpStream, config: Arc<ServerConfig>) -> io::Result<TlsStream> {
        let conn = ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(TlsStream {
            sock,
            tls: RefCell::new(conn),
        })
    }
}

impl AsRawFd for TlsStream {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// Pushes the session's pending records to the socket; WouldBlock if the
/// socket does not take them all.
fn push(tls: &mut ServerConnection, mut sock: &std::net::TcpStream) -> io::Result<()> {
    while tls.wants_write() {
        tls.write_tls(&mut sock)?;
    }
    Ok(())
}

impl Read for &TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut tls = self.tls.borrow_mut();
        let mut n = 0;
        loop {
            while n < buf.len() {
                match tls.reader().read(&mut buf[n..]) {
                    Ok(0) => return Ok(n),
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
                }
            }
            if n == buf.len() {
                return Ok(n);
            }
            match tls.read_tls(&mut &self.sock) {
                Ok(0) => return Ok(n),
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        // The alert for the peer, then the error.
                        let _ = push(&mut tls, &self.sock);
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                    match push(&mut tls, &self.sock) {
                        Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                        _ => {}
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && n > 0 => return Ok(n),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Write for &TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut tls = self.tls.borrow_mut();
        push(&mut tls, &self.sock)?;
        let n = tls.writer().write(buf)?;
        match push(&mut tls, &self.sock) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        push(&mut self.tls.borrow_mut(), &self.sock)
    }
}
