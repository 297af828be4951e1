//! `sandbench debug`: one sandbox for a person. Phases run up to the one asked for, with the
//! agent's log and the phases' output shown as they come; with `--keep` the sandbox and its
//! controller stay (until `sandbench rm`, expiry or Ctrl-C), and `sandbench phase` reruns a
//! phase on it through a control socket in the debug directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use futures_util::StreamExt;
use sandbench_proto::plan::AgentPlan;
use sandbench_proto::v1::PhaseStatus;
use sandbench_proto::{Phase, StepId};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::watch;

use crate::by_hand::describe_event;
use crate::cost::SandboxRecord;
use crate::cost::ledger::{Entry, Ledger, RunStart};
use crate::display::Display;
use crate::observations::server::Hub;
use crate::observations::store::StoredBody;
use crate::provision::{AgentShipping, Engine, Provisioner, labels};
use crate::report::{Revision, Status};
use crate::spec::{Plan, SourceSettings};
use crate::station::sandbox;
use crate::station::session::Session;
use crate::station::{Station, StationOptions};

#[derive(Debug, Clone)]
pub struct DebugOptions {
    pub spec: PathBuf,
    pub rev: String,
    /// Run phases up to this one (prepare, install, measure, runtime, transport, ui); default: runtime.
    pub phase: Option<String>,
    pub trial: u32,
    pub keep: bool,
    pub out: PathBuf,
    pub agent: Option<PathBuf>,
    pub shipping: AgentShipping,
    /// How long the agent and the controller carry on without word from each other.
    pub dead_man: Duration,
    /// The cost ledger the session is recorded in (None: none).
    pub ledger: Option<PathBuf>,
}

/// Runs the session; true when every phase succeeded.
pub async fn debug(engine: &Engine, opts: DebugOptions, cancel: watch::Receiver<bool>) -> anyhow::Result<bool> {
    debug_on(opts, cancel, engine.provisioner()).await
}

/// [`debug`] on the provisioner `connect` gives, connected once the spec and revision are read.
pub async fn debug_on(
    opts: DebugOptions,
    mut cancel: watch::Receiver<bool>,
    connect: impl Future<Output = anyhow::Result<Arc<dyn Provisioner>>>,
) -> anyhow::Result<bool> {
    let plan = crate::spec::load(&opts.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    // The phases up to the one asked for, as a fresh sandbox steps through them.
    let steps = opts.phase.as_deref().map_or(Ok(Phase::Runtime), Phase::of_spec)?.path(opts.trial);
    let commit = match &plan.source {
        SourceSettings::Local { repository } => crate::source::resolve(repository, &opts.rev).await?,
        _ => opts.rev.clone(),
    };
    let agent_plan = plan.agent_plan(&commit);
    let started = SystemTime::now();
    let run_id = format!("debug-{}", crate::report::stamp(started));
    let provisioner = connect.await?;
    let dir = opts.out.join(&run_id);
    let options = StationOptions {
        dir: dir.clone(),
        run_id: run_id.clone(),
        image: Some(plan.sandbox.image.clone()),
        valgrind: plan.needs_valgrind(),
        agent: opts.agent.clone(),
        hub: crate::station::hub_config(&plan, opts.dead_man),
    };
    let display = Display::new();
    let station = Arc::new(Station::open(provisioner, options, &mut |line| display.line(line)).await?);
    // The session is a ledger entry of its own, begun before its sandbox, so that its cost is
    // counted whatever happens to it.
    let revision = Revision { rev: opts.rev.clone(), commit: commit.clone() };
    let entry = match &opts.ledger {
        Some(path) => {
            let start = ledger_start(&run_id, &plan, &revision, started, station.dir());
            match Ledger::open(path).and_then(|ledger| Entry::begin(ledger, &start, false)) {
                Ok(entry) => Some(entry),
                Err(err) => {
                    for warning in station.close().await {
                        display.warning(&warning);
                    }
                    return Err(err.context(format!("cannot record the session in the ledger {}", path.display())));
                }
            }
        }
        None => None,
    };
    display.line(&format!("debug {run_id}: {} at {} ({})", plan.name, opts.rev, crate::sanitize::prefix(&commit, 8)));
    let debugging = Debugging { station: &station, opts: &opts, display: &display };
    let (result, record) = debugging.run(&plan, agent_plan, &steps, &mut cancel).await;
    for warning in station.close().await {
        display.warning(&warning);
    }
    if let Some(mut entry) = entry {
        let status = match &result {
            _ if *cancel.borrow() => Status::Canceled,
            Ok(true) => Status::Completed,
            _ => Status::Failed,
        };
        let finished = crate::report::timestamp(SystemTime::now());
        if let Err(err) = entry.finish(status.as_str(), &finished, record.as_slice()) {
            display.warning(&format!(
                "cannot record the session in the ledger {}: {err:#}",
                entry.ledger().path().display()
            ));
        }
    }
    result
}

/// A debug session's ledger row: the revision as both its base and its head.
fn ledger_start(id: &str, plan: &Plan, revision: &Revision, started: SystemTime, dir: &std::path::Path) -> RunStart {
    let repository = match &plan.source {
        SourceSettings::Local { repository } => repository.display().to_string(),
        SourceSettings::Url { url } => url.clone(),
        SourceSettings::None => String::new(),
    };
    RunStart {
        run_id: id.to_string(),
        spec: plan.name.clone(),
        repository,
        base_rev: revision.rev.clone(),
        base_commit: revision.commit.clone(),
        head_rev: revision.rev.clone(),
        head_commit: revision.commit.clone(),
        started_at: crate::report::timestamp(started),
        run_dir: dir.display().to_string(),
        owner: crate::provision::docker::owner_id(),
        usd_per_hour: plan.hourly_usd(),
    }
}

/// One debug session's sandbox, from launch to teardown.
struct Debugging<'a> {
    station: &'a Arc<Station>,
    opts: &'a DebugOptions,
    display: &'a Display,
}

