//! The Docker backend, through the Engine API (bollard): the only module that imports bollard.
//! Negotiates the API version (Docker 20.10 / API 1.41 and current engines), honours
//! `DOCKER_HOST`, bounds concurrent creates, and reaps expired or orphaned sandboxes.

pub mod valgrind;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, DownloadFromContainerOptions, KillContainerOptions,
    ListContainersOptions, LogsOptions, RemoveContainerOptions, StartContainerOptions, StatsOptions,
    UploadToContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use sandbench_proto::{SOCKET_DIR_IN_SANDBOX, SOCKET_NAME, env};
use tokio::sync::Semaphore;

use super::{AgentShipping, DiskBound, ProvisionError, Provisioner, Sandbox, SandboxRequest, Usage, labels};
pub use super::{ContainerInfo, Reaped};

/// Where the agent lives inside a sandbox.
pub const AGENT_PATH_IN_SANDBOX: &str = "/sandbench/sandbox-agent";

/// Capabilities the agent needs: create users and chown their files, switch to them, kill their
/// processes, and read their /proc entries (smaps for PSS). Everything else is dropped.
const CAPABILITIES: &[&str] = &["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL", "SYS_PTRACE"];

/// An image as the engine holds it (what derived images are keyed by).
#[derive(Debug, Clone, Default)]
pub struct ImageFacts {
    /// `sha256:…`, the digest of the image's configuration.
    pub id: String,
    pub tags: Vec<String>,
    /// `amd64`, `arm64`, … as the image says.
    pub architecture: String,
    /// The user its processes run as by default (empty: root).
    pub user: String,
    pub labels: HashMap<String, String>,
}

/// An image built by [`DockerProvisioner::build`]: its id and the build's output.
#[derive(Debug, Clone)]
pub struct Built {
    pub id: String,
    pub output: String,
}

/// A command running in a container with a terminal, attached to this process.
pub struct ExecSession {
    pub id: String,
    pub output: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<bollard::container::LogOutput, bollard::errors::Error>> + Send>,
    >,
    pub input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
}

/// How a container was set up, as the engine reports it (token values left out).
#[derive(Debug, Clone, Default)]
pub struct ContainerSettings {
    pub labels: HashMap<String, String>,
    pub entrypoint: Vec<String>,
    /// Names of the environment variables (values may be secret).
    pub env_names: Vec<String>,
    pub user: String,
    pub network_mode: String,
    pub nano_cpus: i64,
    pub cpuset_cpus: String,
    pub memory_bytes: i64,
    pub pids_limit: i64,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub privileged: bool,
    pub security_opt: Vec<String>,
    pub binds: Vec<String>,
    /// The log driver and its options.
    pub log_config: (String, HashMap<String, String>),
    pub storage_opt: HashMap<String, String>,
    /// The block I/O weight the engine kept (0: none, or discarded).
    pub blkio_weight: u16,
}

pub struct DockerProvisioner {
    docker: Docker,
    create_slots: Arc<Semaphore>,
    owner: String,
    api_version: String,
    /// `DOCKER_HOST`, or the local socket.
    host: String,
    /// Whether the engine bounds a container's disk, once a create (or the probe) told.
    disk: std::sync::Mutex<DiskBound>,
    /// A create the engine refuses the bound for fails (an untrusted head's run).
    disk_bound_required: std::sync::atomic::AtomicBool,
    /// Why an I/O weight asked for is not in effect, once a create found it discarded.
    io_weight_discarded: std::sync::Mutex<Option<String>>,
    /// The engine's storage driver (`overlay2`, `btrfs`), asked once.
    driver: tokio::sync::OnceCell<String>,
}

/// The container log's bound on the host (json-file, rotated): the agent's own log lines go there
/// (product output travels through the journal), a few KiB in a normal run; 2 × 1 MiB holds
/// thousands of them and bounds a flood from root in the sandbox to 2 MiB per sandbox.
const LOG_MAX_SIZE: &str = "1m";
const LOG_MAX_FILE: &str = "2";
/// What is read of a container log (teardown, a failed start): its last lines, and of those the
/// last bytes.
const LOG_READ_LINES: &str = "5000";
pub const LOG_READ_BYTES: usize = 1 << 20;

/// How long a ping may take before the engine counts as unreachable.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

impl DockerProvisioner {
    /// Connects through `DOCKER_HOST` (or the local socket) and negotiates the API version.
    pub async fn connect(max_concurrent_creates: usize) -> Result<DockerProvisioner, ProvisionError> {
        let host = std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".to_string());
        let connect_error =
            |cause: bollard::errors::Error| ProvisionError::Connect { host: host.clone(), cause: cause.into() };
        let docker = Docker::connect_with_defaults().map_err(connect_error)?;
        Self::negotiate(docker, host, max_concurrent_creates).await
    }

    /// Connects to the engine listening on the Unix socket `socket` (a private engine, as the
    /// engine-restart tests start), whatever `DOCKER_HOST` says.
    pub async fn connect_socket(
        socket: &std::path::Path,
        max_concurrent_creates: usize,
    ) -> Result<DockerProvisioner, ProvisionError> {
        let host = format!("unix://{}", socket.display());
        let docker = Docker::connect_with_unix(&host, 120, bollard::API_DEFAULT_VERSION)
            .map_err(|cause| ProvisionError::Connect { host: host.clone(), cause: cause.into() })?;
        Self::negotiate(docker, host, max_concurrent_creates).await
    }

