//! What a run is asked for: the options of `sandbench run` as the run takes them.

use std::path::PathBuf;
use std::time::Duration;

use super::engine;
use crate::provision::AgentShipping;

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub spec: PathBuf,
    pub base: String,
    pub head: String,
    pub out: PathBuf,
    /// Overrides the measure, runtime and transport trial counts.
    pub trials: Option<u32>,
    pub pairs: u32,
    pub budget_usd: Option<f64>,
    pub run_timeout: Duration,
    pub agent: Option<PathBuf>,
    pub shipping: AgentShipping,
    /// A noise profile from an A/A run (`noise.json`): its relative noise replaces the spec's
    /// relative floors.
    pub noise: Option<PathBuf>,
    /// With no `noise`, use the ledger's A/A noise profiles of this spec, image and machine,
    /// pooled (`--noise none` turns it off).
    pub noise_from_ledger: bool,
    /// Rate card overrides (USD per vCPU-hour, per GiB-hour of memory, per GiB-hour of disk).
    pub rates: RateOverrides,
    /// The cost ledger to record the run in (None: no ledger).
    pub ledger: Option<PathBuf>,
    /// Run only this shard's share of the pairs (`--shard I/N`, see [`crate::shard`]).
    pub shard: Option<crate::shard::Shard>,
    /// How long to wait for an unreachable engine before the run fails (`--engine-wait`).
    pub engine_wait: Duration,
    /// How long the run's agents and the controller carry on without word from each other
    /// (`--dead-man`).
    pub dead_man: Duration,
    /// Runs as if the plan needed valgrind (tests): every sandbox from the derived image.
    pub force_valgrind: bool,
    /// Bisects every regressed metric between base and head once the run is decided (`--bisect`).
    pub bisect: bool,
    /// The run refuses to start, and no sandbox is made, unless the engine bounds each
    /// sandbox's disk (`disk_gb`); the text says why it is required (`ci` for a fork's head).
    pub require_disk_bound: Option<String>,
    /// A record of one revision (`sandbench record`, base and head naming it): one sandbox
    /// measures it, its lens steps once, no pairs added, and the ledger's history keeps its
    /// values (see [`crate::record`]).
    pub record: bool,
}

impl RunOptions {
    /// A run of `spec`, `base` against `head`, into `out`, every other option at its default:
    /// one pair, the spec's trials, no budget, a 60-minute run timeout, the agent found beside
    /// the controller and bind-mounted, no noise profile, the built-in rates, no ledger, no
    /// shard, the default wait for the engine and dead-man window. Callers set what they need
    /// on top.
    pub fn new(
        spec: impl Into<PathBuf>,
        base: impl Into<String>,
        head: impl Into<String>,
        out: impl Into<PathBuf>,
    ) -> RunOptions {
        RunOptions {
            spec: spec.into(),
            base: base.into(),
            head: head.into(),
            out: out.into(),
            trials: None,
            pairs: 1,
            budget_usd: None,
            run_timeout: Duration::from_secs(60 * 60),
            agent: None,
            shipping: AgentShipping::Bind,
            noise: None,
            noise_from_ledger: false,
            rates: RateOverrides::default(),
            ledger: None,
            shard: None,
            engine_wait: engine::DEFAULT_ENGINE_WAIT,
            dead_man: crate::observations::server::DEFAULT_DEAD_MAN,
            force_valgrind: false,
            bisect: false,
            require_disk_bound: None,
            record: false,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct RateOverrides {
    pub cpu_usd_per_hour: Option<f64>,
    pub memory_usd_per_gb_hour: Option<f64>,
    pub disk_usd_per_gb_hour: Option<f64>,
}

pub use check::MAX_PAIRS;

/// The rules of the run's numeric options, stated once: the command line's parsers
/// ([`crate::options`]) apply them as it reads the values, and [`super::resolve()`] applies the
/// same to a run asked for from code.
pub mod check {
    /// The most pairs a run takes (`--pairs`).
    pub const MAX_PAIRS: u32 = 8;

    /// `--trials`: from 1 to 100.
    pub fn trials(n: u32) -> Result<u32, String> {
        match (1..=100).contains(&n) {
            true => Ok(n),
            false => Err(format!("--trials must be from 1 to 100, got {n}")),
        }
    }

    /// `--pairs`: from 1 to [`MAX_PAIRS`].
    pub fn pairs(n: u32) -> Result<u32, String> {
        match (1..=MAX_PAIRS).contains(&n) {
            true => Ok(n),
            false => Err(format!("--pairs must be from 1 to {MAX_PAIRS}, got {n}")),
        }
    }

    /// `--budget`: a positive number of USD.
    pub fn budget(usd: f64) -> Result<f64, String> {
        match usd.is_finite() && usd > 0.0 {
            true => Ok(usd),
            false => Err(format!("--budget must be a positive number of USD, got {usd}")),
        }
    }

    /// A rate card override (`name`, e.g. `--cpu-usd-per-hour`): a non-negative number.
    pub fn rate(name: &str, usd: f64) -> Result<f64, String> {
        match usd.is_finite() && usd >= 0.0 {
            true => Ok(usd),
            false => Err(format!("{name} must be a non-negative number, got {usd}")),
        }
    }
}
