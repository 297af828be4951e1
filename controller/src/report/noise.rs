//! A calibrated noise profile: what an A/A run (the same commit on both sides) measured per
//! metric, kept beside the run as `noise.json` and given to later runs (`--noise`) for their
//! floors. A metric's profile is used only with at least [`MIN_PROFILE_PAIRS`] pairs: a spread
//! from 2 or 3 samples is itself noise.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::Report;
use super::decide::MIN_PROFILE_PAIRS;
use crate::stats;

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
    /// Where a run found it, when not named by `--noise` (the ledger's latest of its spec, image
    /// and machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
}

/// One metric's A/A noise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricNoise {
    pub pairs: usize,
    /// Standard deviation of the pairs' log ratios.
    pub spread: f64,
    /// The A/A shift (head/base − 1) and its 95 % interval.
    pub estimate: f64,
    pub interval: (f64, f64),
    /// The interval's end farther from zero: the floor later runs test against.
    pub floor: f64,
}

impl NoiseProfile {
    /// The profile of an A/A report: each metric with at least 3 pairs, at 95 %.
    pub fn from_report(report: &Report) -> NoiseProfile {
        let metrics = report
            .metric_defs()
            .iter()
            .filter_map(|def| {
                let (pairs, _) = report.pairs_of(&def.key);
                if sandbench_proto::lens::is_counted(&def.key) {
                    return NoiseProfile::counted_noise(&pairs, report.within_spread(&def.key))
                        .map(|m| (def.key.clone(), m));
                }
                let p = stats::paired_at(&pairs, 0.0, 0.05);
                let ((lo, hi), estimate, spread) = (p.interval?, p.estimate?, p.spread?);
                let floor = lo.abs().max(hi.abs());
                floor.is_finite().then(|| {
                    (def.key.clone(), MetricNoise { pairs: p.pairs, spread, estimate, interval: (lo, hi), floor })
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
        }
    }

    /// A lens count's A/A noise from any number of pairs: the largest change a pair showed (or a
    /// side's trials), as both its spread and its floor.
    fn counted_noise(pairs: &[(f64, f64)], within: Option<f64>) -> Option<MetricNoise> {
        let p = stats::paired_counts(pairs, 0.0, 0.0);
        let ((lo, hi), estimate) = (p.interval?, p.estimate?);
        let spread = lo.abs().max(hi.abs()).max(within.unwrap_or(0.0));
        Some(MetricNoise { pairs: p.pairs, spread, estimate, interval: (lo, hi), floor: spread })
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
}
