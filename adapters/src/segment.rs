//! Benchmark names made safe as key segments (`bench.<step>.<segment>`): readable,
//! deterministic, and unique in a file.
//!
//! The rule, in order:
//! 1. **Readable form**: a lowercase letter or digit followed by an uppercase letter gets a `_`
//!    between them (`smallArray` → `small_array`); ASCII letters are lowercased; digits kept;
//!    every other character (spaces, `/`, `.`, `[`, `-`, `>`, any non-ASCII) is a separator; a run
//!    of separators and `_` becomes one `_`, and none is kept at either end
//!    (`sort.bench.js > sort > small array` → `sort_bench_js_sort_small_array`,
//!    `test_sort[100]` → `test_sort_100`, `BM_StringCopy` → `bm_string_copy`).
//! 2. It is cut to [`MAX_SEGMENT_CHARS`] (then no `_` is kept at its end); an empty result is
//!    `bench`.
//! 3. A result that a metric key would read as a facet of its stem (`max`, `cpu`, `p99`, any `p`
//!    and digits, `instructions`, …: [`FACET_WORDS`]) gets a `_` appended (`max` → `max_`).
//! 4. **Collisions**: when distinct names of one file have the same result, each of them gets
//!    `_` and the 8 hex digits of the 64-bit FNV-1a hash of its name as written (its low 32 bits)
//!    appended (`sort a` and `Sort-A` → `sort_a_1a2b3c4d`, `sort_a_5e6f7a8b`). Names that do not
//!    collide keep their readable form, so one more benchmark elsewhere in a file changes no
//!    other's key. Should the results still collide (or one name appear twice), the file is
//!    refused, naming both.
//!
//! The charset is `[a-z0-9_]`, the one spec metric keys use; the name as written stays the
//! metric's title.

use std::collections::HashMap;

/// Longest readable form kept (a collision's hash adds 9 characters).
pub const MAX_SEGMENT_CHARS: usize = 64;

/// Longest unit kept from a framework's own (`items/op`, a BMF measure's unit).
pub const MAX_UNIT_CHARS: usize = 32;

/// Last segments a metric key reads as a facet of its stem (`<stem>.max`, `<stem>.cpu`, …):
/// a benchmark so named gets a `_` appended. Any `p` followed by digits is one too.
pub const FACET_WORDS: [&str; 12] =
    ["cpu", "maxrss", "minflt", "majflt", "vcsw", "ivcsw", "instructions", "cycles", "lens_s", "max", "min", "wall"];

/// The readable form of `name` (steps 1 to 3 of the rule).
pub fn readable(name: &str) -> String {
    let mut out = String::with_capacity(name.len().min(MAX_SEGMENT_CHARS));
    let mut previous_lower = false;
    let mut pending_separator = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            let boundary = c.is_ascii_uppercase() && previous_lower;
            if (pending_separator || boundary) && !out.is_empty() {
                out.push('_');
            }
            pending_separator = false;
            out.push(c.to_ascii_lowercase());
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        } else {
            pending_separator = true;
            previous_lower = false;
        }
        if out.len() >= MAX_SEGMENT_CHARS {
            break;
        }
    }
    out.truncate(MAX_SEGMENT_CHARS);
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("bench");
    }
    if is_facet_word(&out) {
        out.push('_');
    }
    out
}

/// Whether a metric key ending in `.<word>` would be read as a facet of its stem.
fn is_facet_word(word: &str) -> bool {
    let percentile = word.len() > 1 && word.starts_with('p') && word[1..].bytes().all(|b| b.is_ascii_digit());
    percentile || FACET_WORDS.contains(&word)
}

/// The 64-bit FNV-1a hash of `bytes` (offset basis and prime of the FNV specification).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The segments of a file's benchmark names, in order (step 4 of the rule).
pub fn assign(names: &[&str]) -> Result<Vec<String>, String> {
    let readable: Vec<String> = names.iter().map(|n| readable(n)).collect();
    let mut first_of: HashMap<&str, &str> = HashMap::new();
    let mut colliding = vec![false; names.len()];
    for (i, (name, form)) in names.iter().zip(&readable).enumerate() {
        match first_of.get(form.as_str()) {
            Some(other) if other == name => return Err(format!("two benchmarks are named {}", quoted(name))),
            Some(_) => colliding[i] = true,
            None => {
                first_of.insert(form, name);
            }
        }
    }
    for (i, form) in readable.iter().enumerate() {
        if !colliding[i] && readable.iter().zip(&colliding).any(|(f, c)| *c && f == form) {
            colliding[i] = true;
        }
    }
    let segments: Vec<String> = readable
        .iter()
        .zip(names)
        .zip(&colliding)
        .map(
            |((form, name), collides)| {
                if *collides { format!("{form}_{:08x}", fnv1a(name.as_bytes()) as u32) } else { form.clone() }
            },
        )
        .collect();
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for (segment, name) in segments.iter().zip(names) {
        if let Some(other) = seen.insert(segment, name) {
            return Err(format!("benchmarks {} and {} have the same key {segment}", quoted(other), quoted(name)));
        }
    }
    Ok(segments)
}

