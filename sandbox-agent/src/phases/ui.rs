//! ui: interactions with the installed product, as the first benchmark user, on fixtures its
//! scenarios generate before each trial — terminal sessions driven by keys and screen waits,
//! and daemons spoken to over a socket.

use anyhow::anyhow;
use sandbench_proto::plan::AgentPlan;

use super::common::AgentState;
use super::runtime;
use crate::context::PhaseContext;

pub fn run(ctx: &PhaseContext, plan: &AgentPlan, trial: u32) -> anyhow::Result<()> {
    let state = AgentState::load(&ctx.state_dir)?;
    let user =
        state.measure_user().map_err(|_| anyhow!("The first installation must succeed before UI measurements"))?;
    runtime::run_section(ctx, plan, &plan.ui, &user, &user.home, trial)
}
