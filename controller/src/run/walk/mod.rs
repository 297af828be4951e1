//! The walk: provision every sandbox concurrently, prepare them in parallel (untimed), then the
//! timed stages of the [`schedule`](super::schedule), the pairs' lanes in parallel, each slot
//! passed through the [`gates`](super::gate) first. A stop (Ctrl-C, timeout, budget) interrupts
//! whatever is in flight.
//!
//! # Layers
//!
//! As in [`super`], each module may use only those listed above it (the same test checks it);
//! every layer above `state` is functions over `&Run`.
//!
//! - `side`: one side of a pair and its sandboxes.
//! - `adaptive`: an adaptive run's state.
//! - `state`: the run being walked ([`Run`]) and its own small methods.
//! - `trial`: one trial of one sandbox.
//! - `teardown`: a side's sandboxes ended and charged.
//! - `renew`: a side's second chance after an engine restart.
//! - `rounds`: the rounds of a stepwise order (interleaved runs, duet).
//! - `adapt`: the looks of an adaptive run.
//! - `mod.rs` (this module): the walk itself.

mod adapt;
mod adaptive;
mod renew;
mod rounds;
mod side;
mod state;
mod teardown;
mod trial;

use anyhow::bail;
use sandbench_proto::Phase;
use sandbench_proto::v1::PhaseStatus;
use tokio::sync::watch;

use super::gate::{Stop, TrialResult};
use super::schedule::{self, Slot, remaining_after};
use crate::station::session::Session;
pub use adaptive::{Adapted, Adaptive};
use renew::settle;
pub use side::{SideRun, measured};
pub use state::{DUET_IO_WEIGHT, MAX_ERRORS, Run};
pub use teardown::teardown;
use trial::{trial, wait_phase};

/// Walks the whole run; the stop, if it ended early.
pub async fn drive(run: &Run, sides: &mut [SideRun]) -> Option<Stop> {
    if let Some(stop) = provision(run, sides).await {
        return Some(stop);
    }
    if let Some(stop) = prepare(run, sides).await {
        return Some(stop);
    }
    for stage in &run.stages {
        if let Some(stop) = walk_stage(run, sides, stage).await {
            return Some(stop);
        }
    }
    adapt(run, sides).await
}

/// One stage, its pairs' lanes in parallel; the stop, if the run was stopped.
async fn walk_stage(run: &Run, sides: &[SideRun], stage: &schedule::Stage) -> Option<Stop> {
    // A phase the spec does not have (no trials) takes no time and is not charged.
    if stage.lanes.iter().all(Vec::is_empty) {
        return None;
    }
    for side in sides.iter().filter(|s| s.live.is_some()) {
        side.meter.mark(stage.phase.as_str());
    }
    let began = std::time::Instant::now();
    let stepwise = run.plan.trials.order.stepwise(stage.phase);
    let lanes = stage.lanes.iter().map(|lane| async move {
        if stepwise { rounds::walk_rounds(run, sides, lane).await } else { walk_lane(run, sides, lane).await }
    });
    let stops = tokio::select! {
        s = futures_util::future::join_all(lanes) => s,
        stop = halted(run.halt.subscribe()) => return Some(stop),
    };
    // Only the slots run here took time (a resumed run counts the others as done).
    let ran = stage.lanes.iter().map(|lane| lane.iter().filter(|s| run.done_before(s).is_none()).count());
    run.round_times.record(stage.phase, ran.max().unwrap_or(0), began.elapsed());
    stops.into_iter().flatten().next()
}

/// Creates every sandbox concurrently and waits for their agents.
async fn provision(run: &Run, sides: &mut [SideRun]) -> Option<Stop> {
    let n = sides.len();
    run.display.line(&format!("provisioning {n} sandbox{}", if n == 1 { "" } else { "es" }));
    let launches = sides.iter().map(|side| async move {
        let request = run.sandbox_request(&side.label, side.placement)?;
        Session::launch_placed(&run.station, run.side_plan(side.side), request).await
    });
    let launched = tokio::select! {
        l = futures_util::future::join_all(launches) => l,
        stop = halted(run.halt.subscribe()) => return Some(stop),
    };
    for (side, result) in sides.iter_mut().zip(launched) {
        match result {
            Ok(session) => {
                let ready = format!(
                    "sandbox {} ready in {:.2} s",
                    session.id(),
                    session.live().provision_to_hello.as_secs_f64()
                );
                run.display.status(&side.label, &ready);
                side.meter.sample(run.station.provisioner().clone(), session.id().to_string());
                side.live = Some(session);
            }
            Err(err) => run.error(format!("{} setup: {err:#}", side.label)),
        }
    }
    run.check()
}

