//! Sandboxes: what the run logic asks for ([`Provisioner`]), independent of where sandboxes
//! live. The Docker backend (the only code that talks to Docker) is in [`docker`]; `fake` runs
//! in-process agents that answer phases from a script, for deterministic tests of whole runs:
//! compiled for tests only (the crate's own, or with the `fake` feature), never in the binary.

pub mod disk;
pub mod docker;
pub mod engine;
pub mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod lost;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

pub use docker::DockerProvisioner;
pub use docker::valgrind::{self, ValgrindError, ValgrindProbe};
pub use engine::Engine;
pub use error::ProvisionError;
#[cfg(any(test, feature = "fake"))]
pub use fake::FakeProvisioner;
pub use lost::{Lost, LostCause};

/// What orchestration (run, debug, bench) needs from where sandboxes live. Every sandbox is named
/// by its id ([`SandboxRequest::sandbox_id`]); an absent sandbox is not an error for `running`
/// (false), `remove` (done) or `usage` (None). A failure is a [`ProvisionError`]: what was being
/// done, in whichever backend.
pub trait Provisioner: Send + Sync {
    /// The backend, for people: `Docker API 1.41`, `fake`.
    fn describe(&self) -> String;

    /// Whether sandboxes need the agent executable of this machine (Docker ships it; the fake
    /// runs its agents in-process).
    fn ships_agent(&self) -> bool {
        true
    }

