//! `sandbench record SPEC --rev REV` and `--backfill A..B [--every N]`: main's history measured
//! commit by commit, without a pull request to compare.
//!
//! A record is a run of one revision in one sandbox ([`RunOptions::record`]): the spec's phases
//! and trials, each lens step once, no pairs added. Its values go into the ledger's history as a
//! compare run's base and head do (origin `record`), with the commit's time and subject, the
//! image, the machine and the setting (`… alone`: wall time taken with no second sandbox beside
//! it is a series of its own). The run directory holds its log and a `report.md` of the values.
//!
//! A backfill records the first-parent commits after A up to B, every Nth counted back from B
//! (so B is always one), oldest first. Commits this spec already has a record of, on this image
//! and machine, are not recorded again, so a backfill cut short (Ctrl-C, the budget, a dead
//! machine) goes on where it stopped when run again. A commit that fails to build or run is
//! named and the backfill goes on. With a budget, no record starts once the next one, costed as
//! the last one was, would pass it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::watch;

use crate::cost::ledger::{Ledger, this_machine};
use crate::history::compare::ORIGIN_RECORD;
use crate::history::store::Records;
use crate::report::Status;
use crate::run::{RunOptions, RunResult};
use crate::spec::SourceSettings;

/// The first-parent line is read this far back at most.
const LINE_LIMIT: usize = 100_000;

/// What to record.
#[derive(Debug, Clone, PartialEq)]
pub enum Revisions {
    /// One revision.
    One(String),
    /// First-parent commits after `from` up to `to`, every `every`th counted back from `to`.
    Backfill { from: String, to: String, every: u32 },
}

impl Revisions {
    /// `A..B` of `--backfill`, every `every`th commit.
    pub fn backfill(range: &str, every: u32) -> anyhow::Result<Revisions> {
        let parts = range.split_once("..").filter(|(a, b)| !a.is_empty() && !b.is_empty() && !b.starts_with('.'));
        let Some((from, to)) = parts else {
            bail!("--backfill takes a range A..B (the commits after A up to B), got {range:?}");
        };
        if every == 0 {
            bail!("--every must be at least 1, got 0");
        }
        Ok(Revisions::Backfill { from: from.to_string(), to: to.to_string(), every })
    }
}

#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub spec: PathBuf,
    pub revisions: Revisions,
    /// Where the records' run directories go.
    pub out: PathBuf,
    pub ledger: PathBuf,
    /// USD the records may spend together (None: the spec's budget applies to each).
    pub budget_usd: Option<f64>,
    pub agent: Option<PathBuf>,
    pub dead_man: Duration,
    /// How long one record may take.
    pub run_timeout: Duration,
}

/// What happened to one commit.
#[derive(Debug, Clone, PartialEq)]
pub enum Fate {
    /// Recorded: its run directory and how the run ended (completed or partial).
    Recorded { dir: PathBuf, status: Status },
    /// The ledger had its record already.
    Already,
    /// Its run failed (or was canceled): the run directory and why.
    Failed { dir: PathBuf, status: Status, why: String },
}

/// What a record command did, commit by commit, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    pub commits: Vec<(String, Fate)>,
    /// Commits picked but not reached, and why (the budget, a cancel).
    pub not_reached: Vec<String>,
    pub stopped: Option<String>,
    /// USD the records spent.
    pub spent_usd: f64,
}

impl Recorded {
    /// Every commit asked for is recorded (now or before).
    pub fn complete(&self) -> bool {
        self.not_reached.is_empty()
            && self.commits.iter().all(|(_, fate)| match fate {
                Fate::Recorded { status, .. } => *status == Status::Completed,
                Fate::Already => true,
                Fate::Failed { .. } => false,
            })
    }

    pub fn canceled(&self) -> bool {
        self.commits.iter().any(|(_, f)| matches!(f, Fate::Failed { status: Status::Canceled, .. }))
    }
}

