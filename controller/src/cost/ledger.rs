//! The cost ledger: every run, completed or not, in an embedded SQLite database, so whoever pays
//! can see what runs cost across time, specs and repositories (`sandbench cost`).
//!
//! A run is inserted as `running` when it starts and completed in one transaction when it ends;
//! a controller killed in between leaves its row unfinished and everything else intact, until the
//! next run or `gc` records it abandoned (`run::reconcile::reconcile`). WAL mode
//! and a busy timeout let concurrent runs write at once.
//!
//! A run merged from shards (`sandbench merge`) is one entry whose sandboxes are all the shards'
//! sandboxes, so its cost is theirs summed. The shards' own entries, when this ledger has them
//! (shards run on this machine), are marked merged into it (table `merged`) and left out of every
//! listing and group ([`Ledger::runs`]), so nothing is counted twice; `sandbench cost SHARD_RUN`
//! still shows one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::rates::SandboxRecord;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    repository TEXT NOT NULL,
    base_rev TEXT NOT NULL,
    base_commit TEXT NOT NULL,
    head_rev TEXT NOT NULL,
    head_commit TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    sandboxes INTEGER NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0,
    allocation_usd REAL NOT NULL DEFAULT 0,
    max_usd REAL NOT NULL DEFAULT 0,
    usage_usd REAL NOT NULL DEFAULT 0,
    run_dir TEXT NOT NULL,
    lens_seconds REAL NOT NULL DEFAULT 0,
    lens_usd REAL NOT NULL DEFAULT 0,
    owner TEXT NOT NULL DEFAULT '',
    usd_per_hour REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS sandboxes (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    sandbox_id TEXT NOT NULL,
    role TEXT NOT NULL,
    created_at TEXT NOT NULL,
    removed_at TEXT,
    seconds REAL NOT NULL,
    deleted INTEGER NOT NULL,
    peak_memory_bytes INTEGER NOT NULL,
    allocation_usd REAL NOT NULL,
    max_usd REAL NOT NULL,
    usage_usd REAL NOT NULL,
    PRIMARY KEY (run_id, sandbox_id)
);
CREATE TABLE IF NOT EXISTS phases (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    sandbox_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    phase TEXT NOT NULL,
    seconds REAL NOT NULL,
    cpu_seconds REAL NOT NULL,
    memory_gib_seconds REAL NOT NULL,
    allocation_usd REAL NOT NULL,
    max_usd REAL NOT NULL,
    usage_usd REAL NOT NULL,
    PRIMARY KEY (run_id, sandbox_id, seq)
);
CREATE INDEX IF NOT EXISTS runs_started ON runs(started_at);
CREATE TABLE IF NOT EXISTS merged (
    run_id TEXT PRIMARY KEY REFERENCES runs(run_id),
    into_run TEXT NOT NULL REFERENCES runs(run_id)
);
CREATE TABLE IF NOT EXISTS noise_profiles (
    run_id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    image TEXT NOT NULL,
    machine TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    profile TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS noise_profiles_by_setting ON noise_profiles(spec, image, machine, recorded_at);
";

/// Columns added to `runs` after its first release: (name, declaration). [`Ledger::open`] adds
/// those an older ledger lacks, so its rows read with the default.
const ADDED_RUN_COLUMNS: [(&str, &str); 4] = [
    ("lens_seconds", "REAL NOT NULL DEFAULT 0"),
    ("lens_usd", "REAL NOT NULL DEFAULT 0"),
    ("owner", "TEXT NOT NULL DEFAULT ''"),
    ("usd_per_hour", "REAL NOT NULL DEFAULT 0"),
];

/// This machine, as a noise profile is kept for it: its machine id (or host name), the CPUs this
/// process may use and their model. A profile measured elsewhere, or on other CPUs, is not used.
pub fn this_machine() -> String {
    let read = |path: &str| std::fs::read_to_string(path).map(|t| t.trim().to_string()).unwrap_or_default();
    let mut id = read("/etc/machine-id");
    if id.is_empty() {
        id = read("/proc/sys/kernel/hostname");
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = read("/proc/cpuinfo");
    let model =
        cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|m| m.trim_start_matches([' ', '\t', ':']));
    format!("{}/{cpus} cpus/{}", crate::sanitize::prefix(&id, 32), model.unwrap_or("unknown"))
}

/// An A/A run's noise profile as the ledger keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredNoise {
    pub run_id: String,
    pub spec: String,
    pub image: String,
    /// Which machine measured it ([`this_machine`]).
    pub machine: String,
    pub recorded_at: String,
    /// The profile's JSON.
    pub profile: String,
}

