//! Reaps orphaned processes. The agent is PID 1 of its sandbox (or a child subreaper), so every
//! process whose parent dies becomes its child; zombies it did not spawn itself are collected
//! here. Processes the agent waits for itself are left alone (their pids are `owned`).

use std::collections::HashSet;
use std::process::{Child, Command};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use procfs::process::Stat;
use rustix::process::{Pid, WaitOptions, waitpid};
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

/// [`spawn_owned`], and the moment just before the spawn itself (after the lock), where a
/// timed run starts.
pub fn spawn_owned_timed(command: &mut Command) -> std::io::Result<(Child, std::time::Instant)> {
    let mut owned = lock(&OWNED);
    let started = std::time::Instant::now();
    let child = command.spawn()?;
    owned.insert(child.id() as i32);
    Ok((child, started))
}

/// Forgets a child once the caller has waited for it.
pub fn disown(pid: u32) {
    lock(&OWNED).remove(&(pid as i32));
}

/// Marks the agent as a child subreaper, so orphans come to it even when it is not PID 1.
pub fn become_subreaper() {
    if let Err(err) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        tracing::warn!("cannot become a child subreaper ({err}); orphans go to PID 1");
    }
}

/// Reaps on every SIGCHLD, and once a second in case a signal was coalesced.
pub async fn run() {
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(err) => {
            tracing::warn!("cannot watch SIGCHLD ({err}); reaping once a second");
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
    let Ok(all) = procfs::process::all_processes() else { return };
    for stat in all.flatten().filter_map(|p| p.stat().ok()) {
        if is_foreign_zombie(&stat, me, &owned)
            && let Some(pid) = Pid::from_raw(stat.pid)
        {
            let _ = waitpid(Some(pid), WaitOptions::NOHANG);
        }
    }
}

/// A zombie child of `me` that no phase waits for itself.
pub fn is_foreign_zombie(stat: &Stat, me: i32, owned: &HashSet<i32>) -> bool {
    stat.state == 'Z' && stat.ppid == me && !owned.contains(&stat.pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::processes::parse_stat;

    fn stat(line: &str) -> Stat {
        parse_stat(&format!("{line} 0 -1 0 0 0 0 0 0 0 0 0 0 20 0 1 0 1 1 1 1 1 1 1 1 1 0 0 0 0 0 0 0")).unwrap()
    }

    #[test]
    fn reaps_only_foreign_zombie_children_whatever_their_names() {
        let owned = HashSet::from([9]);
        assert!(is_foreign_zombie(&stat("7 (a) b) Z 3 7"), 3, &owned), "a name with ') ' in it");
        assert!(!is_foreign_zombie(&stat("7 (a) Z) S 3 7"), 3, &owned), "not a zombie");
        assert!(!is_foreign_zombie(&stat("8 (x) Z 4 8"), 3, &owned), "another parent's");
        assert!(!is_foreign_zombie(&stat("9 (x) Z 3 9"), 3, &owned), "a phase waits for it");
    }
}
