//! `sandbench run`: a base-vs-head comparison from validated plan to written reports.
//!
//! Provision base and head concurrently, prepare both in parallel (untimed), then install →
//! measure → runtime with trials interleaved ABBA (base, head, head, base, …), one sandbox timed
//! at a time per pair; with several pairs, each pair is pinned to its own CPUs and trials are
//! split between them. Dependency gate, identical-failure limit, step timeouts, run timeout,
//! budget and Ctrl-C/SIGTERM all end in the same teardown, and the report is written whatever
//! happened.
//!
//! # Layers
//!
//! The modules form a one-way stack: each may use only the modules listed above it (a test,
//! `layers_are_one_way`, reads this list and checks every `super::`/`crate::run::` path of the
//! folder against it; test modules are left out).
//!
//! - `schedule`: the order of the timed trials as a value (pure).
//! - `gate`: the rules each trial passes, and how a trial ended (pure).
//! - `accounting`: who each sandbox is (as registered, or as an old run directory's ids say),
//!   and which slots the log holds as complete (pure).
//! - `story`: how the terminal ends the run.
//! - `usage`: each sandbox's phases and cgroup samples, for its cost.
//! - `engine`: waits out an engine that stops answering.
//! - `options`: what the run is asked for.
//! - `output`: samples collected from the log (from plain data), the written reports.
//! - `mark`: `controller.json`, who runs the run directory.
//! - `reconcile`: a dead run's ledger entry recorded as abandoned.
//! - `walk`: the walk through the schedule (its trials, renewal and adaptation are its children).
//! - `execute`: sets up and tears down around the walk, and says how it ended.
//! - `bisections`: the bisections `--bisect` asks for once the run is decided.
//! - `conduct`: a run from its start to its written reports and ledger entry.
//! - `resume`: `--resume`, a new attempt over the missing slots.
//! - `mod.rs` (this module): the entry points.

mod accounting;
mod bisections;
mod conduct;
pub mod engine;
mod execute;
pub mod gate;
mod mark;
mod options;
mod output;
pub mod reconcile;
pub mod resume;
pub mod schedule;
pub mod story;
mod usage;
mod walk;

/// The block I/O weight both sides of a duet ask for.
pub use walk::DUET_IO_WEIGHT;

#[cfg(test)]
mod layers;
#[cfg(test)]
mod lens_tests;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, bail};
use tokio::sync::watch;

pub use crate::display::Display;
pub use accounting::Roster;
pub use conduct::RunResult;
pub(crate) use conduct::record_lens;
use conduct::{NOISE_USED, Start, apply_options, conduct, noise_from_ledger};
use mark::Mark;
pub use options::{RateOverrides, RunOptions};
use output::skeleton;
pub use output::{NoiseProfile, agent_warnings, rerender, write_reports};

use crate::cost::ledger::Ledger;
use crate::provision::{DockerProvisioner, Provisioner};
use crate::report::{self, Revision};
use crate::spec::{Plan, SourceSettings};

/// Runs the comparison in Docker. Only errors before the run directory exists are returned as
/// `Err`; everything after ends in a report.
pub async fn run(opts: RunOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<RunResult> {
    let docker = async { Ok(Arc::new(DockerProvisioner::connect(4).await?) as Arc<dyn Provisioner>) };
    run_on(opts, cancel, docker, run_id()).await
}

/// Runs the comparison on the sandboxes `connect` resolves to, under the id `run_id` (tests use a
/// fake provisioner and a fixed id). A failed `connect` ends in a failed report.
pub async fn run_on(
    opts: RunOptions,
    cancel: watch::Receiver<bool>,
    connect: impl Future<Output = anyhow::Result<Arc<dyn Provisioner>>>,
    run_id: String,
) -> anyhow::Result<RunResult> {
    let mut plan = crate::spec::load(&opts.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (mut notes, mut noise) = apply_options(&mut plan, &opts)?;
    let (base, head) = resolve_revisions(&plan, &opts.base, &opts.head).await?;
    // Opened once, before the run directory: a ledger that cannot be opened stops the run here.
    let ledger = opts.ledger.as_deref().map(Ledger::open).transpose()?;
    let dir = crate::station::run_dir(&opts.out.join(&run_id))?;
    std::fs::write(dir.join("plan.json"), serde_json::to_vec_pretty(&plan)?)?;
    let mut opts = opts;
    // An A/A run too: its verdicts are judged against the runs before it (its own noise.json
    // is from its pairs alone).
    if let Some(ledger) = ledger.as_ref().filter(|_| noise.is_none() && opts.noise_from_ledger) {
        noise = noise_from_ledger(ledger, &plan, &dir, &mut notes);
        // A resume reads the same profile, from the run directory.
        opts.noise = noise.as_ref().map(|_| dir.join(NOISE_USED));
    }
    // Who runs the run directory, written before the ledger entry: a run whose controller is
    // gone is told from one still running, and can be resumed.
    Mark::new(&opts, &run_id, &base, &head, plan.hourly_usd()).write(&dir)?;
    let mut report = skeleton(&plan, &run_id, base.clone(), head.clone());
    report.noise = noise;
    report.record = opts.record;
    // How often each lens step runs, from the profile just found (a resume keeps the report's).
    report.plan_lens(&plan);
    let start = Start { plan, notes, dir, report, base, head, resumed: None, earlier: Vec::new(), ledger };
    conduct(opts, start, cancel, connect).await
}

async fn resolve_revisions(plan: &Plan, base: &str, head: &str) -> anyhow::Result<(Revision, Revision)> {
    let resolve = |rev: &str| {
        let rev = rev.to_string();
        async move {
            let commit = match &plan.source {
                SourceSettings::Local { repository } => crate::source::resolve(repository, &rev).await?,
                SourceSettings::Url { .. } => {
                    if rev.len() != 40 || !rev.chars().all(|c| c.is_ascii_hexdigit()) {
                        bail!("with a git URL source, revisions must be full 40-character commit ids; got {rev:?}");
                    }
                    rev.to_ascii_lowercase()
                }
                SourceSettings::None => rev.clone(),
            };
            anyhow::Ok(Revision { rev, commit })
        }
    };
    Ok((resolve(base).await.context("--base")?, resolve(head).await.context("--head")?))
}

/// A new run's id: its start time and a random suffix.
pub(crate) fn run_id() -> String {
    let stamp = report::stamp(SystemTime::now());
    let mut random = [0u8; 3];
    rand::fill(&mut random);
    format!("{stamp}-{}", random.iter().map(|b| format!("{b:02x}")).collect::<String>())
}
