//! A daemon spoken to over JSON lines on a Unix socket (the reference's catalog scenario): the
//! daemon runs as the user in its own process group with its output in a log file; the client
//! connects as soon as the daemon listens (retrying every 20 ms, failing at once if the daemon
//! exits), and a reader thread stamps every message with the moment its line was complete, so
//! replies that arrive out of order keep their own arrival times.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use super::command::describe;
use crate::journal::lock;

/// Raw traffic kept for the transcript.
pub const MAX_TRANSCRIPT: usize = 8_000_000;
const RETRY: Duration = Duration::from_millis(20);

#[derive(Debug, Clone)]
pub struct DaemonLaunch {
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    pub user: Option<(u32, u32)>,
    /// stdout and stderr go here.
    pub log_path: PathBuf,
}

pub struct Daemon {
    child: Child,
    /// Taken just before the daemon was spawned.
    pub started: Instant,
}

impl Daemon {
    pub fn spawn(launch: &DaemonLaunch) -> anyhow::Result<Daemon> {
        let (program, args) = launch.command.split_first().context("empty command")?;
        // In root's state folder; a link in the log's place is refused all the same.
        let log = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&launch.log_path)
            .with_context(|| format!("cannot create {}", launch.log_path.display()))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .envs(&launch.env)
            .current_dir(&launch.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .process_group(0);
        if let Some((uid, gid)) = launch.user {
            cmd.uid(uid).gid(gid);
        }
        let started = Instant::now();
        let child = crate::reaper::spawn_owned(&mut cmd).with_context(|| format!("cannot start {program}"))?;
        Ok(Daemon { child, started })
    }

    /// How the daemon ended, if it did.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(describe(status)),
            _ => None,
        }
    }

    /// SIGTERM to its group, `grace` to exit, then SIGKILL.
    pub fn stop(mut self, grace: Duration) {
        // The daemon leads its own process group.
        let group = self.child.id();
        super::processes::signal_group(group, rustix::process::Signal::TERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.exited().is_none() {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Whatever the group left running goes too.
        super::processes::signal_group(group, rustix::process::Signal::KILL);
        let _ = self.child.wait();
        crate::reaper::disown(self.child.id());
    }
}

/// One message and when its line was complete.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub at: Instant,
    pub value: Value,
}

/// Splits a byte stream into lines no longer than a bound.
#[derive(Debug)]
pub struct BoundedLines {
    partial: Vec<u8>,
    max: usize,
}

impl BoundedLines {
    pub fn new(max: usize) -> BoundedLines {
        BoundedLines { partial: Vec::new(), max }
    }

    /// Complete lines in `chunk`, or an error once a line is longer than the bound.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let mut lines = Vec::new();
        for &b in chunk {
            if b == b'\n' {
                lines.push(std::mem::take(&mut self.partial));
            } else if self.partial.len() >= self.max {
                return Err(format!("a message line exceeds {} bytes", self.max));
            } else {
                self.partial.push(b);
            }
        }
        Ok(lines)
    }
}

pub struct SocketClient {
    stream: UnixStream,
    messages: mpsc::Receiver<Result<Message, String>>,
    transcript: Arc<Mutex<Vec<u8>>>,
}

