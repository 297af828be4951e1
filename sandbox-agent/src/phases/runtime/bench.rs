//! Bench steps: a benchmark framework's suite run as the step's user, its results (a file,
//! criterion's folder, or the command's standard output) read as that user, bounded, and parsed
//! by `sandbench_adapters`. Each benchmark's measures become observations
//! `bench.<name>.<benchmark>[.<measure>]` in the format's unit; a benchmark the framework says
//! failed gets an error on its key; every benchmark's estimate, statistic and spread go to a
//! file of the sandbox, `bench/<name>-<trial>.json`, for the report's details. The step's
//! process tree gives companions (`bench.<name>.cpu`, …). A step that failed, or whose results
//! are missing or refused, gets the error on `bench.<name>`; the benchmarks its results did
//! report are recorded all the same (a framework writes the results of those that ran).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow};
use sandbench_adapters::{Benchmark, CriterionFiles, Format, MAX_INPUT_BYTES};
use sandbench_proto::plan::{AgentPlan, BenchStep};
use sandbench_proto::v1::LogStream;
use serde_json::{Value, json};

use super::super::common;
use crate::as_user;
use crate::context::PhaseContext;
use crate::probes::command::{self, ShellCommand};
use crate::users::User;

/// The largest `benchmark.json` or `estimates.json` of criterion read (they are a few KiB).
const MAX_CRITERION_FILE: usize = 1 << 20;
/// Entries of criterion's folder looked at, and how deep, before the walk gives up.
const MAX_CRITERION_ENTRIES: usize = 100_000;
const MAX_CRITERION_DEPTH: usize = 8;

/// Runs a bench step as `user` in its folder (relative to `base`) and records what its results
/// say; Err when the step failed or its results could not be read.
pub fn run_bench(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    user: &User,
    base: &Path,
    trial: u32,
    bench: &BenchStep,
) -> anyhow::Result<()> {
    let stem = bench.stem();
    let format: Format = match bench.format.parse() {
        Ok(format) => format,
        Err(why) => {
            let err = anyhow!("bench {}: {why}", bench.name);
            ctx.error(&stem, trial, &err, "");
            return Err(err);
        }
    };
    let step = &bench.step;
    let cwd = step.cwd.as_deref().map(|c| common::expand(user, base, c)).unwrap_or_else(|| base.to_path_buf());
    let shell = ShellCommand {
        run: step.run.clone(),
        env: common::user_env(user, &plan.env, &step.env),
        cwd: cwd.clone(),
        user: Some((user.uid, user.gid)),
        timeout: Duration::from_secs_f64(step.timeout_s),
    };
    let mut stdout = Stdout::default();
    let finished = command::run(&shell, &mut |stream, chunk| {
        ctx.log(stream, chunk);
        if stream == LogStream::Stdout && bench.results.is_none() {
            stdout.feed(chunk);
        }
    });
    let mut failure = None;
    match finished.and_then(|done| {
        common::record_usage(ctx, &stem, trial, &done.usage);
        done.success(&format!("bench {}", bench.name))
    }) {
        Ok(_) => {}
        Err(err) => failure = Some(err),
    }
    let parsed = match &bench.results {
        None => stdout.bytes().and_then(|bytes| sandbench_adapters::parse(format, bytes).map_err(anyhow::Error::from)),
        Some(path) => read_results(user, &common::expand(user, &cwd, path), format),
    };
    let benchmarks = match parsed {
        Ok(benchmarks) => benchmarks,
        Err(err) => {
            let err = match failure {
                Some(failed) => anyhow!("{failed:#}; and its results: {err:#}"),
                None => err.context(format!("bench {}: its results", bench.name)),
            };
            ctx.error(&stem, trial, &err, "");
            return Err(err);
        }
    };
    let dropped = record(ctx, trial, bench, format, &benchmarks);
    if dropped > 0 {
        let text = format!(
            "{}: bench {} reported {dropped} benchmarks past its bound of {}; they were dropped",
            ctx.command_id, bench.name, bench.max_benchmarks
        );
        ctx.note(&text);
        ctx.file(
            &format!("warnings/{}-bench-{}-{trial}.txt", ctx.command_id, bench.name),
            format!("{text}\n").as_bytes(),
        );
    }
    match failure {
        Some(err) => {
            ctx.error(&stem, trial, &err, "");
            Err(err)
        }
        None => Ok(()),
    }
}

/// The command's standard output, up to the bound of a results file; past it, only counted.
#[derive(Default)]
struct Stdout {
    bytes: Vec<u8>,
    seen: usize,
}

