//! The plan an agent works from: the agent's part of a validated bench spec, sent as JSON in
//! every `RunPhase`. The controller builds it (`sandbench` spec module); the agent only reads it.
//!
//! Paths may start with `~/`, meaning the home of the user the step runs as. Shell commands run
//! with `/bin/sh -c` in an environment built from scratch (see the agent's `users` module).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The user that builds (prepare), and where the source goes.
pub const BUILDER_USER: &str = "builder";
pub const BUILDER_UID: u32 = 1500;
pub const SOURCE_DIR: &str = "/home/builder/source";
/// Where the agent writes the spec's harness files (`AgentPlan::harness`), readable by every user.
pub const HARNESS_DIR: &str = "/opt/sandbench/harness";
/// Benchmark users are `benchmark<t+1>` with uid `2001 + t` for install trial `t`; measure and
/// runtime run as the first one.
pub const BENCHMARK_UID_BASE: u32 = 2001;

pub fn benchmark_user(trial: u32) -> (String, u32) {
    (format!("benchmark{}", trial + 1), BENCHMARK_UID_BASE + trial)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentPlan {
    pub source: Source,
    pub prepare: Prepare,
    pub install: Install,
    pub measure: Measure,
    pub runtime: Runtime,
    /// Run as the builder in the source folder, after prepare; needs no installation.
    #[serde(default)]
    pub transport: Runtime,
    /// Interactions with the installed product, as the first benchmark user.
    #[serde(default)]
    pub ui: Runtime,
    /// Variables added to every benchmark user's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Files the spec ships with it (name → text), written into `HARNESS_DIR` before each phase:
    /// fixture generators, benches and checkers that belong to the harness, not to the product.
    #[serde(default)]
    pub harness: BTreeMap<String, String>,
    /// How the instruction lens runs its steps (when any step asks for it).
    #[serde(default, skip_serializing_if = "crate::lens::LensPlan::is_default")]
    pub lens: crate::lens::LensPlan,
    /// The sandbox's disk bound (`disk_gb`), when the engine enforces it: a step that fails on a
    /// full disk says so, naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_gb: Option<f64>,
    /// The registry bridge (`network = "registries"`): served on the sandbox's loopback before
    /// any phase runs, its environment given to the builder (the benchmark users have it in
    /// `env` already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registries: Option<RegistryBridge>,
    /// Metrics whose steps record one sample per request or operation (key → what each trial's
    /// samples reduce to), as their steps' `percentiles` and `max` ask. The agent sends every
    /// sample (its `sample` index); the controller reduces them per trial. A key may be a
    /// family's pattern (`store.*.commit_ms`) for keys only a script's output names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub distributions: BTreeMap<String, crate::metric::Distribution>,
}

/// The agent's end of the registry bridge: plain HTTP on `127.0.0.1:port`, each request carried
/// to the controller (`Fetch`), which answers it or refuses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryBridge {
    pub port: u16,
    /// What points npm, pip and uv at the bridge.
    pub env: BTreeMap<String, String>,
}

/// Where the bridge serves what: the npm registry at its root (npm's tarball URLs keep only
/// their path when `replace-registry-host` rewrites them), the Python index under
/// `BRIDGE_PYPI`, and another allowed host `h` under `BRIDGE_HOST` + `h/`. Neither prefix can
/// be an npm package name (those never start with `_`).
pub const BRIDGE_PYPI: &str = "/_/pypi/";
pub const BRIDGE_HOST: &str = "/_/h/";

