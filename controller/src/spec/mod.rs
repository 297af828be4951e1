//! The bench spec: TOML parsed into a raw form ([`raw`]), then validated into a [`Plan`]. Every
//! error names the file, the line and the field, and says what was expected; all errors are
//! reported at once.

#[cfg(test)]
mod bench_tests;
mod bounds;
mod describe;
mod expect;
mod interaction;
mod metric_defs;
pub mod metrics;
pub mod metrics_families;
#[cfg(test)]
mod metrics_tests;
pub mod numbers;
mod phases;
mod raw;
pub mod registries;
mod release;
mod runtime;
mod samples;
pub mod units;
mod validate;
mod validator;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbench_proto::plan::{AgentPlan, BenchStep, Source};
use sandbench_proto::{Phase, metric};
use serde::{Deserialize, Serialize};

use crate::cost::RateCard;
pub use describe::describe;
pub use metrics::MetricDef;
use raw::RawSpec;
use validator::Validator;

/// One thing wrong with a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub file: PathBuf,
    pub line: usize,
    pub field: String,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}: {}", self.file.display(), self.line, self.field, self.message)
    }
}

/// Every error found in a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(f, "the spec has {n} error{}:", if n == 1 { "" } else { "s" })?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecErrors {}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxSettings {
    pub image: String,
    pub cpus: f64,
    pub cpuset: Option<String>,
    pub memory_bytes: u64,
    pub disk_gb: f64,
    pub pids_limit: i64,
    /// Output kept per command (its first and last halves, with a marker between them saying
    /// how much was cut); `sandbox.output_kb`.
    pub output_cap_bytes: u64,
    /// A network of its own (`network = true`).
    pub network: bool,
    /// The registry bridge instead (`network = "registries"`): no network, the agent's loopback
    /// endpoint carried to the controller, which reaches these registries only.
    pub registries: Option<RegistrySettings>,
    pub ttl: Duration,
}

/// `[registries]`, validated. Upstreams left out come from the host's configuration when the
/// bridge starts (`crate::bridge::Upstreams::resolve`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegistrySettings {
    pub npm: Option<String>,
    pub pypi: Option<String>,
    pub hosts: Vec<String>,
    /// The agent's loopback port.
    pub port: u16,
    pub max_response_bytes: u64,
    /// Requests a sandbox makes a second, answered from the cache or not.
    pub requests_per_second: u32,
    /// Requests the run sends upstream a second (all sandboxes together).
    pub upstream_per_second: u32,
    /// Requests a sandbox sends upstream at most (twice this for the run).
    pub max_upstream_requests: u64,
    /// Negative answers (404, 410) from upstream a sandbox gets at most (twice this for the run).
    pub max_not_found: u64,
    pub cache_bytes: u64,
    pub metadata_ttl: Duration,
    /// The content cache's folder (None: `bridge::cache::Cache::default_dir`); not in the spec.
    pub cache_dir: Option<PathBuf>,
}

