//! `sandbench run` end to end in Docker with the demo product: an A/A run (every phase, the
//! transport benches and UI interactions included), a regression, and a sandbox killed in the
//! middle of a run.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbench::provision::{DockerProvisioner, labels};
use sandbench::report::Status;
use sandbench::run::{RunOptions, run};
use sandbench::stats::Outcome;

/// A git repository holding a copy of examples/demo, committed as `base`; `slower` adds a head
/// commit whose CLI spends 300 ms more before it shows its prompt.
fn demo_repo(slower: bool) -> (tempfile::TempDir, String, String) {
    let repo = support::demo_repo(|_| {});
    let git = |args: &str| support::git(repo.path(), args);
    if slower {
        let path = repo.path().join("bin/demo.js");
        let text = std::fs::read_to_string(&path).unwrap();
        let slowed = text.replace(
            "async function main(args) {",
            "async function main(args) {\n  if (args.length === 0) { const until = Date.now() + 300; while (Date.now() < until); }",
        );
        assert_ne!(slowed, text);
        std::fs::write(&path, slowed).unwrap();
        git("commit -qam 'slower start'");
    }
    git("tag head");
    (repo, "base".into(), "head".into())
}

fn options(repo: &Path, out: &Path, base: &str, head: &str, trials: u32) -> RunOptions {
    RunOptions {
        trials: Some(trials),
        run_timeout: Duration::from_secs(600),
        ledger: Some(out.join("ledger.sqlite")),
        ..RunOptions::new(repo.join("bench.toml"), base, head, out)
    }
}

async fn assert_nothing_left(run_dir: &Path) {
    let run_id = run_dir.file_name().unwrap().to_string_lossy().to_string();
    let provisioner = DockerProvisioner::connect(1).await.unwrap();
    let left = provisioner.list(Some((labels::RUN, &run_id))).await.unwrap();
    for c in &left {
        let _ = provisioner.remove(&c.id).await;
    }
    assert!(left.is_empty(), "containers left behind: {:?}", left.iter().map(|c| &c.name).collect::<Vec<_>>());
}

/// The run directory a run is writing in `out` (the only folder there).
fn run_dir_in(out: &Path) -> Option<std::fs::DirEntry> {
    std::fs::read_dir(out).ok()?.flatten().find(|e| e.file_type().is_ok_and(|t| t.is_dir()))
}

fn outcome(report: &sandbench::report::Report, key: &str) -> Outcome {
    report.comparisons.iter().find(|c| c.key == key).unwrap_or_else(|| panic!("no {key}")).comparison.outcome
}

