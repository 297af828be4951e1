//! What the instruction lens saw besides its counts: where the instructions went (each step's
//! functions by own instruction count, base and head) and what the lens cost (its sandbox time).
//! The agents send one profile per lens run (`sandboxes/<id>/lens/<stem>-<trial>.json`, a
//! [`Profile`]); [`collect`] sums them per step and side. Unreadable or foreign files are skipped:
//! a sandbox's word never fails the report.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use sandbench_proto::lens::{Function, Profile};
use serde::{Deserialize, Serialize};

use super::{MetricComparison, Report, SandboxRecord};
use crate::stats::Outcome;

/// Functions kept per step and side.
const KEPT: usize = 200;
/// Functions shown per changed step.
pub const SHOWN: usize = 5;
/// Largest profile file read.
const MAX_FILE_BYTES: u64 = 4 << 20;
/// Profiles read per sandbox.
const MAX_FILES: usize = 1000;

/// The lens runs of a run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LensSummary {
    /// Sandbox seconds every lens run took, both sides.
    pub seconds: f64,
    pub runs: u32,
    /// The state the runs saw, in words.
    pub state: String,
    pub steps: Vec<LensStep>,
}

/// One step's functions, per side: own instructions summed over its runs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LensStep {
    pub stem: String,
    pub base: SideFunctions,
    pub head: SideFunctions,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SideFunctions {
    pub runs: u32,
    pub functions: Vec<Function>,
}

impl SideFunctions {
    fn add(&mut self, functions: &[Function], runs: u32) {
        let mut by: HashMap<(String, String), u64> =
            self.functions.drain(..).map(|f| ((f.name, f.object), f.instructions)).collect();
        for f in functions {
            *by.entry((f.name.clone(), f.object.clone())).or_default() += f.instructions;
        }
        self.functions =
            by.into_iter().map(|((name, object), instructions)| Function { name, object, instructions }).collect();
        self.functions.sort_by(|a, b| b.instructions.cmp(&a.instructions).then_with(|| a.name.cmp(&b.name)));
        self.functions.truncate(KEPT);
        self.runs += runs;
    }

    /// A function's own instructions per run.
    fn mean(&self, name: &str, object: &str) -> f64 {
        let total = self.functions.iter().find(|f| f.name == name && f.object == object).map_or(0, |f| f.instructions);
        total as f64 / f64::from(self.runs.max(1))
    }
}

/// One function's shift between the sides, per run.
#[derive(Debug, Clone, PartialEq)]
pub struct Shift {
    pub name: String,
    pub object: String,
    pub base: f64,
    pub head: f64,
}

impl Shift {
    pub fn delta(&self) -> f64 {
        self.head - self.base
    }
}

impl LensStep {
    /// The `n` functions whose own instruction counts changed most, base → head (per run).
    pub fn shifts(&self, n: usize) -> Vec<Shift> {
        let mut names: Vec<(String, String)> = Vec::new();
        for f in self.base.functions.iter().chain(&self.head.functions) {
            let key = (f.name.clone(), f.object.clone());
            if !names.contains(&key) {
                names.push(key);
            }
        }
        let mut shifts: Vec<Shift> = names
            .into_iter()
            .map(|(name, object)| Shift {
                base: self.base.mean(&name, &object),
                head: self.head.mean(&name, &object),
                name,
                object,
            })
            .filter(|s| s.delta() != 0.0)
            .collect();
        shifts.sort_by(|a, b| b.delta().abs().total_cmp(&a.delta().abs()).then_with(|| a.name.cmp(&b.name)));
        shifts.truncate(n);
        shifts
    }
}

impl LensSummary {
    fn add(&mut self, side: &str, stem: &str, profile: &Profile) {
        self.seconds += profile.seconds;
        self.runs += 1;
        if self.state.is_empty() {
            self.state = profile.state.clone();
        }
        let at = match self.steps.iter().position(|s| s.stem == stem) {
            Some(at) => at,
            None => {
                self.steps.push(LensStep { stem: stem.into(), ..LensStep::default() });
                self.steps.len() - 1
            }
        };
        let step = &mut self.steps[at];
        let functions = if side == sandbench_proto::Side::Head.as_str() { &mut step.head } else { &mut step.base };
        functions.add(&profile.functions, 1);
    }

