//! Statistics, pure: the reference harness's comparison rule, and a paired verdict that uses the
//! ABBA pairing of trials.
//!
//! Reference rule (reference-harness.md §4.1): medians; spread = IQR with inclusive quartiles
//! (R type 7, Python's `statistics.quantiles(method="inclusive")`) for n ≥ 4, range below;
//! a change counts only beyond max(absolute floor, relative floor × base median, both spreads).
//!
//! Paired verdict: trial t of base and of head ran back to back (ABBA order), so each pair gives
//! d = ln(head/base), free of the drift both shared. The shift is estimated by Hodges–Lehmann
//! (the median of the Walsh averages) with a 95% interval: exact Wilcoxon signed-rank for n ≥ 6
//! (Hollander & Wolfe, Nonparametric Statistical Methods, §3.3), a t interval on the logs for
//! n = 3–5. The verdict says regressed/improved only when the whole interval lies beyond the noise
//! floor, "no change" when it lies inside it, and "inconclusive" when it straddles it.

use serde::{Deserialize, Serialize};

/// Median; the mean of the two middle values for an even count. None when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Quantile by linear interpolation on position (n−1)·p (R type 7, numpy's default).
pub fn quantile_type7(sorted: &[f64], p: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// IQR for n ≥ 4, range for n < 4, 0 when empty.
pub fn spread(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n < 4 => v[n - 1] - v[0],
        _ => quantile_type7(&v, 0.75) - quantile_type7(&v, 0.25),
    }
}

/// What happened to a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Regressed,
    Improved,
    NoClearChange,
    Incomplete,
    Unavailable,
}

/// The reference rule's comparison of one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub outcome: Outcome,
    pub base_median: Option<f64>,
    pub head_median: Option<f64>,
    /// head − base, raw units.
    pub delta: Option<f64>,
    /// delta / base; None when the base median is 0 or a side is empty.
    pub relative: Option<f64>,
    /// The noise threshold the change had to exceed, raw units.
    pub threshold: Option<f64>,
    pub base_spread: f64,
    pub head_spread: f64,
}

/// Floors of one metric, in raw units and as a fraction of the base median.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Floors {
    pub absolute: f64,
    pub relative: f64,
}

pub fn compare(base: &[f64], head: &[f64], expected: usize, floors: Floors) -> Comparison {
    let (base_spread, head_spread) = (spread(base), spread(head));
    let (Some(b), Some(h)) = (median(base), median(head)) else {
        return Comparison {
            outcome: Outcome::Unavailable,
            base_median: median(base),
            head_median: median(head),
            delta: None,
            relative: None,
            threshold: None,
            base_spread,
            head_spread,
        };
    };
    let delta = h - b;
    let relative = (b != 0.0).then(|| delta / b);
    let threshold = floors.absolute.max(b * floors.relative).max(base_spread).max(head_spread);
    let outcome = if base.len() != expected || head.len() != expected {
        Outcome::Incomplete
    } else if delta.abs() <= threshold {
        Outcome::NoClearChange
    } else if delta > 0.0 {
        Outcome::Regressed
    } else {
        Outcome::Improved
    };
    Comparison {
        outcome,
        base_median: Some(b),
        head_median: Some(h),
        delta: Some(delta),
        relative,
        threshold: Some(threshold),
        base_spread,
        head_spread,
    }
}

/// The paired verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Regressed,
    Improved,
    NoChange,
    Inconclusive,
    /// Fewer than 3 complete pairs.
    TooFewPairs,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    pub verdict: Verdict,
    pub pairs: usize,
    /// Hodges–Lehmann estimate of head/base − 1.
    pub estimate: Option<f64>,
    /// 95% interval of head/base − 1.
    pub interval: Option<(f64, f64)>,
    /// The noise floor (as head/base − 1) the interval was judged against.
    pub floor: f64,
    pub method: String,
}

/// `pairs` are (base, head) of the same trial index. `floor` is the relative change below which
/// a difference is noise (e.g. the metric's relative floor, or an A/A noise profile's).
pub fn paired(pairs: &[(f64, f64)], floor: f64) -> Paired {
    let d: Vec<f64> = pairs.iter().filter(|(b, h)| *b > 0.0 && *h > 0.0).map(|(b, h)| (h / b).ln()).collect();
    let n = d.len();
    let log_floor = (1.0 + floor.max(0.0)).ln();
    if n < 3 {
        return Paired {
            verdict: Verdict::TooFewPairs,
            pairs: n,
            estimate: None,
            interval: None,
            floor,
            method: "none".into(),
        };
    }
    let mut walsh = Vec::with_capacity(n * (n + 1) / 2);
    for i in 0..n {
        for j in i..n {
            walsh.push((d[i] + d[j]) / 2.0);
        }
    }
    walsh.sort_by(f64::total_cmp);
    let estimate = median(&walsh).unwrap_or(0.0);
    let (lo, hi, method) = if n >= 6 {
        let k = wilcoxon_k(n, 0.05);
        let m = walsh.len();
        (walsh[k - 1], walsh[m - k], format!("exact Wilcoxon signed-rank interval, {n} pairs"))
    } else {
        let mean = d.iter().sum::<f64>() / n as f64;
        let sd = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
        let t = T_975[n - 3];
        let half = t * sd / (n as f64).sqrt();
        (mean - half, mean + half, format!("t interval on log ratios, {n} pairs"))
    };
    let verdict = if lo > log_floor {
        Verdict::Regressed
    } else if hi < -log_floor {
        Verdict::Improved
    } else if lo >= -log_floor && hi <= log_floor {
        Verdict::NoChange
    } else {
        Verdict::Inconclusive
    };
    Paired {
        verdict,
        pairs: n,
        estimate: Some(estimate.exp() - 1.0),
        interval: Some((lo.exp() - 1.0, hi.exp() - 1.0)),
        floor,
        method,
    }
}

