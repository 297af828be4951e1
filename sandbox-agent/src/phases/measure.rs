//! measure: start-up in a terminal, cold then warm (metrics `cold`, `warm`, seconds, each with
//! the companions of the user's live processes from just before the spawn to the echo: `cold.cpu`,
//! `cold.maxrss`, … see [`usage::live`]), memory of
//! the user's processes after the cold start has settled (`rss`, and `pss` when every process
//! has it), and in trial 0 the installed footprint after first use (`disk`). The reference's
//! failure rules: a failed cold start means no warm sample; a failed settle is an `rss` error and
//! no warm sample; a failed memory sample is an `rss` error but warm still runs.

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail};
use sandbench_proto::plan::{AgentPlan, Startup};

use super::common::{self, AgentState};
use crate::context::PhaseContext;
use crate::probes::terminal::{Launch, Terminal};
use crate::probes::{disk, memory, readiness, usage};
use crate::users::User;

pub fn run(ctx: &PhaseContext, plan: &AgentPlan, trial: u32) -> anyhow::Result<()> {
    let state = AgentState::load(&ctx.state_dir)?;
    let user = match state.measure_user() {
        Ok(user) => user,
        Err(err) => {
            ctx.error(sandbench_proto::metric::COLD, trial, &err, "s");
            return Err(err);
        }
    };
    common::hygiene(&user)?;
    // The samples count only if no process of the user survives the window: a service
    // respawning them could have been there all along (checked again after, race-free).
    ctx.hold();
    let mut cold_ok = false;
    let result = match &plan.measure.startup {
        Some(startup) => startups(ctx, plan, startup, &user, trial, &mut cold_ok),
        None => Ok(()),
    };
    let cleanup = common::hygiene(&user);
    ctx.release(cleanup.as_ref().err());
    cold_ok &= cleanup.is_ok();
    // The untimed rest (the footprint, the cold start's lens) at a turn of its own.
    let lens = plan.measure.instructions && plan.measure.startup.is_some();
    if lens && !ctx.untimed_turn() {
        return result.and(cleanup);
    }
    if trial == 0 && plan.measure.footprint && (cold_ok || plan.measure.startup.is_none()) {
        let footprint = state
            .home_before_install_bytes
            .ok_or_else(|| anyhow!("no footprint baseline: install trial 0 did not record one"))
            .and_then(|before| {
                let after = disk::apparent_size(&user.home, &plan.install.footprint_excludes)?;
                Ok(after.saturating_sub(before))
            });
        match footprint {
            Ok(bytes) => ctx.value(sandbench_proto::metric::DISK, 0, bytes as f64, "bytes"),
            Err(err) => ctx.error(sandbench_proto::metric::DISK, 0, &err, "bytes"),
        };
    }
    if let (true, Some(startup)) = (plan.measure.instructions, &plan.measure.startup) {
        super::lens::cold_start(ctx, plan, startup, &user, trial);
    }
    result.and(cleanup)
}

/// The startup measurement: the cold start, the memory after it settles, the step between, then
/// the warm start. `cold_ok` says whether the cold start was ready.
fn startups(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    startup: &Startup,
    user: &User,
    trial: u32,
    cold_ok: &mut bool,
) -> anyhow::Result<()> {
    let workdir =
        startup.cwd.as_deref().map(|c| common::expand(user, &user.home, c)).unwrap_or_else(|| user.home.clone());
    let launch = Launch {
        program: startup.command[0].clone().into(),
        args: startup.command[1..].to_vec(),
        env: common::user_env(user, &plan.env, &Default::default()),
        cwd: workdir.clone(),
        user: Some((user.uid, user.gid)),
    };
    let timeout = Duration::from_secs_f64(startup.timeout_s);
    let Some(term) = cold_start(ctx, &launch, user, trial, timeout) else { return Ok(()) };
    *cold_ok = true;
    if !settled_memory(ctx, plan, term, user, trial) {
        return Ok(());
    }
    // A stepwise trial's cold start is a segment of its own: the warm one comes at the next turn.
    if !ctx.yield_turn() {
        return Ok(());
    }
    if let Some(between) = &plan.measure.between {
        common::run_step(ctx, between, user, &workdir, &plan.env)?.success("the step between cold and warm")?;
    }
    warm_start(ctx, plan, &launch, user, trial, timeout)
}

