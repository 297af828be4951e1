//! runtime: scenarios that drive a long-running child over JSON lines, a terminal or a socket,
//! plain commands repeated for a mean or total, scripts whose `RESULT {json}` lines become
//! metrics, and benchmark frameworks whose results become metrics ([`bench`]). A command's metric gets the companions of its runs' process trees (`<metric>.cpu`,
//! …, mean or total as its time), a script its own (`script.<name>.cpu`, …). The ui and transport phases run sections of the same kind ([`run_section`]). When a
//! step fails, its metric (and an open timer's) gets the error and the scenario's remaining
//! metrics say why they are missing; other scenarios, commands and scripts still run.

mod bench;
mod interaction;
mod keep;
mod replies;
mod scripts;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use sandbench_proto::plan::{AgentPlan, Aggregate, Channel, RepeatedCommand, Runtime, Scenario, ScenarioStep, jsonl};
use sandbench_proto::v1::LogStream;
use serde_json::{Map, Value};

use super::common::{self, AgentState};
use crate::context::PhaseContext;
use crate::probes::command::{self, ShellCommand};
use crate::probes::jsonl::{JsonlChild, JsonlLaunch};
use crate::probes::terminal::{Launch, Terminal};
use crate::probes::timed::{Repeatable, TimedRun};
use crate::probes::usage::Usage;
use crate::probes::{keys, memory, processes, readiness};
use crate::users::User;

pub fn run(ctx: &PhaseContext, plan: &AgentPlan, trial: u32) -> anyhow::Result<()> {
    let state = AgentState::load(&ctx.state_dir)?;
    let user =
        state.measure_user().map_err(|_| anyhow!("The first installation must succeed before runtime measurements"))?;
    run_section(ctx, plan, &plan.runtime, &user, &user.home, trial)
}

