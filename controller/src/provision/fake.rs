//! A provisioner without containers, for deterministic tests of whole runs (as hyperfine's
//! `MockExecutor` is for its scheduler). Each "sandbox" is an in-process agent session that dials
//! the run's real socket exactly as the real agent does — `Hello` with its token, events numbered
//! from 1, heartbeats, one answer per command id — and answers phases from a [`Script`]:
//! scripted values, failures and deaths, else deterministic synthetic values.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use hyper_util::rt::TokioIo;
use sandbench_proto::Phase;
use sandbench_proto::metric::MetricKey;
use sandbench_proto::v1::agent_client::AgentClient;
use sandbench_proto::v1::{
    AgentMessage, Event, EventBatch, Facts, Heartbeat, Hello, Log, LogStream, Observation, PhaseDone, PhaseStarted,
    PhaseStatus, PhaseYielded, RunPhase, agent_message, command, controller_message, event, observation,
};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;

mod lens;

use super::{ContainerInfo, LostCause, ProvisionError, Provisioner, Reaped, Sandbox, SandboxRequest, Usage, labels};
use crate::spec::Plan;

/// How a fake sandbox answers one phase command. Every rule that matches a command applies, in
/// the order they were added.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The phase's synthetic values times this factor.
    Scale(f64),
    /// This raw value for this metric.
    Value(String, f64),
    /// The phase fails with this cause; each of its observations carries it as its error.
    Fail(String),
    /// The sandbox dies once the phase has started: no observation, no `PhaseDone`, and it no
    /// longer runs.
    Die,
    /// As [`Answer::Die`], the engine naming why ([`Provisioner::lost_cause`]): a restart too
    /// short for the run to see the engine down, say.
    DieOf(LostCause),
    /// The phase takes this long before it answers.
    Delay(Duration),
    /// No observation of this metric (a benchmark the revision no longer has).
    Omit(String),
    /// The engine becomes unreachable for this long as the phase starts (a restart): the
    /// sandbox survives it (live-restore) and answers once it is back, or dies with it.
    EngineOutage { down: Duration, survive: bool },
}

#[derive(Debug, Clone)]
struct Rule {
    /// A side (`base`, `head`: any pair's sandbox of that side) or one sandbox's role (`head1`).
    role: String,
    phase: String,
    /// None: every trial.
    trial: Option<u32>,
    answer: Answer,
}

/// One metric a phase observes.
#[derive(Debug, Clone)]
struct ScriptMetric {
    key: String,
    unit: String,
    /// Raw units per display unit (seconds per ms, say).
    raw_per_display: f64,
    /// Observed in trial 0 only (the footprint, the bundle).
    once: bool,
}

/// What fake sandboxes observe in each phase, and the rules that change their answers.
#[derive(Debug, Clone, Default)]
pub struct Script {
    metrics: BTreeMap<String, Vec<ScriptMetric>>,
    rules: Vec<Rule>,
}

/// One observation a fake agent sends.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub metric: String,
    pub trial: u32,
    pub value: Result<f64, String>,
    pub unit: String,
}

/// A phase command's whole answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseAnswer {
    pub observations: Vec<Observed>,
    /// The failure cause, if the phase fails.
    pub error: Option<String>,
    pub die: bool,
    /// Why the engine says the sandbox died, when it names it.
    pub lost: Option<LostCause>,
    pub delay: Duration,
    /// The engine is unreachable for this long as the phase starts.
    pub outage: Option<Duration>,
}

impl Script {
    /// Observes, in each phase, the metrics `plan` expects of it, with their raw units.
    pub fn for_plan(plan: &Plan) -> Script {
        let mut script = Script::default();
        for name in [Phase::Prepare, Phase::Install, Phase::Measure, Phase::Runtime] {
            for key in plan.metrics_of_phase(name) {
                let def = plan.metrics.iter().find(|m| m.key == key);
                let scale = def.map_or(1.0, |d| d.scale);
                let unit = match def.map(|d| d.unit.as_str()) {
                    Some("ms" | "s" | "µs") => "s",
                    Some("MB" | "KB" | "GB" | "B") => "bytes",
                    Some(other) => other,
                    None => "",
                };
                let once = name == Phase::Prepare || key == sandbench_proto::metric::DISK;
                let metric = ScriptMetric {
                    key: key.clone(),
                    unit: unit.to_string(),
                    raw_per_display: if scale > 0.0 { 1.0 / scale } else { 1.0 },
                    once,
                };
                script.metrics.entry(name.to_string()).or_default().push(metric);
            }
        }
        script
    }

    /// Also observes `key` in `phase`, in `unit`, about `value` raw units in trial 0 (as a bench
    /// step's run names its benchmarks, which the plan does not list).
    pub fn observe(mut self, phase: &str, key: &str, unit: &str, value: f64) -> Script {
        let metrics = self.metrics.entry(phase.to_string()).or_default();
        let raw_per_display = value / synthetic(metrics.len(), 0, 1.0);
        metrics.push(ScriptMetric { key: key.to_string(), unit: unit.to_string(), raw_per_display, once: false });
        self
    }

    /// Adds a rule for `role` (a side or one sandbox's role) in `phase`, one trial or all.
    pub fn on(mut self, role: &str, phase: &str, trial: Option<u32>, answer: Answer) -> Script {
        self.rules.push(Rule { role: role.to_string(), phase: phase.to_string(), trial, answer });
        self
    }

