//! The shard split, the command line, and merges of shards run on the fake provisioner (the
//! whole controller but the sandboxes, see `run/tests.rs`): what a merge keeps and what it refuses.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use sandbench_proto::Phase;
use tokio::sync::watch;

use super::Shard;
use crate::merge;
use crate::provision::Provisioner;
use crate::provision::fake::{Answer, FakeProvisioner, Script};
use crate::report::{Report, Status};
use crate::run::schedule::{self, Side};

#[test]
fn shard_values_are_read_and_bad_ones_refused_naming_the_flag() {
    assert_eq!("1/2".parse::<Shard>(), Ok(Shard { index: 1, count: 2 }));
    assert_eq!(" 3/3 ".parse::<Shard>(), Ok(Shard { index: 3, count: 3 }));
    for (bad, why) in [
        ("0/2", "from 1 to 2"),
        ("3/2", "from 1 to 2"),
        ("1/0", "from 1 to 64"),
        ("1/65", "from 1 to 64"),
        ("garbage", "expected I/N"),
        ("1/2/3", "not a number"),
        ("-1/2", "not a number"),
        ("/", "not a number"),
    ] {
        let err = bad.parse::<Shard>().unwrap_err();
        assert!(err.contains(why), "{bad}: {err}");
    }
    for command in [
        ["run", "s.toml", "--base", "a", "--head", "b"].as_slice(),
        &["ci", "s.toml", "--event", "e.json", "--event-name", "pull_request", "--no-publish"],
    ] {
        for bad in ["0/2", "3/2", "1/0", "garbage"] {
            let flag = ["--shard", bad];
            let args = ["sandbench"].iter().chain(command).chain(&flag).copied();
            let err = crate::cli::Cli::try_parse_from(args).unwrap_err();
            assert_eq!(err.exit_code(), i32::from(crate::cli::exit::USAGE), "{bad}");
            assert!(err.to_string().contains("--shard"), "{bad}: {err}");
        }
        let args = ["sandbench"].iter().chain(command).chain(&["--shard", "2/3"]).copied();
        crate::cli::Cli::try_parse_from(args).unwrap();
    }
    // A shard alone is never published: its comment would hold a part of the pairs.
    let alone = ["sandbench", "ci", "s.toml", "--event", "e.json", "--event-name", "pull_request", "--shard", "1/2"];
    let err = crate::cli::Cli::try_parse_from(alone).unwrap_err();
    assert!(err.to_string().contains("--no-publish"), "{err}");
}

