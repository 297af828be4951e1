//! Engine restarts end to end: `sandbench run` (the binary, its terminal output captured)
//! against a Docker engine of the test's own — its own socket, data, exec root and pid file,
//! started with setsid — restarted in the middle of the run's runtime trials. With live-restore
//! the sandboxes survive and the run completes; without it they die with the engine, and each
//! side's slot is retried once in a new sandbox. The shared engine is never touched; the private
//! one, its processes, mounts and folders are gone at the end, whatever happened.

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use sandbench::provision::{DockerProvisioner, labels};
use sandbench::report::{Report, Status};

/// Eight runtime trials of half a second per side on busybox: no source, no Node.
const SPEC: &str = r#"
name = "engine-restart"

[sandbox]
image = "sandbench-test/busybox:1"
cpus = 1
memory_gb = 1
disk_gb = 1

[trials]
install = 1
runtime = 8
failure_limit = 2

[install]
command = "echo installed"

[[runtime.command]]
metric = "nap"
run = "sleep 0.5"
repeat = 1

[metrics.nap]
title = "Nap"
unit = "ms"
scale = 1000
absolute = 0.05
relative = 0.2
"#;

/// A dockerd of the test's own. Dropping it removes its containers, stops it, ends whatever
/// process of it is left (containerd, shims), unmounts what it mounted and removes its folder.
struct PrivateEngine {
    dir: PathBuf,
    live_restore: bool,
    daemon: Option<Child>,
}

impl PrivateEngine {
    async fn start(live_restore: bool) -> PrivateEngine {
        // Short: the sockets under it must fit a Unix socket path.
        let dir = PathBuf::from(format!("/tmp/sbeng-{}-{}", std::process::id(), u8::from(live_restore)));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut engine = PrivateEngine { dir, live_restore, daemon: None };
        engine.launch().await;
        engine
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("docker.sock")
    }

