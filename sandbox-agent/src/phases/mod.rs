//! The phases the controller can ask for, by name.

mod synthetic;

use anyhow::bail;

use crate::commands::PhaseContext;

/// Runs phase `name` to completion (or cancellation) on the calling thread.
pub fn run(name: &str, ctx: &PhaseContext) -> anyhow::Result<()> {
    match name {
        synthetic::NAME => synthetic::run(ctx),
        other => bail!("unknown phase {other:?} (this agent knows: {})", synthetic::NAME),
    }
}
