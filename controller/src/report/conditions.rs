//! The conditions each timed trial ran under, as the agents read them inside the sandboxes
//! (`sandbench_proto::conditions`: `sandboxes/<id>/conditions/<phase>-<trial>.json`), and the
//! trials flagged for them.
//!
//! **Thresholds.** A trial is flagged when, between the readings before and after it,
//! - at least [`STEAL_LIMIT`] (5 %) of the machine's CPU time was stolen by the hypervisor: the
//!   sandbox's CPUs were not all its own, so wall times stretch with no change in the code;
//! - or the sandbox's cgroup was throttled by its CPU quota in at least [`THROTTLED_LIMIT`]
//!   (10 %) of its bandwidth periods, and at least [`MIN_THROTTLED_PERIODS`] of them: the
//!   measured tree wanted more CPU than the sandbox was given.
//!
//! Load averages are kept as figures but flag nothing: they are the machine's, not the
//! sandbox's, and a busy machine shows in steal or throttling when it matters.

use std::path::Path;

use sandbench_proto::Phase;
use sandbench_proto::conditions::{FOLDER, TrialConditions};
use serde::{Deserialize, Serialize};

use super::SandboxRecord;

/// Steal share (of all CPU time) from which a trial is flagged.
pub const STEAL_LIMIT: f64 = 0.05;
/// Share of throttled bandwidth periods from which a trial is flagged.
pub const THROTTLED_LIMIT: f64 = 0.10;
/// Fewer throttled periods than this never flag a trial (a short trial's one period is 100 %).
pub const MIN_THROTTLED_PERIODS: u64 = 3;
/// Condition files read per sandbox, and the largest one.
const MAX_FILES: usize = 2000;
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// One trial's conditions as the report keeps them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    /// The side's label (`base`, `head`, `base1`, …) and its sandbox.
    pub side: String,
    pub sandbox: String,
    /// The sandbox's place in the run (its side), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<sandbench_proto::Placement>,
    pub phase: Phase,
    pub trial: u32,
    /// Share of all CPU time stolen during the trial (0–1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal: Option<f64>,
    /// 1-minute load average before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_before: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_after: Option<f64>,
    /// Bandwidth periods of the sandbox's cgroup during the trial, and the throttled ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub periods: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_periods: Option<u64>,
    /// Seconds the cgroup was held throttled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_s: Option<f64>,
}

impl Condition {
    pub fn from_trial(side: &str, sandbox: &str, t: &TrialConditions) -> Condition {
        let throttled = t.throttled_periods();
        Condition {
            side: side.to_string(),
            sandbox: sandbox.to_string(),
            placement: None,
            phase: t.phase,
            trial: t.trial,
            steal: t.steal(),
            load_before: t.before.load.map(|l| l[0]),
            load_after: t.after.load.map(|l| l[0]),
            periods: throttled.map(|p| p.0),
            throttled_periods: throttled.map(|p| p.1),
            throttled_s: t.throttled_seconds(),
        }
    }

    /// Why this trial is flagged, naming side, phase, trial and the figures; None when it is not.
    pub fn warning(&self) -> Option<String> {
        let mut why = Vec::new();
        if let Some(steal) = self.steal.filter(|s| *s >= STEAL_LIMIT) {
            why.push(format!("{:.1}% of the CPU time was stolen (limit {:.0}%)", steal * 100.0, STEAL_LIMIT * 100.0));
        }
        if let (Some(periods), Some(throttled)) = (self.periods, self.throttled_periods)
            && periods > 0
            && throttled >= MIN_THROTTLED_PERIODS
            && throttled as f64 / periods as f64 >= THROTTLED_LIMIT
        {
            let held = self.throttled_s.map(|s| format!(", held {s:.2} s")).unwrap_or_default();
            why.push(format!(
                "its CPU quota throttled it in {throttled} of {periods} periods{held} (limit {:.0}%)",
                THROTTLED_LIMIT * 100.0
            ));
        }
        if why.is_empty() {
            return None;
        }
        let load = match (self.load_before, self.load_after) {
            (Some(b), Some(a)) => format!("; load {b:.2} → {a:.2}"),
            _ => String::new(),
        };
        Some(format!(
            "{} {} trial {} ran under heavy contention (sandbox {}): {}{load}; its samples may be slower than the code",
            self.side,
            self.phase,
            self.trial,
            self.sandbox,
            why.join(", and ")
        ))
    }
}

/// The conditions every sandbox of the run sent, in order of sandbox, phase and trial.
/// Unreadable or foreign files are skipped: a sandbox's word never fails the report.
pub fn collect(dir: &Path, sandboxes: &[SandboxRecord]) -> Vec<Condition> {
    let mut out = Vec::new();
    for record in sandboxes {
        let folder = dir.join("sandboxes").join(&record.id).join(FOLDER);
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        let mut found: Vec<Condition> = entries
            .flatten()
            .take(MAX_FILES)
            .filter(|e| e.metadata().is_ok_and(|m| m.is_file() && m.len() <= MAX_FILE_BYTES))
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|bytes| serde_json::from_slice::<TrialConditions>(&bytes).ok())
            .map(|t| Condition { placement: record.placement, ..Condition::from_trial(&record.role, &record.id, &t) })
            .collect();
        found.sort_by_key(|c| (c.phase, c.trial));
        out.extend(found);
    }
    out
}

