//! Loading one AOF file: RESP commands (with `#` annotations such as `#TS:`)
//! replayed through [`crate::commands::replay`], or an RDB base / preamble.
//!
//! The rules are Redis's loadSingleAppendOnlyFile: a file that ends inside a
//! command (a crash mid-write) is "truncated": with `aof-load-truncated yes`
//! and when it is the last file, everything up to the last whole command is
//! kept, the file is cut there (so appends continue cleanly) and the server
//! starts with a warning; otherwise start-up fails. A transaction left open at
//! the end counts as truncated at its MULTI (its commands are queued, never
//! applied). Anything malformed elsewhere fails start-up and nothing on disk
//! is touched. The log lines are Redis's: tools and tests grep for them.
//!
//! Stamps (active replication, docs/DECISIONS.md 41): a `#LV:<stamp>`
//! annotation gives the next command (SELECT, MULTI and EXEC pass it on)
//! that stamp instead of a fresh one, so keys get back the versions they
//! had, and a stamped DEL or UNLINK of a key that is absent leaves a
//! tombstone with its stamp (how a rewritten base of commands keeps
//! them). Under active replication the node's stamp floor rises past
//! every stamp replayed. The aux fields of RDB parts and of `#AUX:`
//! annotations are collected, in file order, for the server's hooks.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use crate::core::stats::WorkerStats;
use std::sync::atomic::Ordering::Relaxed;

use super::rdb_base::Aux;
use crate::effects::Effect;
use crate::keyspace::hlc::Hlc;
use crate::persistence::Host;
use crate::{log_notice, log_warning};

/// How a file loaded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Loaded {
    Ok,
    /// Zero bytes.
    Empty,
    /// Cut at its last whole command.
    Truncated,
}

/// Why loading stopped (the reason was logged).
#[derive(Debug)]
pub(crate) struct Failed;

/// Reading state shared by the file's commands.
struct Replayer<'a, H: Host> {
    srv: &'a Arc<H>,
    clock: Hlc,
    stats: WorkerStats,
    db: usize,
    /// The stamp the last `#LV:` annotation gave the next command.
    stamp: Option<u64>,
    /// Commands of an open MULTI (with their stamps), applied at its EXEC.
    queued: Option<Vec<Queued>>,
    /// Where the errors commands meet are counted for INFO (made at the
    /// first: a load without errors registers nothing).
    counted: Option<Arc<WorkerStats>>,
}

/// A command of an open MULTI: database, arguments, stamp.
type Queued = (usize, Vec<Vec<u8>>, Option<u64>);

/// What the next lines of a file hold.
enum Item {
    Command(Vec<Vec<u8>>),
    /// A `#LV:` annotation.
    Stamp(u64),
    /// An `#AUX:<name> <value>` annotation.
    Aux(Vec<u8>, Vec<u8>),
    /// An `#LM:<db> <key> <state>` annotation: a key's merge state.
    MergeState(usize, Vec<u8>, Vec<u8>),
}

enum Stop {
    /// EOF inside a command.
    Eof,
    /// Malformed input.
    Format,
    Fatal,
}

/// Loads `dir/name`, adding its aux fields to `aux`. `last`: whether it is
/// the last file of the AOF (only that one may be truncated).
pub(crate) fn load_file<H: Host>(
    srv: &Arc<H>,
    (dir, name): (&Path, &str),
    last: bool,
    old_style: bool,
    aux: &mut Aux,
) -> Result<Loaded, Failed> {
    let path = dir.join(name);
    let Some(mut r) = open(&path, name)? else {
        return Ok(Loaded::Empty);
    };
    if r.inner
        .fill_buf()
        .map(|b| b.starts_with(b"REDIS"))
        .unwrap_or(false)
    {
        aux.extend(load_rdb_part(srv, &mut r, name, old_style)?);
    }
    let (stop, valid_up_to) = replay_commands(srv, &mut r, name, aux);
    match stop {
        None => Ok(Loaded::Ok),
        Some(Stop::Fatal) => Err(Failed),
        Some(Stop::Format) => {
            let m = format!("Bad file format reading the append only file {name}: make a backup of your AOF file, then use ./redis-check-aof --fix <filename.manifest>");
            log_warning!("{m}");
            Err(Failed)
        }
        Some(Stop::Eof) => truncated(srv, &path, name, last, valid_up_to),
    }
}

