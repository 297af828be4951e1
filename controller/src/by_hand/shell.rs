//! `sandbench shell ID [--user U] [-- CMD]`: a terminal in a sandbox, or one command run in it.
//!
//! The terminal works like `docker exec -it`: the remote command has a terminal of the local
//! one's size (set at start and on every SIGWINCH), the local terminal is raw so every key
//! (Ctrl-C, Ctrl-Z, arrows) reaches the remote terminal, and the command returns as soon as the
//! remote side ends. Keys are read on a thread of its own that polls the terminal and a wake-up
//! pipe, so it stops at once without reading (and swallowing) a key typed after the end.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::StreamExt;
use rustix::event::{PollFd, PollFlags, poll};
use rustix::io::Errno;
use rustix::termios::{OptionalActions, Termios, isatty, tcgetattr, tcgetwinsize, tcsetattr};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::find;
use crate::provision::docker::AGENT_PATH_IN_SANDBOX;
use crate::provision::{Provisioner, Terminal};

/// Root's terminal: a login bash when the image has one, else a login sh.
const ROOT_SHELL: &str = "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi";

/// The command line of `shell`: as root, or as `user` through the agent's `run-as` (which gives
/// the user the environment the phases give it).
pub fn shell_command(user: Option<&str>, command: &[String]) -> Vec<String> {
    match user {
        None if command.is_empty() => vec!["/bin/sh".into(), "-c".into(), ROOT_SHELL.into()],
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
    provisioner: &dyn Provisioner,
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
        let (code, output) = provisioner.exec(&c.name, cmd).await?;
        // The command's output unaltered, as `docker exec` gives it: the operator asked for it,
        // and may pipe it (a terminal session is forwarded the same way, below).
        let mut stdout = tokio::io::stdout();
        stdout.write_all(output.as_bytes()).await?;
        stdout.flush().await?;
        return Ok(i32::try_from(code).unwrap_or(1));
    }
    let (rows, cols) = terminal_size().unwrap_or((24, 80));
    let session = provisioner.terminal(&c.name, cmd, rows, cols).await?;
    let exec_id = session.id.clone();
    // Engines before API 1.42 ignore the size given at create: set it once the command runs.
    set_size_at_start(provisioner, &exec_id, rows, cols).await;
    let raw = RawMode::enter();
    let keys = KeyReader::start().context("cannot read the terminal")?;
    let forwarded = forward(provisioner, session, keys.receiver, &mut tokio::io::stdout()).await;
    keys.stop.stop();
    drop(raw);
    forwarded?;
    Ok(i32::try_from(exit_code(provisioner, &exec_id).await?).unwrap_or(1))
}

/// Copies keys to the remote terminal and its output here, and passes on size changes, until
/// the remote side ends.
pub(super) async fn forward(
    provisioner: &dyn Provisioner,
    session: Terminal,
    mut keys: mpsc::Receiver<Vec<u8>>,
    stdout: &mut (impl tokio::io::AsyncWrite + Unpin),
) -> anyhow::Result<()> {
    let Terminal { id: exec_id, mut input, mut output } = session;
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok();
    let mut keys_open = true;
    loop {
        tokio::select! {
            chunk = output.next() => match chunk {
                Some(Ok(out)) => {
                    stdout.write_all(&out).await?;
                    stdout.flush().await?;
                }
                _ => return Ok(()),
            },
            key = keys.recv(), if keys_open => match key {
                Some(bytes) => {
                    // The remote side may be ending: its output stream says when.
                    let _ = input.write_all(&bytes).await;
                    let _ = input.flush().await;
                }
                None => keys_open = false,
            },
            Some(()) = async { match winch.as_mut() { Some(w) => w.recv().await, None => std::future::pending().await } } => {
                if let Some((rows, cols)) = terminal_size() {
                    let _ = provisioner.resize_terminal(&exec_id, rows, cols).await;
                }
            }
        }
    }
}

/// Sets the remote terminal's size, retrying briefly while the engine is still starting it.
async fn set_size_at_start(provisioner: &dyn Provisioner, exec_id: &str, rows: u16, cols: u16) {
    for attempt in 0..10u32 {
        if provisioner.resize_terminal(exec_id, rows, cols).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10 << attempt.min(4))).await;
    }
}

