//! The controller's end of protocol v1: a tonic service on a Unix socket that authenticates
//! agents by their per-sandbox token, persists their events in the run directory before acking,
//! drops duplicates by `(sandbox, seq)`, delivers commands (again after every reconnection), and
//! exchanges heartbeats.
//!
//! [`Hub`] holds the state; it can be reopened from the run directory after a restart, so a
//! controller that comes back continues where the log ends. What agents send is bounded on the
//! way in (see [`crate::observations::intake`]): output per command, file chunks, texts, refused Hellos.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sandbench_proto::Placement;
use sandbench_proto::v1::agent_server::{Agent, AgentServer};
use sandbench_proto::v1::{
    AgentMessage, Command, ControllerMessage, Event, Facts, FetchReply, FetchRequest, Heartbeat, PhaseStatus, Welcome,
    agent_message, command, controller_message, event, observation,
};
use serde::{Deserialize, Serialize};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::observations::intake::{self, FileLimits, Files, MAX_ERROR_BYTES, MAX_NAME_BYTES, Outputs, Refusals};
use crate::observations::store::{Data, EventLog, OBSERVATIONS_FILE, StoredBody, StoredEvent};
use conn::Guarded;
pub use conn::{MAX_CONNECTIONS_PER_SOCKET, MAX_STREAMS_PER_CONNECTION};

pub use crate::observations::intake::Refusal;

const TOKENS_FILE: &str = ".agent-tokens.json";
/// Why the agent of a retired sandbox (one being torn down) is refused.
const RETIRED: &str = "token reused: the sandbox was retired";

/// Timing of the conversation with agents.
#[derive(Debug, Clone)]
pub struct HubConfig {
    pub heartbeat: Duration,
    /// Missed heartbeats after which either side gives the other up.
    pub dead_after: u32,
    /// How long an agent has to send Hello once its stream is open.
    pub hello_timeout: Duration,
    /// Output kept per (sandbox, command): its first and its last half of this many bytes, and
    /// a marker between them saying how many were cut. Sent to agents in `Welcome`.
    pub output_cap_bytes: u64,
    /// Bounds on the files each sandbox sends.
    pub files: FileLimits,
    /// How long a connection may stay silent before it is closed (a live agent's heartbeats
    /// come every `heartbeat`).
    pub idle_timeout: Duration,
    /// The registry bridge agents may call (`sandbox.network = "registries"`).
    pub registries: Option<Arc<crate::spec::RegistrySettings>>,
}

/// How long either side carries on without word from the other by default: long enough for a
/// controller stalled on a loaded machine (paused 8.5 s in a fault drill) to come back.
pub const DEFAULT_DEAD_MAN: Duration = Duration::from_secs(30);

/// How often either side says it is alive by default.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(500);

impl HubConfig {
    /// Heartbeats every `heartbeat`, giving the other side up after `window` without word
    /// (rounded up to whole intervals, at least 2).
    pub fn with_dead_man(heartbeat: Duration, window: Duration) -> HubConfig {
        let beat = heartbeat.as_millis().max(1);
        let intervals = window.as_millis().div_ceil(beat).clamp(2, u128::from(u32::MAX)) as u32;
        HubConfig {
            heartbeat,
            dead_after: intervals,
            hello_timeout: Duration::from_secs(10),
            output_cap_bytes: intake::DEFAULT_OUTPUT_CAP_BYTES,
            files: FileLimits::default(),
            // Twice the dead-man window: by then the session gave the agent up on its own.
            idle_timeout: (heartbeat * intervals).saturating_mul(2),
            registries: None,
        }
    }

    /// How long either side waits without word before giving the other up.
    pub fn dead_man(&self) -> Duration {
        self.heartbeat * self.dead_after
    }
}

impl Default for HubConfig {
    /// Heartbeats every 500 ms, the default dead-man window (30 s).
    fn default() -> Self {
        HubConfig::with_dead_man(DEFAULT_HEARTBEAT, DEFAULT_DEAD_MAN)
    }
}

/// What an agent told about itself when it connected.
#[derive(Debug, Clone)]
pub struct HelloInfo {
    pub boot_id: String,
    pub agent_version: String,
    pub facts: Facts,
    /// The sandbox's place in its run, as its agent said it (the registered one: a Hello that
    /// says another is refused).
    pub placement: Option<Placement>,
    pub at: Instant,
}

/// A finished command, as the agent reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseOutcome {
    pub status: PhaseStatus,
    pub error: String,
}

/// What the controller knows of one sandbox's agent, updated as events are persisted.
#[derive(Debug, Clone, Default)]
pub struct AgentStatus {
    pub connected: bool,
    /// Sessions accepted so far (1 + reconnections).
    pub sessions: u32,
    /// Distinct agent processes seen (1 + restarts).
    pub boots: u32,
    pub first_hello: Option<HelloInfo>,
    pub last_hello: Option<HelloInfo>,
    pub persisted_seq: u64,
    /// Observations persisted by this hub (since it was opened).
    pub observations: u64,
    pub done: HashMap<String, PhaseOutcome>,
    /// Observations recorded as errors, per command: `metric: error`.
    pub observation_errors: HashMap<String, Vec<String>>,
    /// The last segment each stepwise command said it ended (`PhaseYielded`).
    pub yielded: HashMap<String, u32>,
    /// The segment after which a stepwise command's rest is untimed (`untimed_rest`).
    pub untimed: HashMap<String, u32>,
}

/// What the run directory keeps of a registered sandbox besides its token (in the hub's token
/// file, written before the sandbox is created): its role (the end of its name) and its place
/// in the run. A registration made before they were kept, or without them, has neither.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}

#[derive(Serialize, Deserialize, Default)]
struct TokenRecord {
    token: String,
    retired: bool,
    #[serde(flatten)]
    registration: Registration,
}

/// The registrations of the sandboxes of the run in `run_dir`, by sandbox id (none when no
/// sandbox was registered there).
pub fn registrations(run_dir: &Path) -> anyhow::Result<HashMap<String, Registration>> {
    Ok(read_tokens(run_dir)?.into_iter().map(|(id, record)| (id, record.registration)).collect())
}