impl Stdout {
    fn feed(&mut self, chunk: &[u8]) {
        self.seen = self.seen.saturating_add(chunk.len());
        let room = MAX_INPUT_BYTES.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    fn bytes(&self) -> anyhow::Result<&[u8]> {
        if self.seen > MAX_INPUT_BYTES {
            return Err(anyhow!("its standard output ran past {MAX_INPUT_BYTES} bytes"));
        }
        Ok(&self.bytes)
    }
}

/// The results at `path`, read as the user (links followed only as far as the user may; a FIFO
/// cannot stall the agent) and parsed.
fn read_results(user: &User, path: &Path, format: Format) -> anyhow::Result<Vec<Benchmark>> {
    if format.is_directory() {
        let files = criterion_files(user, path)?;
        return sandbench_adapters::parse_criterion(&files).map_err(anyhow::Error::from);
    }
    let bytes = as_user::head(path, user.uid, user.gid, MAX_INPUT_BYTES + 1)
        .with_context(|| format!("cannot read the results file {}", path.display()))?;
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(anyhow!("{} is larger than {MAX_INPUT_BYTES} bytes", path.display()));
    }
    sandbench_adapters::parse(format, &bytes).map_err(anyhow::Error::from)
}

/// Every `<folder>/new/{benchmark,estimates}.json` under criterion's folder `root`, walked as
/// the user without following links, within bounds of entries, depth and bytes.
fn criterion_files(user: &User, root: &Path) -> anyhow::Result<Vec<CriterionFiles>> {
    let folders = as_user::run(user.uid, user.gid, || benchmark_folders(root))
        .with_context(|| format!("cannot walk criterion's folder {}", root.display()))?;
    let mut files = Vec::new();
    let mut total = 0usize;
    for folder in folders {
        let read = |name: &str| {
            let path = folder.join("new").join(name);
            as_user::head(&path, user.uid, user.gid, MAX_CRITERION_FILE)
                .with_context(|| format!("cannot read {}", path.display()))
        };
        let (benchmark, estimates) = (read("benchmark.json")?, read("estimates.json")?);
        total += benchmark.len() + estimates.len();
        if total > MAX_INPUT_BYTES {
            return Err(anyhow!("criterion's results under {} pass {MAX_INPUT_BYTES} bytes", root.display()));
        }
        let relative = folder.strip_prefix(root).unwrap_or(&folder).display().to_string();
        files.push(CriterionFiles { folder: relative, benchmark, estimates });
    }
    Ok(files)
}

