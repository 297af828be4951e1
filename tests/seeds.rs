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

use sandbench::observations::store::{OBSERVATIONS_FILE, StoredBody, read_events};
use sandbench::provision::{DockerProvisioner, labels};
use sandbench::report::{Report, Sample, Side};
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
    assert!(text.contains("\nruntime = 5\n"), "the example's runtime trials are 5");
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
    let mut result = run(options, cancel).await.unwrap();
    let run_id = result.dir.file_name().unwrap().to_string_lossy().to_string();
    let provisioner = DockerProvisioner::connect(1).await.unwrap();
    assert!(provisioner.list(Some((labels::RUN, &run_id))).await.unwrap().is_empty(), "containers left behind");
    restore_samples(&mut result.report, &result.dir);
    result.report
}

/// Puts back in each side, from the run's event log, the samples of the distributions (one per
/// request), which the report replaced by their per-trial facets (`decide.p99`, …): the tests
/// check both.
fn restore_samples(report: &mut Report, run_dir: &Path) {
    let stems: Vec<String> =
        report.comparisons.iter().filter_map(|c| c.key.strip_suffix(".p50")).map(str::to_string).collect();
    assert!(!stems.is_empty(), "the run judged no distribution");
    for side in [&report.base_side, &report.head_side] {
        assert!(stems.iter().all(|k| !side.metrics.contains_key(k)), "a distribution's samples in the report");
    }
    for event in read_events(&run_dir.join(OBSERVATIONS_FILE)).unwrap() {
        let StoredBody::Observation { metric, trial, value, error, sample, .. } = event.body else { continue };
        if !stems.contains(&metric) {
            continue;
        }
        // A sandbox's name holds its side as a segment (`sandbench-<run>-base`, …).
        let segments: Vec<&str> = event.sandbox.split('-').collect();
        let side = match (segments.contains(&"base"), segments.contains(&"head")) {
            (true, false) => &mut report.base_side,
            (false, true) => &mut report.head_side,
            _ => panic!("{} is no side's sandbox", event.sandbox),
        };
        side.metrics.entry(metric).or_default().push(Sample { trial, sample, value, error });
    }
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

/// The runtime keys the report calls regressed or improved, with the call. The install (one
/// trial a side, as the examples' specs ask: a single pair decided by its medians against the
/// floor) is not what these examples measure and is left out.
fn called(report: &Report) -> Vec<(String, Outcome)> {
    let changed = |o: &Outcome| matches!(o, Outcome::Regressed | Outcome::Improved);
    let install = |k: &str| k == "install" || k.starts_with("install.");
    report
        .comparisons
        .iter()
        .filter(|c| changed(&c.comparison.outcome) && !install(&c.key))
        .map(|c| (c.key.clone(), c.comparison.outcome))
        .collect()
}

/// An A/A run calls nothing; when it does, the message shows each called metric's pairs, estimate,
/// interval and spread, so that a failure in CI tells noise from a bias.
fn assert_nothing_called(report: &Report) {
    let called = called(report);
    let shown: Vec<String> = called
        .iter()
        .map(|(key, _)| {
            let c = report.comparisons.iter().find(|c| &c.key == key).unwrap();
            let trial = |side: &Side| per_trial(side, key).into_iter().map(|t| t[0]).collect::<Vec<f64>>();
            format!(
                "{key}: estimate {:?}, interval {:?}, log ratios' sd {:?}; base {:?}, head {:?}",
                c.paired.estimate,
                c.paired.interval,
                c.paired.spread,
                trial(&report.base_side),
                trial(&report.head_side)
            )
        })
        .collect();
    assert_eq!(called, [], "A/A: {shown:#?}");
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
    let repo = example_repo("service", 5, None);
    let report = compare(repo.path(), "base").await;
    for side in [&report.base_side, &report.head_side] {
        check_service_side(side, 5);
    }
    // The distributions are judged by their facets, in place of their stems; nothing is called.
    for key in ["decide.p50", "decide.p95", "decide.p99", "decide.max", "feedback.p50", "feedback.p99", "state_bytes"] {
        outcome(&report, key);
    }
    assert!(report.comparisons.iter().all(|c| c.key != "decide" && c.key != "feedback"));
    assert_nothing_called(&report);
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
    let repo = example_repo("service", 5, Some(&stall));
    let report = compare(repo.path(), "head").await;
    check_service_side(&report.base_side, 5);
    check_service_side(&report.head_side, 5);
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
    // The medians, of the decisions and of the feedback requests, did not move as the tail did.
    // Their sub-millisecond values move by half on this busy host from one run to the next
    // (the feedback's median once by ×1.51 in the whole suite): their verdicts, below, are what
    // says they did not change; the raw ratios only that the stalls are in the tail.
    let feedback = ratio("feedback", 0.5);
    for (what, r) in [("decide p50", p50), ("feedback p50", feedback)] {
        assert!(r > 0.5 && r < 2.0 && r < p99 / 4.0, "{what} head/base {r:.2} against the p99's {p99:.2}; {shown}");
    }
    // Called on the decisions' p99 (and their slowest, the same stalls), regressed, and only in
    // the decisions' tail: the p95 (the 13th slowest of 256, past the 6 stalled) may follow, as
    // the requests right after a stall run on cold caches; the median, the feedback and the
    // state file are not called.
    let called = called(&report);
    assert!(called.contains(&("decide.p99".to_string(), Outcome::Regressed)), "{called:?}");
    assert!(
        called
            .iter()
            .all(|(k, o)| ["decide.p95", "decide.p99", "decide.max"].contains(&k.as_str()) && *o == Outcome::Regressed),
        "{called:?}"
    );
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
    // Ten pairs, as the known change has: some twenty metrics, several of them timings of one
    // CPU that move by a quarter from trial to trial here.
    let repo = example_repo("library", 10, None);
    let report = compare(repo.path(), "base").await;
    for side in [&report.base_side, &report.head_side] {
        check_library_side(side, 10);
    }
    // SQLite's file is whole pages: the same size whatever the round wrote.
    assert_nothing_called(&report);
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
    // Ten pairs: the throughput of one CPU shared by a duet moves by a quarter from trial to
    // trial here, and five pairs once left the halving's interval (-58 % to -14 %) across the
    // 20 % floor.
    let repo = example_repo("library", 10, Some(&double));
    let report = compare(repo.path(), "head").await;
    check_library_side(&report.base_side, 10);
    check_library_side(&report.head_side, 10);
    let of = |side: &Side, key: &str| median(per_trial(side, key).into_iter().map(|t| t[0]).collect());
    let ratio = |key: &str| of(&report.head_side, key) / of(&report.base_side, key);
    let memory = ratio("throughput.memory.throughput_mb_s");
    assert!((0.3..0.75).contains(&memory), "memory throughput head/base {memory:.2}");
    // Throughput is better higher: halved, it is called regressed, and nothing else is called
    // but the throughput scenario's own keys, regressed.
    let called = called(&report);
    let judged = report.comparisons.iter().find(|c| c.key == "throughput.memory.throughput_mb_s").unwrap();
    let shown = format!(
        "{called:?}; memory: {:?} {:?} {:?}, base {:?} head {:?}",
        judged.outcome(),
        judged.paired.estimate,
        judged.paired.interval,
        per_trial(&report.base_side, "throughput.memory.throughput_mb_s"),
        per_trial(&report.head_side, "throughput.memory.throughput_mb_s"),
    );
    assert_eq!(judged.outcome(), Outcome::Regressed, "{shown}");
    assert!(judged.paired.estimate.is_some_and(|e| e < -0.2), "{shown}");
    assert!(
        called
            .iter()
            .all(|(k, o)| (k.starts_with("throughput.") || k.starts_with("script.throughput."))
                && *o == Outcome::Regressed),
        "{shown}"
    );
}
