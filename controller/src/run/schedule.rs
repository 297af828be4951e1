//! The order of a run's timed trials, as a value: which phase, trial, pair and side comes when.
//! Pure, so the ABBA order and the split across pairs are tested without any sandbox.
//!
//! Phases follow each other (install → measure → runtime), each one a [`Stage`]. Within a stage
//! the pairs run in parallel, each walking its own lane of slots: trial `t` goes to pair
//! `t % pairs`, and each pair alternates its sides ABBA — base then head on its even rounds,
//! head then base on its odd ones — so drift hits both sides alike. A lens step runs under the
//! lens in the first trials of each side only, as many as the run decided ([`LensRuns`]): the
//! plan sent with every other trial asks for no lens there ([`without_lens`]).

use sandbench_proto::Phase;
pub use sandbench_proto::Side;
use sandbench_proto::plan::AgentPlan;

use crate::report::lens_runs::LensRuns;
use crate::shard::Shard;

/// The name of a pair's sandbox of one side: `base`/`head` with one pair, `base0`, `head0`,
/// `base1`… with several.
pub fn label(side: Side, pair: usize, pairs: usize) -> String {
    if pairs == 1 { side.as_str().to_string() } else { format!("{}{pair}", side.as_str()) }
}

/// One timed trial of one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub phase: Phase,
    pub trial: u32,
    pub pair: usize,
    pub side: Side,
}

/// One phase's slots: one lane per pair, the lanes walked in parallel, each in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    pub phase: Phase,
    pub lanes: Vec<Vec<Slot>>,
}

/// The timed phases of a run, in the order given with their trial counts (`Plan::timed_phases`),
/// and `pairs` pairs (at least one).
pub fn build(phases: &[(Phase, u32)], pairs: usize) -> Vec<Stage> {
    build_for(phases, pairs, None)
}

/// [`build`] for one shard of a sharded run: only the trials `shard` owns
/// ([`crate::shard`]), split across this run's pairs in turn as [`build`] splits all of them.
pub fn build_for(phases: &[(Phase, u32)], pairs: usize, shard: Option<Shard>) -> Vec<Stage> {
    let pairs = pairs.max(1);
    phases
        .iter()
        .map(|&(name, count)| {
            let trials = shard.map_or_else(|| (0..count).collect(), |s| s.trials(count));
            Stage { phase: name, lanes: (0..pairs).map(|pair| lane(name, &trials, pair, pairs)).collect() }
        })
        .collect()
}

/// The slots that grow a phase from `from` to `to` trials (an adaptive run's added pairs):
/// split across pairs and ordered ABBA as if the phase had had `to` trials from the start, so
/// each pair's rounds go on alternating where its planned ones stopped.
pub fn grow(phase: Phase, from: u32, to: u32, pairs: usize) -> Stage {
    let pairs = pairs.max(1);
    let all: Vec<u32> = (0..to).collect();
    let lanes = (0..pairs)
        .map(|pair| lane(phase, &all, pair, pairs).into_iter().filter(|s| s.trial >= from).collect())
        .collect();
    Stage { phase, lanes }
}

fn lane(name: Phase, trials: &[u32], pair: usize, pairs: usize) -> Vec<Slot> {
    let mine = trials.iter().enumerate().filter(|(at, _)| at % pairs == pair).map(|(_, t)| *t);
    mine.enumerate()
        .flat_map(|(round, trial)| {
            let order = if round % 2 == 0 { [Side::Base, Side::Head] } else { [Side::Head, Side::Base] };
            order.map(|side| Slot { phase: name, trial, pair, side })
        })
        .collect()
}

/// The timed trials of a run of `plan` with `pairs` pairs, its `shard`'s share, base alone for
/// a `record`: built once, as the run is resolved, and walked as they are.
pub fn for_run(plan: &crate::spec::Plan, pairs: u32, shard: Option<Shard>, record: bool) -> Vec<Stage> {
    let stages = build_for(&plan.timed_phases(), pairs as usize, shard);
    if record { only(stages, Side::Base) } else { stages }
}

/// The CPUs a run's sandboxes are given, resolved once with the schedule: each pair's set, and
/// a duet's two sets, which its sides swap every other trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuSets {
    /// Each pair's CPUs: several pairs split the machine's CPUs evenly, in order ([`split`]); one
    /// pair has the spec's `sandbox.cpuset`, or none.
    pub pairs: Vec<Option<String>>,
    /// A duet's two sets ([`crate::spec::Plan::duet_cpus`]), each side on one of its own.
    pub duet: Option<[String; 2]>,
}

