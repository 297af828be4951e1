//! What a run leaves behind: samples collected from the event log, the report skeleton, the
//! written reports (re-renderable from the directory alone), and an A/A run's noise profile.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use anyhow::Context;

use super::walk::SideRun;
use crate::report::{self, Report, Revision, Sample, Side, Status};
use crate::spec::Plan;
use crate::store::{StoredBody, read_events};

/// What an A/A run (the same commit on both sides) measured as noise, per metric.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NoiseProfile {
    pub spec: String,
    pub run_id: String,
    pub image: String,
    /// The largest relative change an A/A comparison showed: the bound of the paired 95%
    /// interval farther from zero, or the difference of medians when too few pairs.
    pub relative: BTreeMap<String, f64>,
}

impl NoiseProfile {
    pub fn from_report(report: &Report) -> NoiseProfile {
        let relative = report
            .comparisons
            .iter()
            .filter_map(|c| {
                let noise = match c.paired.interval {
                    Some((lo, hi)) => lo.abs().max(hi.abs()),
                    None => c.comparison.relative?.abs(),
                };
                noise.is_finite().then(|| (c.key.clone(), noise))
            })
            .collect();
        NoiseProfile {
            spec: report.spec_name.clone(),
            run_id: report.run_id.clone(),
            image: report.image.clone(),
            relative,
        }
    }

    pub fn load(path: &Path) -> anyhow::Result<NoiseProfile> {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read the noise profile {}", path.display()))?;
        serde_json::from_slice(&bytes).with_context(|| format!("{} is not a sandbench noise profile", path.display()))
    }

    /// Uses the measured noise as relative floors (never below half a percent).
    pub fn apply(&self, plan: &mut Plan) {
        for def in &mut plan.metrics {
            if let Some(noise) = self.relative.get(&def.key) {
                def.relative = noise.max(0.005);
            }
        }
    }
}

/// Samples per side and metric from the run's event log, and each side's facts.
pub(super) fn collect(dir: &Path, sides: &[SideRun]) -> anyhow::Result<BTreeMap<String, Side>> {
    let role_of: BTreeMap<String, &str> =
        sides.iter().filter_map(|s| s.live.as_ref().map(|l| (l.sandbox.id.clone(), s.side.as_str()))).collect();
    let mut out: BTreeMap<String, Side> =
        BTreeMap::from([("base".to_string(), Side::default()), ("head".to_string(), Side::default())]);
    let log = dir.join(crate::store::OBSERVATIONS_FILE);
    if log.exists() {
        for event in read_events(&log)? {
            let (Some(role), StoredBody::Observation { metric, trial, value, error, .. }) =
                (role_of.get(&event.sandbox), event.body)
            else {
                continue;
            };
            let side = out.entry(role.to_string()).or_default();
            let samples = side.metrics.entry(metric).or_default();
            samples.retain(|s| s.trial != trial);
            samples.push(Sample { trial, value, error });
            samples.sort_by_key(|s| s.trial);
        }
    }
    for side in sides {
        if let Some(live) = &side.live {
            let f = &live.hello.facts;
            let facts = &mut out.entry(side.side.as_str().to_string()).or_default().facts;
            if facts.is_empty() {
                *facts = BTreeMap::from([
                    ("kernel".to_string(), f.kernel.clone()),
                    ("cpu".to_string(), f.cpu_model.clone()),
                    ("cpus".to_string(), f.cpus.to_string()),
                    ("memory_bytes".to_string(), f.memory_bytes.to_string()),
                    ("os".to_string(), f.os_release.clone()),
                    ("agent".to_string(), live.hello.agent_version.clone()),
                ]);
                // Tool versions the agent found while preparing.
                let tools = dir.join("sandboxes").join(&live.sandbox.id).join("facts.json");
                if let Ok(bytes) = std::fs::read(tools)
                    && let Ok(tools) = serde_json::from_slice::<BTreeMap<String, String>>(&bytes)
                {
                    facts.extend(tools);
                }
            }
        }
    }
    Ok(out)
}

pub(super) fn skeleton(plan: &Plan, run_id: &str, base: Revision, head: Revision) -> Report {
    let mut expected = BTreeMap::new();
    for (name, n) in [
        ("prepare", 1),
        ("install", plan.trials.install),
        ("measure", plan.trials.measure),
        ("runtime", plan.trials.runtime),
    ] {
        for m in plan.metrics_of_phase(name) {
            expected.insert(m.clone(), if m == "disk" { 1 } else { n });
        }
    }
    Report {
        schema_version: report::SCHEMA_VERSION,
        run_id: run_id.to_string(),
        spec_name: plan.name.clone(),
        status: Status::Running,
        base,
        head,
        image: plan.sandbox.image.clone(),
        resources: report::Resources {
            cpus: plan.sandbox.cpus,
            memory_bytes: plan.sandbox.memory_bytes,
            disk_gb: plan.sandbox.disk_gb,
        },
        started_at: report::timestamp(SystemTime::now()),
        finished_at: None,
        failure_limit: plan.trials.failure_limit,
        budget_usd: plan.cost.budget_usd,
        metrics: plan.metrics.clone(),
        expected,
        base_side: Side::default(),
        head_side: Side::default(),
        sandboxes: Vec::new(),
        errors: Vec::new(),
        warnings: Vec::new(),
        comparisons: Vec::new(),
    }
}

/// Writes `report.json`, `report.md` and `report.html` (atomically each).
pub fn write_reports(dir: &Path, report: &mut Report) -> anyhow::Result<()> {
    report.comparisons = report.analyze();
    let write = |name: &str, bytes: &[u8]| -> anyhow::Result<()> {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, dir.join(name)).with_context(|| format!("cannot write {name}"))?;
        Ok(())
    };
    let mut json = serde_json::to_vec_pretty(report)?;
    json.push(b'\n');
    write("report.json", &json)?;
    write("report.md", report::markdown::render(report).as_bytes())?;
    write("report.html", report::html::render(report).as_bytes())?;
    Ok(())
}

/// Re-renders every format from a run directory's `report.json`.
pub fn rerender(dir: &Path) -> anyhow::Result<Report> {
    let path = dir.join("report.json");
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut report: Report =
        serde_json::from_slice(&bytes).with_context(|| format!("{} is not a sandbench report", path.display()))?;
    write_reports(dir, &mut report)?;
    Ok(report)
}
