//! What the agent is doing, for a person inside the sandbox: the running agent writes
//! `status.json` in its state folder; `sandbox-agent status` (through `docker exec`) prints it.

use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    pub sandbox_id: String,
    pub pid: u32,
    pub connected: bool,
    /// Highest seq in the journal, sent to the controller, and acknowledged by it.
    pub journal_seq: u64,
    pub sent_seq: u64,
    pub acked_seq: u64,
    /// The command running now, or last run.
    pub command_id: Option<String>,
    pub phase: Option<String>,
    pub trial: Option<u32>,
    pub running: bool,
    pub updated_unix_ms: u64,
}

const FILE: &str = "status.json";

pub fn write(state_dir: &Path, status: &AgentStatus) {
    let tmp = state_dir.join("status.json.tmp");
    if let Ok(bytes) = serde_json::to_vec_pretty(status)
        && std::fs::write(&tmp, bytes).is_ok()
    {
        let _ = std::fs::rename(&tmp, state_dir.join(FILE));
    }
}

pub fn read(state_dir: &Path) -> anyhow::Result<AgentStatus> {
    let path = state_dir.join(FILE);
    let bytes = std::fs::read(&path)
        .map_err(|e| anyhow::anyhow!("no agent status at {} ({e}): the agent has not started here", path.display()))?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// The status as lines for a person; `alive` says whether the agent process still runs.
pub fn describe(s: &AgentStatus, alive: bool, now_unix_ms: u64) -> String {
    let age = now_unix_ms.saturating_sub(s.updated_unix_ms) as f64 / 1000.0;
    let work = match (&s.phase, s.trial, s.running) {
        (Some(phase), Some(trial), true) => {
            format!("running {phase} trial {trial} ({})", s.command_id.as_deref().unwrap_or(""))
        }
        (Some(phase), Some(trial), false) => format!("idle; last ran {phase} trial {trial}"),
        _ => "idle; no phase run yet".to_string(),
    };
    format!(
        "sandbox:    {}\nagent:      {} (pid {})\ncontroller: {}\nwork:       {work}\nevents:     journal {}, sent {}, acknowledged {}, unacknowledged {}\nupdated:    {age:.1} s ago\n",
        s.sandbox_id,
        if alive { "running" } else { "not running" },
        s.pid,
        if s.connected { "connected" } else { "not connected" },
        s.journal_seq,
        s.sent_seq,
        s.acked_seq,
        s.journal_seq.saturating_sub(s.acked_seq),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips_and_reads_for_a_person() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap_err().to_string().contains("has not started"));
        let s = AgentStatus {
            sandbox_id: "sb".into(),
            pid: 1,
            connected: true,
            journal_seq: 10,
            sent_seq: 9,
            acked_seq: 7,
            command_id: Some("install-1".into()),
            phase: Some("install".into()),
            trial: Some(1),
            running: true,
            updated_unix_ms: 1_000,
        };
        write(dir.path(), &s);
        assert_eq!(read(dir.path()).unwrap(), s);
        let text = describe(&s, true, 3_500);
        assert!(text.contains("running install trial 1 (install-1)"), "{text}");
        assert!(
            text.contains("unacknowledged 3") && text.contains("2.5 s ago") && text.contains("controller: connected"),
            "{text}"
        );
    }
}