impl CpuSets {
    /// The sets of a run of `plan` (its order final) with `pairs` pairs on this machine.
    pub fn for_run(plan: &crate::spec::Plan, pairs: u32) -> anyhow::Result<CpuSets> {
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let pairs = split(pairs as usize, cpus).into_iter().map(|set| set.or(plan.sandbox.cpuset.clone())).collect();
        let duet = match plan.trials.order {
            crate::spec::Order::Duet => Some(plan.duet_cpus_here()?),
            _ => None,
        };
        Ok(CpuSets { pairs, duet })
    }

    /// The CPUs of pair `pair`'s sandboxes, when they are pinned.
    pub fn of_pair(&self, pair: usize) -> Option<&str> {
        self.pairs.get(pair).and_then(Option::as_deref)
    }
}

/// CPUs for each of `pairs` pairs on a machine with `cpus` CPUs: with several, the CPUs split
/// evenly, in order (a pair's share wraps round when there are more pairs than CPUs); none for one.
pub fn split(pairs: usize, cpus: usize) -> Vec<Option<String>> {
    if pairs <= 1 {
        return vec![None];
    }
    let cpus = cpus.max(1);
    let per = (cpus / pairs).max(1);
    (0..pairs)
        .map(|p| {
            let first = (p * per) % cpus;
            let last = (first + per - 1).min(cpus - 1);
            Some(if first == last { first.to_string() } else { format!("{first}-{last}") })
        })
        .collect()
}

/// `stages` with the slots of `side` only (a record measures one revision, as base).
pub fn only(stages: Vec<Stage>, side: Side) -> Vec<Stage> {
    stages
        .into_iter()
        .map(|mut stage| {
            for lane in &mut stage.lanes {
                lane.retain(|slot| slot.side == side);
            }
            stage
        })
        .collect()
}

/// Whether trial `trial` of `phase` runs a step under the lens.
pub fn runs_lens(phase: Phase, trial: u32, lens: &[LensRuns]) -> bool {
    lens.iter().any(|r| r.phase == phase && r.runs_in(trial))
}

/// `plan` as trial `trial` of `phase` is sent when a lens step of the phase does not run in it:
/// those steps ask for no lens. None when the plan goes as it is.
pub fn without_lens(plan: &AgentPlan, phase: Phase, trial: u32, lens: &[LensRuns]) -> Option<AgentPlan> {
    let off: Vec<&str> =
        lens.iter().filter(|r| r.phase == phase && !r.runs_in(trial)).map(|r| r.stem.as_str()).collect();
    if off.is_empty() {
        return None;
    }
    let mut plan = plan.clone();
    let section = match phase {
        Phase::Measure => {
            plan.measure.instructions &= !off.contains(&sandbench_proto::metric::COLD);
            return Some(plan);
        }
        Phase::Runtime => &mut plan.runtime,
        Phase::Transport => &mut plan.transport,
        Phase::Ui => &mut plan.ui,
        Phase::Prepare | Phase::Install | Phase::Synthetic => return Some(plan),
    };
    for command in section.commands.iter_mut().filter(|c| off.contains(&c.metric.as_str())) {
        command.instructions = false;
    }
    for script in section.scripts.iter_mut().filter(|s| off.contains(&format!("script.{}", s.name).as_str())) {
        script.instructions = false;
    }
    for bench in section.benches.iter_mut().filter(|b| off.contains(&b.stem().as_str())) {
        bench.instructions = false;
    }
    Some(plan)
}

/// How many trials of the same side come after position `at` of a lane.
pub fn remaining_after(lane: &[Slot], at: usize) -> u32 {
    let side = lane[at].side;
    lane[at + 1..].iter().filter(|s| s.side == side).count() as u32
}

/// The install trials a run with `pairs` pairs needs. Measure and runtime run as the user of
/// the sandbox's own first installation (the agent keeps it per sandbox), so every pair's
/// sandboxes need an install trial of their own: with more pairs than install trials, the count
/// is raised to one per pair. Pairs run in parallel, so this costs no extra time.
pub fn install_trials(asked: u32, pairs: usize) -> u32 {
    asked.max(u32::try_from(pairs).unwrap_or(u32::MAX))
}

