//! `sandbench run`: a base-vs-head comparison from validated plan to written reports.
//!
//! Provision base and head concurrently, prepare both in parallel (untimed), then install →
//! measure → runtime with trials interleaved ABBA (base, head, head, base, …), one sandbox timed
//! at a time per pair; with several pairs, each pair is pinned to its own CPUs and trials are
//! split between them. Dependency gate, identical-failure limit, step timeouts, run timeout,
//! budget and Ctrl-C/SIGTERM all end in the same teardown, and the report is written whatever
//! happened.

mod display;
mod output;
mod usage;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use sandbench_proto::plan::{AgentPlan, phase};
use sandbench_proto::v1::PhaseStatus;
use tokio::sync::watch;

pub use display::Display;
pub use output::{NoiseProfile, rerender, write_reports};
use output::{collect, skeleton};
use usage::Meter;

use crate::provision::{AgentShipping, DockerProvisioner, Resources, SandboxRequest};
use crate::report::{self, Report, Revision, SandboxRecord, Side, Status};
use crate::sandbox::{self, LiveSandbox};
use crate::server::{Hub, HubConfig};
use crate::spec::{Plan, SourceSettings};

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub spec: PathBuf,
    pub base: String,
    pub head: String,
    pub out: PathBuf,
    /// Overrides the measure, runtime and transport trial counts.
    pub trials: Option<u32>,
    pub pairs: u32,
    pub budget_usd: Option<f64>,
    pub run_timeout: Duration,
    pub agent: Option<PathBuf>,
    pub shipping: AgentShipping,
    /// A noise profile from an A/A run (`noise.json`): its relative noise replaces the spec's
    /// relative floors.
    pub noise: Option<PathBuf>,
    /// Rate card overrides (USD per vCPU-hour, per GiB-hour of memory, per GiB-hour of disk).
    pub rates: RateOverrides,
    /// The cost ledger to record the run in (None: no ledger).
    pub ledger: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct RateOverrides {
    pub cpu_usd_per_hour: Option<f64>,
    pub memory_usd_per_gb_hour: Option<f64>,
    pub disk_usd_per_gb_hour: Option<f64>,
}

pub struct RunResult {
    pub status: Status,
    pub dir: PathBuf,
    pub report: Report,
}

/// Why the run stopped early.
#[derive(Debug, Clone, PartialEq)]
enum Stop {
    Canceled(String),
    Failed(String),
}

/// One sandbox of a pair and what it went through.
struct SideRun {
    role: &'static str,
    label: String,
    pair: usize,
    live: Option<LiveSandbox>,
    /// Prepared and ready for timed phases.
    ready: bool,
    /// Its first install trial succeeded (the gate of measure and runtime).
    installed: Option<bool>,
    meter: Arc<Meter>,
}

/// Failures of one side in one phase: the last cause and how many times in a row.
#[derive(Default)]
struct Streak {
    cause: String,
    count: u32,
    blocked: bool,
}

struct Run {
    plan: Plan,
    opts: RunOptions,
    dir: PathBuf,
    provisioner: Arc<DockerProvisioner>,
    hub: Hub,
    agent_plans: BTreeMap<&'static str, AgentPlan>,
    display: Display,
    errors: Mutex<Vec<String>>,
    streaks: Mutex<BTreeMap<(&'static str, &'static str), Streak>>,
    started: Instant,
    /// Set once the run must stop: canceled, out of time or out of budget.
    halt: watch::Sender<Option<Stop>>,
}

const MAX_ERRORS: usize = 30;