impl RegistryBridge {
    /// The environment that points npm, pip and uv at a bridge on `port`. `npm_host`: the npm
    /// upstream's host when the spec names it; lockfiles and packuments name its tarball URLs,
    /// which npm then sends to the bridge keeping their path (npm does so by itself for
    /// registry.npmjs.org; never `always`, which would send a release tarball's own URL there).
    pub fn environment(port: u16, pypi: bool, npm_host: Option<&str>) -> BTreeMap<String, String> {
        let base = format!("http://127.0.0.1:{port}");
        let mut env = BTreeMap::new();
        if let Some(host) = npm_host {
            env.insert("npm_config_replace_registry_host".to_string(), host.to_string());
        }
        for (k, v) in [
            ("npm_config_registry", format!("{base}/")),
            // Audit and fund are POSTs to the registry, which the bridge refuses.
            ("npm_config_audit", "false".to_string()),
            ("npm_config_fund", "false".to_string()),
            ("npm_config_update_notifier", "false".to_string()),
        ] {
            env.insert(k.to_string(), v);
        }
        if pypi {
            let index = format!("{base}{BRIDGE_PYPI}");
            for k in ["PIP_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX"] {
                env.insert(k.to_string(), index.clone());
            }
            env.insert("PIP_DISABLE_PIP_VERSION_CHECK".into(), "1".into());
        }
        env
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// The controller uploaded `git archive` of the commit into `SOURCE_DIR`.
    Archive { commit: String },
    /// The agent clones `url` and checks out `commit` (needs the sandbox's network).
    Git { url: String, commit: String },
    /// No source (a spec that benchmarks something already in the image).
    None,
}

/// A shell command with its limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub run: String,
    #[serde(default)]
    pub cwd: Option<String>,
    pub timeout_s: f64,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prepare {
    pub commands: Vec<Step>,
    /// Globs relative to the source folder; their sizes sum to the `bundle` metric.
    #[serde(default)]
    pub artifacts: Vec<String>,
    /// Folder (relative to the source) served by the loopback origin, where `SHA256SUMS` goes;
    /// by default the folder of the first artifact.
    #[serde(default)]
    pub release_dir: Option<String>,
    /// Port of the loopback HTTP origin; none serves nothing.
    #[serde(default)]
    pub origin_port: Option<u16>,
    /// Where the origin serves the release folder (`releases/v1.0.0`: `/releases/v1.0.0/<file>`);
    /// empty, at its root.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub origin_path: String,
    /// What the artifacts are (`npm-tarballs`): the runtime fact `artifact_format`, to which each
    /// optional step that ran adds its own (`npm-tarballs+linux-x64-native`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_format: Option<String>,
    /// Runtime facts the spec names (name → a command run as the builder in the source, its
    /// output trimmed), beside node, npm, git and python.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<String, String>,
    /// Steps that run after the commands only on revisions that have what they need.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub optional: Vec<OptionalStep>,
}

/// A prepare step of some revisions only (a compiled build the product gained at some commit):
/// it runs when every file of `when` is in the source, is skipped when none is, and fails the
/// side's prepare with `incomplete` when only some are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionalStep {
    pub name: String,
    /// Paths relative to the source folder.
    pub when: Vec<String>,
    /// The error when only some of `when` are there.
    pub incomplete: String,
    pub commands: Vec<Step>,
    /// Globs relative to the source folder, released beside the prepare's own artifacts (in
    /// `SHA256SUMS` and the `bundle` metric).
    #[serde(default)]
    pub artifacts: Vec<String>,
    /// What its artifacts add to the `artifact_format` fact (`linux-x64-native`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_format: Option<String>,
    /// Its artifacts are a compiled installation: an install check `expect_format = "compiled"`
    /// applies to a side that ran it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub compiled: bool,
    /// Runtime facts recorded when it ran (as `Prepare::versions`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<String, String>,
}

/// How the installed entry point runs: a compiled executable (it starts with the ELF magic) or a
/// script run by an interpreter (Node, for the reference's npm installation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallationFormat {
    Compiled,
    Script,
}

impl InstallationFormat {
    /// The ELF magic number: the first four bytes of a Linux executable.
    pub const ELF_MAGIC: &[u8; 4] = b"\x7fELF";

    /// The format of an entry point whose first bytes are `head`.
    pub fn of(head: &[u8]) -> InstallationFormat {
        if head.starts_with(Self::ELF_MAGIC) { InstallationFormat::Compiled } else { InstallationFormat::Script }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            InstallationFormat::Compiled => "compiled",
            InstallationFormat::Script => "script",
        }
    }
}