/// The cold start: its time to ready (metric `cold`) and what the user's processes used meanwhile.
/// Returns the terminal once ready; on failure records the error, closes it and returns `None`.
fn cold_start(ctx: &PhaseContext, launch: &Launch, user: &User, trial: u32, timeout: Duration) -> Option<Terminal> {
    let before = usage::live(Path::new("/proc"), user.uid);
    let mut term = match Terminal::spawn(launch) {
        Ok(term) => term,
        Err(err) => {
            ctx.error(sandbench_proto::metric::COLD, trial, &err, "s");
            return None;
        }
    };
    match readiness::ready(&mut term, timeout) {
        Ok(elapsed) => {
            let used = usage::live(Path::new("/proc"), user.uid).since(&before);
            ctx.value(sandbench_proto::metric::COLD, trial, elapsed.as_secs_f64(), "s");
            common::record_usage(ctx, sandbench_proto::metric::COLD, trial, &used);
            Some(term)
        }
        Err(err) => {
            ctx.error(sandbench_proto::metric::COLD, trial, &err, "s");
            close(ctx, term, &format!("cold-{trial}"));
            None
        }
    }
}

/// Lets the cold start settle, then samples the memory of the user's processes (`rss`, `pss`)
/// and closes the terminal. False when it did not settle (an `rss` error: no warm start).
fn settled_memory(ctx: &PhaseContext, plan: &AgentPlan, mut term: Terminal, user: &User, trial: u32) -> bool {
    if let Err(err) = term.settle(Duration::from_secs_f64(plan.measure.settle_s)) {
        ctx.error(sandbench_proto::metric::RSS, trial, &err, "bytes");
        close(ctx, term, &format!("cold-{trial}"));
        return false;
    }
    let sample = memory::sample(Path::new("/proc"), user.uid);
    if sample.processes.is_empty() {
        ctx.error(
            sandbench_proto::metric::RSS,
            trial,
            &anyhow!("No owned processes found for memory measurement"),
            "bytes",
        );
    } else {
        ctx.value(sandbench_proto::metric::RSS, trial, sample.rss_bytes as f64, "bytes");
        if let Some(pss) = sample.pss_bytes {
            ctx.value(sandbench_proto::metric::PSS, trial, pss as f64, "bytes");
        }
        ctx.file(&format!("memory-{trial}.json"), &serde_json::to_vec_pretty(&sample).unwrap_or_default());
    }
    close(ctx, term, &format!("cold-{trial}"));
    true
}

/// The warm start (metric `warm`; the cold start's daemons may still run: what they used before
/// counts out), then its settle: a warm start that does not settle fails the phase.
fn warm_start(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    launch: &Launch,
    user: &User,
    trial: u32,
    timeout: Duration,
) -> anyhow::Result<()> {
    let before = usage::live(Path::new("/proc"), user.uid);
    let mut term = match Terminal::spawn(launch) {
        Ok(term) => term,
        Err(err) => {
            ctx.error(sandbench_proto::metric::WARM, trial, &err, "s");
            return Ok(());
        }
    };
    let warm = readiness::ready(&mut term, timeout);
    match &warm {
        Ok(elapsed) => {
            let used = usage::live(Path::new("/proc"), user.uid).since(&before);
            ctx.value(sandbench_proto::metric::WARM, trial, elapsed.as_secs_f64(), "s");
            common::record_usage(ctx, sandbench_proto::metric::WARM, trial, &used);
        }
        Err(err) => {
            ctx.error(sandbench_proto::metric::WARM, trial, err, "s");
        }
    };
    let settled = if warm.is_ok() { term.settle(Duration::from_secs_f64(plan.measure.settle_s)) } else { Ok(()) };
    close(ctx, term, &format!("warm-{trial}"));
    if let Err(err) = settled {
        bail!("warm settle: {err:#}");
    }
    Ok(())
}

fn close(ctx: &PhaseContext, term: Terminal, name: &str) {
    let dir = ctx.state_dir.join("transcripts");
    let _ = std::fs::create_dir_all(&dir);
    let prefix = dir.join(name);
    if let Err(err) = term.close(Some(&prefix)) {
        ctx.note(&format!("cannot write the transcript {name}: {err:#}"));
        return;
    }
    for ext in ["raw", "txt"] {
        if let Ok(bytes) = std::fs::read(prefix.with_extension(ext)) {
            ctx.file(&format!("transcripts/{name}.{ext}"), &bytes);
        }
    }
}
