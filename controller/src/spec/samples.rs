//! Steps of the seeds' benchmark shapes (issue 33): a path's size (`kind = "size"`, a script's
//! `sizes`), a JSON-lines `batch` of pipelined requests, distributions of samples
//! (`percentiles`, `max`), a script's `matrix` of parameters and inputs kept across trials.

use std::collections::BTreeMap;

use sandbench_proto::plan::{Distribution, MatrixParam, ScenarioStep, SizeSpec, Step, is_segment};
use toml::Spanned;

use super::raw::*;
use super::validator::Validator;

/// Requests one batch step may send in all, and at once.
const MAX_BATCH_COUNT: i64 = 1_000_000;
const MAX_BATCH_SIZE: i64 = 4096;
/// Combinations one script's matrix may have (each is a child process per trial).
const MAX_COMBINATIONS: usize = 1000;

impl Validator<'_> {
    /// `percentiles = [50, 95, 99]` and `max = true` of a step: None when neither is given.
    pub(super) fn distribution(
        &mut self,
        percentiles: &Option<Spanned<Vec<i64>>>,
        max: &Option<Spanned<bool>>,
        field: &str,
    ) -> Option<Distribution> {
        if percentiles.is_none() && max.is_none() {
            return None;
        }
        let mut kept: Vec<u8> = Vec::new();
        if let Some(list) = percentiles {
            for &p in list.get_ref() {
                match u8::try_from(p) {
                    Ok(p) if (1..=99).contains(&p) && kept.last().is_none_or(|&last| last < p) => kept.push(p),
                    _ => {
                        self.error(
                            list,
                            &format!("{field}.percentiles"),
                            format!("expected integers from 1 to 99 in ascending order, without repeats; got {p}"),
                        );
                        return None;
                    }
                }
            }
        }
        let max_on = max.as_ref().is_some_and(|m| *m.get_ref());
        if kept.is_empty() && !max_on {
            let at = percentiles.as_ref().map(|p| p.span()).or(max.as_ref().map(|m| m.span())).unwrap_or_default();
            let line = self.line(at.start);
            self.error_at(line, field, "a distribution derives at least one percentile or `max = true`");
            return None;
        }
        Some(Distribution { percentiles: kept, max: max_on })
    }

    /// `kind = "size"`: a metric and a path.
    pub(super) fn size_step(&mut self, r: &RawStep, field: &str, metric: Option<String>) -> Option<ScenarioStep> {
        let Some(metric) = metric else {
            self.error(&r.kind, &format!("{field}.metric"), "a size step records a metric: expected `metric`");
            return None;
        };
        let Some(path) = &r.path else {
            self.error(&r.kind, &format!("{field}.path"), "a size step needs `path` (e.g. \"~/store/data.sqlite*\")");
            return None;
        };
        let path = self.size_path(path, &format!("{field}.path"))?;
        Some(ScenarioStep::Size { metric, path })
    }

    /// A path to size: `~/…`, absolute or relative to the step's folder, maybe a glob.
    fn size_path(&mut self, path: &Spanned<String>, field: &str) -> Option<String> {
        let p = path.get_ref().trim();
        if p.is_empty() || p.contains('\0') {
            self.error(path, field, "expected a path (`~/` is the user's home; a glob is allowed)");
            return None;
        }
        if let Err(err) = glob::Pattern::new(p) {
            self.error(path, field, format!("not a valid glob: {err}"));
            return None;
        }
        Some(p.to_string())
    }

    /// `kind = "batch"`: `send`, `count`, `size`, `metric`, `expect`, a distribution.
    pub(super) fn batch_step(&mut self, r: &RawStep, field: &str, metric: Option<String>) -> Option<ScenarioStep> {
        let Some(metric) = metric else {
            self.error(
                &r.kind,
                &format!("{field}.metric"),
                "a batch step records each request's latency: expected `metric`",
            );
            return None;
        };
        let send = match &r.send {
            Some(toml::Value::Table(t)) => super::validator::json(t),
            _ => {
                self.error(
                    &r.kind,
                    &format!("{field}.send"),
                    "a batch step needs `send`: a request object (a template)",
                );
                return None;
            }
        };
        if r.count.is_none() {
            self.error(&r.kind, &format!("{field}.count"), "a batch step needs `count`: the requests it sends in all");
        }
        let count = self.count(&r.count, &format!("{field}.count"), 1, MAX_BATCH_COUNT, 1) as u32;
        let size = self.count(&r.size, &format!("{field}.size"), 1, MAX_BATCH_SIZE, 128) as u32;
        if let Some(repeat) = &r.repeat {
            self.error(
                repeat,
                &format!("{field}.repeat"),
                "a batch step sends `count` requests; `repeat` is for request steps",
            );
        }
        Some(ScenarioStep::Batch {
            metric,
            send,
            count,
            size,
            distribution: self.distribution(&r.percentiles, &r.max, field),
            expect: self.step_expect(r, field),
        })
    }

    /// A script's `sizes`, `matrix`, `distributions`, `max_samples` and kept fixture.
    pub(super) fn script_extras(&mut self, r: &RawScript, field: &str) -> ScriptExtras {
        let sizes = r
            .sizes
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(n, s)| {
                let f = format!("{field}.sizes[{n}]");
                let metric = self.metric_key(&s.get_ref().metric, &format!("{f}.metric"));
                let path = self.size_path(&s.get_ref().path, &format!("{f}.path"))?;
                Some(SizeSpec { metric, path })
            })
            .collect();
        let matrix = r.matrix.as_ref().map(|m| self.matrix(m, &format!("{field}.matrix"))).unwrap_or_default();
        let distributions = match &r.distributions {
            Some(table) => self.script_distributions(table, r, &format!("{field}.distributions")),
            None => BTreeMap::new(),
        };
        let max_samples = self.count(
            &r.max_samples,
            &format!("{field}.max_samples"),
            1,
            10_000_000,
            i64::from(sandbench_proto::plan::DEFAULT_MAX_SAMPLES),
        ) as u32;
        let fixture = r.fixture.as_ref().map(|run| {
            if run.get_ref().trim().is_empty() {
                self.error(run, &format!("{field}.fixture"), "expected the command that writes the fixture");
            }
            let timeout_s =
                self.number(&r.fixture_timeout_s, &format!("{field}.fixture_timeout_s"), 0.0, 86_400.0, 600.0);
            Step {
                run: run.get_ref().clone(),
                cwd: r.cwd.as_ref().map(|c| c.get_ref().clone()),
                timeout_s,
                env: BTreeMap::new(),
            }
        });
        if r.keep && fixture.is_none() {
            self.error(&r.name, &format!("{field}.keep"), "`keep = true` keeps a fixture: expected `fixture`");
        }
        ScriptExtras { sizes, matrix, distributions, max_samples, fixture, keep: r.keep }
    }

    /// `matrix = { backend = ["memory", "sqlite"], rate = ["low", "high"] }`, in declared order.
    fn matrix(&mut self, table: &Spanned<toml::Table>, field: &str) -> Vec<MatrixParam> {
        let mut params = Vec::new();
        let mut combinations = 1usize;
        for (name, values) in table.get_ref() {
            let f = format!("{field}.{name}");
            if !is_segment(name) || name.contains('-') {
                self.error(table, &f, format!("a parameter name is lowercase letters, digits and '_', got {name:?}"));
                continue;
            }
            let list: Option<Vec<String>> = values
                .as_array()
                .map(|items| items.iter().map(|v| v.as_str().map(str::to_string)).collect::<Option<Vec<String>>>())
                .unwrap_or(None);
            let Some(list) = list.filter(|l| !l.is_empty()) else {
                self.error(table, &f, "expected a non-empty list of strings");
                continue;
            };
            if let Some(bad) = list.iter().find(|v| !is_segment(v)) {
                self.error(
                    table,
                    &f,
                    format!("a value is a key segment (lowercase letters, digits, '_', '-'), got {bad:?}"),
                );
                continue;
            }
            if let Some(twice) = list.iter().enumerate().find(|(i, v)| list[..*i].contains(v)) {
                self.error(table, &f, format!("{:?} is listed twice", twice.1));
                continue;
            }
            combinations = combinations.saturating_mul(list.len());
            params.push(MatrixParam { name: name.clone(), values: list });
        }
        if table.get_ref().is_empty() {
            self.error(table, field, "expected at least one parameter with its values");
        }
        if combinations > MAX_COMBINATIONS {
            self.error(table, field, format!("{combinations} combinations; at most {MAX_COMBINATIONS}"));
        }
        params
    }

    /// `distributions = { commit_ms = { percentiles = [50, 99], max = true } }`: keys the script
    /// declares in `metrics`.
    fn script_distributions(
        &mut self,
        table: &Spanned<toml::Table>,
        r: &RawScript,
        field: &str,
    ) -> BTreeMap<String, Distribution> {
        let mut out = BTreeMap::new();
        for (key, value) in table.get_ref() {
            let f = format!("{field}.{key}");
            if !r.metrics.get_ref().contains(key) {
                self.error(table, &f, format!("{key:?} is not one of the script's `metrics`"));
                continue;
            }
            let raw: RawDistribution = match value.clone().try_into() {
                Ok(raw) => raw,
                Err(err) => {
                    self.error(
                        table,
                        &f,
                        format!("expected {{ percentiles = [50, 99], max = true }}: {}", err.message()),
                    );
                    continue;
                }
            };
            let percentiles = raw.percentiles.map(|v| Spanned::new(table.span(), v));
            let max = raw.max.map(|m| Spanned::new(table.span(), m));
            if let Some(d) = self.distribution(&percentiles, &max, &f) {
                out.insert(key.clone(), d);
            }
        }
        out
    }
}

