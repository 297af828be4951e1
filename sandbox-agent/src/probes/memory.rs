//! Memory of a user's processes: summed RSS, and summed PSS when every process has it (PSS needs
//! `/proc/PID/smaps_rollup`, which only ptrace-capable readers may open).

use std::path::Path;

use serde::Serialize;

use super::processes;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessMemory {
    pub pid: i32,
    pub name: String,
    pub rss_bytes: u64,
    pub pss_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemorySample {
    pub processes: Vec<ProcessMemory>,
    pub rss_bytes: u64,
    /// None unless every process reported PSS.
    pub pss_bytes: Option<u64>,
}

/// `Pss:` of `smaps_rollup`, in bytes.
pub fn parse_pss(smaps_rollup: &str) -> Option<u64> {
    smaps_rollup.lines().find_map(|l| {
        let v = l.strip_prefix("Pss:")?;
        v.trim().trim_end_matches("kB").trim().parse::<u64>().ok().map(|kib| kib * 1024)
    })
}

/// Samples the memory of `uid`'s live processes under `proc` (normally `/proc`).
pub fn sample(proc: &Path, uid: u32) -> MemorySample {
    let processes: Vec<ProcessMemory> = processes::of_user(proc, uid)
        .into_iter()
        .map(|p| {
            let rollup = std::fs::read_to_string(proc.join(p.pid.to_string()).join("smaps_rollup")).ok();
            ProcessMemory {
                pid: p.pid,
                name: p.name,
                rss_bytes: p.rss_bytes,
                pss_bytes: rollup.as_deref().and_then(parse_pss),
            }
        })
        .collect();
    let rss_bytes = processes.iter().map(|p| p.rss_bytes).sum();
    let pss_bytes = processes.iter().map(|p| p.pss_bytes).sum::<Option<u64>>();
    MemorySample { pss_bytes: if processes.is_empty() { None } else { pss_bytes }, rss_bytes, processes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_tree(entries: &[(&str, u32, u64, Option<u64>)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (pid, uid, rss_kib, pss_kib) in entries {
            let p = dir.path().join(pid);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(
                p.join("status"),
                format!("Name:\tp{pid}\nState:\tS\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nVmRSS:\t{rss_kib} kB\n"),
            )
            .unwrap();
            if let Some(pss) = pss_kib {
                std::fs::write(
                    p.join("smaps_rollup"),
                    format!("00400000-7fff [rollup]\nRss:\t{rss_kib} kB\nPss:\t{pss} kB\n"),
                )
                .unwrap();
            }
        }
        dir
    }

    #[test]
    fn sums_rss_and_pss_of_the_users_processes() {
        let proc = proc_tree(&[("10", 2001, 100, Some(60)), ("11", 2001, 50, Some(30)), ("12", 0, 999, Some(999))]);
        let s = sample(proc.path(), 2001);
        assert_eq!(s.rss_bytes, 150 * 1024);
        assert_eq!(s.pss_bytes, Some(90 * 1024));
        assert_eq!(s.processes.len(), 2);
    }

    #[test]
    fn pss_is_absent_unless_every_process_has_it() {
        let proc = proc_tree(&[("10", 2001, 100, Some(60)), ("11", 2001, 50, None)]);
        let s = sample(proc.path(), 2001);
        assert_eq!(s.rss_bytes, 150 * 1024);
        assert_eq!(s.pss_bytes, None);
        assert_eq!(sample(proc.path(), 4242), MemorySample { processes: vec![], rss_bytes: 0, pss_bytes: None });
    }
}