impl SandboxSettings {
    /// `disk_gb` in bytes (GB: 10^9 bytes), the bound asked of the engine.
    pub fn disk_bytes(&self) -> u64 {
        (self.disk_gb * 1e9).round().max(1.0) as u64
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SourceSettings {
    /// A local git repository; the controller uploads `git archive` of each revision.
    Local {
        repository: PathBuf,
    },
    /// Cloned inside the sandbox.
    Url {
        url: String,
    },
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trials {
    pub install: u32,
    pub measure: u32,
    pub runtime: u32,
    /// 0 when the spec has no transport section.
    pub transport: u32,
    /// 0 when the spec has no ui section.
    pub ui: u32,
    pub failure_limit: u32,
    /// Pairs measure and runtime may grow to while a gating metric is inconclusive (default:
    /// their trials, i.e. no extra pairs).
    pub max_pairs: u32,
    /// Metrics whose verdicts decide whether more pairs are run (default: the timed metrics of
    /// measure and runtime).
    pub gate: Vec<String>,
    /// Whether the spec names the gate (`trials.gate`). When it does not, the benchmarks a bench
    /// step of measure or runtime reports (keys only the run names) join the gate too
    /// ([`Plan::gates_named`]).
    pub gate_given: bool,
    /// How the two sides' runs of a trial are ordered (`[trials] order`).
    pub order: Order,
}

/// Trials of each side that show whether a step is deterministic under the instruction lens: an
/// A/A run counts a lens step in as many, and so does a run without that evidence
/// (`crate::report::lens_runs`).
pub const LENS_EVIDENCE_TRIALS: u32 = 3;

/// The phases whose trials grow with the pairs of an adaptive run (`[trials] max_pairs`).
pub const GROWN: [Phase; 2] = [Phase::Measure, Phase::Runtime];

impl Trials {
    /// The trials of `phase`: a timed phase's count, one for prepare (once per sandbox), none for
    /// the synthetic phase.
    pub fn of(&self, phase: Phase) -> u32 {
        match phase {
            Phase::Prepare => 1,
            Phase::Install => self.install,
            Phase::Measure => self.measure,
            Phase::Runtime => self.runtime,
            Phase::Transport => self.transport,
            Phase::Ui => self.ui,
            Phase::Synthetic => 0,
        }
    }
}

/// How the two sides of a pair take their runs (`[trials] order`). Install trials are one run
/// each and always go ABBA. A report without one was taken ABBA.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// A whole trial on one side, then on the other, the first side alternating (ABBA).
    #[default]
    Abba,
    /// Single runs alternate between the sides (base, head, head, base, …) within each trial,
    /// both sandboxes ready: drift slower than one run hits both sides alike.
    Interleaved,
    /// Both sides take each run at once, each pinned to CPUs of its own (swapped every other
    /// trial).
    Duet,
    /// The spec's default: the duet where the machine has twice the spec's CPUs and one pair
    /// runs, else interleaved (`scripts/validity` measured both better than ABBA here). A run
    /// resolves it before its first trial ([`Order::resolve`]).
    Auto,
}

impl Order {
    pub const NAMES: [&'static str; 4] = ["abba", "interleaved", "duet", "auto"];

    pub fn parse(text: &str) -> Option<Order> {
        match text {
            "abba" => Some(Order::Abba),
            "interleaved" => Some(Order::Interleaved),
            "duet" => Some(Order::Duet),
            "auto" => Some(Order::Auto),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        Order::NAMES[self as usize]
    }

    pub fn is_abba(&self) -> bool {
        *self == Order::Abba
    }

    /// Whether a phase's trials are taken run by run (stepwise) in this order.
    pub fn stepwise(self, phase: Phase) -> bool {
        matches!(self, Order::Interleaved | Order::Duet) && phase != Phase::Install
    }

    /// The order a run of `pairs` pairs takes: [`Order::Auto`] made concrete (`duet_fits`:
    /// whether this machine has twice the spec's CPUs), any other as it is.
    pub fn resolve(self, pairs: u32, duet_fits: bool) -> Order {
        match self {
            Order::Auto if pairs == 1 && duet_fits => Order::Duet,
            Order::Auto => Order::Interleaved,
            order => order,
        }
    }
}

/// A validated spec: everything a run needs, checked before any container exists.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub name: String,
    pub spec_path: PathBuf,
    pub sandbox: SandboxSettings,
    pub source: SourceSettings,
    pub trials: Trials,
    /// The agent's plan; its `source` is set per revision.
    pub agent: AgentPlan,
    /// Every metric the phases record, in report order, with its definition.
    pub metrics: Vec<MetricDef>,
    /// The spec's `[metrics]` blocks, exact and families: what defines a key only a run names.
    pub definitions: metrics_families::Definitions,
    pub cost: RateCard,
    /// The rule that decides each metric (`[report] rule`).
    pub rule: Rule,
    /// `[bisect]`: what `run --bisect` may spend.
    pub bisect: BisectSettings,
    /// Metrics a side of the run may have (`[report] max_metrics`); the rest are dropped with
    /// a warning.
    pub max_metrics: usize,
    /// The least floor a noise profile gives a metric, as head/base − 1 (`[report] min_floor`):
    /// a systematic difference below it does not matter, however well A/A runs bound it.
    pub min_floor: f64,
    /// The largest source archive uploaded into a sandbox (`[source] max_mb`).
    pub source_max_bytes: u64,
    /// `[lens] runs`: the trials of each side that run each lens step, whatever the noise
    /// profile says (`crate::report::lens_runs`); None lets the profile decide.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lens_runs: Option<u32>,
}

/// `[bisect]` of a spec.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BisectSettings {
    /// Commits a bisection visits between its ends at most (default 8: a range of 256 commits).
    pub max_steps: u32,
}

impl Default for BisectSettings {
    fn default() -> BisectSettings {
        BisectSettings { max_steps: validate::DEFAULT_BISECT_STEPS }
    }
}

/// Metrics a side may have by default (`[report] max_metrics`): far beyond any plan's.
pub const DEFAULT_MAX_METRICS: i64 = 4096;
/// The least floor a noise profile gives by default (`[report] min_floor`): timer and scheduler
/// resolution.
pub const DEFAULT_MIN_FLOOR: f64 = 0.005;
/// The largest `[report] min_floor`: the paired rule's cap on floors.
pub const MAX_MIN_FLOOR: f64 = 0.5;
/// The largest source archive by default, in MB (`[source] max_mb`).
pub const DEFAULT_SOURCE_MAX_MB: f64 = 512.0;

/// Which rule decides each metric (`[report] rule`); the report applies it ([`crate::report`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Paired estimate and interval against a floor (`decide`).
    #[default]
    Paired,
    /// The reference harness's rule and comment (medians, floors and spreads).
    Reference,
}

impl Rule {
    /// A `report.json` without a rule was written before rules existed, under the reference one.
    pub(crate) fn absent() -> Rule {
        Rule::Reference
    }