/// What a script gains beside its command and metrics.
pub(super) struct ScriptExtras {
    pub sizes: Vec<SizeSpec>,
    pub matrix: Vec<MatrixParam>,
    pub distributions: BTreeMap<String, Distribution>,
    pub max_samples: u32,
    pub fixture: Option<Step>,
    pub keep: bool,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use sandbench_proto::plan::{Distribution, ScenarioStep};

    use super::super::{SpecErrors, parse};

    fn errors(text: &str) -> Vec<String> {
        match parse(Path::new("bench.toml"), text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(SpecErrors(errors)) => errors.iter().map(|e| e.to_string()).collect(),
        }
    }

    const SERVICE: &str = r#"name = "service"
[install]
command = "true"
[[runtime.scenario]]
name = "decide"
command = ["node", "service.js"]
id_field = "requestId"
[[runtime.scenario.step]]
kind = "request"
metric = "handshake"
send = { method = "handshake" }
[[runtime.scenario.step]]
kind = "batch"
metric = "decide"
send = { method = "decide", generation = "{{prev.stateGeneration}}", requestId = "d-{{i}}" }
count = 256
percentiles = [50, 95, 99]
max = true
expect = { kind = "result" }
[[runtime.scenario.step]]
kind = "size"
metric = "state_bytes"
path = "~/state/runtime-state.json*"
[metrics.handshake]
title = "Handshake"
unit = "ms"
[metrics.decide]
title = "Decision latency"
unit = "ms"
[metrics.state_bytes]
title = "State file"
unit = "KiB"
"#;

