//! A run's station: what every way of driving sandboxes — `run`, `debug`, `bisect`, `bench` and
//! the end-to-end tests — sets up alike and tears down alike. It owns the provisioner (leftovers
//! reaped and the image present at opening, the agent located), the run directory with its hub
//! and gRPC server, one socket folder per sandbox (`sock/<role>/agent.sock`, so a sandbox can
//! reach no other sandbox's socket), and the teardown of each sandbox and of the whole station.
//! One sandbox's life within it is [`sandbox`]; a sandbox of a plan, from launch to its cost
//! record, is a [`session::Session`].
//!
//! "Sandbox" in the crate: [`crate::provision`] is where sandboxes live (the backends: Docker,
//! the fake); this module is a run's sandboxes at run time; [`crate::by_hand`] is the commands a
//! person runs on the sandboxes of this machine (`ls`, `shell`, `logs`, `phase`, `rm`, `gc`).

pub mod sandbox;
pub mod session;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::observations::server::{DEFAULT_HEARTBEAT, Hub, HubConfig, ServerHandle};
use crate::provision::{AgentShipping, Provisioner, Resources, Sandbox, SandboxRequest, labels};
use crate::spec::Plan;
use sandbox::{LiveSandbox, Teardown};

/// The folder of the per-sandbox socket folders, in the run directory.
pub const SOCKETS_DIR: &str = "sock";

/// What a station is opened with.
#[derive(Debug, Clone)]
pub struct StationOptions {
    /// The run directory (made when missing).
    pub dir: PathBuf,
    /// Part of every sandbox's name and its `io.sandbench.run` label.
    pub run_id: String,
    /// The image sandboxes will run, made present at opening (None: checked by nobody).
    pub image: Option<String>,
    /// Sandboxes run the image derived from `image` with valgrind ([`Provisioner::ensure_valgrind`],
    /// built at opening when it is not there).
    pub valgrind: bool,
    /// The agent executable to ship (None: beside this executable, or `$SANDBENCH_AGENT`).
    pub agent: Option<PathBuf>,
    pub hub: HubConfig,
}

/// The hub settings of a station that runs `plan`'s sandboxes: the plan's output cap, the
/// default heartbeat and the `--dead-man` window.
pub fn hub_config(plan: &Plan, dead_man: Duration) -> HubConfig {
    HubConfig {
        output_cap_bytes: plan.sandbox.output_cap_bytes,
        registries: plan.sandbox.registries.clone().map(Arc::new),
        ..HubConfig::with_dead_man(DEFAULT_HEARTBEAT, dead_man)
    }
}

