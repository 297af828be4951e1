//! criterion's results: per benchmark a folder of `target/criterion` whose `new/benchmark.json`
//! names it (`full_id`, `group_id/function_id/value_str`) and whose `new/estimates.json` holds
//! the estimates of the last run, in nanoseconds: `{ "mean" | "median" | "slope" | "std_dev" |
//! "median_abs_dev": { "point_estimate", "standard_error", "confidence_interval": { "lower_bound",
//! "upper_bound" } } }`. The estimate is the slope when criterion fitted one (its linear
//! sampling), else the mean — the figure criterion prints as "time: [low estimate high]".
//! The caller walks the folder; this reads the two files of each benchmark.

use serde_json::Value;

use crate::json::Node;
use crate::{Figure, Read, Statistic, time};

/// One benchmark's files, as read from its folder.
#[derive(Debug, Clone)]
pub struct CriterionFiles {
    /// The folder, relative to `target/criterion` (for messages).
    pub folder: String,
    /// `new/benchmark.json`.
    pub benchmark: Vec<u8>,
    /// `new/estimates.json`.
    pub estimates: Vec<u8>,
}

pub fn parse(files: &[CriterionFiles]) -> Result<Vec<Read>, String> {
    let mut read = Vec::new();
    for f in files {
        let at = |file: &str, err: String| format!("{}/new/{file}: {err}", f.folder);
        let benchmark = crate::json::document(&f.benchmark).map_err(|e| at("benchmark.json", e))?;
        let name = Node::root(&benchmark).field("full_id").and_then(|n| n.string().map(str::to_string));
        let name = name.map_err(|e| at("benchmark.json", e))?;
        let estimates = crate::json::document(&f.estimates).map_err(|e| at("estimates.json", e))?;
        read.push(Read::ran(name, vec![measure(&estimates).map_err(|e| at("estimates.json", e))?]));
    }
    // The walk's order is the file system's: by name, so that a file's order does not depend
    // on it.
    read.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(read)
}

fn measure(estimates: &Value) -> Result<crate::Measure, String> {
    let root = Node::root(estimates);
    let (chosen, statistic) = match root.optional("slope")? {
        Some(slope) => (slope, Statistic::Slope),
        None => (root.field("mean")?, Statistic::Mean),
    };
    let value = chosen.number_at("point_estimate")?;
    let mut spread = Vec::new();
    if let Some(interval) = chosen.optional("confidence_interval")? {
        spread.extend(interval.figure("lower_bound").map(|v| Figure::of("ci_lower", v)));
        spread.extend(interval.figure("upper_bound").map(|v| Figure::of("ci_upper", v)));
    }
    spread.extend(chosen.figure("standard_error").map(|v| Figure::of("standard_error", v)));
    for (label, key) in [("mean", "mean"), ("median", "median"), ("sd", "std_dev"), ("mad", "median_abs_dev")] {
        if statistic == Statistic::Mean && key == "mean" {
            continue;
        }
        if let Some(point) = root.optional(key)?.and_then(|n| n.figure("point_estimate")) {
            spread.push(Figure::of(label, point));
        }
    }
    Ok(time(value, statistic, 1e-9, spread))
}

#[cfg(test)]
mod tests {
    use super::CriterionFiles;
    use crate::{Better, Statistic, parse_criterion};

    fn fixture(folder: &str) -> CriterionFiles {
        let dir = format!("{}/fixtures/criterion/{folder}/new", env!("CARGO_MANIFEST_DIR"));
        CriterionFiles {
            folder: folder.to_string(),
            benchmark: std::fs::read(format!("{dir}/benchmark.json")).unwrap(),
            estimates: std::fs::read(format!("{dir}/estimates.json")).unwrap(),
        }
    }

    #[test]
    fn reads_criterion_0_8_estimates_with_their_names() {
        let files = [fixture("sort 10"), fixture("sizes/sort/1000"), fixture("sizes/sort/100")];
        let got = parse_criterion(&files).unwrap();
        let names: Vec<(&str, &str)> = got.iter().map(|b| (b.name.as_str(), b.segment.as_str())).collect();
        assert_eq!(
            names,
            [("sizes/sort/100", "sizes_sort_100"), ("sizes/sort/1000", "sizes_sort_1000"), ("sort 10", "sort_10")]
        );
        let sort = got[2].primary().unwrap();
        assert_eq!((sort.unit.as_str(), sort.better, sort.statistic), ("s", Better::Lower, Statistic::Slope));
        // criterion printed "sort 10  time: [34.254 ns 38.403 ns 40.736 ns]" for this run.
        assert!((sort.value - 38.403e-9).abs() < 0.001e-9, "{}", sort.value);
        let lower = sort.spread.iter().find(|f| f.label == "ci_lower").unwrap();
        assert!((lower.value - 34.254e-9).abs() < 0.001e-9);
        assert!(sort.spread.iter().any(|f| f.label == "median"));
    }

    #[test]
    fn without_a_slope_the_mean_is_the_estimate() {
        let estimates = br#"{"mean": {"point_estimate": 120.0, "standard_error": 2.0,
            "confidence_interval": {"confidence_level": 0.95, "lower_bound": 110.0, "upper_bound": 130.0}},
            "median": {"point_estimate": 118.0}}"#;
        let files = [CriterionFiles {
            folder: "f".into(),
            benchmark: br#"{"full_id": "f"}"#.to_vec(),
            estimates: estimates.to_vec(),
        }];
        let m = parse_criterion(&files).unwrap()[0].primary().unwrap().clone();
        assert_eq!(m.statistic, Statistic::Mean);
        assert!((m.value - 120e-9).abs() < 1e-18);
        assert_eq!(m.spread[0].label, "ci_lower");
        assert!((m.spread[0].value - 110e-9).abs() < 1e-18);
    }

    #[test]
    fn refuses_files_that_are_not_criterions_naming_the_file() {
        let files =
            [CriterionFiles { folder: "x".into(), benchmark: br#"{"id": 1}"#.to_vec(), estimates: b"{}".to_vec() }];
        let err = parse_criterion(&files).unwrap_err();
        assert_eq!(
            err.to_string(),
            "not criterion estimates (criterion format): x/new/benchmark.json: full_id: missing (it has \"id\")"
        );
    }
}