impl Debugging<'_> {
    fn control(&self) -> PathBuf {
        self.station.dir().join("control.sock")
    }

    /// Runs the steps in a sandbox of its own (kept with `--keep`); whether every one
    /// succeeded, and the sandbox's cost record once it was made.
    async fn run(
        &self,
        plan: &Plan,
        agent_plan: AgentPlan,
        steps: &[(Phase, u32)],
        cancel: &mut watch::Receiver<bool>,
    ) -> (anyhow::Result<bool>, Option<SandboxRecord>) {
        let control = [(labels::CONTROL, self.control().display().to_string())];
        let launched = Session::launch(self.station, plan, agent_plan, ("debug", self.opts.shipping, &control)).await;
        let session = match launched {
            Ok(session) => session,
            Err(err) => return (Err(err), None),
        };
        let id = session.id().to_string();
        self.display.line(&format!("sandbox {id} ready in {:.2} s", session.live().provision_to_hello.as_secs_f64()));
        let shown = self.show_progress(&id);
        let result = self.steps(&session, steps, cancel).await;
        if self.opts.keep && !*cancel.borrow() {
            self.display.note(&how_to_get_in(&id, plan.sandbox.ttl));
            self.keep(&session, cancel).await;
        }
        let _ = std::fs::remove_file(self.control());
        let ended = session.teardown("debug").await;
        for task in shown {
            task.abort();
        }
        match &ended.teardown.removal_error {
            Some(err) => self.display.warning(err),
            None => self.display.line(&format!(
                "sandbox {id} removed; its log and transcripts are in {}",
                self.station.dir().display()
            )),
        }
        (result, Some(ended.record))
    }

    /// Shows the agent's log and every event as it arrives, until the tasks are aborted.
    fn show_progress(&self, id: &str) -> [tokio::task::JoinHandle<()>; 2] {
        let mut stream = self.station.provisioner().logs_follow(id);
        let display = self.display.clone();
        let log_task = tokio::spawn(async move {
            while let Some(Ok(chunk)) = stream.next().await {
                for line in chunk.lines() {
                    display.note(&format!("agent| {line}"));
                }
            }
        });
        let mut events = self.station.hub().subscribe();
        let display = self.display.clone();
        let event_task = tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                if let Some(text) = describe_event(&event) {
                    display.output(&text);
                }
            }
        });
        [log_task, event_task]
    }

    /// Delivers the source and runs the steps until one fails; true when all succeeded.
    async fn steps(
        &self,
        session: &Session,
        steps: &[(Phase, u32)],
        cancel: &mut watch::Receiver<bool>,
    ) -> anyhow::Result<bool> {
        session.deliver_source().await?;
        for &(name, trial) in steps {
            let outcome = session.run(name, trial, cancel).await?;
            if outcome.status != PhaseStatus::Ok {
                self.display.line(&format!("{name} trial {trial} failed: {}", outcome.error));
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Serves `sandbench phase` until Ctrl-C, the sandbox's removal, or its expiry.
    async fn keep(&self, session: &Session, cancel: &mut watch::Receiver<bool>) {
        let (provisioner, hub, display) = (&**self.station.provisioner(), self.station.hub(), self.display);
        let (id, expires_at) = (session.id(), session.live().sandbox.expires_at);
        let plan = Arc::new(session.plan().clone());
        let control = &self.control();
        let listener = match tokio::net::UnixListener::bind(control) {
            Ok(l) => l,
            Err(err) => {
                display.warning(&format!("cannot serve `sandbench phase` on {}: {err}", control.display()));
                return;
            }
        };
        let reruns = Arc::new(AtomicU32::new(0));
        let expiry = expires_at.duration_since(SystemTime::now()).unwrap_or_default();
        let deadline = Instant::now() + expiry;
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        loop {
            tokio::select! {
                _ = cancel.wait_for(|c| *c) => return,
                _ = tokio::time::sleep_until(deadline.into()) => {
                    display.line(&format!("sandbox {id} expired"));
                    return;
                }
                _ = tick.tick() => {
                    if let Ok(false) = provisioner.running(id).await {
                        display.line(&format!("sandbox {id} stopped: {}", provisioner.lost_cause(id).await));
                        return;
                    }
                }
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let (hub, id, plan, reruns) = (hub.clone(), id.to_string(), plan.clone(), reruns.clone());
                    tokio::spawn(async move {
                        if let Err(err) = serve_rerun(stream, &hub, &id, &plan, &reruns).await {
                            tracing::warn!("phase request failed: {err:#}");
                        }
                    });
                }
            }
        }
    }
}

fn how_to_get_in(id: &str, ttl: Duration) -> String {
    format!(
        "\nsandbox {id} is kept (until `sandbench rm {id}`, its expiry in {} min, or Ctrl-C here).\n  \
         get in:   sandbench shell {id}    (as a benchmark user: sandbench shell {id} --user benchmark1)\n  \
         rerun:    sandbench phase {id} install --trial 1\n  \
         logs:     sandbench logs {id} -f\n  \
         status:   sandbench shell {id} -- {} status",
        ttl.as_secs() / 60,
        crate::provision::docker::AGENT_PATH_IN_SANDBOX
    )
}

/// One `sandbench phase` request: `{"phase", "trial"}` in, the command's events out as JSON
/// lines (`{"event": …}`), or `{"error": …}`.
async fn serve_rerun(
    stream: tokio::net::UnixStream,
    hub: &Hub,
    id: &str,
    plan: &Plan,
    reruns: &AtomicU32,
) -> anyhow::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let line = lines.next_line().await?.context("empty request")?;
    let request: serde_json::Value = serde_json::from_str(&line)?;
    let name = request["phase"].as_str().unwrap_or_default();
    let trial = request["trial"].as_u64().unwrap_or(0) as u32;
    let name = match Phase::of_spec(name) {
        Ok(phase) => phase,
        Err(unknown) => {
            let error = serde_json::json!({ "error": unknown.to_string() });
            write.write_all(format!("{error}\n").as_bytes()).await?;
            return Ok(());
        }
    };
    let step = StepId::new(name, trial).rerun(reruns.fetch_add(1, Ordering::Relaxed) + 1);
    let command_id = step.to_string();
    let mut events = hub.subscribe();
    // The spec's limit for one trial of the phase, as a run gives it.
    let run = sandbox::run_command(hub, id, &plan.agent, step, plan.phase_timeout(name));
    tokio::pin!(run);
    loop {
        tokio::select! {
            done = &mut run => {
                // Forward what is still queued, then end.
                while let Ok(event) = events.try_recv() {
                    forward(&mut write, &command_id, &event).await?;
                }
                if let Err(err) = done {
                    let error = serde_json::json!({ "error": format!("{err:#}") });
                    write.write_all(format!("{error}\n").as_bytes()).await?;
                }
                return Ok(());
            }
            event = events.recv() => {
                if let Ok(event) = event {
                    forward(&mut write, &command_id, &event).await?;
                }
            }
        }
    }
}

