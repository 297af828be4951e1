//! The metric history in the ledger: every recorded commit's trial values, by spec, commit
//! (with its time and subject), image and machine. Two tables of their own beside the cost's
//! (`cost::ledger`), made by [`migrate`] when a ledger lacks them, so a ledger from before
//! gains them and keeps everything it held; an older sandbench reading a newer ledger ignores
//! them.
//!
//! - `history_records`: one row per measurement of one commit — a side of a compare run
//!   (`base`, `head`) or a record — with where it ran: the image, the machine
//!   ([`crate::cost::ledger::this_machine`]) and the setting (the sandbox's CPUs and memory, and
//!   how the trials were taken), which wall time depends on.
//! - `history_values`: one row per metric and trial: the trial's value (the median of its runs),
//!   its lens, and for timed trials the conditions they ran under (CPU steal, the share of
//!   throttled periods) and whether those flag the trial.
//!
//! A record is kept whole or not at all (one transaction), and keeping it again (a resumed
//! run's end) replaces it.

use anyhow::Context;
use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use crate::cost::ledger::Ledger;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS history_records (
    record_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    origin TEXT NOT NULL,
    spec TEXT NOT NULL,
    repository TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    committed_at TEXT NOT NULL,
    subject TEXT NOT NULL,
    image TEXT NOT NULL,
    machine TEXT NOT NULL,
    setting TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS history_records_by_spec ON history_records(spec, commit_sha);
CREATE TABLE IF NOT EXISTS history_values (
    record_id TEXT NOT NULL REFERENCES history_records(record_id),
    metric TEXT NOT NULL,
    lens TEXT NOT NULL,
    trial INTEGER NOT NULL,
    value REAL NOT NULL,
    steal REAL,
    throttled REAL,
    flagged INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (record_id, metric, trial)
);
";

/// Makes the history's tables in a ledger that lacks them (any ledger sandbench wrote before
/// the history existed); nothing else of the ledger changes.
pub fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(SCHEMA)
}

/// A commit as the history shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    pub commit: String,
    /// Its committer time (RFC 3339), empty when unknown (a git URL source).
    pub committed_at: String,
    /// Its subject line (the product's text: escape it where it goes).
    pub subject: String,
}

/// One trial's value of one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialValue {
    pub metric: String,
    /// The lens it was seen through (`crate::report::lens::Lens::name`).
    pub lens: String,
    pub trial: u32,
    pub value: f64,
    /// The share of the machine's CPU time stolen during the trial, when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal: Option<f64>,
    /// The share of the sandbox's CPU periods throttled during the trial, when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled: Option<f64>,
    /// The conditions flag the trial (`crate::report::conditions`): its wall time is not the code's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flagged: bool,
}

/// One commit measured once: a side of a compare run, or a record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `<run id>/<origin>`.
    pub record_id: String,
    pub run_id: String,
    /// `base` or `head` of a compare run, or `record`.
    pub origin: String,
    pub spec: String,
    pub repository: String,
    pub commit: CommitInfo,
    pub image: String,
    /// Where it ran: wall time compares only within one machine and setting.
    pub machine: String,
    pub setting: String,
    pub recorded_at: String,
    pub values: Vec<TrialValue>,
}

/// The history's tables of one ledger.
pub struct Records<'a> {
    conn: &'a Connection,
}

