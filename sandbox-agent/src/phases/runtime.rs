//! runtime: scenarios that drive a long-running child over JSON lines, plain commands repeated
//! for a mean or total, and scripts whose `RESULT {json}` lines become metrics. When a step
//! fails, its metric gets the error and the scenario's remaining metrics say why they are
//! missing; other scenarios, commands and scripts still run.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use sandbench_proto::plan::{AgentPlan, Aggregate, Channel, RepeatedCommand, Scenario, ScenarioStep, Script, jsonl};
use sandbench_proto::v1::LogStream;
use serde_json::{Map, Value};

use super::common::{self, AgentState};
use crate::commands::PhaseContext;
use crate::probes::command::{self, ShellCommand};
use crate::probes::jsonl::{JsonlChild, JsonlLaunch};
use crate::probes::terminal::{Launch, Terminal};
use crate::probes::{memory, processes, readiness, script};
use crate::users::User;

pub fn run(ctx: &PhaseContext, plan: &AgentPlan, trial: u32) -> anyhow::Result<()> {
    let state = AgentState::load(&ctx.state_dir)?;
    let user =
        state.measure_user().map_err(|_| anyhow!("The first installation must succeed before runtime measurements"))?;
    common::hygiene(&user)?;
    let mut failures = Vec::new();
    for scenario in &plan.runtime.scenarios {
        if ctx.canceled() {
            break;
        }
        let mut engine = Engine {
            ctx,
            plan,
            user: &user,
            trial,
            scenario,
            child: None,
            term: None,
            next_id: 0,
            last_action: Instant::now(),
            cpu_at_start: processes::cpu_seconds(Path::new("/proc"), user.uid),
        };
        if let Err(err) = engine.run() {
            failures.push(format!("{}: {err:#}", scenario.name));
        }
        engine.close(&format!("{}-{trial}", scenario.name));
        common::hygiene(&user)?;
    }
    for repeated in &plan.runtime.commands {
        if let Err(err) = repeat_command(ctx, plan, &user, trial, repeated) {
            ctx.error(&repeated.metric, trial, &err, "s");
            failures.push(format!("{}: {err:#}", repeated.metric));
        }
    }
    for script in &plan.runtime.scripts {
        if let Err(err) = run_script(ctx, plan, &user, trial, script) {
            failures.push(format!("{}: {err:#}", script.name));
        }
    }
    common::hygiene(&user)?;
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

fn repeat_command(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    user: &User,
    trial: u32,
    repeated: &RepeatedCommand,
) -> anyhow::Result<()> {
    let workdir =
        repeated.step.cwd.as_deref().map(|c| common::expand(user, &user.home, c)).unwrap_or_else(|| user.home.clone());
    let mut total = Duration::ZERO;
    for _ in 0..repeated.repeat {
        let done = common::run_step(ctx, &repeated.step, user, &workdir, &plan.env)?;
        total += done.elapsed;
        done.success(&format!("`{}`", repeated.step.run))?;
    }
    let value = match repeated.aggregate {
        Aggregate::Mean => total.as_secs_f64() / f64::from(repeated.repeat.max(1)),
        Aggregate::Total => total.as_secs_f64(),
    };
    ctx.value(&repeated.metric, trial, value, "s");
    Ok(())
}

fn run_script(ctx: &PhaseContext, plan: &AgentPlan, user: &User, trial: u32, script: &Script) -> anyhow::Result<()> {
    let step = &script.step;
    let shell = ShellCommand {
        run: step.run.clone(),
        env: common::user_env(user, &plan.env, &step.env),
        cwd: step.cwd.as_deref().map(|c| common::expand(user, &user.home, c)).unwrap_or_else(|| user.home.clone()),
        user: Some((user.uid, user.gid)),
        timeout: Duration::from_secs_f64(step.timeout_s),
    };
    let mut pending = Vec::new();
    let mut reported: Vec<(String, f64)> = Vec::new();
    let mut invalid: Option<String> = None;
    let mut stdout_partial = Vec::new();
    let result = command::run(&shell, &mut |stream, chunk| {
        ctx.log(stream, chunk);
        if stream != LogStream::Stdout {
            return;
        }
        stdout_partial.extend_from_slice(chunk);
        while let Some(end) = stdout_partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = stdout_partial.drain(..=end).collect();
            pending.push(line);
        }
        for line in pending.drain(..) {
            match script::parse_line(&String::from_utf8_lossy(&line)) {
                None => {}
                Some(Ok(metrics)) => reported.extend(metrics),
                Some(Err(why)) => {
                    invalid.get_or_insert(why);
                }
            }
        }
    });
    let failure = match result.and_then(|done| done.success(&format!("script {}", script.name))) {
        Err(err) => Some(err),
        Ok(_) => invalid.map(|why| anyhow!("invalid RESULT line: {why}")),
    };
    for (name, value) in &reported {
        if !script.metrics.contains(name) {
            let err = anyhow!("script {} reported {name}, which the spec does not declare", script.name);
            return Err(err);
        }
        if failure.is_none() {
            ctx.value(name, trial, *value, "");
        }
    }
    for metric in &script.metrics {
        if let Some(err) = &failure {
            ctx.error(metric, trial, err, "");
        } else if !reported.iter().any(|(n, _)| n == metric) {
            ctx.error(metric, trial, &anyhow!("script {} did not report it", script.name), "");
        }
    }
    match failure {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// Runs one scenario's steps against its JSON-lines child.
struct Engine<'a> {
    ctx: &'a PhaseContext,
    plan: &'a AgentPlan,
    user: &'a User,
    trial: u32,
    scenario: &'a Scenario,
    child: Option<JsonlChild>,
    term: Option<Terminal>,
    next_id: u64,
    /// The last keystrokes sent (the start of a `wait_for`).
    last_action: Instant,
    cpu_at_start: f64,
}

impl Engine<'_> {
    fn run(&mut self) -> anyhow::Result<()> {
        let metrics = self.scenario.metrics();
        let mut current = self.scenario.start_metric.clone();
        let result = (|| {
            let started = self.start(0)?;
            if let Some(metric) = &self.scenario.start_metric {
                self.ctx.value(metric, self.trial, started.as_secs_f64(), "s");
            }
            for step in &self.scenario.steps {
                current = step.metric().map(str::to_string);
                self.step(step)?;
            }
            anyhow::Ok(())
        })();
        if let Err(err) = &result {
            // The failing metric gets the error; the ones after it say why they are missing.
            let failed_at = current.as_deref().and_then(|m| metrics.iter().position(|x| x == m));
            if let Some(metric) = &current {
                self.ctx.error(metric, self.trial, err, "");
            }
            let skip_from = failed_at.map_or(0, |i| i + 1);
            for metric in metrics.iter().skip(skip_from) {
                if Some(metric.as_str()) != current.as_deref() {
                    let why = anyhow!("not measured: an earlier step of scenario {} failed", self.scenario.name);
                    self.ctx.error(metric, self.trial, &why, "");
                }
            }
        }
        result
    }

    /// Stops the child and keeps its transcript (`<name>.jsonl`, or `.raw`/`.txt` of a terminal).
    fn close(&mut self, name: &str) {
        if let Some(child) = self.child.take() {
            let transcript = child.close(self.scenario.shutdown.as_ref());
            common::keep_transcript(self.ctx, &format!("{name}.jsonl"), &transcript);
        }
        if let Some(term) = self.term.take() {
            let dir = self.ctx.state_dir.join("transcripts");
            let _ = std::fs::create_dir_all(&dir);
            let prefix = dir.join(name);
            if term.close(Some(&prefix)).is_ok() {
                for ext in ["raw", "txt"] {
                    if let Ok(bytes) = std::fs::read(prefix.with_extension(ext)) {
                        self.ctx.file(&format!("transcripts/{name}.{ext}"), &bytes);
                    }
                }
            }
        }
    }

    fn terminal(&mut self) -> anyhow::Result<&mut Terminal> {
        self.term.as_mut().context("this step needs a terminal scenario (channel = \"terminal\")")
    }

    /// The scenario's folder and command line, `~/` meaning the user's home.
    fn command(&self) -> (std::path::PathBuf, Vec<String>) {
        let workdir = self
            .scenario
            .cwd
            .as_deref()
            .map(|c| common::expand(self.user, &self.user.home, c))
            .unwrap_or_else(|| self.user.home.clone());
        let command = self
            .scenario
            .command
            .iter()
            .map(|a| {
                if a.starts_with("~/") {
                    common::expand(self.user, &workdir, a).display().to_string()
                } else {
                    a.clone()
                }
            })
            .collect();
        (workdir, command)
    }

    /// Starts the child; over JSON lines, waits for its ready event and returns spawn → ready.
    fn start(&mut self, generation: u32) -> anyhow::Result<Duration> {
        let (workdir, command) = self.command();
        if self.scenario.channel == Channel::Terminal {
            let launch = Launch {
                program: command[0].clone().into(),
                args: command[1..].to_vec(),
                env: common::user_env(self.user, &self.plan.env, &Default::default()),
                cwd: workdir,
                user: Some((self.user.uid, self.user.gid)),
            };
            self.term = Some(Terminal::spawn(&launch)?);
            self.last_action = Instant::now();
            return Ok(Duration::ZERO);
        }
        let stderr_dir = self.ctx.state_dir.join("transcripts");
        std::fs::create_dir_all(&stderr_dir)?;
        let launch = JsonlLaunch {
            command,
            env: common::user_env(self.user, &self.plan.env, &Default::default()),
            cwd: workdir,
            user: Some((self.user.uid, self.user.gid)),
            stderr_path: Some(stderr_dir.join(format!("{}-{}-{generation}.stderr", self.scenario.name, self.trial))),
        };
        let mut child = JsonlChild::spawn(&launch)?;
        let deadline = Instant::now() + self.timeout().max(Duration::from_secs(30));
        let first = child.next_event(deadline).context("waiting for the ready event")?;
        let ready_at = Instant::now();
        if first[jsonl::EVENT] != self.scenario.ready_event.as_str() {
            bail!("Expected a {:?} event first, got {first}", self.scenario.ready_event);
        }
        let started = ready_at.saturating_duration_since(child.started);
        self.child = Some(child);
        Ok(started)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.scenario.timeout_s)
    }

    fn child(&mut self) -> anyhow::Result<&mut JsonlChild> {
        self.child.as_mut().context("this step needs a JSON-lines scenario with its child running")
    }

    fn step(&mut self, step: &ScenarioStep) -> anyhow::Result<()> {
        match step {
            ScenarioStep::Request { metric, send, repeat, aggregate, expect, output_bytes } => {
                let mut total = Duration::ZERO;
                for i in 0..*repeat as usize {
                    let send = match send {
                        Value::Array(items) if !items.is_empty() => &items[i % items.len()],
                        single => single,
                    };
                    let (took, output) = self.request(send, expect)?;
                    if let Some(bytes) = output_bytes
                        && output.len() as u64 != *bytes
                    {
                        bail!("output was truncated or missing: {} bytes instead of {bytes}", output.len());
                    }
                    total += took;
                }
                if let Some(metric) = metric {
                    let value = match aggregate {
                        Aggregate::Mean => total.as_secs_f64() / f64::from((*repeat).max(1)),
                        Aggregate::Total => total.as_secs_f64(),
                    };
                    self.ctx.value(metric, self.trial, value, "s");
                }
            }
            ScenarioStep::Interrupt { metric, send, marker, interrupt, expect } => {
                let id = self.send_request(send)?;
                let deadline = Instant::now() + self.timeout();
                loop {
                    let event = self.child()?.next_event(deadline).context("waiting for the interrupt marker")?;
                    if event[jsonl::ID] != id.as_str() {
                        continue;
                    }
                    if event[jsonl::EVENT] == jsonl::DONE {
                        bail!("the request finished before it could be interrupted: {event}");
                    }
                    if event.get(jsonl::TEXT).and_then(Value::as_str).is_some_and(|t| t.contains(marker.as_str())) {
                        break;
                    }
                }
                let mut request = object(interrupt)?;
                request.insert(jsonl::ID.into(), Value::String(id.clone()));
                let started = Instant::now();
                self.child()?.send(&Value::Object(request))?;
                let (done, _) = self.wait_done(&id, started + self.timeout())?;
                let took = started.elapsed();
                check_expect(&done, expect).context("the interrupt was not acknowledged")?;
                self.ctx.value(metric, self.trial, took.as_secs_f64(), "s");
            }
            ScenarioStep::Memory { metric } => {
                let sample = memory::sample(Path::new("/proc"), self.user.uid);
                if sample.processes.is_empty() {
                    bail!("No owned processes found for memory measurement");
                }
                self.ctx.value(metric, self.trial, sample.rss_bytes as f64, "bytes");
            }
            ScenarioStep::Restart { metric } => {
                if let Some(child) = self.child.take() {
                    let transcript = child.close(self.scenario.shutdown.as_ref());
                    common::keep_transcript(
                        self.ctx,
                        &format!("{}-{}-before-restart.jsonl", self.scenario.name, self.trial),
                        &transcript,
                    );
                }
                let started = self.start(1)?;
                if let Some(metric) = metric {
                    self.ctx.value(metric, self.trial, started.as_secs_f64(), "s");
                }
            }
            ScenarioStep::Settle { seconds } => match self.term.as_mut() {
                // A terminal keeps being read, so the program never blocks on its output.
                Some(term) => term.settle(Duration::from_secs_f64(*seconds))?,
                None => std::thread::sleep(Duration::from_secs_f64(*seconds)),
            },
            ScenarioStep::Cpu { metric } => {
                let used = processes::cpu_seconds(Path::new("/proc"), self.user.uid) - self.cpu_at_start;
                self.ctx.value(metric, self.trial, used.max(0.0), "s");
            }
            ScenarioStep::Ready { metric } => {
                let timeout = self.timeout();
                let term = self.terminal()?;
                let took = readiness::ready(term, timeout)?;
                if let Some(metric) = metric {
                    self.ctx.value(metric, self.trial, took.as_secs_f64(), "s");
                }
            }
            ScenarioStep::Type { text } => {
                self.terminal()?.send(text.as_bytes())?;
                self.last_action = Instant::now();
            }
            ScenarioStep::WaitFor { text, metric } => {
                let deadline = Instant::now() + self.timeout();
                let since = self.last_action;
                loop {
                    let term = self.terminal()?;
                    // Never a half-drawn frame: only while synchronized output is off.
                    if !term.sync_output() && term.screen_text().contains(text.as_str()) {
                        break;
                    }
                    if Instant::now() >= deadline {
                        bail!("Timed out waiting for {text:?} on the screen");
                    }
                    term.pump(Duration::from_millis(5))?;
                }
                if let Some(metric) = metric {
                    self.ctx.value(metric, self.trial, since.elapsed().as_secs_f64(), "s");
                }
            }
        }
        Ok(())
    }

    fn send_request(&mut self, send: &Value) -> anyhow::Result<String> {
        self.next_id += 1;
        let id = self.next_id.to_string();
        let mut request = object(send)?;
        request.insert(jsonl::ID.into(), Value::String(id.clone()));
        self.child()?.send(&Value::Object(request))?;
        Ok(id)
    }

    /// Sends a request and waits for its done event; returns the time and the text output.
    fn request(&mut self, send: &Value, expect: &Map<String, Value>) -> anyhow::Result<(Duration, String)> {
        let started = Instant::now();
        let id = self.send_request(send)?;
        let (done, output) = self.wait_done(&id, started + self.timeout())?;
        let took = started.elapsed();
        check_expect(&done, expect).context("request failed")?;
        Ok((took, output))
    }

    fn wait_done(&mut self, id: &str, deadline: Instant) -> anyhow::Result<(Value, String)> {
        let mut output = String::new();
        let mut recent = Vec::new();
        loop {
            let event = self.child()?.next_event(deadline).with_context(|| format!("waiting for request {id}"))?;
            if event[jsonl::ID] != id {
                continue;
            }
            recent.push(event.to_string());
            if event[jsonl::EVENT] == jsonl::DONE {
                let mut done = event;
                if let Some(map) = done.as_object_mut() {
                    map.insert("_events".into(), Value::String(recent.join(" ")));
                }
                return Ok((done, output));
            }
            if let Some(text) = event.get(jsonl::TEXT).and_then(Value::as_str) {
                output.push_str(text);
            }
        }
    }
}

fn object(value: &Value) -> anyhow::Result<Map<String, Value>> {
    value.as_object().cloned().ok_or_else(|| anyhow!("a request must be a JSON object, got {value}"))
}

/// Every field of `expect` must be in `done` with the same value.
fn check_expect(done: &Value, expect: &Map<String, Value>) -> anyhow::Result<()> {
    for (key, want) in expect {
        if done.get(key) != Some(want) {
            let events = done.get("_events").and_then(Value::as_str).unwrap_or_default();
            let tail: String = events.chars().rev().take(400).collect::<Vec<_>>().into_iter().rev().collect();
            bail!("expected {key} = {want}, got {}: {tail}", done.get(key).unwrap_or(&Value::Null));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_are_checked_field_by_field() {
        let done = serde_json::json!({"event": "done", "id": "3", "status": "ok"});
        let ok: Map<String, Value> = serde_json::from_str(r#"{"status": "ok"}"#).unwrap();
        let bad: Map<String, Value> = serde_json::from_str(r#"{"status": "error"}"#).unwrap();
        assert!(check_expect(&done, &ok).is_ok());
        let err = check_expect(&done, &bad).unwrap_err().to_string();
        assert!(err.starts_with("expected status = \"error\", got \"ok\""), "{err}");
    }
}
