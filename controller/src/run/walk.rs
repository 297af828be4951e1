//! The walk: provision every sandbox concurrently, prepare them in parallel (untimed), then the
//! timed stages of the [`schedule`](super::schedule), the pairs' lanes in parallel, each slot
//! passed through the [`gates`](super::gate) first. A stop (Ctrl-C, timeout, budget) interrupts
//! whatever is in flight.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::bail;
use sandbench_proto::plan::{AgentPlan, phase};
use sandbench_proto::v1::PhaseStatus;
use tokio::sync::watch;

use super::engine::Engine;
use super::gate::{Decision, Gates, Stop, TrialResult};
use super::renew::Renewal;
use super::schedule::{self, Side, Slot, remaining_after};
use super::usage::Meter;
use super::{Display, MAX_ERRORS, RunOptions};
use crate::provision::{Resources, labels};
use crate::sandbox::{self, LiveSandbox};
use crate::spec::Plan;
use crate::station::Station;

/// One sandbox of a pair and what it went through.
pub(super) struct SideRun {
    pub side: Side,
    pub label: String,
    pub pair: usize,
    pub live: Option<LiveSandbox>,
    pub meter: Arc<Meter>,
    /// A new sandbox after an engine restart, and what the side's first one left.
    pub renewal: Renewal,
}

/// A run being walked.
pub(super) struct Run {
    pub plan: Plan,
    pub opts: RunOptions,
    pub station: Station,
    pub agent_plans: BTreeMap<Side, AgentPlan>,
    pub display: Display,
    pub errors: Mutex<Vec<String>>,
    pub gates: Mutex<Gates>,
    /// Set once the run must stop: canceled, out of time or out of budget.
    pub halt: watch::Sender<Option<Stop>>,
    /// What an earlier attempt completed, when the run is resumed.
    pub resumed: Option<super::resume::Resumed>,
    /// The engine under the run, waited for when it does not answer.
    pub engine: Engine,
    /// What the report's warnings say of the walk (retried slots).
    pub notes: Mutex<Vec<String>>,
    /// When the run may add pairs ([`super::adapt`]).
    pub adaptive: Option<super::adapt::Adaptive>,
    /// How long a round of each phase took, for the adaptive projection.
    pub round_times: super::adapt::RoundTimes,
    /// When the walk began.
    pub started: std::time::Instant,
}

impl Run {
    pub fn error(&self, text: String) {
        tracing::warn!("{text}");
        self.display.line(&format!("error: {text}"));
        if let Ok(mut errors) = self.errors.lock()
            && errors.len() < MAX_ERRORS
        {
            errors.push(text.chars().take(500).collect());
        }
    }

    pub fn gates(&self) -> MutexGuard<'_, Gates> {
        self.gates.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check(&self) -> Option<Stop> {
        self.halt.borrow().clone()
    }

    /// Walks the whole run; the stop, if it ended early.
    pub async fn drive(&self, sides: &mut [SideRun], cpusets: &[Option<String>]) -> Option<Stop> {
        if let Some(stop) = self.provision(sides, cpusets).await {
            return Some(stop);
        }
        if let Some(stop) = self.prepare(sides).await {
            return Some(stop);
        }
        let stages = schedule::build_for(&self.plan.timed_phases(), self.opts.pairs as usize, self.opts.shard);
        for stage in &stages {
            if let Some(stop) = self.walk_stage(sides, stage).await {
                return Some(stop);
            }
        }
        self.adapt(sides).await
    }

    /// One stage, its pairs' lanes in parallel; the stop, if the run was stopped.
    pub(super) async fn walk_stage(&self, sides: &[SideRun], stage: &schedule::Stage) -> Option<Stop> {
        // A phase the spec does not have (no trials) takes no time and is not charged.
        if stage.lanes.iter().all(Vec::is_empty) {
            return None;
        }
        for side in sides.iter().filter(|s| s.live.is_some()) {
            side.meter.mark(stage.phase);
        }
        let began = std::time::Instant::now();
        let lanes = stage.lanes.iter().map(|lane| self.walk_lane(sides, lane));
        let stops = tokio::select! {
            s = futures_util::future::join_all(lanes) => s,
            stop = halted(self.halt.subscribe()) => return Some(stop),
        };
        // Only the slots run here took time (a resumed run counts the others as done).
        let ran = stage.lanes.iter().map(|lane| lane.iter().filter(|s| self.done_before(s).is_none()).count());
        self.round_times.record(stage.phase, ran.max().unwrap_or(0), began.elapsed());
        stops.into_iter().flatten().next()
    }

