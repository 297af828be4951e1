//! Reports, pure: the run's data (`report.json`) and what is rendered from it — `report.md`, the
//! pull-request comment in the reference harness's layout, and `report.html`, one page with the
//! distributions drawn. Renderers take the report and return a `String`; nothing here does I/O.

pub mod format;
pub mod html;
pub mod markdown;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::cost::SandboxRecord;
use crate::spec::MetricDef;
use crate::stats::{self, Comparison, Floors, Paired};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    Completed,
    Partial,
    Failed,
    Canceled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Partial => "partial",
            Status::Failed => "failed",
            Status::Canceled => "canceled",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revision {
    /// As asked for (`main`, a SHA, …).
    pub rev: String,
    pub commit: String,
}

/// One sample: a value, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub trial: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub metrics: BTreeMap<String, Vec<Sample>>,
    /// Kernel, CPU model, OS and tool versions of the sandbox.
    pub facts: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    pub cpus: f64,
    pub memory_bytes: u64,
    pub disk_gb: f64,
}

/// Everything a run found; every rendering is derived from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub run_id: String,
    pub spec_name: String,
    pub status: Status,
    pub base: Revision,
    pub head: Revision,
    pub image: String,
    pub resources: Resources,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub failure_limit: u32,
    pub budget_usd: Option<f64>,
    /// Definitions of the metrics, in report order.
    pub metrics: Vec<MetricDef>,
    /// Samples each side should have per metric.
    pub expected: BTreeMap<String, u32>,
    pub base_side: Side,
    pub head_side: Side,
    pub sandboxes: Vec<SandboxRecord>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// Derived from the samples; kept for readers of the JSON.
    #[serde(default)]
    pub comparisons: Vec<MetricComparison>,
}

/// The comparison of one metric: the reference rule and the paired verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricComparison {
    pub key: String,
    pub comparison: Comparison,
    pub paired: Paired,
    pub base_successful: usize,
    pub base_attempted: usize,
    pub head_successful: usize,
    pub head_attempted: usize,
}

fn values(samples: Option<&Vec<Sample>>) -> Vec<(u32, f64)> {
    samples.map(|s| s.iter().filter_map(|x| x.value.map(|v| (x.trial, v))).collect()).unwrap_or_default()
}

impl Report {
    /// Compares every metric.
    pub fn analyze(&self) -> Vec<MetricComparison> {
        self.metrics
            .iter()
            .map(|def| {
                let base = values(self.base_side.metrics.get(&def.key));
                let head = values(self.head_side.metrics.get(&def.key));
                let expected = self.expected.get(&def.key).copied().unwrap_or(1) as usize;
                let floors = Floors { absolute: def.absolute, relative: def.relative };
                let b: Vec<f64> = base.iter().map(|x| x.1).collect();
                let h: Vec<f64> = head.iter().map(|x| x.1).collect();
                let comparison = stats::compare(&b, &h, expected, floors);
                let pairs: Vec<(f64, f64)> = base
                    .iter()
                    .filter_map(|(t, bv)| head.iter().find(|(ht, _)| ht == t).map(|(_, hv)| (*bv, *hv)))
                    .collect();
                // The floor of the paired verdict, as a relative change: the relative floor, or
                // the absolute one when it is larger at this base median.
                let floor = comparison
                    .base_median
                    .filter(|m| *m > 0.0)
                    .map_or(def.relative, |m| def.relative.max(def.absolute / m));
                let attempted = |side: &Side| side.metrics.get(&def.key).map_or(0, Vec::len);
                MetricComparison {
                    key: def.key.clone(),
                    paired: stats::paired(&pairs, floor),
                    comparison,
                    base_successful: base.len(),
                    base_attempted: attempted(&self.base_side),
                    head_successful: head.len(),
                    head_attempted: attempted(&self.head_side),
                }
            })
            .collect()
    }

    /// Every sample has a value for every trial expected, and no run-level error.
    pub fn complete(&self) -> bool {
        self.errors.is_empty()
            && self.metrics.iter().all(|def| {
                let expected = self.expected.get(&def.key).copied().unwrap_or(1);
                [&self.base_side, &self.head_side].iter().all(|side| {
                    let got = values(side.metrics.get(&def.key));
                    got.len() as u32 == expected && (0..expected).all(|t| got.iter().any(|(x, _)| *x == t))
                })
            })
    }

    /// Allocation, max(request, usage) and usage-only totals, when usage was measured.
    pub fn cost_figures(&self) -> Option<(f64, f64, f64)> {
        let costs: Vec<&crate::cost::SandboxCost> = self.sandboxes.iter().filter_map(|s| s.cost.as_ref()).collect();
        (!costs.is_empty()).then(|| {
            (
                costs.iter().map(|c| c.allocation_usd).sum(),
                costs.iter().map(|c| c.max_usd).sum(),
                costs.iter().map(|c| c.usage_usd).sum(),
            )
        })
    }

    pub fn total_cost_usd(&self) -> Option<f64> {
        (!self.sandboxes.is_empty()).then(|| self.sandboxes.iter().map(|s| s.estimated_usd).sum())
    }

    /// SHA-256 of what makes two runs comparable: spec, revisions, image and resources.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let identity = serde_json::json!({
            "spec": self.spec_name,
            (sandbench_proto::Side::Base.as_str()): self.base.commit,
            (sandbench_proto::Side::Head.as_str()): self.head.commit,
            "image": self.image,
            "resources": self.resources,
            "expected": self.expected,
        });
        Sha256::digest(identity.to_string().as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// RFC 3339 (UTC, seconds) of a time.
pub fn timestamp(t: std::time::SystemTime) -> String {
    let t = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod timestamp_tests {
    #[test]
    fn timestamps_are_rfc3339() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400 + 3661);
        assert_eq!(super::timestamp(t), "2000-02-29T01:01:01Z");
        assert_eq!(super::timestamp(std::time::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }
}
