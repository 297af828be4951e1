//! Which side of two reference samples' midpoint a third sample lies on, and whether that is
//! clear of the noise: how a bisection by wall time tells a commit good or bad
//! ([`crate::bisect`]) and when it needs more trials to say.

/// Whether the median of `samples` is on one side of the midpoint between the medians of `good`
/// and `bad` by more than `z` standard errors (each median's error from its samples' MAD; ends
/// without samples, as from an older `bisect.json`, count as exact).
pub fn clear(good: &[f64], bad: &[f64], samples: &[f64], z: f64) -> bool {
    let centre = |x: &[f64]| super::median(x);
    let (Some(g), Some(b), Some(c)) = (centre(good), centre(bad), centre(samples)) else { return true };
    // The standard error of a median: 1.2533 σ/√n, σ from the MAD (1.4826 MAD).
    let error = |x: &[f64], m: f64| {
        let deviations: Vec<f64> = x.iter().map(|v| (v - m).abs()).collect();
        let sigma = 1.4826 * super::median(&deviations).unwrap_or(0.0);
        1.2533 * sigma / (x.len() as f64).sqrt()
    };
    let (eg, eb, ec) = (error(good, g), error(bad, b), error(samples, c));
    let se = (ec * ec + (eg * eg + eb * eb) / 4.0).sqrt();
    (c - (g + b) / 2.0).abs() > z * se
}

#[cfg(test)]
mod tests {
    use super::*;

    const Z: f64 = 2.0;

    #[test]
    fn samples_are_clear_only_away_from_the_midpoint_by_their_errors() {
        let good = [1.00, 1.02, 0.98, 1.01, 0.99];
        let bad = [1.10, 1.12, 1.08, 1.11, 1.09];
        // Near either end: decided at once.
        assert!(clear(&good, &bad, &[1.00, 1.01, 0.99], Z));
        assert!(clear(&good, &bad, &[1.10, 1.09, 1.11], Z));
        // At the midpoint, or too noisy to tell: more trials.
        assert!(!clear(&good, &bad, &[1.05, 1.06, 1.04], Z));
        assert!(!clear(&good, &bad, &[0.95, 1.07, 1.20], Z));
        // Ends without samples (an older bisect.json) do not hold the search up.
        assert!(clear(&[], &[], &[1.05], Z));
    }
}
