//! Plan types of the seeds' benchmark shapes (issue 33): a metric recorded as a distribution
//! of samples, a path's size read after a step, and a script's matrix of parameters.

use serde::{Deserialize, Serialize};

/// A metric recorded as a distribution of samples, and the facets its samples reduce to.
pub use crate::metric::Distribution;

/// The apparent size of a path, bytes, recorded as `metric`: regular files' `st_size` summed,
/// folders walked, symlinks not followed. `path` may start with `~/` (the user's home) and may
/// hold a glob (`~/store/session.sqlite*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeSpec {
    pub metric: String,
    pub path: String,
}

/// One parameter of a script's matrix: its name and values, each a key segment
/// (`[a-z0-9_-]+`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixParam {
    pub name: String,
    pub values: Vec<String>,
}

/// Every combination of `matrix`, row-major in declared order (the last parameter varies
/// fastest), each as (name, value) pairs; one empty combination when the matrix is empty.
pub fn combinations(matrix: &[MatrixParam]) -> Vec<Vec<(String, String)>> {
    let mut all: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for param in matrix {
        all = all
            .into_iter()
            .flat_map(|prefix| {
                param.values.iter().map(move |v| {
                    let mut next = prefix.clone();
                    next.push((param.name.clone(), v.clone()));
                    next
                })
            })
            .collect();
    }
    all
}

/// The key a matrix child's metric `key` is recorded under: `<script>.<v1>.<v2>….<key>`, or
/// `key` itself outside a matrix.
pub fn child_key(script: &str, combination: &[(String, String)], key: &str) -> String {
    if combination.is_empty() {
        return key.to_string();
    }
    let values: Vec<&str> = combination.iter().map(|(_, v)| v.as_str()).collect();
    format!("{script}.{}.{key}", values.join("."))
}

/// The stem of a matrix child's companions (`script.<script>.<v1>.<v2>…`, then `.maxrss`, …).
pub fn child_stem(script: &str, combination: &[(String, String)]) -> String {
    let mut stem = format!("script.{script}");
    for (_, v) in combination {
        stem.push('.');
        stem.push_str(v);
    }
    stem
}

/// Whether `value` can be a key segment of a matrix: `[a-z0-9_-]+`.
pub fn is_segment(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Samples a script may send for one distribution key in a trial, by default.
pub const DEFAULT_MAX_SAMPLES: u32 = 100_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn param(name: &str, values: &[&str]) -> MatrixParam {
        MatrixParam { name: name.into(), values: values.iter().map(|v| v.to_string()).collect() }
    }

    #[test]
    fn combinations_are_row_major_in_declared_order() {
        let matrix = [param("backend", &["memory", "sqlite"]), param("rate", &["low", "high"])];
        let keys: Vec<String> = combinations(&matrix).iter().map(|c| child_key("store", c, "ms")).collect();
        assert_eq!(
            keys,
            ["store.memory.low.ms", "store.memory.high.ms", "store.sqlite.low.ms", "store.sqlite.high.ms"]
        );
        assert_eq!(child_stem("store", &combinations(&matrix)[1]), "script.store.memory.high");
        assert_eq!(combinations(&[]), vec![Vec::new()]);
        assert_eq!(child_key("store", &[], "ms"), "ms");
        assert_eq!(child_stem("store", &[]), "script.store");
    }

    #[test]
    fn segments_are_lowercase_digits_dash_and_underscore() {
        assert!(is_segment("node-sqlite_2"));
        for bad in ["", "Memory", "a.b", "a b", "é"] {
            assert!(!is_segment(bad), "{bad:?}");
        }
    }
}
