//! pyperf's JSON (format 1.x): `{ "version": "1.0", "metadata": { … }, "benchmarks": [{
//! "metadata": { "name", "unit", "loops" }, "runs": [{ "values": [...] }] }] }`. Each value is
//! the time of one loop iteration (or the figure of the benchmark's `unit`: `second`, `byte`,
//! `integer`); a run without values is pyperf's calibration. The estimate is the median of every
//! value of every run (as `pyperf stats` gives it; pyperf's headline "Mean +- std dev" goes to
//! the details): a mean is dominated by the few values a collection or the scheduler
//! stretched. Its name is the benchmark's metadata name, else the file's.

use serde_json::Value;

use crate::json::Node;
use crate::{Better, Figure, Measure, Read, Statistic};

pub fn parse(document: &Value) -> Result<Vec<Read>, String> {
    let root = Node::root(document);
    let version = root.field("version")?;
    if !version.string()?.starts_with("1.") {
        return Err(format!("version: {}, where pyperf's format 1.x is read", version.value));
    }
    let common = root.optional("metadata")?;
    let common_name = common.as_ref().and_then(|m| m.value.get("name")).and_then(Value::as_str);
    let common_unit = common.as_ref().and_then(|m| m.value.get("unit")).and_then(Value::as_str);
    let mut read = Vec::new();
    for bench in root.field("benchmarks")?.elements()? {
        let metadata = bench.optional("metadata")?;
        let own = |key: &str| metadata.as_ref().and_then(|m| m.value.get(key)).and_then(Value::as_str);
        let name = own("name").or(common_name).ok_or_else(|| format!("{}.metadata.name: missing", bench.path))?;
        let mut values = Vec::new();
        let mut runs = 0;
        for run in bench.field("runs")?.elements()? {
            if let Some(run_values) = run.optional("values")? {
                runs += 1;
                for value in run_values.elements()? {
                    values.push(value.number()?);
                }
            }
        }
        let unit = own("unit").or(common_unit).unwrap_or("second");
        let loops = metadata.as_ref().and_then(|m| m.figure("loops"));
        read.push(match measure(values, runs, unit, loops) {
            Some(measure) => Read::ran(name, vec![measure]),
            None => Read::failed(name, "pyperf recorded no value for it (calibration runs only)"),
        });
    }
    Ok(read)
}

/// The median of the values and their spread: the mean, the sample standard deviation (as
/// pyperf's), the extremes and the counts.
fn measure(mut values: Vec<f64>, runs: usize, unit: &str, loops: Option<f64>) -> Option<Measure> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    let median = if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 };
    let mut spread =
        vec![Figure::of("mean", mean), Figure::of("min", values[0]), Figure::of("max", values[values.len() - 1])];
    if values.len() > 1 {
        let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        spread.insert(1, Figure::of("sd", variance.sqrt()));
    }
    spread.push(Figure::count("values", n));
    spread.push(Figure::count("runs", runs as f64));
    spread.extend(loops.map(|l| Figure::count("loops", l)));
    let unit = match unit {
        "second" => "s",
        "byte" => "bytes",
        "integer" => "",
        other => other,
    };
    Some(Measure {
        segment: None,
        value: median,
        statistic: Statistic::Median,
        unit: crate::segment::unit(unit),
        better: Better::Lower,
        spread,
    })
}

#[cfg(test)]
mod tests {
    use crate::{Better, Figure, Format, Statistic, parse};

    #[test]
    fn reads_pyperf_2_11_benchmarks() {
        let got = parse(Format::Pyperf, include_bytes!("../fixtures/pyperf/pyperf.json")).unwrap();
        let names: Vec<(&str, &str)> = got.iter().map(|b| (b.name.as_str(), b.segment.as_str())).collect();
        assert_eq!(names, [("sort small", "sort_small"), ("sort large", "sort_large")]);
        let large = got[1].primary().unwrap();
        assert_eq!((large.unit.as_str(), large.better, large.statistic), ("s", Better::Lower, Statistic::Median));
        // `pyperf stats` says of this file "Median +- MAD: 34.9 us +- 2.4 us", "Mean +- std dev:
        // 35.1 us +- 3.6 us".
        assert!((large.value - 34.9e-6).abs() < 0.05e-6, "{}", large.value);
        let mean = large.spread.iter().find(|f| f.label == "mean").unwrap();
        assert!((mean.value - 35.1e-6).abs() < 0.05e-6, "{}", mean.value);
        let sd = large.spread.iter().find(|f| f.label == "sd").unwrap();
        assert!((sd.value - 3.6e-6).abs() < 0.05e-6, "{}", sd.value);
        // --fast: ten worker runs of two values each (the calibration run holds none).
        assert!(large.spread.contains(&Figure::count("values", 20.0)), "{:?}", large.spread);
        assert!(large.spread.contains(&Figure::count("runs", 10.0)));
    }

    #[test]
    fn refuses_other_files() {
        let err =
            parse(Format::Pyperf, include_bytes!("../fixtures/pytest-benchmark/pytest-benchmark.json")).unwrap_err();
        assert_eq!(err.reason, "version: \"5.3.1\", where pyperf's format 1.x is read");
    }
}
