//! Shell commands run as a user: `/bin/sh -c`, an environment given whole, its own process
//! group (so a timeout kills everything it started), output streamed to the caller in chunks as
//! it comes and kept (up to a cap) for checks.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sandbench_proto::v1::LogStream;

/// Output kept per command for checks and error messages.
const KEEP_BYTES: usize = 1024 * 1024;
const CHUNK: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct ShellCommand {
    pub run: String,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    pub user: Option<(u32, u32)>,
    pub timeout: Duration,
}

#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    /// stdout and stderr interleaved as read, at most 1 MiB (the start is kept).
    pub output: Vec<u8>,
    /// From just before spawn to the exit.
    pub elapsed: Duration,
    /// What the command and the descendants it waited for cost (its wait4 rusage).
    pub usage: super::usage::Usage,
    /// The error a write met on a full disk, when its output says so (all of it, not only what
    /// is kept): `no space left on device` (ENOSPC) or `disk quota exceeded` (EDQUOT).
    pub disk_full: Option<&'static str>,
}

/// The sandbox's disk bound (`disk_gb`) when the engine enforces it, named in the error of a
/// command that failed on a full disk. Set by each phase from its plan.
static DISK_GB: std::sync::Mutex<Option<f64>> = std::sync::Mutex::new(None);

pub fn set_disk_bound(disk_gb: Option<f64>) {
    *crate::journal::lock(&DISK_GB) = disk_gb;
}

/// Words of a full disk in output, lower case, and the error each names: libc's strerror of
/// ENOSPC and EDQUOT, and the errno names Node, Python and others print.
const DISK_FULL: [(&str, &str); 4] = [
    ("no space left on device", "no space left on device"),
    ("enospc", "no space left on device"),
    ("disk quota exceeded", "disk quota exceeded"),
    ("edquot", "disk quota exceeded"),
];

/// Finds a full disk's words in output read in chunks (the words may straddle two).
#[derive(Debug, Default)]
pub struct DiskFullScan {
    carry: Vec<u8>,
    pub found: Option<&'static str>,
}

impl DiskFullScan {
    pub fn scan(&mut self, chunk: &[u8]) {
        if self.found.is_some() {
            return;
        }
        let mut text = std::mem::take(&mut self.carry);
        text.extend(chunk.iter().map(u8::to_ascii_lowercase));
        self.found = DISK_FULL
            .iter()
            .find(|(words, _)| text.windows(words.len()).any(|w| w == words.as_bytes()))
            .map(|(_, error)| *error);
        self.carry = text.split_off(text.len().saturating_sub(32));
    }
}

/// The error of a full disk that `output` names, if it names one.
pub fn disk_full_in(output: &[u8]) -> Option<&'static str> {
    let mut scan = DiskFullScan::default();
    scan.scan(output);
    scan.found
}

impl Finished {
    pub fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output).into_owned()
    }

    /// Fails unless the command exited 0, quoting the end of its output.
    pub fn success(self, what: &str) -> anyhow::Result<Finished> {
        if self.status.success() {
            return Ok(self);
        }
        let text = self.output_text();
        let tail: String = text.chars().rev().take(400).collect::<Vec<_>>().into_iter().rev().collect();
        let full = match (self.disk_full, *crate::journal::lock(&DISK_GB)) {
            (Some(error), Some(gb)) => format!(": {error}: the sandbox's disk is full (disk_gb = {gb})"),
            (Some(error), None) => format!(": {error}: the disk is full"),
            (None, _) => String::new(),
        };
        bail!(
            "{what} failed ({}){full}{}",
            describe(self.status),
            if tail.trim().is_empty() { String::new() } else { format!(": {}", tail.trim()) }
        )
    }
}

pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => "unknown status".to_string(),
    }
}

