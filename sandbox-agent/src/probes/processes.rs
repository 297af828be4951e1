//! The processes of a user: listing them from `/proc`, and process hygiene between trials —
//! every process of the benchmark user gets SIGTERM, then SIGKILL; survivors fail the trial.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use procfs::FromRead;
use procfs::process::{Process, Stat, Status, all_processes_with_root};
use rustix::process::{Pid, Signal, kill_process, kill_process_group};

/// A live (not zombie) process and the fields of `/proc/PID/status` the probes use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    pub pid: i32,
    pub name: String,
    pub real_uid: u32,
    pub state: char,
    pub rss_bytes: u64,
}

impl From<Status> for ProcStatus {
    fn from(status: Status) -> ProcStatus {
        ProcStatus {
            pid: status.pid,
            real_uid: status.ruid,
            // "S (sleeping)": the letter is the state.
            state: status.state.chars().next().unwrap_or('?'),
            // VmRSS is in KiB; a kernel thread has none.
            rss_bytes: status.vmrss.unwrap_or(0) * 1024,
            name: status.name,
        }
    }
}

/// Parses the text of a `/proc/PID/status` file.
pub fn parse_status(text: &str) -> Option<ProcStatus> {
    Status::from_read(text.as_bytes()).ok().map(ProcStatus::from)
}

/// Live processes whose real uid is `uid`, read from `proc` (normally `/proc`). Processes that
/// vanish while being read are skipped.
pub fn of_user(proc: &Path, uid: u32) -> Vec<ProcStatus> {
    let Ok(all) = all_processes_with_root(proc) else { return Vec::new() };
    let mut found: Vec<ProcStatus> = all
        .flatten()
        .filter_map(|p| p.status().ok())
        .map(ProcStatus::from)
        .filter(|p| p.real_uid == uid && p.state != 'Z')
        .collect();
    found.sort_by_key(|p| p.pid);
    found
}

/// CPU time (clock ticks) a process and its waited-for children used: utime + stime + cutime +
/// cstime of `/proc/PID/stat`.
pub fn cpu_ticks(stat: &Stat) -> u64 {
    stat.utime + stat.stime + stat.cutime.max(0) as u64 + stat.cstime.max(0) as u64
}

/// Parses the text of a `/proc/PID/stat` file.
pub fn parse_stat(text: &str) -> Option<Stat> {
    Stat::from_read(text.as_bytes()).ok()
}

/// CPU seconds used so far by the live processes of `uid` (and the children they waited for).
pub fn cpu_seconds(proc: &Path, uid: u32) -> f64 {
    let ticks: u64 = of_user(proc, uid)
        .iter()
        .filter_map(|p| Process::new_with_root(proc.join(p.pid.to_string())).and_then(|p| p.stat()).ok())
        .map(|stat| cpu_ticks(&stat))
        .sum();
    ticks as f64 / procfs::ticks_per_second().max(1) as f64
}

/// Sends SIGKILL to the process group `pgid` (a child started as the leader of its own group);
/// a group already gone is no error.
pub fn kill_group(pgid: u32) {
    signal_group(pgid, Signal::KILL);
}

/// Sends `signal` to the process group `pgid`; a group that is gone is no error.
pub fn signal_group(pgid: u32, signal: Signal) {
    if let Some(pgid) = i32::try_from(pgid).ok().filter(|p| *p > 0).and_then(Pid::from_raw) {
        let _ = kill_process_group(pgid, signal);
    }
}

/// Sends `signal` to one process; one that is gone is no error.
pub fn signal_process(pid: i32, signal: Signal) {
    Proc.signal(pid, signal);
}

/// Where processes are listed and signalled: `/proc` and kill(2), or a fake in unit tests.
pub trait ProcessTable {
    fn of_user(&self, uid: u32) -> Vec<ProcStatus>;
    fn signal(&self, pid: i32, signal: Signal);
}

/// The real process table.
pub struct Proc;

impl ProcessTable for Proc {
    fn of_user(&self, uid: u32) -> Vec<ProcStatus> {
        of_user(Path::new("/proc"), uid)
    }

    fn signal(&self, pid: i32, signal: Signal) {
        if let Some(pid) = (pid > 0).then(|| Pid::from_raw(pid)).flatten() {
            let _ = kill_process(pid, signal);
        }
    }
}

/// Stops every process of `uid`: SIGTERM and up to 3 s, then SIGKILL and up to 2 s (polling every
/// 50 ms, as the reference does). Fails naming the survivors.
pub fn stop_user_processes(user: &str, uid: u32) -> anyhow::Result<()> {
    stop_in(&Proc, user, uid, Duration::from_secs(3), Duration::from_secs(2))
}

