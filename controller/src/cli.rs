//! Command-line parsing and dispatch. `main` prints the error chain once and sets the exit code.

use std::process::ExitCode;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::bench::{BenchArgs, Shipping};
use crate::cost::ledger::Ledger;
use crate::cost::view::{self, CostArgs};
pub use crate::options::{
    DeadMan, RunFlags, available_cpus, check_pairs, exit, exit_code, parse_dead_man, parse_engine_wait,
};

/// The exit statuses, as `--help` and the README state them.
const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  completed (regressions are information, not failure); other commands: success
  1  failed, or the command could not do its work (the error says why)
  2  invalid command line; `check`: the spec has errors
  3  partial: the run ended with measurements missing
  4  canceled (Ctrl-C or SIGTERM)";

#[derive(Debug, Parser)]
#[command(
    name = "sandbench",
    version,
    about = "Benchmark two revisions of a project in fresh, identical Docker sandboxes",
    after_help = EXIT_STATUS_HELP
)]
pub struct Cli {
    /// Log filter for the controller's own diagnostics on stderr (`level` and `target=level`
    /// directives, comma-separated: `warn,sandbench=debug`). When not given, a run's own
    /// diagnostics go to its display and controller.log only.
    #[arg(long, global = true, env = "SANDBENCH_LOG")]
    pub log: Option<String>,
    /// The cost ledger (SQLite); default: sandbench/ledger.sqlite in the user's data folder.
    #[arg(long, global = true, env = "SANDBENCH_LEDGER")]
    pub ledger: Option<std::path::PathBuf>,
    /// How many sandboxes the Docker engine is asked to create at once (every command's
    /// sandboxes are made on one engine, connected when the first is needed).
    #[arg(long, global = true, env = "SANDBENCH_MAX_CREATES", value_name = "N",
          default_value_t = crate::provision::engine::DEFAULT_MAX_CREATES as u32,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub max_creates: u32,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare two revisions: provision, prepare, install/measure/runtime interleaved, report.
    #[command(after_help = EXIT_STATUS_HELP)]
    Run(RunArgs),
    /// Re-render report.json, report.md and report.html of a run directory from its data, and
    /// print their paths.
    Report {
        /// The run directory (runs/<run-id>).
        dir: std::path::PathBuf,
        /// Print the path of this format's file only.
        #[arg(long, value_enum)]
        format: Option<ReportFormat>,
        /// Print the file's content instead of its path (needs --format).
        #[arg(long, requires = "format")]
        stdout: bool,
    },
    /// Validate a bench spec and print the plan (or every error, with file, line and field).
    Check {
        /// The bench spec (TOML).
        spec: std::path::PathBuf,
    },
    /// One sandbox for a person: phases up to one, output shown live; --keep keeps it.
    Debug {
        /// The bench spec (TOML).
        spec: std::path::PathBuf,
        /// The revision to build.
        #[arg(long)]
        rev: String,
        /// Run phases up to this one (prepare, install, measure, runtime, transport, ui).
        #[arg(long)]
        phase: Option<String>,
        /// The trial of that phase.
        #[arg(long, default_value_t = 0)]
        trial: u32,
        /// Keep the sandbox and its controller afterwards (until rm, expiry or Ctrl-C).
        #[arg(long)]
        keep: bool,
        /// Where the debug directory goes.
        #[arg(long, default_value = "runs", env = "SANDBENCH_OUT")]
        out: std::path::PathBuf,
        /// The sandbox-agent executable to ship (default: beside this one).
        #[arg(long, env = crate::agent_binary::AGENT_ENV)]
        agent: Option<std::path::PathBuf>,
        #[command(flatten)]
        dead_man: DeadMan,
    },
    // The by-hand commands: ls, shell, logs, phase, rm, gc.
    #[command(flatten)]
    Sandbox(crate::by_hand::SandboxCommand),
    /// What runs cost: every run, runs grouped, or one run by sandbox and phase.
    Cost(CostArgs),
    /// Measure the backbone: provision-to-Hello against a bare container, observation
    /// throughput over the socket, and the agent's idle memory.
    Bench(BenchArgs),
    /// Post a run directory's report as the pull request's sticky comment, and a commit status.
    Publish(crate::publish::PublishArgs),
    /// GitHub Actions: read the pull request event, apply the trust gate, run, publish.
    Ci(Box<crate::publish::ci::CiArgs>),
    /// Combine the run directories of a run's shards (`run --shard I/N`) into one run directory:
    /// one log, one report, one ledger entry.
    #[command(after_help = EXIT_STATUS_HELP)]
    Merge(crate::merge::MergeArgs),
    /// Which commit between a good and a bad revision changed a metric: a binary search over
    /// the first-parent commits, one sandbox per commit visited (bisect.json, bisect.md).
    Bisect(BisectArgs),
    /// Main's history from the ledger: every metric by commit, its change points (history.md),
    /// a trend page (history.html) and the data (history.json).
    History(HistoryArgs),
    /// Measure one revision (or every Nth first-parent commit of a range) in one sandbox and keep
    /// its values in the ledger's history, for `sandbench history`.
    #[command(after_help = EXIT_STATUS_HELP)]
    Record(RecordArgs),
}

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["rev", "backfill"]))]
pub struct RecordArgs {
    /// The bench spec (TOML).
    pub spec: std::path::PathBuf,
    /// The revision to record.
    #[arg(long)]
    pub rev: Option<String>,
    /// Record the first-parent commits after A up to B (A..B), every --every'th counted back
    /// from B; commits recorded before (this spec, image and machine) are not recorded again.
    #[arg(long, value_name = "A..B")]
    pub backfill: Option<String>,
    /// With --backfill: record every Nth commit.
    #[arg(long, default_value_t = 1, requires = "backfill")]
    pub every: u32,
    /// USD the records may spend together (default: the spec's budget_usd, for each record).
    #[arg(long, value_parser = crate::options::parse_budget)]
    pub budget: Option<f64>,
    /// Stop one record after this many minutes.
    #[arg(long, default_value_t = 60.0)]
    pub timeout_minutes: f64,
    /// Where the records' run directories go.
    #[arg(long, default_value = "runs", env = "SANDBENCH_OUT")]
    pub out: std::path::PathBuf,
    /// The sandbox-agent executable to ship (default: beside this one).
    #[arg(long, env = crate::agent_binary::AGENT_ENV)]
    pub agent: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub dead_man: DeadMan,
}

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// The bench spec (TOML).
    pub spec: std::path::PathBuf,
    /// Where history.json, history.md and history.html go (default: runs/history-<spec name>).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// The revision whose first-parent line orders the commits (default: the repository's HEAD);
    /// records of commits off it (pull requests' heads) are left out.
    #[arg(long)]
    pub rev: Option<String>,
    /// Bisect each change point of a count over the instruction lens between its two recorded
    /// commits, when commits between them were not recorded (one sandbox per commit visited).
    #[arg(long)]
    pub bisect: bool,
    /// USD the bisections may spend (default: the spec's budget_usd).
    #[arg(long, value_parser = crate::options::parse_budget)]
    pub budget: Option<f64>,
    /// The sandbox-agent executable to ship (default: beside this one).
    #[arg(long, env = crate::agent_binary::AGENT_ENV)]
    pub agent: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub dead_man: DeadMan,
}

