//! The connection to the controller: dial the Unix socket, say `Hello`, resend what the
//! controller does not hold yet, stream new events as the journal makes them durable, take
//! commands, and exchange heartbeats. Reconnects after any failure; gives up (dead-man switch)
//! when the controller has been silent for `dead_after` heartbeat intervals.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use hyper_util::rt::TokioIo;
use sandbench_proto::v1::agent_client::AgentClient;
use sandbench_proto::v1::{
    AgentMessage, EventBatch, Heartbeat, Hello, Welcome, agent_message, command, controller_message,
};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;

use crate::commands::Workloads;
use crate::journal::{JournalSource, now_unix_ms};

/// Events sent but not yet acknowledged, at most.
const WINDOW_EVENTS: u64 = 65_536;
const BATCH_EVENTS: usize = 4096;
const BATCH_BYTES: usize = 512 * 1024;

pub struct Identity {
    pub sandbox_id: String,
    pub token: String,
    pub boot_id: String,
    pub socket: PathBuf,
    /// The sandbox's side, pair and attempt, as the controller set them (none outside a
    /// comparison).
    pub placement: Option<sandbench_proto::Placement>,
}

/// How a session loop ended for good.
#[derive(Debug)]
pub enum Exit {
    /// The controller asked the agent to stop and everything was acknowledged.
    Shutdown,
    /// The controller refused this agent's token.
    Refused(String),
    /// The controller was silent for too long.
    ControllerLost(Duration),
    /// A local signal (SIGTERM/SIGINT).
    Signal,
}

pub struct Session {
    pub identity: Identity,
    pub state_dir: std::path::PathBuf,
    pub journal: JournalSource,
    pub durable: watch::Receiver<u64>,
    pub workloads: Workloads,
    heartbeat: Duration,
    dead_after: u32,
    last_heard: Instant,
    shutting_down: bool,
}

enum End {
    Exit(Exit),
    Retry(anyhow::Error),
}

impl Session {
    pub fn new(
        identity: Identity,
        state_dir: std::path::PathBuf,
        journal: JournalSource,
        durable: watch::Receiver<u64>,
        workloads: Workloads,
    ) -> Session {
        Session {
            identity,
            state_dir,
            journal,
            durable,
            workloads,
            // Until the controller says otherwise: a minute to reach it at start.
            heartbeat: Duration::from_secs(1),
            dead_after: 60,
            last_heard: Instant::now(),
            shutting_down: false,
        }
    }

    /// Writes what `sandbox-agent status` shows.
    fn publish(&self, connected: bool, sent: u64, acked: u64) {
        let current = crate::journal::lock(&self.workloads.current).clone();
        let status = crate::status::AgentStatus {
            sandbox_id: self.identity.sandbox_id.clone(),
            pid: std::process::id(),
            connected,
            journal_seq: *self.durable.borrow(),
            sent_seq: sent,
            acked_seq: acked,
            command_id: current.as_ref().map(|c| c.0.clone()),
            phase: current.as_ref().map(|c| c.1.clone()),
            trial: current.as_ref().map(|c| c.2),
            running: current.as_ref().is_some_and(|c| c.3),
            updated_unix_ms: now_unix_ms(),
        };
        crate::status::write(&self.state_dir, &status);
    }

    fn dead_window(&self) -> Duration {
        self.heartbeat * self.dead_after
    }

