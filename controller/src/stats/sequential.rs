//! Adaptive pairs without inflated false verdicts: a group-sequential design, pure.
//!
//! A run starts with `initial` pairs and may add pairs up to `max_pairs` while a gating metric is
//! inconclusive. Looking at the data after each group and stopping when it looks decided would
//! inflate false verdicts (every look is another chance for an interval to miss). The design:
//!
//! - **Looks** at planned pair counts: `initial`, then `max_pairs` (two looks), or `initial`, the
//!   midpoint and `max_pairs` (three looks) when `max_pairs ≥ 3 × initial`. The plan is fixed
//!   before any data, and few looks keep the correction cheap.
//! - **Alpha spending** (Lan & DeMets, Biometrika 1983) with the O'Brien–Fleming-type function
//!   α(t) = 2 − 2Φ(z₁₋α/₂ / √t), t = planned pairs / `max_pairs`: early looks spend almost
//!   nothing, so the last look keeps nearly the whole α.
//! - **Bonferroni over the looks**: look k builds its interval at the level it spends,
//!   αₖ = α(tₖ) − α(tₖ₋₁). The chance that any look's interval misses the true shift is then at
//!   most Σ αₖ = α, whatever the dependence between looks and the distribution of the pairs
//!   (the intervals are exact Wilcoxon). This is conservative next to exact group-sequential
//!   boundaries, which need normality; the simulation tests below measure it.
//!
//! Since every verdict (regressed, improved, no change) is read from an interval, simultaneous
//! coverage means no look gives a wrong verdict with probability ≥ 1 − α. A look past the plan
//! spends nothing: its intervals are unbounded and decide nothing.

use serde::{Deserialize, Serialize};

use super::dist::normal_cdf;
use super::{Verdict, dist::normal_quantile, paired_at};

/// The plan of looks of an adaptive run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Design {
    /// The total two-sided error rate, spent over the looks.
    pub alpha: f64,
    /// Pairs at the first look (the spec's trials).
    pub initial: u32,
    /// Pairs at the last look.
    pub max_pairs: u32,
}

impl Design {
    /// Pair counts at which the looks happen, in order.
    pub fn looks(&self) -> Vec<u32> {
        let (first, last) = (self.initial.max(1), self.max_pairs);
        if last <= first {
            vec![first]
        } else if last >= 3 * first {
            vec![first, first + (last - first).div_ceil(2), last]
        } else {
            vec![first, last]
        }
    }

    /// The nominal two-sided level of look `look` (1-based): the alpha it spends.
    pub fn alpha_at(&self, look: usize) -> f64 {
        let looks = self.looks();
        if look == 0 || look > looks.len() {
            return 0.0;
        }
        if looks.len() == 1 {
            return self.alpha;
        }
        let spent = |k: usize| -> f64 {
            if k == 0 { 0.0 } else { obrien_fleming(self.alpha, f64::from(looks[k - 1]) / f64::from(self.max_pairs)) }
        };
        (spent(look) - spent(look - 1)).max(0.0)
    }
}

/// The O'Brien–Fleming-type spending function: the alpha spent by information fraction t.
pub fn obrien_fleming(alpha: f64, t: f64) -> f64 {
    if t <= 0.0 {
        return 0.0;
    }
    let z = normal_quantile(1.0 - alpha / 2.0);
    (2.0 - 2.0 * normal_cdf(z / t.min(1.0).sqrt())).min(alpha)
}

/// One gating metric at a look: its pairs so far and its floor (relative, as displayed).
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub key: String,
    pub pairs: Vec<(f64, f64)>,
    pub floor: f64,
}

/// What a look concludes.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Every gating metric is decided (regressed, improved or no change): stop.
    Decided,
    /// Run pairs up to `pairs` (the next planned look) for the metrics still undecided.
    MorePairs { pairs: u32, undecided: Vec<String> },
    /// The last planned look is done and some metrics are still undecided.
    Exhausted { undecided: Vec<String> },
}

