//! The controller's side of protocol v1, driven by a hand-written agent over a real Unix socket:
//! duplicates dropped, gaps refused, acks cumulative, commands resent until done, tokens checked.

use std::time::Duration;

use hyper_util::rt::TokioIo;
use sandbench::server::{Hub, HubConfig, ServerHandle};
use sandbench::store::read_events;
use sandbench_proto::v1::agent_client::AgentClient;
use sandbench_proto::v1::{
    AgentMessage, Command, ControllerMessage, Event, EventBatch, Hello, Observation, PhaseDone, PhaseStatus, RunPhase,
    Welcome, agent_message, command, controller_message, event, observation,
};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::{Channel, Endpoint};

struct Fixture {
    _dir: tempfile::TempDir,
    hub: Hub,
    server: ServerHandle,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::open(dir.path(), HubConfig::default()).unwrap();
    let server = hub.serve(&dir.path().join("agent.sock")).await.unwrap();
    Fixture { _dir: dir, hub, server }
}

async fn client(f: &Fixture) -> AgentClient<Channel> {
    let socket = f.server.socket().to_path_buf();
    let channel = Endpoint::from_static("http://controller.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move { UnixStream::connect(socket).await.map(TokioIo::new) }
        }))
        .await
        .unwrap();
    AgentClient::new(channel)
}

struct Session {
    tx: mpsc::Sender<AgentMessage>,
    rx: Streaming<ControllerMessage>,
    welcome: Welcome,
}

async fn open(f: &Fixture, sandbox: &str, token: &str) -> Result<Session, tonic::Status> {
    let (tx, rx) = mpsc::channel(16);
    let hello =
        Hello { sandbox_id: sandbox.into(), token: token.into(), boot_id: "boot-1".into(), ..Default::default() };
    tx.send(AgentMessage { body: Some(agent_message::Body::Hello(hello)) }).await.unwrap();
    let mut rx = client(f).await.session(ReceiverStream::new(rx)).await?.into_inner();
    let welcome = match rx.message().await?.and_then(|m| m.body) {
        Some(controller_message::Body::Welcome(w)) => w,
        other => panic!("expected Welcome, got {other:?}"),
    };
    Ok(Session { tx, rx, welcome })
}

impl Session {
    async fn send(&self, events: Vec<Event>) {
        let batch = AgentMessage { body: Some(agent_message::Body::Events(EventBatch { events })) };
        self.tx.send(batch).await.unwrap();
    }

    /// The next message that is not a heartbeat, if one comes within `wait`.
    async fn next(&mut self, wait: Duration) -> Option<controller_message::Body> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.message()).await {
                Err(_) | Ok(Err(_)) | Ok(Ok(None)) => return None,
                Ok(Ok(Some(ControllerMessage { body: Some(controller_message::Body::Heartbeat(_)) }))) => continue,
                Ok(Ok(Some(message))) => return message.body,
            }
        }
    }

    async fn ack(&mut self) -> u64 {
        match self.next(Duration::from_secs(5)).await {
            Some(controller_message::Body::Ack(ack)) => ack.seq,
            other => panic!("expected Ack, got {other:?}"),
        }
    }
}

fn observations(seqs: std::ops::RangeInclusive<u64>) -> Vec<Event> {
    seqs.map(|seq| Event {
        seq,
        unix_ms: 1,
        body: Some(event::Body::Observation(Observation {
            command_id: "c".into(),
            metric: "m".into(),
            trial: seq as u32,
            outcome: Some(observation::Outcome::Value(seq as f64)),
            unit: "ms".into(),
        })),
    })
    .collect()
}

fn run_phase(id: &str) -> Command {
    Command {
        command_id: id.into(),
        body: Some(command::Body::RunPhase(RunPhase { phase: "synthetic".into(), trial: 0, plan: b"{}".to_vec() })),
    }
}

