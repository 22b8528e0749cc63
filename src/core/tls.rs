/*
 * TLS configuration (issue 26): the rustls configurations the `tls-*`
 * directives describe, built as Redis's tlsConfigure builds its SSL_CTXs,
 * and the pair the server uses now.
 *
 * [`build`] makes both sides at once, or fails with the line Redis logs
 * ("Failed to load certificate: ...", "No tls-key-file configured!"):
 * - the server side, for connections to `tls-port` (and replicas or
 *   active peers arriving there): the certificate and key, client
 *   certificates checked against `tls-ca-cert-file`/`-dir` as
 *   `tls-auth-clients` says, `tls-protocols`, the cipher directives
 *   mapped onto rustls's suites, `tls-prefer-server-ciphers`,
 *   `tls-session-caching`/`-cache-size`;
 * - the client side, for links we open (`tls-replication`: a replica to
 *   its master, an active link to its peer): the peer is verified against
 *   the same CAs, by its chain only (Redis sets SSL_VERIFY_PEER and checks
 *   no host name: a master's certificate need not name the address a
 *   replica uses), presenting `tls-client-cert-file`/`-key-file` when both
 *   are set, else the server's own pair.
 *
 * [`Tls`] holds the two current configurations; start-up and CONFIG SET
 * of a `tls-*` directive install new ones whole (a connection keeps the
 * one it started with), so a bad file changes nothing.
 */

use std::io;
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::ring::cipher_suite as cs;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme, SupportedCipherSuite,
};

use crate::config::Config;
use crate::core::tls_key::load_key;

/// The configurations in use (see the module comment).
#[derive(Default)]
pub struct Tls {
    current: RwLock<Configs>,
}

/// Both sides' configurations; `None` where TLS is not configured.
#[derive(Default, Clone)]
pub struct Configs {
    pub server: Option<Arc<ServerConfig>>,
    pub client: Option<Arc<ClientConfig>>,
}

impl Tls {
    /// The server side, for a connection accepted now.
    pub fn server(&self) -> Option<Arc<ServerConfig>> {
        self.current.read().server.clone()
    }

    /// The client side, for a link opened now.
    pub fn client(&self) -> Option<Arc<ClientConfig>> {
        self.current.read().client.clone()
    }

    pub fn install(&self, c: Configs) {
        *self.current.write() = c;
    }
}

/// Whether TLS is to be configured at all: Redis's condition (`tls-port`,
/// `tls-replication` or `tls-cluster`).
pub(crate) fn wanted(cfg: &Config) -> bool {
    cfg.get_i64("tls-port") != 0 || cfg.get_bool("tls-replication") || cfg.get_bool("tls-cluster")
}

/// The directives a change of which rebuilds the configurations
/// (`tls-port` too: a TLS port opened at run time needs them).
pub(crate) fn is_tls_directive(name: &str) -> bool {
    name.starts_with("tls-")
}

/// Builds both sides from `cfg` (see the module comment); the error is
/// the line to log.
pub(crate) fn build(cfg: &Config) -> Result<Configs, String> {
    let cert_file = cfg.get_str("tls-cert-file");
    let key_file = cfg.get_str("tls-key-file");
    if cert_file.is_empty() {
        return Err("No tls-cert-file configured!".into());
    }
    if key_file.is_empty() {
        return Err("No tls-key-file configured!".into());
    }
    let auth = cfg.get_str("tls-auth-clients");
    let need_ca = auth != "no" || cfg.get_bool("tls-replication") || cfg.get_bool("tls-cluster");
    let (ca_file, ca_dir) = (
        cfg.get_str("tls-ca-cert-file"),
        cfg.get_str("tls-ca-cert-dir"),
    );
    if need_ca && ca_file.is_empty() && ca_dir.is_empty() {
        return Err("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, tls-replication or tls-auth-clients are enabled!".into());
    }
    let versions = protocol_versions(&cfg.get_str("tls-protocols"))?;
    let provider = Arc::new(provider(cfg)?);
    let own = (
        load_certs(&cert_file)?,
        load_key(&key_file, &cfg.get_str("tls-key-file-pass"))?,
    );
    let roots = match ca_file.is_empty() && ca_dir.is_empty() {
        true => None,
        false => Some(Arc::new(load_roots(&ca_file, &ca_dir)?)),
    };
    let sides = (provider, versions.as_slice());
    let server = server_config(
        cfg,
        sides.clone(),
        roots.clone(),
        (own.0.clone(), own.1.clone_key()),
    )?;
    let client = match roots {
        Some(roots) => Some(Arc::new(client_config(cfg, sides, roots, own)?)),
        None => None,
    };
    Ok(Configs {
        server: Some(Arc::new(server)),
        client,
    })
}

/// What both sides are built with: the provider (its suites) and the
/// protocol versions.
type Sides<'a> = (
    Arc<CryptoProvider>,
    &'a [&'static rustls::SupportedProtocolVersion],
);