/// The status the ledger shows for a run that never recorded its end (its controller was killed).
pub const UNFINISHED: &str = "unfinished";

/// Where the ledger lives unless `--ledger` says otherwise: the user's data folder.
pub fn default_path() -> PathBuf {
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data.join("sandbench").join("ledger.sqlite")
}

/// A run as it starts.
#[derive(Debug, Clone)]
pub struct RunStart {
    pub run_id: String,
    pub spec: String,
    pub repository: String,
    pub base_rev: String,
    pub base_commit: String,
    pub head_rev: String,
    pub head_commit: String,
    pub started_at: String,
    pub run_dir: String,
    /// The controller process that began the row (`host/pid/start-ticks`, as a mark names it):
    /// a row left running by a command that keeps no mark is recorded abandoned once it is gone.
    pub owner: String,
    /// What one of its sandboxes costs per hour, to charge it if it is abandoned.
    pub usd_per_hour: f64,
}

/// A row that never recorded its end, as the reconciler needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Unfinished {
    pub run_id: String,
    pub run_dir: String,
    /// Empty for a row written before owners were kept.
    pub owner: String,
    pub usd_per_hour: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    pub run_id: String,
    pub spec: String,
    pub repository: String,
    pub base_commit: String,
    pub head_commit: String,
    /// `unfinished` when the run never recorded its end.
    pub status: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub sandboxes: i64,
    pub seconds: f64,
    pub allocation_usd: f64,
    pub max_usd: f64,
    pub usage_usd: f64,
    /// Sandbox seconds the instruction lens's runs took (part of `seconds`), and their share of
    /// the estimated cost.
    pub lens_seconds: f64,
    pub lens_usd: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseRow {
    pub sandbox_id: String,
    pub role: String,
    pub phase: String,
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub memory_gib_seconds: f64,
    pub allocation_usd: f64,
    pub max_usd: f64,
    pub usage_usd: f64,
}

/// Writes how a run ended and what each of its sandboxes cost, in the caller's transaction.
fn write_end(
    tx: &rusqlite::Transaction<'_>,
    ledger: &Path,
    run_id: &str,
    status: &str,
    finished_at: &str,
    sandboxes: &[SandboxRecord],
) -> anyhow::Result<()> {
    for s in sandboxes {
        let (allocation, max, usage) = s
            .cost
            .as_ref()
            .map_or((s.estimated_usd, s.estimated_usd, 0.0), |c| (c.allocation_usd, c.max_usd, c.usage_usd));
        tx.execute(
            "INSERT OR REPLACE INTO sandboxes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                run_id,
                s.id,
                s.role,
                s.created_at,
                s.removed_at,
                s.seconds,
                s.deleted,
                s.peak_memory_bytes as i64,
                allocation,
                max,
                usage
            ],
        )?;
        for (seq, p) in s.cost.iter().flat_map(|c| c.phases.iter()).enumerate() {
            tx.execute(
                "INSERT OR REPLACE INTO phases VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    run_id,
                    s.id,
                    seq as i64,
                    p.usage.phase,
                    p.usage.seconds,
                    p.usage.cpu_seconds,
                    p.usage.memory_gib_seconds,
                    p.allocation_usd,
                    p.max_usd,
                    p.usage_usd
                ],
            )?;
        }
    }
    let changed = tx.execute(
        "UPDATE runs SET status = ?2, finished_at = ?3,
             sandboxes = (SELECT COUNT(*) FROM sandboxes WHERE run_id = ?1),
             seconds = (SELECT COALESCE(SUM(seconds), 0) FROM sandboxes WHERE run_id = ?1),
             allocation_usd = (SELECT COALESCE(SUM(allocation_usd), 0) FROM sandboxes WHERE run_id = ?1),
             max_usd = (SELECT COALESCE(SUM(max_usd), 0) FROM sandboxes WHERE run_id = ?1),
             usage_usd = (SELECT COALESCE(SUM(usage_usd), 0) FROM sandboxes WHERE run_id = ?1)
         WHERE run_id = ?1",
        params![run_id, status, finished_at],
    )?;
    if changed != 1 {
        anyhow::bail!("run {run_id} is not in the ledger {}", ledger.display());
    }
    Ok(())
}

