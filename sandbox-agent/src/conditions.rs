//! Reads the conditions of a timed trial inside the sandbox (`sandbench_proto::conditions`):
//! CPU steal from `/proc/stat` and the load averages from `/proc/loadavg` (both parsed by
//! `procfs`), and the sandbox cgroup's
//! throttling counters from `cpu.stat` — cgroup v2 at `/sys/fs/cgroup/cpu.stat`, else v1's cpu
//! controller (`/sys/fs/cgroup/cpu/cpu.stat` or `cpu,cpuacct/cpu.stat`, whose `throttled_time`
//! is in nanoseconds). Everything is read under a root folder so tests can use fixture files; a
//! file that is missing or unreadable leaves its figures out.

use std::path::Path;

use procfs::{CpuTime, FromRead, FromReadSI, KernelStats, LoadAverage};
use sandbench_proto::conditions::Reading;

/// The cgroup `cpu.stat` files tried, in order: v2, then v1.
const CPU_STAT: [(&str, Version); 3] = [
    ("sys/fs/cgroup/cpu.stat", Version::V2),
    ("sys/fs/cgroup/cpu/cpu.stat", Version::V1),
    ("sys/fs/cgroup/cpu,cpuacct/cpu.stat", Version::V1),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// One reading of everything, under `root` (normally `/`).
pub fn read(root: &Path) -> Reading {
    let mut reading = Reading::default();
    if let Ok(stat) = KernelStats::from_file(root.join("proc/stat"), procfs::current_system_info())
        && let Some((steal, total)) = steal_and_total(&stat.total)
    {
        (reading.steal_ticks, reading.total_ticks) = (Some(steal), Some(total));
    }
    reading.load = LoadAverage::from_file(root.join("proc/loadavg")).ok().and_then(|load| load_averages(&load));
    for (path, version) in CPU_STAT {
        let Ok(text) = std::fs::read_to_string(root.join(path)) else { continue };
        let (periods, throttled, usec) = parse_cpu_stat(&text, version);
        // A v2 cpu.stat without the cpu controller has only usage: no throttling to read there.
        if periods.is_some() || throttled.is_some() {
            (reading.nr_periods, reading.nr_throttled, reading.throttled_usec) = (periods, throttled, usec);
            break;
        }
    }
    reading
}

/// Steal and total ticks of the summary `cpu` line: user, nice, system, idle, iowait, irq,
/// softirq and steal (guest time is already in user, so it is not added again). None when the
/// line stops before steal (an old kernel).
fn steal_and_total(cpu: &CpuTime) -> Option<(u64, u64)> {
    let steal = cpu.steal?;
    let ticks = [cpu.user, cpu.nice, cpu.system, cpu.idle, cpu.iowait?, cpu.irq?, cpu.softirq?, steal];
    Some((steal, ticks.iter().sum()))
}

/// The 1, 5 and 15 minute load averages as the kernel prints them, with two decimals (procfs
/// reads them as `f32`, rounded back here so 0.52 stays 0.52). None if one is not a finite,
/// non-negative number.
fn load_averages(load: &LoadAverage) -> Option<[f64; 3]> {
    let printed = |v: f32| {
        let v = (f64::from(v) * 100.0).round() / 100.0;
        (v.is_finite() && v >= 0.0).then_some(v)
    };
    Some([printed(load.one)?, printed(load.five)?, printed(load.fifteen)?])
}

/// nr_periods, nr_throttled and the throttled time in microseconds of a `cpu.stat`.
fn parse_cpu_stat(text: &str, version: Version) -> (Option<u64>, Option<u64>, Option<u64>) {
    let mut out = (None, None, None);
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(key), Some(Ok(value))) = (parts.next(), parts.next().map(str::parse::<u64>)) else { continue };
        match (key, version) {
            ("nr_periods", _) => out.0 = Some(value),
            ("nr_throttled", _) => out.1 = Some(value),
            ("throttled_usec", Version::V2) => out.2 = Some(value),
            ("throttled_time", Version::V1) => out.2 = Some(value / 1000),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/stat` with these cpu lines and the other lines procfs requires.
    fn stat(cpu_lines: &str) -> String {
        format!("{cpu_lines}intr 1 2 3\nctxt 99\nbtime 1700000000\nprocesses 4321\nprocs_running 2\nprocs_blocked 0\n")
    }

    /// Steal and total ticks of a `/proc/stat` text, as [`read`] takes them.
    fn steal(text: &str) -> Option<(u64, u64)> {
        let stat = KernelStats::from_read(text.as_bytes(), procfs::current_system_info()).ok()?;
        steal_and_total(&stat.total)
    }

    /// The load averages of a `/proc/loadavg` text, as [`read`] takes them.
    fn load(text: &str) -> Option<[f64; 3]> {
        load_averages(&LoadAverage::from_read(text.as_bytes()).ok()?)
    }

    /// A fixture root with `/proc/stat`, `/proc/loadavg` and one cgroup `cpu.stat`.
    fn root(cgroup: Option<(&str, &str)>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::write(
            dir.path().join("proc/stat"),
            stat("cpu  100 5 50 800 10 1 2 32 7 0\ncpu0 50 2 25 400 5 0 1 16 0 0\n"),
        )
        .unwrap();
        std::fs::write(dir.path().join("proc/loadavg"), "1.50 0.75 0.25 2/345 6789\n").unwrap();
        if let Some((path, text)) = cgroup {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn reads_steal_load_and_cgroup_v2_throttling() {
        let dir = root(Some((
            "sys/fs/cgroup/cpu.stat",
            "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 40\nnr_throttled 3\nthrottled_usec 250000\n",
        )));
        let r = read(dir.path());
        assert_eq!((r.steal_ticks, r.total_ticks), (Some(32), Some(1000)));
        assert_eq!(r.load, Some([1.5, 0.75, 0.25]));
        assert_eq!((r.nr_periods, r.nr_throttled, r.throttled_usec), (Some(40), Some(3), Some(250_000)));
    }

    #[test]
    fn falls_back_to_cgroup_v1_in_nanoseconds() {
        // v2's file without the cpu controller: usage only, so the v1 file is read.
        let dir =
            root(Some(("sys/fs/cgroup/cpu/cpu.stat", "nr_periods 12\nnr_throttled 6\nthrottled_time 3000000000\n")));
        std::fs::write(dir.path().join("sys/fs/cgroup/cpu.stat"), "usage_usec 5000\n").unwrap();
        let r = read(dir.path());
        assert_eq!((r.nr_periods, r.nr_throttled, r.throttled_usec), (Some(12), Some(6), Some(3_000_000)));
    }

    #[test]
    fn what_cannot_be_read_is_left_out() {
        let dir = root(None);
        let r = read(dir.path());
        assert_eq!((r.nr_periods, r.nr_throttled, r.throttled_usec), (None, None, None));
        assert_eq!(read(&dir.path().join("missing")), Reading::default());
        assert_eq!(steal(&stat("cpu 1 2 3 4 5 6 7\n")), None, "an old kernel's line without steal");
        assert_eq!(steal(&stat("cpu0 1 2 3 4 5 6 7 8\n")), None, "no summary line");
        assert_eq!(steal(&stat("cpu 1 2 x 4 5 6 7 8\n")), None);
        assert_eq!(load("0.1 nan 0.3 1/2 3"), None);
        assert_eq!(load("0.1 -0.2 0.3 1/2 3"), None);
        assert_eq!(load("0.1 0.2"), None);
    }

    #[test]
    fn steal_and_load_keep_the_kernels_figures() {
        // Guest and guest_nice are in user already: the total stops at steal.
        assert_eq!(steal(&stat("cpu  7 1 2 90 3 4 5 6 100 200\n")), Some((6, 118)));
        assert_eq!(steal(&stat("cpu  7 1 2 90 3 4 5 6\n")), Some((6, 118)), "a kernel without guest time");
        // Two decimals, exactly as printed (an f32 0.52 is 0.5199999809…).
        assert_eq!(load("0.52 12.34 1234.56 3/456 789\n"), Some([0.52, 12.34, 1234.56]));
    }
}
