//! The Redis 7 AOF manifest: which files make up the AOF, in load order.
//!
//! `<appenddirname>/<appendfilename>.manifest` holds one line per file,
//! `file <name> seq <n> type <b|h|i>`: the base first, then history files
//! (left over from rewrites, deleted soon after), then the incr files in
//! sequence order. Files are named `<appendfilename>.<seq>.base.rdb` (or
//! `.base.aof`) and `<appendfilename>.<seq>.incr.aof`. The text we write is
//! byte for byte what Redis writes, and we read what Redis reads (comments,
//! extra key/value pairs, quoted names), so either server opens the other's
//! directory. The manifest is replaced atomically: a temp file is written and
//! fsynced, renamed over the old one, and the directory fsynced.

use std::io::Write;
use std::path::{Path, PathBuf};

/// What one manifest line describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    Base,
    History,
    Incr,
}

impl FileType {
    fn letter(self) -> char {
        match self {
            FileType::Base => 'b',
            FileType::History => 'h',
            FileType::Incr => 'i',
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AofFile {
    pub name: String,
    pub seq: u64,
    pub kind: FileType,
}

/// The parsed manifest (Redis's aofManifest).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    pub base: Option<AofFile>,
    pub incrs: Vec<AofFile>,
    pub history: Vec<AofFile>,
    pub base_seq: u64,
    pub incr_seq: u64,
}

/// Names derived from `appendfilename`.
pub(crate) fn manifest_name(filename: &str) -> String {
    format!("{filename}.manifest")
}

fn temp_manifest_name(filename: &str) -> String {
    format!("temp-{filename}.manifest")
}

impl Manifest {
    /// The manifest's text, as Redis's getAofManifestAsString: base,
    /// history, then incr lines.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let all = self.base.iter().chain(&self.history).chain(&self.incrs);
        for f in all {
            s.push_str(&format!(
                "file {} seq {} type {}\n",
                quote_if_needed(&f.name),
                f.seq,
                f.kind.letter()
            ));
        }
        s
    }

    /// Parses a manifest's text; the error is Redis's reason and the line.
    pub fn parse(text: &[u8]) -> Result<Manifest, ManifestError> {
        let mut m = Manifest::default();
        if text.is_empty() {
            return Err(ManifestError::new("Found an empty AOF manifest", None));
        }
        let mut rest = text;
        let mut linenum = 0;
        while !rest.is_empty() {
            linenum += 1;
            let (line, tail, complete) = match rest.iter().position(|&c| c == b'\n') {
                Some(i) => (&rest[..i], &rest[i + 1..], true),
                None => (rest, &rest[rest.len()..], false),
            };
            rest = tail;
            if line.first() == Some(&b'#') {
                continue;
            }
            let text = String::from_utf8_lossy(line).into_owned();
            let err = |msg: &str| ManifestError::new(msg, Some((linenum, text.trim().to_string())));
            if !complete || line.len() > 1024 {
                return Err(err("The AOF manifest file contains too long line"));
            }
            let f = parse_line(text.trim()).map_err(&err)?;
            m.add_parsed(f).map_err(err)?;
        }
        Ok(m)
    }

    fn add_parsed(&mut self, f: AofFile) -> Result<(), &'static str> {
        match f.kind {
            FileType::Base => {
                if self.base.is_some() {
                    return Err("Found duplicate base file information");
                }
                self.base_seq = f.seq;
                self.base = Some(f);
            }
            FileType::History => self.history.push(f),
            FileType::Incr => {
                if f.seq <= self.incrs.last().map_or(0, |l| l.seq) {
                    return Err("Found a non-monotonic sequence number");
                }
                self.incr_seq = f.seq;
                self.incrs.push(f);
            }
        }
        Ok(())
    }

    /// A new base name (`.base.rdb` with the RDB preamble, else `.base.aof`);
    /// the current base becomes history, as getNewBaseFileNameAndMarkPreAsHistory.
    pub fn new_base(&mut self, filename: &str, rdb: bool) -> String {
        if let Some(mut old) = self.base.take() {
            old.kind = FileType::History;
            self.history.insert(0, old);
        }
        self.base_seq += 1;
        let ext = if rdb { "rdb" } else { "aof" };
        let name = format!("{filename}.{}.base.{ext}", self.base_seq);
        self.base = Some(AofFile {
            name: name.clone(),
            seq: self.base_seq,
            kind: FileType::Base,
        });
        name
    }

