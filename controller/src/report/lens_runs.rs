//! How many trials of each side run a lens step (`instructions = true`), and why: decided once,
//! as the run starts, from the A/A noise profile, and said beside the step's counts.
//!
//! A count under the lens is deterministic or it is not. One run a side decides it only where an
//! A/A calibration showed the step deterministic: the profile holds at least [`EVIDENCE_PAIRS`]
//! pairs of both its counts and the largest change they showed is within [`LENS_FLOOR_MIN`]
//! (the least floor a count is judged against); then the first trial of each side runs the lens
//! and no other does. Otherwise the first [`EVIDENCE_TRIALS`] trials of each side (at most the
//! phase's) run it: in an A/A run without that evidence, whose profile later runs use (an A/A
//! run with it counts once a side, a pair more of evidence); in a compare run without that
//! evidence; and for a step the profile shows not deterministic, whose verdict then takes this
//! run's own spread between trials as well (`decide::count_spread`). More runs would not narrow
//! a count's interval (it spans every pair's change), so three a side is what the verdict needs.
//! `[lens] runs = N` sets N whatever the profile says. Pairs an adaptive run adds never run the
//! lens: they are for wall time, and a count never gates (`trials.gate` refuses one).

use sandbench_proto::Phase;
use sandbench_proto::metric::{Facet, MetricKey};
use serde::{Deserialize, Serialize};

use super::decide::LENS_FLOOR_MIN;
use super::noise::NoiseProfile;
use crate::spec::Plan;

/// Trials of each side that show whether a step is deterministic under the lens (an A/A run
/// runs it in as many: 3 a side, 6 counts of each count).
pub const EVIDENCE_TRIALS: u32 = crate::spec::LENS_EVIDENCE_TRIALS;
/// Pairs of a count a noise profile needs before one run a side decides it.
pub const EVIDENCE_PAIRS: usize = EVIDENCE_TRIALS as usize;

/// One lens step's runs in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LensRuns {
    /// The step's stem (`work`, `cold`, `script.<name>`): its counts are `<stem>.instructions`
    /// and `<stem>.cycles`.
    pub stem: String,
    pub phase: Phase,
    /// The first `runs` trials of each side run the step under the lens.
    pub runs: u32,
    pub basis: Basis,
    /// Why, in the report's words.
    pub why: String,
}

/// What decided a step's lens runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// `[lens] runs`.
    Asked,
    /// An A/A run: it calibrates.
    Calibration,
    /// The profile shows the step deterministic: one run a side.
    Deterministic,
    /// The profile shows the step's counts differ between runs of the same code.
    NotDeterministic,
    /// No profile (or too few pairs in it) says either.
    Uncalibrated,
    /// A record (`sandbench record`): each step once.
    Record,
}

impl LensRuns {
    /// Whether trial `trial` of each side runs this step under the lens.
    pub fn runs_in(&self, trial: u32) -> bool {
        trial < self.runs
    }

    /// The note beside the step's counts in the report.
    pub fn note(&self) -> String {
        let counted = match self.runs {
            1 if self.basis == Basis::Record => "counted once".to_string(),
            1 => "counted once a side".to_string(),
            n => format!("counted in the first {n} trials of each side"),
        };
        format!("{counted}: {}", self.why)
    }
}

/// Every lens step of `plan`, in phase order: its runs in a run whose sides are the same commit
/// (`a_a`) or not, judged by `noise`.
pub fn plan(plan: &Plan, a_a: bool, noise: Option<&NoiseProfile>) -> Vec<LensRuns> {
    Phase::TIMED
        .into_iter()
        .flat_map(|phase| {
            let planned = plan.trials.of(phase);
            plan.lens_stems_of_phase(phase)
                .into_iter()
                .map(move |stem| decide(&stem, phase, planned, plan.lens_runs, a_a, noise))
        })
        .collect()
}

/// Every lens step of `plan` in a record of one revision: once (its phase permitting), unless
/// `[lens] runs` asks for more. A record keeps counts for the history, where a count is set
/// against the next recorded commit's; one run is what a deterministic step needs, and a step
/// that is not shows it there as a change point beyond its floor.
pub fn record(plan: &Plan) -> Vec<LensRuns> {
    Phase::TIMED
        .into_iter()
        .flat_map(|phase| {
            let planned = plan.trials.of(phase);
            plan.lens_stems_of_phase(phase).into_iter().map(move |stem| match plan.lens_runs {
                Some(_) => decide(&stem, phase, planned, plan.lens_runs, false, None),
                None => LensRuns {
                    stem,
                    phase,
                    runs: 1.min(planned),
                    basis: Basis::Record,
                    why: "a record counts each lens step once".to_string(),
                },
            })
        })
        .collect()
}

