//! Main's history end to end in Docker: a copy of the demo (less work, so a lens run takes
//! seconds) with 16 commits, where commit 6 does 2 % more rounds of `demo work` (its count under
//! the instruction lens) and commit 10 makes the step `pause` take 30 % longer in wall time (it
//! sleeps for as long as the product's `lib/pause.txt` says: 0.20 s, then 0.26 s — a wall-time
//! step that a loaded machine does not blur). Every 4th commit is recorded — by compare runs (0
//! against 4, then 8 against 12), which keep their base and head in the ledger's history at
//! their end. The second run's comment
//! sets its slower `pause` against main's recorded values (above the band). `sandbench history
//! --bisect` then finds both change points — the count's between commits 4 and 8, bisected over
//! the lens to commit 6; the pause's between 8 and 12 — writes history.json, .md and .html, and
//! leaves no sandbox behind. A second test records commits by `sandbench record` (one
//! revision, then a backfill of every 4th commit, run twice: the second records nothing).

mod support;

use std::path::Path;
use std::time::Duration;

use sandbench::history::series::Kind;
use sandbench::provision::{DockerProvisioner, labels};
use sandbench::record::{Fate, RecordOptions, Recorded, Revisions};
use sandbench::report::trend::Against;

const SPEC: &str = r##"name = "history"

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
runtime = 3
failure_limit = 1

# Counts are the same every run (tests/lens.rs shows it): once a side, not in each of the three
# trials that no A/A profile would otherwise leave it.
[lens]
runs = 1

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
metric = "pause"
run = "sleep $(cat ~/.local/lib/node_modules/demo-cli/lib/pause.txt)"
repeat = 5

[metrics.pause]
title = "A pause"
unit = "ms"
scale = 1000
absolute = 0.005
relative = 0.1
group = "CLI"

[metrics.work]
title = "Fixed CPU work"
unit = "ms"
scale = 1000
absolute = 0.005
relative = 0.2
group = "CLI"
"##;

/// Sets one knob of the demo's lib/tuning.json.
fn tune(repo: &Path, knob: &str, value: u64) {
    let tuning = repo.join("lib/tuning.json");
    let text = std::fs::read_to_string(&tuning).unwrap();
    let key = format!("\"{knob}\": ");
    let at = text.find(&key).unwrap() + key.len();
    let end = at + text[at..].find(|c: char| !c.is_ascii_digit()).unwrap();
    std::fs::write(&tuning, format!("{}{value}{}", &text[..at], &text[end..])).unwrap();
}

/// Commits 1 to 15 (commit 0 is the demo's `base`), each tagged `cN`: 6 does 2 % more rounds,
/// 10 pauses 30 % longer, the others add a note.
fn commits(repo: &Path) {
    for n in 1..=15 {
        match n {
            6 => tune(repo, "work_rounds_pct", 2),
            10 => std::fs::write(repo.join("lib/pause.txt"), "0.26\n").unwrap(),
            _ => std::fs::write(repo.join(format!("notes-{n}.md")), format!("note {n}\n")).unwrap(),
        }
        support::git(repo, &format!("add -A && git -c user.name=t -c user.email=t@t commit -qm 'commit {n}'"));
        support::git(repo, &format!("tag c{n}"));
    }
}

async fn compare(spec: &Path, base: &str, head: &str, out: &Path, ledger: &Path) -> sandbench::run::RunResult {
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let options = sandbench::run::RunOptions {
        run_timeout: Duration::from_secs(1200),
        ledger: Some(ledger.to_path_buf()),
        ..sandbench::run::RunOptions::new(spec, base, head, out)
    };
    let result = tokio::time::timeout(Duration::from_secs(1500), sandbench::run::run(options, cancel)).await.unwrap();
    let result = result.unwrap();
    assert_eq!(result.status, sandbench::report::Status::Completed, "{:?}", result.report.errors);
    result
}

/// The median of a side's trial values of `key`.
fn median(side: &sandbench::report::Side, key: &str) -> f64 {
    let values: Vec<f64> = sandbench::report::runs::trial_values(&side.metrics[key]).into_iter().map(|v| v.1).collect();
    sandbench::stats::median(&values).unwrap()
}

