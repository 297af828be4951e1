//! Cost end to end in Docker: a budget that stops a run, the ledger that records every run
//! (finished or killed), and what `sandbench cost` shows of them.

use std::path::Path;
use std::time::Duration;

use sandbench::cost::ledger::Ledger;
use sandbench::provision::{DockerProvisioner, labels};
use sandbench::report::Status;
use sandbench::run::{RunOptions, run};

fn demo_spec() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo/bench.toml")
}

/// Sandboxes whose owner label names the controller process `marker` (`/pid/`).
async fn owned_by(provisioner: &DockerProvisioner, marker: &str) -> usize {
    let all = provisioner.list(None).await.unwrap();
    all.iter().filter(|c| c.labels.get(labels::OWNER).is_some_and(|o| o.contains(marker))).count()
}

fn sandbench(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandbench")).args(args).output().unwrap();
    assert!(out.status.success(), "sandbench {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_budget_stops_the_run_which_the_ledger_and_sandbench_cost_show() {
    let out = tempfile::tempdir().unwrap();
    let ledger_path = out.path().join("ledger.sqlite");
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let options = RunOptions {
        trials: Some(3),
        // Two sandboxes at about $0.13 an hour each spend this in about half a second.
        budget_usd: Some(0.000_04),
        run_timeout: Duration::from_secs(600),
        ledger: Some(ledger_path.clone()),
        ..RunOptions::new(demo_spec(), "HEAD", "HEAD", out.path().join("runs"))
    };
    let result = run(options, cancel).await.unwrap();
    let report = &result.report;
    assert_eq!(result.status, Status::Failed, "{:?}", report.errors);
    assert!(report.errors.iter().any(|e| e == "Reached the estimated run budget"), "{:?}", report.errors);
    assert!(!report.base_side.metrics.contains_key("cold"), "no measurement started after the budget");
    assert_eq!(report.sandboxes.len(), 2);
    assert!(report.sandboxes.iter().all(|s| s.deleted && s.estimated_usd > 0.0));
    let provisioner = DockerProvisioner::connect(1).await.unwrap();
    let run_id = report.run_id.clone();
    assert!(provisioner.list(Some((labels::RUN, &run_id))).await.unwrap().is_empty());
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    assert!(markdown.contains("**Sandbox cost: ~$") && markdown.contains("Cost: allocation $"), "{markdown}");

    // The ledger has it, with its cost, and `sandbench cost` shows it every way.
    let ledger = Ledger::open(&ledger_path).unwrap();
    let (row, phases) = ledger.run(&run_id).unwrap().expect("the run is in the ledger");
    assert_eq!(row.status, "failed");
    assert!(row.allocation_usd >= 0.000_04 && row.max_usd >= row.allocation_usd && row.usage_usd > 0.0, "{row:?}");
    assert!(
        phases.iter().any(|p| p.phase == "provision") && phases.iter().any(|p| p.phase == "teardown"),
        "{phases:?}"
    );
    let ledger_arg = ledger_path.display().to_string();
    let table = sandbench(&["cost", "--ledger", &ledger_arg]);
    assert!(table.starts_with("run") && table.contains(&run_id) && table.contains("failed"), "{table}");
    let json: serde_json::Value =
        serde_json::from_str(&sandbench(&["cost", "--ledger", &ledger_arg, "--format", "json"])).unwrap();
    assert_eq!(json[0]["run_id"], run_id.as_str());
    let csv = sandbench(&["cost", "--ledger", &ledger_arg, "--by", "spec", "--format", "csv"]);
    assert!(csv.lines().nth(1).unwrap().starts_with("demo,1,0,"), "{csv}");
    let detail = sandbench(&["cost", &run_id, "--ledger", &ledger_arg]);
    assert!(detail.contains("max(request, usage)") && detail.contains("provision"), "{detail}");
    let none = sandbench(&["cost", "--ledger", &ledger_arg, "--since", "2999-01-01"]);
    assert_eq!(none.lines().count(), 1, "only the header: {none}");

    // `report --format X` re-renders into the run directory and prints the file's path.
    let dir = result.dir.display().to_string();
    let printed = sandbench(&["report", &dir, "--format", "html"]);
    assert_eq!(printed.trim(), result.dir.join("report.html").display().to_string());
    assert!(std::fs::read_to_string(printed.trim()).unwrap().starts_with("<!doctype html>"), "{printed}");
    let json = sandbench(&["report", &dir, "--format", "json", "--stdout"]);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&json).unwrap()["run_id"], run_id.as_str());
}

