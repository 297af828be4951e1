//! Sharding end to end in Docker with the demo product: two shards of one A/A run, one after the
//! other, then `merge` — every pair exactly once, from the shard that owns it, one report with
//! the demo's metrics, and one ledger entry holding both shards' sandboxes.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use sandbench::provision::{DockerProvisioner, labels};
use sandbench::report::Status;
use sandbench::run::{RunOptions, run};
use sandbench::shard::Shard;

/// A git repository holding a copy of examples/demo (ui trials cut to 2), tagged `base`.
fn demo_repo() -> tempfile::TempDir {
    support::demo_repo(|repo| {
        let spec = repo.join("bench.toml");
        let text = std::fs::read_to_string(&spec).unwrap();
        assert!(text.contains("\nui = 3\n"), "the demo spec changed: {text}");
        std::fs::write(&spec, text.replace("\nui = 3\n", "\nui = 2\n")).unwrap();
    })
}

fn options(repo: &Path, out: &Path, shard: Shard) -> RunOptions {
    RunOptions {
        trials: Some(2),
        run_timeout: Duration::from_secs(600),
        ledger: Some(out.join("ledger.sqlite")),
        shard: Some(shard),
        ..RunOptions::new(repo.join("bench.toml"), "base", "base", out.join("runs"))
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

/// The metrics whose samples are not the trials expected: `key: expected [..], base [..], head [..]`.
fn missing(report: &sandbench::report::Report) -> Vec<String> {
    let trials = |side: &sandbench::report::Side, key: &str| -> Vec<u32> {
        side.metrics.get(key).into_iter().flatten().filter(|s| s.value.is_some()).map(|s| s.trial).collect()
    };
    let mut out = Vec::new();
    for def in &report.metrics {
        let expected = report.expected_trials(&def.key);
        let (base, head) = (trials(&report.base_side, &def.key), trials(&report.head_side, &def.key));
        if expected != base || expected != head {
            out.push(format!("{}: expected {expected:?}, base {base:?}, head {head:?}", def.key));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_of_the_demo_merge_into_one_report_and_one_ledger_entry() {
    let repo = demo_repo();
    let out = tempfile::tempdir().unwrap();
    let mut dirs = Vec::new();
    for index in 1..=2 {
        let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
        let result = run(options(repo.path(), out.path(), Shard { index, count: 2 }), cancel).await.unwrap();
        assert_nothing_left(&result.dir).await;
        let r = &result.report;
        assert_eq!(result.status, Status::Completed, "shard {index}: {:?}; missing: {:?}", r.errors, missing(r));
        dirs.push(result.dir);
    }
    let merged_dir = out.path().join("merged");
    let ledger_path = out.path().join("ledger.sqlite");
    let (report, dir) = sandbench::merge::merge(&dirs, Some(&merged_dir), Some(&ledger_path)).unwrap();
    assert_eq!(dir, merged_dir);
    assert_eq!(report.status, Status::Completed, "{:?}", report.errors);
    assert!(report.complete());

    // Every pair exactly once: each metric's trials are the plan's, each once a side.
    for def in &report.metrics {
        let expected = report.expected_trials(&def.key);
        for side in [&report.base_side, &report.head_side] {
            // Each trial once (its first sample; a command repeated within a trial has more).
            let samples: Vec<&sandbench::report::Sample> = side.metrics.get(&def.key).into_iter().flatten().collect();
            let got: Vec<u32> = samples.iter().filter(|s| s.sample == 0).map(|s| s.trial).collect();
            assert_eq!(got, expected, "{}", def.key);
            let slots: BTreeSet<(u32, u32)> = samples.iter().map(|s| (s.trial, s.sample)).collect();
            assert_eq!(slots.len(), samples.len(), "{}: a sample counted twice", def.key);
        }
    }
    assert_eq!(report.expected_trials("cold"), [0, 1]);
    // One report, with the metrics: the demo's cold start, installation and a UI interaction.
    let markdown = std::fs::read_to_string(merged_dir.join("report.md")).unwrap();
    for row in ["| Cold startup |", "| Installation |", "**UI interactions**"] {
        assert!(markdown.contains(row), "no {row} in {markdown}");
    }
    assert!(markdown.contains("merged from 2 shards"), "{markdown}");
    for key in ["cold", "warm", "install"] {
        let c = report.comparisons.iter().find(|c| c.key == key).unwrap();
        assert_eq!((c.base_successful, c.head_successful), (2, 2), "{key}: {c:?}");
    }

    // The log: every shard's events, each naming its shard; a timed trial only from its owner,
    // and each (sandbox, metric, trial, sample) once.
    let roles: BTreeMap<&str, &str> = report.sandboxes.iter().map(|s| (s.id.as_str(), s.role.as_str())).collect();
    let mut seen = BTreeSet::new();
    let text = std::fs::read_to_string(merged_dir.join("observations.jsonl")).unwrap();
    for line in text.lines() {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        if event["kind"] != "observation" {
            continue;
        }
        let (sandbox, metric, trial) =
            (event["sandbox"].as_str().unwrap(), event["metric"].as_str().unwrap(), event["trial"].as_u64().unwrap());
        let sample = event["sample"].as_u64().unwrap_or(0);
        let shard = event["shard"].as_str().unwrap();
        assert!(roles[sandbox].ends_with(&format!("(shard {shard})")), "{line}");
        if ["cold", "install"].contains(&metric) {
            assert_eq!(shard, format!("{}/2", trial % 2 + 1), "{line}");
        }
        assert!(seen.insert((sandbox.to_string(), metric.to_string(), trial, sample)), "twice: {line}");
    }
    // One ledger entry, holding both shards' four sandboxes.
    let ledger = sandbench::cost::ledger::Ledger::open(&ledger_path).unwrap();
    let runs = ledger.runs(None).unwrap();
    assert_eq!(runs.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), [report.run_id.as_str()]);
    assert_eq!(runs[0].sandboxes, 4);
    let (allocation, _, _) = report.cost_figures().unwrap();
    assert!((runs[0].allocation_usd - allocation).abs() < 1e-9, "{} vs {allocation}", runs[0].allocation_usd);
}
