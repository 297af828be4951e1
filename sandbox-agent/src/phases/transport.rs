//! transport: benches run as the builder against the prepared source (not the installed
//! product), so they need prepare but no installation. Every builder process is stopped before
//! and after, as for a benchmark user.

use std::path::Path;

use anyhow::Context;
use sandbench_proto::plan::{AgentPlan, BUILDER_USER, SOURCE_DIR};

use super::{common, runtime};
use crate::context::PhaseContext;

pub fn run(ctx: &PhaseContext, plan: &AgentPlan, trial: u32) -> anyhow::Result<()> {
    let builder = common::accounts()
        .find(BUILDER_USER)?
        .context("The source must be prepared before transport measurements (no builder user)")?;
    runtime::run_section(ctx, plan, &plan.transport, &builder, Path::new(SOURCE_DIR), trial)
}
