//! One trial of one sandbox: send the phase command, wait for the agent to report it done
//! within the step timeout while watching that the sandbox still runs, and say how it ended.

use std::time::Duration;

use anyhow::Context;
use sandbench_proto::metric::MetricKey;
use sandbench_proto::v1::PhaseStatus;
use sandbench_proto::{Phase, StepId};

use super::super::gate::{Stop, TrialResult};
use super::super::schedule::Slot;
use super::side::SideRun;
use super::state::Run;
use crate::provision::Lost;
use crate::station::sandbox;

/// How often the engine is pinged while a trial runs.
const ENGINE_PING: Duration = Duration::from_millis(250);
/// Every how many pings the trial's sandbox is inspected (every 2 s).
const INSPECT_EVERY: u32 = 8;

/// A sandbox found stopped while a phase ran in it, and why as far as its backend can tell.
#[derive(Debug, thiserror::Error)]
#[error("sandbox {id} stopped during {phase} trial {trial}: {lost}")]
pub struct Stopped {
    id: String,
    phase: Phase,
    trial: u32,
    lost: Lost,
}

/// Runs one timed trial (stepwise: its segments at the turns the caller grants, [`super::rounds`]);
/// a failure says whether its sandbox is lost, and why when its backend named it.
pub async fn trial(run: &Run, side: &SideRun, slot: &Slot, stepwise: bool) -> (TrialResult, Option<Lost>) {
    let id = side.current().map(|s| s.id().to_string()).unwrap_or_default();
    // Between trials too: an unreachable engine is waited for, and a sandbox that stopped
    // meanwhile gets no trial.
    if runs(run, &id).await == Some(false) {
        let lost = run.station.provisioner().lost_cause(&id).await;
        let cause = format!("sandbox {id} stopped before {} trial {}: {lost}", slot.phase, slot.trial);
        return (TrialResult::Failed { cause, lost: true }, Some(lost));
    }
    run.display.status(&side.label, &format!("{} trial {}", slot.phase, slot.trial));
    // A stepwise trial also waits while the other side takes its turns.
    let timeout = run.phase_timeout(slot.phase) * if stepwise { 2 } else { 1 };
    let result = wait_phase(run, side, slot.phase, slot.trial, timeout, stepwise).await;
    // A lens metric's error (`<key>.instructions: …`) fails that metric, not the trial: the
    // wall-time samples stand, and no streak of lens failures skips the trials that time.
    let result = result.map(|(status, error, mut errors)| {
        errors.retain(|e| !e.split_once(": ").is_some_and(|(key, _)| MetricKey::facet_of(key).is_lens()));
        (status, error, errors)
    });
    let mut named = None;
    let cause = match result {
        Ok((PhaseStatus::Ok, _, observation_errors)) if observation_errors.is_empty() => {
            return (TrialResult::Ok, None);
        }
        Ok((_, error, observation_errors)) => {
            if error.is_empty() {
                observation_errors.join("; ")
            } else {
                error
            }
        }
        Err(err) => {
            named = err.downcast_ref::<Stopped>().map(|stopped| stopped.lost.clone());
            format!("{err:#}")
        }
    };
    let lost = runs(run, &id).await == Some(false);
    (TrialResult::Failed { cause, lost }, named)
}

/// Whether the sandbox runs. When the engine does not answer, waits for it (up to its
/// bound: past it the run halts, naming the engine, and this never returns); None when the
/// engine answers but cannot tell.
pub async fn runs(run: &Run, id: &str) -> Option<bool> {
    let provisioner = run.station.provisioner();
    if let Ok(running) = provisioner.running(id).await {
        return Some(running);
    }
    engine_answers(run).await;
    provisioner.running(id).await.ok()
}

/// Returns once the engine answers, at once or after an outage within its bound (counted,
/// so that a sandbox found dead afterwards is known to be lost with it); past the bound the
/// run halts, naming the engine, and this never returns.
async fn engine_answers(run: &Run) {
    if let Err(why) = run.engine.reachable(&run.display).await {
        run.halt.send_if_modified(|halt| {
            let first = halt.is_none();
            if first {
                *halt = Some(Stop::Failed(why));
            }
            first
        });
        // The walk ends on the halt, dropping this.
        std::future::pending::<()>().await;
    }
}

/// Runs a phase and waits for it, noticing a sandbox that died on the way: the phase's
/// status, its error, and the errors of its observations.
pub async fn wait_phase(
    run: &Run,
    side: &SideRun,
    name: Phase,
    trial: u32,
    timeout: Duration,
    stepwise: bool,
) -> anyhow::Result<(PhaseStatus, String, Vec<String>)> {
    let id = side.current().context("no sandbox")?.id().to_string();
    let plan = run.agent_plan(side.side, name, trial);
    let hub = run.station.hub();
    let step = StepId::new(name, trial);
    let phase = async {
        sandbox::start_phase(&hub, &id, &plan, step, stepwise).await?;
        hub.wait_done(&id, &step.to_string(), timeout).await
    };
    tokio::pin!(phase);
    // The engine is pinged often (a restart can take under a second, and an outage nobody
    // saw would leave a sandbox lost with it unexplained and not retried); whether the
    // sandbox still runs is asked less often (an inspect is heavier, beside a measurement).
    let mut tick = tokio::time::interval(ENGINE_PING);
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            done = &mut phase => {
                let done = done?;
                let errors = hub
                    .status(&id)
                    .and_then(|s| s.borrow().observation_errors.get(&step.to_string()).cloned())
                    .unwrap_or_default();
                return Ok((done.status, done.error, errors));
            }
            _ = tick.tick() => {
                ticks = ticks.wrapping_add(1);
                if !ticks.is_multiple_of(INSPECT_EVERY) {
                    engine_answers(run).await;
                    continue;
                }
                if runs(run, &id).await == Some(false) {
                    let lost = run.station.provisioner().lost_cause(&id).await;
                    return Err(Stopped { id: id.clone(), phase: name, trial, lost }.into());
                }
            }
        }
    }
}
