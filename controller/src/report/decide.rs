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
    /// The noise profile's pooled pair sd (log ratios) when the floor is the profile's (a
    /// statistical bound, which [`for_family`] may raise); None for a spec's floor.
    pub profile_sd: Option<f64>,
}

/// The floor of `def` at this base median, from the profile when it calibrated the metric.
pub fn floor(def: &MetricDef, base_median: Option<f64>, noise: Option<&NoiseProfile>) -> Floor {
    let mut profile_note = None;
    if let Some(profile) = noise {
        match profile.floor(&def.key) {
            Ok(f) => {
                let profile_sd = profile.metrics.get(&def.key).map(|m| m.spread);
                let min = profile.min_floor.unwrap_or(PROFILE_FLOOR_MIN).min(FLOOR_CAP);
                let value = f.clamp(min, FLOOR_CAP);
                // Raised to the practical minimum: the method line says so once for every metric.
                let note =
                    (value < f).then(|| format!("the noise profile's floor {} was clamped to {}", pct(f), pct(value)));
                return Floor { value, note, profile_sd };
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
    Floor { value, note, profile_sd: None }
}

/// The floor of one of `family` metrics judged against the noise profile in one report, at
/// level `alpha`: at least the family margin ([`stats::family_margin`]) times the standard error
/// of the pairs' mean log ratio, their sd taken as the larger of theirs and the profile's (a run
/// whose few pairs happen to agree would otherwise lower its own margin; a noisier day raises
/// it). Why: as pooled A/A runs accumulate, profile floors fall to the practical minimum, and
/// each metric alone is then called changed by an A/A run at close to the interval's own
/// `alpha`; a report judging tens of metrics would call one of them in many A/A runs. With the
/// margin, an A/A report calls any of its profile-judged metrics changed at most about `alpha`
/// × [`stats::FAMILY_SHARE`] of the time (Bonferroni: fewer, the metrics being correlated), at
/// the price of the margin on each one's minimum detectable effect. A spec's floor (the
/// author's threshold, not a bound from noise) is left as it is.
pub fn for_family(floor: Floor, pairs: &[(f64, f64)], family: usize, alpha: f64) -> Floor {
    let (Some(profile_sd), Some((sd, n))) = (floor.profile_sd, stats::log_ratio_sd(pairs)) else { return floor };
    let margin = stats::family_margin(family, alpha);
    if margin <= 0.0 {
        return floor;
    }
    let guard = ((margin * sd.max(profile_sd) / (n as f64).sqrt()).exp() - 1.0).min(FLOOR_CAP);
    if guard <= floor.value {
        return floor;
    }
    let (which, what) = match family {
        1 => ("the only metric".to_string(), "calls it"),
        _ => (format!("one of {family} metrics"), "calls any of them"),
    };
    let note = format!(
        "floor raised from {} to {}: {which} judged against the noise profile, so that a report of identical sides {what} changed at most about {:.1}% of the time",
        pct(floor.value),
        pct(guard),
        alpha * stats::FAMILY_SHARE * 100.0
    );
    Floor { value: guard, note: Some(note), profile_sd: floor.profile_sd }
}

/// The floor of a metric whose values move in steps ([`stats::step`]): at least one step over
/// the base median. Why: when a value is a handful of steps (CPU time of 0.1 s read in 10 ms
/// clock ticks), two identical sides whose true values differ by a fraction of a step read as
/// whole steps apart in many pairs, and the estimate on those readings shows a change of about
/// a step that no amount of pairs narrows; no change smaller than the measure's own step is
/// called. Metrics measured finer than their noise are untouched.
pub fn for_resolution(floor: Floor, pairs: &[(f64, f64)]) -> Floor {
    let (base, head): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
    let (Some(step), Some(median)) = (stats::step(&base, &head), stats::median(&base).filter(|m| *m > 0.0)) else {
        return floor;
    };
    let one = (step / median).min(FLOOR_CAP);
    if one <= floor.value {
        return floor;
    }
    let raised = format!(
        "floor raised from {} to {}: the values move in steps of {} of the base median, and no smaller change can be told from where the steps fall",
        pct(floor.value),
        pct(one),
        pct(one)
    );
    let note = Some(match floor.note {
        Some(before) => format!("{before}; {raised}"),
        None => raised,
    });
    Floor { value: one, note, profile_sd: floor.profile_sd }
}

/// The floor [`for_family`] is expected to give a metric at `n` pairs whose sd is the profile's:
/// what a run plans for before it has pairs.
pub fn planned(floor: &Floor, family: usize, alpha: f64, n: usize) -> f64 {
    let guard = floor
        .profile_sd
        .filter(|_| n >= 3)
        .map_or(0.0, |sd| ((stats::family_margin(family, alpha) * sd / (n as f64).sqrt()).exp() - 1.0).min(FLOOR_CAP));
    floor.value.max(guard)
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
        Some(m) => Floor { value: m.floor.clamp(LENS_FLOOR_MIN, FLOOR_CAP), note: None, profile_sd: None },
        None => Floor { value: def.relative.min(FLOOR_CAP), note: None, profile_sd: None },
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
        assert_eq!(floor(&cold, Some(5.5), None), Floor { value: 0.2, note: None, profile_sd: None });
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
    fn a_profile_floor_is_raised_for_its_family_and_a_spec_floor_is_not() {
        // Twenty pairs whose log ratios alternate ±ln 1.05: sd 5.01 %.
        let pairs: Vec<(f64, f64)> = (0..20).map(|i| (1.0, if i % 2 == 0 { 1.05f64 } else { 1.0 / 1.05 })).collect();
        let (sd, n) = stats::log_ratio_sd(&pairs).unwrap();
        assert_eq!(n, 20);
        let profile = Floor { value: 0.005, note: Some("clamped".into()), profile_sd: Some(0.03) };
        // Eleven metrics: 1.3574 standard errors of 5.01 %/√20, 1.53 %.
        let raised = for_family(profile.clone(), &pairs, 11, 0.05);
        let expected = (stats::family_margin(11, 0.05) * sd / 20f64.sqrt()).exp() - 1.0;
        assert!((raised.value - expected).abs() < 1e-12 && raised.value > 0.015, "{raised:?}");
        let note = raised.note.unwrap();
        assert!(note.contains("floor raised from 0.50% to 1.53%: one of 11 metrics"), "{note}");
        assert!(note.ends_with("at most about 1.0% of the time"), "{note}");
        // The profile's sd where it is the larger: 8 %/√20 × 1.3574, 2.46 %.
        let noisier = Floor { profile_sd: Some(0.08), ..profile.clone() };
        let raised = for_family(noisier.clone(), &pairs, 11, 0.05);
        assert!((raised.value - ((stats::family_margin(11, 0.05) * 0.08 / 20f64.sqrt()).exp() - 1.0)).abs() < 1e-12);
        // What a run plans for: the same at the profile's sd, the floor itself under 3 pairs.
        assert_eq!(planned(&noisier, 11, 0.05, 20), raised.value);
        assert_eq!((planned(&noisier, 11, 0.05, 2), planned(&noisier, 0, 0.05, 20)), (0.005, 0.005));
        // Alone, a metric is a family of one: 0.6158 standard errors, 0.69 %.
        let alone = for_family(profile.clone(), &pairs, 1, 0.05);
        assert!((alone.value - ((stats::family_margin(1, 0.05) * sd / 20f64.sqrt()).exp() - 1.0)).abs() < 1e-12);
        let note = alone.note.unwrap();
        assert!(note.contains("to 0.69%: the only metric judged") && note.contains("calls it changed"), "{note}");
        // With no family, or above the margin already, or a spec's floor, or too few pairs:
        // unchanged.
        assert_eq!(for_family(profile.clone(), &pairs, 0, 0.05), profile);
        let wide = Floor { value: 0.03, ..profile.clone() };
        assert_eq!(for_family(wide.clone(), &pairs, 11, 0.05), wide);
        let spec = Floor { profile_sd: None, ..profile.clone() };
        assert_eq!(for_family(spec.clone(), &pairs, 11, 0.05), spec);
        assert_eq!(for_family(profile.clone(), &pairs[..2], 11, 0.05), profile);
    }

    /// The property for a report as a whole: eleven metrics of no bias, pair sd 4 %, 20
    /// pairs, each judged against a profile floor — pooled from 24 simulated A/A runs, or at the
    /// practical minimum where a long pool ends. Without the family margin a fresh A/A report
    /// calls one of them changed more often than 5 % (about 12 % at the minimum); with it, about
    /// 1 % (the family's share of the intervals' 5 %); and a 5 % change of one metric is still
    /// caught at least nine times in ten. "About": Bonferroni's normal quantiles reach 3.3
    /// standard errors, where the tails of 20 pairs' estimate, their interval as wide as their
    /// own spread, are a little heavier than the normal's: 1.2 % and 1.3 % of 4,000 reports
    /// here, 1.0 % and 1.0 % at 40 pairs (measured once, not asserted).
    #[test]
    fn a_family_margin_keeps_a_a_reports_at_one_percent_and_still_sees_five_percent() {
        use crate::stats::pool::{self, sim};
        use rand::SeedableRng;
        let (m, pairs, sd, min, reports) = (11, 20, 0.04, PROFILE_FLOOR_MIN, 4000);
        let mut rng = rand::rngs::StdRng::seed_from_u64(43);
        let pooled: Vec<Floor> = (0..m)
            .map(|_| {
                let runs: Vec<pool::RunShift> = (0..24).map(|_| sim::a_a_run(&mut rng, pairs, sd, 0.0)).collect();
                let p = pool::pool(&runs).unwrap();
                Floor { value: p.bound.max(min), note: None, profile_sd: Some(p.sd) }
            })
            .collect();
        let at_min = vec![Floor { value: min, note: None, profile_sd: Some(sd) }; m];
        let called = |pairs: &[(f64, f64)], floor: f64| {
            matches!(stats::paired_at(pairs, floor, 0.05).verdict, Verdict::Regressed | Verdict::Improved)
        };
        for (name, floors) in [("pooled from 24 runs", &pooled), ("at the minimum", &at_min)] {
            let (mut plain, mut family, mut caught) = (0, 0, 0);
            for _ in 0..reports {
                let fresh: Vec<Vec<(f64, f64)>> = (0..m).map(|_| sim::a_a_pairs(&mut rng, pairs, sd, 0.0)).collect();
                let any = |raise: bool| {
                    fresh.iter().zip(floors).any(|(p, f)| {
                        let floor = if raise { for_family(f.clone(), p, m, 0.05).value } else { f.value };
                        called(p, floor)
                    })
                };
                plain += usize::from(any(false));
                family += usize::from(any(true));
                let slower = sim::a_a_pairs(&mut rng, pairs, sd, 1.05f64.ln());
                let floor = for_family(floors[0].clone(), &slower, m, 0.05).value;
                caught += usize::from(stats::paired_at(&slower, floor, 0.05).verdict == Verdict::Regressed);
            }
            let rate = |n: usize| n as f64 / reports as f64;
            let (plain, family, caught) = (rate(plain), rate(family), rate(caught));
            eprintln!(
                "floors {name} (mean {:.2}%): A/A reports calling a metric {plain:.3} plain, {family:.3} with the family margin; 5 % caught {caught:.3}",
                floors.iter().map(|f| f.value).sum::<f64>() / m as f64 * 100.0
            );
            assert!(family <= 0.02, "{name}: with the margin, about 1 %: {family}");
            assert!(plain > 0.05 && plain > family + 0.01, "{name}: without it, more: {plain}");
            assert!(caught >= 0.9, "{name}: 5 % at 20 pairs, sd 4 %: {caught}");
        }
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

    /// `cold.cpu` of an A/A run of the validity benchmark (2026-12-05, run 790708), in clock
    /// ticks of 10 ms, base/head: two identical sandboxes a tick apart in many pairs.
    const TICKS: &str = "9/8 9/8 12/12 10/9 9/11 12/10 11/10 11/11 10/10 9/9 9/9 9/10 9/8 10/9 10/10 10/9 11/9 \
        11/11 11/11 9/9 10/8 11/9 11/8 9/9 9/9 13/11 14/10 9/10 8/9 10/8 11/9 17/12 10/9 12/10 10/9 10/9 12/11 \
        11/13 10/8 12/10";

    #[test]
    fn a_metric_read_in_steps_is_not_called_changed_by_less_than_one_step() {
        let pairs: Vec<(f64, f64)> = TICKS
            .split_whitespace()
            .map(|p| {
                let (b, h) = p.split_once('/').unwrap();
                (b.parse::<f64>().unwrap() * 0.01, h.parse::<f64>().unwrap() * 0.01)
            })
            .collect();
        assert_eq!(pairs.len(), 40);
        let reference = Comparison {
            outcome: Outcome::NoClearChange,
            ..stats::compare(&[0.1], &[0.09], 1, stats::Floors { absolute: 0.0, relative: 0.005 })
        };
        let e = Evidence { pairs: &pairs, unpaired: 0, failed: 0, expected: 40 };
        // The pooled profile's floor that run judged it against: a false call of an 8.7 % gain.
        let profile = Floor { value: 0.0256, note: None, profile_sd: Some(0.10) };
        let (called, paired, _) = decide(&reference, &e, &profile, 0.05);
        assert_eq!(called.outcome, Outcome::Improved, "{paired:?}");
        // One step (10 ms) of a 100 ms median: 10 %, which the interval does not clear.
        let floor = for_resolution(profile.clone(), &pairs);
        assert!((floor.value - 0.10).abs() < 1e-9, "{floor:?}");
        assert!(floor.note.as_deref().unwrap().contains("steps of 10.00% of the base median"), "{floor:?}");
        assert_eq!(floor.profile_sd, Some(0.10));
        let (judged, _, notes) = decide(&reference, &e, &floor, 0.05);
        assert_ne!(judged.outcome, Outcome::Improved);
        assert!(notes[0].starts_with("floor raised from 2.56% to 10.00%"), "{notes:?}");
        // Times read finer than their noise are left as they are, and so is a floor above a step.
        let fine: Vec<(f64, f64)> = pairs.iter().map(|&(b, h)| (b + 1.3e-5 * b.sqrt(), h * 1.000_37)).collect();
        assert_eq!(for_resolution(profile.clone(), &fine), profile);
        let wide = Floor { value: 0.2, ..profile };
        assert_eq!(for_resolution(wide.clone(), &pairs), wide);
    }
}
