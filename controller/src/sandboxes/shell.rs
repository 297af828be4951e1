//! `sandbench shell ID [--user U] [-- CMD]`: a terminal in a sandbox, or one command run in it.

use anyhow::bail;
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::find;
use crate::provision::DockerProvisioner;
use crate::provision::docker::AGENT_PATH_IN_SANDBOX;

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

#[cfg(test)]
mod tests {
    use super::*;

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
