//! Reconciling the ledger: a run whose controller died is recorded as `abandoned`, charged
//! from its sandboxes' real lifetimes, and its `report.json` says how to continue it. A row
//! with no run mark (a debug session, a bisection, a benchmark, or a run whose directory is
//! gone) is judged by the controller the ledger names as its owner.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;

use super::accounting::{Accounting, Roster};
use super::mark::Mark;
use super::output::write_reports;
use crate::cost::ledger::{Ledger, Unfinished};
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
/// says so. The controller is the run mark's when the run directory has one, else the ledger
/// row's owner; a row that names neither (written before owners were kept) is left alone.
/// Returns what it did, and what it could not do, in words. A ledger that does not exist is
/// left alone.
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
        for row in ledger.unfinished_runs()? {
            let Unfinished { run_id, run_dir, .. } = &row;
            let dir = PathBuf::from(run_dir);
            let mark = match Mark::load(&dir) {
                Ok(Some(mark)) if !mark.alive() => mark,
                Ok(Some(_)) => continue,
                Ok(None) => {
                    if let Some(line) = abandon_unmarked(provisioner, ledger, &row).await? {
                        lines.push(line);
                    }
                    continue;
                }
                Err(err) => {
                    lines.push(format!("run {run_id}: {err:#}"));
                    continue;
                }
            };
            let (records, ended) = lifetimes(provisioner, &dir, run_id, mark.usd_per_hour).await;
            let ended = report::timestamp(ended);
            if !ledger.abandon_run(&row, &ended, &records)? {
                continue; // resumed meanwhile: no longer the dead controller's
            }
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

/// A row with no run mark whose owner is gone, recorded abandoned and charged at the row's rate
/// from its sandboxes' lifetimes; what was done, or None when its owner lives or is unknown.
async fn abandon_unmarked(
    provisioner: &dyn Provisioner,
    ledger: &mut Ledger,
    row: &Unfinished,
) -> anyhow::Result<Option<String>> {
    if crate::provision::docker::owner_alive(&row.owner) != Some(false) {
        return Ok(None);
    }
    let (records, ended) = lifetimes(provisioner, Path::new(&row.run_dir), &row.run_id, row.usd_per_hour).await;
    if !ledger.abandon_run(row, &report::timestamp(ended), &records)? {
        return Ok(None); // resumed meanwhile: no longer the dead controller's
    }
    let usd: f64 = records.iter().map(|r| r.estimated_usd).sum();
    let pid = row.owner.rsplit('/').nth(1).unwrap_or("?");
    Ok(Some(format!(
        "{}: its controller (pid {pid}) is gone; recorded as abandoned, {} sandbox(es), ${usd:.4} charged",
        row.run_id,
        records.len()
    )))
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cost::ledger::RunStart;
    use crate::provision::fake::{FakeProvisioner, Script};
    use crate::provision::{AgentShipping, Resources, SandboxRequest};

    fn start(id: &str, owner: &str, dir: &Path) -> RunStart {
        RunStart {
            run_id: id.into(),
            spec: "demo".into(),
            repository: String::new(),
            base_rev: "main".into(),
            base_commit: "a".repeat(40),
            head_rev: "main".into(),
            head_commit: "a".repeat(40),
            started_at: "2026-12-05T10:00:00Z".into(),
            run_dir: dir.join(id).display().to_string(),
            owner: owner.into(),
            usd_per_hour: 3600.0,
        }
    }

    fn request(run: &str, dir: &Path) -> SandboxRequest {
        SandboxRequest {
            run_id: run.into(),
            role: "debug".into(),
            image: "node:24-bookworm".into(),
            resources: Resources::default(),
            network: false,
            ttl: Duration::from_secs(900),
            shipping: AgentShipping::Bind,
            agent_binary: "sandbox-agent".into(),
            socket_dir: dir.to_path_buf(),
            token: String::new(),
            labels: Default::default(),
            placement: None,
        }
    }

    #[tokio::test]
    async fn a_row_with_no_run_mark_is_abandoned_once_the_controller_it_names_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ledger.sqlite");
        // This process, and one that had its pid but started at another tick: gone.
        let me = crate::provision::docker::owner_id();
        let (host_pid, ticks) = me.rsplit_once('/').unwrap();
        let gone = format!("{host_pid}/{}", ticks.parse::<u64>().unwrap() + 1);
        let ledger = Ledger::open(&path).unwrap();
        for (id, owner) in [("debug-gone", gone.as_str()), ("debug-live", me.as_str()), ("before-owners", "")] {
            ledger.begin_run(&start(id, owner, tmp.path())).unwrap();
        }
        let fake = FakeProvisioner::new(Script::default());
        fake.create(&request("debug-gone", tmp.path())).await.unwrap();
        let lines = reconcile(&fake, &path).await;
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("debug-gone: its controller (pid"), "{lines:?}");
        assert!(lines[0].contains("abandoned, 1 sandbox(es)") && !lines[0].contains("--resume"), "{lines:?}");
        let row = |id: &str| ledger.run(id).unwrap().unwrap().0;
        let gone_row = row("debug-gone");
        assert_eq!((gone_row.status.as_str(), gone_row.sandboxes), ("abandoned", 1));
        // Charged at the row's rate ($1 a second here) for the sandbox's life so far.
        assert!((gone_row.allocation_usd - gone_row.seconds).abs() < 1e-9, "{gone_row:?}");
        assert!(gone_row.finished_at.is_some() && gone_row.seconds > 0.0);
        // A live controller's row, and one that names no controller, are left running.
        assert!(row("debug-live").finished_at.is_none() && row("before-owners").finished_at.is_none());
        assert!(reconcile(&fake, &path).await.is_empty(), "reconciled once");
    }
}
