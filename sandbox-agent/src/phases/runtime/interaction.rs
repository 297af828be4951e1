//! The engine's interactive steps: fixtures written (and synced) before the child starts, named
//! keys and screen waits, bounded retries, timed windows with a CPU companion (the user's live
//! process tree after minus before, never negative), and a daemon spoken to over a Unix socket
//! with requests wrapped in an envelope, replies matched by id whatever their order, and
//! pipelined sends collected later.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use regex_lite::Regex;
use sandbench_proto::plan::{Aggregate, ScenarioStep, SocketSpec};
use serde_json::{Map, Value};

use super::Engine;
use crate::context;
use crate::phases::common;
use crate::probes::keys::{self, Wait};
use crate::probes::socket::{Daemon, DaemonLaunch, Message, SocketClient};
use crate::probes::{cpu, expect};
use crate::safefs;

/// An open timed window.
pub(super) struct Timer {
    metric: Option<String>,
    cpu_metric: Option<String>,
    start: Instant,
    cpu_start: f64,
}

impl Timer {
    pub(super) fn metrics(&self) -> Vec<String> {
        self.metric.iter().chain(&self.cpu_metric).cloned().collect()
    }
}

/// A daemon, the connection to it, and the replies that came before anyone waited for them.
pub(super) struct SocketSession {
    daemon: Daemon,
    client: SocketClient,
    hello: Value,
    spec: SocketSpec,
    log_path: PathBuf,
    replies: HashMap<String, Message>,
    /// Ids sent under each tag, in order.
    tags: BTreeMap<String, Vec<String>>,
}