/// The folders under `root` that hold a `new/estimates.json` (criterion's benchmarks; its
/// `report` folder skipped), sorted. Runs on a thread with the user's file identity.
fn benchmark_folders(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            seen += 1;
            if seen > MAX_CRITERION_ENTRIES {
                return Err(std::io::Error::other(format!("more than {MAX_CRITERION_ENTRIES} entries")));
            }
            // The entry's own type: a link is no folder here, and is not followed.
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let name = entry.file_name();
            if name == "new" {
                if entry.path().join("estimates.json").is_file() {
                    found.push(dir.clone());
                }
            } else if name != "report" && depth < MAX_CRITERION_DEPTH {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Sends each benchmark's measures (or its error) and keeps the details; returns how many
/// benchmarks were dropped past the step's bound.
fn record(ctx: &PhaseContext, trial: u32, bench: &BenchStep, format: Format, benchmarks: &[Benchmark]) -> usize {
    let taken = benchmarks.len().min(bench.max_benchmarks as usize);
    let mut details = Vec::with_capacity(taken);
    for b in &benchmarks[..taken] {
        match &b.outcome {
            Ok(measures) => {
                let mut shown = Vec::with_capacity(measures.len());
                for m in measures {
                    let key = bench.key(&b.segment, m.segment.as_deref());
                    ctx.value(&key, trial, m.value, &m.unit);
                    let spread: Vec<Value> = m
                        .spread
                        .iter()
                        .map(|f| json!({ "label": f.label, "value": f.value, "in_unit": f.in_unit }))
                        .collect();
                    shown.push(json!({
                        "key": key, "value": m.value, "statistic": m.statistic.name(), "unit": m.unit,
                        "better": m.better.name(), "spread": spread,
                    }));
                }
                details.push(json!({ "key": bench.key(&b.segment, None), "name": b.name, "measures": shown }));
            }
            Err(why) => {
                let key = bench.key(&b.segment, None);
                ctx.error(&key, trial, &anyhow!("{why}"), "");
                details.push(json!({ "key": key, "name": b.name, "error": why }));
            }
        }
    }
    let file = json!({ "format": format.name(), "trial": trial, "benchmarks": details });
    ctx.file(&format!("bench/{}-{trial}.json", bench.name), file.to_string().as_bytes());
    benchmarks.len() - taken
}

#[cfg(test)]
mod tests {
    use sandbench_proto::plan::{BenchStep, Step};
    use sandbench_proto::v1::{event, observation};
    use tokio::sync::mpsc;

    use super::super::tests::context;
    use super::*;

    fn step(name: &str, max_benchmarks: u32) -> BenchStep {
        BenchStep {
            name: name.into(),
            step: Step { run: "true".into(), cwd: None, timeout_s: 10.0, env: Default::default() },
            format: "go".into(),
            results: None,
            max_benchmarks,
            instructions: false,
        }
    }

    /// An observation as sent: key, value or error, unit.
    type Seen = (String, Result<f64, String>, String);

    /// Every observation sent, and the paths of the files.
    fn observations(rx: &mut mpsc::Receiver<event::Body>) -> (Vec<Seen>, Vec<String>) {
        let (mut seen, mut files) = (Vec::new(), Vec::new());
        while let Ok(body) = rx.try_recv() {
            match body {
                event::Body::Observation(o) => {
                    let outcome = match o.outcome {
                        Some(observation::Outcome::Value(v)) => Ok(v),
                        Some(observation::Outcome::Error(e)) => Err(e),
                        None => Err("none".into()),
                    };
                    seen.push((o.metric, outcome, o.unit));
                }
                event::Body::File(f) => files.push(f.path),
                _ => {}
            }
        }
        (seen, files)
    }

    #[test]
    fn each_benchmark_and_measure_is_an_observation_in_its_unit_and_a_failed_one_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, mut rx) = context(dir.path());
        let text = include_bytes!("../../../../adapters/fixtures/go/go-bench-fail.txt");
        let benchmarks = sandbench_adapters::parse(Format::GoTest, text).unwrap();
        assert_eq!(record(&ctx, 3, &step("go", 1000), Format::GoTest, &benchmarks), 0);
        let (seen, files) = observations(&mut rx);
        let keys: Vec<(&str, &str)> = seen.iter().map(|(k, _, u)| (k.as_str(), u.as_str())).collect();
        assert_eq!(
            keys,
            [
                ("bench.go.sort", "s"),
                ("bench.go.join", "s"),
                ("bench.go.join.b_per_op", "bytes"),
                ("bench.go.join.allocs_per_op", "allocs/op"),
                ("bench.go.sizes_n_10", "s"),
                ("bench.go.sizes_n_10.mb_per_s", "MB/s"),
                ("bench.go.sizes_n_10.items_per_op", "items/op"),
                ("bench.go.sizes_n_1000", "s"),
                ("bench.go.sizes_n_1000.mb_per_s", "MB/s"),
                ("bench.go.sizes_n_1000.items_per_op", "items/op"),
                ("bench.go.fails", ""),
            ]
        );
        assert!((seen[0].1.as_ref().unwrap() - 265.1e-9).abs() < 1e-15);
        assert_eq!(seen[10].1, Err("go test: the benchmark failed (--- FAIL)".to_string()));
        assert_eq!(files, ["bench/go-3.json"]);
    }

    #[test]
    fn benchmarks_past_the_bound_are_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, mut rx) = context(dir.path());
        let text = include_bytes!("../../../../adapters/fixtures/go/go-bench-fail.txt");
        let benchmarks = sandbench_adapters::parse(Format::GoTest, text).unwrap();
        assert_eq!(record(&ctx, 0, &step("go", 2), Format::GoTest, &benchmarks), 3);
        let (seen, _) = observations(&mut rx);
        assert_eq!(seen.iter().filter(|(k, _, _)| k.matches('.').count() == 2).count(), 2);
    }

    #[test]
    fn standard_output_is_kept_up_to_the_bound_and_past_it_refused() {
        let mut out = Stdout::default();
        out.feed(b"abc");
        assert_eq!(out.bytes().unwrap(), b"abc");
        out.feed(&vec![b'x'; MAX_INPUT_BYTES]);
        assert_eq!(out.bytes.len(), MAX_INPUT_BYTES);
        assert!(out.bytes().unwrap_err().to_string().contains("ran past"));
    }

    #[test]
    fn criterion_folders_are_found_without_its_report_and_links() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../adapters/fixtures/criterion");
        let found = benchmark_folders(Path::new(root)).unwrap();
        let names: Vec<String> = found.iter().map(|f| f.strip_prefix(root).unwrap().display().to_string()).collect();
        assert_eq!(names, ["sizes/sort/100", "sizes/sort/1000", "sort 10"]);
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(root, dir.path().join("linked")).unwrap();
        std::fs::create_dir_all(dir.path().join("report/new")).unwrap();
        std::fs::write(dir.path().join("report/new/estimates.json"), "{}").unwrap();
        assert!(benchmark_folders(dir.path()).unwrap().is_empty());
    }
}
