//! A calibrated noise profile: what A/A runs (the same commit on both sides) measured per metric,
//! kept beside each run as `noise.json` and given to later runs for their floors: one file named
//! by `--noise`, or every A/A run of the spec, image and machine the ledger keeps, pooled
//! ([`NoiseProfile::pool`], the rule in [`crate::stats::pool`]). A metric's figures are used
//! only from runs with at least [`MIN_PROFILE_PAIRS`] pairs of it: a spread from 2 or 3 samples
//! is itself noise.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::Report;
use crate::stats::{self, Paired, pool};

/// Pairs a noise profile needs of a metric before its floor is used: with fewer, a spread is
/// itself noise.
pub const MIN_PROFILE_PAIRS: usize = 10;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseProfile {
    pub spec: String,
    pub run_id: String,
    pub image: String,
    /// Per metric, from the A/A run's pairs.
    #[serde(default)]
    pub metrics: BTreeMap<String, MetricNoise>,
    /// Written by older versions (a bound without its pair count); never used for floors.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub relative: BTreeMap<String, f64>,
    /// Where a run found it, when not named by `--noise` (the ledger's A/A runs of its spec,
    /// image and machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
    /// The A/A runs pooled into `metrics`, oldest first (`run_id` the latest); empty for one
    /// run's own profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pooled: Vec<String>,
    /// The least floor a metric takes from this profile: `[report] min_floor` of the spec of the
    /// run using it (absent: [`super::decide::PROFILE_FLOOR_MIN`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_floor: Option<f64>,
}

/// One metric's A/A noise: one run's, or runs' pooled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricNoise {
    pub pairs: usize,
    /// Standard deviation of the pairs' log ratios (pooled: within runs).
    pub spread: f64,
    /// The A/A shift (head/base − 1) and its 95 % interval; pooled, the 95 % interval of the
    /// systematic difference the next run may carry.
    pub estimate: f64,
    pub interval: (f64, f64),
    /// The interval's end farther from zero: the floor later runs test against.
    pub floor: f64,
    /// A/A runs these figures rest on.
    #[serde(default = "one_run", skip_serializing_if = "is_one_run")]
    pub runs: usize,
    /// Pooled runs: the between-run spread of their systematic differences (τ, log scale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between: Option<f64>,
}

fn one_run() -> usize {
    1
}

fn is_one_run(n: &usize) -> bool {
    *n == 1
}

impl NoiseProfile {
    /// The profile of an A/A report: each metric with at least 3 pairs, at 95 %.
    pub fn from_report(report: &Report) -> NoiseProfile {
        let metrics = report
            .metric_defs()
            .iter()
            .filter_map(|def| {
                let (pairs, _) = report.pairs_of(&def.key);
                if sandbench_proto::metric::MetricKey::facet_of(&def.key).is_lens() {
                    return NoiseProfile::counted_noise(&pairs, report.within_spread(&def.key))
                        .map(|m| (def.key.clone(), m));
                }
                let p = stats::paired_at(&pairs, 0.0, 0.05);
                let ((lo, hi), estimate, spread) = (p.interval?, p.estimate?, p.spread?);
                let floor = lo.abs().max(hi.abs());
                floor.is_finite().then(|| {
                    let noise = MetricNoise {
                        pairs: p.pairs,
                        spread,
                        estimate,
                        interval: (lo, hi),
                        floor,
                        runs: 1,
                        between: None,
                    };
                    (def.key.clone(), noise)
                })
            })
            .collect();
        NoiseProfile {
            spec: report.spec_name.clone(),
            run_id: report.run_id.clone(),
            image: report.image.clone(),
            metrics,
            relative: BTreeMap::new(),
            found: None,
            pooled: Vec::new(),
            min_floor: None,
        }
    }

    /// A lens count's A/A noise from any number of pairs: the largest change a pair showed (or a
    /// side's trials), as both its spread and its floor.
    fn counted_noise(pairs: &[(f64, f64)], within: Option<f64>) -> Option<MetricNoise> {
        let p = stats::paired_counts(pairs, 0.0, 0.0);
        let ((lo, hi), estimate) = (p.interval?, p.estimate?);
        let spread = lo.abs().max(hi.abs()).max(within.unwrap_or(0.0));
        Some(MetricNoise {
            pairs: p.pairs,
            spread,
            estimate,
            interval: (lo, hi),
            floor: spread,
            runs: 1,
            between: None,
        })
    }

