//! One sandbox of a plan as a command drives it, from launch to a cost record: the container
//! request built from the plan, the agent's Hello waited for, the source delivered, steps run
//! at the plan's timeouts under the command's cancellation, and the teardown charged at the
//! plan's rate card, metered by its phases or as one stretch. `run` (its walk, which schedules
//! stepwise trials on it), `debug`, `bisect` and `bench` drive their sandboxes with it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use sandbench_proto::Phase;
use sandbench_proto::plan::AgentPlan;
use tokio::sync::watch;

use super::Station;
use super::sandbox::{self, LiveSandbox, Teardown};
use crate::cost::{PhaseUsage, SandboxRecord};
use crate::observations::server::PhaseOutcome;
use crate::provision::{AgentShipping, DiskBound, SandboxRequest};
use crate::spec::Plan;

/// How long a new sandbox's agent has to say Hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(120);

/// A live sandbox of a plan, on its station. Cheap to clone (the clones are the same
/// sandbox): a run's walk keeps one per side and hands it to the tasks that use it.
#[derive(Clone)]
pub struct Session {
    station: Arc<Station>,
    /// The plan, its agent part the plan this sandbox runs (its limits are the steps').
    plan: Arc<Plan>,
    live: LiveSandbox,
}

/// A session's sandbox as it ended.
pub struct Ended {
    pub teardown: Teardown,
    /// Its lifetime at the plan's rate card, as the report and the ledger keep it.
    pub record: SandboxRecord,
}

impl Session {
    /// Launches a sandbox of `plan` as `role` (the station's image, the plan's resources,
    /// network, time to live and rate, with `labels` added) to run `agent_plan`, told its disk
    /// bound when the engine enforces one.
    pub async fn launch(
        station: &Arc<Station>,
        plan: &Plan,
        mut agent_plan: AgentPlan,
        (role, shipping, labels): (&str, AgentShipping, &[(&str, String)]),
    ) -> anyhow::Result<Session> {
        let mut request = station.plan_request(role, plan, shipping)?;
        request.labels.extend(labels.iter().map(|(k, v)| (k.to_string(), v.clone())));
        let live = station.launch(request, HELLO_TIMEOUT).await?;
        // A step that fills a bounded disk says so, naming the bound.
        let enforced = station.provisioner().disk_bound() == DiskBound::Enforced;
        agent_plan.disk_gb = enforced.then_some(plan.sandbox.disk_gb);
        Ok(Session { station: station.clone(), plan: Arc::new(Plan { agent: agent_plan, ..plan.clone() }), live })
    }

    /// Launches `request`, built from `plan` ([`Station::plan_request`]) and given its place in
    /// a run; `plan`'s agent part is what the sandbox runs.
    pub async fn launch_placed(
        station: &Arc<Station>,
        plan: Arc<Plan>,
        request: SandboxRequest,
    ) -> anyhow::Result<Session> {
        let live = station.launch(request, HELLO_TIMEOUT).await?;
        Ok(Session { station: station.clone(), plan, live })
    }

    pub fn live(&self) -> &LiveSandbox {
        &self.live
    }

    pub fn id(&self) -> &str {
        &self.live.sandbox.id
    }

    /// The plan, its agent part the plan the sandbox runs.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Delivers the revision's source ([`sandbox::deliver_source`]).
    pub async fn deliver_source(&self) -> anyhow::Result<()> {
        sandbox::deliver_source(&**self.station.provisioner(), &self.plan, &self.live.sandbox, &self.plan.agent).await
    }

    /// Runs trial `trial` of `phase` and waits for it, up to the plan's limit for the steps it
    /// runs; an error "canceled" once `cancel` says so.
    pub async fn run(
        &self,
        phase: Phase,
        trial: u32,
        cancel: &mut watch::Receiver<bool>,
    ) -> anyhow::Result<PhaseOutcome> {
        let hub = self.station.hub();
        let run = sandbox::run_phase(&hub, self.id(), &self.plan.agent, phase, trial, self.plan.phase_timeout(phase));
        tokio::select! {
            outcome = run => outcome,
            _ = cancel.wait_for(|c| *c) => bail!("canceled"),
        }
    }

    /// Removes the sandbox ([`Station::teardown`]): its log kept, its socket folder closed.
    pub async fn remove(&self) -> Teardown {
        self.station.teardown(&self.live.sandbox).await
    }

    /// The removed sandbox as the report and the ledger keep it: its lifetime at the plan's
    /// rate card over the stretches `phases`, and its peak memory ([`Teardown::record`]).
    pub fn record(&self, down: &Teardown, phases: Vec<PhaseUsage>, peak_memory_bytes: u64) -> SandboxRecord {
        down.record(&self.plan, &self.live.sandbox, phases, peak_memory_bytes)
    }

    /// Removes the sandbox and charges its lifetime as one stretch named `stretch` (its usage
    /// is not sampled: the usage figure is 0).
    pub async fn teardown(self, stretch: &str) -> Ended {
        let teardown = self.remove().await;
        let seconds = teardown.lifetime.as_secs_f64();
        let usage = PhaseUsage { phase: stretch.to_string(), seconds, cpu_seconds: 0.0, memory_gib_seconds: 0.0 };
        let record = self.record(&teardown, vec![usage], 0);
        Ended { teardown, record }
    }
}
