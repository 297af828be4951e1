//! `go test -bench` output (Go's benchmark format): result lines `Benchmark<Name>[-P]
//! <iterations> <value> <unit> [<value> <unit>…]` among other lines, or the same inside a
//! `go test -json` stream (the `Output` of its events, joined). `pkg:` lines name the package;
//! `--- FAIL: Benchmark<Name>` marks a benchmark that failed, `--- SKIP:` one that was skipped.
//!
//! Names drop `Benchmark` and, when every result line ends in `-<digits>`, that GOMAXPROCS
//! suffix (as benchstat shows them); a file of several packages prefixes each name with its
//! package's last path element and `/`. `ns/op` is the primary measure (seconds, lower is
//! better); each other unit is a measure of its own (`B/op` → `b_per_op`, `allocs/op`, `MB/s`
//! and any unit per second higher is better). With `-count N` a benchmark's N lines give the
//! median of their values.

use std::collections::HashMap;

use crate::segment::{self, quoted};
use crate::{Better, Figure, Measure, Read, Statistic};

/// Longest line read as a result line.
const MAX_LINE: usize = 64 * 1024;

/// One benchmark's result lines, in the order read.
#[derive(Default)]
struct Lines {
    package: Option<String>,
    iterations: f64,
    /// Each unit with the values of its lines, in the order the units first came.
    units: Vec<(String, Vec<f64>)>,
    failed: Option<String>,
}

pub fn parse(text: &str) -> Result<Vec<Read>, String> {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if first.trim_start().starts_with('{') {
        return parse_text(&json_output(text)?);
    }
    parse_text(text)
}

/// The output a `go test -json` stream carries, its events' `Output` joined.
fn json_output(stream: &str) -> Result<String, String> {
    let mut out = String::new();
    for (i, line) in stream.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let event: serde_json::Value =
            serde_json::from_str(line).map_err(|err| format!("line {}: not a go test -json event: {err}", i + 1))?;
        if let Some(output) = event.get("Output").and_then(serde_json::Value::as_str) {
            out.push_str(output);
        }
    }
    Ok(out)
}

fn parse_text(text: &str) -> Result<Vec<Read>, String> {
    let mut order: Vec<String> = Vec::new();
    let mut benchmarks: HashMap<String, Lines> = HashMap::new();
    let mut package: Option<String> = None;
    let mut packages: Vec<String> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.len() > MAX_LINE {
            continue;
        }
        if let Some(pkg) = line.strip_prefix("pkg: ") {
            let pkg = pkg.trim().to_string();
            if !packages.contains(&pkg) {
                packages.push(pkg.clone());
            }
            package = Some(pkg);
            continue;
        }
        let (raw, outcome) = if let Some(rest) = line.strip_prefix("--- FAIL: ") {
            (rest.split_whitespace().next().unwrap_or(""), Err("go test: the benchmark failed (--- FAIL)"))
        } else if let Some(rest) = line.strip_prefix("--- SKIP: ") {
            (rest.split_whitespace().next().unwrap_or(""), Err("go test: the benchmark was skipped (--- SKIP)"))
        } else if is_result_line(line) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() == 1 {
                continue; // The name alone: Go prints it before a benchmark's own output.
            }
            (fields[0], Ok(fields))
        } else {
            continue;
        };
        if !raw.starts_with("Benchmark") {
            continue;
        }
        let key = format!("{}\u{0}{raw}", package.as_deref().unwrap_or(""));
        let entry = benchmarks.entry(key.clone()).or_insert_with(|| {
            order.push(key.clone());
            Lines { package: package.clone(), ..Lines::default() }
        });
        match outcome {
            Ok(fields) => add(entry, &fields).map_err(|err| format!("line {}: {err}: {}", i + 1, quoted(line)))?,
            Err(why) => entry.failed = Some(why.to_string()),
        }
    }
    let strip_procs = order
        .iter()
        .filter(|k| !benchmarks[*k].units.is_empty())
        .all(|k| procs_suffix(k.split('\u{0}').nth(1).unwrap_or("")).is_some());
    let mut read = Vec::new();
    for key in &order {
        let lines = benchmarks.remove(key).unwrap_or_default();
        let raw = key.split('\u{0}').nth(1).unwrap_or("");
        let mut name = raw.strip_prefix("Benchmark").unwrap_or(raw);
        if strip_procs {
            name = procs_suffix(name).unwrap_or(name);
        }
        let name = match (&lines.package, packages.len() > 1) {
            (Some(pkg), true) => format!("{}/{name}", pkg.rsplit('/').next().unwrap_or(pkg)),
            _ => name.to_string(),
        };
        read.push(match (lines.failed, lines.units.is_empty()) {
            (Some(why), true) => Read::failed(name, why),
            (_, true) => continue,
            (_, false) => Read::ran(name, measures(lines.units, lines.iterations)),
        });
    }
    Ok(merge_failed(read))
}