/// Runs a section's scenarios, commands and scripts as `user`, relative paths from `base`, with
/// every process of the user stopped before, between scenarios and after.
pub fn run_section(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    section: &Runtime,
    user: &User,
    base: &Path,
    trial: u32,
) -> anyhow::Result<()> {
    common::hygiene(user)?;
    // Samples are held until the hygiene after their window found the user's table empty.
    ctx.hold();
    let mut failures = Vec::new();
    for scenario in &section.scenarios {
        if ctx.canceled() {
            break;
        }
        let mut engine = Engine::new(ctx, plan, user, base, trial, scenario);
        if let Err(err) = engine.run() {
            failures.push(format!("{}: {err:#}", scenario.name));
        }
        engine.close(&format!("{}-{trial}", scenario.name));
        checked(ctx, user)?;
        ctx.hold();
        if !ctx.yield_turn() {
            break;
        }
    }
    for repeated in &section.commands {
        if let Err(err) = repeat_command(ctx, plan, user, base, trial, repeated) {
            failures.push(format!("{}: {err:#}", repeated.metric));
        }
    }
    for script in &section.scripts {
        if let Err(err) = scripts::run_script(ctx, plan, user, base, trial, script) {
            failures.push(format!("{}: {err:#}", script.name));
        }
        if !ctx.yield_turn() {
            break;
        }
    }
    for bench in &section.benches {
        if let Err(err) = bench::run_bench(ctx, plan, user, base, trial, bench) {
            failures.push(format!("bench {}: {err:#}", bench.name));
        }
        if !ctx.yield_turn() {
            break;
        }
    }
    checked(ctx, user)?;
    if super::lens::asks(section) && ctx.untimed_turn() {
        super::lens::section(ctx, plan, section, user, base, trial);
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

/// Stops the user's processes and sends the held samples — or, when some survived, an error
/// on each of their metrics instead.
fn checked(ctx: &PhaseContext, user: &User) -> anyhow::Result<()> {
    let cleanup = common::hygiene(user);
    ctx.release(cleanup.as_ref().err());
    cleanup
}

/// A repeated command, as `user` in its folder (relative to `base`): see [`run_repeated`].
fn repeat_command(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    user: &User,
    base: &Path,
    trial: u32,
    repeated: &RepeatedCommand,
) -> anyhow::Result<()> {
    let shell = |step: &sandbench_proto::plan::Step| ShellCommand {
        run: step.run.clone(),
        env: common::user_env(user, &plan.env, &step.env),
        cwd: step.cwd.as_deref().map(|c| common::expand(user, base, c)).unwrap_or_else(|| base.to_path_buf()),
        user: Some((user.uid, user.gid)),
        timeout: Duration::from_secs_f64(step.timeout_s),
    };
    run_repeated(ctx, trial, repeated, &shell(&repeated.step), repeated.prepare.as_ref().map(shell).as_ref())
}

/// `warmup` runs of `timed` not recorded, then `repeat` timed ones, each run after the untimed
/// `prepare`. Each timed run is a sample of its own (`Samples`, sent as it is taken, numbered
/// from 0) or adds to the trial's one value (mean, total). The first failed run ends the
/// command and its metric gets the error (at that run's sample).
fn run_repeated(
    ctx: &PhaseContext,
    trial: u32,
    repeated: &RepeatedCommand,
    timed: &ShellCommand,
    prepare: Option<&ShellCommand>,
) -> anyhow::Result<()> {
    let samples = repeated.aggregate == Aggregate::Samples;
    let mut taken = 0;
    let mut used = Usage::default();
    let result = timed_runs(ctx, timed, prepare, repeated.warmup, repeated.repeat, &mut |run| {
        if samples {
            ctx.sample(&repeated.metric, trial, taken, run.elapsed.as_secs_f64(), "s");
            for (metric, value, unit) in run.usage.companions(&repeated.metric) {
                ctx.sample(&metric, trial, taken, value, unit);
            }
        }
        used.add(&run.usage);
        taken += 1;
    });
    let times = match result {
        Ok(times) => times,
        Err(err) => {
            ctx.sample_error(&repeated.metric, trial, if samples { taken } else { 0 }, &err, "s");
            return Err(err);
        }
    };
    let total: Duration = times.iter().sum();
    let runs = u32::try_from(times.len()).unwrap_or(u32::MAX);
    let (value, used) = match repeated.aggregate {
        Aggregate::Samples => return Ok(()),
        Aggregate::Mean => (total.as_secs_f64() / f64::from(runs.max(1)), used.mean_of(runs)),
        Aggregate::Total => (total.as_secs_f64(), used),
    };
    ctx.value(&repeated.metric, trial, value, "s");
    common::record_usage(ctx, &repeated.metric, trial, &used);
    Ok(())
}

/// Runs `warmup` then `repeat` times `timed` (each after `prepare`), handing each timed run
/// (its time and what its process tree cost) to `took` as it is taken; returns the times.
fn timed_runs(
    ctx: &PhaseContext,
    timed: &ShellCommand,
    prepare: Option<&ShellCommand>,
    warmup: u32,
    repeat: u32,
    took: &mut dyn FnMut(&TimedRun),
) -> anyhow::Result<Vec<Duration>> {
    let dir = ctx.state_dir.join("transcripts");
    std::fs::create_dir_all(&dir)?;
    let mut probe = Repeatable::new(timed, &dir.join("repeated-command.out"))?;
    let mut times = Vec::with_capacity(repeat as usize);
    for run in 0..warmup + repeat {
        if ctx.canceled() {
            bail!("canceled");
        }
        if let Some(prepare) = prepare {
            command::run(prepare, &mut |stream, chunk| ctx.log(stream, chunk))?
                .success(&format!("prepare `{}`", prepare.run))?;
        }
        let done = probe.run_once()?;
        let output = probe.output();
        if !output.is_empty() {
            ctx.log(LogStream::Stdout, &output);
        }
        let disk_full = command::disk_full_in(&output);
        command::Finished { status: done.status, output, elapsed: done.elapsed, usage: done.usage, disk_full }
            .success(&format!("`{}`", timed.run))?;
        if run >= warmup {
            took(&done);
            times.push(done.elapsed);
            // A stepwise command's segment ends with each timed run (the warmup goes with the
            // first, so it stays this side's own).
            if !ctx.yield_turn() {
                bail!("canceled");
            }
        }
    }
    Ok(times)
}

/// Runs one scenario's steps against its child (JSON lines, a terminal or a socket daemon).
struct Engine<'a> {
    ctx: &'a PhaseContext,
    plan: &'a AgentPlan,
    user: &'a User,
    /// Relative paths start here (the user's home, or the source for transport).
    base: &'a Path,
    trial: u32,
    scenario: &'a Scenario,
    child: Option<JsonlChild>,
    term: Option<Terminal>,
    socket: Option<interaction::SocketSession>,
    next_id: u64,
    /// The last keystrokes sent (the start of a `wait_for`), and the screen just before them.
    last_action: Instant,
    at_action: keys::Snapshot,
    cpu_at_start: f64,
    /// When the child was spawned, and the CPU of the user's live processes just before.
    spawned: Option<(Instant, f64)>,
    timer: Option<interaction::Timer>,
    /// When the last readiness probe was first rendered.
    last_echo: Option<Instant>,
    recorded: BTreeSet<String>,
    /// The last reply received (for `{{prev.…}}` templates), and its id.
    prev_reply: Option<(Value, String)>,
    /// The scenario's kept fixture folder (`$SANDBENCH_KEEP`).
    kept: Option<std::path::PathBuf>,
}

impl<'a> Engine<'a> {
    fn new(
        ctx: &'a PhaseContext,
        plan: &'a AgentPlan,
        user: &'a User,
        base: &'a Path,
        trial: u32,
        scenario: &'a Scenario,
    ) -> Engine<'a> {
        Engine {
            ctx,
            plan,
            user,
            base,
            trial,
            scenario,
            child: None,
            term: None,
            socket: None,
            next_id: 0,
            last_action: Instant::now(),
            at_action: keys::Snapshot::default(),
            cpu_at_start: processes::cpu_seconds(Path::new("/proc"), user.uid),
            spawned: None,
            timer: None,
            last_echo: None,
            recorded: BTreeSet::new(),
            prev_reply: None,
            kept: None,
        }
    }
}

