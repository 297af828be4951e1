//! `pytest --benchmark-json`: `{ "benchmarks": [{ "fullname", "stats": { "mean", "median",
//! "stddev", "min", "max", "q1", "q3", "iqr", "rounds", "iterations", "ops" } }] }`, times in
//! seconds. The estimate is the median of the rounds (the mean, of which its OPS is the
//! inverse, is dominated by the few rounds a collection or the scheduler stretched: three times
//! the median in the example suite here) and goes to the details; the name is the test's full
//! node id (`file.py::Class::test[param]`), unique in a session.

use serde_json::Value;

use crate::json::Node;
use crate::{Figure, Read, Statistic, figures, time};

pub fn parse(document: &Value) -> Result<Vec<Read>, String> {
    let root = Node::root(document);
    let mut read = Vec::new();
    for bench in root.field("benchmarks")?.elements()? {
        let name = bench.field("fullname")?.string()?;
        let stats = bench.field("stats")?;
        let median = stats.number_at("median")?;
        let mut spread = figures(
            &stats,
            &[
                ("mean", "mean"),
                ("sd", "stddev"),
                ("min", "min"),
                ("max", "max"),
                ("q1", "q1"),
                ("q3", "q3"),
                ("iqr", "iqr"),
            ],
        );
        spread.extend(stats.figure("rounds").map(|v| Figure::count("rounds", v)));
        spread.extend(stats.figure("iterations").map(|v| Figure::count("iterations_per_round", v)));
        spread.extend(stats.figure("ops").map(|v| Figure::count("ops_per_s", v)));
        read.push(Read::ran(name, vec![time(median, Statistic::Median, 1.0, spread)]));
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use crate::{Better, Figure, Format, Statistic, parse};

    #[test]
    fn reads_pytest_benchmark_5_json() {
        let got = parse(Format::PytestBenchmark, include_bytes!("../fixtures/pytest-benchmark/pytest-benchmark.json"))
            .unwrap();
        let names: Vec<(&str, &str)> = got.iter().map(|b| (b.name.as_str(), b.segment.as_str())).collect();
        assert_eq!(
            names,
            [
                ("test_sorting.py::test_sort_small", "test_sorting_py_test_sort_small"),
                ("test_sorting.py::test_sort_sizes[100]", "test_sorting_py_test_sort_sizes_100"),
                ("test_sorting.py::test_sort_sizes[1000]", "test_sorting_py_test_sort_sizes_1000"),
                ("test_sorting.py::TestJoin::test_join", "test_sorting_py_test_join_test_join"),
            ]
        );
        let small = got[0].primary().unwrap();
        assert_eq!((small.unit.as_str(), small.better, small.statistic), ("s", Better::Lower, Statistic::Median));
        assert_eq!(small.value, 8.835999324219302e-07);
        assert!(small.spread.contains(&Figure::of("mean", 8.591200457885861e-07)));
        assert!(small.spread.contains(&Figure::count("rounds", 5.0)));
    }

    #[test]
    fn refuses_other_files() {
        let err = parse(Format::PytestBenchmark, include_bytes!("../fixtures/pyperf/pyperf.json")).unwrap_err();
        assert_eq!(err.reason, "benchmarks[0].fullname: missing (it has \"metadata\", \"runs\")");
    }
}