/// A `--- FAIL` line names the benchmark without its GOMAXPROCS suffix: when a result of the
/// same name came too, the result stands (a sub-benchmark failed, not the whole).
fn merge_failed(read: Vec<Read>) -> Vec<Read> {
    let ran: Vec<String> = read.iter().filter(|r| r.outcome.is_ok()).map(|r| r.name.clone()).collect();
    read.into_iter().filter(|r| r.outcome.is_ok() || !ran.contains(&r.name)).collect()
}

/// Whether the line is a result line's start: `Benchmark` then an upper-case letter, a
/// non-letter or the end (Go's rule for benchmark names).
fn is_result_line(line: &str) -> bool {
    line.strip_prefix("Benchmark").is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_lowercase()))
}

/// The name without its `-<digits>` suffix, when it has one.
fn procs_suffix(name: &str) -> Option<&str> {
    let (stem, digits) = name.rsplit_once('-')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(stem)
}

/// Adds one result line's iterations and values.
fn add(lines: &mut Lines, fields: &[&str]) -> Result<(), String> {
    let iterations: u64 = fields[1].parse().map_err(|_| format!("{} is not an iteration count", quoted(fields[1])))?;
    let pairs = &fields[2..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err("expected value and unit pairs after the iteration count".to_string());
    }
    lines.iterations += iterations as f64;
    for pair in pairs.chunks(2) {
        let value: f64 = pair[0].parse().map_err(|_| format!("{} is not a number", quoted(pair[0])))?;
        if !value.is_finite() || value < 0.0 {
            return Err(format!("{value} is not a finite, non-negative number"));
        }
        match lines.units.iter().position(|(u, _)| u == pair[1]) {
            Some(i) => lines.units[i].1.push(value),
            None if lines.units.len() < 64 => lines.units.push((pair[1].to_string(), vec![value])),
            None => {}
        }
    }
    Ok(())
}

/// The measures of a benchmark's lines, `ns/op` first.
fn measures(mut units: Vec<(String, Vec<f64>)>, iterations: f64) -> Vec<Measure> {
    if let Some(i) = units.iter().position(|(u, _)| u == "ns/op") {
        let time = units.remove(i);
        units.insert(0, time);
    }
    units
        .into_iter()
        .enumerate()
        .map(|(i, (unit, values))| {
            let (shown, scale, better) = match unit.as_str() {
                "ns/op" => ("s".to_string(), 1e-9, Better::Lower),
                "B/op" => ("bytes".to_string(), 1.0, Better::Lower),
                u if u.ends_with("/s") => (segment::unit(u), 1.0, Better::Higher),
                u => (segment::unit(u), 1.0, Better::Lower),
            };
            let (value, statistic, mut spread) = summary(values, scale);
            spread.push(Figure::count("iterations", iterations));
            let segment = (i > 0).then(|| segment::of_unit(&unit));
            Measure { segment, value, statistic, unit: shown, better, spread }
        })
        .collect()
}

/// A line's value (the mean over its iterations) or the median of several lines', scaled.
fn summary(mut values: Vec<f64>, scale: f64) -> (f64, Statistic, Vec<Figure>) {
    for v in &mut values {
        *v *= scale;
    }
    if values.len() == 1 {
        return (values[0], Statistic::Mean, vec![]);
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    let median = if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 };
    let spread = vec![
        Figure::of("min", values[0]),
        Figure::of("max", values[values.len() - 1]),
        Figure::count("runs", values.len() as f64),
    ];
    (median, Statistic::Median, spread)
}

#[cfg(test)]
mod tests {
    use crate::{Better, Figure, Format, Statistic, parse};

