//! The sandboxes of this machine, by hand: `ls`, `shell`, `logs`, `rm`, and `phase` (rerun one
//! phase on a sandbox kept by `sandbench debug --keep`). Errors say what to do next.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::provision::docker::{AGENT_PATH_IN_SANDBOX, ContainerInfo};
use crate::provision::{DockerProvisioner, labels};
use crate::store::{Data, StoredBody, StoredEvent};

/// The sandbox an id names: its name, a prefix of it, or of its container id.
pub async fn find(provisioner: &DockerProvisioner, id: &str) -> anyhow::Result<ContainerInfo> {
    let all = provisioner.list(None).await?;
    let matches: Vec<&ContainerInfo> = all
        .iter()
        .filter(|c| c.name == id || (!id.is_empty() && (c.name.starts_with(id) || c.id.starts_with(id))))
        .collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] if all.is_empty() => bail!("no sandbox {id:?}: there are no sandbench sandboxes on this machine"),
        [] => bail!(
            "no sandbox {id:?}; known sandboxes: {}",
            all.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
        ),
        many => bail!(
            "{id:?} names several sandboxes: {}",
            many.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

fn duration(secs: i64) -> String {
    match secs {
        s if s < 0 => "expired".to_string(),
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// `sandbench ls`: a table of every sandbench sandbox.
pub fn table(containers: &[ContainerInfo], now: i64) -> String {
    let mut rows = vec![
        ["SANDBOX", "RUN", "ROLE", "IMAGE", "STATE", "AGE", "EXPIRES IN", "COST SO FAR"].map(String::from).to_vec(),
    ];
    for c in containers {
        let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
        let age = now - c.created;
        let expires =
            label(labels::EXPIRES_AT).parse::<i64>().map(|e| duration(e - now)).unwrap_or_else(|_| "—".into());
        let cost = label(labels::USD_PER_HOUR)
            .parse::<f64>()
            .map(|rate| format!("${:.4}", rate * age as f64 / 3600.0))
            .unwrap_or_else(|_| "—".into());
        rows.push(vec![
            c.name.clone(),
            label(labels::RUN),
            label(labels::ROLE),
            c.image.clone(),
            c.state.clone(),
            duration(age),
            expires,
            cost,
        ]);
    }
    let widths: Vec<usize> = (0..8).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    rows.iter()
        .map(|r| {
            r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_string()
                + "\n"
        })
        .collect()
}

pub async fn ls(provisioner: &DockerProvisioner) -> anyhow::Result<String> {
    let mut all = provisioner.list(None).await?;
    all.sort_by(|a, b| a.name.cmp(&b.name));
    if all.is_empty() {
        return Ok("no sandbench sandboxes\n".into());
    }
    Ok(table(&all, now_secs()))
}

pub async fn logs(provisioner: &DockerProvisioner, id: &str, follow: bool) -> anyhow::Result<()> {
    let c = find(provisioner, id).await?;
    if !follow {
        print!("{}", provisioner.logs(&c.name).await?);
        return Ok(());
    }
    let mut stream = std::pin::pin!(provisioner.logs_follow(&c.name));
    while let Some(chunk) = stream.next().await {
        print!("{}", chunk?);
        let _ = std::io::stdout().flush();
    }
    Ok(())
}

pub async fn rm(
    provisioner: &DockerProvisioner,
    id: Option<&str>,
    run: Option<&str>,
    all: bool,
) -> anyhow::Result<Vec<String>> {
    let targets: Vec<ContainerInfo> = match (id, run, all) {
        (Some(id), None, false) => vec![find(provisioner, id).await?],
        (None, Some(run), false) => {
            let found = provisioner.list(Some((labels::RUN, run))).await?;
            if found.is_empty() {
                bail!("no sandbox of run {run:?}; `sandbench ls` shows the runs");
            }
            found
        }
        (None, None, true) => provisioner.list(None).await?,
        _ => bail!("give one of: a sandbox id, --run RUN, or --all"),
    };
    let mut removed = Vec::new();
    for c in targets {
        provisioner.remove(&c.id).await?;
        removed.push(c.name);
    }
    Ok(removed)
}

/// The command line of `shell`: as root, or as `user` through the agent's `run-as` (which gives
/// the user the environment the phases give it).
pub fn shell_command(user: Option<&str>, command: &[String]) -> Vec<String> {
    match user {
        None if command.is_empty() => vec!["/bin/sh".into(), "-c".into(), "exec bash -l 2>/dev/null || exec sh".into()],
        None => command.to_vec(),
        Some(user) => {
            let mut cmd = vec![AGENT_PATH_IN_SANDBOX.to_string(), "run-as".into(), user.to_string()];
            if !command.is_empty() {
                cmd.push("--".into());
                cmd.extend(command.iter().cloned());
            }
            cmd
        }
    }
}

/// `sandbench shell ID [--user U] [-- CMD...]`: a command runs to its end and gives its exit
/// code; without one, an interactive terminal that follows the local terminal's size.
pub async fn shell(
    provisioner: &DockerProvisioner,
    id: &str,
    user: Option<&str>,
    command: &[String],
) -> anyhow::Result<i32> {
    let c = find(provisioner, id).await?;
    if !provisioner.running(&c.name).await? {
        bail!("sandbox {} is not running ({}); its log: sandbench logs {}", c.name, c.state, c.name);
    }
    let cmd = shell_command(user, command);
    if !command.is_empty() {
        let (code, output) = provisioner.exec_capture(&c.name, cmd).await?;
        print!("{output}");
        return Ok(i32::try_from(code).unwrap_or(1));
    }
    let (rows, cols) = terminal_size().unwrap_or((24, 80));
    let session = provisioner.exec_terminal(&c.name, cmd, rows, cols).await?;
    let raw = RawMode::enter();
    let exec_id = session.id.clone();
    let mut input = session.input;
    let mut output = session.output;
    let stdin_task = tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if input.write_all(&buf[..n]).await.is_err() || input.flush().await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok();
    let mut stdout = tokio::io::stdout();
    loop {
        tokio::select! {
            chunk = output.next() => match chunk {
                Some(Ok(out)) => {
                    stdout.write_all(&out.into_bytes()).await?;
                    stdout.flush().await?;
                }
                _ => break,
            },
            Some(()) = async { match winch.as_mut() { Some(w) => w.recv().await, None => std::future::pending().await } } => {
                if let Some((rows, cols)) = terminal_size() {
                    let _ = provisioner.resize_terminal(&exec_id, rows, cols).await;
                }
            }
        }
    }
    stdin_task.abort();
    drop(raw);
    Ok(i32::try_from(provisioner.exec_exit_code(&exec_id).await?).unwrap_or(1))
}

fn terminal_size() -> Option<(u16, u16)> {
    // SAFETY: TIOCGWINSZ fills a winsize struct for a valid fd.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_row > 0;
    ok.then_some((ws.ws_row, ws.ws_col))
}

/// The local terminal in raw mode for the lifetime of this value (when stdin is a terminal).
struct RawMode(Option<libc::termios>);

impl RawMode {
    fn enter() -> RawMode {
        // SAFETY: termios calls on fd 0; the saved state is restored on drop.
        unsafe {
            if libc::isatty(0) != 1 {
                return RawMode(None);
            }
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return RawMode(None);
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            libc::tcsetattr(0, libc::TCSANOW, &raw);
            RawMode(Some(saved))
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = self.0 {
            // SAFETY: restores the state saved by `enter`.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, &saved);
            }
        }
    }
}

/// One line of a phase's output as a person reads it.
pub fn describe_event(event: &StoredEvent) -> Option<String> {
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
pub async fn phase(provisioner: &DockerProvisioner, id: &str, phase: &str, trial: u32) -> anyhow::Result<bool> {
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
                print!("{text}");
                let _ = std::io::stdout().flush();
            }
        }
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_age_expiry_and_cost_so_far() {
        let c = ContainerInfo {
            id: "abc".into(),
            name: "sandbench-r1-base".into(),
            state: "running".into(),
            image: "node:24-bookworm".into(),
            created: 1_000,
            labels: [
                (labels::RUN.to_string(), "r1".to_string()),
                (labels::ROLE.to_string(), "base".to_string()),
                (labels::EXPIRES_AT.to_string(), "2800".to_string()),
                (labels::USD_PER_HOUR.to_string(), "0.36".to_string()),
            ]
            .into(),
        };
        let text = table(&[c], 1_600);
        let row = text.lines().nth(1).unwrap();
        assert_eq!(row, "sandbench-r1-base  r1   base  node:24-bookworm  running  10m  20m         $0.0600", "{text}");
    }

    #[test]
    fn shells_run_as_root_or_through_the_agent() {
        assert_eq!(shell_command(None, &["id".into()]), ["id"]);
        assert_eq!(
            shell_command(Some("benchmark1"), &["id".into()]),
            [AGENT_PATH_IN_SANDBOX, "run-as", "benchmark1", "--", "id"]
        );
        assert_eq!(shell_command(Some("benchmark1"), &[]), [AGENT_PATH_IN_SANDBOX, "run-as", "benchmark1"]);
    }
}
