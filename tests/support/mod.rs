//! Shared harness of the end-to-end tests: a real Docker engine, the run's station (a real hub
//! serving each sandbox on its own Unix socket), static test images built here, and cleanup that
//! runs whether the test passed or panicked.

#![allow(dead_code)]

pub mod flood;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbench::observations::server::{Hub, HubConfig};
use sandbench::provision::{AgentShipping, DockerProvisioner, Resources, Sandbox, SandboxRequest, labels};
use sandbench::station::sandbox::{LiveSandbox, Teardown};
use sandbench::station::{Station, StationOptions};

/// An image with nothing in it but empty folders: the agent brings everything it needs.
pub const SCRATCH_IMAGE: &str = "sandbench-test/scratch:1";
/// Busybox (static, from Debian's busybox-static) as /bin/sh and the usual tools, nothing else.
pub const BUSYBOX_IMAGE: &str = "sandbench-test/busybox:1";
/// The sandbox image built by images/node24-bookworm/build-offline.sh (or pulled).
pub const NODE_IMAGE: &str = "node:24-bookworm";

pub struct Harness {
    /// The Docker backend itself, for what only the tests do (kill, wait, inspect settings).
    pub provisioner: Arc<DockerProvisioner>,
    pub station: Station,
    pub run_dir: tempfile::TempDir,
    pub run_id: String,
}

impl Harness {
    pub async fn hub(&self) -> Hub {
        self.station.hub()
    }

    /// A request for a small sandbox of this test, its socket folder open.
    pub fn request(&self, role: &str, image: &str, shipping: AgentShipping) -> SandboxRequest {
        let mut request = self.station.request(role, image).expect("a sandbox request");
        request.resources = Resources {
            cpus: 1.0,
            cpuset: None,
            memory_bytes: 512 << 20,
            pids_limit: 256,
            disk_bytes: None,
            io_weight: None,
        };
        request.shipping = shipping;
        request
    }

    pub async fn launch(&self, request: SandboxRequest) -> LiveSandbox {
        self.station.launch(request, Duration::from_secs(60)).await.expect("launch the sandbox")
    }

    pub async fn teardown(&self, sandbox: &Sandbox) -> Teardown {
        self.station.teardown(sandbox).await
    }

    /// Stops the server and closes the hub (as a crashing controller would lose them), then
    /// reopens the hub from the run directory and serves again on the same sockets.
    pub async fn restart_server(&self) -> Hub {
        self.station.restart_server().await.expect("restart the server")
    }

    /// Stops serving agents without restarting.
    pub async fn stop_server(&self) {
        self.station.stop_server().await;
    }
}

/// Runs `body` against a fresh harness, then removes every container of the test's run and
/// asserts none is left — whether `body` passed or panicked.
pub async fn with_harness<F, Fut>(name: &str, config: HubConfig, body: F)
where
    F: FnOnce(Arc<Harness>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let provisioner = Arc::new(
        DockerProvisioner::connect(4)
            .await
            .expect("these tests need a Docker engine (images/ensure-docker.sh starts one)"),
    );
    ensure_scratch_image(&provisioner).await;
    let agent = agent();
    let run_dir = tempfile::Builder::new().prefix("sbt-").tempdir().expect("temp dir");
    let run_id = format!("t{}{}", name, std::process::id());
    let options = StationOptions {
        dir: run_dir.path().to_path_buf(),
        run_id: run_id.clone(),
        image: None,
        valgrind: false,
        agent: Some(agent),
        hub: config,
    };
    let station = Station::open(provisioner.clone(), options, &mut |_| {})
        .await
        .expect("open the station (build the agent first: cargo build-static --release)");
    let harness = Arc::new(Harness { provisioner, station, run_dir, run_id: run_id.clone() });

    let outcome = tokio::spawn(body(harness.clone())).await;

    // Cleanup, layered: whatever the test did, remove its containers, then check.
    let cleanup_errors = harness.station.close().await;
    let left = harness.provisioner.list(Some((labels::RUN, &run_id))).await.expect("list containers");
    if let Err(panic) = outcome {
        if panic.is_panic() {
            std::panic::resume_unwind(panic.into_panic());
        }
        panic!("test task failed: {panic}");
    }
    assert!(cleanup_errors.is_empty(), "cleanup failed: {cleanup_errors:?}");
    assert!(left.is_empty(), "containers left behind: {:?}", left.iter().map(|c| &c.name).collect::<Vec<_>>());
}