/// Opens a file to load; `None` if it is empty.
fn open(path: &Path, name: &str) -> Result<Option<Reader>, Failed> {
    let file = std::fs::File::open(path).map_err(|e| {
        let m = if e.kind() == std::io::ErrorKind::NotFound {
            format!("The append log file {name} doesn't exist: {e}")
        } else {
            format!("Fatal error: can't open the append log file {name} for reading: {e}")
        };
        log_warning!("{m}");
        Failed
    })?;
    if file.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
        return Ok(None);
    }
    Ok(Some(Reader {
        inner: BufReader::with_capacity(1 << 16, file),
        pos: 0,
        note: Vec::new(),
    }))
}

/// Replays the file's commands from the reader's position. Returns why it
/// stopped (None: a clean end) and the offset of the last whole command (or
/// of the MULTI of a transaction left open, which then counts as a short
/// read: its commands were only queued).
fn replay_commands<H: Host>(
    srv: &Arc<H>,
    r: &mut Reader,
    name: &str,
    aux: &mut Aux,
) -> (Option<Stop>, u64) {
    let mut rp = Replayer {
        srv,
        clock: Hlc::new(srv.core().node_id),
        stats: WorkerStats::new(srv.core().commands.all.len()),
        db: 0,
        stamp: None,
        queued: None,
        counted: None,
    };
    let mut valid_up_to = r.pos;
    let mut valid_before_multi = r.pos;
    let stop = loop {
        match next_item(r) {
            Ok(None) => break None,
            Ok(Some(Item::Stamp(s))) => rp.stamp = Some(s),
            Ok(Some(Item::Aux(k, v))) => aux.push((k, v)),
            Ok(Some(Item::MergeState(db, key, state))) => {
                if restore_merge_state(srv, db, &key, &state).is_err() {
                    break Some(Stop::Fatal);
                }
            }
            Ok(Some(Item::Command(argv))) => {
                if rp.queued.is_none() && argv[0].eq_ignore_ascii_case(b"multi") {
                    valid_before_multi = valid_up_to;
                }
                if rp.apply(argv, name).is_err() {
                    break Some(Stop::Fatal);
                }
                valid_up_to = r.pos;
            }
            Err(s) => break Some(s),
        }
    };
    if stop.is_none() && rp.queued.is_some() {
        log_warning!("Revert incomplete MULTI/EXEC transaction in AOF file {name}");
        return (Some(Stop::Eof), valid_before_multi);
    }
    (stop, valid_up_to)
}

/// A file that ended inside a command.
fn truncated(
    srv: &impl Host,
    path: &Path,
    name: &str,
    last: bool,
    valid_up_to: u64,
) -> Result<Loaded, Failed> {
    let allowed = srv.core().config.read().get_bool("aof-load-truncated");
    if allowed && last {
        log_warning!("!!! Warning: short read while loading the AOF file {name}!!!");
        log_warning!("!!! Truncating the AOF {name} at offset {valid_up_to} !!!");
        let cut = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| {
                f.set_len(valid_up_to)?;
                f.sync_all()
            });
        match cut {
            Ok(()) => {
                log_warning!("AOF {name} loaded anyway because aof-load-truncated is enabled");
                return Ok(Loaded::Truncated);
            }
            Err(e) => log_warning!("Error truncating the AOF file {name}: {e}"),
        }
    }
    let m = if allowed {
        "Fatal error: the truncated file is not the last file".to_string()
    } else {
        format!("Unexpected end of file reading the append only file {name}. You can: 1) Make a backup of your AOF file, then use ./redis-check-aof --fix <filename.manifest>. 2) Alternatively you can set the 'aof-load-truncated' configuration option to yes and restart the server.")
    };
    log_warning!("{m}");
    Err(Failed)
}

