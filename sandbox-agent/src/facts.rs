//! Facts about the sandbox the agent runs in, sent with `Hello` (kernel, CPU, memory, OS).

use sandbench_proto::v1::Facts;

pub fn collect() -> Facts {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    Facts {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
        cpu_model: field(&cpuinfo, "model name", ':').unwrap_or_default(),
        cpus: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(0),
        memory_bytes: field(&meminfo, "MemTotal", ':')
            .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or(0),
        os_release: field(&os_release, "PRETTY_NAME", '=').map(|v| v.trim_matches('"').to_string()).unwrap_or_default(),
    }
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
    use super::field;

    #[test]
    fn reads_proc_and_os_release_fields() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n";
        assert_eq!(field(cpuinfo, "model name", ':').as_deref(), Some("AMD EPYC 7B13"));
        let os = "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(field(os, "PRETTY_NAME", '=').as_deref(), Some("\"Debian GNU/Linux 12 (bookworm)\""));
        assert_eq!(field("MemTotal:  1024 kB\n", "MemFree", ':'), None);
    }
}
