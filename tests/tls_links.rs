//! TLS on replication and active-active links (`tls-replication`), CONFIG
//! SET of the TLS directives, and active peers under ACL users (issue 26).
//! Real processes: lattice-server and Debian's redis-server (built with
//! TLS) on either side of a replication link, certificates from
//! ci/gen-test-certs.sh (the distribution's openssl).

mod common;

use std::process::Command;

use common::*;

/// ci/gen-test-certs.sh's certificates: ca, server (serverAuth), client
/// (clientAuth), redis (either use).
fn certs(tag: &str) -> TestDir {
    let dir = tempdir(&format!("tls-links-{tag}"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/ci/gen-test-certs.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg(&*dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    dir
}

fn path(d: &TestDir, f: &str) -> String {
    d.join(f).to_string_lossy().into_owned()
}

/// The TLS directives the Tcl suite gives its servers: a server
/// certificate, a client certificate for links, the CA, tls-replication.
fn tls_args(d: &TestDir, tls_port: u16) -> Vec<String> {
    [
        ("--tls-port", tls_port.to_string()),
        ("--tls-cert-file", path(d, "server.crt")),
        ("--tls-key-file", path(d, "server.key")),
        ("--tls-client-cert-file", path(d, "client.crt")),
        ("--tls-client-key-file", path(d, "client.key")),
        ("--tls-ca-cert-file", path(d, "ca.crt")),
        ("--tls-replication", "yes".into()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Writes of several types, for a replica to copy.
fn some_writes(c: &mut redis::Connection, tag: &str) {
    for i in 0..200 {
        let _: () = cmd(c, &["SET", &format!("{tag}:s{i}"), &"v".repeat(i)]);
    }
    let _: i64 = cmd(c, &["RPUSH", &format!("{tag}:l"), "a", "b", "c"]);
    let _: i64 = cmd(c, &["HSET", &format!("{tag}:h"), "f", "1", "g", "2"]);
}

#[test]
fn a_replica_of_redis_over_tls_and_redis_replicating_from_us() {
    let d = certs("redis");
    // redis-server master, lattice replica: the replica connects to the
    // master's TLS port with its client certificate.
    let mport = free_port();
    let m = RedisOracle::start(&strs(&tls_args(&d, mport)));
    let mut mc = m.conn();
    some_writes(&mut mc, "before");
    let r = Server::start(&strs(&tls_args(&d, free_port())));
    let mut rc = r.conn();
    let _: String = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &mport.to_string()]);
    some_writes(&mut mc, "after");
    eventually("lattice to sync from redis over TLS", || {
        in_sync(&mut mc, &mut rc)
    });
    // lattice master, redis-server replica over TLS.
    let lport = free_port();
    let l = Server::start(&strs(&tls_args(&d, lport)));
    let mut lc = l.conn();
    some_writes(&mut lc, "l");
    let mut args = tls_args(&d, free_port());
    args.extend(["--replicaof".into(), "127.0.0.1".into(), lport.to_string()]);
    let o = RedisOracle::start(&strs(&args));
    let mut oc = o.conn();
    some_writes(&mut lc, "l2");
    eventually("redis to sync from lattice over TLS", || {
        in_sync(&mut lc, &mut oc)
    });
}

#[test]
fn the_server_certificate_is_the_client_certificate_when_none_is_set() {
    // As Redis's unit/tls: a replica without tls-client-cert-file presents
    // tls-cert-file (a certificate for either use) to its master.
    let d = certs("fallback");
    let mport = free_port();
    let m = Server::start(&strs(&tls_args(&d, mport)));
    let args: Vec<String> = [
        ("--tls-port", free_port().to_string()),
        ("--tls-cert-file", path(&d, "redis.crt")),
        ("--tls-key-file", path(&d, "redis.key")),
        ("--tls-ca-cert-file", path(&d, "ca.crt")),
        ("--tls-replication", "yes".into()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect();
    let r = Server::start(&strs(&args));
    let (mut mc, mut rc) = (m.conn(), r.conn());
    let _: String = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &mport.to_string()]);
    some_writes(&mut mc, "x");
    eventually("the replica to sync", || in_sync(&mut mc, &mut rc));
    // The master lists its replica at its TLS port (what it announced).
    let info: String = cmd(&mut mc, &["INFO", "replication"]);
    assert!(info.contains(&format!("port={}", args[1])), "{info}");
}

#[test]
fn a_replica_with_a_certificate_of_another_ca_is_refused_and_both_log_it() {
    let (d, other) = (certs("ca1"), certs("ca2"));
    let mport = free_port();
    let m = Server::start(&strs(&tls_args(&d, mport)));
    let mut args = tls_args(&d, free_port());
    // Its client certificate comes from a CA the master does not know.
    args[7] = path(&other, "client.crt");
    args[9] = path(&other, "client.key");
    let r = Server::start(&strs(&args));
    let mut rc = r.conn();
    let _: String = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &mport.to_string()]);
    eventually("both sides to log the refused handshake", || {
        m.log().contains("TLS handshake with 127.0.0.1:")
            && r.log()
                .contains(&format!("Replication link with MASTER 127.0.0.1:{mport}"))
    });
    let status: String = info_field(&mut rc, "master_link_status");
    assert_eq!(status, "down");
    assert_eq!(cmd::<String>(&mut m.conn(), &["PING"]), "PONG");
}

#[test]
fn config_set_reloads_the_certificates_or_changes_nothing() {
    let (d, other) = (certs("reload1"), certs("reload2"));
    let tport = free_port();
    let s = Server::start(&strs(&tls_args(&d, tport)));
    let o = RedisOracle::start(&strs(&tls_args(&d, free_port())));
    let mut c = s.conn();
    let bad = ["CONFIG", "SET", "tls-cert-file", "/nonexistent.crt"];
    let err = cmd_err(&mut c, &bad);
    assert_eq!(err, cmd_err(&mut o.conn(), &bad));
    assert_eq!(
        err,
        "ERR CONFIG SET failed (possibly related to argument 'tls-cert-file') - Unable to update TLS configuration. Check server logs."
    );
    assert!(s
        .log()
        .contains("Failed to load certificate: /nonexistent.crt"));
    let kept: Vec<String> = cmd(&mut c, &["CONFIG", "GET", "tls-cert-file"]);
    assert_eq!(kept[1], path(&d, "server.crt"));
    assert!(tls_ping(tport, &d));
    // A pair from another CA: new connections get it.
    let _: () = cmd(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "tls-cert-file",
            &path(&other, "server.crt"),
            "tls-key-file",
            &path(&other, "server.key"),
            "tls-ca-cert-file",
            &path(&other, "ca.crt"),
        ],
    );
    assert!(tls_ping(tport, &other));
    assert!(!tls_ping(tport, &d));
    // An encrypted key: refused without its password, read with it.
    let enc = path(&other, "server.key.enc");
    let ok = Command::new("openssl")
        .args(["rsa", "-in", &path(&other, "server.key"), "-out", &enc])
        .args(["-aes256", "-passout", "pass:1234"])
        .output()
        .unwrap();
    assert!(ok.status.success());
    let err = cmd_err(&mut c, &["CONFIG", "SET", "tls-key-file", &enc]);
    assert!(err.contains("Unable to update TLS"), "{err}");
    let _: () = cmd(&mut c, &["CONFIG", "SET", "tls-key-file-pass", "1234"]);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "tls-key-file", &enc]);
    assert!(tls_ping(tport, &other));
    // tls-auth-clients applies to new connections.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "tls-auth-clients", "no"]);
    assert!(cli(tport, &other, false, &["PING"]).contains("PONG"));
    let _: () = cmd(&mut c, &["CONFIG", "SET", "tls-auth-clients", "yes"]);
    assert!(!cli(tport, &other, false, &["PING"]).contains("PONG"));
}

