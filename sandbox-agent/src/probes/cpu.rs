//! CPU time of a user's live process tree, for the CPU companion of a timed interaction: the
//! sum over the user's live (not zombie) processes of each one's CPU time, without the children
//! it waited for. The delta over an interaction is the sum after minus the sum before, clamped
//! at zero because a process that exited meanwhile takes its time with it (as the reference
//! harness's `cpu_delta` does).
//!
//! A process's CPU time, and why it is read from the process's CPU-time clock:
//! - The reference reads utime + stime of `/proc/PID/stat` (fields 14 and 15). They cover every
//!   thread the process ever had — an exiting thread's time is added to its process's — but come
//!   in whole clock ticks (10 ms), as large as the CPU an interaction costs.
//! - Each live thread's `/proc/PID/task/TID/schedstat` has nanoseconds, but a thread that ran
//!   and exited inside the window (a worker of a pool, a one-off helper) is no longer there to
//!   be read, so its time is lost.
//! - The kernel keeps the exact total of the whole thread group — the live threads'
//!   `sum_exec_runtime` plus what the exited ones left behind — and hands it out as the
//!   process's CPU-time clock: `clock_getcpuclockid(pid)` then `clock_gettime`, for any
//!   process, no privilege needed. Nanoseconds, exited threads included: the reference's coverage
//!   at the schedstat's resolution, in one system call per process, however many threads it has
//!   (so no cap on threads to read). Adding the tick-sized remainder `stat − Σ task stats` to
//!   the threads' nanoseconds would cover exited threads too, but with up to two ticks of
//!   rounding per thread that ran.
//! - Where that clock cannot be read (a kernel or sandbox that refuses other processes' CPU
//!   clocks), the process counts its stat ticks, the reference's own measure.

use std::path::Path;

use procfs::process::{Process, Stat};

use super::processes;

/// utime + stime (clock ticks) of a process, without the children it waited for.
pub fn own_ticks(stat: &Stat) -> u64 {
    stat.utime + stat.stime
}

/// CPU seconds the live processes of `uid` have used, read from `proc` (the real `/proc`: the
/// processes' CPU-time clocks are read by pid).
pub fn live_seconds(proc: &Path, uid: u32) -> f64 {
    live_seconds_by(proc, uid, process_clock_ns)
}

/// [`live_seconds`] with the CPU-time clock of a process given (`None`: it counts its ticks).
fn live_seconds_by(proc: &Path, uid: u32, clock_ns: impl Fn(i32) -> Option<u64>) -> f64 {
    processes::of_user(proc, uid)
        .iter()
        .map(|p| match clock_ns(p.pid) {
            Some(ns) => ns as f64 / 1e9,
            None => ticks_seconds(proc, p.pid),
        })
        .sum()
}

/// The CPU-time clock of process `pid` (every thread it has had, exited ones included), in
/// nanoseconds; `None` when it cannot be read (the process is gone, or the kernel refuses).
/// nix: rustix names no CPU-time clock of another process.
pub fn process_clock_ns(pid: i32) -> Option<u64> {
    let clock = nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(pid)).ok()?;
    let now = clock.now().ok()?;
    let secs = u64::try_from(now.tv_sec()).ok()?;
    let nanos = u64::try_from(now.tv_nsec()).ok()?;
    Some(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// One process's utime + stime in seconds (0 once it is gone).
fn ticks_seconds(proc: &Path, pid: i32) -> f64 {
    Process::new_with_root(proc.join(pid.to_string()))
        .and_then(|p| p.stat())
        .map(|stat| own_ticks(&stat) as f64 / procfs::ticks_per_second().max(1) as f64)
        .unwrap_or(0.0)
}

/// The CPU an interaction cost: after minus before, never negative.
pub fn delta(before: f64, after: f64) -> f64 {
    (after - before).max(0.0)
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, Command, Stdio};

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
        let tps = procfs::ticks_per_second();
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
        // No CPU-time clocks: the ticks count.
        assert_eq!(live_seconds_by(dir.path(), 2001, |_| None), 5.0);
        // A process whose clock reads counts its nanoseconds instead (pid 10: 1.75 s; pid 13
        // keeps its 2 s of ticks); the zombie and the other user's process count nothing.
        let clock = |pid| (pid == 10).then_some(1_750_000_000);
        assert!((live_seconds_by(dir.path(), 2001, clock) - 3.75).abs() < 1e-9);
        assert_eq!(delta(2.0, 1.5), 0.0);
        assert!((delta(1.0, 1.25) - 0.25).abs() < 1e-12);
    }

    /// Kills and reaps the child however the test ends.
    struct Reaped(Child);

    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Nanoseconds on CPU of the threads `pid` has now.
    fn live_threads_ns(pid: i32) -> u64 {
        let tasks = Process::new(pid).unwrap().tasks().unwrap();
        tasks.flatten().filter_map(|t| t.schedstat().ok()).map(|s| s.sum_exec_runtime).sum()
    }

    #[test]
    fn the_process_clock_keeps_the_time_of_threads_that_exited() {
        // On a line of input, a thread burns 100 ms of CPU and exits; the main thread waits.
        let script = "import sys, threading, time\n\
                      def burn():\n    end = time.thread_time() + 0.1\n    while time.thread_time() < end:\n        pass\n\
                      print('ready', flush=True)\nsys.stdin.readline()\n\
                      worker = threading.Thread(target=burn)\nworker.start()\nworker.join()\n\
                      print('done', flush=True)\nsys.stdin.readline()\n";
        let child = Command::new("python3")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("this test needs python3");
        let mut child = Reaped(child);
        let pid = child.0.id() as i32;
        let mut stdin = child.0.stdin.take().unwrap();
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        let (before, threads_before) = (process_clock_ns(pid).unwrap(), live_threads_ns(pid));
        writeln!(stdin, "go").unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "done\n");
        // Python's join returns once the thread's work is done; the kernel thread ends just after.
        let tasks = || Process::new(pid).unwrap().tasks().unwrap().count();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while tasks() > 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(tasks(), 1, "the worker thread has exited");
        let (after, threads_after) = (process_clock_ns(pid).unwrap(), live_threads_ns(pid));
        let burned = (after - before) as f64 / 1e9;
        assert!((0.095..2.0).contains(&burned), "the process clock gained {burned} s");
        // The threads still alive do not have it: the worker took its time with it.
        let live = threads_after.saturating_sub(threads_before) as f64 / 1e9;
        assert!(live < 0.05, "the live threads gained {live} s");
        // Through the listing of a user's processes too (this process is among them).
        assert!(live_seconds(Path::new("/proc"), rustix::process::getuid().as_raw()) >= after as f64 / 1e9);
        drop(stdin);
        assert!(child.0.wait().unwrap().success());
    }
}
