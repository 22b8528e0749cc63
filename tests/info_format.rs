//! INFO's text as clients parse it, on every kind of node: a master with a
//! replica, the replica, and an active pair in both of its views. Every
//! line is a `# Header`, the one blank line between sections, or
//! `name:value` with a plain name; a list value (slaveN, peerN, feedN, dbN,
//! cmdstat_) is `k=v,k=v`; numbers have the decimals redis-server writes;
//! and an active node's INFO replication lists its peer's fields.
mod common;
use common::*;

use std::collections::BTreeMap;

fn info(c: &mut redis::Connection, section: &str) -> String {
    cmd(c, &["INFO", section])
}

/// A name as Redis writes one: lowercase letters, digits, `_` (and `.` in
/// a latency percentile's key, `p99.9`).
fn plain_name(s: &str, dot: bool) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || (dot && c == '.'))
}

/// A field's name: plain, but a per-command or per-error line names its
/// command (`cmdstat_client|setinfo`) or error (`errorstat_WRONGTYPE`) as
/// Redis does; never a space or a `:`.
fn field_name(s: &str) -> bool {
    let per = ["cmdstat_", "errorstat_", "latency_percentiles_usec_"];
    match per.iter().find_map(|p| s.strip_prefix(p)) {
        Some(rest) => !rest.is_empty() && rest.chars().all(|c| c.is_ascii_graphic() && c != ':'),
        None => plain_name(s, false),
    }
}

/// Whether a field's value is a `k=v,k=v` list.
fn is_list(name: &str) -> bool {
    let numbered = |p: &str| {
        name.strip_prefix(p)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    };
    numbered("slave")
        || numbered("peer")
        || numbered("feed")
        || numbered("db")
        || ["cmdstat_", "errorstat_", "latency_percentiles_usec_"]
            .iter()
            .any(|p| name.starts_with(p))
}

/// Checks the layout of an INFO text and returns its fields.
fn parse(text: &str) -> BTreeMap<String, String> {
    assert!(text.ends_with("\r\n"), "INFO ends with CRLF");
    assert!(
        !text.replace("\r\n", "").contains('\n'),
        "a bare LF in INFO"
    );
    let lines: Vec<&str> = text.strip_suffix("\r\n").unwrap().split("\r\n").collect();
    assert!(lines[0].starts_with("# "), "INFO starts with a header");
    let mut fields = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        if line.is_empty() {
            // One blank line, and only before a header.
            let next = lines.get(i + 1).copied().unwrap_or("");
            assert!(next.starts_with("# "), "blank line before {next:?}");
            continue;
        }
        if let Some(title) = line.strip_prefix("# ") {
            assert!(
                i == 0 || lines[i - 1].is_empty(),
                "no blank before {line:?}"
            );
            assert!(title.chars().all(|c| c.is_ascii_alphabetic()), "{line:?}");
            continue;
        }
        let (name, value) = line.split_once(':').unwrap_or_else(|| panic!("{line:?}"));
        assert!(field_name(name), "field name {name:?}");
        if is_list(name) {
            for item in value.split(',').filter(|_| !value.is_empty()) {
                let (k, v) = item.split_once('=').unwrap_or_else(|| panic!("{line:?}"));
                assert!(plain_name(k, true) && !v.is_empty(), "{line:?}");
            }
        }
        assert!(
            fields.insert(name.to_string(), value.to_string()).is_none(),
            "twice: {name}"
        );
    }
    fields
}