/// redis-cli over TLS with `certs`' CA (and its client certificate).
fn cli(port: u16, certs: &TestDir, client_cert: bool, args: &[&str]) -> String {
    let mut c = Command::new("redis-cli");
    c.args([
        "-p",
        &port.to_string(),
        "--tls",
        "--cacert",
        &path(certs, "ca.crt"),
    ]);
    if client_cert {
        c.args(["--cert", &path(certs, "client.crt")]);
        c.args(["--key", &path(certs, "client.key")]);
    }
    let out = c.args(args).output().expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn tls_ping(port: u16, certs: &TestDir) -> bool {
    cli(port, certs, true, &["PING"]).trim() == "PONG"
}

// ------------------------------------------------------------ active peers

/// An active node with TLS (links over TLS), an admin password for the
/// default user, and the link user `peer` defined by `peer_rules`; it
/// authenticates to its peers as `peer`.
fn secure_node(d: &TestDir, tls_port: u16, peer_rules: &str) -> Server {
    let mut args = tls_args(d, tls_port);
    args.extend(["--requirepass", "admin", "--user", "peer", "on", ">peerpw"].map(String::from));
    args.extend(peer_rules.split(' ').map(String::from));
    args.extend(["--masteruser", "peer", "--masterauth", "peerpw"].map(String::from));
    active_node(&strs(&args))
}

fn admin(s: &Server) -> redis::Connection {
    let url = format!("redis://default:admin@127.0.0.1:{}/", s.port);
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// The ACL rule docs/SECURITY.md gives an active peer's link user.
const PEER_RULE: &str = "resetkeys resetchannels -@all +replconf +lattice.peer";

#[test]
fn an_active_pair_with_acl_users_and_tls_forms_and_converges() {
    let d = certs("active");
    let (pa, pb) = (free_port(), free_port());
    let (a, b) = (
        secure_node(&d, pa, PEER_RULE),
        secure_node(&d, pb, PEER_RULE),
    );
    let (mut ac, mut bc) = (admin(&a), admin(&b));
    let _: String = cmd(&mut ac, &["REPLICAOF", "127.0.0.1", &pb.to_string()]);
    let _: String = cmd(&mut bc, &["REPLICAOF", "127.0.0.1", &pa.to_string()]);
    some_writes(&mut ac, "a");
    some_writes(&mut bc, "b");
    eventually("the pair to converge over TLS", || {
        let (da, db) = (digest(&mut ac), digest(&mut bc));
        let n: i64 = cmd(&mut ac, &["DBSIZE"]);
        da == db && n == 2 * 202
    });
    // The link user needed nothing it lacks: no denials on either side.
    for c in [&mut ac, &mut bc] {
        let log: Vec<redis::Value> = cmd(c, &["ACL", "LOG"]);
        assert!(log.is_empty(), "{log:?}");
    }
}

#[test]
fn an_active_peer_without_the_right_user_or_certificate_is_refused_and_both_log_it() {
    let (d, other) = (certs("refuse1"), certs("refuse2"));
    // b's `peer` user may not run LATTICE.PEER.
    let (pa, pb) = (free_port(), free_port());
    let a = secure_node(&d, pa, PEER_RULE);
    let b = secure_node(&d, pb, "resetkeys -@all +replconf");
    let _: String = cmd(&mut admin(&a), &["REPLICAOF", "127.0.0.1", &pb.to_string()]);
    eventually("both sides to log the refused user", || {
        b.log()
            .contains("Refused the link of an active peer from 127.0.0.1:")
            && b.log().contains("(user 'peer'): NOPERM")
            && a.log().contains("the peer refused: -NOPERM")
    });
    // A peer whose password is wrong.
    let c = secure_node(&d, free_port(), PEER_RULE);
    let _: () = cmd(&mut admin(&c), &["CONFIG", "SET", "masterauth", "wrong"]);
    let _: String = cmd(&mut admin(&c), &["REPLICAOF", "127.0.0.1", &pa.to_string()]);
    eventually("both sides to log the failed AUTH", || {
        a.log().contains("(user 'default'): NOAUTH")
            && c.log().contains("Unable to AUTH to the peer as 'peer'")
    });
    // A peer whose certificate comes from another CA.
    let mut args = tls_args(&d, free_port());
    args[7] = path(&other, "client.crt");
    args[9] = path(&other, "client.key");
    args.extend(["--masteruser", "peer", "--masterauth", "peerpw"].map(String::from));
    let e = active_node(&strs(&args));
    let _: String = cmd(&mut e.conn(), &["REPLICAOF", "127.0.0.1", &pa.to_string()]);
    eventually("both sides to log the refused certificate", || {
        a.log().contains("TLS handshake with 127.0.0.1:")
            && e.log()
                .contains(&format!("Active replication link with 127.0.0.1:{pa}"))
    });
    let info: String = cmd(&mut admin(&a), &["INFO", "replication"]);
    assert!(!info.contains("state=connected"), "{info}");
}

#[test]
fn tls_to_the_plain_port_and_plaintext_to_the_tls_port_close_only_that_connection() {
    let d = certs("bad-input");
    let tport = free_port();
    let s = Server::start(&strs(&tls_args(&d, tport)));
    // TLS to the plain port: logged and closed, the server goes on.
    let out = cli(s.port, &d, true, &["PING"]);
    assert!(!out.contains("PONG"), "{out}");
    eventually("the TLS handshake on the plain port to be logged", || {
        s.log()
            .contains("it sent a TLS handshake to the plain port")
    });
    // Plaintext to the TLS port: closed, logged.
    let mut r = std::net::TcpStream::connect(("127.0.0.1", tport)).unwrap();
    use std::io::{Read, Write};
    r.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    r.write_all(b"PING\r\n").unwrap();
    let mut got = vec![];
    let _ = r.read_to_end(&mut got);
    assert!(!String::from_utf8_lossy(&got).contains("PONG"));
    eventually("the refused handshake to be logged", || {
        s.log().contains("TLS handshake with 127.0.0.1:")
    });
    // An expired client certificate (valid for no second at all).
    let made = std::time::SystemTime::now();
    let script = "openssl req -new -key client.key -subj /CN=expired | openssl x509 -req \
        -CA ca.crt -CAkey ca.key -days 0 -extfile v3.cnf -extensions client -out expired.crt";
    let ok = Command::new("bash")
        .args(["-c", script])
        .current_dir(&*d)
        .output()
        .unwrap();
    assert!(ok.status.success(), "{ok:?}");
    eventually("the certificate to expire", || {
        made.elapsed().unwrap_or_default() > std::time::Duration::from_secs(2)
    });
    let out = Command::new("redis-cli")
        .args([
            "-p",
            &tport.to_string(),
            "--tls",
            "--cacert",
            &path(&d, "ca.crt"),
        ])
        .args([
            "--cert",
            &path(&d, "expired.crt"),
            "--key",
            &path(&d, "client.key"),
        ])
        .arg("PING")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("PONG"));
    eventually("the expired certificate to be logged", || {
        s.log()
            .lines()
            .any(|l| l.contains("TLS handshake with") && l.contains("xpired"))
    });
    assert_eq!(cmd::<String>(&mut s.conn(), &["PING"]), "PONG");
    assert!(tls_ping(tport, &d));
}

/// Runs `script` with bash in `d`, asserting it succeeds.
fn sh(d: &TestDir, script: &str) {
    let out = Command::new("bash")
        .args(["-c", script])
        .current_dir(&**d)
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
}

/// `tls_args` with `key` (a file in `d`) as the server key and `pass`.
fn with_key(d: &TestDir, tls_port: u16, key: &str, pass: &str) -> Vec<String> {
    let mut args = tls_args(d, tls_port);
    let i = args.iter().position(|a| a == "--tls-key-file").unwrap();
    args[i + 1] = path(d, key);
    args.extend(["--tls-key-file-pass".to_string(), pass.to_string()]);
    args
}

#[test]
fn legacy_encrypted_pem_keys_are_read_with_the_password_as_redis_reads_them() {
    let d = certs("legacy-key");
    // OpenSSL 1.x's `genrsa -aes256` form, in AES and 3DES; an EC key in
    // AES-128 with its own certificate.
    sh(
        &d,
        "openssl rsa -in server.key -traditional -aes256 -passout pass:s3cret -out aes.key",
    );
    sh(
        &d,
        "openssl rsa -in server.key -traditional -des3 -passout pass:s3cret -out des3.key",
    );
    sh(
        &d,
        "openssl ecparam -genkey -name prime256v1 -noout -out ec.plain && \
         openssl ec -in ec.plain -aes128 -passout pass:s3cret -out ec.key && \
         openssl req -new -key ec.plain -subj /CN=ec | openssl x509 -req -CA ca.crt \
           -CAkey ca.key -days 30 -extfile v3.cnf -extensions server -out ec.crt",
    );
    assert!(std::fs::read_to_string(d.join("aes.key"))
        .unwrap()
        .contains("DEK-Info: AES-256-CBC,"));
    for key in ["aes.key", "des3.key"] {
        let tport = free_port();
        let _s = Server::start(&strs(&with_key(&d, tport, key, "s3cret")));
        assert!(tls_ping(tport, &d), "{key}");
        // redis-server reads the same file the same way.
        let oport = free_port();
        let _o = RedisOracle::start(&strs(&with_key(&d, oport, key, "s3cret")));
        assert!(tls_ping(oport, &d), "redis-server with {key}");
    }
    let tport = free_port();
    let mut args = with_key(&d, tport, "ec.key", "s3cret");
    let i = args.iter().position(|a| a == "--tls-cert-file").unwrap();
    args[i + 1] = path(&d, "ec.crt");
    let _s = Server::start(&strs(&args));
    assert!(tls_ping(tport, &d));
    // A wrong password, or none: start-up stops, naming the key.
    for pass in ["wrong", ""] {
        let out = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
            .args(["--port", &free_port().to_string()])
            .args(with_key(&d, free_port(), "aes.key", pass))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success());
        let line = format!("Failed to load private key: {}", path(&d, "aes.key"));
        assert!(text.contains(&line), "{text}");
        assert!(text.contains("Failed to configure TLS"), "{text}");
    }
}