    /// The answer of sandbox `role` to `phase` trial `trial`.
    pub fn answer(&self, role: &str, phase: &str, trial: u32) -> PhaseAnswer {
        let mut factor = 1.0;
        let mut values = BTreeMap::new();
        let mut omitted = BTreeSet::new();
        let mut answer = PhaseAnswer {
            observations: Vec::new(),
            error: None,
            die: false,
            lost: None,
            delay: Duration::ZERO,
            outage: None,
        };
        let rules = self
            .rules
            .iter()
            .filter(|r| r.phase == phase && r.trial.is_none_or(|t| t == trial) && role_matches(&r.role, role));
        for rule in rules {
            match &rule.answer {
                Answer::Scale(f) => factor *= f,
                Answer::Value(metric, v) => {
                    values.insert(metric.clone(), *v);
                }
                Answer::Fail(cause) => answer.error = Some(cause.clone()),
                Answer::Die => answer.die = true,
                Answer::DieOf(cause) => {
                    answer.die = true;
                    answer.lost = Some(cause.clone());
                }
                Answer::Delay(d) => answer.delay += *d,
                Answer::Omit(metric) => {
                    omitted.insert(metric.as_str());
                }
                Answer::EngineOutage { down, survive } => {
                    answer.outage = Some(*down);
                    if *survive {
                        answer.delay += *down;
                    } else {
                        answer.die = true;
                    }
                }
            }
        }
        let metrics = self.metrics.get(phase).map(Vec::as_slice).unwrap_or_default();
        for (index, m) in metrics.iter().enumerate() {
            if (m.once && trial != 0) || omitted.contains(m.key.as_str()) {
                continue;
            }
            // A lens count is deterministic: the same in every trial.
            let at = if MetricKey::facet_of(&m.key).is_lens() { 0 } else { trial };
            let value = match &answer.error {
                Some(cause) => Err(cause.clone()),
                None => Ok(values.get(&m.key).copied().unwrap_or(synthetic(index, at, m.raw_per_display) * factor)),
            };
            answer.observations.push(Observed { metric: m.key.clone(), trial, value, unit: m.unit.clone() });
        }
        answer
    }
}

/// A spec of the fake product (image `fake:1`, 2 CPUs): its `[trials]` table's lines, then the
/// rest of the spec (phases, metrics). Whole-run tests write it to a file.
pub fn spec_text(trials: &str, rest: &str) -> String {
    // ABBA unless the test names an order: the default (`auto`) depends on the machine's CPUs.
    let trials = if trials.contains("order") { trials.to_string() } else { format!("{trials}\norder = \"abba\"") };
    format!(
        "name = \"fake-product\"\n\n[sandbox]\nimage = \"fake:1\"\ncpus = 2\nmemory_gb = 2\ndisk_gb = 10\n\n[trials]\n{trials}\n{rest}"
    )
}

/// Runs `git ARGS` (a shell line's words) in `dir` as a fixed author, for tests' repositories.
pub fn git(dir: &std::path::Path, args: &str) {
    let script = format!("git -c user.name=t -c user.email=t@t {args}");
    let ok = std::process::Command::new("sh").arg("-c").arg(script).current_dir(dir).status().unwrap();
    assert!(ok.success(), "git {args}");
}

/// The deterministic value of the `index`-th metric of a phase in `trial`: 10, 20, 30… display
/// units, varying by up to 3% from trial to trial.
pub fn synthetic(index: usize, trial: u32, raw_per_display: f64) -> f64 {
    10.0 * (index as f64 + 1.0) * (1.0 + 0.01 * f64::from(trial % 4)) * raw_per_display
}

fn engine_down_for(engine: &Engine, down: Duration) {
    *engine.lock().unwrap_or_else(PoisonError::into_inner) = Some(std::time::Instant::now() + down);
}