    pub(crate) fn is_reference(&self) -> bool {
        *self == Rule::Reference
    }

    pub fn parse(text: &str) -> Option<Rule> {
        match text {
            "paired" => Some(Rule::Paired),
            "reference" => Some(Rule::Reference),
            _ => None,
        }
    }
}

impl Plan {
    /// The agent plan for one revision.
    pub fn agent_plan(&self, commit: &str) -> AgentPlan {
        let mut plan = self.agent.clone();
        plan.source = match &self.source {
            SourceSettings::Local { .. } => Source::Archive { commit: commit.to_string() },
            SourceSettings::Url { url } => Source::Git { url: url.clone(), commit: commit.to_string() },
            SourceSettings::None => Source::None,
        };
        plan
    }

    /// Whether the run's sandboxes need valgrind (the instruction lens): then every sandbox of
    /// the run, wall-time trials and lens alike, runs the image derived from the spec's with
    /// valgrind (`provision::docker::valgrind`).
    pub fn needs_valgrind(&self) -> bool {
        self.uses_instruction_lens()
    }

    /// What one sandbox is given, memory and disk in GiB as the spec states them.
    pub fn allocation(&self) -> crate::cost::Allocation {
        crate::cost::Allocation {
            cpus: self.sandbox.cpus,
            memory_gib: self.sandbox.memory_bytes as f64 / (1u64 << 30) as f64,
            disk_gib: self.sandbox.disk_gb,
        }
    }

    /// What one sandbox costs per hour at the rate card.
    pub fn hourly_usd(&self) -> f64 {
        crate::cost::hourly(&self.cost, self.allocation())
    }

    /// How long the controller waits for one trial of `phase`: every step at its timeout, plus
    /// room for the agent's own work (users, hygiene, artifacts).
    pub fn phase_timeout(&self, phase: Phase) -> Duration {
        let margin = match phase {
            Phase::Prepare => 600.0,
            Phase::Measure => 180.0,
            _ => 120.0,
        };
        Duration::from_secs_f64(self.phase_limit_s(phase) + margin)
    }

    /// The longest a run of this plan can keep a sandbox: provisioning, prepare, every trial of
    /// both sides one after the other (measure and runtime up to `max_pairs`) at its phase
    /// timeout, and teardown.
    pub fn worst_case(&self) -> Duration {
        let t = &self.trials;
        // A phase with nothing to do (no trials) does not grow.
        let grown = |n: u32| if n == 0 { 0 } else { t.max_pairs.max(n) };
        let trials = |phase: Phase, n: u32| f64::from(n) * self.phase_timeout(phase).as_secs_f64();
        let timed = trials(Phase::Install, t.install)
            + trials(Phase::Measure, grown(t.measure))
            + trials(Phase::Runtime, grown(t.runtime))
            + trials(Phase::Transport, t.transport)
            + trials(Phase::Ui, t.ui);
        let provision_and_teardown = 180.0;
        Duration::from_secs_f64(provision_and_teardown + self.phase_timeout(Phase::Prepare).as_secs_f64() + 2.0 * timed)
    }