/// Names of the runtime facts prepare and install record beside the machine's.
pub mod fact {
    /// `uname -m`.
    pub const MACHINE: &str = "machine";
    /// The artifacts' formats, joined with `+`.
    pub const ARTIFACT_FORMAT: &str = "artifact_format";
    /// The optional prepare steps that ran, comma-separated (empty: none).
    pub const OPTIONAL_STEPS: &str = "optional_steps";
    /// `compiled` or `script` ([`super::InstallationFormat`]).
    pub const INSTALLATION_FORMAT: &str = "installation_format";
    /// `ok`, or what the inventory command's non-zero exit said.
    pub const DEPENDENCY_INVENTORY: &str = "dependency_inventory";
    /// The inventory's output, in the sandbox's folder of the run directory.
    pub const INVENTORY_FILE: &str = "installed-dependencies.json";
    /// Prepare's facts file; install's are `install-facts/<trial>.json`.
    pub const PREPARE_FILE: &str = "facts.json";
    pub const INSTALL_DIR: &str = "install-facts";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Install {
    /// The timed command (metric `install`, seconds).
    pub command: Step,
    /// Untimed checks after it.
    #[serde(default)]
    pub checks: Vec<Check>,
    /// Laid in the first user's home after trial 0.
    #[serde(default)]
    pub fixture: Option<Fixture>,
    /// Names excluded from the footprint (glob on the entry name).
    #[serde(default)]
    pub footprint_excludes: Vec<String>,
    /// The installed program (`~/.local/bin/demo`, as the user reaches it): each trial records
    /// its [`InstallationFormat`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_point: Option<String>,
    /// Run untimed as the user after the sandbox's first installation: its output is kept as
    /// [`fact::INVENTORY_FILE`], and a non-zero exit is a note, never a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Step>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    /// Output of `run` (stdout and stderr) contains `contains`.
    Output { run: String, contains: String },
    /// `path` (`~`, `~/PATH` or a PATH in the home) exists, as the user sees it.
    FileExists { path: String },
    /// The file's first bytes are `prefix` (text, or `\xNN` escapes), as the user reads it.
    FileStartsWith { path: String, prefix: Vec<u8> },
    /// The entry point's format is `format`; it applies only to a side whose prepare ran a
    /// compiled optional step (`OptionalStep::compiled`).
    ExpectFormat { format: InstallationFormat },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    /// Folder under the home (e.g. `workspace`).
    pub dir: String,
    pub files: BTreeMap<String, String>,
    /// Make it a git repository with one commit by a fixed author at a fixed date.
    #[serde(default)]
    pub git: bool,
    /// Files written relative to the home (settings the product reads).
    #[serde(default)]
    pub home_files: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measure {
    /// Interactive start-up, timed cold then warm (metrics `cold`, `warm`).
    #[serde(default)]
    pub startup: Option<Startup>,
    /// Run between the cold and the warm start (e.g. stop sessions but keep a daemon).
    #[serde(default)]
    pub between: Option<Step>,
    /// Pump the terminal this long after the cold start before sampling memory (`rss`, `pss`).
    pub settle_s: f64,
    /// Record `disk` (footprint after first use) in trial 0.
    #[serde(default)]
    pub footprint: bool,
    /// Start once more per trial under the instruction lens, untimed (`cold.instructions`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub instructions: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Startup {
    pub command: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    pub timeout_s: f64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runtime {
    #[serde(default)]
    pub scenarios: Vec<Scenario>,
    #[serde(default)]
    pub commands: Vec<RepeatedCommand>,
    #[serde(default)]
    pub scripts: Vec<Script>,
    /// Benchmark frameworks' suites whose results become metrics (issue 34: the spec fills it once `[[runtime.bench]]` lands).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub benches: Vec<BenchStep>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// One value per trial: the mean of the runs.
    Mean,
    /// One value per trial: the sum of the runs.
    Total,
    /// Every run is a sample of its own (its index kept); a trial's value is their median.
    Samples,
}

/// A command run `warmup` times unrecorded, then `repeat` times timed (each run a sample, or
/// their mean or total); `prepare` runs untimed, as the same user, before every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepeatedCommand {
    pub metric: String,
    pub step: Step,
    pub repeat: u32,
    pub aggregate: Aggregate,
    #[serde(default)]
    pub warmup: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare: Option<Step>,
    /// Run once more per trial under the instruction lens (`crate::lens`), untimed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub instructions: bool,
    /// Each timed run is a sample of a distribution (`aggregate` is then `samples`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<Distribution>,
}

/// A command whose `RESULT {json}` lines become metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    pub name: String,
    pub step: Step,
    /// Metric names the script must report (others are errors).
    pub metrics: Vec<String>,
    /// When set, the script reports its one metric as this field of its first `RESULT` line
    /// (`RESULT {"value": 3, ...}`); the line's other fields are details, not metrics.
    #[serde(default)]
    pub value_field: Option<String>,
    /// Run once more per trial under the instruction lens, untimed (`script.<name>.instructions`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub instructions: bool,
    /// `RESULT` lines taken from one run; the agent drops the rest and says how many.
    #[serde(default = "default_max_results")]
    pub max_results: u32,
    /// Sizes read after the script exits (after each matrix child), as its user.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<SizeSpec>,
    /// One child per combination (`{name}` substituted in `run`, `SANDBENCH_PARAM_<NAME>` in its
    /// environment); its keys become `<script>.<v1>.<v2>….<key>` ([`child_key`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matrix: Vec<MatrixParam>,
    /// Keys (as the script prints them) whose `RESULT` value may be an array of samples.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub distributions: BTreeMap<String, Distribution>,
    /// Samples taken of one distribution key per trial (per matrix child); past it the step
    /// fails, naming it.
    #[serde(default = "default_max_samples")]
    pub max_samples: u32,
    /// Run untimed as the script's user before the first trial that needs it (see `keep`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixture: Option<Step>,
    /// The fixture runs once per sandbox into `$SANDBENCH_KEEP` (under [`KEEP_ROOT`]), which is then
    /// made read-only to the users and left out of the trial sweep.
    #[serde(default, skip_serializing_if = "is_false")]
    pub keep: bool,
}

impl Script {
    /// The keys the script records (its metrics and sizes, per matrix child), in order.
    pub fn keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        for combination in combinations(&self.matrix) {
            for k in self.metrics.iter().chain(self.sizes.iter().map(|s| &s.metric)) {
                keys.push(child_key(&self.name, &combination, k));
            }
        }
        keys
    }
}

