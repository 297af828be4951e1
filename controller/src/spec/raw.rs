//! The bench spec as written (TOML), before validation. Fields that validation may complain
//! about keep their position in the file (`Spanned`), so errors can name the line.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    pub name: Spanned<String>,
    #[serde(default)]
    pub sandbox: RawSandbox,
    #[serde(default)]
    pub source: RawSource,
    #[serde(default)]
    pub trials: RawTrials,
    /// Variables for every benchmark user.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub prepare: RawPrepare,
    pub install: Spanned<RawInstall>,
    #[serde(default)]
    pub measure: Option<RawMeasure>,
    #[serde(default)]
    pub runtime: RawRuntime,
    #[serde(default)]
    pub metrics: BTreeMap<String, Spanned<RawMetric>>,
    #[serde(default)]
    pub cost: RawCost,
    #[serde(default)]
    pub report: RawReport,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReport {
    /// `paired` (default) or `reference`.
    pub rule: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSandbox {
    pub image: Option<Spanned<String>>,
    pub cpus: Option<Spanned<f64>>,
    pub cpuset: Option<Spanned<String>>,
    pub memory_gb: Option<Spanned<f64>>,
    pub disk_gb: Option<Spanned<f64>>,
    pub pids: Option<Spanned<i64>>,
    #[serde(default)]
    pub network: bool,
    pub ttl_minutes: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    /// A local git repository, relative to the spec's folder.
    pub repository: Option<Spanned<String>>,
    /// A git URL the sandbox clones (needs `sandbox.network = true`).
    pub url: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrials {
    pub install: Option<Spanned<i64>>,
    pub measure: Option<Spanned<i64>>,
    pub runtime: Option<Spanned<i64>>,
    pub failure_limit: Option<Spanned<i64>>,
    /// Pairs a run may grow to while a gating metric is inconclusive.
    pub max_pairs: Option<Spanned<i64>>,
    /// Metrics whose verdicts decide whether more pairs are run.
    pub gate: Option<Spanned<Vec<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrepare {
    #[serde(default)]
    pub commands: Vec<Spanned<String>>,
    pub timeout_s: Option<Spanned<f64>>,
    #[serde(default)]
    pub artifacts: Vec<Spanned<String>>,
    pub release_dir: Option<Spanned<String>>,
    pub origin_port: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInstall {
    pub command: Spanned<String>,
    pub timeout_s: Option<Spanned<f64>>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub checks: Vec<Spanned<RawCheck>>,
    pub footprint_excludes: Option<Vec<String>>,
    pub fixture: Option<RawFixture>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCheck {
    pub output: Option<String>,
    pub contains: Option<String>,
    pub file_exists: Option<String>,
    pub file_starts_with: Option<String>,
    pub prefix: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFixture {
    #[serde(default = "workspace")]
    pub dir: String,
    #[serde(default)]
    pub git: bool,
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    #[serde(default)]
    pub home_files: BTreeMap<String, String>,
}

fn workspace() -> String {
    "workspace".to_string()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMeasure {
    pub startup: Option<Spanned<Vec<String>>>,
    pub cwd: Option<Spanned<String>>,
    pub timeout_s: Option<Spanned<f64>>,
    pub settle_s: Option<Spanned<f64>>,
    pub between: Option<Spanned<String>>,
    #[serde(default)]
    pub footprint: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRuntime {
    #[serde(default)]
    pub scenario: Vec<Spanned<RawScenario>>,
    #[serde(default)]
    pub command: Vec<Spanned<RawRepeated>>,
    #[serde(default)]
    pub script: Vec<Spanned<RawScript>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    pub name: Spanned<String>,
    /// `jsonl` (default) or `terminal`.
    pub channel: Option<Spanned<String>>,
    pub command: Spanned<Vec<String>>,
    pub cwd: Option<Spanned<String>>,
    pub ready_event: Option<String>,
    pub start_metric: Option<Spanned<String>>,
    pub timeout_s: Option<Spanned<f64>>,
    pub shutdown: Option<toml::Table>,
    #[serde(default)]
    pub step: Vec<Spanned<RawStep>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStep {
    pub kind: Spanned<String>,
    pub metric: Option<Spanned<String>>,
    /// A request object, or a list of them used in turn.
    pub send: Option<toml::Value>,
    pub repeat: Option<Spanned<i64>>,
    pub aggregate: Option<Spanned<String>>,
    pub expect: Option<toml::Table>,
    pub output_bytes: Option<Spanned<i64>>,
    pub marker: Option<String>,
    pub interrupt: Option<toml::Table>,
    pub seconds: Option<Spanned<f64>>,
    /// Keystrokes (`type`) or the text to wait for (`wait_for`).
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRepeated {
    pub metric: Spanned<String>,
    pub run: String,
    pub cwd: Option<Spanned<String>>,
    pub repeat: Option<Spanned<i64>>,
    pub aggregate: Option<Spanned<String>>,
    pub timeout_s: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScript {
    pub name: Spanned<String>,
    pub run: String,
    pub cwd: Option<Spanned<String>>,
    pub timeout_s: Option<Spanned<f64>>,
    pub metrics: Spanned<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetric {
    pub title: Option<String>,
    pub unit: Option<String>,
    pub scale: Option<Spanned<f64>>,
    pub absolute: Option<Spanned<f64>>,
    pub relative: Option<Spanned<f64>>,
    pub group: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCost {
    pub cpu_usd_per_hour: Option<Spanned<f64>>,
    pub memory_usd_per_gb_hour: Option<Spanned<f64>>,
    pub disk_usd_per_gb_hour: Option<Spanned<f64>>,
    pub budget_usd: Option<Spanned<f64>>,
}
