//! Keys a bench step's run names (`bench.<name>.<benchmark>[.<measure>]`, issue 34): each is
//! defined from the unit the agent observed it in — its direction the format's, since every
//! adapter gives a rate (`ops/s`, `MB/s`) better-higher and anything else better-lower
//! (`sandbench_adapters::Better::of_unit`, checked against every parser by the adapters'
//! tests) — with the spec's blocks (`[metrics."bench.tinybench.*"]`) over it. The estimate each
//! trial's value is (the framework's mean, median or slope) comes from the agent's details files
//! (`sandboxes/<id>/bench/<name>-<trial>.json`) and goes to the row's note; a benchmark one side
//! reported and the other did not is named as missing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sandbench_proto::Phase;
use sandbench_proto::plan::BenchStep;
use serde::Deserialize;

use super::{Report, SandboxRecord};
use crate::spec::Plan;
use crate::spec::metrics::MetricDef;
use crate::stats::Better;

/// The relative floor of a benchmark no block tunes: a framework's estimate is already an
/// average over many iterations, so a tenth is well above what the same code moves between
/// sandboxes, and a family can lower it.
pub const RELATIVE: f64 = 0.10;
/// Details files read per sandbox, and the largest one.
const MAX_FILES: usize = 2000;
const MAX_FILE_BYTES: u64 = 16 << 20;
/// Missing benchmarks named one by one; the rest are counted.
const MAX_NAMED: usize = 20;

/// The definition of a bench key before any block: titled by its step and benchmark, in the
/// unit observed (a time shown in the unit that suits `typical`, its median in seconds), its
/// direction the format's.
pub fn default_def(step: &BenchStep, key: &str, observed: &str, typical: Option<f64>) -> MetricDef {
    let benchmark = key.strip_prefix(&step.stem()).unwrap_or(key).trim_start_matches('.');
    let (unit, scale) = match observed {
        "s" => {
            let t = typical.unwrap_or(1.0).abs();
            let unit =
                [(1e-6, "ns"), (1e-3, "µs"), (1.0, "ms")].iter().find(|(below, _)| t < *below).map_or("s", |u| u.1);
            (unit.to_string(), crate::spec::units::factor("s", unit).unwrap_or(1.0))
        }
        other => (other.to_string(), 1.0),
    };
    let better = match sandbench_adapters::Better::of_unit(observed) {
        sandbench_adapters::Better::Higher => Better::Higher,
        sandbench_adapters::Better::Lower => Better::Lower,
    };
    MetricDef {
        key: key.to_string(),
        title: format!("{} {benchmark}", step.name),
        unit,
        scale,
        absolute: 0.0,
        relative: RELATIVE,
        group: format!("Benchmarks ({})", step.name),
        better,
    }
}

/// How `key` (a bench step's) is defined: None when it is no bench key; Err when a block of the
/// spec matches it but cannot define it (a unit the observed one does not convert to).
pub fn define(report: &Report, plan: &Plan, key: &str) -> Option<Result<MetricDef, String>> {
    let step = plan.bench_step_of(key)?;
    let sides = [&report.base_side, &report.head_side];
    let observed = sides.iter().find_map(|s| s.units.get(key)).map_or("", String::as_str);
    let values: Vec<f64> =
        sides.iter().flat_map(|s| s.metrics.get(key).into_iter().flatten()).filter_map(|s| s.value).collect();
    let base = default_def(step, key, observed, crate::stats::median(&values));
    let Some((block, caught)) = plan.definitions.block_of(key) else { return Some(Ok(base)) };
    let mut def = match block.apply(key, &caught, Some(&base)) {
        Ok(def) => def,
        Err(why) => return Some(Err(why)),
    };
    if block.unit.is_some() && block.scale.is_none() && def.unit != observed {
        match crate::spec::units::factor(observed, &def.unit) {
            Ok(factor) => def.scale = factor,
            Err(why) => return Some(Err(format!("[metrics.\"{}\"] unit: {why}", block.key))),
        }
    } else if block.unit.is_some() && block.scale.is_none() {
        def.scale = 1.0;
    }
    Some(Ok(def))
}

