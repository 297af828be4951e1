//! The instruction lens: a step run once more per trial under valgrind's callgrind, untimed, whose
//! counts do not depend on the machine's speed or load. Its metrics are facets of the step's
//! metric ([`crate::metric::Facet::LENS`]: `<key>.instructions`, `<key>.cycles`), and its
//! per-function profile a file of the sandbox (`lens/<key>-<trial>.json`, a [`Profile`]).

use serde::{Deserialize, Serialize};

/// Cycle weights of a last-level hit and of a RAM access (an L1 hit costs 1).
pub const LL_HIT_CYCLES: u64 = 5;
pub const RAM_CYCLES: u64 = 35;

/// The name under which JIT-compiled code (no symbol) is grouped in a profile.
pub const JIT: &str = "(JIT code, unnamed)";

/// Where the profile of `stem`'s lens run in `trial` is kept, relative to the sandbox's files.
pub fn profile_path(stem: &str, trial: u32) -> String {
    format!("lens/{stem}-{trial}.json")
}

/// How the agent runs the lens, from the spec's `[lens]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LensPlan {
    /// The seed of V8's `--hash-seed` and `--random-seed`.
    pub seed: u32,
    /// Seconds one lens run may take (valgrind is ~150× slower than native).
    pub timeout_s: f64,
}

impl Default for LensPlan {
    fn default() -> LensPlan {
        LensPlan { seed: 1, timeout_s: 900.0 }
    }
}

impl LensPlan {
    pub fn is_default(&self) -> bool {
        *self == LensPlan::default()
    }
}

/// What one lens run counted, and where.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Profile {
    pub instructions: u64,
    pub cycles: u64,
    /// Processes of the tree callgrind followed.
    pub processes: u32,
    /// Functions by own (self) instruction count, largest first, bounded.
    pub functions: Vec<Function>,
    /// The state the run saw (caches, user), in words.
    pub state: String,
    /// Sandbox seconds the run took under valgrind (the lens's cost).
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Function {
    pub name: String,
    /// The object it is in (`node`, `libc.so.6`, …), when known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub object: String,
    /// Own instructions.
    pub instructions: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_into_stem_and_suffix() {
        use crate::metric::{Facet, MetricKey};
        fn lens(key: &str) -> Option<(&str, Facet)> {
            Some(MetricKey::split(key)).filter(|(_, f)| f.is_lens())
        }
        assert_eq!(lens("work.instructions"), Some(("work", Facet::Instructions)));
        assert_eq!(lens("script.x.cycles"), Some(("script.x", Facet::Cycles)));
        assert_eq!(lens(".instructions"), None);
        assert_eq!(lens("work"), None);
        assert!(MetricKey::facet_of("cold.cycles").is_lens() && !MetricKey::facet_of("cold.cpu").is_lens());
        assert_eq!(profile_path("work", 2), "lens/work-2.json");
    }
}
