//! The seeds' other two benchmarks end to end in Docker (issue 33): `examples/service`, a
//! JSON-lines runtime service whose replies are matched by `requestId`, its decisions sent one
//! by one and its feedback in pipelined batches, each request built from the previous reply's
//! state generation and its latency a sample, and its state file's size; `examples/library`, a durable log run as a matrix of
//! backends with sizes and a kept input. Each is copied into a temporary repository (`base`);
//! the known-change revision (`head`) is a commit the test makes there, keeping the examples
//! clean.

mod support;

use std::path::Path;
use std::time::Duration;

use sandbench::provision::{DockerProvisioner, labels};
use sandbench::report::{Report, Side};
use sandbench::run::{RunOptions, run};
use sandbench::stats::Outcome;

/// A copy of `examples/<name>` with `trials` runtime trials, committed and tagged `base`; then
/// `edit` (when given) committed and tagged `head`.
fn example_repo(name: &str, trials: u32, edit: Option<&dyn Fn(&Path)>) -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    support::copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name), repo.path());
    let spec = repo.path().join("bench.toml");
    let text = std::fs::read_to_string(&spec).unwrap();
    let fewer = text.replace("\nruntime = 5\n", &format!("\nruntime = {trials}\n"));
    assert_ne!(fewer, text, "the example's trials changed");
    std::fs::write(&spec, fewer).unwrap();
    for args in ["init -q -b main .", "add -A", "commit -qm base", "tag base"] {
        support::git(repo.path(), args);
    }
    if let Some(edit) = edit {
        edit(repo.path());
        support::git(repo.path(), "commit -qam 'the known change'");
        support::git(repo.path(), "tag head");
    }
    repo
}

/// Runs `head` against `base` and checks no container of the run is left.
async fn compare(repo: &Path, head: &str) -> Report {
    let out = tempfile::tempdir().unwrap();
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let options = RunOptions {
        run_timeout: Duration::from_secs(900),
        ..RunOptions::new(repo.join("bench.toml"), "base", head, out.path())
    };
    let result = run(options, cancel).await.unwrap();
    let run_id = result.dir.file_name().unwrap().to_string_lossy().to_string();
    let provisioner = DockerProvisioner::connect(1).await.unwrap();
    assert!(provisioner.list(Some((labels::RUN, &run_id))).await.unwrap().is_empty(), "containers left behind");
    result.report
}

/// Each trial's samples of `key`, in sample order (errors named).
fn per_trial(side: &Side, key: &str) -> Vec<Vec<f64>> {
    let samples = side.metrics.get(key).unwrap_or_else(|| panic!("no {key}: {:?}", side.metrics.keys()));
    let errors: Vec<&String> = samples.iter().filter_map(|s| s.error.as_ref()).collect();
    assert!(errors.is_empty(), "{key}: {errors:?}");
    let trials = samples.iter().map(|s| s.trial).max().map_or(0, |t| t + 1);
    (0..trials)
        .map(|t| {
            let mut of: Vec<(u32, f64)> =
                samples.iter().filter(|s| s.trial == t).map(|s| (s.sample, s.value.unwrap())).collect();
            of.sort_by_key(|s| s.0);
            assert!(of.iter().enumerate().all(|(i, s)| s.0 as usize == i), "{key} trial {t}: indices {of:?}");
            of.into_iter().map(|s| s.1).collect()
        })
        .collect()
}

/// The percentile `p` (0–1) of `values`, interpolated between closest ranks (R type 7).
fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = (sorted.len() - 1) as f64 * p;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn outcome(report: &Report, key: &str) -> Outcome {
    report.comparisons.iter().find(|c| c.key == key).unwrap_or_else(|| panic!("no {key}")).comparison.outcome
}

