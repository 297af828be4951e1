//! Memory of a user's processes: summed RSS, and summed PSS when every process has it (PSS needs
//! `/proc/PID/smaps_rollup`, which only ptrace-capable readers may open).

use std::path::Path;

use procfs::FromRead;
use procfs::process::{Process, SmapsRollup};
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

/// `Pss:` of a `smaps_rollup`, in bytes.
pub fn pss(rollup: &SmapsRollup) -> Option<u64> {
    rollup.memory_map_rollup.iter().find_map(|map| map.extension.map.get("Pss").copied())
}

/// `Pss:` of the text of a `smaps_rollup` file, in bytes.
pub fn parse_pss(smaps_rollup: &str) -> Option<u64> {
    pss(&SmapsRollup::from_read(smaps_rollup.as_bytes()).ok()?)
}

/// Samples the memory of `uid`'s live processes under `proc` (normally `/proc`).
pub fn sample(proc: &Path, uid: u32) -> MemorySample {
    let processes: Vec<ProcessMemory> = processes::of_user(proc, uid)
        .into_iter()
        .map(|p| {
            let rollup = Process::new_with_root(proc.join(p.pid.to_string())).and_then(|p| p.smaps_rollup());
            ProcessMemory {
                pid: p.pid,
                name: p.name,
                rss_bytes: p.rss_bytes,
                pss_bytes: rollup.ok().as_ref().and_then(pss),
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
            let status = crate::probes::processes::tests::status_text(
                pid.parse().unwrap(),
                &format!("p{pid}"),
                "S (sleeping)",
                *uid,
                Some(*rss_kib),
            );
            std::fs::write(p.join("status"), status).unwrap();
            if let Some(pss) = pss_kib {
                std::fs::write(p.join("smaps_rollup"), rollup(*rss_kib, *pss)).unwrap();
            }
        }
        dir
    }

    /// A real `smaps_rollup` (Linux 6.x).
    fn rollup(rss_kib: u64, pss_kib: u64) -> String {
        format!(
            "55f4c4a0d000-7ffd3a1f5000 ---p 00000000 00:00 0                          [rollup]\n\
             Rss:            {rss_kib} kB\nPss:            {pss_kib} kB\nPss_Dirty:        12 kB\n\
             Pss_Anon:         12 kB\nPss_File:       1000 kB\nShared_Clean:   1476 kB\nSwap:              0 kB\n\
             SwapPss:           0 kB\nLocked:            0 kB\n"
        )
    }

    #[test]
    fn reads_pss_from_smaps_rollup() {
        assert_eq!(parse_pss(&rollup(1588, 1234)), Some(1234 * 1024));
        assert_eq!(parse_pss("Rss: 10 kB\n"), None, "no header line");
        assert_eq!(parse_pss(""), None);
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
