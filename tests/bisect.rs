//! `sandbench bisect` end to end in Docker, by the instruction lens: a copy of the demo (less
//! work, so a lens run takes seconds) with nine commits, where commit 6 does 2 % more rounds of
//! `demo work` and commit 7 does not build. The bisection finds commit 6 within four commits
//! visited between the ends, names commit 7 as skipped, writes bisect.json and bisect.md, and
//! leaves no sandbox behind; a change made in three steps is said to be spread over them. Cut
//! short after one commit, a bisection resumed goes on from the commits it measured. `sandbench
//! run --bisect` bisects what regressed and puts the answer in its report and comment.

mod support;

use std::time::Duration;

use sandbench::bisect::{BisectOptions, BisectReport, Lens, Outcome, Reading, bisect};
use sandbench::cost::ledger::Ledger;
use sandbench::provision::{DockerProvisioner, labels};

const SPEC: &str = r##"name = "bisect"

[sandbox]
image = "node:24-bookworm"
cpus = 1
memory_gb = 2
disk_gb = 10

[source]
repository = "."

[trials]
install = 1
measure = 1
runtime = 1
failure_limit = 1

[prepare]
commands = ["mkdir -p release && npm pack --silent --pack-destination release"]
artifacts = ["release/*.tgz"]
origin_port = 18741
origin_path = "releases/v1.0.0"

[install]
command = "sh /home/builder/source/install.sh 1.0.0"
timeout_s = 120
env = { DEMO_DOWNLOAD_BASE_URL = "http://127.0.0.1:18741" }

[measure]
startup = ["demo"]
cwd = "~"
timeout_s = 30
settle_s = 0.5

[[runtime.command]]
metric = "work"
run = "demo work"
instructions = true

[[runtime.command]]
metric = "version"
run = "demo --version"

[metrics.work]
title = "Fixed CPU work"
unit = "ms"
scale = 1000
absolute = 0.005
relative = 0.2
group = "CLI"

[metrics.version]
title = "demo --version"
unit = "ms"
scale = 1000
absolute = 0.005
relative = 0.2
group = "CLI"
"##;

/// The demo with less work and the spec above, tagged `good` (and `base`).
fn demo() -> tempfile::TempDir {
    let repo = support::demo_repo(|repo| {
        std::fs::write(repo.join("bench.toml"), SPEC).unwrap();
        support::less_work(repo, 2_000_000);
    });
    support::git(repo.path(), "tag good");
    repo
}

/// Sets the demo's extra rounds of work to `pct` %.
fn rounds(repo: &std::path::Path, pct: u32) {
    let tuning = repo.join("lib/tuning.json");
    let text = std::fs::read_to_string(&tuning).unwrap();
    let at = text.find("\"work_rounds_pct\": ").unwrap() + "\"work_rounds_pct\": ".len();
    let end = at + text[at..].find(|c: char| !c.is_ascii_digit()).unwrap();
    std::fs::write(&tuning, format!("{}{pct}{}", &text[..at], &text[end..])).unwrap();
}

fn commit(repo: &std::path::Path, n: u32) {
    support::git(repo, &format!("add -A && git -c user.name=t -c user.email=t@t commit -qm 'commit {n}'"));
}

fn options(repo: &std::path::Path, out: &std::path::Path) -> BisectOptions {
    BisectOptions {
        spec: repo.join("bench.toml"),
        good: "good".into(),
        bad: "bad".into(),
        metric: "work".into(),
        lens: Lens::Instructions,
        out: out.to_path_buf(),
        agent: None,
        shipping: sandbench::provision::AgentShipping::Bind,
        max_steps: 20,
        ledger: Some(out.join("ledger.sqlite")),
        id: None,
        dead_man: sandbench::observations::server::DEFAULT_DEAD_MAN,
    }
}

async fn bisected(options: BisectOptions) -> (BisectReport, std::path::PathBuf) {
    no_sandbox_left(bisect_within(options).await.unwrap()).await
}

async fn bisect_within(options: BisectOptions) -> anyhow::Result<(BisectReport, std::path::PathBuf)> {
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let engine = sandbench::provision::Engine::default();
    let display = sandbench::display::Display::plain();
    let bisecting = bisect(&engine, options, &display, cancel);
    tokio::time::timeout(Duration::from_secs(1500), bisecting).await.unwrap()
}

async fn no_sandbox_left(result: (BisectReport, std::path::PathBuf)) -> (BisectReport, std::path::PathBuf) {
    let docker = DockerProvisioner::connect(1).await.unwrap();
    let left = sandbench::provision::Provisioner::list(&docker, Some((labels::RUN, &result.0.id))).await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    result
}

