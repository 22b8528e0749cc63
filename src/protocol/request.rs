//! RESP encoding of commands as a client sends them: `*<argc>\r\n` then
//! `$<len>\r\n<arg>\r\n` per argument. The AOF writes exactly this (Redis's
//! catAppendOnlyGenericCommand, so `redis-check-aof` accepts our files), and
//! MIGRATE sends it to the target server.

/// Appends the array header of a command with `argc` arguments.
pub(crate) fn array(out: &mut Vec<u8>, argc: usize) {
    out.push(b'*');
    push_num(out, argc as i64);
    out.extend_from_slice(b"\r\n");
}

/// Appends one bulk argument.
pub(crate) fn bulk(out: &mut Vec<u8>, arg: &[u8]) {
    bulk_header(out, arg.len());
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// Appends `$<len>\r\n`, a bulk argument's header (its bytes and CRLF follow).
pub(crate) fn bulk_header(out: &mut Vec<u8>, len: usize) {
    out.push(b'$');
    push_num(out, len as i64);
    out.extend_from_slice(b"\r\n");
}

/// Appends one bulk argument holding a decimal integer.
pub(crate) fn bulk_int(out: &mut Vec<u8>, n: i64) {
    let mut b = [0u8; 20];
    bulk(out, super::reply::fmt_i64(&mut b, n));
}

/// Appends a whole command.
pub(crate) fn command<A: AsRef<[u8]>>(out: &mut Vec<u8>, argv: &[A]) {
    array(out, argv.len());
    for a in argv {
        bulk(out, a.as_ref());
    }
}

/// Appends `SELECT <db>`.
pub(crate) fn select(out: &mut Vec<u8>, db: usize) {
    array(out, 2);
    bulk(out, b"SELECT");
    bulk_int(out, db as i64);
}

fn push_num(out: &mut Vec<u8>, n: i64) {
    let mut b = [0u8; 20];
    out.extend_from_slice(super::reply::fmt_i64(&mut b, n));
}

#[cfg(test)]
mod tests {
    #[test]
    fn encodes_like_redis() {
        let mut out = vec![];
        super::select(&mut out, 3);
        super::command(&mut out, &[&b"SET"[..], b"k", b""]);
        assert_eq!(
            out,
            b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }
}