    /// Creates every sandbox concurrently and waits for their agents.
    async fn provision(&self, sides: &mut [SideRun], cpusets: &[Option<String>]) -> Option<Stop> {
        self.display.line(&format!("provisioning {} sandboxes", sides.len()));
        let launches = sides.iter().map(|side| async move {
            let request = self.sandbox_request(&side.label, cpusets[side.pair].clone())?;
            self.station.launch(request, Duration::from_secs(120)).await
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
                    side.meter.sample(self.station.provisioner().clone(), live.sandbox.id.clone());
                    side.live = Some(live);
                }
                Err(err) => self.error(format!("{} setup: {err:#}", side.label)),
            }
        }
        self.check()
    }

    /// The request for a sandbox of this run with this role, pinned to `cpuset` if given.
    pub(super) fn sandbox_request(
        &self,
        role: &str,
        cpuset: Option<String>,
    ) -> anyhow::Result<crate::provision::SandboxRequest> {
        let sandbox = &self.plan.sandbox;
        // The station's image: the spec's, or the one derived from it with valgrind.
        let mut request = self.station.request(role, self.station.image().unwrap_or(&sandbox.image))?;
        request.resources = Resources {
            cpus: sandbox.cpus,
            cpuset: cpuset.or(sandbox.cpuset.clone()),
            memory_bytes: sandbox.memory_bytes,
            pids_limit: sandbox.pids_limit,
            disk_bytes: Some(sandbox.disk_bytes()),
        };
        request.network = sandbox.network;
        request.ttl = sandbox.ttl;
        request.shipping = self.opts.shipping;
        request.labels = [(labels::USD_PER_HOUR.to_string(), format!("{:.6}", self.plan.hourly_usd()))].into();
        Ok(request)
    }

    /// Delivers the source and runs prepare (untimed) on every sandbox in parallel.
    async fn prepare(&self, sides: &[SideRun]) -> Option<Stop> {
        let prepares = sides.iter().map(|side| async move {
            let live = side.live.as_ref()?;
            let plan = &self.agent_plans[&side.side];
            self.display.status(&side.label, "prepare (untimed)");
            side.meter.mark(phase::PREPARE);
            let result = async {
                sandbox::deliver_source(&**self.station.provisioner(), &self.plan, &live.sandbox, plan).await?;
                let (status, error, _) =
                    self.wait_phase(side, phase::PREPARE, 0, self.phase_timeout(phase::PREPARE)).await?;
                if status != PhaseStatus::Ok {
                    bail!("prepare failed: {error}");
                }
                self.install_resumed(side).await
            }
            .await;
            Some(result)
        });
        let prepared = tokio::select! {
            p = futures_util::future::join_all(prepares) => p,
            stop = halted(self.halt.subscribe()) => return Some(stop),
        };
        for (side, result) in sides.iter().zip(prepared) {
            match result {
                Some(Ok(())) => self.gates().ready(side.pair, side.side),
                Some(Err(err)) => self.error(format!("{} setup: {err:#}", side.label)),
                None => {}
            }
        }
        self.check()
    }

    /// One pair's lane of a stage, slot after slot, as the gates allow.
    async fn walk_lane(&self, sides: &[SideRun], lane: &[Slot]) -> Option<Stop> {
        for (at, slot) in lane.iter().enumerate() {
            let result = match self.done_before(slot) {
                // Completed by an earlier attempt (a resumed run): counted as it ended, not run again.
                Some(result) => match self.check() {
                    Some(stop) => return Some(stop),
                    None => result,
                },
                None => match self.run_slot(sides, slot).await {
                    Ok(Some(result)) => result,
                    Ok(None) => continue,
                    Err(stop) => return Some(stop),
                },
            };
            for error in self.gates().record(slot, &result, remaining_after(lane, at)) {
                self.error(error);
            }
        }
        None
    }

    /// Runs one slot if the gates let it (retried once in a new sandbox when its sandbox was
    /// lost): how it ended, None when it was skipped, or the stop.
    async fn run_slot(&self, sides: &[SideRun], slot: &Slot) -> Result<Option<TrialResult>, Stop> {
        let stop = self.check();
        let (decision, error) = self.gates().decide(slot, stop.as_ref());
        if let Some(error) = error {
            self.error(error);
        }
        match decision {
            Decision::Run => {}
            Decision::Skip => return Ok(None),
            Decision::Stop(stop) => return Err(stop),
        }
        let Some(side) = sides.iter().find(|s| s.pair == slot.pair && s.side == slot.side) else { return Ok(None) };
        let mut result = self.trial(side, slot).await;
        if let TrialResult::Failed { cause, lost: true } = &result
            && let Some(retried) = self.renew(side, slot, cause).await
        {
            result = retried;
        }
        if result == TrialResult::Ok {
            side.seen_running(self.engine.outages());
        }
        Ok(Some(result))
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