    #[test]
    fn a_service_scenario_has_replies_by_id_batches_and_sizes() {
        let plan = parse(Path::new("bench.toml"), SERVICE).unwrap();
        let scenario = &plan.agent.runtime.scenarios[0];
        assert_eq!((scenario.id_field.as_deref(), scenario.ready_event.as_deref()), (Some("requestId"), None));
        let ScenarioStep::Batch { metric, count, size, distribution, expect, .. } = &scenario.steps[1] else {
            panic!("{:?}", scenario.steps[1]);
        };
        assert_eq!((metric.as_str(), *count, *size, expect.len()), ("decide", 256, 128, 1));
        assert_eq!(distribution, &Some(Distribution { percentiles: vec![50, 95, 99], max: true }));
        assert_eq!(
            scenario.steps[2],
            ScenarioStep::Size { metric: "state_bytes".into(), path: "~/state/runtime-state.json*".into() }
        );
        // Sizes are recorded in bytes, so KiB is a unit they convert to; latencies in seconds.
        let def = |k: &str| plan.metrics.iter().find(|d| d.key == k).unwrap().clone();
        assert_eq!((def("state_bytes").scale, def("decide.p99").scale), (1.0 / 1024.0, 1000.0));
        // A distribution is judged by its facets, which inherit its definition, in place of it.
        let keys: Vec<&str> = plan.metrics.iter().map(|d| d.key.as_str()).filter(|k| k.starts_with("decide")).collect();
        assert_eq!(keys, ["decide.p50", "decide.p95", "decide.p99", "decide.max"]);
        assert_eq!(
            plan.agent.runtime.distributions(),
            [("decide".to_string(), Distribution { percentiles: vec![50, 95, 99], max: true })]
        );
        // Its facets gate an adaptive run by default, and the runtime records them.
        assert!(["decide.p50", "decide.p99", "decide.max"].iter().all(|k| plan.trials.gate.contains(&k.to_string())));
        assert!(!plan.trials.gate.iter().any(|k| k == "decide" || k.ends_with(".cpu")), "{:?}", plan.trials.gate);
        assert!(plan.records(sandbench_proto::Phase::Runtime, "decide.p99"));
        // The plan tells the controller, which reduces each trial's samples.
        assert_eq!(plan.agent.distributions.keys().collect::<Vec<_>>(), ["decide"]);
        // `ignore = true` on the distribution's block reaches its facets; on one facet's, that one.
        let keys = |text: &str| -> Vec<String> {
            let plan = parse(Path::new("bench.toml"), text).unwrap_or_else(|e| panic!("{e}"));
            plan.metrics.iter().map(|d| d.key.clone()).filter(|k| k.starts_with("decide")).collect()
        };
        assert_eq!(keys(&SERVICE.replace("[metrics.decide]\n", "[metrics.decide]\nignore = true\n")), [] as [&str; 0]);
        let one = format!("{SERVICE}\n[metrics.\"decide.p99\"]\nignore = true\n");
        assert_eq!(keys(&one), ["decide.p50", "decide.p95", "decide.max"]);
        // The default protocol is unchanged: a ready event "ready", no id field.
        let plain = SERVICE.replace("id_field = \"requestId\"\n", "");
        let plain = plain.replace("kind = \"batch\"", "kind = \"request\"\nrepeat = 2").replace("count = 256\n", "");
        let plan = parse(Path::new("bench.toml"), &plain).unwrap();
        let scenario = &plan.agent.runtime.scenarios[0];
        assert_eq!((scenario.id_field.as_deref(), scenario.ready_event.as_deref()), (None, Some("ready")));
    }

