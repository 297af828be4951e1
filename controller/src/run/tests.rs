//! Whole runs on the fake provisioner: every part of the controller is real (spec, station, hub,
//! gRPC over Unix sockets, schedule, gates, teardown, statistics, reports) but the sandboxes,
//! which are in-process agents answering from a script. No Docker; deterministic.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{RunOptions, RunResult, run_on};
use crate::provision::Provisioner;
use crate::provision::fake::{Answer, FakeProvisioner, Script};
use crate::report::{Report, Status};
use crate::stats::Outcome;

/// The fake product's spec for these tests.
fn spec_toml() -> String {
    spec_with("install = 2\nmeasure = 4\nruntime = 3\nfailure_limit = 2")
}

/// The fake product's spec with these `[trials]` lines.
fn spec_with(trials: &str) -> String {
    crate::provision::fake::spec_text(
        trials,
        r#"[install]
command = "sh install.sh"

[measure]
startup = ["product"]
footprint = true

[[runtime.command]]
metric = "git_status"
run = "git status --porcelain"
repeat = 5
aggregate = "mean"
"#,
    )
}

/// A spec file in a temporary folder, its plan, and the options of a run of it.
fn setup(pairs: u32) -> (tempfile::TempDir, crate::spec::Plan, RunOptions) {
    setup_spec(pairs, &spec_toml())
}

pub(super) fn setup_spec(pairs: u32, text: &str) -> (tempfile::TempDir, crate::spec::Plan, RunOptions) {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bench.toml");
    std::fs::write(&spec, text).unwrap();
    let plan = crate::spec::load(&spec).unwrap_or_else(|e| panic!("{e}"));
    let opts = RunOptions {
        pairs,
        run_timeout: Duration::from_secs(120),
        engine_wait: Duration::from_secs(10),
        ..RunOptions::new(spec, "v1", "v2", dir.path().join("runs"))
    };
    (dir, plan, opts)
}

async fn run_fake(opts: RunOptions, fake: Arc<FakeProvisioner>, cancel: watch::Receiver<bool>) -> RunResult {
    let connect = async move { Ok(fake as Arc<dyn Provisioner>) };
    run_on(opts, cancel, connect, "20260101-000000-fake".into()).await.unwrap()
}

pub(super) fn not_canceled() -> watch::Receiver<bool> {
    watch::channel(false).1
}

fn outcome(report: &Report, key: &str) -> Outcome {
    report.comparisons.iter().find(|c| c.key == key).unwrap_or_else(|| panic!("no {key}")).comparison.outcome
}

/// Trials with a value, per side, of a metric.
pub(super) fn trials(report: &Report, head: bool, key: &str) -> Vec<u32> {
    let side = if head { &report.head_side } else { &report.base_side };
    side.metrics.get(key).into_iter().flatten().filter(|s| s.value.is_some()).map(|s| s.trial).collect()
}

