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
//! - `resolve`: a run resolved once from what it is asked for: the final plan, its schedule,
//!   the revisions, the noise profile and the open ledger.
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
mod resolve;
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

use tokio::sync::watch;

pub use crate::display::Display;
pub use accounting::Roster;
pub use conduct::RunResult;
pub(crate) use conduct::record_lens;
use conduct::{Start, conduct};
use mark::Mark;
pub use options::{MAX_PAIRS, RateOverrides, RunOptions, check};
use output::skeleton;
pub use output::{NoiseProfile, agent_warnings, rerender, write_reports};

use resolve::{NOISE_USED, keep_noise_used};
pub use resolve::{Resolved, resolve};

use crate::provision::{Engine, Provisioner};
use crate::report;

/// Runs the comparison on the engine's sandboxes with its default limits (the command line
/// resolves first and starts with its own engine: [`resolve()`], [`start()`]). Only errors before
/// the run directory exists are returned as `Err`; everything after ends in a report.
pub async fn run(opts: RunOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<RunResult> {
    run_in(&Engine::default(), opts, cancel).await
}

/// Runs the comparison on `engine`'s sandboxes (`ci` and `record` share the command's engine).
pub async fn run_in(engine: &Engine, opts: RunOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<RunResult> {
    start(resolve(opts).await?, cancel, engine.provisioner(), run_id()).await
}

/// Runs the comparison on the sandboxes `connect` resolves to, under the id `run_id` (tests use a
/// fake provisioner and a fixed id). A failed `connect` ends in a failed report.
pub async fn run_on(
    opts: RunOptions,
    cancel: watch::Receiver<bool>,
    connect: impl Future<Output = anyhow::Result<Arc<dyn Provisioner>>>,
    run_id: String,
) -> anyhow::Result<RunResult> {
    start(resolve(opts).await?, cancel, connect, run_id).await
}

/// Walks a resolved run under the id `run_id` on the sandboxes `connect` resolves to: its
/// directory, its mark and its report begun, then `conduct`. Only errors before the run
/// directory exists, or in writing its first files, are returned as `Err`.
pub async fn start(
    resolved: Resolved,
    cancel: watch::Receiver<bool>,
    connect: impl Future<Output = anyhow::Result<Arc<dyn Provisioner>>>,
    run_id: String,
) -> anyhow::Result<RunResult> {
    let mut resolved = resolved;
    let dir = crate::station::run_dir(&resolved.opts.out.join(&run_id))?;
    std::fs::write(dir.join("plan.json"), serde_json::to_vec_pretty(&resolved.plan)?)?;
    if resolved.noise_from_ledger && keep_noise_used(&mut resolved.noise, &dir, &mut resolved.notes) {
        // A resume reads the same profile, from the run directory.
        resolved.opts.noise = Some(dir.join(NOISE_USED));
    }
    let noise = resolved.noise.take();
    let Resolved { opts, plan, base, head, .. } = &resolved;
    // Who runs the run directory, written before the ledger entry: a run whose controller is
    // gone is told from one still running, and can be resumed.
    Mark::new(opts, &run_id, base, head, plan.hourly_usd()).write(&dir)?;
    let mut report = skeleton(plan, &run_id, base.clone(), head.clone());
    report.noise = noise;
    report.record = opts.record;
    // How often each lens step runs, from the profile just found (a resume keeps the report's).
    report.plan_lens(plan);
    let start = Start { resolved, dir, report, resumed: None, earlier: Vec::new() };
    conduct(start, cancel, connect).await
}

/// A new run's id: its start time and a random suffix.
pub(crate) fn run_id() -> String {
    let stamp = report::stamp(SystemTime::now());
    let mut random = [0u8; 3];
    rand::fill(&mut random);
    format!("{stamp}-{}", random.iter().map(|b| format!("{b:02x}")).collect::<String>())
}
