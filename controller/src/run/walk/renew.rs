//! A side's second chance after an engine restart: a sandbox lost with the Docker engine (found
//! gone after an outage the run waited out, or named as lost with a restart) is replaced once by
//! a new sandbox for that side — provisioned, prepared and, when the slot needs it, installed —
//! and the slot it was lost in runs again there. The retried slots and why are said on the
//! terminal and kept in the report.

use std::sync::atomic::Ordering;

use anyhow::bail;
use sandbench_proto::Phase;
use sandbench_proto::v1::PhaseStatus;

use super::super::gate::TrialResult;
use super::super::schedule::Slot;
use super::super::usage::Meter;
use super::side::{SideRun, lock};
use super::state::Run;
use super::teardown::end_sandbox;
use super::trial::{trial, wait_phase};
use crate::provision::Lost;
use crate::station::session::Session;

/// How a trial of `slot` ended, once settled: retried in a new sandbox when its sandbox was
/// lost with the engine ([`renew`]), and the side marked as seen running when it succeeded.
pub async fn settle(run: &Run, side: &SideRun, slot: &Slot, ran: (TrialResult, Option<Lost>)) -> TrialResult {
    let (mut result, lost) = ran;
    if let TrialResult::Failed { cause, lost: true } = &result
        && let Some(retried) = renew(run, side, slot, cause, lost.as_ref()).await
    {
        result = retried;
    }
    if result == TrialResult::Ok {
        side.seen_running(run.engine.outages());
    }
    result
}

/// Retries `slot`, whose sandbox was lost (`cause`, and `lost` when its backend named why), once
/// in a new sandbox for its side when the loss came with the engine (an outage since the sandbox
/// last ran a trial, or a restart the engine names) and the side had no retry yet: the retried
/// slot's result, or None.
pub async fn renew(run: &Run, side: &SideRun, slot: &Slot, cause: &str, lost: Option<&Lost>) -> Option<TrialResult> {
    let with_engine =
        run.engine.outages() > side.renewal.epoch.load(Ordering::SeqCst) || lost.is_some_and(Lost::with_engine_restart);
    if !with_engine || side.renewal.retried.swap(true, Ordering::SeqCst) {
        return None;
    }
    let (old, old_meter) = side.current_with_meter()?;
    let what = format!("{} {} trial {}", side.label, slot.phase, slot.trial);
    run.display.line(&format!(
        "{what}: sandbox {} did not survive the Docker engine's restart ({cause}); retrying the slot once in a new sandbox",
        old.id()
    ));
    let (record, warnings) = end_sandbox(run, &side.label, &old, &old_meter).await;
    lock(&side.renewal.records).push(record);
    lock(&run.notes).extend(warnings);
    let result = match replace(run, side, slot).await {
        Ok(id) => {
            let (result, _) = trial(run, side, slot, false).await;
            let outcome = match &result {
                TrialResult::Ok => "it succeeded".to_string(),
                TrialResult::Failed { cause, .. } => format!("it failed: {cause}"),
            };
            run.note(format!(
                "{what}: retried in a new sandbox ({id}) after sandbox {} was lost with the Docker engine's restart ({cause}); {outcome}",
                old.id()
            ));
            result
        }
        Err(err) => {
            let why = format!("{err:#}");
            run.note(format!(
                "{what}: sandbox {} was lost with the Docker engine's restart ({cause}); a new sandbox could not be set up: {why}",
                old.id()
            ));
            TrialResult::Failed { cause: format!("a new sandbox could not be set up: {why}"), lost: true }
        }
    };
    Some(result)
}

/// Provisions, prepares and (when the slot needs it) installs a new sandbox for the side;
/// its id.
async fn replace(run: &Run, side: &SideRun, slot: &Slot) -> anyhow::Result<String> {
    let role = format!("{}-r1", side.label);
    run.display.status(&side.label, &format!("provisioning a new sandbox ({role})"));
    let meter = Meter::new();
    let request = run.sandbox_request(&role, side.placement)?;
    let session = Session::launch_placed(&run.station, run.side_plan(side.side), request).await?;
    let id = session.id().to_string();
    meter.sample(run.station.provisioner().clone(), id.clone());
    *lock(&side.renewal.replacement) = Some((session.clone(), meter.clone()));
    side.seen_running(run.engine.outages());
    run.display.status(&side.label, "prepare (untimed) in the new sandbox");
    meter.mark(Phase::Prepare.as_str());
    session.deliver_source().await?;
    let (status, error, _) = wait_phase(run, side, Phase::Prepare, 0, run.phase_timeout(Phase::Prepare), false).await?;
    if status != PhaseStatus::Ok {
        bail!("prepare failed: {error}");
    }
    meter.mark(slot.phase.as_str());
    if slot.phase.needs_install() {
        // The product must be installed in the new sandbox too: the first installation runs
        // again (a first installation in a fresh sandbox, as the one it replaces).
        run.display.status(&side.label, "install trial 0 in the new sandbox");
        let (status, error, _) =
            wait_phase(run, side, Phase::Install, 0, run.phase_timeout(Phase::Install), false).await?;
        if status != PhaseStatus::Ok {
            bail!("its installation failed: {error}");
        }
    }
    Ok(id)
}
