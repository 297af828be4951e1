//! Facts about the sandbox the agent runs in, sent with `Hello` (kernel, CPU, memory, OS). The
//! CPU model and the memory come from `/proc/cpuinfo` and `/proc/meminfo`, parsed by `procfs`.

use procfs::{CpuInfo, Current, Meminfo, ProcResult};
use sandbench_proto::v1::Facts;

pub fn collect() -> Facts {
    let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    Facts {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
        cpu_model: cpu_model(CpuInfo::current()),
        cpus: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(0),
        memory_bytes: memory_bytes(Meminfo::current()),
        os_release: field(&os_release, "PRETTY_NAME", '=').map(|v| v.trim_matches('"').to_string()).unwrap_or_default(),
    }
}

/// The model name of the first CPU; empty if it cannot be read.
fn cpu_model(info: ProcResult<CpuInfo>) -> String {
    info.ok().and_then(|info| info.model_name(0).map(str::to_string)).unwrap_or_default()
}

/// The usable RAM (`MemTotal`) in bytes; 0 if it cannot be read.
fn memory_bytes(info: ProcResult<Meminfo>) -> u64 {
    info.map(|info| info.mem_total).unwrap_or(0)
}

/// The value of the first `key<sep>value` line.
fn field(text: &str, key: &str, sep: char) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(sep)?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use procfs::FromRead;

    use super::*;

    #[test]
    fn reads_proc_and_os_release_fields() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n\n\
                       processor\t: 1\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n\n";
        assert_eq!(cpu_model(CpuInfo::from_read(cpuinfo.as_bytes())), "AMD EPYC 7B13");
        assert_eq!(cpu_model(CpuInfo::from_read("processor\t: 0\nflags\t: fpu\n".as_bytes())), "");
        let meminfo = [
            "MemTotal",
            "MemFree",
            "Buffers",
            "Cached",
            "SwapCached",
            "Active",
            "Inactive",
            "SwapTotal",
            "SwapFree",
            "Dirty",
            "Writeback",
            "Mapped",
            "Slab",
            "Committed_AS",
            "VmallocTotal",
            "VmallocUsed",
            "VmallocChunk",
        ]
        .iter()
        .enumerate()
        .map(|(i, key)| format!("{key}:  {} kB\n", if i == 0 { 2048 } else { 7 }))
        .collect::<String>();
        assert_eq!(memory_bytes(Meminfo::from_read(meminfo.as_bytes())), 2048 * 1024);
        assert_eq!(memory_bytes(Meminfo::from_read("MemFree:  1024 kB\n".as_bytes())), 0, "no MemTotal");
        let os = "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(field(os, "PRETTY_NAME", '=').as_deref(), Some("\"Debian GNU/Linux 12 (bookworm)\""));
        assert_eq!(field("NAME=x\n", "PRETTY_NAME", '='), None);
    }

    #[test]
    fn reads_the_real_proc_files() {
        let facts = collect();
        assert!(facts.memory_bytes > 0, "{facts:?}");
        assert!(!facts.kernel.is_empty(), "{facts:?}");
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        assert_eq!(!facts.cpu_model.is_empty(), cpuinfo.contains("model name"), "{facts:?}");
    }
}