    /// The profiles of A/A runs of one spec, image and machine, oldest first, pooled into one
    /// (`run_id` and `image` the latest's). Per metric, the runs with at least
    /// [`MIN_PROFILE_PAIRS`] pairs of it pool by [`pool::pool`]: the floor is the farther end of
    /// the 95 % interval of the systematic difference a next run may carry. A metric no run
    /// calibrated keeps the latest run's figures (whose pairs say why it is not used). A lens
    /// count keeps the largest change any run showed, as one run's does. None without a run.
    pub fn pool(runs: &[NoiseProfile]) -> Option<NoiseProfile> {
        let latest = runs.last()?;
        let keys: BTreeSet<&String> = runs.iter().flat_map(|r| r.metrics.keys()).collect();
        let metrics = keys
            .into_iter()
            .filter_map(|key| {
                let entries: Vec<&MetricNoise> = runs.iter().filter_map(|r| r.metrics.get(key)).collect();
                let pooled = if sandbench_proto::metric::MetricKey::facet_of(key).is_lens() {
                    NoiseProfile::pooled_counts(&entries)
                } else {
                    NoiseProfile::pooled_noise(&entries)
                };
                pooled.map(|m| (key.clone(), m))
            })
            .collect();
        Some(NoiseProfile {
            spec: latest.spec.clone(),
            run_id: latest.run_id.clone(),
            image: latest.image.clone(),
            metrics,
            relative: BTreeMap::new(),
            found: None,
            pooled: runs.iter().map(|r| r.run_id.clone()).collect(),
            min_floor: None,
        })
    }

    /// A timed metric's runs pooled: one calibrated run's own figures, the latest entry when no
    /// run has the pairs.
    fn pooled_noise(entries: &[&MetricNoise]) -> Option<MetricNoise> {
        let (calibrated, shifts): (Vec<&MetricNoise>, Vec<pool::RunShift>) = entries
            .iter()
            .filter(|m| m.pairs >= MIN_PROFILE_PAIRS)
            .filter_map(|m| pool::RunShift::new(m.estimate, m.interval, m.pairs, m.spread).map(|s| (*m, s)))
            .unzip();
        match calibrated[..] {
            [] => return entries.last().map(|m| (*m).clone()),
            [one] => return Some(one.clone()),
            _ => {}
        }
        let p = pool::pool(&shifts)?;
        Some(MetricNoise {
            pairs: p.pairs,
            spread: p.sd,
            estimate: p.estimate,
            interval: p.interval,
            floor: p.bound,
            runs: p.runs,
            between: p.between,
        })
    }

    /// A lens count's runs: the largest change any of them showed, as spread and floor.
    fn pooled_counts(entries: &[&MetricNoise]) -> Option<MetricNoise> {
        let latest = entries.last()?;
        let max = |f: fn(&MetricNoise) -> f64| entries.iter().map(|m| f(m)).fold(0.0, f64::max);
        Some(MetricNoise {
            pairs: entries.iter().map(|m| m.pairs).sum(),
            spread: max(|m| m.spread),
            estimate: latest.estimate,
            interval: (
                entries.iter().map(|m| m.interval.0).fold(f64::INFINITY, f64::min),
                entries.iter().map(|m| m.interval.1).fold(f64::NEG_INFINITY, f64::max),
            ),
            floor: max(|m| m.floor),
            runs: entries.len(),
            between: None,
        })
    }

    pub fn load(path: &Path) -> anyhow::Result<NoiseProfile> {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read the noise profile {}", path.display()))?;
        serde_json::from_slice(&bytes).with_context(|| format!("{} is not a sandbench noise profile", path.display()))
    }

    /// The floor the profile gives `key`, or why it gives none.
    pub fn floor(&self, key: &str) -> Result<f64, String> {
        match self.metrics.get(key) {
            Some(m) if m.pairs >= MIN_PROFILE_PAIRS => Ok(m.floor),
            Some(m) => Err(format!(
                "the noise profile {} has {} pairs of this metric (at least {MIN_PROFILE_PAIRS} needed): floor from the spec",
                self.run_id, m.pairs
            )),
            None => {
                Err(format!("the noise profile {} does not calibrate this metric: floor from the spec", self.run_id))
            }
        }
    }

    /// What to tell the person starting a run with this profile, if anything.
    pub fn warning(&self, rule: super::Rule) -> Option<String> {
        if rule == super::Rule::Reference {
            return Some(format!(
                "the reference rule uses the spec's floors: the noise profile {} is kept in the report but not used",
                self.run_id
            ));
        }
        let weak = self.uncalibrated();
        (!weak.is_empty()).then(|| {
            format!(
                "the noise profile {} has fewer than {MIN_PROFILE_PAIRS} pairs of {}: those keep the spec's floors (run the A/A calibration with --trials {MIN_PROFILE_PAIRS} or more)",
                self.run_id,
                weak.join(", ")
            )
        })
    }

    /// Metrics the profile cannot calibrate (too few pairs), for a warning when it is loaded.
    pub fn uncalibrated(&self) -> Vec<String> {
        let mut keys: Vec<String> =
            self.metrics.iter().filter(|(_, m)| m.pairs < MIN_PROFILE_PAIRS).map(|(k, _)| k.clone()).collect();
        keys.extend(self.relative.keys().filter(|k| !self.metrics.contains_key(*k)).cloned());
        keys
    }

