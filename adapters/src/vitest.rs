//! `vitest bench --outputJson`: `{ "files": [{ "filepath", "groups": [{ "fullName",
//! "benchmarks": [{ "name", "hz", "mean", "median", "sd", "rme", "sampleCount", … }] }] }] }`,
//! times in milliseconds. The estimate is the median time of the samples (the mean when the file
//! has no median), in seconds, lower is better: vitest's headline `hz` is the mean's inverse,
//! and a mean is dominated by the few samples a collection or the scheduler stretched (a
//! factor 4 above the median in the captured file). `hz` goes to the details. The name is the
//! group's full name (file, then `describe` blocks) and the benchmark's, joined by ` > ` as
//! vitest prints them.

use serde_json::Value;

use crate::json::Node;
use crate::{Figure, Measure, Read, Statistic, figures, time};

pub fn parse(document: &Value) -> Result<Vec<Read>, String> {
    let root = Node::root(document);
    let mut read = Vec::new();
    for file in root.field("files")?.elements()? {
        for group in file.field("groups")?.elements()? {
            let group_name = group.field("fullName")?.string()?;
            for bench in group.field("benchmarks")?.elements()? {
                let name = format!("{group_name} > {}", bench.field("name")?.string()?);
                read.push(Read::ran(name, vec![measure(&bench)?]));
            }
        }
    }
    Ok(read)
}

/// The median time (else the mean), in seconds, and the spread.
fn measure(bench: &Node<'_>) -> Result<Measure, String> {
    let (value, statistic) = match bench.figure("median") {
        Some(median) => (median, Statistic::Median),
        None => (bench.number_at("mean")?, Statistic::Mean),
    };
    let mut spread = figures(
        bench,
        &[
            ("mean", "mean"),
            ("sd", "sd"),
            ("min", "min"),
            ("max", "max"),
            ("p75", "p75"),
            ("p99", "p99"),
            ("p999", "p999"),
        ],
    );
    spread.extend(bench.figure("hz").map(|v| Figure::count("ops_per_s", v)));
    spread.extend(bench.figure("rme").map(|v| Figure::count("rme_percent", v)));
    spread.extend(bench.figure("sampleCount").map(|v| Figure::count("samples", v)));
    Ok(time(value, statistic, 1e-3, spread))
}

#[cfg(test)]
mod tests {
    use crate::{Better, Figure, Format, Statistic, parse};

    #[test]
    fn reads_vitest_3_output_json() {
        let got = parse(Format::Vitest, include_bytes!("../fixtures/vitest/vitest.json")).unwrap();
        let names: Vec<(&str, &str)> = got.iter().map(|b| (b.name.as_str(), b.segment.as_str())).collect();
        assert_eq!(
            names,
            [
                ("sort.bench.js > join strings", "sort_bench_js_join_strings"),
                ("sort.bench.js > sort > small array", "sort_bench_js_sort_small_array"),
                ("sort.bench.js > sort > large array", "sort_bench_js_sort_large_array"),
            ]
        );
        let small = got[1].primary().unwrap();
        assert_eq!((small.unit.as_str(), small.better, small.statistic), ("s", Better::Lower, Statistic::Median));
        assert!((small.value - 0.001042000000097687e-3).abs() < 1e-15, "{}", small.value);
        // The mean, four times the median, and vitest's hz, its inverse, are details.
        let mean = small.spread.iter().find(|f| f.label == "mean").unwrap();
        let hz = small.spread.iter().find(|f| f.label == "ops_per_s").unwrap();
        assert!((mean.value * hz.value - 1.0).abs() < 1e-9);
        assert!(mean.value > 4.0 * small.value);
        assert!(small.spread.contains(&Figure::count("samples", 110_308.0)));
        assert!(small.spread.iter().any(|f| f.label == "rme_percent"));
    }

    #[test]
    fn refuses_other_files() {
        let err = parse(Format::Vitest, include_bytes!("../fixtures/hyperfine/hyperfine.json")).unwrap_err();
        assert_eq!(err.reason, "files: missing (it has \"results\")");
        let err =
            parse(Format::Vitest, br#"{"files": [{"groups": [{"fullName": "f", "benchmarks": [{"name": "x"}]}]}]}"#)
                .unwrap_err();
        assert_eq!(err.reason, "files[0].groups[0].benchmarks[0].mean: missing (it has \"name\")");
    }
}
