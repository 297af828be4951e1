//! The run directory's mark, `controller.json` ([`Mark`]): the controller that owns the run
//! (`host/pid/start-ticks`, as in the sandboxes' owner label, so a reused pid is not mistaken
//! for it), the attempt, and the options and resolved commits the run was started with. It is
//! written before the ledger entry and rewritten by every resume. A run whose controller still
//! runs is neither resumed nor reconciled.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::options::{RateOverrides, RunOptions};
use crate::provision::AgentShipping;
use crate::report::Revision;

/// The controller's record in a run directory.
pub const MARK_FILE: &str = "controller.json";

/// Who runs a run directory, and what it was started with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// `host/pid/start-ticks` of the controller process.
    pub owner: String,
    pub pid: u32,
    /// 1 for the first controller, then one more for each resume.
    pub attempt: u32,
    pub run_id: String,
    /// The spec, absolute.
    pub spec: PathBuf,
    /// SHA-256 of the spec's text when the run started (a resume refuses a changed spec).
    pub spec_sha256: String,
    pub base: Revision,
    pub head: Revision,
    pub trials: Option<u32>,
    pub pairs: u32,
    pub budget_usd: Option<f64>,
    pub run_timeout_s: f64,
    pub noise: Option<PathBuf>,
    pub cpu_usd_per_hour: Option<f64>,
    pub memory_usd_per_gb_hour: Option<f64>,
    pub disk_usd_per_gb_hour: Option<f64>,
    /// What one sandbox costs per hour at the run's rate card (to charge an abandoned run).
    pub usd_per_hour: f64,
    /// The shard this run is of a sharded run (`--shard I/N`), kept by its resumes.
    #[serde(default)]
    pub shard: Option<crate::shard::Shard>,
    /// `--bisect`, kept by its resumes (a bisection goes on from its commits measured).
    #[serde(default)]
    pub bisect: bool,
    /// Why the run's sandboxes must have their disk bounded (a fork's head), kept by its resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_disk_bound: Option<String>,
}

impl Mark {
    /// The mark of this process for a run started with `opts`.
    pub fn new(opts: &RunOptions, run_id: &str, base: &Revision, head: &Revision, usd_per_hour: f64) -> Mark {
        Mark {
            owner: crate::provision::docker::owner_id(),
            pid: std::process::id(),
            attempt: 1,
            run_id: run_id.to_string(),
            spec: std::path::absolute(&opts.spec).unwrap_or_else(|_| opts.spec.clone()),
            spec_sha256: spec_digest(&opts.spec).unwrap_or_default(),
            base: base.clone(),
            head: head.clone(),
            trials: opts.trials,
            pairs: opts.pairs,
            budget_usd: opts.budget_usd,
            run_timeout_s: opts.run_timeout.as_secs_f64(),
            noise: opts.noise.clone(),
            cpu_usd_per_hour: opts.rates.cpu_usd_per_hour,
            memory_usd_per_gb_hour: opts.rates.memory_usd_per_gb_hour,
            disk_usd_per_gb_hour: opts.rates.disk_usd_per_gb_hour,
            usd_per_hour,
            shard: opts.shard,
            bisect: opts.bisect,
            require_disk_bound: opts.require_disk_bound.clone(),
        }
    }

    /// The mark in `dir`, None when there is none.
    pub fn load(dir: &Path) -> anyhow::Result<Option<Mark>> {
        let path = dir.join(MARK_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("{} is not a sandbench controller record", path.display())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes the mark durably (a crash leaves the old one or the new one).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let tmp = dir.join(format!("{MARK_FILE}.tmp"));
        let file = std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        serde_json::to_writer_pretty(&file, self)?;
        file.sync_all()?;
        std::fs::rename(&tmp, dir.join(MARK_FILE)).with_context(|| format!("cannot write {MARK_FILE}"))?;
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }

    /// Whether its controller may still run: it does on this host, or it ran on another host
    /// (which cannot be told from here).
    pub fn alive(&self) -> bool {
        crate::provision::docker::owner_alive(&self.owner) != Some(false)
    }

    /// The run's options again, with what belongs to this machine (agent, ledger) from here.
    pub(super) fn options(
        &self,
        out: PathBuf,
        agent: Option<PathBuf>,
        shipping: AgentShipping,
        ledger: Option<PathBuf>,
    ) -> RunOptions {
        RunOptions {
            spec: self.spec.clone(),
            base: self.base.rev.clone(),
            head: self.head.rev.clone(),
            out,
            trials: self.trials,
            pairs: self.pairs,
            budget_usd: self.budget_usd,
            run_timeout: Duration::from_secs_f64(self.run_timeout_s.max(0.0)),
            agent,
            shipping,
            noise: self.noise.clone(),
            // The profile the run started with is in `noise`; the ledger may hold a newer one.
            noise_from_ledger: false,
            rates: RateOverrides {
                cpu_usd_per_hour: self.cpu_usd_per_hour,
                memory_usd_per_gb_hour: self.memory_usd_per_gb_hour,
                disk_usd_per_gb_hour: self.disk_usd_per_gb_hour,
            },
            ledger,
            shard: self.shard,
            engine_wait: super::engine::DEFAULT_ENGINE_WAIT,
            dead_man: crate::observations::server::DEFAULT_DEAD_MAN,
            force_valgrind: false,
            bisect: self.bisect,
            require_disk_bound: self.require_disk_bound.clone(),
            // A record is not resumed (`resume::check` refuses it).
            record: false,
        }
    }
}

/// SHA-256 of a spec's text, in hex.
pub(super) fn spec_digest(spec: &Path) -> anyhow::Result<String> {
    use sha2::Digest;
    let text = std::fs::read(spec).with_context(|| format!("cannot read the spec {}", spec.display()))?;
    Ok(sha2::Sha256::digest(&text).iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "20261130-120000-abcdef";

    #[test]
    fn a_mark_round_trips_and_tells_a_dead_controller() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Mark::load(dir.path()).unwrap(), None);
        let revision = |c: &str| Revision { rev: c.into(), commit: c.repeat(40) };
        let opts = RunOptions {
            trials: Some(3),
            run_timeout: Duration::from_secs(60),
            engine_wait: Duration::from_secs(10),
            ..RunOptions::new("bench.toml", "a", "b", dir.path())
        };
        let mark = Mark::new(&opts, RUN, &revision("a"), &revision("b"), 0.1);
        assert!(mark.spec.is_absolute() && mark.alive(), "this process runs");
        mark.write(dir.path()).unwrap();
        assert_eq!(Mark::load(dir.path()).unwrap().as_ref(), Some(&mark));
        // A pid whose start time differs is another process: the controller is gone.
        let (host, rest) = mark.owner.split_once('/').unwrap();
        let pid = rest.split('/').next().unwrap();
        let dead = Mark { owner: format!("{host}/{pid}/1"), ..mark };
        assert!(!dead.alive());
    }
}