    async fn negotiate(
        docker: Docker,
        host: String,
        max_concurrent_creates: usize,
    ) -> Result<DockerProvisioner, ProvisionError> {
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|cause| ProvisionError::Connect { host: host.clone(), cause: cause.into() })?;
        let api_version = docker.client_version().to_string();
        Ok(DockerProvisioner {
            docker,
            create_slots: Arc::new(Semaphore::new(max_concurrent_creates.max(1))),
            owner: owner_id(),
            api_version,
            host,
            disk: std::sync::Mutex::new(DiskBound::Unknown),
            disk_bound_required: std::sync::atomic::AtomicBool::new(false),
            io_weight_discarded: std::sync::Mutex::new(None),
            driver: tokio::sync::OnceCell::new(),
        })
    }

    /// Where the engine is: `DOCKER_HOST`, or the local socket.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether the engine answers a ping within a few seconds.
    pub async fn ping(&self) -> Result<(), ProvisionError> {
        let connect_error =
            |cause: bollard::errors::Error| ProvisionError::Connect { host: self.host.clone(), cause: cause.into() };
        match tokio::time::timeout(PING_TIMEOUT, self.docker.ping()).await {
            Ok(answer) => answer.map(|_| ()).map_err(connect_error),
            Err(_) => Err(connect_error(bollard::errors::Error::RequestTimeoutError)),
        }
    }

    /// The negotiated Engine API version.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// This controller process's owner label value.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Makes sure `image` is present, pulling it (with progress) when it is not.
    pub async fn ensure_image(
        &self,
        image: &str,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Result<(), ProvisionError> {
        if self.docker.inspect_image(image).await.is_ok() {
            return Ok(());
        }
        progress(&format!("pulling {image}"));
        let options = CreateImageOptions { from_image: Some(image.to_string()), ..Default::default() };
        let mut pull = self.docker.create_image(Some(options), None, None);
        let mut last = String::new();
        while let Some(item) = pull.next().await {
            let info = item.map_err(|cause| ProvisionError::Pull { image: image.to_string(), cause: cause.into() })?;
            let detail = info.progress_detail.map(|d| format!("{}/{}", d.current.unwrap_or(0), d.total.unwrap_or(0)));
            let line = [info.status.unwrap_or_default(), detail.unwrap_or_default()].join(" ");
            if line != last {
                progress(line.trim());
                last = line;
            }
        }
        Ok(())
    }

    /// Imports a root file system tarball as image `tag` (like `docker import`).
    pub async fn import_image(&self, tag: &str, tar: Vec<u8>) -> Result<(), ProvisionError> {
        let (repo, version) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
        let options = CreateImageOptions {
            from_src: Some("-".to_string()),
            repo: Some(repo.to_string()),
            tag: Some(version.to_string()),
            ..Default::default()
        };
        let mut import = self.docker.create_image(Some(options), Some(bollard::body_full(tar.into())), None);
        while let Some(item) = import.next().await {
            item.map_err(|cause| ProvisionError::Import { tag: tag.to_string(), cause: cause.into() })?;
        }
        Ok(())
    }

    /// The image's id, tags, architecture and labels; None when the engine does not have it.
    pub async fn image_facts(&self, image: &str) -> Result<Option<ImageFacts>, ProvisionError> {
        let info = match self.docker.inspect_image(image).await {
            Ok(info) => info,
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => return Ok(None),
            Err(cause) => return Err(ProvisionError::InspectImage { image: image.to_string(), cause: cause.into() }),
        };
        let config = info.config.unwrap_or_default();
        Ok(Some(ImageFacts {
            id: info.id.unwrap_or_default(),
            tags: info.repo_tags.unwrap_or_default(),
            architecture: info.architecture.unwrap_or_default(),
            user: config.user.unwrap_or_default(),
            labels: config.labels.unwrap_or_default(),
        }))
    }

    /// The images carrying the label `key=value`.
    pub async fn images_labelled(&self, key: &str, value: &str) -> Result<Vec<ImageFacts>, ProvisionError> {
        let filters = HashMap::from([("label".to_string(), vec![format!("{key}={value}")])]);
        let options = bollard::query_parameters::ListImagesOptions { filters: Some(filters), ..Default::default() };
        let images = self.docker.list_images(Some(options)).await.map_err(|cause| ProvisionError::InspectImage {
            image: format!("label {key}={value}"),
            cause: cause.into(),
        })?;
        Ok(images
            .into_iter()
            .map(|i| ImageFacts { id: i.id, tags: i.repo_tags, labels: i.labels, ..Default::default() })
            .collect())
    }

    /// Whether the engine has the network `name` (`bridge`: containers and builds get a network
    /// by default; an engine started with `--bridge=none` has none).
    pub async fn has_network(&self, name: &str) -> bool {
        self.docker.inspect_network(name, None).await.is_ok()
    }

    /// Builds an image from a context tar (holding a `Dockerfile`) with the classic builder,
    /// intermediate containers removed whatever happens; `network` false runs its steps without
    /// a network. Each line of output goes to `progress` as it comes.
    pub async fn build(
        &self,
        from: &str,
        context: Vec<u8>,
        labels: HashMap<String, String>,
        network: bool,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Built, ProvisionError> {
        let fail = |cause: String| ProvisionError::Build { image: from.to_string(), cause: cause.into() };
        let options = bollard::query_parameters::BuildImageOptions {
            dockerfile: "Dockerfile".to_string(),
            rm: true,
            forcerm: true,
            labels: Some(labels),
            networkmode: (!network).then(|| "none".to_string()),
            ..Default::default()
        };
        let mut stream = self.docker.build_image(options, None, Some(bollard::body_full(context.into())));
        let (mut output, mut id) = (String::new(), None);
        while let Some(item) = stream.next().await {
            let info = item.map_err(|cause| fail(cause.to_string()))?;
            if let Some(detail) = info.error_detail {
                return Err(fail(format!("{}\n{}", detail.message.unwrap_or_default(), tail(&output, 20))));
            }
            if let Some(text) = info.stream {
                output.push_str(&text);
                text.lines().map(str::trim_end).filter(|l| !l.is_empty()).for_each(&mut *progress);
            }
            id = info.aux.and_then(|a| a.id).or(id);
        }
        let id = id
            .or_else(|| {
                output.lines().find_map(|l| l.strip_prefix("Successfully built ")).map(|i| i.trim().to_string())
            })
            .ok_or_else(|| fail(format!("the engine named no image\n{}", tail(&output, 20))))?;
        Ok(Built { id, output })
    }

    /// Tags the image `id` as `tag` (`repo:version`).
    pub async fn tag(&self, id: &str, tag: &str) -> Result<(), ProvisionError> {
        let (repo, version) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
        let options =
            bollard::query_parameters::TagImageOptions { repo: Some(repo.to_string()), tag: Some(version.to_string()) };
        self.docker.tag_image(id, Some(options)).await.map_err(|cause| ProvisionError::Tag {
            id: id.to_string(),
            tag: tag.to_string(),
            cause: cause.into(),
        })
    }

    /// A container of `image` that is never started, without network, labelled like a sandbox
    /// of the run `run` (so the reaper removes it should this controller die first).
    fn inert_body(&self, image: &str, run: &str) -> ContainerCreateBody {
        ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: Some(vec!["/sandbench-never-started".to_string()]),
            cmd: Some(vec![]),
            labels: Some(HashMap::from([
                (labels::OWNER.to_string(), self.owner.clone()),
                (labels::RUN.to_string(), run.to_string()),
                (labels::EXPIRES_AT.to_string(), (unix_secs(SystemTime::now()) + 600).to_string()),
            ])),
            network_disabled: Some(true),
            host_config: Some(HostConfig { network_mode: Some("none".into()), ..Default::default() }),
            ..Default::default()
        }
    }

    /// Creates a container of `image` that is never started, to read its files through the
    /// archive API ([`DockerProvisioner::download`]); labelled like a sandbox so the reaper
    /// removes it should this controller die before it does.
    pub async fn create_inert(&self, name: &str, image: &str) -> Result<(), ProvisionError> {
        let body = self.inert_body(image, "inspect");
        let options = CreateContainerOptions { name: Some(name.to_string()), ..Default::default() };
        self.docker
            .create_container(Some(options), body)
            .await
            .map(|_| ())
            .map_err(|cause| ProvisionError::Create { name: name.to_string(), cause: cause.into() })
    }

    /// Removes the image (its tag, and its layers no other image uses). Absent is fine.
    pub async fn remove_image(&self, image: &str) -> Result<(), ProvisionError> {
        let options = bollard::query_parameters::RemoveImageOptions { force: true, ..Default::default() };
        match self.docker.remove_image(image, Some(options), None).await {
            Ok(_) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
            Err(cause) => Err(ProvisionError::InspectImage { image: image.to_string(), cause: cause.into() }),
        }
    }

    pub async fn image_exists(&self, image: &str) -> bool {
        self.docker.inspect_image(image).await.is_ok()
    }

    /// Creates a sandbox (not started), shipping the agent as asked. Waits for a create slot.
    pub async fn create(&self, request: &SandboxRequest) -> Result<Sandbox, ProvisionError> {
        let requested_at = SystemTime::now();
        let queued_since = Instant::now();
        let _slot = self.create_slots.acquire().await.expect("the create semaphore is never closed");
        let queued = queued_since.elapsed();
        let name = request.sandbox_id();
        let expires_at = requested_at + request.ttl;
        let mut container_labels = HashMap::from([
            (labels::OWNER.to_string(), self.owner.clone()),
            (labels::RUN.to_string(), request.run_id.clone()),
            (labels::ROLE.to_string(), request.role.clone()),
            (labels::EXPIRES_AT.to_string(), unix_secs(expires_at).to_string()),
        ]);
        container_labels.extend(request.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        container_labels.extend(request.placement_labels());
        let host_config = host_config(request);
        let body = ContainerCreateBody {
            image: Some(request.image.clone()),
            entrypoint: Some(vec![AGENT_PATH_IN_SANDBOX.to_string()]),
            cmd: Some(vec![]),
            user: Some("0:0".to_string()),
            // Only what the agent needs; nothing from the controller's environment.
            env: Some(
                [
                    format!("{}={}", env::SANDBOX_ID, name),
                    format!("{}={}", env::TOKEN, request.token),
                    format!("{}={}/{}", env::SOCKET, SOCKET_DIR_IN_SANDBOX, SOCKET_NAME),
                ]
                .into_iter()
                .chain(request.placement.iter().flat_map(|p| p.env().map(|(k, v)| format!("{k}={v}"))))
                .collect(),
            ),
            labels: Some(container_labels),
            network_disabled: Some(!request.network),
            host_config: Some(host_config),
            ..Default::default()
        };
        let container_id = self.create_bounded(&name, body, request.resources.disk_bytes).await?;
        if let Some(weight) = request.resources.io_weight {
            self.check_io_weight(&name, weight).await;
        }
        let sandbox = Sandbox {
            id: name.clone(),
            container_id,
            run_id: request.run_id.clone(),
            role: request.role.clone(),
            placement: request.placement,
            requested_at,
            queued,
            expires_at,
        };
        if request.shipping == AgentShipping::Upload {
            let result = async {
                let tar = agent_tar(&request.agent_binary).await?;
                let options = UploadToContainerOptions { path: "/".to_string(), ..Default::default() };
                self.docker.upload_to_container(&name, Some(options), bollard::body_full(tar.into())).await?;
                anyhow::Ok(())
            }
            .await;
            if let Err(cause) = result {
                let _ = self.remove(&name).await;
                return Err(ProvisionError::Upload { name, cause: cause.into() });
            }
        }
        Ok(sandbox)
    }

    /// Creates the container `name`, its writable space bounded to `disk_bytes` when asked and
    /// the engine can: an engine that refuses the bound gets the create again without it, and
    /// the refusal is remembered (the run's report and terminal say so). Returns its id.
    async fn create_bounded(
        &self,
        name: &str,
        mut body: ContainerCreateBody,
        disk_bytes: Option<u64>,
    ) -> Result<String, ProvisionError> {
        let storage = match disk_bytes {
            Some(bytes) if !matches!(self.disk_bound(), DiskBound::Unenforced(_)) => {
                Some(HashMap::from([("size".to_string(), bytes.to_string())]))
            }
            _ => None,
        };
        let bounded = storage.is_some();
        let host_config = body.host_config.get_or_insert_with(Default::default);
        host_config.storage_opt = storage;
        let options = CreateContainerOptions { name: Some(name.to_string()), ..Default::default() };
        let fail =
            |cause: bollard::errors::Error| ProvisionError::Create { name: name.to_string(), cause: cause.into() };
        match self.docker.create_container(Some(options.clone()), body.clone()).await {
            Ok(created) => {
                if bounded {
                    self.learn_disk_bound(DiskBound::Enforced);
                }
                Ok(created.id)
            }
            Err(bollard::errors::Error::DockerResponseServerError { message, .. })
                if bounded && super::disk::refused(&message) =>
            {
                let reason = super::disk::unenforced(&self.storage_driver().await, &message);
                tracing::info!("disk_gb is not enforced: {reason}");
                self.learn_disk_bound(DiskBound::Unenforced(reason.clone()));
                if self.disk_bound_required.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(fail(bollard::errors::Error::DockerResponseServerError {
                        status_code: 400,
                        message: format!(
                            "the engine cannot bound the sandbox's disk, which this run requires: {reason}"
                        ),
                    }));
                }
                if let Some(host_config) = body.host_config.as_mut() {
                    host_config.storage_opt = None;
                }
                self.docker.create_container(Some(options), body).await.map(|c| c.id).map_err(fail)
            }
            Err(cause) => Err(fail(cause)),
        }
    }

    /// Whether the engine kept the I/O weight asked of container `name`: one that cannot weigh
    /// I/O (no BFQ scheduler on cgroup v1, no `io.weight` on v2) discards it, with a warning, and
    /// the container's settings then say 0.
    async fn check_io_weight(&self, name: &str, weight: u16) {
        let kept = match self.docker.inspect_container(name, None).await {
            Ok(inspect) => inspect.host_config.and_then(|h| h.blkio_weight),
            Err(err) => {
                tracing::warn!("cannot read the I/O weight of {name}: {err}");
                return;
            }
        };
        if kept != Some(weight) {
            let why = format!(
                "the engine discarded the block I/O weight {weight} (it kept {}): the host's kernel does not weigh \
                 I/O between containers (it needs the BFQ I/O scheduler, or io.weight under cgroup v2)",
                kept.unwrap_or(0)
            );
            *self.io_weight_discarded.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why);
        }
    }

    /// What creates so far found about disk bounds.
    pub fn disk_bound(&self) -> DiskBound {
        self.disk.lock().map(|d| d.clone()).unwrap_or(DiskBound::Unknown)
    }

    /// Records what a create found: a refusal is final; an enforced bound replaces not knowing.
    fn learn_disk_bound(&self, found: DiskBound) {
        if let Ok(mut disk) = self.disk.lock()
            && !matches!(*disk, DiskBound::Unenforced(_))
        {
            *disk = found;
        }
    }

    /// Whether sandboxes of `image` get their disk bounded: known from an earlier create, or
    /// found by creating a container of `image` asking for a bound (never started), then
    /// removing it. An error unrelated to the bound leaves it unknown.
    pub async fn probe_disk_bound(&self, image: &str) -> DiskBound {
        if self.disk_bound() != DiskBound::Unknown {
            return self.disk_bound();
        }
        static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("sandbench-disk-probe-{}-{n}", std::process::id());
        let body = self.inert_body(image, "probe");
        let created = self.create_bounded(&name, body, Some(1 << 30)).await;
        if created.is_ok()
            && let Err(err) = self.remove(&name).await
        {
            tracing::warn!("cannot remove the disk probe {name}: {err}");
        }
        if let Err(err) = created {
            tracing::warn!("cannot probe the engine's disk bounds: {err}");
        }
        self.disk_bound()
    }

    /// The engine's storage driver, asked once (empty when it cannot be told).
    async fn storage_driver(&self) -> String {
        self.driver
            .get_or_init(|| async { self.docker.info().await.ok().and_then(|i| i.driver).unwrap_or_default() })
            .await
            .clone()
    }

    /// Unpacks a tar into the container's file system at `/` (paths inside the tar say where),
    /// streamed to the engine as it is read.
    pub async fn upload(&self, name: &str, tar: super::TarStream) -> Result<(), ProvisionError> {
        let options = UploadToContainerOptions { path: "/".to_string(), ..Default::default() };
        self.docker
            .upload_to_container(name, Some(options), bollard::body_try_stream(tar.0))
            .await
            .map_err(|cause| ProvisionError::Upload { name: name.to_string(), cause: cause.into() })
    }

    /// The bytes of one file in the container (read through the archive API).
    pub async fn download(&self, name: &str, path: &str) -> Result<Vec<u8>, ProvisionError> {
        let options = DownloadFromContainerOptions { path: path.to_string() };
        let mut stream = self.docker.download_from_container(name, Some(options));
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|cause| ProvisionError::Download {
                name: name.to_string(),
                path: path.to_string(),
                cause: cause.into(),
            })?;
            tar.extend_from_slice(&chunk);
        }
        let fail = |cause: anyhow::Error| ProvisionError::Download {
            name: name.to_string(),
            path: path.to_string(),
            cause: cause.into(),
        };
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut entries = archive.entries().map_err(|e| fail(e.into()))?;
        let mut entry =
            entries.next().ok_or_else(|| fail(anyhow::anyhow!("empty archive")))?.map_err(|e| fail(e.into()))?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).map_err(|e| fail(e.into()))?;
        Ok(bytes)
    }

    pub async fn start(&self, name: &str) -> Result<(), ProvisionError> {
        self.docker
            .start_container(name, None::<StartContainerOptions>)
            .await
            .map_err(|cause| ProvisionError::Start { name: name.to_string(), cause: cause.into() })
    }

    /// Sends a signal to the container's main process (the agent).
    pub async fn kill(&self, name: &str, signal: &str) -> Result<(), ProvisionError> {
        let options = KillContainerOptions { signal: signal.to_string() };
        self.docker
            .kill_container(name, Some(options))
            .await
            .map_err(|cause| ProvisionError::Kill { name: name.to_string(), cause: cause.into() })
    }

    /// Waits until the container stops; returns its exit code.
    pub async fn wait_exit(&self, name: &str) -> Result<i64, ProvisionError> {
        let options = WaitContainerOptions { condition: "not-running".to_string() };
        let mut wait = self.docker.wait_container(name, Some(options));
        match wait.next().await {
            Some(Ok(response)) => Ok(response.status_code),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(cause)) => Err(ProvisionError::Wait { name: name.to_string(), cause: cause.into() }),
            None => Ok(0),
        }
    }

    /// The container's settings as the engine holds them.
    pub async fn settings(&self, name: &str) -> Result<ContainerSettings, ProvisionError> {
        let info = self
            .docker
            .inspect_container(name, None)
            .await
            .map_err(|cause| ProvisionError::Inspect { name: name.to_string(), cause: cause.into() })?;
        let config = info.config.unwrap_or_default();
        let host = info.host_config.unwrap_or_default();
        Ok(ContainerSettings {
            labels: config.labels.unwrap_or_default(),
            entrypoint: config.entrypoint.unwrap_or_default(),
            env_names: config
                .env
                .unwrap_or_default()
                .iter()
                .map(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k).to_string())
                .collect(),
            user: config.user.unwrap_or_default(),
            network_mode: host.network_mode.unwrap_or_default(),
            nano_cpus: host.nano_cpus.unwrap_or_default(),
            cpuset_cpus: host.cpuset_cpus.unwrap_or_default(),
            memory_bytes: host.memory.unwrap_or_default(),
            pids_limit: host.pids_limit.unwrap_or_default(),
            cap_add: host.cap_add.unwrap_or_default(),
            cap_drop: host.cap_drop.unwrap_or_default(),
            privileged: host.privileged.unwrap_or_default(),
            security_opt: host.security_opt.unwrap_or_default(),
            binds: host.binds.unwrap_or_default(),
            log_config: host
                .log_config
                .map(|l| (l.typ.unwrap_or_default(), l.config.unwrap_or_default()))
                .unwrap_or_default(),
            storage_opt: host.storage_opt.unwrap_or_default(),
            blkio_weight: host.blkio_weight.unwrap_or_default(),
        })
    }

    /// The container's cumulative CPU time (ns) and memory in use (bytes, page cache that can be
    /// dropped excluded, as `docker stats` shows it), from its cgroup; None when it is not running.
    pub async fn usage(&self, name: &str) -> Result<Option<(u64, u64)>, ProvisionError> {
        let options = StatsOptions { stream: false, one_shot: true };
        let mut stats = self.docker.stats(name, Some(options));
        match stats.next().await {
            Some(Ok(s)) => {
                let cpu = s.cpu_stats.and_then(|c| c.cpu_usage).and_then(|u| u.total_usage);
                let memory = s.memory_stats.and_then(|m| {
                    let cache = m
                        .stats
                        .as_ref()
                        .and_then(|st| st.get("total_inactive_file").or(st.get("inactive_file")).copied());
                    m.usage.map(|u| u.saturating_sub(cache.unwrap_or(0)))
                });
                Ok(cpu.zip(memory))
            }
            Some(Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })) | None => Ok(None),
            Some(Err(cause)) => Err(ProvisionError::Inspect { name: name.to_string(), cause: cause.into() }),
        }
    }

    /// Runs a command in the container to its end; returns its exit code and its output.
    pub async fn exec_capture(&self, name: &str, cmd: Vec<String>) -> Result<(i64, String), ProvisionError> {
        let fail = |cause: bollard::errors::Error| ProvisionError::Exec { name: name.to_string(), cause: cause.into() };
        let config =
            ExecConfig { cmd: Some(cmd), attach_stdout: Some(true), attach_stderr: Some(true), ..Default::default() };
        let exec = self.docker.create_exec(name, config).await.map_err(fail)?;
        let mut text = String::new();
        if let StartExecResults::Attached { mut output, .. } =
            self.docker.start_exec(&exec.id, None::<StartExecOptions>).await.map_err(fail)?
        {
            while let Some(chunk) = output.next().await {
                text.push_str(&String::from_utf8_lossy(&chunk.map_err(fail)?.into_bytes()));
            }
        }
        let code = self.docker.inspect_exec(&exec.id).await.map_err(fail)?.exit_code.unwrap_or(-1);
        Ok((code, text))
    }

    /// Starts a command with a terminal of `rows` × `cols`, attached to this process.
    pub async fn exec_terminal(
        &self,
        name: &str,
        cmd: Vec<String>,
        rows: u16,
        cols: u16,
    ) -> Result<ExecSession, ProvisionError> {
        let fail = |cause: bollard::errors::Error| ProvisionError::Exec { name: name.to_string(), cause: cause.into() };
        let config = ExecConfig {
            cmd: Some(cmd),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(true),
            env: Some(vec!["TERM=xterm-256color".to_string()]),
            console_size: Some(vec![usize::from(rows), usize::from(cols)]),
            ..Default::default()
        };
        let exec = self.docker.create_exec(name, config).await.map_err(fail)?;
        let options = StartExecOptions { detach: false, tty: true, output_capacity: None };
        match self.docker.start_exec(&exec.id, Some(options)).await.map_err(fail)? {
            StartExecResults::Attached { output, input } => Ok(ExecSession { id: exec.id, output, input }),
            StartExecResults::Detached => {
                Err(fail(bollard::errors::Error::DockerStreamError { error: "the exec detached".into() }))
            }
        }
    }

    pub async fn resize_terminal(&self, exec_id: &str, rows: u16, cols: u16) -> Result<(), ProvisionError> {
        let options = bollard::query_parameters::ResizeExecOptions { h: i32::from(rows), w: i32::from(cols) };
        self.docker
            .resize_exec(exec_id, options)
            .await
            .map_err(|cause| ProvisionError::Exec { name: exec_id.to_string(), cause: cause.into() })
    }

    /// The exit code of a finished exec.
    pub async fn exec_exit_code(&self, exec_id: &str) -> Result<i64, ProvisionError> {
        let info = self
            .docker
            .inspect_exec(exec_id)
            .await
            .map_err(|cause| ProvisionError::Exec { name: exec_id.to_string(), cause: cause.into() })?;
        Ok(info.exit_code.unwrap_or(-1))
    }

    /// The container's log as it is written (follow), from the start.
    pub fn logs_follow(&self, name: &str) -> impl futures_util::Stream<Item = Result<String, ProvisionError>> + use<> {
        let options =
            LogsOptions { follow: true, stdout: true, stderr: true, tail: "all".to_string(), ..Default::default() };
        let name = name.to_string();
        self.docker.logs(&name, Some(options)).map(move |item| {
            item.map(|o| String::from_utf8_lossy(&o.into_bytes()).into_owned())
                .map_err(|cause| ProvisionError::Logs { name: name.clone(), cause: cause.into() })
        })
    }

    /// The container's log (the agent's), each line prefixed by the engine with the time it was
    /// written (RFC 3339, nanoseconds): the last `tail` lines (all when None), then, with
    /// `follow`, the new ones until the container stops. Chunks need not end at line ends.
    pub fn log_lines(
        &self,
        name: &str,
        tail: Option<usize>,
        follow: bool,
    ) -> impl futures_util::Stream<Item = Result<String, ProvisionError>> + use<> {
        let options = LogsOptions {
            follow,
            stdout: true,
            stderr: true,
            timestamps: true,
            tail: tail.map_or_else(|| "all".to_string(), |n| n.to_string()),
            ..Default::default()
        };
        let name = name.to_string();
        self.docker.logs(&name, Some(options)).map(move |item| {
            item.map(|o| String::from_utf8_lossy(&o.into_bytes()).into_owned())
                .map_err(|cause| ProvisionError::Logs { name: name.clone(), cause: cause.into() })
        })
    }

    /// The container's state as far as it says why it stopped ([`super::lost`]); a container the
    /// engine does not know reads as not existing.
    pub async fn container_state(&self, name: &str) -> Result<super::lost::ContainerState, ProvisionError> {
        let info = match self.docker.inspect_container(name, None).await {
            Ok(info) => info,
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
                return Ok(super::lost::ContainerState::default());
            }
            Err(cause) => return Err(ProvisionError::Inspect { name: name.to_string(), cause: cause.into() }),
        };
        let state = info.state.unwrap_or_default();
        // The engine writes 0001-01-01T00:00:00Z for "never".
        let time = |t: Option<String>| t.and_then(|t| t.parse::<jiff::Timestamp>().ok()).filter(|t| t.as_second() > 0);
        Ok(super::lost::ContainerState {
            exists: true,
            running: state.running.unwrap_or(false),
            paused: state.paused.unwrap_or(false),
            oom_killed: state.oom_killed.unwrap_or(false),
            exit_code: state.exit_code.unwrap_or(0),
            error: state.error.unwrap_or_default(),
            started_at: time(state.started_at),
            finished_at: time(state.finished_at),
        })
    }

    /// Why the sandbox `name` stopped, in words: killed by signal N, exited N, its agent lost its
    /// controller, the engine restarted, OOM-killed, removed.
    pub async fn lost_cause(&self, name: &str) -> Result<String, ProvisionError> {
        let state = self.container_state(name).await?;
        Ok(super::lost::describe(&state, engine_started_at()))
    }

    /// Where the engine keeps the container's log on its host (json-file; rotated files add
    /// `.1`, `.2`, … to it).
    pub async fn log_path(&self, name: &str) -> Result<String, ProvisionError> {
        let info = self
            .docker
            .inspect_container(name, None)
            .await
            .map_err(|cause| ProvisionError::Inspect { name: name.to_string(), cause: cause.into() })?;
        Ok(info.log_path.unwrap_or_default())
    }

    /// Whether the container exists (running or not).
    pub async fn exists(&self, name: &str) -> bool {
        self.docker.inspect_container(name, None).await.is_ok()
    }

    /// Whether the container exists and runs.
    pub async fn running(&self, name: &str) -> Result<bool, ProvisionError> {
        match self.docker.inspect_container(name, None).await {
            Ok(info) => Ok(info.state.and_then(|s| s.running).unwrap_or(false)),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(false),
            Err(cause) => Err(ProvisionError::Inspect { name: name.to_string(), cause: cause.into() }),
        }
    }

    /// The host pid of the container's main process, when it runs.
    pub async fn main_pid(&self, name: &str) -> Result<Option<u32>, ProvisionError> {
        let info = self
            .docker
            .inspect_container(name, None)
            .await
            .map_err(|cause| ProvisionError::Inspect { name: name.to_string(), cause: cause.into() })?;
        let pid = info.state.and_then(|s| s.pid).filter(|&p| p > 0);
        Ok(pid.map(|p| p as u32))
    }

    /// The end of the container's stdout and stderr so far (the agent's log): its last
    /// [`LOG_READ_LINES`] lines, of those at most the last [`LOG_READ_BYTES`] bytes (a line
    /// saying so stands for the rest). What is held while reading stays within twice that.
    pub async fn logs(&self, name: &str) -> Result<String, ProvisionError> {
        let options =
            LogsOptions { stdout: true, stderr: true, tail: LOG_READ_LINES.to_string(), ..Default::default() };
        let mut stream = self.docker.logs(name, Some(options));
        let mut kept = LogTail::new(LOG_READ_BYTES);
        while let Some(item) = stream.next().await {
            let output = item.map_err(|cause| ProvisionError::Logs { name: name.to_string(), cause: cause.into() })?;
            kept.push(&output.into_bytes());
        }
        Ok(kept.text())
    }

    /// Removes the container and its anonymous volumes, running or not. Absent is fine.
    pub async fn remove(&self, name: &str) -> Result<(), ProvisionError> {
        let options = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        match self.docker.remove_container(name, Some(options)).await {
            Ok(()) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
            // Another remover got there first (`sandbench rm` beside a debug session's own
            // teardown): done once that removal is.
            Err(cause @ bollard::errors::Error::DockerResponseServerError { status_code: 409, .. })
                if cause.to_string().contains("already in progress") =>
            {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                while std::time::Instant::now() < deadline {
                    match self.docker.inspect_container(name, None).await {
                        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
                            return Ok(());
                        }
                        // Still there, or the engine did not answer: look again.
                        _ => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
                    }
                }
                Err(ProvisionError::Remove { name: name.to_string(), cause: cause.into() })
            }
            Err(cause) => Err(ProvisionError::Remove { name: name.to_string(), cause: cause.into() }),
        }
    }

    /// Lists sandbench containers, optionally only those with `label=value`.
    pub async fn list(&self, label: Option<(&str, &str)>) -> Result<Vec<ContainerInfo>, ProvisionError> {
        let filter = match label {
            Some((key, value)) => format!("{key}={value}"),
            None => labels::OWNER.to_string(),
        };
        let filters = HashMap::from([("label".to_string(), vec![filter])]);
        let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|cause| ProvisionError::List { cause: cause.into() })?;
        Ok(containers
            .into_iter()
            .filter(|c| c.labels.as_ref().is_some_and(|l| l.contains_key(labels::OWNER)))
            .map(|c| ContainerInfo {
                id: c.id.unwrap_or_default(),
                name: c.names.and_then(|n| n.first().cloned()).unwrap_or_default().trim_start_matches('/').to_string(),
                state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                image: c.image.unwrap_or_default(),
                created: c.created.unwrap_or_default(),
                labels: c.labels.unwrap_or_default(),
            })
            .collect())
    }

    /// Removes sandbench containers that have expired, or whose owning controller process on
    /// this host is gone. Containers of live controllers are left alone.
    pub async fn reap(&self) -> Result<Vec<Reaped>, ProvisionError> {
        let now = unix_secs(SystemTime::now());
        let mut reaped = Vec::new();
        for container in self.list(None).await? {
            let Some(reason) = reap_reason(&container.labels, now, &self.owner) else { continue };
            self.remove(&container.id).await?;
            tracing::info!(container = %container.name, "reaped: {reason}");
            reaped.push(Reaped { name: container.name, reason });
        }
        Ok(reaped)
    }

    /// Runs a container to completion and removes it: the bare baseline of the benchmark.
    /// Returns how long create, start and wait took together (removal not included).
    pub async fn run_bare(
        &self,
        name: &str,
        image: &str,
        cmd: Vec<String>,
        binds: Vec<String>,
        run_id: &str,
    ) -> Result<Duration, ProvisionError> {
        let begun = Instant::now();
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: Some(cmd),
            labels: Some(HashMap::from([
                (labels::OWNER.to_string(), self.owner.clone()),
                (labels::RUN.to_string(), run_id.to_string()),
                (labels::EXPIRES_AT.to_string(), (unix_secs(SystemTime::now()) + 600).to_string()),
            ])),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                binds: Some(binds),
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptions { name: Some(name.to_string()), ..Default::default() };
        self.docker
            .create_container(Some(options), body)
            .await
            .map_err(|cause| ProvisionError::Create { name: name.to_string(), cause: cause.into() })?;
        let result = async {
            self.start(name).await?;
            self.wait_exit(name).await
        }
        .await
        .map(|_| begun.elapsed());
        self.remove(name).await?;
        result
    }
}

