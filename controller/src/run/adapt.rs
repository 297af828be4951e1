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

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use sandbench_proto::plan::phase;

use super::gate::{Stop, over_budget};
use super::output::collect;
use super::schedule;
use super::walk::{Run, SideRun};
use crate::report::{Report, Sequential};
use crate::stats::sequential::Next;

/// The phases that grow with the pairs.
const GROWN: [&str; 2] = [phase::MEASURE, phase::RUNTIME];

/// An adaptive run's state: the report skeleton its looks are analysed on, and how far it went.
pub(super) struct Adaptive {
    skeleton: Report,
    state: Mutex<Adapted>,
}

/// How far an adaptive run went.
#[derive(Debug, Clone)]
pub(super) struct Adapted {
    /// The design and the last look taken, with why the run stopped adding pairs.
    pub sequential: Sequential,
    /// Measure and runtime's trials at the end (the planned counts unless grown).
    pub trials: BTreeMap<&'static str, u32>,
}

impl Adaptive {
    /// The adaptive state of a run of `skeleton`'s plan, when it may add pairs: the plan allows
    /// more pairs than it starts with and the run is not a shard.
    pub fn new(skeleton: &Report, plan: &crate::spec::Plan, shard: bool) -> Option<Adaptive> {
        let sequential = Sequential::for_plan(plan).filter(|_| !shard)?;
        let trials = BTreeMap::from([(phase::MEASURE, plan.trials.measure), (phase::RUNTIME, plan.trials.runtime)]);
        Some(Adaptive { skeleton: skeleton.clone(), state: Mutex::new(Adapted { sequential, trials }) })
    }

