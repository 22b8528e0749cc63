//! Redis's glob-style pattern matching (util.c's stringmatchlen), used by
//! KEYS, SCAN MATCH, pub/sub patterns, CONFIG GET and COMMAND LIST: a leaf
//! of the base layer, so configuration and the keyspace can use it too.

/// Redis's glob matcher (stringmatchlen): `*`, `?`, `[a-z]`, `[^x]`, `\x`.
/// The common `prefix*` form (no other special byte) is a prefix
/// comparison: an ACL key pattern such as `~app:*` is matched against
/// every key a restricted user's command names (the general matcher was
/// ~130 instructions a GET).
pub(crate) fn glob_match(pattern: &[u8], s: &[u8], nocase: bool) -> bool {
    if let (Some((b'*', prefix)), false) = (pattern.split_last(), nocase) {
        if !prefix
            .iter()
            .any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        {
            return s.starts_with(prefix);
        }
    }
    glob_rec(pattern, s, nocase, 0, &mut false)
}

/// `skip` is set once a `*` has tried every rest of the string in vain: then
/// no enclosing `*` can succeed by consuming more, so matching stops there
/// instead of going exponential (Redis's skipLongerMatches, CVE-2022-36021).
fn glob_rec(p: &[u8], s: &[u8], nocase: bool, depth: usize, skip: &mut bool) -> bool {
    if depth > 1000 {
        return false;
    }
    let (mut pi, mut si) = (0, 0);
    let eq = |a: u8, b: u8| {
        if nocase {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    while pi < p.len() {
        match p[pi] {
            b'*' => {
                while pi + 1 < p.len() && p[pi + 1] == b'*' {
                    pi += 1;
                }
                if pi + 1 == p.len() {
                    return true;
                }
                for k in si..=s.len() {
                    if glob_rec(&p[pi + 1..], &s[k..], nocase, depth + 1, skip) {
                        return true;
                    }
                    if *skip {
                        return false;
                    }
                }
                *skip = true;
                return false;
            }
            b'?' => {
                if si >= s.len() {
                    return false;
                }
                si += 1;
            }
            b'[' => {
                if si >= s.len() {
                    return false;
                }
                pi += 1;
                let not = pi < p.len() && p[pi] == b'^';
                if not {
                    pi += 1;
                }
                let mut matched = false;
                loop {
                    if pi >= p.len() {
                        pi -= 1;
                        break;
                    }
                    if p[pi] == b'\\' && pi + 2 < p.len() {
                        pi += 1;
                        if eq(p[pi], s[si]) {
                            matched = true;
                        }
                    } else if p[pi] == b']' {
                        break;
                    } else if pi + 2 < p.len() && p[pi + 1] == b'-' {
                        let (mut lo, mut hi) = (p[pi], p[pi + 2]);
                        if lo > hi {
                            std::mem::swap(&mut lo, &mut hi);
                        }
                        let c = s[si];
                        let in_range = if nocase {
                            let c = c.to_ascii_lowercase();
                            c >= lo.to_ascii_lowercase() && c <= hi.to_ascii_lowercase()
                        } else {
                            c >= lo && c <= hi
                        };
                        if in_range {
                            matched = true;
                        }
                        pi += 2;
                    } else if eq(p[pi], s[si]) {
                        matched = true;
                    }
                    pi += 1;
                }
                if not {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                si += 1;
            }
            b'\\' if pi + 1 < p.len() => {
                pi += 1;
                if si >= s.len() || !eq(p[pi], s[si]) {
                    return false;
                }
                si += 1;
            }
            c => {
                if si >= s.len() || !eq(c, s[si]) {
                    return false;
                }
                si += 1;
            }
        }
        pi += 1;
    }
    si == s.len()
}

#[cfg(test)]
mod tests {
    /// The `prefix*` shortcut answers as the general matcher does.
    #[test]
    fn the_prefix_shortcut_agrees_with_the_matcher() {
        let patterns: [&[u8]; 9] = [
            b"app:*",
            b"*",
            b"app",
            b"a?p:*",
            b"app:\\*",
            b"[ab]pp:*",
            b"app:*x",
            b"**",
            b"",
        ];
        let keys: [&[u8]; 8] = [
            b"app:1", b"app:", b"app", b"ap", b"bpp:1", b"app:*", b"", b"xapp:1",
        ];
        for p in patterns {
            for k in keys {
                let general = super::glob_rec(p, k, false, 0, &mut false);
                assert_eq!(super::glob_match(p, k, false), general, "{p:?} {k:?}");
            }
        }
    }

    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match(b"*", b"anything", false));
        assert!(glob_match(b"h?llo", b"hello", false));
        assert!(glob_match(b"h[ae]llo", b"hallo", false));
        assert!(!glob_match(b"h[^e]llo", b"hello", false));
        assert!(glob_match(b"h[a-b]llo", b"hbllo", false));
        assert!(glob_match(b"key:*:x", b"key:12:x", false));
        assert!(!glob_match(b"key:*:x", b"key:12:y", false));
        assert!(glob_match(b"a\\*b", b"a*b", false));
        assert!(glob_match(b"FOO*", b"foobar", true));
        let nested = b"a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b";
        assert!(!glob_match(nested, &[b'a'; 90], false));
        assert!(glob_match(b"*a*b*c", b"xxaxxbxxc", false));
        assert!(!glob_match(b"*a*b*c", b"xxaxxcxxb", false));
    }
}
