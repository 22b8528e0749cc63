//! TLS on `tls-port` (rustls) beside the plain port: certificates from the
//! distribution's openssl, clients from redis-cli `--tls` (Debian's is built
//! with TLS), client certificates required, optional or not asked for, and
//! bad input (plaintext to the TLS port, a missing certificate) answered
//! without harm to the server.

mod common;

use std::io::{Read, Write};
use std::process::Command;

use common::{free_port, tempdir, Server, TestDir};

/// A CA, a server certificate for 127.0.0.1 and a client certificate, all
/// X.509 v3 (rustls takes no v1 certificates).
fn make_certs() -> TestDir {
    // One directory per call: the tests of this file run at once.
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = tempdir(&format!("tls-certs-{n}"));
    let script = r#"
set -e
cat > ext.cnf <<EOF
[server]
basicConstraints = CA:FALSE
subjectAltName = IP:127.0.0.1,DNS:localhost
extendedKeyUsage = serverAuth
[client]
basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth
EOF
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=test-ca 2>/dev/null
for who in server client; do
  openssl req -newkey rsa:2048 -nodes -keyout $who.key -out $who.csr -subj /CN=$who 2>/dev/null
  openssl x509 -req -in $who.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile ext.cnf -extensions $who -out $who.crt 2>/dev/null
done
"#;
    let ok = Command::new("bash")
        .args(["-c", script])
        .current_dir(&*dir)
        .status()
        .expect("openssl")
        .success();
    assert!(ok, "openssl failed");
    dir
}

/// redis-cli over TLS; returns (success, output).
fn cli(port: u16, certs: &TestDir, client_cert: bool, args: &[&str]) -> (bool, String) {
    let p = |f: &str| certs.join(f).to_string_lossy().into_owned();
    let mut c = Command::new("redis-cli");
    c.args(["-p", &port.to_string(), "--tls", "--cacert", &p("ca.crt")]);
    if client_cert {
        c.args(["--cert", &p("client.crt"), "--key", &p("client.key")]);
    }
    let out = c.args(args).output().expect("redis-cli");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (
        out.status.success() && !text.contains("rror"),
        text.trim().to_string(),
    )
}

fn tls_server(certs: &TestDir, auth: &str) -> (Server, u16) {
    let p = |f: &str| certs.join(f).to_string_lossy().into_owned();
    let tls_port = free_port();
    let s = Server::start(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &p("server.crt"),
        "--tls-key-file",
        &p("server.key"),
        "--tls-ca-cert-file",
        &p("ca.crt"),
        "--tls-auth-clients",
        auth,
    ]);
    (s, tls_port)
}

#[test]
fn plain_and_tls_ports_serve_the_same_data() {
    let certs = make_certs();
    let (s, port) = tls_server(&certs, "yes");
    let mut c = s.conn();
    common::cmd::<String>(&mut c, &["SET", "k", "plain"]);
    assert_eq!(
        cli(port, &certs, true, &["GET", "k"]),
        (true, "plain".into())
    );
    assert_eq!(
        cli(port, &certs, true, &["SET", "big", &"x".repeat(100_000)]).1,
        "OK"
    );
    assert_eq!(common::cmd::<i64>(&mut c, &["STRLEN", "big"]), 100_000);
    // Without a client certificate the handshake fails; the server goes on.
    assert!(!cli(port, &certs, false, &["PING"]).0);
    // Plaintext to the TLS port: the connection is closed.
    let mut t = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    t.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    t.write_all(b"PING\r\n").unwrap();
    let mut got = vec![];
    let _ = t.read_to_end(&mut got);
    assert!(!String::from_utf8_lossy(&got).contains("PONG"), "{got:?}");
    assert_eq!(common::cmd::<String>(&mut c, &["PING"]), "PONG");
}

#[test]
fn client_certificates_optional_or_not_asked_for() {
    let certs = make_certs();
    let (_s, port) = tls_server(&certs, "optional");
    assert_eq!(cli(port, &certs, false, &["PING"]), (true, "PONG".into()));
    assert_eq!(cli(port, &certs, true, &["PING"]), (true, "PONG".into()));
    let (_s, port) = tls_server(&certs, "no");
    assert_eq!(cli(port, &certs, false, &["PING"]), (true, "PONG".into()));
}

