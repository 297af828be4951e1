//! The paired rule, the default: one decision per metric from its pairs.
//!
//! The paired estimate (Hodges–Lehmann) and its interval at the report's level ([`stats::paired_at`])
//! are judged against a floor, on the very numbers displayed: regressed when the interval is
//! wholly above +floor, improved when wholly below −floor, no change when within ±floor,
//! inconclusive otherwise. Metrics with fewer than 3 pairs (sizes measured once) compare the
//! relative change of medians with the floor widened by both sides' spread, as the reference
//! rule does. A metric with a failed or missing sample is incomplete whatever its pairs say:
//! missing measurements are not performance wins.
//!
//! **Floors.** From the A/A noise profile when it has at least [`MIN_PROFILE_PAIRS`] pairs of the
//! metric: a bound on the systematic difference between two identical sandboxes — one A/A run's
//! 95 % interval's farther end, or, pooled over the runs of a spec, image and machine, the farther
//! end of the 95 % interval of the difference a next run may carry ([`crate::stats::pool`]) —
//! never below the spec's practical minimum (`[report] min_floor`, by default
//! [`PROFILE_FLOOR_MIN`]). Otherwise the metric's
//! relative floor, or its absolute floor over the base median when that is larger, capped at
//! [`FLOOR_CAP`]. Why a cap: the floor is tested on head/base − 1, where "improved" means a ratio
//! below 1 − floor; at 100 % nothing could ever improve, and an absolute floor of 100 ms on a
//! 46 ms start (215 %) would call a 3× slowdown "no change". Absolute floors are a measurement
//! resolution, which the interval already accounts for; past 50 % the report says the cap was
//! applied and the minimum detectable effect tells what the run could resolve.

use super::format::plural;
use super::noise::NoiseProfile;
use crate::spec::MetricDef;
use crate::stats::{self, Comparison, Outcome, Paired, Verdict};

/// The largest floor the paired rule tests (head/base − 1).
pub const FLOOR_CAP: f64 = 0.5;
/// A noise profile's floor is never below this unless the spec says otherwise
/// (`[report] min_floor`): timer and scheduler resolution.
pub const PROFILE_FLOOR_MIN: f64 = crate::spec::DEFAULT_MIN_FLOOR;
pub use super::noise::MIN_PROFILE_PAIRS;

/// A metric's floor, where it came from, and what a reader should know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Floor {
    pub value: f64,
    pub note: Option<String>,
}

/// The floor of `def` at this base median, from the profile when it calibrated the metric.
pub fn floor(def: &MetricDef, base_median: Option<f64>, noise: Option<&NoiseProfile>) -> Floor {
    let mut profile_note = None;
    if let Some(profile) = noise {
        match profile.floor(&def.key) {
            Ok(f) => {
                let min = profile.min_floor.unwrap_or(PROFILE_FLOOR_MIN).min(FLOOR_CAP);
                let value = f.clamp(min, FLOOR_CAP);
                // Raised to the practical minimum: the method line says so once for every metric.
                let note =
                    (value < f).then(|| format!("the noise profile's floor {} was clamped to {}", pct(f), pct(value)));
                return Floor { value, note };
            }
            Err(why) => profile_note = Some(why),
        }
    }
    let from_absolute = base_median.filter(|m| *m > 0.0).map(|m| def.absolute / m);
    let wanted = from_absolute.map_or(def.relative, |a| a.max(def.relative));
    let value = wanted.min(FLOOR_CAP);
    let cap_note = (wanted > FLOOR_CAP).then(|| {
        format!(
            "the spec's floor is {} of the base median; capped at {} (the minimum detectable effect says what this run could resolve)",
            pct(wanted),
            pct(FLOOR_CAP)
        )
    });
    let note = match (profile_note, cap_note) {
        (Some(p), Some(c)) => Some(format!("{p}; {c}")),
        (p, c) => p.or(c),
    };
    Floor { value, note }
}

/// A metric's samples as the decision sees them.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// (base, head) of trials both sides measured.
    pub pairs: &'a [(f64, f64)],
    /// Successful samples whose other side failed or is missing.
    pub unpaired: usize,
    /// Samples with an error, both sides.
    pub failed: usize,
    /// Samples each side should have.
    pub expected: usize,
}