    pub fn adapted(&self) -> Adapted {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn update(&self, change: impl FnOnce(&mut Adapted)) {
        change(&mut self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }
}

/// How long one slot (one side's trial) of each phase took, from the stages walked so far:
/// what growing a phase is expected to cost.
#[derive(Debug, Default)]
pub(super) struct RoundTimes(Mutex<BTreeMap<&'static str, Duration>>);

impl RoundTimes {
    /// Records a stage of `phase` whose longest lane ran `slots` slots in `took`.
    pub fn record(&self, phase: &'static str, slots: usize, took: Duration) {
        if slots > 0 {
            let per = took / u32::try_from(slots).unwrap_or(u32::MAX);
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(phase, per);
        }
    }

    /// How long `rounds` rounds (a base and a head slot each) of `phase` are expected to take.
    fn rounds(&self, phase: &str, rounds: u32) -> Duration {
        let per = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(phase).copied();
        per.unwrap_or_default() * 2 * rounds
    }
}

/// The phases to grow to `pairs` trials for the `undecided` metrics: those of [`GROWN`] that
/// record one of them (a `.cpu` companion counts as its metric) and have fewer trials, with
/// their current count.
pub(super) fn phases_to_grow(
    plan: &crate::spec::Plan,
    trials: &BTreeMap<&'static str, u32>,
    undecided: &[String],
    pairs: u32,
) -> Vec<(&'static str, u32)> {
    GROWN
        .into_iter()
        .filter(|name| {
            let metrics = plan.metrics_of_phase(name);
            undecided.iter().any(|key| {
                let stem = key.strip_suffix(crate::report::CPU_SUFFIX).unwrap_or(key);
                metrics.iter().any(|m| m == stem)
            })
        })
        .filter_map(|name| trials.get(name).filter(|n| **n < pairs).map(|n| (name, *n)))
        .collect()
}

impl Run {
    /// Looks at the gating metrics after the planned trials and adds pairs while one is
    /// inconclusive (see the module). The stop, if the run was stopped while growing.
    pub(super) async fn adapt(&self, sides: &[SideRun]) -> Option<Stop> {
        let adaptive = self.adaptive.as_ref()?;
        let looks = adaptive.adapted().sequential.design.looks();
        for look in 1..=looks.len() {
            let Adapted { mut sequential, trials } = adaptive.adapted();
            sequential.look = look as u32;
            let next = match self.look_at(&adaptive.skeleton, &sequential, sides) {
                Ok(next) => next,
                Err(err) => {
                    self.error(format!("adaptive pairs: cannot read the samples so far: {err:#}"));
                    return None;
                }
            };
            let pairs_now = trials.values().copied().max().unwrap_or(0);
            let ended = match next {
                Next::Decided => Some(format!("every gating metric was decided at look {look} ({pairs_now} pairs)")),
                Next::Exhausted { undecided } => Some(format!(
                    "still inconclusive at the last look ({pairs_now} pairs, trials.max_pairs): {}",
                    undecided.join(", ")
                )),
                Next::MorePairs { pairs, undecided } => {
                    let grow = phases_to_grow(&self.plan, &trials, &undecided, pairs);
                    if grow.is_empty() {
                        Some(format!(
                            "inconclusive at look {look}, but measure and runtime, the phases that grow, do not record {}",
                            undecided.join(", ")
                        ))
                    } else if let Some(why) = self.no_room(sides, &grow, pairs) {
                        Some(format!("inconclusive at look {look} ({}); {why}", undecided.join(", ")))
                    } else {
                        let names: Vec<&str> = grow.iter().map(|(name, _)| *name).collect();
                        self.display.line(&format!(
                            "look {look}: {} inconclusive at {pairs_now} pairs: adding pairs up to {pairs} ({})",
                            undecided.join(", "),
                            names.join(", ")
                        ));
                        // The next look is taken, whatever stops the growing.
                        sequential.look = look as u32 + 1;
                        adaptive.update(|a| a.sequential = sequential.clone());
                        for (name, from) in grow {
                            let stage = schedule::grow(name, from, pairs, self.opts.pairs as usize);
                            let stop = self.walk_stage(sides, &stage).await;
                            adaptive.update(|a| {
                                a.trials.insert(name, pairs);
                            });
                            if stop.is_some() {
                                adaptive.update(|a| {
                                    a.sequential.ended = format!("stopped while adding pairs at look {}", look + 1);
                                });
                                return stop;
                            }
                        }
                        None
                    }
                }
            };
            if let Some(ended) = ended {
                self.display.line(&format!("adaptive pairs: {ended}"));
                adaptive.update(|a| {
                    a.sequential = Sequential { ended, ..sequential };
                });
                return None;
            }
        }
        None
    }

    /// Look `sequential.look` on the samples the run directory holds so far.
    fn look_at(&self, skeleton: &Report, sequential: &Sequential, sides: &[SideRun]) -> anyhow::Result<Next> {
        let resumed = self.resumed.as_ref().map(|r| (self.station.run_id(), &r.accounting));
        let (mut data, _) = collect(self.station.dir(), sides, resumed, self.plan.max_metrics)?;
        let mut report = skeleton.clone();
        report.base_side = data.remove(sandbench_proto::Side::Base.as_str()).unwrap_or_default();
        report.head_side = data.remove(sandbench_proto::Side::Head.as_str()).unwrap_or_default();
        report.sequential = Some(sequential.clone());
        Ok(report.next_look(sequential.look as usize).unwrap_or(Next::Decided))
    }

    /// Why growing `grow` (phase, current trials) to `pairs` does not fit the run timeout or
    /// the budget, at the round times seen so far; None when it fits.
    fn no_room(&self, sides: &[SideRun], grow: &[(&'static str, u32)], pairs: u32) -> Option<String> {
        let lanes = self.opts.pairs.max(1);
        let needed: Duration =
            grow.iter().map(|(name, from)| self.round_times.rounds(name, (pairs - from).div_ceil(lanes))).sum();
        let elapsed = self.started.elapsed();
        if elapsed + needed > self.opts.run_timeout {
            return Some(format!(
                "the run timeout ({} s, {} s used) leaves no room for the {:.0} s more pairs would take",
                self.opts.run_timeout.as_secs(),
                elapsed.as_secs(),
                needed.as_secs_f64()
            ));
        }
        let budget = self.plan.cost.budget_usd?;
        let lifetimes: Vec<f64> = sides.iter().map(|s| (s.meter.start.elapsed() + needed).as_secs_f64()).collect();
        over_budget(&lifetimes, self.plan.hourly_usd(), budget).then(|| {
            format!(
                "the budget (${budget:.2}) leaves no room for the {:.0} s more pairs would take",
                needed.as_secs_f64()
            )
        })
    }
}
