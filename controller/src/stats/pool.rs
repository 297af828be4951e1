//! Floors from pooled A/A runs, pure.
//!
//! An A/A run (the same commit on both sides) estimates a metric's systematic difference between
//! two identical sides: its estimate y = ln(head/base) and, from its 95 % interval, a standard
//! error s. One run cannot tell such a difference from its own noise, so a single calibration's
//! bound is the farther end of its interval. Several runs can: their estimates are pooled with
//! a random-effects model (DerSimonian & Laird, Controlled Clinical Trials 1986), in which each
//! run's true difference is the mean μ plus a between-run part of spread τ (a day, a placement,
//! a state of the machine), and each estimate adds its own noise s:
//!
//! - weights w = 1/s², Q = Σ w (y − ȳ)², τ² = max(0, (Q − (k − 1)) / (Σw − Σw²/Σw));
//! - μ̂ = Σ w* y / Σ w* with w* = 1/(s² + τ²), its standard error SE = 1/√Σw*;
//! - the systematic difference the next run may carry lies in μ̂ ± z₀.₉₇₅ √(τ² + SE²) (the
//!   prediction interval of Higgins, Thompson & Spiegelhalter, JRSS A 2009, with the normal
//!   quantile), and its farther end from zero is the bound.
//!
//! Why a prediction bound, with τ counted: a later run's verdict interval covers its own noise,
//! not the between-run part. With a floor F ≥ z·τ (and μ = 0) the next A/A run's interval, z·s on
//! each side of an estimate spread by √(τ² + s²), lies wholly beyond ±F with probability at most
//! 5 %, because √(τ² + s²) ≤ τ + s: the floor and the interval together keep an A/A run's false
//! verdicts at the interval's 5 %, however the noise splits between runs and pairs. Without τ
//! (a fixed-effect bound |μ̂| + z·SE) the floor would shrink below the day-to-day difference and
//! A/A runs would be called changed; the simulation test below shows both. As runs are added, SE
//! shrinks as 1/√k and, when there is no between-run part, so does τ̂: the floor goes down to the
//! practical minimum the spec sets.
//!
//! Also here: whether a run's spread of log ratios is far from the pooled one ([`sd_far`]).

use super::Z_975;

/// One A/A run's figures for a metric, as its noise profile keeps them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunShift {
    /// ln(head/base): the run's estimate of the systematic difference.
    pub estimate: f64,
    /// Its standard error on the log scale, from the run's 95 % interval.
    pub se: f64,
    /// The run's 95 % interval as head/base − 1: what the run alone bounds.
    pub interval: (f64, f64),
    pub pairs: usize,
    /// The standard deviation of its pairs' log ratios.
    pub sd: f64,
}

/// The least standard error a run is given: an interval of identical pairs has none, and a
/// weight of 1/0 would make one run the whole pool.
const MIN_SE: f64 = 1e-6;

impl RunShift {
    /// A run's shift from its estimate and 95 % interval (head/base − 1), its pairs and the sd
    /// of their log ratios; None when the figures cannot be one run's (not finite, an interval
    /// that does not hold its estimate, fewer than 3 pairs).
    pub fn new(estimate: f64, interval: (f64, f64), pairs: usize, sd: f64) -> Option<RunShift> {
        let (lo, hi) = interval;
        let finite = [estimate, lo, hi, sd].iter().all(|x| x.is_finite());
        if !finite || pairs < 3 || lo <= -1.0 || lo > hi || sd < 0.0 {
            return None;
        }
        let se = ((1.0 + hi).ln() - (1.0 + lo).ln()) / (2.0 * Z_975);
        Some(RunShift { estimate: (1.0 + estimate).ln(), se: se.max(MIN_SE), interval, pairs, sd })
    }
}

/// Runs pooled for one metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pooled {
    pub runs: usize,
    pub pairs: usize,
    /// The pooled systematic difference, head/base − 1.
    pub estimate: f64,
    /// The 95 % interval of the systematic difference the next run may carry, head/base − 1
    /// (one run: that run's interval).
    pub interval: (f64, f64),
    /// Its farther end from zero: the floor, before the practical minimum and the cap.
    pub bound: f64,
    /// τ̂, the between-run spread of the true differences (log scale); None for one run.
    pub between: Option<f64>,
    /// The runs' pooled within-run sd of log ratios, √(Σ(n − 1)sd² / Σ(n − 1)).
    pub sd: f64,
}

