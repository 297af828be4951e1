//! The instruction lens in the phases ([`crate::probes::lens`]): after a section's timed work, each
//! command, script and bench step (its whole suite) that asks for it (`instructions = true`) runs
//! once more under callgrind,
//! and after the measure phase's starts the cold start does. Each records `<key>.instructions`
//! and `<key>.cycles` for the trial, and its profile as the file `lens/<key>-<trial>.json`. A lens
//! run that fails is an error on those two metrics only: the timed ones stand.

use std::path::Path;

use sandbench_proto::lens::{self, Profile};
use sandbench_proto::metric::{Facet, MetricKey};
use sandbench_proto::plan::{AgentPlan, Runtime, Startup};

use super::common;
use crate::context::PhaseContext;
use crate::probes::lens::Lens;
use crate::users::User;

/// The stem of a script's lens metrics (as of its companions).
fn script_stem(name: &str) -> String {
    format!("script.{name}")
}

/// Whether a step of the section asks for the lens (in this trial: the plan sent with a trial
/// that runs no lens asks for none).
pub fn asks(section: &Runtime) -> bool {
    section.commands.iter().any(|c| c.instructions)
        || section.scripts.iter().any(|s| s.instructions)
        || section.benches.iter().any(|b| b.instructions)
}

/// Runs the lens over the section's commands, scripts and bench steps that ask for it. A
/// script's RESULT lines and a bench step's results file are not read again: the lens counts,
/// it does not measure (a bench step counts its whole suite).
pub fn section(ctx: &PhaseContext, plan: &AgentPlan, section: &Runtime, user: &User, base: &Path, trial: u32) {
    let commands = section.commands.iter().filter(|c| c.instructions).map(|c| (c.metric.clone(), &c.step));
    let scripts = section.scripts.iter().filter(|s| s.instructions).map(|s| (script_stem(&s.name), &s.step));
    let benches = section.benches.iter().filter(|b| b.instructions).map(|b| (b.stem(), &b.step));
    for (stem, step) in commands.chain(scripts).chain(benches) {
        let cwd = step.cwd.as_deref().map(|c| common::expand(user, base, c)).unwrap_or_else(|| base.to_path_buf());
        let env = common::user_env(user, &plan.env, &step.env);
        counted(
            ctx,
            user,
            &stem,
            trial,
            |lens| lens.run_command(&step.run, &cwd, &mut |stream, chunk| ctx.log(stream, chunk)),
            plan,
            &env,
        );
    }
}

/// Runs the cold start once more under the lens (`cold.instructions`, `cold.cycles`).
pub fn cold_start(ctx: &PhaseContext, plan: &AgentPlan, startup: &Startup, user: &User, trial: u32) {
    let cwd = startup.cwd.as_deref().map(|c| common::expand(user, &user.home, c)).unwrap_or_else(|| user.home.clone());
    let env = common::user_env(user, &plan.env, &Default::default());
    counted(
        ctx,
        user,
        sandbench_proto::metric::COLD,
        trial,
        |lens| lens.run_start(&startup.command[0], &startup.command[1..], &cwd, user.uid),
        plan,
        &env,
    );
}

/// One lens run of `stem` between two stops of the user's processes, recorded.
fn counted(
    ctx: &PhaseContext,
    user: &User,
    stem: &str,
    trial: u32,
    run: impl FnOnce(&mut Lens) -> anyhow::Result<Profile>,
    plan: &AgentPlan,
    env: &std::collections::BTreeMap<String, String>,
) {
    if ctx.canceled() {
        return;
    }
    // Both counts, in their unit as observations carry it.
    let keys = Facet::LENS.map(|facet| (MetricKey::new(stem, facet).to_string(), facet.unit().unwrap_or_default()));
    let result = common::hygiene(user).and_then(|()| {
        let profile = Lens::new(&plan.lens, user, env).and_then(|mut l| run(&mut l));
        let cleanup = common::hygiene(user);
        let profile = profile?;
        cleanup?;
        Ok(profile)
    });
    match result {
        Ok(profile) => {
            for ((key, unit), count) in keys.iter().zip([profile.instructions, profile.cycles]) {
                ctx.value(key, trial, count as f64, unit);
            }
            ctx.file(&lens::profile_path(stem, trial), &serde_json::to_vec_pretty(&profile).unwrap_or_default());
        }
        Err(err) => {
            let err = err.context(format!("the instruction lens of {stem}"));
            for (key, unit) in &keys {
                ctx.error(key, trial, &err, unit);
            }
        }
    }
}
