//! The instruction lens end to end in Docker: a copy of the demo whose head does 1 % more rounds
//! of `demo work` (more instructions, not more time), two trials a side. The lens counts the
//! work, the cold start and a bench step's whole suite under callgrind in the image the run
//! derives with valgrind; a step
//! whose binary valgrind cannot load fails its lens metrics with valgrind's reason and keeps its
//! wall time.

mod support;

use std::path::Path;
use std::time::Duration;

use sandbench::cost::ledger::Ledger;
use sandbench::observations::store::{StoredBody, StoredEvent};
use sandbench::provision::{DockerProvisioner, labels};
use sandbench::report::Report;
use sandbench::report::lens_runs::Basis;
use sandbench::run::{RunOptions, run};
use sandbench::stats::Outcome;

/// The spec: install once, the cold start and two commands under the lens, two trials.
const SPEC: &str = r##"name = "lens"

[sandbox]
image = "node:24-bookworm"
cpus = 2
memory_gb = 2
disk_gb = 10

[source]
repository = "."

[trials]
install = 1
measure = 2
runtime = 2
failure_limit = 1

[env]
DEMO_DAEMON_WARM_UP_ROUNDS = "200000"

[prepare]
commands = ["mkdir -p release && npm pack --silent --pack-destination release"]
artifacts = ["release/*.tgz"]
origin_port = 18741
origin_path = "releases/v1.0.0"

[install]
command = "sh /home/builder/source/install.sh 1.0.0"
timeout_s = 120
env = { DEMO_DOWNLOAD_BASE_URL = "http://127.0.0.1:18741" }

[install.fixture]
dir = "workspace"
git = true
files = { "README.md" = "# fixture\n" }

[measure]
startup = ["demo"]
cwd = "~/workspace"
timeout_s = 30
settle_s = 0.5
instructions = true

[[runtime.command]]
metric = "work"
run = "demo work"
cwd = "~/workspace"
instructions = true

# A static program linked at an address valgrind keeps for itself: it runs, valgrind cannot load it.
[[runtime.command]]
metric = "fixed_address"
run = "cp ~/.local/lib/node_modules/demo-cli/bin/fixed-address \"$TMPDIR/fa\" && chmod +x \"$TMPDIR/fa\" && \"$TMPDIR/fa\""
instructions = true

# A bench step whose suite is `demo work` (Bencher Metric Format on its standard output): the
# lens counts its whole suite.
[[runtime.bench]]
name = "demo"
run = "demo work >/dev/null && echo '{\"work\": {\"latency\": {\"value\": 1.0}}}'"
cwd = "~/workspace"
format = "bmf"
instructions = true

[metrics.work]
title = "Fixed CPU work"
unit = "ms"
scale = 1000
absolute = 0.005
relative = 0.2
group = "CLI"

[metrics.fixed_address]
title = "A program valgrind cannot load"
unit = "ms"
scale = 1000
absolute = 0.005
relative = 0.2
group = "CLI"
"##;

/// The demo with less work (a lens run of it takes seconds), the spec above, and the program
/// valgrind cannot load; `base`, and `head` with 1 % more rounds of work.
fn lens_repo() -> tempfile::TempDir {
    let repo = support::demo_repo(|repo| {
        std::fs::write(repo.join("bench.toml"), SPEC).unwrap();
        support::less_work(repo, 5_000_000);
        fixed_address_program(&repo.join("bin/fixed-address"));
    });
    let tuning = repo.path().join("lib/tuning.json");
    let text = std::fs::read_to_string(&tuning).unwrap();
    let more = text.replace("\"work_rounds_pct\": 0", "\"work_rounds_pct\": 1");
    assert_ne!(more, text);
    std::fs::write(&tuning, more).unwrap();
    support::git(repo.path(), "commit -qam 'one percent more rounds'");
    support::git(repo.path(), "tag head");
    repo
}

/// A static program whose text is linked at 0x58000000, where valgrind's own loader lives.
fn fixed_address_program(out: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("fa.c");
    std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    let status = std::process::Command::new("gcc")
        .args(["-O2", "-static", "-no-pie", "-Wl,-Ttext-segment=0x58000000", "-o"])
        .arg(out)
        .arg(&source)
        .status()
        .expect("gcc");
    assert!(status.success(), "gcc failed");
}

fn values(report: &Report, side: &str, key: &str) -> Vec<f64> {
    let side = if side == "base" { &report.base_side } else { &report.head_side };
    side.metrics.get(key).map_or_else(Vec::new, |s| s.iter().filter_map(|s| s.value).collect())
}

fn errors(report: &Report, side: &str, key: &str) -> Vec<String> {
    let side = if side == "base" { &report.base_side } else { &report.head_side };
    side.metrics.get(key).map_or_else(Vec::new, |s| s.iter().filter_map(|s| s.error.clone()).collect())
}

fn outcome(report: &Report, key: &str) -> Outcome {
    report.comparisons.iter().find(|c| c.key == key).unwrap_or_else(|| panic!("no {key}")).comparison.outcome
}

