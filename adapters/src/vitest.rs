//! `vitest bench --outputJson`: `{ "files": [{ "filepath", "groups": [{ "fullName",
//! "benchmarks": [{ "name", "hz", "mean", "median", "sd", "rme", "sampleCount", … }] }] }] }`,
//! times in milliseconds. The estimate is `hz`, operations per second (vitest's headline and
//! its rank; the mean time's inverse), higher is better; the name is the group's full name
//! (file, then `describe` blocks) and the benchmark's, joined by ` > ` as vitest prints them.

use serde_json::Value;

use crate::json::Node;
use crate::{Better, Figure, Measure, Read, Statistic, times_beside_rate};

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

/// Operations per second, and the time figures in seconds.
fn measure(bench: &Node<'_>) -> Result<Measure, String> {
    let hz = bench.number_at("hz")?;
    let mut spread = times_beside_rate(bench, 1e-3);
    spread.extend(bench.figure("rme").map(|v| Figure::count("rme_percent", v)));
    spread.extend(bench.figure("sampleCount").map(|v| Figure::count("samples", v)));
    Ok(Measure {
        segment: None,
        value: hz,
        statistic: Statistic::Mean,
        unit: "ops/s".to_string(),
        better: Better::Higher,
        spread,
    })
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
        assert_eq!((small.unit.as_str(), small.better, small.statistic), ("ops/s", Better::Higher, Statistic::Mean));
        assert!((small.value - 220_615.545_973_207_8).abs() < 1e-6);
        // The mean time, in seconds, is the rate's inverse.
        let mean = small.spread.iter().find(|f| f.label == "mean_s").unwrap();
        assert!((mean.value * small.value - 1.0).abs() < 1e-9);
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
        assert_eq!(err.reason, "files[0].groups[0].benchmarks[0].hz: missing (it has \"name\")");
    }
}