/// Runs the comparison. Only errors before the run directory exists are returned as `Err`;
/// everything after ends in a report.
pub async fn run(opts: RunOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<RunResult> {
    let mut plan = crate::spec::load(&opts.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(n) = opts.trials {
        if !(1..=100).contains(&n) {
            bail!("--trials must be from 1 to 100, got {n}");
        }
        plan.trials.measure = n;
        plan.trials.runtime = n;
        if plan.trials.transport > 0 {
            plan.trials.transport = n;
        }
    }
    // The sandboxes expire after the longest this run can take: the plan's worst case with the
    // trials asked for here, or the run timeout (the run is halted then), and the margin for
    // teardown. The spec's ttl is at least the worst case (`check` refuses less).
    plan.sandbox.ttl = crate::spec::default_ttl(plan.worst_case().min(opts.run_timeout));
    plan.check_host()?;
    if opts.pairs == 0 || opts.pairs > 8 {
        bail!("--pairs must be from 1 to 8, got {}", opts.pairs);
    }
    if let Some(b) = opts.budget_usd {
        if !(b.is_finite() && b > 0.0) {
            bail!("--budget must be a positive number of USD, got {b}");
        }
        plan.cost.budget_usd = Some(b);
    }
    for (value, field, name) in [
        (opts.rates.cpu_usd_per_hour, &mut plan.cost.cpu_usd_per_hour, "--cpu-usd-per-hour"),
        (opts.rates.memory_usd_per_gb_hour, &mut plan.cost.memory_usd_per_gb_hour, "--memory-usd-per-gb-hour"),
        (opts.rates.disk_usd_per_gb_hour, &mut plan.cost.disk_usd_per_gb_hour, "--disk-usd-per-gb-hour"),
    ] {
        if let Some(v) = value {
            if !(v.is_finite() && v >= 0.0) {
                bail!("{name} must be a non-negative number, got {v}");
            }
            *field = v;
        }
    }
    let mut noise = None;
    if let Some(path) = &opts.noise {
        let profile = NoiseProfile::load(path)?;
        if profile.spec != plan.name {
            bail!("the noise profile {} was measured for spec {:?}, not {:?}", path.display(), profile.spec, plan.name);
        }
        noise = Some(profile);
    }
    let (base, head) = resolve_revisions(&plan, &opts.base, &opts.head).await?;
    let run_id = run_id();
    let dir = opts.out.join(&run_id);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Absolute: the socket folder is bind-mounted into the sandboxes by its path.
    let dir = dir.canonicalize().with_context(|| format!("cannot resolve {}", dir.display()))?;
    std::fs::write(dir.join("plan.json"), serde_json::to_vec_pretty(&plan)?)?;
    if let Err(err) = crate::logging::to_file(&dir.join("controller.log")) {
        tracing::warn!("cannot write {}: {err}", dir.join("controller.log").display());
    }
    tracing::info!(run = %run_id, spec = %plan.name, base = %opts.base, head = %opts.head, "run started");
    let display = Display::new();
    display.line(&format!(
        "run {run_id}: {} — base {} ({}) vs head {} ({})",
        plan.name,
        base.rev,
        short(&base.commit),
        head.rev,
        short(&head.commit)
    ));
    let mut report = skeleton(&plan, &run_id, base.clone(), head.clone());
    if let Some(warning) = noise.as_ref().and_then(|n| n.warning(plan.rule)) {
        display.line(&warning);
    }
    report.noise = noise;
    write_reports(&dir, &mut report)?;
    // The ledger entry is made first, so a run killed from here on shows as unfinished.
    let mut ledger = match &opts.ledger {
        Some(path) => {
            let ledger = crate::ledger::Ledger::open(path)?;
            let repository = match &plan.source {
                SourceSettings::Local { repository } => {
                    repository.canonicalize().unwrap_or(repository.clone()).display().to_string()
                }
                SourceSettings::Url { url } => url.clone(),
                SourceSettings::None => String::new(),
            };
            ledger.begin_run(&crate::ledger::RunStart {
                run_id: run_id.clone(),
                spec: plan.name.clone(),
                repository,
                base_rev: base.rev.clone(),
                base_commit: base.commit.clone(),
                head_rev: head.rev.clone(),
                head_commit: head.commit.clone(),
                started_at: report.started_at.clone(),
                run_dir: dir.display().to_string(),
            })?;
            Some(ledger)
        }
        None => None,
    };

    let outcome = execute(&plan, &opts, &dir, &display, cancel, &base, &head).await;
    let Finished { status, sides, records, mut errors, warnings } = match outcome {
        Ok(finished) => finished,
        Err(err) => Finished {
            status: Status::Failed,
            sides: BTreeMap::new(),
            records: Vec::new(),
            errors: vec![format!("{err:#}")],
            warnings: Vec::new(),
        },
    };
    errors.truncate(MAX_ERRORS);
    report.status = status;
    report.errors = errors;
    report.warnings = warnings;
    // The engine sets no disk quota on a sandbox: the report says so beside the size it prints.
    report
        .warnings
        .insert(0, format!("disk_gb ({} GB) is not enforced: sandboxes get no disk quota", plan.sandbox.disk_gb));
    report.sandboxes = records;
    report.finished_at = Some(report::timestamp(SystemTime::now()));
    if let Some(side) = sides.get("base") {
        report.base_side = side.clone();
    }
    if let Some(side) = sides.get("head") {
        report.head_side = side.clone();
    }
    if report.status == Status::Completed && !report.complete() {
        report.status = Status::Partial;
    }
    if let Some(ledger) = ledger.as_mut()
        && let Err(err) = ledger.finish_run(
            &run_id,
            report.status.as_str(),
            report.finished_at.as_deref().unwrap_or_default(),
            &report.sandboxes,
        )
    {
        report.warnings.push(format!("cannot record the run in the ledger {}: {err:#}", ledger.path().display()));
    }
    write_reports(&dir, &mut report)?;
    if base.commit == head.commit && report.status == Status::Completed {
        let profile = NoiseProfile::from_report(&report);
        std::fs::write(dir.join("noise.json"), serde_json::to_vec_pretty(&profile)?)?;
        display.line(&format!(
            "A/A run: noise profile written to {} (use it with --noise)",
            dir.join("noise.json").display()
        ));
    }
    display.line(&format!("run {run_id} {}: reports in {}", report.status.as_str(), dir.display()));
    tracing::info!(run = %run_id, status = report.status.as_str(), "run finished");
    crate::logging::close_file();
    Ok(RunResult { status: report.status, dir, report })
}

/// What `execute` ends with.
struct Finished {
    status: Status,
    /// Samples and facts per role (`base`, `head`).
    sides: BTreeMap<String, Side>,
    records: Vec<SandboxRecord>,
    errors: Vec<String>,
    warnings: Vec<String>,
}

async fn execute(
    plan: &Plan,
    opts: &RunOptions,
    dir: &Path,
    display: &Display,
    cancel: watch::Receiver<bool>,
    base: &Revision,
    head: &Revision,
) -> anyhow::Result<Finished> {
    let provisioner = Arc::new(DockerProvisioner::connect(4).await?);
    for r in provisioner.reap().await? {
        display.line(&format!("removed leftover sandbox {} ({})", r.name, r.reason));
    }
    provisioner.ensure_image(&plan.sandbox.image, &mut |line| display.line(line)).await?;
    let agent = crate::agent_binary::locate(opts.agent.as_deref())?;
    let socket_dir = dir.join("sock");
    std::fs::create_dir_all(&socket_dir)?;
    std::fs::set_permissions(&socket_dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let hub = Hub::open(dir, HubConfig::default())?;
    let server = hub.serve(&socket_dir.join(sandbench_proto::SOCKET_NAME)).await?;
    let run_id = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();

    let agent_plans =
        BTreeMap::from([("base", plan.agent_plan(&base.commit)), ("head", plan.agent_plan(&head.commit))]);
    let run = Run {
        plan: plan.clone(),
        opts: opts.clone(),
        dir: dir.to_path_buf(),
        provisioner: provisioner.clone(),
        hub: hub.clone(),
        agent_plans,
        display: display.clone(),
        errors: Mutex::new(Vec::new()),
        streaks: Mutex::new(BTreeMap::new()),
        started: Instant::now(),
        halt: watch::Sender::new(None),
    };
    let cpusets = cpusets(opts.pairs as usize);
    // Ctrl-C / SIGTERM, the run timeout and the budget are watched continuously, not only
    // between trials.
    let watcher = {
        let halt = run.halt.clone();
        let mut cancel = cancel.clone();
        let timeout = opts.run_timeout;
        let started = run.started;
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.wait_for(|c| *c) => { halt.send_replace(Some(Stop::Canceled("The run was canceled".into()))); }
                _ = tokio::time::sleep(timeout.saturating_sub(started.elapsed())) => {
                    halt.send_replace(Some(Stop::Failed("Benchmark exceeded its runtime limit".into())));
                }
            }
        })
    };
    let mut sides: Vec<SideRun> = Vec::new();
    for pair in 0..opts.pairs as usize {
        for role in ["base", "head"] {
            let label = if opts.pairs == 1 { role.to_string() } else { format!("{role}{pair}") };
            sides.push(SideRun { role, label, pair, live: None, ready: false, installed: None, meter: Meter::new() });
        }
    }

    let budget = plan.cost.budget_usd.map(|budget| {
        let halt = run.halt.clone();
        let meters: Vec<Arc<Meter>> = sides.iter().map(|s| s.meter.clone()).collect();
        let hourly = plan.hourly_usd();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let spent: f64 = meters.iter().map(|m| m.start.elapsed().as_secs_f64() / 3600.0 * hourly).sum();
                if spent >= budget {
                    halt.send_if_modified(|h| {
                        let first = h.is_none();
                        if first {
                            *h = Some(Stop::Failed("Reached the estimated run budget".into()));
                        }
                        first
                    });
                    return;
                }
            }
        })
    });
    let stop = run.drive(&mut sides, &run_id, &agent, &cpusets).await;
    watcher.abort();
    if let Some(budget) = budget {
        budget.abort();
    }

    // Teardown, whatever happened.
    let mut records = Vec::new();
    let mut warnings = Vec::new();
    for side in &sides {
        let Some(live) = &side.live else { continue };
        display.status(&side.label, "teardown");
        side.meter.mark("teardown");
        let down = sandbox::teardown(&provisioner, &hub, dir, &live.sandbox).await;
        side.meter.stop_sampling();
        let seconds = down.lifetime.as_secs_f64();
        if let Some(err) = &down.removal_error {
            warnings.push(format!("{}: sandbox cleanup failed: {err}", side.label));
        }
        let cost = crate::cost::sandbox_cost(
            &plan.cost,
            plan.allocation(),
            side.meter.phases(),
            down.removal_error.is_some(),
            plan.sandbox.ttl.as_secs_f64(),
        );
        if down.log_path.is_none() {
            warnings.push(format!("{}: cannot collect the agent log", side.label));
        }
        display.done(&side.label, if down.removal_error.is_none() { "removed" } else { "removal failed" });
        records.push(SandboxRecord {
            id: live.sandbox.id.clone(),
            role: side.label.clone(),
            created_at: report::timestamp(live.sandbox.requested_at),
            removed_at: down.removal_error.is_none().then(|| report::timestamp(SystemTime::now())),
            seconds: cost.charged_seconds.max(seconds),
            deleted: down.removal_error.is_none(),
            estimated_usd: cost.allocation_usd,
            peak_memory_bytes: side.meter.peak_memory_bytes(),
            cost: Some(cost),
        });
    }
    for leftover in provisioner.list(Some((crate::provision::labels::RUN, &run_id))).await.unwrap_or_default() {
        if let Err(err) = provisioner.remove(&leftover.id).await {
            warnings.push(format!("{}: sandbox cleanup failed: {err}", leftover.name));
        }
    }
    server.stop().await;
    hub.close().await;
    let _ = std::fs::remove_dir_all(&socket_dir);

    let mut errors = run.errors.lock().map(|e| e.clone()).unwrap_or_default();
    let sides_data = collect(dir, &sides)?;
    let status = match stop {
        Some(Stop::Canceled(why)) => {
            errors.push(why);
            Status::Canceled
        }
        Some(Stop::Failed(why)) => {
            errors.push(why);
            Status::Failed
        }
        None if !sides.iter().any(|s| s.ready) => Status::Failed,
        None => Status::Completed,
    };
    Ok(Finished { status, sides: sides_data, records, errors, warnings })
}