fn read_tokens(run_dir: &Path) -> anyhow::Result<HashMap<String, TokenRecord>> {
    match std::fs::read(run_dir.join(TOKENS_FILE)) {
        Ok(bytes) => serde_json::from_slice(&bytes).context("corrupt agent token file"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HashMap::new()),
        Err(e) => Err(e).context("cannot read the agent token file"),
    }
}

struct SandboxState {
    token: String,
    retired: bool,
    registration: Registration,
    persisted_seq: u64,
    /// Bumped on every accepted session; an older session sees it change and ends.
    generation: watch::Sender<u64>,
    outbound: Option<mpsc::Sender<Result<ControllerMessage, Status>>>,
    /// RunPhase commands without a PhaseDone yet, and the last Turn of each, resent after every
    /// reconnection.
    pending: Vec<Command>,
    status: watch::Sender<AgentStatus>,
    /// Serialises check-and-append of events, so two sessions cannot both persist a seq.
    persist: Arc<tokio::sync::Mutex<()>>,
}

struct Inner {
    run_dir: PathBuf,
    config: HubConfig,
    log: tokio::sync::RwLock<Option<EventLog>>,
    sandboxes: Mutex<HashMap<String, SandboxState>>,
    refusals: Mutex<Refusals>,
    /// Output of every sandbox's commands, cut to head and tail.
    outputs: Mutex<HashMap<String, Outputs>>,
    /// Files every sandbox sent.
    files: Mutex<HashMap<String, Files>>,
    closed: watch::Sender<bool>,
    /// Every event once persisted, for live displays.
    events: tokio::sync::broadcast::Sender<StoredEvent>,
    bridge: Option<crate::bridge::Bridge>,
}