    /// Several runs' summaries as one (a run merged from shards).
    pub fn merge(parts: impl IntoIterator<Item = LensSummary>) -> Option<LensSummary> {
        let mut out: Option<LensSummary> = None;
        for part in parts {
            let o = out.get_or_insert_with(LensSummary::default);
            o.seconds += part.seconds;
            o.runs += part.runs;
            if o.state.is_empty() {
                o.state = part.state.clone();
            }
            for step in part.steps {
                match o.steps.iter_mut().find(|s| s.stem == step.stem) {
                    Some(s) => {
                        s.base.add(&step.base.functions, step.base.runs);
                        s.head.add(&step.head.functions, step.head.runs);
                    }
                    None => o.steps.push(step),
                }
            }
        }
        out
    }
}

/// The lens runs' profiles of the run's sandboxes, or None when no lens ran.
pub fn collect(dir: &Path, sandboxes: &[SandboxRecord]) -> Option<LensSummary> {
    let mut summary = LensSummary::default();
    for record in sandboxes {
        let folder = dir.join("sandboxes").join(&record.id).join("lens");
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        let mut files: BTreeMap<String, Profile> = BTreeMap::new();
        for entry in entries.flatten().take(MAX_FILES) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !entry.metadata().is_ok_and(|m| m.is_file() && m.len() <= MAX_FILE_BYTES) {
                continue;
            }
            let Some(profile) = std::fs::read(entry.path()).ok().and_then(|b| serde_json::from_slice(&b).ok()) else {
                continue;
            };
            files.insert(name, profile);
        }
        for (name, profile) in files {
            // `<stem>-<trial>.json`
            let Some(stem) = name.strip_suffix(".json").and_then(|n| n.rsplit_once('-')).map(|(s, _)| s) else {
                continue;
            };
            summary.add(&record.role, stem, &profile);
        }
    }
    (summary.runs > 0).then_some(summary)
}

/// The steps whose lens metrics changed (regressed or improved), in report order.
pub fn changed_steps<'a>(report: &'a Report, comparisons: &[MetricComparison]) -> Vec<&'a LensStep> {
    let Some(lens) = &report.lens else { return Vec::new() };
    let mut stems: Vec<&str> = Vec::new();
    for c in comparisons {
        let changed = matches!(c.comparison.outcome, Outcome::Regressed | Outcome::Improved);
        let (stem, facet) = sandbench_proto::metric::MetricKey::split(&c.key);
        if changed && facet.is_lens() && !stems.contains(&stem) {
            stems.push(stem);
        }
    }
    stems.iter().filter_map(|stem| lens.steps.iter().find(|s| s.stem == *stem)).collect()
}

/// "Instruction lens: N runs, X s of sandbox time (~$Y of the cost)", or None without lens runs.
pub fn cost_words(report: &Report) -> Option<String> {
    let lens = report.lens.as_ref()?;
    let share = report.lens_cost_usd().map_or(String::new(), |usd| format!(" (~${usd:.4} of the cost)"));
    Some(format!(
        "Instruction lens: {} run{}, {:.0} s of sandbox time{share}; each counted with a {}.",
        lens.runs,
        if lens.runs == 1 { "" } else { "s" },
        lens.seconds,
        lens.state
    ))
}

/// A count per run, in millions.
fn millions(x: f64) -> String {
    format!("{:.3} M", x / 1e6)
}

/// A function's name as shown: its object after it, when known.
fn shown_name(s: &Shift) -> String {
    let name: String = s.name.chars().take(200).collect();
    if s.object.is_empty() { name } else { format!("{name} ({})", s.object.chars().take(60).collect::<String>()) }
}

