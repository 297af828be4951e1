//! Resuming a run whose controller died (`sandbench run --resume DIR`), and reconciling a dead
//! run's ledger entry as `abandoned`.
//!
//! What the run directory keeps for this:
//!
//! - `controller.json` ([`Mark`]): the controller that owns the run (`host/pid/start-ticks`, as
//!   in the sandboxes' owner label, so a reused pid is not mistaken for it), the attempt, and
//!   the options and resolved commits the run was started with. It is written before the ledger
//!   entry and rewritten by every resume. A run whose controller still runs is neither resumed
//!   nor reconciled.
//! - A slot (side × phase × trial) is complete when `observations.jsonl` holds a `phase_done`
//!   event for its command (`<phase>-<trial>`) from a sandbox of that side. The agent sends it
//!   after every other event of the trial and the controller fsyncs events in order before
//!   acknowledging them, so a completed trial's observations are all in the log before its
//!   `phase_done`: that event is the durable "trial done" record. The first completion of a slot
//!   is the one counted ([`Accounting::counts`]); a trial cut mid-way in an earlier attempt (some
//!   observations, no `phase_done`) is run again and its partial observations are left out, as
//!   are those of the install a resumed sandbox runs, untimed, to have an installation of its own.
//!
//! A resumed run's sandboxes are named `<role>-r<attempt>` (`base-r2`), so their events never mix
//! with those of the dead attempt's sandboxes in the log.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use sandbench_proto::plan::phase;
use sandbench_proto::v1::PhaseStatus;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::gate::TrialResult;
use super::schedule::{self, Side, Slot, Stage};
use super::walk::{Run, SideRun};
use super::{RateOverrides, RunOptions, RunResult};
use crate::cost::ledger::Ledger;
use crate::observations::store::StoredBody;
use crate::provision::{AgentShipping, DockerProvisioner, Provisioner, labels};
use crate::report::{self, Report, Revision, SandboxRecord, Status};

/// The controller's record in a run directory.
pub const MARK_FILE: &str = "controller.json";

/// Who runs a run directory, and what it was started with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// `host/pid/start-ticks` of the controller process.
    pub owner: String,
    pub pid: u32,
    /// 1 for the first controller, then one more for each resume.
    pub attempt: u32,
    pub run_id: String,
    /// The spec, absolute.
    pub spec: PathBuf,
    /// SHA-256 of the spec's text when the run started (a resume refuses a changed spec).
    pub spec_sha256: String,
    pub base: Revision,
    pub head: Revision,
    pub trials: Option<u32>,
    pub pairs: u32,
    pub budget_usd: Option<f64>,
    pub run_timeout_s: f64,
    pub noise: Option<PathBuf>,
    pub cpu_usd_per_hour: Option<f64>,
    pub memory_usd_per_gb_hour: Option<f64>,
    pub disk_usd_per_gb_hour: Option<f64>,
    /// What one sandbox costs per hour at the run's rate card (to charge an abandoned run).
    pub usd_per_hour: f64,
    /// The shard this run is of a sharded run (`--shard I/N`), kept by its resumes.
    #[serde(default)]
    pub shard: Option<crate::shard::Shard>,
    /// `--bisect`, kept by its resumes (a bisection goes on from its commits measured).
    #[serde(default)]
    pub bisect: bool,
}

impl Mark {
    /// The mark of this process for a run started with `opts`.
    pub fn new(opts: &RunOptions, run_id: &str, base: &Revision, head: &Revision, usd_per_hour: f64) -> Mark {
        Mark {
            owner: crate::provision::docker::owner_id(),
            pid: std::process::id(),
            attempt: 1,
            run_id: run_id.to_string(),
            spec: std::path::absolute(&opts.spec).unwrap_or_else(|_| opts.spec.clone()),
            spec_sha256: spec_digest(&opts.spec).unwrap_or_default(),
            base: base.clone(),
            head: head.clone(),
            trials: opts.trials,
            pairs: opts.pairs,
            budget_usd: opts.budget_usd,
            run_timeout_s: opts.run_timeout.as_secs_f64(),
            noise: opts.noise.clone(),
            cpu_usd_per_hour: opts.rates.cpu_usd_per_hour,
            memory_usd_per_gb_hour: opts.rates.memory_usd_per_gb_hour,
            disk_usd_per_gb_hour: opts.rates.disk_usd_per_gb_hour,
            usd_per_hour,
            shard: opts.shard,
            bisect: opts.bisect,
        }
    }

