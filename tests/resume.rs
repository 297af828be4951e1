//! `sandbench run --resume` end to end in Docker with the demo product: a real controller
//! process SIGKILLed in the middle of measure, its ledger entry reconciled as abandoned, its
//! sandboxes removed, then the run resumed to completion with every trial counted exactly once.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandbench::cost::ledger::Ledger;
use sandbench::observations::store::{StoredBody, read_events};
use sandbench::provision::{DockerProvisioner, labels};
use sandbench::report::{Report, Status};

/// A `sandbench` process with its output in files of `out`; killed (SIGKILL) and waited for
/// when dropped, and the sandboxes of `run_id` removed, whether the test passed or not.
struct Controller {
    child: Child,
    output: PathBuf,
    run_id: Option<String>,
}

impl Controller {
    fn start(out: &Path, name: &str, args: &[&str]) -> Controller {
        let output = out.join(format!("{name}.out"));
        let file = std::fs::File::create(&output).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_sandbench"))
            .env(sandbench::agent_binary::AGENT_ENV, support::agent())
            .env("NO_COLOR", "1")
            .arg("--ledger")
            .arg(out.join("ledger.sqlite"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start sandbench");
        Controller { child, output, run_id: None }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// Waits for the process to end, at most `limit`: its exit code.
    fn wait(&mut self, limit: Duration) -> i32 {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "sandbench did not end within {limit:?}:\n{}", self.output());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(run_id) = self.run_id.clone() {
            // A runtime of its own: drop may run inside the test's runtime.
            let _ = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(remove_run_sandboxes(&run_id));
            })
            .join();
        }
    }
}

/// Removes the sandboxes of this run only (other tests run beside this one); their names.
async fn remove_run_sandboxes(run_id: &str) -> Vec<String> {
    let provisioner = DockerProvisioner::connect(1).await.unwrap();
    let left = provisioner.list(Some((labels::RUN, run_id))).await.unwrap();
    for c in &left {
        provisioner.remove(&c.id).await.unwrap();
    }
    left.into_iter().map(|c| c.name).collect()
}

/// The run directory in `out` (the only folder there).
fn run_dir_in(out: &Path) -> Option<PathBuf> {
    std::fs::read_dir(out).ok()?.flatten().find(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path())
}