/// An RDB base file, or the RDB preamble of an old-style AOF (whose AOF
/// tail is then read as usual).
fn load_rdb_part<H: Host>(
    srv: &Arc<H>,
    r: &mut Reader,
    name: &str,
    old_style: bool,
) -> Result<Aux, Failed> {
    if old_style {
        log_notice!("Reading RDB preamble from AOF file...");
    } else {
        log_notice!("Reading RDB base file on AOF loading...");
    }
    match super::rdb_base::load(srv, r) {
        Ok(aux) => {
            if old_style {
                log_notice!("Reading the remaining AOF tail...");
            }
            Ok(aux)
        }
        Err(e) => {
            let m = if old_style {
                format!("Error reading the RDB preamble of the AOF file {name}, AOF loading aborted: {e}")
            } else {
                format!("Error reading the RDB base file {name}, AOF loading aborted: {e}")
            };
            log_warning!("{m}");
            Err(Failed)
        }
    }
}

impl<H: Host> Replayer<'_, H> {
    /// Runs (or queues, inside MULTI) one command.
    fn apply(&mut self, argv: Vec<Vec<u8>>, file: &str) -> Result<(), String> {
        let Some(id) = self.srv.core().commands.lookup(&argv[0]) else {
            let m = format!(
                "Unknown command '{}' reading the append only file {file}",
                String::from_utf8_lossy(&argv[0])
            );
            log_warning!("{m}");
            return Err(m);
        };
        let name = self.srv.core().commands.get(id).name;
        match name {
            "select" => {
                let db = std::str::from_utf8(argv.get(1).map_or(&b""[..], |v| v))
                    .ok()
                    .and_then(|s| s.parse::<usize>().ok())
                    .filter(|&d| d < self.srv.core().keyspace.num_dbs());
                match db {
                    Some(d) => self.db = d,
                    None => {
                        let m = format!(
                            "Bad SELECT in the append only file {file}: DB index is out of range"
                        );
                        log_warning!("{m}");
                        return Err(m);
                    }
                }
            }
            "multi" => self.queued = Some(vec![]),
            "exec" => {
                for (db, argv, stamp) in self.queued.take().unwrap_or_default() {
                    self.run(db, argv, stamp, true);
                }
            }
            _ => {
                let stamp = self.stamp.take();
                match &mut self.queued {
                    Some(q) => q.push((self.db, argv, stamp)),
                    None => self.run(self.db, argv, stamp, false),
                }
            }
        }
        Ok(())
    }

    /// Runs one command (`in_exec`: one of a transaction's, at its EXEC).
    fn run(&mut self, db: usize, argv: Vec<Vec<u8>>, stamp: Option<u64>, in_exec: bool) {
        let Some(id) = self.srv.core().commands.lookup(&argv[0]) else {
            return;
        };
        if !self.srv.core().commands.get(id).arity_ok(argv.len()) {
            log_warning!(
                "Skipping '{}' with a wrong number of arguments in the AOF",
                String::from_utf8_lossy(&argv[0])
            );
            return;
        }
        let active = self.srv.core().active;
        let version = match stamp {
            Some(s) => s,
            // Unstamped (written by a plain node): a fresh stamp, after
            // every one loaded so far under active replication.
            None if active => self.clock.after(self.srv.core().stamp_floor.load(Relaxed)),
            None => self.clock.now(),
        };
        if active {
            self.srv.core().stamp_floor.fetch_max(version, Relaxed);
        }
        let e = Effect {
            db,
            version,
            argv,
            bases: vec![],
            facts: vec![],
        };
        if let Err(err) =
            crate::commands::replay(self.srv.admin(), &mut self.clock, &self.stats, &e)
        {
            self.count_error(&err, &e.argv, in_exec);
            // Redis names the command its AOF client ran: EXEC for a
            // transaction's.
            let name = match in_exec {
                true => "exec".to_string(),
                false => String::from_utf8_lossy(&e.argv[0]).to_ascii_lowercase(),
            };
            crate::core::propagation::failed(
                self.srv.core(),
                crate::core::propagation::Source::Aof,
                &err,
                &name,
            );
        }
        if active && stamp.is_some() {
            self.tombstones_for_absent(&e);
        }
    }

    /// A command's error counts as Redis's `afterErrorReply` counts one
    /// "sent" to its AOF client: errorstats under its code,
    /// total_error_replies and unexpected_error_replies; and, for a
    /// transaction's command (which Redis's EXEC runs through call(), whose
    /// calls and time are not counted while loading), its failed_calls.
    fn count_error(&mut self, err: &str, argv: &[Vec<u8>], in_exec: bool) {
        let core = self.srv.core();
        let stats = self.counted.get_or_insert_with(|| core.new_worker_stats());
        stats.record_error(crate::core::error::error_code(err));
        stats.unexpected_errors.fetch_add(1, Relaxed);
        if let Some(id) = in_exec.then(|| full_id(core, argv)).flatten() {
            stats.cmds[id].failed.fetch_add(1, Relaxed);
        }
    }

    /// A stamped DEL or UNLINK leaves a tombstone for each key it names
    /// that is absent after it (a rewritten base's tombstones; the keys it
    /// deleted have theirs already).
    fn tombstones_for_absent(&self, e: &Effect) {
        let name = &e.argv[0];
        if !name.eq_ignore_ascii_case(b"del") && !name.eq_ignore_ascii_case(b"unlink") {
            return;
        }
        let ks = &self.srv.core().keyspace;
        for key in &e.argv[1..] {
            let slot = ks.slot(key);
            let mut g = ks.db(e.db).lock(slot.shard);
            if g.get_raw(slot.hash, key).is_none() {
                g.set_tombstone(key, e.version);
            }
        }
    }
}

