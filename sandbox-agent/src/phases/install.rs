//! install (timed, metric `install` in seconds): a fresh user per trial (`benchmark<t+1>`, uid
//! 2001+t), the install command timed from just before it starts to its exit, then untimed
//! checks; the sandbox's first install trial (0 unless trials are split across sandbox pairs)
//! also records the footprint baseline and lays the fixture workspace. Process
//! hygiene before and after; survivors fail the trial.

use std::path::Path;

use anyhow::{Context, bail};
use sandbench_proto::plan::{AgentPlan, Check, Fixture, Step, benchmark_user};

use super::common::{self, AgentState};
use crate::commands::PhaseContext;
use crate::probes::disk;
use crate::users::{User, chown_tree};

pub const METRIC: &str = sandbench_proto::metric::INSTALL;

pub fn run(ctx: &PhaseContext, plan: &AgentPlan, trial: u32) -> anyhow::Result<()> {
    let (name, uid) = benchmark_user(trial);
    // A leftover of an earlier attempt (same uid) must not run during the timed install.
    crate::probes::processes::stop_user_processes(&name, uid)?;
    let outcome = install(ctx, plan, trial, &name, uid);
    let user = common::accounts().find(&name).ok().flatten();
    let cleanup = match &user {
        Some(user) => common::hygiene(user),
        None => Ok(()),
    };
    match (outcome, cleanup) {
        (Ok(seconds), Ok(())) => {
            ctx.value(METRIC, trial, seconds, "s");
            let mut state = AgentState::load(&ctx.state_dir)?;
            if state.first_install_trial == Some(trial) {
                state.first_install_ok = true;
                state.save(&ctx.state_dir)?;
            }
            Ok(())
        }
        (Err(err), _) | (Ok(_), Err(err)) => {
            ctx.error(METRIC, trial, &err, "s");
            Err(err)
        }
    }
}

fn install(ctx: &PhaseContext, plan: &AgentPlan, trial: u32, name: &str, uid: u32) -> anyhow::Result<f64> {
    let user = common::accounts().create_fresh(name, uid)?;
    let excludes = &plan.install.footprint_excludes;
    let before = disk::apparent_size(&user.home, excludes)?;
    ctx.note(&format!("$ {}  (as {}, timed)", plan.install.command.run, user.name));
    let finished = common::run_step(ctx, &plan.install.command, &user, &user.home, &plan.env)?;
    let seconds = finished.elapsed.as_secs_f64();
    finished.success("the install command")?;
    for check in &plan.install.checks {
        verify(ctx, plan, &user, check)?;
    }
    let mut state = AgentState::load(&ctx.state_dir)?;
    if state.first_install_trial.is_none_or(|first| first == trial) {
        // This sandbox's first installation: its user is the one later phases use.
        state.first_install_trial = Some(trial);
        state.home_before_install_bytes = Some(before);
        state.first_install_ok = false;
        state.save(&ctx.state_dir)?;
        if let Some(fixture) = &plan.install.fixture {
            lay_fixture(ctx, plan, &user, fixture)?;
        }
    }
    Ok(seconds)
}

fn verify(ctx: &PhaseContext, plan: &AgentPlan, user: &User, check: &Check) -> anyhow::Result<()> {
    match check {
        Check::Output { run, contains } => {
            let step = Step { run: run.clone(), cwd: None, timeout_s: 60.0, env: Default::default() };
            let done = common::run_step(ctx, &step, user, &user.home, &plan.env)?;
            let text = done.output_text();
            if !text.contains(contains.as_str()) {
                bail!("check failed: the output of `{run}` does not contain {contains:?}: {}", text.trim());
            }
        }
        Check::FileExists { path } => {
            let path = common::expand(user, &user.home, path);
            if !path.exists() {
                bail!("check failed: {} does not exist", path.display());
            }
        }
        Check::FileStartsWith { path, prefix } => {
            let path = common::expand(user, &user.home, path);
            let mut head = vec![0u8; prefix.len()];
            let read = std::fs::File::open(&path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head));
            if read.is_err() || head != *prefix {
                bail!("check failed: {} does not start with {:?}", path.display(), String::from_utf8_lossy(prefix));
            }
        }
    }
    Ok(())
}

/// The files of the fixture, as a git repository with one commit by a fixed author at a fixed
/// date when asked, so every trial sees the same workspace.
fn lay_fixture(ctx: &PhaseContext, plan: &AgentPlan, user: &User, fixture: &Fixture) -> anyhow::Result<()> {
    for (path, text) in &fixture.home_files {
        write_owned(user, &user.home.join(path), text)?;
    }
    let dir = user.home.join(&fixture.dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (path, text) in &fixture.files {
        write_owned(user, &dir.join(path), text)?;
    }
    chown_tree(&dir, user.uid, user.gid)?;
    if fixture.git {
        let step = Step {
            run: "git init --quiet --initial-branch=main && git add -A && git -c user.name=Benchmark \
                  -c user.email=benchmark@example.invalid commit --quiet -m 'chore: initialize benchmark fixture'"
                .into(),
            cwd: None,
            timeout_s: 60.0,
            env: [
                ("GIT_AUTHOR_DATE".to_string(), "2000-01-01T00:00:00Z".to_string()),
                ("GIT_COMMITTER_DATE".to_string(), "2000-01-01T00:00:00Z".to_string()),
            ]
            .into(),
        };
        common::run_step(ctx, &step, user, &dir, &plan.env)?.success("creating the fixture repository")?;
    }
    Ok(())
}

fn write_owned(user: &User, path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
        std::os::unix::fs::lchown(parent, Some(user.uid), Some(user.gid))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid))?;
    Ok(())
}
