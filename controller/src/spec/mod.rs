//! The bench spec: TOML parsed into a raw form ([`raw`]), then validated into a [`Plan`]. Every
//! error names the file, the line and the field, and says what was expected; all errors are
//! reported at once.

mod describe;
mod interaction;
pub mod metrics;
mod raw;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbench_proto::plan::{
    AgentPlan, Aggregate, Channel, Check, Fixture, Install, Measure, Prepare, RepeatedCommand, Runtime, Scenario,
    ScenarioStep, Script, Source, Startup, Step,
};
use serde::Serialize;
use toml::Spanned;

pub use describe::describe;
pub use metrics::MetricDef;
use raw::*;

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
    pub network: bool,
    pub ttl: Duration,
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
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateCard {
    pub cpu_usd_per_hour: f64,
    pub memory_usd_per_gb_hour: f64,
    pub disk_usd_per_gb_hour: f64,
    pub budget_usd: Option<f64>,
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
    pub cost: RateCard,
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

    /// The longest one trial of `phase` takes when every step runs to its timeout.
    pub fn phase_limit_s(&self, phase: &str) -> f64 {
        let a = &self.agent;
        match phase {
            "prepare" => a.prepare.commands.iter().map(|c| c.timeout_s).sum(),
            "install" => a.install.command.timeout_s + 60.0 * a.install.checks.len() as f64,
            "measure" => {
                a.measure.startup.as_ref().map_or(0.0, |s| 2.0 * (s.timeout_s + a.measure.settle_s))
                    + a.measure.between.as_ref().map_or(0.0, |b| b.timeout_s)
            }
            _ => self.section(phase).map_or(0.0, interaction::section_limit_s),
        }
    }

    /// Metrics recorded by a phase, as the controller expects them.
    pub fn metrics_of_phase(&self, phase: &str) -> Vec<String> {
        let a = &self.agent;
        match phase {
            "prepare" if !a.prepare.artifacts.is_empty() => vec!["bundle".into()],
            "install" => vec!["install".into()],
            "measure" => {
                let mut m = Vec::new();
                if a.measure.startup.is_some() {
                    m.extend(["cold".to_string(), "warm".into(), "rss".into()]);
                }
                if a.measure.footprint {
                    m.push("disk".into());
                }
                m
            }
            _ => {
                let mut m: Vec<String> = Vec::new();
                if let Some(section) = self.section(phase) {
                    for s in &section.scenarios {
                        m.extend(s.metrics());
                    }
                    m.extend(section.commands.iter().map(|c| c.metric.clone()));
                    for s in &section.scripts {
                        m.extend(s.metrics.iter().cloned());
                    }
                }
                m
            }
        }
    }
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

struct Validator<'a> {
    file: PathBuf,
    text: &'a str,
    errors: Vec<SpecError>,
}

const DEFAULT_IMAGE: &str = "node:24-bookworm";

