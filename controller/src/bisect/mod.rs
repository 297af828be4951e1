//! `sandbench bisect`: which commit between a good and a bad revision changed a metric. A binary
//! search over the first-parent commits ([`search`]), one fresh sandbox per commit it visits:
//! prepare, install, then only the step that records the metric. Under the instruction lens a
//! count is the same on every run, so one run per commit decides; wall time takes the phase's
//! trials in that sandbox and compares medians. Commits that fail to build, install or run are
//! skipped and named, as `git bisect skip` does. The answer goes into `bisect.json` and
//! `bisect.md` in the bisection's directory, and its sandboxes into the cost ledger as a run of
//! its own (`bisect-<time>`, good as base and bad as head).

pub mod search;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use sandbench_proto::plan::{AgentPlan, Runtime, phase};
use sandbench_proto::v1::PhaseStatus;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::cost::SandboxRecord;
use crate::cost::ledger::{Ledger, RunStart};
use crate::observations::store::{StoredBody, read_events};
use crate::provision::{AgentShipping, DockerProvisioner, Provisioner};
use crate::report::{Revision, Status};
use crate::spec::{Plan, SourceSettings};
use crate::station::{Station, StationOptions};
pub use search::{Outcome, Reading, Search};

/// Counts that differ by no more than this (relative) are the same count.
const COUNT_TOLERANCE: f64 = 0.0005;
/// Medians of wall time that differ by no more than this (relative) are no change.
const WALL_TOLERANCE: f64 = 0.01;
/// The longest one phase of one commit may take.
const PHASE_TIMEOUT: Duration = Duration::from_secs(3600);

/// What a bisection reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Lens {
    /// The instruction lens's count (`KEY.instructions` unless KEY names `.cycles`): one run a commit.
    Instructions,
    /// Wall time: the phase's trials in the commit's sandbox, their median.
    Wall,
}

#[derive(Debug, Clone)]
pub struct BisectOptions {
    pub spec: PathBuf,
    pub good: String,
    pub bad: String,
    pub metric: String,
    pub lens: Lens,
    pub out: PathBuf,
    pub agent: Option<PathBuf>,
    pub shipping: AgentShipping,
    /// Commits visited between the ends at most.
    pub max_steps: u32,
    /// The cost ledger to record the bisection in (None: no ledger).
    pub ledger: Option<PathBuf>,
    /// How long the agents and the controller carry on without word from each other.
    pub dead_man: Duration,
}

/// A commit of the range, good first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Commit {
    pub commit: String,
    /// Its subject line (the product's text).
    pub subject: String,
}

/// One commit measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Visit {
    /// Its place in `commits`.
    pub index: usize,
    pub reading: Reading,
    /// Sandbox seconds it took, from create to removal.
    pub seconds: f64,
}

/// `bisect.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BisectReport {
    pub id: String,
    pub spec: String,
    /// The metric read at every commit (`work.instructions`, `cold`, …).
    pub key: String,
    pub lens: Lens,
    pub good: Revision,
    pub bad: Revision,
    /// The first-parent commits from good to bad, both included.
    pub commits: Vec<Commit>,
    /// In the order visited (the two ends first).
    pub visits: Vec<Visit>,
    pub outcome: Outcome,
    /// Commits visited between the ends.
    pub steps: usize,
    pub sandbox_seconds: f64,
    /// At the spec's rate card.
    pub cost_usd: f64,
    /// Every sandbox the bisection made, as the ledger holds them.
    #[serde(default)]
    pub sandboxes: Vec<SandboxRecord>,
}