pub struct Station {
    provisioner: Arc<dyn Provisioner>,
    dir: PathBuf,
    run_id: String,
    agent: PathBuf,
    /// The image every sandbox of the run is provisioned from.
    image: Option<String>,
    hub: Mutex<Hub>,
    server: Mutex<Option<ServerHandle>>,
    /// Roles whose socket folder is open.
    sockets: Mutex<BTreeSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Station {
    /// Reaps leftover sandboxes, makes the image present (and its valgrind image, when asked),
    /// locates the agent, and starts serving agents from the run directory. `progress` hears
    /// what is done on the way.
    pub async fn open(
        provisioner: Arc<dyn Provisioner>,
        options: StationOptions,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> anyhow::Result<Station> {
        for reaped in provisioner.reap().await? {
            progress(&format!("removed leftover sandbox {} ({})", reaped.name, reaped.reason));
        }
        let mut image = options.image.clone();
        if let Some(base) = &options.image {
            provisioner.ensure_image(base, progress).await?;
            if options.valgrind {
                image = Some(provisioner.ensure_valgrind(base, progress).await?);
            }
        }
        let agent = match provisioner.ships_agent() {
            true => crate::agent_binary::locate(options.agent.as_deref())?,
            false => PathBuf::new(),
        };
        let dir = run_dir(&options.dir)?;
        private_dir(&dir.join(SOCKETS_DIR))?;
        let hub = Hub::open(&dir, options.hub)?;
        let server = hub.start_server()?;
        Ok(Station {
            provisioner,
            dir,
            run_id: options.run_id,
            agent,
            image,
            hub: Mutex::new(hub),
            server: Mutex::new(Some(server)),
            sockets: Mutex::default(),
        })
    }

    pub fn provisioner(&self) -> &Arc<dyn Provisioner> {
        &self.provisioner
    }

    /// The run directory (absolute).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The agent executable shipped (empty when the provisioner ships none).
    pub fn agent(&self) -> &Path {
        &self.agent
    }

    /// The image sandboxes are provisioned from: the options' image, or the image derived from
    /// it with valgrind. None when the station was opened without an image.
    pub fn image(&self) -> Option<&str> {
        self.image.as_deref()
    }

    /// The hub agents talk to (a new one after [`Station::restart_server`]).
    pub fn hub(&self) -> Hub {
        lock(&self.hub).clone()
    }

    /// The socket folder of the sandbox with this role.
    pub fn socket_dir(&self, role: &str) -> PathBuf {
        self.dir.join(SOCKETS_DIR).join(role)
    }

    /// Makes the sandbox's own socket folder and serves agents in it. Opening one already open
    /// does nothing.
    pub fn open_socket(&self, role: &str) -> anyhow::Result<PathBuf> {
        if role.is_empty()
            || role.starts_with('.')
            || !role.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            bail!("invalid sandbox role {role:?}: letters, digits, '-', '_' and '.' only");
        }
        let dir = self.socket_dir(role);
        private_dir(&dir)?;
        let server = lock(&self.server);
        let server = server.as_ref().context("the station's server is stopped")?;
        server.listen(&dir.join(sandbench_proto::SOCKET_NAME))?;
        lock(&self.sockets).insert(role.to_string());
        Ok(dir)
    }

    fn close_socket(&self, role: &str) {
        if !lock(&self.sockets).remove(role) {
            return;
        }
        let dir = self.socket_dir(role);
        if let Some(server) = lock(&self.server).as_ref() {
            server.unlisten(&dir.join(sandbench_proto::SOCKET_NAME));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A request for a sandbox of this run, with its socket folder open: default resources, no
    /// network, 15 minutes to live, the agent bind-mounted. Adjust the fields as needed.
    pub fn request(&self, role: &str, image: &str) -> anyhow::Result<SandboxRequest> {
        Ok(SandboxRequest {
            run_id: self.run_id.clone(),
            role: role.to_string(),
            image: image.to_string(),
            resources: Resources::default(),
            network: false,
            ttl: Duration::from_secs(900),
            shipping: AgentShipping::Bind,
            agent_binary: self.agent.clone(),
            socket_dir: self.open_socket(role)?,
            token: String::new(),
            labels: Default::default(),
            placement: None,
        })
    }

    /// A request for a sandbox of `plan`: the station's image, the plan's resources, network and
    /// time to live, its hourly rate as a label, the agent shipped as `shipping`.
    pub fn plan_request(&self, role: &str, plan: &Plan, shipping: AgentShipping) -> anyhow::Result<SandboxRequest> {
        let image = self.image().unwrap_or(&plan.sandbox.image).to_string();
        let mut request = self.request(role, &image)?;
        request.resources = Resources {
            cpus: plan.sandbox.cpus,
            cpuset: plan.sandbox.cpuset.clone(),
            memory_bytes: plan.sandbox.memory_bytes,
            pids_limit: plan.sandbox.pids_limit,
            disk_bytes: Some(plan.sandbox.disk_bytes()),
            io_weight: None,
        };
        request.network = plan.sandbox.network;
        request.ttl = plan.sandbox.ttl;
        request.shipping = shipping;
        request.labels = [(labels::USD_PER_HOUR.to_string(), format!("{:.6}", plan.hourly_usd()))].into();
        Ok(request)
    }

    /// Creates and starts a sandbox and waits for its agent's Hello (see [`sandbox::launch`]).
    pub async fn launch(&self, mut request: SandboxRequest, hello_timeout: Duration) -> anyhow::Result<LiveSandbox> {
        request.socket_dir = self.open_socket(&request.role)?;
        let role = request.role.clone();
        let launched = sandbox::launch(&*self.provisioner, &self.hub(), request, hello_timeout).await;
        if launched.is_err() {
            self.close_socket(&role);
        }
        launched
    }

    /// Ends one sandbox (see [`sandbox::teardown`]) and closes its socket folder.
    pub async fn teardown(&self, sandbox: &Sandbox) -> Teardown {
        let down = sandbox::teardown(&*self.provisioner, &self.hub(), &self.dir, sandbox).await;
        self.close_socket(&sandbox.role);
        down
    }

    /// Stops serving and closes the hub, as a crashing controller would lose them, then reopens
    /// the hub from the run directory and serves every open socket folder again.
    pub async fn restart_server(&self) -> anyhow::Result<Hub> {
        self.stop_server().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let hub = Hub::open(&self.dir, self.hub().config())?;
        let server = hub.start_server()?;
        for role in lock(&self.sockets).iter() {
            server.listen(&self.socket_dir(role).join(sandbench_proto::SOCKET_NAME))?;
        }
        *lock(&self.server) = Some(server);
        *lock(&self.hub) = hub.clone();
        Ok(hub)
    }

    /// Stops serving agents and closes the hub (everything accepted is on disk).
    pub async fn stop_server(&self) {
        let server = lock(&self.server).take();
        if let Some(server) = server {
            server.stop().await;
        }
        self.hub().close().await;
    }

    /// What the report says of the registry bridge (none without one): its totals, each timed
    /// trial's requests and cache hits, its refusals.
    pub fn bridge_summary(&self) -> Vec<String> {
        self.hub().bridge().map(|b| b.summary()).unwrap_or_default()
    }

    /// The end of every path: removes whatever sandbox of this run is left, stops serving, closes
    /// the hub and removes the socket folders. Returns what could not be cleaned up.
    pub async fn close(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        match self.provisioner.list(Some((labels::RUN, &self.run_id))).await {
            Ok(leftovers) => {
                for leftover in leftovers {
                    if let Err(err) = self.provisioner.remove(&leftover.name).await {
                        warnings.push(format!("{}: sandbox cleanup failed: {err:#}", leftover.name));
                    }
                }
            }
            Err(err) => warnings.push(format!("cannot list the run's sandboxes for cleanup: {err:#}")),
        }
        self.stop_server().await;
        lock(&self.sockets).clear();
        let _ = std::fs::remove_dir_all(self.dir.join(SOCKETS_DIR));
        warnings
    }
}

/// Makes the run directory and returns its absolute path (sockets are bind-mounted by path).
///
/// The directory is private to its owner (0700): it holds the agents' tokens and the product's
/// output. It is created so (with any missing parent); one that exists is tightened to 0700 when
/// it is ours, and refused when it belongs to another user.
pub fn run_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let meta = std::fs::metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        bail!(
            "the run directory {} belongs to uid {}, not to this user (uid {me}): name a directory of your own",
            dir.display(),
            meta.uid()
        );
    }
    if meta.mode() & 0o777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private (0700)", dir.display()))?;
    }
    dir.canonicalize().with_context(|| format!("cannot resolve {}", dir.display()))
}

