//! Reconciling the ledger: a run whose controller died is recorded as `abandoned`, charged
//! from its sandboxes' real lifetimes, and its `report.json` says how to continue it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;

use super::accounting::{Accounting, Roster};
use super::mark::Mark;
use super::output::write_reports;
use crate::cost::ledger::Ledger;
use crate::provision::{Provisioner, labels};
use crate::report::{self, Report, SandboxRecord, Status};

pub(super) fn read_report(dir: &Path) -> anyhow::Result<Report> {
    let path = dir.join("report.json");
    let bytes = std::fs::read(&path)
        .with_context(|| format!("cannot resume {}: cannot read {}", dir.display(), path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not a sandbench report", path.display()))
}

/// Finds the runs of the ledger that never recorded their end and whose controller is gone, and
/// records each as abandoned, charged from its sandboxes' real lifetimes; their `report.json`
/// says so. Returns what it did, and what it could not do, in words. A ledger that does not
/// exist is left alone.
pub async fn reconcile(provisioner: &dyn Provisioner, ledger: &Path) -> Vec<String> {
    if !ledger.exists() {
        return Vec::new();
    }
    match Ledger::open(ledger) {
        Ok(mut ledger) => reconcile_in(provisioner, &mut ledger).await,
        Err(err) => vec![format!("cannot reconcile the ledger {}: {err:#}", ledger.display())],
    }
}

/// [`reconcile`] on a ledger already open (a run's own, through its entry).
pub async fn reconcile_in(provisioner: &dyn Provisioner, ledger: &mut Ledger) -> Vec<String> {
    let mut lines = Vec::new();
    let result = async {
        for (run_id, run_dir) in ledger.unfinished_runs()? {
            let dir = PathBuf::from(&run_dir);
            let mark = match Mark::load(&dir) {
                Ok(Some(mark)) if !mark.alive() => mark,
                Ok(_) => continue,
                Err(err) => {
                    lines.push(format!("run {run_id}: {err:#}"));
                    continue;
                }
            };
            let (records, ended) = lifetimes(provisioner, &dir, &run_id, mark.usd_per_hour).await;
            let ended = report::timestamp(ended);
            ledger.finish_run(&run_id, Status::Abandoned.as_str(), &ended, &records)?;
            let usd: f64 = records.iter().map(|r| r.estimated_usd).sum();
            if let Err(err) = abandon_report(&dir, &mark, &ended, records) {
                lines.push(format!("run {run_id}: {err:#}"));
            }
            lines.push(format!(
                "run {run_id}: its controller (pid {}) is gone; recorded as abandoned, ${usd:.4} charged \
                 (continue it with: sandbench run --resume {run_dir})",
                mark.pid
            ));
        }
        anyhow::Ok(())
    }
    .await;
    if let Err(err) = result {
        lines.push(format!("cannot reconcile the ledger {}: {err:#}", ledger.path().display()));
    }
    lines
}

/// Every sandbox of a dead run with its lifetime: from the engine while its container exists
/// (created, and `State.FinishedAt`, or now while it still runs), else from the run directory
/// (its first and last events). Also when the run was last active.
pub(super) async fn lifetimes(
    provisioner: &dyn Provisioner,
    dir: &Path,
    run_id: &str,
    usd_per_hour: f64,
) -> (Vec<SandboxRecord>, SystemTime) {
    let accounting = Accounting::read(dir, run_id).unwrap_or_default();
    // Who the sandboxes were, even when the log cannot be read.
    let roster = Roster::read(dir, run_id).unwrap_or_else(|_| Roster::unregistered(run_id));
    let containers = provisioner.list(Some((labels::RUN, run_id))).await.unwrap_or_default();
    let ids: BTreeSet<&String> = accounting.sandboxes().chain(containers.iter().map(|c| &c.name)).collect();
    let ms = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let mut last = None::<SystemTime>;
    let mut records = Vec::new();
    for id in ids {
        let (start, end) = match containers.iter().find(|c| &c.name == id) {
            Some(c) => {
                let created = UNIX_EPOCH + Duration::from_secs(u64::try_from(c.created).unwrap_or(0));
                (created, provisioner.finished_at(&c.name).await.unwrap_or_else(SystemTime::now))
            }
            None => match accounting.seen(id) {
                Some((first, latest)) => (ms(first), ms(latest)),
                None => continue,
            },
        };
        let seconds = end.duration_since(start).unwrap_or_default().as_secs_f64();
        last = Some(last.map_or(end, |l| l.max(end)));
        records.push(SandboxRecord {
            id: id.clone(),
            role: roster.role(id).unwrap_or_default().to_string(),
            placement: None,
            created_at: report::timestamp(start),
            removed_at: None,
            seconds,
            deleted: !containers.iter().any(|c| &c.name == id),
            estimated_usd: seconds / 3600.0 * usd_per_hour,
            peak_memory_bytes: 0,
            cost: None,
        });
    }
    (records, last.unwrap_or_else(SystemTime::now))
}

/// Says in the run's `report.json` (and the other formats) that it was abandoned.
fn abandon_report(dir: &Path, mark: &Mark, ended: &str, records: Vec<SandboxRecord>) -> anyhow::Result<()> {
    let mut report = read_report(dir)?;
    report.status = Status::Abandoned;
    report.finished_at = Some(ended.to_string());
    report.sandboxes = records;
    report.errors.push(format!(
        "The run's controller (pid {}) died before the run ended; continue it with: sandbench run --resume {}",
        mark.pid,
        dir.display()
    ));
    write_reports(dir, &mut report)
}
