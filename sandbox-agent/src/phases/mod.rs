//! The phases the controller can ask for, by name. Each reads the agent plan from the command.

mod common;
mod harness;
pub mod install;
mod installed;
mod lens;
pub mod measure;
mod optional;
pub mod prepare;
pub mod runtime;
mod synthetic;
pub mod transport;
pub mod ui;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sandbench_proto::Phase;
use sandbench_proto::plan::{AgentPlan, BENCHMARK_UID_BASE, BUILDER_USER, benchmark_user};

use crate::context::PhaseContext;
use crate::probes::processes::of_user;
use crate::{conditions, isolation};

pub use common::restore_origin;

/// Runs phase `name` to completion (or cancellation) on the calling thread.
pub fn run(name: &str, ctx: &PhaseContext) -> anyhow::Result<()> {
    let Ok(phase) = name.parse::<Phase>() else {
        let known: Vec<&str> = Phase::KNOWN.iter().map(|p| p.as_str()).collect();
        bail!("unknown phase {name:?} (this agent knows: {})", known.join(", "));
    };
    if phase == Phase::Synthetic {
        return synthetic::run(ctx);
    }
    let plan: AgentPlan =
        serde_json::from_slice(&ctx.plan).with_context(|| format!("invalid plan for phase {name}"))?;
    crate::probes::command::set_disk_bound(plan.disk_gb);
    if let Some(bridge) = &plan.registries {
        crate::bridge::serve(bridge.port)?;
    }
    harness::write(&plan).context("cannot write the harness files")?;
    let before = isolation::snapshot(&isolation::RealFs, &isolation::SHARED_PLACES);
    let conditions_before = phase.is_timed().then(|| conditions::read(Path::new("/")));
    let result = dispatch(phase, ctx, &plan);
    if let Some(before) = conditions_before {
        send_conditions(ctx, phase, before);
    }
    let cleanup = isolate(ctx, phase, &before);
    result.and(cleanup)
}

/// Sends the trial's conditions (steal, load, throttling), read before and now after it.
fn send_conditions(ctx: &PhaseContext, phase: Phase, before: sandbench_proto::conditions::Reading) {
    let after = conditions::read(Path::new("/"));
    let trial = sandbench_proto::conditions::TrialConditions { phase, trial: ctx.trial, before, after };
    if let Ok(bytes) = serde_json::to_vec_pretty(&trial) {
        ctx.file(&sandbench_proto::conditions::file_path(phase, ctx.trial), &bytes);
    }
}

/// After a phase: the builder's processes stopped (prepare's, and any a later phase started),
/// what non-root users left in the shared places and System V IPC removed, and what was removed or survived
/// sent as the trial's warnings (`warnings/<phase>-<trial>.txt`, which the controller adds to
/// the report's warnings).
fn isolate(ctx: &PhaseContext, phase: Phase, before: &BTreeSet<PathBuf>) -> anyhow::Result<()> {
    let accounts = common::accounts();
    let stopped = match accounts.find(BUILDER_USER) {
        Ok(Some(builder)) if phase == Phase::Prepare || !of_user(Path::new("/proc"), builder.uid).is_empty() => {
            common::hygiene(&builder)
        }
        _ => Ok(()),
    };
    let users = std::fs::read_to_string("/etc/passwd").map(|t| crate::users::parse_passwd(&t)).unwrap_or_default();
    let quiet: BTreeSet<PathBuf> = users.iter().map(crate::users::scratch_dir).collect();
    let fs = isolation::RealFs;
    let swept = isolation::sweep(&fs, &isolation::SHARED_PLACES, &quiet);
    let after = isolation::snapshot(&fs, &isolation::SHARED_PLACES);
    let mut warnings = isolation::warnings(phase.as_str(), ctx.trial, &swept, before, &after);
    // The benchmark users' homes, private again whatever their processes made of them.
    for user in users.iter().filter(|u| is_benchmark_user(u)) {
        if let Err(err) = accounts.close_home(user) {
            warnings.push(format!("{phase} trial {}: {err:#}", ctx.trial));
        }
    }
    let ipc = crate::ipc::sweep(Path::new("/proc/sysvipc"));
    let trial = ctx.trial;
    warnings.extend(ipc.removed.iter().map(|o| format!("{phase} trial {trial}: removed {o} left by a user")));
    warnings.extend(ipc.failed.iter().map(|o| format!("{phase} trial {trial}: cannot remove {o}")));
    if !warnings.is_empty() {
        for warning in &warnings {
            ctx.note(warning);
        }
        let text: String = warnings.iter().map(|w| format!("{w}\n")).collect();
        ctx.file(&format!("warnings/{phase}-{}.txt", ctx.trial), text.as_bytes());
    }
    stopped
}

/// Whether `user` is a trial's benchmark user (`benchmark<t+1>`, uid 2001+t).
fn is_benchmark_user(user: &crate::users::User) -> bool {
    user.uid >= BENCHMARK_UID_BASE && benchmark_user(user.uid - BENCHMARK_UID_BASE).0 == user.name
}

fn dispatch(phase: Phase, ctx: &PhaseContext, plan: &AgentPlan) -> anyhow::Result<()> {
    match phase {
        Phase::Prepare => prepare::run(ctx, plan),
        Phase::Install => install::run(ctx, plan, ctx.trial),
        Phase::Measure => measure::run(ctx, plan, ctx.trial),
        Phase::Runtime => runtime::run(ctx, plan, ctx.trial),
        Phase::Transport => transport::run(ctx, plan, ctx.trial),
        Phase::Ui => ui::run(ctx, plan, ctx.trial),
        Phase::Synthetic => synthetic::run(ctx),
    }
}
