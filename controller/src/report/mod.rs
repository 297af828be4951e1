//! Reports, pure: the run's data (`report.json`) and what is rendered from it — `report.md`, the
//! pull-request comment in the reference harness's layout, and `report.html`, one page with the
//! distributions drawn. Renderers take the report and return a `String`; nothing here does I/O
//! (but [`noise::NoiseProfile::load`]).
//!
//! One decision per metric, under the report's [`Rule`]: the paired rule ([`decide`], the
//! default) or the reference harness's rule, its arithmetic kept exactly. [`Report::analyze`] makes it and
//! every rendering shows that one. A run merged from shards is analysed blocked by shard
//! (`blocks`): a machine's constant speed factor widens no spread.

pub mod benches;
mod blocks;
pub mod comment;
#[cfg(test)]
mod comment_tests;
pub mod companions;
pub mod conditions;
pub mod decide;
pub mod distributions;
pub mod format;
#[cfg(test)]
mod fuzz;
pub mod html;
pub mod instructions;
pub mod lens;
pub mod lens_runs;
pub mod markdown;
pub mod noise;
#[cfg(test)]
mod noise_tests;
pub mod record;
pub mod runs;
pub mod summary;
#[cfg(test)]
mod tests;
pub mod trend;
pub mod warnings;

use std::collections::BTreeMap;

use sandbench_proto::metric::{Facet, MetricKey};
use serde::{Deserialize, Serialize};

pub use crate::cost::SandboxRecord;
use crate::spec::MetricDef;
use crate::stats::sequential::{self, Design, Next};
use crate::stats::{self, Comparison, Floors, Paired};
pub use noise::NoiseProfile;

pub use crate::source::Revision;
pub use crate::spec::Rule;

/// An adaptive run's plan of looks and the look this report is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sequential {
    pub design: Design,
    /// The look (1-based) this report's samples are analysed as.
    pub look: u32,
    /// Metrics whose verdicts decide whether more pairs are run.
    pub gate: Vec<String>,
    /// Why the run stopped adding pairs, as the report says it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ended: String,
}

impl Sequential {
    /// The plan of an adaptive run at its first look, when the spec lets pairs grow
    /// (`trials.max_pairs` above the trials of the phases that hold a gating metric,
    /// [`crate::spec::Plan::gated_trials`]); alpha 5 % in all.
    pub fn for_plan(plan: &crate::spec::Plan) -> Option<Sequential> {
        let initial = plan.gated_trials(&plan.trials.gate);
        (plan.trials.max_pairs > initial).then(|| Sequential {
            design: Design { alpha: 0.05, initial, max_pairs: plan.trials.max_pairs },
            look: 1,
            gate: plan.trials.gate.clone(),
            ended: String::new(),
        })
    }
}

/// The CI run attempt (`GITHUB_RUN_ATTEMPT`) when set to a positive number, else 1.
pub fn ci_attempt() -> u32 {
    attempt_from(std::env::var("GITHUB_RUN_ATTEMPT").ok().as_deref())
}

fn attempt_from(value: Option<&str>) -> u32 {
    value.and_then(|v| v.trim().parse::<u32>().ok()).filter(|n| *n >= 1).unwrap_or(1)
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn first_attempt() -> u32 {
    1
}

fn is_first_attempt(n: &u32) -> bool {
    *n == 1
}

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    Completed,
    Partial,
    Failed,
    Canceled,
    /// Its controller died before the run ended (`sandbench run --resume DIR` continues it).
    Abandoned,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Partial => "partial",
            Status::Failed => "failed",
            Status::Canceled => "canceled",
            Status::Abandoned => "abandoned",
        }
    }
}

/// One sample: a value, or why there is none. A metric measured several times a trial has a
/// sample per run, numbered from 0 (see [`runs`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub trial: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sample: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub metrics: BTreeMap<String, Vec<Sample>>,
    /// The unit each key a bench step's run named was observed in (`s`, `ops/s`, …): its
    /// definition's unit and direction come from it ([`benches`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: BTreeMap<String, String>,
    /// Kernel, CPU model, OS and tool versions of the sandbox.
    pub facts: BTreeMap<String, String>,
    /// The CPUs each sandbox of this side was given, as the engine holds them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<SandboxCpus>,
}

