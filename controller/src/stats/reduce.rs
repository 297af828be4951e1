//! A distribution's samples of one trial reduced to the figures that are judged: percentiles
//! and the maximum. Each trial's figure is then one value of a metric like any other, judged
//! from the pairs; nothing here compares sides.
//!
//! Percentiles are R's type 7 (Hyndman & Fan 1996; numpy's and seed 004's `_percentile`):
//! linear interpolation between the closest ranks, at position (n − 1)·p of the sorted samples.
//! Of 128 samples, the 99th percentile sits at 125.73: between the third and second largest, so
//! a trial's p99 is made of its two or three slowest requests.

use sandbench_proto::metric::Facet;

/// The `p`-th percentile (0–100) of `samples`, R type 7; None when there is none or a
/// sample is not a number.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(super::quantile_type7(&sorted, p / 100.0))
}

/// One trial's figures of a distribution: each of `facets` (percentiles, max; others are left
/// out) over `samples`, in the facets' order. Empty when there is no sample.
pub fn reduce(samples: &[f64], facets: &[Facet]) -> Vec<(Facet, f64)> {
    facets
        .iter()
        .filter_map(|f| {
            let value = match *f {
                Facet::Percentile(n) => percentile(samples, f64::from(n)),
                Facet::Max => percentile(samples, 100.0),
                _ => None,
            };
            value.map(|v| (*f, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_the_closest_ranks_as_r_type_7() {
        // numpy.percentile([1, 2, 3, 4], [50, 95, 99]) = 2.5, 3.85, 3.97.
        let four = [4.0, 1.0, 3.0, 2.0];
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-12;
        assert!(close(percentile(&four, 50.0), 2.5));
        assert!(close(percentile(&four, 95.0), 3.85));
        assert!(close(percentile(&four, 99.0), 3.97));
        assert!(close(percentile(&four, 0.0), 1.0) && close(percentile(&four, 100.0), 4.0));
        assert!(close(percentile(&[7.0], 99.0), 7.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[1.0, f64::NAN], 50.0), None);
        // 128 samples 1..=128: p99 at position 125.73, between 126 and 127.
        let many: Vec<f64> = (1..=128).map(f64::from).collect();
        assert!(close(percentile(&many, 99.0), 126.73));
        assert!(close(percentile(&many, 50.0), 64.5));
    }

    #[test]
    fn a_trial_reduces_to_its_facets_in_order() {
        let samples = [0.010, 0.012, 0.011, 0.050, 0.013];
        let got = reduce(&samples, &[Facet::P50, Facet::P95, Facet::Max, Facet::Cpu]);
        let facets: Vec<Facet> = got.iter().map(|(f, _)| *f).collect();
        assert_eq!(facets, [Facet::P50, Facet::P95, Facet::Max]);
        assert_eq!(got[0].1, 0.012);
        // Position 3.8: 0.013 + 0.8 × (0.050 − 0.013).
        assert!((got[1].1 - 0.0426).abs() < 1e-12, "{got:?}");
        assert_eq!(got[2].1, 0.050);
        assert!(reduce(&[], &[Facet::P50]).is_empty());
    }
}
