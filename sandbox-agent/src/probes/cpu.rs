//! CPU time of a user's live process tree, as the reference harness counts it for interactions:
//! utime + stime of every live process (not the children they waited for), so the delta over an
//! interaction is the sum after minus the sum before, clamped at zero because a process that
//! exited meanwhile takes its time with it.

use std::path::Path;

use super::processes;

/// utime + stime (clock ticks) of `/proc/PID/stat`, fields 14 and 15.
pub fn parse_own_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command, field 3 of the file (state) is the first: utime is 14, stime 15.
    (11..13).map(|i| fields.get(i)?.parse::<u64>().ok()).sum()
}

/// CPU seconds the live processes of `uid` have used, read from `proc` (normally `/proc`).
pub fn live_seconds(proc: &Path, uid: u32) -> f64 {
    // SAFETY: sysconf with a valid name.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks: u64 = processes::of_user(proc, uid)
        .iter()
        .filter_map(|p| std::fs::read_to_string(proc.join(p.pid.to_string()).join("stat")).ok())
        .filter_map(|stat| parse_own_ticks(&stat))
        .sum();
    ticks as f64 / ticks_per_second
}

/// The CPU an interaction cost: after minus before, never negative.
pub fn delta(before: f64, after: f64) -> f64 {
    (after - before).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_user_and_system_time_but_not_waited_children() {
        // pid (comm with ) spaces) state ppid … utime=7 stime=3 cutime=100 cstime=50
        let stat = "42 (node ) x) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 100 50 20 0 1 0 5 0 0";
        assert_eq!(parse_own_ticks(stat), Some(10));
        assert_eq!(parse_own_ticks("garbage"), None);
    }

    #[test]
    fn sums_live_processes_of_the_user_only() {
        let dir = tempfile::tempdir().unwrap();
        for (pid, uid, state, utime) in
            [(10, 2001, 'S', 30), (11, 2001, 'Z', 500), (12, 0, 'S', 700), (13, 2001, 'R', 20)]
        {
            let p = dir.path().join(pid.to_string());
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("status"), format!("Name:\tp\nState:\t{state}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"))
                .unwrap();
            std::fs::write(p.join("stat"), format!("{pid} (p) {state} 1 1 1 0 -1 0 0 0 0 0 {utime} 0 9 9 20 0 1 0 5"))
                .unwrap();
        }
        // SAFETY: sysconf with a valid name.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        assert!((live_seconds(dir.path(), 2001) - 50.0 / hz).abs() < 1e-9);
        assert_eq!(delta(2.0, 1.5), 0.0);
        assert!((delta(1.0, 1.25) - 0.25).abs() < 1e-12);
    }
}