/// Each bench key a side reported that the other did not, while the other's step did report
/// (so a side whose step never ran is not a list of every benchmark), named as missing.
pub fn missing(report: &Report, plan: &Plan) -> Vec<String> {
    let (base, head) = (&report.base_side, &report.head_side);
    // A benchmark's key (`Plan::bench_step_of`), not the step's own companions
    // (`bench.<name>.cpu`, …), which the agent records whether or not the results could be read.
    let ran = |side: &super::Side, step: &BenchStep| {
        side.metrics.iter().any(|(k, v)| {
            plan.bench_step_of(k).is_some_and(|s| s.name == step.name) && v.iter().any(|s| s.value.is_some())
        })
    };
    let mut lines = Vec::new();
    let mut more = 0usize;
    for (has, lacks, (has_label, lacks_label)) in [(base, head, ("base", "head")), (head, base, ("head", "base"))] {
        for key in has.metrics.keys().filter(|k| !lacks.metrics.contains_key(*k)) {
            let Some(step) = plan.bench_step_of(key) else { continue };
            if !ran(lacks, step) {
                continue;
            }
            if lines.len() < MAX_NAMED {
                lines.push(format!(
                    "bench {}: benchmark {key} is missing on the {lacks_label} side (the {has_label} side reported it): it is not compared",
                    step.name
                ));
            } else {
                more += 1;
            }
        }
    }
    if more > 0 {
        lines.push(format!("and {more} more benchmarks missing on one side"));
    }
    lines
}

/// Each bench step's own failures, per side: its command failed, or its results were missing
/// or refused (the agent's error on `bench.<name>`), once per side and cause, with its trials.
pub fn failures(report: &Report, plan: &Plan) -> Vec<String> {
    let steps = Phase::ALL.into_iter().filter_map(|p| plan.section(p)).flat_map(|s| &s.benches);
    let mut lines = Vec::new();
    for step in steps {
        for (label, side) in [("base", &report.base_side), ("head", &report.head_side)] {
            let mut causes: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
            for sample in side.metrics.get(&step.stem()).into_iter().flatten() {
                if let Some(error) = &sample.error {
                    causes.entry(error.as_str()).or_default().push(sample.trial);
                }
            }
            for (cause, trials) in causes.into_iter().take(MAX_NAMED) {
                let trials: Vec<String> = trials.iter().map(u32::to_string).collect();
                lines.push(format!(
                    "bench {} failed on the {label} side (trial {}): {cause}",
                    step.name,
                    trials.join(", ")
                ));
            }
        }
    }
    lines
}

/// One benchmark's measures as the agent's details file holds them.
#[derive(Deserialize)]
struct Details {
    benchmarks: Vec<DetailedBenchmark>,
    format: String,
}

#[derive(Deserialize)]
struct DetailedBenchmark {
    #[serde(default)]
    measures: Vec<DetailedMeasure>,
}

#[derive(Deserialize)]
struct DetailedMeasure {
    key: String,
    statistic: String,
}

/// The row note of each bench key: which of the framework's estimates each trial's value is
/// (`each trial's value is tinybench's median`), from every sandbox's details files. A key whose
/// files disagree (a framework that falls back to the mean) names both. Unreadable or foreign
/// files are skipped: a sandbox's word never fails the report.
pub fn estimates(dir: &Path, sandboxes: &[SandboxRecord]) -> BTreeMap<String, String> {
    let mut seen: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for record in sandboxes {
        let folder = dir.join("sandboxes").join(&record.id).join("bench");
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        let files = entries
            .flatten()
            .take(MAX_FILES)
            .filter(|e| e.metadata().is_ok_and(|m| m.is_file() && m.len() <= MAX_FILE_BYTES))
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|bytes| serde_json::from_slice::<Details>(&bytes).ok());
        for details in files {
            for m in details.benchmarks.into_iter().flat_map(|b| b.measures) {
                let entry = seen.entry(m.key).or_insert_with(|| (details.format.clone(), BTreeSet::new()));
                entry.1.insert(m.statistic);
            }
        }
    }
    seen.into_iter()
        .map(|(key, (format, statistics))| {
            let words: Vec<&str> = statistics.iter().map(|s| statistic_words(s)).collect();
            (key, format!("each trial's value is {format}'s {}", words.join(" or ")))
        })
        .collect()
}