/// The decision: the comparison with the paired rule's outcome (no reference threshold), the
/// paired analysis that decided, and notes.
pub fn decide(reference: &Comparison, e: &Evidence, floor: &Floor, alpha: f64) -> (Comparison, Paired, Vec<String>) {
    let mut comparison = reference.clone();
    comparison.threshold = None;
    let mut notes: Vec<String> = floor.note.iter().cloned().collect();
    let mut paired = stats::paired_at(e.pairs, floor.value, alpha);
    let outcome = if reference.outcome == Outcome::Unavailable {
        Outcome::Unavailable
    } else if paired.verdict == Verdict::TooFewPairs {
        few_pairs(&comparison, &mut paired)
    } else {
        match paired.verdict {
            Verdict::Regressed => Outcome::Regressed,
            Verdict::Improved => Outcome::Improved,
            Verdict::NoChange => Outcome::NoClearChange,
            _ => Outcome::Inconclusive,
        }
    };
    let complete = reference.outcome != Outcome::Incomplete && e.failed == 0;
    comparison.outcome = if complete || outcome == Outcome::Unavailable { outcome } else { Outcome::Incomplete };
    if paired.dropped > 0 {
        notes.push(format!("{} left out: a value was zero or negative (no log ratio)", plural(paired.dropped, "pair")));
    }
    if e.failed > 0 {
        notes.push(format!("{} failed", plural(e.failed, "sample")));
    }
    if e.unpaired > 0 {
        notes.push(format!("{} without the other side's trial", plural(e.unpaired, "sample")));
    }
    if comparison.outcome == Outcome::Incomplete && e.failed == 0 {
        notes.push(format!("fewer samples than the {} expected", e.expected));
    }
    (comparison, paired, notes)
}

/// Fewer than 3 pairs: the relative change of medians against the floor widened by both
/// spreads (range below 4 samples), each rounded to 0.01 % as displayed.
fn few_pairs(c: &Comparison, paired: &mut Paired) -> Outcome {
    paired.method = "fewer than 3 pairs: medians against the floor and both spreads".into();
    let (Some(b), Some(relative)) = (c.base_median.filter(|b| *b > 0.0), c.relative) else {
        // No relative change (a zero base): no floor to test it against.
        return Outcome::Inconclusive;
    };
    let widened = paired.floor.max(c.base_spread / b).max(c.head_spread / b).min(FLOOR_CAP.max(paired.floor));
    paired.floor = (widened * 10_000.0).round() / 10_000.0;
    let shown = (relative * 10_000.0).round() / 10_000.0;
    paired.estimate = Some(shown);
    match stats::verdict_of(shown, shown, paired.floor) {
        Verdict::Regressed => Outcome::Regressed,
        Verdict::Improved => Outcome::Improved,
        _ => Outcome::NoClearChange,
    }
}

/// What two lens runs of the same code may differ by when nothing measured it (the A/A
/// agreement the lens is built to: 0.05 %), and the least spread a count is judged with.
pub const DETERMINISTIC: f64 = 0.0005;
/// A lens metric's floor from its A/A calibration is never below this.
pub const LENS_FLOOR_MIN: f64 = 0.001;
/// Above this, counts of one side's trials disagree so much that the step is not deterministic.
pub const NOT_DETERMINISTIC: f64 = 0.01;

/// Where a count's spread came from.
#[derive(Debug, Clone, PartialEq)]
pub struct CountSpread {
    pub value: f64,
    pub source: String,
}