    /// Checks what can only be checked on the machine that runs the plan: the cpuset names CPUs
    /// this machine has.
    pub fn check_host(&self) -> anyhow::Result<()> {
        if self.trials.order == Order::Duet {
            self.duet_cpus_here()?;
        }
        let Some(cpuset) = &self.sandbox.cpuset else { return Ok(()) };
        let cpus = bounds::cpuset(cpuset).map_err(|why| anyhow::anyhow!("sandbox.cpuset: {why}"))?;
        if let Some(host) = bounds::host_cpus() {
            bounds::cpus_available(&cpus, &host)
                .map_err(|why| anyhow::anyhow!("{}: sandbox.cpuset {cpuset:?}: {why}", self.spec_path.display()))?;
        }
        Ok(())
    }

    /// The CPUs each side of a duet is pinned to on a machine with `have` CPUs (numbered from
    /// 0): the first `cpus` for one side, the next for the other; an error when the machine
    /// has fewer than twice the spec's `cpus`.
    pub fn duet_cpus(&self, have: usize) -> anyhow::Result<[String; 2]> {
        let each = self.sandbox.cpus.ceil().max(1.0) as usize;
        if have < 2 * each {
            anyhow::bail!(
                "{}: trials.order = \"duet\" runs both sides at once, each on {each} CPU(s) of its own (sandbox.cpus = \
                 {}): this machine has {have}, fewer than {}",
                self.spec_path.display(),
                self.sandbox.cpus,
                2 * each
            );
        }
        let set = |from: usize| if each == 1 { from.to_string() } else { format!("{from}-{}", from + each - 1) };
        Ok([set(0), set(each)])
    }

    /// [`Plan::duet_cpus`] on this machine.
    pub fn duet_cpus_here(&self) -> anyhow::Result<[String; 2]> {
        self.duet_cpus(bounds::host_cpus().map_or(0, |c| c.len()))
    }

    /// The longest one trial of `phase` takes when every step runs to its timeout.
    pub fn phase_limit_s(&self, phase: Phase) -> f64 {
        let a = &self.agent;
        match phase {
            // Every optional step may run (a revision that has what it needs).
            Phase::Prepare => a
                .prepare
                .commands
                .iter()
                .chain(a.prepare.optional.iter().flat_map(|o| o.commands.iter()))
                .map(|c| c.timeout_s)
                .sum(),
            Phase::Install => {
                a.install.command.timeout_s
                    + 60.0 * a.install.checks.len() as f64
                    + a.install.inventory.as_ref().map_or(0.0, |i| i.timeout_s)
            }
            Phase::Measure => {
                a.measure.startup.as_ref().map_or(0.0, |s| 2.0 * (s.timeout_s + a.measure.settle_s))
                    + a.measure.between.as_ref().map_or(0.0, |b| b.timeout_s)
                    + self.lens_stems_of_phase(phase).len() as f64 * a.lens.timeout_s
            }
            _ => {
                self.section(phase).map_or(0.0, interaction::section_limit_s)
                    + self.lens_stems_of_phase(phase).len() as f64 * a.lens.timeout_s
            }
        }
    }

    /// The steps of `phase` that run under the instruction lens, by the stem of their lens
    /// metrics (`cold`, a command's metric, `script.<name>`, a bench step's `bench.<name>`).
    pub fn lens_stems_of_phase(&self, phase: Phase) -> Vec<String> {
        let a = &self.agent;
        match phase {
            Phase::Measure if a.measure.instructions && a.measure.startup.is_some() => vec![metric::COLD.into()],
            Phase::Prepare | Phase::Install | Phase::Measure => Vec::new(),
            _ => self.section(phase).map_or_else(Vec::new, |s| {
                let commands = s.commands.iter().filter(|c| c.instructions).map(|c| c.metric.clone());
                let scripts = s.scripts.iter().filter(|s| s.instructions).map(|s| format!("script.{}", s.name));
                let benches = s.benches.iter().filter(|b| b.instructions).map(BenchStep::stem);
                commands.chain(scripts).chain(benches).collect()
            }),
        }
    }

    /// Whether any step runs under the instruction lens (the run then needs valgrind).
    pub fn uses_instruction_lens(&self) -> bool {
        Phase::ALL.into_iter().any(|p| !self.lens_stems_of_phase(p).is_empty())
    }

    /// `stems`' lens metrics (`<stem>.instructions`, `<stem>.cycles`), each stem's right after the
    /// metric it belongs to in `metrics` (a script's after its last metric), else at the end.
    fn with_lens_keys(
        metrics: Vec<String>,
        stems: &[String],
        last_of_script: impl Fn(&str) -> Option<String>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let mut placed = Vec::new();
        for key in metrics {
            out.push(key.clone());
            for stem in stems {
                let anchor = last_of_script(stem).unwrap_or_else(|| stem.clone());
                if anchor == key && !placed.contains(stem) {
                    out.extend(lens_keys(stem));
                    placed.push(stem.clone());
                }
            }
        }
        for stem in stems.iter().filter(|s| !placed.contains(s)) {
            out.extend(lens_keys(stem));
        }
        out
    }

