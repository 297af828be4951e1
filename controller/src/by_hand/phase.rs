//! `sandbench phase ID PHASE [--trial N]`: reruns one phase on a sandbox kept by
//! `sandbench debug --keep`, through the debug session that keeps it, and shows what it does.

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::find;
use crate::display::Display;
use crate::observations::store::{Data, StoredBody, StoredEvent};
use crate::provision::{Provisioner, labels};

/// One line of a phase's output as a person reads it, safe for a terminal (escape sequences and
/// control characters from the sandbox removed).
pub fn describe_event(event: &StoredEvent) -> Option<String> {
    let text = describe_raw(event)?;
    Some(crate::sanitize::terminal(&text).into_owned())
}

fn describe_raw(event: &StoredEvent) -> Option<String> {
    match &event.body {
        StoredBody::Observation { metric, trial, value: Some(v), unit, .. } => {
            Some(format!("  = {metric} trial {trial}: {v} {unit}\n"))
        }
        StoredBody::Observation { metric, trial, error: Some(e), .. } => {
            Some(format!("  ! {metric} trial {trial}: {e}\n"))
        }
        StoredBody::Log { data: Data::Text { text }, .. } => Some(text.clone()),
        StoredBody::PhaseStarted { phase, trial, .. } => Some(format!("--- {phase} trial {trial}\n")),
        StoredBody::PhaseDone { status, error, .. } => {
            Some(if error.is_empty() { format!("--- {status}\n") } else { format!("--- {status}: {error}\n") })
        }
        _ => None,
    }
}

/// `sandbench phase ID PHASE [--trial N]`: asks the debug session keeping the sandbox to rerun
/// one phase, and shows its output and observations as they come. Returns the phase's status.
pub async fn phase(
    provisioner: &dyn Provisioner,
    id: &str,
    phase: &str,
    trial: u32,
    display: &Display,
) -> anyhow::Result<bool> {
    let c = find(provisioner, id).await?;
    let Some(control) = c.labels.get(labels::CONTROL) else {
        bail!("sandbox {} is not kept by `sandbench debug --keep`, so no controller takes phases for it", c.name);
    };
    if !provisioner.running(&c.name).await? {
        bail!(
            "the agent of sandbox {} is gone (the container is {}); see `sandbench logs {}`",
            c.name,
            c.state,
            c.name
        );
    }
    let stream = tokio::net::UnixStream::connect(control).await.with_context(|| {
        format!(
            "the debug session that kept sandbox {} is gone; see `sandbench logs {}`, remove it with `sandbench rm {}`",
            c.name, c.name, c.name
        )
    })?;
    let (read, mut write) = stream.into_split();
    let request = serde_json::json!({ "phase": phase, "trial": trial });
    write.write_all(format!("{request}\n").as_bytes()).await?;
    let mut lines = BufReader::new(read).lines();
    let mut ok = false;
    while let Some(line) = lines.next_line().await? {
        let message: serde_json::Value = serde_json::from_str(&line)?;
        if let Some(error) = message.get("error").and_then(|e| e.as_str()) {
            bail!("{error}");
        }
        if let Some(event) = message.get("event").and_then(|e| serde_json::from_value::<StoredEvent>(e.clone()).ok()) {
            if let StoredBody::PhaseDone { status, .. } = &event.body {
                ok = status == "ok";
            }
            if let Some(text) = describe_event(&event) {
                display.output(&text);
            }
        }
    }
    Ok(ok)
}
