//! One sandbox's life as the controller drives it: register its token, create and start it,
//! wait for its agent's Hello; and the teardown every path ends in (agent log collected,
//! container removed with its volumes, lifetime recorded).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

use sandbench_proto::plan::{AgentPlan, SOURCE_DIR, Source};
use sandbench_proto::v1::{Command, RunPhase, Turn, command};
use sandbench_proto::{Phase, StepId};

use crate::observations::server::{HelloInfo, Hub, PhaseOutcome, Registration};
use crate::provision::{Provisioner, Sandbox, SandboxRequest};
use crate::spec::{Plan, SourceSettings};

/// A sandbox whose agent is connected.
#[derive(Debug, Clone)]
pub struct LiveSandbox {
    pub sandbox: Sandbox,
    pub hello: HelloInfo,
    /// From the create request to the agent's Hello.
    pub provision_to_hello: Duration,
}

/// What teardown found and did.
#[derive(Debug, Clone)]
pub struct Teardown {
    pub id: String,
    /// From the create request to confirmed removal.
    pub lifetime: Duration,
    pub log_path: Option<PathBuf>,
    /// Removal failed: the sandbox may live until its expiry.
    pub removal_error: Option<String>,
}

/// Creates and starts a sandbox and waits for its agent. On failure nothing is left behind and
/// the error carries the agent's log.
pub async fn launch(
    provisioner: &dyn Provisioner,
    hub: &Hub,
    mut request: SandboxRequest,
    hello_timeout: Duration,
) -> anyhow::Result<LiveSandbox> {
    let id = request.sandbox_id();
    let begun = Instant::now();
    let registration = Registration { role: Some(request.role.clone()), placement: request.placement };
    request.token = hub.register_as(&id, registration)?;
    let sandbox = provisioner.create(&request).await?;
    let started = async {
        provisioner.start(&sandbox.id).await?;
        hub.wait_hello(&sandbox.id, hello_timeout).await
    }
    .await;
    match started {
        Ok(hello) => {
            let provision_to_hello = hello.at.saturating_duration_since(begun);
            Ok(LiveSandbox { sandbox, hello, provision_to_hello })
        }
        Err(err) => {
            let log = provisioner.logs(&sandbox.id).await.unwrap_or_default();
            let _ = hub.retire(&sandbox.id);
            let removal = provisioner.remove(&sandbox.id).await;
            let mut message = format!("{err:#}");
            if !log.trim().is_empty() {
                message.push_str(&format!("\nagent log of {}:\n{}", sandbox.id, tail(&log, 40)));
            }
            if let Err(removal) = removal {
                message.push_str(&format!("\nand removing it failed too: {removal}"));
            }
            Err(anyhow::anyhow!(message))
        }
    }
}

/// Retires the token, saves the agent's log under `run_dir/sandboxes/<id>/agent.log`, and
/// removes the container. Never fails: problems are reported in the result.
pub async fn teardown(provisioner: &dyn Provisioner, hub: &Hub, run_dir: &Path, sandbox: &Sandbox) -> Teardown {
    let _ = hub.retire(&sandbox.id);
    let log_path = match provisioner.logs(&sandbox.id).await {
        Ok(log) => save_log(run_dir, &sandbox.id, &log).ok(),
        Err(err) if !provisioner.exists(&sandbox.id).await => {
            // Removed already (by `sandbench rm`, say): nothing to collect, nothing to remove.
            tracing::info!(sandbox = %sandbox.id, "already removed: {err}");
            None
        }
        Err(err) => {
            tracing::warn!(sandbox = %sandbox.id, "cannot collect the agent log: {err}");
            None
        }
    };
    let removal_error = provisioner.remove(&sandbox.id).await.err().map(|e| e.to_string());
    if let Some(err) = &removal_error {
        tracing::error!(sandbox = %sandbox.id, "{err}; it will be reaped after its expiry");
    }
    Teardown {
        id: sandbox.id.clone(),
        lifetime: SystemTime::now().duration_since(sandbox.requested_at).unwrap_or_default(),
        log_path,
        removal_error,
    }
}

