//! The processes of a user: listing them from `/proc`, and process hygiene between trials —
//! every process of the benchmark user gets SIGTERM, then SIGKILL; survivors fail the trial.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;

/// A live (not zombie) process and the fields of `/proc/PID/status` the probes use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    pub pid: i32,
    pub name: String,
    pub real_uid: u32,
    pub state: char,
    pub rss_bytes: u64,
}

/// Parses `/proc/PID/status`.
pub fn parse_status(pid: i32, text: &str) -> Option<ProcStatus> {
    let mut name = None;
    let mut uid = None;
    let mut state = None;
    let mut rss_kib = 0;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match key {
            "Name" => name = Some(value.to_string()),
            "Uid" => uid = value.split_whitespace().next().and_then(|v| v.parse().ok()),
            "State" => state = value.chars().next(),
            "VmRSS" => rss_kib = value.trim_end_matches("kB").trim().parse().unwrap_or(0),
            _ => {}
        }
    }
    Some(ProcStatus { pid, name: name?, real_uid: uid?, state: state?, rss_bytes: rss_kib * 1024 })
}

/// Live processes whose real uid is `uid`, read from `proc` (normally `/proc`). Processes that
/// vanish while being read are skipped.
pub fn of_user(proc: &Path, uid: u32) -> Vec<ProcStatus> {
    let Ok(entries) = std::fs::read_dir(proc) else { return Vec::new() };
    let mut found: Vec<ProcStatus> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let text = std::fs::read_to_string(proc.join(pid.to_string()).join("status")).ok()?;
            parse_status(pid, &text)
        })
        .filter(|p| p.real_uid == uid && p.state != 'Z')
        .collect();
    found.sort_by_key(|p| p.pid);
    found
}

/// CPU time (clock ticks) a process and its waited-for children used: utime + stime + cutime +
/// cstime of `/proc/PID/stat`.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3 of the file, utime 14 … cstime 17.
    (11..15).map(|i| fields.get(i)?.parse::<u64>().ok()).sum()
}

/// CPU seconds used so far by the live processes of `uid` (and the children they waited for).
pub fn cpu_seconds(proc: &Path, uid: u32) -> f64 {
    // SAFETY: sysconf with a valid name.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks: u64 = of_user(proc, uid)
        .iter()
        .filter_map(|p| std::fs::read_to_string(proc.join(p.pid.to_string()).join("stat")).ok())
        .filter_map(|stat| parse_cpu_ticks(&stat))
        .sum();
    ticks as f64 / ticks_per_second
}

/// Where processes are listed and signalled: `/proc` and kill(2), or a fake in unit tests.
pub trait ProcessTable {
    fn of_user(&self, uid: u32) -> Vec<ProcStatus>;
    fn signal(&self, pid: i32, signal: i32);
}

/// The real process table.
pub struct Proc;

impl ProcessTable for Proc {
    fn of_user(&self, uid: u32) -> Vec<ProcStatus> {
        of_user(Path::new("/proc"), uid)
    }

    fn signal(&self, pid: i32, signal: i32) {
        // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
        unsafe {
            libc::kill(pid, signal);
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
    for (signal, wait) in [(libc::SIGTERM, term_wait), (libc::SIGKILL, kill_wait)] {
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
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tnode\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t42\nPid:\t42\nPPid:\t1\n\
        Uid:\t2001\t2001\t2001\t2001\nGid:\t2001\t2001\t2001\t2001\nVmPeak:\t  100 kB\nVmRSS:\t   51200 kB\n";

    #[test]
    fn parses_proc_status() {
        let p = parse_status(42, STATUS).unwrap();
        assert_eq!(p, ProcStatus { pid: 42, name: "node".into(), real_uid: 2001, state: 'S', rss_bytes: 51200 * 1024 });
        // A kernel thread has no VmRSS line.
        let k = parse_status(2, "Name:\tkthreadd\nState:\tS (sleeping)\nUid:\t0\t0\t0\t0\n").unwrap();
        assert_eq!(k.rss_bytes, 0);
        assert_eq!(parse_status(1, "garbage"), None);
    }

    #[test]
    fn lists_a_users_live_processes_from_a_proc_tree() {
        let dir = tempfile::tempdir().unwrap();
        let write = |pid: &str, text: &str| {
            std::fs::create_dir_all(dir.path().join(pid)).unwrap();
            std::fs::write(dir.path().join(pid).join("status"), text).unwrap();
        };
        write("42", STATUS);
        write("43", &STATUS.replace("State:\tS (sleeping)", "State:\tZ (zombie)"));
        write("44", &STATUS.replace("Uid:\t2001", "Uid:\t0"));
        write("self", STATUS);
        std::fs::create_dir_all(dir.path().join("45")).unwrap(); // vanished mid-read
        let found = of_user(dir.path(), 2001);
        assert_eq!(found.iter().map(|p| p.pid).collect::<Vec<_>>(), [42]);
    }

    #[test]
    fn reads_cpu_ticks_from_stat() {
        let stat = "42 (my (odd) name) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 7 3 20 0 1 0 12345";
        assert_eq!(parse_cpu_ticks(stat), Some(250 + 50 + 7 + 3));
        assert_eq!(parse_cpu_ticks("1 (x) S 1"), None);
    }

    #[test]
    fn refuses_to_stop_root() {
        assert!(stop_user_processes("root", 0).is_err());
    }

    /// Processes that obey some signals and not others.
    struct Fake {
        alive: std::sync::Mutex<Vec<(i32, &'static str, Option<i32>)>>,
        sent: std::sync::Mutex<Vec<(i32, i32)>>,
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

        fn signal(&self, pid: i32, signal: i32) {
            self.sent.lock().unwrap().push((pid, signal));
            // A process dies of the signal it obeys; None obeys nothing (it survives).
            self.alive.lock().unwrap().retain(|(p, _, dies_of)| {
                !(*p == pid
                    && (*dies_of == Some(signal) || (*dies_of == Some(libc::SIGTERM) && signal == libc::SIGKILL)))
            });
        }
    }

    #[test]
    fn escalates_from_term_to_kill_and_names_survivors() {
        let fake = Fake {
            alive: vec![(10, "polite", Some(libc::SIGTERM)), (11, "stubborn", Some(libc::SIGKILL))].into(),
            sent: Vec::new().into(),
        };
        stop_in(&fake, "benchmark1", 2001, Duration::from_millis(60), Duration::from_millis(60)).unwrap();
        let sent = fake.sent.lock().unwrap().clone();
        assert!(
            sent.contains(&(10, libc::SIGTERM))
                && sent.contains(&(11, libc::SIGTERM))
                && sent.contains(&(11, libc::SIGKILL))
        );
        assert!(!sent.contains(&(10, libc::SIGKILL)), "the polite one was gone before KILL");

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

        fn signal(&self, _pid: i32, _signal: i32) {}
    }

    #[test]
    fn a_moment_with_no_process_is_not_a_stopped_user() {
        let table = Respawner { reads: 0.into() };
        let err =
            stop_in(&table, "benchmark1", 2001, Duration::from_millis(100), Duration::from_millis(100)).unwrap_err();
        assert!(err.to_string().starts_with("Processes remain for benchmark1: "), "{err}");
    }
}