/// The decision at look `look` (1-based) given each gating metric's pairs so far.
pub fn next(design: &Design, look: usize, gates: &[Gate]) -> Next {
    let alpha = design.alpha_at(look);
    let undecided: Vec<String> = gates
        .iter()
        .filter(|g| {
            !matches!(
                paired_at(&g.pairs, g.floor, alpha).verdict,
                Verdict::Regressed | Verdict::Improved | Verdict::NoChange
            )
        })
        .map(|g| g.key.clone())
        .collect();
    if undecided.is_empty() {
        return Next::Decided;
    }
    match design.looks().get(look) {
        Some(&pairs) => Next::MorePairs { pairs, undecided },
        None => Next::Exhausted { undecided },
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn design(initial: u32, max_pairs: u32) -> Design {
        Design { alpha: 0.05, initial, max_pairs }
    }

    #[test]
    fn looks_and_their_levels() {
        assert_eq!(design(10, 10).looks(), vec![10]);
        assert_eq!(design(10, 20).looks(), vec![10, 20]);
        assert_eq!(design(10, 30).looks(), vec![10, 20, 30]);
        assert_eq!(design(3, 20).looks(), vec![3, 12, 20]);
        // One look keeps the whole alpha.
        assert_eq!(design(10, 10).alpha_at(1), 0.05);
        // Two looks at t = 1/2 and 1: α(1/2) = 2 − 2Φ(1.96 √2) ≈ 0.0056, the rest at the end.
        let d = design(10, 20);
        assert!((d.alpha_at(1) - 0.005_575).abs() < 2e-5, "{}", d.alpha_at(1));
        assert!((d.alpha_at(1) + d.alpha_at(2) - 0.05).abs() < 1e-9);
        let d = design(10, 30);
        let total: f64 = (1..=3).map(|k| d.alpha_at(k)).sum();
        assert!((total - 0.05).abs() < 1e-9 && d.alpha_at(1) < d.alpha_at(2) && d.alpha_at(2) < d.alpha_at(3));
        // Past the plan nothing is spent.
        assert_eq!(d.alpha_at(4), 0.0);
        assert_eq!(d.alpha_at(0), 0.0);
    }

    #[test]
    fn a_look_says_decided_more_or_exhausted() {
        let d = design(10, 20);
        let clear: Vec<(f64, f64)> = (0..10).map(|i| (1.0, 1.5 + 0.001 * f64::from(i))).collect();
        let flat: Vec<(f64, f64)> = (0..10).map(|i| (1.0, 1.0 + if i % 2 == 0 { 0.001 } else { -0.001 })).collect();
        let noisy: Vec<(f64, f64)> = (0..10).map(|i| (1.0, if i % 2 == 0 { 1.4 } else { 0.8 })).collect();
        let gate = |key: &str, pairs: &[(f64, f64)]| Gate { key: key.into(), pairs: pairs.to_vec(), floor: 0.05 };
        assert_eq!(next(&d, 1, &[gate("a", &clear), gate("b", &flat)]), Next::Decided);
        assert_eq!(
            next(&d, 1, &[gate("a", &clear), gate("c", &noisy)]),
            Next::MorePairs { pairs: 20, undecided: vec!["c".into()] }
        );
        assert_eq!(next(&d, 2, &[gate("c", &noisy)]), Next::Exhausted { undecided: vec!["c".into()] });
        // Too few pairs are never decided.
        assert_eq!(next(&d, 1, &[gate("d", &clear[..2])]), Next::MorePairs { pairs: 20, undecided: vec!["d".into()] });
    }

    /// Standard normal by Box–Muller (rand's distributions crate is not a dependency).
    fn normal(rng: &mut StdRng) -> f64 {
        let (u, v): (f64, f64) = (rng.random::<f64>().max(1e-300), rng.random());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// The share of A/A runs (no true change) that ever get a regressed or improved verdict when
    /// looking at each planned look, stopping at the first decision; `level` gives each look's
    /// alpha. The floor is 0, the strictest case: any interval off zero is a false verdict.
    fn false_rate(d: &Design, level: impl Fn(usize) -> f64, runs: usize, laplace: bool, seed: u64) -> f64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let levels: Vec<f64> = (1..=d.looks().len()).map(level).collect();
        let looks = d.looks();
        let mut false_verdicts = 0;
        for _ in 0..runs {
            let log_ratios: Vec<f64> = (0..d.max_pairs)
                .map(|_| {
                    if laplace {
                        let u: f64 = rng.random::<f64>() - 0.5;
                        -0.05 * u.signum() * (1.0 - 2.0 * u.abs()).max(1e-300).ln()
                    } else {
                        0.05 * normal(&mut rng)
                    }
                })
                .collect();
            for (k, &n) in looks.iter().enumerate() {
                let pairs: Vec<(f64, f64)> = log_ratios[..n as usize].iter().map(|x| (1.0, x.exp())).collect();
                let verdict = paired_at(&pairs, 0.0, levels[k]).verdict;
                if matches!(verdict, Verdict::Regressed | Verdict::Improved) {
                    false_verdicts += 1;
                    break;
                }
                if verdict == Verdict::NoChange {
                    break;
                }
            }
        }
        false_verdicts as f64 / runs as f64
    }

    #[test]
    fn repeated_looks_keep_the_a_a_false_verdict_rate_at_most_alpha() {
        let runs = 2000;
        // Three standard errors of a 5% rate over `runs` runs.
        let slack = 3.0 * (0.05 * 0.95 / runs as f64).sqrt();
        for (d, laplace, seed) in [
            (design(10, 30), false, 1),
            (design(10, 30), true, 2),
            (design(10, 20), false, 3),
            (design(6, 24), true, 4),
        ] {
            let rate = false_rate(&d, |k| d.alpha_at(k), runs, laplace, seed);
            eprintln!("{:?} laplace={laplace}: A/A false verdicts {rate}", d.looks());
            assert!(rate <= 0.05 + slack, "{d:?} laplace={laplace}: false verdicts {rate}");
        }
        // Without the correction the same looks do inflate it: the test can fail.
        let d = design(10, 30);
        let naive = false_rate(&d, |_| 0.05, runs, false, 5);
        eprintln!("{:?} uncorrected: A/A false verdicts {naive}", d.looks());
        assert!(naive > 0.05 + slack, "uncorrected looks gave only {naive}");
    }
}
