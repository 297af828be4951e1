//! Adaptive pairs: once the planned trials are walked, the run looks at its gating metrics
//! (`trials.gate`) and, while one is inconclusive, grows measure and runtime — only the phases
//! that hold an undecided metric — to the next planned look of the sequential design
//! ([`crate::stats::sequential`]), until every gating metric is decided, the last look
//! (`trials.max_pairs`) is done, or the run timeout or the budget leaves no room for the next
//! pairs. The report is analysed at the alpha of the last look taken, which the design's
//! correction makes safe to read after any number of looks.
//!
//! A sharded run does not adapt (each shard sees only its share of the pairs): it runs the
//! planned trials and its merged report one look at the full alpha. A resumed run walks the
//! same looks again on the same samples, so it grows the same phases as far, and the slots its
//! earlier attempt completed there are counted, not run again.

use std::time::Duration;

use sandbench_proto::Phase;

use super::super::gate::over_budget;
use super::super::output::collect;
use super::super::schedule::{self, Side, Stage};
use super::adaptive::{Adapted, Adaptive, phases_to_grow};
use super::side::{SideRun, measured};
use super::state::Run;
use crate::report::{Report, Sequential};
use crate::stats::sequential::Next;

/// What a look at the gating metrics says.
pub enum Look {
    /// The run adds no pairs (every gating metric decided, the last look taken, or no room):
    /// said on the terminal and kept as the design's end.
    Ended,
    /// Grow these phases: each (phase, trials it grows to, its slots), walked in order; the
    /// look taken next is `next`.
    Grow { next: u32, stages: Vec<(Phase, u32, Stage)> },
}

/// Look `look` at the gating metrics after the walk so far (see the module): whether to add
/// pairs, and which.
pub fn look(run: &Run, adaptive: &Adaptive, look: usize, sides: &[SideRun]) -> Look {
    let Adapted { mut sequential, trials } = adaptive.adapted();
    sequential.look = look as u32;
    let next = match look_at(run, &adaptive.skeleton, &sequential, sides) {
        Ok(next) => next,
        Err(err) => {
            run.error(format!("adaptive pairs: cannot read the samples so far: {err:#}"));
            return Look::Ended;
        }
    };
    let pairs_now = trials.values().copied().max().unwrap_or(0);
    let next = calibrating(&adaptive.skeleton, &sequential, look, next);
    let ended = match next {
        Next::Decided => format!("every gating metric was decided at look {look} ({pairs_now} pairs)"),
        Next::Exhausted { undecided } => format!(
            "still inconclusive at the last look ({pairs_now} pairs, trials.max_pairs): {}",
            undecided.join(", ")
        ),
        Next::MorePairs { pairs, undecided } => {
            let grow = phases_to_grow(&run.plan, &trials, &undecided, pairs);
            if grow.is_empty() {
                format!(
                    "inconclusive at look {look}, but measure and runtime, the phases that grow, do not record {}",
                    undecided.join(", ")
                )
            } else if let Some(why) = no_room(run, sides, &grow, pairs) {
                format!("inconclusive at look {look} ({}); {why}", undecided.join(", "))
            } else {
                let names: Vec<&str> = grow.iter().map(|(name, _)| name.as_str()).collect();
                run.display.line(&format!(
                    "look {look}: {} inconclusive at {pairs_now} pairs: adding pairs up to {pairs} ({})",
                    undecided.join(", "),
                    names.join(", ")
                ));
                // The next look is taken, whatever stops the growing.
                sequential.look = look as u32 + 1;
                adaptive.update(|a| a.sequential = sequential.clone());
                let lanes = run.opts.pairs as usize;
                let stages =
                    grow.into_iter().map(|(name, from)| (name, pairs, schedule::grow(name, from, pairs, lanes)));
                return Look::Grow { next: look as u32 + 1, stages: stages.collect() };
            }
        }
    };
    run.display.line(&format!("adaptive pairs: {ended}"));
    adaptive.update(|a| {
        a.sequential = Sequential { ended, ..sequential };
    });
    Look::Ended
}

/// An A/A run (the same commit on both sides) calibrates: its noise profile is used only for
/// metrics with enough pairs, so it grows to every planned look even when its gating metrics
/// are decided.
fn calibrating(skeleton: &Report, sequential: &Sequential, look: usize, next: Next) -> Next {
    let looks = sequential.design.looks();
    match next {
        Next::Decided if skeleton.base.commit == skeleton.head.commit && look < looks.len() => {
            Next::MorePairs { pairs: looks[look], undecided: sequential.gate.clone() }
        }
        next => next,
    }
}

/// Look `sequential.look` on the samples the run directory holds so far.
fn look_at(run: &Run, skeleton: &Report, sequential: &Sequential, sides: &[SideRun]) -> anyhow::Result<Next> {
    let resumed = run.resumed.as_ref().map(|r| &r.accounting);
    let (mut data, _) = collect(run.station.dir(), &measured(sides), resumed, &run.plan)?;
    let mut report = skeleton.clone();
    report.base_side = data.remove(&Side::Base).unwrap_or_default();
    report.head_side = data.remove(&Side::Head).unwrap_or_default();
    report.sequential = Some(sequential.clone());
    // Keys only a run names (a bench step's benchmarks) get their definitions, and those a
    // block gates join the gate.
    crate::report::distributions::define_recorded(&mut report, &run.plan);
    Ok(report.next_look(sequential.look as usize).unwrap_or(Next::Decided))
}

/// Why growing `grow` (phase, current trials) to `pairs` does not fit the run timeout or
/// the budget, at the round times seen so far; None when it fits.
fn no_room(run: &Run, sides: &[SideRun], grow: &[(Phase, u32)], pairs: u32) -> Option<String> {
    let lanes = run.opts.pairs.max(1);
    let needed: Duration =
        grow.iter().map(|(name, from)| run.round_times.rounds(*name, (pairs - from).div_ceil(lanes))).sum();
    let elapsed = run.started.elapsed();
    if elapsed + needed > run.opts.run_timeout {
        return Some(format!(
            "the run timeout ({} s, {} s used) leaves no room for the {:.0} s more pairs would take",
            run.opts.run_timeout.as_secs(),
            elapsed.as_secs(),
            needed.as_secs_f64()
        ));
    }
    let budget = run.plan.cost.budget_usd?;
    let lifetimes: Vec<f64> = sides.iter().map(|s| (s.meter.start.elapsed() + needed).as_secs_f64()).collect();
    over_budget(&lifetimes, run.plan.hourly_usd(), budget).then(|| {
        format!("the budget (${budget:.2}) leaves no room for the {:.0} s more pairs would take", needed.as_secs_f64())
    })
}