#[derive(Debug, clap::Args)]
pub struct BisectArgs {
    /// The bench spec (TOML).
    #[arg(required_unless_present = "resume")]
    pub spec: Option<std::path::PathBuf>,
    /// A revision whose value is the old one.
    #[arg(long, required_unless_present = "resume")]
    pub good: Option<String>,
    /// A later revision (good must be its ancestor) whose value changed.
    #[arg(long, required_unless_present = "resume")]
    pub bad: Option<String>,
    /// The metric to follow (e.g. work, cold; work.cycles for the lens's cycles).
    #[arg(long, required_unless_present = "resume")]
    pub metric: Option<String>,
    /// What is read at each commit: the instruction lens's count (one run a commit) or wall time.
    #[arg(long, value_enum, default_value_t = crate::bisect::Lens::Instructions)]
    pub lens: crate::bisect::Lens,
    /// Commits visited between the ends at most (those of an earlier attempt included).
    #[arg(long, default_value_t = 20)]
    pub max_steps: u32,
    /// Go on with the bisection in this directory (its bisect.json names the spec, the ends,
    /// the metric and the lens), from the commits it measured already.
    #[arg(long, conflicts_with_all = ["spec", "good", "bad", "metric", "lens"])]
    pub resume: Option<std::path::PathBuf>,
    /// Where the bisection's directory goes.
    #[arg(long, default_value = "runs", env = "SANDBENCH_OUT")]
    pub out: std::path::PathBuf,
    /// The sandbox-agent executable to ship (default: beside this one).
    #[arg(long, env = crate::agent_binary::AGENT_ENV)]
    pub agent: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub dead_man: DeadMan,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The bench spec (TOML); with --resume, optional (the run's own, checked when given).
    #[arg(required_unless_present = "resume")]
    pub spec: Option<std::path::PathBuf>,
    /// The base revision (e.g. main).
    #[arg(long, required_unless_present = "resume")]
    pub base: Option<String>,
    /// The head revision (e.g. the pull request's commit).
    #[arg(long, required_unless_present = "resume")]
    pub head: Option<String>,
    /// Continue the run in this run directory whose controller died (killed, machine crash):
    /// new sandboxes, only the trials it had not completed, one report. The run's own options
    /// are used; a spec, --base or --head given must be the run's.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["trials", "pairs", "budget", "noise"])]
    pub resume: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub flags: RunFlags,
    /// How the agent gets into the sandboxes.
    #[arg(long, value_enum, default_value_t = Shipping::Bind)]
    pub shipping: Shipping,
    /// USD per vCPU-hour (overrides the spec's rate card).
    #[arg(long, value_parser = crate::options::parse_cpu_rate)]
    pub cpu_usd_per_hour: Option<f64>,
    /// USD per GiB-hour of memory (overrides the spec's rate card).
    #[arg(long, value_parser = crate::options::parse_memory_rate)]
    pub memory_usd_per_gb_hour: Option<f64>,
    /// USD per GiB-hour of disk (overrides the spec's rate card).
    #[arg(long, value_parser = crate::options::parse_disk_rate)]
    pub disk_usd_per_gb_hour: Option<f64>,
    /// How long to wait for a Docker engine that stops answering (a restart) before the run
    /// fails, e.g. 30s, 5m.
    #[arg(long, env = "SANDBENCH_ENGINE_WAIT", default_value = "120s", value_name = "DURATION",
          value_parser = parse_engine_wait)]
    pub engine_wait: std::time::Duration,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ReportFormat {
    Md,
    Json,
    Html,
}