/// The CPUs one sandbox was given, as provisioned: its CPU quota (nano-cpus) and the CPUs it
/// was pinned to (cpuset), which may hold fewer CPUs than the quota when pairs share a machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxCpus {
    pub sandbox: String,
    /// The quota in CPUs (nano-cpus / 10⁹); 0 when unlimited.
    pub quota: f64,
    /// The CPUs it may run on (Docker cpuset syntax, e.g. `0-1`); None when not pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset: Option<String>,
}

impl SandboxCpus {
    /// From the engine's settings of the container (`NanoCpus`, `CpusetCpus`).
    pub fn provisioned(sandbox: &str, nano_cpus: i64, cpuset: &str) -> SandboxCpus {
        SandboxCpus {
            sandbox: sandbox.to_string(),
            quota: nano_cpus.max(0) as f64 / 1e9,
            cpuset: Some(cpuset.trim()).filter(|c| !c.is_empty()).map(str::to_string),
        }
    }

    /// How many CPUs the cpuset holds (`0-1,4` holds 3); None when not pinned or unreadable.
    pub fn pinned_count(&self) -> Option<usize> {
        let mut count = 0;
        for part in self.cpuset.as_deref()?.split(',') {
            count += match part.trim().split_once('-') {
                Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse::<usize>().ok()?)? + 1,
                None => part.trim().parse::<usize>().map(|_| 1).ok()?,
            };
        }
        Some(count)
    }

    /// `base: 2 vCPU on CPUs 0-1`, saying when the quota is more than the CPUs pinned.
    pub fn describe(&self) -> String {
        let quota = if self.quota > 0.0 { format!("{} vCPU", self.quota) } else { "no CPU quota".to_string() };
        let cpus = |set: &str| format!("CPU{} {set}", if set.contains([',', '-']) { "s" } else { "" });
        match (&self.cpuset, self.pinned_count()) {
            (Some(set), Some(n)) if self.quota > n as f64 => {
                format!("{}: {quota} quota, but pinned to {}: at most {n} CPU{}", self.sandbox, cpus(set), plural(n))
            }
            (Some(set), _) => format!("{}: {quota} on {}", self.sandbox, cpus(set)),
            (None, _) => format!("{}: {quota}, not pinned", self.sandbox),
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    pub cpus: f64,
    pub memory_bytes: u64,
    pub disk_gb: f64,
    /// Whether the engine bounded each sandbox's disk to `disk_gb`; absent when no sandbox was
    /// created (and in reports written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_enforced: Option<bool>,
}

/// Everything a run found; every rendering is derived from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub run_id: String,
    pub spec_name: String,
    pub status: Status,
    pub base: Revision,
    pub head: Revision,
    pub image: String,
    pub resources: Resources,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub failure_limit: u32,
    pub budget_usd: Option<f64>,
    /// Definitions of the metrics, in report order.
    pub metrics: Vec<MetricDef>,
    /// Samples each side should have per metric.
    pub expected: BTreeMap<String, u32>,
    pub base_side: Side,
    pub head_side: Side,
    pub sandboxes: Vec<SandboxRecord>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// The deciding rule; absent in the JSON for the reference rule.
    #[serde(default = "Rule::absent", skip_serializing_if = "Rule::is_reference")]
    pub rule: Rule,
    /// How the sides took their runs (`[trials] order`).
    #[serde(default, skip_serializing_if = "crate::spec::Order::is_abba")]
    pub order: crate::spec::Order,
    /// The CI attempt of this run (the marker's ATTEMPT); 1 outside CI.
    #[serde(default = "first_attempt", skip_serializing_if = "is_first_attempt")]
    pub attempt: u32,
    /// The A/A noise profile the floors come from (paired rule), when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<NoiseProfile>,
    /// The adaptive plan, when the run could add pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<Sequential>,
    /// The shards this report covers: its own for a shard's run, every one for a merged run,
    /// none for an unsharded run (see [`crate::shard`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<crate::shard::ShardPart>,
    /// Derived from the samples; kept for readers of the JSON.
    #[serde(default)]
    pub comparisons: Vec<MetricComparison>,
    /// The conditions each timed trial ran under (steal, load, throttling), as the agents read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<conditions::Condition>,
    /// The instruction lens's runs: their cost and where their instructions went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lens: Option<instructions::LensSummary>,
    /// How many trials of each side run each lens step, and why ([`lens_runs`]), decided as the
    /// run starts (a resume keeps them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lens_runs: Vec<lens_runs::LensRuns>,
    /// `run --bisect`: the answer for each regressed metric.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bisections: Vec<BisectLine>,
    /// Where the head stands against main's recorded history, per changed metric, when the
    /// ledger holds one (`crate::history::compare`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trend: Vec<trend::Standing>,
    /// Which of its framework's estimates each bench key's trial value is, as its row's note
    /// ([`benches::estimates`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub estimates: BTreeMap<String, String>,
    /// A record of one revision (`sandbench record`): one sandbox, the base side only (head
    /// names the same commit and measures nothing), kept in the ledger's history; nothing is
    /// compared ([`record`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub record: bool,
}