impl Provisioner for DockerProvisioner {
    fn describe(&self) -> String {
        format!("Docker API {}", self.api_version)
    }

    fn ensure_image<'a>(
        &'a self,
        image: &'a str,
        progress: &'a mut (dyn FnMut(&str) + Send),
    ) -> BoxFuture<'a, Result<(), ProvisionError>> {
        Box::pin(async move { DockerProvisioner::ensure_image(self, image, progress).await })
    }

    fn ensure_valgrind<'a>(
        &'a self,
        image: &'a str,
        progress: &'a mut (dyn FnMut(&str) + Send),
    ) -> BoxFuture<'a, Result<String, super::ValgrindError>> {
        Box::pin(valgrind::ensure(self, image, progress))
    }

    fn probe_valgrind<'a>(&'a self, image: &'a str) -> BoxFuture<'a, super::ValgrindProbe> {
        Box::pin(valgrind::probe(self, image))
    }

    fn create<'a>(&'a self, request: &'a SandboxRequest) -> BoxFuture<'a, Result<Sandbox, ProvisionError>> {
        Box::pin(async move { DockerProvisioner::create(self, request).await })
    }

    fn start<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), ProvisionError>> {
        Box::pin(async move { DockerProvisioner::start(self, id).await })
    }

    fn running<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, ProvisionError>> {
        Box::pin(async move { DockerProvisioner::running(self, id).await })
    }

    fn pin<'a>(&'a self, id: &'a str, cpuset: &'a str) -> BoxFuture<'a, Result<(), ProvisionError>> {
        Box::pin(async move {
            let body =
                bollard::models::ContainerUpdateBody { cpuset_cpus: Some(cpuset.to_string()), ..Default::default() };
            self.docker
                .update_container(id, body)
                .await
                .map_err(|cause| ProvisionError::Pin { name: format!("{id} (CPUs {cpuset})"), cause: cause.into() })
        })
    }

    fn exists<'a>(&'a self, id: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(DockerProvisioner::exists(self, id))
    }

    fn usage<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Usage>, ProvisionError>> {
        Box::pin(async move {
            let usage = DockerProvisioner::usage(self, id).await?;
            Ok(usage.map(|(cpu_ns, memory_bytes)| Usage { cpu_ns, memory_bytes }))
        })
    }

    fn logs<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<String, ProvisionError>> {
        Box::pin(async move { DockerProvisioner::logs(self, id).await })
    }

    fn logs_follow(&self, id: &str) -> BoxStream<'static, Result<String, ProvisionError>> {
        DockerProvisioner::logs_follow(self, id).boxed()
    }

    fn exec<'a>(&'a self, id: &'a str, cmd: Vec<String>) -> BoxFuture<'a, Result<(i64, String), ProvisionError>> {
        Box::pin(async move { self.exec_capture(id, cmd).await })
    }

    fn upload<'a>(&'a self, id: &'a str, tar: super::TarStream) -> BoxFuture<'a, Result<(), ProvisionError>> {
        Box::pin(async move { DockerProvisioner::upload(self, id, tar).await })
    }

    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), ProvisionError>> {
        Box::pin(async move { DockerProvisioner::remove(self, id).await })
    }

    fn list<'a>(
        &'a self,
        label: Option<(&'a str, &'a str)>,
    ) -> BoxFuture<'a, Result<Vec<ContainerInfo>, ProvisionError>> {
        Box::pin(async move { DockerProvisioner::list(self, label).await })
    }

    fn reap(&self) -> BoxFuture<'_, Result<Vec<Reaped>, ProvisionError>> {
        Box::pin(async move { DockerProvisioner::reap(self).await })
    }

    fn lost_cause<'a>(&'a self, id: &'a str) -> BoxFuture<'a, super::Lost> {
        Box::pin(async move {
            match self.container_state(id).await {
                Ok(state) => super::Lost::of(&state, engine_started_at()),
                Err(err) => super::Lost::unknown(err),
            }
        })
    }

    fn finished_at<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Option<SystemTime>> {
        Box::pin(async move {
            let state = self.container_state(id).await.ok()?;
            let at = state.finished_at.filter(|_| state.exists && !state.running)?;
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(at.as_millisecond()).ok()?))
        })
    }

    fn endpoint(&self) -> String {
        self.host.clone()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), ProvisionError>> {
        Box::pin(async move { DockerProvisioner::ping(self).await })
    }

    fn log_lines(
        &self,
        id: &str,
        tail: Option<usize>,
        follow: bool,
    ) -> BoxStream<'static, Result<String, ProvisionError>> {
        DockerProvisioner::log_lines(self, id, tail, follow).boxed()
    }

    fn terminal<'a>(
        &'a self,
        id: &'a str,
        cmd: Vec<String>,
        rows: u16,
        cols: u16,
    ) -> BoxFuture<'a, Result<super::Terminal, ProvisionError>> {
        Box::pin(async move {
            let ExecSession { id, output, input } = self.exec_terminal(id, cmd, rows, cols).await?;
            let output = output.map(|chunk| Ok(chunk?.into_bytes().to_vec())).boxed();
            Ok(super::Terminal { id, output, input })
        })
    }

    fn resize_terminal<'a>(
        &'a self,
        terminal: &'a str,
        rows: u16,
        cols: u16,
    ) -> BoxFuture<'a, Result<(), ProvisionError>> {
        Box::pin(async move { DockerProvisioner::resize_terminal(self, terminal, rows, cols).await })
    }

    fn terminal_exit_code<'a>(&'a self, terminal: &'a str) -> BoxFuture<'a, Result<i64, ProvisionError>> {
        Box::pin(async move { self.exec_exit_code(terminal).await })
    }

    fn probe_disk_bound<'a>(&'a self, image: &'a str) -> BoxFuture<'a, DiskBound> {
        Box::pin(DockerProvisioner::probe_disk_bound(self, image))
    }

    fn disk_bound(&self) -> DiskBound {
        DockerProvisioner::disk_bound(self)
    }

    fn require_disk_bound(&self) {
        self.disk_bound_required.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn io_weight_discarded(&self) -> Option<String> {
        self.io_weight_discarded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// The end of a stream of bytes, at most `bound` of them kept (the start of a line cut short
/// dropped too), holding at most twice that while it reads.
struct LogTail {
    bytes: Vec<u8>,
    bound: usize,
    dropped: bool,
}

impl LogTail {
    fn new(bound: usize) -> LogTail {
        LogTail { bytes: Vec::new(), bound, dropped: false }
    }

    fn push(&mut self, chunk: &[u8]) {
        let chunk = &chunk[chunk.len().saturating_sub(self.bound)..];
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > 2 * self.bound {
            self.cut();
        }
    }

    fn cut(&mut self) {
        let excess = self.bytes.len().saturating_sub(self.bound);
        if excess == 0 {
            return;
        }
        let start = self.bytes[excess..].iter().position(|&b| b == b'\n').map_or(excess, |i| excess + i + 1);
        self.bytes.drain(..start);
        self.dropped = true;
    }

    fn text(mut self) -> String {
        self.cut();
        let text = String::from_utf8_lossy(&self.bytes);
        if self.dropped {
            format!("[sandbench: the start of this log is left out: {} bytes at most are read]\n{text}", self.bound)
        } else {
            text.into_owned()
        }
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Limits, binds and lock-down of a sandbox's container.
fn host_config(request: &SandboxRequest) -> HostConfig {
    // Docker takes a relative bind source for a volume name: bind absolute paths only.
    let socket_dir = std::path::absolute(&request.socket_dir).unwrap_or_else(|_| request.socket_dir.clone());
    // Read-only: the agent only connects to the socket there (connect(2) needs no write on
    // the mount), and root in the sandbox must not plant, delete or replace anything in a
    // folder of the host's. Nothing writable on the host is mounted into a sandbox.
    let mut binds = vec![format!("{}:{}:ro", socket_dir.display(), SOCKET_DIR_IN_SANDBOX)];
    if request.shipping == AgentShipping::Bind {
        binds.push(format!("{}:{}:ro", request.agent_binary.display(), AGENT_PATH_IN_SANDBOX));
    }
    let resources = &request.resources;
    let memory = i64::try_from(resources.memory_bytes).unwrap_or(i64::MAX);
    HostConfig {
        binds: Some(binds),
        nano_cpus: Some((resources.cpus * 1e9).round() as i64),
        cpuset_cpus: resources.cpuset.clone(),
        memory: Some(memory),
        memory_swap: Some(memory),
        pids_limit: Some(resources.pids_limit),
        blkio_weight: resources.io_weight,
        network_mode: Some(if request.network { "bridge" } else { "none" }.to_string()),
        cap_drop: Some(vec!["ALL".to_string()]),
        cap_add: Some(CAPABILITIES.iter().map(|c| c.to_string()).collect()),
        privileged: Some(false),
        security_opt: Some(vec!["no-new-privileges:true".to_string()]),
        init: Some(false),
        log_config: Some(bollard::models::HostConfigLogConfig {
            typ: Some("json-file".to_string()),
            config: Some(HashMap::from([
                ("max-size".to_string(), LOG_MAX_SIZE.to_string()),
                ("max-file".to_string(), LOG_MAX_FILE.to_string()),
            ])),
        }),
        ..Default::default()
    }
}

/// When the local Docker engine (dockerd, through its pid file) started; None for another
/// engine (`DOCKER_HOST` not the default socket: remote, or a private dockerd whose pid file is
/// not the default one) or when it cannot be told.
pub fn engine_started_at() -> Option<jiff::Timestamp> {
    if !default_engine(std::env::var("DOCKER_HOST").ok().as_deref()) {
        return None;
    }
    let pid = ["/var/run/docker.pid", "/run/docker.pid"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .and_then(|p| p.trim().parse::<u32>().ok())?;
    if std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim() != "dockerd" {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    process_started_at(&stat, &boot, rustix::param::clock_ticks_per_second())
}

/// Whether `DOCKER_HOST` names the default local engine (the one the default pid file is of).
fn default_engine(docker_host: Option<&str>) -> bool {
    match docker_host {
        None | Some("") => true,
        Some(host) => matches!(host, "unix:///var/run/docker.sock" | "unix:///run/docker.sock"),
    }
}

/// A process's start from its `/proc/PID/stat` (field 22: clock ticks after boot) and
/// `/proc/stat` (`btime`: the boot, Unix seconds).
pub fn process_started_at(pid_stat: &str, proc_stat: &str, ticks_per_second: u64) -> Option<jiff::Timestamp> {
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let after_name = &pid_stat[pid_stat.rfind(')')? + 1..];
    let start_ticks: u64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
    let btime: i64 = proc_stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    let ms = btime.checked_mul(1000)? + i64::try_from(start_ticks.checked_mul(1000)? / ticks_per_second.max(1)).ok()?;
    jiff::Timestamp::from_millisecond(ms).ok()
}

/// How long past its expiry a sandbox whose controller is alive (or cannot be told, on another
/// host) is still left alone: its controller may be tearing it down, or finishing the phase it
/// was in when it expired. A sandbox whose controller is gone is reaped at once.
pub const REAP_GRACE: Duration = Duration::from_secs(15 * 60);

/// Why a container should be reaped, or None to keep it. A sandbox of a live controller (this
/// one included) is kept until its expiry plus [`REAP_GRACE`]; of a controller on this host that
/// is gone, reaped; of a controller elsewhere, reaped past its expiry plus the grace.
pub fn reap_reason(container_labels: &HashMap<String, String>, now_unix: u64, my_owner: &str) -> Option<String> {
    let expires = container_labels.get(labels::EXPIRES_AT).and_then(|v| v.parse::<u64>().ok());
    let owner = container_labels.get(labels::OWNER);
    let alive = match owner {
        Some(owner) if owner == my_owner => Some(true),
        Some(owner) => owner_alive(owner),
        None => None,
    };
    if let (Some(owner), Some(false)) = (owner, alive) {
        return Some(format!("its controller ({owner}) is gone"));
    }
    let expires = expires?;
    if now_unix <= expires.saturating_add(REAP_GRACE.as_secs()) {
        return None;
    }
    let (age, grace) = (now_unix - expires, REAP_GRACE.as_secs() / 60);
    Some(match alive {
        Some(true) => format!("its controller is alive but expired {age} s ago, more than the {grace} min grace"),
        _ => format!("expired {age} s ago, more than the {grace} min grace"),
    })
}

/// `host/pid/start-ticks` of this process: unique across pid reuse.
pub(crate) fn owner_id() -> String {
    let pid = std::process::id();
    format!("{}/{}/{}", hostname(), pid, process_start_ticks(pid).unwrap_or(0))
}

/// Whether the controller process named by an owner label still runs. None when it ran on
/// another host (only expiry can tell then).
pub(crate) fn owner_alive(owner: &str) -> Option<bool> {
    let mut parts = owner.rsplitn(3, '/');
    let ticks: u64 = parts.next()?.parse().ok()?;
    let pid: u32 = parts.next()?.parse().ok()?;
    let host = parts.next()?;
    if host != hostname() {
        return None;
    }
    Some(process_start_ticks(pid) == Some(ticks))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Field 22 of /proc/PID/stat: start time in clock ticks since boot.
fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A tar holding the agent at `AGENT_PATH_IN_SANDBOX`, root-owned, mode 0755.
async fn agent_tar(agent: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let bytes = tokio::fs::read(agent).await?;
    let mut builder = tar::Builder::new(Vec::with_capacity(bytes.len() + 4096));
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    dir.set_uid(0);
    dir.set_gid(0);
    builder.append_data(
        &mut dir,
        AGENT_PATH_IN_SANDBOX.trim_start_matches('/').rsplit_once('/').map_or("", |p| p.0),
        std::io::empty(),
    )?;
    let mut file = tar::Header::new_gnu();
    file.set_mode(0o755);
    file.set_size(bytes.len() as u64);
    file.set_uid(0);
    file.set_gid(0);
    builder.append_data(&mut file, AGENT_PATH_IN_SANDBOX.trim_start_matches('/'), bytes.as_slice())?;
    Ok(builder.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels_with(owner: &str, expires: u64) -> HashMap<String, String> {
        HashMap::from([
            (labels::OWNER.to_string(), owner.to_string()),
            (labels::EXPIRES_AT.to_string(), expires.to_string()),
        ])
    }

    #[test]
    fn a_log_is_read_to_its_last_bytes_in_whole_lines() {
        let mut small = LogTail::new(100);
        small.push(b"one\ntwo\n");
        assert_eq!(small.text(), "one\ntwo\n");
        let mut flood = LogTail::new(100);
        for i in 0..10_000 {
            flood.push(format!("line {i:05} of a flood\n").as_bytes());
            assert!(flood.bytes.len() <= 200, "held {} bytes", flood.bytes.len());
        }
        flood.push(&[b'x'; 5000]);
        flood.push(b"\nlast line\n");
        let text = flood.text();
        assert!(text.starts_with("[sandbench: the start of this log is left out: 100 bytes at most are read]\n"));
        let kept = text.split_once('\n').unwrap().1;
        assert_eq!(kept, "last line\n", "a line cut short is dropped whole");
    }

    #[test]
    fn reaps_expired_and_orphaned_but_not_live_sandboxes() {
        let me = owner_id();
        let grace = REAP_GRACE.as_secs();
        // A live controller's sandbox survives its expiry by the grace, then is reaped.
        assert_eq!(reap_reason(&labels_with(&me, 100), 200, &me), None);
        assert_eq!(reap_reason(&labels_with(&me, 100), 100 + grace, &me), None);
        let late = reap_reason(&labels_with(&me, 100), 101 + grace, &me).unwrap();
        assert!(late.contains("alive but expired"), "{late}");
        assert_eq!(reap_reason(&labels_with(&me, 300), 200, &me), None);
        // Our own process, as another controller instance sees it: alive, kept past expiry.
        assert_eq!(reap_reason(&labels_with(&me, 100), 200, "other/1/1"), None);
        assert_eq!(reap_reason(&labels_with(&me, 300), 200, "other/1/1"), None);
        // A pid that exists but with another start time: the pid was reused, the owner is gone.
        let reused = format!("{}/{}/{}", hostname(), std::process::id(), 1);
        assert!(reap_reason(&labels_with(&reused, 300), 200, &me).unwrap().contains("is gone"));
        // Another host: only expiry (and the grace) can tell.
        assert_eq!(reap_reason(&labels_with("elsewhere/1/1", 300), 200, &me), None);
        assert_eq!(reap_reason(&labels_with("elsewhere/1/1", 100), 200, &me), None);
        let stale = reap_reason(&labels_with("elsewhere/1/1", 100), 200 + grace, &me).unwrap();
        assert!(stale.starts_with("expired"), "{stale}");
        // No labels at all: nothing to go by, kept.
        assert_eq!(reap_reason(&HashMap::new(), 200, &me), None);
    }

    #[test]
    fn only_the_default_engine_is_timed_by_the_default_pid_file() {
        assert!(default_engine(None) && default_engine(Some("")));
        assert!(default_engine(Some("unix:///var/run/docker.sock")) && default_engine(Some("unix:///run/docker.sock")));
        assert!(!default_engine(Some("unix:///tmp/private/docker.sock")));
        assert!(!default_engine(Some("tcp://10.0.0.2:2376")));
    }

    #[test]
    fn a_process_start_is_read_from_proc() {
        // Field 22 (start ticks) is 20th after the name, whatever the name holds.
        let stat = "812 (docker d) (x)) S 1 812 812 0 -1 4194560 9 0 0 0 5 3 0 0 20 0 12 0 4250 1 2 3";
        let proc_stat = "cpu  1 2 3\nbtime 1772359200\nprocesses 9\n";
        let started = process_started_at(stat, proc_stat, 100).unwrap();
        assert_eq!(started, "2026-03-01T10:00:42.5Z".parse::<jiff::Timestamp>().unwrap());
        assert_eq!(process_started_at("812 (dockerd) S 1", proc_stat, 100), None);
        assert_eq!(process_started_at(stat, "cpu 1 2 3\n", 100), None);
    }
}
