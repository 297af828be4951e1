//! `sandbench bisect`: which commit between a good and a bad revision changed a metric. A binary
//! search over the first-parent commits ([`search`]), one fresh sandbox per commit it visits:
//! prepare, install, then only the step that records the metric. Under the instruction lens a
//! count is the same on every run, so one run per commit decides; wall time takes the phase's
//! trials in that sandbox and compares medians. Commits that fail to build, install or run are
//! skipped and named, as `git bisect skip` does. The answer goes into `bisect.json` and
//! `bisect.md` in the bisection's directory, and its sandboxes into the cost ledger as a run of
//! its own (`bisect-<time>`, good as base and bad as head).

pub mod search;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use sandbench_proto::Phase;
use sandbench_proto::metric::{Facet, MetricKey};
use sandbench_proto::plan::{AgentPlan, Runtime};
use sandbench_proto::v1::PhaseStatus;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::cost::SandboxRecord;
use crate::cost::ledger::{Entry, Ledger, RunStart};
use crate::display::Display;
use crate::observations::store::{StoredBody, read_events};
use crate::provision::{AgentShipping, Engine, Provisioner};
use crate::report::{Revision, Status};
use crate::spec::{Plan, SourceSettings};
use crate::station::session::{Ended, Session};
use crate::station::{Station, StationOptions};
use crate::stats::Better;
pub use search::{Outcome, Reading, Search};

/// Counts that differ by no more than this (relative) are the same count.
const COUNT_TOLERANCE: f64 = 0.0005;
/// Medians of wall time that differ by no more than this (relative) are no change.
const WALL_TOLERANCE: f64 = 0.01;
/// Wall time: a commit between the ends takes up to this many times the phase's trials until its
/// side is decided.
const WALL_GROWTH: u32 = 3;
/// Wall time: a commit's side is decided when its median is this many standard errors from the
/// midpoint of the ends' medians.
const WALL_Z: f64 = 2.0;

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
    /// The bisection's id, when it continues one (`--resume`); None: a new one.
    pub id: Option<String>,
    /// How long the agents and the controller carry on without word from each other.
    pub dead_man: Duration,
}

impl BisectOptions {
    /// The options that continue the bisection in `dir` (`sandbench bisect --resume DIR`): its
    /// spec, ends, metric and lens as its `bisect.json` holds them.
    pub fn resume(dir: &Path) -> anyhow::Result<BisectOptions> {
        let report = BisectReport::load(dir)?;
        if report.spec_path.as_os_str().is_empty() {
            bail!("{} does not name its spec: it cannot be resumed", dir.join(BISECT_FILE).display());
        }
        let out = dir.parent().map(Path::to_path_buf).unwrap_or_default();
        let id = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if id != report.id {
            bail!("{} holds the bisection {:?}, not {id:?}", dir.join(BISECT_FILE).display(), report.id);
        }
        Ok(BisectOptions {
            spec: report.spec_path,
            good: report.good.commit,
            bad: report.bad.commit,
            metric: report.key,
            lens: report.lens,
            out,
            agent: None,
            shipping: AgentShipping::Bind,
            max_steps: 20,
            ledger: None,
            id: Some(id),
            dead_man: crate::observations::server::DEFAULT_DEAD_MAN,
        })
    }
}

/// A bisection's answer, in its directory.
pub const BISECT_FILE: &str = "bisect.json";

/// A commit of the range, good first (it lives with the source code it is read from).
pub use crate::source::Commit;

/// One commit measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Visit {
    /// Its place in `commits`.
    pub index: usize,
    pub reading: Reading,
    /// Sandbox seconds it took, from create to removal.
    pub seconds: f64,
    /// Wall time: every trial's value (the reading is their median).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<f64>,
}

/// `bisect.json`: written when the bisection begins and after every commit it measures (its
/// outcome "not finished" until the end), so that a bisection cut short goes on from there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BisectReport {
    pub id: String,
    pub spec: String,
    /// The spec file, for `--resume`.
    #[serde(default)]
    pub spec_path: PathBuf,
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
    /// Which way the metric is better (its definition's `better`): a higher throughput at the
    /// bad end is an improvement, a lower one the regression looked for.
    #[serde(default, skip_serializing_if = "Better::is_lower")]
    pub better: Better,
}

impl BisectReport {
    /// A bisection about to visit its first commit.
    fn begun(job: &Job<'_>, commits: Vec<Commit>) -> BisectReport {
        BisectReport {
            id: job.id.clone(),
            spec: job.plan.name.clone(),
            spec_path: job.plan.spec_path.clone(),
            key: job.target.key.clone(),
            lens: job.target.lens,
            better: job.target.better,
            good: job.good.clone(),
            bad: job.bad.clone(),
            commits,
            visits: Vec::new(),
            outcome: not_finished(),
            steps: 0,
            sandbox_seconds: 0.0,
            cost_usd: 0.0,
            sandboxes: Vec::new(),
        }
    }

    pub fn load(dir: &Path) -> anyhow::Result<BisectReport> {
        let path = dir.join(BISECT_FILE);
        let text = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_slice(&text).with_context(|| format!("{} is not a bisection's answer", path.display()))
    }

