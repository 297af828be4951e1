//! What every phase needs: the plan, the agent's saved state, the users, and running a step as
//! one of them with its output streamed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use sandbench_proto::plan::Step;
use sandbench_proto::v1::LogStream;
use serde::{Deserialize, Serialize};

use crate::context::PhaseContext;
use crate::journal::lock;
use crate::origin::{Origin, Served};
use crate::probes::command::{self, Finished, ShellCommand};
use crate::probes::usage::Usage;
use crate::users::{self, Accounts, User};

/// What phases leave for later phases, kept in the state folder so an agent restart keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentState {
    /// Folder the origin serves, when prepare made one.
    pub release_dir: Option<PathBuf>,
    pub origin_port: Option<u16>,
    /// The URL path it is served under (empty: the origin's root).
    #[serde(default)]
    pub origin_path: String,
    /// Prepare ran an optional step whose artifacts are a compiled installation: install's
    /// `expect_format` check applies.
    #[serde(default)]
    pub compiled_artifacts: bool,
    /// The first install trial run in this sandbox (0 unless trials are split across sandbox
    /// pairs); its user is the one measure and runtime run as.
    pub first_install_trial: Option<u32>,
    /// Footprint of that user's home before its installation.
    pub home_before_install_bytes: Option<u64>,
    pub first_install_ok: bool,
}

impl AgentState {
    /// The user of this sandbox's first successful installation.
    pub fn measure_user(&self) -> anyhow::Result<User> {
        let trial = self.first_install_trial.filter(|_| self.first_install_ok);
        let found = match trial {
            Some(trial) => accounts().find(&sandbench_proto::plan::benchmark_user(trial).0)?,
            None => None,
        };
        found.ok_or_else(|| anyhow::anyhow!("The first installation must succeed before interactive measurements"))
    }
}

impl AgentState {
    fn path(state_dir: &Path) -> PathBuf {
        state_dir.join("phases.json")
    }

    pub fn load(state_dir: &Path) -> anyhow::Result<AgentState> {
        match std::fs::read(Self::path(state_dir)) {
            Ok(bytes) => serde_json::from_slice(&bytes).context("corrupt agent state"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(AgentState::default()),
            Err(e) => Err(e).context("cannot read the agent state"),
        }
    }

    pub fn save(&self, state_dir: &Path) -> anyhow::Result<()> {
        let tmp = state_dir.join("phases.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&tmp, Self::path(state_dir)).context("cannot save the agent state")
    }
}

/// The loopback origin, started once per agent process.
static ORIGIN: OnceLock<Mutex<Option<Origin>>> = OnceLock::new();

/// Serves `dir` under the URL path `prefix` on `port`, starting the origin or pointing it at the
/// new folder.
pub fn serve_origin(dir: PathBuf, prefix: &str, port: u16) -> anyhow::Result<()> {
    let slot = ORIGIN.get_or_init(Mutex::default);
    let mut origin = lock(slot);
    let served = Served { root: dir, prefix: prefix.to_string() };
    match origin.as_ref() {
        Some(running) if running.port == port => running.serve(served),
        _ => *origin = Some(Origin::start(served, port)?),
    }
    Ok(())
}

/// After an agent restart: serve again what prepare had made.
pub fn restore_origin(state_dir: &Path) {
    if let Ok(AgentState { release_dir: Some(dir), origin_port: Some(port), origin_path, .. }) =
        AgentState::load(state_dir)
        && let Err(err) = serve_origin(dir, &origin_path, port)
    {
        tracing::error!("cannot restart the release origin: {err:#}");
    }
}

pub fn accounts() -> Accounts {
    Accounts::new("/")
}

/// `~/x` is the user's home; relative paths are relative to `base`.
pub fn expand(user: &User, base: &Path, path: &str) -> PathBuf {
    if path == "~" {
        user.home.clone()
    } else if let Some(rest) = path.strip_prefix("~/") {
        user.home.join(rest)
    } else {
        base.join(path)
    }
}

pub fn user_env(
    user: &User,
    plan_env: &BTreeMap<String, String>,
    step_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    // Its private TMPDIR must exist before anything runs with it; a failure shows when the
    // process cannot write there, and the sweep reports what it wrote elsewhere.
    if let Err(err) = crate::isolation::ensure_scratch(Path::new("/"), user) {
        tracing::warn!("cannot make the scratch folder of {}: {err:#}", user.name);
    }
    let mut extra = plan_env.clone();
    extra.extend(step_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    users::environment(user, &extra)
}

/// Runs a step as `user` in `base` (or the step's cwd), streaming its output.
pub fn run_step(
    ctx: &PhaseContext,
    step: &Step,
    user: &User,
    base: &Path,
    env: &BTreeMap<String, String>,
) -> anyhow::Result<Finished> {
    let shell = ShellCommand {
        run: step.run.clone(),
        env: user_env(user, env, &step.env),
        cwd: step.cwd.as_deref().map(|c| expand(user, base, c)).unwrap_or_else(|| base.to_path_buf()),
        user: Some((user.uid, user.gid)),
        timeout: Duration::from_secs_f64(step.timeout_s),
    };
    command::run(&shell, &mut |stream: LogStream, chunk: &[u8]| ctx.log(stream, chunk))
}

/// Records the companions of metric `key` (`<key>.cpu`, `<key>.maxrss`, …) for `trial`.
pub fn record_usage(ctx: &PhaseContext, key: &str, trial: u32, usage: &Usage) {
    for (metric, value, unit) in usage.companions(key) {
        ctx.value(&metric, trial, value, unit);
    }
}

/// Stops every process of `user`, noting it in the log.
pub fn hygiene(user: &User) -> anyhow::Result<()> {
    crate::probes::processes::stop_user_processes(&user.name, user.uid)
}

/// Writes a transcript to the state folder and sends it to the controller.
pub fn keep_transcript(ctx: &PhaseContext, name: &str, bytes: &[u8]) {
    let dir = ctx.state_dir.join("transcripts");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join(name), bytes);
    }
    ctx.file(&format!("transcripts/{name}"), bytes);
}
