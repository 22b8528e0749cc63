//! Deterministic property test for the RESP request parser: the same checks
//! as the cargo-fuzz target (`fuzz/check.rs`), driven by a seeded RNG over
//! generated, mutated and random inputs, so CI exercises them without nightly.

#[path = "../fuzz/check.rs"]
mod check;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A well-formed multibulk command with random arguments.
fn multibulk(rng: &mut StdRng) -> Vec<u8> {
    let n = rng.gen_range(0..5);
    let mut v = format!("*{n}\r\n").into_bytes();
    for _ in 0..n {
        let len = rng.gen_range(0..12);
        v.extend_from_slice(format!("${len}\r\n").as_bytes());
        v.extend((0..len).map(|_| rng.gen::<u8>()));
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// An inline command with words, quotes and escapes.
fn inline(rng: &mut StdRng) -> Vec<u8> {
    const PARTS: &[&[u8]] = &[
        b"SET",
        b"GET",
        b" ",
        b"  ",
        b"\"a b\"",
        b"'c d'",
        b"\"\\x41\\n\"",
        b"\"",
        b"'",
        b"key",
        b"\t",
        b"\\",
        b"\"x\"y",
    ];
    let mut v = vec![];
    for _ in 0..rng.gen_range(0..6) {
        v.extend_from_slice(PARTS[rng.gen_range(0..PARTS.len())]);
    }
    v.extend_from_slice(if rng.gen() { b"\r\n" } else { b"\n" });
    v
}

/// Flips, inserts, deletes or duplicates a few bytes.
fn mutate(rng: &mut StdRng, v: &mut Vec<u8>) {
    const SPECIAL: &[u8] = b"*$\r\n-0123456789 \"'\\";
    for _ in 0..rng.gen_range(1..4) {
        let i = rng.gen_range(0..=v.len());
        match rng.gen_range(0..4) {
            0 if i < v.len() => v[i] = SPECIAL[rng.gen_range(0..SPECIAL.len())],
            1 => v.insert(i, SPECIAL[rng.gen_range(0..SPECIAL.len())]),
            2 if i < v.len() => {
                v.remove(i);
            }
            _ => {
                let tail = v[i..].to_vec();
                v.extend_from_slice(&tail[..tail.len().min(8)]);
            }
        }
    }
}

fn stream(rng: &mut StdRng) -> Vec<u8> {
    let mut v = vec![];
    for _ in 0..rng.gen_range(1..6) {
        let mut c = match rng.gen_range(0..10) {
            0..=5 => multibulk(rng),
            6..=8 => inline(rng),
            _ => (0..rng.gen_range(0..24)).map(|_| rng.gen()).collect(),
        };
        if rng.gen_ratio(1, 3) {
            mutate(rng, &mut c);
        }
        v.extend(c);
    }
    v
}

#[test]
fn split_points_do_not_change_the_parse() {
    let mut rng = StdRng::seed_from_u64(0x01a7_71ce);
    for _ in 0..20_000 {
        let input = stream(&mut rng);
        let cuts: Vec<usize> = (0..rng.gen_range(0..6))
            .map(|_| rng.gen_range(0..=input.len()))
            .collect();
        check::check(&input, &cuts);
    }
}

#[test]
fn well_formed_streams_parse_to_their_commands() {
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..2_000 {
        let argvs: Vec<Vec<Vec<u8>>> = (0..rng.gen_range(1..5))
            .map(|_| {
                (0..rng.gen_range(1..4))
                    .map(|_| (0..rng.gen_range(0..10)).map(|_| rng.gen()).collect())
                    .collect()
            })
            .collect();
        let mut input = vec![];
        for argv in &argvs {
            input.extend(format!("*{}\r\n", argv.len()).bytes());
            for a in argv {
                input.extend(format!("${}\r\n", a.len()).bytes());
                input.extend_from_slice(a);
                input.extend_from_slice(b"\r\n");
            }
        }
        let cuts: Vec<usize> = (0..3).map(|_| rng.gen_range(0..=input.len())).collect();
        let out = check::run(&input, &cuts, &check::roomy_limits(input.len()));
        assert_eq!(out.error, None);
        assert_eq!(out.commands, argvs);
    }
}

#[test]
fn fuzzer_seed_corpus_passes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/resp_parser");
    for f in std::fs::read_dir(dir).unwrap() {
        let data = std::fs::read(f.unwrap().path()).unwrap();
        check::check(&data, &[]);
        let (input, cuts) = check::split_from_bytes(&data);
        check::check(input, &cuts);
    }
}