    /// Its figures from its visits and sandboxes, then `bisect.json` and `bisect.md` in `dir`.
    fn save(&mut self, dir: &Path) -> anyhow::Result<()> {
        self.steps = self.visits.iter().filter(|v| v.index != 0 && v.index + 1 != self.commits.len()).count();
        self.sandbox_seconds = self.visits.iter().map(|v| v.seconds).sum();
        self.cost_usd = self.sandboxes.iter().map(|s| s.estimated_usd).sum();
        std::fs::write(dir.join(BISECT_FILE), serde_json::to_vec_pretty(self)?)?;
        std::fs::write(dir.join("bisect.md"), markdown(self))?;
        Ok(())
    }

    fn reading(&self, index: usize) -> Option<&Reading> {
        self.visits.iter().find(|v| v.index == index).map(|v| &v.reading)
    }
}

/// The outcome `bisect.json` holds while the bisection runs.
fn not_finished() -> Outcome {
    Outcome::Unresolved { candidates: Vec::new(), why: "not finished (`sandbench bisect --resume DIR` goes on)".into() }
}

/// One bisection: what it follows between which commits, what it may spend, and where its
/// answer goes.
pub struct Job<'a> {
    pub plan: &'a Plan,
    pub repository: PathBuf,
    pub good: Revision,
    pub bad: Revision,
    pub target: Target,
    /// Commits visited between the ends at most (those of an earlier attempt included).
    pub max_steps: u32,
    /// What it may spend at the spec's rate card, in USD (None: no bound).
    pub budget_usd: Option<f64>,
    /// Its directory: `bisect.json`, `bisect.md` and its sandboxes' observations.
    pub dir: PathBuf,
    /// Its id, which names its sandboxes.
    pub id: String,
    pub agent: Option<PathBuf>,
    pub shipping: AgentShipping,
    /// How long the agents and the controller carry on without word from each other.
    pub dead_man: Duration,
    /// Where its progress and warnings go (a run's display when a run bisects).
    pub display: Display,
}

/// What a bisection ended with.
pub struct Bisected {
    /// Its answer, as `bisect.json` holds it (every attempt's visits and sandboxes).
    pub report: BisectReport,
    /// The sandboxes this attempt made.
    pub made: Vec<SandboxRecord>,
    /// Why it ended before its answer (an end that cannot be measured, Ctrl-C, the engine).
    pub error: Option<String>,
}

/// Runs `job` on `provisioner`, going on from an earlier attempt's `bisect.json` in its
/// directory. Err only before its first sandbox; after that the answer is written whatever
/// happened (Unresolved, with the error, when the bisection could not finish).
pub async fn conduct(
    provisioner: Arc<dyn Provisioner>,
    job: Job<'_>,
    cancel: watch::Receiver<bool>,
) -> anyhow::Result<Bisected> {
    let commits = crate::source::first_parents(&job.repository, &job.good.commit, &job.bad.commit).await?;
    std::fs::create_dir_all(&job.dir).with_context(|| format!("cannot create {}", job.dir.display()))?;
    let mut report = match BisectReport::load(&job.dir) {
        Ok(earlier) => {
            let same = earlier.key == job.target.key
                && earlier.lens == job.target.lens
                && earlier.commits == commits
                && earlier.good.commit == job.good.commit;
            if !same {
                bail!("{} holds another bisection; give another directory", job.dir.join(BISECT_FILE).display());
            }
            job.display.line(&format!(
                "bisect {}: going on after the {} commits measured before",
                job.id,
                earlier.visits.len()
            ));
            BisectReport { outcome: not_finished(), ..earlier }
        }
        Err(_) if !job.dir.join(BISECT_FILE).exists() => BisectReport::begun(&job, commits),
        Err(err) => return Err(err),
    };
    report.save(&job.dir)?;
    let options = StationOptions {
        dir: job.dir.clone(),
        run_id: job.id.clone(),
        image: Some(job.plan.sandbox.image.clone()),
        valgrind: job.target.lens == Lens::Instructions,
        agent: job.agent.clone(),
        hub: crate::station::hub_config(job.plan, job.dead_man),
    };
    let station = Arc::new(Station::open(provisioner, options, &mut |line| job.display.line(line)).await?);
    let earlier = report.sandboxes.len();
    let probe = Probe {
        station: &station,
        plan: job.plan,
        target: &job.target,
        shipping: job.shipping,
        cancel,
        records: Mutex::new(report.sandboxes.clone()),
        dir: &job.dir,
        display: &job.display,
    };
    let walked = walk(&probe, &mut report, &job).await;
    for warning in station.close().await {
        job.display.warning(&warning);
    }
    report.sandboxes = probe.records.into_inner().unwrap_or_else(|e| e.into_inner());
    let made = report.sandboxes[earlier..].to_vec();
    let error = match walked {
        Ok(outcome) => {
            report.outcome = outcome;
            None
        }
        Err(err) => {
            let why = format!("{err:#}");
            let candidates = (1..report.commits.len()).collect();
            report.outcome = Outcome::Unresolved { candidates, why: why.clone() };
            Some(why)
        }
    };
    if let Err(err) = report.save(&job.dir) {
        job.display.warning(&format!("cannot write {}: {err:#}", job.dir.join(BISECT_FILE).display()));
    }
    Ok(Bisected { report, made, error })
}

/// A new bisection's id: its start time and a random suffix, as a run's (two bisections begun in
/// one second on one engine must not share sandbox names).
fn new_id(started: SystemTime) -> String {
    let suffix: String = rand::random::<[u8; 3]>().iter().map(|b| format!("{b:02x}")).collect();
    format!("bisect-{}-{suffix}", crate::report::stamp(started))
}