impl Pooled {
    /// Degrees of freedom of the pooled sd.
    pub fn sd_df(&self) -> usize {
        self.pairs.saturating_sub(self.runs)
    }
}

/// The runs pooled (see the module); None without a run.
pub fn pool(runs: &[RunShift]) -> Option<Pooled> {
    let first = runs.first()?;
    let pairs: usize = runs.iter().map(|r| r.pairs).sum();
    let df: f64 = runs.iter().map(|r| (r.pairs - 1) as f64).sum();
    let sd = (runs.iter().map(|r| (r.pairs - 1) as f64 * r.sd * r.sd).sum::<f64>() / df).sqrt();
    if runs.len() == 1 {
        let (lo, hi) = first.interval;
        return Some(Pooled {
            runs: 1,
            pairs,
            estimate: first.estimate.exp() - 1.0,
            interval: first.interval,
            bound: lo.abs().max(hi.abs()),
            between: None,
            sd,
        });
    }
    let k = runs.len() as f64;
    let w: Vec<f64> = runs.iter().map(|r| 1.0 / (r.se * r.se)).collect();
    let sum_w: f64 = w.iter().sum();
    let fixed = runs.iter().zip(&w).map(|(r, w)| w * r.estimate).sum::<f64>() / sum_w;
    let q: f64 = runs.iter().zip(&w).map(|(r, w)| w * (r.estimate - fixed).powi(2)).sum();
    let c = sum_w - w.iter().map(|w| w * w).sum::<f64>() / sum_w;
    let tau2 = if c > 0.0 { ((q - (k - 1.0)) / c).max(0.0) } else { 0.0 };
    let w_star: Vec<f64> = runs.iter().map(|r| 1.0 / (r.se * r.se + tau2)).collect();
    let sum_star: f64 = w_star.iter().sum();
    let mean = runs.iter().zip(&w_star).map(|(r, w)| w * r.estimate).sum::<f64>() / sum_star;
    let half = Z_975 * (tau2 + 1.0 / sum_star).sqrt();
    let interval = ((mean - half).exp() - 1.0, (mean + half).exp() - 1.0);
    Some(Pooled {
        runs: runs.len(),
        pairs,
        estimate: mean.exp() - 1.0,
        interval,
        bound: interval.0.abs().max(interval.1.abs()),
        between: Some(tau2.sqrt()),
        sd,
    })
}

/// How much a run's spread must differ from the pooled one, either way, to be called far: the
/// pairs a run needs to resolve a change grow as the spread squared, so at 1.5× the profile's
/// spread it needs 2.25× the pairs the profile plans for.
pub const FAR_FACTOR: f64 = 1.5;
/// z₀.₉₉₅: a spread is far only beyond what sampling alone gives 99 % of the time (a report
/// judges tens of metrics: at 95 % a few would be flagged in every run by chance).
const Z_995: f64 = 2.575_829_303_548_901;

/// Whether `today` (the sd of a run's `pairs` log ratios) is far from `profile` (a pooled sd
/// with `profile_df` degrees of freedom): beyond [`FAR_FACTOR`] either way, and beyond the
/// 99 % range of sampling alone, ln(today/profile) having a variance of about
/// 1/(2(n − 1)) + 1/(2 df) for normal pairs. Never with fewer than 3 pairs.
pub fn sd_far(today: f64, pairs: usize, profile: f64, profile_df: usize) -> bool {
    if pairs < 3 || profile_df == 0 || !(today > 0.0 && profile > 0.0) {
        return false;
    }
    let ratio = (today / profile).ln().abs();
    let sampling = Z_995 * (0.5 / (pairs - 1) as f64 + 0.5 / profile_df as f64).sqrt();
    ratio > FAR_FACTOR.ln() && ratio > sampling
}

/// Simulated A/A runs, for the tests here and of the floors that use them.
#[cfg(test)]
pub(crate) mod sim {
    use rand::Rng;
    use rand::rngs::StdRng;

    use super::RunShift;
    use crate::stats::paired_at;

