//! Runs the controller's commands. Commands are idempotent by `command_id`: one that is running,
//! or that the journal shows finished, is not started again; one that a killed agent left half
//! done resumes from what the journal holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sandbench_proto::v1::{PhaseDone, PhaseStarted, PhaseStatus, RunPhase, command, event};
use tokio::sync::mpsc;

use crate::journal::{Progress, lock};
use crate::phases;

/// Where phases put their events: the journal writer's queue.
pub type Emit = mpsc::Sender<event::Body>;

/// What a phase gets to do its work.
pub struct PhaseContext {
    pub command_id: String,
    pub trial: u32,
    pub plan: Vec<u8>,
    /// Observations of this command already in the journal (non-zero after a restart).
    pub resume_observations: u64,
    pub cancel: Arc<AtomicBool>,
    pub emit: Emit,
}

impl PhaseContext {
    /// Hands an event to the journal; false when the agent is shutting down.
    pub fn emit(&self, body: event::Body) -> bool {
        self.emit.blocking_send(body).is_ok()
    }

    pub fn canceled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

pub struct Workloads {
    /// Cancel flags of every command started by this agent process. Entries are never removed:
    /// a finished command is recognised by the journal, and until its `PhaseDone` is journaled
    /// its entry here keeps a repeated command from starting twice.
    started: HashMap<String, Arc<AtomicBool>>,
    progress: Progress,
    emit: Emit,
}

impl Workloads {
    pub fn new(progress: Progress, emit: Emit) -> Workloads {
        Workloads { started: HashMap::new(), progress, emit }
    }

    pub fn handle(&mut self, command_id: String, body: command::Body) {
        match body {
            command::Body::RunPhase(run) => self.run_phase(command_id, run),
            command::Body::Cancel(cancel) => {
                if let Some(flag) = self.started.get(&cancel.target_command_id) {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            // Shutdown is handled by the session, which owns the connection.
            command::Body::Shutdown(_) => {}
        }
    }

    pub fn cancel_all(&self) {
        for flag in self.started.values() {
            flag.store(true, Ordering::Relaxed);
        }
    }

    fn run_phase(&mut self, command_id: String, run: RunPhase) {
        if self.started.contains_key(&command_id) {
            return;
        }
        let recorded = lock(&self.progress).get(&command_id).cloned().unwrap_or_default();
        if recorded.done {
            return;
        }
        let cancel = Arc::new(AtomicBool::new(false));
        self.started.insert(command_id.clone(), cancel.clone());
        let ctx = PhaseContext {
            command_id,
            trial: run.trial,
            plan: run.plan,
            resume_observations: recorded.observations,
            cancel,
            emit: self.emit.clone(),
        };
        let phase = run.phase;
        let spawned = std::thread::Builder::new().name(format!("phase-{phase}")).spawn(move || {
            if !recorded.started {
                let started =
                    PhaseStarted { command_id: ctx.command_id.clone(), phase: phase.clone(), trial: ctx.trial };
                if !ctx.emit(event::Body::PhaseStarted(started)) {
                    return;
                }
            }
            // A panic is a bug, but it must still end the command with a report, not silence.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| phases::run(&phase, &ctx)))
                .unwrap_or_else(|panic| {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Err(anyhow::anyhow!("agent bug: phase {phase} panicked: {what}"))
                });
            let (status, error) = match result {
                Ok(()) if ctx.canceled() => (PhaseStatus::Canceled, String::new()),
                Ok(()) => (PhaseStatus::Ok, String::new()),
                Err(err) => (PhaseStatus::Failed, format!("{err:#}")),
            };
            let done = PhaseDone { command_id: ctx.command_id.clone(), status: status as i32, error };
            ctx.emit(event::Body::PhaseDone(done));
        });
        if let Err(err) = spawned {
            crate::log(&format!("cannot start a thread for phase: {err}"));
        }
    }
}
