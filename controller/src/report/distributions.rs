//! Metrics the plan did not list by key: a distribution's samples (one per request) become each
//! trial's percentiles and maximum (`<m>.p95`, `<m>.max`, judged like any metric, the samples
//! themselves staying in the event log), and keys only a script's output names are defined by
//! the spec's families, or said to be undefined.

use std::collections::{BTreeMap, BTreeSet};

use sandbench_proto::Phase;
use sandbench_proto::metric::{Facet, MetricKey};

use super::{Report, Sample, Side};
use crate::spec::Plan;
use crate::spec::metrics::{distribution_of, report_order};
use crate::spec::metrics_families::{Block, peak_rss};
use crate::stats::reduce;

/// Replaces each distribution's samples in `side` by its facets' per-trial values: a trial with
/// a failed sample fails every facet with that error.
pub fn reduce_side(side: &mut Side, plan: &Plan) {
    let stems: Vec<(String, Vec<Facet>)> =
        side.metrics.keys().filter_map(|k| distribution_of(plan, k).map(|f| (k.clone(), f))).collect();
    for (stem, facets) in stems {
        let Some(samples) = side.metrics.remove(&stem) else { continue };
        let mut trials: BTreeMap<u32, (Vec<f64>, Option<String>)> = BTreeMap::new();
        for s in samples {
            let trial = trials.entry(s.trial).or_default();
            match (s.value, s.error) {
                (_, Some(error)) => trial.1 = trial.1.take().or(Some(error)),
                (Some(v), None) => trial.0.push(v),
                (None, None) => {}
            }
        }
        for facet in &facets {
            let key = MetricKey::new(stem.as_str(), *facet).to_string();
            let figures: Vec<Sample> = trials
                .iter()
                .map(|(t, (values, error))| {
                    let value = reduce::reduce(values, &[*facet]).first().map(|(_, v)| *v);
                    let error =
                        error.clone().or_else(|| value.is_none().then(|| "no sample in this trial".to_string()));
                    Sample { trial: *t, sample: 0, value: value.filter(|_| error.is_none()), error }
                })
                .collect();
            side.metrics.insert(key, figures);
        }
    }
}

/// Defines what the sides recorded that the plan did not list (keys a script's output named, a
/// matrix child's peak RSS, the facets of their distributions) from the spec's blocks. A key
/// that a script's `metrics` pattern let through and nothing defines is an error of the report
/// naming both, its samples kept unjudged; other unlisted keys (`pss`, shown only) stay as they
/// were.
pub fn define_recorded(report: &mut Report, plan: &Plan) {
    let listed: BTreeSet<String> = report.metrics.iter().map(|d| d.key.clone()).collect();
    let recorded: BTreeSet<String> =
        [&report.base_side, &report.head_side].iter().flat_map(|s| s.metrics.keys().cloned()).collect();
    let mut added = Vec::new();
    let mut ignored: Vec<&str> = Vec::new();
    for key in recorded.iter().filter(|k| !listed.contains(*k)) {
        if plan.definitions.ignored(key).is_some() {
            ignored.push(key);
            continue;
        }
        let facet = MetricKey::facet_of(key);
        let judged = matches!(facet, Facet::Wall | Facet::Percentile(_) | Facet::Max)
            || (facet == Facet::MaxRss && peak_rss(key).is_some());
        if !judged {
            continue;
        }
        if let Some(defined) = super::benches::define(report, plan, key) {
            match defined {
                Ok(def) => {
                    let trials = trials_of(report, plan, key);
                    report.expected.entry(key.clone()).or_insert(trials);
                    added.push(def);
                }
                Err(why) => report.errors.push(format!("metric {key}: its definition is incomplete: {why}")),
            }
            continue;
        }
        match plan.definitions.resolve(key, &report.metrics) {
            Ok(Some(def)) => {
                let trials = trials_of(report, plan, key);
                report.expected.entry(key.clone()).or_insert(trials);
                added.push(def);
            }
            Ok(None) => {
                let Some((script, pattern)) = script_pattern_of(plan, key) else { continue };
                report.errors.push(format!(
                    "script {script} reported {key} (its metrics pattern \"{pattern}\"), but no [metrics] block defines it (add [metrics.\"{key}\"] or a family such as [metrics.\"{}\"]): its samples are kept in report.json, not judged",
                    family_hint(key)
                ))
            }
            Err(why) => report.errors.push(format!("metric {key}: its definition is incomplete: {why}")),
        }
    }
    if !ignored.is_empty() {
        report.warnings.push(format!(
            "not judged, as their [metrics] blocks say (ignore = true); their samples are kept in report.json: {}",
            ignored.join(", ")
        ));
    }
    // Keys only a run names join an adaptive run's gate as the plan says (`Plan::gates_named`).
    if let Some(sequential) = report.sequential.as_mut() {
        for def in added.iter().filter(|d| plan.gates_named(&d.key)) {
            if !sequential.gate.contains(&def.key) {
                sequential.gate.push(def.key.clone());
            }
        }
    }
    if !added.is_empty() {
        let all = report.metrics.drain(..).chain(added).collect();
        report.metrics = report_order(all);
    }
    let missing = super::benches::missing(report, plan);
    report.warnings.extend(missing);
    let failed = super::benches::failures(report, plan);
    report.errors.extend(failed);
}