/// A flag raised by Ctrl-C or SIGTERM.
fn cancel_on_signals() -> tokio::sync::watch::Receiver<bool> {
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut term) = signal(SignalKind::terminate()) else { return };
        tokio::select! { _ = tokio::signal::ctrl_c() => {}, _ = term.recv() => {} }
        eprintln!("canceling: tearing down");
        let _ = cancel_tx.send(true);
    });
    cancel_rx
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::logging::init(cli.log.as_deref());
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(exit::FAILED);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", crate::sanitize::terminal(&format!("{err:#}")));
            ExitCode::from(exit::FAILED)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let ledger_path = cli.ledger.clone().unwrap_or_else(crate::cost::ledger::default_path);
    // The one engine every sandbox of this command is made on, connected when first needed.
    let engine = crate::provision::Engine::new(cli.max_creates as usize);
    match cli.command {
        Command::Run(args) => compare(&engine, args, ledger_path).await,
        Command::Report { dir, format, stdout } => report(&dir, format, stdout),
        Command::Check { spec } => check(&engine, &spec).await,
        Command::Debug { spec, rev, phase, trial, keep, out, agent, dead_man } => {
            let options = crate::debug::DebugOptions {
                spec,
                rev,
                phase,
                trial,
                keep,
                out,
                agent,
                shipping: crate::provision::AgentShipping::Bind,
                dead_man: dead_man.window,
                ledger: Some(ledger_path),
            };
            let ok = crate::debug::debug(&engine, options, cancel_on_signals()).await?;
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Sandbox(command) => {
            if matches!(command, crate::by_hand::SandboxCommand::Gc) {
                // Dead runs are recorded as abandoned before their sandboxes are reaped.
                let docker = engine.docker().await?;
                for line in crate::run::reconcile::reconcile(&*docker, &ledger_path).await {
                    println!("{}", crate::sanitize::terminal(&line));
                }
            }
            crate::by_hand::run(&engine, command).await
        }
        Command::Cost(args) => {
            // Spec names and repositories are anyone's text.
            let text = cost(&args, &ledger_path, cli.ledger.is_some())?;
            match args.format {
                view::Format::Json => print!("{}", crate::sanitize::json(&text)),
                _ => print!("{}", crate::sanitize::terminal(&text)),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(args) => crate::bench::run(&engine, args, Some(ledger_path)).await.map(|()| ExitCode::SUCCESS),
        Command::Publish(args) => crate::publish::command(args).await,
        Command::Ci(args) => crate::publish::ci::command(&engine, *args, ledger_path, cancel_on_signals()).await,
        Command::Merge(args) => crate::merge::command(args, &ledger_path),
        Command::Record(args) => record(&engine, args, ledger_path).await,
        Command::Bisect(args) => {
            let mut options = match &args.resume {
                Some(dir) => crate::bisect::BisectOptions::resume(dir)?,
                None => crate::bisect::BisectOptions {
                    spec: args.spec.unwrap_or_default(),
                    good: args.good.unwrap_or_default(),
                    bad: args.bad.unwrap_or_default(),
                    metric: args.metric.unwrap_or_default(),
                    lens: args.lens,
                    out: args.out,
                    agent: None,
                    shipping: crate::provision::AgentShipping::Bind,
                    max_steps: 0,
                    ledger: None,
                    id: None,
                    dead_man: args.dead_man.window,
                },
            };
            options.dead_man = args.dead_man.window;
            options.agent = args.agent;
            options.max_steps = args.max_steps;
            options.ledger = Some(ledger_path);
            let found = crate::bisect::command(&engine, options, cancel_on_signals()).await?;
            Ok(if found { ExitCode::SUCCESS } else { ExitCode::from(exit::FAILED) })
        }
        Command::History(args) => {
            let options = crate::history::command::HistoryOptions {
                spec: args.spec,
                out: args.out,
                rev: args.rev,
                bisect: args.bisect,
                budget_usd: args.budget,
                ledger: ledger_path,
                agent: args.agent,
                dead_man: args.dead_man.window,
            };
            crate::history::command::command(&engine, options, cancel_on_signals()).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `sandbench run`: prints where the reports are, and exits by the run's status.
async fn compare(engine: &crate::provision::Engine, args: RunArgs, ledger: PathBuf) -> anyhow::Result<ExitCode> {
    if let Some(dir) = args.resume {
        let options = crate::run::resume::ResumeOptions {
            dir,
            spec: args.spec,
            base: args.base,
            head: args.head,
            agent: args.flags.agent.clone(),
            shipping: args.shipping.into(),
            ledger: Some(ledger),
            engine_wait: args.engine_wait,
            dead_man: args.flags.dead_man.window,
        };
        let (mark, _) = crate::run::resume::check(&options)?;
        args.flags.check_pairs(mark.pairs)?;
        let result = crate::run::resume::resume(engine, options, cancel_on_signals()).await?;
        return Ok(print_result(&result));
    }
    args.flags.check_pairs(args.flags.pairs)?;
    let cancel_rx = cancel_on_signals();
    // clap requires them without --resume.
    let (spec, base, head) =
        (args.spec.unwrap_or_default(), args.base.unwrap_or_default(), args.head.unwrap_or_default());
    let options = crate::run::RunOptions {
        shipping: args.shipping.into(),
        rates: crate::run::RateOverrides {
            cpu_usd_per_hour: args.cpu_usd_per_hour,
            memory_usd_per_gb_hour: args.memory_usd_per_gb_hour,
            disk_usd_per_gb_hour: args.disk_usd_per_gb_hour,
        },
        engine_wait: args.engine_wait,
        ..args.flags.run_options(spec, base, head, ledger)
    };
    // Resolved once, here: the final plan, its schedule, the revisions, the noise profile and the
    // open ledger; nothing below changes them.
    let resolved = crate::run::resolve(options).await?;
    let result = crate::run::start(resolved, cancel_rx, engine.provisioner(), crate::run::run_id()).await?;
    Ok(print_result(&result))
}

/// `sandbench record`: the records' progress on stderr, one line per commit on stdout
/// (`<commit> recorded <run dir>`, `already recorded`, `failed <run dir>: <why>`, `not reached`);
/// 0 when every commit asked for is recorded, 3 when some are not, 4 when canceled.
async fn record(engine: &crate::provision::Engine, args: RecordArgs, ledger: PathBuf) -> anyhow::Result<ExitCode> {
    use crate::record::{Fate, RecordOptions, Revisions};
    let revisions = match (args.rev, args.backfill) {
        (Some(rev), None) => Revisions::One(rev),
        (None, Some(range)) => Revisions::backfill(&range, args.every)?,
        _ => anyhow::bail!("give one of --rev and --backfill"),
    };
    let options = RecordOptions {
        spec: args.spec,
        revisions,
        out: args.out,
        ledger,
        budget_usd: args.budget,
        agent: args.agent,
        dead_man: args.dead_man.window,
        run_timeout: std::time::Duration::from_secs_f64(args.timeout_minutes.max(0.0) * 60.0),
    };
    let recorded = crate::record::record(engine, options, cancel_on_signals(), &mut |line| eprintln!("{line}")).await?;
    for (commit, fate) in &recorded.commits {
        let commit = crate::sanitize::terminal(commit);
        match fate {
            Fate::Recorded { dir, status } => println!("{commit} recorded {} ({})", dir.display(), status.as_str()),
            Fate::Already => println!("{commit} already recorded"),
            Fate::Failed { dir, status, why } => {
                println!("{commit} {} {}: {}", status.as_str(), dir.display(), crate::sanitize::terminal(why))
            }
        }
    }
    for commit in &recorded.not_reached {
        println!("{} not reached", crate::sanitize::terminal(commit));
    }
    if let Some(why) = &recorded.stopped {
        eprintln!("stopped by {why}: run the same command again to go on");
    }
    eprintln!("the records cost {:.4} USD", recorded.spent_usd);
    let none = recorded.commits.iter().all(|(_, fate)| matches!(fate, Fate::Failed { .. }));
    Ok(if recorded.canceled() {
        ExitCode::from(exit::CANCELED)
    } else if recorded.complete() {
        ExitCode::SUCCESS
    } else if none && recorded.not_reached.is_empty() {
        ExitCode::from(exit::FAILED)
    } else {
        ExitCode::from(exit::PARTIAL)
    })
}

/// Prints where a run's reports are; its exit status.
fn print_result(result: &crate::run::RunResult) -> ExitCode {
    println!("{}", result.dir.join("report.md").display());
    println!("{}", result.dir.join("report.html").display());
    println!("{}", result.dir.join("report.json").display());
    exit_code(result.status)
}

impl ReportFormat {
    /// The file of this format in a run directory.
    pub fn file_name(self) -> &'static str {
        match self {
            ReportFormat::Md => "report.md",
            ReportFormat::Json => "report.json",
            ReportFormat::Html => "report.html",
        }
    }
}

/// `sandbench report`: re-renders a run directory's reports (every format, into the directory)
/// and prints their paths, or the one asked for; `--stdout` prints that file instead.
fn report(dir: &Path, format: Option<ReportFormat>, stdout: bool) -> anyhow::Result<ExitCode> {
    crate::run::rerender(dir)?;
    let formats = match format {
        Some(format) => vec![format],
        None => vec![ReportFormat::Md, ReportFormat::Html, ReportFormat::Json],
    };
    for format in formats {
        let path = dir.join(format.file_name());
        if stdout {
            let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
            // report.json escapes what it holds; Markdown and HTML may carry a sandbox's
            // characters verbatim inside escaped text, which a terminal must not obey.
            let shown = match format {
                ReportFormat::Json => crate::sanitize::json(&text),
                ReportFormat::Md | ReportFormat::Html => crate::sanitize::terminal(&text),
            };
            print!("{shown}");
        } else {
            println!("{}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `sandbench check`: the plan, or every error in the spec (exit 2); for a bridged sandbox, the
/// registries its bridge would reach and where each comes from; for a plan that needs valgrind,
/// where the engine's valgrind image comes from, or why it cannot (exit 1).
async fn check(engine: &crate::provision::Engine, spec: &Path) -> anyhow::Result<ExitCode> {
    match crate::spec::load(spec).and_then(|plan| crate::spec::check_remote(spec, &plan).map(|warning| (plan, warning)))
    {
        Ok((plan, warning)) => {
            if let Some(warning) = warning {
                eprintln!("warning: {}", crate::sanitize::terminal(&warning));
            }
            print!("{}", crate::sanitize::terminal(&crate::spec::describe(&plan)));
            if let Some(settings) = &plan.sandbox.registries {
                // Where the bridge would go: the spec's upstreams, the rest from the host's npm and pip.
                match crate::bridge::Upstreams::resolve(settings) {
                    Ok(upstreams) => {
                        for note in &upstreams.notes {
                            println!("registry bridge: {}", crate::sanitize::terminal(note));
                        }
                    }
                    Err(err) => {
                        eprintln!("error: {}", crate::sanitize::terminal(&format!("{err:#}")));
                        return Ok(ExitCode::from(exit::FAILED));
                    }
                }
            }
            if !plan.needs_valgrind() {
                return Ok(ExitCode::SUCCESS);
            }
            let docker = engine.docker().await?;
            let (line, ok) = check_valgrind(&*docker, &plan.sandbox.image).await;
            if !ok {
                eprintln!("error: {}", crate::sanitize::terminal(&line));
                return Ok(ExitCode::from(exit::FAILED));
            }
            println!("{}", crate::sanitize::terminal(&line));
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            eprint!("{}", crate::sanitize::terminal(&errors.to_string()));
            Ok(ExitCode::from(exit::USAGE))
        }
    }
}

/// What `check` says of the valgrind image of `image`, and whether a run could have it.
pub async fn check_valgrind(provisioner: &dyn crate::provision::Provisioner, image: &str) -> (String, bool) {
    let probe = provisioner.probe_valgrind(image).await;
    let ok = !matches!(probe, crate::provision::ValgrindProbe::Unavailable(_));
    (probe.to_string(), ok)
}

/// `sandbench cost`: one run by sandbox and phase, runs grouped, or every run. A ledger that
/// does not exist is an error (a mistyped path must not read as "no runs") unless
/// `--create-ledger` asks for an empty one.
fn cost(args: &CostArgs, ledger_path: &Path, named: bool) -> anyhow::Result<String> {
    if !args.create_ledger && !ledger_path.exists() {
        let how = if named { "--ledger or SANDBENCH_LEDGER" } else { "the default ledger; no run recorded here yet" };
        anyhow::bail!(
            "no ledger at {} ({how}); check the path, or add --create-ledger to start an empty one there",
            ledger_path.display()
        );
    }
    let ledger = Ledger::open(ledger_path)?;
    let format = args.format;
    Ok(match (&args.run, args.by) {
        (Some(id), _) => match ledger.run(id)? {
            Some((row, phases)) => view::run(&row, &phases, format),
            None => {
                let known: Vec<String> = ledger.runs(None)?.into_iter().take(10).map(|r| r.run_id).collect();
                anyhow::bail!("no run {id} in {}; recent runs: {}", ledger_path.display(), known.join(", "));
            }
        },
        (None, Some(by)) => view::groups(&view::group(&ledger.runs(args.since)?, by), by, format),
        (None, None) => view::runs(&ledger.runs(args.since)?, format),
    })
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn run_and_ci_share_their_run_flags_word_for_word_but_cis_shard_needs_no_publish() {
        let mut cli = super::Cli::command();
        cli.build();
        let help = |command: &str, flag: &str| {
            let command = cli.find_subcommand(command).unwrap();
            let arg = command.get_arguments().find(|a| a.get_id() == flag).unwrap_or_else(|| panic!("{flag}"));
            (arg.get_help().map(ToString::to_string), arg.get_default_values().to_vec(), arg.get_env().is_some())
        };
        let shared = ["out", "trials", "pairs", "oversubscribe", "bisect", "budget", "timeout_minutes", "agent"];
        for flag in shared.into_iter().chain(["noise", "window"]) {
            assert_eq!(help("run", flag), help("ci", flag), "--{flag}");
        }
        assert_ne!(help("run", "shard"), help("ci", "shard"));
        let ci = ["sandbench", "ci", "s.toml", "--event", "e", "--event-name", "pull_request", "--shard", "1/2"];
        let err = super::Cli::try_parse_from(ci).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{err}");
        assert!(super::Cli::try_parse_from(ci.into_iter().chain(["--no-publish"])).is_ok());
        let run = ["sandbench", "run", "s.toml", "--base", "a", "--head", "b", "--shard", "1/2", "--bisect"];
        assert!(super::Cli::try_parse_from(run).is_err(), "--bisect conflicts with --shard");
    }

    /// Every argument of every command, with the path of commands leading to it, that has no
    /// help text.
    fn undocumented(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            if arg.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in command.get_subcommands() {
            undocumented(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }

    #[test]
    fn every_argument_of_every_command_has_help() {
        let mut missing = Vec::new();
        undocumented(&super::Cli::command(), "sandbench", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    }

    #[test]
    fn help_states_the_exit_statuses_and_they_never_collide_with_usage_errors() {
        use super::exit;
        let help = super::Cli::command().render_long_help().to_string();
        for line in ["0  completed", "1  failed", "2  invalid command line", "3  partial", "4  canceled"] {
            assert!(help.contains(line), "{line:?} not in --help:\n{help}");
        }
        let run_help = super::Cli::command().find_subcommand_mut("run").unwrap().render_long_help().to_string();
        assert!(run_help.contains("3  partial"), "{run_help}");
        use crate::report::Status;
        let codes: Vec<std::process::ExitCode> =
            [Status::Completed, Status::Failed, Status::Partial, Status::Canceled].map(super::exit_code).to_vec();
        let expected = [exit::COMPLETED, exit::FAILED, exit::PARTIAL, exit::CANCELED];
        assert_eq!(codes, expected.map(std::process::ExitCode::from).to_vec());
        assert!(!expected.contains(&exit::USAGE));
        // clap's own usage error.
        let err = super::Cli::try_parse_from([
            "sandbench",
            "run",
            "spec.toml",
            "--base",
            "a",
            "--head",
            "b",
            "--trials",
            "-1",
        ])
        .unwrap_err();
        assert_eq!(err.exit_code(), i32::from(exit::USAGE));
    }

    #[test]
    fn dead_man_durations_are_read_as_people_write_them() {
        use std::time::Duration;
        assert_eq!(super::parse_dead_man("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(super::parse_dead_man("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(super::parse_dead_man("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(super::parse_dead_man("90"), Ok(Duration::from_secs(90)));
        assert!(super::parse_dead_man("1s").unwrap_err().contains("too short"));
        assert!(super::parse_dead_man("soon").unwrap_err().contains("\"soon\""));
        assert!(super::parse_dead_man("-5s").is_err());
        let cli = super::Cli::try_parse_from(["sandbench", "run", "s.toml", "--base", "a", "--head", "b"]).unwrap();
        let super::Command::Run(args) = cli.command else { panic!("{:?}", cli.command) };
        assert!(args.flags.dead_man.window >= Duration::from_secs(30), "the default tolerates a stalled controller");
        let cli =
            super::Cli::try_parse_from(["sandbench", "debug", "s.toml", "--rev", "a", "--dead-man", "45s"]).unwrap();
        let super::Command::Debug { dead_man, .. } = cli.command else { panic!("{:?}", cli.command) };
        assert_eq!(dead_man.window, Duration::from_secs(45));
    }

    #[test]
    fn numbers_are_checked_as_the_command_line_is_read_by_the_rules_a_run_applies() {
        let parse = |args: &[&str]| super::Cli::try_parse_from([&["sandbench"][..], args].concat());
        let run = ["run", "s.toml", "--base", "a", "--head", "b"];
        let cases: [(&[&str], &str); 9] = [
            (&["--trials", "0"], "--trials must be from 1 to 100, got 0"),
            (&["--trials", "101"], "--trials must be from 1 to 100, got 101"),
            (&["--pairs", "9"], "--pairs must be from 1 to 8, got 9"),
            (&["--budget", "0"], "--budget must be a positive number of USD, got 0"),
            (&["--budget", "lots"], "expected a number, got \"lots\""),
            (&["--cpu-usd-per-hour=-1"], "--cpu-usd-per-hour must be a non-negative number, got -1"),
            (&["--memory-usd-per-gb-hour", "NaN"], "--memory-usd-per-gb-hour must be a non-negative number, got NaN"),
            (&["--disk-usd-per-gb-hour", "inf"], "--disk-usd-per-gb-hour must be a non-negative number, got inf"),
            (&["--max-creates", "0"], "0 is not in 1..=16"),
        ];
        for (extra, says) in cases {
            let err = parse(&[&run[..], extra].concat()).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{extra:?}: {err}");
            assert!(err.to_string().contains(says), "{extra:?}: {err}");
        }
        // The same rules in code: a run asked for without the command line is refused by them.
        assert_eq!(crate::run::check::pairs(0), Err("--pairs must be from 1 to 8, got 0".to_string()));
        assert_eq!(crate::run::check::budget(2.5), Ok(2.5));
        for command in [&["history", "s.toml"][..], &["record", "s.toml", "--rev", "a"][..]] {
            let err = parse(&[command, &["--budget=-0"][..]].concat()).unwrap_err();
            assert!(err.to_string().contains("--budget must be a positive number of USD"), "{command:?}: {err}");
        }
        let ok =
            parse(&[&run[..], &["--trials", "100", "--pairs", "8", "--budget", "0.5", "--max-creates", "2"]].concat());
        let cli = ok.unwrap();
        assert_eq!(cli.max_creates, 2);
        let super::Command::Run(args) = cli.command else { panic!() };
        assert_eq!((args.flags.trials, args.flags.pairs, args.flags.budget), (Some(100), 8, Some(0.5)));
    }

    #[test]
    fn more_pairs_than_cpus_are_refused_unless_asked_for() {
        assert!(super::check_pairs(2, 2, false).is_ok());
        let err = super::check_pairs(3, 2, false).unwrap_err().to_string();
        assert!(
            err.contains("--pairs 3") && err.contains("2 are available") && err.contains("--oversubscribe"),
            "{err}"
        );
        assert!(super::check_pairs(3, 2, true).is_ok());
        assert!(
            super::Cli::try_parse_from(["sandbench", "run", "s.toml", "--base", "a", "--head", "b", "--pairs", "0"])
                .is_err()
        );
    }
}