impl Engine<'_> {
    fn run(&mut self) -> anyhow::Result<()> {
        let metrics = self.scenario.metrics();
        let mut current: Vec<String> = self.scenario.start_metric.iter().cloned().collect();
        let result = (|| {
            let started = self.start(0)?;
            if let Some(metric) = &self.scenario.start_metric {
                self.record(metric, started.as_secs_f64(), "s");
            }
            for step in &self.scenario.steps {
                current = step.metrics().into_iter().map(str::to_string).collect();
                self.step(step)?;
            }
            anyhow::Ok(())
        })();
        if let Err(err) = &result {
            // The failing step's metrics and the open timer's get the error; the ones not
            // measured yet say why they are missing.
            if let Some(timer) = &self.timer {
                current.extend(timer.metrics());
            }
            for metric in metrics.iter().filter(|m| !self.recorded.contains(*m)) {
                if current.contains(metric) {
                    self.ctx.error(metric, self.trial, err, "");
                } else {
                    let why = anyhow!("not measured: an earlier step of scenario {} failed", self.scenario.name);
                    self.ctx.error(metric, self.trial, &why, "");
                }
            }
        }
        result
    }

    /// Sends a value and remembers that the metric has one.
    fn record(&mut self, metric: &str, value: f64, unit: &str) {
        self.recorded.insert(metric.to_string());
        self.ctx.value(metric, self.trial, value, unit);
    }

    /// Stops the child and keeps its transcript (`<name>.jsonl`, or `.raw`/`.txt` of a terminal).
    fn close(&mut self, name: &str) {
        self.close_socket(name);
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

    /// The scenario's folder and command line, `~/` meaning the user's home and `{uid}`,
    /// `{trial}` the user's id and the trial.
    fn command(&self) -> (std::path::PathBuf, Vec<String>) {
        let workdir = self
            .scenario
            .cwd
            .as_deref()
            .map(|c| common::expand(self.user, self.base, c))
            .unwrap_or_else(|| self.base.to_path_buf());
        let command =
            self.scenario
                .command
                .iter()
                .map(|a| self.substitute(a))
                .map(|a| {
                    if a.starts_with("~/") { common::expand(self.user, &workdir, &a).display().to_string() } else { a }
                })
                .collect();
        (workdir, command)
    }

    /// Starts the child (after the fixtures, the first time); over JSON lines, waits for its
    /// ready event and returns spawn → ready, over a socket spawn → hello.
    fn start(&mut self, generation: u32) -> anyhow::Result<Duration> {
        if generation == 0 {
            self.run_fixture()?;
        }
        let (workdir, command) = self.command();
        let cpu_before = self.cpu_now();
        if self.scenario.channel == Channel::Socket {
            return self.start_socket(workdir, command, cpu_before);
        }
        if self.scenario.channel == Channel::Terminal {
            let launch = Launch {
                program: command[0].clone().into(),
                args: command[1..].to_vec(),
                env: self.child_env(),
                cwd: workdir,
                user: Some((self.user.uid, self.user.gid)),
            };
            let term = Terminal::spawn(&launch)?;
            self.spawned = Some((term.started, cpu_before));
            self.term = Some(term);
            self.last_action = Instant::now();
            return Ok(Duration::ZERO);
        }
        let stderr_dir = self.ctx.state_dir.join("transcripts");
        std::fs::create_dir_all(&stderr_dir)?;
        let launch = JsonlLaunch {
            command,
            env: self.child_env(),
            cwd: workdir,
            user: Some((self.user.uid, self.user.gid)),
            stderr_path: Some(stderr_dir.join(format!("{}-{}-{generation}.stderr", self.scenario.name, self.trial))),
            replies: self.scenario.id_field.is_some(),
        };
        let mut child = JsonlChild::spawn(&launch)?;
        self.spawned = Some((child.started, cpu_before));
        let Some(ready_event) = self.scenario.ready_event.clone() else {
            // Replies matched by id and no ready event: started when spawned.
            self.child = Some(child);
            return Ok(Duration::ZERO);
        };
        let deadline = Instant::now() + self.timeout().max(Duration::from_secs(30));
        let first = child.next_event(deadline).context("waiting for the ready event")?;
        let ready_at = Instant::now();
        if first.get(jsonl::EVENT).and_then(Value::as_str) != Some(ready_event.as_str()) {
            bail!("Expected a {ready_event:?} event first, got {first}");
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
            ScenarioStep::Request { metric, send, repeat, aggregate, expect, .. } if self.socket.is_some() => {
                self.socket_requests(metric.as_deref(), send, *repeat, *aggregate, expect)?;
            }
            ScenarioStep::Request { metric, send, repeat, aggregate, expect, output_bytes, distribution } => {
                let record = match distribution {
                    Some(_) => replies::Record::Samples,
                    None => replies::Record::Aggregate(*aggregate),
                };
                self.requests(metric.as_deref(), send, *repeat, record, expect, *output_bytes)?;
            }
            ScenarioStep::Batch { metric, send, count, size, expect, .. } => {
                self.batch(metric, send, *count, *size, expect)?;
            }
            ScenarioStep::Size { metric, path } => self.size(metric, path)?,
            ScenarioStep::Interrupt { metric, send, marker, interrupt, expect } => {
                self.interrupt(metric, send, marker, interrupt, expect)?;
            }
            ScenarioStep::Memory { metric } => self.memory(metric)?,
            ScenarioStep::Restart { metric } => self.restart(metric.as_deref())?,
            ScenarioStep::Settle { seconds } => match self.term.as_mut() {
                // A terminal keeps being read, so the program never blocks on its output.
                Some(term) => term.settle(Duration::from_secs_f64(*seconds))?,
                None => std::thread::sleep(Duration::from_secs_f64(*seconds)),
            },
            ScenarioStep::Cpu { metric } => {
                let used = processes::cpu_seconds(Path::new("/proc"), self.user.uid) - self.cpu_at_start;
                self.record(metric, used.max(0.0), "s");
            }
            ScenarioStep::Ready { metric } => self.ready(metric.as_deref())?,
            ScenarioStep::Type { text } => self.type_text(text)?,
            ScenarioStep::WaitFor { .. } | ScenarioStep::Keys { .. } => self.screen_step(step)?,
            ScenarioStep::Retry { attempts, steps } => self.retry(*attempts, steps)?,
            ScenarioStep::StartTimer { metric, cpu_metric, from_spawn } => {
                self.start_timer(metric.as_deref(), cpu_metric.as_deref(), *from_spawn)?;
            }
            ScenarioStep::StopTimer { at_echo } => self.stop_timer(*at_echo)?,
            ScenarioStep::Send { send, repeat, tag } => self.socket_send(send, *repeat, tag)?,
            ScenarioStep::Collect { tag, expect } => self.socket_collect(tag, expect)?,
        }
        Ok(())
    }

    /// JSON lines: sends `send`, waits for output of it containing `marker`, then times
    /// `interrupt` (same id) until its done event.
    fn interrupt(
        &mut self,
        metric: &str,
        send: &Value,
        marker: &str,
        interrupt: &Value,
        expect: &Map<String, Value>,
    ) -> anyhow::Result<()> {
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
            if event.get(jsonl::TEXT).and_then(Value::as_str).is_some_and(|t| t.contains(marker)) {
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
        self.record(metric, took.as_secs_f64(), "s");
        Ok(())
    }

    /// The summed RSS of the user's processes.
    fn memory(&mut self, metric: &str) -> anyhow::Result<()> {
        let sample = memory::sample(Path::new("/proc"), self.user.uid);
        if sample.processes.is_empty() {
            bail!("No owned processes found for memory measurement");
        }
        self.record(metric, sample.rss_bytes as f64, "bytes");
        Ok(())
    }

    /// Stops the child and starts it again; the metric is the second start's time.
    fn restart(&mut self, metric: Option<&str>) -> anyhow::Result<()> {
        // Whatever the channel, the old child stops (its transcripts kept) first.
        self.close(&format!("{}-{}-before-restart", self.scenario.name, self.trial));
        let started = self.start(1)?;
        if let Some(metric) = metric {
            self.record(metric, started.as_secs_f64(), "s");
        }
        Ok(())
    }

    /// Terminal: typed-probe readiness; the metric is spawn → ready.
    fn ready(&mut self, metric: Option<&str>) -> anyhow::Result<()> {
        let timeout = self.timeout();
        let term = self.terminal()?;
        let took = readiness::ready(term, timeout)?;
        self.last_echo = Some(term.started + took);
        if let Some(metric) = metric {
            self.record(metric, took.as_secs_f64(), "s");
        }
        Ok(())
    }

    /// Terminal: sends `text` as keystrokes, remembering the screen just before.
    fn type_text(&mut self, text: &str) -> anyhow::Result<()> {
        let term = self.terminal()?;
        let before = keys::Snapshot::of(term);
        term.send(text.as_bytes())?;
        self.at_action = before;
        self.last_action = Instant::now();
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
    use std::sync::Mutex;

    use sandbench_proto::v1::{Observation, event, observation};
    use tokio::sync::mpsc;

    use super::*;
    use crate::context::OutputCap;

    pub(super) fn context(state_dir: &Path) -> (PhaseContext, mpsc::Receiver<event::Body>) {
        let (tx, rx) = mpsc::channel(4096);
        let ctx = PhaseContext {
            command_id: "c".into(),
            trial: 0,
            plan: Vec::new(),
            resume_observations: 0,
            cancel: Default::default(),
            emit: tx,
            state_dir: state_dir.to_path_buf(),
            held: Default::default(),
            output: Mutex::new(OutputCap::new(1 << 20)),
            turns: Default::default(),
        };
        (ctx, rx)
    }

    fn shell(run: &str, cwd: &Path) -> ShellCommand {
        ShellCommand {
            run: run.into(),
            env: std::collections::BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
            cwd: cwd.to_path_buf(),
            user: None,
            timeout: Duration::from_secs(10),
        }
    }

    fn repeated(aggregate: Aggregate, warmup: u32, repeat: u32) -> RepeatedCommand {
        let step =
            sandbench_proto::plan::Step { run: String::new(), cwd: None, timeout_s: 10.0, env: Default::default() };
        RepeatedCommand {
            metric: "probe".into(),
            step,
            repeat,
            aggregate,
            warmup,
            prepare: None,
            instructions: false,
            distribution: None,
        }
    }

    fn observations(rx: &mut mpsc::Receiver<event::Body>) -> Vec<Observation> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|b| if let event::Body::Observation(o) = b { Some(o) } else { None })
            .collect()
    }

    #[test]
    fn warmup_runs_are_not_samples_and_prepare_runs_before_every_run() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, mut rx) = context(dir.path());
        // The command records how many times prepare had run when it started.
        let timed = shell("wc -l < prepared >> seen", dir.path());
        let prepare = shell("echo x >> prepared", dir.path());
        run_repeated(&ctx, 3, &repeated(Aggregate::Samples, 2, 5), &timed, Some(&prepare)).unwrap();
        let seen = std::fs::read_to_string(dir.path().join("seen")).unwrap();
        let seen: Vec<u32> = seen.lines().map(|l| l.trim().parse().unwrap()).collect();
        assert_eq!(seen, [1, 2, 3, 4, 5, 6, 7], "2 warmup and 5 timed runs, each after its prepare");
        let all = observations(&mut rx);
        // Each timed run is a sample, and so is what it cost (its companions, same index).
        let of = |metric: &str| all.iter().filter(|o| o.metric == metric).map(|o| o.sample).collect::<Vec<_>>();
        assert_eq!(of("probe.cpu"), [0, 1, 2, 3, 4]);
        assert_eq!(of("probe.maxrss"), [0, 1, 2, 3, 4]);
        let got: Vec<&Observation> = all.iter().filter(|o| o.metric == "probe").collect();
        assert_eq!(got.iter().map(|o| o.sample).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        for o in got {
            assert_eq!((o.metric.as_str(), o.trial, o.unit.as_str()), ("probe", 3, "s"));
            assert!(matches!(o.outcome, Some(observation::Outcome::Value(v)) if v > 0.0 && v < 5.0), "{o:?}");
        }
    }

    #[test]
    fn a_mean_is_one_value_and_a_failed_run_is_the_error_of_its_sample() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, mut rx) = context(dir.path());
        run_repeated(&ctx, 0, &repeated(Aggregate::Mean, 1, 4), &shell("true", dir.path()), None).unwrap();
        let got = observations(&mut rx);
        // One value and its six companions (CPU, max RSS, faults, switches), the mean of 4 runs.
        let metrics: Vec<&str> = got.iter().map(|o| o.metric.as_str()).collect();
        assert_eq!(
            metrics,
            ["probe", "probe.cpu", "probe.maxrss", "probe.minflt", "probe.majflt", "probe.vcsw", "probe.ivcsw"]
        );
        assert!(got.iter().all(|o| o.sample == 0 && o.trial == 0));
        // Passes its warmup and two timed runs, then fails.
        let timed = shell("echo x >> runs; test $(wc -l < runs) -lt 4 || { echo broken; exit 3; }", dir.path());
        let err = run_repeated(&ctx, 1, &repeated(Aggregate::Samples, 1, 5), &timed, None).unwrap_err();
        assert!(err.to_string().contains("exit status 3): broken"), "{err:#}");
        let got = observations(&mut rx);
        let samples: Vec<(u32, bool)> = got
            .iter()
            .filter(|o| o.metric == "probe")
            .map(|o| (o.sample, matches!(o.outcome, Some(observation::Outcome::Error(_)))))
            .collect();
        assert_eq!(samples, [(0, false), (1, false), (2, true)]);
        // A failing prepare fails the run before it.
        let err =
            run_repeated(&ctx, 2, &repeated(Aggregate::Samples, 0, 2), &timed, Some(&shell("exit 9", dir.path())))
                .unwrap_err();
        assert!(err.to_string().contains("prepare `exit 9` failed (exit status 9)"), "{err:#}");
    }

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