/// Builds the empty test image once (idempotent, safe to race).
pub async fn ensure_scratch_image(provisioner: &DockerProvisioner) {
    if provisioner.image_exists(SCRATCH_IMAGE).await {
        return;
    }
    let mut builder = tar::Builder::new(Vec::new());
    for dir in ["tmp/", "var/", "var/lib/", "run/"] {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(if dir == "tmp/" { 0o1777 } else { 0o755 });
        header.set_size(0);
        builder.append_data(&mut header, dir, std::io::empty()).expect("tar");
    }
    let tar = builder.into_inner().expect("tar");
    provisioner.import_image(SCRATCH_IMAGE, tar).await.expect("import the scratch test image");
}

/// Builds the busybox test image once from the host's static /bin/busybox.
pub async fn ensure_busybox_image(provisioner: &DockerProvisioner) {
    if provisioner.image_exists(BUSYBOX_IMAGE).await {
        return;
    }
    let busybox =
        std::fs::read("/bin/busybox").expect("/bin/busybox (Debian's busybox-static; scripts/test installs it)");
    let applets = std::process::Command::new("/bin/busybox").arg("--list").output().expect("busybox --list").stdout;
    let mut builder = tar::Builder::new(Vec::new());
    let dir = |builder: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(mode);
        header.set_size(0);
        builder.append_data(&mut header, path, std::io::empty()).expect("tar");
    };
    let file = |builder: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, bytes: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_mode(mode);
        header.set_size(bytes.len() as u64);
        builder.append_data(&mut header, path, bytes).expect("tar");
    };
    for (path, mode) in [
        ("bin/", 0o755),
        ("etc/", 0o755),
        ("home/", 0o755),
        ("tmp/", 0o1777),
        ("usr/", 0o755),
        ("usr/local/", 0o755),
        ("usr/local/bin/", 0o755),
        ("var/", 0o755),
        ("var/lib/", 0o755),
        ("run/", 0o755),
    ] {
        dir(&mut builder, path, mode);
    }
    file(&mut builder, "bin/busybox", 0o755, &busybox);
    for applet in String::from_utf8_lossy(&applets).lines().filter(|a| !a.is_empty() && *a != "busybox") {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        builder.append_link(&mut header, format!("bin/{applet}"), "busybox").expect("tar");
    }
    file(&mut builder, "etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\n");
    file(&mut builder, "etc/group", 0o644, b"root:x:0:\n");
    let tar = builder.into_inner().expect("tar");
    provisioner.import_image(BUSYBOX_IMAGE, tar).await.expect("import the busybox test image");
}

/// Where `cargo build-static --release` puts the static agent and the static fixtures:
/// `<target>/x86_64-unknown-linux-gnu/release/` (test executables are in `<target>/<profile>/deps/`).
pub fn static_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let target = exe.ancestors().nth(3).expect("target folder");
    target.join(sandbench::agent_binary::STATIC_TARGET).join(sandbench::agent_binary::STATIC_PROFILE)
}

/// The agent the tests ship: the one the controller finds (`$SANDBENCH_AGENT`, else the static
/// release build), refused when a source of the agent changed after it was built (the tests
/// would measure old code).
pub fn agent() -> PathBuf {
    let agent = sandbench::agent_binary::locate(None)
        .expect("build the static agent first: cargo build-static --release (scripts/test does)");
    if std::env::var_os(sandbench::agent_binary::AGENT_ENV).is_some() {
        return agent;
    }
    let built = std::fs::metadata(&agent).and_then(|m| m.modified()).expect("agent's modification time");
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace folder");
    let sources = ["sandbox-agent/src", "sandbox-agent/Cargo.toml", "proto"].map(|p| workspace.join(p));
    if let Some((changed, path)) = newest_file(&sources).filter(|(changed, _)| *changed > built) {
        panic!(
            "{} is older than {} (changed {:.0} s later); run cargo build-static --release",
            agent.display(),
            path.display(),
            changed.duration_since(built).unwrap_or_default().as_secs_f64()
        );
    }
    agent
}