/// The largest relative difference between two counts of one side.
fn spread(v: &[f64]) -> f64 {
    let (lo, hi) = v.iter().fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    hi / lo - 1.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lens_counts_the_same_twice_sees_one_percent_and_says_what_valgrind_cannot_run() {
    let repo = lens_repo();
    let out = tempfile::tempdir().unwrap();
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let ledger = out.path().join("ledger.sqlite");
    let options = RunOptions {
        run_timeout: Duration::from_secs(1200),
        ledger: Some(ledger.clone()),
        ..RunOptions::new(repo.path().join("bench.toml"), "base", "head", out.path())
    };
    let result = run(options, cancel).await.unwrap();
    let run_id = result.dir.file_name().unwrap().to_string_lossy().to_string();
    let provisioner = DockerProvisioner::connect(1).await.unwrap();
    assert!(provisioner.list(Some((labels::RUN, &run_id))).await.unwrap().is_empty(), "containers left behind");
    let report = &result.report;
    // Deterministic: the two trials of each side agree within 0.05 %.
    for side in ["base", "head"] {
        for key in [
            "work.instructions",
            "work.cycles",
            "cold.instructions",
            "cold.cycles",
            "bench.demo.instructions",
            "bench.demo.cycles",
        ] {
            let v = values(report, side, key);
            assert_eq!(v.len(), 2, "{side} {key}: {:?}", errors(report, side, key));
            assert!(spread(&v) < 0.0005, "{side} {key} differs by {:.4} %: {v:?}", 100.0 * spread(&v));
        }
    }
    // No A/A profile showed the steps deterministic: the lens ran in each side's two trials (of
    // the three that would show it), and the rows say why.
    for runs in &report.lens_runs {
        assert_eq!((runs.runs, runs.basis), (2, Basis::Uncalibrated), "{runs:?}");
    }
    let work = report.comparisons.iter().find(|c| c.key == "work.instructions").unwrap();
    assert!(work.notes.iter().any(|n| n.starts_with("counted in the first 2 trials of each side: no A/A profile")));
    // 1 % more rounds: regressed, by about 1 %; the start did not change.
    assert_eq!(outcome(report, "work.instructions"), Outcome::Regressed);
    assert_eq!(outcome(report, "work.cycles"), Outcome::Regressed);
    let work = report.comparisons.iter().find(|c| c.key == "work.instructions").unwrap();
    let estimate = work.paired.estimate.unwrap();
    assert!((0.005..0.015).contains(&estimate), "work.instructions {estimate}");
    assert_eq!(outcome(report, "cold.instructions"), Outcome::NoClearChange);
    // The bench step's whole suite (`demo work` and an echo): about 1 % more too, while the
    // benchmark it reports stands as it was.
    assert_eq!(outcome(report, "bench.demo.instructions"), Outcome::Regressed);
    let suite = report.comparisons.iter().find(|c| c.key == "bench.demo.instructions").unwrap();
    let estimate = suite.paired.estimate.unwrap();
    assert!((0.004..0.015).contains(&estimate), "bench.demo.instructions {estimate}");
    assert_eq!(values(report, "head", "bench.demo.work").len(), 2, "the benchmark's own values stand");
    // Two CPUs a sandbox on this 2-CPU machine: the runs are interleaved, and each trial's lens
    // runs go on both sides at once once neither side has a timed run left (each side's first
    // count comes before the other's last).
    let text = std::fs::read_to_string(result.dir.join("observations.jsonl")).unwrap();
    let events: Vec<StoredEvent> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    for trial in 0..2 {
        let command = format!("runtime-{trial}");
        let counted = |side: &str| -> Vec<u64> {
            let of = |e: &&StoredEvent| {
                matches!(&e.body, StoredBody::Observation { command_id, metric, .. }
                    if *command_id == command && metric.ends_with(".instructions"))
            };
            events.iter().filter(of).filter(|e| e.sandbox.ends_with(side)).map(|e| e.unix_ms).collect()
        };
        let (base, head) = (counted("-base"), counted("-head"));
        assert!(base.len() >= 2 && head.len() >= 2, "{command}: {base:?} {head:?}");
        let span = |v: &[u64]| (*v.iter().min().unwrap(), *v.iter().max().unwrap());
        let ((base_first, base_last), (head_first, head_last)) = (span(&base), span(&head));
        assert!(base_first < head_last && head_first < base_last, "{command}: {base:?} {head:?}");
    }
    // The program valgrind cannot load: its lens metrics fail with valgrind's reason, its wall
    // time stands.
    for side in ["base", "head"] {
        assert_eq!(
            values(report, side, "fixed_address").len(),
            2,
            "{side}: {:?}",
            errors(report, side, "fixed_address")
        );
        let failed = errors(report, side, "fixed_address.instructions");
        assert_eq!(failed.len(), 2, "{side}: {failed:?}");
        assert!(
            failed.iter().all(|e| e.contains("instruction lens of fixed_address") && e.contains("failed in UME")),
            "{failed:?}"
        );
        assert_eq!(values(report, side, "work").len(), 2);
    }
    // The report names the lens, shows where the instructions went and what the lens cost.
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    assert!(markdown.contains("| Fixed CPU work \\(instructions\\) | instructions |"), "{markdown}");
    assert!(markdown.contains("<details><summary>Where the instructions went</summary>"), "{markdown}");
    // The cold start, `work` and the bench suite, two trials a side (the program valgrind cannot
    // load counts no run).
    assert!(markdown.contains("Instruction lens: 12 runs"), "{markdown}");
    let lens = report.lens.as_ref().expect("lens summary");
    assert!(lens.state.contains("cold compile cache"), "{lens:?}");
    let step = lens.steps.iter().find(|s| s.stem == "work").unwrap();
    let top = step.shifts(5);
    assert!(!top.is_empty() && top[0].delta() > 0.0, "{top:?}");
    let html = std::fs::read_to_string(result.dir.join("report.html")).unwrap();
    assert!(html.contains("Where the instructions went"));
    // The lens's cost is in the ledger too: its seconds, a part of the run's.
    let (row, _) = Ledger::open(&ledger).unwrap().run(&run_id).unwrap().expect("the run's ledger row");
    assert!((row.lens_seconds - lens.seconds).abs() < 1e-6, "{row:?} {lens:?}");
    assert!(row.lens_seconds > 0.0 && row.lens_seconds < row.seconds && row.lens_usd > 0.0, "{row:?}");
}
