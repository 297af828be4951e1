//! Command-line values shared by `run`, `debug`, `ci` and `merge`: exit statuses, the dead-man
//! window, durations, how many pairs a machine holds, the flags of a run (`run` and `ci`). Below
//! the commands, so `publish` and `merge` use them without reaching up into [`crate::cli`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::run::{RunOptions, check};

/// Exit statuses of `sandbench`. 2 is clap's usage error and no run status uses it.
pub mod exit {
    /// The run completed (regressions are information, not failure); any other command succeeded.
    pub const COMPLETED: u8 = 0;
    /// The run failed, or the command could not do its work (the error says why).
    pub const FAILED: u8 = 1;
    /// The command line is invalid (clap's usage error), or `check` found errors in the spec.
    pub const USAGE: u8 = 2;
    /// The run ended, but some of its measurements are missing.
    pub const PARTIAL: u8 = 3;
    /// The run was canceled (Ctrl-C, SIGTERM).
    pub const CANCELED: u8 = 4;
}

/// `--dead-man`, for the commands whose agents keep a dead-man switch (run, debug, ci).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct DeadMan {
    /// How long an agent carries on without word from its controller (and the controller
    /// without word from an agent) before giving up, e.g. 45s, 2m.
    #[arg(long = "dead-man", env = "SANDBENCH_DEAD_MAN", default_value = "30s", value_name = "DURATION",
          value_parser = parse_dead_man)]
    pub window: std::time::Duration,
}

/// Exit status of `sandbench run` ([`exit`]): 0 only for a completed run, never 2 (clap's
/// usage error).
pub fn exit_code(status: crate::report::Status) -> ExitCode {
    use crate::report::Status;
    ExitCode::from(match status {
        Status::Completed => exit::COMPLETED,
        Status::Failed | Status::Running | Status::Abandoned => exit::FAILED,
        Status::Partial => exit::PARTIAL,
        Status::Canceled => exit::CANCELED,
    })
}

/// `--dead-man`: a duration like `45s`, `2m`, `1m30s` or `90` (seconds), at least 2 s.
pub fn parse_dead_man(text: &str) -> Result<std::time::Duration, String> {
    parse_duration(text).and_then(|d| match d >= std::time::Duration::from_secs(2) {
        true => Ok(d),
        false => Err(format!("{text:?} ({:.1} s) is too short: an agent needs at least 2 s", d.as_secs_f64())),
    })
}

/// `--engine-wait`: a duration like `--dead-man`'s (0 gives up at once).
pub fn parse_engine_wait(text: &str) -> Result<std::time::Duration, String> {
    parse_duration(text)
}

/// A duration like `45s`, `2m`, `1m30s` or `90` (seconds).
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let trimmed = text.trim();
    let parsed = match trimmed.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => Ok(std::time::Duration::from_secs_f64(seconds)),
        Ok(_) => Err("not a duration".to_string()),
        Err(_) => trimmed
            .parse::<jiff::SignedDuration>()
            .map_err(|err| err.to_string())
            .and_then(|d| std::time::Duration::try_from(d).map_err(|_| "negative".to_string())),
    };
    parsed.map_err(|err| format!("expected a duration like 45s, 2m or 1m30s, got {text:?} ({err})"))
}

/// A number as the command line gives it, then checked by `rule` (one of [`check`]'s).
fn number<T: std::str::FromStr>(text: &str, rule: impl Fn(T) -> Result<T, String>) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    text.trim().parse::<T>().map_err(|err| format!("expected a number, got {text:?} ({err})")).and_then(rule)
}

/// `--trials` ([`check::trials`]).
pub fn parse_trials(text: &str) -> Result<u32, String> {
    number(text, check::trials)
}

/// `--pairs` ([`check::pairs`]; the CPUs are checked once the command knows the machine:
/// [`check_pairs`]).
pub fn parse_pairs(text: &str) -> Result<u32, String> {
    number(text, check::pairs)
}

/// `--budget` of `run`, `ci`, `record` and `history` ([`check::budget`]).
pub fn parse_budget(text: &str) -> Result<f64, String> {
    number(text, check::budget)
}

/// `--cpu-usd-per-hour` ([`check::rate`]).
pub fn parse_cpu_rate(text: &str) -> Result<f64, String> {
    number(text, |v| check::rate("--cpu-usd-per-hour", v))
}