/// One step's runs (see the module): `planned` trials of its phase, `asked` by `[lens] runs`.
pub fn decide(
    stem: &str,
    phase: Phase,
    planned: u32,
    asked: Option<u32>,
    a_a: bool,
    noise: Option<&NoiseProfile>,
) -> LensRuns {
    let evidence_runs = EVIDENCE_TRIALS.min(planned);
    let (runs, basis, why) = if let Some(n) = asked {
        let capped = if n > planned { format!(" (its phase has {planned} trials)") } else { String::new() };
        (n.min(planned), Basis::Asked, format!("as `[lens] runs = {n}` asks{capped}"))
    } else if a_a {
        match evidence(stem, noise) {
            // The A/A runs before it showed the step deterministic: one run a side adds a pair
            // to that evidence (and would show a step that stopped being deterministic, as a
            // compare run's one pair would), at a third of the cost.
            Ok((run_id, pairs, spread)) if spread <= LENS_FLOOR_MIN => {
                let why = format!(
                    "an A/A run: the A/A profile of run {run_id} already shows the step deterministic ({pairs} pairs, \
                     counts within {}), so one run a side adds a pair to that evidence",
                    relative(spread)
                );
                (1.min(planned), Basis::Calibration, why)
            }
            _ => {
                let why = format!(
                    "an A/A calibration: {evidence_runs} runs of each side show whether the step is deterministic under \
                     the lens, and later runs count it once a side where it is"
                );
                (evidence_runs, Basis::Calibration, why)
            }
        }
    } else {
        match evidence(stem, noise) {
            Ok((run_id, pairs, spread)) if spread <= LENS_FLOOR_MIN => {
                let why = format!(
                    "the A/A profile of run {run_id} shows the step deterministic ({pairs} pairs, counts within {})",
                    relative(spread)
                );
                (1.min(planned), Basis::Deterministic, why)
            }
            Ok((run_id, _, spread)) => {
                let why = format!(
                    "not deterministic under the lens: the A/A profile of run {run_id} saw its counts differ by {}, \
                     over the {} floor, so this run measures its own spread between trials too",
                    relative(spread),
                    relative(LENS_FLOOR_MIN)
                );
                (evidence_runs, Basis::NotDeterministic, why)
            }
            Err(missing) => {
                let why = format!(
                    "no A/A profile shows the step deterministic ({missing}): this run measures its own spread \
                     between trials; an A/A run (the same commit on both sides) lets later runs count it once a side"
                );
                (evidence_runs, Basis::Uncalibrated, why)
            }
        }
    };
    LensRuns { stem: stem.to_string(), phase, runs, basis, why }
}

/// The profile's evidence of the step's determinism: its run, the fewest pairs of its two counts
/// and the larger of their spreads; or what is missing.
fn evidence(stem: &str, noise: Option<&NoiseProfile>) -> Result<(String, usize, f64), String> {
    let profile = noise.ok_or("no noise profile")?;
    let mut pairs = usize::MAX;
    let mut spread = 0.0f64;
    for facet in Facet::LENS {
        let key = MetricKey::new(stem, facet).to_string();
        let m = profile.metrics.get(&key).ok_or_else(|| format!("its profile has no {key}"))?;
        pairs = pairs.min(m.pairs);
        spread = spread.max(m.spread);
    }
    if pairs < EVIDENCE_PAIRS {
        return Err(format!("its profile has {pairs} pairs of its counts, fewer than {EVIDENCE_PAIRS}"));
    }
    Ok((profile.run_id.clone(), pairs, spread))
}

