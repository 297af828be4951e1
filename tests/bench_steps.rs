//! Bench steps end to end: the examples' real suites — tinybench and mitata from npm,
//! pytest-benchmark from PyPI, installed through the registry bridge with the network off — run
//! in `node:24-bookworm`, each benchmark an observation in its format's unit, and a revision that
//! makes `parse` twice as slow and `render` twice as fast seen on those benchmarks and only
//! there. The first test drives the agent directly (its bench steps added to the agent's plan);
//! the second is a whole `sandbench run` of a spec's `[[runtime.bench]]`, A/A and with the
//! known change, judged by the report.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbench::observations::store::{StoredBody, read_events};
use sandbench::provision::{DockerProvisioner, labels};
use sandbench::report::{Report, Side};
use sandbench::run::{RunOptions, run};
use sandbench::station::sandbox;
use sandbench::stats::{Better, Outcome};
use sandbench_proto::Phase;
use sandbench_proto::plan::{AgentPlan, BenchStep, Step};
use sandbench_proto::v1::PhaseStatus;
use support::{NODE_IMAGE, copy_tree, git, with_harness};

const SPEC: &str = r#"name = "bench-steps"
[sandbox]
image = "node:24-bookworm"
network = "registries"
[source]
repository = "."
[registries]
npm = "https://registry.npmjs.org/"
pypi = "https://pypi.org/simple/"
hosts = ["files.pythonhosted.org"]
[prepare]
timeout_s = 600
commands = [
  "cd bench-node && npm ci --no-audit --no-fund",
  "cd bench-python && python3 -m venv ~/venv && ~/venv/bin/pip install --no-cache-dir -r requirements.txt",
]
[install]
command = "true"
"#;

/// The examples' suites as bench steps: a results file, standard output, a results file.
fn benches() -> Vec<BenchStep> {
    let step = |name: &str, format: &str, cwd: &str, run: &str, results: Option<&str>| BenchStep {
        name: name.into(),
        step: Step { run: run.into(), cwd: Some(cwd.into()), timeout_s: 300.0, env: Default::default() },
        format: format.into(),
        results: results.map(str::to_string),
        max_benchmarks: 1000,
        instructions: false,
    };
    vec![
        step(
            "tinybench",
            "tinybench",
            "bench-node",
            "BENCH_TIME_MS=300 node bench/tinybench.mjs",
            Some("results/tinybench.json"),
        ),
        step("mitata", "mitata", "bench-node", "node bench/mitata.mjs", None),
        step(
            "pytest",
            "pytest-benchmark",
            "bench-python",
            "~/venv/bin/python -m pytest --benchmark-json=pytest-benchmark.json --benchmark-max-time=0.3",
            Some("pytest-benchmark.json"),
        ),
    ]
}

/// A repository with both examples: `base` as they are, `head` with `parse`'s rounds doubled
/// and `render`'s halved in both (`checksum` unchanged). Returns the repository and the commits.
async fn examples_repo() -> (tempfile::TempDir, String, String) {
    let repo = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for example in ["bench-node", "bench-python"] {
        std::fs::create_dir_all(repo.path().join(example)).unwrap();
        copy_tree(&root.join(example), &repo.path().join(example));
    }
    std::fs::write(repo.path().join("bench.toml"), SPEC).unwrap();
    git(repo.path(), "init -q -b main");
    git(repo.path(), "add -A");
    git(repo.path(), "commit -q -m base");
    let node = repo.path().join("bench-node/lib/rounds.json");
    std::fs::write(&node, r#"{ "parse": 48, "render": 32, "checksum": 800 }"#).unwrap();
    let python = repo.path().join("bench-python/work/rounds.json");
    std::fs::write(&python, r#"{ "parse": 48, "render": 8, "checksum": 8 }"#).unwrap();
    git(repo.path(), "commit -q -am head");
    let base = sandbench::source::resolve(repo.path(), "HEAD~1").await.unwrap();
    let head = sandbench::source::resolve(repo.path(), "HEAD").await.unwrap();
    (repo, base, head)
}

/// Fails, saying so, when a registry the test needs does not answer from this machine.
async fn registries_answer() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    for url in ["https://registry.npmjs.org/tinybench", "https://pypi.org/simple/pytest-benchmark/"] {
        match client.head(url).send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => panic!("the registry does not answer from this machine: {url} gave {}", r.status()),
            Err(e) => panic!("the registry does not answer from this machine: {url}: {e}"),
        }
    }
}

