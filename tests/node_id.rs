//! The node's identity (docs/ACTIVE-ACTIVE-DESIGN.md, "Identity"): a 64-bit node id
//! drawn once and kept across restarts in the RDB file (aux field
//! `lattice-node-id`), the `node-id` and `node-slot` directives, the INFO
//! fields, and redis-server loading a file that carries the aux field.

mod common;
use common::*;

use std::process::{Command, Stdio};

fn node_id(c: &mut redis::Connection) -> String {
    info_field(c, "lattice_node_id")
}

fn node_slot(c: &mut redis::Connection) -> u64 {
    info_field(c, "lattice_node_slot")
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lattice-nodeid-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_node_id_survives_save_and_restart() {
    let dir = temp_dir("restart");
    let d = dir.to_str().unwrap();
    let s = Server::start(&["--dir", d]);
    let mut c = s.conn();
    let id = node_id(&mut c);
    let slot = node_slot(&mut c);
    assert_eq!(id.len(), 16, "{id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    assert!(slot < 1024);
    let () = cmd(&mut c, &["SET", "k", "v"]);
    let () = cmd(&mut c, &["SAVE"]);
    let dump = std::fs::read(dir.join("dump.rdb")).unwrap();
    assert!(
        dump.windows(id.len()).any(|w| w == id.as_bytes()),
        "the RDB file carries the id"
    );
    drop(c);
    drop(s);
    let s = Server::start(&["--dir", d]);
    let mut c = s.conn();
    assert_eq!(node_id(&mut c), id);
    assert_eq!(node_slot(&mut c), slot);
    assert_eq!(cmd::<String>(&mut c, &["GET", "k"]), "v");
    drop(c);
    drop(s);
    // The directive wins over the file.
    let s = Server::start(&["--dir", d, "--node-id", "abc"]);
    assert_eq!(node_id(&mut s.conn()), "0000000000000abc");
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn directives_set_the_id_and_the_slot() {
    let s = Server::start(&["--node-id", "0123456789ABCDEF"]);
    let mut c = s.conn();
    assert_eq!(node_id(&mut c), "0123456789abcdef");
    let derived = node_slot(&mut c);
    let v: Vec<String> = cmd(&mut c, &["CONFIG", "GET", "node-id"]);
    assert_eq!(v[1], "0123456789abcdef");
    // Immutable at run time.
    assert!(cmd_err(&mut c, &["CONFIG", "SET", "node-id", "1"]).starts_with("ERR"));
    drop(c);
    drop(s);
    // The same id derives the same slot; node-slot overrides it.
    let s = Server::start(&["--node-id", "0123456789abcdef"]);
    assert_eq!(node_slot(&mut s.conn()), derived);
    drop(s);
    let other = (derived + 1) % 1024;
    let o = other.to_string();
    let s = Server::start(&["--node-id", "0123456789abcdef", "--node-slot", &o]);
    let mut c = s.conn();
    assert_eq!(node_slot(&mut c), other);
    assert_eq!(node_id(&mut c), "0123456789abcdef");
    // The stamps carry the slot: the key's version, saved in the RDB's
    // `lattice-versions` aux field, has it in its 10 low bits.
    let () = cmd(&mut c, &["SET", "k", "v"]);
    let () = cmd(&mut c, &["SAVE"]);
    let dump = std::fs::read(s.dir.join("dump.rdb")).unwrap();
    let tag = b"lattice-versions";
    let at = dump.windows(tag.len()).position(|w| w == tag).unwrap() + tag.len();
    assert_eq!(dump[at], 8, "one version");
    let version = u64::from_le_bytes(dump[at + 1..at + 9].try_into().unwrap());
    assert_eq!(version & 1023, other);
    drop(c);
    drop(s);
    let s = Server::start(&["--node-slot", "1023"]);
    assert_eq!(node_slot(&mut s.conn()), 1023);
}

#[test]
fn two_fresh_servers_get_different_ids() {
    let a = Server::start(&[]);
    let b = Server::start(&[]);
    assert_ne!(node_id(&mut a.conn()), node_id(&mut b.conn()));
}

#[test]
fn bad_values_are_refused_at_start_up() {
    for (args, why) in [
        (
            &["--node-id", "xyz"][..],
            "argument must be 1 to 16 hex digits",
        ),
        (&["--node-id", "0"], "argument must be 1 to 16 hex digits"),
        (&["--node-id", "11112222333344445"], "hex digits"),
        (
            &["--node-slot", "1024"],
            "argument must be between -1 and 1023",
        ),
        (
            &["--node-slot", "-2"],
            "argument must be between -1 and 1023",
        ),
        (&["--node-slot", "x"], "couldn't be parsed into an integer"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
            .args(["--port", &free_port().to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("FATAL CONFIG FILE ERROR"), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

#[test]
fn redis_server_loads_a_file_with_the_node_id() {
    let s = Server::start(&["--node-id", "feedface"]);
    let mut c = s.conn();
    let () = cmd(&mut c, &["SET", "k", "v"]);
    let () = cmd(&mut c, &["RPUSH", "l", "a", "b"]);
    let () = cmd(&mut c, &["SAVE"]);
    let digest: String = cmd(&mut c, &["DEBUG", "DIGEST"]);
    let dump = std::fs::read(s.dir.join("dump.rdb")).unwrap();
    assert!(dump.windows(16).any(|w| w == b"00000000feedface"));
    let o = RedisOracle::start(&["--dir", s.dir.to_str().unwrap()]);
    let mut rc = o.conn();
    assert_eq!(cmd::<String>(&mut rc, &["DEBUG", "DIGEST"]), digest);
    assert_eq!(cmd::<String>(&mut rc, &["GET", "k"]), "v");
}

/// A replica keeps its own id: a full sync's payload (which a replica
/// renames to its dump file) does not carry the master's.
#[test]
fn a_replica_does_not_take_its_masters_id() {
    let m = Server::start(&[]);
    let mut mc = m.conn();
    let master_id = node_id(&mut mc);
    let () = cmd(&mut mc, &["SET", "k", "v"]);
    let dir = temp_dir("replica");
    let d = dir.to_str().unwrap();
    let port = m.port.to_string();
    let r = Server::start(&["--dir", d, "--replicaof", "127.0.0.1", &port]);
    let mut rc = r.conn();
    let replica_id = node_id(&mut rc);
    assert_ne!(replica_id, master_id);
    eventually("the replica syncs", || {
        info_field::<String>(&mut rc, "master_link_status") == "up"
            && cmd::<Option<String>>(&mut rc, &["GET", "k"]).is_some()
    });
    let dump = std::fs::read(dir.join("dump.rdb")).unwrap();
    assert!(!dump.windows(16).any(|w| w == master_id.as_bytes()));
    drop(rc);
    drop(r);
    let r = Server::start(&["--dir", d]);
    assert_ne!(node_id(&mut r.conn()), master_id);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