/// The repository of the 16 commits (tagged `c0` to `c15`), the spec at its top, and a folder
/// for the runs and the ledger; the static agent checked first.
fn history_repo() -> (tempfile::TempDir, tempfile::TempDir) {
    let _agent = support::agent();
    let repo = support::demo_repo(|repo| {
        std::fs::write(repo.join("bench.toml"), SPEC).unwrap();
        std::fs::write(repo.join("lib/pause.txt"), "0.20\n").unwrap();
        support::less_work(repo, 2_000_000);
    });
    support::git(repo.path(), "tag c0");
    commits(repo.path());
    (repo, tempfile::tempdir().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fourth_commit_recorded_both_change_points_are_found_and_the_count_bisected_to_its_commit() {
    let (repo, out) = history_repo();
    let path = repo.path();
    let spec = path.join("bench.toml");
    let ledger = out.path().join("ledger.sqlite");

    // Commits 0 and 4 recorded.
    let first = compare(&spec, "c0", "c4", out.path(), &ledger).await;
    assert!(first.report.trend.is_empty(), "nothing recorded before: {:?}", first.report.trend);

    // Commits 8 and 12: the head's longer pause stands above main's band (commits 0 and 4).
    let second = compare(&spec, "c8", "c12", out.path(), &ledger).await;
    let pause = median(&second.report.head_side, "pause") / median(&second.report.base_side, "pause") - 1.0;
    assert!(pause > 0.2 && pause < 0.45, "the pause is about 30 % longer: {pause}");
    let standing = second.report.trend.iter().find(|s| s.key == "pause");
    let verdicts: Vec<(&str, sandbench::stats::Outcome)> =
        second.report.comparisons.iter().map(|c| (c.key.as_str(), c.outcome())).collect();
    let standing =
        standing.unwrap_or_else(|| panic!("pause against main's history: {:?} {verdicts:?}", second.report.trend));
    assert_eq!(standing.commits, 2, "{standing:?}");
    let Against::Band { high, head, .. } = standing.against else { panic!("{standing:?}") };
    assert!(head > high, "{standing:?}");
    let comment = std::fs::read_to_string(second.dir.join("report.md")).unwrap();
    assert!(comment.contains("**Against main's history:**\n\n") && comment.contains("- `pause`: head"), "{comment}");
    assert!(comment.contains("is above main's band"), "{comment}");

    // The history along main (commit 15), bisecting the count's change point.
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let options = sandbench::history::command::HistoryOptions {
        spec: spec.clone(),
        out: Some(out.path().join("history")),
        rev: Some("c15".into()),
        bisect: true,
        budget_usd: None,
        ledger: ledger.clone(),
        agent: None,
        dead_man: sandbench::observations::server::DEFAULT_DEAD_MAN,
    };
    let history = sandbench::history::command::history(options, cancel);
    let written = tokio::time::timeout(Duration::from_secs(1500), history).await.unwrap().unwrap();
    let h = &written.history;
    let subjects: Vec<&str> = h.commits.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!(subjects, ["base", "commit 4", "commit 8", "commit 12"], "every 4th commit, in line order");
    assert!(h.warnings.is_empty(), "{:?}", h.warnings);

    // The count: one change point, between commits 4 and 8 (three not recorded), +2 % or so,
    // bisected to commit 6; its cycles step there too and are not bisected again.
    let count = h.metrics.iter().find(|m| m.key == "work.instructions").expect("the count's series");
    assert_eq!((count.kind, count.machine.as_deref()), (Kind::Count, None));
    assert_eq!(count.change_points.len(), 1, "{:?}", count.change_points);
    let step = &count.change_points[0];
    assert_eq!((subjects[step.before_at], subjects[step.after_at], step.unrecorded), ("commit 4", "commit 8", Some(3)));
    assert!(step.size > 0.005 && step.size < 0.03, "{step:?}");
    let bisection = step.bisection.as_ref().unwrap_or_else(|| panic!("not bisected: {step:?}"));
    let first_bad = bisection.first_bad.as_ref().unwrap_or_else(|| panic!("{bisection:?}"));
    assert_eq!(first_bad.subject, "commit 6", "{bisection:?}");
    assert!(written.dir.join(&bisection.dir).join("bisect.json").exists());
    let cycles = h.metrics.iter().find(|m| m.key == "work.cycles").expect("the cycles' series");
    assert!(cycles.change_points.iter().all(|c| c.bisection.is_none()), "{:?}", cycles.change_points);

    // The pause: a change point between commits 8 and 12 of about +30 %, on this machine.
    let start = h.metrics.iter().find(|m| m.key == "pause").expect("the pause's series");
    assert_eq!(start.kind, Kind::Measured);
    assert!(start.machine.is_some() && start.segments.len() == start.change_points.len() + 1, "{start:?}");
    let step = start.change_points.iter().find(|c| subjects[c.after_at] == "commit 12");
    let step = step.unwrap_or_else(|| panic!("no change point at commit 12: {:?}", start.change_points));
    assert_eq!(subjects[step.before_at], "commit 8");
    assert!(step.size > 0.2 && step.size < 0.45, "{step:?}");
    assert_eq!(start.change_points.len(), 1, "{:?}", start.change_points);
    assert!(step.p_value.is_some_and(|p| p <= h.alpha), "{step:?}");

    // Its files, and the bisection in the ledger as an entry of its own.
    let markdown = std::fs::read_to_string(written.dir.join("history.md")).unwrap();
    // Titles are escaped for Markdown: "Fixed CPU work \(instructions\)".
    assert!(markdown.contains("(`work.instructions`) | instructions | +"), "{markdown}");
    assert!(markdown.contains("commit 6 (bisected"), "{markdown}");
    assert!(markdown.contains("| A pause (`pause`) | wall | +"), "{markdown}");
    let json: sandbench::history::analysis::History =
        serde_json::from_slice(&std::fs::read(written.dir.join("history.json")).unwrap()).unwrap();
    assert_eq!(&json, h);
    let html = std::fs::read_to_string(written.dir.join("history.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), h.metrics.len());
    let ledger = sandbench::cost::ledger::Ledger::open(&ledger).unwrap();
    let runs = ledger.runs(None).unwrap();
    let entry = runs.iter().find(|r| r.run_id.starts_with("history-")).expect("the bisections' ledger entry");
    assert!(entry.status == "completed" && entry.sandboxes >= 3 && entry.allocation_usd > 0.0, "{entry:?}");

    // Read again, the finished bisection is not run again.
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let again = sandbench::history::command::HistoryOptions {
        spec: spec.clone(),
        out: Some(out.path().join("history")),
        rev: Some("c15".into()),
        bisect: true,
        budget_usd: None,
        ledger: out.path().join("ledger.sqlite"),
        agent: None,
        dead_man: sandbench::observations::server::DEFAULT_DEAD_MAN,
    };
    let again = sandbench::history::command::history(again, cancel).await.unwrap();
    let count = again.history.metrics.iter().find(|m| m.key == "work.instructions").unwrap();
    assert_eq!(count.change_points[0].bisection.as_ref(), Some(bisection));
    assert_eq!(ledger.runs(None).unwrap().len(), runs.len(), "no new ledger entry: nothing ran");

    let docker = DockerProvisioner::connect(1).await.unwrap();
    let left = docker.list(None).await.unwrap();
    let ours = |c: &&sandbench::provision::ContainerInfo| {
        let run = c.labels.get(labels::RUN).map(String::as_str).unwrap_or_default();
        run.starts_with("history-") || run == first.report.run_id || run == second.report.run_id
    };
    assert!(!left.iter().any(|c| ours(&c)), "{left:?}");
}

async fn record(spec: &Path, revisions: Revisions, out: &Path, ledger: &Path) -> Recorded {
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let options = RecordOptions {
        spec: spec.to_path_buf(),
        revisions,
        out: out.to_path_buf(),
        ledger: ledger.to_path_buf(),
        budget_usd: None,
        agent: None,
        dead_man: sandbench::observations::server::DEFAULT_DEAD_MAN,
        run_timeout: Duration::from_secs(900),
    };
    let mut heard = Vec::new();
    let mut hear = |line: &str| heard.push(line.to_string());
    let engine = sandbench::provision::Engine::default();
    let recorded = sandbench::record::record(&engine, options, cancel, &mut hear);
    let recorded = tokio::time::timeout(Duration::from_secs(1500), recorded).await.unwrap().unwrap();
    assert!(!heard.is_empty(), "progress is told");
    recorded
}

/// `sandbench record`: commit 4 by `--rev`, then `--backfill c4..c12 --every 4` (commits 8 and
/// 12), each in one sandbox with its lens step once; the history finds the count's step between
/// commits 4 and 8 in them, and their wall time is a series of its own setting (measured
/// alone). The same backfill again records nothing: it goes on where it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_one_revision_and_a_backfill_keep_every_nth_commit_once() {
    let (repo, out) = history_repo();
    let path = repo.path();
    let spec = path.join("bench.toml");
    let ledger = out.path().join("ledger.sqlite");

    let one = record(&spec, Revisions::One("c4".into()), out.path(), &ledger).await;
    let [(rev, Fate::Recorded { dir, status })] = one.commits.as_slice() else { panic!("{one:?}") };
    assert_eq!((rev.as_str(), *status), ("c4", sandbench::report::Status::Completed), "{one:?}");
    let report = sandbench::run::rerender(dir).unwrap();
    assert!(report.record && report.sandboxes.len() == 1, "{:?}", report.sandboxes);
    assert_eq!(report.lens.as_ref().map(|l| l.runs), Some(1), "work counted once");

    let backfill = Revisions::backfill("c4..c12", 4).unwrap();
    let filled = record(&spec, backfill.clone(), out.path(), &ledger).await;
    assert!(filled.complete(), "{filled:?}");
    let picked: Vec<&str> = filled.commits.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(picked.len(), 2, "{filled:?}");
    let kept = sandbench::cost::ledger::Ledger::open(&ledger).unwrap();
    let records = sandbench::history::store::Records::on(&kept).unwrap().of_spec("history").unwrap();
    let subjects: Vec<&str> = records.iter().map(|r| r.commit.subject.as_str()).collect();
    assert_eq!(subjects, ["commit 4", "commit 8", "commit 12"], "oldest first, with their subjects");
    assert!(records.iter().all(|r| r.origin == "record" && r.setting.ends_with(", alone")), "{records:?}");
    let runs = kept.runs(None).unwrap().len();

    // Again: every commit is there already; no sandbox, no ledger entry.
    let again = record(&spec, backfill, out.path(), &ledger).await;
    assert!(again.commits.iter().all(|(_, f)| *f == Fate::Already) && again.complete(), "{again:?}");
    assert_eq!(kept.runs(None).unwrap().len(), runs);

    // The history: the count steps between commits 4 and 8; the pause is a series measured alone.
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let options = sandbench::history::command::HistoryOptions {
        spec: spec.clone(),
        out: Some(out.path().join("history")),
        rev: Some("c15".into()),
        bisect: false,
        budget_usd: None,
        ledger: ledger.clone(),
        agent: None,
        dead_man: sandbench::observations::server::DEFAULT_DEAD_MAN,
    };
    let written = sandbench::history::command::history(options, cancel).await.unwrap();
    let h = &written.history;
    let count = h.metrics.iter().find(|m| m.key == "work.instructions").expect("the count's series");
    assert_eq!(count.change_points.len(), 1, "{:?}", count.change_points);
    let step = &count.change_points[0];
    let subjects: Vec<&str> = h.commits.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!((subjects[step.before_at], subjects[step.after_at], step.unrecorded), ("commit 4", "commit 8", Some(3)));
    let pause = h.metrics.iter().find(|m| m.key == "pause").expect("the pause's series");
    assert!(pause.setting.as_deref().is_some_and(|s| s.ends_with("alone")), "{pause:?}");

    let ids: Vec<String> = one
        .commits
        .iter()
        .chain(&filled.commits)
        .filter_map(|(_, fate)| match fate {
            Fate::Recorded { dir, .. } => Some(dir.file_name().unwrap().to_string_lossy().to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 3);
    let docker = DockerProvisioner::connect(1).await.unwrap();
    let left = docker.list(None).await.unwrap();
    let ours: Vec<_> = left.iter().filter(|c| c.labels.get(labels::RUN).is_some_and(|r| ids.contains(r))).collect();
    assert!(ours.is_empty(), "{ours:?}");
}