impl Validator<'_> {
    fn line(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())].matches('\n').count() + 1
    }

    fn error<T>(&mut self, at: &Spanned<T>, field: &str, message: impl Into<String>) {
        self.errors.push(SpecError {
            file: self.file.clone(),
            line: self.line(at.span().start),
            field: field.into(),
            message: message.into(),
        });
    }

    fn error_at(&mut self, line: usize, field: &str, message: impl Into<String>) {
        self.errors.push(SpecError { file: self.file.clone(), line, field: field.into(), message: message.into() });
    }

    /// A number in (lo, hi], or the default.
    fn number(&mut self, value: &Option<Spanned<f64>>, field: &str, lo: f64, hi: f64, default: f64) -> f64 {
        match value {
            None => default,
            Some(v) if v.get_ref().is_finite() && *v.get_ref() > lo && *v.get_ref() <= hi => *v.get_ref(),
            Some(v) => {
                self.error(
                    v,
                    field,
                    format!("expected a number greater than {lo} and at most {hi}, got {}", v.get_ref()),
                );
                default
            }
        }
    }

    /// A number in [0, hi], or the default.
    fn non_negative(&mut self, value: &Option<Spanned<f64>>, field: &str, hi: f64, default: f64) -> f64 {
        match value {
            Some(v) if !(v.get_ref().is_finite() && *v.get_ref() >= 0.0 && *v.get_ref() <= hi) => {
                self.error(v, field, format!("expected a number from 0 to {hi}, got {}", v.get_ref()));
                default
            }
            Some(v) => *v.get_ref(),
            None => default,
        }
    }

    /// The line where `needle` first appears (to place errors about things without a span).
    fn line_of(&self, needle: &str) -> usize {
        self.text.find(needle).map(|at| self.line(at)).unwrap_or(1)
    }

    fn count(&mut self, value: &Option<Spanned<i64>>, field: &str, lo: i64, hi: i64, default: i64) -> i64 {
        match value {
            None => default,
            Some(v) if (lo..=hi).contains(v.get_ref()) => *v.get_ref(),
            Some(v) => {
                self.error(v, field, format!("expected a whole number from {lo} to {hi}, got {}", v.get_ref()));
                default
            }
        }
    }

    fn metric_key(&mut self, key: &Spanned<String>, field: &str) -> String {
        let k = key.get_ref();
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
            self.error(key, field, format!("expected a metric key of lowercase letters, digits and '_', got {k:?}"));
        }
        k.clone()
    }

    fn validate(&mut self, raw: RawSpec) -> Plan {
        let name = raw.name.get_ref().trim().to_string();
        if name.is_empty() {
            self.error(&raw.name, "name", "expected a non-empty name");
        }
        let s = &raw.sandbox;
        let image = s.image.as_ref().map(|i| i.get_ref().clone()).unwrap_or_else(|| DEFAULT_IMAGE.to_string());
        if let Some(i) = &s.image
            && i.get_ref().trim().is_empty()
        {
            self.error(i, "sandbox.image", "expected an image reference such as node:24-bookworm");
        }
        let cpus = self.number(&s.cpus, "sandbox.cpus", 0.0, 64.0, 2.0);
        let memory_gb = self.number(&s.memory_gb, "sandbox.memory_gb", 0.0, 512.0, 4.0);
        let disk_gb = self.number(&s.disk_gb, "sandbox.disk_gb", 0.0, 10_000.0, 20.0);
        let pids_limit = self.count(&s.pids, "sandbox.pids", 16, 1_000_000, 4096);
        let ttl_minutes = self.number(&s.ttl_minutes, "sandbox.ttl_minutes", 0.0, 24.0 * 60.0, 30.0);
        let sandbox = SandboxSettings {
            image,
            cpus,
            cpuset: s.cpuset.clone(),
            memory_bytes: (memory_gb * 1024.0 * 1024.0 * 1024.0) as u64,
            disk_gb,
            pids_limit,
            network: s.network,
            ttl: Duration::from_secs_f64(ttl_minutes * 60.0),
        };

        let source = match (&raw.source.repository, &raw.source.url) {
            (Some(_), Some(url)) => {
                self.error(url, "source.url", "expected either source.repository or source.url, not both");
                SourceSettings::None
            }
            (Some(repo), None) => {
                let base = self.file.parent().unwrap_or(Path::new("."));
                let joined = base.join(repo.get_ref());
                let repository: PathBuf =
                    joined.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect();
                SourceSettings::Local { repository }
            }
            (None, Some(url)) => {
                if !s.network {
                    self.error(
                        url,
                        "source.url",
                        "a git URL is cloned inside the sandbox, which needs sandbox.network = true",
                    );
                }
                if url.get_ref().contains('\'') || url.get_ref().trim().is_empty() {
                    self.error(url, "source.url", "expected a git URL without quotes");
                }
                SourceSettings::Url { url: url.get_ref().clone() }
            }
            (None, None) => SourceSettings::None,
        };

        let t = &raw.trials;
        let trials = Trials {
            install: self.count(&t.install, "trials.install", 1, 10, 3) as u32,
            measure: self.count(&t.measure, "trials.measure", 1, 100, 10) as u32,
            runtime: self.count(&t.runtime, "trials.runtime", 1, 100, 10) as u32,
            transport: self.count(&t.transport, "trials.transport", 1, 100, 10) as u32,
            ui: self.count(&t.ui, "trials.ui", 1, 50, 3) as u32,
            failure_limit: self.count(&t.failure_limit, "trials.failure_limit", 1, 10, 2) as u32,
        };

        let p = &raw.prepare;
        let prepare_timeout = self.number(&p.timeout_s, "prepare.timeout_s", 0.0, 86_400.0, 1800.0);
        let origin_port = p.origin_port.as_ref().map(|port| {
            if !(1..=65_535).contains(port.get_ref()) {
                self.error(
                    port,
                    "prepare.origin_port",
                    format!("expected a TCP port from 1 to 65535, got {}", port.get_ref()),
                );
            }
            *port.get_ref() as u16
        });
        for (i, a) in p.artifacts.iter().enumerate() {
            if a.get_ref().split('/').any(|s| s == "..") || a.get_ref().starts_with('/') {
                self.error(a, &format!("prepare.artifacts[{i}]"), "expected a path inside the source folder");
            }
        }
        if !p.artifacts.is_empty() && matches!(source, SourceSettings::None) {
            self.error(
                &p.artifacts[0],
                "prepare.artifacts",
                "artifacts are collected from the source, but the spec has no [source]",
            );
        }
        let prepare = Prepare {
            commands: p.commands.iter().map(|c| step(c.get_ref(), prepare_timeout)).collect(),
            artifacts: p.artifacts.iter().map(|a| a.get_ref().clone()).collect(),
            release_dir: p.release_dir.as_ref().map(|d| d.get_ref().clone()),
            origin_port,
        };

        let install_line = self.line(raw.install.span().start);
        let i = raw.install.get_ref();
        let install_timeout = self.number(&i.timeout_s, "install.timeout_s", 0.0, 86_400.0, 240.0);
        if i.command.get_ref().trim().is_empty() {
            self.error(&i.command, "install.command", "expected the command that installs the product");
        }
        let mut checks = Vec::new();
        for (n, c) in i.checks.iter().enumerate() {
            let field = format!("install.checks[{n}]");
            let raw_check = c.get_ref();
            let kinds =
                [raw_check.output.is_some(), raw_check.file_exists.is_some(), raw_check.file_starts_with.is_some()];
            if kinds.iter().filter(|k| **k).count() != 1 {
                self.error(
                    c,
                    &field,
                    "expected exactly one of output (with contains), file_exists, file_starts_with (with prefix)",
                );
                continue;
            }
            if let Some(run) = &raw_check.output {
                match &raw_check.contains {
                    Some(contains) => checks.push(Check::Output { run: run.clone(), contains: contains.clone() }),
                    None => self.error(c, &field, "an output check needs `contains`"),
                }
            } else if let Some(path) = &raw_check.file_exists {
                checks.push(Check::FileExists { path: path.clone() });
            } else if let Some(path) = &raw_check.file_starts_with {
                match raw_check.prefix.as_deref().map(unescape) {
                    Some(Ok(prefix)) if !prefix.is_empty() => {
                        checks.push(Check::FileStartsWith { path: path.clone(), prefix })
                    }
                    Some(Err(why)) => self.error(c, &format!("{field}.prefix"), why),
                    _ => self.error(c, &field, "a file_starts_with check needs a non-empty `prefix`"),
                }
            }
        }
        let footprint_excludes = i.footprint_excludes.clone().unwrap_or_else(|| {
            [".cache", ".npm", "*.log", "sessions", "session-artifacts", "workspace"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        });
        let fixture = i.fixture.as_ref().map(|f| Fixture {
            dir: f.dir.clone(),
            files: f.files.clone(),
            git: f.git,
            home_files: f.home_files.clone(),
        });
        if let Some(f) = &fixture {
            for path in f.files.keys().chain(f.home_files.keys()).chain([&f.dir]) {
                if path.split('/').any(|s| s == "..") || path.starts_with('/') {
                    self.error_at(
                        install_line,
                        "install.fixture",
                        format!("expected paths inside the home, got {path:?}"),
                    );
                }
            }
        }
        let install = Install {
            command: Step {
                run: i.command.get_ref().clone(),
                cwd: None,
                timeout_s: install_timeout,
                env: i.env.clone(),
            },
            checks,
            fixture,
            footprint_excludes,
        };

        let measure = match &raw.measure {
            None => Measure { startup: None, between: None, settle_s: 1.0, footprint: false },
            Some(m) => {
                let timeout_s = self.number(&m.timeout_s, "measure.timeout_s", 0.0, 3600.0, 30.0);
                let settle_s = self.non_negative(&m.settle_s, "measure.settle_s", 600.0, 1.0);
                let startup = m.startup.as_ref().and_then(|cmd| {
                    if cmd.get_ref().is_empty() || cmd.get_ref()[0].trim().is_empty() {
                        self.error(cmd, "measure.startup", "expected the command line of the program, e.g. [\"demo\"]");
                        None
                    } else {
                        Some(Startup { command: cmd.get_ref().clone(), cwd: m.cwd.clone(), timeout_s })
                    }
                });
                if let Some(between) = &m.between
                    && startup.is_none()
                {
                    self.error(
                        between,
                        "measure.between",
                        "runs between the cold and warm start, so it needs measure.startup",
                    );
                }
                let between = m.between.as_ref().map(|b| Step {
                    run: b.get_ref().clone(),
                    cwd: None,
                    timeout_s: 120.0,
                    env: BTreeMap::new(),
                });
                Measure { startup, between, settle_s, footprint: m.footprint }
            }
        };

        let runtime = self.runtime(&raw.runtime, "runtime");
        let transport = self.runtime(&raw.transport, "transport");
        let ui = self.runtime(&raw.ui, "ui");
        let mut trials = trials;
        if interaction::is_empty(&transport) {
            trials.transport = 0;
        }
        if interaction::is_empty(&ui) {
            trials.ui = 0;
        }
        let harness = self.harness(&raw.harness);
        let agent = AgentPlan {
            source: Source::None,
            prepare,
            install,
            measure,
            runtime,
            transport,
            ui,
            env: raw.env.clone(),
            harness,
        };

        let c = &raw.cost;
        let cost = RateCard {
            cpu_usd_per_hour: self.non_negative(&c.cpu_usd_per_hour, "cost.cpu_usd_per_hour", 1e6, 0.05),
            memory_usd_per_gb_hour: self.non_negative(
                &c.memory_usd_per_gb_hour,
                "cost.memory_usd_per_gb_hour",
                1e6,
                0.01,
            ),
            disk_usd_per_gb_hour: self.non_negative(&c.disk_usd_per_gb_hour, "cost.disk_usd_per_gb_hour", 1e6, 0.001),
            budget_usd: c.budget_usd.as_ref().map(|_| self.number(&c.budget_usd, "cost.budget_usd", 0.0, 1e6, 1.0)),
        };

        let mut plan =
            Plan { name, spec_path: self.file.clone(), sandbox, source, trials, agent, metrics: Vec::new(), cost };
        plan.metrics = self.metric_definitions(&plan, &raw.metrics);
        plan
    }

    fn runtime(&mut self, raw: &RawRuntime, section: &str) -> Runtime {
        let mut runtime = Runtime::default();
        for (n, sc) in raw.scenario.iter().enumerate() {
            let r = sc.get_ref();
            let field = format!("{section}.scenario[{n}]");
            if r.command.get_ref().is_empty() {
                self.error(&r.command, &format!("{field}.command"), "expected the command line of the child");
            }
            let timeout_s = self.number(&r.timeout_s, &format!("{field}.timeout_s"), 0.0, 3600.0, 30.0);
            let channel = match r.channel.as_ref().map(|c| c.get_ref().as_str()) {
                None | Some("jsonl") => Channel::JsonLines,
                Some("terminal") => Channel::Terminal,
                Some("socket") => Channel::Socket,
                Some(other) => {
                    if let Some(c) = &r.channel {
                        self.error(
                            c,
                            &format!("{field}.channel"),
                            format!("expected \"jsonl\", \"terminal\" or \"socket\", got {other:?}"),
                        );
                    }
                    Channel::JsonLines
                }
            };
            let start_metric = r.start_metric.as_ref().map(|m| self.metric_key(m, &format!("{field}.start_metric")));
            if let (Channel::Terminal, Some(m)) = (channel, &r.start_metric) {
                self.error(
                    m,
                    &format!("{field}.start_metric"),
                    "a terminal scenario times its start with a `ready` step",
                );
            }
            let mut steps = Vec::new();
            for (k, st) in r.step.iter().enumerate() {
                let step_field = format!("{field}.step[{k}]");
                if let Some(step) = self.scenario_step(st.get_ref(), &step_field) {
                    self.check_channel(&step, channel, &st.get_ref().kind, &step_field);
                    steps.push((step, st.get_ref().kind.clone()));
                }
            }
            self.check_timers(&steps, &field);
            let steps = steps.into_iter().map(|(step, _)| step).collect();
            let fixture = self.fixture(r, &field);
            let socket = self.socket(r, channel, &field);
            runtime.scenarios.push(Scenario {
                name: r.name.get_ref().clone(),
                channel,
                command: r.command.get_ref().clone(),
                cwd: r.cwd.clone(),
                ready_event: r.ready_event.clone().unwrap_or_else(|| "ready".into()),
                start_metric,
                timeout_s,
                shutdown: r.shutdown.as_ref().map(json),
                fixture,
                socket,
                steps,
            });
        }
        for (n, c) in raw.command.iter().enumerate() {
            let r = c.get_ref();
            let field = format!("{section}.command[{n}]");
            let metric = self.metric_key(&r.metric, &format!("{field}.metric"));
            let repeat = self.count(&r.repeat, &format!("{field}.repeat"), 1, 10_000, 1) as u32;
            let aggregate = self.aggregate(&r.aggregate, &format!("{field}.aggregate"));
            let timeout_s = self.number(&r.timeout_s, &format!("{field}.timeout_s"), 0.0, 3600.0, 60.0);
            runtime.commands.push(RepeatedCommand {
                metric,
                step: Step { run: r.run.clone(), cwd: r.cwd.clone(), timeout_s, env: BTreeMap::new() },
                repeat,
                aggregate,
            });
        }
        for (n, s) in raw.script.iter().enumerate() {
            let r = s.get_ref();
            let field = format!("{section}.script[{n}]");
            if r.metrics.get_ref().is_empty() {
                self.error(&r.metrics, &format!("{field}.metrics"), "expected the metric keys the script reports");
            }
            for m in r.metrics.get_ref() {
                let key = Spanned::new(r.metrics.span(), m.clone());
                self.metric_key(&key, &format!("{field}.metrics"));
            }
            let timeout_s = self.number(&r.timeout_s, &format!("{field}.timeout_s"), 0.0, 86_400.0, 600.0);
            if r.value_field.is_some() && r.metrics.get_ref().len() != 1 {
                self.error(
                    &r.metrics,
                    &format!("{field}.metrics"),
                    "a script read by `value_field` reports exactly one metric",
                );
            }
            runtime.scripts.push(Script {
                name: r.name.get_ref().clone(),
                step: Step { run: r.run.clone(), cwd: r.cwd.clone(), timeout_s, env: BTreeMap::new() },
                metrics: r.metrics.get_ref().clone(),
                value_field: r.value_field.clone(),
            });
        }
        runtime
    }

    fn aggregate(&mut self, value: &Option<Spanned<String>>, field: &str) -> Aggregate {
        match value.as_ref().map(|v| v.get_ref().as_str()) {
            None | Some("mean") => Aggregate::Mean,
            Some("total") => Aggregate::Total,
            Some(other) => {
                if let Some(v) = value {
                    self.error(v, field, format!("expected \"mean\" or \"total\", got {other:?}"));
                }
                Aggregate::Mean
            }
        }
    }

    fn scenario_step(&mut self, r: &RawStep, field: &str) -> Option<ScenarioStep> {
        let metric = r.metric.as_ref().map(|m| self.metric_key(m, &format!("{field}.metric")));
        let need_metric = |v: &mut Self, what: &str| -> Option<String> {
            if metric.is_none() {
                v.error(
                    &r.kind,
                    &format!("{field}.metric"),
                    format!("a {what} step records a metric: expected `metric`"),
                );
            }
            metric.clone()
        };
        match r.kind.get_ref().as_str() {
            "request" => {
                let send = match &r.send {
                    Some(toml::Value::Table(t)) => json(t),
                    Some(toml::Value::Array(items)) if !items.is_empty() && items.iter().all(toml::Value::is_table) => {
                        serde_json::to_value(items).unwrap_or_default()
                    }
                    _ => {
                        self.error(
                            &r.kind,
                            &format!("{field}.send"),
                            "a request step needs `send`: a request object, or a list of them used in turn",
                        );
                        return None;
                    }
                };
                let output_bytes = r
                    .output_bytes
                    .as_ref()
                    .map(|b| self.count(&Some(b.clone()), &format!("{field}.output_bytes"), 0, i64::MAX, 0) as u64);
                Some(ScenarioStep::Request {
                    metric,
                    send,
                    repeat: self.count(&r.repeat, &format!("{field}.repeat"), 1, 100_000, 1) as u32,
                    aggregate: self.aggregate(&r.aggregate, &format!("{field}.aggregate")),
                    expect: json_map(r.expect.as_ref()),
                    output_bytes,
                })
            }
            "interrupt" => {
                let metric = need_metric(self, "interrupt")?;
                match (&r.send, &r.marker, &r.interrupt) {
                    (Some(toml::Value::Table(send)), Some(marker), Some(interrupt)) => Some(ScenarioStep::Interrupt {
                        metric,
                        send: json(send),
                        marker: marker.clone(),
                        interrupt: json(interrupt),
                        expect: json_map(r.expect.as_ref()),
                    }),
                    _ => {
                        self.error(&r.kind, field, "an interrupt step needs `send`, `marker` and `interrupt`");
                        None
                    }
                }
            }
            "memory" => Some(ScenarioStep::Memory { metric: need_metric(self, "memory")? }),
            "cpu" => Some(ScenarioStep::Cpu { metric: need_metric(self, "cpu")? }),
            "ready" => Some(ScenarioStep::Ready { metric }),
            "type" => {
                let Some(text) = r.text.clone().filter(|t| !t.is_empty()) else {
                    self.error(&r.kind, &format!("{field}.text"), "a type step needs `text`");
                    return None;
                };
                Some(ScenarioStep::Type { text })
            }
            "restart" => Some(ScenarioStep::Restart { metric }),
            "settle" => {
                let seconds = self.number(&r.seconds, &format!("{field}.seconds"), 0.0, 3600.0, 1.0);
                Some(ScenarioStep::Settle { seconds })
            }
            other => match self.interaction_step(r, field, metric) {
                Some(step) => step,
                None => {
                    self.error(
                        &r.kind,
                        &format!("{field}.kind"),
                        format!(
                            "expected request, interrupt, memory, cpu, restart, settle, ready, type, keys, wait_for, \
                             retry, start_timer, stop_timer, send or collect, got {other:?}"
                        ),
                    );
                    None
                }
            },
        }
    }

    /// Definitions for every metric the plan records: the spec's own, else the built-in ones.
    fn metric_definitions(&mut self, plan: &Plan, raw: &BTreeMap<String, Spanned<RawMetric>>) -> Vec<MetricDef> {
        let mut produced: Vec<String> = Vec::new();
        let phases = std::iter::once("prepare").chain(plan.timed_phases().into_iter().map(|(p, _)| p));
        for phase in phases {
            for m in plan.metrics_of_phase(phase) {
                if produced.contains(&m) {
                    let line = self.line_of(&format!("\"{m}\""));
                    self.error_at(line, &format!("metrics.{m}"), "two steps record this metric; give each its own key");
                } else {
                    produced.push(m);
                }
            }
        }
        let mut defs = Vec::new();
        for key in &produced {
            let built_in = metrics::built_in(key);
            let def = match (raw.get(key), built_in) {
                (Some(r), base) => self.metric(key, r, base),
                (None, Some(base)) => Some(base),
                (None, None) => {
                    let line = self.line_of(&format!("\"{key}\""));
                    self.error_at(line, &format!("metrics.{key}"), "this metric is recorded but not defined: add [metrics.KEY] with title, unit, scale, absolute and relative");
                    None
                }
            };
            defs.extend(def);
        }
        let produced: BTreeSet<&String> = produced.iter().collect();
        for (key, r) in raw {
            if !produced.contains(key) {
                self.error(r, &format!("metrics.{key}"), "defined, but no phase records it");
            }
        }
        metrics::report_order(defs)
    }

    fn metric(&mut self, key: &str, r: &Spanned<RawMetric>, base: Option<MetricDef>) -> Option<MetricDef> {
        let m = r.get_ref();
        let field = format!("metrics.{key}");
        let (Some(title), Some(unit)) = (
            m.title.clone().or(base.as_ref().map(|b| b.title.clone())),
            m.unit.clone().or(base.as_ref().map(|b| b.unit.clone())),
        ) else {
            self.error(r, &field, "expected a title and a unit");
            return None;
        };
        let base_scale = base.as_ref().map_or(1.0, |b| b.scale);
        let base_abs = base.as_ref().map_or(0.0, |b| b.absolute);
        let base_rel = base.as_ref().map_or(0.2, |b| b.relative);
        Some(MetricDef {
            key: key.into(),
            title,
            unit,
            scale: self.number(&m.scale, &format!("{field}.scale"), 0.0, 1e12, base_scale),
            absolute: self.non_negative(&m.absolute, &format!("{field}.absolute"), 1e15, base_abs),
            relative: self.non_negative(&m.relative, &format!("{field}.relative"), 10.0, base_rel),
            group: m.group.clone().or(base.map(|b| b.group)).unwrap_or_else(|| "Metrics".into()),
        })
    }
}

fn step(run: &str, timeout_s: f64) -> Step {
    Step { run: run.to_string(), cwd: None, timeout_s, env: BTreeMap::new() }
}

fn json(table: &toml::Table) -> serde_json::Value {
    serde_json::to_value(table).unwrap_or(serde_json::Value::Null)
}

fn json_map(table: Option<&toml::Table>) -> serde_json::Map<String, serde_json::Value> {
    match table.map(json) {
        Some(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

/// Text with `\xNN` escapes into bytes.
fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'x') {
            let hex = text.get(i + 2..i + 4).ok_or("expected two hex digits after \\x")?;
            out.push(
                u8::from_str_radix(hex, 16).map_err(|_| format!("expected two hex digits after \\x, got {hex:?}"))?,
            );
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
