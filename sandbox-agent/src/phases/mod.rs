//! The phases the controller can ask for, by name. Each reads the agent plan from the command.

mod common;
mod harness;
pub mod install;
pub mod measure;
pub mod prepare;
pub mod runtime;
mod synthetic;
pub mod transport;
pub mod ui;

use anyhow::{Context, bail};
use sandbench_proto::plan::{AgentPlan, phase};

use crate::commands::PhaseContext;

pub use common::restore_origin;

/// Runs phase `name` to completion (or cancellation) on the calling thread.
pub fn run(name: &str, ctx: &PhaseContext) -> anyhow::Result<()> {
    if name == synthetic::NAME {
        return synthetic::run(ctx);
    }
    let plan: AgentPlan =
        serde_json::from_slice(&ctx.plan).with_context(|| format!("invalid plan for phase {name}"))?;
    harness::write(&plan).context("cannot write the harness files")?;
    match name {
        phase::PREPARE => prepare::run(ctx, &plan),
        phase::INSTALL => install::run(ctx, &plan, ctx.trial),
        phase::MEASURE => measure::run(ctx, &plan, ctx.trial),
        phase::RUNTIME => runtime::run(ctx, &plan, ctx.trial),
        phase::TRANSPORT => transport::run(ctx, &plan, ctx.trial),
        phase::UI => ui::run(ctx, &plan, ctx.trial),
        other => bail!(
            "unknown phase {other:?} (this agent knows: {}, {}, {}, {}, {}, {}, {})",
            phase::PREPARE,
            phase::INSTALL,
            phase::MEASURE,
            phase::RUNTIME,
            phase::TRANSPORT,
            phase::UI,
            synthetic::NAME
        ),
    }
}