impl Engine<'_> {
    /// CPU seconds of the user's live processes now.
    pub(super) fn cpu_now(&self) -> f64 {
        cpu::live_seconds(Path::new("/proc"), self.user.uid)
    }

    /// `{uid}`, `{user}`, `{home}` and `{trial}` replaced.
    pub(super) fn substitute(&self, text: &str) -> String {
        text.replace("{uid}", &self.user.uid.to_string())
            .replace("{user}", &self.user.name)
            .replace("{home}", &self.user.home.display().to_string())
            .replace("{trial}", &self.trial.to_string())
    }

    /// A request with its strings substituted and `"$env"` replaced by the user's environment.
    fn fill(&self, value: &Value) -> Value {
        match value {
            Value::String(s) if s == "$env" => {
                let env = self.child_env();
                Value::Object(env.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
            }
            Value::String(s) => Value::String(self.substitute(s)),
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), self.fill(v))).collect()),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.fill(v)).collect()),
            other => other.clone(),
        }
    }

    /// Runs the scenario's fixture command as the user, then sync(2), so the fixtures' writeback
    /// does not land inside a timed window; a kept one only before the sandbox's first trial.
    pub(super) fn run_fixture(&mut self) -> anyhow::Result<()> {
        let Some(step) = &self.scenario.fixture else { return Ok(()) };
        let mut step = step.clone();
        step.run = self.substitute(&step.run);
        let name = &self.scenario.name;
        self.kept =
            super::keep::prepare(self.ctx, self.plan, self.user, self.base, name, Some(&step), self.scenario.keep)?;
        Ok(())
    }

    /// The child's environment: the user's, and `$SANDBENCH_KEEP` when a fixture is kept.
    pub(super) fn child_env(&self) -> BTreeMap<String, String> {
        let mut extra = BTreeMap::new();
        if let Some(dir) = &self.kept {
            extra.insert(super::keep::ENV.to_string(), dir.display().to_string());
        }
        common::user_env(self.user, &self.plan.env, &extra)
    }

    pub(super) fn screen_step(&mut self, step: &ScenarioStep) -> anyhow::Result<()> {
        let scenario_timeout = self.timeout();
        match step {
            ScenarioStep::Keys { keys: names, settle_s } => {
                let term = self.terminal()?;
                let before = keys::Snapshot::of(term);
                let sent = Instant::now();
                keys::press(term, names, Duration::from_secs_f64(*settle_s))?;
                self.at_action = before;
                self.last_action = sent;
            }
            ScenarioStep::WaitFor { text, metric, fresh, more, regex, count, timeout_s } => {
                let wait = match regex {
                    Some(re) => Wait::Pattern {
                        regex: Regex::new(re).map_err(|e| anyhow!("invalid regex {re:?}: {e}"))?,
                        count: count.as_ref(),
                    },
                    None => Wait::Text { text, fresh: *fresh, more: *more },
                };
                let timeout = timeout_s.map_or(scenario_timeout, Duration::from_secs_f64);
                let since = self.last_action;
                let before = self.at_action.clone();
                keys::wait(self.terminal()?, &wait, &before, timeout)?;
                if let Some(metric) = metric {
                    self.record(metric, since.elapsed().as_secs_f64(), "s");
                }
            }
            _ => bail!("not a screen step"),
        }
        Ok(())
    }

    /// Runs `steps` until they all succeed, `attempts` times at most.
    pub(super) fn retry(&mut self, attempts: u32, steps: &[ScenarioStep]) -> anyhow::Result<()> {
        for attempt in 1..=attempts.max(1) {
            match steps.iter().try_for_each(|step| self.step(step)) {
                Ok(()) => return Ok(()),
                Err(err) if attempt < attempts => {
                    self.ctx.note(&format!("attempt {attempt} of {attempts} failed: {err:#}"));
                }
                Err(err) => return Err(err.context(format!("after {attempts} attempts"))),
            }
        }
        Ok(())
    }

    pub(super) fn start_timer(
        &mut self,
        metric: Option<&str>,
        cpu_metric: Option<&str>,
        from_spawn: bool,
    ) -> anyhow::Result<()> {
        if self.timer.is_some() {
            bail!("a timer is already running");
        }
        // CPU is read before the clock starts, so reading /proc is not timed.
        let (start, cpu_start) = if from_spawn {
            self.spawned.context("no child was spawned")?
        } else {
            let cpu = self.cpu_now();
            (Instant::now(), cpu)
        };
        self.timer = Some(Timer {
            metric: metric.map(str::to_string),
            cpu_metric: cpu_metric.map(str::to_string),
            start,
            cpu_start,
        });
        Ok(())
    }

    pub(super) fn stop_timer(&mut self, at_echo: bool) -> anyhow::Result<()> {
        let now = Instant::now();
        let timer = self.timer.as_ref().context("no timer is running")?;
        let end = if at_echo {
            match self.last_echo {
                Some(echo) if echo >= timer.start => echo,
                _ => bail!("no readiness probe was echoed since the timer started"),
            }
        } else {
            now
        };
        let cpu_after = self.cpu_now();
        let timer = self.timer.take().context("no timer is running")?;
        if let Some(metric) = &timer.metric {
            self.record(metric, end.duration_since(timer.start).as_secs_f64(), "s");
        }
        if let Some(cpu_metric) = &timer.cpu_metric {
            self.record(cpu_metric, cpu::delta(timer.cpu_start, cpu_after), "s");
        }
        Ok(())
    }

    /// Spawns the daemon, connects to its socket and checks its hello; returns spawn → hello.
    pub(super) fn start_socket(
        &mut self,
        workdir: PathBuf,
        command: Vec<String>,
        cpu_before: f64,
    ) -> anyhow::Result<Duration> {
        let spec = self.scenario.socket.clone().context("a socket scenario needs its socket settings")?;
        let dir = self.ctx.state_dir.join("transcripts");
        std::fs::create_dir_all(&dir)?;
        let log_path = dir.join(format!("{}-{}.daemon.log", self.scenario.name, self.trial));
        let path = common::expand(self.user, &workdir, &self.substitute(&spec.path));
        let launch = DaemonLaunch {
            command,
            env: self.child_env(),
            cwd: workdir,
            user: Some((self.user.uid, self.user.gid)),
            log_path: log_path.clone(),
        };
        let mut daemon = Daemon::spawn(&launch)?;
        self.spawned = Some((daemon.started, cpu_before));
        let timeout = Duration::from_secs_f64(spec.connect_timeout_s);
        let connected = SocketClient::connect(&path, timeout, spec.max_line_bytes as usize, &mut daemon);
        let mut client = match connected {
            Ok(client) => client,
            Err(err) => {
                daemon.stop(Duration::from_secs(10));
                keep_log(self, &log_path);
                return Err(err);
            }
        };
        let hello = client.next(Instant::now() + self.timeout()).context("waiting for the daemon's first message");
        let session = |client, hello| SocketSession {
            daemon,
            client,
            hello,
            spec: spec.clone(),
            log_path,
            replies: HashMap::new(),
            tags: BTreeMap::new(),
        };
        let (hello, problem) = match hello {
            Ok(message) => {
                let problem = expect::check(&message.value, &spec.hello).err().map(|why| {
                    anyhow!("the daemon's first message is not the expected hello ({why}): {}", brief(&message.value))
                });
                (message, problem)
            }
            Err(err) => (Message { at: Instant::now(), value: Value::Null }, Some(err)),
        };
        let started = self.spawned.map_or(hello.at, |s| s.0);
        self.socket = Some(session(client, hello.value));
        match problem {
            Some(err) => Err(err),
            None => Ok(hello.at.saturating_duration_since(started)),
        }
    }

    fn session(&mut self) -> anyhow::Result<&mut SocketSession> {
        self.socket.as_mut().context("this step needs a socket scenario with its daemon running")
    }

    /// Sends one request (enveloped), returning its id.
    fn socket_send_one(&mut self, send: &Value, id: String) -> anyhow::Result<String> {
        let send = self.fill(send);
        let session = self.session()?;
        let mut request =
            send.as_object().cloned().ok_or_else(|| anyhow!("a request must be a JSON object, got {send}"))?;
        request.insert(session.spec.id_field.clone(), Value::String(id.clone()));
        let request = Value::Object(request);
        let message = match &session.spec.envelope {
            Some(template) => envelope(template, &request, &id, &session.hello),
            None => request,
        };
        session.client.send(&message)?;
        Ok(id)
    }

    fn next_socket_id(&mut self, tag: &str) -> String {
        self.next_id += 1;
        format!("{tag}-{}", self.next_id)
    }

    /// `repeat` round trips, each from its send to its reply; the metric is their mean or total.
    pub(super) fn socket_requests(
        &mut self,
        metric: Option<&str>,
        send: &Value,
        repeat: u32,
        aggregate: Aggregate,
        want: &Map<String, Value>,
    ) -> anyhow::Result<()> {
        let mut total = Duration::ZERO;
        for i in 0..repeat as usize {
            let send = match send {
                Value::Array(items) if !items.is_empty() => &items[i % items.len()],
                single => single,
            };
            let id = self.next_socket_id("request");
            let sent = Instant::now();
            self.socket_send_one(send, id.clone())?;
            let reply = self.reply(&id, sent + self.timeout())?;
            total += reply.at.saturating_duration_since(sent);
            check_reply(&reply.value, want, &id)?;
        }
        if let Some(metric) = metric {
            let value = match aggregate {
                Aggregate::Mean | Aggregate::Samples => total.as_secs_f64() / f64::from(repeat.max(1)),
                Aggregate::Total => total.as_secs_f64(),
            };
            self.record(metric, value, "s");
        }
        Ok(())
    }

    /// Sends without waiting; the replies are kept under `tag`.
    pub(super) fn socket_send(&mut self, send: &Value, repeat: u32, tag: &str) -> anyhow::Result<()> {
        for _ in 0..repeat {
            let id = self.next_socket_id(tag);
            self.socket_send_one(send, id.clone())?;
            self.session()?.tags.entry(tag.to_string()).or_default().push(id);
        }
        Ok(())
    }

    /// Waits for every reply sent under `tag` and checks each.
    pub(super) fn socket_collect(&mut self, tag: &str, want: &Map<String, Value>) -> anyhow::Result<()> {
        let ids = self.session()?.tags.remove(tag).with_context(|| format!("nothing was sent under tag {tag:?}"))?;
        let deadline = Instant::now() + self.timeout();
        for id in ids {
            let reply = self.reply(&id, deadline)?;
            check_reply(&reply.value, want, &id)?;
        }
        Ok(())
    }

    /// The reply to `id`: kept already, or read now (keeping other replies for later).
    fn reply(&mut self, id: &str, deadline: Instant) -> anyhow::Result<Message> {
        let session = self.session()?;
        loop {
            if let Some(message) = session.replies.remove(id) {
                return Ok(message);
            }
            let mut message =
                session.client.next(deadline).with_context(|| format!("waiting for the reply to {id}"))?;
            message.value = unwrapped(message.value, &session.spec);
            if let Some(reply_id) = reply_id(&message.value, &session.spec) {
                session.replies.insert(reply_id, message);
            }
        }
    }

    /// Stops the daemon (SIGTERM, 10 s, SIGKILL) and keeps its log and the socket's traffic.
    pub(super) fn close_socket(&mut self, name: &str) {
        let Some(session) = self.socket.take() else { return };
        let traffic = session.client.close();
        common::keep_transcript(self.ctx, &format!("{name}.socket.jsonl"), &traffic);
        session.daemon.stop(Duration::from_secs(10));
        keep_log(self, &session.log_path);
    }
}