/// `head` matches `head`, `head0`, `head1`…; `head1` only itself.
fn role_matches(rule: &str, role: &str) -> bool {
    role == rule || role.strip_prefix(rule).is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

struct FakeSandbox {
    request: SandboxRequest,
    sandbox: Sandbox,
    created_unix: i64,
    agent: Option<tokio::task::JoinHandle<()>>,
    alive: Arc<AtomicBool>,
    log: Arc<Mutex<String>>,
    /// Why it died, when its script names it.
    lost: Arc<Mutex<Option<LostCause>>>,
}

impl FakeSandbox {
    fn running(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
}

/// Sandboxes as in-process agents answering from a [`Script`].
pub struct FakeProvisioner {
    script: Arc<Script>,
    sandboxes: Mutex<BTreeMap<String, FakeSandbox>>,
    engine: Engine,
    /// The image of every sandbox created, in order.
    images: Mutex<Vec<String>>,
    /// The role and I/O weight asked of every sandbox created, in order.
    io_weights: Mutex<Vec<(String, Option<u16>)>>,
    /// The terminals started ([`Provisioner::terminal`]), by id.
    terminals: Mutex<BTreeSet<String>>,
    /// Every segment of a stepwise command as it began, across sandboxes ([`Self::timeline`]).
    timeline: Timeline,
    /// Every lens run, across sandboxes ([`Self::lens_runs`]).
    lens_runs: Timeline,
}

/// `"<role> <phase> <trial> <segment>"` of each stepwise segment as it began, in order.
type Timeline = Arc<Mutex<Vec<String>>>;

/// The segments a fake stepwise command runs in (a trial of three runs).
pub const FAKE_SEGMENTS: u32 = 3;

/// Until when the fake engine is unreachable.
type Engine = Arc<Mutex<Option<std::time::Instant>>>;

impl FakeProvisioner {
    /// The image every fake run that needs valgrind creates its sandboxes from.
    pub const VALGRIND_TAG: &'static str = "sandbench-valgrind:fake";

    pub fn new(script: Script) -> FakeProvisioner {
        FakeProvisioner {
            script: Arc::new(script),
            sandboxes: Mutex::default(),
            engine: Engine::default(),
            images: Mutex::default(),
            io_weights: Mutex::default(),
            terminals: Mutex::default(),
            timeline: Timeline::default(),
            lens_runs: Timeline::default(),
        }
    }

    /// `"<role> <phase> <trial> <stem>"` of every lens run, in the order they were answered.
    pub fn lens_runs(&self) -> Vec<String> {
        self.lens_runs.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Every segment of a stepwise command as it began, across sandboxes: who ran when.
    pub fn timeline(&self) -> Vec<String> {
        self.timeline.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The image each sandbox was created from, in the order they were.
    pub fn created_images(&self) -> Vec<String> {
        self.images.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The role and I/O weight asked of each sandbox, in the order they were created.
    pub fn io_weights(&self) -> Vec<(String, Option<u16>)> {
        self.io_weights.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Makes the engine unreachable for `down` from now: pings and state questions fail.
    pub fn engine_down_for(&self, down: Duration) {
        engine_down_for(&self.engine, down);
    }

    fn engine_reachable(&self) -> Result<(), ProvisionError> {
        let down = self
            .engine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| until > std::time::Instant::now());
        if down {
            return Err(ProvisionError::Connect { host: "fake://engine".into(), cause: "connection refused".into() });
        }
        Ok(())
    }

    fn sandboxes(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, FakeSandbox>> {
        self.sandboxes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks a created sandbox as running without an agent, as a sandbox kept by `sandbench
    /// debug --keep` is to the by-hand commands.
    pub fn keep_running(&self, id: &str) -> anyhow::Result<()> {
        let sandboxes = self.sandboxes();
        let sandbox = sandboxes.get(id).with_context(|| format!("no fake sandbox {id}"))?;
        sandbox.alive.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Ends a sandbox's agent at once, as SIGKILL would.
    pub fn kill(&self, id: &str) -> anyhow::Result<()> {
        let mut sandboxes = self.sandboxes();
        let sandbox = sandboxes.get_mut(id).with_context(|| format!("no fake sandbox {id}"))?;
        if let Some(agent) = sandbox.agent.take() {
            agent.abort();
        }
        sandbox.alive.store(false, Ordering::SeqCst);
        Ok(())
    }
}

impl Provisioner for FakeProvisioner {
    fn describe(&self) -> String {
        "fake (in-process agents)".to_string()
    }

    fn ships_agent(&self) -> bool {
        false
    }

    fn ensure_image<'a>(
        &'a self,
        _image: &'a str,
        _progress: &'a mut (dyn FnMut(&str) + Send),
    ) -> BoxFuture<'a, Result<(), ProvisionError>> {
        async { Ok(()) }.boxed()
    }

    /// Builds nothing: the derived image is named [`FakeProvisioner::VALGRIND_TAG`].
    fn ensure_valgrind<'a>(
        &'a self,
        _image: &'a str,
        _progress: &'a mut (dyn FnMut(&str) + Send),
    ) -> BoxFuture<'a, Result<String, super::ValgrindError>> {
        async { Ok(Self::VALGRIND_TAG.to_string()) }.boxed()
    }

    fn probe_valgrind<'a>(&'a self, _image: &'a str) -> BoxFuture<'a, super::ValgrindProbe> {
        async { super::ValgrindProbe::Built(Self::VALGRIND_TAG.to_string()) }.boxed()
    }

    fn create<'a>(&'a self, request: &'a SandboxRequest) -> BoxFuture<'a, Result<Sandbox, ProvisionError>> {
        async move {
            let id = request.sandbox_id();
            let requested_at = SystemTime::now();
            let sandbox = Sandbox {
                id: id.clone(),
                container_id: format!("fake-{id}"),
                run_id: request.run_id.clone(),
                role: request.role.clone(),
                placement: request.placement,
                requested_at,
                queued: Duration::ZERO,
                expires_at: requested_at + request.ttl,
            };
            let mut sandboxes = self.sandboxes();
            if sandboxes.contains_key(&id) {
                return Err(ProvisionError::Create { name: id, cause: "the name is in use".into() });
            }
            let fake = FakeSandbox {
                request: request.clone(),
                sandbox: sandbox.clone(),
                created_unix: unix_secs(requested_at) as i64,
                agent: None,
                alive: Arc::new(AtomicBool::new(false)),
                log: Arc::default(),
                lost: Arc::default(),
            };
            sandboxes.insert(id, fake);
            self.images.lock().unwrap_or_else(PoisonError::into_inner).push(request.image.clone());
            let weight = (request.role.clone(), request.resources.io_weight);
            self.io_weights.lock().unwrap_or_else(PoisonError::into_inner).push(weight);
            Ok(sandbox)
        }
        .boxed()
    }

    fn start<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), ProvisionError>> {
        async move {
            let mut sandboxes = self.sandboxes();
            let sandbox = sandboxes.get_mut(id).ok_or_else(|| fail::start(id, "no such fake sandbox"))?;
            if sandbox.running() {
                return Ok(());
            }
            sandbox.alive.store(true, Ordering::SeqCst);
            let agent = FakeAgent {
                request: sandbox.request.clone(),
                script: self.script.clone(),
                engine: self.engine.clone(),
                log: sandbox.log.clone(),
                lost: sandbox.lost.clone(),
                timeline: self.timeline.clone(),
                lens_runs: self.lens_runs.clone(),
                granted: BTreeMap::new(),
                done: BTreeSet::new(),
                installed: false,
                seq: 0,
            };
            let alive = sandbox.alive.clone();
            sandbox.agent = Some(tokio::spawn(async move {
                let mut agent = agent;
                let end = agent.session().await;
                agent.note(&match end {
                    Ok(why) => why,
                    Err(err) => format!("session ended: {err:#}"),
                });
                alive.store(false, Ordering::SeqCst);
            }));
            Ok(())
        }
        .boxed()
    }

    /// The fake host, like most, has no I/O scheduler that weighs containers.
    fn io_weight_discarded(&self) -> Option<String> {
        let asked = self.io_weights.lock().unwrap_or_else(PoisonError::into_inner).iter().any(|(_, w)| w.is_some());
        asked.then(|| "the fake engine weighs no I/O".to_string())
    }

    fn pin<'a>(&'a self, id: &'a str, cpuset: &'a str) -> BoxFuture<'a, Result<(), ProvisionError>> {
        async move {
            let mut sandboxes = self.sandboxes();
            let Some(sandbox) = sandboxes.get_mut(id) else {
                return Err(ProvisionError::Pin { name: id.to_string(), cause: "no such fake sandbox".into() });
            };
            sandbox.request.resources.cpuset = Some(cpuset.to_string());
            let entry = format!("{} pinned {cpuset}", sandbox.request.role);
            self.timeline.lock().unwrap_or_else(PoisonError::into_inner).push(entry);
            Ok(())
        }
        .boxed()
    }

    fn running<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, ProvisionError>> {
        async move {
            self.engine_reachable()?;
            Ok(self.sandboxes().get(id).is_some_and(FakeSandbox::running))
        }
        .boxed()
    }

    fn endpoint(&self) -> String {
        "fake://engine".to_string()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), ProvisionError>> {
        async move { self.engine_reachable() }.boxed()
    }

    fn exists<'a>(&'a self, id: &'a str) -> BoxFuture<'a, bool> {
        async move { self.sandboxes().contains_key(id) }.boxed()
    }

    fn usage<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Usage>, ProvisionError>> {
        async move {
            self.engine_reachable()?;
            let running = self.sandboxes().get(id).is_some_and(FakeSandbox::running);
            Ok(running.then_some(Usage { cpu_ns: 0, memory_bytes: 64 << 20 }))
        }
        .boxed()
    }

    fn logs<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<String, ProvisionError>> {
        async move {
            let sandboxes = self.sandboxes();
            let sandbox = sandboxes.get(id).ok_or_else(|| fail::logs(id, "no such sandbox"))?;
            Ok(sandbox.log.lock().unwrap_or_else(PoisonError::into_inner).clone())
        }
        .boxed()
    }

    fn logs_follow(&self, id: &str) -> BoxStream<'static, Result<String, ProvisionError>> {
        let source = self.sandboxes().get(id).map(|s| (s.log.clone(), s.alive.clone()));
        let Some((log, alive)) = source else {
            let id = id.to_string();
            return futures_util::stream::once(async move { Err(fail::logs(&id, "no fake sandbox")) }).boxed();
        };
        follow_log(log, alive, 0)
    }

    /// Runs `echo ARGS` (its arguments, a line) and `false` (exit 1); any other command is not
    /// found (exit 127).
    fn exec<'a>(&'a self, id: &'a str, cmd: Vec<String>) -> BoxFuture<'a, Result<(i64, String), ProvisionError>> {
        async move {
            self.engine_reachable()?;
            if !self.sandboxes().get(id).is_some_and(FakeSandbox::running) {
                return Err(fail::exec(id, "it is not running"));
            }
            Ok(match cmd.split_first() {
                Some((name, args)) if name == "echo" => (0, format!("{}\n", args.join(" "))),
                Some((name, [])) if name == "false" => (1, String::new()),
                _ => (127, format!("fake: {}: not found\n", cmd.join(" "))),
            })
        }
        .boxed()
    }

    fn upload<'a>(&'a self, id: &'a str, tar: super::TarStream) -> BoxFuture<'a, Result<(), ProvisionError>> {
        async move {
            if !self.sandboxes().contains_key(id) {
                return Err(fail::upload(id, "no such sandbox"));
            }
            // Read as the engine would, chunk by chunk: an error in the stream fails the upload.
            let mut tar = tar.0;
            let mut received = 0u64;
            while let Some(chunk) = tar.next().await {
                received += chunk
                    .map_err(|cause| ProvisionError::Upload { name: id.to_string(), cause: cause.into() })?
                    .len() as u64;
            }
            let sandboxes = self.sandboxes();
            let sandbox = sandboxes.get(id).ok_or_else(|| fail::upload(id, "no such sandbox"))?;
            sandbox
                .log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_str(&format!("received {received} bytes\n"));
            Ok(())
        }
        .boxed()
    }

    /// Why the sandbox died when its script names it; else unknown (`stopped`).
    fn lost_cause<'a>(&'a self, id: &'a str) -> BoxFuture<'a, super::Lost> {
        async move {
            let cause =
                self.sandboxes().get(id).and_then(|s| s.lost.lock().unwrap_or_else(PoisonError::into_inner).clone());
            super::Lost { cause, detail: String::new() }
        }
        .boxed()
    }

    /// Removes the sandbox named `id`, or whose container id it is (as the engine takes either).
    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), ProvisionError>> {
        async move {
            let mut sandboxes = self.sandboxes();
            let name = sandboxes.values().find(|s| s.sandbox.container_id == id).map(|s| s.sandbox.id.clone());
            if let Some(sandbox) = sandboxes.remove(name.as_deref().unwrap_or(id)) {
                if let Some(agent) = sandbox.agent {
                    agent.abort();
                }
                sandbox.alive.store(false, Ordering::SeqCst);
            }
            Ok(())
        }
        .boxed()
    }

    fn list<'a>(
        &'a self,
        label: Option<(&'a str, &'a str)>,
    ) -> BoxFuture<'a, Result<Vec<ContainerInfo>, ProvisionError>> {
        async move {
            let all = self.sandboxes().values().map(info).collect::<Vec<_>>();
            Ok(all
                .into_iter()
                .filter(|c| label.is_none_or(|(key, value)| c.labels.get(key).is_some_and(|v| v == value)))
                .collect())
        }
        .boxed()
    }

    fn reap(&self) -> BoxFuture<'_, Result<Vec<Reaped>, ProvisionError>> {
        async move {
            let now = SystemTime::now();
            let expired: Vec<String> = self
                .sandboxes()
                .values()
                .filter(|s| s.sandbox.expires_at <= now)
                .map(|s| s.sandbox.id.clone())
                .collect();
            let mut reaped = Vec::new();
            for id in expired {
                self.remove(&id).await?;
                reaped.push(Reaped { name: id, reason: "expired".to_string() });
            }
            Ok(reaped)
        }
        .boxed()
    }

    /// The log's lines, each stamped with the sandbox's creation time.
    fn log_lines(
        &self,
        id: &str,
        tail: Option<usize>,
        follow: bool,
    ) -> BoxStream<'static, Result<String, ProvisionError>> {
        let source = self.sandboxes().get(id).map(|s| {
            let text = s.log.lock().unwrap_or_else(PoisonError::into_inner).clone();
            (s.log.clone(), s.alive.clone(), text, s.created_unix)
        });
        let Some((log, alive, text, created)) = source else {
            let id = id.to_string();
            return futures_util::stream::once(async move { Err(fail::logs(&id, "no fake sandbox")) }).boxed();
        };
        let stamp = jiff::Timestamp::from_second(created).unwrap_or_default().to_string();
        let lines: Vec<&str> = text.lines().collect();
        let kept = lines[tail.map_or(0, |n| lines.len().saturating_sub(n))..].join("\n");
        let first = futures_util::stream::once(std::future::ready(Ok(stamped(&kept, &stamp))));
        let rest = match follow {
            true => follow_log(log, alive, text.len()).map(move |chunk| Ok(stamped(&chunk?, &stamp))).boxed(),
            false => futures_util::stream::empty().boxed(),
        };
        first.chain(rest).filter(|chunk| std::future::ready(!matches!(chunk, Ok(text) if text.is_empty()))).boxed()
    }

    /// A terminal that echoes the keys typed until Ctrl-D, then exits 0.
    fn terminal<'a>(
        &'a self,
        id: &'a str,
        _cmd: Vec<String>,
        _rows: u16,
        _cols: u16,
    ) -> BoxFuture<'a, Result<super::Terminal, ProvisionError>> {
        async move {
            self.engine_reachable()?;
            if !self.sandboxes().get(id).is_some_and(FakeSandbox::running) {
                return Err(fail::exec(id, "it is not running"));
            }
            let (input, keys) = tokio::io::duplex(4096);
            let mut terminals = self.terminals.lock().unwrap_or_else(PoisonError::into_inner);
            let terminal = format!("fake-terminal-{}", terminals.len());
            terminals.insert(terminal.clone());
            Ok(super::Terminal { id: terminal, output: echo_terminal(keys), input: Box::pin(input) })
        }
        .boxed()
    }

    fn resize_terminal<'a>(
        &'a self,
        terminal: &'a str,
        _rows: u16,
        _cols: u16,
    ) -> BoxFuture<'a, Result<(), ProvisionError>> {
        async move { self.terminal_exit_code(terminal).await.map(drop) }.boxed()
    }

    fn terminal_exit_code<'a>(&'a self, terminal: &'a str) -> BoxFuture<'a, Result<i64, ProvisionError>> {
        async move {
            match self.terminals.lock().unwrap_or_else(PoisonError::into_inner).contains(terminal) {
                true => Ok(0),
                false => Err(fail::exec(terminal, "no such fake terminal")),
            }
        }
        .boxed()
    }
}

