//! The conditions of a timed trial: what the machine and the sandbox's CPU quota were doing
//! around it. The agent reads them inside the sandbox just before and just after each timed
//! phase and sends them as a file, `conditions/<phase>-<trial>.json` ([`file_path`]); the
//! controller keeps them in the report and flags a trial under heavy steal or throttling. A file
//! rather than new messages: an older controller just stores it.

use serde::{Deserialize, Serialize};

use crate::Phase;

/// One reading. A figure the sandbox could not read is absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// CPU time stolen by the hypervisor, clock ticks summed over the machine's CPUs
    /// (`/proc/stat`, the `steal` column of the `cpu` line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_ticks: Option<u64>,
    /// All CPU time of the same line (user … steal), the steal's denominator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ticks: Option<u64>,
    /// Load averages over 1, 5 and 15 minutes (`/proc/loadavg`; the machine's, not the sandbox's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<[f64; 3]>,
    /// The sandbox cgroup's CPU bandwidth periods so far, and how many of them were throttled
    /// (`cpu.stat`: cgroup v2, or v1's cpu controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nr_periods: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nr_throttled: Option<u64>,
    /// Time the cgroup was held throttled, microseconds (v1's nanoseconds converted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_usec: Option<u64>,
}

/// Readings before and after one timed trial of a phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialConditions {
    pub phase: Phase,
    pub trial: u32,
    pub before: Reading,
    pub after: Reading,
}

/// Where the agent sends a trial's conditions, relative to the sandbox's folder.
pub fn file_path(phase: Phase, trial: u32) -> String {
    format!("{FOLDER}/{phase}-{trial}.json")
}

/// The folder of those files.
pub const FOLDER: &str = "conditions";

impl TrialConditions {
    /// The share of all CPU time stolen during the trial (0–1), when both readings have it.
    pub fn steal(&self) -> Option<f64> {
        let steal = self.after.steal_ticks?.checked_sub(self.before.steal_ticks?)?;
        let total = self.after.total_ticks?.checked_sub(self.before.total_ticks?)?;
        (total > 0).then(|| steal as f64 / total as f64)
    }

    /// Periods and throttled periods of the cgroup during the trial.
    pub fn throttled_periods(&self) -> Option<(u64, u64)> {
        let periods = self.after.nr_periods?.checked_sub(self.before.nr_periods?)?;
        let throttled = self.after.nr_throttled?.checked_sub(self.before.nr_throttled?)?;
        Some((periods, throttled))
    }

    /// Seconds the cgroup was held throttled during the trial.
    pub fn throttled_seconds(&self) -> Option<f64> {
        let usec = self.after.throttled_usec?.checked_sub(self.before.throttled_usec?)?;
        Some(usec as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_need_both_readings_and_never_go_backwards() {
        let before = Reading {
            steal_ticks: Some(10),
            total_ticks: Some(1000),
            nr_periods: Some(5),
            nr_throttled: Some(1),
            throttled_usec: Some(1_000),
            load: Some([1.0, 1.0, 1.0]),
        };
        let after = Reading {
            steal_ticks: Some(30),
            total_ticks: Some(1200),
            nr_periods: Some(25),
            nr_throttled: Some(6),
            throttled_usec: Some(501_000),
            load: None,
        };
        let c = TrialConditions { phase: Phase::Measure, trial: 2, before: before.clone(), after: after.clone() };
        assert_eq!(c.steal(), Some(0.1));
        assert_eq!(c.throttled_periods(), Some((20, 5)));
        assert_eq!(c.throttled_seconds(), Some(0.5));
        let reversed = TrialConditions { phase: Phase::Measure, trial: 2, before: after, after: before };
        assert_eq!((reversed.steal(), reversed.throttled_periods()), (None, None));
        let empty =
            TrialConditions { phase: Phase::Install, trial: 0, before: Reading::default(), after: Reading::default() };
        assert_eq!((empty.steal(), empty.throttled_seconds()), (None, None));
        assert_eq!(file_path(Phase::Runtime, 3), "conditions/runtime-3.json");
        let json = serde_json::to_string(&Reading::default()).unwrap();
        assert_eq!(json, "{}");
    }
}
