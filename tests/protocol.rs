//! The controller's side of protocol v1, driven by a hand-written agent over a real Unix socket:
//! duplicates dropped, gaps refused, acks cumulative, commands resent until done, tokens checked,
//! and what a hostile agent sends bounded (output, file chunks, refused Hellos).

#[path = "support/flood.rs"]
mod flood;

use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use sandbench::observations::server::{Hub, HubConfig, Registration, ServerHandle};
use sandbench::observations::store::read_events;
use sandbench::observations::store::{Data, StoredBody};
use sandbench_proto::v1::agent_client::AgentClient;
use sandbench_proto::v1::{
    AgentMessage, Command, ControllerMessage, Event, EventBatch, FileChunk, Hello, Log, LogStream, Observation,
    PhaseDone, PhaseStatus, RunPhase, Welcome, agent_message, command, controller_message, event, observation,
};
use sandbench_proto::{Placement, Side};
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
    fixture_with(HubConfig::default()).await
}

async fn fixture_with(config: HubConfig) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::open(dir.path(), config).unwrap();
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
    open_placed(f, sandbox, token, None).await
}

/// [`open`] with a Hello that says the sandbox's place in its run.
async fn open_placed(
    f: &Fixture,
    sandbox: &str,
    token: &str,
    placement: Option<Placement>,
) -> Result<Session, tonic::Status> {
    let (tx, rx) = mpsc::channel(16);
    let hello = Hello {
        sandbox_id: sandbox.into(),
        token: token.into(),
        boot_id: "boot-1".into(),
        placement: placement.map(Into::into),
        ..Default::default()
    };
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
            sample: 0,
        })),
    })
    .collect()
}

