//! Whole runs on the fake provisioner with the instruction lens: how many lens runs each kind of
//! run makes (an A/A calibration, a compare run with and without its profile, `[lens] runs`),
//! that the pairs an adaptive run adds never run the lens, and what the report says of it.

use std::sync::Arc;

use super::tests::{not_canceled, setup_spec, trials};
use super::{RunOptions, RunResult, run_on};
use crate::provision::Provisioner;
use crate::provision::fake::{Answer, FakeProvisioner, Script};
use crate::report::Status;
use crate::report::lens_runs::Basis;
use crate::stats::Outcome;

/// The fake product with its cold start and `work` under the lens: four planned trials, up to
/// eight pairs; `lens` is the spec's `[lens]` table's lines.
fn lens_spec(lens: &str) -> String {
    crate::provision::fake::spec_text(
        "install = 1\nmeasure = 4\nruntime = 4\nmax_pairs = 8\nfailure_limit = 2",
        &format!(
            r#"[install]
command = "sh install.sh"

[measure]
startup = ["product"]
instructions = true

[[runtime.command]]
metric = "work"
run = "product work"
instructions = true

[metrics.work]
title = "Work"
unit = "ms"
scale = 1000

[lens]
{lens}
"#
        ),
    )
}

/// Runs `opts` under `id` on a fake answering from `script`; the result and the fake's lens runs
/// (`"<role> <phase> <trial> <stem>"`).
async fn run_counting(opts: RunOptions, script: Script, id: &str) -> (RunResult, Vec<String>) {
    let fake = Arc::new(FakeProvisioner::new(script));
    let connect = {
        let fake = fake.clone();
        async move { Ok(fake as Arc<dyn Provisioner>) }
    };
    let result = run_on(opts, not_canceled(), connect, id.into()).await.unwrap();
    assert_eq!(result.status, Status::Completed, "{id}: {:?}", result.report.errors);
    (result, fake.lens_runs())
}

/// The trials the lens ran in, per role and stem: `["base cold 0", …]` sorted.
fn lens_trials(runs: &[String]) -> Vec<String> {
    let mut out: Vec<String> = runs
        .iter()
        .map(|r| {
            let words: Vec<&str> = r.split(' ').collect();
            format!("{} {} {}", words[0], words[3], words[2])
        })
        .collect();
    out.sort();
    out
}