/// A lens metric's spread: the largest of its A/A calibration's (any pair), the differences
/// between one side's trials (`within`, as relative changes from the side's median), and
/// [`DETERMINISTIC`].
pub fn count_spread(key: &str, within: Option<f64>, noise: Option<&NoiseProfile>) -> CountSpread {
    let calibrated = noise.and_then(|n| n.metrics.get(key).filter(|m| m.pairs >= 1).map(|m| (n, m)));
    let mut value = DETERMINISTIC;
    let mut sources = Vec::new();
    if let Some((profile, m)) = calibrated {
        value = value.max(m.spread);
        sources.push(format!("A/A profile {} ({} pairs, {})", profile.run_id, m.pairs, pct(m.spread)));
    }
    if let Some(w) = within {
        value = value.max(w);
        sources.push(format!("this run's trials of one side ({})", pct(w)));
    }
    let source = if sources.is_empty() {
        format!("assumed {} (one trial a side, no A/A calibration of this count)", pct(DETERMINISTIC))
    } else {
        format!("{} from {}", pct(value), sources.join(" and "))
    };
    CountSpread { value, source }
}

/// A lens metric's floor: its A/A calibration's (the largest change two identical sides showed,
/// any pair), never below [`LENS_FLOOR_MIN`]; else the spec's relative floor (0.5 % by default).
pub fn count_floor(def: &MetricDef, noise: Option<&NoiseProfile>) -> Floor {
    match noise.and_then(|n| n.metrics.get(&def.key).filter(|m| m.pairs >= 1)) {
        Some(m) => Floor { value: m.floor.clamp(LENS_FLOOR_MIN, FLOOR_CAP), note: None },
        None => Floor { value: def.relative.min(FLOOR_CAP), note: None },
    }
}

/// The decision for a count: [`stats::paired_counts`] on the pairs (one decides), the same
/// completeness rules as [`decide`].
pub fn decide_counts(
    reference: &Comparison,
    e: &Evidence,
    floor: &Floor,
    spread: &CountSpread,
) -> (Comparison, Paired, Vec<String>) {
    let mut comparison = reference.clone();
    comparison.threshold = None;
    let paired = stats::paired_counts(e.pairs, floor.value, spread.value);
    let mut notes = vec![format!("a count: one pair decides; spread {}", spread.source)];
    if spread.value > NOT_DETERMINISTIC {
        notes.push(format!(
            "the counts differ by {} between runs of the same code: this step is not deterministic under the lens (time, randomness or threads in its path?)",
            pct(spread.value)
        ));
    }
    let outcome = match (reference.outcome, paired.verdict) {
        (Outcome::Unavailable, _) => Outcome::Unavailable,
        (_, Verdict::Regressed) => Outcome::Regressed,
        (_, Verdict::Improved) => Outcome::Improved,
        (_, Verdict::NoChange) => Outcome::NoClearChange,
        _ => Outcome::Inconclusive,
    };
    let complete = reference.outcome != Outcome::Incomplete && e.failed == 0;
    comparison.outcome = if complete || outcome == Outcome::Unavailable { outcome } else { Outcome::Incomplete };
    if e.failed > 0 {
        notes.push(format!("{} failed", plural(e.failed, "sample")));
    }
    if e.unpaired > 0 {
        notes.push(format!("{} without the other side's trial", plural(e.unpaired, "sample")));
    }
    (comparison, paired, notes)
}

/// What a non-verdict can say: "no change larger than X", X the larger of the interval's
/// farther end and the minimum detectable effect (the interval supports the claim, the MDE keeps
/// it from claiming a finer resolution than the run had). Fewer than 3 pairs: the floor.
pub fn no_change_bound(p: &Paired) -> Option<f64> {
    if p.verdict == Verdict::TooFewPairs {
        return Some(p.floor);
    }
    let (lo, hi) = p.interval?;
    let bound = lo.abs().max(hi.abs()).max(p.mde.unwrap_or(0.0));
    bound.is_finite().then_some(bound)
}

