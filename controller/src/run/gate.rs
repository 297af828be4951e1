//! The rules that decide, slot by slot, whether a timed trial runs: the stop (Ctrl-C/SIGTERM,
//! the run timeout, the budget), the dependency gate (no measure or runtime on a sandbox whose
//! first installation failed), lost sandboxes, and the limit of identical consecutive failures.
//! Everything is kept per sandbox — per pair and side — and per phase, so one pair's trouble
//! never blocks another pair. Pure: the async walk consults it, and tests drive it without any
//! sandbox.

use std::collections::BTreeMap;

use sandbench_proto::Phase;

use super::schedule::{Side, Slot, label};

/// Why the run stopped early.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    Canceled(String),
    Failed(String),
}

impl Stop {
    pub fn canceled() -> Stop {
        Stop::Canceled("The run was canceled".into())
    }

    pub fn timed_out() -> Stop {
        Stop::Failed("Benchmark exceeded its runtime limit".into())
    }

    pub fn over_budget() -> Stop {
        Stop::Failed("Reached the estimated run budget".into())
    }
}

/// Whether the estimate — each sandbox's lifetime so far at the hourly rate — reached the budget.
pub fn over_budget(lifetimes_s: &[f64], usd_per_hour: f64, budget_usd: f64) -> bool {
    let spent: f64 = lifetimes_s.iter().map(|s| s / 3600.0 * usd_per_hour).sum();
    spent >= budget_usd
}

/// What to do with a slot.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Run,
    Skip,
    /// The run stops: no further slot runs, in any lane.
    Stop(Stop),
}

/// How a trial ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TrialResult {
    Ok,
    /// Failed with this cause; `lost` when its sandbox no longer runs.
    Failed {
        cause: String,
        lost: bool,
    },
}

#[derive(Debug, Default)]
struct SandboxGate {
    /// Prepared, and its sandbox still runs.
    ready: bool,
    /// How its first install trial went.
    installed: Option<bool>,
}

/// Failures of one sandbox in one phase: the last cause and how many times in a row.
#[derive(Debug, Default)]
struct Streak {
    cause: String,
    count: u32,
    /// No further trial of this sandbox in this phase.
    blocked: bool,
}

/// The state of the rules over a run's walk.
#[derive(Debug)]
pub struct Gates {
    pairs: usize,
    failure_limit: u32,
    sandboxes: BTreeMap<(usize, Side), SandboxGate>,
    streaks: BTreeMap<(usize, Side, Phase), Streak>,
}

impl Gates {
    pub fn new(pairs: usize, failure_limit: u32) -> Gates {
        Gates { pairs, failure_limit, sandboxes: BTreeMap::new(), streaks: BTreeMap::new() }
    }

    /// The sandbox is prepared: its timed trials may run.
    pub fn ready(&mut self, pair: usize, side: Side) {
        self.sandboxes.entry((pair, side)).or_default().ready = true;
    }

    pub fn is_ready(&self, pair: usize, side: Side) -> bool {
        self.sandboxes.get(&(pair, side)).is_some_and(|s| s.ready)
    }

    /// Whether `slot` runs, given the stop if there is one; and an error to report, once.
    pub fn decide(&mut self, slot: &Slot, stop: Option<&Stop>) -> (Decision, Option<String>) {
        if let Some(stop) = stop {
            return (Decision::Stop(stop.clone()), None);
        }
        let sandbox = self.sandboxes.entry((slot.pair, slot.side)).or_default();
        if !sandbox.ready {
            return (Decision::Skip, None);
        }
        let installed = sandbox.installed;
        let streak = self.streaks.entry((slot.pair, slot.side, slot.phase)).or_default();
        if streak.blocked {
            return (Decision::Skip, None);
        }
        if slot.phase.needs_install() && installed != Some(true) {
            streak.blocked = true;
            let label = label(slot.side, slot.pair, self.pairs);
            return (
                Decision::Skip,
                Some(format!("{label} {}: skipped; first installation did not succeed", slot.phase)),
            );
        }
        (Decision::Run, None)
    }