/// Adds the columns of [`ADDED_RUN_COLUMNS`] that a ledger written by an older sandbench lacks.
/// One write transaction, so that two controllers opening an old ledger at once add each column
/// once.
fn add_missing_columns(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let present: Vec<String> = {
        let mut stmt = tx.prepare("SELECT name FROM pragma_table_info('runs')")?;
        stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?
    };
    for (name, declaration) in ADDED_RUN_COLUMNS {
        if !present.iter().any(|p| p == name) {
            tx.execute_batch(&format!("ALTER TABLE runs ADD COLUMN {name} {declaration}"))?;
        }
    }
    tx.commit()
}

pub struct Ledger {
    conn: Connection,
    path: PathBuf,
}

impl Ledger {
    pub fn open(path: &Path) -> anyhow::Result<Ledger> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let mut conn = Connection::open(path).with_context(|| format!("cannot open the ledger {}", path.display()))?;
        conn.busy_timeout(Duration::from_secs(30))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(SCHEMA).with_context(|| format!("cannot set up the ledger {}", path.display()))?;
        add_missing_columns(&mut conn).with_context(|| format!("cannot update the ledger {}", path.display()))?;
        Ok(Ledger { conn, path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The database, for the tables other parts keep in the ledger beside the runs' cost (the
    /// metric history, `crate::history::store`, which sets up its own tables).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Records a run as started (and unfinished until `finish_run`).
    pub fn begin_run(&self, run: &RunStart) -> anyhow::Result<()> {
        self.conn
            .execute(
                "INSERT INTO runs (run_id, spec, repository, base_rev, base_commit, head_rev, head_commit, status, started_at, run_dir, owner, usd_per_hour)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8, ?9, ?10, ?11)",
                params![run.run_id, run.spec, run.repository, run.base_rev, run.base_commit, run.head_rev, run.head_commit, run.started_at, run.run_dir, run.owner, run.usd_per_hour],
            )
            .context("cannot record the run in the ledger")?;
        Ok(())
    }

    /// Records how a run ended and what each sandbox cost, in one transaction.
    pub fn finish_run(
        &mut self,
        run_id: &str,
        status: &str,
        finished_at: &str,
        sandboxes: &[SandboxRecord],
    ) -> anyhow::Result<()> {
        let tx = self.conn.transaction()?;
        write_end(&tx, &self.path, run_id, status, finished_at, sandboxes)?;
        tx.commit().context("cannot record the run's end in the ledger")?;
        Ok(())
    }

    /// Records an unfinished run as abandoned — only if it is still unfinished and still owned
    /// by the controller the reconciler judged dead (a resume may have taken it over since);
    /// whether it did.
    pub fn abandon_run(
        &mut self,
        row: &Unfinished,
        finished_at: &str,
        sandboxes: &[SandboxRecord],
    ) -> anyhow::Result<bool> {
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let still: Option<i64> = tx
            .query_row(
                "SELECT 1 FROM runs WHERE run_id = ?1 AND finished_at IS NULL AND owner = ?2",
                params![row.run_id, row.owner],
                |r| r.get(0),
            )
            .optional()?;
        if still.is_none() {
            return Ok(false);
        }
        write_end(&tx, &self.path, &row.run_id, "abandoned", finished_at, sandboxes)?;
        tx.commit().context("cannot record the run as abandoned in the ledger")?;
        Ok(true)
    }

    /// Records what the instruction lens's runs of a run took: sandbox seconds and their share of
    /// the estimated cost (both part of the run's totals, not added to them).
    pub fn record_lens(&self, run_id: &str, seconds: f64, usd: f64) -> anyhow::Result<()> {
        self.conn
            .execute(
                "UPDATE runs SET lens_seconds = ?2, lens_usd = ?3 WHERE run_id = ?1",
                params![run_id, seconds, usd],
            )
            .context("cannot record the instruction lens's cost in the ledger")?;
        Ok(())
    }

    /// Keeps a completed A/A run's noise profile (its JSON, as `noise.json` holds it) for the
    /// spec, image and machine it was measured on; a later run of the same three uses the latest.
    pub fn record_noise(&self, noise: &StoredNoise) -> anyhow::Result<()> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO noise_profiles (run_id, spec, image, machine, recorded_at, profile)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![noise.run_id, noise.spec, noise.image, noise.machine, noise.recorded_at, noise.profile],
            )
            .context("cannot keep the noise profile in the ledger")?;
        Ok(())
    }

