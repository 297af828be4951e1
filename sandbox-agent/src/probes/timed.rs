//! Timed runs of one command, repeated: the command probe's measuring part, kept lean so that
//! what it adds to a run is about what `hyperfine -N` adds. The command is set up once (its
//! environment built, its program found), a line that needs no shell is exec'ed directly (else
//! `/bin/sh -c`), output goes to a file instead of pipes (no reader threads), and a run's time
//! is taken from just before the spawn to the return of its wait (a pidfd polled until the
//! deadline). Each run is in its own process group, killed after the run.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::process::{Pid, PidfdFlags, pidfd_open};

use super::command::ShellCommand;
use super::usage::{self, Usage};

/// Output of the last run kept for error messages and the log.
const KEEP_BYTES: u64 = 64 * 1024;

/// One timed run: what a per-run sample is made of.
#[derive(Debug)]
pub struct TimedRun {
    pub status: ExitStatus,
    /// From just before the spawn to the return of the wait.
    pub elapsed: Duration,
    /// What the run's process tree cost (wait4's rusage: CPU time, peak RSS, faults, switches).
    pub usage: Usage,
}

/// A command ready to be run and timed many times.
pub struct Repeatable {
    command: Command,
    output: File,
    timeout: Duration,
    line: String,
}

impl Repeatable {
    /// Sets `command` up once; stdout and stderr of every run go to `output_path` (emptied
    /// before each run).
    pub fn new(command: &ShellCommand, output_path: &Path) -> anyhow::Result<Repeatable> {
        let output = File::options()
            .read(true)
            .append(true)
            .create(true)
            .truncate(false)
            .open(output_path)
            .with_context(|| format!("cannot open {}", output_path.display()))?;
        output.set_len(0)?;
        let mut cmd = match direct_program(&command.run, &command.env, &command.cwd) {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args);
                cmd
            }
            None => {
                let mut cmd = Command::new("/bin/sh");
                cmd.arg("-c").arg(&command.run);
                cmd
            }
        };
        cmd.env_clear()
            .envs(&command.env)
            .current_dir(&command.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::from(output.try_clone()?))
            .stderr(Stdio::from(output.try_clone()?))
            .process_group(0);
        if let Some((uid, gid)) = command.user {
            cmd.uid(uid).gid(gid);
        }
        Ok(Repeatable { command: cmd, output, timeout: command.timeout, line: command.run.clone() })
    }

    /// Runs the command once, to its exit or its timeout (an error).
    pub fn run_once(&mut self) -> anyhow::Result<TimedRun> {
        self.output.set_len(0)?;
        let (mut child, started) = crate::reaper::spawn_owned_timed(&mut self.command)
            .with_context(|| format!("cannot start `{}`", self.line))?;
        let pid = child.id();
        let waited = wait_until(&mut child, started + self.timeout);
        // The run's process group: a timeout, or what it left running.
        super::processes::kill_group(pid);
        let result = match waited {
            Ok(Some((status, exited, usage))) => {
                Ok(TimedRun { status, elapsed: exited.saturating_duration_since(started), usage })
            }
            Ok(None) => {
                let _ = child.wait();
                Err(anyhow::anyhow!("`{}` timed out after {:.0} s", self.line, self.timeout.as_secs_f64()))
            }
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(err)
            }
        };
        crate::reaper::disown(pid);
        result
    }

    /// The last run's output, its first [`KEEP_BYTES`].
    pub fn output(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.output.seek(SeekFrom::Start(0)).is_ok() {
            let _ = (&mut self.output).take(KEEP_BYTES).read_to_end(&mut out);
        }
        out
    }
}

/// What a finished run's wait gives: its status, the moment the wait returned, its rusage.
type Waited = (ExitStatus, Instant, Usage);

/// Waits for `child` until `deadline` (reaped with wait4, for its rusage), or None at the
/// deadline.
fn wait_until(child: &mut Child, deadline: Instant) -> anyhow::Result<Option<Waited>> {
    let pidfd = match pidfd_open(Pid::from_child(child), PidfdFlags::empty()) {
        Ok(fd) => fd,
        // No pidfd (an old kernel, a seccomp filter): a thread blocks in wait instead.
        Err(_) => return wait_in_thread(child, deadline),
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = Timespec::try_from(left).unwrap_or(Timespec { tv_sec: 3600, tv_nsec: 0 });
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) if left.is_zero() => return Ok(None),
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {
                let (status, usage) = usage::wait(child.id()).context("cannot wait for the command")?;
                return Ok(Some((status, Instant::now(), usage)));
            }
            Err(err) => return Err(anyhow::Error::from(err).context("cannot poll the command's pidfd")),
        }
    }
}