/// Runs the bisection and writes its answer; Err only before its directory exists, or when an
/// end cannot be measured.
pub async fn bisect(opts: BisectOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<(BisectReport, PathBuf)> {
    let plan = crate::spec::load(&opts.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    let target = Target::of(&plan, &opts.metric, opts.lens)?;
    let SourceSettings::Local { repository } = &plan.source else {
        bail!("bisect needs the spec's source to be a local repository ([source] repository)");
    };
    let good = Revision { rev: opts.good.clone(), commit: crate::source::resolve(repository, &opts.good).await? };
    let bad = Revision { rev: opts.bad.clone(), commit: crate::source::resolve(repository, &opts.bad).await? };
    let commits = crate::source::first_parents(repository, &good.commit, &bad.commit).await?;
    let started = SystemTime::now();
    let id = format!("bisect-{}", crate::report::stamp(started));
    let provisioner: Arc<dyn Provisioner> = Arc::new(DockerProvisioner::connect(2).await?);
    let options = StationOptions {
        dir: opts.out.join(&id),
        run_id: id.clone(),
        image: Some(plan.sandbox.image.clone()),
        valgrind: opts.lens == Lens::Instructions,
        agent: opts.agent.clone(),
        hub: crate::station::hub_config(&plan, opts.dead_man),
    };
    let station = Station::open(provisioner, options, &mut |line| eprintln!("{line}")).await?;
    // The ledger entry is made before the first sandbox, so a bisection killed from here on shows
    // as unfinished.
    let ledger = match &opts.ledger {
        Some(path) => {
            let ledger = Ledger::open(path)?;
            ledger.begin_run(&RunStart {
                run_id: id.clone(),
                spec: plan.name.clone(),
                repository: repository.display().to_string(),
                base_rev: good.rev.clone(),
                base_commit: good.commit.clone(),
                head_rev: bad.rev.clone(),
                head_commit: bad.commit.clone(),
                started_at: crate::report::timestamp(started),
                run_dir: station.dir().display().to_string(),
            })?;
            Some(ledger)
        }
        None => None,
    };
    eprintln!(
        "bisect {id}: {} over {} commits, {} ({}) good, {} ({}) bad",
        target.key,
        commits.len(),
        crate::sanitize::terminal(&good.rev),
        crate::sanitize::prefix(&good.commit, 8),
        crate::sanitize::terminal(&bad.rev),
        crate::sanitize::prefix(&bad.commit, 8),
    );
    let probe = Probe {
        station: &station,
        plan: &plan,
        target: &target,
        shipping: opts.shipping,
        cancel: cancel.clone(),
        records: Mutex::default(),
    };
    let walked = walk(&probe, &commits, opts.max_steps).await;
    for warning in station.close().await {
        eprintln!("warning: {warning}");
    }
    let sandboxes = probe.records.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(mut ledger) = ledger {
        let status = match (&walked, *cancel.borrow()) {
            (Ok(_), _) => Status::Completed,
            (Err(_), true) => Status::Canceled,
            (Err(_), false) => Status::Failed,
        };
        let finished = crate::report::timestamp(SystemTime::now());
        if let Err(err) = ledger.finish_run(&id, status.as_str(), &finished, &sandboxes) {
            eprintln!("warning: cannot record the bisection in the ledger {}: {err:#}", ledger.path().display());
        }
    }
    let (visits, outcome) = walked?;
    let sandbox_seconds: f64 = visits.iter().map(|v| v.seconds).sum();
    let report = BisectReport {
        id,
        spec: plan.name.clone(),
        key: target.key.clone(),
        lens: opts.lens,
        good,
        bad,
        steps: visits.len().saturating_sub(2),
        commits,
        visits,
        outcome,
        sandbox_seconds,
        cost_usd: sandboxes.iter().map(|s| s.estimated_usd).sum(),
        sandboxes,
    };
    let dir = station.dir().to_path_buf();
    std::fs::write(dir.join("bisect.json"), serde_json::to_vec_pretty(&report)?)?;
    std::fs::write(dir.join("bisect.md"), markdown(&report))?;
    Ok((report, dir))
}

/// Measures both ends, then whatever the search asks for, up to `max_steps` commits between.
async fn walk(probe: &Probe<'_>, commits: &[Commit], max_steps: u32) -> anyhow::Result<(Vec<Visit>, Outcome)> {
    let last = commits.len() - 1;
    // Both ends at once under the lens (counts do not mind a busy machine); wall time one by one.
    let (good, bad) = match probe.target.lens {
        Lens::Instructions => tokio::join!(probe.measure(0, &commits[0]), probe.measure(last, &commits[last])),
        Lens::Wall => (probe.measure(0, &commits[0]).await, probe.measure(last, &commits[last]).await),
    };
    let (good, bad) = (good?, bad?);
    let value = |visit: &Visit, end: &str| match &visit.reading {
        Reading::Value(v) => Ok(*v),
        Reading::Skipped(why) => Err(anyhow::anyhow!("the {end} end cannot be measured: {why}")),
    };
    let tolerance = match probe.target.lens {
        Lens::Instructions => COUNT_TOLERANCE,
        Lens::Wall => WALL_TOLERANCE,
    };
    let mut search = Search::new(commits.len(), value(&good, "good")?, value(&bad, "bad")?, tolerance);
    let mut visits = vec![good, bad];
    while let Some(index) = search.next() {
        if visits.len() - 2 >= max_steps as usize || *probe.cancel.borrow() {
            break;
        }
        let visit = probe.measure(index, &commits[index]).await?;
        search.record(index, visit.reading.clone());
        visits.push(visit);
    }
    Ok((visits, search.outcome()))
}

/// The metric a bisection reads, and the one step that records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub key: String,
    /// The step's metric (the key without a lens suffix).
    pub stem: String,
    pub phase: &'static str,
    pub lens: Lens,
}

impl Target {
    /// Finds the step of `plan` that records `metric` under `lens`, or says which metrics can be.
    pub fn of(plan: &Plan, metric: &str, lens: Lens) -> anyhow::Result<Target> {
        let phases = || phase::ALL.into_iter();
        match lens {
            Lens::Instructions => {
                let (stem, key) = match sandbench_proto::lens::split(metric) {
                    Some((stem, _)) => (stem.to_string(), metric.to_string()),
                    None => (metric.to_string(), format!("{metric}{}", sandbench_proto::lens::INSTRUCTIONS)),
                };
                let Some(phase) = phases().find(|p| plan.lens_stems_of_phase(p).contains(&stem)) else {
                    let counted: Vec<String> = phases().flat_map(|p| plan.lens_stems_of_phase(p)).collect();
                    bail!(
                        "no step of {} counts {stem} under the instruction lens (give it `instructions = true`); \
                         counted: {}",
                        plan.spec_path.display(),
                        if counted.is_empty() { "none".to_string() } else { counted.join(", ") }
                    );
                };
                Ok(Target { key, stem, phase, lens })
            }
            Lens::Wall => {
                let Some(phase) = phases().find(|p| plan.metrics_of_phase(p).iter().any(|m| m == metric)) else {
                    let all: Vec<String> = phases().flat_map(|p| plan.metrics_of_phase(p)).collect();
                    bail!("no step of {} records {metric}; its metrics: {}", plan.spec_path.display(), all.join(", "));
                };
                Ok(Target { key: metric.to_string(), stem: metric.to_string(), phase, lens })
            }
        }
    }

    /// The phase commands one commit runs: prepare, the first install where the phase needs it,
    /// then the phase (its trials, for wall time).
    pub fn steps(&self, plan: &Plan) -> Vec<(&'static str, u32)> {
        let mut steps = vec![(phase::PREPARE, 0)];
        if self.phase == phase::PREPARE {
            return steps;
        }
        if self.phase != phase::TRANSPORT && self.phase != phase::INSTALL {
            steps.push((phase::INSTALL, 0));
        }
        let trials = match (self.lens, self.phase) {
            (Lens::Instructions, _) => 1,
            (Lens::Wall, phase::INSTALL) => plan.trials.install,
            (Lens::Wall, phase::MEASURE) => plan.trials.measure,
            (Lens::Wall, phase::TRANSPORT) => plan.trials.transport,
            (Lens::Wall, phase::UI) => plan.trials.ui,
            (Lens::Wall, _) => plan.trials.runtime,
        };
        steps.extend((0..trials.max(1)).map(|t| (self.phase, t)));
        steps
    }

    /// `plan` cut to the step that records the metric: the other commands, scripts and
    /// scenarios of its section are dropped, and the measure phase keeps its lens only when it is
    /// the one counted.
    pub fn narrow(&self, mut plan: AgentPlan) -> AgentPlan {
        if self.phase != phase::MEASURE {
            plan.measure.instructions = false;
        }
        let section = match self.phase {
            phase::RUNTIME => Some(&mut plan.runtime),
            phase::TRANSPORT => Some(&mut plan.transport),
            phase::UI => Some(&mut plan.ui),
            _ => None,
        };
        if let Some(section) = section {
            let stem = &self.stem;
            let is_command = section.commands.iter().any(|c| &c.metric == stem);
            let script_of =
                |name: &str, metrics: &[String]| format!("script.{name}") == *stem || metrics.iter().any(|m| m == stem);
            let is_script = section.scripts.iter().any(|s| script_of(&s.name, &s.metrics));
            if is_command || is_script {
                *section = Runtime {
                    scenarios: Vec::new(),
                    commands: section.commands.iter().filter(|c| &c.metric == stem).cloned().collect(),
                    scripts: section.scripts.iter().filter(|s| script_of(&s.name, &s.metrics)).cloned().collect(),
                };
            }
        }
        plan
    }
}

/// Measures one commit in a sandbox of its own.
struct Probe<'a> {
    station: &'a Station,
    plan: &'a Plan,
    target: &'a Target,
    shipping: AgentShipping,
    cancel: watch::Receiver<bool>,
    /// The sandboxes made so far, for the ledger.
    records: Mutex<Vec<SandboxRecord>>,
}