/// Runs the command to completion (or its timeout), calling `sink` with every chunk of output.
pub fn run(command: &ShellCommand, sink: &mut dyn FnMut(LogStream, &[u8])) -> anyhow::Result<Finished> {
    let mut cmd = shell_command(command);
    let started = Instant::now();
    let mut child = crate::reaper::spawn_owned(&mut cmd)
        .with_context(|| format!("cannot start `{}` in {}", command.run, command.cwd.display()))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel::<(LogStream, Vec<u8>)>();
    let readers = spawn_readers(&mut child, &tx);
    drop(tx);
    let (waiter, done_rx) = spawn_waiter(child);
    let mut output = Vec::new();
    let mut full = DiskFullScan::default();
    let pumped = pump(&rx, &done_rx, pid, started + command.timeout, &mut |stream, chunk| {
        full.scan(chunk);
        keep(&mut output, sink, stream, chunk);
    });
    // The child's process group: a timeout, or leftovers after the exit.
    super::processes::kill_group(pid);
    let status = waiter.join().map_err(|_| anyhow::anyhow!("waiter thread panicked"))?;
    crate::reaper::disown(pid);
    // Drain what the readers still hold.
    while let Ok((stream, chunk)) = rx.recv_timeout(Duration::from_millis(50)) {
        full.scan(&chunk);
        keep(&mut output, sink, stream, &chunk);
    }
    let (status, usage) = status.context("cannot wait for the command")?;
    if pumped.timed_out {
        bail!("`{}` timed out after {:.0} s", command.run, command.timeout.as_secs_f64());
    }
    let elapsed = pumped.exited_at.unwrap_or_else(Instant::now).saturating_duration_since(started);
    // Readers end when the last holder of the pipes is gone; one held open by a process that
    // escaped the group is not waited for.
    drop(readers);
    Ok(Finished { status, output, elapsed, usage, disk_full: full.found })
}

/// `/bin/sh -c` with only the given environment, in its own process group, as the user.
fn shell_command(command: &ShellCommand) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(&command.run)
        .env_clear()
        .envs(&command.env)
        .current_dir(&command.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some((uid, gid)) = command.user {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

/// One thread per output pipe of `child`, sending each chunk read to `tx` until the pipe ends.
fn spawn_readers(child: &mut Child, tx: &mpsc::Sender<(LogStream, Vec<u8>)>) -> Vec<JoinHandle<()>> {
    let mut readers = Vec::new();
    for (stream, pipe) in [
        (LogStream::Stdout, child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>)),
        (LogStream::Stderr, child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>)),
    ] {
        let Some(mut pipe) = pipe else { continue };
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send((stream, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                }
            }
        }));
    }
    readers
}

/// The exit status of a command and what its process tree cost.
type Waited = std::io::Result<(ExitStatus, super::usage::Usage)>;

/// A thread that waits for `child` (with wait4, for its rusage); the receiver gets the moment
/// it exited.
fn spawn_waiter(child: Child) -> (JoinHandle<Waited>, mpsc::Receiver<Instant>) {
    let (done_tx, done_rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = super::usage::wait(child.id());
        // The exit time is taken here, not when the caller notices, so timings are exact.
        let _ = done_tx.send(Instant::now());
        status
    });
    (waiter, done_rx)
}

/// Passes a chunk to `sink` and keeps what fits under [`KEEP_BYTES`].
fn keep(output: &mut Vec<u8>, sink: &mut dyn FnMut(LogStream, &[u8]), stream: LogStream, chunk: &[u8]) {
    sink(stream, chunk);
    let room = KEEP_BYTES.saturating_sub(output.len());
    output.extend_from_slice(&chunk[..chunk.len().min(room)]);
}

/// How the command's output stopped being pumped.
struct Pumped {
    exited_at: Option<Instant>,
    timed_out: bool,
}