#[test]
fn cost_refuses_a_ledger_that_does_not_exist_unless_asked_to_create_it() {
    let dir = tempfile::tempdir().unwrap();
    let mistyped = dir.path().join("ledgr.sqlite");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .arg("cost")
        .arg("--ledger")
        .arg(&mistyped)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&mistyped.display().to_string()) && stderr.contains("--create-ledger"), "{stderr}");
    assert_eq!(stderr.matches("error").count(), 1, "said once: {stderr}");
    assert!(!mistyped.exists(), "a mistyped ledger must not be created");
    let created = sandbench(&["cost", "--create-ledger", "--ledger", &mistyped.display().to_string()]);
    assert_eq!(created.lines().count(), 1, "an empty ledger: only the header: {created}");
    assert!(mistyped.exists());
}

#[test]
fn run_statuses_never_share_the_usage_errors_exit_code() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .args(["run", &demo_spec().display().to_string(), "--base", "HEAD", "--head", "HEAD", "--trials", "-1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_sandbench")).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("2  invalid command line") && help.contains("3  partial") && help.contains("4  canceled"),
        "{help}"
    );
    // More pairs than CPUs: refused before anything starts, naming both.
    let cpus = std::thread::available_parallelism().unwrap().get();
    let pairs = (cpus + 1).to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .args(["run", &demo_spec().display().to_string(), "--base", "HEAD", "--head", "HEAD", "--pairs", &pairs])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("--pairs {pairs}")) && stderr.contains(&format!("{cpus} ")), "{stderr}");
    assert!(stderr.contains("--oversubscribe") && !stderr.contains('\x1b'), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_run_leaves_its_ledger_row_unfinished_and_the_rest_intact() {
    let out = tempfile::tempdir().unwrap();
    let ledger_path = out.path().join("ledger.sqlite");
    // An earlier run, finished.
    {
        let mut ledger = Ledger::open(&ledger_path).unwrap();
        ledger
            .begin_run(&sandbench::cost::ledger::RunStart {
                run_id: "earlier".into(),
                spec: "demo".into(),
                repository: "/repo".into(),
                base_rev: "a".into(),
                base_commit: "a".into(),
                head_rev: "b".into(),
                head_commit: "b".into(),
                started_at: "2026-11-28T00:00:00Z".into(),
                run_dir: "/runs/earlier".into(),
                owner: String::new(),
                usd_per_hour: 0.0,
            })
            .unwrap();
        ledger.finish_run("earlier", "completed", "2026-11-28T00:05:00Z", &[]).unwrap();
    }
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .args(["run", &demo_spec().display().to_string(), "--base", "HEAD", "--head", "HEAD", "--trials", "3"])
        .arg("--out")
        .arg(out.path().join("runs"))
        .arg("--ledger")
        .arg(&ledger_path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once its sandboxes are working.
    let provisioner = DockerProvisioner::connect(1).await.unwrap();
    let marker = format!("/{}/", child.id());
    let mut seen = false;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mine = owned_by(&provisioner, &marker).await;
        if mine == 2 {
            seen = true;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Its sandboxes are orphans now: the reaper removes them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    provisioner.reap().await.unwrap();
    let left = owned_by(&provisioner, &marker).await;
    assert!(seen, "the run never provisioned its sandboxes");
    assert_eq!(left, 0, "the killed controller's sandboxes were not reaped");

    let ledger = Ledger::open(&ledger_path).unwrap();
    assert_eq!(ledger.integrity().unwrap(), "ok");
    let runs = ledger.runs(None).unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let killed = runs.iter().find(|r| r.run_id != "earlier").unwrap();
    assert_eq!(killed.status, "unfinished");
    // Its diagnostics went to its run directory as they came, as plain text.
    let log = std::fs::read_to_string(out.path().join("runs").join(&killed.run_id).join("controller.log")).unwrap();
    assert!(log.contains("run started") && log.contains(&format!("run={}", killed.run_id)), "{log}");
    assert!(log.contains("sandbox=") && !log.contains('\x1b'), "{log}");
    let earlier = runs.iter().find(|r| r.run_id == "earlier").unwrap();
    assert_eq!(earlier.status, "completed");
    drop(ledger);

    // The next start or gc reconciles it: abandoned, its sandboxes (gone) charged from what its
    // run directory persisted, and its report says how to continue it.
    let lines = sandbench::run::reconcile::reconcile(&provisioner, &ledger_path).await;
    assert!(lines.iter().any(|l| l.contains(&killed.run_id) && l.contains("abandoned")), "{lines:?}");
    let (row, _) = Ledger::open(&ledger_path).unwrap().run(&killed.run_id).unwrap().unwrap();
    assert_eq!(row.status, "abandoned");
    assert!(row.finished_at.is_some() && row.sandboxes >= 1, "{row:?}");
    let report = std::fs::read_to_string(out.path().join("runs").join(&killed.run_id).join("report.json")).unwrap();
    assert!(report.contains("\"status\": \"abandoned\"") && report.contains("sandbench run --resume"), "{report}");
}
