//! A hostile pull request, end to end against the real engine: `sandbench run` on the product in
//! `tests/hostile/`, twice. First a revision that plants a link for root to write SHA256SUMS
//! through (into the host's socket folder) against one that plants links for root to lay the
//! fixture through (into /run, chowning the socket folder, into it, and into /etc); both steal
//! the agent's token through the origin if they can, then plant a setuid file and delete and
//! replace the socket if the folder became theirs. Then a clean revision against one that floods
//! output and disk, injects through RESULT keys and error text, and forks without end.
//!
//! Each run must end completed or failed with a clear error, and: no setuid file and nothing of
//! a sandbox user's on the host (a watcher scans the run folder while it goes), no token
//! anywhere in the run folder or the output, the run folder small, report.md with its three
//! markers only and no live tag, report.html and the terminal output without escape sequences,
//! every probe metric 0, no container left. The clean side measures everything; `disk_gb` holds
//! the disk flood.
//!
//! Then the host's disk: a build writing five times `disk_gb` (`tests/hostile/disk`) fails on a
//! full disk, saying so, and the engine's file system loses no more than the bound; root in a
//! sandbox flooding the container log (the agent's stdout and stderr) leaves it within its cap,
//! and teardown reads a bounded amount of it. An engine that cannot bound a sandbox's disk fails
//! these tests, saying so (`images/ensure-docker.sh` starts one that can).

mod support;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sandbench::provision::docker::LOG_READ_BYTES;
use sandbench::provision::{AgentShipping, DockerProvisioner, labels};
use sandbench::report::{Report, Status};

/// How long the whole run may take before the test gives up on it.
const RUN_LIMIT: Duration = Duration::from_secs(20 * 60);
const PROBES: [&str; 4] = ["token_stolen", "root_write", "socket_tampered", "setuid_planted"];

/// A git repository with the hostile product, one tag per mode of attack (`none` is clean).
fn hostile_repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let product = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/hostile");
    support::copy_tree(&product, repo.path());
    let git = |args: &str| support::git(repo.path(), args);
    git("init -q -b main .");
    for mode in ["none", "sums", "fixture", "runtime"] {
        std::fs::write(repo.path().join("attacks/mode"), format!("{mode}\n")).unwrap();
        git("add -A");
        git(&format!("commit -q --allow-empty -m {mode}"));
        git(&format!("tag {mode}"));
    }
    repo
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&path, out);
        }
        out.push(path);
    }
}

/// What on the host a sandbox must never have made: a setuid or setgid file, a file owned by
/// anyone but the controller (a sandbox user, through a chown), anything in a socket folder but
/// the controller's sockets.
fn violations(out: &Path) -> Vec<String> {
    let me = std::fs::metadata(out).map(|m| m.uid()).unwrap_or(0);
    let mut paths = Vec::new();
    walk(out, &mut paths);
    let mut found = Vec::new();
    for path in paths {
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        let shown = path.strip_prefix(out).unwrap_or(&path).display().to_string();
        if meta.mode() & 0o6000 != 0 {
            found.push(format!("setuid/setgid file {shown} (mode {:o}, uid {})", meta.mode(), meta.uid()));
        }
        if meta.uid() != me {
            found.push(format!("{shown} owned by uid {} (a sandbox's user)", meta.uid()));
        }
        let in_sockets = shown.split('/').any(|part| part == "sock");
        let controllers = meta.file_type().is_socket() && path.file_name().is_some_and(|n| n == "agent.sock");
        if in_sockets && !meta.is_dir() && !controllers {
            found.push(format!("{shown} planted in a socket folder"));
        }
    }
    found
}

