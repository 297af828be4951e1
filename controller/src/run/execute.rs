//! Around the walk: open the station, name the sandboxes of every pair, watch for Ctrl-C, the run
//! timeout and the budget while the walk goes, then tear every sandbox down and close the
//! station, whatever happened, and say how the run ended.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::accounting::Resumed;
use super::engine::EngineHealth;
use super::gate::{Gates, Stop, over_budget};
use super::options::RunOptions;
use super::output::collect;
use super::reconcile::reconcile_in;
use super::schedule::Side;
use super::usage::Meter;
use super::walk::{self, Adapted, Adaptive, Run, SideRun, measured};
use crate::cost::ledger::Ledger;
use crate::display::Display;
use crate::provision::{DiskBound, Provisioner};
use crate::report::{self, Revision, SandboxRecord, Status};
use crate::spec::Plan;
use crate::station::{Station, StationOptions};

/// What a run is executed with.
pub(super) struct Setting<'a> {
    pub plan: &'a Plan,
    pub opts: &'a RunOptions,
    pub dir: &'a Path,
    pub display: &'a Display,
    pub base: &'a Revision,
    pub head: &'a Revision,
    /// What an earlier attempt completed, when the run is resumed.
    pub resumed: Option<&'a Resumed>,
    /// The report as it starts (an adaptive run's looks are analysed on it).
    pub skeleton: &'a report::Report,
    /// The timed trials, in order ([`super::schedule::for_run`]).
    pub stages: &'a [super::schedule::Stage],
    /// The CPUs the sandboxes are pinned to.
    pub cpus: &'a super::schedule::CpuSets,
}

/// What `execute` ends with.
pub(super) struct Finished {
    pub status: Status,
    /// Samples and facts per side.
    pub sides: BTreeMap<Side, report::Side>,
    pub records: Vec<SandboxRecord>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// Why the run ended early, when the terminal has not said it yet (a stop, or the error
    /// that ended it before any sandbox).
    pub reason: Option<String>,
    /// How far an adaptive run went.
    pub adapted: Option<Adapted>,
    /// The sandboxes' provisioner, when it was reached (`--bisect` goes on with it).
    pub provisioner: Option<Arc<dyn Provisioner>>,
    /// Whether the sandboxes' disk was bounded by `disk_gb`.
    pub disk: DiskBound,
}

impl Finished {
    pub fn failed(error: String) -> Finished {
        Finished {
            status: Status::Failed,
            sides: BTreeMap::new(),
            records: Vec::new(),
            errors: vec![error.clone()],
            warnings: Vec::new(),
            reason: Some(error),
            adapted: None,
            provisioner: None,
            disk: DiskBound::Unknown,
        }
    }
}