#[test]
fn a_missing_certificate_stops_start_up() {
    let out = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
        .args([
            "--port",
            &free_port().to_string(),
            "--tls-port",
            &free_port().to_string(),
        ])
        .args([
            "--tls-cert-file",
            "/nonexistent.crt",
            "--tls-key-file",
            "/nonexistent.key",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(text.contains("Failed to configure TLS"), "{text}");
}

/// The refusal DECISIONS 100 asks for: rustls has no CBC suites.
const NO_CBC: &str = "LatticeDB's TLS (rustls) has no CBC, RSA key exchange or DHE suites";

#[test]
fn tls_ciphers_naming_only_cbc_suites_is_refused_and_says_why() {
    let certs = make_certs();
    let (s, port) = tls_server(&certs, "yes");
    let mut c = s.conn();
    let set = |c: &mut redis::Connection, v: &str| {
        redis::cmd("CONFIG")
            .arg(&["SET", "tls-ciphers", v])
            .query::<()>(c)
    };
    // Only CBC suites (unit/tls's "AES128-SHA256:AES256-SHA256"): refused
    // with Redis's reply, the reason logged.
    let err = set(&mut c, "AES128-SHA256:AES256-SHA256").unwrap_err();
    assert!(
        err.to_string()
            .contains("Unable to update TLS configuration"),
        "{err}"
    );
    let line = "Failed to configure ciphers: AES128-SHA256:AES256-SHA256: none of \
                AES128-SHA256, AES256-SHA256 is available. ";
    assert!(s.log().contains(&format!("{line}{NO_CBC}")), "{}", s.log());
    // A CBC suite beside one rustls has: that one is kept, the other
    // logged as ignored; over TLS 1.2 only the kept suite connects.
    set(&mut c, "AES128-SHA256:ECDHE-RSA-AES256-GCM-SHA384").unwrap();
    assert!(s
        .log()
        .contains(&format!("tls-ciphers: ignoring AES128-SHA256. {NO_CBC}")));
    let _: () = common::cmd(&mut c, &["CONFIG", "SET", "tls-protocols", "TLSv1.2"]);
    let with = |cipher: &str| cli(port, &certs, true, &["--tls-ciphers", cipher, "PING"]);
    assert_eq!(with("ECDHE-RSA-AES256-GCM-SHA384"), (true, "PONG".into()));
    assert!(!with("ECDHE-RSA-AES128-GCM-SHA256").0);
    // OpenSSL's "-ALL:<suite>" is that suite alone.
    set(&mut c, "-ALL:ECDHE-RSA-AES128-GCM-SHA256").unwrap();
    assert_eq!(with("ECDHE-RSA-AES128-GCM-SHA256"), (true, "PONG".into()));
    assert!(!with("ECDHE-RSA-AES256-GCM-SHA384").0);
    // At start-up the same list stops the server, saying why.
    let p = |f: &str| certs.join(f).to_string_lossy().into_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
        .args(["--port", &free_port().to_string()])
        .args(["--tls-port", &free_port().to_string()])
        .args([
            "--tls-cert-file",
            &p("server.crt"),
            "--tls-key-file",
            &p("server.key"),
        ])
        .args(["--tls-ca-cert-file", &p("ca.crt")])
        .args(["--tls-ciphers", "AES256-SHA256"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(text.contains("Failed to configure TLS"), "{text}");
    assert!(text.contains(NO_CBC), "{text}");
}

/// The suite `openssl s_client` gets over TLS 1.2 offering `ciphers`.
fn negotiated(port: u16, ciphers: &str) -> String {
    let out = Command::new("bash")
        .args([
            "-c",
            &format!(
            "echo | timeout 10 openssl s_client -connect 127.0.0.1:{port} -tls1_2 -cipher {ciphers}"
        ),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().find(|l| l.contains("Cipher is"));
    line.unwrap_or_default()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string()
}

/// unit/tls's "tls-prefer-server-ciphers behaves as expected", with the
/// two GCM suites in place of its two CBC ones (DECISIONS 100).
#[test]
fn tls_prefer_server_ciphers_picks_the_servers_order() {
    let certs = make_certs();
    let (s, port) = tls_server(&certs, "no");
    let mut c = s.conn();
    let set = |c: &mut redis::Connection, k: &str, v: &str| {
        let _: () = common::cmd(c, &["CONFIG", "SET", k, v]);
    };
    set(
        &mut c,
        "tls-ciphers",
        "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384",
    );
    let client = "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256";
    assert_eq!(negotiated(port, client), "ECDHE-RSA-AES256-GCM-SHA384");
    set(&mut c, "tls-prefer-server-ciphers", "yes");
    assert_eq!(negotiated(port, client), "ECDHE-RSA-AES128-GCM-SHA256");
}