impl Probe<'_> {
    async fn measure(&self, index: usize, commit: &Commit) -> anyhow::Result<Visit> {
        let started = Instant::now();
        let short = crate::sanitize::prefix(&commit.commit, 8);
        eprintln!("[{short}] {}", crate::sanitize::terminal(&crate::sanitize::bounded(&commit.subject, 72)));
        let plan = self.plan;
        let request = self.station.plan_request(&format!("c{index}"), plan, self.shipping)?;
        let live = self.station.launch(request, Duration::from_secs(120)).await?;
        let agent_plan = self.target.narrow(plan.agent_plan(&commit.commit));
        let ran = self.run_steps(&live.sandbox, &agent_plan).await;
        let down = self.station.teardown(&live.sandbox).await;
        if let Some(err) = &down.removal_error {
            eprintln!("warning: {err}");
        }
        let record = self.record(&live.sandbox, &down);
        self.records.lock().unwrap_or_else(|e| e.into_inner()).push(record);
        let reading = match ran? {
            Err(why) => Reading::Skipped(why),
            Ok(()) => self.read(&live.sandbox.id)?,
        };
        match &reading {
            Reading::Value(v) => eprintln!("[{short}] {} = {v}", self.target.key),
            Reading::Skipped(why) => eprintln!("[{short}] skipped: {}", crate::sanitize::terminal(why)),
        }
        Ok(Visit { index, reading, seconds: started.elapsed().as_secs_f64().max(down.lifetime.as_secs_f64()) })
    }

    /// A commit's sandbox as the ledger keeps it: its lifetime charged at the spec's rate card
    /// as one stretch, `bisect` (its usage is not sampled: the usage figure is 0).
    fn record(&self, sandbox: &crate::provision::Sandbox, down: &crate::sandbox::Teardown) -> SandboxRecord {
        let seconds = down.lifetime.as_secs_f64();
        let stretch =
            crate::cost::PhaseUsage { phase: "bisect".into(), seconds, cpu_seconds: 0.0, memory_gib_seconds: 0.0 };
        let cost = crate::cost::sandbox_cost(
            &self.plan.cost,
            self.plan.allocation(),
            vec![stretch],
            down.removal_error.is_some(),
            self.plan.sandbox.ttl.as_secs_f64(),
        );
        SandboxRecord {
            id: sandbox.id.clone(),
            role: sandbox.role.clone(),
            created_at: crate::report::timestamp(sandbox.requested_at),
            removed_at: down.removal_error.is_none().then(|| crate::report::timestamp(SystemTime::now())),
            seconds: cost.charged_seconds.max(seconds),
            deleted: down.removal_error.is_none(),
            estimated_usd: cost.allocation_usd,
            peak_memory_bytes: 0,
            cost: Some(cost),
        }
    }

    /// Ok(Err(why)) when a step of the commit failed (it is skipped); Err when the bisection cannot go on.
    async fn run_steps(
        &self,
        sandbox: &crate::provision::Sandbox,
        agent_plan: &AgentPlan,
    ) -> anyhow::Result<Result<(), String>> {
        let provisioner = &**self.station.provisioner();
        if let Err(err) = crate::sandbox::deliver_source(provisioner, self.plan, sandbox, agent_plan).await {
            return Ok(Err(format!("its source could not be delivered: {err:#}")));
        }
        let hub = self.station.hub();
        for (name, trial) in self.target.steps(self.plan) {
            let mut cancel = self.cancel.clone();
            let outcome = tokio::select! {
                o = crate::sandbox::run_phase(&hub, &sandbox.id, agent_plan, name, trial, PHASE_TIMEOUT) => o?,
                _ = cancel.wait_for(|c| *c) => bail!("canceled"),
            };
            if outcome.status != PhaseStatus::Ok {
                return Ok(Err(format!("{name} failed: {}", crate::sanitize::bounded(&outcome.error, 300))));
            }
        }
        Ok(Ok(()))
    }

    /// The commit's value from the log: the count, or the median of the wall-time samples.
    fn read(&self, sandbox_id: &str) -> anyhow::Result<Reading> {
        let events = read_events(&self.station.dir().join(crate::observations::store::OBSERVATIONS_FILE))?;
        let mut values = Vec::new();
        let mut errors = Vec::new();
        for event in events.iter().filter(|e| e.sandbox == sandbox_id) {
            if let StoredBody::Observation { metric, value, error, .. } = &event.body
                && *metric == self.target.key
            {
                match (value, error) {
                    (Some(v), _) if v.is_finite() => values.push(*v),
                    (_, Some(e)) => errors.push(e.clone()),
                    _ => {}
                }
            }
        }
        if values.is_empty() {
            let why =
                errors.first().map_or("it recorded no value".to_string(), |e| crate::sanitize::bounded(e, 300).into());
            return Ok(Reading::Skipped(format!("{}: {why}", self.target.key)));
        }
        Ok(crate::stats::median(&values).map_or(Reading::Skipped("no value".into()), Reading::Value))
    }
}