/// The paired rule's headline: every one of the demo's 38 metrics, the CPU times of its
/// install, starts and commands and the peak RSS of its three scripts (46) counted, none changed, no arrow anywhere; and the full
/// table in the reference's order: the CLI rows first, then its sections in its order, each
/// with values from this run — the transport benches and the UI interactions included.
fn assert_reference_layout_with_no_change(markdown: &str) {
    let overall = markdown.lines().find(|l| l.starts_with("**Overall: ")).unwrap_or_default();
    let counts = overall
        .strip_prefix("**Overall: 0 regressed · 0 improved · ")
        .and_then(|rest| rest.strip_suffix(" inconclusive.**"))
        .and_then(|rest| rest.split_once(" no change · "))
        .and_then(|(same, unsure)| Some((same.parse::<usize>().ok()?, unsure.parse::<usize>().ok()?)));
    let Some((same, unsure)) = counts else { panic!("unexpected headline {overall:?} in {markdown}") };
    assert_eq!(same + unsure, 46, "{overall}");
    assert!(!markdown.contains('↑') && !markdown.contains('↓'), "{markdown}");
    assert!(markdown.contains("Nothing regressed, improved or went missing: "), "{markdown}");
    let at = |needle: &str| markdown.find(needle).unwrap_or_else(|| panic!("no {needle} in {markdown}"));
    assert!(at("<details><summary>All 46 metrics</summary>") < at("| **CLI** |"), "{markdown}");
    assert!(at("| Cold startup | wall |") < at("| Installation | wall |"));
    assert!(at("| Installation | wall |") < at("| **Python runtime** |"));
    assert!(at("| **Python runtime** |") < at("| **Session transport** |"));
    assert!(at("| **Session transport** |") < at("| **UI interactions** |"));
    // The transport benches and their scripts' peak RSS.
    for (section, rows) in [("| **Session transport** |", 4), ("| **UI interactions** |", 17)] {
        let table: Vec<&str> = markdown[at(section)..]
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("| ") && !l.starts_with("| **"))
            .collect();
        assert_eq!(table.len(), rows, "{section}: {table:#?}");
        for row in table {
            let cells: Vec<&str> = row.split(" | ").collect();
            assert!(cells[2] != "—" && cells[3] != "—", "{section} has no value in {row}");
        }
    }
    assert!(
        markdown
            .contains("| Full-history transfers per warm session switch | value | 1.00 transfers | 1.00 transfers |")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a_a_run_completes_with_no_change() {
    let (repo, base, _) = demo_repo(false);
    let out = tempfile::tempdir().unwrap();
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let result = run(options(repo.path(), out.path(), &base, &base, 5), cancel).await.unwrap();
    assert_nothing_left(&result.dir).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    let changed: Vec<&str> = report
        .comparisons
        .iter()
        .filter(|c| matches!(c.comparison.outcome, Outcome::Regressed | Outcome::Improved))
        .map(|c| c.key.as_str())
        .collect();
    assert!(changed.is_empty(), "an A/A run reported changes: {changed:?}");
    // Runtime facts: kernel, CPU, and the tools the build used.
    for key in ["kernel", "cpu", "os", "node", "npm", "git", "python"] {
        assert!(
            report.base_side.facts.get(key).is_some_and(|v| !v.is_empty()),
            "fact {key} missing: {:?}",
            report.base_side.facts
        );
    }
    for file in ["report.json", "report.md", "report.html", "observations.jsonl", "plan.json"] {
        assert!(result.dir.join(file).is_file(), "{file} missing");
    }
    // The directory alone re-renders the same report.
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    let again = sandbench::run::rerender(&result.dir).unwrap();
    assert_eq!(sandbench::report::markdown::render(&again), markdown);
    // Every timed step's process tree in report.json beside its wall time, and the conditions
    // of every measure trial on both sides.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(result.dir.join("report.json")).unwrap()).unwrap();
    for side in ["base_side", "head_side"] {
        for key in ["cold.cpu", "cold.maxrss", "cold.minflt", "cold.vcsw", "warm.cpu", "install.cpu", "git_status.cpu"]
        {
            let samples = json[side]["metrics"][key].as_array().map_or(0, |a| a.len());
            assert_eq!(samples, if key == "install.cpu" { 2 } else { 5 }, "{side} {key}");
        }
    }
    let measured = report.conditions.iter().filter(|c| c.phase == "measure").count();
    assert_eq!(measured, 10, "{:?}", report.conditions);
    assert_reference_layout_with_no_change(&markdown);
    // An A/A run writes a noise profile: an entry for every metric with at least 3 usable pairs
    // (the transport and UI ones among them; a CPU time under one clock tick is not usable).
    // With 5 pairs it is too short to calibrate floors.
    let profile = sandbench::run::NoiseProfile::load(&result.dir.join("noise.json")).unwrap();
    assert!(profile.metrics.len() >= 20, "{profile:?}");
    assert!(profile.metrics.keys().all(|k| report.comparisons.iter().any(|c| &c.key == k)), "{profile:?}");
    assert!(
        profile.metrics.contains_key("frame_decode") && profile.metrics.contains_key("browse_start"),
        "{profile:?}"
    );
    assert_eq!(profile.metrics["cold"].pairs, 5, "{profile:?}");
    assert!(profile.floor("cold").unwrap_err().contains("at least 10 needed"), "{profile:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_starts_300_ms_slower_is_reported_regressed() {
    let (repo, base, head) = demo_repo(true);
    let out = tempfile::tempdir().unwrap();
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    // 5 pairs: the paired rule's t interval on 3 pairs (t = 4.30) is too wide for a noisy start.
    let result = run(options(repo.path(), out.path(), &base, &head, 5), cancel).await.unwrap();
    assert_nothing_left(&result.dir).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    assert_eq!(outcome(report, "cold"), Outcome::Regressed);
    assert_eq!(outcome(report, "warm"), Outcome::Regressed);
    let cold = report.comparisons.iter().find(|c| c.key == "cold").unwrap();
    let delta = cold.comparison.delta.unwrap();
    assert!((0.2..0.6).contains(&delta), "cold start delta {delta} s");
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    assert!(markdown.contains("| Cold startup |") && markdown.contains("↑ +"), "{markdown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_sandbox_mid_run_gives_a_partial_report_naming_it() {
    let (repo, base, _) = demo_repo(false);
    let out = tempfile::tempdir().unwrap();
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let out_path: PathBuf = out.path().to_path_buf();
    let killer = tokio::spawn(async move {
        // Wait until the measure phase has begun, then kill the head sandbox.
        let provisioner = DockerProvisioner::connect(1).await.unwrap();
        for _ in 0..1200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(dir) = run_dir_in(&out_path) else { continue };
            let log = std::fs::read_to_string(dir.path().join("observations.jsonl")).unwrap_or_default();
            if log.contains("\"phase\":\"measure\"") {
                let name = format!("sandbench-{}-head", dir.file_name().to_string_lossy());
                provisioner.kill(&name, "SIGKILL").await.unwrap();
                return name;
            }
        }
        panic!("the run never reached measure");
    });
    let result = run(options(repo.path(), out.path(), &base, &base, 3), cancel).await.unwrap();
    let killed = killer.await.unwrap();
    assert_nothing_left(&result.dir).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Partial, "errors: {:?}", report.errors);
    assert!(
        report.errors.iter().any(|e| e.contains(&killed) && e.contains("stopped")),
        "the failure must name the sandbox: {:?}",
        report.errors
    );
    // Base still measured everything; head's measurements stop where its sandbox died, and
    // what is missing is not reported as a change.
    let base_cold = report.base_side.metrics["cold"].iter().filter(|s| s.value.is_some()).count();
    assert_eq!(base_cold, 3);
    assert!(matches!(outcome(report, "cold"), Outcome::Incomplete | Outcome::Unavailable));
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    assert!(markdown.contains("**Benchmark execution did not complete successfully."));
    assert_eq!(sandbench::cli::exit_code(result.status), std::process::ExitCode::from(sandbench::cli::exit::PARTIAL));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_run_tears_down_and_still_writes_its_report() {
    let (repo, base, _) = demo_repo(false);
    let out = tempfile::tempdir().unwrap();
    let (cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let out_path = out.path().to_path_buf();
    tokio::spawn(async move {
        // Cancel once the first install has started (as Ctrl-C or SIGTERM would).
        for _ in 0..1200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(dir) = run_dir_in(&out_path) else { continue };
            if std::fs::read_to_string(dir.path().join("observations.jsonl"))
                .unwrap_or_default()
                .contains("\"phase\":\"install\"")
            {
                let _ = cancel_tx.send(true);
                return;
            }
        }
    });
    let result = run(options(repo.path(), out.path(), &base, &base, 3), cancel).await.unwrap();
    assert_nothing_left(&result.dir).await;
    assert_eq!(result.status, Status::Canceled);
    assert!(result.report.errors.iter().any(|e| e == "The run was canceled"), "{:?}", result.report.errors);
    assert_eq!(result.report.sandboxes.len(), 2, "both sandboxes' lifetimes are recorded");
    assert!(result.report.sandboxes.iter().all(|s| s.deleted));
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    assert!(markdown.contains("performance — canceled"));
    assert_eq!(sandbench::cli::exit_code(result.status), std::process::ExitCode::from(sandbench::cli::exit::CANCELED));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pairs_share_the_trials_each_on_its_own_cpus() {
    let (repo, base, _) = demo_repo(false);
    let out = tempfile::tempdir().unwrap();
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let mut opts = options(repo.path(), out.path(), &base, &base, 4);
    opts.pairs = 2;
    let result = run(opts, cancel).await.unwrap();
    assert_nothing_left(&result.dir).await;
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    assert_eq!(report.sandboxes.len(), 4);
    let roles: Vec<&str> = report.sandboxes.iter().map(|s| s.role.as_str()).collect();
    assert_eq!(roles, ["base0", "head0", "base1", "head1"]);
    // Every trial was measured once per side, whichever pair ran it.
    for side in [&report.base_side, &report.head_side] {
        let trials: Vec<u32> = side.metrics["cold"].iter().filter(|s| s.value.is_some()).map(|s| s.trial).collect();
        assert_eq!(trials, [0, 1, 2, 3]);
    }
}
