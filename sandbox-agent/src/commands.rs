//! Runs the controller's commands. Commands are idempotent by `command_id`: one that is running,
//! or that the journal shows finished, is not started again; one that a killed agent left half
//! done resumes from what the journal holds. Each runs on a thread of its own with a
//! [`PhaseContext`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sandbench_proto::v1::{PhaseDone, PhaseStarted, PhaseStatus, RunPhase, command, event};

use crate::context::{Emit, OutputCap, PhaseContext};
use crate::journal::{Progress, lock};
use crate::phases;
use crate::turns::Turns;

/// The command running now (or last run): id, phase, trial, running.
pub type Current = Arc<std::sync::Mutex<Option<(String, String, u32, bool)>>>;

pub struct Workloads {
    /// Cancel flags of every command started by this agent process. Entries are never removed:
    /// a finished command is recognised by the journal, and until its `PhaseDone` is journaled
    /// its entry here keeps a repeated command from starting twice.
    started: HashMap<String, Arc<AtomicBool>>,
    /// Turns of every stepwise command started by this agent process (by command id).
    turns: HashMap<String, Arc<Turns>>,
    progress: Progress,
    emit: Emit,
    state_dir: PathBuf,
    /// Output bytes sent per command, from the controller's last Welcome (0: no cap).
    output_cap_bytes: u64,
    pub current: Current,
}

impl Workloads {
    pub fn new(progress: Progress, emit: Emit, state_dir: PathBuf) -> Workloads {
        Workloads {
            started: HashMap::new(),
            turns: HashMap::new(),
            progress,
            emit,
            state_dir,
            output_cap_bytes: 0,
            current: Current::default(),
        }
    }

    /// Sets the output cap of the commands started from now on (the session does, from each
    /// Welcome; 0: no cap).
    pub fn set_output_cap(&mut self, bytes: u64) {
        self.output_cap_bytes = bytes;
    }

    pub fn handle(&mut self, command_id: String, body: command::Body) {
        match body {
            command::Body::RunPhase(run) => self.run_phase(command_id, run),
            command::Body::Cancel(cancel) => {
                if let Some(flag) = self.started.get(&cancel.target_command_id) {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            // A turn may come before its command (sent on another path of the controller's):
            // kept until the command starts.
            command::Body::Turn(turn) => self.stepwise_turns(&turn.target_command_id).grant(turn.index),
            // Shutdown is handled by the session, which owns the connection.
            command::Body::Shutdown(_) => {}
        }
    }

    /// The turns of stepwise command `command_id`, created at its first mention.
    fn stepwise_turns(&mut self, command_id: &str) -> Arc<Turns> {
        self.turns.entry(command_id.to_string()).or_insert_with(|| Arc::new(Turns::new(true))).clone()
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
        let turns = if run.stepwise { self.stepwise_turns(&command_id) } else { Arc::new(Turns::new(false)) };
        let ctx = PhaseContext {
            command_id,
            trial: run.trial,
            plan: run.plan,
            resume_observations: recorded.observations,
            cancel,
            emit: self.emit.clone(),
            state_dir: self.state_dir.clone(),
            held: Default::default(),
            output: Mutex::new(OutputCap::new(self.output_cap_bytes)),
            turns,
        };
        let phase = run.phase;
        *lock(&self.current) = Some((ctx.command_id.clone(), phase.clone(), ctx.trial, true));
        let current = self.current.clone();
        let spawned = std::thread::Builder::new().name(format!("phase-{phase}")).spawn(move || {
            if !recorded.started {
                let started =
                    PhaseStarted { command_id: ctx.command_id.clone(), phase: phase.clone(), trial: ctx.trial };
                if !ctx.emit(event::Body::PhaseStarted(started)) {
                    return;
                }
            }
            // A panic is a bug, but it must still end the command with a report, not silence.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if ctx.first_turn() { phases::run(&phase, &ctx) } else { Ok(()) }
            }))
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
            ctx.finish_output();
            let done = PhaseDone { command_id: ctx.command_id.clone(), status: status as i32, error };
            ctx.emit(event::Body::PhaseDone(done));
            if let Some(c) = lock(&current).as_mut().filter(|c| c.0 == ctx.command_id) {
                c.3 = false;
            }
        });
        if let Err(err) = spawned {
            tracing::error!("cannot start a thread for phase: {err}");
        }
    }
}