    /// The mark in `dir`, None when there is none.
    pub fn load(dir: &Path) -> anyhow::Result<Option<Mark>> {
        let path = dir.join(MARK_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("{} is not a sandbench controller record", path.display())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes the mark durably (a crash leaves the old one or the new one).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let tmp = dir.join(format!("{MARK_FILE}.tmp"));
        let file = std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        serde_json::to_writer_pretty(&file, self)?;
        file.sync_all()?;
        std::fs::rename(&tmp, dir.join(MARK_FILE)).with_context(|| format!("cannot write {MARK_FILE}"))?;
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }

    /// Whether its controller may still run: it does on this host, or it ran on another host
    /// (which cannot be told from here).
    pub fn alive(&self) -> bool {
        crate::provision::docker::owner_alive(&self.owner) != Some(false)
    }

    /// The run's options again, with what belongs to this machine (agent, ledger) from here.
    fn options(
        &self,
        out: PathBuf,
        agent: Option<PathBuf>,
        shipping: AgentShipping,
        ledger: Option<PathBuf>,
    ) -> RunOptions {
        RunOptions {
            spec: self.spec.clone(),
            base: self.base.rev.clone(),
            head: self.head.rev.clone(),
            out,
            trials: self.trials,
            pairs: self.pairs,
            budget_usd: self.budget_usd,
            run_timeout: Duration::from_secs_f64(self.run_timeout_s.max(0.0)),
            agent,
            shipping,
            noise: self.noise.clone(),
            // The profile the run started with is in `noise`; the ledger may hold a newer one.
            noise_from_ledger: false,
            rates: RateOverrides {
                cpu_usd_per_hour: self.cpu_usd_per_hour,
                memory_usd_per_gb_hour: self.memory_usd_per_gb_hour,
                disk_usd_per_gb_hour: self.disk_usd_per_gb_hour,
            },
            ledger,
            shard: self.shard,
            engine_wait: super::engine::DEFAULT_ENGINE_WAIT,
            dead_man: crate::observations::server::DEFAULT_DEAD_MAN,
            force_valgrind: false,
            bisect: self.bisect,
        }
    }
}

/// SHA-256 of a spec's text, in hex.
fn spec_digest(spec: &Path) -> anyhow::Result<String> {
    use sha2::Digest;
    let text = std::fs::read(spec).with_context(|| format!("cannot read the spec {}", spec.display()))?;
    Ok(sha2::Sha256::digest(&text).iter().map(|b| format!("{b:02x}")).collect())
}

/// The role of a pair's sandbox in an attempt: the label, then `-r<attempt>` from the second.
pub fn role(label: &str, attempt: u32) -> String {
    if attempt <= 1 { label.to_string() } else { format!("{label}-r{attempt}") }
}

/// The role of a sandbox of run `run_id`, from its id (`sandbench-<run>-<role>`).
pub fn role_of<'a>(run_id: &str, sandbox: &'a str) -> Option<&'a str> {
    sandbox.strip_prefix("sandbench-")?.strip_prefix(run_id)?.strip_prefix('-')
}

/// The side of a sandbox of run `run_id`, from its id.
pub fn side_of(run_id: &str, sandbox: &str) -> Option<Side> {
    let role = role_of(run_id, sandbox)?;
    Side::BOTH.into_iter().find(|side| role.starts_with(side.as_str()))
}

/// `install-3` → (`install`, 3).
fn parse_command(command_id: &str) -> Option<(&str, u32)> {
    let (name, trial) = command_id.rsplit_once('-')?;
    Some((name, trial.parse().ok()?))
}

/// The first completion of a slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub sandbox: String,
    pub ok: bool,
    pub error: String,
}

/// Which slots a run directory's log holds as complete, and when each sandbox was last heard of.
#[derive(Debug, Default, Clone)]
pub struct Accounting {
    done: BTreeMap<(Side, String, u32), Completion>,
    /// First and last event time per sandbox (unix ms).
    seen: BTreeMap<String, (u64, u64)>,
}

impl Accounting {
    /// Reads the log of `dir` (as a stream); an empty accounting when there is no log. A line
    /// that is not an event ends the reading there (what follows a torn line is not trusted).
    pub fn read(dir: &Path, run_id: &str) -> anyhow::Result<Accounting> {
        let path = dir.join(crate::observations::store::OBSERVATIONS_FILE);
        if !path.exists() {
            return Ok(Accounting::default());
        }
        let events = crate::observations::store::events(&path)?.map_while(Result::ok);
        Ok(Accounting::from_events(run_id, events))
    }

    pub fn from_events(
        run_id: &str,
        events: impl IntoIterator<Item = crate::observations::store::StoredEvent>,
    ) -> Accounting {
        let mut accounting = Accounting::default();
        for event in events {
            let seen = accounting.seen.entry(event.sandbox.clone()).or_insert((event.unix_ms, event.unix_ms));
            seen.0 = seen.0.min(event.unix_ms);
            seen.1 = seen.1.max(event.unix_ms);
            let StoredBody::PhaseDone { command_id, status, error } = event.body else { continue };
            let (Some(side), Some((name, trial))) = (side_of(run_id, &event.sandbox), parse_command(&command_id))
            else {
                continue;
            };
            accounting.done.entry((side, name.to_string(), trial)).or_insert(Completion {
                sandbox: event.sandbox,
                ok: status == "ok",
                error,
            });
        }
        accounting
    }

    pub fn completion(&self, side: Side, phase: &str, trial: u32) -> Option<&Completion> {
        self.done.get(&(side, phase.to_string(), trial))
    }

    /// How a slot ended, when it completed.
    pub fn result(&self, slot: &Slot) -> Option<TrialResult> {
        let done = self.completion(slot.side, slot.phase, slot.trial)?;
        Some(match done.ok {
            true => TrialResult::Ok,
            false => TrialResult::Failed {
                cause: if done.error.is_empty() { "failed".into() } else { done.error.clone() },
                lost: false,
            },
        })
    }

    /// The slots of `stages` not complete, in schedule order.
    pub fn missing(&self, stages: &[Stage]) -> Vec<Slot> {
        stages.iter().flat_map(|s| s.lanes.iter().flatten()).filter(|s| self.result(s).is_none()).copied().collect()
    }

