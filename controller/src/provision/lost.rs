//! Why a sandbox is gone, named from its container's state as the engine reports it: removed,
//! OOM-killed, lost with an engine restart, the agent's own exits (it lost its controller, it
//! was refused, its journal failed), killed by a signal, or exited with a code. Pure: the
//! Docker backend reads the state ([`super::DockerProvisioner::lost_cause`]).

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

/// Exit codes of `sandbox-agent` (its `main.rs`): the controller refused it (a bad token).
pub const AGENT_EXIT_REFUSED: i64 = 3;
/// The agent heard nothing from its controller for its dead-man window and stopped.
pub const AGENT_EXIT_CONTROLLER_LOST: i64 = 4;
/// The agent could not write its journal.
pub const AGENT_EXIT_JOURNAL: i64 = 5;

/// How long after the engine's start a container that ran under the previous engine may be
/// recorded as ended and still count as lost with the restart (the engine stops containers as it
/// goes down, and records the dead ones when it comes back).
const RESTART_GRACE: Duration = Duration::from_secs(60);

/// A container's state, as much of it as says why it stopped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerState {
    /// False when the engine does not know the container (it was removed).
    pub exists: bool,
    pub running: bool,
    pub paused: bool,
    pub oom_killed: bool,
    pub exit_code: i64,
    /// The engine's error for the container (e.g. from the runtime), empty when none.
    pub error: String,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
}

/// Why a sandbox stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum LostCause {
    /// It is not gone.
    Running,
    /// Frozen (`docker pause`): not gone, but its agent cannot answer.
    Paused,
    /// The container no longer exists.
    Removed,
    /// The kernel killed it at its memory limit.
    OomKilled,
    /// The Docker engine restarted (at this time) and the container did not survive it.
    EngineRestarted(Timestamp),
    /// The agent's dead-man switch: no word from its controller for its window.
    ControllerLost,
    /// The controller refused the agent.
    Refused,
    /// The agent could not write its journal.
    JournalFailed,
    /// Killed by this signal (exit status 128 + N).
    Signal(i32),
    /// Exited with this code.
    Exited(i64),
}

/// Names why the container in `state` stopped; `engine_started_at` is when the running Docker
/// engine started, when known. A container started under an earlier engine that ended by
/// shortly after the current one started was lost with the restart, whatever its exit code
/// (the engine's stop gives it one).
pub fn classify(state: &ContainerState, engine_started_at: Option<Timestamp>) -> LostCause {
    if !state.exists {
        return LostCause::Removed;
    }
    if state.paused {
        return LostCause::Paused;
    }
    if state.running {
        return LostCause::Running;
    }
    if state.oom_killed {
        return LostCause::OomKilled;
    }
    if let (Some(engine), Some(started)) = (engine_started_at, state.started_at) {
        let ended_with_it = state.finished_at.is_none_or(|f| f <= engine + RESTART_GRACE);
        if started < engine && ended_with_it {
            return LostCause::EngineRestarted(engine);
        }
    }
    match state.exit_code {
        AGENT_EXIT_REFUSED => LostCause::Refused,
        AGENT_EXIT_CONTROLLER_LOST => LostCause::ControllerLost,
        AGENT_EXIT_JOURNAL => LostCause::JournalFailed,
        code if (129..=192).contains(&code) => LostCause::Signal((code - 128) as i32),
        code => LostCause::Exited(code),
    }
}

/// A signal's name, for the common ones.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return None,
    })
}

impl fmt::Display for LostCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostCause::Running => write!(f, "still running"),
            LostCause::Paused => write!(f, "paused (docker pause): its agent cannot answer"),
            LostCause::Removed => write!(f, "its container was removed"),
            LostCause::OomKilled => write!(f, "OOM-killed: it reached its memory limit"),
            LostCause::EngineRestarted(at) => {
                write!(
                    f,
                    "the Docker engine restarted (at {}) and the sandbox did not survive it",
                    at.round(jiff::Unit::Second).unwrap_or(*at)
                )
            }
            LostCause::ControllerLost => write!(
                f,
                "its agent lost its controller (no word for its dead-man window, see --dead-man) and exited {AGENT_EXIT_CONTROLLER_LOST}"
            ),
            LostCause::Refused => write!(f, "the controller refused its agent (exit {AGENT_EXIT_REFUSED})"),
            LostCause::JournalFailed => write!(f, "its agent could not write its journal (exit {AGENT_EXIT_JOURNAL})"),
            LostCause::Signal(n) => match signal_name(*n) {
                Some(name) => write!(f, "killed by signal {n} ({name})"),
                None => write!(f, "killed by signal {n}"),
            },
            LostCause::Exited(code) => write!(f, "exited {code}"),
        }
    }
}

/// Why a sandbox stopped as far as its backend can tell ([`super::Provisioner::lost_cause`]),
/// with the engine's own error when it gave one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lost {
    /// None when the backend cannot tell.
    pub cause: Option<LostCause>,
    /// The engine's error for the container, or why the backend could not tell; empty when none.
    pub detail: String,
}

impl Lost {
    /// Why the container in `state` stopped ([`classify`]), with the engine's error.
    pub fn of(state: &ContainerState, engine_started_at: Option<Timestamp>) -> Lost {
        Lost { cause: Some(classify(state, engine_started_at)), detail: state.error.trim().to_string() }
    }

    /// The backend could not tell, for this reason.
    pub fn unknown(why: impl fmt::Display) -> Lost {
        Lost { cause: None, detail: why.to_string() }
    }