/// The fake's failures, as the engine's would be.
mod fail {
    use super::ProvisionError;

    pub fn start(name: &str, why: &str) -> ProvisionError {
        ProvisionError::Start { name: name.to_string(), cause: why.into() }
    }

    pub fn logs(name: &str, why: &str) -> ProvisionError {
        ProvisionError::Logs { name: name.to_string(), cause: why.into() }
    }

    pub fn exec(name: &str, why: &str) -> ProvisionError {
        ProvisionError::Exec { name: name.to_string(), cause: why.into() }
    }

    pub fn upload(name: &str, why: &str) -> ProvisionError {
        ProvisionError::Upload { name: name.to_string(), cause: why.into() }
    }
}

/// A fake log from byte `sent` on, polled: what was added since the last look, until the agent
/// has ended.
fn follow_log(
    log: Arc<Mutex<String>>,
    alive: Arc<AtomicBool>,
    sent: usize,
) -> BoxStream<'static, Result<String, ProvisionError>> {
    futures_util::stream::unfold((sent, false), move |(sent, ended)| {
        let (log, alive) = (log.clone(), alive.clone());
        async move {
            if ended {
                return None;
            }
            loop {
                let finished = !alive.load(Ordering::SeqCst);
                let text = log.lock().unwrap_or_else(PoisonError::into_inner)[sent..].to_string();
                if !text.is_empty() || finished {
                    return Some((Ok(text.clone()), (sent + text.len(), finished)));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    })
    .filter(|chunk| std::future::ready(!matches!(chunk, Ok(text) if text.is_empty())))
    .boxed()
}

/// Each line of `text` prefixed with `stamp`, as an engine stamps a container's log.
fn stamped(text: &str, stamp: &str) -> String {
    text.lines().map(|line| format!("{stamp} {line}\n")).collect()
}

/// What a fake terminal shows: the keys typed, echoed, until Ctrl-D.
fn echo_terminal(keys: tokio::io::DuplexStream) -> BoxStream<'static, anyhow::Result<Vec<u8>>> {
    futures_util::stream::unfold(Some(keys), |keys| async move {
        use tokio::io::AsyncReadExt;
        let mut keys = keys?;
        let mut buf = vec![0u8; 1024];
        let n = keys.read(&mut buf).await.ok().filter(|n| *n > 0)?;
        buf.truncate(n);
        match buf.iter().position(|b| *b == 0x04) {
            Some(end) => Some((Ok(buf[..end].to_vec()), None)),
            None => Some((Ok(buf), Some(keys))),
        }
    })
    .boxed()
}

fn info(s: &FakeSandbox) -> ContainerInfo {
    let mut container_labels: std::collections::HashMap<String, String> = [
        (labels::OWNER, "fake".to_string()),
        (labels::RUN, s.sandbox.run_id.clone()),
        (labels::ROLE, s.sandbox.role.clone()),
        (labels::EXPIRES_AT, unix_secs(s.sandbox.expires_at).to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    container_labels.extend(s.request.labels.clone());
    container_labels.extend(s.request.placement_labels());
    ContainerInfo {
        id: s.sandbox.container_id.clone(),
        name: s.sandbox.id.clone(),
        state: if s.running() { "running" } else { "exited" }.to_string(),
        image: s.request.image.clone(),
        created: s.created_unix,
        labels: container_labels,
    }
}

/// One fake agent process: its session with the controller and what it has done.
struct FakeAgent {
    request: SandboxRequest,
    script: Arc<Script>,
    engine: Engine,
    log: Arc<Mutex<String>>,
    /// Why the engine says the sandbox died.
    lost: Arc<Mutex<Option<LostCause>>>,
    timeline: Timeline,
    lens_runs: Timeline,
    /// Turns that came before their command, by command id.
    granted: BTreeMap<String, u32>,
    /// Commands answered (a repeated command id is not run again).
    done: BTreeSet<String>,
    /// An installation succeeded (the real agent's measure user exists).
    installed: bool,
    /// The last event's sequence number.
    seq: u64,
}

type Outbound = mpsc::Sender<AgentMessage>;
type Inbound = tonic::Streaming<sandbench_proto::v1::ControllerMessage>;

impl FakeAgent {
    fn note(&self, line: &str) {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.push_str(line);
        log.push('\n');
    }

    /// One session, to its end: why it ended.
    async fn session(&mut self) -> anyhow::Result<String> {
        let socket: PathBuf = self.request.socket_dir.join(sandbench_proto::SOCKET_NAME);
        let channel = Endpoint::from_static("http://controller.invalid")
            .connect_with_connector(tower::service_fn(move |_| {
                let socket = socket.clone();
                async move { UnixStream::connect(socket).await.map(TokioIo::new) }
            }))
            .await
            .context("cannot reach the controller")?;
        let (tx, rx) = mpsc::channel::<AgentMessage>(64);
        let resources = &self.request.resources;
        let hello = Hello {
            sandbox_id: self.request.sandbox_id(),
            token: self.request.token.clone(),
            boot_id: format!("fake-{}", self.request.sandbox_id()),
            agent_version: "fake".to_string(),
            facts: Some(Facts {
                kernel: "fake".to_string(),
                cpu_model: "fake CPU".to_string(),
                cpus: resources.cpus.ceil() as u32,
                memory_bytes: resources.memory_bytes,
                os_release: "sandbench fake sandbox".to_string(),
            }),
            journal_seq: self.seq,
            placement: self.request.placement.map(Into::into),
        };
        tx.send(message(agent_message::Body::Hello(hello))).await?;
        let mut inbound = AgentClient::new(channel).session(ReceiverStream::new(rx)).await?.into_inner();
        let welcome = match inbound.message().await?.and_then(|m| m.body) {
            Some(controller_message::Body::Welcome(welcome)) => welcome,
            other => bail!("expected Welcome, got {other:?}"),
        };
        self.note("connected");
        self.seq = self.seq.max(welcome.acked_seq);
        let mut heartbeat =
            tokio::time::interval(Duration::from_millis(u64::from(welcome.heartbeat_interval_ms.max(10))));
        loop {
            tokio::select! {
                incoming = inbound.message() => {
                    let Some(msg) = incoming? else { bail!("the controller closed the stream") };
                    let Some(controller_message::Body::Command(cmd)) = msg.body else { continue };
                    match cmd.body {
                        Some(command::Body::RunPhase(run)) => {
                            if !self.done.insert(cmd.command_id.clone()) {
                                continue;
                            }
                            if self.run_phase(&cmd.command_id, &run, &tx, &mut inbound).await? {
                                return Ok(format!("died during {} trial {}", run.phase, run.trial));
                            }
                        }
                        Some(command::Body::Shutdown(_)) => return Ok("shut down".to_string()),
                        // A turn that came before its command: kept for it.
                        Some(command::Body::Turn(turn)) => {
                            let granted = self.granted.entry(turn.target_command_id).or_default();
                            *granted = (*granted).max(turn.index);
                        }
                        Some(command::Body::Cancel(_)) | None => {}
                    }
                }
                _ = heartbeat.tick() => {
                    let _ = tx.try_send(message(agent_message::Body::Heartbeat(Heartbeat { unix_ms: unix_ms() })));
                }
            }
        }
    }

    /// A stepwise command's segments, each at its turn, said in the timeline as it begins and
    /// followed by its `PhaseYielded` but the last (whose end is the command's). Where the plan
    /// sent asks for the lens, as the real agent, an untimed rest follows at a turn of its own
    /// (its last timed segment's yield says so): the timeline says when the rest begins and
    /// ends, some milliseconds later.
    async fn segments(
        &mut self,
        command_id: &str,
        run: &RunPhase,
        tx: &Outbound,
        inbound: &mut Inbound,
    ) -> anyhow::Result<()> {
        let mut granted = self.granted.get(command_id).copied().unwrap_or(0);
        let rest = !lens::asked(&run.plan, run.phase.parse::<Phase>().ok()).is_empty();
        let last = if rest { FAKE_SEGMENTS + 1 } else { FAKE_SEGMENTS };
        for index in 1..=last {
            while granted < index {
                let Some(msg) = inbound.message().await? else { bail!("the controller closed the stream") };
                if let Some(controller_message::Body::Command(cmd)) = msg.body
                    && let Some(command::Body::Turn(turn)) = cmd.body
                    && turn.target_command_id == command_id
                {
                    granted = granted.max(turn.index);
                }
            }
            let at = |what: String| format!("{} {} {} {what}", self.request.role, run.phase, run.trial);
            if index > FAKE_SEGMENTS {
                self.timeline.lock().unwrap_or_else(PoisonError::into_inner).push(at("rest begins".into()));
                tokio::time::sleep(Duration::from_millis(50)).await;
                self.timeline.lock().unwrap_or_else(PoisonError::into_inner).push(at("rest ends".into()));
                continue;
            }
            self.timeline.lock().unwrap_or_else(PoisonError::into_inner).push(at(index.to_string()));
            if index < last {
                let untimed_rest = index == FAKE_SEGMENTS;
                let yielded = PhaseYielded { command_id: command_id.to_string(), index, untimed_rest };
                self.send(tx, vec![event::Body::Yielded(yielded)]).await?;
            }
        }
        Ok(())
    }

    /// Answers one phase command; true when the script says the sandbox dies in it.
    async fn run_phase(
        &mut self,
        command_id: &str,
        run: &RunPhase,
        tx: &Outbound,
        inbound: &mut Inbound,
    ) -> anyhow::Result<bool> {
        let role = self.request.role.clone();
        let mut answer = self.script.answer(&role, &run.phase, run.trial);
        // As the real agent, by the phase named on the wire.
        let phase = run.phase.parse::<Phase>().ok();
        // As the real agent: a step's lens counts only where the plan sent asks for them.
        let lens = lens::asked(&run.plan, phase);
        answer.observations.retain(|o| {
            let (stem, facet) = MetricKey::split(&o.metric);
            !facet.is_lens() || lens.iter().any(|s| s == stem)
        });
        let gated = phase.is_some_and(Phase::needs_install);
        if gated && !self.installed && answer.error.is_none() {
            // As the real agent: no measure user before a successful installation.
            let cause = "The first installation must succeed before interactive measurements".to_string();
            for o in &mut answer.observations {
                o.value = Err(cause.clone());
            }
            answer.error = Some(cause);
        }
        self.note(&format!("{} trial {}", run.phase, run.trial));
        let started = PhaseStarted { command_id: command_id.to_string(), phase: run.phase.clone(), trial: run.trial };
        self.send(tx, vec![event::Body::PhaseStarted(started)]).await?;
        if let Some(down) = answer.outage {
            engine_down_for(&self.engine, down);
        }
        if !answer.delay.is_zero() {
            tokio::time::sleep(answer.delay).await;
        }
        if run.stepwise && !answer.die {
            self.segments(command_id, run, tx, inbound).await?;
        }
        if answer.die {
            *self.lost.lock().unwrap_or_else(PoisonError::into_inner) = answer.lost;
            return Ok(true);
        }
        let mut bodies = vec![event::Body::Log(Log {
            command_id: command_id.to_string(),
            stream: LogStream::Stdout as i32,
            chunk: format!("fake {} trial {}\n", run.phase, run.trial).into_bytes(),
        })];
        for o in answer.observations {
            let outcome = match o.value {
                Ok(v) => observation::Outcome::Value(v),
                Err(e) => observation::Outcome::Error(e),
            };
            bodies.push(event::Body::Observation(Observation {
                command_id: command_id.to_string(),
                metric: o.metric,
                trial: o.trial,
                outcome: Some(outcome),
                unit: o.unit,
                sample: 0,
            }));
        }
        for stem in lens.iter().filter(|_| answer.error.is_none()) {
            let entry = format!("{role} {} {} {stem}", run.phase, run.trial);
            self.lens_runs.lock().unwrap_or_else(PoisonError::into_inner).push(entry);
            bodies.push(lens::profile_file(command_id, stem, run.trial, 1e9));
        }
        if phase == Some(Phase::Install) && answer.error.is_none() {
            self.installed = true;
        }
        let status = if answer.error.is_some() { PhaseStatus::Failed } else { PhaseStatus::Ok };
        let done = PhaseDone {
            command_id: command_id.to_string(),
            status: status as i32,
            error: answer.error.unwrap_or_default(),
        };
        bodies.push(event::Body::PhaseDone(done));
        self.send(tx, bodies).await?;
        Ok(false)
    }

    async fn send(&mut self, tx: &Outbound, bodies: Vec<event::Body>) -> anyhow::Result<()> {
        let events = bodies
            .into_iter()
            .map(|body| {
                self.seq += 1;
                Event { seq: self.seq, unix_ms: unix_ms(), body: Some(body) }
            })
            .collect();
        tx.send(message(agent_message::Body::Events(EventBatch { events })))
            .await
            .map_err(|_| anyhow::anyhow!("the stream to the controller closed"))
    }
}

fn message(body: agent_message::Body) -> AgentMessage {
    AgentMessage { body: Some(body) }
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script() -> Script {
        let metric = |key: &str, once| ScriptMetric { key: key.into(), unit: "s".into(), raw_per_display: 0.001, once };
        let mut script = Script::default();
        script.metrics.insert("measure".into(), vec![metric("cold", false), metric("disk", true)]);
        script
    }

    #[test]
    fn synthetic_answers_are_deterministic_and_once_metrics_come_in_trial_0_only() {
        let s = script();
        let first = s.answer("base", "measure", 0);
        assert_eq!(first, s.answer("head", "measure", 0), "both sides alike by default");
        let metrics: Vec<&str> = first.observations.iter().map(|o| o.metric.as_str()).collect();
        assert_eq!(metrics, ["cold", "disk"]);
        assert_eq!(first.observations[0].value, Ok(0.01));
        let later = s.answer("base", "measure", 1);
        assert_eq!(later.observations.len(), 1);
        assert_eq!(later.observations[0].value, Ok(10.0 * 1.01 * 0.001));
        assert_eq!(first.error, None);
    }

    #[test]
    fn rules_match_side_or_sandbox_and_trial_and_compose() {
        let s = script()
            .on("head", "measure", None, Answer::Scale(2.0))
            .on("head1", "measure", Some(2), Answer::Fail("boom".into()))
            .on("base", "measure", Some(1), Answer::Value("cold".into(), 7.0))
            .on("base0", "measure", Some(3), Answer::Die);
        assert_eq!(s.answer("head0", "measure", 0).observations[0].value, Ok(0.02));
        assert_eq!(s.answer("base0", "measure", 0).observations[0].value, Ok(0.01));
        let failed = s.answer("head1", "measure", 2);
        assert_eq!(failed.error.as_deref(), Some("boom"));
        assert_eq!(failed.observations[0].value, Err("boom".into()));
        assert_eq!(s.answer("head0", "measure", 2).error, None);
        assert_eq!(s.answer("base1", "measure", 1).observations[0].value, Ok(7.0));
        assert!(s.answer("base0", "measure", 3).die && !s.answer("base1", "measure", 3).die);
        // `base` does not match `baseline`.
        assert!(!role_matches("base", "baseline") && role_matches("base", "base12"));
    }
}