/// A bisection of `run --bisect`, as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BisectLine {
    /// The metric followed.
    pub key: String,
    /// Its answer after the metric's name (`crate::bisect::words`; product text, raw).
    pub words: String,
    /// Its folder in the run directory (`bisect.json`, `bisect.md`).
    pub dir: String,
    /// Commits visited between the ends.
    pub steps: usize,
    pub sandbox_seconds: f64,
    pub cost_usd: f64,
}

/// The comparison of one metric. `comparison.outcome` is the decision of the report's rule;
/// `paired` the paired analysis (under the paired rule, the one that decided).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricComparison {
    pub key: String,
    pub comparison: Comparison,
    pub paired: Paired,
    pub base_successful: usize,
    pub base_attempted: usize,
    pub head_successful: usize,
    pub head_attempted: usize,
    /// What a reader should know about this decision (floor capped, samples dropped, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Min, median and max of each trial measured in several runs (both sides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<runs::TrialRuns>,
    /// hyperfine's warnings about those runs: a slow first run, statistical outliers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl MetricComparison {
    pub fn outcome(&self) -> stats::Outcome {
        self.comparison.outcome
    }
}

/// One value per trial: the median of its runs ([`runs`]).
fn values(samples: Option<&Vec<Sample>>) -> Vec<(u32, f64)> {
    samples.map(|s| runs::trial_values(s)).unwrap_or_default()
}

/// hyperfine's warnings about the runs of each trial of `def`, on both sides.
fn run_warnings(def: &MetricDef, sides: [(&str, &Side); 2]) -> Vec<String> {
    let mut out = Vec::new();
    for (label, side) in sides {
        for (trial, values) in runs::runs_of_trials(side.metrics.get(&def.key).map_or(&[][..], Vec::as_slice)) {
            let median = stats::median(&values).unwrap_or_default();
            let at = format!("{label} {} trial {trial}", def.key);
            match runs::outliers(&values) {
                Some(runs::Outliers::SlowFirst(first)) => out.push(format!(
                    "{at}: the first run was much slower than the rest ({}, median {}): a cache it filled? Use `warmup`, or `prepare` to reset the state before each run",
                    format::value(first, def),
                    format::value(median, def)
                )),
                Some(runs::Outliers::Some(n)) => out.push(format!(
                    "{at}: {n} of {} runs are statistical outliers (more than 10 σ from the median {}, σ from the MAD): was the machine busy?",
                    values.len(),
                    format::value(median, def)
                )),
                None => {}
            }
        }
    }
    out
}

