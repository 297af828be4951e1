//! The results files of benchmark frameworks, read into [`Benchmark`]s: per benchmark its name as
//! the framework wrote it, a key segment made from it ([`segment`]), and its measures — the
//! framework's own estimate for the run (mean, median or slope, said in [`Statistic`]), its unit,
//! its direction ([`Better`]) and the framework's within-run spread ([`Figure`]s).
//!
//! One small pure parser per format ([`Format`]); no I/O. The input is untrusted product output:
//! bounded ([`MAX_INPUT_BYTES`], [`MAX_BENCHMARKS`], names and units cut to a length), never
//! executed, and a file in another format is refused with the format's name and the first
//! thing that did not parse ([`Refusal`]). Times are converted to seconds, whatever the
//! framework's own unit.

mod bmf;
mod criterion;
mod google;
mod gotest;
mod hyperfine;
mod json;
mod mitata;
mod pyperf;
mod pytest;
pub mod segment;
mod tinybench;
mod vitest;

use std::fmt;
use std::str::FromStr;

pub use criterion::CriterionFiles;

/// Largest results file read (a mitata file with its samples, a pytest-benchmark file with its
/// data, stay far below it); a caller reads at most this many bytes and passes them on.
pub const MAX_INPUT_BYTES: usize = 64 << 20;

/// Most benchmarks taken from one file; past it the file is refused.
pub const MAX_BENCHMARKS: usize = 10_000;

/// Longest benchmark name kept as the framework wrote it (Bencher's bound); longer ones are cut
/// and end in `…`.
pub const MAX_NAME_CHARS: usize = 1024;

/// The formats read, each the results of one framework.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Bencher Metric Format: `{ "<benchmark>": { "<measure>": { "value", "lower_value", "upper_value" } } }`.
    Bmf,
    /// `hyperfine --export-json`.
    Hyperfine,
    /// `vitest bench --outputJson`.
    Vitest,
    /// tinybench's tasks as `[{ name, result }]` (tinybench 2 and 3 to 6).
    Tinybench,
    /// mitata's `run({ format: 'json' })`.
    Mitata,
    /// `pytest --benchmark-json`.
    PytestBenchmark,
    /// pyperf's JSON (`-o`, `--append`).
    Pyperf,
    /// `go test -bench` text, or its `go test -json` stream.
    GoTest,
    /// criterion's `target/criterion/**/new/{benchmark,estimates}.json`.
    Criterion,
    /// Google Benchmark's `--benchmark_format=json` (or `--benchmark_out`).
    GoogleBenchmark,
}

impl Format {
    pub const ALL: [Format; 10] = [
        Format::Bmf,
        Format::Hyperfine,
        Format::Vitest,
        Format::Tinybench,
        Format::Mitata,
        Format::PytestBenchmark,
        Format::Pyperf,
        Format::GoTest,
        Format::Criterion,
        Format::GoogleBenchmark,
    ];

    /// The spec's name of the format (`format = "vitest"`).
    pub const fn name(self) -> &'static str {
        match self {
            Format::Bmf => "bmf",
            Format::Hyperfine => "hyperfine",
            Format::Vitest => "vitest",
            Format::Tinybench => "tinybench",
            Format::Mitata => "mitata",
            Format::PytestBenchmark => "pytest-benchmark",
            Format::Pyperf => "pyperf",
            Format::GoTest => "go",
            Format::Criterion => "criterion",
            Format::GoogleBenchmark => "google-benchmark",
        }
    }

    /// What the format is, as a refusal names it.
    pub const fn title(self) -> &'static str {
        match self {
            Format::Bmf => "Bencher Metric Format JSON",
            Format::Hyperfine => "hyperfine --export-json",
            Format::Vitest => "vitest bench --outputJson",
            Format::Tinybench => "tinybench task results",
            Format::Mitata => "mitata JSON",
            Format::PytestBenchmark => "pytest-benchmark --benchmark-json",
            Format::Pyperf => "pyperf JSON",
            Format::GoTest => "go test -bench output",
            Format::Criterion => "criterion estimates",
            Format::GoogleBenchmark => "Google Benchmark JSON",
        }
    }

    /// Whether the results are a folder (criterion's `target/criterion`) rather than one file.
    pub const fn is_directory(self) -> bool {
        matches!(self, Format::Criterion)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Format, String> {
        Format::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
            format!("unknown benchmark format {s:?}; expected one of {}", names.join(", "))
        })
    }
}

