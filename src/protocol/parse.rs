//! Incremental request parser (see the module comment in `mod.rs`).
//!
//! The parser is resumable: when a command is split across reads it remembers
//! how far it got (`pos`, the argument count still expected and the spans found
//! so far), so a huge multibulk arriving slowly is scanned once, not once per
//! read. Lengths are checked against the limits before any byte of the body is
//! awaited, and nothing is ever allocated from a length the client claimed.

use std::ops::Range;

/// Limits enforced while parsing; they mirror redis.conf's directives.
#[derive(Clone, Copy, Debug)]
pub struct ParseLimits {
    /// `proto-max-bulk-len`: the largest bulk string accepted.
    pub max_bulk_len: usize,
    /// Largest multibulk count (Redis 7: INT_MAX). Nothing is allocated
    /// from it: spans grow as arguments actually arrive, and the query
    /// buffer limit bounds how many can arrive.
    pub max_multibulk_len: usize,
    /// Largest inline request (Redis: PROTO_INLINE_MAX_SIZE, 64 KiB).
    pub max_inline_len: usize,
    /// The client has not authenticated yet though a password is required:
    /// as Redis 7.0.15, at most 10 arguments of at most 16 KiB each, so an
    /// anonymous peer cannot make the server buffer much.
    pub unauthenticated: bool,
}

/// Redis's caps for a client that still has to authenticate.
const UNAUTH_MAX_MULTIBULK: i64 = 10;
const UNAUTH_MAX_BULK: i64 = 16384;

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: i32::MAX as usize,
            max_inline_len: 64 * 1024,
            unauthenticated: false,
        }
    }
}

/// A protocol error: the message follows "-ERR Protocol error: " and the
/// connection is closed after it is sent, as Redis does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

/// Result of one parse attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole command occupies `buf[..consumed]`; its arguments are in
    /// [`RequestParser::args`]. An empty inline line yields zero arguments.
    Command { consumed: usize },
    /// More bytes are needed.
    Incomplete,
}

/// The arguments of one parsed command: spans over a borrowed buffer.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    buf: &'a [u8],
    spans: &'a [Range<usize>],
}

impl<'a> Args<'a> {
    pub fn new(buf: &'a [u8], spans: &'a [Range<usize>]) -> Self {
        Args { buf, spans }
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.spans.len()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
    /// Argument `i`; panics if out of range (arity is checked before dispatch).
    #[inline]
    pub fn get(&self, i: usize) -> &'a [u8] {
        &self.buf[self.spans[i].clone()]
    }
    /// Arguments from `i` to the end.
    pub fn slice_from(&self, i: usize) -> Args<'a> {
        Args {
            buf: self.buf,
            spans: &self.spans[i.min(self.spans.len())..],
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let buf = self.buf;
        self.spans.iter().map(move |r| &buf[r.clone()])
    }
    // `&self` as it was: clippy asks for `self` of crate-private items only (DECISIONS 303).
    #[allow(clippy::wrong_self_convention)]
    pub fn to_vec(&self) -> Vec<Vec<u8>> {
        self.iter().map(|a| a.to_vec()).collect()
    }
}

/// Arguments owned in one buffer: for a command built in-process (a
/// replay, a script's call, a key state applied) that must run through
/// the same [`Args`] as a parsed request.
pub struct OwnedArgs {
    buf: Vec<u8>,
    spans: Vec<Range<usize>>,
}

impl OwnedArgs {
    pub fn new<A: AsRef<[u8]>>(argv: &[A]) -> Self {
        let mut buf = Vec::with_capacity(argv.iter().map(|a| a.as_ref().len()).sum());
        let mut spans = Vec::with_capacity(argv.len());
        for a in argv {
            let a = a.as_ref();
            spans.push(buf.len()..buf.len() + a.len());
            buf.extend_from_slice(a);
        }
        OwnedArgs { buf, spans }
    }

    pub fn args(&self) -> Args<'_> {
        Args::new(&self.buf, &self.spans)
    }
}