    #[test]
    fn batch_size_and_distribution_errors_name_line_and_field() {
        let bad = SERVICE
            .replace("count = 256", "count = 0\nsize = 9000")
            .replace("percentiles = [50, 95, 99]", "percentiles = [95, 50]")
            .replace("path = \"~/state/runtime-state.json*\"", "path = \"~/[\"")
            .replace("metric = \"handshake\"\n", "metric = \"handshake\"\nrepeat = 3\nmax = false\n");
        assert_eq!(
            errors(&bad),
            [
                "bench.toml:12: runtime.scenario[0].step[0]: a distribution derives at least one percentile or `max = true`",
                "bench.toml:18: runtime.scenario[0].step[1].count: expected a whole number from 1 to 1000000, got 0",
                "bench.toml:19: runtime.scenario[0].step[1].size: expected a whole number from 1 to 4096, got 9000",
                "bench.toml:20: runtime.scenario[0].step[1].percentiles: expected integers from 1 to 99 in ascending order, without repeats; got 50",
                "bench.toml:26: runtime.scenario[0].step[2].path: not a valid glob: Pattern syntax error near position 2: invalid range pattern",
                "bench.toml:33: metrics.state_bytes: defined, but no phase records it",
            ]
        );
        let no_ready =
            SERVICE.replace("id_field = \"requestId\"", "id_field = \"requestId\"\nstart_metric = \"handshake\"");
        assert!(
            errors(&no_ready).contains(
                &"bench.toml:8: runtime.scenario[0].start_metric: timing the start needs `ready_event` (the event that says the child is ready)".to_string()
            ),
            "{:?}",
            errors(&no_ready)
        );
        let missing = SERVICE.replace("path = \"~/state/runtime-state.json*\"\n", "").replace("count = 256\n", "");
        assert_eq!(
            errors(&missing),
            [
                "bench.toml:13: runtime.scenario[0].step[1].count: a batch step needs `count`: the requests it sends in all",
                "bench.toml:20: runtime.scenario[0].step[2].path: a size step needs `path` (e.g. \"~/store/data.sqlite*\")",
                "bench.toml:28: metrics.state_bytes: defined, but no phase records it",
            ]
        );
    }