/// `--memory-usd-per-gb-hour` ([`check::rate`]).
pub fn parse_memory_rate(text: &str) -> Result<f64, String> {
    number(text, |v| check::rate("--memory-usd-per-gb-hour", v))
}

/// `--disk-usd-per-gb-hour` ([`check::rate`]).
pub fn parse_disk_rate(text: &str) -> Result<f64, String> {
    number(text, |v| check::rate("--disk-usd-per-gb-hour", v))
}

/// `--pairs` beyond the CPUs is refused unless `oversubscribe`: each pair is pinned to CPUs of
/// its own, and pairs sharing a CPU disturb each other's timings.
pub fn check_pairs(pairs: u32, cpus: usize, oversubscribe: bool) -> anyhow::Result<()> {
    if pairs as usize > cpus && !oversubscribe {
        anyhow::bail!(
            "--pairs {pairs} needs at least {pairs} CPUs (one per pair) and {cpus} {} available; \
             ask for at most {cpus} pairs, or add --oversubscribe to let pairs share CPUs",
            if cpus == 1 { "is" } else { "are" }
        );
    }
    Ok(())
}

/// The CPUs sandboxes can be pinned to (those this process may run on).
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The flags `run` and `ci` share: where runs go, trials and pairs, the bounds, the agent, the
/// noise profile, the dead-man window, `--bisect`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunFlags {
    /// Where run directories go.
    #[arg(long, default_value = "runs", env = "SANDBENCH_OUT")]
    pub out: PathBuf,
    /// Measure, runtime and transport trials (overrides the spec; ui and install keep theirs).
    #[arg(long, value_parser = parse_trials)]
    pub trials: Option<u32>,
    /// Sandbox pairs, each pinned to its own CPUs, sharing the trials (at most one per CPU).
    #[arg(long, default_value_t = 1, value_parser = parse_pairs)]
    pub pairs: u32,
    /// Allow more pairs than CPUs: pairs then share CPUs, and their timings disturb each other.
    #[arg(long)]
    pub oversubscribe: bool,
    /// Run only shard I of N of the pairs (e.g. 1/2; merge the shards with `sandbench merge`).
    #[arg(long, value_name = "I/N", value_parser = crate::shard::parse_shard)]
    pub shard: Option<crate::shard::Shard>,
    /// Once the run is decided, bisect every regressed metric between base and head (within
    /// `[bisect] max_steps` and the budget): which commit did it, in the report and the comment.
    #[arg(long, conflicts_with = "shard")]
    pub bisect: bool,
    /// Stop scheduling work when the estimated cost reaches this many USD.
    #[arg(long, value_parser = parse_budget)]
    pub budget: Option<f64>,
    /// Stop scheduling work after this many minutes.
    #[arg(long, default_value_t = 60.0)]
    pub timeout_minutes: f64,
    /// The sandbox-agent executable to ship (default: beside this one).
    #[arg(long, env = crate::agent_binary::AGENT_ENV)]
    pub agent: Option<PathBuf>,
    /// A noise profile written by an A/A run (runs/<id>/noise.json), used for the floors; `none`:
    /// the spec's floors. Default: every A/A profile the ledger keeps of this spec, image and
    /// machine, pooled.
    #[arg(long, value_name = "PATH|none")]
    pub noise: Option<PathBuf>,
    #[command(flatten)]
    pub dead_man: DeadMan,
}

impl RunFlags {
    /// Refuses more pairs than CPUs unless `--oversubscribe` ([`check_pairs`]).
    pub fn check_pairs(&self, pairs: u32) -> anyhow::Result<()> {
        check_pairs(pairs, available_cpus(), self.oversubscribe)
    }

    /// The run these flags ask for, of `spec` from `base` to `head`, charged to `ledger`; the
    /// rest (shipping, rate overrides, engine wait) as [`RunOptions::new`] has it.
    pub fn run_options(self, spec: PathBuf, base: String, head: String, ledger: PathBuf) -> RunOptions {
        RunOptions {
            trials: self.trials,
            pairs: self.pairs,
            budget_usd: self.budget,
            run_timeout: Duration::from_secs_f64(self.timeout_minutes.max(0.0) * 60.0),
            agent: self.agent,
            noise_from_ledger: self.noise.is_none(),
            noise: self.noise.filter(|p| p.as_os_str() != "none"),
            ledger: Some(ledger),
            shard: self.shard,
            dead_man: self.dead_man.window,
            bisect: self.bisect,
            ..RunOptions::new(spec, base, head, self.out)
        }
    }
}