/// The run folder in `out` (the only folder there).
fn run_dir(out: &Path) -> PathBuf {
    std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .find(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .unwrap_or_default()
}

fn metric(report: &Report, head: bool, key: &str) -> Vec<(Option<f64>, Option<String>)> {
    let side = if head { &report.head_side } else { &report.base_side };
    side.metrics.get(key).map(|s| s.iter().map(|s| (s.value, s.error.clone())).collect()).unwrap_or_default()
}

fn has_escape(bytes: &[u8]) -> bool {
    bytes.contains(&0x1b) || bytes.contains(&0x07) || String::from_utf8_lossy(bytes).contains('\u{9b}')
}

/// A finished `sandbench run`: how it ended, what it printed, what the watcher saw on the host,
/// the controller's peak resident memory, and what a flood of the head's socket met.
struct Ran {
    out: tempfile::TempDir,
    code: Option<i32>,
    took: Duration,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    host: Vec<String>,
    peak_rss_kib: u64,
    flood: Option<Flood>,
}

/// Runs `sandbench run` on `base` against `head`, watching the host side while it goes (planted
/// files may be gone by the end); killed after [`RUN_LIMIT`].
fn run_watched(repo: &Path, base: &str, head: &str) -> Ran {
    run_spec(repo, "bench.toml", base, head, false)
}

/// [`run_watched`] with `spec`; with `flood`, the head's socket is flooded while the run goes.
fn run_spec(repo: &Path, spec: &str, base: &str, head: &str, flood: bool) -> Ran {
    let out = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, out) = (stop.clone(), out.path().to_path_buf());
        std::thread::spawn(move || {
            let mut seen: Vec<String> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                for v in violations(&out) {
                    if !seen.contains(&v) {
                        seen.push(v);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            seen
        })
    };
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .args(["run", spec, "--base", base, "--head", head, "--timeout-minutes", "15", "--out"])
        .arg(out.path())
        .current_dir(repo)
        .env("SANDBENCH_LEDGER", out.path().join("ledger.sqlite"))
        .env("SANDBENCH_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sandbench");
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = r.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let peak = {
        let (stop, pid) = (stop.clone(), child.id());
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(high_water_kib(pid).unwrap_or(0));
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        })
    };
    let flooder = flood.then(|| {
        let (stop, out) = (stop.clone(), out.path().to_path_buf());
        std::thread::spawn(move || flood_head(&out, &stop))
    });
    let status = loop {
        // The peak as late as it can be read: the process is a zombie once it ends.
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    stop.store(true, Ordering::Relaxed);
    let mut host = watcher.join().unwrap();
    host.extend(violations(out.path()));
    Ran {
        code: status.and_then(|s| s.code()),
        took: started.elapsed(),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        host,
        peak_rss_kib: peak.join().unwrap(),
        flood: flooder.map(|f| f.join().unwrap()),
        out,
    }
}

/// The peak resident memory of process `pid` so far (`VmHWM`), in KiB.
fn high_water_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What flooding the head's socket met, round after round.
#[derive(Debug, Default)]
struct Flood {
    rounds: u32,
    /// Per round: of 1,000 connections, how many opened and how many of those the server closed
    /// within half a second (none open once the run has ended).
    closed_at_once: Vec<(usize, usize)>,
    /// Per round: the 1,000 streams of one connection, as the server answered them.
    streams: Vec<support::flood::Streams>,
}