impl Report {
    /// The ledger's start of this run: its identity, revisions and directory, begun by this
    /// process, its sandboxes at `usd_per_hour` each.
    pub fn run_start(
        &self,
        spec: &str,
        repository: String,
        dir: &std::path::Path,
        usd_per_hour: f64,
    ) -> crate::cost::ledger::RunStart {
        crate::cost::ledger::RunStart {
            run_id: self.run_id.clone(),
            spec: spec.to_string(),
            repository,
            base_rev: self.base.rev.clone(),
            base_commit: self.base.commit.clone(),
            head_rev: self.head.rev.clone(),
            head_commit: self.head.commit.clone(),
            started_at: self.started_at.clone(),
            run_dir: dir.display().to_string(),
            owner: crate::provision::docker::owner_id(),
            usd_per_hour,
        }
    }

    /// The metrics to report, in order: the plan's definitions, each followed by its CPU-time
    /// companion (`<key>.cpu`) when samples of one exist and nothing defines it — titled
    /// "<title> (CPU)", same unit and floors, judged on its own noise.
    pub fn metric_defs(&self) -> Vec<MetricDef> {
        let mut defs = Vec::new();
        for def in &self.metrics {
            defs.push(def.clone());
            let key = MetricKey::new(def.key.as_str(), Facet::Cpu).to_string();
            let sampled = [&self.base_side, &self.head_side].iter().any(|s| s.metrics.contains_key(&key));
            if sampled && !self.metrics.iter().any(|d| d.key == key) {
                // CPU time is better lower, whichever way its step's figure is.
                let better = crate::stats::Better::Lower;
                defs.push(MetricDef { key, title: format!("{} (CPU)", def.title), better, ..def.clone() });
            }
        }
        defs
    }

    /// Keeps the trials' conditions and warns of each trial flagged for heavy steal or
    /// throttling ([`conditions`]).
    pub fn add_conditions(&mut self, found: Vec<conditions::Condition>) {
        self.warnings.extend(found.iter().filter_map(conditions::Condition::warning));
        self.conditions = found;
    }

    /// Decides the runs of each lens step of `plan` ([`lens_runs::plan`], by this report's sides
    /// and noise profile) and expects as many samples of their counts.
    pub fn plan_lens(&mut self, plan: &crate::spec::Plan) {
        let a_a = self.base.commit == self.head.commit;
        self.lens_runs =
            if self.record { lens_runs::record(plan) } else { lens_runs::plan(plan, a_a, self.noise.as_ref()) };
        for runs in &self.lens_runs {
            for facet in Facet::LENS {
                self.expected.insert(MetricKey::new(&runs.stem, facet).to_string(), runs.runs);
            }
        }
    }

    /// Samples each side should have of `key` (a facet, such as a CPU companion or a
    /// distribution's p95, as many as its stem).
    pub fn expected_of(&self, key: &str) -> usize {
        let own = self.expected.get(key);
        let stem = Some(MetricKey::stem_of(key)).filter(|s| *s != key).and_then(|k| self.expected.get(k));
        own.or(stem).copied().unwrap_or(1) as usize
    }

    /// (base, head) of the trials both sides measured, and the successful samples left unpaired.
    pub fn pairs_of(&self, key: &str) -> (Vec<(f64, f64)>, usize) {
        let base = values(self.base_side.metrics.get(key));
        let head = values(self.head_side.metrics.get(key));
        let pairs: Vec<(f64, f64)> =
            base.iter().filter_map(|(t, bv)| head.iter().find(|(ht, _)| ht == t).map(|(_, hv)| (*bv, *hv))).collect();
        (pairs.clone(), base.len() + head.len() - 2 * pairs.len())
    }

    /// The alpha of this report's intervals: the look's, or 5 %.
    pub fn alpha(&self) -> f64 {
        self.sequential.as_ref().map_or(0.05, |s| s.design.alpha_at(s.look as usize))
    }

    /// Compares every metric under the report's rule.
    pub fn analyze(&self) -> Vec<MetricComparison> {
        let defs = self.metric_defs();
        let family = self.family(&defs);
        defs.iter().map(|def| self.analyze_metric(def, family)).collect()
    }