pub(super) async fn execute(
    setting: Setting<'_>,
    ledger: Option<&mut Ledger>,
    cancel: watch::Receiver<bool>,
    connect: impl Future<Output = anyhow::Result<Arc<dyn Provisioner>>>,
) -> anyhow::Result<Finished> {
    let provisioner = connect.await?;
    let Setting { plan, opts, dir, display, resumed, skeleton, stages, cpus, .. } = setting;
    let engine = EngineHealth::new(provisioner.clone(), opts.engine_wait);
    let kept = provisioner.clone();
    let (station, agent_plans) = open(&setting, provisioner, ledger).await?;
    let pairs = opts.pairs as usize;
    let run = Run {
        plan: plan.clone(),
        opts: opts.clone(),
        station: Arc::new(station),
        agent_plans,
        display: display.clone(),
        errors: Mutex::new(Vec::new()),
        gates: Mutex::new(Gates::new(pairs, plan.trials.failure_limit)),
        halt: watch::Sender::new(None),
        resumed: resumed.cloned(),
        engine,
        notes: Mutex::new(Vec::new()),
        // A shard sees only its share, a record has nothing to compare: neither adds pairs.
        adaptive: Adaptive::new(skeleton, plan, opts.shard.is_some() || opts.record),
        round_times: Default::default(),
        started: Instant::now(),
        cpus: cpus.clone(),
        lens: skeleton.lens_runs.clone(),
        stages: stages.to_vec(),
    };
    let wanted: &[Side] = if opts.record { &[Side::Base] } else { &Side::BOTH };
    let mut sides = SideRun::all(pairs, wanted, resumed.map_or(1, |r| r.attempt));
    let watchers = watch_for_stops(&run, &sides, cancel);
    let stop = walk::drive(&run, &mut sides).await;
    for watcher in watchers {
        watcher.abort();
    }

    // Teardown, whatever happened.
    let (records, mut warnings) = walk::teardown(&run, &sides).await;
    if plan.trials.order == crate::spec::Order::Duet
        && let Some(why) = run.station.provisioner().io_weight_discarded()
    {
        warnings.push(format!(
            "trials.order = \"duet\": the two sides' disk I/O is not weighed equally ({why}); under contention one \
             side's reads and writes can slow the other's"
        ));
    }
    warnings.extend(run.station.bridge_summary());
    warnings.extend(run.station.close().await);
    warnings.splice(0..0, run.notes.lock().map(|n| n.clone()).unwrap_or_default());

    let mut errors = run.errors.lock().map(|e| e.clone()).unwrap_or_default();
    let (mut sides_data, dropped) = collect(dir, &measured(&sides), resumed.map(|r| &r.accounting), plan)?;
    warnings.extend(dropped);
    record_cpus(&run, &sides, &mut sides_data);
    let any_ready = {
        let gates = run.gates();
        sides.iter().any(|s| gates.is_ready(s.pair, s.side))
    };
    let reason = match &stop {
        Some(Stop::Canceled(why) | Stop::Failed(why)) => Some(why.clone()),
        None => None,
    };
    let status = status_of(stop, any_ready, &mut errors);
    let adapted = run.adaptive.as_ref().map(Adaptive::adapted);
    // A create may have learnt more than the probe (an engine that refused a bound after all).
    let disk = run.station.provisioner().disk_bound();
    Ok(Finished {
        status,
        sides: sides_data,
        records,
        errors,
        warnings,
        reason,
        adapted,
        disk,
        provisioner: Some(kept),
    })
}

/// Records the ledger's dead runs, opens the station and finds whether the engine bounds a
/// sandbox's disk (a warning when not); returns the station and each side's agent plan.
async fn open(
    setting: &Setting<'_>,
    provisioner: Arc<dyn Provisioner>,
    ledger: Option<&mut Ledger>,
) -> anyhow::Result<(Station, BTreeMap<Side, sandbench_proto::plan::AgentPlan>)> {
    let Setting { plan, opts, dir, display, base, head, resumed, .. } = *setting;
    // Runs of the ledger whose controller died are recorded as abandoned before any sandbox of
    // theirs is reaped below (their lifetimes are read from the engine while it has them); a
    // resume did so as it opened the ledger, before it put its own row back to running.
    if let Some(ledger) = ledger.filter(|_| resumed.is_none()) {
        for line in reconcile_in(&*provisioner, ledger).await {
            display.line(&line);
        }
    }
    let options = StationOptions {
        dir: dir.to_path_buf(),
        run_id: dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default(),
        image: Some(plan.sandbox.image.clone()),
        valgrind: plan.needs_valgrind() || opts.force_valgrind,
        agent: opts.agent.clone(),
        hub: crate::station::hub_config(plan, opts.dead_man),
    };
    let station = Station::open(provisioner.clone(), options, &mut |line| display.line(line)).await?;
    if opts.require_disk_bound.is_some() {
        provisioner.require_disk_bound();
    }
    let disk = provisioner.probe_disk_bound(station.image().unwrap_or(&plan.sandbox.image)).await;
    if let Some(why) = &opts.require_disk_bound
        && disk != DiskBound::Enforced
    {
        let found = match &disk {
            DiskBound::Unenforced(reason) => reason.clone(),
            _ => "the engine did not say whether it can".to_string(),
        };
        for warning in station.close().await {
            display.line(&format!("warning: {warning}"));
        }
        anyhow::bail!(
            "the engine cannot bound a sandbox's disk (disk_gb = {} GB): {found}. {why}: start an engine that can \
             (images/ensure-docker.sh), or pass --allow-unbounded-disk to accept that this code may fill the \
             machine's disk",
            plan.sandbox.disk_gb
        );
    }
    if let Some(warning) = disk_warning(plan, &disk) {
        display.line(&format!("warning: {warning}"));
    }
    let agent_plan = |commit: &str| {
        let mut agent_plan = plan.agent_plan(commit);
        agent_plan.disk_gb = (disk == DiskBound::Enforced).then_some(plan.sandbox.disk_gb);
        agent_plan
    };
    Ok((station, BTreeMap::from([(Side::Base, agent_plan(&base.commit)), (Side::Head, agent_plan(&head.commit))])))
}