/// A measure's segment from its name or unit (`allocs/op` → `allocs_per_op`, `MB/s` → `mb_per_s`).
pub fn of_unit(unit: &str) -> String {
    readable(&unit.replace('/', " per "))
}

/// A benchmark's name as a title: control characters made spaces, cut to
/// [`crate::MAX_NAME_CHARS`] characters (then ending in `…`).
pub fn title(name: &str) -> String {
    cut(name, crate::MAX_NAME_CHARS)
}

/// A framework's unit, kept printable and short.
pub fn unit(unit: &str) -> String {
    cut(unit.trim(), MAX_UNIT_CHARS)
}

fn cut(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if text.chars().nth(max).is_some() {
        out.pop();
        out.push('…');
    }
    out
}

/// A name in an error message: quoted, escaped, short.
pub(crate) fn quoted(name: &str) -> String {
    format!("{:?}", cut(name, 80))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_words_joined_by_underscores() {
        for (name, segment) in [
            ("sort.bench.js > sort > small array", "sort_bench_js_sort_small_array"),
            ("test_sorting.py::test_sort_sizes[100]", "test_sorting_py_test_sort_sizes_100"),
            ("BM_StringCopy", "bm_string_copy"),
            ("Sizes/n=1000", "sizes_n_1000"),
            ("smallArray", "small_array"),
            ("HTTPServer", "httpserver"),
            ("v8Sort", "v8_sort"),
            ("__x__", "x"),
            ("→ ✓", "bench"),
            ("", "bench"),
            ("café crème", "caf_cr_me"),
        ] {
            assert_eq!(readable(name), segment, "{name:?}");
        }
    }

    #[test]
    fn facet_words_get_an_underscore() {
        for (name, segment) in
            [("max", "max_"), ("P99", "p99_"), ("p5", "p5_"), ("CPU", "cpu_"), ("p", "p"), ("maximum", "maximum")]
        {
            assert_eq!(readable(name), segment, "{name:?}");
        }
    }

    #[test]
    fn long_names_are_cut_without_a_trailing_underscore() {
        let long = format!("{} tail", "a".repeat(63));
        assert_eq!(readable(&long), "a".repeat(63));
        assert_eq!(readable(&"x".repeat(10_000)).len(), MAX_SEGMENT_CHARS);
    }

    #[test]
    fn only_colliding_names_get_a_hash_and_it_is_stable() {
        let got = assign(&["sort a", "Sort-A", "join"]).unwrap();
        assert_eq!(got[2], "join");
        assert!(got[0].starts_with("sort_a_") && got[1].starts_with("sort_a_") && got[0] != got[1], "{got:?}");
        assert_eq!(got[0].len(), "sort_a_".len() + 8);
        // The same name gets the same segment whatever else the file holds.
        let again = assign(&["join", "Sort-A", "other", "sort a"]).unwrap();
        assert_eq!((again[1].as_str(), again[3].as_str()), (got[1].as_str(), got[0].as_str()));
        // FNV-1a 64 of "a" (the specification's test vector af63dc4c8601ec8c), low 32 bits.
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn a_name_twice_is_refused() {
        assert_eq!(assign(&["x", "y", "x"]).unwrap_err(), "two benchmarks are named \"x\"");
    }

    #[test]
    fn units_become_segments_and_stay_short() {
        assert_eq!(of_unit("allocs/op"), "allocs_per_op");
        assert_eq!(of_unit("MB/s"), "mb_per_s");
        assert_eq!(unit(&"u".repeat(100)).chars().count(), MAX_UNIT_CHARS);
        assert_eq!(title("a\u{1b}[31mb"), "a [31mb");
        assert!(title(&"n".repeat(5000)).ends_with('…'));
    }
}
