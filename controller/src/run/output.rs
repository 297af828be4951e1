//! What a run leaves behind: samples collected from the event log, the report skeleton, the
//! written reports (re-renderable from the directory alone), and an A/A run's noise profile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;

use super::accounting::Accounting;
use crate::observations::server::HelloInfo;
use crate::observations::store::StoredBody;
use crate::report::{self, Report, Revision, Sample, Side, Status};
use crate::spec::Plan;

pub use crate::report::NoiseProfile;

/// Trials a side's samples may have (far beyond any plan's); metrics are bounded by the spec's
/// `[report] max_metrics`.
const MAX_TRIAL: u32 = 100_000;
/// Samples a trial's metric may have (a repeated command runs at most 10,000 times; a
/// distribution records at most `max_samples`, 100,000 by default, one per request).
const MAX_SAMPLE: u32 = 100_000;

/// A sandbox of this attempt as its samples are collected: its id and side, and what it said at
/// Hello when it is a side's first sandbox of a pair (the side's facts are the first one's).
#[derive(Debug, Clone)]
pub struct Measured {
    pub id: String,
    pub side: sandbench_proto::Side,
    pub hello: Option<HelloInfo>,
}

/// Samples per side and metric from the run's event log (read as a stream: only the samples
/// are kept), and each side's facts, for the sandboxes of this attempt (`sandboxes`, in pair
/// order). A resumed run (`resumed`: what its earlier attempts completed) also takes
/// the samples of earlier attempts' sandboxes, only those each slot's first completion counts
/// ([`Accounting::counts`]); this attempt's sandboxes count for the slots they ran. A side
/// takes at most `[report] max_metrics` metrics; the warning says how many more were dropped.
/// A distribution's samples become each trial's percentiles and max
/// ([`report::distributions::reduce_side`]).
pub fn collect(
    dir: &Path,
    sandboxes: &[Measured],
    resumed: Option<&Accounting>,
    plan: &Plan,
) -> anyhow::Result<(BTreeMap<sandbench_proto::Side, Side>, Option<String>)> {
    let max_metrics = plan.max_metrics;
    let mut side_of_id: BTreeMap<String, sandbench_proto::Side> =
        sandboxes.iter().map(|s| (s.id.clone(), s.side)).collect();
    let current: std::collections::BTreeSet<String> = side_of_id.keys().cloned().collect();
    if let Some(accounting) = resumed {
        for id in accounting.sandboxes() {
            if let Some(side) = accounting.roster().side(id) {
                side_of_id.entry(id.clone()).or_insert(side);
            }
        }
    }
    let mut out: BTreeMap<sandbench_proto::Side, Side> =
        BTreeMap::from(sandbench_proto::Side::BOTH.map(|s| (s, Side::default())));
    let log = dir.join(crate::observations::store::OBSERVATIONS_FILE);
    // The sandbox each (side, metric, trial) was last measured in: a slot measured again in a
    // new sandbox (retried after an engine restart) replaces all of its runs, not only those
    // the retry got to.
    let mut measured_in: BTreeMap<(sandbench_proto::Side, String, u32), String> = BTreeMap::new();
    let mut dropped: BTreeMap<sandbench_proto::Side, std::collections::BTreeSet<String>> = BTreeMap::new();
    if log.exists() {
        for event in crate::observations::store::events(&log)? {
            let event = event?;
            let (Some(&which), StoredBody::Observation { command_id, metric, trial, value, error, sample, unit }) =
                (side_of_id.get(&event.sandbox), event.body)
            else {
                continue;
            };
            if let Some(accounting) = resumed
                && !accounting.counts(&event.sandbox, &command_id, current.contains(&event.sandbox))
            {
                continue;
            }
            let side = out.entry(which).or_default();
            // Bounded whatever the log holds: no plan has more trials, and metrics as the spec says.
            if trial > MAX_TRIAL || sample > MAX_SAMPLE {
                continue;
            }
            if !side.metrics.contains_key(&metric) && side.metrics.len() >= max_metrics {
                let names = dropped.entry(which).or_default();
                if names.len() < MAX_DROPPED_COUNTED {
                    names.insert(metric);
                }
                continue;
            }
            if !unit.is_empty() && metric.starts_with(sandbench_proto::plan::BenchStep::PREFIX) {
                side.units.entry(metric.clone()).or_insert(unit);
            }
            let samples = side.metrics.entry(metric.clone()).or_default();
            let slot = measured_in.entry((which, metric, trial)).or_insert_with(|| event.sandbox.clone());
            if *slot != event.sandbox {
                samples.retain(|s| s.trial != trial);
                *slot = event.sandbox.clone();
            }
            // In (trial, sample) order; a sample sent again replaces the earlier one.
            let new = Sample { trial, sample, value, error };
            match samples.binary_search_by_key(&(trial, sample), |s| (s.trial, s.sample)) {
                Ok(at) => samples[at] = new,
                Err(at) => samples.insert(at, new),
            }
        }
    }
    for side in out.values_mut() {
        report::distributions::reduce_side(side, plan);
    }
    record_facts(dir, sandboxes, &mut out);
    Ok((out, dropped_warning(&dropped, max_metrics)))
}

