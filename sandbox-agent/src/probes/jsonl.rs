//! A long-running child spoken to over newline-delimited JSON: requests written to its stdin,
//! events read from its stdout in chunks of any size (a line may arrive a byte at a time), every
//! event an object with a string `event` field — or, when replies are matched by an id field
//! (`JsonlLaunch::replies`), any JSON object, other lines only kept in the transcript. stderr goes to a file; the raw stdout is kept
//! (capped at 8 MB) for the transcript. The child runs in its own process group.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sandbench_proto::plan::jsonl;
use serde_json::Value;

use crate::journal::lock;

pub const MAX_TRANSCRIPT: usize = 8_000_000;

/// Splits a byte stream into lines; partial lines are kept until their newline arrives.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
}

impl LineSplitter {
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        for &b in chunk {
            if b == b'\n' {
                lines.push(std::mem::take(&mut self.partial));
            } else {
                self.partial.push(b);
            }
        }
        lines
    }
}

/// One line of a child whose replies are matched by id: a JSON object, or None (a line that is
/// only transcript: a log line, a banner).
pub fn parse_reply(line: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(line);
    serde_json::from_str::<Value>(text.trim_end_matches('\r')).ok().filter(Value::is_object)
}

/// Parses one line into an event, or says why it is not one.
pub fn parse_event(line: &[u8]) -> Result<Value, String> {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches('\r');
    match serde_json::from_str::<Value>(text) {
        Ok(value) if value.get(jsonl::EVENT).is_some_and(Value::is_string) => Ok(value),
        _ => Err(format!("Invalid protocol event: {}", text.chars().take(200).collect::<String>())),
    }
}

#[derive(Debug, Clone)]
pub struct JsonlLaunch {
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    pub user: Option<(u32, u32)>,
    pub stderr_path: Option<PathBuf>,
    /// Replies are matched by an id field: any JSON object is passed on, other lines skipped.
    pub replies: bool,
}

pub struct JsonlChild {
    child: Child,
    stdin: Option<ChildStdin>,
    events: mpsc::Receiver<Result<Value, String>>,
    transcript: Arc<Mutex<Vec<u8>>>,
    pub started: Instant,
}

impl JsonlChild {
    pub fn spawn(launch: &JsonlLaunch) -> anyhow::Result<JsonlChild> {
        let (program, args) = launch.command.split_first().context("empty command")?;
        let stderr = match &launch.stderr_path {
            Some(path) => {
                Stdio::from(std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?)
            }
            None => Stdio::null(),
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .envs(&launch.env)
            .current_dir(&launch.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .process_group(0);
        if let Some((uid, gid)) = launch.user {
            cmd.uid(uid).gid(gid);
        }
        let started = Instant::now();
        let mut child = crate::reaper::spawn_owned(&mut cmd).with_context(|| format!("cannot start {program}"))?;
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().context("no stdout pipe")?;
        let transcript = Arc::new(Mutex::new(Vec::new()));
        let (tx, events) = mpsc::channel();
        let kept = transcript.clone();
        let replies = launch.replies;
        std::thread::Builder::new().name("jsonl-read".into()).spawn(move || {
            let mut splitter = LineSplitter::default();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                {
                    let mut kept = lock(&kept);
                    if kept.len() + n > MAX_TRANSCRIPT {
                        let _ = tx.send(Err("transcript exceeds 8 MB".to_string()));
                        break;
                    }
                    kept.extend_from_slice(&buf[..n]);
                }
                for line in splitter.feed(&buf[..n]) {
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let event = match replies {
                        true => match parse_reply(&line) {
                            Some(value) => Ok(value),
                            None => continue,
                        },
                        false => parse_event(&line),
                    };
                    if tx.send(event).is_err() {
                        return;
                    }
                }
            }
        })?;
        Ok(JsonlChild { child, stdin, events, transcript, started })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes one request line.
    pub fn send(&mut self, request: &Value) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("the child's input is closed")?;
        let mut line = serde_json::to_vec(request)?;
        line.push(b'\n');
        stdin.write_all(&line).and_then(|()| stdin.flush()).context("the child stopped reading its input")
    }

    /// The next event, waiting until `deadline`.
    pub fn next_event(&mut self, deadline: Instant) -> anyhow::Result<Value> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.events.recv_timeout(wait) {
            Ok(Ok(event)) => Ok(event),
            Ok(Err(why)) => bail!("{why}"),
            Err(mpsc::RecvTimeoutError::Timeout) => bail!("no event within the timeout"),
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the child exited before completing the request"),
        }
    }

    /// Asks the child to stop (`shutdown` request), gives it 5 s, then kills its group. Returns
    /// the raw output for the transcript.
    pub fn close(mut self, shutdown: Option<&Value>) -> Vec<u8> {
        if let Some(request) = shutdown {
            let _ = self.send(request);
        }
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        super::processes::kill_group(self.child.id());
        let _ = self.child.wait();
        crate::reaper::disown(self.child.id());
        std::mem::take(&mut *lock(&self.transcript))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_at_any_byte_come_out_whole() {
        let stream = b"{\"event\":\"ready\"}\n{\"event\":\"done\",\"id\":\"1\"}\npartial";
        for size in 1..stream.len() {
            let mut splitter = LineSplitter::default();
            let lines: Vec<Vec<u8>> = stream.chunks(size).flat_map(|c| splitter.feed(c)).collect();
            assert_eq!(lines.len(), 2, "chunk size {size}");
            assert_eq!(parse_event(&lines[1]).unwrap()["id"], "1");
        }
    }

    #[test]
    fn replies_are_any_object_and_other_lines_are_only_transcript() {
        assert_eq!(parse_reply(b"{\"requestId\":\"a\",\"stateGeneration\":3}\r").unwrap()["stateGeneration"], 3);
        for other in [&b"listening on stdin"[..], b"[1,2]", b"42", b"\xff\xfe", b""] {
            assert_eq!(parse_reply(other), None, "{other:?}");
        }
    }

    #[test]
    fn events_must_be_objects_with_an_event_field() {
        assert!(parse_event(b"{\"event\":\"x\"}").is_ok());
        assert!(parse_event(b"{\"event\":1}").unwrap_err().starts_with("Invalid protocol event"));
        assert!(parse_event(b"[1]").is_err());
        assert!(parse_event(b"not json").is_err());
    }
}