fn default_max_samples() -> u32 {
    DEFAULT_MAX_SAMPLES
}

/// The root of kept fixtures: `SANDBENCH_KEEP` is `<root>/<user>/<step name>`. Outside the
/// agent's private state folder (so the users can read it) and every place a trial sweep
/// empties (homes, `/tmp`, `/var/tmp`, `/dev/shm`, `/run/user`, `/run/lock`).
pub const KEEP_ROOT: &str = "/var/lib/sandbench-keep";

/// `RESULT` lines taken from one run of a script by default (`max_results_per_script`): far
/// more than a bench reports, few enough that a flood costs the journal nothing.
pub const DEFAULT_MAX_RESULTS: u32 = 1000;

fn default_max_results() -> u32 {
    DEFAULT_MAX_RESULTS
}

/// A benchmark framework's suite run as a step: its results, read in `format` (a name of
/// `sandbench_adapters::Format`), become one metric per benchmark and measure,
/// `bench.<name>.<benchmark>[.<measure>]`, each trial's value the framework's own estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchStep {
    /// The step's name, a key segment: the family `bench.<name>.*`.
    pub name: String,
    pub step: Step,
    pub format: String,
    /// The results file (criterion: its folder, `target/criterion`), relative to the step's
    /// folder or `~/`; None: the command's standard output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<String>,
    /// Benchmarks taken from one run; the agent drops the rest and says how many.
    #[serde(default = "default_max_results")]
    pub max_benchmarks: u32,
    /// After the timed runs, the whole suite runs once more under the instruction lens:
    /// `bench.<name>.instructions` and `.cycles` count the suite, not each benchmark.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub instructions: bool,
}