/// Floods the head's socket once its agent is connected, until `stop`: rounds of 1,000
/// streams on one connection, then 1,000 silent connections.
fn flood_head(out: &Path, stop: &AtomicBool) -> Flood {
    let mut flood = Flood::default();
    let socket = loop {
        if stop.load(Ordering::Relaxed) {
            return flood;
        }
        let dir = run_dir(out);
        let log = std::fs::read_to_string(dir.join("observations.jsonl")).unwrap_or_default();
        let head = std::fs::read_dir(dir.join("sock"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .find(|role| role.starts_with("head"));
        // The head's agent is in (its events are logged): the flood comes after it.
        if let Some(role) = head
            && log.contains(&format!("-{role}\""))
        {
            let socket = dir.join("sock").join(role).join("agent.sock");
            if socket.exists() {
                break socket;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    while !stop.load(Ordering::Relaxed) && socket.exists() {
        flood.rounds += 1;
        if let Ok(seen) = support::flood::open_streams(&socket, 1000, Duration::from_secs(1)) {
            flood.streams.push(seen);
        }
        let conns = support::flood::idle_connections(&socket, 1000);
        let closed = support::flood::closed_by_server(&conns, Duration::from_millis(500));
        flood.closed_at_once.push((conns.len(), closed));
        drop(conns);
        std::thread::sleep(Duration::from_millis(200));
    }
    flood
}

/// The containers of a run still there (removed now, so none outlives the test).
fn containers_left(run_dir: &Path) -> Vec<String> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let provisioner = DockerProvisioner::connect(1).await.unwrap();
        let run_id = run_dir.file_name().unwrap_or_default().to_string_lossy().to_string();
        let left = provisioner.list(Some((labels::RUN, &run_id))).await.unwrap();
        for c in &left {
            let _ = provisioner.remove(&c.id).await;
        }
        left.into_iter().map(|c| c.name).collect()
    })
}

/// The agents' tokens (from the controller's token file), the files of the run folder holding
/// one, and the folder's size without the token file.
fn leaked_tokens(run_dir: &Path) -> (Vec<String>, Vec<PathBuf>, u64) {
    let tokens: Vec<String> = std::fs::read(run_dir.join(".agent-tokens.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.as_object().cloned())
        .map(|o| o.values().filter_map(|r| r["token"].as_str().map(String::from)).collect())
        .unwrap_or_default();
    let mut files = Vec::new();
    walk(run_dir, &mut files);
    let (mut holding, mut total) = (Vec::new(), 0u64);
    for file in files.into_iter().filter(|f| f.is_file() && !f.ends_with(".agent-tokens.json")) {
        let Ok(bytes) = std::fs::read(&file) else { continue };
        total += bytes.len() as u64;
        let text = String::from_utf8_lossy(&bytes);
        if tokens.iter().any(|t| text.contains(t.as_str())) {
            holding.push(file);
        }
    }
    (tokens, holding, total)
}

/// Runs `base` against `head` of the hostile product and returns what went wrong, and the report.
fn hostile_run(repo: &Path, base: &str, head: &str) -> (Vec<String>, Option<Report>) {
    let ran = run_watched(repo, base, head);
    let dir = run_dir(ran.out.path());
    let terminal = format!("{}{}", String::from_utf8_lossy(&ran.stdout), String::from_utf8_lossy(&ran.stderr));
    let mut failures: Vec<String> = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failures.push(format!("{base} vs {head}: {what}"));
        }
    };

    // The run ended, completed, failed or partial (measurements missing) with a clear error,
    // and nothing is left. 2 is a usage error, which no run ends with.
    check(
        matches!(ran.code, Some(0 | 1 | 3)),
        format!("sandbench ended with {:?} after {:?}:\n{terminal}", ran.code, ran.took),
    );
    let report: Option<Report> =
        std::fs::read(dir.join("report.json")).ok().and_then(|b| serde_json::from_slice(&b).ok());
    check(report.is_some(), format!("no readable report.json in {dir:?}"));
    if let Some(report) = &report {
        check(report.status != Status::Running, "the report still says running".into());
        check(
            report.status == Status::Completed || !report.all_errors().is_empty(),
            format!("a {:?} run without an error saying why", report.status),
        );
    }
    let left = containers_left(&dir);
    check(left.is_empty(), format!("containers left behind: {left:?}"));

    // The host: no setuid file, nothing of a sandbox user's, nothing planted by a sandbox.
    check(ran.host.is_empty(), format!("the host was touched:\n  {}", ran.host.join("\n  ")));

    // No token anywhere but the controller's own token file; the run folder small after floods.
    let (tokens, holding, total) = leaked_tokens(&dir);
    check(!tokens.is_empty(), "no agent tokens recorded".into());
    check(holding.is_empty(), format!("an agent's token is in {holding:?}"));
    check(!tokens.iter().any(|t| terminal.contains(t.as_str())), "an agent's token was printed".into());
    let log = std::fs::metadata(dir.join("observations.jsonl")).map(|m| m.len()).unwrap_or(0);
    check(log < 16 << 20, format!("observations.jsonl holds {log} bytes"));
    check(total < 48 << 20, format!("the run folder holds {total} bytes"));

    // The report and the terminal: inert.
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap_or_default();
    check(md.matches("-->").count() == 3 && md.matches("<!--").count() == 3, format!("report.md markers:\n{md}"));
    check(!md.contains("<script") && !has_escape(md.as_bytes()), format!("report.md is live:\n{md}"));
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap_or_default();
    check(!html.contains("<script") && !has_escape(html.as_bytes()), "report.html is live".into());
    check(!has_escape(&ran.stdout) && !has_escape(&ran.stderr), format!("escapes reached the terminal:\n{terminal:?}"));

    // Every probe of both sides that got to run it: 0 (the attack did not work).
    for (side, is_head) in [(base, false), (head, true)] {
        for key in PROBES {
            let samples = report.as_ref().map(|r| metric(r, is_head, key)).unwrap_or_default();
            let zero = samples.iter().all(|(v, _)| v.is_none() || *v == Some(0.0));
            check(zero, format!("{side} {key}: {samples:?}"));
        }
    }
    (failures, report)
}

#[test]
fn a_hostile_pull_request_changes_nothing_outside_its_sandboxes() {
    let repo = hostile_repo();
    let mut failures = Vec::new();

    // Root writing through planted links: SHA256SUMS (base), the fixture (head).
    let (found, _) = hostile_run(repo.path(), "sums", "fixture");
    failures.extend(found);

    // A clean base beside a head that floods, injects and forks.
    let (found, report) = hostile_run(repo.path(), "none", "runtime");
    failures.extend(found);
    let mut check = |ok: bool, what: String| {
        if !ok {
            failures.push(format!("none vs runtime: {what}"));
        }
    };
    if let Some(report) = &report {
        // The other sandbox is untouched: the clean base measured everything, and its probes and
        // the hostile head's (whose attacks do not break its own phases first) say 0.
        for key in report.metrics.iter().map(|m| m.key.as_str()) {
            let base = metric(report, false, key);
            check(
                !base.is_empty() && base.iter().all(|(v, e)| v.is_some() && e.is_none()),
                format!("base {key}: {base:?}"),
            );
        }
        for key in PROBES {
            let head = metric(report, true, key);
            check(!head.is_empty(), format!("the hostile head never ran its probe ({key}): {head:?}"));
        }
        // The disk flood: held by disk_gb, which the engine must enforce.
        check(report.resources.disk_enforced == Some(true), unbounded(report));
        let limit = report.resources.disk_gb * 1e9;
        let written = metric(report, true, "disk_written");
        let held = !written.is_empty() && written.iter().all(|(v, _)| v.is_some_and(|v| v <= limit));
        check(held, format!("the disk flood wrote {written:?} bytes, past disk_gb ({limit})"));
        // The injected RESULT key and error text are reported (escaped, as checked above).
        check(
            report.all_errors().iter().any(|e| e.contains("does not declare")),
            format!("the injection is not among the errors: {:?}", report.all_errors()),
        );
    }

    assert!(failures.is_empty(), "{} failure(s):\n- {}", failures.len(), failures.join("\n- "));
}

/// A pull request that floods the intake: a 1 GiB file of zeros in its source (streamed into the
/// sandbox within `source.max_mb`, so the controller never holds it), 100,000 `RESULT` lines
/// (past `max_results_per_script`), and, from the host side of the head's socket as root in the
/// sandbox could, rounds of 1,000 HTTP/2 streams on one connection and 1,000 silent connections
/// for as long as the run goes. Both sides complete, the flood is dropped with a warning, the
/// socket keeps its bounds, and the controller's peak memory stays small.
#[test]
fn a_pull_request_flooding_the_intake_is_held_to_its_bounds() {
    let repo = hostile_repo();
    let git = |args: &str| support::git(repo.path(), args);
    std::fs::write(repo.path().join("attacks/mode"), "intake\n").unwrap();
    // Sparse here; 1 GiB in the archive.
    std::fs::File::create(repo.path().join("zeros.bin")).unwrap().set_len(1 << 30).unwrap();
    git("add -A");
    git("commit -q -m intake");
    git("tag intake");
    std::fs::remove_file(repo.path().join("zeros.bin")).unwrap();

    let ran = run_spec(repo.path(), "intake.toml", "none", "intake", true);
    let dir = run_dir(ran.out.path());
    let terminal = format!("{}{}", String::from_utf8_lossy(&ran.stdout), String::from_utf8_lossy(&ran.stderr));
    let mut failures: Vec<String> = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failures.push(what);
        }
    };
    let report: Option<Report> =
        std::fs::read(dir.join("report.json")).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let status = report.as_ref().map(|r| r.status);
    check(
        ran.code == Some(0) && status == Some(Status::Completed),
        format!("the run ended with {:?} ({status:?}) after {:?}:\n{terminal}", ran.code, ran.took),
    );
    let left = containers_left(&dir);
    check(left.is_empty(), format!("containers left behind: {left:?}"));
    check(ran.host.is_empty(), format!("the host was touched:\n  {}", ran.host.join("\n  ")));
    if let Some(report) = &report {
        for head in [false, true] {
            let taken = metric(report, head, "results_flood");
            check(
                taken.len() == 2 && taken.iter().all(|(v, e)| *v == Some(1.0) && e.is_none()),
                format!("results_flood (head: {head}): {taken:?}"),
            );
        }
        let said = "printed 99000 RESULT lines past its bound of 1000 (max_results_per_script)";
        let warned = report.warnings.iter().filter(|w| w.contains(said)).count();
        check(warned == 2, format!("one warning per head trial saying {said:?}: {:?}", report.warnings));
    }
    // The journal took at most the bound of the flood's lines per trial.
    let log = std::fs::read_to_string(dir.join("observations.jsonl")).unwrap_or_default();
    let observed = log.lines().filter(|l| l.contains("\"metric\":\"results_flood\"")).count();
    check((2..=2 * 1000 + 2).contains(&observed), format!("{observed} results_flood observations"));
    check(log.len() < 16 << 20, format!("observations.jsonl holds {} bytes", log.len()));

    // The socket held its bounds all along: streams past the limit refused, connections past it
    // closed at once, rounds after rounds.
    let flood = ran.flood.unwrap_or_default();
    let streams = sandbench::observations::server::MAX_STREAMS_PER_CONNECTION;
    let slots = sandbench::observations::server::MAX_CONNECTIONS_PER_SOCKET;
    check(flood.rounds >= 2, format!("only {} rounds of flood: {flood:?}", flood.rounds));
    check(
        !flood.streams.is_empty() && flood.streams.iter().all(|s| s.reset >= 1000 - streams),
        format!("streams: {:?}", flood.streams),
    );
    check(
        flood.closed_at_once.iter().any(|&(opened, _)| opened == 1000)
            && flood.closed_at_once.iter().all(|&(opened, closed)| closed + slots >= opened),
        format!("connections closed at once: {:?}", flood.closed_at_once),
    );
    // Neither the 1 GiB source nor the flood is held in memory.
    eprintln!(
        "controller peak RSS {} MiB over {:?}; {} flood rounds; streams {:?}; closed at once {:?}",
        ran.peak_rss_kib / 1024,
        ran.took,
        flood.rounds,
        flood.streams.iter().map(|s| s.reset).collect::<Vec<_>>(),
        flood.closed_at_once
    );
    check(
        ran.peak_rss_kib > 0 && ran.peak_rss_kib < 256 << 10,
        format!("the controller's peak RSS was {} KiB", ran.peak_rss_kib),
    );
    assert!(failures.is_empty(), "{} failure(s):\n- {}", failures.len(), failures.join("\n- "));
}