/// t(0.975) for 2, 3 and 4 degrees of freedom (3–5 pairs).
const T_975: [f64; 3] = [4.302_652_7, 3.182_446_3, 2.776_445_1];

/// The rank k (1-based) such that [W(k), W(M−k+1)] of the sorted Walsh averages is a two-sided
/// (1 − alpha) interval: the largest k with P(T ≤ k − 1) ≤ alpha / 2 under the null, where T is
/// the signed-rank statistic, whose exact distribution is counted here.
pub fn wilcoxon_k(n: usize, alpha: f64) -> usize {
    let max = n * (n + 1) / 2;
    let mut counts = vec![0f64; max + 1];
    counts[0] = 1.0;
    for rank in 1..=n {
        for s in (rank..=max).rev() {
            counts[s] += counts[s - rank];
        }
    }
    let total = 2f64.powi(n as i32);
    let mut cumulative = 0.0;
    let mut k = 1;
    for (t, c) in counts.iter().enumerate() {
        cumulative += c / total;
        if cumulative > alpha / 2.0 {
            break;
        }
        k = t + 1;
    }
    k.max(1)
}

/// Python's `round` (half to even), which the reference's colours depend on.
pub fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 { 2.0 * (x / 2.0).round() } else { r }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOORS: Floors = Floors { absolute: 0.1, relative: 0.2 };

    #[test]
    fn quartiles_are_inclusive_type_7() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile_type7(&v, 0.25), 3.25);
        assert_eq!(quantile_type7(&v, 0.75), 7.75);
        assert_eq!(spread(&v), 4.5);
        assert_eq!(spread(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(spread(&[]), 0.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn the_reference_rule() {
        // Constant 2.0 vs 2.5 regresses, vs 1.5 improves.
        assert_eq!(compare(&[2.0; 10], &[2.5; 10], 10, FLOORS).outcome, Outcome::Regressed);
        assert_eq!(compare(&[2.0; 10], &[1.5; 10], 10, FLOORS).outcome, Outcome::Improved);
        // 1..10 shifted by 0.2: the IQR dominates.
        let base: Vec<f64> = (1..=10).map(f64::from).collect();
        let head: Vec<f64> = base.iter().map(|v| v + 0.2).collect();
        assert_eq!(compare(&base, &head, 10, FLOORS).outcome, Outcome::NoClearChange);
        // One failed sample: incomplete. An empty side: unavailable.
        assert_eq!(compare(&[2.0; 10], &[2.5; 9], 10, FLOORS).outcome, Outcome::Incomplete);
        assert_eq!(compare(&[], &[2.5; 10], 10, FLOORS).outcome, Outcome::Unavailable);
        // Zero baseline: no relative change, and regressed beyond the absolute floor.
        let zero = compare(&[0.0; 10], &[1.0; 10], 10, FLOORS);
        assert_eq!((zero.outcome, zero.relative), (Outcome::Regressed, None));
    }

    #[test]
    fn half_even_rounding_as_python() {
        assert_eq!(round_half_even(97.5), 98.0);
        assert_eq!(round_half_even(96.5), 96.0);
        assert_eq!(round_half_even(184.75), 185.0);
        assert_eq!(round_half_even(-0.5), 0.0);
    }

    #[test]
    fn wilcoxon_critical_ranks_match_the_tables() {
        // Two-sided 95%: n=6 → k=1 (96.9%), n=8 → k=4, n=10 → k=9, n=20 → k=53.
        assert_eq!(wilcoxon_k(6, 0.05), 1);
        assert_eq!(wilcoxon_k(8, 0.05), 4);
        assert_eq!(wilcoxon_k(10, 0.05), 9);
        assert_eq!(wilcoxon_k(20, 0.05), 53);
    }

    #[test]
    fn paired_verdicts() {
        let slow: Vec<(f64, f64)> = (0..10).map(|i| (1.0 + 0.01 * i as f64, 1.3 + 0.01 * i as f64)).collect();
        let p = paired(&slow, 0.05);
        assert_eq!(p.verdict, Verdict::Regressed);
        assert!((p.estimate.unwrap() - 0.28).abs() < 0.03, "{p:?}");
        let same: Vec<(f64, f64)> = (0..10).map(|i| (1.0, 1.0 + if i % 2 == 0 { 0.004 } else { -0.004 })).collect();
        assert_eq!(paired(&same, 0.05).verdict, Verdict::NoChange);
        let noisy: Vec<(f64, f64)> = (0..6).map(|i| (1.0, if i % 2 == 0 { 1.5 } else { 0.8 })).collect();
        assert_eq!(paired(&noisy, 0.05).verdict, Verdict::Inconclusive);
        let faster = [(1.0, 0.5), (1.1, 0.55), (0.9, 0.46)];
        let p = paired(&faster, 0.05);
        assert_eq!((p.verdict, p.method.starts_with("t interval")), (Verdict::Improved, true));
        assert_eq!(paired(&[(1.0, 2.0)], 0.05).verdict, Verdict::TooFewPairs);
        // Three pairs: t with 2 degrees of freedom on d = 0.1, 0.2, 0.3.
        let three: Vec<(f64, f64)> = [0.1f64, 0.2, 0.3].iter().map(|d| (1.0, d.exp())).collect();
        let (lo, hi) = paired(&three, 0.05).interval.unwrap();
        let half = 4.302_652_7 * 0.1 / 3f64.sqrt();
        assert!(
            (lo - ((0.2 - half).exp() - 1.0)).abs() < 1e-9 && (hi - ((0.2 + half).exp() - 1.0)).abs() < 1e-9,
            "{lo} {hi}"
        );
    }
}