    /// The pairs an adaptive run starts from: the most trials of a phase that grows
    /// ([`GROWN`]) and records a metric of `gate` (a `.cpu` companion counts as its metric);
    /// without such a phase, the most trials of either. A phase without gating metrics does not
    /// stand in for the looks: its trials are its own.
    pub fn gated_trials(&self, gate: &[String]) -> u32 {
        let holds = |phase: Phase| gate.iter().any(|key| self.records(phase, key));
        let gated = GROWN.into_iter().filter(|p| holds(*p)).map(|p| self.trials.of(p)).max();
        gated.unwrap_or_else(|| GROWN.into_iter().map(|p| self.trials.of(p)).max().unwrap_or(0))
    }

    /// The bench step (of any section) whose run names `key`, when a judged figure of one does
    /// (`bench.<name>.<benchmark>`, not the step's own companions).
    pub fn bench_step_of(&self, key: &str) -> Option<&BenchStep> {
        use metric::{Facet, MetricKey};
        if !matches!(MetricKey::facet_of(key), Facet::Wall | Facet::Percentile(_) | Facet::Max) {
            return None;
        }
        Phase::ALL
            .into_iter()
            .filter_map(|p| self.section(p))
            .flat_map(|s| &s.benches)
            .find(|b| key.strip_prefix(&b.stem()).is_some_and(|rest| rest.len() > 1 && rest.starts_with('.')))
    }

    /// Whether `key`, which only the run names, gates an adaptive run: when its `[metrics]` block
    /// says so (`gate = true` or `false`); else, with the default gate, when it is a benchmark of
    /// a bench step of a phase that grows (a framework's estimate: a timing, as the default
    /// gate's metrics are).
    pub fn gates_named(&self, key: &str) -> bool {
        self.definitions.gate_of(key).unwrap_or_else(|| {
            !self.trials.gate_given
                && self.bench_step_of(key).is_some()
                && GROWN.into_iter().any(|p| self.records(p, key))
        })
    }

    /// Whether `phase` records `key`: one of its metrics or a facet of one (a companion such as
    /// `.cpu`, a distribution's `.p99` or `.max`), a script's judged peak RSS, or a key only a
    /// run names, under one of its bench steps (`bench.<name>.…`) or scripts (a matrix child's
    /// `<script>.…`).
    pub fn records(&self, phase: Phase, key: &str) -> bool {
        let stem = metric::MetricKey::stem_of(key);
        if self.metrics_of_phase(phase).iter().any(|m| m == key || m == stem)
            || self.peak_rss_keys(phase).iter().any(|m| m == key)
        {
            return true;
        }
        let Some(section) = self.section(phase) else { return false };
        let under = |prefix: &str| key.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('.'));
        section.benches.iter().any(|b| under(&b.stem())) || section.scripts.iter().any(|s| under(&s.name))
    }

    /// Metrics recorded by a phase, as the controller expects them.
    pub fn metrics_of_phase(&self, phase: Phase) -> Vec<String> {
        let a = &self.agent;
        match phase {
            Phase::Prepare if !a.prepare.artifacts.is_empty() => vec![metric::BUNDLE.into()],
            Phase::Install => vec![metric::INSTALL.into()],
            Phase::Measure => {
                let mut m = Vec::new();
                if a.measure.startup.is_some() {
                    m.extend([metric::COLD, metric::WARM, metric::RSS].map(String::from));
                }
                if a.measure.footprint {
                    m.push(metric::DISK.into());
                }
                Self::with_lens_keys(m, &self.lens_stems_of_phase(phase), |_| None)
            }
            _ => {
                let mut m: Vec<String> = Vec::new();
                if let Some(section) = self.section(phase) {
                    for s in &section.scenarios {
                        m.extend(s.metrics());
                    }
                    m.extend(section.commands.iter().map(|c| c.metric.clone()));
                    for s in &section.scripts {
                        m.extend(s.keys());
                    }
                    let last_of_script = |stem: &str| {
                        let name = stem.strip_prefix("script.")?;
                        section.scripts.iter().find(|s| s.name == name)?.keys().last().cloned()
                    };
                    return Self::with_lens_keys(m, &self.lens_stems_of_phase(phase), last_of_script);
                }
                m
            }
        }
    }
}