/// Distinct metrics past the bound counted per side (the count says "at least" beyond).
const MAX_DROPPED_COUNTED: usize = 100_000;

/// The warning about metrics dropped past `[report] max_metrics`, if any were.
fn dropped_warning(
    dropped: &BTreeMap<sandbench_proto::Side, std::collections::BTreeSet<String>>,
    max_metrics: usize,
) -> Option<String> {
    if dropped.is_empty() {
        return None;
    }
    let sides: Vec<String> = dropped
        .iter()
        .map(|(side, names)| {
            let at_least = if names.len() >= MAX_DROPPED_COUNTED { "at least " } else { "" };
            format!("{at_least}{} more on the {} side", names.len(), side.as_str())
        })
        .collect();
    Some(format!(
        "the sandboxes sent more metrics than report.max_metrics ({max_metrics}): {} were dropped",
        sides.join(", ")
    ))
}

/// Each side's facts: the machine its first live sandbox reported at Hello, and the tool
/// versions the agent found while preparing.
fn record_facts(dir: &Path, sandboxes: &[Measured], out: &mut BTreeMap<sandbench_proto::Side, Side>) {
    for sandbox in sandboxes {
        if let Some(hello) = &sandbox.hello {
            let f = &hello.facts;
            let facts = &mut out.entry(sandbox.side).or_default().facts;
            if facts.is_empty() {
                *facts = BTreeMap::from([
                    ("kernel".to_string(), f.kernel.clone()),
                    ("cpu".to_string(), f.cpu_model.clone()),
                    ("cpus".to_string(), f.cpus.to_string()),
                    ("memory_bytes".to_string(), f.memory_bytes.to_string()),
                    ("os".to_string(), f.os_release.clone()),
                    ("agent".to_string(), hello.agent_version.clone()),
                ]);
                facts.extend(agent_facts(&dir.join("sandboxes").join(&sandbox.id)));
            }
        }
    }
}

/// Most facts a file of the agent's gives, and the longest value kept, in characters.
const MAX_FACTS: usize = 64;
const MAX_FACT_CHARS: usize = 500;

/// The facts an agent sent: prepare's (tool versions, the machine, the artifacts' format, the
/// optional steps that ran, the versions the spec names), then each install trial's in trial
/// order (the installation format, the dependency inventory), later trials winning.
fn agent_facts(sandbox_dir: &Path) -> BTreeMap<String, String> {
    use sandbench_proto::plan::fact;
    // Read from the sandbox's files: as many facts, as long, as a report shows.
    let read = |path: &Path| {
        let bytes = std::fs::read(path).ok()?;
        let facts = serde_json::from_slice::<BTreeMap<String, String>>(&bytes).ok()?;
        let bounded = |text: String, max: usize| text.chars().take(max).collect::<String>();
        Some(facts.into_iter().take(MAX_FACTS).map(|(k, v)| (bounded(k, 64), bounded(v, MAX_FACT_CHARS))).collect())
    };
    let mut facts: BTreeMap<String, String> = read(&sandbox_dir.join(fact::PREPARE_FILE)).unwrap_or_default();
    let mut trials: Vec<(u32, PathBuf)> = std::fs::read_dir(sandbox_dir.join(fact::INSTALL_DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            Some((name.strip_suffix(".json")?.parse().ok()?, e.path()))
        })
        .collect();
    trials.sort();
    for (_, path) in trials {
        facts.extend(read(&path).unwrap_or_default());
    }
    facts
}

/// Most warnings the agents' isolation reports are taken (each bounded in length).
const MAX_AGENT_WARNINGS: usize = 200;
const MAX_WARNING_CHARS: usize = 500;

