//! RESP protocol: request parsing and reply encoding, with no I/O.
//!
//! The server reads bytes from a socket into a buffer and hands that buffer to
//! [`RequestParser`], which finds complete commands (multibulk `*N\r\n$len\r\n...`
//! or inline `GET foo\r\n`) and records each argument as a span of the buffer, so
//! a command is parsed without copying or allocating. Replies are written by
//! [`ReplyBuf`] straight into the connection's output buffer in RESP2 or RESP3.
//!
//! This is the one hot path written by hand instead of taken from a crate: a
//! general RESP crate builds an owned value tree per request, which costs an
//! allocation per argument; here a pipeline of 16 GETs costs none.

mod parse;
mod reply;
pub(crate) mod request;

pub(crate) use parse::parse_i64;
pub(crate) use parse::Args;
pub use parse::{OwnedArgs, ParseLimits, Parsed, RequestParser};
pub(crate) use reply::{fmt_i64 as fmt_i64_pub, format_double, format_g, ReplyBuf};

/// Case-insensitive comparison of an argument with an ASCII keyword.
#[inline]
pub(crate) fn eq_ic(a: &[u8], kw: &str) -> bool {
    a.eq_ignore_ascii_case(kw.as_bytes())
}