impl SocketClient {
    /// Connects once `path` accepts, trying every 20 ms until `timeout`; fails as soon as the
    /// daemon exits.
    pub fn connect(path: &Path, timeout: Duration, max_line: usize, daemon: &mut Daemon) -> anyhow::Result<Self> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(stream) => break stream,
                Err(err) => {
                    if let Some(status) = daemon.exited() {
                        bail!("the daemon exited ({status}) before it listened on {}", path.display());
                    }
                    if Instant::now() >= deadline {
                        bail!("cannot connect to {} within {:.0} s: {err}", path.display(), timeout.as_secs_f64());
                    }
                    std::thread::sleep(RETRY);
                }
            }
        };
        let mut reader = stream.try_clone().context("cannot share the socket with its reader")?;
        let transcript = Arc::new(Mutex::new(Vec::new()));
        let kept = transcript.clone();
        let (tx, messages) = mpsc::channel();
        std::thread::Builder::new().name("socket-read".into()).spawn(move || {
            let mut lines = BoundedLines::new(max_line);
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let at = Instant::now();
                {
                    let mut kept = lock(&kept);
                    if kept.len() + n <= MAX_TRANSCRIPT {
                        kept.extend_from_slice(&buf[..n]);
                    }
                }
                let parsed = match lines.feed(&buf[..n]) {
                    Ok(parsed) => parsed,
                    Err(why) => {
                        let _ = tx.send(Err(why));
                        return;
                    }
                };
                for line in parsed.into_iter().filter(|l| !l.iter().all(u8::is_ascii_whitespace)) {
                    let message =
                        serde_json::from_slice::<Value>(&line).map(|value| Message { at, value }).map_err(|_| {
                            let text = String::from_utf8_lossy(&line);
                            format!(
                                "the daemon sent a line that is not JSON: {}",
                                text.chars().take(200).collect::<String>()
                            )
                        });
                    if tx.send(message).is_err() {
                        return;
                    }
                }
            }
        })?;
        Ok(SocketClient { stream, messages, transcript })
    }

    /// Writes one message line.
    pub fn send(&mut self, message: &Value) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(message)?;
        line.push(b'\n');
        {
            let mut kept = lock(&self.transcript);
            if kept.len() + line.len() <= MAX_TRANSCRIPT {
                kept.extend_from_slice(b"> ");
                kept.extend_from_slice(&line);
            }
        }
        self.stream.write_all(&line).context("the daemon stopped reading its socket")
    }

    /// The next message, waiting until `deadline`.
    pub fn next(&mut self, deadline: Instant) -> anyhow::Result<Message> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.messages.recv_timeout(wait) {
            Ok(Ok(message)) => Ok(message),
            Ok(Err(why)) => bail!("{why}"),
            Err(mpsc::RecvTimeoutError::Timeout) => bail!("no message from the daemon within the timeout"),
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the daemon closed its socket"),
        }
    }

    /// What went over the socket (sent lines prefixed with `> `).
    pub fn transcript(&self) -> Vec<u8> {
        lock(&self.transcript).clone()
    }

    pub fn close(self) -> Vec<u8> {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.transcript()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_longer_than_the_bound_are_refused() {
        let mut lines = BoundedLines::new(8);
        assert_eq!(lines.feed(b"{\"a\":1}\n{\"b\"").unwrap(), vec![b"{\"a\":1}".to_vec()]);
        assert_eq!(lines.feed(b":2}\n").unwrap(), vec![b"{\"b\":2}".to_vec()]);
        assert_eq!(lines.feed(b"123456789\n").unwrap_err(), "a message line exceeds 8 bytes");
    }

    #[test]
    fn connects_once_the_daemon_listens_and_stamps_each_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        let launch = DaemonLaunch {
            command: vec!["/bin/sh".into(), "-c".into(), "sleep 30".into()],
            env: BTreeMap::new(),
            cwd: dir.path().into(),
            user: None,
            log_path: dir.path().join("daemon.log"),
        };
        let mut daemon = Daemon::spawn(&launch).unwrap();
        let server_path = path.clone();
        let server = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let listener = std::os::unix::net::UnixListener::bind(&server_path).unwrap();
            let (mut conn, _) = listener.accept().unwrap();
            conn.write_all(b"{\"type\":\"hello\"}\n").unwrap();
            let mut buf = [0u8; 64];
            let n = conn.read(&mut buf).unwrap();
            conn.write_all(&buf[..n]).unwrap();
        });
        let mut client = SocketClient::connect(&path, Duration::from_secs(5), 1000, &mut daemon).unwrap();
        let hello = client.next(Instant::now() + Duration::from_secs(5)).unwrap();
        assert_eq!(hello.value["type"], "hello");
        client.send(&serde_json::json!({"id": "1"})).unwrap();
        let echo = client.next(Instant::now() + Duration::from_secs(5)).unwrap();
        assert_eq!(echo.value["id"], "1");
        assert!(echo.at >= hello.at);
        server.join().unwrap();
        let transcript = String::from_utf8(client.close()).unwrap();
        assert!(transcript.contains("> {\"id\":\"1\"}"), "{transcript}");
        daemon.stop(Duration::from_secs(1));
    }

    #[test]
    fn a_daemon_that_exits_before_listening_fails_the_connection_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let launch = DaemonLaunch {
            command: vec!["/bin/sh".into(), "-c".into(), "echo no socket for you; exit 3".into()],
            env: BTreeMap::new(),
            cwd: dir.path().into(),
            user: None,
            log_path: dir.path().join("daemon.log"),
        };
        let mut daemon = Daemon::spawn(&launch).unwrap();
        let started = Instant::now();
        let err = SocketClient::connect(&dir.path().join("none.sock"), Duration::from_secs(30), 1000, &mut daemon)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("exited (exit status 3)"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(std::fs::read_to_string(dir.path().join("daemon.log")).unwrap().contains("no socket for you"));
        daemon.stop(Duration::from_secs(1));
    }
}
