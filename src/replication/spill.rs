//! The backlog's disk tier: the replication stream's older bytes, kept in
//! append-only segment files while some replica still needs them.
//!
//! A replica that stops reading (a GC pause, a full disk, a link that stays
//! open but carries nothing) used to leave two choices: hold its bytes in
//! memory and stop the writers once the memory cap is reached, or drop it
//! and make it full-sync (Redis). Here the bytes it needs move from the
//! in-memory backlog to disk instead (`repl-lag-policy spill`, DECISIONS
//! 31): writers keep their speed, and when the replica returns, even after
//! the master dropped its connection, it continues from disk with a partial
//! resync. Only past `repl-backlog-disk-size` is history lost.
//!
//! This module is the storage only: a run of contiguous segments, each a
//! file `repl-backlog-<pid>-<first offset>.spill` in the server's `dir`,
//! at most [`SEGMENT_BYTES`] long, dropped whole from the front. What to
//! spill and when is `backlog.rs`'s business; the metadata lives under the
//! backlog's lock, the file I/O happens outside it (readers keep the
//! segment's file open through an `Arc`, so a segment dropped meanwhile
//! stays readable until they finish).

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A segment is closed, and the next one started, at this size.
pub(crate) const SEGMENT_BYTES: u64 = 64 << 20;

/// One segment file: the stream's bytes `start .. start + len`.
pub(crate) struct Segment {
    start: u64,
    len: u64,
    file: Arc<File>,
    path: PathBuf,
}

impl Segment {
    /// Creates the file for the bytes from offset `start` on, in `dir`.
    pub(crate) fn create(dir: &Path, start: u64) -> io::Result<Segment> {
        let name = format!("repl-backlog-{}-{start}.spill", std::process::id());
        let path = std::path::absolute(dir.join(name))?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        Ok(Segment {
            start,
            len: 0,
            file: Arc::new(file),
            path,
        })
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

/// Writes `bytes` at file position `pos` (a spill job's append).
pub(crate) fn write_at(file: &File, bytes: &[u8], pos: u64) -> io::Result<()> {
    file.write_all_at(bytes, pos)
}

impl Drop for Segment {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where a read of the disk tier goes: the file, the position in it, and
/// how many bytes from there are in this segment.
pub(crate) struct DiskRead {
    pub file: Arc<File>,
    pub pos: u64,
    pub avail: u64,
}

impl DiskRead {
    /// Appends up to `max` bytes to `out`.
    pub(crate) fn read_into(&self, max: usize, out: &mut Vec<u8>) -> io::Result<usize> {
        let n = (self.avail as usize).min(max);
        let at = out.len();
        out.resize(at + n, 0);
        match self.file.read_exact_at(&mut out[at..], self.pos) {
            Ok(()) => Ok(n),
            Err(e) => {
                out.truncate(at);
                Err(e)
            }
        }
    }
}

/// The segments, oldest first; contiguous (each starts where the previous
/// one ends).
#[derive(Default)]
pub(crate) struct DiskTier {
    segs: VecDeque<Segment>,
    bytes: u64,
}

impl DiskTier {
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Bytes on disk.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The first offset held (meaningless when empty).
    pub(crate) fn first(&self) -> u64 {
        self.segs.front().map_or(0, |s| s.start)
    }

    /// The offset after the last one held: where the next spill goes.
    pub(crate) fn next(&self) -> u64 {
        self.segs.back().map_or(0, |s| s.start + s.len)
    }

    /// Whether `offset` is held.
    pub(crate) fn holds(&self, offset: u64) -> bool {
        !self.is_empty() && offset >= self.first() && offset < self.next()
    }

    /// Drops every segment (their files are removed).
    pub(crate) fn clear(&mut self) {
        self.segs.clear();
        self.bytes = 0;
    }

    /// Drops the segments that end at or before `offset`.
    pub(crate) fn drop_before(&mut self, offset: u64) {
        while let Some(s) = self.segs.front() {
            if s.start + s.len > offset {
                break;
            }
            self.bytes -= s.len;
            self.segs.pop_front();
        }
    }

    /// Drops the oldest segments until at most `max` bytes remain; returns
    /// the bytes dropped.
    pub(crate) fn bound(&mut self, max: u64) -> u64 {
        let before = self.bytes;
        while self.bytes > max {
            match self.segs.pop_front() {
                Some(s) => self.bytes -= s.len,
                None => break,
            }
        }
        before - self.bytes
    }

    /// Where `from` is read from, if held.
    pub(crate) fn locate(&self, from: u64) -> Option<DiskRead> {
        if !self.holds(from) {
            return None;
        }
        let i = self.segs.partition_point(|s| s.start + s.len <= from);
        let s = &self.segs[i];
        Some(DiskRead {
            file: s.file.clone(),
            pos: from - s.start,
            avail: s.start + s.len - from,
        })
    }

    /// The last segment's file and end, if it has room for more.
    pub(crate) fn open_tail(&self) -> Option<(Arc<File>, u64)> {
        let s = self.segs.back()?;
        (s.len < SEGMENT_BYTES).then(|| (s.file.clone(), s.len))
    }

    /// Records `n` bytes written at the tail: into `new` if a new segment
    /// was started for them, else into the last segment.
    pub(crate) fn extend(&mut self, new: Option<Segment>, n: u64) {
        if let Some(seg) = new {
            self.segs.push_back(seg);
        }
        if let Some(s) = self.segs.back_mut() {
            s.len += n;
            self.bytes += n;
        }
    }
}

/// Removes segment files a previous process left in `dir` (it crashed, or
/// was killed, while spilling): they belong to a history nobody can
/// continue.
pub(crate) fn remove_stale_files(dir: &Path) {
    let Ok(dir) = std::fs::read_dir(dir) else {
        return;
    };
    let me = std::process::id().to_string();
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("repl-backlog-")) else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('-') else {
            continue;
        };
        let alive = std::path::Path::new("/proc").join(pid).exists();
        if rest.ends_with(".spill") && pid != me && !alive {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_contiguous_and_dropped_whole() {
        let dir = std::env::temp_dir().join(format!("spill-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let seg = |start| {
            let path = dir.join(format!("s-{start}"));
            let file = Arc::new(File::create(&path).unwrap());
            Segment {
                start,
                len: 0,
                file,
                path,
            }
        };
        let mut d = DiskTier::default();
        assert!(d.is_empty() && d.locate(0).is_none());
        d.extend(Some(seg(100)), 50);
        d.extend(None, 50);
        d.extend(Some(seg(200)), 10);
        assert_eq!((d.first(), d.next(), d.bytes()), (100, 210, 110));
        let r = d.locate(150).unwrap();
        assert_eq!((r.pos, r.avail), (50, 50));
        let r = d.locate(205).unwrap();
        assert_eq!((r.pos, r.avail), (5, 5));
        assert!(d.locate(210).is_none() && d.locate(99).is_none());
        d.drop_before(199);
        assert_eq!(d.first(), 100);
        d.drop_before(200);
        assert_eq!((d.first(), d.bytes()), (200, 10));
        assert!(!dir.join("s-100").exists());
        assert_eq!(d.bound(5), 10);
        assert!(d.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