/// The command table id `argv` runs, its subcommand's for a container
/// (where Redis counts a call).
fn full_id(core: &crate::core::Core, argv: &[Vec<u8>]) -> Option<usize> {
    let id = core.commands.lookup(&argv[0])?;
    match core.commands.has_subcommands(id) {
        true => core.commands.lookup_sub(id, argv.get(1)?),
        false => Some(id),
    }
}

/// A reader that counts the bytes consumed (the offset of the last whole
/// command is where a truncated file is cut).
pub(crate) struct Reader {
    inner: BufReader<std::fs::File>,
    pub pos: u64,
    /// The text of a merge-state annotation continued on `#LM+` lines.
    note: Vec<u8>,
}

impl Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Reader {
    /// One line including its '\n' (without it at EOF); empty at EOF.
    fn line(&mut self) -> Result<Vec<u8>, Stop> {
        let mut l = Vec::new();
        let n = (&mut self.inner)
            .take(64 * 1024)
            .read_until(b'\n', &mut l)
            .map_err(read_error)?;
        self.pos += n as u64;
        Ok(l)
    }

    fn exact(&mut self, n: usize) -> Result<Vec<u8>, Stop> {
        let mut v = Vec::with_capacity(n.min(1 << 20));
        let got = (&mut self.inner)
            .take(n as u64)
            .read_to_end(&mut v)
            .map_err(read_error)?;
        self.pos += got as u64;
        if got < n {
            return Err(Stop::Eof);
        }
        Ok(v)
    }
}

fn read_error(e: std::io::Error) -> Stop {
    log_warning!("Unrecoverable error reading the append only file: {e}");
    Stop::Fatal
}

