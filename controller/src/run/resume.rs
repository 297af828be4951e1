//! Resuming a run whose controller died (`sandbench run --resume DIR`).
//!
//! A run is resumed from its directory: its mark ([`super::mark`]) says who ran it and with
//! what, and the log which slots are complete ([`super::accounting`]); a new attempt runs the
//! missing slots in new sandboxes, named `<role>-r<attempt>` (`base-r2`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::watch;

use super::accounting::{Accounting, Resumed};
use super::conduct::{RunResult, Start, conduct};
use super::mark::{MARK_FILE, Mark, spec_digest};
use super::reconcile::{lifetimes, read_report, reconcile_in};
use super::resolve;
use crate::cost::ledger::Ledger;
use crate::provision::{AgentShipping, Engine, Provisioner};
use crate::report::{Report, Status};

/// `sandbench run --resume DIR`: what the command line may say besides the directory. The spec
/// and revisions, when given, must be the run's.
#[derive(Debug, Clone)]
pub struct ResumeOptions {
    pub dir: PathBuf,
    pub spec: Option<PathBuf>,
    pub base: Option<String>,
    pub head: Option<String>,
    pub agent: Option<PathBuf>,
    pub shipping: AgentShipping,
    pub ledger: Option<PathBuf>,
    /// How long to wait for an unreachable engine (`--engine-wait`, this machine's choice).
    pub engine_wait: Duration,
    /// The dead-man window of the agents (`--dead-man`, this machine's choice).
    pub dead_man: Duration,
}