#[test]
fn a_shard_read_from_a_file_is_checked_like_the_flag() {
    let shard: Shard = serde_json::from_str(r#"{"index": 2, "count": 3}"#).unwrap();
    assert_eq!(shard, Shard { index: 2, count: 3 });
    for bad in [r#"{"index": 1, "count": 0}"#, r#"{"index": 0, "count": 2}"#, r#"{"index": 1, "count": 4294967295}"#] {
        let err = serde_json::from_str::<Shard>(bad).unwrap_err().to_string();
        assert!(err.contains("from 1 to"), "{bad}: {err}");
    }
}

#[test]
fn every_split_is_balanced_disjoint_and_covering() {
    for count in 1..=9u32 {
        for pairs in 0..=41u32 {
            let shares: Vec<Vec<u32>> = (1..=count).map(|index| Shard { index, count }.trials(pairs)).collect();
            let (low, high) = (pairs / count, pairs.div_ceil(count));
            for share in &shares {
                assert!((low..=high).contains(&(share.len() as u32)), "{pairs} pairs in {count}: {shares:?}");
            }
            let mut all: Vec<u32> = shares.concat();
            all.sort_unstable();
            assert_eq!(all, (0..pairs).collect::<Vec<_>>(), "disjoint and covering: {shares:?}");
            // The owner of a trial is known from its number alone.
            for (at, share) in shares.iter().enumerate() {
                assert!(share.iter().all(|t| Shard { index: at as u32 + 1, count }.owns(*t)));
            }
        }
    }
    // Deterministic: the same split every time.
    assert_eq!(Shard { index: 2, count: 3 }.trials(8), [1, 4, 7]);
}

#[test]
fn a_shards_schedule_walks_only_its_trials_abba_split_across_its_pairs() {
    let shard = Shard { index: 2, count: 2 };
    let phases = [(Phase::Install, schedule::sharded_install_trials(1, 2, Some(shard))), (Phase::Measure, 7)];
    assert_eq!(phases[0].1, 4, "every pair of every shard installs its own sandboxes");
    let stages = schedule::build_for(&phases, 2, Some(shard));
    let order = |lane: &[schedule::Slot]| lane.iter().map(|s| (s.trial, s.side)).collect::<Vec<_>>();
    // Install trials 1 and 3 are the shard's: one for each of its pairs.
    assert_eq!(order(&stages[0].lanes[0]), [(1, Side::Base), (1, Side::Head)]);
    assert_eq!(order(&stages[0].lanes[1]), [(3, Side::Base), (3, Side::Head)]);
    // Measure trials 1, 3, 5: pair 0 takes 1 and 5 (ABBA), pair 1 takes 3.
    assert_eq!(order(&stages[1].lanes[0]), [(1, Side::Base), (1, Side::Head), (5, Side::Head), (5, Side::Base)]);
    assert_eq!(order(&stages[1].lanes[1]), [(3, Side::Base), (3, Side::Head)]);
    // Without a shard, the schedule is the unsharded one.
    assert_eq!(schedule::build_for(&phases, 2, None), schedule::build(&phases, 2));
}

/// The fake product's spec for these tests.
fn spec_toml() -> String {
    crate::provision::fake::spec_text(
        "install = 2\nmeasure = 6",
        r#"[install]
command = "sh install.sh"

[measure]
startup = ["product"]
footprint = true
"#,
    )
}

/// A spec in `dir`, and the options of shard `shard` of a run of it.
fn options(dir: &Path, shard: Shard) -> crate::run::RunOptions {
    let spec = dir.join("bench.toml");
    std::fs::write(&spec, spec_toml()).unwrap();
    crate::run::RunOptions {
        run_timeout: Duration::from_secs(120),
        ledger: Some(dir.join("ledger.sqlite")),
        shard: Some(shard),
        engine_wait: Duration::from_secs(10),
        ..crate::run::RunOptions::new(spec, "v1", "v2", dir.join("runs"))
    }
}

/// Runs shard `index` of 2 on fake sandboxes whose timings are `speed` times the script's (a
/// machine that much slower), head twice as slow to start than base; its run directory.
async fn run_shard(dir: &Path, index: u32, speed: f64) -> PathBuf {
    let opts = options(dir, Shard { index, count: 2 });
    let plan = crate::spec::load(&opts.spec).unwrap_or_else(|e| panic!("{e}"));
    let script = Script::for_plan(&plan).on("base", Phase::Measure.as_str(), None, Answer::Scale(speed)).on(
        "head",
        Phase::Measure.as_str(),
        None,
        Answer::Scale(speed * 2.0),
    );
    let fake = Arc::new(FakeProvisioner::new(script));
    let connect = async move { Ok(fake as Arc<dyn Provisioner>) };
    let cancel = watch::channel(false).1;
    let result = crate::run::run_on(opts, cancel, connect, format!("20260101-000000-shard{index}")).await.unwrap();
    assert_eq!(result.status, Status::Completed, "shard {index}: {:?}", result.report.errors);
    result.dir
}

fn read_report(dir: &Path) -> Report {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

fn trials(side: &crate::report::Side, key: &str) -> Vec<u32> {
    side.metrics.get(key).into_iter().flatten().filter(|s| s.value.is_some()).map(|s| s.trial).collect()
}

fn refusal(dirs: &[PathBuf], out: &Path) -> String {
    let err = merge::merge(dirs, Some(out), None).expect_err("the merge is refused");
    format!("{err:#}")
}

/// Both shards of a run in `tmp`, the second on a machine 3× slower, each with the same
/// `forge.json`; their directories and that target.
async fn two_shards(tmp: &Path) -> (PathBuf, PathBuf, crate::publish::Target) {
    let (one, two) = (run_shard(tmp, 1, 1.0).await, run_shard(tmp, 2, 3.0).await);
    // Each shard ran its own trials, and says so.
    let record = super::ShardRecord::load(&two).unwrap();
    assert_eq!(record.part.trials[Phase::Measure.as_str()], [1, 3, 5]);
    assert_eq!(record.part.trials[Phase::Install.as_str()], [1]);
    assert_eq!(trials(&read_report(&two).head_side, "cold"), [1, 3, 5]);
    let target = crate::publish::Target {
        forge: "github".into(),
        repository: "o/r".into(),
        pull_request: 7,
        attempt: 1,
        run_url: None,
        head: Some(record.head.commit.clone()),
        base: Some(record.base.commit.clone()),
    };
    target.save(&one).unwrap();
    target.save(&two).unwrap();
    (one, two, target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_merge_into_one_run_every_pair_once_one_ledger_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, two, target) = two_shards(tmp.path()).await;
    let ledger_path = tmp.path().join("ledger.sqlite");
    let out = tmp.path().join("merged");
    let (report, dir) = merge::merge(&[two.clone(), one.clone()], Some(&out), Some(&ledger_path)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700, "the merged run is private");
    assert_eq!(dir, out);
    assert_eq!(report.status, Status::Completed, "{:?}", report.errors);
    assert_eq!(report.shards.iter().map(|p| p.shard.index).collect::<Vec<_>>(), [1, 2]);
    for side in [&report.base_side, &report.head_side] {
        assert_eq!(trials(side, "cold"), [0, 1, 2, 3, 4, 5], "every pair exactly once");
        assert_eq!(trials(side, "install"), [0, 1]);
        assert_eq!(trials(side, "disk"), [0], "measured once, by the shard owning trial 0");
    }
    // Paired: +100 % on both machines. The unpaired spread does not see shard 2's 3× speed.
    let cold = report.comparisons.iter().find(|c| c.key == "cold").unwrap();
    assert_eq!(cold.comparison.outcome, crate::stats::Outcome::Regressed, "{cold:?}");
    let estimate = cold.paired.estimate.unwrap();
    assert!((estimate - 1.0).abs() < 1e-6, "{estimate}");
    let raw: Vec<f64> = report.base_side.metrics["cold"].iter().filter_map(|s| s.value).collect();
    let raw_spread = crate::stats::spread(&raw);
    assert!(cold.comparison.base_spread < raw_spread / 20.0, "{} vs {raw_spread}", cold.comparison.base_spread);
    // The files: reports, plan, forge.json, every shard's sandboxes and own files.
    let written = read_report(&out);
    assert_eq!(written.comparisons, report.comparisons);
    assert!(std::fs::read_to_string(out.join("report.md")).unwrap().contains("sandbench"));
    assert!(out.join("report.html").is_file() && out.join("plan.json").is_file());
    assert_eq!(crate::publish::Target::load(&out).unwrap(), Some(target.clone()));
    // `sandbench publish MERGED_DIR` takes it: the comment is the merged report's.
    let publication = crate::publish::Publication::from_run_dir(&out, &target).unwrap();
    assert!(format!("{publication:?}").contains(&report.run_id), "{publication:?}");
    for sandbox in &report.sandboxes {
        assert!(out.join("sandboxes").join(&sandbox.id).is_dir(), "{}", sandbox.id);
    }
    assert!(out.join("shards/2/shard.json").is_file() && out.join("shards/1/report.json").is_file());
    // One log; each event names its shard, and a trial's observations come from its owner.
    let mut seen = std::collections::BTreeSet::new();
    let text = std::fs::read_to_string(out.join(crate::observations::store::OBSERVATIONS_FILE)).unwrap();
    let mut observations = 0;
    for line in text.lines() {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        let shard = event["shard"].as_str().unwrap().to_string();
        assert!(event["shard_run"].as_str().unwrap().ends_with(&format!("shard{}", &shard[..1])));
        if event["kind"] == "observation" && event["metric"] == "cold" {
            let trial = event["trial"].as_u64().unwrap() as u32;
            assert_eq!(shard, format!("{}/2", trial % 2 + 1));
            assert!(seen.insert((event["sandbox"].as_str().unwrap().to_string(), trial)), "{line}");
            observations += 1;
        }
    }
    assert_eq!(observations, 12, "6 pairs of cold, both sides");
    // One ledger entry, the shards' costs summed; the shards' own entries no longer counted.
    let ledger = crate::cost::ledger::Ledger::open(&ledger_path).unwrap();
    let runs = ledger.runs(None).unwrap();
    assert_eq!(runs.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), [report.run_id.as_str()]);
    let shards_cost: f64 = [&one, &two].iter().map(|d| read_report(d).cost_figures().unwrap().0).sum();
    assert_eq!(runs[0].sandboxes, 4);
    assert!((runs[0].allocation_usd - shards_cost).abs() < 1e-9, "{} vs {shards_cost}", runs[0].allocation_usd);
    assert_eq!(ledger.merged_into("20260101-000000-shard1").unwrap(), Some(report.run_id.clone()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_refuses_shards_that_are_not_all_of_one_finished_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, two, _) = two_shards(tmp.path()).await;
    let record = super::ShardRecord::load(&two).unwrap();
    let out = tmp.path().join("merged");
    merge::merge(&[one.clone(), two.clone()], Some(&out), None).unwrap();
    // Refusals, each naming what is wrong and where.
    let elsewhere = tmp.path().join("refused");
    let err = refusal(std::slice::from_ref(&one), &elsewhere);
    assert!(err.contains("shard 2/2 is missing"), "{err}");
    let err = refusal(&[one.clone(), two.clone(), one.clone()], &elsewhere);
    assert!(err.contains("shard 1/2 is given twice"), "{err}");
    let err = refusal(&[one.clone(), two.clone()], &out);
    assert!(err.contains("--out") && err.contains("not empty"), "{err}");
    let err = refusal(&[one.clone(), out.clone()], &elsewhere);
    assert!(err.contains(&out.display().to_string()) && err.contains("not a shard's run directory"), "{err}");
    assert!(!elsewhere.exists(), "a refused merge writes nothing");

    // A shard of another head, or of another plan, or unfinished.
    let copy = |name: &str| {
        let to = tmp.path().join(name);
        std::fs::create_dir_all(&to).unwrap();
        for file in ["report.json", "plan.json", "shard.json", "forge.json"] {
            std::fs::copy(two.join(file), to.join(file)).unwrap();
        }
        to
    };
    let other_head = copy("other-head");
    let text = std::fs::read_to_string(other_head.join("shard.json")).unwrap();
    let commit = &record.head.commit;
    std::fs::write(other_head.join("shard.json"), text.replace(commit.as_str(), &"f".repeat(commit.len()))).unwrap();
    let err = refusal(&[one.clone(), other_head.clone()], &elsewhere);
    assert!(err.contains(&other_head.display().to_string()) && err.contains("head commit"), "{err}");

    let other_plan = copy("other-plan");
    let mut plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(other_plan.join("plan.json")).unwrap()).unwrap();
    plan["trials"]["measure"] = 9.into();
    std::fs::write(other_plan.join("plan.json"), plan.to_string()).unwrap();
    let err = refusal(&[one.clone(), other_plan.clone()], &elsewhere);
    assert!(err.contains(&other_plan.display().to_string()) && err.contains("\"trials\""), "{err}");

    let unfinished = copy("unfinished");
    let mut partial = read_report(&unfinished);
    (partial.status, partial.finished_at) = (Status::Running, None);
    std::fs::write(unfinished.join("report.json"), serde_json::to_vec(&partial).unwrap()).unwrap();
    let err = refusal(&[one.clone(), unfinished.clone()], &elsewhere);
    assert!(err.contains(&unfinished.display().to_string()) && err.contains("unfinished"), "{err}");

    let unpublished = copy("unpublished");
    std::fs::remove_file(unpublished.join("forge.json")).unwrap();
    let err = refusal(&[one, unpublished.clone()], &elsewhere);
    assert!(err.contains(&unpublished.display().to_string()) && err.contains("forge.json"), "{err}");
}
