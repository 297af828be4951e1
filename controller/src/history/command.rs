//! `sandbench history SPEC [--out DIR] [--rev REV] [--bisect]`: the spec's history from the ledger
//! as series along the first-parent line of REV (default: the repository's HEAD), their change
//! points, and `history.json`, `history.md` and `history.html` in the output folder. With
//! `--bisect`, each change point of a count whose two recorded commits have unrecorded commits
//! between them is bisected over the instruction lens (`crate::bisect`, one sandbox per commit
//! visited) within `[bisect] max_steps` and the budget, in `bisect-<key>-<before>-<after>/`
//! of the output folder: a finished bisection there is read again, not run again, and one cut
//! short goes on. The bisections' sandboxes are one ledger entry (`history-<time>-<random>`).

use crate::display::Display;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use sandbench_proto::metric::{Facet, MetricKey};
use tokio::sync::watch;

use super::analysis::{self, Bisection, ChangeAt, History};
use super::series::{self, Kind};
use super::store::{CommitInfo, Records};
use crate::bisect::{BisectReport, Job, Lens, Outcome, Target};
use crate::cost::SandboxRecord;
use crate::cost::ledger::{Entry, Ledger, this_machine};
use crate::provision::{AgentShipping, Engine};
use crate::report::Revision;
use crate::report::noise::NoiseProfile;
use crate::spec::{Plan, SourceSettings};

/// The first-parent line is read this far back at most.
const LINE_LIMIT: usize = 100_000;

#[derive(Debug, Clone)]
pub struct HistoryOptions {
    pub spec: PathBuf,
    /// The output folder (None: `runs/history-<spec>`).
    pub out: Option<PathBuf>,
    /// The revision whose first-parent line orders the commits (None: HEAD).
    pub rev: Option<String>,
    pub bisect: bool,
    /// USD the bisections may spend (None: the spec's budget, if any).
    pub budget_usd: Option<f64>,
    pub ledger: PathBuf,
    pub agent: Option<PathBuf>,
    pub dead_man: Duration,
}

/// The history written: where, and what it holds.
pub struct Written {
    pub dir: PathBuf,
    pub history: History,
}

/// Reads the spec's history from the ledger, finds its change points (bisecting them when
/// asked) and writes its three files.
pub async fn history(opts: HistoryOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<Written> {
    history_in(&Engine::default(), opts, cancel).await
}

/// [`history`], its bisections on `engine`'s sandboxes (connected only when one needs a sandbox).
pub async fn history_in(
    engine: &Engine,
    opts: HistoryOptions,
    cancel: watch::Receiver<bool>,
) -> anyhow::Result<Written> {
    let plan = crate::spec::load(&opts.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    if !opts.ledger.exists() {
        bail!(
            "no ledger at {}: nothing was recorded there (--ledger or SANDBENCH_LEDGER names another)",
            opts.ledger.display()
        );
    }
    let ledger = Ledger::open(&opts.ledger)?;
    let records = Records::on(&ledger)?.of_spec(&plan.name)?;
    let (line_rev, first_parents) = match &plan.source {
        SourceSettings::Local { repository } => {
            let rev = opts.rev.clone().unwrap_or_else(|| "HEAD".into());
            let commit = crate::source::resolve(repository, &rev).await.context("--rev")?;
            let line = crate::source::first_parent_line(repository, &commit, LINE_LIMIT).await?;
            (Some(Revision { rev, commit }), Some(line))
        }
        _ => (None, None),
    };
    let line = series::line(&records, first_parents.as_deref());
    let all = series::series(&records, &line);
    let noise = |image: &str, machine: Option<&str>| -> Option<NoiseProfile> {
        let machine = machine.map_or_else(this_machine, str::to_string);
        let stored = ledger.latest_noise(&plan.name, image, &machine).ok().flatten()?;
        serde_json::from_str(&stored.profile).ok()
    };
    let cx = analysis::Context {
        spec: &plan.name,
        defs: &plan.metrics,
        noise: &noise,
        first_parents: first_parents.as_deref(),
        line: line_rev,
        generated_at: crate::report::timestamp(SystemTime::now()),
    };
    let mut history = analysis::analyse(&cx, &line, &all);
    let name: String = plan.name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    let dir = crate::station::run_dir(
        &opts.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(format!("history-{name}"))),
    )?;
    if opts.bisect {
        let at = Bisecting { plan: &plan, dir: &dir, opts: &opts, ledger: &ledger, engine, display: Display::new() };
        bisect_changes(at, &mut history, cancel).await;
    }
    write(&dir, &history)?;
    Ok(Written { dir, history })
}

/// `history.json`, `history.md` and `history.html` in `dir`.
pub fn write(dir: &Path, history: &History) -> anyhow::Result<()> {
    std::fs::write(dir.join("history.json"), serde_json::to_vec_pretty(history)?)?;
    std::fs::write(dir.join("history.md"), super::markdown::render(history))?;
    std::fs::write(dir.join("history.html"), super::html::render(history))?;
    Ok(())
}

/// `sandbench history` on the command line: one line per change point, then the files' paths.
pub async fn command(engine: &Engine, opts: HistoryOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<()> {
    let written = history_in(engine, opts, cancel).await.context("history")?;
    let display = Display::new();
    let h = &written.history;
    let changes: usize = h.metrics.iter().map(|m| m.change_points.len()).sum();
    display.result(&format!(
        "{changes} change point(s) in {} series over {} recorded commits",
        h.metrics.len(),
        h.commits.len()
    ));
    for metric in &h.metrics {
        for c in &metric.change_points {
            let first_bad = c.bisection.as_ref().and_then(|b| b.first_bad.as_ref()).map_or(String::new(), |f| {
                format!(
                    "; first bad commit {} '{}'",
                    crate::sanitize::prefix(&f.commit, 8),
                    crate::sanitize::prefix(&f.subject, 72)
                )
            });
            let line = format!(
                "{} ({}): {:+.2} % between {} and {}{first_bad}",
                metric.key,
                metric.lens,
                c.size * 100.0,
                crate::sanitize::prefix(&c.before_commit, 8),
                crate::sanitize::prefix(&c.after_commit, 8)
            );
            display.result(&line);
        }
    }
    for warning in &h.warnings {
        display.warning(warning);
    }
    for file in ["history.md", "history.html", "history.json"] {
        display.result(&written.dir.join(file).display().to_string());
    }
    Ok(())
}

/// What the bisections need beside the history.
struct Bisecting<'a> {
    plan: &'a Plan,
    dir: &'a Path,
    opts: &'a HistoryOptions,
    ledger: &'a Ledger,
    /// The engine the bisections' sandboxes are made on.
    engine: &'a Engine,
    /// Where the bisections' progress goes.
    display: Display,
}

/// The change points to bisect: a count's, with commits between its two recorded ones that were
/// not recorded; a stem's cycles not beside its instructions at the same commits.
fn to_bisect(history: &History) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (m, metric) in history.metrics.iter().enumerate() {
        if metric.kind != Kind::Count {
            continue;
        }
        for (c, change) in metric.change_points.iter().enumerate() {
            if change.unrecorded.unwrap_or(0) == 0 {
                continue;
            }
            let (stem, facet) = MetricKey::split(&metric.key);
            let answered = facet == Facet::Cycles
                && history.metrics.iter().any(|o| {
                    o.key == MetricKey::new(stem, Facet::Instructions).to_string()
                        && o.change_points
                            .iter()
                            .any(|oc| oc.before_at == change.before_at && oc.after_at == change.after_at)
                });
            if !answered {
                out.push((m, c));
            }
        }
    }
    out
}

