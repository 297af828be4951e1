//! The validator: checks a raw spec section by section into a [`Plan`], collecting every error
//! with its line and field. The sandbox, source, trials and cost sections are here; the phases'
//! sections are in `phases` and `runtime` (what only the interactive `transport` and `ui`
//! sections use in `interaction`), the metrics section in `metrics`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbench_proto::Phase;
use sandbench_proto::metric::{Facet, MetricKey};
use sandbench_proto::plan::{AgentPlan, RegistryBridge, Source};
use toml::Spanned;

use super::raw::*;
use super::registries::Network;
use super::validator::Validator;
use super::{Plan, SandboxSettings, SourceSettings, Trials, interaction};
use crate::cost::RateCard;

/// The benchmark users' environment: the bridge's variables (when there is one), then the
/// spec's, which win.
fn bridged_env(
    env: &BTreeMap<String, String>,
    registries: Option<&super::RegistrySettings>,
) -> BTreeMap<String, String> {
    let mut out = registries.map(bridge_environment).unwrap_or_default();
    out.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

/// What points npm, pip and uv at the bridge of `registries`. npm compares its
/// `replace-registry-host` with a tarball URL's host and port (`URL.host`, which leaves out a
/// scheme's default port): a registry on a port of its own keeps it.
fn bridge_environment(registries: &super::RegistrySettings) -> BTreeMap<String, String> {
    let npm_host = registries.npm.as_deref().and_then(|url| {
        let authority = url.split('/').nth(2)?;
        let default_port = if url.starts_with("https://") { ":443" } else { ":80" };
        Some(authority.strip_suffix(default_port).unwrap_or(authority))
    });
    RegistryBridge::environment(registries.port, true, npm_host)
}

const DEFAULT_IMAGE: &str = "node:24-bookworm";
/// Commits a bisection of `run --bisect` visits at most by default: enough for 256 commits.
pub(super) const DEFAULT_BISECT_STEPS: u32 = 8;

impl Validator<'_> {
    /// The whole spec, section by section.
    pub(super) fn validate(&mut self, raw: RawSpec) -> Plan {
        let name = raw.name.get_ref().trim().to_string();
        if name.is_empty() {
            self.error(&raw.name, "name", "expected a non-empty name");
        }
        let mut sandbox = self.sandbox(&raw.sandbox);
        let network = self.network(&raw.sandbox);
        sandbox.network = network == Network::On;
        sandbox.registries = self.registries(&raw.registries, network);
        self.environment(&raw.env, "env", self.line_of("[env]"));
        let source = self.source(&raw.source, sandbox.network);
        let trials = self.trials(&raw.trials);
        let prepare = self.prepare(&raw.prepare, &source);
        let install = self.install(&raw.install);
        self.formats(&prepare, &install);
        let measure = self.measure(raw.measure.as_ref());
        let runtime = self.runtime(&raw.runtime, Phase::Runtime);
        let transport = self.runtime(&raw.transport, Phase::Transport);
        let ui = self.runtime(&raw.ui, Phase::Ui);
        let mut trials = trials;
        // A phase with nothing to record has no trials: it prints nothing and books no time.
        if measure.startup.is_none() && !measure.footprint {
            trials.measure = 0;
        }
        if interaction::is_empty(&runtime) {
            trials.runtime = 0;
        }
        if interaction::is_empty(&transport) {
            trials.transport = 0;
        }
        if interaction::is_empty(&ui) {
            trials.ui = 0;
        }
        let harness = self.harness(&raw.harness);
        let mut agent = AgentPlan {
            source: Source::None,
            prepare,
            install,
            measure,
            runtime,
            transport,
            ui,
            env: bridged_env(&raw.env, sandbox.registries.as_ref()),
            harness,
            lens: self.lens(&raw.lens),
            disk_gb: None,
            registries: sandbox
                .registries
                .as_ref()
                .map(|r| RegistryBridge { port: r.port, env: bridge_environment(r) }),
            // Filled from the steps' `percentiles` and `max` (seeds-steps).
            distributions: Default::default(),
        };
        let cost = self.rates(&raw.cost);
        let rule = self.rule(&raw.report);
        let bisect = super::BisectSettings {
            max_steps: self.count(&raw.bisect.max_steps, "bisect.max_steps", 1, 64, i64::from(DEFAULT_BISECT_STEPS))
                as u32,
        };
        let max_metrics =
            self.count(&raw.report.max_metrics, "report.max_metrics", 1, 65_536, super::DEFAULT_MAX_METRICS) as usize;
        let min_floor = self.non_negative(
            &raw.report.min_floor,
            "report.min_floor",
            super::MAX_MIN_FLOOR,
            super::DEFAULT_MIN_FLOOR,
        );
        let source_max_mb =
            self.number(&raw.source.max_mb, "source.max_mb", 0.0, 1_000_000.0, super::DEFAULT_SOURCE_MAX_MB);
        // The metrics the steps record as distributions (their `percentiles` and `max`).
        agent.distributions = [&agent.runtime, &agent.transport, &agent.ui]
            .into_iter()
            .flat_map(sandbench_proto::plan::Runtime::distributions)
            .collect();
        let ttl = sandbox.ttl;
        sandbox.ttl = Duration::ZERO;
        let mut plan = Plan {
            name,
            spec_path: self.file.clone(),
            sandbox,
            source,
            trials,
            agent,
            metrics: Vec::new(),
            definitions: Default::default(),
            cost,
            rule,
            bisect,
            max_metrics,
            min_floor,
            source_max_bytes: (source_max_mb * 1e6) as u64,
            lens_runs: raw.lens.runs.as_ref().map(|_| self.count(&raw.lens.runs, "lens.runs", 1, 100, 1) as u32),
        };
        (plan.metrics, plan.definitions) = self.metric_definitions(&plan, &raw.metrics);
        (plan.trials.max_pairs, plan.trials.gate) = self.adaptive(&plan, &raw.trials);
        plan.sandbox.ttl = self.expiry(&plan, &raw.sandbox.ttl_minutes, ttl);
        plan
    }

    /// The sandboxes' lifetime: the spec's `ttl_minutes`, which may not be shorter than the
    /// plan's worst case (another controller's reaper would remove a sandbox still in use), or
    /// by default the worst case and a margin.
    fn expiry(&mut self, plan: &Plan, raw: &Option<Spanned<f64>>, ttl: Duration) -> Duration {
        let worst = plan.worst_case();
        match raw {
            Some(minutes) if ttl < worst => {
                self.error(
                    minutes,
                    "sandbox.ttl_minutes",
                    format!(
                        "{} min is shorter than this plan's worst case, {} min (every step at its timeout): {}",
                        minutes.get_ref(),
                        worst.as_secs().div_ceil(60),
                        "a sandbox could expire while the run still needs it; raise it, or leave it out (the \
                         default is the worst case and 10 min)"
                    ),
                );
                ttl
            }
            Some(_) => ttl,
            None => super::default_ttl(worst),
        }
    }

    /// `[lens]`: the V8 seed (default 1) and one lens run's timeout (default 900 s).
    fn lens(&mut self, raw: &super::raw::RawLens) -> sandbench_proto::lens::LensPlan {
        let default = sandbench_proto::lens::LensPlan::default();
        let seed = self.count(&raw.seed, "lens.seed", 0, i64::from(u32::MAX), i64::from(default.seed)) as u32;
        let timeout_s = self.number(&raw.timeout_s, "lens.timeout_s", 0.0, 86_400.0, default.timeout_s);
        sandbench_proto::lens::LensPlan { seed, timeout_s }
    }

    fn rule(&mut self, raw: &RawReport) -> super::Rule {
        let Some(rule) = &raw.rule else { return super::Rule::default() };
        super::Rule::parse(rule.get_ref()).unwrap_or_else(|| {
            self.error(rule, "report.rule", format!("expected \"paired\" or \"reference\", got {:?}", rule.get_ref()));
            super::Rule::default()
        })
    }

    /// `trials.gate` (metrics the plan records, or their `.cpu` companions) and
    /// `trials.max_pairs` (at least the trials of the phases that hold a gating metric: the
    /// pairs an adaptive run starts from, [`Plan::gated_trials`]).
    fn adaptive(&mut self, plan: &Plan, t: &RawTrials) -> (u32, Vec<String>) {
        let gate = self.gate(plan, t);
        let initial = plan.gated_trials(&gate);
        let max_pairs = self.count(&t.max_pairs, "trials.max_pairs", 1, 200, i64::from(initial)) as u32;
        if let Some(m) = &t.max_pairs
            && max_pairs < initial
        {
            self.error(
                m,
                "trials.max_pairs",
                format!("expected at least the trials of the phases that hold the gating metrics ({initial}), got {max_pairs}"),
            );
        }
        (max_pairs.max(initial), gate)
    }

    /// `trials.gate`: the spec's, or the timed metrics of measure and runtime.
    fn gate(&mut self, plan: &Plan, t: &RawTrials) -> Vec<String> {
        let known = |key: &str| {
            let stem = MetricKey::stem_if(key, Facet::Cpu).unwrap_or(key);
            plan.metrics.iter().any(|m| m.key == stem)
        };
        match &t.gate {
            Some(keys) => {
                for key in keys.get_ref().iter().filter(|k| !known(k)) {
                    self.error(keys, "trials.gate", format!("{key:?} is not a metric this spec records"));
                }
                for key in keys.get_ref().iter().filter(|k| MetricKey::facet_of(k).is_lens()) {
                    self.error(
                        keys,
                        "trials.gate",
                        format!("{key:?} is a count of the instruction lens: one pair decides it, so pairs never grow for it"),
                    );
                }
                keys.get_ref().clone()
            }
            None => {
                // Not transport's or ui's: more pairs grow measure and runtime only, the others
                // keep their trial counts, so their verdicts would never settle by waiting.
                // A distribution's facets (`.p50`, `.max`) stand for it; companions (`.cpu`) do not.
                let judged = |key: &String| {
                    matches!(MetricKey::facet_of(key), Facet::Wall | Facet::Percentile(_) | Facet::Max)
                        && [Phase::Measure, Phase::Runtime].into_iter().any(|p| plan.records(p, key))
                };
                let phases: Vec<String> = plan.metrics.iter().map(|m| m.key.clone()).filter(judged).collect();
                let timed = |key: &String| {
                    plan.metrics
                        .iter()
                        .any(|m| &m.key == key && matches!(m.unit.as_str(), "s" | "ms" | "us" | "µs" | "ns"))
                };
                // A block's `gate = false` takes its keys out; `gate = true` puts a key in that
                // is not timed (ignored keys have no definition, so they never are).
                let gated = |key: &String| plan.definitions.gate_of(key).unwrap_or_else(|| timed(key));
                let known = |key: &String| plan.metrics.iter().any(|m| &m.key == key);
                phases.into_iter().filter(|k| known(k) && gated(k)).collect()
            }
        }
    }

    fn sandbox(&mut self, s: &RawSandbox) -> SandboxSettings {
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
        let default_kb = (sandbench_proto::DEFAULT_OUTPUT_CAP_BYTES / 1024) as i64;
        let output_kb = self.count(&s.output_kb, "sandbox.output_kb", 4, 64 * 1024, default_kb);
        let ttl_minutes = self.number(&s.ttl_minutes, "sandbox.ttl_minutes", 0.0, 7.0 * 24.0 * 60.0, 30.0);
        if let Some(cpuset) = &s.cpuset
            && let Err(why) = super::bounds::cpuset(cpuset.get_ref())
        {
            self.error(cpuset, "sandbox.cpuset", why);
        }
        SandboxSettings {
            image,
            cpus,
            cpuset: s.cpuset.as_ref().map(|c| c.get_ref().clone()),
            memory_bytes: (memory_gb * 1024.0 * 1024.0 * 1024.0) as u64,
            disk_gb,
            pids_limit,
            output_cap_bytes: output_kb as u64 * 1024,
            network: false,
            registries: None,
            ttl: Duration::from_secs_f64(ttl_minutes * 60.0),
        }
    }

    /// `network`: whether the sandbox has one (a git URL is cloned inside it).
    fn source(&mut self, raw: &RawSource, network: bool) -> SourceSettings {
        match (&raw.repository, &raw.url) {
            (Some(_), Some(url)) => {
                self.error(url, "source.url", "expected either source.repository or source.url, not both");
                SourceSettings::None
            }
            (Some(repo), None) => {
                let base = self.file.parent().unwrap_or(Path::new("."));
                let joined = base.join(repo.get_ref());
                let mut repository: PathBuf =
                    joined.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect();
                if repository.as_os_str().is_empty() {
                    repository = PathBuf::from(".");
                }
                if !repository.is_dir() {
                    self.error(
                        repo,
                        "source.repository",
                        format!(
                            "no folder {} (source.repository is relative to the spec's folder)",
                            repository.display()
                        ),
                    );
                } else if let Ok(real) = repository.canonicalize()
                    && !real.ancestors().any(|a| a.join(".git").exists())
                {
                    self.error(
                        repo,
                        "source.repository",
                        format!("{} is not in a git repository", repository.display()),
                    );
                }
                SourceSettings::Local { repository }
            }
            (None, Some(url)) => {
                if !network {
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
        }
    }

    fn trials(&mut self, t: &RawTrials) -> Trials {
        Trials {
            install: self.count(&t.install, "trials.install", 1, 10, 3) as u32,
            measure: self.count(&t.measure, "trials.measure", 1, 100, 10) as u32,
            runtime: self.count(&t.runtime, "trials.runtime", 1, 100, 10) as u32,
            transport: self.count(&t.transport, "trials.transport", 1, 100, 10) as u32,
            ui: self.count(&t.ui, "trials.ui", 1, 50, 3) as u32,
            failure_limit: self.count(&t.failure_limit, "trials.failure_limit", 1, 10, 2) as u32,
            max_pairs: 0,
            gate: Vec::new(),
            gate_given: t.gate.is_some(),
            order: self.order(&t.order),
        }
    }

    fn order(&mut self, raw: &Option<Spanned<String>>) -> super::Order {
        let Some(order) = raw else { return super::Order::Auto };
        super::Order::parse(order.get_ref()).unwrap_or_else(|| {
            let names = super::Order::NAMES.map(|n| format!("{n:?}")).join(", ");
            self.error(order, "trials.order", format!("expected one of {names}, got {:?}", order.get_ref()));
            super::Order::default()
        })
    }

    /// The `[cost]` section: the rate card the run is charged at, and its budget.
    fn rates(&mut self, c: &RawCost) -> RateCard {
        RateCard {
            cpu_usd_per_hour: self.non_negative(&c.cpu_usd_per_hour, "cost.cpu_usd_per_hour", 1e6, 0.05),
            memory_usd_per_gb_hour: self.non_negative(
                &c.memory_usd_per_gb_hour,
                "cost.memory_usd_per_gb_hour",
                1e6,
                0.01,
            ),
            disk_usd_per_gb_hour: self.non_negative(&c.disk_usd_per_gb_hour, "cost.disk_usd_per_gb_hour", 1e6, 0.001),
            budget_usd: c.budget_usd.as_ref().map(|_| self.number(&c.budget_usd, "cost.budget_usd", 0.0, 1e6, 1.0)),
        }
    }
}