/// A folder only its owner (the controller; root in the sandbox) can enter.
fn private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot restrict {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::Duration;

    use super::run_dir;

    fn mode(path: &std::path::Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_run_directory_is_private_to_its_owner() {
        let tmp = tempfile::tempdir().unwrap();
        // Created so, with its missing parents.
        let dir = run_dir(&tmp.path().join("runs/20260101-000000-ab")).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert!(dir.is_absolute());
        // One that exists, ours, open to all: tightened.
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        run_dir(&open).unwrap();
        assert_eq!(mode(&open), 0o700);
        // Someone else's: refused, untouched (only root can give a directory away).
        if rustix::process::geteuid().is_root() {
            let theirs = tmp.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(4242), None).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
            let err = run_dir(&theirs).unwrap_err().to_string();
            assert!(err.contains("belongs to uid 4242, not to this user (uid 0)"), "{err}");
            assert_eq!((mode(&theirs), std::fs::metadata(&theirs).unwrap().uid()), (0o755, 4242));
        }
    }

    #[test]
    fn the_hub_takes_the_plans_output_cap_and_the_dead_man_window_given() {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join("bench.toml");
        let text = crate::provision::fake::spec_text(
            "install = 1\nmeasure = 1",
            "[install]\ncommand = \"sh install.sh\"\n\n[measure]\nstartup = [\"product\"]\n",
        );
        std::fs::write(&spec, text.replace("disk_gb = 10\n", "disk_gb = 10\noutput_kb = 64\n")).unwrap();
        let plan = crate::spec::load(&spec).unwrap_or_else(|e| panic!("{e}"));
        let config = super::hub_config(&plan, Duration::from_secs(45));
        assert_eq!(config.output_cap_bytes, 64 * 1024);
        assert_eq!((config.heartbeat, config.dead_man()), (Duration::from_millis(500), Duration::from_secs(45)));
    }
}