/// A relative difference as shown: a percentage, or in scientific notation when tiny.
fn relative(x: f64) -> String {
    if x > 0.0 && x < 1e-4 { format!("{x:.1e}") } else { format!("{:.2}%", x * 100.0) }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::report::noise::MetricNoise;

    fn profile(pairs: usize, spread: f64) -> NoiseProfile {
        let noise = MetricNoise {
            pairs,
            spread,
            estimate: 0.0,
            interval: (-spread, spread),
            floor: spread,
            runs: 1,
            between: None,
        };
        let metrics: BTreeMap<String, MetricNoise> =
            ["work.instructions", "work.cycles"].map(|k| (k.to_string(), noise.clone())).into();
        NoiseProfile {
            spec: "demo".into(),
            run_id: "aa1".into(),
            image: "node".into(),
            metrics,
            relative: BTreeMap::new(),
            found: None,
            pooled: Vec::new(),
            min_floor: None,
        }
    }

    fn runs(planned: u32, asked: Option<u32>, a_a: bool, noise: Option<&NoiseProfile>) -> (u32, Basis) {
        let r = decide("work", Phase::Runtime, planned, asked, a_a, noise);
        (r.runs, r.basis)
    }

    #[test]
    fn a_profile_that_shows_the_step_deterministic_lets_one_run_a_side_decide() {
        let deterministic = profile(3, 4.6e-7);
        assert_eq!(runs(10, None, false, Some(&deterministic)), (1, Basis::Deterministic));
        let r = decide("work", Phase::Runtime, 10, None, false, Some(&deterministic));
        assert_eq!(
            r.note(),
            "counted once a side: the A/A profile of run aa1 shows the step deterministic (3 pairs, counts within 4.6e-7)"
        );
        assert!(r.runs_in(0) && !r.runs_in(1));
    }

    #[test]
    fn without_that_evidence_three_trials_a_side_measure_the_runs_own_spread() {
        // No profile, a profile without the counts, or with too few pairs of them.
        assert_eq!(runs(10, None, false, None), (3, Basis::Uncalibrated));
        let mut other = profile(3, 0.0);
        other.metrics.remove("work.cycles");
        let r = decide("work", Phase::Runtime, 10, None, false, Some(&other));
        assert_eq!((r.runs, r.basis), (3, Basis::Uncalibrated));
        assert!(r.why.contains("its profile has no work.cycles"), "{}", r.why);
        let r = decide("work", Phase::Runtime, 10, None, false, Some(&profile(2, 0.0)));
        assert!(r.why.contains("2 pairs of its counts, fewer than 3"), "{}", r.why);
        // A step whose counts differed by more than the lens's least floor is said to be not
        // deterministic, and counted in three trials a side too.
        let r = decide("work", Phase::Runtime, 10, None, false, Some(&profile(20, 0.004)));
        assert_eq!((r.runs, r.basis), (3, Basis::NotDeterministic));
        assert!(r.note().starts_with("counted in the first 3 trials of each side: not deterministic under the lens"));
        assert!(r.why.contains("differ by 0.40%, over the 0.10% floor"), "{}", r.why);
        // Never more than the phase's trials.
        assert_eq!(runs(2, None, false, None), (2, Basis::Uncalibrated));
    }

    #[test]
    fn an_a_a_run_calibrates_in_three_trials_a_side_unless_its_profile_already_shows_the_step_deterministic() {
        let deterministic = profile(30, 0.0);
        // An A/A run without that evidence calibrates in three trials a side (its phase
        // permitting): no profile, too few pairs, or counts that differed.
        assert_eq!(runs(10, None, true, None), (3, Basis::Calibration));
        assert_eq!(runs(10, None, true, Some(&profile(2, 0.0))), (3, Basis::Calibration));
        assert_eq!(runs(10, None, true, Some(&profile(30, 0.004))), (3, Basis::Calibration));
        assert_eq!(runs(1, None, true, None), (1, Basis::Calibration));
        // One whose profile already shows the step deterministic adds a pair: one run a side.
        let r = decide("work", Phase::Runtime, 10, None, true, Some(&deterministic));
        assert_eq!((r.runs, r.basis), (1, Basis::Calibration));
        assert_eq!(
            r.note(),
            "counted once a side: an A/A run: the A/A profile of run aa1 already shows the step deterministic (30 pairs, counts within 0.00%), so one run a side adds a pair to that evidence"
        );
        // `[lens] runs` wins, capped at the phase's trials.
        assert_eq!(runs(10, Some(5), false, Some(&deterministic)), (5, Basis::Asked));
        assert_eq!(runs(10, Some(1), true, None), (1, Basis::Asked));
        let r = decide("work", Phase::Runtime, 4, Some(6), false, None);
        assert_eq!((r.runs, r.why.as_str()), (4, "as `[lens] runs = 6` asks (its phase has 4 trials)"));
    }
}