/// Every observation of a sandbox: (key, trial) → (value or error, unit).
type Observed = BTreeMap<(String, u32), (Result<f64, String>, String)>;

/// A base and a head sandbox of `repo` through prepare, then two transport trials each in the
/// order base, head, head, base (so that the machine's drift hits both alike); their
/// observations and the names of the detail files the base sent.
async fn observe(repo: &Path, base: &str, head: &str) -> ([Observed; 2], Vec<String>) {
    let cache = tempfile::tempdir().unwrap();
    let mut plan = sandbench::spec::load(&repo.join("bench.toml")).unwrap_or_else(|e| panic!("{e}"));
    plan.sandbox.registries.as_mut().unwrap().cache_dir = Some(cache.path().to_path_buf());
    let config = sandbench::station::hub_config(&plan, Duration::from_secs(30));
    let plans: Vec<AgentPlan> = [base, head]
        .iter()
        .map(|commit| {
            let mut agent_plan = plan.agent_plan(commit);
            agent_plan.transport.benches = benches();
            agent_plan
        })
        .collect();
    let seen = Arc::new(Mutex::new(([Observed::new(), Observed::new()], Vec::new())));
    let out = seen.clone();
    with_harness("benchsteps", config, |h| async move {
        let hub = h.hub().await;
        let mut sandboxes = Vec::new();
        for (side, agent_plan) in ["base", "head"].into_iter().zip(&plans) {
            let live = h.launch(h.request(side, NODE_IMAGE, sandbench::provision::AgentShipping::Bind)).await;
            sandbox::deliver_source(&*h.provisioner, &plan, &live.sandbox, agent_plan).await.unwrap();
            sandboxes.push(live);
        }
        let slots = [(0, Phase::Prepare, 0), (1, Phase::Prepare, 0), (0, Phase::Transport, 0)];
        let slots =
            slots.into_iter().chain([(1, Phase::Transport, 0), (1, Phase::Transport, 1), (0, Phase::Transport, 1)]);
        for (side, name, trial) in slots {
            let id = &sandboxes[side].sandbox.id;
            let done = sandbox::run_phase(&hub, id, &plans[side], name, trial, Duration::from_secs(900)).await.unwrap();
            if done.status != PhaseStatus::Ok {
                panic!("{name} {trial} failed: {}\n--- output ---\n{}", done.error, output_of(&hub.log_path()));
            }
        }
        for live in &sandboxes {
            h.teardown(&live.sandbox).await;
        }
        hub.close().await;
        let mut out = out.lock().unwrap();
        let ids: Vec<String> = sandboxes.iter().map(|l| l.sandbox.id.clone()).collect();
        for event in read_events(&hub.log_path()).unwrap() {
            if let StoredBody::Observation { metric, trial, value, error, unit, .. } = event.body {
                let side = ids.iter().position(|id| *id == event.sandbox).expect("a sandbox of the test");
                let outcome = value.ok_or_else(|| error.unwrap_or_default());
                out.0[side].insert((metric, trial), (outcome, unit));
            }
        }
        let details = h.run_dir.path().join("sandboxes").join(&ids[0]).join("bench");
        out.1 = std::fs::read_dir(&details)
            .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        out.1.sort();
    })
    .await;
    std::mem::take(&mut *seen.lock().unwrap())
}