    const LIBRARY: &str = r#"name = "library"
[install]
command = "true"
[[runtime.script]]
name = "store"
run = "node store.js {backend} {rate}"
metrics = ["ops", "commit_ms"]
matrix = { backend = ["memory", "sqlite"], rate = ["low", "high"] }
distributions = { commit_ms = { percentiles = [50, 99], max = true } }
sizes = [{ metric = "stored", path = "~/store/{backend}*" }]
fixture = "node make-input.js"
keep = true
"#;

    fn library_metrics() -> String {
        let mut text = String::from(LIBRARY);
        for backend in ["memory", "sqlite"] {
            for rate in ["low", "high"] {
                for (k, unit) in [("ops", "ops/s"), ("commit_ms", "ms"), ("stored", "MB")] {
                    text.push_str(&format!(
                        "[metrics.\"store.{backend}.{rate}.{k}\"]\ntitle = \"{k}\"\nunit = \"{unit}\"\n"
                    ));
                }
            }
        }
        text
    }

    #[test]
    fn a_matrix_script_expands_its_keys_row_major_with_sizes_and_distributions() {
        let plan = parse(Path::new("bench.toml"), &library_metrics()).unwrap();
        let script = &plan.agent.runtime.scripts[0];
        assert_eq!(script.matrix.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["backend", "rate"]);
        assert_eq!(
            script.keys()[..6],
            [
                "store.memory.low.ops",
                "store.memory.low.commit_ms",
                "store.memory.low.stored",
                "store.memory.high.ops",
                "store.memory.high.commit_ms",
                "store.memory.high.stored"
            ]
        );
        assert_eq!(script.keys().len(), 12);
        assert!(script.keep && script.fixture.as_ref().is_some_and(|f| f.run == "node make-input.js"));
        let distributions: Vec<&String> = plan.agent.distributions.keys().collect();
        assert_eq!(
            distributions,
            [
                "store.memory.high.commit_ms",
                "store.memory.low.commit_ms",
                "store.sqlite.high.commit_ms",
                "store.sqlite.low.commit_ms"
            ]
        );
        // Sizes are bytes (MB converts them); what the script prints keeps the spec's scale.
        let def = |k: &str| {
            plan.metrics.iter().find(|d| d.key == k).unwrap_or_else(|| panic!("{k}: {:?}", plan.metrics)).clone()
        };
        assert_eq!((def("store.sqlite.high.stored").scale, def("store.sqlite.high.ops").scale), (1e-6, 1.0));
    }

    #[test]
    fn matrix_values_distributions_and_keep_are_checked() {
        let bad = library_metrics()
            .replace("rate = [\"low\", \"high\"]", "rate = [\"Low\", \"high\"], tools = []")
            .replace("distributions = { commit_ms", "distributions = { latency = { max = true }, commit_ms")
            .replace("fixture = \"node make-input.js\"\n", "");
        let got = errors(&bad);
        for want in [
            "bench.toml:8: runtime.script[0].matrix.rate: a value is a key segment (lowercase letters, digits, '_', '-'), got \"Low\"",
            "bench.toml:8: runtime.script[0].matrix.tools: expected a non-empty list of strings",
            "bench.toml:9: runtime.script[0].distributions.latency: \"latency\" is not one of the script's `metrics`",
            "bench.toml:5: runtime.script[0].keep: `keep = true` keeps a fixture: expected `fixture`",
        ] {
            assert!(got.contains(&want.to_string()), "{want}\n{got:#?}");
        }
    }
}