/// Delivers the source and runs prepare (untimed) on every sandbox in parallel.
async fn prepare(run: &Run, sides: &[SideRun]) -> Option<Stop> {
    let prepares = sides.iter().map(|side| async move {
        let session = side.live.as_ref()?;
        run.display.status(&side.label, "prepare (untimed)");
        side.meter.mark(Phase::Prepare.as_str());
        let result = async {
            session.deliver_source().await?;
            let (status, error, _) =
                wait_phase(run, side, Phase::Prepare, 0, run.phase_timeout(Phase::Prepare), false).await?;
            if status != PhaseStatus::Ok {
                bail!("prepare failed: {error}");
            }
            install_resumed(run, side).await
        }
        .await;
        Some(result)
    });
    let prepared = tokio::select! {
        p = futures_util::future::join_all(prepares) => p,
        stop = halted(run.halt.subscribe()) => return Some(stop),
    };
    for (side, result) in sides.iter().zip(prepared) {
        match result {
            Some(Ok(())) => run.gates().ready(side.pair, side.side),
            Some(Err(err)) => run.error(format!("{} setup: {err:#}", side.label)),
            None => {}
        }
    }
    run.check()
}

/// One pair's lane of a stage, slot after slot, as the gates allow.
async fn walk_lane(run: &Run, sides: &[SideRun], lane: &[Slot]) -> Option<Stop> {
    for (at, slot) in lane.iter().enumerate() {
        let result = match run.done_before(slot) {
            // Completed by an earlier attempt (a resumed run): counted as it ended, not run again.
            Some(result) => match run.check() {
                Some(stop) => return Some(stop),
                None => result,
            },
            None => match run_slot(run, sides, slot).await {
                Ok(Some(result)) => result,
                Ok(None) => continue,
                Err(stop) => return Some(stop),
            },
        };
        for error in run.gates().record(slot, &result, remaining_after(lane, at)) {
            run.error(error);
        }
    }
    None
}

/// Runs one slot if the gates let it (retried once in a new sandbox when its sandbox was
/// lost): how it ended, None when it was skipped, or the stop.
async fn run_slot(run: &Run, sides: &[SideRun], slot: &Slot) -> Result<Option<TrialResult>, Stop> {
    if !run.admit(slot)? {
        return Ok(None);
    }
    let Some(side) = sides.iter().find(|s| s.pair == slot.pair && s.side == slot.side) else { return Ok(None) };
    let began = std::time::Instant::now();
    let ran = trial(run, side, slot, false).await;
    if !run.runs_lens(slot.phase, slot.trial) {
        run.round_times.record_plain(slot.phase, 1, began.elapsed());
    }
    Ok(Some(settle(run, side, slot, ran).await))
}

/// A resumed sandbox needs an installation of its own before measure, runtime or ui run in
/// it: when its first install trial completed in an earlier attempt (and succeeded) and any
/// of its slots needing an installation is missing, that install runs again here, untimed
/// (its observations are not counted: the slot's first completion is).
async fn install_resumed(run: &Run, side: &SideRun) -> anyhow::Result<()> {
    let Some(resumed) = &run.resumed else { return Ok(()) };
    let mut stages = run.stages.clone();
    // An adaptive run may grow measure and runtime: their slots up to max_pairs may come.
    if run.adaptive.is_some() {
        let t = &run.plan.trials;
        // (A phase with nothing to do has no trials and never grows.)
        for name in adaptive::GROWN.into_iter().filter(|p| t.of(*p) > 0) {
            stages.push(schedule::grow(name, t.of(name), t.max_pairs, run.opts.pairs as usize));
        }
    }
    let mine: Vec<&Slot> = stages
        .iter()
        .flat_map(|s| s.lanes.iter().flatten())
        .filter(|s| s.pair == side.pair && s.side == side.side)
        .collect();
    let Some(first) = mine.iter().find(|s| s.phase == Phase::Install) else { return Ok(()) };
    if resumed.accounting.result(first) != Some(TrialResult::Ok) {
        return Ok(());
    }
    let pending = mine.iter().any(|s| s.phase.needs_install() && resumed.accounting.result(s).is_none());
    if !pending {
        return Ok(());
    }
    run.display.status(&side.label, "install (untimed: this sandbox's own installation)");
    let (status, error, _) =
        wait_phase(run, side, Phase::Install, first.trial, run.phase_timeout(Phase::Install), false).await?;
    if status != PhaseStatus::Ok {
        bail!("the untimed install of the resumed sandbox failed: {error}");
    }
    Ok(())
}

/// Looks at the gating metrics after the planned trials and adds pairs while one is
/// inconclusive ([`adapt`]). The stop, if the run was stopped while growing.
async fn adapt(run: &Run, sides: &[SideRun]) -> Option<Stop> {
    let adaptive = run.adaptive.as_ref()?;
    let looks = adaptive.adapted().sequential.design.looks();
    for at in 1..=looks.len() {
        let adapt::Look::Grow { next, stages } = adapt::look(run, adaptive, at, sides) else { return None };
        for (name, pairs, stage) in stages {
            let stop = walk_stage(run, sides, &stage).await;
            adaptive.update(|a| {
                a.trials.insert(name, pairs);
            });
            if stop.is_some() {
                adaptive.update(|a| {
                    a.sequential.ended = format!("stopped while adding pairs at look {next}");
                });
                return stop;
            }
        }
    }
    None
}

/// Resolves with the reason once the run must stop.
async fn halted(mut halt: watch::Receiver<Option<Stop>>) -> Stop {
    match halt.wait_for(Option::is_some).await {
        Ok(stop) => stop.clone().unwrap_or(Stop::Failed("stopped".into())),
        // The sender lives as long as the run: never resolve.
        Err(_) => std::future::pending().await,
    }
}