fn every(stems: &[&str], trials: std::ops::Range<u32>) -> Vec<String> {
    let mut out = Vec::new();
    for side in ["base", "head"] {
        for stem in stems {
            out.extend(trials.clone().map(|t| format!("{side} {stem} {t}")));
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lens_calibrates_in_three_trials_then_counts_once_a_side_and_never_in_added_pairs() {
    let (dir, plan, opts) = setup_spec(1, &lens_spec(""));
    let ledger = Some(dir.path().join("ledger.sqlite"));
    let opts = RunOptions { ledger, noise_from_ledger: true, ..opts };

    // The A/A calibration: three trials a side run the lens; it grows to eight pairs, the added
    // ones without it.
    let a_a = RunOptions { head: opts.base.clone(), ..opts.clone() };
    let (first, runs) = run_counting(a_a, Script::for_plan(&plan), "20260101-000000-aa").await;
    assert_eq!(lens_trials(&runs), every(&["cold", "work"], 0..3));
    let report = &first.report;
    assert_eq!(trials(report, true, "cold"), (0..8).collect::<Vec<u32>>(), "grown to max_pairs");
    assert_eq!(trials(report, true, "cold.instructions"), [0, 1, 2]);
    assert_eq!(report.expected["work.instructions"], 3);
    assert!(report.lens_runs.iter().all(|r| r.basis == Basis::Calibration && r.runs == 3), "{:?}", report.lens_runs);
    assert_eq!(report.lens.as_ref().map(|l| l.runs), Some(12));
    // Its profile keeps the counts' spread over three pairs, for the runs after it.
    let profile = super::NoiseProfile::load(&first.dir.join("noise.json")).unwrap();
    assert_eq!(profile.metrics["work.instructions"].pairs, 3);
    assert_eq!(profile.metrics["cold.cycles"].spread, 0.0);

    // A compare run with that profile: one lens run a side decides a 2 % change of `work`.
    let script = Script::for_plan(&plan).on("head", "runtime", None, Answer::Scale(1.02));
    let (next, runs) = run_counting(opts.clone(), script, "20260101-000001-b").await;
    assert_eq!(lens_trials(&runs), every(&["cold", "work"], 0..1));
    let report = &next.report;
    assert_eq!(report.lens.as_ref().map(|l| l.runs), Some(4));
    let work = report.comparisons.iter().find(|c| c.key == "work.instructions").unwrap();
    assert_eq!(work.comparison.outcome, Outcome::Regressed, "{:?}", work.notes);
    assert_eq!(work.paired.pairs, 1);
    let said = "counted once a side: the A/A profile of run 20260101-000000-aa shows the step deterministic (3 pairs";
    assert!(work.notes.iter().any(|n| n.starts_with(said)), "{:?}", work.notes);
    let cold = report.comparisons.iter().find(|c| c.key == "cold.instructions").unwrap();
    assert_eq!(cold.comparison.outcome, Outcome::NoClearChange, "complete with one sample a side: {:?}", cold.notes);
    let markdown = std::fs::read_to_string(next.dir.join("report.md")).unwrap();
    assert!(markdown.contains("Instruction lens: 4 runs"), "{markdown}");

    // A second A/A run, the first's profile in the ledger: one run a side adds a pair to it.
    let again = RunOptions { head: opts.base.clone(), ..opts.clone() };
    let (second, runs) = run_counting(again, Script::for_plan(&plan), "20260101-000003-aa").await;
    assert_eq!(lens_trials(&runs), every(&["cold", "work"], 0..1));
    let lens = &second.report.lens_runs;
    assert!(lens.iter().all(|r| r.basis == Basis::Calibration && r.runs == 1), "{lens:?}");
    assert!(lens.iter().all(|r| r.why.contains("already shows the step deterministic")), "{lens:?}");
    let profile = super::NoiseProfile::load(&second.dir.join("noise.json")).unwrap();
    assert_eq!(profile.metrics["work.instructions"].pairs, 1);

    // Without a profile, three trials a side measure the run's own spread, and the notes say why.
    let bare = RunOptions { noise_from_ledger: false, ..opts };
    let (bare, runs) = run_counting(bare, Script::for_plan(&plan), "20260101-000002-c").await;
    assert_eq!(lens_trials(&runs), every(&["cold", "work"], 0..3));
    let work = bare.report.comparisons.iter().find(|c| c.key == "work.instructions").unwrap();
    assert!(work.notes.iter().any(|n| n.contains("no A/A profile shows the step deterministic")), "{:?}", work.notes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lens_runs_in_the_spec_overrides_the_profile_and_the_calibration() {
    let (_dir, plan, opts) = setup_spec(1, &lens_spec("runs = 2"));
    let a_a = RunOptions { head: opts.base.clone(), ..opts };
    let (result, runs) = run_counting(a_a, Script::for_plan(&plan), "20260101-000000-aa").await;
    assert_eq!(lens_trials(&runs), every(&["cold", "work"], 0..2));
    assert!(result.report.lens_runs.iter().all(|r| r.basis == Basis::Asked), "{:?}", result.report.lens_runs);
    assert_eq!(trials(&result.report, false, "work.cycles"), [0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_measures_one_revision_in_one_sandbox_counts_its_lens_steps_once_and_keeps_it_in_the_history() {
    let (dir, plan, opts) = setup_spec(1, &lens_spec(""));
    let ledger = dir.path().join("ledger.sqlite");
    let record = RunOptions {
        head: opts.base.clone(),
        ledger: Some(ledger.clone()),
        noise_from_ledger: true,
        record: true,
        ..opts
    };
    let (result, runs) = run_counting(record, Script::for_plan(&plan), "20260101-000000-rec").await;
    // One sandbox, base alone: each lens step once, the planned trials and no pair added though
    // `work` would gate an adaptive compare run.
    assert_eq!(lens_trials(&runs), ["base cold 0", "base work 0"]);
    let report = &result.report;
    assert!(report.record);
    assert_eq!(report.sandboxes.len(), 1, "{:?}", report.sandboxes);
    assert_eq!(trials(report, false, "work"), [0, 1, 2, 3]);
    assert_eq!(trials(report, false, "work.instructions"), [0]);
    assert!(report.head_side.metrics.is_empty() && report.comparisons.is_empty() && report.sequential.is_none());
    assert!(report.lens_runs.iter().all(|r| r.basis == Basis::Record && r.runs == 1), "{:?}", report.lens_runs);
    assert!(
        result.ending.iter().any(|l| l.starts_with("recorded ") && l.contains("instructions: 4 metrics, 4 values"))
    );
    // No A/A noise profile from a record, though its two revisions are the same.
    assert!(!result.dir.join("noise.json").exists());
    let kept = crate::cost::ledger::Ledger::open(&ledger).unwrap();
    let machine = crate::cost::ledger::this_machine();
    assert!(kept.noise_profiles(&plan.name, &plan.sandbox.image, &machine).unwrap().is_empty());
    // Its values in the history, as a record measured alone.
    let records = crate::history::store::Records::on(&kept).unwrap().of_spec(&plan.name).unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!((record.origin.as_str(), record.record_id.as_str()), ("record", "20260101-000000-rec/record"));
    assert!(record.setting.ends_with(", alone"), "{}", record.setting);
    let count = |key: &str| record.values.iter().filter(|v| v.metric == key).count();
    assert_eq!((count("work"), count("work.instructions"), count("cold.cycles")), (4, 1, 1));
    // Its report is the table of its values, and it is not resumed.
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    assert!(markdown.contains("— record completed") && markdown.contains("| Work (`work`) | wall | 4 |"), "{markdown}");
    let html = std::fs::read_to_string(result.dir.join("report.html")).unwrap();
    assert!(html.contains("<td>Work (<code>work</code>)</td><td>wall</td><td>4</td>"), "{html}");
    let resume = crate::run::resume::ResumeOptions {
        dir: result.dir.clone(),
        spec: None,
        base: None,
        head: None,
        agent: None,
        shipping: crate::provision::AgentShipping::Bind,
        ledger: None,
        engine_wait: std::time::Duration::from_secs(1),
        dead_man: crate::observations::server::DEFAULT_DEAD_MAN,
    };
    let refused = crate::run::resume::check(&resume).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("is a record of one revision"), "{refused}");
}