#[tokio::test]
async fn duplicates_are_dropped_gaps_refused_and_acks_cumulative() {
    let f = fixture().await;
    let token = f.hub.register("sb").unwrap();
    let mut s = open(&f, "sb", &token).await.unwrap();
    assert_eq!(s.welcome.acked_seq, 0);
    s.send(observations(1..=10)).await;
    assert_eq!(s.ack().await, 10);
    // A resend overlapping what is held: only 11..=15 are new.
    s.send(observations(5..=15)).await;
    assert_eq!(s.ack().await, 15);
    // Entirely old: acked again, nothing written.
    s.send(observations(1..=3)).await;
    assert_eq!(s.ack().await, 15);
    // A gap ends the session without writing anything.
    s.send(observations(20..=21)).await;
    assert_eq!(s.next(Duration::from_secs(5)).await, None, "the session must end on a gap");

    // The next session resumes after the last held seq.
    let s = open(&f, "sb", &token).await.unwrap();
    assert_eq!(s.welcome.acked_seq, 15);
    f.hub.close().await;
    let seqs: Vec<u64> = read_events(&f.hub.log_path()).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=15).collect::<Vec<_>>());
    assert_eq!(f.hub.status("sb").unwrap().borrow().observations, 15);
}

#[tokio::test]
async fn commands_are_resent_after_reconnection_until_done() {
    let f = fixture().await;
    let token = f.hub.register("sb").unwrap();
    f.hub.send("sb", run_phase("c1")).await.unwrap();
    let mut s = open(&f, "sb", &token).await.unwrap();
    match s.next(Duration::from_secs(5)).await {
        Some(controller_message::Body::Command(c)) => assert_eq!(c.command_id, "c1"),
        other => panic!("expected the command, got {other:?}"),
    }
    drop(s);
    // Not done yet: delivered again to the next session.
    let mut s = open(&f, "sb", &token).await.unwrap();
    match s.next(Duration::from_secs(5)).await {
        Some(controller_message::Body::Command(c)) => assert_eq!(c.command_id, "c1"),
        other => panic!("expected the command again, got {other:?}"),
    }
    let done = PhaseDone { command_id: "c1".into(), status: PhaseStatus::Ok as i32, error: String::new() };
    s.send(vec![Event { seq: 1, unix_ms: 1, body: Some(event::Body::PhaseDone(done)) }]).await;
    assert_eq!(s.ack().await, 1);
    let outcome = f.hub.wait_done("sb", "c1", Duration::from_secs(5)).await.unwrap();
    assert_eq!(outcome.status, PhaseStatus::Ok);
    drop(s);
    // Done: not sent again, even when the controller repeats it.
    f.hub.send("sb", run_phase("c1")).await.unwrap();
    let mut s = open(&f, "sb", &token).await.unwrap();
    assert_eq!(s.next(Duration::from_millis(700)).await, None);
}

#[tokio::test]
async fn unknown_wrong_and_borrowed_tokens_are_refused_and_recorded() {
    let f = fixture().await;
    let a = f.hub.register("a").unwrap();
    let _b = f.hub.register("b").unwrap();
    let refused = |r: Result<Session, tonic::Status>| match r {
        Ok(_) => panic!("accepted"),
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::Unauthenticated);
            status.message().to_string()
        }
    };
    assert_eq!(refused(open(&f, "nobody", &a).await), "unknown sandbox \"nobody\"");
    assert_eq!(refused(open(&f, "b", "nope").await), "wrong token");
    assert_eq!(refused(open(&f, "b", &a).await), "token reused: it belongs to sandbox a");
    assert_eq!(f.hub.refusals().len(), 3);
    assert!(open(&f, "a", &a).await.is_ok());
    f.hub.retire("a").unwrap();
    assert_eq!(refused(open(&f, "a", &a).await), "token reused: the sandbox was retired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_sent_the_moment_an_agent_says_hello_comes_after_the_welcome() {
    let f = fixture().await;
    // The window is narrow: many sessions, each with a command sent as soon as its Hello is
    // known (as a run sends prepare), from another thread.
    for i in 0..100 {
        let id = format!("sb{i}");
        let token = f.hub.register(&id).unwrap();
        let hub = f.hub.clone();
        let sender = {
            let id = id.clone();
            tokio::spawn(async move {
                hub.wait_hello(&id, Duration::from_secs(5)).await.unwrap();
                hub.send(&id, run_phase("prepare-0")).await.unwrap();
            })
        };
        // `open` fails unless the Welcome comes first.
        let mut s = open(&f, &id, &token).await.unwrap();
        sender.await.unwrap();
        match s.next(Duration::from_secs(5)).await {
            Some(controller_message::Body::Command(c)) => assert_eq!(c.command_id, "prepare-0"),
            other => panic!("{id}: expected the command, got {other:?}"),
        }
    }
}
