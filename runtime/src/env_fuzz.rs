//! Hostile values for the fuzz tests of the `LOCUS_*` environment parsers (issue 38).
//!
//! [`values`] gives a fixed list of known-bad shapes (empty, whitespace, signs, numbers
//! past every integer type, NaN and infinities, unicode digits and spaces, 64 KiB strings,
//! repeated separators), then values drawn with a splitmix64 generator from a seed: the
//! parser's own valid examples mutated (junk appended or prepended, a character inserted
//! or cut, separators doubled, the whole repeated), and random strings over an alphabet
//! of digits, signs, separators, whitespace, letters and non-ASCII characters, a few of
//! them up to 64 KiB long. Environment values cannot hold NUL, so none does.
//! [`run`] feeds each value to a check under `catch_unwind` and, when one panics, fails
//! naming the case number and the value.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// How many values each parser's fuzz test feeds it.
pub(crate) const CASES: usize = 4096;

/// The longest value generated: 64 KiB.
pub(crate) const MAX_LEN: usize = 64 << 10;

/// The most an error message may add to the value it quotes: an error allocates at most
/// the value's length plus this.
pub(crate) const ERROR_OVERHEAD: usize = 512;

/// A splitmix64 generator.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Tokens that break parsers: signs, number edges, float specials, separators, unicode.
const TOKENS: &[&str] = &[
    "",
    " ",
    "\t",
    "\n",
    "\r\n",
    "+",
    "-",
    "--",
    "+-",
    "0",
    "-0",
    "+0",
    "00",
    "-1",
    "+1",
    "1",
    "2",
    "7",
    "1024",
    "1025",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "99999999999999999999999",
    "340282366920938463463374607431768211456",
    "1e308",
    "-1e308",
    "1e309",
    "1e-308",
    "5e-324",
    "1e-10",
    "1e19",
    "1.8446744073709552e19",
    "9.3e18",
    "3.2e7",
    "0.5",
    ".5",
    "5.",
    ".",
    "1.2.3",
    "NaN",
    "nan",
    "-nan",
    "inf",
    "-inf",
    "+inf",
    "infinity",
    "Infinity",
    "0x10",
    "0b1",
    "0o7",
    "1_000",
    "1,000",
    "1 000",
    "e",
    "E5",
    "1e",
    ",",
    ",,",
    ":",
    "::",
    "=",
    "==",
    "0-",
    "0-0:0",
    "0--1:2",
    "cuda:0",
    "cuda:-1",
    "cuda:99999999999999999999",
    "A=cuda:0",
    "A=",
    "=A",
    "host",
    "cuda",
    "auto",
    "HOST",
    "off",
    "false",
    "true",
    "on",
    "null",
    "undefined",
    "${LOCUS_BACKEND}",
    "%s%n",
    "'",
    "\"",
    "\\",
    "é",
    "ß",
    "日本",
    "🦀",
    "١٢",         // Arabic-Indic digits
    "２",         // a fullwidth digit
    "\u{a0}",     // no-break space
    "\u{2003}",   // em space
    "\u{3000}",   // ideographic space
    "\u{200b}",   // zero-width space (not whitespace to `trim`)
    "\u{feff}",   // byte-order mark
    "\u{202e}",   // right-to-left override
    "\u{1}",      // a control character
    "\u{7f}",     // delete
    "\u{10ffff}", // the last code point
];

/// Characters of the random strings.
const ALPHABET: &[char] = &[
    '0', '1', '2', '5', '9', '9', '9', '0', '+', '-', '.', 'e', 'E', 'x', ',', ':', '=', '_', ' ', '\t', '\n', 'a',
    'z', 'A', 'n', 'i', 'f', 'c', 'u', 'd', 'h', 'o', 's', 't', '\u{a0}', '\u{3000}', 'é', '٣', '２', '🦀', '\u{200b}',
];

/// `n` hostile values (at least the fixed list) for a parser, from `near`, values at its
/// edges (valid ones, and some just past them): the fixed list, `near` each dressed up,
/// then values drawn from `seed`.
pub(crate) fn values(seed: u64, near: &[&str], n: usize) -> Vec<String> {
    let mut out: Vec<String> = TOKENS.iter().map(|s| s.to_string()).collect();
    let long = |unit: &str| unit.repeat(MAX_LEN / unit.len().max(1));
    out.extend(["9", "0", " ", ",", ":", "=", "a", "é", "0-", "A=cuda:0,", "1e308", "\u{3000}"].map(long));
    out.push(format!("{}1", "0".repeat(MAX_LEN - 1)));
    for v in near {
        out.extend([
            v.to_string(),
            format!(" {v} "),
            format!("\t{v}\n"),
            format!("+{v}"),
            format!("-{v}"),
            format!("{v}x"),
            format!("{v} junk"),
            format!("{v}{v}"),
            format!("{v},{v}"),
            format!("{v}\u{a0}"),
            format!("\u{200b}{v}"),
            v.to_uppercase(),
        ]);
    }
    let mut rng = Rng::new(seed);
    while out.len() < n {
        let v = if near.is_empty() || rng.below(3) == 0 { random(&mut rng) } else { mutated(&mut rng, near) };
        out.push(clip(v));
    }
    out
}

