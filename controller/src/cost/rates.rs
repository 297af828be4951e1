//! Rates, pure: what sandboxes cost at a rate card, from their lifetimes and their measured use.
//!
//! Three figures, because providers bill differently:
//! - allocation: requested resources × lifetime (what E2B/Daytona-style sandbox providers bill);
//! - max(request, usage): per phase, the larger of the request and the measured use (what
//!   OpenCost-style accounting charges);
//! - usage only: measured CPU-seconds and memory GiB-seconds (disk at its request, whose use is
//!   not measured).
//!
//! Lifetimes run from the create request to confirmed removal, to the second (no rounding to
//! minutes). A sandbox whose removal failed is charged until its expiry.

use serde::{Deserialize, Serialize};

/// Dollars per resource-hour, and the run's budget. The spec's `[cost]` section builds it (the
/// reference's defaults: $0.05 per vCPU-hour, $0.01 per GiB-hour of memory, $0.001 per GiB-hour
/// of disk); the command line may override it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateCard {
    pub cpu_usd_per_hour: f64,
    pub memory_usd_per_gb_hour: f64,
    pub disk_usd_per_gb_hour: f64,
    pub budget_usd: Option<f64>,
}

/// Names of the stretches of a sandbox's life that are not agent phases (those are named by
/// [`sandbench_proto::Phase`]).
pub mod stretch {
    /// From the create request until the first phase.
    pub const PROVISION: &str = "provision";
    /// From the end of the work until removal was confirmed.
    pub const TEARDOWN: &str = "teardown";
    /// Charged when removal failed: until the sandbox's expiry.
    pub const UNTIL_EXPIRY: &str = "until expiry";
}

/// What a sandbox was given. Memory and disk in GiB, as the spec states them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    pub cpus: f64,
    pub memory_gib: f64,
    pub disk_gib: f64,
}

/// Dollars per hour of an allocation.
pub fn hourly(rates: &RateCard, a: Allocation) -> f64 {
    a.cpus * rates.cpu_usd_per_hour
        + a.memory_gib * rates.memory_usd_per_gb_hour
        + a.disk_gib * rates.disk_usd_per_gb_hour
}

/// One stretch of a sandbox's life and what it used in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseUsage {
    pub phase: String,
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub memory_gib_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseCost {
    #[serde(flatten)]
    pub usage: PhaseUsage,
    pub allocation_usd: f64,
    pub max_usd: f64,
    pub usage_usd: f64,
}

pub fn phase_cost(rates: &RateCard, a: Allocation, usage: PhaseUsage) -> PhaseCost {
    let hours = usage.seconds / 3600.0;
    let allocation_usd = hours * hourly(rates, a);
    let disk_usd = hours * a.disk_gib * rates.disk_usd_per_gb_hour;
    let usage_usd = usage.cpu_seconds / 3600.0 * rates.cpu_usd_per_hour
        + usage.memory_gib_seconds / 3600.0 * rates.memory_usd_per_gb_hour
        + disk_usd;
    let (cpus_used, memory_used) = if usage.seconds > 0.0 {
        (usage.cpu_seconds / usage.seconds, usage.memory_gib_seconds / usage.seconds)
    } else {
        (0.0, 0.0)
    };
    let max_usd = hours
        * (a.cpus.max(cpus_used) * rates.cpu_usd_per_hour
            + a.memory_gib.max(memory_used) * rates.memory_usd_per_gb_hour)
        + disk_usd;
    PhaseCost { usage, allocation_usd, max_usd, usage_usd }
}

/// A sandbox's cost, phase by phase, with the three totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxCost {
    pub phases: Vec<PhaseCost>,
    pub allocation_usd: f64,
    pub max_usd: f64,
    pub usage_usd: f64,
    /// Seconds charged: the lifetime, or until expiry when removal failed.
    pub charged_seconds: f64,
}

/// A sandbox's life as the report and the ledger record it: when it lived and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    pub role: String,
    /// Its place in a compared run (side, pair, attempt), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<sandbench_proto::Placement>,
    pub created_at: String,
    pub removed_at: Option<String>,
    pub seconds: f64,
    pub deleted: bool,
    /// The allocation cost (what the cost line shows).
    pub estimated_usd: f64,
    #[serde(default)]
    pub peak_memory_bytes: u64,
    /// Phase by phase, with the three figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<SandboxCost>,
}

/// `phases` cover the lifetime; when removal failed, the time from the end of the last phase to
/// the sandbox's expiry (`ttl_seconds` after the create request) is charged as `until expiry`.
pub fn sandbox_cost(
    rates: &RateCard,
    a: Allocation,
    mut phases: Vec<PhaseUsage>,
    removal_failed: bool,
    ttl_seconds: f64,
) -> SandboxCost {
    let lived: f64 = phases.iter().map(|p| p.seconds).sum();
    if removal_failed && ttl_seconds > lived {
        phases.push(PhaseUsage {
            phase: stretch::UNTIL_EXPIRY.into(),
            seconds: ttl_seconds - lived,
            cpu_seconds: 0.0,
            memory_gib_seconds: 0.0,
        });
    }
    let phases: Vec<PhaseCost> = phases.into_iter().map(|p| phase_cost(rates, a, p)).collect();
    SandboxCost {
        allocation_usd: phases.iter().map(|p| p.allocation_usd).sum(),
        max_usd: phases.iter().map(|p| p.max_usd).sum(),
        usage_usd: phases.iter().map(|p| p.usage_usd).sum(),
        charged_seconds: phases.iter().map(|p| p.usage.seconds).sum(),
        phases,
    }
}