#[cfg(test)]
mod tests {
    use sandbench_proto::conditions::Reading;

    use super::*;

    fn trial(steal: (u64, u64), periods: (u64, u64), throttled_usec: u64) -> TrialConditions {
        TrialConditions {
            phase: Phase::Measure,
            trial: 4,
            before: Reading {
                steal_ticks: Some(0),
                total_ticks: Some(0),
                load: Some([0.5, 0.5, 0.5]),
                nr_periods: Some(0),
                nr_throttled: Some(0),
                throttled_usec: Some(0),
            },
            after: Reading {
                steal_ticks: Some(steal.0),
                total_ticks: Some(steal.1),
                load: Some([3.25, 1.0, 1.0]),
                nr_periods: Some(periods.0),
                nr_throttled: Some(periods.1),
                throttled_usec: Some(throttled_usec),
            },
        }
    }

    #[test]
    fn heavy_steal_or_throttling_flags_a_trial_with_its_figures() {
        let calm = Condition::from_trial("base", "sb-1", &trial((1, 1000), (100, 2), 1000));
        assert_eq!(calm.warning(), None);
        let stolen = Condition::from_trial("head", "sb-2", &trial((120, 1000), (100, 0), 0));
        assert_eq!(
            stolen.warning().unwrap(),
            "head measure trial 4 ran under heavy contention (sandbox sb-2): 12.0% of the CPU time was stolen \
             (limit 5%); load 0.50 → 3.25; its samples may be slower than the code"
        );
        let throttled = Condition::from_trial("base", "sb-1", &trial((0, 1000), (40, 8), 1_250_000));
        let text = throttled.warning().unwrap();
        assert!(text.contains("its CPU quota throttled it in 8 of 40 periods, held 1.25 s (limit 10%)"), "{text}");
        // One throttled period of two is half of them, but too few to mean anything.
        let short = Condition::from_trial("base", "sb-1", &trial((0, 1000), (2, 1), 5000));
        assert_eq!(short.warning(), None);
    }

    #[test]
    fn a_flagged_trial_is_a_warning_of_the_report_and_its_figures_stay_in_the_json() {
        let mut report = super::super::tests::example(super::super::Status::Completed);
        let calm = Condition::from_trial("base", "sb-1", &trial((0, 1000), (10, 0), 0));
        let stolen = Condition::from_trial("head", "sb-2", &trial((120, 1000), (100, 0), 0));
        report.add_conditions(vec![calm, stolen]);
        let md = super::super::markdown::render(&report);
        assert!(md.contains("- head measure trial 4 ran under heavy contention \\(sandbox sb-2\\)"), "{md}");
        assert!(!md.contains("base measure trial 4"), "{md}");
        let html = super::super::html::render(&report);
        assert!(html.contains("head measure trial 4 ran under heavy contention"));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["conditions"][1]["steal"], 0.12);
        assert_eq!(json["conditions"][0]["load_after"], 3.25);
    }

    #[test]
    fn collects_the_files_of_each_sandbox_with_its_side() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("sandboxes/sb-2").join(FOLDER);
        std::fs::create_dir_all(&folder).unwrap();
        let mut second = trial((120, 1000), (10, 0), 0);
        second.trial = 1;
        std::fs::write(folder.join("measure-4.json"), serde_json::to_vec(&trial((0, 1000), (10, 0), 0)).unwrap())
            .unwrap();
        std::fs::write(folder.join("measure-1.json"), serde_json::to_vec(&second).unwrap()).unwrap();
        std::fs::write(folder.join("junk.json"), b"{not json").unwrap();
        let head = sandbench_proto::Placement { side: sandbench_proto::Side::Head, pair: 0, attempt: 0 };
        let record = |id: &str, role: &str| SandboxRecord {
            id: id.into(),
            role: role.into(),
            placement: (role == "head").then_some(head),
            created_at: String::new(),
            removed_at: None,
            seconds: 0.0,
            deleted: true,
            estimated_usd: 0.0,
            peak_memory_bytes: 0,
            cost: None,
        };
        let found = collect(dir.path(), &[record("sb-1", "base"), record("sb-2", "head")]);
        assert_eq!(found.iter().map(|c| (c.side.as_str(), c.trial)).collect::<Vec<_>>(), [("head", 1), ("head", 4)]);
        assert_eq!(found[0].steal, Some(0.12));
        assert!(found.iter().all(|c| c.placement == Some(head)), "each trial knows its sandbox's place");
    }
}
