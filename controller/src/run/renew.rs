//! A side's second chance after an engine restart: a sandbox lost with the Docker engine (found
//! gone after an outage the run waited out, or named as lost with a restart) is replaced once by
//! a new sandbox for that side — provisioned, prepared and, when the slot needs it, installed —
//! and the slot it was lost in runs again there. The retried slots and why are said on the
//! terminal and kept in the report.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::bail;
use sandbench_proto::plan::phase;
use sandbench_proto::v1::PhaseStatus;

use super::gate::TrialResult;
use super::schedule::Slot;
use super::usage::Meter;
use super::walk::{Run, SideRun};
use crate::report::SandboxRecord;
use crate::sandbox::{self, LiveSandbox};

/// What a side keeps of its sandboxes beyond the first.
#[derive(Default)]
pub(super) struct Renewal {
    /// The sandbox that replaced the first one, and its meter.
    replacement: Mutex<Option<(LiveSandbox, Arc<Meter>)>>,
    /// Sandboxes ended before the run's teardown (the replaced one).
    records: Mutex<Vec<SandboxRecord>>,
    /// The engine's outages when the sandbox was last known to run.
    epoch: AtomicU64,
    /// The side had its retry.
    retried: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SideRun {
    /// The sandbox the side runs in now: the replacement, if there is one.
    pub fn current(&self) -> Option<LiveSandbox> {
        lock(&self.renewal.replacement).as_ref().map(|(live, _)| live.clone()).or_else(|| self.live.clone())
    }

    /// The sandbox the side runs in now and its meter.
    pub fn current_with_meter(&self) -> Option<(LiveSandbox, Arc<Meter>)> {
        lock(&self.renewal.replacement).clone().or_else(|| self.live.clone().map(|l| (l, self.meter.clone())))
    }

    /// Every sandbox the side ran in, first to last.
    pub fn sandbox_ids(&self) -> Vec<String> {
        let replacement = lock(&self.renewal.replacement).as_ref().map(|(l, _)| l.sandbox.id.clone());
        self.live.iter().map(|l| l.sandbox.id.clone()).chain(replacement).collect()
    }

    /// The records of sandboxes ended before the run's teardown.
    pub fn ended_records(&self) -> Vec<SandboxRecord> {
        lock(&self.renewal.records).clone()
    }

    /// The sandbox ran through a trial with the engine's outages at `outages`.
    pub fn seen_running(&self, outages: u64) {
        self.renewal.epoch.store(outages, Ordering::SeqCst);
    }
}

impl Run {
    /// Retries `slot`, whose sandbox was lost (`cause`), once in a new sandbox for its side when
    /// the loss came with the engine (an outage since the sandbox last ran a trial, or a restart
    /// the engine names) and the side had no retry yet: the retried slot's result, or None.
    pub(super) async fn renew(&self, side: &SideRun, slot: &Slot, cause: &str) -> Option<TrialResult> {
        let with_engine = self.engine.outages() > side.renewal.epoch.load(Ordering::SeqCst)
            || cause.contains("Docker engine restarted");
        if !with_engine || side.renewal.retried.swap(true, Ordering::SeqCst) {
            return None;
        }
        let (old, old_meter) = side.current_with_meter()?;
        let what = format!("{} {} trial {}", side.label, slot.phase, slot.trial);
        self.display.line(&format!(
            "{what}: sandbox {} did not survive the Docker engine's restart ({cause}); retrying the slot once in a new sandbox",
            old.sandbox.id
        ));
        let (record, warnings) = self.end_sandbox(&side.label, &old.sandbox, &old_meter).await;
        lock(&side.renewal.records).push(record);
        lock(&self.notes).extend(warnings);
        let result = match self.replace(side, slot).await {
            Ok(id) => {
                let result = self.trial(side, slot).await;
                let outcome = match &result {
                    TrialResult::Ok => "it succeeded".to_string(),
                    TrialResult::Failed { cause, .. } => format!("it failed: {cause}"),
                };
                self.note(format!(
                    "{what}: retried in a new sandbox ({id}) after sandbox {} was lost with the Docker engine's restart ({cause}); {outcome}",
                    old.sandbox.id
                ));
                result
            }
            Err(err) => {
                let why = format!("{err:#}");
                self.note(format!(
                    "{what}: sandbox {} was lost with the Docker engine's restart ({cause}); a new sandbox could not be set up: {why}",
                    old.sandbox.id
                ));
                TrialResult::Failed { cause: format!("a new sandbox could not be set up: {why}"), lost: true }
            }
        };
        Some(result)
    }

    /// Provisions, prepares and (when the slot needs it) installs a new sandbox for the side;
    /// its id.
    async fn replace(&self, side: &SideRun, slot: &Slot) -> anyhow::Result<String> {
        let role = format!("{}-r1", side.label);
        let cpuset = super::execute::cpusets(self.opts.pairs as usize).get(side.pair).cloned().flatten();
        self.display.status(&side.label, &format!("provisioning a new sandbox ({role})"));
        let meter = Meter::new();
        let request = self.sandbox_request(&role, cpuset)?;
        let live = self.station.launch(request, Duration::from_secs(120)).await?;
        let id = live.sandbox.id.clone();
        meter.sample(self.station.provisioner().clone(), id.clone());
        *lock(&side.renewal.replacement) = Some((live.clone(), meter.clone()));
        side.seen_running(self.engine.outages());
        self.display.status(&side.label, "prepare (untimed) in the new sandbox");
        meter.mark(phase::PREPARE);
        let plan = &self.agent_plans[&side.side];
        sandbox::deliver_source(&**self.station.provisioner(), &self.plan, &live.sandbox, plan).await?;
        let (status, error, _) = self.wait_phase(side, phase::PREPARE, 0, self.phase_timeout(phase::PREPARE)).await?;
        if status != PhaseStatus::Ok {
            bail!("prepare failed: {error}");
        }
        meter.mark(slot.phase);
        if crate::spec::Plan::needs_install(slot.phase) {
            // The product must be installed in the new sandbox too: the first installation runs
            // again (a first installation in a fresh sandbox, as the one it replaces).
            self.display.status(&side.label, "install trial 0 in the new sandbox");
            let (status, error, _) =
                self.wait_phase(side, phase::INSTALL, 0, self.phase_timeout(phase::INSTALL)).await?;
            if status != PhaseStatus::Ok {
                bail!("its installation failed: {error}");
            }
        }
        Ok(id)
    }

    /// Keeps a line for the report's warnings.
    pub(super) fn note(&self, text: String) {
        tracing::warn!("{text}");
        lock(&self.notes).push(text);
    }
}
