//! The end of a side's sandboxes: each torn down through the station, its lifetime and cost
//! recorded, and what went wrong on the way kept as warnings.

use std::time::SystemTime;

use super::super::usage::Meter;
use super::side::SideRun;
use super::state::Run;
use crate::report::{self, SandboxRecord};

/// Ends every sandbox: its record (lifetime, cost) and what went wrong on the way.
pub async fn teardown(run: &Run, sides: &[SideRun]) -> (Vec<SandboxRecord>, Vec<String>) {
    let mut records = Vec::new();
    let mut warnings = Vec::new();
    for side in sides {
        records.extend(side.ended_records());
        let Some((live, meter)) = side.current_with_meter() else { continue };
        let (record, problems) = end_sandbox(run, &side.label, &live.sandbox, &meter).await;
        records.push(record);
        warnings.extend(problems);
    }
    (records, warnings)
}

/// Ends one sandbox of the side `label`, metered by `meter`: its record and what went wrong.
pub async fn end_sandbox(
    run: &Run,
    label: &str,
    sandbox: &crate::provision::Sandbox,
    meter: &Meter,
) -> (SandboxRecord, Vec<String>) {
    let plan = &run.plan;
    let mut warnings = Vec::new();
    run.display.status(label, "teardown");
    meter.mark(crate::cost::stretch::TEARDOWN);
    let down = run.station.teardown(sandbox).await;
    meter.stop_sampling();
    let seconds = down.lifetime.as_secs_f64();
    if let Some(err) = &down.removal_error {
        warnings.push(format!("{label}: sandbox cleanup failed: {err}"));
    }
    let cost = crate::cost::sandbox_cost(
        &plan.cost,
        plan.allocation(),
        meter.phases(),
        down.removal_error.is_some(),
        plan.sandbox.ttl.as_secs_f64(),
    );
    if down.log_path.is_none() {
        warnings.push(format!("{label}: cannot collect the agent log"));
    }
    run.display.done(label, if down.removal_error.is_none() { "removed" } else { "removal failed" });
    let record = SandboxRecord {
        id: sandbox.id.clone(),
        role: sandbox.role.clone(),
        created_at: report::timestamp(sandbox.requested_at),
        removed_at: down.removal_error.is_none().then(|| report::timestamp(SystemTime::now())),
        seconds: cost.charged_seconds.max(seconds),
        deleted: down.removal_error.is_none(),
        estimated_usd: cost.allocation_usd,
        peak_memory_bytes: meter.peak_memory_bytes(),
        cost: Some(cost),
    };
    (record, warnings)
}