/// Resumable RESP request parser. One per connection.
#[derive(Default)]
pub struct RequestParser {
    /// Where parsing resumes in the buffer (relative to the command start).
    pos: usize,
    /// Arguments still expected in the current multibulk (`None`: not started).
    remaining: Option<usize>,
    spans: Vec<Range<usize>>,
    /// Inline commands are unescaped into this buffer.
    inline_buf: Vec<u8>,
    inline: bool,
    /// The bulk the last `Incomplete` waits for: where its body starts
    /// and where the command needs the buffer to reach (its body and
    /// CRLF), both relative to the command's start.
    waiting: Option<(usize, usize)>,
}

impl RequestParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// The arguments of the command last returned by [`parse`](Self::parse).
    /// `buf` must be the same buffer that was parsed.
    pub fn args<'a>(&'a self, buf: &'a [u8]) -> Args<'a> {
        if self.inline {
            Args::new(&self.inline_buf, &self.spans)
        } else {
            Args::new(buf, &self.spans)
        }
    }

    /// Try to parse one command at the start of `buf`.
    pub fn parse(&mut self, buf: &[u8], limits: &ParseLimits) -> Result<Parsed, ParseError> {
        self.waiting = None;
        if self.remaining.is_none() {
            if self.spans.capacity() > 4096 {
                // Give back what a command with very many arguments grew.
                self.spans = Vec::new();
            }
            self.spans.clear();
            self.inline = false;
            self.pos = 0;
            if buf.is_empty() {
                return Ok(Parsed::Incomplete);
            }
            if buf[0] != b'*' {
                return self.parse_inline(buf, limits);
            }
            let Some((count, next)) = read_line_int(buf, 1, "mbulk count", limits)? else {
                return Ok(Parsed::Incomplete);
            };
            if count > limits.max_multibulk_len as i64 {
                return Err(ParseError("invalid multibulk length".into()));
            }
            if limits.unauthenticated && count > UNAUTH_MAX_MULTIBULK {
                return Err(ParseError("unauthenticated multibulk length".into()));
            }
            if count <= 0 {
                // "*0\r\n" and "*-1\r\n" are empty commands, silently skipped.
                return Ok(Parsed::Command { consumed: next });
            }
            self.pos = next;
            self.remaining = Some(count as usize);
            // Reserve for the spans, but never trust a huge count up front.
            self.spans.reserve((count as usize).min(1024));
        }
        while let Some(left) = self.remaining {
            if left == 0 {
                break;
            }
            let p = self.pos;
            if p >= buf.len() {
                return Ok(Parsed::Incomplete);
            }
            if buf[p] != b'$' {
                let got = buf[p] as char;
                self.reset();
                return Err(ParseError(format!("expected '$', got '{got}'")));
            }
            let Some((len, body)) = read_line_int(buf, p + 1, "bulk count", limits)? else {
                return Ok(Parsed::Incomplete);
            };
            if len < 0 || len as usize > limits.max_bulk_len {
                self.reset();
                return Err(ParseError("invalid bulk length".into()));
            }
            if limits.unauthenticated && len > UNAUTH_MAX_BULK {
                self.reset();
                return Err(ParseError("unauthenticated bulk length".into()));
            }
            let end = body + len as usize;
            if buf.len() < end + 2 {
                self.waiting = Some((body, end + 2));
                return Ok(Parsed::Incomplete);
            }
            // Redis does not check the trailing CRLF's bytes, only skips them.
            self.spans.push(body..end);
            self.pos = end + 2;
            self.remaining = Some(left - 1);
        }
        self.remaining = None;
        Ok(Parsed::Command { consumed: self.pos })
    }

    /// Forget a half-parsed command (after an error).
    pub fn reset(&mut self) {
        self.remaining = None;
        self.spans.clear();
        self.pos = 0;
    }

    /// After `Incomplete`: the bulk being waited for, as (where its body
    /// starts, the length the command needs), relative to the command's
    /// start (the query buffer reserves room for a big one at once, and
    /// CLIENT LIST's `qbuf` shows its body, as Redis's big-argument mode).
    pub fn waiting_bulk(&self) -> Option<(usize, usize)> {
        self.waiting
    }

    /// Whether a multibulk command is partially parsed.
    pub fn in_progress(&self) -> bool {
        self.remaining.is_some()
    }

    fn parse_inline(&mut self, buf: &[u8], limits: &ParseLimits) -> Result<Parsed, ParseError> {
        // Redis finds the newline with strchr(), which stops at a NUL byte:
        // a NUL before the first '\n' means "no line yet" (then, past 64 KB,
        // "too big inline request"). Matching that keeps garbage handling
        // identical, and it means an inline line never contains a NUL.
        let Some(nl) = buf
            .iter()
            .position(|&b| b == b'\n' || b == 0)
            .filter(|&i| buf[i] == b'\n')
        else {
            if buf.len() > limits.max_inline_len {
                return Err(ParseError("too big inline request".into()));
            }
            return Ok(Parsed::Incomplete);
        };
        let mut line = &buf[..nl];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        self.inline = true;
        self.inline_buf.clear();
        self.spans.clear();
        match split_inline_args(line, &mut self.inline_buf, &mut self.spans) {
            Ok(()) => Ok(Parsed::Command { consumed: nl + 1 }),
            Err(()) => Err(ParseError("unbalanced quotes in request".into())),
        }
    }
}