    /// A/A runs the profile rests on.
    pub fn run_count(&self) -> usize {
        self.pooled.len().max(1)
    }

    /// The fewest and most A/A runs, and pairs, that a timed metric's floor from the profile
    /// rests on; None when the profile calibrates no timed metric.
    fn span(&self) -> Option<((usize, usize), (usize, usize))> {
        let calibrated: Vec<&MetricNoise> = self
            .metrics
            .iter()
            .filter(|(k, m)| m.pairs >= MIN_PROFILE_PAIRS && !sandbench_proto::metric::MetricKey::facet_of(k).is_lens())
            .map(|(_, m)| m)
            .collect();
        let range = |f: fn(&MetricNoise) -> usize| {
            Some((calibrated.iter().map(|m| f(m)).min()?, calibrated.iter().map(|m| f(m)).max()?))
        };
        Some((range(|m| m.runs)?, range(|m| m.pairs)?))
    }

    /// What the floors rest on: `11 A/A runs, 200–220 pairs a metric`.
    pub fn basis(&self) -> String {
        let range = |(lo, hi): (usize, usize)| if lo == hi { lo.to_string() } else { format!("{lo}–{hi}") };
        match self.span() {
            Some(((1, 1), pairs)) => format!("one A/A run, {} pairs a metric", range(pairs)),
            Some((runs, pairs)) => format!("{} A/A runs, {} pairs a metric", range(runs), range(pairs)),
            None => format!(
                "{} A/A run{}, none with {MIN_PROFILE_PAIRS} pairs of a metric",
                self.run_count(),
                if self.run_count() == 1 { "" } else { "s" }
            ),
        }
    }

    /// Whether every floor the profile gives rests on one A/A run (a single calibration).
    pub fn single_run(&self) -> bool {
        self.span().map_or(self.run_count() == 1, |((_, most), _)| most == 1)
    }

    /// The profile's calibration of a timed metric: its pair sd and the degrees of freedom of
    /// that sd, when it has the pairs.
    fn calibrated_spread(&self, key: &str) -> Option<(f64, usize, usize)> {
        if sandbench_proto::metric::MetricKey::facet_of(key).is_lens() {
            return None;
        }
        let m = self.metrics.get(key).filter(|m| m.pairs >= MIN_PROFILE_PAIRS)?;
        Some((m.spread, m.pairs.saturating_sub(m.runs), m.runs))
    }

    /// This run's analysis of `key` against the profile, when its pair sd is far from the
    /// profile's ([`pool::sd_far`]).
    pub fn far(&self, key: &str, paired: &Paired) -> Option<DayNoise> {
        let (profile, df, runs) = self.calibrated_spread(key)?;
        let today = paired.spread?;
        pool::sd_far(today, paired.pairs, profile, df).then(|| {
            let alpha = 1.0 - paired.confidence.unwrap_or(0.95);
            DayNoise {
                key: key.to_string(),
                today,
                profile,
                runs,
                planned_mde: stats::mde(paired.floor, profile, paired.pairs, alpha),
            }
        })
    }

    /// What the profile leads a run to expect of `key` at `floor`: its pair sd and the minimum
    /// detectable effect at each (pairs, alpha, floor) look, the floor of a look as the verdict
    /// will raise it for the report's family ([`super::decide::for_family`]), for the terminal
    /// before the run.
    pub fn expectation(&self, key: &str, floor: f64, looks: &[(u32, f64, f64)]) -> Option<String> {
        let (sd, _, runs) = self.calibrated_spread(key)?;
        let at: Vec<String> = looks
            .iter()
            .map(|&(n, alpha, floor)| format!("{} at {n} pairs", pct(stats::mde(floor, sd, n as usize, alpha))))
            .collect();
        Some(format!(
            "{key}: pair sd {} over {}, floor ±{}: minimum detectable effect {}",
            pct(sd),
            if runs == 1 { "one A/A run".to_string() } else { format!("{runs} A/A runs") },
            pct(floor),
            at.join(", ")
        ))
    }
}

/// A metric whose pair sd today is far from its noise profile's.
#[derive(Debug, Clone, PartialEq)]
pub struct DayNoise {
    pub key: String,
    pub today: f64,
    pub profile: f64,
    /// A/A runs the profile's sd pools.
    pub runs: usize,
    /// The minimum detectable effect the profile's sd gives at this run's pairs and floor.
    pub planned_mde: f64,
}

impl DayNoise {
    /// The metric's note.
    pub fn note(&self) -> String {
        format!(
            "pair sd {} today, far from the noise profile's {} over {} (more than {}× apart, and beyond what sampling gives 99% of the time): the verdict and its MDE use today's; the profile planned for an MDE of {} at these pairs",
            pct(self.today),
            pct(self.profile),
            if self.runs == 1 { "one A/A run".to_string() } else { format!("{} A/A runs", self.runs) },
            pool::FAR_FACTOR,
            pct(self.planned_mde)
        )
    }
}

fn pct(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}
