//! The `[runtime]` section, and the `[transport]` and `[ui]` sections built the same way:
//! scenarios (with their steps), repeated commands and scripts. What only interactive phases use
//! (fixtures, sockets, keys, timers) is checked in `interaction`.

use std::collections::BTreeMap;

use sandbench_adapters::Format;
use sandbench_proto::plan::{
    Aggregate, BenchStep, Channel, RepeatedCommand, Runtime, Scenario, ScenarioStep, Script, Step,
};
use toml::Spanned;

use super::bounds;
use super::raw::*;
use super::validator::{Validator, json};

/// The most `RESULT` lines a spec may let one script run send (each is an observation in the
/// journal, whose size is bounded).
const MAX_RESULTS_PER_SCRIPT: i64 = 100_000;

impl Validator<'_> {
    /// One section (`runtime`, `transport` or `ui`, named by `section` in errors).
    pub(super) fn runtime(&mut self, raw: &RawRuntime, section: sandbench_proto::Phase) -> Runtime {
        let max_results = self.count(
            &raw.max_results_per_script,
            &format!("{section}.max_results_per_script"),
            1,
            MAX_RESULTS_PER_SCRIPT,
            i64::from(sandbench_proto::plan::DEFAULT_MAX_RESULTS),
        ) as u32;
        for (n, b) in raw.bench.iter().enumerate() {
            let name = b.get_ref().name.get_ref();
            if raw.bench[..n].iter().any(|earlier| earlier.get_ref().name.get_ref() == name) {
                self.error(
                    &b.get_ref().name,
                    &format!("{section}.bench[{n}].name"),
                    format!("another bench step of this section is named {name:?}: their keys would clash"),
                );
            }
        }
        Runtime {
            scenarios: raw
                .scenario
                .iter()
                .enumerate()
                .map(|(n, sc)| self.scenario(&format!("{section}.scenario[{n}]"), sc.get_ref()))
                .collect(),
            commands: raw
                .command
                .iter()
                .enumerate()
                .map(|(n, c)| self.repeated_command(&format!("{section}.command[{n}]"), c.get_ref()))
                .collect(),
            scripts: raw
                .script
                .iter()
                .enumerate()
                .map(|(n, s)| self.script(&format!("{section}.script[{n}]"), s.get_ref(), max_results))
                .collect(),
            benches: raw
                .bench
                .iter()
                .enumerate()
                .map(|(n, b)| self.bench(&format!("{section}.bench[{n}]"), b))
                .collect(),
        }
    }

    fn scenario(&mut self, field: &str, r: &RawScenario) -> Scenario {
        // The agent names files after the scenario, as root.
        self.bounded(&r.name, &format!("{field}.name"), bounds::file_name);
        let cwd = self.bounded_opt(&r.cwd, &format!("{field}.cwd"), bounds::cwd);
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
            self.error(m, &format!("{field}.start_metric"), "a terminal scenario times its start with a `ready` step");
        }
        let steps: Vec<(ScenarioStep, Spanned<String>)> = r
            .step
            .iter()
            .enumerate()
            .filter_map(|(k, st)| {
                let step_field = format!("{field}.step[{k}]");
                let step = self.scenario_step(st.get_ref(), &step_field)?;
                self.check_channel(&step, channel, &st.get_ref().kind, &step_field);
                Some((step, st.get_ref().kind.clone()))
            })
            .collect();
        self.check_timers(&steps, field);
        for (step, kind) in &steps {
            if let (Channel::Socket, ScenarioStep::Request { distribution: Some(_), .. }) = (channel, step) {
                self.error(
                    kind,
                    &format!("{field}.step"),
                    "a socket's requests record a mean or a total: `percentiles` and `max` are for JSON lines",
                );
            }
        }
        let fixture = self.fixture(r, field);
        let socket = self.socket(r, channel, field);
        let (ready_event, id_field) = self.replies(r, channel, field);
        if r.keep && fixture.is_none() {
            self.error(&r.name, &format!("{field}.keep"), "`keep = true` keeps a fixture: expected `fixture`");
        }
        Scenario {
            name: r.name.get_ref().clone(),
            channel,
            command: r.command.get_ref().clone(),
            cwd,
            ready_event,
            id_field,
            keep: r.keep,
            start_metric,
            timeout_s,
            shutdown: r.shutdown.as_ref().map(json),
            fixture,
            socket,
            steps: steps.into_iter().map(|(step, _)| step).collect(),
        }
    }

    fn repeated_command(&mut self, field: &str, r: &RawRepeated) -> RepeatedCommand {
        let metric = self.metric_key(&r.metric, &format!("{field}.metric"));
        let repeat = self.count(&r.repeat, &format!("{field}.repeat"), 1, 10_000, 1) as u32;
        let warmup = self.count(&r.warmup, &format!("{field}.warmup"), 0, 10_000, 0) as u32;
        let aggregate = self.aggregate(&r.aggregate, &format!("{field}.aggregate"), Aggregate::Samples);
        let distribution = self.distribution(&r.percentiles, &r.max, field);
        if distribution.is_some() {
            if repeat < 2 {
                self.error(&r.metric, &format!("{field}.repeat"), "a distribution needs `repeat` of 2 or more");
            }
            if let Some(a) = r.aggregate.as_ref().filter(|_| aggregate != Aggregate::Samples) {
                self.error(
                    a,
                    &format!("{field}.aggregate"),
                    "a distribution's runs are samples: leave `aggregate` out",
                );
            }
        }
        let timeout_s = self.number(&r.timeout_s, &format!("{field}.timeout_s"), 0.0, 3600.0, 60.0);
        let cwd = self.bounded_opt(&r.cwd, &format!("{field}.cwd"), bounds::cwd);
        if r.run.trim().is_empty() {
            self.error(&r.metric, &format!("{field}.run"), "expected the command line to time");
        }
        let prepare = r.prepare.as_ref().and_then(|p| {
            if p.get_ref().trim().is_empty() {
                self.error(p, &format!("{field}.prepare"), "expected a command line, or no `prepare`");
                return None;
            }
            Some(Step { run: p.get_ref().clone(), cwd: cwd.clone(), timeout_s, env: BTreeMap::new() })
        });
        RepeatedCommand {
            metric,
            step: Step { run: r.run.clone(), cwd, timeout_s, env: BTreeMap::new() },
            repeat,
            aggregate,
            warmup,
            prepare,
            instructions: r.instructions,
            distribution,
        }
    }

    /// `[[<section>.bench]]`: its name a key segment (its keys are `bench.<name>.<benchmark>`,
    /// named by the run), its format one the adapters read, its results a path under its
    /// folder or the home (criterion's a folder, so never standard output).
    fn bench(&mut self, field: &str, spanned: &Spanned<RawBench>) -> BenchStep {
        let r = spanned.get_ref();
        let name = r.name.get_ref();
        let segment = !name.is_empty()
            && name.len() <= 64
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !segment {
            self.error(
                &r.name,
                &format!("{field}.name"),
                format!("expected a key segment of 1 to 64 lowercase letters, digits and '_' (its keys are bench.<name>.<benchmark>), got {name:?}"),
            );
        }
        if r.run.get_ref().trim().is_empty() {
            self.error(&r.run, &format!("{field}.run"), "expected the command line that runs the suite");
        }
        let format = match r.format.get_ref().parse::<Format>() {
            Ok(format) => Some(format),
            Err(why) => {
                self.error(&r.format, &format!("{field}.format"), why);
                None
            }
        };
        let cwd = self.bounded_opt(&r.cwd, &format!("{field}.cwd"), bounds::cwd);
        let results = self.bounded_opt(&r.results, &format!("{field}.results"), bounds::cwd);
        if let (Some(format), None) = (format, &results)
            && format.is_directory()
        {
            self.error(
                &r.format,
                &format!("{field}.results"),
                format!(
                    "{} writes a folder, not standard output: expected `results = \"target/criterion\"` (its folder)",
                    format.name()
                ),
            );
        }
        let line = self.line(spanned.span().start);
        self.environment(&r.env, &format!("{field}.env"), line);
        let timeout_s = self.number(&r.timeout_s, &format!("{field}.timeout_s"), 0.0, 86_400.0, 600.0);
        let max_benchmarks = self.count(
            &r.max_benchmarks,
            &format!("{field}.max_benchmarks"),
            1,
            sandbench_adapters::MAX_BENCHMARKS as i64,
            i64::from(sandbench_proto::plan::DEFAULT_MAX_RESULTS),
        ) as u32;
        BenchStep {
            name: name.clone(),
            step: Step { run: r.run.get_ref().clone(), cwd, timeout_s, env: r.env.clone() },
            format: format.map_or_else(|| r.format.get_ref().clone(), |f| f.name().to_string()),
            results,
            max_benchmarks,
            instructions: r.instructions.as_ref().is_some_and(|i| *i.get_ref()),
        }
    }

    fn script(&mut self, field: &str, r: &RawScript, max_results: u32) -> Script {
        self.bounded(&r.name, &format!("{field}.name"), bounds::file_name);
        let cwd = self.bounded_opt(&r.cwd, &format!("{field}.cwd"), bounds::cwd);
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
        let extras = self.script_extras(r, field);
        Script {
            name: r.name.get_ref().clone(),
            step: Step { run: r.run.clone(), cwd, timeout_s, env: BTreeMap::new() },
            metrics: r.metrics.get_ref().clone(),
            value_field: r.value_field.clone(),
            instructions: r.instructions,
            max_results,
            sizes: extras.sizes,
            matrix: extras.matrix,
            distributions: extras.distributions,
            max_samples: extras.max_samples,
            fixture: extras.fixture,
            keep: extras.keep,
        }
    }

    /// `aggregate` of a repeated command (`default` Samples) or a request step (`default` Mean,
    /// where every request is not a sample of its own).
    fn aggregate(&mut self, value: &Option<Spanned<String>>, field: &str, default: Aggregate) -> Aggregate {
        let samples = default == Aggregate::Samples;
        match value.as_ref().map(|v| v.get_ref().as_str()) {
            None => default,
            Some("mean") => Aggregate::Mean,
            Some("total") => Aggregate::Total,
            Some("samples") if samples => Aggregate::Samples,
            Some(other) => {
                if let Some(v) = value {
                    let expected = if samples { "\"samples\", \"mean\" or \"total\"" } else { "\"mean\" or \"total\"" };
                    self.error(v, field, format!("expected {expected}, got {other:?}"));
                }
                default
            }
        }
    }

    pub(super) fn scenario_step(&mut self, r: &RawStep, field: &str) -> Option<ScenarioStep> {
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
            "request" => self.request_step(r, field, metric),
            "interrupt" => {
                let metric = need_metric(self, "interrupt")?;
                match (&r.send, &r.marker, &r.interrupt) {
                    (Some(toml::Value::Table(send)), Some(marker), Some(interrupt)) => Some(ScenarioStep::Interrupt {
                        metric,
                        send: json(send),
                        marker: marker.clone(),
                        interrupt: json(interrupt),
                        expect: self.step_expect(r, field),
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
            "size" => self.size_step(r, field, metric),
            "batch" => self.batch_step(r, field, metric),
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
                            "expected request, batch, interrupt, memory, cpu, size, restart, settle, ready, type, keys, \
                             wait_for, retry, start_timer, stop_timer, send or collect, got {other:?}"
                        ),
                    );
                    None
                }
            },
        }
    }

    fn request_step(&mut self, r: &RawStep, field: &str, metric: Option<String>) -> Option<ScenarioStep> {
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
        let repeat = self.count(&r.repeat, &format!("{field}.repeat"), 1, 100_000, 1) as u32;
        let distribution = self.distribution(&r.percentiles, &r.max, field);
        if distribution.is_some() {
            if metric.is_none() || repeat < 2 {
                self.error(&r.kind, field, "a distribution needs `metric` and `repeat` of 2 or more");
            }
            if let Some(a) = &r.aggregate {
                self.error(
                    a,
                    &format!("{field}.aggregate"),
                    "a distribution's requests are samples: leave `aggregate` out",
                );
            }
        }
        Some(ScenarioStep::Request {
            metric,
            send,
            repeat,
            aggregate: self.aggregate(&r.aggregate, &format!("{field}.aggregate"), Aggregate::Mean),
            expect: self.step_expect(r, field),
            output_bytes,
            distribution,
        })
    }

    /// The ready event and the reply id field of a JSON-lines scenario: without `id_field`,
    /// `ready_event` defaults to "ready"; with it, no ready event unless one is named (then a
    /// `start_metric` needs one).
    fn replies(&mut self, r: &RawScenario, channel: Channel, field: &str) -> (Option<String>, Option<String>) {
        let Some(id) = &r.id_field else {
            return (Some(r.ready_event.clone().unwrap_or_else(|| "ready".into())), None);
        };
        let name = id.get_ref().trim();
        if channel != Channel::JsonLines {
            self.error(
                id,
                &format!("{field}.id_field"),
                "`id_field` is for JSON-lines scenarios (a socket names its own)",
            );
        } else if name.is_empty() || name.len() > 128 {
            self.error(
                id,
                &format!("{field}.id_field"),
                "expected the name of the field replies carry the request id in",
            );
        }
        if let (None, Some(m)) = (&r.ready_event, &r.start_metric) {
            self.error(
                m,
                &format!("{field}.start_metric"),
                "timing the start needs `ready_event` (the event that says the child is ready)",
            );
        }
        (r.ready_event.clone(), Some(name.to_string()))
    }
}