/// Reads `<integer>\r\n` at `start`; returns the value and the index after
/// the CRLF, or `None` when the line is not complete yet.
fn read_line_int(
    buf: &[u8],
    start: usize,
    what: &str,
    limits: &ParseLimits,
) -> Result<Option<(i64, usize)>, ParseError> {
    let rest = &buf[start.min(buf.len())..];
    let Some(cr) = memchr(b'\r', rest) else {
        if rest.len() > limits.max_inline_len {
            return Err(ParseError(format!("too big {what} string")));
        }
        return Ok(None);
    };
    if cr + 1 >= rest.len() {
        return Ok(None);
    }
    let digits = &rest[..cr];
    let Some(v) = parse_i64(digits) else {
        let msg = if what == "mbulk count" {
            "invalid multibulk length"
        } else {
            "invalid bulk length"
        };
        return Err(ParseError(msg.into()));
    };
    Ok(Some((v, start + cr + 2)))
}

/// Strict decimal i64 parse as Redis's string2ll: no spaces, no '+', no
/// leading zeros (except "0"), no overflow.
pub(crate) fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let (neg, digits) = if s[0] == b'-' {
        (true, &s[1..])
    } else {
        (false, s)
    };
    if digits.is_empty() || (digits[0] == b'0' && digits.len() > 1) {
        return None;
    }
    if neg && digits == b"0" {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else if v > i64::MAX as u64 {
        None
    } else {
        Some(v as i64)
    }
}

#[inline]
fn memchr(c: u8, s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == c)
}

/// Split an inline line into arguments with redis-cli/sdssplitargs rules:
/// whitespace separates, "double quotes" understand \n \r \t \b \a \\ \" and
/// \xHH, 'single quotes' understand only \'. A closing quote must be followed
/// by a space or the end of line.
fn split_inline_args(
    line: &[u8],
    out: &mut Vec<u8>,
    spans: &mut Vec<Range<usize>>,
) -> Result<(), ()> {
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && is_c_space(line[i]) {
            i += 1;
        }
        if i >= n {
            return Ok(());
        }
        let start = out.len();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if i >= n {
                if in_dq || in_sq {
                    return Err(());
                }
                break;
            }
            let c = line[i];
            if in_dq {
                if c == b'\\'
                    && i + 3 < n
                    && line[i + 1] == b'x'
                    && is_hex(line[i + 2])
                    && is_hex(line[i + 3])
                {
                    out.push(hex_val(line[i + 2]) * 16 + hex_val(line[i + 3]));
                    i += 4;
                    continue;
                } else if c == b'\\' && i + 1 < n {
                    i += 1;
                    out.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        o => o,
                    });
                } else if c == b'"' {
                    if i + 1 < n && !is_c_space(line[i + 1]) {
                        return Err(());
                    }
                    i += 1;
                    break;
                } else {
                    out.push(c);
                }
            } else if in_sq {
                if c == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    i += 1;
                    out.push(b'\'');
                } else if c == b'\'' {
                    if i + 1 < n && !is_c_space(line[i + 1]) {
                        return Err(());
                    }
                    i += 1;
                    break;
                } else {
                    out.push(c);
                }
            } else if is_c_space(c) {
                break;
            } else if c == b'"' {
                in_dq = true;
            } else if c == b'\'' {
                in_sq = true;
            } else {
                out.push(c);
            }
            i += 1;
        }
        spans.push(start..out.len());
    }
}