fn wait_in_thread(child: &mut Child, deadline: Instant) -> anyhow::Result<Option<Waited>> {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let waited = usage::wait(pid);
        let _ = tx.send(Instant::now());
        waited
    });
    let Ok(exited) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
        super::processes::kill_group(pid);
        let _ = waiter.join();
        return Ok(None);
    };
    let waited = waiter.join().map_err(|_| anyhow::anyhow!("waiter thread panicked"))?;
    let (status, usage) = waited.context("cannot wait for the command")?;
    Ok(Some((status, exited, usage)))
}

/// Shell words that are never programs of their own.
const SHELL_ONLY: &[&str] = &[
    ".", ":", "alias", "break", "case", "cd", "command", "continue", "do", "done", "elif", "else", "esac", "eval",
    "exec", "exit", "export", "fi", "for", "getopts", "hash", "if", "jobs", "local", "read", "readonly", "return",
    "set", "shift", "source", "then", "times", "trap", "type", "ulimit", "umask", "unalias", "unset", "until", "wait",
    "while",
];

/// The program (found in the environment's `PATH`, or relative to `cwd`) and arguments of a
/// command line that needs no shell: plain words only, no assignment first, no shell builtin.
pub fn direct_program(
    line: &str,
    env: &std::collections::BTreeMap<String, String>,
    cwd: &Path,
) -> Option<(PathBuf, Vec<String>)> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !line.chars().all(|c| plain(c) || c == ' ') {
        return None;
    }
    let mut words = line.split(' ').filter(|w| !w.is_empty());
    let first = words.next()?;
    if first.contains('=') || SHELL_ONLY.contains(&first) {
        return None;
    }
    let program = if first.contains('/') {
        Some(cwd.join(first))
    } else {
        env.get("PATH")?
            .split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| Path::new(d).join(first))
            .find(|p| is_executable(p))
    }?;
    is_executable(&program).then(|| (program, words.map(str::to_string).collect()))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn shell(run: &str, timeout_ms: u64) -> ShellCommand {
        ShellCommand {
            run: run.into(),
            env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
            cwd: std::env::temp_dir(),
            user: None,
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    #[test]
    fn plain_lines_are_execed_directly_and_the_rest_by_the_shell() {
        let env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let dir = std::env::temp_dir();
        let (program, args) = direct_program("true", &env, &dir).unwrap();
        assert!(program.ends_with("true") && args.is_empty(), "{program:?}");
        let (_, args) = direct_program("ls  -l /tmp", &env, &dir).unwrap();
        assert_eq!(args, ["-l", "/tmp"]);
        for line in ["echo $HOME", "a | b", "X=1 true", "cd /tmp", "no-such-program-here", "ls ~", "ls 'x'", ""] {
            assert!(direct_program(line, &env, &dir).is_none(), "{line}");
        }
    }

    #[test]
    fn runs_are_timed_with_their_output_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut probe =
            Repeatable::new(&shell("echo out; echo err >&2; sleep 0.05", 5000), &dir.path().join("out")).unwrap();
        for _ in 0..2 {
            let run = probe.run_once().unwrap();
            assert!(run.status.success());
            assert!(run.elapsed >= Duration::from_millis(50) && run.elapsed < Duration::from_secs(2), "{run:?}");
            // Emptied before each run: one run's output, not two.
            assert_eq!(String::from_utf8_lossy(&probe.output()), "out\nerr\n");
        }
        let mut failing = Repeatable::new(&shell("false", 5000), &dir.path().join("f")).unwrap();
        assert_eq!(failing.run_once().unwrap().status.code(), Some(1));
    }

    #[test]
    fn a_run_past_its_timeout_is_killed_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let mut probe = Repeatable::new(&shell("sleep 30 & sleep 30", 300), &dir.path().join("out")).unwrap();
        let started = Instant::now();
        let err = probe.run_once().unwrap_err().to_string();
        assert!(err.contains("timed out after"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