/// A revision name of any script is an error that names it, from the command line, with no
/// panic and no run folder left behind.
#[test]
fn a_revision_of_any_script_gets_a_clear_error() {
    let repo = support::demo_repo(|_| {});
    let out = tempfile::tempdir().unwrap();
    for bad in ["aéééé", "漢字\u{202e}", "--x\u{1b}[2J"] {
        let result = Command::new(env!("CARGO_BIN_EXE_sandbench"))
            .args(["run", "bench.toml", &format!("--base={bad}"), "--head", "base", "--out"])
            .arg(out.path())
            .current_dir(repo.path())
            .env("SANDBENCH_LEDGER", out.path().join("ledger.sqlite"))
            .stdin(Stdio::null())
            .output()
            .expect("run sandbench");
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(1), "{bad:?}: {stderr}");
        let named = stderr.contains("is not a commit") || stderr.contains("invalid revision");
        assert!(stderr.starts_with("error: --base: ") && named, "{bad:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains('\u{1b}') && !stderr.contains('\u{202e}'),
            "{stderr:?}"
        );
        let left: Vec<_> = std::fs::read_dir(out.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.iter().all(|name| name.to_string_lossy().starts_with("ledger.sqlite")), "{left:?}");
    }
}

/// Why a run's sandboxes had no disk bound, for a failure message.
fn unbounded(report: &Report) -> String {
    let said: Vec<&String> = report.warnings.iter().filter(|w| w.contains("disk_gb")).collect();
    format!(
        "the engine at {} does not bound a sandbox's disk (disk_enforced = {:?}; {said:?}): these tests need one that \
         does, as images/ensure-docker.sh starts",
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into()),
        report.resources.disk_enforced
    )
}