/// The warnings the agents sent about isolation between trials (`warnings/*.txt` in each
/// sandbox's folder of the run directory: what they removed from the shared places, what
/// survived), prefixed with the sandbox, in order of sandbox, phase file and line.
pub fn agent_warnings(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(sandboxes) = std::fs::read_dir(dir.join("sandboxes")) else { return out };
    let mut sandboxes: Vec<_> = sandboxes.flatten().map(|e| e.path()).collect();
    sandboxes.sort();
    for sandbox in sandboxes {
        let Ok(files) = std::fs::read_dir(sandbox.join("warnings")) else { continue };
        let mut files: Vec<_> = files.flatten().map(|e| e.path()).collect();
        files.sort();
        let name = sandbox.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        for file in files {
            let Ok(text) = std::fs::read_to_string(&file) else { continue };
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                if out.len() >= MAX_AGENT_WARNINGS {
                    out.push(format!("more isolation warnings in {}", dir.join("sandboxes").display()));
                    return out;
                }
                out.push(format!("{name}: {}", line.chars().take(MAX_WARNING_CHARS).collect::<String>()));
            }
        }
    }
    out
}

pub fn skeleton(plan: &Plan, run_id: &str, base: Revision, head: Revision) -> Report {
    let mut expected = BTreeMap::new();
    for name in sandbench_proto::Phase::ALL {
        let n = plan.trials.of(name);
        for m in plan.metrics_of_phase(name) {
            expected.insert(m.clone(), if m == sandbench_proto::metric::DISK { 1 } else { n });
        }
        // Judged beside them: each script's peak RSS (a distribution's facets take their stem's).
        expected.extend(plan.peak_rss_keys(name).into_iter().map(|k| (k, n)));
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
            disk_enforced: None,
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
        rule: plan.rule,
        order: plan.trials.order,
        attempt: report::ci_attempt(),
        noise: None,
        // Set by the adaptive loop when it looks (`report::Sequential::for_plan`); a run that
        // never looks again is one look at the full alpha.
        sequential: None,
        shards: Vec::new(),
        comparisons: Vec::new(),
        conditions: Vec::new(),
        lens: None,
        bisections: Vec::new(),
        lens_runs: Vec::new(),
        trend: Vec::new(),
        estimates: Default::default(),
        record: false,
    }
}

/// Writes `report.json`, `report.md` and `report.html` (atomically each).
pub fn write_reports(dir: &Path, report: &mut Report) -> anyhow::Result<()> {
    // A record compares nothing.
    report.comparisons = if report.record { Vec::new() } else { report.analyze() };
    let write = |name: &str, bytes: &[u8]| -> anyhow::Result<()> {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, dir.join(name)).with_context(|| format!("cannot write {name}"))?;
        Ok(())
    };
    // Escaped so that `cat report.json` on a terminal obeys nothing a sandbox wrote into it.
    let json = serde_json::to_string_pretty(report)?;
    write("report.json", format!("{}\n", crate::sanitize::json(&json)).as_bytes())?;
    let (markdown, html) = if report.record {
        (report::record::markdown(report), report::record::html(report))
    } else {
        (report::markdown::render(report), report::html::render(report))
    };
    write("report.md", markdown.as_bytes())?;
    write("report.html", html.as_bytes())?;
    Ok(())
}

/// The largest `report.json` re-rendered (one holds the samples, not the log).
const MAX_REPORT_BYTES: u64 = 64 << 20;

/// Re-renders every format from a run directory's `report.json`.
pub fn rerender(dir: &Path) -> anyhow::Result<Report> {
    let path = dir.join("report.json");
    let size = std::fs::metadata(&path).with_context(|| format!("cannot read {}", path.display()))?.len();
    if size > MAX_REPORT_BYTES {
        anyhow::bail!("{} is {size} bytes, more than a sandbench report ({MAX_REPORT_BYTES})", path.display());
    }
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut report: Report =
        serde_json::from_slice(&bytes).with_context(|| format!("{} is not a sandbench report", path.display()))?;
    write_reports(dir, &mut report)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    #[test]
    fn agent_warnings_are_read_per_sandbox_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join("sandboxes/sb-base-1/warnings");
        std::fs::create_dir_all(&w).unwrap();
        std::fs::write(w.join("measure-0.txt"), "measure trial 0: removed \"/tmp/x\" (owner uid 2001)\n\n").unwrap();
        std::fs::write(w.join("install-0.txt"), "install trial 0: removed \"/dev/shm/y\"\n").unwrap();
        std::fs::create_dir_all(dir.path().join("sandboxes/sb-head-1")).unwrap();
        assert_eq!(
            super::agent_warnings(dir.path()),
            [
                "sb-base-1: install trial 0: removed \"/dev/shm/y\"",
                "sb-base-1: measure trial 0: removed \"/tmp/x\" (owner uid 2001)"
            ]
        );
        std::fs::write(w.join("z.txt"), "x\n".repeat(500)).unwrap();
        let many = super::agent_warnings(dir.path());
        assert_eq!(many.len(), super::MAX_AGENT_WARNINGS + 1);
        assert!(many.last().unwrap().starts_with("more isolation warnings"));
        assert!(super::agent_warnings(&dir.path().join("missing")).is_empty());
    }
}
