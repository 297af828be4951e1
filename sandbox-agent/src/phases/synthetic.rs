//! `synthetic`: streams a given number of observations, optionally paced. It exercises the
//! delivery path (journal, replay, acks) at full speed, for the backbone's tests and benchmark.
//! Observation `i` has trial `i` and value `i`, so a receiver can check order and completeness.

use std::time::{Duration, Instant};

use anyhow::Context;
use sandbench_proto::Phase;
use sandbench_proto::v1::{Observation, event, observation};
use serde::Deserialize;

use crate::context::PhaseContext;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    observations: u64,
    #[serde(default = "default_metric")]
    metric: String,
    /// Observations per second; none means as fast as the journal takes them.
    #[serde(default)]
    rate_per_s: Option<f64>,
}

/// The observations' metric unless the plan names one: the phase's name.
fn default_metric() -> String {
    Phase::Synthetic.to_string()
}

pub fn run(ctx: &PhaseContext) -> anyhow::Result<()> {
    let plan: Plan = serde_json::from_slice(&ctx.plan).context("invalid plan for phase synthetic")?;
    if plan.observations > u64::from(u32::MAX) {
        anyhow::bail!("invalid plan for phase synthetic: observations must be at most {}", u32::MAX);
    }
    let interval = match plan.rate_per_s {
        Some(rate) if rate.is_finite() && rate > 0.0 => Some(Duration::from_secs_f64(1.0 / rate)),
        Some(rate) => anyhow::bail!("invalid plan for phase synthetic: rate_per_s must be positive, got {rate}"),
        None => None,
    };
    let start = Instant::now();
    for i in ctx.resume_observations..plan.observations {
        if ctx.canceled() {
            return Ok(());
        }
        if let Some(interval) = interval {
            let due = interval.mul_f64((i - ctx.resume_observations) as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let observation = Observation {
            command_id: ctx.command_id.clone(),
            metric: plan.metric.clone(),
            trial: i as u32,
            outcome: Some(observation::Outcome::Value(i as f64)),
            unit: "count".to_string(),
            sample: 0,
        };
        if !ctx.emit(event::Body::Observation(observation)) {
            anyhow::bail!("the agent is shutting down");
        }
    }
    Ok(())
}