/// The engine's data root (`docker info`): the file system sandboxes write to.
fn engine_data_root() -> PathBuf {
    let out = Command::new("docker").args(["info", "--format", "{{.DockerRootDir}}"]).output().expect("docker info");
    assert!(out.status.success(), "docker info: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn free_bytes(path: &Path) -> u64 {
    let fs = rustix::fs::statvfs(path).expect("statvfs of the engine's data root");
    fs.f_bavail * fs.f_frsize
}

/// Room the sandboxes take besides the flood: two sandboxes' agent state (a 4 MiB journal
/// reserve each), users, the source, and the file system's own metadata.
const DISK_SLACK: u64 = 64 << 20;

#[test]
fn a_build_past_disk_gb_fails_on_a_full_disk_and_the_host_loses_at_most_the_bound() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let provisioner = DockerProvisioner::connect(1).await.expect("a Docker engine (images/ensure-docker.sh)");
        support::ensure_busybox_image(&provisioner).await;
    });
    // `none` writes nothing; `fill` writes 500 MB past its 100 MB.
    let repo = tempfile::tempdir().unwrap();
    support::copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/hostile/disk"), repo.path());
    support::git(repo.path(), "init -q -b main .");
    for mode in ["none", "fill"] {
        std::fs::write(repo.path().join("mode"), format!("{mode}\n")).unwrap();
        support::git(
            repo.path(),
            &format!("add -A && git -c user.name=t -c user.email=t@t commit -qm {mode} && git tag {mode}"),
        );
    }
    // The engine's file system, watched while the run goes: its lowest free space.
    let root = engine_data_root();
    let before = free_bytes(&root);
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (stop, root) = (stop.clone(), root.clone());
        std::thread::spawn(move || {
            let mut lowest = u64::MAX;
            while !stop.load(Ordering::Relaxed) {
                lowest = lowest.min(free_bytes(&root));
                std::thread::sleep(Duration::from_millis(20));
            }
            lowest
        })
    };
    let ran = run_watched(repo.path(), "none", "fill");
    stop.store(true, Ordering::Relaxed);
    let lowest = sampler.join().unwrap();
    let dir = run_dir(ran.out.path());
    let terminal = format!("{}{}", String::from_utf8_lossy(&ran.stdout), String::from_utf8_lossy(&ran.stderr));
    let left = containers_left(&dir);
    let report: Report = serde_json::from_slice(&std::fs::read(dir.join("report.json")).expect("report.json"))
        .expect("a readable report.json");

    assert_eq!(report.resources.disk_enforced, Some(true), "{}\n{terminal}", unbounded(&report));
    assert!(matches!(ran.code, Some(1 | 3)), "sandbench ended with {:?}:\n{terminal}", ran.code);
    let errors = report.all_errors();
    let full = errors
        .iter()
        .find(|e| e.contains("`sh fill.sh` failed") && e.contains("the sandbox's disk is full (disk_gb = 0.1)"));
    let full = full.unwrap_or_else(|| panic!("no error says the build's disk is full: {errors:#?}"));
    assert!(full.contains("no space left on device") || full.contains("disk quota exceeded"), "{full}");
    let bound = (report.resources.disk_gb * 1e9) as u64;
    let lost = before.saturating_sub(lowest);
    eprintln!("the build's error: {full}\nthe engine's file system lost at most {lost} bytes (bound {bound})");
    assert!(
        lost <= bound + DISK_SLACK,
        "the engine's file system ({}) lost {lost} bytes while a sandbox of disk_gb {} (and a clean one) ran",
        root.display(),
        report.resources.disk_gb
    );
    // The agent wrote its journal on the same full disk: it gave back its reserve, said so, and
    // carried on (the step's failure above came through).
    let mut files = Vec::new();
    walk(&dir, &mut files);
    let note = "the sandbox's disk is full; output and files are no longer recorded";
    let noted = files.iter().any(|f| std::fs::read(f).is_ok_and(|b| String::from_utf8_lossy(&b).contains(note)));
    assert!(noted, "no note of the full disk in {}", dir.display());
    assert!(left.is_empty(), "containers left behind: {left:?}");
    assert!(ran.host.is_empty(), "the host was touched: {:?}", ran.host);
}