    /// Makes sure `image` is there, telling `progress` what it does (pulling, say).
    fn ensure_image<'a>(
        &'a self,
        image: &'a str,
        progress: &'a mut (dyn FnMut(&str) + Send),
    ) -> BoxFuture<'a, Result<(), ProvisionError>>;

    /// Makes sure the image derived from `image` with valgrind exists (see [`valgrind`]),
    /// building it once when it does not, telling `progress` how it goes: its tag, which every
    /// sandbox of a run that needs valgrind is created from.
    fn ensure_valgrind<'a>(
        &'a self,
        image: &'a str,
        progress: &'a mut (dyn FnMut(&str) + Send),
    ) -> BoxFuture<'a, Result<String, ValgrindError>>;

    /// What [`Provisioner::ensure_valgrind`] would do for `image`, found without building.
    fn probe_valgrind<'a>(&'a self, image: &'a str) -> BoxFuture<'a, ValgrindProbe>;

    /// Creates a sandbox (not started), shipping the agent as asked.
    fn create<'a>(&'a self, request: &'a SandboxRequest) -> BoxFuture<'a, Result<Sandbox, ProvisionError>>;

    /// Starts a created sandbox: its agent dials the request's socket.
    fn start<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), ProvisionError>>;

    /// Moves a running sandbox onto these CPUs (Docker cpuset syntax: `0`, `2-3`).
    fn pin<'a>(&'a self, id: &'a str, cpuset: &'a str) -> BoxFuture<'a, Result<(), ProvisionError>>;

    /// Whether the sandbox exists and runs.
    fn running<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, ProvisionError>>;

    /// Whether the sandbox exists (running or not).
    fn exists<'a>(&'a self, id: &'a str) -> BoxFuture<'a, bool>;

    /// What the sandbox uses now; None when it does not run.
    fn usage<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Usage>, ProvisionError>>;

    /// The agent's log so far.
    fn logs<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<String, ProvisionError>>;

    /// The agent's log from the start, then as it is written, until the sandbox ends.
    fn logs_follow(&self, id: &str) -> BoxStream<'static, Result<String, ProvisionError>>;

    /// Runs a command in the sandbox to its end: its exit code and output.
    fn exec<'a>(&'a self, id: &'a str, cmd: Vec<String>) -> BoxFuture<'a, Result<(i64, String), ProvisionError>>;

    /// Unpacks a tar archive at the sandbox's root, sent as it is read.
    fn upload<'a>(&'a self, id: &'a str, tar: TarStream) -> BoxFuture<'a, Result<(), ProvisionError>>;

    /// Removes the sandbox, running or not, with its volumes. Absent is fine.
    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), ProvisionError>>;

    /// Sandbench sandboxes, optionally only those with `label=value`.
    fn list<'a>(
        &'a self,
        label: Option<(&'a str, &'a str)>,
    ) -> BoxFuture<'a, Result<Vec<ContainerInfo>, ProvisionError>>;

    /// Removes sandboxes that expired or whose controller is gone.
    fn reap(&self) -> BoxFuture<'_, Result<Vec<Reaped>, ProvisionError>>;

    /// Why a sandbox that is no longer running stopped (killed by a signal, exited, the agent
    /// lost its controller, the engine restarted, OOM-killed), as far as the backend can tell.
    fn lost_cause<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, Lost> {
        Box::pin(async { Lost::default() })
    }

    /// When a sandbox that exists but no longer runs stopped (the engine's `State.FinishedAt`);
    /// None when it runs, does not exist, or the backend cannot tell.
    fn finished_at<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, Option<SystemTime>> {
        Box::pin(async { None })
    }

    /// Where the engine is, for people (`unix:///var/run/docker.sock`).
    fn endpoint(&self) -> String {
        self.describe()
    }

    /// Whether the engine answers now (an error when it cannot be reached).
    fn ping(&self) -> BoxFuture<'_, Result<(), ProvisionError>> {
        Box::pin(async { Ok(()) })
    }

    /// The agent's log, each line prefixed with the time the backend took it (RFC 3339): the
    /// last `tail` lines (all when None), then, with `follow`, the new ones until the sandbox
    /// ends. Chunks need not end at line ends.
    fn log_lines(
        &self,
        id: &str,
        tail: Option<usize>,
        follow: bool,
    ) -> BoxStream<'static, Result<String, ProvisionError>>;

    /// Starts `cmd` in the sandbox with a terminal of `rows` × `cols`, attached to this process
    /// (`sandbench shell`).
    fn terminal<'a>(
        &'a self,
        id: &'a str,
        cmd: Vec<String>,
        rows: u16,
        cols: u16,
    ) -> BoxFuture<'a, Result<Terminal, ProvisionError>>;

    /// Sets the size of a [`Terminal`], named by its id.
    fn resize_terminal<'a>(
        &'a self,
        terminal: &'a str,
        rows: u16,
        cols: u16,
    ) -> BoxFuture<'a, Result<(), ProvisionError>>;

    /// The exit code of a [`Terminal`]'s command, -1 until the backend has recorded it.
    fn terminal_exit_code<'a>(&'a self, terminal: &'a str) -> BoxFuture<'a, Result<i64, ProvisionError>>;

    /// Whether sandboxes of `image` get their disk bounded, found out once (Docker creates a
    /// container that is never started, asking for a bound, and removes it).
    fn probe_disk_bound<'a>(&'a self, _image: &'a str) -> BoxFuture<'a, DiskBound> {
        Box::pin(async { self.disk_bound() })
    }

    /// What the probe and the creates so far found about disk bounds.
    fn disk_bound(&self) -> DiskBound {
        DiskBound::Unenforced("sandboxes get no disk quota".to_string())
    }

    /// From now on, a sandbox whose disk the backend cannot bound is not created: a create the
    /// engine refuses the bound for fails instead of being made again without it.
    fn require_disk_bound(&self) {}

    /// Why an I/O weight asked for ([`Resources::io_weight`]) was not applied (the engine
    /// discarded it: no proportional I/O scheduler, such as BFQ, on the host); None when every
    /// one asked was, or none was asked.
    fn io_weight_discarded(&self) -> Option<String> {
        None
    }
}