impl Teardown {
    /// The torn-down `sandbox` as the report and the ledger keep it: its lifetime charged at the
    /// plan's rate card over the stretches `phases` (what `sandbench cost` shows per phase), at
    /// least until its expiry when its removal failed, and its peak memory.
    pub fn record(
        &self,
        plan: &Plan,
        sandbox: &Sandbox,
        phases: Vec<crate::cost::PhaseUsage>,
        peak_memory_bytes: u64,
    ) -> crate::cost::SandboxRecord {
        let removed = self.removal_error.is_none();
        let cost =
            crate::cost::sandbox_cost(&plan.cost, plan.allocation(), phases, !removed, plan.sandbox.ttl.as_secs_f64());
        crate::cost::SandboxRecord {
            id: sandbox.id.clone(),
            role: sandbox.role.clone(),
            placement: sandbox.placement,
            created_at: crate::report::timestamp(sandbox.requested_at),
            removed_at: removed.then(|| crate::report::timestamp(SystemTime::now())),
            seconds: cost.charged_seconds.max(self.lifetime.as_secs_f64()),
            deleted: removed,
            estimated_usd: cost.allocation_usd,
            peak_memory_bytes,
            cost: Some(cost),
        }
    }
}

/// Uploads `git archive` of the commit into the sandbox when the plan's source is a local
/// repository (the agent fetches git URLs itself), streamed and bounded by `[source] max_mb`.
pub async fn deliver_source(
    provisioner: &dyn Provisioner,
    plan: &Plan,
    sandbox: &Sandbox,
    agent_plan: &AgentPlan,
) -> anyhow::Result<()> {
    if let (SourceSettings::Local { repository }, Source::Archive { commit }) = (&plan.source, &agent_plan.source) {
        let archive = crate::source::archive(repository, commit, SOURCE_DIR, plan.source_max_bytes).await?;
        let uploaded = provisioner.upload(&sandbox.id, archive.tar).await;
        // The stream's own reason first: the engine's error for a body cut short says less.
        if let Some(why) = archive.failure.get() {
            anyhow::bail!("{why}");
        }
        uploaded?;
    }
    Ok(())
}

/// Runs one phase (one trial) on a sandbox and waits for the agent to report it done.
pub async fn run_phase(
    hub: &Hub,
    sandbox_id: &str,
    agent_plan: &AgentPlan,
    phase: Phase,
    trial: u32,
    timeout: Duration,
) -> anyhow::Result<PhaseOutcome> {
    run_command(hub, sandbox_id, agent_plan, StepId::new(phase, trial), timeout).await
}

/// Starts one phase command on a sandbox, stepwise (its segments at the controller's turns,
/// [`grant_turn`]) or not, without waiting for it. Its command id is the step's: one per phase
/// and trial, so a repeated request is the same command and the agent runs it once.
pub async fn start_phase(
    hub: &Hub,
    sandbox_id: &str,
    agent_plan: &AgentPlan,
    step: StepId,
    stepwise: bool,
) -> anyhow::Result<()> {
    let plan = serde_json::to_vec(agent_plan)?;
    let run = RunPhase { phase: step.phase.to_string(), trial: step.trial, plan, stepwise };
    let command = Command { command_id: step.to_string(), body: Some(command::Body::RunPhase(run)) };
    hub.send(sandbox_id, command).await
}

/// Lets the stepwise command of `target` run its segments up to `index` (from 1).
pub async fn grant_turn(hub: &Hub, sandbox_id: &str, target: StepId, index: u32) -> anyhow::Result<()> {
    let turn = Turn { target_command_id: target.to_string(), index };
    let command = Command { command_id: target.turn_id(), body: Some(command::Body::Turn(turn)) };
    hub.send(sandbox_id, command).await
}

/// Like [`run_phase`] for any step (a rerun is a step of its own: the agent runs each command
/// id once).
pub async fn run_command(
    hub: &Hub,
    sandbox_id: &str,
    agent_plan: &AgentPlan,
    step: StepId,
    timeout: Duration,
) -> anyhow::Result<PhaseOutcome> {
    start_phase(hub, sandbox_id, agent_plan, step, false).await?;
    hub.wait_done(sandbox_id, &step.to_string(), timeout).await
}

fn save_log(run_dir: &Path, id: &str, log: &str) -> anyhow::Result<PathBuf> {
    let dir = run_dir.join("sandboxes").join(id);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("agent.log");
    std::fs::write(&path, log).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