    /// Whether the sandbox did not survive a restart of its engine.
    pub fn with_engine_restart(&self) -> bool {
        matches!(self.cause, Some(LostCause::EngineRestarted(_)))
    }
}

impl fmt::Display for Lost {
    /// The cause as a sentence part (`stopped` when unknown), the detail in parentheses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Some(cause) if self.detail.is_empty() || matches!(cause, LostCause::Running | LostCause::Removed) => {
                write!(f, "{cause}")
            }
            Some(cause) => write!(f, "{cause} ({})", self.detail),
            None if self.detail.is_empty() => write!(f, "stopped"),
            None => write!(f, "stopped ({})", self.detail),
        }
    }
}

/// The cause as a sentence part, with the engine's own error when it gave one.
pub fn describe(state: &ContainerState, engine_started_at: Option<Timestamp>) -> String {
    Lost::of(state, engine_started_at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// A container that started at 10:00 and exited with `code` at 10:05.
    fn exited(code: i64) -> ContainerState {
        ContainerState {
            exists: true,
            exit_code: code,
            started_at: Some(at("2026-03-01T10:00:00Z")),
            finished_at: Some(at("2026-03-01T10:05:00Z")),
            ..Default::default()
        }
    }

    #[test]
    fn exit_codes_name_signals_the_agents_own_exits_and_plain_exits() {
        assert_eq!(classify(&exited(137), None), LostCause::Signal(9));
        assert_eq!(classify(&exited(137), None).to_string(), "killed by signal 9 (SIGKILL)");
        assert_eq!(classify(&exited(143), None).to_string(), "killed by signal 15 (SIGTERM)");
        assert_eq!(classify(&exited(128 + 40), None).to_string(), "killed by signal 40");
        assert_eq!(classify(&exited(4), None), LostCause::ControllerLost);
        assert!(classify(&exited(4), None).to_string().contains("lost its controller"));
        assert_eq!(classify(&exited(3), None), LostCause::Refused);
        assert_eq!(classify(&exited(5), None), LostCause::JournalFailed);
        assert_eq!(classify(&exited(1), None).to_string(), "exited 1");
        assert_eq!(classify(&exited(0), None).to_string(), "exited 0");
        assert_eq!(classify(&exited(255), None).to_string(), "exited 255");
        assert_eq!(classify(&exited(128), None), LostCause::Exited(128));
    }

    #[test]
    fn the_memory_limit_outranks_the_exit_code() {
        let state = ContainerState { oom_killed: true, ..exited(137) };
        assert_eq!(classify(&state, None), LostCause::OomKilled);
        assert_eq!(classify(&state, None).to_string(), "OOM-killed: it reached its memory limit");
    }

    #[test]
    fn removed_running_and_paused_containers_are_named_as_such() {
        assert_eq!(classify(&ContainerState::default(), None), LostCause::Removed);
        let running = ContainerState { exists: true, running: true, ..Default::default() };
        assert_eq!(classify(&running, None), LostCause::Running);
        let paused = ContainerState { paused: true, ..running };
        assert_eq!(classify(&paused, None), LostCause::Paused);
    }

    #[test]
    fn a_container_that_ended_with_the_previous_engine_was_lost_with_its_restart() {
        // The engine went down at 10:05 (stopping the container: exit 0 or 143) and came back
        // at 10:06.
        let engine = at("2026-03-01T10:06:00Z");
        for code in [0, 143, 137, 255] {
            assert_eq!(classify(&exited(code), Some(engine)), LostCause::EngineRestarted(engine), "exit {code}");
        }
        assert_eq!(
            classify(&exited(0), Some(engine)).to_string(),
            "the Docker engine restarted (at 2026-03-01T10:06:00Z) and the sandbox did not survive it"
        );
        // Found dead as the new engine restored it: recorded just after its start.
        let found_dead = ContainerState { finished_at: Some(at("2026-03-01T10:06:02Z")), ..exited(255) };
        assert_eq!(classify(&found_dead, Some(engine)), LostCause::EngineRestarted(engine));
        // Survived the restart (live-restore), then was killed much later: the signal.
        let later = ContainerState { finished_at: Some(at("2026-03-01T10:30:00Z")), ..exited(137) };
        assert_eq!(classify(&later, Some(engine)), LostCause::Signal(9));
        // Started under the current engine: its exit code says what happened.
        let earlier_engine = at("2026-03-01T09:00:00Z");
        assert_eq!(classify(&exited(4), Some(earlier_engine)), LostCause::ControllerLost);
    }

    #[test]
    fn the_engines_error_is_kept() {
        let state = ContainerState { error: "OCI runtime exec failed".into(), ..exited(127) };
        assert_eq!(describe(&state, None), "exited 127 (OCI runtime exec failed)");
        assert_eq!(describe(&exited(137), None), "killed by signal 9 (SIGKILL)");
    }

    #[test]
    fn a_loss_the_backend_cannot_tell_reads_as_stopped_and_only_a_restart_is_the_engine_s() {
        assert_eq!(Lost::default().to_string(), "stopped");
        assert_eq!(Lost::unknown("inspect failed").to_string(), "stopped (inspect failed)");
        let engine = at("2026-03-01T10:06:00Z");
        assert!(Lost::of(&exited(0), Some(engine)).with_engine_restart());
        assert!(!Lost::of(&exited(0), None).with_engine_restart());
        assert!(!Lost::unknown("the Docker engine restarted").with_engine_restart());
        let removed = ContainerState { error: "gone".into(), ..Default::default() };
        assert_eq!(Lost::of(&removed, None).to_string(), "its container was removed");
    }
}