/// Which way a measure improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Times, sizes, allocations.
    Lower,
    /// Throughput: operations, bytes or items per second.
    Higher,
}

impl Better {
    /// The direction every format gives a unit: a rate (`ops/s`, `items/s`, `MB/s`, any unit
    /// per second) is higher-is-better, everything else (times, sizes, counts per operation,
    /// a unit-less figure) lower-is-better. A receiver of a measure's key and unit alone (the
    /// controller, from an observation) gets the direction the parser gave.
    pub fn of_unit(unit: &str) -> Better {
        if unit.ends_with("/s") { Better::Higher } else { Better::Lower }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Better::Lower => "lower",
            Better::Higher => "higher",
        }
    }
}

/// Which estimate of the framework a measure's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statistic {
    /// The mean over the run's samples (or iterations).
    Mean,
    /// The median over the run's samples, or over repeated runs of the benchmark.
    Median,
    /// criterion's slope: the time per iteration fitted over its linearly growing samples.
    Slope,
    /// A single figure the framework or the user reported (Bencher Metric Format).
    Value,
}

impl Statistic {
    pub const fn name(self) -> &'static str {
        match self {
            Statistic::Mean => "mean",
            Statistic::Median => "median",
            Statistic::Slope => "slope",
            Statistic::Value => "value",
        }
    }
}

/// One figure of the framework's within-run spread, for the details: in the measure's unit
/// when `in_unit`, else a plain number (a count of samples, a percentage).
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub label: &'static str,
    pub value: f64,
    pub in_unit: bool,
}

impl Figure {
    /// A figure in the measure's unit (`sd`, `min`, `p99`, …).
    pub fn of(label: &'static str, value: f64) -> Figure {
        Figure { label, value, in_unit: true }
    }

    /// A count or ratio (`samples`, `iterations`, `rme_percent`, …).
    pub fn count(label: &'static str, value: f64) -> Figure {
        Figure { label, value, in_unit: false }
    }
}

/// One measure of a benchmark: the estimate, what it is and which way is better.
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    /// The measure's key segment (`allocs_per_op`, `cpu_time`), or None for the benchmark's
    /// primary measure, keyed by the benchmark alone.
    pub segment: Option<String>,
    /// The framework's estimate for this run, finite and non-negative.
    pub value: f64,
    pub statistic: Statistic,
    /// `s` for times (converted), `ops/s`, `bytes`, `bytes/s`, or the framework's own unit,
    /// cut to [`segment::MAX_UNIT_CHARS`] printable characters.
    pub unit: String,
    pub better: Better,
    /// The framework's within-run spread, for the details.
    pub spread: Vec<Figure>,
}

/// One benchmark of a results file: its measures, the primary first, or why the framework
/// says it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Benchmark {
    /// The name as the framework wrote it (control characters made spaces, cut to
    /// [`MAX_NAME_CHARS`]): the metric's title.
    pub name: String,
    /// Its key segment, unique in the file: see [`segment`].
    pub segment: String,
    pub outcome: Result<Vec<Measure>, String>,
}

impl Benchmark {
    /// The primary measure, when the benchmark ran.
    pub fn primary(&self) -> Option<&Measure> {
        self.outcome.as_ref().ok().and_then(|m| m.first())
    }
}

/// A results file that is not in the format named, or out of bounds: the format and the first
/// thing that did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub format: Format,
    /// Where and what (`results[2].mean: expected a number, got "fast"`).
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not {} ({} format): {}", self.format.title(), self.format.name(), self.reason)
    }
}

impl std::error::Error for Refusal {}

/// A benchmark as a parser reads it, before its segment is assigned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Read {
    pub name: String,
    pub outcome: Result<Vec<Measure>, String>,
}

impl Read {
    pub fn ran(name: impl Into<String>, measures: Vec<Measure>) -> Read {
        Read { name: name.into(), outcome: Ok(measures) }
    }

    pub fn failed(name: impl Into<String>, why: impl Into<String>) -> Read {
        Read { name: name.into(), outcome: Err(why.into()) }
    }
}