/// The answer in one line, for the terminal and the comment: "`cold` regressed +8.00 %: first
/// bad commit abc12345 'load plugins eagerly' (+7.60 % of the +8.00 %)".
pub fn headline(report: &BisectReport) -> String {
    let commit = |i: usize| {
        let c = &report.commits[i];
        format!("{} '{}'", crate::sanitize::prefix(&c.commit, 8), crate::sanitize::prefix(&c.subject, 72))
    };
    let total = change(report);
    // Every metric sandbench keeps is better lower (times, bytes, counts).
    let moved = match total {
        Some(c) if c > 0.0 => format!("regressed {c:+.2} %"),
        Some(c) => format!("improved {c:+.2} %"),
        None => "changed".to_string(),
    };
    let of_total = |share: f64| match total {
        Some(c) => format!("{:+.2} % of the {c:+.2} %", share * c),
        None => format!("{:.0} % of the change", share * 100.0),
    };
    match &report.outcome {
        Outcome::FirstBad { index, share } => {
            format!("`{}` {moved}: first bad commit {} ({})", report.key, commit(*index), of_total(*share))
        }
        Outcome::Spread { from, to, largest, share } => format!(
            "`{}` {moved}: not one commit: the change is spread over {}..{} (the largest step, {}, is {})",
            report.key,
            crate::sanitize::prefix(&report.commits[*from].commit, 8),
            crate::sanitize::prefix(&report.commits[*to].commit, 8),
            commit(*largest),
            of_total(*share)
        ),
        Outcome::Unresolved { candidates, why } => {
            let names: Vec<String> = candidates.iter().map(|&i| commit(i)).collect();
            format!("`{}` {moved}: the first bad commit is one of {} ({why})", report.key, names.join(", "))
        }
        Outcome::NoChange => format!("`{}`: good and bad do not differ; nothing to bisect", report.key),
    }
}