impl Run {
    fn error(&self, text: String) {
        tracing::warn!("{text}");
        self.display.line(&format!("error: {text}"));
        if let Ok(mut errors) = self.errors.lock()
            && errors.len() < MAX_ERRORS
        {
            errors.push(text.chars().take(500).collect());
        }
    }

    fn check(&self) -> Option<Stop> {
        self.halt.borrow().clone()
    }

    async fn drive(
        &self,
        sides: &mut [SideRun],
        run_id: &str,
        agent: &Path,
        cpusets: &[Option<String>],
    ) -> Option<Stop> {
        // Provision every sandbox concurrently.
        self.display.line(&format!("provisioning {} sandboxes", sides.len()));
        let launches = sides.iter().map(|side| {
            let request = SandboxRequest {
                run_id: run_id.to_string(),
                role: side.label.clone(),
                image: self.plan.sandbox.image.clone(),
                resources: Resources {
                    cpus: self.plan.sandbox.cpus,
                    cpuset: cpusets[side.pair].clone().or(self.plan.sandbox.cpuset.clone()),
                    memory_bytes: self.plan.sandbox.memory_bytes,
                    pids_limit: self.plan.sandbox.pids_limit,
                },
                network: self.plan.sandbox.network,
                ttl: self.plan.sandbox.ttl,
                shipping: self.opts.shipping,
                agent_binary: agent.to_path_buf(),
                socket_dir: self.dir.join("sock"),
                token: String::new(),
                labels: [(
                    crate::provision::labels::USD_PER_HOUR.to_string(),
                    format!("{:.6}", self.plan.hourly_usd()),
                )]
                .into(),
            };
            sandbox::launch(&self.provisioner, &self.hub, request, Duration::from_secs(120))
        });
        let launched = tokio::select! {
            l = futures_util::future::join_all(launches) => l,
            stop = halted(self.halt.subscribe()) => return Some(stop),
        };
        for (side, result) in sides.iter_mut().zip(launched) {
            match result {
                Ok(live) => {
                    let ready =
                        format!("sandbox {} ready in {:.2} s", live.sandbox.id, live.provision_to_hello.as_secs_f64());
                    self.display.status(&side.label, &ready);
                    side.meter.sample(self.provisioner.clone(), live.sandbox.id.clone());
                    side.live = Some(live);
                }
                Err(err) => self.error(format!("{} setup: {err:#}", side.label)),
            }
        }
        if let Some(stop) = self.check() {
            return Some(stop);
        }

        // Source and prepare, untimed, all sandboxes in parallel.
        let prepares = sides.iter().map(|side| async move {
            let live = side.live.as_ref()?;
            let plan = &self.agent_plans[side.role];
            self.display.status(&side.label, "prepare (untimed)");
            side.meter.mark(phase::PREPARE);
            let result = async {
                sandbox::deliver_source(&self.provisioner, &self.plan, &live.sandbox, plan).await?;
                let outcome = self.wait_phase(side, phase::PREPARE, 0, self.phase_timeout(phase::PREPARE)).await?;
                if outcome.0 != PhaseStatus::Ok {
                    bail!("prepare failed: {}", outcome.1);
                }
                anyhow::Ok(())
            }
            .await;
            Some(result)
        });
        let prepared = tokio::select! {
            p = futures_util::future::join_all(prepares) => p,
            stop = halted(self.halt.subscribe()) => return Some(stop),
        };
        for (side, result) in sides.iter_mut().zip(prepared) {
            match result {
                Some(Ok(())) => side.ready = true,
                Some(Err(err)) => self.error(format!("{} setup: {err:#}", side.label)),
                None => {}
            }
        }
        if let Some(stop) = self.check() {
            return Some(stop);
        }

        // The timed phases, ABBA, pairs in parallel.
        for (name, trials) in self.plan.timed_phases() {
            for side in sides.iter().filter(|s| s.live.is_some()) {
                side.meter.mark(name);
            }
            let pairs = self.opts.pairs as usize;
            let mut per_pair: Vec<Vec<&mut SideRun>> = (0..pairs).map(|_| Vec::new()).collect();
            for side in sides.iter_mut() {
                per_pair[side.pair].push(side);
            }
            let work = per_pair.into_iter().enumerate().map(|(pair, mut pair_sides)| async move {
                let mine: Vec<u32> = (0..trials).filter(|t| *t as usize % pairs == pair).collect();
                for (k, trial) in mine.into_iter().enumerate() {
                    // ABBA within the pair: base, head on even rounds; head, base on odd ones.
                    let order: Vec<usize> = if k % 2 == 0 { vec![0, 1] } else { vec![1, 0] };
                    for i in order {
                        if let Some(stop) = self.check() {
                            return Some(stop);
                        }
                        let side = &mut *pair_sides[i];
                        self.trial(side, name, trial, trials).await;
                    }
                }
                None
            });
            let stops = tokio::select! {
                s = futures_util::future::join_all(work) => s,
                stop = halted(self.halt.subscribe()) => return Some(stop),
            };
            if let Some(stop) = stops.into_iter().flatten().next() {
                return Some(stop);
            }
        }
        None
    }