/// The next command or stamp annotation (other annotations are skipped);
/// `None` at a clean end of file.
fn next_item(r: &mut Reader) -> Result<Option<Item>, Stop> {
    let mut line;
    loop {
        line = r.line()?;
        if line.is_empty() {
            return Ok(None);
        }
        if line[0] != b'#' {
            break;
        }
        if !line.ends_with(b"\n") {
            return Err(Stop::Eof);
        }
        if let Some(rest) = line.strip_prefix(super::writer::STAMP_NOTE) {
            let digits = rest.strip_suffix(b"\r\n").ok_or(Stop::Format)?;
            let stamp = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse::<u64>().ok())
                .ok_or(Stop::Format)?;
            return Ok(Some(Item::Stamp(stamp)));
        }
        if let Some(rest) = line.strip_prefix(super::writer::MERGE_NOTE_PART) {
            let part = rest.strip_suffix(b"\r\n").ok_or(Stop::Format)?;
            r.note.extend_from_slice(part);
            continue;
        }
        if let Some(rest) = line.strip_prefix(super::writer::MERGE_NOTE) {
            let end = rest.strip_suffix(b"\r\n").ok_or(Stop::Format)?;
            let mut text = std::mem::take(&mut r.note);
            text.extend_from_slice(end);
            let mut words = text.split(|&b| b == b' ');
            let db = (words.next())
                .and_then(|d| std::str::from_utf8(d).ok()?.parse::<usize>().ok())
                .ok_or(Stop::Format)?;
            let key = words.next().and_then(super::writer::unhex);
            let state = words.next().and_then(super::writer::unhex);
            let (Some(key), Some(state), None) = (key, state, words.next()) else {
                return Err(Stop::Format);
            };
            return Ok(Some(Item::MergeState(db, key, state)));
        }
        if let Some(rest) = line.strip_prefix(super::writer::AUX_NOTE) {
            let text = rest.strip_suffix(b"\r\n").ok_or(Stop::Format)?;
            let space = text.iter().position(|&b| b == b' ').ok_or(Stop::Format)?;
            let (name, value) = (text[..space].to_vec(), text[space + 1..].to_vec());
            return Ok(Some(Item::Aux(name, value)));
        }
    }
    if line[0] != b'*' {
        return Err(Stop::Format);
    }
    if line.len() == 1 {
        return Err(Stop::Eof);
    }
    let argc = atoi(&line[1..]);
    if argc < 1 {
        return Err(Stop::Format);
    }
    let mut argv = Vec::with_capacity((argc as usize).min(1024));
    for _ in 0..argc {
        let l = r.line()?;
        if l.is_empty() {
            return Err(Stop::Eof);
        }
        if l[0] != b'$' {
            return Err(Stop::Format);
        }
        let len = atoi(&l[1..]).max(0) as usize;
        argv.push(r.exact(len)?);
        r.exact(2)?;
    }
    Ok(Some(Item::Command(argv)))
}

/// C's atoi/strtol: optional sign, leading digits, 0 if none.
fn atoi(s: &[u8]) -> i64 {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut n: i64 = 0;
    for &c in digits.iter().take_while(|c| c.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add((c - b'0') as i64);
    }
    if neg {
        -n
    } else {
        n
    }
}

/// A `#LM:` annotation: the key's merge state, set where the file stands
/// (after the write that merged it). A damaged one stops the load, as a
/// damaged command does.
fn restore_merge_state(srv: &impl Host, db: usize, key: &[u8], state: &[u8]) -> Result<(), String> {
    if db >= srv.core().keyspace.num_dbs() {
        return Err(format!("a merge state for database {db}, out of range"));
    }
    let (meta, answered) = crate::keyspace::merge::Meta::decode_stored(state)
        .map_err(|e| format!("a damaged merge state in the AOF: {e}"))?;
    let slot = srv.core().keyspace.slot(key);
    let mut g = srv.core().keyspace.db(db).lock(slot.shard);
    g.set_merge_meta(key, meta);
    if let Some(stamp) = answered {
        g.note_answered(key, stamp);
    }
    Ok(())
}