/// The controller's registry of sandboxes and their agents' sessions. Cheap to clone.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Hub {
    /// Opens the hub of a run directory, recovering registered sandboxes and what their agents
    /// already delivered (after a controller restart).
    pub fn open(run_dir: &Path, config: HubConfig) -> anyhow::Result<Hub> {
        std::fs::create_dir_all(run_dir).with_context(|| format!("cannot create {}", run_dir.display()))?;
        let log_path = run_dir.join(OBSERVATIONS_FILE);
        let (log, recovered) =
            EventLog::open(&log_path).with_context(|| format!("cannot open {}", log_path.display()))?;
        let outputs = per_sandbox(recovered.output_bytes)
            .into_iter()
            .map(|(sandbox, kept)| (sandbox, Outputs::new(config.output_cap_bytes, kept)))
            .collect();
        let files = per_sandbox(recovered.file_sizes)
            .into_iter()
            .map(|(sandbox, sizes)| (sandbox, Files::recovered(sizes)))
            .collect();
        let mut done = per_sandbox(recovered.done);
        let last_seqs = recovered.last_seqs;
        let tokens = read_tokens(run_dir)?;
        let sandboxes = tokens
            .into_iter()
            .map(|(id, record)| {
                let seq = last_seqs.get(&id).copied().unwrap_or(0);
                let state = SandboxState::new(record.token, record.retired, record.registration, seq);
                // Commands that finished before a restart stay finished: their PhaseDone is
                // acknowledged, so the agent will never send it again.
                let finished = done.remove(&id).unwrap_or_default().into_iter().map(|(command, (status, error))| {
                    (command, PhaseOutcome { status: status_from_name(&status), error })
                });
                state.status.send_modify(|s| s.done.extend(finished));
                (id, state)
            })
            .collect();
        let bridge = match &config.registries {
            Some(settings) => Some(crate::bridge::Bridge::open(run_dir, settings)?),
            None => None,
        };
        Ok(Hub {
            inner: Arc::new(Inner {
                run_dir: run_dir.to_path_buf(),
                bridge,
                config,
                log: tokio::sync::RwLock::new(Some(log)),
                sandboxes: Mutex::new(sandboxes),
                refusals: Mutex::default(),
                outputs: Mutex::new(outputs),
                files: Mutex::new(files),
                closed: watch::Sender::new(false),
                events: tokio::sync::broadcast::Sender::new(4096),
            }),
        })
    }

    pub fn config(&self) -> HubConfig {
        self.inner.config.clone()
    }

    /// The run's registry bridge, when its sandboxes have one.
    pub fn bridge(&self) -> Option<&crate::bridge::Bridge> {
        self.inner.bridge.as_ref()
    }

    /// What the sandbox whose agent presents `token` is running (`install#2`), for a bridged
    /// request; refused like a Hello with a wrong token.
    fn fetch_caller(
        &self,
        sandbox_id: &str,
        token: &str,
    ) -> Result<(crate::bridge::Running, Option<sandbench_proto::Side>), Status> {
        let sandboxes = lock(&self.inner.sandboxes);
        let state = sandboxes
            .get(sandbox_id)
            .filter(|s| !s.retired && constant_time_eq(s.token.as_bytes(), token.as_bytes()))
            .ok_or_else(|| Status::unauthenticated("unknown sandbox or wrong token"))?;
        // The phase commands are the controller's own: each names a phase.
        let running = state.pending.iter().rev().find_map(|c| match &c.body {
            Some(command::Body::RunPhase(run)) => {
                run.phase.parse().ok().map(|phase| crate::bridge::Running::Phase { phase, trial: run.trial })
            }
            _ => None,
        });
        let side = state.registration.placement.map(|p| p.side);
        Ok((running.unwrap_or(crate::bridge::Running::Between), side))
    }

    pub fn log_path(&self) -> PathBuf {
        self.inner.run_dir.join(OBSERVATIONS_FILE)
    }

    /// Registers a sandbox and returns the random token its agent must present.
    pub fn register(&self, sandbox_id: &str) -> anyhow::Result<String> {
        self.register_as(sandbox_id, Registration::default())
    }

    /// [`Hub::register`] with the sandbox's role and place in the run, kept in the run directory
    /// beside its token (see [`registrations`]).
    pub fn register_as(&self, sandbox_id: &str, registration: Registration) -> anyhow::Result<String> {
        let token = random_token()?;
        {
            let mut sandboxes = lock(&self.inner.sandboxes);
            if sandboxes.contains_key(sandbox_id) {
                bail!("sandbox {sandbox_id} is already registered in this run");
            }
            sandboxes.insert(sandbox_id.to_string(), SandboxState::new(token.clone(), false, registration, 0));
        }
        self.save_tokens()?;
        Ok(token)
    }

    /// Ends a sandbox's registration: its token is refused from now on.
    pub fn retire(&self, sandbox_id: &str) -> anyhow::Result<()> {
        if let Some(state) = lock(&self.inner.sandboxes).get_mut(sandbox_id) {
            state.retired = true;
            state.outbound = None;
            state.generation.send_modify(|g| *g += 1);
            state.status.send_modify(|s| s.connected = false);
        }
        self.save_tokens()
    }

    fn save_tokens(&self) -> anyhow::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let records: HashMap<String, TokenRecord> = lock(&self.inner.sandboxes)
            .iter()
            .map(|(id, s)| {
                let record =
                    TokenRecord { token: s.token.clone(), retired: s.retired, registration: s.registration.clone() };
                (id.clone(), record)
            })
            .collect();
        let tmp = self.inner.run_dir.join(format!("{TOKENS_FILE}.tmp"));
        let mut file = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(&tmp)?;
        std::io::Write::write_all(&mut file, &serde_json::to_vec(&records)?)?;
        file.sync_all()?;
        std::fs::rename(&tmp, self.inner.run_dir.join(TOKENS_FILE))?;
        Ok(())
    }

    /// Watches one sandbox's agent.
    pub fn status(&self, sandbox_id: &str) -> Option<watch::Receiver<AgentStatus>> {
        lock(&self.inner.sandboxes).get(sandbox_id).map(|s| s.status.subscribe())
    }

    /// Events as they are persisted (a slow reader misses some; the log has them all).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<StoredEvent> {
        self.inner.events.subscribe()
    }

    /// The last refused Hellos (a few; their sandbox ids cut short).
    pub fn refusals(&self) -> Vec<Refusal> {
        lock(&self.inner.refusals).recent()
    }

    /// Hellos refused since the hub was opened.
    pub fn refusal_count(&self) -> u64 {
        lock(&self.inner.refusals).total()
    }

    /// Waits until the sandbox's agent has said Hello (now or before).
    pub async fn wait_hello(&self, sandbox_id: &str, timeout: Duration) -> anyhow::Result<HelloInfo> {
        let mut status = self.status(sandbox_id).with_context(|| format!("unknown sandbox {sandbox_id}"))?;
        let wait = status.wait_for(|s| s.first_hello.is_some());
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(status)) => Ok(status.first_hello.clone().context("no Hello")?),
            Ok(Err(_)) => bail!("sandbox {sandbox_id} was dropped while waiting for its agent"),
            Err(_) => {
                bail!("the agent of sandbox {sandbox_id} did not say Hello within {:.0} s", timeout.as_secs_f64())
            }
        }
    }

    /// Sends a command; RunPhase commands are kept and resent after reconnections until done.
    pub async fn send(&self, sandbox_id: &str, command: Command) -> anyhow::Result<()> {
        let outbound = {
            let mut sandboxes = lock(&self.inner.sandboxes);
            let state = sandboxes.get_mut(sandbox_id).with_context(|| format!("unknown sandbox {sandbox_id}"))?;
            if state.retired {
                bail!("sandbox {sandbox_id} is retired");
            }
            match &command.body {
                Some(command::Body::RunPhase(_)) => {
                    let done = state.status.borrow().done.contains_key(&command.command_id);
                    let known = state.pending.iter().any(|c| c.command_id == command.command_id);
                    if !done && !known {
                        state.pending.push(command.clone());
                    }
                }
                // Only a stepwise command's last turn matters (turns only grow).
                Some(command::Body::Turn(turn)) => {
                    state.pending.retain(|c| turn_target(c) != Some(turn.target_command_id.as_str()));
                    if !state.status.borrow().done.contains_key(&turn.target_command_id) {
                        state.pending.push(command.clone());
                    }
                }
                _ => {}
            }
            state.outbound.clone()
        };
        if let Some(outbound) = outbound {
            // A closed session is not an error: the command is resent on reconnection.
            let _ =
                outbound.send(Ok(ControllerMessage { body: Some(controller_message::Body::Command(command)) })).await;
        }
        Ok(())
    }

    /// Waits until the agent reports command `command_id` finished.
    pub async fn wait_done(
        &self,
        sandbox_id: &str,
        command_id: &str,
        timeout: Duration,
    ) -> anyhow::Result<PhaseOutcome> {
        let mut status = self.status(sandbox_id).with_context(|| format!("unknown sandbox {sandbox_id}"))?;
        let wait = status.wait_for(|s| s.done.contains_key(command_id));
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(status)) => Ok(status.done[command_id].clone()),
            Ok(Err(_)) => bail!("sandbox {sandbox_id} was dropped while waiting for command {command_id}"),
            Err(_) => bail!(
                "command {command_id} on sandbox {sandbox_id} did not finish within {:.0} s",
                timeout.as_secs_f64()
            ),
        }
    }

    /// Starts serving agents on a Unix socket at `socket`.
    pub async fn serve(&self, socket: &Path) -> anyhow::Result<ServerHandle> {
        let server = self.start_server()?;
        server.listen(socket)?;
        Ok(server)
    }

    /// Starts a server that listens on no socket yet: [`ServerHandle::listen`] adds sockets (one
    /// per sandbox), all feeding the same service.
    pub fn start_server(&self) -> anyhow::Result<ServerHandle> {
        if *self.inner.closed.borrow() {
            bail!("this hub is closed");
        }
        let service = AgentServer::new(Service { hub: self.clone() })
            .max_decoding_message_size(sandbench_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(sandbench_proto::MAX_MESSAGE_BYTES);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (connections, incoming) = mpsc::channel::<std::io::Result<Guarded>>(64);
        let hello_timeout = self.inner.config.hello_timeout;
        let task = tokio::spawn(async move {
            let result = tonic::transport::Server::builder()
                .max_concurrent_streams(conn::MAX_STREAMS_PER_CONNECTION)
                .concurrency_limit_per_connection(conn::MAX_STREAMS_PER_CONNECTION as usize)
                // A session's call returns once its Hello is accepted; the stream goes on.
                .timeout(hello_timeout + CALL_MARGIN)
                // No keepalive pings: their answers would keep a silent connection from ever
                // being idle; a dead peer is silent, and the idle timeout closes it.
                .http2_keepalive_interval(None)
                .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
                .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_RESETS))
                .add_service(service)
                .serve_with_incoming_shutdown(ReceiverStream::new(incoming), async {
                    let _ = stop_rx.await;
                })
                .await;
            if let Err(err) = result {
                tracing::error!("agent server failed: {err}");
            }
        });
        Ok(ServerHandle {
            hub: self.clone(),
            connections,
            listeners: Mutex::new(Vec::new()),
            stop: Some(stop_tx),
            task: Some(task),
        })
    }

    /// Ends every session (agents will reconnect to whatever serves the socket next).
    fn disconnect_all(&self) {
        for state in lock(&self.inner.sandboxes).values_mut() {
            state.outbound = None;
            state.generation.send_modify(|g| *g += 1);
        }
    }

    /// Ends all sessions and waits until everything accepted is on disk. The hub can no longer
    /// be used; reopen the run directory with [`Hub::open`] to continue.
    pub async fn close(&self) {
        self.inner.closed.send_replace(true);
        self.disconnect_all();
        // The tails of output still open go where the log ends.
        let tails: Vec<StoredEvent> = {
            let mut outputs = lock(&self.inner.outputs);
            let mut sandboxes: Vec<&String> = outputs.keys().collect();
            sandboxes.sort();
            let sandboxes: Vec<String> = sandboxes.into_iter().cloned().collect();
            sandboxes.iter().flat_map(|id| outputs.get_mut(id).map(|o| o.close_all(id)).unwrap_or_default()).collect()
        };
        if let Some(log) = self.inner.log.write().await.take() {
            if !tails.is_empty() {
                let bytes = lines(&tails);
                if let Err(err) = log.append(bytes).await {
                    tracing::warn!("cannot write the tails of output to {}: {err}", log.path().display());
                }
            }
            log.close().await;
        }
    }

    /// Accepts or refuses a Hello; on success queues the Welcome and the pending commands on
    /// `outbound` and returns the session's generation.
    fn accept(
        &self,
        hello: &sandbench_proto::v1::Hello,
        outbound: mpsc::Sender<Result<ControllerMessage, Status>>,
    ) -> Result<u64, Refused> {
        let mut sandboxes = lock(&self.inner.sandboxes);
        let refusal = match sandboxes.get(&hello.sandbox_id) {
            // Ids are the controller's container names; a long one is not worth a lookup.
            _ if hello.sandbox_id.len() > MAX_NAME_BYTES => {
                Some(format!("unknown sandbox {}", intake::shown_id(&hello.sandbox_id)))
            }
            None => Some(format!("unknown sandbox {}", intake::shown_id(&hello.sandbox_id))),
            Some(state) if !constant_time_eq(state.token.as_bytes(), hello.token.as_bytes()) => {
                let owner = sandboxes
                    .iter()
                    .find(|(_, s)| constant_time_eq(s.token.as_bytes(), hello.token.as_bytes()))
                    .map(|(id, _)| id.clone());
                Some(match owner {
                    Some(other) => format!("token reused: it belongs to sandbox {other}"),
                    None => "wrong token".to_string(),
                })
            }
            Some(state) if state.retired => Some(RETIRED.to_string()),
            Some(state) => misplaced(state.registration.placement, hello.placement.as_ref()),
        };
        if let Some(reason) = refusal {
            // A sandbox being torn down is retired before its container goes: its agent, cut
            // off, reconnects once or twice meanwhile. Expected, so not a warning.
            let retired = reason == RETIRED;
            drop(sandboxes);
            let timely = lock(&self.inner.refusals).record(&hello.sandbox_id, &reason);
            if timely {
                let (sandbox, boot) = (intake::shown_id(&hello.sandbox_id), intake::shown_id(&hello.boot_id));
                if retired {
                    tracing::info!(sandbox = %sandbox, boot = %boot, "refused an agent: {reason}");
                } else {
                    tracing::warn!(sandbox = %sandbox, boot = %boot, "refused an agent: {reason}");
                }
            }
            return Err(Refused { status: Status::unauthenticated(reason), late: !timely });
        }
        let Some(state) = sandboxes.get_mut(&hello.sandbox_id) else {
            return Err(Refused { status: Status::internal("sandbox vanished"), late: false });
        };
        if hello.journal_seq < state.persisted_seq {
            tracing::warn!(
                sandbox = %hello.sandbox_id,
                "agent journal ends at seq {} but {} are persisted: its journal was lost",
                hello.journal_seq,
                state.persisted_seq
            );
        }
        state.generation.send_modify(|g| *g += 1);
        let generation = *state.generation.borrow();
        // The Welcome and the pending commands are queued before the session is published: a
        // command sent once the Hello is known must not overtake the Welcome.
        let config = self.inner.config.clone();
        let welcome = Welcome {
            acked_seq: state.persisted_seq,
            heartbeat_interval_ms: config.heartbeat.as_millis() as u32,
            dead_after_intervals: config.dead_after,
            output_cap_bytes: config.output_cap_bytes,
        };
        let _ = outbound.try_send(Ok(ControllerMessage { body: Some(controller_message::Body::Welcome(welcome)) }));
        for command in &state.pending {
            let command = ControllerMessage { body: Some(controller_message::Body::Command(command.clone())) };
            let _ = outbound.try_send(Ok(command));
        }
        state.outbound = Some(outbound);
        let info = HelloInfo {
            boot_id: intake::text(hello.boot_id.clone(), MAX_NAME_BYTES),
            agent_version: intake::text(hello.agent_version.clone(), MAX_NAME_BYTES),
            facts: bounded_facts(hello.facts.clone().unwrap_or_default()),
            placement: state.registration.placement,
            at: Instant::now(),
        };
        state.status.send_modify(|s| {
            if s.last_hello.as_ref().map(|h| &h.boot_id) != Some(&hello.boot_id) {
                s.boots += 1;
            }
            s.connected = true;
            s.sessions += 1;
            s.first_hello.get_or_insert_with(|| info.clone());
            s.last_hello = Some(info);
        });
        tracing::info!(sandbox = %hello.sandbox_id, boot = %hello.boot_id, acked = state.persisted_seq, "agent connected");
        Ok(generation)
    }

    fn session_ended(&self, sandbox_id: &str, generation: u64) {
        if let Some(state) = lock(&self.inner.sandboxes).get_mut(sandbox_id)
            && *state.generation.borrow() == generation
        {
            state.outbound = None;
            state.status.send_modify(|s| s.connected = false);
        }
    }

    /// Persists a batch: drops what is already held, refuses gaps, keeps output within its cap
    /// and file chunks within their bounds, writes and fsyncs, then returns the highest seq now
    /// held (the cumulative ack; output past the cap is acknowledged without being written).
    async fn persist(&self, sandbox_id: &str, events: Vec<Event>) -> anyhow::Result<u64> {
        let persist_lock = {
            let sandboxes = lock(&self.inner.sandboxes);
            sandboxes.get(sandbox_id).context("unknown sandbox")?.persist.clone()
        };
        let _guard = persist_lock.lock().await;
        let held = lock(&self.inner.sandboxes).get(sandbox_id).context("unknown sandbox")?.persisted_seq;
        let events: Vec<Event> = events.into_iter().filter(|e| e.seq > held).collect();
        for (n, event) in events.iter().enumerate() {
            let expected = held + 1 + n as u64;
            if event.seq != expected {
                bail!("events out of order: got seq {} where {expected} was expected", event.seq);
            }
        }
        let new_seq = held + events.len() as u64;
        if new_seq == held {
            return Ok(held);
        }
        let persisted = self.intake(sandbox_id, events)?;
        let mut observations = 0u64;
        let mut finished = Vec::new();
        let mut yielded = Vec::new();
        let mut failed_observations: Vec<(String, String)> = Vec::new();
        for stored in &persisted {
            match &stored.body {
                StoredBody::Observation { command_id, metric, error, .. } => {
                    observations += 1;
                    if let Some(error) = error {
                        failed_observations.push((command_id.clone(), format!("{metric}: {error}")));
                    }
                }
                StoredBody::Yielded { command_id, index, untimed } => {
                    yielded.push((command_id.clone(), *index, *untimed))
                }
                StoredBody::PhaseDone { command_id, status, error } => finished.push((
                    command_id.clone(),
                    PhaseOutcome { status: status_from_name(status), error: error.clone() },
                )),
                _ => {}
            }
        }
        if !persisted.is_empty() {
            let log = self.inner.log.read().await;
            let log = log.as_ref().context("the hub is closed")?;
            log.append(lines(&persisted)).await.with_context(|| format!("cannot write {}", log.path().display()))?;
        }
        if self.inner.events.receiver_count() > 0 {
            for event in persisted {
                let _ = self.inner.events.send(event);
            }
        }
        let mut sandboxes = lock(&self.inner.sandboxes);
        let state = sandboxes.get_mut(sandbox_id).context("unknown sandbox")?;
        state.persisted_seq = new_seq;
        state.pending.retain(|c| {
            let target = turn_target(c).unwrap_or(&c.command_id);
            !finished.iter().any(|(id, _)| id == target)
        });
        state.status.send_modify(|s| {
            s.persisted_seq = new_seq;
            s.observations += observations;
            s.done.extend(finished);
            for (command_id, index, untimed) in yielded {
                if untimed {
                    s.untimed.insert(command_id.clone(), index);
                }
                let last = s.yielded.entry(command_id).or_default();
                *last = (*last).max(index);
            }
            for (command_id, error) in failed_observations {
                let errors = s.observation_errors.entry(command_id).or_default();
                if errors.len() < MAX_ERRORS_KEPT {
                    errors.push(error);
                }
            }
        });
        Ok(new_seq)
    }

    /// What of a batch (in order, contiguous) goes to the log: output within its cap (and the
    /// tail of a command's output where it ends), file chunks written or refused, texts bounded.
    fn intake(&self, sandbox_id: &str, events: Vec<Event>) -> anyhow::Result<Vec<StoredEvent>> {
        let config = self.inner.config.clone();
        let mut outputs = lock(&self.inner.outputs);
        let outputs =
            outputs.entry(sandbox_id.to_string()).or_insert_with(|| Outputs::new(config.output_cap_bytes, []));
        let mut files = lock(&self.inner.files);
        let files = files.entry(sandbox_id.to_string()).or_default();
        let mut out = Vec::new();
        for event in events {
            let (seq, unix_ms) = (event.seq, event.unix_ms);
            let Some(body) = event.body else { continue };
            let stored = |body| StoredEvent { sandbox: sandbox_id.to_string(), seq, unix_ms, body };
            match body {
                event::Body::Log(l) => {
                    let stream = stream_name(l.stream());
                    let command_id = intake::text(l.command_id, MAX_NAME_BYTES);
                    let (head, closed) = outputs.admit(sandbox_id, &command_id, (seq, unix_ms), &stream, l.chunk);
                    out.extend(closed);
                    if let Some(head) = head {
                        out.push(stored(StoredBody::Log {
                            command_id,
                            stream,
                            data: Data::from_bytes(head),
                            cut: None,
                        }));
                    }
                }
                event::Body::File(chunk) => {
                    let refused = self.write_chunk(sandbox_id, &chunk, files, &config.files)?;
                    out.push(stored(StoredBody::File {
                        command_id: intake::text(chunk.command_id, MAX_NAME_BYTES),
                        path: intake::text(chunk.path, MAX_FILE_PATH_BYTES),
                        offset: chunk.offset,
                        bytes: chunk.data.len() as u64,
                        last: chunk.last,
                        refused,
                    }));
                }
                event::Body::PhaseDone(d) => {
                    // The command's output ends here: its tail goes before its end.
                    out.extend(outputs.close(sandbox_id, &d.command_id));
                    out.push(stored(to_stored(event::Body::PhaseDone(d))));
                }
                body => out.push(stored(to_stored(body))),
            }
        }
        Ok(out)
    }

    /// Writes a file chunk where the sandbox's files go, or says why it is refused (nothing is
    /// written then). Only a failure of the controller's own disk is an error.
    fn write_chunk(
        &self,
        sandbox_id: &str,
        chunk: &sandbench_proto::v1::FileChunk,
        files: &mut Files,
        limits: &FileLimits,
    ) -> anyhow::Result<Option<String>> {
        let why = match crate::observations::store::sandbox_file(&self.inner.run_dir, sandbox_id, &chunk.path) {
            None => Some(format!("an unsafe path {}", intake::shown_id(&chunk.path))),
            Some(target) => match files.admit(limits, &chunk.path, chunk.offset, chunk.data.len()) {
                Ok(()) => {
                    crate::observations::store::write_file_chunk(&target, chunk.offset, &chunk.data)
                        .with_context(|| format!("cannot write {}", target.display()))?;
                    None
                }
                Err(why) => Some(why),
            },
        };
        if let Some(why) = &why
            && files.note_refusal() <= REFUSED_CHUNKS_LOGGED
        {
            tracing::warn!(sandbox = %sandbox_id, path = %intake::shown_id(&chunk.path), "refused a file chunk: {why}");
        }
        Ok(why)
    }
}