impl BenchStep {
    /// What every key of a bench step starts with.
    pub const PREFIX: &'static str = "bench.";

    /// The step's own stem, `bench.<name>`: its failure and its process tree's companions
    /// (`bench.<name>.cpu`, …) are keyed by it.
    pub fn stem(&self) -> String {
        format!("{}{}", BenchStep::PREFIX, self.name)
    }

    /// The key of a benchmark's measure: `bench.<name>.<benchmark>`, and `.<measure>` for a
    /// measure other than the benchmark's primary one.
    pub fn key(&self, benchmark: &str, measure: Option<&str>) -> String {
        match measure {
            None => format!("{}.{benchmark}", self.stem()),
            Some(measure) => format!("{}.{benchmark}.{measure}", self.stem()),
        }
    }
}

/// How a scenario talks to its child.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// JSON lines on stdin/stdout (requests, interrupts).
    #[default]
    JsonLines,
    /// A terminal screen (keystrokes, waiting for text, typed-probe readiness).
    Terminal,
    /// JSON lines over a Unix socket the child (a daemon) listens on (`Scenario::socket`).
    Socket,
}

/// A long-running child driven step by step, over JSON lines or a terminal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub channel: Channel,
    pub command: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// The first event must have `event == ready_event`; None (only with `id_field`): the child
    /// counts as started when spawned.
    #[serde(default)]
    pub ready_event: Option<String>,
    /// Replies are matched by this field (a request's id, any JSON value), in any order, and
    /// need no `event` field; other lines only go to the transcript. None: the `event`/`id`/
    /// `done` protocol ([`jsonl`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_field: Option<String>,
    /// The fixture runs once per sandbox into `$SANDBENCH_KEEP` (see [`Script::keep`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub keep: bool,
    /// Metric for spawn → ready, if any.
    #[serde(default)]
    pub start_metric: Option<String>,
    /// Seconds to wait for any one response.
    pub timeout_s: f64,
    /// Sent to stop the child; it gets 5 s before SIGKILL.
    #[serde(default)]
    pub shutdown: Option<serde_json::Value>,
    /// Run as the scenario's user before the child starts (every trial), then synced to disk so
    /// its writeback does not land in a timed window.
    #[serde(default)]
    pub fixture: Option<Step>,
    /// How to reach the child over its socket (channel `socket`).
    #[serde(default)]
    pub socket: Option<SocketSpec>,
    pub steps: Vec<ScenarioStep>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ScenarioStep {
    /// Send `send` (an object, or a list of objects used in turn; an `id` is added) `repeat`
    /// times; each completes at the `done` event with that id, whose fields must include
    /// `expect`.
    Request {
        #[serde(default)]
        metric: Option<String>,
        send: serde_json::Value,
        #[serde(default = "one")]
        repeat: u32,
        #[serde(default = "mean")]
        aggregate: Aggregate,
        #[serde(default)]
        expect: serde_json::Map<String, serde_json::Value>,
        /// Total bytes of `text` in output events of each request must equal this.
        #[serde(default)]
        output_bytes: Option<u64>,
        /// Each request's latency is a sample of a distribution.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        distribution: Option<Distribution>,
    },
    /// JSON lines: `count` requests built from `send`, `size` at a time sent without waiting;
    /// the next batch is built once every reply of this one came. Each request's latency
    /// (send → reply) is a sample of `metric`; every reply must include `expect`.
    Batch {
        metric: String,
        send: serde_json::Value,
        count: u32,
        size: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        distribution: Option<Distribution>,
        #[serde(default)]
        expect: serde_json::Map<String, serde_json::Value>,
    },
    /// The apparent size of a path at this point, bytes, read as the scenario's user.
    Size { metric: String, path: String },
    /// Send `send`, wait for an output event of it containing `marker`, then time sending
    /// `interrupt` (with the same id) until its done event, which must include `expect`.
    Interrupt {
        metric: String,
        send: serde_json::Value,
        marker: String,
        interrupt: serde_json::Value,
        #[serde(default)]
        expect: serde_json::Map<String, serde_json::Value>,
    },
    /// Summed RSS of the user's processes.
    Memory { metric: String },
    /// CPU seconds the user's processes used since the scenario started (never negative).
    Cpu { metric: String },
    /// Terminal: typed-probe readiness (as the cold start); the metric is spawn → ready.
    Ready {
        #[serde(default)]
        metric: Option<String>,
    },
    /// Terminal: send keystrokes.
    Type { text: String },
    /// Terminal: wait until the screen shows `text` (or matches `regex`); the metric is the time
    /// since the last keystrokes (or the start).
    WaitFor {
        #[serde(default)]
        text: String,
        #[serde(default)]
        metric: Option<String>,
        /// `text` must be drawn after the last keystrokes: it is looked for in the output since
        /// then (replayed onto a blank screen), not on the screen, where it may be from before.
        #[serde(default)]
        fresh: bool,
        /// `text` must appear more often than it did when the last keystrokes were sent.
        #[serde(default)]
        more: bool,
        /// A regular expression the screen must match instead of `text`.
        #[serde(default)]
        regex: Option<String>,
        /// With `regex`: a number it captures must reach a bound and hold still.
        #[serde(default)]
        count: Option<CountRule>,
        /// Instead of the scenario's timeout.
        #[serde(default)]
        timeout_s: Option<f64>,
    },
    /// Terminal: named keys (`left`, `alt-right`, `backspace*24`, `enter`, `ctrl-c`, …), with a
    /// settle after each.
    Keys {
        keys: Vec<String>,
        #[serde(default)]
        settle_s: f64,
    },
    /// Run `steps` again, up to `attempts` times in all, until they all succeed.
    Retry { attempts: u32, steps: Vec<ScenarioStep> },
    /// Opens a timed window: at `stop_timer`, `metric` gets the wall time and `cpu_metric` the CPU
    /// seconds the user's live processes gained, each process read from its CPU-time clock
    /// (nanoseconds, its exited threads included), never negative: processes that exited take
    /// theirs with them. Either may be left out. `from_spawn` starts the window when the child
    /// was spawned.
    StartTimer {
        #[serde(default)]
        metric: Option<String>,
        #[serde(default)]
        cpu_metric: Option<String>,
        #[serde(default)]
        from_spawn: bool,
    },
    /// Closes the window; `at_echo` stops the wall clock at the last readiness probe's echo
    /// (leaving out its cleanup).
    StopTimer {
        #[serde(default)]
        at_echo: bool,
    },
    /// Socket: send `send` `repeat` times without waiting; the replies are kept under `tag`.
    Send {
        send: serde_json::Value,
        #[serde(default = "one")]
        repeat: u32,
        tag: String,
    },
    /// Socket: wait for every reply sent under `tag`; each must include `expect`.
    Collect {
        tag: String,
        #[serde(default)]
        expect: serde_json::Map<String, serde_json::Value>,
    },
    /// Stop the child and start it again (waiting for ready); optional metric for the start.
    Restart {
        #[serde(default)]
        metric: Option<String>,
    },
    /// Wait.
    Settle { seconds: f64 },
}

