//! install (timed, metric `install` in seconds): a fresh user per trial (`benchmark<t+1>`, uid
//! 2001+t, its home private to it), the install command timed from just before it starts to its exit, then untimed
//! checks; the sandbox's first install trial (0 unless trials are split across sandbox pairs)
//! also records the footprint baseline and lays the fixture workspace, after the hygiene that
//! ends the user's processes and without following any link the install planted
//! ([`crate::safefs`]). Process hygiene before and after; survivors fail the trial.

use std::path::Path;

use anyhow::{Context, bail};
use sandbench_proto::plan::{AgentPlan, Check, Fixture, Step, benchmark_user, fact};

use super::common::{self, AgentState};
use super::installed::{self, Installed};
use crate::context::PhaseContext;
use crate::probes::disk;
use crate::probes::usage::Usage;
use crate::safefs;
use crate::users::User;

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
    // Root lays the fixture only once no process of the user is left to race it.
    let outcome = match (outcome, cleanup, &user) {
        (Ok((timed, true)), Ok(()), Some(user)) => fixture_after_hygiene(ctx, plan, user).map(|()| timed),
        (Ok((timed, _)), Ok(()), _) => Ok(timed),
        (Err(err), ..) | (Ok(_), Err(err), _) => Err(err),
    };
    match outcome {
        Ok((seconds, usage)) => {
            ctx.value(METRIC, trial, seconds, "s");
            common::record_usage(ctx, METRIC, trial, &usage);
            let mut state = AgentState::load(&ctx.state_dir)?;
            if state.first_install_trial == Some(trial) {
                state.first_install_ok = true;
                state.save(&ctx.state_dir)?;
            }
            Ok(())
        }
        Err(err) => {
            ctx.error(METRIC, trial, &err, "s");
            Err(err)
        }
    }
}

/// The timed install and its checks: the seconds and what the command's process tree cost, and
/// whether this is the sandbox's first installation (whose user gets the fixture).
fn install(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    trial: u32,
    name: &str,
    uid: u32,
) -> anyhow::Result<((f64, Usage), bool)> {
    let user = common::accounts().create_private(name, uid)?;
    let excludes = &plan.install.footprint_excludes;
    let before = disk::apparent_size(&user.home, excludes)?;
    ctx.note(&format!("$ {}  (as {}, timed)", plan.install.command.run, user.name));
    let finished = common::run_step(ctx, &plan.install.command, &user, &user.home, &plan.env)?;
    let timed = (finished.elapsed.as_secs_f64(), finished.usage);
    finished.success("the install command")?;
    let mut state = AgentState::load(&ctx.state_dir)?;
    let installed = Installed::look(plan, &user, state.compiled_artifacts);
    let checked = plan.install.checks.iter().try_for_each(|check| verify(ctx, plan, &user, check, &installed));
    let first = state.first_install_trial.is_none_or(|first| first == trial);
    let mut facts = installed.facts();
    if let (Ok(()), true, Some(step)) = (&checked, first, &plan.install.inventory) {
        facts.insert(fact::DEPENDENCY_INVENTORY.to_string(), installed::inventory(ctx, plan, &user, step));
    }
    installed::send_facts(ctx, trial, &facts);
    checked?;
    if first {
        // This sandbox's first installation: its user is the one later phases use.
        state.first_install_trial = Some(trial);
        state.home_before_install_bytes = Some(before);
        state.first_install_ok = false;
        state.save(&ctx.state_dir)?;
    }
    Ok((timed, first))
}

/// Lays the fixture (when the plan has one) for the user whose processes hygiene just ended,
/// then ends again whatever the fixture's git step left running.
fn fixture_after_hygiene(ctx: &PhaseContext, plan: &AgentPlan, user: &User) -> anyhow::Result<()> {
    let Some(fixture) = &plan.install.fixture else { return Ok(()) };
    let laid = lay_fixture(ctx, plan, user, fixture);
    let cleanup = common::hygiene(user);
    laid.and(cleanup)
}