/// A bisection's ledger row as it starts: good as its base, bad as its head.
pub(crate) fn run_start(
    id: &str,
    plan: &Plan,
    repository: &Path,
    (good, bad): (&Revision, &Revision),
    started: SystemTime,
    dir: &Path,
) -> RunStart {
    RunStart {
        run_id: id.to_string(),
        spec: plan.name.clone(),
        repository: repository.display().to_string(),
        base_rev: good.rev.clone(),
        base_commit: good.commit.clone(),
        head_rev: bad.rev.clone(),
        head_commit: bad.commit.clone(),
        started_at: crate::report::timestamp(started),
        run_dir: dir.display().to_string(),
        owner: crate::provision::docker::owner_id(),
        usd_per_hour: plan.hourly_usd(),
    }
}

/// `sandbench bisect`: the bisection on Docker, in its own directory and ledger entry.
pub async fn bisect(
    engine: &Engine,
    opts: BisectOptions,
    display: &Display,
    cancel: watch::Receiver<bool>,
) -> anyhow::Result<(BisectReport, PathBuf)> {
    bisect_on(opts, display, cancel, engine.provisioner()).await
}

/// [`bisect`] on the provisioner `connect` gives, connected once the spec and the ends are
/// read and the bisection's directory is made.
pub async fn bisect_on(
    opts: BisectOptions,
    display: &Display,
    cancel: watch::Receiver<bool>,
    connect: impl Future<Output = anyhow::Result<Arc<dyn Provisioner>>>,
) -> anyhow::Result<(BisectReport, PathBuf)> {
    let plan = crate::spec::load(&opts.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    let target = Target::of(&plan, &opts.metric, opts.lens)?;
    let SourceSettings::Local { repository } = &plan.source else {
        bail!("bisect needs the spec's source to be a local repository ([source] repository)");
    };
    let good = Revision { rev: opts.good.clone(), commit: crate::source::resolve(repository, &opts.good).await? };
    let bad = Revision { rev: opts.bad.clone(), commit: crate::source::resolve(repository, &opts.bad).await? };
    let started = SystemTime::now();
    let id = opts.id.clone().unwrap_or_else(|| new_id(started));
    let dir = crate::station::run_dir(&opts.out.join(&id))?;
    let provisioner = connect.await?;
    // The ledger entry is made before the first sandbox, so a bisection killed from here on
    // shows as unfinished; a resumed one is put back to running.
    let entry = match &opts.ledger {
        Some(path) => {
            let start = run_start(&id, &plan, repository, (&good, &bad), started, &dir);
            Some(Entry::begin(Ledger::open(path)?, &start, opts.id.is_some())?)
        }
        None => None,
    };
    display.line(&format!(
        "bisect {id}: {} from {} ({}) good to {} ({}) bad",
        target.key,
        good.rev,
        crate::sanitize::prefix(&good.commit, 8),
        bad.rev,
        crate::sanitize::prefix(&bad.commit, 8),
    ));
    let job = Job {
        plan: &plan,
        repository: repository.clone(),
        good,
        bad,
        target,
        max_steps: opts.max_steps,
        budget_usd: plan.cost.budget_usd,
        dir: dir.clone(),
        id: id.clone(),
        agent: opts.agent.clone(),
        shipping: opts.shipping,
        dead_man: opts.dead_man,
        display: display.clone(),
    };
    let bisected = conduct(provisioner, job, cancel.clone()).await;
    if let Some(mut entry) = entry {
        let (status, sandboxes) = match &bisected {
            Ok(b) if b.error.is_none() => (Status::Completed, b.report.sandboxes.as_slice()),
            Ok(b) => (if *cancel.borrow() { Status::Canceled } else { Status::Failed }, b.report.sandboxes.as_slice()),
            Err(_) => (Status::Failed, &[][..]),
        };
        let finished = crate::report::timestamp(SystemTime::now());
        if let Err(err) = entry.finish(status.as_str(), &finished, sandboxes) {
            let at = entry.ledger().path().display();
            display.warning(&format!("cannot record the bisection in the ledger {at}: {err:#}"));
        }
    }
    let bisected = bisected?;
    match bisected.error {
        Some(error) => Err(anyhow::anyhow!("{error} (its commits so far are in {})", dir.display())),
        None => Ok((bisected.report, dir)),
    }
}

/// Measures both ends (unless an earlier attempt did), replays what an earlier attempt read,
/// then visits whatever the search asks for, up to the job's steps and budget; `bisect.json`
/// after every commit.
async fn walk(probe: &Probe<'_>, report: &mut BisectReport, job: &Job<'_>) -> anyhow::Result<Outcome> {
    let commits = report.commits.clone();
    let last = commits.len() - 1;
    let (need_good, need_bad) = (report.reading(0).is_none(), report.reading(last).is_none());
    // Both ends at once under the lens (counts do not mind a busy machine); wall time one by one.
    let (good, bad) = match probe.target.lens {
        Lens::Instructions => {
            tokio::join!(probe.visit(need_good, 0, &commits[0]), probe.visit(need_bad, last, &commits[last]))
        }
        Lens::Wall => (probe.visit(need_good, 0, &commits[0]).await, probe.visit(need_bad, last, &commits[last]).await),
    };
    let mut failed = None;
    for end in [good, bad] {
        match end {
            Ok(visit) => report.visits.extend(visit),
            Err(err) => failed = failed.or(Some(err)),
        }
    }
    probe.save(report);
    if let Some(err) = failed {
        return Err(err);
    }
    let value = |index: usize, end: &str| match report.reading(index) {
        Some(Reading::Value(v)) => Ok(*v),
        Some(Reading::Skipped(why)) => Err(anyhow::anyhow!("the {end} end cannot be measured: {why}")),
        None => Err(anyhow::anyhow!("the {end} end was not measured")),
    };
    let tolerance = match probe.target.lens {
        Lens::Instructions => COUNT_TOLERANCE,
        Lens::Wall => WALL_TOLERANCE,
    };
    let mut search = Search::new(commits.len(), value(0, "good")?, value(last, "bad")?, tolerance);
    for visit in report.visits.iter().filter(|v| v.index != 0 && v.index != last) {
        search.record(visit.index, visit.reading.clone());
    }
    let samples = |index: usize| report.visits.iter().find(|v| v.index == index).map(|v| v.samples.clone());
    let ends = (samples(0).unwrap_or_default(), samples(last).unwrap_or_default());
    let mut stopped = None;
    while let Some(index) = search.next() {
        if report.visits.len() - 2 >= job.max_steps as usize {
            break;
        }
        if *probe.cancel.borrow() {
            bail!("canceled");
        }
        if job.budget_usd.is_some_and(|budget| probe.next_would_exceed(budget)) {
            stopped = Some("the budget was reached");
            break;
        }
        let visit = probe.measure(index, &commits[index], Some((&ends.0, &ends.1))).await?;
        search.record(index, visit.reading.clone());
        report.visits.push(visit);
        probe.save(report);
    }
    let mut outcome = search.outcome();
    if let (Some(stop), Outcome::Unresolved { why, .. }) = (stopped, &mut outcome) {
        *why = stop.to_string();
    }
    Ok(outcome)
}

/// The metric a bisection reads, and the one step that records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub key: String,
    /// The step's metric (the key without a lens suffix).
    pub stem: String,
    pub phase: Phase,
    pub lens: Lens,
    /// Which way the metric is better: counts and wall times lower, unless its definition says.
    pub better: Better,
}