/// C's isspace(): ASCII whitespace plus vertical tab, as sdssplitargs uses.
fn is_c_space(c: u8) -> bool {
    c.is_ascii_whitespace() || c == 0x0b
}

fn is_hex(c: u8) -> bool {
    c.is_ascii_hexdigit()
}

fn hex_val(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ParseError> {
        let mut p = RequestParser::new();
        let lim = ParseLimits::default();
        let mut off = 0;
        let mut out = vec![];
        loop {
            match p.parse(&input[off..], &lim)? {
                Parsed::Command { consumed } => {
                    out.push(p.args(&input[off..]).to_vec());
                    off += consumed;
                }
                Parsed::Incomplete => return Ok(out),
            }
        }
    }

    #[test]
    fn multibulk_and_pipeline() {
        let cmds = parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n").unwrap();
        assert_eq!(
            cmds,
            vec![vec![b"GET".to_vec(), b"k".to_vec()], vec![b"PING".to_vec()]]
        );
    }

    #[test]
    fn resumes_across_reads() {
        let full = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n";
        let mut p = RequestParser::new();
        let lim = ParseLimits::default();
        for cut in 0..full.len() {
            assert_eq!(
                p.parse(&full[..cut], &lim).unwrap(),
                Parsed::Incomplete,
                "cut {cut}"
            );
        }
        assert_eq!(
            p.parse(full, &lim).unwrap(),
            Parsed::Command {
                consumed: full.len()
            }
        );
        assert_eq!(p.args(full).get(2), b"value");
    }

    #[test]
    fn inline_quotes() {
        let cmds = parse_all(b"SET \"a b\" 'c\\'d' \"\\x41\\n\"\r\n").unwrap();
        assert_eq!(
            cmds,
            vec![vec![
                b"SET".to_vec(),
                b"a b".to_vec(),
                b"c'd".to_vec(),
                b"A\n".to_vec()
            ]]
        );
        assert!(parse_all(b"SET \"abc\r\n").is_err());
        assert_eq!(parse_all(b"\r\n").unwrap(), vec![Vec::<Vec<u8>>::new()]);
        // A NUL before the newline: no line yet, as Redis's strchr().
        assert_eq!(
            parse_all(b"\x00\r\nPING\r\n").unwrap(),
            Vec::<Vec<Vec<u8>>>::new()
        );
        assert_eq!(
            parse_all(b"a\x0bb\r\n").unwrap(),
            vec![vec![b"a".to_vec(), b"b".to_vec()]]
        );
    }

    #[test]
    fn limits_and_errors() {
        let lim = ParseLimits {
            max_bulk_len: 10,
            ..Default::default()
        };
        let mut p = RequestParser::new();
        assert!(p.parse(b"*1\r\n$11\r\n", &lim).is_err());
        let mut p = RequestParser::new();
        assert_eq!(p.parse(b"*1\r\n$10\r\n", &lim).unwrap(), Parsed::Incomplete);
        assert_eq!(
            parse_all(b"*2147483648\r\n").unwrap_err().0,
            "invalid multibulk length"
        );
        assert_eq!(
            parse_all(b"*1\r\nx").unwrap_err().0,
            "expected '$', got 'x'"
        );
        assert_eq!(
            parse_all(b"*abc\r\n").unwrap_err().0,
            "invalid multibulk length"
        );
        assert_eq!(
            parse_all(b"*1\r\n$-5\r\n").unwrap_err().0,
            "invalid bulk length"
        );
    }

    #[test]
    fn strict_integers() {
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"01"), None);
        assert_eq!(parse_i64(b" 1"), None);
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b"+1"), None);
    }
}