    /// The latest noise profile kept for `spec` on `image` and `machine`.
    pub fn latest_noise(&self, spec: &str, image: &str, machine: &str) -> anyhow::Result<Option<StoredNoise>> {
        self.conn
            .query_row(
                "SELECT run_id, spec, image, machine, recorded_at, profile FROM noise_profiles
                 WHERE spec = ?1 AND image = ?2 AND machine = ?3 ORDER BY recorded_at DESC, run_id DESC LIMIT 1",
                params![spec, image, machine],
                |r| {
                    Ok(StoredNoise {
                        run_id: r.get(0)?,
                        spec: r.get(1)?,
                        image: r.get(2)?,
                        machine: r.get(3)?,
                        recorded_at: r.get(4)?,
                        profile: r.get(5)?,
                    })
                },
            )
            .optional()
            .context("cannot read the noise profiles of the ledger")
    }

    /// Every noise profile kept for `spec` on `image` and `machine`, oldest first: the A/A runs
    /// a later run's floors pool.
    pub fn noise_profiles(&self, spec: &str, image: &str, machine: &str) -> anyhow::Result<Vec<StoredNoise>> {
        let read = || -> rusqlite::Result<Vec<StoredNoise>> {
            let mut stmt = self.conn.prepare(
                "SELECT run_id, spec, image, machine, recorded_at, profile FROM noise_profiles
                 WHERE spec = ?1 AND image = ?2 AND machine = ?3 ORDER BY recorded_at, run_id",
            )?;
            let rows = stmt.query_map(params![spec, image, machine], |r| {
                Ok(StoredNoise {
                    run_id: r.get(0)?,
                    spec: r.get(1)?,
                    image: r.get(2)?,
                    machine: r.get(3)?,
                    recorded_at: r.get(4)?,
                    profile: r.get(5)?,
                })
            })?;
            rows.collect()
        };
        read().context("cannot read the noise profiles of the ledger")
    }

