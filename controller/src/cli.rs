//! Command-line parsing and dispatch. `main` prints the error chain once and sets the exit code.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::bench::BenchArgs;
use crate::provision::DockerProvisioner;

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
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a bench spec and print the plan (or every error, with file, line and field).
    Check {
        /// The bench spec (TOML).
        spec: std::path::PathBuf,
    },
    /// Remove sandbench sandboxes that expired or whose controller is gone.
    Gc,
    /// Measure the backbone: provision-to-Hello against a bare container, observation
    /// throughput over the socket, and the agent's idle memory.
    Bench(BenchArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter =
        tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
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
    match cli.command {
        Command::Check { spec } => match crate::spec::load(&spec) {
            Ok(plan) => {
                print!("{}", crate::spec::describe(&plan));
                Ok(ExitCode::SUCCESS)
            }
            Err(errors) => {
                eprint!("{errors}");
                Ok(ExitCode::from(2))
            }
        },
        Command::Gc => {
            let provisioner = DockerProvisioner::connect(1).await?;
            let reaped = provisioner.reap().await?;
            if reaped.is_empty() {
                println!("nothing to remove");
            }
            for r in reaped {
                println!("removed {} ({})", r.name, r.reason);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(args) => crate::bench::run(args).await.map(|()| ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