/// Everything the agent printed.
fn output_of(log: &Path) -> String {
    read_events(log)
        .unwrap_or_default()
        .iter()
        .filter_map(|e| match &e.body {
            StoredBody::Log { data: sandbench::observations::store::Data::Text { text }, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// The geometric mean of `key`'s two trials, which must have been observed in `unit`.
fn value(observed: &Observed, key: &str, unit: &str) -> f64 {
    let trial = |t: u32| match observed.get(&(key.to_string(), t)) {
        Some((Ok(v), u)) if u == unit && v.is_finite() && *v > 0.0 => *v,
        other => panic!("{key} trial {t}: expected a value in {unit:?}, got {other:?}; observed {:?}", observed.keys()),
    };
    (trial(0) * trial(1)).sqrt()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_suites_become_one_metric_per_benchmark_and_a_known_change_shows_on_its_benchmarks() {
    registries_answer().await;
    let (repo, base, head) = examples_repo().await;
    let ([base, head], files) = observe(repo.path(), &base, &head).await;
    assert_eq!(
        files,
        ["mitata-0.json", "mitata-1.json", "pytest-0.json", "pytest-1.json", "tinybench-0.json", "tinybench-1.json"]
    );
    // tinybench: the median throughput, higher is better; mitata and pytest-benchmark: the
    // median time. Every benchmark of every suite is observed on both sides, in its unit.
    let suites = [
        ("bench.tinybench.", "ops/s", true),
        ("bench.pytest.tests_test_work_py_test_", "s", true),
        ("bench.mitata.work_", "s", false),
    ];
    for (prefix, unit, judged) in suites {
        let ratio = |name: &str| {
            let key = format!("{prefix}{name}");
            let (b, h) = (value(&base, &key, unit), value(&head, &key, unit));
            // As a time: head over base.
            if unit == "ops/s" { b / h } else { h / b }
        };
        let (parse, render, checksum) = (ratio("parse"), ratio("render"), ratio("checksum"));
        eprintln!("{prefix}: parse ×{parse:.2}, render ×{render:.2}, checksum ×{checksum:.2} (time, head/base)");
        // mitata times each benchmark in one window of a second or two, and on this shared
        // machine a window can be slowed twofold whole: two trials cannot show its change
        // (seen: render ×1.56 once, ×0.76 another time, where tinybench saw ×0.37 and ×0.54).
        // The verdict on it is the statistics' business, with the pairs they need.
        // Two trials a side read straight from the agent, no statistics: the changes' direction,
        // and the unchanged one within the spread such pairs show here (seen with the suite
        // running: parse ×1.39 and ×3.50, checksum ×0.70 and ×1.34, render ×0.90 for a
        // doubling). The verdicts, with the pairs they need, are the whole-run test's below.
        if judged {
            assert!(parse > 1.0, "{prefix}parse: twice as slow, got ×{parse:.2}");
            assert!(render < 1.0, "{prefix}render: twice as fast, got ×{render:.2}");
            assert!((0.5..2.0).contains(&checksum), "{prefix}checksum: unchanged, got ×{checksum:.2}");
        }
    }
    // Each step's process tree has its companions, keyed by the step.
    for step in ["tinybench", "mitata", "pytest"] {
        assert!(value(&base, &format!("bench.{step}.cpu"), "s") > 0.0);
    }
}

/// The tinybench suite of `examples/bench-node` as a spec's bench step in runtime: prepare
/// installs tinybench (`npm ci`, through the registry bridge), the installation copies the
/// suite into the benchmark user's home, and each runtime trial runs it there (about 1.6 s).
/// Five trials a side, up to twenty while a benchmark is inconclusive (the benchmarks are the
/// default gate): five alone left `render`'s doubling inconclusive in the machine's noisy
/// spells, its pairs spread ten times wider than in quiet ones, and so did ten once (log ratios'
/// sd 0.49, the doubling's interval +8.6 … +167 % against a 10 % floor); the A/A run takes all
/// twenty (it calibrates).
const RUN_SPEC: &str = r#"name = "bench-run"
[sandbox]
image = "node:24-bookworm"
network = "registries"
[source]
repository = "."
[registries]
npm = "https://registry.npmjs.org/"
[trials]
install = 1
runtime = 5
max_pairs = 20
order = "abba"
[prepare]
timeout_s = 600
commands = ["cd bench-node && npm ci --no-audit --no-fund"]
[install]
command = "cp -r /home/builder/source/bench-node ~/bench-node"
[[runtime.bench]]
name = "tinybench"
run = "node bench/tinybench.mjs"
cwd = "bench-node"
env = { BENCH_TIME_MS = "300" }
format = "tinybench"
results = "results/tinybench.json"
timeout_s = 300
"#;

/// `examples/bench-node` with [`RUN_SPEC`], tagged `base`; then `parse`'s rounds doubled and
/// `render`'s halved, tagged `head`.
fn run_repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bench-node");
    std::fs::create_dir_all(repo.path().join("bench-node")).unwrap();
    copy_tree(&example, &repo.path().join("bench-node"));
    std::fs::write(repo.path().join("bench.toml"), RUN_SPEC).unwrap();
    for args in ["init -q -b main", "add -A", "commit -q -m base", "tag base"] {
        git(repo.path(), args);
    }
    let rounds = repo.path().join("bench-node/lib/rounds.json");
    std::fs::write(&rounds, r#"{ "parse": 48, "render": 32, "checksum": 800 }"#).unwrap();
    for args in ["commit -q -am head", "tag head"] {
        git(repo.path(), args);
    }
    repo
}

/// `sandbench run` of `head` against `base`; no container of the run may be left.
async fn compare(repo: &Path, head: &str) -> Report {
    let out = tempfile::tempdir().unwrap();
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let options = RunOptions {
        run_timeout: Duration::from_secs(1200),
        ..RunOptions::new(repo.join("bench.toml"), "base", head, out.path())
    };
    let result = run(options, cancel).await.unwrap();
    let run_id = result.dir.file_name().unwrap().to_string_lossy().to_string();
    let provisioner = DockerProvisioner::connect(1).await.unwrap();
    assert!(provisioner.list(Some((labels::RUN, &run_id))).await.unwrap().is_empty(), "containers left behind");
    result.report
}

/// The three benchmarks' outcomes, after checking each is defined as tinybench gives it
/// (throughput, better higher), measured in every trial, and noted as tinybench's estimate.
fn outcomes(report: &Report) -> [Outcome; 3] {
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    ["parse", "render", "checksum"].map(|name| {
        let key = format!("bench.tinybench.{name}");
        let def = report.metrics.iter().find(|d| d.key == key).unwrap_or_else(|| panic!("no definition of {key}"));
        assert_eq!((def.unit.as_str(), def.better), ("ops/s", Better::Higher), "{key}");
        // Five pairs, or up to twenty when looks added them; every trial, both sides alike.
        let trials = |side: &Side| -> Vec<u32> {
            side.metrics[&key].iter().filter(|s| s.value.is_some()).map(|s| s.trial).collect()
        };
        let base = trials(&report.base_side);
        assert!(
            (5..=20).contains(&base.len()) && base == (0..base.len() as u32).collect::<Vec<u32>>(),
            "{key}: {base:?}"
        );
        assert_eq!(trials(&report.head_side), base, "{key}");
        let row = report.comparisons.iter().find(|c| c.key == key).unwrap_or_else(|| panic!("no row of {key}"));
        assert!(
            row.notes.iter().any(|n| n.starts_with("each trial's value is tinybench's ")),
            "{key}: {:?}",
            row.notes
        );
        eprintln!("{key}: {:?} {:?} {:?}", row.comparison.outcome, row.comparison.relative, row.paired);
        row.comparison.outcome
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_specs_bench_step_runs_whole_a_a_without_an_arrow_and_the_known_change_on_its_benchmarks() {
    registries_answer().await;
    let repo = run_repo();
    let a_a = compare(repo.path(), "base").await;
    for (name, got) in ["parse", "render", "checksum"].iter().zip(outcomes(&a_a)) {
        assert!(!matches!(got, Outcome::Regressed | Outcome::Improved), "A/A {name}: {got:?}");
    }
    let changed = compare(repo.path(), "head").await;
    let [parse, render, checksum] = outcomes(&changed);
    // Throughput halved is a regression; doubled, an improvement; the rest is not called.
    assert_eq!((parse, render), (Outcome::Regressed, Outcome::Improved));
    assert!(!matches!(checksum, Outcome::Regressed | Outcome::Improved), "checksum: {checksum:?}");
}