/// How a note names a statistic of `sandbench_adapters::Statistic`.
fn statistic_words(statistic: &str) -> &str {
    match statistic {
        "slope" => "slope (time per iteration fitted over its samples)",
        "value" => "reported value",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str) -> BenchStep {
        BenchStep {
            name: name.into(),
            step: sandbench_proto::plan::Step { run: "x".into(), cwd: None, timeout_s: 1.0, env: Default::default() },
            format: "tinybench".into(),
            results: None,
            max_benchmarks: 10,
            instructions: false,
        }
    }

    #[test]
    fn a_rate_is_better_higher_and_a_time_lower_in_a_unit_that_suits_it() {
        let tiny = step("tinybench");
        let ops = default_def(&tiny, "bench.tinybench.parse", "ops/s", Some(2.0e5));
        assert_eq!(
            (ops.title.as_str(), ops.unit.as_str(), ops.scale, ops.better),
            ("tinybench parse", "ops/s", 1.0, Better::Higher)
        );
        assert_eq!((ops.relative, ops.group.as_str()), (RELATIVE, "Benchmarks (tinybench)"));
        let time = default_def(&tiny, "bench.tinybench.parse", "s", Some(2.5e-6));
        assert_eq!((time.unit.as_str(), time.better), ("µs", Better::Lower));
        assert!((time.scale - 1e6).abs() < 1e-6);
        assert_eq!(default_def(&tiny, "k", "s", Some(3e-9)).unit, "ns");
        assert_eq!(default_def(&tiny, "k", "s", Some(0.2)).unit, "ms");
        assert_eq!(default_def(&tiny, "k", "s", Some(4.0)).unit, "s");
        let bytes = default_def(&tiny, "bench.go.join.b_per_op", "bytes", Some(64.0));
        assert_eq!((bytes.unit.as_str(), bytes.better), ("bytes", Better::Lower));
        assert_eq!(default_def(&tiny, "k", "MB/s", None).better, Better::Higher);
    }

    #[test]
    fn a_failed_step_is_an_error_naming_its_side_trials_and_cause_and_a_lost_benchmark_is_missing() {
        let text = "name = \"b\"\n[install]\ncommand = \"true\"\n[[runtime.bench]]\nname = \"go\"\nrun = \"go test -bench .\"\nformat = \"go\"\n";
        let plan = crate::spec::parse(Path::new("bench.toml"), text).unwrap_or_else(|e| panic!("{e}"));
        let mut report = crate::report::tests::example(crate::report::Status::Completed);
        let value = |trial: u32| crate::report::Sample { trial, sample: 0, value: Some(1.0), error: None };
        let failed = |trial: u32| crate::report::Sample {
            trial,
            sample: 0,
            value: None,
            error: Some("go test -bench output: no benchmark result line".into()),
        };
        report.head_side.metrics.insert("bench.go".into(), vec![failed(0), failed(2)]);
        report.head_side.metrics.insert("bench.go.sort".into(), vec![value(1)]);
        report.base_side.metrics.insert("bench.go.sort".into(), vec![value(0), value(1), value(2)]);
        report.base_side.metrics.insert("bench.go.join".into(), vec![value(0)]);
        assert_eq!(
            failures(&report, &plan),
            ["bench go failed on the head side (trial 0, 2): go test -bench output: no benchmark result line"]
        );
        assert_eq!(
            missing(&report, &plan),
            [
                "bench go: benchmark bench.go.join is missing on the head side (the base side reported it): it is not compared"
            ]
        );
        // A side whose step reported nothing at all is the failure above, not a list of every benchmark.
        report.head_side.metrics.remove("bench.go.sort");
        assert!(missing(&report, &plan).is_empty());
        // The step's own companions, recorded whether or not its results were read, do not
        // make a side whose results were refused one that ran.
        report.head_side.metrics.insert("bench.go.cpu".into(), vec![value(0)]);
        report.base_side.metrics.insert("bench.go.maxrss".into(), vec![value(0)]);
        assert!(missing(&report, &plan).is_empty(), "{:?}", missing(&report, &plan));
    }

    #[test]
    fn a_family_overrides_what_it_names_and_a_unit_the_observed_one_cannot_become_is_refused() {
        let text = r#"name = "b"
[install]
command = "true"
[[runtime.bench]]
name = "go"
run = "go test -bench ."
format = "go"
[metrics."bench.go.*"]
better = "higher"
unit = "ms"
[metrics."bench.go.*.b_per_op"]
unit = "ms"
"#;
        let plan = crate::spec::parse(Path::new("bench.toml"), text).unwrap_or_else(|e| panic!("{e}"));
        let mut report = crate::report::tests::example(crate::report::Status::Completed);
        let value = |v: f64| crate::report::Sample { trial: 0, sample: 0, value: Some(v), error: None };
        for (key, unit, v) in [("bench.go.sort", "s", 2e-6), ("bench.go.join.b_per_op", "bytes", 64.0)] {
            report.base_side.metrics.insert(key.into(), vec![value(v)]);
            report.base_side.units.insert(key.into(), unit.into());
        }
        let sort = define(&report, &plan, "bench.go.sort").unwrap().unwrap();
        assert_eq!(
            (sort.title.as_str(), sort.unit.as_str(), sort.scale, sort.better, sort.relative),
            ("go sort", "ms", 1000.0, Better::Higher, RELATIVE)
        );
        let bytes = define(&report, &plan, "bench.go.join.b_per_op").unwrap().unwrap_err();
        assert!(bytes.contains("[metrics.\"bench.go.*.b_per_op\"] unit") && bytes.contains("a size"), "{bytes}");
        // Not a bench step's key: another definition's business.
        assert!(define(&report, &plan, "install").is_none() && define(&report, &plan, "bench.go").is_none());
    }

    #[test]
    fn the_details_files_say_which_estimate_each_key_is() {
        let dir = tempfile::tempdir().unwrap();
        let write = |id: &str, name: &str, text: &str| {
            let folder = dir.path().join("sandboxes").join(id).join("bench");
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::write(folder.join(name), text).unwrap();
        };
        let file = |statistic: &str| {
            format!(
                r#"{{"format":"hyperfine","trial":0,"benchmarks":[{{"key":"bench.h.sleep","name":"sleep","measures":[{{"key":"bench.h.sleep","value":1.0,"statistic":"{statistic}","unit":"s","better":"lower","spread":[]}}]}},{{"key":"bench.h.bad","name":"bad","error":"failed"}}]}}"#
            )
        };
        write("s1", "h-0.json", &file("median"));
        write("s2", "h-1.json", &file("mean"));
        write("s2", "junk.json", "not json");
        let record = |id: &str| SandboxRecord {
            id: id.into(),
            role: "base".into(),
            placement: None,
            created_at: String::new(),
            removed_at: None,
            seconds: 0.0,
            deleted: true,
            estimated_usd: 0.0,
            peak_memory_bytes: 0,
            cost: None,
        };
        let notes = estimates(dir.path(), &[record("s1"), record("s2")]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes["bench.h.sleep"], "each trial's value is hyperfine's mean or median");
    }
}
