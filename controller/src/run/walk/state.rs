//! A run being walked: what every layer of the walk reads (plan, station, engine, gates, the
//! halt) and its own small methods. The layers above take it as `&Run`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sandbench_proto::plan::AgentPlan;
use sandbench_proto::{Phase, Placement};
use tokio::sync::watch;

use super::super::accounting::Resumed;
use super::super::engine::EngineHealth;
use super::super::gate::{Decision, Gates, Stop, TrialResult};
use super::super::options::RunOptions;
use super::super::schedule::{self, Side, Slot};
use super::adaptive::{Adaptive, RoundTimes};
use super::side::lock;
use crate::display::Display;
use crate::report::lens_runs::LensRuns;
use crate::spec::Plan;
use crate::station::Station;

/// The most errors a report keeps.
pub const MAX_ERRORS: usize = 30;

/// A run being walked.
pub struct Run {
    pub plan: Plan,
    pub opts: RunOptions,
    pub station: Arc<Station>,
    pub agent_plans: BTreeMap<Side, AgentPlan>,
    pub display: Display,
    pub errors: Mutex<Vec<String>>,
    pub gates: Mutex<Gates>,
    /// Set once the run must stop: canceled, out of time or out of budget.
    pub halt: watch::Sender<Option<Stop>>,
    /// What an earlier attempt completed, when the run is resumed.
    pub resumed: Option<Resumed>,
    /// The engine under the run, waited for when it does not answer.
    pub engine: EngineHealth,
    /// What the report's warnings say of the walk (retried slots).
    pub notes: Mutex<Vec<String>>,
    /// When the run may add pairs ([`super::adapt`]).
    pub adaptive: Option<Adaptive>,
    /// How long a round of each phase took, for the adaptive projection.
    pub round_times: RoundTimes,
    /// When the walk began.
    pub started: std::time::Instant,
    /// The CPUs the sandboxes are pinned to, as the run was resolved.
    pub cpus: schedule::CpuSets,
    /// How many trials of each side run each lens step (the report's, decided as the run began).
    pub lens: Vec<LensRuns>,
    /// The timed trials in order, as the run was resolved ([`super::super::schedule::for_run`]);
    /// the pairs an adaptive run adds come after them.
    pub stages: Vec<super::super::schedule::Stage>,
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

    /// Keeps a line for the report's warnings.
    pub fn note(&self, text: String) {
        tracing::warn!("{text}");
        lock(&self.notes).push(text);
    }

    /// Passes `slot` through the gates (their error, if any, kept): whether it runs, or the stop.
    pub fn admit(&self, slot: &Slot) -> Result<bool, Stop> {
        let stop = self.check();
        let (decision, error) = self.gates().decide(slot, stop.as_ref());
        if let Some(error) = error {
            self.error(error);
        }
        match decision {
            Decision::Run => Ok(true),
            Decision::Skip => Ok(false),
            Decision::Stop(stop) => Err(stop),
        }
    }

    pub fn gates(&self) -> MutexGuard<'_, Gates> {
        self.gates.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The stop, once the run must stop.
    pub fn check(&self) -> Option<Stop> {
        self.halt.borrow().clone()
    }

    /// A slot completed by an earlier attempt: how it ended.
    pub fn done_before(&self, slot: &Slot) -> Option<TrialResult> {
        self.resumed.as_ref()?.accounting.result(slot)
    }

    /// The agent plan sent to `side` for trial `trial` of `phase`: its lens steps that do not
    /// run in that trial ask for no lens ([`schedule::without_lens`]).
    pub fn agent_plan(&self, side: Side, phase: Phase, trial: u32) -> Cow<'_, AgentPlan> {
        let plan = &self.agent_plans[&side];
        schedule::without_lens(plan, phase, trial, &self.lens).map_or(Cow::Borrowed(plan), Cow::Owned)
    }

    /// Whether trial `trial` of `phase` runs a lens step.
    pub fn runs_lens(&self, phase: Phase, trial: u32) -> bool {
        schedule::runs_lens(phase, trial, &self.lens)
    }

    /// The plan a sandbox of `side` runs: the run's, its agent part the side's agent plan.
    pub fn side_plan(&self, side: Side) -> Arc<Plan> {
        Arc::new(Plan { agent: self.agent_plans[&side].clone(), ..self.plan.clone() })
    }

    /// A trial's step timeout: every step at its own timeout, plus room for the agent's work.
    pub fn phase_timeout(&self, phase: Phase) -> Duration {
        self.plan.phase_timeout(phase)
    }

    /// The request for a sandbox of this run with this role and place in the run (its pair's
    /// CPUs).
    pub fn sandbox_request(
        &self,
        role: &str,
        placement: Placement,
    ) -> anyhow::Result<crate::provision::SandboxRequest> {
        // The plan's request (the station's image, resources, network, ttl and rate), then this
        // run's place for it: its pair's CPUs, and a duet's equal disk weight.
        let mut request = self.station.plan_request(role, &self.plan, self.opts.shipping)?;
        request.resources.cpuset = self.cpus.of_pair(placement.pair as usize).map(str::to_string);
        // A duet's two sides share the disk at once: the same weight each.
        request.resources.io_weight = (self.plan.trials.order == crate::spec::Order::Duet).then_some(DUET_IO_WEIGHT);
        request.placement = Some(placement);
        Ok(request)
    }
}

/// The block I/O weight of both sides of a duet: the cgroup's default (cgroup v1 `blkio.weight`),
/// set explicitly so that neither side runs under another weight the engine or the host gives.
pub const DUET_IO_WEIGHT: u16 = 500;
