//! The end of a side's sandboxes: each torn down through the station, its lifetime and cost
//! recorded, and what went wrong on the way kept as warnings.

use super::super::usage::Meter;
use super::side::SideRun;
use super::state::Run;
use crate::report::SandboxRecord;
use crate::station::session::Session;

/// Ends every sandbox: its record (lifetime, cost) and what went wrong on the way.
pub async fn teardown(run: &Run, sides: &[SideRun]) -> (Vec<SandboxRecord>, Vec<String>) {
    let mut records = Vec::new();
    let mut warnings = Vec::new();
    for side in sides {
        records.extend(side.ended_records());
        let Some((live, meter)) = side.current_with_meter() else { continue };
        let (record, problems) = end_sandbox(run, &side.label, &live, &meter).await;
        records.push(record);
        warnings.extend(problems);
    }
    (records, warnings)
}

/// Ends one sandbox of the side `label`, metered by `meter`: its record and what went wrong.
pub async fn end_sandbox(run: &Run, label: &str, session: &Session, meter: &Meter) -> (SandboxRecord, Vec<String>) {
    let mut warnings = Vec::new();
    run.display.status(label, "teardown");
    meter.mark(crate::cost::stretch::TEARDOWN);
    let down = session.remove().await;
    meter.stop_sampling();
    if let Some(err) = &down.removal_error {
        warnings.push(format!("{label}: sandbox cleanup failed: {err}"));
    }
    if down.log_path.is_none() {
        warnings.push(format!("{label}: cannot collect the agent log"));
    }
    run.display.done(label, if down.removal_error.is_none() { "removed" } else { "removal failed" });
    let record = session.record(&down, meter.phases(), meter.peak_memory_bytes());
    (record, warnings)
}