    fn host(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// Starts dockerd (in a session of its own) and waits until it answers.
    async fn launch(&mut self) {
        let d = self.dir.display();
        let mut args = vec![
            "dockerd".to_string(),
            format!("--host={}", self.host()),
            format!("--data-root={d}/data"),
            format!("--exec-root={d}/exec"),
            format!("--pidfile={d}/docker.pid"),
            "--bridge=none".into(),
            "--iptables=false".into(),
            "--ip6tables=false".into(),
        ];
        if self.live_restore {
            args.push("--live-restore".into());
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("dockerd.log")).unwrap();
        let child = Command::new("setsid")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("setsid dockerd");
        self.daemon = Some(child);
        let begun = Instant::now();
        loop {
            if let Ok(docker) = DockerProvisioner::connect_socket(&self.socket(), 1).await
                && docker.ping().await.is_ok()
            {
                return;
            }
            assert!(begun.elapsed() < Duration::from_secs(60), "the private dockerd did not answer: {}", self.log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM to dockerd, and waits for it to exit.
    fn stop(&mut self) {
        let Some(mut child) = self.daemon.take() else { return };
        // The child is not reaped yet: its pid is still its own.
        if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
            let _ = kill_process(pid, Signal::TERM);
        }
        let begun = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if begun.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default();
        text.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Processes whose command line names this engine's folder (its containerd and shims).
    fn leftover_processes(&self) -> Vec<i32> {
        let needle = self.dir.display().to_string();
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(&needle))
            })
            .collect()
    }
}

impl Drop for PrivateEngine {
    fn drop(&mut self) {
        if self.daemon.is_some() {
            // Containers first, while the engine answers (a failed test may leave some).
            let host = self.host();
            let _ = Command::new("docker")
                .args(["-H", &host, "ps", "-aq"])
                .output()
                .map(|out| {
                    String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect::<Vec<_>>()
                })
                .map(|ids| {
                    if !ids.is_empty() {
                        let _ = Command::new("docker").args(["-H", &host, "rm", "-f", "-v"]).args(&ids).output();
                    }
                });
        }
        self.stop();
        for pid in self.leftover_processes() {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        let needle = self.dir.display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<&str> =
            mounts.lines().filter_map(|l| l.split(' ').nth(4)).filter(|p| p.starts_with(&needle)).collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for point in points {
            let _ = Command::new("umount").args(["-l", point]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `sandbench run` of the spec against the private engine, restarting it (down for a few
/// seconds) once the runtime trials are going. Returns the run's exit status, its stderr and
/// its report.
async fn run_with_a_restart(engine: &mut PrivateEngine, work: &Path) -> (Option<i32>, String, Report) {
    run_with_an_outage(engine, work, true, "90s").await
}

/// As [`run_with_a_restart`], the engine stopped once the runtime trials are going and started
/// again 4 s later when `back`, the run waiting `engine_wait` for it.
async fn run_with_an_outage(
    engine: &mut PrivateEngine,
    work: &Path,
    back: bool,
    engine_wait: &str,
) -> (Option<i32>, String, Report) {
    let docker = DockerProvisioner::connect_socket(&engine.socket(), 1).await.unwrap();
    support::ensure_busybox_image(&docker).await;
    let spec = work.join("bench.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let out = work.join("runs");
    let stderr_path = work.join("stderr.txt");
    let mut controller = Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .args(["run", &spec.display().to_string(), "--base", "a", "--head", "b", "--engine-wait", engine_wait])
        .args(["--out", &out.display().to_string(), "--ledger", &work.join("ledger.sqlite").display().to_string()])
        .args(["--agent", &support::agent().display().to_string()])
        .env("DOCKER_HOST", engine.host())
        .env_remove("SANDBENCH_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let begun = Instant::now();
    while !observed(&out, "\"phase\":\"runtime\"") {
        assert!(controller.try_wait().unwrap().is_none(), "the run ended early: {}", read(&stderr_path));
        assert!(begun.elapsed() < Duration::from_secs(180), "no runtime trial began: {}", read(&stderr_path));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    engine.stop();
    if back {
        tokio::time::sleep(Duration::from_secs(4)).await;
        engine.launch().await;
    }
    let status = loop {
        if let Some(status) = controller.try_wait().unwrap() {
            break status;
        }
        if begun.elapsed() > Duration::from_secs(400) {
            let _ = controller.kill();
            panic!("the run did not end: {}", read(&stderr_path));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut stdout = String::new();
    controller.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let report_path = stdout.lines().find(|l| l.ends_with("report.json")).expect("report.json printed").to_string();
    let report: Report = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    if back {
        let left = docker.list(Some((labels::RUN, &report.run_id))).await.unwrap();
        assert!(left.is_empty(), "left behind: {:?}", left.iter().map(|c| &c.name).collect::<Vec<_>>());
    }
    eprintln!("the run's terminal:\n{}", read(&stderr_path));
    (status.code(), read(&stderr_path), report)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Whether the event log of the run in `runs` holds `needle`.
fn observed(runs: &Path, needle: &str) -> bool {
    let Some(Ok(entry)) = std::fs::read_dir(runs).into_iter().flatten().next() else { return false };
    std::fs::read_to_string(entry.path().join("observations.jsonl")).is_ok_and(|log| log.contains(needle))
}

/// Trials with a value of `nap` on one side.
fn naps(report: &Report, head: bool) -> Vec<u32> {
    let side = if head { &report.head_side } else { &report.base_side };
    side.metrics.get("nap").into_iter().flatten().filter(|s| s.value.is_some()).map(|s| s.trial).collect()
}

/// What the terminal must say of the outage, once, and how it must say it.
fn assert_outage_told(stderr: &str, engine: &PrivateEngine) {
    let unreachable = format!("Docker engine unreachable at {}; waiting up to 90 s", engine.host());
    assert_eq!(stderr.matches(&unreachable).count(), 1, "{stderr}");
    assert_eq!(stderr.matches("answers again after").count(), 1, "{stderr}");
    assert!(!stderr.contains('\x1b'), "escape sequences in a non-terminal stderr: {stderr}");
    assert!(stderr.contains("verdicts: "), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_live_restore_the_sandboxes_survive_an_engine_restart_and_the_run_completes() {
    let work = tempfile::tempdir().unwrap();
    let mut engine = PrivateEngine::start(true).await;
    let (code, stderr, report) = run_with_a_restart(&mut engine, work.path()).await;
    assert_eq!(code, Some(0), "{stderr}\n{:?}", report.errors);
    assert_eq!(report.status, Status::Completed);
    assert_outage_told(&stderr, &engine);
    assert!(!stderr.contains("retrying"), "{stderr}");
    assert_eq!(naps(&report, false), (0..8).collect::<Vec<_>>());
    assert_eq!(naps(&report, true), (0..8).collect::<Vec<_>>());
    assert_eq!(report.sandboxes.len(), 2, "{:?}", report.sandboxes);
    assert!(report.sandboxes.iter().all(|s| s.deleted));
    let last = stderr.lines().rev().find(|l| l.contains("run ")).unwrap_or_default();
    assert!(last.ends_with(&format!("run {} completed", report.run_id)), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_live_restore_each_lost_sandbox_is_replaced_once_and_its_slot_retried() {
    let work = tempfile::tempdir().unwrap();
    let mut engine = PrivateEngine::start(false).await;
    let (code, stderr, report) = run_with_a_restart(&mut engine, work.path()).await;
    assert_outage_told(&stderr, &engine);
    // Both sandboxes died with the engine: each side retried once, in a new sandbox.
    let retried: Vec<&String> = report.warnings.iter().filter(|w| w.contains("retried in a new sandbox")).collect();
    assert_eq!(retried.len(), 2, "{:?}\n{stderr}", report.warnings);
    for side in ["base", "head"] {
        let note = retried.iter().find(|w| w.starts_with(&format!("{side} runtime trial "))).expect(side);
        assert!(note.contains(&format!("-{side}-r1)")) && note.contains("Docker engine's restart"), "{note}");
    }
    assert_eq!(stderr.matches("retrying the slot once in a new sandbox").count(), 2, "{stderr}");
    assert_eq!(code, Some(0), "{stderr}\n{:?}", report.errors);
    assert_eq!(report.status, Status::Completed);
    assert_eq!(naps(&report, false), (0..8).collect::<Vec<_>>());
    assert_eq!(naps(&report, true), (0..8).collect::<Vec<_>>());
    let mut roles: Vec<&str> = report.sandboxes.iter().map(|s| s.role.as_str()).collect();
    roles.sort();
    assert_eq!(roles, ["base", "base-r1", "head", "head-r1"]);
    assert!(report.sandboxes.iter().all(|s| s.deleted));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_does_not_come_back_fails_the_run_naming_docker() {
    let work = tempfile::tempdir().unwrap();
    let mut engine = PrivateEngine::start(true).await;
    let (code, stderr, report) = run_with_an_outage(&mut engine, work.path(), false, "3s").await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(report.status, Status::Failed);
    let why = format!("Docker engine unreachable at {} for 3 s (--engine-wait): the run cannot go on", engine.host());
    assert_eq!(report.errors.last(), Some(&why), "{:?}", report.errors);
    assert!(report.errors.iter().all(|e| !e.contains("stopped")), "{:?}", report.errors);
    assert_eq!(stderr.matches(&why).count(), 1, "said once, at the end: {stderr}");
    assert!(stderr.contains(&format!("run {} failed: {why}", report.run_id)), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr}");
    // The sandboxes the run could not remove (the engine is gone) are removed by the engine's
    // cleanup when it is dropped, once it answers again.
    engine.launch().await;
}
