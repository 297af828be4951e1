//! Which definition a metric key takes: a spec's `[metrics.KEY]` blocks, exact or families
//! (`[metrics."store.*.replay"]`, `*` one whole dot-separated segment, `{1}`, `{2}`, … in its
//! strings the matched segments), the built-in definitions, and what a facet inherits from its
//! stem (`latency.p95` is "Latency (p95)" with latency's unit, floors and direction).
//!
//! Precedence, as the contract of issue 33 sets it: the block with the fewest `*` (an exact key
//! has none) over the built-in or inherited definition, which fills what the block leaves out.
//! Patterns do not reach the reference's built-in keys (`cold`, `install`, …): only an exact block
//! changes those. Two patterns with as many `*` that can match one key are refused by `check`.
//! Pure: `check` makes the blocks once ([`Definitions`]), and a run resolves with them the keys
//! only a script's output names.

use sandbench_proto::metric::{Facet, MetricKey};
use serde::Serialize;

use super::metric_defs::{MetricDef, built_in};
use crate::stats::Better;

/// One `[metrics.KEY]` block, its fields checked, the ones it leaves out None.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Block {
    /// As written: a key, or a pattern.
    pub key: String,
    /// Spec line of the block, and of its `unit` and `scale` when given (for errors).
    pub line: usize,
    pub unit_line: Option<usize>,
    pub scale_line: Option<usize>,
    pub title: Option<String>,
    pub unit: Option<String>,
    pub scale: Option<f64>,
    pub absolute: Option<f64>,
    pub relative: Option<f64>,
    pub group: Option<String>,
    pub better: Option<Better>,
    /// `ignore = true`: the keys it matches are recorded, never judged.
    pub ignore: bool,
    /// `gate = true | false`: the keys it matches do or do not decide an adaptive run's pairs.
    pub gate: Option<bool>,
}

/// A spec's blocks, for resolving keys at `check` and at run time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Definitions {
    pub blocks: Vec<Block>,
}

/// Why a pattern is not one: `*` must be a whole, non-empty segment.
pub fn pattern_error(key: &str) -> Option<String> {
    let bad = key.split('.').any(|s| s.is_empty() || (s.contains('*') && s != "*"));
    bad.then(|| {
        format!("{key:?}: each `*` stands for one whole segment between dots (e.g. \"store.*.replay\"), and no segment is empty")
    })
}

impl Block {
    /// A block of nothing but its key (the pattern of a plan's distribution).
    pub fn pattern(key: &str) -> Block {
        Block {
            key: key.to_string(),
            line: 0,
            unit_line: None,
            scale_line: None,
            title: None,
            unit: None,
            scale: None,
            absolute: None,
            relative: None,
            group: None,
            better: None,
            ignore: false,
            gate: None,
        }
    }

    /// How many `*` segments it has: 0 for an exact key.
    pub fn stars(&self) -> usize {
        self.key.split('.').filter(|s| *s == "*").count()
    }

    pub fn is_pattern(&self) -> bool {
        self.stars() > 0
    }

