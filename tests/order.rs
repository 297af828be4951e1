//! `[trials] order = "interleaved"` end to end in Docker with the demo product: both sandboxes
//! take single runs in turn (A B B A …) within each trial, and every run of one side has its
//! partner on the other.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sandbench::observations::store::{StoredBody, StoredEvent};
use sandbench::report::Status;
use sandbench::run::{RunOptions, run};

/// The demo's spec cut to its cold start and `demo work` (5 runs a trial), interleaved.
fn lean_spec(repo: &Path) {
    let spec = repo.join("bench.toml");
    let text = std::fs::read_to_string(&spec).unwrap();
    let head = text.split("[[runtime.scenario]]").next().unwrap().to_string();
    let head = head.replace("[trials]\n", "[trials]\norder = \"interleaved\"\n");
    let work = "\n[[runtime.command]]\nmetric = \"work\"\nrun = \"demo work\"\ncwd = \"~/workspace\"\nrepeat = 5\n";
    let defined = text.split("[metrics.work]").nth(1).unwrap().split("\n\n").next().unwrap();
    std::fs::write(&spec, format!("{head}{work}\n[metrics.work]{defined}\n")).unwrap();
}

fn events(run_dir: &Path) -> Vec<StoredEvent> {
    let text = std::fs::read_to_string(run_dir.join("observations.jsonl")).unwrap();
    text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interleaved_run_takes_single_runs_in_turn_and_pairs_every_one() {
    let repo = support::demo_repo(lean_spec);
    let out = tempfile::tempdir().unwrap();
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let opts = RunOptions {
        trials: Some(2),
        run_timeout: Duration::from_secs(600),
        ..RunOptions::new(repo.path().join("bench.toml"), "base", "base", out.path())
    };
    let result = run(opts, cancel).await.unwrap();
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    let events = events(&result.dir);
    let side = |sandbox: &str| if sandbox.ends_with("-base") { "base" } else { "head" };
    // Per command (measure-0, runtime-1, …): the segments each side ended, in the order they did.
    let mut ended: BTreeMap<String, Vec<(u64, &str, u32)>> = BTreeMap::new();
    // Per command: when each side's timed part ended before an untimed rest (the lens).
    let mut rested: BTreeMap<String, Vec<(u64, &str)>> = BTreeMap::new();
    for e in &events {
        match &e.body {
            StoredBody::Yielded { command_id, index, untimed: false } => {
                ended.entry(command_id.clone()).or_default().push((e.unix_ms, side(&e.sandbox), *index));
            }
            StoredBody::Yielded { command_id, untimed: true, .. } => {
                rested.entry(command_id.clone()).or_default().push((e.unix_ms, side(&e.sandbox)));
            }
            _ => {}
        }
    }
    // Two trials, and a third when the adaptive pairs add one.
    let trials = ended.keys().filter(|c| c.starts_with("runtime-")).count();
    assert!((2..=3).contains(&trials), "{:?}", ended.keys());
    for trial in 0..trials {
        // Measure: the cold start is a segment, then the warm start ends the command.
        let measure = &ended[&format!("measure-{trial}")];
        assert_eq!(measure.len(), 2, "one yield a side: {measure:?}");
        // The tests' demo runs no lens: no command has an untimed rest (tests/lens.rs has them).
        assert!(rested.is_empty(), "{rested:?}");
        // Runtime: `demo work` yields after each of its 5 runs on both sides.
        let mut runtime = ended[&format!("runtime-{trial}")].clone();
        for s in ["base", "head"] {
            let indexes: Vec<u32> = runtime.iter().filter(|e| e.1 == s).map(|e| e.2).collect();
            assert_eq!(indexes, [1, 2, 3, 4, 5], "{s} runtime-{trial}: every run has its partner");
        }
        // In time, the runs alternate A B B A A B B A …, A being the side the trial starts with.
        runtime.sort();
        let order: Vec<&str> = runtime.iter().map(|e| e.1).collect();
        let a = order[0];
        let b = if a == "base" { "head" } else { "base" };
        let expected: Vec<&str> = (0..10).map(|i| if matches!(i % 4, 0 | 3) { a } else { b }).collect();
        assert_eq!(order, expected, "runtime-{trial}");
        assert_eq!(a, if trial % 2 == 0 { "base" } else { "head" }, "ABBA across trials");
    }
    // Every run was counted once: 5 samples of `work` a trial and side.
    for (name, s) in [("base", &report.base_side), ("head", &report.head_side)] {
        let samples = s.metrics.get("work").map_or(0, |m| m.len());
        assert_eq!(samples, 5 * trials, "{name} work samples");
    }
}