impl Target {
    /// Finds the step of `plan` that records `metric` under `lens`, or says which metrics can be.
    pub fn of(plan: &Plan, metric: &str, lens: Lens) -> anyhow::Result<Target> {
        let phases = || Phase::ALL.into_iter();
        match lens {
            Lens::Instructions => {
                // A lens key as it is; any other metric's instructions.
                let (stem, key) = match MetricKey::split(metric) {
                    (stem, facet) if facet.is_lens() => (stem.to_string(), metric.to_string()),
                    _ => (metric.to_string(), MetricKey::new(metric, Facet::Instructions).to_string()),
                };
                let Some(phase) = phases().find(|p| plan.lens_stems_of_phase(*p).contains(&stem)) else {
                    let counted: Vec<String> = phases().flat_map(|p| plan.lens_stems_of_phase(p)).collect();
                    bail!(
                        "no step of {} counts {stem} under the instruction lens (give it `instructions = true`); \
                         counted: {}",
                        plan.spec_path.display(),
                        if counted.is_empty() { "none".to_string() } else { counted.join(", ") }
                    );
                };
                Ok(Target { key, stem, phase, lens, better: Better::Lower })
            }
            Lens::Wall => {
                // A distribution's facet (`rt.p99`) is read from its stem's samples, per trial.
                let (stem, facet) = MetricKey::split(metric);
                let of_distribution = facet.is_distribution()
                    && crate::spec::metrics::distribution_of(plan, stem).is_some_and(|f| f.contains(&facet));
                let recorded = if of_distribution { stem } else { metric };
                let Some(phase) = phases().find(|p| plan.metrics_of_phase(*p).iter().any(|m| m == recorded)) else {
                    let all: Vec<String> = phases().flat_map(|p| plan.metrics_of_phase(p)).collect();
                    bail!("no step of {} records {metric}; its metrics: {}", plan.spec_path.display(), all.join(", "));
                };
                let def = plan.metrics.iter().find(|d| d.key == metric);
                let better =
                    def.or_else(|| plan.metrics.iter().find(|d| d.key == recorded)).map_or(Better::Lower, |d| d.better);
                Ok(Target { key: metric.to_string(), stem: recorded.to_string(), phase, lens, better })
            }
        }
    }

    /// The phase commands one commit runs: what the phase needs ([`Phase::needs`]: prepare, and
    /// the first install where it uses the installation), then the phase (its trials, for wall
    /// time).
    pub fn steps(&self, plan: &Plan) -> Vec<(Phase, u32)> {
        let trials = match self.lens {
            Lens::Instructions => 1,
            Lens::Wall => plan.trials.of(self.phase),
        };
        let needed = self.phase.needs().iter().map(|&p| (p, 0));
        needed.chain((0..trials.max(1)).map(|t| (self.phase, t))).collect()
    }