/// Hands output chunks to `take` until the pipes close, a moment after the exit, or the
/// deadline; kills the process group as soon as the command exits.
fn pump(
    rx: &mpsc::Receiver<(LogStream, Vec<u8>)>,
    done_rx: &mpsc::Receiver<Instant>,
    pid: u32,
    deadline: Instant,
    take: &mut dyn FnMut(LogStream, &[u8]),
) -> Pumped {
    let mut timed_out = false;
    let mut exited_at: Option<Instant> = None;
    // After the exit, output still in the pipes is read for a moment; a process that escaped
    // the group and holds the pipes open must not hold the caller.
    let mut grace_until: Option<Instant> = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok((stream, chunk)) => take(stream, &chunk),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                if exited_at.is_none() {
                    match done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                        Ok(at) => exited_at = Some(at),
                        Err(_) => timed_out = true,
                    }
                }
                break;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if exited_at.is_none()
            && let Ok(at) = done_rx.try_recv()
        {
            exited_at = Some(at);
            // Whatever the command left running in its group must not outlive it.
            super::processes::kill_group(pid);
            grace_until = Some(Instant::now() + Duration::from_millis(500));
        }
        if grace_until.is_some_and(|g| Instant::now() >= g) {
            break;
        }
        if exited_at.is_none() && Instant::now() >= deadline {
            timed_out = true;
            break;
        }
    }
    Pumped { exited_at, timed_out }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(run: &str, timeout_ms: u64) -> ShellCommand {
        ShellCommand {
            run: run.into(),
            env: BTreeMap::from([
                ("PATH".to_string(), "/usr/bin:/bin".to_string()),
                ("X".to_string(), "42".to_string()),
            ]),
            cwd: std::env::temp_dir(),
            user: None,
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    #[test]
    fn a_full_disk_is_found_past_the_kept_output_and_named_in_the_error() {
        let mut scan = DiskFullScan::default();
        scan.scan(b"dd: error writing 'big': No space ");
        scan.scan(b"left on device\n");
        assert_eq!(scan.found, Some("no space left on device"));
        assert_eq!(disk_full_in(b"Error: EDQUOT: disk quota exceeded, write"), Some("disk quota exceeded"));
        assert_eq!(disk_full_in(b"npm ERR! code ENOSPC"), Some("no space left on device"));
        assert_eq!(disk_full_in(b"all fine"), None);
        // The words come after more output than is kept (1 MiB): still found.
        let run_it = "head -c 2000000 /dev/zero | tr '\\0' y; echo; echo 'write: No space left on device' >&2; exit 1";
        let done = run(&shell(run_it, 10_000), &mut |_, _| {}).unwrap();
        assert_eq!(done.output.len(), KEEP_BYTES);
        assert_eq!(done.disk_full, Some("no space left on device"));
        set_disk_bound(Some(0.25));
        let err = done.success("`fill`").unwrap_err().to_string();
        set_disk_bound(None);
        assert!(
            err.starts_with(
                "`fill` failed (exit status 1): no space left on device: the sandbox's disk is full (disk_gb = 0.25): "
            ),
            "{err}"
        );
    }

    #[test]
    fn streams_and_keeps_output_with_only_the_given_environment() {
        let mut chunks = Vec::new();
        let done =
            run(&shell("echo out $X; echo err >&2; env | wc -l", 5000), &mut |s, c| chunks.push((s, c.to_vec())))
                .unwrap();
        assert!(done.status.success());
        let text = done.output_text();
        assert!(text.contains("out 42") && text.contains("err"), "{text}");
        // PATH, X, and the PWD sh adds.
        assert!(text.lines().any(|l| l.trim() == "3"), "{text}");
        assert!(chunks.iter().any(|(s, _)| *s == LogStream::Stderr));
    }

    #[test]
    fn a_background_process_holding_the_pipes_does_not_hold_the_caller() {
        let started = Instant::now();
        let done = run(&shell("(trap '' TERM; sleep 30) & echo started", 10_000), &mut |_, _| {}).unwrap();
        assert!(done.status.success());
        assert!(done.output_text().contains("started"));
        assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
        assert!(done.elapsed < Duration::from_secs(1));
    }

    #[test]
    fn reports_failure_with_output_and_kills_on_timeout() {
        let err = run(&shell("echo broken; exit 3", 5000), &mut |_, _| {}).unwrap().success("build").unwrap_err();
        assert_eq!(err.to_string(), "build failed (exit status 3): broken");
        let started = Instant::now();
        let err = run(&shell("sleep 30 & sleep 30", 300), &mut |_, _| {}).unwrap_err().to_string();
        assert!(err.contains("timed out after"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