/// Time a session's call has past the Hello timeout to answer (a refusal may wait).
const CALL_MARGIN: Duration = Duration::from_secs(5);
/// The headers of one call: an agent sends a handful of short ones.
const MAX_HEADER_LIST_BYTES: u32 = 16 << 10;
/// Streams opened and reset before the server saw them (HTTP/2 rapid reset), per connection.
const MAX_PENDING_RESETS: usize = 20;

/// Errors of failed observations kept per command in [`AgentStatus`].
const MAX_ERRORS_KEPT: usize = 1000;
/// Refused file chunks logged one by one per sandbox (all are in the log, marked).
const REFUSED_CHUNKS_LOGGED: u64 = 10;
/// Longest file path kept in the log.
const MAX_FILE_PATH_BYTES: usize = 1024;

/// Why a Hello was refused, and whether the answer waits (refusals coming too fast).
struct Refused {
    status: Status,
    late: bool,
}

/// Events as log lines.
fn lines(events: &[StoredEvent]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for event in events {
        // A stored event is plain data: serialising it cannot fail.
        if serde_json::to_writer(&mut bytes, event).is_ok() {
            bytes.push(b'\n');
        }
    }
    bytes
}

/// `(sandbox, key) → value` as `sandbox → [(key, value)]`.
fn per_sandbox<V>(map: HashMap<(String, String), V>) -> HashMap<String, Vec<(String, V)>> {
    let mut out: HashMap<String, Vec<(String, V)>> = HashMap::new();
    for ((sandbox, key), value) in map {
        out.entry(sandbox).or_default().push((key, value));
    }
    out
}