    /// The segments of `key` its `*` matched, in order; None when it does not match.
    pub fn captures<'k>(&self, key: &'k str) -> Option<Vec<&'k str>> {
        let (mine, theirs): (Vec<&str>, Vec<&str>) = (self.key.split('.').collect(), key.split('.').collect());
        if mine.len() != theirs.len() {
            return None;
        }
        let mut caught = Vec::new();
        for (m, t) in mine.iter().zip(&theirs) {
            match *m {
                "*" if !t.is_empty() => caught.push(*t),
                _ if m == t => {}
                _ => return None,
            }
        }
        Some(caught)
    }

    /// Whether one key could match both (as many segments, each `*` on one side or equal).
    pub fn overlaps(&self, other: &Block) -> bool {
        let (a, b): (Vec<&str>, Vec<&str>) = (self.key.split('.').collect(), other.key.split('.').collect());
        a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| *x == "*" || *y == "*" || x == y)
    }

    /// The highest `{n}` its strings use, to check against its `*` count.
    pub fn highest_placeholder(&self) -> usize {
        [&self.title, &self.unit, &self.group].into_iter().flatten().map(|t| highest(t)).max().unwrap_or(0)
    }

    /// The definition of `key` (matched as `caught`): the block's fields, the rest from `base`.
    pub fn apply(&self, key: &str, caught: &[&str], base: Option<&MetricDef>) -> Result<MetricDef, String> {
        let text = |own: &Option<String>, from: Option<String>| own.as_ref().map(|t| fill(t, caught)).or(from);
        let (Some(title), Some(unit)) =
            (text(&self.title, base.map(|b| b.title.clone())), text(&self.unit, base.map(|b| b.unit.clone())))
        else {
            return Err("expected a title and a unit".to_string());
        };
        Ok(MetricDef {
            key: key.to_string(),
            title,
            unit,
            scale: self.scale.or(base.map(|b| b.scale)).unwrap_or(1.0),
            absolute: self.absolute.or(base.map(|b| b.absolute)).unwrap_or(0.0),
            relative: self.relative.or(base.map(|b| b.relative)).unwrap_or(0.2),
            group: text(&self.group, base.map(|b| b.group.clone())).unwrap_or_else(|| "Metrics".into()),
            better: self.better.or(base.map(|b| b.better)).unwrap_or_default(),
        })
    }
}

/// `text` with `{n}` replaced by the n-th caught segment (1-based); other braces are left.
pub fn fill(text: &str, caught: &[&str]) -> String {
    let mut out = text.to_string();
    for (i, segment) in caught.iter().enumerate().rev() {
        out = out.replace(&format!("{{{}}}", i + 1), segment);
    }
    out
}

/// The highest `{n}` in `text` (0 when none).
fn highest(text: &str) -> usize {
    text.split('{')
        .skip(1)
        .filter_map(|rest| rest.split_once('}').and_then(|(n, _)| n.parse::<usize>().ok()))
        .max()
        .unwrap_or(0)
}

impl Definitions {
    /// The block that defines `key`: the exact one, else the matching pattern with the fewest
    /// `*` (ties are refused at `check`: the first written wins), with what its `*` matched.
    pub fn block_of<'k>(&self, key: &'k str) -> Option<(&Block, Vec<&'k str>)> {
        self.blocks.iter().filter_map(|b| b.captures(key).map(|c| (b, c))).min_by_key(|(b, _)| b.stars())
    }

    /// Whether the block that defines `key` says `ignore = true`, and that block's key.
    pub fn ignored(&self, key: &str) -> Option<&str> {
        match self.block_of(key) {
            Some((b, _)) => b.ignore.then_some(b.key.as_str()),
            // A facet with no block of its own (a distribution's `.p99`, a companion) goes
            // with its stem.
            None => {
                let stem = MetricKey::stem_of(key);
                let (b, _) = self.block_of(stem).filter(|_| stem != key)?;
                b.ignore.then_some(b.key.as_str())
            }
        }
    }

    /// What the block that defines `key` says of gating (`gate = true | false`), if anything.
    pub fn gate_of(&self, key: &str) -> Option<bool> {
        self.block_of(key).and_then(|(b, _)| b.gate)
    }

    /// The definition of `key`: its block over its base (built-in, peak RSS, or inherited from
    /// its stem, `known` first), or the base alone. Err: a block matched but cannot define it.
    pub fn resolve(&self, key: &str, known: &[MetricDef]) -> Result<Option<MetricDef>, String> {
        let base = self.base(key, known);
        match self.block_of(key) {
            // A pattern does not reach a reference key.
            Some((block, _)) if block.is_pattern() && built_in(key).is_some() => Ok(base),
            Some((block, caught)) => block.apply(key, &caught, base.as_ref()).map(Some),
            None => Ok(base),
        }
    }

    /// What `key` is defined as before any block of its own: built in, a peak RSS, or its
    /// stem's definition for a distribution's facet or a CPU companion.
    fn base(&self, key: &str, known: &[MetricDef]) -> Option<MetricDef> {
        if let Some(def) = built_in(key).or_else(|| peak_rss(key)) {
            return Some(def);
        }
        let (stem, facet) = MetricKey::split(key);
        let label = match facet {
            Facet::Percentile(_) | Facet::Max => facet.suffix().trim_start_matches('.').to_string(),
            Facet::Cpu => "CPU".to_string(),
            _ => return None,
        };
        let stem_def = match known.iter().find(|d| d.key == stem) {
            Some(def) => Some(def.clone()),
            None => self.resolve(stem, known).ok().flatten(),
        }?;
        // CPU time is better lower, whichever way its step's figure is.
        let better = if facet == Facet::Cpu { Better::Lower } else { stem_def.better };
        Some(MetricDef { key: key.to_string(), title: format!("{} ({label})", stem_def.title), better, ..stem_def })
    }
}