/// The remote command's exit code, once the engine has recorded it.
pub(super) async fn exit_code(provisioner: &dyn Provisioner, exec_id: &str) -> anyhow::Result<i64> {
    let mut code = provisioner.terminal_exit_code(exec_id).await?;
    for _ in 0..40 {
        if code != -1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        code = provisioner.terminal_exit_code(exec_id).await?;
    }
    Ok(code)
}

/// The local terminal's size (rows, columns): of stdout, else stdin, else stderr.
fn terminal_size() -> Option<(u16, u16)> {
    let sizes = [
        tcgetwinsize(std::io::stdout().as_fd()),
        tcgetwinsize(std::io::stdin().as_fd()),
        tcgetwinsize(std::io::stderr().as_fd()),
    ];
    sizes.into_iter().flatten().find(|ws| ws.ws_row > 0 && ws.ws_col > 0).map(|ws| (ws.ws_row, ws.ws_col))
}

/// Keys typed here, read on a thread of their own until [`Stop::stop`].
struct KeyReader {
    receiver: mpsc::Receiver<Vec<u8>>,
    stop: Stop,
}

/// Ends a [`KeyReader`]'s thread: wakes its poll and waits for it.
struct Stop {
    wake: Option<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Stop {
    fn stop(mut self) {
        // Closing the pipe's write end wakes the poll (POLLHUP) and the thread returns.
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl KeyReader {
    fn start() -> std::io::Result<KeyReader> {
        let (wake_read, wake_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (tx, receiver) = mpsc::channel(64);
        let thread = std::thread::Builder::new().name("keys".into()).spawn(move || read_keys(&wake_read, &tx))?;
        Ok(KeyReader { receiver, stop: Stop { wake: Some(wake_write), thread: Some(thread) } })
    }
}

/// Reads stdin while it has bytes and `wake` is open. At end of input (stdin not a terminal),
/// sends Ctrl-D, which the remote terminal reads as end of input.
fn read_keys(wake: &OwnedFd, tx: &mpsc::Sender<Vec<u8>>) {
    let stdin = std::io::stdin();
    let mut buf = [0u8; 4096];
    loop {
        let mut fds = [PollFd::new(&stdin, PollFlags::IN), PollFd::new(wake, PollFlags::IN)];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(_) => return,
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        if fds[0].revents().is_empty() {
            continue;
        }
        // Straight from fd 0: std's buffered stdin could keep bytes past a poll.
        let bytes = match rustix::io::read(&stdin, &mut buf) {
            Ok(0) => {
                let _ = tx.blocking_send(vec![0x04]);
                return;
            }
            Ok(n) => buf[..n].to_vec(),
            Err(Errno::INTR) => continue,
            Err(_) => return,
        };
        if tx.blocking_send(bytes).is_err() {
            return;
        }
    }
}

/// The local terminal in raw mode for the lifetime of this value (when stdin is a terminal).
struct RawMode(Option<Termios>);

impl RawMode {
    fn enter() -> RawMode {
        let stdin = std::io::stdin();
        if !isatty(&stdin) {
            return RawMode(None);
        }
        let Ok(saved) = tcgetattr(&stdin) else { return RawMode(None) };
        let mut raw = saved.clone();
        raw.make_raw();
        let _ = tcsetattr(&stdin, OptionalActions::Now, &raw);
        RawMode(Some(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, saved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shells_run_as_root_or_through_the_agent() {
        assert_eq!(shell_command(None, &["id".into()]), ["id"]);
        // Root's terminal keeps its stderr (bash's prompt and every error are written there).
        let root = shell_command(None, &[]);
        assert_eq!(root[..2], ["/bin/sh", "-c"]);
        assert!(root[2].contains("then exec bash -l; else exec sh -l; fi"), "{root:?}");
        assert_eq!(
            shell_command(Some("benchmark1"), &["id".into()]),
            [AGENT_PATH_IN_SANDBOX, "run-as", "benchmark1", "--", "id"]
        );
        assert_eq!(shell_command(Some("benchmark1"), &[]), [AGENT_PATH_IN_SANDBOX, "run-as", "benchmark1"]);
    }
}
