//! Metrics measured several times a trial (the runs of a repeated command, each a sample with
//! its index): the trial's one value the statistics compare, the spread of its runs, and
//! hyperfine's warnings about them.
//!
//! A trial's value is the **median of its runs** (a trial measured once is its one value), so
//! pairs stay one per trial and a slow run cannot move the trial's value much; a trial with a
//! failed run has no value (it counts as failed). Outliers are found as hyperfine finds them
//! (Iglewicz and Hoaglin's modified Z-score): a run is an outlier when it lies farther from the
//! trial's median than [`OUTLIER_THRESHOLD`] median absolute deviations (MAD), which is 10
//! standard deviations when σ is estimated as 1.4826 MAD. When the first run is one, it was
//! slower than the rest (a cache filled by it, most often: `warmup` or `prepare` are the cure);
//! otherwise the trial had outliers (a busy machine, most often).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Sample;

/// Minimum modified Z-score (distance from the median in MADs) of an outlier: 10 σ.
pub const OUTLIER_THRESHOLD: f64 = 1.4826 * 10.0;

/// The runs of one trial of one side, when it had more than one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRuns {
    pub side: String,
    pub trial: u32,
    pub runs: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

/// What hyperfine would warn about one trial's runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outliers {
    /// The first run is an outlier above the median; its value.
    SlowFirst(f64),
    /// This many runs are outliers (the first is not).
    Some(usize),
}

/// Each trial's values in trial order: all its samples', in sample order; None when one failed.
fn by_trial(samples: &[Sample]) -> BTreeMap<u32, Option<Vec<f64>>> {
    let mut sorted: Vec<&Sample> = samples.iter().collect();
    sorted.sort_by_key(|s| (s.trial, s.sample));
    let mut trials: BTreeMap<u32, Option<Vec<f64>>> = BTreeMap::new();
    for s in sorted {
        let entry = trials.entry(s.trial).or_insert_with(|| Some(Vec::new()));
        match (s.value, entry.as_mut()) {
            (Some(v), Some(values)) => values.push(v),
            _ => *entry = None,
        }
    }
    trials
}

/// One value per trial, in trial order: the median of its runs; none for a trial with a
/// failed run.
pub fn trial_values(samples: &[Sample]) -> Vec<(u32, f64)> {
    by_trial(samples).into_iter().filter_map(|(t, values)| Some((t, crate::stats::median(&values?)?))).collect()
}

/// How many trials have samples (successful or not).
pub fn attempted_trials(samples: &[Sample]) -> usize {
    by_trial(samples).len()
}

/// Min, median and max of every successful trial with more than one run.
pub fn trial_runs(side: &str, samples: &[Sample]) -> Vec<TrialRuns> {
    by_trial(samples)
        .into_iter()
        .filter_map(|(trial, values)| {
            let values = values.filter(|v| v.len() > 1)?;
            Some(TrialRuns {
                side: side.to_string(),
                trial,
                runs: values.len(),
                min: values.iter().copied().fold(f64::INFINITY, f64::min),
                median: crate::stats::median(&values)?,
                max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            })
        })
        .collect()
}

/// Every successful trial's runs, in run order, for the outlier check.
pub fn runs_of_trials(samples: &[Sample]) -> Vec<(u32, Vec<f64>)> {
    by_trial(samples).into_iter().filter_map(|(t, values)| Some((t, values?))).collect()
}

/// `|x − median| / MAD` of each value, signed; a MAD of 0 counts as the smallest positive
/// number, so any value off a constant run is an outlier.
pub fn modified_zscores(values: &[f64]) -> Vec<f64> {
    let Some(median) = crate::stats::median(values) else { return Vec::new() };
    let deviations: Vec<f64> = values.iter().map(|v| (v - median).abs()).collect();
    let mad = crate::stats::median(&deviations).filter(|m| *m > 0.0).unwrap_or(f64::EPSILON);
    values.iter().map(|v| (v - median) / mad).collect()
}

/// hyperfine's warning about a trial's runs, if it would give one.
pub fn outliers(values: &[f64]) -> Option<Outliers> {
    let scores = modified_zscores(values);
    if scores.first().is_some_and(|z| *z > OUTLIER_THRESHOLD) {
        return Some(Outliers::SlowFirst(values[0]));
    }
    let count = scores.iter().filter(|z| z.abs() > OUTLIER_THRESHOLD).count();
    (count > 0).then_some(Outliers::Some(count))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(trial: u32, values: &[f64]) -> Vec<Sample> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Sample { trial, sample: i as u32, value: Some(*v), error: None })
            .collect()
    }

    #[test]
    fn a_trial_is_the_median_of_its_runs_and_a_failed_run_fails_it() {
        let mut samples = runs(0, &[0.3, 0.1, 0.2, 0.9]);
        samples.extend(runs(1, &[0.5]));
        samples.extend(runs(2, &[0.4, 0.4]));
        samples.push(Sample { trial: 2, sample: 2, value: None, error: Some("boom".into()) });
        assert_eq!(trial_values(&samples), [(0, 0.25), (1, 0.5)]);
        assert_eq!(attempted_trials(&samples), 3);
        let spread = trial_runs("base", &samples);
        assert_eq!(spread.len(), 1, "one run, or a failed trial, has no spread");
        assert_eq!(
            (spread[0].trial, spread[0].runs, spread[0].min, spread[0].median, spread[0].max),
            (0, 4, 0.1, 0.25, 0.9)
        );
    }

    #[test]
    fn outliers_as_hyperfine_finds_them() {
        // Small or low-variance samples have none.
        assert_eq!(outliers(&[]), None);
        assert_eq!(outliers(&[50.0]), None);
        assert_eq!(outliers(&[1000.0, 0.0]), None);
        assert_eq!(outliers(&[-0.2, 0.0, 0.2]), None);
        // A run far off the median: 4.0 is (4.0 − 0.1) / 0.2 = 19.5 MADs away.
        assert_eq!(outliers(&[-0.2, 0.0, 0.2, 4.0]), Some(Outliers::Some(1)));
        // Runs of normal noise: none.
        let normal = [2.33, 1.42, -0.58, -0.31, 2.29, 0.76, -1.07, -0.96, -1.16, 1.11];
        assert_eq!(outliers(&normal), None);
        let mut two = normal.to_vec();
        two.extend([20.0, -500.0]);
        assert_eq!(outliers(&two), Some(Outliers::Some(2)));
        // A constant trial: anything off it is an outlier.
        assert_eq!(outliers(&[10.0, 10.0, 10.0, 10.0, 10.0, 100.0]), Some(Outliers::Some(1)));
        // The first run slower than the rest.
        assert_eq!(outliers(&[0.5, 0.30, 0.29, 0.31, 0.30]), Some(Outliers::SlowFirst(0.5)));
        // Just under the threshold is not an outlier: median 1, MAD 0.1.
        assert_eq!(outliers(&[1.0, 0.9, 1.1, 1.0, 1.0 + 0.1 * (OUTLIER_THRESHOLD - 0.01)]), None);
    }
}