    /// One timed trial of one side, with the gate and the identical-failure limit.
    async fn trial(&self, side: &mut SideRun, name: &'static str, trial: u32, trials: u32) {
        if !side.ready || side.live.is_none() {
            return;
        }
        let role = side.role;
        if Plan::needs_install(name) && side.installed != Some(true) {
            let mut streaks = self.streaks.lock().unwrap_or_else(|e| e.into_inner());
            let streak = streaks.entry((role, name)).or_default();
            if !streak.blocked {
                streak.blocked = true;
                drop(streaks);
                self.error(format!("{} {name}: skipped; first installation did not succeed", side.label));
            }
            return;
        }
        if self.streaks.lock().map(|s| s.get(&(role, name)).is_some_and(|x| x.blocked)).unwrap_or(false) {
            return;
        }
        self.display.status(&side.label, &format!("{name} trial {trial}"));
        let result = self.wait_phase(side, name, trial, self.phase_timeout(name)).await;
        let cause = match result {
            Ok((PhaseStatus::Ok, _, observation_errors)) if observation_errors.is_empty() => None,
            Ok((_, error, observation_errors)) => {
                Some(if error.is_empty() { observation_errors.join("; ") } else { error })
            }
            Err(err) => Some(format!("{err:#}")),
        };
        if name == phase::INSTALL && side.installed.is_none() {
            side.installed = Some(cause.is_none());
        }
        let Some(cause) = cause else {
            if let Ok(mut s) = self.streaks.lock() {
                let streak = s.entry((role, name)).or_default();
                streak.count = 0;
                streak.cause.clear();
            }
            return;
        };
        self.error(format!("{} {name} trial {trial}: {cause}", side.label));
        let lost = matches!(
            self.provisioner.running(&side.live.as_ref().map(|l| l.sandbox.id.clone()).unwrap_or_default()).await,
            Ok(false)
        );
        if lost {
            side.ready = false;
            self.error(format!("{}: its sandbox stopped; no further trials for it", side.label));
            return;
        }
        let mut streaks = self.streaks.lock().unwrap_or_else(|e| e.into_inner());
        let streak = streaks.entry((role, name)).or_default();
        if streak.cause == cause {
            streak.count += 1;
        } else {
            streak.cause = cause.clone();
            streak.count = 1;
        }
        let remaining = trials.saturating_sub(trial + 1);
        if streak.count >= self.plan.trials.failure_limit && remaining > 0 {
            streak.blocked = true;
            let n = streak.count;
            drop(streaks);
            self.error(format!(
                "{} {name}: skipped {remaining} remaining trials after {n} identical consecutive failures; last cause: {cause}",
                role
            ));
        }
    }