    /// Appends a new incr file and returns its name.
    pub fn new_incr(&mut self, filename: &str) -> String {
        self.incr_seq += 1;
        let name = format!("{filename}.{}.incr.aof", self.incr_seq);
        self.incrs.push(AofFile {
            name: name.clone(),
            seq: self.incr_seq,
            kind: FileType::Incr,
        });
        name
    }

    /// Moves every incr file but the last `keep` ones to history (after a
    /// rewrite, whose base holds what they recorded).
    pub fn incrs_to_history(&mut self, keep: usize) {
        let n = self.incrs.len().saturating_sub(keep);
        for mut f in self.incrs.drain(..n).rev() {
            f.kind = FileType::History;
            self.history.insert(0, f);
        }
    }

    /// Base then incr files, the load order.
    pub fn load_order(&self) -> Vec<&AofFile> {
        self.base.iter().chain(&self.incrs).collect()
    }
}

fn parse_line(line: &str) -> Result<AofFile, &'static str> {
    const BAD: &str = "Invalid AOF manifest file format";
    if line.is_empty() {
        return Err(BAD);
    }
    let words = split_args(line).ok_or(BAD)?;
    // Extra pairs are allowed, for forward compatibility (as Redis).
    if words.len() < 6 || words.len() % 2 != 0 {
        return Err(BAD);
    }
    let (mut name, mut seq, mut kind) = (None, 0u64, None);
    for pair in words.chunks(2) {
        let v = &pair[1];
        match pair[0].to_ascii_lowercase().as_str() {
            "file" => {
                if v.contains('/') {
                    return Err("File can't be a path, just a filename");
                }
                name = Some(v.clone());
            }
            "seq" => seq = leading_int(v),
            "type" => kind = v.chars().next(),
            _ => {}
        }
    }
    let (Some(name), Some(kind)) = (name, kind) else {
        return Err(BAD);
    };
    if seq == 0 || name.is_empty() {
        return Err(BAD);
    }
    let kind = match kind {
        'b' => FileType::Base,
        'h' => FileType::History,
        'i' => FileType::Incr,
        _ => return Err("Unknown AOF file type"),
    };
    Ok(AofFile { name, seq, kind })
}

/// atoll: the leading digits, 0 if none.
fn leading_int(s: &str) -> u64 {
    let d: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    d.parse().unwrap_or(0)
}

/// Splits a line into words, honouring double quotes with escapes and
/// single quotes (a subset of Redis's sdssplitargs sufficient for names).
fn split_args(line: &str) -> Option<Vec<String>> {
    let mut out = vec![];
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&c) = chars.peek() else {
            return Some(out);
        };
        let mut w = String::new();
        if c == '"' || c == '\'' {
            chars.next();
            loop {
                match chars.next()? {
                    '\\' if c == '"' => w.push(unescape(&mut chars)?),
                    q if q == c => break,
                    x => w.push(x),
                }
            }
            if chars.peek().is_some_and(|c| !c.is_whitespace()) {
                return None;
            }
        } else {
            while let Some(&x) = chars.peek() {
                if x.is_whitespace() {
                    break;
                }
                w.push(x);
                chars.next();
            }
        }
        out.push(w);
    }
}

fn unescape(chars: &mut std::iter::Peekable<std::str::Chars>) -> Option<char> {
    Some(match chars.next()? {
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'a' => '\x07',
        'b' => '\x08',
        'x' => {
            let h: String = [chars.next()?, chars.next()?].iter().collect();
            u8::from_str_radix(&h, 16).ok()? as char
        }
        c => c,
    })
}

/// Quotes a name as sdscatrepr does when it holds spaces or unprintables.
fn quote_if_needed(name: &str) -> String {
    let needs = name.is_empty()
        || name
            .bytes()
            .any(|b| !b.is_ascii_graphic() || b == b'"' || b == b'\'' || b == b'\\');
    if !needs {
        return name.to_string();
    }
    let mut s = String::new();
    crate::config::parse::push_quoted_bytes(&mut s, name.as_bytes());
    s
}