impl<'a> Records<'a> {
    /// The history of `ledger`, its tables made when missing.
    pub fn on(ledger: &'a Ledger) -> anyhow::Result<Records<'a>> {
        let conn = ledger.connection();
        migrate(conn)
            .with_context(|| format!("cannot set up the history in the ledger {}", ledger.path().display()))?;
        Ok(Records { conn })
    }

    /// Keeps `record` whole (replacing an earlier keeping of the same record id).
    pub fn keep(&self, record: &Record) -> anyhow::Result<()> {
        let tx = self.conn.unchecked_transaction()?;
        tx.execute("DELETE FROM history_values WHERE record_id = ?1", params![record.record_id])?;
        tx.execute(
            "INSERT OR REPLACE INTO history_records
             (record_id, run_id, origin, spec, repository, commit_sha, committed_at, subject, image, machine, setting, recorded_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                record.record_id,
                record.run_id,
                record.origin,
                record.spec,
                record.repository,
                record.commit.commit,
                record.commit.committed_at,
                record.commit.subject,
                record.image,
                record.machine,
                record.setting,
                record.recorded_at
            ],
        )?;
        {
            let mut insert = tx.prepare(
                "INSERT OR REPLACE INTO history_values (record_id, metric, lens, trial, value, steal, throttled, flagged)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for v in &record.values {
                insert.execute(params![
                    record.record_id,
                    v.metric,
                    v.lens,
                    v.trial,
                    v.value,
                    v.steal,
                    v.throttled,
                    v.flagged
                ])?;
            }
        }
        tx.commit().context("cannot keep the record in the ledger's history")
    }

    /// Every record of `spec`, oldest kept first, each with its values.
    pub fn of_spec(&self, spec: &str) -> anyhow::Result<Vec<Record>> {
        let mut stmt = self.conn.prepare(
            "SELECT record_id, run_id, origin, spec, repository, commit_sha, committed_at, subject, image, machine, setting, recorded_at
             FROM history_records WHERE spec = ?1 ORDER BY recorded_at, record_id",
        )?;
        let mut records: Vec<Record> = stmt
            .query_map(params![spec], |r| {
                Ok(Record {
                    record_id: r.get(0)?,
                    run_id: r.get(1)?,
                    origin: r.get(2)?,
                    spec: r.get(3)?,
                    repository: r.get(4)?,
                    commit: CommitInfo { commit: r.get(5)?, committed_at: r.get(6)?, subject: r.get(7)? },
                    image: r.get(8)?,
                    machine: r.get(9)?,
                    setting: r.get(10)?,
                    recorded_at: r.get(11)?,
                    values: Vec::new(),
                })
            })?
            .collect::<Result<_, _>>()
            .context("cannot read the ledger's history")?;
        let mut values = self.conn.prepare(
            "SELECT metric, lens, trial, value, steal, throttled, flagged FROM history_values
             WHERE record_id = ?1 ORDER BY metric, trial",
        )?;
        for record in &mut records {
            record.values = values
                .query_map(params![record.record_id], |r| {
                    Ok(TrialValue {
                        metric: r.get(0)?,
                        lens: r.get(1)?,
                        trial: r.get(2)?,
                        value: r.get(3)?,
                        steal: r.get(4)?,
                        throttled: r.get(5)?,
                        flagged: r.get(6)?,
                    })
                })?
                .collect::<Result<_, _>>()
                .context("cannot read the ledger's history")?;
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn record(run: &str, origin: &str, commit: &str, values: &[(&str, &str, f64)]) -> Record {
        Record {
            record_id: format!("{run}/{origin}"),
            run_id: run.into(),
            origin: origin.into(),
            spec: "demo".into(),
            repository: "/srv/repo".into(),
            commit: CommitInfo {
                commit: commit.repeat(40 / commit.len().max(1)),
                committed_at: "2026-12-01T10:00:00Z".into(),
                subject: format!("commit {commit}"),
            },
            image: "node:24-bookworm".into(),
            machine: "m1/2 cpus/Xeon".into(),
            setting: "1 CPU, 2 GiB, duet".into(),
            recorded_at: format!("2026-12-02T10:00:0{}Z", run.len() % 10),
            values: values
                .iter()
                .enumerate()
                .map(|(t, (metric, lens, value))| TrialValue {
                    metric: metric.to_string(),
                    lens: lens.to_string(),
                    trial: t as u32,
                    value: *value,
                    steal: (*lens == "wall").then_some(0.01),
                    throttled: None,
                    flagged: false,
                })
                .collect(),
        }
    }

    #[test]
    fn a_ledger_from_before_the_history_gains_its_tables_and_keeps_its_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        {
            // A ledger as sandbench wrote it before the history: a run and a noise profile.
            let ledger = Ledger::open(&path).unwrap();
            ledger
                .begin_run(&crate::cost::ledger::RunStart {
                    run_id: "old".into(),
                    spec: "demo".into(),
                    repository: "/repo".into(),
                    base_rev: "main".into(),
                    base_commit: "a".repeat(40),
                    head_rev: "pr".into(),
                    head_commit: "b".repeat(40),
                    started_at: "2026-11-01T10:00:00Z".into(),
                    run_dir: "/runs/old".into(),
                    owner: String::new(),
                    usd_per_hour: 0.0,
                })
                .unwrap();
            let tables: i64 = ledger
                .connection()
                .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'history_%'", [], |r| r.get(0))
                .unwrap();
            assert_eq!(tables, 0, "opening the ledger alone adds nothing");
        }
        let ledger = Ledger::open(&path).unwrap();
        let records = Records::on(&ledger).unwrap();
        assert!(records.of_spec("demo").unwrap().is_empty());
        records.keep(&record("r1", "base", "a", &[("work", "wall", 0.1), ("work", "wall", 0.11)])).unwrap();
        drop(ledger);
        // Opened again (twice migrated): the run and the record are both there, the ledger sound.
        let ledger = Ledger::open(&path).unwrap();
        let records = Records::on(&ledger).unwrap();
        assert_eq!(ledger.runs(None).unwrap()[0].run_id, "old");
        let kept = records.of_spec("demo").unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].values.iter().map(|v| v.value).collect::<Vec<_>>(), [0.1, 0.11]);
        assert_eq!(ledger.integrity().unwrap(), "ok");
    }

    #[test]
    fn a_record_round_trips_and_keeping_it_again_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("ledger.sqlite")).unwrap();
        let records = Records::on(&ledger).unwrap();
        let mut first = record("r1", "head", "b", &[("work", "wall", 0.1), ("work.instructions", "instructions", 3e9)]);
        first.values[0].flagged = true;
        first.values[0].throttled = Some(0.2);
        records.keep(&first).unwrap();
        records.keep(&record("r1", "base", "a", &[("work", "wall", 0.09)])).unwrap();
        let mut other = record("r2", "base", "a", &[("work", "wall", 0.09)]);
        other.spec = "other".into();
        records.keep(&other).unwrap();
        let kept = records.of_spec("demo").unwrap();
        assert_eq!(kept.len(), 2, "another spec's records are not this one's");
        let head = kept.iter().find(|r| r.origin == "head").unwrap();
        assert_eq!(head, &first);
        // A resumed run keeps its record again at its end: replaced, not doubled.
        let again = record("r1", "head", "b", &[("work", "wall", 0.12)]);
        records.keep(&again).unwrap();
        let kept = records.of_spec("demo").unwrap();
        assert_eq!(kept.iter().find(|r| r.origin == "head").unwrap().values, again.values);
    }
}