    /// A trial's step timeout: every step at its own timeout, plus room for the agent's work.
    fn phase_timeout(&self, name: &str) -> Duration {
        let margin = match name {
            phase::PREPARE => 600.0,
            phase::MEASURE => 180.0,
            _ => 120.0,
        };
        Duration::from_secs_f64(self.plan.phase_limit_s(name) + margin)
    }

    /// Runs a phase and waits for it, noticing a sandbox that died on the way.
    async fn wait_phase(
        &self,
        side: &SideRun,
        name: &str,
        trial: u32,
        timeout: Duration,
    ) -> anyhow::Result<(PhaseStatus, String, Vec<String>)> {
        let live = side.live.as_ref().context("no sandbox")?;
        let id = live.sandbox.id.clone();
        let plan = &self.agent_plans[side.role];
        let run = sandbox::run_phase(&self.hub, &id, plan, name, trial, timeout);
        tokio::pin!(run);
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        loop {
            tokio::select! {
                done = &mut run => {
                    let done = done?;
                    let errors = self
                        .hub
                        .status(&id)
                        .and_then(|s| s.borrow().observation_errors.get(&sandbox::command_id(name, trial)).cloned())
                        .unwrap_or_default();
                    return Ok((done.status, done.error, errors));
                }
                _ = tick.tick() => {
                    if let Ok(false) = self.provisioner.running(&id).await {
                        bail!("sandbox {id} stopped during {name} trial {trial}");
                    }
                }
            }
        }
    }
}