/// How long a user's process table must stay empty before the user counts as stopped.
const QUIET: Duration = Duration::from_millis(150);
/// How often the table is read meanwhile.
const POLL: Duration = Duration::from_millis(5);

/// The user's processes, or none once the table stayed empty for QUIET. One empty listing is
/// not enough: a process that root is starting as the user (fork, then setuid) is invisible under
/// the user's uid for a moment, so a service that respawns the user's processes can show an empty
/// table between its kills.
fn settled(table: &dyn ProcessTable, uid: u32) -> Vec<ProcStatus> {
    let since = Instant::now();
    loop {
        let left = table.of_user(uid);
        if !left.is_empty() || since.elapsed() >= QUIET {
            return left;
        }
        std::thread::sleep(POLL);
    }
}

pub fn stop_in(
    table: &dyn ProcessTable,
    user: &str,
    uid: u32,
    term_wait: Duration,
    kill_wait: Duration,
) -> anyhow::Result<()> {
    if uid == 0 {
        bail!("refusing to stop the processes of root");
    }
    for (signal, wait) in [(Signal::TERM, term_wait), (Signal::KILL, kill_wait)] {
        let deadline = Instant::now() + wait;
        loop {
            let left = settled(table, uid);
            if left.is_empty() {
                return Ok(());
            }
            for p in &left {
                table.signal(p.pid, signal);
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let left = settled(table, uid);
    if left.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = left.iter().map(|p| format!("{} ({})", p.pid, p.name)).collect();
    bail!("Processes remain for {user}: {}", names.join(", "))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A real `/proc/PID/status` (Linux 6.x), for a process of uid 2001.
    pub(crate) fn status_text(pid: i32, name: &str, state: &str, uid: u32, rss_kib: Option<u64>) -> String {
        let rss = rss_kib.map(|k| format!("VmHWM:\t{k} kB\nVmRSS:\t{k} kB\n")).unwrap_or_default();
        format!(
            "Name:\t{name}\nUmask:\t0022\nState:\t{state}\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t1\n\
             TracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nFDSize:\t64\n\
             Groups:\t \nNStgid:\t{pid}\nNSpid:\t{pid}\nNSpgid:\t{pid}\nNSsid:\t{pid}\nKthread:\t0\n\
             VmPeak:\t  100 kB\nVmSize:\t  100 kB\n{rss}Threads:\t1\nSigQ:\t0/96365\n\
             SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n\
             SigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\nCapInh:\t0000000000000000\n\
             CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\n\
             CapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t0\nCpus_allowed_list:\t0-1\n\
             voluntary_ctxt_switches:\t3\nnonvoluntary_ctxt_switches:\t1\n"
        )
    }

    #[test]
    fn parses_proc_status() {
        let p = parse_status(&status_text(42, "node", "S (sleeping)", 2001, Some(51200))).unwrap();
        assert_eq!(p, ProcStatus { pid: 42, name: "node".into(), real_uid: 2001, state: 'S', rss_bytes: 51200 * 1024 });
        // A kernel thread has no VmRSS line.
        let k = parse_status(&status_text(2, "kthreadd", "S (sleeping)", 0, None)).unwrap();
        assert_eq!((k.name.as_str(), k.real_uid, k.rss_bytes), ("kthreadd", 0, 0));
        assert_eq!(parse_status("garbage"), None);
        assert_eq!(parse_status("Name:\tx\nState:\tS\n"), None, "a truncated file is not a process");
    }

    #[test]
    fn lists_a_users_live_processes_from_a_proc_tree() {
        let dir = tempfile::tempdir().unwrap();
        let write = |pid: &str, text: &str| {
            std::fs::create_dir_all(dir.path().join(pid)).unwrap();
            std::fs::write(dir.path().join(pid).join("status"), text).unwrap();
        };
        write("42", &status_text(42, "node", "S (sleeping)", 2001, Some(10)));
        write("43", &status_text(43, "node", "Z (zombie)", 2001, None));
        write("44", &status_text(44, "node", "S (sleeping)", 0, Some(10)));
        write("self", &status_text(42, "node", "S (sleeping)", 2001, Some(10)));
        std::fs::create_dir_all(dir.path().join("45")).unwrap(); // vanished mid-read
        let found = of_user(dir.path(), 2001);
        assert_eq!(found.iter().map(|p| p.pid).collect::<Vec<_>>(), [42]);
    }

    #[test]
    fn reads_cpu_ticks_from_stat() {
        // A command name with spaces and parentheses, as a hostile program may choose.
        let stat = "42 (my (odd) name) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 7 3 20 0 1 0 12345 3133440 359 \
            18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 1 1 1 1 1 1 1 0";
        assert_eq!(parse_stat(stat).map(|s| cpu_ticks(&s)), Some(250 + 50 + 7 + 3));
        assert!(parse_stat("1 (x) S 1").is_none());
    }

    #[test]
    fn counts_the_cpu_of_a_users_processes_in_a_proc_tree() {
        let dir = tempfile::tempdir().unwrap();
        let tps = procfs::ticks_per_second() as f64;
        for (pid, uid, utime) in [(50, 2001, 2 * tps as u64), (51, 2001, tps as u64), (52, 0, 99 * tps as u64)] {
            let p = dir.path().join(pid.to_string());
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("status"), status_text(pid, "w", "R (running)", uid, Some(1))).unwrap();
            std::fs::write(
                p.join("stat"),
                format!(
                    "{pid} (w) R 1 {pid} {pid} 0 -1 0 0 0 0 0 {utime} 0 0 0 20 0 1 0 1 1 1 1 1 1 1 1 1 0 0 0 0 0 0 0"
                ),
            )
            .unwrap();
        }
        assert_eq!(cpu_seconds(dir.path(), 2001), 3.0);
    }

    #[test]
    fn refuses_to_stop_root() {
        assert!(stop_user_processes("root", 0).is_err());
    }

    /// Processes that obey some signals and not others.
    struct Fake {
        alive: std::sync::Mutex<Vec<(i32, &'static str, Option<Signal>)>>,
        sent: std::sync::Mutex<Vec<(i32, Signal)>>,
    }

    impl ProcessTable for Fake {
        fn of_user(&self, _uid: u32) -> Vec<ProcStatus> {
            let alive = self.alive.lock().unwrap();
            alive
                .iter()
                .map(|(pid, name, _)| ProcStatus {
                    pid: *pid,
                    name: name.to_string(),
                    real_uid: 2001,
                    state: 'S',
                    rss_bytes: 0,
                })
                .collect()
        }

        fn signal(&self, pid: i32, signal: Signal) {
            self.sent.lock().unwrap().push((pid, signal));
            // A process dies of the signal it obeys; None obeys nothing (it survives).
            self.alive.lock().unwrap().retain(|(p, _, dies_of)| {
                !(*p == pid && (*dies_of == Some(signal) || (*dies_of == Some(Signal::TERM) && signal == Signal::KILL)))
            });
        }
    }

    #[test]
    fn escalates_from_term_to_kill_and_names_survivors() {
        let fake = Fake {
            alive: vec![(10, "polite", Some(Signal::TERM)), (11, "stubborn", Some(Signal::KILL))].into(),
            sent: Vec::new().into(),
        };
        stop_in(&fake, "benchmark1", 2001, Duration::from_millis(60), Duration::from_millis(60)).unwrap();
        let sent = fake.sent.lock().unwrap().clone();
        assert!(
            sent.contains(&(10, Signal::TERM))
                && sent.contains(&(11, Signal::TERM))
                && sent.contains(&(11, Signal::KILL))
        );
        assert!(!sent.contains(&(10, Signal::KILL)), "the polite one was gone before KILL");

        let fake = Fake { alive: vec![(12, "unkillable", None)].into(), sent: Vec::new().into() };
        let err = stop_in(&fake, "benchmark1", 2001, Duration::from_millis(10), Duration::from_millis(10)).unwrap_err();
        assert_eq!(err.to_string(), "Processes remain for benchmark1: 12 (unkillable)");
    }

    /// A service that restarts the user's process after each kill, with a moment in between
    /// when the table is empty (the new process is still root, before its setuid).
    struct Respawner {
        reads: std::sync::atomic::AtomicUsize,
    }

    impl ProcessTable for Respawner {
        fn of_user(&self, _uid: u32) -> Vec<ProcStatus> {
            let n = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n % 3 == 1 {
                return Vec::new();
            }
            vec![ProcStatus { pid: 100 + n as i32, name: "sleep".into(), real_uid: 2001, state: 'S', rss_bytes: 0 }]
        }

        fn signal(&self, _pid: i32, _signal: Signal) {}
    }

    #[test]
    fn a_moment_with_no_process_is_not_a_stopped_user() {
        let table = Respawner { reads: 0.into() };
        let err =
            stop_in(&table, "benchmark1", 2001, Duration::from_millis(100), Duration::from_millis(100)).unwrap_err();
        assert!(err.to_string().starts_with("Processes remain for benchmark1: "), "{err}");
    }
}