/// A tar archive as a stream of chunks, sent as it is read: never held whole (a source archive
/// may be as large as `[source] max_mb`). An error item ends the upload.
pub struct TarStream(pub BoxStream<'static, std::io::Result<bytes::Bytes>>);

impl From<Vec<u8>> for TarStream {
    /// A tar already in memory (the agent, test fixtures).
    fn from(bytes: Vec<u8>) -> TarStream {
        TarStream(Box::pin(futures_util::stream::once(async move { Ok(bytes::Bytes::from(bytes)) })))
    }
}

/// A command running in a sandbox with a terminal, attached to this process.
pub struct Terminal {
    /// What [`Provisioner::resize_terminal`] and [`Provisioner::terminal_exit_code`] name it by.
    pub id: String,
    /// What the terminal shows, until the command ends.
    pub output: BoxStream<'static, anyhow::Result<Vec<u8>>>,
    /// The keys typed into it.
    pub input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
}

/// What a sandbox uses at one moment, from its cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Cumulative CPU time.
    pub cpu_ns: u64,
    /// Memory in use, page cache that can be dropped excluded.
    pub memory_bytes: u64,
}

/// A sandbench sandbox as listed by its backend.
#[derive(Debug, Clone)]
pub struct ContainerInfo {
    pub id: String,
    pub name: String,
    pub state: String,
    pub image: String,
    /// Unix seconds.
    pub created: i64,
    pub labels: HashMap<String, String>,
}

/// Why the reaper removed a sandbox.
#[derive(Debug, Clone)]
pub struct Reaped {
    pub name: String,
    pub reason: String,
}

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
    /// A compared sandbox's side (`base`, `head`), pair (from 0) and the run's attempt (from 1):
    /// its [`sandbench_proto::Placement`].
    pub const SIDE: &str = "io.sandbench.side";
    pub const PAIR: &str = "io.sandbench.pair";
    pub const ATTEMPT: &str = "io.sandbench.attempt";
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
    /// The sandbox's writable space (`disk_gb`), bounded where the backend can
    /// ([`Provisioner::disk_bound`]); None: no bound asked.
    pub disk_bytes: Option<u64>,
    /// Its block I/O weight (10–1000), the same for both sides of a duet so that under
    /// contention each gets the same share of the disk, where the kernel can weigh it
    /// ([`Provisioner::io_weight_discarded`]); None: the engine's default.
    pub io_weight: Option<u16>,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpus: 2.0,
            cpuset: None,
            memory_bytes: 4 << 30,
            pids_limit: 4096,
            disk_bytes: None,
            io_weight: None,
        }
    }
}

/// Whether a backend bounds a sandbox's writable space to [`Resources::disk_bytes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskBound {
    /// Not known yet (no sandbox asked for one, no probe).
    Unknown,
    /// Bounded: a write past the bound fails in the sandbox (ENOSPC, or EDQUOT on btrfs).
    Enforced,
    /// Not bounded, and why.
    Unenforced(String),
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
    /// Host folder holding the controller's socket for this sandbox alone; mounted at
    /// `/run/sandbench`.
    pub socket_dir: PathBuf,
    pub token: String,
    /// More labels (cost rate, debug control socket).
    pub labels: std::collections::BTreeMap<String, String>,
    /// The sandbox's side, pair and attempt in a comparison (none for a sandbox of no
    /// comparison): its labels, and its agent's environment, which its Hello says back.
    pub placement: Option<sandbench_proto::Placement>,
}

impl SandboxRequest {
    /// The deterministic container name, also the sandbox id on the wire.
    pub fn sandbox_id(&self) -> String {
        format!("sandbench-{}-{}", self.run_id, self.role)
    }

    /// The labels of the sandbox's placement ([`labels::SIDE`], …), none without one.
    pub fn placement_labels(&self) -> Vec<(String, String)> {
        let Some(p) = self.placement else { return Vec::new() };
        [
            (labels::SIDE, p.side.to_string()),
            (labels::PAIR, p.pair.to_string()),
            (labels::ATTEMPT, p.attempt.to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .to_vec()
    }
}

/// A created sandbox.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub id: String,
    pub container_id: String,
    pub run_id: String,
    pub role: String,
    /// Its place in a compared run (side, pair, attempt), as requested.
    pub placement: Option<sandbench_proto::Placement>,
    /// When the create request was made (the start of its lifetime for cost).
    pub requested_at: SystemTime,
    /// Time spent waiting for a create slot (admission control).
    pub queued: Duration,
    pub expires_at: SystemTime,
}