/// Facts with every text bounded.
/// Why a Hello is refused for the place in the run its agent says, if it is: a sandbox
/// registered with a placement has an agent that says that one (the controller set it in the
/// agent's environment), no other and not none.
fn misplaced(registered: Option<Placement>, said: Option<&sandbench_proto::v1::Placement>) -> Option<String> {
    let registered = registered?;
    let said = match said.map(Placement::try_from) {
        Some(Ok(said)) if said == registered => return None,
        Some(Ok(said)) => said.to_string(),
        Some(Err(no_side)) => no_side.to_string(),
        None => "none".to_string(),
    };
    Some(format!("the sandbox is the {registered}; its agent says {said}"))
}

fn bounded_facts(f: Facts) -> Facts {
    Facts {
        kernel: intake::text(f.kernel, MAX_NAME_BYTES),
        cpu_model: intake::text(f.cpu_model, MAX_NAME_BYTES),
        os_release: intake::text(f.os_release, MAX_NAME_BYTES),
        ..f
    }
}

impl SandboxState {
    fn new(token: String, retired: bool, registration: Registration, persisted_seq: u64) -> SandboxState {
        SandboxState {
            token,
            retired,
            registration,
            persisted_seq,
            generation: watch::Sender::new(0),
            outbound: None,
            pending: Vec::new(),
            status: watch::Sender::new(AgentStatus { persisted_seq, ..AgentStatus::default() }),
            persist: Arc::default(),
        }
    }
}

