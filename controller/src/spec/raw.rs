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
    /// RESULT benches (and scenarios) run as the builder against the prepared source.
    #[serde(default)]
    pub transport: RawRuntime,
    /// Interactions with the installed product.
    #[serde(default)]
    pub ui: RawRuntime,
    /// Harness files shipped into the sandbox: name → path relative to the spec's folder.
    #[serde(default)]
    pub harness: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub metrics: BTreeMap<String, Spanned<RawMetric>>,
    #[serde(default)]
    pub cost: RawCost,
    #[serde(default)]
    pub report: RawReport,
    /// How the instruction lens runs (`instructions = true` on a step asks for it).
    #[serde(default)]
    pub lens: RawLens,
    /// What `run --bisect` may spend on each regressed metric.
    #[serde(default)]
    pub bisect: RawBisect,
    /// The registry bridge's upstreams and bounds (`sandbox.network = "registries"`).
    #[serde(default)]
    pub registries: Option<Spanned<RawRegistries>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRegistries {
    /// The npm registry (default: the host's npm configuration).
    pub npm: Option<Spanned<String>>,
    /// The Python package index, its simple API (default: the host's pip configuration).
    pub pypi: Option<Spanned<String>>,
    /// More hosts the bridge may reach, by name (a Python index's files host, …).
    #[serde(default)]
    pub hosts: Vec<Spanned<String>>,
    pub port: Option<Spanned<i64>>,
    pub max_response_mb: Option<Spanned<f64>>,
    pub requests_per_second: Option<Spanned<i64>>,
    pub cache_mb: Option<Spanned<f64>>,
    /// How long a registry's metadata (packuments, index pages) is served from the cache.
    pub metadata_ttl_minutes: Option<Spanned<f64>>,
    /// Requests the run sends to the registries a second, all sandboxes together.
    pub upstream_per_second: Option<Spanned<i64>>,
    /// Requests a sandbox sends to the registries (cache misses), at most; twice this a run.
    pub max_upstream_requests: Option<Spanned<i64>>,
    /// Negative answers (404, 410) a sandbox gets from the registries, at most; twice this a run.
    pub max_not_found: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBisect {
    /// Commits a bisection visits between its ends at most.
    pub max_steps: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLens {
    /// V8's `--hash-seed` and `--random-seed`.
    pub seed: Option<Spanned<i64>>,
    /// Seconds one lens run may take.
    pub timeout_s: Option<Spanned<f64>>,
    /// Trials of each side that run each lens step (default: as the noise profile needs).
    pub runs: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReport {
    /// `paired` (default) or `reference`.
    pub rule: Option<Spanned<String>>,
    /// Metrics a side of the run may have; past it, the rest are dropped with a warning.
    pub max_metrics: Option<Spanned<i64>>,
    /// The least floor a noise profile gives a metric (head/base − 1).
    pub min_floor: Option<Spanned<f64>>,
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
    /// Output kept per command, in KiB: its first and last halves.
    pub output_kb: Option<Spanned<i64>>,
    /// `false` (default), `true`, or `"registries"` (no network, the registry bridge).
    pub network: Option<Spanned<toml::Value>>,
    pub ttl_minutes: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    /// A local git repository, relative to the spec's folder.
    pub repository: Option<Spanned<String>>,
    /// A git URL the sandbox clones (needs `sandbox.network = true`).
    pub url: Option<Spanned<String>>,
    /// The largest source archive uploaded, in MB.
    pub max_mb: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrials {
    pub install: Option<Spanned<i64>>,
    pub measure: Option<Spanned<i64>>,
    pub runtime: Option<Spanned<i64>>,
    pub transport: Option<Spanned<i64>>,
    pub ui: Option<Spanned<i64>>,
    pub failure_limit: Option<Spanned<i64>>,
    /// Pairs a run may grow to while a gating metric is inconclusive.
    pub max_pairs: Option<Spanned<i64>>,
    /// Metrics whose verdicts decide whether more pairs are run.
    pub gate: Option<Spanned<Vec<String>>>,
    /// `abba`, `interleaved` or `duet`.
    pub order: Option<Spanned<String>>,
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
    /// Where the origin serves the release folder (`releases/v1.0.0`).
    pub origin_path: Option<Spanned<String>>,
    /// What the artifacts are (`npm-tarballs`), a runtime fact.
    pub artifact_format: Option<Spanned<String>>,
    /// Runtime facts: name → a command whose output is the value (`bun = "bun --version"`).
    #[serde(default)]
    pub versions: BTreeMap<String, Spanned<String>>,
    /// Steps of the revisions that have the files they need.
    #[serde(default)]
    pub optional: Vec<Spanned<RawOptional>>,
}

/// `[[prepare.optional]]`: a step that runs when every file of `when` is in the source.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOptional {
    pub name: Spanned<String>,
    /// A path, or a list of them, relative to the source folder.
    pub when: Spanned<RawPaths>,
    /// The error when only some of `when` are there.
    pub incomplete: Option<Spanned<String>>,
    #[serde(default)]
    pub commands: Vec<Spanned<String>>,
    pub timeout_s: Option<Spanned<f64>>,
    #[serde(default)]
    pub artifacts: Vec<Spanned<String>>,
    pub artifact_format: Option<Spanned<String>>,
    /// Its artifacts are a compiled installation.
    #[serde(default)]
    pub compiled: bool,
    #[serde(default)]
    pub versions: BTreeMap<String, Spanned<String>>,
}

/// One path or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawPaths {
    One(String),
    Many(Vec<String>),
}

impl RawPaths {
    pub fn paths(&self) -> Vec<String> {
        match self {
            RawPaths::One(path) => vec![path.clone()],
            RawPaths::Many(paths) => paths.clone(),
        }
    }
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
    /// The installed program, whose format (compiled or script) each trial records.
    pub entry_point: Option<Spanned<String>>,
    /// Run untimed after the first installation; its output is kept, a non-zero exit noted.
    pub inventory: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCheck {
    pub output: Option<String>,
    pub contains: Option<String>,
    pub file_exists: Option<String>,
    pub file_starts_with: Option<String>,
    pub prefix: Option<String>,
    /// `compiled`: the entry point must be, when the side built a compiled artifact.
    pub expect_format: Option<String>,
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
    /// Count the cold start under the instruction lens too.
    #[serde(default)]
    pub instructions: bool,
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
    /// Benchmark frameworks' suites whose results file (or output) becomes metrics.
    #[serde(default)]
    pub bench: Vec<Spanned<RawBench>>,
    /// `RESULT` lines taken from one run of a script; the rest are dropped with a warning.
    pub max_results_per_script: Option<Spanned<i64>>,
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
    /// A command run before each trial's child starts (fixtures), then synced to disk.
    pub fixture: Option<Spanned<String>>,
    pub fixture_timeout_s: Option<Spanned<f64>>,
    /// Channel `socket`: where the daemon listens and how it speaks.
    pub socket: Option<Spanned<RawSocket>>,
    /// JSON lines: replies matched by this field, in any order, with no `event` field.
    pub id_field: Option<Spanned<String>>,
    /// The fixture runs once per sandbox into `$SANDBENCH_KEEP`.
    #[serde(default)]
    pub keep: bool,
    #[serde(default)]
    pub step: Vec<Spanned<RawStep>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSocket {
    pub path: Spanned<String>,
    pub connect_timeout_s: Option<Spanned<f64>>,
    pub hello: Option<toml::Table>,
    pub envelope: Option<toml::Table>,
    pub reply: Option<toml::Table>,
    pub id_field: Option<String>,
    pub max_line_bytes: Option<Spanned<i64>>,
    /// Messages with these fields are replaced by their field `unwrap_field`.
    pub unwrap_when: Option<toml::Table>,
    pub unwrap_field: Option<String>,
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
    pub expect: Option<Spanned<toml::Table>>,
    pub output_bytes: Option<Spanned<i64>>,
    pub marker: Option<String>,
    pub interrupt: Option<toml::Table>,
    pub seconds: Option<Spanned<f64>>,
    /// Keystrokes (`type`) or the text to wait for (`wait_for`).
    pub text: Option<String>,
    /// Named keys (`keys`), each optionally `name*N`, and the settle after each.
    pub keys: Option<Spanned<Vec<String>>>,
    pub settle_s: Option<Spanned<f64>>,
    /// `retry`: how many attempts, and the steps of one attempt.
    pub attempts: Option<Spanned<i64>>,
    pub steps: Option<Vec<Spanned<RawStep>>>,
    /// `wait_for`: text drawn after the last keys; more occurrences than then; a regex
    /// instead of text, with a captured count that must reach `at_least` and hold `stable_s`.
    pub fresh: Option<bool>,
    pub more: Option<bool>,
    pub regex: Option<Spanned<String>>,
    pub group: Option<Spanned<i64>>,
    pub at_least: Option<Spanned<i64>>,
    pub stable_s: Option<Spanned<f64>>,
    pub poll_s: Option<Spanned<f64>>,
    pub timeout_s: Option<Spanned<f64>>,
    /// `start_timer`: the CPU companion metric, and `from = "spawn"`.
    pub cpu_metric: Option<Spanned<String>>,
    pub from: Option<Spanned<String>>,
    /// `stop_timer`: `at = "echo"`.
    pub at: Option<Spanned<String>>,
    /// `send` / `collect`: the tag the replies are kept under.
    pub tag: Option<Spanned<String>>,
    /// `size`: the path whose apparent size is recorded.
    pub path: Option<Spanned<String>>,
    /// `batch`: requests in all, and how many are sent without waiting.
    pub count: Option<Spanned<i64>>,
    pub size: Option<Spanned<i64>>,
    /// `request` (with `repeat`) and `batch`: facets of the distribution of their latencies.
    pub percentiles: Option<Spanned<Vec<i64>>>,
    pub max: Option<Spanned<bool>>,
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
    pub warmup: Option<Spanned<i64>>,
    pub prepare: Option<Spanned<String>>,
    /// Run once more under the instruction lens.
    #[serde(default)]
    pub instructions: bool,
    /// Facets of the distribution of the timed runs.
    pub percentiles: Option<Spanned<Vec<i64>>>,
    pub max: Option<Spanned<bool>>,
}

/// `[[runtime.bench]]`: a framework's suite and where its results are.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBench {
    pub name: Spanned<String>,
    pub run: Spanned<String>,
    pub cwd: Option<Spanned<String>>,
    /// A name of `sandbench_adapters::Format` (`tinybench`, `pytest-benchmark`, …).
    pub format: Spanned<String>,
    /// The results file (criterion: its folder); none: the command's standard output.
    pub results: Option<Spanned<String>>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub timeout_s: Option<Spanned<f64>>,
    pub max_benchmarks: Option<Spanned<i64>>,
    /// The instruction lens on a bench step: refused for now.
    pub instructions: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScript {
    pub name: Spanned<String>,
    pub run: String,
    pub cwd: Option<Spanned<String>>,
    pub timeout_s: Option<Spanned<f64>>,
    pub metrics: Spanned<Vec<String>>,
    /// The one metric is this field of the first `RESULT` line.
    pub value_field: Option<String>,
    /// Run once more under the instruction lens.
    #[serde(default)]
    pub instructions: bool,
    /// Sizes read after the script exits: `[{ metric, path }]`.
    pub sizes: Option<Vec<Spanned<RawSize>>>,
    /// Parameters: one child per combination.
    pub matrix: Option<Spanned<toml::Table>>,
    /// Keys whose RESULT value may be an array of samples, and their facets.
    pub distributions: Option<Spanned<toml::Table>>,
    pub max_samples: Option<Spanned<i64>>,
    /// Run untimed before the first trial that needs it; with `keep`, once per sandbox.
    pub fixture: Option<Spanned<String>>,
    pub fixture_timeout_s: Option<Spanned<f64>>,
    #[serde(default)]
    pub keep: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSize {
    pub metric: Spanned<String>,
    pub path: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDistribution {
    pub percentiles: Option<Vec<i64>>,
    pub max: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetric {
    pub title: Option<String>,
    pub unit: Option<Spanned<String>>,
    pub scale: Option<Spanned<f64>>,
    pub absolute: Option<Spanned<f64>>,
    pub relative: Option<Spanned<f64>>,
    pub group: Option<String>,
    /// `"lower"` (the default) or `"higher"`.
    pub better: Option<Spanned<String>>,
    /// Recorded but never judged (a benchmark too noisy to compare): no row, its samples kept.
    pub ignore: Option<Spanned<bool>>,
    /// Whether its verdict decides if an adaptive run adds pairs (`trials.gate` for the keys
    /// a family matches, which may be named only by a run).
    pub gate: Option<Spanned<bool>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCost {
    pub cpu_usd_per_hour: Option<Spanned<f64>>,
    pub memory_usd_per_gb_hour: Option<Spanned<f64>>,
    pub disk_usd_per_gb_hour: Option<Spanned<f64>>,
    pub budget_usd: Option<Spanned<f64>>,
}
