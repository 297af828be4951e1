//! CPU time of a user's live process tree, as the reference harness counts it for interactions:
//! utime + stime of every live process (not the children they waited for), so the delta over an
//! interaction is the sum after minus the sum before, clamped at zero because a process that
//! exited meanwhile takes its time with it.
//!
//! Resolution: a process's utime and stime are whole clock ticks (10 ms), as large as the CPU an
//! interaction costs, so a delta of two readings is mostly rounding. Each thread's scheduler
//! statistics (`/proc/PID/task/TID/schedstat`, nanoseconds on CPU, user and system alike) are read
//! instead; a process whose threads cannot be read that way counts its ticks.

use std::path::Path;

use procfs::process::{Process, Stat};

use super::processes;

/// utime + stime (clock ticks) of a process, without the children it waited for.
pub fn own_ticks(stat: &Stat) -> u64 {
    stat.utime + stat.stime
}

/// Threads of one process read for their run time; past it, the process counts its ticks (a
/// hostile workload can make threads faster than anyone should read them).
const MAX_THREADS: usize = 4096;

/// CPU seconds the live processes of `uid` have used, read from `proc` (normally `/proc`).
pub fn live_seconds(proc: &Path, uid: u32) -> f64 {
    processes::of_user(proc, uid)
        .iter()
        .filter_map(|p| Process::new_with_root(proc.join(p.pid.to_string())).ok())
        .map(|p| process_seconds(&p))
        .sum()
}

/// One process's CPU seconds: its threads' nanoseconds on CPU, else its utime + stime ticks.
fn process_seconds(process: &Process) -> f64 {
    if let Some(ns) = threads_ns(process) {
        return ns as f64 / 1e9;
    }
    process.stat().map(|stat| own_ticks(&stat) as f64 / procfs::ticks_per_second().max(1) as f64).unwrap_or(0.0)
}

/// The summed `sum_exec_runtime` of a process's threads; `None` when any cannot be read.
fn threads_ns(process: &Process) -> Option<u64> {
    let mut total = 0u64;
    for (i, task) in process.tasks().ok()?.enumerate() {
        if i >= MAX_THREADS {
            return None;
        }
        total = total.saturating_add(task.ok()?.schedstat().ok()?.sum_exec_runtime);
    }
    Some(total)
}

/// The CPU an interaction cost: after minus before, never negative.
pub fn delta(before: f64, after: f64) -> f64 {
    (after - before).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::processes::{parse_stat, tests::status_text};

    #[test]
    fn counts_user_and_system_time_but_not_waited_children() {
        // pid (comm with ) spaces) state ppid … utime=7 stime=3 cutime=100 cstime=50
        let stat = "42 (node ) x) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 100 50 20 0 1 0 5 1 1 1 1 1 1 1 1 0 0 0 0 0 0 0";
        assert_eq!(parse_stat(stat).map(|s| own_ticks(&s)), Some(10));
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn sums_live_processes_of_the_user_only() {
        let dir = tempfile::tempdir().unwrap();
        let tps = procfs::ticks_per_second() as u64;
        for (pid, uid, state, utime) in [
            (10, 2001, "S (sleeping)", 3 * tps),
            (11, 2001, "Z (zombie)", 50 * tps),
            (12, 0, "S (sleeping)", 70 * tps),
            (13, 2001, "R (running)", 2 * tps),
        ] {
            let p = dir.path().join(pid.to_string());
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("status"), status_text(pid, "p", state, uid, Some(1))).unwrap();
            let s = state.chars().next().unwrap();
            std::fs::write(
                p.join("stat"),
                format!(
                    "{pid} (p) {s} 1 {pid} {pid} 0 -1 0 0 0 0 0 {utime} 0 9 9 20 0 1 0 5 1 1 1 1 1 1 1 1 0 0 0 0 0 0 0"
                ),
            )
            .unwrap();
        }
        // No task folders: the ticks count.
        assert_eq!(live_seconds(dir.path(), 2001), 5.0);
        // Threads with scheduler statistics count their nanoseconds instead (pid 10: 1.5 s +
        // 0.25 s over two threads; pid 13 keeps its 2 s of ticks).
        for (tid, ns) in [(10, 1_500_000_000u64), (20, 250_000_000)] {
            let task = dir.path().join("10/task").join(tid.to_string());
            std::fs::create_dir_all(&task).unwrap();
            std::fs::write(task.join("schedstat"), format!("{ns} 12345 67\n")).unwrap();
        }
        assert!((live_seconds(dir.path(), 2001) - 3.75).abs() < 1e-9);
        // A thread whose statistics cannot be read sends its process back to ticks.
        std::fs::create_dir_all(dir.path().join("10/task/21")).unwrap();
        assert_eq!(live_seconds(dir.path(), 2001), 5.0);
        assert_eq!(delta(2.0, 1.5), 0.0);
        assert!((delta(1.0, 1.25) - 0.25).abs() < 1e-12);
    }
}