/// Replaces what depends on the clock (times, lifetimes, the cost of those lifetimes, sampled
/// memory) with fixed values: each phase of each sandbox lasted 10 s.
fn normalize(report: &mut Report, plan: &crate::spec::Plan) {
    report.started_at = "2026-01-01T00:00:00Z".into();
    report.finished_at = Some("2026-01-01T00:05:00Z".into());
    for sandbox in &mut report.sandboxes {
        let cost = sandbox.cost.as_ref().expect("every sandbox's cost is recorded");
        let phases = cost
            .phases
            .iter()
            .map(|p| crate::cost::PhaseUsage {
                phase: p.usage.phase.clone(),
                seconds: 10.0,
                cpu_seconds: 1.0,
                memory_gib_seconds: 0.625,
            })
            .collect();
        let cost = crate::cost::sandbox_cost(&plan.cost, plan.allocation(), phases, false, 0.0);
        sandbox.created_at = "2026-01-01T00:00:01Z".into();
        sandbox.removed_at = Some("2026-01-01T00:04:59Z".into());
        sandbox.seconds = cost.charged_seconds;
        sandbox.estimated_usd = cost.allocation_usd;
        sandbox.peak_memory_bytes = 64 << 20;
        sandbox.cost = Some(cost);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_run_on_the_fake_provisioner_gives_the_same_reports_every_time() {
    let (_dir, plan, opts) = setup(1);
    let script = Script::for_plan(&plan).on("head", "measure", None, Answer::Scale(30.0)).on(
        "head",
        "runtime",
        None,
        Answer::Value("git_status".into(), 0.001),
    );
    let fake = Arc::new(FakeProvisioner::new(script));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    assert_eq!(outcome(report, "cold"), Outcome::Regressed);
    assert_eq!(outcome(report, "git_status"), Outcome::Improved);
    assert_eq!(outcome(report, "install"), Outcome::NoClearChange);
    assert_eq!(trials(report, true, "cold"), [0, 1, 2, 3]);
    assert_eq!(trials(report, false, "disk"), [0]);
    assert!(report.sandboxes.iter().all(|s| s.deleted), "{:?}", report.sandboxes);
    assert!(fake.list(None).await.unwrap().is_empty(), "every fake sandbox is removed");
    assert!(!result.dir.join(crate::station::SOCKETS_DIR).exists(), "the socket folders are removed");

    // The files the run wrote, with the clock taken out.
    let written: Report = serde_json::from_slice(&std::fs::read(result.dir.join("report.json")).unwrap()).unwrap();
    let mut normalized = written;
    normalize(&mut normalized, &plan);
    super::write_reports(&result.dir, &mut normalized).unwrap();
    let json = std::fs::read_to_string(result.dir.join("report.json")).unwrap();
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    insta::assert_snapshot!("fake_run_report_json", json);
    insta::assert_snapshot!("fake_run_report_md", markdown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_resolved_once_before_anything_is_made_and_walks_the_plan_it_was_resolved_to() {
    let (dir, plan, opts) = setup(1);
    let runs = opts.out.clone();
    // A value the rules refuse stops the run as it is resolved: no run directory.
    let refused = super::resolve(RunOptions { pairs: 9, ..opts.clone() }).await.err().unwrap();
    assert_eq!(refused.to_string(), "--pairs must be from 1 to 8, got 9");
    let refused = super::resolve(RunOptions { ledger: Some(dir.path().to_path_buf()), ..opts.clone() }).await;
    assert!(refused.is_err(), "a folder is no ledger");
    assert!(!runs.exists(), "nothing made before the run is resolved");

    let asked = RunOptions { trials: Some(3), budget_usd: Some(5.0), ..opts };
    let resolved = super::resolve(asked).await.unwrap();
    let final_plan = resolved.plan();
    assert_ne!(final_plan.trials.order, crate::spec::Order::Auto, "no auto left");
    assert_eq!((final_plan.trials.measure, final_plan.trials.runtime), (3, 3));
    assert_eq!(final_plan.cost.budget_usd, Some(5.0));
    assert_eq!(resolved.revisions().0.rev, "v1");
    let timed: usize = resolved.stages.iter().flat_map(|s| &s.lanes).map(Vec::len).sum();
    assert!(timed > 0, "the schedule is built as the run is resolved");
    let expected = serde_json::to_value(final_plan).unwrap();
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let connect = async move { Ok(fake as Arc<dyn Provisioner>) };
    let result = super::start(resolved, not_canceled(), connect, "20260101-000000-once".into()).await.unwrap();
    assert_eq!(result.status, Status::Completed, "errors: {:?}", result.report.errors);
    // The plan walked is the plan resolved: what the run directory keeps, value for value.
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(result.dir.join("plan.json")).unwrap()).unwrap();
    assert_eq!(written, expected);
    assert_eq!(trials(&result.report, true, "cold"), [0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pairs_failures_never_block_another_pair_and_every_pair_installs() {
    // The demo's shape with --pairs 3: two install trials asked for three pairs.
    let (_dir, plan, mut opts) = setup(3);
    opts.trials = Some(6);
    let script = Script::for_plan(&plan).on("head2", "measure", None, Answer::Fail("no prompt".into()));
    let result = run_fake(opts, Arc::new(FakeProvisioner::new(script)), not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Partial, "errors: {:?}", report.errors);
    assert!(report.warnings.iter().any(|w| w.contains("install trials raised from 2 to 3")), "{:?}", report.warnings);
    assert_eq!(report.expected["install"], 3);
    // Measure trials t go to pair t % 3: pair 2's head ran trials 2 and 5 only to fail them;
    // every other sandbox measured all of its own.
    assert_eq!(trials(report, false, "cold"), [0, 1, 2, 3, 4, 5]);
    assert_eq!(trials(report, true, "cold"), [0, 1, 3, 4]);
    assert_eq!(trials(report, true, "git_status"), [0, 1, 2, 3, 4, 5], "runtime is not blocked by measure");
    assert!(report.errors.iter().all(|e| e.starts_with("head2 measure")), "{:?}", report.errors);
    let roles: Vec<&str> = report.sandboxes.iter().map(|s| s.role.as_str()).collect();
    assert_eq!(roles, ["base0", "head0", "base1", "head1", "base2", "head2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_dies_mid_run_gives_a_partial_report_naming_it() {
    let (_dir, plan, opts) = setup(1);
    let script = Script::for_plan(&plan).on("head", "measure", Some(1), Answer::Die);
    let fake = Arc::new(FakeProvisioner::new(script));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Partial, "errors: {:?}", report.errors);
    let head = "sandbench-20260101-000000-fake-head";
    assert!(
        report.errors.iter().any(|e| e.contains(head) && e.contains("stopped during measure trial 1")),
        "{:?}",
        report.errors
    );
    assert!(report.errors.iter().any(|e| e == "head: its sandbox stopped; no further trials for it"));
    assert_eq!(trials(report, false, "cold"), [0, 1, 2, 3]);
    assert_eq!(trials(report, true, "cold"), [0]);
    assert_eq!(trials(report, true, "git_status"), Vec::<u32>::new());
    assert!(matches!(outcome(report, "cold"), Outcome::Incomplete | Outcome::Unavailable));
    assert!(fake.list(None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_run_stops_at_once_tears_down_and_writes_its_report() {
    let (dir, plan, opts) = setup(1);
    // The first install trial (base's) would take a minute: the cancel must interrupt it.
    let script = Script::for_plan(&plan).on("base", "install", Some(0), Answer::Delay(Duration::from_secs(60)));
    let fake = Arc::new(FakeProvisioner::new(script));
    let (cancel_tx, cancel) = watch::channel(false);
    let runs = dir.path().join("runs");
    tokio::spawn(async move {
        while !observed(&runs, "\"phase\":\"install\"") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = cancel_tx.send(true);
    });
    let begun = std::time::Instant::now();
    let result = run_fake(opts, fake.clone(), cancel).await;
    assert!(begun.elapsed() < Duration::from_secs(30), "took {:?}", begun.elapsed());
    assert_eq!(result.status, Status::Canceled);
    assert_eq!(result.report.errors, ["The run was canceled"]);
    assert!(trials(&result.report, false, "install").is_empty() && trials(&result.report, true, "install").is_empty());
    assert_eq!(result.report.sandboxes.len(), 2, "both sandboxes' lifetimes are recorded");
    assert!(result.report.sandboxes.iter().all(|s| s.deleted));
    assert!(fake.list(None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_out_of_budget_stops_and_fails() {
    let (_dir, plan, mut opts) = setup(1);
    // Two sandboxes spend this in about two seconds; install would take a minute.
    opts.budget_usd = Some(plan.hourly_usd() * 2.0 * 2.0 / 3600.0);
    let script = Script::for_plan(&plan).on("base", "install", None, Answer::Delay(Duration::from_secs(60)));
    let fake = Arc::new(FakeProvisioner::new(script));
    let begun = std::time::Instant::now();
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    assert!(begun.elapsed() < Duration::from_secs(30), "took {:?}", begun.elapsed());
    assert_eq!(result.status, Status::Failed);
    assert_eq!(result.report.errors, ["Reached the estimated run budget"]);
    assert_eq!(result.report.sandboxes.len(), 2);
    assert!(result.report.sandboxes.iter().all(|s| s.deleted && s.estimated_usd > 0.0));
    assert!(fake.list(None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_restart_the_sandboxes_survive_is_waited_out_and_the_run_completes() {
    let (_dir, plan, opts) = setup(1);
    let outage = Answer::EngineOutage { down: Duration::from_secs(3), survive: true };
    let script = Script::for_plan(&plan).on("head", "measure", Some(1), outage);
    let fake = Arc::new(FakeProvisioner::new(script));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    assert_eq!(trials(report, true, "cold"), [0, 1, 2, 3]);
    assert!(report.warnings.iter().all(|w| !w.contains("retried")), "{:?}", report.warnings);
    assert_eq!(report.sandboxes.len(), 2);
    assert!(fake.list(None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_lost_with_the_engine_is_replaced_once_and_its_slot_retried() {
    let (_dir, plan, opts) = setup(1);
    let outage = Answer::EngineOutage { down: Duration::from_secs(3), survive: false };
    let script = Script::for_plan(&plan).on("head", "measure", Some(1), outage);
    let fake = Arc::new(FakeProvisioner::new(script));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    // Every trial is there once: trial 1 from the new sandbox, which was installed first.
    assert_eq!(trials(report, true, "cold"), [0, 1, 2, 3]);
    assert_eq!(trials(report, true, "git_status"), [0, 1, 2]);
    assert_eq!(trials(report, true, "install"), [0, 1]);
    let retried = report.warnings.iter().find(|w| w.contains("retried")).expect("the retried slot is named");
    assert!(
        retried.starts_with("head measure trial 1: retried in a new sandbox (sandbench-20260101-000000-fake-head-r1)")
            && retried.contains("lost with the Docker engine's restart")
            && retried.ends_with("it succeeded"),
        "{retried}"
    );
    let roles: Vec<&str> = report.sandboxes.iter().map(|s| s.role.as_str()).collect();
    assert_eq!(roles, ["base", "head", "head-r1"]);
    assert!(report.sandboxes.iter().all(|s| s.deleted && s.cost.is_some()));
    assert!(fake.list(None).await.unwrap().is_empty());
    assert_eq!(result.ending[0], "run 20260101-000000-fake completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_the_engine_names_lost_with_a_restart_is_replaced_though_no_outage_was_seen() {
    let (_dir, plan, opts) = setup(1);
    let restarted: jiff::Timestamp = "2026-03-01T10:06:00Z".parse().unwrap();
    let lost = Answer::DieOf(crate::provision::LostCause::EngineRestarted(restarted));
    let script = Script::for_plan(&plan).on("head", "measure", Some(1), lost);
    let fake = Arc::new(FakeProvisioner::new(script));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    assert_eq!(trials(report, true, "cold"), [0, 1, 2, 3]);
    let retried = report.warnings.iter().find(|w| w.contains("retried")).expect("the retried slot is named");
    assert!(retried.contains("the Docker engine restarted (at 2026-03-01T10:06:00Z)"), "{retried}");
    let roles: Vec<&str> = report.sandboxes.iter().map(|s| s.role.as_str()).collect();
    assert_eq!(roles, ["base", "head", "head-r1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_killed_by_a_signal_is_not_replaced() {
    let (_dir, plan, opts) = setup(1);
    let script =
        Script::for_plan(&plan).on("head", "measure", Some(1), Answer::DieOf(crate::provision::LostCause::Signal(9)));
    let fake = Arc::new(FakeProvisioner::new(script));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Partial, "errors: {:?}", report.errors);
    assert!(
        report.errors.iter().any(|e| e.ends_with("stopped during measure trial 1: killed by signal 9 (SIGKILL)")),
        "{:?}",
        report.errors
    );
    assert!(report.warnings.iter().all(|w| !w.contains("retried")), "{:?}", report.warnings);
    assert_eq!(report.sandboxes.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_loss_on_the_same_side_is_not_retried_again() {
    let (_dir, plan, opts) = setup(1);
    let outage = Answer::EngineOutage { down: Duration::from_secs(2), survive: false };
    let script = Script::for_plan(&plan).on("head", "measure", Some(1), outage.clone()).on(
        "head-r1",
        "runtime",
        Some(0),
        outage,
    );
    let fake = Arc::new(FakeProvisioner::new(script));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Partial, "errors: {:?}", report.errors);
    assert_eq!(report.warnings.iter().filter(|w| w.contains("retried")).count(), 1, "{:?}", report.warnings);
    assert!(report.errors.iter().any(|e| e == "head: its sandbox stopped; no further trials for it"));
    assert_eq!(trials(report, true, "cold"), [0, 1, 2, 3]);
    assert!(trials(report, true, "git_status").is_empty());
    assert!(fake.list(None).await.unwrap().is_empty());
    assert!(result.ending[0].starts_with("run 20260101-000000-fake partial: "), "{:?}", result.ending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_gone_past_the_bound_fails_the_run_naming_docker() {
    let (_dir, plan, mut opts) = setup(1);
    opts.engine_wait = Duration::from_secs(1);
    let outage = Answer::EngineOutage { down: Duration::from_secs(600), survive: false };
    let script = Script::for_plan(&plan).on("head", "measure", Some(0), outage);
    let fake = Arc::new(FakeProvisioner::new(script));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Failed, "errors: {:?}", report.errors);
    let why = "Docker engine unreachable at fake://engine for 1 s (--engine-wait): the run cannot go on";
    assert_eq!(report.errors.last().map(String::as_str), Some(why), "{:?}", report.errors);
    assert!(report.errors.iter().all(|e| !e.contains("stopped")), "{:?}", report.errors);
    assert_eq!(result.ending[0], format!("run 20260101-000000-fake failed: {why}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_ends_with_the_reason_and_the_verdicts() {
    // Completed: the counts and the metrics that changed, by title.
    let (_dir, plan, opts) = setup(1);
    let script = Script::for_plan(&plan).on("head", "measure", None, Answer::Scale(30.0)).on(
        "head",
        "runtime",
        None,
        Answer::Value("git_status".into(), 0.001),
    );
    let result = run_fake(opts, Arc::new(FakeProvisioner::new(script)), not_canceled()).await;
    let ending = &result.ending;
    assert_eq!(ending[0], "run 20260101-000000-fake completed");
    assert!(ending[1].starts_with("verdicts: ") && ending[1].contains(" regressed · 1 improved · "), "{ending:?}");
    // Each changed row as the comment shows it: outcome, title and lens, medians, change.
    let regressed = ending.iter().find(|l| l.starts_with("  regressed ")).expect("regressed rows listed");
    assert!(regressed.contains("Cold startup (wall)") && regressed.contains(" → "), "{ending:?}");
    let improved = ending.iter().find(|l| l.starts_with("  improved ")).expect("the improved row");
    assert!(improved.contains("Bash git status (wall)") && improved.contains("↓ -"), "{ending:?}");
    assert!(ending.iter().any(|l| l.starts_with("  1 metric unchanged within its floor")), "{ending:?}");
    assert_eq!(ending.last().unwrap(), &format!("reports in {}", result.dir.display()));

    // Failed by the budget: the reason, said once (it was not printed during the run).
    let (_dir, plan, mut opts) = setup(1);
    opts.budget_usd = Some(plan.hourly_usd() * 2.0 * 2.0 / 3600.0);
    let script = Script::for_plan(&plan).on("base", "install", None, Answer::Delay(Duration::from_secs(60)));
    let result = run_fake(opts, Arc::new(FakeProvisioner::new(script)), not_canceled()).await;
    assert_eq!(result.ending[0], "run 20260101-000000-fake failed: Reached the estimated run budget");

    // Partial: the metrics that are missing.
    let (_dir, plan, opts) = setup(1);
    let script = Script::for_plan(&plan).on("head", "measure", Some(1), Answer::Die);
    let result = run_fake(opts, Arc::new(FakeProvisioner::new(script)), not_canceled()).await;
    let first = &result.ending[0];
    assert!(
        first.starts_with("run 20260101-000000-fake partial: ") && first.contains("metrics incomplete ("),
        "{first}"
    );
    assert!(first.contains("Cold startup") && first.ends_with("; the errors above say why"), "{first}");
}

/// Whether the run's event log (the only run in `runs`) holds `needle`.
fn observed(runs: &Path, needle: &str) -> bool {
    let Some(Ok(entry)) = std::fs::read_dir(runs).into_iter().flatten().next() else { return false };
    std::fs::read_to_string(entry.path().join("observations.jsonl")).is_ok_and(|log| log.contains(needle))
}

/// Head's start swings by ±25 % in the first three measure trials (inconclusive at 3 pairs),
/// then equals base's.
pub(super) fn swinging_start(mut script: Script) -> Script {
    for (trial, factor) in [(0, 1.3), (1, 0.75), (2, 1.25)] {
        script = script.on("head", "measure", Some(trial), Answer::Scale(factor));
    }
    script
}

/// The report of a completed adaptive run that added no pairs, for `why`.
fn stopped_at_first_look<'a>(result: &'a RunResult, why: &str) -> &'a Report {
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    let sequential = report.sequential.as_ref().expect("an adaptive run's report has its looks");
    assert_eq!(sequential.look, 1);
    assert!(sequential.ended.contains(why), "{}", sequential.ended);
    assert_eq!(trials(report, true, "cold"), [0, 1, 2]);
    report
}

/// Three planned pairs, up to nine: looks at 3, 6 and 9 pairs.
fn adaptive_setup() -> (tempfile::TempDir, crate::spec::Plan, RunOptions) {
    setup_spec(1, &spec_with("install = 1\nmeasure = 3\nruntime = 3\nmax_pairs = 9\nfailure_limit = 2"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inconclusive_gating_metric_grows_its_phase_pair_by_pair_up_to_max_pairs() {
    let (_dir, plan, opts) = adaptive_setup();
    assert_eq!(crate::report::Sequential::for_plan(&plan).unwrap().design.looks(), [3, 6, 9]);
    // Runtime is identical on both sides (decided at once).
    let script = swinging_start(Script::for_plan(&plan));
    let fake = Arc::new(FakeProvisioner::new(script));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    let sequential = report.sequential.as_ref().expect("an adaptive run's report has its looks");
    // Grown to 6, still undecided there (the swings dominate 6 pairs at look 2's alpha), then 9.
    assert_eq!(sequential.look, 3, "{sequential:?}");
    assert_eq!(trials(report, true, "cold"), (0..9).collect::<Vec<u32>>());
    assert_eq!(trials(report, false, "warm"), (0..9).collect::<Vec<u32>>());
    assert_eq!(report.expected["cold"], 9);
    // Runtime was decided at the first look: not grown.
    assert_eq!(trials(report, true, "git_status"), [0, 1, 2]);
    assert_eq!(report.expected["git_status"], 3);
    assert!(!sequential.ended.is_empty());
    // The report is read at the last look's alpha, and says so.
    assert!((report.alpha() - sequential.design.alpha_at(3)).abs() < 1e-12);
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    assert!(markdown.contains("this report is look 3"), "{markdown}");
    assert!(fake.list(None).await.unwrap().is_empty(), "every fake sandbox is removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_decided_at_its_first_look_adds_no_pairs() {
    let (_dir, plan, opts) = adaptive_setup();
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let result = run_fake(opts, fake, not_canceled()).await;
    let report = stopped_at_first_look(&result, "decided at look 1");
    assert_eq!(outcome(report, "cold"), Outcome::NoClearChange);
    // A sharded run never adapts: each shard sees only its share of the pairs.
    let skeleton = super::output::skeleton(&plan, "x", report.base.clone(), report.head.clone());
    assert!(super::walk::Adaptive::new(&skeleton, &plan, true).is_none());
    assert!(super::walk::Adaptive::new(&skeleton, &plan, false).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a_a_run_grows_to_its_last_look_though_decided_at_the_first() {
    let (_dir, plan, mut opts) = adaptive_setup();
    opts.head = opts.base.clone();
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let result = run_fake(opts, fake, not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    // Its noise profile needs the pairs: every look is taken.
    assert_eq!(trials(report, true, "cold"), (0..9).collect::<Vec<_>>());
    assert_eq!(report.sequential.as_ref().unwrap().look, 3);
    assert_eq!(outcome(report, "cold"), Outcome::NoClearChange);
}

/// The fake product without `[measure]`: three runtime trials, `more` `[trials]` lines.
fn runtime_only(more: &str) -> String {
    crate::provision::fake::spec_text(
        &format!("install = 1\nruntime = 3\nfailure_limit = 2\n{more}"),
        "[install]\ncommand = \"sh install.sh\"\n\n[[runtime.command]]\nmetric = \"git_status\"\nrun = \"git status\"\n",
    )
}

/// Head's command swings by ±25 % in the first three runtime trials (inconclusive at 3 pairs).
fn swinging_runtime(mut script: Script) -> Script {
    for (trial, factor) in [(0, 1.3), (1, 0.75), (2, 1.25)] {
        script = script.on("head", "runtime", Some(trial), Answer::Scale(factor));
    }
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_without_measure_runs_no_measure_phase_and_grows_its_runtime() {
    let (dir, plan, opts) = setup_spec(1, &runtime_only("max_pairs = 9"));
    assert_eq!(plan.trials.measure, 0);
    let fake = Arc::new(FakeProvisioner::new(swinging_runtime(Script::for_plan(&plan))));
    let result = run_fake(opts, fake, not_canceled()).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    // No measure trial ran, and none was charged.
    assert!(!observed(&dir.path().join("runs"), "\"measure-"), "a measure command was sent");
    for sandbox in &report.sandboxes {
        let phases: Vec<&str> = sandbox.cost.iter().flat_map(|c| &c.phases).map(|p| p.usage.phase.as_str()).collect();
        assert!(!phases.contains(&"measure") && phases.contains(&"runtime"), "{}: {phases:?}", sandbox.id);
    }
    // The looks are planned from runtime's three trials: it grew.
    let sequential = report.sequential.as_ref().expect("an adaptive run: max_pairs is above runtime's trials");
    assert_eq!(sequential.design.looks().first(), Some(&3));
    assert!(sequential.look > 1, "{sequential:?}");
    assert!(trials(report, true, "git_status").len() > 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_could_not_grow_says_why_on_the_terminal() {
    let (_dir, plan, opts) = setup_spec(1, &runtime_only(""));
    let fake = Arc::new(FakeProvisioner::new(swinging_runtime(Script::for_plan(&plan))));
    let result = run_fake(opts, fake, not_canceled()).await;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", result.report.errors);
    assert!(result.report.sequential.is_none());
    assert_eq!(outcome(&result.report, "git_status"), Outcome::Inconclusive);
    let said = "adaptive pairs: none added though Bash git status ended inconclusive at 3 pairs: [trials] max_pairs (3) \
                is not above the 3 trials of the phases that hold the gating metrics";
    assert!(result.ending[1].starts_with(said), "{:?}", result.ending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairs_the_run_timeout_has_no_room_for_are_not_started() {
    // Up to 40 pairs: the next look is at 22. Each head measure trial takes 1 s, so 19 more
    // rounds need about 19 s, and the run has 20 s in all.
    let (_dir, plan, mut opts) =
        setup_spec(1, &spec_with("install = 1\nmeasure = 3\nruntime = 3\nmax_pairs = 40\nfailure_limit = 2"));
    opts.run_timeout = Duration::from_secs(20);
    let script =
        swinging_start(Script::for_plan(&plan).on("head", "measure", None, Answer::Delay(Duration::from_secs(1))));
    let fake = Arc::new(FakeProvisioner::new(script));
    let result = run_fake(opts, fake, not_canceled()).await;
    let report = stopped_at_first_look(&result, "run timeout");
    assert_eq!(outcome(report, "cold"), Outcome::Inconclusive);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_needs_valgrind_provisions_every_sandbox_from_the_derived_image() {
    let images = |fake: &FakeProvisioner| fake.created_images().into_iter().collect::<std::collections::BTreeSet<_>>();
    for valgrind in [false, true] {
        let (_dir, plan, mut opts) = setup(2);
        opts.force_valgrind = valgrind;
        let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
        let result = run_fake(opts, fake.clone(), not_canceled()).await;
        assert_eq!(result.status, Status::Completed, "valgrind {valgrind}");
        assert_eq!(fake.created_images().len(), 4, "both sides of both pairs");
        let image = if valgrind { FakeProvisioner::VALGRIND_TAG.to_string() } else { plan.sandbox.image.clone() };
        assert_eq!(images(&fake), [image].into());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a_a_runs_noise_profile_is_kept_in_the_ledger_and_used_by_the_next_run_unless_told_not_to() {
    let (dir, plan, opts) = setup(1);
    let ledger = Some(dir.path().join("ledger.sqlite"));
    let run = |opts: RunOptions, id: &str| {
        let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
        let connect = async move { Ok(fake as Arc<dyn Provisioner>) };
        let id = id.to_string();
        async move { run_on(opts, not_canceled(), connect, id).await.unwrap() }
    };
    let a_a = RunOptions { head: "v1".into(), ledger: ledger.clone(), noise_from_ledger: true, ..opts.clone() };
    let first = run(a_a, "20260101-000000-aa").await;
    assert_eq!(first.status, Status::Completed, "{:?}", first.report.errors);
    assert!(first.report.noise.is_none() && first.dir.join("noise.json").exists());
    // The next run of the spec, on this image and machine, finds it and says where from.
    let next =
        run(RunOptions { ledger: ledger.clone(), noise_from_ledger: true, ..opts.clone() }, "20260101-000001-b").await;
    let noise = next.report.noise.as_ref().expect("the ledger's profile");
    assert_eq!(noise.run_id, "20260101-000000-aa");
    assert!(noise.found.as_deref().is_some_and(|f| f.starts_with("the ledger's latest A/A run")), "{noise:?}");
    assert!(next.dir.join(super::NOISE_USED).exists(), "kept for a resume");
    let markdown = std::fs::read_to_string(next.dir.join("report.md")).unwrap();
    assert!(
        markdown.contains("A/A noise profile of run `20260101-000000-aa` (the ledger's latest A/A run of this spec"),
        "{markdown}"
    );
    // `--noise none`: the spec's floors.
    let none = run(RunOptions { ledger, noise_from_ledger: false, ..opts }, "20260101-000002-c").await;
    assert!(none.report.noise.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_a_a_run_in_the_ledger_is_pooled_and_an_a_a_run_is_judged_by_those_before_it() {
    let (dir, plan, opts) = setup(1);
    let ledger = Some(dir.path().join("ledger.sqlite"));
    let run = |opts: RunOptions, id: &str| {
        let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
        let connect = async move { Ok(fake as Arc<dyn Provisioner>) };
        let id = id.to_string();
        async move { run_on(opts, not_canceled(), connect, id).await.unwrap() }
    };
    let opts = RunOptions { ledger, noise_from_ledger: true, ..opts };
    let a_a = RunOptions { head: "v1".into(), ..opts.clone() };
    let first = run(a_a.clone(), "20260101-000000-aa").await;
    assert!(first.report.noise.is_none(), "nothing before it");
    let second = run(a_a, "20260101-000001-ab").await;
    assert_eq!(second.status, Status::Completed, "{:?}", second.report.errors);
    let before = second.report.noise.as_ref().expect("the first A/A run's profile");
    assert_eq!((before.run_id.as_str(), before.pooled.len()), ("20260101-000000-aa", 1));
    // Its own noise.json is from its pairs alone.
    let own = super::NoiseProfile::load(&second.dir.join("noise.json")).unwrap();
    assert!(own.pooled.is_empty() && own.run_id == "20260101-000001-ab", "{own:?}");
    let next = run(opts, "20260101-000002-b").await;
    let noise = next.report.noise.as_ref().expect("the ledger's profiles");
    assert_eq!(noise.pooled, ["20260101-000000-aa", "20260101-000001-ab"]);
    assert_eq!(noise.run_id, "20260101-000001-ab");
    assert!(noise.found.as_deref().is_some_and(|f| f.ends_with("pooled with the one before it")), "{noise:?}");
    assert_eq!(noise.min_floor, Some(plan.min_floor));
    let kept = super::NoiseProfile::load(&next.dir.join(super::NOISE_USED)).unwrap();
    assert_eq!(&kept, noise, "a resume reads the same pool");
    let markdown = std::fs::read_to_string(next.dir.join("report.md")).unwrap();
    assert!(markdown.contains("pooled with the one before it; `--noise none` opts out): 2 A/A runs"), "{markdown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_past_the_specs_bound_are_dropped_with_a_warning() {
    let spec = format!("{}\n[report]\nmax_metrics = 3\n", spec_toml());
    let (_dir, plan, opts) = setup_spec(1, &spec);
    assert!(plan.metrics.len() > 3, "the plan records more metrics than the bound");
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let result = run_fake(opts, fake, not_canceled()).await;
    let report = &result.report;
    assert_eq!((report.base_side.metrics.len(), report.head_side.metrics.len()), (3, 3));
    let warning = report.warnings.iter().find(|w| w.contains("report.max_metrics (3)"));
    let warning = warning.unwrap_or_else(|| panic!("no warning: {:?}", report.warnings));
    assert!(warning.contains("more on the base side") && warning.contains("more on the head side"), "{warning}");
}

/// The segments of `phase` in the fake's timeline (`"<role> <segment>"` per trial), and its pins.
fn segments(fake: &FakeProvisioner, phase: &str) -> Vec<(u32, String)> {
    fake.timeline()
        .iter()
        .filter_map(|entry| {
            let parts: Vec<&str> = entry.split(' ').collect();
            match parts.as_slice() {
                [role, p, trial, segment] if *p == phase => Some((trial.parse().unwrap(), format!("{role} {segment}"))),
                _ => None,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interleaved_run_alternates_single_runs_between_the_sides_abba() {
    let text = spec_with("install = 1\nmeasure = 2\nruntime = 2\norder = \"interleaved\"");
    let (_dir, plan, opts) = setup_spec(1, &text);
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", result.report.errors);
    for phase in ["measure", "runtime"] {
        let got = segments(&fake, phase);
        let of = |t: u32| got.iter().filter(|(trial, _)| *trial == t).map(|(_, s)| s.as_str()).collect::<Vec<_>>();
        // Trial 0 starts with base (ABBA), trial 1 with head; within each, runs go A B B A A B.
        assert_eq!(of(0), ["base 1", "head 1", "head 2", "base 2", "base 3", "head 3"], "{phase}");
        assert_eq!(of(1), ["head 1", "base 1", "base 2", "head 2", "head 3", "base 3"], "{phase}");
        // Trials follow each other: no run of trial 1 before trial 0 ended.
        let first_of_1 = got.iter().position(|(t, _)| *t == 1).unwrap();
        assert!(got[..first_of_1].iter().all(|(t, _)| *t == 0), "{got:?}");
    }
    // Install is one run a trial and keeps its plain trials; every sample still counted once.
    assert!(segments(&fake, "install").is_empty());
    assert_eq!(trials(&result.report, true, "cold"), [0, 1]);
    assert_eq!(trials(&result.report, false, "git_status"), [0, 1]);
    assert!(fake.timeline().iter().all(|e| !e.contains("pinned")), "only a duet pins");
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    assert!(markdown.contains("Runs are interleaved one by one"), "the method says the order");
    assert_eq!(result.report.order, crate::spec::Order::Interleaved);
}

/// The untimed rest of an interleaved trial (the lens runs, the footprint) waits until neither
/// side has a timed run left, then both sides' rests go at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interleaved_trials_lens_runs_on_both_sides_at_once_after_every_timed_run() {
    let text = spec_with("install = 1\nmeasure = 2\nruntime = 2\norder = \"interleaved\"")
        .replace("footprint = true", "footprint = true\ninstructions = true")
        .replace("aggregate = \"mean\"", "aggregate = \"mean\"\ninstructions = true");
    let (_dir, plan, opts) = setup_spec(1, &text);
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", result.report.errors);
    // No profile: the lens runs in both trials of each side.
    assert_eq!(trials(&result.report, true, "git_status.instructions"), [0, 1]);
    assert_eq!(trials(&result.report, false, "cold.cycles"), [0, 1]);
    let timeline = fake.timeline();
    for phase in ["measure", "runtime"] {
        let timed = segments(&fake, phase);
        let of = |t: u32| timed.iter().filter(|(trial, _)| *trial == t).map(|(_, s)| s.as_str()).collect::<Vec<_>>();
        assert_eq!(of(0), ["base 1", "head 1", "head 2", "base 2", "base 3", "head 3"], "{phase}");
        for trial in 0..2 {
            let at = |role: &str, what: &str| {
                let entry = format!("{role} {phase} {trial} {what}");
                timeline.iter().position(|e| *e == entry).unwrap_or_else(|| panic!("no {entry}: {timeline:?}"))
            };
            let last_timed = at("base", "3").max(at("head", "3"));
            let begins = [at("base", "rest begins"), at("head", "rest begins")];
            let ends = [at("base", "rest ends"), at("head", "rest ends")];
            assert!(begins.iter().all(|b| *b > last_timed), "{phase} {trial}: {timeline:?}");
            assert!(begins.iter().max() < ends.iter().min(), "{phase} {trial}: the rests at once: {timeline:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duet_runs_both_sides_at_once_on_cpus_of_their_own_swapped_every_other_trial() {
    let text = spec_with("install = 1\nmeasure = 2\nruntime = 1\norder = \"duet\"").replace("cpus = 2", "cpus = 1");
    let (_dir, plan, opts) = setup_spec(1, &text);
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", result.report.errors);
    let got = segments(&fake, "measure");
    assert_eq!(got.len(), 12, "{got:?}");
    // Segment k of both sides before segment k + 1 of either: they take each run together.
    for (at, pair) in got.chunks(2).enumerate() {
        let mut names: Vec<&str> = pair.iter().map(|(_, s)| s.as_str()).collect();
        names.sort();
        let k = at % 3 + 1;
        assert_eq!(names, [format!("base {k}"), format!("head {k}")], "{got:?}");
    }
    let pins: Vec<String> = fake.timeline().into_iter().filter(|e| e.contains("pinned")).collect();
    // Measure trial 0, trial 1, then runtime trial 0: the sides swap CPUs every other trial.
    assert_eq!(
        pins,
        ["base pinned 0", "head pinned 1", "head pinned 0", "base pinned 1", "base pinned 0", "head pinned 1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cpu_sets_are_resolved_with_the_run_and_the_walk_pins_the_sets_it_was_given() {
    let text = spec_with("install = 1\nmeasure = 2\nruntime = 1\norder = \"duet\"").replace("cpus = 2", "cpus = 1");
    let (_dir, plan, opts) = setup_spec(1, &text);
    let mut resolved = super::resolve(opts).await.unwrap();
    assert_eq!(resolved.cpus.duet, Some(plan.duet_cpus_here().unwrap()), "a duet's sets, as resolved");
    assert_eq!(resolved.cpus.pairs, [None], "one pair is not split");
    // The walk reads the sets it was given, not the machine again: given others, it pins those.
    resolved.cpus.duet = Some(["1".to_string(), "0".to_string()]);
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let provisioner = fake.clone();
    let connect = async move { Ok(provisioner as Arc<dyn Provisioner>) };
    let result = super::start(resolved, not_canceled(), connect, "20260101-000000-sets".into()).await.unwrap();
    assert_eq!(result.status, Status::Completed, "errors: {:?}", result.report.errors);
    let pins: Vec<String> = fake.timeline().into_iter().filter(|e| e.contains("pinned")).collect();
    assert_eq!(
        pins,
        ["base pinned 1", "head pinned 0", "head pinned 1", "base pinned 0", "base pinned 1", "head pinned 0"]
    );

    // Several pairs split the machine's CPUs; one pair keeps the spec's cpuset.
    let (_dir, _, opts) = setup(2);
    let resolved = super::resolve(opts).await.unwrap();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap();
    assert_eq!(resolved.cpus.pairs, super::schedule::split(2, cpus));
    assert_eq!(resolved.cpus.duet, None);
    let (_dir, _, opts) = setup_spec(1, &spec_with("order = \"abba\"").replace("cpus = 2", "cpus = 1\ncpuset = \"0\""));
    let resolved = super::resolve(opts).await.unwrap();
    assert_eq!(resolved.cpus.pairs, [Some("0".to_string())]);
    assert_eq!(resolved.cpus.of_pair(0), Some("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duets_two_sides_get_the_same_io_weight_and_the_report_says_when_the_host_ignores_it() {
    let text = spec_with("install = 1\nmeasure = 1\nruntime = 1\norder = \"duet\"").replace("cpus = 2", "cpus = 1");
    let (_dir, plan, opts) = setup_spec(1, &text);
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", result.report.errors);
    let weight = Some(super::walk::DUET_IO_WEIGHT);
    assert_eq!(fake.io_weights(), [("base".to_string(), weight), ("head".to_string(), weight)]);
    let said = result.report.warnings.iter().find(|w| w.contains("disk I/O is not weighed equally"));
    assert!(said.is_some_and(|w| w.contains("the fake engine weighs no I/O")), "{:?}", result.report.warnings);
    // Other orders ask for no weight.
    let (_dir, plan, opts) = setup_spec(1, &spec_with("install = 1\nmeasure = 1\nruntime = 1\norder = \"abba\""));
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let result = run_fake(opts, fake.clone(), not_canceled()).await;
    assert!(fake.io_weights().iter().all(|(_, w)| w.is_none()));
    assert!(!result.report.warnings.iter().any(|w| w.contains("disk I/O")));
}

#[test]
fn the_default_order_is_a_duet_where_it_fits_and_interleaved_runs_otherwise() {
    use crate::spec::Order;
    let (_dir, plan, _) = setup_spec(1, &spec_with("order = \"auto\""));
    assert_eq!(plan.trials.order, Order::Auto);
    assert_eq!(Order::Auto.resolve(1, true), Order::Duet);
    assert_eq!(Order::Auto.resolve(2, true), Order::Interleaved, "a duet runs one pair");
    assert_eq!(Order::Auto.resolve(1, false), Order::Interleaved);
    assert_eq!(Order::Abba.resolve(1, true), Order::Abba, "a named order stays");
    // A spec without an order takes the default.
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bench.toml");
    std::fs::write(&spec, "name = \"x\"\n[sandbox]\nimage = \"fake:1\"\n[install]\ncommand = \"true\"\n").unwrap();
    assert_eq!(crate::spec::load(&spec).unwrap_or_else(|e| panic!("{e}")).trials.order, Order::Auto);
}

#[test]
fn a_duet_is_refused_where_the_machine_has_too_few_cpus_and_a_bad_order_is_named() {
    let (_dir, plan, _) = setup_spec(1, &spec_with("order = \"duet\""));
    let err = plan.duet_cpus(3).unwrap_err().to_string();
    assert!(err.contains("trials.order = \"duet\"") && err.contains("this machine has 3, fewer than 4"), "{err}");
    assert_eq!(plan.duet_cpus(4).unwrap(), ["0-1".to_string(), "2-3".to_string()]);
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bench.toml");
    std::fs::write(&spec, spec_with("order = \"shuffled\"")).unwrap();
    let err = crate::spec::load(&spec).unwrap_err().to_string();
    assert!(err.contains("trials.order") && err.contains("\"shuffled\"") && err.contains("\"interleaved\""), "{err}");
}

/// A spec folder that is a git repository with commits tagged v1, v2 and v3, its spec's source.
fn setup_repository() -> (tempfile::TempDir, crate::spec::Plan, RunOptions) {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bench.toml");
    std::fs::write(&spec, format!("{}\n[source]\nrepository = \".\"\n", spec_toml())).unwrap();
    let git = |args: &str| crate::provision::fake::git(dir.path(), args);
    git("init -q");
    git("add bench.toml");
    for (n, tag) in ["v1", "v2", "v3"].iter().enumerate() {
        git(&format!("commit -q --allow-empty -m 'commit {n}'"));
        git(&format!("tag {tag}"));
    }
    let plan = crate::spec::load(&spec).unwrap_or_else(|e| panic!("{e}"));
    let opts = RunOptions {
        run_timeout: Duration::from_secs(120),
        engine_wait: Duration::from_secs(10),
        ..RunOptions::new(spec, "v1", "v2", dir.path().join("runs"))
    };
    (dir, plan, opts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compare_run_keeps_base_and_head_in_the_history_and_the_next_one_stands_against_it() {
    let (dir, plan, opts) = setup_repository();
    let ledger = Some(dir.path().join("ledger.sqlite"));
    let run = |opts: RunOptions, script: Script, id: &str| {
        let fake = Arc::new(FakeProvisioner::new(script));
        let connect = async move { Ok(fake as Arc<dyn Provisioner>) };
        let id = id.to_string();
        async move { run_on(opts, not_canceled(), connect, id).await.unwrap() }
    };
    // v1 against v2, nothing changed: no history before it, so no standing.
    let first =
        run(RunOptions { ledger: ledger.clone(), ..opts.clone() }, Script::for_plan(&plan), "20260101-000000-a").await;
    assert_eq!(first.status, Status::Completed, "{:?}", first.report.errors);
    assert!(first.report.trend.is_empty());
    let kept = {
        let ledger = crate::cost::ledger::Ledger::open(ledger.as_ref().unwrap()).unwrap();
        crate::history::store::Records::on(&ledger).unwrap().of_spec("fake-product").unwrap()
    };
    assert_eq!(kept.iter().map(|r| r.origin.as_str()).collect::<Vec<_>>(), ["base", "head"]);
    let head = &kept[1];
    assert_eq!((head.commit.subject.as_str(), head.commit.commit.len()), ("commit 1", 40));
    let cold: Vec<f64> = head.values.iter().filter(|v| v.metric == "cold").map(|v| v.value).collect();
    let reported = crate::report::runs::trial_values(&first.report.head_side.metrics["cold"]);
    assert_eq!(cold, reported.iter().map(|(_, v)| *v).collect::<Vec<_>>(), "the report's trial values");
    assert_eq!(cold.len(), 4, "every measure trial");
    assert!(head.values.iter().all(|v| v.lens != "instructions"));
    // v2 against v3 where the head's start is 30 times slower: the comment says where the head
    // stands against main's values (v1 and v2, on this machine and setting).
    let slower = Script::for_plan(&plan).on("head", "measure", None, crate::provision::fake::Answer::Scale(30.0));
    let second = run(
        RunOptions { base: "v2".into(), head: "v3".into(), ledger: ledger.clone(), ..opts.clone() },
        slower,
        "20260101-000001-b",
    )
    .await;
    assert_eq!(outcome(&second.report, "cold"), Outcome::Regressed);
    let cold = second.report.trend.iter().find(|s| s.key == "cold").expect("cold stands against main's history");
    assert_eq!(cold.commits, 2, "v1 and v2 were recorded");
    assert!(cold.outside(), "{cold:?}");
    let markdown = std::fs::read_to_string(second.dir.join("report.md")).unwrap();
    assert!(
        markdown.contains("**Against main's history:**") && markdown.contains("is above main's band"),
        "{markdown}"
    );
    // `sandbench history` along v3's line: the step at v3, between v2 and v3.
    let options = crate::history::command::HistoryOptions {
        spec: opts.spec.clone(),
        out: Some(dir.path().join("history")),
        rev: Some("v3".into()),
        bisect: false,
        budget_usd: None,
        ledger: ledger.clone().unwrap(),
        agent: None,
        dead_man: Duration::from_secs(30),
    };
    let written = crate::history::command::history(options.clone(), not_canceled()).await.unwrap();
    let history = &written.history;
    assert_eq!(
        history.commits.iter().map(|c| c.subject.as_str()).collect::<Vec<_>>(),
        ["commit 0", "commit 1", "commit 2"]
    );
    let cold = history.metrics.iter().find(|m| m.key == "cold").unwrap();
    assert_eq!(cold.change_points.len(), 1, "{:?}", cold.change_points);
    assert_eq!((cold.change_points[0].before_at, cold.change_points[0].after_at), (1, 2));
    for file in ["history.json", "history.md", "history.html"] {
        assert!(written.dir.join(file).exists(), "{file}");
    }
    // With --bisect: v2 and v3 are next to each other, nothing lies between to bisect, and the
    // engine is never asked for.
    let engine = crate::provision::Engine::default();
    let options = crate::history::command::HistoryOptions { bisect: true, out: Some(dir.path().join("h2")), ..options };
    let written = crate::history::command::history_in(&engine, options, not_canceled()).await.unwrap();
    let cold = written.history.metrics.iter().find(|m| m.key == "cold").unwrap();
    assert!(cold.change_points[0].bisection.is_none(), "{:?}", cold.change_points);
    assert!(!engine.asked(), "no sandbox needed, no engine asked for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_requires_a_disk_bound_is_refused_before_any_sandbox_where_the_engine_has_none() {
    // The fake engine bounds no disk, as a GitHub runner's does not.
    let (_dir, plan, mut opts) = setup(1);
    opts.require_disk_bound = Some("the head comes from the fork mallory/r".into());
    let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
    let result = run_fake(opts.clone(), fake.clone(), not_canceled()).await;
    assert_eq!(result.status, Status::Failed);
    let error = result.report.errors.join("\n");
    assert!(
        error.contains("the engine cannot bound a sandbox's disk")
            && error.contains("the head comes from the fork mallory/r")
            && error.contains("--allow-unbounded-disk"),
        "{error}"
    );
    assert!(fake.created_images().is_empty(), "a sandbox was made: {:?}", fake.created_images());
    // Without the requirement (a branch of the repository, or --allow-unbounded-disk): it runs,
    // and the report says disk_gb is not enforced.
    opts.require_disk_bound = None;
    let result = run_fake(opts, Arc::new(FakeProvisioner::new(Script::for_plan(&plan))), not_canceled()).await;
    assert_eq!(result.status, Status::Completed, "{:?}", result.report.errors);
    assert!(result.report.warnings.iter().any(|w| w.contains("disk_gb") && w.contains("not enforced")));
}

/// A whole run on the fake: `git_status` declared better higher (a rate, say) and halved on head
/// is a regression everywhere the run says so; doubled, an improvement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metric_better_higher_that_halves_is_a_regression_from_the_terminal_to_the_comment() {
    let text = format!("{}\n[metrics.git_status]\nbetter = \"higher\"\n", spec_toml());
    for (factor, word, expected) in [(0.5, "regressed", Outcome::Regressed), (2.0, "improved", Outcome::Improved)] {
        let (_dir, plan, opts) = setup_spec(1, &text);
        assert_eq!(plan.metrics.iter().find(|d| d.key == "git_status").unwrap().better, crate::stats::Better::Higher);
        let script = Script::for_plan(&plan).on("head", "runtime", None, Answer::Scale(factor));
        let result = run_fake(opts, Arc::new(FakeProvisioner::new(script)), not_canceled()).await;
        assert_eq!(outcome(&result.report, "git_status"), expected, "{factor}");
        let row = result.ending.iter().find(|l| l.contains("Bash git status (wall)")).expect("the changed row");
        let arrow = if factor < 1.0 { "↓ -" } else { "↑ +" };
        assert!(row.trim_start().starts_with(word) && row.contains(arrow), "{:?}", result.ending);
        let json = std::fs::read_to_string(result.dir.join("report.json")).unwrap();
        assert!(json.contains("\"better\": \"higher\""), "{json}");
        let md = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
        assert!(
            md.contains(&format!(
                "**Overall: {}",
                if factor < 1.0 { "1 regressed" } else { "0 regressed · 1 improved" }
            )),
            "{md}"
        );
    }
}

/// A whole run on the fake with a bench step (issue 34): the benchmarks its run names are
/// defined from the unit observed — ops/s better higher, seconds lower — with the spec's family
/// over them; a rate that halves is a regression and a time that halves an improvement, only
/// there; a benchmark the head no longer reports is named as missing, never dropped silently.
/// An install that does nothing and a tinybench bench step in runtime.
const BENCH_STEP: &str = r#"[install]
command = "true"

[[runtime.bench]]
name = "tinybench"
run = "node bench/tinybench.mjs"
format = "tinybench"
results = "results/tinybench.json"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bench_steps_benchmarks_are_defined_by_their_unit_judged_each_way_and_a_vanished_one_named() {
    let blocks = r#"
[metrics."bench.tinybench.*"]
relative = 0.05
group = "Suite {1}"

[metrics."bench.tinybench.steady"]
ignore = true

[metrics."bench.tinybench.render"]
gate = true

[metrics."bench.tinybench.gone"]
gate = false
"#;
    let text =
        crate::provision::fake::spec_text("install = 1\nruntime = 3\nmax_pairs = 6", &format!("{BENCH_STEP}{blocks}"));
    let (_dir, plan, opts) = setup_spec(1, &text);
    let script = Script::for_plan(&plan)
        .observe("runtime", "bench.tinybench.parse", "ops/s", 1000.0)
        .observe("runtime", "bench.tinybench.render", "s", 2e-3)
        .observe("runtime", "bench.tinybench.steady", "s", 5e-6)
        .observe("runtime", "bench.tinybench.gone", "s", 1e-3)
        .on("head", "runtime", None, Answer::Value("bench.tinybench.parse".into(), 500.0))
        .on("head", "runtime", None, Answer::Value("bench.tinybench.render".into(), 1e-3))
        .on("head", "runtime", None, Answer::Omit("bench.tinybench.gone".into()));
    let result = run_fake(opts, Arc::new(FakeProvisioner::new(script)), not_canceled()).await;
    let report = &result.report;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let def = |key: &str| report.metrics.iter().find(|d| d.key == key).unwrap_or_else(|| panic!("no {key}"));
    let parse = def("bench.tinybench.parse");
    assert_eq!(
        (parse.unit.as_str(), parse.better, parse.relative, parse.group.as_str()),
        ("ops/s", crate::stats::Better::Higher, 0.05, "Suite parse")
    );
    // Its own block (the fewest `*`) over the defaults: the family does not reach it.
    let render = def("bench.tinybench.render");
    assert_eq!(
        (render.unit.as_str(), render.scale, render.better, render.relative),
        ("ms", 1000.0, crate::stats::Better::Lower, crate::report::benches::RELATIVE)
    );
    // The default gate takes the benchmarks in, but the one whose block says `gate = false`.
    let gate = report.sequential.as_ref().map(|s| s.gate.clone());
    assert_eq!(gate, Some(vec!["bench.tinybench.parse".to_string(), "bench.tinybench.render".to_string()]));
    assert_eq!(outcome(report, "bench.tinybench.parse"), Outcome::Regressed);
    assert_eq!(outcome(report, "bench.tinybench.render"), Outcome::Improved);
    // Ignored: recorded, kept, never judged, and the report says so.
    assert!(report.metrics.iter().all(|d| d.key != "bench.tinybench.steady"));
    assert_eq!(trials(report, true, "bench.tinybench.steady"), [0, 1, 2]);
    let ignored = "not judged, as their [metrics] blocks say (ignore = true); their samples are kept in report.json: bench.tinybench.steady";
    assert!(report.warnings.iter().any(|w| w == ignored), "{:?}", report.warnings);
    let changed: Vec<&str> = report
        .comparisons
        .iter()
        .filter(|c| matches!(c.outcome(), Outcome::Regressed | Outcome::Improved))
        .map(|c| c.key.as_str())
        .collect();
    // In the report's order: `gone`'s own block leaves it in the step's group, which comes first.
    assert_eq!(changed, ["bench.tinybench.render", "bench.tinybench.parse"]);
    let missing =
        "bench tinybench: benchmark bench.tinybench.gone is missing on the head side (the base side reported it)";
    assert!(report.warnings.iter().any(|w| w.contains(missing)), "{:?}", report.warnings);
    assert_eq!(trials(report, false, "bench.tinybench.gone"), [0, 1, 2]);
    let md = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    assert!(md.contains("bench.tinybench.gone is missing on the head side"), "{md}");
}

/// A spec whose only timed step is a bench step: its benchmarks, which only the run names, are
/// the default gate, so an inconclusive one grows runtime to the next looks (3, 6, 9 pairs); a
/// spec that names its gate keeps them out unless a block says `gate = true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inconclusive_benchmark_of_a_bench_step_grows_the_pairs_by_default() {
    let text = crate::provision::fake::spec_text("install = 1\nruntime = 3\nmax_pairs = 9", BENCH_STEP);
    let (_dir, plan, opts) = setup_spec(1, &text);
    assert!(plan.trials.gate.is_empty() && !plan.trials.gate_given);
    assert!(plan.gates_named("bench.tinybench.parse") && !plan.gates_named("bench.tinybench.parse.cpu"));
    let described = crate::spec::describe(&plan);
    assert!(
        described
            .contains("adaptive: up to 9 pairs while any of the benchmarks of bench step tinybench is inconclusive"),
        "{described}"
    );
    let script = swinging_runtime(Script::for_plan(&plan).observe("runtime", "bench.tinybench.parse", "ops/s", 1000.0));
    let result = run_fake(opts, Arc::new(FakeProvisioner::new(script)), not_canceled()).await;
    let report = &result.report;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let sequential = report.sequential.as_ref().expect("an adaptive run");
    assert_eq!(sequential.gate, ["bench.tinybench.parse"]);
    assert!(sequential.look > 1, "{sequential:?}");
    assert!(trials(report, true, "bench.tinybench.parse").len() > 3, "grown past the 3 planned pairs");

    // Named in `trials.gate`, the gate is the spec's: a benchmark joins it only by its block.
    let mut named = plan.clone();
    named.trials.gate_given = true;
    assert!(!named.gates_named("bench.tinybench.parse"));
}