/// The trials a key only a run named should have: its script's phase's (a matrix child's key
/// starts with its script's name), else as many as a side recorded.
fn trials_of(report: &Report, plan: &Plan, key: &str) -> u32 {
    let stem = MetricKey::stem_of(key);
    let script = stem.strip_prefix("script.").unwrap_or(stem).split('.').next().unwrap_or_default();
    let bench = plan.bench_step_of(key).map(|b| b.name.as_str());
    let phase = Phase::ALL.into_iter().find(|p| {
        plan.section(*p).is_some_and(|s| match bench {
            Some(name) => s.benches.iter().any(|b| b.name == name),
            None => s.scripts.iter().any(|x| x.name == script),
        })
    });
    let recorded = [&report.base_side, &report.head_side]
        .iter()
        .map(|s| s.metrics.get(key).map_or(0, |v| v.iter().map(|x| x.trial).collect::<BTreeSet<u32>>().len()))
        .max()
        .unwrap_or(1) as u32;
    match phase {
        // A phase grown by adaptive looks ran more trials than planned, on both sides: as
        // many as either side recorded (a side short of them is incomplete).
        Some(phase) => plan.trials.of(phase).max(recorded),
        None => recorded,
    }
}

/// The script whose `metrics` pattern (an entry with `*`) lets `key` through, and the pattern.
fn script_pattern_of(plan: &Plan, key: &str) -> Option<(String, String)> {
    Phase::ALL.into_iter().filter_map(|p| plan.section(p)).flat_map(|s| &s.scripts).find_map(|s| {
        let pattern =
            s.metrics.iter().filter(|m| m.contains('*')).find(|m| Block::pattern(m).captures(key).is_some())?;
        Some((s.name.clone(), pattern.clone()))
    })
}