/// Rows of every changed step's top shifts: (step, function, base, head, change) as text.
pub fn rows(steps: &[&LensStep]) -> Vec<[String; 5]> {
    let mut out = Vec::new();
    for step in steps {
        for s in step.shifts(SHOWN) {
            let sign = if s.delta() > 0.0 { "+" } else { "−" };
            out.push([
                step.stem.clone(),
                shown_name(&s),
                millions(s.base),
                millions(s.head),
                format!("{sign}{}", millions(s.delta().abs())),
            ]);
        }
    }
    out
}

/// The markdown table's lines (within a collapsed block of the comment).
/// Names from the product's binaries are untrusted: escaped and clipped like any product text.
pub fn markdown_lines(steps: &[&LensStep]) -> Vec<String> {
    let mut lines = Vec::new();
    for [step, name, base, head, change] in rows(steps) {
        let mut line = String::new();
        let (step, name) = (super::format::escape_clipped(&step, 60), super::format::escape_clipped(&name, 120));
        let _ = writeln!(line, "| {step} | {name} | {base} | {head} | {change} |");
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str, n: u64) -> Function {
        Function { name: name.into(), object: "node".into(), instructions: n }
    }

    #[test]
    fn shifts_are_per_run_largest_first() {
        let mut summary = LensSummary::default();
        let p =
            |fs: Vec<Function>| Profile { functions: fs, seconds: 10.0, state: "cold".into(), ..Profile::default() };
        summary.add("base", "work", &p(vec![f("spin", 100), f("parse", 50), f("gc", 10)]));
        summary.add("base", "work", &p(vec![f("spin", 100), f("parse", 50), f("gc", 10)]));
        summary.add("head", "work", &p(vec![f("spin", 110), f("parse", 50), f("gc", 4)]));
        assert_eq!((summary.runs, summary.seconds), (3, 30.0));
        let step = &summary.steps[0];
        let shifts = step.shifts(5);
        assert_eq!(shifts.len(), 2, "unchanged functions are left out: {shifts:?}");
        assert_eq!((shifts[0].name.as_str(), shifts[0].base, shifts[0].head), ("spin", 100.0, 110.0));
        assert_eq!(shifts[1].delta(), -6.0);
        let rows = rows(&[step]);
        assert_eq!(rows[0][1], "spin (node)");
        assert!(rows[1][4].starts_with('−'), "{rows:?}");
        let merged = LensSummary::merge([summary.clone(), summary]).unwrap();
        assert_eq!((merged.runs, merged.steps.len(), merged.steps[0].base.runs), (6, 1, 4));
    }

    #[test]
    fn profiles_are_read_from_the_sandboxes_and_garbage_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let lens = dir.path().join("sandboxes/sb-1/lens");
        std::fs::create_dir_all(&lens).unwrap();
        let p = Profile { instructions: 5, seconds: 2.5, functions: vec![f("x", 5)], ..Profile::default() };
        std::fs::write(lens.join("cold-0.json"), serde_json::to_vec(&p).unwrap()).unwrap();
        std::fs::write(lens.join("script.t-1.json"), serde_json::to_vec(&p).unwrap()).unwrap();
        std::fs::write(lens.join("junk-0.json"), b"{not json").unwrap();
        let record: SandboxRecord = serde_json::from_value(serde_json::json!({
            "id": "sb-1", "role": "head", "created_at": "", "removed_at": null, "seconds": 1.0,
            "deleted": true, "estimated_usd": 0.0
        }))
        .unwrap();
        let s = collect(dir.path(), &[record]).unwrap();
        assert_eq!((s.runs, s.seconds), (2, 5.0));
        let stems: Vec<&str> = s.steps.iter().map(|s| s.stem.as_str()).collect();
        assert_eq!(stems, ["cold", "script.t"]);
        assert_eq!(s.steps[0].head.runs, 1);
        assert!(collect(dir.path(), &[]).is_none());
    }
}