/// The absolute floor of a peak RSS: allocator and GC timing move a heap's high-water mark by a
/// few MB between identical runs.
pub const PEAK_RSS_ABSOLUTE: f64 = 4.0 * 1_048_576.0;
/// The relative floor of a peak RSS.
pub const PEAK_RSS_RELATIVE: f64 = 0.10;
/// The report group of the judged peak RSS of scenarios and scripts.
pub const PEAK_RSS_GROUP: &str = "Peak memory";

/// The built-in definition of a scenario's or a script's child-tree peak RSS
/// (`scenario.<name>.maxrss`, `script.<name>.maxrss`, `script.<name>.<v1>.<v2>.maxrss`).
pub fn peak_rss(key: &str) -> Option<MetricDef> {
    let stem = MetricKey::stem_if(key, Facet::MaxRss)?;
    let (what, name) = stem.split_once('.').filter(|(w, n)| matches!(*w, "script" | "scenario") && !n.is_empty())?;
    Some(MetricDef {
        key: key.to_string(),
        title: format!("Peak RSS, {what} {name}"),
        unit: "MB".into(),
        scale: 1e-6,
        absolute: PEAK_RSS_ABSOLUTE,
        relative: PEAK_RSS_RELATIVE,
        group: PEAK_RSS_GROUP.into(),
        better: Better::Lower,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(key: &str, title: Option<&str>, unit: Option<&str>) -> Block {
        Block { title: title.map(String::from), unit: unit.map(String::from), ..Block::pattern(key) }
    }

    #[test]
    fn a_star_matches_one_whole_segment_and_fills_the_placeholders() {
        let b = block("store.*.*.replay", Some("Replay after reopen, {2} on {1}"), Some("ms"));
        assert_eq!(b.stars(), 2);
        assert_eq!(b.captures("store.sqlite.high.replay"), Some(vec!["sqlite", "high"]));
        assert_eq!(b.captures("store.sqlite.replay"), None);
        assert_eq!(b.captures("store.sqlite.high.low.replay"), None);
        assert_eq!(b.captures("store..high.replay"), None);
        assert_eq!(b.captures("stores.sqlite.high.replay"), None);
        let def = b.apply("store.sqlite.high.replay", &["sqlite", "high"], None).unwrap();
        assert_eq!((def.title.as_str(), def.unit.as_str()), ("Replay after reopen, high on sqlite", "ms"));
        assert_eq!((def.scale, def.relative, def.better), (1.0, 0.2, Better::Lower));
        assert_eq!(b.highest_placeholder(), 2);
        assert_eq!(fill("{1}{{2}}{3}", &["a", "b"]), "a{b}{3}");
        assert!(block("x", None, None).apply("x", &[], None).unwrap_err().contains("title and a unit"));
        for bad in ["store.*x.replay", "store..replay", "*.", "a.b*"] {
            assert!(pattern_error(bad).is_some(), "{bad}");
        }
        assert!(pattern_error("store.*.replay").is_none() && pattern_error("cold").is_none());
    }

    #[test]
    fn the_exact_key_then_the_fewest_stars_win_and_patterns_do_not_reach_reference_keys() {
        let defs = Definitions {
            blocks: vec![
                block("store.*.*", Some("Any {1} {2}"), Some("ms")),
                block("store.*.replay", Some("Replay {1}"), Some("ms")),
                block("store.sqlite.replay", Some("SQLite replay"), Some("ms")),
                block("*", Some("Anything"), Some("s")),
            ],
        };
        let title = |key: &str| defs.resolve(key, &[]).unwrap().map(|d| d.title);
        assert_eq!(title("store.sqlite.replay").as_deref(), Some("SQLite replay"));
        assert_eq!(title("store.jsonl.replay").as_deref(), Some("Replay jsonl"));
        assert_eq!(title("store.jsonl.size").as_deref(), Some("Any jsonl size"));
        assert_eq!(title("cold").as_deref(), Some("Cold startup"));
        assert_eq!(title("parse").as_deref(), Some("Anything"));
        assert_eq!(title("other.key"), None);
        assert!(defs.blocks[0].overlaps(&defs.blocks[1]) && !defs.blocks[1].overlaps(&defs.blocks[3]));
    }

    #[test]
    fn facets_inherit_their_stems_definition_unless_a_block_of_their_own_says() {
        let latency = MetricDef {
            key: "rt".into(),
            title: "Request".into(),
            unit: "ms".into(),
            scale: 1000.0,
            absolute: 0.001,
            relative: 0.1,
            group: "Service".into(),
            better: Better::Lower,
        };
        let mut defs = Definitions::default();
        let p95 = defs.resolve("rt.p95", std::slice::from_ref(&latency)).unwrap().unwrap();
        assert_eq!(p95, MetricDef { key: "rt.p95".into(), title: "Request (p95)".into(), ..latency.clone() });
        let max = defs.resolve("rt.max", std::slice::from_ref(&latency)).unwrap().unwrap();
        assert_eq!(max.title, "Request (max)");
        // A family's facets inherit from the family.
        let mut family = block("ops.*", Some("Ops {1}"), Some("ops/s"));
        family.better = Some(Better::Higher);
        defs.blocks.push(family);
        let p50 = defs.resolve("ops.write.p50", &[]).unwrap().unwrap();
        assert_eq!((p50.title.as_str(), p50.unit.as_str(), p50.better), ("Ops write (p50)", "ops/s", Better::Higher));
        // A block of the facet's own overrides what it names, and keeps the rest.
        let mut own = block("ops.*.p99", None, None);
        own.relative = Some(0.3);
        defs.blocks.push(own);
        let p99 = defs.resolve("ops.write.p99", &[]).unwrap().unwrap();
        assert_eq!((p99.title.as_str(), p99.relative, p99.better), ("Ops write (p99)", 0.3, Better::Higher));
        let mut ops = latency.clone();
        ops.better = Better::Higher;
        let cpu = defs.resolve("rt.cpu", &[ops]).unwrap().unwrap();
        assert_eq!((cpu.title.as_str(), cpu.better), ("Request (CPU)", Better::Lower));
        // Companions other than CPU are not inherited: they are in another unit.
        assert_eq!(defs.resolve("rt.minflt", std::slice::from_ref(&latency)).unwrap(), None);
    }

    #[test]
    fn peak_rss_of_scenarios_and_scripts_is_built_in() {
        let def = peak_rss("script.store.sqlite.high.maxrss").unwrap();
        assert_eq!(
            (def.title.as_str(), def.unit.as_str(), def.scale),
            ("Peak RSS, script store.sqlite.high", "MB", 1e-6)
        );
        assert_eq!(peak_rss("scenario.repl.maxrss").unwrap().title, "Peak RSS, scenario repl");
        assert!(peak_rss("cold.maxrss").is_none() && peak_rss("script.maxrss").is_none());
        assert!(peak_rss("script.x.cpu").is_none());
        // A spec may tune it by a pattern.
        let mut tuned = block("script.*.maxrss", None, None);
        tuned.relative = Some(0.25);
        let defs = Definitions { blocks: vec![tuned] };
        let def = defs.resolve("script.bench.maxrss", &[]).unwrap().unwrap();
        assert_eq!((def.title.as_str(), def.relative), ("Peak RSS, script bench", 0.25));
    }
}