fn verify(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    user: &User,
    check: &Check,
    installed: &Installed,
) -> anyhow::Result<()> {
    match check {
        Check::Output { run, contains } => {
            let step = Step { run: run.clone(), cwd: None, timeout_s: 60.0, env: Default::default() };
            let done = common::run_step(ctx, &step, user, &user.home, &plan.env)?;
            let text = done.output_text();
            if !text.contains(contains.as_str()) {
                bail!("check failed: the output of `{run}` does not contain {contains:?}: {}", text.trim());
            }
        }
        Check::FileExists { path } => check_file(user, path, None)?,
        Check::FileStartsWith { path, prefix } => check_file(user, path, Some(prefix))?,
        Check::ExpectFormat { format } => {
            if let Some(note) = installed.expect(*format)? {
                ctx.note(note);
            }
        }
    }
    Ok(())
}

/// A file check: `path` exists, or starts with `prefix`, for the user.
fn check_file(user: &User, path: &str, prefix: Option<&[u8]>) -> anyhow::Result<()> {
    let path = installed::check_path(user, path)?;
    let Some(prefix) = prefix else {
        if !crate::as_user::exists(&path, user.uid, user.gid)? {
            bail!("check failed: {} does not exist", path.display());
        }
        return Ok(());
    };
    match crate::as_user::head(&path, user.uid, user.gid, prefix.len()) {
        Ok(head) if head == prefix => Ok(()),
        Ok(_) => bail!("check failed: {} does not start with {:?}", path.display(), String::from_utf8_lossy(prefix)),
        Err(err) => {
            bail!("check failed: {} does not start with {:?} ({err})", path.display(), String::from_utf8_lossy(prefix))
        }
    }
}

/// The files of the fixture, as a git repository with one commit by a fixed author at a fixed
/// date when asked, so every trial sees the same workspace.
fn lay_fixture(ctx: &PhaseContext, plan: &AgentPlan, user: &User, fixture: &Fixture) -> anyhow::Result<()> {
    // The user's home is theirs: its contents are reached through no link they planted, and
    // what root makes there is chowned through its descriptor.
    let home = safefs::open_dir(&user.home)?;
    let owner = Some((user.uid, user.gid));
    for (path, text) in &fixture.home_files {
        safefs::write_beneath(&home, Path::new(path), text.as_bytes(), owner)
            .with_context(|| format!("cannot lay the fixture file ~/{path}"))?;
    }
    let relative = Path::new(&fixture.dir);
    safefs::create_dirs(&home, relative, owner)
        .with_context(|| format!("cannot create the fixture folder ~/{}", fixture.dir))?;
    for (path, text) in &fixture.files {
        safefs::write_beneath(&home, &relative.join(path), text.as_bytes(), owner)
            .with_context(|| format!("cannot lay the fixture file ~/{}/{path}", fixture.dir))?;
    }
    let dir = user.home.join(relative);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_checks_stay_in_the_home_and_see_what_the_user_sees() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::lchown(&home, Some(4242), Some(4242)).unwrap();
        let user =
            User { name: "benchmark9".into(), uid: 4242, gid: 4242, home: home.clone(), shell: "/bin/sh".into() };
        let check = |path: &str, prefix: Option<&[u8]>| check_file(&user, path, prefix).map_err(|e| e.to_string());
        std::fs::write(home.join("tool"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("/proc/1/environ", home.join("environ")).unwrap();
        std::os::unix::fs::symlink("tool", home.join("bin")).unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, home.join("fifo"), rustix::fs::Mode::from_raw_mode(0o666)).unwrap();
        assert_eq!(check("~/tool", Some(b"#!")), Ok(()));
        assert_eq!(check("bin", Some(b"#!/bin/sh")), Ok(()), "a link the user may follow is followed");
        assert_eq!(check("~", None), Ok(()));
        let err = check("~/environ", Some(b"PATH=")).unwrap_err();
        assert!(err.contains("does not start with") && err.contains("ermission denied"), "{err}");
        let err = check("~/fifo", Some(b"x")).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        assert!(check("~/missing", None).unwrap_err().contains("does not exist"));
        for bad in ["/proc/1/environ", "~/../../etc/passwd", "../x", "~root/x/../.."] {
            let err = check(bad, None).unwrap_err();
            assert!(err.contains("is not inside the home"), "{bad}: {err}");
        }
    }
}