fn pct(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::metrics::built_in;

    #[test]
    fn floors_come_from_the_spec_capped() {
        let cold = built_in("cold").unwrap();
        // 0.1 s absolute on a 5.5 s median is 1.8 %: the relative 20 % wins.
        assert_eq!(floor(&cold, Some(5.5), None), Floor { value: 0.2, note: None });
        // 0.1 s on a 0.4 s start: 25 %.
        assert_eq!(floor(&cold, Some(0.4), None).value, 0.25);
        // 0.1 s on a 46 ms start is 217 %: capped at 50 %, and said.
        let f = floor(&cold, Some(0.046), None);
        assert_eq!(f.value, FLOOR_CAP);
        assert!(f.note.unwrap().contains("217.39% of the base median; capped at 50.00%"));
        // No base median: the relative floor.
        assert_eq!(floor(&cold, None, None).value, 0.2);
    }

    #[test]
    fn counts_take_their_floor_and_spread_from_their_own_a_a_run() {
        let def = MetricDef {
            key: "work.instructions".into(),
            title: "Work (instructions)".into(),
            unit: "M instructions".into(),
            scale: 1e-6,
            absolute: 0.0,
            relative: crate::spec::metrics::LENS_RELATIVE,
            group: "CLI".into(),
            better: crate::stats::Better::Lower,
        };
        // No calibration: the spec's 0.5 %, the spread assumed 0.05 % and said.
        assert_eq!(count_floor(&def, None).value, 0.005);
        let assumed = count_spread(&def.key, None, None);
        assert_eq!(assumed.value, DETERMINISTIC);
        assert!(assumed.source.contains("assumed"), "{assumed:?}");
        // One A/A pair is a calibration for a count: its spread and floor (never below 0.1 %).
        let mut profile = NoiseProfile {
            spec: "demo".into(),
            run_id: "aa".into(),
            image: "i".into(),
            metrics: Default::default(),
            relative: Default::default(),
            found: None,
            pooled: Vec::new(),
            min_floor: None,
        };
        let noise = super::super::noise::MetricNoise {
            pairs: 1,
            spread: 0.002,
            estimate: 0.0,
            interval: (-0.002, 0.002),
            floor: 0.002,
            runs: 1,
            between: None,
        };
        profile.metrics.insert(def.key.clone(), noise.clone());
        assert_eq!(count_floor(&def, Some(&profile)).value, 0.002);
        assert_eq!(count_spread(&def.key, Some(1e-6), Some(&profile)).value, 0.002);
        profile
            .metrics
            .insert(def.key.clone(), super::super::noise::MetricNoise { floor: 1e-6, spread: 1e-6, ..noise });
        assert_eq!(count_floor(&def, Some(&profile)).value, LENS_FLOOR_MIN);
        // One pair decides a 1 % change; a failed sample makes it incomplete.
        let reference = Comparison {
            outcome: Outcome::NoClearChange,
            ..stats::compare(&[1e9], &[1.01e9], 1, stats::Floors { absolute: 0.0, relative: 0.005 })
        };
        let pairs = [(1e9, 1.01e9)];
        let e = Evidence { pairs: &pairs, unpaired: 0, failed: 0, expected: 1 };
        let (c, p, notes) = decide_counts(&reference, &e, &count_floor(&def, None), &assumed);
        assert_eq!((c.outcome, p.verdict), (Outcome::Regressed, Verdict::Regressed));
        assert!(notes[0].contains("one pair decides"), "{notes:?}");
        let e = Evidence { failed: 1, ..e };
        assert_eq!(decide_counts(&reference, &e, &count_floor(&def, None), &assumed).0.outcome, Outcome::Incomplete);
        // Counts that vary by more than 1 % between runs of the same code are said to.
        let wild = CountSpread { value: 0.03, source: "x".into() };
        let (_, _, notes) = decide_counts(&reference, &e, &count_floor(&def, None), &wild);
        assert!(notes.iter().any(|n| n.contains("not deterministic")), "{notes:?}");
    }

    #[test]
    fn non_verdicts_say_how_large_a_change_is_ruled_out() {
        let pairs: Vec<(f64, f64)> = (0..10).map(|i| (1.0, 1.0 + 0.01 * f64::from(i % 3) - 0.01)).collect();
        let p = stats::paired_at(&pairs, 0.05, 0.05);
        assert_eq!(p.verdict, Verdict::NoChange);
        let bound = no_change_bound(&p).unwrap();
        let (lo, hi) = p.interval.unwrap();
        assert!(bound >= lo.abs().max(hi.abs()) && bound >= p.mde.unwrap() && bound > 0.05, "{p:?}");
    }
}