impl ScenarioStep {
    /// The metric this step records, if any.
    pub fn metric(&self) -> Option<&str> {
        match self {
            ScenarioStep::Request { metric, .. }
            | ScenarioStep::Restart { metric }
            | ScenarioStep::Ready { metric }
            | ScenarioStep::WaitFor { metric, .. } => metric.as_deref(),
            ScenarioStep::Interrupt { metric, .. }
            | ScenarioStep::Memory { metric }
            | ScenarioStep::Cpu { metric }
            | ScenarioStep::Batch { metric, .. }
            | ScenarioStep::Size { metric, .. } => Some(metric),
            ScenarioStep::StartTimer { metric, .. } => metric.as_deref(),
            ScenarioStep::Settle { .. }
            | ScenarioStep::Type { .. }
            | ScenarioStep::Keys { .. }
            | ScenarioStep::Retry { .. }
            | ScenarioStep::StopTimer { .. }
            | ScenarioStep::Send { .. }
            | ScenarioStep::Collect { .. } => None,
        }
    }

    /// Every metric this step (and the steps inside it) records, in order.
    pub fn metrics(&self) -> Vec<&str> {
        match self {
            ScenarioStep::StartTimer { metric, cpu_metric, .. } => {
                metric.as_deref().into_iter().chain(cpu_metric.as_deref()).collect()
            }
            ScenarioStep::Retry { steps, .. } => steps.iter().flat_map(ScenarioStep::metrics).collect(),
            other => other.metric().into_iter().collect(),
        }
    }
}