    #[test]
    fn reads_go_1_19_output_with_count_2() {
        let got = parse(Format::GoTest, include_bytes!("../fixtures/go/go-bench.txt")).unwrap();
        let names: Vec<(&str, &str)> = got.iter().map(|b| (b.name.as_str(), b.segment.as_str())).collect();
        assert_eq!(
            names,
            [("Sort", "sort"), ("Join", "join"), ("Sizes/n=10", "sizes_n_10"), ("Sizes/n=1000", "sizes_n_1000")]
        );
        let sort = got[0].primary().unwrap();
        assert_eq!((sort.unit.as_str(), sort.better, sort.statistic), ("s", Better::Lower, Statistic::Median));
        // 673.1 and 212.3 ns/op: their median.
        assert!((sort.value - 442.7e-9).abs() < 1e-15, "{}", sort.value);
        assert!(sort.spread.contains(&Figure::count("runs", 2.0)));
        assert!(sort.spread.contains(&Figure::count("iterations", 40_000.0)));
        let join = got[1].outcome.as_ref().unwrap();
        let segments: Vec<Option<&str>> = join.iter().map(|m| m.segment.as_deref()).collect();
        assert_eq!(segments, [None, Some("b_per_op"), Some("allocs_per_op")]);
        assert_eq!((join[1].unit.as_str(), join[1].value, join[2].unit.as_str()), ("bytes", 8.0, "allocs/op"));
        let sizes = got[2].outcome.as_ref().unwrap();
        assert_eq!((sizes[1].segment.as_deref(), sizes[1].better), (Some("mb_per_s"), Better::Higher));
        assert_eq!(
            (sizes[2].segment.as_deref(), sizes[2].unit.as_str(), sizes[2].better),
            (Some("items_per_op"), "items/op", Better::Lower)
        );
    }

    #[test]
    fn keeps_the_procs_suffix_when_not_every_line_has_one() {
        let got = parse(Format::GoTest, include_bytes!("../fixtures/go/go-bench-cpu.txt")).unwrap();
        let names: Vec<&str> = got.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["Sort", "Sort-2"]);
    }

    #[test]
    fn a_failed_benchmark_is_named_failed_in_text_and_json_streams() {
        for file in
            [&include_bytes!("../fixtures/go/go-bench-fail.txt")[..], include_bytes!("../fixtures/go/go-bench.json")]
        {
            let got = parse(Format::GoTest, file).unwrap();
            let names: Vec<&str> = got.iter().map(|b| b.name.as_str()).collect();
            assert_eq!(names, ["Sort", "Join", "Sizes/n=10", "Sizes/n=1000", "Fails"]);
            assert_eq!(got[4].outcome, Err("go test: the benchmark failed (--- FAIL)".to_string()));
            assert!(got[3].primary().is_some());
        }
    }

    #[test]
    fn several_packages_prefix_their_names() {
        let text = "pkg: example.com/a\nBenchmarkX-2  10  5 ns/op\npkg: example.com/b\nBenchmarkX-2  10  7 ns/op\n";
        let got = parse(Format::GoTest, text.as_bytes()).unwrap();
        let names: Vec<(&str, &str)> = got.iter().map(|b| (b.name.as_str(), b.segment.as_str())).collect();
        assert_eq!(names, [("a/X", "a_x"), ("b/X", "b_x")]);
    }

    #[test]
    fn refuses_a_malformed_result_line_and_a_file_without_one() {
        let err = parse(Format::GoTest, b"BenchmarkX-2  many  5 ns/op\n").unwrap_err();
        assert_eq!(err.reason, "line 1: \"many\" is not an iteration count: \"BenchmarkX-2  many  5 ns/op\"");
        let err = parse(Format::GoTest, b"BenchmarkX-2  10  5\n").unwrap_err();
        assert_eq!(
            err.reason,
            "line 1: expected value and unit pairs after the iteration count: \"BenchmarkX-2  10  5\""
        );
        let err = parse(Format::GoTest, include_bytes!("../fixtures/hyperfine/hyperfine.json")).unwrap_err();
        assert!(err.reason.starts_with("line 1: not a go test -json event"), "{}", err.reason);
        let err = parse(Format::GoTest, b"PASS\nok  \texample.com/x\t0.1s\n").unwrap_err();
        assert_eq!(err.to_string(), "not go test -bench output (go format): no benchmark in it");
        // Benchmarkers (lower case after the prefix) is no benchmark name.
        assert!(parse(Format::GoTest, b"Benchmarkers met\n").is_err());
    }
}