/// The install trials a sharded run needs: every pair of every shard installs its own
/// sandboxes, so at least `pairs × shards` ([`install_trials`] over all of them).
pub fn sharded_install_trials(asked: u32, pairs: usize, shard: Option<Shard>) -> u32 {
    let shards = shard.map_or(1, |s| s.count as usize);
    install_trials(asked, pairs.saturating_mul(shards))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trials(install: u32, measure: u32, runtime: u32) -> [(Phase, u32); 3] {
        [(Phase::Install, install), (Phase::Measure, measure), (Phase::Runtime, runtime)]
    }

    fn order(lane: &[Slot]) -> Vec<(u32, &'static str)> {
        lane.iter().map(|s| (s.trial, s.side.as_str())).collect()
    }

    #[test]
    fn several_pairs_split_the_machines_cpus_in_order_and_one_pair_takes_none() {
        assert_eq!(split(1, 8), [None]);
        let some = |sets: &[&str]| sets.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
        assert_eq!(split(2, 8), some(&["0-3", "4-7"]));
        assert_eq!(split(3, 8), some(&["0-1", "2-3", "4-5"]));
        assert_eq!(split(2, 2), some(&["0", "1"]));
        // More pairs than CPUs: each pair one CPU, round the machine.
        assert_eq!(split(3, 2), some(&["0", "1", "0"]));
        assert_eq!(split(2, 0), some(&["0", "0"]), "a machine that says nothing counts as one CPU");
    }

    #[test]
    fn one_pair_walks_every_trial_abba() {
        let stages = build(&trials(2, 4, 1), 1);
        assert_eq!(stages.iter().map(|s| s.phase).collect::<Vec<_>>(), ["install", "measure", "runtime"]);
        assert!(stages.iter().all(|s| s.lanes.len() == 1));
        assert_eq!(order(&stages[0].lanes[0]), [(0, "base"), (0, "head"), (1, "head"), (1, "base")]);
        assert_eq!(
            order(&stages[1].lanes[0]),
            [(0, "base"), (0, "head"), (1, "head"), (1, "base"), (2, "base"), (2, "head"), (3, "head"), (3, "base")]
        );
        // Each phase starts its ABBA afresh.
        assert_eq!(order(&stages[2].lanes[0]), [(0, "base"), (0, "head")]);
        assert!(stages.iter().flat_map(|s| &s.lanes[0]).all(|slot| slot.pair == 0));
    }

    #[test]
    fn trials_are_split_across_pairs_each_pair_abba_on_its_own_rounds() {
        let stages = build(&trials(3, 5, 0), 2);
        let measure = &stages[1];
        assert_eq!(
            order(&measure.lanes[0]),
            [(0, "base"), (0, "head"), (2, "head"), (2, "base"), (4, "base"), (4, "head")]
        );
        assert_eq!(order(&measure.lanes[1]), [(1, "base"), (1, "head"), (3, "head"), (3, "base")]);
        assert!(measure.lanes[1].iter().all(|s| s.pair == 1 && s.phase == "measure"));
        // Every trial once per side, whichever pair runs it.
        for side in Side::BOTH {
            let mut got: Vec<u32> =
                measure.lanes.iter().flatten().filter(|s| s.side == side).map(|s| s.trial).collect();
            got.sort();
            assert_eq!(got, [0, 1, 2, 3, 4]);
        }
        assert!(stages[2].lanes.iter().all(Vec::is_empty), "no runtime trials");
    }

    #[test]
    fn with_the_install_trials_raised_every_pair_installs_its_own_sandboxes() {
        // The demo with --pairs 3: two install trials asked, three pairs.
        assert_eq!(install_trials(2, 3), 3);
        assert_eq!(install_trials(5, 3), 5);
        let stages = build(&trials(install_trials(2, 3), 3, 3), 3);
        for lane in &stages[0].lanes {
            for side in Side::BOTH {
                assert!(lane.iter().any(|s| s.side == side), "pair {} {side:?} has no install trial", lane[0].pair);
            }
        }
        // Without the raise, the third pair would have none.
        assert!(build(&trials(2, 3, 3), 3)[0].lanes[2].is_empty());
    }

    #[test]
    fn remaining_counts_the_same_sides_later_trials_in_the_lane() {
        let lane = &build(&trials(0, 3, 0), 1)[1].lanes[0];
        // base0 head0 head1 base1 base2 head2
        let remaining: Vec<u32> = (0..lane.len()).map(|i| remaining_after(lane, i)).collect();
        assert_eq!(remaining, [2, 2, 1, 1, 0, 0]);
    }

    #[test]
    fn grown_trials_go_on_with_each_pairs_abba_rounds() {
        // One pair: measure planned with 3 trials, grown to 6. Rounds 3, 4 and 5 continue the
        // alternation: head first on the odd rounds.
        let grown = grow(Phase::Measure, 3, 6, 1);
        assert_eq!(
            order(&grown.lanes[0]),
            [(3, "head"), (3, "base"), (4, "base"), (4, "head"), (5, "head"), (5, "base")]
        );
        // Planned and grown slots together are exactly the plan of 6 trials.
        let whole = &build(&trials(0, 6, 0), 1)[1].lanes[0];
        let planned = &build(&trials(0, 3, 0), 1)[1].lanes[0];
        assert_eq!([planned.as_slice(), grown.lanes[0].as_slice()].concat(), *whole);
        // Two pairs: trial t on pair t % 2, as the plan would have put it.
        let grown = grow(Phase::Runtime, 5, 8, 2);
        assert_eq!(order(&grown.lanes[0]), [(6, "head"), (6, "base")]);
        assert_eq!(order(&grown.lanes[1]), [(5, "base"), (5, "head"), (7, "head"), (7, "base")]);
        assert!(grow(Phase::Runtime, 8, 8, 2).lanes.iter().all(Vec::is_empty));
    }

    #[test]
    fn a_lens_step_asks_for_the_lens_only_in_its_first_trials() {
        let spec = crate::provision::fake::spec_text(
            "install = 1\nmeasure = 5\nruntime = 5",
            "[install]\ncommand = \"true\"\n[measure]\nstartup = [\"p\"]\ninstructions = true\n\
             [[runtime.command]]\nmetric = \"work\"\nrun = \"p work\"\ninstructions = true\n\
             [[runtime.script]]\nname = \"s\"\nrun = \"p s\"\nmetrics = [\"x\"]\ninstructions = true\n\
             [metrics.work]\ntitle = \"w\"\nunit = \"s\"\n[metrics.x]\ntitle = \"x\"\nunit = \"s\"\n",
        );
        let plan = crate::spec::parse(std::path::Path::new("bench.toml"), &spec).unwrap_or_else(|e| panic!("{e}"));
        let agent = plan.agent_plan("c0ffee");
        // The cold start and the script counted once a side (a profile showed them
        // deterministic), `work` in three trials.
        let mut lens = crate::report::lens_runs::plan(&plan, false, None);
        for r in lens.iter_mut().filter(|r| r.stem != "work") {
            r.runs = 1;
        }
        assert_eq!(
            lens.iter().map(|r| (r.stem.as_str(), r.runs)).collect::<Vec<_>>(),
            [("cold", 1), ("work", 3), ("script.s", 1)]
        );
        // Trial 0 goes as the spec has it; install never has a lens step.
        assert!(without_lens(&agent, Phase::Measure, 0, &lens).is_none());
        assert!(without_lens(&agent, Phase::Runtime, 0, &lens).is_none());
        assert!(without_lens(&agent, Phase::Install, 4, &lens).is_none());
        let measure = without_lens(&agent, Phase::Measure, 1, &lens).unwrap();
        assert!(!measure.measure.instructions && measure.measure.startup.is_some());
        let runtime = without_lens(&agent, Phase::Runtime, 1, &lens).unwrap();
        assert!(runtime.runtime.commands[0].instructions && !runtime.runtime.scripts[0].instructions);
        assert!(runtime.measure.instructions, "only the phase's own steps change");
        let late = without_lens(&agent, Phase::Runtime, 3, &lens).unwrap();
        assert!(!late.runtime.commands[0].instructions);
        assert_eq!(
            (0..5).map(|t| runs_lens(Phase::Runtime, t, &lens)).collect::<Vec<_>>(),
            [true, true, true, false, false]
        );
        assert!(!runs_lens(Phase::Measure, 1, &lens));
    }

    #[test]
    fn labels_name_pairs_only_when_there_are_several() {
        assert_eq!(label(Side::Head, 0, 1), "head");
        assert_eq!(label(Side::Base, 2, 3), "base2");
    }
}