fn run_phase(id: &str) -> Command {
    Command {
        command_id: id.into(),
        body: Some(command::Body::RunPhase(RunPhase {
            phase: "synthetic".into(),
            trial: 0,
            plan: b"{}".to_vec(),
            stepwise: false,
        })),
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

#[tokio::test]
async fn a_hello_that_says_another_place_in_the_run_is_refused() {
    let f = fixture().await;
    let head = Placement { side: Side::Head, pair: 1, attempt: 2 };
    let registration = Registration { role: Some("head1-r2".into()), placement: Some(head) };
    let token = f.hub.register_as("sb", registration).unwrap();
    for said in [None, Some(Placement { side: Side::Base, ..head }), Some(Placement { attempt: 1, ..head })] {
        let Err(status) = open_placed(&f, "sb", &token, said).await else { panic!("accepted {said:?}") };
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
        assert!(status.message().starts_with("the sandbox is the head of pair 1, attempt 2; its agent says "));
    }
    assert_eq!(f.hub.refusals().len(), 3);
    let _session = open_placed(&f, "sb", &token, Some(head)).await.unwrap();
    let hello = f.hub.status("sb").unwrap().borrow().first_hello.clone().unwrap();
    assert_eq!(hello.placement, Some(head));
    // A sandbox registered with no place in a run (debug, bisect) takes a Hello that says none.
    let bare = f.hub.register("debug").unwrap();
    assert!(open(&f, "debug", &bare).await.is_ok());
}

fn log_event(seq: u64, command: &str, chunk: &[u8]) -> Event {
    Event {
        seq,
        unix_ms: 1,
        body: Some(event::Body::Log(Log {
            command_id: command.into(),
            stream: LogStream::Stdout as i32,
            chunk: chunk.to_vec(),
        })),
    }
}

fn done_event(seq: u64, command: &str) -> Event {
    let done = PhaseDone { command_id: command.into(), status: PhaseStatus::Ok as i32, error: String::new() };
    Event { seq, unix_ms: 1, body: Some(event::Body::PhaseDone(done)) }
}

/// The output of `command` as the log holds it, and the cut markers' counts.
fn output_of(f: &Fixture, command: &str) -> (Vec<u8>, Vec<(u64, u64)>) {
    let mut text = Vec::new();
    let mut cuts = Vec::new();
    for event in sandbench::observations::store::events(&f.hub.log_path()).unwrap() {
        if let StoredBody::Log { command_id, data, cut, .. } = event.unwrap().body
            && command_id == command
        {
            match data {
                Data::Text { text: t } => text.extend(t.into_bytes()),
                Data::Hex { hex } => panic!("unexpected hex {hex}"),
            }
            cuts.extend(cut.map(|c| (c.dropped_bytes, c.total_bytes)));
        }
    }
    (text, cuts)
}

#[tokio::test]
async fn a_flood_of_output_keeps_its_head_and_tail_and_the_log_stays_small() {
    let cap = 256 << 10;
    let f = fixture_with(HubConfig { output_cap_bytes: cap, ..HubConfig::default() }).await;
    let token = f.hub.register("sb").unwrap();
    let mut s = open(&f, "sb", &token).await.unwrap();
    assert_eq!(s.welcome.output_cap_bytes, cap, "the agent is told the cap");
    // 32 MiB in 32 KiB chunks, each chunk its line number then `y`s: what is kept can be told.
    let chunk = |n: u64| format!("{n:08}{}\n", "y".repeat((32 << 10) - 9)).into_bytes();
    let chunks = 1024u64;
    for batch in 0..chunks / 64 {
        let events = (1..=64).map(|k| batch * 64 + k).map(|seq| log_event(seq, "flood", &chunk(seq))).collect();
        s.send(events).await;
        assert_eq!(s.ack().await, (batch + 1) * 64, "every chunk is acknowledged, kept or not");
    }
    s.send(vec![done_event(chunks + 1, "flood")]).await;
    assert_eq!(s.ack().await, chunks + 1);
    f.hub.wait_done("sb", "flood", Duration::from_secs(5)).await.unwrap();
    f.hub.close().await;

    let size = std::fs::metadata(f.hub.log_path()).unwrap().len();
    assert!(size < 2 * cap + (64 << 10), "the log holds {size} bytes for a {cap}-byte cap");
    let (kept, cuts) = output_of(&f, "flood");
    let total = chunks * (32 << 10);
    assert!((cap..cap + 200).contains(&(kept.len() as u64)), "head, marker and tail: {} bytes", kept.len());
    assert_eq!(cuts, [(total - cap, total)], "one marker with the bytes cut and the whole count");
    let text = String::from_utf8(kept).unwrap();
    assert!(text.starts_with("00000001yyy"), "the head is the start");
    assert!(text.contains("bytes of output not kept"), "the marker says so");
    assert!(text.ends_with(&format!("{:08}{}\n", chunks, "y".repeat((32 << 10) - 9))), "the tail is the end");
}

#[tokio::test]
async fn output_cut_before_a_controller_restart_stays_bounded_after_it() {
    let cap = 64 << 10;
    let config = HubConfig { output_cap_bytes: cap, ..HubConfig::default() };
    let f = fixture_with(config.clone()).await;
    let token = f.hub.register("sb").unwrap();
    let all: Vec<Event> = (1..=200).map(|seq| log_event(seq, "c", &[b'x'; 4096])).collect();
    let mut s = open(&f, "sb", &token).await.unwrap();
    s.send(all[..100].to_vec()).await;
    assert_eq!(s.ack().await, 100);
    drop(s);
    // The controller goes away and comes back: the agent resends what the log does not hold.
    let Fixture { _dir: dir, hub, server } = f;
    server.stop().await;
    hub.close().await;
    let hub = Hub::open(dir.path(), config).unwrap();
    let server = hub.serve(&dir.path().join("agent.sock")).await.unwrap();
    let f2 = Fixture { _dir: dir, hub, server };
    let mut s = open(&f2, "sb", &token).await.unwrap();
    let from = s.welcome.acked_seq;
    assert!(from <= 100, "{from}");
    let mut rest: Vec<Event> = all[from as usize..].to_vec();
    rest.push(done_event(201, "c"));
    s.send(rest).await;
    assert_eq!(s.ack().await, 201);
    f2.hub.close().await;
    let (kept, cuts) = output_of(&f2, "c");
    assert!(!cuts.is_empty(), "cut, and said so");
    assert!(kept.len() as u64 <= 2 * cap + 1024, "{} bytes kept across a restart, cap {cap}", kept.len());
}

#[tokio::test]
async fn file_chunks_out_of_bounds_are_refused_and_recorded_and_the_session_goes_on() {
    let f = fixture().await;
    let token = f.hub.register("sb").unwrap();
    let mut s = open(&f, "sb", &token).await.unwrap();
    let chunk = |seq: u64, path: &str, offset: u64, data: &[u8]| Event {
        seq,
        unix_ms: 1,
        body: Some(event::Body::File(FileChunk {
            command_id: "c".into(),
            path: path.into(),
            offset,
            data: data.to_vec(),
            last: false,
        })),
    };
    s.send(vec![
        chunk(1, "transcripts/a.cast", 0, b"abc"),
        chunk(2, "transcripts/a.cast", 1 << 40, b"far beyond the end"),
        chunk(3, "../../escape", 0, b"x"),
        chunk(4, "a\0b", 0, b"x"),
        chunk(5, &"deep/".repeat(40), 0, b"x"),
        chunk(6, "transcripts/a.cast", 3, b"def"),
    ])
    .await;
    assert_eq!(s.ack().await, 6, "refused chunks are acknowledged: the agent must not resend them forever");
    let dir = f.hub.log_path().parent().unwrap().to_path_buf();
    let written = std::fs::read(dir.join("sandboxes/sb/transcripts/a.cast")).unwrap();
    assert_eq!(written, b"abcdef");
    assert!(!dir.join("escape").exists() && !dir.join("sandboxes/escape").exists());
    f.hub.close().await;
    let refused: Vec<(u64, String)> = sandbench::observations::store::read_events(&f.hub.log_path())
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.body {
            StoredBody::File { refused: Some(why), .. } => Some((e.seq, why)),
            _ => None,
        })
        .collect();
    assert_eq!(refused.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 3, 4, 5], "{refused:?}");
    assert!(refused[0].1.contains("past the end of the file (3 bytes)"), "{refused:?}");
    assert!(refused[1].1.contains("unsafe path"), "{refused:?}");
}