/// Sends the daemon's log, kept within the output cap as a command's output is.
fn keep_log(engine: &Engine, path: &Path) {
    let Some(name) = path.file_name() else { return };
    let cap = crate::journal::lock(&engine.ctx.output).cap();
    match capped_log(path, cap) {
        Ok(bytes) => engine.ctx.file(&format!("transcripts/{}", name.to_string_lossy()), &bytes),
        Err(err) => tracing::warn!("cannot keep the daemon log {}: {err:#}", path.display()),
    }
}

/// The head and tail of the log at `path` within `cap` ([`context::capped_file`]), opened
/// through no link and only if it is a regular file.
fn capped_log(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let path = std::path::absolute(path)?;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"));
    };
    let (mut file, _) = safefs::open_regular(&safefs::open_dir(dir)?, Path::new(name))?;
    context::capped_file(&mut file, cap)
}

/// The message as told apart: an event carrying another message unwrapped.
fn unwrapped(message: Value, spec: &SocketSpec) -> Value {
    match &spec.unwrap_field {
        Some(field) if !spec.unwrap_when.is_empty() && expect::check(&message, &spec.unwrap_when).is_ok() => {
            message.get(field).cloned().unwrap_or(message)
        }
        _ => message,
    }
}

/// The id of a reply, when `message` is one (it has the reply fields and a string or number id).
fn reply_id(message: &Value, spec: &SocketSpec) -> Option<String> {
    expect::check(message, &spec.reply).ok()?;
    match message.get(&spec.id_field)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn check_reply(reply: &Value, want: &Map<String, Value>, id: &str) -> anyhow::Result<()> {
    expect::check(reply, want).map_err(|why| anyhow!("the reply to {id} failed its check ({why}): {}", brief(reply)))
}

/// A message cut to 400 characters, for errors.
fn brief(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(400) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// The envelope with `"$request"`, `"$id"` and `"$hello/<pointer>"` replaced.
pub fn envelope(template: &Value, request: &Value, id: &str, hello: &Value) -> Value {
    match template {
        Value::String(s) if s == "$request" => request.clone(),
        Value::String(s) if s == "$id" => Value::String(id.to_string()),
        Value::String(s) if s.starts_with("$hello/") => {
            hello.pointer(&s["$hello".len()..]).cloned().unwrap_or(Value::Null)
        }
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), envelope(v, request, id, hello))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| envelope(v, request, id, hello)).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn requests_are_wrapped_in_the_envelope() {
        let template = json!({"type": "command", "id": "$id", "protocol": "$hello/protocol", "clientId": "bench", "command": "$request"});
        let hello = json!({"type": "hello", "protocol": {"name": "demo", "version": 7}});
        let request = json!({"type": "catalog", "id": "scan-3"});
        assert_eq!(
            envelope(&template, &request, "scan-3", &hello),
            json!({"type": "command", "id": "scan-3", "protocol": {"name": "demo", "version": 7}, "clientId": "bench", "command": {"type": "catalog", "id": "scan-3"}})
        );
    }

    #[test]
    fn the_daemon_log_is_kept_within_the_cap_and_read_through_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kernel-0.daemon.log");
        let mut flood = b"started\n".to_vec();
        flood.resize(100_000, b'x');
        flood.extend_from_slice(b"\nstopped\n");
        std::fs::write(&log, &flood).unwrap();
        let kept = capped_log(&log, 4096).unwrap();
        let text = String::from_utf8_lossy(&kept);
        assert!(kept.len() <= 4096 && text.starts_with("started\n") && text.ends_with("x\nstopped\n"), "{text}");
        assert!(text.contains("bytes of output cut here (cap 4096 bytes)"), "{text}");
        assert_eq!(capped_log(&log, 1 << 20).unwrap(), flood, "under the cap, whole");
        // A link or a FIFO in the log's place is not followed, nor waited on.
        std::fs::write(dir.path().join("secret"), "secret").unwrap();
        std::fs::remove_file(&log).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), &log).unwrap();
        assert!(capped_log(&log, 4096).unwrap_err().to_string().contains("symbolic link"));
        std::fs::remove_file(&log).unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, &log, rustix::fs::Mode::from_raw_mode(0o644)).unwrap();
        assert!(capped_log(&log, 4096).unwrap_err().to_string().contains("not a regular file"));
    }

    #[test]
    fn replies_are_told_from_events_by_their_fields() {
        let spec = SocketSpec {
            path: "/tmp/x.sock".into(),
            connect_timeout_s: 1.0,
            hello: Map::new(),
            envelope: None,
            reply: json!({"type": "response"}).as_object().unwrap().clone(),
            id_field: "id".into(),
            max_line_bytes: 1000,
            unwrap_when: json!({"type": "event"}).as_object().unwrap().clone(),
            unwrap_field: Some("event".into()),
        };
        assert_eq!(reply_id(&json!({"type": "response", "id": "scan-2"}), &spec), Some("scan-2".into()));
        let wrapped = unwrapped(json!({"type": "event", "event": {"type": "response", "id": "x"}}), &spec);
        assert_eq!(reply_id(&wrapped, &spec), Some("x".into()));
        let progress = unwrapped(json!({"type": "event", "event": {"kind": "worker_ready"}}), &spec);
        assert_eq!(progress, json!({"kind": "worker_ready"}));
        assert_eq!(reply_id(&json!({"type": "response", "id": 7}), &spec), Some("7".into()));
        assert_eq!(reply_id(&json!({"type": "event", "id": "scan-2"}), &spec), None);
        assert_eq!(reply_id(&json!({"type": "response"}), &spec), None);
    }
}