/// Bisects each count's change point between unrecorded commits (reading a finished answer
/// again), putting each answer into the history; what fails becomes a warning.
async fn bisect_changes(at: Bisecting<'_>, history: &mut History, cancel: watch::Receiver<bool>) {
    let wanted = to_bisect(history);
    if wanted.is_empty() {
        return;
    }
    let SourceSettings::Local { repository } = &at.plan.source else {
        history.warnings.push("--bisect needs the spec's source to be a local repository: nothing bisected".into());
        return;
    };
    let entry = format!("history-{}-{}", crate::report::stamp(SystemTime::now()), suffix());
    let mut spending = Spending { spent: Vec::new(), name: entry, entry: None, jobs: 0 };
    for (m, c) in wanted {
        let (key, change) = (history.metrics[m].key.clone(), history.metrics[m].change_points[c].clone());
        match bisect_one(&at, repository, &mut spending, (&key, &change), &cancel).await {
            Ok(answer) => history.metrics[m].change_points[c].bisection = Some(answer),
            Err(Skipped { why, stop }) => {
                history.warnings.push(format!("--bisect: {why}"));
                if stop {
                    break;
                }
            }
        }
    }
    if let Some(entry) = spending.entry.as_mut() {
        let status = if *cancel.borrow() { "canceled" } else { "completed" };
        let finished = crate::report::timestamp(SystemTime::now());
        if let Err(err) = entry.finish(status, &finished, &spending.spent) {
            history.warnings.push(format!("cannot record the bisections in the ledger: {err:#}"));
        }
    }
}

/// What the bisections of one `history` share: what they spent, their ledger entry.
struct Spending {
    spent: Vec<SandboxRecord>,
    /// The ledger entry's run id.
    name: String,
    /// The ledger entry, from the first bisection that spends a sandbox.
    entry: Option<Entry>,
    /// Bisections run so far (each names its sandboxes with its number).
    jobs: usize,
}

/// Why a change point was not bisected, and whether the others are not either.
struct Skipped {
    why: String,
    stop: bool,
}

impl Skipped {
    fn this(why: String) -> Skipped {
        Skipped { why, stop: false }
    }
}