/// Resolves with the reason once the run must stop.
async fn halted(mut halt: watch::Receiver<Option<Stop>>) -> Stop {
    match halt.wait_for(Option::is_some).await {
        Ok(stop) => stop.clone().unwrap_or(Stop::Failed("stopped".into())),
        // The sender lives as long as the run: never resolve.
        Err(_) => std::future::pending().await,
    }
}

/// CPUs for each pair when there are several: the machine's CPUs split evenly, in order.
fn cpusets(pairs: usize) -> Vec<Option<String>> {
    if pairs <= 1 {
        return vec![None];
    }
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let per = (cpus / pairs).max(1);
    (0..pairs)
        .map(|p| {
            let first = (p * per) % cpus;
            let last = (first + per - 1).min(cpus - 1);
            Some(if first == last { first.to_string() } else { format!("{first}-{last}") })
        })
        .collect()
}

async fn resolve_revisions(plan: &Plan, base: &str, head: &str) -> anyhow::Result<(Revision, Revision)> {
    let resolve = |rev: &str| {
        let rev = rev.to_string();
        async move {
            let commit = match &plan.source {
                SourceSettings::Local { repository } => crate::source::resolve(repository, &rev).await?,
                SourceSettings::Url { .. } => {
                    if rev.len() != 40 || !rev.chars().all(|c| c.is_ascii_hexdigit()) {
                        bail!("with a git URL source, revisions must be full 40-character commit ids; got {rev:?}");
                    }
                    rev.to_ascii_lowercase()
                }
                SourceSettings::None => rev.clone(),
            };
            anyhow::Ok(Revision { rev, commit })
        }
    };
    Ok((resolve(base).await.context("--base")?, resolve(head).await.context("--head")?))
}

fn run_id() -> String {
    let stamp = report::timestamp(SystemTime::now())
        .replace(['-', ':'], "")
        .replace('T', "-")
        .trim_end_matches('Z')
        .to_string();
    let mut random = [0u8; 3];
    rand::fill(&mut random);
    format!("{stamp}-{}", random.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn short(commit: &str) -> &str {
    crate::sanitize::prefix(commit, 8)
}