/// A `k=v,k=v` value as a map.
fn list(value: &str) -> BTreeMap<String, String> {
    value
        .split(',')
        .map(|i| i.split_once('=').unwrap())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// How many decimals a number has, if it is one with decimals (`%` after).
fn decimals(v: &str) -> Option<usize> {
    let v = v.strip_suffix('%').unwrap_or(v);
    let (int, frac) = v.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    (digits(int.trim_start_matches('-')) && digits(frac)).then_some(frac.len())
}

#[test]
fn every_line_of_info_is_a_header_a_separator_or_a_plain_field_on_every_kind_of_node() {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    let mut m = master.conn();
    let _: () = cmd(&mut m, &["SET", "k", "v", "EX", "100"]);
    let _ = cmd_err(&mut m, &["LPUSH", "k", "x"]);
    pull(&replica, master.port);
    let mut r = replica.conn();
    eventually("the replica to sync", || in_sync(&mut m, &mut r));
    let fields = parse(&info(&mut m, "everything"));
    assert_eq!(list(&fields["slave0"])["state"], "online");
    assert_eq!(list(&fields["db0"])["keys"], "1");
    assert_eq!(list(&fields["errorstat_WRONGTYPE"]).len(), 1, "{fields:?}");
    let fields = parse(&info(&mut r, "everything"));
    assert_eq!(fields["role"], "slave");
    assert_eq!(fields["master_port"], master.port.to_string());

    let pair = Pair::start(&[]);
    let mut a = pair.a.conn();
    let _: () = cmd(&mut a, &["SET", "k", "v"]);
    for view in ["master", "keydb"] {
        let _: () = cmd(&mut a, &["CONFIG", "SET", "active-replica-view", view]);
        parse(&info(&mut a, "everything"));
    }
}

#[test]
fn an_active_nodes_info_replication_lists_its_peers_fields() {
    let pair = Pair::start(&[]);
    let (mut a, mut b) = (pair.a.conn(), pair.b.conn());
    let _: () = cmd(&mut a, &["SET", "k", "v"]);
    converged(&[&pair.a, &pair.b]);
    let fields = parse(&info(&mut a, "replication"));
    assert_eq!(fields["role"], "master");
    assert_eq!(fields["active_replica"], "1");
    assert_eq!(fields["active_peers"], "1");
    assert_eq!(fields["master_global_link_status"], "up");
    let peer = list(&fields["peer0"]);
    let keys: Vec<&str> = peer.keys().map(|k| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "applied",
            "conflicts",
            "continues",
            "host",
            "last_io_seconds_ago",
            "offset",
            "port",
            "snapshots",
            "state"
        ]
    );
    assert_eq!(peer["host"], "127.0.0.1");
    assert_eq!(
        peer["port"],
        pair.pb.port.to_string(),
        "a pulls through b's proxy"
    );
    assert_eq!(peer["state"], "connected");
    // b reads a's stream: a's feed, which b's link has read to its end.
    assert_eq!(fields["active_feeds"], "1");
    let feed = list(&fields["feed0"]);
    let keys: Vec<&str> = feed.keys().map(|k| k.as_str()).collect();
    assert_eq!(keys, ["addr", "lag_bytes", "node", "offset"]);
    assert_eq!(feed["node"].len(), 16, "a node id in hex: {feed:?}");
    let b_id = info(&mut b, "server");
    assert!(
        b_id.contains(&format!("lattice_node_id:{}", feed["node"])),
        "{feed:?}"
    );

    // KeyDB's view: the peer as a master, and the peer reading us as a replica.
    let _: () = cmd(&mut a, &["CONFIG", "SET", "active-replica-view", "keydb"]);
    let fields = parse(&info(&mut a, "replication"));
    assert_eq!(fields["role"], "active-replica");
    assert_eq!(fields["connected_masters"], "1");
    assert_eq!(fields["master_port"], pair.pb.port.to_string());
    assert_eq!(fields["master_link_status"], "up");
    assert_eq!(fields["connected_slaves"], "1");
    let slave = list(&fields["slave0"]);
    assert_eq!(slave["state"], "online", "{slave:?}");
    assert_eq!(slave["lag"], "0");
}

/// Every number redis-server writes with decimals (ratios, rates, CPU
/// seconds, percentages, usec_per_call) has as many here.
#[test]
fn info_numbers_have_the_decimals_redis_writes() {
    let ours = Server::start(&[]);
    let oracle = RedisOracle::start(&[]);
    let mut texts = vec![];
    for mut c in [ours.conn(), oracle.conn()] {
        let _: () = cmd(&mut c, &["SET", "k", "v"]);
        let _: Option<String> = cmd(&mut c, &["GET", "k"]);
        texts.push(parse(&info(&mut c, "everything")));
    }
    let (ours, redis) = (&texts[0], &texts[1]);
    let mut compared = 0;
    for (name, theirs) in redis {
        let Some(want) = decimals(theirs) else {
            continue;
        };
        let Some(mine) = ours.get(name) else {
            continue;
        };
        assert_eq!(
            decimals(mine),
            Some(want),
            "{name}: ours {mine}, redis {theirs}"
        );
        assert_eq!(mine.ends_with('%'), theirs.ends_with('%'), "{name}");
        compared += 1;
    }
    assert!(
        compared >= 10,
        "only {compared} fields with decimals compared"
    );
    let (mine, theirs) = (list(&ours["cmdstat_get"]), list(&redis["cmdstat_get"]));
    assert_eq!(
        mine.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    assert_eq!(
        decimals(&mine["usec_per_call"]),
        decimals(&theirs["usec_per_call"])
    );
}