/// A certificate chain and its key.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The server side: client certificates as `tls-auth-clients` says, the
/// preference and session directives.
fn server_config(
    cfg: &Config,
    (provider, versions): Sides,
    roots: Option<Arc<RootCertStore>>,
    (certs, key): Identity,
) -> Result<ServerConfig, String> {
    let key_file = cfg.get_str("tls-key-file");
    let auth = cfg.get_str("tls-auth-clients");
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?;
    let builder = match (roots, auth.as_str()) {
        (Some(roots), "yes" | "optional") => {
            let mut v = WebPkiClientVerifier::builder_with_provider(roots, provider);
            if auth == "optional" {
                v = v.allow_unauthenticated();
            }
            builder.with_client_cert_verifier(v.build().map_err(|e| e.to_string())?)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut server = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("Failed to load private key: {key_file}: {e}"))?;
    server.ignore_client_order = cfg.get_bool("tls-prefer-server-ciphers");
    if cfg.get_bool("tls-session-caching") {
        let size = cfg.get_i64("tls-session-cache-size");
        let size = if size > 0 { size as usize } else { 20 * 1024 };
        server.session_storage = ServerSessionMemoryCache::new(size);
    } else {
        server.session_storage = Arc::new(NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
    }
    Ok(server)
}

/// The client side: the peer checked by chain, our certificate presented.
fn client_config(
    cfg: &Config,
    (provider, versions): Sides,
    roots: Arc<RootCertStore>,
    own: Identity,
) -> Result<ClientConfig, String> {
    let (cert_file, key_file) = (
        cfg.get_str("tls-client-cert-file"),
        cfg.get_str("tls-client-key-file"),
    );
    let (certs, key) = if !cert_file.is_empty() && !key_file.is_empty() {
        let pass = cfg.get_str("tls-client-key-file-pass");
        (load_certs(&cert_file)?, load_key(&key_file, &pass)?)
    } else {
        own
    };
    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {e}"))?;
    ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
        .with_client_auth_cert(certs, key)
        .map_err(|e| format!("Failed to load private key: {key_file}: {e}"))
}

/// Verifies a server's certificate chain against our CAs but not the name
/// it is reached by, as Redis's replication (OpenSSL's SSL_VERIFY_PEER
/// without a host check) does.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain (validity dates included) before the
        // name: a name mismatch means the chain was good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
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
            // Redis's line; rustls offers nothing older than 1.2.
            _ => {
                return Err(format!(
                    "Invalid tls-protocols specified. Use a combination of 'TLSv1.2' and 'TLSv1.3' (older versions are not supported): {p}"
                ))
            }
        }
    }
    Ok(v)
}

/// OpenSSL's names of the suites rustls (with *ring*) has.
static SUITES: &[(&str, SupportedCipherSuite)] = &[
    ("TLS_AES_256_GCM_SHA384", cs::TLS13_AES_256_GCM_SHA384),
    ("TLS_AES_128_GCM_SHA256", cs::TLS13_AES_128_GCM_SHA256),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        cs::TLS13_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// *ring* with the suites `tls-ciphers` (TLS 1.2) and `tls-ciphersuites`
/// (TLS 1.3) leave (see [`select`]). A directive that leaves none fails
/// and names why (no CBC suites: DECISIONS 100); one that names suites
/// rustls lacks beside some it has keeps those and logs the others.
fn provider(cfg: &Config) -> Result<CryptoProvider, String> {
    // ring: builds from Rust and assembly alone (aws-lc-rs, rustls's
    // preferred provider, needs cmake); its one deprecation is that it
    // offers no post-quantum key exchange (docs/DECISIONS.md 72).
    #[allow(deprecated)]
    let mut p = rustls::crypto::ring::default_provider();
    let is13 = |s: &SupportedCipherSuite| matches!(s, SupportedCipherSuite::Tls13(_));
    let (all13, all12): (Vec<_>, Vec<_>) = p.cipher_suites.iter().copied().partition(is13);
    let v12 = suites_of(cfg, "tls-ciphers", "ciphers", &all12)?;
    let v13 = suites_of(cfg, "tls-ciphersuites", "ciphersuites", &all13)?;
    p.cipher_suites = v13.into_iter().chain(v12).collect();
    Ok(p)
}

/// What rustls offers, for the lines that refuse or ignore other suites.
const OFFERED: &str = "LatticeDB's TLS (rustls) has no CBC, RSA key exchange or DHE suites; \
    it offers TLS 1.3's AES-GCM and CHACHA20-POLY1305 suites and, for TLS 1.2, \
    ECDHE-ECDSA/ECDHE-RSA with AES-GCM or CHACHA20-POLY1305 (docs/SECURITY.md)";

/// The suites directive `name` leaves of `all`; `what` is Redis's word in
/// its "Failed to configure <what>" line.
fn suites_of(
    cfg: &Config,
    name: &str,
    what: &str,
    all: &[SupportedCipherSuite],
) -> Result<Vec<SupportedCipherSuite>, String> {
    let spec = cfg.get_str(name);
    let (kept, missing) = select(&spec, all);
    if kept.is_empty() {
        let none = match missing.is_empty() {
            true => "it leaves no suite".to_string(),
            false => format!("none of {} is available", missing.join(", ")),
        };
        return Err(format!(
            "Failed to configure {what}: {spec}: {none}. {OFFERED}"
        ));
    }
    if !missing.is_empty() {
        crate::log_warning!("{name}: ignoring {}. {OFFERED}", missing.join(", "));
    }
    Ok(kept)
}

/// The suites an OpenSSL cipher string leaves of `all`, and the suite
/// names it adds that rustls does not have (CBC ones, say), read word by
/// word as OpenSSL does: a suite name adds that suite, `-name`/`!name`
/// remove it, `-ALL`/`!ALL` remove everything, and any other keyword
/// (`DEFAULT`, `HIGH`, `ECDHE+AESGCM`) adds every suite: rustls's set is
/// already what those select, and OpenSSL's whole cipher-string language
/// is not re-implemented (docs/SECURITY.md). An empty string is all.
fn select(spec: &str, all: &[SupportedCipherSuite]) -> (Vec<SupportedCipherSuite>, Vec<String>) {
    let words = spec.split([':', ',', ' ']).filter(|w| !w.is_empty());
    let named = |w: &str| {
        SUITES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(w))
            .and_then(|(_, s)| all.iter().find(|a| a.suite() == s.suite()).copied())
    };
    let is_name = |w: &str| w.contains('-') || w.to_ascii_uppercase().starts_with("TLS_");
    let (mut kept, mut missing): (Vec<SupportedCipherSuite>, _) = (vec![], vec![]);
    if spec.trim().is_empty() {
        return (all.to_vec(), missing);
    }
    for w in words {
        let removed = w.strip_prefix(['!', '-']);
        match (removed, w.strip_prefix('+')) {
            (Some(r), _) if r.eq_ignore_ascii_case("ALL") => kept.clear(),
            (Some(r), _) => kept.retain(|k| named(r).is_none_or(|n| n.suite() != k.suite())),
            (None, Some(_)) => {} // "+X" moves suites to the end: order only
            (None, None) if is_name(w) => match named(w) {
                Some(s) => kept.push(s),
                None => missing.push(w.to_string()),
            },
            (None, None) => kept.extend_from_slice(all),
        }
    }
    let mut unique: Vec<SupportedCipherSuite> = vec![];
    for k in kept {
        if !unique.iter().any(|u| u.suite() == k.suite()) {
            unique.push(k);
        }
    }
    (unique, missing)
}