/// Splits a sandbox's samples of cumulative CPU time and memory in use among its phases.
/// `marks` are (seconds since the create request, phase) in order; the last phase lasts to `end`.
/// A sample interval counts toward the phase in force at its start.
pub fn attribute(marks: &[(f64, String)], samples: &[(f64, u64, u64)], end: f64) -> Vec<PhaseUsage> {
    let mut phases: Vec<PhaseUsage> = marks
        .iter()
        .enumerate()
        .map(|(i, (start, phase))| {
            let stop = marks.get(i + 1).map_or(end, |m| m.0);
            PhaseUsage {
                phase: phase.clone(),
                seconds: (stop - start).max(0.0),
                cpu_seconds: 0.0,
                memory_gib_seconds: 0.0,
            }
        })
        .collect();
    for pair in samples.windows(2) {
        let ((t0, cpu0, mem0), (t1, cpu1, _)) = (pair[0], pair[1]);
        let Some(i) = marks.iter().rposition(|(start, _)| *start <= t0) else { continue };
        phases[i].cpu_seconds += cpu1.saturating_sub(cpu0) as f64 / 1e9;
        phases[i].memory_gib_seconds += mem0 as f64 / (1u64 << 30) as f64 * (t1 - t0).max(0.0);
    }
    phases
}

#[cfg(test)]
mod tests {
    use sandbench_proto::Phase;

    use super::*;

    const RATES: RateCard = RateCard {
        cpu_usd_per_hour: 0.05,
        memory_usd_per_gb_hour: 0.01,
        disk_usd_per_gb_hour: 0.001,
        budget_usd: None,
    };
    const REFERENCE: Allocation = Allocation { cpus: 4.0, memory_gib: 8.0, disk_gib: 20.0 };

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn the_reference_rate_is_thirty_cents_an_hour() {
        // 4 × 0.05 + 8 × 0.01 + 20 × 0.001 = 0.30
        assert!(close(hourly(&RATES, REFERENCE), 0.30));
    }

    #[test]
    fn three_figures_of_one_phase() {
        // 600 s of a 4-CPU, 8 GiB, 20 GiB sandbox that used 300 CPU-seconds and 2 GiB throughout.
        let cost = phase_cost(
            &RATES,
            REFERENCE,
            PhaseUsage {
                phase: Phase::Measure.to_string(),
                seconds: 600.0,
                cpu_seconds: 300.0,
                memory_gib_seconds: 1200.0,
            },
        );
        assert!(close(cost.allocation_usd, 0.05)); // 600/3600 × 0.30
        // usage: 300/3600 × 0.05 + 1200/3600 × 0.01 + 600/3600 × 20 × 0.001
        assert!(close(
            cost.usage_usd,
            0.004_166_666_666_666_667 + 0.003_333_333_333_333_333 + 0.003_333_333_333_333_333
        ));
        // max(request, usage) is the request here: 0.5 CPU and 2 GiB average are below it.
        assert!(close(cost.max_usd, cost.allocation_usd));
        // Above the request, the usage counts: 6 CPUs on average for an hour of a 4-CPU sandbox.
        let busy = phase_cost(
            &RATES,
            REFERENCE,
            PhaseUsage { phase: "p".into(), seconds: 3600.0, cpu_seconds: 6.0 * 3600.0, memory_gib_seconds: 0.0 },
        );
        assert!(close(busy.max_usd, 6.0 * 0.05 + 8.0 * 0.01 + 20.0 * 0.001));
    }

    #[test]
    fn a_failed_removal_is_charged_until_expiry() {
        let phases = vec![PhaseUsage {
            phase: Phase::Install.to_string(),
            seconds: 120.0,
            cpu_seconds: 0.0,
            memory_gib_seconds: 0.0,
        }];
        let removed = sandbox_cost(&RATES, REFERENCE, phases.clone(), false, 1800.0);
        assert!(close(removed.allocation_usd, 0.01)); // 120 s at $0.30/h
        let stuck = sandbox_cost(&RATES, REFERENCE, phases, true, 1800.0);
        assert_eq!(stuck.charged_seconds, 1800.0);
        assert!(close(stuck.allocation_usd, 0.15)); // 30 min at $0.30/h, as the reference says
        assert_eq!(stuck.phases[1].usage.phase, stretch::UNTIL_EXPIRY);
    }

    #[test]
    fn samples_are_attributed_to_the_phase_in_force() {
        let marks = vec![
            (0.0, stretch::PROVISION.to_string()),
            (1.0, Phase::Prepare.to_string()),
            (3.0, Phase::Install.to_string()),
        ];
        let gib = 1u64 << 30;
        // (t, cumulative CPU ns, memory bytes)
        let samples =
            [(1.5, 0, gib), (2.5, 500_000_000, 2 * gib), (3.5, 1_500_000_000, gib), (4.0, 1_600_000_000, gib)];
        let phases = attribute(&marks, &samples, 5.0);
        assert_eq!(phases.iter().map(|p| p.seconds).collect::<Vec<_>>(), [1.0, 2.0, 2.0]);
        assert_eq!(phases[0].cpu_seconds, 0.0);
        assert!(close(phases[1].cpu_seconds, 1.5)); // 0.5 + 1.0
        assert!(close(phases[1].memory_gib_seconds, 1.0 + 2.0)); // 1 GiB × 1 s + 2 GiB × 1 s
        assert!(close(phases[2].cpu_seconds, 0.1));
        assert!(close(phases[2].memory_gib_seconds, 0.5));
    }
}
