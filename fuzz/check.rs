//! Checks shared by the cargo-fuzz target (`fuzz_targets/resp_parser.rs`)
//! and the deterministic property test (`tests/parser_props.rs`).
//!
//! The property: feeding a byte stream to [`RequestParser`] in one piece or
//! split at arbitrary points (as TCP reads split it) yields the same commands
//! and the same protocol error, never panics, and never reports a span or a
//! consumed length outside the buffer. The connection's loop is mirrored:
//! append a read to the buffer, parse until `Incomplete`, drop `consumed`
//! bytes after each command, stop at the first error.

use lattice::facade::protocol::{ParseLimits, Parsed, RequestParser};

/// What a stream parses to: its commands and the error that ended it, if any.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub commands: Vec<Vec<Vec<u8>>>,
    pub error: Option<String>,
}

/// Limits large enough that splitting a small input cannot change whether a
/// "too big" error fires (they scale with the buffered bytes, not the split).
pub fn roomy_limits(input_len: usize) -> ParseLimits {
    ParseLimits {
        max_bulk_len: 1 << 20,
        max_multibulk_len: 1 << 16,
        max_inline_len: input_len + 1,
        unauthenticated: false,
    }
}

/// Parses `input` delivered in pieces ending at `cuts` (sorted or not,
/// out-of-range cuts ignored), checking invariants on every call.
pub fn run(input: &[u8], cuts: &[usize], limits: &ParseLimits) -> Outcome {
    let mut ends: Vec<usize> = cuts.iter().copied().filter(|&c| c < input.len()).collect();
    ends.push(input.len());
    ends.sort_unstable();
    ends.dedup();
    let mut parser = RequestParser::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut out = Outcome {
        commands: vec![],
        error: None,
    };
    for end in ends {
        buf.extend_from_slice(&input[fed..end]);
        fed = end;
        loop {
            match parser.parse(&buf, limits) {
                Ok(Parsed::Command { consumed }) => {
                    assert!(consumed > 0, "a command consumed nothing");
                    assert!(consumed <= buf.len(), "consumed past the buffer");
                    let args = parser.args(&buf);
                    let argv: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
                    assert_eq!(argv.len(), args.len());
                    // Zero-argument commands (empty inline line, *0) are skipped.
                    if !argv.is_empty() {
                        out.commands.push(argv);
                    }
                    buf.drain(..consumed);
                    assert!(!parser.in_progress(), "in progress after a command");
                }
                Ok(Parsed::Incomplete) => break,
                Err(e) => {
                    out.error = Some(e.0);
                    return out;
                }
            }
        }
    }
    out
}

/// The whole check for one input: one piece vs. the given split vs. one
/// byte at a time must agree; tight limits must not panic either.
pub fn check(input: &[u8], cuts: &[usize]) {
    let limits = roomy_limits(input.len());
    let whole = run(input, &[], &limits);
    let split = run(input, cuts, &limits);
    assert_eq!(whole, split, "split at {cuts:?} changed the result");
    if input.len() <= 512 {
        let all: Vec<usize> = (1..input.len()).collect();
        assert_eq!(whole, run(input, &all, &limits), "byte-at-a-time differs");
    }
    let tight = ParseLimits {
        max_bulk_len: 8,
        max_multibulk_len: 4,
        max_inline_len: 16,
        unauthenticated: true,
    };
    let _ = run(input, cuts, &tight);
}

/// Derives a split from the input's own bytes (for the fuzzer: the first
/// byte says how many cuts, the next ones where).
pub fn split_from_bytes(data: &[u8]) -> (&[u8], Vec<usize>) {
    let Some((&n, rest)) = data.split_first() else {
        return (data, vec![]);
    };
    let n = (n as usize % 8).min(rest.len() / 2);
    let (cut_bytes, input) = rest.split_at(n * 2);
    let cuts = cut_bytes
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]) as usize % (input.len() + 1))
        .collect();
    (input, cuts)
}