/// The commits of a backfill: of `after` (the first-parent commits after A, oldest first),
/// every `every`th counted back from the newest, oldest first.
pub fn pick(after: &[String], every: u32) -> Vec<String> {
    let every = every.max(1) as usize;
    let n = after.len();
    after.iter().enumerate().filter(|(i, _)| (n - 1 - i).is_multiple_of(every)).map(|(_, c)| c.clone()).collect()
}

/// Records what `opts` asks for, one run after the other; `progress` hears each commit as it
/// starts and ends.
pub async fn record(
    engine: &crate::provision::Engine,
    opts: RecordOptions,
    cancel: watch::Receiver<bool>,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Recorded> {
    let plan = crate::spec::load(&opts.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(b) = opts.budget_usd {
        crate::run::check::budget(b).map_err(anyhow::Error::msg)?;
    }
    let commits = match &opts.revisions {
        Revisions::One(rev) => vec![rev.clone()],
        Revisions::Backfill { from, to, every } => {
            let SourceSettings::Local { repository } = &plan.source else {
                bail!(
                    "{}: --backfill reads the commits of a local repository ([source] repository); this spec has none",
                    opts.spec.display()
                );
            };
            let picked = backfill_commits(repository, from, to, *every).await?;
            let ledger = Ledger::open(&opts.ledger)?;
            let done = recorded_commits(&ledger, &plan.name, &plan.sandbox.image)?;
            progress(&format!(
                "backfill {from}..{to}: {} first-parent commits picked (every {every}), {} recorded before",
                picked.len(),
                picked.iter().filter(|c| done.contains(c)).count()
            ));
            picked
        }
    };
    let backfill = matches!(opts.revisions, Revisions::Backfill { .. });
    let mut out = Recorded::default();
    let mut last_cost: Option<f64> = None;
    for (at, rev) in commits.iter().enumerate() {
        if backfill {
            let ledger = Ledger::open(&opts.ledger)?;
            if recorded_commits(&ledger, &plan.name, &plan.sandbox.image)?.contains(rev) {
                out.commits.push((rev.clone(), Fate::Already));
                continue;
            }
        }
        let remaining = opts.budget_usd.map(|b| b - out.spent_usd);
        if let Some(why) = stop_before(*cancel.borrow(), opts.budget_usd, out.spent_usd, last_cost) {
            out.not_reached = commits[at..].to_vec();
            out.stopped = Some(why);
            break;
        }
        progress(&format!("record {} of {}: {}", at + 1, commits.len(), crate::sanitize::terminal(rev)));
        let run = crate::run::run_in(engine, run_options(&opts, rev, remaining), cancel.clone()).await;
        let result = run.with_context(|| format!("recording {rev}"));
        let result = match (result, backfill) {
            (Ok(result), _) => result,
            // A backfill names a commit it could not start and goes on.
            (Err(err), true) => {
                let why = format!("{err:#}");
                progress(&format!("{}: not recorded: {why}", crate::sanitize::terminal(rev)));
                let fate = Fate::Failed { dir: opts.out.clone(), status: Status::Failed, why };
                out.commits.push((rev.clone(), fate));
                continue;
            }
            (Err(err), false) => return Err(err),
        };
        let cost = result.report.total_cost_usd().unwrap_or(0.0);
        out.spent_usd += cost;
        last_cost = Some(cost);
        let fate = fate_of(&result);
        let canceled = result.status == Status::Canceled;
        out.commits.push((rev.clone(), fate));
        if canceled {
            out.not_reached = commits[at + 1..].to_vec();
            out.stopped = Some("canceled".to_string());
            break;
        }
    }
    Ok(out)
}

/// Why no further record starts: a cancel, or a budget that the next record, costed as the last
/// one (`last_cost`), would pass after `spent`. The first record always starts (its own run is
/// halted at the budget).
fn stop_before(canceled: bool, budget: Option<f64>, spent: f64, last_cost: Option<f64>) -> Option<String> {
    if canceled {
        return Some("canceled".to_string());
    }
    match (budget, last_cost) {
        (Some(budget), Some(cost)) if spent + cost > budget => Some(format!(
            "the budget: {} USD of {} spent, and a record costs about {}",
            usd(spent),
            usd(budget),
            usd(cost)
        )),
        _ => None,
    }
}

/// A record's run options: `rev` on both sides, measured as base alone.
fn run_options(opts: &RecordOptions, rev: &str, budget: Option<f64>) -> RunOptions {
    RunOptions {
        record: true,
        ledger: Some(opts.ledger.clone()),
        budget_usd: budget,
        agent: opts.agent.clone(),
        dead_man: opts.dead_man,
        run_timeout: opts.run_timeout,
        ..RunOptions::new(&opts.spec, rev, rev, &opts.out)
    }
}

fn fate_of(result: &RunResult) -> Fate {
    match result.status {
        Status::Completed | Status::Partial => Fate::Recorded { dir: result.dir.clone(), status: result.status },
        status => {
            let why = result.report.errors.first().cloned().unwrap_or_else(|| status.as_str().to_string());
            Fate::Failed { dir: result.dir.clone(), status, why }
        }
    }
}

/// The commits a backfill of `from..to` records, oldest first.
async fn backfill_commits(repo: &Path, from: &str, to: &str, every: u32) -> anyhow::Result<Vec<String>> {
    let from_commit = crate::source::resolve(repo, from).await.context("--backfill: its start")?;
    let to_commit = crate::source::resolve(repo, to).await.context("--backfill: its end")?;
    let line = crate::source::first_parent_line(repo, &to_commit, LINE_LIMIT).await?;
    let Some(at) = line.iter().position(|c| *c == from_commit) else {
        bail!(
            "--backfill {from}..{to}: {from} ({}) is not on the first-parent line of {to}",
            crate::sanitize::prefix(&from_commit, 8)
        );
    };
    Ok(pick(&line[at + 1..], every))
}

/// The commits of `spec` a record on this machine and `image` holds.
fn recorded_commits(ledger: &Ledger, spec: &str, image: &str) -> anyhow::Result<Vec<String>> {
    let machine = this_machine();
    let records = Records::on(ledger)?.of_spec(spec)?;
    Ok(records
        .into_iter()
        .filter(|r| r.origin == ORIGIN_RECORD && r.image == image && r.machine == machine)
        .map(|r| r.commit.commit)
        .collect())
}

fn usd(v: f64) -> String {
    format!("{v:.4}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commits(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("c{i}")).collect()
    }

    #[test]
    fn a_backfill_picks_every_nth_commit_counted_back_from_its_end() {
        assert_eq!(pick(&commits(8), 4), ["c4", "c8"]);
        assert_eq!(pick(&commits(9), 4), ["c1", "c5", "c9"]);
        assert_eq!(pick(&commits(3), 1), ["c1", "c2", "c3"]);
        assert_eq!(pick(&commits(3), 10), ["c3"]);
        assert!(pick(&[], 2).is_empty());
    }

    #[test]
    fn no_record_starts_that_the_budget_would_not_cover_nor_after_a_cancel() {
        assert_eq!(stop_before(false, Some(0.01), 0.0, None), None, "the first always starts");
        assert_eq!(stop_before(false, Some(0.01), 0.004, Some(0.004)), None);
        let why = stop_before(false, Some(0.01), 0.008, Some(0.004)).unwrap();
        assert_eq!(why, "the budget: 0.0080 USD of 0.0100 spent, and a record costs about 0.0040");
        assert_eq!(stop_before(false, None, 5.0, Some(5.0)), None, "no budget");
        assert_eq!(stop_before(true, None, 0.0, None).as_deref(), Some("canceled"));
    }

    #[test]
    fn a_backfill_range_is_two_revisions_and_every_is_at_least_one() {
        assert_eq!(
            Revisions::backfill("v1.0..main", 3).unwrap(),
            Revisions::Backfill { from: "v1.0".into(), to: "main".into(), every: 3 }
        );
        for bad in ["main", "..main", "v1..", "v1...main"] {
            let err = Revisions::backfill(bad, 1).unwrap_err().to_string();
            assert!(err.contains("A..B") && err.contains(bad), "{err}");
        }
        assert!(Revisions::backfill("a..b", 0).unwrap_err().to_string().contains("--every"));
    }
}
