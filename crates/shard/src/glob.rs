//! Redis-style glob matching for KEYS and SCAN MATCH.
//!
//! Hand-written because Redis's dialect (`*`, `?`, `[a-z]`, `[^x]`, `\`
//! escapes, on raw bytes rather than paths or UTF-8) is not what the glob
//! crates implement. Iterative with one backtrack point, so a hostile pattern
//! like `*a*a*a*…b` cannot blow up exponentially.

/// True when `text` matches the Redis glob `pattern`.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((hit, next)) = class(pattern, p, text[t]) {
                        if hit {
                            p = next;
                            t += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() && pattern[p + 1] == text[t] => {
                    p += 2;
                    t += 1;
                    continue;
                }
                b'\\' if p + 1 < pattern.len() => {}
                c if c == text[t] => {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pattern[start] == b'['`;
/// returns (matched, index after the class), or None if unterminated.
fn class(pattern: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            hit |= pattern[i + 1] == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (lo, hi) = (
                pattern[i].min(pattern[i + 2]),
                pattern[i].max(pattern[i + 2]),
            );
            hit |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            hit |= pattern[i] == c;
            i += 1;
        }
    }
    if i >= pattern.len() {
        return None;
    }
    Some((hit != negate, i + 1))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_dialect() {
        assert!(matches(b"*", b""));
        assert!(matches(b"user:*", b"user:42"));
        assert!(!matches(b"user:*", b"usr:42"));
        assert!(matches(b"h?llo", b"hello"));
        assert!(matches(b"h[ae]llo", b"hallo"));
        assert!(!matches(b"h[^e]llo", b"hello"));
        assert!(matches(b"h[a-c]llo", b"hbllo"));
        assert!(matches(b"a\\*b", b"a*b"));
        assert!(!matches(b"a\\*b", b"axb"));
        assert!(matches(b"*a*b*c", b"xxaxxbxxc"));
        assert!(!matches(b"*a*b*c", b"xxaxxbxx"));
    }

    #[test]
    fn hostile_pattern_is_fast() {
        let text = vec![b'a'; 10_000];
        let mut pat = b"*a".repeat(30);
        pat.push(b'b');
        assert!(!matches(&pat, &text));
    }
}