/// `s` cut to at most [`MAX_LEN`] bytes, at a char boundary.
fn clip(mut s: String) -> String {
    if s.len() > MAX_LEN {
        let at = (0..=MAX_LEN).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        s.truncate(at);
    }
    s
}

/// A random string over [`ALPHABET`] and [`TOKENS`]: mostly short, one in 64 up to 64 KiB.
fn random(rng: &mut Rng) -> String {
    let max = if rng.below(64) == 0 { MAX_LEN } else { 24 };
    let len = rng.below(max + 1);
    let mut s = String::new();
    while s.len() < len {
        if rng.below(4) == 0 {
            s.push_str(rng.pick(TOKENS));
        } else {
            s.push(rng.pick(ALPHABET));
        }
    }
    s
}

/// One of `near`, changed one to three times.
fn mutated(rng: &mut Rng, near: &[&str]) -> String {
    let mut s = rng.pick(near).to_string();
    for _ in 0..1 + rng.below(3) {
        let at = cut_point(rng, &s);
        match rng.below(8) {
            0 => s.push_str(rng.pick(TOKENS)),
            1 => s.insert_str(0, rng.pick(TOKENS)),
            2 => s.insert_str(at, rng.pick(TOKENS)),
            3 => s.insert(at, rng.pick(ALPHABET)),
            4 => s.truncate(at),
            5 => {
                // Every separator doubled, or many times over.
                let times = 1 + rng.below(50).min(MAX_LEN / (s.len() + 1));
                for sep in [",", ":", "=", "-"] {
                    s = s.replace(sep, &sep.repeat(times));
                }
            }
            6 => {
                let sep = rng.pick(&[",", ":", "", " "]);
                let times = 1 + rng.below(200).min(MAX_LEN / (s.len() + 1));
                s = vec![s.as_str(); times].join(sep);
            }
            _ => {
                // A run of digits (or the end) replaced by a number at or past an edge.
                let huge = rng.pick(&[
                    "18446744073709551615",
                    "18446744073709551616",
                    "9223372036854775807",
                    "99999999999999999999999",
                    "1e308",
                    "-1",
                    "NaN",
                ]);
                let starts: Vec<usize> = s
                    .char_indices()
                    .filter(|&(i, c)| c.is_ascii_digit() && !s[..i].ends_with(|p: char| p.is_ascii_digit()))
                    .map(|(i, _)| i)
                    .chain([s.len()])
                    .collect();
                let start = rng.pick(&starts);
                let end = s[start..].find(|c: char| !c.is_ascii_digit()).map_or(s.len(), |e| start + e);
                s.replace_range(start..end, huge);
            }
        }
        s = clip(s);
    }
    s
}

/// A char boundary of `s`, at random.
fn cut_point(rng: &mut Rng, s: &str) -> usize {
    let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).chain([s.len()]).collect();
    rng.pick(&bounds)
}

/// Feeds every value to `check`, failing with the case and the value when one panics
/// (the parser, or an assertion of `check`). Returns how many values it fed.
pub(crate) fn run(what: &str, values: &[String], mut check: impl FnMut(&str)) -> usize {
    for (i, v) in values.iter().enumerate() {
        assert!(!v.contains('\0'), "an environment value cannot hold NUL");
        assert!(v.len() <= MAX_LEN, "case {i} is {} bytes", v.len());
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| check(v))) {
            let why = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            let shown: String = v.chars().take(120).collect();
            panic!("{what}: case {i} ({} bytes, {shown:?}...) panicked: {why}", v.len());
        }
    }
    values.len()
}

/// Asserts that an error `e` about `value` names `var`, stays under the stated allocation
/// cap, and (when `accepted` is given) says what is accepted.
pub(crate) fn assert_clear(e: &str, var: &str, value: &str, accepted: &[&str]) {
    assert!(e.contains(var), "the error does not name {var}: {e}");
    assert!(e.len() <= value.len() + ERROR_OVERHEAD, "the error is {} bytes for a value of {}", e.len(), value.len());
    for a in accepted {
        assert!(e.contains(a), "the error does not say `{a}`: {e}");
    }
}

#[test]
fn the_values_are_deterministic_and_hostile() {
    let a = values(7, &["2"], CASES);
    assert_eq!(a, values(7, &["2"], CASES));
    assert_ne!(a, values(8, &["2"], CASES));
    assert_eq!(a.len(), CASES);
    assert!(a.iter().any(|v| v.len() >= MAX_LEN - 8));
    assert!(a.iter().any(|v| v.is_empty()));
    assert!(a.iter().all(|v| !v.contains('\0') && v.len() <= MAX_LEN));
}