/// Continues the run in `opts.dir` on `engine`'s sandboxes.
pub async fn resume(engine: &Engine, opts: ResumeOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<RunResult> {
    let (mark, _) = check(&opts)?;
    resume_on(opts, mark, cancel, engine.provisioner().await?).await
}

/// Why the directory cannot be resumed, if it cannot: its mark and report otherwise.
pub fn check(opts: &ResumeOptions) -> anyhow::Result<(Mark, Report)> {
    let dir = &opts.dir;
    if !dir.is_dir() {
        bail!("cannot resume {}: no such run directory", dir.display());
    }
    let Some(mark) = Mark::load(dir)? else {
        bail!(
            "cannot resume {}: it has no {MARK_FILE} (not a run directory, or one written before --resume existed)",
            dir.display()
        );
    };
    let report = read_report(dir)?;
    if report.record {
        bail!(
            "cannot resume {}: it is a record of one revision (sandbench record), which is not resumed; record the \
             revision again (a --backfill goes on from the commits it recorded)",
            dir.display()
        );
    }
    match report.status {
        Status::Running | Status::Abandoned => {}
        Status::Completed => {
            bail!("cannot resume {}: run {} completed; nothing is missing", dir.display(), mark.run_id)
        }
        other => bail!(
            "cannot resume {}: run {} ended {} (only a run whose controller died can be resumed)",
            dir.display(),
            mark.run_id,
            other.as_str()
        ),
    }
    if mark.alive() {
        bail!("cannot resume {}: its controller (pid {}, {}) is still running", dir.display(), mark.pid, mark.owner);
    }
    if let Some(spec) = &opts.spec {
        let given = spec.canonicalize().with_context(|| format!("cannot read the spec {}", spec.display()))?;
        let recorded = mark.spec.canonicalize().unwrap_or_else(|_| mark.spec.clone());
        if given != recorded {
            bail!("cannot resume {}: it ran the spec {}, not {}", dir.display(), recorded.display(), given.display());
        }
    }
    for (given, recorded, name) in [(&opts.base, &mark.base, "--base"), (&opts.head, &mark.head, "--head")] {
        if let Some(given) = given
            && *given != recorded.rev
            && !given.eq_ignore_ascii_case(&recorded.commit)
        {
            bail!("cannot resume {}: {name} was {} ({}), not {given}", dir.display(), recorded.rev, recorded.commit);
        }
    }
    Ok((mark, report))
}

/// Continues a checked run on `provisioner`: its ledger entry reconciled first (the dead
/// attempt's sandboxes charged), then a new attempt over the missing slots.
pub async fn resume_on(
    opts: ResumeOptions,
    mark: Mark,
    cancel: watch::Receiver<bool>,
    provisioner: Arc<dyn Provisioner>,
) -> anyhow::Result<RunResult> {
    let dir = opts.dir.canonicalize().with_context(|| format!("cannot resolve {}", opts.dir.display()))?;
    // Opened once for the whole attempt; dead attempts are reconciled in it first.
    let mut ledger = opts.ledger.as_deref().map(Ledger::open).transpose()?;
    if let Some(ledger) = ledger.as_mut() {
        for line in reconcile_in(&*provisioner, ledger).await {
            tracing::info!("{line}");
        }
    }
    let out = dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut run_opts = mark.options(out, opts.agent.clone(), opts.shipping, opts.ledger.clone());
    run_opts.engine_wait = opts.engine_wait;
    run_opts.dead_man = opts.dead_man;
    let spec = run_opts.spec.clone();
    let mut resolved = resolve::again(run_opts, (mark.base.clone(), mark.head.clone()), ledger)?;
    // The plan is the spec's again (the trials and pairs of the run applied): the spec must not
    // have changed, or the trials kept would not be the trials of this plan.
    if spec_digest(&spec)? != mark.spec_sha256 {
        bail!("cannot resume {}: the spec {} changed since the run started", dir.display(), spec.display());
    }
    let accounting = Accounting::read(&dir, &mark.run_id)?;
    let mut report = read_report(&dir)?;
    // The dead attempts' sandboxes, as reconciling charged them; without a ledger to reconcile,
    // measured here the same way.
    let mut earlier = std::mem::take(&mut report.sandboxes);
    if report.status != Status::Abandoned {
        earlier = lifetimes(&*provisioner, &dir, &mark.run_id, mark.usd_per_hour).await.0;
    }
    report.status = Status::Running;
    report.finished_at = None;
    report.errors.clear();
    report.warnings.clear();
    report.noise = resolved.noise.take();
    let attempt = mark.attempt + 1;
    let mine = Mark { owner: crate::provision::docker::owner_id(), pid: std::process::id(), attempt, ..mark.clone() };
    mine.write(&dir)?;
    let start = Start { resolved, dir, report, resumed: Some(Resumed { attempt, accounting }), earlier };
    conduct(start, cancel, async move { Ok(provisioner) }).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::ledger::Ledger;
    use crate::observations::store::StoredBody;
    use crate::run::RunOptions;
    use crate::run::reconcile::reconcile;

    #[test]
    fn the_command_line_takes_a_run_directory_instead_of_a_spec_and_revisions() {
        use clap::Parser;
        let parse = |args: &[&str]| crate::cli::Cli::try_parse_from([&["sandbench", "run"], args].concat());
        let cli = parse(&["--resume", "runs/x"]).unwrap();
        let crate::cli::Command::Run(args) = cli.command else { panic!() };
        assert_eq!(args.resume, Some(PathBuf::from("runs/x")));
        assert!(args.spec.is_none() && args.base.is_none());
        assert!(parse(&["--resume", "runs/x", "bench.toml", "--base", "a", "--head", "b"]).is_ok());
        // The run's own trials, pairs and budget are kept: changing them is a usage error.
        for extra in [["--trials", "3"], ["--pairs", "2"], ["--budget", "1"]] {
            let err = parse(&[&["--resume", "runs/x"][..], &extra[..]].concat()).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{extra:?}");
        }
        // Without --resume, the spec and both revisions are required.
        assert!(parse(&["bench.toml", "--base", "a"]).is_err());
        assert!(parse(&["--base", "a", "--head", "b"]).is_err());
    }

    /// The fake product's spec for these tests.
    /// Measure and runtime: a start and a command (a phase with nothing to do has no trials).
    fn spec_toml() -> String {
        spec_with("install = 2\nmeasure = 4\nruntime = 2\nfailure_limit = 2")
            + "\n[[runtime.command]]\nmetric = \"git_status\"\nrun = \"git status --porcelain\"\n"
    }

    fn spec_with(trials: &str) -> String {
        crate::provision::fake::spec_text(
            trials,
            r#"[install]
command = "sh install.sh"

[measure]
startup = ["product"]
"#,
        )
    }

    const FAKE_RUN: &str = "20260101-000000-fake";

    /// Each metric of each side has every trial it should, once.
    fn assert_every_trial_once(report: &crate::report::Report) {
        for side in [&report.base_side, &report.head_side] {
            for (metric, samples) in &side.metrics {
                let trials: Vec<u32> = samples.iter().map(|s| s.trial).collect();
                let expected = report.expected.get(metric).copied().unwrap_or(1);
                assert_eq!(trials, (0..expected).collect::<Vec<_>>(), "{metric}: every trial once");
            }
        }
    }

    /// A completed run on the fake provisioner, then cut back as a SIGKILL mid-measure would
    /// leave it: the log up to head's measure trial 1 (its observations, not its phase_done),
    /// report.json running, the ledger entry unfinished, controller.json naming a dead process.
    async fn killed_run() -> (tempfile::TempDir, RunOptions, PathBuf, Mark) {
        killed_run_of(&spec_toml(), crate::provision::fake::Script::for_plan, "measure-1").await
    }

    /// A run of `spec` on the fake answering from `script`, cut back as a SIGKILL in head's
    /// trial `cut` (`measure-1`) would leave it.
    async fn killed_run_of(
        spec_text: &str,
        script: impl Fn(&crate::spec::Plan) -> crate::provision::fake::Script,
        cut: &str,
    ) -> (tempfile::TempDir, RunOptions, PathBuf, Mark) {
        use crate::provision::fake::FakeProvisioner;
        let tmp = tempfile::tempdir().unwrap();
        let spec = tmp.path().join("bench.toml");
        std::fs::write(&spec, spec_text).unwrap();
        let plan = crate::spec::load(&spec).unwrap_or_else(|e| panic!("{e}"));
        let opts = RunOptions {
            run_timeout: Duration::from_secs(120),
            ledger: Some(tmp.path().join("ledger.sqlite")),
            engine_wait: Duration::from_secs(10),
            ..RunOptions::new(spec, "v1", "v2", tmp.path().join("runs"))
        };
        let fake = Arc::new(FakeProvisioner::new(script(&plan)));
        let connect = async move { Ok(fake as Arc<dyn Provisioner>) };
        let result = crate::run::run_on(opts.clone(), watch::channel(false).1, connect, FAKE_RUN.into()).await.unwrap();
        assert_eq!(result.status, Status::Completed, "{:?}", result.report.errors);
        let dir = result.dir;
        let log = dir.join(crate::observations::store::OBSERVATIONS_FILE);
        let text = std::fs::read_to_string(&log).unwrap();
        let head = format!("sandbench-{FAKE_RUN}-head");
        let at = text
            .lines()
            .position(|l| l.contains(&head) && l.contains("\"phase_done\"") && l.contains(&format!("\"{cut}\"")))
            .unwrap();
        let kept: Vec<&str> = text.lines().take(at).collect();
        assert!(kept.last().is_some_and(|l| l.contains(cut)), "head's {cut} is cut mid-way");
        std::fs::write(&log, kept.join("\n") + "\n").unwrap();
        let mut report = read_report(&dir).unwrap();
        report.status = Status::Running;
        report.sandboxes.clear();
        report.finished_at = None;
        crate::run::write_reports(&dir, &mut report).unwrap();
        let killed =
            crate::cost::ledger::RunStart { owner: String::new(), ..report.run_start("", String::new(), &dir, 0.0) };
        assert!(Ledger::open(opts.ledger.as_ref().unwrap()).unwrap().reopen_run(&killed).unwrap());
        let mut mark = Mark::load(&dir).unwrap().unwrap();
        let (host, rest) = mark.owner.split_once('/').unwrap();
        mark.owner = format!("{host}/{}/1", rest.split('/').next().unwrap());
        mark.write(&dir).unwrap();
        (tmp, opts, dir, mark)
    }

    fn resume_options(dir: &Path, ledger: Option<PathBuf>) -> ResumeOptions {
        ResumeOptions {
            dir: dir.to_path_buf(),
            spec: None,
            base: None,
            head: None,
            agent: None,
            shipping: AgentShipping::Bind,
            ledger,
            engine_wait: Duration::from_secs(10),
            dead_man: crate::observations::server::DEFAULT_DEAD_MAN,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_run_is_resumed_on_the_fake_with_every_trial_once() {
        use crate::provision::fake::{FakeProvisioner, Script};
        let (_tmp, opts, dir, mark) = killed_run().await;
        let ledger = opts.ledger.clone().unwrap();
        // Refused with what was given wrong.
        let mut wrong = resume_options(&dir, Some(ledger.clone()));
        wrong.base = Some("v9".into());
        assert!(check(&wrong).unwrap_err().to_string().contains("--base was v1"));
        let mut wrong = resume_options(&dir, None);
        wrong.spec = Some(dir.join("plan.json"));
        assert!(check(&wrong).unwrap_err().to_string().contains("it ran the spec"));
        let (checked, _) = check(&resume_options(&dir, Some(ledger.clone()))).unwrap();
        assert_eq!(checked, mark);

        let plan = crate::spec::load(&opts.spec).unwrap();
        let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
        let result =
            resume_on(resume_options(&dir, Some(ledger.clone())), mark, watch::channel(false).1, fake).await.unwrap();
        let report = &result.report;
        assert_eq!(result.status, Status::Completed, "{:?}", report.errors);
        assert!(report.complete());
        assert_every_trial_once(report);
        // Only the missing slots ran in the new sandboxes (after prepare, and head's untimed
        // install before its measure trials).
        let events =
            crate::observations::store::read_events(&dir.join(crate::observations::store::OBSERVATIONS_FILE)).unwrap();
        let started = |role: &str| -> Vec<String> {
            events
                .iter()
                .filter(|e| e.sandbox == format!("sandbench-{FAKE_RUN}-{role}"))
                .filter_map(|e| match &e.body {
                    StoredBody::PhaseStarted { command_id, .. } => Some(command_id.clone()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            started("head-r2"),
            ["prepare-0", "install-0", "measure-1", "measure-2", "measure-3", "runtime-0", "runtime-1"]
        );
        assert_eq!(
            started("base-r2"),
            ["prepare-0", "install-0", "measure-1", "measure-2", "measure-3", "runtime-0", "runtime-1"]
        );
        // Charged for the sandboxes of both attempts; the ledger entry completed.
        assert_eq!(report.sandboxes.len(), 4);
        let (row, _) = Ledger::open(&ledger).unwrap().run(FAKE_RUN).unwrap().unwrap();
        assert_eq!((row.status.as_str(), row.sandboxes), ("completed", 4));
        // Nothing is left to resume.
        let err = check(&resume_options(&dir, None)).unwrap_err().to_string();
        assert!(err.contains("completed; nothing is missing"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_directory_from_before_registrations_kept_placements_resumes_by_its_sandbox_names() {
        use crate::provision::fake::{FakeProvisioner, Script};
        let (_tmp, opts, dir, mark) = killed_run().await;
        // The token file as an older controller wrote it: tokens only, no role or placement.
        let tokens = dir.join(".agent-tokens.json");
        let mut file: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&std::fs::read(&tokens).unwrap()).unwrap();
        for record in file.values_mut() {
            let record = record.as_object_mut().unwrap();
            assert!(record.remove("role").is_some() && record.remove("placement").is_some(), "{record:?}");
        }
        std::fs::write(&tokens, serde_json::to_vec(&file).unwrap()).unwrap();
        let roster = crate::run::Roster::read(&dir, FAKE_RUN).unwrap();
        assert_eq!(roster.side(&format!("sandbench-{FAKE_RUN}-head")), Some(crate::run::schedule::Side::Head));

        let plan = crate::spec::load(&opts.spec).unwrap();
        let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
        let result =
            resume_on(resume_options(&dir, opts.ledger.clone()), mark, watch::channel(false).1, fake).await.unwrap();
        assert_eq!(result.status, Status::Completed, "{:?}", result.report.errors);
        assert_every_trial_once(&result.report);
        // What the dead attempt completed was told apart by its sandboxes' names: not run again.
        let events =
            crate::observations::store::read_events(&dir.join(crate::observations::store::OBSERVATIONS_FILE)).unwrap();
        let started: Vec<&str> = events
            .iter()
            .filter(|e| e.sandbox == format!("sandbench-{FAKE_RUN}-base-r2"))
            .filter_map(|e| match &e.body {
                StoredBody::PhaseStarted { command_id, .. } => Some(command_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            started,
            ["prepare-0", "install-0", "measure-1", "measure-2", "measure-3", "runtime-0", "runtime-1"]
        );
        // The new attempt's sandboxes are registered with their placement; the old ones are
        // still told by their names.
        let roster = crate::run::Roster::read(&dir, FAKE_RUN).unwrap();
        let registered = crate::observations::server::registrations(&dir).unwrap();
        let head2 = &registered[&format!("sandbench-{FAKE_RUN}-head-r2")];
        assert_eq!(head2.placement.map(|p| (p.side, p.attempt)), Some((crate::run::schedule::Side::Head, 2)));
        assert_eq!(roster.role(&format!("sandbench-{FAKE_RUN}-base")), Some("base"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_interleaved_run_killed_mid_round_runs_only_the_trial_left_unfinished() {
        use crate::provision::fake::{FAKE_SEGMENTS, FakeProvisioner, Script};
        // Measure trial 0 starts with base, whose last run ends before head's (A B B A A B):
        // cut in head's trial 0, base's is complete, and everything after is cut too.
        let spec = spec_with("install = 1\nmeasure = 3\nruntime = 1\norder = \"interleaved\"\nfailure_limit = 2");
        let (_tmp, opts, dir, mark) = killed_run_of(&spec, Script::for_plan, "measure-0").await;
        let plan = crate::spec::load(&opts.spec).unwrap();
        let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
        let result = resume_on(resume_options(&dir, opts.ledger.clone()), mark, watch::channel(false).1, fake.clone())
            .await
            .unwrap();
        let report = &result.report;
        assert_eq!(result.status, Status::Completed, "{:?}", report.errors);
        assert_every_trial_once(report);
        // Head's trial 0 runs alone (a plain trial: no turns), base's is not run again; the
        // rounds no side finished run whole, interleaved again.
        let events =
            crate::observations::store::read_events(&dir.join(crate::observations::store::OBSERVATIONS_FILE)).unwrap();
        let started = |role: &str, command: &str| {
            events.iter().any(|e| {
                e.sandbox == format!("sandbench-{FAKE_RUN}-{role}")
                    && matches!(&e.body, StoredBody::PhaseStarted { command_id, .. } if command_id == command)
            })
        };
        assert!(started("head-r2", "measure-0") && !started("base-r2", "measure-0"));
        let timeline = fake.timeline();
        let of = |t: u32| timeline.iter().filter(|e| e.contains(&format!(" measure {t} "))).count();
        let whole = 2 * FAKE_SEGMENTS as usize;
        assert_eq!((of(0), of(1), of(2)), (0, whole, whole), "{timeline:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_adaptive_run_killed_while_adding_pairs_is_resumed_to_the_same_look() {
        use crate::provision::fake::{FakeProvisioner, Script};
        // Looks at 3, 6 and 9 pairs; head's start swings in the planned trials, so the run
        // grows measure; it is killed in head's measure trial 4, which only growing runs.
        let spec = spec_with("install = 1\nmeasure = 3\nruntime = 2\nmax_pairs = 9\nfailure_limit = 2");
        let script = |plan: &crate::spec::Plan| crate::run::tests::swinging_start(Script::for_plan(plan));
        let (_tmp, opts, dir, mark) = killed_run_of(&spec, script, "measure-4").await;
        let plan = crate::spec::load(&opts.spec).unwrap();
        let fake = Arc::new(FakeProvisioner::new(script(&plan)));
        let result =
            resume_on(resume_options(&dir, opts.ledger.clone()), mark, watch::channel(false).1, fake).await.unwrap();
        let report = &result.report;
        assert_eq!(result.status, Status::Completed, "{:?}", report.errors);
        assert_eq!(report.sequential.as_ref().map(|s| s.look), Some(3));
        for side in [&report.base_side, &report.head_side] {
            let trials: Vec<u32> = side.metrics["cold"].iter().map(|s| s.trial).collect();
            assert_eq!(trials, (0..9).collect::<Vec<_>>(), "every grown trial once");
        }
        // The resumed head ran only what was missing: its own installation (untimed), then
        // measure from the cut trial on; runtime was done.
        let events =
            crate::observations::store::read_events(&dir.join(crate::observations::store::OBSERVATIONS_FILE)).unwrap();
        let started: Vec<String> = events
            .iter()
            .filter(|e| e.sandbox == format!("sandbench-{FAKE_RUN}-head-r2"))
            .filter_map(|e| match &e.body {
                StoredBody::PhaseStarted { command_id, .. } => Some(command_id.clone()),
                _ => None,
            })
            .collect();
        let grown: Vec<String> = (4..9).map(|t| format!("measure-{t}")).collect();
        assert_eq!(started, [["prepare-0".to_string(), "install-0".into()].as_slice(), grown.as_slice()].concat());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_run_is_reconciled_as_abandoned_and_a_live_one_is_left_alone() {
        use crate::provision::fake::{FakeProvisioner, Script};
        let (_tmp, opts, dir, mark) = killed_run().await;
        let ledger = opts.ledger.clone().unwrap();
        let fake = FakeProvisioner::new(Script::default());
        // While its controller runs (this process), nothing is done, and resuming is refused.
        let alive = Mark { owner: crate::provision::docker::owner_id(), ..mark.clone() };
        alive.write(&dir).unwrap();
        assert!(reconcile(&fake, &ledger).await.is_empty());
        assert!(check(&resume_options(&dir, None)).unwrap_err().to_string().contains("is still running"));
        mark.write(&dir).unwrap();
        let lines = reconcile(&fake, &ledger).await;
        assert!(lines.len() == 1 && lines[0].contains("abandoned") && lines[0].contains("--resume"), "{lines:?}");
        let (row, _) = Ledger::open(&ledger).unwrap().run(FAKE_RUN).unwrap().unwrap();
        assert_eq!((row.status.as_str(), row.sandboxes), ("abandoned", 2));
        // The containers are gone: charged from the first to the last event each sent.
        assert!(row.seconds >= 0.0 && row.finished_at.is_some());
        let report = read_report(&dir).unwrap();
        assert_eq!(report.status, Status::Abandoned);
        assert!(report.errors.iter().any(|e| e.contains("sandbench run --resume")));
        assert!(reconcile(&fake, &ledger).await.is_empty(), "reconciled once");
        // An abandoned run can be resumed; a directory that is not a run cannot.
        assert!(check(&resume_options(&dir, None)).is_ok());
        let err = check(&resume_options(&dir.join("nope"), None)).unwrap_err().to_string();
        assert!(err.contains("no such run directory"), "{err}");
        let err = check(&resume_options(dir.parent().unwrap(), None)).unwrap_err().to_string();
        assert!(err.contains("has no controller.json"), "{err}");
        assert!(reconcile(&fake, &dir.join("no-ledger.sqlite")).await.is_empty());
        assert!(!dir.join("no-ledger.sqlite").exists(), "a missing ledger is not created");
    }
}