    /// Whether an observation of `sandbox` in command `command_id` counts: it belongs to the
    /// slot's first completion, or, for a slot not complete, to a sandbox of this attempt
    /// (`current`: a trial that failed by its sandbox's loss still reports what it got).
    pub fn counts(&self, run_id: &str, sandbox: &str, command_id: &str, current: bool) -> bool {
        let slot = side_of(run_id, sandbox).zip(parse_command(command_id));
        match slot.and_then(|(side, (name, trial))| self.completion(side, name, trial)) {
            Some(done) => done.sandbox == sandbox,
            None => current,
        }
    }

    /// The sandboxes the log heard of.
    pub fn sandboxes(&self) -> impl Iterator<Item = &String> {
        self.seen.keys()
    }
}

/// What a resumed run carries into its walk.
#[derive(Debug, Clone)]
pub struct Resumed {
    pub attempt: u32,
    /// The slots complete before this attempt.
    pub accounting: Accounting,
}

impl Run {
    /// A slot completed by an earlier attempt: how it ended.
    pub(super) fn done_before(&self, slot: &Slot) -> Option<TrialResult> {
        self.resumed.as_ref()?.accounting.result(slot)
    }

    /// A resumed sandbox needs an installation of its own before measure, runtime or ui run in
    /// it: when its first install trial completed in an earlier attempt (and succeeded) and any
    /// of its slots needing an installation is missing, that install runs again here, untimed
    /// (its observations are not counted: the slot's first completion is).
    pub(super) async fn install_resumed(&self, side: &SideRun) -> anyhow::Result<()> {
        let Some(resumed) = &self.resumed else { return Ok(()) };
        let mut stages = schedule::build_for(&self.plan.timed_phases(), self.opts.pairs as usize, self.opts.shard);
        // An adaptive run may grow measure and runtime: their slots up to max_pairs may come.
        if self.adaptive.is_some() {
            let t = &self.plan.trials;
            for (name, planned) in [(phase::MEASURE, t.measure), (phase::RUNTIME, t.runtime)] {
                stages.push(schedule::grow(name, planned, t.max_pairs, self.opts.pairs as usize));
            }
        }
        let mine: Vec<&Slot> = stages
            .iter()
            .flat_map(|s| s.lanes.iter().flatten())
            .filter(|s| s.pair == side.pair && s.side == side.side)
            .collect();
        let Some(first) = mine.iter().find(|s| s.phase == phase::INSTALL) else { return Ok(()) };
        if resumed.accounting.result(first) != Some(TrialResult::Ok) {
            return Ok(());
        }
        let pending =
            mine.iter().any(|s| crate::spec::Plan::needs_install(s.phase) && resumed.accounting.result(s).is_none());
        if !pending {
            return Ok(());
        }
        self.display.status(&side.label, "install (untimed: this sandbox's own installation)");
        let (status, error, _) =
            self.wait_phase(side, phase::INSTALL, first.trial, self.phase_timeout(phase::INSTALL)).await?;
        if status != PhaseStatus::Ok {
            bail!("the untimed install of the resumed sandbox failed: {error}");
        }
        Ok(())
    }
}

/// `sandbench run --resume DIR`: what the command line may say besides the directory. The spec
/// and revisions, when given, must be the run's.
#[derive(Debug, Clone)]
pub struct ResumeOptions {
    pub dir: PathBuf,
    pub spec: Option<PathBuf>,
    pub base: Option<String>,
    pub head: Option<String>,
    pub agent: Option<PathBuf>,
    pub shipping: AgentShipping,
    pub ledger: Option<PathBuf>,
    /// How long to wait for an unreachable engine (`--engine-wait`, this machine's choice).
    pub engine_wait: Duration,
    /// The dead-man window of the agents (`--dead-man`, this machine's choice).
    pub dead_man: Duration,
}