#[tokio::test]
async fn refused_hellos_are_counted_and_not_kept() {
    let f = fixture().await;
    let _token = f.hub.register("sb").unwrap();
    let huge = "x".repeat(1 << 20);
    for n in 0..40 {
        let id = format!("{n}{huge}");
        match open(&f, &id, "nope").await {
            Ok(_) => panic!("accepted"),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unauthenticated);
                assert!(status.message().len() < 200, "the answer echoes {} bytes", status.message().len());
            }
        }
    }
    assert_eq!(f.hub.refusal_count(), 40);
    let kept = f.hub.refusals();
    assert!(kept.len() <= 32 && kept.iter().all(|r| r.sandbox_id.len() <= 64), "{}", kept.len());
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

#[tokio::test]
async fn commands_finished_before_a_controller_restart_stay_finished_after_it() {
    let config = HubConfig::default();
    let f = fixture_with(config.clone()).await;
    let token = f.hub.register("sb").unwrap();
    let mut s = open(&f, "sb", &token).await.unwrap();
    let failed = PhaseDone { command_id: "c1".into(), status: PhaseStatus::Failed as i32, error: "boom".into() };
    let mut events = observations(1..=3);
    events.push(Event { seq: 4, unix_ms: 1, body: Some(event::Body::PhaseDone(failed)) });
    events.push(done_event(5, "c2"));
    s.send(events).await;
    assert_eq!(s.ack().await, 5);
    drop(s);
    // The controller goes away after the PhaseDones were acknowledged: the agent holds nothing
    // more to send, so only the log can tell the reopened hub that the commands finished.
    let Fixture { _dir: dir, hub, server } = f;
    server.stop().await;
    hub.close().await;
    let hub = Hub::open(dir.path(), config).unwrap();
    let server = hub.serve(&dir.path().join("agent.sock")).await.unwrap();
    let f2 = Fixture { _dir: dir, hub, server };
    let outcome = f2.hub.wait_done("sb", "c1", Duration::from_secs(2)).await.expect("c1 is known to be done");
    assert_eq!((outcome.status, outcome.error.as_str()), (PhaseStatus::Failed, "boom"));
    let outcome = f2.hub.wait_done("sb", "c2", Duration::from_secs(2)).await.expect("c2 is known to be done");
    assert_eq!((outcome.status, outcome.error.as_str()), (PhaseStatus::Ok, ""));
    // Re-issued by the restarted controller, they are not kept pending for the next session.
    f2.hub.send("sb", run_phase("c1")).await.unwrap();
    let mut s = open(&f2, "sb", &token).await.unwrap();
    assert_eq!(s.welcome.acked_seq, 5);
    assert_eq!(s.next(Duration::from_millis(700)).await, None);
    f2.hub.close().await;
}

