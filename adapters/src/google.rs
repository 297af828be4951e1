//! Google Benchmark's JSON (`--benchmark_format=json`, `--benchmark_out=<file>`): `{ "context",
//! "benchmarks": [{ "name", "run_name", "run_type": "iteration" | "aggregate", "aggregate_name",
//! "real_time", "cpu_time", "time_unit", "iterations", "error_occurred", "error_message",
//! "items_per_second", "bytes_per_second", <counters> }] }`.
//!
//! A benchmark is a `run_name`. Its primary measure is the wall time per iteration
//! (`real_time`, seconds): the `median` aggregate with `--benchmark_repetitions`, else the run's
//! own figure (the mean over its iterations), else the median of its repetitions. `cpu_time`
//! (`cpu_time`, seconds), `items_per_second` and `bytes_per_second` (higher is better) and each
//! user counter (no unit, lower is better unless the spec says otherwise) are measures of their
//! own, taken the same way. A run with `error_occurred` is a failed benchmark, its message kept.

use serde_json::Value;

use crate::json::Node;
use crate::segment::{self, quoted};
use crate::{Better, Figure, Measure, Read, Statistic, seconds_per};

/// Fields of a run that are no user counter.
const NOT_COUNTERS: [&str; 20] = [
    "name",
    "family_index",
    "per_family_instance_index",
    "run_name",
    "run_type",
    "repetitions",
    "repetition_index",
    "threads",
    "iterations",
    "real_time",
    "cpu_time",
    "time_unit",
    "error_occurred",
    "error_message",
    "aggregate_name",
    "aggregate_unit",
    "items_per_second",
    "bytes_per_second",
    "label",
    "skipped",
];

/// One benchmark's runs and aggregates, by field.
struct Runs<'a> {
    name: String,
    iterations: Vec<Node<'a>>,
    aggregates: Vec<(&'a str, Node<'a>)>,
    error: Option<String>,
}

pub fn parse(document: &Value) -> Result<Vec<Read>, String> {
    let root = Node::root(document);
    let mut benchmarks: Vec<Runs<'_>> = Vec::new();
    for run in root.field("benchmarks")?.elements()? {
        let name = match run.optional("run_name")? {
            Some(n) => n.string()?,
            None => run.field("name")?.string()?,
        };
        let i = match benchmarks.iter().position(|b| b.name == name) {
            Some(i) => i,
            None => {
                benchmarks.push(Runs { name: name.to_string(), iterations: vec![], aggregates: vec![], error: None });
                benchmarks.len() - 1
            }
        };
        let entry = &mut benchmarks[i];
        if run.value.get("error_occurred").and_then(Value::as_bool) == Some(true) {
            let message = run.value.get("error_message").and_then(Value::as_str).unwrap_or("");
            entry.error = Some(format!("Google Benchmark: the run stopped with an error: {}", segment::title(message)));
            continue;
        }
        match run.optional("run_type")?.map(|t| t.string()).transpose()? {
            Some("aggregate") => {
                let kind = run.field("aggregate_name")?.string()?;
                entry.aggregates.push((kind, run));
            }
            _ => entry.iterations.push(run),
        }
    }
    benchmarks
        .into_iter()
        .map(|b| match b.error {
            Some(why) => Ok(Read::failed(b.name, why)),
            None => Ok(Read::ran(b.name.clone(), measures(&b)?)),
        })
        .collect()
}

/// The benchmark's measures: wall time first, then CPU time, rates and counters.
fn measures(runs: &Runs<'_>) -> Result<Vec<Measure>, String> {
    let first = runs.aggregates.iter().map(|(_, n)| n).chain(&runs.iterations).next();
    let Some(first) = first else {
        return Err(format!("{}: no run", quoted(&runs.name)));
    };
    let unit = match first.optional("time_unit")? {
        Some(u) => u.string()?,
        None => "ns",
    };
    let scale =
        seconds_per(unit).ok_or_else(|| format!("{}.time_unit: {} is no time unit", first.path, quoted(unit)))?;
    let mut measures = vec![measure(runs, "real_time", None, "s", scale, Better::Lower)?];
    measures.push(measure(runs, "cpu_time", Some("cpu_time"), "s", scale, Better::Lower)?);
    for (key, unit) in [("items_per_second", "items/s"), ("bytes_per_second", "bytes/s")] {
        if first.value.get(key).is_some() {
            measures.push(measure(runs, key, Some(key), unit, 1.0, Better::Higher)?);
        }
    }
    let counters = first.object()?.iter().filter(|(k, v)| v.is_number() && !NOT_COUNTERS.contains(&k.as_str()));
    for (key, _) in counters.take(64) {
        let mut counter = measure(runs, key, None, "", 1.0, Better::Lower)?;
        counter.segment = Some(segment::readable(key));
        measures.push(counter);
    }
    Ok(measures)
}