    /// How many of `defs` the paired rule judges against the noise profile's floors: the family
    /// [`decide::for_family`] keeps honest together. 0 under the reference rule or without a
    /// profile; lens counts (judged on their own spread) are not in it.
    fn family(&self, defs: &[MetricDef]) -> usize {
        let Some(noise) = self.noise.as_ref().filter(|_| self.rule == Rule::Paired) else { return 0 };
        defs.iter().filter(|d| lens::of(d) != lens::Lens::Instructions && noise.floor(&d.key).is_ok()).count()
    }

    /// `def`'s comparison; `family` as [`Report::family`] counts it.
    fn analyze_metric(&self, def: &MetricDef, family: usize) -> MetricComparison {
        let (b, h, block_note) = self.blocked_values(&def.key);
        let expected = self.expected_trials(&def.key).len();
        let floors = Floors { absolute: def.absolute, relative: def.relative };
        let comparison = stats::compare(&b, &h, expected, floors);
        let (pairs, unpaired) = self.pairs_of(&def.key);
        let attempted = |side: &Side| side.metrics.get(&def.key).map_or(0, |s| runs::attempted_trials(s));
        let sides = [
            (sandbench_proto::Side::Base.as_str(), &self.base_side),
            (sandbench_proto::Side::Head.as_str(), &self.head_side),
        ];
        let spread: Vec<runs::TrialRuns> = sides
            .iter()
            .flat_map(|(label, side)| {
                runs::trial_runs(label, side.metrics.get(&def.key).map_or(&[][..], Vec::as_slice))
            })
            .collect();
        let mut out = MetricComparison {
            key: def.key.clone(),
            paired: stats::paired(&[], 0.0),
            comparison,
            base_successful: b.len(),
            base_attempted: attempted(&self.base_side),
            head_successful: h.len(),
            head_attempted: attempted(&self.head_side),
            notes: Vec::new(),
            runs: spread,
            warnings: run_warnings(def, sides),
        };
        match self.rule {
            Rule::Reference => {
                // The paired figures of the details: the relative floor, or the absolute one when
                // it is larger at this base median.
                let floor = out
                    .comparison
                    .base_median
                    .filter(|m| *m > 0.0)
                    .map_or(def.relative, |m| def.relative.max(def.absolute / m));
                out.paired = stats::paired(&pairs, floor);
            }
            Rule::Paired if lens::of(def) == lens::Lens::Instructions => {
                let failed = out.base_attempted + out.head_attempted - b.len() - h.len();
                let evidence = decide::Evidence { pairs: &pairs, unpaired, failed, expected };
                let floor = decide::count_floor(def, self.noise.as_ref());
                let spread = decide::count_spread(&def.key, self.within_spread(&def.key), self.noise.as_ref());
                let (comparison, paired, mut notes) =
                    decide::decide_counts(&out.comparison, &evidence, &floor, &spread);
                // How many runs the count rests on, and why: right after how it is judged.
                let stem = MetricKey::split(&def.key).0;
                if let Some(runs) = self.lens_runs.iter().find(|r| r.stem == stem) {
                    notes.insert(1.min(notes.len()), runs.note());
                }
                (out.comparison, out.paired, out.notes) = (comparison, paired, notes);
            }
            Rule::Paired => {
                let failed = out.base_attempted + out.head_attempted - b.len() - h.len();
                let evidence = decide::Evidence { pairs: &pairs, unpaired, failed, expected };
                let floor = decide::floor(def, out.comparison.base_median, self.noise.as_ref());
                let floor = decide::for_family(floor, &pairs, family, self.alpha());
                let floor = decide::for_resolution(floor, &pairs);
                let (comparison, paired, notes) = decide::decide(&out.comparison, &evidence, &floor, self.alpha());
                (out.comparison, out.paired, out.notes) = (comparison, paired, notes);
                let far = self.noise.as_ref().and_then(|n| n.far(&def.key, &out.paired));
                out.notes.extend(far.map(|f| f.note()));
            }
        }
        out.notes.extend(block_note);
        out.notes.extend(self.estimates.get(&def.key).cloned());
        // Every rule decides on the increase; a metric that is better higher names it the other
        // way round, in one place, so every view of the outcome follows.
        out.comparison.outcome = def.better.orient_outcome(out.comparison.outcome);
        out.paired.verdict = def.better.orient(out.paired.verdict);
        out
    }

