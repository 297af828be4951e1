//! `hyperfine --export-json`: `{ "results": [{ "command", "mean", "stddev", "median", "min",
//! "max", "user", "system", "times", "exit_codes" }] }`, times in seconds. The estimate is the
//! median of the runs (the mean, hyperfine's headline "mean ± σ", when the file has no median),
//! the mean in the details; the name is the command, or its `-n` name.

use serde_json::Value;

use crate::json::Node;
use crate::{Figure, Read, Statistic, figures, time};

/// Why a zero estimate is no measurement: hyperfine subtracts the shell's own start from each
/// run, and a command faster than that start comes out as nothing.
const ZERO: &str = "hyperfine measured 0 s: the command is faster than the shell start hyperfine subtracts; \
                    run it with -N (--shell=none) or give it more work";

pub fn parse(document: &Value) -> Result<Vec<Read>, String> {
    let root = Node::root(document);
    let mut read = Vec::new();
    for result in root.field("results")?.elements()? {
        let name = result.field("command")?.string()?;
        let (value, statistic) = match result.figure("median") {
            Some(median) => (median, Statistic::Median),
            None => (result.number_at("mean")?, Statistic::Mean),
        };
        let mut spread = figures(
            &result,
            &[
                ("mean", "mean"),
                ("sd", "stddev"),
                ("min", "min"),
                ("max", "max"),
                ("user", "user"),
                ("system", "system"),
            ],
        );
        if let Some(times) = result.optional("times")? {
            spread.push(Figure::count("runs", times.elements()?.len() as f64));
        }
        // hyperfine -i keeps timing a command that fails; the count says so beside the figure.
        if let Some(codes) = result.optional("exit_codes")? {
            let failed = codes.elements()?.iter().filter(|c| c.value.as_i64() != Some(0)).count();
            if failed > 0 {
                spread.push(Figure::count("failed_runs", failed as f64));
            }
        }
        if value == 0.0 {
            read.push(Read::failed(name, ZERO));
            continue;
        }
        read.push(Read::ran(name, vec![time(value, statistic, 1.0, spread)]));
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use crate::{Better, Figure, Format, Statistic, parse};

    #[test]
    fn reads_hyperfine_1_15_export() {
        let got = parse(Format::Hyperfine, include_bytes!("../fixtures/hyperfine/hyperfine.json")).unwrap();
        let names: Vec<(&str, &str)> = got.iter().map(|b| (b.name.as_str(), b.segment.as_str())).collect();
        assert_eq!(names, [("sleep", "sleep"), ("sort services", "sort_services"), ("grep miss", "grep_miss")]);
        let sleep = got[0].primary().unwrap();
        assert_eq!((sleep.unit.as_str(), sleep.better, sleep.statistic), ("s", Better::Lower, Statistic::Median));
        assert!((0.01..0.05).contains(&sleep.value), "{}", sleep.value);
        assert!(sleep.spread.contains(&Figure::count("runs", 5.0)));
        assert_eq!(
            sleep.spread.iter().map(|f| f.label).collect::<Vec<_>>(),
            ["mean", "sd", "min", "max", "user", "system", "runs"]
        );
        // grep's miss exits 1 on every run: timed all the same, and said.
        assert!(got[2].primary().unwrap().spread.contains(&Figure::count("failed_runs", 5.0)));
        // sort's median is 0: faster than the shell start hyperfine takes off.
        assert_eq!(got[1].outcome, Err(super::ZERO.to_string()));
    }

    #[test]
    fn reads_a_parameter_scan() {
        let got = parse(Format::Hyperfine, include_bytes!("../fixtures/hyperfine/hyperfine-param.json")).unwrap();
        let segments: Vec<&str> = got.iter().map(|b| b.segment.as_str()).collect();
        assert_eq!(segments, ["sleep_0_01", "sleep_0_02"]);
    }

    #[test]
    fn refuses_other_files_naming_what_did_not_parse() {
        let err = parse(Format::Hyperfine, include_bytes!("../fixtures/vitest/vitest.json")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "not hyperfine --export-json (hyperfine format): results: missing (it has \"files\")"
        );
        let err = parse(Format::Hyperfine, br#"{"results": [{"command": "x", "mean": "fast"}]}"#).unwrap_err();
        assert_eq!(err.reason, "results[0].mean: expected a number, got \"fast\"");
        let err = parse(Format::Hyperfine, br#"{"results": []}"#).unwrap_err();
        assert_eq!(err.reason, "no benchmark in it");
    }
}