fn open(path: &str) -> Result<io::BufReader<std::fs::File>, String> {
    std::fs::File::open(path)
        .map(io::BufReader::new)
        .map_err(|e| e.to_string())
}

fn load_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let fail = |e: String| format!("Failed to load certificate: {path}: {e}");
    let mut r = open(path).map_err(fail)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut r)
        .collect::<Result<_, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("no certificate found".into()));
    }
    Ok(certs)
}

/// The CAs peers' certificates are checked against: `tls-ca-cert-file`
/// and every file of `tls-ca-cert-dir`.
fn load_roots(file: &str, dir: &str) -> Result<RootCertStore, String> {
    let fail = |e: String| format!("Failed to configure CA certificate(s) file/directory: {e}");
    let mut roots = RootCertStore::empty();
    let mut files = vec![];
    if !file.is_empty() {
        files.push(file.to_string());
    }
    if !dir.is_empty() {
        let rd = std::fs::read_dir(dir).map_err(|e| fail(format!("{dir}: {e}")))?;
        for e in rd.flatten() {
            files.push(e.path().to_string_lossy().into_owned());
        }
    }
    for f in files {
        let mut r = open(&f).map_err(|e| fail(format!("{f}: {e}")))?;
        for c in rustls_pemfile::certs(&mut r) {
            let c = c.map_err(|e| fail(format!("{f}: {e}")))?;
            roots.add(c).map_err(|e| fail(format!("{f}: {e}")))?;
        }
    }
    if roots.is_empty() {
        return Err(fail("no CA certificate found".into()));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_strings_map_onto_rustls_suites() {
        let all: Vec<_> = SUITES[3..].iter().map(|(_, s)| *s).collect();
        let n = |spec: &str| select(spec, &all).0.len();
        assert_eq!(n(""), all.len());
        assert_eq!(n("DEFAULT:-AES128-SHA256"), all.len());
        assert_eq!(n("HIGH:!ECDHE-RSA-AES128-GCM-SHA256"), all.len() - 1);
        let (v, missing) = select("ECDHE-RSA-AES128-GCM-SHA256:AES128-SHA256", &all);
        assert_eq!((v.len(), missing), (1, vec!["AES128-SHA256".to_string()]));
        let (v, missing) = select("AES128-SHA256:AES256-SHA256", &all);
        assert!(v.is_empty());
        assert_eq!(missing, ["AES128-SHA256", "AES256-SHA256"]);
        // OpenSSL's "-ALL:X" is X alone.
        assert_eq!(n("-ALL:AES128-SHA256"), 0);
        assert_eq!(n("-ALL:ECDHE-RSA-CHACHA20-POLY1305"), 1);
        assert_eq!(n("DEFAULT:!ALL"), 0);
    }
}