/// A socket holds a few connections at once and closes the rest on accept; a connection with no
/// Hello accepted in time, or silent too long, is closed; streams past the limit of a connection
/// are refused. An agent still gets in once the flood is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_bounds_its_connections_streams_and_silence() {
    let config = HubConfig { hello_timeout: Duration::from_secs(1), ..HubConfig::default() };
    let f = fixture_with(config).await;
    let token = f.hub.register("sb").unwrap();
    let socket = f.server.socket();
    let limit = sandbench::observations::server::MAX_CONNECTIONS_PER_SOCKET;

    let flood = tokio::task::spawn_blocking({
        let socket = socket.clone();
        move || {
            let conns = flood::idle_connections(&socket, 1000);
            let at_once = flood::closed_by_server(&conns, Duration::from_millis(500));
            let started = Instant::now();
            let all = flood::closed_by_server(&conns, Duration::from_secs(5));
            (conns.len(), at_once, all, started.elapsed())
        }
    });
    let (opened, at_once, all, took) = flood.await.unwrap();
    assert_eq!(opened, 1000);
    assert_eq!(at_once, 1000 - limit, "all but {limit} closed on accept");
    assert_eq!(all, 1000, "the silent ones closed after the Hello timeout");
    assert!(took < Duration::from_secs(3), "{took:?}");

    let streams = tokio::task::spawn_blocking({
        let socket = socket.clone();
        move || flood::open_streams(&socket, 1000, Duration::from_secs(3)).unwrap()
    });
    let seen = streams.await.unwrap();
    let allowed = sandbench::observations::server::MAX_STREAMS_PER_CONNECTION;
    assert!(seen.reset >= 1000 - allowed, "{seen:?}");
    assert!(seen.closed, "no Hello in time: the connection is closed ({seen:?})");

    // The flood left nothing behind: an agent gets in and is heard.
    let s = open(&f, "sb", &token).await.unwrap();
    s.send(observations(1..=1)).await;
    let mut s = s;
    assert_eq!(s.ack().await, 1);
}

/// A connection whose agent said hello but then went silent is closed after the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed() {
    let mut config = HubConfig::with_dead_man(Duration::from_secs(30), Duration::from_secs(60));
    config.idle_timeout = Duration::from_secs(1);
    let f = fixture_with(config).await;
    let token = f.hub.register("sb").unwrap();
    let mut s = open(&f, "sb", &token).await.unwrap();
    let started = Instant::now();
    // No heartbeat is due for 30 s: only the idle timeout ends the session this soon.
    while s.next(Duration::from_secs(5)).await.is_some() {}
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(4), "{took:?}");
}