/// What both service runs check: every request a sample (256 a trial, numbered 0–255), the
/// state file's sizes the same every trial.
fn check_service_side(side: &Side, trials: usize) {
    for key in ["decide", "feedback"] {
        let samples = per_trial(side, key);
        assert_eq!(samples.len(), trials, "{key}");
        for trial in &samples {
            assert_eq!(trial.len(), 256, "{key}");
            assert!(trial.iter().all(|v| *v > 0.0 && *v < 5.0), "{key}: {trial:?}");
        }
    }
    for key in ["state_bytes", "state_bytes_settled", "snapshot"] {
        assert_eq!(per_trial(side, key).len(), trials, "{key}");
    }
    let sizes: Vec<f64> = per_trial(side, "state_bytes").into_iter().map(|t| t[0]).collect();
    // 256 pending decisions in the ledger: a few KiB, the same bytes every trial.
    assert!(sizes[0] > 2_000.0 && sizes.iter().all(|s| *s == sizes[0]), "{sizes:?}");
    let settled: Vec<f64> = per_trial(side, "state_bytes_settled").into_iter().map(|t| t[0]).collect();
    assert!(settled[0] > 0.0 && settled[0] < sizes[0] && settled.iter().all(|s| *s == settled[0]), "{settled:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_a_a_records_every_request_and_calls_no_change() {
    let repo = example_repo("service", 3, None);
    let report = compare(repo.path(), "base").await;
    for side in [&report.base_side, &report.head_side] {
        check_service_side(side, 3);
    }
    for key in ["decide", "feedback", "state_bytes", "state_bytes_settled"] {
        let got = outcome(&report, key);
        assert!(!matches!(got, Outcome::Regressed | Outcome::Improved), "A/A {key}: {got:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_p99_three_times_slower_shows_in_the_slowest_requests_only() {
    // Every 40th decision (6 of 256 a trial) does 75 times the work (some 30 ms): several times
    // the base's p99, which on a busy host is the tail of its noise (5–15 ms with one CPU while
    // other builds run), not a decision's work (0.4 ms). The p99 (between the 4th and 3rd
    // slowest) is a stalled one, the median is not.
    let stall = |repo: &Path| {
        let file = repo.join("service.js");
        let text = std::fs::read_to_string(&file).unwrap();
        let stalled = text
            .replace("const STALL_EVERY = 0;", "const STALL_EVERY = 40;")
            .replace("const STALL_FACTOR = 3;", "const STALL_FACTOR = 75;");
        assert_eq!(stalled.len(), text.len() + 2, "the service's STALL_EVERY and STALL_FACTOR changed");
        std::fs::write(&file, stalled).unwrap();
    };
    let repo = example_repo("service", 3, Some(&stall));
    let report = compare(repo.path(), "head").await;
    check_service_side(&report.base_side, 3);
    check_service_side(&report.head_side, 3);
    let of = |side: &Side, key: &str, p: f64| median(per_trial(side, key).iter().map(|t| percentile(t, p)).collect());
    let ratio = |key: &str, p: f64| of(&report.head_side, key, p) / of(&report.base_side, key, p);
    let (p99, p50) = (ratio("decide", 0.99), ratio("decide", 0.5));
    let tops = |side: &Side| -> Vec<Vec<String>> {
        let tail = |t: &Vec<f64>| {
            let mut t = t.clone();
            t.sort_by(f64::total_cmp);
            t[t.len() - 8..].iter().chain([&t[t.len() / 2]]).map(|v| format!("{:.2}", v * 1000.0)).collect()
        };
        per_trial(side, "decide").iter().map(tail).collect()
    };
    let shown =
        format!("slowest 8 and median (ms): base {:?} head {:?}", tops(&report.base_side), tops(&report.head_side));
    assert!(p99 > 2.0, "p99 head/base {p99:.2}; {shown}");
    assert!((0.7..1.4).contains(&p50), "p50 head/base {p50:.2}");
    // The feedback requests and the state file did not change.
    let feedback = ratio("feedback", 0.5);
    assert!(feedback < 1.4, "{feedback}");
    for key in ["state_bytes", "state_bytes_settled"] {
        let got = outcome(&report, key);
        assert!(!matches!(got, Outcome::Regressed | Outcome::Improved), "{key}: {got:?}");
    }
}

const BACKENDS: [&str; 3] = ["memory", "jsonl", "sqlite"];

/// What both library runs check: every matrix child's keys, a trial each; commit latencies as
/// samples; stored sizes (nothing in memory, a base's bytes on disk); the kept input
/// read by every trial (a swept one would fail the later trials).
fn check_library_side(side: &Side, trials: usize) {
    for backend in BACKENDS {
        for k in ["ops_per_s", "replay_ms", "stored"] {
            let key = format!("rate.{backend}.{k}");
            let got = per_trial(side, &key);
            assert_eq!(got.len(), trials, "{key}");
            assert!(got.iter().all(|t| t.len() == 1), "{key}: {got:?}");
        }
        let commits = per_trial(side, &format!("rate.{backend}.commit_ms"));
        assert!(commits.iter().all(|t| !t.is_empty() && t.len() <= 2000), "{backend}: {:?}", commits.len());
        let stored: Vec<f64> = per_trial(side, &format!("rate.{backend}.stored")).into_iter().map(|t| t[0]).collect();
        match backend {
            "memory" => assert!(stored.iter().all(|s| *s == 0.0), "{stored:?}"),
            _ => assert!(stored.iter().all(|s| *s > 0.0), "{backend}: {stored:?}"),
        }
        let throughput = per_trial(side, &format!("throughput.{backend}.throughput_mb_s"));
        assert_eq!(throughput.len(), trials, "{backend}");
        // The companions of each child are its own (peak RSS of one process tree per child).
        let rss = per_trial(side, &format!("script.throughput.{backend}.maxrss"));
        assert!(rss.iter().all(|t| t[0] > 1e6), "{backend}: {rss:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_a_a_records_every_backend_of_the_matrix_with_sizes_and_a_kept_input() {
    let repo = example_repo("library", 2, None);
    let report = compare(repo.path(), "base").await;
    for side in [&report.base_side, &report.head_side] {
        check_library_side(side, 2);
    }
    // SQLite's file is whole pages: the same size whatever the round wrote.
    let got = outcome(&report, "rate.sqlite.stored");
    assert!(!matches!(got, Outcome::Regressed | Outcome::Improved), "A/A rate.sqlite.stored: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_throughput_halved_shows_in_the_throughput_only() {
    // Each chunk is encoded twice: half the megabytes a second, the same stored bytes.
    let double = |repo: &Path| {
        let file = repo.join("bench.js");
        let text = std::fs::read_to_string(&file).unwrap();
        let doubled = text.replace("const ENCODE_COPIES = 1;", "const ENCODE_COPIES = 2;");
        assert_ne!(doubled, text, "the bench's ENCODE_COPIES changed");
        std::fs::write(&file, doubled).unwrap();
    };
    let repo = example_repo("library", 2, Some(&double));
    let report = compare(repo.path(), "head").await;
    check_library_side(&report.base_side, 2);
    check_library_side(&report.head_side, 2);
    let of = |side: &Side, key: &str| median(per_trial(side, key).into_iter().map(|t| t[0]).collect());
    let ratio = |key: &str| of(&report.head_side, key) / of(&report.base_side, key);
    let memory = ratio("throughput.memory.throughput_mb_s");
    assert!((0.3..0.75).contains(&memory), "memory throughput head/base {memory:.2}");
    let got = outcome(&report, "rate.sqlite.stored");
    assert!(!matches!(got, Outcome::Regressed | Outcome::Improved), "rate.sqlite.stored: {got:?}");
}