/// A running server, listening on any number of Unix sockets; stop it explicitly.
pub struct ServerHandle {
    hub: Hub,
    /// Connections accepted on any socket, handed to the one gRPC server.
    connections: mpsc::Sender<std::io::Result<Guarded>>,
    listeners: Mutex<Vec<(PathBuf, tokio::task::JoinHandle<()>)>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ServerHandle {
    /// The first socket served (the only one, for a server started by [`Hub::serve`]).
    pub fn socket(&self) -> PathBuf {
        lock(&self.listeners).first().map(|(path, _)| path.clone()).unwrap_or_default()
    }

    /// The sockets served now.
    pub fn sockets(&self) -> Vec<PathBuf> {
        lock(&self.listeners).iter().map(|(path, _)| path.clone()).collect()
    }

    /// Also accepts agents on `socket` (a stale socket file there is replaced). Serving a socket
    /// already served does nothing.
    pub fn listen(&self, socket: &Path) -> anyhow::Result<()> {
        let mut listeners = lock(&self.listeners);
        if listeners.iter().any(|(path, _)| path == socket) {
            return Ok(());
        }
        // sun_path holds 108 bytes with its terminating NUL.
        if socket.as_os_str().len() > 107 {
            bail!(
                "the socket path {} is {} bytes long, more than a Unix socket allows (107): use a shorter --out folder",
                socket.display(),
                socket.as_os_str().len()
            );
        }
        match std::fs::remove_file(socket) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot remove stale socket {}", socket.display())),
        }
        let listener = UnixListener::bind(socket).with_context(|| format!("cannot listen on {}", socket.display()))?;
        let connections = self.connections.clone();
        let path = socket.to_path_buf();
        let config = self.hub.inner.config.clone();
        let slots = Arc::new(tokio::sync::Semaphore::new(conn::MAX_CONNECTIONS_PER_SOCKET));
        let accept = tokio::spawn(async move {
            let mut refused = 0u64;
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let Ok(slot) = slots.clone().try_acquire_owned() else {
                            // Closed at once: the socket holds its bound of connections.
                            refused += 1;
                            if refused.is_power_of_two() {
                                tracing::warn!(
                                    "refused {refused} connection(s) on {}: it holds {} already",
                                    path.display(),
                                    conn::MAX_CONNECTIONS_PER_SOCKET
                                );
                            }
                            continue;
                        };
                        let guarded = Guarded::new(stream, slot, config.hello_timeout, config.idle_timeout);
                        if connections.send(Ok(guarded)).await.is_err() {
                            return;
                        }
                    }
                    Err(err) => {
                        tracing::warn!("cannot accept on {}: {err}", path.display());
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        listeners.push((socket.to_path_buf(), accept));
        Ok(())
    }

    /// Stops accepting on `socket` and removes it; sessions already open go on.
    pub fn unlisten(&self, socket: &Path) {
        let mut listeners = lock(&self.listeners);
        if let Some(at) = listeners.iter().position(|(path, _)| path == socket) {
            let (path, accept) = listeners.remove(at);
            accept.abort();
            let _ = std::fs::remove_file(path);
        }
    }

    /// Stops accepting, ends every session, and removes the sockets.
    pub async fn stop(mut self) {
        let listeners = std::mem::take(&mut *lock(&self.listeners));
        for (_, accept) in &listeners {
            accept.abort();
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.hub.disconnect_all();
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(3), &mut task).await.is_err()
        {
            task.abort();
        }
        for (path, _) in listeners {
            let _ = std::fs::remove_file(path);
        }
    }
}

struct Service {
    hub: Hub,
}

type Outbound = mpsc::Sender<Result<ControllerMessage, Status>>;

#[tonic::async_trait]
impl Agent for Service {
    type SessionStream = ReceiverStream<Result<ControllerMessage, Status>>;
    type FetchStream = ReceiverStream<Result<FetchReply, Status>>;

    async fn fetch(&self, request: Request<FetchRequest>) -> Result<Response<Self::FetchStream>, Status> {
        let request = request.into_inner();
        let (command, side) = self.hub.fetch_caller(&request.sandbox_id, &request.token)?;
        let bridge = self.hub.bridge().ok_or_else(|| {
            Status::failed_precondition("this run has no registry bridge (sandbox.network is not \"registries\")")
        })?;
        let ask = crate::bridge::Ask {
            sandbox: request.sandbox_id,
            side,
            command,
            method: request.method,
            target: request.target,
            accept: request.accept,
        };
        Ok(Response::new(bridge.serve(ask)))
    }

    async fn session(
        &self,
        request: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let config = self.hub.inner.config.clone();
        let greeted = request.extensions().get::<conn::Greeted>().cloned();
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(config.hello_timeout, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no Hello"))??;
        let Some(AgentMessage { body: Some(agent_message::Body::Hello(hello)) }) = first else {
            return Err(Status::invalid_argument("the first message must be Hello"));
        };
        let (tx, rx) = mpsc::channel(256);
        let generation = match self.hub.accept(&hello, tx.clone()) {
            Ok(generation) => generation,
            Err(Refused { status, late }) => {
                if late {
                    // Refusals coming too fast: each costs the caller a wait.
                    tokio::time::sleep(intake::REFUSAL_DELAY).await;
                }
                return Err(status);
            }
        };
        if let Some(greeted) = greeted {
            greeted.mark();
        }
        let hub = self.hub.clone();
        tokio::spawn(async move {
            let sandbox_id = hello.sandbox_id;
            if let Err(err) = run_session(&hub, &sandbox_id, generation, inbound, &tx).await {
                tracing::info!(sandbox = %sandbox_id, "agent session ended: {err:#}");
            }
            hub.session_ended(&sandbox_id, generation);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

async fn run_session(
    hub: &Hub,
    sandbox_id: &str,
    generation: u64,
    mut inbound: Streaming<AgentMessage>,
    tx: &Outbound,
) -> anyhow::Result<()> {
    let config = hub.inner.config.clone();
    let mut current = lock(&hub.inner.sandboxes).get(sandbox_id).context("unknown sandbox")?.generation.subscribe();
    let mut closed = hub.inner.closed.subscribe();
    let mut heartbeat = tokio::time::interval(config.heartbeat);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_heard = Instant::now();
    loop {
        tokio::select! {
            message = inbound.message() => {
                let Some(message) = message? else { bail!("the agent closed the stream") };
                last_heard = Instant::now();
                match message.body {
                    Some(agent_message::Body::Events(batch)) => {
                        let seq = hub.persist(sandbox_id, batch.events).await?;
                        let ack = ControllerMessage { body: Some(controller_message::Body::Ack(sandbench_proto::v1::Ack { seq })) };
                        tx.send(Ok(ack)).await.context("the agent went away")?;
                    }
                    Some(agent_message::Body::Heartbeat(_)) => {}
                    Some(agent_message::Body::Hello(_)) => bail!("a second Hello on one stream"),
                    None => {}
                }
            }
            _ = async { current.wait_for(|g| *g != generation).await.map(|_| ()) } => bail!("superseded by a newer session"),
            _ = async { closed.wait_for(|c| *c).await.map(|_| ()) } => bail!("the hub closed"),
            _ = heartbeat.tick() => {
                if last_heard.elapsed() >= config.heartbeat * config.dead_after {
                    bail!("no word from the agent for {:.1} s", last_heard.elapsed().as_secs_f64());
                }
                let beat = ControllerMessage { body: Some(controller_message::Body::Heartbeat(Heartbeat { unix_ms: unix_ms() })) };
                let _ = tx.try_send(Ok(beat));
            }
        }
    }
}

fn stream_name(stream: sandbench_proto::v1::LogStream) -> String {
    stream.as_str_name().trim_start_matches("LOG_STREAM_").to_ascii_lowercase()
}

/// An event's body as stored, its texts bounded. (Logs and file chunks go through the bounds
/// of [`Hub::intake`] first.)
fn to_stored(body: event::Body) -> StoredBody {
    let name = |text: String| intake::text(text, MAX_NAME_BYTES);
    let error = |text: String| intake::text(text, MAX_ERROR_BYTES);
    match body {
        event::Body::Observation(o) => {
            let (value, failure) = match o.outcome {
                Some(observation::Outcome::Value(v)) if v.is_finite() => (Some(v), None),
                Some(observation::Outcome::Value(v)) => (None, Some(format!("non-finite value {v}"))),
                Some(observation::Outcome::Error(e)) => (None, Some(error(e))),
                None => (None, Some("no value and no error".to_string())),
            };
            StoredBody::Observation {
                command_id: name(o.command_id),
                metric: name(o.metric),
                trial: o.trial,
                value,
                error: failure,
                unit: name(o.unit),
                sample: o.sample,
            }
        }
        event::Body::Log(l) => StoredBody::Log {
            stream: stream_name(l.stream()),
            command_id: name(l.command_id),
            data: Data::from_bytes(l.chunk),
            cut: None,
        },
        event::Body::PhaseStarted(p) => {
            StoredBody::PhaseStarted { command_id: name(p.command_id), phase: name(p.phase), trial: p.trial }
        }
        event::Body::Yielded(y) => {
            StoredBody::Yielded { command_id: name(y.command_id), index: y.index, untimed: y.untimed_rest }
        }
        event::Body::PhaseDone(d) => StoredBody::PhaseDone {
            status: status_name(d.status()).to_string(),
            command_id: name(d.command_id),
            error: error(d.error),
        },
        event::Body::File(f) => StoredBody::File {
            command_id: name(f.command_id),
            path: intake::text(f.path, MAX_FILE_PATH_BYTES),
            offset: f.offset,
            bytes: f.data.len() as u64,
            last: f.last,
            refused: None,
        },
    }
}

/// The command a Turn is for; None for any other command.
fn turn_target(command: &Command) -> Option<&str> {
    match &command.body {
        Some(command::Body::Turn(turn)) => Some(&turn.target_command_id),
        _ => None,
    }
}

fn status_name(status: PhaseStatus) -> &'static str {
    match status {
        PhaseStatus::Ok => "ok",
        PhaseStatus::Failed => "failed",
        PhaseStatus::Canceled => "canceled",
        PhaseStatus::Unspecified => "unspecified",
    }
}

fn status_from_name(name: &str) -> PhaseStatus {
    match name {
        "ok" => PhaseStatus::Ok,
        "failed" => PhaseStatus::Failed,
        "canceled" => PhaseStatus::Canceled,
        _ => PhaseStatus::Unspecified,
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Whether two tokens are equal, in time that does not depend on where they differ (only on
/// their lengths, which are public: every token is 64 hex digits).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(a.ct_eq(b))
}

/// 32 random bytes from the kernel, hex-encoded.
fn random_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

mod conn;
#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod token_tests {
    #[test]
    fn a_registration_is_kept_beside_its_token_and_an_old_token_file_still_reads() {
        use sandbench_proto::{Placement, Side};

        use super::{Hub, HubConfig, Registration, registrations};
        let dir = tempfile::tempdir().unwrap();
        let placement = Placement { side: Side::Head, pair: 1, attempt: 2 };
        let hub = Hub::open(dir.path(), HubConfig::default()).unwrap();
        let registered = Registration { role: Some("head1-r2".into()), placement: Some(placement) };
        hub.register_as("sandbench-r-head1-r2", registered.clone()).unwrap();
        hub.register("sandbench-r-debug").unwrap();
        let found = registrations(dir.path()).unwrap();
        assert_eq!(found["sandbench-r-head1-r2"], registered);
        assert_eq!(found["sandbench-r-debug"], Registration::default());
        // Kept when the hub is reopened (a restarted controller) and its file rewritten.
        let reopened = Hub::open(dir.path(), HubConfig::default()).unwrap();
        reopened.retire("sandbench-r-debug").unwrap();
        assert_eq!(registrations(dir.path()).unwrap()["sandbench-r-head1-r2"], registered);
        // A token file written before registrations were kept.
        let old = tempfile::tempdir().unwrap();
        std::fs::write(old.path().join(super::TOKENS_FILE), r#"{"sandbench-r-base":{"token":"ab","retired":true}}"#)
            .unwrap();
        assert_eq!(registrations(old.path()).unwrap()["sandbench-r-base"], Registration::default());
        assert!(registrations(tempfile::tempdir().unwrap().path()).unwrap().is_empty());
    }

    #[test]
    fn a_hello_must_say_the_placement_its_sandbox_was_registered_with() {
        use sandbench_proto::{Placement, Side, v1};

        use super::misplaced;
        let head = Placement { side: Side::Head, pair: 0, attempt: 1 };
        assert_eq!(misplaced(Some(head), Some(&head.into())), None);
        assert_eq!(misplaced(None, None), None, "a sandbox of no comparison");
        assert_eq!(misplaced(None, Some(&head.into())), None);
        let base = Placement { side: Side::Base, ..head };
        assert_eq!(
            misplaced(Some(head), Some(&base.into())).unwrap(),
            "the sandbox is the head of pair 0, attempt 1; its agent says base of pair 0, attempt 1"
        );
        let later = Placement { attempt: 2, ..head };
        assert!(misplaced(Some(head), Some(&later.into())).is_some());
        assert!(misplaced(Some(head), None).unwrap().ends_with("its agent says none"));
        let sideless = v1::Placement { side: 0, pair: 0, attempt: 1 };
        assert!(misplaced(Some(head), Some(&sideless)).unwrap().ends_with("a placement without a side (0)"));
    }

    #[test]
    fn tokens_match_only_when_every_byte_does() {
        let token = super::random_token().unwrap();
        assert_eq!(token.len(), 64);
        assert!(super::constant_time_eq(token.as_bytes(), token.clone().as_bytes()));
        let mut other = token.clone().into_bytes();
        other[63] = if other[63] == b'0' { b'1' } else { b'0' };
        assert!(!super::constant_time_eq(token.as_bytes(), &other));
        assert!(!super::constant_time_eq(token.as_bytes(), &token.as_bytes()[..63]));
        assert!(!super::constant_time_eq(b"", token.as_bytes()));
    }

    #[test]
    fn the_dead_man_window_tolerates_a_stalled_controller_and_can_be_set() {
        use super::HubConfig;
        use std::time::Duration;
        let default = HubConfig::default();
        assert!(default.dead_man() >= Duration::from_secs(30), "{default:?}");
        assert_eq!(default.heartbeat, Duration::from_millis(500));
        let config = HubConfig::with_dead_man(Duration::from_millis(500), Duration::from_secs(45));
        assert_eq!((config.dead_after, config.dead_man()), (90, Duration::from_secs(45)));
        // Rounded up to whole intervals, and never under two.
        assert_eq!(HubConfig::with_dead_man(Duration::from_secs(1), Duration::from_millis(2500)).dead_after, 3);
        assert_eq!(HubConfig::with_dead_man(Duration::from_secs(1), Duration::from_millis(10)).dead_after, 2);
    }
}