fn read_report(dir: &Path) -> Report {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

/// (sandbox, phase, trial) of a phase started; (sandbox, command) of a phase done.
type Started = (String, String, u32);
type Done = (String, String);

/// Every phase started and done in the log.
fn phases(dir: &Path) -> (Vec<Started>, Vec<Done>) {
    let mut started = Vec::new();
    let mut done = Vec::new();
    // A killed controller may have left a torn last line: what precedes it is read.
    let events = sandbench::observations::store::events(&dir.join("observations.jsonl")).unwrap();
    for event in events.map_while(Result::ok) {
        match event.body {
            StoredBody::PhaseStarted { phase, trial, .. } => started.push((event.sandbox, phase, trial)),
            StoredBody::PhaseDone { command_id, .. } => done.push((event.sandbox, command_id)),
            _ => {}
        }
    }
    (started, done)
}

/// Starts a run and SIGKILLs it once measure is under way: base's first measure trial done,
/// head's started (so cut mid-way). Its run directory and id, and the killed controller, whose
/// drop removes the run's sandboxes (keep it while they must still exist).
fn kill_mid_measure(out: &Path, out_arg: &str, run_args: &[&str]) -> (PathBuf, String, Controller) {
    let mut first = Controller::start(out, "first", run_args);
    let deadline = Instant::now() + Duration::from_secs(900);
    let dir = loop {
        assert!(Instant::now() < deadline, "the run never reached measure:\n{}", first.output());
        assert!(first.child.try_wait().unwrap().is_none(), "the run ended early:\n{}", first.output());
        if let Some(dir) = run_dir_in(Path::new(out_arg)) {
            first.run_id.get_or_insert_with(|| dir.file_name().unwrap().to_string_lossy().to_string());
            if dir.join("observations.jsonl").exists() {
                let (started, _) = phases(&dir);
                if started.iter().filter(|(_, phase, _)| phase == "measure").count() >= 2 {
                    break dir;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let run_id = first.run_id.clone().unwrap();
    let sandbox = |role: &str| format!("sandbench-{run_id}-{role}");
    let (started, done_before) = phases(&dir);
    assert!(
        done_before.contains(&(sandbox("base"), "measure-0".into())),
        "base's first measure trial completed: {done_before:?} (started: {started:?})"
    );
    assert!(!done_before.contains(&(sandbox("head"), "measure-0".into())), "head's was cut: {done_before:?}");
    assert_eq!(read_report(&dir).status, Status::Running, "a killed run's report still says running");
    (dir, run_id, first)
}

/// The next start (or gc) finds the controller gone: abandoned, charged from the sandboxes'
/// lifetimes as the engine tells them (they still exist), and report.json says so. Then its
/// sandboxes are reaped (only this run's: other tests run beside this one).
async fn assert_abandoned_then_reaped(dir: &Path, run_id: &str, ledger_path: &Path) {
    let provisioner = DockerProvisioner::connect(1).await.unwrap();
    let lines = sandbench::run::reconcile::reconcile(&provisioner, ledger_path).await;
    assert!(lines.iter().any(|l| l.contains(run_id) && l.contains("abandoned")), "{lines:?}");
    let (row, _) = Ledger::open(ledger_path).unwrap().run(run_id).unwrap().unwrap();
    assert_eq!(row.status, "abandoned");
    assert_eq!(row.sandboxes, 2);
    assert!(row.seconds > 10.0 && row.allocation_usd > 0.0, "{row:?}");
    let abandoned = read_report(dir);
    assert_eq!(abandoned.status, Status::Abandoned);
    assert!(abandoned.errors.iter().any(|e| e.contains("sandbench run --resume")), "{:?}", abandoned.errors);
    let markdown = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(markdown.contains("abandoned"), "{markdown}");
    // Reconciling again changes nothing.
    assert!(sandbench::run::reconcile::reconcile(&provisioner, ledger_path).await.is_empty());
    let reaped = remove_run_sandboxes(run_id).await;
    assert_eq!(reaped.len(), 2, "{reaped:?}");
}

/// One report, complete, with every trial of every metric exactly once per side.
fn assert_every_trial_once(report: &Report) {
    assert_eq!(report.status, Status::Completed, "errors: {:?}", report.errors);
    assert!(report.complete());
    for (name, side) in [("base", &report.base_side), ("head", &report.head_side)] {
        for (metric, samples) in &side.metrics {
            // A command repeated within a trial keeps each run as its own sample.
            let slots: Vec<(u32, u32)> = samples.iter().map(|s| (s.trial, s.sample)).collect();
            let distinct_slots: BTreeSet<(u32, u32)> = slots.iter().copied().collect();
            assert_eq!(slots.len(), distinct_slots.len(), "{name} {metric} counted a sample twice: {slots:?}");
            let mut runs: BTreeMap<u32, usize> = BTreeMap::new();
            for &(trial, _) in &slots {
                *runs.entry(trial).or_default() += 1;
            }
            let counts: BTreeSet<usize> = runs.values().copied().collect();
            assert!(counts.len() <= 1, "{name} {metric}: trials of different sizes: {slots:?}");
            let distinct: BTreeSet<u32> = runs.keys().copied().collect();
            if let Some(&expected) = report.expected.get(metric) {
                assert_eq!(distinct, (0..expected).collect(), "{name} {metric}");
            }
        }
    }
}

/// Only the missing slots ran again: base's first measure trial was kept, head's (cut) ran in
/// the new head sandbox, whose untimed install is not counted; the cut trial's partial
/// observations are not in the report.
fn assert_only_missing_slots_ran(dir: &Path, run_id: &str, report: &Report) {
    let sandbox = |role: &str| format!("sandbench-{run_id}-{role}");
    let (started, done) = phases(dir);
    let roster = sandbench::run::Roster::read(dir, run_id).unwrap();
    let ran = |role: &str, phase: &str, trial: u32| started.contains(&(sandbox(role), phase.to_string(), trial));
    assert!(!ran("base-r2", "measure", 0), "a completed trial ran again");
    assert!(ran("head-r2", "measure", 0) && ran("base-r2", "measure", 1) && ran("head-r2", "measure", 1));
    assert!(ran("head-r2", "prepare", 0) && ran("base-r2", "prepare", 0), "prepare runs in the new sandboxes");
    // The trial completed before the kill completed once: it was not run again.
    let mut completions: BTreeMap<(String, String), u32> = BTreeMap::new();
    for (sandbox_id, command) in &done {
        let side = roster.side(sandbox_id).unwrap();
        *completions.entry((side.as_str().to_string(), command.clone())).or_default() += 1;
    }
    assert_eq!(completions[&("base".to_string(), "measure-0".to_string())], 1);
    // Head's trial-0 samples are those of head-r2.
    let resumed: BTreeMap<String, Option<f64>> = read_events(&dir.join("observations.jsonl"))
        .unwrap()
        .into_iter()
        .filter(|e| e.sandbox == sandbox("head-r2"))
        .filter_map(|e| match e.body {
            StoredBody::Observation { command_id, metric, value, .. } if command_id == "measure-0" => {
                Some((metric, value))
            }
            _ => None,
        })
        .collect();
    assert!(!resumed.is_empty());
    for (metric, value) in &resumed {
        let sample = report.head_side.metrics[metric].iter().find(|s| s.trial == 0).unwrap();
        assert_eq!(sample.value, *value, "{metric}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_measure_is_resumed_with_every_trial_once() {
    // ABBA: the controller is killed between base's first measure trial and head's, a moment
    // the default duet (both at once) does not have. The fake tests resume the stepwise orders.
    let repo = support::demo_repo(|repo| {
        let spec = repo.join("bench.toml");
        let text = std::fs::read_to_string(&spec).unwrap();
        std::fs::write(&spec, text.replacen("[trials]\n", "[trials]\norder = \"abba\"\n", 1)).unwrap();
    });
    let out = tempfile::tempdir().unwrap();
    let ledger_path = out.path().join("ledger.sqlite");
    let spec = repo.path().join("bench.toml");
    let spec = spec.to_str().unwrap();
    let out_arg = out.path().join("runs");
    let out_arg = out_arg.to_str().unwrap();
    let run_args = ["run", spec, "--base", "base", "--head", "base", "--trials", "2", "--out", out_arg];
    let (dir, run_id, first) = kill_mid_measure(out.path(), out_arg, &run_args);
    assert_abandoned_then_reaped(&dir, &run_id, &ledger_path).await;
    drop(first);

    // A revision other than the run's is refused, naming both.
    let dir_arg = dir.to_str().unwrap();
    let mut wrong = Controller::start(out.path(), "wrong", &["run", "--resume", dir_arg, "--head", "main~5"]);
    assert_eq!(wrong.wait(Duration::from_secs(60)), 1);
    assert!(wrong.output().contains("--head was base"), "{}", wrong.output());

    let mut second = Controller::start(out.path(), "second", &["run", "--resume", dir_arg, "--base", "base"]);
    second.run_id = Some(run_id.clone());
    let code = second.wait(Duration::from_secs(1500));
    let output = second.output();
    assert_eq!(code, 0, "the resumed run did not complete:\n{output}");
    assert!(output.contains("resumed (attempt 2)"), "{output}");
    assert!(remove_run_sandboxes(&run_id).await.is_empty(), "the resumed run left sandboxes behind");

    let report = read_report(&dir);
    assert_every_trial_once(&report);
    assert_only_missing_slots_ran(&dir, &run_id, &report);

    // The ledger entry is brought to its final state, charged for all four sandboxes.
    let (row, _) = Ledger::open(&ledger_path).unwrap().run(&run_id).unwrap().unwrap();
    assert_eq!(row.status, "completed");
    assert_eq!(row.sandboxes, 4, "{row:?}");
    assert_eq!(report.sandboxes.len(), 4);

    // A completed run is not resumed again.
    let mut again = Controller::start(out.path(), "again", &["run", "--resume", dir_arg]);
    assert_eq!(again.wait(Duration::from_secs(60)), 1);
    assert!(again.output().contains("completed; nothing is missing"), "{}", again.output());
    let mut missing = Controller::start(out.path(), "missing", &["run", "--resume", "/nonexistent/run"]);
    assert_eq!(missing.wait(Duration::from_secs(60)), 1);
    assert!(missing.output().contains("no such run directory"), "{}", missing.output());
}