    /// `plan` cut to the step that records the metric: the other commands, scripts and
    /// scenarios of its section are dropped, and the measure phase keeps its lens only when it is
    /// the one counted.
    pub fn narrow(&self, mut plan: AgentPlan) -> AgentPlan {
        if self.phase != Phase::Measure {
            plan.measure.instructions = false;
        }
        let section = match self.phase {
            Phase::Runtime => Some(&mut plan.runtime),
            Phase::Transport => Some(&mut plan.transport),
            Phase::Ui => Some(&mut plan.ui),
            Phase::Prepare | Phase::Install | Phase::Measure | Phase::Synthetic => None,
        };
        if let Some(section) = section {
            let stem = &self.stem;
            let is_command = section.commands.iter().any(|c| &c.metric == stem);
            let script_of =
                |name: &str, metrics: &[String]| format!("script.{name}") == *stem || metrics.iter().any(|m| m == stem);
            let is_script = section.scripts.iter().any(|s| script_of(&s.name, &s.metrics));
            // A bench step's suite, counted whole.
            let is_bench = section.benches.iter().any(|b| &b.stem() == stem);
            if is_command || is_script || is_bench {
                *section = Runtime {
                    scenarios: Vec::new(),
                    commands: section.commands.iter().filter(|c| &c.metric == stem).cloned().collect(),
                    scripts: section.scripts.iter().filter(|s| script_of(&s.name, &s.metrics)).cloned().collect(),
                    benches: section.benches.iter().filter(|b| &b.stem() == stem).cloned().collect(),
                };
            }
        }
        plan
    }
}

/// Measures one commit in a sandbox of its own.
struct Probe<'a> {
    station: &'a Arc<Station>,
    plan: &'a Plan,
    target: &'a Target,
    shipping: AgentShipping,
    cancel: watch::Receiver<bool>,
    /// The sandboxes made so far (an earlier attempt's first), for the ledger and the budget.
    records: Mutex<Vec<SandboxRecord>>,
    /// Where `bisect.json` goes.
    dir: &'a Path,
    display: &'a Display,
}

impl Probe<'_> {
    /// [`Probe::measure`] when `wanted`.
    async fn visit(&self, wanted: bool, index: usize, commit: &Commit) -> anyhow::Result<Option<Visit>> {
        match wanted {
            true => self.measure(index, commit, None).await.map(Some),
            false => Ok(None),
        }
    }

    /// Whether one more commit, at what a commit has cost so far, would spend more than `budget`.
    fn next_would_exceed(&self, budget: f64) -> bool {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let spent: f64 = records.iter().map(|r| r.estimated_usd).sum();
        let each = if records.is_empty() { 0.0 } else { spent / records.len() as f64 };
        spent + each > budget
    }

    /// `bisect.json` as it stands (a failure to write it is a warning: the search goes on).
    fn save(&self, report: &mut BisectReport) {
        report.sandboxes = self.records.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Err(err) = report.save(self.dir) {
            self.display.warning(&format!("cannot write {}: {err:#}", self.dir.join(BISECT_FILE).display()));
        }
    }

    /// Measures `commit` in a sandbox of its own; under wall time, a commit between `ends`
    /// (the good and bad ends' samples) takes trials until its side is decided.
    async fn measure(&self, index: usize, commit: &Commit, ends: Option<(&[f64], &[f64])>) -> anyhow::Result<Visit> {
        let started = Instant::now();
        let short = crate::sanitize::prefix(&commit.commit, 8);
        self.display.line(&format!("[{short}] {}", crate::sanitize::bounded(&commit.subject, 72)));
        let agent_plan = self.target.narrow(self.plan.agent_plan(&commit.commit));
        let role = format!("c{index}");
        let session = Session::launch(self.station, self.plan, agent_plan, (&role, self.shipping, &[])).await?;
        let ran = match self.run_steps(&session).await {
            Ok(Ok(())) => self.settle(&session, ends).await,
            other => other.map(|r| r.map(|()| Vec::new())),
        };
        let Ended { teardown: down, record } = session.teardown("bisect").await;
        if let Some(err) = &down.removal_error {
            self.display.warning(err);
        }
        self.records.lock().unwrap_or_else(|e| e.into_inner()).push(record);
        let (reading, samples) = match ran? {
            Err(why) => (Reading::Skipped(why), Vec::new()),
            Ok(samples) => match crate::stats::median(&samples) {
                Some(v) => (Reading::Value(v), if self.target.lens == Lens::Wall { samples } else { Vec::new() }),
                None => (Reading::Skipped("no value".into()), Vec::new()),
            },
        };
        match &reading {
            Reading::Value(v) => self.display.line(&format!(
                "[{short}] {} = {v} ({})",
                self.target.key,
                crate::report::format::plural(samples.len().max(1), "run")
            )),
            Reading::Skipped(why) => self.display.line(&format!("[{short}] skipped: {why}")),
        }
        let seconds = started.elapsed().as_secs_f64().max(down.lifetime.as_secs_f64());
        Ok(Visit { index, reading, seconds, samples })
    }

    /// The commit's samples once its steps ran: under wall time, between `ends`, one more trial
    /// of the phase at a time until [`crate::stats::midpoint::clear`] of the ends' midpoint or [`WALL_GROWTH`] times the phase's trials.
    async fn settle(
        &self,
        session: &Session,
        ends: Option<(&[f64], &[f64])>,
    ) -> anyhow::Result<Result<Vec<f64>, String>> {
        let first = self.target.steps(self.plan).iter().filter(|(p, _)| *p == self.target.phase).count() as u32;
        let mut trial = first;
        loop {
            let samples = match self.read(session.id())? {
                Ok(samples) => samples,
                Err(why) => return Ok(Err(why)),
            };
            let Some((good, bad)) = ends.filter(|_| self.target.lens == Lens::Wall) else { return Ok(Ok(samples)) };
            if crate::stats::midpoint::clear(good, bad, &samples, WALL_Z) || trial >= first * WALL_GROWTH {
                return Ok(Ok(samples));
            }
            let outcome = session.run(self.target.phase, trial, &mut self.cancel.clone()).await?;
            if outcome.status != PhaseStatus::Ok {
                // The trials so far stand; one that failed adds nothing.
                return Ok(Ok(samples));
            }
            trial += 1;
        }
    }

    /// Ok(Err(why)) when a step of the commit failed (it is skipped); Err when the bisection cannot go on.
    async fn run_steps(&self, session: &Session) -> anyhow::Result<Result<(), String>> {
        if let Err(err) = session.deliver_source().await {
            return Ok(Err(format!("its source could not be delivered: {err:#}")));
        }
        for (name, trial) in self.target.steps(self.plan) {
            let outcome = session.run(name, trial, &mut self.cancel.clone()).await?;
            if outcome.status != PhaseStatus::Ok {
                return Ok(Err(format!("{name} failed: {}", crate::sanitize::bounded(&outcome.error, 300))));
            }
        }
        Ok(Ok(()))
    }

    /// The commit's values of the metric from the log (the count, or every wall-time trial), or
    /// why there are none.
    fn read(&self, sandbox_id: &str) -> anyhow::Result<Result<Vec<f64>, String>> {
        let events = read_events(&self.station.dir().join(crate::observations::store::OBSERVATIONS_FILE))?;
        let mut values = Vec::new();
        let mut errors = Vec::new();
        // A distribution's facet: its stem's samples, reduced per trial.
        let facet = Some(MetricKey::facet_of(&self.target.key))
            .filter(|f| self.target.lens == Lens::Wall && f.is_distribution() && self.target.key != self.target.stem);
        let read_as = if facet.is_some() { &self.target.stem } else { &self.target.key };
        let mut trials: std::collections::BTreeMap<u32, Vec<f64>> = std::collections::BTreeMap::new();
        for event in events.iter().filter(|e| e.sandbox == sandbox_id) {
            if let StoredBody::Observation { metric, value, error, trial, .. } = &event.body
                && metric == read_as
            {
                match (value, error) {
                    (Some(v), _) if v.is_finite() && facet.is_some() => trials.entry(*trial).or_default().push(*v),
                    (Some(v), _) if v.is_finite() => values.push(*v),
                    (_, Some(e)) => errors.push(e.clone()),
                    _ => {}
                }
            }
        }
        if let Some(facet) = facet {
            values
                .extend(trials.values().filter_map(|s| crate::stats::reduce::reduce(s, &[facet]).first().map(|x| x.1)));
        }
        if values.is_empty() {
            let why =
                errors.first().map_or("it recorded no value".to_string(), |e| crate::sanitize::bounded(e, 300).into());
            return Ok(Err(format!("{}: {why}", self.target.key)));
        }
        Ok(Ok(values))
    }
}

