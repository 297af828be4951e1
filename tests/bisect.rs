//! `sandbench bisect` end to end in Docker, by the instruction lens: a copy of the demo (less
//! work, so a lens run takes seconds) with nine commits, where commit 6 does 2 % more rounds of
//! `demo work` and commit 7 does not build. The bisection finds commit 6 within four commits
//! visited between the ends, names commit 7 as skipped, writes bisect.json and bisect.md, and
//! leaves no sandbox behind; a change made in three steps is said to be spread over them.

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
        support::less_work(repo);
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
        dead_man: sandbench::observations::server::DEFAULT_DEAD_MAN,
    }
}

async fn bisected(options: BisectOptions) -> (BisectReport, std::path::PathBuf) {
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let result = tokio::time::timeout(Duration::from_secs(1500), bisect(options, cancel)).await.unwrap().unwrap();
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
    let (report, dir) = bisected(options(repo.path(), out.path())).await;

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