    /// Runs sessions until one ends for good.
    pub async fn run(&mut self, stop: &mut watch::Receiver<bool>) -> Exit {
        let mut backoff = Duration::from_millis(20);
        let mut connected_once = false;
        loop {
            let end = tokio::select! {
                end = self.connect_once(&mut connected_once) => end,
                _ = stop.changed() => End::Exit(Exit::Signal),
            };
            self.publish(false, 0, 0);
            match end {
                End::Exit(exit) => return exit,
                End::Retry(err) => {
                    tracing::warn!("connection to the controller ended: {err:#}");
                }
            }
            let silent = self.last_heard.elapsed();
            if silent >= self.dead_window() {
                return Exit::ControllerLost(silent);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    async fn connect_once(&mut self, connected_once: &mut bool) -> End {
        match self.session(connected_once).await {
            Ok(exit) => End::Exit(exit),
            Err(err) => match err.downcast::<Refusal>() {
                Ok(refusal) => End::Exit(Exit::Refused(refusal.0)),
                Err(err) => End::Retry(err),
            },
        }
    }

    /// Dials the controller's socket.
    async fn connect(&self) -> anyhow::Result<AgentClient<tonic::transport::Channel>> {
        let socket = self.identity.socket.clone();
        // The URI is never resolved: the connector dials the Unix socket (no DNS, no NSS).
        let channel = Endpoint::from_static("http://controller.invalid")
            .connect_timeout(Duration::from_secs(2))
            .connect_with_connector(tower::service_fn(move |_| {
                let socket = socket.clone();
                async move { UnixStream::connect(socket).await.map(TokioIo::new) }
            }))
            .await
            .with_context(|| format!("cannot reach the controller at {}", self.identity.socket.display()))?;
        Ok(AgentClient::new(channel)
            .max_decoding_message_size(sandbench_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(sandbench_proto::MAX_MESSAGE_BYTES))
    }

    /// Takes the controller's heartbeat, dead-man window and output cap from its Welcome.
    fn welcomed(&mut self, welcome: &Welcome, connected_once: &mut bool) {
        self.last_heard = Instant::now();
        self.heartbeat = Duration::from_millis(u64::from(welcome.heartbeat_interval_ms.max(10)));
        self.dead_after = welcome.dead_after_intervals.max(2);
        self.workloads.set_output_cap(welcome.output_cap_bytes);
        if *connected_once {
            tracing::info!("reconnected; resending from seq {}", welcome.acked_seq + 1);
        }
        *connected_once = true;
    }

    /// One message from the controller: an acknowledgement (never past what was sent), a
    /// command, or word that it is alive.
    fn on_message(&mut self, body: Option<controller_message::Body>, acked: &mut u64, sent: u64) {
        self.last_heard = Instant::now();
        match body {
            Some(controller_message::Body::Ack(ack)) => *acked = (*acked).max(ack.seq.min(sent)),
            Some(controller_message::Body::Command(cmd)) => match cmd.body {
                Some(command::Body::Shutdown(_)) => {
                    self.shutting_down = true;
                    self.workloads.cancel_all();
                }
                Some(body) => self.workloads.handle(cmd.command_id, body),
                None => {}
            },
            Some(controller_message::Body::Heartbeat(_)) | Some(controller_message::Body::Welcome(_)) | None => {}
        }
    }

    async fn session(&mut self, connected_once: &mut bool) -> anyhow::Result<Exit> {
        let mut client = self.connect().await?;
        let (tx, rx) = mpsc::channel::<AgentMessage>(16);
        let hello = Hello {
            sandbox_id: self.identity.sandbox_id.clone(),
            token: self.identity.token.clone(),
            boot_id: self.identity.boot_id.clone(),
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            facts: Some(crate::facts::collect()),
            journal_seq: *self.durable.borrow(),
            placement: self.identity.placement.map(Into::into),
        };
        tx.send(message(agent_message::Body::Hello(hello))).await.map_err(|_| anyhow!("stream closed"))?;
        let response = client.session(ReceiverStream::new(rx)).await.map_err(refusal_or_error)?;
        let mut inbound = response.into_inner();
        let first = tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .context("no answer to Hello within 10 s")?
            .map_err(refusal_or_error)?;
        let welcome = match first.and_then(|m| m.body) {
            Some(controller_message::Body::Welcome(welcome)) => welcome,
            other => bail!("expected Welcome, got {other:?}"),
        };
        self.welcomed(&welcome, connected_once);
        crate::bridge::connected(client.clone(), &self.identity.sandbox_id, &self.identity.token);

        let mut acked = welcome.acked_seq;
        let mut reader = self.journal.reader_at(acked + 1).context("cannot read the journal")?;
        if reader.next_seq() != acked + 1 {
            bail!("the controller holds seq {acked} but this journal ends at {}", reader.next_seq().saturating_sub(1));
        }
        let mut heartbeat = tokio::time::interval(self.heartbeat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Memory freed after a burst goes back to the kernel once the agent is idle again.
        let mut trimmed_at_seq = None;
        let mut published = Instant::now();
        loop {
            let durable = *self.durable.borrow();
            let sent = reader.next_seq() - 1;
            let have_events = sent < durable;
            let window_open = sent - acked < WINDOW_EVENTS;
            if self.shutting_down && acked >= durable {
                return Ok(Exit::Shutdown);
            }
            tokio::select! {
                biased;
                incoming = inbound.message() => {
                    let Some(msg) = incoming.map_err(refusal_or_error)? else {
                        bail!("the controller closed the stream");
                    };
                    self.on_message(msg.body, &mut acked, sent);
                }
                permit = tx.reserve(), if have_events && window_open => {
                    let permit = permit.map_err(|_| anyhow!("stream closed"))?;
                    let events = reader.read_batch(durable, BATCH_EVENTS, BATCH_BYTES).context("cannot read the journal")?;
                    permit.send(message(agent_message::Body::Events(EventBatch { events })));
                    if published.elapsed() > Duration::from_millis(100) {
                        published = Instant::now();
                        self.publish(true, reader.next_seq() - 1, acked);
                    }
                }
                changed = self.durable.changed(), if !have_events => {
                    changed.map_err(|_| anyhow!("the journal writer stopped"))?;
                }
                _ = heartbeat.tick() => {
                    let silent = self.last_heard.elapsed();
                    if silent >= self.dead_window() {
                        bail!("no word from the controller for {:.1} s", silent.as_secs_f64());
                    }
                    self.publish(true, sent, acked);
                    // A full queue already tells the controller we are alive.
                    let _ = tx.try_send(message(agent_message::Body::Heartbeat(Heartbeat { unix_ms: now_unix_ms() })));
                    if acked == durable && trimmed_at_seq != Some(durable) {
                        trimmed_at_seq = Some(durable);
                        crate::release_free_memory();
                    }
                }
            }
        }
    }
}

fn message(body: agent_message::Body) -> AgentMessage {
    AgentMessage { body: Some(body) }
}

/// The controller refused this agent; retrying would not help.
#[derive(Debug)]
struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused by the controller: {}", self.0)
    }
}

impl std::error::Error for Refusal {}

fn refusal_or_error(status: tonic::Status) -> anyhow::Error {
    match status.code() {
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => Refusal(status.message().to_string()).into(),
        _ => anyhow::Error::new(status),
    }
}