/// The sizes of a json-file container log on the host, its rotated files included.
fn log_bytes(path: &str) -> u64 {
    ["", ".1", ".2", ".3", ".4"]
        .iter()
        .filter_map(|s| std::fs::metadata(format!("{path}{s}")).ok())
        .map(|m| m.len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flood_stays_within_the_cap_and_teardown_reads_a_bounded_amount() {
    support::with_harness("logflood", support::quick_heartbeats(), |h| async move {
        support::ensure_busybox_image(&h.provisioner).await;
        let live = h.launch(h.request("flood", support::BUSYBOX_IMAGE, AgentShipping::Bind)).await;
        let id = live.sandbox.id.clone();
        // A product's steps write to the agent's pipes, which the journal bounds; the container
        // log is the agent's own stdout and stderr, which root in the sandbox can write to.
        // Lines of 1,900 bytes: the last 5,000 lines teardown asks for are more than the bytes it reads.
        let flood = "l=LLLLLLLLLLLLLLLLLLL; l=$l$l$l$l$l$l$l$l$l$l; l=$l$l$l$l$l$l$l$l$l$l; \
                     for fd in 1 2; do yes $l | head -n 6300 > /proc/1/fd/$fd; done; \
                     echo 'flood end' > /proc/1/fd/2";
        let (code, out) = h.provisioner.exec_capture(&id, vec!["sh".into(), "-c".into(), flood.into()]).await.unwrap();
        assert_eq!(code, 0, "the flood: {out}");
        let path = h.provisioner.log_path(&id).await.unwrap();
        // The engine writes the log as it reads the pipes: wait for the end to get there.
        let begun = Instant::now();
        while !std::fs::read_to_string(&path).unwrap_or_default().contains("flood end") {
            assert!(begun.elapsed() < Duration::from_secs(30), "the flood's end never reached {path}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let on_host = log_bytes(&path);
        // 24 MB went in; json-file keeps 2 files of 1 MiB, each past it by one entry at most.
        assert!(on_host > 1 << 20, "the flood did not reach the log: {on_host} bytes");
        assert!(on_host <= (2 << 20) + (64 << 10), "the container log holds {on_host} bytes on the host");

        let down = h.teardown(&live.sandbox).await;
        let saved = down.log_path.expect("teardown saved the agent log");
        let text = std::fs::read_to_string(&saved).unwrap();
        assert!(text.len() <= LOG_READ_BYTES + 200, "teardown read {} bytes of the log", text.len());
        // What it read: whole lines, the end of the log (a longer log is cut at its start, saying
        // so: see the Docker backend's unit test).
        let short: Vec<(usize, usize)> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with('L') && l.len() != 1900)
            .map(|(i, l)| (i, l.len()))
            .collect();
        assert!(short.is_empty(), "lines cut short (line, length): {short:?}");
        let end: Vec<&str> = text.lines().rev().take(5).collect();
        assert!(end.contains(&"flood end"), "the end of the log is kept: {end:?}");
    })
    .await;
}

/// What each install trial leaves for the next and what it finds of the one before: a file in
/// its home opened to all (as `node_modules` and `~/.npm` would be), a System V shared memory
/// segment, message queue and semaphore set and a POSIX message queue, all mode 0666.
const TRIAL_LEAKS: &str = r#"name = "trial-leaks"
[install]
command = '''
me=${USER#benchmark}; prev=/home/benchmark$((me - 1))
file=$(cat $prev/node_modules/secret 2>/dev/null || echo none)
cache=$(ls $prev/.npm 2>/dev/null | wc -l)
shm=$(tail -n +2 /proc/sysvipc/shm | wc -l); msg=$(tail -n +2 /proc/sysvipc/msg | wc -l)
sem=$(tail -n +2 /proc/sysvipc/sem | wc -l); mq=$(ls /dev/mqueue | wc -l)
echo "trial $me sees: file=$file cache=$cache shm=$shm msg=$msg sem=$sem mq=$mq"
mkdir -p ~/node_modules ~/.npm/_cacache && echo secret-$me > ~/node_modules/secret && chmod -R a+rwX ~
ipcmk -M 4096 -p 0666 && ipcmk -Q -p 0666 && ipcmk -S 1 -p 0666
python3 -c 'import ctypes, os; rt = ctypes.CDLL("librt.so.1"); rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]; assert rt.mq_open(b"/leak", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0'
echo "trial $me left its leaks"
'''
"#;

/// Install trial k, real processes in a real sandbox, reads nothing trial k−1 left: not a file
/// of its home (which it opened to all), not its System V IPC objects, not its POSIX message
/// queue; and the warnings say what was removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trial_k_reads_no_file_segment_or_queue_of_trial_k_minus_1() {
    let plan = sandbench::spec::parse(Path::new("leaks.toml"), TRIAL_LEAKS).unwrap_or_else(|e| panic!("{e}"));
    let config = sandbench::station::hub_config(&plan, Duration::from_secs(30));
    support::with_harness("leaks", config, move |h| async move {
        let hub = h.hub().await;
        let agent_plan = plan.agent_plan("none");
        let live = h.launch(h.request("leaks", support::NODE_IMAGE, AgentShipping::Bind)).await;
        let id = live.sandbox.id.clone();
        for trial in 0..3 {
            let done = sandbench::station::sandbox::run_phase(
                &hub,
                &id,
                &agent_plan,
                sandbench_proto::Phase::Install,
                trial,
                Duration::from_secs(120),
            )
            .await
            .unwrap();
            assert_eq!(done.status, sandbench_proto::v1::PhaseStatus::Ok, "install {trial}: {}", done.error);
        }
        let events = sandbench::observations::store::read_events(&hub.log_path()).unwrap();
        let output: String = events
            .iter()
            .filter_map(|e| match &e.body {
                sandbench::observations::store::StoredBody::Log {
                    data: sandbench::observations::store::Data::Text { text },
                    ..
                } => Some(text.clone()),
                _ => None,
            })
            .collect();
        // The trials' own lines (the command, echoed, says the same words).
        let said = |what: &str| output.lines().filter(|l| l.starts_with("trial ") && l.contains(what)).count();
        let seen: Vec<&str> = output.lines().filter(|l| l.starts_with("trial ") && l.contains(" sees: ")).collect();
        assert_eq!(said("left its leaks"), 3, "every trial left its leaks:\n{output}");
        assert_eq!(seen.len(), 3, "{output}");
        for (k, line) in seen.iter().enumerate().skip(1) {
            assert_eq!(
                *line,
                format!("trial {} sees: file=none cache=0 shm=0 msg=0 sem=0 mq=0", k + 1),
                "trial {k} found what trial {} left:\n{output}",
                k - 1
            );
        }
        let warnings =
            std::fs::read_to_string(h.run_dir.path().join("sandboxes").join(&id).join("warnings/install-1.txt"))
                .unwrap_or_default();
        for what in
            ["System V shared memory segment", "System V message queue", "System V semaphore set", "/dev/mqueue/leak"]
        {
            assert!(warnings.contains(what), "the warnings do not name the removed {what}:\n{warnings}");
        }
        h.teardown(&live.sandbox).await;
    })
    .await;
}

/// A duet's sandboxes ask for the same block I/O weight: the real engine keeps it, or discards it
/// (a host without a proportional I/O scheduler) and the provisioner says so, which the run's
/// report then warns of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_io_weight_is_kept_by_the_engine_or_said_to_be_discarded() {
    support::with_harness("ioweight", support::quick_heartbeats(), |h| async move {
        let mut request = h.request("weighed", support::SCRATCH_IMAGE, AgentShipping::Bind);
        request.resources.io_weight = Some(sandbench::run::DUET_IO_WEIGHT);
        let live = h.launch(request).await;
        let kept = h.provisioner.settings(&live.sandbox.id).await.unwrap().blkio_weight;
        let discarded = sandbench::provision::Provisioner::io_weight_discarded(&*h.provisioner);
        eprintln!("blkio weight kept: {kept}; discarded: {discarded:?}");
        match discarded {
            None => assert_eq!(kept, sandbench::run::DUET_IO_WEIGHT),
            Some(why) => {
                assert_eq!(kept, 0, "{why}");
                assert!(why.contains("discarded the block I/O weight 500"), "{why}");
            }
        }
        h.teardown(&live.sandbox).await;
    })
    .await;
}