/// The keys the instruction lens records of a step: `<stem>.instructions`, `<stem>.cycles`.
fn lens_keys(stem: &str) -> [String; 2] {
    metric::Facet::LENS.map(|facet| metric::MetricKey::new(stem, facet).to_string())
}

/// What a sandbox's default lifetime adds to the plan's worst case.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(10 * 60);

/// The default lifetime for a plan's worst case: the worst case and the margin, in whole minutes.
pub fn default_ttl(worst: Duration) -> Duration {
    Duration::from_secs((worst + EXPIRY_MARGIN).as_secs().div_ceil(60) * 60)
}

/// Reads and validates a spec file.
pub fn load(path: &Path) -> Result<Plan, SpecErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        SpecErrors(vec![SpecError {
            file: path.into(),
            line: 0,
            field: "(file)".into(),
            message: format!("cannot read: {e}"),
        }])
    })?;
    parse(path, &text)
}

/// How long `check` waits for a git URL's repository to answer.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// `check`'s look beyond the file: a `source.url` git says does not exist is an error
/// (`git ls-remote`, no prompt, bounded in time). One git cannot reach from this machine (no
/// network here, while the sandbox has one) is not: the warning returned says so. Not part of
/// [`parse`], which touches no network. A local repository is checked by [`parse`] itself.
pub fn check_remote(path: &Path, plan: &Plan) -> Result<Option<String>, SpecErrors> {
    let SourceSettings::Url { url } = &plan.source else { return Ok(None) };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let line = text.lines().position(|l| l.trim_start().starts_with("url")).map_or(0, |i| i + 1);
    let why = match remote_answers(url) {
        Ok(()) => return Ok(None),
        Err(why) => why,
    };
    let absent = ["not found", "does not appear to be a git repository", "does not exist", "no such"]
        .iter()
        .any(|sign| why.to_lowercase().contains(sign));
    if !absent {
        return Ok(Some(format!(
            "{}:{line}: source.url: could not ask whether {url} exists (the sandbox clones it): {why}",
            path.display()
        )));
    }
    Err(SpecErrors(vec![SpecError {
        file: path.into(),
        line,
        field: "source.url".into(),
        message: format!("{url} is not a repository: {why}"),
    }]))
}

fn remote_answers(url: &str) -> Result<(), String> {
    let mut child = std::process::Command::new("git")
        .args(["ls-remote", "--quiet", "--exit-code", "--", url, "HEAD"])
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run git: {e}"))?;
    let deadline = std::time::Instant::now() + REMOTE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {} s", REMOTE_TIMEOUT.as_secs()));
            }
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        use std::io::Read;
        let _ = pipe.by_ref().take(4096).read_to_string(&mut stderr);
    }
    let first = stderr.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("").to_string();
    Err(if first.is_empty() {
        format!("git ls-remote {status}")
    } else {
        crate::sanitize::bounded(&first, 300).into_owned()
    })
}

/// Validates spec text; `path` names the file in errors and anchors relative paths.
pub fn parse(path: &Path, text: &str) -> Result<Plan, SpecErrors> {
    let mut v = Validator { file: path.to_path_buf(), text, errors: Vec::new() };
    let raw: RawSpec = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(err) => {
            let line = err.span().map(|s| v.line(s.start)).unwrap_or(0);
            let message = err.message().trim().to_string();
            let field = field_of_toml_error(&message, text.lines().nth(line.saturating_sub(1)).unwrap_or_default());
            return Err(SpecErrors(vec![SpecError { file: path.into(), line, field, message }]));
        }
    };
    let plan = v.validate(raw);
    if v.errors.is_empty() {
        Ok(plan)
    } else {
        v.errors.sort_by_key(|e| e.line);
        Err(SpecErrors(v.errors))
    }
}

/// The field a parse error is about: the one serde names ("unknown field `x`"), else the key
/// assigned on the error's line, else the error is in the syntax.
fn field_of_toml_error(message: &str, line: &str) -> String {
    if let Some(name) = message.split("field `").nth(1).and_then(|rest| rest.split('`').next()) {
        return name.to_string();
    }
    match line.split_once('=') {
        Some((key, _)) if !key.trim().is_empty() && !key.contains('[') => key.trim().to_string(),
        _ => "(syntax)".to_string(),
    }
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