impl Scenario {
    /// The metrics the scenario records, in order.
    pub fn metrics(&self) -> Vec<String> {
        self.start_metric
            .iter()
            .cloned()
            .chain(self.steps.iter().flat_map(|s| s.metrics().into_iter().map(str::to_string)))
            .collect()
    }
}

mod interaction;
pub use interaction::{CountRule, SocketSpec, keys};
mod samples;
pub use samples::{
    DEFAULT_MAX_SAMPLES, Distribution, MatrixParam, SizeSpec, child_key, child_stem, combinations, is_segment,
};

impl Runtime {
    /// The metrics of this section recorded as distributions, and the facets to derive of each
    /// (for the controller's reduction).
    pub fn distributions(&self) -> Vec<(String, Distribution)> {
        fn of_steps(steps: &[ScenarioStep], out: &mut Vec<(String, Distribution)>) {
            for step in steps {
                match step {
                    ScenarioStep::Request { metric: Some(m), distribution: Some(d), .. }
                    | ScenarioStep::Batch { metric: m, distribution: Some(d), .. } => out.push((m.clone(), d.clone())),
                    ScenarioStep::Retry { steps, .. } => of_steps(steps, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        for scenario in &self.scenarios {
            of_steps(&scenario.steps, &mut out);
        }
        for command in &self.commands {
            if let Some(d) = &command.distribution {
                out.push((command.metric.clone(), d.clone()));
            }
        }
        for script in &self.scripts {
            for combination in combinations(&script.matrix) {
                for (k, d) in &script.distributions {
                    out.push((child_key(&script.name, &combination, k), d.clone()));
                }
            }
        }
        out
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn one() -> u32 {
    1
}

fn mean() -> Aggregate {
    Aggregate::Mean
}

/// Protocol of the JSON-lines child: field names the engine relies on.
pub mod jsonl {
    /// Every event object carries its kind in this field.
    pub const EVENT: &str = "event";
    /// Requests and their events carry this id field.
    pub const ID: &str = "id";
    /// The event kind of a finished request.
    pub const DONE: &str = "done";
    /// Output events carry their text in this field.
    pub const TEXT: &str = "text";
}

#[cfg(test)]
mod tests {
    use super::InstallationFormat;

    #[test]
    fn an_entry_point_starting_with_the_elf_magic_is_compiled() {
        assert_eq!(InstallationFormat::of(b"\x7fELF\x02\x01\x01"), InstallationFormat::Compiled);
        for script in [&b"#!/usr/bin/env node\n"[..], b"\x7fEL", b"", b"ELF\x7f"] {
            assert_eq!(InstallationFormat::of(script), InstallationFormat::Script, "{script:?}");
        }
    }
}
