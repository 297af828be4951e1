//! Deterministic metrics (the instruction lens's counts): no sampling distribution to estimate.
//! Two runs of the same code agree to a few parts per million, so one pair shows a change. The
//! estimate is the median of the pairs' relative changes; the interval spans every pair's change,
//! widened on both sides by the counts' spread (`spread`, as a relative change: what two runs of
//! the same code may differ by); the minimum detectable effect is the floor plus twice the
//! spread. The verdict is the paired rule's: the interval against ±floor.

use super::{Paired, Verdict, log_ratios, to_bp, verdict_of};

/// The paired analysis of counts: see the module's notes. No pair: too few pairs.
pub fn paired_counts(pairs: &[(f64, f64)], floor: f64, spread: f64) -> Paired {
    let (d, dropped) = log_ratios(pairs);
    let floor = (floor.max(0.0) * 10_000.0).round() / 10_000.0;
    let mut out = Paired {
        verdict: Verdict::TooFewPairs,
        pairs: d.len(),
        estimate: None,
        interval: None,
        floor,
        method: "counts: every pair's change, widened by the counts' spread".into(),
        confidence: None,
        mde: None,
        spread: Some(spread),
        dropped,
    };
    if d.is_empty() {
        return out;
    }
    let mut changes: Vec<f64> = d.iter().map(|x| x.exp() - 1.0).collect();
    changes.sort_by(f64::total_cmp);
    let median = if changes.len() % 2 == 1 {
        changes[changes.len() / 2]
    } else {
        (changes[changes.len() / 2 - 1] + changes[changes.len() / 2]) / 2.0
    };
    let (lo, hi) = (to_bp(changes[0] - spread, false), to_bp(changes[changes.len() - 1] + spread, true));
    out.estimate = Some((median * 10_000.0).round() / 10_000.0);
    out.interval = Some((lo, hi));
    out.mde = Some(to_bp(floor + 2.0 * spread, true));
    out.verdict = verdict_of(lo, hi, floor);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pair_decides_counts() {
        let p = paired_counts(&[(1e9, 1.01e9)], 0.005, 0.0005);
        assert_eq!(p.verdict, Verdict::Regressed);
        assert_eq!(p.estimate, Some(0.01));
        assert_eq!(p.interval, Some((0.0095, 0.0105)));
        assert_eq!(p.mde, Some(0.006));
        let same = paired_counts(&[(1e9, 1e9 + 3.0), (1e9, 1e9 - 2.0)], 0.005, 0.0005);
        assert_eq!(same.verdict, Verdict::NoChange);
        let faster = paired_counts(&[(1e9, 0.98e9)], 0.005, 0.0005);
        assert_eq!(faster.verdict, Verdict::Improved);
        // Pairs that disagree (a step whose count is not deterministic) are not decided.
        let wild = paired_counts(&[(1e9, 1.01e9), (1e9, 0.99e9)], 0.005, 0.0005);
        assert_eq!(wild.verdict, Verdict::Inconclusive);
        assert_eq!(paired_counts(&[], 0.005, 0.0).verdict, Verdict::TooFewPairs);
        // A wide spread widens the interval past the floor.
        assert_eq!(paired_counts(&[(1e9, 1.006e9)], 0.005, 0.002).verdict, Verdict::Inconclusive);
    }
}