    /// The largest relative difference of one side's trial values from that side's median, for a
    /// side with at least two trials of `key`.
    pub fn within_spread(&self, key: &str) -> Option<f64> {
        [&self.base_side, &self.head_side]
            .iter()
            .filter_map(|side| {
                let v: Vec<f64> = values(side.metrics.get(key)).into_iter().map(|(_, v)| v).collect();
                let median = stats::median(&v).filter(|m| *m > 0.0 && v.len() >= 2)?;
                v.iter().map(|x| (x / median - 1.0).abs()).reduce(f64::max)
            })
            .reduce(f64::max)
    }

    /// Look `look` (1-based) of an adaptive run on the samples so far: decided, more pairs, or
    /// exhausted. None when the report has no adaptive plan. Floors are the ones the report uses.
    pub fn next_look(&self, look: usize) -> Option<Next> {
        let plan = self.sequential.as_ref()?;
        let defs = self.metric_defs();
        let family = self.family(&defs);
        let gates: Vec<sequential::Gate> = plan
            .gate
            .iter()
            .filter_map(|key| defs.iter().find(|d| &d.key == key))
            .map(|def| {
                let (pairs, _) = self.pairs_of(&def.key);
                let base: Vec<f64> = pairs.iter().map(|p| p.0).collect();
                let floor = decide::floor(def, stats::median(&base), self.noise.as_ref());
                let floor = decide::for_family(floor, &pairs, family, plan.design.alpha_at(look));
                let floor = decide::for_resolution(floor, &pairs);
                sequential::Gate { key: def.key.clone(), pairs, floor: floor.value }
            })
            .collect();
        Some(sequential::next(&plan.design, look, &gates))
    }

    /// What the noise profile leads a run of `design` to expect of its gating metrics `gate`,
    /// one line each: the profile's pair sd and the floor, and the minimum detectable effect at
    /// the first and the last planned look. Empty without a profile.
    pub fn expectations(&self, gate: &[String], design: &Design) -> Vec<String> {
        let Some(noise) = self.noise.as_ref() else { return Vec::new() };
        let looks = design.looks();
        let mut at: Vec<(u32, f64)> = vec![(looks[0], design.alpha_at(1))];
        if looks.len() > 1 {
            at.push((looks[looks.len() - 1], design.alpha_at(looks.len())));
        }
        let defs = self.metric_defs();
        // The family as the spec defines it (CPU companions join it once sampled).
        let family = self.family(&defs);
        // Before any sample a CPU companion has no definition of its own: its metric's, as
        // `metric_defs` gives it once sampled.
        let def_of = |key: &String| {
            let stem = MetricKey::stem_if(key, Facet::Cpu).and_then(|s| defs.iter().find(|d| d.key == s));
            let own = defs.iter().find(|d| &d.key == key).cloned();
            own.or_else(|| stem.map(|d| MetricDef { key: key.clone(), ..d.clone() }))
        };
        gate.iter()
            .filter_map(def_of)
            .filter_map(|def| {
                let floor = decide::floor(&def, None, Some(noise));
                let looks: Vec<(u32, f64, f64)> = at
                    .iter()
                    .map(|&(n, alpha)| (n, alpha, decide::planned(&floor, family, alpha, n as usize)))
                    .collect();
                noise.expectation(&def.key, floor.value, &looks)
            })
            .collect()
    }

    /// Run errors, then every failed sample as `<side> <metric> trial <n>: <error>`.
    pub fn all_errors(&self) -> Vec<String> {
        let mut errors = self.errors.clone();
        for (label, side) in
            [(sandbench_proto::Side::Base, &self.base_side), (sandbench_proto::Side::Head, &self.head_side)]
        {
            for def in self.metric_defs() {
                for sample in side.metrics.get(&def.key).into_iter().flatten() {
                    if let Some(e) = &sample.error {
                        errors.push(format!("{label} {} trial {}: {e}", def.key, sample.trial));
                    }
                }
            }
        }
        errors
    }