/// Reads one results file in `format` (every format but [`Format::Criterion`], whose results are
/// a folder: [`parse_criterion`]).
pub fn parse(format: Format, input: &[u8]) -> Result<Vec<Benchmark>, Refusal> {
    let refuse = |reason: String| Refusal { format, reason };
    if input.len() > MAX_INPUT_BYTES {
        return Err(refuse(format!("{} bytes, more than the {MAX_INPUT_BYTES} read", input.len())));
    }
    if input.starts_with(&[0x1f, 0x8b]) {
        return Err(refuse("a gzip-compressed file; write it uncompressed".to_string()));
    }
    let read = match format {
        Format::GoTest => gotest::parse(&String::from_utf8_lossy(input)),
        Format::Criterion => Err("criterion's results are a folder (target/criterion), not one file".to_string()),
        _ => json::document(input).and_then(|value| match format {
            Format::Bmf => bmf::parse(&value),
            Format::Hyperfine => hyperfine::parse(&value),
            Format::Vitest => vitest::parse(&value),
            Format::Tinybench => tinybench::parse(&value),
            Format::Mitata => mitata::parse(&value),
            Format::PytestBenchmark => pytest::parse(&value),
            Format::Pyperf => pyperf::parse(&value),
            Format::GoogleBenchmark => google::parse(&value),
            Format::GoTest | Format::Criterion => unreachable!("handled above"),
        }),
    };
    read.and_then(finish).map_err(refuse)
}

/// Reads criterion's results: one [`CriterionFiles`] per benchmark folder that has a
/// `new/estimates.json`.
pub fn parse_criterion(files: &[CriterionFiles]) -> Result<Vec<Benchmark>, Refusal> {
    criterion::parse(files).and_then(finish).map_err(|reason| Refusal { format: Format::Criterion, reason })
}

/// Bounds the benchmarks read and gives each its segment.
fn finish(read: Vec<Read>) -> Result<Vec<Benchmark>, String> {
    if read.is_empty() {
        return Err("no benchmark in it".to_string());
    }
    if read.len() > MAX_BENCHMARKS {
        return Err(format!("{} benchmarks, more than the {MAX_BENCHMARKS} taken", read.len()));
    }
    let names: Vec<&str> = read.iter().map(|r| r.name.as_str()).collect();
    let segments = segment::assign(&names)?;
    Ok(read
        .into_iter()
        .zip(segments)
        .map(|(r, segment)| Benchmark { name: segment::title(&r.name), segment, outcome: r.outcome })
        .collect())
}

/// Seconds per one of a framework's time units (`ns`, `us`/`µs`, `ms`, `s`).
pub(crate) fn seconds_per(unit: &str) -> Option<f64> {
    match unit {
        "ns" => Some(1e-9),
        "us" | "µs" | "μs" => Some(1e-6),
        "ms" => Some(1e-3),
        "s" => Some(1.0),
        _ => None,
    }
}

/// A time measure, its estimate and the spread figures given in `scale` seconds per unit.
pub(crate) fn time(value: f64, statistic: Statistic, scale: f64, spread: Vec<Figure>) -> Measure {
    let spread =
        spread.into_iter().map(|f| if f.in_unit { Figure { value: f.value * scale, ..f } } else { f }).collect();
    Measure { segment: None, value: value * scale, statistic, unit: "s".to_string(), better: Better::Lower, spread }
}

/// The figures of `node` that are there, each in the measure's unit.
pub(crate) fn figures(node: &json::Node<'_>, labels: &[(&'static str, &str)]) -> Vec<Figure> {
    labels.iter().filter_map(|(label, key)| node.figure(key).map(|v| Figure::of(label, v))).collect()
}

/// The time figures tinybench and vitest give beside a rate (`mean`, `median`, `p99`, … in
/// `scale` seconds), in seconds and labelled so (`mean_s`): not in the rate's unit.
pub(crate) fn times_beside_rate(node: &json::Node<'_>, scale: f64) -> Vec<Figure> {
    const TIMES: [(&str, &str); 9] = [
        ("mean_s", "mean"),
        ("median_s", "median"),
        ("median_s", "p50"),
        ("sd_s", "sd"),
        ("min_s", "min"),
        ("max_s", "max"),
        ("p75_s", "p75"),
        ("p99_s", "p99"),
        ("p999_s", "p999"),
    ];
    TIMES.iter().filter_map(|(label, key)| node.figure(key).map(|v| Figure::count(label, v * scale))).collect()
}

#[cfg(test)]
mod tests;
