//! Bencher Metric Format: `{ "<benchmark>": { "<measure>": { "value", "lower_value",
//! "upper_value" } } }`. Bencher's built-in measures keep their units: `latency` in nanoseconds
//! (converted to seconds), `throughput` in operations per second (higher is better); the
//! adapters' `build-time` in seconds and `file-size` in bytes; any other measure has no unit
//! and is lower-is-better unless the spec says otherwise. The primary measure is `latency`,
//! else `throughput`, else the first by name; each other is keyed by its own segment.

use serde_json::Value;

use crate::json::Node;
use crate::{Better, Figure, Measure, Read, Statistic, segment};

/// Most measures taken from one benchmark.
const MAX_MEASURES: usize = 64;

pub fn parse(document: &Value) -> Result<Vec<Read>, String> {
    let root = Node::root(document);
    let mut read = Vec::new();
    for (name, benchmark) in root.entries()? {
        let mut measures = Vec::new();
        for (measure, values) in benchmark.entries()?.into_iter().take(MAX_MEASURES) {
            measures.push(self::measure(measure, &values)?);
        }
        if measures.is_empty() {
            return Err(format!("{}: no measure", benchmark.path));
        }
        let primary = ["latency", "throughput"]
            .iter()
            .find_map(|p| measures.iter().position(|m| m.segment.as_deref() == Some(p)))
            .unwrap_or(0);
        let mut first = measures.remove(primary);
        first.segment = None;
        measures.insert(0, first);
        read.push(Read::ran(name, measures));
    }
    Ok(read)
}

fn measure(name: &str, values: &Node<'_>) -> Result<Measure, String> {
    let value = values.number_at("value")?;
    let (unit, scale, better) = match name {
        "latency" => ("s", 1e-9, Better::Lower),
        "throughput" => ("ops/s", 1.0, Better::Higher),
        "build-time" => ("s", 1.0, Better::Lower),
        "file-size" => ("bytes", 1.0, Better::Lower),
        _ => ("", 1.0, Better::Lower),
    };
    let spread = [("lower", "lower_value"), ("upper", "upper_value")]
        .iter()
        .filter_map(|(label, key)| values.figure(key).map(|v| Figure::of(label, v * scale)))
        .collect();
    Ok(Measure {
        segment: Some(segment::readable(name)),
        value: value * scale,
        statistic: Statistic::Value,
        unit: unit.to_string(),
        better,
        spread,
    })
}

#[cfg(test)]
mod tests {
    use crate::{Better, Figure, Format, parse};

    #[test]
    fn reads_the_documented_example() {
        let got = parse(Format::Bmf, include_bytes!("../fixtures/bmf/bmf.json")).unwrap();
        let names: Vec<(&str, &str)> = got.iter().map(|b| (b.name.as_str(), b.segment.as_str())).collect();
        assert_eq!(
            names,
            [
                ("/bin/sh -c ./my_build_script.sh", "bin_sh_c_my_build_script_sh"),
                ("benchmark_name", "benchmark_name"),
                ("my_binary", "my_binary")
            ]
        );
        let measures = got[1].outcome.as_ref().unwrap();
        assert_eq!(measures.len(), 2);
        let (latency, throughput) = (&measures[0], &measures[1]);
        assert_eq!((latency.segment.as_deref(), latency.unit.as_str(), latency.better), (None, "s", Better::Lower));
        assert!((latency.value - 88e-9).abs() < 1e-15);
        assert_eq!(latency.spread[0].label, "lower");
        assert!((latency.spread[1].value - 88.88e-9).abs() < 1e-15);
        assert_eq!(
            (throughput.segment.as_deref(), throughput.better, throughput.value),
            (Some("throughput"), Better::Higher, 5.55)
        );
        let size = got[2].primary().unwrap();
        assert_eq!((size.unit.as_str(), size.value, size.spread.as_slice()), ("bytes", 42.0, &[] as &[Figure]));
    }

    #[test]
    fn refuses_a_measure_without_a_value() {
        let err = parse(Format::Bmf, br#"{"b": {"latency": {"lower_value": 1}}}"#).unwrap_err();
        assert_eq!(err.reason, "[\"b\"][\"latency\"].value: missing (it has \"lower_value\")");
        let err = parse(Format::Bmf, br#"[1, 2]"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "not Bencher Metric Format JSON (bmf format): the document: expected an object, got an array of 2"
        );
    }
}
