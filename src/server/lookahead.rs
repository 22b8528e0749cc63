//! A connection's look ahead into a pipelined batch: the keys of the
//! commands after the one running, prefetched so their lookups do not
//! stall one after the other (`keyspace/prefetch.rs` says what is
//! prefetched and how).
//!
//! It only reads the query buffer: commands are still parsed and run one
//! by one by `conn::process_input`, in order, and a batch that stops early
//! (MULTI's queueing, a blocking command, a client state change, output
//! limits) stops as it did; a prefetch of a command that then does not run,
//! or whose guessed key is not a key (the first argument after the name
//! is taken as one, which it is for most commands), or of the wrong
//! database after a SELECT, only warms a cache line for nothing. A read
//! holding one command looks no further than that command and prefetches
//! nothing: a lone command per read pays for the scan of its header only.

use crate::keyspace::{Db, Keyspace, Slot};

/// Commands looked at in one scan of the query buffer: about as many index
/// groups (one line each) as the core can have misses in flight.
const WINDOW: usize = 16;

/// How many commands ahead of the running one the slab entry is
/// prefetched (step 2): its index group, asked for at the scan, has had
/// that many commands' time to arrive.
const DISTANCE: usize = 2;

/// The window of commands ahead: the slot of each one's first argument
/// after the name (None without one), and the next to run.
pub(super) struct Lookahead {
    slots: [Option<Slot>; WINDOW],
    len: usize,
    at: usize,
}

impl Lookahead {
    pub(super) fn new() -> Lookahead {
        Lookahead {
            slots: [None; WINDOW],
            len: 0,
            at: 0,
        }
    }

    /// Called before the command at the start of `pending` is parsed: past
    /// the window, scans the next one (prefetching its index groups), then
    /// prefetches the entries of the commands `DISTANCE` ahead.
    #[inline]
    pub(super) fn before_command(&mut self, ks: &Keyspace, db: usize, pending: &[u8]) {
        if self.at >= self.len {
            self.scan(ks, ks.db(db), pending);
            if self.len < 2 {
                return;
            }
            // The first commands of a window: entries of all up to DISTANCE.
            for i in 1..DISTANCE.min(self.len) {
                if let Some(s) = self.slots[i] {
                    ks.db(db).prefetch_entry(s);
                }
            }
        }
        let ahead = self.at + DISTANCE;
        if ahead < self.len {
            if let Some(s) = self.slots[ahead] {
                ks.db(db).prefetch_entry(s);
            }
        }
        self.at += 1;
    }

    /// Reads up to `WINDOW` complete commands from `pending` and, when
    /// there are two or more, prefetches their keys' index groups.
    fn scan(&mut self, ks: &Keyspace, db: &Db, pending: &[u8]) {
        let mut keys: [Option<(usize, usize)>; WINDOW] = [None; WINDOW];
        let mut n = 0;
        let mut off = 0;
        while n < WINDOW {
            let Some((key, next)) = command_at(pending, off) else {
                break;
            };
            keys[n] = key;
            n += 1;
            off = next;
        }
        self.at = 0;
        self.len = n;
        if n < 2 {
            self.len = 0;
            return;
        }
        for (slot, key) in self.slots.iter_mut().zip(&keys[..n]) {
            *slot = key.map(|(a, b)| ks.slot(&pending[a..b]));
            if let Some(s) = *slot {
                db.prefetch(s);
            }
        }
    }
}

/// The RESP command starting at `off` in `buf`, if it is complete: the
/// range of its second argument (if it has one) and where the next command
/// starts. None for an incomplete or inline command, or anything odd (the
/// parser, not this, decides what it is).
fn command_at(buf: &[u8], off: usize) -> Option<(Option<(usize, usize)>, usize)> {
    let (argc, mut at) = number_after(buf, off, b'*')?;
    let mut key = None;
    for i in 0..argc {
        let (len, start) = number_after(buf, at, b'$')?;
        let end = start.checked_add(len)?;
        if buf.get(end..end + 2)? != b"\r\n" {
            return None;
        }
        if i == 1 {
            key = Some((start, end));
        }
        at = end + 2;
    }
    Some((key, at))
}

/// `<tag><decimal>\r\n` at `off`: the number and the offset past it.
fn number_after(buf: &[u8], off: usize, tag: u8) -> Option<(usize, usize)> {
    if *buf.get(off)? != tag {
        return None;
    }
    let mut n: usize = 0;
    let mut at = off + 1;
    loop {
        match *buf.get(at)? {
            d @ b'0'..=b'9' if at - off <= 10 => n = n * 10 + usize::from(d - b'0'),
            b'\r' if at > off + 1 => break,
            _ => return None,
        }
        at += 1;
    }
    (*buf.get(at + 1)? == b'\n').then_some((n, at + 2))
}

#[cfg(test)]
mod tests {
    use super::command_at;

    #[test]
    fn finds_each_command_and_its_first_key() {
        let buf = b"*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$1\r\nv\r\n*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$2\r\nk2";
        let (key, next) = command_at(buf, 0).unwrap();
        assert_eq!(&buf[key.unwrap().0..key.unwrap().1], b"k1");
        let (key, next) = command_at(buf, next).unwrap();
        assert_eq!((key, &buf[next..next + 2]), (None, &b"*2"[..]));
        // The last one is incomplete; an inline command is not read.
        assert!(command_at(buf, next).is_none());
        assert!(command_at(b"GET k\r\n", 0).is_none());
        assert!(command_at(b"*1\r\n$99999999999999\r\n", 0).is_none());
        assert!(command_at(b"*\r\n", 0).is_none());
    }
}
