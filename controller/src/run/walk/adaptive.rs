//! An adaptive run's state: how far it went (the design, the last look, the trials grown to) and
//! how long a round of each phase took. The looking itself is [`super::adapt`].

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use sandbench_proto::Phase;

use crate::report::{Report, Sequential};

/// The phases that grow with the pairs.
pub use crate::spec::GROWN;

/// An adaptive run's state: the report skeleton its looks are analysed on, and how far it went.
pub struct Adaptive {
    pub skeleton: Report,
    state: Mutex<Adapted>,
}

/// How far an adaptive run went.
#[derive(Debug, Clone)]
pub struct Adapted {
    /// The design and the last look taken, with why the run stopped adding pairs.
    pub sequential: Sequential,
    /// Measure and runtime's trials at the end (the planned counts unless grown).
    pub trials: BTreeMap<Phase, u32>,
}

impl Adaptive {
    /// The adaptive state of a run of `skeleton`'s plan, when it may add pairs: the plan allows
    /// more pairs than it starts with and the run is not a shard.
    pub fn new(skeleton: &Report, plan: &crate::spec::Plan, shard: bool) -> Option<Adaptive> {
        let sequential = Sequential::for_plan(plan).filter(|_| !shard)?;
        let trials = BTreeMap::from(GROWN.map(|phase| (phase, plan.trials.of(phase))));
        Some(Adaptive { skeleton: skeleton.clone(), state: Mutex::new(Adapted { sequential, trials }) })
    }

    pub fn adapted(&self) -> Adapted {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub fn update(&self, change: impl FnOnce(&mut Adapted)) {
        change(&mut self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }
}

/// How long one slot (one side's trial) of each phase took, from the stages walked so far:
/// what growing a phase is expected to cost. Slots that ran no lens step say it best (the pairs
/// added run none); a stage's mean over all its slots stands in until there is one.
#[derive(Debug, Default)]
pub struct RoundTimes {
    stages: Mutex<BTreeMap<Phase, Duration>>,
    /// Per phase: the time and number of slots walked without the lens.
    plain: Mutex<BTreeMap<Phase, (Duration, u32)>>,
}

impl RoundTimes {
    /// Records a stage of `phase` whose longest lane ran `slots` slots in `took`.
    pub fn record(&self, phase: Phase, slots: usize, took: Duration) {
        if slots > 0 {
            let per = took / u32::try_from(slots).unwrap_or(u32::MAX);
            self.stages.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(phase, per);
        }
    }

    /// Records `slots` slots of `phase` that ran no lens step and took `took` in all (one after
    /// the other, or a round of both sides at once).
    pub fn record_plain(&self, phase: Phase, slots: u32, took: Duration) {
        let mut plain = self.plain.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = plain.entry(phase).or_default();
        *entry = (entry.0 + took, entry.1 + slots);
    }

    /// How long `rounds` rounds (a base and a head slot each) of `phase` are expected to take.
    pub fn rounds(&self, phase: Phase, rounds: u32) -> Duration {
        let plain = self.plain.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&phase).copied();
        let per = match plain {
            Some((took, slots)) if slots > 0 => Some(took / slots),
            _ => self.stages.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&phase).copied(),
        };
        per.unwrap_or_default() * 2 * rounds
    }
}

/// The phases to grow to `pairs` trials for the `undecided` metrics: those of [`GROWN`] that
/// record one of them ([`crate::spec::Plan::records`]: a facet counts as its metric, a bench
/// step's benchmark as its step's) and have fewer trials, with
/// their current count.
pub fn phases_to_grow(
    plan: &crate::spec::Plan,
    trials: &BTreeMap<Phase, u32>,
    undecided: &[String],
    pairs: u32,
) -> Vec<(Phase, u32)> {
    GROWN
        .into_iter()
        .filter(|name| undecided.iter().any(|key| plan.records(*name, key)))
        .filter_map(|name| trials.get(&name).filter(|n| **n < pairs).map(|n| (name, *n)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undecided_benchmark_or_facet_grows_the_phase_that_records_it() {
        let text = "name = \"b\"\n[install]\ncommand = \"true\"\n[[runtime.bench]]\nname = \"go\"\nrun = \"go test -bench .\"\nformat = \"go\"\n[[runtime.command]]\nmetric = \"rt\"\nrun = \"true\"\nrepeat = 5\npercentiles = [50, 99]\n[metrics.rt]\ntitle = \"Rt\"\nunit = \"s\"\n";
        let plan = crate::spec::parse(std::path::Path::new("bench.toml"), text).unwrap_or_else(|e| panic!("{e}"));
        let trials: BTreeMap<Phase, u32> = [(Phase::Runtime, 3)].into_iter().collect();
        for key in ["bench.go.sort", "rt.p99"] {
            assert_eq!(phases_to_grow(&plan, &trials, &[key.to_string()], 6), [(Phase::Runtime, 3)], "{key}");
        }
        assert_eq!(phases_to_grow(&plan, &trials, &["bench.other.sort".to_string()], 6), []);
    }

    #[test]
    fn added_rounds_are_timed_by_the_slots_that_ran_no_lens() {
        let times = RoundTimes::default();
        // A stage of six slots in 60 s, one of its trials slowed by the lens: 10 s a slot.
        times.record(Phase::Runtime, 6, Duration::from_secs(60));
        assert_eq!(times.rounds(Phase::Runtime, 2), Duration::from_secs(40));
        // Its four slots without the lens took 8 s: what an added pair (no lens) costs.
        times.record_plain(Phase::Runtime, 4, Duration::from_secs(8));
        assert_eq!(times.rounds(Phase::Runtime, 2), Duration::from_secs(8));
        assert_eq!(times.rounds(Phase::Measure, 2), Duration::ZERO, "nothing seen of measure");
    }
}