/// The relative change from good to bad, in percent.
fn change(report: &BisectReport) -> Option<f64> {
    let value = |i: usize| {
        report.visits.iter().find(|v| v.index == i).and_then(|v| match v.reading {
            Reading::Value(x) => Some(x),
            Reading::Skipped(_) => None,
        })
    };
    let (good, bad) = (value(0)?, value(report.commits.len() - 1)?);
    (good != 0.0).then(|| (bad / good - 1.0) * 100.0)
}

/// A value as `bisect.md` shows it: a count whole with separators, a time in seconds to the
/// microsecond (a wall-time median of 0.142 s is not "0").
fn shown_value(v: f64) -> String {
    crate::spec::numbers::number(v, if v.abs() >= 1e4 { 0 } else { 6 }, false)
}

/// `bisect.md`: the answer, then every commit visited (product text escaped: no pings, no links).
pub fn markdown(report: &BisectReport) -> String {
    use crate::report::format::escape_clipped;
    let mut out = format!("**Bisect** {}\n\n", crate::report::format::unlinked(&headline(report)));
    out.push_str("| commit | subject | value | side |\n| --- | --- | ---: | --- |\n");
    let search = report.visits.first().zip(report.visits.get(1)).and_then(|(g, b)| match (&g.reading, &b.reading) {
        (Reading::Value(g), Reading::Value(b)) => Some(Search::new(report.commits.len(), *g, *b, 0.0)),
        _ => None,
    });
    let mut visits: Vec<&Visit> = report.visits.iter().collect();
    visits.sort_by_key(|v| v.index);
    for visit in visits {
        let c = &report.commits[visit.index];
        let (value, side) = match &visit.reading {
            Reading::Value(v) => {
                let progress = search.as_ref().map(|s| s.progress(*v)).unwrap_or(0.0);
                let side = if progress >= 0.5 { "bad" } else { "good" };
                (shown_value(*v), format!("{side} ({:.0} % of the way)", progress * 100.0))
            }
            Reading::Skipped(why) => ("—".to_string(), format!("skipped: {}", escape_clipped(why, 120))),
        };
        out.push_str(&format!(
            "| `{}` | {} | {value} | {side} |\n",
            crate::sanitize::prefix(&c.commit, 8),
            escape_clipped(&c.subject, 72)
        ));
    }
    out.push_str(&format!(
        "\n{} commits visited between the ends, {:.0} s of sandbox time (~${:.4}).\n",
        report.steps, report.sandbox_seconds, report.cost_usd
    ));
    if report.lens == Lens::Instructions {
        out.push_str("\nEach commit counted once under the instruction lens (callgrind), with a cold compile cache.\n");
    }
    out
}