#[test]
fn a_replica_loading_over_tls_keeps_its_redis_master_waiting() {
    // A load longer than the master's repl-timeout: the replica's newline
    // a second (sent through the TLS session the load reads from) keeps
    // the master from dropping it, as a Redis replica's do.
    let d = certs("keepalive");
    let mport = free_port();
    let mut margs = tls_args(&d, mport);
    margs.extend(["--repl-timeout", "2", "--repl-diskless-sync-delay", "0"].map(String::from));
    let m = RedisOracle::start(&strs(&margs));
    let mut mc = m.conn();
    for i in 0..200 {
        let _: () = cmd(&mut mc, &["SET", &format!("k{i}"), "v"]);
    }
    let mut rargs = tls_args(&d, free_port());
    // 25 ms a key: about 5 s of loading.
    rargs.extend(["--key-load-delay", "25000"].map(String::from));
    let r = Server::start(&strs(&rargs));
    let mut rc = r.conn();
    let _: String = cmd(&mut rc, &["REPLICAOF", "127.0.0.1", &mport.to_string()]);
    eventually_within(
        "the replica to load and sync",
        std::time::Duration::from_secs(60),
        || in_sync(&mut mc, &mut rc),
    );
    let log = std::fs::read_to_string(m.dir.join("redis.log")).unwrap_or_default();
    assert!(!log.contains("timedout replica"), "{log}");
    assert_eq!(r.log().matches("Full resync from master").count(), 1);
}