    /// Every sample has a value for every trial expected, and no run-level error.
    pub fn complete(&self) -> bool {
        self.errors.is_empty()
            && self.metrics.iter().all(|def| {
                let expected = self.expected_trials(&def.key);
                let sides: &[&Side] =
                    if self.record { &[&self.base_side] } else { &[&self.base_side, &self.head_side] };
                sides.iter().all(|side| {
                    let got = values(side.metrics.get(&def.key));
                    got.len() == expected.len() && expected.iter().all(|t| got.iter().any(|(x, _)| x == t))
                })
            })
    }

    /// Whether trial `trial` is one of this report's: always, but in a shard's report, where
    /// only the trials of its shard are.
    pub fn owns(&self, trial: u32) -> bool {
        self.shards.is_empty() || self.shards.iter().any(|part| part.shard.owns(trial))
    }

    /// The trials of `key` each side should have: those of the plan this report owns.
    pub fn expected_trials(&self, key: &str) -> Vec<u32> {
        (0..self.expected_of(key) as u32).filter(|t| self.owns(*t)).collect()
    }

    /// Drops the samples of trials this report does not own (a shard's run measures the
    /// once-per-sandbox metrics as trial 0 in every shard; trial 0 is the first shard's).
    pub fn retain_owned(&mut self) {
        let shards = self.shards.clone();
        let owns = |t: u32| shards.is_empty() || shards.iter().any(|part| part.shard.owns(t));
        for side in [&mut self.base_side, &mut self.head_side] {
            for samples in side.metrics.values_mut() {
                samples.retain(|s| owns(s.trial));
            }
        }
    }

    /// Allocation, max(request, usage) and usage-only totals, when usage was measured.
    pub fn cost_figures(&self) -> Option<(f64, f64, f64)> {
        let costs: Vec<&crate::cost::SandboxCost> = self.sandboxes.iter().filter_map(|s| s.cost.as_ref()).collect();
        (!costs.is_empty()).then(|| {
            (
                costs.iter().map(|c| c.allocation_usd).sum(),
                costs.iter().map(|c| c.max_usd).sum(),
                costs.iter().map(|c| c.usage_usd).sum(),
            )
        })
    }

    pub fn total_cost_usd(&self) -> Option<f64> {
        (!self.sandboxes.is_empty()).then(|| self.sandboxes.iter().map(|s| s.estimated_usd).sum())
    }

    /// The instruction lens's share of the estimated cost: the cost times the lens's part of the
    /// sandboxes' seconds. None without lens runs or costed sandboxes.
    pub fn lens_cost_usd(&self) -> Option<f64> {
        let lens = self.lens.as_ref()?;
        let lived: f64 = self.sandboxes.iter().map(|s| s.seconds).sum();
        self.total_cost_usd().filter(|_| lived > 0.0).map(|total| total * (lens.seconds / lived).min(1.0))
    }

    /// SHA-256 of what makes two runs comparable: spec, revisions, image and resources.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        // What was asked, not what the engine made of it (known only once sandboxes exist).
        let resources = Resources { disk_enforced: None, ..self.resources.clone() };
        let identity = serde_json::json!({
            "spec": self.spec_name,
            (sandbench_proto::Side::Base.as_str()): self.base.commit,
            (sandbench_proto::Side::Head.as_str()): self.head.commit,
            "image": self.image,
            "resources": resources,
            "expected": self.expected,
        });
        Sha256::digest(identity.to_string().as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }
}

pub use crate::cost::ledger::timestamp;

/// A time as it names run directories: `20261202-195503` (UTC, seconds).
pub fn stamp(t: std::time::SystemTime) -> String {
    timestamp(t).replace(['-', ':'], "").replace('T', "-").trim_end_matches('Z').to_string()
}

#[cfg(test)]
mod timestamp_tests {
    #[test]
    fn timestamps_are_rfc3339() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400 + 3661);
        assert_eq!(super::timestamp(t), "2000-02-29T01:01:01Z");
        assert_eq!(super::timestamp(std::time::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }
}
