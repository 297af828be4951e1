//! The sandboxes of this machine, by hand: `ls`, `shell`, `logs`, `phase` (rerun one phase on a
//! sandbox kept by `sandbench debug --keep`), `rm` and `gc`. Errors say what to do next.

mod logs;
mod ls;
mod phase;
mod rm;
mod shell;
#[cfg(test)]
mod tests;

use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;

pub use logs::logs;
pub use ls::{ls, table};
pub use phase::{describe_event, phase};
pub use rm::{gc, rm};
pub use shell::{shell, shell_command};

use crate::display::Display;
use crate::provision::{ContainerInfo, Engine, Provisioner};

/// The by-hand commands, as the command line names them.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// The sandbench sandboxes on this machine: run, role, image, state, age, expiry, cost so far.
    Ls,
    /// A terminal in a sandbox (root, or a benchmark user with --user); `-- CMD` runs a command.
    Shell {
        /// The sandbox: its name as `sandbench ls` shows it, or a prefix of its name or id.
        id: String,
        /// Enter as this user (e.g. benchmark1), with the environment the phases give it.
        #[arg(long)]
        user: Option<String>,
        /// A command to run instead of a terminal; its exit status is this command's.
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// A sandbox's agent log, each line with its time (RFC 3339, UTC).
    Logs {
        /// The sandbox: its name as `sandbench ls` shows it, or a prefix of its name or id.
        id: String,
        /// Only the last N lines (with --follow: then the new ones).
        #[arg(short = 'n', long = "lines", value_name = "N")]
        lines: Option<usize>,
        /// Keep following it until the sandbox is gone.
        #[arg(short, long)]
        follow: bool,
    },
    /// Rerun one phase on a sandbox kept by `sandbench debug --keep`.
    Phase {
        /// The sandbox: its name as `sandbench ls` shows it, or a prefix of its name or id.
        id: String,
        /// The phase to rerun: prepare, install, measure or runtime.
        phase: String,
        /// The trial of that phase.
        #[arg(long, default_value_t = 0)]
        trial: u32,
    },
    /// Remove sandboxes: one, a run's, or all.
    Rm {
        /// The sandbox: its name as `sandbench ls` shows it, or a prefix of its name or id.
        id: Option<String>,
        /// Every sandbox of this run id.
        #[arg(long)]
        run: Option<String>,
        /// Every sandbench sandbox on this machine.
        #[arg(long)]
        all: bool,
    },
    /// Remove sandbench sandboxes whose controller is gone, or past their expiry by more than
    /// the grace (15 min; a live controller's sandbox is kept until then).
    Gc,
}

/// Runs one by-hand command against the local Docker engine.
pub async fn run(engine: &Engine, command: SandboxCommand) -> anyhow::Result<ExitCode> {
    let docker = engine.docker().await?;
    let provisioner: &dyn Provisioner = &*docker;
    let display = Display::plain();
    let ok = match command {
        SandboxCommand::Ls => {
            display.output(&ls(provisioner).await?);
            true
        }
        SandboxCommand::Shell { id, user, command } => {
            let code = shell(provisioner, &id, user.as_deref(), &command).await?;
            return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
        }
        SandboxCommand::Logs { id, lines, follow } => {
            logs(provisioner, &id, lines, follow).await?;
            true
        }
        SandboxCommand::Phase { id, phase: name, trial } => phase(provisioner, &id, &name, trial, &display).await?,
        SandboxCommand::Rm { id, run, all } => {
            let removed = rm(provisioner, id.as_deref(), run.as_deref(), all).await?;
            print_removed(&display, removed.iter().map(|name| format!("removed {name}")));
            true
        }
        SandboxCommand::Gc => {
            print_removed(&display, gc(provisioner).await?.iter().map(|line| format!("removed {line}")));
            true
        }
    };
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_removed(display: &Display, lines: impl Iterator<Item = String>) {
    let mut any = false;
    for line in lines {
        display.result(&line);
        any = true;
    }
    if !any {
        display.result("nothing to remove");
    }
}

/// The sandbox an id names: its name, a prefix of it, or of its container id.
pub async fn find(provisioner: &dyn Provisioner, id: &str) -> anyhow::Result<ContainerInfo> {
    let all = provisioner.list(None).await?;
    let matches: Vec<&ContainerInfo> = all
        .iter()
        .filter(|c| c.name == id || (!id.is_empty() && (c.name.starts_with(id) || c.id.starts_with(id))))
        .collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] if all.is_empty() => bail!("no sandbox {id:?}: there are no sandbench sandboxes on this machine"),
        [] => bail!(
            "no sandbox {id:?}; known sandboxes: {}",
            all.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
        ),
        many => bail!(
            "{id:?} names several sandboxes: {}",
            many.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
        ),
    }
}