    /// Takes a trial's result; `remaining` is how many trials of this sandbox in this phase
    /// would follow. Returns the errors to report, in order.
    pub fn record(&mut self, slot: &Slot, result: &TrialResult, remaining: u32) -> Vec<String> {
        let sandbox = self.sandboxes.entry((slot.pair, slot.side)).or_default();
        if slot.phase == Phase::Install && sandbox.installed.is_none() {
            sandbox.installed = Some(*result == TrialResult::Ok);
        }
        let streak = self.streaks.entry((slot.pair, slot.side, slot.phase)).or_default();
        let TrialResult::Failed { cause, lost } = result else {
            streak.count = 0;
            streak.cause.clear();
            return Vec::new();
        };
        let label = label(slot.side, slot.pair, self.pairs);
        let mut errors = vec![format!("{label} {} trial {}: {cause}", slot.phase, slot.trial)];
        if *lost {
            sandbox.ready = false;
            errors.push(format!("{label}: its sandbox stopped; no further trials for it"));
            return errors;
        }
        if streak.cause == *cause {
            streak.count += 1;
        } else {
            streak.cause = cause.clone();
            streak.count = 1;
        }
        if streak.count >= self.failure_limit && remaining > 0 {
            streak.blocked = true;
            errors.push(format!(
                "{label} {}: skipped {remaining} remaining trials after {} identical consecutive failures; last cause: {cause}",
                slot.phase, streak.count
            ));
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::super::schedule::{self, Stage, remaining_after};
    use super::*;

    /// Walks the stages as the async walker does (lanes one after the other here: the rules do
    /// not depend on how lanes interleave), with `result` answering every trial that runs and
    /// `stop_after` slots run before a stop. Returns the slots run and the errors.
    fn walk(
        stages: &[Stage],
        gates: &mut Gates,
        result: impl Fn(&Slot) -> TrialResult,
        stop_after: Option<(usize, Stop)>,
    ) -> (Vec<Slot>, Vec<String>, Option<Stop>) {
        let (mut ran, mut errors, mut stop) = (Vec::new(), Vec::new(), None);
        for stage in stages {
            for lane in &stage.lanes {
                for (at, slot) in lane.iter().enumerate() {
                    if let Some((n, why)) = &stop_after
                        && ran.len() == *n
                    {
                        stop = Some(why.clone());
                    }
                    let (decision, error) = gates.decide(slot, stop.as_ref());
                    errors.extend(error);
                    match decision {
                        Decision::Run => {
                            ran.push(*slot);
                            errors.extend(gates.record(slot, &result(slot), remaining_after(lane, at)));
                        }
                        Decision::Skip => {}
                        Decision::Stop(why) => return (ran, errors, Some(why)),
                    }
                }
            }
        }
        (ran, errors, None)
    }

    fn ready_gates(pairs: usize, limit: u32) -> Gates {
        let mut gates = Gates::new(pairs, limit);
        for pair in 0..pairs {
            for side in Side::BOTH {
                gates.ready(pair, side);
            }
        }
        gates
    }

    fn stages(install: u32, measure: u32, runtime: u32, pairs: usize) -> Vec<Stage> {
        schedule::build(&[(Phase::Install, install), (Phase::Measure, measure), (Phase::Runtime, runtime)], pairs)
    }

    fn fail(cause: &str) -> TrialResult {
        TrialResult::Failed { cause: cause.into(), lost: false }
    }

    fn count(ran: &[Slot], phase: &str, pair: usize, side: Side) -> usize {
        ran.iter().filter(|s| s.phase == phase && s.pair == pair && s.side == side).count()
    }

    #[test]
    fn everything_runs_when_everything_succeeds() {
        let (ran, errors, stop) = walk(&stages(2, 3, 3, 1), &mut ready_gates(1, 2), |_| TrialResult::Ok, None);
        assert_eq!(ran.len(), 2 * (2 + 3 + 3));
        assert!(errors.is_empty() && stop.is_none());
    }

    #[test]
    fn a_failed_first_install_gates_measure_and_runtime_of_that_sandbox_only() {
        let mut gates = ready_gates(1, 5);
        let result = |s: &Slot| match (s.phase.as_str(), s.trial, s.side) {
            ("install", 0, Side::Head) => fail("exit 1"),
            _ => TrialResult::Ok,
        };
        let (ran, errors, _) = walk(&stages(2, 3, 3, 1), &mut gates, result, None);
        // Head's later install trials still run; its measure and runtime do not; base's all do.
        assert_eq!(count(&ran, "install", 0, Side::Head), 2);
        assert_eq!(count(&ran, "measure", 0, Side::Head) + count(&ran, "runtime", 0, Side::Head), 0);
        assert_eq!(count(&ran, "measure", 0, Side::Base), 3);
        assert_eq!(
            errors,
            [
                "head install trial 0: exit 1",
                "head measure: skipped; first installation did not succeed",
                "head runtime: skipped; first installation did not succeed",
            ]
        );
    }

    #[test]
    fn the_failure_streak_is_per_pair_and_side() {
        // The bug this replaced: pair 2 failing blocked the same side of pairs 0 and 1.
        let mut gates = ready_gates(3, 2);
        let result = |s: &Slot| match (s.phase.as_str(), s.pair, s.side) {
            ("measure", 2, Side::Head) => fail("no prompt"),
            _ => TrialResult::Ok,
        };
        let (ran, errors, _) = walk(&stages(3, 9, 0, 3), &mut gates, result, None);
        for pair in 0..3 {
            assert_eq!(count(&ran, "measure", pair, Side::Base), 3, "pair {pair} base");
        }
        assert_eq!(count(&ran, "measure", 0, Side::Head), 3);
        assert_eq!(count(&ran, "measure", 1, Side::Head), 3);
        // Pair 2's head stops after two identical failures, with one trial left.
        assert_eq!(count(&ran, "measure", 2, Side::Head), 2);
        assert_eq!(
            errors.last().unwrap(),
            "head2 measure: skipped 1 remaining trials after 2 identical consecutive failures; last cause: no prompt"
        );
    }

    #[test]
    fn a_pair_without_its_own_install_is_gated_alone() {
        // Two install trials, three pairs (the schedule raises the count; without the raise the
        // third pair is gated, and only it).
        let (ran, errors, _) = walk(&stages(2, 3, 0, 3), &mut ready_gates(3, 2), |_| TrialResult::Ok, None);
        assert_eq!(count(&ran, "measure", 0, Side::Head), 1);
        assert_eq!(count(&ran, "measure", 1, Side::Head), 1);
        assert_eq!(count(&ran, "measure", 2, Side::Head) + count(&ran, "measure", 2, Side::Base), 0);
        assert_eq!(
            errors,
            [
                "base2 measure: skipped; first installation did not succeed",
                "head2 measure: skipped; first installation did not succeed"
            ]
        );
    }

    #[test]
    fn different_causes_or_a_success_reset_the_streak() {
        let mut gates = ready_gates(1, 2);
        let result = |s: &Slot| match (s.phase.as_str(), s.trial, s.side) {
            ("measure", 0, Side::Base) => fail("a"),
            ("measure", 1, Side::Base) => fail("b"),
            ("measure", 3, Side::Base) => fail("b"),
            _ => TrialResult::Ok,
        };
        let (ran, errors, _) = walk(&stages(1, 5, 0, 1), &mut gates, result, None);
        assert_eq!(count(&ran, "measure", 0, Side::Base), 5, "{errors:?}");
        assert_eq!(errors.len(), 3);
    }

    #[test]
    fn a_lost_sandbox_runs_nothing_more_and_the_other_side_goes_on() {
        let mut gates = ready_gates(1, 2);
        let result = |s: &Slot| match (s.phase.as_str(), s.trial, s.side) {
            ("measure", 1, Side::Head) => TrialResult::Failed { cause: "sandbox stopped".into(), lost: true },
            _ => TrialResult::Ok,
        };
        let (ran, errors, _) = walk(&stages(1, 3, 3, 1), &mut gates, result, None);
        assert_eq!(count(&ran, "measure", 0, Side::Head), 2);
        assert_eq!(count(&ran, "runtime", 0, Side::Head), 0);
        assert_eq!(count(&ran, "runtime", 0, Side::Base), 3);
        assert_eq!(
            errors,
            ["head measure trial 1: sandbox stopped", "head: its sandbox stopped; no further trials for it"]
        );
        assert!(!gates.is_ready(0, Side::Head));
    }

    #[test]
    fn an_unprepared_sandbox_is_skipped_silently() {
        let mut gates = Gates::new(1, 2);
        gates.ready(0, Side::Base);
        let (ran, errors, _) = walk(&stages(1, 1, 1, 1), &mut gates, |_| TrialResult::Ok, None);
        assert!(ran.iter().all(|s| s.side == Side::Base) && ran.len() == 3);
        assert!(errors.is_empty());
    }

    #[test]
    fn a_stop_ends_the_walk_before_the_next_slot() {
        for stop in [Stop::canceled(), Stop::over_budget(), Stop::timed_out()] {
            let (ran, _, stopped) =
                walk(&stages(2, 3, 3, 1), &mut ready_gates(1, 2), |_| TrialResult::Ok, Some((5, stop.clone())));
            assert_eq!(ran.len(), 5);
            assert_eq!(stopped, Some(stop));
        }
        assert_eq!(Stop::canceled(), Stop::Canceled("The run was canceled".into()));
    }

    #[test]
    fn the_budget_counts_every_sandbox_lifetime_at_the_hourly_rate() {
        // Two sandboxes at $0.36 an hour: 30 min each is $0.36.
        assert!(!over_budget(&[1799.0, 1800.0], 0.36, 0.36));
        assert!(over_budget(&[1800.0, 1800.0], 0.36, 0.36));
        assert!(!over_budget(&[], 0.36, 0.01));
    }
}