/// Commits 1 (`good`) to 9 (`bad`): 6 does 2 % more rounds, 7 breaks package.json (npm pack
/// fails in prepare), 8 mends it.
fn repo() -> tempfile::TempDir {
    let repo = demo();
    let path = repo.path();
    let package = std::fs::read_to_string(path.join("package.json")).unwrap();
    for n in 2..=9 {
        match n {
            6 => rounds(path, 2),
            7 => std::fs::write(path.join("package.json"), "{ not json").unwrap(),
            8 => std::fs::write(path.join("package.json"), &package).unwrap(),
            _ => std::fs::write(path.join(format!("notes-{n}.md")), format!("note {n}\n")).unwrap(),
        }
        commit(path, n);
    }
    support::git(path, "tag bad");
    repo
}

fn subject(report: &BisectReport, index: usize) -> &str {
    &report.commits[index].subject
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lens_finds_the_commit_that_added_two_percent_and_skips_one_that_does_not_build() {
    let _agent = support::agent();
    let repo = repo();
    let out = tempfile::tempdir().unwrap();
    // Cut short after one commit between the ends: unresolved, and bisect.json says how far.
    let (first, dir) = bisected(BisectOptions { max_steps: 1, ..options(repo.path(), out.path()) }).await;
    assert!(matches!(&first.outcome, Outcome::Unresolved { why, .. } if why.contains("step limit")), "{first:?}");
    assert_eq!(first.visits.len(), 3, "{:?}", first.visits);
    // Resumed: the commits measured are not measured again, the search goes on from them.
    let resumed = BisectOptions {
        max_steps: 20,
        ledger: Some(out.path().join("ledger.sqlite")),
        ..BisectOptions::resume(&dir).unwrap()
    };
    let (report, again) = bisected(resumed).await;
    assert_eq!((again, &report.id), (dir.clone(), &first.id));
    assert_eq!(report.visits[..3], first.visits[..], "the earlier visits are kept as they were");

    assert_eq!(report.key, "work.instructions");
    assert_eq!(report.commits.len(), 9);
    assert_eq!(subject(&report, 0), "base");
    let Outcome::FirstBad { index, share } = report.outcome.clone() else { panic!("{:?}", report.outcome) };
    assert_eq!(subject(&report, index), "commit 6", "{report:#?}");
    assert!(share > 0.95, "{share}");
    assert!(report.steps <= 4, "{} commits visited: {:?}", report.steps, report.visits);
    // The ends differ by about 2 % of the work's count (the node start counts too).
    let value = |i: usize| match report.visits.iter().find(|v| v.index == i).map(|v| &v.reading) {
        Some(Reading::Value(v)) => *v,
        other => panic!("{i}: {other:?}"),
    };
    let change = value(8) / value(0) - 1.0;
    assert!(change > 0.005 && change < 0.03, "{change}");
    // Commit 7 was visited and skipped, naming the phase that failed.
    let skipped: Vec<(&str, &str)> = report
        .visits
        .iter()
        .filter_map(|v| match &v.reading {
            Reading::Skipped(why) => Some((subject(&report, v.index), why.as_str())),
            Reading::Value(_) => None,
        })
        .collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].0, "commit 7");
    assert!(skipped[0].1.contains("prepare failed"), "{skipped:?}");
    // A commit visited twice would count twice.
    let mut indices: Vec<usize> = report.visits.iter().map(|v| v.index).collect();
    indices.sort();
    indices.dedup();
    assert_eq!(indices.len(), report.visits.len());
    assert!(report.sandbox_seconds > 0.0 && report.cost_usd > 0.0, "{report:?}");
    // The ledger holds the bisection as a run of its own: every sandbox it made, its cost.
    let ledger = Ledger::open(&out.path().join("ledger.sqlite")).unwrap();
    let (row, phases) = ledger.run(&report.id).unwrap().expect("the bisection's ledger row");
    assert_eq!((row.status.as_str(), row.sandboxes as usize), ("completed", report.visits.len()), "{row:?}");
    assert_eq!(report.sandboxes.len(), report.visits.len());
    assert!((row.allocation_usd - report.cost_usd).abs() < 1e-9, "{row:?} {}", report.cost_usd);
    assert!(phases.iter().all(|p| p.phase == "bisect" && p.seconds > 0.0), "{phases:?}");

    // Its files: the JSON round-trips, the Markdown names the commit and the skipped one.
    let json: BisectReport = serde_json::from_slice(&std::fs::read(dir.join("bisect.json")).unwrap()).unwrap();
    assert_eq!((&json.id, &json.commits, &json.visits), (&report.id, &report.commits, &report.visits));
    assert!(matches!(json.outcome, Outcome::FirstBad { index: 5, .. }), "{:?}", json.outcome);
    let markdown = std::fs::read_to_string(dir.join("bisect.md")).unwrap();
    assert!(markdown.contains("first bad commit") && markdown.contains("'commit 6'"), "{markdown}");
    assert!(markdown.contains("skipped: prepare failed"), "{markdown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_spread_over_three_commits_is_said_to_be_no_one_commit() {
    let _agent = support::agent();
    let repo = demo();
    for n in 2..=4 {
        rounds(repo.path(), n - 1);
        commit(repo.path(), n);
    }
    support::git(repo.path(), "tag bad");
    let out = tempfile::tempdir().unwrap();
    let (report, dir) = bisected(options(repo.path(), out.path())).await;
    let Outcome::Spread { from, to, share, .. } = report.outcome.clone() else { panic!("{:?}", report.outcome) };
    assert_eq!((subject(&report, from), subject(&report, to)), ("commit 2", "commit 4"), "{report:#?}");
    assert!(share > 0.2 && share < 0.5, "{share}");
    let markdown = std::fs::read_to_string(dir.join("bisect.md")).unwrap();
    assert!(markdown.contains("not one commit: the change is spread over"), "{markdown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_bisect_names_the_commit_in_its_report_comment_and_ledger() {
    let _agent = support::agent();
    let repo = repo();
    let spec = repo.path().join("bench.toml");
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(&spec, format!("{text}\n[bisect]\nmax_steps = 6\n")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let ledger = out.path().join("ledger.sqlite");
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let options = sandbench::run::RunOptions {
        run_timeout: Duration::from_secs(1200),
        ledger: Some(ledger.clone()),
        bisect: true,
        ..sandbench::run::RunOptions::new(&spec, "good", "bad", out.path())
    };
    let result = tokio::time::timeout(Duration::from_secs(1800), sandbench::run::run(options, cancel)).await.unwrap();
    let result = result.unwrap();
    let run_id = result.dir.file_name().unwrap().to_string_lossy().to_string();
    let docker = DockerProvisioner::connect(1).await.unwrap();
    let left = sandbench::provision::Provisioner::list(&docker, None).await.unwrap();
    let ours =
        |c: &&sandbench::provision::ContainerInfo| c.labels.get(labels::RUN).is_some_and(|r| r.starts_with(&run_id));
    assert!(!left.iter().any(|c| ours(&c)), "{left:?}");
    let report = &result.report;
    assert_eq!(report.status, sandbench::report::Status::Completed, "{:?}", report.errors);
    // The count regressed (its cycles are answered by the same search, not searched again);
    // whatever else regressed by wall time on one pair is bisected too.
    let keys: Vec<&str> = report.bisections.iter().map(|b| b.key.as_str()).collect();
    assert!(!keys.contains(&"work.cycles"), "{keys:?}");
    let line = report.bisections.iter().find(|b| b.key == "work.instructions");
    let line = line.unwrap_or_else(|| panic!("{:?} {:?}", report.bisections, report.warnings));
    assert_eq!(line.dir, "bisect-work.instructions");
    assert!(line.words.contains("first bad commit") && line.words.contains("'commit 6'"), "{line:?}");
    assert!(line.steps <= 4 && line.cost_usd > 0.0, "{line:?}");
    let bisection = BisectReport::load(&result.dir.join(&line.dir)).unwrap();
    assert_eq!(subject(&bisection, 0), "base");
    let visits: usize =
        report.bisections.iter().map(|b| BisectReport::load(&result.dir.join(&b.dir)).unwrap().visits.len()).sum();
    // Its sandboxes are the run's: in the report's cost and the ledger's row.
    let charged = report.sandboxes.len();
    assert_eq!(charged, 2 + visits, "{:?}", report.sandboxes);
    let ledger = Ledger::open(&ledger).unwrap();
    let (row, _) = ledger.run(&report.run_id).unwrap().expect("the run's ledger row");
    assert_eq!((row.status.as_str(), row.sandboxes as usize), ("completed", charged), "{row:?}");
    let total: f64 = report.sandboxes.iter().map(|s| s.estimated_usd).sum();
    assert!((row.allocation_usd - total).abs() < 1e-9 && bisection.cost_usd > 0.0, "{row:?}");
    // The comment carries the answer, as `publish` posts report.md.
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    let said = markdown.lines().find(|l| l.starts_with("**Bisect:** `work.instructions` regressed +"));
    let said = said.unwrap_or_else(|| panic!("{markdown}"));
    assert!(said.contains("first bad commit") && said.contains("'commit 6'"), "{said}");
}