/// The report's and the terminal's warning when the sandboxes' disk is not bounded by
/// `disk_gb` (once per run); None when it is, or when no sandbox was asked for.
pub(super) fn disk_warning(plan: &Plan, disk: &DiskBound) -> Option<String> {
    match disk {
        DiskBound::Unenforced(why) => Some(format!("disk_gb ({} GB) is not enforced: {why}", plan.sandbox.disk_gb)),
        DiskBound::Enforced | DiskBound::Unknown => None,
    }
}

/// The CPUs each sandbox was given, as provisioned (quota and pinning).
fn record_cpus(run: &Run, sides: &[SideRun], data: &mut BTreeMap<Side, report::Side>) {
    for side in sides.iter().filter(|s| s.live.is_some()) {
        let cpuset = run.cpus.of_pair(side.pair).unwrap_or_default();
        let nano_cpus = (run.plan.sandbox.cpus * 1e9).round() as i64;
        if let Some(data) = data.get_mut(&side.side) {
            data.cpus.push(report::SandboxCpus::provisioned(&side.label, nano_cpus, cpuset));
        }
    }
}

/// How the walk ended, as the run's status; a stop's reason joins the errors.
fn status_of(stop: Option<Stop>, any_ready: bool, errors: &mut Vec<String>) -> Status {
    match stop {
        Some(Stop::Canceled(why)) => {
            errors.push(why);
            Status::Canceled
        }
        Some(Stop::Failed(why)) => {
            errors.push(why);
            Status::Failed
        }
        None if !any_ready => Status::Failed,
        None => Status::Completed,
    }
}

/// Ctrl-C / SIGTERM, the run timeout and the budget, watched continuously (not only between
/// trials): each sets the run's halt, the first one winning.
fn watch_for_stops(run: &Run, sides: &[SideRun], cancel: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
    let halt = run.halt.clone();
    let mut cancel = cancel;
    let timeout = run.opts.run_timeout;
    let started = Instant::now();
    let mut watchers = vec![tokio::spawn(async move {
        let stop = tokio::select! {
            // A dropped sender can cancel nothing any more: then only the timeout can stop.
            _ = async { if cancel.wait_for(|c| *c).await.is_err() { std::future::pending::<()>().await } } => Stop::canceled(),
            _ = tokio::time::sleep(timeout.saturating_sub(started.elapsed())) => Stop::timed_out(),
        };
        halt.send_if_modified(|h| first_stop(h, stop));
    })];
    if let Some(budget) = run.plan.cost.budget_usd {
        let halt = run.halt.clone();
        let meters: Vec<Arc<Meter>> = sides.iter().map(|s| s.meter.clone()).collect();
        let hourly = run.plan.hourly_usd();
        watchers.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let lifetimes: Vec<f64> = meters.iter().map(|m| m.start.elapsed().as_secs_f64()).collect();
                if over_budget(&lifetimes, hourly, budget) {
                    halt.send_if_modified(|h| first_stop(h, Stop::over_budget()));
                    return;
                }
            }
        }));
    }
    watchers
}

/// Sets the stop unless there is one already.
fn first_stop(halt: &mut Option<Stop>, stop: Stop) -> bool {
    let first = halt.is_none();
    if first {
        *halt = Some(stop);
    }
    first
}