/// The answer in one line, for the terminal and the comment: "`cold` regressed +8.00 %: first
/// bad commit abc12345 'load plugins eagerly' (+7.60 % of the +8.00 %)".
pub fn headline(report: &BisectReport) -> String {
    format!("`{}`{}", report.key, words(report))
}

/// The headline after the metric's name (product text raw: escape it for Markdown).
pub fn words(report: &BisectReport) -> String {
    let commit = |i: usize| {
        let c = &report.commits[i];
        format!("{} '{}'", crate::sanitize::prefix(&c.commit, 8), crate::sanitize::prefix(&c.subject, 72))
    };
    let total = change(report);
    // A rise is a regression unless the metric is better higher (throughput, rates).
    let moved = match total {
        Some(c) if (c > 0.0) == report.better.is_lower() => format!("regressed {c:+.2} %"),
        Some(c) => format!("improved {c:+.2} %"),
        None => "changed".to_string(),
    };
    let of_total = |share: f64| match total {
        Some(c) => format!("{:+.2} % of the {c:+.2} %", share * c),
        None => format!("{:.0} % of the change", share * 100.0),
    };
    match &report.outcome {
        Outcome::FirstBad { index, share } => {
            format!(" {moved}: first bad commit {} ({})", commit(*index), of_total(*share))
        }
        Outcome::Spread { from, to, largest, share } => format!(
            " {moved}: not one commit: the change is spread over {}..{} (the largest step, {}, is {})",
            crate::sanitize::prefix(&report.commits[*from].commit, 8),
            crate::sanitize::prefix(&report.commits[*to].commit, 8),
            commit(*largest),
            of_total(*share)
        ),
        Outcome::Unresolved { candidates, why }
            if candidates.is_empty() || candidates.len() + 1 >= report.commits.len() =>
        {
            format!(" {moved}: no first bad commit found ({why})")
        }
        Outcome::Unresolved { candidates, why } => {
            let names: Vec<String> = candidates.iter().map(|&i| commit(i)).collect();
            format!(" {moved}: the first bad commit is one of {} ({why})", names.join(", "))
        }
        Outcome::NoChange => ": good and bad do not differ; nothing to bisect".to_string(),
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
        "\n{} visited between the ends, {:.0} s of sandbox time (~${:.4}).\n",
        crate::report::format::plural(report.steps, "commit"),
        report.sandbox_seconds,
        report.cost_usd
    ));
    if report.lens == Lens::Instructions {
        out.push_str("\nEach commit counted once under the instruction lens (callgrind), with a cold compile cache.\n");
    }
    out
}