/// A manifest Redis would refuse, with its log text.
#[derive(Debug)]
pub struct ManifestError {
    pub reason: String,
    pub line: Option<(usize, String)>,
}

impl ManifestError {
    fn new(reason: &str, line: Option<(usize, String)>) -> Self {
        ManifestError {
            reason: reason.to_string(),
            line,
        }
    }
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\n*** FATAL AOF MANIFEST FILE ERROR ***\n")?;
        if let Some((n, l)) = &self.line {
            write!(f, "Reading the manifest file, at line {n}\n>>> '{l}'\n")?;
        }
        write!(f, "{}", self.reason)
    }
}

/// Reads `<dir>/<filename>.manifest`; `Ok(None)` if the directory or the
/// file does not exist.
pub(crate) fn load(dir: &Path, filename: &str) -> Result<Option<Manifest>, String> {
    let path = dir.join(manifest_name(filename));
    match std::fs::read(&path) {
        Ok(text) => Manifest::parse(&text).map(Some).map_err(|e| e.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!(
            "Fatal error: can't open the AOF manifest file {} for reading: {e}",
            path.display()
        )),
    }
}

/// Writes the manifest atomically (temp file, fsync, rename, fsync dir).
pub(crate) fn persist(dir: &Path, filename: &str, m: &Manifest) -> Result<(), String> {
    let tmp = dir.join(temp_manifest_name(filename));
    let dst: PathBuf = dir.join(manifest_name(filename));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(m.render().as_bytes())?;
        f.sync_all()
    };
    write().map_err(|e| {
        format!(
            "Error trying to write the temporary AOF manifest file {}: {e}",
            temp_manifest_name(filename)
        )
    })?;
    std::fs::rename(&tmp, &dst).map_err(|e| {
        format!(
            "Error trying to rename the temporary AOF manifest file {} into {}: {e}",
            temp_manifest_name(filename),
            manifest_name(filename)
        )
    })?;
    fsync_dir(dir).map_err(|e| format!("Fail to fsync AOF directory {}: {e}.", dir.display()))
}

/// fsyncs a directory so a rename or a new file in it is durable.
pub(crate) fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_redis_text() {
        let text = "file appendonly.aof.2.base.rdb seq 2 type b\nfile appendonly.aof.1.incr.aof seq 1 type h\nfile appendonly.aof.2.incr.aof seq 2 type i\nfile appendonly.aof.3.incr.aof seq 3 type i\n";
        let m = Manifest::parse(text.as_bytes()).unwrap();
        assert_eq!(m.render(), text);
        assert_eq!(m.load_order().len(), 3);
        assert_eq!((m.base_seq, m.incr_seq), (2, 3));
    }

    #[test]
    fn rejects_what_redis_rejects() {
        let bad = |t: &str| Manifest::parse(t.as_bytes()).unwrap_err().reason;
        assert_eq!(bad(""), "Found an empty AOF manifest");
        assert_eq!(bad("file a seq 1\n"), "Invalid AOF manifest file format");
        assert_eq!(bad("file a seq 1 type x\n"), "Unknown AOF file type");
        assert_eq!(
            bad("file a seq 2 type i\nfile b seq 1 type i\n"),
            "Found a non-monotonic sequence number"
        );
        assert_eq!(
            bad("file a/b seq 1 type b\n"),
            "File can't be a path, just a filename"
        );
        // Comments and extra pairs are fine; quoted names too.
        let m = Manifest::parse(b"# c\nfile \"a b\" seq 1 type b x y\n").unwrap();
        assert_eq!(m.base.unwrap().name, "a b");
    }

    #[test]
    fn rewrite_bookkeeping() {
        let mut m = Manifest::default();
        m.new_base("appendonly.aof", true);
        m.new_incr("appendonly.aof");
        m.new_incr("appendonly.aof");
        m.new_base("appendonly.aof", false);
        m.incrs_to_history(1);
        assert_eq!(
            m.render(),
            "file appendonly.aof.2.base.aof seq 2 type b\nfile appendonly.aof.1.incr.aof seq 1 type h\nfile appendonly.aof.1.base.rdb seq 1 type h\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
        );
    }
}
