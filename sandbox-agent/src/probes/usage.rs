//! What a timed step's process tree cost besides wall time: user + system CPU seconds, the
//! largest peak resident set, page faults and context switches ([`Usage`]), sent as the step
//! metric's companions (`cold.cpu`, `install.maxrss`, … see `sandbench_proto::metric::Facet`).
//!
//! Two sources. A command the agent waits for itself is reaped with wait4(2) ([`wait`]): its
//! rusage covers the child and every descendant that was waited for (what `time` and hyperfine
//! report), to the microsecond. A program still running at the timing point (a terminal start
//! timed to its first echo) is read from `/proc` ([`live`]): the user's live processes, their
//! own time and their waited-for children's, in clock ticks; a step's figure is then after minus
//! before ([`Usage::since`]). Processes that left the tree unwaited (double-forked, reaped by the
//! agent) are not counted by either.
//!
//! wait4 is the one raw libc call here (neither rustix nor nix has wait4 with its rusage);
//! [`wait`] is its safe wrapper.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use procfs::process::Process;
use sandbench_proto::metric::{Facet, MetricKey};

use super::processes;

/// A process tree's cost. Counts are f64 so that a repeated step's mean stays exact.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub user_s: f64,
    pub system_s: f64,
    /// The largest peak resident set of one process, bytes.
    pub maxrss_bytes: f64,
    pub minflt: f64,
    pub majflt: f64,
    pub vcsw: f64,
    pub ivcsw: f64,
}

impl Usage {
    /// User + system CPU seconds.
    pub fn cpu_s(&self) -> f64 {
        self.user_s + self.system_s
    }

    /// From a wait4 rusage (`ru_maxrss` is in KiB on Linux).
    fn from_rusage(ru: &libc::rusage) -> Usage {
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Usage {
            user_s: seconds(ru.ru_utime),
            system_s: seconds(ru.ru_stime),
            maxrss_bytes: ru.ru_maxrss.max(0) as f64 * 1024.0,
            minflt: ru.ru_minflt.max(0) as f64,
            majflt: ru.ru_majflt.max(0) as f64,
            vcsw: ru.ru_nvcsw.max(0) as f64,
            ivcsw: ru.ru_nivcsw.max(0) as f64,
        }
    }

    /// Adds another run of a repeated step: times and counts add, the peak is the larger one.
    pub fn add(&mut self, other: &Usage) {
        self.user_s += other.user_s;
        self.system_s += other.system_s;
        self.maxrss_bytes = self.maxrss_bytes.max(other.maxrss_bytes);
        self.minflt += other.minflt;
        self.majflt += other.majflt;
        self.vcsw += other.vcsw;
        self.ivcsw += other.ivcsw;
    }

    /// The mean of `runs` runs whose sum this is (the peak stays the peak).
    pub fn mean_of(&self, runs: u32) -> Usage {
        let n = f64::from(runs.max(1));
        Usage {
            user_s: self.user_s / n,
            system_s: self.system_s / n,
            maxrss_bytes: self.maxrss_bytes,
            minflt: self.minflt / n,
            majflt: self.majflt / n,
            vcsw: self.vcsw / n,
            ivcsw: self.ivcsw / n,
        }
    }

    /// What the live tree used since `before` (each figure never negative: a process that exited
    /// meanwhile takes its counts with it); the peak is the one seen now.
    pub fn since(&self, before: &Usage) -> Usage {
        let d = |after: f64, before: f64| (after - before).max(0.0);
        Usage {
            user_s: d(self.user_s, before.user_s),
            system_s: d(self.system_s, before.system_s),
            maxrss_bytes: self.maxrss_bytes,
            minflt: d(self.minflt, before.minflt),
            majflt: d(self.majflt, before.majflt),
            vcsw: d(self.vcsw, before.vcsw),
            ivcsw: d(self.ivcsw, before.ivcsw),
        }
    }

    /// The companions of metric `key`: (metric, value, unit), in `Facet::COMPANIONS` order.
    pub fn companions(&self, key: &str) -> Vec<(String, f64, &'static str)> {
        let values = [self.cpu_s(), self.maxrss_bytes, self.minflt, self.majflt, self.vcsw, self.ivcsw];
        let companion = |facet: Facet| MetricKey::new(key, facet).to_string();
        Facet::COMPANIONS
            .into_iter()
            .zip(values)
            .map(|(f, v)| (companion(f), v, f.unit().unwrap_or_default()))
            .collect()
    }
}

/// Waits for the child `pid` with wait4(2), retrying on EINTR: its exit status and the rusage
/// of it and its waited-for descendants.
pub fn wait(pid: u32) -> io::Result<(ExitStatus, Usage)> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain integers and timevals, for which all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both pointers are to live, writable locals of the types wait4 expects, for
        // the duration of the call; the pid is the caller's own child.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if reaped == pid {
            return Ok((ExitStatus::from_raw(status), Usage::from_rusage(&ru)));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// The cost so far of the live processes of `uid`, read from `proc` (normally `/proc`): their