    /// Runs that never recorded their end. Their controller may be alive (running) or dead (to
    /// be reconciled as abandoned).
    pub fn unfinished_runs(&self) -> anyhow::Result<Vec<Unfinished>> {
        let mut stmt = self.conn.prepare(
            "SELECT run_id, run_dir, owner, usd_per_hour FROM runs WHERE finished_at IS NULL ORDER BY started_at",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(Unfinished { run_id: r.get(0)?, run_dir: r.get(1)?, owner: r.get(2)?, usd_per_hour: r.get(3)? })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Puts a run that ended (an abandoned run being resumed) back to running, owned by the
    /// resuming controller at its rate (`run`'s owner and rate); false when the ledger does not
    /// hold it.
    pub fn reopen_run(&self, run: &RunStart) -> anyhow::Result<bool> {
        let changed = self
            .conn
            .execute(
                "UPDATE runs SET status = 'running', finished_at = NULL, owner = ?2, usd_per_hour = ?3
                 WHERE run_id = ?1",
                params![run.run_id, run.owner, run.usd_per_hour],
            )
            .context("cannot reopen the run in the ledger")?;
        Ok(changed == 1)
    }

    /// Marks the entries of `shards` (those this ledger has) as merged into the run `into`: they
    /// are no longer listed or summed, `into` holds their sandboxes. Returns how many it marked.
    pub fn mark_merged(&self, shards: &[String], into: &str) -> anyhow::Result<usize> {
        let mut marked = 0;
        for shard in shards {
            marked += self
                .conn
                .execute(
                    "INSERT OR REPLACE INTO merged (run_id, into_run)
                     SELECT run_id, ?2 FROM runs WHERE run_id = ?1",
                    params![shard, into],
                )
                .context("cannot mark a shard's run as merged in the ledger")?;
        }
        Ok(marked)
    }

    /// The run a shard's entry was merged into, if it was.
    pub fn merged_into(&self, run_id: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT into_run FROM merged WHERE run_id = ?1", params![run_id], |r| r.get(0))
            .optional()?)
    }

    /// Runs started at or after `since`, newest first; shards merged into another run are left
    /// out (the merged run holds their cost).
    pub fn runs(&self, since: Option<jiff::Timestamp>) -> anyhow::Result<Vec<RunRow>> {
        self.select_runs(since, "AND run_id NOT IN (SELECT run_id FROM merged)")
    }

    fn select_runs(&self, since: Option<jiff::Timestamp>, filter: &str) -> anyhow::Result<Vec<RunRow>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT run_id, spec, repository, base_commit, head_commit,
                    CASE WHEN finished_at IS NULL THEN ?2 ELSE status END,
                    started_at, finished_at, sandboxes, seconds, allocation_usd, max_usd, usage_usd,
                    lens_seconds, lens_usd
             FROM runs WHERE started_at >= ?1 {filter} ORDER BY started_at DESC, run_id DESC"
        ))?;
        // Start times are stored as `report::timestamp` writes them (RFC 3339 in UTC, to the
        // second), so text order is time order.
        let since = since.map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default();
        let rows = stmt.query_map(params![since, UNFINISHED], |r| {
            Ok(RunRow {
                run_id: r.get(0)?,
                spec: r.get(1)?,
                repository: r.get(2)?,
                base_commit: r.get(3)?,
                head_commit: r.get(4)?,
                status: r.get(5)?,
                started_at: r.get(6)?,
                finished_at: r.get(7)?,
                sandboxes: r.get(8)?,
                seconds: r.get(9)?,
                allocation_usd: r.get(10)?,
                max_usd: r.get(11)?,
                usage_usd: r.get(12)?,
                lens_seconds: r.get(13)?,
                lens_usd: r.get(14)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One run and its cost by sandbox and phase.
    pub fn run(&self, run_id: &str) -> anyhow::Result<Option<(RunRow, Vec<PhaseRow>)>> {
        let Some(run) = self.select_runs(None, "")?.into_iter().find(|r| r.run_id == run_id) else { return Ok(None) };
        let mut stmt = self.conn.prepare(
            "SELECT p.sandbox_id, s.role, p.phase, p.seconds, p.cpu_seconds, p.memory_gib_seconds, p.allocation_usd, p.max_usd, p.usage_usd
             FROM phases p JOIN sandboxes s ON s.run_id = p.run_id AND s.sandbox_id = p.sandbox_id
             WHERE p.run_id = ?1 ORDER BY s.role, p.seq",
        )?;
        let phases = stmt
            .query_map(params![run_id], |r| {
                Ok(PhaseRow {
                    sandbox_id: r.get(0)?,
                    role: r.get(1)?,
                    phase: r.get(2)?,
                    seconds: r.get(3)?,
                    cpu_seconds: r.get(4)?,
                    memory_gib_seconds: r.get(5)?,
                    allocation_usd: r.get(6)?,
                    max_usd: r.get(7)?,
                    usage_usd: r.get(8)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(Some((run, phases)))
    }

    /// The database is consistent (SQLite's own check).
    pub fn integrity(&self) -> anyhow::Result<String> {
        Ok(self.conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).optional()?.unwrap_or_default())
    }
}

/// A run's row in the ledger from its start to its end, for every command that spends sandboxes
/// (`run`, `bisect`, `history --bisect`, `merge`): begun when made (a resumed run's row put back
/// to running), closed by [`Entry::finish`]. An entry dropped unfinished — an error or a panic on
/// the way — closes its row as `failed`, with no sandbox recorded, so that only a controller
/// killed outright leaves a row running, which the next run (or `sandbox gc`) records abandoned
/// once the row's owner is gone, with or without a run directory's mark.
pub struct Entry {
    ledger: Ledger,
    run_id: String,
    open: bool,
}

impl Entry {
    /// Records `run` as begun; with `resume`, puts its row back to running when the ledger has
    /// it, and begins it otherwise.
    pub fn begin(ledger: Ledger, run: &RunStart, resume: bool) -> anyhow::Result<Entry> {
        if !(resume && ledger.reopen_run(run)?) {
            ledger.begin_run(run)?;
        }
        Ok(Entry { ledger, run_id: run.run_id.clone(), open: true })
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Closes the row: how the run ended and what each sandbox cost. The entry stays usable
    /// (its ledger) afterwards; once closed, it is not closed again on drop.
    pub fn finish(&mut self, status: &str, finished_at: &str, sandboxes: &[SandboxRecord]) -> anyhow::Result<()> {
        self.ledger.finish_run(&self.run_id, status, finished_at, sandboxes)?;
        self.open = false;
        Ok(())
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if self.open {
            let now = timestamp(std::time::SystemTime::now());
            if let Err(err) = self.ledger.finish_run(&self.run_id, "failed", &now, &[]) {
                tracing::warn!(run = %self.run_id, "cannot close the ledger entry: {err:#}");
            }
        }
    }
}

/// RFC 3339 (UTC, seconds) of a time, as the ledger and the reports keep times.
pub fn timestamp(t: std::time::SystemTime) -> String {
    let t = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use sandbench_proto::{Phase, Side};

    use super::*;
    use crate::cost::{PhaseCost, PhaseUsage, SandboxCost};

    fn start(id: &str) -> RunStart {
        RunStart {
            run_id: id.into(),
            spec: "demo".into(),
            repository: "/srv/repo".into(),
            base_rev: "main".into(),
            base_commit: "a".repeat(40),
            head_rev: "pr".into(),
            head_commit: "b".repeat(40),
            started_at: "2026-11-29T10:00:00Z".into(),
            run_dir: format!("/runs/{id}"),
            owner: String::new(),
            usd_per_hour: 0.1,
        }
    }

    fn sandbox(id: &str, side: Side, usd: f64) -> SandboxRecord {
        let stretch = |name: &str, seconds: f64| PhaseCost {
            usage: PhaseUsage { phase: name.into(), seconds, cpu_seconds: seconds / 2.0, memory_gib_seconds: seconds },
            allocation_usd: usd / 2.0,
            max_usd: usd / 2.0,
            usage_usd: usd / 4.0,
        };
        SandboxRecord {
            id: id.into(),
            role: side.to_string(),
            placement: None,
            created_at: "2026-11-29T10:00:00Z".into(),
            removed_at: Some("2026-11-29T10:01:00Z".into()),
            seconds: 60.0,
            deleted: true,
            estimated_usd: usd,
            peak_memory_bytes: 1 << 20,
            cost: Some(SandboxCost {
                phases: vec![stretch(Phase::Prepare.as_str(), 20.0), stretch(Phase::Install.as_str(), 40.0)],
                allocation_usd: usd,
                max_usd: usd,
                usage_usd: usd / 2.0,
                charged_seconds: 60.0,
            }),
        }
    }

    #[test]
    fn a_ledger_written_before_the_added_columns_gains_them_and_keeps_its_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.sqlite");
        let mut old_schema = SCHEMA.to_string();
        for (name, declaration) in ADDED_RUN_COLUMNS {
            old_schema = old_schema.replace(&format!(",\n    {name} {declaration}"), "");
        }
        assert!(!old_schema.contains("lens_") && !old_schema.contains("owner"), "the old schema has an added column");
        old_schema.push_str(
            "INSERT INTO runs (run_id, spec, repository, base_rev, base_commit, head_rev, head_commit, status, started_at, run_dir)
             VALUES ('old', 'demo', '/repo', 'main', 'a', 'pr', 'b', 'completed', '2026-11-01T10:00:00Z', '/runs/old'),
                    ('left', 'demo', '/repo', 'main', 'a', 'pr', 'b', 'running', '2026-11-01T09:00:00Z', '/runs/left');",
        );
        Connection::open(&path).unwrap().execute_batch(&old_schema).unwrap();
        let ledger = Ledger::open(&path).unwrap();
        let runs = ledger.runs(None).unwrap();
        assert_eq!((runs.len(), runs[0].run_id.as_str(), runs[0].lens_seconds), (2, "old", 0.0));
        let open = ledger.unfinished_runs().unwrap();
        let left = open.iter().find(|u| u.run_id == "left").unwrap();
        assert_eq!((left.owner.as_str(), left.usd_per_hour), ("", 0.0), "no owner was kept then");
        ledger.record_lens("old", 12.0, 0.001).unwrap();
        drop(ledger);
        let again = Ledger::open(&path).unwrap();
        assert_eq!(again.runs(None).unwrap()[0].lens_seconds, 12.0, "opened twice, the columns are added once");
    }

    #[test]
    fn the_latest_noise_profile_of_a_spec_image_and_machine_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("ledger.sqlite")).unwrap();
        let noise = |run: &str, spec: &str, machine: &str, at: &str| StoredNoise {
            run_id: run.into(),
            spec: spec.into(),
            image: "node:24-bookworm".into(),
            machine: machine.into(),
            recorded_at: at.into(),
            profile: format!("{{\"run_id\": \"{run}\"}}"),
        };
        assert_eq!(ledger.latest_noise("demo", "node:24-bookworm", "m1").unwrap(), None);
        ledger.record_noise(&noise("aa-1", "demo", "m1", "2026-12-01T10:00:00Z")).unwrap();
        ledger.record_noise(&noise("aa-2", "demo", "m1", "2026-12-02T10:00:00Z")).unwrap();
        ledger.record_noise(&noise("aa-3", "demo", "m2", "2026-12-03T10:00:00Z")).unwrap();
        ledger.record_noise(&noise("aa-4", "other", "m1", "2026-12-03T10:00:00Z")).unwrap();
        let latest = ledger.latest_noise("demo", "node:24-bookworm", "m1").unwrap().unwrap();
        assert_eq!((latest.run_id.as_str(), latest.profile.as_str()), ("aa-2", "{\"run_id\": \"aa-2\"}"));
        assert_eq!(ledger.latest_noise("demo", "node:22", "m1").unwrap(), None, "another image");
        assert!(this_machine().contains(" cpus/"), "{}", this_machine());
    }

    #[test]
    fn every_noise_profile_of_a_spec_image_and_machine_is_listed_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("ledger.sqlite")).unwrap();
        let noise = |run: &str, machine: &str, at: &str| StoredNoise {
            run_id: run.into(),
            spec: "demo".into(),
            image: "node:24-bookworm".into(),
            machine: machine.into(),
            recorded_at: at.into(),
            profile: "{}".into(),
        };
        assert!(ledger.noise_profiles("demo", "node:24-bookworm", "m1").unwrap().is_empty());
        ledger.record_noise(&noise("aa-2", "m1", "2026-12-02T10:00:00Z")).unwrap();
        ledger.record_noise(&noise("aa-1", "m1", "2026-12-01T10:00:00Z")).unwrap();
        ledger.record_noise(&noise("aa-3", "m2", "2026-12-03T10:00:00Z")).unwrap();
        ledger.record_noise(&noise("aa-0", "m1", "2026-12-02T10:00:00Z")).unwrap();
        let runs: Vec<String> =
            ledger.noise_profiles("demo", "node:24-bookworm", "m1").unwrap().into_iter().map(|n| n.run_id).collect();
        assert_eq!(runs, ["aa-1", "aa-0", "aa-2"]);
    }

    #[test]
    fn a_run_round_trips_with_its_sandboxes_and_phases() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/ledger.sqlite");
        let mut ledger = Ledger::open(&path).unwrap();
        ledger.begin_run(&start("r1")).unwrap();
        assert_eq!(ledger.runs(None).unwrap()[0].status, UNFINISHED);
        ledger
            .finish_run(
                "r1",
                "completed",
                "2026-11-29T10:02:00Z",
                &[sandbox("sb-base", Side::Base, 0.002), sandbox("sb-head", Side::Head, 0.003)],
            )
            .unwrap();
        drop(ledger);

        let ledger = Ledger::open(&path).unwrap();
        let (run, phases) = ledger.run("r1").unwrap().unwrap();
        assert_eq!((run.status.as_str(), run.sandboxes, run.seconds), ("completed", 2, 120.0));
        assert!((run.allocation_usd - 0.005).abs() < 1e-12 && (run.usage_usd - 0.0025).abs() < 1e-12);
        assert_eq!(phases.len(), 4);
        assert_eq!((phases[0].role.as_str(), phases[0].phase.as_str(), phases[0].seconds), ("base", "prepare", 20.0));
        assert!(ledger.run("nope").unwrap().is_none());
        assert_eq!((run.lens_seconds, run.lens_usd), (0.0, 0.0), "no lens ran");
        ledger.record_lens("r1", 30.0, 0.00125).unwrap();
        let (run, _) = ledger.run("r1").unwrap().unwrap();
        assert_eq!((run.lens_seconds, run.lens_usd, run.seconds), (30.0, 0.00125, 120.0), "a part of the run's time");
        let day = |d: &str| {
            Some(d.parse::<jiff::civil::Date>().unwrap().to_zoned(jiff::tz::TimeZone::UTC).unwrap().timestamp())
        };
        assert!(ledger.runs(day("2026-11-30")).unwrap().is_empty());
        assert_eq!(ledger.runs(day("2026-11-29")).unwrap().len(), 1, "a run of that day counts");
        let later: jiff::Timestamp = "2026-11-29T10:00:01Z".parse().unwrap();
        assert!(ledger.runs(Some(later)).unwrap().is_empty(), "started a second before");
        assert_eq!(ledger.integrity().unwrap(), "ok");
        // A run that was never begun cannot be finished.
        let mut ledger = ledger;
        assert!(ledger.finish_run("ghost", "completed", "x", &[]).is_err());
    }

    #[test]
    fn an_entry_dropped_unfinished_closes_its_row_as_failed_and_a_finished_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let status = |id: &str| Ledger::open(&path).unwrap().run(id).unwrap().map(|(r, _)| r.status);
        // An error on the way (the entry goes out of scope unfinished): failed, nothing spent.
        let entry = Entry::begin(Ledger::open(&path).unwrap(), &start("r1"), false).unwrap();
        assert_eq!((entry.run_id(), status("r1").as_deref()), ("r1", Some(UNFINISHED)));
        drop(entry);
        let (row, phases) = Ledger::open(&path).unwrap().run("r1").unwrap().unwrap();
        assert_eq!((row.status.as_str(), row.sandboxes, phases.len()), ("failed", 0, 0));
        assert!(row.finished_at.is_some(), "{row:?}");
        // Finished: the drop leaves it as it was closed.
        let mut entry = Entry::begin(Ledger::open(&path).unwrap(), &start("r2"), false).unwrap();
        entry.finish("completed", "2026-11-29T10:02:00Z", &[sandbox("sb-base", Side::Base, 0.002)]).unwrap();
        assert_eq!(entry.ledger().path(), path.as_path());
        drop(entry);
        assert_eq!(status("r2").as_deref(), Some("completed"));
        // Resumed: the row is put back to running, owned by whoever resumed it, not begun twice;
        // one the ledger lacks is begun.
        let resumer = RunStart { owner: "host/2/2".into(), usd_per_hour: 0.2, ..start("r2") };
        let mut entry = Entry::begin(Ledger::open(&path).unwrap(), &resumer, true).unwrap();
        assert_eq!(status("r2").as_deref(), Some(UNFINISHED));
        let open = Ledger::open(&path).unwrap().unfinished_runs().unwrap();
        let owned = open.iter().map(|u| (u.run_id.as_str(), u.owner.as_str(), u.usd_per_hour)).collect::<Vec<_>>();
        assert_eq!(owned, [("r2", "host/2/2", 0.2)]);
        // A reconciler that judged the owner before the resume took the row over leaves it be.
        let before = Unfinished { owner: "host/1/1".into(), ..open[0].clone() };
        assert!(!Ledger::open(&path).unwrap().abandon_run(&before, "2026-11-29T10:02:30Z", &[]).unwrap());
        assert_eq!(status("r2").as_deref(), Some(UNFINISHED), "still the resumer's");
        entry.finish("canceled", "2026-11-29T10:03:00Z", &[]).unwrap();
        assert_eq!(status("r2").as_deref(), Some("canceled"));
        assert!(Entry::begin(Ledger::open(&path).unwrap(), &start("r2"), false).is_err(), "begun twice");
        let mut entry = Entry::begin(Ledger::open(&path).unwrap(), &start("r3"), true).unwrap();
        entry.finish("completed", "2026-11-29T10:04:00Z", &[]).unwrap();
        assert_eq!(status("r3").as_deref(), Some("completed"));
    }

    #[test]
    fn shards_merged_into_a_run_are_counted_once_in_the_merged_run() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(&dir.path().join("ledger.sqlite")).unwrap();
        let (s1, s2) = (sandbox("sb-s1-base", Side::Base, 0.002), sandbox("sb-s2-base", Side::Base, 0.003));
        for (id, sb) in [("shard1", &s1), ("shard2", &s2)] {
            ledger.begin_run(&start(id)).unwrap();
            ledger.finish_run(id, "completed", "2026-11-29T10:02:00Z", std::slice::from_ref(sb)).unwrap();
        }
        ledger.begin_run(&start("merged")).unwrap();
        ledger.finish_run("merged", "completed", "2026-11-29T10:03:00Z", &[s1, s2]).unwrap();
        let marked = ledger.mark_merged(&["shard1".into(), "shard2".into(), "elsewhere".into()], "merged").unwrap();
        assert_eq!(marked, 2, "a shard this ledger never saw is not marked");
        let runs = ledger.runs(None).unwrap();
        assert_eq!(runs.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["merged"]);
        assert!((runs[0].allocation_usd - 0.005).abs() < 1e-12, "{}", runs[0].allocation_usd);
        let total: f64 = runs.iter().map(|r| r.allocation_usd).sum();
        assert!((total - 0.005).abs() < 1e-12, "nothing counted twice: {total}");
        assert_eq!(ledger.merged_into("shard2").unwrap().as_deref(), Some("merged"));
        assert_eq!(ledger.merged_into("merged").unwrap(), None);
        assert!(ledger.run("shard1").unwrap().is_some(), "a shard's entry is still there to look at");
    }

    #[test]
    fn concurrent_runs_write_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        Ledger::open(&path).unwrap();
        let writers: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut ledger = Ledger::open(&path).unwrap();
                    let id = format!("run{i}");
                    ledger.begin_run(&start(&id)).unwrap();
                    std::thread::sleep(Duration::from_millis(5));
                    let boxes: Vec<SandboxRecord> =
                        (0..3).map(|k| sandbox(&format!("{id}-{k}"), Side::Base, 0.001)).collect();
                    ledger.finish_run(&id, "completed", "2026-11-29T11:00:00Z", &boxes).unwrap();
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let ledger = Ledger::open(&path).unwrap();
        let runs = ledger.runs(None).unwrap();
        assert_eq!(runs.len(), 8);
        assert!(runs.iter().all(|r| r.status == "completed" && r.sandboxes == 3));
        assert_eq!(ledger.integrity().unwrap(), "ok");
    }
}