/// `sandbench bisect` on the command line: prints the answer and where it is.
pub async fn command(opts: BisectOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<bool> {
    let (report, dir) = bisect(opts, cancel).await.context("bisect")?;
    println!("{}", crate::sanitize::terminal(&headline(&report)));
    println!("{}", dir.join("bisect.json").display());
    Ok(!matches!(report.outcome, Outcome::Unresolved { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(good: f64, bad: f64, outcome: Outcome) -> BisectReport {
        let commits: Vec<Commit> = (0..4)
            .map(|n| Commit { commit: format!("{n}{}", "a".repeat(39)), subject: format!("commit {n}") })
            .collect();
        let visit = |index: usize, v: f64| Visit { index, reading: Reading::Value(v), seconds: 1.0 };
        BisectReport {
            id: "bisect-x".into(),
            spec: "demo".into(),
            key: "cold".into(),
            lens: Lens::Wall,
            good: Revision { rev: "good".into(), commit: commits[0].commit.clone() },
            bad: Revision { rev: "bad".into(), commit: commits[3].commit.clone() },
            commits,
            visits: vec![visit(0, good), visit(3, bad), visit(2, bad)],
            outcome,
            steps: 1,
            sandbox_seconds: 3.0,
            cost_usd: 0.001,
            sandboxes: Vec::new(),
        }
    }

    #[test]
    fn the_headline_says_regressed_and_the_commits_part_of_the_change() {
        let first_bad = report(0.125, 0.135, Outcome::FirstBad { index: 2, share: 0.95 });
        assert_eq!(
            headline(&first_bad),
            "`cold` regressed +8.00 %: first bad commit 2aaaaaaa 'commit 2' (+7.60 % of the +8.00 %)"
        );
        let faster = report(0.2, 0.1, Outcome::FirstBad { index: 2, share: 1.0 });
        assert!(
            headline(&faster).starts_with("`cold` improved -50.00 %: first bad commit 2aaaaaaa"),
            "{}",
            headline(&faster)
        );
        let spread = report(0.125, 0.135, Outcome::Spread { from: 1, to: 3, largest: 2, share: 0.5 });
        assert!(headline(&spread).ends_with("(the largest step, 2aaaaaaa 'commit 2', is +4.00 % of the +8.00 %)"));
        // A wall-time value in seconds is shown as such, not rounded to 0.
        let markdown = markdown(&first_bad);
        assert!(markdown.contains("| 0.125000 |") && markdown.contains("| 0.135000 |"), "{markdown}");
    }
}
