//! Sandboxes: what the run logic asks for, independent of where sandboxes live. The Docker
//! backend (the only code that talks to Docker) is in [`docker`].

pub mod docker;
pub mod lost;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

pub use docker::{DockerProvisioner, ProvisionError};

/// Labels every sandbench container carries.
pub mod labels {
    /// Which controller process owns the sandbox: `host/pid/start-ticks`.
    pub const OWNER: &str = "io.sandbench.owner";
    pub const RUN: &str = "io.sandbench.run";
    pub const ROLE: &str = "io.sandbench.role";
    /// Unix seconds after which any controller may remove the sandbox.
    pub const EXPIRES_AT: &str = "io.sandbench.expires-at";
    /// What the sandbox costs per hour at the run's rate card (for `sandbench ls`).
    pub const USD_PER_HOUR: &str = "io.sandbench.usd-per-hour";
    /// The control socket of the `sandbench debug` session keeping the sandbox.
    pub const CONTROL: &str = "io.sandbench.control";
}

/// How the agent binary gets into the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentShipping {
    /// Bind-mounted read-only from the controller's disk (local daemon).
    Bind,
    /// Copied in through the archive API before start (remote daemon).
    Upload,
}

/// Limits of one sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Resources {
    pub cpus: f64,
    /// Pin to these CPUs (Docker cpuset syntax, e.g. `0-1`).
    pub cpuset: Option<String>,
    pub memory_bytes: u64,
    pub pids_limit: i64,
}

impl Default for Resources {
    fn default() -> Self {
        Resources { cpus: 2.0, cpuset: None, memory_bytes: 4 << 30, pids_limit: 4096 }
    }
}

/// Everything needed to create one sandbox.
#[derive(Debug, Clone)]
pub struct SandboxRequest {
    pub run_id: String,
    /// `base`, `head`, … — part of the container name.
    pub role: String,
    pub image: String,
    pub resources: Resources,
    /// Give the sandbox a network (none by default).
    pub network: bool,
    /// After this long any controller's reaper may remove the sandbox.
    pub ttl: Duration,
    pub shipping: AgentShipping,
    pub agent_binary: PathBuf,
    /// Host folder holding the controller's socket; mounted at `/run/sandbench`.
    pub socket_dir: PathBuf,
    pub token: String,
    /// More labels (cost rate, debug control socket).
    pub labels: std::collections::BTreeMap<String, String>,
}

impl SandboxRequest {
    /// The deterministic container name, also the sandbox id on the wire.
    pub fn sandbox_id(&self) -> String {
        format!("sandbench-{}-{}", self.run_id, self.role)
    }
}

/// A created sandbox.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub id: String,
    pub container_id: String,
    pub run_id: String,
    pub role: String,
    /// When the create request was made (the start of its lifetime for cost).
    pub requested_at: SystemTime,
    /// Time spent waiting for a create slot (admission control).
    pub queued: Duration,
    pub expires_at: SystemTime,
}