/// CPU time and faults with their waited-for children's, context switches of all their threads,
/// and the largest peak RSS (VmHWM) among them. Processes that vanish while read are skipped.
pub fn live(proc: &Path, uid: u32) -> Usage {
    let tps = procfs::ticks_per_second().max(1) as f64;
    let mut usage = Usage::default();
    for p in processes::of_user(proc, uid) {
        let Ok(process) = Process::new_with_root(proc.join(p.pid.to_string())) else { continue };
        let Ok(stat) = process.stat() else { continue };
        usage.user_s += (stat.utime + stat.cutime.max(0) as u64) as f64 / tps;
        usage.system_s += (stat.stime + stat.cstime.max(0) as u64) as f64 / tps;
        usage.minflt += (stat.minflt + stat.cminflt) as f64;
        usage.majflt += (stat.majflt + stat.cmajflt) as f64;
        if let Ok(status) = process.status() {
            usage.maxrss_bytes = usage.maxrss_bytes.max(status.vmhwm.unwrap_or(0) as f64 * 1024.0);
        }
        // Context switches are counted per thread.
        let tasks = process.tasks().map(|t| t.flatten().filter_map(|t| t.status().ok()).collect::<Vec<_>>());
        for status in tasks.unwrap_or_default() {
            usage.vcsw += status.voluntary_ctxt_switches.unwrap_or(0) as f64;
            usage.ivcsw += status.nonvoluntary_ctxt_switches.unwrap_or(0) as f64;
        }
    }
    usage
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::probes::processes::tests::status_text;

    fn spawn(script: &str) -> u32 {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script).process_group(0);
        crate::reaper::spawn_owned(&mut cmd).unwrap().id()
    }

    #[test]
    fn a_grandchild_burning_cpu_is_counted() {
        // sh → sh → a busy loop of about 0.3 s of CPU (a count, not a wall-clock deadline: on a
        // loaded machine a deadline's loop gets what the scheduler leaves it), waited for at each
        // level. 500,000 rounds: dash does 150,000 in 0.10 s on a fast core, too near the bound.
        let pid = spawn("sh -c 'i=0; while [ $i -lt 500000 ]; do i=$((i+1)); done'; true");
        let (status, usage) = wait(pid).unwrap();
        crate::reaper::disown(pid);
        assert!(status.success());
        assert!(usage.cpu_s() > 0.1 && usage.cpu_s() < 5.0, "{usage:?}");
        assert!(usage.maxrss_bytes > 100_000.0 && usage.minflt > 0.0, "{usage:?}");
        assert!(usage.vcsw + usage.ivcsw > 0.0, "{usage:?}");
    }

    #[test]
    fn a_sleeping_child_uses_almost_no_cpu() {
        let started = Instant::now();
        let pid = spawn("sleep 0.4");
        let (status, usage) = wait(pid).unwrap();
        crate::reaper::disown(pid);
        assert!(status.success() && started.elapsed() >= Duration::from_millis(400));
        assert!(usage.cpu_s() < 0.05, "{usage:?}");
        let (status, _) = wait(spawn("exit 3")).unwrap();
        assert_eq!(status.code(), Some(3));
    }

    #[test]
    fn waiting_for_no_child_is_an_error() {
        assert!(wait(u32::MAX).is_err());
        assert!(wait(1).is_err(), "pid 1 is not a child of the tests");
    }

    #[test]
    fn repeated_runs_add_and_average_and_the_live_tree_subtracts() {
        let run =
            Usage { user_s: 0.2, system_s: 0.1, maxrss_bytes: 10.0, minflt: 100.0, majflt: 2.0, vcsw: 5.0, ivcsw: 1.0 };
        let mut sum = Usage::default();
        sum.add(&run);
        sum.add(&Usage { maxrss_bytes: 30.0, ..run });
        let mean = sum.mean_of(2);
        assert!((mean.cpu_s() - 0.3).abs() < 1e-12 && mean.maxrss_bytes == 30.0 && mean.minflt == 100.0);
        let since = run.since(&Usage { user_s: 0.5, minflt: 40.0, ..Usage::default() });
        assert_eq!((since.user_s, since.minflt, since.maxrss_bytes), (0.0, 60.0, 10.0));
        let keys: Vec<String> = run.companions("cold").into_iter().map(|c| format!("{}:{}", c.0, c.2)).collect();
        assert_eq!(
            keys,
            ["cold.cpu:s", "cold.maxrss:bytes", "cold.minflt:", "cold.majflt:", "cold.vcsw:", "cold.ivcsw:"]
        );
    }

    #[test]
    fn reads_a_users_live_tree_from_proc() {
        let dir = tempfile::tempdir().unwrap();
        let tps = procfs::ticks_per_second() as u64;
        for (pid, uid, utime, cutime) in [(60, 2001, 2 * tps, tps), (61, 2001, tps, 0), (62, 0, 50 * tps, 0)] {
            let p = dir.path().join(pid.to_string());
            std::fs::create_dir_all(p.join("task").join(pid.to_string())).unwrap();
            let status = status_text(pid, "w", "S (sleeping)", uid, Some(100 * u64::from(pid as u32 - 59)));
            std::fs::write(p.join("status"), &status).unwrap();
            std::fs::write(p.join("task").join(pid.to_string()).join("status"), &status).unwrap();
            // minflt=7 cminflt=1 majflt=2 cmajflt=0
            std::fs::write(
                p.join("stat"),
                format!(
                    "{pid} (w) S 1 {pid} {pid} 0 -1 0 7 1 2 0 {utime} {tps} {cutime} 0 20 0 1 0 5 1 1 1 1 1 1 1 1 0 0 0 0 0 0 0"
                ),
            )
            .unwrap();
        }
        let usage = live(dir.path(), 2001);
        assert_eq!((usage.user_s, usage.system_s), (4.0, 2.0));
        assert_eq!((usage.minflt, usage.majflt), (16.0, 4.0));
        // status_text's threads: 3 voluntary, 1 involuntary switch each; VmHWM 100 and 200 KiB.
        assert_eq!((usage.vcsw, usage.ivcsw, usage.maxrss_bytes), (6.0, 2.0, 200.0 * 1024.0));
        assert_eq!(live(&dir.path().join("none"), 2001), Usage::default());
    }
}