/// The most recently modified file under `paths`, and when.
fn newest_file(paths: &[PathBuf]) -> Option<(std::time::SystemTime, PathBuf)> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut pending = paths.to_vec();
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if meta.is_dir() {
            pending.extend(std::fs::read_dir(&path).into_iter().flatten().flatten().map(|e| e.path()));
        } else if let Ok(modified) = meta.modified()
            && newest.as_ref().is_none_or(|(n, _)| modified > *n)
        {
            newest = Some((modified, path));
        }
    }
    newest
}

/// A tar putting the named static fixture executables in /usr/local/bin.
pub fn fixtures_tar(names: &[&str]) -> Vec<u8> {
    let dir = static_dir();
    let mut builder = tar::Builder::new(Vec::new());
    for name in names {
        let path = dir.join(name);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("fixture {}: {e}; build it with cargo build-static --release", path.display()));
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o755);
        header.set_size(bytes.len() as u64);
        builder.append_data(&mut header, format!("usr/local/bin/{name}"), bytes.as_slice()).expect("tar");
    }
    builder.into_inner().expect("tar")
}

/// A fast config so dead-man tests finish quickly; the delivery tests use the default.
pub fn quick_heartbeats() -> HubConfig {
    HubConfig {
        heartbeat: Duration::from_millis(200),
        dead_after: 5,
        hello_timeout: Duration::from_secs(5),
        ..HubConfig::default()
    }
}

/// Copies the folder `from` into `to`, recursively (a product's sources into a test repository).
pub fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Runs `git ARGS` (split by the shell) in `repo` under a test identity; it must succeed.
pub fn git(repo: &Path, args: &str) {
    let ok = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("git -c user.name=t -c user.email=t@t {args}"))
        .current_dir(repo)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args}");
}

/// Cuts the demo's `demo work` from 50,000,000 rounds to `rounds` (a lens run of it then takes
/// seconds). Node's start is about 204 million instructions under the lens and a round about 72:
/// at 5,000,000 rounds (`tests/lens.rs`) 1 % more rounds is 0.64 % more instructions, at
/// 2,000,000 (`tests/bisect.rs`, `tests/history.rs`) 2 % more is 0.83 %, and a lens run takes
/// about 12 s against 20.
pub fn less_work(repo: &Path, rounds: u32) {
    let work = repo.join("lib/work.js");
    let text = std::fs::read_to_string(&work).unwrap();
    let less = text.replace("const ROUNDS = 50_000_000;", &format!("const ROUNDS = {rounds};"));
    assert_ne!(less, text, "the demo's work.js changed");
    std::fs::write(&work, less).unwrap();
}

/// A git repository holding a copy of examples/demo, changed by `edit`, committed and tagged
/// `base` (on branch main). Its spec's steps run without the instruction lens (tests/lens.rs
/// tests it; the others time the demo as they did).
pub fn demo_repo(edit: impl FnOnce(&Path)) -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo"), repo.path());
    let spec = repo.path().join("bench.toml");
    let text = std::fs::read_to_string(&spec).unwrap();
    // The tests choose their pairs: the demo's adaptive pairs are left out.
    let text =
        text.replace("\ninstructions = true\n", "\n").replace("\nmax_pairs = 10\ngate = [\"work\", \"cold\"]\n", "\n");
    std::fs::write(&spec, text).unwrap();
    edit(repo.path());
    for args in ["init -q -b main .", "add -A", "commit -qm base", "tag base"] {
        git(repo.path(), args);
    }
    repo
}