/// Continues the run in `opts.dir` in Docker.
pub async fn resume(opts: ResumeOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<RunResult> {
    let (mark, _) = check(&opts)?;
    let provisioner = Arc::new(DockerProvisioner::connect(4).await?) as Arc<dyn Provisioner>;
    resume_on(opts, mark, cancel, provisioner).await
}

/// Why the directory cannot be resumed, if it cannot: its mark and report otherwise.
pub fn check(opts: &ResumeOptions) -> anyhow::Result<(Mark, Report)> {
    let dir = &opts.dir;
    if !dir.is_dir() {
        bail!("cannot resume {}: no such run directory", dir.display());
    }
    let Some(mark) = Mark::load(dir)? else {
        bail!(
            "cannot resume {}: it has no {MARK_FILE} (not a run directory, or one written before --resume existed)",
            dir.display()
        );
    };
    let report = read_report(dir)?;
    match report.status {
        Status::Running | Status::Abandoned => {}
        Status::Completed => {
            bail!("cannot resume {}: run {} completed; nothing is missing", dir.display(), mark.run_id)
        }
        other => bail!(
            "cannot resume {}: run {} ended {} (only a run whose controller died can be resumed)",
            dir.display(),
            mark.run_id,
            other.as_str()
        ),
    }
    if mark.alive() {
        bail!("cannot resume {}: its controller (pid {}, {}) is still running", dir.display(), mark.pid, mark.owner);
    }
    if let Some(spec) = &opts.spec {
        let given = spec.canonicalize().with_context(|| format!("cannot read the spec {}", spec.display()))?;
        let recorded = mark.spec.canonicalize().unwrap_or_else(|_| mark.spec.clone());
        if given != recorded {
            bail!("cannot resume {}: it ran the spec {}, not {}", dir.display(), recorded.display(), given.display());
        }
    }
    for (given, recorded, name) in [(&opts.base, &mark.base, "--base"), (&opts.head, &mark.head, "--head")] {
        if let Some(given) = given
            && *given != recorded.rev
            && !given.eq_ignore_ascii_case(&recorded.commit)
        {
            bail!("cannot resume {}: {name} was {} ({}), not {given}", dir.display(), recorded.rev, recorded.commit);
        }
    }
    Ok((mark, report))
}

fn read_report(dir: &Path) -> anyhow::Result<Report> {
    let path = dir.join("report.json");
    let bytes = std::fs::read(&path)
        .with_context(|| format!("cannot resume {}: cannot read {}", dir.display(), path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not a sandbench report", path.display()))
}

/// Continues a checked run on `provisioner`: its ledger entry reconciled first (the dead
/// attempt's sandboxes charged), then a new attempt over the missing slots.
pub async fn resume_on(
    opts: ResumeOptions,
    mark: Mark,
    cancel: watch::Receiver<bool>,
    provisioner: Arc<dyn Provisioner>,
) -> anyhow::Result<RunResult> {
    let dir = opts.dir.canonicalize().with_context(|| format!("cannot resolve {}", opts.dir.display()))?;
    if let Some(ledger) = &opts.ledger {
        for line in reconcile(&*provisioner, ledger).await {
            tracing::info!("{line}");
        }
    }
    let out = dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut run_opts = mark.options(out, opts.agent.clone(), opts.shipping, opts.ledger.clone());
    run_opts.engine_wait = opts.engine_wait;
    run_opts.dead_man = opts.dead_man;
    let mut plan = crate::spec::load(&run_opts.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (notes, noise) = super::apply_options(&mut plan, &run_opts)?;
    // The plan is the spec's again (the trials and pairs of the run applied): the spec must not
    // have changed, or the trials kept would not be the trials of this plan.
    if spec_digest(&run_opts.spec)? != mark.spec_sha256 {
        bail!("cannot resume {}: the spec {} changed since the run started", dir.display(), run_opts.spec.display());
    }
    let accounting = Accounting::read(&dir, &mark.run_id)?;
    let mut report = read_report(&dir)?;
    // The dead attempts' sandboxes, as reconciling charged them; without a ledger to reconcile,
    // measured here the same way.
    let mut earlier = std::mem::take(&mut report.sandboxes);
    if report.status != Status::Abandoned {
        earlier = lifetimes(&*provisioner, &dir, &mark.run_id, mark.usd_per_hour).await.0;
    }
    report.status = Status::Running;
    report.finished_at = None;
    report.errors.clear();
    report.warnings.clear();
    report.noise = noise;
    let attempt = mark.attempt + 1;
    let mine = Mark { owner: crate::provision::docker::owner_id(), pid: std::process::id(), attempt, ..mark.clone() };
    mine.write(&dir)?;
    let start = super::Start {
        plan,
        notes,
        dir,
        report,
        base: mark.base,
        head: mark.head,
        resumed: Some(Resumed { attempt, accounting }),
        earlier,
    };
    super::conduct(run_opts, start, cancel, async move { Ok(provisioner) }).await
}

/// Finds the runs of the ledger that never recorded their end and whose controller is gone, and
/// records each as abandoned, charged from its sandboxes' real lifetimes; their `report.json`
/// says so. Returns what it did, and what it could not do, in words. A ledger that does not
/// exist is left alone.
pub async fn reconcile(provisioner: &dyn Provisioner, ledger: &Path) -> Vec<String> {
    if !ledger.exists() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    let result = async {
        let mut ledger = Ledger::open(ledger)?;
        for (run_id, run_dir) in ledger.unfinished_runs()? {
            let dir = PathBuf::from(&run_dir);
            let mark = match Mark::load(&dir) {
                Ok(Some(mark)) if !mark.alive() => mark,
                Ok(_) => continue,
                Err(err) => {
                    lines.push(format!("run {run_id}: {err:#}"));
                    continue;
                }
            };
            let (records, ended) = lifetimes(provisioner, &dir, &run_id, mark.usd_per_hour).await;
            let ended = report::timestamp(ended);
            ledger.finish_run(&run_id, Status::Abandoned.as_str(), &ended, &records)?;
            let usd: f64 = records.iter().map(|r| r.estimated_usd).sum();
            if let Err(err) = abandon_report(&dir, &mark, &ended, records) {
                lines.push(format!("run {run_id}: {err:#}"));
            }
            lines.push(format!(
                "run {run_id}: its controller (pid {}) is gone; recorded as abandoned, ${usd:.4} charged \
                 (continue it with: sandbench run --resume {run_dir})",
                mark.pid
            ));
        }
        anyhow::Ok(())
    }
    .await;
    if let Err(err) = result {
        lines.push(format!("cannot reconcile the ledger {}: {err:#}", ledger.display()));
    }
    lines
}

/// Every sandbox of a dead run with its lifetime: from the engine while its container exists
/// (created, and `State.FinishedAt`, or now while it still runs), else from the run directory
/// (its first and last events). Also when the run was last active.
async fn lifetimes(
    provisioner: &dyn Provisioner,
    dir: &Path,
    run_id: &str,
    usd_per_hour: f64,
) -> (Vec<SandboxRecord>, SystemTime) {
    let accounting = Accounting::read(dir, run_id).unwrap_or_default();
    let containers = provisioner.list(Some((labels::RUN, run_id))).await.unwrap_or_default();
    let ids: BTreeSet<&String> = accounting.sandboxes().chain(containers.iter().map(|c| &c.name)).collect();
    let ms = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let mut last = None::<SystemTime>;
    let mut records = Vec::new();
    for id in ids {
        let (start, end) = match containers.iter().find(|c| &c.name == id) {
            Some(c) => {
                let created = UNIX_EPOCH + Duration::from_secs(u64::try_from(c.created).unwrap_or(0));
                (created, provisioner.finished_at(&c.name).await.unwrap_or_else(SystemTime::now))
            }
            None => match accounting.seen.get(id) {
                Some(&(first, latest)) => (ms(first), ms(latest)),
                None => continue,
            },
        };
        let seconds = end.duration_since(start).unwrap_or_default().as_secs_f64();
        last = Some(last.map_or(end, |l| l.max(end)));
        records.push(SandboxRecord {
            id: id.clone(),
            role: role_of(run_id, id).unwrap_or_default().to_string(),
            created_at: report::timestamp(start),
            removed_at: None,
            seconds,
            deleted: !containers.iter().any(|c| &c.name == id),
            estimated_usd: seconds / 3600.0 * usd_per_hour,
            peak_memory_bytes: 0,
            cost: None,
        });
    }
    (records, last.unwrap_or_else(SystemTime::now))
}

/// Says in the run's `report.json` (and the other formats) that it was abandoned.
fn abandon_report(dir: &Path, mark: &Mark, ended: &str, records: Vec<SandboxRecord>) -> anyhow::Result<()> {
    let mut report = read_report(dir)?;
    report.status = Status::Abandoned;
    report.finished_at = Some(ended.to_string());
    report.sandboxes = records;
    report.errors.push(format!(
        "The run's controller (pid {}) died before the run ended; continue it with: sandbench run --resume {}",
        mark.pid,
        dir.display()
    ));
    super::write_reports(dir, &mut report)
}

#[cfg(test)]
mod tests {
    use sandbench_proto::plan::phase;

    use super::*;
    use crate::observations::store::StoredEvent;

    const RUN: &str = "20261130-120000-abcdef";

    fn event(sandbox: &str, unix_ms: u64, body: StoredBody) -> StoredEvent {
        StoredEvent { sandbox: format!("sandbench-{RUN}-{sandbox}"), seq: unix_ms, unix_ms, body }
    }

    fn done(sandbox: &str, at: u64, command: &str, status: &str) -> StoredEvent {
        let body = StoredBody::PhaseDone { command_id: command.into(), status: status.into(), error: String::new() };
        event(sandbox, at, body)
    }

    fn observation(sandbox: &str, at: u64, command: &str) -> StoredEvent {
        let (name, trial) = parse_command(command).unwrap();
        let body = StoredBody::Observation {
            command_id: command.into(),
            metric: name.into(),
            trial,
            value: Some(1.0),
            error: None,
            unit: String::new(),
            sample: 0,
        };
        event(sandbox, at, body)
    }

    fn stages() -> Vec<Stage> {
        schedule::build(&[(phase::INSTALL, 2), (phase::MEASURE, 3), (phase::RUNTIME, 0)], 1)
    }

    fn names(slots: &[Slot]) -> Vec<String> {
        slots.iter().map(|s| format!("{}{}-{}", s.phase, s.trial, s.side.as_str())).collect()
    }

    #[test]
    fn a_slot_is_complete_with_its_phase_done_and_a_cut_trial_is_missing() {
        // Killed during head's measure trial 1: its observation is in the log, its phase_done is not.
        let log = vec![
            done("base", 1, "prepare-0", "ok"),
            done("head", 2, "prepare-0", "ok"),
            done("base", 3, "install-0", "ok"),
            done("head", 4, "install-0", "ok"),
            done("head", 5, "install-1", "failed"),
            done("base", 6, "install-1", "ok"),
            observation("base", 7, "measure-0"),
            done("base", 8, "measure-0", "ok"),
            done("head", 9, "measure-0", "ok"),
            observation("head", 10, "measure-1"),
        ];
        let accounting = Accounting::from_events(RUN, log);
        assert_eq!(
            names(&accounting.missing(&stages())),
            ["measure1-head", "measure1-base", "measure2-base", "measure2-head"]
        );
        // A failed trial counts as done (its failure is not retried) and keeps its result.
        let failed = Slot { phase: phase::INSTALL, trial: 1, pair: 0, side: Side::Head };
        assert!(matches!(accounting.result(&failed), Some(TrialResult::Failed { lost: false, .. })));
        let sandbox = |role: &str| format!("sandbench-{RUN}-{role}");
        // The cut trial's observation is not counted; a complete one is.
        assert!(!accounting.counts(RUN, &sandbox("head"), "measure-1", false));
        assert!(accounting.counts(RUN, &sandbox("base"), "measure-0", false));
    }

    #[test]
    fn the_first_completion_counts_and_a_resumed_sandbox_s_reinstall_does_not() {
        let log = vec![
            done("base", 1, "install-0", "ok"),
            observation("base", 2, "measure-0"),
            // Resumed: base-r2 installs again (untimed), then runs the missing measure trial.
            observation("base-r2", 10, "install-0"),
            done("base-r2", 11, "install-0", "ok"),
            observation("base-r2", 12, "measure-0"),
            done("base-r2", 13, "measure-0", "ok"),
        ];
        let accounting = Accounting::from_events(RUN, log);
        let sandbox = |role: &str| format!("sandbench-{RUN}-{role}");
        assert_eq!(accounting.completion(Side::Base, phase::INSTALL, 0).unwrap().sandbox, sandbox("base"));
        assert!(!accounting.counts(RUN, &sandbox("base-r2"), "install-0", true));
        assert!(accounting.counts(RUN, &sandbox("base"), "install-0", false));
        assert!(!accounting.counts(RUN, &sandbox("base"), "measure-0", false), "cut in the dead attempt");
        assert!(accounting.counts(RUN, &sandbox("base-r2"), "measure-0", true));
        // A trial of this attempt that never completed (its sandbox lost) still counts.
        assert!(accounting.counts(RUN, &sandbox("base-r2"), "measure-2", true));
        assert!(!accounting.counts(RUN, &sandbox("base"), "measure-2", false));
    }

    #[test]
    fn pairs_and_attempts_are_told_from_sandbox_ids() {
        assert_eq!(side_of(RUN, &format!("sandbench-{RUN}-head1-r3")), Some(Side::Head));
        assert_eq!(side_of(RUN, &format!("sandbench-{RUN}-base")), Some(Side::Base));
        assert_eq!(side_of(RUN, "sandbench-other-base"), None);
        assert_eq!(role_of(RUN, &format!("sandbench-{RUN}-base0-r2")), Some("base0-r2"));
        assert_eq!(role("head0", 1), "head0");
        assert_eq!(role("head0", 2), "head0-r2");
        // With two pairs, a slot is complete whichever pair's sandbox ran it.
        let stages = schedule::build(&[(phase::MEASURE, 2)], 2);
        let log = vec![done("base1", 1, "measure-1", "ok"), done("head0-r2", 2, "measure-0", "ok")];
        let accounting = Accounting::from_events(RUN, log);
        assert_eq!(names(&accounting.missing(&stages)), ["measure0-base", "measure1-head"]);
    }

    #[test]
    fn the_command_line_takes_a_run_directory_instead_of_a_spec_and_revisions() {
        use clap::Parser;
        let parse = |args: &[&str]| crate::cli::Cli::try_parse_from([&["sandbench", "run"], args].concat());
        let cli = parse(&["--resume", "runs/x"]).unwrap();
        let crate::cli::Command::Run(args) = cli.command else { panic!() };
        assert_eq!(args.resume, Some(PathBuf::from("runs/x")));
        assert!(args.spec.is_none() && args.base.is_none());
        assert!(parse(&["--resume", "runs/x", "bench.toml", "--base", "a", "--head", "b"]).is_ok());
        // The run's own trials, pairs and budget are kept: changing them is a usage error.
        for extra in [["--trials", "3"], ["--pairs", "2"], ["--budget", "1"]] {
            let err = parse(&[&["--resume", "runs/x"][..], &extra[..]].concat()).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{extra:?}");
        }
        // Without --resume, the spec and both revisions are required.
        assert!(parse(&["bench.toml", "--base", "a"]).is_err());
        assert!(parse(&["--base", "a", "--head", "b"]).is_err());
    }

    #[test]
    fn an_empty_log_misses_every_slot() {
        let all = Accounting::default().missing(&stages());
        assert_eq!(all.len(), 2 * (2 + 3));
    }

    #[test]
    fn a_mark_round_trips_and_tells_a_dead_controller() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Mark::load(dir.path()).unwrap(), None);
        let revision = |c: &str| Revision { rev: c.into(), commit: c.repeat(40) };
        let opts = RunOptions {
            trials: Some(3),
            run_timeout: Duration::from_secs(60),
            engine_wait: Duration::from_secs(10),
            ..RunOptions::new("bench.toml", "a", "b", dir.path())
        };
        let mark = Mark::new(&opts, RUN, &revision("a"), &revision("b"), 0.1);
        assert!(mark.spec.is_absolute() && mark.alive(), "this process runs");
        mark.write(dir.path()).unwrap();
        assert_eq!(Mark::load(dir.path()).unwrap().as_ref(), Some(&mark));
        // A pid whose start time differs is another process: the controller is gone.
        let (host, rest) = mark.owner.split_once('/').unwrap();
        let pid = rest.split('/').next().unwrap();
        let dead = Mark { owner: format!("{host}/{pid}/1"), ..mark };
        assert!(!dead.alive());
    }

    /// The fake product's spec for these tests.
    fn spec_toml() -> String {
        spec_with("install = 2\nmeasure = 4\nruntime = 2\nfailure_limit = 2")
    }

    fn spec_with(trials: &str) -> String {
        crate::provision::fake::spec_text(
            trials,
            r#"[install]
command = "sh install.sh"

[measure]
startup = ["product"]
"#,
        )
    }

    const FAKE_RUN: &str = "20260101-000000-fake";

    /// A completed run on the fake provisioner, then cut back as a SIGKILL mid-measure would
    /// leave it: the log up to head's measure trial 1 (its observations, not its phase_done),
    /// report.json running, the ledger entry unfinished, controller.json naming a dead process.
    async fn killed_run() -> (tempfile::TempDir, RunOptions, PathBuf, Mark) {
        killed_run_of(&spec_toml(), crate::provision::fake::Script::for_plan, "measure-1").await
    }

    /// A run of `spec` on the fake answering from `script`, cut back as a SIGKILL in head's
    /// trial `cut` (`measure-1`) would leave it.
    async fn killed_run_of(
        spec_text: &str,
        script: impl Fn(&crate::spec::Plan) -> crate::provision::fake::Script,
        cut: &str,
    ) -> (tempfile::TempDir, RunOptions, PathBuf, Mark) {
        use crate::provision::fake::FakeProvisioner;
        let tmp = tempfile::tempdir().unwrap();
        let spec = tmp.path().join("bench.toml");
        std::fs::write(&spec, spec_text).unwrap();
        let plan = crate::spec::load(&spec).unwrap_or_else(|e| panic!("{e}"));
        let opts = RunOptions {
            run_timeout: Duration::from_secs(120),
            ledger: Some(tmp.path().join("ledger.sqlite")),
            engine_wait: Duration::from_secs(10),
            ..RunOptions::new(spec, "v1", "v2", tmp.path().join("runs"))
        };
        let fake = Arc::new(FakeProvisioner::new(script(&plan)));
        let connect = async move { Ok(fake as Arc<dyn Provisioner>) };
        let result =
            super::super::run_on(opts.clone(), watch::channel(false).1, connect, FAKE_RUN.into()).await.unwrap();
        assert_eq!(result.status, Status::Completed, "{:?}", result.report.errors);
        let dir = result.dir;
        let log = dir.join(crate::observations::store::OBSERVATIONS_FILE);
        let text = std::fs::read_to_string(&log).unwrap();
        let head = format!("sandbench-{FAKE_RUN}-head");
        let at = text
            .lines()
            .position(|l| l.contains(&head) && l.contains("\"phase_done\"") && l.contains(&format!("\"{cut}\"")))
            .unwrap();
        let kept: Vec<&str> = text.lines().take(at).collect();
        assert!(kept.last().is_some_and(|l| l.contains(cut)), "head's {cut} is cut mid-way");
        std::fs::write(&log, kept.join("\n") + "\n").unwrap();
        let mut report = read_report(&dir).unwrap();
        report.status = Status::Running;
        report.sandboxes.clear();
        report.finished_at = None;
        super::super::write_reports(&dir, &mut report).unwrap();
        assert!(Ledger::open(opts.ledger.as_ref().unwrap()).unwrap().reopen_run(FAKE_RUN).unwrap());
        let mut mark = Mark::load(&dir).unwrap().unwrap();
        let (host, rest) = mark.owner.split_once('/').unwrap();
        mark.owner = format!("{host}/{}/1", rest.split('/').next().unwrap());
        mark.write(&dir).unwrap();
        (tmp, opts, dir, mark)
    }

    fn resume_options(dir: &Path, ledger: Option<PathBuf>) -> ResumeOptions {
        ResumeOptions {
            dir: dir.to_path_buf(),
            spec: None,
            base: None,
            head: None,
            agent: None,
            shipping: AgentShipping::Bind,
            ledger,
            engine_wait: Duration::from_secs(10),
            dead_man: crate::observations::server::DEFAULT_DEAD_MAN,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_run_is_resumed_on_the_fake_with_every_trial_once() {
        use crate::provision::fake::{FakeProvisioner, Script};
        let (_tmp, opts, dir, mark) = killed_run().await;
        let ledger = opts.ledger.clone().unwrap();
        // Refused with what was given wrong.
        let mut wrong = resume_options(&dir, Some(ledger.clone()));
        wrong.base = Some("v9".into());
        assert!(check(&wrong).unwrap_err().to_string().contains("--base was v1"));
        let mut wrong = resume_options(&dir, None);
        wrong.spec = Some(dir.join("plan.json"));
        assert!(check(&wrong).unwrap_err().to_string().contains("it ran the spec"));
        let (checked, _) = check(&resume_options(&dir, Some(ledger.clone()))).unwrap();
        assert_eq!(checked, mark);

        let plan = crate::spec::load(&opts.spec).unwrap();
        let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
        let result =
            resume_on(resume_options(&dir, Some(ledger.clone())), mark, watch::channel(false).1, fake).await.unwrap();
        let report = &result.report;
        assert_eq!(result.status, Status::Completed, "{:?}", report.errors);
        assert!(report.complete());
        for side in [&report.base_side, &report.head_side] {
            for (metric, samples) in &side.metrics {
                let trials: Vec<u32> = samples.iter().map(|s| s.trial).collect();
                let expected = report.expected.get(metric).copied().unwrap_or(1);
                assert_eq!(trials, (0..expected).collect::<Vec<_>>(), "{metric}");
            }
        }
        // Only the missing slots ran in the new sandboxes (after prepare, and head's untimed
        // install before its measure trials).
        let events =
            crate::observations::store::read_events(&dir.join(crate::observations::store::OBSERVATIONS_FILE)).unwrap();
        let started = |role: &str| -> Vec<String> {
            events
                .iter()
                .filter(|e| e.sandbox == format!("sandbench-{FAKE_RUN}-{role}"))
                .filter_map(|e| match &e.body {
                    StoredBody::PhaseStarted { command_id, .. } => Some(command_id.clone()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            started("head-r2"),
            ["prepare-0", "install-0", "measure-1", "measure-2", "measure-3", "runtime-0", "runtime-1"]
        );
        assert_eq!(
            started("base-r2"),
            ["prepare-0", "install-0", "measure-1", "measure-2", "measure-3", "runtime-0", "runtime-1"]
        );
        // Charged for the sandboxes of both attempts; the ledger entry completed.
        assert_eq!(report.sandboxes.len(), 4);
        let (row, _) = Ledger::open(&ledger).unwrap().run(FAKE_RUN).unwrap().unwrap();
        assert_eq!((row.status.as_str(), row.sandboxes), ("completed", 4));
        // Nothing is left to resume.
        let err = check(&resume_options(&dir, None)).unwrap_err().to_string();
        assert!(err.contains("completed; nothing is missing"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_adaptive_run_killed_while_adding_pairs_is_resumed_to_the_same_look() {
        use crate::provision::fake::{FakeProvisioner, Script};
        // Looks at 3, 6 and 9 pairs; head's start swings in the planned trials, so the run
        // grows measure; it is killed in head's measure trial 4, which only growing runs.
        let spec = spec_with("install = 1\nmeasure = 3\nruntime = 2\nmax_pairs = 9\nfailure_limit = 2");
        let script = |plan: &crate::spec::Plan| super::super::tests::swinging_start(Script::for_plan(plan));
        let (_tmp, opts, dir, mark) = killed_run_of(&spec, script, "measure-4").await;
        let plan = crate::spec::load(&opts.spec).unwrap();
        let fake = Arc::new(FakeProvisioner::new(script(&plan)));
        let result =
            resume_on(resume_options(&dir, opts.ledger.clone()), mark, watch::channel(false).1, fake).await.unwrap();
        let report = &result.report;
        assert_eq!(result.status, Status::Completed, "{:?}", report.errors);
        assert_eq!(report.sequential.as_ref().map(|s| s.look), Some(3));
        for side in [&report.base_side, &report.head_side] {
            let trials: Vec<u32> = side.metrics["cold"].iter().map(|s| s.trial).collect();
            assert_eq!(trials, (0..9).collect::<Vec<_>>(), "every grown trial once");
        }
        // The resumed head ran only what was missing: its own installation (untimed), then
        // measure from the cut trial on; runtime was done.
        let events =
            crate::observations::store::read_events(&dir.join(crate::observations::store::OBSERVATIONS_FILE)).unwrap();
        let started: Vec<String> = events
            .iter()
            .filter(|e| e.sandbox == format!("sandbench-{FAKE_RUN}-head-r2"))
            .filter_map(|e| match &e.body {
                StoredBody::PhaseStarted { command_id, .. } => Some(command_id.clone()),
                _ => None,
            })
            .collect();
        let grown: Vec<String> = (4..9).map(|t| format!("measure-{t}")).collect();
        assert_eq!(started, [["prepare-0".to_string(), "install-0".into()].as_slice(), grown.as_slice()].concat());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_run_is_reconciled_as_abandoned_and_a_live_one_is_left_alone() {
        use crate::provision::fake::{FakeProvisioner, Script};
        let (_tmp, opts, dir, mark) = killed_run().await;
        let ledger = opts.ledger.clone().unwrap();
        let fake = FakeProvisioner::new(Script::default());
        // While its controller runs (this process), nothing is done, and resuming is refused.
        let alive = Mark { owner: crate::provision::docker::owner_id(), ..mark.clone() };
        alive.write(&dir).unwrap();
        assert!(reconcile(&fake, &ledger).await.is_empty());
        assert!(check(&resume_options(&dir, None)).unwrap_err().to_string().contains("is still running"));
        mark.write(&dir).unwrap();
        let lines = reconcile(&fake, &ledger).await;
        assert!(lines.len() == 1 && lines[0].contains("abandoned") && lines[0].contains("--resume"), "{lines:?}");
        let (row, _) = Ledger::open(&ledger).unwrap().run(FAKE_RUN).unwrap().unwrap();
        assert_eq!((row.status.as_str(), row.sandboxes), ("abandoned", 2));
        // The containers are gone: charged from the first to the last event each sent.
        assert!(row.seconds >= 0.0 && row.finished_at.is_some());
        let report = read_report(&dir).unwrap();
        assert_eq!(report.status, Status::Abandoned);
        assert!(report.errors.iter().any(|e| e.contains("sandbench run --resume")));
        assert!(reconcile(&fake, &ledger).await.is_empty(), "reconciled once");
        // An abandoned run can be resumed; a directory that is not a run cannot.
        assert!(check(&resume_options(&dir, None)).is_ok());
        let err = check(&resume_options(&dir.join("nope"), None)).unwrap_err().to_string();
        assert!(err.contains("no such run directory"), "{err}");
        let err = check(&resume_options(dir.parent().unwrap(), None)).unwrap_err().to_string();
        assert!(err.contains("has no controller.json"), "{err}");
        assert!(reconcile(&fake, &dir.join("no-ledger.sqlite")).await.is_empty());
        assert!(!dir.join("no-ledger.sqlite").exists(), "a missing ledger is not created");
    }
}
