//! Reply encoder: writes RESP2 or RESP3 into a connection's output buffer.
//!
//! Commands never build reply values; they call these methods, which append
//! the encoded bytes directly. The two protocols differ only in a few types
//! (null, map, set, double, boolean, verbatim, push), and each method picks
//! the right form for the client's protocol version.

/// Output buffer of one connection plus its protocol version (2 or 3).
pub struct ReplyBuf {
    pub buf: Vec<u8>,
    pub resp: u8,
}

impl Default for ReplyBuf {
    fn default() -> Self {
        ReplyBuf {
            buf: Vec::with_capacity(16 * 1024),
            resp: 2,
        }
    }
}

impl ReplyBuf {
    pub fn new(resp: u8) -> Self {
        ReplyBuf {
            buf: Vec::new(),
            resp,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    #[inline]
    fn prefixed_len(&mut self, prefix: u8, n: i64) {
        self.buf.push(prefix);
        let mut b = itoa_buf();
        self.buf.extend_from_slice(fmt_i64(&mut b, n));
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `+OK`
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }
    pub fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    /// An error line; `msg` is the full text after '-', e.g. "ERR syntax error".
    pub fn error(&mut self, msg: &str) {
        self.buf.push(b'-');
        // Newlines would break the protocol: Redis replaces them by spaces.
        for &c in msg.as_bytes() {
            self.buf
                .push(if c == b'\r' || c == b'\n' { b' ' } else { c });
        }
        self.buf.extend_from_slice(b"\r\n");
    }
    #[inline]
    pub fn int(&mut self, n: i64) {
        self.prefixed_len(b':', n);
    }
    #[inline]
    pub fn bulk(&mut self, s: &[u8]) {
        self.prefixed_len(b'$', s.len() as i64);
        self.buf.extend_from_slice(s);
        self.buf.extend_from_slice(b"\r\n");
    }
    pub fn bulk_str(&mut self, s: &str) {
        self.bulk(s.as_bytes());
    }
    /// An integer sent as a bulk string.
    pub fn bulk_int(&mut self, n: i64) {
        let mut b = itoa_buf();
        let s = fmt_i64(&mut b, n);
        let s = s.to_vec();
        self.bulk(&s);
    }
    /// Null bulk: `$-1` in RESP2, `_` in RESP3.
    #[inline]
    pub fn null(&mut self) {
        if self.resp >= 3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }
    /// Null array: `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        if self.resp >= 3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"*-1\r\n");
        }
    }
    #[inline]
    pub fn array(&mut self, n: usize) {
        self.prefixed_len(b'*', n as i64);
    }
    /// A map of `n` pairs: `%n` in RESP3, a flat array of 2n in RESP2.
    pub fn map(&mut self, n: usize) {
        if self.resp >= 3 {
            self.prefixed_len(b'%', n as i64);
        } else {
            self.prefixed_len(b'*', 2 * n as i64);
        }
    }
    /// A set: `~n` in RESP3, an array in RESP2.
    pub fn set(&mut self, n: usize) {
        if self.resp >= 3 {
            self.prefixed_len(b'~', n as i64);
        } else {
            self.prefixed_len(b'*', n as i64);
        }
    }
    /// Out-of-band push: `>n` in RESP3, an array in RESP2.
    pub fn push(&mut self, n: usize) {
        if self.resp >= 3 {
            self.prefixed_len(b'>', n as i64);
        } else {
            self.prefixed_len(b'*', n as i64);
        }
    }
    /// A double: `,` in RESP3, a bulk string in RESP2 (Redis's %.17g form).
    pub fn double(&mut self, d: f64) {
        let s = format_double(d);
        if self.resp >= 3 {
            self.buf.push(b',');
            self.buf.extend_from_slice(s.as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(s.as_bytes());
        }
    }
    /// A boolean: `#t`/`#f` in RESP3, `:1`/`:0` in RESP2.
    pub fn boolean(&mut self, b: bool) {
        if self.resp >= 3 {
            self.buf
                .extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(b as i64);
        }
    }
    /// Verbatim text (`=len\r\ntxt:...`) in RESP3, a bulk string in RESP2.
    pub fn verbatim(&mut self, s: &[u8]) {
        if self.resp >= 3 {
            self.prefixed_len(b'=', s.len() as i64 + 4);
            self.buf.extend_from_slice(b"txt:");
            self.buf.extend_from_slice(s);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(s);
        }
    }
    /// Bytes already encoded as RESP.
    pub fn raw(&mut self, s: &[u8]) {
        self.buf.extend_from_slice(s);
    }
}

/// Format a double as Redis does for replies (`%.17g`, with "inf"/"-inf"/"nan").
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    format_g(d, 17)
}

/// C's `%.{prec}g`.
pub fn format_g(d: f64, prec: usize) -> String {
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let prec = prec.max(1);
    let exp = d.abs().log10().floor() as i32;
    // Round to `prec` significant digits using exponential formatting, then
    // decide the style from the rounded exponent, as printf does.
    let e_repr = format!("{:.*e}", prec - 1, d);
    let (mantissa, e) = e_repr.split_once('e').unwrap_or((&e_repr, "0"));
    let e: i32 = e.parse().unwrap_or(exp);
    if e < -4 || e >= prec as i32 {
        let m = trim_zeros(mantissa);
        let sign = if e < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", e.abs())
    } else {
        let decimals = (prec as i32 - 1 - e).max(0) as usize;
        trim_zeros(&format!("{:.*}", decimals, d)).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[inline]
fn itoa_buf() -> [u8; 20] {
    [0u8; 20]
}

/// Formats `n` into the tail of `b` and returns the digits.
#[inline]
pub fn fmt_i64(b: &mut [u8; 20], n: i64) -> &[u8] {
    let neg = n < 0;
    let mut v = n.unsigned_abs();
    let mut i = b.len();
    loop {
        i -= 1;
        b[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        b[i] = b'-';
    }
    &b[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp2_and_resp3_shapes() {
        let mut r = ReplyBuf::new(2);
        r.null();
        r.map(1);
        r.double(1.5);
        r.int(-42);
        assert_eq!(r.buf, b"$-1\r\n*2\r\n$3\r\n1.5\r\n:-42\r\n");
        let mut r = ReplyBuf::new(3);
        r.null();
        r.map(1);
        r.double(1.5);
        r.boolean(true);
        assert_eq!(r.buf, b"_\r\n%1\r\n,1.5\r\n#t\r\n");
    }

    #[test]
    fn printf_g() {
        assert_eq!(format_double(3.0), "3");
        assert_eq!(format_double(0.1), "0.10000000000000001");
        assert_eq!(format_double(1e20), "1e+20");
        assert_eq!(format_double(1.5e-5), "1.5e-05");
        assert_eq!(format_g(10.5, 17), "10.5");
        assert_eq!(format_double(f64::INFINITY), "inf");
        assert_eq!(format_g(123456789.0, 17), "123456789");
    }
}