/// One change point bisected between its two recorded commits (or its finished answer read
/// again), within what is left of the budget.
async fn bisect_one(
    at: &Bisecting<'_>,
    repository: &Path,
    spending: &mut Spending,
    (key, change): (&str, &ChangeAt),
    cancel: &watch::Receiver<bool>,
) -> Result<Bisection, Skipped> {
    let folder = format!("bisect-{key}-{}-{}", short(&change.before_commit), short(&change.after_commit));
    let dir = at.dir.join(&folder);
    if let Some(done) = finished(&dir) {
        return Ok(bisection(&done, &folder));
    }
    if *cancel.borrow() {
        return Err(Skipped { why: format!("canceled before {key} was bisected"), stop: true });
    }
    let spent: f64 = spending.spent.iter().map(|s| s.estimated_usd).sum();
    let budget = at.opts.budget_usd.or(at.plan.cost.budget_usd).map(|b| b - spent);
    if budget.is_some_and(|b| b <= 0.0) {
        return Err(Skipped::this(format!("the budget is spent; {key} was not bisected")));
    }
    let target = Target::of(at.plan, key, Lens::Instructions)
        .map_err(|err| Skipped::this(format!("{key} cannot be bisected: {err:#}")))?;
    // Connected on the first bisection that needs a sandbox (a history with nothing to bisect,
    // or only finished answers, never connects).
    let docker = at.engine.provisioner().await.map_err(|err| Skipped { why: format!("{err:#}"), stop: true })?;
    if spending.entry.is_none() {
        let entry = begin_entry(at.ledger.path(), at.plan, repository, &spending.name, at.dir, change);
        spending.entry = Some(entry.map_err(|err| Skipped {
            why: format!("cannot record the bisections in the ledger: {err:#}"),
            stop: true,
        })?);
    }
    let (good, bad) = ends(change);
    let job = Job {
        plan: at.plan,
        repository: repository.to_path_buf(),
        good,
        bad,
        target,
        max_steps: at.plan.bisect.max_steps,
        budget_usd: budget,
        dir,
        id: format!("{}-{}", spending.name, spending.jobs),
        agent: at.opts.agent.clone(),
        shipping: AgentShipping::Bind,
        dead_man: at.opts.dead_man,
        display: at.display.clone(),
    };
    spending.jobs += 1;
    let (before, after) = (short(&change.before_commit), short(&change.after_commit));
    at.display.line(&format!(
        "history: {key} moved {:+.2} % between {before} and {after}; bisecting it in {folder}/",
        change.size * 100.0
    ));
    let bisected = crate::bisect::conduct(docker, job, cancel.clone())
        .await
        .map_err(|err| Skipped::this(format!("{key} could not be bisected: {err:#}")))?;
    spending.spent.extend(bisected.made);
    at.display.line(&crate::bisect::headline(&bisected.report));
    match bisected.error {
        // Its answer so far is in its folder; the next `history --bisect` goes on with it.
        Some(error) => Err(Skipped::this(format!("the bisection of {key} did not finish: {error}"))),
        None => Ok(bisection(&bisected.report, &folder)),
    }
}

/// The change point's two recorded commits, good and bad, each named by its commit id.
fn ends(change: &ChangeAt) -> (Revision, Revision) {
    let revision = |commit: &str| Revision { rev: commit.to_string(), commit: commit.to_string() };
    (revision(&change.before_commit), revision(&change.after_commit))
}

/// The ledger entry of the bisections, begun before their first sandbox.
fn begin_entry(
    ledger: &Path,
    plan: &Plan,
    repository: &Path,
    entry: &str,
    dir: &Path,
    change: &ChangeAt,
) -> anyhow::Result<Entry> {
    let (good, bad) = ends(change);
    let start = crate::bisect::run_start(entry, plan, repository, (&good, &bad), SystemTime::now(), dir);
    Entry::begin(Ledger::open(ledger)?, &start, false)
}

/// A bisection's answer in `dir` when it finished (Unresolved counts as finished unless it says
/// it is not).
fn finished(dir: &Path) -> Option<BisectReport> {
    let report = BisectReport::load(dir).ok()?;
    match &report.outcome {
        Outcome::Unresolved { why, .. } if why.starts_with("not finished") => None,
        _ => Some(report),
    }
}

fn bisection(report: &BisectReport, folder: &str) -> Bisection {
    let first_bad = match &report.outcome {
        Outcome::FirstBad { index, .. } => report.commits.get(*index).map(|c| CommitInfo {
            commit: c.commit.clone(),
            committed_at: String::new(),
            subject: c.subject.clone(),
        }),
        _ => None,
    };
    Bisection {
        dir: folder.to_string(),
        words: crate::bisect::words(report),
        first_bad,
        steps: report.steps,
        sandbox_seconds: report.sandbox_seconds,
        cost_usd: report.cost_usd,
    }
}

fn suffix() -> String {
    rand::random::<[u8; 3]>().iter().map(|b| format!("{b:02x}")).collect()
}

fn short(commit: &str) -> &str {
    crate::sanitize::prefix(commit, 8)
}