/// One field of the benchmark as a measure: from the median aggregate, the single run, or the
/// median of the repetitions.
fn measure(
    runs: &Runs<'_>,
    key: &str,
    segment: Option<&str>,
    unit: &str,
    scale: f64,
    better: Better,
) -> Result<Measure, String> {
    let aggregate = |kind: &str| runs.aggregates.iter().find(|(k, _)| *k == kind).map(|(_, n)| n);
    let mut spread = Vec::new();
    let (value, statistic) = if let Some(median) = aggregate("median") {
        (median.number_at(key)?, Statistic::Median)
    } else if let [single] = runs.iterations.as_slice() {
        (single.number_at(key)?, Statistic::Mean)
    } else {
        let mut values = runs.iterations.iter().map(|n| n.number_at(key)).collect::<Result<Vec<f64>, String>>()?;
        values.sort_by(f64::total_cmp);
        let Some(mid) = values.get(values.len() / 2) else {
            return Err(format!("{}: no run and no median aggregate", quoted(&runs.name)));
        };
        let median = if values.len() % 2 == 0 { (values[values.len() / 2 - 1] + mid) / 2.0 } else { *mid };
        (median, Statistic::Median)
    };
    if let Some(sd) = aggregate("stddev").and_then(|n| n.figure(key)) {
        spread.push(Figure::of("sd", sd * scale));
    }
    if let Some(mean) = aggregate("mean").and_then(|n| n.figure(key)) {
        spread.push(Figure::of("mean", mean * scale));
    }
    if let Some(cv) = aggregate("cv").and_then(|n| n.figure(key)) {
        spread.push(Figure::count("cv", cv));
    }
    if runs.iterations.len() > 1 {
        spread.push(Figure::count("repetitions", runs.iterations.len() as f64));
    }
    if let Some(n) = runs.iterations.first().and_then(|n| n.figure("iterations")) {
        spread.push(Figure::count("iterations", n));
    }
    Ok(Measure {
        segment: segment.map(str::to_string),
        value: value * scale,
        statistic,
        unit: unit.to_string(),
        better,
        spread,
    })
}

#[cfg(test)]
mod tests {
    use crate::{Better, Figure, Format, Statistic, parse};

    #[test]
    fn reads_google_benchmark_1_7_runs_counters_and_the_error() {
        let got = parse(Format::GoogleBenchmark, include_bytes!("../fixtures/google-benchmark/gbench.json")).unwrap();
        let names: Vec<(&str, &str)> = got.iter().map(|b| (b.name.as_str(), b.segment.as_str())).collect();
        assert_eq!(
            names,
            [
                ("BM_Sort/10", "bm_sort_10"),
                ("BM_Sort/1000", "bm_sort_1000"),
                ("BM_StringCopy", "bm_string_copy"),
                ("BM_Fails", "bm_fails")
            ]
        );
        let sort = got[0].outcome.as_ref().unwrap();
        let segments: Vec<Option<&str>> = sort.iter().map(|m| m.segment.as_deref()).collect();
        assert_eq!(segments, [None, Some("cpu_time"), Some("items_per_second"), Some("elements")]);
        assert_eq!((sort[0].unit.as_str(), sort[0].better, sort[0].statistic), ("s", Better::Lower, Statistic::Mean));
        assert!(sort[0].value > 1e-9 && sort[0].value < 1e-5, "{}", sort[0].value);
        assert_eq!((sort[2].unit.as_str(), sort[2].better), ("items/s", Better::Higher));
        assert_eq!(sort[3].value, 10.0);
        assert_eq!(got[3].outcome, Err("Google Benchmark: the run stopped with an error: no input file".to_string()));
    }

    #[test]
    fn repetitions_give_the_median_aggregate_and_the_spread() {
        let got =
            parse(Format::GoogleBenchmark, include_bytes!("../fixtures/google-benchmark/gbench-reps.json")).unwrap();
        assert_eq!(got.len(), 1);
        let wall = got[0].primary().unwrap();
        assert_eq!(wall.statistic, Statistic::Median);
        assert!((wall.value - 7.655849392194149e-9).abs() < 1e-18);
        assert!(wall.spread.contains(&Figure::count("repetitions", 3.0)));
        assert!(wall.spread.iter().any(|f| f.label == "sd" && (f.value - 1.5904257143046054e-9).abs() < 1e-18));
        assert!(wall.spread.contains(&Figure::count("cv", 0.2140280006353592)));
    }

    #[test]
    fn refuses_other_files() {
        let err = parse(Format::GoogleBenchmark, include_bytes!("../fixtures/mitata/mitata.json")).unwrap_err();
        assert_eq!(
            err.reason,
            "benchmarks[0].name: missing (it has \"alias\", \"args\", \"baseline\", \"group\", \"kind\", …)"
        );
        let err = parse(
            Format::GoogleBenchmark,
            br#"{"benchmarks": [{"name": "x", "real_time": 1, "cpu_time": 1, "time_unit": "fortnights"}]}"#,
        )
        .unwrap_err();
        assert_eq!(err.reason, "benchmarks[0].time_unit: \"fortnights\" is no time unit");
    }
}