/// `a.b.c` → `a.*.c`: a family a spec could write for it.
fn family_hint(key: &str) -> String {
    let parts: Vec<&str> = key.split('.').collect();
    match parts.len() {
        0..=2 => key.to_string(),
        n => [parts[0]]
            .into_iter()
            .chain(std::iter::repeat_n("*", n - 2))
            .chain([parts[n - 1]])
            .collect::<Vec<_>>()
            .join("."),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use sandbench_proto::metric::Distribution;

    use super::*;

    fn plan() -> Plan {
        let text = r#"name = "d"
[install]
command = "true"
[[runtime.command]]
metric = "rt"
run = "true"
[[runtime.script]]
name = "store"
run = "node store.js"
metrics = ["store.sqlite.ops"]
[metrics.rt]
title = "Request"
unit = "ms"
[metrics."store.*.ops"]
title = "Throughput, {1}"
unit = "ops/s"
better = "higher"
"#;
        let mut plan = crate::spec::parse(Path::new("bench.toml"), text).unwrap();
        plan.agent.distributions.insert("rt".into(), Distribution { percentiles: vec![50, 99], max: true });
        plan
    }

    fn sample(trial: u32, sample: u32, value: f64) -> Sample {
        Sample { trial, sample, value: Some(value), error: None }
    }

    #[test]
    fn a_distributions_samples_become_each_trials_percentiles_and_max() {
        let mut side = Side::default();
        let mut samples: Vec<Sample> = (0..128).map(|i| sample(0, i, f64::from(i + 1))).collect();
        samples.extend((0..4).map(|i| sample(1, i, f64::from(i + 1))));
        samples.push(Sample { trial: 2, sample: 0, value: None, error: Some("the child died".into()) });
        side.metrics.insert("rt".into(), samples);
        side.metrics.insert("other".into(), vec![sample(0, 0, 1.0)]);
        reduce_side(&mut side, &plan());
        assert!(!side.metrics.contains_key("rt"));
        let keys: Vec<&String> = side.metrics.keys().collect();
        assert_eq!(keys, ["other", "rt.max", "rt.p50", "rt.p99"]);
        let p99 = &side.metrics["rt.p99"];
        assert!((p99[0].value.unwrap() - 126.73).abs() < 1e-9, "{p99:?}");
        assert!((p99[1].value.unwrap() - 3.97).abs() < 1e-9, "{p99:?}");
        assert_eq!((p99[2].value, p99[2].error.as_deref()), (None, Some("the child died")));
        assert_eq!(side.metrics["rt.max"][0].value, Some(128.0));
        assert_eq!(side.metrics["rt.p50"][1].value, Some(2.5));
    }

    #[test]
    fn keys_only_a_run_names_are_defined_by_families_or_reported_undefined() {
        let plan = plan();
        let mut report = super::super::tests::one_metric(&[1.0; 10], &[1.0; 10]);
        let values = |v: f64| (0..10).map(|t| sample(t, 0, v)).collect::<Vec<_>>();
        for (side, ops) in [(&mut report.base_side, 100.0), (&mut report.head_side, 50.0)] {
            side.metrics.insert("store.memory.ops".into(), values(ops));
            side.metrics.insert("store.memory.size".into(), values(1.0));
            side.metrics.insert("script.store.memory.maxrss".into(), values(5e7));
            side.metrics.insert("script.store.cpu".into(), values(1.0));
        }
        // The spec's script lets through what its `metrics` pattern matches (seeds-steps).
        let mut plan = plan;
        plan.agent.runtime.scripts[0].metrics.push("store.*.size".into());
        define_recorded(&mut report, &plan);
        let def = report.metrics.iter().find(|d| d.key == "store.memory.ops").unwrap();
        assert_eq!((def.title.as_str(), def.better), ("Throughput, memory", crate::stats::Better::Higher));
        assert_eq!(report.expected["store.memory.ops"], plan.trials.runtime);
        assert!(report.metrics.iter().any(|d| d.key == "script.store.memory.maxrss"));
        assert!(!report.metrics.iter().any(|d| d.key == "script.store.cpu"));
        assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
        assert!(report.errors[0].starts_with("script store reported store.memory.size (its metrics pattern \"store.*.size\"), but no [metrics] block defines it (add [metrics.\"store.memory.size\"] or a family such as [metrics.\"store.*.size\"])"), "{:?}", report.errors);
        // A key no pattern let through (the agent's `pss`, shown only) is left alone.
        let mut quiet = crate::report::Report { errors: Vec::new(), ..report.clone() };
        quiet.base_side.metrics.insert("pss".into(), values(1.0));
        quiet.base_side.metrics.remove("store.memory.size");
        quiet.head_side.metrics.remove("store.memory.size");
        define_recorded(&mut quiet, &plan);
        assert!(quiet.errors.is_empty() && !quiet.metrics.iter().any(|d| d.key == "pss"), "{:?}", quiet.errors);
        // Halved throughput, better higher: a regression.
        let ops = report.analyze().into_iter().find(|c| c.key == "store.memory.ops").unwrap();
        assert_eq!(ops.outcome(), crate::stats::Outcome::Regressed);
    }

    #[test]
    fn a_key_only_a_run_names_expects_the_trials_its_grown_phase_ran() {
        let plan = plan();
        let planned = plan.trials.runtime;
        let mut report = super::super::tests::one_metric(&[1.0; 10], &[1.0; 10]);
        let values = |n: u32| (0..n).map(|t| sample(t, 0, 5e7)).collect::<Vec<_>>();
        // Adaptive looks grew the runtime by two pairs, which both sides ran.
        for side in [&mut report.base_side, &mut report.head_side] {
            side.metrics.insert("script.store.memory.maxrss".into(), values(planned + 2));
        }
        define_recorded(&mut report, &plan);
        assert_eq!(report.expected["script.store.memory.maxrss"], planned + 2);
        // A side short of a trial the other ran is incomplete.
        report.head_side.metrics.get_mut("script.store.memory.maxrss").unwrap().pop();
        let rss = report.analyze().into_iter().find(|c| c.key == "script.store.memory.maxrss").unwrap();
        assert_eq!(rss.outcome(), crate::stats::Outcome::Incomplete);
    }
}
