//! Reaps orphaned processes. The agent is PID 1 of its sandbox (or a child subreaper), so every
//! process whose parent dies becomes its child; zombies it did not spawn itself are collected
//! here. Processes the agent waits for itself are left alone (their pids are `owned`).

use std::collections::HashSet;
use std::process::{Child, Command};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::journal::lock;

/// Pids of children that some phase waits for itself. The lock is held while a phase spawns
/// and registers a child and while the reaper scans, so the reaper never takes a child's exit
/// status from the phase that waits for it.
static OWNED: LazyLock<Mutex<HashSet<i32>>> = LazyLock::new(Mutex::default);

/// Spawns a child that the caller will wait for itself.
pub fn spawn_owned(command: &mut Command) -> std::io::Result<Child> {
    let mut owned = lock(&OWNED);
    let child = command.spawn()?;
    owned.insert(child.id() as i32);
    Ok(child)
}

/// Forgets a child once the caller has waited for it.
pub fn disown(pid: u32) {
    lock(&OWNED).remove(&(pid as i32));
}

/// Marks the agent as a child subreaper, so orphans come to it even when it is not PID 1.
pub fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// Reaps on every SIGCHLD, and once a second in case a signal was coalesced.
pub async fn run() {
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(err) => {
            crate::log(&format!("cannot watch SIGCHLD ({err}); reaping once a second"));
            loop {
                reap_zombies();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    loop {
        tokio::select! {
            _ = sigchld.recv() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        reap_zombies();
    }
}

fn reap_zombies() {
    let me = std::process::id() as i32;
    let owned = lock(&OWNED);
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if let Some((state, ppid)) = parse_stat_state_ppid(&stat)
            && state == 'Z'
            && ppid == me
            && !owned.contains(&pid)
        {
            let mut status = 0;
            // SAFETY: waitpid on a specific pid with WNOHANG; status is a valid out pointer.
            unsafe {
                libc::waitpid(pid, &mut status, libc::WNOHANG);
            }
        }
    }
}

/// State and parent pid from `/proc/PID/stat`. The command name may contain spaces and
/// parentheses, so parsing starts after the last `)`.
pub fn parse_stat_state_ppid(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

#[cfg(test)]
mod tests {
    use super::parse_stat_state_ppid;

    #[test]
    fn parses_stat_with_hostile_command_names() {
        assert_eq!(parse_stat_state_ppid("42 (node) S 1 42 42 0 -1"), Some(('S', 1)));
        assert_eq!(parse_stat_state_ppid("7 (a) b) Z 3 7 7 0"), Some(('Z', 3)));
        assert_eq!(parse_stat_state_ppid("garbage"), None);
    }
}
