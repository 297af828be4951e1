//! Command-line parsing and dispatch. `main` prints the error chain once and sets the exit code.

use std::process::ExitCode;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::bench::{BenchArgs, Shipping};
use crate::cost::ledger::Ledger;
use crate::cost::view::{self, CostArgs};

#[derive(Debug, Parser)]
#[command(
    name = "sandbench",
    version,
    about = "Benchmark two revisions of a project in fresh, identical Docker sandboxes"
)]
pub struct Cli {
    /// Log filter for the controller's own diagnostics (tracing syntax).
    #[arg(long, global = true, env = "SANDBENCH_LOG", default_value = "warn")]
    pub log: String,
    /// The cost ledger (SQLite); default: sandbench/ledger.sqlite in the user's data folder.
    #[arg(long, global = true, env = "SANDBENCH_LEDGER")]
    pub ledger: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare two revisions: provision, prepare, install/measure/runtime interleaved, report.
    Run(RunArgs),
    /// Re-render report.json, report.md and report.html of a run directory from its data.
    Report {
        /// The run directory (runs/<run-id>).
        dir: std::path::PathBuf,
        /// Print this format to stdout as well.
        #[arg(long, value_enum)]
        format: Option<ReportFormat>,
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
        #[arg(long, env = crate::agent_binary::AGENT_ENV)]
        agent: Option<std::path::PathBuf>,
    },
    // The by-hand commands: ls, shell, logs, phase, rm, gc.
    #[command(flatten)]
    Sandbox(crate::sandboxes::SandboxCommand),
    /// What runs cost: every run, runs grouped, or one run by sandbox and phase.
    Cost(CostArgs),
    /// Measure the backbone: provision-to-Hello against a bare container, observation
    /// throughput over the socket, and the agent's idle memory.
    Bench(BenchArgs),
    /// Post a run directory's report as the pull request's sticky comment, and a commit status.
    Publish(crate::publish::PublishArgs),
    /// GitHub Actions: read the pull request event, apply the trust gate, run, publish.
    Ci(Box<crate::publish::ci::CiArgs>),
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The bench spec (TOML).
    pub spec: std::path::PathBuf,
    /// The base revision (e.g. main).
    #[arg(long)]
    pub base: String,
    /// The head revision (e.g. the pull request's commit).
    #[arg(long)]
    pub head: String,
    /// Where run directories go.
    #[arg(long, default_value = "runs", env = "SANDBENCH_OUT")]
    pub out: std::path::PathBuf,
    /// Measure, runtime and transport trials (overrides the spec; ui and install keep theirs).
    #[arg(long)]
    pub trials: Option<u32>,
    /// Sandbox pairs, each pinned to its own CPUs, sharing the trials.
    #[arg(long, default_value_t = 1)]
    pub pairs: u32,
    /// Stop scheduling work when the estimated cost reaches this many USD.
    #[arg(long)]
    pub budget: Option<f64>,
    /// Stop scheduling work after this many minutes.
    #[arg(long, default_value_t = 60.0)]
    pub timeout_minutes: f64,
    /// How the agent gets into the sandboxes.
    #[arg(long, value_enum, default_value_t = Shipping::Bind)]
    pub shipping: Shipping,
    /// The sandbox-agent executable to ship (default: beside this one).
    #[arg(long, env = crate::agent_binary::AGENT_ENV)]
    pub agent: Option<std::path::PathBuf>,
    /// A noise profile written by an A/A run (runs/<id>/noise.json), used for the floors.
    #[arg(long)]
    pub noise: Option<std::path::PathBuf>,
    /// USD per vCPU-hour (overrides the spec's rate card).
    #[arg(long)]
    pub cpu_usd_per_hour: Option<f64>,
    /// USD per GiB-hour of memory (overrides the spec's rate card).
    #[arg(long)]
    pub memory_usd_per_gb_hour: Option<f64>,
    /// USD per GiB-hour of disk (overrides the spec's rate card).
    #[arg(long)]
    pub disk_usd_per_gb_hour: Option<f64>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ReportFormat {
    Md,
    Json,
    Html,
}

/// Exit status of `sandbench run`: 0 only for a completed run.
pub fn exit_code(status: crate::report::Status) -> ExitCode {
    use crate::report::Status;
    match status {
        Status::Completed => ExitCode::SUCCESS,
        Status::Failed | Status::Running => ExitCode::from(1),
        Status::Partial => ExitCode::from(2),
        Status::Canceled => ExitCode::from(3),
    }
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
    crate::logging::init(&cli.log);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let ledger_path = cli.ledger.clone().unwrap_or_else(crate::cost::ledger::default_path);
    match cli.command {
        Command::Run(args) => compare(args, ledger_path).await,
        Command::Report { dir, format } => report(&dir, format),
        Command::Check { spec } => check(&spec),
        Command::Debug { spec, rev, phase, trial, keep, out, agent } => {
            let options = crate::debug::DebugOptions {
                spec,
                rev,
                phase,
                trial,
                keep,
                out,
                agent,
                shipping: crate::provision::AgentShipping::Bind,
            };
            let ok = crate::debug::debug(options, cancel_on_signals()).await?;
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Sandbox(command) => crate::sandboxes::run(command).await,
        Command::Cost(args) => {
            print!("{}", cost(&args, &ledger_path)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(args) => crate::bench::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Publish(args) => crate::publish::command(args).await,
        Command::Ci(args) => crate::publish::ci::command(*args, ledger_path, cancel_on_signals()).await,
    }
}

/// `sandbench run`: prints where the reports are, and exits by the run's status.
async fn compare(args: RunArgs, ledger: PathBuf) -> anyhow::Result<ExitCode> {
    let cancel_rx = cancel_on_signals();
    let options = crate::run::RunOptions {
        spec: args.spec,
        base: args.base,
        head: args.head,
        out: args.out,
        trials: args.trials,
        pairs: args.pairs,
        budget_usd: args.budget,
        run_timeout: std::time::Duration::from_secs_f64(args.timeout_minutes.max(0.0) * 60.0),
        agent: args.agent,
        shipping: args.shipping.into(),
        noise: args.noise,
        ledger: Some(ledger),
        rates: crate::run::RateOverrides {
            cpu_usd_per_hour: args.cpu_usd_per_hour,
            memory_usd_per_gb_hour: args.memory_usd_per_gb_hour,
            disk_usd_per_gb_hour: args.disk_usd_per_gb_hour,
        },
    };
    let result = crate::run::run(options, cancel_rx).await?;
    println!("{}", result.dir.join("report.md").display());
    println!("{}", result.dir.join("report.html").display());
    println!("{}", result.dir.join("report.json").display());
    Ok(exit_code(result.status))
}

/// `sandbench report`: re-renders a run directory's reports, printing one format if asked.
fn report(dir: &Path, format: Option<ReportFormat>) -> anyhow::Result<ExitCode> {
    let report = crate::run::rerender(dir)?;
    match format {
        Some(ReportFormat::Md) => print!("{}", crate::report::markdown::render(&report)),
        Some(ReportFormat::Html) => print!("{}", crate::report::html::render(&report)),
        Some(ReportFormat::Json) => println!("{}", serde_json::to_string_pretty(&report)?),
        None => println!("re-rendered report.json, report.md and report.html in {}", dir.display()),
    }
    Ok(ExitCode::SUCCESS)
}

/// `sandbench check`: the plan, or every error in the spec (exit 2).
fn check(spec: &Path) -> anyhow::Result<ExitCode> {
    match crate::spec::load(spec) {
        Ok(plan) => {
            print!("{}", crate::spec::describe(&plan));
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            eprint!("{errors}");
            Ok(ExitCode::from(2))
        }
    }
}

/// `sandbench cost`: one run by sandbox and phase, runs grouped, or every run.
fn cost(args: &CostArgs, ledger_path: &Path) -> anyhow::Result<String> {
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
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