async fn forward(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    command_id: &str,
    event: &crate::observations::store::StoredEvent,
) -> anyhow::Result<()> {
    let of_command = match &event.body {
        StoredBody::Observation { command_id: c, .. }
        | StoredBody::Log { command_id: c, .. }
        | StoredBody::PhaseStarted { command_id: c, .. }
        | StoredBody::PhaseDone { command_id: c, .. }
        | StoredBody::Yielded { command_id: c, .. }
        | StoredBody::File { command_id: c, .. } => c == command_id,
    };
    if of_command {
        let line = serde_json::json!({ "event": event });
        write.write_all(format!("{line}\n").as_bytes()).await?;
    }
    Ok(())
}

/// Whole debug sessions on the fake provisioner (`tests/debug.rs` runs one on Docker, kept and
/// entered by hand).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::fake::{Answer, FakeProvisioner, Script, spec_text};

    fn session(phase: &str) -> (tempfile::TempDir, Plan, DebugOptions) {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join("bench.toml");
        let rest =
            "[install]\ncommand = \"true\"\n\n[[runtime.command]]\nmetric = \"git_status\"\nrun = \"git status\"\n";
        std::fs::write(&spec, spec_text("install = 1\nruntime = 3", rest)).unwrap();
        let plan = crate::spec::load(&spec).unwrap_or_else(|e| panic!("{e}"));
        let opts = DebugOptions {
            spec,
            rev: "v1".into(),
            phase: Some(phase.into()),
            trial: 0,
            keep: false,
            out: dir.path().join("debug"),
            agent: None,
            shipping: AgentShipping::Bind,
            dead_man: crate::observations::server::DEFAULT_DEAD_MAN,
            ledger: Some(dir.path().join("ledger.sqlite")),
        };
        (dir, plan, opts)
    }

    async fn debug_fake(opts: DebugOptions, fake: Arc<FakeProvisioner>) -> anyhow::Result<bool> {
        let connect = async move { Ok(fake as Arc<dyn Provisioner>) };
        debug_on(opts, watch::channel(false).1, connect).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_steps_through_the_phases_up_to_the_one_asked_for_and_removes_its_sandbox() {
        let (dir, plan, opts) = session("install");
        let fake = Arc::new(FakeProvisioner::new(Script::for_plan(&plan)));
        assert!(debug_fake(opts, fake.clone()).await.unwrap(), "every phase succeeded");
        assert!(fake.list(None).await.unwrap().is_empty(), "the sandbox is removed");
        // Its directory holds what the phases sent: prepare's and install's trial 0, nothing after.
        let run = std::fs::read_dir(dir.path().join("debug")).unwrap().flatten().next().expect("the session's folder");
        let events =
            crate::observations::store::read_events(&run.path().join(crate::observations::store::OBSERVATIONS_FILE))
                .unwrap();
        let done: Vec<String> = events
            .iter()
            .filter_map(|e| match &e.body {
                StoredBody::PhaseDone { command_id, status, .. } => Some(format!("{command_id} {status}")),
                _ => None,
            })
            .collect();
        assert_eq!(done, ["prepare-0 ok", "install-0 ok"]);
        // The session and its sandbox are in the ledger, charged as one `debug` stretch.
        let (row, phases) = only_run(&dir);
        assert_eq!((row.status.as_str(), row.sandboxes), ("completed", 1), "{row:?}");
        assert!(row.allocation_usd > 0.0 && row.run_id.starts_with("debug-"), "{row:?}");
        assert_eq!(
            phases.iter().map(|p| (p.role.as_str(), p.phase.as_str())).collect::<Vec<_>>(),
            [("debug", "debug")]
        );
    }

    /// The ledger's one run, with its phases.
    fn only_run(dir: &tempfile::TempDir) -> (crate::cost::ledger::RunRow, Vec<crate::cost::ledger::PhaseRow>) {
        let ledger = Ledger::open(&dir.path().join("ledger.sqlite")).unwrap();
        let runs = ledger.runs(None).unwrap();
        assert_eq!(runs.len(), 1, "{runs:?}");
        ledger.run(&runs[0].run_id).unwrap().unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_phase_stops_the_session_there_and_says_so() {
        let (dir, plan, opts) = session("runtime");
        let script = Script::for_plan(&plan).on("debug", "install", None, Answer::Fail("npm ci failed".into()));
        let fake = Arc::new(FakeProvisioner::new(script));
        assert!(!debug_fake(opts, fake.clone()).await.unwrap(), "install failed");
        assert!(fake.list(None).await.unwrap().is_empty(), "the sandbox is removed");
        let (row, _) = only_run(&dir);
        assert_eq!((row.status.as_str(), row.sandboxes), ("failed", 1), "a failed session's sandbox is charged too");
    }
}