/// `sandbench bisect` on the command line: prints the answer and where it is.
pub async fn command(engine: &Engine, opts: BisectOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<bool> {
    let display = Display::new();
    let (report, dir) = bisect(engine, opts, &display, cancel).await.context("bisect")?;
    display.result(&headline(&report));
    display.result(&dir.join("bisect.json").display().to_string());
    Ok(!matches!(report.outcome, Outcome::Unresolved { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bisections_begun_in_one_second_get_ids_of_their_own() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_790_000);
        let ids: std::collections::BTreeSet<String> = (0..20).map(|_| new_id(now)).collect();
        assert_eq!(ids.len(), 20, "{ids:?}");
        assert!(
            ids.iter()
                .all(|id| id.starts_with("bisect-20251203-") && id.len() == "bisect-20251203-192640-abcdef".len()),
            "{ids:?}"
        );
    }

    fn report(good: f64, bad: f64, outcome: Outcome) -> BisectReport {
        let commits: Vec<Commit> = (0..4)
            .map(|n| Commit { commit: format!("{n}{}", "a".repeat(39)), subject: format!("commit {n}") })
            .collect();
        let visit =
            |index: usize, v: f64| Visit { index, reading: Reading::Value(v), seconds: 1.0, samples: Vec::new() };
        BisectReport {
            id: "bisect-x".into(),
            spec: "demo".into(),
            spec_path: PathBuf::from("bench.toml"),
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
            better: Better::Lower,
        }
    }

    #[test]
    fn a_distributions_facet_is_bisected_on_its_stems_step_with_its_direction() {
        let text = "name = \"d\"\n[install]\ncommand = \"true\"\n[[runtime.command]]\nmetric = \"rt\"\nrun = \"true\"\n[metrics.rt]\ntitle = \"Request\"\nunit = \"ms\"\nbetter = \"higher\"\n";
        let mut plan = crate::spec::parse(std::path::Path::new("bench.toml"), text).unwrap();
        plan.agent
            .distributions
            .insert("rt".into(), sandbench_proto::metric::Distribution { percentiles: vec![99], max: false });
        let target = Target::of(&plan, "rt.p99", Lens::Wall).unwrap();
        assert_eq!((target.key.as_str(), target.stem.as_str(), target.phase), ("rt.p99", "rt", Phase::Runtime));
        assert_eq!(target.better, Better::Higher);
        assert_eq!(Target::of(&plan, "rt", Lens::Wall).unwrap().stem, "rt");
        assert!(Target::of(&plan, "rt.p50", Lens::Wall).is_err());
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
        // A throughput that halved is the regression; one that rose, an improvement.
        let slower = BisectReport { better: Better::Higher, ..faster.clone() };
        assert!(headline(&slower).starts_with("`cold` regressed -50.00 %: first bad commit"), "{}", headline(&slower));
        let higher = BisectReport { better: Better::Higher, ..first_bad.clone() };
        assert!(headline(&higher).starts_with("`cold` improved +8.00 %"), "{}", headline(&higher));
        let spread = report(0.125, 0.135, Outcome::Spread { from: 1, to: 3, largest: 2, share: 0.5 });
        assert!(headline(&spread).ends_with("(the largest step, 2aaaaaaa 'commit 2', is +4.00 % of the +8.00 %)"));
        // A wall-time value in seconds is shown as such, not rounded to 0.
        let markdown = markdown(&first_bad);
        assert!(markdown.contains("| 0.125000 |") && markdown.contains("| 0.135000 |"), "{markdown}");
    }

    /// `bisect.md` renders from the report alone: a first bad commit by wall time, and a change
    /// spread over commits under the lens with a commit that did not build and a hostile subject.
    #[test]
    fn bisect_md_renders_from_the_report_alone() {
        insta::assert_snapshot!(
            "bisect_md_first_bad",
            markdown(&report(0.125, 0.135, Outcome::FirstBad { index: 2, share: 0.95 }))
        );
        let mut spread = report(1_000_000.0, 1_020_000.0, Outcome::Spread { from: 1, to: 3, largest: 2, share: 0.5 });
        spread.lens = Lens::Instructions;
        spread.key = "work.instructions".into();
        spread.commits[1].subject = "@team see https://example.com/x <b>| a pipe".into();
        spread.visits.push(Visit {
            index: 1,
            reading: Reading::Skipped("the build failed: exit 2".into()),
            seconds: 2.0,
            samples: Vec::new(),
        });
        spread.steps = 2;
        insta::assert_snapshot!("bisect_md_spread_under_the_lens", markdown(&spread));
    }
}

/// Whole bisections on the fake provisioner: the search, its sandboxes and its answer, with no
/// engine (the Docker tests, `tests/bisect.rs`, run the same on real sandboxes).
#[cfg(test)]
mod fake_tests {
    use std::sync::Arc;

    use super::*;
    use crate::provision::fake::{Answer, FakeProvisioner, Script, spec_text};

    /// A repository of `commits` empty commits whose spec's runtime command is `git_status`.
    fn repository(commits: usize) -> (tempfile::TempDir, Plan) {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join("bench.toml");
        let rest = "[source]\nrepository = \".\"\n\n[install]\ncommand = \"true\"\n\n[[runtime.command]]\nmetric = \"git_status\"\nrun = \"git status\"\n";
        std::fs::write(&spec, spec_text("install = 1\nruntime = 3", rest)).unwrap();
        let git = |args: &str| crate::provision::fake::git(dir.path(), args);
        git("init -q");
        git("add bench.toml");
        for n in 0..commits {
            git(&format!("commit -q --allow-empty -m 'commit {n}'"));
        }
        let plan = crate::spec::load(&spec).unwrap_or_else(|e| panic!("{e}"));
        (dir, plan)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bisection_by_wall_time_names_the_first_commit_that_got_slower_in_sandboxes_of_its_own() {
        let (dir, plan) = repository(7);
        let repo = dir.path().to_path_buf();
        let resolve = |rev: &str| {
            let out = std::process::Command::new("git").args(["rev-parse", rev]).current_dir(&repo).output().unwrap();
            Revision { rev: rev.to_string(), commit: String::from_utf8_lossy(&out.stdout).trim().to_string() }
        };
        // Commits 0..6 on the first-parent line: index 4 on is half as slow again.
        let mut script = Script::for_plan(&plan);
        for role in ["c4", "c5", "c6"] {
            script = script.on(role, "runtime", None, Answer::Scale(1.5));
        }
        let fake = Arc::new(FakeProvisioner::new(script));
        let job = Job {
            plan: &plan,
            repository: repo.clone(),
            good: resolve("HEAD~6"),
            bad: resolve("HEAD"),
            target: Target::of(&plan, "git_status", Lens::Wall).unwrap(),
            max_steps: 8,
            budget_usd: None,
            dir: dir.path().join("bisect"),
            id: "bisect-fake".into(),
            agent: None,
            shipping: AgentShipping::Bind,
            dead_man: crate::observations::server::DEFAULT_DEAD_MAN,
            display: Display::plain(),
        };
        let bisected = conduct(fake.clone(), job, watch::channel(false).1).await.unwrap();
        assert_eq!(bisected.error, None);
        let report = &bisected.report;
        assert!(matches!(report.outcome, Outcome::FirstBad { index: 4, .. }), "{:?}", report.outcome);
        assert_eq!(report.commits.len(), 7);
        // The ends and a binary search between them (3 of the 5 in between at most), each in a
        // sandbox of its own, every one removed, each costed in bisect.json.
        assert!(report.steps <= 3, "{}", report.steps);
        assert_eq!(report.sandboxes.len(), 2 + report.steps as usize);
        assert!(report.sandboxes.iter().all(|s| s.deleted && s.role.starts_with('c')));
        assert!(fake.list(None).await.unwrap().is_empty(), "every fake sandbox is removed");
        let saved = BisectReport::load(&dir.path().join("bisect")).unwrap();
        assert!(matches!(saved.outcome, Outcome::FirstBad { index: 4, .. }));
        assert!(headline(report).contains("regressed +50.00 %"), "{}", headline(report));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_whole_command_reads_the_spec_resolves_the_ends_and_keeps_its_ledger_entry() {
        let (dir, plan) = repository(7);
        let mut script = Script::for_plan(&plan);
        for role in ["c4", "c5", "c6"] {
            script = script.on(role, "runtime", None, Answer::Scale(1.5));
        }
        let fake = Arc::new(FakeProvisioner::new(script));
        let ledger = dir.path().join("ledger.sqlite");
        let opts = BisectOptions {
            spec: dir.path().join("bench.toml"),
            good: "HEAD~6".into(),
            bad: "HEAD".into(),
            metric: "git_status".into(),
            lens: Lens::Wall,
            out: dir.path().join("bisections"),
            agent: None,
            shipping: AgentShipping::Bind,
            max_steps: 8,
            ledger: Some(ledger.clone()),
            id: None,
            dead_man: crate::observations::server::DEFAULT_DEAD_MAN,
        };
        let provisioner = fake.clone();
        let connect = async move { Ok(provisioner as Arc<dyn Provisioner>) };
        let (report, at) = bisect_on(opts.clone(), &Display::plain(), watch::channel(false).1, connect).await.unwrap();
        assert!(matches!(report.outcome, Outcome::FirstBad { index: 4, .. }), "{:?}", report.outcome);
        assert_eq!((report.good.rev.as_str(), report.bad.rev.as_str()), ("HEAD~6", "HEAD"));
        assert_eq!(report.good.commit.len(), 40, "the ends resolved to commits");
        assert!(at.starts_with(dir.path().join("bisections")) && at.join(BISECT_FILE).exists());
        assert!(fake.list(None).await.unwrap().is_empty(), "every fake sandbox is removed");
        // Its ledger row: completed, every sandbox it made charged.
        let ledger = Ledger::open(&ledger).unwrap();
        let runs = ledger.runs(None).unwrap();
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0].status, "completed");
        assert_eq!(runs[0].sandboxes as usize, report.sandboxes.len());
        assert_eq!(runs[0].run_id, report.id);

        // An end that does not resolve stops the command before any sandbox or ledger row.
        let fresh = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
        let connect = async move { Ok(fresh as Arc<dyn Provisioner>) };
        let wrong = BisectOptions { good: "no-such-rev".into(), ..opts };
        assert!(bisect_on(wrong, &Display::plain(), watch::channel(false).1, connect).await.is_err());
        assert_eq!(ledger.runs(None).unwrap().len(), 1, "no row for a bisection that never started");
    }
}