    /// Standard normal by Box–Muller.
    pub(crate) fn normal(rng: &mut StdRng) -> f64 {
        let (u, v): (f64, f64) = (rng.random::<f64>().max(1e-300), rng.random());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// The pairs of one simulated run: log ratios of its systematic difference `bias` plus
    /// noise of sd `sd`.
    pub(crate) fn a_a_pairs(rng: &mut StdRng, pairs: usize, sd: f64, bias: f64) -> Vec<(f64, f64)> {
        (0..pairs).map(|_| (1.0, (bias + sd * normal(rng)).exp())).collect()
    }

    /// One simulated A/A run's shift, as its noise profile keeps it.
    pub(crate) fn a_a_run(rng: &mut StdRng, pairs: usize, sd: f64, bias: f64) -> RunShift {
        let p = paired_at(&a_a_pairs(rng, pairs, sd, bias), 0.0, 0.05);
        RunShift::new(p.estimate.unwrap(), p.interval.unwrap(), p.pairs, p.spread.unwrap()).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::stats::{Verdict, dist, paired_at};

    #[test]
    fn one_run_bounds_with_its_interval_and_more_runs_pool() {
        let one = RunShift::new(0.0206, (-0.0159, 0.0492), 20, 0.067).unwrap();
        let p = pool(&[one]).unwrap();
        assert_eq!((p.runs, p.pairs, p.bound, p.between), (1, 20, 0.0492, None));
        assert!((p.estimate - 0.0206).abs() < 1e-12);
        // The eleven A/A estimates of `work` (pair sd 6.7 %, 20 pairs each; the
        // intervals are ±1.96 s around each): they pool near zero, far inside 4.92 %.
        let se = 0.067 / 20f64.sqrt();
        let runs: Vec<RunShift> = [2.06, -1.31, 0.66, 0.22, -1.06, -0.68, -0.28, 1.26, -1.60, 3.41, -2.89]
            .iter()
            .map(|e: &f64| {
                let y = (1.0 + e / 100.0).ln();
                let interval = ((y - Z_975 * se).exp() - 1.0, (y + Z_975 * se).exp() - 1.0);
                RunShift::new(e / 100.0, interval, 20, 0.067).unwrap()
            })
            .collect();
        let p = pool(&runs).unwrap();
        assert_eq!((p.runs, p.pairs), (11, 220));
        assert!(p.estimate.abs() < 0.002, "{p:?}");
        assert!(p.bound < 0.03 && p.bound > p.estimate.abs(), "{p:?}");
        assert!((p.sd - 0.067).abs() < 1e-12 && p.sd_df() == 209);
        // Identical estimates: no between-run spread, the bound is the pooled standard error's.
        let same = vec![runs[3]; 8];
        let p = pool(&same).unwrap();
        assert_eq!(p.between, Some(0.0));
        let expected = (runs[3].estimate.abs() + Z_975 * se / 8f64.sqrt()).exp() - 1.0;
        assert!((p.bound - expected).abs() < 1e-9, "{p:?} {expected}");
        // Estimates far apart beyond their noise: τ is counted.
        let apart = [runs[0], RunShift { estimate: -0.05, ..runs[0] }, RunShift { estimate: 0.05, ..runs[0] }];
        let p = pool(&apart).unwrap();
        assert!(p.between.unwrap() > 0.03 && p.bound > 0.08, "{p:?}");
        // Not a run's figures.
        assert_eq!(RunShift::new(f64::NAN, (0.0, 0.1), 20, 0.05), None);
        assert_eq!(RunShift::new(0.0, (0.1, -0.1), 20, 0.05), None);
        assert_eq!(RunShift::new(0.0, (-0.1, 0.1), 2, 0.05), None);
        assert_eq!(pool(&[]), None);
    }

    #[test]
    fn a_spread_is_far_beyond_the_factor_and_sampling() {
        // The day: 6.7 % against a profile of 2.7 % over 200 pairs.
        assert!(sd_far(0.067, 20, 0.027, 190));
        assert!(sd_far(0.027, 20, 0.067, 190), "either way");
        // 1.4×: within the factor, however many pairs.
        assert!(!sd_far(0.042, 200, 0.03, 1000));
        // 1.7× at 10 pairs: sampling alone gives that (99 % up to ×1.8).
        assert!(!sd_far(0.051, 10, 0.03, 1000));
        assert!(sd_far(0.051, 40, 0.03, 1000));
        assert!(!sd_far(0.1, 2, 0.03, 1000) && !sd_far(0.0, 20, 0.03, 100) && !sd_far(0.1, 20, 0.03, 0));
        assert!((Z_995 - dist::normal_quantile(0.995)).abs() < 1e-6);
    }

    use sim::{a_a_pairs, a_a_run, normal};

    /// A fixed-effect bound, |μ̂| + z·SE, between-run spread not counted: the rule the
    /// simulation shows to be wrong when runs differ.
    fn fixed_effect_bound(runs: &[RunShift]) -> f64 {
        let w: f64 = runs.iter().map(|r| 1.0 / (r.se * r.se)).sum();
        let mean = runs.iter().map(|r| r.estimate / (r.se * r.se)).sum::<f64>() / w;
        (mean.abs() + Z_975 / w.sqrt()).exp() - 1.0
    }

    /// Per count of runs pooled: the mean floor (at least `min`) and the share of fresh A/A runs
    /// judged regressed or improved against it, under the pooled rule and the fixed-effect one.
    /// Each history draws `max_runs` A/A runs; each run's systematic difference is N(0, τ²).
    fn simulate(histories: usize, counts: &[usize], tau: f64, min: f64, seed: u64) -> Vec<(f64, f64, f64)> {
        let (pairs, sd) = (20, 0.05);
        let max_runs = *counts.iter().max().unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sums = vec![(0.0, 0usize, 0usize); counts.len()];
        for _ in 0..histories {
            let runs: Vec<RunShift> = (0..max_runs)
                .map(|_| {
                    let bias = tau * normal(&mut rng);
                    a_a_run(&mut rng, pairs, sd, bias)
                })
                .collect();
            for (i, &k) in counts.iter().enumerate() {
                let floor = pool(&runs[..k]).unwrap().bound.max(min);
                let naive = fixed_effect_bound(&runs[..k]).max(min);
                let bias = tau * normal(&mut rng);
                let fresh = a_a_pairs(&mut rng, pairs, sd, bias);
                let false_at = |f: f64| {
                    usize::from(matches!(paired_at(&fresh, f, 0.05).verdict, Verdict::Regressed | Verdict::Improved))
                };
                sums[i].0 += floor;
                sums[i].1 += false_at(floor);
                sums[i].2 += false_at(naive);
            }
        }
        let n = histories as f64;
        sums.iter().map(|(f, a, b)| (f / n, *a as f64 / n, *b as f64 / n)).collect()
    }

    /// The property: A/A runs from a known noise with no bias give floors that shrink
    /// towards the practical minimum as runs are added, and never a false verdict rate above 5 %.
    /// With a between-run part (each run's systematic difference drawn anew) the floors stay wide
    /// enough to keep the rate, where a fixed-effect bound, blind to it, does not.
    #[test]
    fn pooled_floors_shrink_to_the_minimum_and_keep_a_a_runs_honest() {
        let (histories, min) = (300, 0.005);
        let counts = [1, 2, 4, 8, 24];
        let quiet = simulate(histories, &counts, 0.0, min, 40);
        for (k, (floor, rate, _)) in counts.iter().zip(&quiet) {
            eprintln!("no bias, {k} runs: mean floor {:.3}%, A/A false verdicts {rate:.3}", floor * 100.0);
            assert!(*rate <= 0.05, "{k} runs: false verdict rate {rate}");
        }
        let floors: Vec<f64> = quiet.iter().map(|q| q.0).collect();
        assert!(floors.windows(2).all(|w| w[1] < w[0]), "floors shrink as runs are added: {floors:?}");
        // One run: about its interval's farther end (1.96 × 5 %/√20 ≈ 2.2 %, plus its estimate).
        assert!(floors[0] > 0.025, "{floors:?}");
        // Twenty-four runs: most of the way down to the minimum.
        assert!(floors[4] - min < 0.3 * (floors[0] - min), "{floors:?}");
        let day = simulate(histories, &counts, 0.015, min, 41);
        for (k, (floor, rate, naive)) in counts.iter().zip(&day) {
            eprintln!(
                "τ = 1.5 %, {k} runs: mean floor {:.3}%, A/A false verdicts {rate:.3} (fixed-effect bound: {naive:.3})",
                floor * 100.0
            );
            assert!(*rate <= 0.05, "{k} runs with a between-run part: false verdict rate {rate}");
            assert!(*floor > 0.015, "{k} runs: the floor stays above the between-run spread: {floor}");
        }
        let naive = day.last().unwrap().2;
        assert!(naive > 0.05, "a bound blind to the between-run spread lets A/A runs change: {naive}");
    }
}
